"""Benchmark peers and the per-peer worker process.

Every peer runs in its own worker process (``python -m bench.peers worker``) so
that resident memory can be measured in isolation and a runaway query can be
stopped by killing the process group.  The worker speaks JSON lines: it writes
``{"op": "loaded", ...}`` once the data is in, then answers one request per line
read from stdin.

Peers:

* ``jindou``          - ``engine.database.Database`` in-process
* ``pyoxigraph``      - ``pyoxigraph.Store()`` (in memory) in-process
* ``rdflib``          - ``rdflib.Graph()`` in-process (small scales only)
* ``oxigraph-serve``  - ``oxigraph serve`` (in memory) over keep-alive HTTP, data POSTed to /store
* ``jindou-http``     - ``jindou serve --data FILE`` over keep-alive HTTP
"""

from __future__ import annotations

import gc
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

IN_PROCESS = ("jindou", "pyoxigraph", "rdflib")
HTTP_PEERS = ("oxigraph-serve", "jindou-http")
ALL_PEERS = ("jindou", "pyoxigraph", "oxigraph-serve", "rdflib", "jindou-http")

JSON_RESULTS = "application/sparql-results+json"


# --------------------------------------------------------------------------- memory helpers
def rss_bytes(pid: int | None = None) -> int:
    """Current resident set size of a process (Linux /proc, psutil fallback)."""
    path = f"/proc/{pid or 'self'}/status"
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.Process(pid or os.getpid()).memory_info().rss)
    except Exception:
        return 0


def release_free_memory() -> None:
    """Return allocator caches to the OS so RSS reflects live data: gc, glibc malloc_trim, pyarrow pool."""
    gc.collect()
    if "pyarrow" in sys.modules:
        try:
            sys.modules["pyarrow"].default_memory_pool().release_unused()
        except Exception:
            pass
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except Exception:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def oxigraph_binary() -> str | None:
    cand = Path(sys.executable).with_name("oxigraph")
    if cand.exists():
        return str(cand)
    return shutil.which("oxigraph")


def availability() -> dict[str, str | None]:
    """peer -> None if usable, else the reason it is not."""
    out: dict[str, str | None] = {}
    try:
        import engine.database  # noqa: F401

        out["jindou"] = None
    except Exception as e:  # engine not there yet / broken
        out["jindou"] = f"unavailable ({type(e).__name__}: {e})"
    try:
        import pyoxigraph  # noqa: F401

        out["pyoxigraph"] = None
    except Exception as e:
        out["pyoxigraph"] = f"unavailable ({type(e).__name__})"
    try:
        import rdflib  # noqa: F401

        out["rdflib"] = None
    except Exception as e:
        out["rdflib"] = f"unavailable ({type(e).__name__})"
    out["oxigraph-serve"] = None if oxigraph_binary() else "unavailable (no oxigraph binary)"
    if (REPO_ROOT / "server" / "cli.py").exists() and out["jindou"] is None:
        out["jindou-http"] = None
    else:
        out["jindou-http"] = "unavailable (server/cli.py or engine missing)"
    return out


# --------------------------------------------------------------------------- in-process peers
class JindouPeer:
    name = "jindou"

    def __init__(self) -> None:
        from engine.database import Database

        shards = os.environ.get("BENCH_JINDOU_SHARDS")
        self.db = Database(shards=int(shards)) if shards else Database()

    def load(self, path: str) -> int | None:
        rep = self.db.load_file(path, format="application/n-triples")
        # a bulk load's edge indexes are built on a background thread (the commit does not
        # wait for them): the load is complete, and its memory settled, once they are there
        from engine.kv import vertex_preds  # noqa: PLC0415

        vertex_preds.wait_builds()
        for attr in ("triples", "n_triples", "inserted", "added"):
            v = getattr(rep, attr, None)
            if isinstance(v, int):
                return v
        return None

    timeout: float | None = None
    decode = False

    def count(self, text: str) -> int:
        if self.timeout is None:
            res = self.db.query(text)
        else:
            res = self.db.query(text, timeout=self.timeout)
        if self.decode:  # turn every bound id into its term string
            for col in res.columns:
                res.terms.keys(col)
        return len(res)

    def row_strings(self, text: str) -> list[str]:
        res = self.db.query(text)
        if res.form != "SELECT":
            return [str(len(res))]
        cols = [res.terms.keys(c) for c in res.columns]
        if not cols:
            return [""] * len(res)
        return ["\t".join(x or "" for x in row) for row in zip(*cols, strict=True)]

    def close(self) -> None:
        self.db = None


class PyoxigraphPeer:
    name = "pyoxigraph"

    def __init__(self) -> None:
        import pyoxigraph

        self.ox = pyoxigraph
        self.store = pyoxigraph.Store()

    def load(self, path: str) -> int | None:
        self.store.bulk_load(path=path, format=self.ox.RdfFormat.N_TRIPLES)
        return len(self.store)

    decode = False

    def count(self, text: str) -> int:
        res = self.store.query(text)
        if not hasattr(res, "variables"):  # ASK: QueryBoolean
            return int(bool(res))
        if self.decode:  # build every bound term object
            names = [v.value for v in res.variables]
            n = 0
            for sol in res:
                for v in names:
                    sol[v]
                n += 1
            return n
        return sum(1 for _ in res)

    def row_strings(self, text: str) -> list[str]:
        res = self.store.query(text)
        if not hasattr(res, "variables"):  # ASK: QueryBoolean
            return [str(int(bool(res)))]
        names = [v.value for v in res.variables]
        out = []
        for sol in res:
            out.append("\t".join("" if sol[v] is None else str(sol[v]) for v in names))
        return out

    def close(self) -> None:
        self.store = None


class RdflibPeer:
    name = "rdflib"

    def __init__(self) -> None:
        import rdflib

        self.g = rdflib.Graph()

    def load(self, path: str) -> int | None:
        self.g.parse(path, format="nt")
        return len(self.g)

    def count(self, text: str) -> int:
        return len(self.g.query(text))

    def row_strings(self, text: str) -> list[str]:
        res = self.g.query(text)
        if res.type != "SELECT":
            return [str(len(res))]
        return ["\t".join("" if t is None else t.n3() for t in row) for row in res]

    def close(self) -> None:
        self.g = None


# --------------------------------------------------------------------------- HTTP peers
def _nt_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


def _json_term(t: dict | None) -> str:
    """SPARQL JSON results term -> N-Triples form (as pyoxigraph's str() and Jindou's keys)."""
    if t is None:
        return ""
    kind, v = t.get("type"), t.get("value", "")
    if kind == "uri":
        return f"<{v}>"
    if kind == "bnode":
        return f"_:{v}"
    lit = f'"{_nt_escape(v)}"'
    if "xml:lang" in t:
        return f"{lit}@{t['xml:lang']}"
    dt = t.get("datatype")
    if dt and dt != "http://www.w3.org/2001/XMLSchema#string":
        return f"{lit}^^<{dt}>"
    return lit


def result_digest(rows: list[str]) -> str:
    """Order-independent digest of a result (multiset of row strings)."""
    import hashlib

    h = hashlib.sha1()
    for r in sorted(rows):
        h.update(r.encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()[:16]


class _HttpPeer:
    """Keep-alive SPARQL protocol client around a server subprocess."""

    name = "http"
    query_path = "/sparql"

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.port = free_port()
        self.conn: http.client.HTTPConnection | None = None
        self.rss_before = 0
        self.log = None

    # the server process is in the worker's process group: killing the group stops both
    def _spawn(self, argv: list[str], env: dict | None = None) -> None:
        # server logs go to a temp file (a pipe nobody drains would block the server)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)

    def _connect(self) -> http.client.HTTPConnection:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        return self.conn

    def _wait_ready(self, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        last: Exception | None = None
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} server exited with {self.proc.returncode}: {err}")
            try:
                self.request("ASK {}")
                return
            except Exception as e:  # not listening yet
                last = e
                self.conn = None
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} server not ready after {deadline_s} s: {last}")

    def request(self, text: str) -> bytes:
        conn = self._connect()
        body = text.encode("utf-8")
        try:
            conn.request("POST", self.query_path, body=body,
                         headers={"Content-Type": "application/sparql-query", "Accept": JSON_RESULTS})
            resp = conn.getresponse()
            data = resp.read()
        except BaseException:  # includes the worker's QueryTimeout: the connection is unusable
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            raise
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {data[:500].decode(errors='replace')}")
        return data

    @staticmethod
    def rows(data: bytes) -> int:
        doc = json.loads(data)
        if "boolean" in doc:
            return int(bool(doc["boolean"]))
        return len(doc["results"]["bindings"])

    def timed(self, text: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        data = self.request(text)
        dt = time.perf_counter() - t0
        return dt, self.rows(data)

    def count(self, text: str) -> int:
        return self.rows(self.request(text))

    def row_strings(self, text: str) -> list[str]:
        doc = json.loads(self.request(text))
        if "boolean" in doc:
            return [str(int(bool(doc["boolean"])))]
        names = doc["head"]["vars"]
        return ["\t".join(_json_term(b.get(v)) for v in names) for b in doc["results"]["bindings"]]

    def server_pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class OxigraphServePeer(_HttpPeer):
    name = "oxigraph-serve"
    query_path = "/query"

    def prepare(self) -> None:
        """Start the empty in-memory server (not part of the timed load)."""
        binary = oxigraph_binary()
        if not binary:
            raise RuntimeError("oxigraph binary not found")
        self._spawn([binary, "serve", "--bind", f"127.0.0.1:{self.port}"])
        self._wait_ready(60)
        self.rss_before = rss_bytes(self.proc.pid)

    def load(self, path: str) -> int | None:
        conn = self._connect()
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            conn.request("POST", "/store?default", body=f,
                         headers={"Content-Type": "application/n-triples", "Content-Length": str(size)})
            resp = conn.getresponse()
            data = resp.read()
        if resp.status not in (200, 201, 204):
            raise RuntimeError(f"oxigraph load failed: HTTP {resp.status} {data[:300]!r}")
        return None


class JindouHttpPeer(_HttpPeer):
    name = "jindou-http"
    query_path = "/sparql"

    def prepare(self) -> None:
        # baseline: a python process that imported the same server modules
        self.rss_before = _import_baseline(["server.cli", "server.app", "engine.database"], _env())

    def load(self, path: str) -> int | None:
        env = _env()
        argv = [sys.executable, "-c", "import sys; from server.cli import main; sys.exit(main())",
                "serve", "--data", path, "--port", str(self.port), "--host", "127.0.0.1",
                "--no-progress", "--log-level", "warning", "--query-timeout", "3600"]
        if env.get("BENCH_JINDOU_SHARDS"):
            argv += ["--shards", env["BENCH_JINDOU_SHARDS"]]
        # more server flags, e.g. BENCH_JINDOU_ARGS="--answer-cache 0" (no kept answers: every
        # repeated text evaluated, as Oxigraph's server does)
        argv += shlex.split(env.get("BENCH_JINDOU_ARGS", ""))
        self._spawn(argv, env)
        self._wait_ready(3600)
        return None


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _import_baseline(modules: list[str], env: dict) -> int:
    code = ("import importlib, gc\n"
            f"for m in {modules!r}:\n"
            "    try: importlib.import_module(m)\n"
            "    except Exception: pass\n"
            "gc.collect()\n"
            "from bench.peers import rss_bytes; print(rss_bytes())\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip().splitlines()[-1])
    except Exception:
        return 0


PEER_CLASSES = {
    "jindou": JindouPeer,
    "pyoxigraph": PyoxigraphPeer,
    "rdflib": RdflibPeer,
    "oxigraph-serve": OxigraphServePeer,
    "jindou-http": JindouHttpPeer,
}


# --------------------------------------------------------------------------- worker
def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class QueryTimeout(BaseException):
    """Raised from SIGALRM inside a running query (BaseException: libraries must not swallow it)."""


def _on_alarm(signum, frame):
    raise QueryTimeout()


def _measure(peer, text: str, budget: float, max_runs: int, min_runs: int, timeout: float,
             uncached: bool = False) -> dict:
    """Warm-up once, then the median of K runs with K adapted to the warm-up time.

    Each run is bounded by `timeout` via SIGALRM; this interrupts Python-level engines
    (rdflib, HTTP reads).  Native engines that do not return to Python are killed by
    the parent instead.
    """
    timed = getattr(peer, "timed", None)
    seq = [0]

    def once() -> tuple[float, int]:
        q = text
        if uncached:  # a unique comment per run defeats caches keyed by query text
            seq[0] += 1
            q = f"{text}# bench run {seq[0]} {time.perf_counter_ns()}\n"
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            if timed is not None:
                return timed(q)
            t0 = time.perf_counter()
            n = peer.count(q)
            return time.perf_counter() - t0, n
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    warm, rows = once()
    if warm >= budget:
        samples = [warm]  # too slow to repeat: the warm-up is the only sample
    else:
        k = int(max(min_runs, min(max_runs, budget / max(warm, 1e-7))))
        samples = []
        for _ in range(k):
            dt, n = once()
            samples.append(dt)
            if n != rows:
                rows = -abs(n)  # unstable count: report it
    return {"rows": rows, "median_ms": statistics.median(samples) * 1000.0,
            "min_ms": min(samples) * 1000.0, "runs": len(samples), "warm_ms": warm * 1000.0}


def worker(peer_name: str, data: str) -> int:
    # redirect noisy library output away from the protocol channel
    proto = sys.stdout
    sys.stdout = sys.stderr
    signal.signal(signal.SIGALRM, _on_alarm)
    try:
        cls = PEER_CLASSES[peer_name]
        peer = cls()
        prepare = getattr(peer, "prepare", None)
        if prepare is not None:
            prepare()
        release_free_memory()
        rss0 = rss_bytes()
        t0 = time.perf_counter()
        loaded = peer.load(data)
        load_s = time.perf_counter() - t0
        gc.collect()
        rss_untrimmed = rss_bytes()
        release_free_memory()
        if isinstance(peer, _HttpPeer):
            pid = peer.server_pid()
            rss_after = rss_untrimmed = rss_bytes(pid) if pid else 0
            rss_before = peer.rss_before
        else:
            rss_after = rss_bytes()
            rss_before = rss0
    except Exception as e:
        sys.stdout = proto
        _emit({"op": "error", "error": f"{type(e).__name__}: {e}"})
        return 1
    sys.stdout = proto
    _emit({"op": "loaded", "load_s": load_s, "triples": loaded, "rss_before": rss_before,
           "rss_after": rss_after, "rss_after_untrimmed": rss_untrimmed})
    try:
        for line in sys.stdin:
            req = json.loads(line)
            op = req.get("op")
            if op == "quit":
                break
            if "timeout" in req and hasattr(peer, "timeout"):
                peer.timeout = float(req["timeout"])
            if hasattr(peer, "decode"):
                peer.decode = bool(req.get("decode", False))
            try:
                sys.stdout = sys.stderr
                if op == "query":
                    res = _measure(peer, req["text"], float(req.get("budget", 2.0)),
                                   int(req.get("max_runs", 20)), int(req.get("min_runs", 3)),
                                   float(req.get("timeout", 60.0)), bool(req.get("uncached", False)))
                elif op == "digest":
                    signal.setitimer(signal.ITIMER_REAL, float(req.get("timeout", 60.0)))
                    try:
                        rows = peer.row_strings(req["text"])
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                    res = {"rows": len(rows), "digest": result_digest(rows)}
                elif op == "p50":
                    res = _p50(peer, req["text"], int(req.get("n", 200)))
                else:
                    res = {"error": f"unknown op {op}"}
            except QueryTimeout:
                res = {"timeout": True}
            except Exception as e:
                if type(e).__name__ == "QueryTimeout":  # engine.errors.QueryTimeout
                    res = {"timeout": True}
                else:
                    res = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            finally:
                sys.stdout = proto
            res["op"] = op
            res["name"] = req.get("name")
            _emit(res)
    finally:
        peer.close()
    return 0




def _p50(peer, text: str, n: int) -> dict:
    lat = []
    rows = None
    for _ in range(3):
        peer.count(text)  # warm-up (also opens the keep-alive connection)
    for _ in range(n):
        if hasattr(peer, "timed"):
            dt, rows = peer.timed(text)
        else:
            t0 = time.perf_counter()
            rows = peer.count(text)
            dt = time.perf_counter() - t0
        lat.append(dt)
    lat.sort()
    return {"rows": rows, "p50_ms": lat[len(lat) // 2] * 1000.0,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000.0, "n": n}


# --------------------------------------------------------------------------- parse micro-bench
def median_seconds(fn, warmup: int, n: int) -> float:
    """Median wall time of ``fn()`` in seconds over ``n`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    lat = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        lat.append(time.perf_counter_ns() - t0)
    return statistics.median(lat) / 1e9


def _median_ms(fn, warmup: int, n: int) -> float:
    return median_seconds(fn, warmup, n) * 1e3


def parse_bench(text: str, n_jindou: int = 2000, n_rdflib: int = 100) -> dict:
    """Median parse time (ms) of one query: Jindou's parser vs rdflib prepareQuery."""
    out: dict = {}
    try:
        from engine.sparql.parser import parse_query

        out["jindou_ms"] = _median_ms(lambda: parse_query(text), 20, n_jindou)
    except Exception as e:
        out["jindou_error"] = f"{type(e).__name__}: {e}"
    try:
        from rdflib.plugins.sparql import prepareQuery

        out["rdflib_ms"] = _median_ms(lambda: prepareQuery(text), 3, n_rdflib)
    except Exception as e:
        out["rdflib_error"] = f"{type(e).__name__}: {e}"
    return out


def spawn_worker(peer_name: str, data: str, log) -> subprocess.Popen:
    """Start a worker in its own session (process group); its stderr goes to the file `log`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", "bench.peers", "worker", peer_name, os.path.abspath(data)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                            text=True, bufsize=1, env=env, start_new_session=True, cwd=str(REPO_ROOT))


def kill_worker(proc: subprocess.Popen) -> None:
    """Stop a worker and everything in its process group (e.g. the server it started)."""
    if proc.poll() is None:
        try:
            proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            proc.stdin.flush()
            proc.wait(15)
        except Exception:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    for f in (proc.stdin, proc.stdout):
        try:
            if f:
                f.close()
        except Exception:
            pass


def _main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "worker":
        return worker(argv[1], argv[2])
    print("usage: python -m bench.peers worker PEER FILE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = ["ALL_PEERS", "HTTP_PEERS", "IN_PROCESS", "availability", "free_port", "kill_worker",
           "parse_bench", "rss_bytes", "spawn_worker"]
