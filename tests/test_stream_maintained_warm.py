"""The stored part read ahead of a query's first instant, and read again per class only.

* :meth:`Scheduler._step` (idle) -> :meth:`InstantEvaluator.warm` -> :meth:`Maintained.warm`:
  a new query's maintained state is built for the stored part before its first instant; it
  answers no instant before its first advance, so every event is byte for byte what it is
  without the warm-up.
* :meth:`GenQuery._stored`: a constant coming into the dictionary (the stream brings it)
  re-reads only its own class; the other classes' entries (pairs, indexes) are kept -- and
  equal what a fresh read gives.
* :meth:`Maintained._build` takes those entries as they are when the stored part has no
  solution of its own (no copy).
* :func:`maintained.progressed` (a heartbeat): the instant it makes ready finds its event
  written, as one an element beyond it completed; the log is the same without the hook.
"""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.test_stream_maintained_instant as MI
from engine.database import Database
from engine.stream import maintained
from engine.stream.continuous import InstantEvaluator, _SnapCtx
from engine.stream.manager import StreamManager
from tests.test_stream_tiny_gen import _rows, queries

EX = "http://ex.org/"
STATIC = EX + "static"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"

# the stored part: many sensors of a type, readings only in the stream; <EX>late and the
# sensor <EX>s0 are terms only the stream brings (constants of the query absent at registration)
Q_NO_OWN = (f"SELECT ?o ?s ?v FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE {{ "
            f"?o <{EX}late> <{EX}s0> . ?o <{EX}by> ?s . ?s <{EX}type> <{EX}Sensor> . ?o <{EX}value> ?v }}")
# the stored part has solutions of its own (the held branch of _build)
Q_OWN = (f"SELECT ?s ?k FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE {{ "
         f"?s <{EX}type> <{EX}Sensor> . ?s <{EX}kind> ?k }}")


def _static() -> bytes:
    lines = [f"<{EX}s{i}> <{EX}type> <{EX}Sensor> .\n" for i in range(1, 300)]
    lines += [f"<{EX}s{i}> <{EX}kind> \"k{i % 3}\" .\n" for i in range(1, 300, 7)]
    return "".join(lines).encode()


def _feed(k: int) -> list:
    out = []
    for j in range(3):
        o = f"<{EX}o{k}_{j}>"
        t = k * 1000 + 100 * j + 1
        out += [{"s": o, "p": f"<{EX}by>", "o": f"<{EX}s{1 + (k + j) % 5}>", "t": t},
                {"s": o, "p": f"<{EX}value>", "o": f'"{(k + j) % 4}"^^<{XSD_INT}>', "t": t}]
        if k >= 2 and j != 1:   # the constants arrive after the first instants
            out.append({"s": o, "p": f"<{EX}late>", "o": f"<{EX}s0>", "t": t})
        if k % 3 == 1:
            out.append({"s": f"<{EX}s{1 + k}>", "p": f"<{EX}kind>", "o": '"k9"', "t": t})
    return out


def _run(query: str, monkeypatch, warm: bool = True, maintain: bool = True, probe=None, past: int = 0):
    """The query's events ``(id, kind, data)``, the scheduler's warm-up count and what
    ``probe(manager, evaluator)`` saw right after the registration (the worker idle).
    ``past``: each heartbeat that many ms past the bucket (1: past its last instant too)."""
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", maintain)
    if not warm:
        monkeypatch.setattr(InstantEvaluator, "warm", lambda self: None)
    db = Database()
    m = StreamManager(db)
    try:
        db.load_data(_static(), "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS {query}")
        assert m.drain(30)   # (the worker idle: the warm-up done)
        ev = m._reg.queries["q"].evaluator
        seen = probe(m, ev) if probe is not None else None
        for k in range(9):
            lines = _feed(k)
            assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0
            m.heartbeat("a", (k + 1) * 1000 + past)
            assert m.drain(30)
        events = [(e.id, e.event, bytes(e.data)) for e in m.log("q").since(None, from_t=-1)]
        return events, m._scheduler.warmed, seen
    finally:
        m.close()
        db.close()


def _ahead(m, ev):
    mt = ev._maint
    return mt is not None and mt.state is not None and mt._ahead and mt.state.tau is None


def test_warm_up_builds_the_state_ahead_and_changes_no_event(monkeypatch):
    for q in (Q_NO_OWN, Q_OWN):
        a0 = maintained.answered_total()
        warm, n_warm, ahead = _run(q, monkeypatch, probe=_ahead)
        answered = maintained.answered_total() - a0
        monkeypatch.undo()
        cold, n_cold, ahead_cold = _run(q, monkeypatch, warm=False, probe=_ahead)
        monkeypatch.undo()
        off, _, _ = _run(q, monkeypatch, maintain=False)
        monkeypatch.undo()
        assert n_warm == 1 and ahead is True          # taken: built before any element arrived
        assert n_cold == 1 and ahead_cold is False    # (the count is the scheduler's; warm() a no-op)
        assert warm == cold, q                        # byte for byte: ids, kinds, data
        assert [(i, k, _rows(d)) for i, k, d in warm] == [(i, k, _rows(d)) for i, k, d in off]
        assert answered >= 4                          # the state answered after its first advance
        assert any(_rows(d) for _, k, d in warm if k == "result")


def test_a_new_constant_rereads_its_class_only(monkeypatch):
    """The first instants run with <EX>late / <EX>s0 unknown; once the stream brings them the
    generator's stored entries of the other classes are the same objects, and every entry equals
    a fresh read of the stored part."""
    kept = {}

    def before(m, ev):
        gen = ev._gen
        kept["ids"] = list(gen._ids[2])
        kept["entries"] = list(gen._sidx[1])
        return None

    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", True)
    db = Database()
    m = StreamManager(db)
    try:
        db.load_data(_static(), "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS {Q_NO_OWN}")
        assert m.drain(30)
        ev = m._reg.queries["q"].evaluator
        before(m, ev)
        for k in range(5):
            lines = _feed(k)
            assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0
            m.heartbeat("a", (k + 1) * 1000)
            assert m.drain(30)
        gen = ev._gen
        ids = list(gen._ids[2])
        assert ids != kept["ids"]   # a constant came in
        same = [c for c, (a, b) in enumerate(zip(ids, kept["ids"], strict=True)) if a == b]
        changed = [c for c in range(len(ids)) if c not in same]
        assert same and changed
        now = gen._sidx[1]
        assert all(now[c] is kept["entries"][c] for c in same)
        assert all(now[c] is not kept["entries"][c] for c in changed)
        big = max(same, key=lambda c: len(now[c][3]))
        assert len(now[big][3]) >= 299 and now[big][1] is not None   # its index kept, not made again
        # a fresh read equals the kept entries
        snap = db.store.snapshot()
        graphs = ev._stored_graphs(_SnapCtx(snap))
        got = gen._sidx
        gen._sidx = None
        fresh = gen._stored(snap, graphs)
        gen._sidx = got
        assert [(dict(e[0]), list(e[3])) for e in fresh] == [(dict(e[0]), list(e[3])) for e in now]
        # the maintained state reads the generator's entries as they are (no own solution: no copy)
        mt = ev._maint
        assert mt.state is not None
        for c in range(len(ids)):
            assert mt.ns[f"S{c}l"] is now[c][3] and mt.ns[f"S{c}s"] is now[c][1]
    finally:
        m.close()
        db.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=MI.periods, jumps=st.lists(st.sampled_from([1, 1, 2]), min_size=4, max_size=4))
def test_random_queries_equal_with_and_without_the_warm_up(q, per, jumps, monkeypatch):
    """Random queries of the generator's forms over random streams (test_stream_maintained_instant):
    the log with the warm-up equals the one without, byte for byte (ids, kinds, data)."""
    monkeypatch.setattr(InstantEvaluator, "warm", _counting_warm)
    warm, _, _ = MI._run(q, per, jumps, None, "fast", monkeypatch)
    monkeypatch.undo()
    monkeypatch.setattr(InstantEvaluator, "warm", lambda self: None)
    cold, _, _ = MI._run(q, per, jumps, None, "fast", monkeypatch)
    monkeypatch.undo()
    assert warm == cold, q


WARMED = [0]
_warm = InstantEvaluator.warm


def _counting_warm(self):
    _warm(self)
    if self._maint is not None and self._maint._ahead:   # a state built ahead
        WARMED[0] += 1


def test_the_property_test_warmed_states(monkeypatch):
    assert WARMED[0] > 5   # (after the property test: the warm-ups it compared were taken)


def test_a_heartbeat_completes_the_instants_event(monkeypatch):
    """A stream fed in buckets, each followed by a heartbeat past its instant: the heartbeat
    (maintained.progressed) writes the instant's event before the progress is published (no
    element beyond the instant has arrived: the ingestion could not tell it complete); the
    log is byte for byte the one without the hook (each instant then writes it itself)."""
    for q in (Q_NO_OWN, Q_OWN):
        b0 = maintained._BY_PROGRESS[0]
        on, _, _ = _run(q, monkeypatch, past=1)
        taken = maintained._BY_PROGRESS[0] - b0
        monkeypatch.undo()
        monkeypatch.setattr(maintained, "progressed", lambda store, p: None)
        off, _, _ = _run(q, monkeypatch, past=1)
        monkeypatch.undo()
        assert taken >= 4
        assert on == off, q


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=MI.periods, jumps=st.lists(st.sampled_from([1, 1, 2, 3]), min_size=4, max_size=4))
def test_random_queries_equal_with_and_without_the_heartbeat_hook(q, per, jumps, monkeypatch):
    """test_stream_maintained_instant's random queries and streams, each heartbeat 1 ms past its
    bucket (past the instant it readies: the hook's case): the same log without the hook."""
    beat = StreamManager.heartbeat

    def past(self, name, t):
        return beat(self, name, t + 1 if t else t)

    b0 = maintained._BY_PROGRESS[0]
    monkeypatch.setattr(StreamManager, "heartbeat", past)
    on, _, _ = MI._run(q, per, jumps, None, "fast", monkeypatch)
    monkeypatch.undo()
    BEATS[0] += maintained._BY_PROGRESS[0] - b0
    monkeypatch.setattr(StreamManager, "heartbeat", past)
    monkeypatch.setattr(maintained, "progressed", lambda store, p: None)
    off, _, _ = MI._run(q, per, jumps, None, "fast", monkeypatch)
    monkeypatch.undo()
    assert on == off, q


BEATS = [0]


def test_the_property_test_took_the_heartbeat_hook():
    assert BEATS[0] > 10
