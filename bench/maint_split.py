"""Maintained instants split by who wrote the event and by window kind (issue 13).

``python -m bench.maint_split streams --workload lsbench-walk --varied 32 --seed 7 --minutes 1 --peers jindou``
(the arguments after the first are ``python -m bench``'s; run from a neutral directory).

Wraps :meth:`Scheduler._step_maintained` / :meth:`InstantEvaluator.maintained_instant` and
prints, per (tumbling / sliding, event from ``Maintained._done`` -- written whole by the
ingestion thread -- or written by the worker at the instant): the instants, the median latency
(``last_latency_ms``) and the median time of ``_issue``, ``ranges`` and ``Maintained.instant``.
Wave 2m measured with it that tumbling instants do the same work as sliding ones, ~1.5x slower
per step (cold caches: their path runs every 5-15 publishes, a sliding one's at each).
"""

from __future__ import annotations

import runpy
import statistics
import sys
import time
from collections import defaultdict


def install() -> tuple[dict, dict]:
    from engine.stream import continuous as c
    from engine.stream import maintained as m
    from engine.stream import scheduler as s
    rec: dict = defaultdict(list)
    sub: dict = defaultdict(list)
    cur: dict = {}
    mi = c.InstantEvaluator.maintained_instant

    def maintained_instant(self, t):
        mt = self._maint
        hit = mt._done.get(t) is not None
        out = mi(self, t)
        kind = "tumbling" if all(bw.window.range_ms == mt.step for bw in mt.windows) else "sliding"
        cur["k"] = (kind, "done" if hit else "worker")
        return out

    sm = s.Scheduler._step_maintained

    def step_maintained(self, q, t, t0):
        cur.clear()
        sm(self, q, t, t0)
        if "k" in cur:
            for name, us in cur.get("sub", []):
                sub[(cur["k"][0], name)].append(us)
            rec[cur["k"]].append(q.last_latency_ms * 1000.0 if q.last_latency_ms else 0.0)

    def wrap(owner, name: str) -> None:
        f = getattr(owner, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                cur.setdefault("sub", []).append((name, (time.perf_counter() - t0) * 1e6))

        setattr(owner, name, timed)

    try:   # (wave 2m: the common case in one function; its steps are inline, not timed apart)
        from engine.stream import instant_fast as f
    except ImportError:
        f = None
    if f is not None:
        fs = f.step

        def fast_step(sched, q, t, last, t0):
            mt = q.evaluator._mdue
            hit = mt is not None and mt is not False and mt._done.get(t) is not None
            f0 = c._MFAST[0]
            out = fs(sched, q, t, last, t0)
            if out and c._MFAST[0] != f0:
                kind = "tumbling" if all(bw.window.range_ms == mt.step for bw in mt.windows) else "sliding"
                rec[(kind, "done" if hit else "worker")].append(q.last_latency_ms * 1000.0 if q.last_latency_ms else 0.0)
            return out

        f.step = fast_step
    c.InstantEvaluator.maintained_instant = maintained_instant
    s.Scheduler._step_maintained = step_maintained
    wrap(c.InstantEvaluator, "ranges")
    wrap(m.Maintained, "instant")
    wrap(s.Scheduler, "_issue")
    return rec, sub


def main() -> None:
    rec, sub = install()
    sys.argv = ["bench"] + sys.argv[1:]
    try:
        runpy.run_module("bench", run_name="__main__")
    except SystemExit:
        pass
    finally:
        for k, v in sorted(sub.items()):
            print(f"step {k}: n {len(v)}, median {statistics.median(v):.1f} µs", file=sys.stderr)
        for k, v in sorted(rec.items()):
            print(f"instants {k}: n {len(v)}, latency median {statistics.median(v):.1f} µs", file=sys.stderr)


if __name__ == "__main__":
    main()
