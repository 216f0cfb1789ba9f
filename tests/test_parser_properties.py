"""Property tests: random queries from a small grammar round-trip through the
parser; garbage and truncations raise QuerySyntaxError and nothing else."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import terms
from engine.errors import QuerySyntaxError
from engine.sparql import algebra as A
from engine.sparql.parser import parse_query, parse_update

EX = "http://ex.org/"
VAR_NAMES = ["a", "b", "c", "d", "e", "x1", "long_name"]

# ---------------------------------------------------------------- generators: (text, expected algebra)


@st.composite
def var(draw):
    n = draw(st.sampled_from(VAR_NAMES))
    sigil = draw(st.sampled_from("?$"))
    return sigil + n, A.Var(n)


@st.composite
def iri(draw):
    n = draw(st.sampled_from(["p", "q", "r1", "s.t", "u-v", "w_x"]))
    if draw(st.booleans()):
        return f":{n}", A.Const(f"<{EX}{n}>")
    return f"<{EX}{n}>", A.Const(f"<{EX}{n}>")


@st.composite
def literal(draw):
    kind = draw(st.sampled_from(["int", "neg", "dec", "dbl", "str", "lang", "typed", "bool"]))
    if kind == "int":
        n = draw(st.integers(0, 10**6))
        return str(n), A.Const(terms.literal_key(str(n), terms.XSD_INTEGER))
    if kind == "neg":
        n = draw(st.integers(1, 999))
        return f"-{n}", A.Const(terms.literal_key(f"-{n}", terms.XSD_INTEGER))
    if kind == "dec":
        lex = f"{draw(st.integers(0, 99))}.{draw(st.integers(0, 99))}"
        return lex, A.Const(terms.literal_key(lex, terms.XSD_DECIMAL))
    if kind == "dbl":
        lex = f"{draw(st.integers(0, 99))}e{draw(st.integers(-5, 5))}"
        return lex, A.Const(terms.literal_key(lex, terms.XSD_DOUBLE))
    if kind == "bool":
        b = draw(st.booleans())
        text = draw(st.sampled_from(["true", "TRUE", "True"] if b else ["false", "FALSE"]))
        return text, A.Const(terms.TRUE_KEY if b else terms.FALSE_KEY)
    s = draw(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8))
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    if kind == "lang":
        tag = draw(st.sampled_from(["en", "EN-us", "fr-CA"]))
        return f'"{escaped}"@{tag}', A.Const(terms.literal_key(s, lang=tag))
    if kind == "typed":
        return f'"{escaped}"^^:dt', A.Const(terms.literal_key(s, EX + "dt"))
    return f'"{escaped}"', A.Const(terms.literal_key(s))


def term():
    return st.one_of(var(), iri(), literal())


@st.composite
def triple(draw):
    s = draw(st.one_of(var(), iri()))
    p = draw(st.one_of(var(), iri()))
    o = draw(term())
    return ("t", f"{s[0]} {p[0]} {o[0]}", A.TriplePattern(s[1], p[1], o[1]))


@st.composite
def expression(draw):
    kind = draw(st.sampled_from(["cmp", "bound", "not", "regex", "arith"]))
    a = draw(var())
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<", ">", "<=", ">="]))
        b = draw(st.one_of(var(), literal(), iri()))
        return f"{a[0]} {op} {b[0]}", A.Call(op, (a[1], b[1]))
    if kind == "bound":
        return f"bound({a[0]})", A.Call("BOUND", (a[1],))
    if kind == "not":
        return f"!isIRI({a[0]})", A.Call("!", (A.Call("ISIRI", (a[1],)),))
    if kind == "regex":
        return f'regex(str({a[0]}), "x")', A.Call("REGEX", (A.Call("STR", (a[1],)), A.Const('"x"')))
    b = draw(var())
    return f"{a[0]} + {b[0]} * 2 > 1", A.Call(
        ">",
        (A.Call("+", (a[1], A.Call("*", (b[1], A.Const(terms.literal_key("2", terms.XSD_INTEGER)))))),
         A.Const(terms.literal_key("1", terms.XSD_INTEGER))),
    )


@st.composite
def filter_elem(draw):
    text, e = draw(expression())
    return ("f", f"FILTER({text})", e)


def group(depth: int):
    elems = [triple(), triple(), filter_elem()]
    if depth > 0:
        elems.append(st.builds(lambda g: ("opt", "OPTIONAL " + g[0], g), group(depth - 1)))
        elems.append(
            st.builds(
                lambda gs: ("union", " UNION ".join(g[0] for g in gs), gs),
                st.lists(group(depth - 1), min_size=2, max_size=3),
            )
        )
    return st.builds(_render_group, st.lists(st.one_of(*elems), max_size=5), st.lists(st.booleans(), min_size=6, max_size=6))


def _render_group(items, dots):
    parts = []
    for i, it in enumerate(items):
        parts.append(it[1])
        # '.' is required between triples, optional after other elements
        if it[0] == "t" or dots[i]:
            parts.append(".")
    return "{ " + " ".join(parts) + " }", items


def _expected(items, triples: list, filters: list, counts: dict) -> None:
    for it in items:
        if it[0] == "t":
            triples.append(it[2])
        elif it[0] == "f":
            filters.append(it[2])
        elif it[0] == "opt":
            counts["opt"] += 1
            _expected(it[2][1], triples, filters, counts)
        else:
            counts["union"] += len(it[2]) - 1
            for g in it[2]:
                _expected(g[1], triples, filters, counts)


def _actual(p, triples: list, filters: list, counts: dict) -> None:
    t = type(p)
    if t is A.BGP:
        triples.extend(p.triples)
    elif t is A.Filter:
        _actual(p.input, triples, filters, counts)
        _split(p.expr, filters)
    elif t is A.LeftJoin:
        counts["opt"] += 1
        _actual(p.left, triples, filters, counts)
        _actual(p.right, triples, filters, counts)
        if p.expr is not None:
            _split(p.expr, filters)
    elif t is A.Union:
        counts["union"] += 1
        _actual(p.left, triples, filters, counts)
        _actual(p.right, triples, filters, counts)
    elif t is A.Join:
        _actual(p.left, triples, filters, counts)
        _actual(p.right, triples, filters, counts)
    else:
        raise AssertionError(f"unexpected node {p!r}")


def _split(e, out: list) -> None:
    if isinstance(e, A.Call) and e.op == "&&":
        _split(e.args[0], out)
        _split(e.args[1], out)
    else:
        out.append(e)


def _first_appearance(triples) -> tuple:
    seen: dict = {}
    for tp in triples:
        for x in (tp.s, tp.p, tp.o):
            if isinstance(x, A.Var):
                seen[x] = None
    return tuple(seen)


PROLOGUE = f"PREFIX : <{EX}>\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group(2), st.data())
def test_random_queries_round_trip(g, data):
    text, items = g
    triples: list = []
    filters: list = []
    counts = {"opt": 0, "union": 0}
    _expected(items, triples, filters, counts)
    star = data.draw(st.booleans())
    all_vars = _first_appearance(triples)
    if star or not all_vars:
        select = "*"
        want_vars = all_vars
    else:
        want_vars = tuple(data.draw(st.lists(st.sampled_from(all_vars), min_size=1, unique=True)))
        select = " ".join("?" + v.name for v in want_vars)
    q = parse_query(f"{PROLOGUE}SELECT {select} WHERE {text}")
    assert q.vars == want_vars
    assert isinstance(q.pattern, A.Project)
    got_triples: list = []
    got_filters: list = []
    got_counts = {"opt": 0, "union": 0}
    _actual(q.pattern.input, got_triples, got_filters, got_counts)
    assert got_triples == triples
    assert sorted(map(repr, got_filters)) == sorted(map(repr, filters))
    assert got_counts == counts


@settings(max_examples=200, deadline=None)
@given(group(1), st.data())
def test_truncations_raise_syntax_error(g, data):
    text = f"{PROLOGUE}SELECT * WHERE {g[0]}"
    cut = data.draw(st.integers(0, len(text) - 1))
    try:
        parse_query(text[:cut])
    except QuerySyntaxError as e:
        assert e.line is None or e.line >= 1
    else:
        raise AssertionError(f"truncated query parsed: {text[:cut]!r}")


_ALPHABET = st.sampled_from(
    list("{}()[]<>?$:;,.=!+-*/^|&'\"#@_\\ \n\taAeE019")
    + ["SELECT", "WHERE", "FILTER", "OPTIONAL", "UNION", "GRAPH", "BIND", "AS", "VALUES", "a", "?x",
       "<http://e/>", ":p", "_:b", "'s'", "1.5", "COUNT", "GROUP BY", "PREFIX", "INSERT", "DELETE", "DATA",
       "\\u0041", "true", "NOT", "EXISTS", "IN", "ORDER BY", "LIMIT", "SERVICE", "MINUS", "^^", "@en"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_ALPHABET, max_size=40).map(" ".join))
def test_garbage_only_raises_syntax_error(text):
    for parse in (parse_query, parse_update):
        try:
            parse(text)
        except QuerySyntaxError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_only_raises_syntax_error(text):
    for parse in (parse_query, parse_update):
        try:
            parse(text)
        except QuerySyntaxError:
            pass
