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
            assert not LEAK_RE.search(resp.decode("utf-8", "replace")), (req[:80], resp[:300])
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
    assert not LEAK_RE.search(r.text), (q, r.text[:300])
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
    assert not LEAK_RE.search(r.text), (body, ct, r.text[:300])


# ------------------------------------------------------------------ seeded mutation fuzzer over every endpoint
import builtins  # noqa: E402
import json as _json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from urllib.parse import quote  # noqa: E402

from tests.support.server_process import ROOT, free_port  # noqa: E402

#: names that must never reach a client: every built-in exception type, and what parsers raise
_EXC_NAMES = sorted({n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
                    | {"JSONDecodeError", "ArrowInvalid", "ArrowTypeError", "ArrowException", "ExpatError",
                       "SAXParseException", "BadSyntax", "UnicodeDecodeError", "HTTPException"})
LEAK_RE = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line|\b(?:"
                     + "|".join(map(re.escape, _EXC_NAMES)) + r")\b")
INTERNAL_RE = re.compile(rb'^\{"error":"internal","detail":"internal error \(id ([0-9a-f]+)\)","id":"([0-9a-f]+)"\}$')

EXN = "http://ex.org/"
TTL_BODY = f"@prefix ex: <{EXN}> . ex:a ex:p 1, 2.5, \"x\"@en ; ex:q [ ex:r ( 1 2 3 ) ] .".encode()
SEEDS: list[tuple[str, str, dict[str, str], bytes]] = [
    ("GET", "/sparql?query=" + quote("SELECT ?s (COUNT(*) AS ?n) WHERE { ?s ?p ?o FILTER(?o > 1) } GROUP BY ?s LIMIT 10"),
     {"Accept": "application/sparql-results+json"}, b""),
    ("GET", "/sparql?query=" + quote("ASK {}") + "&default-graph-uri=" + quote(EXN + "g"), {"Accept": "*/*"}, b""),
    ("POST", "/sparql", {"Content-Type": "application/sparql-query", "Accept": "text/csv"},
     f'SELECT * WHERE {{ ?s <{EXN}p> ?o BIND(STRLEN(STR(?o)) + 1 AS ?l) }} ORDER BY DESC(?l)'.encode()),
    ("POST", "/sparql", {"Content-Type": "application/x-www-form-urlencoded"},
     b"query=" + quote("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o } LIMIT 5").encode() + b"&named-graph-uri=" +
     quote(EXN + "g").encode()),
    ("POST", "/update", {"Content-Type": "application/sparql-update"},
     f'INSERT DATA {{ <{EXN}a> <{EXN}p> 12 . GRAPH <{EXN}g> {{ <{EXN}b> <{EXN}p> "y" }} }}'.encode()),
    ("POST", "/update", {"Content-Type": "application/x-www-form-urlencoded"},
     b"update=" + quote(f"DELETE WHERE {{ <{EXN}zz> ?p ?o }}").encode()),
    ("GET", "/store?graph=" + quote(EXN + "g"), {"Accept": "text/turtle"}, b""),
    ("PUT", "/store?graph=" + quote(EXN + "g"), {"Content-Type": "text/turtle"}, TTL_BODY),
    ("POST", "/store?default", {"Content-Type": "application/n-triples"},
     f'<{EXN}a> <{EXN}p> "5"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'.encode()),
    ("POST", "/store", {"Content-Type": "application/trig"}, f"<{EXN}g2> {{ <{EXN}a> <{EXN}p> 7 }}".encode()),
    ("PUT", "/store?graph=" + quote(EXN + "j"), {"Content-Type": "application/ld+json"},
     _json.dumps({"@context": {"p": {"@id": EXN + "p", "@type": "http://www.w3.org/2001/XMLSchema#integer"}},
                  "@id": EXN + "a", "p": [1, 2, {"@value": 3}]}).encode()),
    ("PUT", "/store?graph=" + quote(EXN + "x"), {"Content-Type": "application/rdf+xml"},
     b'<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
     b'xmlns:ex="http://ex.org/"><rdf:Description rdf:about="http://ex.org/a"><ex:p>1</ex:p>'
     b"</rdf:Description></rdf:RDF>"),
    ("DELETE", "/store?graph=" + quote(EXN + "none"), {}, b""),
    ("PUT", "/streams/fz", {"Content-Type": "application/json"}, _json.dumps({"iri": EXN + "fz"}).encode()),
    ("POST", "/streams/fz", {"Content-Type": "application/x-ndjson"},
     b'{"s":"<http://ex.org/a>","p":"<http://ex.org/p>","o":"\\"1\\"","t":1000}\n'
     b'{"s":"<http://ex.org/b>","p":"<http://ex.org/p>","o":"<http://ex.org/c>","t":2000}\n'),
    ("POST", "/streams/fz?t=3000", {"Content-Type": "text/turtle"}, TTL_BODY),
    ("POST", "/streams/fz/progress?t=4000", {}, b""),
    ("GET", "/streams/fz", {}, b""),
    ("GET", "/streams", {}, b""),
    ("POST", "/queries", {"Content-Type": "application/sparql-query"},
     f"REGISTER QUERY fq AS SELECT ?s (COUNT(?o) AS ?n) FROM STREAM <{EXN}fz> [RANGE 10s STEP 1s] "
     f"WHERE {{ ?s ?p ?o }} GROUP BY ?s".encode()),
    ("GET", "/queries", {}, b""),
    ("GET", "/queries/fq", {}, b""),
    ("GET", "/queries/nosuch/results", {"Accept": "text/event-stream", "Last-Event-ID": "3"}, b""),
    ("PUT", "/pipelines/fp", {"Content-Type": "application/json"},
     _json.dumps({"state": "running", "counters": {"triples": 10, "batches": 1},
                  "spark_progress": {"inputRowsPerSecond": 1.5, "durationMs": {"triggerExecution": 20}},
                  "last_batch": {"deliver_s": 0.1}}).encode()),
    ("GET", "/pipelines", {}, b""),
    ("GET", "/status", {}, b""),
    ("GET", "/metrics", {}, b""),
    ("DELETE", "/queries/fq", {}, b""),
    ("DELETE", "/streams/fz", {}, b""),
]

ODD_TYPES = ["", ";", "text/turtle; charset=latin-9", "application/sparql-query; charset=utf-16",
             "application/ld+json; profile=\"", "*/*", "text/", "application/x-www-form-urlencoded",
             "multipart/form-data; boundary=x", "application/json", "application/x-ndjson", "text/plain",
             "application/vnd.apache.arrow.stream", "application/rdf+xml", "a" * 300]
ODD_ACCEPT = ["", ",,,", "*/*;q=abc", "text/csv;q=2", "application/sparql-results+json;q=-1", "text/*;q=0",
              "x" * 500, "application/n-quads, */*;q=0.1", "image/png"]
ODD_VALUES = ["", "%", "%FF", "%C3%28", "%00", "-1", "0", "1e309", "NaN", "-0", "9" * 40, "9" * 5000, "1.5",
              "0x10", "%E2%80%AE", "true", "[]", "{" * 3000, "(" * 3000, quote("\U0010ffff"), "%ED%A0%80",
              "99999999999999999999999", "-99999999999999999999999"]
ODD_BYTES = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\\U00110000", b"\\UFFFFFFFF", b"\\u", b'"',
             b"{", b"[" * 2000, b"(" * 2000, b"9" * 5000, b"1e999999", b"-" * 100, b"\r\n", b"<", b"&", b"%",
             b"\xef\xbb\xbf", b"]]>", b"<!DOCTYPE x [<!ENTITY a 'b'>]>", b'"\\' * 50]


def _mutate(rng: random.Random, seed) -> tuple[str, str, dict[str, str], bytes]:
    method, target, headers, body = seed
    headers = dict(headers)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        if op == 0 and body:  # truncate
            body = body[: rng.randrange(len(body))]
        elif op == 1 and body:  # splice odd bytes
            i = rng.randrange(len(body) + 1)
            body = body[:i] + rng.choice(ODD_BYTES) + body[i:]
        elif op == 2 and body:  # flip bytes
            b = bytearray(body)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            body = bytes(b)
        elif op == 3:  # numbers grow huge
            big = rng.choice(["9" * 5000, "99999999999999999999999", "1e999", "-0.0000000000000000000001"])
            body = re.sub(rb"\b\d+\b", big.encode(), body, count=rng.randint(1, 3))
            target = re.sub(r"(?<=[=/])\d+\b", big, target, count=1)
        elif op == 4:  # odd media types
            headers["Content-Type"] = rng.choice(ODD_TYPES)
        elif op == 5:
            headers["Accept"] = rng.choice(ODD_ACCEPT)
        elif op == 6:  # query-string values and keys
            path, _, qs = target.partition("?")
            parts = qs.split("&") if qs else []
            v = rng.choice(ODD_VALUES)
            if parts and rng.random() < 0.7:
                k = rng.randrange(len(parts))
                name = parts[k].partition("=")[0]
                parts[k] = f"{name}={v}"
            else:
                parts.append(rng.choice(["t", "query", "update", "graph", "default", "default-graph-uri",
                                         "named-graph-uri", "using-graph-uri", "batch", "x"]) + "=" + v)
            target = path + "?" + "&".join(parts)
        elif op == 7:  # path segments
            path, q, qs = target.partition("?")
            segs = path.split("/")
            if len(segs) > 2:
                segs[2] = rng.choice(["%FF", "a" * 3000, "..", "%2F", "x y", "%00", "\u00e9", "fz", "fq"])
            target = "/".join(segs) + q + qs
        else:  # deep nesting around the body
            n = rng.choice([100, 1000, 5000])
            opener, closer = rng.choice([(b"{", b"}"), (b"[", b"]"), (b"(", b")"), (b"<a>", b"</a>")])
            body = opener * n + body + closer * n
    return method, target, headers, body


def _raw_request(port: int, method: str, target: str, headers: dict[str, str], body: bytes,
                 timeout: float = 60) -> tuple[int, bytes]:
    """(status, body) over one raw connection; (0, b"") when the server closed without answering."""
    target_b = target.encode("utf-8", "surrogateescape").replace(b" ", b"%20")
    lines = [f"{method} ".encode() + target_b + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close",
             f"Content-Length: {len(body)}".encode()]
    lines += [k.encode("latin-1") + b": " + v.encode("utf-8") for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return (0, b"") if not data else (_status(data), b"")
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if b"text/event-stream" in head.lower():
            return _status(head), b""  # an open SSE stream: the headers are the answer
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            rest += chunk
    if b"transfer-encoding: chunked" in head.lower():
        rest = _unchunk(rest)
    return _status(head), rest


def _status(head: bytes) -> int:
    return int(head.split(b"\r\n", 1)[0].split()[1])


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        try:
            n = int(size_line.split(b";")[0], 16)
        except ValueError:
            return out + data
        if n == 0:
            break
        out, data = out + data[:n], data[n + 2:]
    return out


def test_mutation_fuzz_every_endpoint(tmp_path):
    """Malformed requests against every endpoint of a real `jindou serve`: no body names a
    Python exception or shows a traceback, none is a 500 (were one, it would be the generic
    one with its id in the server log with the traceback), and the server keeps answering /status."""
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", "from server.cli import main; main()", "serve", "--host",
                                 "127.0.0.1", "--port", str(port), "--no-progress", "--query-timeout", "5"],
                                cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=log_file,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while _safe_status(port) != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        rng = random.Random(int(os.environ.get("JINDOU_FUZZ_SEED", "20261124")))
        n = int(os.environ.get("JINDOU_FUZZ_COUNT", "500"))
        budget = time.monotonic() + float(os.environ.get("JINDOU_FUZZ_SECONDS", "150"))
        for seed in SEEDS:  # the unmutated requests set the scene (stream, query, graphs)
            _raw_request(port, *seed)
        internal: list[tuple[str, str, bytes]] = []
        sent = 0
        for i in range(n):
            if time.monotonic() > budget:
                break
            method, target, headers, body = _mutate(rng, rng.choice(SEEDS))
            status, resp = _raw_request(port, method, target, headers, body)
            sent += 1
            what = (method, target[:200], headers, body[:200], status, resp[:400])
            text = resp.decode("utf-8", "replace")
            assert not LEAK_RE.search(text), what
            if status >= 500 and status != 503:
                m = INTERNAL_RE.match(resp)
                assert m and m.group(1) == m.group(2), what
                internal.append((m.group(1).decode(), f"{method} {target[:120]}", body[:120]))
            if i % 25 == 0:
                assert _safe_status(port) == 200, what
        assert sent >= min(n, 100)
        assert _safe_status(port) == 200
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log_text = log_path.read_text(errors="replace")
    for err_id, req, body in internal:
        logging.getLogger(__name__).warning("fuzz: internal error %s for %s %r", err_id, req, body)
        i = log_text.find(f"id={err_id}")
        assert i >= 0, (err_id, req)
        assert "Traceback (most recent call last)" in log_text[i:i + 20000], (err_id, req)
    # and there are none: no malformed request is an internal error
    assert not internal, internal


def _safe_status(port: int) -> int:
    try:
        return _raw_request(port, "GET", "/status", {}, b"", timeout=10)[0]
    except OSError:
        return 0
