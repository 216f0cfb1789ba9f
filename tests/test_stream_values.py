"""VALUES joined with a small window's BGP (:mod:`engine.stream.tiny_values`: a FILTER of
``sameTerm``s where that is the same bag) on the generated and maintained paths: each instant
equals the ordinary path's (and pyoxigraph's where a fast path answered); the paths are taken;
VALUES whose rows one solution may both match (UNDEF), duplicate rows or a variable the pattern
may leave unbound stay as they are.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.sparql.csparql import parse_continuous
from engine.stream import maintained, tiny_gen
from engine.stream.transient import TransientStore
from tests.test_stream_agg_exprs import _SETTINGS, elements
from tests.test_stream_maintained import _append
from tests.test_stream_tiny_aggs import _pair, replay_compared
from tests.test_stream_tiny_gen import EX, LITS, NODES, PREDS, _rows
from tests.test_stream_tiny_rewrite import shape_db  # noqa: F401 -- (the module's db fixture)

SEEN = {"gen": [0, 0], "maint": [0, 0]}


@st.composite
def values_queries(draw):
    p1, p2 = draw(st.sampled_from(PREDS)), draw(st.sampled_from(PREDS))
    body = draw(st.sampled_from([f"?a {p1} ?b .", f"?a {p1} ?b . ?b {p2} ?c .", f"?a {p1} ?b . ?a {p2} ?c ."]))
    used = [v for v in "abc" if "?" + v in body]
    vs = draw(st.lists(st.sampled_from(used + ["z"]), min_size=1, max_size=2, unique=True))
    terms = NODES + LITS[:6] + ["UNDEF"]
    rows = draw(st.lists(st.tuples(*[st.sampled_from(terms) for _ in vs]), min_size=1, max_size=4))
    block = f"VALUES ({' '.join('?' + v for v in vs)}) {{ {' '.join('(' + ' '.join(r) + ')' for r in rows)} }}"
    if draw(st.booleans()):
        body = f"{block} {body}"
        tail = ""
    else:
        tail = " " + block
    if draw(st.booleans()):
        body += f" FILTER(?{draw(st.sampled_from(used))} != 1)"
    head = " ".join("?" + v for v in used)
    if draw(st.booleans()):
        return f"SELECT ?{used[0]} (COUNT(*) AS ?n) WHERE {{ {body} }} GROUP BY ?{used[0]}{tail}"
    return f"SELECT {draw(st.sampled_from(['', 'DISTINCT ']))}{head} WHERE {{ {body} }}{tail}"


def _replay(db, q: str, els: list, rng: int, maintain: bool, seen: dict = SEEN) -> None:
    replay_compared(db, q, els, rng, maintain, seen, all_generated=False)


@_SETTINGS
@given(q=values_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_values_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, False)


@_SETTINGS
@given(q=values_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_values_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, True)


def test_the_property_tests_took_both_paths():
    for key in ("gen", "maint"):
        hit, n = SEEN[key]
        assert n > 0 and hit > n // 3, (key, SEEN)


def _gen(q: str):
    cq = parse_continuous(f"REGISTER QUERY x AS {q.replace(' WHERE', f' FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE', 1)}")
    return tiny_gen.GenQuery.of(cq.query, "RSTREAM")


def test_which_values_are_taken():
    p0 = PREDS[0]
    assert _gen(f"SELECT ?a ?b WHERE {{ VALUES ?b {{ {NODES[0]} {NODES[1]} }} ?a {p0} ?b }}") is not None
    assert _gen(f"SELECT ?a WHERE {{ ?a {p0} ?b }} VALUES (?a ?b) {{ ({NODES[0]} {LITS[0]}) }}") is not None
    # UNDEF where no solution can match two rows: taken
    assert _gen(f"SELECT ?a WHERE {{ VALUES (?a ?b) {{ ({NODES[0]} UNDEF) }} ?a {p0} ?b }}") is not None
    assert _gen(f"SELECT ?a WHERE {{ VALUES (?a ?b) {{ ({NODES[0]} UNDEF) ({NODES[1]} {LITS[0]}) }} "
                f"?a {p0} ?b }}") is not None
    # a duplicate row (the join doubles), rows a solution may both match (UNDEF), a row of UNDEF
    # only, a variable the pattern does not bind: left as they are
    assert _gen(f"SELECT ?a WHERE {{ VALUES ?b {{ {NODES[0]} {NODES[0]} }} ?a {p0} ?b }}") is None
    assert _gen(f"SELECT ?a WHERE {{ VALUES (?a ?b) {{ ({NODES[0]} UNDEF) ({NODES[0]} {LITS[0]}) }} "
                f"?a {p0} ?b }}") is None
    assert _gen(f"SELECT ?a WHERE {{ VALUES (?a ?b) {{ (UNDEF UNDEF) }} ?a {p0} ?b }}") is None
    assert _gen(f"SELECT ?a ?z WHERE {{ VALUES ?z {{ {NODES[0]} }} ?a {p0} ?b }}") is None


@pytest.mark.parametrize("where", ["{{ VALUES ?b {{ {n0} {n1} }} ?a {p} ?b }}", "{{ ?a {p} ?b }} VALUES ?b {{ {n0} {n1} }}"])
def test_values_take_the_generated_and_maintained_paths(db, where):
    p9 = f"<{EX}p9>"
    with db.store.write_lock:
        db.store.dictionary.encode([p9])
    q = "SELECT ?a ?b WHERE " + where.format(n0=NODES[0], n1=NODES[1], p=p9)
    for maintain in (False, True):
        store = TransientStore("a", slice_triples=8)
        on = _pair(db, q, store, 2000, True, maintain)
        off = _pair(db, q, store, 2000, False, False)
        assert on._gen is not None and (on._maint is not None) == maintain, q
        for j in range(4):
            _append(db, store, [(NODES[3], p9, NODES[j % 3]), (NODES[4], p9, NODES[(j + 1) % 3])], 1000 * (j + 1))
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        for t in range(1000, 5000, 1000):
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _rows(a) == _rows(b) and _rows(a), (q, t)
            on.settle(a, t)
            off.settle(b, t)
            on.prepare(t + 1000)
            off.prepare(t + 1000)
        if maintain:
            assert maintained.answered_total() - m0 >= 3, q
        else:
            assert tiny_gen.taken_total() - g0 == 4, q


# ---------------------------------------------------------------- a sub-SELECT that is the whole pattern

SUB = {"gen": [0, 0], "maint": [0, 0]}


@st.composite
def subselect_queries(draw):
    p1, p2 = draw(st.sampled_from(PREDS)), draw(st.sampled_from(PREDS))
    body = draw(st.sampled_from([f"?a {p1} ?b .", f"?a {p1} ?b . ?b {p2} ?c ."]))
    if draw(st.booleans()):
        inner = f"SELECT ?a (COUNT(?b) AS ?n) (MAX(?b) AS ?m) WHERE {{ {body} }} GROUP BY ?a"
        flt = draw(st.sampled_from(["", " FILTER(?n > 1)", " FILTER(?m >= 1 || ?n = 1)", " FILTER(isIRI(?a))"]))
        outer = draw(st.sampled_from(["?a ?n", "?a", "*", "?n ?m"]))
    else:
        inner = f"SELECT ?a ?b WHERE {{ {body} }}"
        flt = draw(st.sampled_from(["", " FILTER(?b != ?a)", " FILTER(?b > 0)"]))
        outer = draw(st.sampled_from(["?a ?b", "?b", "*"]))
    return f"SELECT {outer} WHERE {{ {{ {inner} }}{flt} }}"


@_SETTINGS
@given(q=subselect_queries(), els=elements, rng=st.sampled_from([3000, 2000]), maintain=st.booleans())
def test_subselects_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng, maintain):
    _replay(db, q, els, rng, maintain, SUB)


def test_the_subselect_property_test_took_both_paths():
    for key in ("gen", "maint"):
        hit, n = SUB[key]
        assert n > 0 and hit > n // 3, (key, SUB)


def test_which_subselects_are_flattened():
    p0 = PREDS[0]
    inner = f"SELECT ?a (COUNT(*) AS ?n) WHERE {{ ?a {p0} ?b }} GROUP BY ?a"
    assert _gen(f"SELECT ?a WHERE {{ {{ {inner} }} FILTER(?n > 1) }}") is not None
    # a FILTER reading a variable the sub-SELECT does not project (unbound outside it), an EXISTS:
    # left as they are
    assert _gen(f"SELECT ?a WHERE {{ {{ {inner} }} FILTER(BOUND(?b)) }}") is None
    assert _gen(f"SELECT ?a WHERE {{ {{ {inner} }} FILTER EXISTS {{ ?a {p0} ?b }} }}") is None
