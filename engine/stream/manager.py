"""StreamManager: stream registry, ingestion, continuous-query registry and evaluation.

The engine side of ``/streams`` and ``/queries`` (the stream manager contract in
docs/ARCHITECTURE.md and the contract sections of DESIGN.md).

Threads and locks
-----------------
* Ingestion (:meth:`StreamManager.ingest_ndjson`, :meth:`~StreamManager.ingest_graph`,
  :meth:`~StreamManager.heartbeat`) runs on the caller's (HTTP worker) thread
  and stays short: parse, admit the timestamps (:class:`StreamClock`), intern
  the terms, append one batch to the stream's :class:`TransientStore`, commit
  the absorbed timeless triples (one ``Store.commit`` per POST, so every
  element is atomic for one-shot queries) and then *publish* the new progress
  and wake the worker. Publishing after the append means an instant never
  fires before its data is readable.
* One background worker thread per manager evaluates the ready instants, one
  at a time, each query's instants in order, taking the queries round-robin
  (one instant, or one run of unchanged instants, per turn), so a query's
  backlog never starves the others. A slow query delays other evaluations,
  never ingestion.
* Unchanged instants: after evaluating instant ``te`` the worker keeps what it
  depended on (:meth:`InstantEvaluator.capture`); the following instants whose
  windows and stored data are provably the same
  (:meth:`InstantEvaluator.unchanged_until`) are not evaluated: a run of at
  least ``idle_after`` of them is one ``idle`` event ``{"from", "to",
  "instants", "same_as"}``, a shorter one a copy of ``te``'s result per
  instant (its own ``window``; empty I/DSTREAM differences). The cost is one
  evaluation per distinct window content, whatever the number of instants.
* Lock order: a stream's ``lock`` -> the manager's ``_cv`` -> (never the other way).
  The transient stores' own locks are never requested while ``_cv`` is held.

Stored data "as of event time t": absorbed triples are committed at once (one-shot
queries see them immediately) and recorded in an :class:`AbsorbLog`; an
instant ``t`` subtracts the rows absorbed with ``tau > t`` that were new to the
store (see :mod:`engine.stream.continuous`). So evaluation never has to hold
ingestion back.

Other choices: blank node labels are scoped to one POST (like a loaded file);
one POST is one transient-store batch (its elements are the runs of equal
timestamps); a :class:`~engine.kv.transient.TransientStoreFull` during a POST
(budget exhausted even after GC) stores nothing of it and propagates (kind
``backpressure``); the stream's progress stays as it was before the POST. An instant whose evaluation fails still produces its
``result`` event, with ``{"error": kind, "detail": ..., "window": ...}``.

Persistence (``data_dir``)
--------------------------
With a ``data_dir`` (the same directory as the ``Database``'s store) the
registered streams (name, IRI, absorb, clock, progress ``P``) and continuous
queries (name, registration text) are kept in ``<data_dir>/streams.json`` (see
:mod:`engine.stream.registry_store`), rewritten atomically on every
register/delete. A new manager over the same directory registers them again
(streams first, then the queries with :meth:`StreamManager.register_query` in
their original order) and restores each stream's progress, so elements older
than it stay rejected. An unreadable or malformed registry raises
:class:`~engine.stream.registry_store.RegistryError` naming the file.

* The progress is written by the worker at most every ``progress_sync_s``
  seconds after ingestion changed it, and at :meth:`StreamManager.close`.
  After a clean close ``P`` is exact; after a crash it is the last persisted
  value (at most ``progress_sync_s`` + one write behind), so elements with
  timestamps in ``[P_persisted, P_lost)`` would be accepted again.
  :meth:`StreamManager.sync_registry` writes at once.
* Applied batch ids (``batch_id`` of the ingest methods) are journaled by
  :class:`~engine.stream.registry_store.BatchLedger` in
  ``<data_dir>/stream-batches.jsonl`` right after the batch was stored (fsynced
  when it absorbed triples), so a restarted server still skips a re-delivered
  batch whose absorbed data it kept.
* Absorbed timeless triples are ordinary store commits and survive with the
  store. The transient (window) contents, the absorb log and the queries'
  result logs are not persisted: after a restart windows hold only elements
  received since, plus the stored data. A restored query's trigger starts at
  the restored progress, like a query registered on a stream with that
  progress.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa

from engine.errors import Category, JindouError, NotFound, QueryEvaluationError
from engine.exec.csparql import format_window, parse_continuous
from engine.exec.evaluate import DEFAULT_GRAPH_IRI
from engine.kv.store import Changes
from engine.kv.transient import NO_READERS, TransientStore, combine_horizons
from engine.settings import DEFAULTS
from engine.stream.adaptor import (
    BadArrowBatch,
    ParsedLines,
    normalize_absorb,
    parse_arrow,
    parse_graph,
    parse_ndjson,
    split_elements,
    timeless_mask,
)
from engine.stream.continuous import AbsorbLog, BoundWindow, InstantEvaluator, WindowCache
from engine.stream.limits import (
    ABSORB_MAX,
    BATCH_ID_MAX,
    IRI_MAX,
    MAX_BAD_LINES,
    BadRequest,
    TooManyBadLines,
    check_name,
    check_time,
    shorten,
)
from engine.stream.progress import ARRIVAL, EVENT, LateElementError, StreamClock, wall_clock_ms
from engine.stream.registry_store import FORMAT, VERSION, BatchLedger, RegistryError, RegistryFile
from engine.stream.windows import Trigger, Window

__all__ = ["StreamManager", "ResultLog", "ResultEvent", "StreamConflict", "StreamInUse", "QueryExists",
           "UnknownStream", "LateElementError", "RegistryError"]

log = logging.getLogger("jindou.stream")
_IRI_BAD = re.compile(r'[\x00-\x20<>"{}|^`\\]')


class StreamConflict(JindouError):
    kind = "conflict"
    category = Category.CONFLICT


class StreamInUse(JindouError):
    kind = "in_use"
    category = Category.CONFLICT


class QueryExists(JindouError):
    kind = "conflict"
    category = Category.CONFLICT


class UnknownStream(QueryEvaluationError):
    kind = "unknown_stream"


# ---------------------------------------------------------------- result log


@dataclass(frozen=True)
class ResultEvent:
    id: int
    event: str
    data: bytes
    start: int | None = None   # "idle": the first instant it covers (``id`` is the last)
    same_as: int | None = None  # "idle": the evaluated instant whose result they repeat


def idle_data(start: int, end: int, step: int, same_as: int) -> bytes:
    return orjson.dumps({"from": start, "to": end, "instants": (end - start) // step + 1, "same_as": same_as})


def _trim_idle(ev: ResultEvent, first: int, step: int) -> ResultEvent:
    """An idle event cut to the instants ``>= first`` (a client resuming inside its run)."""
    start = -(-int(first) // step) * step
    if ev.start is None or start <= ev.start:
        return ev
    return ResultEvent(ev.id, "idle", idle_data(start, ev.id, step, ev.same_as), start, ev.same_as)


class ResultLog:
    """The retained events of one query (last ``retain`` instants) + listeners."""

    def __init__(self, retain: int = 1000, step: int | None = None):
        self.retain = max(1, int(retain))
        self.step = step
        self._events: collections.deque[ResultEvent] = collections.deque()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._dropped_last: int | None = None   # id of the newest dropped event
        self._end: ResultEvent | None = None
        self.closed = False
        self.last_id: int | None = None

    def append(self, t: int, data: bytes) -> None:
        self._add(ResultEvent(int(t), "result", data))

    def append_idle(self, start: int, end: int, same_as: int) -> None:
        """One event for the unchanged instants ``start..end`` (results equal to instant
        ``same_as``'s; empty ISTREAM/DSTREAM differences)."""
        self._add(ResultEvent(int(end), "idle", idle_data(start, end, self.step or 1, same_as),
                              int(start), int(same_as)))

    def _add(self, ev: ResultEvent) -> None:
        t = ev.id
        with self._lock:
            if self.closed:
                return
            self._events.append(ev)
            while len(self._events) > self.retain:
                self._dropped_last = self._events.popleft().id
            self.last_id = int(t)
            listeners = list(self._listeners)
        for fn in listeners:
            fn()

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
                resumed = evs[0].id
                missed = last_id + 1 if not self.step else (last_id // self.step + 1) * self.step
                gap = {"missed_from": missed, "resumed_at": resumed}
                out.append(ResultEvent(last_id, "gap", orjson.dumps(gap)))
            step = self.step or 1
            out.extend(e if e.event != "idle" else _trim_idle(e, last_id + 1, step)
                       for e in evs if e.id > last_id)
        elif from_t is not None:
            from_t = int(from_t)
            step = self.step or 1
            out.extend(e if e.event != "idle" else _trim_idle(e, from_t, step)
                       for e in evs if e.id >= from_t)
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


# ---------------------------------------------------------------- registry entries


class _Stream:
    def __init__(self, name: str, iri: str, absorb, clock: str, gid: int, absorb_pids: np.ndarray | None,
                 budget: int, now_ms, horizon):
        self.name = name
        self.iri = iri
        self.absorb = absorb
        self.clock = clock
        self.gid = gid
        self.absorb_pids = absorb_pids
        self.sclock = StreamClock(name, clock=clock, now_ms=now_ms)
        self.store = TransientStore(name, budget_bytes=budget, horizon=horizon)
        self.lock = threading.Lock()
        self.deleting = False   # set by delete_stream: queries can no longer register against it
        self.published: int | None = None
        self.accepted = 0
        self.rejected = 0
        self.batches = 0
        self.elements = 0

    def body(self) -> tuple:
        return (self.iri, self.absorb, self.clock)


class _Query:
    def __init__(self, cq, streams: list[str], windows: list[BoundWindow], trigger: Trigger,
                 evaluator: InstantEvaluator, log: ResultLog):
        self.cq = cq
        self.name = cq.name
        self.streams = streams
        self.windows = windows
        self.trigger = trigger
        self.evaluator = evaluator
        self.log = log
        self.deleted = False
        self.evaluated = 0
        self.idle = 0                       # instants reported unchanged without evaluation
        self.state: tuple | None = None     # InstantEvaluator.capture() of the last evaluated instant
        self.prefix: bytes | None = None    # its data before the window member (repeat_prefix)
        self.errors = 0
        self.last_latency_ms: float | None = None
        self.out_lock = threading.Lock()


def _absorb_out(absorb):
    return absorb if isinstance(absorb, str) else list(absorb)


# ---------------------------------------------------------------- the manager


class StreamManager:
    def __init__(self, db, *, retain: int = DEFAULTS.retain, transient_budget: int = DEFAULTS.transient_budget,
                 now_ms: Callable[[], int] | None = None, data_dir: str | None = None,
                 progress_sync_s: float = 1.0, incremental: bool | str = True,
                 batch_id_limit: int = DEFAULTS.batch_id_limit, idle_after: int = DEFAULTS.idle_after):
        self.db = db
        # True: maintain sliding-window queries incrementally where it pays (adaptive); "always": even
        # where it does not (tests); False: every instant from scratch, windows rebuilt (bench A/B)
        self.incremental = incremental if incremental == "always" else bool(incremental)
        self.retain = int(retain)
        self.transient_budget = int(transient_budget)
        self._now = now_ms or wall_clock_ms
        self._streams: dict[str, _Stream] = {}
        self._queries: dict[str, _Query] = {}
        self._cv = threading.Condition(threading.RLock())
        self._absorb_log = AbsorbLog()
        self._window_cache = WindowCache(slide=bool(self.incremental))
        with db.store.write_lock:  # GRAPH <urn:jindou:default> needs a term id
            db.store.dictionary.encode(["<" + DEFAULT_GRAPH_IRI + ">"])
        self._closed = False
        self._inflight: _Query | None = None
        self._rr = 0                            # round-robin position of the worker
        # unchanged runs of at least this many instants are reported as one "idle" event
        self.idle_after = max(1, int(idle_after))
        # persistence of the registry (None without a data dir); lock order: _reg_lock -> _cv
        self._registry = RegistryFile(data_dir) if data_dir is not None else None
        self._batches = BatchLedger(data_dir, limit=batch_id_limit)   # applied batch ids (ingest_arrow)
        self._reg_lock = threading.Lock()
        self._reg_live = False                 # False while restoring: no writes
        self._progress_dirty = False           # progress changed since the last write
        self._progress_sync_s = max(0.0, float(progress_sync_s))
        self._last_sync = time.monotonic()
        if self._registry is not None:
            self._restore()
            self._reg_live = True
        self._worker = threading.Thread(target=self._run, name="jindou-continuous", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------ persistence
    @property
    def registry_path(self) -> str | None:
        return None if self._registry is None else self._registry.path

    def _restore(self) -> None:
        """Register again the streams and queries of the registry file (at start)."""
        reg = self._registry
        doc = reg.load()
        if doc is None:
            return
        for s in doc["streams"]:
            try:
                self.register_stream(s["name"], s["iri"], absorb=s["absorb"], clock=s["clock"])
            except (ValueError, JindouError) as e:
                raise RegistryError(f"stream registry {reg.path}: cannot register stream "
                                    f"{shorten(s['name'])} again: {e}") from e
            p = s.get("progress")
            if p is not None:
                try:
                    p = check_time(p, "progress")
                except BadRequest as e:
                    raise RegistryError(f"stream registry {reg.path}: stream {shorten(s['name'])}: {e}") from e
                st = self._streams[s["name"]]
                with st.lock:
                    st.sclock.restore(int(p))   # elements below the restored P stay rejected
                    st.published = int(p)
        for q in doc["queries"]:
            try:
                info = self.register_query(q["text"])
            except JindouError as e:
                raise RegistryError(f"stream registry {reg.path}: cannot register continuous query "
                                    f"{shorten(q['name'])} again: {e}") from e
            if info["id"] != q["name"]:
                raise RegistryError(f"stream registry {reg.path}: query {shorten(q['name'])} registers as "
                                    f"{shorten(info['id'])}")
        log.info("restored %d stream(s) and %d continuous query(ies) from %s",
                 len(doc["streams"]), len(doc["queries"]), reg.path)

    def _registry_doc(self) -> dict:
        with self._cv:
            streams = [{"name": st.name, "iri": st.iri, "absorb": _absorb_out(st.absorb), "clock": st.clock,
                        "progress": st.sclock.peek()} for st in self._streams.values()]
            queries = [{"name": q.name, "text": q.cq.text} for q in self._queries.values()]
        return {"format": FORMAT, "version": VERSION, "streams": streams, "queries": queries}

    def _persist(self) -> None:
        """Write the registry now (no-op without a data dir). Never call with ``_cv`` held.

        The snapshot is taken under ``_reg_lock``, so the last write always holds a state at
        least as new as every mutation that completed before it started."""
        if self._registry is None or not self._reg_live:
            return
        with self._reg_lock:
            self._progress_dirty = False
            try:
                self._registry.save(self._registry_doc())
            except BaseException:
                self._progress_dirty = True
                raise
            self._last_sync = time.monotonic()

    def sync_registry(self) -> None:
        """Write the registry (with the current progress of every stream) at once."""
        self._persist()

    def _progress_changed(self) -> None:
        if self._registry is not None:
            self._progress_dirty = True

    def _sync_due(self) -> float | None:
        """Seconds until the periodic progress write is due (0: now), None if nothing to write."""
        if self._registry is None or not self._progress_dirty:
            return None
        return max(0.0, self._last_sync + self._progress_sync_s - time.monotonic())

    def _maybe_sync_progress(self) -> None:
        due = self._sync_due()
        if due is None or due > 0:
            return
        try:
            self._persist()
        except RegistryError:
            log.exception("could not persist stream progress (will retry)")
            self._last_sync = time.monotonic()

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            qs = list(self._queries.values())
            self._cv.notify_all()
        self._worker.join(timeout=30)
        try:
            self._persist()   # final progress: exact after a clean close
        except RegistryError:
            log.exception("could not persist the stream registry at close")
        for q in qs:
            with q.out_lock:
                q.log.close()
        self._batches.close()

    # ------------------------------------------------------------ streams
    def _info(self, st: _Stream) -> dict:
        now = int(self._now())
        return {"name": st.name, "iri": st.iri, "absorb": _absorb_out(st.absorb), "clock": st.clock,
                "progress": st.sclock.progress, "accepted": st.accepted, "rejected": st.rejected,
                "triples_in_window_store": st.store.n_triples, "bytes": st.store.bytes_used,
                # additive monitoring fields (dashboard): the progress the triggers see, the lag of the
                # progress behind the server's wall clock, element/batch counts and the memory budget
                "published": st.published, "now_ms": now,
                "lag_ms": None if st.sclock.progress is None else now - st.sclock.progress,
                "elements": st.elements, "batches": st.batches, "budget_bytes": st.store.budget_bytes}

    def register_stream(self, name: str, iri: str, absorb="none", clock: str = EVENT) -> tuple[bool, dict]:
        check_name(name, "stream")
        if not isinstance(iri, str) or not iri.strip():
            raise BadRequest("the stream needs an IRI")
        iri = iri.strip()
        if iri.startswith("<") and iri.endswith(">"):
            iri = iri[1:-1]
        if len(iri) > IRI_MAX or _IRI_BAD.search(iri) or ":" not in iri:
            raise BadRequest(f"bad stream IRI {shorten(iri)}: an absolute IRI of at most {IRI_MAX} characters "
                             'without spaces, <>"{}|^`\\ or control characters')
        if isinstance(absorb, (list, tuple)):
            if len(absorb) > ABSORB_MAX:
                raise BadRequest(f"absorb lists at most {ABSORB_MAX} predicates, not {len(absorb)}")
            for a in absorb:
                a = a[1:-1] if isinstance(a, str) and a.startswith("<") and a.endswith(">") else a
                if not isinstance(a, str) or len(a) > IRI_MAX or _IRI_BAD.search(a) or ":" not in a:
                    raise BadRequest(f"absorb lists predicate IRIs (at most {IRI_MAX} characters); "
                                     f"{shorten(a)} is not one")
        try:
            absorb = normalize_absorb(absorb)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        clock = clock or EVENT
        if clock not in (EVENT, ARRIVAL):
            raise BadRequest('clock must be "event" or "arrival"')
        with self._cv:
            cur = self._streams.get(name)
            if cur is not None and cur.deleting:
                raise StreamConflict(f"stream {name!r} is being deleted")
            if cur is not None:
                if cur.body() == (iri, absorb, clock):
                    return False, self._info(cur)
                if cur.iri != iri:
                    raise StreamConflict(f"stream {name!r} is registered with IRI <{cur.iri}>")
                raise StreamConflict(f"stream {name!r} is registered with another absorb/clock setting")
            for other in self._streams.values():
                if other.iri == iri:
                    raise StreamConflict(f"IRI <{iri}> is registered as stream {other.name!r}")
            d = self.db.store.dictionary
            with self.db.store.write_lock:
                gid = int(d.encode(["<" + iri + ">"])[0])
                pids = None
                if isinstance(absorb, tuple) and absorb:
                    pids = np.sort(np.asarray(d.encode(["<" + a + ">" for a in absorb]), dtype=np.int64))
            st = _Stream(name, iri, absorb, clock, gid, pids, self.transient_budget, self._now,
                         horizon=lambda n=name: self._stream_horizon(n))
            self._streams[name] = st
        try:
            self._persist()
        except RegistryError:
            with self._cv:   # not persisted: not registered
                if self._streams.get(name) is st and not any(name in q.streams for q in self._queries.values()):
                    del self._streams[name]
            raise
        return True, self._info(st)

    def streams(self) -> list[dict]:
        with self._cv:
            sts = list(self._streams.values())
        return [self._info(s) for s in sts]

    def stream(self, name: str) -> dict:
        return self._info(self._get_stream(name))

    def _get_stream(self, name: str) -> _Stream:
        with self._cv:
            st = self._streams.get(name)
        if st is None:
            raise NotFound("stream", name)
        return st

    def delete_stream(self, name: str, force: bool = False) -> list[str]:
        with self._cv:
            st = self._streams.get(name)
            if st is None or st.deleting:
                raise NotFound("stream", name)
            users = [q.name for q in self._queries.values() if name in q.streams]
            if users and not force:
                raise StreamInUse(f"stream {name!r} is read by continuous queries: {', '.join(users)}")
            st.deleting = True   # from now on no query registers against it (UnknownStream)
        for qn in users:
            try:
                self.delete_query(qn)
            except KeyError:
                pass
        with self._cv:
            if self._streams.get(name) is st:
                del self._streams[name]
            self._cv.notify_all()
        self._batches.forget(name)
        self._persist()
        return users

    # ------------------------------------------------------------ ingestion
    def _publish(self, st: _Stream) -> None:
        """Caller holds ``st.lock``: make the stream's progress visible to the triggers."""
        with self._cv:
            st.published = st.sclock.peek()
            first = st.sclock.last_first
            if first is not None:
                for q in self._queries.values():
                    if q.trigger.pending and st.name in q.streams:
                        q.trigger.observe(st.name, first)
            self._cv.notify_all()

    def _encode(self, s: pa.Array, p: pa.Array, o: pa.Array) -> tuple[np.ndarray, tuple[int, int]]:
        """(n, 3) int64 ids, interning missing terms (dictionary columns: each distinct key once),
        and ``(first id interned here, store snapshot number)`` for :meth:`_absorb`."""
        n = len(s)
        store = self.db.store
        d = store.dictionary
        rows = np.empty((n, 3), dtype=np.int64)
        with store.write_lock:
            mark = (len(d), store.snapshot().sn)
            if n == 0:
                pass
            elif all(isinstance(c, pa.DictionaryArray) for c in (s, p, o)):
                for j, c in enumerate((s, p, o)):
                    rows[:, j] = d.encode(c)
            else:
                t = pa.large_string()
                ids = np.asarray(d.encode(pa.concat_arrays([s.cast(t), p.cast(t), o.cast(t)])), dtype=np.int64)
                rows.T[:] = ids.reshape(3, n)
        return rows, mark

    def _absorb(self, rows: np.ndarray, tau: np.ndarray, mark: tuple[int, int] | None = None) -> None:
        """Commit timeless triples to the store's default graph (one commit = atomic).

        ``mark`` = (first id interned by this batch, snapshot number then): if no commit
        happened since, a row holding a term interned by this batch cannot be in the store,
        so only the other rows need the edge test (a stream of new observations skips it)."""
        store = self.db.store
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
            self._absorb_log.add(tau, rows, ~present)   # before the commit (see AbsorbLog)
            store.commit(Changes(add={None: rows}))

    def _store_batch(self, st: _Stream, rows: np.ndarray, tau: np.ndarray,
                     mark: tuple[int, int] | None = None) -> bool:
        """Caller holds ``st.lock``: append to the transient store, absorb the timeless part.

        Returns whether timeless triples were committed to the store."""
        if len(rows) == 0:
            return False
        st.store.append_rows(rows, tau)
        st.batches += 1
        st.elements += len(split_elements(tau))
        tm = timeless_mask(rows[:, 1], st.absorb, st.absorb_pids)
        if tm.all():
            self._absorb(rows, tau, mark)
            return True
        if tm.any():
            self._absorb(rows[tm], tau[tm], mark)
            return True
        return False

    # -- idempotent batches
    @staticmethod
    def _check_batch_id(batch_id) -> str | None:
        if batch_id is None:
            return None
        if not isinstance(batch_id, str) or not batch_id or len(batch_id) > BATCH_ID_MAX \
                or not batch_id.isprintable():
            raise BadArrowBatch(f"a batch id is a non-empty printable string of at most {BATCH_ID_MAX} "
                                f"characters, not {shorten(batch_id)}")
        return batch_id

    def _duplicate(self, st: _Stream, batch_id: str | None) -> dict | None:
        """The answer for a batch already applied to ``st`` (nothing changes), else None."""
        if batch_id is None or not self._batches.seen(st.name, batch_id):
            return None
        return {"accepted": 0, "rejected": 0, "errors": [], "progress": st.sclock.peek(),
                "duplicate": True, "batch_id": batch_id}

    def _ingest(self, name: str, batch_id, parse: Callable[[_Stream, str], ParsedLines]) -> dict:
        """The shared ingestion path (ndjson and Arrow): parse, intern, admit, store, publish."""
        batch_id = self._check_batch_id(batch_id)
        st = self._get_stream(name)
        dup = self._duplicate(st, batch_id)   # before parsing: a re-delivery interns nothing
        if dup is not None:
            return dup
        parsed = parse(st, f"L{self.db.store.next_load_id()}x")
        if st.clock != ARRIVAL and len(parsed):   # refuse a flood of late elements before interning
            self._check_late(parsed, st.sclock.peek())
        rows, mark = self._encode(parsed.s, parsed.p, parsed.o)
        with st.lock:
            dup = self._duplicate(st, batch_id)   # a concurrent delivery of the same batch
            if dup is not None:
                return dup
            report = self._admit_rows(st, parsed, rows, mark)
            if batch_id is not None:
                self._batches.record(st.name, batch_id, durable=report.pop("_absorbed"))
                report["duplicate"] = False
                report["batch_id"] = batch_id
            else:
                report.pop("_absorbed")
        return report

    @staticmethod
    def _late_mask(t: np.ndarray, p0: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(late rows, progress each row sees) by the progress rules from ``p0``."""
        n = len(t)
        seen = np.empty(n, dtype=np.int64)
        seen[0] = np.iinfo(np.int64).min if p0 is None else p0
        if n > 1:
            np.maximum.accumulate(t[:-1], out=seen[1:])
            np.maximum(seen[1:], seen[0], out=seen[1:])
        return t < seen, seen

    @staticmethod
    def _check_late(parsed: ParsedLines, p0: int | None) -> None:
        """Raise TooManyBadLines when bad lines plus late elements (at least those late against
        ``p0``; progress only grows) exceed the limit."""
        late, seen = StreamManager._late_mask(parsed.t, p0)
        n_late = int(np.count_nonzero(late))
        if n_late + len(parsed.errors) > MAX_BAD_LINES:
            i = int(np.argmax(late)) if n_late else 0
            first = parsed.errors[0] if parsed.errors else {
                "line": int(parsed.line[i]),
                "error": f"late element: timestamp {int(parsed.t[i])} is below the stream's progress {int(seen[i])}"}
            raise TooManyBadLines(n_late + len(parsed.errors), first)

    def _admit_rows(self, st: _Stream, parsed: ParsedLines, rows: np.ndarray,
                    mark: tuple[int, int] | None = None) -> dict:
        """Caller holds ``st.lock``: progress rules per row, then one transient-store batch.

        A :class:`TransientStoreFull` stores nothing, counts the rows as rejected, leaves the
        stream's progress as it was and propagates."""
        errors = list(parsed.errors)
        n = len(parsed)
        saved = st.sclock.save()
        if st.clock == ARRIVAL:
            stamps, mask, _ = st.sclock.assign(n=n)
        else:
            stamps = parsed.t
            p0 = st.sclock.peek()
            mask, _ = st.sclock.admit(stamps)
            if not mask.all() and len(errors) + n - int(np.count_nonzero(mask)) > MAX_BAD_LINES:
                st.sclock.rollback(saved)
                self._check_late(parsed, p0)   # raises, naming the first bad line
                raise TooManyBadLines(None, None)
            if not mask.all():
                seen = np.empty(n, dtype=np.int64)
                seen[0] = np.iinfo(np.int64).min if p0 is None else p0
                if n > 1:
                    np.maximum.accumulate(stamps[:-1], out=seen[1:])
                    np.maximum(seen[1:], seen[0], out=seen[1:])
                for i in np.flatnonzero(~mask).tolist():
                    errors.append({"line": int(parsed.line[i]),
                                   "error": f"late element: timestamp {int(stamps[i])} is below the "
                                            f"stream's progress {int(seen[i])}"})
        acc = int(np.count_nonzero(mask))
        stored = absorbed = False
        try:
            if acc == n:
                absorbed = self._store_batch(st, rows, np.asarray(stamps, dtype=np.int64), mark)
            else:
                absorbed = self._store_batch(st, rows[mask], np.asarray(stamps, dtype=np.int64)[mask], mark)
            stored = True
        finally:
            if not stored:
                st.sclock.rollback(saved)
            st.accepted += acc if stored else 0
            st.rejected += len(errors) + (0 if stored else acc)
            self._publish(st)
            self._progress_changed()
        if len(errors) > 1:
            errors.sort(key=lambda e: e["line"])
        return {"accepted": acc, "rejected": len(errors), "errors": errors, "progress": st.sclock.peek(),
                "_absorbed": absorbed}

    def ingest_ndjson(self, name: str, body: bytes, batch_id: str | None = None) -> dict:
        """One ndjson POST (bad lines reported, good ones kept); see :meth:`ingest_arrow` for ``batch_id``."""
        return self._ingest(name, batch_id, lambda st, prefix: parse_ndjson(
            body, need_t=st.clock != ARRIVAL, bnode_prefix=prefix))

    def ingest_arrow(self, name: str, table: pa.Table | pa.RecordBatch, batch_id: str | None = None) -> dict:
        """Ingest an Arrow batch: string columns ``s``, ``p``, ``o`` (N-Triples terms), ``t`` (int64 ms
        or a timestamp of any unit, taken in whole ms).

        Same rules and answer as :meth:`ingest_ndjson` (``line`` = 1-based row number), without
        a Python step per triple. ``batch_id``: a batch already applied to this stream with
        that id is skipped and answered ``{"duplicate": true, "accepted": 0, ...}`` with nothing
        changed; the most recent ``batch_id_limit`` ids per stream are remembered (journaled
        under the data dir, so a restart still recognises them). A missing or mistyped column
        raises :class:`~engine.stream.adaptor.BadArrowBatch` before anything is stored."""
        return self._ingest(name, batch_id, lambda st, prefix: parse_arrow(
            table, need_t=st.clock != ARRIVAL, bnode_prefix=prefix))

    def batch_seen(self, name: str, batch_id: str) -> bool:
        """Whether ``batch_id`` is among the applied batches remembered for stream ``name``."""
        self._get_stream(name)
        return self._batches.seen(name, batch_id)

    def ingest_graph(self, name: str, data: bytes, media_type: str, t: int | None,
                     batch_id: str | None = None) -> dict:
        batch_id = self._check_batch_id(batch_id)
        st = self._get_stream(name)
        if t is not None:
            t = check_time(t, "?t")
        dup = self._duplicate(st, batch_id)
        if dup is not None:
            return dup
        prefix = f"L{self.db.store.next_load_id()}x"
        pk = parse_graph(data, media_type, bnode_prefix=prefix)   # LoadError: nothing stored
        rows, mark = self._encode(pk.s, pk.p, pk.o)
        n = len(rows)
        with st.lock:
            dup = self._duplicate(st, batch_id)
            if dup is not None:
                return dup
            saved = st.sclock.save()
            if st.clock == ARRIVAL:
                stamps, _, _ = st.sclock.assign(n=1)
                tau = int(stamps[0])
            else:
                tau = int(self._now()) if t is None else int(t)
                try:
                    st.sclock.check(np.asarray([tau], dtype=np.int64))
                except LateElementError:
                    st.rejected += max(1, n)
                    raise
            stored = absorbed = False
            try:
                absorbed = self._store_batch(st, rows, np.full(n, tau, dtype=np.int64), mark)
                stored = True
            finally:
                if stored:
                    st.accepted += n
                else:
                    st.sclock.rollback(saved)
                    st.rejected += n
                self._publish(st)
                self._progress_changed()
            progress = st.sclock.peek()
            report = {"accepted": n, "rejected": 0, "errors": [], "progress": progress}
            if batch_id is not None:
                self._batches.record(st.name, batch_id, durable=absorbed)
                report.update(duplicate=False, batch_id=batch_id)
        return report

    def heartbeat(self, name: str, t: int) -> int:
        """Raise the stream's progress to ``t``; a time outside the contract's range raises
        :class:`~engine.stream.limits.BadTimestamp` and changes nothing."""
        st = self._get_stream(name)
        t = check_time(t, "heartbeat t")
        with st.lock:
            if st.clock == ARRIVAL:
                p = st.sclock.tick()
            else:
                p = st.sclock.heartbeat(int(t))
            self._publish(st)
        self._progress_changed()
        return p

    # ------------------------------------------------------------ continuous queries
    def register_query(self, text: str) -> dict:
        cq = parse_continuous(text)
        self._tick_arrivals()
        with self._cv:
            if self._closed:
                raise QueryEvaluationError("the stream manager is closed")
            if cq.name in self._queries:
                raise QueryExists(f"continuous query {cq.name!r} exists")
            by_iri = {s.iri: s for s in self._streams.values()}
            seen: dict[str, str] = {}
            bound: list[BoundWindow] = []
            wins: dict[str, Window] = {}
            for spec in cq.windows:
                ref = spec.stream
                st = self._streams.get(ref.name) if ref.name is not None else by_iri.get(ref.iri)
                if st is None or st.deleting:
                    what = shorten(ref.name) if ref.name is not None else f"<{shorten(ref.iri)[1:-1]}>"
                    raise UnknownStream(f"unknown stream {what}: register it with PUT /streams/{{name}} first")
                spelled = ref.name if ref.name is not None else f"<{ref.iri}>"
                if st.name in seen:
                    raise QueryEvaluationError(
                        f"stream {st.name!r} is read twice ({seen[st.name]} and {spelled}); "
                        "each stream appears at most once per query")
                seen[st.name] = spelled
                w = Window(spec.range_ms, spec.step_ms, spec.triples)
                wins[st.name] = w
                bound.append(BoundWindow(st.name, st.iri, st.gid, w, st.store))
            progress = {n: self._streams[n].published for n in wins}
            trigger = Trigger.for_windows(wins, progress)
            ev = InstantEvaluator(self.db, cq.query, cq.mode, bound, self._absorb_log, self._window_cache,
                                  incremental=self.incremental)
            log = ResultLog(self.retain, trigger.step)
            q = _Query(cq, list(wins), bound, trigger, ev, log)
            self._queries[cq.name] = q
            self._cv.notify_all()
        try:
            self._persist()
        except RegistryError:
            with self._cv:   # not persisted: not registered
                if self._queries.get(cq.name) is q:
                    del self._queries[cq.name]
            with q.out_lock:
                q.deleted = True
                q.log.close()
            raise
        return {"id": cq.name, "streams": list(wins), "vars": self._vars(cq)}

    @staticmethod
    def _vars(cq) -> list[str]:
        if cq.query.form != "SELECT":
            return []
        return [v.name for v in cq.query.vars]

    def _qinfo(self, q: _Query) -> dict:
        return {"id": q.name, "text": q.cq.text, "mode": q.cq.mode, "form": q.cq.query.form,
                "streams": list(q.streams), "vars": self._vars(q.cq),
                "windows": [{"stream": bw.stream, "iri": bw.iri, "range_ms": spec.range_ms,
                             "step_ms": spec.step_ms, "triples": spec.triples, "text": format_window(spec)}
                            for bw, spec in zip(q.windows, q.cq.windows, strict=True)],
                "next_instant": q.trigger.next_instant, "evaluated": q.evaluated, "unchanged_instants": q.idle,
                "last_latency_ms": q.last_latency_ms}

    def queries(self) -> list[dict]:
        with self._cv:
            return [self._qinfo(q) for q in self._queries.values()]

    def query(self, name: str) -> dict:
        with self._cv:
            q = self._queries.get(name)
            if q is None:
                raise NotFound("continuous query", name)
            return self._qinfo(q)

    def delete_query(self, name: str) -> None:
        with self._cv:
            q = self._queries.pop(name, None)
            if q is None:
                raise NotFound("continuous query", name)
            self._cv.notify_all()
        with q.out_lock:
            q.deleted = True
            q.log.close()
        self._gc([bw.stream for bw in q.windows])
        self._persist()

    def log(self, name: str) -> ResultLog:
        with self._cv:
            q = self._queries.get(name)
        if q is None:
            raise NotFound("continuous query", name)
        return q.log

    # ------------------------------------------------------------ evaluation worker
    def _progress(self) -> dict[str, int | None]:
        return {n: s.published for n, s in self._streams.items()}

    def _tick_arrivals(self) -> None:
        with self._cv:
            sts = [s for s in self._streams.values() if s.clock == ARRIVAL]
        for st in sts:
            with st.lock:
                st.sclock.tick()
                self._publish(st)

    def _next_job(self) -> tuple[_Query, int, int] | None:
        """Caller holds ``_cv``: the next query with a ready instant, round-robin (a query with a
        long backlog gets one instant or one unchanged run per turn, never the worker), as
        ``(query, its next instant, its last ready instant)``. Nothing is issued yet."""
        prog = self._progress()
        qs = list(self._queries.values())
        n = len(qs)
        for k in range(n):
            i = (self._rr + k) % n
            q = qs[i]
            last = q.trigger.ready_upto(prog)
            if last is not None:
                self._rr = i + 1
                return q, q.trigger.next_instant, last
        return None

    def _has_ready(self) -> bool:
        prog = self._progress()
        return any(q.trigger.ready_upto(prog) is not None for q in self._queries.values())

    def _wait_time(self) -> float | None:
        """Arrival-clock streams advance with the wall clock: wake at the next instant."""
        best = None
        now = int(self._now())
        for q in self._queries.values():
            if any(self._streams[s].clock == ARRIVAL for s in q.streams if s in self._streams):
                nxt = q.trigger.next_instant
                w = 0.05 if nxt is None else (nxt + 1 - now) / 1000.0
                best = w if best is None else min(best, w)
        if best is None:
            return None
        return min(1.0, max(0.005, best))

    def _run(self) -> None:
        while True:
            try:
                if not self._step():
                    return
            except Exception:  # noqa: BLE001 - the worker must survive anything
                log.exception("continuous-query worker")
                time.sleep(0.01)

    def _step(self) -> bool:
        """One round of the worker: evaluate one ready instant or wait. False when closed."""
        self._tick_arrivals()
        self._maybe_sync_progress()
        with self._cv:
            if self._closed:
                return False
            job = self._next_job()
            if job is None:
                self._cv.notify_all()
                wait = self._wait_time()
                due = self._sync_due()
                if due is not None:
                    wait = due if wait is None else min(wait, due)
                self._cv.wait(timeout=wait)
                return True
            q, t, last = job
            self._inflight = q
        try:
            # instants whose windows and stored data equal the last evaluated one's cost nothing
            u = None
            if q.state is not None and q.prefix is not None:
                u = q.evaluator.unchanged_until(q.state, t, last, q.trigger.step)
            with self._cv:
                if u is None:
                    issued = q.trigger.ready(self._progress(), limit=1)   # [] if its stream went away
                else:
                    q.trigger.advance(u)
            if u is not None:
                self._report_unchanged(q, t, u)
            elif issued:
                self._evaluate(q, issued[0])
        finally:
            with self._cv:
                self._inflight = None
                self._cv.notify_all()
        self._gc(q.streams)
        return True

    def _evaluate(self, q: _Query, t: int) -> None:
        state = q.evaluator.capture(t)
        win = None
        try:
            data, ms = q.evaluator.run(t)
        except Exception as e:  # noqa: BLE001 - reported in the query's result stream
            kind = getattr(e, "kind", "error")
            if isinstance(e, JindouError):
                detail = str(e)
            else:   # never the text of an unexpected exception: a reference to the log
                ref = f"{int(time.time() * 1000):x}-{id(e) & 0xffff:04x}"
                log.exception("continuous query %s, instant %d (error id %s)", q.name, t, ref)
                kind, detail = "internal", f"internal error (id {ref} in the server log)"
            try:
                win = q.evaluator.window_member(t)
            except Exception:  # noqa: BLE001
                win = {"start": t, "end": t}
            data = orjson.dumps({"error": kind, "detail": detail, "window": win})
            ms = None
            q.errors += 1
        try:
            prefix = q.evaluator.repeat_prefix(data, win if win is not None else q.evaluator.window_member(t))
        except Exception:  # noqa: BLE001 - then the next instant is evaluated, as without skipping
            log.exception("continuous query %s: cannot keep instant %d for unchanged instants", q.name, t)
            prefix = None
        with q.out_lock:
            if q.deleted:
                return
            q.evaluated += 1
            q.last_latency_ms = ms
            q.state, q.prefix = state, prefix
            q.log.append(t, data)

    def _report_unchanged(self, q: _Query, t: int, u: int) -> None:
        """Instants ``t..u`` equal the last evaluated one: a run of at least ``idle_after``
        instants is one ``idle`` event, a shorter one a ``result`` event per instant (the same
        result with its own window; an empty I/DSTREAM difference), without evaluating."""
        step = q.trigger.step
        n = (u - t) // step + 1
        te = q.state[0]
        if n >= self.idle_after:
            with q.out_lock:
                if not q.deleted:
                    q.idle += n
                    q.evaluated += n
                    q.log.append_idle(t, u, te)
            return
        datas = [(x, q.evaluator.repeat(q.prefix, x)) for x in range(t, u + 1, step)]
        with q.out_lock:
            if q.deleted:
                return
            q.idle += n
            q.evaluated += n
            for x, d in datas:
                q.log.append(x, d)

    # ------------------------------------------------------------ GC
    def _stream_horizon(self, name: str) -> int | None:
        """GC horizon of a stream over the windows of the queries reading it."""
        with self._cv:
            uses = [(bw.store, bw.window, q.trigger.next_instant)
                    for q in self._queries.values() for bw in q.windows if bw.stream == name]
        if not uses:
            return NO_READERS
        return combine_horizons(store.horizon_for(w, nxt) for store, w, nxt in uses)

    def _gc(self, stream_names) -> None:
        for n in stream_names:
            with self._cv:
                st = self._streams.get(n)
            if st is None:
                continue
            st.store.gc(self._stream_horizon(n))
        self._absorb_log.prune(self._absorb_horizon())

    def _absorb_horizon(self) -> int | None:
        """No instant below this will be evaluated by a present or (best effort) future query."""
        with self._cv:
            h = None
            for q in self._queries.values():
                nxt = q.trigger.next_instant
                if nxt is None:
                    ps = [self._streams[s].published for s in q.streams if s in self._streams]
                    ps = [p for p in ps if p is not None]
                    if not ps:
                        return None
                    nxt = min(ps)
                h = nxt if h is None else min(h, nxt)
            for st in self._streams.values():
                if st.published is not None:
                    h = st.published if h is None else min(h, st.published)
            return None if h is None else h - 1

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every ready instant is evaluated; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._cv.notify_all()
            while self._inflight is not None or self._has_ready():
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return False
                self._cv.wait(timeout=min(left, 0.05))
        return True
