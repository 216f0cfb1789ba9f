"""SPARQL JSON answers of a few hundred cells with unbound ones (OPTIONAL) written term by
term (engine/exec/serialize.py ``SMALL_CELLS_UNBOUND``): byte-identical to the vectorized
row assembly and to a plain json document, over random results; and the path is taken
(the row assembly does not run), while an all-bound answer of the same size still goes to
the row assembly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import formats
from engine.exec import render
from engine.exec import serialize as ser
from engine.exec.result import UNBOUND, QueryResult
from engine.terms import literal_key

_text = st.text(alphabet=st.one_of(st.sampled_from('"\\\n\t<>&é\u2028\U0001f600 \x01'),
                                   st.characters(codec="utf-8", exclude_characters="\x00")), max_size=6)
TERMS = st.one_of(
    st.builds(lambda s: "<http://e/" + "".join(c for c in s if c not in '<>"{}|^`\\ \n\t\r') + ">", _text),
    st.builds(lambda s: "_:b" + "".join(c for c in s if c.isalnum() and c.isascii()), _text),
    st.builds(literal_key, _text),
    st.builds(lambda s, lang: literal_key(s, lang=lang), _text, st.sampled_from(["en", "de-CH"])),
    st.builds(lambda s, dt: literal_key(s, dt), _text,
              st.sampled_from(["http://www.w3.org/2001/XMLSchema#integer", "http://e/dt?a=1&b=<2>",
                               "http://www.w3.org/2001/XMLSchema#string"])),
)


def _vectorized(res):
    keep = ser.SMALL_CELLS, ser.SMALL_CELLS_UNBOUND
    ser.SMALL_CELLS = ser.SMALL_CELLS_UNBOUND = 0
    try:
        return ser.serialize(res, formats.SPARQL_JSON)
    finally:
        ser.SMALL_CELLS, ser.SMALL_CELLS_UNBOUND = keep


def _expected(res, keys):
    """The answer as the SPARQL 1.1 JSON results document says it, built by hand."""
    def term(k):
        if k.startswith("<"):
            return {"type": "uri", "value": k[1:-1]}
        if k.startswith("_:"):
            return {"type": "bnode", "value": k[2:]}
        lex, dt, lang = ser._literal_parts(k)
        t = {"type": "literal", "value": lex}
        if lang is not None:
            t["xml:lang"] = lang
        elif dt is not None and dt != "http://www.w3.org/2001/XMLSchema#string":
            t["datatype"] = dt
        return t
    rows = [{v: term(keys[int(c[i])]) for v, c in zip(res.vars, res.columns, strict=True) if c[i] != UNBOUND}
            for i in range(len(res))]
    return {"head": {"vars": list(res.vars)}, "results": {"bindings": rows}}


@settings(max_examples=60, deadline=None)
@given(st.lists(TERMS, min_size=1, max_size=40, unique=True), st.integers(1, 4), st.integers(0, 2 ** 31), st.data())
def test_mid_answers_with_unbound_cells_equal_the_row_assembly(keys, nvars, seed, data):
    rng = np.random.default_rng(seed)
    cells = data.draw(st.integers(ser.SMALL_CELLS + 1, ser.SMALL_CELLS_UNBOUND))
    n = max(1, cells // nvars)
    cols = [rng.integers(-1, len(keys), n).astype(np.int64) for _ in range(nvars)]
    cols[0][0] = UNBOUND  # at least one unbound cell
    if data.draw(st.booleans()):
        cols[-1][:] = UNBOUND  # a column never bound
    res = QueryResult(form="SELECT", terms=ser.KeyTable(keys), vars=[f"v{j}" for j in range(nvars)],
                      columns=cols, n_rows=n)
    got = ser.serialize(res, formats.SPARQL_JSON)
    assert got == _vectorized(res)
    assert json.loads(got) == _expected(res, keys)


def test_mid_answer_with_unbound_cells_skips_the_row_assembly(monkeypatch):
    keys = [f"<http://e/{i}>" for i in range(50)] + [literal_key(f"n{i}") for i in range(50)]
    n = 200  # 400 cells: past SMALL_CELLS, within SMALL_CELLS_UNBOUND
    a = np.arange(n, dtype=np.int64) % 50
    b = np.where(np.arange(n) % 3 == 0, UNBOUND, 50 + np.arange(n) % 50).astype(np.int64)
    res = QueryResult(form="SELECT", terms=ser.KeyTable(keys), vars=["a", "b"], columns=[a, b], n_rows=n)
    want = _vectorized(res)
    calls = []
    real = render.column
    monkeypatch.setattr(render, "column", lambda *x, **k: calls.append(1) or real(*x, **k))
    assert ser.serialize(res, formats.SPARQL_JSON) == want
    assert calls == []
    # the same size all bound: the row assembly (cheaper there)
    full = QueryResult(form="SELECT", terms=ser.KeyTable(keys), vars=["a", "b"],
                       columns=[a, 50 + np.arange(n, dtype=np.int64) % 50], n_rows=n)
    ser.serialize(full, formats.SPARQL_JSON)
    assert calls


@pytest.mark.parametrize("extra", [b"", b',"window":{"n":1}'])
def test_mid_answer_extra_members_and_size_bound(extra):
    keys = ["<http://e/a>", literal_key("x")]
    n = 300
    a = np.zeros(n, dtype=np.int64)
    b = np.where(np.arange(n) % 2 == 0, UNBOUND, 1).astype(np.int64)
    res = QueryResult(form="SELECT", terms=ser.KeyTable(keys), vars=["a", "b"], columns=[a, b], n_rows=n)
    body = ser.sparql_json(res, extra)
    doc = json.loads(body)
    assert len(doc["results"]["bindings"]) == n
    if extra:
        assert doc["window"] == {"n": 1}
    from engine.errors import ResponseTooLarge
    with pytest.raises(ResponseTooLarge):
        ser.sparql_json(res, extra, max_bytes=len(body) - 1)
