"""Column-wise string functions (engine/exec/strings.py) against the per-value
path they replace, and against pyoxigraph.

The property tests draw columns of mixed terms (IRIs, blank nodes, simple and
language-tagged strings with escapes, non-ASCII case mappings, typed literals,
unbound) long enough to take the column-wise path, and compare every row's
result (or error) with the per-value evaluator's (``_Evaluator._fallback``),
for the functions alone, nested, and consumed by the string tests, REGEX and
comparisons with constants."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.functions import _Evaluator, eval_expr, eval_filter
from engine.sparql.algebra import Call, Const, Var
from engine.terms import XSD, literal_key
from tests.test_functions import MemCtx, cols_of

x, y = Var("x"), Var("y")

_TEXTS = ["", "a", "Ab", "abc", "http://ex.org/a", "line\nbreak", 'say "hi"', "back\\slash", "tab\there",
          "été", "İstanbul", "straße", "ǅ", "😀x", "ΣΑΣ", "a:b", "ab ab"]
_TAGS = ["en", "en-us", "fr"]


def _term(draw) -> str | None:
    kind = draw(st.integers(0, 9))
    text = draw(st.sampled_from(_TEXTS))
    if kind == 0:
        return None
    if kind == 1:
        return "<http://ex.org/" + draw(st.sampled_from(["a", "b/c", "é", "x#y", ""])) + ">"
    if kind == 2:
        return "_:b" + str(draw(st.integers(0, 3)))
    if kind in (3, 4, 5):
        return literal_key(text)
    if kind == 6:
        return literal_key(text, lang=draw(st.sampled_from(_TAGS)))
    if kind == 7:
        return literal_key(str(draw(st.integers(-5, 50))), XSD + "integer")
    if kind == 8:
        return literal_key(text, "http://ex.org/dt")
    return literal_key("2020-01-0" + str(draw(st.integers(1, 9))), XSD + "date")


@st.composite
def _column(draw, n_min: int = 64, n_max: int = 160) -> list[str | None]:
    n = draw(st.integers(n_min, n_max))
    pool = [_term(draw) for _ in range(draw(st.integers(1, 24)))]
    return [pool[draw(st.integers(0, len(pool) - 1))] for _ in range(n)]


def S(v: str, lang: str | None = None) -> Const:
    return Const(literal_key(v, lang=lang))


def I(v: int) -> Const:  # noqa: E743
    return Const(literal_key(str(v), XSD + "integer"))


def _per_value(expr, ctx, columns, n) -> list:
    return ctx.keys(_Evaluator(columns, n, ctx)._fallback(expr))


_EXPRS = [
    Call("STR", (x,)), Call("LCASE", (x,)), Call("UCASE", (x,)), Call("STRLEN", (x,)),
    Call("LCASE", (Call("STR", (x,)),)), Call("STRLEN", (Call("STR", (x,)),)),
    Call("SUBSTR", (x, I(2))), Call("SUBSTR", (x, I(0), I(3))), Call("SUBSTR", (x, I(2), I(1))),
    Call("SUBSTR", (x, I(-1), I(1))), Call("SUBSTR", (Call("STR", (x,)), I(8))),
    Call("STRBEFORE", (x, S("b"))), Call("STRAFTER", (x, S("b"))), Call("STRBEFORE", (x, S(""))),
    Call("STRAFTER", (x, S(""))), Call("STRAFTER", (x, S("b", "en"))), Call("STRBEFORE", (x, S("a", "fr"))),
    Call("STRAFTER", (Call("STR", (x,)), S("ex.org/"))),
    Call("CONCAT", (x, S("-"), y)), Call("CONCAT", (x, y)), Call("CONCAT", (S("x", "en"), x)),
    Call("CONCAT", (Call("UCASE", (x,)), Call("STR", (y,)))),
    Call("IRI", (Call("STR", (x,)),)), Call("URI", (Call("CONCAT", (S("urn:"), x)),)),
    Call("IRI", (Call("LCASE", (x,)),)),
    Call("LANG", (x,)), Call("DATATYPE", (x,)), Call("STRLANG", (x, S("EN-gb"))), Call("STRLANG", (x, S("1bad"))),
    Call("ENCODE_FOR_URI", (x,)), Call("MD5", (x,)), Call("SHA256", (Call("STR", (x,)),)),
    Call("ENCODE_FOR_URI", (Call("STR", (x,)),)),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xs=_column(), data=st.data())
def test_functions_match_the_per_value_path(xs, data):
    ys = data.draw(st.lists(st.sampled_from(xs), min_size=len(xs), max_size=len(xs)))
    for expr in _EXPRS:
        ctx = MemCtx()
        columns, n = cols_of(ctx, x=xs, y=ys)
        got = ctx.keys(eval_expr(expr, columns, n, ctx))
        assert got == _per_value(expr, ctx, columns, n), expr


_TESTS = [
    Call("STRSTARTS", (Call("STR", (x,)), S("http://ex.org/"))),
    Call("CONTAINS", (Call("LCASE", (x,)), S("ab"))),
    Call("STRENDS", (Call("UCASE", (x,)), S("B", "en"))),
    Call("CONTAINS", (Call("STR", (x,)), S(""))),
    Call("REGEX", (Call("STR", (x,)), S("^[a-z]+$"))),
    Call("REGEX", (Call("LCASE", (x,)), S("É"), S("i"))),
    Call("=", (Call("STR", (x,)), S("a"))),
    Call("!=", (Call("LCASE", (x,)), S("ab", "en"))),
    Call("=", (S("abc"), Call("LCASE", (x,)))),
    Call("<", (Call("STR", (x,)), S("b"))),
    Call(">=", (S("b"), Call("UCASE", (x,)))),
    Call("<", (Call("LCASE", (x,)), S("b", "en"))),
    Call(">", (Call("STRLEN", (x,)), I(3))),
    Call("=", (Call("STRLEN", (Call("STR", (x,)),)), I(1))),
    Call("=", (Call("STRAFTER", (x, S("a"))), S("b"))),
    Call("LANGMATCHES", (Call("LANG", (x,)), S("en"))), Call("LANGMATCHES", (Call("LANG", (x,)), S("*"))),
    Call("LANGMATCHES", (Call("LANG", (x,)), S(""))), Call("LANGMATCHES", (x, S("EN"))),
    Call("=", (Call("LANG", (x,)), S("fr"))),
    Call("=", (Call("DATATYPE", (x,)), Const("<" + XSD + "string>"))),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xs=_column())
def test_filters_over_string_functions_match_the_per_value_path(xs):
    for expr in _TESTS:
        ctx = MemCtx()
        columns, n = cols_of(ctx, x=xs)
        got = eval_filter(expr, columns, n, ctx).tolist()
        want = [k == literal_key("true", XSD + "boolean") for k in _per_value(expr, ctx, columns, n)]
        assert got == want, expr


def test_deadline_is_checked():
    ctx = MemCtx()
    columns, n = cols_of(ctx, x=[literal_key(f"v{i}") for i in range(200)])
    eval_expr(Call("UCASE", (Call("STR", (x,)),)), columns, n, ctx)
    assert ctx.budget_checks >= 2


# ---------------------------------------------------------------- against pyoxigraph

pyoxigraph = pytest.importorskip("pyoxigraph")


def _graph() -> str:
    rng = np.random.default_rng(7)
    lines = []
    for i in range(400):
        s = f"<http://ex.org/s{i % 150}>"
        k = int(rng.integers(0, 6))
        t = _TEXTS[int(rng.integers(0, len(_TEXTS)))].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        o = (f'"{t}"' if k < 2 else f'"{t}"@{_TAGS[k % 3]}' if k == 2 else f"<http://ex.org/o{i % 37}>" if k == 3
             else f'"{i % 50}"^^<{XSD}integer>' if k == 4 else f"_:b{i % 9}")
        lines.append(f"{s} <http://ex.org/p> {o} .")
    return "\n".join(lines) + "\n"


_QUERIES = [
    'SELECT ?s ?o WHERE { ?s <http://ex.org/p> ?o FILTER(STRSTARTS(STR(?o), "http://ex.org/o1")) }',
    'SELECT ?s WHERE { ?s <http://ex.org/p> ?o FILTER(CONTAINS(LCASE(STR(?s)), "s1")) }',
    'SELECT ?s (STR(?o) AS ?t) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?s (UCASE(?o) AS ?t) (LCASE(?o) AS ?l) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?s (STRLEN(?o) AS ?n) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?s (SUBSTR(?o, 2, 3) AS ?t) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?s (STRBEFORE(?o, "a") AS ?b) (STRAFTER(?o, "a") AS ?c) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?s (CONCAT(STR(?s), "|", ?o) AS ?c) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?s (IRI(CONCAT("urn:x:", STRAFTER(STR(?s), "http://"))) AS ?i) WHERE { ?s <http://ex.org/p> ?o }',
    'BASE <http://b.org/d/> SELECT ?s (IRI(STRAFTER(STR(?s), "ex.org/")) AS ?i) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?o WHERE { ?s <http://ex.org/p> ?o FILTER(STR(?o) = "a" || STRLEN(STR(?s)) > 20) }',
    'SELECT ?o WHERE { ?s <http://ex.org/p> ?o FILTER(REGEX(STR(?o), "^[0-9]+$")) }',
    'SELECT ?o (LANG(?o) AS ?l) (DATATYPE(?o) AS ?d) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT ?o WHERE { ?s <http://ex.org/p> ?o FILTER(LANGMATCHES(LANG(?o), "en")) }',
    'SELECT ?s (MD5(?o) AS ?h) (ENCODE_FOR_URI(?o) AS ?e) (STRLANG(?o, "de") AS ?g) WHERE { ?s <http://ex.org/p> ?o }',
    'SELECT (COUNT(DISTINCT STR(?o)) AS ?n) WHERE { ?s <http://ex.org/p> ?o FILTER(!isBlank(?o)) }',
]


def _rows_ox(store, q: str) -> list[tuple]:
    out = []
    for sol in store.query(q):
        row = []
        for v in sol:
            row.append(None if v is None else ("_:" if isinstance(v, pyoxigraph.BlankNode) else str(v)))
        out.append(tuple(row))
    return sorted(out, key=repr)


def _rows_jindou(db: Database, q: str) -> list[tuple]:
    res = db.query(q)
    cols = [res.terms.keys(c) for c in res.columns]
    out = []
    for row in zip(*cols, strict=True):
        out.append(tuple(None if k is None else ("_:" if k.startswith("_:") else _nt(k)) for k in row))
    return sorted(out, key=repr)


def _nt(key: str) -> str:
    """A term key as pyoxigraph's str() writes the term (N-Triples, escapes as it does)."""
    from engine.terms import from_key  # noqa: PLC0415

    t = from_key(key)
    if key[0] == "<":
        return key
    return str(_ox_term(t))


def _ox_term(t):
    if t.lang:
        return pyoxigraph.Literal(t.lexical, language=t.lang)
    return pyoxigraph.Literal(t.lexical, datatype=pyoxigraph.NamedNode(t.datatype))


@pytest.mark.parametrize("q", _QUERIES)
def test_against_pyoxigraph(q):
    nt = _graph()
    db = Database()
    db.load_data(nt, "application/n-triples")
    ox = pyoxigraph.Store()
    ox.load(nt.encode(), format=pyoxigraph.RdfFormat.N_TRIPLES)
    assert _rows_jindou(db, q) == _rows_ox(ox, q)


def test_group_concat_against_pyoxigraph():
    """GROUP_CONCAT over simple and tagged strings with escapes (its order within a
    group is the engine's own: compared as multisets of parts)."""
    nt = _graph()
    db = Database()
    db.load_data(nt, "application/n-triples")
    ox = pyoxigraph.Store()
    ox.load(nt.encode(), format=pyoxigraph.RdfFormat.N_TRIPLES)
    q = ('SELECT ?s (GROUP_CONCAT(?o; separator="|") AS ?g) (COUNT(?o) AS ?n) '
         'WHERE { ?s <http://ex.org/p> ?o FILTER(isLiteral(?o) && !isNumeric(?o)) } GROUP BY ?s')
    res = db.query(q)
    cols = {c: res.terms.keys(col) for c, col in zip(res.vars, res.columns, strict=True)}
    from engine.terms import from_key  # noqa: PLC0415

    mine = {s: sorted(from_key(g).lexical.split("|")) for s, g in zip(cols["s"], cols["g"], strict=True)}
    theirs = {}
    for sol in ox.query(q):
        theirs[str(sol["s"])] = sorted(sol["g"].value.split("|"))
    assert mine == theirs
    # a blank node in a group makes its value an error (unbound), the other groups keep theirs
    q2 = ('SELECT ?s (GROUP_CONCAT(?o) AS ?g) WHERE { ?s <http://ex.org/p> ?o '
          'FILTER(isBlank(?o) || (isLiteral(?o) && !isNumeric(?o))) } GROUP BY ?s')
    r2 = db.query(q2)
    got = dict(zip(r2.terms.keys(r2.columns[0]), r2.terms.keys(r2.columns[1]), strict=True))
    ox2 = {str(sol["s"]): sol["g"] for sol in ox.query(q2)}
    assert {s for s, g in got.items() if g is None} == {s for s, g in ox2.items() if g is None}
    assert any(g is None for g in got.values()) and any(g is not None for g in got.values())


def test_keys_arrow_of_computed_terms():
    """QueryContext.keys_arrow: store ids, query-local ids (interned one by one and
    in bulk, in any order) and UNBOUND, as QueryContext.keys gives them."""
    db = Database()
    db.load_data('<urn:a> <urn:p> "x" .\n<urn:b> <urn:p> "y" .\n', "application/n-triples")
    res = db.query('SELECT ?s (CONCAT(?o, "!") AS ?c) WHERE { ?s <urn:p> ?o }')
    ctx = res.terms
    one = int(ctx.term_id('"single"'))
    bulk = ctx.intern_arrow(pa.array([f'"k{i}"' for i in range(100)] + ['"single"', '"x"'], pa.large_string()))
    more = int(ctx.term_id('"later"'))
    ids = np.concatenate([bulk[::-1], [one, more, -1], res.columns[0], res.columns[1]])
    assert ctx.keys_arrow(ids).to_pylist() == ctx.keys(ids)



def test_bulk_interned_terms_keep_one_id_per_key():
    """Computed terms interned in bulk wait as Arrow (QueryContext._pending): every way
    of asking for a key afterwards (one at a time, a small batch, another bulk batch
    with old and new keys, few against many) gets the id it has, and keys / numeric /
    kinds / keys_arrow / fresh blank nodes see every local term."""
    db = Database()
    db.load_data('<urn:a> <urn:p> "x" .\n', "application/n-triples")
    ctx = db.query('SELECT ?s WHERE { ?s <urn:p> ?o }').terms
    XI = "^^<http://www.w3.org/2001/XMLSchema#integer>"
    first = [f'"{i}"{XI}' for i in range(1000, 1200)]
    a = ctx.intern_arrow(pa.array(first, pa.large_string()))
    assert len(set(a.tolist())) == 200 and min(a) >= (1 << 40)
    assert ctx.term_id(first[5]) == a[5]                      # one at a time
    assert ctx.intern([first[7], '"new"', None]).tolist()[0] == a[7]
    second = first[100:] + [f'"{i}"{XI}' for i in range(5000, 5300)]
    b = ctx.intern_arrow(pa.array(second, pa.large_string()))  # old and new, many
    assert b[:100].tolist() == a[100:].tolist() and len(set(b.tolist())) == 400
    c = ctx.intern_arrow(pa.array([second[150]] + ['"zz"'] * 70, pa.large_string()))  # few against many
    assert c[0] == b[150] and len(set(c[1:].tolist())) == 1
    every = np.concatenate([a, b, c])
    keys = ctx.keys(every)
    assert keys == ctx.keys_arrow(every).to_pylist()
    assert dict(zip(keys, every.tolist(), strict=True)) == {k: ctx.term_id(k) for k in keys}
    assert ctx.numeric(a[:3]).tolist() == [1000.0, 1001.0, 1002.0] and (ctx.kinds(b) == 2).all()
    more = ctx.intern_arrow(pa.array([f'"{i}"' for i in range(80)], pa.large_string()))
    bn = ctx.fresh_bnodes(3, "b")
    assert not set(bn.tolist()) & set(np.concatenate([every, more]).tolist())
    assert ctx.keys(more[:2]) == ['"0"', '"1"'] and ctx.keys(bn)[0].startswith("_:")
