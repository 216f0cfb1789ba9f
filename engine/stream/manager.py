"""StreamManager: the engine side of ``/streams`` and ``/queries``, a facade over the stream parts.

It keeps the public contract (docs/ARCHITECTURE.md, "Stream manager contract"): it checks a
request, raises the contract's errors, and hands the work to one part per concept:

* :mod:`engine.stream.registry` -- streams and continuous queries by name, the lock over them
  (``cv``) and their persistence in ``<data_dir>/streams.json``;
* :mod:`engine.stream.ingest` -- the ingestion path (parse, intern, admit, store one transient
  batch, absorb, publish) on the caller's thread, with :mod:`engine.stream.ledger` (applied
  batch ids, idempotent ingestion) and :mod:`engine.stream.absorb` (timeless triples into the
  store; the store "as of event time t" for instants);
* :mod:`engine.stream.scheduler` -- the one worker thread evaluating the ready instants
  (round-robin, unchanged instants skipped) with :mod:`engine.stream.continuous` (one instant),
  :mod:`engine.stream.gc` and :mod:`engine.stream.resultlog` (the events SSE clients read).

Lock order: a stream's ``lock`` -> the registry's ``cv`` (never the other way); the registry's
write lock -> ``cv``. The transient stores' own locks are never requested while ``cv`` is held.

Restart (``data_dir``): streams, queries and progress are registered again (see
:mod:`engine.stream.registry`); applied batch ids are journaled (:mod:`engine.stream.ledger`);
absorbed timeless triples are ordinary store commits and survive with the store. The transient
(window) contents and the absorb log are not persisted: after a restart windows hold only
elements received since, plus the stored data. A restored query's trigger starts at the restored
progress, like a query registered on a stream with that progress -- unless its durable result log
(:mod:`engine.stream.resultstore`) holds instants: then it resumes at the instant after the log's
last one, so SSE clients and sinks resuming after a restart see no gap. Result sinks:
:mod:`engine.stream.sinks` (``self.sinks``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from engine.errors import Category, JindouError, NotFound, QueryEvaluationError
from engine.exec.evaluate import DEFAULT_GRAPH_IRI
from engine.settings import DEFAULTS
from engine.sparql.csparql import parse_continuous
from engine.stream.absorb import AbsorbLog
from engine.stream.adaptor import parse_arrow, parse_ndjson
from engine.stream.continuous import BoundWindow, InstantEvaluator, WindowCache
from engine.stream.gc import collect, stream_horizon
from engine.stream.ingest import Ingestor
from engine.stream.ledger import BatchLedger
from engine.stream.limits import shorten
from engine.stream.progress import ARRIVAL, EVENT, LateElementError, wall_clock_ms
from engine.stream.registry import QueryEntry, Registry, StreamEntry, check_stream_args, query_vars
from engine.stream.registry_store import RegistryError
from engine.stream.resultlog import ResultEvent, ResultLog
from engine.stream.resultstore import ResultStore
from engine.stream.scheduler import Scheduler
from engine.stream.sinks import Sinks
from engine.stream.windows import Trigger, Window

__all__ = ["StreamManager", "ResultLog", "ResultEvent", "StreamConflict", "StreamInUse", "QueryExists",
           "UnknownStream", "LateElementError", "RegistryError"]

log = logging.getLogger("jindou.stream")


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
        self._absorb_log = AbsorbLog()
        self._window_cache = WindowCache(slide=bool(self.incremental))
        with db.store.write_lock:  # GRAPH <urn:jindou:default> needs a term id
            db.store.dictionary.encode(["<" + DEFAULT_GRAPH_IRI + ">"])
        self._reg = Registry(data_dir, progress_sync_s)
        self._batches = BatchLedger(data_dir, limit=batch_id_limit)   # applied batch ids
        self._ingest = Ingestor(db, self._reg, self._batches, self._absorb_log, self._now)
        self._scheduler = Scheduler(self._reg, self._absorb_log, self._now, idle_after)
        # durable result logs and sink progress (results.sqlite); the server starts the sinks (sinks.start)
        self._results = ResultStore(data_dir) if data_dir is not None else None
        self.sinks = Sinks(self._results)
        self._reg.restore(self.register_stream, self.register_query)
        if self._results is not None:   # rows of queries deleted just before a crash
            for name in self._results.queries() - set(self._reg.queries):
                self._results.forget(name)
        self._scheduler.start()

    @property
    def idle_after(self) -> int:
        return self._scheduler.idle_after

    # ------------------------------------------------------------ persistence, lifecycle
    @property
    def registry_path(self) -> str | None:
        return self._reg.path

    def sync_registry(self) -> None:
        """Write the registry (with the current progress of every stream) at once."""
        self._reg.persist()

    def close(self) -> None:
        if not self._scheduler.stop():
            return
        with self._reg.cv:
            qs = list(self._reg.queries.values())
        try:
            self._reg.persist()   # final progress: exact after a clean close
        except RegistryError:
            log.exception("could not persist the stream registry at close")
        if self._results is not None:
            self._results.flush()
        self.sinks.close()
        for q in qs:
            with q.out_lock:
                q.log.close()
        self._batches.close()
        if self._results is not None:
            self._results.close()

    # ------------------------------------------------------------ streams
    def register_stream(self, name: str, iri: str, absorb="none", clock: str = EVENT) -> tuple[bool, dict]:
        iri, absorb, clock = check_stream_args(name, iri, absorb, clock)
        reg = self._reg
        with reg.cv:
            cur = reg.streams.get(name)
            if cur is not None and cur.deleting:
                raise StreamConflict(f"stream {name!r} is being deleted")
            if cur is not None:
                if cur.body() == (iri, absorb, clock):
                    return False, cur.info(int(self._now()))
                if cur.iri != iri:
                    raise StreamConflict(f"stream {name!r} is registered with IRI <{cur.iri}>")
                raise StreamConflict(f"stream {name!r} is registered with another absorb/clock setting")
            for other in reg.streams.values():
                if other.iri == iri:
                    raise StreamConflict(f"IRI <{iri}> is registered as stream {other.name!r}")
            d = self.db.store.dictionary
            with self.db.store.write_lock:
                gid = int(d.encode(["<" + iri + ">"])[0])
                pids = None
                if isinstance(absorb, tuple) and absorb:
                    pids = np.sort(np.asarray(d.encode(["<" + a + ">" for a in absorb]), dtype=np.int64))
            st = StreamEntry(name, iri, absorb, clock, gid, pids, self.transient_budget, self._now,
                             horizon=lambda n=name: stream_horizon(reg, n))
            reg.streams[name] = st
        try:
            reg.persist()
        except RegistryError:
            with reg.cv:   # not persisted: not registered
                if reg.streams.get(name) is st and not any(name in q.streams for q in reg.queries.values()):
                    del reg.streams[name]
            raise
        return True, st.info(int(self._now()))

    def streams(self) -> list[dict]:
        with self._reg.cv:
            sts = list(self._reg.streams.values())
        now = int(self._now())
        return [s.info(now) for s in sts]

    def stream(self, name: str) -> dict:
        return self._reg.stream(name).info(int(self._now()))

    def delete_stream(self, name: str, force: bool = False) -> list[str]:
        reg = self._reg
        with reg.cv:
            st = reg.streams.get(name)
            if st is None or st.deleting:
                raise NotFound("stream", name)
            users = [q.name for q in reg.queries.values() if name in q.streams]
            if users and not force:
                raise StreamInUse(f"stream {name!r} is read by continuous queries: {', '.join(users)}")
            st.deleting = True   # from now on no query registers against it (UnknownStream)
        for qn in users:
            try:
                self.delete_query(qn)
            except KeyError:
                pass
        with reg.cv:
            if reg.streams.get(name) is st:
                del reg.streams[name]
            reg.cv.notify_all()
        self._batches.forget(name)
        reg.persist()
        return users

    # ------------------------------------------------------------ ingestion
    def ingest_ndjson(self, name: str, body: bytes, batch_id: str | None = None) -> dict:
        """One ndjson POST (bad lines reported, good ones kept); see :meth:`ingest_arrow` for ``batch_id``."""
        return self._ingest.ingest(name, batch_id, lambda st, prefix: parse_ndjson(
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
        return self._ingest.ingest(name, batch_id, lambda st, prefix: parse_arrow(
            table, need_t=st.clock != ARRIVAL, bnode_prefix=prefix))

    def ingest_graph(self, name: str, data: bytes, media_type: str, t: int | None,
                     batch_id: str | None = None) -> dict:
        return self._ingest.ingest_graph(name, data, media_type, t, batch_id)

    def heartbeat(self, name: str, t: int) -> int:
        """Raise the stream's progress to ``t``; a time outside the contract's range raises
        :class:`~engine.stream.limits.BadTimestamp` and changes nothing."""
        return self._ingest.heartbeat(name, t)

    def batch_seen(self, name: str, batch_id: str) -> bool:
        """Whether ``batch_id`` is among the applied batches remembered for stream ``name``."""
        self._reg.stream(name)
        return self._batches.seen(name, batch_id)

    # ------------------------------------------------------------ continuous queries
    def register_query(self, text: str) -> dict:
        cq = parse_continuous(text)
        self._scheduler.tick_arrivals()
        reg = self._reg
        with reg.cv:
            if self._scheduler.closed:
                raise QueryEvaluationError("the stream manager is closed")
            if cq.name in reg.queries:
                raise QueryExists(f"continuous query {cq.name!r} exists")
            by_iri = {s.iri: s for s in reg.streams.values()}
            seen: dict[str, str] = {}
            bound: list[BoundWindow] = []
            wins: dict[str, Window] = {}
            for ref, w in zip(cq.streams, cq.windows, strict=True):
                st = reg.streams.get(ref.name) if ref.name is not None else by_iri.get(ref.iri)
                if st is None or st.deleting:
                    what = shorten(ref.name) if ref.name is not None else f"<{shorten(ref.iri)[1:-1]}>"
                    raise UnknownStream(f"unknown stream {what}: register it with PUT /streams/{{name}} first")
                spelled = ref.name if ref.name is not None else f"<{ref.iri}>"
                if st.name in seen:
                    raise QueryEvaluationError(
                        f"stream {st.name!r} is read twice ({seen[st.name]} and {spelled}); "
                        "each stream appears at most once per query")
                seen[st.name] = spelled
                wins[st.name] = w
                bound.append(BoundWindow(st.name, st.iri, st.gid, w, st.store))
            progress = {n: reg.streams[n].published for n in wins}
            trigger = Trigger.for_windows(wins, progress)
            ev = InstantEvaluator(self.db, cq.query, cq.mode, bound, self._absorb_log, self._window_cache,
                                  incremental=self.incremental)
            rlog = ResultLog(self.retain, trigger.step, store=self._results, name=cq.name)
            if rlog.last_id is not None:   # a durable log: resume after its last instant
                trigger = Trigger.for_windows(wins, {n: rlog.last_id + 1 for n in wins})
            q = QueryEntry(cq, list(wins), bound, trigger, ev, rlog)
            reg.queries[cq.name] = q
            reg.cv.notify_all()
        try:
            reg.persist()
        except RegistryError:
            with reg.cv:   # not persisted: not registered
                if reg.queries.get(cq.name) is q:
                    del reg.queries[cq.name]
            q.close()
            raise
        return {"id": cq.name, "streams": list(wins), "vars": query_vars(cq)}

    def queries(self) -> list[dict]:
        with self._reg.cv:
            return [q.info() for q in self._reg.queries.values()]

    def query(self, name: str) -> dict:
        with self._reg.cv:
            return self._reg.query(name).info()

    def delete_query(self, name: str) -> None:
        reg = self._reg
        with reg.cv:
            q = reg.queries.pop(name, None)
            if q is None:
                raise NotFound("continuous query", name)
            reg.cv.notify_all()
        q.close()
        self.sinks.drop(name)
        if self._results is not None:
            self._results.forget(name)
        collect(reg, self._absorb_log, [bw.stream for bw in q.windows])
        reg.persist()

    def log(self, name: str) -> ResultLog:
        return self._reg.query(name).log

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every ready instant is evaluated (and, with a data dir, its result is
        committed and visible); False on timeout."""
        ok = self._scheduler.drain(timeout)
        if ok and self._results is not None:
            ok = self._results.flush(timeout)
        return ok
