"""In-place or fork-join, per exploration step on a cluster (Wukong section 5.3).

*In-place*: the serving process asks the owners for the neighbour lists of the
frontier's vertices (one batched read per worker and step -- with the shared
memory transport a plain memory read, the worker's CPU untouched) and extends
the history itself. *Fork-join*: the history rows are split by the owner of
the step's source vertex and shipped, whole, to the owners
(:func:`run_local_steps` runs there); each worker runs the step -- and the
following steps that start from the same vertex, all local to it -- and sends
back its extended rows. Rows carry their full history, so the fork point just
concatenates the parts: no final join.

The choice (:func:`choose`) compares the two costs from the number of remote
operations: in-place pays a round trip for every step of the run (the owners
are asked at once) plus the neighbour lists' bytes, and does the exploration's
CPU here; fork-join pays one round trip for the whole run (per chunk) plus the
history's bytes both ways, and divides the CPU among the workers. Per-operation costs are those measured by
``python -m bench cluster`` on each transport (:data:`COSTS`; docs/BENCHMARKS.md).
``--cluster-exec in-place|fork-join`` forces one.

Large forks go out in chunks of :data:`CHUNK_ROWS` rows, one exchange at a
time per worker, so a small query's calls interleave with a big one's (a
worker never works through one huge request while others wait: the
worker-obliger concern of Wukong section 5.4).
"""

from __future__ import annotations

import contextvars
import os
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from engine.errors import RowBudgetExceeded
from engine.kv import partition
from engine.kv.api import IN, OUT

__all__ = ["COSTS", "TransportCosts", "choose", "plan_run", "fork_join", "run_local_steps", "CHUNK_ROWS"]

CHUNK_ROWS = 65_536


@dataclass(frozen=True)
class TransportCosts:
    """Per-operation costs of one transport (microseconds, nanoseconds per byte)."""

    call_us: float       # one batched call to one worker (round trip)
    byte_ns: float       # moving one byte between the processes
    #: the reads of an in-place step are plain memory reads here (no call, no copy)
    local_reads: bool = False


#: measured on the 2-core CI machine (python -m bench cluster; docs/BENCHMARKS.md)
COSTS = {
    "shm": TransportCosts(call_us=0.0, byte_ns=0.0, local_reads=True),
    "flight": TransportCosts(call_us=700.0, byte_ns=3.4),
    "rdma": TransportCosts(call_us=2.0, byte_ns=0.1),
}
#: vectorized exploration CPU: per probed vertex, per gathered history cell
_PROBE_NS = 25.0
_GATHER_NS = 2.0
_CORES = max(1, os.cpu_count() or 1)
#: building and reading the history tables and the threads of one fork (per round)
_FORK_FIXED_US = 100.0


def _src(t, cols: dict) -> tuple | None:
    """The step's source variable (bound, a column) and its direction, or None when the
    step does not start from a bound variable (constant source, scan, variable predicate)."""
    s, p, o = t
    if p[0] != "c":
        return None
    if s[0] == "v" and s[1] in cols:
        return s[1], OUT
    if o[0] == "v" and o[1] in cols and not (s[0] == "c"):
        return o[1], IN
    return None


def plan_run(resolved, order: list[int], pos: int, cols: dict) -> list[int]:
    """The steps from ``order[pos]`` that start from the same bound vertex (a star
    around it): fork-join runs them on its owner in one trip. Empty if step
    ``order[pos]`` has no bound variable source."""
    first = _src(resolved[order[pos]], cols)
    if first is None:
        return []
    var = first[0]
    run = [order[pos]]
    bound = set(cols)
    for i in order[pos + 1:]:
        s, p, o = resolved[i]
        if p[0] != "c" or not ((s[0] == "v" and s[1] == var) or (o[0] == "v" and o[1] == var)):
            break
        if s[0] == "v" and o[0] == "v" and s[1] == o[1]:
            break
        run.append(i)
    for i in run:
        for x in (resolved[i][0], resolved[i][2]):
            if x[0] == "v":
                bound.add(x[1])
    return run


def choose(graph, resolved, run: list[int], n: int, cols) -> str:
    """``"in-place"`` or ``"fork-join"`` for a run of steps over ``n`` history rows with
    columns ``cols`` (names; see module docstring for the two costs)."""
    cluster = graph.cluster
    mode = cluster.exec_mode
    if mode != "adaptive":
        return mode
    workers = cluster.n_shards
    costs = COSTS.get(cluster.transport_kind, COSTS["flight"])
    fork = COSTS["flight"] if costs.local_reads else costs  # histories travel by Flight (or RDMA)
    bound = set(cols)
    width = len(bound)
    rows = float(n)
    inplace = cpu_total = 0.0
    for i in run:
        s, p, o = resolved[i]
        s_b = s[0] == "c" or s[1] in bound
        o_b = o[0] == "c" or o[1] in bound
        st = graph.stats(int(p[1]))
        if s_b and o_b:
            out_rows = rows  # a prune: at most as many rows
        else:
            out_rows = rows * st.triples / max(1, st.subjects if s_b else st.objects)
        cpu = (rows * _PROBE_NS + out_rows * (width + 1) * _GATHER_NS) / 1e3
        cpu_total += cpu
        inplace += cpu
        if not costs.local_reads:  # one round trip (the owners are asked at once) and the lists
            inplace += costs.call_us + (rows * 8 + out_rows * 16) * costs.byte_ns / 1e3
        for x in (s, o):
            if x[0] == "v" and x[1] not in bound:
                bound.add(x[1])
                width += 1
        rows = out_rows
    rounds = max(1, -(-n // (CHUNK_ROWS * workers)))  # each worker takes its chunks one after another
    par = min(workers, _CORES)
    forkjoin = cpu_total / par + rounds * (fork.call_us + _FORK_FIXED_US) + (n * len(cols) + rows * width) * 8 * fork.byte_ns / 1e3
    return "fork-join" if forkjoin < inplace else "in-place"


def fork_join(graph, resolved, run: list[int], cols: dict, n: int, max_rows: int | None, check=None
              ) -> tuple[dict, int]:
    """Run the steps ``run`` on the workers owning the source vertices; the extended
    histories, concatenated."""
    cluster = graph.cluster
    var = _src(resolved[run[0]], cols)[0]
    owners = partition.owners(np.asarray(cols[var], dtype=np.int64), cluster.n_shards)
    steps = [[list(resolved[i][0]), int(resolved[i][1][1]), list(resolved[i][2])] for i in run]
    names = list(cols)
    results: list = [None] * cluster.n_shards
    errors: list = []

    def one(k: int) -> None:
        try:
            sel = np.flatnonzero(owners == k)
            if not len(sel):
                results[k] = []
                return
            worker = cluster.workers[k]
            header = {"op": "step", "sn": graph.cluster_sn, "g": graph.cluster_gid, "src": var, "steps": steps,
                      "max_rows": max_rows}
            parts = []
            for a in range(0, len(sel), CHUNK_ROWS):
                if check is not None:
                    check()
                idx = sel[a:a + CHUNK_ROWS]
                table = pa.table({v: pa.array(np.ascontiguousarray(cols[v][idx])) for v in names})
                parts.append(worker.client.exchange(header, table))
            results[k] = parts
        except BaseException as e:  # noqa: BLE001 - re-raised on the query's thread
            errors.append(e)

    # each thread in a copy of this context: the query's deadline bounds its calls
    threads = [threading.Thread(target=contextvars.copy_context().run, args=(one, k), daemon=True)
               for k in range(cluster.n_shards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    parts = [p for res in results for p in res if p and len(next(iter(p.values()), ()))]
    if not parts:
        all_names = set(names)
        for i in run:
            for x in (resolved[i][0], resolved[i][2]):
                if x[0] == "v":
                    all_names.add(x[1])
        return {v: np.zeros(0, dtype=np.int64) for v in all_names}, 0
    out_names = list(parts[0])
    out = {v: np.concatenate([p[v] for p in parts]) for v in out_names}
    total = len(out[out_names[0]])
    if max_rows is not None and total > max_rows:
        raise RowBudgetExceeded(f"exploration of {total} rows exceeds the row budget of {max_rows}")
    return out, total


# ---------------------------------------------------------------- worker side
def _end(pos, cols, n):
    if pos[0] == "c":
        return np.full(n, pos[1], dtype=np.int64)
    return cols[pos[1]]


def run_local_steps(g, h: dict, cols: dict) -> pa.Table:
    """On a worker: the steps of a fork-join run over history rows whose source
    vertex (``h["src"]``) this worker owns. Only local reads: an expansion starts
    from the source, a prune tests the edge from the source's side."""
    src = h["src"]
    max_rows = h.get("max_rows")
    n = len(next(iter(cols.values()))) if cols else 0
    for s, pid, o in h["steps"]:
        if n == 0:
            break
        s, o = tuple(s), tuple(o)
        s_b = s[0] == "c" or s[1] in cols
        o_b = o[0] == "c" or o[1] in cols
        if s_b and o_b:
            sa, oa = _end(s, cols, n), _end(o, cols, n)
            if s[0] == "v" and s[1] == src:
                keep = g.contains(pid, sa, oa)
            else:  # the source is the object: its IN list holds the subjects
                rows, nbrs = g.expand(pid, IN, oa)
                keep = np.zeros(n, dtype=bool)
                keep[rows[nbrs == sa[rows]]] = True
            idx = np.flatnonzero(keep)
            cols = {v: c[idx] for v, c in cols.items()}
            n = len(idx)
            continue
        if s_b:
            rows, nbrs = g.expand(pid, OUT, _end(s, cols, n))
            dst = o[1]
        else:
            rows, nbrs = g.expand(pid, IN, _end(o, cols, n))
            dst = s[1]
        if max_rows is not None and len(rows) > max_rows:
            raise RowBudgetExceeded(f"exploration of {len(rows)} rows exceeds the row budget of {max_rows}")
        cols = {v: c[rows] for v, c in cols.items()}
        cols[dst] = np.asarray(nbrs, dtype=np.int64)
        n = len(rows)
    return pa.table({v: pa.array(np.ascontiguousarray(c, dtype=np.int64)) for v, c in cols.items()})
