"""Windows, instants and triggers (the *Instants* and *Output/window* contract bullets).

* A query is evaluated at instants ``t = k * STEP`` (``k`` integer, aligned to
  Unix epoch 0). With several windows, all are evaluated at the multiples of the
  smallest STEP (:func:`query_step`), each covering its own RANGE.
* At instant ``t`` a time window ``[RANGE w ...]`` holds the elements with
  ``t - w < tau <= t``; ``[RANGE TRIPLES n]`` holds the last ``n`` triples with
  ``tau <= t`` (ties by arrival order).
* Instant ``t`` is evaluated once every stream the query reads has ``P > t``.
* The first instant is ``ceil(tau0 / STEP) * STEP`` (:func:`first_instant`),
  ``tau0`` = the lowest progress among the query's streams at registration, or
  -- if one of them has none yet -- the first timestamp (element or heartbeat)
  any of them receives after registration (:meth:`Trigger.observe`).
* From then on every instant is evaluated exactly once, in order, also when
  its windows are empty (:meth:`Trigger.ready`).

All times are integer milliseconds (Python ints; these helpers allow any; the API admits
[0, 2^53-1], see :mod:`engine.stream.limits`).
:class:`Window` is the one window type: the C-SPARQL parser
(:mod:`engine.sparql.csparql`) produces it, the :class:`Trigger` steps by it and the transient
store (:mod:`engine.stream.transient`) reads its ranges. The bounds of a time window
(:func:`time_bounds`, :func:`leaves_at`) and the brute-force selections here
(:func:`time_window_mask`, :func:`count_window_slice`) define the semantics; the transient
store computes the same ranges through its stream index, from :func:`time_bounds`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Window", "DEFAULT_COUNT_STEP_MS", "query_step", "first_instant", "is_aligned",
    "align_down", "instants_between", "time_bounds", "leaves_at", "time_window_mask",
    "time_window_slice", "count_window_slice", "window_member", "Trigger",
]

#: STEP of ``[RANGE TRIPLES n]`` without an explicit STEP (1 s).
DEFAULT_COUNT_STEP_MS = 1000


@dataclass(frozen=True)
class Window:
    """One stream window: ``[RANGE range_ms STEP step_ms]`` or ``[RANGE TRIPLES triples STEP step_ms]``.

    Exactly one of ``range_ms`` / ``triples`` is set. TUMBLING is ``step_ms == range_ms``.
    """

    range_ms: int | None
    step_ms: int
    triples: int | None = None

    def __post_init__(self):
        if (self.range_ms is None) == (self.triples is None):
            raise ValueError("a window has either a time RANGE or RANGE TRIPLES, exactly one")
        if self.range_ms is not None and int(self.range_ms) <= 0:
            raise ValueError("RANGE must be positive")
        if self.triples is not None and int(self.triples) <= 0:
            raise ValueError("RANGE TRIPLES must be positive")
        if int(self.step_ms) <= 0:
            raise ValueError("STEP must be positive")

    @classmethod
    def time(cls, range_ms: int, step_ms: int | None = None) -> Window:
        """``[RANGE range STEP step]``; without a step, TUMBLING."""
        return cls(int(range_ms), int(range_ms if step_ms is None else step_ms), None)

    @classmethod
    def count(cls, triples: int, step_ms: int = DEFAULT_COUNT_STEP_MS) -> Window:
        return cls(None, int(step_ms), int(triples))

    @property
    def is_count(self) -> bool:
        return self.triples is not None

    @property
    def is_sliding(self) -> bool:
        """Consecutive instants can share content (a count window, or STEP < RANGE)."""
        return self.triples is not None or self.step_ms < self.range_ms


def query_step(windows: Iterable[Window]) -> int:
    """The step of a query: the smallest STEP among its windows."""
    steps = [w.step_ms for w in windows]
    if not steps:
        raise ValueError("a continuous query needs at least one window")
    return min(steps)


def first_instant(tau0: int, step: int) -> int:
    """``ceil(tau0 / step) * step`` in exact integer arithmetic."""
    tau0, step = int(tau0), int(step)
    return -((-tau0) // step) * step


def align_down(t: int, step: int) -> int:
    """Largest multiple of ``step`` that is ``<= t``."""
    return (int(t) // int(step)) * int(step)


def is_aligned(t: int, step: int) -> bool:
    return int(t) % int(step) == 0


def instants_between(first: int, progress: int, step: int) -> range:
    """The aligned instants ``t >= first`` with ``t < progress`` (``first`` aligned)."""
    last = align_down(int(progress) - 1, step)
    return range(int(first), max(int(first), last + step), int(step))


def time_bounds(window: Window, t: int) -> tuple[int, int]:
    """``(lo, hi)`` of a time window at ``t``: it holds ``lo < tau <= hi``."""
    if window.range_ms is None:
        raise ValueError("not a time window")
    return int(t) - int(window.range_ms), int(t)


def leaves_at(window: Window, tau: int) -> int:
    """The time from which a time window no longer holds an element with timestamp ``tau``
    (``t - RANGE >= tau``, the lower bound of :func:`time_bounds`)."""
    if window.range_ms is None:
        raise ValueError("not a time window")
    return int(tau) + int(window.range_ms)


def time_window_mask(tau: np.ndarray, window: Window, t: int) -> np.ndarray:
    """Brute-force membership of a time window at ``t`` (any order of ``tau``)."""
    lo, hi = time_bounds(window, t)
    tau = np.asarray(tau, dtype=np.int64)
    return (tau > lo) & (tau <= hi)


def time_window_slice(tau_sorted: np.ndarray, window: Window, t: int) -> tuple[int, int]:
    """``[i, j)`` of a time window at ``t`` over non-decreasing ``tau``."""
    lo, hi = time_bounds(window, t)
    i = int(np.searchsorted(tau_sorted, lo, side="right"))
    j = int(np.searchsorted(tau_sorted, hi, side="right"))
    return i, max(i, j)


def count_window_slice(tau_sorted: np.ndarray, n: int, t: int) -> tuple[int, int]:
    """``[i, j)`` of the last ``n`` triples with ``tau <= t`` over non-decreasing ``tau``
    in arrival order."""
    j = int(np.searchsorted(tau_sorted, int(t), side="right"))
    return max(0, j - int(n)), j


def window_member(windows: Iterable[Window], t: int,
                  oldest_count_tau: int | None = None) -> dict:
    """The ``window`` member of a result: ``{"start": t - w_max, "end": t}``.

    ``w_max`` is the largest time RANGE of the query. For a query with only
    count windows, ``start`` is the timestamp of the oldest triple they hold
    (``oldest_count_tau``, the minimum over its count windows); when they hold
    nothing, ``start == end == t``.
    """
    t = int(t)
    ranges = [w.range_ms for w in windows if w.range_ms is not None]
    if ranges:
        return {"start": t - max(ranges), "end": t}
    return {"start": t if oldest_count_tau is None else int(oldest_count_tau), "end": t}


class Trigger:
    """When a continuous query must be evaluated.

    ``Trigger(step, streams, progress)`` is made at registration with the
    progress of the query's streams at that moment (``None`` = no progress yet).
    Feed it admission events with :meth:`observe` while it is :attr:`pending`,
    and call :meth:`ready` with the (published, stable) progress of the streams:
    it returns the instants now ready, each exactly once, in order.

    Not thread-safe: the coordinator calls it under its own lock.
    """

    __slots__ = ("step", "streams", "_next", "_issued")

    def __init__(self, step: int, streams: Sequence[str], progress: Mapping[str, int | None]):
        step = int(step)
        if step <= 0:
            raise ValueError("STEP must be positive")
        if not streams:
            raise ValueError("a continuous query reads at least one stream")
        self.step = step
        self.streams = tuple(streams)
        self._issued = 0
        ps = [progress.get(s) for s in self.streams]
        self._next: int | None = None
        if all(p is not None for p in ps):
            self._next = first_instant(min(ps), step)

    @classmethod
    def for_windows(cls, windows: Mapping[str, Window], progress: Mapping[str, int | None]) -> Trigger:
        """A trigger for a query given its windows by stream name."""
        return cls(query_step(windows.values()), list(windows), progress)

    @property
    def pending(self) -> bool:
        """True while the first instant is not known yet."""
        return self._next is None

    @property
    def next_instant(self) -> int | None:
        """The next instant to issue (``None`` while pending)."""
        return self._next

    @property
    def issued(self) -> int:
        """How many instants were issued so far."""
        return self._issued

    def observe(self, stream: str, first_ts: int | None) -> None:
        """An admission event on ``stream`` delivered ``first_ts`` as its first timestamp
        (element or heartbeat). Fixes the first instant if the trigger is pending."""
        if self._next is None and first_ts is not None and stream in self.streams:
            self._next = first_instant(first_ts, self.step)

    def ready_upto(self, progress: Mapping[str, int | None]) -> int | None:
        """The last instant that is ready (``None`` if none is ready), without issuing."""
        if self._next is None:
            return None
        lowest = None
        for s in self.streams:
            p = progress.get(s)
            if p is None:
                return None
            lowest = p if lowest is None or p < lowest else lowest
        last = align_down(lowest - 1, self.step)
        return last if last >= self._next else None

    def ready(self, progress: Mapping[str, int | None], limit: int | None = None) -> list[int]:
        """Issue the instants now ready (all streams have ``P > t``), in order, at most ``limit``."""
        last = self.ready_upto(progress)
        if last is None:
            return []
        start = self._next
        if limit is not None:
            if limit <= 0:
                return []
            last = min(last, start + (int(limit) - 1) * self.step)
        out = list(range(start, last + 1, self.step))
        self._next = last + self.step
        self._issued += len(out)
        return out

    def advance(self, upto: int) -> int:
        """Issue the instants from :attr:`next_instant` to ``upto`` (aligned, already known to
        be ready) at once, without listing them; returns how many."""
        if self._next is None or upto < self._next:
            return 0
        n = (int(upto) - self._next) // self.step + 1
        self._next += n * self.step
        self._issued += n
        return n

    def __repr__(self) -> str:
        return f"Trigger(step={self.step}, streams={self.streams}, next={self._next})"
