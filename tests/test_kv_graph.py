import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv.graph import IN, OUT, empty_graph


def build(rows, n):
    return empty_graph(n).apply(None, np.array(rows, dtype=np.int64).reshape(-1, 3))


ROWS = [[1, 2, 3], [1, 2, 4], [5, 2, 3], [1, 6, 3], [7, 2, 1], [3, 2, 7]]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_basic(n):
    g = build(ROWS, n)
    assert g.n_triples == 6
    assert g.predicates().tolist() == [2, 6]
    st_ = g.stats(2)
    assert (st_.triples, st_.subjects, st_.objects) == (5, 4, 4)
    assert g.stats(99).triples == 0
    rows, nbrs = g.expand(2, OUT, np.array([1, 5, 9, 1, -1, 1 << 40]))
    assert rows.tolist() == [0, 0, 1, 3, 3]
    assert nbrs.tolist() == [3, 4, 3, 3, 4]
    rows, nbrs = g.expand(2, IN, np.array([3, 7]))
    assert rows.tolist() == [0, 0, 1] and nbrs.tolist() == [1, 5, 3]
    assert g.contains(2, np.array([1, 1, 5, 7, 1, 9]), np.array([3, 5, 3, 1, 4, 9])).tolist() == [
        True, False, True, True, True, False]
    assert g.index(2, OUT).tolist() == [1, 3, 5, 7]
    assert g.index(2, IN).tolist() == [1, 3, 4, 7]
    s, o = g.scan(2)
    assert sorted(zip(s.tolist(), o.tolist(), strict=True)) == [(1, 3), (1, 4), (3, 7), (5, 3), (7, 1)]
    s, p, o = g.scan_all()
    assert sorted(zip(s.tolist(), p.tolist(), o.tolist(), strict=True)) == sorted(map(tuple, ROWS))
    assert g.vertices().tolist() == [1, 3, 4, 5, 7]
    assert g.expand(99, OUT, np.array([1]))[0].tolist() == []
    assert g.contains(99, np.array([1]), np.array([3])).tolist() == [False]


def test_empty():
    g = empty_graph(4)
    assert g.n_triples == 0 and len(g.predicates()) == 0
    assert g.expand(1, OUT, np.array([1]))[0].size == 0
    assert g.index(1, IN).size == 0
    assert g.scan_all()[0].size == 0
    assert g.vertices().size == 0


def test_copy_on_write_shares_untouched():
    g = build(ROWS, 2)
    g2 = g.apply(np.array([[1, 6, 3]]), np.array([[8, 2, 9]]))
    assert g.n_triples == 6 and g2.n_triples == 6
    assert 6 not in g2.predicates().tolist()
    g3 = g2.apply(None, np.array([[10, 11, 12]]))
    for k in range(2):
        assert g3.shards[k].preds.get(2) is g2.shards[k].preds.get(2)
    # no-op changes return the same object
    assert g3.apply(np.array([[99, 2, 98]]), np.array([[1, 2, 3]])) is g3


triples = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 4), st.integers(0, 30)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(triples, triples, st.integers(0, 3)), min_size=1, max_size=4))
def test_property_vs_set_model(batches):
    gs = {n: empty_graph(n) for n in (1, 4)}
    model: set = set()
    for rem, add, every in batches:
        if every:
            rem = rem + sorted(model)[::every]  # also remove existing triples
        model -= set(rem)
        model |= set(add)
        for n in gs:
            gs[n] = gs[n].apply(np.array(rem, dtype=np.int64).reshape(-1, 3),
                                np.array(add, dtype=np.int64).reshape(-1, 3))
    probe = np.arange(-1, 32)
    for g in gs.values():
        assert g.n_triples == len(model)
        s, p, o = g.scan_all()
        assert set(zip(s.tolist(), p.tolist(), o.tolist(), strict=True)) == model
        for pid in range(5):
            sub = {(a, c) for a, b, c in model if b == pid}
            r, nb = g.expand(pid, OUT, probe)
            assert set(zip(probe[r].tolist(), nb.tolist(), strict=True)) == sub
            assert np.all(np.diff(r) >= 0)
            r, nb = g.expand(pid, IN, probe)
            assert set(zip(nb.tolist(), probe[r].tolist(), strict=True)) == sub
            ss = np.repeat(probe, len(probe))
            oo = np.tile(probe, len(probe))
            got = g.contains(pid, ss, oo)
            exp = np.array([(a, c) in sub for a, c in zip(ss.tolist(), oo.tolist(), strict=True)])
            assert (got == exp).all()
            assert g.index(pid, OUT).tolist() == sorted({a for a, _ in sub})
            assert g.index(pid, IN).tolist() == sorted({c for _, c in sub})
            st_ = g.stats(pid)
            assert (st_.triples, st_.subjects, st_.objects) == (len(sub), len({a for a, _ in sub}),
                                                               len({c for _, c in sub}))
