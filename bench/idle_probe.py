"""`python -m bench.idle_probe`: one request after idle, Jindou's server vs ``oxigraph serve``.

Issue 14's selective class measured with one keep-alive client per server: a request that
follows a pause (the other server's request, a client's think time) finds the server's
working set cold, and Python's is large where Rust's is small. This probe sends each
query's text again and again on a raw keep-alive socket per server (no client library:
its own time is not the server's), sleeping ``--idle`` ms before every request, the
two servers alternating, and prints the median round trip per query, idle time and
server, and their ratio. The same text every time: the repeated-text path (the lane's
kept answers, ``server/api/sparql.py`` ``LaneAnswers``). ``--form`` picks the request's
bytes from ``bench/client_forms.py`` (``http.client-post-query``: ``bench sparql
--alternate-http``'s, head and body in two writes). The client sleeps (no spinning).

Run from a neutral directory: ``cd /tmp && PYTHONPATH=<tree> python -m bench.idle_probe``.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time

from bench.client_forms import forms
from bench.peers import JindouHttpPeer, OxigraphServePeer
from bench.queries import QUERIES


def _conn(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _roundtrip(s: socket.socket, chunks: list[bytes]) -> tuple[float, bytes]:
    """(seconds, body) of one request written in ``chunks`` and its whole answer."""
    t0 = time.perf_counter()
    for c in chunks:
        s.sendall(c)
    got = s.recv(65536)
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    n = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    if n is None:  # (oxigraph answers chunked: read to the last, empty chunk)
        if b"chunked" not in head.lower():
            raise RuntimeError("no Content-Length: " + head[:200].decode(errors="replace"))
        while not body.endswith(b"0\r\n\r\n"):
            body += s.recv(65536)
        return time.perf_counter() - t0, body
    while len(body) < n:
        body += s.recv(65536)
    return time.perf_counter() - t0, body


def _bytes(text: str, form: str, port: int, path: str) -> list[bytes]:
    """The client form's chunks for ``text``, aimed at ``port`` and ``path``."""
    out = []
    for c in forms(text)[form]:
        c = c.replace(b"127.0.0.1:7878", b"127.0.0.1:%d" % port)
        if path != "/sparql":
            c = c.replace(b" /sparql", b" " + path.encode(), 1)
        out.append(c)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.idle_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/jindou-bench/lubm-t1000000-seed0.nt")
    ap.add_argument("--queries", default="L4,L5,S1,S2,C2,Q1")
    ap.add_argument("--idle", default="0,2", help="ms slept before each request (comma list)")
    ap.add_argument("--requests", type=int, default=200, help="requests per query, idle time and server")
    ap.add_argument("--form", default="http.client-post-query", help="client form (bench/client_forms.py)")
    args = ap.parse_args(argv)
    texts = {q.name: q.text for q in QUERIES}
    names = [n.strip() for n in args.queries.split(",")]
    idles = [float(x) / 1e3 for x in args.idle.split(",")]
    j, o = JindouHttpPeer(), OxigraphServePeer()
    try:
        o.prepare()
        o.load(args.data)
        j.load(args.data)
        peers = (("jindou", j, "/sparql"), ("oxigraph", o, "/query"))
        socks = {name: _conn(p.port) for name, p, _ in peers}
        print(f"form {args.form}, {args.requests} requests per cell, load {open('/proc/loadavg').read().split()[:3]}\n")
        print("| query | idle ms | jindou µs | oxigraph µs | jindou / oxigraph |\n| --- | ---: | ---: | ---: | ---: |")
        ratios: dict[float, list[float]] = {i: [] for i in idles}
        for q in names:
            reqs = {name: _bytes(texts[q], args.form, p.port, path) for name, p, path in peers}
            for name, _, _ in peers:  # warm: the template learned, the answer kept
                first = _roundtrip(socks[name], reqs[name])[1]
                for _ in range(4):
                    _roundtrip(socks[name], reqs[name])
                if not first:
                    raise RuntimeError(f"{name}: empty answer to {q}")
            for idle in idles:
                times: dict[str, list[float]] = {"jindou": [], "oxigraph": []}
                for _ in range(args.requests):
                    for name, _, _ in peers:
                        if idle:
                            time.sleep(idle)
                        times[name].append(_roundtrip(socks[name], reqs[name])[0])
                mj, mo = statistics.median(times["jindou"]) * 1e6, statistics.median(times["oxigraph"]) * 1e6
                ratios[idle].append(mj / mo)
                print(f"| {q} | {idle * 1e3:g} | {mj:.0f} | {mo:.0f} | {mj / mo:.2f} |")
        for idle, r in ratios.items():
            print(f"\nidle {idle * 1e3:g} ms: geometric mean jindou / oxigraph "
                  f"{statistics.geometric_mean(r):.3f} over {len(r)} queries")
        for s in socks.values():
            s.close()
    finally:
        j.close()
        o.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
