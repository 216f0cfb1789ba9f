"""The fast lane's own head reading (server.lane via FastLaneProtocol.data_received):
pipelined lane and ordinary requests keep their order, Connection: close and
HTTP/1.0 close after the answer, and an idle keep-alive
connection closes the keep-alive timeout after its last answer (one timer per
idle spell, not per request)."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import quote

import requests

from tests.test_http_sparql_protocol import read_answers

EX = "http://example.org/"


def _get(qs: str, extra: str = "", version: str = "1.1") -> bytes:
    return (f"GET /sparql?query={quote(qs, safe='')} HTTP/{version}\r\nHost: 127.0.0.1\r\n"
            f"Accept: application/sparql-results+json\r\n{extra}\r\n").encode()


def _server(make_server):
    s = make_server()
    body = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n" for i in range(3))
    r = requests.post(s.url + "/store?default", data=body.encode(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 204
    return s, int(s.url.rsplit(":", 1)[1])


def _value(body: bytes) -> str:
    return json.loads(body)["results"]["bindings"][0]["o"]["value"]


def test_pipelined_lane_and_ordinary_requests_in_order(make_server):
    s, port = _server(make_server)
    q = [f"SELECT ?o WHERE {{ <{EX}s{i % 3}> <{EX}p> ?o }}" for i in range(4)]
    status = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    data = (_get(q[0]) + _get(q[1], "X-Custom: a\r\nx-custom: b\r\n") + status + _get(q[2], "Origin: http://app.example\r\n") + _get("SELEC")
            + _get(q[3], "Connection: close\r\n"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        got = read_answers(sock, 6)
        assert sock.recv(1) == b""  # Connection: close: closed after the last answer
    assert [a[0] for a in got] == [200, 200, 200, 200, 400, 200]
    assert _value(got[0][2]) == f"{EX}o0" and _value(got[1][2]) == f"{EX}o1"
    assert json.loads(got[2][2])["service"] == "jindou"
    assert _value(got[3][2]) == f"{EX}o2" and _value(got[5][2]) == f"{EX}o0"
    assert json.loads(got[4][2])["error"] == "syntax"
    assert got[5][1]["connection"] == "close"
    # CORS headers on the one request with Origin (a browser's CORS request), Vary naming it on all
    assert [a[1].get("access-control-allow-origin") for a in got] == [None, None, None, "*", None, None]
    assert all("Origin" in a[1]["vary"] for a in got)


def test_http10_closes(make_server):
    s, port = _server(make_server)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_get(f"SELECT ?o WHERE {{ <{EX}s1> <{EX}p> ?o }}", version="1.0"))
        got = read_answers(sock, 1)
        assert sock.recv(1) == b""
    assert got[0][0] == 200 and _value(got[0][2]) == f"{EX}o1"


def test_idle_connection_closes_after_the_last_answer(make_server):
    s, port = _server(make_server)
    s._server.config.timeout_keep_alive = 1  # read by each new connection's protocol
    q = _get(f"SELECT ?o WHERE {{ <{EX}s2> <{EX}p> ?o }}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        t0 = time.monotonic()
        for _ in range(4):  # answers 0.3 s apart: each keeps the connection for another second
            sock.sendall(q)
            assert read_answers(sock, 1)[0][0] == 200
            time.sleep(0.3)
        last = time.monotonic()
        assert last - t0 > 1.1  # past the first answer's timeout, still open
        sock.settimeout(5)
        assert sock.recv(1) == b""  # then closed by the server
        closed = time.monotonic()
    assert 0.5 < closed - last + 0.3 < 2.5


def test_request_id_on_the_lane(make_server):
    """As ``jindou serve`` runs it (the app inside RequestLog, access lines off): the
    lane echoes a sane X-Request-Id and makes one up otherwise."""
    import threading

    import uvicorn

    from server.app import http_protocol
    from server.logs import RequestLog
    from tests.conftest import free_port

    s, _ = _server(make_server)  # its app, with the data
    port = free_port()
    uc = uvicorn.Config(RequestLog(s.app, access=False), host="127.0.0.1", port=port, log_level="warning",
                        access_log=False, lifespan="off", http=http_protocol())
    srv = uvicorn.Server(uc)
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    try:
        deadline = time.monotonic() + 20
        while not srv.started and time.monotonic() < deadline:
            time.sleep(0.02)
        q = f"SELECT ?o WHERE {{ <{EX}s0> <{EX}p> ?o }}"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_get(q, "X-Request-Id: lane-abc-1\r\n") + _get(q) + _get(q, "X-Request-Id: bad\tid\r\n"))
            got = read_answers(sock, 3)
        assert [a[0] for a in got] == [200, 200, 200]
        assert got[0][1]["x-request-id"] == "lane-abc-1"
        assert got[1][1]["x-request-id"] not in ("", "lane-abc-1")
        assert got[2][1]["x-request-id"] not in ("", "bad\tid", got[1][1]["x-request-id"])
    finally:
        srv.should_exit = True
        th.join(timeout=10)
