"""Basic graph patterns as Wukong graph exploration with full-history pruning.

The history is a :class:`Bindings` table (rows = partial solutions). Each
step takes one triple pattern (order from :mod:`engine.plan.order`, a
:class:`~engine.plan.order.BgpPlan` per snapshot in the plan cache):

* one end bound, the other free: *expand* -- ``GraphIndex.expand`` returns
  for every row the CSR neighbour list of its bound vertex; the history is
  gathered with the row numbers (``np.repeat`` semantics) and the new column
  appended;
* both ends bound: *prune* -- ``GraphIndex.contains`` tests all rows at once
  and the whole history is filtered (full-history pruning: no final join);
* no end bound: a scan of the predicate index starts the exploration.

Variable predicates step through the graph's vertex -> (predicate, neighbour)
edge index in one gather (``_step_any_p``), else once per predicate (each one
vectorized); the small-history program (:class:`SmallBGP`) steps them tuple at
a time over the same index (``_any_step``).
Repeated variables in one pattern (``?x :p ?x``) become an equality filter
right after the step. The graph is any :class:`engine.kv.api.GraphReader`
(an index or a view from :mod:`engine.kv.views`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from itertools import compress
from operator import itemgetter

import numpy as np

from engine.arrays import unique
from engine.errors import RowBudgetExceeded
from engine.exec.bindings import UNBOUND, Bindings, concat
from engine.exec.context import charge_rows, current_budget, holding, table_bytes
from engine.kv import lists, vertex_preds
from engine.plan.order import IN, OUT, bgp_vars, plan, plan_bgp, resolve
from engine.sparql.algebra import TriplePattern

_EMPTY = np.zeros(0, dtype=np.int64)
_PRUNE_BY_EXPAND_DEGREE = 4.0
_FEW_ROWS = 256

# ---------------------------------------------------------------- fork-join
# Wukong section 5.3: a selective step runs in place on the query's own thread;
# a step over a large history is split into chunks run by a shared pool
# (numpy releases the GIL in the gathers and searches). Pool tasks never
# submit tasks themselves, and small queries never wait for the pool, so a
# long query cannot starve short ones (the worker-obliger concern of 5.4).
FORK_ROWS = 262_144
_WORKERS = max(1, min(4, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="jindou-forkjoin")
    return _pool


def _chunks(n: int) -> list[tuple[int, int]]:
    b = np.linspace(0, n, _WORKERS + 1).astype(np.int64).tolist()
    return [(b[i], b[i + 1]) for i in range(_WORKERS) if b[i + 1] > b[i]]


def expand_fj(graph, pid: int, direction: int, vids: np.ndarray):
    """``graph.expand``, fork-join over row chunks when the input is large."""
    n = len(vids)
    if n < FORK_ROWS or _WORKERS < 2:
        return graph.expand(pid, direction, vids)
    parts = _chunks(n)
    futs = [_get_pool().submit(graph.expand, pid, direction, vids[a:b]) for a, b in parts]
    rows, nbrs = [], []
    for (a, _), f in zip(parts, futs, strict=True):
        r, nb = f.result()
        rows.append(np.asarray(r, dtype=np.int64) + a)
        nbrs.append(np.asarray(nb, dtype=np.int64))
    return np.concatenate(rows), np.concatenate(nbrs)


_BOUNDED_CHUNK = 1 << 16


def expand_charged(graph, pid: int, direction: int, vids: np.ndarray, width: int, max_rows: int | None):
    """``expand_fj`` whose output (and the ``width`` columns the caller gathers
    from it) is charged to the query's memory budget and checked against the
    row budget as it grows: a large input is expanded a chunk at a time, so a
    fan-out is refused after one chunk instead of after all of it."""
    n = len(vids)
    budget = current_budget()
    if n <= _BOUNDED_CHUNK or budget is None:
        rows, nbrs = expand_fj(graph, pid, direction, vids)
        total = len(rows)
        if max_rows is not None and total > max_rows:
            raise RowBudgetExceeded(f"exploration of {total} rows exceeds the row budget of {max_rows}")
        charge_rows(total, width + 2, "graph exploration")
        return rows, nbrs
    rows_p, nbrs_p = [], []
    total = 0
    for a in range(0, n, _BOUNDED_CHUNK):
        r, nb = expand_fj(graph, pid, direction, vids[a:a + _BOUNDED_CHUNK])
        total += len(r)
        if max_rows is not None and total > max_rows:
            raise RowBudgetExceeded(f"exploration of more than {max_rows} rows exceeds the row budget")
        # the chunks so far, their concatenation and the gathered columns
        charge_rows(total, width + 4, "graph exploration")
        rows_p.append(np.asarray(r, dtype=np.int64) + a)
        nbrs_p.append(np.asarray(nb, dtype=np.int64))
    if len(rows_p) == 1:
        return rows_p[0], nbrs_p[0]
    return np.concatenate(rows_p), np.concatenate(nbrs_p)


def contains_fj(graph, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
    n = len(s)
    if n < FORK_ROWS or _WORKERS < 2:
        return graph.contains(pid, s, o)
    parts = _chunks(n)
    futs = [_get_pool().submit(graph.contains, pid, s[a:b], o[a:b]) for a, b in parts]
    return np.concatenate([f.result() for f in futs])


def gather(cols: dict, rows: np.ndarray) -> dict:
    """History columns gathered by row numbers (parallel per column when large)."""
    if len(rows) < FORK_ROWS or _WORKERS < 2 or len(cols) < 2:
        return {v: c[rows] for v, c in cols.items()}
    names = list(cols)
    res = list(_get_pool().map(lambda v: cols[v][rows], names))
    return dict(zip(names, res, strict=True))


# ---------------------------------------------------------------- exploration


def _end(pos, cols, n):
    if pos[0] == "c":
        return np.full(n, pos[1], dtype=np.int64)
    return cols[pos[1]]


def _step_const_p(cols: dict, n: int, s, pid: int, o, graph, max_rows):
    """One step with a constant predicate. ``s``/``o`` are resolved positions;
    variables in ``cols`` are bound. Returns (cols, n)."""
    s_b = s[0] == "c" or s[1] in cols
    o_b = o[0] == "c" or o[1] in cols
    if s_b and o_b:
        sa, oa = _end(s, cols, n), _end(o, cols, n)
        st = graph.stats(pid)
        d_out = st.triples / max(1, st.subjects)
        d_in = st.triples / max(1, st.objects)
        if min(d_out, d_in) <= _PRUNE_BY_EXPAND_DEGREE:
            # low-degree side: one CSR gather and a comparison beat a binary search
            if d_out <= d_in:
                rows, nbrs = expand_fj(graph, pid, OUT, sa)
                hit = rows[nbrs == oa[rows]]
            else:
                rows, nbrs = expand_fj(graph, pid, IN, oa)
                hit = rows[nbrs == sa[rows]]
            keep = np.zeros(n, dtype=bool)
            keep[hit] = True
        else:
            keep = contains_fj(graph, pid, sa, oa)
        if keep.all():
            return cols, n
        idx = np.flatnonzero(keep)
        return gather(cols, idx), len(idx)
    if s_b or o_b:
        if s_b:
            src, dst, direction = s, o, OUT
        else:
            src, dst, direction = o, s, IN
        if src[0] == "c" and n > 1:
            rows1, nbrs1 = graph.expand(pid, direction, np.array([src[1]], dtype=np.int64))
            k = len(nbrs1)
            total = n * k
            if max_rows is not None and total > max_rows:
                raise RowBudgetExceeded(f"exploration of {total} rows exceeds the row budget of {max_rows}")
            charge_rows(total, len(cols) + 3, "graph exploration")
            rows = np.repeat(np.arange(n, dtype=np.int64), k)
            nbrs = np.tile(nbrs1, n)
        else:
            rows, nbrs = expand_charged(graph, pid, direction, _end(src, cols, n), len(cols) + 1, max_rows)
        if n == 1:
            out = {v: np.repeat(c, len(rows)) if len(c) == 1 else c[rows] for v, c in cols.items()}
        else:
            out = gather(cols, rows)
        out[dst[1]] = np.asarray(nbrs, dtype=np.int64)
        return out, len(rows)
    # no bound end: scan the predicate and cross with the history
    ss, oo = graph.scan(pid)
    k = len(ss)
    total = n * k
    if max_rows is not None and total > max_rows:
        raise RowBudgetExceeded(f"exploration of {total} rows exceeds the row budget of {max_rows}")
    charge_rows(total, len(cols) + 4, "graph exploration")
    if n == 1:
        out = {v: np.repeat(c, k) for v, c in cols.items()}
    else:
        rows = np.repeat(np.arange(n, dtype=np.int64), k)
        out = {v: c[rows] for v, c in cols.items()}
        ss = np.tile(ss, n)
        oo = np.tile(oo, n)
    out[s[1]] = np.asarray(ss, dtype=np.int64)
    out[o[1]] = np.asarray(oo, dtype=np.int64)
    return out, total


def candidate_predicates(graph, cols: dict, n: int, s, o) -> list[int]:
    """Predicates worth a step for a variable predicate: with few bound rows,
    only those whose predicate index (sorted subjects/objects, Wukong's
    [0|p|dir] index vertex) holds one of the bound vertices."""
    preds = graph.predicates().tolist()
    if n > _FEW_ROWS or len(preds) <= 2:
        return preds
    if s[0] == "c" or s[1] in cols:
        vids, direction = _end(s, cols, n), OUT
    elif o[0] == "c" or o[1] in cols:
        vids, direction = _end(o, cols, n), IN
    else:
        return preds
    vids = unique(vids)
    out = []
    for pid in preds:
        idx = graph.index(pid, direction)
        if len(idx) == 0:
            continue
        pos = np.searchsorted(idx, vids)
        pos[pos >= len(idx)] = len(idx) - 1
        if (idx[pos] == vids).any():
            out.append(pid)
    return out


def _step_any_p(cols: dict, n: int, s, p, o, graph, max_rows):
    """A variable (unbound) predicate's step from a bound end through the graph's
    vertex -> (predicate, neighbour) edge index (:func:`engine.kv.vertex_preds.expand_edges`):
    one gather for all predicates instead of a step per predicate; rows in the
    per-predicate steps' order (predicate ascending, then history row, then
    neighbour). None (the per-predicate steps answer): no bound end, no edge
    index, or a history above ``_BOUNDED_CHUNK`` rows (charged a chunk at a time there)."""
    if s[0] == "c" or s[1] in cols:
        src, dst, direction = s, o, OUT
    elif o[0] == "c" or o[1] in cols:
        src, dst, direction = o, s, IN
    else:
        return None
    if n > _BOUNDED_CHUNK:
        return None
    const = src[0] == "c"

    def check(k: int) -> None:  # (before the edges are gathered: the row and memory budgets)
        total = k * n if const else k
        if max_rows is not None and total > max_rows:
            raise RowBudgetExceeded(f"exploration of {total} rows exceeds the row budget of {max_rows}")
        charge_rows(total, len(cols) + 3, "graph exploration")

    got = vertex_preds.expand_edges(graph, direction, np.array([src[1]], dtype=np.int64) if const else cols[src[1]],
                                    check)
    if got is None:
        return None
    rows, pids, nbrs = got
    if const and n > 1:  # the one vertex's edges for every history row
        k = len(rows)
        rows = np.repeat(np.arange(n, dtype=np.int64), k)
        pids, nbrs = np.tile(pids, n), np.tile(nbrs, n)
    bound_dst = dst[0] == "c" or dst[1] in cols
    if bound_dst:  # both ends bound: the edges that reach the other end
        keep = nbrs == (_end(dst, cols, n)[rows])
        rows, pids = rows[keep], pids[keep]
    total = len(rows)
    if max_rows is not None and total > max_rows:
        raise RowBudgetExceeded(f"exploration of {total} rows exceeds the row budget of {max_rows}")
    charge_rows(total, len(cols) + 3, "graph exploration")
    if n > 1 and total > 1:  # (one row's edges are already by predicate)
        order = np.argsort(pids, kind="stable")
        rows, pids = rows[order], pids[order]
        if not bound_dst:
            nbrs = nbrs[order]
    if n == 1:
        out = {v: np.repeat(c, total) if len(c) == 1 else c[rows] for v, c in cols.items()}
    else:
        out = gather(cols, rows)
    if not bound_dst:
        out[dst[1]] = nbrs
    out[p[1]] = pids
    return out, total


def _step(cols: dict, n: int, t, graph, max_rows):
    s, p, o = t
    if p[0] == "c" and not (s[0] == "v" and o[0] == "v" and s[1] == o[1] and s[1] not in cols):
        # the common step (constant predicate, no variable repeated unbound): no set-up per call
        return _step_const_p(cols, n, s, p[1], o, graph, max_rows)
    # a variable repeated within the triple and not yet bound: bind a temporary,
    # then filter equality
    eq = []
    names = set()
    fixed = []
    for k, pos in enumerate((s, p, o)):
        if pos[0] == "v" and pos[1] not in cols:
            if pos[1] in names:
                tmp = f"#dup{k}"
                eq.append((pos[1], tmp))
                pos = ("v", tmp)
            names.add(pos[1])
        fixed.append(pos)
    s, p, o = fixed
    if p[0] == "c":
        cols, n = _step_const_p(cols, n, s, p[1], o, graph, max_rows)
    elif p[1] in cols:
        pcol = cols[p[1]]
        parts = []
        with holding(0) as held:  # the parts made so far count in the next steps' checks
            for pid in unique(pcol).tolist():
                idx = np.flatnonzero(pcol == pid)
                sub = {v: c[idx] for v, c in cols.items()}
                c2, n2 = _step_const_p(sub, len(idx), s, pid, o, graph, max_rows)
                if n2:
                    parts.append(Bindings(c2, n2))
                    held.add(table_bytes(n2, len(c2)))
        out = concat(parts)  # counts the parts itself
        if out.n == 0:
            names_all = set(cols) | {x[1] for x in (s, o) if x[0] == "v"}
            return {v: _EMPTY for v in names_all}, 0
        cols, n = out.cols, out.n
    elif (got := _step_any_p(cols, n, s, p, o, graph, max_rows)) is not None:
        cols, n = got
    else:
        parts = []
        total = 0
        with holding(0) as held:
            for pid in candidate_predicates(graph, cols, n, s, o):
                c2, n2 = _step_const_p(cols, n, s, pid, o, graph, max_rows)
                if n2:
                    c2 = dict(c2)
                    c2[p[1]] = np.full(n2, pid, dtype=np.int64)
                    parts.append(Bindings(c2, n2))
                    total += n2
                    if max_rows is not None and total > max_rows:
                        raise RowBudgetExceeded(f"exploration exceeds the row budget of {max_rows}")
                    held.add(table_bytes(n2, len(c2)))
        out = concat(parts)  # counts the parts itself
        if out.n == 0:
            names_all = set(cols) | {x[1] for x in (s, p, o) if x[0] == "v"}
            return {v: _EMPTY for v in names_all}, 0
        cols, n = out.cols, out.n
    for var, tmp in eq:
        keep = cols[var] == cols[tmp]
        idx = np.flatnonzero(keep)
        cols = {v: c[idx] for v, c in cols.items() if v != tmp}
        n = len(idx)
    return cols, n


def run_bgp(triples: tuple[TriplePattern, ...], graph, lookup, *, seed: Bindings | None = None,
            max_rows: int | None = None, check=None, plan_cache: dict | None = None,
            cache_key=None, trace: list | None = None, early=(), _pending=None) -> Bindings:
    """Evaluate a BGP over ``graph``. ``seed`` rows (fully bound in the vars the
    BGP shares with it) start the exploration; ``lookup(key) -> id`` maps
    constants to store ids. ``trace`` (EXPLAIN ANALYZE) gets one entry per run:
    (step order, rows after each step) or (None, rows) for the tuple-at-a-time
    program. ``early``: FILTERs over the BGP's solutions, ((variables, mask of a
    Bindings), ...), each applied right after the step that binds its last variable
    (engine/plan/filters.py says when that is equal), at the latest on the result."""
    if early:
        return _run_filtered(triples, graph, lookup, seed, max_rows, check, plan_cache, cache_key, trace, early)
    pending = _pending
    if seed is None:
        seed = Bindings.unit()
    if not triples:
        return seed
    bound = frozenset(v for v in seed.cols if not v.startswith("#"))
    entry = None
    ck = None
    if plan_cache is not None and cache_key is not None:
        # keyed by the identity of the pattern tuple (hashing its triples costs
        # microseconds); the entry keeps the tuple, so the id cannot be reused
        if seed.n <= SMALL_FEW:
            sk = (cache_key, id(triples), tuple(seed.cols), "small")
            hit = plan_cache.get(sk)
            if hit is None or hit[0] is not triples:
                hit = (triples, compile_small(triples, graph, lookup, tuple(seed.cols)))
                plan_cache[sk] = hit
            prog = hit[1]
            if prog is not None and not (prog.starts_big and seed.n == 1):
                res = _run_small(prog, seed, graph, max_rows, check, pending)
                if trace is not None:
                    trace.append((None, res.n))
                return res
        ck = (cache_key, id(triples), bound)
        entry = plan_cache.get(ck)
        if entry is not None and entry.triples is not triples:
            entry = None
    if entry is None:
        entry = plan_bgp(triples, graph, lookup, bound, float(seed.n))
        if ck is not None:
            plan_cache[ck] = entry
    all_vars, resolved, order = entry.all_vars, entry.resolved, entry.order
    if resolved is None or seed.n == 0:
        if trace is not None:
            trace.append((order, [0] * len(order or ())))
        return Bindings.empty(list(seed.cols) + [v for v in all_vars if v not in seed.cols])
    cols = dict(seed.cols)
    n = seed.n
    sizes = [] if trace is not None else None
    cluster = getattr(graph, "cluster", None)
    pos = 0
    while pos < len(order):
        if check is not None:
            check()
        if cluster is not None and n > 1:
            # a distributed store: this step (and the star after it) in place or forked
            from engine.cluster import forkjoin

            run = forkjoin.plan_run(resolved, order, pos, cols)
            if run and forkjoin.choose(graph, resolved, run, n, cols) == "fork-join":
                cols, n = forkjoin.fork_join(graph, resolved, run, cols, n, max_rows, check)
                charge_rows(n, len(cols), "graph exploration")
                pos += len(run)
                if pending and n:
                    cols, n = _apply_early(cols, n, pending, pos < len(order))
                if sizes is not None:
                    sizes.extend([n] * len(run))
                if n == 0:
                    break
                continue
        cols, n = _step(cols, n, resolved[order[pos]], graph, max_rows)
        pos += 1
        if pending and n:
            cols, n = _apply_early(cols, n, pending, pos < len(order))
        if sizes is not None:
            sizes.append(n)
        if n == 0:
            break
    if sizes is not None:
        trace.append((order, sizes + [0] * (len(order) - len(sizes))))
    if n == 0:
        names = list(seed.cols) + [v for v in all_vars if v not in seed.cols]
        return Bindings.empty(names)
    return Bindings(cols, n)


#: how many early FILTERs ran before the last step of a BGP (a spy for the tests)
EARLY_APPLIED = [0]


def _apply_early(cols: dict, n: int, pending: list, before_last: bool) -> tuple[dict, int]:
    """Apply (and take out of ``pending``) the filters whose variables ``cols`` binds."""
    for item in list(pending):
        names, mask_of = item
        if not names <= cols.keys():
            continue
        pending.remove(item)
        keep = np.asarray(mask_of(Bindings(cols, n)), dtype=bool)
        if before_last:
            EARLY_APPLIED[0] += 1
        if keep.all():
            continue
        idx = np.flatnonzero(keep)
        cols = {v: c[idx] for v, c in cols.items()}
        n = len(idx)
        if n == 0:
            break
    return cols, n


def _run_filtered(triples, graph, lookup, seed, max_rows, check, plan_cache, cache_key, trace, early) -> Bindings:
    """run_bgp with FILTERs applied inside the step order (``early``), the ones it could not
    place (the tuple-at-a-time program, a filter over seeded variables only) on its result."""
    pending = list(early)   # (the vectorized steps take out what they applied)
    res = run_bgp(triples, graph, lookup, seed=seed, max_rows=max_rows, check=check,
                  plan_cache=plan_cache, cache_key=cache_key, trace=trace, _pending=pending)
    if pending and res.n:
        cols, n = _apply_early(dict(res.cols), res.n, pending, False)
        if n != res.n:
            res = Bindings(cols, n) if n else Bindings.empty(list(res.cols))
    return res


def seed_ok(seed: Bindings, triples) -> bool:
    """Whether the seed binds the BGP's shared variables in every row."""
    for v in bgp_vars(triples):
        c = seed.cols.get(v)
        if c is not None and (c == UNBOUND).any():
            return False
    return True


# ---------------------------------------------------------------- small-history executor
# A selective BGP (a constant start, a few dozen partial solutions) spends most
# of its time in the fixed cost of numpy calls on tiny arrays (a dozen calls
# per shard and step). For those, the same plan runs tuple at a time over the
# shards' one-vertex lookups (Python ints, lists of tuples). Before a step
# whose tuple-at-a-time cost would exceed the vectorized one (more than
# SMALL_FEW rows to expand or prune one by one, or more than SMALL_ROWS rows
# out of a step) the history is handed to the vectorized steps.

SMALL_FEW = 40
SMALL_ROWS = 512
#: step kinds: a constant predicate's prune / expand / membership test, a filter over the
#: rows (``_TEST``: rows -> rows, see engine.plan.fast_tree), a variable predicate's step
#: through the graph's edge index (``_ANY``)
_PRUNE, _EXPAND, _MEMBER, _TEST, _ANY = 0, 1, 2, 3, 4
_I32_MAX = int(np.iinfo(np.int32).max)
_I64_MAX = int(np.iinfo(np.int64).max)


def _members(nb: np.ndarray, vals: list[int]) -> list[bool]:
    """For each Python int of ``vals``, whether the sorted array ``nb`` holds it."""
    k = len(nb)
    if k <= 32:
        lst = nb.tolist()
        return [v in lst for v in vals]
    if len(vals) <= 4:
        top = _I32_MAX if nb.dtype == np.int32 else _I64_MAX
        cast = nb.dtype.type  # a Python int would make searchsorted convert the whole array
        out = []
        for v in vals:
            if 0 <= v <= top:
                i = nb.searchsorted(cast(v))
                out.append(i < k and nb[i] == v)
            else:
                out.append(False)
        return out
    q = np.array(vals, dtype=np.int64)
    if nb.dtype != np.int64:  # search in the array's own dtype (no converted copy of it)
        q[q > _I32_MAX] = -1
        q = q.astype(nb.dtype)
    pos = nb.searchsorted(q)
    np.minimum(pos, k - 1, out=pos)
    return (nb[pos] == q).tolist()


class SmallBGP:
    """A compiled tuple-at-a-time program for one BGP over one graph index.

    ``slots`` lists the variables in binding order (the tuple layout of a
    row, seed columns first); every step is (kind, function(s), a, b) where
    an end is (True, constant id) or (False, slot). The functions are the
    graph's list lookups (``GraphIndex.local_lists``, :mod:`engine.kv.lists`):
    an expansion's ``nbrs(v, cap)`` (a list, None past ``cap``), a prune's
    ``has(v, o)``; a membership test's (the constant end's numpy lookup from
    ``local_lookup``, the other direction's ``has``); a variable predicate's
    ``pairs_of``;
    ``rtriples`` are the resolved patterns in step order and ``widths[k]``
    the number of slots bound before step k (for the hand-over)."""

    __slots__ = ("slots", "steps", "rtriples", "widths", "empty", "starts_big")

    def __init__(self, slots: list[str], steps: list, rtriples: list, widths: list[int], empty: bool):
        self.slots = slots
        self.steps = steps
        self.rtriples = rtriples
        self.widths = widths
        self.empty = empty
        self.starts_big = False  # set once a run found the first step too big from one row

    def run(self, rows: list[tuple], limit: int) -> tuple[list[tuple], int]:
        """(rows, k): the solutions after the first k steps as tuples in ``slots``
        order, in the order of the vectorized executor; k < len(steps) when the
        rest should run vectorized. ``rows``: the seed rows. (The expansion, the
        usual step, is tested first; from the one empty seed row its rows are the
        neighbours as 1-tuples, made without a Python frame.)"""
        steps = self.steps
        if self.empty:
            return [], len(steps)
        few = SMALL_FEW
        first = few if few < limit else limit  # min(few, limit)
        last = len(steps) - 1
        for k, (kind, fs, a, b) in enumerate(steps):
            if kind == _EXPAND:
                ac, av = a
                n = len(rows)
                if ac:
                    # (at most min(few, limit) rows out, else vectorized from here: the list of a
                    # hub is not made)
                    nbl = fs(av, first // n if n > 1 else first)
                    if nbl is None:  # many rows out: vectorized from here
                        if k == 0 and n == 1 and limit >= few:
                            self.starts_big = True  # not selective: callers go vectorized directly
                        return rows, k
                    if n == 1 and not rows[0]:  # the empty seed row: the neighbours as 1-tuples
                        rows = list(zip(nbl))
                    else:
                        rows = [r + (x,) for r in rows for x in nbl]
                else:
                    if n > few:
                        return rows, k
                    out = []
                    append = out.append
                    for r in rows:
                        nbl = fs(r[av], limit - len(out))
                        if nbl is None:  # more than limit rows out
                            return rows, k
                        for x in nbl:
                            append(r + (x,))
                    rows = out
                if not rows:
                    return rows, len(steps)
                continue
            if kind == _TEST:  # a filter over the rows so far (all its variables are bound)
                rows = fs(rows)
                if not rows:
                    return rows, len(steps)
                continue
            ac, av = a
            if kind == _ANY:
                got = _any_step(rows, fs, ac, av, b, limit if k == last else first, limit)
                if got is None:  # many rows: vectorized from here
                    if k == 0 and len(rows) == 1 and limit >= few:
                        self.starts_big = True
                    return rows, k
                rows = got
                if not rows:
                    return rows, len(steps)
                continue
            if kind == _MEMBER:  # the var end (slot b) in the constant end's list
                if len(rows) > limit:
                    return rows, k
                if len(rows) <= 8:  # a few rows: their own (usually short) lists
                    fv = fs[1]
                    rows = [r for r in rows if fv(r[b], av)]
                else:
                    rows = list(compress(rows, _members(fs[0](av), [r[b] for r in rows])))
                if not rows:
                    return rows, len(steps)
                continue
            # _PRUNE
            bc, bv = b
            if ac and bc:
                if not fs(av, bv):
                    return [], len(steps)
                continue
            if len(rows) > few:
                return rows, k
            out = []
            for r in rows:
                x = av if ac else r[av]
                if fs(x, bv if bc else r[bv]):
                    out.append(r)
            rows = out
            if not rows:
                return rows, len(steps)
        return rows, len(steps)

    def finish(self, rows: list[tuple], k: int, graph, max_rows, check=None) -> Bindings:
        """Bindings of the rows after step k, running the remaining steps vectorized."""
        width = self.widths[k] if k < len(self.steps) else len(self.slots)
        n = len(rows)
        if n == 0:
            return Bindings({v: _EMPTY for v in self.slots}, 0)
        if width:
            cols = {v: np.array(c, dtype=np.int64) for v, c in zip(self.slots, zip(*rows, strict=True),
                                                                    strict=False)}
        else:
            cols = {}
        for rt in self.rtriples[k:]:
            if rt is None:  # a filter step: the operators above the BGP apply the filter
                continue
            if check is not None:
                check()
            cols, n = _step(cols, n, rt, graph, max_rows)
            if n == 0:
                return Bindings({v: _EMPTY for v in self.slots}, 0)
        return Bindings(cols, n)


def _any_step(rows: list[tuple], pairs_of, ac: bool, av: int, b, first_max: int, limit: int) -> list[tuple] | None:
    """A variable predicate's step tuple at a time: each row's source vertex's edges
    (``pairs_of(v, cap)``: :meth:`engine.kv.vertex_preds.VertexEdges.pairs_of`,
    (pid, neighbour) ascending) extend or filter it. ``b`` = (the other end: (is
    constant, id or slot) or None when it is new, the predicate's slot or None when
    it is new); new slots are appended predicate first. Rows come out as the
    vectorized step orders them (``_step_any_p``: by predicate, then history row,
    then neighbour). None: too many rows (more than ``first_max`` from a constant
    source and one row, more than SMALL_FEW from one and several rows, a history
    above SMALL_FEW rows, more than ``limit`` out): the caller hands the step to
    the vectorized executor."""
    dst, pe = b
    n = len(rows)
    if ac:
        # (the one vertex's edges for every row: past SMALL_FEW rows in all, the vectorized
        # step's repeat and tile beat building the cross product tuple by tuple)
        pairs = pairs_of(av, first_max if n == 1 else min(first_max, SMALL_FEW) // max(1, n))
        if pairs is None:
            return None
    elif n > SMALL_FEW:
        return None
    out: list[tuple] = []
    for r in rows:
        if not ac:
            pairs = pairs_of(r[av], limit)
            if pairs is None:
                return None
        if not pairs:
            continue
        if dst is None:
            if pe is None:
                out += [r + e for e in pairs]
            else:
                want = r[pe]
                out += [r + (x,) for q, x in pairs if q == want]
        else:
            dc, dv = dst
            want = dv if dc else r[dv]
            if pe is None:
                out += [r + (q,) for q, x in pairs if x == want]
            elif (r[pe], want) in pairs:
                out.append(r)
        if len(out) > limit:
            return None
    if n > 1 and len(out) > 1:  # predicate-major, stable: the vectorized step's order
        out.sort(key=itemgetter(len(rows[0]) if pe is None else pe))
    return out


class _NotLocal(Exception):
    pass


def with_output_slots(prog, names):
    """(program, output slots) of a compiled fast path: ``names``' positions among
    ``prog``'s slots (None for a name it does not bind; ``()`` when ``names`` is None),
    or None when there is no program."""
    if prog is None:
        return None
    if names is None:
        return prog, ()
    pos = {v: i for i, v in enumerate(prog.slots)}
    return prog, tuple(pos.get(v) for v in names)


def compile_small(triples: tuple[TriplePattern, ...], graph, lookup, seed_vars: tuple[str, ...] = (),
                  tests: tuple = ()) -> SmallBGP | None:
    """The tuple-at-a-time program of a BGP whose every step (in the planner's
    order) has a bound end; None when the BGP does not qualify (a scan, a variable
    repeated within a pattern before it is bound, a graph without in-process
    ``local_lookup``: a view or remote shards; a variable predicate on a graph
    without its edge index in that direction). ``seed_vars``: the columns of the
    seed rows (bound in every row where the BGP shares them). ``tests``: filters
    as (their variables, slots -> (rows -> rows)), each run right after the step
    that binds the last of its variables (their variables must be the BGP's)."""
    if not triples:
        return None
    if graph.local_lookup(0, OUT) is None:  # not all in-process (or a view)
        return None
    resolved = resolve(triples, lookup)
    all_vars = bgp_vars(triples)
    if resolved is None:  # a constant the store does not hold: no solution
        return SmallBGP(list(seed_vars) + [v for v in all_vars if v not in seed_vars], [], [], [], True)
    bound = {v for v in seed_vars if v in all_vars}
    order = plan(resolved, graph, bound, 1.0)
    slots: dict[str, int] = {v: i for i, v in enumerate(seed_vars)}
    steps = []
    widths = []
    lookups: dict[tuple[int, int], object] = {}

    def fns(pid: int, direction: int):
        f = lookups.get((pid, direction))
        if f is None:
            f = graph.local_lookup(pid, direction)
            if f is None:
                raise _NotLocal
            lookups[pid, direction] = f
        return f

    def end(pos):
        return (True, pos[1]) if pos[0] == "c" else (False, slots[pos[1]])

    list_fns: dict[tuple[int, int], tuple] = {}

    def lst(pid: int, direction: int):
        """(nbrs, has) of (pid, direction): the graph's list lookups, or over its numpy ones."""
        f = list_fns.get((pid, direction))
        if f is None:
            ll = getattr(graph, "local_lists", None)
            f = ll(pid, direction) if ll is not None else None
            if f is None:
                f = lists.wrap(fns(pid, direction))
            list_fns[pid, direction] = f
        return f

    edge_fns: dict[int, object] = {}

    def edges(direction: int):
        f = edge_fns.get(direction)
        if f is None:
            e = vertex_preds.cached_edges(graph, direction)
            if e is None:  # (not built: the vectorized steps answer)
                raise _NotLocal
            f = edge_fns[direction] = e.pairs_of
        return f

    pending = list(tests)
    rsteps = []

    def place_tests():
        for t in list(pending):
            if all(v in slots for v in t[0]):
                pending.remove(t)
                widths.append(len(slots))
                steps.append((_TEST, t[1](dict(slots)), None, None))
                rsteps.append(None)

    try:
        place_tests()  # (filters over the seed's variables alone)
        for i in order:
            s, p, o = resolved[i]
            rsteps.append(resolved[i])
            s_b = s[0] == "c" or s[1] in slots
            o_b = o[0] == "c" or o[1] in slots
            widths.append(len(slots))
            if p[0] == "v":
                pn = p[1]
                pe = slots.get(pn)
                if pe is None and ((s[0] == "v" and s[1] == pn) or (o[0] == "v" and o[1] == pn)):
                    return None  # (a predicate variable repeated in its pattern, unbound)
                if s_b and o_b:
                    steps.append((_ANY, edges(OUT), end(s), (end(o), pe)))
                elif s_b or o_b:
                    src, dst, direction = (s, o, OUT) if s_b else (o, s, IN)
                    steps.append((_ANY, edges(direction), end(src), (None, pe)))
                else:
                    return None  # a scan: not selective
                if pe is None:
                    slots[pn] = len(slots)
                if not (s_b and o_b):
                    slots[dst[1]] = len(slots)
                place_tests()
                continue
            pid = p[1]
            if s_b and o_b:
                st = graph.stats(pid)
                d_out = st.triples / max(1, st.subjects)
                d_in = st.triples / max(1, st.objects)
                if (s[0] == "c") != (o[0] == "c"):
                    # one constant end: one lookup of its (sorted) list, tested for every row
                    if s[0] == "c":
                        steps.append((_MEMBER, (fns(pid, OUT), lst(pid, IN)[1]), end(s), slots[o[1]]))
                    else:
                        steps.append((_MEMBER, (fns(pid, IN), lst(pid, OUT)[1]), end(o), slots[s[1]]))
                elif d_out <= d_in:
                    steps.append((_PRUNE, lst(pid, OUT)[1], end(s), end(o)))
                else:
                    steps.append((_PRUNE, lst(pid, IN)[1], end(o), end(s)))
            elif s_b or o_b:
                src, dst, direction = (s, o, OUT) if s_b else (o, s, IN)
                steps.append((_EXPAND, lst(pid, direction)[0], end(src), None))
                slots[dst[1]] = len(slots)
            else:
                return None  # a scan: not selective
            place_tests()
    except _NotLocal:  # some shard answers by batched calls only
        return None
    if pending:  # (a filter's variable the BGP does not bind: the caller must not ask)
        return None
    return SmallBGP(list(slots), steps, rsteps, widths, False)


def seed_rows(seed: Bindings) -> list[tuple]:
    if not seed.cols:
        return [()] * seed.n
    return list(zip(*[c.tolist() for c in seed.cols.values()], strict=True))


def _run_small(prog: SmallBGP, seed: Bindings, graph, max_rows, check, pending=None) -> Bindings:
    limit = SMALL_ROWS if max_rows is None else min(max_rows, SMALL_ROWS)
    rows, k = prog.run(seed_rows(seed), limit)
    last = len(prog.rtriples)
    if not pending or k >= last or not rows:
        return prog.finish(rows, k, graph, max_rows, check)
    # handed back before step k with early FILTERs (run_bgp's ``early``): the rows as columns,
    # then the remaining steps vectorized as ``finish`` runs them, each filter after the step
    # that binds its last variable
    res = prog.finish(rows, last, graph, max_rows, check)
    cols, n = _apply_early(dict(res.cols), res.n, pending, True)
    for i in range(k, last):
        rt = prog.rtriples[i]
        if rt is None or n == 0:
            continue
        if check is not None:
            check()
        cols, n = _step(cols, n, rt, graph, max_rows)
        if n and pending:
            cols, n = _apply_early(cols, n, pending, i + 1 < last)
    if n == 0:
        return Bindings({v: _EMPTY for v in prog.slots}, 0)
    return Bindings(cols, n)
