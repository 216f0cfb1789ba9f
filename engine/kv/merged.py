"""One predicate's adjacency across all in-process shards, for vectorized reads.

A :class:`~engine.kv.graph.GraphIndex` of ``n`` shards answers a batched
``expand``/``contains`` by splitting the ids by owner, a dozen numpy calls per
shard, and merging the answers back: ~15 us per shard touched whatever the
batch size, so a step of a few hundred rows (LUBM Q2's 129 students into
``memberOf``: 80 us for 4 shards) is mostly fixed cost. When every shard lives
in this process, :class:`MergedAdjacency` puts one predicate-direction of all
shards side by side: the shards' neighbour lists concatenated (one copy, no
sort: each vertex's list lies whole in its owner's array) and one span table
over the global ids (or, for sparse keys, the keys sorted with their spans).
A batch then costs one span lookup and one gather, whatever the shard count
(129 rows: 14 us). The lists keep their order, so answers are exactly the
per-shard path's.

Built lazily per (predicate, direction) by :class:`MergedCache`, which also
decides when building pays: at once for a small adjacency, for a large one
only after the per-shard path has cost about as much as the build
(ski rental), and never past a byte budget tied to the graph's own size.
"""

from __future__ import annotations

import numpy as np

from engine.kv.shard import CSR

#: a span table (two int32 a slot) is used when it has at most this many slots per key
#: (+ _DENSE_MIN), else a binary search of the sorted keys (probes sorted first when many)
_DENSE_PER_KEY = 4
_DENSE_MIN = 256
#: an adjacency of at most this many edges is merged at its first batched read
#: (at most ~1.5 ms, about one query's time); a larger one after ``edges /
#: _EDGES_PER_USE`` batched reads through the shards (a build costs ~1-6 ns an edge, a
#: sharded read ~15 us per shard more than a merged one)
_BUILD_AT_ONCE = 1 << 18
_EDGES_PER_USE = 1 << 13
#: merged copies of one graph stay within this share of the graph's own bytes (+ a floor)
BUDGET_SHARE = 0.5
#: probes at least this many and unsorted are sorted before the binary search
_SORT_PROBES = 2048
BUDGET_FLOOR = 16 << 20


class MergedAdjacency(CSR):
    """A :class:`~engine.kv.shard.CSR` over the union of several shards' CSRs of one
    predicate and direction. ``indices`` is the shards' neighbour arrays end to
    end; a key's span is ``(start, count)`` into it, from a direct table over
    ``key - base`` (dense keys) or a binary search of the sorted keys. ``expand``
    and ``contains`` are :class:`CSR`'s, over these spans (``stride`` is 1: the
    ids are global)."""

    def __init__(self, csrs: list[CSR]):
        sizes = [len(c.indices) for c in csrs]
        nonempty = [c for c in csrs if len(c.keys)]
        dt = np.result_type(*(c.indices.dtype for c in nonempty)) if nonempty else np.int32
        indices = np.concatenate([c.indices for c in csrs]).astype(dt, copy=False) if csrs else np.zeros(0, dt)
        keys = np.concatenate([c.keys.astype(np.int64) for c in nonempty]) if nonempty else np.zeros(0, np.int64)
        off = 0
        starts, counts = [], []
        for c, size in zip(csrs, sizes, strict=True):
            if len(c.keys):
                ptr = c.indptr.astype(np.int64)
                starts.append(ptr[:-1] + off)
                counts.append(np.diff(ptr))
            off += size
        start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        count = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        # positions fit the index dtype of the arrays they point into
        pdt = np.int32 if len(indices) < np.iinfo(np.int32).max else np.int64
        nk = len(keys)
        self._dense = None
        self._sorted = None
        if nk:
            base = int(keys.min())
            width = int(keys.max()) - base + 1
            if width <= _DENSE_PER_KEY * nk + _DENSE_MIN:
                # slot ``width`` (where out-of-range ids are clamped) stays empty
                st = np.zeros(width + 1, dtype=pdt)
                ct = np.zeros(width + 1, dtype=pdt)
                slot = keys - base
                st[slot] = start
                ct[slot] = count
                self._dense = (base, width, st, ct)
            else:
                order = np.argsort(keys, kind="stable")
                keys = keys[order]
                self._sorted = (start[order].astype(pdt), count[order].astype(pdt))
        if self._dense is not None:
            keys = keys[:1]  # only its length (non-zero) is read by CSR's bulk ops
        super().__init__(keys, np.zeros(1, dtype=pdt), indices)
        self._one = self._make_one()

    @staticmethod
    def estimate(csrs: list[CSR]) -> int:
        """An upper bound of the bytes a merge of ``csrs`` holds (before building it)."""
        edges = sum(len(c.indices) for c in csrs)
        nk = sum(len(c.keys) for c in csrs)
        ends = [(int(c.keys[0]), int(c.keys[-1])) for c in csrs if len(c.keys)]
        if not ends:
            return 0
        width = max(b for _, b in ends) - min(a for a, _ in ends) + 1
        slots = width if width <= _DENSE_PER_KEY * nk + _DENSE_MIN else nk
        return edges * 8 + slots * 16 + nk * 8

    @property
    def nbytes(self) -> int:
        n = self.keys.nbytes + self.indices.nbytes
        if self._dense is not None:
            n += self._dense[2].nbytes + self._dense[3].nbytes
        if self._sorted is not None:
            n += self._sorted[0].nbytes + self._sorted[1].nbytes
        return n

    def spans(self, vids: np.ndarray, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(start in ``indices``, neighbour count) of each int64 vid (0 if absent)."""
        d = self._dense
        if d is not None:
            base, width, st, ct = d
            j = vids - base
            ju = j.view(np.uint64)  # below base: huge, clamped to the empty slot
            np.minimum(ju, width, out=ju)
            return st[j], ct[j]
        keys = self.keys
        if self._sorted is None:  # no keys at all
            z = np.zeros(len(vids), dtype=np.int64)
            return z, z.copy()
        st, ct = self._sorted
        n = len(vids)
        if n >= _SORT_PROBES and not (vids[1:] >= vids[:-1]).all():
            order = vids.argsort()  # a sorted search runs through the keys once
            pos = np.empty(n, dtype=np.intp)
            pos[order] = keys.searchsorted(vids[order])
        else:
            pos = keys.searchsorted(vids)
        np.minimum(pos, len(keys) - 1, out=pos)
        lo = st[pos]
        cnt = ct[pos]
        cnt[keys[pos] != vids] = 0
        return lo, cnt

    def lookup(self, stride: int = 1):
        """``v -> neighbours`` for one Python-int id (a view of ``indices``)."""
        return self._one

    def neighbours(self, v: int, stride: int = 1) -> np.ndarray:
        return self._one(v)

    def _make_one(self):
        idx = self.indices
        empty = idx[:0]
        d = self._dense
        if d is not None:
            base, width, st, ct = d

            def by_slot(v: int) -> np.ndarray:
                j = v - base
                if 0 <= j < width:
                    s = int(st[j])
                    return idx[s:s + int(ct[j])]
                return empty
            return by_slot
        keys = self.keys
        if self._sorted is None:
            return lambda v: empty
        st, ct = self._sorted
        nk = len(keys)

        def by_search(v: int) -> np.ndarray:
            i = int(keys.searchsorted(v))
            if i < nk and keys[i] == v:
                s = int(st[i])
                return idx[s:s + int(ct[i])]
            return empty
        return by_search

    def table(self, stride: int = 1):
        return None  # spans() above replace CSR's per-shard tables


class MergedCache:
    """The :class:`MergedAdjacency` of each (predicate, direction) of one graph
    index, built when it pays (see the module docstring); thread-safe enough for
    readers (a race builds the same object twice)."""

    __slots__ = ("budget", "used", "merged", "uses")

    def __init__(self, budget: int):
        self.budget = budget
        self.used = 0
        self.merged: dict[tuple[int, int], MergedAdjacency | None] = {}
        self.uses: dict[tuple[int, int], int] = {}

    def get(self, key: tuple[int, int], csrs_of) -> MergedAdjacency | None:
        """The merged adjacency of ``key`` when built or worth building now, else None
        (the caller reads through the shards). ``csrs_of()`` gives the shards' CSRs,
        or None when a shard is not in this process."""
        m = self.merged.get(key, _MISSING)
        if m is not _MISSING:
            return m
        csrs = csrs_of()
        if csrs is None:
            self.merged[key] = None
            return None
        edges = sum(len(c.indices) for c in csrs)
        if edges > _BUILD_AT_ONCE:
            n = self.uses.get(key, 0) + 1
            self.uses[key] = n
            if n * _EDGES_PER_USE < edges:
                return None
        need = MergedAdjacency.estimate(csrs)
        if self.used + need > self.budget:
            self.merged[key] = None
            return None
        m = MergedAdjacency(csrs)
        self.used += m.nbytes
        self.merged[key] = m
        return m

    def carry(self, other: MergedCache, keep) -> None:
        """Take ``other``'s built adjacencies whose predicate ``keep(pid)`` accepts
        (a new snapshot shares the untouched predicates' arrays)."""
        for key, m in other.merged.items():
            if m is not None and keep(key[0]) and self.used + m.nbytes <= self.budget:
                self.merged[key] = m
                self.used += m.nbytes


_MISSING = object()
