"""The graph writers (engine/exec/graph_writers.py) against the oracles and their per-term
definitions: random graphs with awkward terms written as Turtle, TriG, RDF/XML and JSON-LD
read back by pyoxigraph (and rdflib) as exactly the same graph; the byte rewrites against
the escaping they stand for; the namespace counts prefixes are chosen from against a
per-term count; bounds, deadlines and refusals."""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa
import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import formats as F
from engine.errors import QueryTimeout, ResponseTooLarge
from engine.exec import graph_writers as gw
from engine.exec import serialize as ser
from engine.exec.result import QueryResult
from engine.exec.serialize import KeyTable, serialize
from engine.terms import XSD, escape_lexical, unescape_string

WRITE = [("ttl", "TURTLE"), ("trig", "TRIG"), ("xml", "RDF_XML"), ("jsonld", "JSON_LD")]

# ---------------------------------------------------------------- random graphs of awkward terms
_NS = ["http://e.org/", "http://e.org/a/b#", "http://www.w3.org/1999/02/22-rdf-syntax-ns#", XSD,
       "http://xmlns.com/foaf/0.1/", "urn:x:", "http://ü.org/ä/", "http://e.org/q?x=1&y="]
_LOCAL = st.sampled_from(["a", "b1", "_x", "9", "12", "x-y", "q.r", "-z", "", "é", "a%20b", "Name", "x_"])
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30) | st.sampled_from(
    ['a "q" \\ b', "line\nbreak\r\n", "\t", "<&>]]>", "x" * 3000, "\\n", "\\\\\"", "\u2028\ufffe", "\x00\x01"])
_LANG = st.sampled_from(["en", "en-us", "de-at", "zh-hant-tw", "x-private"])
_NUMERIC = st.sampled_from([(XSD + "integer", "01"), (XSD + "integer", "-5"), (XSD + "integer", "1.0"),
                            (XSD + "decimal", "1.50"), (XSD + "decimal", ".5"), (XSD + "decimal", "1."),
                            (XSD + "double", "1E3"), (XSD + "double", "1.5e-3"), (XSD + "double", "INF"),
                            (XSD + "boolean", "true"), (XSD + "boolean", "1"), (XSD + "date", "2020-01-01"),
                            ("http://e.org/dt#t", "x y"), ("urn:dt", "z")])


@st.composite
def _iri(draw, ncname: bool = False) -> str:
    ns = draw(st.sampled_from(_NS))
    local = draw(_LOCAL)
    if ncname and not (local[:1].isalpha() or local[:1] == "_"):
        local = "p" + local
    return ns + local


@st.composite
def _object(draw):
    kind = draw(st.sampled_from(["iri", "bnode", "plain", "lang", "typed", "numeric"]))
    if kind == "iri":
        return ("iri", draw(_iri()))
    if kind == "bnode":
        return ("bnode", draw(st.sampled_from(["b0", "b1", "x.y", "1", "é", "a-", "node_7"])))
    if kind == "plain":
        return ("lit", draw(_TEXT), None, None)
    if kind == "lang":
        return ("lit", draw(_TEXT), None, draw(_LANG))
    if kind == "typed":
        return ("lit", draw(_TEXT), draw(st.sampled_from([XSD + "date", "http://e.org/dt#t", "urn:dt"])), None)
    dt, lex = draw(_NUMERIC)
    return ("lit", lex, dt, None)


_SUBJECT = st.one_of(_iri().map(lambda i: ("iri", i)),
                     st.sampled_from(["b0", "b1", "x.y", "1", "é"]).map(lambda b: ("bnode", b)))
_TRIPLES = st.lists(st.tuples(_SUBJECT, _iri(ncname=True).map(lambda i: ("iri", i)), _object()),
                    min_size=1, max_size=30)


def _key(t) -> str:
    if t[0] == "iri":
        return "<" + t[1] + ">"
    if t[0] == "bnode":
        return "_:" + t[1]
    _, lex, dt, lang = t
    body = '"' + escape_lexical(lex) + '"'
    if lang is not None:
        return body + "@" + lang
    if dt is not None and dt != XSD + "string":
        return body + "^^<" + dt + ">"
    return body


def _ox_term(t, blanks: dict):
    if t[0] == "iri":
        return ox.NamedNode(t[1])
    if t[0] == "bnode":
        return blanks.setdefault(t[1], ox.BlankNode(f"n{len(blanks)}"))
    _, lex, dt, lang = t
    if lang is not None:
        return ox.Literal(lex, language=lang)
    return ox.Literal(lex, datatype=ox.NamedNode(dt)) if dt else ox.Literal(lex)


def _graph(triples) -> tuple[QueryResult, ox.Dataset]:
    index: dict[str, int] = {}
    rows = [[index.setdefault(_key(x), len(index)) for x in tr] for tr in triples]
    res = QueryResult(form="CONSTRUCT", terms=KeyTable(list(index)), triples=np.array(rows, dtype=np.int64))
    blanks: dict = {}
    want = _canon(ox.Quad(*(_ox_term(x, blanks) for x in tr)) for tr in triples)
    return res, want


def _canon(quads) -> ox.Dataset:
    ds = ox.Dataset(quads)
    ds.canonicalize(ox.CanonicalizationAlgorithm.UNSTABLE)
    return ds


def _default_graph(ds: ox.Dataset) -> ox.Dataset:
    return _canon(ox.Quad(q.subject, q.predicate, q.object) for q in ds)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TRIPLES)
def test_every_format_reads_back_as_the_same_graph(triples):
    keep = gw.SMALL_ROWS
    try:
        for small in (0, 10**9):  # the vectorized path, then the per-term one
            gw.SMALL_ROWS = small
            _reads_back(triples)
    finally:
        gw.SMALL_ROWS = keep


def _reads_back(triples):
    res, want = _graph(triples)
    for name, oxf in WRITE:
        body = serialize(res, F.by_name(name).media_type)
        got = _canon(ox.parse(body, getattr(ox.RdfFormat, oxf)))
        assert got == want, (name, body.decode("utf-8", "replace")[:3000])
    body = serialize(res, F.by_name("trig").media_type, graph="http://e.org/g")
    got = list(ox.parse(body, ox.RdfFormat.TRIG))
    assert {str(q.graph_name) for q in got} == {"<http://e.org/g>"}
    assert _default_graph(ox.Dataset(got)) == want
    body = ser._serialize_jsonld(res, "http://e.org/g")
    got = list(ox.parse(body, ox.RdfFormat.JSON_LD))
    assert {str(q.graph_name) for q in got} == {"<http://e.org/g>"}
    assert _default_graph(ox.Dataset(got)) == want


# rdflib: text it can hold (no control characters rdflib's XML parser refuses, no xsd:string
# twin, lexical forms its Literal keeps as they are)
_RDFLIB_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20) | st.sampled_from(
    ['a "q" \\ b', "line\nbreak", "<&>]]>", "x" * 2000])


@st.composite
def _rdflib_object(draw):
    kind = draw(st.sampled_from(["iri", "bnode", "plain", "lang", "typed"]))
    if kind == "iri":
        return ("iri", draw(_iri()))
    if kind == "bnode":
        return ("bnode", draw(st.sampled_from(["b0", "b1", "x.y"])))
    if kind == "plain":
        return ("lit", draw(_RDFLIB_TEXT), None, None)
    if kind == "lang":
        return ("lit", draw(_RDFLIB_TEXT), None, draw(_LANG))
    return ("lit", draw(_RDFLIB_TEXT), "http://e.org/dt#t", None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_SUBJECT.filter(lambda s: s[1] not in ("1", "é")),
                          _iri(ncname=True).map(lambda i: ("iri", i)), _rdflib_object()), min_size=1, max_size=15))
def test_rdflib_reads_back_the_same_graph(triples):
    import rdflib
    from rdflib.compare import isomorphic

    res, _ = _graph(triples)
    nt = "".join(" ".join(_key(x) for x in tr) + " .\n" for tr in triples)
    want = rdflib.Graph().parse(data=nt, format="nt")
    for name, fmt in (("ttl", "turtle"), ("xml", "xml"), ("jsonld", "json-ld")):
        body = serialize(res, F.by_name(name).media_type)
        got = rdflib.Graph().parse(data=body, format=fmt)
        assert isomorphic(got, want), (name, body[:2000])


# ---------------------------------------------------------------- the byte rewrites
_BODY = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40).map(escape_lexical)


def _arr(xs: list[str]) -> pa.Array:
    return pa.array([x.encode("utf-8") for x in xs], pa.large_binary())


def _xml_text(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")


@settings(max_examples=300, deadline=None)
@given(st.lists(_BODY, max_size=12), st.lists(st.booleans(), min_size=12, max_size=12))
def test_rewrites_equal_their_per_term_definitions(bodies, only):
    arr = _arr(bodies)
    xml = [b.decode("utf-8") for b in gw.rewrite(arr, gw.XML_BODY).to_pylist()]
    assert xml == [_xml_text(unescape_string(b)) for b in bodies]
    js = [b.decode("utf-8") for b in gw.rewrite(arr, gw.JSON_BODY).to_pylist()]
    assert [json.loads('"' + j + '"') for j in js] == [unescape_string(b) for b in bodies]
    raw = [unescape_string(b) for b in bodies]
    txt = [b.decode("utf-8") for b in gw.rewrite(_arr(raw), gw.JSON_TEXT).to_pylist()]
    assert [json.loads('"' + j + '"') for j in txt] == raw
    attr = [b.decode("utf-8") for b in gw.rewrite(_arr(raw), gw.XML_ATTR).to_pylist()]
    assert attr == [gw._xml_escape_attr(r) for r in raw]
    mask = np.array(only[: len(bodies)], dtype=bool)
    part = [b.decode("utf-8") for b in gw.rewrite(arr, gw.XML_BODY, only=mask).to_pylist()]
    assert part == [_xml_text(unescape_string(b)) if m else b for b, m in zip(bodies, mask, strict=True)]


def test_a_slice_of_an_array_is_rewritten_in_place():
    arr = _arr(["a&b", "x\\ny", "<", "plain"]).slice(1, 2)
    assert gw.rewrite(arr, gw.XML_BODY).to_pylist() == [b"x\ny", b"&lt;"]


# ---------------------------------------------------------------- namespaces and prefixes
_seg = st.sampled_from(["a", "b1", "_x", "9", "12", "x-y", "c d", "é", "", "q.r", "-z"])
_sep = st.sampled_from(["/", "#", ""])


@st.composite
def _ns_iri(draw) -> str:
    base = draw(st.sampled_from(["http://e.org/", "http://www.w3.org/2001/XMLSchema#", "urn:x:", "http://a/b#c/",
                                 "http://www.w3.org/1999/02/22-rdf-syntax-ns#", "http://xmlns.com/foaf/0.1/"]))
    return base + "".join(draw(st.lists(st.tuples(_seg, _sep).map("".join), max_size=3)))


@st.composite
def _ns_key(draw) -> str:
    kind = draw(st.sampled_from(["iri", "dt", "lang", "plain", "bnode"]))
    if kind == "iri":
        return "<" + draw(_ns_iri()) + ">"
    if kind == "dt":
        return '"1"^^<' + draw(_ns_iri()) + ">"
    if kind == "lang":
        return '"x"@en'
    if kind == "plain":
        return '"<' + draw(_ns_iri()) + '>"'  # an IRI-looking string inside a literal
    return "_:b" + str(draw(st.integers(0, 9)))


def _reference_counts(keys: list[str]) -> dict[str, int]:
    import re

    local = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z|[0-9]+\Z")
    iris = [k[1:-1] for k in keys if k and k[0] == "<"]
    iris += [k[k.rfind('"') + 4 : -1] for k in keys if k and k[0] == '"' and "^^<" in k[k.rfind('"') :]]
    counts: dict[str, int] = {}
    for x in iris:
        cut = max(x.rfind("#"), x.rfind("/"))
        ns, loc = (x[: cut + 1], x[cut + 1 :]) if cut >= 0 else ("", x)
        if ns and local.match(loc):
            counts[ns] = counts.get(ns, 0) + 1
    return counts


@settings(max_examples=300, deadline=None)
@given(st.lists(_ns_key(), min_size=1, max_size=40, unique=True))
def test_namespace_counts_equal_the_per_term_count(keys):
    assert gw.Terms(pa.array(keys, pa.large_string())).namespace_counts() == _reference_counts(keys)


def test_prefixes_common_callers_and_new_ones():
    counts = {"http://www.w3.org/1999/02/22-rdf-syntax-ns#": 1, "http://e.org/vocab/": 5, "http://e.org/x#": 1,
              "http://mine.org/": 3}
    got = gw.choose_prefixes(counts, {"my": "http://mine.org/", "bad name": "http://e.org/x#"})
    assert got == {"my": "http://mine.org/", "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
                   "vocab": "http://e.org/vocab/"}


def test_turtle_reads_well():
    keys = ["<http://e.org/s>", "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>", "<http://e.org/C>",
            "<http://e.org/p>", '"5"^^<http://www.w3.org/2001/XMLSchema#integer>', '"x"', "<http://e.org/o>"]
    t = np.array([[0, 3, 4], [0, 1, 2], [0, 3, 5], [6, 3, 0]], dtype=np.int64)
    body = serialize(QueryResult(form="CONSTRUCT", terms=KeyTable(keys), triples=t), "text/turtle").decode()
    assert body == ("@prefix ns1: <http://e.org/> .\n"
                    "ns1:s a ns1:C ;\n\tns1:p 5 , \"x\" .\nns1:o ns1:p ns1:s .\n")


# ---------------------------------------------------------------- bounds and refusals
def _big(n: int = 50_000) -> QueryResult:
    keys = [f"<http://e.org/s{i}>" for i in range(n)] + ["<http://e.org/p>"] + [f'"v{i}"' for i in range(n)]
    t = np.stack([np.arange(n), np.full(n, n), np.arange(n) + n + 1], axis=1).astype(np.int64)
    return QueryResult(form="CONSTRUCT", terms=KeyTable(keys), triples=t)


@pytest.mark.parametrize("name", ["ttl", "trig", "xml", "jsonld"])
def test_the_size_bound_holds_before_the_body_is_built(name):
    res = _big(2000)
    mt = F.by_name(name).media_type
    size = len(serialize(res, mt))
    assert len(serialize(res, mt, max_bytes=size)) == size  # the exact size fits
    with pytest.raises(ResponseTooLarge):
        serialize(res, mt, max_bytes=size - 1)


@pytest.mark.parametrize("name", ["ttl", "xml", "jsonld"])
def test_a_deadline_stops_a_large_body(name):
    with pytest.raises(QueryTimeout):
        serialize(_big(), F.by_name(name).media_type, deadline=time.monotonic() - 1)


def test_rdfxml_refuses_a_predicate_with_no_xml_name():
    keys = ["<http://e.org/s>", "<http://e.org/p/123>", '"x"']
    res = QueryResult(form="CONSTRUCT", terms=KeyTable(keys), triples=np.array([[0, 1, 2]], dtype=np.int64))
    with pytest.raises(ValueError, match="RDF/XML"):
        serialize(res, "application/rdf+xml")
    keys[1] = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#li>"
    res = QueryResult(form="CONSTRUCT", terms=KeyTable(keys), triples=np.array([[0, 1, 2]], dtype=np.int64))
    with pytest.raises(ValueError, match="rdf:li"):
        serialize(res, "application/rdf+xml")


def test_dataset_trig_one_prefix_head_every_graph():
    a = _graph([(("iri", "http://e.org/s"), ("iri", "http://e.org/p"), ("iri", "http://e.org/o"))])[0]
    b = _graph([(("iri", "http://e.org/t"), ("iri", "http://e.org/p"), ("lit", "x", None, "en"))])[0]
    body = ser.write_dataset([(None, a), ("http://e.org/g", b)], "application/trig")
    heads = [ln for ln in body.split(b"\n") if ln.startswith(b"@prefix")]
    assert heads and len(heads) == len(set(heads)) and body.startswith(heads[0])
    got = {(str(q.subject), str(q.graph_name)) for q in ox.parse(body, ox.RdfFormat.TRIG)}
    assert got == {("<http://e.org/s>", "DEFAULT"), ("<http://e.org/t>", "<http://e.org/g>")}
    assert ser.write_dataset([(None, a), ("http://e.org/g", b)], "application/n-quads").count(b"\n") == 2


# ---------------------------------------------------------------- the two paths write the same bytes
def _both(res: QueryResult):
    keys = res.terms.keys
    big = gw.Rows(res.triples, lambda ids: pa.array(keys(ids), pa.large_string()))
    small = gw.SmallGraph(res.triples, keys)
    return big, small


def _ok(n: int) -> None:
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TRIPLES, st.sampled_from([None, "http://e.org/g"]))
def test_the_per_term_writer_writes_the_vectorized_writers_bytes(triples, graph):
    res, _ = _graph(triples)
    big, small = _both(res)
    for trig in (False, True):
        assert (gw.write_turtle([(graph, small)], {"my": "http://e.org/a/b#"}, trig, _ok, None)
                == gw.write_turtle([(graph, big)], {"my": "http://e.org/a/b#"}, trig, _ok, None))
    assert gw.write_jsonld(small, graph, _ok, None) == gw.write_jsonld(big, graph, _ok, None)
    try:
        want = gw.write_rdfxml(big, _ok, None)
    except ValueError as e:
        with pytest.raises(ValueError, match=str(e)[:40]):
            gw.write_rdfxml(small, _ok, None)
    else:
        assert gw.write_rdfxml(small, _ok, None) == want


def test_small_and_large_graphs_share_a_dataset_prefix_head():
    small = _graph([(("iri", "http://e.org/v/s"), ("iri", "http://e.org/v/p"), ("iri", "http://e.org/v/o"))])[0]
    body = ser.write_dataset([(None, small), ("http://e.org/g", _big(100))], "application/trig")
    assert body.count(b"@prefix") == 2  # ns for http://e.org/ and for http://e.org/v/
    assert len(list(ox.parse(body, ox.RdfFormat.TRIG))) == 101


@pytest.mark.parametrize("name", ["ttl", "xml", "jsonld"])
def test_the_memory_budget_holds(name):
    from engine.errors import MemoryBudgetExceeded
    from engine.exec.context import MemoryBudget, enter_budget, leave_budget

    token = enter_budget(MemoryBudget(1 << 20))
    try:
        with pytest.raises(MemoryBudgetExceeded):
            serialize(_big(), F.by_name(name).media_type)
        assert serialize(_big(2000), F.by_name(name).media_type)  # a graph within it goes through
    finally:
        leave_budget(token)


@pytest.mark.parametrize("rows", [5, 600])
def test_a_construct_with_computed_terms_reads_back(rows):
    """Store terms and terms the query computed (ids past the store's) in one graph, on both paths."""
    from engine.database import Database

    db = Database(shards=1)
    nt = "".join(f'<http://e.org/s{i}> <http://e.org/p> "v{i} \\"q\\"\\n"@en .\n' for i in range(rows))
    db.load_data(nt.encode(), "application/n-triples")
    res = db.query('CONSTRUCT { ?s <http://e.org/q> ?c . ?s <http://e.org/p> ?o . ?s <http://e.org/n> ?n } '
                   'WHERE { ?s <http://e.org/p> ?o BIND(CONCAT(STR(?o), "&<x>") AS ?c) BIND(STRLEN(?o) AS ?n) }')
    want = _canon(ox.parse(serialize(res, "application/n-triples"), ox.RdfFormat.N_TRIPLES))
    assert len(want) == 3 * rows
    for name, oxf in WRITE:
        body = serialize(res, F.by_name(name).media_type)
        assert _canon(ox.parse(body, getattr(ox.RdfFormat, oxf))) == want, name


# ---------------------------------------------------------------- terms kept between small answers
_SMALL_FORMATS = ["ttl", "trig", "xml", "jsonld", "nt", "nq"]


def _write_all(res: QueryResult, small: bool) -> dict:
    keep = gw.SMALL_ROWS
    gw.SMALL_ROWS = 10**9 if small else 0
    out = {}
    try:
        for name in _SMALL_FORMATS:
            graph = "http://e.org/g%x" if name in ("nq", "trig") else None
            try:
                out[name] = serialize(res, F.by_name(name).media_type, graph=graph,
                                      prefixes={"my": "http://e.org/a/b#"})
            except ValueError as e:  # (RDF/XML refuses some predicates: both paths alike)
                out[name] = ("refused", str(e)[:60])
    finally:
        gw.SMALL_ROWS = keep
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TRIPLES, st.lists(st.lists(st.integers(0, 29), min_size=1, max_size=12), min_size=1, max_size=4))
def test_small_answers_of_one_store_write_the_vectorized_bytes(triples, picks):
    """Graphs of a store's terms (its dictionary's kept TermCache, shared by the answers one
    after another: terms seen before come from it, blank nodes of another answer too) write
    the bytes of the vectorized writers, in every format, cold and hot."""
    from engine.database import Database

    db = Database(shards=1)
    db.load_data("".join(" ".join(_key(x) for x in tr) + " .\n" for tr in triples).encode("utf-8"),
                 "application/n-triples")
    whole = db.graph_get(None)
    assert gw.term_cache(whole.terms) is not None
    n = len(whole.triples)
    for pick in picks + picks[:1]:  # the first answer again: every term kept
        rows = whole.triples[[i % n for i in pick]]
        res = QueryResult(form="CONSTRUCT", terms=whole.terms, triples=rows)
        assert _write_all(res, small=True) == _write_all(res, small=False)


def test_the_kept_terms_of_a_store_are_its_dictionarys():
    """A store that is cleared and reloaded (a new dictionary: ids mean other terms) is not
    written with the terms kept for the old one; a term table without a dictionary keeps none."""
    from engine.database import Database

    db = Database(shards=1)
    db.load_data(b"<http://e.org/a> <http://e.org/p> \"one\" .\n", "application/n-triples")
    first = serialize(db.graph_get(None), "text/turtle")
    db2 = Database(shards=1)
    db2.load_data(b"<http://e.org/b> <http://e.org/q> \"two\"@en .\n", "application/n-triples")
    second = serialize(db2.graph_get(None), "text/turtle")
    assert b"two" in second and b"one" not in second and b"one" in first
    assert gw.term_cache(KeyTable(["<http://e.org/a>"])) is None


def test_a_full_term_cache_is_replaced_not_grown(monkeypatch):
    """Past its bound (terms or key characters) a store's kept TermCache is replaced by a new one."""
    from engine.database import Database

    db = Database(shards=1)
    db.load_data("".join(f'<http://e.org/s{i}> <http://e.org/p> "{"x" * 100}{i}" .\n' for i in range(50)).encode(),
                 "application/n-triples")
    whole = db.graph_get(None)
    monkeypatch.setattr(gw, "MAX_CACHED_CHARS", 1000)
    first = gw.term_cache(whole.terms)
    body = serialize(QueryResult(form="CONSTRUCT", terms=whole.terms, triples=whole.triples[:20]), "text/turtle")
    assert first.chars > 1000 and gw.term_cache(whole.terms) is not first
    again = serialize(QueryResult(form="CONSTRUCT", terms=whole.terms, triples=whole.triples[:20]), "text/turtle")
    assert again == body


def test_turtle_terms_are_kept_for_answers_of_many_prefix_heads(monkeypatch):
    """Answers about entities of many namespaces (one Turtle prefix head each, more than
    the old 16) keep their terms' Turtle (a second round writes none anew) and write the
    vectorized bytes; the kept fragments are bounded by their total (then replaced)."""
    from engine.database import Database

    k = 40
    db = Database(shards=1)
    db.load_data("".join(f"<http://e.org/d{i}/ent> <http://e.org/v#p{j}> <http://e.org/d{i}/obj{j}> .\n"
                         for i in range(k) for j in range(3)).encode(), "application/n-triples")
    whole = db.graph_get(None)
    t = whole.triples
    answers = [QueryResult(form="CONSTRUCT", terms=whole.terms, triples=t[t[:, 0] == s]) for s in sorted(set(t[:, 0]))]
    assert len(answers) == k
    bodies = [serialize(r, "text/turtle") for r in answers]
    cache = gw.term_cache(whole.terms)
    kept = cache.ttl_kept
    assert len(cache.ttl_frags) >= k and kept > 0
    assert [serialize(r, "text/turtle") for r in answers] == bodies
    assert cache.ttl_kept == kept  # every term's Turtle came from the kept fragments
    for r, b in zip(answers, bodies, strict=True):
        assert _write_all(r, small=False)["ttl"] == b
    monkeypatch.setattr(gw, "MAX_CACHED", 20)
    assert [serialize(r, "text/turtle") for r in answers] == bodies
    assert gw.term_cache(whole.terms).ttl_kept <= 20 + 8
