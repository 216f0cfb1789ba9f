"""The work around an evaluated instant (wave 2i): the scheduler's issue of the instant, the
relevance check's tail-first look and its back-off, the window member by formatting, the
delta guard's decision in one call, and what is kept after the event (``settle``).

Each fast form is compared with the general one it replaces (hypothesis where it is a rule
over numbers), and the back-off through the manager: every event with it equals the events of
a manager evaluating every instant, and it is taken.
"""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.sparql.csparql import parse_continuous
from engine.stream import continuous
from engine.stream.delta import DeltaGuard
from engine.stream.manager import StreamManager
from engine.stream.pred_times import change_by, next_change
from engine.stream.scheduler import Scheduler
from engine.stream.windows import Trigger
from tests.test_stream_pred_times import _expand, _run

EX = "http://ex.org/"


# ---------------------------------------------------------------- the tail-first relevance rule

@settings(max_examples=500, deadline=None)
@given(times=st.lists(st.integers(0, 400), min_size=0, max_size=60), head=st.integers(0, 70),
       te_q=st.integers(0, 40), rng=st.sampled_from([10, 30, 100]), step=st.sampled_from([5, 10, 30]),
       ahead=st.integers(0, 6))
def test_change_by_decides_as_next_change(times, head, te_q, rng, step, ahead):
    """``change_by`` is ``<= t`` exactly when :func:`next_change` is, and equals it otherwise
    (groups of any length, a head past some entries, instants before, inside and after the
    times)."""
    from array import array  # noqa: PLC0415

    arr = array("q", sorted(times))
    g = [arr, min(head, len(arr))]
    te = te_q * step
    t = te + ahead * step
    want = next_change({7: g}, (7,), te, rng, step)
    got = change_by(g, te, rng, step, t)
    if want is None:
        assert got is None
    elif want <= t:
        assert got is not None and got <= t
    else:
        assert got == want


# ---------------------------------------------------------------- issuing the instant

@settings(max_examples=300, deadline=None)
@given(step=st.sampled_from([1, 7, 1000]), first=st.integers(-50, 50),
       progress=st.lists(st.one_of(st.none(), st.integers(-100, 3000)), min_size=1, max_size=3),
       gone=st.integers(0, 3), skip=st.integers(0, 3))
def test_issue_is_trigger_ready_limit_one(step, first, progress, gone, skip):
    """The scheduler's issue of the next instant (:meth:`Scheduler._issue`) does what
    ``Trigger.ready(reg.progress(), limit=1)`` did: the same instant issued or none, the
    trigger left in the same state (streams without progress, or gone from the registry)."""
    names = [f"s{i}" for i in range(len(progress))]

    class St:
        def __init__(self, p):
            self.published = p

    streams = {n: St(p) for n, p in zip(names, progress, strict=True) if names.index(n) != gone}

    class Reg:
        pass

    reg = Reg()
    reg.streams = streams
    prog = {n: s.published for n, s in streams.items()}
    a = Trigger(step, names, {n: first for n in names})
    b = Trigger(step, names, {n: first for n in names})
    for tr in (a, b):
        if skip:   # some instants issued already
            tr.advance(tr.next_instant + (skip - 1) * step)

    class Q:
        trigger = b

    sched = Scheduler.__new__(Scheduler)
    sched.reg = reg
    want = a.ready(prog, limit=1)
    got = sched._issue(Q, b.next_instant)
    assert got == bool(want)
    assert (a.next_instant, a.issued) == (b.next_instant, b.issued)
    # an instant other than the next one is never issued
    c = Trigger(step, names, {n: first for n in names})
    Q.trigger = c
    assert sched._issue(Q, c.next_instant + step) is False and c.issued == 0


# ---------------------------------------------------------------- the delta guard's decision

@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 5)), min_size=1, max_size=40))
def test_ask_is_wants_check_then_checks_next(ops):
    """``DeltaGuard.ask`` makes the decisions ``run`` made with ``wants_check`` and
    ``checks_next`` (memory or none, hopeless instants, a back-off counting down)."""
    q = parse_continuous(f"REGISTER QUERY q AS SELECT ?s FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
                         f"WHERE {{ ?s <{EX}p> ?o }}").query
    a, b = DeltaGuard(q), DeltaGuard(q)
    for k, (memo, hopeless, skip) in enumerate(ops):
        for g in (a, b):
            g._memo = (k, 0, [], b"x") if memo else None
            if k % 3 == 0:
                g._skip = skip
        keep = not hopeless and a.wants_check()
        want = 2 if keep else (1 if (hopeless or a.last is None or a.checks_next()) else 0)
        assert b.ask(hopeless) == want
        assert a._skip == b._skip


# ---------------------------------------------------------------- the window member

def test_window_member_bytes_are_orjsons():
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("a", EX + "a")
        m.register_stream("b", EX + "b")
        m.heartbeat("a", 0)
        m.heartbeat("b", 0)
        m.register_query(f"REGISTER QUERY q AS SELECT ?s FROM a [RANGE 3s STEP 1s] FROM b [RANGE 1500ms STEP 1s] "
                         f"WHERE {{ ?s <{EX}p> ?o }}")
        ev = m._reg.queries["q"].evaluator
        for t in (0, 1000, -3000, 10**13, 2**40 + 7):
            win = ev.window_member(t)
            assert win == {"start": t - 3000, "end": t}
            assert ev._wm[2] == b',"window":' + orjson.dumps(win) == ev.member_bytes(t)
            assert ev.window_member(t) is win   # the same dict for every asker of the instant
    finally:
        m.close()
        db.close()


# ---------------------------------------------------------------- the relevance check's back-off

def _busy_scenario(rng: random.Random):
    """Long stretches where every bucket brings a triple the query reads (the check keeps
    failing), then stretches of noise alone (reusable), a few unchanged buckets."""
    steps = []
    for k in range(90):
        t0 = k * 700
        phase = (k // 30) % 3
        rows_a = []
        if phase == 0 or (phase == 2 and rng.random() < 0.5):
            rows_a.append((f"x{rng.randint(0, 3)}", "p", f"v{rng.randint(0, 3)}", t0 + 1))
        if rng.random() < 0.8:
            rows_a.append((f"x{rng.randint(0, 3)}", "noise", "v", t0 + 2))
        steps.append((t0 + 699, rows_a, [], False, True))
    return steps


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("fails", [2, continuous.InstantEvaluator.REL_FAILS])
def test_relevance_backoff_equals_evaluating_every_instant(seed, fails, monkeypatch):
    """With the back-off (its threshold lowered too, so it starts and stops often) every event
    equals a manager's evaluating every instant; the back-off skips checks, and the check
    reuses instants again after a busy stretch."""
    texts = [
        "SELECT ?s ?o FROM STREAM <{a}> [RANGE 3s STEP 1s] WHERE {{ ?s <{ex}p> ?o }}",
        "SELECT ?s (COUNT(*) AS ?n) FROM STREAM <{a}> [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> ?o }} GROUP BY ?s",
        "ASK FROM STREAM <{a}> [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> <{ex}v2> }}",
    ]
    rng = random.Random(seed)
    for qi, text in enumerate(texts):
        scenario = _busy_scenario(random.Random(seed * 100 + qi))
        mode = rng.choice(["", "ISTREAM", "DSTREAM"]) if text.startswith("SELECT") else ""
        monkeypatch.setattr(continuous.InstantEvaluator, "REL_FAILS", fails)
        # (the ordinary path's back-off: a maintained result skips the check its own way)
        monkeypatch.setattr(continuous.InstantEvaluator, "MAINTAINED", False)
        skipped, reused = continuous.rel_skipped_total(), continuous.reused_total()
        got = _run(scenario, text, mode, True, monkeypatch)   # (undoes the patches when done)
        skipped = continuous.rel_skipped_total() - skipped
        reused = continuous.reused_total() - reused
        want = _run(scenario, text, mode, False, monkeypatch)
        assert _expand(got) == _expand(want), (text, mode)
        assert skipped > 0, text     # the back-off is taken
        assert reused > 0, text      # ... and the check reuses again after it


def test_no_backoff_where_an_unchanged_instant_is_an_idle_event(monkeypatch):
    """With ``idle_after`` 1 an unchanged instant is an ``idle`` event, not what evaluating it
    gives: the check is never skipped there."""
    monkeypatch.setattr(continuous.InstantEvaluator, "REL_FAILS", 1)
    db = Database()
    m = StreamManager(db, idle_after=1)
    try:
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS SELECT ?s FROM a [RANGE 2s STEP 1s] WHERE {{ ?s <{EX}p> ?o }}")
        before = continuous.rel_skipped_total()
        for k in range(12):
            p = "p" if k < 8 else "noise"
            m.ingest_ndjson("a", orjson.dumps({"s": f"<{EX}x{k}>", "p": f"<{EX}{p}>", "o": f"<{EX}o>",
                                               "t": k * 1000 + 1}))
            m.heartbeat("a", (k + 1) * 1000)
            assert m.drain(30)
        assert continuous.rel_skipped_total() == before
    finally:
        m.close()
        db.close()


# ---------------------------------------------------------------- what is prepared after an event

def _same_context(a, b) -> None:
    """``a`` (prepared) has every attribute a new context ``b`` has, with the same values, and
    fresh containers of its own."""
    assert a is not b and set(vars(a)) == set(vars(b))
    for k, vb in vars(b).items():
        va = getattr(a, k)
        if k == "deadline":
            assert (va is None) == (vb is None) and (va is None or abs(va - vb) < 5)
        elif k == "memory":
            assert va is not vb and (type(va), va.limit, va.held, va.peak) == (type(vb), vb.limit, vb.held, vb.peak)
        elif k in ("plan_cache", "_term_cache", "snapshot", "dictionary"):
            assert va is vb, k
        elif isinstance(vb, (dict, list, set)):
            assert va == vb and va is not vb, k
        else:
            assert va == vb, k


def test_prepared_context_is_a_new_one(monkeypatch):
    # (the ordinary path's context: a maintained result needs none, engine.stream.maintained)
    monkeypatch.setattr(continuous.InstantEvaluator, "MAINTAINED", False)
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS SELECT ?s FROM a [RANGE 3s STEP 1s] WHERE {{ ?s <{EX}p> ?o }}")
        ev = m._reg.queries["q"].evaluator
        taken = []
        real = continuous.InstantEvaluator._context

        def spy(self, snap):
            taken.append(self._ctx_next is not None)
            ctx = real(self, snap)
            _same_context(ctx, self._new_context(snap))
            taken.append(ctx)   # (held: ids stay distinct)
            return ctx

        monkeypatch.setattr(continuous.InstantEvaluator, "_context", spy)
        for k in range(6):   # every instant changes: each is evaluated
            m.ingest_ndjson("a", orjson.dumps({"s": f"<{EX}x{k}>", "p": f"<{EX}p>", "o": f"<{EX}o>",
                                               "t": k * 1000 + 1}))
            m.heartbeat("a", (k + 1) * 1000)
            assert m.drain(30)
        flags, ctxs = taken[0::2], taken[1::2]
        assert len(flags) >= 5 and all(flags[1:])   # prepared after each event, taken by the next
        assert len({id(c) for c in ctxs}) == len(ctxs)   # one context per instant
        monkeypatch.undo()
        # the database's limits changed since it was prepared: a new context with the new ones
        snap = db.store.snapshot()
        ev.prepare(10_000)
        assert ev._wm[0] == 10_000 and ev._wm[2] == b',"window":{"start":7000,"end":10000}'
        db.query_timeout = 7.0
        ctx = ev._context(snap)
        assert ctx.timeout == 7.0 and ev._ctx_next is None
        _same_context(ctx, ev._new_context(snap))
    finally:
        m.close()
        db.close()
