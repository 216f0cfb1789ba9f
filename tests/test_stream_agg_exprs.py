"""Aggregates of expressions (``SUM(?a * ?b)``, ``AVG(xsd:double(?v))``, ``MAX(STR(?x))``) on the
generated and maintained small-window paths (:mod:`engine.stream.tiny_aggs`: value counts keyed by
the expression's term key) answer like the ordinary path and like pyoxigraph, are taken, and hand
an instant back where a solution's expression is an error.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.sparql.csparql import parse_continuous
from engine.stream import maintained, tiny_gen
from engine.stream.transient import TransientStore
from tests.test_stream_maintained import _append
from tests.test_stream_tiny_aggs import P9, SEP, STRS, _lit, _pair, check_paths, replay_compared
from tests.test_stream_tiny_gen import (
    EX,
    NODES,
    PREDS,
    TERMS,
    XSD,
    _oxigraph_zero_quotient,
    _rows,
    static_db,
)

VALUES = TERMS + STRS[:3]
SEEN = {"gen": [0, 0], "maint": [0, 0]}   # (instants answered by the path, instants of queries it took)

EXPRS = ["?{c} * 2", "?{c} + ?{d}", f"<{XSD}double>(?{{c}})", "?{c} - 1", "-?{c}", "?{c} / 2",
         "?{c} * ?{d}", "ABS(?{c})", "IF(?{c} > 1, ?{c}, 0)"]
KEY_EXPRS = ["STR(?{g})", "isIRI(?{g})", 'CONCAT(STR(?{g}), "-")', "DATATYPE(?{g})"]
AGGS = ["SUM({e})", "AVG({e})", "MIN({e})", "MAX({e})", "SUM(DISTINCT {e})", "AVG(DISTINCT {e})"]


@pytest.fixture(scope="module")
def db():
    d = static_db((f"<{EX}a>", *STRS))
    yield d
    d.close()


def draw_grouped_bgp(draw) -> tuple[str, list[str], str | None, str, str]:
    """(a BGP of 1-3 random patterns binding at least two of ?a ?b ?c, the variables it
    binds, a group key among them or None, two variables for the aggregates to read)."""
    vars_ = ["a", "b", "c"]
    k = draw(st.integers(1, 3))
    pats = []
    for _ in range(k):
        s = "?" + draw(st.sampled_from(vars_)) if draw(st.integers(0, 4)) else draw(st.sampled_from(NODES))
        o = "?" + draw(st.sampled_from(vars_)) if draw(st.integers(0, 4)) else draw(st.sampled_from(TERMS[:8]))
        pats.append(f"{s} {draw(st.sampled_from(PREDS))} {o} .")
    body = " ".join(pats)
    used = [v for v in vars_ if "?" + v in body]
    if len(used) < 2:
        body += f" ?a {PREDS[0]} ?b ."
        used = sorted(set(used) | {"a", "b"})
    g = draw(st.sampled_from(used + [None]))
    c = draw(st.sampled_from([v for v in used if v != g] or used))
    d = draw(st.sampled_from(used))
    return body, used, g, c, d


@st.composite
def agg_expr_queries(draw):
    body, used, g, c, d = draw_grouped_bgp(draw)
    sel = []
    for j in range(draw(st.integers(1, 3))):
        e = draw(st.sampled_from(EXPRS)).format(c=c, d=d)
        sel.append(f"({draw(st.sampled_from(AGGS)).format(e=e)} AS ?x{j})")
    if draw(st.booleans()):   # a BIND read by an aggregate (and maybe a FILTER)
        e = draw(st.sampled_from(EXPRS)).format(c=c, d=d)
        body += f" BIND({e} AS ?z)"
        if draw(st.booleans()):
            body += " FILTER(?z > 1 || !BOUND(?z))"
        sel.append(f"({draw(st.sampled_from(AGGS)).format(e='?z')} AS ?y)")
    if draw(st.booleans()):
        sel.append("(COUNT(*) AS ?n)")
    having = ""
    if draw(st.booleans()):
        e = draw(st.sampled_from(EXPRS)).format(c=c, d=d)
        having = f" HAVING ({draw(st.sampled_from(['SUM', 'MAX', 'AVG']))}({e}) > 1)"
    if draw(st.booleans()):
        body += f" FILTER(?{c} != 0)"
    if g and draw(st.booleans()):   # an expression over the group's key, as terms
        ke = draw(st.sampled_from(KEY_EXPRS)).format(g=g)
        sel.append(f"({ke} AS ?k)")
    head = ("?" + g + " " if g else "") + " ".join(sel)
    tail = f" GROUP BY ?{g}" if g else ""
    if g and draw(st.booleans()):   # a group key that is an expression: GROUP BY (expr AS ?gk)
        ge = draw(st.sampled_from(["STR(?{g})", "?{g} * 2", "isIRI(?{g})", "FLOOR(?{g} / 2)"])).format(g=g)
        head = "?gk " + " ".join(x for x in sel if "AS ?k)" not in x)
        tail = f" GROUP BY ({ge} AS ?gk)"
    return f"SELECT {head} WHERE {{ {body} }}{tail}{having}"


elements = st.lists(st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(VALUES)),
                             min_size=1, max_size=6), min_size=1, max_size=6)


def _replay(db, q: str, els: list, rng: int, maintain: bool, seen: dict = SEEN) -> None:
    # (pyoxigraph where the fast path answered: a handed-back instant is the ordinary path's,
    # which differs from pyoxigraph on a group of errors only -- AVG of them is 0 there)
    # (and not over STR(): pyoxigraph writes a double in canonical form on load, STR of
    # "3.25E0"^^xsd:double is "3.25" there, "3.25E0" on both of Jindou's paths)
    replay_compared(db, q, els, rng, maintain, seen,
                    oracle_when=lambda w: not _oxigraph_zero_quotient(db, q, w) and "STR(" not in q)


_SETTINGS = settings(max_examples=120, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@_SETTINGS
@given(q=agg_expr_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_aggregates_of_expressions_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, False)


@_SETTINGS
@given(q=agg_expr_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_aggregates_of_expressions_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, True)


def test_the_property_tests_took_both_paths():
    """Many instants of the queries each path took were answered there (the vocabulary's strings
    and IRIs make many expressions errors, whose instants are handed back)."""
    for key in ("gen", "maint"):
        hit, n = SEEN[key]
        assert n > 0 and hit > n // 5, (key, SEEN)


# ---------------------------------------------------------------- each shape takes both paths

SHAPES = [
    "SELECT ?a (SUM(?b * 2) AS ?s) WHERE {{ ?a {p} ?b }} GROUP BY ?a",
    f"SELECT ?a (AVG(<{XSD}double>(?b)) AS ?m) (COUNT(*) AS ?n) WHERE {{{{ ?a {{p}} ?b }}}} GROUP BY ?a",
    "SELECT (MIN(?b - 1) AS ?lo) (MAX(-?b) AS ?hi) WHERE {{ ?a {p} ?b }}",
    "SELECT ?a (SUM(DISTINCT ?b * ?b) AS ?s) WHERE {{ ?a {p} ?b }} GROUP BY ?a HAVING (SUM(?b * 2) > 1)",
    "SELECT ?a (MAX(STR(?b)) AS ?x) WHERE {{ ?a {p} ?b }} GROUP BY ?a",
    f'SELECT ?a (GROUP_CONCAT(STR(?b); SEPARATOR="{SEP}") AS ?gc) WHERE {{{{ ?a {{p}} ?b }}}} GROUP BY ?a',
    "SELECT ?a ((SUM(?b * 2) / COUNT(?b)) AS ?m) WHERE {{ ?a {p} ?b }} GROUP BY ?a",
    "SELECT ?a (SUM(?z) AS ?s) (MAX(?w) AS ?m) WHERE {{ ?a {p} ?b BIND(?b * 10 AS ?z) BIND(?z + 1 AS ?w) "
    "FILTER(?z > 0) }} GROUP BY ?a",
    "SELECT (STR(?a) AS ?name) (SUM(?b) AS ?s) WHERE {{ ?a {p} ?b }} GROUP BY ?a",
    "SELECT ?d (COUNT(*) AS ?n) (MAX(?b) AS ?m) WHERE {{ ?a {p} ?b }} GROUP BY (FLOOR(?b / 2) AS ?d) ORDER BY ?d",
]
#: per shape, readings of one sensor the shape decides (no expression errors)
READINGS = {0: [1, 2, 5], 1: [1, "1.5", "2.25E0"], 2: ["1.5", "0.5", "2"], 3: [1, 1, 5], 4: [5, 5, 5],
            5: ['"y"', '"y"', '"y"'], 6: ["2.25E0", "1.0E0", "0.5E0"],
            7: [1, "0.5", "2.5E0"], 8: [1, 2, 3], 9: [1, 2, 5]}


@pytest.mark.parametrize("k", range(len(SHAPES)))
def test_each_shape_takes_the_generated_and_maintained_paths(db, k):
    """Every instant answered by generated code (and, with maintenance on, from the maintained
    state), equal to the ordinary path's."""
    check_paths(db, SHAPES[k].format(p=P9), READINGS[k])


@pytest.mark.parametrize("agg,taken", [("SUM", True), ("MIN", True), ("MAX", True), ("AVG", False),
                                       ("SAMPLE", False)])
def test_an_expression_error(db, agg, taken):
    """``AGG(?b * 2)`` over a string: the solution's expression is an error. SUM / MIN / MAX of
    the group are errors (the executor's), answered; AVG (0 over errors only in the executor),
    SAMPLE: the instant is handed back. The answer is the ordinary path's either way."""
    x = '"x"'
    with db.store.write_lock:
        db.store.dictionary.encode([x, _lit(1), P9])
    q = f"SELECT ?a ({agg}(?b * 2) AS ?s) WHERE {{ ?a {P9} ?b }} GROUP BY ?a"
    for maintain in (False, True):
        store = TransientStore("a", slice_triples=8)
        on = _pair(db, q, store, 2000, True, maintain)
        off = _pair(db, q, store, 2000, False, False)
        _append(db, store, [(NODES[3], P9, x), (NODES[3], P9, _lit(1))], 1000)
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        for t in (1000, 2000):
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _rows(a) == _rows(b) and len(_rows(a)) == 1, q
            on.settle(a, t)
            off.settle(b, t)
            on.prepare(t + 1000)
            off.prepare(t + 1000)
        fast = (maintained.answered_total() - m0) if maintain else (tiny_gen.taken_total() - g0)
        assert (fast > 0) == taken, (q, maintain)


@pytest.mark.parametrize("q", [
    "SELECT ?z (SUM(?b) AS ?n) WHERE { ?a <http://ex.org/p0> ?b BIND(?b * 2 AS ?z) } GROUP BY ?z",
])
def test_bound_keys_are_not_generated(q):
    """A group key bound by a BIND may be unbound: not taken here (COUNT(expr): see
    tests/test_stream_count_expr.py)."""
    cq = parse_continuous(f"REGISTER QUERY x AS {q.replace(' WHERE', ' FROM STREAM <http://ex.org/a> [RANGE 3s STEP 1s] WHERE', 1)}")
    assert tiny_gen.GenQuery.of(cq.query, "RSTREAM") is None


# ---------------------------------------------------------------- UNION with aggregates beyond COUNT

UNION_SEEN = {"gen": [0, 0], "maint": [0, 0]}


@st.composite
def union_agg_queries(draw):
    """GROUP BY over ``{ A } UNION { B }`` with SUM / AVG / MIN / MAX (of variables and
    expressions): the branches' value counts summed per group (tiny_union)."""
    p = lambda: draw(st.sampled_from(PREDS))   # noqa: E731
    left = f"?a {p()} ?b ." + (f" ?b {p()} ?c ." if draw(st.booleans()) else "")
    right = f"?a {p()} ?b ." + (f" FILTER(?b != {draw(st.sampled_from(NODES))})" if draw(st.booleans()) else "")
    g = draw(st.sampled_from(["a", None]))
    aggs = ["SUM(?b)", "MAX(?b)", "MIN(?b)", "AVG(?b)", "SUM(?b * 2)", "COUNT(*)", "COUNT(DISTINCT ?b)",
            "SUM(DISTINCT ?b)", "MAX(STR(?b))"]
    sel = [f"({draw(st.sampled_from(aggs))} AS ?x{j})" for j in range(draw(st.integers(1, 3)))]
    head = ("?" + g + " " if g else "") + " ".join(sel)
    tail = f" GROUP BY ?{g}" if g else ""
    return f"SELECT {head} WHERE {{ {{ {left} }} UNION {{ {right} }} }}{tail}"


@_SETTINGS
@given(q=union_agg_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_union_aggregates(db, q, els, rng):
    _replay(db, q, els, rng, False, UNION_SEEN)


@_SETTINGS
@given(q=union_agg_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_union_aggregates(db, q, els, rng):
    _replay(db, q, els, rng, True, UNION_SEEN)


def test_the_union_property_tests_took_both_paths():
    for key in ("gen", "maint"):
        hit, n = UNION_SEEN[key]
        assert n > 0 and hit > n // 4, (key, UNION_SEEN)
