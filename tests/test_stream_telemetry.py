"""engine/stream/telemetry.py: a hook reaches only its owner's sinks, never raises into the
engine, and holds a sink's object weakly (a discarded server keeps nothing alive)."""

from __future__ import annotations

import gc
import weakref

from engine.stream import telemetry


class Owner:
    pass


class Sink:
    def __init__(self):
        self.seen = []

    def hear(self, query, seconds):
        self.seen.append((query, seconds))


def test_only_the_owners_sinks_hear_it():
    a, b = Owner(), Owner()
    sa, sb = Sink(), Sink()
    telemetry.attach(a, sa.hear)
    telemetry.attach(b, sb.hear)
    telemetry.evaluation(a, "q1", 2.5)
    telemetry.evaluation(a, "q1", None)  # a failed instant: no duration
    telemetry.evaluation(Owner(), "q2", 1.0)  # nobody listens
    assert sa.seen == [("q1", 0.0025)] and sb.seen == []
    telemetry.detach(a, sa.hear)
    telemetry.evaluation(a, "q1", 1.0)
    assert sa.seen == [("q1", 0.0025)]


def test_a_failing_sink_does_not_fail_the_engine():
    o = Owner()

    def boom(query, seconds):
        raise RuntimeError("metrics broke")

    telemetry.attach(o, boom)
    telemetry.evaluation(o, "q", 1.0)  # no exception


def test_sinks_are_held_weakly():
    o = Owner()
    s = Sink()
    s.owner = o  # the sink refers to its owner, as the server's metrics do (through the manager)
    telemetry.attach(o, s.hear)
    gone_sink, gone_owner = weakref.ref(s), weakref.ref(o)
    del s, o
    gc.collect()
    assert gone_sink() is None and gone_owner() is None
