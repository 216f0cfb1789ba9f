"""What a maintained query's first instants do (issue 13: the switch to the maintained state).

``cd /tmp && PYTHONPATH=<tree> python -m bench.first_instants --workload lsbench-walk --seed 7
--varied 32 --queries W22,W18,W07 [--first 4] [--minutes 1]``

Each query is replayed as ``python -m bench streams`` does (:func:`bench.streams.run_jindou`).
For its first ``--first`` instants it prints, per instant: the path that answered it (``held``:
the event the ingestion held whole; ``body``: the body held, windows equal; ``general``: the
general ``Maintained.instant``, with the seqs its catch-up ``_sync`` read and its time;
``ordinary``: evaluated), the latency (``last_latency_ms``), and what the state looked like
when the instant began (its instant ``tau``, the held instants, the windows against the
instant's ranges; for a general one, why ``Maintained.instant`` did not take the held event and
what ``instant_fast.step`` saw at its entry); and the worker's ``Maintained.advance`` after it
(built or moved, its time).
Then, over all the queries, the median latency of the n-th instant.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench import streams as bs
from bench.instant_ab import one_query_workload


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.first_instants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="lsbench-walk", choices=("lsbench-small", "lsbench-varied", "lsbench-walk"))
    ap.add_argument("--queries", default="W22")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--varied", type=int, default=None)
    ap.add_argument("--first", type=int, default=4)
    ap.add_argument("--quiet", action="store_true", help="only the summary")
    a = ap.parse_args(argv)
    from engine.stream import continuous as C  # noqa: PLC0415
    from engine.stream import instant_fast as F  # noqa: PLC0415
    from engine.stream import maintained as M  # noqa: PLC0415
    from engine.stream import scheduler as S  # noqa: PLC0415

    rec: list = []          # per instant of the current query
    cur: dict = {}
    step = S.Scheduler._step_one
    inst = M.Maintained.instant
    sync = M.Maintained._sync
    build = M.Maintained._build
    adv = M.Maintained.advance

    def step_one(sched, q, t, last):
        mt = q.evaluator._maint
        st = None if mt is None else mt.state
        before = "no state" if st is None else (
            f"tau {st.tau} ({'=' if st.tau == t else '+' if st.tau is not None and st.tau > t else '-'}), "
            f"held {sorted(mt._done)}, body {'y' if mt._body is not None else 'n'}, "
            f"ws {[(w[1], w[2]) for w in st.ws]}")
        ranges = q.evaluator.ranges(t) if q.evaluator._rel is not None else None
        cur.clear()
        cur["t"] = t
        f0, m0, tk = C._MFAST[0], M._ANSWERED[0], list(F._TAKEN)
        ev0 = q.evaluated
        step(sched, q, t, last)
        if q.evaluated == ev0:
            return   # (not an evaluated instant: unchanged / reused)
        if F._TAKEN[0] != tk[0]:
            path = "held"
        elif F._TAKEN[1] != tk[1]:
            path = "body"
        elif M._ANSWERED[0] != m0 or C._MFAST[0] != f0:
            path = "general"
        else:
            path = "ordinary"
        rec.append({"t": t, "path": path, "lat": (q.last_latency_ms or 0.0) * 1000.0, "before": before,
                    "ranges": ranges, "sync": cur.get("sync"), "adv": cur.get("adv"),
                    "why": cur.get("why"), "built": cur.get("ibuilt"), "fast_in": cur.get("fast_in")})

    def instant(self, snap, *a, **k):
        cur["in_instant"] = True
        st = self.state
        if st is not None:
            cur["why"] = (f"state sn {st.sn} / instant's {snap.sn}, dict_n {st.dict_n} / {len(snap.dictionary)}, "
                          f"held {[(k, v[0], v[1]) for k, v in self._done.items()]}")
        try:
            return inst(self, snap, *a, **k)
        finally:
            cur["in_instant"] = False

    def _sync(self, st, targets, V, limit):
        t0 = time.perf_counter()
        n = sum(g1 - g0 for g0, g1 in targets)
        was = [(w[1], w[2]) for w in st.ws]
        out = sync(self, st, targets, V, limit)
        if cur.get("in_instant"):
            cur["sync"] = (was, list(targets), n, out, (time.perf_counter() - t0) * 1e6)
        return out

    def _build(self, snap, graphs):
        cur["built"] = True
        if cur.get("in_instant"):
            cur["ibuilt"] = True
        return build(self, snap, graphs)

    def advance(self, snap, graphs, tau):
        cur["built"] = False
        t0 = time.perf_counter()
        adv(self, snap, graphs, tau)
        st = self.state
        cur["adv"] = (tau, cur["built"], (time.perf_counter() - t0) * 1e6,
                      None if st is None else st.tau)

    fstep = F.step

    def fast(sched, q, t, last, t0):
        ev = q.evaluator
        mt = ev._mdue
        if mt is not None and mt is not False:
            cur["fast_in"] = (f"last==t {last == t}, ok {ev._ok} state0 {q.state[0]}, probe {mt._probe}, "
                              f"skip {mt._skip}, st {mt.state is not None}")
        else:
            cur["fast_in"] = f"mdue {mt}"
        return fstep(sched, q, t, last, t0)

    F.step = fast
    S.Scheduler._step_one = step_one
    M.Maintained.instant = instant
    M.Maintained._sync = _sync
    M.Maintained._build = _build
    M.Maintained.advance = advance
    by_n: dict = {}
    paths: dict = {}
    try:
        quiet = lambda *_: None  # noqa: E731
        for qid in [q.strip().upper() for q in a.queries.split(",") if q.strip()]:
            rec.clear()
            wl = one_query_workload(a, qid)
            bs.run_jindou(wl, True, say=quiet)
            allp = [r["path"] for r in rec]
            lat = [r["lat"] for r in rec]
            print(f"{qid}: {len(rec)} instants, paths {dict((p, allp.count(p)) for p in sorted(set(allp)))}, "
                  f"median {statistics.median(lat) if lat else 0:.1f} µs", flush=True)
            for i, r in enumerate(rec[: a.first]):
                by_n.setdefault(i, []).append(r["lat"])
                paths.setdefault(i, []).append(r["path"])
                if a.quiet:
                    continue
                s = r["sync"]
                sy = "" if s is None else (f"; _sync {s[0]} -> {s[1]} ({s[2]} seqs, "
                                           f"{'ok' if s[3] else 'refused'}) {s[4]:.0f} µs")
                if r["why"] and r["path"] == "general":
                    sy += f"; in instant: {r['why']}{' REBUILT' if r['built'] else ''}; fast: {r['fast_in']}"
                ad = r["adv"]
                av = "" if ad is None else (f"; then advance({ad[0]}) {'BUILT' if ad[1] else 'moved'} "
                                            f"{ad[2]:.0f} µs -> tau {ad[3]}")
                print(f"  #{i} t {r['t']}: {r['path']} {r['lat']:.0f} µs [{r['before']}; ranges {r['ranges']}]"
                      f"{sy}{av}", flush=True)
    finally:
        S.Scheduler._step_one = step
        F.step = fstep
        M.Maintained.instant = inst
        M.Maintained._sync = sync
        M.Maintained._build = build
        M.Maintained.advance = adv
    for i in sorted(by_n):
        p = paths[i]
        print(f"instant #{i}: n {len(by_n[i])}, median {statistics.median(by_n[i]):.1f} µs, "
              f"paths {dict((x, p.count(x)) for x in sorted(set(p)))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
