"""The heavy-query lane: a continuous query whose instants are expensive runs on its own thread.

One evaluation worker (:mod:`engine.stream.scheduler`) takes every due query round-robin, so
one query costing tens or hundreds of ms an instant (a cross product inside its budget, a big
aggregate, a non-selective join with stored data) delayed every other query's answer by that
much, instant after instant; and when its cost passed the step, the whole ready FIFO fell
behind with it (``bench.query_isolation``: 100 cheap queries' answers 0.9 s late at the median
with three heavy ones on their stream). Here:

* **Cost.** Each query's single-path instant (the scheduler's ``_step_one``: the unchanged /
  relevance checks and the evaluation) is timed by the wall clock (0.15 µs); one taking half
  the bound or more is *tracked* (:meth:`HeavyLane.nominate`): its instants are then timed in
  its thread's CPU time, as are a query's first two instants (a query heavy from the start is
  in the lane from its second instant) (``time.thread_time``, 2 µs a call: too dear for every 5-50 µs
  instant, but the wall clock counts waiting for the GIL or a CPU -- at load 9, a third of the
  mixed ``manyqueries`` queries looked dear by it) and :meth:`HeavyLane.observe` keeps an
  exponential average. A query is *heavy* when that average reaches
  :attr:`HeavyLane.bound_ms`, light again below half of it, and untracked below a quarter. A batch
  member is measured only when it runs alone (a batch's time is all its members'); a heavy
  query is not taken into a batch (its turn goes to the lane).
* **The lane.** The worker hands a heavy query's turn (its next instant) to the lane
  (:meth:`HeavyLane.take`) instead of evaluating it; the lane's thread runs the scheduler's own
  single path on it (the same checks, evaluation, event, error handling, deadline and budgets)
  and then re-indexes the query, which the worker does not see in between: a query's instants
  stay one at a time and in order, whichever thread evaluates them, and its log is the same
  as alone. The lane owns the query from the hand-over to the re-index: no batch takes it
  (``owns``).
* **Cheap first.** The lane starts a job only when the worker has nothing ready (or after
  :attr:`HeavyLane.defer_ms`, so a worker that is always busy does not starve it): the cheap
  queries of an instant are published before a heavy query of the same instant starts. While
  a heavy instant runs, the worker goes on with the next instants; the interpreter switches
  threads every few ms (``sys.getswitchinterval``), and numpy releases the GIL in its kernels,
  so a cheap instant waits for at most a few of those slices, not for the heavy evaluation.
* **Isolation.** The lane's queries read window graphs from the lane's own
  :class:`~engine.stream.continuous.WindowCache` (a shared sliding graph is mutated in place
  by the next instant's reader; the worker's must not slide under a lane evaluation), given
  back when a query leaves the lane. While the lane evaluates instant ``t`` of a query, the
  stream GC (run by the worker) keeps ``t``'s windows: :mod:`engine.stream.gc` reads
  ``QueryEntry.lane_t``.
* **Backlog.** A heavy query that cannot keep up with its step falls behind alone (the other
  queries are not behind it); its instants are evaluated in order. Up to
  :attr:`HeavyLane.max_lag` instants behind, all of them; further behind, the lane skips to
  its newest ready instant instead of growing the backlog without bound (and the stream data
  kept for it: the GC horizon follows its next instant, and a full stream budget would push
  back on every producer): the skipped run ``t..v`` is one ``result`` event at instant ``v``,
  ``{"error": "skipped", "detail", "from": t, "to": v, "instants": n, "window"}`` (an error
  event, so a client that knows only results and errors handles it), then instant ``v + step``
  is evaluated whole -- its content is what the query gives alone at that instant (an
  ISTREAM / DSTREAM difference is taken against the last evaluated instant, before the run).
  Its status says ``"lane"``, ``"skipped_instants"``; ``next_instant`` shows the lag.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import orjson

from engine.stream.continuous import WindowCache

__all__ = ["HeavyLane", "HEAVY_MS"]

log = logging.getLogger("jindou.stream")

#: a query is heavy when its single-path instants average this long (ms) ...
HEAVY_MS = 10.0
#: ... averaged with this weight for the newest instant
_ALPHA = 0.3
#: a lane job waits at most this long (ms) for the worker to run out of ready instants
DEFER_MS = 100.0
#: a heavy query this many instants behind its streams skips to its newest ready one (0: never;
#: the server's --skip-behind: skipping loses instants, so it is the operator's choice)
MAX_LAG = 0


class HeavyLane:
    """The heavy-query lane of one scheduler (its thread started on first use)."""

    def __init__(self, sched, bound_ms: float = HEAVY_MS, defer_ms: float = DEFER_MS, max_lag: int = MAX_LAG):
        self.sched = sched
        self.enabled = True
        self.bound_ms = float(bound_ms)
        self.defer_ms = float(defer_ms)
        self.max_lag = int(max_lag)             # instants (0: never skip)
        self.skipped: dict[int, list] = {}      # id(query) -> [query, instants skipped]
        self.cost: dict[int, list] = {}         # id(query) -> [query, instants seen, average ms, heavy]
        self.owned: set[int] = set()            # ids of the queries the lane holds (under cv)
        self.heavy_ids: set[int] = set()        # ids of the heavy queries (by cost, or pinned)
        self.pinned: set[int] = set()           # ids of the queries pinned heavy (pin)
        self._jobs: deque = deque()             # (query, instant, last ready instant), under cv
        self.inflight = None                    # the query being evaluated by the lane (under cv)
        self.taken = 0                          # instants handed to the lane (a test/bench hook)
        self._cache: WindowCache | None = None   # the lane's window graphs (made on first use)
        self._home: dict[int, tuple] = {}        # id(query) -> (query, the cache it came from)
        self._thread: threading.Thread | None = None

    # -- cost ------------------------------------------------------------------
    def tracked(self, q) -> bool:
        """Whether ``q``'s instants are timed in CPU time (:meth:`observe`); the others by the
        wall clock, and passed to :meth:`nominate` when one takes half the bound."""
        c = self.cost.get(id(q))
        return c is not None and c[0] is q

    def nominate(self, q) -> None:
        """An instant of ``q`` took half the bound or more of wall time (which counts waiting
        for the GIL or a CPU): its next instants are timed in CPU time."""
        if not q.deleted and not self.tracked(q):
            self.cost[id(q)] = [q, 0, None, False]

    def observe(self, q, ms: float) -> None:
        """A single-path instant of ``q`` took ``ms`` of its thread's CPU time. Called by the
        worker, or by the lane under ``cv`` (the worker forgets deleted queries)."""
        if q.deleted:
            return
        c = self.cost.get(id(q))
        if c is None or c[0] is not q:
            c = self.cost[id(q)] = [q, 0, None, False]
        c[1] += 1
        c[2] = ms if c[2] is None else c[2] + _ALPHA * (ms - c[2])
        if c[3]:
            c[3] = c[2] >= self.bound_ms / 2
        else:
            c[3] = c[2] >= self.bound_ms
        if c[3] or id(q) in self.pinned:
            self.heavy_ids.add(id(q))
        else:
            self.heavy_ids.discard(id(q))
            if c[2] < self.bound_ms / 4:   # cheap after all (its first instant made the plans)
                del self.cost[id(q)]

    def pin(self, q) -> None:
        """Caller holds ``cv``: ``q`` is heavy whatever its measured cost (a test / operator hook)."""
        self.pinned.add(id(q))
        self.heavy_ids.add(id(q))

    def heavy(self, q) -> bool:
        return id(q) in self.heavy_ids

    def excluded(self, q) -> bool:
        """Caller holds ``cv``: ``q`` is not to be evaluated in a batch (the lane holds it, or
        takes its next turn)."""
        return id(q) in self.owned or (self.enabled and id(q) in self.heavy_ids)

    def forget(self, q) -> None:
        """Caller holds ``cv``: ``q`` was deleted."""
        c = self.cost.get(id(q))
        if c is not None and c[0] is q:
            del self.cost[id(q)]
        self.heavy_ids.discard(id(q))
        self.pinned.discard(id(q))
        sk = self.skipped.get(id(q))
        if sk is not None and sk[0] is q:
            del self.skipped[id(q)]
        h = self._home.get(id(q))
        if h is not None and h[0] is q:
            del self._home[id(q)]

    def info(self, q) -> dict:
        """The lane part of a query's status."""
        c = self.cost.get(id(q))
        sk = self.skipped.get(id(q))
        return {"lane": "heavy" if self.heavy(q) and self.enabled else "main",
                "avg_instant_ms": None if c is None or c[0] is not q or c[2] is None else round(c[2], 3),
                "skipped_instants": sk[1] if sk is not None and sk[0] is q else 0}

    # -- hand-over -------------------------------------------------------------
    def take(self, q, t: int, last: int) -> bool:
        """Caller (the worker) holds ``cv`` and has taken ``q``'s turn for instant ``t``: True if
        the lane takes it (the worker then leaves ``q`` alone until the lane re-indexes it)."""
        ev = q.evaluator
        if not (self.enabled and self.heavy(q)):
            home = self._home.pop(id(q), None)
            if home is not None and home[0] is q and ev.cache is self._cache:
                self._switch(ev, home[1])   # back from the lane: the shared window graphs again
            return False
        if ev.cache is not self._cache:
            if self._cache is None:
                self._cache = WindowCache(slide=ev.cache.slide)
            self._home[id(q)] = (q, ev.cache)
            self._switch(ev, self._cache)
        self.owned.add(id(q))
        self._jobs.append((q, t, last))
        self.taken += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="jindou-continuous-heavy", daemon=True)
            self._thread.start()
        self.sched.reg.cv.notify_all()
        return True

    def _behind(self, q, t: int) -> tuple[int, int, int] | None:
        """Caller holds ``cv``: ``(t, v, last)`` if ``q``, due at ``t``, is more than
        :attr:`max_lag` instants behind (``last``: its newest ready instant; ``v``, the one
        before it: the last instant skipped; the trigger is advanced past ``v``), else None."""
        tr = q.trigger
        if self.max_lag <= 0 or q.deleted or tr.next_instant != t:
            return None
        last = tr.ready_upto(self.sched.reg.progress())
        if last is None or (last - t) // tr.step < self.max_lag:
            return None
        v = last - tr.step
        tr.advance(v)
        return t, v, last

    def _report_skipped(self, q, t: int, v: int) -> None:
        """The skipped run ``t..v`` of ``q`` as one error ``result`` event at ``v``."""
        step = q.trigger.step
        n = (v - t) // step + 1
        try:
            win = q.evaluator.window_member(v)
        except Exception:  # noqa: BLE001
            win = {"start": v, "end": v}
        data = orjson.dumps({"error": "skipped",
                             "detail": f"the query fell {n} instants behind its streams; instants {t}..{v} "
                                       "were not evaluated",
                             "from": t, "to": v, "instants": n, "window": win})
        with q.out_lock:
            if q.deleted:
                return
            sk = self.skipped.get(id(q))
            if sk is None or sk[0] is not q:
                sk = self.skipped[id(q)] = [q, 0]
            sk[1] += n
            q.log.append(v, data)
        log.warning("continuous query %s: %d instants behind its streams; skipped instants %d..%d",
                    q.name, n + 1, t, v)

    @staticmethod
    def _switch(ev, cache) -> None:
        """``ev`` reads its window graphs from ``cache`` from now on."""
        ev.cache = cache
        ev._window_graphs = []
        inc = ev.incremental_core
        if inc is not None:
            inc.reset()   # its maintained rows were slid in the other cache's graphs

    def owns(self, q) -> bool:
        return id(q) in self.owned

    def busy(self) -> bool:
        """Caller holds ``cv``: jobs queued or running."""
        return bool(self._jobs) or self.inflight is not None

    def join(self, timeout: float) -> None:
        th = self._thread
        if th is not None:
            th.join(timeout=timeout)

    # -- the lane's thread -----------------------------------------------------
    def _run(self) -> None:
        sched = self.sched
        cv = sched.reg.cv
        while True:
            with cv:
                while not self._jobs and not sched.closed:
                    cv.wait(timeout=1.0)
                if sched.closed:
                    return
                # cheap first: wait (bounded) for the worker to run out of ready instants
                deadline = time.monotonic() + self.defer_ms / 1000.0
                while not sched.idle and not sched.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    cv.wait(timeout=left)
                if sched.closed:
                    return
                q, t, last = self._jobs.popleft()
                self.inflight = q
                skip = self._behind(q, t)
                if skip is not None:   # skip t..v, evaluate v + step (its newest ready instant)
                    t, last = skip[1] + q.trigger.step, skip[2]
                q.lane_t = t   # the GC keeps instant t's windows while the lane evaluates it
            ms = None
            try:
                if skip is not None:
                    self._report_skipped(q, skip[0], skip[1])
                c0 = time.thread_time()
                sched._step_one(q, t, last)
                ms = (time.thread_time() - c0) * 1000.0
            except Exception:  # noqa: BLE001 - the lane must survive anything, as the worker
                log.exception("continuous query %s: heavy-lane instant %d", q.name, t)
            finally:
                with cv:
                    if ms is not None:
                        self.observe(q, ms)
                    q.lane_t = None
                    self.inflight = None
                    self.owned.discard(id(q))
                    sched._index(q)
                    sched._gc_streams.update(q.streams)
                    sched._gc_steps += 1
                    cv.notify_all()

