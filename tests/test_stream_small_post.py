"""The plain-Python path of small ndjson POSTs (engine.stream.adaptor._small_ndjson) and the
small-key path of Dictionary.numeric_values answer exactly as the general paths do."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.kv import dictionary as dmod
from engine.stream import adaptor
from engine.stream.limits import TooManyBadLines
from engine.stream.manager import StreamManager

_DEFAULT_SMALL = adaptor.SMALL_LINES
XSD = "http://www.w3.org/2001/XMLSchema#"

IRIS = ["<http://example.org/a>", "<http://example.org/b%20c>", "<http://ex.org/\u00e9t\u00e9>",
        "<http://ex.org/\\u0041>", " <http://example.org/a> ", "<urn:x:1>", "<http://example.org/sensor/7>"]
BNODES = ["_:b0", "_:x.y", "_:\u00e9", "_:b0 "]
LITERALS = ['"plain"', '"caf\u00e9"@fr', '"Hallo"@DE-at', '"x"^^<http://www.w3.org/2001/XMLSchema#string>',
            f'"12"^^<{XSD}integer>', f'"-0.5"^^<{XSD}decimal>', f'"1e3"^^<{XSD}double>', f'"NaN"^^<{XSD}float>',
            f'"true"^^<{XSD}boolean>', '"a\\nb"', '"tab\\there"', '"\\u00e9"', '"q\\"uote"', '"\U0001F600"',
            f'"2026-01-01T00:00:00Z"^^<{XSD}dateTime>', '""']
BAD_TERMS = ["<not an iri>", "http://no-brackets", '"unterminated', "<a>", "", "_:", '"x"@', 42, None,
             ["<http://example.org/a>"], '"x"^^<bad iri>']

good_s = st.sampled_from(IRIS + BNODES)
good_p = st.sampled_from([i for i in IRIS])
good_o = st.sampled_from(IRIS + BNODES + LITERALS)
any_term = st.one_of(good_o, st.sampled_from(BAD_TERMS), st.text(max_size=6))


@st.composite
def line(draw) -> bytes:
    kind = draw(st.sampled_from(["good"] * 8 + ["term", "missing", "t", "json", "blank", "array", "dup"]))
    obj: dict = {"s": draw(good_s), "p": draw(good_p), "o": draw(good_o)}
    t = draw(st.integers(1_700_000_000_000, 1_700_000_000_100))
    if kind == "term":
        obj[draw(st.sampled_from(["s", "p", "o"]))] = draw(any_term)
    elif kind == "missing":
        del obj[draw(st.sampled_from(["s", "p", "o"]))]
    if kind == "t":
        tv = draw(st.sampled_from([None, "5", 1.5, True, -(2**70), 2**62, "absent"]))
        if tv != "absent":
            obj["t"] = tv
    else:
        obj["t"] = t
    if kind == "json":
        return draw(st.sampled_from([b"{not json", b'{"s": "<http://a>",', b"\x0b", b"null", b"42"]))
    if kind == "blank":
        return draw(st.sampled_from([b"", b"   ", b"\t\r"]))
    ascii_ = draw(st.booleans())
    if draw(st.booleans()):
        obj = dict(obj, extra={"nested": [1, 2]})
    if kind == "array":
        return _dumps([obj], ascii_)
    raw = _dumps(obj, ascii_)
    if kind == "dup":
        raw = raw[:-1] + b',"s":"<http://example.org/dup>"}'
    return raw


def _dumps(obj, ascii_: bool) -> bytes:
    """JSON with or without \\u escapes (a lone surrogate from st.text: escaped)."""
    try:
        return json.dumps(obj, ensure_ascii=ascii_).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj).encode("utf-8")


bodies = st.lists(line(), min_size=0, max_size=12).map(lambda ls: b"\n".join(ls)) | \
    st.lists(line(), min_size=1, max_size=12).map(lambda ls: b"\n".join(ls) + b"\n")


def _outcome(fn, *args):
    try:
        r = fn(*args)
    except TooManyBadLines as e:
        return ("too many", str(e))
    cast = [x.cast(pa.large_string()).to_pylist() for x in (r.s, r.p, r.o)]
    return (cast, r.line.tolist(), r.t[r.has_t].tolist(), r.has_t.tolist(), r.errors)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies, st.booleans(), st.sampled_from(["", "L7x"]))
def test_small_path_matches_general(body, need_t, prefix):
    general = _outcome(adaptor._general_ndjson, body, need_t, prefix)
    small = adaptor._small_ndjson(body, need_t, prefix)
    if small is not None:
        assert not small.errors
        got = _outcome(lambda *a: small)
        if need_t:
            assert got == general
        else:   # an arrival-clock stream's t is not read (the two general sub-paths differ there)
            assert got[:2] == general[:2] and got[4] == general[4]
    # whatever path parse_ndjson takes, the answer is the general path's
    whole = _outcome(lambda b: adaptor.parse_ndjson(b, need_t=need_t, bnode_prefix=prefix), body)
    if need_t:
        assert whole == general
    else:
        assert whole[:2] == general[:2] and whole[4] == general[4]


def test_small_path_taken_for_good_small_bodies():
    good = b"\n".join(orjson.dumps({"s": s, "p": "<http://example.org/p>", "o": o, "t": 5 + i})
                      for i, (s, o) in enumerate(zip(IRIS + BNODES, LITERALS, strict=False))) + b"\n"
    before = dict(adaptor.small_path_stats)
    r = adaptor.parse_ndjson(good, bnode_prefix="L1x")
    assert adaptor.small_path_stats["taken"] == before["taken"] + 1
    assert not r.errors and len(r) == len(IRIS + BNODES)
    bad = good + b'{"s": "<not an iri>", "p": "<http://example.org/p>", "o": "<http://example.org/o>", "t": 9}\n'
    r = adaptor.parse_ndjson(bad)
    assert adaptor.small_path_stats["fallback"] == before["fallback"] + 1
    assert [e["line"] for e in r.errors] == [len(IRIS + BNODES) + 1]
    big = b"\n".join([good.split(b"\n")[0]] * (adaptor.SMALL_LINES + 1))
    n = adaptor.small_path_stats["taken"]
    adaptor.parse_ndjson(big)
    assert adaptor.small_path_stats["taken"] == n   # a large body goes straight to the general path


def _run(bodies_: list[bytes], small: bool, clock: str, monkeypatch) -> tuple[list, list]:
    monkeypatch.setattr(adaptor, "SMALL_LINES", _DEFAULT_SMALL if small else 0)
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("s", "http://example.org/s", clock=clock)
        m.heartbeat("s", 1_700_000_000_000)
        reports = []
        for b in bodies_:
            try:
                reports.append(m.ingest_ndjson("s", b))
            except Exception as e:   # noqa: BLE001 - the error itself is compared
                reports.append((type(e).__name__, str(e)))
        st_ = m._reg.stream("s")
        rows, tau = st_.store.read(st_.store.live_start, st_.store.end_seq)
        keys = [db.store.dictionary.keys(rows[:, j]) for j in range(3)]
        stored = list(zip(*keys, (tau.tolist() if clock == "event" else [0] * len(tau)), strict=True))
        for r in reports:
            if isinstance(r, dict) and clock != "event":
                r.pop("progress")
        return reports, stored
    finally:
        m.close()
        db.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(bodies, min_size=1, max_size=5), st.sampled_from(["event", "arrival"]))
def test_manager_same_rows_reports_and_progress(monkeypatch, bodies_, clock):
    """Out-of-order times across POSTs (late elements), bad lines, duplicates: the same
    reports, progress and stored rows (as keys, blank nodes relabeled per POST) either way."""
    assert _run(bodies_, True, clock, monkeypatch) == _run(bodies_, False, clock, monkeypatch)


def test_manager_takes_the_small_path():
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("s", "http://example.org/s")
        n = adaptor.small_path_stats["taken"]
        r = m.ingest_ndjson("s", b'{"s": "_:b", "p": "<http://example.org/p>", "o": "\\"1\\"", "t": 5}\n')
        assert r["accepted"] == 1 and adaptor.small_path_stats["taken"] == n + 1
    finally:
        m.close()
        db.close()


# ---------------------------------------------------------------- Dictionary.numeric_values
NUM_TYPES = ["integer", "int", "long", "short", "byte", "unsignedByte", "unsignedLong", "nonNegativeInteger",
             "positiveInteger", "negativeInteger", "nonPositiveInteger", "decimal", "double", "float", "boolean",
             "Integer", "string"]
lexes = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["+5", "-0", "007", "1.", ".5", "-.5e-3", "1e400", "INF", "-INF", "+INF", "NaN", "nan",
                     "1_000", "\u0661", " 1", "1 ", "1\n", "", "+", "9007199254740993", "18446744073709551615",
                     "18446744073709551616", "-9223372036854775809", "1" * 40]),
    st.floats(allow_nan=False).map(repr),
    st.text("0123456789+-.eE", max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(lexes, st.sampled_from(NUM_TYPES)), min_size=1, max_size=dmod._SMALL_NUMERIC))
def test_numeric_small_matches_vectorized(items):
    keys = [f'"{lex}"^^<{XSD}{dt}>' for lex, dt in items] + ['"12"', "<http://example.org/1>"]
    keys = keys[: dmod._SMALL_NUMERIC]
    arr = pa.array(keys, pa.large_string())
    small = dmod.numeric_values(arr)
    monkey = dmod._SMALL_NUMERIC
    try:
        dmod._SMALL_NUMERIC = 0
        vec = dmod.numeric_values(arr)
    finally:
        dmod._SMALL_NUMERIC = monkey
    assert [None if math.isnan(x) else x for x in small.tolist()] == \
        [None if math.isnan(x) else x for x in vec.tolist()]


def test_numeric_small_path_taken(monkeypatch):
    calls = []
    real = dmod._numeric_small
    monkeypatch.setattr(dmod, "_numeric_small", lambda keys: calls.append(len(keys)) or real(keys))
    out = dmod.numeric_values(pa.array([f'"3"^^<{XSD}int>', '"x"'], pa.large_string()))
    assert calls == [2] and out[0] == 3.0 and np.isnan(out[1])


# ---------------------------------------------------------------- Dictionary.encode of a few keys
def _no_surrogate(k: str) -> bool:
    return all(not 0xD800 <= ord(c) <= 0xDFFF for c in k)


keys_st = st.lists(st.one_of(st.sampled_from(IRIS + LITERALS + ['"1"^^<http://www.w3.org/2001/XMLSchema#int>']),
                             st.text(max_size=120).filter(_no_surrogate),
                             st.text(min_size=90, max_size=400).filter(_no_surrogate)),
                   min_size=1, max_size=dmod._SMALL_ENCODE)


@settings(max_examples=200, deadline=None)
@given(st.lists(keys_st, min_size=1, max_size=6))
def test_encode_few_matches_batch_path(batches):
    """Same ids, numeric values and index (so the same later lookups) with and without the
    key-by-key path, over batches that repeat keys across and within batches."""
    a, b = dmod.Dictionary(), dmod.Dictionary()
    for keys in batches:
        arr = pa.array(keys, pa.large_string())
        got = a.encode(arr)
        saved = dmod._SMALL_ENCODE
        try:
            dmod._SMALL_ENCODE = 0
            want = b.encode(arr)
        finally:
            dmod._SMALL_ENCODE = saved
        assert got.tolist() == want.tolist()
    assert len(a) == len(b)
    ra, rb = a.raw_arrays(), b.raw_arrays()
    for k in ("blob", "offsets", "hashes", "hash_ids"):
        assert ra[k].tolist() == rb[k].tolist()
    assert np.array_equal(ra["numeric"], rb["numeric"], equal_nan=True)
    for keys in batches:
        assert [a.lookup(k) for k in keys] == b.lookup_many(pa.array(keys, pa.large_string())).tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=8))
def test_hash_key_matches_hash_batch(keys):
    data = np.frombuffer(b"".join(keys), dtype=np.uint8)
    offsets = np.concatenate(([0], np.cumsum([len(k) for k in keys]))).astype(np.int64)
    assert dmod.hash_batch(data, offsets).tolist() == [dmod.hash_key(k) for k in keys]


def test_encode_few_taken(monkeypatch):
    calls = []
    real = dmod.Dictionary._encode_few
    monkeypatch.setattr(dmod.Dictionary, "_encode_few", lambda self, ks: calls.append(len(ks)) or real(self, ks))
    d = dmod.Dictionary()
    assert d.encode(pa.array(["<http://a.example/>", '"x"', "<http://a.example/>"], pa.large_string())).tolist() \
        == [0, 1, 0]
    assert calls == [3]
