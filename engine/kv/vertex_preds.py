"""Vertex indexes of one graph, per direction: vertex -> predicates, and vertex ->
(predicate, neighbour) edges.

A lookup of every triple of one vertex with a variable predicate
(``<s> ?p ?o``, ``?s ?p <o>``, DESCRIBE, a variable predicate's step of the
general evaluator) otherwise probes each predicate's adjacency for the vertex,
whether or not the vertex has it: a dozen probes on LUBM, and graphs with
hundreds of predicates cannot afford it at all.

* :class:`VertexEdges` (the edge index): every triple by vertex in one CSR of
  packed ``pid << 32 | neighbour``, so a vertex's rows are one slice. A store's
  graphs always have it: the store's empty graph is seeded with empty ones
  (:func:`seed_empty`), each commit's new graph gets its predecessor's with a
  pending patch (:func:`carry`, :class:`_Pending`) that the store's commit
  resolves (:func:`settle`: the touched vertices' new lists in a small overlay
  over the shared base, or a fresh build in the background past a size limit),
  a store opened from disk builds them (:func:`prime`), a query process of
  ``--processes`` patches the last version's (:func:`follow`). Other graphs (a
  window's, a transient store's) build it lazily when their lookups have paid
  for it (:func:`vertex_edges`, rent or buy in :mod:`engine.plan.point`).
* :class:`VertexPreds` (the predicates index, Wukong's ``[v|0|dir]`` key): the
  ascending predicate ids of each vertex, built lazily (the fallback when a
  graph has no edge index) from the predicates' key arrays with one run-merging
  sort of packed ``(vertex, pid)`` keys (~15 ms for 760k pairs).

Graph indexes are immutable (a commit makes a new object,
:meth:`engine.kv.graph.GraphIndex.apply`), so both are cached per graph object
(weakly: they go with the snapshot) and stay exact across writes. Builds are
bounded by a byte budget on their transient and final arrays; a graph above it
gets none (None: the caller keeps its general path). They read only the
GraphReader calls (or the shards' own arrays when the graph has shards in this
process, which avoids the graph's cached int64 copies).
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

from engine.arrays import unique
from engine.kv import lists
from engine.kv.api import IN, OUT
from engine.kv.shard import CSR, csr_from_sorted_pairs, csr_of

__all__ = ["MAX_BYTES", "VertexEdges", "VertexPreds", "cached", "cached_edges", "carry", "estimated_pairs",
           "expand_edges", "follow", "index_bytes", "pending_edges", "prime", "seed_empty", "settle", "transfer", "wait_builds", "vertex_edges", "vertex_predicates"]

#: the byte budget of one index's build (transient packed keys and their sort)
#: and result; a graph needing more gets no index
MAX_BYTES = 256 << 20
#: bytes per (vertex, predicate) pair while building: int64 vertex and pid
#: columns, their packed keys, the sort's copy, the final int32/int64 columns
_BUILD_BYTES_PER_PAIR = 40

_I32_MAX = int(np.iinfo(np.int32).max)
_LOW32 = np.uint64(0xFFFFFFFF)
_NONE = object()  # cached: no index for this graph and direction (above budget, no index reads)

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class VertexPreds:
    """The predicates of each vertex in one direction (OUT: as subject, IN: as object)."""

    __slots__ = ("csr", "preds_of", "pairs")

    def __init__(self, csr: CSR):
        self.csr = csr
        #: ``v -> sorted predicate ids`` (a view; empty for a vertex without any), one
        #: Python-int vertex at a time, scalar operations only (CSR's span/bucket table)
        self.preds_of = csr.lookup(1)
        self.pairs = len(csr)

    @property
    def nbytes(self) -> int:
        return self.csr.nbytes


def _key_arrays(graph, direction: int) -> tuple[list[np.ndarray], list[int]]:
    """The non-empty key arrays (vertices having the predicate) and their pids."""
    shards = getattr(graph, "shards", None)
    keys: list[np.ndarray] = []
    pids: list[int] = []
    for pid in graph.predicates().tolist():
        parts = [sh.index(pid, direction) for sh in shards] if shards is not None else [
            graph.index(pid, direction)]
        for k in parts:
            if len(k):
                keys.append(k)
                pids.append(pid)
    return keys, pids


def estimated_pairs(graph, direction: int) -> int:
    """Distinct (vertex, predicate) pairs of ``direction`` from the predicates'
    statistics (subjects for OUT, objects for IN): the index's size, no arrays read."""
    stats = graph.stats
    if direction == OUT:
        return int(sum(stats(p).subjects for p in graph.predicates().tolist()))
    return int(sum(stats(p).objects for p in graph.predicates().tolist()))


def build(graph, direction: int, budget: int | None = None) -> VertexPreds | None:
    """The index of ``graph`` in ``direction``, or None above ``budget`` bytes
    (default :data:`MAX_BYTES`)."""
    if budget is None:
        budget = MAX_BYTES
    keys, pids = _key_arrays(graph, direction)
    counts = [len(k) for k in keys]
    total = sum(counts)
    if total * _BUILD_BYTES_PER_PAIR > budget:
        return None
    if total == 0:
        return VertexPreds(csr_from_sorted_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), np.int32))
    v = np.concatenate(keys).astype(np.uint64)
    p = np.repeat(np.asarray(pids, dtype=np.uint64), counts)
    # Each predicate's keys are sorted, so the packed keys are a few sorted runs:
    # the stable sort (a run-merging timsort) takes ~1/6 of a quicksort's time.
    packed = np.sort((v << np.uint64(32)) | p, kind="stable")
    if len(packed) > 1:  # (a vertex on two shards' keys of one predicate: once)
        keep = np.empty(len(packed), dtype=bool)
        keep[0] = True
        np.not_equal(packed[1:], packed[:-1], out=keep[1:])
        if not keep.all():
            packed = packed[keep]
    a = (packed >> np.uint64(32)).astype(np.int64)
    b = (packed & _LOW32).astype(np.int64)
    mx = max(int(a[-1]), int(b.max()))
    return VertexPreds(csr_from_sorted_pairs(a, b, np.int32 if mx < _I32_MAX else np.int64))


def cached(graph, direction: int) -> VertexPreds | None:
    """The index already built for ``graph`` (None: not built, or none possible)."""
    per = _CACHE.get(graph)
    if per is None:
        return None
    hit = per.get(direction)
    return None if hit is None or hit is _NONE else hit


def vertex_predicates(graph, direction: int, budget: int | None = None) -> VertexPreds | None:
    """The index of ``graph`` in ``direction``, built on first call and kept while
    the graph object lives; None when it would pass ``budget`` (remembered) or the
    graph cannot be weakly referenced (then it is built but not kept: a view)."""
    per = _CACHE.get(graph)
    if per is not None:
        hit = per.get(direction)
        if hit is not None:
            return None if hit is _NONE else hit
    with _LOCK:  # one build per graph and direction; concurrent askers wait for it
        per = _CACHE.get(graph)
        hit = per.get(direction) if per is not None else None
        if hit is not None:
            return None if hit is _NONE else hit
        idx = build(graph, direction, budget)
        try:
            if per is None:
                per = _CACHE[graph] = {}
            per[direction] = _NONE if idx is None else idx
        except TypeError:  # not weakly referenceable: answer without keeping
            pass
        return idx


# --------------------------------------------------------------------------
# Vertex -> (predicate, neighbour) edges: a point lookup in one slice
# --------------------------------------------------------------------------

def _flat_of(csr: CSR, overlay, edges_of):
    """``(v, cap) -> flat int32 halves | None`` of the base CSR and the overlay's."""
    base = lists.flat_lookup(csr)
    own = lists.flat_lookup(overlay.csr) if overlay is not None else None
    if base is None or (overlay is not None and own is None):
        def by_numpy(v: int, cap: int) -> list | None:
            packed = edges_of(v)
            return None if len(packed) > cap else packed.view(np.int32).tolist()
        return by_numpy
    if overlay is None:
        return base
    touched = overlay.members

    def flat_of(v: int, cap: int) -> list | None:
        return own(v, cap) if v in touched else base(v, cap)
    return flat_of


#: bytes per triple while building the edge index: int64 vertex and packed
#: columns, the sort's order and gathered copies, the final packed column
_EDGE_BUILD_BYTES_PER_TRIPLE = 48
#: the (little-endian) int32 halves of a packed edge: (neighbour, predicate)
EDGE_NB, EDGE_PID = (0, 1) if sys.byteorder == "little" else (1, 0)


#: the edge lists :meth:`VertexEdges.pairs_of` keeps as tuples: vertices of at most this
#: many edges, this many edges in all per index (~100 bytes an edge)
PAIRS_VERTEX_MAX = 64
PAIRS_KEPT = 1 << 14


class VertexEdges:
    """Every triple of one graph by vertex, in one direction (OUT: subject ->
    (predicate, object), IN: object -> (predicate, subject)): a CSR whose
    neighbour lists are packed ``pid << 32 | neighbour`` int64s, so a vertex's
    edges are one view, sorted (predicate ascending, then neighbour: the order
    of a point lookup's rows), and ``edges_of(v).view(np.int32).tolist()`` reads
    them as a flat list of (neighbour, predicate) halves (:data:`EDGE_NB`,
    :data:`EDGE_PID`): a point lookup answered with one lookup and one conversion
    instead of a lookup per predicate. Built only when every id fits in 31 bits.

    A commit's graph gets its index from its predecessor's (:func:`carry`): the
    base CSR is shared and the vertices the commits since the last full build
    touched are in a small ``overlay`` (:class:`_Overlay`, their whole new edge
    lists), so a small write costs a few arrays the size of what it touched, not
    a rebuild; past :func:`_overlay_limit` edges the next commit builds afresh."""

    __slots__ = ("csr", "edges_of", "flat_of", "triples", "overlay", "hidden", "_pairs")

    def __init__(self, csr: CSR, overlay: _Overlay | None = None, hidden: int = 0):
        self.csr = csr
        self.overlay = overlay
        #: (edges kept, vertex -> its edges as (pid, neighbour) tuples): see pairs_of
        self._pairs: tuple[int, dict] = (0, {})
        #: edges of the base CSR that belong to overlay vertices (superseded by it)
        self.hidden = hidden
        base = csr.lookup(1)
        if overlay is None:
            #: ``v -> packed edges`` (a view; empty for a vertex without any), one Python-int
            #: vertex at a time, scalar operations only
            self.edges_of = base
        else:
            touched = overlay.members
            own = overlay.csr.lookup(1)

            def edges_of(v: int) -> np.ndarray:
                return own(v) if v in touched else base(v)
            self.edges_of = edges_of
        #: ``(v, cap) -> edges_of(v).view(np.int32).tolist()`` read through memoryviews
        #: (:func:`engine.kv.lists.flat_lookup`), None past ``cap`` edges (nothing made)
        self.flat_of = _flat_of(csr, overlay, self.edges_of)
        self.triples = len(csr) - hidden + (len(overlay.csr) if overlay is not None else 0)

    @property
    def nbytes(self) -> int:
        return self.csr.nbytes + (self.overlay.nbytes if self.overlay is not None else 0)

    def flat(self, v: int, cap: int) -> list | None:
        """The int32 halves of ``v``'s packed edges as one flat list, (neighbour, pid) per
        edge (:data:`EDGE_NB`, :data:`EDGE_PID`), ascending; None past ``cap`` edges."""
        return self.flat_of(v, cap)

    def pairs_of(self, v: int, cap: int) -> list | None:
        """The edges of vertex ``v`` as ``(pid, neighbour)`` tuples, ascending; None when it
        has more than ``cap`` (nothing converted). The tuple-at-a-time steps of selective
        queries meet the same vertices again and again (an entity's department, courses,
        classes): the lists of up to PAIRS_VERTEX_MAX edges are kept, PAIRS_KEPT edges in
        all (then the table is replaced, never cleared in place: other threads read it);
        the index is immutable, so a kept list stays exact."""
        kept, table = self._pairs
        hit = table.get(v)
        if hit is not None:
            return hit if len(hit) <= cap else None
        flat = self.flat_of(v, cap)
        if flat is None:
            return None
        k = len(flat) >> 1
        hit = list(zip(flat[EDGE_PID::2], flat[EDGE_NB::2], strict=True))
        if k <= PAIRS_VERTEX_MAX:
            if kept + k > PAIRS_KEPT:
                kept, table = 0, {}
            table[v] = hit
            self._pairs = (kept + k, table)
        return hit

    def current(self, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(vertex, packed edge) int64 pairs of the sorted unique int64 ``vids`` as this
        index holds them (overlay first, else base), sorted by (vertex, edge)."""
        ov = self.overlay
        if ov is None:
            rows, pk = _csr_expand(self.csr, vids)
            return vids[rows], pk
        inov = _member(ov.csr.keys.astype(np.int64, copy=False), vids)
        mine, rest = vids[inov], vids[~inov]
        r1, pk1 = _csr_expand(ov.csr, mine)
        r2, pk2 = _csr_expand(self.csr, rest)
        v = np.concatenate([mine[r1], rest[r2]])
        pk = np.concatenate([pk1, pk2])
        if len(r1) and len(r2):  # two runs sorted by (vertex, edge), no vertex in both: merged
            order = np.argsort(v, kind="stable")
            v, pk = v[order], pk[order]
        return v, pk


def _lower_bound(arr: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per i, the first position in ``[lo[i], hi[i])`` of the sorted run of ``arr`` holding
    a value >= ``x[i]`` (``hi[i]`` if none): a branchless binary search of all rows at once."""
    pos = lo - 1  # (the last position < x)
    if len(arr) == 0 or len(lo) == 0:
        return lo.copy()
    last = len(arr) - 1
    step = (1 << int((hi - lo).max()).bit_length()) >> 1
    while step:
        cand = pos + step
        ok = cand < hi
        ok &= arr[np.minimum(cand, last)] < x
        pos = np.where(ok, cand, pos)
        step >>= 1
    return pos + 1


class _Overlay:
    """The full new edge lists of the vertices written since the base CSR was built:
    ``csr`` keyed by every such vertex (an empty list: it has no edge any more),
    ``members`` the same vertices as a Python set (the per-lookup test)."""

    __slots__ = ("csr", "members")

    def __init__(self, csr: CSR):
        self.csr = csr
        self.members = frozenset(csr.keys.tolist())

    @property
    def nbytes(self) -> int:
        # (the set: ~60 bytes a member)
        return self.csr.nbytes + 60 * len(self.members)


_E64 = np.zeros(0, dtype=np.int64)


def _member(sorted_arr: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``q[i] in sorted_arr`` for each i (vectorized)."""
    if len(sorted_arr) == 0 or len(q) == 0:
        return np.zeros(len(q), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_arr, q), len(sorted_arr) - 1)
    return sorted_arr[pos] == q


def estimated_triples(graph) -> int:
    """The triples of ``graph`` from its predicates' statistics (no arrays read)."""
    stats = graph.stats
    return int(sum(stats(p).triples for p in graph.predicates().tolist()))


def build_edges(graph, direction: int, budget: int | None = None) -> VertexEdges | None:
    """The edge index of ``graph`` in ``direction``, or None above ``budget`` bytes
    (default :data:`MAX_BYTES`) or when an id does not fit in 31 bits."""
    if budget is None:
        budget = MAX_BYTES
    pids = graph.predicates().tolist()
    if estimated_triples(graph) * _EDGE_BUILD_BYTES_PER_TRIPLE > budget:
        return None
    shards = getattr(graph, "shards", None)
    # in-process shards: each predicate's adjacency in this direction is sorted by
    # (vertex, neighbour) in each shard, a run per (shard, predicate)
    local = shards is not None and all(hasattr(sh, "_csr") for sh in shards)
    vs: list[np.ndarray] = []
    packed: list[np.ndarray] = []
    for part in (shards if local else [None]):
        for pid in pids:
            if not 0 <= pid <= _I32_MAX:
                return None
            if part is not None:
                v, nb = part._csr(pid, direction).pairs()
            else:
                s, o = graph.scan(pid)  # (sorted by subject, object within each shard)
                v, nb = (s, o) if direction == OUT else (o, s)
            if not len(v):
                continue
            if int(nb.min()) < 0 or int(nb.max()) > _I32_MAX:
                return None
            vs.append(v.astype(np.int64, copy=False))
            packed.append(nb.astype(np.int64) | (pid << 32))
    if not vs:
        return VertexEdges(csr_from_sorted_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), np.int64))
    v = np.concatenate(vs)
    pk = np.concatenate(packed)
    del vs, packed
    order = None
    if local:
        # the runs are sorted by (vertex, neighbour) and come shard by shard, predicates
        # ascending: a stable sort by vertex alone (timsort merges the runs) leaves each
        # vertex's edges by predicate, then neighbour, when a vertex's edges are all in
        # one shard (a shard owns its vertices); checked below, else the full sort
        order = np.argsort(v, kind="stable")
        sv, spk = v[order], pk[order]
        if len(sv) < 2 or bool(((sv[1:] > sv[:-1]) | (spk[1:] > spk[:-1])).all()):
            v, pk = sv, spk
        else:
            order = None
        del sv, spk
    if order is None:  # by vertex, then (predicate, neighbour)
        order = np.lexsort((pk, v))
        v = v[order]
        pk = pk[order]
    del order
    if len(v) > 1:  # (a triple read twice: once)
        keep = np.empty(len(v), dtype=bool)
        keep[0] = True
        keep[1:] = (v[1:] != v[:-1]) | (pk[1:] != pk[:-1])
        if not keep.all():
            v, pk = v[keep], pk[keep]
    return VertexEdges(csr_from_sorted_pairs(v, pk, None, pk.dtype))   # (packed edges: int64)


#: eager: every graph a store's commit makes gets its edge indexes from its
#: predecessor's (:func:`carry`, :func:`settle`), the store's empty graph starts with
#: empty ones (:func:`seed_empty`), a store opened from disk builds them at once
#: (:func:`prime`); False: only the lazy rent-or-buy build of engine/plan/point.py.
#: Graphs outside a store's lineage (a window's, a transient store's) stay lazy
EAGER = True
#: an overlay holds at most this many edges, or ``base / OVERLAY_SHARE`` if more: past
#: it the commit builds the index afresh (~50 ns a triple), so a commit's patch costs
#: at most a few sorts of that size while the rebuilds are rare
OVERLAY_MIN = 4096
OVERLAY_SHARE = 32


def _overlay_limit(base_triples: int) -> int:
    return max(OVERLAY_MIN, base_triples // OVERLAY_SHARE)


def empty_edges() -> VertexEdges:
    """The edge index of a graph without triples."""
    return VertexEdges(csr_from_sorted_pairs(_E64, _E64, np.int64))


def patched(old: VertexEdges, steps: list[tuple[np.ndarray, np.ndarray]], direction: int, graph,
            budget: int | None = None) -> VertexEdges | None:
    """The edge index of ``graph``, which is ``old``'s graph after each step of
    ``steps`` in order: delete the (n, 3) s/p/o rows ``remove``, then insert
    ``add`` (set semantics: rows need not exist / may exist already). The touched
    vertices' edge lists are recomputed from their old ones and the rows,
    vectorized (the last step touching an edge decides it), into the overlay;
    built afresh from ``graph`` when the overlay would pass its limit."""
    kc, nc = (0, 2) if direction == OUT else (2, 0)
    if sum(len(a) for _, a in steps) > _overlay_limit(len(old.csr)):  # (a bulk load: no overlay, skip to the build)
        return build_edges(graph, direction, budget)
    parts = [r for step in steps for r in step]
    rows = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)
    if len(rows) == 0:
        return old
    if int(rows.min()) < 0 or int(rows.max()) > _I32_MAX:
        return None  # (an id past 31 bits: no packed edges, as build_edges)
    touched = unique(rows[:, kc])
    ov = old.overlay
    keys = touched if ov is None else unique(np.concatenate([ov.csr.keys.astype(np.int64), touched]))
    fresh = touched if ov is None else touched[~_member(ov.csr.keys.astype(np.int64), touched)]
    _, cnt = old.csr.spans(fresh) if len(fresh) and len(old.csr.keys) else (_E64, _E64)
    newly_hidden = int(cnt.sum())
    size = (len(ov.csr) if ov is not None else 0) + newly_hidden + sum(len(a) for _, a in steps)
    if size > _overlay_limit(len(old.csr)):
        return build_edges(graph, direction, budget)
    # the touched vertices' current lists, then each edge the steps name: the last step
    # naming it decides (tags: step k's deletions 2k+1, its insertions 2k+2: even = kept)
    v_cur, pk_cur = old.current(touched)
    dv = rows[:, kc]
    dpk = (rows[:, 1] << np.int64(32)) | rows[:, nc]
    dtag = np.concatenate([np.full(len(r), 2 * k + 1 + (j == 1), np.int32)
                           for k, step in enumerate(steps) for j, r in enumerate(step)])
    order = np.lexsort((dtag, dpk, dv))
    dv, dpk, dtag = dv[order], dpk[order], dtag[order]
    last = np.empty(len(dv), dtype=bool)
    last[-1] = True
    last[:-1] = (dv[1:] != dv[:-1]) | (dpk[1:] != dpk[:-1])
    dv, dpk, present = dv[last], dpk[last], dtag[last] % 2 == 0
    # where each named edge is (or would go) in the current lists: O(delta log degree)
    lo = np.searchsorted(v_cur, dv, "left")
    hi = np.searchsorted(v_cur, dv, "right")
    pos = _lower_bound(pk_cur, lo, hi, dpk)
    found = pos < hi
    found[found] = pk_cur[pos[found]] == dpk[found]
    keep = np.ones(len(v_cur), dtype=bool)
    keep[pos[found & ~present]] = False
    ins = ~found & present
    if ins.any():  # (positions ascending: the named edges are sorted as the lists are)
        at = pos[ins]
        keep = np.insert(keep, at, True)
        v_cur = np.insert(v_cur, at, dv[ins])
        pk_cur = np.insert(pk_cur, at, dpk[ins])
    v_new, pk_new = v_cur[keep], pk_cur[keep]
    # the overlay: its other vertices' lists as they were, the touched ones' new lists
    if ov is not None:
        ov_v, ov_pk = ov.csr.pairs()
        other = ~_member(touched, ov_v)
        if not other.all():
            ov_v, ov_pk = ov_v[other], ov_pk[other]
        v = np.concatenate([ov_v, v_new])
        pk = np.concatenate([ov_pk, pk_new])
        if len(ov_v) and len(v_new):  # (two runs sorted by vertex, none in both: merged)
            order = np.argsort(v, kind="stable")
            v, pk = v[order], pk[order]
    else:
        v, pk = v_new, pk_new
    indptr = np.empty(len(keys) + 1, dtype=np.int64)
    indptr[:-1] = np.searchsorted(v, keys)
    indptr[-1] = len(v)
    key_dtype = np.int32 if len(keys) == 0 or int(keys[-1]) < _I32_MAX else np.int64
    ocsr = csr_of(keys.astype(key_dtype), indptr, pk.astype(np.int64, copy=False))
    return VertexEdges(old.csr, _Overlay(ocsr), old.hidden + newly_hidden)


class _Pending:
    """An edge index not computed yet: ``base`` (an index of an earlier graph of the
    lineage) after ``steps`` (each: delete rows, then insert rows), resolved
    (:func:`patched`) when the graph is first read through it (or :func:`settle`d:
    a store's commit), so a graph derived for a moment (an update's working
    graphs, a query's view of the store before some rows) costs nothing unless a
    lookup reads it; a graph made from a pending one extends its steps."""

    __slots__ = ("base", "steps", "superseded")

    def __init__(self, base: VertexEdges, steps):
        #: the steps, or a function computing them (:func:`follow`: the difference of two graphs)
        self.base, self.steps = base, steps
        #: a later graph's pending patch extends this one (a background build skips it)
        self.superseded = False

    def resolved_steps(self) -> list:
        if callable(self.steps):
            self.steps = self.steps()
        return self.steps


#: resolves pending patches (not _ELOCK: a lazy full build may hold that one for long)
_PLOCK = threading.Lock()


def _resolve(graph, per: dict, direction: int, wait: bool = True):
    """``per[direction]`` with a pending patch resolved (and stored); without ``wait``,
    None while another thread resolves one (a bulk load's build in the background:
    the lookup goes its general way meanwhile instead of waiting)."""
    hit = per.get(direction)
    if type(hit) is not _Pending:
        return hit
    if not _PLOCK.acquire(blocking=wait):
        return None
    try:
        hit = per.get(direction)
        if type(hit) is _Pending:
            idx = patched(hit.base, hit.resolved_steps(), direction, graph)
            hit = per[direction] = _NONE if idx is None else idx
    finally:
        _PLOCK.release()
    return hit


def _rebuilds(p: _Pending) -> bool:
    """Whether resolving ``p`` builds the index afresh (a bulk load's worth of rows)."""
    return not callable(p.steps) and sum(len(a) for _, a in p.steps) > _overlay_limit(len(p.base.csr))


def carry(old_graph, new_graph, remove: np.ndarray, add: np.ndarray) -> None:
    """Give ``new_graph`` (``old_graph`` after deleting the s/p/o rows ``remove``,
    then inserting ``add``) the edge indexes ``old_graph`` has, as pending patches
    (:class:`_Pending`; :func:`settle` resolves them at once); a direction
    ``old_graph`` has none of (never built, above the budget) stays lazy. Called by
    :meth:`engine.kv.graph.GraphIndex.apply`."""
    if not EAGER:
        return
    try:
        per = _ECACHE.get(old_graph)
    except TypeError:
        return
    if not per:
        return
    mine = {}
    for d, hit in list(per.items()):
        if type(hit) is _Pending:
            mine[d] = _Pending(hit.base, [*hit.resolved_steps(), (remove, add)])
            hit.superseded = True
        elif isinstance(hit, VertexEdges):
            mine[d] = _Pending(hit, [(remove, add)])
    if mine:
        try:
            _ECACHE[new_graph] = mine
        except TypeError:
            pass


def follow(old_graph, new_graph) -> None:
    """``new_graph`` is the next version of ``old_graph`` read from the same store
    (a query process following the primary's commits: the same shards but for the
    predicate segments the commit rebuilt): it gets ``old_graph``'s edge indexes
    with a pending patch whose rows are the difference of the changed segments,
    computed (like the patch) only when a lookup reads it; a graph without an
    old version gets its indexes built (:func:`prime`)."""
    if not EAGER:
        return
    per = _ECACHE.get(old_graph) if old_graph is not None else None
    if not per:
        prime(new_graph)
        return

    memo: list = []
    # (the shards, not the graphs: the pending patch lives in the cache keyed weakly by
    # the new graph and must not keep it alive; the old shards stay until it resolves)
    old_shards, new_shards = list(old_graph.shards), list(new_graph.shards)

    def steps() -> list:  # (one difference for both directions, computed under _PLOCK)
        if not memo:
            memo.append([_segment_difference(old_shards, new_shards)])
        return memo[0]

    mine = {}
    for d in list(per):
        hit = _resolve(old_graph, per, d)
        if isinstance(hit, VertexEdges):
            mine[d] = _Pending(hit, steps)
    if mine:
        _ECACHE[new_graph] = mine


def _segment_difference(old_shards: list, new_shards: list) -> tuple[np.ndarray, np.ndarray]:
    """(rows removed, rows added) s/p/o from one version's shards to the next's: the triples
    of each (shard, predicate) segment that is not the same object in both, compared
    as sorted packed (s, o) keys (each shard's OUT side: every triple once)."""
    rem: list[np.ndarray] = [np.zeros((0, 3), dtype=np.int64)]
    add: list[np.ndarray] = [np.zeros((0, 3), dtype=np.int64)]
    for a, b in zip(old_shards, new_shards, strict=True):
        if a is b:
            continue
        sa, sb = a.segments(), b.segments()
        for pid in sorted(sa.keys() | sb.keys()):
            if sa.get(pid) is sb.get(pid):
                continue
            ka = _packed_scan(a, pid) if pid in sa else np.zeros(0, np.uint64)
            kb = _packed_scan(b, pid) if pid in sb else np.zeros(0, np.uint64)
            for keys, other, out in ((ka, kb, rem), (kb, ka, add)):
                gone = keys[~_member(other, keys)]
                if len(gone):
                    r = np.empty((len(gone), 3), dtype=np.int64)
                    r[:, 0] = (gone >> np.uint64(32)).astype(np.int64)
                    r[:, 1] = pid
                    r[:, 2] = (gone & np.uint64(0xFFFFFFFF)).astype(np.int64)
                    out.append(r)
    return np.concatenate(rem), np.concatenate(add)


def _packed_scan(shard, pid: int) -> np.ndarray:
    """A shard's (s, o) pairs of ``pid`` as sorted ``s << 32 | o`` uint64 keys."""
    s, o = shard.scan(pid)
    return (s.astype(np.uint64) << np.uint64(32)) | o.astype(np.uint64)


#: the background builds :func:`settle` started (joined by :func:`wait_builds`)
_BUILDS: list[threading.Thread] = []


def settle(graph) -> None:
    """Resolve ``graph``'s pending edge-index patches (a store's commit: the writer
    pays for them, not the first lookup): a patch at once, a full build (a bulk
    load's rows) in a background thread, so the commit does not wait for it (the
    lookups meanwhile go their general way, :func:`cached_edges` does not wait)."""
    per = _ECACHE.get(graph)
    if not per:
        return
    big = []
    for d, hit in list(per.items()):
        if type(hit) is _Pending and _rebuilds(hit):
            big.append(d)
        else:
            _resolve(graph, per, d)
    if big:
        ref = weakref.ref(graph)

        def build() -> None:
            g = ref()
            p = _ECACHE.get(g) if g is not None else None
            if p:
                for d in big:
                    hit = p.get(d)
                    # (a commit since made from this graph carries the rows on: only the
                    # newest graph's build is worth running; a reader of this one builds it)
                    if type(hit) is _Pending and not hit.superseded:
                        _resolve(g, p, d)

        t = threading.Thread(target=build, name="jindou-edge-index", daemon=True)
        _BUILDS[:] = [x for x in _BUILDS if x.is_alive()] + [t]
        t.start()


def index_bytes(graph) -> int:
    """Bytes of the vertex indexes this module holds for ``graph`` (edge indexes and
    predicate lists built or carried; pending patches count nothing yet)."""
    n = 0
    for cache in (_ECACHE, _CACHE):
        try:
            per = cache.get(graph)
        except TypeError:
            continue
        for hit in (per or {}).values():
            if isinstance(hit, (VertexEdges, VertexPreds)):
                n += hit.nbytes
    return n


def wait_builds(timeout: float | None = None) -> None:
    """Wait for the background builds :func:`settle` started (tests, benchmarks)."""
    for t in list(_BUILDS):
        t.join(timeout)


def seed_empty(graph) -> None:
    """An empty graph's (empty) edge indexes, so the graphs commits make from it carry theirs."""
    if EAGER:
        try:
            _ECACHE[graph] = {OUT: empty_edges(), IN: empty_edges()}
        except TypeError:
            pass


def prime(graph) -> None:
    """Build ``graph``'s edge indexes now (a store opened from its data directory)."""
    if EAGER:
        for d in (OUT, IN):
            vertex_edges(graph, d)


def transfer(old_graph, new_graph) -> None:
    """``new_graph`` holds the same triples as ``old_graph`` (the same store mapped
    from its packs): it gets ``old_graph``'s edge indexes as they are."""
    settle(old_graph)
    per = _ECACHE.get(old_graph)
    if per:
        try:
            _ECACHE[new_graph] = dict(per)
        except TypeError:
            pass


def expand_edges(graph, direction: int, vids: np.ndarray, check=None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every edge of each ``vids[i]`` in ``direction`` from the graph's edge index,
    whatever its predicate: ``(rows, pids, neighbours)`` int64, grouped by row in
    input order, (predicate, neighbour) ascending within a row -- a variable
    predicate's step in one gather instead of one per predicate. None when the
    graph has no edge index in ``direction`` (the caller steps each predicate).
    ``check(n)`` is called with the number of edges before they are gathered (the
    caller's row and memory budgets: it raises to refuse them)."""
    try:
        e = cached_edges(graph, direction)
    except TypeError:  # (a view that cannot be weakly referenced: none)
        return None
    if e is None:
        return None
    vids = np.asarray(vids, dtype=np.int64)
    ov = e.overlay
    if check is not None:
        if len(vids) == 1:
            check(len(e.edges_of(int(vids[0]))))
        elif ov is None:
            check(_count(e.csr, vids))
        else:
            inov = _member(ov.csr.keys.astype(np.int64, copy=False), vids)
            check(_count(ov.csr, vids[inov]) + _count(e.csr, vids[~inov]))
    if ov is None or len(vids) == 0:
        rows, pk = _csr_expand(e.csr, vids)
    else:
        inov = _member(ov.csr.keys.astype(np.int64, copy=False), vids)
        if not inov.any():
            rows, pk = _csr_expand(e.csr, vids)
        else:
            s1 = np.flatnonzero(inov)
            s2 = np.flatnonzero(~inov)
            r1, p1 = _csr_expand(ov.csr, vids[s1])
            r2, p2 = _csr_expand(e.csr, vids[s2])
            rows = np.concatenate([s1[r1], s2[r2]])
            pk = np.concatenate([p1, p2])
            order = np.argsort(rows, kind="stable")
            rows, pk = rows[order], pk[order]
    return rows, pk >> np.int64(32), pk & _LOW31_64


_LOW31_64 = np.int64(0xFFFFFFFF)


def _count(csr: CSR, vids: np.ndarray) -> int:
    """The neighbours of ``vids`` in ``csr``, in all (no array of them made)."""
    if len(csr.keys) == 0 or len(vids) == 0:
        return 0
    return int(csr.spans(vids)[1].sum())


def _csr_expand(csr: CSR, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(csr.keys) == 0 or len(vids) == 0:
        return _E64, _E64
    return csr.expand(vids)


def cached_edges(graph, direction: int) -> VertexEdges | None:
    """The edge index already built or carried for ``graph`` (None: not built, or
    none possible); a pending patch is resolved first."""
    per = _ECACHE.get(graph)
    if per is None:
        return None
    hit = per.get(direction)
    if type(hit) is _Pending:
        hit = _resolve(graph, per, direction, wait=False)
    return None if hit is None or hit is _NONE else hit


def pending_edges(graph) -> bool:
    """Whether an edge index of ``graph`` is still being resolved (a bulk load's build in
    the background): a program compiled without it now may have it later."""
    try:
        per = _ECACHE.get(graph)
    except TypeError:
        return False
    return bool(per) and any(type(h) is _Pending for h in list(per.values()))


_ECACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: (its own lock: an edge build in a background thread must not hold up a predicates
#: index build that a lookup on the event loop waits for)
_ELOCK = threading.Lock()


def vertex_edges(graph, direction: int, budget: int | None = None) -> VertexEdges | None:
    """The edge index of ``graph`` in ``direction``, built on first call and kept
    while the graph object lives (as :func:`vertex_predicates`); None when it
    cannot be built (remembered)."""
    per = _ECACHE.get(graph)
    if per is not None:
        hit = _resolve(graph, per, direction)
        if hit is not None:
            return None if hit is _NONE else hit
    with _ELOCK:
        per = _ECACHE.get(graph)
        hit = per.get(direction) if per is not None else None
        if hit is not None:
            return None if hit is _NONE else hit
        idx = build_edges(graph, direction, budget)
        try:
            if per is None:
                per = _ECACHE[graph] = {}
            per[direction] = _NONE if idx is None else idx
        except TypeError:
            pass
        return idx
