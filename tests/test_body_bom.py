"""A text body saved with a UTF-8 byte order mark (Windows editors write one) is the same
text without it: queries and updates posted to /sparql and /update (the lane's inline paths
and the ordinary ones), forms, REGISTER bodies, ndjson and Turtle stream elements. A mark
anywhere else -- inside a text, twice, in a URL parameter -- is still a syntax error."""

from __future__ import annotations

import urllib.parse

import httpx
import orjson
import pytest

from engine.bom import BOM, strip_bom
from engine.stream.adaptor import parse_graph, parse_ndjson
from tests.pipeline_support import Server

EX = "http://ex.org/"
Q = {"Content-Type": "application/sparql-query"}
U = {"Content-Type": "application/sparql-update"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
NDJSON = {"Content-Type": "application/x-ndjson"}
JSON = {"Accept": "application/sparql-results+json"}


def test_strip_bom_drops_one_leading_mark_only():
    assert strip_bom(BOM + b"SELECT") == b"SELECT"
    assert strip_bom(BOM + BOM + b"x") == BOM + b"x"
    assert strip_bom(b"x" + BOM) == b"x" + BOM
    assert strip_bom(b"") == b"" and strip_bom(b"\xef\xbb") == b"\xef\xbb"
    assert bytes(strip_bom(memoryview(BOM + b"ab"))) == b"ab"


def test_stream_element_parsers_accept_a_leading_bom():
    line = orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"1"', "t": 5})
    for body in (line + b"\n", line + b"\n" + line + b"\n"):
        plain, marked = parse_ndjson(body), parse_ndjson(BOM + body)
        assert marked.errors == [] and len(marked) == len(plain) > 0
        assert marked.s.to_pylist() == plain.s.to_pylist()
    big = b"".join(orjson.dumps({"s": f"<{EX}a{k}>", "p": f"<{EX}p>", "o": f'"{k}"', "t": k}) + b"\n"
                   for k in range(3000))   # (the pyarrow path, past the small-body one)
    assert len(parse_ndjson(BOM + big)) == 3000 and parse_ndjson(BOM + big).errors == []
    # a mark on a later line is that line's error, as any stray character is
    bad = parse_ndjson(line + b"\n" + BOM + line + b"\n")
    assert len(bad) == 1 and [e["line"] for e in bad.errors] == [2]
    ttl = b"@prefix : <http://ex.org/> . :a :p :b .\n"
    assert parse_graph(BOM + ttl, "text/turtle").s.to_pylist() == parse_graph(ttl, "text/turtle").s.to_pylist()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("bom"))
    try:
        yield s
    finally:
        s.stop()


def _n(r: httpx.Response) -> int:
    assert r.status_code == 200, r.text
    return int(r.json()["results"]["bindings"][0]["n"]["value"])


def test_queries_and_updates_with_a_bom(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        r = c.post("/update", content=BOM + f"INSERT DATA {{ <{EX}a> <{EX}p> 1, 2, 3 }}".encode(), headers=U)
        assert r.status_code in (200, 204), r.text
        r = c.post("/sparql", content=BOM + f"INSERT DATA {{ <{EX}b> <{EX}p> 4 }}".encode(), headers=U)
        assert r.status_code in (200, 204), r.text
        r = c.post("/sparql", content=BOM + b"update=" + urllib.parse.quote_plus(
            f"INSERT DATA {{ <{EX}c> <{EX}p> 5 }}".encode()).encode(), headers=FORM)
        assert r.status_code in (200, 204), r.text
        # a mark percent-encoded into the parameter is part of its text (as in a URL): refused
        r = c.post("/sparql", content=b"update=" + urllib.parse.quote_plus(
            BOM + f"INSERT DATA {{ <{EX}c> <{EX}p> 6 }}".encode()).encode(), headers=FORM)
        assert r.status_code == 400, r.text
        for k in range(3):   # new and repeated bodies of one template (the lane's cached paths)
            q = f"SELECT (COUNT(*) AS ?n) WHERE {{ <{EX}a> <{EX}p> ?o FILTER(?o > {k}) }}".encode()
            want = _n(c.post("/sparql", content=q, headers={**Q, **JSON}))
            assert want == 3 - k
            for _ in range(3):
                assert _n(c.post("/sparql", content=BOM + q, headers={**Q, **JSON})) == want
            form = b"query=" + urllib.parse.quote_plus(q).encode()
            assert _n(c.post("/sparql", content=BOM + form, headers={**FORM, **JSON})) == want
        q = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{EX}p> ?o }}".encode()
        assert _n(c.post("/sparql", content=BOM + q, headers={**Q, **JSON})) == 5


@pytest.mark.parametrize("body", [
    b"SELECT * WHERE { ?s ?p ?o " + BOM + b"}",     # inside the text
    BOM + BOM + b"SELECT * WHERE { ?s ?p ?o }",     # a second mark
])
def test_a_bom_anywhere_else_is_still_refused(srv, body):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        r = c.post("/sparql", content=body, headers=Q)
        assert r.status_code == 400, r.text
        r = c.post("/update", content=body.replace(b"SELECT * WHERE", b"DELETE WHERE"), headers=U)
        assert r.status_code == 400, r.text


def test_a_bom_in_a_url_parameter_is_refused(srv):
    q = urllib.parse.quote("\ufeffSELECT * WHERE { ?s ?p ?o }")
    r = httpx.get(srv.url + "/sparql?query=" + q, timeout=30)
    assert r.status_code == 400, r.text


def test_register_and_stream_bodies_with_a_bom(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        # a JSON body (stream registration): RFC 8259 lets a parser ignore a leading BOM
        r = c.put("/streams/bs", content=BOM + orjson.dumps({"iri": EX + "bs"}),
                  headers={"Content-Type": "application/json"})
        assert r.status_code == 201, r.text
        text = (f"PREFIX : <{EX}> REGISTER QUERY bq AS SELECT ?s ?o FROM STREAM :bs [RANGE 10s STEP 1s] "
                "WHERE { ?s :p ?o }")
        r = c.post("/queries", content=BOM + text.encode(), headers=Q)
        assert r.status_code == 201, r.text
        assert r.json()["id"] == "bq"
        line = orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"1"', "t": 1000})
        r = c.post("/streams/bs", content=BOM + line + b"\n", headers=NDJSON)
        assert r.status_code == 202, r.text
        assert r.json()["accepted"] == 1, r.text
        r = c.post("/streams/bs?t=2000", content=BOM + f"<{EX}b> <{EX}p> \"2\" .\n".encode(),
                   headers={"Content-Type": "text/turtle"})
        assert r.status_code == 202, r.text


def test_processes_route_a_marked_update_form_to_the_primary():
    """--processes: the router reads a form body to send updates to the primary; a BOM before
    ``update=`` must not make it look like a query (parse_form drops the mark too)."""
    from server.processes import classify

    def req(body: bytes) -> bytes:
        return (b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    assert classify(req(b"update=INSERT+DATA+%7B%7D")) == "primary"
    assert classify(req(BOM + b"update=INSERT+DATA+%7B%7D")) == "primary"
    assert classify(req(BOM + b"query=ASK+%7B%7D")) == "read"


@pytest.mark.parametrize("fmt, doc", [
    ("ttl", b"@prefix : <http://ex.org/> . :a :p :b .\n"),
    ("trig", b"@prefix : <http://ex.org/> . :a :p :b .\n"),
    ("nt", b"<http://ex.org/a> <http://ex.org/p> <http://ex.org/b> .\n"),
    ("jsonld", b'{"@id": "http://ex.org/a", "http://ex.org/p": {"@id": "http://ex.org/b"}}'),
    ("xml", b'<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
            b'<rdf:Description rdf:about="http://ex.org/a"><p xmlns="http://ex.org/" '
            b'rdf:resource="http://ex.org/b"/></rdf:Description></rdf:RDF>'),
])
def test_rdf_documents_with_a_bom_load_as_without(tmp_path, fmt, doc):
    """Graph bodies (the graph store, stream graph elements) and files (--data, gzip too) are
    parsed by the loader, which drops the mark once, for every (text) format."""
    import gzip

    from engine.kv import loader

    want = loader.parse_to_keys(doc, fmt).s.to_pylist()
    assert want == [f"<{EX}a>"]
    assert loader.parse_to_keys(BOM + doc, fmt).s.to_pylist() == want
    f = tmp_path / f"d.{fmt}"
    f.write_bytes(BOM + doc)
    assert loader.parse_to_keys(str(f), fmt).s.to_pylist() == want
    g = tmp_path / f"d.{fmt}.gz"
    g.write_bytes(gzip.compress(BOM + doc))
    assert loader.parse_to_keys(str(g), fmt).s.to_pylist() == want


def test_graph_store_upload_with_a_bom(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        r = c.put("/store", params={"graph": EX + "g"}, headers={"Content-Type": "text/turtle"},
                  content=BOM + f"<{EX}g1> <{EX}q> 1 .".encode())
        assert r.status_code in (200, 201, 204), r.text
        q = f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{EX}g> {{ <{EX}g1> <{EX}q> 1 }} }}".encode()
        assert _n(c.post("/sparql", content=q, headers={**Q, **JSON})) == 1
        r = c.put("/store", params={"graph": EX + "g"}, headers={"Content-Type": "text/turtle"},
                  content=BOM + BOM + f"<{EX}g1> <{EX}q> 1 .".encode())
        assert r.status_code == 400, r.text


def test_marked_query_bodies_take_the_lanes_template_path(monkeypatch):
    """The lane's POST path (``post_answer``) drops the mark before its template and kept-answer
    lookups: a marked body of a known template is a template hit (spied), answered with the
    bytes of the unmarked body, and a marked repeat is the unmarked body's kept answer."""
    import requests

    from server.api import sparql
    from tests.conftest import start_server
    from tests.test_lane_repeated_texts import template_hit_spy

    s = start_server(None)
    try:
        nt = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n" for i in range(4))
        assert requests.post(s.url + "/store?default", data=nt.encode(),
                             headers={"Content-Type": "application/n-triples"}).status_code == 204
        tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "p> ?o }}"

        def post(body: bytes):
            r = requests.post(s.url + "/sparql", data=body, headers={**Q, **JSON})
            return r.status_code, r.content

        for i in range(3):   # the lane learns the template from unmarked texts
            assert post(tpl.format(c=f"{EX}s{i}").encode())[0] == 200
        kept = sparql.LaneAnswers()
        monkeypatch.setattr(sparql, "_ANSWERS", kept)
        hits = template_hit_spy(monkeypatch)
        text = tpl.format(c=f"{EX}s3").encode()
        marked = post(BOM + text)
        assert marked[0] == 200 and len(hits) == 1 and f"{EX}o3".encode() in marked[1]
        assert post(text) == marked and len(hits) == 2      # the same key: seen twice now, answer kept
        assert post(BOM + text) == marked and kept.served == 1 and len(hits) == 2
    finally:
        s.stop()
