"""`python -m bench cluster`: Jindou's distributed store side by side, all over HTTP.

One run starts every configuration on the same LUBM data and keeps them up together:

* ``jindou-1``            one process (``jindou serve``);
* ``shm-2/<exec>``        ``--workers 2 --cluster-transport shm``;
* ``shm-3/<exec>``        ``--workers 3 --cluster-transport shm``;
* ``flight-3/<exec>``     ``--workers 3 --cluster-transport flight`` (Arrow Flight over loopback);
* ``oxigraph``            ``oxigraph serve``;

with ``<exec>`` each of ``--cluster-exec in-place | fork-join | adaptive`` (a server flag, so one
server per value).  Then, per query (L1-L7 and the selective S/C/Q ones): a warm-up on every
configuration, and R rounds that each run the query once on every configuration, the order
rotating per round (alternating runs: drift of the machine hits every configuration alike);
the median is reported.  Also: throughput of concurrent selective queries (8 client threads,
bounded duration) per configuration; resident memory (RSS and PSS, psutil) of the serving
process and of each worker (pids from GET /status "workers"); triples per worker (/status);
the same answers everywhere (row counts for all queries, full results for the selective ones,
exit status 3 on a mismatch).

Transport costs for the cost model (:mod:`bench.cluster_model`) are measured twice: raw Arrow
Flight over loopback against a small echo server (round trip of one action, of one do_get,
per byte, per extra concurrent call, server CPU per request), and Jindou's effective per-remote-
operation cost, derived from the HTTP latencies of the selective queries (cluster minus one
process, divided by the remote operations their profiles imply).  Query profiles (per plan
step: distinct vertices read, rows in/out, width) come from the one-process plan
(``explain=true``) and COUNT queries over prefixes of the plan's pattern order.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import http.client
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from bench import cluster_model as cm
from bench.peers import (
    JindouHttpPeer,
    OxigraphServePeer,
    _env,
    availability,
    free_port,
    oxigraph_binary,
    result_digest,
)
from bench.queries import BY_NAME
from bench.queries import select as select_queries
from bench.runner import EXIT_MISMATCH, _fmt_ms, _machine, _versions, prepare_data

EXEC_MODES = ("in-place", "fork-join", "adaptive")
RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"


def _log(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- configurations
@dataclass
class Config:
    name: str
    kind: str  # "jindou" | "oxigraph"
    workers: int = 0
    transport: str | None = None
    exec_mode: str | None = None

    def server_args(self, timeout: float) -> list[str]:
        args = ["--query-timeout", f"{timeout:g}"]
        if self.workers:
            args += ["--workers", str(self.workers), "--cluster-transport", self.transport,
                     "--cluster-exec", self.exec_mode]
        return args


def all_configs() -> list[Config]:
    out = [Config("jindou-1", "jindou")]
    for transport, n in (("shm", 2), ("shm", 3), ("flight", 3)):
        for m in EXEC_MODES:
            out.append(Config(f"{transport}-{n}/{m}", "jindou", n, transport, m))
    out.append(Config("oxigraph", "oxigraph"))
    return out


class ClusterJindou(JindouHttpPeer):
    """``jindou serve --data FILE`` (the sparql benchmark's peer) with extra server flags."""

    def __init__(self, extra: list[str]) -> None:
        super().__init__()
        self.extra = extra

    def _spawn(self, argv: list[str], env: dict | None = None) -> None:
        super()._spawn(argv + self.extra, env)


@dataclass
class Server:
    cfg: Config
    peer: object = None
    status: str = "ok"
    error: str = ""
    load_s: float | None = None
    timeout: float = 60.0
    info: dict = field(default_factory=dict)

    def request(self, text: str) -> bytes:
        if self.peer.conn is None:  # the peers' own connection waits an hour; bound it
            self.peer.conn = http.client.HTTPConnection("127.0.0.1", self.peer.port, timeout=self.timeout + 5)
        return self.peer.request(text)

    def get_json(self, path: str) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.peer.port, timeout=60)
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status} {data[:300]!r}")
        return json.loads(data)

    def stop(self) -> None:
        if self.peer is not None:
            self.peer.close()


def start_server(cfg: Config, data: str, opts) -> Server:
    srv = Server(cfg, timeout=opts.timeout)
    t0 = time.perf_counter()
    try:
        if cfg.kind == "oxigraph":
            srv.peer = OxigraphServePeer()
            srv.peer.prepare()
            srv.peer.load(data)
        else:
            srv.peer = ClusterJindou(cfg.server_args(opts.timeout))
            srv.peer.load(data)  # starts the server with --data and waits until it answers
    except Exception as e:
        srv.status, srv.error = "error", f"{type(e).__name__}: {str(e)[-1500:]}"
        srv.stop()
        return srv
    srv.load_s = time.perf_counter() - t0
    return srv


# --------------------------------------------------------------------------- /status, memory
def worker_entries(status: dict) -> list[dict]:
    """The "workers" list of a /status document (top level or under "store")."""
    for doc in (status, status.get("store") or {}):
        w = doc.get("workers") if isinstance(doc, dict) else None
        if isinstance(w, list):
            return [x for x in w if isinstance(x, dict)]
    return []


def _mem(pid: int) -> dict:
    import psutil  # noqa: PLC0415

    p = psutil.Process(pid)
    out = {"pid": pid, "rss": p.memory_info().rss}
    try:
        out["pss"] = p.memory_full_info().pss
    except (psutil.AccessDenied, AttributeError):
        pass
    return out


def server_memory(srv: Server) -> dict:
    """Resident memory of the serving process and of each worker, triples per worker."""
    import psutil  # noqa: PLC0415

    pid = srv.peer.server_pid()
    out: dict = {"server": _mem(pid), "workers": []}
    if srv.cfg.kind != "jindou":
        return out
    try:
        st = srv.get_json("/status")
    except Exception as e:
        out["error"] = str(e)
        return out
    store = st.get("store") or {}
    out["triples"] = store.get("triples")
    children = {c.pid for c in psutil.Process(pid).children(recursive=True)}
    for w in worker_entries(st):
        entry = {"address": w.get("address"), "state": w.get("state"), "triples": w.get("triples"),
                 "partitions": w.get("partitions"), "rss_reported": w.get("rss_bytes")}
        wpid = w.get("pid")
        if isinstance(wpid, int):
            entry["child_of_server"] = wpid in children
            try:
                entry.update(_mem(wpid))
            except psutil.Error as e:
                entry["error"] = str(e)
        out["workers"].append(entry)
    return out


# --------------------------------------------------------------------------- timing
def timed(srv: Server, text: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    data = srv.request(text)
    dt = time.perf_counter() - t0
    return dt, srv.peer.rows(data)


def run_latency(servers: list[Server], queries, opts) -> dict:
    """{query: {config: {"rows", "median_ms", "runs", ...} | {"status": "timeout"|"error"}}}."""
    out: dict = {}
    live = [s for s in servers if s.status == "ok"]
    for q in queries:
        res: dict = {}
        slow: set[str] = set()
        samples: dict[str, list[float]] = {}
        for s in live:  # warm-up (also the row count)
            try:
                dt, n = timed(s, q.text)
                res[s.cfg.name] = {"status": "ok", "rows": n, "warm_ms": dt * 1000.0}
                samples[s.cfg.name] = []
                if dt >= opts.slow:  # too slow to repeat: the warm-up is its only sample
                    slow.add(s.cfg.name)
                    samples[s.cfg.name].append(dt)
            except TimeoutError:
                res[s.cfg.name] = {"status": "timeout"}
                s.peer.conn = None
            except Exception as e:
                res[s.cfg.name] = {"status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}
                s.peer.conn = None
        rot = [s for s in live if res[s.cfg.name]["status"] == "ok" and s.cfg.name not in slow]
        for r in range(opts.runs):
            k = r % len(rot) if rot else 0
            for s in rot[k:] + rot[:k]:
                if res[s.cfg.name]["status"] != "ok":
                    continue
                try:
                    dt, n = timed(s, q.text)
                except TimeoutError:
                    res[s.cfg.name] = {"status": "timeout"}
                    continue
                except Exception as e:
                    res[s.cfg.name] = {"status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}
                    s.peer.conn = None
                    continue
                samples[s.cfg.name].append(dt)
                if n != res[s.cfg.name]["rows"]:
                    res[s.cfg.name]["unstable_rows"] = n
        for name, xs in samples.items():
            if res[name]["status"] == "ok" and xs:
                res[name].update(median_ms=statistics.median(xs) * 1000.0, min_ms=min(xs) * 1000.0, runs=len(xs))
        out[q.name] = res
        _log(f"{q.name}: " + ", ".join(f"{k} {_fmt_ms(v.get('median_ms'))}" if v["status"] == "ok" else
                                       f"{k} {v['status']}" for k, v in res.items()), opts.quiet)
    return out


def json_rows(data: bytes) -> list[str]:
    from bench.peers import _json_term  # noqa: PLC0415

    doc = json.loads(data)
    if "boolean" in doc:
        return [str(int(bool(doc["boolean"])))]
    names = doc["head"]["vars"]
    return ["\t".join(_json_term(b.get(v)) for v in names) for b in doc["results"]["bindings"]]


def check_answers(servers: list[Server], queries, latency: dict) -> tuple[dict, list[str]]:
    """Row counts of every query must agree; the selective ones' full results too (digests)."""
    problems: list[str] = []
    digests: dict = {}
    for q in queries:
        counts = {k: v["rows"] for k, v in latency[q.name].items() if v.get("status") == "ok"}
        if len(set(counts.values())) > 1:
            problems.append(f"{q.name}: row counts differ: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        if not q.selective:
            continue
        d = {}
        for s in servers:
            if s.status != "ok" or latency[q.name].get(s.cfg.name, {}).get("status") != "ok":
                continue
            try:
                d[s.cfg.name] = result_digest(json_rows(s.request(q.text)))
            except Exception as e:
                d[s.cfg.name] = f"error {type(e).__name__}"
                s.peer.conn = None
        digests[q.name] = d
        if len(set(d.values())) > 1 and not any(x.startswith(f"{q.name}:") for x in problems):
            problems.append(f"{q.name}: different results (digests): " + ", ".join(f"{k}={v}" for k, v in d.items()))
    return digests, problems


def throughput(srv: Server, texts: list[str], threads: int, seconds: float) -> dict:
    """Completed queries per second with ``threads`` clients looping over ``texts`` for ``seconds``."""
    done = [0] * threads
    errors = [0] * threads
    lat: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Event()
    stop_at = [0.0]

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", srv.peer.port, timeout=srv.timeout + 5)
        path = srv.peer.query_path
        k = i
        start.wait()
        while time.perf_counter() < stop_at[0]:
            body = texts[k % len(texts)].encode()
            k += 1
            t0 = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers={"Content-Type": "application/sparql-query",
                                                               "Accept": "application/sparql-results+json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status == 200:
                    done[i] += 1
                    lat[i].append(time.perf_counter() - t0)
                else:
                    errors[i] += 1
            except Exception:
                errors[i] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", srv.peer.port, timeout=srv.timeout + 5)
        conn.close()

    ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    stop_at[0] = t0 + seconds
    start.set()
    for t in ts:
        t.join(seconds + srv.timeout + 10)
    elapsed = time.perf_counter() - t0
    all_lat = sorted(x for xs in lat for x in xs)
    out = {"qps": sum(done) / elapsed, "completed": sum(done), "errors": sum(errors), "seconds": elapsed}
    if all_lat:
        out["p50_ms"] = all_lat[len(all_lat) // 2] * 1000.0
        out["p99_ms"] = all_lat[min(len(all_lat) - 1, int(len(all_lat) * 0.99))] * 1000.0
    return out


# --------------------------------------------------------------------------- query profiles
_TOKEN = re.compile(r'<[^>]*>|\?\w+|\$\w+|"(?:[^"\\]|\\.)*"\S*|\S+')


def pattern_terms(pattern: str) -> tuple[str, str, str]:
    toks = _TOKEN.findall(pattern)
    if len(toks) != 3:
        raise ValueError(f"not a triple pattern: {pattern!r}")
    return toks[0], toks[1], toks[2]


def _is_var(t: str) -> bool:
    return t[:1] in "?$"


def find_bgp(plan: dict) -> dict | None:
    """The first BGP operator (with patterns and order) in an explain document's plan tree."""
    stack = [plan]
    while stack:
        n = stack.pop()
        if n.get("patterns") and n.get("order") is not None:
            return n
        stack.extend(reversed(n.get("children", [])))
    return None


def profile_query(name: str, selective: bool, patterns: list[str], order: list[int], count, triples: int,
                  prefix: str = "") -> cm.QueryProfile:
    """Per-step counts of a BGP run in ``order``: ``count(sparql) -> int`` answers COUNT queries.

    rows after step k = COUNT(*) of the first k+1 patterns; the vertices step k reads = COUNT(
    DISTINCT ?v) of the first k patterns, ?v the bound end the step starts from.
    """
    seq = [patterns[i] for i in order]
    steps: list[cm.Step] = []
    bound: set[str] = set()
    rows_in = 1
    for k, pat in enumerate(seq):
        s, p, o = pattern_terms(pat)
        vs = [t for t in (s, p, o) if _is_var(t)]
        start = None  # the variable whose lists the step reads
        if not bound:
            if not _is_var(s) or (not _is_var(o) and p != RDF_TYPE):
                kind = "const"
            else:
                kind = "index"
        elif all(v in bound for v in vs):
            kind = "prune"
            start = s if _is_var(s) else o
        elif (_is_var(s) and s in bound) or (_is_var(o) and o in bound):
            kind = "expand"
            start = s if _is_var(s) and s in bound else o
        elif not _is_var(s) or (not _is_var(o) and p != RDF_TYPE):
            kind = "const"
        else:
            kind = "index"
        body = " . ".join(seq[: k + 1])
        rows_out = count(f"{prefix}SELECT (COUNT(*) AS ?n) WHERE {{ {body} }}")
        if start is not None:
            reads = count(f"{prefix}SELECT (COUNT(DISTINCT {start}) AS ?n) WHERE {{ {' . '.join(seq[:k])} }}")
        else:
            reads = 1 if kind == "const" else 0
        width_in = len(bound)
        bound |= set(vs)
        steps.append(cm.Step(pat, kind, reads, rows_in, rows_out, width_in, len(bound)))
        rows_in = rows_out
    return cm.QueryProfile(name, selective, tuple(steps), triples)


def _count_http(srv: Server):
    def count(text: str) -> int:
        doc = json.loads(srv.request(text))
        b = doc["results"]["bindings"]
        return int(b[0]["n"]["value"]) if b else 0

    return count


def explain(srv: Server, text: str) -> dict:
    q = urllib.parse.urlencode({"query": text, "explain": "true"})
    return srv.get_json(f"/sparql?{q}")


def measure_profiles(srv: Server, queries, triples: int, opts) -> dict[str, cm.QueryProfile]:
    out = {}
    count = _count_http(srv)
    for q in queries:
        try:
            bgp = find_bgp(explain(srv, q.text)["plan"])
            if bgp is None:
                continue
            pre = q.text[: q.text.index("SELECT")] if "SELECT" in q.text else ""
            out[q.name] = profile_query(q.name, q.selective, bgp["patterns"], bgp["order"], count, triples, pre)
        except Exception as e:
            _log(f"profile {q.name}: {type(e).__name__}: {e}", opts.quiet)
    return out


def engine_choices(srv: Server, text: str) -> list[str] | None:
    """The per-step execution choice a cluster server's explain reports, if it reports one."""
    try:
        bgp = find_bgp(explain(srv, text)["plan"])
    except Exception:
        return None
    if bgp is None:
        return None
    out = []
    for st in bgp.get("steps", []):
        v = next((st[k] for k in ("exec", "mode", "execution", "choice") if k in st), None)
        if v is None:
            return None
        out.append(str(v))
    return out


# --------------------------------------------------------------------------- raw Flight loopback
def _flight_echo(port: int) -> int:
    """A minimal Arrow Flight server: action "echo" returns N bytes, do_get returns N int64."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.flight as fl  # noqa: PLC0415

    class Echo(fl.FlightServerBase):
        def do_action(self, context, action):
            n = int(action.body.to_pybytes() or b"0")
            yield fl.Result(pa.py_buffer(bytes(n)))

        def do_get(self, context, ticket):
            n = int(ticket.ticket)
            return fl.RecordBatchStream(pa.table({"v": pa.array(np.arange(n, dtype=np.int64))}))

    srv = Echo(f"grpc://127.0.0.1:{port}")
    print("ready", flush=True)
    srv.serve()
    return 0


def measure_flight(reps: int = 300) -> dict:
    """Round trips and per-byte cost of Arrow Flight over loopback (a real pyarrow.flight server
    in its own process)."""
    import psutil  # noqa: PLC0415
    import pyarrow.flight as fl  # noqa: PLC0415

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.cluster", "flight-echo", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env(), text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("flight echo server did not start")
        client = fl.FlightClient(f"grpc://127.0.0.1:{port}")

        def action(n: int) -> None:
            list(client.do_action(fl.Action("echo", str(n).encode())))

        def get(n: int) -> None:
            client.do_get(fl.Ticket(str(n).encode())).read_all()

        def med(fn, n, k) -> float:
            for _ in range(5):
                fn(n)
            xs = []
            for _ in range(k):
                t0 = time.perf_counter()
                fn(n)
                xs.append(time.perf_counter() - t0)
            return statistics.median(xs) * 1e6

        for _ in range(20):  # connect, warm up
            action(64)
        sp = psutil.Process(proc.pid)
        c0 = sum(sp.cpu_times()[:2])
        read_us = med(action, 64, reps)  # a neighbour list of 8 ids
        cpu_per_req = (sum(sp.cpu_times()[:2]) - c0) / (reps + 5) * 1e6
        call_us = med(get, 16, reps)
        big = 1 << 20
        big_us = med(get, big, max(5, reps // 30))
        byte_ns = max(big_us - call_us, 0.0) * 1000.0 / (big * 8)
        # concurrent calls from 8 threads: the extra time per extra call is the sender's cost
        n = 8
        xs = []
        for _ in range(max(10, reps // 10)):
            barrier = threading.Barrier(n + 1)
            ths = [threading.Thread(target=lambda b=barrier: (b.wait(), action(64))) for _ in range(n)]
            for t in ths:
                t.start()
            t0 = time.perf_counter()
            barrier.wait()
            for t in ths:
                t.join()
            xs.append(time.perf_counter() - t0)
        conc_us = statistics.median(xs) * 1e6
        post_us = max(conc_us - read_us, 0.0) / (n - 1)
        client.close()
        return {"read_us": read_us, "call_us": call_us, "byte_ns": byte_ns, "post_us": post_us,
                "remote_cpu_us": cpu_per_req, "concurrent8_us": conc_us}
    finally:
        proc.kill()
        proc.wait(10)


# --------------------------------------------------------------------------- model inputs
def jindou_effective(latency: dict, profiles: dict[str, cm.QueryProfile], cluster: str, base: str,
                     hosts: int) -> dict | None:
    """Jindou's per-remote-operation cost on a cluster configuration, from HTTP latencies of the
    selective queries: (median latency on ``cluster`` - on ``base``) / remote operations, where
    the in-place operations are the profile's remote reads and the fork-join ones its steps."""
    out = {}
    for mode, key in (("in-place", "read_us"), ("fork-join", "call_us")):
        vals = []
        for name, p in profiles.items():
            if not p.selective:
                continue
            a = latency.get(name, {}).get(f"{cluster}/{mode}", {}).get("median_ms")
            b = latency.get(name, {}).get(base, {}).get("median_ms")
            if a is None or b is None:
                continue
            ops = (sum(cm.remote_reads(st, hosts) for st in p.steps) if mode == "in-place"
                   else len(p.steps))
            if ops > 0:
                vals.append(max(a - b, 0.0) * 1000.0 / ops)
        if vals:
            out[key] = statistics.median(vals)
    return out or None


def model_inputs(result: dict, profiles: dict[str, cm.QueryProfile], flight: dict | None):
    lat = result["latency"]
    one = {q: v.get("jindou-1", {}).get("median_ms") for q, v in lat.items()}
    sel = [ms for q, ms in one.items() if ms is not None and q in profiles and profiles[q].selective]
    fixed_us = min(sel) * 1000.0 if sel else 0.0
    row_ns = cm.calibrate_row_ns(profiles, {k: v for k, v in one.items() if v is not None}, fixed_us)
    transports = [cm.rdma_transport()]
    dispatch = 0.0
    if flight:
        tcp = cm.Transport("TCP", read_us=flight["read_us"], call_us=flight["call_us"],
                           post_us=flight["post_us"], byte_ns=flight["byte_ns"],
                           remote_cpu_us=flight["remote_cpu_us"], source="Arrow Flight over loopback, measured")
        transports.append(tcp)
        eff = result.get("effective", {}).get("flight-3")
        if eff and "call_us" in eff:
            dispatch = max(eff["call_us"] - flight["call_us"], 0.0)
        if eff and "read_us" in eff:
            transports.append(cm.Transport("Jindou-Flight", read_us=eff["read_us"],
                                           call_us=eff.get("call_us", flight["call_us"]), post_us=flight["post_us"],
                                           byte_ns=flight["byte_ns"], remote_cpu_us=flight["remote_cpu_us"],
                                           source="Jindou over Flight, per remote op, from HTTP latencies"))
    c = cm.Compute(row_ns=row_ns, fixed_us=fixed_us, dispatch_us=dispatch, threads=cm.PAPER_THREADS)
    return transports, c


# --------------------------------------------------------------------------- report
TARGETS = {
    "answers": "same answers everywhere",
    "selective": "3 workers (shm, adaptive): selective queries within 1.5x of oxigraph serve",
    "nonselective": "3 workers (shm, adaptive): non-selective queries >= 2x faster than oxigraph serve",
    "balance": "each worker holds about 1/N of the triples (within 25%)",
}


def evaluate(result: dict) -> dict:
    lat = result["latency"]
    ev: dict = {"answers": (not result["mismatches"], "no mismatch" if not result["mismatches"]
                            else f"{len(result['mismatches'])} mismatch(es)")}
    for key, selective in (("selective", True), ("nonselective", False)):
        ratios = []
        for qn, meta in result["queries"].items():
            if meta["selective"] != selective:
                continue
            a = lat.get(qn, {}).get("shm-3/adaptive", {}).get("median_ms")
            b = lat.get(qn, {}).get("oxigraph", {}).get("median_ms")
            if a and b:
                ratios.append((qn, a / b))
        if not ratios:
            ev[key] = (None, "n/a")
        elif selective:
            worst = max(ratios, key=lambda x: x[1])
            ev[key] = (worst[1] <= 1.5, "worst " + f"{worst[0]} {worst[1]:.2f}x oxigraph's time; "
                       + ", ".join(f"{q} {r:.2f}x" for q, r in ratios))
        else:
            worst = max(ratios, key=lambda x: x[1])
            ev[key] = (worst[1] <= 0.5, f"worst {worst[0]} {1 / worst[1]:.2f}x faster; "
                       + ", ".join(f"{q} {1 / r:.2f}x" for q, r in ratios))
    shares = []
    for name, mem in result["memory"].items():
        ws = [w.get("triples") for w in mem.get("workers", [])]
        if ws and all(isinstance(x, int) for x in ws) and sum(ws):
            n = len(ws)
            dev = max(abs(x * n / sum(ws) - 1) for x in ws)
            shares.append((name, dev))
    if shares:
        worst = max(shares, key=lambda x: x[1])
        ev["balance"] = (worst[1] <= 0.25, f"largest deviation from 1/N: {worst[1] * 100:.1f}% ({worst[0]})")
    else:
        ev["balance"] = (None, "n/a (no per-worker triple counts in /status)")
    return ev


def _mb(b) -> str:
    return "-" if b is None else f"{b / 2**20:,.0f}"


def render_markdown(result: dict, profiles, transports, compute, hosts: int) -> str:
    names = [c["name"] for c in result["configs"]]
    L: list[str] = []
    m = result["machine"]
    L.append(f"## Jindou cluster benchmark — LUBM {result['data']['triples']:,} triples")
    L.append("")
    L.append(f"{result['date']} · {m['cpus']} CPUs ({m['cpu_model']}) · load avg {m.get('loadavg_1m') or 0:.2f} "
             f"at start · Python {m['python']} · jindou {result['versions'].get('jindou', '?')} · "
             f"all over HTTP, every configuration up at once, median of {result['options']['runs']} "
             f"alternating runs after a warm-up · throughput: {result['options']['threads']} client threads for "
             f"{result['options']['throughput_s']:g} s over the selective queries")
    L.append("")
    L.append("### Configurations: load, memory, triples per worker")
    L.append("")
    L.append("| configuration | status | load s | serving RSS MB | workers RSS MB (PSS) | triples per worker |")
    L.append("| --- | --- | ---: | ---: | --- | --- |")
    for c in result["configs"]:
        mem = result["memory"].get(c["name"], {})
        ws = mem.get("workers", [])
        wtxt = ", ".join(f"{_mb(w.get('rss'))} ({_mb(w.get('pss'))})" for w in ws) or "-"
        tr = ", ".join(f"{w['triples']:,}" if isinstance(w.get("triples"), int) else "?" for w in ws) or (
            f"{mem['triples']:,}" if isinstance(mem.get("triples"), int) else "-")
        load = "-" if c.get("load_s") is None else f"{c['load_s']:.1f}"
        L.append(f"| {c['name']} | {c['status']} | {load} | {_mb(mem.get('server', {}).get('rss'))} | "
                 f"{wtxt} | {tr} |")
    L.append("")
    L.append("### Latency (median ms over HTTP)")
    L.append("")
    L.append("| query | class | rows | " + " | ".join(names) + " |")
    L.append("| --- | --- | ---: | " + " | ".join("---:" for _ in names) + " |")
    bad = {line.split(":")[0] for line in result["mismatches"]}
    for qn, meta in result["queries"].items():
        row = result["latency"].get(qn, {})
        rows = next((v["rows"] for v in row.values() if v.get("status") == "ok"), None)
        rows_s = "**MISMATCH**" if qn in bad else ("-" if rows is None else f"{rows:,}")
        cells = []
        for n in names:
            v = row.get(n)
            if v is None:
                cells.append("-")
            elif v.get("status") != "ok":
                cells.append(v["status"])
            else:
                cells.append(_fmt_ms(v.get("median_ms")) + ("*" if v.get("runs") == 1 else ""))
        L.append(f"| {qn} | {meta['class']} | {rows_s} | " + " | ".join(cells) + " |")
    L.append("")
    L.append("`*`: slower than the repeat threshold, the warm-up is the only sample.")
    L.append("")
    L.append("### Throughput of concurrent selective queries")
    L.append("")
    L.append("| configuration | queries/s | p50 ms | p99 ms | errors |")
    L.append("| --- | ---: | ---: | ---: | ---: |")
    for n in names:
        t = result["throughput"].get(n)
        if not t:
            continue
        L.append(f"| {n} | {t['qps']:,.0f} | {_fmt_ms(t.get('p50_ms'))} | {_fmt_ms(t.get('p99_ms'))} | "
                 f"{t['errors']} |")
    L.append("")
    if result["mismatches"]:
        L.append("**Answer mismatches:**")
        L.append("")
        L.extend(f"- {x}" for x in result["mismatches"])
        L.append("")
    L.append("### Targets")
    L.append("")
    L.append("| target | result | verdict |")
    L.append("| --- | --- | --- |")
    for key, text in TARGETS.items():
        ok, detail = result["targets"][key]
        L.append(f"| {text} | {detail} | {'n/a' if ok is None else ('met' if ok else '**not met**')} |")
    L.append("")
    L.append("### Transport costs and the cost model")
    L.append("")
    fl = result.get("flight")
    if fl:
        L.append(f"Arrow Flight over loopback (measured): action round trip {fl['read_us']:.0f} us, "
                 f"do_get round trip {fl['call_us']:.0f} us, {fl['byte_ns']:.3f} ns/byte, "
                 f"{fl['post_us']:.0f} us per extra concurrent call, server CPU {fl['remote_cpu_us']:.0f} us "
                 "per request.")
    for k, v in (result.get("effective") or {}).items():
        if v:
            L.append(f"Jindou {k}, per remote operation from HTTP latencies (vs jindou-1): "
                     + ", ".join(f"{kk.replace('_us', '')} {vv:.1f} us" for kk, vv in v.items()) + ".")
    L.append("")
    if profiles:
        L.extend(cm.transport_table(transports, compute))
        L.extend(cm.projection_table(profiles, transports, compute, hosts))
        L.extend(cm.paper_table(profiles, transports[0], compute))
        ch = result.get("engine_choices") or {}
        if any(ch.values()):
            L.append("Engine's own per-step choice (shm-3/adaptive explain): " + "; ".join(
                f"{k} {'/'.join(v)}" for k, v in ch.items() if v))
            L.append("")
    errs = [f"- {c['name']}: {c['error']}" for c in result["configs"] if c.get("error")]
    for qn, row in result["latency"].items():
        errs += [f"- {n} {qn}: {v['error']}" for n, v in row.items() if v.get("status") == "error"]
    if errs:
        L.append("Errors:")
        L.append("")
        L.extend(errs)
        L.append("")
    return "\n".join(L)


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench cluster",
                                 description="Jindou 1 process vs --workers 2/3 (shm, Flight) vs oxigraph serve")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--scale", default="1M", help="target triple count (default 1M; e.g. 5M for the largest "
                   "that fits with every configuration up at once)")
    g.add_argument("--universities", type=int)
    g.add_argument("--data", help="an existing N-Triples file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir")
    ap.add_argument("--queries", help="comma list (default all)")
    ap.add_argument("--configs", help="comma list of configuration names (default all: "
                    + ", ".join(c.name for c in all_configs()) + ")")
    ap.add_argument("--runs", type=int, default=7, help="alternating rounds per query (default 7)")
    ap.add_argument("--slow", type=float, default=5.0,
                    help="a configuration whose warm-up takes longer is not repeated (default 5 s)")
    ap.add_argument("--timeout", type=float, default=120.0, help="per-query timeout, s (default 120)")
    ap.add_argument("--threads", type=int, default=8, help="client threads for throughput (default 8)")
    ap.add_argument("--throughput-seconds", type=float, default=5.0)
    ap.add_argument("--hosts", type=int, default=8, help="hosts of the projected cluster (default 8)")
    ap.add_argument("--no-flight-probe", action="store_true", help="skip the raw Flight loopback measurement")
    ap.add_argument("--quick", action="store_true", help="2 runs, 1 s throughput, fewer Flight probes (tests)")
    ap.add_argument("--out", help="also write the Markdown report here")
    ap.add_argument("--json", help="write raw results as JSON (default: --out with .json)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def run_cluster(argv: list[str]) -> int:
    opts = build_parser().parse_args(argv)
    if opts.quick:
        opts.runs = min(opts.runs, 2)
        opts.throughput_seconds = min(opts.throughput_seconds, 1.0)
    queries = select_queries(opts.queries)
    configs = all_configs()
    if opts.configs:
        wanted = [x.strip() for x in opts.configs.split(",") if x.strip()]
        known = {c.name: c for c in configs}
        for w in wanted:
            if w not in known:
                raise SystemExit(f"unknown configuration {w!r}; known: {', '.join(known)}")
        if "jindou-1" not in wanted:
            wanted.insert(0, "jindou-1")  # the reference for profiles and per-operation costs
        configs = [known[w] for w in wanted]
    avail = availability()
    if avail.get("jindou-http"):
        raise SystemExit(f"jindou serve is {avail['jindou-http']}")
    data, triples, info = prepare_data(opts)
    result: dict = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(), "versions": _versions(),
        "data": {**info, "path": data, "triples": triples},
        "options": {"runs": opts.runs, "threads": opts.threads, "throughput_s": opts.throughput_seconds,
                    "timeout": opts.timeout, "slow_s": opts.slow, "hosts": opts.hosts},
        "queries": {q.name: {"class": q.kind, "selective": q.selective} for q in queries},
        "configs": [], "memory": {}, "throughput": {},
    }
    servers: list[Server] = []
    try:
        for c in configs:
            if c.kind == "oxigraph" and not oxigraph_binary():
                result["configs"].append({"name": c.name, "status": "unavailable", "error": "no oxigraph binary"})
                continue
            _log(f"[{c.name}] starting on {data} ...", opts.quiet)
            s = start_server(c, data, opts)
            servers.append(s)
            result["configs"].append({"name": c.name, "status": s.status, "load_s": s.load_s,
                                      **({"error": s.error} if s.error else {})})
            _log(f"[{c.name}] {s.status} {'' if s.load_s is None else f'in {s.load_s:.1f} s'} {s.error}",
                 opts.quiet)
        live = [s for s in servers if s.status == "ok"]
        for s in live:
            try:
                result["memory"][s.cfg.name] = server_memory(s)
            except Exception as e:
                result["memory"][s.cfg.name] = {"error": f"{type(e).__name__}: {e}"}
        result["latency"] = run_latency(servers, queries, opts)
        result["digests"], result["mismatches"] = check_answers(servers, queries, result["latency"])
        texts = [q.text for q in queries if q.selective] or [BY_NAME["L4"].text]
        for s in live:
            result["throughput"][s.cfg.name] = throughput(s, texts, opts.threads, opts.throughput_seconds)
            _log(f"[{s.cfg.name}] throughput {result['throughput'][s.cfg.name]['qps']:.0f} q/s", opts.quiet)
        ref = next((s for s in live if s.cfg.name == "jindou-1"), None)
        profiles = measure_profiles(ref, queries, triples, opts) if ref is not None else {}
        result["profiles"] = {k: [st.__dict__ for st in p.steps] for k, p in profiles.items()}
        adaptive3 = next((s for s in live if s.cfg.name == "shm-3/adaptive"), None)
        result["engine_choices"] = ({q.name: engine_choices(adaptive3, q.text) for q in queries}
                                    if adaptive3 else {})
    finally:
        for s in servers:
            s.stop()
    result["flight"] = None if opts.no_flight_probe else measure_flight(60 if opts.quick else 400)
    result["effective"] = {}
    for cl, hosts in (("shm-3", 3), ("flight-3", 3), ("shm-2", 2)):
        result["effective"][cl] = jindou_effective(result["latency"], profiles, cl, "jindou-1", hosts)
    transports, compute = model_inputs(result, profiles, result["flight"])
    result["model"] = {"transports": [t.__dict__ for t in transports], "compute": compute.__dict__}
    result["targets"] = evaluate(result)
    md = render_markdown(result, profiles, transports, compute, opts.hosts)
    print(md)
    if result["mismatches"]:
        print("\n!!! ANSWER MISMATCH: " + "; ".join(result["mismatches"]), file=sys.stderr)
    if opts.out:
        Path(opts.out).write_text(md + "\n")
    jp = opts.json or (str(Path(opts.out).with_suffix(".json")) if opts.out else None)
    if jp:
        Path(jp).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return EXIT_MISMATCH if result["mismatches"] else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "flight-echo":
        return _flight_echo(int(argv[1]))
    return run_cluster(argv)


if __name__ == "__main__":
    sys.exit(main())
