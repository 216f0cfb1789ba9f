"""The common maintained instant in one function (issue 13: the cold instant).

A maintained query's instant whose event the state already holds -- written whole by the
ingestion thread (``Maintained._done``), or its body written by ``Maintained.advance`` or an
element (``Maintained._body``) -- costs a dozen attribute reads and a dict pop. On a worker
woken after ~10 buckets of ingestion (a tumbling window's instant) every object and every
code object it touches is cold, so what it costs is how much code runs and how many distinct
objects it reads: the general path goes through six functions besides the issue
(``maintained_due``, ``_step_maintained``, ``maintained_instant``, ``ranges``,
``Maintained.instant``, ``_store_event``), each with its own frame, argument passing and
re-reads of the same attributes. :func:`step` is their common case in one frame: the same checks in the
same order, the same event bytes, state, counters and latency region (from the scheduler's
``t0`` to just before the event is stored, the issue under ``cv`` excluded), the windows' seq
ranges computed by the same bisections (exactness is unchanged: the held ranges, snapshot
number and dictionary size are compared as in ``Maintained.instant``). Anything else -- no
held event or body, a state that needs catching up, a back-off, the guard's probe, an
exception -- goes to the general functions, from the point where this one stopped (nothing
is done twice: a popped held event that did not match is what ``Maintained.instant`` would
have discarded too).

Measured (wave 2m, ``bench.instant_ab`` / ``bench.instant_count``): 6 Python calls fewer per
instant up to the stored event, the tumbling windows' one-step instants 15-40 % faster.
Tests compare every event with :data:`ENABLED` off (``tests/test_stream_maintained_instant.py``,
``tests/test_stream_instant_fast.py``) and count the instants it answered (:func:`taken_total`).
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from time import perf_counter

from engine.stream import continuous as _c
from engine.stream import maintained as _m
from engine.stream.pred_times import ALL

__all__ = ["ENABLED", "step", "taken_total"]

#: the one-function path on (tests compare events with it off)
ENABLED = True
#: instants it answered itself: (from the event the ingestion held whole, from the body held)
_TAKEN = [0, 0]

log = logging.getLogger("jindou.stream")


def taken_total() -> int:
    """Instants :func:`step` answered itself, all queries of the process (tests)."""
    return _TAKEN[0] + _TAKEN[1]


def step(sched, q, t: int, last: int, t0: float) -> bool:
    """Instant ``t`` of ``q`` (ready up to ``last``, ``q.state`` and ``q.prefix`` set) if its
    maintained state answers it (``InstantEvaluator.maintained_due``): issued, answered and
    its event stored, True. False (nothing done) when the instant is not the maintained
    state's: the scheduler's general checks take it."""
    ev = q.evaluator
    mt = ev._mdue
    if mt is None:
        mt = ev._due_static()
    # maintained_due, inline
    if mt is False or last != t or ev._ok != q.state[0] or sched.idle_after <= 1:
        return False
    if mt.state is None or mt._skip or mt._probe:
        return False
    ab = ev._mdue_absorb
    if ab is not None and len(ab):
        return False
    spent = perf_counter() - t0   # (the issue under cv is not the instant's, as in _step_one)
    with sched.reg.cv:
        if not sched._issue(q, t):   # its stream went away
            return True
    t0 = perf_counter() - spent
    try:
        snap = ev.db.store.snapshot()
        at = ev._at
        if at is not None and at[0] == t:
            r = at[1]
        else:   # InstantEvaluator.ranges' time windows (the only kind maintained_due admits)
            r = []
            for k, (store, pt, rng) in enumerate(ev._rel[2]):
                if pt.seq != store.end_seq:
                    pt.sync(store)
                lo = t - rng
                g = pt.groups.get(ALL)
                since = pt.since
                if g is None or (since is not None and lo < since):
                    bw = ev.windows[k]
                    r.append(bw.store.window_range(bw.window, t))
                    continue
                arr, head, seq0 = g
                i0 = bisect_right(arr, lo, head)
                g1 = seq0 + (bisect_right(arr, t, i0) if t > lo else i0)
                g0 = seq0 + i0
                live = store.live_start
                if g0 < live:
                    g0 = live
                r.append((g0, g1 if g1 > g0 else g0))
            ev._at = (t, r)
        data = None
        held = 0
        with mt.lock:   # Maintained.instant's common cases, inline
            mt._idle = 0
            st = mt.state
            if not mt._skip and st is not None and not mt._probe:
                done = mt._done.pop(t, None)
                dn = st.dict_n
                fresh = dn is None or dn == len(snap.dictionary)
                if done is not None and done[1] == snap.sn and done[0] == r and fresh:
                    data = done[3]   # (body + member + "}", written whole on the ingestion thread)
                elif fresh and st.sn == snap.sn and mt._body is not None:
                    for w, (g0, g1) in zip(st.ws, r, strict=True):
                        if w[1] != g0 or w[2] != g1:
                            break
                    else:
                        st.tau = t
                        held = 1
                        wm = ev._wm   # t's window member, formatted by prepare() after the last event
                        data = b"".join((mt._body, wm[2] if wm is not None and wm[0] == t
                                         else ev.member_bytes(t), b"}"))
                if data is not None:
                    _m._ANSWERED[0] += 1
                    n = mt._n = mt._n + 1
                    if n >= mt.GUARD_EVERY:
                        mt._guard()
        if data is None:   # the general case, from here (a popped, unmatched held event is gone there too)
            held = 2
            wm = ev._wm
            data = mt.instant(snap, ev._graphs_of, r, t,
                              wm[2] if wm is not None and wm[0] == t else ev.member_bytes(t))
    except Exception:  # noqa: BLE001 - the ordinary path answers (and reports its own errors)
        log.exception("continuous query %s: the maintained instant %d failed", q.name, t)
        data = None
    if data is None:   # as Scheduler._step_maintained: evaluated, the state not asked again
        ev._pre = (t, (perf_counter() - t0) * 1000.0)
        sched._evaluate(q, t, None, maintained=False)
        return True
    _c._MFAST[0] += 1
    ev._fin = None
    ev._ok = t
    state = (t, snap.sn, r)
    ms = (perf_counter() - t0) * 1000.0
    with q.out_lock:   # Scheduler._store_event, inline
        if q.deleted:
            return True
        q.evaluated += 1
        q.last_latency_ms = ms
        q.state, q.prefix = state, None
        q.log.append(t, data)
    if held < 2:   # (a test's counter: not the instant's work, after its time)
        _TAKEN[held] += 1
    sched._after(q, t, data, ms)
    return True
