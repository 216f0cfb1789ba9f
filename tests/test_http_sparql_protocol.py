"""/sparql protocol behaviour users of Fuseki, Oxigraph and QLever expect, against
a real server on 127.0.0.1: updates accepted at /sparql (same token rules as
/update), canonical media types, text/plain, ?format= errors and TriG, and the
budget refusal's own non-retryable status."""

from __future__ import annotations

import pytest
import requests

from engine import formats as F

EX = "http://ex.org/"
COUNT = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{EX}p> ?o }}"


def _count(url: str, **kw) -> int:
    r = requests.get(url + "/sparql", params={"query": COUNT}, **kw)
    assert r.status_code == 200, r.text
    return int(r.json()["results"]["bindings"][0]["n"]["value"])


def test_updates_at_sparql_body_and_form(make_server):
    s = make_server()
    u = s.url + "/sparql"
    r = requests.post(u, data=f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204, r.text
    r = requests.post(u, data={"update": f"INSERT DATA {{ <{EX}b> <{EX}p> 2 }}"})
    assert r.status_code == 204, r.text
    assert _count(s.url) == 2
    # using-graph-uri works as at /update
    r = requests.post(u, data={"update": f"INSERT DATA {{ GRAPH <{EX}g> {{ <{EX}c> <{EX}p> 3 }} }}"})
    assert r.status_code == 204
    r = requests.post(u, data={"update": f"DELETE {{ ?s <{EX}p> ?o }} WHERE {{ ?s <{EX}p> ?o }}",
                               "using-graph-uri": EX + "g"})
    assert r.status_code == 204, r.text
    assert _count(s.url) == 2  # only the graph's triple matched (and the default graph has no copy of it)
    # a syntax error is the same 400 as at /update; GET never updates
    r = requests.post(u, data=b"INSERT DATA { <a> ", headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 400 and r.json()["error"] == "syntax"
    r = requests.get(u, params={"update": "CLEAR ALL"})
    assert r.status_code == 400 and "POST" in r.json()["detail"]
    assert _count(s.url) == 2


def test_updates_at_sparql_follow_the_token_rules(make_server):
    s = make_server(token="w", read_token="r")
    u = s.url + "/sparql"
    ins = f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}".encode()
    ct = {"Content-Type": "application/sparql-update"}
    assert requests.post(u, data=ins, headers=ct).status_code == 401
    r = requests.post(u, data=ins, headers={**ct, "Authorization": "Bearer r"})  # the read token cannot write
    assert r.status_code == 403
    r = requests.post(u, data={"update": ins.decode()}, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 403
    assert _count(s.url, headers={"Authorization": "Bearer r"}) == 0
    r = requests.post(u, data=ins, headers={**ct, "Authorization": "Bearer w"})
    assert r.status_code == 204
    r = requests.post(u, data={"update": f"INSERT DATA {{ <{EX}b> <{EX}p> 2 }}"}, headers={"Authorization": "Bearer w"})
    assert r.status_code == 204
    assert _count(s.url, headers={"Authorization": "Bearer r"}) == 2


def test_service_description_advertises_update_on_the_endpoint(make_server):
    s = make_server()
    r = requests.get(s.url + "/sparql", headers={"Accept": "application/n-triples"})
    assert r.status_code == 200
    assert f"<{s.url}/sparql> <http://www.w3.org/ns/sparql-service-description#supportedLanguage> " \
           "<http://www.w3.org/ns/sparql-service-description#SPARQL11Update>" in r.text


@pytest.fixture
def data_server(make_server):
    s = make_server()
    body = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n" for i in range(3))
    r = requests.post(s.url + "/store?default", data=body.encode(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 204
    return s


@pytest.mark.parametrize("accept,form,ctype", [
    # a browser: the XML it accepts, under the format's canonical type (not the alias it named)
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "SELECT", F.SPARQL_XML),
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "CONSTRUCT", F.RDFXML),
    ("application/json", "SELECT", F.SPARQL_JSON),
    ("application/json", "CONSTRUCT", F.JSONLD),
    ("text/xml", "ASK", F.SPARQL_XML),
    ("text/plain", "SELECT", "text/plain"),
    ("text/plain", "CONSTRUCT", "text/plain"),
])
def test_negotiation_answers_canonical_types(data_server, accept, form, ctype):
    q = {"SELECT": f"SELECT ?s WHERE {{ ?s <{EX}p> ?o }}", "ASK": "ASK { ?s ?p ?o }",
         "CONSTRUCT": "CONSTRUCT WHERE { ?s ?p ?o }"}[form]
    r = requests.get(data_server.url + "/sparql", params={"query": q}, headers={"Accept": accept})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].split(";")[0] == ctype
    if ctype == "text/plain" and form == "SELECT":  # CSV
        assert r.text.splitlines()[0] == "s" and len(r.text.splitlines()) == 4
    if ctype == "text/plain" and form == "CONSTRUCT":  # N-Triples
        assert sorted(r.text.splitlines()) == [f"<{EX}s{i}> <{EX}p> <{EX}o{i}> ." for i in range(3)]


def test_format_parameter_errors_and_trig(data_server):
    u = data_server.url + "/sparql"
    r = requests.get(u, params={"query": "ASK {}", "format": "yaml"})
    assert r.status_code == 400
    doc = r.json()
    assert doc["error"] == "bad_request" and "yaml" in doc["detail"]
    assert {"json", "xml", "csv", "tsv", "turtle", "nt", "nq", "jsonld"} <= set(doc["available"])
    r = requests.get(u, params={"query": "ASK {}", "output": "bogus"})
    assert r.status_code == 400
    # a media type still works as a format value
    r = requests.get(u, params={"query": "ASK {}", "format": "application/sparql-results+xml"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith(F.SPARQL_XML)
    # format=trig asks for TriG, never Turtle: TriG when the server can write it, else a 406
    r = requests.get(u, params={"query": "CONSTRUCT WHERE { ?s ?p ?o }", "format": "trig"})
    if F.output_format(F.TRIG, F.GRAPH) is not None:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(F.TRIG)
    else:
        assert r.status_code == 406 and r.json()["error"] == "not_acceptable"
        assert "trig" in r.json()["detail"]
    # TriG is a graph format: a SELECT cannot be answered in it
    r = requests.get(u, params={"query": "SELECT * WHERE { ?s ?p ?o }", "format": "trig"})
    assert r.status_code == 406


def test_budget_refusal_is_422_without_retry_after(make_server):
    s = make_server(max_rows=50)
    body = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n" for i in range(30))
    requests.post(s.url + "/store?default", data=body.encode(), headers={"Content-Type": "application/n-triples"})
    r = requests.get(s.url + "/sparql", params={"query": "SELECT * WHERE { ?a ?p ?b . ?c ?q ?d }"})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "row_budget" and "Retry-After" not in r.headers
    # the same refusal at /sparql for an update whose WHERE passes the budget
    r = requests.post(s.url + "/sparql", data={"update": "INSERT { ?a ?p ?d } WHERE { ?a ?p ?b . ?c ?q ?d }"})
    assert r.status_code == 422 and "Retry-After" not in r.headers
