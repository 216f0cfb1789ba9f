"""ORDER BY of an expression (``DESC(?v * 2)``, ``STR(?x)``) on the generated and maintained
small-window paths (:mod:`engine.stream.tiny_order`: the expression's value per row by
:class:`engine.stream.tiny_terms.TermFn`): the rows, in order, equal the ordinary path's and
pyoxigraph's where the fast path answered (a tie hands the instant back), and the paths are taken.
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
from tests.test_stream_tiny_aggs import _ordered, _pair, _replay_ordered
from tests.test_stream_tiny_gen import EX, NODES, PREDS, XSD
from tests.test_stream_tiny_rewrite import shape_db  # noqa: F401 -- (the module's db fixture)

SEEN = [0, 0]   # (instants answered by a fast path, instants)
EXPRS = ["?{a} * 2", "-?{a}", "STR(?{a})", "?{a} + ?{b}", f"<{XSD}double>(?{{a}})", "ABS(?{a} - 1)",
         "IF(isIRI(?{a}), 0, 1)", "STRLEN(STR(?{a}))"]


@st.composite
def ordered_expr_queries(draw):
    p1, p2 = draw(st.sampled_from(PREDS)), draw(st.sampled_from(PREDS))
    body = draw(st.sampled_from([f"?a {p1} ?b .", f"?a {p1} ?b . ?b {p2} ?c .", f"?a {p1} ?b . ?a {p2} ?c ."]))
    used = [v for v in "abc" if "?" + v in body]
    a, b = draw(st.sampled_from(used)), draw(st.sampled_from(used))
    if draw(st.integers(0, 3)) == 0:   # ordered by an aggregate written again in ORDER BY
        agg = draw(st.sampled_from([f"COUNT(?{b})", f"SUM(?{b})", f"MAX(?{b})", "COUNT(*)"]))
        lim = draw(st.sampled_from(["", " LIMIT 2", " LIMIT 1 OFFSET 1"]))
        return (f"SELECT ?{a} ({agg} AS ?n) WHERE {{ {body} }} GROUP BY ?{a} "
                f"ORDER BY {draw(st.sampled_from([f'DESC({agg})', agg, 'DESC(?n * 2)', '(?n - 1)', 'DESC(-?n)']))} ?{a}{lim}")
    e = draw(st.sampled_from(EXPRS)).format(a=a, b=b)
    conds = draw(st.sampled_from([f"DESC({e})", f"ASC({e})", f"({e})"]))
    if draw(st.booleans()):   # a second condition: an expression or a variable
        conds += " " + draw(st.sampled_from([f"DESC(?{b})", f"?{a}", f"DESC(STR(?{b}))"]))
    if draw(st.integers(0, 3)):   # mostly a total order (a tie hands the instant back)
        conds += " " + " ".join(f"STR(?{v})" for v in used)
    mod = ""
    if draw(st.booleans()):
        mod += f" LIMIT {draw(st.integers(0, 4))}"
    if draw(st.booleans()):
        mod += f" OFFSET {draw(st.integers(0, 3))}"
    sel = draw(st.sampled_from(["SELECT", "SELECT DISTINCT"]))
    return f"{sel} {' '.join('?' + v for v in used)} WHERE {{ {body} }} ORDER BY {conds}{mod}"


def _replay(db, q: str, els: list, rng: int, maintain: bool) -> None:
    _replay_ordered(db, q, els, rng, maintain, SEEN)


@_SETTINGS
@given(q=ordered_expr_queries(), els=elements, rng=st.sampled_from([3000, 1000]), maintain=st.booleans())
def test_rows_ordered_by_expressions_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng, maintain):
    _replay(db, q, els, rng, maintain)


def test_the_property_test_took_the_fast_paths():
    assert SEEN[1] > 0 and SEEN[0] > SEEN[1] // 4, SEEN


P9 = f"<{EX}p9>"


def _lit(x: int) -> str:
    return f'"{x}"^^<{XSD}integer>'


@pytest.mark.parametrize("q", [
    "SELECT ?s ?v WHERE {{ ?s {p} ?v }} ORDER BY DESC(?v * 2) ?s LIMIT 2",
    "SELECT ?s ?v WHERE {{ ?s {p} ?v }} ORDER BY STR(?s) DESC(?v)",
    "SELECT ?s (MAX(?v) AS ?m) WHERE {{ ?s {p} ?v }} GROUP BY ?s ORDER BY DESC(MAX(?v)) ?s LIMIT 1",
    "SELECT ?s (SUM(?v) AS ?t) WHERE {{ ?s {p} ?v }} GROUP BY ?s ORDER BY DESC(?t * 2) ?s LIMIT 1",
])
def test_ordered_by_an_expression_takes_both_paths(db, q):
    """Distinct readings of two sensors: every instant answered by the generated code (and
    from the maintained state), in the ordinary path's order."""
    q = q.format(p=P9)
    vals = [_lit(x) for x in (1, 7, 3, 9, 4)]
    with db.store.write_lock:
        db.store.dictionary.encode([*vals, P9])
    for maintain in (False, True):
        store = TransientStore("a", slice_triples=8)
        on = _pair(db, q, store, 2000, True, maintain)
        off = _pair(db, q, store, 2000, False, False)
        assert on._gen is not None and on._gen.order is not None and (on._maint is not None) == maintain, q
        for j in range(len(vals) - 1):
            _append(db, store, [(NODES[3], P9, vals[j]), (NODES[4], P9, vals[j + 1])], 1000 * (j + 1))
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        n = len(vals) - 1
        for t in range(1000, 1000 * (n + 1), 1000):
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _ordered(a) == _ordered(b) and _ordered(a), (q, t)
            on.settle(a, t)
            off.settle(b, t)
            on.prepare(t + 1000)
            off.prepare(t + 1000)
        if maintain:
            assert maintained.answered_total() - m0 >= n - 1, q
        else:
            assert tiny_gen.taken_total() - g0 == n, q


def test_an_expression_over_a_count_is_generated():
    """ORDER BY arithmetic over a COUNT column (no term id): computed as the executor's
    arithmetic (its answers: the property test)."""
    cq = parse_continuous("REGISTER QUERY x AS SELECT ?a (COUNT(*) AS ?n) FROM STREAM <http://ex.org/a> "
                          "[RANGE 3s STEP 1s] WHERE { ?a <http://ex.org/p0> ?b } GROUP BY ?a ORDER BY DESC(?n * 2)")
    g = tiny_gen.GenQuery.of(cq.query, "RSTREAM")
    assert g is not None and g.order is not None and g.order.exprs
