"""`python -m bench cluster`: Jindou's distributed store side by side, all over HTTP.

One run starts every configuration on the same LUBM data and keeps them up together:

* ``jindou-1``               one process (``jindou serve``);
* ``shm-2/<exec>``           ``--workers 2 --cluster-transport shm``;
* ``shm-3/<exec>``           ``--workers 3 --cluster-transport shm``;
* ``flight-3/<exec>``        ``--workers 3 --cluster-transport flight`` (the workers it spawns
                             listen on unix sockets: Flight over a unix socket);
* ``flight-tcp-3/adaptive``  three ``jindou worker --listen 127.0.0.1:PORT`` started here and
                             ``--cluster FILE --cluster-transport flight``: Flight over TCP loopback;
* ``oxigraph``               ``oxigraph serve``;

with ``<exec>`` each of ``--cluster-exec in-place | fork-join | adaptive`` (a server flag, so one
server per value).  Then, per query (L1-L7 and the selective S/C/Q ones): a warm-up on every
configuration, and R rounds that each run the query once on every configuration, the order
rotating per round (alternating runs: drift of the machine hits every configuration alike);
the median is reported.  Also: throughput of concurrent selective queries (8 client threads,
bounded duration) per configuration; resident memory (RSS and PSS, psutil) of the serving
process and of each worker (pids from GET /status "workers", else the server's ``worker``
child processes) and the size of each worker's partition files; triples per worker; the same
answers everywhere (row counts for all queries, full results for the selective ones, exit
status 3 on a mismatch).

Per-operation transport costs for the cost model (:mod:`bench.cluster_model`): Jindou's own
readers (:mod:`engine.cluster.transport`) timed against a running worker (one-vertex and
batched ``expand`` over Flight on TCP loopback and on a unix socket, and through the mapped
shared memory), a bare Arrow Flight echo server over TCP loopback (the framework's share), and,
as a cross-check, per remote operation from the HTTP latencies (cluster minus one process).
Query profiles (per plan step: distinct vertices read, rows in/out, width, start variable)
come from the one-process plan (``explain=true``) and COUNT queries over prefixes of the
plan's pattern order.  ``--report-from JSON`` re-runs the model on a saved result.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
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
    median_seconds,
    oxigraph_binary,
    result_digest,
)
from bench.queries import BY_NAME
from bench.queries import select as select_queries
from bench.runner import (
    EXIT_MISMATCH,
    _fmt_ms,
    _machine,
    _versions,
    machine_summary,
    mismatched,
    prepare_data,
    query_table_head,
    targets_table,
)

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
    tcp: bool = False  # workers started here on 127.0.0.1 ports, used through --cluster FILE

    def server_args(self, timeout: float, cluster_file: str | None = None) -> list[str]:
        args = ["--query-timeout", f"{timeout:g}"]
        if self.workers:
            args += (["--cluster", cluster_file] if self.tcp else ["--workers", str(self.workers)])
            args += ["--cluster-transport", self.transport, "--cluster-exec", self.exec_mode]
        return args


def all_configs() -> list[Config]:
    """``--workers N`` spawns its workers on unix sockets, so ``flight-3`` is Flight over a unix
    socket; ``flight-tcp-3`` is Flight over TCP loopback (workers on 127.0.0.1, ``--cluster``)."""
    out = [Config("jindou-1", "jindou")]
    for transport, n in (("shm", 2), ("shm", 3), ("flight", 3)):
        for m in EXEC_MODES:
            out.append(Config(f"{transport}-{n}/{m}", "jindou", n, transport, m))
    out.append(Config("flight-tcp-3/adaptive", "jindou", 3, "flight", "adaptive", tcp=True))
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
    workers: list = field(default_factory=list)  # worker processes started here (tcp configurations)
    tmp: str | None = None

    def request(self, text: str) -> bytes:
        for attempt in (0, 1):
            if self.peer.conn is None:  # the peers' own connection waits an hour; bound it
                self.peer.conn = http.client.HTTPConnection("127.0.0.1", self.peer.port, timeout=self.timeout + 5)
            try:
                return self.peer.request(text)
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # a keep-alive connection the server closed while idle: once more on a new one
                self.peer.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

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
        for p in self.workers:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.workers = []
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def start_tcp_workers(srv: Server, n: int, deadline_s: float = 60.0) -> str:
    """``jindou worker --listen 127.0.0.1:PORT`` x n, ready; returns the cluster TOML file."""
    from engine.cluster.remote import WorkerClient  # noqa: PLC0415

    srv.tmp = tempfile.mkdtemp(prefix="jindou-bench-cluster-")
    addrs = []
    for k in range(n):
        addr = f"127.0.0.1:{free_port()}"
        log = open(os.path.join(srv.tmp, f"worker-{k}.log"), "wb")  # noqa: SIM115
        srv.workers.append(subprocess.Popen(
            [sys.executable, "-c", "import sys; from server.cli import main; sys.exit(main())", "worker",
             "--listen", addr], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=_env()))
        log.close()
        addrs.append(addr)
    end = time.monotonic() + deadline_s
    for addr, p in zip(addrs, srv.workers, strict=True):
        c = WorkerClient(addr, call_timeout=2.0)
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"worker {addr} exited with {p.returncode}")
            try:
                c.action("ping", timeout=2.0)
                break
            except Exception:
                if time.monotonic() > end:
                    raise RuntimeError(f"worker {addr} not ready after {deadline_s} s") from None
                time.sleep(0.1)
        c.close()
    path = os.path.join(srv.tmp, "cluster.toml")
    with open(path, "w") as f:
        f.write("".join(f'[[worker]]\naddress = "{a}"\n\n' for a in addrs))
    return path


def start_server(cfg: Config, data: str, opts) -> Server:
    srv = Server(cfg, timeout=opts.timeout)
    t0 = time.perf_counter()
    try:
        if cfg.kind == "oxigraph":
            srv.peer = OxigraphServePeer()
            srv.peer.prepare()
            srv.peer.load(data)
        else:
            cluster_file = start_tcp_workers(srv, cfg.workers) if cfg.tcp else None
            srv.peer = ClusterJindou(cfg.server_args(opts.timeout, cluster_file))
            srv.peer.load(data)  # starts the server with --data and waits until it answers
    except Exception as e:
        srv.status, srv.error = "error", f"{type(e).__name__}: {str(e)[-1500:]}"
        srv.stop()
        return srv
    except BaseException:  # interrupted while starting: it is nobody else's to stop
        srv.stop()
        raise
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


def _cmd_arg(cmd: list[str], flag: str) -> str | None:
    for i, a in enumerate(cmd[:-1]):
        if a == flag:
            return cmd[i + 1]
    return None


def _worker_procs(srv: Server) -> list[tuple[int, str | None]]:
    """(pid, --listen address) of the server's workers: its child processes running
    ``worker``, or the ones this benchmark started for it."""
    import psutil  # noqa: PLC0415

    out = []
    procs = [psutil.Process(p.pid) for p in srv.workers if p.poll() is None]
    if not procs:
        procs = psutil.Process(srv.peer.server_pid()).children(recursive=True)
    for p in procs:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "worker" in cmd and "--listen" in cmd:
            out.append((p.pid, _cmd_arg(cmd, "--listen")))
    return out


def _dir_bytes(path: str | None) -> int | None:
    if not path or not os.path.isdir(path):
        return None
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def server_memory(srv: Server) -> dict:
    """Resident memory (RSS, PSS) of the serving process and of each worker, triples per
    worker and the bytes of its partition files (in /dev/shm unless --data-dir): from
    /status "workers" when the server lists them, else from each worker's own Flight
    ``status``/``describe`` actions (found as the server's ``worker`` child processes)."""
    import psutil  # noqa: PLC0415

    from engine.cluster.remote import WorkerClient  # noqa: PLC0415

    pid = srv.peer.server_pid()
    out: dict = {"server": _mem(pid), "workers": []}
    if srv.cfg.kind != "jindou":
        return out
    st = srv.get_json("/status")
    out["triples"] = (st.get("store") or {}).get("triples")
    listed = worker_entries(st)
    out["workers_in_status"] = bool(listed)
    found = {a: p for p, a in _worker_procs(srv)}
    entries = listed or [{"address": a, "pid": p} for a, p in found.items()]
    for w in entries:
        addr = w.get("address")
        entry = {"address": addr, "state": w.get("state"), "triples": w.get("triples"), "pid": w.get("pid")}
        if addr:
            c = WorkerClient(addr, call_timeout=10.0)
            try:
                ws = c.action("status", timeout=10.0)
                desc = c.action("describe", timeout=10.0)
                entry["triples"] = entry["triples"] if entry["triples"] is not None else ws.get("triples")
                entry["pid"] = entry["pid"] or ws.get("pid")
                entry["segment_bytes"] = _dir_bytes(desc.get("dir"))
            except Exception as e:
                entry["error"] = f"{type(e).__name__}: {e}"
            finally:
                c.close()
        if isinstance(entry.get("pid"), int):
            try:
                entry.update(_mem(entry["pid"]))
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
        binds = None  # an index step: the variable it binds (its rows sit with that vertex's owner)
        if not bound:
            if not _is_var(s) or (not _is_var(o) and p != RDF_TYPE):
                kind = "const"
            else:
                kind = "index"
                binds = s if _is_var(s) else o
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
            binds = s if _is_var(s) else o
        body = " . ".join(seq[: k + 1])
        rows_out = count(f"{prefix}SELECT (COUNT(*) AS ?n) WHERE {{ {body} }}")
        if start is not None:
            reads = count(f"{prefix}SELECT (COUNT(DISTINCT {start}) AS ?n) WHERE {{ {' . '.join(seq[:k])} }}")
        else:
            reads = 1 if kind == "const" else 0
        width_in = len(bound)
        bound |= set(vs)
        steps.append(cm.Step(pat, kind, reads, rows_in, rows_out, width_in, len(bound),
                             (start or binds or "")[1:] or None))
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

        def do_exchange(self, context, descriptor, reader, writer):
            t = reader.read_all()
            writer.begin(t.schema)
            writer.write_table(t)

    srv = Echo(f"grpc://127.0.0.1:{port}")
    print("ready", flush=True)
    srv.serve()
    return 0


def measure_flight(reps: int = 300) -> dict:
    """Round trips and per-byte cost of Arrow Flight over loopback (a real pyarrow.flight server
    in its own process)."""
    import numpy as np  # noqa: PLC0415
    import psutil  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415
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

        small = pa.table({"v": pa.array(np.arange(8, dtype=np.int64))})

        def exchange(_n: int) -> None:
            w, r = client.do_exchange(fl.FlightDescriptor.for_command(b"echo"))
            w.begin(small.schema)
            w.write_table(small)
            w.done_writing()
            r.read_all()
            w.close()

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
        p0 = time.process_time()
        read_us = med(action, 64, reps)  # a neighbour list of 8 ids
        post_us = (time.process_time() - p0) / (reps + 5) * 1e6  # the caller's CPU per call
        cpu_per_req = (sum(sp.cpu_times()[:2]) - c0) / (reps + 5) * 1e6
        call_us = med(get, 16, reps)
        exchange_us = med(exchange, 8, reps)
        big = 1 << 20
        big_us = med(get, big, max(5, reps // 30))
        byte_ns = max(big_us - call_us, 0.0) * 1000.0 / (big * 8)
        client.close()
        return {"read_us": read_us, "call_us": call_us, "exchange_us": exchange_us, "byte_ns": byte_ns, "post_us": post_us,
                "remote_cpu_us": cpu_per_req}
    finally:
        proc.kill()
        proc.wait(10)


def _median_us(fn, k: int, warm: int = 3) -> float:
    return median_seconds(fn, warm, k) * 1e6


def measure_jindou_transport(address: str, reps: int = 200) -> dict:
    """Per-operation costs of Jindou's own transports against one running worker, through the
    engine's reader classes (:mod:`engine.cluster.transport`): ``expand`` of one vertex (an
    in-place read; the worker's and the caller's CPU per call), ``scan`` of the largest
    predicate (per byte); over Flight, and over the mapped shared memory when the worker is on
    this host."""
    import numpy as np  # noqa: PLC0415
    import psutil  # noqa: PLC0415

    from engine.cluster.remote import WorkerClient  # noqa: PLC0415
    from engine.cluster.transport import FlightTransport, SharedMemoryTransport, same_host  # noqa: PLC0415

    client = WorkerClient(address, call_timeout=60.0)
    try:
        desc = client.action("describe")
        n_parts, part = int(desc["n_parts"]), int(desc["owned"][0])
        stats = desc["stats"]["-1"][str(part)]
        pid = int(max(stats, key=lambda r: r[1])[0])  # the largest predicate (takesCourse on LUBM)
        readers = {"flight": FlightTransport(client).shards(desc, n_parts)[-1][part]}
        if same_host(desc):
            readers["shm"] = SharedMemoryTransport(client, desc["dir"]).shards(desc, n_parts)[-1][part]
        vids = np.asarray(readers["flight"].index(pid, 0), dtype=np.int64)
        if not len(vids):
            raise RuntimeError("the worker's largest predicate has no vertices")
        rng = np.random.default_rng(0)
        out: dict = {"address": address, "predicate": pid, "vertices": int(len(vids))}
        wp = psutil.Process(int(desc["pid"])) if desc.get("pid") else None
        for name, r in readers.items():
            one = [vids[rng.integers(len(vids))][None] for _ in range(64)]
            i = [0]

            def read1(r=r, one=one, i=i):
                i[0] += 1
                return r.expand(pid, 0, one[i[0] % len(one)])

            c0 = sum(wp.cpu_times()[:2]) if wp else 0.0
            p0 = time.process_time()
            read_us = _median_us(read1, reps)
            post_us = (time.process_time() - p0) / (reps + 3) * 1e6  # this (calling) process's CPU per call
            cpu_us = (sum(wp.cpu_times()[:2]) - c0) / (reps + 3) * 1e6 if wp else 0.0
            # per byte: the whole predicate's pairs in one call (MBs, so the round trip is small beside it)
            ss, oo = r.scan(pid)
            nbytes = (len(ss) + len(oo)) * 8
            big_us = _median_us(lambda r=r: r.scan(pid), max(5, reps // 10))
            res = {"read_us": read_us, "batch_us": big_us, "batch_pairs": int(len(ss)),
                   "batch_bytes": int(nbytes), "byte_ns": max(big_us - read_us, 0.0) * 1000.0 / max(nbytes, 1),
                   "worker_cpu_us": cpu_us, "post_us": post_us}
            out[name] = res
        return out
    finally:
        client.close()


def probe_transports(servers: list[Server], opts) -> dict:
    """Jindou's transports measured on the running workers: the tcp configuration's first worker
    (Flight over TCP loopback) and a --workers one's (Flight over a unix socket, shm)."""
    out: dict = {}
    for key, pick in (("tcp", lambda s: s.cfg.tcp), ("unix", lambda s: s.cfg.workers and not s.cfg.tcp)):
        srv = next((s for s in servers if s.status == "ok" and pick(s)), None)
        if srv is None:
            continue
        try:
            addrs = [a for _p, a in _worker_procs(srv) if a]
            if addrs:
                out[key] = measure_jindou_transport(addrs[0], 50 if opts.quick else 300)
        except Exception as e:
            out[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


# --------------------------------------------------------------------------- model inputs
def jindou_effective(latency: dict, profiles: dict[str, cm.QueryProfile], cluster: str, base: str,
                     hosts: int) -> dict | None:
    """Jindou's per-remote-operation cost on a cluster configuration, from HTTP latencies of the
    selective queries: (median latency on ``cluster`` - on ``base``) / remote operations, where
    the in-place operations are the profile's batched reads (one per remote worker and step, as
    Jindou reads) and the fork-join ones its steps."""
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
            ops = (sum(cm.destinations(st, hosts) for st in p.steps) if mode == "in-place"
                   else len(p.steps))
            if ops > 0:
                vals.append(max(a - b, 0.0) * 1000.0 / ops)
        if vals:
            out[key] = statistics.median(vals)
    return out or None


def model_inputs(result: dict, profiles: dict[str, cm.QueryProfile]):
    """(transports to project on, transports to show, compute) from the measurements.

    RDMA: the paper's read latencies; its fork-join call is two one-sided WRITEs plus Jindou's
    worker-side handling of a sub-query (``dispatch_us``: Jindou's Flight exchange round trip
    minus a bare Flight exchange round trip, both over TCP loopback).  TCP: Jindou's Flight over
    TCP loopback as measured on a worker (an in-place read = one ``expand`` exchange; a call =
    a bare Flight exchange + dispatch; per byte, per extra concurrent call, worker CPU per
    call).  Compute: ``fixed_us`` = the fastest selective query on one process over HTTP,
    ``row_ns`` fitted on the one-process latencies (:func:`cluster_model.calibrate_row_ns`)."""
    lat = result["latency"]
    one = {q: v.get("jindou-1", {}).get("median_ms") for q, v in lat.items()}
    sel = [ms for q, ms in one.items() if ms is not None and q in profiles and profiles[q].selective]
    fixed_us = min(sel) * 1000.0 if sel else 0.0
    row_ns = cm.calibrate_row_ns(profiles, {k: v for k, v in one.items() if v is not None}, fixed_us)
    raw = result.get("flight") or {}
    probe = result.get("transport_probe") or {}
    tcp_m = (probe.get("tcp") or {}).get("flight")
    unix = probe.get("unix") or {}
    dispatch = 0.0
    if tcp_m and raw.get("exchange_us") is not None:
        dispatch = max(tcp_m["read_us"] - raw["exchange_us"], 0.0)
    project_on = [cm.rdma_transport(dispatch_write_us=2 * cm.RDMA_READ_US[0])]
    shown = list(project_on)
    if tcp_m:
        tcp = cm.Transport("TCP", read_us=tcp_m["read_us"],
                           call_us=raw.get("exchange_us", tcp_m["read_us"] - dispatch),
                           post_us=tcp_m.get("post_us", 0.0), byte_ns=tcp_m["byte_ns"],
                           remote_cpu_us=tcp_m["worker_cpu_us"],
                           source="Jindou worker over Arrow Flight, TCP loopback, measured", batched=True)
        project_on.append(tcp)
        shown.append(tcp)
    if unix.get("shm") and unix.get("flight"):
        shown.append(cm.Transport("shm (1 host)", read_us=unix["shm"]["read_us"], call_us=unix["flight"]["read_us"],
                                  post_us=unix["flight"].get("post_us", 0.0), byte_ns=unix["shm"]["byte_ns"],
                                  remote_cpu_us=0.0, source="Jindou worker's mapped partition; calls: Flight over "
                                  "a unix socket; measured (not projected)", batched=True))
    c = cm.Compute(row_ns=row_ns, fixed_us=fixed_us, dispatch_us=dispatch, threads=cm.PAPER_THREADS)
    return project_on, shown, c


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


def choice_table(result: dict, profiles: dict[str, cm.QueryProfile], transports: list[cm.Transport]) -> list[str]:
    """The engine's per-step choice (explain of the 3-worker adaptive servers) next to the
    model's for 3 hosts, I = in-place, F = fork-join."""
    ch = result.get("engine_choices") or {}
    if ch and not any(isinstance(v, dict) for v in ch.values()):  # older results: shm-3/adaptive only
        ch = {"shm-3/adaptive": ch}
    cfgs = [k for k, v in ch.items() if isinstance(v, dict) and any(v.values())]
    if not cfgs or not profiles:
        return []
    comp = result.get("model", {}).get("compute") or {}
    c = cm.Compute(**comp) if comp else cm.Compute(0.0, 0.0, 0.0)

    def short(xs):
        return "".join("F" if str(x).startswith("fork") else "I" for x in xs) if xs else "-"

    L = ["Per-step execution choice, the engine's (explain, 3 workers, adaptive) and the model's "
         "(3 hosts; I in place, F fork-join):", "",
         "| query | " + " | ".join(f"engine {k.split('/')[0]}" for k in cfgs) + " | "
         + " | ".join(f"model {t.name}" for t in transports) + " |",
         "| --- | " + " | ".join("---" for _ in cfgs) + " | " + " | ".join("---" for _ in transports) + " |"]
    for name, p in profiles.items():
        cells = [short(ch[k].get(name)) for k in cfgs]
        cells += ["".join(cm.project(p, t, c, 3, "adaptive").choices) for t in transports]
        L.append(f"| {name} | " + " | ".join(cells) + " |")
    L.append("")
    return L


def render_markdown(result: dict, profiles, transports, shown, compute, hosts: int) -> str:
    names = [c["name"] for c in result["configs"]]
    L: list[str] = []
    L.append(f"## Jindou cluster benchmark — LUBM {result['data']['triples']:,} triples")
    L.append("")
    L.append(f"{machine_summary(result)} · jindou {result['versions'].get('jindou', '?')} · "
             f"all over HTTP, every configuration up at once, median of {result['options']['runs']} "
             f"alternating runs after a warm-up · throughput: {result['options']['threads']} client threads for "
             f"{result['options']['throughput_s']:g} s over the selective queries")
    L.append("")
    L.append("### Configurations: load, memory, triples per worker")
    L.append("")
    L.append("| configuration | status | load s | serving RSS MB | workers RSS MB (PSS) | workers' partition files MB "
             "| triples per worker |")
    L.append("| --- | --- | ---: | ---: | --- | --- | --- |")
    for c in result["configs"]:
        mem = result["memory"].get(c["name"], {})
        ws = mem.get("workers", [])
        wtxt = ", ".join(f"{_mb(w.get('rss'))} ({_mb(w.get('pss'))})" for w in ws) or "-"
        tr = ", ".join(f"{w['triples']:,}" if isinstance(w.get("triples"), int) else "?" for w in ws) or (
            f"{mem['triples']:,}" if isinstance(mem.get("triples"), int) else "-")
        load = "-" if c.get("load_s") is None else f"{c['load_s']:.1f}"
        files = ", ".join(_mb(w.get("segment_bytes")) for w in ws) or "-"
        L.append(f"| {c['name']} | {c['status']} | {load} | {_mb(mem.get('server', {}).get('rss'))} | "
                 f"{wtxt} | {files} | {tr} |")
    L.append("")
    L.append("RSS counts the pages of the partition files a process has touched (shared between a worker and "
             "the serving process that maps them); PSS splits shared pages among their users.")
    L.append("")
    L.append("### Latency (median ms over HTTP)")
    L.append("")
    L.extend(query_table_head(names))
    bad = mismatched(result)
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
    L.extend(targets_table(TARGETS, result["targets"]))
    L.append("### Transport costs and the cost model")
    L.append("")
    fl = result.get("flight")
    if fl:
        L.append(f"Bare Arrow Flight over TCP loopback (an echo server, measured): action round trip "
                 f"{fl['read_us']:.0f} us, do_exchange {fl['exchange_us']:.0f} us, do_get {fl['call_us']:.0f} us, "
                 f"{fl['byte_ns']:.3f} ns/byte, caller CPU {fl['post_us']:.0f} us per call, server CPU "
                 f"{fl['remote_cpu_us']:.0f} us per request.")
        L.append("")
    probe = result.get("transport_probe") or {}
    for key, label in (("tcp", "TCP loopback"), ("unix", "unix socket")):
        pr = probe.get(key) or {}
        if "error" in pr:
            L.append(f"Jindou worker probe ({label}): {pr['error']}")
        for name, v in pr.items():
            if isinstance(v, dict):
                what = (f"scan of a predicate's {v['batch_pairs']:,} pairs" if "batch_pairs" in v
                        else f"expand of {v.get('batch_vertices', 0):,} vertices")
                L.append(f"Jindou worker, {name} reader ({label}): expand of 1 vertex {v['read_us']:.1f} us, "
                         f"{what} ({v['batch_bytes'] / 1024:,.0f} KiB) {v['batch_us']:,.0f} us "
                         f"= {v['byte_ns']:.2f} ns/byte, worker CPU {v['worker_cpu_us']:.1f} us and caller CPU "
                         f"{v['post_us']:.1f} us per read.")
        if pr:
            L.append("")
    for k, v in (result.get("effective") or {}).items():
        if v:
            L.append(f"Jindou {k}, per remote operation from HTTP latencies (vs jindou-1): "
                     + ", ".join(f"{kk.replace('_us', '')} {vv:.1f} us" for kk, vv in v.items()) + ".")
    L.append("")
    if profiles:
        L.extend(cm.transport_table(shown, compute))
        L.extend(cm.projection_table(profiles, transports, compute, hosts))
        L.extend(cm.paper_table(profiles, transports[0], compute))
        L.extend(choice_table(result, profiles, transports))
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
    ap.add_argument("--report-from", metavar="JSON",
                    help="no measuring: re-run the cost model and print the report of a saved --json result")
    ap.add_argument("--out", help="also write the Markdown report here")
    ap.add_argument("--json", help="write raw results as JSON (default: --out with .json)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def profiles_of(result: dict) -> dict[str, cm.QueryProfile]:
    """The query profiles saved in a result document."""
    triples = int(result["data"]["triples"])
    return {name: cm.QueryProfile(name, bool(result["queries"][name]["selective"]),
                                  tuple(cm.Step(**st) for st in steps), triples)
            for name, steps in (result.get("profiles") or {}).items()}


def report(result: dict, hosts: int) -> str:
    """Model inputs, projections, targets and the Markdown of a (measured or saved) result."""
    profiles = profiles_of(result)
    project_on, shown, compute = model_inputs(result, profiles)
    result["model"] = {"transports": [t.__dict__ for t in shown], "compute": compute.__dict__}
    result["targets"] = evaluate(result)
    return render_markdown(result, profiles, project_on, shown, compute, hosts)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the finally that stops every server


def run_cluster(argv: list[str]) -> int:
    opts = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    if opts.report_from:
        result = json.loads(Path(opts.report_from).read_text())
        md = report(result, opts.hosts)
        print(md)
        if opts.out:
            Path(opts.out).write_text(md + "\n")
        return EXIT_MISMATCH if result["mismatches"] else 0
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
        result["transport_probe"] = probe_transports(live, opts)
        result["engine_choices"] = {s.cfg.name: {q.name: engine_choices(s, q.text) for q in queries}
                                    for s in live if s.cfg.name in ("shm-3/adaptive", "flight-3/adaptive")}
    finally:
        for s in servers:
            s.stop()
    result["flight"] = None if opts.no_flight_probe else measure_flight(60 if opts.quick else 400)
    result["effective"] = {}
    for cl, hosts in (("shm-3", 3), ("flight-3", 3), ("shm-2", 2)):
        result["effective"][cl] = jindou_effective(result["latency"], profiles, cl, "jindou-1", hosts)
    md = report(result, opts.hosts)
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
