"""GROUP BY over OPTIONAL groups (``likes per post, zero included``) on the generated and
maintained small-window paths (:func:`engine.stream.tiny_aggs.optional_group`): COUNT of an
OPTIONAL's variable leaves its unbound rows out, COUNT(*) counts them, SUM / MIN / ... of one
hand an unbound value back. Each instant equals the ordinary path's and pyoxigraph's; the paths
are taken.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.stream import maintained, tiny_gen
from engine.stream.transient import TransientStore
from tests.test_stream_agg_exprs import _SETTINGS, _replay, elements
from tests.test_stream_maintained import _append
from tests.test_stream_tiny_aggs import P9, _lit, _norm, _pair
from tests.test_stream_tiny_gen import EX, NODES, PREDS, _rows
from tests.test_stream_tiny_rewrite import shape_db  # noqa: F401 -- (the module's db fixture)

SEEN = {"gen": [0, 0], "maint": [0, 0]}


@st.composite
def opt_group_queries(draw):
    p = lambda: draw(st.sampled_from(PREDS))   # noqa: E731
    body = f"?a {p()} ?b ."
    if draw(st.booleans()):
        body += f" ?b {p()} ?c ."
    opt = draw(st.sampled_from([f"?a {p()} ?e", f"?b {p()} ?e", f"?e {p()} ?a", f"?a {p()} ?e . ?e {p()} ?f"]))
    flt = draw(st.sampled_from(["", " FILTER(?e != ?b)", " FILTER(?e > 1)"]))
    body += f" OPTIONAL {{ {opt}{flt} }}"
    if draw(st.booleans()):
        body += f" OPTIONAL {{ ?b {p()} ?g }}"
    g = draw(st.sampled_from(["a", "b", None]))
    aggs = ["COUNT(?e)", "COUNT(DISTINCT ?e)", "COUNT(*)", "SUM(?e)", "MAX(?e)", "COUNT(?b)",
            "AVG(?b)", "COUNT(DISTINCT ?a)"]
    if "?g" in body:
        aggs += ["COUNT(?g)", "MIN(?g)"]
    sel = [f"({draw(st.sampled_from(aggs))} AS ?x{j})" for j in range(draw(st.integers(1, 3)))]
    having = ""
    if draw(st.booleans()):
        having = f" HAVING ({draw(st.sampled_from(['COUNT(?e) = 0', 'COUNT(?e) >= 1', 'COUNT(*) > COUNT(?e)']))})"
    head = ("?" + g + " " if g else "") + " ".join(sel)
    tail = f" GROUP BY ?{g}" if g else ""
    return f"SELECT {head} WHERE {{ {body} }}{tail}{having}"


@_SETTINGS
@given(q=opt_group_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_optional_groups_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, False, SEEN)


@_SETTINGS
@given(q=opt_group_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_optional_groups_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, True, SEEN)


def test_the_property_tests_took_both_paths():
    for key in ("gen", "maint"):
        hit, n = SEEN[key]
        assert n > 0 and hit > n // 3, (key, SEEN)


P8 = f"<{EX}p8>"
SHAPES = [
    "SELECT ?a (COUNT(?e) AS ?n) WHERE {{ ?a {p} ?b OPTIONAL {{ ?e {q} ?a }} }} GROUP BY ?a",
    "SELECT ?b (COUNT(DISTINCT ?e) AS ?n) (COUNT(*) AS ?rows) WHERE {{ ?a {p} ?b OPTIONAL {{ ?e {q} ?a }} }} "
    "GROUP BY ?b",
    "SELECT ?a (COUNT(?e) AS ?n) WHERE {{ ?a {p} ?b OPTIONAL {{ ?e {q} ?a }} }} GROUP BY ?a HAVING (COUNT(?e) = 0)",
    "SELECT ?a (SUM(?b) AS ?s) (COUNT(?e) AS ?n) WHERE {{ ?a {p} ?b OPTIONAL {{ ?e {q} ?a }} }} GROUP BY ?a",
]


@pytest.mark.parametrize("k", range(len(SHAPES)))
def test_each_shape_takes_the_generated_and_maintained_paths(db, k):
    """Readings of two sensors, one liked (p8) at some instants: every instant answered by
    generated code (and, with maintenance on, from the maintained state), equal to the
    ordinary path's."""
    q = SHAPES[k].format(p=P9, q=P8)
    vals = [_lit(x) for x in (1, 2, 5, 2)]
    with db.store.write_lock:
        db.store.dictionary.encode([*vals, P9, P8])
    for maintain in (False, True):
        store = TransientStore("a", slice_triples=8)
        on = _pair(db, q, store, 2000, True, maintain)
        off = _pair(db, q, store, 2000, False, False)
        assert on._gen is not None and (on._maint is not None) == maintain, q
        for j, v in enumerate(vals):
            el = [(NODES[3], P9, v), (NODES[4], P9, vals[(j + 1) % len(vals)])]
            if j % 2:
                el.append((NODES[0], P8, NODES[3]))
            _append(db, store, el, 1000 * (j + 1))
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        nonzero = 0
        for t in range(1000, 1000 * (len(vals) + 1), 1000):
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _norm(_rows(a)) == _norm(_rows(b)), (q, t)
            nonzero += bool(_rows(a))
            on.settle(a, t)
            off.settle(b, t)
            on.prepare(t + 1000)
            off.prepare(t + 1000)
        n = len(vals)
        assert nonzero
        if maintain:   # (the first instant builds the state on the ordinary path)
            assert maintained.answered_total() - m0 >= n - 1, (q, maintained.answered_total() - m0)
        else:
            assert tiny_gen.taken_total() - g0 == n, q


@pytest.mark.parametrize("agg,taken", [("SUM", True), ("MAX", True), ("AVG", True), ("SAMPLE", False)])
def test_an_aggregate_over_an_unbound_value(db, agg, taken):
    """SUM / MAX / AVG of an OPTIONAL's variable with a row leaving it unbound: the group's
    value is an error (the executor's), answered on both paths (AVG over no bound value is the
    executor's 0: test_avg_over_no_bound_value); SAMPLE: handed back. The answer is the
    ordinary path's either way."""
    q = f"SELECT ?a ({agg}(?e) AS ?s) WHERE {{ ?a {P9} ?b OPTIONAL {{ ?a {P8} ?e }} }} GROUP BY ?a"
    with db.store.write_lock:
        db.store.dictionary.encode([_lit(1), P9, P8])
    for maintain in (False, True):
        store = TransientStore("a", slice_triples=8)
        on = _pair(db, q, store, 2000, True, maintain)
        off = _pair(db, q, store, 2000, False, False)
        _append(db, store, [(NODES[3], P9, _lit(1)), (NODES[4], P9, _lit(1)), (NODES[4], P8, _lit(1))], 1000)
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        for t in (1000, 2000):
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _rows(a) == _rows(b) and len(_rows(a)) == 2, q
            on.settle(a, t)
            off.settle(b, t)
            on.prepare(t + 1000)
            off.prepare(t + 1000)
        fast = (maintained.answered_total() - m0) if maintain else (tiny_gen.taken_total() - g0)
        assert (fast > 0) == taken, (q, maintain)


@pytest.mark.parametrize("distinct", ["", "DISTINCT "])
def test_avg_over_no_bound_value(db, distinct):
    """AVG of an OPTIONAL's variable where no row binds it: the executor's ``0`` (SPARQL 1.1
    18.5.1.4, Count leaving errors out), answered on both fast paths like the ordinary path;
    a group mixing bound and unbound values: an error (unbound), the same."""
    q = f"SELECT ?a (AVG({distinct}?e) AS ?s) WHERE {{ ?a {P9} ?b OPTIONAL {{ ?b {P8} ?e }} }} GROUP BY ?a"
    with db.store.write_lock:
        db.store.dictionary.encode([_lit(1), _lit(2), P9, P8])
    for maintain in (False, True):
        store = TransientStore("a", slice_triples=8)
        on = _pair(db, q, store, 3000, True, maintain)
        off = _pair(db, q, store, 3000, False, False)
        # n4: no bound value (0); n3: one bound, one not (an error); then n3 bound only
        _append(db, store, [(NODES[4], P9, NODES[2]), (NODES[3], P9, NODES[1])], 1000)
        _append(db, store, [(NODES[3], P9, NODES[0]), (NODES[0], P8, _lit(1))], 2000)
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        seen = set()
        for t in (1000, 2000, 3000):
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _rows(a) == _rows(b), (q, t)
            seen |= {str(r) for r in _rows(a)}
            on.settle(a, t)
            off.settle(b, t)
            on.prepare(t + 1000)
            off.prepare(t + 1000)
        fast = (maintained.answered_total() - m0) if maintain else (tiny_gen.taken_total() - g0)
        assert fast > 0, (q, maintain)
        assert any("('num', '0')" in r for r in seen) and any("unbound" in r for r in seen), seen


@st.composite
def anti_group_queries(draw):
    """GROUP BY with SUM / MIN / MAX / AVG (and expressions) over a BGP with FILTER NOT EXISTS /
    EXISTS / MINUS groups: the maintained state's per-solution rows carry the values."""
    p = lambda: draw(st.sampled_from(PREDS))   # noqa: E731
    body = f"?a {p()} ?b ."
    grp = draw(st.sampled_from([f"FILTER NOT EXISTS {{ ?b {p()} ?e }}", f"FILTER EXISTS {{ ?a {p()} ?e }}",
                                f"MINUS {{ ?a {p()} ?b }}"]))
    body += " " + grp
    g = draw(st.sampled_from(["a", None]))
    aggs = ["SUM(?b)", "MAX(?b)", "MIN(?b)", "AVG(?b)", "SUM(?b * 2)", "COUNT(*)", "COUNT(DISTINCT ?b)"]
    sel = [f"({draw(st.sampled_from(aggs))} AS ?x{j})" for j in range(draw(st.integers(1, 3)))]
    head = ("?" + g + " " if g else "") + " ".join(sel)
    tail = f" GROUP BY ?{g}" if g else ""
    return f"SELECT {head} WHERE {{ {body} }}{tail}"


ANTI = {"gen": [0, 0], "maint": [0, 0]}


@_SETTINGS
@given(q=anti_group_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_anti_groups_with_aggregates(db, q, els, rng):
    _replay(db, q, els, rng, True, ANTI)


def test_the_anti_property_test_took_the_maintained_path():
    hit, n = ANTI["maint"]
    assert n > 0 and hit > n // 4, ANTI
