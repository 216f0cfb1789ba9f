"""POST /sparql on the HTTP fast lane (server/app.py FastLaneProtocol, server.lane):
every request answers byte for byte what the ordinary ASGI path answers (status
line, headers, body, the connection's fate) however its bytes arrive -- whole,
split anywhere, pipelined behind or ahead of other requests, with a wrong
Content-Length -- including the errors (400 bad UTF-8 or syntax, 406, 413, 415,
an update form) and the requests the lane leaves to httptools."""

from __future__ import annotations

import asyncio
import re
from urllib.parse import quote_plus

import pytest

from bench import lubm
from bench.lane_profile import make_connector
from engine.database import Database

UB = "PREFIX ub: <http://swat.cse.lehigh.edu/onto/univ-bench.owl#>\n"
D = "http://www.Department0.University0.edu"
QUERIES = [
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}",
    "SELECT ?n ?e WHERE {{ <{c}> ub:name ?n ; ub:emailAddress ?e }}",
    "ASK {{ <{c}> ub:worksFor ?d }}",
    "CONSTRUCT {{ <{c}> ub:name ?n }} WHERE {{ <{c}> ub:name ?n }}",
    "DESCRIBE <{c}>",
    "SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY ?n",
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }} ORDER BY DESC(?o) ?p",
    "SELECT DISTINCT ?k WHERE {{ ?s ub:advisor <{c}> . ?s ub:takesCourse ?k }} LIMIT 10",
]
ENTITIES = [f"{D}/FullProfessor{i}" for i in range(2)] + [f"{D}/GraduateStudent0", f"{D}/None"]
SPARQL = "application/sparql-query"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(make a connection, the edge middleware, the loop): a FastLaneProtocol as
    ``jindou serve`` builds it (RequestLog, access lines off), max_body 4096."""
    from server.app import _edge_of
    from server.settings import Settings

    path = tmp_path_factory.mktemp("lanepost") / "d.nt"
    lubm.generate(path, triples=6000, seed=3)
    db = Database()
    db.load_file(str(path))
    loop = asyncio.new_event_loop()
    connect = make_connector(db, loop, Settings(max_body=4096))
    proto, _ = connect()
    edge = _edge_of(proto.app)[0]
    assert edge is not None
    yield connect, edge, loop
    loop.close()


def _post(body: bytes | str, ctype: str | None = SPARQL, path: str = "/sparql", version: str = "1.1",
          extra: str = "", length: int | None = None) -> bytes:
    body = body.encode() if isinstance(body, str) else body
    ct = f"Content-Type: {ctype}\r\n" if ctype is not None else ""
    n = len(body) if length is None else length
    return (f"POST {path} HTTP/{version}\r\nHost: 127.0.0.1:7878\r\nAccept: application/sparql-results+json\r\n"
            f"{ct}Content-Length: {n}\r\n{extra}\r\n").encode() + body


def _get(text: str) -> bytes:
    return (f"GET /sparql?query={quote_plus(text)} HTTP/1.1\r\nHost: 127.0.0.1:7878\r\n"
            f"Accept: application/sparql-results+json\r\n\r\n").encode()


def _feed(server, chunks: list[bytes], answers: int, lane: bool) -> tuple[bytes, bool, bool]:
    """(what the server wrote on a fresh connection fed ``chunks`` one read each,
    dates and request ids blanked; whether any answer was written before the event
    loop ran; whether the connection was closed). ``lane=False``: the lane declines
    every request (the ordinary path answers)."""
    connect, edge, loop = server
    proto, tr = connect()
    saved = edge.answer_inline, edge.answer_post_inline, edge.answer_get
    if not lane:
        edge.answer_inline = lambda scope, qs: None
        edge.answer_post_inline = lambda scope, body: None
        edge.answer_get = lambda scope, fields, qs: None
    try:
        for c in chunks:
            proto.data_received(c)
        inline = bool(tr.out)
        for _ in range(3000):
            out = b"".join(tr.out)
            if (out.count(b"HTTP/1.1 ") >= answers and (proto.cycle is None or proto.cycle.response_complete)
                    and not proto.pipeline):
                break
            loop.run_until_complete(asyncio.sleep(0.001))
        loop.run_until_complete(asyncio.sleep(0.002))
    finally:
        edge.answer_inline, edge.answer_post_inline, edge.answer_get = saved
        if proto.timeout_keep_alive_task is not None:
            proto.timeout_keep_alive_task.cancel()
            proto.timeout_keep_alive_task = None
    out = b"".join(tr.out)
    out = re.sub(rb"date: [^\r]*", b"date: -", out)
    return re.sub(rb"x-request-id: [^\r]*", b"x-request-id: -", out), inline, tr.closed


def _same(server, chunks: list[bytes], answers: int = 1) -> bool:
    """The lane's bytes equal the ordinary path's; whether the lane answered inline."""
    got = _feed(server, chunks, answers, True)
    want = _feed(server, chunks, answers, False)
    assert got[0] == want[0], (chunks, got[0][:600], want[0][:600])
    assert got[2] == want[2]
    assert got[0].count(b"HTTP/1.1 ") == answers, got[0][:600]
    return got[1]


def _texts():
    return [UB + q.format(c=c) + f"# {i}-{j}\n" for i, q in enumerate(QUERIES) for j, c in enumerate(ENTITIES)]


def test_query_and_form_bodies_answer_as_the_ordinary_path(server):
    inline = 0
    for t in _texts():
        for req in (_post(t), _post(t, path="/sparql/"), _post(t, f"{SPARQL}; charset=UTF-8"),
                    _post("query=" + quote_plus(t), FORM), _post("query=" + quote_plus(t) + "&format=xml", FORM),
                    _post(t, extra="Accept: text/csv\r\n"), _post(t, extra="X-Request-Id: p-1\r\n")):
            inline += _same(server, [req])
    assert inline > len(_texts()) * 4  # the lane did answer most of them


def test_errors_and_declined_requests_answer_as_the_ordinary_path(server):
    q = UB + QUERIES[0].format(c=ENTITIES[0])
    cases = [
        _post(b"SELECT * WHERE { ?s ?p \xff }"),  # not UTF-8: 400
        _post(b"query=SELECT%20%FF", FORM),  # a form not UTF-8: 400
        _post("SELEC ?x"),  # syntax: 400
        _post(" "),
        _post("query=", FORM),
        _post("query=a&query=b", FORM),  # given twice: 400
        _post("format=json", FORM),  # no query: 400
        _post("query=" + quote_plus(q) + "&format=nope", FORM),  # unknown format: 400
        _post(q, extra="Accept: image/png\r\n"),  # 406
        _post(q, "text/plain"),  # 415
        _post(q, None),  # no Content-Type: 415
        _post(q, f"{SPARQL}; charset=latin-1"),  # 415
        _post("query=" + quote_plus(q) + "&default-graph-uri=" + quote_plus("http://x/g"), FORM),
        _post("query=" + quote_plus(q) + "&default-graph-uri=nope", FORM),  # not an IRI: 400
        _post("update=" + quote_plus("INSERT DATA {"), FORM),  # an update (a broken one): 400
        _post("query=x&update=y", FORM),  # both: 400
        _post("query=" + quote_plus("EXPLAIN ") + "&explain=true", FORM),
        _post("INSERT DATA {", "application/sparql-update"),  # an update: 400
        _post("query=" + quote_plus(q) + " x", FORM),  # a space: not URL bytes (declined, still answered)
        _post("x" * 5000),  # past max_body: 413
        _post(q, extra="Transfer-Encoding: identity\r\n"),
    ]
    for req in cases:
        _same(server, [req])


def test_a_body_split_across_reads(server):
    t = _texts()[1]
    for req in (_post(t), _post("query=" + quote_plus(t), FORM)):
        whole = _feed(server, [req], 1, True)
        assert whole[1]  # answered inline when it comes whole
        for cut in list(range(1, len(req), 7)) + [len(req) - 1, req.index(b"\r\n\r\n") + 4]:
            got = _feed(server, [req[:cut], req[cut:]], 1, True)
            assert got[0] == whole[0], cut
        assert _feed(server, [req[:-5], req[-5:-3], req[-3:]], 1, True)[0] == whole[0]
        assert _same(server, [req[:-3], req[-3:]])


def test_pipelined_with_gets_and_other_requests(server):
    t = _texts()
    status = b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # (404; /status would vary)
    seq = [_get(t[0]), _post(t[1]), _post("query=" + quote_plus(t[2]), FORM), status, _post(t[3]), _get(t[4]),
           _post("SELEC"), _post(t[5], extra="Connection: close\r\n")]
    data = b"".join(seq)
    assert _same(server, [data], len(seq))
    for cut in (len(seq[0]) + 10, len(seq[0]) + len(seq[1]) - 2, len(data) - 3):  # split inside a POST
        assert _same(server, [data[:cut], data[cut:]], len(seq)) is not None


def test_content_length_mismatch_and_connection_ends(server):
    t = _texts()[0]
    body = t.encode()
    # shorter than the body: the rest is read as the next request, a bad one: 400 and closed. (The
    # ordinary path writes that 400 before its task answers the first request, which is then
    # written to a closed connection and lost; the lane has answered the first one already, as
    # it does for a GET followed by bytes httptools refuses.)
    req = _post(body, length=len(body) - 4)
    got = _feed(server, [req], 2, True)
    want = _feed(server, [req], 1, False)
    assert got[2] and want[2]
    assert got[0].startswith(b"HTTP/1.1 200 ") and got[0].count(b"HTTP/1.1 ") == 2
    assert got[0][got[0].rindex(b"HTTP/1.1 "):] == want[0][:want[0].index(b"Invalid HTTP request received.") + 30]
    # longer: nothing is answered until the rest comes
    req = _post(body, length=len(body) + 3)
    got = _feed(server, [req], 0, True)
    assert got[0] == b"" and not got[2]
    _same(server, [req, b"   "])
    # HTTP/1.0 and Connection: close: answered, then closed
    _same(server, [_post(t, version="1.0")])
    _same(server, [_post(t, extra="Connection: close\r\n")])
    _same(server, [_post(t, extra="Connection: close\r\n") + _post(t)])
    _same(server, [_post(t, extra="Expect: 100-continue\r\n")], 2)
    # past max_body: 413 as soon as the head is in, not after the body
    big = _post("x" * 5000)
    got = _feed(server, [big[:big.index(b"\r\n\r\n") + 4]], 1, True)
    assert got[0].startswith(b"HTTP/1.1 413 ")  # (100 Continue, then the answer)


def test_over_a_socket_body_in_a_later_segment(make_server):
    """A real server: head and body in two sends (as http.client sends them), a
    POST pipelined after a GET, and the connection kept alive between them."""
    import socket
    import time

    import requests

    from tests.test_http_sparql_protocol import read_answers

    ex = "http://example.org/"
    s = make_server()
    nt = "".join(f"<{ex}s{i}> <{ex}p> <{ex}o{i}> .\n" for i in range(3))
    assert requests.post(s.url + "/store?default", data=nt.encode(),
                         headers={"Content-Type": "application/n-triples"}).status_code == 204
    port = int(s.url.rsplit(":", 1)[1])
    q = [f"SELECT ?o WHERE {{ <{ex}s{i}> <{ex}p> ?o }}" for i in range(3)]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        req = _post(q[0])
        cut = req.index(b"\r\n\r\n") + 4
        sock.sendall(req[:cut])
        time.sleep(0.05)
        sock.sendall(req[cut:])
        sock.sendall(_get(q[1]) + _post("query=" + quote_plus(q[2]), FORM))
        got = read_answers(sock, 3)
        r = requests.post(s.url + "/sparql", data=q[2].encode(),
                          headers={"Content-Type": SPARQL, "Accept": "application/sparql-results+json"})
    assert [a[0] for a in got] == [200, 200, 200]
    values = [a[2].decode() for a in got]
    assert all(f"{ex}o{i}" in values[i] for i in range(3))
    assert r.status_code == 200 and r.content == got[2][2]
