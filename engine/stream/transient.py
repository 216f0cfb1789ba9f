"""Time-based transient store of one stream (Wukong+S section 4.1), with its stream index.

Layout. The triples of a stream are numbered in arrival order by a global
sequence number ``seq`` (never reused). They are kept in a ring of *slices*:
each slice holds the triples of a consecutive range of batches in
preallocated numpy arrays -- ``spo`` (capacity x 3, int64 ids) and ``tau``
(int64 ms) -- filled in arrival order. New slices are appended on the late
side; the GC frees whole slices on the early side. A batch never moves; a
batch larger than the room left in the open slice continues in the next one.
The :class:`~engine.stream.stream_index.StreamIndex` has one entry per batch
(batch id, tau range, seq range, slice and offset).

Since a stream admits only non-decreasing timestamps
(:mod:`engine.stream.progress`), ``tau`` is non-decreasing along ``seq``: a
time window ``lo < tau <= hi`` and a count window "last n with tau <= t" are
each one contiguous ``seq`` range, found by ``searchsorted`` over the index
and inside one boundary batch. Reading a range copies at most one piece per
slice it spans (no per-triple Python work).

Memory budget and GC. The budget bounds ``slice_bytes``, the slice
capacities (32 bytes per triple slot); ``bytes_used`` adds the stream index
(small: one 56-byte entry per live batch). ``gc(horizon_tau)`` frees every slice whose
triples all have ``tau <= horizon_tau``: the caller passes the smallest
horizon over the registered windows reading this stream
(:meth:`TransientStore.horizon_for` gives one window's horizon,
:func:`combine_horizons` the minimum). When an append would exceed the budget
the store runs the GC with the ``horizon`` callback (if one was given) and, if
the slices still needed do not leave room, raises :class:`TransientStoreFull`
-- a backpressure signal: nothing of the batch was stored.

Home. It lives in :mod:`engine.stream`, not :mod:`engine.kv`: only streams use it, and its
range reads take the one stream :class:`~engine.stream.windows.Window` (the persistent store
below knows nothing of streams).

Reads of data the GC already freed: ``strict=True`` raises
:class:`WindowEvicted`; by default the window holds what is still retained
(a query registered after the GC freed old data sees the retained part).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable

import numpy as np

from engine.errors import Category, JindouError
from engine.stream.stream_index import StreamIndex
from engine.stream.windows import Window, time_bounds

__all__ = ["TransientStore", "TransientStoreFull", "WindowEvicted", "combine_horizons",
           "unique_rows", "NO_READERS", "BYTES_PER_TRIPLE"]

#: horizon meaning "no registered window reads this stream": everything may be freed
NO_READERS = int(np.iinfo(np.int64).max)
#: s, p, o, tau as int64
BYTES_PER_TRIPLE = 32
_EMPTY3 = np.zeros((0, 3), dtype=np.int64)
_EMPTY1 = np.zeros(0, dtype=np.int64)


class TransientStoreFull(JindouError):
    """Backpressure: the batch does not fit in the stream's memory budget even after GC
    (HTTP 503 / the injector retries after the queries move on)."""

    kind = "backpressure"
    category = Category.BUDGET

    def __init__(self, stream: str, needed: int, used: int, budget: int):
        self.stream = stream
        self.needed = needed
        self.used = used
        self.budget = budget
        super().__init__(f"transient store of stream {stream!r} is full: {needed} more bytes needed, "
                         f"{used} of {budget} bytes used by data registered windows can still read")


class WindowEvicted(JindouError):
    """A strict read of a window whose data the GC has already freed."""

    kind = "window_evicted"


def combine_horizons(horizons: Iterable[int | None]) -> int | None:
    """GC horizon of a stream from the horizons of the windows reading it.

    ``None`` (keep everything, e.g. a query whose first instant is not known
    yet) wins; no windows at all gives :data:`NO_READERS`.
    """
    out = NO_READERS
    for h in horizons:
        if h is None:
            return None
        out = min(out, int(h))
    return out


_H1 = np.uint64(0x9E3779B97F4A7C15)
_H2 = np.uint64(0xC2B2AE3D27D4EB4F)
_H3 = np.uint64(0x165667B19E3779F9)


def triple_hash(rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each (s, p, o) row; equal rows hash equal, different rows almost never do."""
    u = np.asarray(rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = u[:, 0] * _H1
        h ^= u[:, 1] * _H2
        h ^= u[:, 2] * _H3
        h ^= h >> np.uint64(29)
    return h


def unique_rows(spo: np.ndarray) -> np.ndarray:
    """Distinct rows of an (n, 3) int64 array, in the order of their first occurrence.

    Groups equal rows by sorting a 64-bit hash of each row (one argsort instead
    of a 3-key lexsort); if two different rows share a hash it falls back to
    the lexsort.
    """
    spo = np.asarray(spo, dtype=np.int64).reshape(-1, 3)
    n = len(spo)
    if n <= 1:
        return spo.copy()
    h = triple_hash(spo)
    order = np.argsort(h)
    hs = h[order]
    same = hs[1:] == hs[:-1]
    dup = np.flatnonzero(same)
    if len(dup) and bool(np.any(spo[order[dup]] != spo[order[dup + 1]])):
        order = np.lexsort((spo[:, 2], spo[:, 1], spo[:, 0]))
        srt = spo[order]
        same = ~np.any(srt[1:] != srt[:-1], axis=1)
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    first = np.minimum.reduceat(order, starts)
    first.sort()
    return spo[first]


class _Slice:
    __slots__ = ("no", "base", "fill", "spo", "tau")

    def __init__(self, no: int, base: int, capacity: int):
        self.no = no
        self.base = base
        self.fill = 0
        self.spo = np.empty((capacity, 3), dtype=np.int64)
        self.tau = np.empty(capacity, dtype=np.int64)

    @property
    def capacity(self) -> int:
        return len(self.tau)

    @property
    def nbytes(self) -> int:
        return self.capacity * BYTES_PER_TRIPLE


class TransientStore:
    """The transient slices and stream index of one stream (thread-safe)."""

    def __init__(self, name: str = "", *, budget_bytes: int = 256 << 20,
                 slice_triples: int = 1 << 16,
                 horizon: Callable[[], int | None] | None = None):
        if slice_triples <= 0 or budget_bytes <= 0:
            raise ValueError("budget and slice size must be positive")
        self.name = name
        self.budget_bytes = int(budget_bytes)
        self.slice_triples = int(slice_triples)
        self.horizon = horizon
        self.index = StreamIndex()
        self._slices: list[_Slice] = []
        self._bases: list[int] = []          # base seq of each live slice
        self._next_slice = 0
        self._tail = 0                       # seq of the next triple
        self._last_tau: int | None = None
        self._last_batch: int | None = None
        self._freed_seq = 0                  # triples with seq < this were freed
        self._freed_tau: int | None = None   # largest tau freed
        self._lock = threading.RLock()
        self.gc_runs = 0
        self.freed_triples = 0

    # -- sizes ---------------------------------------------------------------
    @property
    def live_start(self) -> int:
        """Seq of the oldest retained triple (== ``end_seq`` when empty)."""
        return self._bases[0] if self._slices else self._tail

    @property
    def end_seq(self) -> int:
        return self._tail

    @property
    def n_triples(self) -> int:
        return self._tail - self.live_start

    @property
    def n_slices(self) -> int:
        return len(self._slices)

    @property
    def slice_bytes(self) -> int:
        """Bytes of the slices (what the budget bounds)."""
        return sum(s.nbytes for s in self._slices)

    @property
    def bytes_used(self) -> int:
        """Slices plus stream index."""
        return self.slice_bytes + self.index.nbytes

    @property
    def last_tau(self) -> int | None:
        return self._last_tau

    @property
    def freed_tau(self) -> int | None:
        """Largest timestamp the GC has freed (None if nothing was freed)."""
        return self._freed_tau

    def stats(self) -> dict:
        return {"triples": self.n_triples, "slices": self.n_slices, "batches": len(self.index),
                "bytes": self.bytes_used, "budget": self.budget_bytes, "gc_runs": self.gc_runs,
                "freed_triples": self.freed_triples}

    # -- writing -------------------------------------------------------------
    def append(self, s, p, o, tau, batch: int | None = None) -> int | None:
        """Append one batch (arrival order, non-decreasing ``tau`` not below earlier ones).

        Returns the batch id (``batch`` or the previous id + 1), ``None`` for an
        empty batch (nothing recorded). Raises :class:`TransientStoreFull` if it
        does not fit (nothing stored then).
        """
        s = np.asarray(s, dtype=np.int64).ravel()
        p = np.asarray(p, dtype=np.int64).ravel()
        o = np.asarray(o, dtype=np.int64).ravel()
        tau = np.asarray(tau, dtype=np.int64).ravel()
        n = len(tau)
        if not (len(s) == len(p) == len(o) == n):
            raise ValueError("s, p, o and tau must have the same length")
        return self._append(n, (s, p, o), tau, batch)

    def append_rows(self, spo: np.ndarray, tau, batch: int | None = None) -> int | None:
        """Like :meth:`append` with an (n, 3) id array."""
        spo = np.asarray(spo, dtype=np.int64).reshape(-1, 3)
        tau = np.asarray(tau, dtype=np.int64).ravel()
        if len(spo) != len(tau):
            raise ValueError("spo and tau must have the same length")
        return self._append(len(tau), spo, tau, batch)

    def _append(self, n: int, cols, tau: np.ndarray, batch: int | None) -> int | None:
        if n == 0:
            return None
        if n > 1 and bool(np.any(tau[1:] < tau[:-1])):
            raise ValueError("timestamps of a batch must be non-decreasing (admit them first)")
        with self._lock:
            if self._last_tau is not None and int(tau[0]) < self._last_tau:
                raise ValueError(f"timestamp {int(tau[0])} is below the stream's last stored "
                                 f"timestamp {self._last_tau}")
            if batch is None:
                batch = 0 if self._last_batch is None else self._last_batch + 1
            batch = int(batch)
            if self._last_batch is not None and batch <= self._last_batch:
                raise ValueError(f"batch ids must increase ({batch} after {self._last_batch})")
            new_cap = self._make_room(n)
            start_seq = self._tail
            if self._slices and self._slices[-1].fill < self._slices[-1].capacity:
                first = self._slices[-1]
            else:
                first = None
            slice_no = first.no if first is not None else self._next_slice
            offset = first.fill if first is not None else 0
            done = 0
            if first is not None:
                k = min(n, first.capacity - first.fill)
                self._write(first, cols, tau, 0, k)
                done = k
            if done < n:
                sl = _Slice(self._next_slice, self._tail, new_cap)
                self._next_slice += 1
                self._slices.append(sl)
                self._bases.append(sl.base)
                self._write(sl, cols, tau, done, n)
            self.index.append(batch, int(tau[0]), int(tau[-1]), start_seq, self._tail, slice_no, offset)
            self._last_tau = int(tau[-1])
            self._last_batch = batch
            return batch

    def _write(self, sl: _Slice, cols, tau: np.ndarray, a: int, b: int) -> None:
        f = sl.fill
        m = b - a
        if isinstance(cols, tuple):
            for j in range(3):
                sl.spo[f:f + m, j] = cols[j][a:b]
        else:
            sl.spo[f:f + m] = cols[a:b]
        sl.tau[f:f + m] = tau[a:b]
        sl.fill += m
        self._tail += m

    def _make_room(self, n: int) -> int:
        """Ensure ``n`` triples fit; returns the capacity of the new slice needed (0 if none).
        A full budget is first relieved by a GC up to the readers' horizon."""
        for attempt in range(2):
            room = 0
            if self._slices:
                last = self._slices[-1]
                room = last.capacity - last.fill
            need = n - room
            if need <= 0:
                return 0
            cap = max(self.slice_triples, need)
            if self.slice_bytes + cap * BYTES_PER_TRIPLE <= self.budget_bytes:
                return cap
            if attempt or self.horizon is None:
                break
            self._gc_locked(self.horizon())
        used = self.slice_bytes
        if used + need * BYTES_PER_TRIPLE <= self.budget_bytes:
            return need
        raise TransientStoreFull(self.name, need * BYTES_PER_TRIPLE, used, self.budget_bytes)

    # -- GC ------------------------------------------------------------------
    def gc(self, horizon_tau: int | None) -> int:
        """Free the slices whose triples all have ``tau <= horizon_tau``; returns bytes freed.

        ``None`` frees nothing; :data:`NO_READERS` frees everything.
        """
        with self._lock:
            return self._gc_locked(horizon_tau)

    def _gc_locked(self, horizon_tau: int | None) -> int:
        self.gc_runs += 1
        if horizon_tau is None:
            return 0
        h = int(horizon_tau)
        k = 0
        freed = 0
        while k < len(self._slices):
            sl = self._slices[k]
            if sl.fill and int(sl.tau[sl.fill - 1]) > h:
                break
            k += 1
        if not k:
            return 0
        for sl in self._slices[:k]:
            freed += sl.nbytes
            if sl.fill:
                top = int(sl.tau[sl.fill - 1])
                self._freed_tau = top if self._freed_tau is None else max(self._freed_tau, top)
            self.freed_triples += sl.fill
        gone = self._slices[k - 1]
        self._freed_seq = gone.base + gone.fill
        del self._slices[:k]
        del self._bases[:k]
        self.index.drop_before(self._freed_seq)
        return freed

    def horizon_for(self, window: Window, next_instant: int | None) -> int | None:
        """GC horizon of one window whose next instant to evaluate is ``next_instant``.

        Every triple with ``tau <=`` the result is unreachable by this window at
        ``next_instant`` and all later instants. ``None`` (keep all) for a query
        whose first instant is not known. Pass the oldest instant not yet fully
        evaluated, so an evaluation in progress keeps its data.
        """
        if next_instant is None:
            return None
        t = int(next_instant)
        if window.range_ms is not None:
            return time_bounds(window, t)[0]
        with self._lock:
            g1 = self._first_after(t)
            g0 = g1 - int(window.triples)
            live = self.live_start
            if live >= self._tail:
                return None if self._last_tau is None else self._last_tau
            g0 = max(g0, live)
            if g0 >= self._tail:  # cannot happen (g1 <= tail) but keep the bound safe
                return self._last_tau
            return self._tau_at(g0) - 1

    # -- locating ------------------------------------------------------------
    def _slice_of(self, seq: int) -> int:
        return bisect.bisect_right(self._bases, seq) - 1

    def _tau_at(self, seq: int) -> int:
        k = self._slice_of(seq)
        sl = self._slices[k]
        return int(sl.tau[seq - sl.base])

    def _first_after(self, x: int) -> int:
        """Seq of the first retained triple with ``tau > x`` (``end_seq`` if none)."""
        idx = self.index
        i = idx.first_after(x)
        if i >= len(idx):
            return self._tail
        e = idx._data[idx._head + i].tolist()   # (the entry's columns, not entry()'s dict: a hot path)
        a = max(e[3], self.live_start)   # (seq_start)
        if e[1] > x:   # (tau_min)
            return a
        # inside the boundary batch: find the slice holding the bound, then searchsorted in it
        b = e[4]   # (seq_end)
        k = self._slice_of(a)
        while True:
            sl = self._slices[k]
            hi = min(b, sl.base + sl.fill)
            if int(sl.tau[hi - 1 - sl.base]) > x or hi >= b:
                part = sl.tau[a - sl.base:hi - sl.base]
                return a + int(np.searchsorted(part, x, side="right"))
            a = hi
            k += 1

    def time_range(self, lo: int, hi: int, strict: bool = False) -> tuple[int, int]:
        """Seq range ``[g0, g1)`` of the retained triples with ``lo < tau <= hi``."""
        with self._lock:
            if strict and self._freed_tau is not None and self._freed_tau > lo:
                raise WindowEvicted(f"stream {self.name!r}: window ({lo}, {hi}] reaches data "
                                    f"freed up to {self._freed_tau}")
            g0 = self._first_after(int(lo))
            g1 = self._first_after(int(hi)) if hi > lo else g0
            return g0, max(g0, g1)

    def count_range(self, n: int, t: int, strict: bool = False) -> tuple[int, int]:
        """Seq range ``[g0, g1)`` of the last ``n`` triples with ``tau <= t``."""
        with self._lock:
            g1 = self._first_after(int(t))
            want = max(0, g1 - int(n))
            if strict and want < self._freed_seq:
                raise WindowEvicted(f"stream {self.name!r}: last {n} triples before {t} reach "
                                    f"data freed up to triple #{self._freed_seq}")
            return max(want, self.live_start), g1

    def window_range(self, window: Window, t: int, strict: bool = False) -> tuple[int, int]:
        """Seq range of ``window`` at instant ``t`` (its bounds: :func:`~engine.stream.windows.time_bounds`)."""
        if window.range_ms is not None:
            return self.time_range(*time_bounds(window, t), strict)
        return self.count_range(int(window.triples), int(t), strict)

    # -- reading -------------------------------------------------------------
    def read(self, g0: int, g1: int) -> tuple[np.ndarray, np.ndarray]:
        """Triples with seq in ``[g0, g1)``: ``(spo (n,3), tau (n,))`` in arrival order.

        The arrays may be views of a slice (never modified afterwards): do not write to them.
        """
        with self._lock:
            if g0 < self.live_start and g1 > g0:
                raise WindowEvicted(f"stream {self.name!r}: triples from #{g0} were freed")
            if g1 > self._tail:
                raise IndexError(f"triple #{g1 - 1} was not stored yet")
            if g1 <= g0:
                return _EMPTY3, _EMPTY1
            spo_parts, tau_parts = [], []
            k = self._slice_of(g0)
            a = g0
            while a < g1:
                sl = self._slices[k]
                e = min(g1, sl.base + sl.fill)
                spo_parts.append(sl.spo[a - sl.base:e - sl.base])
                tau_parts.append(sl.tau[a - sl.base:e - sl.base])
                a = e
                k += 1
        if len(spo_parts) == 1:
            return spo_parts[0], tau_parts[0]
        return np.concatenate(spo_parts), np.concatenate(tau_parts)

    def window_arrays(self, window: Window, t: int, strict: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
        """The window's triples at instant ``t`` with repeats: ``(spo, tau)`` in arrival order."""
        with self._lock:
            g0, g1 = self.window_range(window, t, strict)
            return self.read(g0, g1)

    def window_triples(self, window: Window, t: int, strict: bool = False) -> np.ndarray:
        """The window's content at ``t`` as a set: distinct (n, 3) rows, in order of first arrival."""
        spo, _ = self.window_arrays(window, t, strict)
        return unique_rows(spo)

    def oldest_tau(self, window: Window, t: int) -> int | None:
        """Timestamp of the oldest triple the window holds at ``t`` (None if empty)."""
        with self._lock:
            g0, g1 = self.window_range(window, t)
            return self._tau_at(g0) if g1 > g0 else None

    def __repr__(self) -> str:
        return (f"TransientStore({self.name!r}, triples={self.n_triples}, slices={self.n_slices}, "
                f"bytes={self.bytes_used})")
