"""UNION queries on the small-window paths (:mod:`engine.stream.tiny_union`): generated and
maintained instants answer like the ordinary path and like pyoxigraph.

Random queries ``[P .] { A [FILTER] } UNION { B [FILTER] } [UNION { C }] [FILTER]`` (groups of one
or two patterns, constants, absent constants, variables one branch binds and another does not,
FILTERs inside a group and over possibly unbound variables outside) with SELECT, DISTINCT,
GROUP BY / COUNT / COUNT(DISTINCT) / HAVING, the implicit group and ASK, over the random
streams of :mod:`tests.test_stream_tiny_gen` (generated) and :mod:`tests.test_stream_maintained`
(maintained: sliding and tumbling windows, two streams, elements ahead, jumps).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.sparql.csparql import parse_continuous
from engine.stream import maintained, tiny_gen, tiny_union
from engine.stream.transient import TransientStore
from tests.test_stream_maintained import _pair, _replay, periods
from tests.test_stream_tiny_gen import (
    EX,
    LITS,
    NODES,
    PREDS,
    STATIC,
    _evaluator,
    _rows,
    compare_instants,
    elements,
    pattern_end,
    static_db,
)

TAKEN = [0, 0]     # (generated union instants, instants evaluated)
MSEEN = [0, 0]     # (maintained union instants answered, instants of maintained union queries)


@pytest.fixture(scope="module")
def db():
    d = static_db((f"<{EX}a>", f"<{EX}b>"))
    yield d
    d.close()


@st.composite
def union_queries(draw):
    """Every group binds ?a (a subject): grouping by it is over a variable of every branch."""
    groups = []
    for _ in range(draw(st.integers(2, 3))):
        pats = [f"?a {draw(st.sampled_from(PREDS))} {pattern_end(draw, ['b', 'c', 'a'], 4)} ."]
        if draw(st.booleans()):
            pats.append(f"?{draw(st.sampled_from(['a', 'b', 'c']))} {draw(st.sampled_from(PREDS))} "
                        f"{pattern_end(draw, ['b', 'c', 'd'], 4)} .")
        body = " ".join(pats)
        own = [v for v in "abcd" if "?" + v in body]
        if draw(st.integers(0, 2)) == 0:
            v = draw(st.sampled_from(own))
            body += f" FILTER(?{v} {draw(st.sampled_from(['>', '<=', '!=']))} {draw(st.sampled_from(['1', '0.5', '2.0e0']))})"
        groups.append("{ " + body + " }")
    union = " UNION ".join(groups)
    pre = ""
    if draw(st.booleans()):
        pre = f"?a {draw(st.sampled_from(PREDS))} ?p . "
    where = pre + union
    if draw(st.integers(0, 2)) == 0:
        where += draw(st.sampled_from([" FILTER(!bound(?c))", " FILTER(bound(?b) || ?c > 1)",
                                       " FILTER(?b > 0 || !bound(?b))"]))
    used = [v for v in "abcdp" if "?" + v in where]
    shape = draw(st.sampled_from(["plain", "distinct", "group", "having", "implicit", "ask", "alias"]))
    proj = " ".join("?" + v for v in used)
    if shape == "plain":
        return f"SELECT {proj} WHERE {{ {where} }}"
    if shape == "alias":
        return f"SELECT (?a AS ?z) ?{draw(st.sampled_from(used))} WHERE {{ {where} }}"
    if shape == "distinct":
        return f"SELECT DISTINCT ?{draw(st.sampled_from(used))} WHERE {{ {where} }}"
    if shape == "ask":
        return f"ASK WHERE {{ {where} }}"
    agg = draw(st.sampled_from(["COUNT(*)", "COUNT(?a)", "COUNT(DISTINCT ?a)"]))
    if shape == "implicit":
        return f"SELECT ({agg} AS ?n) WHERE {{ {where} }}"
    having = f" HAVING ({agg} > {draw(st.sampled_from(['1', '2', '1.5']))})" if shape == "having" else ""
    return f"SELECT ?a ({agg} AS ?n) WHERE {{ {where} }} GROUP BY ?a{having}"


def _text(q: str, rng: int) -> str:
    return f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {rng // 1000}s STEP 1s] WHERE', 1)}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(q=union_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_union_instants_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    text = _text(q, rng)
    store = TransientStore("a", slice_triples=16)
    on = _evaluator(db, text, store, True, rng)
    off = _evaluator(db, text, store, False, rng)
    assert isinstance(on._gen, tiny_union.UnionGen), q
    assert off._gen is None
    before = tiny_union.union_taken_total()
    TAKEN[1] += compare_instants(db, q, on, off, els, store, rng)
    TAKEN[0] += tiny_union.union_taken_total() - before


def test_the_union_property_test_took_the_generated_path():
    assert TAKEN[1] > 0 and TAKEN[0] > TAKEN[1] // 4, TAKEN


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(q=union_queries(), pa=periods, pb=periods, two=st.booleans(),
       rngs=st.sampled_from([(3000, 2000), (1000, 3000), (2000, 1000)]),
       ahead=st.lists(st.integers(0, 2), min_size=12, max_size=12),
       jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=12, max_size=12))
def test_maintained_union_instants_answer_like_the_other_path_and_pyoxigraph(db, q, pa, pb, two, rngs, ahead,
                                                                             jumps):
    before = maintained.answered_total()
    _replay(db, q, pa, pb, two, rngs, ahead, jumps)
    MSEEN[0] += maintained.answered_total() - before
    MSEEN[1] += 1


def test_the_union_replay_took_the_maintained_path():
    """The maintained replays answered instants from union states (more than one per query on
    average: the path was taken)."""
    assert MSEEN[1] > 0 and MSEEN[0] > MSEEN[1], MSEEN


def test_union_shapes_taken_and_not():
    p = PREDS
    taken = [f"SELECT ?a ?b ?c WHERE {{ {{ ?a {p[0]} ?b }} UNION {{ ?a {p[1]} ?c }} }}",
             f"SELECT DISTINCT ?a WHERE {{ ?a {p[2]} ?x . {{ ?a {p[0]} ?b FILTER(?b > 1) }} UNION {{ ?a {p[1]} ?b }} }}",
             f"SELECT ?a (COUNT(*) AS ?n) WHERE {{ {{ ?a {p[0]} ?b }} UNION {{ ?a {p[1]} ?b }} }} GROUP BY ?a",
             f"SELECT * WHERE {{ {{ ?a {p[0]} ?b }} UNION {{ ?a {p[1]} ?b }} {{ ?b {p[2]} ?c }} UNION {{ ?b {p[0]} ?c }} }}",
             f"ASK WHERE {{ {{ ?a {p[0]} ?b }} UNION {{ ?a {p[1]} ?b }} }}",
             # an OPTIONAL in a branch (tiny_union, maint_opt: per branch)
             f"SELECT * WHERE {{ {{ ?a {p[0]} ?b OPTIONAL {{ ?b {p[1]} ?c }} }} UNION {{ ?a {p[1]} ?b }} }}"]
    not_taken = [  # a group's FILTER reading a variable the rest binds; grouping by a variable of one branch;
        # a nested OPTIONAL; a union of more than MAX_BRANCHES branches
        f"SELECT * WHERE {{ ?a {p[2]} ?x . {{ ?a {p[0]} ?b FILTER(?x > 1) }} UNION {{ ?a {p[1]} ?b }} }}",
        f"SELECT ?c (COUNT(*) AS ?n) WHERE {{ {{ ?a {p[0]} ?b }} UNION {{ ?a {p[1]} ?c }} }} GROUP BY ?c",
        f"SELECT * WHERE {{ {{ ?a {p[0]} ?b OPTIONAL {{ ?b {p[1]} ?c OPTIONAL {{ ?c {p[2]} ?d OPTIONAL {{ ?d {p[0]} ?e }} }} }} }} "
        f"UNION {{ ?a {p[1]} ?b }} }}",
        f"SELECT * WHERE {{ {{ ?a {p[0]} ?b }} UNION {{ ?a {p[1]} ?b }} FILTER NOT EXISTS {{ ?b {p[2]} ?c }} }}",
        "SELECT * WHERE { " + " UNION ".join([f"{{ ?a {p[k % 3]} ?b }}" for k in range(3)]) + " . "
        + " UNION ".join([f"{{ ?b {p[k % 3]} ?c }}" for k in range(3)]) + " }"]
    for q in taken + not_taken:
        cq = parse_continuous(_text(q, 3000))
        got = tiny_gen.GenQuery.of(cq.query, "RSTREAM")
        assert (got is not None) == (q in taken), q
        if got is not None:
            assert isinstance(got, tiny_union.UnionGen)


def test_union_generated_and_maintained_paths_are_taken(db):
    """A UNION query with a required pattern: its instants are answered by the generated code
    (maintenance off) and from the maintained state (on), equal to the ordinary path's."""
    q = _text(f"SELECT ?a ?v ?w WHERE {{ ?a {PREDS[2]} ?x . {{ ?a {PREDS[0]} ?v }} UNION "
              f"{{ ?a {PREDS[1]} ?w FILTER(?w >= 0) }} }}", 3000)
    store = TransientStore("a", slice_triples=16)
    on, off = _pair(db, q, [("a", 3000, store)])
    gen_only = _evaluator(db, q, store, True)
    gen_only._maint = None
    assert isinstance(on._gen, tiny_union.UnionGen) and on._maint is not None
    d = db.store.dictionary
    els = [[(NODES[1], PREDS[2], NODES[0]), (NODES[1], PREDS[0], LITS[1]), (NODES[1], PREDS[1], LITS[2])],
           [(NODES[3], PREDS[2], NODES[0]), (NODES[3], PREDS[1], LITS[6])]]
    a0, g0 = maintained.answered_total(), tiny_union.union_taken_total()
    for k, el in enumerate(els + [[]] * 3):
        t = 1000 * (k + 1)
        if el:
            ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
            tt = np.full(len(ids), t, dtype=np.int64)
            seq0 = store.end_seq
            store.append_rows(ids, tt)
            maintained.note(store, seq0, ids, tt)
        a, _ = on.run(t)
        b, _ = off.run(t)
        c, _ = gen_only.run(t)
        assert _rows(a) == _rows(b) == _rows(c), t
        on.settle(a, t)
        off.settle(b, t)
        on.prepare(t + 1000)
        off.prepare(t + 1000)
    assert tiny_union.union_taken_total() - g0 >= 5
    assert maintained.answered_total() - a0 >= 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=union_queries(), pa=periods, pb=periods, two=st.booleans(),
       rngs=st.sampled_from([(3000, 2000), (1000, 3000), (2000, 1000)]),
       ahead=st.lists(st.integers(0, 2), min_size=12, max_size=12),
       jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=12, max_size=12))
def test_maintained_union_with_kept_stored_groups(db, q, pa, pb, two, rngs, ahead, jumps):
    """The same with every stored group of a branch joined through its kept list (as
    tests.test_stream_maintained forces them: the test's stored graph is small)."""
    was = maintained.Maintained.CACHE_MIN, maintained.Maintained.CACHE_PATTERNS
    maintained.Maintained.CACHE_MIN, maintained.Maintained.CACHE_PATTERNS = 0, 1
    try:
        _replay(db, q, pa, pb, two, rngs, ahead, jumps)
    finally:
        maintained.Maintained.CACHE_MIN, maintained.Maintained.CACHE_PATTERNS = was
