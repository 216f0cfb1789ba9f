"""ORDER BY over a few rows (engine/small_answers.py small_order_permutation, which
engine/exec/evaluate.py's _OrderBy uses below SMALL_ORDER_ROWS rows) gives exactly
the permutation of the vectorized ranking (engine/exec/functions.py
order_permutation): same total order, same tie-breaks (numeric ties by id, other
terms by order key then id), stable, ascending and descending, several conditions,
unbound cells; and ORDER BY queries answer the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import small_answers
from engine.database import Database
from engine.exec import functions
from engine.exec.evaluate import QueryContext

XSD = "http://www.w3.org/2001/XMLSchema#"
OBJECTS = [
    "<http://e/a>", "<http://e/b>", "<http://e/%C3%A9>", "_:b1", "_:b0",
    '"1"^^<' + XSD + 'integer>', '"01"^^<' + XSD + 'integer>', '"1.0"^^<' + XSD + 'decimal>',
    '"-2.5e0"^^<' + XSD + 'double>', '"NaN"^^<' + XSD + 'double>', '"7"^^<' + XSD + 'int>',
    '"abc"', '"Abc"', '"abc"@en', '"abc"@de', '""', '"true"^^<' + XSD + 'boolean>',
    '"2020-01-01"^^<' + XSD + 'date>', '"x"^^<http://e/dt>', '"3"', '"10"^^<' + XSD + 'integer>',
]
NUMS = [o for o in OBJECTS if "XMLSchema#integer" in o or "decimal" in o or "#int>" in o]


@pytest.fixture(scope="module")
def db():
    d = Database()
    lines = [f"<http://e/s{i}> <http://e/p> {o} .\n" for i, o in enumerate(OBJECTS)]
    d.load_data("".join(lines), "application/n-triples")
    return d


def _ids(db, keys):
    ctx = QueryContext(db.store.snapshot())
    return ctx, [ctx.dictionary.lookup(k) for k in keys]


@settings(max_examples=250, deadline=None)
@given(st.data())
def test_small_order_equals_the_vectorized_one(db, data):
    pool = data.draw(st.sampled_from([OBJECTS, NUMS]))
    ctx, ids = _ids(db, pool)
    choice = st.sampled_from(ids + [-1])
    n = data.draw(st.integers(0, small_answers.SMALL_ORDER_ROWS))
    k = data.draw(st.integers(1, 3))
    keys = [(np.array(data.draw(st.lists(choice, min_size=n, max_size=n)), dtype=np.int64), data.draw(st.booleans()))
            for _ in range(k)]
    got = small_answers.small_order_permutation(keys, ctx)
    want = functions.order_permutation(keys, ctx) if n else np.zeros(0, dtype=np.int64)
    assert got is not None
    assert got.tolist() == want.tolist()


def test_more_rows_go_to_the_vectorized_ranking(db):
    ctx, ids = _ids(db, OBJECTS)
    keys = [(np.array((ids * 3)[: small_answers.SMALL_ORDER_ROWS + 1], dtype=np.int64), True)]
    assert small_answers.small_order_permutation(keys, ctx) is None


@pytest.mark.parametrize("order", ["?o", "DESC(?o)", "DESC(?o) ?s", "STR(?o) ?s", "?o DESC(?s)",
                                   "STRLEN(STR(?o)) ?s", "DESC(STRLEN(STR(?o))) ?o", "CONCAT(STR(?o), \"x\") ?s"])
def test_ordered_queries_agree_with_the_general_order(db, order, monkeypatch):
    q = f"SELECT ?s ?o WHERE {{ ?s <http://e/p> ?o }} ORDER BY {order}"
    got = db.query(q)
    monkeypatch.setattr(small_answers, "SMALL_ORDER_ROWS", -1)  # the vectorized ranking
    want = db.query(q)
    assert [c.tolist() for c in got.columns] == [c.tolist() for c in want.columns]


@pytest.fixture(scope="module")
def hub_db():
    """Subjects hung from constants (a fast, tuple-at-a-time BGP), their objects with ties."""
    d = Database()
    lines = []
    for i in range(60):
        lines.append(f"<http://e/s{i}> <http://e/in> <http://e/hub{i % 3}> .\n")
        lines.append(f"<http://e/s{i}> <http://e/p> {OBJECTS[(i * 7) % len(OBJECTS)]} .\n")
        lines.append(f"<http://e/s{i}> <http://e/q> {OBJECTS[i % 5]} .\n")
    d.load_data("".join(lines), "application/n-triples")
    return d


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["?o", "DESC(?o)", "?o DESC(?s)", "DESC(?q) ?o", "?q", "?s", "?z ?o", "DESC(?o) ?q ?s"]),
       st.sampled_from(["?s ?o", "?o", "?q ?o", "?o ?s ?q"]), st.booleans(),
       st.sampled_from(["", "LIMIT 3", "OFFSET 2", "LIMIT 4 OFFSET 1", "LIMIT 0"]), st.integers(0, 2))
def test_small_ordered_answers_are_the_general_operators(hub_db, order, proj, distinct, slice_, hub):
    """ORDER BY plain variables over a few tuple-at-a-time solutions (small_answers.ordered_lists):
    the general evaluator's rows in its order, with projection, DISTINCT, OFFSET and LIMIT."""
    from engine.exec.evaluate import DatasetView, evaluate_query
    from engine.plan.planner import QueryPlan, make_plan
    from engine.sparql.parser import parse_query

    text = (f"SELECT {'DISTINCT ' if distinct else ''}{proj} WHERE {{ ?s <http://e/in> <http://e/hub{hub}> . "
            f"?s <http://e/p> ?o . ?s <http://e/q> ?q }} ORDER BY {order} {slice_}")
    q = parse_query(text)
    assert make_plan(q).fast is not None and make_plan(q).fast.order
    got = hub_db.query(text)
    snap = hub_db.store.snapshot()
    want = evaluate_query(q, QueryContext(snap), DatasetView(snap.default, snap.named), plan=QueryPlan(q, q.pattern, None))
    assert [c.tolist() for c in got.columns] == [c.tolist() for c in want.columns], text
    assert got.vars == want.vars
