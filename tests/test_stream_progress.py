"""Stream progress P: admission rules, heartbeats, arrival clock (contract bullet *Time*)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.stream.progress import LateElementError, StreamClock


def test_no_progress_before_any_element():
    c = StreamClock("s")
    assert c.progress is None
    mask, p = c.admit(np.array([], dtype=np.int64))
    assert mask.size == 0 and p is None


def test_element_raises_progress_equal_allowed():
    c = StreamClock("s")
    mask, p = c.admit(np.array([1000, 1000, 1500]))
    assert mask.tolist() == [True, True, True] and p == 1500
    mask, p = c.admit(np.array([1500, 1500]))
    assert mask.all() and p == 1500
    assert c.accepted == 5 and c.rejected == 0


def test_late_element_rejected_and_counted_within_batch():
    c = StreamClock("s")
    mask, p = c.admit(np.array([100, 300, 200, 300, 250, 400]))
    # 200 < P=300 and 250 < P=300 rejected; rejected elements do not move P
    assert mask.tolist() == [True, True, False, True, False, True]
    assert p == 400
    assert c.rejected == 2 and c.accepted == 4
    mask, p = c.admit([399, 400])
    assert mask.tolist() == [False, True] and c.rejected == 3


def test_rejected_element_does_not_raise_progress_later_in_batch():
    c = StreamClock("s")
    c.heartbeat(1000)
    mask, p = c.admit([500, 900, 1000])
    assert mask.tolist() == [False, False, True] and p == 1000


def test_check_raises_clear_error():
    c = StreamClock("s")
    c.admit([10])
    with pytest.raises(LateElementError) as ei:
        c.check([20, 5, 30])
    e = ei.value
    assert e.rejected == 1 and e.first_tau == 5 and e.progress == 20 and e.kind == "late_element"
    assert c.progress == 30  # the accepted ones are admitted
    assert "rejected" in str(e)


def test_heartbeat_raises_and_lower_is_noop():
    c = StreamClock("s")
    assert c.heartbeat(500) == 500
    assert c.last_first == 500
    assert c.heartbeat(300) == 500  # lower: no change, no error
    assert c.last_first is None
    assert c.heartbeat(500) == 500
    assert c.last_first == 500
    mask, _ = c.admit([499, 500])
    assert mask.tolist() == [False, True]
    assert c.heartbeats == 3


def test_last_first_is_first_accepted_element():
    c = StreamClock("s")
    c.admit([50])
    c.admit([10, 60, 90])
    assert c.last_first == 60
    c.admit([1, 2])
    assert c.last_first is None
    assert c.events == 2


def test_rejects_non_integer_timestamps():
    c = StreamClock("s")
    with pytest.raises(TypeError):
        c.admit(np.array([1.5]))


def test_arrival_clock_stamps_with_wall_clock_monotone():
    now = [1000]
    c = StreamClock("a", clock="arrival", now_ms=lambda: now[0])
    assert c.progress == 1000  # follows the wall clock
    stamps, mask, p = c.assign([5, 6, 7])  # given timestamps ignored
    assert stamps.tolist() == [1000, 1000, 1000] and mask.all() and p == 1000
    now[0] = 900  # wall clock goes back: stamps stay monotone
    stamps, _, p = c.assign(n=2)
    assert stamps.tolist() == [1000, 1000] and p == 1000
    now[0] = 2500
    assert c.progress == 2500
    assert c.heartbeat(10_000) == 2500  # heartbeats ignored
    with pytest.raises(ValueError):
        c.admit([1])


def test_event_assign_matches_admit():
    c = StreamClock("s")
    stamps, mask, p = c.assign([3, 1, 4])
    assert stamps.tolist() == [3, 1, 4] and mask.tolist() == [True, False, True] and p == 4


def test_bad_clock_mode():
    with pytest.raises(ValueError):
        StreamClock("s", clock="wall")


def _reference(p, events):
    """Element by element reference of the admission rules."""
    out = []
    rejected = 0
    for kind, vals in events:
        if kind == "hb":
            if p is None or vals >= p:
                p = vals
            out.append(p)
            continue
        mask = []
        for tau in vals:
            ok = p is None or tau >= p
            mask.append(ok)
            if ok:
                p = tau
            else:
                rejected += 1
        out.append((mask, p))
    return out, rejected


_events = st.lists(
    st.one_of(
        st.tuples(st.just("hb"), st.integers(0, 2000)),
        st.tuples(st.just("el"), st.lists(st.integers(0, 2000), max_size=12)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(_events)
def test_admission_matches_elementwise_reference(events):
    c = StreamClock("s")
    expected, rejected = _reference(None, events)
    for (kind, vals), exp in zip(events, expected, strict=True):
        if kind == "hb":
            assert c.heartbeat(vals) == exp
        else:
            mask, p = c.admit(np.array(vals, dtype=np.int64))
            assert mask.tolist() == exp[0]
            assert p == exp[1]
    assert c.rejected == rejected


def test_restore_sets_progress_and_never_lowers_it():
    from engine.stream.progress import StreamClock

    c = StreamClock("s")
    c.restore(5000)
    assert c.progress == 5000
    c.restore(100)
    assert c.progress == 5000
    mask, p = c.admit(np.array([4999, 5000], dtype=np.int64))
    assert mask.tolist() == [False, True] and p == 5000
