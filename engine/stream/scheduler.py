"""The scheduler: one worker thread that evaluates the ready instants of every continuous query.

* Each query's instants are evaluated in order, each exactly once (its
  :class:`~engine.stream.windows.Trigger` says which are ready: every stream it reads has
  published ``P > t``). The queries are taken round-robin, one instant or one run of unchanged
  instants per turn, so a query's backlog never starves the others. A slow query delays other
  evaluations, never ingestion (which runs on the callers' threads).
* Unchanged instants: after evaluating instant ``te`` the worker keeps what it depended on
  (:meth:`InstantEvaluator.capture`); the following instants whose windows and stored data are
  provably the same (:meth:`InstantEvaluator.unchanged_until`) are not evaluated: a run of at
  least ``idle_after`` of them is one ``idle`` event ``{"from", "to", "instants", "same_as"}``, a
  shorter one a copy of ``te``'s result per instant (its own ``window``; empty I/DSTREAM
  differences). The cost is one evaluation per distinct window content, whatever the number of
  instants.
* An instant whose evaluation fails still produces its ``result`` event, with
  ``{"error": kind, "detail": ..., "window": ...}`` (an unforeseen error: ``internal`` and an id
  that is in the log, never its text).
* Arrival-clock streams advance with the wall clock: the worker ticks them and wakes at their
  next instant. Between instants it writes the registry's progress when due and runs the GC
  (:mod:`engine.stream.gc`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import orjson

from engine.errors import JindouError, WorkerUnavailable
from engine.stream import telemetry
from engine.stream.absorb import AbsorbLog
from engine.stream.gc import collect
from engine.stream.progress import ARRIVAL
from engine.stream.registry import QueryEntry, Registry

__all__ = ["Scheduler"]

#: seconds between tries of an instant while a store worker is down
_STORE_RETRY_S = 0.2

log = logging.getLogger("jindou.stream")


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
        self._rr = 0                            # round-robin position
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

    # -- choosing the next job ---------------------------------------------------
    def _next_job(self) -> tuple[QueryEntry, int, int] | None:
        """Caller holds ``cv``: the next query with a ready instant, round-robin (a query with a
        long backlog gets one instant or one unchanged run per turn, never the worker), as
        ``(query, its next instant, its last ready instant)``. Nothing is issued yet."""
        prog = self.reg.progress()
        qs = list(self.reg.queries.values())
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
        prog = self.reg.progress()
        return any(q.trigger.ready_upto(prog) is not None for q in self.reg.queries.values())

    def _wait_time(self) -> float | None:
        """Arrival-clock streams advance with the wall clock: wake at the next instant."""
        best = None
        now = int(self._now())
        streams = self.reg.streams
        for q in self.reg.queries.values():
            if any(streams[s].clock == ARRIVAL for s in q.streams if s in streams):
                nxt = q.trigger.next_instant
                w = 0.05 if nxt is None else (nxt + 1 - now) / 1000.0
                best = w if best is None else min(best, w)
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
        """One round of the worker: evaluate one ready instant or wait. False when closed."""
        reg = self.reg
        self.tick_arrivals()
        reg.maybe_sync()
        with reg.cv:
            if self.closed:
                return False
            job = self._next_job()
            if job is None:
                reg.cv.notify_all()
                wait = self._wait_time()
                due = reg.sync_due()
                if due is not None:
                    wait = due if wait is None else min(wait, due)
                reg.cv.wait(timeout=wait)
                return True
            q, t, last = job
            self._inflight = q
        try:
            # instants whose windows and stored data equal the last evaluated one's cost nothing
            u = None
            if q.state is not None and q.prefix is not None:
                u = q.evaluator.unchanged_until(q.state, t, last, q.trigger.step)
            with reg.cv:
                if u is None:
                    issued = q.trigger.ready(reg.progress(), limit=1)   # [] if its stream went away
                else:
                    q.trigger.advance(u)
            if u is not None:
                self._report_unchanged(q, t, u)
            elif issued:
                self._evaluate(q, issued[0])
        finally:
            with reg.cv:
                self._inflight = None
                reg.cv.notify_all()
        collect(reg, self.absorb_log, q.streams)
        return True

    def _run_instant(self, q: QueryEntry, t: int):
        """Evaluate instant ``t``; while a store worker is down (a distributed store),
        wait for it rather than give the window up: windows are at-least-once.
        ``(None, None)`` if the scheduler closed or the query went away meanwhile."""
        while True:
            try:
                return q.evaluator.run(t)
            except WorkerUnavailable:
                if self.closed or q.deleted:
                    return None, None
                time.sleep(_STORE_RETRY_S)

    def _evaluate(self, q: QueryEntry, t: int) -> None:
        state = q.evaluator.capture(t)
        win = None
        try:
            data, ms = self._run_instant(q, t)
            if data is None:
                return  # closed or deleted while the store was down
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
        telemetry.evaluation(self.reg, q.name, ms)  # metrics: the evaluation-time histogram

    def _report_unchanged(self, q: QueryEntry, t: int, u: int) -> None:
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

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every ready instant is evaluated; False on timeout."""
        deadline = time.monotonic() + timeout
        cv = self.reg.cv
        with cv:
            cv.notify_all()
            while self._inflight is not None or self._has_ready():
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return False
                cv.wait(timeout=min(left, 0.05))
        return True
