"""`python -m bench result-latency`: a continuous query's result latency in a real server.

From "instant ready" to the SSE event at the client, through a ``jindou serve`` subprocess:
a stream ``s`` and a small sliding-window query (``RANGE 1s STEP 100ms``, one pattern over the
stream), one SSE subscriber on a raw socket, and a driver that per instant POSTs the step's
elements (NDJSON, event time) and then the heartbeat that completes the instant. The latency
of instant T is the SSE ``event: result`` with ``id: T`` arriving minus the moment the driver
started sending the heartbeat that made T ready -- so it includes the heartbeat's HTTP request,
the worker's wake-up, the evaluation, the log append and the SSE write: what a subscriber sees.

Measured alone and while ``--clients`` threads hammer ``GET /sparql`` with selective queries
over a small LUBM (their queries/s is reported too, so a setting's cost to one-shot
throughput shows in the same run). ``--switch-interval`` lists CPython GIL switch intervals
(seconds; ``default`` = the server's own ``--switch-interval`` default) measured in alternating rounds: the value is
applied in the server process before it starts (``sys.setswitchinterval``) and also given as
``JINDOU_SWITCH_INTERVAL`` (a server that knows the setting applies the same value).

Dev numbers on a shared machine are noisy: compare within one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from urllib.parse import quote

from bench.http_load import FAMILIES, _entities
from bench.peers import _HttpPeer

EX = "http://ex.org/rl/"
T0 = 1_700_000_000_000  # event time of the first instant (epoch ms)
STEP = 100
QUERY = (f"REGISTER QUERY rl AS SELECT ?x ?v FROM s [RANGE 1s STEP {STEP}ms] "
         f"WHERE {{ ?x <{EX}val> ?v }}")


class _Serve:
    """A ``jindou serve`` subprocess over a data file, the GIL switch interval set first."""

    def __init__(self, data: str, switch: str) -> None:
        self.peer = _HttpPeer()
        self.peer.name = f"jindou-serve[{switch}]"
        self.data = data
        self.switch = switch

    def __enter__(self) -> _Serve:
        pre = "" if self.switch == "default" else f"sys.setswitchinterval({float(self.switch)!r}); "
        argv = [sys.executable, "-c", f"import sys; {pre}from server.cli import main; sys.exit(main())",
                "serve", "--port", str(self.peer.port), "--host", "127.0.0.1", "--no-progress",
                "--log-level", "warning", "--data", self.data]
        env = dict(os.environ)
        env.pop("JINDOU_SWITCH_INTERVAL", None)
        if self.switch != "default":
            env["JINDOU_SWITCH_INTERVAL"] = str(float(self.switch))
        self.peer._spawn(argv, env)
        self.peer._wait_ready(600)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.peer.port, timeout=60)
        return self

    def call(self, method: str, path: str, body: bytes | None = None, ctype: str | None = None) -> tuple[int, bytes]:
        self.conn.request(method, path, body=body, headers={"Content-Type": ctype} if ctype else {})
        r = self.conn.getresponse()
        return r.status, r.read()

    def __exit__(self, *exc) -> None:
        self.conn.close()
        self.peer.close()


class _Subscriber(threading.Thread):
    """Reads the query's SSE stream on a raw socket; notes when each ``result`` id arrives."""

    def __init__(self, port: int, name: str) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(f"GET /queries/{name}/results HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
                          .encode())
        self.seen: dict[int, float] = {}
        self.started = threading.Event()

    def run(self) -> None:
        buf = b""
        event = None
        try:
            while True:
                chunk = self.sock.recv(65536)
                now = time.perf_counter()
                if not chunk:
                    return
                self.started.set()
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.startswith(b"event:"):
                        event = line[6:].strip()
                    elif line.startswith(b"id:") and event == b"result":
                        self.seen.setdefault(int(line[3:].strip()), now)
        except OSError:
            return

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class _Hammer:
    """``clients`` threads, each on its own keep-alive connection, cycling selective GETs."""

    def __init__(self, port: int, clients: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.counts = [0] * clients
        texts = []
        for fam in FAMILIES:
            for c in _entities(fam.kind, 8):
                texts.append(f"/sparql?query={quote(fam.text(c))}")
        self.paths = texts
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def _run(self, i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        k = i
        while not self.stop.is_set():
            conn.request("GET", self.paths[k % len(self.paths)], headers={"Accept": "application/sparql-results+json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise RuntimeError(f"hammer: HTTP {r.status}")
            self.counts[i] += 1
            k += 1
        conn.close()

    def serve(self) -> None:
        """In the hammer's own process: run until stdin closes, then print queries/s."""
        for t in self.threads:
            t.start()
        time.sleep(0.3)
        c0, t1 = sum(self.counts), time.perf_counter()
        sys.stdin.read()
        print(json.dumps({"qps": (sum(self.counts) - c0) / (time.perf_counter() - t1)}), flush=True)
        self.stop.set()
        for t in self.threads:
            t.join()


class _HammerProcess:
    """The hammer in a process of its own: its threads must not take the measuring client's GIL
    (the subscriber noting an event's arrival would wait for it, up to 5 ms)."""

    def __init__(self, port: int, clients: int) -> None:
        self.argv = [sys.executable, "-c", f"from bench.result_latency import _Hammer; _Hammer({port}, {clients}).serve()"]

    def __enter__(self) -> _HammerProcess:
        import subprocess

        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        time.sleep(1.0)  # its imports and first requests
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self.proc.communicate(timeout=120)
        self.qps = json.loads(out.decode().strip().splitlines()[-1])["qps"] if out.strip() else float("nan")


def _phase(srv: _Serve, sub: _Subscriber, start: int, instants: int, pace: float,
           per_step: int) -> tuple[list[float], list[float]]:
    """Drive ``instants`` instants from instant number ``start``; the latencies in ms and the
    heartbeats' round trips in ms (the part of a latency that is the HTTP request itself)."""
    sent: dict[int, float] = {}
    rtt: list[float] = []
    for k in range(start, start + instants):
        lo = T0 + k * STEP
        body = b"".join(json.dumps({"s": f"<{EX}o{k}_{j}>", "p": f"<{EX}val>",
                                    "o": f'"{(k * 31 + j) % 997}"', "t": lo + 1 + j * STEP // per_step})
                        .encode() + b"\n" for j in range(per_step))
        st, data = srv.call("POST", "/streams/s", body, "application/x-ndjson")
        if st != 202:
            raise RuntimeError(f"POST /streams/s: HTTP {st} {data[:200]!r}")
        hb = lo + STEP + 1  # instant lo + STEP is ready once progress passes it
        t_sent = time.perf_counter()
        st, data = srv.call("POST", f"/streams/s/progress?t={hb}")
        if st != 200:
            raise RuntimeError(f"heartbeat: HTTP {st} {data[:200]!r}")
        sent[hb] = t_sent
        rtt.append((time.perf_counter() - t_sent) * 1000)
        time.sleep(pace)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(t in sub.seen for t in sent):
        time.sleep(0.01)
    # the instant T is ready once progress passes T: the first heartbeat above T
    out = []
    beats = sorted(sent)
    for t, at in sorted(sub.seen.items()):
        ready = next((b for b in beats if b > t), None)
        if ready is None or t < beats[0]:
            continue
        out.append((at - sent[ready]) * 1000)
    return out, rtt


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] if s else float("nan")


def run(switches: list[str], rounds: int, instants: int, clients: int, pace: float, triples: int,
        per_step: int, log=print) -> dict:
    from bench import lubm

    res: dict[str, dict[str, list]] = {s: {"alone": [], "loaded": [], "qps": []} for s in switches}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lubm.nt")
        n = lubm.generate(path, triples=triples)["triples"]
        log(f"LUBM {n:,} triples; load {open('/proc/loadavg').read().split()[:3]}")
        for r in range(rounds):
            for sw in switches:
                with _Serve(path, sw) as srv:
                    st, data = srv.call("PUT", "/streams/s", json.dumps({"iri": EX + "s"}).encode(),
                                        "application/json")
                    assert st in (200, 201), data
                    st, data = srv.call("POST", "/queries", QUERY.encode(), "application/sparql-query")
                    assert st == 201, data
                    sub = _Subscriber(srv.peer.port, "rl")
                    sub.start()
                    k = 0
                    _phase(srv, sub, k, 20, pace, per_step)  # warm-up
                    k += 20
                    alone, rtt_alone = _phase(srv, sub, k, instants, pace, per_step)
                    k += instants
                    with _HammerProcess(srv.peer.port, clients) as h:
                        loaded, rtt_loaded = _phase(srv, sub, k, instants, pace, per_step)
                    sub.close()
                    res[sw]["alone"].append(statistics.median(alone))
                    res[sw]["loaded"].append(statistics.median(loaded))
                    res[sw].setdefault("alone_p90", []).append(_pct(alone, 0.9))
                    res[sw].setdefault("loaded_p90", []).append(_pct(loaded, 0.9))
                    res[sw]["qps"].append(h.qps)
                    res[sw].setdefault("hb_alone", []).append(statistics.median(rtt_alone))
                    res[sw].setdefault("hb_loaded", []).append(statistics.median(rtt_loaded))
                    log(f"round {r + 1} switch {sw:>8}: alone p50 {statistics.median(alone):6.2f} ms "
                        f"p90 {_pct(alone, 0.9):6.2f} (n={len(alone)}); with {clients} clients p50 "
                        f"{statistics.median(loaded):6.2f} ms p90 {_pct(loaded, 0.9):6.2f} (n={len(loaded)}), "
                        f"one-shot {h.qps:,.0f} q/s; heartbeat round trip p50 {statistics.median(rtt_alone):.2f} / "
                        f"{statistics.median(rtt_loaded):.2f} ms")
    log(f"load after: {open('/proc/loadavg').read().split()[:3]}")
    log("medians over rounds:")
    summary = {}
    for sw, v in res.items():
        summary[sw] = {k: statistics.median(x) for k, x in v.items()}
        s = summary[sw]
        log(f"  switch {sw:>8}: alone p50 {s['alone']:6.2f} p90 {s['alone_p90']:6.2f} ms; loaded p50 "
            f"{s['loaded']:6.2f} p90 {s['loaded_p90']:6.2f} ms; one-shot {s['qps']:,.0f} q/s; heartbeat "
            f"round trip {s['hb_alone']:.2f} / {s['hb_loaded']:.2f} ms")
    return {"rounds": res, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench result-latency", description=__doc__.split("\n")[0])
    ap.add_argument("--switch-interval", default="0.005,0.0005",
                    help="comma-separated GIL switch intervals in s, or 'default' for the server's own "
                         "(default: 0.005,0.0005: Python's default against the server's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instants", type=int, default=150, help="instants per phase (default 150)")
    ap.add_argument("--clients", type=int, default=6, help="one-shot client threads (default 6)")
    ap.add_argument("--pace", type=float, default=0.02, help="wall seconds between instants (default 0.02)")
    ap.add_argument("--triples", type=int, default=100_000, help="LUBM triples in the store (default 100k)")
    ap.add_argument("--per-step", type=int, default=5, help="stream elements per instant (default 5)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    out = run([s.strip() for s in a.switch_interval.split(",") if s.strip()], a.rounds, a.instants,
              a.clients, a.pace, a.triples, a.per_step)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
