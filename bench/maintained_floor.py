"""The maintained instant's latency, median per query, several runs (issue 13 item 2, wave 2k V).

``python -m bench.maintained_floor [--queries L1,L2] [--runs 3] [--minutes 2]``

Each LSBench-small query replayed as ``python -m bench streams`` does (:func:`bench.streams.run_jindou`,
a woken worker); prints per query the median instant (µs) of each run and how many instants the
maintained state answered (and, on trees that have it, how many by the scheduler's one-step path).
For A/B run it alternately with ``PYTHONPATH`` on the base tree and on the branch.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench import streams as bs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.maintained_floor", description=__doc__.split("\n")[0])
    ap.add_argument("--queries", default="L1,L2,L3,L4,L5,L6,L7")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--thrash-mb", type=int, default=0,
                    help="read and write a buffer of this many MiB on the worker before each instant "
                         "(64: past the L3 cache): every instant equally cold, whatever else the machine runs")
    a = ap.parse_args(argv)
    from engine.stream import continuous as C  # noqa: PLC0415
    from engine.stream import maintained as M  # noqa: PLC0415

    fast = getattr(C, "maintained_fast_total", lambda: 0)
    if a.thrash_mb:   # as bench.instant_machinery --thrash-mb
        import numpy as np  # noqa: PLC0415

        from engine.stream import scheduler as S  # noqa: PLC0415

        junk = np.ones(a.thrash_mb << 17, dtype=np.int64)
        step_one = S.Scheduler._step_one

        def cold_step(sched, q, t, last):
            junk.sum()
            junk[::512] += 1
            return step_one(sched, q, t, last)

        S.Scheduler._step_one = cold_step
    quiet = lambda *_: None  # noqa: E731
    for qid in [q.strip().upper() for q in a.queries.split(",") if q.strip()]:
        wl = bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, say=quiet, name="lsbench-small")
        meds, lows = [], []
        for _ in range(a.runs):
            m0, f0 = M.answered_total(), fast()
            pr = bs.run_jindou(wl, True, quiet)[qid]
            xs = list(pr.latency.values())
            meds.append(statistics.median(xs) * 1000.0 if xs else float("nan"))
            lows.append(statistics.quantiles(xs, n=4)[0] * 1000.0 if len(xs) > 1 else float("nan"))
            ans, fa = M.answered_total() - m0, fast() - f0
        print(f"{qid}: median µs per run {' '.join(f'{x:.1f}' for x in meds)}; median {statistics.median(meds):.1f}; "
              f"p25 {statistics.median(lows):.1f}; instants {len(xs)}, maintained {ans}, one-step {fa}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
