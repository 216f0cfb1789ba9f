"""Many registered continuous queries of one shape: query executions per second, batched vs not.

`python -m bench manyqueries [--queries 100,1000,10000] [--instants 11] [--rounds 3] [--json F]
[--peers batched,unbatched,composite] [--mixed]` (or `main(argv)`). ``--mixed``: query k takes
one of four shapes (k mod 4), two batched and two that run alone (:attr:`Workload.MIXED`). See docs/BENCHMARKS.md, "Continuous queries: many queries of one shape".

The workload (seeded, in process): a static graph of ``--areas`` areas with ``--sensors`` sensors
each (``?sensor :in ?area``), one stream of observations (``?obs :by ?sensor ; :value ?v``) at
``--rate`` observations per second of event time, and N copies of one stream-joins-static
template at ``RANGE 1s STEP 100ms``, query k asking for area ``k mod areas``::

    SELECT ?obs ?v FROM STREAM <s> [RANGE 1s STEP 100ms] FROM <urn:jindou:default>
    WHERE { ?obs :by ?sensor . ?obs :value ?v . ?sensor :in <area_k> }

One run: a fresh ``Database`` + ``StreamManager``, one second of observations (the window
fills), the N queries registered, one unmeasured warm-up instant (their first: shapes
analyzed, plans made), then the measured part: the observations of ``--instants`` more steps
and a heartbeat past them, and ``drain`` -- every query evaluates every instant (the window
changes at every step, so no instant is skipped as unchanged).
Executions/s = N x instants / the measured wall time (ingestion included, which is small).

Peers, each in its own run, alternated over ``--rounds`` (the median is reported):

* batched: the scheduler's multi-query execution (:mod:`engine.stream.multiquery`);
* unbatched: the same with batching off (each query alone, as before); for large N on fewer
  instants (``--unbatched-budget`` caps its executions), which does not change a rate; not run
  above ``--unbatched-max`` queries (default 10,000; the scheduler's index of due queries keeps
  its per-instant cost independent of the number of queries);
* csparql-composite: the composite peer of ``python -m bench streams`` (window quads into
  pyoxigraph, the plain query, the window graph cleared), per query and instant, on the first
  instants until ``--composite-budget`` executions.

Every measured instant of every query must give the same solutions batched and unbatched
(multisets) where both ran, and the composite's where it ran; any difference -> exit status 3.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time

import orjson

EX = "http://ex.org/mq/"
STREAM = EX + "observations"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
STEP_MS, RANGE_MS = 100, 1000
EXIT_MISMATCH = 3


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Workload:
    """Static sensors/areas and the observation stream, seeded."""

    def __init__(self, areas: int, sensors: int, rate: float, instants: int, seed: int = 0, mixed: bool = False):
        rng = random.Random(seed)
        self.mixed = mixed
        self.areas, self.sensors, self.instants = areas, sensors, instants
        self.static = [(f"<{EX}sensor{a}_{j}>", f"<{EX}in>", f"<{EX}area{a}>")
                       for a in range(areas) for j in range(sensors)]
        self.start = 1_000_000
        self.end = self.start + RANGE_MS + instants * STEP_MS     # last measured instant
        n = int(rate * (self.end - self.start) / 1000)
        taus = sorted(rng.randrange(self.start + 1, self.end + 1) for _ in range(n))
        self.obs = []
        for i, tau in enumerate(taus):
            s = f"<{EX}sensor{rng.randrange(areas)}_{rng.randrange(sensors)}>"
            o = f"<{EX}obs{i}>"
            self.obs.append((o, f"<{EX}by>", s, tau))
            self.obs.append((o, f"<{EX}value>", f'"{rng.randrange(100)}"^^<{XSD_INT}>', tau))
        self.fill_until = self.start + RANGE_MS   # first measured instant

    #: the mixed workload's shapes, query k taking shape k mod 4: (select, solution modifiers);
    #: the first and last are batched, the middle two run alone (GROUP_CONCAT; LIMIT without an
    #: ORDER BY over every selected variable)
    MIXED = (("?obs ?v", ""),
             ("?sensor (GROUP_CONCAT(STR(?v)) AS ?vs)", " GROUP BY ?sensor"),  # (CONCAT takes strings)
             ("?obs ?v", " LIMIT 3"),
             ("?sensor (AVG(?v) AS ?avg) (COUNT(*) AS ?n)", " GROUP BY ?sensor"))

    def _parts(self, k: int) -> tuple[str, str, str]:
        where = (f"WHERE {{ ?obs <{EX}by> ?sensor . ?obs <{EX}value> ?v . "
                 f"?sensor <{EX}in> <{EX}area{k % self.areas}> }}")
        sel, mods = self.MIXED[k % len(self.MIXED)] if self.mixed else self.MIXED[0]
        return sel, where, mods

    def text(self, k: int) -> str:
        sel, where, mods = self._parts(k)
        return (f"REGISTER QUERY q{k} AS SELECT {sel} FROM STREAM <{STREAM}> [RANGE 1s STEP 100ms] "
                f"FROM <urn:jindou:default> {where}{mods}")

    def plain(self, k: int) -> str:
        sel, where, mods = self._parts(k)
        return f"SELECT {sel} {where}{mods}"

    def body(self, lo: int, hi: int) -> bytes:
        """ndjson of the observations with ``lo < tau <= hi``."""
        return b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": t})
                          for s, p, o, t in self.obs if lo < t <= hi)

    def measured(self, instants: int) -> list[int]:
        return [self.fill_until + (i + 1) * STEP_MS for i in range(instants)]


def canon(doc: dict) -> str:
    """The answer's order-independent digest, as ``python -m bench streams`` compares peers."""
    from bench.streams import canon_rows, key_json  # noqa: PLC0415

    names = doc["head"]["vars"]
    return canon_rows(names, (tuple(key_json(b.get(v)) for v in names) for b in doc["results"]["bindings"])).digest


def run_jindou(wl: Workload, n: int, instants: int, batching: bool, keep: set[int]) -> dict:
    """One run: executions/s over ``instants`` measured instants, and the answers of queries ``keep``."""
    from engine.database import Database  # noqa: PLC0415
    from engine.stream.manager import StreamManager  # noqa: PLC0415

    db = Database()
    db.load_data("".join(f"{s} {p} {o} .\n" for s, p, o in wl.static).encode(), "application/n-triples")
    m = StreamManager(db, retain=max(64, instants + 2))
    m._scheduler.batching = batching
    try:
        m.register_stream("obs", STREAM)
        m.heartbeat("obs", wl.start)
        # fill the windows before registering (nothing to evaluate), then one unmeasured warm-up
        # instant (the queries' first: shapes analyzed, plans made, window graph built)
        warm = wl.fill_until
        m.ingest_ndjson("obs", wl.body(wl.start, warm))
        m.heartbeat("obs", warm)
        for k in range(n):
            m.register_query(wl.text(k))
        m.heartbeat("obs", warm + 1)
        assert m.drain(3600), "did not drain"
        first = warm + STEP_MS
        last = first + (instants - 1) * STEP_MS
        body = wl.body(warm, last)
        gc.collect()
        before = sum(q.evaluated for q in m._reg.queries.values())
        t0, c0 = time.perf_counter(), time.process_time()
        m.ingest_ndjson("obs", body)
        m.heartbeat("obs", last + 1)
        assert m.drain(3600), "did not drain"
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        done = sum(q.evaluated for q in m._reg.queries.values()) - before
        answers = {}
        for k in keep:
            for e in m.log(f"q{k}").since(None, from_t=first):
                if e.event == "result":
                    answers[(k, e.id)] = canon(orjson.loads(e.data))
        groups = len(m._scheduler._groups)
        return {"executions": done, "expected": n * instants, "wall_s": wall, "per_s": done / wall,
                "cpu_s": cpu, "per_cpu_s": done / cpu if cpu else None,
                "answers": answers, "groups": groups}
    finally:
        m.close()
        db.close()


def run_composite(wl: Workload, n: int, instants: int, keep: set[int], budget: int) -> dict:
    """The composite peer on the first ``budget`` (query, instant) executions."""
    from bench.streams import CompositePeer  # noqa: PLC0415

    static_nt = "".join(f"{s} {p} {o} .\n" for s, p, o in wl.static).encode()
    peer = CompositePeer({"urn:static": static_nt})
    static = peer.static_graph(["urn:static"])
    answers, spent, done = {}, 0.0, 0
    for t in wl.measured(instants):
        if done >= budget:
            break
        win = {(s, p, o) for s, p, o, tau in wl.obs if t - RANGE_MS < tau <= t}
        quads = [q for q in (peer.quad(tr, static) for tr in win) if q is not None]
        for k in range(min(n, budget - done)):
            ms, res = peer.window(wl.plain(k), "SELECT", quads, static)
            spent += ms / 1000.0
            done += 1
            if k in keep:
                answers[(k, t)] = res.digest
    return {"executions": done, "expected": done, "wall_s": spent, "per_s": done / spent if spent else None,
            "answers": answers}


def compare(a: dict, b: dict) -> list:
    return [k for k in a.keys() & b.keys() if a[k] != b[k]]


def run(sizes: list[int], instants: int, rounds: int, areas: int, sensors: int, rate: float,
        unbatched_budget: int, composite_budget: int, seed: int = 0, say=_log, unbatched_max: int = 10000,
        peers: tuple[str, ...] = ("batched", "unbatched", "composite"), mixed: bool = False) -> dict:
    wl = Workload(areas, sensors, rate, instants, seed, mixed)
    rows = []
    mismatches = 0
    for n in sizes:
        keep = set(range(0, n, max(1, n // 50)))
        ub_inst = max(1, min(instants, unbatched_budget // n))
        cp_inst = max(1, min(instants, composite_budget // n))
        res: dict[str, list] = {"batched": [], "unbatched": []}
        for r in range(rounds):
            order = ("batched", "unbatched") if r % 2 == 0 else ("unbatched", "batched")
            for peer in order:
                if peer not in peers or (peer == "unbatched" and n > unbatched_max):
                    continue
                out = run_jindou(wl, n, instants if peer == "batched" else ub_inst, peer == "batched", keep)
                res[peer].append(out)
                say(f"  {peer} n={n} round {r}: {out['executions']} executions in {out['wall_s']:.2f}s "
                    f"= {out['per_s']:.0f}/s ({out['cpu_s']:.2f} s CPU = {out['per_cpu_s']:.0f}/CPU-s)")
        comp = {"per_s": None, "answers": {}}
        if "composite" in peers:
            comp = run_composite(wl, n, cp_inst, keep, composite_budget)
            say(f"  csparql-composite n={n}: {comp['executions']} executions = {comp['per_s']:.0f}/s")
        ab = res["batched"][0]["answers"] if res["batched"] else {}
        au = res["unbatched"][0]["answers"] if res["unbatched"] else {}
        ac = comp["answers"]
        # LIMIT without ORDER BY (the mixed workload): which rows are kept is unspecified
        limited = {k for k in range(n) if " LIMIT " in wl.plain(k)}
        # GROUP_CONCAT: the order of the concatenation is unspecified (pyoxigraph may differ)
        concat = {k for k in range(n) if "GROUP_CONCAT" in wl.plain(k)}
        bad = [k for k in compare(ab, au) if k[0] not in limited]
        bad += [k for k in compare(ab or au, ac) if k[0] not in limited | concat]
        compared = len(ab.keys() & au.keys()) + len((ab or au).keys() & ac.keys())
        mismatches += len(bad)
        b = [x["per_s"] for x in res["batched"]]
        u = [x["per_s"] for x in res["unbatched"]]
        mb, mu = statistics.median(b) if b else None, statistics.median(u) if u else None
        cb_ = statistics.median(x["per_cpu_s"] for x in res["batched"]) if b else None
        cu_ = statistics.median(x["per_cpu_s"] for x in res["unbatched"]) if u else None
        rows.append({"queries": n, "instants": instants, "unbatched_instants": ub_inst,
                     "composite_instants": cp_inst,
                     "batched_per_s": None if mb is None else round(mb), "batched_runs": [round(x) for x in b],
                     "unbatched_per_s": None if mu is None else round(mu), "unbatched_runs": [round(x) for x in u],
                     "batched_per_cpu_s": None if cb_ is None else round(cb_),
                     "unbatched_per_cpu_s": None if cu_ is None else round(cu_),
                     "composite_per_s": None if comp["per_s"] is None else round(comp["per_s"]),
                     "batched_vs_unbatched": round(mb / mu, 1) if mu and mb else None,
                     "batched_vs_composite": None if not comp["per_s"] or not mb else round(mb / comp["per_s"], 1),
                     "complete": all(x["executions"] == x["expected"] for x in res["batched"] + res["unbatched"]),
                     "compared_answers": compared, "mismatches": len(bad)})
    return {"workload": {"areas": areas, "sensors_per_area": sensors, "rate_per_s": rate,
                         "window": "RANGE 1s STEP 100ms", "seed": seed, "mixed": mixed},
            "rows": rows, "mismatches": mismatches, "target_per_s": 50_000}


def format_markdown(rep: dict) -> str:
    w = rep["workload"]
    out = [f"Workload{' (mixed shapes: 4 shapes, 2 batched, 2 alone)' if w.get('mixed') else ''}: "
           f"{w['areas']} areas x {w['sensors_per_area']} sensors (static), "
           f"{w['rate_per_s']:.0f} observations/s, {w['window']}; executions per wall second, median "
           "of the rounds (the runs in brackets), and per CPU second of the process (all its threads).",
           "",
           "| queries | batched /s | unbatched /s | csparql-composite /s | batched / unbatched | "
           "batched / composite | batched /CPU-s | unbatched /CPU-s | answers compared |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    def x(v, suffix=""):
        return "n/a" if v is None else f"{v}{suffix}"

    for r in rep["rows"]:
        ub = "not run" if r["unbatched_per_s"] is None else f"{r['unbatched_per_s']} {r['unbatched_runs']}"
        bt = "not run" if r["batched_per_s"] is None else f"{r['batched_per_s']} {r['batched_runs']}"
        out.append(f"| {r['queries']} | {bt} | "
                   f"{ub} | {x(r['composite_per_s'])} | "
                   f"{x(r['batched_vs_unbatched'], 'x')} | {x(r['batched_vs_composite'], 'x')} | "
                   f"{x(r['batched_per_cpu_s'])} | {x(r['unbatched_per_cpu_s'])} | "
                   f"{r['compared_answers']} ({r['mismatches']} differ) |")
    hit = [r for r in rep["rows"] if r["queries"] == 1000 and r["batched_per_s"] is not None
           and not w.get("mixed")]
    if hit:
        ok = hit[0]["batched_per_s"] >= rep["target_per_s"]
        out += ["", f"- target: >= {rep['target_per_s']} executions/s for 1,000 queries: "
                f"**{'met' if ok else 'not met'}** ({hit[0]['batched_per_s']}/s per wall second, "
                f"{hit[0]['batched_per_cpu_s']}/s per CPU second)"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench manyqueries", description=__doc__.split("\n")[0])
    ap.add_argument("--queries", default="100,1000,10000", help="registered queries per run (comma list)")
    ap.add_argument("--instants", type=int, default=11, help="measured instants per run")
    ap.add_argument("--rounds", type=int, default=3, help="alternated runs per peer")
    ap.add_argument("--areas", type=int, default=1000)
    ap.add_argument("--sensors", type=int, default=10, help="sensors per area")
    ap.add_argument("--rate", type=float, default=1000.0, help="observations per second of event time")
    ap.add_argument("--unbatched-budget", type=int, default=11000, help="max executions of an unbatched run")
    ap.add_argument("--unbatched-max", type=int, default=10000,
                    help="no unbatched runs above this many queries")
    ap.add_argument("--composite-budget", type=int, default=3000, help="max executions of the composite")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", default="batched,unbatched,composite",
                    help="which peers to run (comma list of batched, unbatched, composite)")
    ap.add_argument("--mixed", action="store_true",
                    help="queries of 4 shapes (k mod 4), two of which cannot be batched (GROUP_CONCAT; LIMIT "
                         "without ORDER BY) instead of one shape")
    ap.add_argument("--json", help="write the report as JSON here")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.queries.split(",") if x.strip()]
    rep = run(sizes, a.instants, a.rounds, a.areas, a.sensors, a.rate, a.unbatched_budget, a.composite_budget,
              a.seed, unbatched_max=a.unbatched_max, peers=tuple(p.strip() for p in a.peers.split(",")),
              mixed=a.mixed)
    print(format_markdown(rep))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)
    return EXIT_MISMATCH if rep["mismatches"] else 0

if __name__ == "__main__":
    sys.exit(main())
