"""A window's in-memory graph, maintained from instant to instant (CQELS's incremental windows).

A sliding window (RANGE much larger than STEP) shares most of its triples with
the window one step earlier. The incremental evaluation needs that *change*:
:class:`SlidingWindowGraph` slides from one instant to the next. Each window is
a contiguous range of its stream's triple sequence numbers, so only the triples
that entered (read from the transient store) and those that left (kept here:
the store may already have freed them) are looked at. A window is a *set*: the
graph gains a triple when its count in the window goes from 0 to positive and
loses it when the count drops to 0. Counts are kept only for the triples that
occur more than once (usually few); every other triple of the graph occurs
exactly once. The graph itself is then rebuilt (one sort of packed keys), or,
for a change that is small against a large window, updated with
``GraphIndex.apply``; counting the change costs more than the rebuild, so the
window cache slides only for readers that use the change and otherwise rebuilds.

The changes of the last slides, ``(plus, minus)`` as distinct (n, 3) rows, are
kept for the incremental evaluation of the queries reading the window.
"""

from __future__ import annotations

import collections

import numpy as np

from engine.arrays import unique
from engine.kv.api import IN, OUT, PredicateStats
from engine.kv.graph import GraphIndex, empty_graph
from engine.kv.views import EmptyGraph
from engine.stream.transient import triple_hash

__all__ = ["SMALL_WINDOW", "SlidingWindowGraph", "SmallGraph", "contained", "triple_hash", "window_index"]

_EMPTY3 = np.zeros((0, 3), dtype=np.int64)
_EMPTYH = np.zeros(0, dtype=np.uint64)
_EMPTYI = np.zeros(0, dtype=np.int64)
_NO_STATS = PredicateStats(0, 0, 0)
_LOW32 = np.uint64(0xFFFFFFFF)
_P21, _M21 = 1 << 21, (1 << 21) - 1
_S32 = np.uint64(32)

#: windows of up to this many triples are indexed as a :class:`SmallGraph` (two sorts) instead of
#: a :class:`GraphIndex` (per-predicate CSR in shards: ~0.3 ms of fixed cost for a 100-triple
#: window); above it, the CSR's O(1) neighbour lists pay for their build
SMALL_WINDOW = 4096
#: lookups of one predicate and direction per instant answered by binary search before its
#: vertex -> neighbours table is built (the table costs a pass over the predicate's triples)
_LUT_AFTER = 16


# ---------------------------------------------------------------- the small-window index


def _run_starts(k: np.ndarray) -> np.ndarray:
    """Mask of the first element of each run of equal values of ``k``."""
    m = np.empty(len(k), dtype=bool)
    if len(k):
        m[0] = True
        np.not_equal(k[1:], k[:-1], out=m[1:])
    return m


class SmallGraph:
    """The graph of a small window as sorted arrays: the distinct triples sorted by
    (p, s, o) and, built on first use, by (p, o, s); a predicate is one slice of each.

    Answers every :class:`~engine.kv.api.GraphReader` call exactly as the
    :class:`~engine.kv.graph.GraphIndex` of the same triples does (same rows, same order;
    ``tests/test_stream_small_window.py``), with one ``searchsorted`` per call instead
    of per-predicate CSR arrays split into shards: a window of a hundred triples is
    indexed in a few microseconds. No ``local_lookup`` (like a view): the executor uses
    the batched calls."""

    cluster = None
    remote_reads = None

    def __init__(self, spo: np.ndarray):
        self._fns: dict = {}
        self.load(spo)

    def load(self, spo: np.ndarray) -> SmallGraph:
        """Hold the triples ``spo`` from now on (replacing the previous ones; arrays handed out
        before stay valid). The functions :meth:`local_lookup` gave stay valid and answer
        for the new triples: a continuous query reloads one SmallGraph per instant and keeps
        the tuple-at-a-time programs compiled over it."""
        spo = np.asarray(spo, dtype=np.int64).reshape(-1, 3)
        if len(spo) and (int(spo.min()) < 0 or int(spo.max()) >= 1 << 32):
            raise ValueError("term ids must be in [0, 2**32) in a graph")
        self._packed = bool(len(spo)) and int(spo.max()) < _P21
        if self._packed:
            # ids under 2**21: one sort of (p, s, o) packed into an int64
            k = unique((spo[:, 1] << 42) | (spo[:, 0] << 21) | spo[:, 2])
            p, s_, o_ = k >> 42, (k >> 21) & _M21, k & _M21
            so = (s_.astype(np.uint64) << _S32) | o_.astype(np.uint64)
        else:
            p = spo[:, 1]
            so = (spo[:, 0].astype(np.uint64) << _S32) | spo[:, 2].astype(np.uint64)
            order = np.lexsort((so, p))
            p, so = p[order], so[order]
            keep = _run_starts(p) | _run_starts(so)
            if not keep.all():
                p, so = p[keep], so[keep]
        self._p, self._so = p, so
        self.n_triples = len(p)
        first = np.flatnonzero(_run_starts(p))
        self._preds = p[first]
        ends = np.append(first[1:], len(p))[:len(first)]
        self._span = dict(zip(self._preds.tolist(), zip(first.tolist(), ends.tolist(), strict=True),
                              strict=True))
        self._s = (so >> _S32).astype(np.int64)
        self._o = (so & _LOW32).astype(np.int64)
        self._in = None               # (o, s) columns in that order
        self._stats: dict[int, PredicateStats] = {}
        self._luts: dict = {}         # (pid, direction) -> {vertex: sorted neighbours}
        self._calls: dict = {}        # (pid, direction) -> lookups answered without the table
        return self

    def __len__(self) -> int:
        return self.n_triples

    def _inverse(self):
        if self._in is None:
            if self._packed:
                k = np.sort((self._p << 42) | (self._o << 21) | self._s)
                self._in = ((k >> 21) & _M21, k & _M21)
            else:
                os_ = (self._o.astype(np.uint64) << _S32) | self._s.astype(np.uint64)
                order = np.lexsort((os_, self._p))
                self._in = (self._o[order], self._s[order])
        return self._in

    def _cols(self, pid: int, direction: int):
        """(keys, neighbours) of ``pid`` in ``direction``, sorted by (key, neighbour); None if absent."""
        span = self._span.get(pid)
        if span is None:
            return None
        a, b = span
        if direction == OUT:
            return self._s[a:b], self._o[a:b]
        k, nb = self._inverse()
        return k[a:b], nb[a:b]

    # ------------------------------------------------------------ GraphReader
    def predicates(self) -> np.ndarray:
        return self._preds

    def stats(self, pid: int) -> PredicateStats:
        pid = int(pid)
        st = self._stats.get(pid)
        if st is None:
            span = self._span.get(pid)
            if span is None:
                return _NO_STATS
            s, _ = self._cols(pid, OUT)
            o, _ = self._cols(pid, IN)
            st = self._stats[pid] = PredicateStats(len(s), int(_run_starts(s).sum()), int(_run_starts(o).sum()))
        return st

    def local_lookup(self, pid: int, direction: int):
        """``v -> sorted neighbours`` (int64) for the tuple-at-a-time executor; the function
        follows :meth:`load`."""
        key = (int(pid), direction)
        f = self._fns.get(key)
        if f is None:
            def f(v, key=key):
                lut = self._luts.get(key)
                if lut is not None:
                    return lut.get(v, _EMPTYI)
                n = self._calls.get(key, 0)
                if n < _LUT_AFTER:  # a few lookups: two binary searches, no table of the predicate
                    self._calls[key] = n + 1
                    cols = self._cols(*key)
                    if cols is None:
                        return _EMPTYI
                    keys, nbrs = cols
                    a = int(keys.searchsorted(v, "left"))
                    b = int(keys.searchsorted(v, "right"))
                    return nbrs[a:b] if b > a else _EMPTYI
                return self._lut(*key).get(v, _EMPTYI)
            self._fns[key] = f
        return f

    def _lut(self, pid: int, direction: int) -> dict:
        cols = self._cols(pid, direction)
        lut: dict = {}
        if cols is not None:
            keys, nbrs = cols
            first = np.flatnonzero(_run_starts(keys))
            ends = np.append(first[1:], len(keys))[:len(first)]
            lut = {k: nbrs[a:b] for k, a, b in zip(keys[first].tolist(), first.tolist(), ends.tolist(),
                                                    strict=True)}
        self._luts[pid, direction] = lut
        return lut

    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vids = np.asarray(vids, dtype=np.int64)
        cols = self._cols(int(pid), direction) if len(vids) else None
        if cols is None:
            return _EMPTYI, _EMPTYI
        keys, nbrs = cols
        if len(vids) == 1:  # one vertex (a constant end, one row): a slice, no per-row arithmetic
            a = int(keys.searchsorted(vids[0], "left"))
            b = int(keys.searchsorted(vids[0], "right"))
            if a == b:
                return _EMPTYI, _EMPTYI
            return np.zeros(b - a, dtype=np.int64), nbrs[a:b].copy()
        lo = keys.searchsorted(vids, "left")
        cnt = keys.searchsorted(vids, "right") - lo
        total = int(cnt.sum())
        if total == 0:
            return _EMPTYI, _EMPTYI
        rows = np.repeat(np.arange(len(vids), dtype=np.int64), cnt)
        # position of each neighbour: its row's first position + its rank within the row
        pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt - lo, cnt)
        return rows, nbrs[pos]

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        s = np.asarray(s, dtype=np.int64)
        o = np.asarray(o, dtype=np.int64)
        n = len(s)
        span = self._span.get(int(pid)) if n else None
        if span is None:
            return np.zeros(n, dtype=bool)
        a, b = span
        keys = self._so[a:b]
        ok = (s >= 0) & (s < 1 << 32) & (o >= 0) & (o < 1 << 32)
        q = (s.astype(np.uint64) << _S32) | (o.astype(np.uint64) & _LOW32)
        i = keys.searchsorted(q)
        hit = i < len(keys)
        hit[hit] = keys[i[hit]] == q[hit]
        return hit & ok

    def index(self, pid: int, direction: int) -> np.ndarray:
        cols = self._cols(int(pid), direction)
        if cols is None:
            return _EMPTYI
        k = cols[0]
        return k[_run_starts(k)]

    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        cols = self._cols(int(pid), OUT)
        return (_EMPTYI, _EMPTYI) if cols is None else cols

    def scan_all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._s, self._p.copy(), self._o

    def vertices(self) -> np.ndarray:
        return unique(np.concatenate([self._s, self._o]))

    @property
    def nbytes(self) -> int:
        return 8 * 4 * self.n_triples + (0 if self._in is None else 8 * 2 * self.n_triples)

    def rows(self) -> np.ndarray:
        """The distinct triples, sorted by (p, s, o)."""
        return np.stack([self._s, self._p, self._o], axis=1)


def window_index(spo: np.ndarray, small: int | None = None):
    """The index of a window's triples: :class:`SmallGraph` up to ``small`` (default
    :data:`SMALL_WINDOW`) triples, else a :class:`GraphIndex`; :class:`EmptyGraph` if none."""
    n = len(spo)
    if n == 0:
        return EmptyGraph()
    if n <= (SMALL_WINDOW if small is None else small):
        return SmallGraph(spo)
    return empty_graph(1).apply(None, spo)


def contained(graphs: list, rows: np.ndarray) -> np.ndarray:
    """Mask of ``rows`` ((n, 3) s, p, o) held by any of ``graphs``: one lookup per predicate."""
    out = np.zeros(len(rows), dtype=bool)
    if len(rows) == 0:
        return out
    preds = rows[:, 1]
    for pid in unique(preds).tolist():
        idx = np.flatnonzero(preds == pid)
        s, o = rows[idx, 0], rows[idx, 2]
        hit = np.zeros(len(idx), dtype=bool)
        for g in graphs:
            if g is None or isinstance(g, EmptyGraph):
                continue
            hit |= np.asarray(g.contains(pid, s, o), dtype=bool)
        out[idx] = hit
    return out


class _Collision(Exception):
    """Two different triples share a 64-bit hash: the caller rebuilds instead."""


def _counted(rows: np.ndarray, weight: np.ndarray):
    """Distinct rows with summed weights, sorted by hash: (hashes, rows, sums)."""
    h = triple_hash(rows)
    uh, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    urows = rows[first]
    if not (rows == urows[inv]).all():
        raise _Collision
    return uh, urows, np.bincount(inv, weights=weight, minlength=len(uh)).astype(np.int64)


class SlidingWindowGraph:
    """The graph of one window over one transient store, and how it changed at the last slides."""

    HISTORY = 16
    # GraphIndex.apply(minus, plus) beats a rebuild only for windows of tens of thousands of triples
    # and a change under ~1/20 of the window (measured from 1k to 200k triples)
    APPLY_MIN, APPLY_RATIO = 32768, 20

    def __init__(self, store):
        self.store = store
        self.g0 = self.g1 = 0
        self.chunks: list[tuple[int, np.ndarray]] = []   # (first seq, rows) of the window, in seq order
        self.graph = EmptyGraph()
        # the triples that occur more than once in the window, sorted by hash, with their counts
        self.dup_h, self.dup_rows, self.dup_cnt = _EMPTYH, _EMPTY3, _EMPTYI
        # the last slides: (range before, range after, plus, minus)
        self.history: collections.deque = collections.deque(maxlen=self.HISTORY)
        self.counted = True          # dup_* describe the window (a build without counts cannot slide)
        self.track_ttl = 0           # WindowCache: how long to keep sliding for a reader of the change
        self.slides = 0
        self.builds = 0

    # -- from scratch -------------------------------------------------------------------
    def build(self, spo: np.ndarray, g0: int, g1: int, counts: bool = True) -> None:
        """The graph of ``[g0, g1)`` from its triples ``spo``. ``counts``: also count the duplicate
        triples, which a later :meth:`slide` needs (skipped when nobody will slide)."""
        self.builds += 1
        spo = np.asarray(spo, dtype=np.int64).reshape(-1, 3)
        self.g0, self.g1 = g0, g1
        self.chunks = [(g0, spo)] if len(spo) else []
        self.graph = window_index(spo)
        self.history.clear()
        self.dup_h, self.dup_rows, self.dup_cnt = _EMPTYH, _EMPTY3, _EMPTYI
        self.counted = counts
        if counts and len(spo) and self.graph.n_triples != len(spo):
            try:
                h, rows, cnt = _counted(spo, np.ones(len(spo)))
            except _Collision:
                self.chunks = []   # no slide from here: the next instant rebuilds too
                self.g0 = self.g1 = -1
                return
            many = cnt > 1
            self.dup_h, self.dup_rows, self.dup_cnt = h[many], rows[many], cnt[many]

    # -- one step -----------------------------------------------------------------------
    def can_slide(self, g0: int, g1: int) -> bool:
        """Whether ``[g0, g1)`` follows the current range closely enough to slide to."""
        return (self.counted and self.g0 >= 0 and self.g0 <= g0 <= self.g1 <= g1
                and (g0 - self.g0) + (g1 - self.g1) < g1 - g0)

    def slide(self, new: np.ndarray, g0: int, g1: int) -> bool:
        """Move to ``[g0, g1)`` given the triples with seq in ``[self.g1, g1)``; False (nothing
        changed) when it cannot, and the caller rebuilds."""
        new = np.asarray(new, dtype=np.int64).reshape(-1, 3)
        gone, chunks = [], list(self.chunks)
        while chunks and chunks[0][0] < g0:
            a, rows = chunks[0]
            cut = min(len(rows), g0 - a)
            gone.append(rows[:cut])
            chunks[0:1] = [] if cut == len(rows) else [(a + cut, rows[cut:])]
        expired = np.concatenate(gone) if len(gone) > 1 else (gone[0] if gone else _EMPTY3)
        plus = minus = _EMPTY3
        dup = (self.dup_h, self.dup_rows, self.dup_cnt)
        if len(new) or len(expired):
            try:
                h, rows, d = _counted(np.concatenate([new, expired]),
                                      np.concatenate([np.ones(len(new)), -np.ones(len(expired))]))
            except _Collision:
                return False
            # count before: from the duplicates table, else 1 if the graph holds it, else 0
            pos = np.searchsorted(self.dup_h, h)
            in_dup = pos < len(self.dup_h)
            in_dup[in_dup] = self.dup_h[pos[in_dup]] == h[in_dup]
            if in_dup.any() and not (self.dup_rows[pos[in_dup]] == rows[in_dup]).all():
                return False
            c0 = contained([self.graph], rows).astype(np.int64)
            c0[in_dup] = self.dup_cnt[pos[in_dup]]
            c1 = c0 + d
            if (c1 < 0).any():
                return False
            plus = rows[(c0 == 0) & (c1 > 0)]
            minus = rows[(c0 > 0) & (c1 == 0)]
            keep = np.ones(len(self.dup_h), dtype=bool)
            keep[pos[in_dup]] = False
            many = c1 > 1
            if in_dup.any() or many.any():
                dh = np.concatenate([self.dup_h[keep], h[many]])
                order = np.argsort(dh, kind="stable")
                dup = (dh[order], np.concatenate([self.dup_rows[keep], rows[many]])[order],
                       np.concatenate([self.dup_cnt[keep], c1[many]])[order])
        if len(new):
            chunks.append((self.g1, new))
        graph = self.graph
        if len(plus) or len(minus):
            rows = chunks[0][1] if len(chunks) == 1 else np.concatenate([r for _, r in chunks])
            if (isinstance(graph, GraphIndex) and len(rows) >= self.APPLY_MIN
                    and self.APPLY_RATIO * (len(plus) + len(minus)) < len(rows)):
                graph = graph.apply(minus, plus)
            else:  # a fresh index (one sort of packed keys) beats merging every predicate's runs
                graph = window_index(rows)
        self.history.append(((self.g0, self.g1), (g0, g1), plus, minus))
        self.graph, self.chunks, self.g0, self.g1 = graph, chunks, g0, g1
        self.dup_h, self.dup_rows, self.dup_cnt = dup
        self.slides += 1
        return True

    def change(self, before: tuple[int, int], after: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
        """Net ``(plus, minus)`` from range ``before`` to range ``after`` over consecutive slides
        (a window read by queries with different instants slides more often than each reads it),
        or None when the history does not cover that."""
        hist = list(self.history)
        start = next((i for i in range(len(hist) - 1, -1, -1) if hist[i][0] == before), None)
        if start is None:
            return None
        steps = []
        for frm, to, plus, minus in hist[start:]:
            if steps and frm != steps[-1][1]:
                return None
            steps.append((frm, to, plus, minus))
            if to == after:
                break
        else:
            return None
        if len(steps) == 1:
            return steps[0][2], steps[0][3]
        parts = [r for *_, p, m in steps for r in (p, m)]
        weights = [w for *_, p, m in steps for w in (np.ones(len(p)), -np.ones(len(m)))]
        rows = np.concatenate(parts)
        if len(rows) == 0:
            return _EMPTY3, _EMPTY3
        try:
            _, urows, net = _counted(rows, np.concatenate(weights))
        except _Collision:
            return None
        return urows[net > 0], urows[net < 0]

    def rows(self) -> np.ndarray:
        if not self.chunks:
            return _EMPTY3
        return self.chunks[0][1] if len(self.chunks) == 1 else np.concatenate([r for _, r in self.chunks])
