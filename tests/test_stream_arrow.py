"""StreamManager.ingest_arrow: validation, per-row errors, progress, absorb, budget, idempotent batch ids."""

from __future__ import annotations

import os

import numpy as np
import orjson
import pyarrow as pa
import pytest

from engine.database import Database
from engine.io import ingest
from engine.stream.absorb import absorb
from engine.stream.adaptor import BadArrowBatch
from engine.stream.ledger import LEDGER_NAME, BatchLedger
from engine.stream.manager import StreamManager
from engine.stream.registry_store import RegistryError
from engine.stream.transient import TransientStoreFull

EX = "http://ex.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"


def iri(x: str) -> str:
    return f"<{EX}{x}>"


def table(rows, t_type=pa.int64(), s_type=pa.string()) -> pa.Table:
    s, p, o, t = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [], [], [])
    return pa.table({"s": pa.array(s, s_type), "p": pa.array(p, s_type), "o": pa.array(o, s_type),
                     "t": pa.array(t, t_type)})


def ndjson(rows) -> bytes:
    out = []
    for s, p, o, t in rows:
        d = {"s": s, "p": p, "o": o}
        if t is not None:
            d["t"] = t
        out.append(orjson.dumps(d))
    return b"\n".join(out) + b"\n"


def window_keys(db, m, name) -> list[tuple[str, str, str, int]]:
    st = m._reg.streams[name].store
    spo, tau = st.read(st.live_start, st.end_seq)
    d = db.store.dictionary
    return [(*d.keys(r), int(x)) for r, x in zip(spo, tau, strict=True)]


def counters(m, name) -> dict:
    """The stream's state that ingestion changes (its info also has wall-clock fields)."""
    info = m.stream(name)
    return {k: info[k] for k in ("progress", "accepted", "rejected", "triples_in_window_store", "bytes")}


def n_of(db, pattern: str) -> int:
    key = db.query(f"SELECT (COUNT(*) AS ?n) WHERE {{ {pattern} }}").rows()[0]["n"]
    return int(key.split('"')[1])


MIXED = [
    (iri("a"), iri("p"), '"caf\\u00e9"', 10),                       # escape: slow per value, accepted
    (iri("a"), iri("p"), f'"x"^^<{XSD}string>', 10),                  # folded to "x"
    (iri("b"), iri("p"), '"hi"@EN', 11),                              # lang tag lower-cased
    ("_:n1", iri("p"), "_:n2", 12),                                   # blank nodes, relabelled
    (f" {iri('c')} ", iri("p"), iri("d"), 12),                         # spaces around a term
    ('"lit"', iri("p"), iri("d"), 13),                                # literal subject: bad
    (iri("a"), "_:q", iri("d"), 13),                                  # blank predicate: bad
    (iri("a"), iri("p"), "nonsense", 14),                             # not a term: bad
    (None, iri("p"), iri("d"), 14),                                   # missing s: bad
    (iri("e"), iri("p"), iri("f"), None),                             # missing t: bad
    (iri("e"), iri("p"), iri("late"), 5),                             # below progress: late
    (iri("e"), iri("p"), iri("g"), 20),
]


def test_arrow_matches_ndjson_rows_errors_and_window():
    """The Arrow path and the ndjson path accept the same terms with the same per-row errors."""
    out = []
    for kind in ("ndjson", "arrow"):
        db = Database(shards=2)
        m = StreamManager(db)
        try:
            m.register_stream("s", EX + "s")
            if kind == "ndjson":
                r = m.ingest_ndjson("s", ndjson(MIXED))
            else:
                r = m.ingest_arrow("s", table(MIXED))
            keys = window_keys(db, m, "s")
            out.append((r, [(s if not s.startswith("_:") else "_", p, o if not o.startswith("_:") else "_", t)
                            for s, p, o, t in keys]))
        finally:
            m.close()
    (r_nd, w_nd), (r_ar, w_ar) = out
    assert r_ar == r_nd
    assert r_ar["accepted"] == 6 and r_ar["rejected"] == 6 and r_ar["progress"] == 20
    assert [e["line"] for e in r_ar["errors"]] == [6, 7, 8, 9, 10, 11]
    msgs = {e["line"]: e["error"] for e in r_ar["errors"]}
    assert msgs[9] == "missing 's'" and msgs[10] == "missing 't' (event time in ms)"
    assert "late element" in msgs[11] and "subject" in msgs[6] and "predicate" in msgs[7]
    assert w_ar == w_nd
    assert (iri("a"), iri("p"), '"café"', 10) in w_ar and (iri("a"), iri("p"), '"x"', 10) in w_ar
    assert (iri("b"), iri("p"), '"hi"@en', 11) in w_ar and (iri("c"), iri("p"), iri("d"), 12) in w_ar


def test_arrow_input_shapes(env):
    """RecordBatch, dictionary columns, several chunks, string/large_string, narrower int t, extra columns."""
    db, m = env
    m.register_stream("s", EX + "s")
    rows = [(iri(f"x{i}"), iri("p"), f'"{i}"', 100 + i) for i in range(6)]
    tab = table(rows[:2])
    assert m.ingest_arrow("s", tab.to_batches()[0])["accepted"] == 2
    dict_tab = pa.table({"s": pa.array([r[0] for r in rows[2:4]]).dictionary_encode(),
                         "p": pa.array([r[1] for r in rows[2:4]], pa.large_string()).dictionary_encode(),
                         "o": pa.array([r[2] for r in rows[2:4]], pa.large_string()),
                         "t": pa.array([r[3] for r in rows[2:4]], pa.int32()),
                         "extra": pa.array([1.5, 2.5])})
    assert m.ingest_arrow("s", dict_tab)["accepted"] == 2
    chunked = pa.concat_tables([table(rows[4:5]), table(rows[5:6], s_type=pa.large_string())],
                               promote_options="permissive")
    assert chunked.column("s").num_chunks == 2
    r = m.ingest_arrow("s", chunked)
    assert r == {"accepted": 2, "rejected": 0, "errors": [], "progress": 105}
    assert [k[2] for k in window_keys(db, m, "s")] == [f'"{i}"' for i in range(6)]
    assert m.ingest_arrow("s", table([]))["accepted"] == 0
    # timestamps of any unit (Spark sends timestamp[us]) count as whole milliseconds
    ts = pa.table({"s": [iri("ts")] * 2, "p": [iri("p")] * 2, "o": ['"a"', '"b"'],
                   "t": pa.array([200_000_999, 201_000_000], pa.timestamp("us", "UTC"))})
    assert m.ingest_arrow("s", ts)["progress"] == 201_000
    assert [k[3] for k in window_keys(db, m, "s")][-2:] == [200_000, 201_000]


@pytest.mark.parametrize("bad, why", [
    (pa.table({"s": [iri("a")], "p": [iri("p")], "o": [iri("b")]}), "missing column"),
    (pa.table({"s": [1], "p": [iri("p")], "o": [iri("b")], "t": [1]}), "column 's' must hold strings"),
    (pa.table({"s": [iri("a")], "p": [iri("p")], "o": [b"<x>"], "t": [1]}), "column 'o' must hold strings"),
    (pa.table({"s": [iri("a")], "p": [iri("p")], "o": [iri("b")], "t": [1.5]}), "column 't' must be int64"),
    (pa.table({"s": [iri("a")], "p": [iri("p")], "o": [iri("b")], "t": ["5"]}), "column 't' must be int64"),
    ({"s": [iri("a")]}, "expected a pyarrow Table"),
])
def test_bad_columns_change_nothing(env, bad, why):
    db, m = env
    m.register_stream("s", EX + "s")
    m.ingest_arrow("s", table([(iri("a"), iri("p"), iri("b"), 50)]))
    n_terms = len(db.store.dictionary)
    before = counters(m, "s")
    with pytest.raises(BadArrowBatch, match=why):
        m.ingest_arrow("s", bad, batch_id="b1")
    assert len(db.store.dictionary) == n_terms
    assert counters(m, "s") == before
    assert not m.batch_seen("s", "b1")


def test_unknown_stream_is_keyerror(env):
    _, m = env
    with pytest.raises(KeyError):
        m.ingest_arrow("nope", table([(iri("a"), iri("p"), iri("b"), 1)]))


def test_absorb_and_timeless(env):
    """absorb=[p] commits only p-triples to the default graph; all triples stay in the window."""
    db, m = env
    m.register_stream("s", EX + "s", absorb=[EX + "name"])
    rows = [(iri(f"x{i}"), iri("name" if i % 2 else "temp"), f'"{i}"', 1000 + i) for i in range(10)]
    r = m.ingest_arrow("s", table(rows))
    assert r["accepted"] == 10
    assert n_of(db, f"?x {iri('name')} ?v") == 5
    assert n_of(db, f"?x {iri('temp')} ?v") == 0
    assert len(window_keys(db, m, "s")) == 10


def test_arrival_clock_needs_no_t(env):
    db, m = env
    m.register_stream("s", EX + "s", clock="arrival", absorb="all")
    r = m.ingest_arrow("s", pa.table({"s": [iri("a")], "p": [iri("p")], "o": [iri("b")]}))
    assert r["accepted"] == 1 and r["progress"] is not None
    assert n_of(db, "?x ?p ?o") == 1


def test_continuous_query_sees_arrow_batches(env):
    db, m = env
    m.register_stream("s", EX + "s")
    m.register_query(f"REGISTER QUERY q AS SELECT ?o FROM s [RANGE 1s STEP 1s] WHERE {{ ?x {iri('p')} ?o }}")
    m.ingest_arrow("s", table([(iri("a"), iri("p"), f'"{i}"', 100 * i + 100) for i in range(5)]))
    m.heartbeat("s", 1001)
    assert m.drain(30)
    evs = [orjson.loads(e.data) for e in m.log("q").since(None, from_t=-(1 << 62)) if e.event == "result"]
    last = [e for e in evs if e["window"]["end"] == 1000][0]
    assert sorted(b["o"]["value"] for b in last["results"]["bindings"]) == [str(i) for i in range(5)]


def test_duplicate_batches_change_nothing(env):
    db, m = env
    m.register_stream("s", EX + "s", absorb="all")
    m.register_stream("s2", EX + "s2")
    tab = table([(iri("a"), iri("p"), iri(f"o{i}"), 10 + i) for i in range(3)])
    r = m.ingest_arrow("s", tab, batch_id="k1")
    assert r["accepted"] == 3 and r["duplicate"] is False and r["batch_id"] == "k1"
    info, n_terms, sn = counters(m, "s"), len(db.store.dictionary), db.store.snapshot().sn
    # the same id again, even with other content (a re-delivery): skipped, no new terms, no commit
    other = table([(iri("new"), iri("p"), iri("fresh"), 99)])
    r2 = m.ingest_arrow("s", other, batch_id="k1")
    assert r2 == {"accepted": 0, "rejected": 0, "errors": [], "progress": 12, "duplicate": True,
                  "batch_id": "k1", "original": {"accepted": 3, "rejected": 0}}
    assert counters(m, "s") == info and len(db.store.dictionary) == n_terms
    assert db.store.snapshot().sn == sn
    # ids are per stream and shared by the ndjson and graph paths
    assert m.ingest_arrow("s2", tab, batch_id="k1")["duplicate"] is False
    assert m.ingest_ndjson("s", ndjson([(iri("a"), iri("p"), iri("z"), 50)]), batch_id="k1")["duplicate"]
    assert m.ingest_ndjson("s", ndjson([(iri("a"), iri("p"), iri("z"), 50)]), batch_id="k2")["accepted"] == 1
    g = f"{iri('a')} {iri('p')} {iri('g')} .".encode()
    assert m.ingest_graph("s", g, "application/n-triples", 60, batch_id="k3")["duplicate"] is False
    assert m.ingest_graph("s", g, "application/n-triples", 70, batch_id="k3")["duplicate"] is True
    assert m.stream("s")["progress"] == 60
    with pytest.raises(BadArrowBatch):
        m.ingest_arrow("s", tab, batch_id="")


def test_batch_ids_are_bounded():
    db = Database(shards=2)
    m = StreamManager(db, batch_id_limit=3)
    try:
        m.register_stream("s", EX + "s")
        for i in range(5):
            m.ingest_arrow("s", table([(iri("a"), iri("p"), iri(f"o{i}"), i)]), batch_id=f"b{i}")
        assert [m.batch_seen("s", f"b{i}") for i in range(5)] == [False, False, True, True, True]
        assert m._batches.count("s") == 3
    finally:
        m.close()


def test_full_transient_store_records_no_batch_id():
    """TransientStoreFull: nothing stored, progress unchanged, and the id stays unapplied (retry works)."""
    db = Database(shards=2)
    m = StreamManager(db, transient_budget=64 * 32)
    try:
        m.register_stream("s", EX + "s")
        m.register_query("REGISTER QUERY q AS SELECT * FROM s [RANGE 100s STEP 100s] WHERE { ?a ?b ?c }")
        big = table([(iri(f"x{i}"), iri("p"), iri("o"), 5) for i in range(100)])
        with pytest.raises(TransientStoreFull):
            m.ingest_arrow("s", big, batch_id="big")
        assert not m.batch_seen("s", "big")
        info = m.stream("s")
        assert info["progress"] is None and info["triples_in_window_store"] == 0
        assert m.ingest_arrow("s", table([(iri("a"), iri("p"), iri("o"), 5)]), batch_id="big")["accepted"] == 1
    finally:
        m.close()


# ---------------------------------------------------------------- persistence of the ids


def test_batch_ids_survive_restart_and_reset_on_delete(tmp_path):
    path = str(tmp_path / "data")

    def open_():
        db = Database(shards=2, data_dir=path)
        return db, StreamManager(db, data_dir=path)

    db, m = open_()
    m.register_stream("s", EX + "s", absorb="all")
    m.register_stream("t", EX + "t")
    for i in range(4):
        m.ingest_arrow("s", table([(iri("a"), iri("p"), iri(f"o{i}"), 10 * i)]), batch_id=f"s-{i}")
    m.ingest_arrow("t", table([(iri("a"), iri("p"), iri("x"), 1)]), batch_id="t-0")
    m.close()
    db.close()
    assert os.path.exists(os.path.join(path, LEDGER_NAME))

    db, m = open_()
    try:
        # absorbed data kept by the store, and its re-delivery recognised
        assert n_of(db, f"{iri('a')} {iri('p')} ?o") == 4
        r = m.ingest_arrow("s", table([(iri("a"), iri("p"), iri("o3"), 30)]), batch_id="s-3")
        assert r["duplicate"] is True
        assert m.batch_seen("t", "t-0")
        m.delete_stream("t")
        m.register_stream("t", EX + "t")
        assert not m.batch_seen("t", "t-0")
    finally:
        m.close()
        db.close()
    db, m = open_()
    try:
        assert not m.batch_seen("t", "t-0") and m.batch_seen("s", "s-0")
    finally:
        m.close()
        db.close()


def test_ledger_journal_compaction_and_torn_tail(tmp_path):
    d = str(tmp_path)
    led = BatchLedger(d, limit=10)
    for i in range(3000):
        led.record("a", f"id{i}")
    led.record("b", "only")
    led.close()
    with open(os.path.join(d, LEDGER_NAME), "rb") as f:
        n_lines = f.read().count(b"\n")
    assert n_lines < 2 * 11 + 1100   # compacted, not 3001 lines
    with open(os.path.join(d, LEDGER_NAME), "ab") as f:
        f.write(b'{"s": "a", "b": "tor')   # a crash in the middle of a write
    led = BatchLedger(d, limit=10)
    try:
        assert led.seen("a", "id2999") and led.seen("a", "id2990") and not led.seen("a", "id2989")
        assert led.seen("b", "only") and not led.seen("a", "tor")
        led.record("a", "after")
    finally:
        led.close()
    led = BatchLedger(d, limit=10)
    assert led.seen("a", "after")
    led.close()


def test_ledger_corrupt_middle_line_is_an_error(tmp_path):
    with open(tmp_path / LEDGER_NAME, "wb") as f:
        f.write(b'{"s": "a", "b": "x"}\nnot json\n{"s": "a", "b": "y"}\n')
    with pytest.raises(RegistryError, match="line 2"):
        BatchLedger(str(tmp_path))


def test_absorb_marks_rows_new_to_the_store(env):
    """The absorb log flags exactly the rows that were not in the store before the commit,
    also when another commit landed between a batch's encode and its absorb."""
    db, m = env
    m.register_stream("s", EX + "s", absorb="all")
    db.update(f"INSERT DATA {{ {iri('a')} {iri('p')} {iri('b')} }}")
    m.ingest_arrow("s", table([(iri("a"), iri("p"), iri("b"), 10), (iri("a"), iri("p"), iri("new1"), 10)]))
    (_, rows, new), = m._absorb_log._chunks
    keys = [db.store.dictionary.keys(r)[2] for r in rows]
    assert dict(zip(keys, new.tolist(), strict=True)) == {iri("b"): False, iri("new1"): True}
    # a stale mark (a commit since the encode that used the fresh term) falls back to the edge test
    iv = ingest.intern(db.store, *(pa.array([x]).dictionary_encode() for x in (iri("c"), iri("p"), iri("fresh"))))
    rows, mark = iv.rows, (iv.first_new, iv.sn)
    db.update(f"INSERT DATA {{ {iri('c')} {iri('p')} {iri('fresh')} }}")
    absorb(db.store, m._absorb_log, rows, np.array([20]), mark)
    assert m._absorb_log._chunks[-1][2].tolist() == [False]


def test_duplicate_answer_repeats_the_first_outcome_across_a_restart(tmp_path):
    """A re-delivered batch is answered with what its first delivery was answered
    (accepted and rejected rows), also after a restart, so a re-sender counts it once."""
    from engine.database import Database
    from engine.stream.manager import StreamManager

    path = str(tmp_path / "db")
    db = Database(shards=2, data_dir=path)
    m = StreamManager(db, data_dir=path)
    m.register_stream("s", EX + "s", absorb="all")
    rows = [(iri("a"), iri("p"), iri("o1"), 10), (iri("a b"), iri("p"), iri("o2"), 10),
            (iri("a"), iri("p"), iri("o3"), 10)]
    first = m.ingest_arrow("s", table(rows), batch_id="b-1")
    assert (first["accepted"], first["rejected"]) == (2, 1)
    again = m.ingest_arrow("s", table(rows), batch_id="b-1")
    assert again["duplicate"] is True and again["accepted"] == 0
    assert again["original"] == {"accepted": 2, "rejected": 1}
    m.close()
    db.close()

    db = Database(shards=2, data_dir=path)
    m = StreamManager(db, data_dir=path)
    try:
        again = m.ingest_arrow("s", table(rows), batch_id="b-1")
        assert again["duplicate"] is True and again["original"] == {"accepted": 2, "rejected": 1}
    finally:
        m.close()
        db.close()


def test_ledger_reads_journals_without_outcomes(tmp_path):
    with open(tmp_path / LEDGER_NAME, "wb") as f:
        f.write(b'{"s": "a", "b": "old"}\n{"s": "a", "b": "new", "a": 3, "r": 0}\n')
    led = BatchLedger(str(tmp_path))
    try:
        assert led.seen("a", "old") and led.outcome("a", "old") is None
        assert led.outcome("a", "new") == (3, 0)
    finally:
        led.close()
