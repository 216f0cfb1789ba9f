"""/sparql with explain=true|analyze against the real server: the plan as JSON,
actual rows equal to the result sizes, bad values are a 400, results unchanged."""

from __future__ import annotations

import pytest
import requests

EX = "http://ex.org/"
DATA = "".join(
    f"<{EX}s{i}> <{EX}p> <{EX}o{i % 4}> .\n<{EX}s{i}> <{EX}n> \"{i}\"^^<http://www.w3.org/2001/XMLSchema#integer> .\n"
    + (f"<{EX}s{i}> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{EX}T> .\n" if i % 3 == 0 else "")
    for i in range(30)
)
P = f"PREFIX : <{EX}> "
QUERIES = [
    "SELECT ?s WHERE { ?s a :T . ?s :p :o0 }",
    "SELECT ?s ?v WHERE { ?s :p ?o OPTIONAL { ?s a ?t } ?s :n ?v FILTER(?v > 3) }",
    "SELECT ?o (COUNT(*) AS ?c) WHERE { ?s :p ?o } GROUP BY ?o",
    "SELECT ?x WHERE { { ?x a :T } UNION { ?x :p :o1 } }",
    "SELECT ?y WHERE { :s1 :p/^:p ?y }",
    "ASK { ?s a :T }",
]


@pytest.fixture
def srv(clean_server):
    r = requests.put(f"{clean_server.url}/store?default", data=DATA.encode(),
                     headers={"Content-Type": "application/n-triples"})
    assert r.status_code in (201, 204), r.text
    return clean_server


def walk(node):
    yield node
    for c in node.get("children", ()):
        yield from walk(c)


def results(u, q):
    r = requests.get(u, params={"query": q})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("q", QUERIES)
def test_explain_get_and_post(srv, q):
    u = srv.url + "/sparql"
    before = results(u, P + q)
    r = requests.get(u, params={"query": P + q, "explain": "true"})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    doc = r.json()
    assert doc["analyze"] is False and "result" not in doc
    assert doc["path"] in ("fast", "general") and doc["plan"]["operator"]
    assert all("actual_rows" not in n for n in walk(doc["plan"]))
    # POST: sparql-query body with explain in the URL, and a form
    r2 = requests.post(u, params={"explain": "analyze"}, data=(P + q).encode(),
                       headers={"Content-Type": "application/sparql-query"})
    r3 = requests.post(u, data={"query": P + q, "explain": "analyze"})
    for resp in (r2, r3):
        assert resp.status_code == 200, resp.text
        d = resp.json()
        assert d["analyze"] is True
        if "boolean" in before:
            assert d["result"] == {"boolean": before["boolean"]}
        else:
            n = len(before["results"]["bindings"])
            assert d["result"] == {"rows": n}
            if d["path"] == "general":
                assert d["plan"]["actual_rows"] == n
            else:
                assert d["plan"]["operator"] == "FastSelect" and d["plan"]["actual_rows"] == n
    assert results(u, P + q) == before  # explain changed nothing


def test_explain_ignores_accept(srv):
    r = requests.get(srv.url + "/sparql", params={"query": P + QUERIES[0], "explain": "true"},
                     headers={"Accept": "text/csv"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    r = requests.get(srv.url + "/sparql", params={"query": P + QUERIES[0], "explain": "false"},
                     headers={"Accept": "text/csv"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")


@pytest.mark.parametrize("value", ["yes", "1", "", "analyse", "true,analyze"])
def test_bad_explain_value_is_400(srv, value):
    r = requests.get(srv.url + "/sparql", params={"query": P + QUERIES[0], "explain": value})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request" and "explain" in r.json()["detail"]


def test_explain_twice_is_400_and_syntax_error_is_400(srv):
    u = srv.url + "/sparql"
    r = requests.get(u, params=[("query", P + QUERIES[0]), ("explain", "true"), ("explain", "analyze")])
    assert r.status_code == 400
    r = requests.get(u, params={"query": "SELECT WHERE {", "explain": "true"})
    assert r.status_code == 400 and r.json()["error"] == "syntax"


def test_explain_with_dataset_parameters(srv):
    r = requests.get(srv.url + "/sparql", params={"query": P + QUERIES[0], "explain": "analyze",
                                                  "default-graph-uri": "urn:jindou:default"})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["path"] == "general" and d["result"] == {"rows": 3}
