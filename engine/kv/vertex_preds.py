"""Vertex -> predicates index of one graph, per direction, built lazily.

A lookup of every triple of one vertex with a variable predicate
(``<s> ?p ?o``, ``?s ?p <o>``, DESCRIBE) otherwise probes each predicate's
adjacency for the vertex, whether or not the vertex has it: a dozen probes on
LUBM, and graphs with hundreds of predicates cannot afford it at all. This
index answers "which predicates does ``v`` have in ``direction``" with one
lookup, so :mod:`engine.plan.point` probes only those.

It is a :class:`engine.kv.shard.CSR` (keys: vertices, indices: predicate ids
ascending), made from the predicates' key arrays (the subjects / objects of
each predicate) with one run-merging sort of packed ``(vertex, pid)`` keys
(~15 ms for 760k pairs): a Python loop per predicate, none per triple. Graph indexes are immutable (a commit makes a
new object, :meth:`engine.kv.graph.GraphIndex.apply`), so the index is cached
per graph object (weakly: it goes with the snapshot) and stays exact across
writes: a new snapshot's graph gets its own. The build is bounded by a byte
budget on its transient and final arrays; a graph above it gets none (None:
the caller keeps its general path). Reads only the GraphReader calls
``predicates`` and ``index`` (or the shards' own ``index`` when the graph has
shards in this process, which avoids the graph's cached int64 copies).
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

from engine.kv.api import OUT
from engine.kv.shard import CSR, csr_from_sorted_pairs

__all__ = ["MAX_BYTES", "VertexEdges", "VertexPreds", "cached", "cached_edges", "estimated_pairs", "vertex_edges",
           "vertex_predicates"]

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

#: bytes per triple while building the edge index: int64 vertex and packed
#: columns, the sort's order and gathered copies, the final packed column
_EDGE_BUILD_BYTES_PER_TRIPLE = 48
#: the (little-endian) int32 halves of a packed edge: (neighbour, predicate)
EDGE_NB, EDGE_PID = (0, 1) if sys.byteorder == "little" else (1, 0)


class VertexEdges:
    """Every triple of one graph by vertex, in one direction (OUT: subject ->
    (predicate, object), IN: object -> (predicate, subject)): a CSR whose
    neighbour lists are packed ``pid << 32 | neighbour`` int64s, so a vertex's
    edges are one view, sorted (predicate ascending, then neighbour: the order
    of a point lookup's rows), and ``edges_of(v).view(np.int32).tolist()`` reads
    them as a flat list of (neighbour, predicate) halves (:data:`EDGE_NB`,
    :data:`EDGE_PID`): a point lookup answered with one lookup and one conversion
    instead of a lookup per predicate. Built only when every id fits in 31 bits."""

    __slots__ = ("csr", "edges_of", "triples")

    def __init__(self, csr: CSR):
        self.csr = csr
        #: ``v -> packed edges`` (a view; empty for a vertex without any), one Python-int
        #: vertex at a time, scalar operations only
        self.edges_of = csr.lookup(1)
        self.triples = len(csr)

    @property
    def nbytes(self) -> int:
        return self.csr.nbytes


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


def cached_edges(graph, direction: int) -> VertexEdges | None:
    """The edge index already built for ``graph`` (None: not built, or none possible)."""
    per = _ECACHE.get(graph)
    if per is None:
        return None
    hit = per.get(direction)
    return None if hit is None or hit is _NONE else hit


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
        hit = per.get(direction)
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
