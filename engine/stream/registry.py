"""The registry: the streams and continuous queries by name, the lock over them, and their persistence.

One :class:`Registry` per manager holds a :class:`StreamEntry` per stream (its clock, transient
store, lock and counters) and a :class:`QueryEntry` per continuous query (its bound windows,
trigger, evaluator and result log). Its condition ``cv`` guards both tables, every trigger and
every stream's ``published`` progress; the scheduler waits on it. Lock order: a stream's
``lock`` -> ``cv`` (never the other way); the registry's write lock -> ``cv``.

Persistence (``data_dir``): the streams (name, IRI, absorb, clock, progress ``P``; the producing
query of a ``REGISTER STREAM`` stream) and queries
(name, registration text) are kept in ``<data_dir>/streams.json``
(:mod:`engine.stream.registry_store`), rewritten atomically on every register/delete and, for
progress, by the worker at most every ``progress_sync_s`` seconds after ingestion changed it
(:meth:`Registry.maybe_sync`) and at close. After a clean close ``P`` is exact; after a crash it
is the last persisted value (at most ``progress_sync_s`` + one write behind), so elements with
timestamps in ``[P_persisted, P_lost)`` would be accepted again. A new manager over the same
directory registers everything again (:meth:`Registry.restore`: streams first, then the queries
in their original order) and restores each stream's progress, so elements older than it stay
rejected. An unreadable or malformed registry raises
:class:`~engine.stream.registry_store.RegistryError` naming the file.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

import numpy as np

from engine.errors import JindouError, NotFound
from engine.plan.planner import pin_plan, unpin_plan
from engine.sparql.csparql import format_window
from engine.stream.adaptor import normalize_absorb
from engine.stream.continuous import BoundWindow, InstantEvaluator
from engine.stream.limits import ABSORB_MAX, IRI_MAX, BadRequest, check_name, check_time, shorten
from engine.stream.progress import ARRIVAL, EVENT, StreamClock
from engine.stream.registry_store import FORMAT, VERSION, RegistryError, RegistryFile
from engine.stream.resultlog import ResultLog
from engine.stream.transient import TransientStore
from engine.stream.windows import Trigger

__all__ = ["Registry", "StreamEntry", "QueryEntry", "check_stream_args"]

log = logging.getLogger("jindou.stream")
_IRI_BAD = re.compile(r'[\x00-\x20<>"{}|^`\\]')


def check_stream_args(name, iri, absorb, clock) -> tuple[str, str | tuple[str, ...], str]:
    """``(iri, absorb, clock)`` of a stream registration in normal form; :class:`BadRequest` if
    any is outside the contract."""
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
    return iri, absorb, clock


def absorb_out(absorb):
    return absorb if isinstance(absorb, str) else list(absorb)


class StreamEntry:
    """One registered stream: settings, clock, transient store, lock and counters."""

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
        self.producer: str | None = None   # the REGISTER STREAM query writing it (a derived stream)
        self.published: int | None = None
        self.accepted = 0
        self.rejected = 0
        self.batches = 0
        self.elements = 0

    def body(self) -> tuple:
        return (self.iri, self.absorb, self.clock)

    def info(self, now: int) -> dict:
        return {"name": self.name, "iri": self.iri, "absorb": absorb_out(self.absorb), "clock": self.clock,
                "progress": self.sclock.progress, "accepted": self.accepted, "rejected": self.rejected,
                "triples_in_window_store": self.store.n_triples, "bytes": self.store.bytes_used,
                # additive monitoring fields (dashboard): the progress the triggers see, the lag of the
                # progress behind the server's wall clock, element/batch counts and the memory budget
                "published": self.published, "now_ms": now,
                "lag_ms": None if self.sclock.progress is None else now - self.sclock.progress,
                "elements": self.elements, "batches": self.batches, "budget_bytes": self.store.budget_bytes,
                "producer": self.producer}


def query_vars(cq) -> list[str]:
    if cq.query.form != "SELECT":
        return []
    return [v.name for v in cq.query.vars]


class QueryEntry:
    """One registered continuous query: its windows bound to streams, trigger, evaluator, log."""

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
        self.prefix: memoryview | None = None   # its data before the window member (repeat_prefix: a view of the event)
        self.errors = 0
        # the latest failed instant ({instant, error, detail}, as in its result event): a failing
        # query shows why in GET /queries/{name}, not only to an SSE client that happens to listen
        self.last_error: dict | None = None
        self.last_latency_ms: float | None = None
        self.out_lock = threading.Lock()
        self.batch_status: Callable[[], dict] | None = None   # set by the scheduler (multi-query execution)
        self.sched = 0      # the scheduler's index token: its entries for this query with another are stale
        self.lane_t: int | None = None   # the instant the heavy lane evaluates now (engine.stream.lanes; the GC keeps it)

    def close(self) -> None:
        """Deleted: no more events; the log ends (clients get ``end``)."""
        with self.out_lock:
            self.deleted = True
            self.log.close()

    def info(self) -> dict:
        cq = self.cq
        names = cq.window_names or (None,) * len(self.windows)
        out = {"id": self.name, "text": cq.text, "mode": cq.mode, "form": cq.query.form,
                "streams": list(self.streams), "vars": query_vars(cq), "syntax": cq.syntax,
                "windows": [{"stream": bw.stream, "iri": bw.iri, "range_ms": bw.window.range_ms,
                             "step_ms": bw.window.step_ms, "triples": bw.window.triples,
                             "text": format_window(bw.window), "name": wn}
                            for bw, wn in zip(self.windows, names, strict=True)],
                "next_instant": self.trigger.next_instant, "evaluated": self.evaluated,
                "unchanged_instants": self.idle, "last_latency_ms": self.last_latency_ms,
                "errors": self.errors, "last_error": self.last_error,
                **(self.batch_status() if self.batch_status is not None else {"batched": False, "peers": 0})}
        writer = getattr(self.log, "writer", None)
        if writer is not None:   # REGISTER STREAM: what it wrote into its stream
            out["derived"] = writer.info()
        return out


class Registry:
    """Streams and queries by name under one condition (``cv``), written to ``data_dir`` if given."""

    def __init__(self, data_dir: str | None = None, progress_sync_s: float = 1.0):
        self.cv = threading.Condition(threading.RLock())
        self.streams: dict[str, StreamEntry] = {}
        self.queries: dict[str, QueryEntry] = {}
        self.file = RegistryFile(data_dir) if data_dir is not None else None
        self._write_lock = threading.Lock()   # lock order: _write_lock -> cv
        self.live = False                     # False while restoring: no writes
        self._progress_dirty = False          # progress changed since the last write
        self._progress_sync_s = max(0.0, float(progress_sync_s))
        self._last_sync = time.monotonic()
        # registrations and deletions since the scheduler last looked ("add" / "del", entry), in
        # order: its index of due queries follows them without scanning every query
        self.changes: list[tuple[str, QueryEntry]] = []
        # queries whose first instant is not known yet (publish feeds them the first timestamp)
        self._pending: dict[str, QueryEntry] = {}
        self.observed = 0   # how many times publish fixed the first instant of some query

    # -- lookups ---------------------------------------------------------------
    def stream(self, name: str) -> StreamEntry:
        with self.cv:
            st = self.streams.get(name)
        if st is None:
            raise NotFound("stream", name)
        return st

    def query(self, name: str) -> QueryEntry:
        with self.cv:
            q = self.queries.get(name)
        if q is None:
            raise NotFound("continuous query", name)
        return q

    def add_query(self, q: QueryEntry) -> None:
        """Caller holds ``cv``: ``q`` is registered (under its name)."""
        self.queries[q.name] = q
        self.changes.append(("add", q))
        query = getattr(q.evaluator, "query", None)
        if query is not None:   # evaluated at every instant: its plan must not be evicted
            pin_plan(query)
        if q.trigger.pending:
            self._pending[q.name] = q

    def remove_query(self, q: QueryEntry) -> bool:
        """Caller holds ``cv``: unregister ``q`` (False if its name is not ``q`` any more)."""
        if self.queries.get(q.name) is not q:
            return False
        del self.queries[q.name]
        self.changes.append(("del", q))
        query = getattr(q.evaluator, "query", None)
        if query is not None:
            unpin_plan(query)
        if self._pending.get(q.name) is q:
            del self._pending[q.name]
        return True

    def progress(self) -> dict[str, int | None]:
        """Caller holds ``cv``: the published progress of every stream (what the triggers see)."""
        return {n: s.published for n, s in self.streams.items()}

    def publish(self, st: StreamEntry) -> None:
        """Caller holds ``st.lock``: make the stream's progress visible to the triggers (and wake
        the scheduler). Called only after the stream's batch is readable."""
        with self.cv:
            st.published = st.sclock.peek()
            first = st.sclock.last_first
            if first is not None and self._pending:   # only the queries still waiting for it
                for name, q in list(self._pending.items()):
                    if st.name in q.streams:
                        q.trigger.observe(st.name, first)
                        if not q.trigger.pending:
                            del self._pending[name]
                            self.observed += 1
            self.cv.notify_all()

    # -- persistence -----------------------------------------------------------
    @property
    def path(self) -> str | None:
        return None if self.file is None else self.file.path

    def restore(self, register_stream: Callable, register_query: Callable[..., dict]) -> None:
        """Register again the streams and queries of the registry file (at start), through the
        manager's own registration (the same checks as a client's)."""
        reg = self.file
        if reg is None:
            return
        doc = reg.load()
        if doc is not None:
            self._restore(reg, doc, register_stream, register_query)
        self.live = True

    def _restore(self, reg: RegistryFile, doc: dict, register_stream, register_query) -> None:
        for s in doc["streams"]:
            try:
                register_stream(s["name"], s["iri"], absorb=s["absorb"], clock=s["clock"],
                                producer=s.get("producer"))
            except (ValueError, JindouError) as e:
                raise RegistryError(f"stream registry {reg.path}: cannot register stream "
                                    f"{shorten(s['name'])} again: {e}") from e
            p = s.get("progress")
            if p is not None:
                try:
                    p = check_time(p, "progress")
                except BadRequest as e:
                    raise RegistryError(f"stream registry {reg.path}: stream {shorten(s['name'])}: {e}") from e
                st = self.streams[s["name"]]
                with st.lock:
                    st.sclock.restore(int(p))   # elements below the restored P stay rejected
                    st.published = int(p)
        for q in doc["queries"]:
            try:
                info = register_query(q["text"], name=q["name"])
            except JindouError as e:
                raise RegistryError(f"stream registry {reg.path}: cannot register continuous query "
                                    f"{shorten(q['name'])} again: {e}") from e
            if info["id"] != q["name"]:
                raise RegistryError(f"stream registry {reg.path}: query {shorten(q['name'])} registers as "
                                    f"{shorten(info['id'])}")
        log.info("restored %d stream(s) and %d continuous query(ies) from %s",
                 len(doc["streams"]), len(doc["queries"]), reg.path)

    def prime_restored(self) -> None:
        """At start, after the windows are replayed and before the first instant: each restored
        I/DSTREAM query evaluates the last instant of its durable result log again, unreported,
        so its next difference is taken against that instant
        (:meth:`~engine.stream.continuous.InstantEvaluator.prime`). A failure is logged and
        leaves the query as it was (its next difference is then taken against nothing)."""
        with self.cv:
            qs = [q for q in self.queries.values() if q.cq.mode != "RSTREAM" and q.log.last_id is not None]
        for q in qs:
            try:
                with q.out_lock:
                    q.evaluator.prime(q.log.last_id)
            except Exception:  # noqa: BLE001 - one query's state never stops a restart
                log.exception("continuous query %r: instant %s not evaluated again after the restart; its "
                              "next ISTREAM/DSTREAM difference is taken against no solutions",
                              q.name, q.log.last_id)

    def doc(self) -> dict:
        with self.cv:
            streams = [{"name": st.name, "iri": st.iri, "absorb": absorb_out(st.absorb), "clock": st.clock,
                        "progress": st.sclock.peek(), **({"producer": st.producer} if st.producer else {})}
                       for st in self.streams.values()]
            queries = [{"name": q.name, "text": q.cq.text} for q in self.queries.values()]
        return {"format": FORMAT, "version": VERSION, "streams": streams, "queries": queries}

    def persist(self) -> None:
        """Write the registry now (no-op without a data dir). Never call with ``cv`` held.

        The snapshot is taken under the write lock, so the last write always holds a state at
        least as new as every mutation that completed before it started."""
        if self.file is None or not self.live:
            return
        with self._write_lock:
            self._progress_dirty = False
            try:
                self.file.save(self.doc())
            except BaseException:
                self._progress_dirty = True
                raise
            self._last_sync = time.monotonic()

    def progress_changed(self) -> None:
        if self.file is not None:
            self._progress_dirty = True

    def sync_due(self) -> float | None:
        """Seconds until the periodic progress write is due (0: now), None if nothing to write."""
        if self.file is None or not self._progress_dirty:
            return None
        return max(0.0, self._last_sync + self._progress_sync_s - time.monotonic())

    def maybe_sync(self) -> None:
        due = self.sync_due()
        if due is None or due > 0:
            return
        try:
            self.persist()
        except RegistryError:
            log.exception("could not persist stream progress (will retry)")
            self._last_sync = time.monotonic()
