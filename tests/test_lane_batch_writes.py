"""The fast lane's batched writes (``--batch-writes``, server.app ``_defer_write``):
the lane answers of one event-loop pass are written when the loop comes round,
byte for byte what an immediate write sends, in each connection's order, and
never behind anything else the connection writes; off, or with no running loop
(the in-process harnesses), every answer is written at once."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from urllib.parse import quote

import pytest
import requests

from bench.lane_profile import make_connector
from engine.database import Database
from server.settings import Settings
from tests.test_http_sparql_protocol import read_answers

EX = "http://example.org/"
DATA = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n<{EX}s{i}> <{EX}q> \"v{i}\" .\n" for i in range(40))


def _get(qs: str, extra: str = "") -> bytes:
    return (f"GET /sparql?query={quote(qs, safe='')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Accept: application/sparql-results+json\r\n{extra}\r\n").encode()


def _q(i: int) -> bytes:
    return _get(f"SELECT ?o WHERE {{ <{EX}s{i % 40}> <{EX}p> ?o }}")


def _blank(out: bytes) -> bytes:
    out = re.sub(rb"date: [^\r]*", b"date: -", out)
    return re.sub(rb"x-request-id: [^\r]*", b"x-request-id: -", out)


@pytest.fixture(scope="module")
def db():
    d = Database()
    d.load_data(DATA, "application/n-triples")
    return d


def _drive(db, settings, reqs: list[bytes], conns: int = 3):
    """Inside a running loop: each of ``conns`` connections receives ``reqs`` in one read,
    one after another as one epoll pass would hand them over; (what each transport held
    right after the pass, what it held once the loop came round, the written pieces)."""
    loop = asyncio.new_event_loop()
    try:
        connect = make_connector(db, loop, settings)

        async def main():
            pairs = [connect() for _ in range(conns)]
            for proto, _tr in pairs:
                proto.data_received(b"".join(reqs))
            during = [list(tr.out) for _, tr in pairs]
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            after = [list(tr.out) for _, tr in pairs]
            for proto, _ in pairs:
                if proto.timeout_keep_alive_task is not None:
                    proto.timeout_keep_alive_task.cancel()
            return during, after

        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_one_pass_is_answered_then_written_byte_for_byte(db):
    reqs = [_q(i) for i in range(3)]
    # a request the lane declines (its inline admission is timed by the wall clock: on a loaded
    # machine a first run can go over it) is answered through httptools and written at once;
    # the shape is learned in the first passes, so one of a few passes shows the batching
    for _attempt in range(4):
        during, after = _drive(db, Settings(), reqs)
        if during == [[], [], []]:
            break
    assert during == [[], [], []]  # nothing written while the pass's requests are answered
    assert all(len(a) == 1 for a in after)  # then each connection's answers in one write
    during0, after0 = _drive(db, Settings(batch_writes=False), reqs)
    assert all(len(d) == 3 for d in during0)  # off: each answer written at once
    assert [_blank(a[0]) for a in after] == [_blank(b"".join(d)) for d in during0]
    answers = _blank(after[0][0]).split(b"HTTP/1.1 200 OK")[1:]
    assert len(answers) == 3 and all(f"{EX}o{i}".encode() in a for i, a in enumerate(answers))


def test_a_failing_write_keeps_no_other_answer_back(db):
    loop = asyncio.new_event_loop()
    try:
        connect = make_connector(db, loop, Settings())

        async def main():
            pairs = [connect() for _ in range(3)]
            aborted = []

            def broken(data):
                raise RuntimeError("write failed")

            pairs[0][1].write = broken
            pairs[0][1].abort = lambda: aborted.append(True)
            for k, (proto, _tr) in enumerate(pairs):
                proto.data_received(_q(k))
            await asyncio.sleep(0)
            for proto, _ in pairs:
                if proto.timeout_keep_alive_task is not None:
                    proto.timeout_keep_alive_task.cancel()
            return aborted, [b"".join(tr.out) for _, tr in pairs[1:]]

        aborted, outs = loop.run_until_complete(main())
        assert aborted == [True]
        assert [f"{EX}o{k}".encode() in out for k, out in zip((1, 2), outs, strict=True)] == [True, True]
    finally:
        loop.close()


def test_no_running_loop_writes_at_once(db):
    loop = asyncio.new_event_loop()
    try:
        proto, tr = make_connector(db, loop, Settings())()
        proto.data_received(_q(1))
        assert len(tr.out) == 1 and b"o1" in tr.out[0]  # the in-process harnesses see each answer
        assert proto._outbox is None
        if proto.timeout_keep_alive_task is not None:
            proto.timeout_keep_alive_task.cancel()
    finally:
        loop.close()


def test_a_pipelining_connection_has_at_most_defer_answers_waiting(db):
    from server.app import DEFER_ANSWERS

    n = 2 * DEFER_ANSWERS + 5
    during, after = _drive(db, Settings(), [_q(i) for i in range(n)], conns=1)
    assert during[0] and all(piece.count(b"HTTP/1.1 200") <= DEFER_ANSWERS for piece in after[0])
    body = b"".join(after[0])
    assert body.count(b"HTTP/1.1 200") == n
    assert [int(m) for m in re.findall(rb"example.org/o(\d+)", body)] == [i % 40 for i in range(n)]


def test_one_clients_requests_one_at_a_time_are_written_at_once(db):
    """Answers that do not alternate between connections gain nothing from waiting: the
    second and later requests of a lone client are written as soon as they are answered."""
    loop = asyncio.new_event_loop()
    try:
        connect = make_connector(db, loop, Settings())

        async def main():
            proto, tr = connect()
            seen = []
            for i in range(4):
                tr.out.clear()
                proto.data_received(_q(i))
                seen.append(len(tr.out))
                await asyncio.sleep(0)
                assert b"".join(tr.out).count(b"HTTP/1.1 200") == 1
            other, tr2 = connect()  # another connection's answer between: batched again
            other.data_received(_q(7))
            tr.out.clear()
            proto.data_received(_q(8))
            seen.append((len(tr2.out), len(tr.out)))
            await asyncio.sleep(0)
            assert len(tr2.out) == 1 and len(tr.out) == 1
            for p in (proto, other):
                if p.timeout_keep_alive_task is not None:
                    p.timeout_keep_alive_task.cancel()
            return seen

        assert loop.run_until_complete(main()) == [0, 1, 1, 1, (0, 0)]
    finally:
        loop.close()


def _server(make_server, **kw):
    s = make_server(**kw)
    r = requests.post(s.url + "/store?default", data=DATA.encode(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 204
    return s, int(s.url.rsplit(":", 1)[1])


@pytest.mark.parametrize("batch", [True, False])
def test_lane_answers_go_before_an_error_httptools_writes_at_once(make_server, batch):
    s, port = _server(make_server, batch_writes=batch)
    # (a shape whose inline run went over its wall-clock budget on a loaded machine is answered
    # by the ASGI path, whose pipelined answers uvicorn drops when it writes its immediate 400:
    # a few connections, one of which the lane answers)
    for _attempt in range(4):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_q(1) + _q(2) + b"BLAH /x HTTP/1.1\r\n\r\n")
            try:
                got = read_answers(sock, 3)
                break
            except ConnectionError:
                got = None
    assert got is not None, "every attempt lost an answer before the 400"
    assert [a[0] for a in got[:2]] == [200, 200]
    assert f"{EX}o1".encode() in got[0][2] and f"{EX}o2".encode() in got[1][2]
    assert got[2][0] == 400


def test_pipelined_lane_ordinary_and_close_keep_their_order(make_server):
    s, port = _server(make_server)
    status = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    data = _q(3) + _q(4) + status + _q(5) + _get(f"SELECT ?o WHERE {{ <{EX}s6> <{EX}p> ?o }}", "Connection: close\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        got = read_answers(sock, 5)
        assert sock.recv(1) == b""
    assert [a[0] for a in got] == [200] * 5
    assert [f"{EX}o{i}".encode() in got[k][2] for k, i in ((0, 3), (1, 4), (3, 5), (4, 6))] == [True] * 4
    assert b'"service"' in got[2][2]


def test_many_connections_at_once_each_get_their_answers(make_server):
    s, port = _server(make_server)
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(12)]
    try:
        for rnd in range(5):
            for k, sock in enumerate(socks):
                sock.sendall(_q(k + rnd) + _q(k + rnd + 1))
            for k, sock in enumerate(socks):
                got = read_answers(sock, 2)
                assert [a[0] for a in got] == [200, 200]
                assert f"{EX}o{(k + rnd) % 40}\"".encode() in got[0][2]
                assert f"{EX}o{(k + rnd + 1) % 40}\"".encode() in got[1][2]
    finally:
        for sock in socks:
            sock.close()


def test_a_client_that_does_not_read_holds_no_one_back(make_server):
    s, port = _server(make_server)
    stuck = socket.create_connection(("127.0.0.1", port), timeout=10)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        burst = b"".join(_q(i) for i in range(200))
        stuck.setblocking(False)
        sent = 0
        t_end = time.monotonic() + 3
        while time.monotonic() < t_end:  # pipeline requests without reading an answer
            try:
                sent += stuck.send(burst)
            except BlockingIOError:
                time.sleep(0.01)
            if sent > 2 * len(burst):
                break
        with socket.create_connection(("127.0.0.1", port), timeout=10) as other:
            t0 = time.monotonic()
            for i in range(20):
                other.sendall(_q(i))
                got = read_answers(other, 1)
                assert got[0][0] == 200 and f"{EX}o{i}\"".encode() in got[0][2]
            assert time.monotonic() - t0 < 10
    finally:
        stuck.close()
