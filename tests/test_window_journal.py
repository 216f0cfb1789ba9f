"""The window journal (engine/stream/window_journal.py): stream elements survive a restart, so an
instant evaluated after a crash has the content it would have had without one."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.stream.manager import StreamManager
from engine.stream.window_journal import WindowJournal
from tests.test_stream_persistence import EX, body, line, results

Q = (f"REGISTER QUERY q AS SELECT ?x ?o FROM STREAM <{EX}s> [RANGE 3s STEP 1s] "
     f"WHERE {{ ?x <{EX}p> ?o }} ORDER BY ?x ?o")


def _keys(*rows):
    cols = list(zip(*rows, strict=True))
    return tuple(pa.array(list(c), type=pa.string()) for c in cols)


def _files(root: str, stream: str) -> list[str]:
    d = os.path.join(root, "windows", "s-" + stream)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_record_and_replay_round_trip(tmp_path):
    j = WindowJournal(str(tmp_path))
    j.record("s", _keys(("<a>", "<p>", '"x"'), ("_:L3xb", "<p>", "<c>")), np.array([5, 7]), None)
    dict_col = pa.array(["<d>"]).dictionary_encode()   # the N-Triples parser's dictionary columns
    j.record("s", (dict_col, pa.array(["<p>"]), pa.array(['"y"@en'])), np.array([9]), None)
    j.close()
    got = list(WindowJournal(str(tmp_path)).replay("s"))
    assert [b.s.to_pylist() for b in got] == [["<a>", "_:L3xb"], ["<d>"]]
    assert [b.o.to_pylist() for b in got] == [['"x"', "<c>"], ['"y"@en']]
    assert [b.t.tolist() for b in got] == [[5, 7], [9]]
    assert list(WindowJournal(str(tmp_path)).replay("other")) == []


def test_torn_last_record_replays_the_whole_ones(tmp_path):
    j = WindowJournal(str(tmp_path))
    for t in (1, 2, 3):
        j.record("s", _keys((f"<a{t}>", "<p>", "<o>")), np.array([t]), None)
    j.close()
    path = os.path.join(tmp_path, "windows", "s-s", _files(str(tmp_path), "s")[0])
    size = os.path.getsize(path)
    with open(path, "r+b") as f:   # a crash in the middle of the last write
        f.truncate(size - 40)
    got = list(WindowJournal(str(tmp_path)).replay("s"))
    assert [b.t.tolist() for b in got] == [[1], [2]]


def test_files_roll_and_freed_ones_are_deleted(tmp_path):
    j = WindowJournal(str(tmp_path), segment_bytes=1)   # every record closes its file
    for t in range(5):
        j.record("s", _keys((f"<a{t}>", "<p>", "<o>")), np.array([t * 10]), None)
    assert len(_files(str(tmp_path), "s")) == 5
    j.record("s", _keys(("<z>", "<p>", "<o>")), np.array([50]), 20)   # tau <= 20 freed
    assert len(_files(str(tmp_path), "s")) == 3                        # 30, 40, 50 remain
    got = [int(b.t[0]) for b in WindowJournal(str(tmp_path)).replay("s")]
    assert got == [30, 40, 50]
    j.forget("s")
    assert _files(str(tmp_path), "s") == []


def _run(path: str | None, elements: list[tuple[int, int]], crash_after: int | None, end: int) -> dict:
    """Feed ``elements`` ((k, tau): subject k, a blank node object per element) to a manager; with
    ``crash_after``, drop the manager without closing it after that many elements (a crash) and
    continue on a new one over the same data dir. Returns each instant's result."""
    def open_():
        db = Database(shards=2, data_dir=path)
        m = StreamManager(db, data_dir=path)
        return db, m

    db, m = open_()
    if not m.streams():
        m.register_stream("s", EX + "s")
        m.register_query(Q)
    for i, (k, tau) in enumerate(elements):
        m.ingest_ndjson("s", body(line(f"x{k}", "p", f"_:b{i}", tau), line(f"x{k}", "p", f'"v{i}"', tau)))
        if crash_after is not None and i + 1 == crash_after:
            m.drain(10)
            with m._reg.cv:   # a crash: the worker stops, nothing is closed or flushed by us
                m._scheduler.closed = True
                m._reg.cv.notify_all()
            m._scheduler.worker.join(5)
            db, m = open_()
    m.heartbeat("s", end)
    out = results(m, "q")
    m.close()
    db.close()
    return out


def _canon(doc: dict) -> list:
    """An instant's rows with blank nodes replaced by the element that made them (labels differ
    between runs; which element a blank node came from must not)."""
    rows = []
    for b in doc["results"]["bindings"]:
        o = b["o"]
        rows.append((b["x"]["value"], "bnode" if o["type"] == "bnode" else o["value"]))
    return sorted(rows)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=st.lists(st.integers(0, 1700), min_size=2, max_size=12), subjects=st.data())
def test_a_crash_changes_no_instant(tmp_path_factory, gaps, subjects):
    taus = np.cumsum(np.asarray(gaps) + 1).tolist()
    elements = [(subjects.draw(st.integers(0, 3)), t) for t in taus]
    crash = subjects.draw(st.integers(1, len(elements)))
    end = taus[-1] + 4000
    ref = _run(None, elements, None, end)
    got = _run(str(tmp_path_factory.mktemp("data")), elements, crash, end)
    assert sorted(got) == sorted(ref)
    assert {t: _canon(d) for t, d in got.items()} == {t: _canon(d) for t, d in ref.items()}
    # blank nodes of different elements stay different after the restart
    for d in got.values():
        labels = [b["o"]["value"] for b in d["results"]["bindings"] if b["o"]["type"] == "bnode"]
        assert len(labels) == len(set(labels))


def test_a_post_after_restart_gets_fresh_blank_nodes(tmp_path):
    path = str(tmp_path / "data")
    db = Database(shards=2, data_dir=path)
    m = StreamManager(db, data_dir=path)
    m.register_stream("s", EX + "s")
    m.register_query(Q)
    m.ingest_ndjson("s", body(line("x", "p", "_:b", 100)))
    m.close()
    db.close()
    db = Database(shards=2, data_dir=path)
    m = StreamManager(db, data_dir=path)
    m.ingest_ndjson("s", body(line("x", "p", "_:b", 200)))   # the same label in another POST
    m.heartbeat("s", 1001)
    doc = results(m, "q")[1000]
    m.close()
    db.close()
    labels = [b["o"]["value"] for b in doc["results"]["bindings"]]
    assert len(labels) == 2 and len(set(labels)) == 2, labels


def test_deleting_a_stream_deletes_its_journal(tmp_path):
    path = str(tmp_path / "data")
    db = Database(shards=2, data_dir=path)
    m = StreamManager(db, data_dir=path)
    m.register_stream("s", EX + "s")
    m.ingest_ndjson("s", body(line("x", "p", "o", 100)))
    assert _files(path, "s")
    m.delete_stream("s")
    assert _files(path, "s") == []
    m.register_stream("s", EX + "s")   # the same name again starts empty
    m.close()
    db.close()
    db = Database(shards=2, data_dir=path)
    m = StreamManager(db, data_dir=path)
    try:
        assert m.stream("s")["progress"] is None
    finally:
        m.close()
        db.close()


Q_ASOF = (f"REGISTER QUERY q AS SELECT ?x ?n FROM s [RANGE 1s TUMBLING] FROM <urn:jindou:default> "
          f"WHERE {{ ?x <{EX}p> ?y . GRAPH <urn:jindou:default> {{ ?x <{EX}name> ?n }} }}")


def _run_absorbing(path: str | None, elements: list[tuple[str, int, int]], stop: int | None, end: int) -> dict:
    """Like :func:`_run` on a stream that absorbs ``name`` triples (timeless, into the store):
    ``elements`` are ("p" | "name", subject k, tau). With ``stop``, the evaluation worker stops
    before element ``stop`` (instants become ready but are not evaluated), the rest is ingested,
    and the manager is dropped without closing (a crash) and reopened over the same data dir."""
    def open_():
        db = Database(shards=2, data_dir=path)
        return db, StreamManager(db, data_dir=path)

    db, m = open_()
    m.register_stream("s", EX + "s", absorb=[EX + "name"])
    m.heartbeat("s", 0)
    m.register_query(Q_ASOF)
    for i, (kind, k, tau) in enumerate(elements):
        if i == stop:
            m.drain(10)
            with m._reg.cv:   # the worker stops: what follows is ingested, not evaluated
                m._scheduler.closed = True
                m._reg.cv.notify_all()
            m._scheduler.worker.join(5)
        o = f'"n{k}"' if kind == "name" else f"<{EX}y{i}>"
        m.ingest_ndjson("s", body(line(f"x{k}", kind, o, tau)))
    if stop is not None:
        db, m = open_()   # the crash: nothing above was closed or flushed by us
    m.heartbeat("s", end)
    out = results(m, "q")
    m.close()
    db.close()
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_crash_keeps_the_store_as_of_event_time(tmp_path_factory, data):
    """Absorbed triples are in the store at once, but an instant before their timestamp must not
    see them -- also when it is evaluated after a restart (the journal carries the records)."""
    n = data.draw(st.integers(2, 10))
    gaps = data.draw(st.lists(st.integers(0, 1500), min_size=n, max_size=n))
    taus = np.cumsum(np.asarray(gaps) + 1).tolist()
    elements = [(data.draw(st.sampled_from(["p", "p", "name"])), data.draw(st.integers(0, 2)), t) for t in taus]
    stop = data.draw(st.integers(0, len(elements) - 1))
    end = taus[-1] + 2000
    ref = _run_absorbing(None, elements, None, end)
    got = _run_absorbing(str(tmp_path_factory.mktemp("data")), elements, stop, end)

    def rows(res):
        return {t: sorted((b["x"]["value"], b["n"]["value"]) for b in d["results"]["bindings"])
                for t, d in res.items()}
    assert rows(got) == rows(ref)


def test_an_instant_after_a_restart_does_not_see_a_later_absorbed_triple(tmp_path):
    """The example: x0 p at 500, its name at 2500; instants 1000 and 2000 evaluated after the
    restart must not see the name."""
    elements = [("p", 0, 500), ("p", 0, 1500), ("name", 0, 2500), ("p", 0, 2600)]
    got = _run_absorbing(str(tmp_path / "data"), elements, 0, 5000)
    seen = {t: [b["n"]["value"] for b in d["results"]["bindings"]] for t, d in got.items()}
    assert seen[1000] == [] and seen[2000] == [] and seen[3000] == ["n0"], seen
