"""Graph views: GraphReader implementations over other graphs.

* :class:`EmptyGraph`: no triples (an absent graph, an empty window);
* :class:`MergedGraph`: the RDF merge (set union) of several graphs, e.g. the
  default graph of ``FROM g1 FROM g2`` or of several stream windows.

Views only make :class:`engine.kv.api.GraphReader` calls on the graphs under
them, so they work the same over local and (later) remote shards. They hand
out no ``local_lookup``: the tuple-at-a-time executor needs an index.
"""

from __future__ import annotations

import numpy as np

from engine.arrays import unique
from engine.kv.api import GraphReader, PredicateStats

__all__ = ["EmptyGraph", "MergedGraph", "merged_view"]

_EMPTY = np.zeros(0, dtype=np.int64)
_NO_STATS = PredicateStats(0, 0, 0)


class EmptyGraph:
    """A graph with no triples (an absent graph)."""

    n_triples = 0

    def predicates(self):
        return _EMPTY

    def stats(self, pid):
        return _NO_STATS

    def expand(self, pid, direction, vids):
        return _EMPTY, _EMPTY

    def contains(self, pid, s, o):
        return np.zeros(len(s), dtype=bool)

    def index(self, pid, direction):
        return _EMPTY

    def scan(self, pid):
        return _EMPTY, _EMPTY

    def scan_all(self):
        return _EMPTY, _EMPTY, _EMPTY

    def vertices(self):
        return _EMPTY

    def local_lookup(self, pid, direction):
        return None


def _dedup_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (a, b) pairs sorted by (a, b); one 1-D sort of packed keys when both fit."""
    if len(a) <= 1:
        return a, b
    if int(a.min()) >= 0 and int(b.min()) >= 0 and int(a.max()) < (1 << 31) and int(b.max()) < (1 << 32):
        k = unique((a << 32) | b)
        return k >> 32, k & 0xFFFFFFFF
    m = np.stack([a, b], axis=1)
    u = np.unique(m, axis=0)
    return u[:, 0].copy(), u[:, 1].copy()


class MergedGraph:
    """RDF merge (set union of triples) of several graphs."""

    def __init__(self, graphs):
        self.graphs = list(graphs)
        self._preds = None
        self._stats: dict[int, PredicateStats] = {}

    @property
    def n_triples(self) -> int:
        return sum(g.n_triples for g in self.graphs)

    def predicates(self):
        if self._preds is None:
            ps = [g.predicates() for g in self.graphs]
            self._preds = unique(np.concatenate(ps)) if ps else _EMPTY
        return self._preds

    def stats(self, pid):
        st = self._stats.get(pid)
        if st is None:
            parts = [g.stats(pid) for g in self.graphs]
            st = PredicateStats(sum(p.triples for p in parts), sum(p.subjects for p in parts),
                                sum(p.objects for p in parts))
            self._stats[pid] = st
        return st

    def expand(self, pid, direction, vids):
        rs, ns = [], []
        for g in self.graphs:
            r, nb = g.expand(pid, direction, vids)
            if len(r):
                rs.append(r)
                ns.append(nb)
        if not rs:
            return _EMPTY, _EMPTY
        if len(rs) == 1:  # one graph holds the predicate: its answer is already a set
            return rs[0], ns[0]
        r = np.concatenate(rs)
        nb = np.concatenate(ns)
        r, nb = _dedup_pairs(r, nb)  # sorted by row: the merge is a set
        return r, nb

    def contains(self, pid, s, o):
        out = np.zeros(len(s), dtype=bool)
        for g in self.graphs:
            out |= g.contains(pid, s, o)
        return out

    def index(self, pid, direction):
        parts = [g.index(pid, direction) for g in self.graphs]
        return unique(np.concatenate(parts)) if parts else _EMPTY

    def scan(self, pid):
        ss, os_ = [], []
        for g in self.graphs:
            s, o = g.scan(pid)
            if len(s):
                ss.append(s)
                os_.append(o)
        if not ss:
            return _EMPTY, _EMPTY
        if len(ss) == 1:
            return ss[0], os_[0]
        return _dedup_pairs(np.concatenate(ss), np.concatenate(os_))

    def scan_all(self):
        parts = [np.stack(g.scan_all(), axis=1) for g in self.graphs]
        if not parts:
            return _EMPTY, _EMPTY, _EMPTY
        m = np.unique(np.concatenate(parts), axis=0)
        return m[:, 0].copy(), m[:, 1].copy(), m[:, 2].copy()

    def vertices(self):
        parts = [g.vertices() for g in self.graphs]
        return unique(np.concatenate(parts)) if parts else _EMPTY

    def local_lookup(self, pid, direction):
        return None  # a merge answers by the batched calls only (its lists need a union)


def merged_view(graphs) -> GraphReader:
    """The union of ``graphs`` (None entries skipped): empty, the one graph, or a merge."""
    graphs = [g for g in graphs if g is not None]
    if not graphs:
        return EmptyGraph()
    if len(graphs) == 1:
        return graphs[0]
    return MergedGraph(graphs)
