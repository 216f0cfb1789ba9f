"""Graph Store HTTP Protocol at /store against the real server."""

from __future__ import annotations

from urllib.parse import quote

import pytest
import rdflib
import requests
from rdflib.compare import isomorphic

EX = "http://ex.org/"
NT = {"Content-Type": "application/n-triples"}
TTL = {"Content-Type": "text/turtle"}


def gurl(base: str, graph: str | None) -> str:
    return base + "/store?default" if graph is None else base + "/store?graph=" + quote(graph, safe="")


def get_graph(base: str, graph: str | None, accept: str = "application/n-triples", fmt: str = "nt") -> rdflib.Graph:
    r = requests.get(gurl(base, graph), headers={"Accept": accept})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith(accept)
    return rdflib.Graph().parse(data=r.content, format=fmt)


def test_named_graph_lifecycle(clean_server):
    u = clean_server.url
    g = EX + "graph1"
    assert requests.get(gurl(u, g)).status_code == 404
    r = requests.put(gurl(u, g), data=f"<{EX}a> <{EX}p> <{EX}b> .\n".encode(), headers=NT)
    assert r.status_code == 201
    r = requests.put(gurl(u, g), data=f"<{EX}a> <{EX}p> <{EX}c> .\n".encode(), headers=NT)
    assert r.status_code == 204
    assert len(get_graph(u, g)) == 1  # PUT replaced
    r = requests.post(gurl(u, g), data=f"@prefix ex: <{EX}> . ex:a ex:p ex:d, ex:e .".encode(), headers=TTL)
    assert r.status_code == 204
    gr = get_graph(u, g)
    assert len(gr) == 3
    for accept, fmt in (("text/turtle", "turtle"), ("application/rdf+xml", "xml"), ("application/ld+json", "json-ld")):
        assert isomorphic(get_graph(u, g, accept, fmt), gr)
    r = requests.get(gurl(u, g), headers={"Accept": "application/n-quads"})
    assert r.status_code == 200 and f"<{g}> ." in r.text
    r = requests.head(gurl(u, g))
    assert r.status_code == 200 and r.content == b"" and r.headers["Content-Type"].startswith("text/turtle")
    assert requests.delete(gurl(u, g)).status_code == 204
    assert requests.get(gurl(u, g)).status_code == 404
    assert requests.head(gurl(u, g)).status_code == 404
    r = requests.delete(gurl(u, g))
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_post_creates(clean_server):
    u = clean_server.url
    g = EX + "new"
    r = requests.post(gurl(u, g), data=f"<{EX}a> <{EX}p> <{EX}b> .\n".encode(), headers=NT)
    assert r.status_code == 201
    r = requests.get(u + "/sparql", params={"query": f"ASK {{ GRAPH <{g}> {{ <{EX}a> <{EX}p> <{EX}b> }} }}"})
    assert r.json()["boolean"] is True


def test_default_graph(clean_server):
    u = clean_server.url
    assert len(get_graph(u, None)) == 0
    r = requests.put(gurl(u, None), data=f"<{EX}a> <{EX}p> <{EX}b> .\n".encode(), headers=NT)
    assert r.status_code == 204
    r = requests.post(gurl(u, None), data=f"<{EX}a> <{EX}p> <{EX}c> .\n".encode(), headers=NT)
    assert r.status_code == 204
    assert len(get_graph(u, None)) == 2
    assert requests.delete(gurl(u, None)).status_code == 204
    assert len(get_graph(u, None)) == 0


def test_relative_iris_resolve_against_graph(clean_server):
    u = clean_server.url
    g = EX + "base/graph"
    r = requests.put(gurl(u, g), data=b"<s> <p> <o> .", headers=TTL)
    assert r.status_code == 201
    gr = get_graph(u, g)
    assert (rdflib.URIRef(EX + "base/s"), rdflib.URIRef(EX + "base/p"), rdflib.URIRef(EX + "base/o")) in gr


def test_dataset_post(clean_server):
    u = clean_server.url
    nq = f"<{EX}a> <{EX}p> <{EX}b> <{EX}gq> .\n<{EX}a> <{EX}p> <{EX}c> .\n".encode()
    r = requests.post(u + "/store", data=nq, headers={"Content-Type": "application/n-quads"})
    assert r.status_code == 200, r.text
    assert len(get_graph(u, EX + "gq")) == 1
    assert len(get_graph(u, None)) == 1


@pytest.mark.parametrize("method,query,kwargs,status", [
    ("GET", "default&graph=http%3A%2F%2Fex.org%2Fg", {}, 400),
    ("GET", "graph=a&graph=b", {}, 400),
    ("GET", "graph=not%20an%20iri", {}, 400),
    ("GET", "default", {"headers": {"Accept": "text/csv"}}, 406),
    ("PUT", "default", {"data": b"<a> <b> <c> ."}, 415),
    ("PUT", "default", {"data": b"x", "headers": {"Content-Type": "image/png"}}, 415),
    ("PUT", "default", {"data": b"<http://a> <http://b> .", "headers": NT}, 400),
    ("POST", "graph=http%3A%2F%2Fex.org%2Fg", {"data": b"@prefix : <x> . :a :b", "headers": TTL}, 400),
    ("PATCH", "default", {"data": b"", "headers": NT}, 405),
])
def test_store_errors(clean_server, method, query, kwargs, status):
    kwargs = {**kwargs, "headers": {**kwargs.get("headers", {}), "Origin": "http://app.example"}}  # CORS headers with Origin
    r = requests.request(method, clean_server.url + "/store?" + query, **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "error" in r.json()
    if status == 400 and method in ("PUT", "POST"):
        # a failed write stores nothing
        assert requests.get(clean_server.url + "/store?graph=http%3A%2F%2Fex.org%2Fg").status_code == 404


# ------------------------------------------------------------------ no fetching, no entity expansion
LD = {"Content-Type": "application/ld+json"}
XML = {"Content-Type": "application/rdf+xml"}


def _ld_bodies(url: str) -> list[bytes]:
    import json

    node = {"@id": EX + "a", "name": "A"}
    return [json.dumps(d).encode() for d in (
        {"@context": url + "/ctx.jsonld", **node},
        {"@context": [{"x": EX + "x"}, url + "/b"], **node},
        {"@context": {"@version": 1.1, "@import": url + "/i"}, **node},
        {"@context": {"@version": 1.1, "k": {"@id": EX + "k", "@context": url + "/n"}}, "@id": EX + "a",
         "k": {"@id": EX + "b", "name": "B"}},
        {"@graph": [{"@context": url + "/g", **node}]},
        {"@context": "/ctx.jsonld", **node},  # relative: against the server's own address
    )]


def test_remote_jsonld_context_is_a_400_and_nothing_is_contacted(clean_server, listener):
    u = clean_server.url
    for body in _ld_bodies(listener.url):
        for method, url in (("PUT", gurl(u, EX + "g")), ("POST", gurl(u, None)), ("POST", u + "/store")):
            r = requests.request(method, url, data=body, headers=LD, timeout=30)
            assert r.status_code == 400, (method, url, body, r.text)
            doc = r.json()
            assert doc["error"] == "load" and "--allow-load" in doc["detail"] and "context" in doc["detail"]
    assert listener.hits == []
    assert requests.get(gurl(u, EX + "g")).status_code == 404  # nothing changed


def test_allow_load_fetches_contexts_and_hides_fetch_errors(make_server, listener):
    from tests.support.http_listener import closed_port

    s = make_server(allow_load=True)
    body = _ld_bodies(listener.url)[0]
    r = requests.put(gurl(s.url, EX + "g"), data=body, headers=LD, timeout=30)
    assert r.status_code == 201, r.text
    assert listener.hits == ["/ctx.jsonld"]
    r = requests.get(s.url + "/sparql", params={"query": f"ASK {{ GRAPH <{EX}g> {{ <{EX}a> <{EX}name> 'A' }} }}"})
    assert r.json()["boolean"] is True
    dead = f"http://127.0.0.1:{closed_port()}/ctx"
    r = requests.put(gurl(s.url, EX + "h"), data=body.replace(listener.url.encode() + b"/ctx.jsonld", dead.encode()),
                     headers=LD, timeout=30)
    assert r.status_code == 400
    assert r.json()["detail"] == f"could not load context <{dead}>"  # no errno, no "refused": not a port scanner


def test_rdfxml_entity_bombs_are_fast_400s(clean_server, listener):
    import time

    u = clean_server.url
    head = b'<?xml version="1.0"?><!DOCTYPE rdf:RDF ['
    doc = (b']><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://ex.org/">'
           b'<rdf:Description rdf:about="http://ex.org/a"><ex:p>%s</ex:p></rdf:Description></rdf:RDF>')
    laughs = b'<!ENTITY l0 "lol">' + b"".join(b'<!ENTITY l%d "%s">' % (i, (b"&l%d;" % (i - 1)) * 10)
                                              for i in range(1, 10))
    bodies = [
        head + laughs + doc % b"&l9;",                                              # billion laughs
        head + b'<!ENTITY big "' + b"x" * 50_000 + b'">' + doc % (b"&big;" * 5_000),  # quadratic blow-up
        head + b'<!ENTITY e SYSTEM "' + listener.url.encode() + b'/e">' + doc % b"&e;",  # external entity
    ]
    for body in bodies:
        t0 = time.monotonic()
        r = requests.put(gurl(u, EX + "x"), data=body, headers=XML, timeout=60)
        assert r.status_code == 400 and "DTD refused" in r.json()["detail"], r.text
        assert time.monotonic() - t0 < 10  # milliseconds in practice (was about a minute)
    assert listener.hits == []
    assert requests.get(gurl(u, EX + "x")).status_code == 404


# ------------------------------------------------------------------ graph creation, multipart, whole dataset
def _multipart(*parts: tuple[str, str | None, bytes], boundary: str = "b0undary7") -> tuple[bytes, dict]:
    """A multipart/form-data body of (file name, Content-Type or None, data) parts."""
    out = b""
    for filename, ctype, data in parts:
        out += f"--{boundary}\r\n".encode()
        out += f'Content-Disposition: form-data; name="file"; filename="{filename}"\r\n'.encode()
        if ctype is not None:
            out += f"Content-Type: {ctype}\r\n".encode()
        out += b"\r\n" + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return out, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def test_post_without_graph_creates_a_new_graph(clean_server):
    u = clean_server.url
    r = requests.post(u + "/store", data=b"<s> <http://ex.org/p> [ <http://ex.org/q> 1 ] .", headers=TTL)
    assert r.status_code == 201, r.text
    loc = r.headers["Location"]
    assert loc.startswith(u + "/store/graphs/")
    gr = get_graph(u, loc)
    assert len(gr) == 2
    assert (rdflib.URIRef(u + "/store/s"), rdflib.URIRef(EX + "p"), None) not in gr  # base = the new graph
    assert (rdflib.URIRef(loc.rsplit("/", 1)[0] + "/s"), rdflib.URIRef(EX + "p"), None) in gr
    r2 = requests.post(u + "/store", data=f"<{EX}a> <{EX}p> <{EX}b> .".encode(), headers=NT)
    assert r2.status_code == 201 and r2.headers["Location"] != loc  # a fresh IRI each time
    assert len(get_graph(u, None)) == 0  # nothing went to the default graph


def test_multipart_upload_by_type_and_extension(clean_server):
    u = clean_server.url
    body, h = _multipart(("a.ttl", "text/turtle; charset=utf-8", f"<{EX}a> <{EX}p> 1 .".encode()),
                         ("b.nt", "application/octet-stream", f"<{EX}a> <{EX}p> <{EX}b> .\n".encode()),
                         ("c.rdf", None, (f'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
                                          f'xmlns:ex="{EX}"><rdf:Description rdf:about="{EX}c"><ex:p>x</ex:p>'
                                          f'</rdf:Description></rdf:RDF>').encode()),
                         ("d.jsonld", "application/ld+json", f'{{"@id": "{EX}d", "{EX}p": "y"}}'.encode()))
    g = EX + "up"
    r = requests.post(gurl(u, g), data=body, headers=h)
    assert r.status_code == 201, r.text
    assert len(get_graph(u, g)) == 4
    r = requests.put(gurl(u, g), data=_multipart(("x.nt", "text/plain", f'<{EX}x> <{EX}p> "1" .\n'.encode()))[0],
                     headers=h)
    assert r.status_code == 204 and len(get_graph(u, g)) == 1  # PUT replaced by the parts
    # a multipart dataset upload without a graph: quads keep their graphs
    body, h = _multipart(("q.nq", None, f"<{EX}a> <{EX}p> <{EX}b> <{EX}gq> .\n".encode()),
                         ("t.trig", None, f"<{EX}gt> {{ <{EX}a> <{EX}p> 2 }}".encode()))
    r = requests.post(u + "/store", data=body, headers=h)
    assert r.status_code == 200, r.text
    assert len(get_graph(u, EX + "gq")) == 1 and len(get_graph(u, EX + "gt")) == 1


@pytest.mark.parametrize("parts,status,word", [
    ([("a.ttl", "text/turtle", b"<http://ex.org/a> <http://ex.org/p> 1 ."),
      ("b.ttl", "text/turtle", b"@prefix : <x> . :a :b")], 400, "b.ttl"),     # a bad part: nothing stored
    ([("a.png", "image/png", b"x")], 415, "a.png"),
    ([("a.bin", None, b"x")], 415, "a.bin"),
    ([("a.ttl", "text/turtle; charset=latin-1", b"<http://ex.org/a> <http://ex.org/p> 1 .")], 415, "charset"),
])
def test_multipart_errors_store_nothing(clean_server, parts, status, word):
    u = clean_server.url
    body, h = _multipart(*parts)
    r = requests.post(gurl(u, EX + "g"), data=body, headers=h)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json" and word in r.text
    assert requests.get(gurl(u, EX + "g")).status_code == 404


def test_multipart_malformed_or_empty(clean_server):
    u = clean_server.url
    r = requests.post(gurl(u, EX + "g"), data=b"no parts here",
                      headers={"Content-Type": "multipart/form-data; boundary=zz"})
    assert r.status_code == 400 and "error" in r.json()
    r = requests.post(gurl(u, EX + "g"), data=b"x", headers={"Content-Type": "multipart/form-data"})
    assert r.status_code == 400 and "boundary" in r.json()["detail"]


def test_get_whole_dataset_as_nquads_and_trig(clean_server):
    import pyoxigraph as ox

    u = clean_server.url
    requests.put(gurl(u, None), data=f'<{EX}a> <{EX}p> "d"@en .\n'.encode(), headers=NT)
    requests.put(gurl(u, EX + "g1"), data=f"<{EX}a> <{EX}p> [ <{EX}q> 1 ] .".encode(), headers=TTL)
    requests.put(gurl(u, EX + "g2"), data=f'<{EX}b> <{EX}p> "x\\ny" .'.encode(), headers=TTL)
    r = requests.get(u + "/store", headers={"Accept": "application/n-quads"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/n-quads")
    want = ox.Dataset(ox.parse(r.content, ox.RdfFormat.N_QUADS))
    assert len(want) == 4 and {str(q.graph_name) for q in want} == {"DEFAULT", f"<{EX}g1>", f"<{EX}g2>"}
    for accept in (None, "application/trig", "*/*"):
        r = requests.get(u + "/store", headers={} if accept is None else {"Accept": accept})
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/trig"), accept
        got = ox.Dataset(ox.parse(r.content, ox.RdfFormat.TRIG))
        got.canonicalize(ox.CanonicalizationAlgorithm.UNSTABLE)
        want.canonicalize(ox.CanonicalizationAlgorithm.UNSTABLE)
        assert got == want
    r = requests.get(u + "/store", headers={"Accept": "text/turtle"})
    assert r.status_code == 406 and r.json()["available"] == ["application/trig", "application/n-quads"]
    r = requests.head(u + "/store")
    assert r.status_code == 200 and r.content == b"" and int(r.headers["Content-Length"]) > 0


def test_trig_of_one_graph(clean_server):
    u = clean_server.url
    g = EX + "tg"
    requests.put(gurl(u, g), data=f"<{EX}a> <{EX}p> <{EX}b> .".encode(), headers=TTL)
    r = requests.get(gurl(u, g), headers={"Accept": "application/trig"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/trig")
    ds = rdflib.Dataset()
    ds.parse(data=r.content, format="trig")
    assert [str(c.identifier) for c in ds.graphs() if len(c)] == [g]


def test_dataset_and_multipart_on_a_cluster(cluster_server):
    """The same GSP paths on a 3-worker store (graph creation, multipart, whole dataset)."""
    u = cluster_server.url
    cluster_server.reset()
    body, h = _multipart(("a.ttl", None, f"<{EX}a> <{EX}p> 1 .".encode()),
                         ("q.nq", None, f"<{EX}a> <{EX}p> <{EX}b> <{EX}gq> .\n".encode()))
    r = requests.post(u + "/store", data=body, headers=h)
    assert r.status_code == 201, r.text
    loc = r.headers["Location"]
    r = requests.get(u + "/store", headers={"Accept": "application/n-quads"})
    assert r.status_code == 200
    lines = sorted(r.text.splitlines())
    assert lines == sorted([f'<{EX}a> <{EX}p> "1"^^<http://www.w3.org/2001/XMLSchema#integer> <{loc}> .',
                            f"<{EX}a> <{EX}p> <{EX}b> <{EX}gq> ."])


def test_large_multipart_upload(clean_server):
    u = clean_server.url
    nt = "".join(f'<{EX}s{i}> <{EX}p> "value {i}" .\n' for i in range(5000)).encode()
    body, h = _multipart(("big.nt", "application/n-triples", nt), ("small.ttl", None, f"<{EX}a> <{EX}p> 1 .".encode()))
    assert len(body) > 1 << 16
    r = requests.post(gurl(u, EX + "big"), data=body, headers=h)
    assert r.status_code == 201, r.text
    assert len(get_graph(u, EX + "big")) == 5001


def test_created_graph_answers_at_its_own_iri(clean_server):
    u = clean_server.url
    r = requests.post(u + "/store", data=f"<{EX}a> <{EX}p> <{EX}b> .".encode(), headers=TTL)
    loc = r.headers["Location"]
    r = requests.get(loc, headers={"Accept": "application/n-triples"})
    assert r.status_code == 200 and r.text == f"<{EX}a> <{EX}p> <{EX}b> .\n"
    assert requests.post(loc, data=f"<{EX}a> <{EX}p> <{EX}c> .".encode(), headers=TTL).status_code == 204
    assert len(get_graph(u, loc)) == 2
    assert requests.head(loc).status_code == 200
    assert requests.get(loc + "?default").status_code == 400
    assert requests.delete(loc).status_code == 204
    assert requests.get(loc).status_code == 404
    assert requests.get(gurl(u, loc)).status_code == 404
