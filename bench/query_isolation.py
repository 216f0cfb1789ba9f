"""One heavy continuous query next to many cheap ones: do the cheap ones' answers wait for it?

`python -m bench.query_isolation [--queries 100,1000] [--heavy 0,1,3] [--heavy-stream same,other]
[--instants 30] [--rounds 1] [--lanes on,off] [--json F]` (or `main(argv)`). See docs/BENCHMARKS.md,
"Query isolation, wave 2o (helper D)".

The workload is ``bench manyqueries``'s (static sensors in areas, one observation stream,
N copies of the stream-joins-static template at ``RANGE 1s STEP 100ms``, cheap: tens of µs an
instant, batched), plus 0 / 1 / 3 heavy queries of different shapes (:data:`HEAVY`: a cross
product inside the row budget, a non-selective join through the static data, a big aggregate;
tens to hundreds of ms an instant) on the same stream or on a second stream fed alike.

In process (a ``Database`` + ``StreamManager``, as ``bench manyqueries``), paced by the wall
clock: every 100 ms the next step's observations are ingested and a heartbeat makes the instant
ready, as a live feed would. Every query's result log is spied on (the time each instant's event
is appended = published to its SSE readers). Reported per configuration:

* the cheap queries' answer latency, the instant's ready time (just before its heartbeat) ->
  its event appended: p50 / p99 / max, over every cheap query and measured instant;
* cheap executions per second (their instants over the wall time until the last one is out);
* ingestion: the ``ingest`` + ``heartbeat`` call time per step (p50 / max): the POST latency;
* the heavy queries: their median evaluation time, the instants they had answered when the
  feed ended (their lag), and whether all were answered in the end.

``--lanes off`` runs the scheduler with its heavy-query lane disabled (one worker for
everything, as before wave 2o) for the A/B. Every configuration's cheap answers are compared
with the run without heavy queries (order-independent digests per query and instant), and the
heavy queries' answers between lanes on and off: any difference -> exit status 3.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

import orjson

from bench.manyqueries import EX, RANGE_MS, STEP_MS, STREAM, Workload, canon

STREAM2 = EX + "observations2"
EXIT_MISMATCH = 3

#: heavy shapes (the stream IRI is filled in): a cross product of the window with itself (counted),
#: a join through the static data that matches every area, a big aggregate over a self-join
HEAVY = (
    "SELECT (COUNT(*) AS ?n) (SUM(?v1) AS ?s) FROM STREAM <{s}> [RANGE 1s STEP 100ms] "
    "WHERE {{ ?a <" + EX + "value> ?v1 . ?b <" + EX + "value> ?v2 }}",
    "SELECT ?area (COUNT(*) AS ?n) FROM STREAM <{s}> [RANGE 1s STEP 100ms] FROM <urn:jindou:default> "
    "WHERE {{ ?o1 <" + EX + "by> ?s1 . ?s1 <" + EX + "in> ?area . "
    "?o2 <" + EX + "value> ?w . FILTER(?w < 25) }} GROUP BY ?area",
    "SELECT ?v1 (COUNT(*) AS ?n) FROM STREAM <{s}> [RANGE 1s STEP 100ms] "
    "WHERE {{ ?a <" + EX + "value> ?v1 . ?b <" + EX + "value> ?v2 . FILTER(?v1 < ?v2) }} GROUP BY ?v1",
)


class HeavyLaneBound:
    """The lane's bound for this bench's runs (None: the scheduler's default; tests set 0)."""
    ms: float | None = None


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def _spy(q, times: dict) -> None:
    """Record when each instant's event of ``q`` enters its log (result or idle run)."""
    log = q.log
    app, idle = log.append, log.append_idle

    def append(t, data, _app=app):
        _app(t, data)
        times.setdefault(int(t), time.perf_counter())

    def append_idle(start, end, same_as, _idle=idle, _step=q.trigger.step):
        _idle(start, end, same_as)
        now = time.perf_counter()
        for x in range(int(start), int(end) + 1, _step):
            times.setdefault(x, now)

    log.append, log.append_idle = append, append_idle


def run_one(wl: Workload, n: int, heavy: int, other: bool, instants: int, lanes: bool) -> dict:
    from engine.database import Database  # noqa: PLC0415
    from engine.stream.manager import StreamManager  # noqa: PLC0415

    db = Database()
    db.load_data("".join(f"{s} {p} {o} .\n" for s, p, o in wl.static).encode(), "application/n-triples")
    m = StreamManager(db, retain=max(64, 2 * instants + 2))
    lane = getattr(m._scheduler, "lane", None)
    if lane is not None:
        lane.enabled = lanes
        if HeavyLaneBound.ms is not None:
            lane.bound_ms = HeavyLaneBound.ms
    elif lanes:
        raise SystemExit("this tree's scheduler has no heavy-query lane: run with --lanes off")
    streams = [("obs", STREAM)] + ([("obs2", STREAM2)] if other else [])
    try:
        for name, iri in streams:
            m.register_stream(name, iri)
            m.heartbeat(name, wl.start)
        warm = wl.fill_until
        for name, _ in streams:
            m.ingest_ndjson(name, wl.body(wl.start, warm))
            m.heartbeat(name, warm)
        for k in range(n):
            m.register_query(wl.text(k))
        for h in range(heavy):
            m.register_query(f"REGISTER QUERY heavy{h} AS " + HEAVY[h % len(HEAVY)].format(s=STREAM2 if other else STREAM))
        for name, _ in streams:
            m.heartbeat(name, warm + 1)
        assert m.drain(600), "did not drain"
        times: dict[str, dict] = {}
        for q in list(m._reg.queries.values()):
            times[q.name] = {}
            _spy(q, times[q.name])
        gc.collect()
        ready: dict[int, float] = {}
        post: list[float] = []
        t0 = time.perf_counter()
        prev = warm
        for i in range(instants):
            cur = warm + (i + 1) * STEP_MS
            due = t0 + i * STEP_MS / 1000.0
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            body = wl.body(prev, cur)
            p0 = time.perf_counter()
            for name, _ in streams:
                m.ingest_ndjson(name, body)
            ready[cur] = time.perf_counter()
            for name, _ in streams:
                m.heartbeat(name, cur + 1)
            post.append((time.perf_counter() - p0) * 1000.0)
            prev = cur
        fed = time.perf_counter()
        heavy_done_at_feed = {f"heavy{h}": len([t for t in times[f"heavy{h}"] if t in ready]) for h in range(heavy)}
        assert m.drain(600), "did not drain"
        lat, last_out = [], t0
        complete = True
        for k in range(n):
            tk = times[f"q{k}"]
            for t, r in ready.items():
                a = tk.get(t)
                if a is None:
                    complete = False
                    continue
                lat.append((a - r) * 1000.0)
                last_out = max(last_out, a)
        answers = {}
        for name in [f"q{k}" for k in range(0, n, max(1, n // 20))] + [f"heavy{h}" for h in range(heavy)]:
            for e in m.log(name).since(None, from_t=warm + STEP_MS):
                if e.event == "result":
                    doc = orjson.loads(e.data)
                    answers[(name, e.id)] = canon(doc) if "head" in doc else doc.get("error", "?")
        hq = [m._reg.queries[f"heavy{h}"] for h in range(heavy)]
        heavy_complete = all(all(t in times[q.name] for t in ready) for q in hq)
        return {"queries": n, "heavy": heavy, "stream": "other" if other else "same", "lanes": lanes,
                "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99), "max_ms": max(lat) if lat else None,
                "cheap_per_s": len(lat) / max(1e-9, last_out - t0), "complete": complete,
                "post_p50_ms": _pct(post, 0.5), "post_max_ms": max(post),
                "feed_s": fed - t0, "heavy_ms": [q.last_latency_ms for q in hq],
                "heavy_answered_at_feed_end": heavy_done_at_feed, "heavy_complete": heavy_complete,
                "lane_taken": 0 if lane is None else lane.taken,
                "instants": instants, "answers": answers}
    finally:
        m.close()
        db.close()


def run(sizes, heavies, streams, instants, rounds, lanes_modes, areas, sensors, rate, say=_log) -> dict:
    wl = Workload(areas, sensors, rate, instants)
    rows, mismatches = [], 0
    for n in sizes:
        base: dict = {}
        heavy_ref: dict = {}
        for h in heavies:
            for other in streams:
                if h == 0 and other:
                    continue
                for lanes in lanes_modes:
                    outs = []
                    for r in range(rounds):
                        out = run_one(wl, n, h, other, instants, lanes)
                        outs.append(out)
                        say(f"  n={n} heavy={h} {out['stream']} lanes={'on' if lanes else 'off'} round {r}: "
                            f"p50 {out['p50_ms']:.2f} p99 {out['p99_ms']:.1f} max {out['max_ms']:.1f} ms, "
                            f"{out['cheap_per_s']:.0f} cheap/s, post p50 {out['post_p50_ms']:.2f} max "
                            f"{out['post_max_ms']:.1f} ms, heavy ms {[round(x or 0, 1) for x in out['heavy_ms']]}, "
                            f"heavy answered at feed end {out['heavy_answered_at_feed_end']}")
                    bad = 0
                    for out in outs:
                        for key, d in out["answers"].items():
                            if key[0].startswith("q"):   # the same with or without heavy queries
                                ref = base.setdefault(key, d)
                            else:                        # the same with the lane on or off
                                ref = heavy_ref.setdefault((h, other) + key, d)
                            bad += ref != d
                    mismatches += bad
                    med = {k: statistics.median(o[k] for o in outs) for k in
                           ("p50_ms", "p99_ms", "max_ms", "cheap_per_s", "post_p50_ms", "post_max_ms")}
                    rows.append({**{k: v for k, v in outs[0].items() if k != "answers"}, **med,
                                 "rounds": rounds, "mismatches": bad,
                                 "complete": all(o["complete"] and o["heavy_complete"] for o in outs)})
    return {"workload": {"areas": areas, "sensors_per_area": sensors, "rate_per_s": rate,
                         "window": f"RANGE {RANGE_MS}ms STEP {STEP_MS}ms", "instants": instants},
            "rows": rows, "mismatches": mismatches}


def format_markdown(rep: dict) -> str:
    w = rep["workload"]
    out = [f"Workload: {w['areas']} areas x {w['sensors_per_area']} sensors, {w['rate_per_s']:.0f} observations/s, "
           f"{w['window']}, {w['instants']} instants fed at wall-clock pace; cheap latency = instant ready -> "
           "event in the log (median over rounds of each run's percentile).", "",
           "| cheap queries | heavy | heavy's stream | lanes | cheap p50 ms | p99 ms | max ms | cheap exec/s | "
           "ingest+heartbeat p50 / max ms | heavy ms/instant | heavy answered when the feed ended | complete |",
           "|---:|---:|---|---|---:|---:|---:|---:|---|---|---|---|"]
    for r in rep["rows"]:
        hv = ", ".join(f"{x:.0f}" for x in r["heavy_ms"] if x is not None) or "-"
        done = ", ".join(f"{v}/{r['instants']}" for v in r["heavy_answered_at_feed_end"].values()) or "-"
        out.append(f"| {r['queries']} | {r['heavy']} | {r['stream'] if r['heavy'] else '-'} | "
                   f"{'on' if r['lanes'] else 'off'} | {r['p50_ms']:.2f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | "
                   f"{r['cheap_per_s']:.0f} | {r['post_p50_ms']:.2f} / {r['post_max_ms']:.1f} | {hv} | {done} | "
                   f"{'yes' if r['complete'] else 'NO'}{'' if not r['mismatches'] else ' (answers differ!)'} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.query_isolation", description=__doc__.split("\n")[0])
    ap.add_argument("--queries", default="100,1000", help="cheap queries (comma list)")
    ap.add_argument("--heavy", default="0,1,3", help="heavy queries (comma list)")
    ap.add_argument("--heavy-stream", default="same,other", help="the heavy queries' stream: same, other")
    ap.add_argument("--lanes", default="on,off", help="the scheduler's heavy-query lane: on, off")
    ap.add_argument("--instants", type=int, default=30, help="measured instants (100 ms each)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--areas", type=int, default=1000)
    ap.add_argument("--sensors", type=int, default=10)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    rep = run([int(x) for x in a.queries.split(",")], [int(x) for x in a.heavy.split(",")],
              [s.strip() == "other" for s in a.heavy_stream.split(",")], a.instants, a.rounds,
              [s.strip() == "on" for s in a.lanes.split(",")], a.areas, a.sensors, a.rate)
    print(format_markdown(rep))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1, default=str)
    return EXIT_MISMATCH if rep["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
