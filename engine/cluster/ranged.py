"""A shard whose CSR arrays live in another process or host, read by ranges.

The coordinator reads a worker's partition in place (Wukong's one-sided reads):
per predicate the six arrays of :class:`engine.kv.api.PredColumns` stay at the
worker and are named by small JSON-able *descriptors* (``dtype``, ``length``
plus transport fields: an RDMA ``addr``/``rkey``, a shared-memory name, ...).
:class:`RangedShard` keeps only the index vertices locally -- each CSR's
``keys`` and ``indptr``, fetched whole once per immutable segment -- and reads
neighbour lists ``indices[indptr[i]:indptr[i + 1]]`` on demand, coalescing the
ranges of one call into few reads (a round trip costs more than reading a
small gap).

:class:`LocalRangeReader` serves ranges of numpy arrays of this very process:
the same-process case of the transport.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import Protocol, runtime_checkable

import numpy as np

from engine.arrays import unique
from engine.kv.api import OUT, PredColumns, ShardReader

__all__ = ["RangeReader", "RangedShard", "RangedSegment", "LocalRangeReader", "describe_shard", "COLUMNS"]

COLUMNS = PredColumns._fields  # the six descriptor names of a segment
_EMPTY64 = np.zeros(0, dtype=np.int64)

# Ranges of one call are merged into one read when the bytes between them are at
# most this many, or when the whole span is at most _DENSE_FACTOR times the
# bytes needed; and one call never makes more than this many reads (the smallest
# gaps are read through instead).
_GAP_BYTES = 16384
_DENSE_FACTOR = 2
_MAX_READS = 64
_SORT_PROBES = 2048


@runtime_checkable
class RangeReader(Protocol):
    """Reads elements ``[start, stop)`` of the array a descriptor names.

    ``read`` returns an array of ``np.dtype(desc["dtype"])`` and length
    ``stop - start`` that the caller may keep (a copy, or a view of memory that
    never changes). A reader may also offer ``read_many(desc, starts, stops) ->
    list[np.ndarray]`` to issue several ranges in one round; :class:`RangedShard`
    uses it when present."""

    def read(self, desc: dict, start: int, stop: int) -> np.ndarray:
        ...


def _check_range(desc: dict, start: int, stop: int) -> None:
    if not 0 <= start <= stop <= int(desc["length"]):
        raise ValueError(f"range [{start}, {stop}) outside an array of {desc['length']} elements")


class LocalRangeReader:
    """A :class:`RangeReader` over numpy arrays of this process (the same-process
    case of the transport, e.g. a worker thread's own partition; also what the
    tests of :class:`RangedShard`'s logic read through). ``register`` plays the
    exporter's part. ``reads``/``elements`` count the calls and elements served,
    so coalescing is observable."""

    def __init__(self):
        self._arrays: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.reads = 0
        self.elements = 0

    def register(self, arr: np.ndarray) -> dict:
        """The descriptor of a 1-d array (kept alive; it must not be written to)."""
        arr = np.ascontiguousarray(arr)
        if arr.ndim != 1:
            raise ValueError("only 1-d arrays are served")
        with self._lock:
            self._arrays.append(arr)
            key = len(self._arrays) - 1
        return {"key": key, "dtype": arr.dtype.str, "length": len(arr)}

    def read(self, desc: dict, start: int, stop: int) -> np.ndarray:
        _check_range(desc, start, stop)
        self.reads += 1
        self.elements += stop - start
        return self._arrays[desc["key"]][start:stop]


class IndexMeta:
    """One CSR's index vertices held locally: sorted unique ``keys`` and ``indptr``."""

    __slots__ = ("keys", "indptr")

    def __init__(self, keys: np.ndarray, indptr: np.ndarray):
        self.keys = keys
        self.indptr = indptr

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.indptr.nbytes

    def spans(self, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start in indices, neighbour count) of each int64 vid, count 0 if not a key."""
        keys = self.keys
        nk = len(keys)
        if nk == 0:
            return np.zeros(len(vids), dtype=np.int64), np.zeros(len(vids), dtype=np.int64)
        # int32 keys are probed with int32 (an id past the range wraps to some row,
        # rejected by the exact comparison below): an int64 probe would make
        # searchsorted convert the whole key array
        v = vids.astype(np.int32) if keys.dtype == np.int32 else vids
        if len(v) >= _SORT_PROBES and not (v[1:] >= v[:-1]).all():
            order = np.argsort(v)  # a sorted probe is much faster than a random one
            pos = np.empty(len(v), dtype=np.intp)
            pos[order] = np.searchsorted(keys, v[order])
        else:
            pos = np.searchsorted(keys, v)
        np.minimum(pos, nk - 1, out=pos)
        lo = self.indptr[pos].astype(np.int64)
        cnt = self.indptr[1:][pos].astype(np.int64)
        cnt -= lo
        cnt[keys[pos] != vids] = 0
        return lo, cnt


class RangedSegment:
    """One predicate's six descriptors at a worker (immutable: a new version of
    the predicate gets new arrays, hence new descriptors) and its index metadata
    once fetched. ``files`` is persistence's tag, as on an in-process shard's segments."""

    __slots__ = ("descs", "files", "_meta", "__weakref__")

    def __init__(self, descs: dict):
        missing = [c for c in COLUMNS if c not in descs]
        if missing:
            raise ValueError(f"segment descriptors lack {missing}")
        self.descs = {c: descs[c] for c in COLUMNS}
        self.files = None
        self._meta: list[IndexMeta | None] = [None, None]

    def meta(self, direction: int, reader: RangeReader) -> IndexMeta:
        """``keys`` and ``indptr`` of one direction, fetched whole on first use."""
        m = self._meta[direction]
        if m is None:
            pre = "out" if direction == OUT else "in"
            kd, pd = self.descs[f"{pre}_keys"], self.descs[f"{pre}_indptr"]
            keys = _read_whole(reader, kd)
            indptr = _read_whole(reader, pd) if int(pd["length"]) else np.zeros(1, dtype=np.int64)
            m = IndexMeta(keys, indptr)
            self._meta[direction] = m  # benign race: concurrent fetches store equal arrays
        return m

    @property
    def cached_nbytes(self) -> int:
        return sum(m.nbytes for m in self._meta if m is not None)


def _read_whole(reader: RangeReader, desc: dict) -> np.ndarray:
    n = int(desc["length"])
    if n == 0:
        return np.zeros(0, dtype=np.dtype(desc["dtype"]))
    return reader.read(desc, 0, n)


def _segment_key(descs: dict) -> str:
    return json.dumps({c: descs[c] for c in COLUMNS}, sort_keys=True)


class RangedShard:
    """A :class:`engine.kv.api.ShardReader` for partition ``no`` of ``n_shards``
    whose arrays are read through ``reader``: ``segments`` maps each predicate
    to its six descriptors (the names of :class:`PredColumns`).

    ``cache`` (a mapping, optional) shares :class:`RangedSegment` objects
    between the shards of successive snapshots: an untouched predicate keeps its
    descriptors, so its index metadata is fetched once and :meth:`export` yields
    the same segment object (a ``weakref.WeakValueDictionary`` keeps only the
    segments some shard still uses). An id this shard does not own reads as a vertex
    without edges (its keys list owned vertices only).

    ``gap_bytes``, ``dense_factor`` and ``max_reads`` trade bytes read for round
    trips (see :meth:`_fetch`): a transport with costly bytes wants them lower."""

    def __init__(self, no: int, n_shards: int, segments: dict, reader: RangeReader, *,
                 cache: MutableMapping | None = None, gap_bytes: int = _GAP_BYTES, max_reads: int = _MAX_READS,
                 dense_factor: float = _DENSE_FACTOR):
        self._no = int(no)
        self._n_shards = int(n_shards)
        self._reader = reader
        self._read_many = getattr(reader, "read_many", None)
        self._gap_bytes = int(gap_bytes)
        self._max_reads = max(1, int(max_reads))
        self._dense = float(dense_factor)
        self._segs: dict[int, RangedSegment] = {}
        for pid, descs in segments.items():
            if cache is None:
                seg = RangedSegment(descs)
            else:
                key = _segment_key(descs)
                seg = cache.get(key)
                if seg is None:
                    seg = RangedSegment(descs)
                    cache[key] = seg  # benign race: a concurrent twin only costs a second fetch
            self._segs[int(pid)] = seg

    @property
    def no(self) -> int:
        return self._no

    @property
    def n_shards(self) -> int:
        return self._n_shards

    @property
    def nbytes(self) -> int:
        """Bytes held locally: the index metadata fetched so far."""
        return sum(s.cached_nbytes for s in self._segs.values())

    # ------------------------------------------------------------ metadata only
    def pids(self) -> Iterator[int]:
        return iter(self._segs)

    def degree_stats(self, pid: int) -> tuple[int, int, int]:
        seg = self._segs.get(int(pid))
        if seg is None:
            return 0, 0, 0
        d = seg.descs
        return int(d["out_indices"]["length"]), int(d["out_keys"]["length"]), int(d["in_keys"]["length"])

    def index(self, pid: int, direction: int) -> np.ndarray:
        seg = self._segs.get(int(pid))
        if seg is None:
            return np.zeros(0, dtype=np.int32)
        return seg.meta(direction, self._reader).keys

    def vertices(self) -> np.ndarray:
        parts = [_EMPTY64]
        for seg in self._segs.values():
            parts.append(seg.meta(OUT, self._reader).keys.astype(np.int64))
            parts.append(seg.meta(1 - OUT, self._reader).keys.astype(np.int64))
        return unique(np.concatenate(parts))

    def local_lookup(self, pid: int, direction: int):
        return None  # the neighbour lists are not in this process

    # ------------------------------------------------------------ range reads
    def _spans(self, pid: int, direction: int, vids: np.ndarray):
        """(descriptor of the indices, start in them, count) of every vid; None when
        the predicate has no such CSR here."""
        seg = self._segs.get(int(pid))
        if seg is None:
            return None
        prefix = "out" if direction == OUT else "in"
        if int(seg.descs[f"{prefix}_keys"]["length"]) == 0:
            return None
        lo, cnt = seg.meta(direction, self._reader).spans(vids)
        return seg.descs[f"{prefix}_indices"], lo, cnt

    def _fetch(self, desc: dict, lo: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Read the ranges ``[lo[i], lo[i] + cnt[i])`` of the array ``desc`` names:
        ``(buf, off)`` with range i at ``buf[off[i]:off[i] + cnt[i]]``.

        CSR rows are disjoint, so distinct starts are distinct ranges; sorted,
        consecutive ranges are merged into one read across gaps of at most
        ``gap_bytes`` (or all into one when the span is at most ``dense_factor``
        times the elements needed), keeping at most
        ``max_reads`` reads by reading through the smallest of the other gaps."""
        itemsize = np.dtype(desc["dtype"]).itemsize
        off = np.zeros(len(lo), dtype=np.int64)
        need = cnt > 0
        r_lo = lo[need]
        if len(r_lo) == 0:
            return np.zeros(0, dtype=np.dtype(desc["dtype"])), off
        order = np.argsort(r_lo, kind="stable")
        s_lo = r_lo[order]
        s_hi = s_lo + cnt[need][order]
        first = np.empty(len(s_lo), dtype=bool)
        first[0] = True
        np.not_equal(s_lo[1:], s_lo[:-1], out=first[1:])
        u_lo, u_hi = s_lo[first], s_hi[first]
        gaps = u_lo[1:] - u_hi[:-1]
        needed = int((u_hi - u_lo).sum())
        span = int(u_hi[-1] - u_lo[0])
        if span <= self._dense * needed or span * itemsize <= self._gap_bytes:
            cut = np.zeros(0, dtype=np.int64)
        else:
            cut = np.flatnonzero(gaps * itemsize > self._gap_bytes)
            k = self._max_reads - 1
            if len(cut) > k:  # keep the k largest gaps only
                kth = len(cut) - k
                cut = np.sort(cut[np.argpartition(gaps[cut], kth)[kth:]]) if k else cut[:0]
        b_first = np.concatenate([[0], cut + 1])  # index in u_* of each block's first range
        b_last = np.concatenate([cut, [len(u_lo) - 1]])
        b_start, b_stop = u_lo[b_first], u_hi[b_last]
        starts, stops = b_start.tolist(), b_stop.tolist()
        if self._read_many is not None and len(starts) > 1:
            parts = self._read_many(desc, starts, stops)
        else:
            parts = [self._reader.read(desc, a, b) for a, b in zip(starts, stops, strict=True)]
        for p, a, b in zip(parts, starts, stops, strict=True):
            if len(p) != b - a:
                raise ValueError(f"a read of [{a}, {b}) returned {len(p)} elements")
        buf = parts[0] if len(parts) == 1 else np.concatenate(parts)
        b_len = b_stop - b_start
        b_base = b_len.cumsum()
        b_base -= b_len  # start of each block in buf
        blk = np.zeros(len(u_lo), dtype=np.int64)
        blk[b_first[1:]] = 1
        blk = blk.cumsum()
        u_off = u_lo - b_start[blk] + b_base[blk]
        off[need] = u_off[np.searchsorted(u_lo, r_lo)]
        return buf, off

    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vids = np.asarray(vids, dtype=np.int64)
        n = len(vids)
        sp = self._spans(pid, direction, vids) if n else None
        if sp is None:
            return _EMPTY64, _EMPTY64
        desc, lo, cnt = sp
        ends = cnt.cumsum()
        total = int(ends[-1])
        if total == 0:
            return _EMPTY64, _EMPTY64
        buf, off = self._fetch(desc, lo, cnt)
        rows = np.arange(n, dtype=np.int64).repeat(cnt)
        ends -= off  # -> start of the row in the output - start in buf
        ends -= cnt
        edge = np.arange(total, dtype=np.int64)
        edge -= ends.repeat(cnt)
        return rows, buf[edge].astype(np.int64)

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        s = np.asarray(s, dtype=np.int64)
        o = np.asarray(o, dtype=np.int64)
        n = len(s)
        sp = self._spans(pid, OUT, s) if n else None
        if sp is None:
            return np.zeros(n, dtype=bool)
        desc, lo, cnt = sp
        if not cnt.any():
            return np.zeros(n, dtype=bool)
        buf, start = self._fetch(desc, lo, cnt)
        last = len(buf) - 1
        end = start + cnt
        # per row, the last position < o by descending power-of-two steps (the
        # same steps for all rows: log2(max count) vectorized rounds)
        pos = start - 1
        step = (1 << int(cnt.max()).bit_length()) >> 1
        while step:
            cand = pos + step
            ok = cand < end
            np.minimum(cand, last, out=cand)
            ok &= buf[cand] < o
            np.copyto(pos, cand, where=ok)
            step >>= 1
        pos += 1
        res = buf[np.minimum(pos, last)] == o
        res &= pos < end
        return res

    # ------------------------------------------------------------ whole columns
    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        seg = self._segs.get(int(pid))
        if seg is None or int(seg.descs["out_indices"]["length"]) == 0:
            return _EMPTY64, _EMPTY64
        m = seg.meta(OUT, self._reader)
        nb = _read_whole(self._reader, seg.descs["out_indices"])
        return np.repeat(m.keys.astype(np.int64), np.diff(m.indptr)), nb.astype(np.int64)

    def export(self) -> Iterator[tuple[int, PredColumns, RangedSegment]]:
        r = self._reader
        for pid, seg in self._segs.items():
            mo, mi = seg.meta(OUT, r), seg.meta(1 - OUT, r)
            yield pid, PredColumns(mo.keys, mo.indptr, _read_whole(r, seg.descs["out_indices"]),
                                   mi.keys, mi.indptr, _read_whole(r, seg.descs["in_indices"])), seg


def describe_shard(shard: ShardReader, register: Callable[[np.ndarray], dict]) -> dict[int, dict[str, dict]]:
    """The ``segments`` argument of :class:`RangedShard` for a shard held here:
    every exported array passed through ``register`` (an exporter's, which
    returns its descriptor)."""
    out: dict[int, dict[str, dict]] = {}
    for pid, cols, _seg in shard.export():
        out[int(pid)] = {name: register(arr) for name, arr in zip(COLUMNS, cols, strict=True)}
    return out
