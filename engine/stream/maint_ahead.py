"""A tumbling window's instant evaluated ahead on the ingestion thread, chosen by measured CPU.

Why: :mod:`engine.stream.maintained` joins every arriving triple into the result when it
arrives (and out when it leaves), so the instant only hands a body over. Over a window whose
step is not shorter than its range (tumbling, or hopping with gaps) no triple stays from one
instant to the next: the state is cleared after each instant and every triple pays its delta
joins, its counts, its log entry -- one at a time, for one answer at the window's end. Wave 2n
measured that above the composite peer's whole reload-and-run on V08 / W07 / W10 / L6
(0.5-0.8x). Evaluating the window once with the query's generated code
(:meth:`engine.stream.tiny_gen.GenQuery.run`) is one match per triple and one join per instant;
done on the ingestion thread for the batch expected to be the instant's last (the guess
:attr:`Maintained.LAZY_BODY` makes: its last element plus twice the stream's largest recent
batch gap reaches past the instant, or an element beyond the instant arrived), it leaves the
instant as cheap as a maintained one: the event is held whole in ``Maintained._done`` with the
windows' seq ranges and the snapshot it was evaluated on, and the instant (its fast step,
:mod:`engine.stream.instant_fast`, or :meth:`Maintained.instant`) hands it over only when both
are its own. A later batch that changes the instant's windows evaluates it again; an instant
whose event is not held (a wrong guess, a commit in between, code that handed back) takes the
ordinary path and turns the guess off for a while (as a wrong lazy body does).

Which of the two costs less is measured, not assumed (another path may get cheaper): the CPU
the query spends between two advances (ingestion, evaluation ahead or delta joins, advance) is
one instant's. The first interval after a switch is not counted (a state's build, a first
compile). A query starts maintained; after one counted instant each way the cheaper mode is
kept, and the other is measured again every :data:`PROBE_EVERY` instants. Two misses within
:data:`MISS_WINDOW` instants ahead (latency paid at the instant) send it back to maintaining
for :data:`BLOCK` instants.

Thread safety: the ingestion thread evaluates under the query's ``Maintained.lock`` and
:attr:`Ahead.gen_lock`; the worker's own generated instant (:meth:`InstantEvaluator._generated`)
takes ``gen_lock`` while this mode is on (:meth:`Ahead.guards_gen`), so the generator's
per-instant caches are never used by two threads at once (the worker never takes the
maintained lock while it holds ``gen_lock``: no cycle).
"""

from __future__ import annotations

import threading

from engine.stream.tiny_gen import GEN_WINDOW

#: instants between measures of the mode not chosen
PROBE_EVERY = 32
#: misses (an instant ahead mode did not hold) within MISS_WINDOW ahead instants that block it
MISS_MAX = 2
MISS_WINDOW = 8
#: instants ahead mode stays off after too many misses
BLOCK = 64
#: counted samples per mode the choice reads (their median)
KEEP = 3
#: (instants' events evaluated ahead, instants ahead mode went through, of them missed,
#: switches into ahead mode, switches back to maintaining) -- tests: the path is taken
TAKEN = [0, 0, 0, 0, 0]


def taken() -> tuple:
    """:data:`TAKEN`'s counters, all queries of the process (tests)."""
    return tuple(TAKEN)


class _Ctx:
    """The little of a query context :meth:`GenQuery.run` and :meth:`GenQuery.render` read.
    No deadline: the generated loops are bounded themselves (``MAX_WORK`` join steps per
    triple, ``MAX_ROWS`` rows: they hand back), and no row budget below theirs
    (:meth:`Maintained.of` takes none)."""

    __slots__ = ("snapshot", "dictionary")
    max_rows = None

    def __init__(self, snap):
        self.snapshot = snap
        self.dictionary = snap.dictionary

    def check_budget(self) -> None:
        return None

    def lookup(self, key: str) -> int:
        return int(self.dictionary.lookup(key))

    def keys(self, ids) -> list:
        return self.dictionary.keys(ids)


class Ahead:
    """One maintained query's choice between maintaining and evaluating ahead (see the module).
    Every method runs under the query's ``Maintained.lock``."""

    __slots__ = ("m", "on", "cold", "samples", "since", "block", "misses", "n_ahead", "snap", "graphs",
                 "switches", "gen_lock")

    def __init__(self, m):
        self.m = m
        self.on = False          # evaluating ahead (else: maintaining)
        self.cold = True         # the current interval is the first after a switch (not counted)
        self.samples = {False: [], True: []}   # mode -> CPU seconds per instant, counted
        self.since = 0           # instants since the last switch
        self.block = 0           # instants ahead mode stays off (too many misses)
        self.misses: list = []   # ahead instants (n_ahead) that missed
        self.n_ahead = 0
        self.snap = None         # the snapshot and stored graphs the worker's last advance gave
        self.graphs = None
        self.switches = 0
        self.gen_lock = threading.Lock()   # (the generator's caches: this thread's or the worker's)

    @staticmethod
    def eligible(m) -> bool:
        """A query whose every window is gone by its next instant (step >= every range), whose
        instant writes an event body (not rows mode)."""
        return not m.rows_mode and m.step >= m._rmax

    def guards_gen(self) -> bool:
        """Whether the worker's generated instant must take the query's lock."""
        return self.on

    # -- the worker, after an instant's event ---------------------------------------------
    def at_advance(self, snap, graphs: list, tau: int, spent: float) -> bool:
        """Called first by :meth:`Maintained.advance` with the CPU seconds the query spent
        since the last advance (one instant's). Records it for the mode that spent it, picks the
        mode of the next instant; True when that is ahead (the state made ready for ``tau``:
        the caller returns), False when the caller maintains as usual."""
        m = self.m
        if self.block:
            self.block -= 1
        st = m.state
        if self.on and st is not None:
            TAKEN[1] += 1
        # (no state through the interval: dropped, backing off, just built -- nothing to count)
        if not self.cold and st is not None and st.tau is not None:
            s = self.samples[self.on]
            s.append(spent)
            if len(s) > KEEP:
                del s[0]
        self.cold = st is None
        self.since += 1
        want = self._choose()
        if want != self.on:
            self.on = want
            self.cold = True
            self.since = 0
            self.switches += 1
            TAKEN[3 if want else 4] += 1
            m._reset()   # (either way the other mode's state goes: rebuilt below or by advance)
        if not self.on:
            return False
        self.snap, self.graphs = snap, graphs
        st = m.state
        if st is None or st.sn != snap.sn:
            from engine.stream.maintained import _State  # noqa: PLC0415 -- (a cycle at import)
            st = m.state = _State(None, None, snap.sn, tuple(map(id, graphs)), len(m.windows))
        for k in [k for k in m._done if k < tau]:
            del m._done[k]
        if st.tau is None or st.tau < tau:
            st.tau = tau
        return True

    def _choose(self) -> bool:
        """The next instant's mode from the counted samples (see the module)."""
        if self.block or not self.eligible(self.m):
            return False
        ahead, maint = self.samples[True], self.samples[False]
        if self.since < 2 or not self.samples[self.on]:   # (a switch's first interval is not counted)
            return self.on
        if not maint:
            return False
        if not ahead:
            return True
        if self.since >= PROBE_EVERY:   # the other mode measured again (two intervals: cold, counted)
            other = not self.on
            self.samples[other].clear()
            return other
        return _median(ahead) < _median(maint)

    # -- the ingestion thread -------------------------------------------------------------
    def on_append(self, store, last: int, gap, tau: list) -> None:
        """A batch appended to ``store`` (its elements' times ``tau``, the last ``last``):
        the next instant's event evaluated when the batch may be its last, the state moved to
        the following instant once an element beyond it arrived on every stream."""
        m = self.m
        st = m.state
        from engine.stream.maintained import AHEAD, IDLE_MAX  # noqa: PLC0415
        for _ in range(AHEAD + 1):
            hi = st.tau
            complete = last > hi and all((bw.store.last_tau or hi) > hi for bw in m.windows)
            # (gap: Maintained.on_append's guess, only the completing batch once the instants
            # are completed before they are asked, COMPLETED_RUN; ranges it holds: not again)
            if complete or gap is None or last + gap > hi:
                self._evaluate(hi)
            if not complete or _ + 1 > AHEAD:
                return
            m._completed = hi
            st.tau = hi + m.step
            m._idle += 1
            if m._idle > IDLE_MAX:   # (as maintaining: nobody reads these instants)
                m._reset()
                return

    def _evaluate(self, hi: int) -> None:
        """Instant ``hi``'s event by the generated code, held with its windows' ranges (not
        again for ranges it holds already)."""
        m = self.m
        snap = self.snap
        if snap is None:
            return
        ranges = [bw.store.window_range(bw.window, hi) for bw in m.windows]
        got = m._done.get(hi)
        if got is not None and got[0] == ranges and got[1] == snap.sn:
            return
        m._done.pop(hi, None)
        if sum(g1 - g0 for g0, g1 in ranges) > GEN_WINDOW:
            return
        ctx = _Ctx(snap)
        spec = [(bw.store, g0, g1) for bw, (g0, g1) in zip(m.windows, ranges, strict=True)]
        with self.gen_lock:
            rows = m.gen.run(ctx, self.graphs, spec)
            if rows is None:
                return
            ev = m.gen.render(rows, m.json, ctx, b',"window":{"start":%d,"end":%d}' % (hi - m._rmax, hi))
        done = m._done
        if len(done) >= 8:
            del done[min(done)]
        done[hi] = (ranges, snap.sn, None, ev)
        TAKEN[0] += 1

    # -- the instant ----------------------------------------------------------------------
    def missed(self) -> None:
        """An instant ahead mode did not hold: the guess off for a while; too many: maintain."""
        from engine.stream.maintained import LAZY_HOLD  # noqa: PLC0415
        TAKEN[2] += 1
        m = self.m
        self.n_ahead += 1
        m._lazy_hold = LAZY_HOLD
        m._run = 0
        ms = self.misses
        ms.append(self.n_ahead)
        while ms and ms[0] <= self.n_ahead - MISS_WINDOW:
            del ms[0]
        if len(ms) >= MISS_MAX:
            ms.clear()
            self.block = BLOCK


def _median(xs: list) -> float:
    s = sorted(xs)
    return s[len(s) // 2]
