"""Malformed and random requests: the HTTP layer answers 4xx JSON (or closes a
broken connection) and never crashes or answers 500."""

from __future__ import annotations

import socket
import string
from urllib.parse import urlsplit

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

RAW_REQUESTS = [
    b"GARBAGE\r\n\r\n",
    b"GET /sparql?query=%zz%ff HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /sparql?query=%FF%FE HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /sparql?query=ASK%20%7B%7D%00 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /sparql?&&&=&query HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /sparql?query=ASK%7B%7D HTTP/1.1\r\nHost: x\r\nAccept: ;;;q=,*/;q=2\r\n\r\n",
    b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/sparql-query\r\nContent-Length: -5\r\n\r\n",
    b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/sparql-query\r\nContent-Length: abc\r\n\r\n",
    b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: ;charset\r\nContent-Length: 6\r\n\r\nASK {}",
    b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 8\r\n\r\nquery=%G",
    b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 8\r\n\r\n\xff\xfe\xfd=\x00\x01",
    b"POST /update HTTP/1.1\r\nHost: x\r\nContent-Type: application/sparql-update\r\nContent-Length: 4\r\n\r\n\x00\x00\x00\x00",
    b"PUT /store?graph=%00 HTTP/1.1\r\nHost: x\r\nContent-Type: text/turtle\r\nContent-Length: 3\r\n\r\n<a>",
    b"PUT /store?graph=http://ex.org/g HTTP/1.1\r\nHost: x\r\nContent-Type: application/rdf+xml\r\nContent-Length: 9\r\n\r\n<rdf:RDF>",
    b"PUT /store?graph=http://ex.org/g HTTP/1.1\r\nHost: x\r\nContent-Type: application/ld+json\r\nContent-Length: 1\r\n\r\n{",
    b"GET /store?graph=%E0%80%80 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /sparql?query=" + b"A" * 60000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /sparql HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"y" * 20000 + b"\r\n\r\n",
    b"BREW /sparql HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /%%%% HTTP/1.1\r\nHost: x\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
]


def raw(url: str, data: bytes) -> bytes:
    p = urlsplit(url)
    with socket.create_connection((p.hostname, p.port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return out


def test_raw_malformed_requests(server):
    for req in RAW_REQUESTS:
        resp = raw(server.url, req)
        if resp:
            status_line = resp.split(b"\r\n", 1)[0]
            code = int(status_line.split()[1])
            assert 200 <= code < 500 or code == 503, (req[:80], status_line)
        # the server is still alive and well after every one
        assert requests.get(server.url + "/status", timeout=5).status_code == 200


QUERY_TEXT = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(["SELECT", "ASK", "CONSTRUCT", "DESCRIBE", "WHERE", "{", "}", "(", ")", "?x", "?y",
                              "<http://ex.org/a>", '"lit"', "FILTER", "OPTIONAL", "UNION", ".", ";", ",", "*",
                              "GROUP BY", "ORDER BY", "LIMIT", "1", "COUNT", "AS", "a", "GRAPH", "VALUES",
                              "BIND", "MINUS", "#", "\n", "'", "\\", "^^", "@en", "_:b", "[", "]", "/", "|"]),
             max_size=25).map(" ".join),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=QUERY_TEXT, accept=st.one_of(st.none(), st.text(string.ascii_letters + string.digits + string.punctuation + " ",
                                                          max_size=40)))
def test_random_queries_never_500(server, q, accept):
    headers = {}
    if accept is not None:
        headers["Accept"] = accept
    try:
        r = requests.post(server.url + "/sparql", data=q.encode("utf-8", "surrogatepass"),
                          headers={**headers, "Content-Type": "application/sparql-query"}, timeout=30)
    except requests.exceptions.InvalidHeader:
        return
    assert r.status_code < 500 or r.status_code == 503, (q, accept, r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert r.json()["error"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300), ct=st.sampled_from(["text/turtle", "application/n-triples",
                                                          "application/n-quads", "application/trig",
                                                          "application/rdf+xml", "application/ld+json"]))
def test_random_store_bodies_never_500(server, body, ct):
    r = requests.post(server.url + "/store?graph=http%3A%2F%2Fex.org%2Ffuzz", data=body,
                      headers={"Content-Type": ct}, timeout=30)
    assert r.status_code in (200, 201, 204, 400, 415), (body, ct, r.status_code, r.text[:300])
