"""The fast paths of GraphIndex.expand / contains (one vertex, small inputs vertex
by vertex, direct-address span tables, sorted probes, single-shard routing,
offset placement of per-shard results) against a set model and against the
general vectorized path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv import graph as graph_mod
from engine.kv import partition
from engine.kv import shard as shard_mod
from engine.kv.graph import IN, OUT, empty_graph
from tests.support.graph_model import model_expand

# ids up to 200 with a few hubs; predicates 0..2
_edges = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 2), st.integers(0, 200)), max_size=120)
_hub_edges = st.lists(st.tuples(st.sampled_from([3, 7, 8]), st.integers(0, 2), st.integers(0, 200)), max_size=60)
# probes: present and absent ids, unbound (-1), query-local ids beyond int32, duplicates, any order
_probe = st.one_of(st.integers(-1, 210), st.sampled_from([3, 7, 8, 2**31 - 1, 2**31, 1 << 40]))
_probes = st.lists(_probe, max_size=40)

_MODES = {
    # name: (small input rows, dense slots per key, dense min slots, sort probes from)
    "default": (None, shard_mod._DENSE_SLOTS_PER_KEY, shard_mod._DENSE_MIN_SLOTS,
                shard_mod._SORT_PROBES),
    "general": (0, -1, -1, 10**9),  # vectorized, binary search, no tables
    "tables": (0, 10**6, 10**6, 10**9),  # vectorized, every CSR gets a table
    "sorted_probes": (0, -1, -1, 2),  # vectorized, binary search on sorted probes
    "small": (10**6, -1, -1, 10**9),  # vertex by vertex, binary search
    "small_tables": (10**6, 10**6, 10**6, 10**9),  # vertex by vertex, tables
    "small_buckets": (10**6, 0, 64, 10**9),  # vertex by vertex, bucket tables (few keys a bucket)
    "small_crowded": (10**6, 0, 2, 10**9),  # vertex by vertex, crowded buckets (binary search)
}


def _build(edges, n_shards):
    rows = np.array(edges, dtype=np.int64).reshape(-1, 3)
    return empty_graph(n_shards).apply(None, rows)


def _set_mode(monkeypatch, mode):
    small, per_key, min_slots, sort_from = _MODES[mode]
    # the general path merges shard by shard, the others over the concatenation
    monkeypatch.setattr(partition, "_MERGE_BY_SHARD_FROM", 0 if mode == "general" else 10**9)
    if small is not None:
        for name in ("_SMALL_EXPAND", "_SMALL_CONTAINS", "_SMALL_SHARDED"):
            monkeypatch.setattr(graph_mod, name, small)
    monkeypatch.setattr(shard_mod, "_DENSE_SLOTS_PER_KEY", per_key)
    monkeypatch.setattr(shard_mod, "_DENSE_MIN_SLOTS", min_slots)
    monkeypatch.setattr(shard_mod, "_SORT_PROBES", sort_from)


def _run_all(g, probe, objs):
    out = []
    for pid in range(4):  # 3 is absent
        for direction in (OUT, IN):
            r, nb = g.expand(pid, direction, probe)
            assert r.dtype == np.int64 and nb.dtype == np.int64
            out.append((r.tolist(), nb.tolist()))
        c = g.contains(pid, probe, objs)
        assert c.dtype == bool and len(c) == len(probe)
        out.append(c.tolist())
    return out


@settings(max_examples=80, deadline=None)
@given(_edges, _hub_edges, _probes, st.data())
@pytest.mark.parametrize("n_shards", [1, 4])
def test_fast_paths_match_model_and_general_path(n_shards, edges, hubs, probe, data):
    model = set(edges) | set(hubs)
    probe = np.array(probe, dtype=np.int64)
    objs = np.array(data.draw(st.lists(_probe, min_size=len(probe), max_size=len(probe))), dtype=np.int64)
    # pairs that are edges too, so contains has hits
    ed = sorted(model)
    if ed and len(probe):
        k = data.draw(st.integers(0, len(probe)))
        pick = data.draw(st.lists(st.integers(0, len(ed) - 1), min_size=k, max_size=k))
        for i, j in enumerate(pick):
            probe[i], objs[i] = ed[j][0], ed[j][2]
    results = {}
    with pytest.MonkeyPatch.context() as mp:
        for mode in _MODES:
            _set_mode(mp, mode)
            g = _build(sorted(model), n_shards)  # fresh index: tables are built under this mode
            results[mode] = _run_all(g, probe, objs)
    base = results["general"]
    for mode, res in results.items():
        assert res == base, mode
    # and the general path against the set model
    i = 0
    pl, ol = probe.tolist(), objs.tolist()
    for pid in range(4):
        for direction in (OUT, IN):
            r, nb = model_expand(model, pid, direction, pl)
            assert base[i] == (r, nb)
            i += 1
        assert base[i] == [(a, pid, b) in model for a, b in zip(pl, ol, strict=True)]
        i += 1


@pytest.mark.parametrize("n_shards", [1, 4])
@pytest.mark.parametrize("n", [1, 2, 13, 17, 300, 5000])
def test_random_graph_sizes(n_shards, n):
    """Inputs of every size class (one vertex, small, vectorized, sorted probes),
    on one shard only and spread over many, against the general path."""
    rng = np.random.default_rng(n * 10 + n_shards)
    s = rng.integers(0, 3000, 20000)
    o = rng.integers(0, 3000, 20000)
    s[:2000] = rng.integers(0, 3000, 2000) * 50  # sparse keys for predicate 1
    p = np.where(np.arange(20000) < 2000, 1, 0)
    rows = np.stack([s, p, o], axis=1)
    one_shard = rng.integers(0, 3000, n) * n_shards  # all on shard 0
    many = rng.integers(-1, 3100, n)  # unsorted, duplicates, absent
    many[::7] = 1 << 40
    with pytest.MonkeyPatch.context() as mp:
        _set_mode(mp, "general")
        ref = empty_graph(n_shards).apply(None, rows)
        want = {}
        for name, probe in (("one", one_shard), ("many", many), ("sparse", many * 50)):
            for pid in (0, 1):
                for d in (OUT, IN):
                    want[name, pid, d] = ref.expand(pid, d, probe)
                want[name, pid] = ref.contains(pid, probe, np.roll(o[: len(probe)], 1))
                want[name, pid, "hit"] = ref.contains(pid, s[: len(probe)], o[: len(probe)])
    g = empty_graph(n_shards).apply(None, rows)
    for name, probe in (("one", one_shard), ("many", many), ("sparse", many * 50)):
        for pid in (0, 1):
            for d in (OUT, IN):
                r, nb = g.expand(pid, d, probe)
                wr, wn = want[name, pid, d]
                assert np.array_equal(r, wr) and np.array_equal(nb, wn)
            assert np.array_equal(g.contains(pid, probe, np.roll(o[: len(probe)], 1)), want[name, pid])
            hit = g.contains(pid, s[: len(probe)], o[: len(probe)])
            assert np.array_equal(hit, want[name, pid, "hit"])
            assert hit[p[: len(probe)] == pid].all()


def test_table_counted_in_nbytes_and_not_built_for_sparse_keys():
    g = _build([(v * 4, 0, v) for v in range(100)] + [(v * 10_000, 1, 1) for v in range(10)], 1)
    before = g.nbytes
    g.expand(0, OUT, np.arange(20))
    g.expand(1, OUT, np.arange(20))
    csr0 = g.shards[0].preds[0].out
    csr1 = g.shards[0].preds[1].out
    assert csr0.table(1) is not None
    assert csr1.table(1) is None  # 10 keys over 90,001 slots: too sparse for a span table
    extra0, extra1 = csr0._table[3], csr1._table[3]
    assert extra0 == csr0.table(1)[2].nbytes
    assert 0 < extra1 <= 4 * (3 * 10 + 256 + 1)  # its bucket table stays within the budget
    assert g.nbytes == before + extra0 + extra1


@settings(max_examples=40, deadline=None)
@given(_edges, _probes, st.sampled_from([1, 3, 4]))
def test_int64_ids_across_int32_max(edges, probe, n_shards):
    """Ids around 2**31 make the CSR arrays int64; probes around it too."""
    off = 2**31 - 100
    model = {(s + off, p, o + off) for s, p, o in edges}
    probe = np.array([v + off if 0 <= v <= 210 else v for v in probe], dtype=np.int64)
    objs = np.roll(probe, 1)
    results = {}
    with pytest.MonkeyPatch.context() as mp:
        for mode in _MODES:
            _set_mode(mp, mode)
            results[mode] = _run_all(_build(sorted(model), n_shards), probe, objs)
    for mode, res in results.items():
        assert res == results["general"], mode
    pl = probe.tolist()
    r, nb = model_expand(model, 0, OUT, pl)
    assert results["general"][0] == (r, nb)
