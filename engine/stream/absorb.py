"""Absorption: a stream's timeless triples enter the store, and instants see it "as of event time".

A stream's ``absorb`` setting marks some triples timeless (:func:`~engine.stream.adaptor.timeless_mask`).
They are committed to the store's default graph as soon as their batch is stored -- one-shot
queries see them at once, one commit per POST so a batch is seen whole or not at all
(:func:`absorb`) -- and recorded with their timestamps in the :class:`AbsorbLog`, from which an
instant ``t`` learns the rows absorbed after ``t`` that it must not see. So evaluation never holds
ingestion back. Both sides live here because the log's invariant (recorded before the commit)
ties them together.

:func:`commit_absorbed` is the one place stream ingestion writes to the store.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from engine.io import ingest
from engine.kv.store import Changes

__all__ = ["AbsorbLog", "absorb", "commit_absorbed", "rows_in"]

_EMPTY3 = np.zeros((0, 3), dtype=np.int64)


class AbsorbLog:
    """Absorbed timeless triples with their timestamps, to see the store "as of event time t".

    Absorption commits timeless triples to the store's default graph as soon as
    their batch is ingested (so one-shot queries see them at once). A continuous
    query evaluating instant ``t`` must not see those with ``tau > t``:
    :meth:`future_rows` gives the rows to subtract -- rows absorbed with
    ``tau > t`` that were *new* to the default graph when absorbed, minus rows
    also absorbed with some ``tau <= t``. A record is added *before* its
    commit, and an evaluation takes its snapshot *before* reading the log, so a
    snapshot never holds absorbed triples the evaluation does not know about.
    Records are dropped once no present or future instant can be below them
    (:meth:`prune`).
    """

    def __init__(self):
        self._lock = threading.Lock()
        # one chunk per absorbing batch: (tau sorted non-decreasing, rows (n,3), new-mask)
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, tau: np.ndarray, rows: np.ndarray, new: np.ndarray) -> None:
        if len(rows) == 0:
            return
        tau = np.asarray(tau, dtype=np.int64)
        with self._lock:
            self._chunks.append((tau, np.asarray(rows, dtype=np.int64), np.asarray(new, dtype=bool)))

    def __len__(self) -> int:
        return sum(len(c[0]) for c in self._chunks)

    def future_rows(self, t: int) -> np.ndarray:
        """Rows to subtract from the default graph when evaluating instant ``t``."""
        with self._lock:
            chunks = list(self._chunks)
        fut, past = [], []
        for tau, rows, new in chunks:
            i = int(np.searchsorted(tau, t, side="right"))
            if i < len(tau):
                f = rows[i:][new[i:]]
                if len(f):
                    fut.append(f)
            if i:
                past.append(rows[:i])
        if not fut:
            return _EMPTY3
        f = np.unique(np.concatenate(fut), axis=0)
        if past:
            f = f[~rows_in(f, np.concatenate(past))]
        return f

    def next_after(self, t: int) -> int | None:
        """The smallest recorded timestamp above ``t`` (the next instant the stored default
        graph "as of event time" can change), None if there is none."""
        with self._lock:
            chunks = list(self._chunks)
        best = None
        for tau, _rows, _new in chunks:
            i = int(np.searchsorted(tau, t, side="right"))
            if i < len(tau):
                x = int(tau[i])
                best = x if best is None or x < best else best
        return best

    def prune(self, horizon: int | None) -> None:
        """Drop records with ``tau <= horizon`` (no instant ``< horizon`` will be evaluated)."""
        if horizon is None:
            return
        with self._lock:
            gone, keep = [], []
            for tau, rows, new in self._chunks:
                i = int(np.searchsorted(tau, horizon, side="right"))
                if i:
                    gone.append(rows[:i])
                if i < len(tau):
                    keep.append((tau[i:], rows[i:], new[i:]))
            if not gone:
                return
            # rows of the dropped records are in the store for every later instant:
            # a later record of the same row must not subtract it
            old = np.concatenate(gone)
            self._chunks = [(tau, rows, new & ~rows_in(rows, old)) if new.any() else (tau, rows, new)
                            for tau, rows, new in keep]


def rows_in(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mask of the rows of ``a`` that occur in ``b``."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(len(a), dtype=bool)
    both = np.concatenate([a, b])
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    inb = np.zeros(int(inv.max()) + 1, dtype=bool)
    inb[inv[len(a):]] = True
    return inb[inv[:len(a)]]


#: tests only: a process with this variable set dies (SIGKILL) after an absorbing batch's journal
#: record and before its store commit, the crash the replay must complete the commit after
_CRASH_ENV = "JINDOU_TEST_KILL_BEFORE_ABSORB_COMMIT"


_crash_count = [0]


def _crash_point() -> None:
    """(The variable's value n: die at the n-th absorbing batch of this process.)"""
    n = os.environ.get(_CRASH_ENV)
    if n:
        _crash_count[0] += 1
        if _crash_count[0] >= int(n):
            import signal
            os.kill(os.getpid(), signal.SIGKILL)


def commit_absorbed(store, rows: np.ndarray, origin: dict[str, int] | None = None) -> None:
    """The store write of absorption: ``rows`` (n, 3) ids into the default graph, one atomic
    commit through the one write path (``origin``: the stream batch it comes from). Caller
    holds ``store.write_lock``."""
    ingest.apply(store, Changes(add={None: rows}, origin=origin))


def absorb(store, log: AbsorbLog, rows: np.ndarray, tau: np.ndarray, mark: tuple[int, int] | None = None,
           origin: dict[str, int] | None = None, recorded=None) -> None:
    """Commit timeless triples to the store's default graph (one commit = atomic).

    ``mark`` = (first id interned by this batch, snapshot number then): if no commit
    happened since, a row holding a term interned by this batch cannot be in the store,
    so only the other rows need the edge test (a stream of new observations skips it).
    ``recorded(new, sn)``: called with the record's new-mask and the snapshot number the commit
    will make, after the record is in the log and before the commit (the window journal writes
    it there: durable before the store holds the rows; a restart finishes a commit the crash
    cut off, :meth:`~engine.stream.ingest.Ingestor.replay_windows`)."""
    with store.write_lock:
        snap = store.snapshot()
        default = snap.default
        present = np.zeros(len(rows), dtype=bool)
        if mark is not None and mark[1] == snap.sn:
            old = np.flatnonzero(rows.max(axis=1) < mark[0])
        else:
            old = None
        sub = rows if old is None else rows[old]
        if len(sub):
            found = np.zeros(len(sub), dtype=bool)
            pids, inv = np.unique(sub[:, 1], return_inverse=True)
            if len(pids) == 1:
                found[:] = default.contains(int(pids[0]), sub[:, 0], sub[:, 2])
            else:
                order = np.argsort(inv, kind="stable")
                bounds = np.searchsorted(inv[order], np.arange(len(pids) + 1))
                for k, pid in enumerate(pids.tolist()):
                    sel = order[bounds[k]:bounds[k + 1]]
                    found[sel] = default.contains(int(pid), sub[sel, 0], sub[sel, 2])
            if old is None:
                present = found
            else:
                present[old] = found
        log.add(tau, rows, ~present)   # before the commit (see AbsorbLog)
        if recorded is not None:
            recorded(~present, snap.sn + 1)
            _crash_point()
        commit_absorbed(store, rows, origin)
