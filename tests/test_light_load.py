"""bench/light_load.py: wrk over the very request bytes of http-load's throughput phase."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import http_load, light_load


def _python_client_requests(port: int, path: str, clients: int, salt: str) -> set[bytes]:
    """What http_load.throughput's client threads send, rebuilt the way it builds them."""
    out = set()
    for k in range(clients):
        for i in range(400):
            fam = http_load.FAMILIES[(i + k) % len(http_load.FAMILIES)]
            ents = http_load._entities(fam.kind, 60)
            out.add(http_load.request_bytes(path, fam.text(ents[(i * 7 + k) % len(ents)], f"{salt}-{k}-{i}"), port,
                                            fam.accept))
    return out


def test_request_pool_is_the_python_clients_requests():
    pool = light_load.request_pool(18000, "/sparql", 8, "t0")
    assert len(pool) == 8 * 400
    assert set(pool) == _python_client_requests(18000, "/sparql", 8, "t0")
    assert all(b"\0" not in r for r in pool)  # the file's separator
    fams = (http_load.FAMILIES[0],)
    post = light_load.request_pool(18000, "/sparql", 2, "s", families=fams, method="post")
    assert all(r.startswith(b"POST /sparql ") for r in post)


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str] = []
    lock = threading.Lock()

    def do_GET(self):  # noqa: N802 - the handler's name
        with self.lock:
            self.seen.append(self.path)
        body = b'{"head":{"vars":[]},"results":{"bindings":[]}}'
        self.send_response(200 if "fail" not in self.path else 500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.mark.skipif(light_load.binary() is None, reason="wrk is a measuring tool, not installed here")
def test_wrk_sends_the_pool_and_counts_answers_and_errors():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        port = srv.server_address[1]
        _Recorder.seen = []
        fams = tuple(f for f in http_load.FAMILIES if f.name in ("point", "star4"))
        res = light_load.throughput(port, "/sparql", 2, 1, "w", families=fams)
        pool = {r.split(b" ")[1].decode() for r in light_load.request_pool(port, "/sparql", 2, "w", families=fams)}
        assert res["qps"] > 0 and res["errors"] == 0
        assert res["p50"] <= res["p99"]
        assert _Recorder.seen and set(_Recorder.seen) <= pool
        assert len(set(_Recorder.seen)) > 2  # cycling, not one request over and over
        failing = (http_load.Family("fail", "always 500", "ASK {{ <{c}> ?p ?o }} # fail", "FullProfessor"),)
        res = light_load.throughput(port, "/sparql", 1, 1, "f", families=failing)
        assert res["errors"] > 0
    finally:
        srv.shutdown()
        srv.server_close()
