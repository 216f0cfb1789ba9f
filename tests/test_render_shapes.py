"""Columns rendered from the dictionary's term shapes (engine/exec/render.py
``shaped_column``): the same bytes as the distinct path and the per-term
writers, for every result format, and the same answers as pyoxigraph."""

from __future__ import annotations

import json

import numpy as np
import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec import render
from engine.exec import serialize as ser
from engine.exec.result import UNBOUND, QueryResult
from engine.kv.dictionary import Dictionary
from tests.test_render_stream import _escape

XSD = "http://www.w3.org/2001/XMLSchema#"
MEDIA = ["application/sparql-results+json", "application/sparql-results+xml", "text/csv",
         "text/tab-separated-values"]

_text = st.lists(st.sampled_from(list("ab, \"\\&<>\t\r\n\x01é☃😀\u2028\ufffe") + ["xyz", "q"] * 6),
                 max_size=6).map("".join)


@st.composite
def keys(draw) -> str:
    kind = draw(st.sampled_from(["iri", "iri", "bnode", "plain", "lang", "dt", "xs"]))
    s = draw(_text)
    if kind == "iri":
        return "<http://e/" + s.replace(">", "").replace("<", "").replace('"', "") + ">"
    if kind == "bnode":
        return "_:" + (draw(st.sampled_from(["b", "x.y", "a-", "é", "n1"])) + s.replace(" ", ""))
    if kind == "plain":
        return '"' + _escape(s) + '"'
    if kind == "lang":
        return '"' + _escape(s) + '"@' + draw(st.sampled_from(["en", "fr-CA", "x-y-1"]))
    if kind == "dt":
        return '"' + _escape(s) + '"^^<' + XSD + draw(st.sampled_from(["integer", "double", "date"])) + ">"
    return '"' + _escape(s) + '"^^<' + XSD + "string>"


class _Terms:
    """A term table over a real append-only Dictionary (what the shape cache keys on)."""

    def __init__(self, d: Dictionary):
        self.dictionary = d

    def keys(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        out: list = [None] * len(ids)
        ok = np.flatnonzero(ids >= 0)
        for i, k in zip(ok.tolist(), self.dictionary.keys(ids[ok]), strict=True):
            out[i] = k
        return out


def _distinct_path(monkeypatch_value: int):
    old = render.SHAPE_MIN_ROWS
    render.SHAPE_MIN_ROWS = monkeypatch_value
    return old


def _both(result: QueryResult, media: str) -> tuple[bytes, bytes]:
    """(shape path allowed, distinct path only) bodies of ``result``."""
    shaped = ser.serialize(result, media)
    old = _distinct_path(1 << 62)
    try:
        distinct = ser.serialize(result, media)
    finally:
        render.SHAPE_MIN_ROWS = old
    return shaped, distinct


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pool=st.lists(keys(), min_size=1, max_size=40, unique=True), data=st.data())
def test_shaped_columns_equal_distinct_path(pool, data):
    d = Dictionary()
    ids = d.encode(pool)
    n = data.draw(st.integers(render.SHAPE_MIN_ROWS, 300))
    cols = []
    for _ in range(data.draw(st.integers(1, 3))):
        # a column of one shape (the usual case), of a few shapes, or with unbound cells
        sub = data.draw(st.lists(st.sampled_from(ids.tolist()), min_size=1, max_size=8))
        col = np.asarray(data.draw(st.lists(st.sampled_from(sub), min_size=n, max_size=n)), dtype=np.int64)
        if data.draw(st.booleans()) and data.draw(st.booleans()):
            col[data.draw(st.lists(st.integers(0, n - 1), max_size=n // 2))] = UNBOUND
        cols.append(col)
    r = QueryResult("SELECT", _Terms(d), [f"v{i}" for i in range(len(cols))], cols)
    for media in MEDIA:
        shaped, distinct = _both(r, media)
        assert shaped == distinct, media
    # graph rows (N-Triples) too
    t = np.stack([cols[0], cols[0], cols[0]], axis=1)
    t = t[(t >= 0).all(axis=1)]
    g = QueryResult("CONSTRUCT", _Terms(d), triples=t)
    assert ser.serialize(g, "application/n-triples") == _both_graph(g)


def _both_graph(g: QueryResult) -> bytes:
    old = _distinct_path(1 << 62)
    try:
        return ser.serialize(g, "application/n-triples")
    finally:
        render.SHAPE_MIN_ROWS = old


def test_shape_path_taken_and_cache_follows_appends():
    d = Dictionary()
    ids = d.encode([f"<http://e/{i}>" for i in range(100)])
    r = QueryResult("SELECT", _Terms(d), ["x"], [ids])
    col = render.shaped_column(r, ids, "json", [(b'"x":', b"")])
    assert col is not None  # one shape: a constant head and tail around each row's main part
    assert col.pieces[0] == b'"x":{"type":"uri","value":"' and col.pieces[2] == b'"}'
    assert np.array_equal(col.pieces[1][1], np.arange(0, 200, 2))  # rows in order, no distinct
    # ids appended after the cache was filled get their shapes when first seen
    more = d.encode(['"a"@en', '"b"@en', '"c\\"d"@en'] + [f'"{i}"^^<{XSD}integer>' for i in range(80)])
    r2 = QueryResult("SELECT", _Terms(d), ["x"], [more])
    assert render.shaped_column(r2, more, "json", [(b'"x":', b"")]) is None  # an escaped quote: exact writer
    assert render.shaped_column(r2, more[3:], "json", [(b'"x":', b"")]) is not None
    for media in MEDIA:
        shaped, distinct = _both(r2, media)
        assert shaped == distinct


def test_few_rows_and_computed_terms_keep_distinct_path():
    d = Dictionary()
    ids = d.encode([f"<http://e/{i}>" for i in range(10)])
    r = QueryResult("SELECT", _Terms(d), ["x"], [ids])
    assert render.shaped_column(r, ids, "json", [(b"", b"")]) is None  # under SHAPE_MIN_ROWS
    big = np.repeat(ids, 10)
    big[3] = len(d) + 5  # not a store id (a computed term): the distinct path decodes it
    assert render.shaped_column(QueryResult("SELECT", _Terms(d), ["x"], [big]), big, "json", [(b"", b"")]) is None


def _ox_bindings(body: bytes) -> list:
    doc = json.loads(body)
    return sorted(json.dumps(b, sort_keys=True) for b in doc["results"]["bindings"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objs=st.lists(st.sampled_from([
    '<http://e/o1>', '<http://e/o2>', '"x"', '"y z"@en', '"é ☃"', f'"5"^^<{XSD}integer>',
    f'"2.5"^^<{XSD}decimal>', '"t\\"q"', '_:b1', '"a\\\\b"^^<http://e/dt>', '"line\\nnext"']),
    min_size=70, max_size=150))
def test_json_equals_pyoxigraph(objs):
    lines = [f"<http://e/s{i}> <http://e/p> {o} ." for i, o in enumerate(objs)]
    lines += [f"<http://e/s{i}> <http://e/q> <http://e/c{i % 7}> ." for i in range(len(objs))]
    nt = "\n".join(lines) + "\n"
    db = Database()
    db.load_data(nt, "application/n-triples")
    store = ox.Store()
    store.load(nt.encode(), ox.RdfFormat.N_TRIPLES)
    for q in ("SELECT ?s ?o WHERE { ?s <http://e/p> ?o }",
              "SELECT ?s ?c WHERE { ?s <http://e/q> ?c }",
              "SELECT ?s ?c ?o WHERE { ?s <http://e/q> ?c OPTIONAL { ?s <http://e/p> ?o FILTER(isIRI(?o)) } }"):
        ours = ser.serialize(db.query(q), "application/sparql-results+json")
        theirs = store.query(q).serialize(format=ox.QueryResultsFormat.JSON)
        a, b = _ox_bindings(ours), _ox_bindings(theirs)
        if "_:b1" in objs:  # blank node labels differ between stores: compare with labels masked
            a = [_mask_bnodes(x) for x in a]
            b = [_mask_bnodes(x) for x in b]
        assert sorted(a) == sorted(b), q


def _mask_bnodes(s: str) -> str:
    doc = json.loads(s)
    for v in doc.values():
        if v.get("type") == "bnode":
            v["value"] = "?"
    return json.dumps(doc, sort_keys=True)


@pytest.mark.parametrize("media", MEDIA)
def test_database_answers_same_bytes(media):
    db = Database()
    lines = [f'<http://e/s{i}> <http://e/p> "{i % 13}"^^<{XSD}integer> .' for i in range(400)]
    lines += [f'<http://e/s{i}> <http://e/n> "n{i}"@en .' for i in range(400)]
    db.load_data("\n".join(lines) + "\n", "application/n-triples")
    r = db.query("SELECT ?s ?v ?n WHERE { ?s <http://e/p> ?v . ?s <http://e/n> ?n }")
    shaped, distinct = _both(r, media)
    assert shaped == distinct


def test_memory_budget_counts_the_keys_held():
    """A column's keys are charged to the query's memory budget before they are taken,
    and the recorded peak covers them with the body."""
    from engine.errors import MemoryBudgetExceeded
    from engine.exec.context import MemoryBudget

    d = Dictionary()
    ids = d.encode([f"<http://e/{'x' * 200}/{i}>" for i in range(500)])
    terms = _Terms(d)
    terms.memory = MemoryBudget(None)
    r = QueryResult("SELECT", terms, ["x"], [ids])
    body = ser.serialize(r, "application/sparql-results+json")
    assert terms.memory.peak >= 2 * len(body)
    terms.memory = MemoryBudget(len(body))  # less than the body and the keys held while building it
    with pytest.raises(MemoryBudgetExceeded):
        ser.serialize(r, "application/sparql-results+json")
    # the response bound is about response bytes only: CSV is shorter than its keys, and fits
    terms.memory = MemoryBudget(None)
    csv = ser.serialize(r, "text/csv")
    assert ser.serialize(r, "text/csv", max_bytes=len(csv)) == csv
