"""Per-stream event-time progress (the *Time* bullet of the continuous-query contract).

Every stream has a progress ``P`` (integer milliseconds, ``None`` before the
stream has received any timestamp): all elements with ``tau < P`` have arrived.

Rules, applied element by element in arrival order (also inside one batch):

* an element with ``tau < P`` is **rejected** (counted in ``rejected``, never
  silently dropped: the caller reports it, see :class:`LateElementError`);
* otherwise it is accepted and raises ``P`` to ``tau`` (``tau == P`` is allowed,
  so later elements may still carry the current progress);
* a heartbeat ``T`` raises ``P`` to ``T``; a lower ``T`` changes nothing and is
  not an error.

A stream registered with ``clock="arrival"`` stamps every element with its
arrival time (wall-clock ms, kept monotone) and its progress follows the wall
clock: reading :attr:`StreamClock.progress` advances it to "now".

The admission of a batch is vectorized: the progress seen by element ``i`` is
``max(P0, max(tau[:i]))`` (a rejected element is below the running maximum, so
including it in the maximum changes nothing), hence
``accepted = tau >= maximum.accumulate`` of the shifted array.

Integration notes (the coordinator / injector own these):

* ``admit`` updates ``P`` at once. Publish the new progress to the triggers
  (:class:`engine.stream.windows.Trigger`) only *after* the accepted triples are
  in the transient store, otherwise an instant could fire before its data is
  readable. In arrival mode, hold the stream's lock across ``assign`` and the
  insert for the same reason.
* The first-instant rule needs the first timestamp a stream receives after a
  query registers: after each admission event pass :attr:`StreamClock.last_first`
  to ``Trigger.observe`` (it is ``None`` when the event admitted nothing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from engine.errors import Category, JindouError
from engine.stream.limits import check_int64

__all__ = ["StreamClock", "LateElementError", "EVENT", "ARRIVAL", "wall_clock_ms"]

EVENT = "event"
ARRIVAL = "arrival"


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (integer)."""
    return time.time_ns() // 1_000_000


class LateElementError(JindouError):
    """Elements with ``tau < P`` were rejected (HTTP 422)."""

    kind = "late_element"
    category = Category.UNPROCESSABLE

    def __init__(self, stream: str, progress: int | None, rejected: int, first_tau: int | None):
        self.stream = stream
        self.progress = progress
        self.rejected = rejected
        self.first_tau = first_tau
        super().__init__(
            f"stream {stream!r}: {rejected} element(s) rejected, timestamp {first_tau} is "
            f"below the stream's progress {progress}")


def _as_timestamps(timestamps) -> np.ndarray:
    ts = np.asarray(timestamps)
    if ts.ndim != 1:
        ts = ts.ravel()
    if ts.size == 0:
        return ts.astype(np.int64)
    if ts.dtype.kind not in "iu" or ts.dtype == np.bool_:
        raise TypeError(f"timestamps must be integer milliseconds, got dtype {ts.dtype}")
    return ts.astype(np.int64, copy=False)


class StreamClock:
    """Progress of one stream (thread-safe).

    Counters: ``accepted`` / ``rejected`` elements, ``heartbeats`` received,
    ``events`` (admission events that delivered at least one timestamp:
    an element batch with an accepted element, or a heartbeat with ``T >= P``).
    """

    def __init__(self, name: str = "", *, clock: str = EVENT,
                 now_ms: Callable[[], int] | None = None):
        if clock not in (EVENT, ARRIVAL):
            raise ValueError(f"clock must be {EVENT!r} or {ARRIVAL!r}, not {clock!r}")
        self.name = name
        self.clock = clock
        self._now = now_ms or wall_clock_ms
        self._p: int | None = None
        self._lock = threading.Lock()
        self.accepted = 0
        self.rejected = 0
        self.heartbeats = 0
        self.events = 0
        #: first timestamp delivered by the most recent admission event (None if it delivered none)
        self.last_first: int | None = None

    # -- reading -------------------------------------------------------------
    @property
    def arrival(self) -> bool:
        return self.clock == ARRIVAL

    @property
    def progress(self) -> int | None:
        """Current progress. In arrival mode this advances ``P`` to the wall clock."""
        if self.clock == ARRIVAL:
            return self.tick()
        return self._p

    def peek(self) -> int | None:
        """Progress without advancing the arrival clock."""
        return self._p

    def save(self) -> tuple:
        """The admission state, for :meth:`rollback` when a batch admitted
        here cannot be stored after all (window store full)."""
        with self._lock:
            return (self._p, self.accepted, self.events)

    def rollback(self, saved: tuple) -> None:
        """Undo admissions since :meth:`save` (the caller holds the stream's
        lock, so nothing else was admitted meanwhile)."""
        with self._lock:
            self._p, self.accepted, self.events = saved
            self.last_first = None

    def restore(self, progress: int) -> None:
        """Set ``P`` from a persisted value (restart); never lowers it."""
        progress = check_int64(progress, "persisted progress")
        with self._lock:
            if self._p is None or progress > self._p:
                self._p = int(progress)

    def tick(self) -> int | None:
        """Arrival mode: raise ``P`` to the wall clock and return it. Event mode: return ``P``."""
        if self.clock != ARRIVAL:
            return self._p
        with self._lock:
            now = int(self._now())
            if self._p is None or now > self._p:
                self._p = now
            return self._p

    # -- admission -----------------------------------------------------------
    def admit(self, timestamps) -> tuple[np.ndarray, int | None]:
        """Admit a batch of element timestamps (arrival order).

        Returns ``(accepted_mask, new_P)``. Only event-time streams take
        timestamps; arrival-clock streams use :meth:`assign`.
        """
        if self.clock == ARRIVAL:
            raise ValueError(f"stream {self.name!r} uses the arrival clock: use assign(n=...)")
        ts = _as_timestamps(timestamps)
        with self._lock:
            return self._admit_locked(ts)

    def _admit_locked(self, ts: np.ndarray) -> tuple[np.ndarray, int | None]:
        n = ts.size
        if n == 0:
            self.last_first = None
            return np.zeros(0, dtype=bool), self._p
        p0 = self._p
        # progress seen by element i = max(P0, tau[0..i-1])
        prev = np.empty(n, dtype=np.int64)
        prev[0] = np.iinfo(np.int64).min if p0 is None else p0
        if n > 1:
            np.maximum.accumulate(ts[:-1], out=prev[1:])
            np.maximum(prev[1:], prev[0], out=prev[1:])
        mask = ts >= prev
        n_ok = int(np.count_nonzero(mask))
        self.accepted += n_ok
        self.rejected += n - n_ok
        if n_ok:
            first = int(ts[int(np.argmax(mask))])
            top = int(ts.max())
            self._p = top if p0 is None else max(p0, top)
            self.events += 1
            self.last_first = first
        else:
            self.last_first = None
        return mask, self._p

    def assign(self, timestamps=None, *, n: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, int | None]:
        """Stamp and admit a batch: returns ``(stamps, accepted_mask, new_P)``.

        Event mode: ``stamps`` are the given timestamps. Arrival mode: every
        element is stamped with the arrival time (given timestamps ignored;
        ``n`` or ``len(timestamps)`` elements), all accepted.
        """
        if self.clock != ARRIVAL:
            if timestamps is None:
                raise ValueError("event-time streams need element timestamps")
            ts = _as_timestamps(timestamps)
            with self._lock:
                mask, p = self._admit_locked(ts)
            return ts, mask, p
        count = n if n is not None else (0 if timestamps is None else len(timestamps))
        with self._lock:
            now = int(self._now())
            stamp = now if self._p is None else max(now, self._p)
            self._p = stamp
            stamps = np.full(count, stamp, dtype=np.int64)
            self.accepted += count
            if count:
                self.events += 1
                self.last_first = stamp
            else:
                self.last_first = None
            return stamps, np.ones(count, dtype=bool), self._p

    def heartbeat(self, t: int) -> int | None:
        """Raise ``P`` to ``t`` (a lower ``t`` is a no-op). Returns the new ``P``.

        Ignored by arrival-clock streams (their progress follows the wall clock). A value that
        is no int64 raises :class:`~engine.stream.limits.BadTimestamp` and changes nothing
        (the manager checks the contract's range before).
        """
        t = check_int64(t, "heartbeat t")
        with self._lock:
            self.heartbeats += 1
            if self.clock == ARRIVAL:
                self.last_first = None
                return self._p
            if self._p is None or t >= self._p:
                self._p = t
                self.events += 1
                self.last_first = t
            else:
                self.last_first = None
            return self._p

    def check(self, timestamps) -> tuple[np.ndarray, int | None]:
        """Like :meth:`admit`, but raise :class:`LateElementError` if any element is rejected
        (the accepted ones are still admitted and counted)."""
        ts = _as_timestamps(timestamps)
        if self.clock == ARRIVAL:
            raise ValueError(f"stream {self.name!r} uses the arrival clock: use assign(n=...)")
        with self._lock:
            p_before = self._p
            mask, p = self._admit_locked(ts)
        if not mask.all():
            i = int(np.argmax(~mask))
            seen = int(ts[:i].max()) if i else None
            if p_before is not None:
                seen = p_before if seen is None else max(seen, p_before)
            raise LateElementError(self.name, seen, int(np.count_nonzero(~mask)), int(ts[i]))
        return mask, p

    def stats(self) -> dict:
        return {"progress": self._p, "clock": self.clock, "accepted": self.accepted,
                "rejected": self.rejected, "heartbeats": self.heartbeats}

    def __repr__(self) -> str:
        return f"StreamClock({self.name!r}, P={self._p}, clock={self.clock})"
