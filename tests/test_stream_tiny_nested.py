"""Nested OPTIONALs (:mod:`engine.stream.tiny_nested`) and VALUES in the middle of a join
(:mod:`engine.stream.tiny_values`) on the small-window paths.

Random queries and streams: every instant of the generated / maintained paths equal to the
ordinary path's (both off) and to pyoxigraph's; spies show each shape takes both paths; shapes
the nesting rule refuses are not generated and still answer right.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.stream import maintained, tiny_gen
from engine.stream.tiny_gen import GenQuery
from engine.stream.transient import TransientStore
from tests.test_stream_maintained import _append
from tests.test_stream_tiny_aggs import P9, _norm, _pair, check_paths, replay_compared
from tests.test_stream_tiny_gen import NODES, PREDS, _oracle, _rows
from tests.test_stream_tiny_rewrite import (
    SHAPE_SETTINGS,
    _parsed,
    shape_db,  # noqa: F401 -- (the module's db fixture)
    shape_elements,
)

SEEN = {"gen": [0, 0], "maint": [0, 0]}
P0, P1, P2 = PREDS

_SETTINGS = SHAPE_SETTINGS
elements = shape_elements


@st.composite
def nested_queries(draw) -> str:
    p = draw(st.sampled_from(PREDS))
    q, r = draw(st.sampled_from(PREDS)), draw(st.sampled_from(PREDS))
    parent = draw(st.sampled_from([f"?b {q} ?c", f"?a {q} ?c", f"?c {q} ?b", f"?b {q} ?c . ?c {p} ?h"]))
    kid = draw(st.sampled_from([f"?c {r} ?d", f"?d {r} ?c", f"?c {r} ?d . ?d {p} ?e"]))
    if draw(st.booleans()):   # the nested group's FILTER (over its own and its parent's variables)
        kid += draw(st.sampled_from([f" FILTER(?d != {draw(st.sampled_from(NODES))})", " FILTER(?d != ?c)",
                                     " FILTER(isIRI(?d))"]))
    inner = f"{parent} OPTIONAL {{ {kid} }}"
    if draw(st.integers(0, 3)) == 0:   # a second nested group
        inner += f" OPTIONAL {{ ?c {draw(st.sampled_from(PREDS))} ?f }}"
    if draw(st.booleans()):   # the parent's FILTER (not over the nested group's variables)
        inner += draw(st.sampled_from([f" FILTER(?c != {draw(st.sampled_from(NODES))})", " FILTER(isIRI(?c))"]))
    body = f"?a {P0} ?b OPTIONAL {{ {inner} }}"
    if draw(st.integers(0, 3)) == 0:   # an independent OPTIONAL after it
        body += f" OPTIONAL {{ ?a {draw(st.sampled_from(PREDS))} ?g }}"
    if draw(st.integers(0, 3)) == 0:
        body += " FILTER(!BOUND(?d) || ?d != ?a)"
    if draw(st.integers(0, 3)) == 0:
        g = draw(st.sampled_from(["a", "b"]))
        agg = draw(st.sampled_from(["COUNT(?d)", "COUNT(*)", "COUNT(DISTINCT ?c)"]))
        return f"SELECT ?{g} ({agg} AS ?n) WHERE {{ {body} }} GROUP BY ?{g}"
    head = [v for v in ("a", "b", "c", "d", "e", "f", "g", "h") if f"?{v}" in body]
    distinct = "DISTINCT " if draw(st.integers(0, 3)) == 0 else ""
    return f"SELECT {distinct}{' '.join('?' + v for v in head)} WHERE {{ {body} }}"


@_SETTINGS
@given(q=nested_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_nested_optionals_answer_like_the_ordinary_path_and_pyoxigraph(db, q, els, rng):
    replay_compared(db, q, els, rng, False, SEEN, all_generated=False, fast_only=False)


@_SETTINGS
@given(q=nested_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_nested_optionals_answer_like_the_ordinary_path_and_pyoxigraph(db, q, els, rng):
    replay_compared(db, q, els, rng, True, SEEN, all_generated=False, fast_only=False)


def test_the_property_tests_took_both_paths():
    """Most instants of the random nested queries were answered by the fast paths."""
    for key in ("gen", "maint"):
        hit, n = SEEN[key]
        assert n > 0 and hit > n // 2, (key, SEEN)


# ---------------------------------------------------------------- each shape takes both paths

SHAPES = [
    f"SELECT ?a ?c ?d WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?a {P1} ?c OPTIONAL {{{{ ?c {P2} ?d }}}} }}}} }}}}",
    f"SELECT ?a ?b ?c ?d WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?b {P1} ?c OPTIONAL {{{{ ?d {P0} ?c FILTER(?d != ?c) }}}} "
    f"FILTER(isIRI(?c)) }}}} }}}}",
    f"SELECT ?a (COUNT(?d) AS ?n) WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?a {P1} ?c OPTIONAL {{{{ ?c {P2} ?d }}}} }}}} }}}} "
    "GROUP BY ?a",
    f"SELECT ?a ?d ?f WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?a {P1} ?c OPTIONAL {{{{ ?c {P2} ?d }}}} "
    f"OPTIONAL {{{{ ?c {P0} ?f }}}} }}}} }}}}",
    # VALUES between two triple patterns: a FILTER of the joined BGP
    f"SELECT ?a ?b WHERE {{{{ ?a {{p}} ?b . VALUES ?a {{{{ {NODES[3]} {NODES[4]} }}}} ?a {{p}} ?c }}}}",
]


@pytest.mark.parametrize("k", range(len(SHAPES)))
def test_each_shape_takes_the_generated_and_maintained_paths(db, k):
    check_paths(db, SHAPES[k].format(p=P9), [1, 2, 5])


# ---------------------------------------------------------------- refused: the ordinary path, right

REFUSED = [
    # the nested group reads a variable of the required part its parent does not bind
    f"SELECT ?a ?c ?d WHERE {{ ?a {P0} ?b OPTIONAL {{ ?b {P1} ?c OPTIONAL {{ ?c {P2} ?a }} }} }}",
    f"SELECT ?a ?c ?d WHERE {{ ?a {P0} ?b OPTIONAL {{ ?a {P1} ?c OPTIONAL {{ ?c {P2} ?d . ?b {P1} ?d }} }} }}",
    # its FILTER reads a variable out of its scope (the required part's)
    f"SELECT ?a ?c ?d WHERE {{ ?a {P0} ?b OPTIONAL {{ ?b {P1} ?c OPTIONAL {{ ?c {P2} ?d FILTER(?d != ?a) }} }} }}",
    # the parent's FILTER reads the nested group's variable
    f"SELECT ?a ?c ?d WHERE {{ ?a {P0} ?b OPTIONAL {{ ?b {P1} ?c OPTIONAL {{ ?c {P2} ?d }} FILTER(!BOUND(?d)) }} }}",
    # the nested group does not depend on the parent's own variables (it would match without it)
    f"SELECT ?a ?c ?d WHERE {{ ?a {P0} ?b OPTIONAL {{ ?b {P1} ?c OPTIONAL {{ ?b {P2} ?d }} }} }}",
    # two levels of nesting
    f"SELECT * WHERE {{ ?a {P0} ?b OPTIONAL {{ ?b {P1} ?c OPTIONAL {{ ?c {P2} ?d OPTIONAL {{ ?d {P0} ?e }} }} }} }}",
]


@pytest.mark.parametrize("q", REFUSED)
def test_refused_nestings_are_not_generated_and_answer_right(db, q):
    assert GenQuery.of(_parsed(q), "RSTREAM") is None, q
    seen = {"gen": [0, 0], "maint": [0, 0]}
    els = [[(NODES[0], P0, NODES[1]), (NODES[1], P1, NODES[2])], [(NODES[2], P2, NODES[0]), (NODES[2], P2, NODES[3])],
           [(NODES[1], P2, NODES[4]), (NODES[0], P1, NODES[2]), (NODES[3], P0, NODES[0])]]
    replay_compared(db, q, els, 3000, False, seen, all_generated=False, fast_only=False)


def test_a_nested_group_is_unbound_where_its_parent_matched_nothing(db):
    """The generated and maintained rows keep the nested group's variables unbound when the
    parent matched nothing, even where the nested pattern alone would match (the -1 lookup)."""
    q = f"SELECT ?a ?c ?d WHERE {{ ?a {P0} ?b OPTIONAL {{ ?b {P1} ?c OPTIONAL {{ ?c {P2} ?d }} }} }}"
    els = [[(NODES[0], P0, NODES[1]), (NODES[2], P2, NODES[3])], [(NODES[1], P1, NODES[2])],
           [(NODES[4], P0, NODES[3])]]
    for maintain in (False, True):
        store = TransientStore("a", slice_triples=8)
        on = _pair(db, q, store, 3000, True, maintain)
        assert on._gen is not None and (on._maint is not None) == maintain
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        for k, el in enumerate(els):
            _append(db, store, el, 1000 * (k + 1))
        got = []
        for t in (1000, 2000, 3000, 4000):
            a, _ = on.run(t)
            got.append(_norm(_rows(a)))
            on.settle(a, t)
            on.prepare(t + 1000)
        window = [tr for el in els[:3] for tr in el]
        assert got[2] == _norm(_oracle(db, q, window))
        assert (maintained.answered_total() > m0) if maintain else (tiny_gen.taken_total() - g0 == 4)


def test_the_probe_shapes_are_taken():
    """bench/shape_probe's nested OPTIONALs and VALUES in the middle take the generated path."""
    from bench.shape_probe import _P
    from bench.shape_probe import SHAPES as PROBE
    from engine.sparql.csparql import parse_continuous
    for name in ("nested-opt", "nested-opt-static", "values-middle"):
        cq = parse_continuous("REGISTER QUERY x AS " + _P + PROBE[name])
        assert GenQuery.of(cq.query, "RSTREAM") is not None, name
