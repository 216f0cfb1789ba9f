"""A small answer on the ordinary ASGI path leaves in one write (server/coalesce.py):
the head is held for the body; a head whose body does not follow in the same
loop iteration, a large body, a close: nothing is lost, reordered or delayed past
the iteration."""

from __future__ import annotations

import asyncio

import pytest

from bench.lane_profile import make_protocol
from engine.database import Database
from server.coalesce import HOLD_MAX, HeldHead


class _Tr:
    def __init__(self):
        self.calls: list[tuple[str, bytes]] = []
        self.closed = False

    def write(self, data):
        self.calls.append(("write", bytes(data)))

    def writelines(self, chunks):
        self.calls.append(("writelines", b"".join(chunks)))

    def close(self):
        self.calls.append(("close", b""))
        self.closed = True

    def is_closing(self):
        return self.closed

    def get_write_buffer_size(self):
        return 0

    def get_extra_info(self, name, default=None):
        return name


def test_head_and_body_in_one_write():
    loop = asyncio.new_event_loop()
    try:
        tr = _Tr()
        h = HeldHead(tr, loop)
        h.write(b"HEAD")
        assert tr.calls == []
        h.write(b"body")
        assert tr.calls == [("write", b"HEADbody")]
        big = b"x" * (HOLD_MAX + 1)
        h.write(b"H2")
        h.write(big)
        assert tr.calls[-1] == ("writelines", b"H2" + big)
        h.write(big)  # nothing held: straight through
        assert tr.calls[-1] == ("write", big)
        loop.run_until_complete(asyncio.sleep(0))
        assert len(tr.calls) == 3  # the armed flush found nothing held
        assert h.get_extra_info("sockname") == "sockname"  # everything else passes through
    finally:
        loop.close()


def test_a_lone_head_goes_out_at_the_next_iteration_and_before_a_close():
    loop = asyncio.new_event_loop()
    try:
        tr = _Tr()
        h = HeldHead(tr, loop)
        h.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        loop.run_until_complete(asyncio.sleep(0))
        assert tr.calls == [("write", b"HTTP/1.1 100 Continue\r\n\r\n")]
        h.write(b"HEAD")
        h.close()
        assert tr.calls[1:] == [("write", b"HEAD"), ("close", b"")]
        loop.run_until_complete(asyncio.sleep(0))
        assert len(tr.calls) == 3
    finally:
        loop.close()


@pytest.fixture(scope="module")
def proto():
    db = Database()
    db.load_data(b"<urn:a> <urn:p> <urn:b> .\n<urn:a> <urn:p> <urn:c> .\n", "application/n-triples")
    loop = asyncio.new_event_loop()
    p, tr = make_protocol(db, loop)
    yield p, tr, loop
    loop.close()


def _run(p, tr, loop, req: bytes) -> list:
    tr.out.clear()
    p.data_received(req)
    for _ in range(2000):
        if p.cycle is not None and p.cycle.response_complete and tr.out:
            break
        loop.run_until_complete(asyncio.sleep(0.001))
    loop.run_until_complete(asyncio.sleep(0))
    if p.timeout_keep_alive_task is not None:
        p.timeout_keep_alive_task.cancel()
        p.timeout_keep_alive_task = None
    return list(tr.out)


@pytest.mark.parametrize("body", [b"SELECT ?o WHERE { <urn:a> <urn:p> ?o }", b"ASK {}", b"SELEC oops"])
def test_post_answers_leave_in_one_write(proto, body):
    p, tr, loop = proto
    req = (b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/sparql-query\r\n"
           b"Accept: application/sparql-results+json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    out = _run(p, tr, loop, req)
    assert len(out) == 1, out
    head, _, payload = out[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 ")
    assert int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]) == len(payload)
    if body.startswith(b"SELECT"):
        assert b"urn:b" in payload and b"urn:c" in payload
    if body == b"SELEC oops":
        assert head.startswith(b"HTTP/1.1 400")
