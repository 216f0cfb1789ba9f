"""Issue 14's non-selective query classes against pyoxigraph on random graphs.

Each class has a vectorized path of its own (FILTER over literal columns,
ORDER BY + LIMIT as top-k, OPTIONAL, GROUP BY / COUNT on ids, cycles); the
graphs are big enough (a few thousand triples, hundreds of distinct values
per column) to take those paths, and mix what the paths must get right:
integers, decimals, doubles incl. NaN and INF, ill-typed numerals, simple
and language-tagged strings (one with an escaped quote), booleans, dates,
IRIs and blank nodes in one column. Lexical forms are the ones Oxigraph
keeps as written (it canonicalizes others), so answers compare as strings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.database import Database

pyoxigraph = pytest.importorskip("pyoxigraph")

XSD = "http://www.w3.org/2001/XMLSchema#"
P = [f"<urn:p{i}>" for i in range(4)]


def _literal(rng: np.random.Generator) -> str:
    kind = int(rng.integers(0, 12))
    v = int(rng.integers(-20, 60))
    if kind <= 2:
        return f'"{v}"^^<{XSD}integer>'
    if kind == 3:
        return f'"{v}.25"^^<{XSD}decimal>'
    if kind == 4:
        return f'"{v}.5"^^<{XSD}double>'
    if kind == 5:
        return [f'"NaN"^^<{XSD}double>', f'"INF"^^<{XSD}double>', f'"-INF"^^<{XSD}double>',
                f'"abc"^^<{XSD}integer>'][int(rng.integers(0, 4))]
    if kind in (6, 7):
        return f'"{["apple", "apricot", "banana", "b", "cherry", "a"][int(rng.integers(0, 6))]}{v % 7}"'
    if kind == 8:
        return f'"{["apple", "b"][int(rng.integers(0, 2))]}{v % 3}"@{["en", "fr"][int(rng.integers(0, 2))]}'
    if kind == 9:
        return [f'"true"^^<{XSD}boolean>', f'"2020-0{1 + v % 9}-01"^^<{XSD}date>',
                '"say \\"b\\""', '"b"'][int(rng.integers(0, 4))]
    if kind == 10:
        return f"<urn:o{v % 13}>"
    return f"_:b{v % 5}"


def _graph(seed: int, n: int = 3000) -> str:
    rng = np.random.default_rng(seed)
    lines = set()
    subjects = 300
    while len(lines) < n:
        s = f"<urn:s{int(rng.integers(0, subjects))}>"
        p = P[int(rng.integers(0, 4))]
        if p == P[0]:  # an IRI-only predicate between subjects: cycles
            o = f"<urn:s{int(rng.integers(0, subjects))}>"
        else:
            o = _literal(rng)
        lines.add(f"{s} {p} {o} .\n")
    return "".join(sorted(lines))


def both_stores(data: str, quads: bool = False) -> tuple[Database, object]:
    """The same N-Triples (or N-Quads) in a Jindou database and a pyoxigraph store."""
    db = Database()
    db.load_data(data, "application/n-quads" if quads else "application/n-triples")
    ox = pyoxigraph.Store()
    ox.load(data, format=pyoxigraph.RdfFormat.N_QUADS if quads else pyoxigraph.RdfFormat.N_TRIPLES)
    return db, ox


@pytest.fixture(scope="module", params=[1, 2, 3])
def stores(request):
    return both_stores(_graph(request.param))


def result_rows(res) -> list[tuple]:
    """A Jindou SELECT result's rows of term keys."""
    cols = [res.terms.keys(c) for c in res.columns]
    return list(zip(*cols, strict=True)) if cols else [()] * len(res)


def _jindou_rows(db, q: str) -> list[tuple]:
    return result_rows(db.query(q))


def _ox_rows(ox, q: str) -> list[tuple]:
    res = ox.query(q)
    names = [v.value for v in res.variables]
    out = []
    for sol in res:
        row = []
        for v in names:
            t = sol[v]
            row.append(None if t is None else ("_:" if isinstance(t, pyoxigraph.BlankNode) else str(t)))
        out.append(tuple(row))
    return out


def _norm(rows: list[tuple]) -> list[tuple]:
    """Blank node labels differ between engines: compare them as '_:'."""
    return [tuple("_:" if (x or "").startswith("_:") else x for x in r) for r in rows]


def _same_bag(db, ox, q: str) -> None:
    a, b = sorted(_norm(_jindou_rows(db, q)), key=repr), sorted(_norm(_ox_rows(ox, q)), key=repr)
    assert a == b, f"{q}\njindou {len(a)} rows, oxigraph {len(b)} rows"


FILTERS = [
    "?o > 10", "?o <= -3", "?o >= 2.5 && ?o < 7", "?o = 5", "?o != 5", "?o = 20.5",
    '?o = "b"', '?o != "b"', '?o = "apple1"@en', '?o = "b" || ?o > 50', '!(?o = "b")', '!(?o > 3)',
    '?o < "b"', '?o >= "apricot"', '"apricot3" > ?o', '?o <= "b" && ?o > "a"', '?o = "true"^^<http://www.w3.org/2001/XMLSchema#boolean>',
    'STRSTARTS(?o, "ap")', 'STRENDS(?o, "1")', 'CONTAINS(?o, "an")', 'STRSTARTS(?o, "ap"@en)',
    '!CONTAINS(?o, "b")', 'STRSTARTS(?o, "say \\"")', 'CONTAINS(?o, "") && ?o != "b"',
    'REGEX(?o, "^a.*[0-3]$")', "?o IN (5, \"b\", 20.5)", "isNumeric(?o) && ?o < 0",
    "?o = <urn:o3>", "?o != <urn:o3>",
]


@pytest.mark.parametrize("expr", FILTERS)
def test_filter_over_a_large_column(stores, expr):
    db, ox = stores
    # Where the engines knowingly differ, the rows are left out of the comparisons of
    # values and of negations: NaN < x is false here (XPath op:numeric-less-than) and an
    # error in Oxigraph; an ill-typed numeral = a tagged string is an error here, false there.
    known = f'FILTER(!(isNumeric(?o) && ?o != ?o) && !sameTerm(?o, "abc"^^<{XSD}integer>))'
    for p in P[1:]:
        pre = known if expr.startswith("!") else ""
        _same_bag(db, ox, f"SELECT ?s ?o WHERE {{ ?s {p} ?o {pre} FILTER({expr}) }}")
    # the filter in a BIND (values, errors unbound) and after a join
    _same_bag(db, ox, f"SELECT ?s ?b WHERE {{ ?s {P[1]} ?o {known} BIND(({expr}) AS ?b) }}")
    _same_bag(db, ox, f"SELECT ?s ?t ?o WHERE {{ ?s {P[0]} ?t . ?t {P[2]} ?o {pre} FILTER({expr}) }}")


ORDERS = [
    ("?o", "numeric column, ties"),
    ("DESC(?o)", "descending, ties"),
    ("?o ?s", "total order"),
    ("DESC(?o) ?s", "descending total order"),
    ("?s DESC(?o)", "IRIs first"),
    ("STR(?o)", "an expression key"),
]


@pytest.mark.parametrize("cond,_why", ORDERS)
@pytest.mark.parametrize("offset,limit", [(0, 1), (0, 7), (5, 20), (40, 3), (0, 2000)])
def test_order_limit_is_the_prefix_of_the_full_order(stores, cond, _why, offset, limit):
    """Top-k against the full sort (the same order, ties included), and against
    pyoxigraph on columns of one kind of literal, where SPARQL fixes the order."""
    db, ox = stores
    for p in P[1:]:
        base = f"SELECT ?s ?o WHERE {{ ?s {p} ?o }} ORDER BY {cond}"
        full = _jindou_rows(db, base)
        top = _jindou_rows(db, f"{base} LIMIT {limit} OFFSET {offset}")
        want = full[offset:offset + limit]
        assert len(top) == len(want)
        assert set(top) <= set(full)
        if "?s" in cond:  # a total order: the very rows
            assert top == want, (base, offset, limit)
        else:  # ties: the same keys in the same order
            assert [r[1] for r in top] == [r[1] for r in want], (base, offset, limit)
    for kind in ("isNumeric(?o) && !(?o != ?o)", f"isLiteral(?o) && DATATYPE(?o) = <{XSD}string>"):
        q = f"SELECT ?s ?o WHERE {{ ?s {P[1]} ?o FILTER({kind}) }} ORDER BY {cond} ?s LIMIT {limit} OFFSET {offset}"
        if "STR(" in cond:
            continue
        assert _jindou_rows(db, q) == _ox_rows(ox, q), q


def test_order_limit_under_distinct_and_projection(stores):
    db, ox = stores
    q = f"SELECT DISTINCT ?o WHERE {{ ?s {P[2]} ?o FILTER(isNumeric(?o) && ?o = ?o) }} ORDER BY DESC(?o) LIMIT 9"
    assert _jindou_rows(db, q) == _ox_rows(ox, q)
    q = f"SELECT ?s WHERE {{ ?s {P[1]} ?o FILTER(DATATYPE(?o) = <{XSD}integer>) }} ORDER BY ?o ?s LIMIT 15 OFFSET 2"
    assert _jindou_rows(db, q) == _ox_rows(ox, q)


@pytest.mark.parametrize("q", [
    "SELECT ?s ?a ?b WHERE {{ ?s {p0} ?a OPTIONAL {{ ?a {p1} ?b }} }}",
    "SELECT ?s ?a ?b WHERE {{ ?s {p2} ?a OPTIONAL {{ ?s {p1} ?b FILTER(?b > 5) }} }}",
    "SELECT ?s ?a ?b ?c WHERE {{ ?s {p3} ?a OPTIONAL {{ ?s {p1} ?b }} OPTIONAL {{ ?s {p0} ?c . ?c {p2} ?a }} }}",
    "SELECT ?s ?b WHERE {{ ?s {p0} ?t OPTIONAL {{ ?t {p1} ?b }} FILTER(!BOUND(?b)) }}",
])
def test_optional(stores, q):
    db, ox = stores
    _same_bag(db, ox, q.format(p0=P[0], p1=P[1], p2=P[2], p3=P[3]))


@pytest.mark.parametrize("q", [
    "SELECT ?o (COUNT(?s) AS ?n) WHERE {{ ?s {p1} ?o }} GROUP BY ?o",
    "SELECT ?o (COUNT(DISTINCT ?s) AS ?n) WHERE {{ ?s ?p ?o }} GROUP BY ?o",
    "SELECT ?s (COUNT(*) AS ?n) WHERE {{ ?s {p0} ?t . ?t {p2} ?o }} GROUP BY ?s",
    "SELECT ?p (COUNT(DISTINCT ?o) AS ?n) (COUNT(?o) AS ?m) WHERE {{ ?s ?p ?o }} GROUP BY ?p",
    "SELECT ?s (COUNT(?o) AS ?n) WHERE {{ ?s {p1} ?o FILTER(isNumeric(?o)) }} GROUP BY ?s HAVING (COUNT(?o) > 2)",
])
def test_group_by_count(stores, q):
    db, ox = stores
    _same_bag(db, ox, q.format(p0=P[0], p1=P[1], p2=P[2]))


@pytest.mark.parametrize("q", [
    "SELECT * WHERE {{ ?a {p0} ?b . ?b {p0} ?c . ?c {p0} ?a }}",
    "SELECT * WHERE {{ ?a {p0} ?b . ?b {p0} ?c . ?c {p0} ?d . ?d {p0} ?a }}",
    "SELECT * WHERE {{ ?a {p0} ?b . ?a {p0} ?c . ?b {p0} ?d . ?c {p0} ?d . ?a {p1} ?x }}",
    "SELECT ?a ?b WHERE {{ ?a {p0} ?b . ?b {p0} ?a }}",
    "SELECT * WHERE {{ ?a {p0} ?b . ?b {p0} ?c . ?c {p0} ?a . ?a {p2} ?o FILTER(?o > 0) }}",
])
def test_cycles(stores, q):
    db, ox = stores
    _same_bag(db, ox, q.format(p0=P[0], p1=P[1], p2=P[2]))


def test_explain_shows_the_top_k(stores):
    db, _ = stores
    doc = db.explain(f"SELECT ?s WHERE {{ ?s {P[1]} ?o }} ORDER BY ?o LIMIT 5 OFFSET 2")
    assert '"top_k": 7' in json.dumps(doc)
    doc = db.explain(f"SELECT DISTINCT ?s WHERE {{ ?s {P[1]} ?o }} ORDER BY ?o LIMIT 5")
    assert "top_k" not in json.dumps(doc)  # DISTINCT in between: the full order


@pytest.mark.parametrize("const", ['"a\\\\"', '"a\\n"', '"a\\""', '"\\\\n"', '"b\\r"', '""', '"a"'])
def test_string_tests_over_escaped_text(const):
    """Backslashes, quotes, newlines and carriage returns are escaped in the keys
    the vectorized STRSTARTS / STRENDS / CONTAINS read: answers as Oxigraph's."""
    bodies = ["a\\\\b", "a\\nb", "a\\\"b", "\\\\n", "b\\r", "a", "ba\\\\", "xa\\n", "\\\"", "plain"]
    rows = [f'<urn:s{i}> <urn:p> "{b}"{tag} .\n' for i, b in enumerate(bodies * 8) for tag in ("", "@en")]
    nt = "".join(dict.fromkeys(rows))
    nt += "".join(f"<urn:t{i}> <urn:p> <urn:o{i}> .\n" for i in range(20))
    db = Database()
    db.load_data(nt, "application/n-triples")
    ox = pyoxigraph.Store()
    ox.load(nt, format=pyoxigraph.RdfFormat.N_TRIPLES)
    for fn in ("STRSTARTS", "STRENDS", "CONTAINS"):
        _same_bag(db, ox, f"SELECT ?s ?o WHERE {{ ?s <urn:p> ?o FILTER({fn}(?o, {const})) }}")
        _same_bag(db, ox, f"SELECT ?s ?b WHERE {{ ?s <urn:p> ?o BIND({fn}(?o, {const}) AS ?b) }}")
