"""A real HTTP listener on 127.0.0.1 that records every request: the SSRF tests
check that a refused input never reaches it."""

from __future__ import annotations

import http.server
import json
import socket
import threading

CTX = {"@context": {"name": "http://ex.org/name"}}


class Listener:
    """Answers every GET with the JSON-LD context ``CTX`` and records the request path in ``hits``."""

    def __init__(self):
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                hits.append(self.path)
                body = json.dumps(CTX).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/ld+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join(timeout=5)


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostRecorder:
    """A real HTTP receiver on 127.0.0.1 for webhook tests: records every POST (path, headers,
    body, the status it answered) and answers ``fail_next`` of them with ``fail_status`` first
    (a destination that is down for a while, then recovers)."""

    def __init__(self, fail_next: int = 0, fail_status: int = 503, port: int = 0):
        self.posts: list[dict] = []
        self.fail_next = fail_next
        self.fail_status = fail_status
        self.lock = threading.Lock()
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                with rec.lock:
                    status = 200
                    if rec.fail_next > 0:
                        rec.fail_next -= 1
                        status = rec.fail_status
                    rec.posts.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                      "body": body, "status": status})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def accepted(self) -> dict[str, list[bytes]]:
        """Idempotency key -> the bodies answered 2xx under it (exactly once: one body each)."""
        out: dict[str, list[bytes]] = {}
        with self.lock:
            for p in self.posts:
                if p["status"] == 200:
                    out.setdefault(p["headers"].get("idempotency-key"), []).append(p["body"])
        return out

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join(timeout=5)
