"""Result serializers (engine/exec/serialize.py) and content negotiation (engine/formats.py)."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import rdflib

from engine import formats as F
from engine.exec import serialize as ser
from engine.exec.result import QueryResult
from engine.exec.serialize import KeyTable, graph_from_keys, serialize
from engine.formats import negotiate

XSD = "http://www.w3.org/2001/XMLSchema#"
KEYS = [
    "<http://ex.org/a>",                      # 0
    '"plain"',                                # 1
    '"chat"@fr',                              # 2
    f'"42"^^<{XSD}integer>',                  # 3
    "_:b1",                                   # 4
    '"with, comma and \\"quotes\\""',         # 5
    '"line\\nbreak\\ttab"',                   # 6  (key escapes \n; the tab is raw)
    '"caf\u00e9 \u2603"',                     # 7
    "<http://ex.org/b#x>",                    # 8
    f'"1.5"^^<{XSD}decimal>',                 # 9
]
KEYS[6] = '"line\\nbreak\ttab"'
SRX = "{http://www.w3.org/2005/sparql-results#}"


def select(cols: dict[str, list[int]]) -> QueryResult:
    return QueryResult(form="SELECT", terms=KeyTable(KEYS), vars=list(cols),
                       columns=[np.array(v, dtype=np.int64) for v in cols.values()])


def rows_from_json(body: bytes):
    doc = json.loads(body)
    return doc["head"]["vars"], doc["results"]["bindings"]


# ---------------------------------------------------------------- negotiation

@pytest.mark.parametrize("accept,form,expected", [
    (None, "SELECT", F.SPARQL_JSON),
    ("", "ASK", F.SPARQL_JSON),
    ("*/*", "SELECT", F.SPARQL_JSON),
    ("*/*", "CONSTRUCT", F.TURTLE),
    ("application/sparql-results+xml", "SELECT", F.SPARQL_XML),
    ("text/csv", "SELECT", F.CSV),
    ("text/tab-separated-values", "SELECT", F.TSV),
    ("application/sparql-results+json;q=0.5, application/sparql-results+xml", "SELECT", F.SPARQL_XML),
    ("application/sparql-results+xml;q=0.5, text/csv;q=0.9", "SELECT", F.CSV),
    ("text/*", "SELECT", F.CSV),
    ("application/json", "SELECT", F.SPARQL_JSON),
    ("application/json", "CONSTRUCT", F.JSONLD),
    ("text/plain", "SELECT", "text/plain"),
    ("text/plain", "CONSTRUCT", "text/plain"),
    ("text/xml", "CONSTRUCT", F.RDFXML),
    ("application/n-triples, text/turtle;q=0.9, application/rdf+xml;q=0.5", "CONSTRUCT", F.NTRIPLES),
    ("application/rdf+xml", "DESCRIBE", F.RDFXML),
    ("application/ld+json", "CONSTRUCT", F.JSONLD),
    ("application/n-quads", "CONSTRUCT", F.NQUADS),
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "SELECT", F.SPARQL_XML),
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "CONSTRUCT", F.RDFXML),
    ("text/html", "SELECT", None),
    ("text/turtle", "SELECT", None),
    ("application/sparql-results+json", "CONSTRUCT", None),
    ("application/sparql-results+json;q=0", "SELECT", None),
    ("*/*;q=0.1, application/sparql-results+json;q=0", "SELECT", F.SPARQL_XML),
    ("garbage;;;,,", "SELECT", None),
    ("text/turtle;q=abc", "CONSTRUCT", F.TURTLE),
])
def test_negotiate(accept, form, expected):
    assert negotiate(accept, form) == expected


# ---------------------------------------------------------------- SPARQL JSON

@pytest.mark.parametrize("n", [1, 3, 50])  # tiny path and vectorized path
def test_json_select_roundtrip(n):
    a = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 5
    b = [-1, 3, -1, 0, 1, 2, 4, 5, 6, 7] * 5
    res = select({"a": a[:n], "b": b[:n]})
    vars_, rows = rows_from_json(serialize(res, F.SPARQL_JSON))
    assert vars_ == ["a", "b"]
    assert len(rows) == n
    assert rows[0] == {"a": {"type": "uri", "value": "http://ex.org/a"}}
    if n > 1:
        assert rows[1] == {"a": {"type": "literal", "value": "plain"},
                           "b": {"type": "literal", "value": "42", "datatype": XSD + "integer"}}
    if n > 4:
        assert rows[2] == {"a": {"type": "literal", "value": "chat", "xml:lang": "fr"}}
        assert rows[4]["a"] == {"type": "bnode", "value": "b1"}
        assert rows[5]["a"]["value"] == 'with, comma and "quotes"'
        assert rows[6]["a"]["value"] == "line\nbreak\ttab"
        assert rows[7]["a"]["value"] == "caf\u00e9 \u2603"


def test_json_first_column_unbound_vectorized():
    res = select({"a": [-1] * 10, "b": [0] * 5 + [-1] * 5, "c": [1] * 10})
    _, rows = rows_from_json(serialize(res, F.SPARQL_JSON))
    assert rows[0] == {"b": {"type": "uri", "value": "http://ex.org/a"}, "c": {"type": "literal", "value": "plain"}}
    assert rows[9] == {"c": {"type": "literal", "value": "plain"}}


def test_json_empty_and_no_vars_and_ask():
    assert rows_from_json(serialize(select({"x": []}), F.SPARQL_JSON)) == (["x"], [])
    res = QueryResult(form="SELECT", terms=KeyTable(KEYS), vars=[], columns=[], n_rows=2)
    assert rows_from_json(serialize(res, F.SPARQL_JSON)) == ([], [{}, {}])
    ask = QueryResult(form="ASK", terms=KeyTable(KEYS), boolean=True)
    assert json.loads(serialize(ask, F.SPARQL_JSON)) == {"head": {}, "boolean": True}
    assert json.loads(serialize(ask, "application/json"))["boolean"] is True


@pytest.mark.parametrize("res", [
    select({"a": [0, 1, 2], "b": [3, -1, 4]}),                        # small path
    select({"a": list(range(10)) * 30, "b": [3, -1] * 150}),           # vectorized path
    select({"x": []}),                                                 # no rows
    QueryResult(form="SELECT", terms=KeyTable(KEYS), vars=[], columns=[], n_rows=2),
    QueryResult(form="ASK", terms=KeyTable(KEYS), boolean=False),
], ids=["small", "vectorized", "empty", "novars", "ask"])
def test_json_extra_members(res):
    """``sparql_json(res, extra)`` is the plain document with the extra top-level members added."""
    plain = json.loads(serialize(res, F.SPARQL_JSON))
    extra = b',"window":{"start":1,"end":2},"n":3'
    assert json.loads(ser.sparql_json(res, extra)) == {**plain, "window": {"start": 1, "end": 2}, "n": 3}
    assert ser.sparql_json(res) == serialize(res, F.SPARQL_JSON)


# ---------------------------------------------------------------- SPARQL XML

def test_xml_select():
    res = select({"a": list(range(10)), "b": [-1] * 10})
    root = ET.fromstring(serialize(res, F.SPARQL_XML))
    assert [v.get("name") for v in root.iter(SRX + "variable")] == ["a", "b"]
    results = list(root.iter(SRX + "result"))
    assert len(results) == 10
    b0 = results[0].find(SRX + "binding")
    assert b0.get("name") == "a" and b0.find(SRX + "uri").text == "http://ex.org/a"
    lit = results[2].find(SRX + "binding/" + SRX + "literal")
    assert lit.text == "chat" and lit.get("{http://www.w3.org/XML/1998/namespace}lang") == "fr"
    typed = results[3].find(SRX + "binding/" + SRX + "literal")
    assert typed.get("datatype") == XSD + "integer"
    assert results[4].find(SRX + "binding/" + SRX + "bnode").text == "b1"
    assert results[5].find(SRX + "binding/" + SRX + "literal").text == 'with, comma and "quotes"'
    ask = QueryResult(form="ASK", terms=KeyTable(KEYS), boolean=False)
    root = ET.fromstring(serialize(ask, F.SPARQL_XML))
    assert root.find(SRX + "boolean").text == "false"


# ---------------------------------------------------------------- CSV / TSV

def test_csv():
    res = select({"a": list(range(10)), "b": [3] + [-1] * 9})
    body = serialize(res, F.CSV).decode()
    assert body.startswith("a,b\r\n")
    rows = list(csv.reader(io.StringIO(body, newline="")))
    assert rows[0] == ["a", "b"]
    assert rows[1] == ["http://ex.org/a", "42"]
    assert rows[2] == ["plain", ""]
    assert rows[3] == ["chat", ""]
    assert rows[5] == ["_:b1", ""]
    assert rows[6] == ['with, comma and "quotes"', ""]
    assert rows[7] == ["line\nbreak\ttab", ""]
    assert rows[8] == ["caf\u00e9 \u2603", ""]


def test_tsv():
    res = select({"a": list(range(10)), "b": [3] + [-1] * 9})
    lines = serialize(res, F.TSV).decode().split("\n")
    assert lines[0] == "?a\t?b"
    assert lines[1] == f'<http://ex.org/a>\t"42"^^<{XSD}integer>'
    assert lines[2] == '"plain"\t'
    assert lines[3] == '"chat"@fr\t'
    assert lines[5] == "_:b1\t"
    assert lines[7] == '"line\\nbreak\\ttab"\t'  # no raw tab or newline inside a field
    assert len(lines) == 12 and lines[-1] == ""


# ---------------------------------------------------------------- graphs

TRIPLES = [
    ("<http://ex.org/s>", "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>", "<http://ex.org/C>"),
    ("<http://ex.org/s>", "<http://ex.org/p>", '"chat"@fr'),
    ("<http://ex.org/s>", "<http://ex.org/p>", f'"42"^^<{XSD}integer>'),
    ("<http://ex.org/s>", "<http://ex.org/q>", "_:b1"),
    ("_:b1", "<http://ex.org/p>", '"line\\nbreak \\"q\\" caf\u00e9"'),
    ("_:b1", "<http://ex.org/p>", f'"1.50"^^<{XSD}decimal>'),
    ("<http://other.org/x y>", "<http://ex.org/p>", f'"true"^^<{XSD}boolean>'),
]
TRIPLES = TRIPLES[:-1]  # an IRI with a space is not valid RDF in any syntax


def _expected_graph() -> rdflib.Graph:
    g = rdflib.Graph()
    g.parse(data="".join(f"{s} {p} {o} .\n" for s, p, o in TRIPLES), format="nt")
    return g


@pytest.mark.parametrize("mt,fmt", [
    (F.TURTLE, "turtle"), (F.NTRIPLES, "nt"), (F.NQUADS, "nt"),  # N-Quads without graph names
    (F.JSONLD, "json-ld"), (F.RDFXML, "xml"), ("text/plain", "nt"),
])
def test_graph_roundtrip(mt, fmt):
    res = graph_from_keys(TRIPLES)
    body = serialize(res, mt)
    from rdflib.compare import isomorphic

    g = rdflib.Graph()
    g.parse(data=body, format=fmt)
    assert isomorphic(g, _expected_graph()), body.decode()


def test_turtle_uses_prefixes_and_a():
    res = graph_from_keys([("<http://xmlns.com/foaf/0.1/me>", "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>",
                            "<http://xmlns.com/foaf/0.1/Person>"),
                           ("<http://xmlns.com/foaf/0.1/me>", "<http://xmlns.com/foaf/0.1/age>",
                            f'"7"^^<{XSD}integer>')])
    body = serialize(res, F.TURTLE).decode()
    assert "@prefix foaf: <http://xmlns.com/foaf/0.1/> ." in body
    assert "foaf:me" in body and " a foaf:Person" in body and "foaf:age 7" in body


def test_nquads_with_graph_name():
    res = graph_from_keys(TRIPLES[:1])
    body = serialize(res, F.NQUADS, graph="http://ex.org/g").decode()
    assert body.strip().endswith("<http://ex.org/g> .")


def test_empty_graph():
    res = QueryResult(form="CONSTRUCT", terms=KeyTable([]), triples=np.zeros((0, 3), dtype=np.int64))
    for mt in F.offers("GRAPH")[0]:
        body = serialize(res, mt)
        assert isinstance(body, bytes)


def test_wrong_type_for_form():
    with pytest.raises(ValueError):
        serialize(select({"a": [0]}), F.TURTLE)
    with pytest.raises(ValueError):
        serialize(graph_from_keys(TRIPLES), F.SPARQL_JSON)


def test_large_select_is_fast_enough():
    import time

    n = 200_000
    keys = [f"<http://ex.org/r{i}>" for i in range(1000)]
    res = QueryResult(form="SELECT", terms=KeyTable(keys), vars=["a", "b"],
                      columns=[np.arange(n) % 1000, (np.arange(n) * 7) % 1000])
    t0 = time.perf_counter()
    body = serialize(res, F.SPARQL_JSON)
    dt = time.perf_counter() - t0
    doc = json.loads(body)
    assert len(doc["results"]["bindings"]) == n
    assert doc["results"]["bindings"][3]["b"]["value"] == "http://ex.org/r21"
    assert dt < 5.0
