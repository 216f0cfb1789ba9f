"""The generated instant's event (``GenQuery.render``: cells cached per variable across
instants) is byte for byte what ``_JsonTerms.select`` writes for the same rows as a
QueryResult -- over random queries of the generated forms and random windows, with the
per-variable cell cache large and small enough to start over inside an instant.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.sparql.csparql import parse_continuous
from engine.stream import tiny_gen
from engine.stream.continuous import BoundWindow, InstantEvaluator, _JsonTerms
from engine.stream.transient import TransientStore
from engine.stream.windows import Window
from tests.test_stream_tiny_gen import EX, NODES, PREDS, STATIC, TERMS, _rows, queries, static_db

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
RENDERED = [0, 0]   # (instants with rows compared, of them with the small cache)


@pytest.fixture(scope="module")
def db():
    d = static_db()
    yield d
    d.close()


def _evaluator(db, text: str, store, rng: int) -> InstantEvaluator:
    cq = parse_continuous(text)
    bw = BoundWindow("a", EX + "a", int(db.store.dictionary.lookup(f"<{EX}a>")), Window.time(rng, 1000), store)
    return InstantEvaluator(db, cq.query, getattr(cq, "mode", "RSTREAM"), [bw])


def _fill(db, store, els: list) -> None:
    d = db.store.dictionary
    for k, el in enumerate(els):
        if el:
            ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
            store.append_rows(ids, np.full(len(ids), 1000 * (k + 1)))


def _text(q: str, rng: int) -> str:
    return f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {rng // 1000}s STEP 1s] WHERE', 1)}"


elements = st.lists(st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(TERMS)),
                             max_size=6), min_size=1, max_size=10)


@SETTINGS
@given(q=queries(), els=elements, rng=st.sampled_from([3000, 6000]), small=st.booleans())
def test_generated_events_are_the_bytes_select_writes(db, q, els, rng, small):
    if tiny_gen.GenQuery.of(parse_continuous(_text(q, rng)).query, "RSTREAM") is None:
        return
    store = TransientStore("a", slice_triples=16)
    ev = _evaluator(db, _text(q, rng), store, rng)
    assert ev._gen is not None
    if small:   # (a handful of cells: the cache starts over inside most instants)
        ev._json.MAX = 3
    _fill(db, store, els)
    gen = ev._gen
    real = type(gen).render

    def render(self, rows, json, ctx, extra):
        got = real(self, rows, json, ctx, extra)
        if self is gen and not self.sh.ask and self.order is None:
            assert got == _JsonTerms().select(self.result(rows, ctx), extra)
            RENDERED[0] += bool(rows)
            RENDERED[1] += bool(rows) and small
        return got

    type(gen).render = render
    try:
        for t in range(1000, 1000 * (len(els) + 2), 1000):
            data, _ = ev.run(t)
            _rows(data)   # (no error event)
    finally:
        type(gen).render = real


def test_the_byte_test_rendered_rows():
    assert RENDERED[0] > 50 and RENDERED[1] > 5, RENDERED


def test_a_cell_cache_starting_over_keeps_the_cached_cells(db):
    """An instant whose rows hold cached cells and new ones while the cache must start over
    (its bound, or all queries' caches over their joint bound): every cell is rendered again
    (the cached ones went with the tables: a KeyError, an error event, before)."""
    store = TransientStore("a", slice_triples=16)
    text = f"REGISTER QUERY g AS SELECT ?a ?b FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE {{ ?a <{EX}p0> ?b }}"
    ev = _evaluator(db, text, store, 3000)
    ev._json.MAX = 3
    _fill(db, store, [[(NODES[0], PREDS[0], NODES[1])], [(NODES[0], PREDS[0], NODES[2])],
                      [(NODES[3], PREDS[0], NODES[4])]])
    taken = tiny_gen.taken_total()
    want = {1000: 1, 2000: 2, 3000: 3, 4000: 2}
    for t, n in want.items():
        data, _ = ev.run(t)
        assert sum(_rows(data).values()) == n, t
    assert tiny_gen.taken_total() - taken == 4   # (the generated path answered them)
