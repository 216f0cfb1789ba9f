"""The result log of one continuous query: the events SSE clients read, shared by all of them.

Each evaluated instant appends one ``result`` event (its JSON data, ``window`` member included);
a run of unchanged instants is one ``idle`` event. The log keeps the last ``retain`` events so a
client can resume (``Last-Event-ID`` / ``?from=``; a ``gap`` event when older ones were dropped),
and at most ``retain_bytes`` bytes of event data (the newest event always: an instant's answer of
megabytes times ``retain`` would otherwise be gigabytes per query), within a total over all
queries (:class:`TotalBytes`, ``--retain-total-bytes``: thousands of queries times
``retain_bytes`` would otherwise be the whole machine), and calls its listeners on every
append -- a listener only wakes its client, which then reads :meth:`ResultLog.since`, so a
slow client never holds the evaluation back.

Durable logs (``--data-dir``): a log made with a :class:`~engine.stream.resultstore.ResultStore`
starts with the events persisted for its query and makes an appended event visible (``since``,
listeners, ``last_id``) only once the store's writer committed it to disk -- so every event a
client or sink saw survives a crash. Without a store an append is visible at once and nothing
survives a restart.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import NamedTuple

import orjson

from engine.stream.cache_budget import SharedBound

__all__ = ["ResultEvent", "ResultLog", "TotalBytes", "idle_data"]


class ResultEvent(NamedTuple):
    """One event as readers get it (:meth:`ResultLog.since`). A log keeps its events as plain
    tuples of these fields (see :data:`_ID`): the interpreter's cyclic GC stops tracking a
    plain tuple of ints, strings and bytes after its first collection, so a full collection
    does not walk every retained event of every query (10,000 queries x 1,000 events made it
    a pause of a second or more); a named tuple, like any instance of a class, stays tracked."""
    id: int
    event: str
    data: bytes
    start: int | None = None   # "idle": the first instant it covers (``id`` is the last)
    same_as: int | None = None  # "idle": the evaluated instant whose result they repeat


#: the fields' positions in a log's own event tuples
_ID, _EVENT, _DATA, _START = 0, 1, 2, 3


_make = ResultEvent._make


def idle_data(start: int, end: int, step: int, same_as: int) -> bytes:
    return orjson.dumps({"from": start, "to": end, "instants": (end - start) // step + 1, "same_as": same_as})


def _trim_idle(ev: tuple, first: int, step: int) -> ResultEvent:
    """An idle event cut to the instants ``>= first`` (a client resuming inside its run)."""
    ev = ResultEvent._make(ev)
    start = -(-int(first) // step) * step
    if ev.start is None or start <= ev.start:
        return ev
    return ResultEvent(ev.id, "idle", idle_data(start, ev.id, step, ev.same_as), start, ev.same_as)


def _excess(events, total: int, retain: int, retain_bytes: int) -> int:
    """How many of the oldest ``events`` (oldest first, ``total`` bytes of data together) the
    bounds drop: the rest is at most ``retain`` events and at most ``retain_bytes`` bytes, and
    never fewer than one event. Walks only the dropped ones."""
    n = len(events)
    k = max(0, n - retain)
    for i in range(k):
        total -= len(events[i][_DATA])
    while total > retain_bytes and n - k > 1:
        total -= len(events[k][_DATA])
        k += 1
    return k


class TotalBytes(SharedBound):
    """The event bytes all result logs hold together, and each log's share of ``total``.

    While the sum is within ``total`` every log keeps its own ``retain_bytes``; once it is over,
    a log keeps at most its share (``total / logs``, at least ``floor``) and drops its oldest
    events down to it at its next append -- so the sum goes back under ``total`` (plus ``floor``
    per log and the newest event of each, which a log always keeps) as the queries answer, and
    a few queries with large answers still keep the whole ``total`` between them. (The same
    fair share as the rendered-term caches' bound, counted in bytes.)"""

    def __init__(self, total: int, floor: int = 64 << 10):
        super().__init__(max(1, int(total)), max(1, int(floor)))

    def limit(self, own: int) -> int:
        """The bytes a log whose own bound is ``own`` may keep now."""
        if self.held <= self.total:
            return own
        return min(own, self.share())


class ResultLog:
    """The retained events of one query (last ``retain`` instants, at most ``retain_bytes``
    bytes of data, within ``total``'s share when given) + listeners."""

    def __init__(self, retain: int = 1000, step: int | None = None, store=None, name: str | None = None,
                 retain_bytes: int = 1 << 62, total: TotalBytes | None = None):
        self.retain = max(1, int(retain))
        self._own_bytes = max(1, int(retain_bytes))
        self._total = total
        self._slot = total.join(self) if total is not None else None
        self._bytes = 0   # data bytes of the visible events
        self.step = step
        self._events: collections.deque[tuple] = collections.deque()   # ResultEvent's fields
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._dropped_last: int | None = None   # id of the newest dropped event
        self._end: ResultEvent | None = None
        self.closed = False
        self.last_id: int | None = None
        self.first_id: int | None = None   # the first event ever appended (or restored)
        # durable: events appended but not committed yet (invisible), newest dropped among them
        self._store = store
        self.durable_name = name
        self._pending: collections.deque[tuple] = collections.deque()
        self._pending_dropped: int | None = None
        self._pending_bytes = 0
        self._disk_rows = 0   # rows of this log in the store (trimmed to `retain` in steps of _slack)
        self._disk_bytes = 0  # their data bytes (trimmed to `retain_bytes` in steps of a quarter of it)
        self._slack = max(1, self.retain // 4)
        if store is not None:
            rows, dropped = store.load(name)
            self._disk_rows = len(rows)
            self._disk_bytes = sum(len(r[2]) for r in rows)
            for i, ev, data, start, same_as in rows:
                self._events.append((int(i), ev, bytes(data), start, same_as))
                self._bytes += len(data)
            self._trim()   # restarted with a smaller --retain / --retain-bytes
            self._account()
            if dropped is not None:
                self._dropped_last = max(dropped, self._dropped_last or dropped)
            if self._events:
                first = self._events[0]
                self.last_id = self._events[-1][_ID]
                self.first_id = first[_START] if first[_START] is not None else first[_ID]

    @property
    def retain_bytes(self) -> int:
        """This log's byte bound now: its own, or less while all logs together are over the
        total (:class:`TotalBytes`)."""
        if self._total is None:
            return self._own_bytes
        return self._total.limit(self._own_bytes)

    def _account(self) -> None:
        """Tell the total what this log holds now (visible + pending event bytes)."""
        if self._slot is not None:
            self._total.set(self._slot, self._bytes + self._pending_bytes)

    def append(self, t: int, data: bytes) -> None:
        self._add((int(t), "result", data, None, None))

    def append_idle(self, start: int, end: int, same_as: int) -> None:
        """One event for the unchanged instants ``start..end`` (results equal to instant
        ``same_as``'s; empty ISTREAM/DSTREAM differences)."""
        self._add((int(end), "idle", idle_data(start, end, self.step or 1, same_as), int(start), int(same_as)))

    def before_oldest(self) -> int | None:
        """A reader position just before the oldest event a new reader is owed (the oldest
        retained one, whole if it is an idle run, else the first ever appended): reading from
        there it gets every retained event, and a "gap" for whatever the log drops before it
        reads. None if nothing was ever appended."""
        with self._lock:
            if self._events:
                ev = self._events[0]
                return (ev[_START] if ev[_START] is not None else ev[_ID]) - 1
        return None if self.first_id is None else self.first_id - 1

    def _add(self, ev: tuple) -> None:
        if self.first_id is None:
            self.first_id = int(ev[_START] if ev[_START] is not None else ev[_ID])
        if self._store is not None:
            with self._lock:
                if self.closed:
                    return
                first = not self._pending   # else the writer knows already: it takes them all
                self._pending.append(ev)
                self._pending_bytes += len(ev[_DATA])
                self._account()   # before the bound is read: it depends on the sum
                if len(self._pending) > self.retain or self._pending_bytes > self.retain_bytes:
                    # the disk is behind by a whole log
                    for _ in range(_excess(self._pending, self._pending_bytes, self.retain, self.retain_bytes)):
                        old = self._pending.popleft()
                        self._pending_bytes -= len(old[_DATA])
                        self._pending_dropped = old[_ID]
                self._account()
            if first:
                self._store.submit(self)
            return
        # in memory: visible at once (one lock round, the commonest append of all)
        with self._lock:
            if self.closed:
                return
            self._disk_rows += 1
            self._events.append(ev)
            self._bytes += len(ev[_DATA])
            self.last_id = ev[_ID]
            if self._slot is not None:
                self._account()   # before the bound is read: it depends on the sum
            if len(self._events) > self.retain or self._bytes > self.retain_bytes:
                self._trim()
                if self._slot is not None:
                    self._account()
            listeners = self._listeners[:] if self._listeners else None
        if listeners:
            for fn in listeners:
                fn()

    # -- the store's writer: take the pending events, then publish them once committed
    def _take_pending(self) -> tuple[list[tuple], int | None, int | None]:
        """``(events, newest pending one cut by retain, cut)`` for the writer. ``cut``: delete the
        stored rows with ids up to it -- once the store holds ``retain + slack`` rows, back to the
        newest ``retain`` (the visible events are the newest stored ones: one writer, which
        publishes a batch before it takes the next)."""
        with self._lock:
            evs = [] if self.closed else list(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            dropped, self._pending_dropped = self._pending_dropped, None
            cut = None
            new = sum(len(e[_DATA]) for e in evs)
            if dropped is not None:
                # a pending event was dropped: the visible ones, older still, go too (the kept
                # events are always the newest ones, with no hole)
                return evs, dropped, max(dropped, self._dropped_last or dropped)
            total = self._bytes + new
            if self._disk_rows + len(evs) > self.retain + self._slack or \
                    self._disk_bytes + new > self.retain_bytes + self.retain_bytes // 4:
                k = _excess(list(self._events) + evs, total, self.retain, self.retain_bytes)   # older than the kept
                if k > 0:
                    cut = self._events[k - 1][_ID] if k <= len(self._events) else evs[k - 1 - len(self._events)][_ID]
                else:   # the disk may still hold events the byte bound dropped from view when published
                    cut = self._dropped_last
        return evs, dropped, cut

    def _requeue(self, evs: list[tuple], dropped: int | None) -> None:
        """The commit failed: the events go back in front of the pending ones."""
        with self._lock:
            self._pending.extendleft(reversed(evs))
            self._pending_bytes += sum(len(e[_DATA]) for e in evs)
            self._account()
            if dropped is not None:
                p = self._pending_dropped
                self._pending_dropped = dropped if p is None else max(p, dropped)
        self._store.submit(self)

    def _publish(self, evs: list[tuple], dropped: int | None = None, cut: int | None = None) -> None:
        """Make committed events visible (``dropped``: the newest pending one cut by ``retain``;
        ``cut``: the store trimmed its rows up to that id)."""
        with self._lock:
            new = sum(len(e[_DATA]) for e in evs)
            if cut is None:
                self._disk_rows += len(evs)
                self._disk_bytes += new
            else:   # the store holds the rows after ``cut``: the events the bounds keep, as below
                both = (list(self._events) if dropped is None else []) + evs
                k = _excess(both, sum(len(e[_DATA]) for e in both), self.retain, self.retain_bytes)
                self._disk_rows = len(both) - k
                self._disk_bytes = sum(len(e[_DATA]) for e in both[k:])
        if not evs:
            return
        with self._lock:
            if self.closed:
                return
            if dropped is not None:
                # the visible events are older than the dropped pending one: they go too
                while self._events:
                    self._bytes -= len(self._events.popleft()[_DATA])
                self._dropped_last = max(dropped, self._dropped_last if self._dropped_last is not None else dropped)
            for ev in evs:
                self._events.append(ev)
                self._bytes += len(ev[_DATA])
                self.last_id = int(ev[_ID])
            self._account()
            if len(self._events) > self.retain or self._bytes > self.retain_bytes:
                self._trim()
                self._account()
            listeners = list(self._listeners)
        for fn in listeners:
            fn()

    def _trim(self) -> None:
        """Drop the oldest visible events past either bound (the caller holds the lock)."""
        evs = self._events
        for _ in range(_excess(evs, self._bytes, self.retain, self.retain_bytes)):
            ev = evs.popleft()
            self._bytes -= len(ev[_DATA])
            # a max, not the popped id: a batch published behind pending events that retain cut
            # before they were visible has set a newer dropped id already (the visible event
            # popped now is older than those), and a resume from before them must get its gap
            if self._dropped_last is None or ev[_ID] > self._dropped_last:
                self._dropped_last = ev[_ID]

    @property
    def retained_bytes(self) -> int:
        """Data bytes of the retained (visible) events."""
        return self._bytes

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            lid = -1 if self.last_id is None else self.last_id
            self._end = ResultEvent(lid, "end", orjson.dumps({"end": True, "last_id": lid}))
            listeners = list(self._listeners)
        for fn in listeners:
            fn()

    def since(self, last_id: int | None, from_t: int | None = None) -> list[ResultEvent]:
        """Events after ``last_id`` (with a leading "gap" if some were dropped), or from ``from_t``.

        Neither: ``[]`` (the client starts at the next instant). A closed log ends with "end".
        """
        with self._lock:
            evs = list(self._events)
            end = self._end
            dropped = self._dropped_last
        out: list[ResultEvent] = []
        if last_id is not None:
            last_id = int(last_id)
            if dropped is not None and last_id < dropped and evs:
                resumed = evs[0][_ID]
                missed = last_id + 1 if not self.step else (last_id // self.step + 1) * self.step
                gap = {"missed_from": missed, "resumed_at": resumed}
                out.append(ResultEvent(last_id, "gap", orjson.dumps(gap)))
            step = self.step or 1
            out.extend(_make(e) if e[_EVENT] != "idle" else _trim_idle(e, last_id + 1, step)
                       for e in evs if e[_ID] > last_id)
        elif from_t is not None:
            from_t = int(from_t)
            step = self.step or 1
            out.extend(_make(e) if e[_EVENT] != "idle" else _trim_idle(e, from_t, step)
                       for e in evs if e[_ID] >= from_t)
        if end is not None:
            out.append(end)
        return out

    def add_listener(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn) -> None:
        with self._lock:
            try:
                self._listeners.remove(fn)
            except ValueError:
                pass

    def __len__(self) -> int:
        return len(self._events)
