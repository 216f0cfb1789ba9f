"""Every aggregate (COUNT SUM AVG MIN MAX SAMPLE GROUP_CONCAT, with and without
DISTINCT) over random groups of mixed values, unbound and error values, against
pyoxigraph -- and, where SPARQL 1.1 section 18.5.1 and pyoxigraph part, against
the spec's own algebra (see docs/LIMITS.md, "Aggregates over errors").

Each row ``:r<i>`` has a group ``:g`` and a kind ``:k``; kind 0 rows have a
value ``:v`` (or none: unbound), kind 2 rows evaluate to an error other than an
unbound variable (``1/0``). The aggregate's argument is
``IF(?k = 2, 1/0, ?v)``, so ListEval gives the value, or an error.

Where pyoxigraph 0.5 and the spec's algebra part (``_divergence``), the expected
value is derived from the spec, not skipped:

* COUNT of a group holding an evaluation error: pyoxigraph answers an error;
  Count removes error elements (18.5.1.2) -- expected: pyoxigraph's COUNT of the
  group without its error rows.
* AVG of a group whose values are all errors: ``Avg(M) = 0 where Count(M) = 0``.
* GROUP_CONCAT of language-tagged strings sharing one tag: pyoxigraph keeps the
  tag, the W3C tests agg-groupconcat-04/06 expect a simple literal -- expected:
  pyoxigraph's lexical form as a simple literal.
* GROUP_CONCAT's order and SAMPLE's choice are unspecified: GROUP_CONCAT is
  compared as the multiset of its pieces, SAMPLE must be one of the group's values.
* MIN / MAX over literals SPARQL does not order against each other (numbers
  against strings, booleans, language-tagged strings), and MIN / MAX among
  values equal as numbers (1 and 1.0): the result must be one of the group's
  values that is not above (MIN) / below (MAX) any other by SPARQL's defined
  order -- checked as: a member of the group's non-error values.
"""

from __future__ import annotations

import functools
from decimal import Decimal

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.terms import BNode, from_key

XSD = "http://www.w3.org/2001/XMLSchema#"
_NUMERIC = {XSD + t for t in ("integer", "decimal", "double", "float", "int", "long")}
_AGGS = ["COUNT", "SUM", "AVG", "MIN", "MAX", "SAMPLE", "GROUP_CONCAT"]

#: value pool: (turtle text, kind) -- kinds SPARQL orders among themselves
_VALUES = [
    ("1", "num"), ("2", "num"), ("-3", "num"), ("0", "num"), ("1.0", "num"), ("2.5", "num"),
    (f'"2.5E0"^^<{XSD}double>', "num"), (f'"1.5E1"^^<{XSD}double>', "num"),
    (f'"7"^^<{XSD}int>', "num"), (f'"0.5"^^<{XSD}float>', "num"),
    ('"a"', "str"), ('"b"', "str"), ('"ab"', "str"), ('""', "str"), ('"B"', "str"),
    ('"a"@en', "lang"), ('"b"@en', "lang"), ('"a"@fr', "lang"),
    ("true", "bool"), ("false", "bool"),
    ("<http://e/i1>", "iri"), ("<http://e/i2>", "iri"),
    ("_:b1", "bnode"), ("_:b2", "bnode"),
    ('"x"^^<http://e/dt>', "other"),
]
_UNBOUND, _ERROR = -1, -2


@st.composite
def _groups(draw):
    """Up to 4 groups of up to 6 rows: value indexes into _VALUES, or unbound / error."""
    pool = draw(st.lists(st.integers(0, len(_VALUES) - 1), min_size=1, max_size=6, unique=True))
    cell = st.one_of(st.sampled_from(pool), st.sampled_from([_UNBOUND, _ERROR]))
    weights = st.integers(0, 9).flatmap(lambda w: cell if w < 8 else st.sampled_from([_UNBOUND, _ERROR]))
    return draw(st.lists(st.lists(weights, min_size=1, max_size=6), min_size=1, max_size=4))


def _turtle(groups) -> str:
    lines = ["@prefix : <http://e/> ."]
    i = 0
    for g, rows in enumerate(groups):
        for v in rows:
            k = 2 if v == _ERROR else 0
            lines.append(f":r{i} :g {g} ; :k {k} .")
            if v >= 0:
                lines.append(f":r{i} :v {_VALUES[v][0]} .")
            i += 1
    return "\n".join(lines) + "\n"


def _query(agg: str, distinct: bool, skip_errors: bool = False) -> str:
    arg = "?v" if skip_errors else "IF(?k = 2, 1/0, ?v)"
    sep = ' ; separator="|"' if agg == "GROUP_CONCAT" else ""
    where = "?r :g ?g ; :k ?k OPTIONAL { ?r :v ?v }" + (" FILTER(?k != 2 && BOUND(?v))" if skip_errors else "")
    return (f"PREFIX : <http://e/> SELECT ?g ({agg}({'DISTINCT ' if distinct else ''}{arg}{sep}) AS ?a) "
            f"WHERE {{ {where} }} GROUP BY ?g")


# ---------------------------------------------------------------- terms as comparable tuples


def _ox(t):
    if t is None:
        return None
    if isinstance(t, ox.NamedNode):
        return ("iri", t.value)
    if isinstance(t, ox.BlankNode):
        return ("bnode",)
    lang = t.language
    return ("lit", t.value, None if lang else t.datatype.value, lang.lower() if lang else None)


def _ours(key):
    if key is None:
        return None
    t = from_key(key)
    if isinstance(t, BNode):
        return ("bnode",)
    if key[0] == "<":
        return ("iri", t.value)
    return ("lit", t.lexical, None if t.lang else t.datatype, t.lang.lower() if t.lang else None)


def _value(term):
    """Numbers by value (pyoxigraph keeps values, not lexical forms: "1.0" -> "1"),
    everything else as the term."""
    if term is not None and term[0] == "lit" and term[2] in _NUMERIC:
        dt = term[2] if term[2] not in (XSD + "int", XSD + "long") else XSD + "integer"
        lex = term[1]
        if dt in (XSD + "double", XSD + "float"):
            return ("num", dt, round(float(lex), 9))
        return ("num", dt, Decimal(lex).normalize())
    return term


def _by_group(rows) -> dict:
    return {g: a for g, a in rows}


def _run_ox(store, q):
    return _by_group((_value(_ox(s["g"])), _value(_ox(s["a"]))) for s in store.query(q))


def _run_ours(db, q):
    res = db.query(q)
    cols = dict(zip(res.vars, [res.terms.keys(c) for c in res.columns], strict=True))
    return _by_group((_value(_ours(g)), _value(_ours(a))) for g, a in zip(cols["g"], cols["a"], strict=True))


# ---------------------------------------------------------------- the documented divergences


def _kinds(rows) -> set:
    return {_VALUES[v][1] for v in rows if v >= 0}


def _unordered(rows) -> bool:
    """MIN / MAX depend on an order SPARQL leaves open: literals of kinds it does not
    compare, language-tagged strings (no `<` on them), or two numbers of one value."""
    lits = _kinds(rows) - {"iri", "bnode"}
    if len(lits) > 1 or "lang" in lits or "other" in lits:
        return True
    nums = [_value(_term_of(v)) for v in set(rows) if v >= 0 and _VALUES[v][1] == "num"]
    return len({n[2] for n in nums}) < len(nums)


@functools.cache
def _term_of(v: int):
    text = _VALUES[v][0]
    store = ox.Store()
    store.load(f"<http://e/s> <http://e/p> {text} .".encode(), ox.RdfFormat.TURTLE)
    return _ox(next(iter(store.quads_for_pattern(None, None, None))).object)


def _members(rows) -> set:
    return {_value(_term_of(v)) for v in rows if v >= 0}


def _pieces(term):
    return sorted(term[1].split("|")) if term is not None else None


def _check_group(agg, distinct, rows, ours, oracle, oracle_no_errors):
    has_error = any(v < 0 for v in rows)
    values = [v for v in rows if v >= 0]
    if agg == "SAMPLE":
        assert (ours is None) == (not values), (rows, ours)
        assert ours is None or ours in _members(rows), (rows, ours)
        return
    if agg == "COUNT" and has_error:
        if oracle_no_errors is None:  # errors only: the group has no row left
            oracle_no_errors = ("num", XSD + "integer", Decimal(0))
        assert ours == oracle_no_errors, (rows, ours, oracle_no_errors)  # Count drops errors
        return
    if agg == "AVG" and not values:
        assert ours == ("num", XSD + "integer", Decimal(0)), (rows, ours)  # Avg = 0 where Count = 0
        return
    if agg in ("MIN", "MAX") and _unordered(rows):
        if has_error:
            assert ours is None, (rows, ours)
        else:
            assert ours in _members(rows), (rows, ours)
        return
    if agg == "GROUP_CONCAT":
        if oracle is not None and oracle[3] is not None:  # a shared tag: dropped (agg-groupconcat-04)
            oracle = ("lit", oracle[1], XSD + "string", None)
        assert (ours is None) == (oracle is None), (rows, ours, oracle)
        if ours is not None:
            assert ours[2:] == (XSD + "string", None), (rows, ours)
            assert _pieces(ours) == _pieces(oracle), (rows, ours, oracle)
        return
    assert ours == oracle, (agg, distinct, rows, ours, oracle)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=_groups(), distinct=st.booleans())
def test_aggregates_against_pyoxigraph(groups, distinct):
    data = _turtle(groups)
    db = Database()
    db.load_data(data, "text/turtle")
    store = ox.Store()
    store.load(data.encode(), ox.RdfFormat.TURTLE)
    for agg in _AGGS:
        q = _query(agg, distinct)
        ours, oracle = _run_ours(db, q), _run_ox(store, q)
        no_err = _run_ox(store, _query(agg, distinct, skip_errors=True))
        assert set(ours) == set(oracle) == {("num", XSD + "integer", Decimal(g)) for g in range(len(groups))}
        for g, rows in enumerate(groups):
            key = ("num", XSD + "integer", Decimal(g))
            if distinct:  # Distinct(M): one error stands for all (the outcome is the same)
                rows = list(dict.fromkeys(rows))
            _check_group(agg, distinct, rows, ours[key], oracle[key], no_err.get(key))


@pytest.mark.parametrize(("q", "want"), [
    # COUNT drops error elements (STR of a blank node) -- pyoxigraph 0.5 answers unbound
    ("SELECT (COUNT(DISTINCT STR(?v)) AS ?a) WHERE { VALUES ?v { 'a' 'b' 'a' } }", "2"),
    ("SELECT (COUNT(STR(?v)) AS ?a) WHERE { ?s :v ?v }", "3"),
    ("SELECT (COUNT(DISTINCT STR(?v)) AS ?a) WHERE { ?s :v ?v }", "2"),
])
def test_count_drops_errors(q, want):
    db = Database()
    db.load_data('@prefix : <http://e/> . :s :v _:b1, _:b2, <http://e/i>, "x", "x"@en .', "text/turtle")
    res = db.query("PREFIX : <http://e/> " + q)
    assert res.terms.keys(res.columns[0]) == [f'"{want}"^^<{XSD}integer>']


def test_group_concat_needs_string_literals():
    """GroupConcat is CONCAT over the values: IRIs, numbers, blank nodes and errors make
    the group an error (as in pyoxigraph); GROUP_CONCAT(STR(?x)) concatenates IRIs."""
    db = Database()
    db.load_data('@prefix : <http://e/> . :a :v <http://e/i1>, <http://e/i2> . :b :v 1, 2 . '
                 ':c :v "x", "y"@en . :d :v _:z, "w" .', "text/turtle")
    q = ("PREFIX : <http://e/> SELECT ?s (GROUP_CONCAT(?v) AS ?a) (GROUP_CONCAT(STR(?v)) AS ?b) "
         "WHERE { ?s :v ?v } GROUP BY ?s ORDER BY ?s")
    res = db.query(q)
    a, b = (res.terms.keys(c) for c in res.columns[1:])
    assert a[0] is None and a[1] is None and a[3] is None
    assert sorted(a[2][1:-1].split()) == ["x", "y"]
    assert sorted(b[0][1:-1].split()) == ["http://e/i1", "http://e/i2"]
    assert b[3] is None  # STR of a blank node is an error: the group's CONCAT is one
