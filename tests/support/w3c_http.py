"""One request of a W3C protocol test (SPARQL Protocol, Graph Store Protocol) sent as written:
the manifest's method, path, headers and body, nothing added but Content-Length (and Host
when the test names one)."""

from __future__ import annotations

import http.client


def send(port: int, req: dict, path: str, host: str | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    """The response (read) and its body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(req["method"], path, skip_host=host is not None, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host)
        for k, v in req["headers"].items():
            conn.putheader(k, v)
        body = req["body"]
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r, r.read()
    finally:
        conn.close()
