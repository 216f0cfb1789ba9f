"""Small SELECT and ASK answers in SPARQL XML, CSV and TSV joined from kept rendered
terms (engine/small_answers.py ``select_xml`` / ``select_csv`` / ``select_tsv``,
``small_body``) are byte-identical to the general writers (engine/exec/serialize.py,
whose term-by-term path for small answers equals its vectorized one),
over random small results (unbound cells, blank nodes, IRIs and literals with quotes,
commas, tabs, newlines, carriage returns, XML specials and control characters,
language tags, datatypes, unicode) and over a store's own terms; and the HTTP lane
answers a selective query through them in every results format, GET and POST."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import formats, small_answers
from engine.exec import serialize as ser
from engine.exec.result import QueryResult
from engine.terms import literal_key

#: lexical forms with what each format escapes or quotes
_text = st.text(alphabet=st.one_of(st.sampled_from('",\t\n\r<>&\'\\%é\u2028\U0001f600 \x01\x0b'),
                                   st.characters(codec="utf-8", exclude_characters="\x00")), max_size=8)
TERMS = st.one_of(
    st.builds(lambda s: "<http://e/" + "".join(c for c in s if c not in '<>"{}|^`\\ \n\t\r') + ">", _text),
    st.builds(lambda s: "_:b" + "".join(c for c in s if c.isalnum() and c.isascii()), _text),
    st.builds(lambda s: "_:" + s, st.sampled_from(["x.y", "a-b", "_u", "1"])),
    st.builds(literal_key, _text),
    st.builds(lambda s, lang: literal_key(s, lang=lang), _text, st.sampled_from(["en", "de-CH"])),
    st.builds(lambda s, dt: literal_key(s, dt), _text,
              st.sampled_from(["http://www.w3.org/2001/XMLSchema#integer", "http://e/dt?a=1&b=<2>",
                               "http://www.w3.org/2001/XMLSchema#string"])),
)

RESULT_TYPES = (formats.SPARQL_XML, formats.CSV, formats.TSV, formats.SPARQL_JSON)
NAMES = st.lists(st.sampled_from(["v", "x1", "name", "é", "_a", "ü2"]), min_size=1, max_size=4, unique=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(TERMS, min_size=1, max_size=16, unique=True), NAMES, st.data())
def test_small_formats_equal_the_writers(keys, names, data):
    table = ser.KeyTable(keys)
    n = data.draw(st.integers(0, 8))
    ids = st.integers(-1, len(keys) - 1)
    cols = [np.array(data.draw(st.lists(ids, min_size=n, max_size=n)), dtype=np.int64) for _ in names]
    res = QueryResult(form="SELECT", terms=table, vars=list(names), columns=cols, n_rows=n)
    small = small_answers.SmallSelect(tuple(names), [tuple(c.tolist()) for c in cols], table, n)
    frags = small_answers.TermFragments()
    for mt in RESULT_TYPES:
        want = ser.serialize(res, mt)
        assert want == _vectorized(res, mt), mt  # the general writer's two paths agree
        w = small_answers.WRITERS[mt]
        assert w(res, None, frags) == want, mt  # cold: terms rendered now
        assert w(small, None, frags) == want, mt  # hot, and from Python sequences
        assert small_answers.small_body(res, mt) == want, mt


def _vectorized(res, mt):
    """The general writer's bytes through its vectorized row assembly (its term-by-term
    path for small answers, ``serialize.SMALL_CELLS``, off)."""
    keep = ser.SMALL_CELLS, ser.SMALL_CELLS_UNBOUND
    ser.SMALL_CELLS = ser.SMALL_CELLS_UNBOUND = 0
    try:
        return ser.serialize(res, mt)
    finally:
        ser.SMALL_CELLS, ser.SMALL_CELLS_UNBOUND = keep


def test_the_general_writers_small_path_is_taken(monkeypatch):
    """Small XML/CSV/TSV answers (computed terms too, which the lane's kept fragments
    leave to the general writer) are written term by term, not by the vectorized rows."""
    from engine.exec import render

    def boom(*a, **k):
        raise AssertionError("the vectorized row assembly ran")

    table = ser.KeyTable(["<http://e/a>", '"b,c"@en', "_:x"])
    res = QueryResult(form="SELECT", terms=table, vars=["a", "b"],
                      columns=[np.array([0, 1, -1], dtype=np.int64), np.array([2, -1, 1], dtype=np.int64)], n_rows=3)
    want = {mt: _vectorized(res, mt) for mt in RESULT_TYPES}
    monkeypatch.setattr(render, "column", boom)
    for mt in RESULT_TYPES:
        assert ser.serialize(res, mt) == want[mt]


@pytest.mark.parametrize("mt", RESULT_TYPES)
def test_ask_in_every_results_format_is_the_writers(mt):
    for b in (False, True):
        res = QueryResult(form="ASK", terms=ser.KeyTable([]), boolean=b)
        assert small_answers.small_body(res, mt) == ser.serialize(res, mt)


def test_what_the_small_writers_leave_to_the_general_writer():
    """Too many cells, computed terms, no variables, graph forms, graph media types:
    None (the general writer answers)."""
    table = ser.KeyTable(["<http://e/a>", '"b"'])
    big = QueryResult(form="SELECT", terms=table, vars=["a", "b"],
                      columns=[np.zeros(small_answers.MAX_CELLS, dtype=np.int64)] * 2,
                      n_rows=small_answers.MAX_CELLS)
    from engine.exec.context import LOCAL_BASE

    computed = QueryResult(form="SELECT", terms=table, vars=["a"], columns=[np.array([LOCAL_BASE], dtype=np.int64)],
                           n_rows=1)
    novars = QueryResult(form="SELECT", terms=table, vars=[], columns=[], n_rows=2)
    graph = QueryResult(form="CONSTRUCT", terms=table, triples=np.array([[0, 0, 1]], dtype=np.int64))
    for mt in (formats.SPARQL_XML, formats.CSV, formats.TSV):
        for res in (big, computed, novars, graph):
            assert small_answers.small_body(res, mt, None) is None
    ok = QueryResult(form="SELECT", terms=table, vars=["a"], columns=[np.array([0, 1], dtype=np.int64)], n_rows=2)
    assert small_answers.small_body(ok, formats.TURTLE) is None
    from engine.errors import ResponseTooLarge

    with pytest.raises(ResponseTooLarge):
        small_answers.small_body(ok, formats.CSV, 5)


def test_a_stores_answers_in_every_format(tmp_path):
    """A store's answers (the shaped and vectorized column paths of the general writer
    at 64+ rows, the term-by-term one below) in each results format: the same bytes."""
    from engine.database import Database

    lines = []
    for i in range(120):
        lines.append(f'<http://e/s{i % 7}> <http://e/p> "v,\\"{i}\\"\\t\\n"@en .\n')
        lines.append(f"<http://e/s{i % 7}> <http://e/q> \"{i}\"^^<http://www.w3.org/2001/XMLSchema#integer> .\n")
        lines.append(f"<http://e/s{i % 7}> <http://e/r> _:b{i} .\n")
        lines.append(f"<http://e/s{i % 7}> <http://e/t> <http://e/o{i}&x> .\n")
    db = Database(shards=1)
    db.load_data("".join(lines).encode(), "application/n-triples")
    for q in ["SELECT ?o WHERE { <http://e/s1> <http://e/p> ?o }",
              "SELECT ?p ?o WHERE { <http://e/s2> ?p ?o }",
              "SELECT ?s ?o ?b WHERE { ?s <http://e/q> ?o OPTIONAL { ?s <http://e/zz> ?b } } LIMIT 70",
              "SELECT ?o ?t WHERE { <http://e/s3> <http://e/r> ?o . <http://e/s3> <http://e/t> ?t } LIMIT 60",
              "ASK { <http://e/s1> <http://e/p> ?o }", "ASK { <http://e/s1> <http://e/nope> ?o }"]:
        res = db.query(q)
        for mt in RESULT_TYPES:
            got = small_answers.small_body(res, mt)
            if len(res) * max(1, len(res.vars or ())) <= small_answers.MAX_CELLS:
                assert got is not None, (q, mt)
            want = ser.serialize(res, mt)
            assert want == _vectorized(res, mt), (q, mt)
            if got is not None:
                assert got == want, (q, mt)


def test_the_lane_answers_small_selects_in_every_format(monkeypatch):
    """The HTTP lane (bench.lane_profile's in-process protocol, GET and POST) answers a
    selective SELECT and an ASK in XML, CSV and TSV through the small writers, with the
    general writer's bytes; with the small writers off, the same bodies."""
    import asyncio

    from bench import lane_profile
    from bench.http_load import request_bytes
    from engine.database import Database

    db = Database(shards=1)
    db.update('INSERT DATA { <http://e/a> <http://e/p> "x,\\"y\\"" , <http://e/b> , "t\\tu"@en , _:n }')
    loop = asyncio.new_event_loop()
    try:
        proto, tr = lane_profile.make_protocol(db, loop)
        calls = []
        real = small_answers._select

        def spy(*a, **k):
            out = real(*a, **k)
            calls.append(out is not None)
            return out

        def answers(texts):
            bodies = []
            for text in texts:
                for mt in (formats.SPARQL_XML, formats.CSV, formats.TSV):
                    for method in ("get", "post"):
                        tr.out.clear()
                        lane_profile.run(proto, tr, [request_bytes("/sparql", text, 7878, mt, method)], loop)
                        raw = b"".join(tr.out)
                        head, _, body = raw.partition(b"\r\n\r\n")
                        assert head.startswith(b"HTTP/1.1 200"), raw[:200]
                        assert mt.encode() in head
                        bodies.append((text, mt, body))
            return bodies

        texts = ["SELECT ?p ?o WHERE { <http://e/a> ?p ?o }", "ASK { <http://e/a> <http://e/p> ?o }"]
        monkeypatch.setattr(small_answers, "_select", spy)
        fast = answers(texts)
        assert calls and all(calls) and len(calls) == len(fast)  # every answer by the small writers
        for text, mt, body in fast:
            res = db.query(text)
            assert body == ser.serialize(res if type(res) is not small_answers.SmallSelect else res.result(), mt)
        monkeypatch.setattr(small_answers, "WRITERS", {})  # the general writers only
        assert answers(texts) == fast
    finally:
        loop.close()
