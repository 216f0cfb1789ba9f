"""Templates of one triple pattern with several constants (engine/database.py
``_fast_shape_key``): ``ASK { <a> <p> <b> }``, ``SELECT ?p { <a> ?p <b> }`` and the
like are templates of two parameters even where the predicate is a constant (one
pattern is one step: no order for the constants' fan-out to decide), so a new text of
the shape (other entities, a new comment) is a template hit, not a text to plan and
compile. The hit is taken (spy on ``match_template`` / ``_run_template``), answers as
pyoxigraph and as the text path of a fresh store do (constants in and out of the
store, both the same entity, the hub), and stars of two patterns with two constant
entities stay no templates (their step order reads the constants)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database, _shape_key
from engine.plan.planner import make_plan
from engine.sparql import normalize as norm
from engine.sparql.parser import parse_query
from tests.test_template_tiny import _graph, _rows

pyoxigraph = pytest.importorskip("pyoxigraph")

SHAPES = [
    "ASK {{ <{a}> <http://e/p0> <{b}> }}",
    "ASK {{ <{a}> <http://e/p1> <{b}> }}",
    "SELECT * WHERE {{ <{a}> <http://e/p0> <{b}> }}",
    "SELECT ?p WHERE {{ <{a}> ?p <{b}> }}",
    "ASK {{ <{a}> ?p <{b}> }}",
    "SELECT (1 AS ?one) WHERE {{ <{a}> <http://e/p1> <{b}> }}",
    "SELECT DISTINCT ?p WHERE {{ <{a}> ?p <{b}> }} LIMIT 1",
    "ASK {{ {{ <{a}> <http://e/p0> <{b}> }} UNION {{ <{b}> <http://e/p1> <{a}> }} }}",
]
#: the ones that are templates (a SELECT of no variable of the pattern has no fast shape;
#: a UNION of two constant-predicate patterns keeps the old rule)
TEMPLATES = [s for s in SHAPES if "SELECT *" not in s and "AS ?one" not in s and "UNION" not in s]
NODES = [f"http://e/n{i}" for i in range(12)] + ["http://e/h50", "http://e/missing"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    data = _graph(3)
    f = tmp_path_factory.mktemp("one") / "g.nt"
    f.write_text(data)
    db = Database()
    db.load_file(str(f))
    ox = pyoxigraph.Store()
    ox.load(data.encode(), pyoxigraph.RdfFormat.N_TRIPLES)
    return db, ox, str(f)


def _theirs(ox, text):
    res = ox.query(text)
    if not hasattr(res, "variables"):
        return bool(res)
    names = [v.value for v in res.variables]
    return sorted(tuple(None if s[n] is None else str(s[n]) for n in names) for s in res)


def _ours(res):
    got = _rows(res)
    if isinstance(got, bool):
        return got
    _vars, rows = got
    return sorted(rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_one_pattern_templates_answer_like_pyoxigraph(stores, data):
    db, ox, path = stores
    shape = data.draw(st.sampled_from(SHAPES))
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)), min_size=3, max_size=8))
    for i, (a, b) in enumerate(pairs):
        text = shape.format(a=a, b=b) + f"\n# {data.draw(st.integers(0, 10**6))}-{i}\n"
        got = db.query(text)
        assert _ours(got) == _theirs(ox, text), text


def test_one_pattern_templates_are_taken(stores, monkeypatch):
    _db, ox, path = stores
    db = Database()  # (its own: a template learned from <a> p <a> has one parameter)
    db.load_file(path)
    rnd = random.Random(5)
    assert len(TEMPLATES) == 5
    for shape in TEMPLATES:
        for i in range(2):  # the second text teaches the template
            db.query(shape.format(a=NODES[i], b=NODES[i + 1]) + f"\n# warm {i}\n")
        runs = []
        real = Database._run_template

        def spy(self, *a, _runs=runs, _real=real, **k):
            if self is db:
                _runs.append(a[1])
            return _real(self, *a, **k)

        monkeypatch.setattr(Database, "_run_template", spy)
        fresh = Database()
        fresh.load_file(path)
        for i in range(10):
            a, b = rnd.choice(NODES), rnd.choice(NODES)
            text = shape.format(a=a, b=b) + f"\n# {i}\n"
            hit = db.match_template(norm.normalize(text), None)
            assert hit is not None, text
            assert hit[1] == (f"<{a}>", f"<{b}>")
            assert _ours(db.query(text)) == _ours(fresh.query(text.replace("#", "# fresh"))) == _theirs(ox, text)
        assert len(runs) == 10, shape
        monkeypatch.setattr(Database, "_run_template", real)


def test_two_pattern_stars_of_two_constants_stay_no_templates():
    """Two patterns of constant predicates with two constant entities: the step
    order reads the constants' fan-out, so no template (the rule kept)."""
    for text in ("ASK { <http://e/a> <http://e/p0> ?x . ?x <http://e/p1> <http://e/b> }",
                 "SELECT ?x { <http://e/a> <http://e/p0> ?x . <http://e/b> <http://e/p1> ?x }"):
        assert _shape_key(make_plan(parse_query(text))) is None
    union = "ASK { { <http://e/a> <http://e/p0> <http://e/b> } UNION { <http://e/b> <http://e/p1> <http://e/a> } }"
    assert _shape_key(make_plan(parse_query(union))) is None
    sh = _shape_key(make_plan(parse_query("ASK { <http://e/a> <http://e/p0> <http://e/b> }")))
    assert sh is not None and sh[1] == ("<http://e/a>", "<http://e/b>")
