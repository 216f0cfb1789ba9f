"""The merged adjacency (engine/kv/merged.py) answers batched reads of a sharded
graph exactly as one shard holding the same triples does: expand (rows grouped
in input order, neighbours sorted), contains, one-vertex lookups; dense and
sparse ids, ids out of range, after writes (carried over for untouched
predicates, rebuilt for touched ones) and when the byte budget refuses it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv import merged as M
from engine.kv.graph import IN, OUT, empty_graph


def build(rows, n):
    return empty_graph(n).apply(None, np.array(rows, dtype=np.int64).reshape(-1, 3))


def same(a, b):
    return a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


triples = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 3), st.integers(0, 60)), min_size=1, max_size=300)
probes = st.lists(st.integers(-3, 70), min_size=7, max_size=150)


@settings(max_examples=60, deadline=None)
@given(triples, probes, st.sampled_from([2, 3, 4]), st.booleans())
def test_expand_contains_match_one_shard(rows, vids, n, sparse):
    rows = np.array(rows, dtype=np.int64)
    if sparse:  # ids far apart: no span table, the sorted-keys search
        rows[:, 0] *= 1000
        rows[:, 2] *= 1000
        vids = [v * 1000 for v in vids]
    ref, g = build(rows, 1), build(rows, n)
    v = np.array(vids, dtype=np.int64)
    for pid in (1, 2, 3):
        for d in (OUT, IN):
            assert same(g.expand(pid, d, v), ref.expand(pid, d, v))
        o = v[::-1].copy()
        assert g.contains(pid, v, o).tolist() == ref.contains(pid, v, o).tolist()
    assert g._merged is not None and any(m is not None for m in g._merged.merged.values())
    m = g.merged(1, OUT)
    if m is not None:
        f = m.lookup()
        for x in vids[:20]:
            assert f(int(x)).tolist() == ref.expand(1, OUT, np.array([x]))[1].tolist()


def test_writes_carry_untouched_and_rebuild_touched():
    rng = np.random.default_rng(1)
    rows = np.stack([rng.integers(0, 500, 4000), rng.integers(1, 4, 4000), rng.integers(0, 500, 4000)], axis=1)
    g = build(rows, 4)
    v = np.arange(0, 500, 3, dtype=np.int64)
    for pid in (1, 2, 3):
        g.expand(pid, OUT, v)
    m2 = g.merged(2, OUT)
    assert m2 is not None
    add = np.array([[7, 1, 499], [8, 1, 498]], dtype=np.int64)
    g2 = g.apply(None, add)
    assert g2.merged(2, OUT) is m2  # predicate 2 untouched: shared
    assert g2.merged(1, OUT) is not g.merged(1, OUT)
    ref = build(np.concatenate([rows, add]), 1)
    for pid in (1, 2, 3):
        for d in (OUT, IN):
            assert same(g2.expand(pid, d, v), ref.expand(pid, d, v))


def test_budget_refuses_and_sharded_path_answers(monkeypatch):
    monkeypatch.setattr(M, "BUDGET_FLOOR", 0)
    monkeypatch.setattr(M, "BUDGET_SHARE", 0.0)
    import engine.kv.graph as G

    monkeypatch.setattr(G, "BUDGET_FLOOR", 0)
    monkeypatch.setattr(G, "BUDGET_SHARE", 0.0)
    rows = [[i, 1, (i * 7) % 50] for i in range(200)]
    g, ref = build(rows, 4), build(rows, 1)
    v = np.arange(0, 220, dtype=np.int64)
    assert same(g.expand(1, OUT, v), ref.expand(1, OUT, v))
    assert g.merged(1, OUT) is None


def test_large_adjacency_waits_until_it_pays(monkeypatch):
    monkeypatch.setattr(M, "_BUILD_AT_ONCE", 10)
    monkeypatch.setattr(M, "_EDGES_PER_USE", 100)
    rows = [[i, 1, i + 1] for i in range(1000)]  # 1000 edges: built at the 10th batched read
    g, ref = build(rows, 2), build(rows, 1)
    v = np.arange(0, 1000, 7, dtype=np.int64)
    for k in range(12):
        assert same(g.expand(1, OUT, v), ref.expand(1, OUT, v))
        built = g._merged.merged.get((1, OUT)) is not None
        assert built == (k >= 9)


@pytest.mark.parametrize("n", [2, 4])
def test_empty_and_missing(n):
    g = build([[1, 1, 2]], n)
    v = np.arange(10, 30, dtype=np.int64)
    assert same(g.expand(1, OUT, v), (np.zeros(0), np.zeros(0)))
    assert g.contains(1, v, v).tolist() == [False] * 20
    assert same(g.expand(9, OUT, v), (np.zeros(0), np.zeros(0)))


def test_merged_bytes_counted_in_nbytes():
    rows = [[i, 1, (i * 3) % 40] for i in range(300)]
    g = build(rows, 4)
    before = g.nbytes
    g.expand(1, OUT, np.arange(0, 300, 2, dtype=np.int64))
    m = g.merged(1, OUT)
    assert m is not None and m.nbytes > 0
    assert g.nbytes == before + m.nbytes
