"""A FILTER across connected components of the tuple-at-a-time core (CityBench C4's shape:
static events x the window's readings) reads its doubles per component column, the static
component's kept across instants (:class:`engine.stream.tiny_ops.Spread`): one core over
sliding windows and changing stored parts answers as the executor and pyoxigraph do."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query
from engine.sparql.parser import parse_query
from engine.stream import tiny_ops
from engine.stream.tiny import TinyCore
from engine.stream.window_graph import window_index
from tests.test_stream_tiny import doubles_mask_and_reference

EX = "http://ex.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
#: values of the coordinates: doubles (most), an integer and a decimal (exact operands: the
#: vectorized closures hand those rows back), a string (a type error in every row it meets)
VALUES = [f'"{v}"^^<{XSD}double>' for v in ("0.25", "-1.5E0", "56.1519", "56.2", "1.0E-1", "0.0", "-0.0", "NaN")]
VALUES += [f'"3"^^<{XSD}integer>', f'"0.5"^^<{XSD}decimal>', '"x"']
SEEN: Counter = Counter()


@pytest.fixture(scope="module")
def db():
    d = Database()
    yield d
    d.close()


def _rows(dic, triples) -> np.ndarray:
    if not triples:
        return np.zeros((0, 3), dtype=np.int64)
    return np.asarray(dic.encode([t for tr in triples for t in tr]), dtype=np.int64).reshape(-1, 3)


def _oracle(db, text, rows, names):
    store = ox.Store()
    keys = db.store.dictionary.keys(rows.reshape(-1)) if len(rows) else []
    nt = "".join(f"{keys[3 * i]} {keys[3 * i + 1]} {keys[3 * i + 2]} .\n" for i in range(len(rows)))
    if nt:
        store.load(nt.encode(), ox.RdfFormat.N_TRIPLES)
    out = Counter()
    for sol in store.query(text):
        out[tuple(f"<{sol[n].value}>" for n in names)] += 1
    return out


def _canon(res, ctx):
    keys = [ctx.keys(c) for c in res.columns]
    return Counter(zip(*keys, strict=True)) if keys else Counter()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_filter_across_components_over_sliding_windows(db, data):
    dic = db.store.dictionary
    val = st.sampled_from(VALUES)
    n_ev = data.draw(st.integers(1, 8))
    events = [(f"<{EX}e{i}>", f"<{EX}elat>", data.draw(val)) for i in range(n_ev)]
    events += [(f"<{EX}e{i}>", f"<{EX}elon>", data.draw(val)) for i in range(n_ev)]
    stream = []
    for j in range(data.draw(st.integers(1, 12))):
        stream.append((f"<{EX}o{j}>", f"<{EX}olat>", data.draw(val)))
        if data.draw(st.integers(0, 5)):
            stream.append((f"<{EX}o{j}>", f"<{EX}olon>", data.draw(val)))
    cond = data.draw(st.sampled_from([
        "((?c - ?a) * (?c - ?a) + (?d - ?b) * (?d - ?b)) < 0.1",
        "?c > ?a && ?d <= ?b + 1.0E0", "!(?a * ?c >= 1.0E0) || ?b = ?d"]))
    distinct = data.draw(st.booleans())
    text = (f"SELECT {'DISTINCT ' if distinct else ''}?e ?o WHERE {{ ?e <{EX}elat> ?a . ?e <{EX}elon> ?b . "
            f"?o <{EX}olat> ?c . ?o <{EX}olon> ?d FILTER({cond}) }}")
    q = parse_query(text)
    core = TinyCore(q)
    assert core.usable and core.direct is not None
    stored = _rows(dic, events)
    srows = _rows(dic, stream)
    w = data.draw(st.integers(2, 8))
    for lo in range(0, max(1, len(srows) - w + 1), data.draw(st.integers(1, 3))):
        if data.draw(st.integers(0, 5)) == 0:   # another stored part (a commit): other columns
            stored = stored[data.draw(st.integers(0, 1)):].copy()
        rows = np.concatenate([stored, srows[lo:lo + w]])
        ctx = QueryContext(db.store.snapshot())
        sol = core.solutions(rows, ctx, stored)
        assert sol is not None
        ref_ctx = QueryContext(db.store.snapshot())
        ref = _canon(evaluate_query(q, ref_ctx, DatasetView(window_index(rows), {}, ("t",))), ref_ctx)
        nan = int(dic.lookup(f'"NaN"^^<{XSD}double>'))
        if not (rows[:, 2] == nan).any():   # (pyoxigraph's NaN comparisons are not XPath's)
            assert ref == _oracle(db, text, rows, ["e", "o"]), text
        res = core.result(sol, ctx) if len(sol) else None
        if res is None:
            SEEN["executor"] += 1
            continue
        SEEN["direct"] += 1
        assert _canon(res, ctx) == ref, (text, lo)


def test_filter_across_components_was_exercised():
    """The kept doubles and the direct result were both used by the property test above."""
    assert SEEN["direct"] >= 30, SEEN


def test_spread_keeps_a_static_columns_doubles(db, monkeypatch):
    """The static component's column is decoded once for many instants; the window's each time;
    the mask equals the one over the product's own columns."""
    dic = db.store.dictionary
    ev = [(f"<{EX}s{i}>", f"<{EX}slat>", f'"{i}.5E0"^^<{XSD}double>') for i in range(9)]
    ev += [(f"<{EX}s{i}>", f"<{EX}sname>", f'"s{i}"') for i in range(9)]
    ob = [(f"<{EX}r{j}>", f"<{EX}rlat>", f'"{j}.25E0"^^<{XSD}double>') for j in range(6)]
    ob += [(f"<{EX}r{j}>", f"<{EX}rname>", f'"r{j}"') for j in range(6)]
    q = parse_query(f"SELECT ?s ?r WHERE {{ ?s <{EX}slat> ?a . ?s <{EX}sname> ?x . ?r <{EX}rlat> ?c . "
                    f"?r <{EX}rname> ?y FILTER(?c - ?a > 0.1) }}")
    core = TinyCore(q)
    stored = _rows(dic, ev)
    calls = []
    real = tiny_ops._doubles_of
    monkeypatch.setattr(tiny_ops, "_doubles_of", lambda c, ctx: calls.append(len(c)) or real(c, ctx))
    for k in range(3, 7):   # (27 rows and more: the vectorized closures)
        rows = np.concatenate([stored, _rows(dic, ob[:k] + ob[6:6 + k])])
        ctx = QueryContext(db.store.snapshot())
        sol = core.solutions(rows, ctx, stored)
        res = core.result(sol, ctx)
        got = Counter(zip(*(ctx.keys(c) for c in res.columns), strict=True))
        want = Counter((f"<{EX}s{i}>", f"<{EX}r{j}>") for i in range(9) for j in range(k)
                       if j + 0.25 - (i + 0.5) > 0.1)
        assert got == want
    assert sorted(calls) == [3, 4, 5, 6, 9], calls   # (the stored column once)


DOUBLES_SEEN: Counter = Counter()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_long_columns_of_doubles_equal_the_executor(db, data):
    """Columns past the row-by-row size read their doubles through the kept sorted id arrays
    (``tiny_ops._Doubles``, misses inserted as they come): the FILTER's mask equals the
    executor's, and a column with an unbound row, a non-number or only exact operands is
    handed back (None)."""

    dic = db.store.dictionary
    n = data.draw(st.integers(tiny_ops._FEW + 1, 120))
    pool = [f'"{v}"^^<{XSD}double>' for v in ("0.25", "-1.5E0", "56.1519", "56.2", "1.0E-1", "0.0", "-0.0",
                                              "INF", data.draw(st.sampled_from(["7.5", "-3.25E1", "9.0E5"])))]
    rare = data.draw(st.sampled_from([None, f'"3"^^<{XSD}integer>', f'"0.5"^^<{XSD}decimal>', '"x"', "UNBOUND"]))

    def column():
        terms = [data.draw(st.sampled_from(pool)) for _ in range(n)]
        if rare is not None and data.draw(st.booleans()):
            terms[data.draw(st.integers(0, n - 1))] = rare
        ids = [-1 if t == "UNBOUND" else None for t in terms]
        enc = dic.encode([t for t in terms if t != "UNBOUND"])
        it = iter(enc)
        return np.asarray([-1 if i == -1 else int(next(it)) for i in ids], dtype=np.int64)

    cols = {"x": column(), "y": column()}
    cond = data.draw(st.sampled_from(["((?x - ?y) * (?x - ?y)) < 0.1", "?x > ?y || ?x * 2 = ?y", "!(?x <= 1.0E0)"]))
    got, ref = doubles_mask_and_reference(db, cond, cols, n)
    if got is None:
        DOUBLES_SEEN["handed back"] += 1
        used = [cols["x"]] if cond.startswith("!") else [cols["x"], cols["y"]]
        assert any((c < 0).any() or rare is not None for c in used)
    else:
        DOUBLES_SEEN["decided"] += 1
        assert got.tolist() == ref.tolist(), cond


def test_long_columns_were_decided():
    assert DOUBLES_SEEN["decided"] >= 20, DOUBLES_SEEN


def test_kept_doubles_start_again_past_the_cap(db, monkeypatch):
    """Past ``_Doubles.cap`` ids the arrays start again from the column at hand: the values
    stay right before and after, and what is kept stays within the cap."""
    from engine.stream.tiny_ops import _DOUBLES

    monkeypatch.setattr(type(_DOUBLES), "cap", 50)
    dic = db.store.dictionary
    ctx = QueryContext(db.store.snapshot())
    for base in range(0, 400, 20):   # (each column shares half its ids with the last: hits and misses)
        vals = [base + k + 0.5 for k in range(40)]
        c = np.asarray(dic.encode([f'"{v}"^^<{XSD}double>' for v in vals]), dtype=np.int64)
        got = _DOUBLES.column(np.concatenate([c, c[::-1]]), ctx)
        assert got is not None and got[1]
        assert got[0].tolist() == vals + vals[::-1]
        assert len(_DOUBLES._by[id(dic)][1]) <= 50
