"""The interpreter's cyclic GC is held during a short instant and runs right after it
(engine/stream/scheduler.py ``_pause_gc`` / ``_resume_gc``): no collection inside an instant,
the GC always back on afterwards, never turned on when someone else had turned it off."""

from __future__ import annotations

import gc

import orjson

from engine.stream import continuous as C
from engine.stream import scheduler as S

EX = "http://ex.org/"


def test_pause_only_short_instants_and_restore():
    assert gc.isenabled()
    assert not S._pause_gc(None) and gc.isenabled()                  # first instant: cost unknown
    assert not S._pause_gc(S._GC_PAUSE_MS * 2) and gc.isenabled()    # a long one keeps the GC
    assert S._pause_gc(0.5) and not gc.isenabled()
    S._resume_gc(True)
    assert gc.isenabled()
    gc.disable()   # someone else turned it off: left off
    try:
        assert not S._pause_gc(0.5)
        S._resume_gc(False)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_resume_collects_the_young_generation_when_due():
    t0 = gc.get_threshold()[0]
    assert S._pause_gc(0.5)
    keep = [[] for _ in range(t0 + 10)]   # more than a threshold of allocations while held
    assert gc.get_count()[0] >= t0 // 2
    S._resume_gc(True)
    assert gc.isenabled() and gc.get_count()[0] < t0 // 2
    del keep


def test_instants_run_with_the_gc_held_and_it_is_back_on_after(env, monkeypatch):
    _, m = env
    seen = []
    run = C.InstantEvaluator.run

    def spy(self, t):
        seen.append(gc.isenabled())
        return run(self, t)

    monkeypatch.setattr(C.InstantEvaluator, "run", spy)
    monkeypatch.setattr(S, "_GC_PAUSE_MS", 1e9)   # a slow machine's instants count as short too
    m.register_stream("s", EX + "s")
    m.heartbeat("s", 0)
    m.register_query("REGISTER QUERY q AS SELECT ?o FROM s [RANGE 1s STEP 1s] WHERE { ?s ?p ?o }")
    for k in range(6):
        line = orjson.dumps({"s": f"<{EX}x{k}>", "p": f"<{EX}p>", "o": f'"{k}"', "t": k * 1000 + 500})
        m.ingest_ndjson("s", line)
        m.heartbeat("s", (k + 1) * 1000 + 1)
        assert m.drain(20)
        assert gc.isenabled()
    # the first evaluated instant has no latency yet (GC on); the later ones are held
    assert seen[0] and len(seen) >= 5 and not any(seen[1:])
    got = [orjson.loads(e.data)["results"]["bindings"] for e in m.log("q").since(None, from_t=0)
           if e.event == "result"]
    assert [b[0]["o"]["value"] for b in got if b] == [str(k) for k in range(6)]
