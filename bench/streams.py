"""Per-window latency of continuous queries: Jindou vs peers side by side, results cross-checked.

`python -m bench streams [--workload citybench,lsbench] [--queries C1,L4] [--minutes 2] ...`
(or `main(argv)`). See docs/BENCHMARKS.md, "Continuous queries: per-window latency".

Workloads (same data, same windows, same instants for every peer):

* citybench: CityBench C1-C11 = the C-SPARQL files Q1..Q11 of shared/citybench on the
  Aarhus streams, prepared by :func:`bench.citybench.prepare` (static graphs, CSV rows ->
  observation triples, event timestamps; CityBench's paced replay by default).
* lsbench: L1-L7 over the seeded LSBench-style generator :mod:`bench.lsbench`.
* lsbench-small: the same queries at ``--small-rate`` triples/s (default 20): windows of tens to
  hundreds of triples, the size of CityBench's, where the per-window floor dominates.
* lsbench-varied: ``--varied`` queries V01... of many shapes (string / IRI / IN filters, UNION,
  OPTIONAL, NOT EXISTS, AVG / SUM / MIN / MAX, ORDER BY + LIMIT, BIND, ...; :mod:`bench.lsvaried`)
  over the same small streams: the small-window floor on shapes the known queries do not have.
  Every Jindou peer reports which path answered its instants (maintained / generated / other).
* lsbench-walk: ``--varied`` Stream-WatDiv-style BGP queries W01... drawn by random walks over the
  LSBench data (linear, star, snowflake; pure stream or joined with the static graph; some nodes
  fixed to constants; :mod:`bench.lswalk`) over the same small streams.

Peers:

* jindou: ``Database`` + ``StreamManager`` in process. Every query gets its own manager
  over the peer's database (the static graphs loaded once): its streams are replayed in
  buckets of event time (one ndjson POST per stream and bucket, a heartbeat of every
  stream to the bucket's end, ``drain``); the latency of an instant is the manager's
  ``last_latency_ms`` (the scheduler's unchanged-instant check and capture of the instant,
  window read, evaluation and the result event's JSON; for an instant whose windows equal
  the last evaluated one's, the check and its repeated event), the result is the instant's
  event in the query's result log.
* jindou-full: the same with ``StreamManager(incremental=False)``.
* jindou-unmaintained: the same with the maintained results off
  (``InstantEvaluator.MAINTAINED = False``, :mod:`engine.stream.maintained`). Every Jindou
  peer also reports, per instant of the query, the CPU time of its replay's ``ingest_ndjson``
  + ``heartbeat`` calls (the calling thread's: a wall clock there mostly measures the GIL
  handed to the woken worker; in parentheses the part of it that maintained the results) and of
  the maintenance the worker does after each event (what maintenance moves from the instant),
  and their sum with the median instant.
* csparql-composite: the C-SPARQL composite design on pyoxigraph: the static graphs
  are in the store; per window the window's triples are inserted into a named graph,
  the plain SPARQL query (FROM STREAM / FROM removed) runs with default graph = the
  window graph + the union of the query's static graphs, the result event is written
  (SPARQL JSON, pyoxigraph's serializer; Jindou's event is the same JSON plus its window
  member) and the window graph is cleared. Timed: insert + query + result event + clear, back
  to back on the calling thread (``--composite-timing hot``, the default), or on a worker
  thread woken for each window after an idle gap (``woken``), as Jindou's instants are
  evaluated by its worker woken after the replay's ingestion: the same work costs 1.1-3.4x
  more on a woken thread, for both engines.
* spark-sql: :class:`bench.spark_peer.SparkSQLPeer` (imported lazily), on
  ``--spark-windows`` windows per query spread over the run.

Measured instants of a query: its instants ``t`` (multiples of its STEP) with
``start + max RANGE <= t <= end`` (the windows have filled). At every measured
instant where two or more peers have a result, the results are compared as
multisets of rows (numeric literals by value); any difference -> exit status 3.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import gc
import json
import math
import multiprocessing
import operator
import os
import re
import signal
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

import orjson
import pyoxigraph as ox

from bench import citybench as cb
from bench import lsbench, lsvaried, lswalk

PEERS = ("jindou", "jindou-full", "jindou-unmaintained", "csparql-composite", "spark-sql")
DEFAULT_PEERS = ("jindou", "jindou-full", "csparql-composite", "spark-sql")
#: the Jindou peers: their replay's ingestion time is reported per instant (what the maintained
#: results, engine.stream.maintained, move from the instant to ingestion)
JINDOU_PEERS = ("jindou", "jindou-full", "jindou-unmaintained")
WORKLOADS = ("citybench", "lsbench", "lsbench-small", "lsbench-varied", "lsbench-walk")
#: lsbench-small: LSBench at this rate (triples/s), so that its windows hold tens to hundreds of
#: triples like CityBench's (the per-window floor, not the data, dominates)
SMALL_RATE = 20.0
#: lsbench-walk: queries drawn when --varied is not given
WALK_QUERIES = 16
CITYBENCH_QUERIES = [f"C{i}" for i in range(1, 12)]      # C<i> = csparql_query/Q<i>.txt
LSBENCH_QUERIES = [f"L{i}" for i in range(1, 8)]
EXIT_MISMATCH = 3
TARGETS = {"csparql-composite": 10.0, "spark-sql": 100.0}   # jindou median >= N x lower
CPU_TARGET = "csparql-composite (CPU)"   # the same factor on Jindou's CPU per instant
MAX_BUCKET_MS = 1000
SAMPLE_ROWS = 400           # results up to this many rows keep their rows (for mismatch details)
WINDOW_GRAPH = ox.NamedNode("urn:bench:window")
XSD = "http://www.w3.org/2001/XMLSchema#"
Triple = tuple[str, str, str]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- result keys
_NUMERIC = {XSD + t for t in (
    "integer", "decimal", "double", "float", "long", "int", "short", "byte", "nonNegativeInteger",
    "nonPositiveInteger", "negativeInteger", "positiveInteger", "unsignedLong", "unsignedInt",
    "unsignedShort", "unsignedByte")}


@functools.lru_cache(maxsize=1 << 16)
def _num_key(value: str) -> tuple | None:
    """Numeric literals compare by value (12 significant digits): 3 = 3.0 = 3.0E0, and a
    decimal AVG matches a double AVG."""
    v = value.strip()
    try:
        d = Decimal({"INF": "Infinity", "+INF": "Infinity", "-INF": "-Infinity"}.get(v, v))
    except InvalidOperation:
        return None
    if d.is_nan():
        return ("num", "NaN")
    if d.is_infinite():
        return ("num", "-INF" if d < 0 else "INF")
    f = float(d)
    return ("num", "0" if f == 0 else format(f, ".12g"))


@functools.lru_cache(maxsize=1 << 18)
def lit_key(value: str, datatype: str | None, lang: str | None) -> tuple:
    if lang:
        return ("lit", value, "@" + lang.lower())
    dt = datatype or XSD + "string"
    if dt in _NUMERIC:
        k = _num_key(value)
        if k is not None:
            return k
    return ("lit", value, dt)


def key_ox(term) -> tuple:
    return cb.key_ox(term, lit_key)


_UNBOUND, _BNODE = ("unbound",), ("bnode",)


def key_json(b: dict | None) -> tuple:
    if b is None:
        return _UNBOUND
    t = b["type"]
    if t == "uri":
        return ("uri", b["value"])
    if t == "bnode":
        return _BNODE
    return lit_key(b["value"], b.get("datatype"), b.get("xml:lang"))


_NT_LIT = re.compile(r'"((?:[^"\\]|\\.)*)"(?:\^\^<([^>]*)>|@([A-Za-z0-9\-]+))?\s*\Z', re.S)
_NT_ESC = re.compile(r'\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)', re.S)
_ECHAR = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    return _NT_ESC.sub(lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] in "uU" and len(m.group(1)) > 1
                       else _ECHAR.get(m.group(1), m.group(1)), s)


def parse_term(text: str) -> tuple:
    """N-Triples term text -> ("uri", iri) | ("bnode", label) | ("lit", lexical, datatype, lang)."""
    t = text.strip()
    if t.startswith("<") and t.endswith(">"):
        return ("uri", t[1:-1])
    if t.startswith("_:"):
        return ("bnode", t[2:])
    m = _NT_LIT.match(t)
    if not m:
        raise ValueError(f"not an N-Triples term: {text!r}")
    return ("lit", _unescape(m.group(1)), m.group(2), m.group(3))


def key_nt(text: str | None) -> tuple:
    if text is None:
        return ("unbound",)
    p = parse_term(text)
    if p[0] == "uri":
        return ("uri", p[1])
    if p[0] == "bnode":
        return ("bnode",)
    return lit_key(p[1], p[2], p[3])


def ox_term(text: str):
    p = parse_term(text)
    if p[0] == "uri":
        return ox.NamedNode(p[1])
    if p[0] == "bnode":
        return ox.BlankNode(p[1])
    if p[3]:
        return ox.Literal(p[1], language=p[3])
    return ox.Literal(p[1], datatype=ox.NamedNode(p[2]) if p[2] else None)


@dataclass(frozen=True)
class Result:
    """One window's result in canonical form: a digest of the multiset of rows (or the boolean)."""

    digest: str
    rows: int                     # rows (ASK: 1 if true)
    sample: tuple | None = None   # the sorted row keys when rows <= SAMPLE_ROWS
    error: str | None = None


_MASK = (1 << 64) - 1


def canon_rows(vars_: list[str], rows) -> Result:
    """``rows``: iterable of key tuples in ``vars_`` order. The digest is an order-independent
    multiset hash (two sums of 64-bit row hashes + the row count and the variable names);
    Python's string hashes are per process, so digests compare only within one run."""
    order = sorted(range(len(vars_)), key=lambda i: vars_[i])
    pick = operator.itemgetter(*order) if len(order) > 1 else (lambda r: tuple(r))
    h1 = h2 = n = 0
    keep: list | None = []
    for r in rows:
        row = pick(r)
        h1 += hash(row)
        h2 += hash((row, 0x5BD1E995))
        n += 1
        if keep is not None:
            keep.append(row)
            if n > SAMPLE_ROWS:
                keep = None
    names = "|".join(sorted(vars_))
    digest = f"S:{n}:{h1 & _MASK:016x}{h2 & _MASK:016x}:{hash(names) & _MASK:x}"
    return Result(digest, n, tuple(sorted(map(repr, keep))) if keep is not None else None)


def canon_ask(b: bool) -> Result:
    return Result(f"A:{bool(b)}", int(bool(b)))


def canon_error(kind: str, detail: str) -> Result:
    return Result(f"E:{kind}", 0, None, f"{kind}: {detail}"[:300])


# ---------------------------------------------------------------- workloads
@dataclass
class BenchQuery:
    qid: str                  # C1 / L1 (table and spark id)
    q: cb.CityQuery           # .name registers the query; .plain is the SPARQL given to composite/spark

    @property
    def step(self) -> int:
        return min(self.q.steps.values())

    @property
    def max_range(self) -> int:
        return max(self.q.windows.values())

    @property
    def window_spec(self) -> str:
        from engine.sparql.csparql import format_duration  # noqa: PLC0415
        specs = []
        for s, r in self.q.windows.items():
            st = self.q.steps[s]
            x = f"{format_duration(r)}/{format_duration(st)}" + (" tumbling" if r == st else "")
            if x not in specs:
                specs.append(x)
        return " + ".join(specs)


@dataclass
class StreamData:
    name: str                                   # short name (Jindou stream name)
    iri: str
    elements: list[tuple[int, list[Triple]]]    # tau non-decreasing
    taus: list[int] = field(default_factory=list)

    def __post_init__(self):
        self.taus = [t for t, _ in self.elements]

    def slice(self, lo_excl: int, hi_incl: int) -> tuple[int, int]:
        return bisect.bisect_right(self.taus, lo_excl), bisect.bisect_right(self.taus, hi_incl)


@dataclass
class Workload:
    name: str
    queries: list[BenchQuery]
    static_nt: dict[str, bytes]
    streams: dict[str, StreamData]              # IRI -> data
    start_ms: int
    end_ms: int
    config: dict
    _ndjson: dict = field(default_factory=dict)

    @property
    def bucket_ms(self) -> int:
        g = 0
        for bq in self.queries:
            for st in bq.q.steps.values():
                g = math.gcd(g, int(st))
        g = math.gcd(g, MAX_BUCKET_MS) if g else MAX_BUCKET_MS
        while self.start_ms % g:
            g = math.gcd(g, self.start_ms)
        return g

    def instants(self, bq: BenchQuery) -> list[int]:
        step = bq.step
        first = -((-(self.start_ms + bq.max_range)) // step) * step
        return list(range(first, self.end_ms + 1, step))

    def window(self, bq: BenchQuery, t: int) -> set[Triple]:
        win: set[Triple] = set()
        for s, rng in bq.q.windows.items():
            sd = self.streams[s]
            lo, hi = sd.slice(t - rng, t)
            for _tau, trs in sd.elements[lo:hi]:
                win.update(trs)
        return win

    def n_buckets(self) -> int:
        return (self.end_ms - self.start_ms) // self.bucket_ms + 1

    def ndjson(self, iri: str) -> list[bytes]:
        """The stream's elements as one ndjson body per bucket (cached)."""
        out = self._ndjson.get(iri)
        if out is None:
            b, start, n = self.bucket_ms, self.start_ms, self.n_buckets()
            chunks: list[list[bytes]] = [[] for _ in range(n)]
            for tau, trs in self.streams[iri].elements:
                k = (tau - start) // b
                if 0 <= k < n:
                    chunks[k] += [orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o in trs]
                elif k < 0:
                    raise ValueError(f"element at {tau} before the start {start}")
            out = [b"\n".join(c) for c in chunks]
            self._ndjson[iri] = out
        return out


def load_citybench(ids: list[str], minutes: float, clock: str = "paced", frequency: float = 1.0,
                   seed: int = 0, root: Path | None = None, say=_log) -> Workload:
    names = ["Q" + i[1:] for i in ids]
    pp = cb.prepare(names, minutes, cb.DEFAULT_START, clock, frequency, root, seed, say)
    qs = [BenchQuery(i, q) for i, q in zip(ids, pp.queries, strict=True)]
    streams = {iri: StreamData(sen.local, iri, pp.elements[iri]) for iri, sen in pp.sensors.items()}
    return Workload("citybench", qs, pp.static_nt, streams, pp.start_ms, pp.end_ms,
                    {"clock": clock, "frequency": frequency, "start": cb.DEFAULT_START, "minutes": minutes,
                     "seed": seed})


def load_lsbench(ids: list[str], minutes: float, rate: float, users: int, seed: int = 0, say=_log,
                 name: str = "lsbench", texts=None) -> Workload:
    """``texts``: the queries by id (default L1-L7), or a function of the generated data giving them."""
    t0 = time.perf_counter()
    data = lsbench.generate(users=users, rate=rate, seconds=minutes * 60, seed=seed)
    texts = lsbench.queries() if texts is None else texts(data) if callable(texts) else texts
    qs = [BenchQuery(i, cb.parse_query(i, texts[i])) for i in ids]
    short = {v: k for k, v in lsbench.STREAMS.items()}
    used = {s for bq in qs for s in bq.q.windows}
    streams = {iri: StreamData(short[iri], iri, els) for iri, els in data.streams.items() if iri in used}
    say(f"lsbench: {users} users, {len(data.static)} static triples, {data.n_stream_triples()} stream "
         f"triples ({rate:g}/s for {minutes * 60:g} s) in {time.perf_counter() - t0:.1f}s")
    return Workload(name, qs, {lsbench.STATIC_GRAPH: data.static_nt()}, streams, data.start_ms,
                    data.end_ms, {"rate": rate, "users": users, "minutes": minutes, "seed": seed,
                                  "static_triples": len(data.static),
                                  "stream_triples": data.n_stream_triples()})


# ---------------------------------------------------------------- peers
@dataclass
class PeerRun:
    status: str = "ran"                                      # "ran" | "n/a (reason)"
    latency: dict[int, float] = field(default_factory=dict)  # instant -> ms
    results: dict[int, Result] = field(default_factory=dict)
    errors: int = 0
    ingest_us: float | None = None   # the replay's ingest_ndjson + heartbeat CPU µs per instant (Jindou)
    advance_us: float | None = None  # the worker's maintenance after events, CPU µs per instant (Jindou)
    maint_us: float | None = None    # the part of ingest_us that maintained the results (Jindou)
    steady_us: float | None = None   # maint_us + advance_us after the query's first instant (Jindou)
    paths: tuple[int, int, int] | None = None   # instants answered maintained, generated, evaluated (Jindou)


def _select_rows_json(doc: dict) -> Result:
    vars_ = doc["head"]["vars"]
    kj = key_json
    return canon_rows(vars_, ([kj(b.get(v)) for v in vars_] for b in doc["results"]["bindings"]))


def _collect(events, want: set[int], pr: PeerRun, form: str) -> int | None:
    """Canonical results of new result events (read after every drain, so the log never holds
    more than a few); returns the last event id."""
    lid = None
    for e in events:
        if e.event != "result":
            continue
        lid = e.id
        if e.id not in want:
            continue
        doc = orjson.loads(e.data)
        if "error" in doc:
            pr.errors += 1
            pr.results[e.id] = canon_error(str(doc["error"]), str(doc.get("detail")))
        elif form == "ASK":
            pr.results[e.id] = canon_ask(doc.get("boolean"))
        else:
            pr.results[e.id] = _select_rows_json(doc)
    return lid


def _maint_spent() -> tuple[float, float]:
    """CPU seconds the maintained results took (ingestion thread, worker after events); zeros
    on a version of the engine without them (A/B runs on older commits)."""
    try:
        from engine.stream.maintained import spent  # noqa: PLC0415
    except ImportError:
        return 0.0, 0.0
    return spent()


def _path_counts() -> tuple[int, int]:
    """Instants answered by maintained states and by generated code, all queries of the process
    (zeros on a version of the engine without them)."""
    try:
        from engine.stream.maintained import answered_total  # noqa: PLC0415
        from engine.stream.tiny_gen import taken_total  # noqa: PLC0415
    except ImportError:
        return 0, 0
    return answered_total(), taken_total()


def run_jindou(wl: Workload, incremental: bool = True, say=_log, maintained: bool = True,
               label: str | None = None) -> dict[str, PeerRun]:
    """Replay each query's streams into its own StreamManager; latencies and results per
    instant, and the time of the replay's ``ingest_ndjson`` + ``heartbeat`` calls per instant
    of the query (``maintained``: the maintained-result path on)."""
    from engine.database import Database  # noqa: PLC0415
    from engine.stream.continuous import InstantEvaluator  # noqa: PLC0415
    from engine.stream.manager import StreamManager  # noqa: PLC0415

    was = getattr(InstantEvaluator, "MAINTAINED", None)
    if was is None and not maintained:
        raise ValueError("this version of the engine has no maintained results to turn off")
    InstantEvaluator.MAINTAINED = maintained
    try:
        return _run_jindou(wl, incremental, say, label or ("jindou" if incremental else "jindou-full"),
                           Database, StreamManager)
    finally:
        if was is None:
            del InstantEvaluator.MAINTAINED
        else:
            InstantEvaluator.MAINTAINED = was


def _run_jindou(wl: Workload, incremental: bool, say, label: str, Database, StreamManager) -> dict[str, PeerRun]:

    db = Database()
    for g, nt in wl.static_nt.items():
        db.load_data(nt, "application/n-triples", graph=g)
    # as the server does once it has loaded its data (server/cli.py): what lives for the whole
    # run is kept out of the GC's generations, so a full collection during an instant stays short
    gc.collect()
    gc.freeze()
    out: dict[str, PeerRun] = {}
    b, n_b = wl.bucket_ms, wl.n_buckets()
    try:
        for bq in wl.queries:
            pr = out[bq.qid] = PeerRun()
            want = set(wl.instants(bq))
            # the server's default retention (--retain 1000 instants, --retain-bytes 64 MiB): C2/C8's
            # 7-9 MB events keep about 8 in the log, the small ones every instant of the run
            m = StreamManager(db, incremental=incremental)
            t0 = time.perf_counter()
            try:
                sds = [wl.streams[s] for s in bq.q.windows]
                for sd in sds:
                    m.register_stream(sd.name, sd.iri)
                    m.heartbeat(sd.name, wl.start_ms)
                m.register_query(bq.q.register_text)
                bodies = [wl.ndjson(sd.iri) for sd in sds]
                seen = 0
                last_id: int | None = None
                ingest_s = 0.0
                spent0 = _maint_spent()
                paths0 = _path_counts()
                warm = None   # (bucket, maintenance CPU) after the query's first instant
                for k in range(n_b):
                    ti = time.thread_time()
                    for sd, bs in zip(sds, bodies, strict=True):
                        if bs[k]:
                            r = m.ingest_ndjson(sd.name, bs[k])
                            if r["rejected"]:
                                raise RuntimeError(f"stream {sd.name} rejected lines: {r['errors'][:3]}")
                    for sd in sds:
                        m.heartbeat(sd.name, wl.start_ms + (k + 1) * b)
                    ingest_s += time.thread_time() - ti
                    if not m.drain(300):
                        raise RuntimeError("engine did not drain within 300 s")
                    info = m.query(bq.q.name)
                    if info["evaluated"] > seen:
                        if warm is None:
                            warm = (k, _maint_spent())
                        seen = info["evaluated"]
                        t = m.log(bq.q.name).last_id
                        if t in want and info["last_latency_ms"] is not None:
                            pr.latency[t] = float(info["last_latency_ms"])
                        log = m.log(bq.q.name)
                        evs = log.since(None, from_t=wl.start_ms) if last_id is None else log.since(last_id)
                        if any(e.event == "gap" for e in evs):
                            raise RuntimeError(f"{bq.qid}: result events were dropped")
                        last_id = _collect(evs, want, pr, bq.q.form) or last_id
                for t in sorted(want - set(pr.results)):
                    pr.errors += 1
                    pr.results[t] = canon_error("missing", f"no result event for instant {t}")
                # (the instants of the replay's event time, whether evaluated or not)
                n_inst = max(1, (n_b * b) // bq.step)
                pr.ingest_us = ingest_s * 1e6 / n_inst
                spent1 = _maint_spent()
                paths1 = _path_counts()
                pr.paths = (paths1[0] - paths0[0], paths1[1] - paths0[1], seen)
                pr.maint_us = (spent1[0] - spent0[0]) * 1e6 / n_inst
                pr.advance_us = (spent1[1] - spent0[1]) * 1e6 / n_inst
                if warm is not None and (n_b - warm[0] - 1) * b >= bq.step:
                    # steady: after the query's first instant (its code compiled, its state built
                    # once: a one-time cost a 1-minute replay of 4-12 tumbling instants divides
                    # by few instants)
                    n_st = ((n_b - warm[0] - 1) * b) // bq.step
                    pr.steady_us = ((spent1[0] - warm[1][0]) + (spent1[1] - warm[1][1])) * 1e6 / n_st
            finally:
                m.close()
            say(f"  {label} {bq.qid}: {len(pr.latency)} windows, "
                f"{time.perf_counter() - t0:.1f}s")
    finally:
        db.close()
    return out


class CompositePeer:
    """The C-SPARQL composite design on pyoxigraph (see the module docstring)."""

    name = "csparql-composite"

    def __init__(self, static_nt: dict[str, bytes]):
        self.store = ox.Store()
        self.static_nt = static_nt
        self._unions: dict[tuple[str, ...], ox.NamedNode] = {}
        self._terms: dict[str, object] = {}

    def static_graph(self, graphs: list[str]) -> ox.NamedNode | None:
        """One named graph holding the set union of ``graphs`` (an RDF merge: no duplicates)."""
        key = tuple(sorted(set(graphs)))
        if not key:
            return None
        g = self._unions.get(key)
        if g is None:
            g = ox.NamedNode(f"urn:bench:static:{len(self._unions)}")
            for iri in key:
                self.store.load(self.static_nt[iri], format=ox.RdfFormat.N_TRIPLES, to_graph=g)
            self._unions[key] = g
        return g

    def term(self, text: str):
        t = self._terms.get(text)
        if t is None:
            t = self._terms[text] = ox_term(text)
        return t

    def quad(self, tr: Triple, static: ox.NamedNode | None) -> ox.Quad | None:
        """The window quad of ``tr``, None if the triple is a static fact already (merge = set)."""
        s, p, o = (self.term(x) for x in tr)
        if static is not None and ox.Quad(s, p, o, static) in self.store:
            return None
        return ox.Quad(s, p, o, WINDOW_GRAPH)

    def window(self, plain: str, form: str, quads: list, static: ox.NamedNode | None) -> tuple[float, Result]:
        """One window: insert, query, write the result event (SPARQL JSON, as Jindou's event
        data), clear -- all timed. The event is parsed back for the comparison outside the timing."""
        dg = [WINDOW_GRAPH] if static is None else [WINDOW_GRAPH, static]
        t0 = time.perf_counter()
        try:
            self.store.extend(quads)
            res = self.store.query(plain, default_graph=dg)
            # the result event an observer gets: serialize() runs the (lazy) evaluation to the end
            data = res.serialize(format=ox.QueryResultsFormat.JSON)
        finally:
            self.store.clear_graph(WINDOW_GRAPH)
        ms = (time.perf_counter() - t0) * 1000.0
        doc = orjson.loads(data)
        if form == "ASK":
            return ms, canon_ask(doc.get("boolean"))
        return ms, _select_rows_json(doc)


class _Handoff:
    """Runs calls on one worker thread that waits for them, as Jindou's evaluation worker waits
    for a ready instant: the caller wakes the worker after an idle gap of ``idle_s`` (Jindou's
    worker sleeps while the replay ingests the next bucket) and waits for the result.

    Why: an instant evaluated by a thread woken after its core idled for a few milliseconds
    costs 1.1-3.4x what the same work costs back to back (a VM's halted vCPU comes back with
    cold caches) -- measured on both engines alike (docs/BENCHMARKS.md, sixth pass). The hot
    loop over prepared windows measured the composite warm and Jindou cold."""

    def __init__(self, idle_s: float):
        import queue  # noqa: PLC0415
        import threading  # noqa: PLC0415

        self._in: queue.Queue = queue.Queue()
        self._out: queue.Queue = queue.Queue()
        self.idle_s = idle_s
        self._thread = threading.Thread(target=self._work, name="composite-worker", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._in.get()
            if job is None:
                return
            fn, args = job
            try:
                self._out.put((True, fn(*args)))
            except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
                self._out.put((False, e))

    def call(self, fn, *args):
        if self.idle_s > 0:
            time.sleep(self.idle_s)
        self._in.put((fn, args))
        ok, got = self._out.get()
        if not ok:
            raise got
        return got

    def close(self) -> None:
        self._in.put(None)
        self._thread.join()


#: how the composite's windows are timed: "hot" (default: back to back on the calling thread, warm
#: caches) or "woken" (each on a worker thread woken after an idle gap, as Jindou's instants)
COMPOSITE_TIMINGS = ("hot", "woken")
#: the idle gap before each window of the "woken" timing (Jindou's worker idles ~1-5 ms between the
#: replay's instants while the next bucket is ingested; any gap from ~1 ms on gives the cold factor)
COMPOSITE_IDLE_MS = 3.0


def run_composite(wl: Workload, say=_log, timing: str = "hot", idle_ms: float = COMPOSITE_IDLE_MS
                  ) -> dict[str, PeerRun]:
    if timing not in COMPOSITE_TIMINGS:
        raise ValueError(f"unknown composite timing {timing!r}; known: {', '.join(COMPOSITE_TIMINGS)}")
    peer = CompositePeer(wl.static_nt)
    out: dict[str, PeerRun] = {}
    hand = _Handoff(idle_ms / 1000.0) if timing == "woken" else None

    def window(*args):
        return hand.call(peer.window, *args) if hand is not None else peer.window(*args)

    try:
        _run_composite(wl, peer, window, out, say)
    finally:
        if hand is not None:
            hand.close()
    return out


def _run_composite(wl: Workload, peer: CompositePeer, window, out: dict, say) -> None:
    for bq in wl.queries:
        pr = out[bq.qid] = PeerRun()
        static = peer.static_graph(bq.q.static)
        memo: dict[Triple, ox.Quad | None] = {}
        t0 = time.perf_counter()
        inst = wl.instants(bq)
        if inst:  # one unmeasured warm-up window
            win = wl.window(bq, inst[0])
            try:
                window(bq.q.plain, bq.q.form, [x for x in (peer.quad(tr, static) for tr in win) if x], static)
            except Exception:  # noqa: BLE001 - the measured windows report it
                pass
        for t in inst:
            win = wl.window(bq, t)
            memo = {tr: (memo[tr] if tr in memo else peer.quad(tr, static)) for tr in win}
            quads = [q for q in memo.values() if q is not None]
            try:
                ms, res = window(bq.q.plain, bq.q.form, quads, static)
            except Exception as e:  # noqa: BLE001 - reported as this window's result
                pr.errors += 1
                pr.results[t] = canon_error(type(e).__name__, str(e))
                continue
            pr.latency[t] = ms
            pr.results[t] = res
        say(f"  csparql-composite {bq.qid}: {len(pr.latency)} windows, {time.perf_counter() - t0:.1f}s")


def spread(xs: list, n: int) -> list:
    """``n`` items of ``xs`` evenly spread, first and last included."""
    if n <= 0 or not xs:
        return []
    if n >= len(xs):
        return list(xs)
    if n == 1:
        return [xs[len(xs) // 2]]
    return [xs[round(i * (len(xs) - 1) / (n - 1))] for i in range(n)]


def _static_triples(static_nt: dict[str, bytes]) -> dict[str, list[Triple]]:
    out = {}
    for g, nt in static_nt.items():
        out[g] = [(str(t.subject), str(t.predicate), str(t.object))
                  for t in ox.parse(nt, format=ox.RdfFormat.N_TRIPLES)]
    return out


def _query_vars(plain: str) -> list[str]:
    try:
        return [v.value for v in ox.Store().query(plain).variables]
    except Exception:  # noqa: BLE001
        return []


class SparkUnavailable(Exception):
    pass


def _spark_worker(conn, master: str) -> None:
    """Child process holding the Spark peer (and its JVM, in this process's own group)."""
    os.setsid()
    try:
        from bench.spark_peer import SparkSQLPeer  # noqa: PLC0415

        peer = SparkSQLPeer(master=master)
    except Exception as e:  # noqa: BLE001 - file, pyspark or Java missing
        conn.send(("na", f"{type(e).__name__}: {e}"[:200]))
        return
    conn.send(("ok", None))
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg[0] == "close":
                break
            try:
                if msg[0] == "setup":
                    peer.setup(msg[1])
                    out: object = None
                elif msg[0] == "prepare":
                    out = peer.prepare(*msg[1:])
                else:
                    ms, res = peer.window(msg[1], msg[2])
                    out = (float(ms), res if isinstance(res, bool) else [dict(r) for r in res])
                conn.send(("ok", out))
            except Exception as e:  # noqa: BLE001 - the parent reports it
                conn.send(("err", f"{type(e).__name__}: {e}"[:300]))
    finally:
        try:
            peer.close()
        except Exception:  # noqa: BLE001
            pass


class SparkProcess:
    """:class:`bench.spark_peer.SparkSQLPeer` in a child process, so a window that hangs or
    exhausts the JVM heap is stopped after ``timeout`` seconds (the child's process group,
    which holds the JVM, is killed) instead of stalling the run."""

    def __init__(self, master: str, timeout: float):
        self.master = master
        self.timeout = timeout
        self.proc = None
        self.conn = None

    def start(self, static: dict[str, list[Triple]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_spark_worker, args=(child, self.master), name="spark-peer", daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        st, val = self._reply(max(self.timeout, 300.0), "start")
        if st != "ok":
            self.kill()
            raise SparkUnavailable(val)
        self.call(("setup", static), max(self.timeout, 300.0))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def _reply(self, timeout: float, what: str) -> tuple[str, object]:
        try:
            if not self.conn.poll(timeout):
                self.kill()
                return "timeout", f"{what}: no answer within {timeout:g} s (Spark peer stopped)"
            return self.conn.recv()
        except (EOFError, OSError):
            self.kill()
            return "gone", f"{what}: the Spark peer process exited"

    def call(self, msg: tuple, timeout: float | None = None) -> object:
        """The worker's answer; raises RuntimeError for an error, timeout or a dead worker."""
        try:
            self.conn.send(msg)
        except (OSError, ValueError) as e:
            self.kill()
            raise RuntimeError(f"Spark peer process gone: {e}") from None
        st, val = self._reply(self.timeout if timeout is None else timeout, msg[0])
        if st != "ok":
            raise RuntimeError(f"{st}: {val}")
        return val

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.is_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)   # the worker and its JVM (its own group)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.join(10)
        self.proc = None

    def close(self) -> None:
        if self.alive:
            try:
                self.conn.send(("close",))
                self.proc.join(60)
            except (OSError, ValueError):
                pass
        self.kill()


def run_spark(wl: Workload, n_windows: int, master: str = "local[2]", say=_log,
              timeout: float = 300.0) -> dict[str, PeerRun]:
    def na(reason: str) -> dict[str, PeerRun]:
        say(f"  spark-sql: n/a ({reason})")
        return {bq.qid: PeerRun(status=f"n/a ({reason})") for bq in wl.queries}

    static = _static_triples(wl.static_nt)
    sp = SparkProcess(master, timeout)

    def ensure() -> None:
        if not sp.alive:
            t0 = time.perf_counter()
            sp.start(static)
            say(f"  spark-sql: started and set up in {time.perf_counter() - t0:.1f}s")

    out: dict[str, PeerRun] = {}
    try:
        try:
            ensure()
        except (SparkUnavailable, RuntimeError) as e:
            return na(str(e)[:200])
        for bq in wl.queries:
            pr = out[bq.qid] = PeerRun()
            try:
                ensure()
                reason = sp.call(("prepare", bq.qid, bq.q.plain, list(bq.q.static)), max(timeout, 300.0))
            except (SparkUnavailable, RuntimeError) as e:
                reason = f"prepare failed: {e}"[:200]
            if reason:
                pr.status = f"n/a ({reason})"
                say(f"  spark-sql {bq.qid}: {pr.status}")
                continue
            vars_ = _query_vars(bq.q.plain)
            t0 = time.perf_counter()
            picked = spread(wl.instants(bq), n_windows)
            if picked:  # one unmeasured warm-up window (Spark's first run of a plan is much slower)
                try:
                    sp.call(("window", bq.qid, sorted(wl.window(bq, picked[0]))), max(timeout, 300.0))
                except RuntimeError:
                    pass
            for t in picked:
                if not sp.alive:   # stopped after a timeout: the rest of this query is not measured
                    pr.errors += 1
                    pr.results[t] = canon_error("skipped", "Spark peer stopped earlier in this query")
                    continue
                try:
                    ms, res = sp.call(("window", bq.qid, sorted(wl.window(bq, t))))
                except RuntimeError as e:
                    pr.errors += 1
                    pr.results[t] = canon_error("spark", str(e))
                    continue
                pr.latency[t] = float(ms)
                if bq.q.form == "ASK":
                    pr.results[t] = canon_ask(bool(res))
                else:
                    pr.results[t] = canon_rows(vars_, [tuple(key_nt(r.get(v)) for v in vars_) for r in res])
            say(f"  spark-sql {bq.qid}: {len(pr.latency)} windows"
                f"{f', {pr.errors} errors' if pr.errors else ''}, {time.perf_counter() - t0:.1f}s")
    finally:
        sp.close()
    return out


# ---------------------------------------------------------------- report
def pct(xs: list[float], f: float) -> float | None:
    """Nearest-rank percentile."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(math.ceil(f * len(s))) - 1))]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _diff(a: Result, b: Result) -> dict:
    d: dict = {}
    if a.sample is not None and b.sample is not None:
        ca, cbb = Counter(a.sample), Counter(b.sample)
        d["only_first"] = list((ca - cbb).elements())[:3]
        d["only_second"] = list((cbb - ca).elements())[:3]
    return d


def summarize(wl: Workload, runs: dict[str, dict[str, PeerRun]]) -> dict:
    rows = []
    for bq in wl.queries:
        inst = wl.instants(bq)
        sizes = [len(wl.window(bq, t)) for t in inst]
        peers = {}
        for p, per in runs.items():
            pr = per.get(bq.qid)
            if pr is None:
                continue
            lat = list(pr.latency.values())
            peers[p] = {"status": pr.status, "windows": len(lat), "errors": pr.errors,
                        "median_ms": _r(statistics.median(lat)) if lat else None,
                        "p99_ms": _r(pct(lat, 0.99)) if lat else None}
            if pr.ingest_us is not None:
                peers[p]["ingest_us"] = _r(pr.ingest_us, 1)
                peers[p]["advance_us"] = _r(pr.advance_us or 0.0, 1)
                peers[p]["maint_us"] = _r(pr.maint_us or 0.0, 1)
                if pr.paths is not None:
                    peers[p]["paths"] = list(pr.paths)
                if lat:
                    peers[p]["total_us"] = _r(pr.ingest_us + (pr.advance_us or 0.0)
                                              + 1000.0 * statistics.median(lat), 1)
                    # the query's own CPU per instant: its maintenance (ingestion + advance)
                    # and the instant; the ingestion's parsing and storing is every peer's
                    # (the composite's reload is inside its own median)
                    peers[p]["cpu_us"] = _r((pr.maint_us or 0.0) + (pr.advance_us or 0.0)
                                            + 1000.0 * statistics.median(lat), 1)
                    if pr.steady_us is not None:
                        peers[p]["steady_cpu_us"] = _r(pr.steady_us + 1000.0 * statistics.median(lat), 1)
        compared = disagree = 0
        mismatches, errors = [], []
        result_rows = []
        for t in inst:
            allr = [(p, per[bq.qid].results[t]) for p, per in runs.items()
                    if bq.qid in per and t in per[bq.qid].results]
            # a window a peer failed on (error, timeout) is reported, not compared
            errors += [{"t": t, "peer": p, "error": r.error} for p, r in allr if r.error][:max(0, 5 - len(errors))]
            got = [(p, r) for p, r in allr if not r.error]
            if got:
                result_rows.append(got[0][1].rows)
            if len(got) < 2:
                continue
            compared += 1
            ref_p, ref = got[0]
            bad = [(p, r) for p, r in got[1:] if r.digest != ref.digest]
            if bad:
                disagree += 1
                if len(mismatches) < 5:
                    mismatches.append({"t": t, "results": {p: {"rows": r.rows, "digest": r.digest[:16]}
                                                           for p, r in got},
                                       "diff": {f"{ref_p} vs {p}": _diff(ref, r) for p, r in bad}})
        jm = peers.get("jindou", {}).get("median_ms")

        def ratio(p: str, peers=peers, jm=jm) -> float | None:
            x = peers.get(p, {}).get("median_ms")
            return None if x is None or not jm else round(x / jm, 2)

        jc = peers.get("jindou", {}).get("cpu_us")
        js = peers.get("jindou", {}).get("steady_cpu_us")
        cm = peers.get("csparql-composite", {}).get("median_ms")

        rows.append({
            "query": bq.qid, "name": bq.q.name, "window": bq.window_spec, "instants": len(inst),
            "window_triples_median": _r(statistics.median(sizes), 1) if sizes else None,
            "window_triples_p99": pct(sizes, 0.99),
            "result_rows_median": _r(statistics.median(result_rows), 1) if result_rows else None,
            "nonempty_windows": sum(1 for x in result_rows if x), "peers": peers,
            "ratios": {"csparql-composite/jindou": ratio("csparql-composite"), "spark-sql/jindou": ratio("spark-sql"),
                       "jindou-full/jindou": ratio("jindou-full"),
                       "jindou-unmaintained/jindou": ratio("jindou-unmaintained"),
                       # the composite's instant against Jindou's whole CPU per instant
                       # (maintaining + advance + med): what a reviewer timing CPU per window sees
                       "csparql-composite/jindou-cpu": (None if cm is None or not jc
                                                        else round(1000.0 * cm / jc, 2)),
                       "csparql-composite/jindou-steady-cpu": (None if cm is None or not js
                                                               else round(1000.0 * cm / js, 2))},
            "compared_windows": compared, "disagreements": disagree, "mismatches": mismatches,
            "error_samples": errors})
    targets = {}
    # (the CPU target: the composite's instant against maintaining + advance + med per instant)
    for p, factor in [*TARGETS.items(), (CPU_TARGET, TARGETS["csparql-composite"])]:
        rk = "csparql-composite/jindou-cpu" if p == CPU_TARGET else f"{p}/jindou"
        rs = [(r["query"], r["ratios"][rk]) for r in rows if r["ratios"][rk] is not None]
        met = [q for q, x in rs if x >= factor]
        geo = math.exp(statistics.fmean(math.log(x) for _q, x in rs)) if rs and all(x > 0 for _q, x in rs) else None
        targets[p] = {"factor": factor, "queries": len(rs), "met_queries": len(met),
                      "not_met": [f"{q} {x:g}x" for q, x in rs if x < factor],
                      "geo_mean_ratio": _r(geo, 2), "met": bool(rs) and len(met) == len(rs)}
    return {"workload": wl.name, "config": wl.config, "start_ms": wl.start_ms, "end_ms": wl.end_ms,
            "bucket_ms": wl.bucket_ms, "queries": rows, "targets": targets}


def _fmt(x, suffix: str = "") -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        x = f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
    return f"{x}{suffix}"


def format_markdown(summary: dict, peers: list[str]) -> str:
    cols = ["query", "window (range/step)", "window triples med / p99", "rows med"]
    cols += [f"{p} med / p99 ms" for p in peers]
    jps = [p for p in peers if p in JINDOU_PEERS]
    cols += [f"{p} ingest (of it maintaining) / advance CPU µs/instant" for p in jps]
    cols += [f"{p} ingest + advance + med µs" for p in jps]
    cols += [f"{p} maintained / generated / other" for p in jps]
    ratio_cols = [(p, f"{p}/jindou") for p in ("csparql-composite", "spark-sql", "jindou-full", "jindou-unmaintained")
                  if p in peers and "jindou" in peers]
    short = {"csparql-composite": "composite", "spark-sql": "spark", "jindou-full": "full",
             "jindou-unmaintained": "unmaintained"}
    cols += [f"{short[p]}/jindou" for p, _k in ratio_cols]
    cpu_col = "csparql-composite" in peers and "jindou" in peers
    if cpu_col:
        cols += ["jindou maintaining + advance + med µs (steady)", "composite/jindou CPU (steady)"]
    cols.append("agree")
    out = [f"### {summary['workload']}", "",
           "config: " + ", ".join(f"{k}={v}" for k, v in summary["config"].items()), "",
           "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in summary["queries"]:
        cells = [r["query"] + (f" {lsvaried.family(r['query'])}" if summary["workload"] == "lsbench-varied" else ""),
                 r["window"], f"{_fmt(r['window_triples_median'])} / {_fmt(r['window_triples_p99'])}",
                 _fmt(r["result_rows_median"])]
        for p in peers:
            st = r["peers"].get(p)
            if st is None:
                cells.append("–")
            elif st["status"] != "ran":
                cells.append(st["status"])
            else:
                e = f" ({st['errors']} err)" if st["errors"] else ""
                cells.append(f"{_fmt(st['median_ms'])} / {_fmt(st['p99_ms'])}{e}")
        for p in jps:
            st = r["peers"].get(p, {})
            cells.append(f"{_fmt(st.get('ingest_us'))} ({_fmt(st.get('maint_us'))}) / {_fmt(st.get('advance_us'))}")
        for p in jps:
            cells.append(_fmt(r["peers"].get(p, {}).get("total_us")))
        for p in jps:
            pa = r["peers"].get(p, {}).get("paths")
            cells.append("–" if not pa else f"{pa[0]} / {pa[1]} / {max(0, pa[2] - pa[0] - pa[1])}")
        for _p, k in ratio_cols:
            cells.append(_fmt(r["ratios"][k], "×"))
        if cpu_col:
            jst = r["peers"].get("jindou", {})
            cells.append(f"{_fmt(jst.get('cpu_us'))} ({_fmt(jst.get('steady_cpu_us'))})")
            cells.append(f"{_fmt(r['ratios'].get('csparql-composite/jindou-cpu'), '×')} "
                         f"({_fmt(r['ratios'].get('csparql-composite/jindou-steady-cpu'), '×')})")
        if r["compared_windows"] == 0:
            cells.append("– (nothing compared)")
        elif r["disagreements"]:
            cells.append(f"**NO** ({r['disagreements']} of {r['compared_windows']})")
        else:
            cells.append(f"yes ({r['compared_windows']})")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for p, tg in summary["targets"].items():
        if p == CPU_TARGET:
            if not cpu_col:
                continue
            label = f"jindou CPU per instant (maintaining + advance + med) ≥{tg['factor']:g}× lower than csparql-composite's median"
        elif p not in peers:
            continue
        else:
            label = f"jindou median ≥{tg['factor']:g}× lower than {p}"
        if not tg["queries"]:
            out.append(f"- target: {label}: not measured")
            continue
        verdict = "met" if tg["met"] else "not met"
        extra = f"; not met on {', '.join(tg['not_met'])}" if tg["not_met"] else ""
        out.append(f"- target: {label}: **{verdict}** ({tg['met_queries']}/{tg['queries']} queries, "
                   f"geo-mean {_fmt(tg['geo_mean_ratio'], '×')}{extra})")
    return "\n".join(out)


# ---------------------------------------------------------------- driver
def _split(s: str | None) -> list[str]:
    return [x.strip() for x in (s or "").split(",") if x.strip()]


def run(workloads: list[str], queries: list[str] | None = None, minutes: float = 2.0, rate: float = 2000.0,
        users: int = 1000, seed: int = 0, spark_windows: int = 10, peers: list[str] | None = None,
        clock: str = "paced", frequency: float = 1.0, root: Path | None = None, spark_master: str = "local[2]",
        say=_log, spark_timeout: float = 300.0, small_rate: float = SMALL_RATE,
        composite_timing: str = "hot", varied: int | None = None) -> dict:
    peers = list(peers or DEFAULT_PEERS)
    bad = [p for p in peers if p not in PEERS]
    if bad:
        raise ValueError(f"unknown peer(s) {bad}; known: {', '.join(PEERS)}")
    sel = {q.upper() for q in queries} if queries else None
    report = {"peers": peers, "workloads": []}
    for w in workloads:
        if w == "citybench":
            ids = [q for q in CITYBENCH_QUERIES if sel is None or q in sel or "Q" + q[1:] in sel]
        elif w in ("lsbench", "lsbench-small"):
            ids = [q for q in LSBENCH_QUERIES if sel is None or q in sel]
        elif w == "lsbench-varied":
            vtexts = lsvaried.queries(varied, seed)
            ids = [q for q in vtexts if sel is None or q in sel]
        elif w == "lsbench-walk":
            nw = varied or WALK_QUERIES
            ids = [f"W{i + 1:02d}" for i in range(nw) if sel is None or f"W{i + 1:02d}" in sel]
        else:
            raise ValueError(f"unknown workload {w!r}; known: {', '.join(WORKLOADS)}")
        if not ids:
            continue
        say(f"== {w}: {', '.join(ids)}")
        if w == "citybench":
            wl = load_citybench(ids, minutes, clock, frequency, seed, root, say)
        elif w == "lsbench":
            wl = load_lsbench(ids, minutes, rate, users, seed, say)
        elif w == "lsbench-varied":
            wl = load_lsbench(ids, minutes, small_rate, users, seed, say, name=w, texts=vtexts)
        elif w == "lsbench-walk":
            wl = load_lsbench(ids, minutes, small_rate, users, seed, say, name=w,
                              texts=lambda data, nw=nw: lswalk.queries(data, nw, seed))
        else:
            wl = load_lsbench(ids, minutes, small_rate, users, seed, say, name="lsbench-small")
        runs: dict[str, dict[str, PeerRun]] = {}
        t0 = time.perf_counter()
        for p in peers:
            if p == "jindou":
                runs[p] = run_jindou(wl, True, say)
            elif p == "jindou-full":
                runs[p] = run_jindou(wl, False, say)
            elif p == "jindou-unmaintained":
                runs[p] = run_jindou(wl, True, say, maintained=False, label=p)
            elif p == "csparql-composite":
                runs[p] = run_composite(wl, say, composite_timing)
            elif p == "spark-sql":
                runs[p] = run_spark(wl, spark_windows, spark_master, say, spark_timeout)
        s = summarize(wl, runs)
        if "csparql-composite" in peers:
            s["config"]["composite_timing"] = composite_timing + (
                f" ({COMPOSITE_IDLE_MS:g} ms idle)" if composite_timing == "woken" else "")
        s["seconds"] = round(time.perf_counter() - t0, 1)
        report["workloads"].append(s)
    report["disagreements"] = sum(r["disagreements"] for w in report["workloads"] for r in w["queries"])
    report["jindou_errors"] = sum(r["peers"][p]["errors"] for w in report["workloads"] for r in w["queries"]
                                  for p in JINDOU_PEERS if p in r["peers"])
    return report


def format_report(report: dict) -> str:
    parts = [format_markdown(w, report["peers"]) for w in report["workloads"]]
    if report["disagreements"]:
        parts.append(f"**{report['disagreements']} window(s) where the peers disagree** (details: --json)")
    if report["jindou_errors"]:
        parts.append(f"**Jindou failed on {report['jindou_errors']} window(s)** (details: --json)")
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench streams", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default=",".join(WORKLOADS),
                    help="citybench,lsbench,lsbench-small,lsbench-varied,lsbench-walk (default all five)")
    ap.add_argument("--queries", default=None, help="e.g. C1,C5,L4 (default: C1-C11 and L1-L7)")
    ap.add_argument("--minutes", type=float, default=2.0, help="minutes of event time (default 2)")
    ap.add_argument("--rate", type=float, default=2000.0,
                    help="lsbench: triples per second of event time over the five streams (default 2000)")
    ap.add_argument("--users", type=int, default=1000, help="lsbench: users in the static graph (default 1000)")
    ap.add_argument("--small-rate", type=float, default=SMALL_RATE,
                    help=f"lsbench-small: triples per second of event time (default {SMALL_RATE:g})")
    ap.add_argument("--varied", type=int, default=None,
                    help=f"lsbench-varied: queries, cycling through {len(lsvaried.TEMPLATES)} shapes "
                         f"(default one per shape); lsbench-walk: random-walk queries (default {WALK_QUERIES}); "
                         "their constants and windows come from --seed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spark-windows", type=int, default=10, help="windows per query measured on spark-sql")
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--spark-timeout", type=float, default=300.0,
                    help="seconds one Spark window may take; then the Spark process is stopped and the "
                         "query's remaining windows are reported as errors (default 300)")
    ap.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                    help=f"default {','.join(DEFAULT_PEERS)} (known: {','.join(PEERS)})")
    ap.add_argument("--clock", choices=("paced", "csv"), default="paced",
                    help="citybench: CityBench's paced replay (default) or each row's CSV time")
    ap.add_argument("--frequency", type=float, default=1.0, help="citybench: paced rows per second (default 1)")
    ap.add_argument("--shared", default=None, help="path of shared/ or shared/citybench")
    ap.add_argument("--composite-timing", choices=COMPOSITE_TIMINGS, default="hot",
                    help="csparql-composite: back to back on the calling thread (hot, default) or each "
                         f"window on a worker thread woken after {COMPOSITE_IDLE_MS:g} ms idle, as "
                         "Jindou's instants are (woken)")
    ap.add_argument("--json", default=None, help="write the full report as JSON here")
    ap.add_argument("--out", default=None, help="write the Markdown report here")
    a = ap.parse_args(argv)
    root = cb.shared_root(a.shared) if "citybench" in _split(a.workload) else None
    report = run(_split(a.workload), _split(a.queries) or None, a.minutes, a.rate, a.users, a.seed,
                 a.spark_windows, _split(a.peers), a.clock, a.frequency, root, a.spark_master,
                 spark_timeout=a.spark_timeout, small_rate=a.small_rate, composite_timing=a.composite_timing,
                 varied=a.varied)
    md = format_report(report)
    print(md)
    if a.out:
        Path(a.out).write_text(md + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2, default=str))
    return EXIT_MISMATCH if report["disagreements"] or report["jindou_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
