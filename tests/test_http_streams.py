"""/streams over the real server: registration rules, ingestion (ndjson, graphs),
heartbeats, deletion, auth and CORS on errors."""

from __future__ import annotations

import httpx
import orjson
import pytest

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def srv(make_server):
    return make_server()


def _c(s, token=None) -> httpx.Client:
    # a browser's client: its Origin header asks for the CORS headers (on errors too)
    h = {"Authorization": f"Bearer {token}", "Origin": "http://app.example"} if token else {"Origin": "http://app.example"}
    return httpx.Client(base_url=s.url, timeout=30, headers=h)


def _nd(*rows) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"


def _row(i, t, o=None):
    return {"s": f"<{EX}s{i}>", "p": f"<{EX}p>", "o": o or f'"{i}"', "t": t}


def test_register_rules(srv):
    with _c(srv) as c:
        r = c.put("/streams/s1", json={"iri": EX + "s1"})
        assert r.status_code == 201, r.text
        info = r.json()
        assert info["name"] == "s1" and info["iri"] == EX + "s1"
        assert info["absorb"] == "none" and info["clock"] == "event"
        assert r.headers["location"] == "/streams/s1"
        # idempotent
        r = c.put("/streams/s1", json={"iri": EX + "s1"})
        assert r.status_code == 200, r.text
        # another IRI for the name, the IRI under another name
        assert c.put("/streams/s1", json={"iri": EX + "other"}).status_code == 409
        r = c.put("/streams/s2", json={"iri": EX + "s1"})
        assert r.status_code == 409 and r.json()["error"]
        # absorb / clock
        r = c.put("/streams/s3", json={"iri": EX + "s3", "absorb": [EX + "label"], "clock": "arrival"})
        assert r.status_code == 201, r.text
        assert r.json()["clock"] == "arrival"
        r = c.get("/streams")
        assert r.status_code == 200
        assert sorted(s["name"] for s in r.json()["streams"]) == ["s1", "s3"]
        r = c.get("/streams/s1")
        assert r.status_code == 200 and r.json()["iri"] == EX + "s1"
        assert c.get("/streams/nope").status_code == 404
        assert c.delete("/streams/nope").status_code == 404
        r = c.delete("/streams/s3")
        assert r.status_code == 200 and r.json()["deleted"] == "s3"
        assert c.get("/streams/s3").status_code == 404


@pytest.mark.parametrize("body", [
    b"", b"{not json", b"[1, 2]", b'{"absorb": "all"}', b'{"iri": "no-colon"}', b'{"iri": 5}',
    b'{"iri": "http://ex.org/x", "clock": "wall"}', b'{"iri": "http://ex.org/x", "absorb": "some"}',
    b'{"iri": "http://ex.org/x", "absorb": [3]}', b'{"iri": "http://ex.org/x", "extra": 1}',
    b'{"iri": "http://ex.org/a b"}',
])
def test_register_bad_bodies(srv, body):
    with _c(srv) as c:
        r = c.put("/streams/bad", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"] == "bad_request"
        assert c.get("/streams/bad").status_code == 404


def test_ndjson_ingest_with_line_errors(srv):
    with _c(srv) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        body = (orjson.dumps(_row(1, 1000)) + b"\n"
                + b"{broken\n"
                + orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"x"'}) + b"\n"  # no t
                + orjson.dumps(_row(2, 2000)) + b"\n"
                + orjson.dumps(_row(3, 1500)) + b"\n"  # late: below the progress 2000
                + orjson.dumps(_row(4, 2000)) + b"\n")  # tau == P is fine
        r = c.post("/streams/s", content=body, headers=NDJSON)
        assert r.status_code == 207, r.text  # some lines refused, the others kept
        rep = r.json()
        assert rep["accepted"] == 3 and rep["rejected"] == 3
        assert sorted(e["line"] for e in rep["errors"]) == [2, 3, 5]
        assert all(isinstance(e["error"], str) and e["error"] for e in rep["errors"])
        assert rep["progress"] == 2000
        info = c.get("/streams/s").json()
        assert info["progress"] == 2000
        assert info["accepted"] == 3 and info["rejected"] == 3
        # every line refused: 422, nothing stored; all taken: 202
        r = c.post("/streams/s", content=orjson.dumps(_row(5, 10)) + b"\n{x\n", headers=NDJSON)
        assert r.status_code == 422 and r.json()["accepted"] == 0 and r.json()["rejected"] == 2, r.text
        r = c.post("/streams/s", content=orjson.dumps(_row(6, 3000)) + b"\n", headers=NDJSON)
        assert r.status_code == 202 and r.json()["rejected"] == 0, r.text


def test_graph_ingest_late_and_syntax(srv):
    nt = f"<{EX}a> <{EX}p> <{EX}b> .\n<{EX}a> <{EX}p> \"c\" .\n".encode()
    with _c(srv) as c:
        assert c.put("/streams/g", json={"iri": EX + "g"}).status_code == 201
        r = c.post("/streams/g?t=5000", content=nt, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 202, r.text
        assert r.json()["accepted"] == 2 and r.json()["rejected"] == 0 and r.json()["progress"] == 5000
        ttl = f"@prefix ex: <{EX}> . ex:x ex:p ex:y .".encode()
        r = c.post("/streams/g?t=6000", content=ttl, headers={"Content-Type": "text/turtle"})
        assert r.status_code == 202, r.text
        # late element: the whole graph is refused
        r = c.post("/streams/g?t=4000", content=nt, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "late_element"
        # syntax error: 400 with the line, nothing stored
        bad = f"<{EX}a> <{EX}p> <{EX}b> .\n<{EX}a> <{EX}p> .\n".encode()
        r = c.post("/streams/g?t=7000", content=bad, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 400, r.text
        assert r.json().get("line") == 2
        info = c.get("/streams/g").json()
        assert info["progress"] == 6000 and info["accepted"] == 3
        # bad t, media type, unknown stream
        r = c.post("/streams/g?t=soon", content=nt, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 400
        r = c.post("/streams/g", content=b"<a> <b> <c> .", headers={"Content-Type": "application/rdf+xml"})
        assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"
        r = c.post("/streams/g", content=b"x")
        assert r.status_code == 415
        r = c.post("/streams/nope?t=1", content=nt, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 404
        r = c.post("/streams/nope", content=_nd(_row(1, 1)), headers=NDJSON)
        assert r.status_code == 404


def test_graph_without_t_needs_an_arrival_clock(srv):
    """A graph body without ?t on an event-time stream is a 400 that changes nothing (the
    wall clock would jump the progress and make the data's own times late); an
    arrival-clock stream stamps it on arrival."""
    import time

    nt = f"<{EX}a> <{EX}p> <{EX}b> .\n".encode()
    with _c(srv) as c:
        assert c.put("/streams/ev", json={"iri": EX + "ev"}).status_code == 201
        r = c.post("/streams/ev", content=nt, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 400, r.text
        assert "?t=" in r.json()["detail"] and "arrival" in r.json()["detail"]
        doc = c.get("/streams/ev").json()
        assert doc["progress"] is None and doc["accepted"] == 0, doc
        r = c.post("/streams/ev?t=1000", content=nt, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 202 and r.json()["progress"] == 1000, r.text

        assert c.put("/streams/arr", json={"iri": EX + "arr", "clock": "arrival"}).status_code == 201
        before = time.time_ns() // 1_000_000
        r = c.post("/streams/arr", content=nt, headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 202, r.text
        assert r.json()["progress"] >= before


def test_heartbeats(srv):
    with _c(srv) as c:
        assert c.put("/streams/h", json={"iri": EX + "h"}).status_code == 201
        r = c.post("/streams/h/progress?t=5000")
        assert r.status_code == 200 and r.json() == {"progress": 5000}
        r = c.post("/streams/h/progress?t=3000")  # lower: no change, no error
        assert r.status_code == 200 and r.json() == {"progress": 5000}
        assert c.post("/streams/h/progress").status_code == 400
        assert c.post("/streams/h/progress?t=x").status_code == 400
        assert c.post("/streams/nope/progress?t=1").status_code == 404
        # an element below the heartbeat is late
        r = c.post("/streams/h", content=_nd(_row(1, 4000), _row(2, 5000)), headers=NDJSON)
        assert r.status_code == 207
        assert r.json()["accepted"] == 1 and r.json()["rejected"] == 1 and r.json()["progress"] == 5000


def test_delete_stream_in_use(srv):
    q = f"REGISTER QUERY uses AS SELECT * FROM STREAM <{EX}u> [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}"
    with _c(srv) as c:
        assert c.put("/streams/u", json={"iri": EX + "u"}).status_code == 201
        r = c.post("/queries", content=q, headers={"Content-Type": "application/sparql-query"})
        assert r.status_code == 201, r.text
        r = c.delete("/streams/u")
        assert r.status_code == 409 and r.json()["error"]
        r = c.delete("/streams/u?force=true")
        assert r.status_code == 200, r.text
        assert r.json()["queries"] == ["uses"]
        assert c.get("/queries/uses").status_code == 404
        assert c.get("/streams/u").status_code == 404


def test_auth_on_writes_and_cors_on_errors(make_server):
    s = make_server(token="sekrit")
    with _c(s) as anon, _c(s, "wrong") as bad, _c(s, "sekrit") as ok:
        r = anon.put("/streams/x", json={"iri": EX + "x"})
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "*"
        assert bad.put("/streams/x", json={"iri": EX + "x"}).status_code == 403
        assert ok.put("/streams/x", json={"iri": EX + "x"}).status_code == 201
        assert anon.get("/streams").status_code == 200  # reads are open
        assert anon.get("/streams/x").status_code == 200
        assert anon.post("/streams/x", content=_nd(_row(1, 1)), headers=NDJSON).status_code == 401
        assert ok.post("/streams/x", content=_nd(_row(1, 1)), headers=NDJSON).status_code == 202
        assert anon.post("/streams/x/progress?t=5").status_code == 401
        assert ok.post("/streams/x/progress?t=5").status_code == 200
        q = f"REGISTER QUERY qa AS SELECT * FROM STREAM <{EX}x> [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}"
        assert anon.post("/queries", content=q, headers={"Content-Type": "text/plain"}).status_code == 401
        assert ok.post("/queries", content=q, headers={"Content-Type": "text/plain"}).status_code == 201
        assert anon.get("/queries/qa").status_code == 200
        assert anon.delete("/queries/qa").status_code == 401
        assert ok.delete("/queries/qa").status_code == 204
        assert anon.delete("/streams/x").status_code == 401
        r = anon.get("/streams/missing")
        assert r.status_code == 404 and r.headers["access-control-allow-origin"] == "*"
        assert r.json()["error"] == "not_found"
        assert ok.delete("/streams/x").status_code == 200


def test_body_limit(make_server):
    s = make_server(max_body=1000)
    with _c(s) as c:
        assert c.put("/streams/b", json={"iri": EX + "b"}).status_code == 201
        r = c.post("/streams/b", content=_nd(*[_row(i, i) for i in range(100)]), headers=NDJSON)
        assert r.status_code == 413 and r.headers["access-control-allow-origin"] == "*"


def test_cli_stream_flags():
    from server.cli import build_parser, config_from_args

    a = build_parser().parse_args(["serve", "--retain", "5", "--sse-buffer", "7", "--sse-keepalive", "0.5",
                                   "--transient-budget", "1000"])
    cfg = config_from_args(a)
    assert (cfg.retain, cfg.sse_buffer, cfg.sse_keepalive, cfg.transient_budget) == (5, 7, 0.5, 1000)
    d = config_from_args(build_parser().parse_args(["serve"]))
    assert (d.retain, d.sse_buffer, d.sse_keepalive) == (1000, 1000, 15.0)


def test_streams_503_without_manager(make_server):
    s = make_server()
    manager, s.app.state.jindou.streams = s.app.state.jindou.streams, None
    try:
        with _c(s) as c:
            r = c.get("/streams")
            assert r.status_code == 503 and r.json()["error"] == "unavailable"
            assert c.get("/queries/x/results").status_code == 503
    finally:
        s.app.state.jindou.streams = manager  # closed at shutdown


def test_transient_store_full_is_503():
    """Backpressure from the window store is a retryable 503, not a client error."""
    from engine.stream.transient import TransientStoreFull
    from server.api.common import http_error_from

    err = http_error_from(TransientStoreFull("s", needed=1 << 20, used=1 << 20, budget=1 << 20))
    assert err.status == 503 and err.headers.get("Retry-After") == "1"
