"""The idle worker's read-ahead of the next maintained instant (:meth:`Scheduler._touch_next`,
:meth:`InstantEvaluator.touch`, issue 13): taken on the publishes that make no instant ready
(a tumbling window's query waits several of them), and it changes nothing -- the events with
and without it are byte-identical (ids, kinds, data), and equal as rows to those of the path
without maintenance."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.stream.continuous import InstantEvaluator
from engine.stream.manager import StreamManager
from engine.stream.scheduler import Scheduler
from tests.test_stream_maintained_instant import _Q, _static_lines, _steady, periods
from tests.test_stream_tiny_gen import EX, STATIC, _rows, queries


def _run(q: str, per: list, window: str, how: str, monkeypatch) -> tuple[list, int]:
    """``q`` over stream ``a``: one POST and one heartbeat per period (second). ``how``: "touch"
    (the read-ahead on), "plain" (off), "off" (no maintenance, no generated code). Returns the
    events ``(id, kind, data)`` and the touches that found a maintained instant to read."""
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", how != "off")
    monkeypatch.setattr(InstantEvaluator, "GENERATED", how != "off")
    touched = [0]
    real = Scheduler._touch_next
    if how == "plain":
        monkeypatch.setattr(Scheduler, "_touch_next", lambda self: None)
    else:
        touch = InstantEvaluator.touch

        def spy(self, state, t):
            out = touch(self, state, t)
            touched[0] += out is not None
            return out

        monkeypatch.setattr(InstantEvaluator, "touch", spy)
        monkeypatch.setattr(Scheduler, "_touch_next", real)
    db = Database()
    m = StreamManager(db)
    try:
        db.load_data("".join(_static_lines()).encode(), "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        text = q.replace(" WHERE", f" FROM <{STATIC}> FROM STREAM <{EX}a> [{window}] WHERE", 1)
        m.register_query(f"REGISTER QUERY q AS {text}")
        for k, els in enumerate(per):
            lines = [{"s": s, "p": p, "o": o, "t": 1000 * k + dt}
                     for dt, xs in sorted(els, key=lambda e: e[0]) for s, p, o in xs]
            if lines:
                assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0
            m.heartbeat("a", 1000 * (k + 1))
            assert m.drain(30)
        events = [(e.id, e.event, bytes(e.data)) for e in m.log("q").since(None, from_t=-1)]
        return events, touched[0]
    finally:
        m.close()
        db.close()


def _compare(q: str, per: list, window: str, monkeypatch) -> int:
    on, n = _run(q, per, window, "touch", monkeypatch)
    plain, _ = _run(q, per, window, "plain", monkeypatch)
    off, _ = _run(q, per, window, "off", monkeypatch)
    assert on == plain, q   # byte for byte
    assert [(i, k) for i, k, _ in on] == [(i, k) for i, k, _ in off]
    for (i, k, a), (_, _, b) in zip(on, off, strict=True):
        if k == "result":
            assert _rows(a) == _rows(b), (q, i)
    return n


@pytest.mark.parametrize("window", ["RANGE 3s STEP 3s", "RANGE 4s STEP 2s"])
def test_the_touch_is_taken_between_instants_and_changes_no_event(window, monkeypatch):
    """A steady stream, a heartbeat per second: between two instants of a window stepping 2-3 s
    the worker is woken by publishes that make nothing ready, and reads the next instant's
    state ahead; the events are those without the read-ahead."""
    per = _steady(12)
    n = _compare(_Q, per, window, monkeypatch)
    assert n >= 3, n


SEEN = [0]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=periods, window=st.sampled_from(["RANGE 2s STEP 2s", "RANGE 3s STEP 3s",
                                                         "RANGE 3s STEP 1s"]))
def test_events_equal_with_and_without_the_touch(q, per, window, monkeypatch):
    SEEN[0] += _compare(q, per, window, monkeypatch)


def test_the_property_test_touched():
    assert SEEN[0] > 0
