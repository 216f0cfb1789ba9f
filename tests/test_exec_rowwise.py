"""Expressions and aggregates over a few rows evaluated in plain Python
(engine/exec/rowwise.py, aggregates._small) against the column-wise evaluator and pyoxigraph,
and counters showing the small paths are taken."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyoxigraph
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.exec import aggregates as AG
from engine.exec import rowwise
from engine.exec.functions import _Evaluator, eval_expr, eval_filter
from engine.sparql.algebra import Aggregate, Call, Const, Exists, Var
from engine.terms import XSD, literal_key
from tests.test_functions import MemCtx, cols_of

_VARS = ("a", "b", "c")

#: terms of every kind: numerics of each type (valid, invalid, NaN/INF, equal values in
#: other types and lexical forms), strings, language strings, booleans, dates, IRIs, blanks
_TERMS = [
    literal_key("1", XSD + "integer"), literal_key("01", XSD + "integer"), literal_key("-3", XSD + "integer"),
    literal_key("7", XSD + "integer"), literal_key("abc", XSD + "integer"),
    literal_key("1.0", XSD + "decimal"), literal_key("2.50", XSD + "decimal"),
    literal_key("1.0E0", XSD + "double"), literal_key("1e0", XSD + "double"), literal_key("-0.0E0", XSD + "double"),
    literal_key("2.5E0", XSD + "double"), literal_key("NaN", XSD + "double"), literal_key("INF", XSD + "double"),
    literal_key("1.5", XSD + "float"), literal_key("5", XSD + "byte"), literal_key("300", XSD + "byte"),
    literal_key("1"), literal_key("abc"), literal_key("Abc", lang="en"), literal_key("abc", lang="fr"),
    literal_key("true", XSD + "boolean"), literal_key("0", XSD + "boolean"),
    literal_key("2020-01-01", XSD + "date"), literal_key("2020-01-01T00:00:00Z", XSD + "dateTime"),
    literal_key("x", XSD + "string"),
    "<http://ex.org/a>", "<http://ex.org/b>", "_:b1", "_:b2",
]
_CONSTS = _TERMS[:5] + [_TERMS[7], _TERMS[16], _TERMS[18], _TERMS[25]] + [literal_key("55.5", XSD + "decimal")]

_UNARY = ["!", "BOUND", "ISIRI", "ISBLANK", "ISLITERAL", "ISNUMERIC", "STR", "LANG", "DATATYPE",
          "ABS", "UCASE", "STRLEN", "-"]
_BINARY = ["=", "!=", "<", ">", "<=", ">=", "&&", "||", "+", "-", "*", "/", "SAMETERM",
           "CONTAINS", "STRSTARTS", "LANGMATCHES"]


def _leaf():
    return st.one_of(st.sampled_from([Var(v) for v in _VARS] + [Var("missing")]),
                     st.sampled_from([Const(k) for k in _CONSTS]))


def _expr():
    return st.recursive(
        _leaf(),
        lambda sub: st.one_of(
            st.builds(lambda op, a: Call(op, (a,)), st.sampled_from(_UNARY), sub),
            st.builds(lambda op, a, b: Call(op, (a, b)), st.sampled_from(_BINARY), sub, sub),
            st.builds(lambda a, b, c: Call("IF", (a, b, c)), sub, sub, sub),
            st.builds(lambda a, b: Call("COALESCE", (a, b)), sub, sub),
            st.builds(lambda a, xs: Call("IN", (a, *xs)), sub, st.lists(sub, min_size=0, max_size=3)),
        ),
        max_leaves=6,
    )


@st.composite
def _table(draw):
    n = draw(st.integers(1, rowwise.SMALL_ROWS))
    pool = draw(st.lists(st.sampled_from(_TERMS + [None]), min_size=1, max_size=8))
    return {v: [draw(st.sampled_from(pool)) for _ in range(n)] for v in _VARS}


class _Dictionary:
    """Stands for a store dictionary: the key of the row cache (weakly referenced)."""


_STORE = _Dictionary()


class _StoreCtx(MemCtx):
    """MemCtx whose store ids (``_TERMS`` in order, every time) are those of one dictionary,
    so the row cache carries results from one context to the next, as a store's does."""

    dictionary = _STORE


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=_table(), expr=_expr())
def test_rowwise_matches_columns(table, expr):
    for _ in range(2):  # the second time: the rows' results from the cache
        ctx = _StoreCtx(store_keys=_TERMS)
        columns, n = cols_of(ctx, **table)
        want = ctx.keys(_Evaluator(columns, n, ctx).ids(expr))
        val, err = _Evaluator(columns, n, ctx).bools(expr)
        before = rowwise.stats["rows"]
        assert ctx.keys(eval_expr(expr, columns, n, ctx)) == want, expr
        assert eval_filter(expr, columns, n, ctx).tolist() == (val & ~err).tolist(), expr
        assert rowwise.stats["rows"] == before + 2  # both answered row by row


def test_row_cache_taken_for_store_rows_only():
    expr = Call(">", (Var("a"), Const(literal_key("0", XSD + "integer"))))
    keys = [literal_key(str(i), XSD + "integer") for i in range(-2, 3)]
    ctx = _StoreCtx(store_keys=keys)
    columns, n = cols_of(ctx, a=keys)
    assert eval_filter(expr, columns, n, ctx).tolist() == [False, False, False, True, True]
    before = rowwise.stats["memo"]
    ctx = _StoreCtx(store_keys=keys)
    columns, n = cols_of(ctx, a=keys)
    assert eval_filter(expr, columns, n, ctx).tolist() == [False, False, False, True, True]
    assert rowwise.stats["memo"] == before + 5
    # computed (query-local) ids are not kept: another query's local id names another term
    local = _StoreCtx()
    columns, n = cols_of(local, a=[literal_key("5", XSD + "integer")])
    assert eval_filter(expr, columns, n, local).tolist() == [True]
    local = _StoreCtx()
    columns, n = cols_of(local, a=[literal_key("-5", XSD + "integer")])
    assert eval_filter(expr, columns, n, local).tolist() == [False]
    # a context-dependent expression (NOW) is not kept
    now = Call("<", (Var("a"), Call("NOW", ())))
    before = rowwise.stats["memo"]
    for _ in range(2):
        ctx = _StoreCtx(store_keys=keys)
        columns, n = cols_of(ctx, a=keys)
        eval_filter(now, columns, n, ctx)
    assert rowwise.stats["memo"] == before


def test_exists_read_per_row():
    calls = []

    def exists_fn(pattern, columns, n):
        calls.append(n)
        return np.asarray(columns["a"]) % 2 == 0

    ctx = MemCtx(exists_fn=exists_fn)
    columns, n = cols_of(ctx, a=[literal_key(str(i), XSD + "integer") for i in range(6)])
    expr = Call("&&", (Exists(pattern=None, negated=True), Call(">", (Var("a"), Const(literal_key("0", XSD + "integer"))))))
    got = eval_filter(expr, columns, n, ctx).tolist()
    want = [not (c % 2 == 0) and i > 0 for i, c in enumerate(columns["a"].tolist())]
    assert got == want and calls == [n]


def test_large_and_nondeterministic_left_to_columns():
    ctx = MemCtx()
    columns, n = cols_of(ctx, a=[literal_key("1")] * (rowwise.SMALL_ROWS + 1))
    before = dict(rowwise.stats)
    eval_filter(Call("ISLITERAL", (Var("a"),)), columns, n, ctx)  # (too many rows: not asked)
    assert rowwise.stats == before
    columns, n = cols_of(ctx, a=[literal_key("1")] * 3)
    out = eval_expr(Call("CONCAT", (Call("STRUUID", ()), Var("a"))), columns, n, ctx)
    assert rowwise.stats["vector"] == before["vector"] + 1
    assert len(set(out.tolist())) == 3  # a fresh UUID per row


# ---------------------------------------------------------------- aggregates

_AGG_TERMS = _TERMS + [literal_key(str(v), XSD + "integer") for v in (2, 3, 10, -7, 2**60)] + [
    literal_key(x, XSD + "double") for x in ("3.25E0", "1.0E1", "-2.0E0", "1.0E20")]


@st.composite
def _agg_case(draw):
    n = draw(st.integers(0, rowwise.SMALL_ROWS))
    n_groups = draw(st.integers(1, 5))
    kind = draw(st.sampled_from(["ints", "numbers", "any"]))
    pool = {"ints": _AGG_TERMS[-9:-4] + [_TERMS[0], _TERMS[1], None],
            "numbers": [k for k in _AGG_TERMS if "integer" in k or "double" in k] + [None],
            "any": _AGG_TERMS + [None]}[kind]
    vals = [draw(st.sampled_from(pool)) for _ in range(n)]
    groups = [draw(st.integers(0, n_groups - 1)) for _ in range(n)]
    if n == 0:
        n_groups = 1
    return vals, groups, n_groups


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_agg_case(), name=st.sampled_from(["COUNT", "SUM", "AVG", "MIN", "MAX", "SAMPLE", "COUNT*"]),
       distinct=st.booleans())
def test_small_aggregates_match_columns(case, name, distinct):
    vals, groups, n_groups = case
    ctx = MemCtx(store_keys=_AGG_TERMS)
    ids = None if name == "COUNT*" else ctx.intern(vals)
    agg = Aggregate(name.rstrip("*"), None if name == "COUNT*" else Var("o"), distinct and name != "COUNT*", None)
    gi = np.asarray(groups, dtype=np.int64)
    small = AG.aggregate(agg, ids, gi, n_groups, ctx)
    saved = rowwise.SMALL_ROWS
    rowwise.SMALL_ROWS = -1  # the column-wise functions
    try:
        cols = AG.aggregate(agg, ids, gi, n_groups, ctx)
    finally:
        rowwise.SMALL_ROWS = saved
    assert ctx.keys(small) == ctx.keys(cols), (name, vals, groups)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vals=st.lists(st.integers(-(10**9), 10**9), min_size=1, max_size=rowwise.SMALL_ROWS),
       n_groups=st.integers(1, 4), seed=st.integers(0, 3), dbl=st.booleans())
def test_small_avg_sum_of_numbers_match_columns(vals, n_groups, seed, dbl):
    """AVG of integers (decimal quotients, 28 digits, half-even) and float sums in value order."""
    keys = [literal_key(f"{v / 7:.6e}" if dbl and v % 3 == 0 else str(v), XSD + ("double" if dbl and v % 3 == 0
                                                                              else "integer")) for v in vals]
    ctx = MemCtx()
    ids = ctx.intern(keys)
    gi = np.asarray([(i * (seed + 1)) % n_groups for i in range(len(vals))], dtype=np.int64)
    for name in ("AVG", "SUM"):
        agg = Aggregate(name, Var("o"), False, None)
        small = ctx.keys(AG.aggregate(agg, ids, gi, n_groups, ctx))
        saved = rowwise.SMALL_ROWS
        rowwise.SMALL_ROWS = -1
        try:
            cols = ctx.keys(AG.aggregate(agg, ids, gi, n_groups, ctx))
        finally:
            rowwise.SMALL_ROWS = saved
        assert small == cols, (name, keys)


@settings(max_examples=200, deadline=None)
@given(num=st.lists(st.integers(-(2**61), 2**61), min_size=1, max_size=20), den=st.integers(1, 10**6))
def test_decimal_quotients_equal_result_keys(num, den):
    """The column-wise quotients and the per-group division (both used for AVG) write the same keys."""
    from engine.exec import values as V  # noqa: PLC0415

    lex = V.decimal_quotients(np.asarray(num, dtype=np.int64), np.full(len(num), den, dtype=np.int64)).to_pylist()
    want = [AG._result_key(V.Num(V.INTEGER, x), den, True) for x in num]
    assert [literal_key(x, XSD + "decimal") for x in lex] == want


def test_small_aggregates_taken():
    ctx = MemCtx()
    vals = [literal_key(x, XSD + "double") for x in ("1.5E0", "2.5E0", "1.5E0")]
    gi = np.asarray([0, 1, 0], dtype=np.int64)
    before = AG.small_stats["small"]
    out = AG.aggregate(Aggregate("AVG", Var("o"), False, None), ctx.intern(vals), gi, 2, ctx)
    assert ctx.keys(out) == [literal_key("1.5E0", XSD + "double"), literal_key("2.5E0", XSD + "double")]
    assert AG.small_stats["small"] == before + 1
    dec = ctx.intern([literal_key("1.5", XSD + "decimal")])
    cols_before = AG.small_stats["columns"]
    AG.aggregate(Aggregate("SUM", Var("o"), False, None), dec, np.zeros(1, np.int64), 1, ctx)
    assert AG.small_stats["columns"] == cols_before + 1  # a decimal: handed over


# ---------------------------------------------------------------- oracle (pyoxigraph)

_DATA = "\n".join(
    [f'<http://ex.org/s{i}> <http://ex.org/v> "{v}"^^<{XSD}{t}> .'
     for i, (v, t) in enumerate([("1", "integer"), ("2.5E0", "double"), ("4", "integer"), ("55.5", "decimal"),
                                 ("-1.0E0", "double"), ("3", "integer"), ("7.25", "decimal"), ("0", "integer")])]
    + [f'<http://ex.org/s{i}> <http://ex.org/g> <http://ex.org/g{i % 3}> .' for i in range(8)]
    + [f'<http://ex.org/s{i}> <http://ex.org/n> "name {i}"@en .' for i in range(0, 8, 2)]
    + ['<http://ex.org/s1> <http://ex.org/n> "plain" .', '<http://ex.org/s3> <http://ex.org/n> <http://ex.org/x> .']
) + "\n"

_P = "PREFIX ex: <http://ex.org/> PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> "
_QUERIES = [
    "SELECT ?s WHERE { ?s ex:v ?v FILTER(?v >= 2 && DATATYPE(?v) != xsd:decimal) }",
    "SELECT ?s WHERE { ?s ex:v ?v ; ex:g ?g FILTER(?g != ex:g1 && isLiteral(?v)) }",
    "SELECT ?s ?w WHERE { ?s ex:v ?v BIND(?v * 2 + 1 AS ?w) }",
    "SELECT ?s ?l WHERE { ?s ex:n ?n BIND(LANG(?n) AS ?l) FILTER(LANGMATCHES(?l, \"en\") || !isLiteral(?n)) }",
    "SELECT ?s WHERE { ?s ex:g ?g OPTIONAL { ?s ex:n ?n } FILTER(!BOUND(?n) || CONTAINS(STR(?n), \"name\")) }",
    "SELECT ?g (SUM(?v) AS ?t) (AVG(?v) AS ?a) (MIN(?v) AS ?lo) (MAX(?v) AS ?hi) (COUNT(*) AS ?c) "
    "WHERE { ?s ex:v ?v ; ex:g ?g } GROUP BY ?g",
    "SELECT ?g (SUM(?v) AS ?t) (AVG(?v) AS ?a) (MAX(?v) AS ?hi) WHERE { ?s ex:v ?v ; ex:g ?g "
    "FILTER(DATATYPE(?v) != xsd:decimal) } GROUP BY ?g",
    "SELECT (COUNT(DISTINCT ?g) AS ?n) (COUNT(?n) AS ?m) WHERE { ?s ex:g ?g OPTIONAL { ?s ex:n ?n } }",
    "SELECT ?s WHERE { ?s ex:v ?v FILTER(?v IN (1, 2.5e0, 7.25)) } ORDER BY DESC(?v)",
    "SELECT ?s WHERE { ?s ex:g ?g FILTER NOT EXISTS { ?s ex:n ?n } }",
]


def _norm(v):
    """N-Triples text, doubles by value (pyoxigraph writes 6.0E0 as "6", 112.0 as "112")."""
    if v is None:
        return None
    s = str(v)
    if s.endswith(f"^^<{XSD}double>"):
        return ("double", float(s[1:s.rindex('"')]))
    if s.endswith(f"^^<{XSD}decimal>"):
        return ("decimal", Decimal(s[1:s.rindex('"')]))
    return s


@pytest.mark.parametrize("q", _QUERIES)
def test_against_pyoxigraph(q):
    from engine.database import Database  # noqa: PLC0415
    from tests.test_exec_strings import _nt  # noqa: PLC0415

    db = Database()
    db.load_data(_DATA, "application/n-triples")
    ox = pyoxigraph.Store()
    ox.load(_DATA.encode(), format=pyoxigraph.RdfFormat.N_TRIPLES)
    want = sorted((tuple(_norm(v) for v in sol) for sol in ox.query(_P + q)), key=repr)
    for _ in range(2):  # the second time with the rows' results cached (a spaced copy: no plan cache hit)
        before = rowwise.stats["rows"] + AG.small_stats["small"]
        res = db.query(_P + q + " " * _)
        cols = [res.terms.keys(c) for c in res.columns]
        got = sorted((tuple(_norm(None if k is None else _nt(k)) for k in row) for row in zip(*cols, strict=True)),
                     key=repr)
        assert got == want
        assert rowwise.stats["rows"] + AG.small_stats["small"] > before  # the small paths answered


# ---------------------------------------------------------------- keys the store lacks


def _lookups(d):
    """Counts the dictionary's look-ups (one key or a batch)."""
    calls = []
    one, many = d.lookup, d.lookup_many
    d.lookup = lambda k: calls.append(k) or one(k)
    d.lookup_many = lambda ks: calls.extend(ks) or many(ks)
    return calls, (one, many)


@pytest.mark.parametrize(("k", "filler"), [(1, 0), (6, 0), (1, 300)])  # (300 more: re-checked by look-up)
def test_absent_keys_remembered_until_the_store_holds_them(k, filler):
    from engine.database import Database  # noqa: PLC0415
    from engine.exec.context import LOCAL_BASE  # noqa: PLC0415
    from engine.exec.evaluate import QueryContext  # noqa: PLC0415

    db = Database()
    db.load_data('<http://ex.org/s> <http://ex.org/p> "1"^^<http://www.w3.org/2001/XMLSchema#integer> .\n',
                 "application/n-triples")
    keys = [literal_key(str(90_000 + j), XSD + "integer") for j in range(k)]
    ctx = QueryContext(db.store.snapshot())
    assert all(i >= LOCAL_BASE for i in ctx.intern(keys).tolist())  # computed: query-local
    d = db.store.snapshot().dictionary
    calls, saved = _lookups(d)
    try:
        ctx = QueryContext(db.store.snapshot())
        assert all(i >= LOCAL_BASE for i in ctx.intern(keys).tolist())
        assert calls == []  # known absent: no look-up
        # the store now holds them (appended since): the next query finds their store ids
        db.load_data("".join(f"<http://ex.org/s> <http://ex.org/q> {x} .\n" for x in keys)
                     + "".join(f"<http://ex.org/f{j}> <http://ex.org/q> <http://ex.org/o{j}> .\n" for j in range(filler)),
                     "application/n-triples")
        snap = db.store.snapshot()
        ctx = QueryContext(snap)
        got = ctx.intern(keys).tolist()
        assert got == [snap.dictionary.lookup(x) for x in keys] and all(0 <= i < LOCAL_BASE for i in got)
    finally:
        d.lookup, d.lookup_many = saved
    # and a query joining a computed value with the stored one agrees
    res = db.query("SELECT ?s WHERE { ?s <http://ex.org/p> ?o BIND(?o + 89999 AS ?v) ?s <http://ex.org/q> ?v }")
    assert len(res) == 1


_GROUPED = [
    "SELECT ?g (COUNT(*) AS ?c) (SUM(?v) AS ?t) WHERE { ?s ex:v ?v ; ex:g ?g } GROUP BY ?g",
    "SELECT ?g ?d (MIN(?v) AS ?lo) (AVG(?v) AS ?a) WHERE { ?s ex:v ?v ; ex:g ?g BIND(DATATYPE(?v) AS ?d) } "
    "GROUP BY ?g ?d",
    "SELECT ?k (GROUP_CONCAT(STR(?s)) AS ?all) WHERE { ?s ex:v ?v BIND(?v > 2 AS ?k) } GROUP BY ?k",
    "SELECT ?n (COUNT(DISTINCT ?g) AS ?c) WHERE { ?s ex:g ?g OPTIONAL { ?s ex:n ?n } } GROUP BY ?n "
    "HAVING (COUNT(DISTINCT ?g) > 0) ORDER BY ?n",
]


@pytest.mark.parametrize("q", _GROUPED)
def test_small_paths_equal_the_column_wise_ones_row_for_row(q):
    """The same rows with every small path off (SMALL_ROWS = -1: filters, expressions, groups
    and aggregates column-wise); in the same order under ORDER BY (groups of computed keys are
    numbered by their query-local ids, which the two paths allocate in different orders)."""
    from engine.database import Database  # noqa: PLC0415

    db = Database()
    db.load_data(_DATA, "application/n-triples")

    def rows(text):
        res = db.query(text)
        out = list(zip(*[res.terms.keys(c) for c in res.columns], strict=True))
        return out if "ORDER BY" in text else sorted(out, key=repr)

    got = rows(_P + q)
    saved = rowwise.SMALL_ROWS
    rowwise.SMALL_ROWS = -1
    try:
        want = rows(_P + q + " ")
    finally:
        rowwise.SMALL_ROWS = saved
    assert got == want
