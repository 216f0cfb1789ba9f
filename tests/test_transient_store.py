"""Transient store + stream index: window reads, set semantics, GC and memory budget
(contract bullets *Instants* and *Dataset*)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.stream.progress import StreamClock
from engine.stream.stream_index import StreamIndex
from engine.stream.transient import (
    BYTES_PER_TRIPLE,
    NO_READERS,
    TransientStore,
    TransientStoreFull,
    WindowEvicted,
    combine_horizons,
    unique_rows,
)
from engine.stream.windows import Trigger, Window, query_step


def rows(n, start=0):
    a = np.arange(start, start + n, dtype=np.int64)
    return np.stack([a, a + 1000, a + 2000], axis=1)


def brute(all_spo, all_tau, window, t):
    """Reference window content as a set of tuples."""
    if window.range_ms is not None:
        m = (all_tau > t - window.range_ms) & (all_tau <= t)
        sel = all_spo[m]
    else:
        idx = np.nonzero(all_tau <= t)[0][-window.triples:] if window.triples else []
        sel = all_spo[idx]
    return {tuple(r) for r in sel.tolist()}


def as_set(arr):
    return {tuple(r) for r in arr.tolist()}


# -- basics ------------------------------------------------------------------


def test_append_read_and_index_entries():
    ts = TransientStore("s", slice_triples=4)
    assert ts.append_rows(rows(3), [10, 10, 20]) == 0
    assert ts.append(*rows(6, 3).T, tau=[20, 25, 30, 30, 31, 40]) == 1
    assert ts.append_rows(rows(2, 9), [40, 50], batch=7) == 7
    assert ts.n_triples == 11 and ts.n_slices == 3  # 4 + 4 + 4-slot slices
    assert len(ts.index) == 3
    e = ts.index.entry(1)
    assert e == {"batch": 1, "tau_min": 20, "tau_max": 40, "seq_start": 3, "seq_end": 9,
                 "slice_no": 0, "offset": 3}
    spo, tau = ts.read(0, 11)
    assert spo.tolist() == rows(11).tolist()
    assert tau.tolist() == [10, 10, 20, 20, 25, 30, 30, 31, 40, 40, 50]
    assert ts.append_rows(np.zeros((0, 3)), []) is None


def test_time_window_boundaries_via_store():
    ts = TransientStore("s", slice_triples=2)
    ts.append_rows(rows(6), [39_999, 40_000, 40_001, 45_000, 50_000, 50_001])
    w = Window.time(10_000, 1_000)
    spo, tau = ts.window_arrays(w, 50_000)
    assert tau.tolist() == [40_001, 45_000, 50_000]  # t - range excluded, t included
    assert ts.oldest_tau(w, 50_000) == 40_001
    assert ts.oldest_tau(w, 10_000) is None


def test_count_window_last_n_ties_by_arrival():
    ts = TransientStore("s", slice_triples=3)
    ts.append_rows(rows(6), [1, 2, 2, 2, 3, 5])
    spo, tau = ts.window_arrays(Window.count(2), 2)
    assert spo[:, 0].tolist() == [2, 3] and tau.tolist() == [2, 2]
    spo, _ = ts.window_arrays(Window.count(10), 3)
    assert spo[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert ts.window_arrays(Window.count(3), 0)[0].shape == (0, 3)


def test_window_content_is_a_set():
    ts = TransientStore("s")
    r = np.array([[1, 2, 3], [1, 2, 3], [4, 5, 6], [1, 2, 3]])
    ts.append_rows(r, [1, 2, 3, 4])
    out = ts.window_triples(Window.time(100, 100), 10)
    assert out.tolist() == [[1, 2, 3], [4, 5, 6]]
    # RANGE TRIPLES 3 holds 3 triples, of which 2 distinct
    assert ts.window_triples(Window.count(3), 10).tolist() == [[1, 2, 3], [4, 5, 6]]
    assert ts.window_triples(Window.count(1), 10).tolist() == [[1, 2, 3]]


def test_unique_rows():
    assert unique_rows(np.zeros((0, 3), dtype=np.int64)).shape == (0, 3)
    r = np.array([[3, 1, 1], [1, 2, 3], [3, 1, 1], [1, 2, 2]])
    assert unique_rows(r).tolist() == [[3, 1, 1], [1, 2, 3], [1, 2, 2]]  # first-arrival order


def test_unique_rows_hash_collision_fallback(monkeypatch):
    import engine.stream.transient as tr
    monkeypatch.setattr(tr, "_H1", np.uint64(0))
    monkeypatch.setattr(tr, "_H2", np.uint64(0))
    monkeypatch.setattr(tr, "_H3", np.uint64(0))  # every row hashes to 0
    r = np.array([[3, 1, 1], [1, 2, 3], [3, 1, 1], [1, 2, 2], [1, 2, 3]])
    assert unique_rows(r).tolist() == [[3, 1, 1], [1, 2, 3], [1, 2, 2]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2), st.integers(0, 2**62)), max_size=40))
def test_unique_rows_matches_python(rs):
    arr = np.array(rs, dtype=np.int64).reshape(-1, 3)
    seen = list(dict.fromkeys(map(tuple, arr.tolist())))
    assert [tuple(r) for r in unique_rows(arr).tolist()] == seen


def test_order_validation():
    ts = TransientStore("s")
    with pytest.raises(ValueError):
        ts.append_rows(rows(2), [5, 4])
    ts.append_rows(rows(2), [5, 6], batch=3)
    with pytest.raises(ValueError):
        ts.append_rows(rows(1), [5])  # below the last stored timestamp
    with pytest.raises(ValueError):
        ts.append_rows(rows(1), [7], batch=3)  # batch ids increase
    with pytest.raises(ValueError):
        ts.append(np.arange(2), np.arange(2), np.arange(3), [7, 7])
    assert ts.n_triples == 2
    with pytest.raises(IndexError):
        ts.read(0, 5)


def test_large_batch_spanning_slices_and_reads_across_slices():
    ts = TransientStore("s", slice_triples=8)
    ts.append_rows(rows(5), np.arange(5))
    ts.append_rows(rows(30, 5), np.arange(5, 35))
    spo, tau = ts.window_arrays(Window.time(20, 1), 30)
    assert tau.tolist() == list(range(11, 31))
    assert spo[:, 0].tolist() == list(range(11, 31))


# -- GC ------------------------------------------------------------------------


def test_gc_frees_only_unreachable_slices():
    ts = TransientStore("s", slice_triples=4)
    for k in range(5):
        ts.append_rows(rows(4, 4 * k), [10 * k] * 4)  # slice k holds tau 10k
    before = ts.bytes_used
    assert ts.gc(None) == 0 and ts.n_slices == 5
    freed = ts.gc(19)  # tau <= 19 unreachable: slices 0 and 1
    assert freed == 2 * 4 * BYTES_PER_TRIPLE and ts.bytes_used < before
    assert ts.n_slices == 3 and ts.live_start == 8 and ts.freed_tau == 10
    assert len(ts.index) == 3
    w = Window.time(15, 1)
    assert ts.window_arrays(w, 30, strict=True)[1].tolist() == [20] * 4 + [30] * 4
    with pytest.raises(WindowEvicted):
        ts.window_arrays(Window.time(25, 1), 30, strict=True)
    # non-strict reads hold what is retained
    assert ts.window_arrays(Window.time(25, 1), 30)[1].tolist() == [20] * 4 + [30] * 4
    with pytest.raises(WindowEvicted):
        ts.window_arrays(Window.count(14), 40, strict=True)
    assert len(ts.window_arrays(Window.count(14), 40)[0]) == 12  # seq 8..19 retained
    assert len(ts.window_arrays(Window.count(12), 40, strict=True)[0]) == 12
    with pytest.raises(WindowEvicted):
        ts.read(0, 9)
    ts.gc(NO_READERS)
    assert ts.n_slices == 0 and ts.n_triples == 0
    assert ts.window_arrays(Window.time(1000, 1), 1000)[0].shape == (0, 3)
    ts.append_rows(rows(1), [40])
    assert ts.window_arrays(Window.time(10, 1), 40)[1].tolist() == [40]


def test_gc_with_batch_split_over_freed_slice():
    ts = TransientStore("s", slice_triples=4)
    ts.append_rows(rows(2), [1, 2])
    ts.append_rows(rows(6, 2), [3, 4, 5, 6, 7, 8])  # slots 2..3 of slice 0, then slice 1
    ts.gc(4)  # slice 0 (tau <= 4) freed; the second batch's entry stays
    assert ts.live_start == 4 and len(ts.index) == 1
    assert ts.window_arrays(Window.time(3, 1), 7, strict=True)[1].tolist() == [5, 6, 7]
    assert ts.window_arrays(Window.count(2), 6, strict=True)[1].tolist() == [5, 6]


def test_horizons():
    ts = TransientStore("s", slice_triples=4)
    ts.append_rows(rows(6), [1, 2, 2, 3, 5, 8])
    assert ts.horizon_for(Window.time(10, 1), 100) == 90
    assert ts.horizon_for(Window.time(10, 1), None) is None
    # last 2 with tau <= 5: seq 3 (tau 3) and 4 -> everything with tau <= 2 is free
    assert ts.horizon_for(Window.count(2), 5) == 2
    assert ts.horizon_for(Window.count(100), 5) == 0
    assert combine_horizons([]) == NO_READERS
    assert combine_horizons([5, 3, 9]) == 3
    assert combine_horizons([5, None]) is None
    empty = TransientStore("e")
    assert empty.horizon_for(Window.count(2), 5) is None


# -- budget / backpressure ---------------------------------------------------------


def test_budget_exceeded_raises_backpressure_and_stores_nothing():
    ts = TransientStore("s", budget_bytes=3 * 4 * BYTES_PER_TRIPLE, slice_triples=4)
    for k in range(3):
        ts.append_rows(rows(4, 4 * k), [k] * 4)
    state = (ts.n_triples, ts.n_slices, len(ts.index))
    with pytest.raises(TransientStoreFull) as ei:
        ts.append_rows(rows(4, 12), [3] * 4)
    assert ei.value.kind == "backpressure" and "full" in str(ei.value)
    assert (ts.n_triples, ts.n_slices, len(ts.index)) == state
    ts.gc(0)  # a query moved on: slice 0 is unreachable
    ts.append_rows(rows(4, 12), [3] * 4)
    assert ts.n_triples == 12


def test_budget_runs_gc_with_horizon_callback():
    horizon = {"h": None}
    ts = TransientStore("s", budget_bytes=2 * 4 * BYTES_PER_TRIPLE, slice_triples=4,
                        horizon=lambda: horizon["h"])
    ts.append_rows(rows(4), [1] * 4)
    ts.append_rows(rows(4, 4), [2] * 4)
    with pytest.raises(TransientStoreFull):  # callback says: keep everything
        ts.append_rows(rows(4, 8), [3] * 4)
    horizon["h"] = 1
    ts.append_rows(rows(4, 8), [3] * 4)
    assert ts.live_start == 4 and ts.n_triples == 8
    assert ts.stats()["gc_runs"] >= 2


def test_batch_larger_than_slice_within_budget():
    ts = TransientStore("s", budget_bytes=100 * BYTES_PER_TRIPLE, slice_triples=64)
    ts.append_rows(rows(90), np.arange(90))  # one slice of exactly 90 slots
    assert ts.n_triples == 90
    with pytest.raises(TransientStoreFull):
        ts.append_rows(rows(20, 90), np.arange(90, 110))


def test_stream_index_growth_and_drop():
    ix = StreamIndex(capacity=4)
    for b in range(100):
        ix.append(b, b, b, 2 * b, 2 * b + 2, b // 8, 0)
    assert len(ix) == 100 and ix.first_after(49) == 50 and ix.last_at_or_before(49) == 49
    assert ix.drop_before(120) == 60
    assert len(ix) == 40 and int(ix.batch[0]) == 60 and ix.find_batch(70) == 10
    assert ix.find_batch(3) == -1
    assert ix.batch_upto(70) == 70 and ix.batch_upto(59) is None
    with pytest.raises(ValueError):
        ix.append(99, 200, 200, 200, 201, 0, 0)
    with pytest.raises(ValueError):
        ix.append(200, 0, 0, 200, 201, 0, 0)


# -- properties ----------------------------------------------------------------

_batches = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 30)),  # (n triples, tau increment)
    min_size=1, max_size=25,
)


def _fill(ts, batches, rng):
    tau_now = 0
    all_spo, all_tau = [], []
    for n, inc in batches:
        tau_now += inc
        incs = rng.integers(0, 3, size=n)
        tau = tau_now + np.cumsum(incs) if n else np.zeros(0, dtype=np.int64)
        if n:
            tau_now = int(tau[-1])
        spo = rng.integers(0, 4, size=(n, 3))  # small ids: many duplicate triples
        ts.append_rows(spo, tau)
        all_spo.append(spo.reshape(-1, 3))
        all_tau.append(np.asarray(tau, dtype=np.int64))
    return np.concatenate(all_spo).astype(np.int64), np.concatenate(all_tau)


_windows = st.one_of(
    st.builds(Window.time, st.integers(1, 80), st.integers(1, 40)),
    st.builds(Window.count, st.integers(1, 30), st.integers(1, 40)),
)


@settings(max_examples=200, deadline=None)
@given(_batches, st.lists(st.tuples(_windows, st.integers(-10, 500)), min_size=1, max_size=10),
       st.integers(1, 9), st.integers(0, 2**31))
def test_window_content_equals_brute_force(batches, probes, slice_triples, seed):
    rng = np.random.default_rng(seed)
    ts = TransientStore("s", slice_triples=slice_triples)
    all_spo, all_tau = _fill(ts, batches, rng)
    for w, t in probes:
        assert as_set(ts.window_triples(w, t, strict=True)) == brute(all_spo, all_tau, w, t)
        spo, tau = ts.window_arrays(w, t)
        assert np.all(np.diff(tau) >= 0)
        if w.range_ms is not None:
            assert np.all((tau > t - w.range_ms) & (tau <= t))
        else:
            assert len(tau) == min(w.triples, int(np.count_nonzero(all_tau <= t)))


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("el"), st.integers(0, 1), st.lists(st.integers(0, 40), min_size=1, max_size=6)),
        st.tuples(st.just("hb"), st.integers(0, 1), st.integers(0, 60).map(lambda x: [x])),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(
    _ops,
    st.lists(st.dictionaries(st.sampled_from(["a", "b"]), _windows, min_size=1), min_size=1, max_size=3),
    st.integers(1, 6),
    st.integers(0, 2**31),
)
def test_gc_never_frees_what_a_registered_window_will_read(ops, queries, slice_triples, seed):
    """Clocks admit elements, stores hold accepted triples, triggers fire instants; after every
    event the GC runs with the combined horizon of the registered windows; every window read
    (strict) must equal the brute-force filter over all accepted triples."""
    rng = np.random.default_rng(seed)
    names = ["a", "b"]
    clocks = {n: StreamClock(n) for n in names}
    stores = {n: TransientStore(n, slice_triples=slice_triples) for n in names}
    accepted = {n: ([], []) for n in names}
    tau_now = {n: 0 for n in names}
    registered = []  # (windows, trigger)
    for q in queries:
        registered.append((q, Trigger(query_step(q.values()), list(q), {})))

    def horizon(n):
        hs = []
        for q, tr in registered:
            if n in q:
                hs.append(stores[n].horizon_for(q[n], tr.next_instant))
        return combine_horizons(hs)

    for kind, k, vals in ops:
        n = names[k]
        c = clocks[n]
        if kind == "el":
            tau = np.array(vals, dtype=np.int64) + tau_now[n] - 10  # some late ones
            mask, _ = c.admit(tau)
            good = tau[mask]
            if len(good):
                tau_now[n] = int(good[-1])
            spo = rng.integers(0, 5, size=(len(good), 3))
            stores[n].append_rows(spo, good)
            accepted[n][0].append(spo)
            accepted[n][1].append(good)
        else:
            c.heartbeat(vals[0] + tau_now[n])
        for _q, tr in registered:
            tr.observe(n, c.last_first)
        progress = {m: clocks[m].progress for m in names}
        for q, tr in registered:
            for t in tr.ready(progress):
                for m, w in q.items():
                    a_spo = np.concatenate(accepted[m][0]) if accepted[m][0] else np.zeros((0, 3), np.int64)
                    a_tau = np.concatenate(accepted[m][1]) if accepted[m][1] else np.zeros(0, np.int64)
                    got = stores[m].window_triples(w, t, strict=True)
                    assert as_set(got) == brute(a_spo, a_tau, w, t)
        for m in names:
            stores[m].gc(horizon(m))


def test_endless_stream_runs_within_budget_with_gc_callback():
    """A RANGE 50ms STEP 20ms query over an endless stream: the budget (10 slices of 8) suffices
    because the GC frees what the query's next instants cannot reach."""
    w = Window.time(50, 20)
    clock = StreamClock("a")
    clock.heartbeat(0)
    tr = Trigger(w.step_ms, ["a"], {"a": clock.progress})
    store = TransientStore("a", budget_bytes=10 * 8 * BYTES_PER_TRIPLE, slice_triples=8,
                           horizon=lambda: store.horizon_for(w, tr.next_instant))
    all_spo, all_tau = [], []
    fired = 0
    for i in range(300):
        tau = np.full(4, 5 * i, dtype=np.int64)
        mask, _ = clock.admit(tau)
        spo = rows(4, 4 * i)
        store.append_rows(spo, tau)
        all_spo.append(spo)
        all_tau.append(tau)
        for t in tr.ready({"a": clock.progress}):
            fired += 1
            got = store.window_triples(w, t, strict=True)
            assert as_set(got) == brute(np.concatenate(all_spo), np.concatenate(all_tau), w, t)
        assert store.slice_bytes <= store.budget_bytes
    assert fired == len(range(0, 5 * 299, 20))
    assert store.freed_triples > 1000


def test_two_streams_different_ranges_and_steps():
    """FROM STREAM a [RANGE 10s STEP 2s], FROM STREAM b [RANGE 3s STEP 1s]: evaluated at every
    second, each window covering its own range; the window member uses the largest range."""
    from engine.stream.windows import window_member

    wa, wb = Window.time(10_000, 2_000), Window.time(3_000, 1_000)
    ca, cb = StreamClock("a"), StreamClock("b")
    sa, sb = TransientStore("a", slice_triples=4), TransientStore("b", slice_triples=4)
    ca.heartbeat(0)
    cb.heartbeat(0)
    tr = Trigger.for_windows({"a": wa, "b": wb}, {"a": 0, "b": 0})
    assert tr.step == 1_000
    for k in range(1, 13):  # one triple per stream per second, at k*1000 (a) and k*1000-500 (b)
        for c, s, tau in ((ca, sa, k * 1000), (cb, sb, k * 1000 - 500)):
            mask, _ = c.admit([tau])
            s.append_rows(rows(1, k), [tau])
    got = tr.ready({"a": ca.progress, "b": cb.progress})
    assert got == list(range(0, 12_000, 1_000))  # P_b = 11500 > 11000
    t = 11_000
    assert sa.window_arrays(wa, t)[1].tolist() == [k * 1000 for k in range(2, 12)]  # (1000, 11000]
    assert sb.window_arrays(wb, t)[1].tolist() == [8_500, 9_500, 10_500]            # (8000, 11000]
    assert sb.window_arrays(wb, 0)[0].shape == (0, 3)  # empty windows at the first instant
    assert window_member([wa, wb], t) == {"start": 1_000, "end": 11_000}
    wc = Window.count(3)
    assert window_member([wc], t, sb.oldest_tau(wc, t)) == {"start": 8_500, "end": 11_000}


def test_store_layer_does_not_import_streams():
    """engine/kv is below engine/stream: no module of the store imports the stream package
    (the transient store, which reads stream windows, lives in engine/stream)."""
    import ast
    import pathlib

    import engine.kv

    kv = pathlib.Path(engine.kv.__file__).parent
    bad = []
    for f in sorted(kv.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{f.name}: {n}" for n in names if n == "engine.stream" or n.startswith("engine.stream.")]
    assert list(kv.glob("*.py")) and bad == []
