"""The scheduler's index of due queries (engine/stream/scheduler.py): choosing the next job does
not look at the queries that are not due, and every ready instant is still evaluated once, in
order, round-robin, across registrations and deletions."""

from __future__ import annotations

import orjson

from engine.database import Database
from engine.stream.manager import StreamManager
from engine.stream.windows import Trigger

EX = "http://ex.org/"


def _q(name: str, stream: str, step_ms: int = 100) -> str:
    return (f"REGISTER QUERY {name} AS SELECT ?s ?o FROM STREAM <{EX}{stream}> "
            f"[RANGE {2 * step_ms}ms STEP {step_ms}ms] WHERE {{ ?s <{EX}p> ?o }}")


def test_idle_queries_are_not_looked_at_per_instant(monkeypatch):
    """500 queries on a stream that does not move, one on a busy stream: evaluating the busy
    query's instants looks at the idle queries' triggers a bounded number of times, not once per
    instant each (the scan this index replaced)."""
    calls = {"idle": 0}
    orig = Trigger.ready_upto

    def counting(self, progress):
        if self.streams == ("idle",):
            calls["idle"] += 1
        return orig(self, progress)

    monkeypatch.setattr(Trigger, "ready_upto", counting)
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("idle", EX + "idle")
        m.register_stream("busy", EX + "busy")
        m.heartbeat("idle", 0)
        m.heartbeat("busy", 0)
        for i in range(500):
            m.register_query(_q(f"i{i}", "idle"))
        m.register_query(_q("b", "busy"))
        assert m.drain(30)
        calls["idle"] = 0
        for k in range(1, 201):   # 200 instants of the busy query, one heartbeat each
            m.ingest_ndjson("busy", orjson.dumps({"s": f"<{EX}s{k}>", "p": f"<{EX}p>", "o": f"<{EX}o>",
                                                  "t": k * 100 - 50}))
            m.heartbeat("busy", k * 100 + 1)
        assert m.drain(60)
        assert m.query("b")["evaluated"] == 201   # instants 0..20000
        assert calls["idle"] == 0, calls
        assert all(m.query(f"i{i}")["evaluated"] == 0 for i in (0, 499))
    finally:
        m.close()
        db.close()


def test_every_instant_once_in_order_round_robin_with_churn():
    """Queries with different steps and streams, some registered and deleted while instants are
    ready: each gets every instant once, in order."""
    db = Database()
    m = StreamManager(db, retain=1000, idle_after=10**6)
    try:
        for s in ("a", "b"):
            m.register_stream(s, EX + s)
            m.heartbeat(s, 0)
        m.register_query(_q("fast", "a", 100))
        m.register_query(_q("slow", "a", 300))
        m.register_query(_q("other", "b", 200))
        for k in range(1, 31):
            m.ingest_ndjson("a", orjson.dumps({"s": f"<{EX}s{k}>", "p": f"<{EX}p>", "o": f"<{EX}o>", "t": k * 100}))
            m.ingest_ndjson("b", orjson.dumps({"s": f"<{EX}t{k}>", "p": f"<{EX}p>", "o": f"<{EX}o>", "t": k * 100}))
            if k == 10:
                m.register_query(_q("late", "a", 100))
            if k == 20:
                m.delete_query("slow")
        m.heartbeat("a", 3001)
        m.heartbeat("b", 3001)
        assert m.drain(60)
        for name, step, first in (("fast", 100, 0), ("other", 200, 0)):
            ids = [e.id for e in m.log(name).since(None, from_t=-1) if e.event == "result"]
            assert ids == list(range(first, 3001, step)), name
        late = [e.id for e in m.log("late").since(None, from_t=-1) if e.event == "result"]
        assert late == list(range(late[0], 3001, 100)) and late[0] <= 1100
        assert "slow" not in {q["id"] for q in m.queries()}
    finally:
        m.close()
        db.close()


def test_registered_queries_keep_their_plans_and_gc_sees_each_window_once(monkeypatch):
    """More queries than the plan memo holds (1,024), evaluated round-robin: none is re-planned
    after its registration (the memo was cleared over and over), deleted ones are unpinned; the
    stream GC asks a window's horizon once per distinct window, not once per query."""
    from engine.plan import planner
    from engine.stream import gc as sgc
    from engine.stream.transient import TransientStore

    made = {"n": 0}
    orig_make = planner.make_plan

    def counting_make(query):
        made["n"] += 1
        return orig_make(query)

    monkeypatch.setattr(planner, "make_plan", counting_make)
    asked = {"n": 0}
    orig_h = TransientStore.horizon_for

    def counting_h(self, window, nxt):
        asked["n"] += 1
        return orig_h(self, window, nxt)

    monkeypatch.setattr(TransientStore, "horizon_for", counting_h)
    db = Database()
    m = StreamManager(db)
    m._scheduler.batching = False
    n = 1100
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        for i in range(n):
            m.register_query(f"REGISTER QUERY q{i} AS SELECT ?o FROM STREAM <{EX}s> [RANGE 200ms STEP 100ms] "
                             f"WHERE {{ <{EX}x{i}> <{EX}p> ?o }}")
        planned = made["n"]
        assert planned <= n + 10
        for t in (100, 200, 300):
            m.ingest_ndjson("s", orjson.dumps({"s": f"{EX}x1", "p": f"{EX}p", "o": f"{EX}o{t}", "t": t}))
            m.heartbeat("s", t)
            assert m.drain(120)
        assert sum(q.evaluated for q in m._reg.queries.values()) >= 3 * n
        assert made["n"] - planned <= 10, made["n"] - planned   # not 3,300 re-plans
        asked["n"] = 0
        assert sgc.stream_horizon(m._reg, "s") is not None
        assert asked["n"] == 1
        q0 = m._reg.queries["q0"].evaluator.query
        assert id(q0) in planner._PINNED
        m.delete_query("q0")
        assert id(q0) not in planner._PINNED
    finally:
        m.close()
        db.close()
    assert not any(id(q.evaluator.query) in planner._PINNED for q in m._reg.queries.values())   # unpinned at close
