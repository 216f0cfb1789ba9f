"""One shard of a graph: per predicate CSR arrays for the vertices it owns.

A shard owns the vertices ``v`` with ``v % n_shards == shard_no``. For each
predicate it holds the OUT adjacency of its subjects and the IN adjacency of
its objects (Wukong's differentiated partitioning: each shard's index arrays
list only its own vertices). Shards are immutable; a commit builds new
:class:`PredShard` objects only for the predicates it touched and shares the
others.

:class:`Shard` is the only interface :class:`engine.kv.graph.GraphIndex` uses to
read a shard (``expand``, ``contains``, ``index``, ``scan``), so a shard can
later live in another process or host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OUT, IN = 0, 1
_I32_MAX = np.iinfo(np.int32).max
_EMPTY64 = np.zeros(0, dtype=np.int64)


@dataclass(eq=False)
class CSR:
    """Sorted unique ``keys``, ``indptr`` (len(keys)+1) and ``indices``
    (neighbour lists, each sorted)."""

    keys: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.indptr.nbytes + self.indices.nbytes

    def __len__(self) -> int:
        return len(self.indices)

    def _as_key_dtype(self, vids: np.ndarray) -> np.ndarray:
        if self.keys.dtype == np.int32:
            # ids never reach INT32_MAX when int32 is used, and -1 is never an id
            return np.clip(vids, -1, _I32_MAX).astype(np.int32)
        return vids

    def find(self, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of each vid in keys, found mask)."""
        keys = self.keys
        if len(keys) == 0:
            return np.zeros(len(vids), dtype=np.int64), np.zeros(len(vids), dtype=bool)
        v = self._as_key_dtype(vids)
        pos = np.searchsorted(keys, v)
        pos = np.minimum(pos, len(keys) - 1)
        return pos, keys[pos] == v

    def expand(self, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(vids)
        if n == 0 or len(self.keys) == 0:
            return _EMPTY64, _EMPTY64
        pos, found = self.find(vids)
        lo = self.indptr[pos].astype(np.int64)
        cnt = np.where(found, self.indptr[pos + 1] - lo, 0)
        total = int(cnt.sum())
        if total == 0:
            return _EMPTY64, _EMPTY64
        rows = np.repeat(np.arange(n, dtype=np.int64), cnt)
        ends = np.cumsum(cnt)
        edge = np.arange(total, dtype=np.int64) + np.repeat(lo - (ends - cnt), cnt)
        return rows, self.indices[edge].astype(np.int64)

    def contains(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """For each i: is b[i] in the neighbour list of a[i]? (vectorized binary search)"""
        n = len(a)
        if n == 0 or len(self.keys) == 0:
            return np.zeros(n, dtype=bool)
        pos, found = self.find(a)
        lo = np.where(found, self.indptr[pos], 0).astype(np.int64)
        hi = np.where(found, self.indptr[pos + 1], 0).astype(np.int64)
        end = hi.copy()
        idx = self.indices
        bv = self._as_key_dtype(b) if idx.dtype == np.int32 else b
        active = np.flatnonzero(lo < hi)
        while len(active):
            la, ha = lo[active], hi[active]
            mid = (la + ha) >> 1
            less = idx[mid] < bv[active]
            lo[active] = np.where(less, mid + 1, la)
            hi[active] = np.where(less, ha, mid)
            active = active[lo[active] < hi[active]]
        ok = lo < end
        res = np.zeros(n, dtype=bool)
        sel = np.flatnonzero(ok)
        res[sel] = idx[lo[sel]] == bv[sel]
        return res

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """All (key, neighbour) pairs as int64 arrays, sorted by key then neighbour."""
        counts = np.diff(self.indptr)
        return np.repeat(self.keys.astype(np.int64), counts), self.indices.astype(np.int64)


def _empty_csr() -> CSR:
    return CSR(np.zeros(0, np.int32), np.zeros(1, np.int32), np.zeros(0, np.int32))


EMPTY_CSR = _empty_csr()


def csr_from_sorted_pairs(a: np.ndarray, b: np.ndarray, id_dtype) -> CSR:
    """CSR of pairs already sorted by (a, b) and unique."""
    n = len(a)
    if n == 0:
        return EMPTY_CSR
    start = np.empty(n, dtype=bool)
    start[0] = True
    np.not_equal(a[1:], a[:-1], out=start[1:])
    first = np.flatnonzero(start)
    ptr_dtype = np.int32 if n < _I32_MAX else np.int64
    indptr = np.empty(len(first) + 1, dtype=ptr_dtype)
    indptr[:-1] = first
    indptr[-1] = n
    return CSR(a[first].astype(id_dtype), indptr, b.astype(id_dtype))


@dataclass(eq=False)
class PredShard:
    """One predicate's OUT and IN adjacency inside one shard."""

    out: CSR
    inn: CSR
    files: dict | None = field(default=None, repr=False)  # set by persistence

    @property
    def nbytes(self) -> int:
        return self.out.nbytes + self.inn.nbytes

    def csr(self, direction: int) -> CSR:
        return self.out if direction == OUT else self.inn


class Shard:
    """Immutable per-shard map predicate id -> PredShard."""

    __slots__ = ("no", "n_shards", "preds")

    def __init__(self, no: int, n_shards: int, preds: dict[int, PredShard] | None = None):
        self.no = no
        self.n_shards = n_shards
        self.preds: dict[int, PredShard] = preds or {}

    def _csr(self, pid: int, direction: int) -> CSR:
        ps = self.preds.get(int(pid))
        return EMPTY_CSR if ps is None else ps.csr(direction)

    # ---- the interface GraphIndex uses
    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Neighbours of ``vids`` (all owned by this shard): (rows, nbrs), grouped by row."""
        return self._csr(pid, direction).expand(vids)

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        """Edge test for subjects ``s`` owned by this shard."""
        return self._csr(pid, OUT).contains(s, o)

    def index(self, pid: int, direction: int) -> np.ndarray:
        """Sorted subjects (OUT) / objects (IN) of ``pid`` owned by this shard."""
        return self._csr(pid, direction).keys

    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """(s, o) of all ``pid`` triples whose subject this shard owns, sorted."""
        return self._csr(pid, OUT).pairs()

    def degree_stats(self, pid: int) -> tuple[int, int, int]:
        """(triples, subjects, objects) owned here."""
        ps = self.preds.get(int(pid))
        if ps is None:
            return 0, 0, 0
        return len(ps.out.indices), len(ps.out.keys), len(ps.inn.keys)

    def with_preds(self, updates: dict[int, PredShard | None]) -> Shard:
        preds = dict(self.preds)
        for pid, ps in updates.items():
            if ps is None:
                preds.pop(pid, None)
            else:
                preds[pid] = ps
        return Shard(self.no, self.n_shards, preds)

    @property
    def nbytes(self) -> int:
        return sum(ps.nbytes for ps in self.preds.values())
