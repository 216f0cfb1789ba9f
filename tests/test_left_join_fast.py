"""The left join of an OPTIONAL over a BGP and the ``FILTER(!BOUND(?v))`` anti-join
(engine/exec/left_join.py): the same solutions as pyoxigraph and as the general join on
random graphs and random OPTIONAL queries, and spies that each path is taken (or not, where
its conditions do not hold)."""

from __future__ import annotations

from collections import Counter

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec import evaluate as ev_mod
from engine.exec import left_join

P = "PREFIX : <http://e/> "
_NODES = [f":s{i}" for i in range(6)]
_OBJS = _NODES + ["1", "2", "3", "40"]
_PREDS = [":p", ":q", ":r"]

#: (left pattern, tail after it): the tails put OPTIONAL in the forms the fast paths take
#: and the forms they must leave to the general join
_LEFTS = ["?a :p ?b", "?a :q ?b", "?a ?pp ?b", "?a :p ?b . ?b :q ?e"]
_TAILS = [
    "OPTIONAL { ?b :q ?c }",
    "OPTIONAL { ?c :r ?a }",
    "OPTIONAL { ?b :q ?c FILTER(?c != ?a) }",
    "OPTIONAL { ?b :q ?c . ?c :r ?d }",
    "OPTIONAL { ?b :q ?c . ?c :r ?d FILTER(?d > 1) }",
    "OPTIONAL { ?b :q ?c } FILTER(!BOUND(?c))",
    "OPTIONAL { ?b :r ?c . ?c :p ?d FILTER(?d != :s1) } FILTER(!BOUND(?d))",
    "OPTIONAL { ?b :q ?c FILTER(?c = :s1 || ?c = 2) } FILTER(!BOUND(?c))",
    "OPTIONAL { ?a :q ?c } OPTIONAL { ?b :r ?d }",
    "OPTIONAL { ?a :q ?c } OPTIONAL { ?c :r ?d }",
    "OPTIONAL { ?a :q ?c } OPTIONAL { ?c :r ?d } FILTER(!BOUND(?d))",
    "OPTIONAL { ?b :q ?c OPTIONAL { ?c :r ?d } }",
    "OPTIONAL { ?b :q ?c OPTIONAL { ?c :r ?d FILTER(?d != ?a) } }",
    "OPTIONAL { ?b :q ?c OPTIONAL { ?c :r ?d OPTIONAL { ?d :p ?e2 } } }",
    "OPTIONAL { ?a :q ?c . ?b :r ?c2 OPTIONAL { ?c :p ?a } }",
    "OPTIONAL { ?b :q ?c OPTIONAL { ?c :r ?d } FILTER(?c != ?a) }",
    "OPTIONAL { ?b :q ?b }",
    "OPTIONAL { ?b :q :s2 }",
    "OPTIONAL { ?b :q ?c } FILTER(!BOUND(?b))",
    "OPTIONAL { ?a :r ?b2 } FILTER(!BOUND(?b2) || ?a = :s0)",
    "OPTIONAL { ?b ?x ?c } FILTER(!BOUND(?x))",
    "OPTIONAL { ?b :q ?c FILTER(?c > ?b) }",
]


@st.composite
def graphs(draw) -> str:
    triples = draw(st.lists(st.tuples(st.sampled_from(_NODES), st.sampled_from(_PREDS), st.sampled_from(_OBJS)),
                            max_size=40))
    return "@prefix : <http://e/> .\n" + "".join(f"{s} {p} {o} .\n" for s, p, o in triples)


def _rows_db(db: Database, q: str) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in db.query(q).rows())


def _rows_ox(store: ox.Store, q: str) -> Counter:
    res = store.query(q)
    names = [v.value for v in res.variables]
    out = Counter()
    for sol in res:
        out[tuple(sorted((v, str(sol[v])) for v in names if sol[v] is not None))] += 1
    return out


def _general(monkeypatch):
    """The general path: no exploration from the left rows, no anti-join."""
    monkeypatch.setattr(ev_mod, "seed_ok", lambda seed, triples: False)
    monkeypatch.setattr(left_join, "anti_join", lambda ev, node, seed: None)


def _load(ttl: str) -> tuple[Database, ox.Store]:
    db = Database()
    if ttl.count("\n") > 1:
        db.load_data(ttl, "text/turtle")
    store = ox.Store()
    store.load(ttl.encode(), format=ox.RdfFormat.TURTLE)
    return db, store


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from(_LEFTS), st.sampled_from(_TAILS), st.booleans())
def test_optional_matches_pyoxigraph(ttl, left, tail, distinct):
    db, store = _load(ttl)
    q = P + f"SELECT {'DISTINCT ' if distinct else ''}* WHERE {{ {left} {tail} }}"
    assert _rows_db(db, q) == _rows_ox(store, q), q


@pytest.mark.parametrize("tail", _TAILS)
def test_fast_equals_general(tail, monkeypatch):
    ttl = "@prefix : <http://e/> .\n" + "".join(
        f":s{i % 6} {p} {o} .\n" for i, (p, o) in enumerate(
            [(":p", ":s1"), (":q", ":s2"), (":r", ":s0"), (":p", ":s3"), (":q", "2"), (":q", ":s1"),
             (":r", ":s4"), (":p", ":s4"), (":q", ":s3"), (":r", ":s2"), (":p", "1"), (":q", ":s5"),
             (":p", ":s2"), (":r", ":s1"), (":q", ":s0"), (":p", ":s5"), (":r", "3"), (":q", "40")]))
    db, _ = _load(ttl)
    queries = [P + f"SELECT * WHERE {{ {left} {tail} }}" for left in _LEFTS]
    fast = [_rows_db(db, q) for q in queries]
    _general(monkeypatch)
    db2, _ = _load(ttl)
    assert [_rows_db(db2, q) for q in queries] == fast


def _spy(db: Database, q: str) -> dict:
    before = dict(left_join.TAKEN)
    db.query(q)
    return {k: left_join.TAKEN[k] - before[k] for k in before}


@pytest.fixture
def small_db():
    ttl = "@prefix : <http://e/> .\n" + "".join(f":s{i} :p :s{(i + 1) % 6} .\n:s{i} :q {i} .\n" for i in range(0, 6, 2))
    ttl += ":s1 :p :s0 .\n:s3 :r :s2 .\n"
    db = Database()
    db.load_data(ttl, "text/turtle")
    return db


def test_left_join_path_taken(small_db):
    got = _spy(small_db, P + "SELECT * WHERE { ?a :p ?b OPTIONAL { ?b :q ?c } }")
    assert got == {"left": 1, "anti": 0, "top": 0, "seeded": 0}
    rows = small_db.query(P + "SELECT ?a ?c WHERE { ?a :p ?b OPTIONAL { ?b :q ?c } }").rows()
    assert len(rows) == 4 and sum("c" in r for r in rows) == 1   # only :s1 -> :s0 has a :q


def test_anti_join_path_taken(small_db):
    q = P + "SELECT ?a WHERE { ?a :p ?b OPTIONAL { ?b :q ?c } FILTER(!BOUND(?c)) }"
    got = _spy(small_db, q)
    assert got == {"left": 0, "anti": 1, "top": 0, "seeded": 0}
    assert sorted(r["a"] for r in small_db.query(q).rows()) == ["<http://e/s0>", "<http://e/s2>", "<http://e/s4>"]


def test_anti_join_not_taken_when_left_binds_the_variable(small_db):
    # ?c is bound by the left side: !BOUND(?c) is false in every row, whatever the OPTIONAL does
    q = P + "SELECT * WHERE { ?a :q ?c OPTIONAL { ?a :p ?c } FILTER(!BOUND(?c)) }"
    assert _spy(small_db, q)["anti"] == 0
    assert small_db.query(q).rows() == []


def test_anti_join_filter_inside_sees_left(small_db):
    # a match failing the OPTIONAL's FILTER does not count: the row is kept
    q = P + "SELECT ?a WHERE { ?a :p ?b OPTIONAL { ?b :q ?c FILTER(?a = :s1) } FILTER(!BOUND(?c)) }"
    assert _spy(small_db, q)["anti"] == 1
    assert sorted(r["a"] for r in small_db.query(q).rows()) == ["<http://e/s0>", "<http://e/s2>", "<http://e/s4>"]
    q2 = P + "SELECT ?a WHERE { ?a :p ?b OPTIONAL { ?b :q ?c FILTER(?a = :s0) } FILTER(!BOUND(?c)) }"
    assert sorted(r["a"] for r in small_db.query(q2).rows()) == ["<http://e/s0>", "<http://e/s1>", "<http://e/s2>",
                                                                "<http://e/s4>"]


def test_left_join_keeps_left_order_and_unbound_schema(small_db):
    r = small_db.query(P + "SELECT ?a ?c ?d WHERE { ?a :p ?b OPTIONAL { ?b :q ?c . ?b :p ?d } }")
    assert r.vars == ["a", "c", "d"]
    assert [x.get("a") for x in r.rows()] == [x["a"] for x in small_db.query(P + "SELECT ?a WHERE { ?a :p ?b }").rows()]


_ORDERS = ["?a", "DESC(?a)", "?b ?a", "DESC(?b) ?c", "STR(?a)", "?c", "DESC(?c) ?a", "?a ?c"]
_TOP_TAILS = ["OPTIONAL { ?a :q ?c }", "OPTIONAL { ?b :r ?c }", "OPTIONAL { ?c :p ?a . ?c :q ?d }",
              "OPTIONAL { ?a :q ?c FILTER(?c != :s1) }", "OPTIONAL { ?b :q ?c } FILTER(!BOUND(?c))",
              "OPTIONAL { ?a :q ?c } OPTIONAL { ?c :r ?b2 }", "OPTIONAL { ?a :r ?c } OPTIONAL { ?b :q ?c }"]


def _ordered_rows(db: Database, q: str) -> list:
    return [tuple(sorted(r.items())) for r in db.query(q).rows()]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from(_LEFTS[:2] + ["?a ?pp ?b"]), st.sampled_from(_TOP_TAILS), st.sampled_from(_ORDERS),
       st.integers(1, 4), st.integers(0, 2))
def test_top_rows_equal_general_path(ttl, left, tail, order, limit, offset):
    """ORDER BY + LIMIT over an OPTIONAL: the same rows in the same order as without the cut
    (the stable sort of the whole left join; that one is checked against pyoxigraph above)."""
    db, _ = _load(ttl)
    q = P + f"SELECT * WHERE {{ {left} {tail} }} ORDER BY {order} LIMIT {limit} OFFSET {offset}"
    fast = _ordered_rows(db, q)
    saved = left_join.top_candidates
    left_join.top_candidates = lambda ev, node, top, seed: None
    try:
        general = _ordered_rows(db, q)
    finally:
        left_join.top_candidates = saved
    assert fast == general, q


def test_top_path_taken(small_db):
    ttl = "@prefix : <http://e/> .\n" + "".join(f":s{i} :p :o{i % 7} .\n" + (f":o{i % 7} :q {i} .\n" if i % 2 else "")
                                                for i in range(60))
    db = Database()
    db.load_data(ttl, "text/turtle")
    q = P + "SELECT ?a ?c WHERE { ?a :p ?b OPTIONAL { ?b :q ?c } } ORDER BY DESC(?a) LIMIT 3"
    got = _spy(db, q)
    assert got["top"] == 1 and got["left"] == 1
    rows = db.query(q).rows()
    assert [r["a"] for r in rows][:1] == ["<http://e/s9>"]
    # a key the OPTIONAL binds: no cut (the left rows do not fix it)
    q2 = P + "SELECT ?a ?c WHERE { ?a :p ?b OPTIONAL { ?b :q ?c } } ORDER BY ?c LIMIT 3"
    assert _spy(db, q2)["top"] == 0


def test_top_not_cut_on_a_key_the_optional_may_still_bind():
    # ?c unbound in :s0's left row, bound by the second OPTIONAL to 9: the left rows do not fix ?c
    ttl = "@prefix : <http://e/> .\n" + "".join(f":s{i} :p :x{i} .\n" for i in range(6))
    ttl += ":s1 :r 5 .\n:s2 :r 6 .\n:s3 :r 7 .\n:s4 :r 8 .\n:s5 :r 10 .\n:x0 :q 9 .\n"
    db, store = _load(ttl)
    q = P + "SELECT ?a ?c WHERE { ?a :p ?b OPTIONAL { ?a :r ?c } OPTIONAL { ?b :q ?c } } ORDER BY ?c LIMIT 1"
    five = '"5"^^<http://www.w3.org/2001/XMLSchema#integer>'
    assert _rows_db(db, q) == _rows_ox(store, q) == Counter([(("a", "<http://e/s1>"), ("c", five))])


def test_nested_optional_right_side_seeded(small_db):
    q = P + "SELECT * WHERE { ?a :p ?b OPTIONAL { ?b :q ?c OPTIONAL { ?c :r ?d } } }"
    got = _spy(small_db, q)
    assert got["seeded"] == 1
    assert len(small_db.query(q).rows()) == 4
