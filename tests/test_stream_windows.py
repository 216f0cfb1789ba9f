"""Instants, first instant, triggers and window selection (contract bullets *Instants*, *Output*)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.stream.progress import StreamClock
from engine.stream.windows import (
    Trigger,
    Window,
    align_down,
    count_window_slice,
    first_instant,
    instants_between,
    is_aligned,
    leaves_at,
    query_step,
    time_bounds,
    time_window_mask,
    time_window_slice,
    window_member,
)

# -- windows ---------------------------------------------------------------


def test_window_constructors_and_validation():
    assert Window.time(10_000, 2_000) == Window(10_000, 2_000, None)
    assert Window.time(5_000) == Window(5_000, 5_000, None)  # TUMBLING
    c = Window.count(100)
    assert c.triples == 100 and c.step_ms == 1000 and c.range_ms is None and c.is_count
    assert Window.count(5, 250).step_ms == 250
    for bad in [(None, 1000, None), (1000, 1000, 5), (0, 1000, None), (1000, 0, None), (None, 10, 0)]:
        with pytest.raises(ValueError):
            Window(*bad)


def test_query_step_is_smallest_step():
    assert query_step([Window.time(10_000, 3_000), Window.time(2_000, 1_000), Window.count(5, 7)]) == 7
    with pytest.raises(ValueError):
        query_step([])


@pytest.mark.parametrize("tau0,step,expected", [
    (0, 1000, 0), (1, 1000, 1000), (999, 1000, 1000), (1000, 1000, 1000), (1001, 1000, 2000),
    (-1, 1000, 0), (-1000, 1000, -1000), (-1001, 1000, -1000),
    (1_700_000_000_123, 60_000, 1_700_000_040_000),
])
def test_first_instant_is_ceiling_aligned_to_epoch(tau0, step, expected):
    assert first_instant(tau0, step) == expected
    assert is_aligned(expected, step)


def test_align_and_instants_between():
    assert align_down(1999, 1000) == 1000 and align_down(-1, 1000) == -1000
    assert list(instants_between(1000, 3001, 1000)) == [1000, 2000, 3000]
    assert list(instants_between(1000, 3000, 1000)) == [1000, 2000]  # P > t required
    assert list(instants_between(1000, 1000, 1000)) == []


def test_time_window_boundaries():
    w = Window.time(10_000, 1_000)
    t = 50_000
    assert time_bounds(w, t) == (40_000, 50_000)
    tau = np.array([39_999, 40_000, 40_001, 45_000, 50_000, 50_001])
    # tau = t - range excluded, tau = t included
    assert time_window_mask(tau, w, t).tolist() == [False, False, True, True, True, False]
    assert time_window_slice(tau, w, t) == (2, 5)


def test_count_window_last_n_with_ties_by_arrival():
    tau = np.array([1, 2, 2, 2, 3, 5])
    assert count_window_slice(tau, 2, 2) == (2, 4)   # the last two of the three tau=2
    assert count_window_slice(tau, 10, 3) == (0, 5)  # fewer than n available
    assert count_window_slice(tau, 3, 0) == (0, 0)   # nothing with tau <= t
    assert count_window_slice(tau, 1, 4) == (4, 5)


def test_window_member():
    ws = [Window.time(10_000, 1_000), Window.time(30_000, 5_000), Window.count(5)]
    assert window_member(ws, 60_000) == {"start": 30_000, "end": 60_000}
    assert window_member([Window.count(5)], 60_000, oldest_count_tau=41_234) == {"start": 41_234, "end": 60_000}
    assert window_member([Window.count(5)], 60_000) == {"start": 60_000, "end": 60_000}


# -- triggers --------------------------------------------------------------


def test_first_instant_from_lowest_progress_at_registration():
    tr = Trigger(1000, ["a", "b"], {"a": 5_500, "b": 3_200})
    assert not tr.pending and tr.next_instant == 4_000
    # instant t ready once every stream has P > t
    assert tr.ready({"a": 5_500, "b": 4_000}) == []
    assert tr.ready({"a": 5_500, "b": 4_001}) == [4_000]
    assert tr.ready({"a": 5_500, "b": 4_001}) == []  # exactly once
    assert tr.ready({"a": 7_000, "b": 6_500}) == [5_000, 6_000]
    assert tr.issued == 3


def test_first_instant_aligned_progress():
    tr = Trigger(1000, ["a"], {"a": 3_000})
    assert tr.next_instant == 3_000
    assert tr.ready({"a": 3_000}) == []
    assert tr.ready({"a": 3_001}) == [3_000]


def test_pending_until_first_timestamp_after_registration():
    tr = Trigger(1000, ["a", "b"], {"a": 9_000, "b": None})
    assert tr.pending and tr.ready({"a": 20_000, "b": None}) == []
    tr.observe("c", 100)  # not one of the query's streams
    assert tr.pending
    tr.observe("b", 2_500)  # first timestamp any of them receives
    assert tr.next_instant == 3_000
    tr.observe("a", 100)  # later events do not move the first instant
    assert tr.next_instant == 3_000
    assert tr.ready({"a": 9_000, "b": 5_000}) == [3_000, 4_000]


def test_pending_first_timestamp_may_come_from_stream_with_progress():
    tr = Trigger(1000, ["a", "b"], {"a": 9_000})
    tr.observe("a", 9_400)
    assert tr.next_instant == 10_000
    assert tr.ready({"a": 12_000, "b": None}) == []  # b has no progress: nothing ready
    assert tr.ready({"a": 12_000, "b": 11_000}) == [10_000]


def test_pending_via_clocks_element_batch_first_timestamp():
    a, b = StreamClock("a"), StreamClock("b")
    a.admit([7_000])
    tr = Trigger(1000, ["a", "b"], {"a": a.progress, "b": b.progress})
    b.admit([2_100, 8_000])  # P_b = 8000 but the first timestamp received is 2100
    tr.observe("b", b.last_first)
    assert tr.next_instant == 3_000
    assert tr.ready({"a": a.progress, "b": b.progress}) == [3_000, 4_000, 5_000, 6_000]


def test_empty_windows_and_idle_stream_advanced_by_heartbeats():
    a, b = StreamClock("a"), StreamClock("b")
    a.admit([1_000])
    b.heartbeat(1_000)
    tr = Trigger.for_windows({"a": Window.time(2_000, 500), "b": Window.time(10_000, 1_000)},
                             {"a": a.progress, "b": b.progress})
    assert tr.step == 500 and tr.next_instant == 1_000
    a.admit([4_200])
    assert tr.ready({"a": a.progress, "b": b.progress}) == []  # b idle
    b.heartbeat(3_000)
    assert tr.ready({"a": a.progress, "b": b.progress}) == [1_000, 1_500, 2_000, 2_500]
    b.heartbeat(10_000)  # no data at all in b: instants still fire, windows empty
    assert tr.ready({"a": a.progress, "b": b.progress}) == [3_000, 3_500, 4_000]
    a.heartbeat(6_001)
    assert tr.ready({"a": a.progress, "b": b.progress}) == [4_500, 5_000, 5_500, 6_000]


def test_ready_limit_chunks_without_losing_instants():
    tr = Trigger(10, ["a"], {"a": 0})
    got = []
    while True:
        chunk = tr.ready({"a": 1_000}, limit=7)
        if not chunk:
            break
        got += chunk
    assert got == list(range(0, 1_000, 10))
    assert tr.ready({"a": 1_000}, limit=0) == []


def test_negative_times():
    tr = Trigger(1000, ["a"], {"a": -2_500})
    assert tr.next_instant == -2_000
    assert tr.ready({"a": 1}) == [-2_000, -1_000, 0]


def test_trigger_validation():
    with pytest.raises(ValueError):
        Trigger(0, ["a"], {})
    with pytest.raises(ValueError):
        Trigger(10, [], {})


# -- property: random streams + heartbeats ---------------------------------

_op = st.tuples(
    st.sampled_from(["el", "hb"]),
    st.integers(0, 2),                     # stream
    st.lists(st.integers(0, 20_000), min_size=1, max_size=5),
)


@settings(max_examples=300, deadline=None)
@given(
    pre=st.lists(_op, max_size=8),
    post=st.lists(_op, max_size=40),
    step=st.sampled_from([1, 7, 250, 1000, 3000]),
    nstreams=st.integers(1, 3),
    limit=st.one_of(st.none(), st.integers(1, 5)),
)
def test_triggered_instants_are_exactly_the_aligned_instants(pre, post, step, nstreams, limit):
    names = [f"s{i}" for i in range(3)]
    clocks = {n: StreamClock(n) for n in names}
    query_streams = names[:nstreams]

    def apply(op):
        kind, k, vals = op
        c = clocks[names[k]]
        if kind == "el":
            c.admit(np.array(vals, dtype=np.int64))
        else:
            c.heartbeat(vals[0])
        return names[k], c.last_first

    for op in pre:
        apply(op)
    at_reg = {n: clocks[n].progress for n in query_streams}
    tr = Trigger(step, query_streams, at_reg)

    # reference first instant
    if all(v is not None for v in at_reg.values()):
        tau0 = min(at_reg.values())
    else:
        tau0 = None
    got: list[int] = []
    for op in post:
        name, first = apply(op)
        if tau0 is None and name in query_streams and first is not None:
            tau0 = first
        tr.observe(name, first)
        prog = {n: clocks[n].progress for n in query_streams}
        got += tr.ready(prog, limit=limit)
    prog = {n: clocks[n].progress for n in query_streams}
    while True:  # drain what a limit held back
        more = tr.ready(prog, limit=limit)
        if not more:
            break
        got += more

    if tau0 is None or any(v is None for v in prog.values()):
        assert got == []
        return
    first = -(-tau0 // step) * step
    lowest = min(prog.values())
    expected = [t for t in range(first, lowest) if t % step == 0]
    assert got == expected
    assert all(t < p for t in got for p in prog.values())
    assert len(set(got)) == len(got)


def test_window_sliding_and_leaves_at_match_the_bounds():
    assert Window.time(3000, 1000).is_sliding and not Window.time(3000).is_sliding
    assert Window.count(5).is_sliding and Window.count(5, step_ms=10_000).is_sliding
    assert not Window.time(1000, 5000).is_sliding   # sampling: instants never share content
    w = Window.time(3000, 1000)
    for tau in (0, 999, 1000, 12_345):
        t = leaves_at(w, tau)
        assert time_window_mask(np.array([tau]), w, t - 1)[0]   # still in at the instant before
        assert not time_window_mask(np.array([tau]), w, t)[0]   # gone from then on
    with pytest.raises(ValueError):
        leaves_at(Window.count(3), 0)
