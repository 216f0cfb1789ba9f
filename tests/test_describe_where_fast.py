"""``DESCRIBE ?v... WHERE { BGP }`` as a fast shape (engine/plan/planner.py ``fast_shape``,
engine/database.py ``_describe_fast``): its program's solutions, as the SELECT of the
described variables, are described tuple at a time, so a new text of a known shape is a
template hit (and, over HTTP, a lane runner's) instead of a parse. Random graphs and
WHERE shapes: the same triples in the same order as the general DESCRIBE (tuple at a time
and vectorized); the path is taken (a spy); a hub past SMALL_ROWS solutions and more than
DESCRIBE_RESOURCES resources answer as the general path does; over HTTP the runner
answers byte for byte what the parsed path does."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.database as database
import engine.exec.evaluate as evaluate
from engine.database import Database
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query
from engine.plan import point
from engine.plan.planner import QueryPlan, make_plan
from engine.sparql.parser import parse_query
from tests.test_describe_oracle import _graph_nt, _node, _obj, _triple
from tests.test_lane_repeated_texts import _get, serving
from tests.test_lane_runners import _general as _parsed_only
from tests.test_lane_runners import runner_spy

#: WHERE shapes with one constant {c}, and the variables DESCRIBE names
SHAPES = [
    "DESCRIBE ?x WHERE {{ ?x <http://x/p{p}> {c} }}",
    "DESCRIBE ?y WHERE {{ {c} <http://x/p{p}> ?y }}",
    "DESCRIBE ?x ?y WHERE {{ {c} <http://x/p{p}> ?x . ?x <http://x/p{q}> ?y }}",
    "DESCRIBE ?y ?x WHERE {{ ?x <http://x/p{p}> {c} . ?x <http://x/p{q}> ?y }}",
    "DESCRIBE * WHERE {{ {c} ?p ?o }}",
    "DESCRIBE ?o WHERE {{ {c} ?p ?o }}",
]
OBJECT_SHAPES = (SHAPES[0], SHAPES[3])


def _general(db, text):
    q = parse_query(text)
    snap = db.store.snapshot()
    ctx = QueryContext(snap, timeout=30, max_rows=db.max_rows)
    return evaluate_query(q, ctx, DatasetView(snap.default, snap.named), plan=QueryPlan(q, q.pattern, None))


def _spy(monkeypatch) -> list:
    calls = []
    real = database._describe_fast

    def spy(*a):
        got = real(*a)
        calls.append(got)
        return got

    monkeypatch.setattr(database, "_describe_fast", spy)
    return calls


def test_the_fast_shapes():
    for shape in SHAPES:
        text = shape.format(p=0, q=1, c="<http://x/e1>")
        fast = make_plan(parse_query(text)).fast
        assert fast is not None and fast.describe, text
    for text in ("DESCRIBE ?x <http://x/e1> WHERE { ?x <http://x/p0> ?y }",  # (a constant too)
                 "DESCRIBE ?x WHERE { ?x <http://x/p0> ?y } LIMIT 2",
                 "DESCRIBE ?x WHERE { ?x <http://x/p0> ?y OPTIONAL { ?y <http://x/p1> ?z } }",
                 "DESCRIBE ?z WHERE { ?x <http://x/p0> ?y }",  # (a variable the WHERE does not bind)
                 "DESCRIBE <http://x/e1>"):
        fast = make_plan(parse_query(text)).fast
        assert fast is None or not fast.describe, text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_triple, min_size=1, max_size=40), shape=st.sampled_from(SHAPES),
       p=st.integers(0, 3), q=st.integers(0, 3), consts=st.lists(st.integers(0, 13), min_size=2, max_size=4))
def test_as_the_general_describe(monkeypatch, rows, shape, p, q, consts):
    db = Database()
    db.load_data(_graph_nt(rows).encode(), "application/n-triples")
    calls = _spy(monkeypatch)
    try:
        for i, c in enumerate(consts):  # (the first text compiles the shape, the next ones rebind it)
            # ({c} as an object: any term; as a subject: an IRI or a blank node)
            term = _obj(c) if shape in OBJECT_SHAPES else _node(c % 10)
            text = shape.format(p=p, q=q, c=term)
            got = db.query(f"{text} # {i}")
            want = _general(db, text)
            assert got.form == "DESCRIBE"
            assert got.triples.tolist() == want.triples.tolist(), text
            with monkeypatch.context() as m:  # the vectorized DESCRIBE: the same too
                m.setattr(evaluate, "describe_small", lambda *a, **kw: None)
                assert _general(db, text).triples.tolist() == want.triples.tolist(), text
        assert any(isinstance(g, point.Described) for g in calls) or not calls
    finally:
        db.close()


def _chain_db(n: int) -> Database:
    db = Database()
    db.load_data("".join(f"<http://x/e{i}> <http://x/p> <http://x/hub> .\n<http://x/e{i}> <http://x/q> _:b{i} .\n"
                         f"_:b{i} <http://x/r> \"{i}\" .\n<http://x/e{i}> <http://x/s> <http://x/e{(i + 1) % n}> .\n"
                         for i in range(n)).encode(), "application/n-triples")
    return db


def test_it_is_taken(monkeypatch):
    db = _chain_db(40)
    calls = _spy(monkeypatch)
    for i in range(6):
        res = db.query(f"DESCRIBE ?y WHERE {{ <http://x/e{i}> <http://x/s> ?y }}")
        assert isinstance(res, point.Described) and len(res) == 4
        assert res.triples.tolist() == _general(db, f"DESCRIBE ?y WHERE {{ <http://x/e{i}> <http://x/s> ?y }}"
                                                ).triples.tolist()
    assert len(calls) >= 5 and all(isinstance(g, point.Described) for g in calls)
    db.close()


def test_a_hub_and_many_resources_answer_as_the_general_path(monkeypatch):
    db = _chain_db(300)  # (300 solutions: past SMALL_ROWS and DESCRIBE_RESOURCES)
    text = "DESCRIBE ?x WHERE { ?x <http://x/p> <http://x/hub> }"
    res = db.query(text)
    want = _general(db, text)
    assert len(res) == 300 * 4 and res.triples.tolist() == want.triples.tolist()
    monkeypatch.setattr(database, "DESCRIBE_RESOURCES", 1)  # (more resources than it describes alone)
    text = "DESCRIBE ?y WHERE { <http://x/e1> <http://x/s> ?y . <http://x/e3> <http://x/s> ?z }"
    assert db.query(text).triples.tolist() == _general(db, text).triples.tolist()
    db.close()


@pytest.fixture(scope="module")
def server():
    yield from serving("".join(f"<http://x/e{i}> <http://x/p> <http://x/k{i % 3}> .\n"
                               f"<http://x/e{i}> <http://x/q> _:b{i} .\n_:b{i} <http://x/r> \"{i}\" .\n"
                               f"<http://x/k{i % 3}> <http://x/n> \"k{i % 3}\" .\n" for i in range(12)))


@pytest.mark.parametrize("accept", ["application/n-triples", "text/turtle", "application/ld+json"])
def test_the_lanes_runner_answers_as_the_parsed_path(server, monkeypatch, accept):
    tpl = "DESCRIBE ?x WHERE {{ ?x <http://x/p> <{c}> }} # {k}\n"
    for i in range(3):
        assert _get(server, tpl.format(c=f"http://x/k{i}", k=f"learn{accept}{i}"), accept)[0] == 200
    calls = runner_spy(monkeypatch)
    texts = [tpl.format(c=c, k=f"new{accept}{j}") for j, c in enumerate(
        ["http://x/k1", "http://x/k2", "http://x/k0", "http://x/none", "http://x/e1"])]
    got = [_get(server, t, accept) for t in texts]
    assert sum(g is not None for g in calls) >= 2  # (taken; a loaded machine may send some to the pool)
    _parsed_only(monkeypatch)
    assert got == [_get(server, t.replace("new", "general"), accept) for t in texts]
    assert got[0][0] == 200 and all(b'"%d"' % i in got[0][2] for i in (1, 4, 7, 10))  # (k1's four, closed)


def test_describe_of_several_constants_is_a_template(monkeypatch):
    """``DESCRIBE <a> <b>...`` (2-4 distinct constants) is a template of as many parameters:
    a new text of its skeleton is a hit answered by ``describe_small`` (a spy), with the
    general DESCRIBE's triples in its order, absent constants and blank-node closures
    included; a repeated constant is no such shape (the general path answers it)."""
    db = _chain_db(20)
    calls = []
    real = database.Database._describe_tiny

    def spy(self, keys, *a):
        calls.append(list(keys))
        return real(self, keys, *a)

    monkeypatch.setattr(database.Database, "_describe_tiny", spy)
    for i in range(8):
        for text in (f"DESCRIBE <http://x/e{i}> <http://x/e{i + 5}>",
                     f"DESCRIBE <http://x/hub> <http://x/e{i}> <http://x/none{i}>",
                     f"DESCRIBE <http://x/e{i}> <http://x/e1> <http://x/e{i + 2}> <http://x/e{i + 9}>"):
            n = db._normalized(text)
            hit = db.match_template(n, None)
            got = db.query_template(hit) if hit is not None else db.query(text)
            assert got.triples.tolist() == _general(db, text).triples.tolist(), text
            assert db.query(text).triples.tolist() == got.triples.tolist(), text
            if i:
                assert hit is not None, text
    assert [f"<http://x/e{7}>", "<http://x/e12>"] in calls
    text = "DESCRIBE <http://x/e1> <http://x/e1>"
    assert database._shape_key(make_plan(parse_query(text))) is None
    assert db.query(text).triples.tolist() == _general(db, text).triples.tolist()
    db.close()


def test_a_skeleton_keeps_a_template_for_another_placement():
    """Slots are one marker in a skeleton whatever they hold: ``DESCRIBE <a> <b>`` (two
    parameters) and ``DESCRIBE <a> # note`` (one, a comment in the other slot) share one.
    Whichever is learned first, the other placement gets a template of its own
    (``_Template.alt``): both kinds of texts are hits, answered as the general path."""
    for first in ("two", "one"):
        db = _chain_db(12)
        two = "DESCRIBE <http://x/e{i}> <http://x/e{j}>"
        one = "DESCRIBE <http://x/e{i}> # note {j}"
        seq = [two, one] if first == "two" else [one, two]
        for tpl in seq:
            for i in range(3):
                db.query(tpl.format(i=i, j=i + 4))
        for tpl in seq:
            for i in range(4, 8):
                text = tpl.format(i=i, j=i + 1)
                hit = db.match_template(db._normalized(text), None)
                assert hit is not None, (first, text)
                got = db.query_template(hit)
                assert got.triples.tolist() == _general(db, text).triples.tolist(), text
        db.close()
