"""Cost model: project Jindou's LUBM latency and throughput onto a cluster we do not have.

The machines here have 2 cores, so scale-out cannot be measured; instead this
module combines *measured* per-operation costs (of each transport and of
Jindou's per-row compute) with *measured* per-query profiles (how many rows
each step of a query's plan reads and produces) into projections for H hosts,
and prints them next to the Wukong paper's numbers.  It is deliberately a
simple first-order model: every term below is one measured or cited number
times one count, so a surprising projection can be traced to its inputs.

Inputs
------
``Transport`` (per transport, all measured or cited):
  ``read_us``  latency of one remote read (an in-place fetch of one vertex's
               neighbour list: a one-sided RDMA READ, or one request/response);
  ``call_us``  latency of one batched call (a fork-join sub-query out and its
               Arrow batch back);
  ``post_us``  the caller's CPU per call (the cost of issuing one more of H-1 concurrent calls);
  ``byte_ns``  per byte on the wire (1 / bandwidth);
  ``remote_cpu_us`` remote CPU per read (0 for one-sided RDMA: the point of it);
  ``batched``  whether an in-place step's reads go as one call per remote host
               (Jindou over Flight: one ``expand`` exchange per worker and step)
               instead of one read per vertex (Wukong's one-sided READs).
``Compute`` (measured on Jindou, 1 process): ``row_ns`` per row a step touches
  (rows in + rows out), ``fixed_us`` per query (HTTP, parse, plan, encode),
  ``dispatch_us`` per sub-query on a worker, ``threads`` worker threads per host.
``QueryProfile``: per plan step its kind (const / index start, expand, prune),
  ``reads`` (distinct vertices whose lists the step reads), ``rows_in``/``rows_out``,
  the history width in/out (columns) and ``start``, the variable it starts from.

Where the history is (the state, after each step)
-------------------------------------------------
``L``    all rows on the query's one host;
``D:v``  spread over the hosts, each row on the owner of its vertex ``v`` (after a
         fork-join from ``v``, or an index start binding ``v``);
A step starting from ``v`` in state ``D:v`` is local everywhere: no communication.

Formulas (H hosts, vertices spread uniformly, so a fraction f = (H-1)/H of any
set of vertices is remote; B = 8 bytes per id; T = threads per host)
------------------------------------------------------------------------------
rows(s)          = rows_in + rows_out
remote_reads(s)  = f * reads
destinations(s)  = min(H-1, ceil(f * reads))             (H-1 for an index step)
reads_us(s)      = remote_reads * read_us                (per vertex, synchronous as in Wukong)
                 = read_us + (destinations - 1) * post_us  (batched: one call per host)
const step       = f * read_us + rows(s) * row_ns                        -> L
                   (the first step, from a constant: one vertex, nothing to fork)
index step       = call_us + (H-1) * post_us + dispatch_us + rows(s) * row_ns / (H*T)   -> D:v
                   (Wukong's index vertices are split over all hosts: every mode starts there)
local step       = rows(s) * row_ns / (H*T)                                             (D:v, from v)
in-place, L      = reads_us + f * rows_out * B * byte_ns + rows(s) * row_ns  -> L (one thread)
in-place, D:u    = reads_us / p + f * rows_out * B * byte_ns / H + rows(s) * row_ns / (H*T) -> D:u
                   (every host reads for its own rows; p = H*T for per-vertex reads, 1 batched)
fork-join        = call_us + destinations * post_us + dispatch_us + ship * byte_ns
                   + rows(s) * row_ns / (H*T)                            -> D:v
                   ship = f * rows_in * width_in * B from L (scatter), that / H from D (shuffle)
gather           = call_us + f * rows * width * B * byte_ns   (at the end, from a D state)
latency(mode)    = fixed_us + sum of steps (+ the gather)

Modes: ``in-place`` never forks a step, ``fork-join`` forks every step it can
(an index start is distributed and a constant start in place in every mode, as
in Wukong); ``adaptive`` picks per step with a small dynamic programme over the
states above: the optimum of the model, where Wukong section 5.3 uses a
threshold on the number of remote operations.

Throughput of a query = H * T / busy, busy = thread time the query costs the
whole cluster: rows(s) * row_ns of compute per step, plus per remote read (or
batched call) read_us of a blocked thread and remote_cpu_us on its owner, plus
per fork-join or index message post_us + dispatch_us.  Capped by the links:
H / (bytes_on_wire * byte_ns).  A mix's throughput uses the mean busy time
(every query equally often).

Scaling to the paper's data: a non-selective (group I) query's step counts
grow linearly with the data; a selective (group II) query's do not (the
paper's own classification, section 7.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

ID_BYTES = 8  # Jindou's vertex ids are int64

# ---------------------------------------------------------------- the paper (Wukong, OSDI'16)
PAPER = ("J. Shi, Y. Yao, R. Chen, H. Chen, F. Li: Fast and Concurrent RDF Queries with "
         "RDMA-based Distributed Graph Exploration, OSDI 2016 (shared/seeds/001)")
# Table 3: query latency (ms) on a 6-node cluster, LUBM-10240 (1,410 M triples), multi-threading on.
PAPER_TABLE3_MS = {
    "Wukong": {"L1": 516, "L2": 78, "L3": 203, "L4": 0.41, "L5": 0.17, "L6": 0.89, "L7": 464},
    "TriAD": {"L1": 2110, "L2": 512, "L3": 1252, "L4": 3.4, "L5": 3.1, "L6": 63, "L7": 10055},
    "TriAD-SG": {"L1": 1422, "L2": 695, "L3": 1225, "L4": 3.9, "L5": 4.5, "L6": 4.6, "L7": 11572},
    "Trinity.RDF": {"L1": 12648, "L2": 6081, "L3": 8735, "L4": 5, "L5": 4, "L6": 9, "L7": 31214},
}
# Table 6: Wukong's latency (ms) with the execution mode forced, same cluster and data.
PAPER_TABLE6_MS = {
    "in-place": {"L1": 21859, "L2": 80, "L3": 204, "L4": 0.42, "L5": 0.17, "L6": 2.43, "L7": 12068},
    "fork-join": {"L1": 813, "L2": 79, "L3": 203, "L4": 0.63, "L5": 0.47, "L6": 1.27, "L7": 466},
    "adaptive": {"L1": 516, "L2": 78, "L3": 203, "L4": 0.41, "L5": 0.17, "L6": 0.89, "L7": 464},
}
PAPER_HOSTS = 6
PAPER_TRIPLES = 1_410_000_000  # Table 1, LUBM-10240
# Section 7.1: two 10-core Xeon E5-2650 v3 per machine, two cores per processor reserved for clients.
PAPER_CORES = 20
PAPER_THREADS = 16
# Section 3 / Figure 4: one-sided RDMA READ 1.56 us at 8 bytes, 2.25 us at 2 KB (ConnectX-3, 56 Gbps IB).
RDMA_READ_US = (1.56, 2.25)
RDMA_READ_BYTES = (8, 2048)
PAPER_PEAK_QPS = 269_000  # Section 7.5: mixed selective workload, 6 machines

MODES = ("in-place", "fork-join", "adaptive")


@dataclass(frozen=True)
class Transport:
    """Per-operation costs of one transport (see the module docstring)."""

    name: str
    read_us: float
    call_us: float
    post_us: float
    byte_ns: float
    remote_cpu_us: float
    source: str = ""
    batched: bool = False


@dataclass(frozen=True)
class Compute:
    """Jindou's own costs, measured on one process."""

    row_ns: float
    fixed_us: float
    dispatch_us: float
    threads: int = PAPER_THREADS


@dataclass(frozen=True)
class Step:
    """One step of a query plan: what it reads and produces."""

    pattern: str
    kind: str  # "index" (starts from a type/predicate index), "const" (from a constant), "expand", "prune"
    reads: int  # distinct vertices whose neighbour lists the step reads
    rows_in: int
    rows_out: int
    width_in: int
    width_out: int
    start: str | None = None  # the variable the step starts from (an index step: the one it binds)

    @property
    def rows(self) -> int:
        return self.rows_in + self.rows_out


@dataclass(frozen=True)
class QueryProfile:
    name: str
    selective: bool
    steps: tuple[Step, ...]
    triples: int  # size of the data the profile was measured on

    @property
    def result_rows(self) -> int:
        return self.steps[-1].rows_out if self.steps else 0

    @property
    def result_width(self) -> int:
        return self.steps[-1].width_out if self.steps else 0

    def scaled(self, triples: int) -> QueryProfile:
        """The profile on ``triples`` triples: group I counts grow linearly, group II stay."""
        if self.selective or not self.triples:
            return replace(self, triples=triples)
        k = triples / self.triples

        def s(n: int) -> int:
            return int(round(n * k))

        steps = tuple(replace(st, reads=st.reads if st.kind in ("index", "const") else s(st.reads),
                              rows_in=s(st.rows_in), rows_out=s(st.rows_out)) for st in self.steps)
        return replace(self, steps=steps, triples=triples)


def rdma_transport(read_us: float | None = None, dispatch_write_us: float | None = None) -> Transport:
    """RDMA at the paper's numbers: READ latency 1.56 us (8 B) rising to 2.25 us (2 KB), so
    per byte (2.25-1.56) us / 2040 B; a fork-join call is two one-sided WRITEs (sub-query out,
    reply back) plus the same per-byte cost; one-sided reads cost the remote host no CPU."""
    lo, hi = RDMA_READ_US
    byte_ns = (hi - lo) * 1000.0 / (RDMA_READ_BYTES[1] - RDMA_READ_BYTES[0])
    r = lo if read_us is None else read_us
    w = 2 * lo if dispatch_write_us is None else dispatch_write_us
    return Transport("RDMA", read_us=r, call_us=w, post_us=0.2, byte_ns=byte_ns, remote_cpu_us=0.0,
                     source=f"paper: READ {lo}-{hi} us (8 B-2 KB); call = 2 one-sided WRITEs")


# ---------------------------------------------------------------- per step
def _f(hosts: int) -> float:
    return (hosts - 1) / hosts


def remote_reads(step: Step, hosts: int) -> float:
    return _f(hosts) * step.reads if hosts > 1 else 0.0


def destinations(step: Step, hosts: int) -> int:
    if hosts <= 1:
        return 0
    if step.kind == "index":
        return hosts - 1
    return min(hosts - 1, math.ceil(_f(hosts) * step.reads))


def remote_ops(step: Step, t: Transport, hosts: int) -> float:
    """Remote operations of an in-place step: reads per vertex, or one call per host when batched."""
    return float(destinations(step, hosts)) if t.batched else remote_reads(step, hosts)


def _reads_us(step: Step, t: Transport, hosts: int) -> float:
    if t.batched:
        d = destinations(step, hosts)
        return t.read_us + (d - 1) * t.post_us if d else 0.0
    return remote_reads(step, hosts) * t.read_us


def inplace_step_us(step: Step, t: Transport, c: Compute, hosts: int, spread: bool = False) -> float:
    """An in-place step from one host, or (``spread``) from every host for its own rows."""
    wire = _f(hosts) * step.rows_out * ID_BYTES * t.byte_ns / 1000.0
    comp = step.rows * c.row_ns / 1000.0
    if not spread:
        return _reads_us(step, t, hosts) + wire + comp
    par = hosts * c.threads
    reads = _reads_us(step, t, hosts) if t.batched else _reads_us(step, t, hosts) / par
    return reads + wire / hosts + comp / par


def forkjoin_step_us(step: Step, t: Transport, c: Compute, hosts: int, spread: bool) -> float:
    """``spread``: the history is already spread over the hosts (else it leaves one host)."""
    comp = step.rows * c.row_ns / 1000.0 / (hosts * c.threads)
    if hosts <= 1:
        return comp
    ship = _f(hosts) * step.rows_in * step.width_in * ID_BYTES
    if spread:
        ship /= hosts
    d = destinations(step, hosts)
    return t.call_us + d * t.post_us + c.dispatch_us + ship * t.byte_ns / 1000.0 + comp


def index_step_us(step: Step, t: Transport, c: Compute, hosts: int) -> float:
    comp = step.rows * c.row_ns / 1000.0 / (hosts * c.threads)
    if hosts <= 1:
        return comp
    return t.call_us + (hosts - 1) * t.post_us + c.dispatch_us + comp


def gather_us(rows: int, width: int, t: Transport, hosts: int) -> float:
    if hosts <= 1:
        return 0.0
    return t.call_us + _f(hosts) * rows * width * ID_BYTES * t.byte_ns / 1000.0


def crossover_reads(t: Transport, c: Compute, hosts: int, width: int = 2, fanout: float = 1.0,
                    limit: int = 10**9) -> int | None:
    """Smallest number of distinct vertices a step must read before forking it (from a
    history on one host) beats reading them in place; None if fork-join never wins."""

    def wins(n: int) -> bool:
        st = Step("", "expand", n, n, int(n * fanout), width, width + 1)
        return forkjoin_step_us(st, t, c, hosts, spread=False) < inplace_step_us(st, t, c, hosts)

    if not wins(limit):
        return None
    lo, hi = 1, limit
    while lo < hi:  # both sides are linear in n, so "fork-join wins" is monotone in n
        mid = (lo + hi) // 2
        if wins(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


# ---------------------------------------------------------------- per query
@dataclass(frozen=True)
class Projection:
    query: str
    mode: str
    hosts: int
    latency_us: float
    busy_us: float  # thread time the query costs the cluster
    wire_bytes: float
    # per step: "I" in place (the rows' host(s) read remote lists), "F" on the owners of the
    # step's vertices (forked there, an index start, or a step local to where a fork left the rows)
    choices: tuple[str, ...]
    compute_us_per_host: float  # this query's compute share of each host when queries start everywhere

    def qps(self, t: Transport, threads: int) -> float:
        cpu = self.hosts * threads * 1e6 / max(self.busy_us, 1e-9)
        if self.wire_bytes > 0 and t.byte_ns > 0:
            return min(cpu, self.hosts * 1e9 / (self.wire_bytes * t.byte_ns))
        return cpu


def _moves(st: Step, state: str, t: Transport, c: Compute, hosts: int, mode: str):
    """The ways to run step ``st`` from ``state``: (next state, choice, latency, busy, wire bytes)."""
    f = _f(hosts)
    comp = st.rows * c.row_ns / 1000.0
    d = destinations(st, hosts)
    msg = t.post_us + c.dispatch_us
    if hosts <= 1:
        yield state, "I", comp, comp, 0.0
        return
    if st.kind == "const" and state == "L":
        lat = f * t.read_us + comp
        yield "L", "I", lat, lat + f * t.remote_cpu_us, f * st.rows_out * ID_BYTES
        return
    if st.kind == "index" and state == "L":
        yield f"D:{st.start}", "F", index_step_us(st, t, c, hosts), (hosts - 1) * msg + comp, 0.0
        return
    if state != "L" and st.start is not None and state == f"D:{st.start}":
        yield state, "F", comp / (hosts * c.threads), comp, 0.0  # runs where its rows are
        return
    spread = state != "L"
    in_wire = f * st.rows_out * ID_BYTES
    hist = f * st.rows_in * st.width_in * ID_BYTES
    if mode != "fork-join" or st.start is None:
        lat = inplace_step_us(st, t, c, hosts, spread)
        n_ops = remote_ops(st, t, hosts) * (hosts if spread and t.batched else 1)
        blocked = n_ops * t.read_us if spread else lat - comp
        yield state, "I", lat, comp + blocked + n_ops * t.remote_cpu_us, in_wire
    if mode != "in-place" and st.start is not None:
        msgs = d * (hosts if spread else 1)
        yield (f"D:{st.start}", "F", forkjoin_step_us(st, t, c, hosts, spread), msgs * msg + comp, hist)


def project(p: QueryProfile, t: Transport, c: Compute, hosts: int, mode: str) -> Projection:
    """Latency and cost of one query on ``hosts`` hosts in ``mode`` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    # state -> (latency, busy, wire bytes, choices), the fastest way there
    best: dict[str, tuple[float, float, float, tuple[str, ...]]] = {"L": (0.0, 0.0, 0.0, ())}
    for st in p.steps:
        nxt: dict[str, tuple[float, float, float, tuple[str, ...]]] = {}
        for state, (lat, busy, wire, ch) in best.items():
            for to, how, dl, db, dw in _moves(st, state, t, c, hosts, mode):
                cand = (lat + dl, busy + db, wire + dw, ch + (how,))
                if to not in nxt or cand[0] < nxt[to][0]:
                    nxt[to] = cand
        best = nxt
    finals = []
    for state, (lat, busy, wire, ch) in best.items():
        if state != "L":
            g = gather_us(p.result_rows, p.result_width, t, hosts)
            lat, busy = lat + g, busy + g
            wire += _f(hosts) * p.result_rows * p.result_width * ID_BYTES
        finals.append((lat, busy, wire, ch))
    lat, busy, wire, ch = min(finals, key=lambda x: x[0])
    # queries start evenly on every host, so each host's share of a query's compute is 1/H of it
    comp = sum(st.rows for st in p.steps) * c.row_ns / 1000.0 / hosts
    return Projection(p.name, mode, hosts, lat + c.fixed_us, busy + c.fixed_us, wire, ch, comp)


def mix_qps(projs: list[Projection], t: Transport, threads: int) -> float:
    """Throughput of an equal mix of queries: cluster thread capacity over the mean busy time."""
    if not projs:
        return 0.0
    hosts = projs[0].hosts
    cpu = hosts * threads * 1e6 / (sum(p.busy_us for p in projs) / len(projs))
    wire = sum(p.wire_bytes for p in projs) / len(projs)
    if wire > 0 and t.byte_ns > 0:
        return min(cpu, hosts * 1e9 / (wire * t.byte_ns))
    return cpu


def calibrate_row_ns(profiles: dict[str, QueryProfile], measured_ms: dict[str, float],
                     fixed_us: float) -> float:
    """Per-row compute from the 1-process latencies: the least-squares slope of
    latency - fixed_us = row_ns * rows touched over every profiled query (the big,
    non-selective ones dominate it, which is where per-row cost matters)."""
    num = den = 0.0
    for name, p in profiles.items():
        ms = measured_ms.get(name)
        if ms is None:
            continue
        rows = float(sum(st.rows for st in p.steps))
        num += (ms * 1000.0 - fixed_us) * 1000.0 * rows
        den += rows * rows
    return max(num / den, 0.0) if den > 0 else 0.0


# ---------------------------------------------------------------- report
def _fmt(us: float) -> str:
    ms = us / 1000.0
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def projection_table(profiles: dict[str, QueryProfile], transports: list[Transport], c: Compute,
                     hosts: int) -> list[str]:
    """Markdown: projected latency (ms) per query x transport x mode, adaptive's step choices,
    and the selective mix throughput."""
    L = [f"Projected latency (ms) on {hosts} hosts x {c.threads} threads, data as measured "
         f"({next(iter(profiles.values())).triples:,} triples); adaptive's per-step choice "
         "in brackets (I: in place, remote lists read; F: on the owners - forked, an index start, "
         "or local after a fork):", ""]
    head = ["query"] + [f"{t.name} {m}" for t in transports for m in MODES]
    L.append("| " + " | ".join(head) + " |")
    L.append("| --- | " + " | ".join("---:" for _ in head[1:]) + " |")
    sel: dict[str, list[Projection]] = {t.name: [] for t in transports}
    for name, p in profiles.items():
        cells = [name]
        for t in transports:
            for m in MODES:
                pr = project(p, t, c, hosts, m)
                s = _fmt(pr.latency_us)
                if m == "adaptive":
                    s += f" [{''.join(pr.choices)}]"
                    if p.selective:
                        sel[t.name].append(pr)
                cells.append(s)
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    if any(sel.values()):
        L.append("Projected throughput of the selective queries (equal mix, adaptive): " + "; ".join(
            f"{t.name} {mix_qps(sel[t.name], t, c.threads):,.0f} queries/s" for t in transports if sel[t.name])
            + f" (the paper's mix of 6 selective classes peaks at {PAPER_PEAK_QPS:,}/s on 6 hosts).")
        L.append("")
    return L


def paper_table(profiles: dict[str, QueryProfile], t: Transport, c: Compute) -> list[str]:
    """Markdown: Jindou projected on the paper's cluster (6 hosts, 16 threads, LUBM-10240)
    next to Tables 3 and 6."""
    cc = replace(c, threads=PAPER_THREADS)
    L = [f"Projected on the paper's setup ({PAPER_HOSTS} hosts x {PAPER_THREADS} threads, "
         f"{t.name}, profiles scaled to LUBM-10240 = {PAPER_TRIPLES:,} triples) vs the paper's "
         f"Tables 3 and 6 (ms; {PAPER}):", ""]
    L.append("| query | Jindou in-place | Wukong in-place | Jindou fork-join | Wukong fork-join | "
             "Jindou adaptive | Wukong dynamic | TriAD | TriAD-SG |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ("L1", "L2", "L3", "L4", "L5", "L6", "L7"):
        p = profiles.get(name)
        if p is None:
            continue
        sp = p.scaled(PAPER_TRIPLES)
        cells = [name]
        for m in MODES:
            cells.append(_fmt(project(sp, t, cc, PAPER_HOSTS, m).latency_us))
            cells.append(f"{PAPER_TABLE6_MS[m][name]:g}")
        cells += [f"{PAPER_TABLE3_MS['TriAD'][name]:g}", f"{PAPER_TABLE3_MS['TriAD-SG'][name]:g}"]
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append(f"Reading it: Jindou's figures include its fixed {c.fixed_us / 1000:.2f} ms per query (HTTP, parse, "
             "plan; measured on one process), which the paper's do not (emulated clients on the servers, ID "
             "mapping excluded), so selective queries cannot go below it; the non-selective ones assume a "
             f"perfect speedup over {PAPER_HOSTS} x {PAPER_THREADS} threads (the paper's Figure 14 measures "
             "9.9-14.3x for 16 threads) and data that grows like the paper's, so they are a lower bound.")
    L.append("")
    return L


def transport_table(transports: list[Transport], c: Compute) -> list[str]:
    L = ["| transport | in-place reads | read us | call us | post us | ns/byte | remote CPU us/read | source |",
         "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for t in transports:
        L.append(f"| {t.name} | {'one call per host' if t.batched else 'one per vertex'} | {t.read_us:.2f} | "
                 f"{t.call_us:.2f} | {t.post_us:.2f} | {t.byte_ns:.3f} | {t.remote_cpu_us:.2f} | {t.source} |")
    L.append("")
    L.append(f"Jindou compute (1 process): {c.row_ns:.1f} ns per row touched, {c.fixed_us:.0f} us fixed per "
             f"query, {c.dispatch_us:.0f} us per sub-query on a worker; {c.threads} threads per host "
             f"(the paper's machines: {PAPER_CORES} cores, {PAPER_CORES - PAPER_THREADS} reserved for clients).")
    L.append("")
    return L
