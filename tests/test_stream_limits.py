"""The limits of the streaming contract (engine.stream.limits), checked the same way on every
engine path: times, names, terms, UTF-8, window sizes, the persisted registry."""

from __future__ import annotations

import os

import orjson
import pyarrow as pa
import pytest

from engine.database import Database
from engine.errors import LoadError, QuerySyntaxError
from engine.stream.limits import (
    NAME_MAX,
    TIME_MAX,
    BadName,
    BadRequest,
    BadTimestamp,
    TooManyBadLines,
    parse_time,
)
from engine.stream.manager import RegistryError, StreamManager, UnknownStream
from engine.stream.registry_store import FORMAT, VERSION

EX = "http://ex.org/"
ABSURD = [TIME_MAX + 1, 99999999999999999999999, 2**63 - 1, 2**64, -1, -(2**63), 1.5, 1e3, True, False,
          "5", None]


def line(s, o, t) -> bytes:
    return orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}p>", "o": o, "t": t})


def snapshot(m):
    """Everything a bad request must leave as it was."""
    return orjson.dumps({"streams": [{k: v for k, v in s.items() if k not in ("now_ms", "lag_ms")}
                                     for s in m.streams()], "queries": m.queries()})


@pytest.mark.parametrize("t", ABSURD)
def test_absurd_heartbeat_is_refused_and_changes_nothing(env, t):
    db, m = env
    m.register_stream("m4", EX + "m4")
    m.register_query("REGISTER QUERY q AS SELECT * FROM m4 [RANGE 1s STEP 100ms] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("m4", line("a", '"1"', 500))
    m.heartbeat("m4", 1000)
    assert m.drain(20)
    before = snapshot(m)
    with pytest.raises(BadTimestamp, match="range|integer"):
        m.heartbeat("m4", t)
    assert snapshot(m) == before
    # the stream and both registries still work
    assert m.ingest_ndjson("m4", line("b", '"2"', 1500))["accepted"] == 1
    assert m.heartbeat("m4", TIME_MAX) == TIME_MAX
    assert m.drain(30)
    assert m.stream("m4")["progress"] == TIME_MAX and m.queries()[0]["next_instant"] > 1000


def test_time_range_edges_are_accepted(env):
    _, m = env
    m.register_stream("s", EX + "s")
    assert m.ingest_ndjson("s", line("a", '"x"', 0))["accepted"] == 1
    assert m.ingest_ndjson("s", line("a", '"y"', TIME_MAX))["accepted"] == 1
    assert m.heartbeat("s", TIME_MAX) == TIME_MAX


def test_parse_time_text():
    assert parse_time(" 42 ") == 42 and parse_time(str(TIME_MAX)) == TIME_MAX
    for bad in ("", "1e5", "1.0", "0x10", "1_000", "true", "-1", str(TIME_MAX + 1), "9" * 5000, "٣"):
        with pytest.raises(BadTimestamp):
            parse_time(bad)


def test_ndjson_times_out_of_range_are_bad_lines(env):
    _, m = env
    m.register_stream("s", EX + "s")
    body = b"\n".join([line("a", '"1"', 10), line("b", '"2"', TIME_MAX + 1), line("c", '"3"', -5),
                       line("d", '"4"', 2**63 - 1), line("e", '"5"', 20), line("f", '"6"', 2.5),
                       line("g", '"7"', True), b'{"s":"<urn:h>","p":"<urn:p>","o":"<urn:o>","t":1000000000000000000000000000000}'])
    r = m.ingest_ndjson("s", body)
    assert r["accepted"] == 2 and r["progress"] == 20, r
    assert [e["line"] for e in r["errors"]] == [2, 3, 4, 6, 7, 8]
    assert all("'t'" in e["error"] for e in r["errors"])
    # all lines in int64 (the vectorized path) but some beyond the contract's range
    r = m.ingest_ndjson("s", b"\n".join([line("a", '"1"', 30), line("b", '"2"', 2**62)]))
    assert r["accepted"] == 1 and r["errors"][0]["line"] == 2 and "range" in r["errors"][0]["error"]
    assert m.stream("s")["progress"] == 30


def _arrow(t: pa.Array) -> pa.Table:
    n = len(t)
    return pa.table({"s": [f"<{EX}s{i}>" for i in range(n)], "p": [f"<{EX}p>"] * n,
                     "o": [f'"{i}"' for i in range(n)], "t": t})


@pytest.mark.parametrize(("col", "good"), [
    (pa.array([5, TIME_MAX + 1, -1, 7], pa.int64()), [1, 4]),
    (pa.array([5, 2**64 - 1, 2**63, 7], pa.uint64()), [1, 4]),
    (pa.array([5, -3, 7], pa.int32()), [1, 3]),
    # seconds: 10^17 s is beyond int64 once in ms (an unsafe cast would wrap around)
    (pa.array([5, 10**17, TIME_MAX // 1000 + 1, 7], pa.timestamp("s")), [1, 4]),
    (pa.array([5_000_000, -1_000_000, -1, 7_000_000], pa.timestamp("ns", "UTC")), [1, 4]),
    (pa.array([5000, None, 7000], pa.timestamp("us")), [1, 3]),
])
def test_arrow_times_out_of_range_are_bad_rows(env, col, good):
    _, m = env
    m.register_stream("s", EX + "s")
    r = m.ingest_arrow("s", _arrow(col))
    assert r["accepted"] == len(good), r
    bad = sorted(set(range(1, len(col) + 1)) - set(good))
    assert [e["line"] for e in r["errors"]] == bad
    assert 0 <= m.stream("s")["progress"] <= 7000


def test_graph_time_out_of_range_changes_nothing(env):
    db, m = env
    m.register_stream("s", EX + "s")
    m.heartbeat("s", 10)
    before = snapshot(m)
    n_terms = len(db.store.dictionary)
    for t in (TIME_MAX + 1, -1, 10**25, 1.5, True):
        with pytest.raises(BadTimestamp):
            m.ingest_graph("s", f"<{EX}a> <{EX}p> <{EX}b> .\n".encode(), "application/n-triples", t)
    assert snapshot(m) == before and len(db.store.dictionary) == n_terms


# ---------------------------------------------------------------- names


def test_names_have_one_rule_and_a_length_limit(env):
    _, m = env
    ok = "a" * NAME_MAX
    m.register_stream(ok, EX + "ok")
    for bad in ("a" * (NAME_MAX + 1), "a" * 100_000, "a b", "", "é", "a/b"):
        with pytest.raises(BadName):
            m.register_stream(bad, EX + "x")
    assert [s["name"] for s in m.streams()] == [ok]
    info = m.register_query(f"REGISTER QUERY {'q' * NAME_MAX} AS SELECT * FROM {ok} [RANGE 1s STEP 1s] "
                            "WHERE { ?s ?p ?o }")
    assert m.query(info["id"])["id"] == "q" * NAME_MAX
    for text in (f"REGISTER QUERY {'q' * (NAME_MAX + 1)} AS SELECT * FROM {ok} [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}",
                 f"REGISTER QUERY <{'q' * 100_000}> AS SELECT * FROM {ok} [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}",
                 f"REGISTER QUERY q2 AS SELECT * FROM {'s' * (NAME_MAX + 1)} [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}"):
        with pytest.raises(QuerySyntaxError, match="at most 128") as ei:
            m.register_query(text)
        assert len(str(ei.value)) < 400   # the name is not echoed back
    assert len(m.queries()) == 1


def test_stream_iri_and_absorb_limits(env):
    _, m = env
    for iri in (EX + "x" * 5000, "urn:a b", "no-colon", "http://ex.org/<"):
        with pytest.raises(BadRequest):
            m.register_stream("s", iri)
    with pytest.raises(BadRequest):
        m.register_stream("s", EX + "s", absorb=[EX + f"p{i}" for i in range(2000)])
    with pytest.raises(BadRequest):
        m.register_stream("s", EX + "s", absorb=["urn:a b"])
    assert m.streams() == []


@pytest.mark.parametrize("window", [
    "[RANGE 999999999999d STEP 1ms]", "[RANGE 1s STEP 999999999999d]", "[RANGE 0s STEP 1s]",
    "[RANGE 1s STEP 0ms]", "[RANGE TRIPLES 1000000000000000000]", "[RANGE TRIPLES 0]",
    "[RANGE 9007199254740992ms STEP 1s]", "[RANGE " + "9" * 5000 + "ms STEP 1s]",
])
def test_window_limits(env, window):
    _, m = env
    m.register_stream("s", EX + "s")
    with pytest.raises(QuerySyntaxError) as ei:
        m.register_query(f"REGISTER QUERY q AS SELECT * FROM s {window} WHERE {{ ?s ?p ?o }}")
    assert len(str(ei.value)) < 400
    assert m.queries() == []


def test_largest_windows_work(env):
    _, m = env
    m.register_stream("s", EX + "s")
    m.register_query("REGISTER QUERY big AS SELECT * FROM s [RANGE 9007199254740991ms STEP 1ms] WHERE { ?s ?p ?o }")
    m.register_query("REGISTER QUERY cnt AS SELECT * FROM s [RANGE TRIPLES 1000000000 STEP 1ms] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("s", line("a", '"1"', 0))
    m.ingest_ndjson("s", line("b", '"2"', 10**15))
    m.heartbeat("s", TIME_MAX)
    assert m.drain(60)
    for q in ("big", "cnt"):
        evs = m.log(q).since(None, from_t=0)
        assert evs[-1].id == TIME_MAX - 1
        last = [e for e in evs if e.event == "result"][-1]
        assert len(orjson.loads(last.data)["results"]["bindings"]) == 2


def test_no_query_registers_against_a_stream_being_deleted(env):
    _, m = env
    m.register_stream("s", EX + "s")
    m._reg.streams["s"].deleting = True   # the state delete_stream holds while it removes the readers
    with pytest.raises(UnknownStream):
        m.register_query("REGISTER QUERY q AS SELECT * FROM s [RANGE 1s STEP 1s] WHERE { ?s ?p ?o }")
    m._reg.streams["s"].deleting = False
    m.delete_stream("s")
    assert m.streams() == [] and m.queries() == []


# ---------------------------------------------------------------- terms and UTF-8


BAD_IRIS = ["<urn:a b>", "<urn:a\tb>", "<urn:a{b}>", "<urn:a|b>", "<urn:a^b>", "<urn:a`b>", "<urn:a\\b>",
            '<urn:a"b>', "<urn:a\x01b>", "<noscheme>"]


@pytest.mark.parametrize("iri", BAD_IRIS)
def test_terms_follow_the_ntriples_grammar_on_every_path(env, iri):
    db, m = env
    m.register_stream("s", EX + "s")
    good = {"s": f"<{EX}a>", "p": f"<{EX}p>", "o": f"<{EX}b>", "t": 1}
    for where in ("s", "p", "o"):
        row = dict(good, **{where: iri})
        nd = m.ingest_ndjson("s", orjson.dumps(good) + b"\n" + orjson.dumps(row))
        assert nd["accepted"] == 1 and [e["line"] for e in nd["errors"]] == [2], (where, nd)
        tab = pa.table({k: [good[k], row[k]] for k in "spot"})
        ar = m.ingest_arrow("s", tab)
        assert ar["accepted"] == 1 and [e["line"] for e in ar["errors"]] == [2], (where, ar)
        nt = " ".join(row[k] for k in "spo") + " .\n"
        with pytest.raises(LoadError):
            m.ingest_graph("s", nt.encode(), "application/n-triples", 5)
    # literals with the same characters and escaped IRIs are fine everywhere
    ok = dict(good, o='"a b {|}^`"', s="<urn:a\\u00E9>")
    assert m.ingest_ndjson("s", orjson.dumps(ok))["accepted"] == 1
    assert m.ingest_arrow("s", pa.table({k: [ok[k]] for k in "spot"}))["accepted"] == 1


def test_invalid_utf8_is_a_bad_line_not_a_crash(env):
    _, m = env
    m.register_stream("s", EX + "s")
    body = (line("a", '"ok"', 1) + b"\n" + b'{"s":"<urn:a>","p":"<urn:p>","o":"\xff\xfe","t":2}\n'
            + b'{"s":"<urn:\xc3>","p":"<urn:p>","o":"\\"x\\"","t":3}\n' + line("b", '"ok"', 4))
    r = m.ingest_ndjson("s", body)
    assert r["accepted"] == 2 and [e["line"] for e in r["errors"]] == [2, 3], r
    assert all("UTF-8" in e["error"] for e in r["errors"])
    # invalid UTF-8 outside the strings: the per-line path reports it too
    r = m.ingest_ndjson("s", line("c", '"ok"', 5) + b"\n{\"s\"\xff:1}\n")
    assert r["accepted"] == 1 and [e["line"] for e in r["errors"]] == [2]


def test_invalid_utf8_in_an_arrow_column(env):
    _, m = env
    m.register_stream("s", EX + "s")
    raw = [b"<urn:a>", b"<urn:\xff>", b'"\xc3"', b"<urn:b>"]
    offsets = [0]
    for v in raw:
        offsets.append(offsets[-1] + len(v))
    col = pa.Array.from_buffers(pa.string(), len(raw), [None, pa.py_buffer(pa.array(offsets, pa.int32())
                                                                         .buffers()[1]), pa.py_buffer(b"".join(raw))])
    tab = pa.table({"s": [f"<{EX}s{i}>" for i in range(4)], "p": [f"<{EX}p>"] * 4, "o": col, "t": [1, 2, 3, 4]})
    r = m.ingest_arrow("s", tab)
    assert r["accepted"] == 2 and [e["line"] for e in r["errors"]] == [2, 3], r
    dict_col = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), col.slice(0, 2))
    tab = pa.table({"s": [f"<{EX}s{i}>" for i in range(3)], "p": [f"<{EX}p>"] * 3, "o": dict_col, "t": [5, 6, 7]})
    r = m.ingest_arrow("s", tab)
    assert r["accepted"] == 2 and [e["line"] for e in r["errors"]] == [2], r


# ---------------------------------------------------------------- restore from the data dir


def _write_registry(d, streams, queries=()):
    doc = orjson.dumps({"format": FORMAT, "version": VERSION, "streams": streams, "queries": list(queries)})
    with open(os.path.join(d, "streams.json"), "wb") as f:   # a progress beyond 64 bits, as a client could write it
        f.write(doc.replace(b'"HUGE"', b"99999999999999999999999"))


@pytest.mark.parametrize("stream", [
    {"name": "s", "iri": EX + "s", "absorb": "none", "clock": "event", "progress": "HUGE"},
    {"name": "s", "iri": EX + "s", "absorb": "none", "clock": "event", "progress": -5},
    {"name": "s" * 100_000, "iri": EX + "s", "absorb": "none", "clock": "event", "progress": 5},
    {"name": "s", "iri": "urn:a b", "absorb": "none", "clock": "event", "progress": 5},
])
def test_restore_refuses_out_of_contract_registry(tmp_path, stream):
    _write_registry(str(tmp_path), [stream])
    with pytest.raises(RegistryError) as ei:
        StreamManager(Database(shards=1), data_dir=str(tmp_path))
    assert "streams.json" in str(ei.value) and len(str(ei.value)) < 1000


def test_restore_refuses_a_too_long_query_name(tmp_path):
    name = "q" * 1000
    _write_registry(str(tmp_path), [{"name": "s", "iri": EX + "s", "absorb": "none", "clock": "event",
                                     "progress": 5}],
                    [{"name": name, "text": f"REGISTER QUERY {name} AS SELECT * FROM s [RANGE 1s STEP 1s] "
                                           "WHERE { ?s ?p ?o }"}])
    with pytest.raises(RegistryError, match="at most 128"):
        StreamManager(Database(shards=1), data_dir=str(tmp_path))


# ---------------------------------------------------------------- bad-line floods


def test_a_flood_of_bad_lines_is_refused_whole(env):
    db, m = env
    m.register_stream("s", EX + "s")
    m.ingest_ndjson("s", line("a", '"1"', 5))
    n_terms = len(db.store.dictionary)
    before = snapshot(m)
    floods = [b"x\n" * 200_000,
              b'{"s":"<urn:a b>","p":"<urn:p>","o":"<urn:o>","t":9}\n' * 100_001,
              b'{"s":"<urn:a>","p":"<urn:p>","o":"<urn:o>","t":9999999999999999}\n' * 100_001,
              b"\n".join([line("b", '"2"', 10)] + [line("c", '"3"', 1)] * 100_001)]   # late elements
    for body in floods:
        with pytest.raises(TooManyBadLines, match="nothing was stored; the first: line"):
            m.ingest_ndjson("s", body)
    tab = pa.table({"s": ["<urn:a b>"] * 100_001, "p": [f"<{EX}p>"] * 100_001, "o": ['"x"'] * 100_001,
                    "t": [9] * 100_001})
    with pytest.raises(TooManyBadLines):
        m.ingest_arrow("s", tab)
    assert snapshot(m) == before and len(db.store.dictionary) == n_terms
    # exactly at the limit: reported line by line, the good lines kept
    body = b"\n".join([line("d", '"4"', 20)] + [b"x"] * 100_000)
    r = m.ingest_ndjson("s", body)
    assert r["accepted"] == 1 and r["rejected"] == 100_000 and len(r["errors"]) == 100_000


def test_large_body_with_a_few_bad_lines_keeps_line_numbers(env):
    _, m = env
    m.register_stream("s", EX + "s")
    rows = [line(f"s{i}", f'"{i}"', i) for i in range(40_000)]   # about 2.5 MB: parsed in pieces
    bad = {3: b"not json", 20_000: b'{"s":"<urn:a b>","p":"<urn:p>","o":"<urn:o>","t":20000}',
           39_990: b'{"s":"<urn:a>","p":"<urn:p>","o":"<urn:o>","t":-1}'}
    for i, b in bad.items():
        rows[i] = b
    rows.insert(100, b"   ")   # a blank line shifts the numbers after it
    body = b"\n".join(rows)
    assert len(body) > 2 << 20
    r = m.ingest_ndjson("s", body)
    assert r["accepted"] == 40_000 - 3 and [e["line"] for e in r["errors"]] == [4, 20_002, 39_992], r["errors"]
    assert "UTF-8" not in str(r["errors"]) and "range" in r["errors"][2]["error"]
