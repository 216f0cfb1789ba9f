"""bench.lane_mix: the throughput phase's requests in its order, every one answered on
its connection (inline or completed on the loop), the CPU per request measured."""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

from bench import http_load, lane_mix, lubm
from bench.lane_profile import make_connector
from engine.database import Database


def test_requests_follow_the_throughput_order():
    reqs = lane_mix.requests("s", 40)
    for i, r in enumerate(reqs):
        k, j = i % lane_mix.CONNECTIONS, i // lane_mix.CONNECTIONS
        fam = http_load.FAMILIES[(j + k) % len(http_load.FAMILIES)]  # as http_load.throughput's client k
        ents = http_load._entities(fam.kind, 60)
        text = fam.text(ents[(j * 7 + k) % len(ents)], f"s-{k}-{j}")
        assert r == http_load.request_bytes("/sparql", text, 7878, fam.accept)
        assert unquote(r.split(b" ")[1].split(b"=", 1)[1].decode()) == text


def test_run_answers_every_request(tmp_path):
    path = tmp_path / "d.nt"
    lubm.generate(path, triples=6000, seed=3)
    db = Database()
    db.load_file(str(path))
    loop = asyncio.new_event_loop()
    try:
        connect = make_connector(db, loop)
        conns = [connect() for _ in range(lane_mix.CONNECTIONS)]
        seen = []
        for _proto, tr in conns:  # what run() clears after each round
            tr.out = _Kept(seen)
        us, slow = lane_mix.run(conns, lane_mix.requests("t", 80), loop)
        assert us > 0 and 0 <= slow <= 80
        assert len(seen) == 80 and all(a.startswith(b"HTTP/1.1 200 OK\r\n") for a in seen)
        us, slow = lane_mix.run(conns, lane_mix.requests("u", 80), loop)
        # (how many run inline depends on the machine: the lane's admission reads the wall clock)
        assert len(seen) == 160 and us > 0 and 0 <= slow <= 80
    finally:
        loop.close()


class _Kept(list):
    """A transport's written answers, also kept in ``seen`` (run() clears the list)."""

    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def append(self, data):
        self.seen.append(data)
        super().append(data)


def test_lane_ops_counts_the_mix(tmp_path):
    """bench.lane_ops: a traced round counts opcodes and Python calls of every request (a
    lane request runs dozens of Python functions), leaves no tracer and the budgets as they were."""
    import sys

    from bench import lane_ops
    from server.api import common

    path = tmp_path / "d.nt"
    lubm.generate(path, triples=6000, seed=3)
    db = Database()
    db.load_file(str(path))
    loop = asyncio.new_event_loop()
    try:
        connect = make_connector(db, loop)
        conns = [connect() for _ in range(lane_mix.CONNECTIONS)]
        lane_mix.run(conns, lane_mix.requests("w", 80), loop)
        budget = common.INLINE_BUDGET
        c, slow = lane_ops.count(conns, lane_mix.requests("t", 40), loop, by_function=True)
        assert c.calls >= 40 * 10 and c.ops > c.calls and 0 <= slow <= 40
        assert any("read_head" in k for k in c.per)
        assert sys.gettrace() is None and common.INLINE_BUDGET == budget
    finally:
        loop.close()
