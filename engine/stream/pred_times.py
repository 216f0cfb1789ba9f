"""Element times per predicate of one stream: "did anything a query can match enter or leave?"

A continuous query reads its windows only through its triple patterns, so the triples whose
predicate is none of its patterns' constant predicates cannot change its result (a pattern
with a variable predicate makes every triple relevant). This index keeps, per stream, the
timestamps of its elements grouped by predicate id (and of all elements together, key
:data:`ALL`), each group non-decreasing (a stream's timestamps are, in arrival order).
Whether a time window ``(t - RANGE, t]`` holds the same elements of the relevant predicates at
a later instant is then a few bisections per predicate (:func:`next_change`), with no read of
the window, no capture of its seq range and no look at the triples that changed.

It is a *derived* record of the transient store: :meth:`PredicateTimes.sync` appends what the
store holds beyond what the index has seen (the ingestion path calls it after each batch,
before the progress is published, so a ready instant finds its elements indexed; a check
catches up itself if some writer did not). It is complete for the timestamps above
:attr:`PredicateTimes.since` (the trim point: the GC horizon of its readers' last instants,
:func:`engine.stream.gc.collect`); a question reaching below it is not answered (the caller
evaluates). One writer at a time (its lock); appends go into the current groups in place,
while a trim or a rebuild sets the new bound first and then publishes new groups: a reader
takes :attr:`PredicateTimes.groups` once, then :attr:`PredicateTimes.since`, and never trusts
a group below the bound it read.
"""

from __future__ import annotations

import bisect
import threading
from array import array

import numpy as np

from engine.memo import PerObject

__all__ = ["ALL", "PredicateTimes", "change_by", "forget", "known", "next_change", "note", "of", "window_seqs"]

#: the key of every element's time (a pattern with a variable predicate reads every triple)
ALL = -1
#: a group is compacted when its dropped head reaches this many entries and half its length
_COMPACT = 256
#: batches up to this many rows are grouped one element at a time in Python, larger ones by a
#: stable numpy sort (measured, hot, per batch of 5-8 predicates: 7 rows 1.6-3.6 µs against
#: 9-11; 20 rows 5-7 against 11-14; even at 48, 12 against 15; 64 rows 18-20 against 15-18)
_SMALL = 48


class PredicateTimes:
    """The element times of one stream's transient store, per predicate id (see the module)."""

    __slots__ = ("lock", "seq", "since", "groups", "max_pid", "__weakref__")

    def __init__(self):
        self.lock = threading.Lock()
        self.seq = 0            # the store's seqs below this are indexed
        self.since: int | None = None   # complete for times above this (None: from the start)
        #: key -> [array('q') of times, head]: the live entries are ``arr[head:]``
        self.groups: dict[int, list] = {}
        self.max_pid = -1       # the largest predicate id ever indexed (new predicates are rare)

    def sync(self, store) -> None:
        """Index what ``store`` holds beyond :attr:`seq` (the ingestion path's hook and a
        check's catch-up); if the store's GC freed some of it first, start again from what it
        retains (complete above the store's freed time)."""
        with self.lock:
            end = store.end_seq
            if self.seq >= end:
                return
            with store._lock:
                live = store.live_start
                fresh = self.seq < live   # freed before it was indexed: rebuild from the retained part
                if fresh:
                    freed = store.freed_tau
                    if freed is not None and (self.since is None or freed > self.since):
                        self.since = freed
                    self.seq = live
                end = store.end_seq
                spo, tau = store.read(self.seq, end)
            groups = {} if fresh else self.groups
            self._add(groups, spo[:, 1], tau)
            self.groups = groups
            self.seq = end

    def append(self, store, p: np.ndarray, tau: np.ndarray) -> None:
        """The ingestion hook with the batch in hand: ``store`` just appended the elements of
        predicate ids ``p`` and times ``tau`` (its last ``len(tau)`` seqs). Indexed from these
        arrays when the index had seen everything before them (no read of the store back);
        otherwise (a writer skipped the hook, the GC freed what was not indexed yet, a check
        caught up with this batch already) as :meth:`sync` does."""
        tau = np.asarray(tau, dtype=np.int64)
        n = len(tau)
        with self.lock:
            with store._lock:
                end = store.end_seq
                direct = self.seq == end - n and self.seq >= store.live_start
            if direct:
                self._add(self.groups, p, tau)
                self.seq = end
                return
        self.sync(store)

    def _add(self, groups: dict, p: np.ndarray, tau: np.ndarray) -> None:
        """Append a run of elements (predicate ids ``p``, times ``tau``, arrival order): every
        time to :data:`ALL`, each predicate's to its group. A batch of up to :data:`_SMALL`
        elements one by one in Python (a few dozen appends cost less than the numpy calls of a
        grouping); a larger one by a stable sort, Python per distinct predicate only."""
        n = len(tau)
        if not n:
            return
        g = groups.get(ALL)
        if g is None:   # [times, head, the seq of times[0]]: ALL holds every element in seq order
            g = groups[ALL] = [array("q"), 0, self.seq]
        g[0].frombytes(tau.tobytes())
        if n <= _SMALL:
            get = groups.get
            for pid, x in zip(p.tolist(), tau.tolist(), strict=True):
                g = get(pid)
                if g is None:
                    g = groups[pid] = [array("q"), 0]
                    if pid > self.max_pid:
                        self.max_pid = pid
                g[0].append(x)
            return
        order = p.argsort(kind="stable")
        ps = p[order]
        ts = tau[order].tobytes()
        cut = [0, *((ps[1:] != ps[:-1]).nonzero()[0] + 1).tolist(), n]
        for i, pid in enumerate(ps[cut[:-1]].tolist()):   # per distinct predicate of the batch
            self._extend(groups, pid, ts[8 * cut[i]:8 * cut[i + 1]])

    def _extend(self, groups: dict, pid: int, tau: bytes) -> None:
        g = groups.get(pid)
        if g is None:
            g = groups[pid] = [array("q"), 0]
            if pid > self.max_pid:
                self.max_pid = pid
        g[0].frombytes(tau)

    def trim(self, horizon: int | None) -> None:
        """Forget the times ``<= horizon`` (no reader's check reaches them any more): a group's
        head moves; a group is copied without its head once that is half of it. The trimmed
        groups are a new dict, published after the new :attr:`since`: a reader takes
        :attr:`groups` first, then :attr:`since`, and so never trusts a trimmed group below
        the bound it read."""
        if horizon is None:
            return
        h = int(horizon)
        with self.lock:
            if self.since is not None and h <= self.since:
                return
            self.since = h
            out = {}
            for key, g in self.groups.items():
                arr, head = g[0], g[1]
                k = bisect.bisect_right(arr, h, head)
                if k == head:
                    out[key] = g
                elif key == ALL:   # its first seq moves with what is dropped
                    if k >= len(arr):
                        out[key] = [array("q"), 0, g[2] + len(arr)]
                    elif k >= _COMPACT and 2 * k >= len(arr):
                        out[key] = [arr[k:], 0, g[2] + k]
                    else:
                        out[key] = [arr, k, g[2]]
                elif k >= len(arr):
                    continue
                elif k >= _COMPACT and 2 * k >= len(arr):
                    out[key] = [arr[k:], 0]
                else:
                    out[key] = [arr, k]
            self.groups = out

    def __len__(self) -> int:
        """Times held (all groups, ALL included)."""
        return sum(len(g[0]) - g[1] for g in self.groups.values())


_indexes: PerObject[PredicateTimes] = PerObject(lambda _store: PredicateTimes())


def of(store) -> PredicateTimes:
    """The index of ``store`` (made on first use, then filled from what the store retains)."""
    return _indexes(store)


def known(store) -> PredicateTimes | None:
    """The index of ``store`` if one was made (the GC trims it)."""
    return _indexes.get(store)


def forget(store) -> None:
    """Drop the index of ``store`` (no time window reads it any more: a later reader builds a
    new one from what the store retains, rather than find this one trimmed to the end)."""
    _indexes.forget(store)


def note(store, p: np.ndarray | None = None, tau: np.ndarray | None = None) -> None:
    """Ingestion hook, after a batch went into ``store``: index it if some query uses the
    index of that store (otherwise nothing: a first check reads the store). With the batch's
    predicate ids and times (the caller holds the stream's lock, so they are the store's last
    elements): from those arrays (:meth:`PredicateTimes.append`)."""
    pt = _indexes.get(store)
    if pt is not None:
        if tau is None:
            pt.sync(store)
        else:
            pt.append(store, p, tau)


def next_change(groups: dict, keys, te: int, rng: int, step: int) -> int | None:
    """The first instant ``x > te`` (a multiple of ``step``) at which the time window of
    ``rng`` ms may hold other elements of the predicates ``keys`` than at ``te`` -- the first
    instant at or after the next such element's time (it enters), or at or after
    ``tau + rng`` of the oldest one the window held at ``te`` (it leaves); None if no element
    of theirs is in the window at ``te`` or after it. Conservative: an element entering and
    leaving between two instants counts. ``groups``: :attr:`PredicateTimes.groups`, read before
    the caller checked ``since <= te - rng``."""
    lo = te - rng
    best = None
    for key in keys:
        g = groups.get(key)
        if g is None:
            continue
        arr, head = g[0], g[1]
        n = len(arr)
        i = bisect.bisect_right(arr, lo, head, n)
        if i >= n:
            continue
        b = arr[i]
        if b > te:     # nothing of it in the window at te: the next one enters at b
            c = -((-b) // step) * step
        else:          # the oldest in it leaves at b + rng; the next one enters at its time
            c = -((-(b + rng)) // step) * step
            j = bisect.bisect_right(arr, te, i, n)
            if j < n:
                a = arr[j]
                ca = -((-a) // step) * step
                if ca < c:
                    c = ca
        if best is None or c < best:
            best = c
    return best


#: change_by looks for the first element after the last instant among this many newest ones
#: first (one or two cache lines of a cold array, not a bisection over all of it)
_TAIL = 16


def change_by(g: list, te: int, rng: int, step: int, t: int) -> int | None:
    """:func:`next_change` for one group ``g`` (:attr:`PredicateTimes.groups`' value), asked
    whether the window changes by instant ``t``: an instant ``<= t`` at which it may change
    if there is one (not necessarily the first), else exactly :func:`next_change`.

    The commonest answer first, from the group's tail: its first element after ``te`` enters
    by ``t`` (next_change is at most that element's instant: the earliest of the first
    entry and the oldest element's leaving). Only when that does not decide it, the whole
    rule (a bisection from the window's start)."""
    arr, head = g[0], g[1]
    n = len(arr)
    if n <= head or arr[n - 1] <= te - rng:   # all of them left before te's window (or none)
        return None
    if arr[n - 1] > te:
        a = n - _TAIL
        if a <= head or arr[a - 1] > te:
            a = head
        c = -((-arr[bisect.bisect_right(arr, te, a, n)]) // step) * step
        if c <= t:
            return c
    return next_change({0: g}, (0,), te, rng, step)


def window_seqs(groups: dict, lo: int, hi: int) -> tuple[int, int] | None:
    """The seq range of the elements with ``lo < tau <= hi`` by two bisections over :data:`ALL`
    (what :meth:`~engine.stream.transient.TransientStore.time_range` finds through the stream
    index and the slices), None if nothing was indexed. The caller checked ``since <= lo``
    (every element above ``lo`` is held) and clamps the start to what the store retains."""
    g = groups.get(ALL)
    if g is None:
        return None
    arr, head, seq0 = g
    i0 = bisect.bisect_right(arr, lo, head)
    i1 = bisect.bisect_right(arr, hi, i0) if hi > lo else i0
    return seq0 + i0, seq0 + i1
