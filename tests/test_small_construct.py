"""A CONSTRUCT answered by its fast program (engine/small_answers.py construct_triples)
gives the general evaluator's triples: random templates over fast WHERE shapes, with
template terms the WHERE binds as subjects, predicates or objects only (literals and
blank nodes that cannot be subjects or predicates), unbound variables, constants in and
out of the store and constants of the WHERE; each shape answered again for another
constant (a rebound program)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query
from engine.plan.planner import QueryPlan, make_plan
from engine.sparql.parser import parse_query

P = "PREFIX : <http://ex.org/> "


@pytest.fixture(scope="module")
def db():
    d = Database(shards=2)
    triples = []
    for i in range(12):
        triples.append(f":s{i} :p :o{i % 4} .")
        triples.append(f":s{i} :q {i} .")
        triples.append(f":s{i} :b _:n{i % 3} .")
        triples.append(f":o{i % 4} :r :s{(i * 5) % 12} .")
        triples.append(f"_:n{i % 3} :p \"lit{i % 2}\"@en .")
    d.update(P + "INSERT DATA { " + " ".join(triples) + " }")
    return d


#: WHERE shapes with one constant {c} (a subject :sN) and the variables they bind
WHERES = [
    ("{c} :p ?o . ?o :r ?x", ("?o", "?x")),
    ("{c} :q ?o", ("?o",)),
    ("{c} :b ?o . ?o :p ?x", ("?o", "?x")),
    ("{c} ?p ?o", ("?p", "?o")),
    ("?x :r {c} . ?x :p ?o", ("?x", "?o")),
    ("?x ?p {c}", ("?x", "?p")),
    ("{c} ?p ?o . ?o ?q ?x", ("?p", "?o", "?q", "?x")),
    ("{c} :p ?o . ?o ?p ?x", ("?o", "?p", "?x")),
]
_TERMS = ["{c}", ":p", ":new", '"lit"', "?u", ":s3"]


@st.composite
def _query(draw):
    where, bound = draw(st.sampled_from(WHERES))
    pool = list(bound) + _TERMS
    preds = [t for t in pool if not t.startswith('"')]  # (a literal predicate is a syntax error)
    tpl = draw(st.lists(st.tuples(st.sampled_from(pool), st.sampled_from(preds), st.sampled_from(pool)),
                        min_size=1, max_size=4))
    body = " . ".join(" ".join(t) for t in tpl)
    return "CONSTRUCT { " + body + " } WHERE { " + where + " }"


def _general(db, text):
    q = parse_query(P + text)
    snap = db.store.snapshot()
    ctx = QueryContext(snap, timeout=30, max_rows=db.max_rows)
    res = evaluate_query(q, ctx, DatasetView(snap.default, snap.named), plan=QueryPlan(q, q.pattern, None))
    return sorted(res.triple_keys())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(_query(), st.lists(st.integers(0, 11), min_size=2, max_size=3))
def test_fast_construct_gives_the_general_triples(db, shape, subjects):
    for i in subjects:  # the first text compiles the shape, the next ones rebind it
        text = shape.replace("{c}", f":s{i}")
        got = db.query(P + text)
        assert got.form == "CONSTRUCT"
        assert sorted(got.triple_keys()) == _general(db, text), text


def test_the_fast_path_answers_these_shapes():
    for where, _ in WHERES:
        q = parse_query(P + "CONSTRUCT { ?o :k :s1 } WHERE { " + where.replace("{c}", ":s1") + " }")
        assert make_plan(q).fast is not None, where


def test_tuple_at_a_time_triples_write_as_the_general_writer(db):
    """A CONSTRUCT answered tuple at a time comes as ``small_answers.Constructed`` (its ids
    as a flat list): the small N-Triples writer reads the list, and its bytes equal the
    general writer's over the same triples as an array (the other writers read that)."""
    from engine import formats
    from engine.exec import serialize as ser
    from engine.exec.result import QueryResult
    from engine.small_answers import Constructed, graph_ntriples

    seen = 0
    for where, bound in WHERES:
        for i in range(12):
            text = P + "CONSTRUCT { " + f"{bound[-1]} :r :s{i} . :s{i} :p {bound[0]}" + " } WHERE { " \
                + where.replace("{c}", f":s{i}") + " }"
            res = db.query(text)
            if type(res) is not Constructed:
                continue
            seen += 1
            plain = QueryResult(form="CONSTRUCT", terms=res.terms, triples=res.triples)
            assert graph_ntriples(res) == ser.serialize(plain, formats.NTRIPLES)
            assert ser.serialize(res, "text/turtle") == ser.serialize(plain, "text/turtle")
            assert len(res) == len(plain)
    assert seen >= 40
