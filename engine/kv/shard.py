"""One shard of a graph: per predicate CSR arrays for the vertices it owns.

A shard owns the vertices :mod:`engine.kv.partition` assigns it. For each
predicate it holds the OUT adjacency of its subjects and the IN adjacency of
its objects (Wukong's differentiated partitioning: each shard's index arrays
list only its own vertices). Shards are immutable; :meth:`Shard.apply` builds
new :class:`PredShard` objects only for the predicates it touched and shares
the others.

:class:`Shard` implements :class:`engine.kv.api.ShardReader` and
:class:`engine.kv.api.ShardWriter`, the only calls
:class:`engine.kv.graph.GraphIndex` and :mod:`engine.kv.persist` make of a
shard, so a shard can later live in another process or host.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from engine.arrays import unique
from engine.kv import partition
from engine.kv.api import OUT, PredColumns

_I32_MAX = int(np.iinfo(np.int32).max)
_EMPTY64 = np.zeros(0, dtype=np.int64)

# A CSR gets a direct-address span table (see :meth:`CSR.table`) when its keys
# are dense: at most ``_DENSE_SLOTS_PER_KEY`` slots per key plus ``_DENSE_MIN_SLOTS``.
_DENSE_SLOTS_PER_KEY = 3
_DENSE_MIN_SLOTS = 256
# Without a table, probes at least this many and unsorted are sorted before the
# binary search (a sorted searchsorted is many times faster than a random one).
_SORT_PROBES = 2048
# Neighbour lists at most this long are tested by a Python ``in`` on a list.
_SHORT_LIST = 32


@dataclass(eq=False)
class CSR:
    """Sorted unique ``keys``, ``indptr`` (len(keys)+1) and ``indices``
    (neighbour lists, each sorted).

    Lookups of key ``v`` go through a lazily built direct-address span table
    when the keys are dense (:meth:`table`), else through a binary search of
    ``keys`` (vectorized) or a bucket table plus ``bisect`` (one key at a time,
    :meth:`lookup`). Either table has at most ``3 * len(keys) + 256`` int32/64
    entries; it is derived data (never persisted), built on first use, shared by
    every snapshot sharing the CSR, and counted in :attr:`nbytes`.
    ``_table`` = (stride, span table or None, lookup function, auxiliary bytes, span
    spec for :func:`list_lookups`)."""

    keys: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    _table: tuple | None = field(default=None, init=False, repr=False)

    @property
    def nbytes(self) -> int:
        n = self.keys.nbytes + self.indptr.nbytes + self.indices.nbytes
        t = self._table
        if t is not None:
            n += t[3]
        return n

    def __len__(self) -> int:
        return len(self.indices)

    # ------------------------------------------------------------ lookups
    def table(self, stride: int = 1):
        """``(base, width, dptr)`` or None. Key ``v`` has slot ``j = v // stride - base``
        (``0 <= j < width``) and its neighbours are ``indices[dptr[j]:dptr[j + 1]]``
        (empty for a slot without key); ``dptr[width] == dptr[width + 1] == len(indices)``
        so an out-of-range slot clamped to ``width`` is empty. ``stride`` is the
        shard count: a shard's keys share one residue, so ``v // stride`` is dense.
        Built on first use; None when the keys are too sparse for the memory budget."""
        t = self._table
        if t is None or t[0] != stride:
            t = self._prepare(stride)
        return t[1]

    def lookup(self, stride: int = 1):
        """A function ``v -> neighbours of v`` (a view of ``indices``, empty if absent)
        for one Python-int key at a time; scalar ops only (the small-input path)."""
        t = self._table
        if t is None or t[0] != stride:
            t = self._prepare(stride)
        return t[2]

    def _prepare(self, stride: int) -> tuple:
        tab = self._build_table(stride)
        fn, extra, spec = self._make_lookup(tab, stride)
        t = (stride, tab, fn, extra + (tab[2].nbytes if tab is not None else 0), spec)
        self._table = t  # benign race: concurrent builders store equivalent tuples
        return t

    def spec(self, stride: int = 1) -> tuple:
        """How one key's span is found (for :func:`list_lookups`): ``("dense", base, width,
        dptr)``, ``("bucket", base, width, shift, bptr)``, ``("search",)`` or ``("empty",)``;
        the tables are :meth:`lookup`'s own (built once, shared)."""
        t = self._table
        if t is None or t[0] != stride:
            t = self._prepare(stride)
        return t[4]

    def _make_lookup(self, tab, stride: int):
        """(function v -> neighbours, bytes of any auxiliary array it holds, span spec)."""
        idx = self.indices
        empty = idx[:0]
        if tab is not None:
            base, width, dptr = tab
            spec = ("dense", base, width, dptr)
            if stride == 1 and base == 0:
                def by_slot(v: int) -> np.ndarray:
                    if 0 <= v < width:
                        return idx[dptr[v]:dptr[v + 1]]
                    return empty
                return by_slot, 0, spec

            def by_strided_slot(v: int) -> np.ndarray:
                j = v // stride - base
                if 0 <= j < width:
                    return idx[dptr[j]:dptr[j + 1]]
                return empty
            return by_strided_slot, 0, spec
        keys, indptr = self.keys, self.indptr
        nk = len(keys)
        if nk == 0:
            return (lambda v: empty), 0, ("empty",)
        top = _I32_MAX if keys.dtype == np.int32 else int(np.iinfo(keys.dtype).max)
        kt = keys.dtype.type
        search = keys.searchsorted
        # Sparse keys: a bucket table over the slots (``2**shift`` slots a bucket,
        # as many buckets as the dense table's budget allows) narrows the binary
        # search to the keys of one bucket, done by ``bisect`` without a numpy call.
        base = int(keys[0]) // stride
        width = int(keys[-1]) // stride - base + 1
        budget = _DENSE_SLOTS_PER_KEY * nk + _DENSE_MIN_SLOTS
        local = keys.astype(np.int64)
        if stride > 1:
            local //= stride
        local -= base
        if budget < 1 or (nk > 1 and not (local[1:] > local[:-1]).all()):
            def by_search(v: int) -> np.ndarray:
                if v < 0 or v > top:
                    return empty
                i = search(kt(v))
                if i < nk and keys[i] == v:
                    return idx[indptr[i]:indptr[i + 1]]
                return empty
            return by_search, 0, ("search",)
        shift = 0
        while (width >> shift) >= budget:
            shift += 1
        n_buckets = ((width - 1) >> shift) + 1
        bptr = np.searchsorted(local, np.arange(n_buckets + 1, dtype=np.int64) << shift).astype(
            np.int32 if nk < _I32_MAX else np.int64)

        def by_bucket(v: int) -> np.ndarray:
            j = v // stride - base
            if 0 <= j < width:
                b = j >> shift
                e = bptr[b + 1]
                i = bisect_left(keys, v, bptr[b], e)  # (bisect reads numpy scalars: ~0.3 us)
                if i < e and keys[i] == v:
                    return idx[indptr[i]:indptr[i + 1]]
            return empty
        return by_bucket, bptr.nbytes, ("bucket", base, width, shift, bptr)

    def _build_table(self, stride: int):
        keys = self.keys
        nk = len(keys)
        if nk == 0:
            return None
        base = int(keys[0]) // stride
        width = int(keys[-1]) // stride - base + 1
        if width > _DENSE_SLOTS_PER_KEY * nk + _DENSE_MIN_SLOTS:
            return None
        local = keys.astype(np.int64)
        if stride > 1:
            local //= stride
        local -= base
        if nk > 1 and not (local[1:] > local[:-1]).all():
            return None  # keys of mixed residues: no dense slot numbering
        dptr = np.empty(width + 2, dtype=self.indptr.dtype)
        dptr[: width + 1] = self.indptr[np.searchsorted(local, np.arange(width + 1, dtype=np.int64))]
        dptr[width + 1] = dptr[width]
        return base, width, dptr

    def find(self, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of each vid in keys, found mask); ``vids`` int64."""
        keys = self.keys
        nk = len(keys)
        if nk == 0:
            return np.zeros(len(vids), dtype=np.int64), np.zeros(len(vids), dtype=bool)
        # int32 keys: probe with int32 (a wrapped out-of-range id finds some row,
        # rejected below by the exact int64 comparison); an int64 probe would make
        # searchsorted convert the whole key array.
        v = vids.astype(np.int32) if keys.dtype == np.int32 else vids
        n = len(v)
        if n >= _SORT_PROBES and not (v[1:] >= v[:-1]).all():
            order = np.argsort(v)
            pos = np.empty(n, dtype=np.intp)
            pos[order] = np.searchsorted(keys, v[order])
        else:
            pos = np.searchsorted(keys, v)
        np.minimum(pos, nk - 1, out=pos)
        return pos, keys[pos] == vids

    def spans(self, vids: np.ndarray, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(start in ``indices``, neighbour count) of each vid (count 0 if absent)."""
        t = self.table(stride)
        if t is not None:
            base, width, dptr = t
            if stride & (stride - 1) == 0:  # power of two (also 1): shift = floor division
                j = vids >> (stride.bit_length() - 1)
            else:
                j = vids // stride
            if base:
                j -= base
            ju = j.view(np.uint64)  # negative slots become huge and clamp too
            np.minimum(ju, width, out=ju)
            lo = dptr[j]
            return lo, dptr[1:][j] - lo
        pos, found = self.find(vids)
        lo = self.indptr[pos]
        cnt = self.indptr[1:][pos] - lo
        cnt[~found] = 0
        return lo, cnt

    def neighbours(self, v: int, stride: int = 1) -> np.ndarray:
        """Sorted neighbours of one key ``v`` (a view, key dtype; empty if absent)."""
        return self.lookup(stride)(v)

    def has(self, v: int, o: int, stride: int = 1) -> bool:
        """Is ``o`` a neighbour of ``v``?"""
        return has_neighbour(self.lookup(stride)(v), o)

    # ------------------------------------------------------------ bulk ops
    def expand(self, vids: np.ndarray, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Neighbours of int64 ``vids``: (rows, nbrs) grouped by row in input order."""
        n = len(vids)
        if n == 0 or len(self.keys) == 0:
            return _EMPTY64, _EMPTY64
        if n == 1:
            nb = self.neighbours(int(vids[0]), stride)
            return np.zeros(len(nb), dtype=np.int64), nb.astype(np.int64)
        lo, cnt = self.spans(vids, stride)
        ends = cnt.cumsum()  # int64 for int32 too (methods, not np.* wrappers: call-overhead bound)
        total = int(ends[-1])
        if total == 0:
            return _EMPTY64, _EMPTY64
        rows = np.arange(n, dtype=np.int64).repeat(cnt)
        ends -= lo  # -> start of the row in the output - start in indices
        ends -= cnt
        edge = np.arange(total, dtype=np.int64)
        edge -= ends.repeat(cnt)
        return rows, self.indices[edge].astype(np.int64)

    def contains(self, a: np.ndarray, b: np.ndarray, stride: int = 1) -> np.ndarray:
        """For each i: is b[i] in the neighbour list of a[i]? (vectorized binary search)"""
        n = len(a)
        if n == 0 or len(self.keys) == 0:
            return np.zeros(n, dtype=bool)
        lo, cnt = self.spans(a, stride)
        idx = self.indices
        last = len(idx) - 1
        end = lo + cnt
        # per row, the last position < b by descending power-of-two steps
        # (branchless, the same steps for all rows: log2(max count) rounds)
        pos = lo - 1
        step = (1 << int(cnt.max()).bit_length()) >> 1
        while step:
            cand = pos + step
            ok = cand < end
            np.minimum(cand, last, out=cand)  # (only rows with ok read a real value)
            ok &= idx[cand] < b
            np.copyto(pos, cand, where=ok)
            step >>= 1
        pos += 1  # lower bound of b in the row
        res = idx[np.minimum(pos, last)] == b
        res &= pos < end
        return res

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """All (key, neighbour) pairs as int64 arrays, sorted by key then neighbour."""
        counts = np.diff(self.indptr)
        return np.repeat(self.keys.astype(np.int64), counts), self.indices.astype(np.int64)


def has_neighbour(nb: np.ndarray, o: int) -> bool:
    """Is Python int ``o`` in the sorted neighbour list ``nb``?"""
    k = len(nb)
    if k == 0:
        return False
    if k <= _SHORT_LIST:
        return o in nb.tolist()
    if o < 0 or o > np.iinfo(nb.dtype).max:
        return False
    i = nb.searchsorted(nb.dtype.type(o))
    return bool(i < k and nb[i] == o)


def _no_neighbours(v: int) -> np.ndarray:
    return _EMPTY64


def _empty_csr() -> CSR:
    return CSR(np.zeros(0, np.int32), np.zeros(1, np.int32), np.zeros(0, np.int32))


EMPTY_CSR = _empty_csr()


def csr_of(keys: np.ndarray, indptr: np.ndarray, indices: np.ndarray) -> CSR:
    """A CSR over ready arrays (keys sorted unique; a key may have an empty list)."""
    return CSR(keys, indptr, indices)


def csr_from_sorted_pairs(a: np.ndarray, b: np.ndarray, id_dtype, values_dtype=None) -> CSR:
    """CSR of pairs already sorted by (a, b) and unique (``a`` may repeat). Keys are of
    ``id_dtype`` (None: int32 where they fit, else ``a``'s), values of ``values_dtype``
    (default ``id_dtype``; ``b`` is not copied when it already has that dtype)."""
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
    keys = a[first]
    if id_dtype is None:
        id_dtype = np.int32 if int(keys[-1]) < _I32_MAX else keys.dtype
    return CSR(keys.astype(id_dtype), indptr, b.astype(values_dtype or id_dtype, copy=False))


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


def segment(c: PredColumns, files: dict | None = None) -> PredShard:
    """One predicate's segment over the six arrays of ``c`` (zero-copy)."""
    return PredShard(CSR(c.out_keys, c.out_indptr, c.out_indices), CSR(c.in_keys, c.in_indptr, c.in_indices),
                     files=files)


_LOW32 = np.uint64(0xFFFFFFFF)
_SH32 = np.uint64(32)


def _pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a, b) id pairs -> one sortable uint64 (ids must be < 2**32)."""
    return (a.astype(np.uint64) << _SH32) | b.astype(np.uint64)


def _unpack(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (k >> _SH32).astype(np.int64), (k & _LOW32).astype(np.int64)


def _member(sorted_arr: np.ndarray, q: np.ndarray) -> np.ndarray:
    if len(sorted_arr) == 0 or len(q) == 0:
        return np.zeros(len(q), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_arr, q), len(sorted_arr) - 1)
    return sorted_arr[pos] == q


def _merge_csr(csr: CSR | None, rem: np.ndarray, add: np.ndarray) -> CSR | None:
    """CSR with sorted packed pairs ``rem`` removed and ``add`` (absent, sorted) merged in."""
    if len(rem) == 0 and len(add) == 0:
        return csr
    if csr is not None and len(csr):
        a, b = csr.pairs()
        packed = _pack(a, b)
        if len(rem):
            packed = packed[~_member(rem, packed)]
        if len(add):
            packed = np.sort(np.concatenate([packed, add]), kind="stable")  # merges two sorted runs
    else:
        packed = add
    if len(packed) == 0:
        return EMPTY_CSR
    a, b = _unpack(packed)
    mx = max(int(a[-1]), int(b.max()))
    return csr_from_sorted_pairs(a, b, np.int32 if mx < np.iinfo(np.int32).max else np.int64)


def _group(rows: np.ndarray) -> dict[int, np.ndarray]:
    """(n, 3) rows by predicate (column 1); rows already sorted by it are not re-sorted."""
    if len(rows) == 0:
        return {}
    p = rows[:, 1]
    if len(p) > 1 and not (p[1:] >= p[:-1]).all():
        rows = rows[np.argsort(p, kind="stable")]
        p = rows[:, 1]
    cut = np.flatnonzero(p[1:] != p[:-1]) + 1
    starts = [0, *cut.tolist()]
    ends = [*cut.tolist(), len(rows)]
    return {int(p[a]): rows[a:b] for a, b in zip(starts, ends, strict=True)}


_NO_ROWS = np.zeros((0, 3), dtype=np.int64)


class Shard:
    """Immutable per-shard map predicate id -> PredShard (see module docstring)."""

    __slots__ = ("no", "n_shards", "preds", "_stride")

    def __init__(self, no: int, n_shards: int, preds: dict[int, PredShard] | None = None):
        self.no = no
        self.n_shards = n_shards
        self.preds: dict[int, PredShard] = preds or {}
        self._stride = partition.stride(n_shards)

    def _csr(self, pid: int, direction: int) -> CSR:
        ps = self.preds.get(int(pid))
        return EMPTY_CSR if ps is None else ps.csr(direction)

    # ---- ShardReader
    def pids(self):
        return iter(self.preds)

    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Neighbours of int64 ``vids``: (rows, nbrs), grouped by row in input order; an
        id another shard owns has none (the span table is indexed by ``v // stride``,
        so such an id must not reach it)."""
        csr = self._csr(pid, direction)
        if self.n_shards > 1 and len(vids):
            mine = partition.owned_mask(vids, self.n_shards, self.no)
            if not mine.all():
                sel = mine.nonzero()[0]
                r, nb = csr.expand(vids[sel], self._stride)
                return sel[r], nb
        return csr.expand(vids, self._stride)

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        """Edge test for int64 subjects ``s`` (False for a subject another shard owns)."""
        csr = self._csr(pid, OUT)
        if self.n_shards > 1 and len(s):
            mine = partition.owned_mask(s, self.n_shards, self.no)
            if not mine.all():
                out = np.zeros(len(s), dtype=bool)
                sel = mine.nonzero()[0]
                out[sel] = csr.contains(s[sel], o[sel], self._stride)
                return out
        return csr.contains(s, o, self._stride)

    def local_lookup(self, pid: int, direction: int):
        """A function ``vid -> sorted neighbours`` (key dtype) for one vertex owned by
        this shard at a time: the small-input path of :class:`GraphIndex` and the
        tuple-at-a-time executor."""
        ps = self.preds.get(pid)
        if ps is None:
            return _no_neighbours
        return (ps.out if direction == OUT else ps.inn).lookup(self._stride)

    def local_csr(self, pid: int, direction: int) -> CSR | None:
        """The in-process CSR of ``pid`` in ``direction`` (None: the predicate is not
        here): :func:`engine.kv.lists.list_lookups` reads its spans directly."""
        ps = self.preds.get(pid)
        if ps is None:
            return None
        return ps.out if direction == OUT else ps.inn

    def index(self, pid: int, direction: int) -> np.ndarray:
        """Sorted subjects (OUT) / objects (IN) of ``pid`` owned by this shard."""
        return self._csr(pid, direction).keys

    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """(s, o) of all ``pid`` triples whose subject this shard owns, sorted."""
        return self._csr(pid, OUT).pairs()

    def vertices(self) -> np.ndarray:
        parts = [_EMPTY64]
        for ps in self.preds.values():
            parts.append(ps.out.keys.astype(np.int64))
            parts.append(ps.inn.keys.astype(np.int64))
        return unique(np.concatenate(parts))

    def degree_stats(self, pid: int) -> tuple[int, int, int]:
        """(triples, subjects, objects) owned here."""
        ps = self.preds.get(int(pid))
        if ps is None:
            return 0, 0, 0
        return len(ps.out.indices), len(ps.out.keys), len(ps.inn.keys)

    def export(self):
        for pid, ps in self.preds.items():
            yield pid, PredColumns(ps.out.keys, ps.out.indptr, ps.out.indices,
                                   ps.inn.keys, ps.inn.indptr, ps.inn.indices), ps

    @classmethod
    def of_segments(cls, no: int, n_shards: int, segments: dict[int, PredShard]) -> Shard:
        """The shard holding ``segments`` (pid -> :func:`segment`), shared, not copied:
        a cluster's serving process reuses a worker's unchanged segments (and their
        lookup tables) from one version to the next."""
        return cls(no, n_shards, dict(segments))

    def segments(self) -> dict[int, PredShard]:
        """pid -> this shard's immutable segment of that predicate (a copy of the map)."""
        return dict(self.preds)

    @classmethod
    def from_columns(cls, no: int, n_shards: int, segments: dict[int, tuple[PredColumns, dict | None]]) -> Shard:
        """The shard holding ``segments`` (pid -> (columns, persistence tag)) as
        zero-copy CSRs: the import side of :meth:`export`."""
        return cls(no, n_shards, {int(pid): segment(c, files) for pid, (c, files) in segments.items()})

    # ---- ShardWriter
    def apply(self, remove: np.ndarray | None, add: np.ndarray | None) -> Shard:
        """See :meth:`engine.kv.api.ShardWriter.apply`. Only the CSRs (predicate,
        direction) that really change are rebuilt, by merging sorted runs."""
        rg = _group(_NO_ROWS if remove is None else remove)
        ag = _group(_NO_ROWS if add is None else add)
        updates: dict[int, PredShard | None] = {}
        for pid in sorted(rg.keys() | ag.keys()):
            r, a = rg.get(pid), ag.get(pid)
            ps = self.preds.get(pid)
            o_csr = ps.out if ps is not None else None
            i_csr = ps.inn if ps is not None else None
            new_out = self._apply_csr(o_csr, r, a, 0, 2)
            new_in = self._apply_csr(i_csr, r, a, 2, 0)
            if new_out is o_csr and new_in is i_csr:
                continue
            if (new_out is None or len(new_out) == 0) and (new_in is None or len(new_in) == 0):
                if ps is not None:
                    updates[pid] = None
            else:
                updates[pid] = PredShard(new_out if new_out is not None else EMPTY_CSR,
                                         new_in if new_in is not None else EMPTY_CSR)
        if not updates:
            return self
        preds = dict(self.preds)
        for pid, ps in updates.items():
            if ps is None:
                preds.pop(pid, None)
            else:
                preds[pid] = ps
        return Shard(self.no, self.n_shards, preds)

    def _apply_csr(self, csr: CSR | None, r: np.ndarray | None, a: np.ndarray | None, ki: int, vi: int
                   ) -> CSR | None:
        """``csr`` (keys from column ``ki``, neighbours from ``vi``) after removing the
        rows ``r`` and adding ``a`` whose key this shard owns; ``csr`` itself if unchanged."""
        n = self.n_shards
        empty = np.zeros(0, np.uint64)
        rk = ak = empty
        if r is not None:
            if n > 1:
                r = r[partition.owned_mask(r[:, ki], n, self.no)]
            if len(r):
                rk = unique(_pack(r[:, ki], r[:, vi]))
        if a is not None:
            if n > 1:
                a = a[partition.owned_mask(a[:, ki], n, self.no)]
            if len(a):
                ak = unique(_pack(a[:, ki], a[:, vi]))
        if csr is None or len(csr) == 0:
            rk = empty  # nothing to remove from
        elif len(rk) and len(ak):
            rk = rk[~_member(ak, rk)]  # removed then re-added: stays (or gets added below)
        if csr is not None and len(csr):
            if len(rk):
                k_, v_ = _unpack(rk)
                rk = rk[csr.contains(k_, v_, self._stride)]
            if len(ak):
                k_, v_ = _unpack(ak)
                ak = ak[~csr.contains(k_, v_, self._stride)]
        if len(rk) == 0 and len(ak) == 0:
            return csr
        return _merge_csr(csr, rk, ak)

    @property
    def nbytes(self) -> int:
        return sum(ps.nbytes for ps in self.preds.values())
