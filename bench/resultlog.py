"""`python -m bench.resultlog`: what durable result logs (--data-dir) cost the evaluation.

The evaluation worker appends each instant's result to its query's log; with a data dir the
log's writer thread commits them to ``results.sqlite`` (group commit, fsync per commit) and
only then makes them visible. This measures, in memory vs durable, alternating runs, medians:

* ``append/s``: appends per second on the appending (evaluation) thread -- what a slow disk
  could take from evaluation;
* ``visible/s``: events per second until the last one is committed and visible;
* ``latency``: median and p99 time from an append to its event becoming visible;
* ``commits``: group commits (fsyncs) for all the events.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time

from engine.stream.resultlog import ResultLog
from engine.stream.resultstore import ResultStore

DATA = (b'{"head":{"vars":["s","o"]},"results":{"bindings":[{"s":{"type":"uri","value":"http://ex.org/a1"},'
        b'"o":{"type":"literal","value":"v1"}},{"s":{"type":"uri","value":"http://ex.org/a2"},'
        b'"o":{"type":"literal","value":"v2"}}]},"window":{"start":0,"end":1000}}')


def run(durable: bool, queries: int, events: int, retain: int, where: str | None = None) -> dict:
    d = tempfile.mkdtemp(prefix="jindou-bench-resultlog-", dir=where) if durable else None
    store = ResultStore(d) if durable else None
    try:
        logs = [ResultLog(retain, 1000, store=store, name=f"q{i}") for i in range(queries)]
        appended: dict[tuple[int, int], float] = {}
        lat: list[float] = []
        for i, lg in enumerate(logs):
            def seen(i=i, lg=lg):
                t = appended.get((i, lg.last_id))
                if t is not None:
                    lat.append(time.perf_counter() - t)
            lg.add_listener(seen)
        t0 = time.perf_counter()
        for k in range(events):
            for i, lg in enumerate(logs):
                appended[(i, k * 1000)] = time.perf_counter()
                lg.append(k * 1000, DATA)
        t1 = time.perf_counter()
        commits = 0
        if store is not None:
            store.flush(600)
            commits = store.commits
        t2 = time.perf_counter()
        n = queries * events
        lat.sort()
        return {"append": n / (t1 - t0), "visible": n / (t2 - t0), "commits": commits,
                "p50_ms": 1000 * lat[len(lat) // 2] if lat else 0.0,
                "p99_ms": 1000 * lat[int(len(lat) * 0.99)] if lat else 0.0}
    finally:
        if store is not None:
            store.close()
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.resultlog", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--events", type=int, default=200, help="instants per query")
    ap.add_argument("--retain", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5, help="alternating runs per mode (medians reported)")
    ap.add_argument("--dir", default=None, help="where the durable runs put their data dir (default: $TMPDIR)")
    a = ap.parse_args(argv)
    res: dict[str, list[dict]] = {"memory": [], "durable": []}
    for _ in range(a.runs):
        for mode in ("memory", "durable"):
            res[mode].append(run(mode == "durable", a.queries, a.events, a.retain, a.dir))
    print(f"{a.queries} queries x {a.events} instants, retain {a.retain}, {a.runs} alternating runs, medians")
    print(f"{'mode':8} {'append/s':>10} {'visible/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'commits':>8}")
    med = {}
    for mode, rs in res.items():
        m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        med[mode] = m
        print(f"{mode:8} {m['append']:10.0f} {m['visible']:10.0f} {m['p50_ms']:8.2f} {m['p99_ms']:8.2f} "
              f"{m['commits']:8.0f}")
    spread = [r["append"] for r in res["durable"]]
    print(f"durable / memory append rate: {med['durable']['append'] / med['memory']['append']:.2f}x "
          f"(durable runs {min(spread):.0f}..{max(spread):.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
