"""Columns with unbound cells rendered from the term shapes (engine/exec/unbound_column.py):
the same bytes as the distinct path in every format, and the path taken for OPTIONAL answers."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec import render, unbound_column
from engine.exec.result import UNBOUND, QueryResult
from engine.kv.dictionary import Dictionary
from tests.test_render_shapes import MEDIA, _both, _Terms, keys


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool=st.lists(keys(), min_size=1, max_size=30, unique=True), data=st.data())
def test_unbound_cells_equal_distinct_path(pool, data):
    d = Dictionary()
    ids = d.encode(pool).tolist()
    n = data.draw(st.integers(render.SHAPE_MIN_ROWS, 200))
    cols = []
    for _ in range(data.draw(st.integers(1, 3))):
        col = np.asarray(data.draw(st.lists(st.sampled_from(ids + [UNBOUND]), min_size=n, max_size=n)), np.int64)
        if data.draw(st.booleans()):
            col[:: data.draw(st.integers(1, 4))] = UNBOUND   # every row, or every k-th, unbound
        cols.append(col)
    r = QueryResult("SELECT", _Terms(d), [f"v{i}" for i in range(len(cols))], cols)
    for media in MEDIA:
        shaped, distinct = _both(r, media)
        assert shaped == distinct, media


def test_optional_answer_takes_the_path():
    ttl = "@prefix : <http://e/> .\n" + "".join(
        f":s{i} a :T .\n" + (f':s{i} :name "n{i}" .\n' if i % 3 else "") for i in range(3000))
    db = Database()
    db.load_data(ttl, "text/turtle")
    r = db.query("PREFIX : <http://e/> SELECT ?s ?n WHERE { ?s a :T OPTIONAL { ?s :name ?n } }")
    assert (r.columns[1] == UNBOUND).sum() == 1000
    before = unbound_column.TAKEN[0]
    shaped, distinct = _both(r, "application/sparql-results+json")
    assert unbound_column.TAKEN[0] > before
    assert shaped == distinct
    assert shaped.count(b'"n":') == 2000 and shaped.count(b'"s":') == 3000


def test_repeated_terms_keep_the_distinct_path():
    d = Dictionary()
    ids = d.encode([f"<http://e/{i}>" for i in range(40)])
    col = np.repeat(ids, 10)
    col[::3] = UNBOUND
    r = QueryResult("SELECT", _Terms(d), ["x"], [col])
    before = unbound_column.TAKEN[0]
    assert render.shaped_column(r, col, "json", [(b'"x":', b"")]) is None   # 10 rows a term
    assert unbound_column.TAKEN[0] == before
    fresh = d.encode([f"<http://e/u{i}>" for i in range(400)])
    fresh[::4] = UNBOUND
    assert render.shaped_column(QueryResult("SELECT", _Terms(d), ["x"], [fresh]), fresh, "json",
                                [(b'"x":', b"")]) is not None
    assert unbound_column.TAKEN[0] == before + 1
