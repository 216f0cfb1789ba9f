"""The joint bound on all continuous queries' rendered-term caches (engine.stream.cache_budget):
with many queries on a stream of ever-new IRIs the caches together stay under the bound (they
grew to ~25 MB per query before), a query deleted gives its entries back, and the answers are
the same as with the caches unbounded (a cleared cache renders the terms again)."""

from __future__ import annotations

import gc

import orjson
import pytest

from engine.database import Database
from engine.stream import cache_budget
from engine.stream.cache_budget import SharedBound
from engine.stream.manager import StreamManager

EX = "http://ex.org/"


def test_shared_bound_shares_and_releases():
    b = SharedBound(100, 10)

    class Owner:
        pass

    owners = [Owner() for _ in range(4)]
    slots = [b.join(o) for o in owners]
    assert b.share() == 25
    b.set(slots[0], 90)
    # the sum would pass 100 and 30 is above the share of 25: clear first
    assert b.over(slots[1], 30)
    # within the share: fine even with the sum over (the big one clears at its next render)
    assert not b.over(slots[1], 20)
    assert not b.over(slots[0], 91) and b.over(slots[0], 101)   # alone it may fill up to the total
    b.set(slots[1], 20)
    assert b.held == 110
    del owners[0]
    gc.collect()
    assert b.members == 3 and b.held == 20 and b.share() == 33


@pytest.fixture
def small_bound(monkeypatch):
    bound = SharedBound(2000, 100)
    monkeypatch.setattr(cache_budget, "JSON_TERMS", bound)
    return bound


def _run(n_queries: int, steps: int, per_step: int):
    """Instants' events of ``n_queries`` queries over a stream of always-new subjects."""
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("s", EX + "s")
        for k in range(n_queries):
            sel = "?s ?o" if k % 2 else "?s"
            m.register_query(f"REGISTER QUERY q{k} AS SELECT {sel} FROM STREAM <{EX}s> [RANGE 1s STEP 1s] "
                       f"WHERE {{ ?s <{EX}p{k % 3}> ?o }}")
        for step in range(steps):
            t = 1000 * step
            rows = [{"s": f"<{EX}x{step}_{i}>", "p": f"<{EX}p{i % 3}>", "o": f'"{i % 50}"', "t": t + i % 500}
                    for i in range(per_step)]
            m.ingest_ndjson("s", b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
            m.heartbeat("s", t + 999)
        assert m.drain()
        return {k: [bytes(e.data) for e in m.log(f"q{k}").since(None, from_t=-1)] for k in range(n_queries)}
    finally:
        m.close()


def test_many_queries_stay_under_the_joint_bound_with_the_same_answers(small_bound):
    bounded = _run(12, 8, 300)
    assert small_bound.clears > 0          # the bound was reached: caches started over
    # while the queries lived their caches held at most the bound plus one share per cache
    # (a cache within its share may fill while another, over its share, clears at its next render)
    assert small_bound.held <= small_bound.total + small_bound.members * small_bound.share()
    gc.collect()
    assert small_bound.members == 0 and small_bound.held == 0   # deleted with their manager
    wide = SharedBound(1 << 40, 1 << 40)
    cache_budget.JSON_TERMS = wide        # (monkeypatch restores the small bound's original)
    unbounded = _run(12, 8, 300)
    assert wide.clears == 0
    assert bounded == unbounded
    assert sum(len(v) for v in bounded.values()) >= 12 * 7


def test_the_joint_bound_caps_what_unbounded_caches_hold(small_bound):
    """The old behaviour (no joint bound) held every query's terms: far above the bound."""
    peak = [0]
    orig = SharedBound.set

    def spy(self, slot, n):
        orig(self, slot, n)
        if self is cache_budget.JSON_TERMS:   # (not the result logs' byte total, a SharedBound too)
            peak[0] = max(peak[0], self.held)

    SharedBound.set = spy
    try:
        _run(12, 8, 300)
        bounded_peak = peak[0]
        peak[0] = 0
        cache_budget.JSON_TERMS = SharedBound(1 << 40, 1 << 40)
        _run(12, 8, 300)
        unbounded_peak = peak[0]
    finally:
        SharedBound.set = orig
    assert unbounded_peak > 3 * small_bound.total
    assert bounded_peak <= small_bound.total + 24 * small_bound.share()


def test_kept_fragments_take_their_own_size():
    """orjson.dumps returns bytes in a 4 KiB allocation; a cache of 65,536 of them held 256 MiB per
    query. The kept fragments are copies of their own size (~100 bytes with the dict's share)."""
    import tracemalloc

    from engine.exec.evaluate import QueryContext
    from engine.stream.continuous import _JsonTerms

    db = Database()
    nt = "".join(f"<{EX}s{i}> <{EX}p> \"v{i}\" .\n" for i in range(2000)).encode()
    db.load_data(nt, "application/n-triples")
    ctx = QueryContext(db.store.snapshot())
    ids = ctx.intern([f"<{EX}s{i}>" for i in range(2000)])
    js = _JsonTerms()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = js.render(list(ids), ctx)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert out[7] == orjson.dumps({"type": "uri", "value": f"{EX}s7"})
    assert len(js._d) == 2000
    assert held < 2000 * 400, held      # 2000 x 4 KiB = 8 MB before
