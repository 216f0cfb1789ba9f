"""Vector timestamps, stable VTS and the SN-VTS plan (contract bullet *One-shot queries*)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.snapshot.vts import SnapshotPlan, StableVTS, VectorClock, vts_le, vts_max, vts_min


def test_vts_helpers():
    assert vts_le({"a": 1}, {"a": 1, "b": 0})
    assert not vts_le({"a": 2}, {"a": 1})
    assert not vts_le({"c": 0}, {"a": 1})  # missing component: nothing inserted yet
    assert vts_le({}, {})
    assert vts_min([{"a": 3, "b": 5}, {"a": 4, "b": 2, "c": 1}]) == {"a": 3, "b": 2}
    assert vts_min([]) == {}
    assert vts_max({"a": 3}, {"a": 1, "b": 2}) == {"a": 3, "b": 2}


def test_vector_clock_is_monotone():
    vc = VectorClock({"a": 3})
    assert vc.advance("a", 2) == 3 and vc.advance("a", 5) == 5 and vc.advance("b", 0) == 0
    assert vc.snapshot() == {"a": 5, "b": 0} and vc.get("c") is None


def test_stable_vts_is_componentwise_min_over_injectors():
    s = StableVTS(["n0", "n1"])
    assert s.report("n0", "S0", 5) == {}  # n1 has not inserted S0 yet
    assert s.report("n1", "S0", 4) == {"S0": 4}
    s.report("n1", "S1", 12)
    s.report("n0", "S1", 15)
    assert s.stable() == {"S0": 4, "S1": 12} and s.value("S1") == 12
    s.report("n1", "S0", 9)
    assert s.stable() == {"S0": 5, "S1": 12}
    # a new injector starts at the stable VTS: the stable VTS never goes back
    vc = s.add_injector("n2")
    assert vc.snapshot() == {"S0": 5, "S1": 12} and s.stable() == {"S0": 5, "S1": 12}
    s.report("n0", "S0", 7)
    assert s.stable()["S0"] == 5  # n2 has not passed 5
    assert s.injectors == ("n0", "n1", "n2")


def test_plan_one_batch_per_sn():
    plan = SnapshotPlan(max_unstable=2)
    stable = StableVTS(["n0", "n1"])
    assert plan.stable_sn == 0
    assert plan.assign("S0", 1) == 1
    assert plan.assign("S1", 1) == 2
    # two SNs wait for insertion: the bound keeps the next batches in the open SN 3
    assert plan.assign("S0", 2) == 3 and plan.assign("S0", 3) == 3
    assert [e.sn for e in plan.unstable] == [1, 2]
    assert plan.unstable[1].vts == {"S0": 1, "S1": 1}
    stable.report("n0", "S0", 1)
    assert plan.advance(stable.stable()) == 0  # n1 has not inserted S0 batch 1
    stable.report("n1", "S0", 1)
    assert plan.advance(stable.stable()) == 1
    assert plan.visible("S0", 1) and not plan.visible("S1", 1)
    # room again: SN 3 got sealed with S0 <= 3, S1 <= 1
    assert [e.sn for e in plan.unstable] == [2, 3]
    for n in ("n0", "n1"):
        stable.report(n, "S1", 1)
        stable.report(n, "S0", 3)
    assert plan.advance(stable.stable()) == 3
    assert plan.visible("S0", 3) and plan.stable_plan.vts == {"S0": 3, "S1": 1}
    assert plan.open_sn == 4 and plan.unstable == ()


def test_plan_groups_batches_and_seal():
    plan = SnapshotPlan(batches_per_sn=3)
    assert [plan.assign("S0", b) for b in (1, 2, 3, 4)] == [1, 1, 1, 2]
    assert plan.seal().vts == {"S0": 4}
    assert plan.seal() is None  # nothing open
    assert plan.advance({"S0": 3}) == 1
    assert plan.advance({"S0": 4}) == 2


def test_plan_new_stream_extends_the_plan():
    plan = SnapshotPlan()
    plan.assign("S0", 7)
    plan.assign("S2", 1)  # a stream added later
    assert plan.unstable[-1].vts == {"S0": 7, "S2": 1}
    assert plan.advance({"S0": 7}) == 1
    assert plan.advance({"S0": 7, "S2": 1}) == 2


def test_plan_validation():
    plan = SnapshotPlan()
    plan.assign("S0", 3)
    with pytest.raises(ValueError):
        plan.assign("S0", 3)
    with pytest.raises(ValueError):
        SnapshotPlan(max_unstable=0)


_op = st.one_of(
    st.tuples(st.just("dispatch"), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 2), st.integers(0, 2)),  # stream, injector
    st.tuples(st.just("advance"), st.just(0), st.just(0)),
    st.tuples(st.just("query"), st.just(0), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=80), st.integers(1, 3), st.integers(1, 3), st.integers(2, 3))
def test_vts_to_sn_is_monotone_atomic_and_prefix(ops, max_unstable, per_sn, n_inj):
    streams = ["S0", "S1", "S2"]
    injectors = [f"n{i}" for i in range(n_inj)]
    plan = SnapshotPlan(max_unstable=max_unstable, batches_per_sn=per_sn)
    stable = StableVTS(injectors)
    sn_of: dict[tuple[str, int], int] = {}
    dispatched = {s: 0 for s in streams}                        # batches 1..n dispatched
    inserted = {(s, i): 0 for s in streams for i in injectors}  # batches 1..k inserted by injector i
    last_sn = plan.stable_sn

    def check_read():
        nonlocal last_sn
        sn = plan.stable_sn
        assert sn >= last_sn  # monotonic reads
        last_sn = sn
        for s in streams:
            vis = [b for b in range(1, dispatched[s] + 1) if sn_of[(s, b)] <= sn]
            assert vis == list(range(1, len(vis) + 1))  # a prefix of the stream
            for b in vis:  # a visible batch is inserted everywhere (entirely visible)
                assert all(inserted[(s, i)] >= b for i in injectors)
                assert plan.visible(s, b)
            for b in range(len(vis) + 1, dispatched[s] + 1):
                assert not plan.visible(s, b)
        assert len(plan.unstable) <= max_unstable

    for kind, k, j in ops:
        s = streams[k]
        if kind == "dispatch":
            dispatched[s] += 1
            b = dispatched[s]
            sn = plan.assign(s, b)
            assert sn > plan.stable_sn
            assert all(sn >= sn_of[(s, x)] for x in range(1, b))
            sn_of[(s, b)] = sn
        elif kind == "insert":
            inj = injectors[j % n_inj]
            if inserted[(s, inj)] < dispatched[s]:
                inserted[(s, inj)] += 1
                stable.report(inj, s, inserted[(s, inj)])
        elif kind == "advance":
            plan.advance(stable.stable())
        check_read()

    # liveness: once everything is inserted everywhere, everything becomes visible
    for s in streams:
        for inj in injectors:
            while inserted[(s, inj)] < dispatched[s]:
                inserted[(s, inj)] += 1
                stable.report(inj, s, inserted[(s, inj)])
    plan.advance(stable.stable())
    check_read()
    if sn_of:
        assert plan.stable_sn >= max(sn_of.values())
