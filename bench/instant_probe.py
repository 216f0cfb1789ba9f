"""Where an instant's time goes, cold (as replayed) and warm (the same instant again at once).

``python -m bench.instant_probe --workload lsbench-small --queries L1,L6 [--repeat 3] [--idle-ms 3]``
(``--workload lsbench-walk --queries W04 [--varied 32 --seed 7]``: the queries ``bench streams`` draws)

Each query is replayed as ``python -m bench streams`` does (:func:`bench.streams.run_jindou`).
After the worker evaluated an instant (cold: its thread was woken after the replay ingested the
bucket), it evaluates the same instant ``--repeat`` times more, at once (warm) or each after
``--idle-ms`` of sleep (the idle gap alone, same thread, same data): what differs between the
columns is the state of the caches, not the work. The delta guard's memory is set aside for the
repeats and put back, so the replay goes on as without them (its results are not compared here;
``python -m bench streams`` does that).

Why repeats inside the replay: an instant evaluated again *after* the replay reads windows the
stream GC has freed meanwhile (empty ranges), so a loop over past instants times empty windows
(wave 2e measured "L6 85 µs warm" that way, against ~470 µs cold here for the same windows).

Steps (medians per instant, µs of wall time; nested steps are inside their callers): the
scheduler's unchanged-instant check and capture (``state_at`` where the scheduler takes it in
its check's timed region), ``run`` (the instant's latency, less the check and the capture),
``evaluate``, the compact read, the tuple-at-a-time core, the event's JSON, the window
member, the delta check, what is kept after the event is in the log (``settle``); and the
collections of the interpreter's cyclic GC that started inside an instant. Steps a version
of the engine does not have are left out (the probe runs on older commits too, for A/B).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections import defaultdict

from bench import streams as bs

#: (module path, class or None, attribute) of the steps timed
STEPS = [
    ("engine.stream.continuous", "InstantEvaluator", "quiet_until"),
    ("engine.stream.continuous", "InstantEvaluator", "reuse"),
    ("engine.stream.continuous", "InstantEvaluator", "repeat"),
    ("engine.stream.continuous", "InstantEvaluator", "member_bytes"),
    ("engine.stream.resultlog", "ResultLog", "append"),
    ("engine.stream.pred_times", "PredicateTimes", "sync"),
    ("engine.stream.pred_times", "PredicateTimes", "append"),
    ("engine.stream.continuous", "InstantEvaluator", "unchanged_until"),
    ("engine.stream.continuous", "InstantEvaluator", "capture"),
    ("engine.stream.continuous", "InstantEvaluator", "state_at"),
    ("engine.stream.continuous", "InstantEvaluator", "run"),
    ("engine.stream.continuous", "InstantEvaluator", "evaluate"),
    ("engine.stream.continuous", "InstantEvaluator", "compact_rows"),
    ("engine.stream.continuous", "InstantEvaluator", "_evaluate_tiny"),
    ("engine.stream.tiny", "TinyCore", "solutions"),
    ("engine.stream.continuous", "InstantEvaluator", "render"),
    ("engine.stream.continuous", "InstantEvaluator", "window_member"),
    ("engine.stream.delta", "DeltaGuard", "reusable"),
    ("engine.stream.continuous", "InstantEvaluator", "settle"),
    ("engine.exec.evaluate", "QueryContext", "__init__"),
    ("engine.stream.continuous", "InstantEvaluator", "_maintained"),
    ("engine.stream.maintained", "Maintained", "instant"),
    ("engine.stream.tiny_gen", "GenQuery", "render"),
    ("engine.stream.continuous", "InstantEvaluator", "prepare"),
    # the one-step maintained instant (Scheduler._step_maintained) and what is around it
    ("engine.stream.continuous", "InstantEvaluator", "maintained_due"),
    ("engine.stream.scheduler", "Scheduler", "_step_maintained"),
    ("engine.stream.scheduler", "Scheduler", "_issue"),
    ("engine.stream.continuous", "InstantEvaluator", "maintained_instant"),
    ("engine.stream.continuous", "InstantEvaluator", "ranges"),
    ("engine.stream.scheduler", "Scheduler", "_store_event"),
    ("engine.stream.scheduler", "Scheduler", "_after"),
    ("engine.stream.maintained", "Maintained", "advance"),
]


class Probe:
    """Wraps the steps with wall-clock timers, labelled by the phase (cold / warm / idle)."""

    def __init__(self, repeat: int, idle_ms: float):
        self.repeat = repeat
        self.idle_s = idle_ms / 1000.0
        self.phase = "cold"
        self.times: dict = defaultdict(list)     # (phase, step) -> [ns]
        self.gcs: dict = defaultdict(int)        # (phase, generation) -> collections inside run
        self._in_run = False
        self._undo: list = []

    def _wrap(self, owner, attr: str, label: str) -> None:
        import inspect  # noqa: PLC0415

        raw = inspect.getattr_static(owner, attr)
        fn = getattr(owner, attr)
        times = self.times

        def timed(*a, **k):
            t0 = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                times[(self.phase, label)].append(time.perf_counter_ns() - t0)

        setattr(owner, attr, staticmethod(timed) if isinstance(raw, staticmethod) else timed)
        self._undo.append((owner, attr, raw))

    def install(self) -> None:
        import importlib  # noqa: PLC0415

        for mod, cls, attr in STEPS:
            owner = importlib.import_module(mod)
            if cls is not None:
                owner = getattr(owner, cls)
            if hasattr(owner, attr):
                self._wrap(owner, attr, attr if cls is None else f"{cls}.{attr}")
        from engine.stream import continuous as C  # noqa: PLC0415
        from engine.stream import scheduler as S  # noqa: PLC0415

        run = C.InstantEvaluator.run

        def in_run(ev, t):
            self._in_run = True
            try:
                return run(ev, t)
            finally:
                self._in_run = False

        C.InstantEvaluator.run = in_run
        self._undo.append((C.InstantEvaluator, "run", run))
        capture = C.InstantEvaluator.capture

        def keep_previous(ev, t, *a):
            # the per-instant memos (window ranges, window member) as they were before the cold
            # capture: each repeat computes them again from the last instant's, as the cold one did
            if self.phase == "cold":
                ev._probe_prev = (ev._at, ev._wm)
            return capture(ev, t, *a)

        C.InstantEvaluator.capture = keep_previous
        self._undo.append((C.InstantEvaluator, "capture", capture))
        state_at = getattr(C.InstantEvaluator, "state_at", None)
        if state_at is not None:
            def keep_previous_at(ev, t):   # the scheduler's capture (untimed, in its check's region)
                if self.phase == "cold":
                    ev._probe_prev = (ev._at, ev._wm)
                return state_at(ev, t)

            C.InstantEvaluator.state_at = keep_previous_at
            self._undo.append((C.InstantEvaluator, "state_at", state_at))
        evaluate = S.Scheduler._evaluate

        def evaluate_and_repeat(sched, q, t, state=None):
            self.phase = "cold"
            evaluate(sched, q, t, state)
            ev = q.evaluator
            dg = getattr(ev, "_delta", None)
            saved = dict(dg.__dict__) if dg is not None else None
            try:
                for _ in range(self.repeat):
                    if self.idle_s:
                        time.sleep(self.idle_s)
                    self.phase = "idle" if self.idle_s else "warm"
                    if dg is not None:
                        dg.forget()   # evaluate, not reuse the last result
                    ev._at, ev._wm = getattr(ev, "_probe_prev", (None, None))
                    ev.capture(t)
                    ev.run(t)
            finally:
                if dg is not None:
                    dg.__dict__.update(saved)
                self.phase = "cold"

        S.Scheduler._evaluate = evaluate_and_repeat
        self._undo.append((S.Scheduler, "_evaluate", evaluate))
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start" and self._in_run:
            self.gcs[(self.phase, info["generation"])] += 1

    def uninstall(self) -> None:
        for owner, attr, fn in reversed(self._undo):
            setattr(owner, attr, fn)
        self._undo = []
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)


def report(probe: Probe, qid: str, latency: dict) -> str:
    other = "idle" if probe.idle_s else "warm"
    lines = [f"### {qid}: bench latency median {statistics.median(latency.values()) * 1000:.1f} µs "
             f"({len(latency)} instants)", "",
             f"| step | cold µs (n) | {other} µs (n) | cold/{other} |", "|---|---|---|---|"]
    labels = sorted({k[1] for k in probe.times}, key=lambda s: [x[2] for x in STEPS].index(s.split(".")[-1]))
    for lab in labels:
        c = probe.times.get(("cold", lab), [])
        w = probe.times.get((other, lab), [])
        mc = statistics.median(c) / 1000 if c else None
        mw = statistics.median(w) / 1000 if w else None
        ratio = f"{mc / mw:.2f}" if mc and mw else "–"
        lines.append(f"| {lab} | {mc:.1f} ({len(c)}) | " if mc is not None else f"| {lab} | – | ")
        lines[-1] += (f"{mw:.1f} ({len(w)}) | {ratio} |" if mw is not None else "– | – |")
    g = {k: v for k, v in probe.gcs.items()}
    lines += ["", "GC collections started inside an instant (phase, generation): " + (str(g) if g else "none")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instant_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="lsbench-small", choices=("citybench", "lsbench-small", "lsbench", "lsbench-varied", "lsbench-walk"))
    ap.add_argument("--queries", default="L1", help="e.g. L1,L6 or C1,C6 (lsbench-varied: V01,V07)")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0,
                    help="the data's and the drawn queries' seed (lsbench-varied / lsbench-walk; "
                         "as bench streams --seed)")
    ap.add_argument("--varied", type=int, default=None,
                    help="queries drawn (as bench streams --varied; default as there)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats of each instant (default 3)")
    ap.add_argument("--idle-ms", type=float, default=0.0,
                    help="sleep this long before each repeat (default 0: warm repeats)")
    ap.add_argument("--floor", action="store_true",
                    help="probe each query's floor twin instead (bench.instant_floor: same windows, "
                         "a pattern nothing matches)")
    a = ap.parse_args(argv)
    ids = [q.strip().upper() for q in a.queries.split(",") if q.strip()]
    quiet = lambda *_: None  # noqa: E731
    for qid in ids:
        if a.workload == "citybench":
            wl = bs.load_citybench([qid], a.minutes, say=quiet)
        elif a.workload == "lsbench":
            wl = bs.load_lsbench([qid], a.minutes, 2000.0, 1000, say=quiet)
        elif a.workload == "lsbench-varied":
            from bench import lsvaried  # noqa: PLC0415

            n = a.varied or max(int(qid[1:]), len(lsvaried.TEMPLATES))
            wl = bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, a.seed, say=quiet, name=a.workload,
                                 texts=lsvaried.queries(n, a.seed))
        elif a.workload == "lsbench-walk":
            from bench import lswalk  # noqa: PLC0415

            # (the walks read the generated data: the same queries as bench streams draws)
            n = a.varied or max(int(qid[1:]), bs.WALK_QUERIES)
            wl = bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, a.seed, say=quiet, name=a.workload,
                                 texts=lambda data, n=n: lswalk.queries(data, n, a.seed))
        else:
            wl = bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, say=quiet, name="lsbench-small")
        if a.floor:
            from bench.instant_floor import floor_twin  # noqa: PLC0415

            wl.queries = [floor_twin(bq) for bq in wl.queries]
        probe = Probe(a.repeat, a.idle_ms)
        probe.install()
        try:
            out = bs.run_jindou(wl, True, say=quiet)
        finally:
            probe.uninstall()
        print(report(probe, qid, out[qid].latency))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
