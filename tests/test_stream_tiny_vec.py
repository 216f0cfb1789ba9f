"""The wide tail of a compiled join run on columns (:mod:`engine.stream.tiny_vec`).

* Every step kind by hand: :func:`run_tail` gives the rows (as a bag) and the work of the
  compiled loops (:func:`~engine.stream.tiny_plan.compile_plan`) over the same steps, over
  stored pairs, instant pairs, a stored relation's probes and static groups probed by one or
  two variables.
* Random windows and queries (test_stream_tiny's generators) with the tail starting at the
  first expanding step (or at a random row count): each window's solutions equal, as a bag,
  those of a core that runs no tail, and the query's answer is the executor's and pyoxigraph's.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.evaluate import QueryContext
from engine.sparql.parser import parse_query
from engine.stream import tiny_vec
from engine.stream.stored_relation import LazyMatch, StoredRelation
from engine.stream.tiny import TinyCore, _Joined, _Match
from engine.stream.tiny_plan import compile_plan, group_step, pattern_step
from tests.test_stream_tiny import _rows, _vocab, check_solutions, db, queries  # noqa: F401

TAILS: Counter = Counter()
_run_tail = tiny_vec.run_tail


def _counting(*a, **k):
    got = _run_tail(*a, **k)
    TAILS["columns" if got is not None else "past the bound"] += 1
    return got


def _bag(rows) -> Counter:
    if isinstance(rows, tiny_vec.ColRows):
        return Counter(zip(*(c.tolist() for c in rows.cols), strict=True)) if rows.cols else Counter({(): rows.n})
    return Counter(rows)


def _same(steps, width, cur, objs, bound=10_000):
    loops = compile_plan(steps, width)(cur, objs, bound)
    cols = tiny_vec.run_tail(cur, objs, steps, width, 10_000, bound)
    if loops is not None:   # (rows on columns count less of the work bound)
        assert cols is not None and _bag(loops[0]) == _bag(cols[0]) and cols[1] <= loops[1]
    if cols is None:
        assert loops is None
    return cols


def test_every_step_kind_on_columns():
    slots: dict = {}
    knows = _Match([(1, 2), (1, 3), (2, 3)])
    likes = _Match([(2, 7), (3, 8)], None).with_instant([(3, 9), (2, 8)])
    age = _Match([(2, 20)])
    steps = [pattern_step((("v", "a"), None, ("v", "b")), slots),      # s2
             pattern_step((("v", "b"), None, ("v", "x")), slots),      # pr (stored + instant pairs)
             pattern_step((("v", "a"), None, ("v", "b")), slots),      # t2
             pattern_step((("v", "b"), None, ("c", 20)), slots)]       # t1
    assert [s[0] for s in steps] == ["s2", "pr", "t2", "t1"]
    got = _same(steps, 0, [()], [knows, likes, knows, age])
    assert sorted(zip(*(c.tolist() for c in got[0].cols), strict=True)) == [(1, 2, 7), (1, 2, 8)]
    for bound in range(0, 12):
        _same(steps, 0, [()], [knows, likes, knows, age], bound)   # the same work bound
    group = _Joined([(2, 5), (3, 6), (3, 7)], {"b": 0, "y": 1})
    st2 = group_step(group.slots, dict(slots))
    assert st2 == ("gp", ("b",), (1,), 1)
    rows = [(1, 2, 7), (1, 3, 8), (2, 3, 9), (9, 9, 9)]
    _same([st2], 3, rows, [group])
    cols = tiny_vec.ColRows(np.array(rows, dtype=np.int64))
    assert _bag(tiny_vec.run_tail(cols, [group], [st2], 3, 100, 100)[0]) == _bag(compile_plan([st2], 3)(rows, [group],
                                                                                                   100)[0])
    pair = _Joined([(2, 5, 1), (3, 6, 1), (3, 6, 2)], {"b": 0, "y": 1, "z": 2})
    st3 = group_step(pair.slots, {"q": 0, "b": 1, "y": 2})   # probed by two variables
    assert st3[0] == "gp" and len(st3[2]) == 2
    _same([st3], 3, [(0, 3, 6), (0, 2, 5), (0, 2, 6), (1, 3, 6)], [pair])
    _same([group_step(group.slots, {})], 0, [()], [group])                      # gs
    _same([pattern_step((("v", "a"), None, ("c", 5)), {})], 0, [(), ()], [knows])   # s1
    _same([("t0",)] + steps[1:2], 2, [(1, 2), (1, 3), (4, 4)], [knows, likes])
    _same(steps[1:2], 2, [], [likes])   # no rows


def test_stored_relation_probes_on_columns():
    d = Database()
    d.load_data(b"<http://e/a> <http://e/k> <http://e/b> .\n<http://e/a> <http://e/k> <http://e/c> .\n"
                b"<http://e/b> <http://e/k> <http://e/c> .\n", "application/n-triples")
    try:
        a, b, c, k = (int(x) for x in d.store.dictionary.encode(["<http://e/a>", "<http://e/b>", "<http://e/c>",
                                                                "<http://e/k>"]))
        rel = StoredRelation(k, [d.store.snapshot().default])
        lazy = LazyMatch(rel, [(c, a)])
        slots = {"x": 0}
        pr = pattern_step((("v", "x"), None, ("v", "y")), slots)
        t2 = pattern_step((("v", "y"), None, ("v", "x")), slots)
        _same([pr], 1, [(a,), (b,), (c,), (a,)], [lazy])
        _same([pr, t2], 1, [(a,), (b,), (c,)], [lazy, lazy])
        back = pattern_step((("v", "y"), None, ("v", "x")), {"x": 0})   # probed by the object
        _same([back], 1, [(a,), (b,), (c,)], [lazy])
    finally:
        d.close()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)   # (a fixed set of examples: the count below is deterministic)
@given(data=st.data())
def test_tail_on_columns_equals_loops(db, data, monkeypatch):  # noqa: F811
    """(``VEC_ROWS`` past any row count with a small work bound: the planner's loops give up on
    a step and run it on columns instead.)"""
    vec = data.draw(st.sampled_from([0, 0, 1, 3, 1 << 30]))
    monkeypatch.setattr(tiny_vec, "VEC_ROWS", vec)
    monkeypatch.setattr("engine.stream.tiny.run_tail", _counting)
    nodes, preds, lits = _vocab(db)
    text = data.draw(queries())
    q = parse_query(text)
    core = TinyCore(q)
    if not core.usable or core.general:
        return
    if vec == 1 << 30:
        core.max_work = data.draw(st.sampled_from([1, 3, 8]))
        TAILS["retry"] += 1
    stored = _rows(data.draw, nodes, preds, lits)[:data.draw(st.integers(0, 8))].copy()
    for _ in range(4):
        rows = np.concatenate([stored, _rows(data.draw, nodes, preds, lits)])
        ctx = QueryContext(db.store.snapshot())
        before = TAILS["columns"]
        sol = core.solutions(rows, ctx, stored)
        if vec == 1 << 30 and TAILS["columns"] > before:
            TAILS["columns after the loops gave up"] += 1
        with monkeypatch.context() as m:
            m.setattr(tiny_vec, "VEC_ROWS", 1 << 30)
            plain = TinyCore(q)
            plain.solutions(rows, QueryContext(db.store.snapshot()), stored)   # (plans, then compiled)
            fresh = plain.solutions(rows, QueryContext(db.store.snapshot()), stored)
        check_solutions(db, q, text, rows, ctx, core, sol, fresh)


def test_tails_were_exercised():
    assert TAILS["columns"] >= 50 and TAILS["columns after the loops gave up"] >= 5, TAILS
