"""The serving loop's bounded poll before it sleeps (``--poll-us``, server.idle_poll): off
it is not there; on, the answers are byte for byte the same, the spin is taken after lane
answers, stops at its bound, adapts, and an idle server burns no CPU."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from urllib.parse import quote

import requests

from server.idle_poll import PROBE_EVERY, IdlePoll, idle_poll_for

EX = "http://example.org/"
DATA = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n" for i in range(40))


def _q(i: int) -> bytes:
    text = f"SELECT ?o WHERE {{ <{EX}s{i % 40}> <{EX}p> ?o }}"
    return (f"GET /sparql?query={quote(text, safe='')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Accept: application/sparql-results+json\r\n\r\n").encode()


def _read_one(sock: socket.socket, buf: bytes) -> tuple[bytes, bytes]:
    """One answer (head and content-length body) off ``sock``; (answer, the bytes after it)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1))
    while len(rest) < n:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        rest += chunk
    return head + b"\r\n\r\n" + rest[:n], rest[n:]


def _serve(make_server, **kw):
    s = make_server(**kw)
    r = requests.post(s.url + "/store?default", data=DATA.encode(),
                      headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 204
    return s, int(s.url.rsplit(":", 1)[1])


def _rounds(port: int, conns: int = 3, rounds: int = 40) -> list[bytes]:
    """``conns`` keep-alive connections, each sending a request per round as soon as its
    previous answer arrived; every answer with its date and request id blanked."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(conns)]
    bufs = [b""] * conns
    out = []
    try:
        for r in range(rounds):
            for k, sock in enumerate(socks):
                sock.sendall(_q(r * conns + k))
            for k, sock in enumerate(socks):
                answer, bufs[k] = _read_one(sock, bufs[k])
                answer = re.sub(rb"date: [^\r]*", b"date: -", answer)
                out.append(re.sub(rb"x-request-id: [^\r]*", b"x-request-id: -", answer))
    finally:
        for sock in socks:
            sock.close()
    return out


def _poll_of(server):
    box = getattr(server._server.server_state, "jindou_outbox", None)
    return None if box is None else box.poll


def test_off_is_the_old_behaviour(make_server):
    assert idle_poll_for(None, 0) is None
    s, port = _serve(make_server)  # the default: off
    _rounds(port, rounds=5)
    assert s._server.server_state.jindou_outbox.poll is None


def test_on_answers_byte_for_byte_and_the_spin_is_taken(make_server):
    off, port_off = _serve(make_server, poll_us=0)
    on, port_on = _serve(make_server, poll_us=200)
    for conns in (1, 3):
        a = _rounds(port_off, conns=conns)
        b = _rounds(port_on, conns=conns)
        assert a == b
        assert len(b) == 40 * conns and all(b"HTTP/1.1 200 OK" in x for x in b)
        if conns == 1:  # a lone client: a spin after (nearly) every answer
            poll = _poll_of(on)
            assert isinstance(poll, IdlePoll) and poll.spins > 0 and poll.steps >= poll.spins
    # three clients answered in turn: seen as such (no spin starts on an answer to another
    # connection than the one before: test_answers_alternating_between_connections_end_a_spin)
    assert poll.mixed >= 100


def test_answers_alternating_between_connections_end_a_spin():
    loop = asyncio.new_event_loop()
    try:
        poll = IdlePoll(loop, 100_000)  # 100 ms: only the other connection's answer ends it

        async def run():
            poll.after_pass(1)  # the first answer of a connection: no spin
            assert not poll.active
            poll.after_pass(1)
            assert poll.active
            t0 = time.perf_counter()
            poll.after_pass(2)
            while poll.active:
                await asyncio.sleep(0)
            return time.perf_counter() - t0

        assert loop.run_until_complete(run()) < 0.05
        assert poll.spins == 1 and poll.mixed == 2
    finally:
        loop.close()


def test_an_idle_server_burns_no_cpu(make_server):
    s, port = _serve(make_server, poll_us=2000)
    _rounds(port, conns=1, rounds=20)
    assert _poll_of(s).spins > 0
    time.sleep(0.2)  # the last spin (at most 2 ms) is over
    poll = _poll_of(s)
    steps = poll.steps
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(3)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    assert poll.steps == steps and not poll.active  # no spin while idle
    assert cpu < 0.15 * wall  # (the whole test process: generous for a loaded machine)


def test_the_spin_stops_at_its_bound_and_adapts():
    loop = asyncio.new_event_loop()
    try:
        poll = IdlePoll(loop, 2000)

        async def quiet_spin():
            t0 = time.perf_counter()
            poll.after_pass()
            while poll.active:
                await asyncio.sleep(0)
                assert time.perf_counter() - t0 < 5  # (a hang would fail here, not spin forever)
            return time.perf_counter() - t0

        took = loop.run_until_complete(quiet_spin())
        assert took >= 2000e-6 and poll.expired == 1 and poll.hits == 0 and poll.steps >= 1
        assert poll.window == 1_000_000  # a spin that caught nothing halves the next one
        loop.run_until_complete(quiet_spin())
        assert poll.window == 500_000  # a quarter of the bound: still open
        loop.run_until_complete(quiet_spin())
        assert poll.window == 0  # under a quarter of the bound: closed
        spins = poll.spins
        for _ in range(PROBE_EVERY - 1):
            poll.after_pass()
        assert poll.spins == spins and not poll.active  # closed: the loop sleeps at once
        loop.run_until_complete(quiet_spin())  # ... but every PROBE_EVERY answers it probes
        assert poll.spins == spins + 1 and poll.window == 1_000_000

        async def busy_spin():
            poll.after_pass()
            poll.after_pass()  # input answered while the spin runs: caught, deadline moved
            while poll.active:
                await asyncio.sleep(0)

        loop.run_until_complete(busy_spin())
        assert poll.hits == 1 and poll.window == poll.bound  # a spin that paid re-opens in full
    finally:
        loop.close()
