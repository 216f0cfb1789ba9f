"""`python -m bench.throughput_probe`: where the CPU of a throughput round goes.

``bench http-load``'s throughput phase (8 client threads, one keep-alive
connection each, unique texts of the selective families) with the figures that
say *why* a query costs what it does, per server process and for the client:

* per server process: the requests it answered (``/status``: ``--processes N``),
  user and system CPU, voluntary context switches (it slept in ``epoll_wait`` /
  ``recv`` and was woken) and involuntary ones (preempted), per query;
* the client (this process, all its threads, ``getrusage``): CPU, context
  switches and page faults per query, and the ``recv`` calls per answer (an
  answer that arrives in pieces costs the client a wake-up per piece); the
  machine's TLB shootdowns and rescheduling interrupts per query (what a client
  thread's wake-up or unmapping costs another CPU);
* with ``--strace``, one more round per peer under ``strace -c -f`` (slow: the
  counts per query are what to read, not the time) for the system calls per
  query.

Peers start as ``bench http-load`` starts them (same data, same arguments).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from bench import http_load
from bench.http_load import Conn, throughput


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def _proc(pid: int) -> dict:
    """user / system CPU seconds, voluntary / involuntary context switches (all threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    out = {"user": int(fields[11]) / tick, "sys": int(fields[12]) / tick, "vcs": 0, "ivcs": 0, "mig": 0, "run": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/sched", encoding="ascii", errors="replace") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    k = k.strip()
                    if k == "nr_voluntary_switches":
                        out["vcs"] += int(v)
                    elif k == "nr_involuntary_switches":
                        out["ivcs"] += int(v)
                    elif k == "se.nr_migrations":
                        out["mig"] += int(v)
                    elif k == "se.sum_exec_runtime":  # ms, ns precision (the stat ticks are 10 ms)
                        out["run"] += float(v) / 1e3
        except OSError:
            continue
        try:  # per thread: its name and CPU (which threads besides the event loop's run)
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                raw = f.read()
            name = raw[raw.index("(") + 1:raw.rindex(")")]
            tf = raw.rsplit(")", 1)[1].split()
            out.setdefault("threads", {})[f"{tid}:{name}"] = (int(tf[11]) + int(tf[12])) / tick
        except (OSError, ValueError):
            continue
    return out


def _requests(port: int) -> dict[int, int]:
    """pid -> requests answered, from a Jindou ``/status`` (``--processes N``); {} otherwise."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as r:
            doc = json.loads(r.read())
    except Exception:  # noqa: BLE001 - not Jindou, or no process table
        return {}
    return {int(p["pid"]): int(p.get("requests", 0)) for p in doc.get("processes") or [] if p.get("pid")}


def _connections(pid: int) -> list[int] | None:
    """Open connections per process of a ``jindou serve --processes N`` (its balance array)."""
    import glob

    import numpy as np

    for path in glob.glob(f"/dev/shm/{'jindou-procs-'}{pid}-*/connections"):
        with contextlib.suppress(OSError, ValueError):
            return np.fromfile(path, dtype=np.int64).tolist()
    return None


def _client() -> dict:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": ru.ru_utime, "sys": ru.ru_stime, "vcs": ru.ru_nvcsw, "ivcs": ru.ru_nivcsw,
            "minflt": ru.ru_minflt, **_interrupts()}


def _interrupts() -> dict:
    """Machine-wide TLB shootdowns and rescheduling interrupts so far (/proc/interrupts,
    all CPUs): a multi-threaded client that unmaps memory while another CPU holds its
    address space (running, or idle in lazy TLB mode) interrupts that CPU each time."""
    out = {"tlb": 0, "res": 0}
    with contextlib.suppress(OSError):
        with open("/proc/interrupts", encoding="ascii", errors="replace") as f:
            for line in f:
                name, _, rest = line.strip().partition(":")
                if name in ("TLB", "RES"):
                    out[name.lower()] = sum(int(x) for x in rest.split() if x.isdigit())
    return out


class _Counting(Conn):
    """A :class:`Conn` counting its ``recv`` calls."""

    fills = 0

    def _fill(self) -> None:
        _Counting.fills += 1
        super()._fill()


def measure(port: int, path: str, pid: int, seconds: float, salt: str, clients: int = 8) -> dict:
    pids = _tree(pid)
    if len(pids) > 1:
        time.sleep(1.1)  # query processes report their counts every second
    before = {p: _proc(p) for p in pids}
    req0 = _requests(port) if path == "/sparql" else {}
    c0 = _client()
    f0 = _Counting.fills
    conns: list = []
    sampler = threading.Timer(seconds / 2 + 0.3, lambda: conns.append(_connections(pid)))
    sampler.start()
    res = throughput(port, path, clients, seconds, salt)
    sampler.join()
    fills = _Counting.fills - f0
    c1 = _client()
    after = {p: _proc(p) for p in pids}
    time.sleep(1.1)  # query processes report their counts every second
    req1 = _requests(port) if path == "/sparql" else {}
    n = res["qps"] * seconds
    rows = []
    for p in pids:
        d = {k: after[p][k] - before[p][k] for k in before[p] if k != "threads"}
        th0, th1 = before[p].get("threads", {}), after[p].get("threads", {})
        d["threads"] = {t: v - th0.get(t, 0.0) for t, v in th1.items() if v - th0.get(t, 0.0) > 0}
        d["pid"] = p
        d["requests"] = req1.get(p, 0) - req0.get(p, 0) if req1 else None
        rows.append(d)
    tot = {k: sum(r[k] for r in rows) for k in ("user", "sys", "vcs", "ivcs", "mig", "run")}
    cl = {k: c1[k] - c0[k] for k in c0}
    return {"conns": conns[0] if conns else None, "qps": res["qps"], "n": n, "procs": rows, "server": tot, "client": cl,
            "recv_per_answer": fills / max(1, n), "p50": res["p50"], "p99": res["p99"]}


def show(name: str, m: dict, seconds: float) -> str:
    n = max(1.0, m["n"])
    s, c = m["server"], m["client"]
    lines = [f"{name}: {m['qps']:,.0f} q/s, p50 {m['p50'] * 1e3:.2f} ms, p99 {m['p99'] * 1e3:.2f} ms; "
             f"server {1e6 * (s['user'] + s['sys']) / n:.1f} µs/q (user {1e6 * s['user'] / n:.1f}, "
             f"sys {1e6 * s['sys'] / n:.1f}; runtime {1e6 * s['run'] / n:.1f}), "
             f"{(s['user'] + s['sys']) / seconds:.2f} cores, "
             f"vcs {s['vcs'] / n:.2f}/q, ivcs {s['ivcs'] / n:.2f}/q, migrations {s['mig'] / n:.3f}/q; client {1e6 * (c['user'] + c['sys']) / n:.1f} µs/q "
             f"(user {1e6 * c['user'] / n:.1f}, sys {1e6 * c['sys'] / n:.1f}), vcs {c['vcs'] / n:.2f}/q, "
             f"ivcs {c['ivcs'] / n:.2f}/q, page faults {c['minflt'] / n:.2f}/q, recv {m['recv_per_answer']:.2f}/answer; "
             f"machine: TLB shootdowns {c['tlb'] / n:.3f}/q, rescheduling IPIs {c['res'] / n:.2f}/q"
             + (f"; connections per process mid-round {m['conns']}" if m["conns"] else "")]
    for r in m["procs"]:
        cpu = r["run"]
        if cpu == 0 and not r["requests"]:
            continue
        req = r["requests"]
        share = f"{req:,} requests ({100 * req / n:.0f} %)" if req is not None else "requests n/a"
        per = f"{1e6 * cpu / req:.1f} µs/req, vcs {r['vcs'] / req:.2f}/req, ivcs {r['ivcs'] / req:.2f}/req, " \
            f"migrations {r['mig'] / req:.3f}/req" \
            if req else f"vcs {r['vcs']}, ivcs {r['ivcs']}"
        lines.append(f"    pid {r['pid']}: {share}, {cpu / seconds:.2f} cores, {per}")
        if len(r["threads"]) > 1:
            lines.append("        threads (CPU s): " + ", ".join(f"{t} {v:.2f}" for t, v in
                                                             sorted(r["threads"].items(), key=lambda kv: -kv[1])))
    return "\n".join(lines)


def strace_round(port: int, path: str, pid: int, seconds: float, salt: str) -> str:
    """System calls per query under ``strace -c -f`` of every server process."""
    outs = []
    procs = []
    for p in _tree(pid):
        f = tempfile.NamedTemporaryFile("w+", suffix=".strace", delete=False)
        procs.append((subprocess.Popen(["strace", "-c", "-f", "-p", str(p), "-o", f.name],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f.name))
    time.sleep(1.0)
    res = throughput(port, path, 8, seconds, salt)
    for pr, _ in procs:
        pr.send_signal(signal.SIGINT)
    n = res["qps"] * seconds
    counts: dict[str, int] = {}
    for pr, fname in procs:
        pr.wait(10)
        with open(fname, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                    calls = int(parts[3])
                    counts[parts[-1]] = counts.get(parts[-1], 0) + calls
        os.unlink(fname)
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:10]
    outs.append(f"  strace ({n:,.0f} queries at {res['qps']:,.0f} q/s under strace): "
                + ", ".join(f"{k} {v / max(1, n):.2f}/q" for k, v in top))
    return "\n".join(outs)


def raw_answer(port: int, path: str) -> bytes:
    """The bytes a server sends for one star4 query (unique text), as the client receives them."""
    import socket

    fam = next(f for f in http_load.FAMILIES if f.name == "star4")
    ent = http_load._entities(fam.kind, 60)[3]
    req = http_load.request_bytes(path, fam.text(ent, "show"), port, fam.accept)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(req)
        time.sleep(0.2)
        return s.recv(65536)


def perf_round(port: int, path: str, pid: int, seconds: float, salt: str, top: int = 25) -> str:
    """``perf record`` of every server process during a throughput round: the shares
    of the shared objects (kernel, libpython, numpy, uvloop...) and the top symbols."""
    recs = []
    for p in _tree(pid):
        out = tempfile.NamedTemporaryFile(suffix=".perf", delete=False).name
        recs.append((p, out, subprocess.Popen(["perf", "record", "-q", "-F", "1999", "-p", str(p), "-o", out],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    time.sleep(0.5)
    res = throughput(port, path, 8, seconds, salt)
    for _, _, pr in recs:
        pr.send_signal(signal.SIGINT)
    lines = [f"  perf ({res['qps']:,.0f} q/s)"]
    for p, out, pr in recs:
        pr.wait(20)
        for sort in ("dso", "dso,sym"):
            rep = subprocess.run(["perf", "report", "-i", out, "--no-children", "--sort", sort, "--stdio",
                                  "--percent-limit", "0.7"], capture_output=True, text=True).stdout
            rows = [ln for ln in rep.splitlines() if ln.strip() and not ln.startswith("#")][:top]
            lines.append(f"    pid {p} by {sort}:\n      " + "\n      ".join(r.strip() for r in rows))
        os.unlink(out)
    return "\n".join(lines)


def independent(data: str, rounds: int, seconds: float) -> None:
    """``--independent``: per-query CPU of one 1-process server under 8 clients against
    two independent 1-process servers (each its own heap store, no ``--processes``
    machinery) under 4 clients each, alternating: whether ``--processes 2``'s extra CPU
    per query is its own or comes from two busy interpreters sharing the cores."""
    from bench.peers import JindouHttpPeer

    peers = []
    try:
        for _ in range(2):
            p = JindouHttpPeer()
            peers.append(p)
            p.prepare()
            os.environ["JINDOU_PROCESSES"] = "1"
            try:
                p.load(data)
            finally:
                os.environ.pop("JINDOU_PROCESSES", None)
            throughput(p.port, p.query_path, 8, 1.0, "warm")

        def run(ps, clients: int, salt: str) -> tuple[float, list[float]]:
            pids = [p.server_pid() for p in ps]
            before = [_proc(x)["run"] for x in pids]
            res: list = [None] * len(ps)

            def one(k: int) -> None:
                res[k] = throughput(ps[k].port, ps[k].query_path, clients, seconds, f"{salt}{k}")

            ts = [threading.Thread(target=one, args=(k,)) for k in range(len(ps))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            after = [_proc(x)["run"] for x in pids]
            return (sum(r["qps"] for r in res),
                    [1e6 * (after[k] - before[k]) / max(1.0, res[k]["qps"] * seconds) for k in range(len(ps))])

        for r in range(rounds):
            q1, c1 = run(peers[:1], 8, f"a{r}")
            q2, c2 = run(peers, 4, f"b{r}")
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            print(f"load {load}: one server, 8 clients: {q1:,.0f} q/s, {c1[0]:.1f} µs/q | two servers, 4 + 4 "
                  f"clients: {q2:,.0f} q/s, " + " / ".join(f"{c:.1f}" for c in c2) + " µs/q", flush=True)
    finally:
        for p in peers:
            p.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.throughput_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default="jindou-http,jindou-http-2p,oxigraph-serve")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--strace", action="store_true", help="one more round per peer under strace -c -f")
    ap.add_argument("--perf", action="store_true", help="one more round per peer under perf record")
    ap.add_argument("--scale", default="1M")
    ap.add_argument("--method", default="get",
                    help="how the queries travel (as `bench http-load --method`: get, post, form); several "
                         "comma-separated: each round measures every peer with each, alternating")
    ap.add_argument("--independent", action="store_true",
                    help="instead: one 1-process server (8 clients) against two independent ones (4 + 4)")
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    if not methods or set(methods) - {"get", "post", "form"}:
        ap.error("--method: get, post or form (comma-separated)")
    http_load.METHOD = methods[0]
    from bench.peers import JindouHttpPeer, OxigraphServePeer
    from bench.runner import prepare_data

    http_load.Conn = _Counting  # throughput() builds its connections from the module's Conn
    data = prepare_data(argparse.Namespace(data=None, workdir=None, universities=None, scale=args.scale,
                                           seed=0, quiet=True))[0]
    if args.independent:
        independent(data, args.rounds, args.seconds)
        return 0
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    peers, objs = {}, []
    try:
        for name in names:
            k = 1
            if name.startswith("jindou-http-") and name.endswith("p"):
                k = int(name[len("jindou-http-"):-1])
            p = JindouHttpPeer() if name.startswith("jindou") else OxigraphServePeer()
            objs.append(p)
            p.prepare()
            os.environ["JINDOU_PROCESSES"] = str(k)
            try:
                p.load(data)
            finally:
                os.environ.pop("JINDOU_PROCESSES", None)
            if k > 1:
                http_load.wait_processes(p.port, k)
            peers[name] = (p.port, p.query_path, p.server_pid())
            throughput(p.port, p.query_path, 8, 1.5, "warm")  # warm up (templates, edge index)
        for name in names:
            port, path, _ = peers[name]
            print(f"--- {name} answer ---\n{raw_answer(port, path)!r}")
        with open("/proc/loadavg") as f:
            print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {f.read().split()[0]}", flush=True)
        for r in range(args.rounds):
            for method in (methods if r % 2 == 0 else methods[::-1]):
                http_load.METHOD = method
                for name in (names if r % 2 == 0 else names[::-1]):
                    port, path, pid = peers[name]
                    m = measure(port, path, pid, args.seconds, f"r{r}")
                    print(show(f"{name} ({method})" if len(methods) > 1 else name, m, args.seconds), flush=True)
        if args.strace:
            for name in names:
                port, path, pid = peers[name]
                print(name + ":\n" + strace_round(port, path, pid, args.seconds, "s"), flush=True)
        if args.perf:
            for name in names:
                port, path, pid = peers[name]
                print(name + ":\n" + perf_round(port, path, pid, args.seconds, "p"), flush=True)
        with open("/proc/loadavg") as f:
            print(f"load at end {f.read().split()[0]}")
    finally:
        for p in objs:
            p.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
