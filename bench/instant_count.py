"""Python calls and bytecodes per one-step maintained instant (a measure load does not move).

``cd /tmp && PYTHONPATH=<tree> python -m bench.instant_count --workload lsbench-walk --seed 7
--varied 32 --queries W22,W18,W07 [--minutes 1]``

Each query is replayed as ``python -m bench streams`` does (:func:`bench.streams.run_jindou`);
during every ``Scheduler._step_one`` a tracer (``sys.settrace`` with opcode events, and
``sys.setprofile`` for calls into C) counts, for the instants a maintained state answered in one
step (``continuous._MFAST`` moved): the Python function calls, the C calls and the bytecodes
executed, up to the event's append to the query's result log (``ResultLog.append``: the region
whose time is the instant's latency, plus the issue under ``cv``) and for the whole step (with
what follows the event: ``settle``, ``prepare``, ``Maintained.advance``). Printed: the medians per
instant. Time on a woken worker follows these counts (cold code and objects), not the reverse.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench import streams as bs
from bench.instant_ab import one_query_workload


class Counter:
    """Counts calls and opcodes of the worker thread while :attr:`on`."""

    def __init__(self):
        self.on = False
        self.before = True       # before the event's append
        self.n = {"py": 0, "c": 0, "op": 0}
        self.pre = None          # the counts at the append
        self.per: dict = {}      # (function, before the append) -> [calls, bytecodes] (--detail)

    def reset(self) -> None:
        self.n = {"py": 0, "c": 0, "op": 0}
        self.pre = None
        self.before = True
        self.per = {}

    def trace(self, frame, event, arg):
        if not self.on:
            return None
        frame.f_trace_opcodes = True
        key = (frame.f_code.co_name, frame.f_code.co_filename.rsplit("/", 1)[-1], self.before)
        got = self.per.get(key)
        if got is None:
            got = self.per[key] = [0, 0]
        if event == "call":
            got[0] += 1
            self.n["py"] += 1
            if self.before and frame.f_code.co_name == "append" and "resultlog" in frame.f_code.co_filename:
                self.pre = dict(self.n)
                self.before = False
        elif event == "opcode":
            self.n["op"] += 1
            got[1] += 1
        return self.trace

    def profile(self, frame, event, arg):
        if self.on and event == "c_call":
            self.n["c"] += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instant_count", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="lsbench-walk", choices=("lsbench-small", "lsbench-varied", "lsbench-walk"))
    ap.add_argument("--queries", default="W22")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--varied", type=int, default=None)
    ap.add_argument("--detail", action="store_true", help="per function: calls and bytecodes of the last instant")
    a = ap.parse_args(argv)
    from engine.stream import continuous as C  # noqa: PLC0415
    from engine.stream import scheduler as S  # noqa: PLC0415

    cnt = Counter()
    rows: list = []
    step = S.Scheduler._step_one

    def step_one(sched, q, t, last):
        f0 = C._MFAST[0]
        cnt.reset()
        sys.settrace(cnt.trace)
        sys.setprofile(cnt.profile)
        cnt.on = True
        try:
            step(sched, q, t, last)
        finally:
            cnt.on = False
            sys.settrace(None)
            sys.setprofile(None)
        if C._MFAST[0] != f0 and cnt.pre is not None:
            rows.append((cnt.pre, dict(cnt.n), cnt.per))

    S.Scheduler._step_one = step_one
    try:
        quiet = lambda *_: None  # noqa: E731
        for qid in [q.strip().upper() for q in a.queries.split(",") if q.strip()]:
            rows.clear()
            wl = one_query_workload(a, qid)
            bs.run_jindou(wl, True, say=quiet)
            if not rows:
                print(f"{qid}: no one-step maintained instant", flush=True)
                continue

            def med(i: int, k: str) -> float:
                return statistics.median(r[i][k] for r in rows)

            print(f"{qid} ({len(rows)} instants): to the event py calls {med(0, 'py'):g}, C calls {med(0, 'c'):g}, "
                  f"bytecodes {med(0, 'op'):g}; whole step py {med(1, 'py'):g}, C {med(1, 'c'):g}, "
                  f"bytecodes {med(1, 'op'):g}", flush=True)
            if a.detail:
                for (fn, file, before), (c, o) in sorted(rows[-1][2].items(), key=lambda x: (not x[0][2], -x[1][1])):
                    print(f"  {'to the event' if before else 'after'}  {file}:{fn}  calls {c}  bytecodes {o}")
    finally:
        S.Scheduler._step_one = step   # (a second run in the process counts again)
    return 0


if __name__ == "__main__":
    sys.exit(main())
