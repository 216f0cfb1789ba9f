"""The scheduler: one worker thread that evaluates the ready instants of every continuous query
(and a second, the heavy lane, for the queries whose instants are expensive).

* Each query's instants are evaluated in order, each exactly once (its
  :class:`~engine.stream.windows.Trigger` says which are ready: every stream it reads has
  published ``P > t``; a heavy query far behind skips a run of them, :mod:`engine.stream.lanes`).
  The queries are taken round-robin, one instant or one run of unchanged instants per turn, so
  a query's backlog never starves the others. A slow query's turns go to
  the heavy lane (below), so it does not delay the others either; ingestion runs on the
  callers' threads.
* Unchanged instants: after evaluating instant ``te`` the worker keeps what it depended on
  (:meth:`InstantEvaluator.capture`); the following instants whose windows and stored data are
  provably the same (:meth:`InstantEvaluator.unchanged_until`) are not evaluated: a run of at
  least ``idle_after`` of them is one ``idle`` event ``{"from", "to", "instants", "same_as"}``, a
  shorter one a copy of ``te``'s result per instant (its own ``window``; empty I/DSTREAM
  differences). The cost is one evaluation per distinct window content, whatever the number of
  instants. An instant whose time windows changed, but by no triple of a predicate the query's
  patterns can match (:meth:`InstantEvaluator.quiet_until`, over the streams' element times per
  predicate: :mod:`engine.stream.pred_times`), is reported as the last result with its own
  window without capture or evaluation (:meth:`_step_one`), and becomes the state the
  next instant is checked against.
* An instant whose evaluation fails still produces its ``result`` event, with
  ``{"error": kind, "detail": ..., "window": ...}`` (an unforeseen error: ``internal`` and an id
  that is in the log, never its text).
* Arrival-clock streams advance with the wall clock: the worker ticks them and wakes at their
  next instant. Between instants it writes the registry's progress when due and runs the GC
  (:mod:`engine.stream.gc`, which looks at every query: while instants are ready after a
  quarter as many evaluations as there are queries or a second, and when the worker has caught
  up; ``drain`` waits for it).
* The cost of choosing the next job does not grow with the queries that are not due: the
  worker keeps an index of due queries (per set of streams read, a heap by next instant; the
  ready ones in a FIFO, which gives the round-robin), follows registrations and deletions through
  the registry's change list, and looks at a query only when its streams' progress passes its
  next instant.
* Multi-query execution (:mod:`engine.stream.multiquery`): queries of one shape form a group.
  When the turn comes to a query of a group with other members at the same next instant, those
  members are taken together: the unchanged-instant check runs once per distinct member state,
  the members that need evaluating get one batched execution (their results split per member,
  each logged exactly as if evaluated alone), and the GC runs once for the batch. A query that
  cannot be batched, or a group of one, takes the single path above.
* Heavy queries (:mod:`engine.stream.lanes`): a query whose single-path instants average more
  CPU time than the lane's bound is handed to the heavy lane's thread when its turn comes (the
  worker times each single-path instant); the lane runs the same single path on it, after the
  worker has run out of ready instants, and re-indexes it. A heavy query is in no batch.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import orjson

from engine.errors import JindouError, WorkerUnavailable
from engine.stream import instant_fast as _fast
from engine.stream import telemetry
from engine.stream.absorb import AbsorbLog
from engine.stream.continuous import InstantEvaluator
from engine.stream.gc import collect
from engine.stream.lanes import HeavyLane
from engine.stream.multiquery import Group, Refused, analyze
from engine.stream.progress import ARRIVAL
from engine.stream.registry import QueryEntry, Registry

__all__ = ["Scheduler"]

#: seconds between tries of an instant while a store worker is down
_STORE_RETRY_S = 0.2
#: GC while instants are ready (it looks at every query: not after each one): after a quarter as
#: many evaluations as there are queries (at least _GC_MIN_STEPS), or _GC_EVERY_S seconds
_GC_EVERY_S = 1.0
_GC_MIN_STEPS = 16
#: ... and, when the step count triggers it, only after this many times the last pass's duration
#: since that pass (at most ~1/_GC_SPACING of the worker's time in GC passes, as the time rule)
_GC_SPACING = 50
#: the interpreter's cyclic GC is held during an instant of a query whose last instant took less
#: than this (ms); see _pause_gc
_GC_PAUSE_MS = 20.0
#: ... and during a batched instant whose last batch took less than this (ms): a batch of
#: thousands of members is one instant's work, and with the GC on, the young collections its
#: allocations trigger (and now and then a full one, which walks every query's objects) landed
#: inside it -- a third of a 10,000-member batch's time, measured
_GC_PAUSE_BATCH_MS = 250.0

log = logging.getLogger("jindou.stream")


def _pause_gc(last_ms: float | None, below: float = _GC_PAUSE_MS) -> bool:
    """Hold the interpreter's cyclic GC for one instant of a query whose last instant took
    ``last_ms`` (held only below :data:`_GC_PAUSE_MS`: a long evaluation does not keep the
    process's GC off); True if it was paused (then :func:`_resume_gc` turns it back on).

    Python collects generation 0 when allocations pass its threshold, wherever that happens --
    and the stream ingestion's allocations on other threads move the count too -- so an
    instant paid a collection now and then (measured: a third of CityBench C5's instants,
    ~25 µs each; a generation-1 collection ~0.2-1 ms, a full one tens of ms in a process that
    had not frozen what it loaded). Held for the instant, the collection runs right after it
    (:func:`_resume_gc`): the same work, after the instant's result is in its log. Reference
    counting still frees everything that is not cyclic meanwhile."""
    if last_ms is not None and last_ms < below and gc.isenabled():
        gc.disable()
        return True
    return False


def _resume_gc(paused: bool) -> None:
    """After an instant: the GC back on, and the young generations collected now if they are
    due (half the threshold used: the next instant then starts with room)."""
    if not paused:
        return
    gc.enable()
    t0, t1, _ = gc.get_threshold()
    c0, c1, _ = gc.get_count()
    if t0 and c0 >= t0 // 2:
        gc.collect(1 if t1 and c1 + 1 >= t1 else 0)


class Scheduler:
    """The evaluation worker of one manager (started by :meth:`start`, stopped by :meth:`stop`)."""

    def __init__(self, reg: Registry, absorb_log: AbsorbLog, now_ms: Callable[[], int], idle_after: int = 100):
        self.reg = reg
        self.absorb_log = absorb_log
        self._now = now_ms
        # unchanged runs of at least this many instants are reported as one "idle" event
        self.idle_after = max(1, int(idle_after))
        self.closed = False                     # under reg.cv
        self._inflight: QueryEntry | None = None
        # the index of due queries (under cv): per set of streams read, a heap of
        # (next instant, seq, token, query) of the queries not ready yet; the ready ones in a FIFO
        # (round-robin: a query still ready after its turn goes to the back); queries whose first
        # instant is not known yet aside. Entries whose token is not the query's ``sched`` are stale.
        self._heaps: dict[tuple[str, ...], list] = {}
        # the FIFO as two parallel deques (queries, their tokens): appending allocates no
        # tuple the interpreter's GC tracks -- a batch re-queues thousands of members per
        # instant, and those tuples, surviving into the old generation, brought on full
        # collections that walk every query's objects
        self._ready: deque = deque()
        self._ready_tok: deque = deque()
        self._waiting: dict[str, QueryEntry] = {}
        self._observed = -1                     # reg.observed when _waiting was last looked at
        self._seq = itertools.count()
        # GC (engine.stream.gc looks at every query): the streams to collect, see _GC_EVERY_S; and
        # when the worker runs out of ready instants (drain waits for it)
        self._gc_streams: set[str] = set()
        self._gc_last = 0.0
        self._gc_steps = 0                      # evaluations since the last GC
        self._gc_cost = 0.0                     # seconds the last GC pass took
        self._collecting = False
        # multi-query execution: shape key -> Group; query name -> (entry, group or None, reason)
        self.batching = True
        self._groups: dict = {}
        self._shapes: dict[str, tuple] = {}
        self._analyzed = 0                      # queries analyzed (a test/bench hook)
        # the heavy-query lane (engine.stream.lanes): queries whose instants cost more than its
        # bound run on its thread; it starts a job when the worker has nothing ready (``idle``)
        self.idle = False                       # under cv
        self.lane = HeavyLane(self)
        self.worker = threading.Thread(target=self._run, name="jindou-continuous", daemon=True)

    def start(self) -> None:
        self.worker.start()

    def stop(self, timeout: float = 30) -> bool:
        """Stop the worker (the instant in progress completes); False if it was already stopped."""
        with self.reg.cv:
            if self.closed:
                return False
            self.closed = True
            self.reg.cv.notify_all()
        self.worker.join(timeout=timeout)
        self.lane.join(timeout)   # (its instant in progress completes)
        return True

    def tick_arrivals(self) -> None:
        """Arrival-clock streams: their progress is the wall clock; publish it."""
        reg = self.reg
        with reg.cv:
            sts = [s for s in reg.streams.values() if s.clock == ARRIVAL]
        for st in sts:
            with st.lock:
                st.sclock.tick()
                reg.publish(st)

    # -- the index of due queries -------------------------------------------------
    def _drain_changes(self) -> None:
        """Caller holds ``cv``: follow the registrations and deletions since the last look."""
        ch = self.reg.changes
        if not ch:
            return
        self.reg.changes = []
        for what, q in ch:
            if what == "add":
                if self.reg.queries.get(q.name) is q:
                    self._index(q)
                    if self.batching:
                        self._group_of(q)   # it joins its group (and says so in its status)
            else:
                q.sched += 1
                self.lane.forget(q)
                if self._waiting.get(q.name) is q:
                    del self._waiting[q.name]
                hit = self._shapes.get(q.name)
                if hit is not None and hit[0] is q:
                    self._forget(q.name)

    @staticmethod
    def _lowest(key: tuple[str, ...], prog: dict) -> int | None:
        lowest = None
        for s in key:
            p = prog.get(s)
            if p is None:
                return None
            lowest = p if lowest is None or p < lowest else lowest
        return lowest

    def _index(self, q: QueryEntry, prog: dict | None = None, ready: bool = True) -> None:
        """Caller holds ``cv``: (re)index ``q`` by its next instant (its older entries go stale).
        ``ready=False``: into its heap even if its streams' progress says it is ready."""
        q.sched += 1
        if q.deleted or self.reg.queries.get(q.name) is not q:
            return
        nxt = q.trigger.next_instant
        if nxt is None:
            self._waiting[q.name] = q
            return
        key = q.trigger.streams
        if ready:
            lowest = self._lowest(key, self.reg.progress() if prog is None else prog)
            if lowest is not None and nxt < lowest:   # ready_upto: align_down(lowest - 1) >= nxt
                self._ready.append(q)
                self._ready_tok.append(q.sched)
                return
        heap = self._heaps.get(key)
        if heap is None:
            heap = self._heaps[key] = []
        heapq.heappush(heap, (nxt, next(self._seq), q.sched, q))

    def _index_members(self, q: QueryEntry, members: list, prog: dict) -> None:
        """Caller holds ``cv``: :meth:`_index` for the members of a batch other than ``q`` --
        the lowest progress of their streams looked up once per set of streams (the members of
        a group read the same ones), not per member."""
        queries = self.reg.queries
        ready, ready_tok = self._ready, self._ready_tok
        lows: dict = {}
        for m, _ in members:
            if m is q:
                continue
            tr = m.trigger
            nxt = tr.next_instant
            if nxt is None:
                self._index(m, prog)
                continue
            m.sched += 1
            if m.deleted or queries.get(m.name) is not m:
                continue
            key = tr.streams
            lowest = lows.get(key, lows)
            if lowest is lows:
                lowest = lows[key] = self._lowest(key, prog)
            if lowest is not None and nxt < lowest:
                ready.append(m)
                ready_tok.append(m.sched)
                continue
            heap = self._heaps.get(key)
            if heap is None:
                heap = self._heaps[key] = []
            heapq.heappush(heap, (nxt, next(self._seq), m.sched, m))

    def _refill(self) -> dict:
        """Caller holds ``cv``: move the queries that became ready to the ready FIFO (the heap
        prefixes below their streams' progress); returns the progress."""
        self._drain_changes()
        prog = self.reg.progress()
        if self._waiting and self.reg.observed != self._observed:
            self._observed = self.reg.observed
            for q in [q for q in self._waiting.values() if not q.trigger.pending]:
                del self._waiting[q.name]
                self._index(q, prog)
        for key, heap in self._heaps.items():
            lowest = self._lowest(key, prog)
            while heap and (heap[0][2] != heap[0][3].sched or (lowest is not None and heap[0][0] < lowest)):
                nxt, _, tok, q = heapq.heappop(heap)
                if tok != q.sched or q.deleted:
                    continue
                if q.trigger.next_instant != nxt:
                    self._index(q, prog)
                else:
                    self._ready.append(q)
                    self._ready_tok.append(tok)
        return prog

    def _pop_ready(self, prog: dict, take: bool) -> tuple[QueryEntry, int] | None:
        """Caller holds ``cv``: the first valid entry of the ready FIFO and its last ready
        instant (removed from the FIFO if ``take``)."""
        rd, rt = self._ready, self._ready_tok
        queries = self.reg.queries
        while rd:
            q, tok = rd[0], rt[0]
            if tok != q.sched or q.deleted or queries.get(q.name) is not q:
                rd.popleft()
                rt.popleft()
                continue
            last = q.trigger.ready_upto(prog)
            if last is None:   # not ready after all (a stream went away): back to its heap
                rd.popleft()
                rt.popleft()
                self._index(q, prog, ready=False)
                continue
            if take:
                rd.popleft()
                rt.popleft()
            return q, last
        return None

    # -- choosing the next job ---------------------------------------------------
    def _next_job(self) -> tuple[QueryEntry, int, int] | None:
        """Caller holds ``cv``: the next query with a ready instant, round-robin (a query with a
        long backlog gets one instant or one unchanged run per turn, never the worker), as
        ``(query, its next instant, its last ready instant)``. Nothing is issued yet. The cost
        does not grow with the queries that are not due (the index of due queries)."""
        hit = self._pop_ready(self._refill(), take=True)
        if hit is None:
            return None
        q, last = hit
        q.sched += 1   # taken: reindexed after its turn
        return q, q.trigger.next_instant, last

    def _has_ready(self) -> bool:
        """Caller holds ``cv``."""
        return self._pop_ready(self._refill(), take=False) is not None

    def _wait_time(self) -> float | None:
        """Arrival-clock streams advance with the wall clock: wake at the next instant."""
        streams = self.reg.streams

        def arrival(key) -> bool:
            return any(s in streams and streams[s].clock == ARRIVAL for s in key)

        best = None
        now = int(self._now())
        for key, heap in self._heaps.items():
            while heap and heap[0][2] != heap[0][3].sched:
                heapq.heappop(heap)
            if heap and arrival(key):
                w = (heap[0][0] + 1 - now) / 1000.0
                best = w if best is None else min(best, w)
        if any(arrival(q.trigger.streams) for q in self._waiting.values()):
            best = 0.05 if best is None else min(best, 0.05)
        if best is None:
            return None
        return min(1.0, max(0.005, best))

    # -- the worker --------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                if not self._step():
                    return
            except Exception:  # noqa: BLE001 - the worker must survive anything
                log.exception("continuous-query worker")
                time.sleep(0.01)

    def _step(self) -> bool:
        """One round of the worker: evaluate one ready instant (or one group's) or wait. False when closed."""
        reg = self.reg
        self.tick_arrivals()
        reg.maybe_sync()
        with reg.cv:
            if self.closed:
                return False
            job = self._next_job()
            self.idle = job is None
            if job is None:
                gc_streams = self._gc_streams
                if gc_streams:   # caught up: collect now (outside cv), then wait
                    self._gc_streams = set()
                    self._collecting = True
                else:
                    reg.cv.notify_all()
                    wait = self._wait_time()
                    due = reg.sync_due()
                    if due is not None:
                        wait = due if wait is None else min(wait, due)
                    reg.cv.wait(timeout=wait)
                    return True
            else:
                q, t, last = job
                self._inflight = q
                # its batch, under the same hold of cv (one lock round less per instant); a
                # failure there leaves the instant to the single path, not the query unindexed
                batch = None
                if self.batching:
                    try:
                        batch = self._peers(q, t, last)
                    except Exception:  # noqa: BLE001
                        log.exception("continuous query %s: cannot take its batch; evaluated alone", q.name)
                if batch is None and self.lane.take(q, t, last):
                    self._inflight = None   # the lane evaluates the instant and re-indexes q
                    return True
        if job is None:
            try:
                self._collect(gc_streams)
            finally:
                with reg.cv:
                    self._collecting = False
                    reg.cv.notify_all()
            return True
        paused = False
        try:
            # a batch is one instant of many queries: held below _GC_PAUSE_BATCH_MS for the batch
            paused = _pause_gc(q.last_latency_ms if batch is None else batch[0].last_ms,
                               _GC_PAUSE_MS if batch is None else _GC_PAUSE_BATCH_MS)
            if batch is not None:
                self._step_group(*batch, t, last)
            else:
                # timed for the heavy lane (engine.stream.lanes): in CPU time a query's first
                # instants and once the wall clock found it dear, otherwise by the wall clock
                lane = self.lane
                tracked = q.evaluated < 2 or (bool(lane.cost) and lane.tracked(q))
                c0 = time.thread_time() if tracked else time.perf_counter()
                self._step_one(q, t, last)
                if tracked:
                    lane.observe(q, (time.thread_time() - c0) * 1000.0)
                elif (time.perf_counter() - c0) * 2000.0 >= lane.bound_ms:
                    lane.nominate(q)
        finally:
            _resume_gc(paused)
            with reg.cv:
                self._inflight = None
                prog = reg.progress()
                self._index(q, prog)
                if batch is not None:
                    self._index_members(q, batch[1], prog)
                self._gc_streams.update(q.streams)
                self._gc_steps += 1 if batch is None else len(batch[1])
                gc_streams = None
                # a pass looks at every query: while busy, at most ~2% of the time goes to it
                # (time-triggered), or after a quarter as many evaluations as there are queries
                # but then not more often than every _GC_SPACING passes' time (a batch evaluates
                # all its members at once: without the spacing every batch paid a whole pass)
                since = time.monotonic() - self._gc_last
                if (self._gc_steps >= max(_GC_MIN_STEPS, len(reg.queries) // 4)
                        and since >= _GC_SPACING * self._gc_cost) \
                        or since >= max(_GC_EVERY_S, 50 * self._gc_cost):
                    gc_streams, self._gc_streams = self._gc_streams, set()
                    self._collecting = True
                # no notify here: only drain() waits on cv besides the worker, and it is woken
                # when the worker runs out of jobs (a wake per instant cost the worker the GIL
                # for every evaluation while a drain waited)
        if gc_streams:
            try:
                self._collect(gc_streams)
            finally:
                with reg.cv:
                    self._collecting = False
        return True

    def _collect(self, streams) -> None:
        t0 = self._gc_last = time.monotonic()
        self._gc_steps = 0
        collect(self.reg, self.absorb_log, streams)
        self._gc_cost = time.monotonic() - t0

    def _step_one(self, q: QueryEntry, t: int, last: int) -> None:
        reg = self.reg
        ev = q.evaluator
        # instants whose windows and stored data equal the last evaluated one's cost only the
        # check and the repeated event; the check's time counts in the instant's latency either
        # way. A reused instant (no relevant change) gets its event at once, inside that time;
        # an instant to evaluate its capture, in the same timed region (one pair of clock reads).
        t0 = time.perf_counter()
        u = None
        same = True
        state = q.state
        if state is not None and q.prefix is not None:
            if _fast.ENABLED:   # the common maintained instant in one function (instant_fast)
                if _fast.step(self, q, t, last, t0):
                    return
            elif ev.maintained_due(state, t, last, self.idle_after > 1):
                self._step_maintained(q, t, t0)
                return
        if state is not None and q.prefix is not None:
            # (alone: an unchanged instant is reported like an evaluated one, so the check's
            # back-off may evaluate instead)
            u, same = ev.quiet_until(state, t, last, q.trigger.step, self.idle_after > 1)
            if not same:
                data, state = ev.reuse(state, q.prefix, t)
        if u is None:
            state = ev.state_at(t)
        check_ms = (time.perf_counter() - t0) * 1000.0
        with reg.cv:
            if u is None:
                issued = self._issue(q, t)   # False if its stream went away
            else:
                q.trigger.advance(u)
        if u is None:
            if issued:
                ev._pre = (t, check_ms)   # counted in run(t)'s latency (InstantEvaluator.state_at)
                self._evaluate(q, t, state)
        elif same:
            self._report_unchanged(q, t, u, check_ms)
        elif self._store_event(q, t, state, q.prefix, data, check_ms):
            # instant t, whose windows changed by no triple the query can match
            # (InstantEvaluator.quiet_until): the last result as its own result event (an empty
            # I/DSTREAM difference) without capture or evaluation; its state moves to t
            telemetry.evaluation(reg, q.name, check_ms)

    def _step_maintained(self, q: QueryEntry, t: int, t0: float) -> None:
        """Instant ``t`` of a query whose maintained state answers it (``maintained_due``): no
        relevance / unchanged check (it could only say "evaluate"), no separate capture, the
        event from the body the state wrote (:meth:`InstantEvaluator.maintained_instant`); the
        same event, state and latency accounting as :meth:`_step_one` then :meth:`_evaluate`.
        When the state does not answer, or fails, the instant is evaluated as there."""
        ev = q.evaluator
        spent = time.perf_counter() - t0   # (the issue under cv is not the instant's, as in _step_one)
        with self.reg.cv:
            if not self._issue(q, t):   # its stream went away
                return
        t0 = time.perf_counter() - spent
        try:
            got = ev.maintained_instant(t)
        except Exception:  # noqa: BLE001 - the ordinary path answers (and reports its own errors)
            log.exception("continuous query %s: the maintained instant %d failed", q.name, t)
            got = None
        if got is None:
            ev._pre = (t, (time.perf_counter() - t0) * 1000.0)
            self._evaluate(q, t, None, maintained=False)
            return
        data, state = got
        ms = (time.perf_counter() - t0) * 1000.0
        if self._store_event(q, t, state, None, data, ms):
            self._after(q, t, data, ms)

    def _issue(self, q: QueryEntry, t: int) -> bool:
        """Caller holds ``cv``: issue instant ``t``, the next one of ``q``'s trigger, if it is
        still ready -- ``Trigger.ready(reg.progress(), limit=1)`` without the progress of every
        stream as a dict and the list of instants (the instant's path)."""
        tr = q.trigger
        if tr.next_instant != t:
            return False
        streams = self.reg.streams
        lowest = None
        for s in tr.streams:
            st = streams.get(s)
            p = None if st is None else st.published
            if p is None:
                return False
            if lowest is None or p < lowest:
                lowest = p
        step = tr.step
        if (lowest - 1) // step * step < t:   # windows.align_down: ready while P > t
            return False
        tr.advance(t)
        return True

    # -- multi-query execution -----------------------------------------------------
    def _group_of(self, q: QueryEntry) -> Group | None:
        """Caller holds ``cv``: the group of ``q`` (analyzed once per registration), None if
        it cannot be batched."""
        hit = self._shapes.get(q.name)
        if hit is not None and hit[0] is q:
            return hit[1]
        if hit is not None:
            self._forget(q.name)
        self._analyzed += 1
        try:
            if type(q.evaluator) is not InstantEvaluator:
                # RSP-QL / CQELS datasets and f:timestamp need their evaluator's own dataset
                raise Refused("named windows (RSP-QL / CQELS) or f:timestamp: evaluated alone")
            shape = analyze(q.cq.query, q.cq.mode, q.windows)
        except Refused as e:
            self._shapes[q.name] = (q, None, str(e))
            q.batch_status = lambda name=q.name: self.status(name)
            return None
        except Exception:  # noqa: BLE001 - an analysis bug must not stop the query: it runs alone
            log.exception("continuous query %s: cannot analyze its shape; it runs alone", q.name)
            self._shapes[q.name] = (q, None, "internal")
            return None
        g = self._groups.get(shape.key)
        if g is None:
            g = self._groups[shape.key] = Group(shape)
        g.members[q.name] = (q, shape.params)
        self._shapes[q.name] = (q, g, None)
        if q.batch_status is None:
            q.batch_status = lambda name=q.name: self.status(name)
        return g

    def _forget(self, name: str) -> None:
        hit = self._shapes.pop(name, None)
        if hit is None or hit[1] is None:
            return
        g = hit[1]
        cur = g.members.get(name)
        if cur is not None and cur[0] is hit[0]:
            del g.members[name]
        if not g.members:
            self._groups.pop(g.shape.key, None)

    def _peers(self, q: QueryEntry, t: int, last: int):
        """Caller holds ``cv``: ``(group, members)`` to take together with ``q`` at instant ``t``
        -- the members of its group whose next instant is ``t`` (ready up to ``last``, as they
        read the same streams) -- or None (the single path)."""
        self._drain_changes()
        g = self._group_of(q)
        if g is None or len(g.members) < 2:
            return None
        if g.skip > 0:   # a recent batch failed: alone for a while
            g.skip -= 1
            return None
        queries = self.reg.queries
        out = []
        for name, (m, params) in g.members.items():
            # the same streams and step: a member at instant t is ready up to ``last`` as q is
            if m.trigger.next_instant == t and not m.deleted and queries.get(name) is m:
                out.append((m, params))
        lane = self.lane
        if lane.owned or (lane.heavy_ids and lane.enabled):
            # a heavy query is evaluated in the heavy lane (engine.stream.lanes), not in a batch
            if lane.excluded(q):
                return None
            out = [x for x in out if not lane.excluded(x[0])]
        if len(out) < 2:
            return None
        return g, out

    def _step_group(self, g: Group, members: list, t: int, last: int) -> None:
        reg = self.reg
        # the unchanged-instant check, once per distinct state (members evaluated together share it)
        decided: dict[int, int | None] = {}
        us = []
        for m, _ in members:
            if m.state is None or m.prefix is None:
                us.append(None)
                continue
            k = id(m.state)
            if k not in decided:
                decided[k] = m.evaluator.unchanged_until(m.state, t, last, m.trigger.step)
            us.append(decided[k])
        evals, same = [], []
        with reg.cv:
            for (m, p), u in zip(members, us, strict=True):
                if m.deleted or m.trigger.next_instant != t:
                    continue
                if u is None:
                    m.trigger.advance(t)   # issue instant t (ready: checked by _peers)
                    evals.append((m, p))
                else:
                    m.trigger.advance(u)
                    same.append((m, u))
        for m, u in same:
            self._report_unchanged(m, t, u)
        if len(evals) == 1:
            self._evaluate(evals[0][0], t)
        elif evals:
            self._evaluate_batch(g, evals, t)

    def _evaluate_batch(self, g: Group, members: list, t: int) -> None:
        """One batched execution of instant ``t`` for ``members``; if it fails as a whole, each
        member is evaluated alone (its own answer or error) and the group runs alone for a while."""
        state = members[0][0].evaluator.capture(t)
        while True:
            try:
                datas, ms = g.run(members, t)
                break
            except WorkerUnavailable:
                if self.closed:
                    return
                time.sleep(_STORE_RETRY_S)
            except Exception as e:  # noqa: BLE001 - each member alone gets its own answer
                g.failures += 1
                g.skip = min(1 << min(g.failures, 10), 1024)
                log.info("batch of %d continuous queries at instant %d failed (%s); evaluating them alone",
                         len(members), t, getattr(e, "kind", type(e).__name__))
                for m, _ in members:
                    self._evaluate(m, t, state)
                return
        g.failures = 0
        g.last_ms = ms
        win = members[0][0].evaluator.window_member(t)
        # each member's event into its log, as _append does one by one (inlined: this loop is
        # most of the per-member cost of a batch); the evaluation-time hook once per batch
        appended = [] if telemetry.listening(self.reg) else None
        for (m, _), (data, prefix) in zip(members, datas, strict=True):
            inc = m.evaluator.incremental_core
            if inc is not None:
                inc.reset()   # its maintained rows describe an older instant now
            if prefix is None or isinstance(data, BaseException):
                if isinstance(data, BaseException):
                    data, _ = self._error_data(m, t, data)
                    self._record(m, t, state, data, None, win)
                else:
                    self._record(m, t, state, data, ms, win)
                continue
            if not self._store_event(m, t, state, prefix, data, ms):
                continue
            if appended is not None:
                appended.append(m.name)
        if appended:
            telemetry.evaluations(self.reg, appended, ms)

    def status(self, name: str) -> dict:
        """A query's scheduling status: :meth:`batch_info` and its lane
        (:meth:`engine.stream.lanes.HeavyLane.info`)."""
        out = self.batch_info(name)
        with self.reg.cv:
            q = self.reg.queries.get(name)
            if q is not None:
                out.update(self.lane.info(q))
        return out

    def batch_info(self, name: str) -> dict:
        """Whether query ``name`` runs batched, with how many other queries of its shape, and
        otherwise why not: ``{"batched", "peers", "unbatched_reason"}`` (its status)."""
        with self.reg.cv:
            q = self.reg.queries.get(name)
            if q is not None and not self.closed:
                self._group_of(q)
            hit = self._shapes.get(name)
            if hit is None or not self.batching:
                return {"batched": False, "peers": 0, "unbatched_reason": "batching is off" if hit else None}
            _, g, reason = hit
            if g is None:
                return {"batched": False, "peers": 0, "unbatched_reason": reason}
            n = sum(1 for m, _ in g.members.values() if not m.deleted) - 1
            return {"batched": n > 0, "peers": n,
                    "unbatched_reason": None if n > 0 else "no other query of its shape"}

    def _run_instant(self, q: QueryEntry, t: int, maintained: bool = True):
        """Evaluate instant ``t``; while a store worker is down (a distributed store),
        wait for it rather than give the window up: windows are at-least-once.
        ``(None, None)`` if the scheduler closed or the query went away meanwhile."""
        while True:
            try:
                return q.evaluator.run(t) if maintained else q.evaluator.run(t, False)
            except WorkerUnavailable:
                if self.closed or q.deleted:
                    return None, None
                time.sleep(_STORE_RETRY_S)

    def _evaluate(self, q: QueryEntry, t: int, state: tuple | None = None, maintained: bool = True) -> None:
        """Evaluate instant ``t`` and append its event; then keep what later instants need of
        it (:meth:`InstantEvaluator.settle`), after the event is in the log."""
        ev = q.evaluator
        if state is None:
            state = ev.capture(t, 0.0 if maintained else ev._pre[1])
        try:
            data, ms = self._run_instant(q, t, maintained)
            if data is None:
                return  # closed or deleted while the store was down
        except Exception as e:  # noqa: BLE001 - reported in the query's result stream
            data, win = self._error_data(q, t, e)
            self._record(q, t, state, data, None, win)
            return
        if self._store_event(q, t, state, None, data, ms):
            self._after(q, t, data, ms)

    def _after(self, q: QueryEntry, t: int, data: bytes, ms: float) -> None:
        """After instant ``t``'s event is in the log: what later instants need of it, the
        metrics, the next instant's preparation (none of it delays the event)."""
        ev = q.evaluator
        try:
            q.prefix = ev.settle(data, t)
        except Exception:  # noqa: BLE001 - then the next instant is evaluated, as without skipping
            log.exception("continuous query %s: cannot keep instant %d for unchanged instants", q.name, t)
        telemetry.evaluation(self.reg, q.name, ms)  # metrics: the evaluation-time histogram
        try:
            ev.prepare(q.trigger.next_instant)   # (made now: the next instant's evaluation will not)
        except Exception:  # noqa: BLE001 - then the next instant makes them itself
            log.exception("continuous query %s: cannot prepare the instant after %d", q.name, t)

    def _error_data(self, q: QueryEntry, t: int, e: BaseException) -> tuple[bytes, dict]:
        """The ``result`` event data of an instant whose evaluation failed, and its window."""
        kind = getattr(e, "kind", "error")
        if isinstance(e, JindouError):
            detail = str(e)
        else:   # never the text of an unexpected exception: a reference to the log
            ref = f"{int(time.time() * 1000):x}-{id(e) & 0xffff:04x}"
            log.error("continuous query %s, instant %d (error id %s)", q.name, t, ref, exc_info=e)
            kind, detail = "internal", f"internal error (id {ref} in the server log)"
        try:
            win = q.evaluator.window_member(t)
        except Exception:  # noqa: BLE001
            win = {"start": t, "end": t}
        q.errors += 1
        q.last_error = {"instant": t, "error": kind, "detail": detail}
        return orjson.dumps({"error": kind, "detail": detail, "window": win}), win

    def _record(self, q: QueryEntry, t: int, state: tuple, data: bytes, ms: float | None, win: dict | None) -> None:
        """Append instant ``t``'s event and keep what the unchanged-instant check needs."""
        try:
            prefix = q.evaluator.repeat_prefix(data, win if win is not None else q.evaluator.window_member(t))
        except Exception:  # noqa: BLE001 - then the next instant is evaluated, as without skipping
            log.exception("continuous query %s: cannot keep instant %d for unchanged instants", q.name, t)
            prefix = None
        self._append(q, t, state, prefix, data, ms)

    def _append(self, q: QueryEntry, t: int, state: tuple, prefix: bytes | None, data: bytes,
                ms: float | None) -> None:
        """Instant ``t``'s event into the query's log (:meth:`_store_event`), then its
        evaluation time into the metrics."""
        if self._store_event(q, t, state, prefix, data, ms):
            telemetry.evaluation(self.reg, q.name, ms)  # metrics: the evaluation-time histogram

    @staticmethod
    def _store_event(q: QueryEntry, t: int, state: tuple, prefix: bytes | None, data: bytes,
                     ms: float | None) -> bool:
        """Instant ``t``'s event into the query's log, with what the unchanged-instant check
        keeps; False (nothing stored) if the query was deleted meanwhile."""
        with q.out_lock:
            if q.deleted:
                return False
            q.evaluated += 1
            q.last_latency_ms = ms
            q.state, q.prefix = state, prefix
            q.log.append(t, data)
        return True

    def _report_unchanged(self, q: QueryEntry, t: int, u: int, check_ms: float = 0.0) -> None:
        """Instants ``t..u`` equal the last evaluated one: a run of at least ``idle_after``
        instants is one ``idle`` event, a shorter one a ``result`` event per instant (the same
        result with its own window; an empty I/DSTREAM difference), without evaluating. Their
        latency (``last_latency_ms``): the check (``check_ms``) and writing the events, for the
        whole run -- what reporting them cost, as an evaluated instant's covers its work."""
        t0 = time.perf_counter()
        step = q.trigger.step
        n = (u - t) // step + 1
        te = q.state[0]
        if n >= self.idle_after:
            with q.out_lock:
                if not q.deleted:
                    q.idle += n
                    q.evaluated += n
                    q.last_latency_ms = check_ms + (time.perf_counter() - t0) * 1000.0
                    q.log.append_idle(t, u, te)
            return
        datas = [(x, q.evaluator.repeat(q.prefix, x)) for x in range(t, u + 1, step)]
        ms = check_ms + (time.perf_counter() - t0) * 1000.0
        with q.out_lock:
            if q.deleted:
                return
            q.idle += n
            q.evaluated += n
            q.last_latency_ms = ms
            for x, d in datas:
                q.log.append(x, d)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every ready instant is evaluated; False on timeout."""
        deadline = time.monotonic() + timeout
        cv = self.reg.cv
        with cv:
            cv.notify_all()
            while (self._inflight is not None or self._collecting or self._gc_streams
                   or self.lane.busy() or self._has_ready()):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return False
                cv.wait(timeout=min(left, 0.05))
        return True
