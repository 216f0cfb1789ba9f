"""Vectorized SELECT rendering (engine/exec/render.py) and streamed answers over HTTP.

The vectorized writers must give byte for byte what the exact per-term writers
of engine/exec/serialize.py give; streamed answers must equal the whole body,
carry its exact Content-Length, and end short (never complete-looking) when
building a piece fails."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec import render
from engine.exec import serialize as ser
from engine.exec.result import UNBOUND, QueryResult
from engine.exec.serialize import KeyTable
from engine.terms import XSD_STRING
from server.api.common import Reply, StreamAborted

XSD = "http://www.w3.org/2001/XMLSchema#"
MEDIA = ["application/sparql-results+json", "application/sparql-results+xml", "text/csv",
         "text/tab-separated-values"]


@pytest.fixture(autouse=True)
def _vectorized_from_257_cells(monkeypatch):
    """These tests are of the vectorized renderer, which SPARQL JSON answers with an unbound
    cell reach from 257 cells on when ``serialize.SMALL_CELLS_UNBOUND`` (the term-by-term
    writer up to 768 such cells) is off."""
    monkeypatch.setattr(ser, "SMALL_CELLS_UNBOUND", 0)


_text = st.lists(st.sampled_from(list("ab, \"\\&<>\t\r\n\x01é☃😀\u2028\ufffe") + ["xyz"]), max_size=8).map("".join)


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")


@st.composite
def keys(draw) -> str:
    kind = draw(st.sampled_from(["iri", "bnode", "plain", "lang", "dt", "xs", "raw"]))
    s = draw(_text)
    if kind == "iri":
        return "<http://e/" + s.replace(">", "").replace("<", "") + ">"
    if kind == "bnode":
        return "_:" + (s or "b")
    if kind == "plain":
        return '"' + _escape(s) + '"'
    if kind == "lang":
        return '"' + _escape(s) + '"@' + draw(st.sampled_from(["en", "fr-CA", "x-y-1"]))
    if kind == "dt":
        return '"' + _escape(s) + '"^^<' + XSD + draw(st.sampled_from(["integer", "double", "date"])) + ">"
    if kind == "xs":
        return '"' + _escape(s) + '"^^<' + XSD_STRING + ">"
    return '"' + s.replace('"', "").replace("\\", "") + '"'  # raw: tabs, controls and newlines left unescaped


WRITERS = [
    (render.json_fragments, ser._json_bytes),
    (render.xml_fragments, ser._xml_bytes),
    (render.csv_fragments, lambda k: ser._csv_value(k).encode("utf-8")),
    (render.tsv_fragments, lambda k: ser._tsv_term(k).encode("utf-8")),
    (render.nt_fragments, lambda k: ser._nt_term(k).encode("utf-8")),
]


@settings(max_examples=200, deadline=None)
@given(st.lists(keys(), min_size=1, max_size=30, unique=True))
def test_fragments_equal_the_exact_writers(ks):
    arr = pa.array(ks, pa.large_string())
    small, render.SMALL_DISTINCT = render.SMALL_DISTINCT, 0  # the vectorized path even for a few keys
    try:
        for vec, exact in WRITERS:
            got = vec(arr, exact).to_pylist()
            assert got == [exact(k) for k in ks]
    finally:
        render.SMALL_DISTINCT = small


@st.composite
def one_kind(draw) -> list[str]:
    """Distinct keys all of one kind (the columns of a join: all IRIs, all simple
    literals...), some needing escapes: the uniform fast path and its way out."""
    kind = draw(st.sampled_from(["iri", "bnode", "plain", "raw", "lang", "dt", "xs"]))
    ks = draw(st.lists(keys(), min_size=1, max_size=40, unique=True))
    base = {"iri": "<http://e/{}>", "bnode": "_:b{}", "plain": '"{}"', "raw": '"{}"', "lang": '"{}"@en',
            "dt": '"{}"^^<' + XSD + 'integer>', "xs": '"{}"^^<' + XSD_STRING + ">"}[kind]
    own = [base.format(i) for i in range(draw(st.integers(1, 30)))]
    mixed = [k for k in ks if k[0] == own[0][0]] if draw(st.booleans()) else []
    return list(dict.fromkeys(own + mixed))


@settings(max_examples=200, deadline=None)
@given(one_kind())
def test_one_kind_columns_equal_the_exact_writers(ks):
    arr = pa.array(ks, pa.large_string())
    small, render.SMALL_DISTINCT = render.SMALL_DISTINCT, 0
    try:
        for vec, exact in WRITERS:
            assert vec(arr, exact).to_pylist() == [exact(k) for k in ks]
            out = vec(arr, exact, [(b"<", b">")], parts=True)
            got = ([out[0][0] + x + out[2][0] for x in out[1].to_pylist()] if isinstance(out, tuple)
                   else out.to_pylist())
            assert got == [b"<" + exact(k) + b">" for k in ks]
    finally:
        render.SMALL_DISTINCT = small


@settings(max_examples=40, deadline=None)
@given(one_kind(), one_kind(), st.integers(0, 2**32 - 1), st.integers(130, 400), st.sampled_from([0.0, 0.0, 0.3, 1.0]))
def test_one_kind_answers_equal_row_by_row_reference(ka, kb, seed, n, p_unbound):
    """Columns of one kind (the row join writes their constant pieces), bound in
    every row or not (then prefix and suffix are picked per row)."""
    rng = np.random.default_rng(seed)
    ks = list(dict.fromkeys(ka + kb))
    cols = [rng.integers(0, len(ka), n).astype(np.int64),
            np.array([ks.index(k) for k in kb], dtype=np.int64)[rng.integers(0, len(kb), n)],
            rng.integers(0, len(ka), n).astype(np.int64)]
    for c in cols[1:] if p_unbound < 1 else cols[:2]:
        c[rng.random(n) < p_unbound] = UNBOUND
    res = QueryResult(form="SELECT", terms=KeyTable(ks), vars=["a", "b", "c"], columns=cols)
    old, render.SMALL_DISTINCT = render.SMALL_DISTINCT, 0
    try:
        for mt in MEDIA:
            body = ser.serialize(res, mt)
            assert body == _reference(res, mt), mt
            assert ser.serialize_lazy(res, mt).size == len(body)
    finally:
        render.SMALL_DISTINCT = old


@settings(max_examples=40, deadline=None)
@given(st.lists(keys(), min_size=3, max_size=40, unique=True), st.integers(0, 2**32 - 1), st.integers(1, 400),
       st.sampled_from([0, 512]))
def test_ntriples_equal_the_per_triple_writer(ks, seed, n, small):
    """N-Triples / N-Quads bodies (the graph writers' input too) equal one line per
    triple written term by term."""
    rng = np.random.default_rng(seed)
    triples = rng.integers(0, len(ks), (n, 3)).astype(np.int64)
    res = QueryResult(form="CONSTRUCT", terms=KeyTable(ks), triples=triples)
    old, render.SMALL_DISTINCT = render.SMALL_DISTINCT, small
    try:
        for graph, tail in ((None, " .\n"), ("http://g/1", " <http://g/1> .\n")):
            want = "".join(" ".join(ser._nt_term(ks[i]) for i in row) + tail for row in triples.tolist())
            assert ser._serialize_ntriples(res, graph) == want.encode("utf-8")
    finally:
        render.SMALL_DISTINCT = old


def _reference(res: QueryResult, mt: str) -> bytes:
    """The answer written row by row from the per-term writers (the format's definition)."""
    cols = [res.terms.keys(c) for c in res.columns]
    rows = list(zip(*cols, strict=True))
    if mt.endswith("json"):
        doc = {"head": {"vars": res.vars}, "results": {"bindings": [
            {v: orjson.loads(ser._json_bytes(k)) for v, k in zip(res.vars, r, strict=True) if k is not None}
            for r in rows]}}
        return orjson.dumps(doc)
    if mt.endswith("xml"):
        head = ser._XML_HEAD + "<head>" + "".join(f'<variable name="{v}"/>' for v in res.vars)
        out = [head + "</head>\n<results>\n"]
        for r in rows:
            out.append("<result>" + "".join(f'<binding name="{v}">' + ser._xml_term(k) + "</binding>"
                                            for v, k in zip(res.vars, r, strict=True) if k is not None)
                       + "</result>\n")
        return ("".join(out) + "</results>\n</sparql>\n").encode("utf-8")
    if mt == "text/csv":
        lines = [",".join(res.vars)] + [",".join("" if k is None else ser._csv_value(k) for k in r) for r in rows]
        return ("\r\n".join(lines) + "\r\n").encode("utf-8")
    lines = ["\t".join("?" + v for v in res.vars)] + ["\t".join("" if k is None else ser._tsv_term(k) for k in r)
                                                      for r in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


@settings(max_examples=40, deadline=None)
@given(st.lists(keys(), min_size=1, max_size=40, unique=True), st.integers(0, 2**32 - 1),
       st.integers(130, 700), st.floats(0.0, 0.6))
@pytest.mark.parametrize("small", [0, 512])
def test_whole_answers_equal_row_by_row_reference(small, ks, seed, n, p_unbound):
    """Answers big enough for the vectorized path (> 256 cells), with unbound cells anywhere;
    distinct terms rendered by Arrow kernels (small=0) or by the exact writer."""
    rng = np.random.default_rng(seed)
    cols = []
    for _ in range(3):
        c = rng.integers(0, len(ks), n).astype(np.int64)
        c[rng.random(n) < p_unbound] = UNBOUND
        cols.append(c)
    res = QueryResult(form="SELECT", terms=KeyTable(ks), vars=["a", "b", "long_" * 60], columns=cols)
    old, render.SMALL_DISTINCT = render.SMALL_DISTINCT, small
    try:
        for mt in MEDIA:
            body = ser.serialize(res, mt)
            assert body == _reference(res, mt), mt
            lazy = ser.serialize_lazy(res, mt)
            assert isinstance(lazy, render.Rendered)
            assert lazy.size == len(body)
            assert lazy.body() == body
    finally:
        render.SMALL_DISTINCT = old


def test_small_chunks_and_size_bound(monkeypatch):
    monkeypatch.setattr(render, "CHUNK_ROWS", 7)
    ks = [f"<http://e/{i}>" for i in range(50)] + [f'"v{i}"@en' for i in range(50)]
    n = 333
    rng = np.random.default_rng(1)
    cols = [rng.integers(0, 100, n).astype(np.int64) for _ in range(2)]
    cols[1][::5] = UNBOUND
    res = QueryResult(form="SELECT", terms=KeyTable(ks), vars=["x", "y"], columns=cols)
    for mt in MEDIA:
        r = ser.serialize_lazy(res, mt)
        pieces = [bytes(c) for c in r.chunks()]
        assert len(pieces) == 2 + (n + 6) // 7
        assert b"".join(pieces) == _reference(res, mt) == ser.serialize(res, mt)
        # the bound is checked on the exact size, before any row is built
        ser.serialize(res, mt, max_bytes=r.size)
        with pytest.raises(ser.ResponseTooLarge):
            ser.serialize_lazy(res, mt, max_bytes=r.size - 1)
    # a passed deadline stops building between chunks
    with pytest.raises(ser.QueryTimeout):
        ser.serialize(res, MEDIA[0], deadline=0.0)


def test_cancel_stops_building_the_rest(monkeypatch):
    """A reader that goes away (Rendered.cancel, e.g. on a client's disconnect) stops the
    building of a streamed answer at the next chunk."""
    monkeypatch.setattr(render, "CHUNK_ROWS", 10)
    ks = [f"<http://e/{i}>" for i in range(300)]
    res = QueryResult(form="SELECT", terms=KeyTable(ks), vars=["x"], columns=[np.arange(300, dtype=np.int64)])
    r = ser.serialize_lazy(res, MEDIA[0])
    built = []
    monkeypatch.setattr(r, "_rows", lambda a, b, f=r._rows: built.append(a) or f(a, b))
    it = r.chunks()
    next(it), next(it), next(it)  # the head, then two chunks of rows
    r.cancel()
    with pytest.raises(render.RenderCancelled):
        next(it)
    assert built == [0, 10]


def test_parsers_read_the_vectorized_answers():
    ks = ['"a,b"', '"x\\"y"', '"t\\tu"@en', "<http://e/a?b=1&c=2>", "_:n1", f'"5"^^<{XSD}integer>']
    n = 300
    cols = [np.arange(n, dtype=np.int64) % len(ks), (np.arange(n, dtype=np.int64) * 7) % len(ks)]
    res = QueryResult(form="SELECT", terms=KeyTable(ks), vars=["p", "q"], columns=cols)
    doc = json.loads(ser.serialize(res, MEDIA[0]))
    assert doc["results"]["bindings"][1]["p"] == {"type": "literal", "value": 'x"y'}
    tree = ET.fromstring(ser.serialize(res, MEDIA[1]))
    assert len(tree.findall(".//{http://www.w3.org/2005/sparql-results#}result")) == n
    rows = list(csv.reader(io.StringIO(ser.serialize(res, MEDIA[2]).decode(), newline="")))
    assert rows[1] == ["a,b", "a,b"] and rows[2] == ['x"y', 'x"y'] and rows[3] == ['t\tu', 't\tu']


# ------------------------------------------------------------------ streaming over HTTP


@pytest.fixture(scope="module")
def big_server():
    from tests.conftest import start_server

    db = Database()
    lines = [f'<http://e/s{i}> <http://e/p> "v{i % 997}"@en .' for i in range(render.CHUNK_ROWS + 5000)]
    lines += [f"<http://e/s{i}> <http://e/q> <http://e/o{i % 13}> ." for i in range(0, render.CHUNK_ROWS, 3)]
    db.load_data("\n".join(lines) + "\n", "application/n-triples")
    s = start_server(db)
    try:
        yield s
    finally:
        s.stop()


QUERY = "SELECT ?s ?v ?o WHERE { ?s <http://e/p> ?v OPTIONAL { ?s <http://e/q> ?o } }"


@pytest.mark.parametrize("whole", [False, True])
@pytest.mark.parametrize("mt", MEDIA)
def test_streamed_answer_equals_the_whole_body(big_server, mt, whole, monkeypatch):
    """Streamed (a body over ``STREAM_MIN_BYTES``) or built whole where the query
    ran (under it): the same bytes, the exact length."""
    from server.api import sparql

    res = big_server.db.query(QUERY)
    assert len(res) > render.CHUNK_ROWS  # enough rows to stream ...
    built = []
    if whole:
        monkeypatch.setattr(render.Rendered, "body", lambda r, tick=None, f=render.Rendered.body: built.append(1)
                            or f(r, tick))
    else:  # ... and streamed whatever its size
        monkeypatch.setattr(sparql, "STREAM_MIN_BYTES", 0)
    url = big_server.url + "/sparql?" + urllib.parse.urlencode({"query": QUERY})
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": mt}), timeout=60) as r:
        body = r.read()
        assert int(r.headers["Content-Length"]) == len(body)
    assert bool(built) == whole  # (before the reference below builds its own)
    assert body == ser.serialize(res, mt)
    if mt == MEDIA[0]:
        assert len(json.loads(body)["results"]["bindings"]) == len(res)


def test_streamed_answer_over_the_size_bound_is_an_error_before_any_byte(make_server):
    db = Database()
    db.load_data("".join(f'<http://e/s{i}> <http://e/p> "v{i}" .\n' for i in range(render.CHUNK_ROWS + 10)),
                 "application/n-triples")
    s = make_server(db, max_response_bytes=100_000)
    url = s.url + "/sparql?" + urllib.parse.urlencode({"query": "SELECT * WHERE { ?s ?p ?o }"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=60)
    assert e.value.code == 422
    assert "response bound" in json.loads(e.value.read())["detail"]


class _Failing:
    """A stream whose second chunk fails (as a deadline passing mid-answer does)."""

    size = 10 + render.CHUNK_ROWS

    def chunks(self, tick):
        yield b"x" * 10
        raise ser.QueryTimeout("deadline passed")


def test_a_failing_stream_never_ends_its_body():
    sent = []

    async def send(msg):
        sent.append(msg)

    reply = Reply(200, b"", "text/csv", stream=_Failing())
    with pytest.raises(StreamAborted):
        asyncio.run(reply.send(send, "GET"))
    assert sent[0]["type"] == "http.response.start"
    assert (b"content-length", str(_Failing.size).encode()) in sent[0]["headers"]
    # nothing claims the end of the body: the connection is closed short of its Content-Length
    assert all(m.get("more_body", False) for m in sent[1:])
    assert sum(len(m["body"]) for m in sent[1:]) < _Failing.size


def test_head_of_a_streamed_answer_gives_its_length_and_no_body(big_server, monkeypatch):
    from server.api import sparql

    monkeypatch.setattr(sparql, "STREAM_MIN_BYTES", 0)
    url = big_server.url + "/sparql?" + urllib.parse.urlencode({"query": QUERY})
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "text/csv"}), timeout=60) as r:
        n = len(r.read())
    req = urllib.request.Request(url, headers={"Accept": "text/csv"}, method="HEAD")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert int(r.headers["Content-Length"]) == n
        assert r.read() == b""


class _Endless:
    """A stream that would build forever unless cancelled (as a renderer's ``cancel`` does)."""

    size = 1 << 40

    def __init__(self):
        self.built = 0
        self.cancelled = False

    def chunks(self, tick):
        while True:
            if self.cancelled:
                raise render.RenderCancelled("cancelled")
            self.built += 1
            yield b"x" * 1000

    def cancel(self):
        self.cancelled = True


def test_a_client_that_goes_away_stops_the_building(monkeypatch):
    import server.api.common as common

    monkeypatch.setattr(common, "STREAM_PIECE", 4000)
    stream = _Endless()
    sent = []

    async def main():
        first_piece = asyncio.Event()

        async def send(msg):
            sent.append(msg)
            if msg.get("body"):
                first_piece.set()
                await asyncio.sleep(0.01)

        async def receive():  # the request body was read; the next message is the disconnect
            await first_piece.wait()
            return {"type": "http.disconnect"}

        reply = Reply(200, b"", "text/csv", stream=stream)
        with pytest.raises(StreamAborted):
            await asyncio.wait_for(reply.send(send, "GET", receive), 30)

    asyncio.run(main())
    assert stream.cancelled
    assert stream.built < 1000  # stopped within a few pieces, not after its whole size
    assert all(m.get("more_body", False) for m in sent[1:])  # never claims the end of the body
