"""Retained result events are not tracked by the cyclic GC (a full collection would walk every
retained event of every query), and readers still get ResultEvent objects."""

from __future__ import annotations

import gc

from engine.stream.resultlog import ResultEvent, ResultLog


def test_retained_events_leave_the_gc_and_read_back_whole():
    log = ResultLog(retain=50, step=10)
    for t in range(0, 1000, 10):
        log.append(t, b'{"x":%d}' % t)
    log.append_idle(1000, 1040, 990)
    gc.collect()
    assert len(log) == 50
    assert not any(gc.is_tracked(ev) for ev in log._events)
    got = log.since(980)
    assert all(isinstance(ev, ResultEvent) for ev in got)
    assert [(ev.id, ev.event) for ev in got] == [(990, "result"), (1040, "idle")]
    assert got[0].data == b'{"x":990}' and got[1].start == 1000 and got[1].same_as == 990
    gap = log.since(100)   # dropped: a gap first
    assert gap[0].event == "gap" and gap[1].id == 510
