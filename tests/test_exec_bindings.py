"""Columnar bindings: SPARQL compatibility joins, left joins, MINUS, DISTINCT."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import RowBudgetExceeded
from engine.exec.bindings import (
    UNBOUND,
    Bindings,
    concat,
    distinct_inverse,
    join,
    join_pairs,
    left_outer,
    minus,
    row_keys,
)

U = UNBOUND


def B(**cols):
    return Bindings({k: np.array(v, dtype=np.int64) for k, v in cols.items()})


def rows(b: Bindings):
    names = sorted(b.cols)
    return sorted(tuple((v, int(b.cols[v][i])) for v in names if b.cols[v][i] != U) for i in range(b.n))


def naive_join(a: Bindings, b: Bindings):
    out = []
    for i in range(a.n):
        for j in range(b.n):
            ok = True
            merged = {}
            for v in set(a.cols) | set(b.cols):
                x = a.cols[v][i] if v in a.cols else U
                y = b.cols[v][j] if v in b.cols else U
                if x != U and y != U and x != y:
                    ok = False
                    break
                merged[v] = x if x != U else y
            if ok:
                out.append(tuple(sorted((v, int(x)) for v, x in merged.items() if x != U)))
    return sorted(out)


def test_join_all_bound():
    a = B(x=[1, 2, 3, 2], y=[10, 20, 30, 21])
    b = B(x=[2, 3, 4, 2], z=[7, 8, 9, 6])
    assert rows(join(a, b)) == naive_join(a, b)


def test_join_multi_var_key():
    a = B(x=[1, 1, 2], y=[5, 6, 5])
    b = B(x=[1, 2, 1], y=[6, 5, 5], z=[0, 1, 2])
    assert rows(join(a, b)) == naive_join(a, b)


def test_join_with_unbound_values():
    a = B(x=[1, U, 2], y=[U, 5, 6])
    b = B(x=[1, 2, U], y=[5, U, 6])
    assert rows(join(a, b)) == naive_join(a, b)


def test_cross_product_and_unit():
    a = B(x=[1, 2])
    b = B(y=[3, 4, 5])
    assert len(join(a, b)) == 6
    assert join(a, Bindings.unit()) is a
    assert join(Bindings.unit(), b) is b


def test_random_joins_match_naive():
    rnd = np.random.default_rng(3)
    for _ in range(50):
        a = B(x=rnd.integers(-1, 3, 6), y=rnd.integers(-1, 3, 6))
        b = B(y=rnd.integers(-1, 3, 5), z=rnd.integers(0, 3, 5), x=rnd.integers(-1, 3, 5))
        assert rows(join(a, b)) == naive_join(a, b)


def test_left_outer_keeps_order_and_unmatched():
    a = B(x=[1, 2, 3])
    b = B(x=[3, 1, 1], y=[30, 10, 11])
    li, ri = join_pairs(a, b)
    out = left_outer(a, b, li, ri)
    assert out.cols["x"].tolist() == [1, 1, 2, 3]
    assert out.cols["y"].tolist() == [10, 11, U, 30]


def test_minus_semantics():
    a = B(x=[1, 2, 3], y=[U, 5, 6])
    # shares x with row 1 -> removed; row with disjoint bound vars never removes
    b = B(x=[1, U], z=[9, 9])
    assert rows(minus(a, b)) == [(("x", 2), ("y", 5)), (("x", 3), ("y", 6))]
    # no shared variable at all: nothing removed
    assert minus(a, B(w=[1])).n == 3


def test_distinct_and_concat():
    a = B(x=[1, 1, 2], y=[3, 3, 3])
    assert a.distinct().n == 2
    c = concat([B(x=[1]), B(y=[2])])
    assert c.cols["x"].tolist() == [1, U] and c.cols["y"].tolist() == [U, 2]


def test_row_keys_distinguish_rows():
    k = row_keys([np.array([1, 1, 2]), np.array([2, 3, 2])])
    assert len(set(k.tolist())) == 3


def test_row_budget():
    a = B(x=list(range(100)))
    b = B(y=list(range(100)))
    with pytest.raises(RowBudgetExceeded):
        join(a, b, max_rows=500)


@pytest.mark.parametrize("seed", range(6))
def test_distinct_inverse_is_np_unique(seed):
    """The counting pass over a dense range and the sort answer the same."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 5000))
    lo = int(rng.choice([-1, 0, 7, 1 << 40]))
    span = int(rng.choice([1, 50, 3000, 10**7]))
    x = rng.integers(lo, lo + span, n).astype(np.int64)
    if n and seed % 2:
        x[rng.integers(0, n, n // 10)] = -1  # unbound
    u, inv = distinct_inverse(x)
    eu, einv = np.unique(x, return_inverse=True)
    assert u.tolist() == eu.tolist()
    assert inv.dtype == np.int64 and inv.tolist() == einv.reshape(-1).tolist()


@pytest.mark.parametrize("seed", range(30))
def test_distinct_inverse_of_store_and_local_ids(seed):
    """Store ids, UNBOUND and query-local ids (from LOCAL_BASE) in one column: two
    dense bands counted as one, the same answer as np.unique."""
    from engine.exec.context import LOCAL_BASE

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1024, 6000))
    lows = rng.integers(-1, int(rng.integers(1, 4000)), n)
    highs = LOCAL_BASE + rng.integers(0, int(rng.integers(1, 4000)), n)
    x = np.where(rng.random(n) < rng.random(), lows, highs).astype(np.int64)
    u, inv = distinct_inverse(x)
    u2, inv2 = np.unique(x, return_inverse=True)
    assert u.tolist() == u2.tolist() and inv.tolist() == inv2.reshape(-1).tolist()
