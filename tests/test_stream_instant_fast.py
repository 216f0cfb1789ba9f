"""The common maintained instant in one function (:mod:`engine.stream.instant_fast`).

Its events are compared byte for byte with the one-step path it shortens (``_step_maintained``)
and the general path by ``tests/test_stream_maintained_instant.py`` (``_compare`` runs it
first, ``how="one"``). Here: that it decides as ``maintained_due`` does at every instant, that
the ranges it computes inline are :meth:`InstantEvaluator.ranges`'s, that both of its cases
(the event held whole, the body held) are taken, and tumbling windows (the instants issue 13
measures) byte for byte with the other paths.
"""

from __future__ import annotations

import threading

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.stream import instant_fast, maintained
from engine.stream.manager import StreamManager
from tests.test_stream_maintained_instant import _DUE, _Q, _compare, _run, _steady, periods, triple
from tests.test_stream_tiny_gen import EX, NODES, PREDS, TERMS, queries


class _StepSpy:
    """Wraps :func:`instant_fast.step`: its decision against ``maintained_due`` (asked first,
    on the same state), and after each instant it answered, its ranges against a fresh
    :meth:`InstantEvaluator.ranges`."""

    def __init__(self):
        self.step = instant_fast.step
        self.calls = self.due = self.ranges = 0
        self.bad: list = []

    def __call__(self, sched, q, t, last, t0):
        ev = q.evaluator
        want = bool(_DUE(ev, q.state, t, last, sched.idle_after > 1))
        ok0 = ev._ok
        got = self.step(sched, q, t, last, t0)
        self.calls += 1
        self.due += want
        if got != want:
            self.bad.append(("decision", t, last, got, want))
        if got and ev._ok == t != ok0:   # answered: its inline ranges as ranges() computes them
            at = ev._at
            ev._at = None
            try:
                fresh = ev.ranges(t)
            finally:
                ev._at = at
            self.ranges += 1
            if at is None or at[0] != t or at[1] != fresh:
                self.bad.append(("ranges", t, at, fresh))
        return got


def _spied(monkeypatch) -> _StepSpy:
    spy = _StepSpy()
    monkeypatch.setattr(instant_fast, "step", spy)
    return spy


SPIED = [0, 0, 0]   # (calls, due, ranges compared) over the property test's examples


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=periods, jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=4, max_size=4),
       commit=st.none() | st.tuples(st.integers(1, 6), st.lists(triple, min_size=1, max_size=2)),
       window=st.sampled_from(["[RANGE 3s STEP 1s]", "[RANGE 2s STEP 2s]", "[RANGE 3s STEP 3s]"]))
def test_it_decides_as_maintained_due_and_ranges_as_ranges(q, per, jumps, commit, window, monkeypatch):
    spy = _spied(monkeypatch)
    _run(q, per, jumps, commit, "one", monkeypatch, window=window)
    assert not spy.bad, (q, spy.bad)
    SPIED[0] += spy.calls
    SPIED[1] += spy.due
    SPIED[2] += spy.ranges


def test_the_property_test_saw_both_decisions():
    """The property test compared decisions and ranges (15 random examples: now and then all
    of their calls are due, so the "not due" side is checked by the deterministic tests below,
    which drive it on purpose)."""
    assert SPIED[0] >= SPIED[1] > 0 and SPIED[2] > 0, SPIED


def test_probes_a_back_off_and_a_drop_decide_as_maintained_due(monkeypatch):
    """The guard probing every other answer, a state dropped (a back-off), a commit: every
    decision as ``maintained_due``'s."""
    spy = _spied(monkeypatch)
    monkeypatch.setattr(maintained.Maintained, "GUARD_EVERY", 2)
    monkeypatch.setattr(maintained.Maintained, "GUARD_REFRESH", 2)
    _run(_Q, _steady(14), [1], (5, [(NODES[0], PREDS[2], TERMS[1])]),
         "one", monkeypatch)
    monkeypatch.setattr(maintained, "MAX_ROWS", 1)
    _run(_Q, _steady(14), [1], None, "one", monkeypatch)
    assert not spy.bad, spy.bad
    assert spy.calls > spy.due > 0


def test_both_cases_are_taken(monkeypatch):
    """A steady stream, one instant ready at a time: most instants are answered by the
    one-function path itself, from the event the ingestion held whole; an instant no element
    of the next period reached (the stream's heartbeat completed it) from the body held."""
    k0 = list(instant_fast._TAKEN)
    per = _steady(12)
    # every other period empty: its instant is completed by the heartbeat, not by an element
    per = [p if i % 2 == 0 else [] for i, p in enumerate(per)]
    _compare(_Q, per, [1], None, monkeypatch)
    held, body = instant_fast._TAKEN[0] - k0[0], instant_fast._TAKEN[1] - k0[1]
    assert held > 0 and body > 0, (held, body)
    assert held + body >= len(per) - 4


def test_tumbling_windows_byte_for_byte(monkeypatch):
    """Tumbling windows (RANGE = STEP: the cold instants of issue 13): the same events as the
    one-step and the general path, byte for byte, most answered by the one-function path."""
    k0 = instant_fast.taken_total()
    _compare(_Q, _steady(15), [1], None, monkeypatch, window="[RANGE 3s STEP 3s]")
    _compare(_Q, _steady(15), [1, 2, 1], None, monkeypatch, window="[RANGE 2s STEP 2s]")
    assert instant_fast.taken_total() - k0 >= 6


class _Boom:
    """The state's lock, whose acquisition fails on the scheduler's worker (the ingestion takes
    it as before): an unexpected exception inside :func:`instant_fast.step`."""

    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        if threading.current_thread().name == "jindou-continuous":
            raise RuntimeError("kaput")
        return self.lock.__enter__()

    def __exit__(self, *a):
        return self.lock.__exit__(*a)


def _tumbling(m, db):
    m.register_stream("a", EX + "a")
    m.heartbeat("a", 0)
    m.register_query(f"REGISTER QUERY q AS SELECT ?x ?z FROM STREAM <{EX}a> [RANGE 1s STEP 1s] "
                     f"WHERE {{ ?x {PREDS[1]} ?y . ?x {PREDS[2]} ?z }}")
    for k in range(6):
        x = NODES[k % len(NODES)]
        lines = [{"s": x, "p": PREDS[1], "o": TERMS[k % len(TERMS)], "t": 1000 * k + 10},
                 {"s": x, "p": PREDS[2], "o": TERMS[(k + 3) % len(TERMS)], "t": 1000 * k + 20}]
        assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0
        m.heartbeat("a", 1000 * (k + 1) + 1)   # (instant 1000 k ready, alone)
        assert m.drain(30)


def test_a_failure_inside_is_answered_by_the_ordinary_path(caplog):
    """An unexpected exception inside the one-function path (here: the state's lock): logged,
    the instant evaluated by the ordinary path (the state not asked again), the same event as
    without the failure; and when the ordinary path fails too, an ``internal`` error event
    with a reference to the log, never the exception's text."""
    def events(fail: str | None):
        db = Database()
        m = StreamManager(db)
        try:
            _tumbling(m, db)
            q = m._reg.queries["q"]
            assert q.evaluator._mdue and instant_fast.taken_total() > k0
            if fail:
                q.evaluator._mdue.lock = _Boom(q.evaluator._mdue.lock)
            if fail == "both":
                def boom(*a, **k):
                    raise RuntimeError("kaput")
                q.evaluator.run = boom
            line = {"s": NODES[0], "p": PREDS[1], "o": TERMS[0], "t": 6500}
            m.ingest_ndjson("a", orjson.dumps(line))
            m.heartbeat("a", 7001)
            assert m.drain(30)
            return [(e.id, e.event, bytes(e.data)) for e in m.log("q").since(None, from_t=-1)]
        finally:
            m.close()
            db.close()

    k0 = instant_fast.taken_total()
    plain = events(None)
    caplog.clear()
    failed = events("lock")
    assert failed == plain
    assert any("the maintained instant 7000 failed" in r.getMessage() for r in caplog.records)
    both = events("both")
    assert both[:-1] == plain[:-1]
    doc = orjson.loads(both[-1][2])
    assert both[-1][0] == 7000 and doc["error"] == "internal"
    assert "kaput" not in doc["detail"] and "server log" in doc["detail"]


def test_instant_count_sees_fewer_calls_with_it(monkeypatch, capsys):
    """``bench.instant_count`` (calls and bytecodes per one-step instant, the measure load does
    not move): the one-function path makes fewer Python calls up to the event than the
    functions it replaces."""
    import re  # noqa: PLC0415

    from bench import instant_count  # noqa: PLC0415

    got = {}
    for on in (True, False):
        monkeypatch.setattr(instant_fast, "ENABLED", on)
        k0 = instant_fast.taken_total()
        assert instant_count.main(["--workload", "lsbench-small", "--queries", "L1", "--minutes", "0.2"]) == 0
        out = capsys.readouterr().out
        m = re.search(r"L1 \((\d+) instants\): to the event py calls ([\d.]+), C calls [\d.]+, bytecodes ([\d.]+)", out)
        assert m is not None, out
        got[on] = (int(m.group(1)), float(m.group(2)), float(m.group(3)), instant_fast.taken_total() - k0)
    assert got[True][0] > 3 and got[False][0] > 3, got
    assert got[True][3] > 0 and got[False][3] == 0, got
    assert got[True][1] < got[False][1] and got[True][2] < got[False][2], got
