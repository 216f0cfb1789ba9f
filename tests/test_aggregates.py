"""Aggregates (engine.exec.aggregates) with the expected results of the W3C
SPARQL 1.1 aggregates/ tests."""

from __future__ import annotations

import numpy as np
import pytest

from engine.exec.aggregates import aggregate
from engine.sparql.algebra import Aggregate, Var
from engine.terms import XSD
from tests.test_functions import DB, FALSE, TRUE, D, I, MemCtx, S, typed

o = Var("o")

# agg-numeric.ttl / agg-numeric2.ttl, grouped by subject
GROUPS = {
    "ints": [I(1), I(2), I(3)],
    "decimals": [D("1.0"), D("2.2"), D("3.5")],
    "doubles": [DB("1.0E2"), DB("2.0E3"), DB("3.0E4")],
    "mixed1": [I(1), D("2.2")],
    "mixed2": [DB("2E-1"), D("0.2")],
}


def run(name, groups: list[list], distinct=False, separator=None, ctx=None, star=False):
    ctx = ctx or MemCtx()
    vals = [v for g in groups for v in g]
    gi = np.asarray([i for i, g in enumerate(groups) for _ in g], dtype=np.int64)
    ids = None if star else ctx.intern(vals)
    agg = Aggregate(name, None if star else o, distinct, separator)
    out = aggregate(agg, ids, gi, len(groups), ctx)
    assert out.dtype == np.int64 and len(out) == len(groups)
    return ctx.keys(out)


def test_sum_w3c():
    assert run("SUM", list(GROUPS.values())) == [I(6), D("6.7"), DB("3.21E4"), D("3.2"), DB("4.0E-1")]
    # agg-sum-01: SUM over all :dec values of agg-numeric.ttl
    assert run("SUM", [[D("1.0"), D("2.2"), D("3.5"), D("2.2"), D("2.2")]]) == [D("11.1")]


def test_avg_w3c():
    assert run("AVG", [[D("1.0"), D("2.2"), D("3.5"), D("2.2"), D("2.2")]]) == [D("2.22")]
    out = run("AVG", list(GROUPS.values()))
    assert out[0] == D("2.0") and out[3] == D("1.6") and out[4] == DB("2.0E-1")
    assert run("AVG", [[]]) == [I(0)]  # agg-avg-03
    assert run("SUM", [[]]) == [I(0)]


def test_avg_sum_errors_w3c():
    # agg-err-01: a blank node in the group -> error (unbound)
    groups = [[I(1), I(2), I(3), I(4)], [I(1), "_:b2", I(3), I(4)], [D("1.0"), D("2.0"), D("3.0"), I(4)]]
    assert run("AVG", groups) == [D("2.5"), None, D("2.5")]
    assert run("SUM", [[I(1), None], [S("a")], [I(2)]]) == [None, None, I(2)]
    # agg-err-02 style: doubles promote
    assert run("AVG", [[I(1), DB("2.0E0"), I(3), I(4)], [DB("2.5E0"), I(0), D("3.5"), I(4)]]) == [
        DB("2.5E0"), DB("2.5E0")]


def test_min_max_w3c():
    # agg-min-02: mixed2 holds 2E-1 and 0.2 (equal values): the double, canonical
    assert run("MIN", list(GROUPS.values())) == [I(1), D("1.0"), DB("1.0E2"), I(1), DB("2.0E-1")]
    assert run("MIN", [[D("0.2"), DB("2E-1")], [DB("2E-1"), D("0.2")]]) == [DB("2.0E-1"), DB("2.0E-1")]
    assert run("MAX", [[D("02.50"), I(1)], [typed("7", XSD + "int"), I(3)]]) == [D("2.5"), typed("7", XSD + "int")]
    groups = list(GROUPS.values())
    groups[4] = [DB("2E-1"), D("2.2")]  # agg-numeric.ttl's mixed2
    assert run("MAX", groups) == [I(3), D("3.5"), DB("3.0E4"), D("2.2"), D("2.2")]
    assert run("MAX", [[]]) == [None]  # agg-empty-group-max-2
    # mixed kinds use the ORDER BY order: literals above IRIs above blank nodes above
    # a group holding an error (None: unbound) has no MIN or MAX
    assert run("MAX", [["_:a", "<http://a>", S("x"), None]]) == [None]
    assert run("MAX", [["_:a", "<http://a>", S("x")]]) == [S("x")]
    assert run("MIN", [["_:a", "<http://a>", S("x"), None]]) == [None]
    assert run("MIN", [["_:a", "<http://a>", S("x")]]) == ["_:a"]
    assert run("MIN", [[I(2), None, I(1)], [I(3), I(1)]], distinct=True) == [None, I(1)]


def test_count():
    assert run("COUNT", [[I(1), I(2), I(2)], [None, S("a")], []]) == [I(3), I(1), I(0)]
    assert run("COUNT", [[I(1), I(2), I(2)], [None, S("a")], []], distinct=True) == [I(2), I(1), I(0)]
    assert run("COUNT", [[I(1), I(2), I(2)], [None, S("a")], []], star=True) == [I(3), I(2), I(0)]


def test_count_distinct_star_via_row_codes():
    ctx = MemCtx()
    codes = np.asarray([0, 1, 0, 2, 2], dtype=np.int64)
    gi = np.asarray([0, 0, 0, 1, 1], dtype=np.int64)
    out = aggregate(Aggregate("COUNT", None, True), codes, gi, 2, ctx)
    assert ctx.keys(out) == [I(2), I(1)]


def test_distinct_variants_w3c():
    dup = [[I(1), I(2), I(2)], [D("1.0"), D("2.2"), D("2.2")], [DB("1.0E2"), DB("2.0E3"), DB("2.0E3")],
           [I(1), D("2.2")]]
    assert run("SUM", dup, distinct=True) == [I(3), D("3.2"), DB("2.1E3"), D("3.2")]
    assert run("AVG", dup, distinct=True) == [D("1.5"), D("1.6"), DB("1.05E3"), D("1.6")]
    assert run("MAX", dup, distinct=True) == [I(2), D("2.2"), DB("2.0E3"), D("2.2")]
    assert run("MIN", dup, distinct=True) == [I(1), D("1.0"), DB("1.0E2"), I(1)]
    assert run("COUNT", dup, distinct=True) == [I(2), I(2), I(2), I(2)]


def test_sample():
    assert run("SAMPLE", [[None, D("2.2"), D("3.5")], [], [None]]) == [D("2.2"), None, None]


def test_group_concat_w3c():
    out = run("GROUP_CONCAT", [[S("1"), S("22")], [S("aaa"), S("bb"), S("c")]])
    assert out == [S("1 22"), S("aaa bb c")]
    assert run("GROUP_CONCAT", [[S("1"), S("22")]], separator=":") == [S("1:22")]
    assert run("GROUP_CONCAT", [[S("1", "en"), S("2", "en")]]) == [S("1 2")]
    assert run("GROUP_CONCAT", [[S("1", "en"), S("2", "fr")]]) == [S("1 2")]
    assert run("GROUP_CONCAT", [[S("1", "en")]]) == [S("1")]
    assert run("GROUP_CONCAT", [[S("1"), S("2"), S("1")]], distinct=True) == [S("1 2")]
    assert run("GROUP_CONCAT", [[]]) == [S("")]
    # GroupConcat is CONCAT of the values (18.5.1): string literals only; anything
    # else, and an error (unbound), makes the group an error
    assert run("GROUP_CONCAT", [[I(1), TRUE, FALSE], [S("a"), None], [S("a"), "<http://a>"], [S("b")]]) == [
        None, None, None, S("b")]
    assert run("GROUP_CONCAT", [["_:b", S("x")]]) == [None]


def test_large_integer_sums_exact():
    big = 2**62
    assert run("SUM", [[I(big), I(big), I(1)]]) == [I(2 * big + 1)]
    rng = np.random.default_rng(0)
    vals = rng.integers(-1000, 1000, 5000)
    groups = [[I(int(v)) for v in vals[i::7]] for i in range(7)]
    assert run("SUM", groups) == [I(int(vals[i::7].sum())) for i in range(7)]


def test_zero_groups():
    ctx = MemCtx()
    out = aggregate(Aggregate("SUM", o), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 0, ctx)
    assert out.tolist() == []


@pytest.mark.parametrize("name", ["SUM", "AVG", "MIN", "MAX", "SAMPLE", "GROUP_CONCAT", "COUNT"])
def test_all_unbound_group(name):
    out = run(name, [[None, None]])
    # 18.5.1 over the list (error, error): Count drops errors; Avg(M) = 0 where
    # Count(M) = 0; Sum, Min, Max, CONCAT of an error are errors; Sample has only errors
    if name == "COUNT":
        assert out == [I(0)]
    elif name == "AVG":
        assert out == [I(0)]
    else:
        assert out == [None]
