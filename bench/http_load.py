"""`python -m bench http-load`: selective queries over HTTP, Jindou's server vs
`oxigraph serve`, one keep-alive client (latency) and N concurrent clients
(throughput), side by side in one run.

The query families are not the ones of ``bench/queries.py``: point lookup
(variable predicate), 4-pattern star on one entity, 2- and 3-hop chains from a
constant and an inverse lookup, each over many constants of one kind. Modes:

* ``repeated`` - one constant per family, the same text every time (text caches hit);
* ``varied``   - the constant rotates over the family's entities and every text
  carries a unique comment (no text cache can hit; a shape cache can).

The client speaks HTTP/1.1 on raw sockets with pre-built requests (a Python HTTP
client library would cost more per request than the servers do). Peers are
measured in alternating rounds; each cell is the median over rounds of the
per-round median latency. The concurrent phase runs N threads, each on its own
keep-alive connection cycling through the families with varied constants, for
a fixed time per peer (alternating rounds too) and reports queries/s, p50, p99.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import socket
import statistics
import sys
import threading
import time
from dataclasses import dataclass, replace
from urllib.parse import quote

from bench.peers import JSON_RESULTS, JindouHttpPeer, OxigraphServePeer, oxigraph_binary

UB = "http://swat.cse.lehigh.edu/onto/univ-bench.owl#"
PREFIX = f"PREFIX ub: <{UB}>\n"


def _dept(u: int, d: int) -> str:
    return f"http://www.Department{d}.University{u}.edu"


def _entities(kind: str, n: int) -> list[str]:
    """``n`` entities of ``kind`` spread over departments 0-4 of universities 0-3
    (all exist in the 1M LUBM-like data: every department has at least 7 full
    professors, 10 associate professors and dozens of students)."""
    per = {"FullProfessor": 7, "AssociateProfessor": 10, "GraduateStudent": 40, "UndergraduateStudent": 100}[kind]
    out = []
    i = 0
    while len(out) < n:
        u, d, k = (i // 5) % 4, i % 5, (i // 20) % per
        out.append(f"{_dept(u, d)}/{kind}{k}")
        i += 1
    return out


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    template: str  # {c}: the constant IRI (without <>)
    kind: str
    accept: str = JSON_RESULTS

    def text(self, c: str, tag: str = "") -> str:
        return PREFIX + self.template.format(c=c) + (f"\n# {tag}\n" if tag else "\n")


FAMILIES = (
    Family("point", "all triples of one entity (variable predicate)",
           "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}", "AssociateProfessor"),
    Family("star4", "4-pattern star on one entity",
           "SELECT ?n ?e ?t ?w WHERE {{ <{c}> ub:name ?n ; ub:emailAddress ?e ; ub:telephone ?t ; ub:worksFor ?w }}",
           "AssociateProfessor"),
    Family("chain2", "2-hop chain from a constant: courses of a student and their teachers",
           "SELECT ?c ?t WHERE {{ <{c}> ub:takesCourse ?c . ?t ub:teacherOf ?c }}", "GraduateStudent"),
    Family("chain3", "3-hop chain: a student's advisor, the advisor's department, its university",
           "SELECT ?p ?d ?u WHERE {{ <{c}> ub:advisor ?p . ?p ub:worksFor ?d . ?d ub:subOrganizationOf ?u }}",
           "GraduateStudent"),
    Family("inverse", "inverse lookup: the students one professor advises",
           "SELECT ?s WHERE {{ ?s ub:advisor <{c}> }}", "FullProfessor"),
)


NT = "application/n-triples"

#: ``--extended``: more selective kinds (joins from a constant, DISTINCT + LIMIT,
#: ORDER BY on a small answer, ASK, CONSTRUCT and DESCRIBE of one entity)
EXTENDED = (
    Family("join", "3-pattern join from a constant: a professor's students, their names and class",
           "SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> . ?s ub:name ?n . ?s a ub:GraduateStudent }}",
           "FullProfessor"),
    Family("distinct", "DISTINCT + LIMIT: the courses of a professor's students",
           "SELECT DISTINCT ?k WHERE {{ ?s ub:advisor <{c}> . ?s ub:takesCourse ?k }} LIMIT 10", "FullProfessor"),
    Family("orderby", "ORDER BY on a small answer: a professor's students by name",
           "SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY ?n", "FullProfessor"),
    Family("ask", "ASK on one entity", "ASK {{ <{c}> ub:worksFor ?d }}", "AssociateProfessor"),
    Family("construct", "CONSTRUCT of one entity (N-Triples)",
           "CONSTRUCT {{ <{c}> ub:name ?n ; ub:worksFor ?d }} WHERE {{ <{c}> ub:name ?n ; ub:worksFor ?d }}",
           "AssociateProfessor", NT),
    Family("describe", "DESCRIBE of one entity (N-Triples)", "DESCRIBE <{c}>", "AssociateProfessor", NT),
)


# ---------------------------------------------------------------- raw HTTP client
#: how requests carry their query (``--method``): ``get`` (``?query=``), ``post`` (an
#: ``application/sparql-query`` body), ``form`` (an ``application/x-www-form-urlencoded`` one)
METHOD = "get"


def request_bytes(path: str, text: str, port: int, accept: str = JSON_RESULTS, method: str | None = None) -> bytes:
    """A GET of ``path?query=...`` asking for ``accept`` (SPARQL JSON results by default),
    or the same query POSTed (``method``, by default :data:`METHOD`), head and body in one write."""
    method = method or METHOD
    if method == "get":
        return (f"GET {path}?query={quote(text, safe='')} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Accept: {accept}\r\n\r\n").encode()
    if method == "post":
        ctype, body = "application/sparql-query", text.encode()
    else:
        ctype, body = "application/x-www-form-urlencoded", ("query=" + quote(text, safe="")).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: {accept}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


#: bytes one ``recv`` may take (the answer of a selective query is a few hundred)
RECV_SIZE = 262144


class Conn:
    """One keep-alive connection; ``roundtrip`` sends a request and reads the whole
    answer (Content-Length or chunked)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self._rbuf = bytearray(RECV_SIZE)
        self._rview = memoryview(self._rbuf)

    def _fill(self) -> None:
        # recv_into one buffer per connection: ``sock.recv(262144)`` allocates its full
        # size for every answer (above glibc's mmap threshold: an mmap, a page fault or
        # two, an mremap and an munmap per recv, ~15-25 µs of the client's system time
        # per answer on the 2-core machine, whatever the server), CPU the client then
        # takes from the servers it shares the cores with
        n = self.sock.recv_into(self._rbuf)
        if not n:
            raise ConnectionError("server closed the connection")
        self.buf += self._rview[:n]

    def roundtrip(self, req: bytes) -> tuple[int, bytes]:
        self.sock.sendall(req)
        while (i := self.buf.find(b"\r\n\r\n")) < 0:
            self._fill()
        head, self.buf = self.buf[:i], self.buf[i + 4:]
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = None
        chunked = False
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        if not chunked:
            n = length or 0
            while len(self.buf) < n:
                self._fill()
            body, self.buf = self.buf[:n], self.buf[n:]
            return status, body
        parts = []
        while True:
            while (j := self.buf.find(b"\r\n")) < 0:
                self._fill()
            size = int(self.buf[:j].split(b";")[0], 16)
            self.buf = self.buf[j + 2:]
            while len(self.buf) < size + 2:
                self._fill()
            parts.append(self.buf[:size])
            self.buf = self.buf[size + 2:]
            if size == 0:
                return status, b"".join(parts)

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------- measurement
def _texts(fam: Family, mode: str, n: int, salt: str) -> list[str]:
    ents = _entities(fam.kind, 60)
    if mode == "repeated":
        return [fam.text(ents[0])] * n
    return [fam.text(ents[i % len(ents)], f"{salt}-{i}") for i in range(n)]


#: ``--client``: the latency phase's requests as a common client sends them: a form of
#: bench/client_forms.py (its bytes, one write per chunk; a closing form opens a new
#: connection per request) or ``lib-<name>``: the client library itself (its own
#: parsing of the answer included, as a user of it sees it)
CLIENT = None
LIB_CLIENTS = ("lib-http.client", "lib-requests-get", "lib-requests-post-form", "lib-sparqlwrapper-get")


def _client_latency(port: int, path: str, fam: Family, mode: str, n: int, salt: str) -> float:
    """:func:`latency` with the requests of :data:`CLIENT`."""
    texts = _texts(fam, mode, n + 20, salt)
    url = f"http://127.0.0.1:{port}{path}"
    if CLIENT.startswith("lib-"):
        if CLIENT == "lib-http.client":
            import http.client  # noqa: PLC0415

            conn = http.client.HTTPConnection("127.0.0.1", port)

            def one(t):
                conn.request("POST", path, body=t.encode(), headers={"Content-Type": "application/sparql-query",
                                                                      "Accept": fam.accept})
                r = conn.getresponse()
                return r.status, r.read()
        elif CLIENT.startswith("lib-requests"):
            import requests  # noqa: PLC0415

            conn = requests.Session()
            hdr = {"Accept": fam.accept}

            def one(t):
                r = (conn.get(url, params={"query": t}, headers=hdr) if CLIENT == "lib-requests-get"
                     else conn.post(url, data={"query": t}, headers=hdr))
                return r.status_code, r.content
        else:
            from SPARQLWrapper import JSON, SPARQLWrapper  # noqa: PLC0415

            conn = None

            def one(t):
                sw = SPARQLWrapper(url)
                sw.setQuery(t)
                sw.setReturnFormat(JSON)
                r = sw.query().response
                return r.status, r.read()
    else:
        from bench.client_forms import CLOSING, forms  # noqa: PLC0415

        closing = CLIENT in CLOSING
        sent = [[c.replace(b" /sparql", b" " + path.encode(), 1).replace(b"127.0.0.1:7878", b"127.0.0.1:%d" % port, 1)
                 if i == 0 else c for i, c in enumerate(forms(t, fam.accept)[CLIENT])] for t in texts]
        conn = None if closing else Conn(port)

        def one(chunks):
            c = Conn(port) if closing else conn
            for piece in chunks[:-1]:
                c.sock.sendall(piece)
            try:
                return c.roundtrip(chunks[-1])
            finally:
                if closing:
                    c.close()
        texts = sent
    try:
        for t in texts[:20]:
            st, body = one(t)
            if st != 200:
                raise RuntimeError(f"HTTP {st}: {body[:300]!r}")
        ts = []
        for t in texts[20:]:
            t0 = time.perf_counter()
            one(t)
            ts.append(time.perf_counter() - t0)
    finally:
        if conn is not None:
            conn.close()
    return statistics.median(ts)


def latency(port: int, path: str, fam: Family, mode: str, n: int, salt: str) -> float:
    """Median seconds of ``n`` sequential requests on one connection (after warm-up)."""
    if CLIENT is not None:
        return _client_latency(port, path, fam, mode, n, salt)
    reqs = [request_bytes(path, t, port, fam.accept) for t in _texts(fam, mode, n + 20, salt)]
    c = Conn(port)
    try:
        for r in reqs[:20]:
            st, body = c.roundtrip(r)
            if st != 200:
                raise RuntimeError(f"HTTP {st}: {body[:300]!r}")
        ts = []
        for r in reqs[20:]:
            t0 = time.perf_counter()
            c.roundtrip(r)
            ts.append(time.perf_counter() - t0)
    finally:
        c.close()
    return statistics.median(ts)


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads) so far; None
    when unknown. Less sensitive to a loaded machine than wall time: a server
    waiting for a core spends none."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def throughput(port: int, path: str, clients: int, seconds: float, salt: str) -> dict:
    """``clients`` threads, each on its own connection cycling through every family
    with varied constants, for ``seconds``: queries/s and latency percentiles."""
    per = 400
    pools = []
    for k in range(clients):
        reqs = []
        for i in range(per):
            fam = FAMILIES[(i + k) % len(FAMILIES)]
            ents = _entities(fam.kind, 60)
            reqs.append(request_bytes(path, fam.text(ents[(i * 7 + k) % len(ents)], f"{salt}-{k}-{i}"), port,
                                      fam.accept))
        pools.append(reqs)
    lat: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    start = threading.Barrier(clients + 1)
    stop = [0.0]

    def run(k: int) -> None:
        c = Conn(port)
        reqs = pools[k]
        c.roundtrip(reqs[0])
        start.wait()
        i = 0
        out = lat[k]
        while True:
            t0 = time.perf_counter()
            if t0 >= stop[0]:
                break
            st, _ = c.roundtrip(reqs[i % per])
            out.append(time.perf_counter() - t0)
            if st != 200:
                errors[k] += 1
            i += 1
        c.close()

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    stop[0] = time.perf_counter() + 3600
    start.wait()
    t0 = time.perf_counter()
    c0 = time.process_time()  # the client's own CPU (all of this process's threads)
    stop[0] = t0 + seconds
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    client = time.process_time() - c0
    all_lat = sorted(x for lst in lat for x in lst)
    n = len(all_lat)
    return {"qps": n / wall, "p50": all_lat[n // 2] if n else math.nan,
            "p99": all_lat[min(n - 1, int(n * 0.99))] if n else math.nan, "errors": sum(errors),
            "client_cores": client / wall}


def wait_processes(port: int, n: int, timeout: float = 300.0) -> bool:
    """Wait until a ``jindou serve --processes n`` has all its processes up (``/status``):
    the server answers as soon as its primary does, and a connection accepted while a
    query process is still starting stays on the primary (keep-alive), so a measurement
    started then measures fewer processes. False when they are not up in ``timeout``."""
    import json
    import urllib.request

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
                ps = json.loads(r.read()).get("processes") or []
            if len(ps) >= n and all(p.get("state") == "up" for p in ps):
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    print(f"!!! port {port}: not all {n} processes up after {timeout:.0f} s", file=sys.stderr)
    return False


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` and its descendants
    (a `jindou serve --processes N` primary and its query processes), from /proc; NaN
    where /proc is not readable."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return math.nan
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    if pid not in stats:
        return math.nan
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += stats[p][1]
        todo += [c for c, (pp, _) in stats.items() if pp == p]
    return total


def _server_cpu(pid: int | None) -> float | None:
    """CPU seconds of a server and its child processes (None: unknown)."""
    if pid is None:
        return None
    v = tree_cpu(pid)
    return None if math.isnan(v) else v


#: ``--accept`` names: the results media type every SELECT / ASK family asks for
ACCEPTS = {"json": JSON_RESULTS, "xml": "application/sparql-results+xml", "csv": "text/csv",
           "tsv": "text/tab-separated-values"}


def with_accept(families: tuple, accept: str) -> tuple:
    """``families`` with every SELECT / ASK family asking for ``accept`` (a name of
    :data:`ACCEPTS` or a media type; several, comma-separated: one family per format,
    named ``family.format``, measured side by side); graph families keep theirs."""
    names = [a.strip() for a in accept.split(",") if a.strip()]
    out = []
    for f in families:
        if f.accept == NT:
            out.append(f)
            continue
        for a in names:
            mt = ACCEPTS.get(a, a)
            out.append(replace(f, accept=mt) if len(names) == 1 else replace(f, name=f"{f.name}.{a}", accept=mt))
    return tuple(out)


def _answer_size(fam: Family, body: bytes):
    """Rows of a SELECT answer, the boolean of an ASK, the triples of a graph."""
    import json

    if fam.accept == NT:
        return sum(1 for ln in body.splitlines() if ln.strip())
    if fam.accept == ACCEPTS["xml"]:
        if b"<boolean>" in body:
            return b"<boolean>true" in body
        return body.count(b"<result>")
    if fam.accept in (ACCEPTS["csv"], ACCEPTS["tsv"]):  # (no line breaks inside the LUBM data's values)
        lines = body.splitlines()
        if lines and lines[-1] in (b"true", b"false") and (len(lines) == 1 or lines[0] in (b"_askResult",
                                                                                         b"?_askResult")):
            return lines[-1] == b"true"  # (an ASK: Oxigraph writes the boolean alone, Jindou a header first)
        return len(lines) - 1
    doc = json.loads(body)
    return doc["boolean"] if "boolean" in doc else len(doc["results"]["bindings"])


def _check_rows(peers: dict) -> list[str]:
    """Row counts of every family's first few constants must agree between peers."""

    bad = []
    for fam in FAMILIES:
        for c in _entities(fam.kind, 60)[:5]:
            counts = {}
            for name, (port, path) in peers.items():
                conn = Conn(port)
                st, body = conn.roundtrip(request_bytes(path, fam.text(c), port, fam.accept))
                conn.close()
                counts[name] = _answer_size(fam, body) if st == 200 else f"HTTP {st}"
            if len(set(map(str, counts.values()))) > 1:
                bad.append(f"{fam.name} <{c}>: {counts}")
    return bad


def _latency_phase(names, peers, pids, args) -> tuple[dict, dict]:
    """Per-round medians of every peer, mode and family (alternating), and the
    servers' CPU over them (see :func:`main`)."""
    lat: dict[tuple[str, str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}  # (peer, mode) -> [CPU seconds, requests]
    for r in range(0 if args.skip_latency else args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for mode in ("repeated", "varied"):
            for fam in FAMILIES:
                for name in order:
                    port, path = peers[name]
                    # all of the server's processes (`--processes N`: the query processes answer)
                    c0 = _server_cpu(pids.get(name))
                    lat.setdefault((name, mode, fam.name), []).append(
                        latency(port, path, fam, mode, args.requests, f"r{r}{CLIENT or ''}"))
                    c1 = _server_cpu(pids.get(name))
                    if c0 is not None and c1 is not None:
                        acc = cpu.setdefault((name, mode), [0.0, 0])
                        acc[0] += c1 - c0
                        acc[1] += args.requests + 20
    return lat, cpu


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one linear script
    ap = argparse.ArgumentParser(prog="python -m bench http-load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="N-Triples file (default: the cached 1M LUBM-like file)")
    ap.add_argument("--scale", default="1M")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--requests", type=int, default=300, help="requests per family per round (default 300)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per peer per throughput round")
    ap.add_argument("--peers", default="jindou-http,oxigraph-serve")
    ap.add_argument("--families", default=None, help="comma-separated subset of " + ",".join(f.name for f in FAMILIES))
    ap.add_argument("--skip-latency", action="store_true", help="only the throughput phase")
    ap.add_argument("--processes", default="1",
                    help="comma-separated `jindou serve --processes` values to compare side by side "
                         "(e.g. 1,2: peers jindou-http and jindou-http-2p; default 1)")
    ap.add_argument("--extended", action="store_true",
                    help="the extended families instead: " + ",".join(f.name for f in EXTENDED))
    ap.add_argument("--method", choices=("get", "post", "form"), default="get",
                    help="how every peer gets the query: GET ?query= (default), POST application/sparql-query, "
                         "or POST application/x-www-form-urlencoded")
    ap.add_argument("--in-process", action="store_true",
                    help="instead: unique texts in process, Jindou with and without the shape cache vs pyoxigraph")
    ap.add_argument("--client", default=None,
                    help="the latency phase's requests as a common client sends them: a form of bench/client_forms.py "
                         "or one of " + ", ".join(LIB_CLIENTS) + " (the library itself)")
    ap.add_argument("--skip-throughput", action="store_true", help="only the latency phase")
    ap.add_argument("--light-client", action="store_true",
                    help="the throughput phase's clients as wrk (bench/light_load.py: C, one epoll thread, "
                         "JINDOU_LIGHT_THREADS to change) over the same request bytes, instead of Python threads")
    ap.add_argument("--accept", default=None,
                    help="the results format of SELECT / ASK families for every peer: " + ", ".join(ACCEPTS)
                    + " or a media type (default json; graph families keep N-Triples); several, "
                    "comma-separated: one family per format (family.format)")
    args = ap.parse_args(argv)
    globals()["METHOD"] = args.method

    if args.extended:
        globals()["FAMILIES"] = EXTENDED
    if args.families:
        globals()["FAMILIES"] = tuple(f for f in FAMILIES if f.name in args.families.split(","))
    if args.accept:
        globals()["FAMILIES"] = with_accept(FAMILIES, args.accept)

    data = args.data
    if data is None:
        from bench.runner import prepare_data  # noqa: PLC0415

        data = prepare_data(argparse.Namespace(data=None, workdir=None, universities=None, scale=args.scale,
                                               seed=0, quiet=False))[0]
    if args.in_process:
        print(in_process(data, args.rounds, args.requests))
        return 0
    names = [p.strip() for p in args.peers.split(",") if p.strip()]
    procs = {"jindou-http": 1}
    if "jindou-http" in names:
        counts = [int(x) for x in args.processes.split(",") if x.strip()]
        at = names.index("jindou-http")
        extra = {f"jindou-http-{k}p": k for k in counts if k != 1}
        names[at:at + 1] = (["jindou-http"] if 1 in counts else []) + list(extra)
        procs.update(extra)
    if "oxigraph-serve" in names and not oxigraph_binary():
        print("oxigraph binary not found: measuring jindou-http alone", file=sys.stderr)
        names.remove("oxigraph-serve")
    peers = {}
    pids: dict[str, int | None] = {}
    objs = []
    try:
        for name in names:
            p = JindouHttpPeer() if name in procs else OxigraphServePeer()
            objs.append(p)
            p.prepare()
            t0 = time.perf_counter()
            before = os.environ.get("JINDOU_PROCESSES")
            if name in procs:  # the server reads JINDOU_PROCESSES from its environment
                os.environ["JINDOU_PROCESSES"] = str(procs[name])
            try:
                p.load(data)
            finally:
                if before is None:
                    os.environ.pop("JINDOU_PROCESSES", None)
                else:
                    os.environ["JINDOU_PROCESSES"] = before
            if procs.get(name, 1) > 1:
                wait_processes(p.port, procs[name])
            print(f"{name}: loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            peers[name] = (p.port, p.query_path)
            pids[name] = p.server_pid() if hasattr(p, "server_pid") else None
        bad = _check_rows(peers) if len(peers) > 1 else []
        for b in bad:
            print(f"!!! row count mismatch: {b}", file=sys.stderr)
        per_client = []
        for client in (args.client.split(",") if args.client else [None]):
            globals()["CLIENT"] = client
            lat, cpu = _latency_phase(names, peers, pids, args)
            per_client.append((client, lat, cpu))
        tput: dict[str, list[dict]] = {}
        for r in range(0 if args.skip_throughput else max(1, args.rounds // 2)):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                port, path = peers[name]
                cpu0 = tree_cpu(pids[name]) if pids.get(name) else math.nan
                run = throughput
                if args.light_client:  # imported here: it reads this module's families and method
                    from bench import light_load  # noqa: PLC0415

                    run = functools.partial(light_load.throughput, families=FAMILIES, method=METHOD)
                res = run(port, path, args.clients, args.seconds, f"t{r}")
                used = (tree_cpu(pids[name]) if pids.get(name) else math.nan) - cpu0
                # the server's CPU (all its processes) per query answered, and cores it kept busy
                res["cpu_ms"] = used / max(1, res["qps"] * args.seconds) * 1e3
                res["cores"] = used / args.seconds
                tput.setdefault(name, []).append(res)
    finally:
        for p in objs:
            p.close()
    for k, (client, lat, cpu) in enumerate(per_client):
        globals()["CLIENT"] = client
        print(report(names, lat, tput if k == len(per_client) - 1 else {}, args, data, bad, cpu))
        print()
    return 3 if bad else 0


def in_process(data: str, rounds: int, n: int) -> str:
    """Unique query texts (a new constant and comment every time) in process:
    Jindou's ``Database.query`` + SPARQL JSON with the shape cache, without it
    (every text planned and compiled), and pyoxigraph's query + JSON, in
    alternating rounds; medians of the per-round medians, in ms."""
    import pyoxigraph

    import engine.database as dbmod
    from engine.exec import serialize as ser

    db = dbmod.Database()
    db.load_file(data)
    ox = pyoxigraph.Store()
    ox.bulk_load(path=data, format=pyoxigraph.RdfFormat.N_TRIPLES)
    shaped = dbmod._fast_shape_key

    def jindou(texts, cache: bool, accept: str) -> float:
        dbmod._fast_shape_key = shaped if cache else (lambda pq: None)
        templates = db._templates
        if not cache:  # no shape: no template of one either (every text parsed and planned)
            db._templates = {}
        try:
            ts = []
            for t in texts:
                t0 = time.perf_counter()
                ser.serialize(db.query(t), accept)
                ts.append(time.perf_counter() - t0)
        finally:
            dbmod._fast_shape_key = shaped
            db._templates = templates
        return statistics.median(ts)

    def oxi(texts, accept: str) -> float:
        fmt = pyoxigraph.RdfFormat.N_TRIPLES if accept == NT else pyoxigraph.QueryResultsFormat.JSON
        ts = []
        for t in texts:
            t0 = time.perf_counter()
            ox.query(t).serialize(format=fmt)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    cells: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for fam in FAMILIES:
            for who in (("shape", "noshape", "ox") if r % 2 == 0 else ("ox", "noshape", "shape")):
                texts = _texts(fam, "varied", n, f"{who}{r}")
                v = oxi(texts, fam.accept) if who == "ox" else jindou(texts, who == "shape", fam.accept)
                cells.setdefault((fam.name, who), []).append(v)
    out = [f"Unique texts in process ({rounds} alternating rounds × {n} queries per family; query + SPARQL JSON):",
           "", "| family | jindou, shape cache ms | jindou, no shape cache ms | pyoxigraph ms | ratio (cache) |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for fam in FAMILIES:
        a, b, c = (statistics.median(cells[(fam.name, w)]) * 1e3 for w in ("shape", "noshape", "ox"))
        out.append(f"| {fam.name} | {a:.3f} | {b:.3f} | {c:.3f} | {a / c:.2f} |")
    return "\n".join(out)


def report(names, lat, tput, args, data, bad, cpu=None) -> str:
    base = names[-1] if "oxigraph-serve" in names else None
    out = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {os.cpu_count()} CPUs · load avg "
           f"{os.getloadavg()[0]:.2f} at end · data {os.path.basename(data)} · {args.rounds} alternating rounds × "
           f"{args.requests} requests per family · "
           + {"get": "GET ?query=...", "post": "POST application/sparql-query",
              "form": "POST application/x-www-form-urlencoded"}[METHOD]
           + ", Accept " + (getattr(args, "accept", None) or "SPARQL JSON") + ", one keep-alive connection" + (f" · client {CLIENT}" if CLIENT else ""),
           "", "| mode | family | " + " | ".join(f"{n} ms" for n in names) + (" | ratio jindou/oxigraph |" if base else " |"),
           "| --- | --- | " + " | ".join("---:" for _ in names) + (" | ---: |" if base else " |")]
    for mode in ("repeated", "varied") if lat else ():
        ratios = []
        for fam in FAMILIES:
            cells = []
            meds = {}
            for n in names:
                vals = lat[(n, mode, fam.name)]
                meds[n] = statistics.median(vals)
                spread = (max(vals) - min(vals)) / meds[n] * 100 if meds[n] else 0
                cells.append(f"{meds[n] * 1e3:.3f} (±{spread / 2:.0f}%)")
            row = f"| {mode} | {fam.name} | " + " | ".join(cells)
            if base:
                ratio = meds[names[0]] / meds[base]
                ratios.append(ratio)
                row += f" | {ratio:.2f} |"
            else:
                row += " |"
            out.append(row)
        if base:
            gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            out.append(f"| {mode} | **geometric mean** | " + " | ".join("" for _ in names) + f" | **{gm:.2f}** |")
    if cpu:
        out += ["", "Server CPU per request (user + system time of the server's processes over all latency runs, "
                "warm-up included; /proc, 10 ms ticks):", "",
                "| mode | " + " | ".join(f"{n} µs" for n in names) + (" | ratio |" if base else " |"),
                "| --- | " + " | ".join("---:" for _ in names) + (" | ---: |" if base else " |")]
        for mode in ("repeated", "varied"):
            per = {n: cpu[(n, mode)][0] / cpu[(n, mode)][1] * 1e6 for n in names if (n, mode) in cpu}
            if len(per) < len(names):
                continue
            row = f"| {mode} | " + " | ".join(f"{per[n]:.0f}" for n in names)
            if base and per[base]:
                row += f" | {per['jindou-http'] / per[base]:.2f} |"
            out.append(row + (" |" if not base else ""))
    who = ("wrk, a C client, " + os.environ.get("JINDOU_LIGHT_THREADS", "1") + " thread(s)"
           if getattr(args, "light_client", False) else "threads of this process")
    out += ["", f"Throughput, {args.clients} concurrent clients ({who}, one keep-alive connection "
            f"each, families and constants rotating, unique texts), {args.seconds:.0f} s per peer per round, "
            "median round; server CPU: user + system time of the server's processes per query, and cores busy; "
            "client cores: the client's CPU (on the same cores):", "",
            "| peer | queries/s | × oxigraph | p50 ms | p99 ms | errors | server CPU ms/query | cores | client cores |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    if not tput:
        return "\n".join(out[:-5])
    med = {n: sorted(tput[n], key=lambda d: d["qps"])[len(tput[n]) // 2] for n in names}
    for n in names:
        m = med[n]
        rel = f"{m['qps'] / med[base]['qps']:.2f}" if base and med[base]["qps"] else ""
        out.append(f"| {n} | {m['qps']:,.0f} (rounds: {', '.join(format(d['qps'], ',.0f') for d in tput[n])}) | "
                   f"{rel} | {m['p50'] * 1e3:.2f} | {m['p99'] * 1e3:.2f} | {m['errors']} | "
                   f"{m.get('cpu_ms', math.nan):.3f} | {m.get('cores', math.nan):.2f} | "
                   f"{m.get('client_cores', math.nan):.2f} |")
    if bad:
        out += ["", "**Row count mismatches:** " + "; ".join(bad)]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
