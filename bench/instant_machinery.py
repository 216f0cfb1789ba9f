"""What an evaluated instant costs besides its evaluation and rendering (issue 13 item 2).

``python -m bench.instant_machinery --workload citybench --queries C1,C4 [--rounds 2]``

Each query is replayed as ``python -m bench streams`` does (:func:`bench.streams.run_jindou`),
with a few timers only (each adds well under a microsecond): the evaluation proper
(``InstantEvaluator.evaluate`` less the making of its ``QueryContext``, which counts as
machinery) and the rendering (``InstantEvaluator.render``). Per instant:

* ``machinery``: the reported latency (``last_latency_ms``: the scheduler's check and capture,
  ``run``) less the evaluation proper and the rendering -- what the brief's "<= 10 µs" is about;
  split into what was spent before ``run`` (the check and the capture) and ``run``'s own
  time less the evaluation proper and the rendering (a fourth timer, around ``run``);
* ``to event``: from the progress publication that made the instant ready (the replay's
  heartbeat) to the event in the log, less the same -- the worker's wake-up and its steps
  before and after the timed part included (what delays the result);
* for instants the relevance or delta check reused, their latency (no evaluation).

Cold, as the bench runs them: the worker is woken for each instant (``--thrash-mb 64``: and
its caches emptied first, the same for every instant whatever else the machine runs: an A/B on
a shared machine). Medians in µs. The
script runs on older commits too (for A/B: ``PYTHONPATH=<tree> python <this file>``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict

from bench import streams as bs


def measure(wl: bs.Workload, thrash_mb: int = 0) -> dict:
    from engine.stream import continuous as C  # noqa: PLC0415
    from engine.stream import registry as R  # noqa: PLC0415
    from engine.stream import scheduler as S  # noqa: PLC0415

    pc = time.perf_counter_ns
    acc = [0, 0]       # evaluation + render ns, QueryContext ns, of the instant in progress
    pub = [0]
    out: dict = defaultdict(list)
    undo = []

    depth = [0]   # inside evaluate, not inside the making of its context

    def wrap(owner, name, sign, inner=False):
        fn = getattr(owner, name)

        def timed(*a, **kw):
            if inner and depth[0] != 1:   # a context made elsewhere (prepared after an event)
                return fn(*a, **kw)
            depth[0] += 1
            t0 = pc()
            try:
                return fn(*a, **kw)
            finally:
                acc[0] += sign * (pc() - t0)
                depth[0] -= 1

        setattr(owner, name, timed)
        undo.append((owner, name, fn))

    wrap(C.InstantEvaluator, "evaluate", 1)
    wrap(C.InstantEvaluator, "render", 1)
    # the instant's QueryContext counts as machinery, not evaluation (made inside evaluate): the
    # whole making of it (the call of the class, not only its __init__: the allocation and the
    # arguments cost as much on a cold worker)
    if hasattr(C.InstantEvaluator, "_context"):
        wrap(C.InstantEvaluator, "_context", -1, inner=True)
    else:
        wrap(C, "QueryContext", -1, inner=True)   # the name evaluate() calls
    run = C.InstantEvaluator.run

    def timed_run(ev, t):
        t0 = pc()
        data, ms = run(ev, t)
        acc[1] = pc() - t0   # run's own time: the rest of the latency was spent before it
        return data, ms

    C.InstantEvaluator.run = timed_run
    undo.append((C.InstantEvaluator, "run", run))
    publish = R.Registry.publish

    def published(self, st):
        publish(self, st)
        pub[0] = pc()

    R.Registry.publish = published
    undo.append((R.Registry, "publish", publish))
    store_event = S.Scheduler._store_event

    def stored(q, t, state, prefix, data, ms):
        now = pc()
        e = acc[0]
        acc[0] = 0
        own = acc[1]
        acc[1] = 0
        if ms is not None:
            kind = "eval" if e else "reuse"
            out[kind].append(ms * 1000.0 - e / 1000.0)
            out[kind + "_event"].append((now - pub[0]) / 1000.0 - e / 1000.0)
            if e and own:
                out["pre"].append(ms * 1000.0 - own / 1000.0)
                out["outer"].append((own - e) / 1000.0)
        return store_event(q, t, state, prefix, data, ms)

    S.Scheduler._store_event = staticmethod(stored)
    undo.append((S.Scheduler, "_store_event", staticmethod(store_event)))
    if thrash_mb:   # the same cold start for every instant, whatever else the machine runs
        import numpy as np  # noqa: PLC0415

        junk = np.ones(thrash_mb << 17, dtype=np.int64)
        step_one = S.Scheduler._step_one

        def cold_step(sched, q, t, last):
            junk.sum()   # reads every cache line and page of the buffer: caches and TLB evicted
            junk[::512] += 1
            return step_one(sched, q, t, last)

        S.Scheduler._step_one = cold_step
        undo.append((S.Scheduler, "_step_one", step_one))
    try:
        bs.run_jindou(wl, True, say=lambda *_: None)
    finally:
        for owner, name, fn in reversed(undo):
            setattr(owner, name, fn)
    return out


def _med(r: dict, k: str) -> str:
    v = r.get(k)
    return f"{statistics.median(v):.1f}" if v else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instant_machinery", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="citybench", choices=("citybench", "lsbench-small"))
    ap.add_argument("--queries", default="C1,C4")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--floor", action="store_true", help="the queries' floor twins (bench.instant_floor)")
    ap.add_argument("--thrash-mb", type=int, default=0,
                    help="read and write a buffer of this many MiB on the worker before each instant "
                         "(64: past the L3 cache), so every instant starts equally cold")
    a = ap.parse_args(argv)
    quiet = lambda *_: None  # noqa: E731
    print("| query | evaluated | machinery µs | check+capture µs | run less evaluation µs | to event µs "
          "| reused | reused latency µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for qid in [q.strip().upper() for q in a.queries.split(",") if q.strip()]:
        if a.workload == "citybench":
            wl = bs.load_citybench([qid], a.minutes, say=quiet)
        else:
            wl = bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, say=quiet, name="lsbench-small")
        if a.floor:   # as bench.instant_floor makes them (the twin's predicate a stored term)
            from bench.instant_floor import ABSENT, FLOOR_GRAPH, floor_twin  # noqa: PLC0415

            static = dict(wl.static_nt)
            static[FLOOR_GRAPH] = f"<{FLOOR_GRAPH}> <{ABSENT}> <{FLOOR_GRAPH}> .\n".encode()
            wl = bs.Workload(wl.name, [floor_twin(bq) for bq in wl.queries], static, wl.streams,
                             wl.start_ms, wl.end_ms, wl.config)
        r = measure(wl, a.thrash_mb)

        print(f"| {qid} | {len(r.get('eval', []))} | {_med(r, 'eval')} | {_med(r, 'pre')} | {_med(r, 'outer')} "
              f"| {_med(r, 'eval_event')} | {len(r.get('reuse', []))} | {_med(r, 'reuse')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
