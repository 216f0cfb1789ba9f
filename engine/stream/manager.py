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
* :mod:`engine.sparql.csparql` -- the query texts (C-SPARQL, RSP-QL, CQELS-QL);
  :mod:`engine.stream.syntax_eval` evaluates RSP-QL / CQELS datasets and ``f:timestamp``;
  :mod:`engine.stream.derived` feeds a ``REGISTER STREAM`` query's results into its stream.

Lock order: a stream's ``lock`` -> the registry's ``cv`` (never the other way); the registry's
write lock -> ``cv``. The transient stores' own locks are never requested while ``cv`` is held.

Restart (``data_dir``): streams, queries and progress are registered again (see
:mod:`engine.stream.registry`); applied batch ids are journaled (:mod:`engine.stream.ledger`);
absorbed timeless triples are ordinary store commits and survive with the store; the transient
(window) contents are journaled (:mod:`engine.stream.window_journal`) and read back before the
first instant. The absorb log is not persisted: after a restart absorbed triples are visible to
every instant. A restored query's trigger starts at the restored
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

from engine.errors import Category, JindouError, NotFound, QueryEvaluationError, QuerySyntaxError
from engine.exec.evaluate import DEFAULT_GRAPH_IRI
from engine.exec.functions import function_arity
from engine.plan.planner import unpin_plan
from engine.settings import DEFAULTS
from engine.sparql.csparql import parse_continuous
from engine.stream.absorb import AbsorbLog
from engine.stream.adaptor import parse_arrow, parse_ndjson
from engine.stream.continuous import BoundWindow, InstantEvaluator, WindowCache
from engine.stream.derived import DerivedStreamLog, DerivedWriter, derived_iri
from engine.stream.gc import collect, stream_horizon
from engine.stream.heap import keep_freed_heap
from engine.stream.ingest import Ingestor
from engine.stream.ledger import BatchLedger
from engine.stream.limits import shorten
from engine.stream.progress import ARRIVAL, EVENT, LateElementError, wall_clock_ms
from engine.stream.registry import QueryEntry, Registry, StreamEntry, check_stream_args, query_vars
from engine.stream.registry_store import RegistryError
from engine.stream.resultlog import ResultEvent, ResultLog, TotalBytes
from engine.stream.resultstore import ResultStore
from engine.stream.scheduler import Scheduler
from engine.stream.sinks import Sinks
from engine.stream.syntax_eval import TIMESTAMP_FN, WindowedEvaluator
from engine.stream.window_journal import WindowJournal
from engine.stream.windows import Trigger, Window, query_step

__all__ = ["StreamManager", "ResultLog", "ResultEvent", "StreamConflict", "StreamInUse", "QueryExists",
           "UnknownStream", "LateElementError", "RegistryError", "StreamIsDerived"]

log = logging.getLogger("jindou.stream")


class StreamConflict(JindouError):
    kind = "conflict"
    category = Category.CONFLICT


class StreamInUse(JindouError):
    kind = "in_use"
    category = Category.CONFLICT


def _exists(cq) -> str:
    """The 409's text; a query named after its output IRI can take another name (``?name=``)."""
    hint = " (?name= registers it under another name)" if getattr(cq, "iri_named", False) else ""
    return f"continuous query {cq.name!r} exists{hint}"


class QueryExists(JindouError):
    kind = "conflict"
    category = Category.CONFLICT


class UnknownStream(QueryEvaluationError):
    kind = "unknown_stream"


class StreamIsDerived(JindouError):
    """A POST or heartbeat to a stream that a ``REGISTER STREAM`` query writes (409)."""

    kind = "derived_stream"
    category = Category.CONFLICT


def check_calls(cq) -> None:
    """Refuse at registration a function called by IRI that is not known (XSD casts,
    ``f:timestamp``) or called with the wrong number of arguments: at an instant it would
    only ever be an error (unbound, FILTER false)."""
    for iri, n, line, col in cq.calls:
        arity = function_arity(iri)
        if arity is None:
            raise QuerySyntaxError(f"unknown function <{iri}>: a continuous query may call the XSD casts and "
                                   f"C-SPARQL's f:timestamp(?s, ?p, ?o) (<{TIMESTAMP_FN}>)", line, col)
        if n != arity:
            raise QuerySyntaxError(f"<{iri}> takes {arity} argument(s), not {n}", line, col)


class StreamManager:
    def __init__(self, db, *, retain: int = DEFAULTS.retain, retain_bytes: int = DEFAULTS.retain_bytes,
                 retain_total_bytes: int = DEFAULTS.retain_total_bytes,
                 transient_budget: int = DEFAULTS.transient_budget,
                 now_ms: Callable[[], int] | None = None, data_dir: str | None = None,
                 progress_sync_s: float = 1.0, incremental: bool | str = True,
                 batch_id_limit: int = DEFAULTS.batch_id_limit, idle_after: int = DEFAULTS.idle_after,
                 skip_behind: int = DEFAULTS.skip_behind,
                 maintain_cpu_ratio: float = DEFAULTS.maintain_cpu_ratio):
        self.db = db
        keep_freed_heap()   # large result events reuse dropped events' memory (no page faults)
        # True: maintain sliding-window queries incrementally where it pays (adaptive); "always": even
        # where it does not (tests); False: every instant from scratch, windows rebuilt (bench A/B)
        self.incremental = incremental if incremental == "always" else bool(incremental)
        self.retain = int(retain)
        self.retain_bytes = int(retain_bytes)
        self.retain_total = TotalBytes(retain_total_bytes)   # all result logs together
        self.maintain_cpu_ratio = float(maintain_cpu_ratio)   # see _maintenance
        self.transient_budget = int(transient_budget)
        self._now = now_ms or wall_clock_ms
        self._absorb_log = AbsorbLog()
        self._window_cache = WindowCache(slide=bool(self.incremental))
        with db.store.write_lock:  # GRAPH <urn:jindou:default> needs a term id
            db.store.dictionary.encode(["<" + DEFAULT_GRAPH_IRI + ">"])
        self._reg = Registry(data_dir, progress_sync_s)
        self._batches = BatchLedger(data_dir, limit=batch_id_limit)   # applied batch ids
        # each stream's stored elements on disk, read back below: windows survive a restart
        self._journal = WindowJournal(data_dir) if data_dir is not None else None
        self._ingest = Ingestor(db, self._reg, self._batches, self._absorb_log, self._now, self._journal)
        self._scheduler = Scheduler(self._reg, self._absorb_log, self._now, idle_after)
        self._scheduler.lane.max_lag = int(skip_behind)   # heavy queries far behind (engine.stream.lanes)
        # durable result logs and sink progress (results.sqlite); the server starts the sinks (sinks.start)
        self._results = ResultStore(data_dir) if data_dir is not None else None
        self.sinks = Sinks(self._results)
        self._reg.restore(self.register_stream, self.register_query)
        if self._results is not None:   # rows of queries deleted just before a crash
            for name in self._results.queries() - set(self._reg.queries):
                self._results.forget(name)
        self._ingest.replay_windows()
        self._reg.prime_restored()   # I/DSTREAM: the last logged instant again, to difference the next against
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
            query = getattr(q.evaluator, "query", None)
            if query is not None:   # pinned while registered (Registry.add_query)
                unpin_plan(query)
        self._batches.close()
        if self._journal is not None:
            self._journal.close()
        if self._results is not None:
            self._results.close()

    # ------------------------------------------------------------ streams
    def register_stream(self, name: str, iri: str, absorb="none", clock: str = EVENT, *,
                        producer: str | None = None) -> tuple[bool, dict]:
        """``producer``: the REGISTER STREAM query that writes the stream (set by the manager
        itself and by a restore, never by a client)."""
        iri, absorb, clock = check_stream_args(name, iri, absorb, clock)
        reg = self._reg
        with reg.cv:
            cur = reg.streams.get(name)
            if cur is not None and cur.deleting:
                raise StreamConflict(f"stream {name!r} is being deleted")
            if cur is not None:
                if cur.body() == (iri, absorb, clock) and cur.producer == producer:
                    return False, cur.info(int(self._now()))
                if cur.producer is not None:
                    raise StreamConflict(f"stream {name!r} is written by continuous query {cur.producer!r} "
                                         "(REGISTER STREAM)")
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
            st.producer = producer
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
            if st.producer is not None and st.producer in reg.queries:
                raise StreamInUse(f"stream {name!r} is written by continuous query {st.producer!r} (REGISTER "
                                  f"STREAM): DELETE /queries/{st.producer} removes both")
            users = [q.name for q in reg.queries.values() if name in q.streams]
            if users and not force:
                raise StreamInUse(f"stream {name!r} is read by continuous queries: {', '.join(users)}")
            order = self._readers_first(users)   # readers of derived streams go before their producers
            st.deleting = True   # from now on no query registers against it (UnknownStream)
        for qn in order:
            try:
                self.delete_query(qn)
            except (KeyError, NotFound):
                pass
        with reg.cv:
            if reg.streams.get(name) is st:
                del reg.streams[name]
            reg.cv.notify_all()
        self._batches.forget(name)
        if self._journal is not None:
            self._journal.forget(name)
        reg.persist()
        return order

    def _readers_first(self, names: list[str]) -> list[str]:
        """Caller holds ``cv``: ``names`` and, for those that write a derived stream, every query
        reading it (transitively), ordered so that a reader comes before its producer."""
        reg = self._reg
        out: list[str] = []
        seen: set[str] = set()

        def visit(qn: str) -> None:
            if qn in seen:
                return
            seen.add(qn)
            q = reg.queries.get(qn)
            if q is not None and q.cq.derived:
                for r in list(reg.queries.values()):
                    if r.name != qn and qn in r.streams:
                        visit(r.name)
            out.append(qn)

        for qn in names:
            visit(qn)
        return out

    def _writable(self, name: str):
        st = self._reg.stream(name)
        if st.producer is not None:
            raise StreamIsDerived(f"stream {name!r} is written by continuous query {st.producer!r} (REGISTER "
                                  "STREAM); it takes no elements or heartbeats from clients")
        return st

    # ------------------------------------------------------------ ingestion
    def ingest_ndjson(self, name: str, body: bytes, batch_id: str | None = None) -> dict:
        """One ndjson POST (bad lines reported, good ones kept); see :meth:`ingest_arrow` for ``batch_id``."""
        self._writable(name)
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
        self._writable(name)
        return self._ingest.ingest(name, batch_id, lambda st, prefix: parse_arrow(
            table, need_t=st.clock != ARRIVAL, bnode_prefix=prefix))

    def ingest_graph(self, name: str, data: bytes, media_type: str, t: int | None,
                     batch_id: str | None = None) -> dict:
        self._writable(name)
        return self._ingest.ingest_graph(name, data, media_type, t, batch_id)

    def heartbeat(self, name: str, t: int) -> int:
        """Raise the stream's progress to ``t``; a time outside the contract's range raises
        :class:`~engine.stream.limits.BadTimestamp` and changes nothing."""
        self._writable(name)
        return self._ingest.heartbeat(name, t)

    def batch_seen(self, name: str, batch_id: str) -> bool:
        """Whether ``batch_id`` is among the applied batches remembered for stream ``name``."""
        self._reg.stream(name)
        return self._batches.seen(name, batch_id)

    # ------------------------------------------------------------ continuous queries
    def register_query(self, text: str, name: str | None = None) -> dict:
        """Register a continuous query (C-SPARQL, RSP-QL or CQELS form; ``name`` names a text
        without a REGISTER header). ``REGISTER STREAM x`` also registers the stream ``x`` its
        results feed (see :mod:`engine.stream.derived`); a restore adopts the stream kept
        from before."""
        cq = parse_continuous(text, name=name)
        check_calls(cq)
        self._scheduler.tick_arrivals()
        reg = self._reg
        created = False
        if cq.derived:
            with reg.cv:
                if cq.name in reg.queries:
                    raise QueryExists(_exists(cq))
                cur = reg.streams.get(cq.name)
                if cur is not None and cur.producer != cq.name:
                    raise StreamConflict(f"stream {cq.name!r} exists: REGISTER STREAM {cq.name} needs a name no "
                                         "stream has")
            created, _ = self.register_stream(cq.name, cq.output_iri or derived_iri(cq.name), "none", EVENT,
                                              producer=cq.name)
        try:
            return self._register_query(cq)
        except BaseException:
            if created:
                self._drop_derived(cq.name)
            raise

    def _register_query(self, cq) -> dict:
        reg = self._reg
        with reg.cv:
            if self._scheduler.closed:
                raise QueryEvaluationError("the stream manager is closed")
            if cq.name in reg.queries:
                raise QueryExists(_exists(cq))
            by_iri = {s.iri: s for s in reg.streams.values()}
            seen: dict[str, str] = {}   # stream -> its first spelling
            bound: list[BoundWindow] = []
            wins: dict[str, Window] = {}   # the streams read, in order (a stream may have several windows)
            for ref, w in zip(cq.streams, cq.windows, strict=True):
                st = reg.streams.get(ref.name) if ref.name is not None else by_iri.get(ref.iri)
                if st is None or st.deleting:
                    what = shorten(ref.name) if ref.name is not None else f"<{shorten(ref.iri)[1:-1]}>"
                    raise UnknownStream(f"unknown stream {what}: register it with PUT /streams/{{name}} first")
                spelled = ref.name if ref.name is not None else f"<{ref.iri}>"
                if cq.derived and st.name == cq.name:
                    raise QueryEvaluationError(f"REGISTER STREAM {cq.name} cannot read the stream it writes")
                if st.name in seen and cq.syntax == "csparql":
                    # (C-SPARQL windows are one default graph: the parser catches the repeats it can
                    # see, this is a short name and the IRI it is registered under)
                    raise QueryEvaluationError(
                        f"stream {st.name!r} is read twice ({seen[st.name]} and {spelled}); a C-SPARQL query "
                        "reads a stream once: two windows on one stream are RSP-QL named windows (FROM NAMED "
                        "WINDOW <w> ON <s>)")
                seen.setdefault(st.name, spelled)
                wins.setdefault(st.name, w)
                bound.append(BoundWindow(st.name, st.iri, st.gid, w, st.store))
            progress = {n: reg.streams[n].published for n in wins}
            # every window's STEP counts (two windows on one stream are one entry of wins)
            trigger = Trigger(query_step(cq.windows), list(wins), progress)
            ev = self._evaluator(cq, bound)
            self._maintenance(ev)
            rlog = ResultLog(self.retain, trigger.step, store=self._results, name=cq.name,
                             retain_bytes=self.retain_bytes, total=self.retain_total)
            if rlog.last_id is not None:   # a durable log: resume after its last instant
                trigger = Trigger(query_step(cq.windows), list(wins), {n: rlog.last_id + 1 for n in wins})
            if cq.derived:
                rlog = DerivedStreamLog(rlog, DerivedWriter(self._ingest, cq.name, cq.name, trigger.step,
                                                            diff=cq.mode != "RSTREAM"))
            q = QueryEntry(cq, list(wins), bound, trigger, ev, rlog)
            reg.add_query(q)
            reg.cv.notify_all()
        try:
            reg.persist()
        except RegistryError:
            with reg.cv:   # not persisted: not registered
                reg.remove_query(q)
            q.close()
            raise
        if rlog.last_id is not None:
            self._progress_past(list(wins), rlog.last_id)
        return {"id": cq.name, "streams": list(wins), "vars": query_vars(cq)}

    def _progress_past(self, streams: list[str], last: int) -> None:
        """A restored query's durable log holds instant ``last``: it was evaluated once every
        stream it reads had progress > ``last``. The registry's persisted progress may be older
        (a crash within ``progress_sync_s`` of a heartbeat), so raise the event-time streams' to
        ``last + 1``: an element below it stays late, as it was before the crash, instead of
        entering windows of later instants that a run without the crash never had it in."""
        for n in streams:
            try:
                if self._reg.stream(n).clock != ARRIVAL:
                    self._ingest.heartbeat(n, last + 1)
            except JindouError as e:
                log.warning("stream %r: progress not raised past instant %d: %s", n, last, e)

    def _evaluator(self, cq, bound: list[BoundWindow]) -> InstantEvaluator:
        """C-SPARQL without f:timestamp: the plain evaluator; RSP-QL / CQELS (windows as named
        graphs) or f:timestamp: :class:`~engine.stream.syntax_eval.WindowedEvaluator`."""
        uses_ts = any(c[0] == TIMESTAMP_FN for c in cq.calls)
        if cq.windows_in_default and not uses_ts:
            return InstantEvaluator(self.db, cq.query, cq.mode, bound, self._absorb_log, self._window_cache,
                                    incremental=self.incremental)
        gids = None
        if not cq.windows_in_default:
            names = [wn if wn is not None else bw.iri for wn, bw in zip(cq.window_names, bound, strict=True)]
            with self.db.store.write_lock:
                gids = [int(x) for x in self.db.store.dictionary.encode(["<" + n + ">" for n in names])]
        return WindowedEvaluator(self.db, cq.query, cq.mode, bound, self._absorb_log, self._window_cache,
                                 window_gids=gids, element_times=uses_ts)

    def _maintenance(self, ev: InstantEvaluator) -> None:
        """The operator's latency-for-CPU trade (``--maintain-cpu-ratio``) on a new query's
        maintained answers (:mod:`engine.stream.maintained`): none at 0 (each instant evaluated
        when it fires), else its cost guard's bound."""
        m = getattr(ev, "_maint", None)
        if m is None:
            return
        if self.maintain_cpu_ratio <= 0:
            m.close()   # (the ingestion no longer sees it)
            ev._maint = None
        elif self.maintain_cpu_ratio != m.GUARD_RATIO:
            m.GUARD_RATIO = self.maintain_cpu_ratio

    def _drop_derived(self, name: str) -> None:
        """Remove the derived stream ``name`` (its producer is gone or never registered)."""
        reg = self._reg
        with reg.cv:
            st = reg.streams.get(name)
            if st is None or st.producer != name:
                return
            st.deleting = True
            del reg.streams[name]
            reg.cv.notify_all()
        self._batches.forget(name)
        if self._journal is not None:
            self._journal.forget(name)
        reg.persist()

    def queries(self) -> list[dict]:
        with self._reg.cv:
            return [q.info() for q in self._reg.queries.values()]

    def query(self, name: str) -> dict:
        with self._reg.cv:
            return self._reg.query(name).info()

    def delete_query(self, name: str) -> None:
        """Delete a query; a REGISTER STREAM query also deletes its stream, and is refused (409)
        while other queries read that stream."""
        reg = self._reg
        with reg.cv:
            q = reg.queries.get(name)
            if q is None:
                raise NotFound("continuous query", name)
            if q.cq.derived:
                readers = [r.name for r in reg.queries.values() if r is not q and name in r.streams]
                if readers:
                    raise StreamInUse(f"continuous query {name!r} writes stream {name!r} (REGISTER STREAM), "
                                      f"which continuous queries read: {', '.join(readers)}; delete them first")
            reg.remove_query(q)
            reg.cv.notify_all()
        q.close()
        maintained = getattr(q.evaluator, "_maint", None)
        if maintained is not None:
            maintained.close()   # the ingestion stops maintaining its result at once
        self.sinks.drop(name)
        if self._results is not None:
            self._results.forget(name)
        collect(reg, self._absorb_log, [bw.stream for bw in q.windows])
        if q.cq.derived:
            self._drop_derived(name)
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
