"""Column-wise isNumeric, per-row UUID / STRUUID / BNODE() / RAND, and the kinds
and numeric values of many computed terms read from their Arrow copy
(engine/exec/functions.py, engine/exec/evaluate.py), against the per-value
evaluator and pyoxigraph."""

from __future__ import annotations

import re

import pyoxigraph
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.functions import _Evaluator, eval_expr, eval_filter
from engine.sparql.algebra import Call, Var
from engine.terms import XSD, literal_key
from tests.test_functions import MemCtx, cols_of

x = Var("x")
_TRUE = literal_key("true", XSD + "boolean")

#: numeric and would-be numeric literals: valid, invalid lexical forms, out of a
#: derived type's range, NaN / INF spellings, and non-numeric neighbours
_NUMERIC_ISH = [
    ("1", "integer"), ("-0", "integer"), ("+7", "integer"), ("1.5", "integer"), ("abc", "integer"),
    ("", "integer"), ("12", "decimal"), ("1.", "decimal"), (".5", "decimal"), ("1e3", "decimal"),
    ("1e3", "double"), ("NaN", "double"), ("NaN", "float"), ("nan", "double"), ("INF", "double"),
    ("-INF", "float"), ("1.5E-2", "float"), ("300", "byte"), ("127", "byte"), ("-1", "nonNegativeInteger"),
    ("5", "positiveInteger"), ("0", "positiveInteger"), ("99999999999999999999999", "integer"),
    ("1", "string"), ("1", "boolean"), ("NaN", "string"), ("2020-01-01", "date"),
]


def _term(draw) -> str | None:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return None
    if kind == 1:
        return "<http://ex.org/NaN" + str(draw(st.integers(0, 3))) + ">"
    if kind == 2:
        return "_:NaN" + str(draw(st.integers(0, 3)))
    if kind == 3:
        return literal_key(draw(st.sampled_from(["12", "NaN", "x", ""])), lang=draw(st.sampled_from([None, "en"])))
    lex, dt = draw(st.sampled_from(_NUMERIC_ISH))
    return literal_key(lex, XSD + dt)


@st.composite
def _column(draw) -> list[str | None]:
    n = draw(st.integers(64, 200))
    pool = [_term(draw) for _ in range(draw(st.integers(1, 30)))]
    return [pool[draw(st.integers(0, len(pool) - 1))] for _ in range(n)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xs=_column())
def test_isnumeric_matches_the_per_value_path(xs):
    for expr in (Call("ISNUMERIC", (x,)), Call("!", (Call("ISNUMERIC", (x,)),)),
                 Call("||", (Call("ISNUMERIC", (x,)), Call("ISIRI", (x,))))):
        ctx = MemCtx()
        columns, n = cols_of(ctx, x=xs)
        want = ctx.keys(_Evaluator(columns, n, ctx)._fallback(expr))
        assert ctx.keys(eval_expr(expr, columns, n, ctx)) == want, expr
        assert eval_filter(expr, columns, n, ctx).tolist() == [k == _TRUE for k in want], expr


def _graph(n: int = 400) -> str:
    lines = []
    vals = ['"1"^^<{x}integer>', '"2.50"^^<{x}decimal>', '"NaN"^^<{x}double>', '"INF"^^<{x}float>',
            '"abc"^^<{x}integer>', '"7"', '"7"@en', '"1"^^<{x}boolean>', "<http://ex.org/o>", "_:b"]
    for i in range(n):
        o = vals[i % len(vals)].replace("{x}", XSD)
        if i % 3 == 0:
            o = f'"{i}"^^<{XSD}integer>'
        lines.append(f"<http://ex.org/s{i}> <http://ex.org/p> {o} .")
        lines.append(f'<http://ex.org/s{i}> <http://ex.org/q> "{i}"^^<{XSD}integer> .')
    return "\n".join(lines) + "\n"


def _pair(nt: str | None = None):
    """Jindou and pyoxigraph over the same graph (``_graph()`` by default)."""
    nt = _graph() if nt is None else nt
    db = Database()
    db.load_data(nt, "application/n-triples")
    ox = pyoxigraph.Store()
    ox.load(nt.encode(), format=pyoxigraph.RdfFormat.N_TRIPLES)
    return db, ox


def _rows_ox(store, q: str) -> list[tuple]:
    return sorted((tuple(None if v is None else str(v) for v in sol) for sol in store.query(q)), key=repr)


def _rows_jindou(db: Database, q: str) -> list[tuple]:
    from tests.test_exec_strings import _nt  # noqa: PLC0415

    res = db.query(q)
    cols = [res.terms.keys(c) for c in res.columns]
    return sorted((tuple(None if k is None else _nt(k) for k in row) for row in zip(*cols, strict=True)), key=repr)


_P = "PREFIX ex: <http://ex.org/> PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> "
_ORACLE = [
    "SELECT ?s WHERE { ?s ex:p ?o FILTER(isNumeric(?o)) }",
    "SELECT ?s WHERE { ?s ex:p ?o FILTER(!isNumeric(?o)) }",
    "SELECT ?s (isNumeric(?o) AS ?b) WHERE { ?s ex:p ?o }",
    # computed terms (more than 256 distinct: their Arrow copy) read as numbers and kinds
    "SELECT ?s WHERE { ?s ex:q ?v BIND(?v * 3 + 1 AS ?w) FILTER(?w > 600 && isNumeric(?w)) }",
    "SELECT ?s WHERE { ?s ex:q ?v BIND(?v / 4 AS ?w) FILTER(?w < 20.5) }",
    "SELECT (SUM(?w) AS ?t) WHERE { ?s ex:q ?v BIND(?v * 2 AS ?w) }",
    "SELECT ?s WHERE { ?s ex:q ?v BIND(IRI(CONCAT(STR(?s), \"/\", STR(?v))) AS ?i) FILTER(isIRI(?i)) }",
    "SELECT ?s WHERE { ?s ex:q ?v BIND(CONCAT(STR(?s), STR(?v)) AS ?c) FILTER(isLiteral(?c) && !isNumeric(?c)) }",
    "SELECT (COUNT(*) AS ?n) WHERE { ?s ex:q ?v BIND(BNODE() AS ?b) FILTER(isBlank(?b) && !isLiteral(?b)) }",
]


@pytest.mark.parametrize("q", _ORACLE)
def test_against_pyoxigraph(q):
    db, ox = _pair()
    assert _rows_jindou(db, _P + q) == _rows_ox(ox, _P + q)


_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


@pytest.mark.parametrize("fn,pattern", [("STRUUID()", f'"{_UUID}"'), ("UUID()", f"<urn:uuid:{_UUID}>")])
def test_uuids_are_fresh_per_row_and_well_formed(fn, pattern):
    db, ox = _pair()
    q = _P + f"SELECT ?s ?u WHERE {{ ?s ex:q ?v BIND({fn} AS ?u) }}"
    rows = _rows_jindou(db, q)
    assert len(rows) == 400 == len(_rows_ox(ox, q))
    assert len({u for _, u in rows}) == 400
    assert all(re.fullmatch(pattern, u) for _, u in rows)
    count = _P + f"SELECT (COUNT(DISTINCT ?u) AS ?n) (SAMPLE(isIRI(?u)) AS ?i) WHERE {{ ?s ex:q ?v BIND({fn} AS ?u) }}"
    assert _rows_jindou(db, count) == _rows_ox(ox, count)


def test_bnodes_and_rands_per_row():
    db, ox = _pair()
    for q in ("SELECT (COUNT(DISTINCT ?b) AS ?n) WHERE { ?s ex:q ?v BIND(BNODE() AS ?b) }",
              "SELECT (COUNT(DISTINCT ?r) > 390 AS ?n) (MIN(?r) >= 0 && MAX(?r) < 1 AS ?in) "
              "WHERE { ?s ex:q ?v BIND(RAND() AS ?r) FILTER(isNumeric(?r) && DATATYPE(?r) = xsd:double) }"):
        assert _rows_jindou(db, _P + q) == _rows_ox(ox, _P + q)
    # two BNODE() calls in one query never share a node
    q = _P + "SELECT (COUNT(DISTINCT ?b) AS ?n) WHERE { { ?s ex:q ?v BIND(BNODE() AS ?b) } UNION { ?s ex:q ?v BIND(BNODE() AS ?b) } }"
    assert _rows_jindou(db, q) == [('"800"^^<http://www.w3.org/2001/XMLSchema#integer>',)]


def test_order_by_rand_is_a_random_order_of_the_same_rows():
    db, ox = _pair()
    every = _rows_jindou(db, _P + "SELECT ?s ?v WHERE { ?s ex:q ?v }")
    for q, n in (("SELECT ?s ?v WHERE { ?s ex:q ?v } ORDER BY RAND()", 400),
                 ("SELECT ?s ?v WHERE { ?s ex:q ?v } ORDER BY DESC(RAND()) ?s LIMIT 7 OFFSET 3", 7),
                 ("SELECT DISTINCT ?v WHERE { ?s ex:q ?v FILTER(?v < 50) } ORDER BY RAND() LIMIT 80", 50)):
        got = _rows_jindou(db, _P + q)
        assert len(got) == n == len(_rows_ox(ox, _P + q))
        if "?s" in q.split("WHERE")[0]:
            assert set(got) <= set(every)
    # the order is random: 400 rows in their scan order twice in a row has probability 1/400!^2
    q = _P + "SELECT ?s WHERE { ?s ex:q ?v } ORDER BY RAND()"
    runs = []
    for _ in range(2):
        res = db.query(q)
        runs.append(res.terms.keys(res.columns[0]))
    assert runs[0] != runs[1]


_CAST_TEXTS = ["12", " 12 ", "\u00a012\u2003", "\n-7\t", "+0", "1.5", ".5", "5.", ".", "-", "1e3", "1E-2", " INF",
               "-INF", "NaN", "nan", "true", " false ", "1", "0", "2020-01-31", " 2020-02-30", "2020-01-01T10:00:00Z",
               "-0001-01-01T00:00:00+01:00", "\u0661\u0662", "１２", "12abc", "", "x", 'say "1"', "back\\1",
               "99999999999999999999999999", "300", "2020-01-01Z"]
_CAST_TYPES = ["integer", "int", "byte", "nonNegativeInteger", "decimal", "double", "float", "boolean", "dateTime",
               "date", "string"]


def _cast_term(draw) -> str | None:
    kind = draw(st.integers(0, 6))
    text = draw(st.sampled_from(_CAST_TEXTS))
    if kind == 0:
        return None
    if kind == 1:
        return "<http://ex.org/" + draw(st.sampled_from(["1", "a"])) + ">"
    if kind == 2:
        return "_:b1"
    if kind == 3:
        return literal_key(text, lang="en")
    if kind == 4:
        return literal_key(text, XSD + draw(st.sampled_from(["integer", "decimal", "double", "boolean", "date",
                                                              "dateTime", "gYear", "string"])))
    return literal_key(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_casts_match_the_per_value_path(data):
    from engine.sparql.algebra import FunctionCall  # noqa: PLC0415

    n = data.draw(st.integers(64, 160))
    pool = [_cast_term(data.draw) for _ in range(data.draw(st.integers(1, 30)))]
    xs = [pool[data.draw(st.integers(0, len(pool) - 1))] for _ in range(n)]
    for t in _CAST_TYPES:
        expr = FunctionCall(XSD + t, (x,))
        ctx = MemCtx()
        columns, m = cols_of(ctx, x=xs)
        want = ctx.keys(_Evaluator(columns, m, ctx)._fallback(expr))
        assert ctx.keys(eval_expr(expr, columns, m, ctx)) == want, t


@pytest.mark.parametrize("q", [
    "SELECT ?s (xsd:integer(?o) AS ?i) WHERE { ?s ex:p ?o }",
    "SELECT ?s (xsd:boolean(?o) AS ?i) WHERE { ?s ex:p ?o }",
    "SELECT (COUNT(?i) AS ?n) WHERE { ?s ?p ?o BIND(xsd:double(?o) AS ?i) }",
    "SELECT ?s WHERE { ?s ex:q ?v FILTER(xsd:integer(STR(?v)) > 100) }",
])
def test_casts_against_pyoxigraph(q):
    db, ox = _pair()
    assert _rows_jindou(db, _P + q) == _rows_ox(ox, _P + q)


def test_rand_values_read_back_as_their_keys_say():
    """RAND()'s numbers are remembered with their values and datatype: every reader
    (comparison, arithmetic, a cast of their text, DATATYPE) sees what the key says."""
    db, ox = _pair()
    q = _P + ("SELECT (COUNT(*) AS ?n) WHERE { ?s ex:q ?v BIND(RAND() AS ?r) "
              "FILTER(?r >= 0 && ?r < 1 && ?r = xsd:double(STR(?r)) && ?r * 2 < 2 && DATATYPE(?r) = xsd:double "
              "&& isNumeric(?r) && STRLEN(STR(?r)) > 2 && ABS(?r - 0.5) <= 0.5) }")
    assert _rows_jindou(db, q) == _rows_ox(ox, q) == [('"400"^^<http://www.w3.org/2001/XMLSchema#integer>',)]


_MINMAX = [
    "SELECT (MAX(STR(?o)) AS ?m) (MIN(STR(?o)) AS ?n) WHERE { ?s <http://ex.org/p> ?o FILTER(!isBlank(?o)) }",
    "SELECT ?s (MAX(STR(?o)) AS ?m) (MIN(LCASE(STR(?o))) AS ?n) WHERE { ?s <http://ex.org/p> ?o FILTER(!isBlank(?o)) } "
    "GROUP BY ?s",
    "SELECT (MAX(UCASE(?o)) AS ?m) (MIN(SUBSTR(?o, 2)) AS ?n) WHERE { ?s <http://ex.org/p> ?o FILTER(isLiteral(?o) "
    "&& DATATYPE(?o) = <http://www.w3.org/2001/XMLSchema#string>) }",
    "SELECT (MAX(STRAFTER(STR(?s), \"ex.org/\")) AS ?m) (MIN(CONCAT(STR(?o), \"|\")) AS ?n) "
    "WHERE { ?s <http://ex.org/p> ?o FILTER(!isBlank(?o)) }",
    "SELECT ?s (MIN(STR(?o)) AS ?n) WHERE { ?s <http://ex.org/p> ?o FILTER(isIRI(?o)) } GROUP BY ?s",
]
_MINMAX_ERRORS = [  # errors and tagged values among them: compared with the general path
    "SELECT (MAX(UCASE(?o)) AS ?m) (MIN(SUBSTR(?o, 2)) AS ?n) WHERE { ?s <http://ex.org/p> ?o FILTER(isLiteral(?o)) }",
    "SELECT (MAX(STR(?o)) AS ?m) (MIN(STR(?o)) AS ?n) WHERE { ?s <http://ex.org/p> ?o }",
    "SELECT ?s (MAX(UCASE(?o)) AS ?m) (MIN(SUBSTR(?o, 2)) AS ?n) WHERE { ?s <http://ex.org/p> ?o } GROUP BY ?s",
]


def _strings_pair():
    from tests.test_exec_strings import _graph as strings_graph  # noqa: PLC0415

    return _pair(strings_graph())


@pytest.mark.parametrize("q", _MINMAX)
def test_min_max_of_string_functions_against_pyoxigraph(q):
    """MIN / MAX over string function values ranked column-wise, as pyoxigraph."""
    from tests.test_exec_strings import _rows_jindou as rows_j  # noqa: PLC0415
    from tests.test_exec_strings import _rows_ox as rows_o  # noqa: PLC0415

    db, ox = _strings_pair()
    assert rows_j(db, q) == rows_o(ox, q)


@pytest.mark.parametrize("q", _MINMAX + _MINMAX_ERRORS)
def test_min_max_of_string_functions_as_the_general_path(q, monkeypatch):
    from engine.exec.evaluate import Evaluator  # noqa: PLC0415
    from tests.test_exec_strings import _rows_jindou as rows_j  # noqa: PLC0415

    db, _ = _strings_pair()
    fast = rows_j(db, q)
    monkeypatch.setattr(Evaluator, "_min_max_strings", lambda *a: None)
    assert fast == rows_j(db, q)
