"""SERVICE (federated query) against a second real Jindou server on 127.0.0.1.

Answers are checked against pyoxigraph evaluating the same query over the same
data, with the remote endpoint's data in a named graph and ``SERVICE <e>``
read as ``GRAPH <urn:remote>`` (the two mean the same here: the remote answers
its default graph). Off by default (400 naming the option), the allow-list,
SILENT, remote failures, redirects and the query deadline are checked too.
"""

from __future__ import annotations

import http.server
import threading
import time

import pytest
import requests

EX = "http://ex.org/"
P = f"PREFIX ex: <{EX}>\n"
LOCAL = "".join(f"<{EX}p{i}> <{EX}knows> <{EX}p{(i * 7) % 20}> .\n" for i in range(20)) + \
    f'<{EX}p2> <{EX}label> "two"@en .\n'
REMOTE = "".join(f'<{EX}p{i}> <{EX}name> "Person {i}" .\n' for i in range(0, 20, 2)) + \
    "".join(f'<{EX}p{i}> <{EX}age> "{20 + i}"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'
            for i in range(0, 20, 3))
REMOTE_GRAPH = "urn:remote"

QUERIES = [
    "SELECT ?s ?o ?name WHERE { ?s ex:knows ?o . SERVICE <{E}> { ?o ex:name ?name } }",
    "SELECT ?s ?name ?age WHERE { ?s ex:knows ?o . OPTIONAL { SERVICE <{E}> { ?o ex:name ?name . "
    "OPTIONAL { ?o ex:age ?age } } } }",
    "SELECT ?p ?age WHERE { SERVICE <{E}> { ?p ex:age ?age FILTER(?age > 30) } }",
    "SELECT (COUNT(*) AS ?n) WHERE { SERVICE <{E}> { ?p ?q ?v } }",
    "SELECT ?s ?n WHERE { SERVICE <{E}> { SELECT ?s (COUNT(?v) AS ?n) WHERE { ?s ?q ?v } GROUP BY ?s } "
    "?s ex:knows ?x }",
    "SELECT ?s WHERE { ?s ex:label ?l . SERVICE SILENT <{E}> { ?s ex:name ?nm } }",
]


def _put(url: str, data: str) -> None:
    r = requests.put(url + "/store?default", data=data.encode(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code in (201, 204), r.text


def _rows(doc: dict) -> list[tuple]:
    vs = doc["head"]["vars"]
    out = []
    for b in doc["results"]["bindings"]:
        out.append(tuple(None if v not in b else (b[v]["type"].replace("typed-literal", "literal"), b[v]["value"],
                                                  b[v].get("datatype"), b[v].get("xml:lang")) for v in vs))
    return sorted(out, key=repr)


def _oracle(query: str) -> list[tuple]:
    import pyoxigraph as ox

    st = ox.Store()
    st.load(LOCAL.encode(), ox.RdfFormat.N_TRIPLES)
    st.load(REMOTE.encode(), ox.RdfFormat.N_TRIPLES, to_graph=ox.NamedNode(REMOTE_GRAPH))
    res = st.query(P + query.replace("SERVICE SILENT <{E}>", "GRAPH <urn:remote>")
                   .replace("SERVICE <{E}>", "GRAPH <urn:remote>"))
    import json

    return _rows(json.loads(res.serialize(format=ox.QueryResultsFormat.JSON)))


@pytest.fixture
def pair(make_server):
    remote = make_server()
    _put(remote.url, REMOTE)
    local = make_server(allow_service=True, service_endpoints=[remote.url + "/sparql"], query_timeout=10)
    _put(local.url, LOCAL)
    return local, remote


def _query(url: str, q: str, **kw) -> requests.Response:
    return requests.post(url + "/sparql", data={"query": q}, headers={"Accept": "application/sparql-results+json"},
                         timeout=60, **kw)


@pytest.mark.parametrize("q", QUERIES)
def test_service_answers_match_pyoxigraph(pair, q):
    local, remote = pair
    r = _query(local.url, P + q.replace("{E}", remote.url + "/sparql"))
    assert r.status_code == 200, r.text
    got = _rows(r.json())
    assert got == _oracle(q)
    assert got  # every query has answers


def test_service_is_off_by_default(clean_server):
    r = _query(clean_server.url, P + "SELECT * WHERE { SERVICE <http://127.0.0.1:9/sparql> { ?s ?p ?o } }")
    assert r.status_code == 400 and "--allow-service" in r.json()["detail"]
    # SILENT: the refusal is ignored, the unit solution joins
    r = _query(clean_server.url, P + "SELECT * WHERE { SERVICE SILENT <http://127.0.0.1:9/sparql> { ?s ?p ?o } }")
    assert r.status_code == 200 and len(r.json()["results"]["bindings"]) == 1


def test_allow_list_prefixes_and_refusals(make_server):
    from tests.support.http_listener import Listener

    li = Listener()
    try:
        s = make_server(allow_service=True, service_endpoints=["http://127.0.0.1:1/only", "https://svc.example/*"])
        for e in (li.url + "/sparql", "http://127.0.0.1:1/only/more", "file:///etc/passwd"):
            r = _query(s.url, f"SELECT * WHERE {{ SERVICE <{e}> {{ ?s ?p ?o }} }}")
            assert r.status_code == 400 and "--service-endpoints" in r.json()["detail"], r.text
        r = _query(s.url, "SELECT * WHERE { SERVICE ?e { ?s ?p ?o } }")
        assert r.status_code == 400 and "variable endpoint" in r.json()["detail"]
        assert li.hits == []  # nothing refused was contacted
    finally:
        li.close()


class _Fake:
    """A misbehaving endpoint: slow, redirecting, or answering HTML."""

    def __init__(self, mode: str):
        hits = self.hits = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                hits.append(self.path)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if mode == "slow":
                    time.sleep(3)
                if mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b"<html>hi</html>" if mode == "html" else b'{"head":{"vars":["s"]},"results":{"bindings":[]}}'
                self.send_response(500 if mode == "error" else 200)
                self.send_header("Content-Type", "text/html" if mode == "html" else "application/sparql-results+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/sparql"
        self.t = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.t.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.t.join(timeout=5)


@pytest.mark.parametrize("mode,status,word", [
    ("error", 400, "HTTP 500"),
    ("html", 400, "not SPARQL JSON"),
    ("redirect", 400, "redirect"),
    ("slow", 503, "timeout"),
    ("closed", 400, "could not be reached"),
])
def test_remote_failures(make_server, mode, status, word):
    from tests.support.http_listener import closed_port

    fake = None if mode == "closed" else _Fake(mode)
    try:
        url = f"http://127.0.0.1:{closed_port()}/sparql" if fake is None else fake.url
        s = make_server(allow_service=True, service_endpoints=[url], query_timeout=1)
        t0 = time.monotonic()
        r = _query(s.url, f"SELECT * WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}")
        assert r.status_code == status and word in r.text, r.text
        assert time.monotonic() - t0 < 2.5  # the deadline bounds the call, not the remote
        if mode != "slow":
            r = _query(s.url, f"SELECT * WHERE {{ SERVICE SILENT <{url}> {{ ?s ?p ?o }} }}")
            assert r.status_code == 200 and len(r.json()["results"]["bindings"]) == 1, r.text
    finally:
        if fake is not None:
            fake.close()


def test_row_budget_counts_remote_rows(make_server):
    remote = make_server()
    _put(remote.url, REMOTE)
    s = make_server(allow_service=True, service_endpoints=[remote.url + "/*"], max_rows=5)
    r = _query(s.url, f"SELECT * WHERE {{ SERVICE <{remote.url}/sparql> {{ ?s ?p ?o }} }}")
    assert r.status_code == 422 and "row" in r.json()["error"], r.text   # a budget: not retryable
    assert "retry-after" not in r.headers


def test_remote_blank_nodes_are_not_the_stores(make_server):
    remote = make_server()
    _put(remote.url, f"_:b0 <{EX}p> 1 .\n".replace("1", '"1"'))
    s = make_server(allow_service=True, service_endpoints=[remote.url + "/sparql"])
    _put(s.url, f'_:b0 <{EX}p> "local" .\n')
    r = _query(s.url, f"SELECT ?x ?v WHERE {{ SERVICE <{remote.url}/sparql> {{ ?x <{EX}p> ?o }} ?x <{EX}p> ?v }}")
    assert r.status_code == 200 and r.json()["results"]["bindings"] == []



def test_service_in_an_update_is_refused_clearly(pair):
    local, remote = pair
    r = requests.post(local.url + "/update", data=f"INSERT {{ ?o <{EX}copied> ?n }} WHERE {{ SERVICE <{remote.url}/sparql> "
                      f"{{ ?o <{EX}name> ?n }} }}", headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 400 and "one-shot queries only" in r.json()["detail"], r.text
