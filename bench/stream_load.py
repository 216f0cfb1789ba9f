"""Stream load benchmarks: injection throughput, memory soak, one-shot interference.

``python -m bench stream-load [inject|soak|interference|all] [options] [--json FILE]``

* ``inject``: triples/s into the store through ``StreamManager.ingest_arrow`` with
  pre-built Arrow batches -- timing triples (transient store only) and, separately,
  absorbed timeless triples (committed to the default graph) -- through
  ``ingest_ndjson`` with pre-built bodies, and over HTTP (Arrow IPC POSTs to a
  ``jindou serve`` subprocess) for reference. Building the batches is not timed in
  process (a pipeline hands over Arrow batches); the HTTP figure includes
  serialization, transfer and the IPC read. In-process paths also report
  triples per CPU second of the process (steadier than wall time on a busy machine).
* ``soak``: one stream fed at a fixed event-time rate paced by the wall clock, with
  a registered sliding-window query; samples RSS (/proc or psutil), the transient store's
  bytes and the dictionary size every few seconds and reports start/end/max and
  the RSS slope over the second half (flat = the window GC bounds memory). Terms
  come from a bounded vocabulary (sensors x values): the dictionary is append-only
  by design, so a stream of ever-new IRIs grows it regardless of the GC.
* ``interference``: LUBM in the store, p50/p99 of the selective one-shot queries
  (L4-L6 style) idle, then while a stream is fed at the same rate with two
  continuous queries registered, then idle again; prints busy/idle ratios
  (Wukong+S reports < 5% slowdown). Default: through a ``jindou serve``
  subprocess, queries over keep-alive HTTP, the stream fed by another process
  (what a client sees); ``--mode inproc``: ``Database.query`` in one process
  with a feeder thread -- there a query holds the GIL while it runs, so the
  feeder's work mostly lands between queries and is not counted.

Dev numbers on a shared machine are noisy: compare within one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa

from engine.database import Database
from engine.stream.adaptor import ARROW_STREAM_TYPE
from engine.stream.manager import StreamManager

EX = "http://ex.org/bench/"
PREDICATES = [f"<{EX}p{j}>" for j in range(4)]
XSD_INT = "<http://www.w3.org/2001/XMLSchema#integer>"


# ---------------------------------------------------------------- data


def sensor_batch(start: int, n: int, t0: int, t1: int, *, sensors: int | None = None,
                 values: int = 1000) -> pa.Table:
    """n triples ``<obs_k> <p_j> "v"^^xsd:integer`` with timestamps spread over ``[t0, t1)``.

    Subjects: 4 triples per observation (unique per observation, or drawn from
    ``sensors`` subjects when given, so the vocabulary stays bounded); objects from
    ``values`` integer literals."""
    i = np.arange(start, start + n, dtype=np.int64)
    subj_no = i // 4 if sensors is None else (i // 4) % sensors
    subj = pa.array(np.char.add(np.char.add(f"<{EX}obs", subj_no.astype(str)), ">"))
    pred = pa.DictionaryArray.from_arrays(pa.array((i % 4).astype(np.int32)), pa.array(PREDICATES))
    obj_vals = pa.array(np.char.add(np.char.add('"', np.arange(values).astype(str)), '"^^' + XSD_INT))
    obj = pa.DictionaryArray.from_arrays(pa.array(((i * 7919) % values).astype(np.int32)), obj_vals)
    t = t0 + (np.arange(n, dtype=np.int64) * max(0, t1 - t0)) // max(1, n)
    return pa.table({"s": subj, "p": pred, "o": obj, "t": pa.array(t, pa.int64())})


def plain_table(tab: pa.Table) -> pa.Table:
    """The same batch with plain string columns (what a generic producer sends)."""
    cols = {}
    for k in ("s", "p", "o"):
        c = tab.column(k)
        cols[k] = c.cast(pa.string()) if not pa.types.is_dictionary(c.type) else \
            pa.chunked_array([ch.dictionary.take(ch.indices) for ch in c.chunks])
    cols["t"] = tab.column("t")
    return pa.table(cols)


def ndjson_body(tab: pa.Table) -> bytes:
    s, p, o = (plain_table(tab).column(k).to_pylist() for k in ("s", "p", "o"))
    t = tab.column("t").to_pylist()
    return b"".join(json.dumps({"s": a, "p": b, "o": c, "t": d}).encode() + b"\n"
                    for a, b, c, d in zip(s, p, o, t, strict=True))


def ipc_bytes(tab: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tab.schema) as w:
        w.write_table(tab)
    return sink.getvalue().to_pybytes()


def _manager(absorb: str = "none", budget: int = 2 << 30) -> tuple[Database, StreamManager]:
    db = Database(shards=4)
    m = StreamManager(db, transient_budget=budget)
    m.register_stream("s", EX + "s", absorb=absorb)
    return db, m


# ---------------------------------------------------------------- (a) injection


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def inject(batch: int, batches: int, http_batches: int, log=print) -> list[dict]:
    tabs = [sensor_batch(k * batch, batch, 1000 * k, 1000 * (k + 1)) for k in range(batches)]
    n = batch * batches
    out = []

    def run(label: str, absorb: str, items, call) -> None:
        db, m = _manager(absorb)
        try:
            c0, t0 = time.process_time(), time.perf_counter()
            for k, x in enumerate(items):
                r = call(m, x, k)
                assert r["accepted"] == batch and not r["errors"], r
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            out.append({"path": label, "triples": n, "batch": batch, "seconds": round(dt, 3),
                        "triples_per_s": round(_rate(n, dt)), "cpu_seconds": round(cpu, 3),
                        "triples_per_cpu_s": round(_rate(n, cpu)),
                        "store_triples": db.store.snapshot().default.n_triples,
                        "dictionary_terms": len(db.store.dictionary)})
            log(f"  {label}: {_rate(n, dt):,.0f} triples/s ({_rate(n, cpu):,.0f} per CPU second)")
        finally:
            m.close()

    run("arrow, timing (window store)", "none", tabs, lambda m, x, k: m.ingest_arrow("s", x, batch_id=f"b{k}"))
    run("arrow, absorbed (timeless -> store)", "all", tabs,
        lambda m, x, k: m.ingest_arrow("s", x, batch_id=f"b{k}"))
    plain = [plain_table(x) for x in tabs]
    run("arrow, plain string columns, timing", "none", plain, lambda m, x, k: m.ingest_arrow("s", x))
    nd = min(batches, max(1, batches // 2))
    bodies = [ndjson_body(x) for x in tabs[:nd]]
    n_saved = n
    n = batch * nd
    run("ndjson, timing", "none", bodies, lambda m, x, k: m.ingest_ndjson("s", x))
    n = n_saved
    if http_batches:
        out.append(inject_http(tabs[:http_batches], batch, log))
    return out


class _Server:
    """A ``jindou serve`` subprocess (in memory, no data) with a keep-alive connection."""

    def __init__(self, *args: str) -> None:
        from bench.peers import _HttpPeer

        self.peer = _HttpPeer()
        self.peer.name = "jindou-serve"
        self.args = list(args)

    def __enter__(self) -> _Server:
        p = self.peer
        argv = [sys.executable, "-c", "import sys; from server.cli import main; sys.exit(main())", "serve",
                "--port", str(p.port), "--host", "127.0.0.1", "--no-progress", "--log-level", "warning",
                "--max-body", str(1 << 30), "--query-timeout", "3600", *self.args]
        p._spawn(argv, dict(os.environ))
        p._wait_ready(3600)
        self.conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=600)
        return self

    def call(self, method: str, path: str, body: bytes | None = None, ctype: str | None = None,
             headers: dict | None = None) -> tuple[int, bytes]:
        h = dict(headers or {})
        if ctype:
            h["Content-Type"] = ctype
        self.conn.request(method, path, body=body, headers=h)
        r = self.conn.getresponse()
        return r.status, r.read()

    @property
    def port(self) -> int:
        return self.peer.port

    def __exit__(self, *exc) -> None:
        self.conn.close()
        self.peer.close()


def inject_http(tabs: list[pa.Table], batch: int, log=print) -> dict:
    bodies = [ipc_bytes(x) for x in tabs]
    with _Server() as srv:
        st, data = srv.call("PUT", "/streams/s", json.dumps({"iri": EX + "s"}).encode(), "application/json")
        assert st == 201, data
        t0 = time.perf_counter()
        for k, b in enumerate(bodies):
            st, data = srv.call("POST", "/streams/s", b, ARROW_STREAM_TYPE, {"Batch-Id": f"h{k}"})
            assert st == 202 and json.loads(data)["accepted"] == batch, data[:300]
        dt = time.perf_counter() - t0
    n = batch * len(bodies)
    log(f"  HTTP arrow, timing: {_rate(n, dt):,.0f} triples/s")
    return {"path": "HTTP Arrow IPC, timing", "triples": n, "batch": batch, "seconds": round(dt, 3),
            "triples_per_s": round(_rate(n, dt)), "body_bytes_per_triple": round(sum(map(len, bodies)) / n, 1)}


# ---------------------------------------------------------------- paced feeder


class Feeder(threading.Thread):
    """Feeds stream ``name`` at ``rate`` triples/s of event time = wall clock, in ``tick`` s batches."""

    def __init__(self, m: StreamManager, name: str, rate: int, tick: float = 0.1, sensors: int = 50_000):
        super().__init__(name="feeder", daemon=True)
        self.m, self.stream, self.rate, self.tick = m, name, rate, tick
        self.per_tick = max(1, int(rate * tick))
        # a few pre-built batches over a bounded vocabulary; only t changes per tick
        self.pool = [sensor_batch(j * self.per_tick, self.per_tick, 0, 1, sensors=sensors) for j in range(8)]
        self.stop_ev = threading.Event()
        self.sent = 0
        self.behind = 0          # ticks that started late (the feeder could not keep the rate)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            nxt = time.monotonic()
            k = 0
            while not self.stop_ev.is_set():
                now_ms = int(time.time() * 1000)
                tab = self.pool[k % len(self.pool)]
                t = now_ms + (np.arange(self.per_tick, dtype=np.int64) * int(self.tick * 1000)) // self.per_tick
                r = self.m.ingest_arrow(self.stream, tab.set_column(3, "t", pa.array(t, pa.int64())))
                self.sent += r["accepted"]
                k += 1
                nxt += self.tick
                wait = nxt - time.monotonic()
                if wait > 0:
                    self.stop_ev.wait(wait)
                else:
                    self.behind += 1
                    if wait < -5 * self.tick:   # do not try to catch up a long stall in a burst
                        nxt = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.error = e

    def halt(self) -> None:
        self.stop_ev.set()
        self.join(timeout=60)
        if self.error is not None:
            raise self.error


# ---------------------------------------------------------------- (b) memory soak


def _slope_mb_per_min(ts: list[float], ys: list[float]) -> float:
    if len(ts) < 2:
        return 0.0
    a = np.polyfit(np.asarray(ts) / 60.0, np.asarray(ys) / 2**20, 1)
    return float(a[0])


def soak(minutes: float, rate: int, range_s: int, step_s: int, sample_s: float, log=print) -> dict:
    from bench.peers import rss_bytes  # /proc VmRSS, psutil when there is no /proc

    db = Database(shards=4)
    m = StreamManager(db, transient_budget=4 << 30, retain=100)
    m.register_stream("s", EX + "s", clock="event")
    m.register_query(f"REGISTER QUERY soak AS SELECT (COUNT(*) AS ?n) FROM s [RANGE {range_s}s STEP {step_s}s] "
                     f"WHERE {{ ?x {PREDICATES[0]} ?v }}")
    feeder = Feeder(m, "s", rate)
    samples = []
    t_start = time.monotonic()
    feeder.start()
    try:
        end = t_start + minutes * 60
        while time.monotonic() < end:
            time.sleep(min(sample_s, max(0.0, end - time.monotonic())))
            info = m.stream("s")
            q = m.query("soak")
            samples.append({"t": round(time.monotonic() - t_start, 1), "rss": rss_bytes(),
                            "window_bytes": info["bytes"], "window_triples": info["triples_in_window_store"],
                            "dictionary_terms": len(db.store.dictionary), "sent": feeder.sent,
                            "evaluated": q["evaluated"], "last_latency_ms": q["last_latency_ms"]})
            s = samples[-1]
            log(f"  t={s['t']:>6}s rss={s['rss'] / 2**20:7.1f} MiB window={s['window_bytes'] / 2**20:7.1f} MiB "
                f"({s['window_triples']:,} triples) instants={s['evaluated']} "
                f"latency={s['last_latency_ms']} ms")
    finally:
        feeder.halt()
        m.close()
    half = [s for s in samples if s["t"] >= samples[-1]["t"] / 2] if samples else []
    rss = [s["rss"] for s in samples]
    win = [s["window_bytes"] for s in samples]
    secs = samples[-1]["t"] if samples else 0
    return {
        "minutes": minutes, "rate": rate, "window": f"RANGE {range_s}s STEP {step_s}s",
        "achieved_rate": round(feeder.sent / secs) if secs else 0, "ticks_behind": feeder.behind,
        "rss_start": rss[0] if rss else None, "rss_end": rss[-1] if rss else None, "rss_max": max(rss, default=None),
        "window_start": win[0] if win else None, "window_end": win[-1] if win else None,
        "window_max": max(win, default=None),
        "rss_slope_mb_per_min_2nd_half": round(_slope_mb_per_min([s["t"] for s in half], [s["rss"] for s in half]), 2),
        "window_slope_mb_per_min_2nd_half": round(
            _slope_mb_per_min([s["t"] for s in half], [s["window_bytes"] for s in half]), 2),
        "dictionary_terms_end": samples[-1]["dictionary_terms"] if samples else None,
        "instants_evaluated": samples[-1]["evaluated"] if samples else 0,
        "samples": samples,
    }


# ---------------------------------------------------------------- (c) interference


def _load_lubm(scale: int, log) -> tuple[Database, int]:
    from bench import lubm

    db = Database(shards=4)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lubm.nt")
        info = lubm.generate(path, triples=scale)
        db.load_file(path)
    log(f"  LUBM: {info['triples']:,} triples loaded")
    return db, info["triples"]


def _measure(run, queries, seconds: float) -> dict[str, list[float]]:
    """Round-robin ``run(text)`` over the queries for ``seconds``; per-query latencies (ms)."""
    times: dict[str, list[float]] = {q.name: [] for q in queries}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for q in queries:
            t0 = time.perf_counter()
            run(q.text)
            times[q.name].append((time.perf_counter() - t0) * 1000)
    return times


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p)) if xs else float("nan")


def interference(scale: int, rate: int, seconds: float, names: str, mode: str = "http", log=print) -> dict:
    """Selective one-shot queries idle, then with a stream fed at ``rate`` and two continuous
    queries registered, then idle again.

    ``http`` (default): a ``jindou serve`` subprocess holds LUBM; the queries come over one
    keep-alive connection and the stream is fed by a separate process posting Arrow IPC,
    so the interference is what a client of the server sees (its one GIL included).
    ``inproc``: one process, ``Database.query`` directly, feeder thread in-process."""
    from bench.queries import select

    queries = select(names)
    c1 = (f"REGISTER QUERY c1 AS SELECT (COUNT(*) AS ?n) FROM s [RANGE 10s STEP 1s] "
          f"WHERE {{ ?x {PREDICATES[0]} ?v }}")
    c2 = (f"REGISTER QUERY c2 AS SELECT ?x ?v FROM s [RANGE 2s STEP 1s] "
          f"WHERE {{ ?x {PREDICATES[1]} ?v . FILTER(?v > 998) }}")
    if mode == "inproc":
        out = _interference_inproc(scale, rate, seconds, queries, (c1, c2), log)
    else:
        out = _interference_http(scale, rate, seconds, queries, (c1, c2), log)
    rows = []
    idle1, busy, idle2 = out.pop("phases")
    for q in queries:
        idle = idle1[q.name] + idle2[q.name]
        b = busy[q.name]
        p50i, p99i, p50b, p99b = _pct(idle, 50), _pct(idle, 99), _pct(b, 50), _pct(b, 99)
        rows.append({"query": q.name, "runs_idle": len(idle), "runs_busy": len(b),
                     "idle_p50_ms": round(p50i, 4), "idle_p99_ms": round(p99i, 4),
                     "busy_p50_ms": round(p50b, 4), "busy_p99_ms": round(p99b, 4),
                     "p50_ratio": round(p50b / p50i, 3), "p99_ratio": round(p99b / p99i, 3),
                     "idle_drift_p50": round(_pct(idle2[q.name], 50) / _pct(idle1[q.name], 50), 3)})
    return {"mode": mode, "rate": rate, "seconds_per_phase": seconds, **out,
            "geomean_p50_ratio": round(statistics.geometric_mean([r["p50_ratio"] for r in rows]), 3),
            "queries": rows}


def _interference_inproc(scale, rate, seconds, queries, cqs, log) -> dict:
    db, n = _load_lubm(scale, log)
    m = StreamManager(db, transient_budget=4 << 30, retain=100)
    try:
        m.register_stream("s", EX + "s")
        for q in queries:   # warm caches (parse, plan, fast path)
            for _ in range(20):
                db.query(q.text)
        idle1 = _measure(lambda text: db.query(text), queries, seconds)
        for c in cqs:
            m.register_query(c)
        feeder = Feeder(m, "s", rate)
        feeder.start()
        time.sleep(min(3.0, seconds))   # let the windows fill
        try:
            busy = _measure(lambda text: db.query(text), queries, seconds)
        finally:
            feeder.halt()
        evaluated = sum(q["evaluated"] for q in m.queries())
        for qn in ("c1", "c2"):
            m.delete_query(qn)
        idle2 = _measure(lambda text: db.query(text), queries, seconds)
    finally:
        m.close()
    return {"lubm_triples": n, "feeder_sent": feeder.sent, "feeder_ticks_behind": feeder.behind,
            "instants_evaluated": evaluated, "phases": (idle1, busy, idle2)}


def feed_http(port: int, rate: int, seconds: float, tick: float = 0.1, sensors: int = 50_000) -> None:
    """Child process of the HTTP interference run: POST Arrow IPC batches at ``rate`` triples/s."""
    per_tick = max(1, int(rate * tick))
    pool = [sensor_batch(j * per_tick, per_tick, 0, 1, sensors=sensors) for j in range(8)]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    k = sent = behind = 0
    while time.monotonic() < end:
        t = int(time.time() * 1000) + (np.arange(per_tick, dtype=np.int64) * int(tick * 1000)) // per_tick
        body = ipc_bytes(pool[k % len(pool)].set_column(3, "t", pa.array(t, pa.int64())))
        conn.request("POST", "/streams/s", body=body, headers={"Content-Type": ARROW_STREAM_TYPE})
        r = conn.getresponse()
        data = r.read()
        if r.status != 202:
            raise RuntimeError(f"feeder: HTTP {r.status} {data[:300]!r}")
        sent += json.loads(data)["accepted"]
        k += 1
        nxt += tick
        wait = nxt - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            behind += 1
            if wait < -5 * tick:
                nxt = time.monotonic()
    print(json.dumps({"sent": sent, "behind": behind}), flush=True)


def _interference_http(scale, rate, seconds, queries, cqs, log) -> dict:
    import subprocess

    from bench import lubm

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lubm.nt")
        n = lubm.generate(path, triples=scale)["triples"]
        with _Server("--data", path) as srv:
            log(f"  LUBM: {n:,} triples loaded by jindou serve")

            def run(text: str) -> None:
                st, data = srv.call("POST", "/sparql", text.encode(), "application/sparql-query",
                                    {"Accept": "application/sparql-results+json"})
                if st != 200:
                    raise RuntimeError(f"HTTP {st}: {data[:300]!r}")

            st, data = srv.call("PUT", "/streams/s", json.dumps({"iri": EX + "s"}).encode(), "application/json")
            assert st in (200, 201), data
            for q in queries:
                for _ in range(20):
                    run(q.text)
            idle1 = _measure(run, queries, seconds)
            for c in cqs:
                st, data = srv.call("POST", "/queries", c.encode(), "application/sparql-query")
                assert st == 201, data
            warm = min(3.0, seconds)
            code = (f"from bench.stream_load import feed_http; feed_http({srv.port}, {rate}, "
                    f"{warm + seconds + 1.0})")
            feeder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
            try:
                time.sleep(warm)
                busy = _measure(run, queries, seconds)
                out, _ = feeder.communicate(timeout=600)
            finally:
                if feeder.poll() is None:
                    feeder.kill()
                    feeder.wait()
            fed = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {"sent": 0, "behind": -1}
            st, data = srv.call("GET", "/queries")
            evaluated = sum(q.get("evaluated", 0) for q in json.loads(data).get("queries", []))
            for qn in ("c1", "c2"):
                srv.call("DELETE", f"/queries/{qn}")
            idle2 = _measure(run, queries, seconds)
    return {"lubm_triples": n, "feeder_sent": fed["sent"], "feeder_ticks_behind": fed["behind"],
            "instants_evaluated": evaluated, "phases": (idle1, busy, idle2)}


# ---------------------------------------------------------------- report


def render(result: dict) -> str:
    out = []
    if "inject" in result:
        out += ["### Injection throughput", "",
                "| path | triples | batch | seconds | triples/s | triples per CPU second |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in result["inject"]:
            per_cpu = f"{r['triples_per_cpu_s']:,}" if "triples_per_cpu_s" in r else "-"
            out.append(f"| {r['path']} | {r['triples']:,} | {r['batch']:,} | {r['seconds']:.2f} | "
                       f"{r['triples_per_s']:,} | {per_cpu} |")
        out.append("")
    if "soak" in result:
        s = result["soak"]
        mib = (lambda v: "-" if v is None else f"{v / 2**20:.1f}")  # noqa: E731
        out += [f"### Memory soak ({s['minutes']} min, {s['rate']:,} triples/s, {s['window']})", "",
                "| measure | start | end | max | slope, 2nd half (MiB/min) |", "| --- | ---: | ---: | ---: | ---: |",
                f"| RSS (MiB) | {mib(s['rss_start'])} | {mib(s['rss_end'])} | {mib(s['rss_max'])} | "
                f"{s['rss_slope_mb_per_min_2nd_half']} |",
                f"| window store (MiB) | {mib(s['window_start'])} | {mib(s['window_end'])} | {mib(s['window_max'])} | "
                f"{s['window_slope_mb_per_min_2nd_half']} |", "",
                f"achieved rate {s['achieved_rate']:,} triples/s, {s['ticks_behind']} late ticks, "
                f"{s['instants_evaluated']} instants evaluated, dictionary {s['dictionary_terms_end']:,} terms", ""]
    if "interference" in result:
        r = result["interference"]
        out += [f"### One-shot latency ({r['mode']}), idle vs stream at {r['rate']:,} triples/s + 2 continuous "
                f"queries (LUBM {r['lubm_triples']:,} triples)", "",
                "| query | idle p50 ms | busy p50 ms | p50 ratio | idle p99 ms | busy p99 ms | p99 ratio |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for q in r["queries"]:
            out.append(f"| {q['query']} | {q['idle_p50_ms']:.3f} | {q['busy_p50_ms']:.3f} | {q['p50_ratio']:.2f} | "
                       f"{q['idle_p99_ms']:.3f} | {q['busy_p99_ms']:.3f} | {q['p99_ratio']:.2f} |")
        out += ["", f"geometric mean p50 ratio {r['geomean_p50_ratio']}; {r['instants_evaluated']} instants "
                f"evaluated; feeder sent {r['feeder_sent']:,} triples ({r['feeder_ticks_behind']} late ticks); "
                f"idle drift (2nd/1st idle p50): " + ", ".join(f"{q['query']} {q['idle_drift_p50']}"
                                                              for q in r["queries"]), ""]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench stream-load", description=__doc__.split("\n\n")[0])
    ap.add_argument("part", nargs="?", default="all", choices=("inject", "soak", "interference", "all"))
    ap.add_argument("--batch", type=int, default=100_000, help="triples per injected batch (default 100k)")
    ap.add_argument("--batches", type=int, default=20, help="batches per in-process injection run (default 20)")
    ap.add_argument("--http-batches", type=int, default=5, help="batches sent over HTTP (0: skip; default 5)")
    ap.add_argument("--minutes", type=float, default=10.0, help="soak duration (default 10)")
    ap.add_argument("--rate", type=int, default=100_000, help="feed rate, triples/s of event time (default 100k)")
    ap.add_argument("--range", dest="range_s", type=int, default=10, help="soak window RANGE in s (default 10)")
    ap.add_argument("--step", dest="step_s", type=int, default=1, help="soak window STEP in s (default 1)")
    ap.add_argument("--sample", type=float, default=5.0, help="soak sampling period in s (default 5)")
    ap.add_argument("--scale", default="300k", help="LUBM triples for interference (default 300k)")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds per interference phase (default 20)")
    ap.add_argument("--queries", default="L4,L5,L6", help="selective queries (default L4,L5,L6)")
    ap.add_argument("--mode", choices=("http", "inproc"), default="http",
                    help="interference through a jindou serve subprocess (default) or in process")
    ap.add_argument("--json", metavar="FILE", help="also write the full result as JSON ('-' = stdout only JSON)")
    return ap


def main(argv: list[str] | None = None) -> int:
    from bench.lubm import parse_scale

    a = build_parser().parse_args(argv)
    quiet = a.json == "-"
    log = (lambda *x, **k: print(*x, file=sys.stderr, **k)) if quiet else print  # noqa: E731
    result: dict = {"machine": {"cpus": os.cpu_count()}}
    if a.part in ("inject", "all"):
        log(f"injection: {a.batches} x {a.batch:,} triples")
        result["inject"] = inject(a.batch, a.batches, a.http_batches, log)
    if a.part in ("interference", "all"):
        log(f"interference: LUBM {a.scale}, {a.rate:,} triples/s, {a.seconds}s per phase")
        result["interference"] = interference(parse_scale(a.scale), a.rate, a.seconds, a.queries, a.mode, log)
    if a.part in ("soak", "all"):
        log(f"soak: {a.minutes} min at {a.rate:,} triples/s")
        result["soak"] = soak(a.minutes, a.rate, a.range_s, a.step_s, a.sample, log)
    if quiet:
        print(json.dumps(result, indent=1))
        return 0
    print()
    print(render(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0
