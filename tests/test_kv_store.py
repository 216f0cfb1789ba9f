import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv.graph import OUT
from engine.kv.store import Changes, Store


def rows(*ts):
    return np.array(ts, dtype=np.int64).reshape(-1, 3)


def triples(g):
    s, p, o = g.scan_all()
    return set(zip(s.tolist(), p.tolist(), o.tolist(), strict=True))


@pytest.mark.parametrize("n", [1, 4])
def test_commit_snapshots(n):
    store = Store(shards=n)
    s0 = store.snapshot()
    assert s0.sn == 0 and s0.default.n_triples == 0 and len(s0.named) == 0
    s1 = store.commit(Changes(add={None: rows((1, 2, 3), (4, 2, 3)), 10: rows((1, 2, 3))}))
    assert s1.sn == 1 and store.snapshot() is s1
    assert triples(s1.default) == {(1, 2, 3), (4, 2, 3)}
    assert list(s1.named) == [10] and triples(s1.graph(10)) == {(1, 2, 3)}
    assert s1.graph(11).n_triples == 0  # absent graph: empty index
    assert s0.default.n_triples == 0  # old snapshot unchanged
    # set semantics
    s2 = store.commit(Changes(add={None: rows((1, 2, 3))}, remove={None: rows((9, 9, 9)), 12: rows((1, 2, 3))}))
    assert s2.sn == 2 and triples(s2.default) == triples(s1.default)
    assert 12 not in s2.named
    # remove then add within one commit
    s3 = store.commit(Changes(remove={None: rows((1, 2, 3))}, add={None: rows((1, 2, 3), (5, 6, 7))}))
    assert triples(s3.default) == {(1, 2, 3), (4, 2, 3), (5, 6, 7)}
    # drop / create
    s4 = store.commit(Changes(drop={10}, create={20}))
    assert list(s4.named) == [20] and s4.graph(20).n_triples == 0
    s5 = store.commit(Changes(drop={None}))
    assert s5.default.n_triples == 0 and list(s5.named) == [20]
    # drop then add in the same commit
    s6 = store.commit(Changes(drop={20}, add={20: rows((1, 1, 1))}))
    assert triples(s6.graph(20)) == {(1, 1, 1)}
    st_ = store.stats()
    assert st_["triples"] == 1 and st_["sn"] == 6 and st_["bytes"] > 0


def test_cow_shares_untouched_predicates():
    store = Store(shards=2)
    a = store.commit(Changes(add={None: rows((1, 2, 3), (1, 5, 6))}))
    b = store.commit(Changes(add={None: rows((7, 5, 8))}))
    for k in range(2):
        assert a.default.shards[k].preds.get(2) is b.default.shards[k].preds.get(2)


def test_concurrent_readers_see_consistent_snapshots():
    store = Store(shards=2)
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            snap = store.snapshot()
            n = snap.default.n_triples
            if len(triples(snap.default)) != n or n != snap.sn:
                errors.append((snap.sn, n))

    t = threading.Thread(target=reader)
    t.start()
    for i in range(50):
        store.commit(Changes(add={None: rows((i, 1, i + 1))}))
    stop.set()
    t.join()
    assert not errors


tri = st.tuples(st.integers(0, 20), st.integers(0, 3), st.integers(0, 20))
graph_st = st.sampled_from([None, 100, 101])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(graph_st, tri), max_size=15),
                          st.lists(st.tuples(graph_st, tri), max_size=15),
                          st.sets(graph_st, max_size=1)), min_size=1, max_size=5))
def test_property_store_vs_model(batches):
    stores = [Store(shards=1), Store(shards=4)]
    model: dict = {None: set()}
    for rem, add, drop in batches:
        ch = Changes(drop=set(drop))
        for g in drop:
            if g is None:
                model[None] = set()
            else:
                model.pop(g, None)
        by: dict = {}
        for g, t in rem:
            by.setdefault(g, []).append(t)
        ch.remove = {g: rows(*ts) for g, ts in by.items()}
        for g, ts in by.items():
            if g in model:
                model[g] -= set(ts)
        by = {}
        for g, t in add:
            by.setdefault(g, []).append(t)
        ch.add = {g: rows(*ts) for g, ts in by.items()}
        for g, ts in by.items():
            model.setdefault(g, set()).update(ts)
        for store in stores:
            store.commit(ch)
    for store in stores:
        snap = store.snapshot()
        assert triples(snap.default) == model[None]
        assert set(snap.named) == {g for g in model if g is not None}
        for g in snap.named:
            assert triples(snap.graph(g)) == model[g]
    a, b = (s.snapshot().default for s in stores)
    probe = np.arange(21)
    for pid in range(4):
        ra, na = a.expand(pid, OUT, probe)
        rb, nb = b.expand(pid, OUT, probe)
        assert ra.tolist() == rb.tolist() and na.tolist() == nb.tolist()
