"""The continuous-query event writer (:class:`~engine.stream.continuous._JsonTerms`) writes the
bytes :func:`~engine.exec.serialize.sparql_json` writes, for the answers it has fast paths for:
empty results (a cached head), large answers assembled from blocks of few-distinct columns
(cross products, columns bound together, C2/C8-like) or from columns of many distinct terms,
with and without unbound cells, and again on a second instant (its term cache)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.evaluate import QueryContext
from engine.exec.result import UNBOUND, QueryResult
from engine.exec.serialize import sparql_json
from engine.stream.continuous import _JsonTerms

EX = "http://ex.org/"
N_TERMS = 400


@pytest.fixture(scope="module")
def db():
    d = Database()
    lines = [f"<{EX}s{i}> <{EX}p> \"v{i}\" .\n" for i in range(N_TERMS // 4)]
    lines += [f"<{EX}s{i}> <{EX}q> \"{i}\"^^<http://www.w3.org/2001/XMLSchema#integer> .\n"
              for i in range(N_TERMS // 4)]
    lines += [f"<{EX}s{i}> <{EX}r> \"x\\\"{i}\"@en .\n" for i in range(N_TERMS // 4)]
    d.load_data("".join(lines).encode(), "application/n-triples")
    yield d
    d.close()


def _ids(db) -> np.ndarray:
    d = db.store.dictionary
    keys = ([f"<{EX}s{i}>" for i in range(N_TERMS // 4)] + [f'"v{i}"' for i in range(N_TERMS // 4)]
            + [f'"x\\"{i}"@en' for i in range(N_TERMS // 4)])
    ids = np.array([int(d.lookup(k)) for k in keys], dtype=np.int64)
    assert (ids >= 0).all()
    return ids


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_event_json_equals_sparql_json(db, data):
    ids = _ids(db)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    # rows = a cross product of groups of columns; the columns of a group are bound together
    # (one value drawn per group row), each group with few or many distinct rows
    n_groups = data.draw(st.integers(1, 4))
    groups = []
    for _ in range(n_groups):
        width = data.draw(st.integers(1, 3))
        size = data.draw(st.sampled_from([1, 2, 3, 7, 40, 300]))
        groups.append(rng.choice(ids, size=(size, width)))
    n = 1
    for g in groups:
        n *= len(g)
    if n > 60_000 or n == 0:
        return
    cols: list[np.ndarray] = []
    rep = n
    tile = 1
    for g in groups:
        rep //= len(g)
        for j in range(g.shape[1]):
            cols.append(np.tile(np.repeat(g[:, j], rep), tile))
        tile *= len(g)
    order = rng.permutation(len(cols))   # columns of a group need not be adjacent
    cols = [cols[i] for i in order]
    if data.draw(st.booleans()):  # shuffled rows
        perm = rng.permutation(n)
        cols = [c[perm] for c in cols]
    if data.draw(st.integers(0, 4)) == 0:   # some unbound cells
        c = cols[0].copy()
        c[rng.random(n) < 0.1] = UNBOUND
        cols[0] = c
    if data.draw(st.integers(0, 6)) == 0:
        cols = [c[:0] for c in cols]
    names = [f"v{i}" for i in range(len(cols))]
    ctx = QueryContext(db.store.snapshot())
    res = QueryResult(form="SELECT", terms=ctx, vars=names, columns=cols)
    jt = _JsonTerms()
    jt.LARGE = data.draw(st.sampled_from([8, 64, _JsonTerms.LARGE]))   # the large-answer path on smaller ones too
    extra = b',"window":{"start":0,"end":1}'
    want = sparql_json(res, extra)
    assert jt.select(res, extra) == want
    assert jt.select(res, extra) == want   # cached terms


def test_event_json_empty_result_uses_the_cached_head(db):
    ctx = QueryContext(db.store.snapshot())
    jt = _JsonTerms()
    for names in (["a", "b"], ["a"], ["a", "b"]):
        res = QueryResult(form="SELECT", terms=ctx, vars=names,
                          columns=[np.zeros(0, dtype=np.int64) for _ in names])
        assert jt.select(res, b',"window":{"start":0,"end":1}') == sparql_json(res, b',"window":{"start":0,"end":1}')
    assert len(jt._heads) == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_event_json_computed_terms_across_instants(db, data):
    """Computed terms (query-local ids: a COUNT, a BIND's number) get new ids every instant, and
    one local id names different terms in different instants: the writer keeps their fragments
    by key, so every instant's bytes are still sparql_json's (store ids, unbound cells, few and
    many misses)."""
    ids = _ids(db)
    jt = _JsonTerms()
    pool = ([f'"{i}"^^<http://www.w3.org/2001/XMLSchema#integer>' for i in range(500, 520)]
            + [f'"{i}.5e0"^^<http://www.w3.org/2001/XMLSchema#double>' for i in range(8)]
            + ['"new"', f"<{EX}computed>", '"x"@fr'])
    for _ in range(data.draw(st.integers(1, 4))):
        ctx = QueryContext(db.store.snapshot())
        keys = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=12, unique=True))
        local = np.array([ctx.term_id(k) for k in keys], dtype=np.int64)
        n = data.draw(st.integers(1, 40))
        rows = data.draw(st.lists(st.tuples(st.integers(0, len(local) - 1), st.integers(0, len(ids) - 1),
                                            st.integers(0, 9)), min_size=n, max_size=n))
        a = np.array([local[i] for i, _, _ in rows], dtype=np.int64)
        b = np.array([ids[j] for _, j, _ in rows], dtype=np.int64)
        c = np.array([UNBOUND if u == 0 else local[i] for i, _, u in rows], dtype=np.int64)
        res = QueryResult(form="SELECT", terms=ctx, vars=["a", "b", "c"], columns=[a, b, c])
        extra = b',"window":{"start":0,"end":1}'
        assert jt.select(res, extra) == sparql_json(res, extra)
