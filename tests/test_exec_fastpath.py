"""The small-history fast path (per-snapshot compiled pure-BGP SELECT/ASK):
answers change with every commit, agree (rows and order) with the general
evaluator on random BGPs, and fall back where they must."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.errors import QueryTimeout, RowBudgetExceeded
from engine.exec import bgp as bgp_mod
from engine.exec import evaluate as evaluate_mod
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query

P = "PREFIX : <http://ex.org/> "


def rows(db, q, **kw):
    return db.query(P + q, **kw).rows()


def general(db, q):
    """The answer of the general evaluator (no fast path), same snapshot."""
    pq = db._prepare(P + q, None)
    snap = db.store.snapshot()
    ctx = QueryContext(snap, timeout=30, max_rows=db.max_rows)
    return evaluate_query(pq.query, ctx, DatasetView(snap.default, snap.named))


def used_fast(db, q) -> bool:
    pq = db._prepared.get((P + q, None))
    return pq is not None and pq.state is not None and pq.state[2] is not None


def as_rows(res):
    if res.form == "ASK":
        return res.boolean
    return [tuple(c[i] for c in (res.terms.keys(col) for col in res.columns)) for i in range(len(res))]


def test_updates_invalidate_compiled_queries():
    db = Database(shards=2)
    q = "SELECT ?y ?z WHERE { :a :p ?y . ?y :q ?z }"
    assert rows(db, q) == []
    db.update(P + "INSERT DATA { :a :p :b }")
    assert rows(db, q) == []
    db.update(P + "INSERT DATA { :b :q :c }")
    assert rows(db, q) == [{"y": "<http://ex.org/b>", "z": "<http://ex.org/c>"}]
    assert used_fast(db, q)
    for _ in range(3):  # repeated runs on one snapshot reuse the program
        assert rows(db, q) == [{"y": "<http://ex.org/b>", "z": "<http://ex.org/c>"}]
    db.update(P + "INSERT DATA { :a :p :d . :d :q :e . :d :q :f }")
    assert sorted(tuple(r.values()) for r in rows(db, q)) == [("<http://ex.org/b>", "<http://ex.org/c>"),
                                                              ("<http://ex.org/d>", "<http://ex.org/e>"),
                                                              ("<http://ex.org/d>", "<http://ex.org/f>")]
    db.update(P + "DELETE DATA { :b :q :c }")
    assert sorted(r["z"] for r in rows(db, q)) == ["<http://ex.org/e>", "<http://ex.org/f>"]
    db.update(P + "DELETE WHERE { ?s :q ?o }")
    assert rows(db, q) == []
    assert db.query(P + "ASK { :a :p :d }").boolean
    db.update(P + "DROP DEFAULT")
    assert not db.query(P + "ASK { :a :p :d }").boolean
    assert rows(db, q) == []


def test_constants_absent_at_first_compile():
    db = Database(shards=4)
    db.update(P + "INSERT DATA { :x :p :y }")
    q = "SELECT ?o WHERE { :new :p ?o }"
    assert rows(db, q) == []  # :new is not in the dictionary yet
    db.update(P + "INSERT DATA { :new :p 7 }")
    assert rows(db, q) == [{"o": '"7"^^<http://www.w3.org/2001/XMLSchema#integer>'}]
    a = "ASK { :zz :p :y }"
    assert db.query(P + a).boolean is False
    db.update(P + "INSERT DATA { :zz :p :y }")
    assert db.query(P + a).boolean is True


def test_graph_store_and_load_invalidate():
    db = Database(shards=2)
    q = "SELECT ?o WHERE { :s :p ?o }"
    db.graph_put(None, "<http://ex.org/s> <http://ex.org/p> <http://ex.org/o1> .", "application/n-triples")
    assert [r["o"] for r in rows(db, q)] == ["<http://ex.org/o1>"]
    db.graph_post(None, "<http://ex.org/s> <http://ex.org/p> <http://ex.org/o2> .", "application/n-triples")
    assert sorted(r["o"] for r in rows(db, q)) == ["<http://ex.org/o1>", "<http://ex.org/o2>"]
    db.load_data("<http://ex.org/s> <http://ex.org/p> <http://ex.org/o0> .", "application/n-triples")
    assert sorted(r["o"] for r in rows(db, q)) == ["<http://ex.org/o0>", "<http://ex.org/o1>", "<http://ex.org/o2>"]
    db.graph_put(None, "<http://ex.org/s> <http://ex.org/p> <http://ex.org/o9> .", "application/n-triples")
    assert [r["o"] for r in rows(db, q)] == ["<http://ex.org/o9>"]


def test_dataset_overrides_and_from_bypass_the_fast_path():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { :a :p :b . GRAPH :g { :a :p :c } }")
    q = "SELECT ?o WHERE { :a :p ?o }"
    assert [r["o"] for r in rows(db, q)] == ["<http://ex.org/b>"]
    assert [r["o"] for r in rows(db, q, default_graph_uris=["http://ex.org/g"])] == ["<http://ex.org/c>"]
    assert [r["o"] for r in rows(db, "SELECT ?o FROM :g WHERE { :a :p ?o }")] == ["<http://ex.org/c>"]
    assert [r["o"] for r in rows(db, q)] == ["<http://ex.org/b>"]


def test_budgets_still_apply():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { " + " ".join(f":a :p :o{i} ." for i in range(50)) + " }")
    q = "SELECT ?o WHERE { :a :p ?o }"
    assert len(rows(db, q)) == 50
    with pytest.raises(RowBudgetExceeded):
        db.query(P + q, max_rows=10)
    for limits in ((40, 512), (1000, 1000)):
        with thresholds(*limits), pytest.raises(RowBudgetExceeded):
            db.query(P + "SELECT ?o WHERE { :a :p ?o . ?o :p ?o }", max_rows=20)
        with thresholds(*limits), pytest.raises(RowBudgetExceeded):
            db.query(P + "SELECT * WHERE { :a :p :o1 . :a :p ?o }", max_rows=20)
    assert len(rows(db, q)) == 50
    with pytest.raises(QueryTimeout):
        db.query(P + "SELECT ?o ?x WHERE { :a :p ?o . :a :p ?x }", timeout=1e-12)


def test_large_histories_are_handed_to_the_vectorized_steps():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { " + " ".join(f":a :p :o{i} . :o{i} :q :r{j} ." for i in range(40)
                                             for j in range(20)) + " }")
    q = "SELECT ?o ?r WHERE { :a :p ?o . ?o :q ?r }"
    res = db.query(P + q)
    assert len(res) == 800
    prog = db._prepared[(P + q, None)].state[2][0]
    rows, k = prog.run([()], 512)
    assert k == 1 and len(rows) == 40  # the second step runs vectorized
    assert as_rows(res) == as_rows(general(db, q))
    q2 = "SELECT DISTINCT ?r WHERE { :a :p ?o . ?o :q ?r } LIMIT 5 OFFSET 3"
    assert as_rows(db.query(P + q2)) == as_rows(general(db, q2))
    assert db.query(P + "ASK { :a :p ?o . ?o :q :r19 }").boolean


def test_modifiers_distinct_slice_unbound_projection():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { :a :p :b , :c , :d . :b :q 1 . :c :q 1 . :d :q 2 }")
    for q in ("SELECT DISTINCT ?v WHERE { :a :p ?x . ?x :q ?v }",
              "SELECT ?v WHERE { :a :p ?x . ?x :q ?v } LIMIT 2",
              "SELECT ?v WHERE { :a :p ?x . ?x :q ?v } OFFSET 1",
              "SELECT DISTINCT ?v WHERE { :a :p ?x . ?x :q ?v } LIMIT 1 OFFSET 1",
              "SELECT ?nope ?x WHERE { :a :p ?x }",
              "SELECT DISTINCT ?nope WHERE { :a :p ?x }",
              "SELECT * WHERE { :a :p ?x . ?x :q ?v }",
              "SELECT ?x WHERE { :a :p ?x . ?x :q 1 }",
              "SELECT ?x WHERE { :a :p :b . :b :q ?x }",
              "SELECT ?x WHERE { :a :p :zz . :b :q ?x }",
              "ASK { :a :p ?x . ?x :q 2 }",
              "ASK { :a :p ?x . ?x :q 3 }"):
        assert as_rows(db.query(P + q)) == as_rows(general(db, q)), q
        assert used_fast(db, q), q


# ---------------------------------------------------------------- random BGPs


@contextmanager
def thresholds(few: int, rows_: int):
    """Small hand-over thresholds, so that tiny graphs exercise the hand-over
    from the tuple-at-a-time steps to the vectorized ones at every step."""
    saved = bgp_mod.SMALL_FEW, bgp_mod.SMALL_ROWS, evaluate_mod.SMALL_ROWS
    bgp_mod.SMALL_FEW, bgp_mod.SMALL_ROWS, evaluate_mod.SMALL_ROWS = few, rows_, rows_
    try:
        yield
    finally:
        bgp_mod.SMALL_FEW, bgp_mod.SMALL_ROWS, evaluate_mod.SMALL_ROWS = saved


NODES = [f":n{i}" for i in range(4)] + ['"1"']
PREDS = [":p", ":q"]


@st.composite
def graphs(draw):
    triples = draw(st.lists(st.tuples(st.sampled_from(NODES[:4]), st.sampled_from(PREDS), st.sampled_from(NODES)),
                            min_size=6, max_size=30))
    return sorted(set(triples))


VARS = ["?a", "?b", "?c", "?d"]


@st.composite
def queries(draw):
    n = draw(st.integers(1, 4))
    pats = []
    if draw(st.booleans()):  # a chain/star from a constant: mostly non-empty answers
        pats.append(f"{draw(st.sampled_from(NODES[:4]))} {draw(st.sampled_from(PREDS))} ?a .")
        n -= 1
    for _ in range(n):
        s = draw(st.sampled_from(VARS[:2] * 3 + VARS[2:] + NODES[:4] + [":absent"]))
        p = draw(st.sampled_from(PREDS * 4 + [":absent"]))
        o = draw(st.sampled_from(VARS * 2 + NODES))
        pats.append(f"{s} {p} {o} .")
    used = [v for v in VARS if any(v in t for t in pats)]
    proj = draw(st.lists(st.sampled_from(VARS), min_size=1, max_size=3, unique=True)) if used else ["?a"]
    distinct = draw(st.booleans())
    mod = draw(st.sampled_from(["", " LIMIT 3", " OFFSET 2", " LIMIT 2 OFFSET 1"]))
    if draw(st.integers(0, 5)) == 0:
        return "ASK { " + " ".join(pats) + " }"
    return ("SELECT " + ("DISTINCT " if distinct else "") + " ".join(proj) + " WHERE { " + " ".join(pats)
            + " }" + mod)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.lists(queries(), min_size=1, max_size=4), st.sampled_from([1, 2, 4]),
       st.sampled_from([(40, 512), (2, 4), (1, 1), (0, 0)]))
def test_fast_path_agrees_with_general_path(triples, qs, shards, limits):
    db = Database(shards=shards)
    if triples:
        db.update(P + "INSERT DATA { " + " ".join(f"{s} {p} {o} ." for s, p, o in triples) + " }")
    with thresholds(*limits):
        for q in qs:
            assert as_rows(db.query(P + q)) == as_rows(general(db, q)), q
        # and after a commit that changes the graph
        db.update(P + "INSERT DATA { :n0 :p :n1 . :n1 :q :n2 . :n2 :r :n0 }")
        for q in qs:
            assert as_rows(db.query(P + q)) == as_rows(general(db, q)), q


@st.composite
def compound_queries(draw):
    """BGPs inside OPTIONAL / joins / FILTER / UNION / EXISTS: the evaluator runs
    them through the small executor seeded with the left rows."""
    def bgp():
        return draw(queries()).split("{", 1)[1].rsplit("}", 1)[0]

    shape = draw(st.integers(0, 4))
    a, b = bgp(), bgp()
    if shape == 0:
        body = f"{a} OPTIONAL {{ {b} }}"
    elif shape == 1:
        body = f"{{ {a} }} {{ {b} }}"
    elif shape == 2:
        body = f"{a} FILTER(?a != :n1)"
    elif shape == 3:
        body = f"{{ {a} }} UNION {{ {b} }}"
    else:
        body = f"{a} FILTER EXISTS {{ {b} }}"
    return "SELECT * WHERE { " + body + " }"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.lists(compound_queries(), min_size=1, max_size=3), st.sampled_from([1, 2, 4]),
       st.sampled_from([(40, 512), (2, 4), (0, 0)]))
def test_small_executor_in_the_evaluator_agrees(triples, qs, shards, limits):
    db = Database(shards=shards)
    db.update(P + "INSERT DATA { " + " ".join(f"{s} {p} {o} ." for s, p, o in triples) + " }")
    with thresholds(*limits):
        for q in qs:
            assert as_rows(db.query(P + q)) == as_rows(general(db, q)), q


def test_members_handles_dtypes_and_foreign_ids():
    import numpy as np  # noqa: PLC0415

    from engine.exec.bgp import _members  # noqa: PLC0415

    for dt in (np.int32, np.int64):
        for k in (5, 100):
            nb = np.arange(0, 3 * k, 3, dtype=dt)
            for vals in ([3, 4], [0, 1, 3, 2 ** 40, -1, 3 * (k - 1), 3 * k, 6, 7, 9, 2 ** 31]):
                assert _members(nb, vals) == [0 <= v < 3 * k and v % 3 == 0 for v in vals]
    assert _members(np.zeros(0, np.int32), [1, 2]) == [False, False]


@pytest.mark.parametrize("n_types", [20, 100])
@pytest.mark.parametrize("n_rows", [5, 60])
def test_constant_end_prunes_many_rows(n_types, n_rows):
    db = Database(shards=4)
    db.update(P + "INSERT DATA { " + " ".join(f":c{i} a :T ." for i in range(0, n_types))
              + " ".join(f":x :p :c{i} . :c{i} :q :x ." for i in range(0, 2 * n_rows, 2)) + " }")
    with thresholds(1000, 1000):
        for q in ("SELECT ?c WHERE { :x :p ?c . ?c a :T }", "SELECT ?c WHERE { :x :p ?c . ?c :q :x }",
                  "SELECT ?c WHERE { ?c :q :x . :x :p ?c }"):
            res = db.query(P + q)
            assert as_rows(res) == as_rows(general(db, q)), q
            assert used_fast(db, q)


def test_stale_programs_are_dropped_on_a_new_snapshot():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { :a :p :b . :b :q :c }")
    q1, q2 = "SELECT ?x WHERE { :a :p ?x }", "SELECT ?x WHERE { :b :q ?x }"
    rows(db, q1)
    rows(db, q2)
    assert db._prepared[(P + q2, None)].state is not None
    db.update(P + "INSERT DATA { :a :p :d }")
    assert len(rows(db, q1)) == 2
    assert db._prepared[(P + q2, None)].state is None  # no program pins the old snapshot
    assert rows(db, q2) == [{"x": "<http://ex.org/c>"}]
