"""/sparql against the real server: protocol bindings, dataset parameters,
content negotiation, errors, CORS and the Service Description."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET

import pytest
import rdflib
import requests

EX = "http://ex.org/"
DATA = f"""
<{EX}alice> <{EX}name> "Alice" .
<{EX}alice> <{EX}knows> <{EX}bob> .
<{EX}alice> <{EX}age> "30"^^<http://www.w3.org/2001/XMLSchema#integer> .
<{EX}bob> <{EX}name> "Bob"@en .
<{EX}bob> <{EX}knows> _:c .
_:c <{EX}name> "Carol, \\"C\\"" .
"""
G1 = f"<{EX}g1s> <{EX}p> <{EX}g1o> .\n"
G2 = f"<{EX}g2s> <{EX}p> <{EX}g2o> .\n"
NAMES = f"SELECT ?s ?name WHERE {{ ?s <{EX}name> ?name }} ORDER BY STR(?name)"
ORIGIN = {"Origin": "http://app.example"}  # what a browser adds to a cross-origin fetch


@pytest.fixture
def srv(clean_server):
    u = clean_server.url
    for target, body in (("default", DATA), ("graph=" + EX + "g1", G1), ("graph=" + EX + "g2", G2)):
        r = requests.put(f"{u}/store?{target}", data=body.encode(), headers={"Content-Type": "application/n-triples"})
        assert r.status_code in (201, 204), r.text
    return clean_server


def names_json(r) -> list[str]:
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/sparql-results+json")
    return [b["name"]["value"] for b in r.json()["results"]["bindings"]]


def test_get_post_form_agree(srv):
    u = srv.url + "/sparql"
    a = names_json(requests.get(u, params={"query": NAMES}))
    b = names_json(requests.post(u, data=NAMES.encode(), headers={"Content-Type": "application/sparql-query"}))
    c = names_json(requests.post(u, data={"query": NAMES}))
    assert a == b == c == ["Alice", "Bob", 'Carol, "C"']


def test_trailing_slash_and_charset(srv):
    r = requests.post(srv.url + "/sparql/", data=NAMES.encode(),
                      headers={"Content-Type": "application/sparql-query; charset=UTF-8"})
    assert names_json(r) == ["Alice", "Bob", 'Carol, "C"']


def test_json_terms(srv):
    q = f"SELECT ?o WHERE {{ ?s ?p ?o FILTER(?s = <{EX}alice> || ?s = <{EX}bob>) }}"
    r = requests.get(srv.url + "/sparql", params={"query": q})
    terms = {json.dumps(b["o"], sort_keys=True) for b in r.json()["results"]["bindings"]}
    assert json.dumps({"type": "literal", "value": "Alice"}, sort_keys=True) in terms
    assert json.dumps({"type": "literal", "value": "Bob", "xml:lang": "en"}, sort_keys=True) in terms
    assert json.dumps({"type": "literal", "value": "30", "datatype": "http://www.w3.org/2001/XMLSchema#integer"},
                      sort_keys=True) in terms
    assert json.dumps({"type": "uri", "value": EX + "bob"}, sort_keys=True) in terms
    assert any(json.loads(t)["type"] == "bnode" for t in terms)


@pytest.mark.parametrize("accept,ctype", [
    ("application/sparql-results+xml", "application/sparql-results+xml"),
    ("text/csv", "text/csv"),
    ("text/tab-separated-values", "text/tab-separated-values"),
    ("application/json", "application/sparql-results+json"),  # an alias: the canonical type answers
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "application/sparql-results+xml"),
    ("text/plain", "text/plain"),  # CSV, labelled as what the client accepts
    ("*/*", "application/sparql-results+json"),
    ("text/csv;q=0.2, application/sparql-results+xml;q=0.9", "application/sparql-results+xml"),
])
def test_select_conneg(srv, accept, ctype):
    r = requests.get(srv.url + "/sparql", params={"query": NAMES}, headers={"Accept": accept})
    assert r.status_code == 200
    assert r.headers["Content-Type"].split(";")[0] == ctype
    assert "Accept" in r.headers.get("Vary", "")
    if ctype in ("text/csv", "text/plain"):
        rows = list(csv.reader(io.StringIO(r.text, newline="")))
        assert rows[0] == ["s", "name"] and rows[3][1] == 'Carol, "C"'
    elif ctype == "text/tab-separated-values":
        lines = r.text.split("\n")
        assert lines[0] == "?s\t?name" and lines[1] == f'<{EX}alice>\t"Alice"'
    elif ctype.endswith("xml"):
        root = ET.fromstring(r.content)
        assert len(list(root.iter("{http://www.w3.org/2005/sparql-results#}result"))) == 3


@pytest.mark.parametrize("accept,fmt", [
    (None, "turtle"), ("text/turtle", "turtle"), ("application/n-triples", "nt"),
    ("application/rdf+xml", "xml"), ("application/ld+json", "json-ld"), ("application/n-quads", "nt"),
])
def test_construct_conneg(srv, accept, fmt):
    q = f"CONSTRUCT {{ ?s <{EX}called> ?n }} WHERE {{ ?s <{EX}name> ?n }}"
    r = requests.get(srv.url + "/sparql", params={"query": q}, headers={"Accept": accept} if accept else {})
    assert r.status_code == 200, r.text
    g = rdflib.Graph().parse(data=r.content, format=fmt)  # (N-Quads without graph names parse as N-Triples)
    assert len(g) == 3


def test_ask_and_describe(srv):
    r = requests.get(srv.url + "/sparql", params={"query": f"ASK {{ <{EX}alice> <{EX}knows> <{EX}bob> }}"})
    assert r.json() == {"head": {}, "boolean": True}
    r = requests.get(srv.url + "/sparql", params={"query": f"ASK {{ <{EX}bob> <{EX}knows> <{EX}alice> }}"},
                     headers={"Accept": "application/sparql-results+xml"})
    assert b"<boolean>false</boolean>" in r.content
    r = requests.get(srv.url + "/sparql", params={"query": f"DESCRIBE <{EX}alice>"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/turtle")
    g = rdflib.Graph().parse(data=r.text, format="turtle")
    assert (rdflib.URIRef(EX + "alice"), rdflib.URIRef(EX + "knows"), rdflib.URIRef(EX + "bob")) in g


def test_dataset_parameters(srv):
    q = f"SELECT ?s WHERE {{ ?s <{EX}p> ?o }} ORDER BY ?s"
    u = srv.url + "/sparql"
    r = requests.get(u, params={"query": q})
    assert r.json()["results"]["bindings"] == []
    r = requests.get(u, params=[("query", q), ("default-graph-uri", EX + "g1"), ("default-graph-uri", EX + "g2")])
    assert [b["s"]["value"] for b in r.json()["results"]["bindings"]] == [EX + "g1s", EX + "g2s"]
    qg = f"SELECT ?g ?s WHERE {{ GRAPH ?g {{ ?s <{EX}p> ?o }} }}"
    r = requests.post(u + "?named-graph-uri=" + requests.utils.quote(EX + "g2", safe=""), data=qg.encode(),
                      headers={"Content-Type": "application/sparql-query"})
    assert [b["g"]["value"] for b in r.json()["results"]["bindings"]] == [EX + "g2"]
    r = requests.post(u, data=[("query", q), ("default-graph-uri", EX + "g1")])
    assert [b["s"]["value"] for b in r.json()["results"]["bindings"]] == [EX + "g1s"]


@pytest.mark.parametrize("method,kwargs,status", [
    ("GET", {"params": [("query", "ASK {}"), ("query", "ASK {}")]}, 400),
    ("POST", {"data": b"ASK {}"}, 415),
    ("POST", {"data": b"ASK {}", "headers": {"Content-Type": "text/plain"}}, 415),
    ("POST", {"data": "ASK {}".encode("utf-16"), "headers": {"Content-Type": "application/sparql-query; charset=UTF-16"}}, 415),
    ("POST", {"data": b"ASK { \xff }", "headers": {"Content-Type": "application/sparql-query"}}, 400),
    ("POST", {"params": {"query": "ASK {}"}, "data": b"CLEAR ALL",
              "headers": {"Content-Type": "application/sparql-update"}}, 400),
    ("POST", {"data": {"update": "CLEAR ALL", "query": "ASK {}"}}, 400),
    ("POST", {"data": {"update": "CLEAR ALL", "using-graph-uri": "not an iri"}}, 400),
    ("POST", {"data": b"CLEAR ALLL", "headers": {"Content-Type": "application/sparql-update"}}, 400),
    ("POST", {"data": {"nothing": "x"}}, 400),
    ("GET", {"params": {"update": "CLEAR ALL"}}, 400),
    ("PUT", {"params": {"query": "ASK {}"}}, 405),
    ("DELETE", {}, 405),
    ("POST", {"params": {"query": "ASK {}"}, "data": b"ASK {}", "headers": {"Content-Type": "application/sparql-query"}}, 400),
])
def test_bad_requests(srv, method, kwargs, status):
    kwargs = {**kwargs, "headers": {**kwargs.get("headers", {}), **ORIGIN}}  # a browser's CORS request
    r = requests.request(method, srv.url + "/sparql", **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    doc = r.json()
    assert set(doc) >= {"error", "detail"}
    if status == 405:
        assert "POST" in r.headers["Allow"]


def test_syntax_error_has_position(srv):
    r = requests.get(srv.url + "/sparql", params={"query": "SELECT * WHERE {\n  ?s ?p \n}"})
    assert r.status_code == 400
    doc = r.json()
    assert doc["error"] == "syntax"
    assert isinstance(doc["line"], int) and isinstance(doc["column"], int)
    assert doc["line"] >= 2


def test_not_acceptable(srv):
    r = requests.get(srv.url + "/sparql", params={"query": NAMES}, headers={"Accept": "text/html", **ORIGIN})
    assert r.status_code == 406 and r.json()["error"] == "not_acceptable"
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    # acceptable for graphs but not for SELECT
    r = requests.get(srv.url + "/sparql", params={"query": NAMES}, headers={"Accept": "text/turtle"})
    assert r.status_code == 406
    r = requests.get(srv.url + "/sparql", params={"query": "CONSTRUCT WHERE { ?s ?p ?o }"},
                     headers={"Accept": "text/csv"})
    assert r.status_code == 406


def _vary(r) -> set[str]:
    """The names of the response's ``Vary`` header, which must be one line."""
    assert r.raw.headers.getlist("Vary") == [r.headers["Vary"]], "one Vary line"
    return {v.strip().lower() for v in r.headers["Vary"].split(",")}


CORS = ("Access-Control-Allow-Origin", "Access-Control-Expose-Headers")


def test_cors(srv):
    # every CORS request carries Origin (Fetch standard): the CORS headers go to those alone,
    # on the lane (GET, POST) and the ordinary path (a dataset parameter, a 404) alike
    ask = {"query": "ASK {}"}
    reqs = [("GET", "/sparql", {"params": ask}), ("POST", "/sparql", {"data": ask}),
            ("GET", "/sparql", {"params": {**ask, "default-graph-uri": "http://ex.org/g"}}),
            ("POST", "/sparql", {"data": b"ASK {}", "headers": {"Content-Type": "application/sparql-query"}})]
    for _ in range(2):  # the lane's head cache: both kinds of answer from it in turn
        for method, path, kw in reqs:
            plain = requests.request(method, srv.url + path, **kw)
            cors = requests.request(method, srv.url + path, **{**kw, "headers": {**kw.get("headers", {}), **ORIGIN}})
            assert plain.status_code == cors.status_code == 200 and plain.content == cors.content
            assert not any(h in plain.headers for h in CORS)
            assert cors.headers["Access-Control-Allow-Origin"] == "*"
            assert "Content-Length" in cors.headers["Access-Control-Expose-Headers"]
            # a browser client can read the id to quote it to the operator
            assert "X-Request-Id" in cors.headers["Access-Control-Expose-Headers"]
            # shared caches keep the two apart: Vary names Origin on both, in the one Vary line
            assert _vary(plain) == _vary(cors) == {"accept", "origin"}
            assert "Date" in plain.headers and plain.headers["Content-Type"] == cors.headers["Content-Type"]
            assert plain.headers["Content-Length"] == str(len(plain.content))
    r = requests.get(srv.url + "/no/such/path")
    assert r.status_code == 404 and "Access-Control-Allow-Origin" not in r.headers and _vary(r) == {"origin"}
    r = requests.options(srv.url + "/sparql", headers={
        "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"})
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert "authorization" in r.headers["Access-Control-Allow-Headers"].lower()
    r = requests.options(srv.url + "/store?default", headers={"Origin": "x", "Access-Control-Request-Method": "PUT"})
    assert r.status_code == 204 and "PUT" in r.headers["Access-Control-Allow-Methods"]
    r = requests.get(srv.url + "/no/such/path", headers=ORIGIN)
    assert r.status_code == 404 and r.headers["Access-Control-Allow-Origin"] == "*"
    assert r.json()["error"] == "not_found"


def test_head(srv):
    r = requests.head(srv.url + "/sparql", params={"query": "ASK {}"})
    assert r.status_code == 200 and r.content == b""


def test_service_description(srv):
    r = requests.get(srv.url + "/sparql")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/turtle")
    g = rdflib.Graph().parse(data=r.text, format="turtle")
    SD = rdflib.Namespace("http://www.w3.org/ns/sparql-service-description#")
    endpoint = rdflib.URIRef(srv.url + "/sparql")
    svc = g.value(None, SD.endpoint, endpoint)
    assert svc is not None
    assert (svc, rdflib.RDF.type, SD.Service) in g
    assert (svc, SD.supportedLanguage, SD.SPARQL11Query) in g
    assert (svc, SD.supportedLanguage, SD.SPARQL11Update) in g
    formats = set(g.objects(svc, SD.resultFormat))
    assert rdflib.URIRef("http://www.w3.org/ns/formats/SPARQL_Results_JSON") in formats
    for accept, fmt in (("application/rdf+xml", "xml"), ("application/n-triples", "nt"), ("application/ld+json", "json-ld")):
        r = requests.get(srv.url + "/sparql", headers={"Accept": accept})
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(accept)
        g2 = rdflib.Graph().parse(data=r.content, format=fmt)
        assert g2.value(None, SD.endpoint, endpoint) is not None
    r = requests.get(srv.url + "/sparql", headers={"Accept": "image/png"})
    assert r.status_code == 406


def test_unicode_roundtrip(srv):
    text = "caf\u00e9 \u2603 \U0001f600 tab\there"
    upd = f'INSERT DATA {{ <{EX}u> <{EX}label> "{text}" }}'.replace("\t", "\\t")
    r = requests.post(srv.url + "/update", data=upd.encode(), headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204, r.text
    q = f"SELECT ?l WHERE {{ <{EX}u> <{EX}label> ?l }}"
    r = requests.get(srv.url + "/sparql", params={"query": q})
    assert r.json()["results"]["bindings"][0]["l"]["value"] == text
    r = requests.get(srv.url + "/sparql", params={"query": q}, headers={"Accept": "text/tab-separated-values"})
    assert r.text.split("\n")[1] == '"' + text.replace("\t", "\\t") + '"'


def test_big_result_all_formats(srv):
    rows = "".join(f"<{EX}n{i}> <{EX}v> {i} .\n" for i in range(3000))
    r = requests.post(srv.url + "/store?default", data=rows.encode(), headers={"Content-Type": "text/turtle"})
    assert r.status_code == 204, r.text
    q = f"SELECT ?s ?v WHERE {{ ?s <{EX}v> ?v }}"
    for accept in ("application/sparql-results+json", "application/sparql-results+xml", "text/csv",
                   "text/tab-separated-values"):
        r = requests.get(srv.url + "/sparql", params={"query": q}, headers={"Accept": accept})
        assert r.status_code == 200
        if accept.endswith("json"):
            assert len(r.json()["results"]["bindings"]) == 3000
        elif accept.endswith("xml"):
            assert r.text.count("<result>") == 3000
        else:
            assert len(r.text.strip().splitlines()) == 3001


@pytest.mark.parametrize("fmt,ctype", [("json", "application/sparql-results+json"), ("csv", "text/csv"),
                                       ("tsv", "text/tab-separated-values"), ("xml", "application/sparql-results+xml")])
def test_format_parameter(srv, fmt, ctype):
    r = requests.get(srv.url + "/sparql", params={"query": NAMES, "format": fmt}, headers={"Accept": "text/html"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith(ctype)
    r = requests.get(srv.url + "/sparql", params={"query": "CONSTRUCT WHERE { ?s ?p ?o }", "output": "nt"})
    assert r.headers["Content-Type"].startswith("application/n-triples")
    graph_type = {"json": "application/ld+json", "xml": "application/rdf+xml"}.get(fmt)
    r = requests.get(srv.url + "/sparql", params={"query": "CONSTRUCT WHERE { ?s ?p ?o }", "format": fmt})
    if graph_type:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(graph_type)
    else:
        assert r.status_code == 406
    # unknown values are a 400 naming the accepted ones (never a silent fallback)
    r = requests.get(srv.url + "/sparql", params={"query": NAMES, "format": "bogus"})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert "csv" in r.json()["available"] and "turtle" in r.json()["detail"]


def test_write_resets_inline_costs(srv):
    state = srv.app.state.jindou
    requests.get(srv.url + "/sparql", params={"query": NAMES})
    assert state.shape_cost
    r = requests.post(srv.url + "/update", data=f"INSERT DATA {{ <{EX}z> <{EX}name> \"Zed\" }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    assert not state.shape_cost


@pytest.mark.parametrize("name,value", [
    ("default-graph-uri", "not an iri"), ("named-graph-uri", ""), ("default-graph-uri", "relative/path"),
    ("named-graph-uri", "http://ex.org/a>b"), ("default-graph-uri", "http://ex.org/" + "x" * 5000),
])
def test_dataset_parameters_must_be_absolute_iris(srv, name, value):
    r = requests.get(f"{srv.url}/sparql", params={"query": "ASK {}", name: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request" and name in r.json()["detail"]
    assert len(r.text) < 1000  # a huge value is not echoed back


@pytest.mark.parametrize("name", ["using-graph-uri", "using-named-graph-uri"])
def test_update_dataset_parameters_must_be_absolute_iris(srv, name):
    r = requests.post(f"{srv.url}/update", params={name: "bad iri"}, data=f"INSERT DATA {{ <{EX}x> <{EX}p> 1 }}",
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 400, r.text
    assert name in r.json()["detail"]
    # nothing was applied
    ask = requests.get(f"{srv.url}/sparql", params={"query": f"ASK {{ <{EX}x> <{EX}p> 1 }}"},
                       headers={"Accept": "application/sparql-results+json"})
    assert ask.json()["boolean"] is False


def test_cors_with_a_configured_origin(make_server):
    """``--cors-origin`` names one origin: sent to requests with Origin, Vary names Origin
    on every answer (preflights included, as before), one Vary line on SPARQL results."""
    s = make_server(cors_origin="https://app.example")
    hdr = {"Origin": "https://app.example"}
    for kw in ({"params": {"query": "ASK {}"}}, {"data": {"query": "ASK {}"}}):
        method = "GET" if "params" in kw else "POST"
        r = requests.request(method, s.url + "/sparql", headers=hdr, **kw)
        assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert _vary(r) == {"accept", "origin"}
        r = requests.request(method, s.url + "/sparql", **kw)
        assert "Access-Control-Allow-Origin" not in r.headers and _vary(r) == {"accept", "origin"}
    r = requests.options(s.url + "/sparql", headers={**hdr, "Access-Control-Request-Method": "POST"})
    assert r.status_code == 204 and r.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert _vary(r) == {"origin"}
