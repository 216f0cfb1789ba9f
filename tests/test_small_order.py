"""ORDER BY over a few rows (engine/small_answers.py small_order_permutation, which
engine/exec/evaluate.py's _OrderBy uses below SMALL_ORDER_ROWS rows) gives exactly
the permutation of the vectorized ranking (engine/exec/functions.py
order_permutation): same total order, same tie-breaks (numeric ties by id, other
terms by order key then id), stable, ascending and descending, several conditions,
unbound cells; and ORDER BY queries answer the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
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
