"""StreamManager with a data dir: registry file, restart, progress, crash safety."""

from __future__ import annotations

import os

import orjson
import pytest

from engine.database import Database
from engine.stream.manager import StreamManager
from engine.stream.progress import LateElementError
from engine.stream.registry_store import FORMAT, REGISTRY_NAME, VERSION, RegistryError, RegistryFile

EX = "http://ex.org/"


def line(s, p, o, t) -> bytes:
    def term(x):
        return x if x.startswith(("<", '"', "_")) else f"<{EX}{x}>"
    return orjson.dumps({"s": term(s), "p": term(p), "o": term(o), "t": t})


def body(*lines) -> bytes:
    return b"\n".join(lines) + b"\n"


def results(m: StreamManager, name: str) -> dict[int, dict]:
    assert m.drain(10)
    return {e.id: orjson.loads(e.data) for e in m.log(name).since(None, from_t=-(1 << 62))
            if e.event == "result"}


def values(doc: dict, var: str) -> list[str]:
    return sorted(b[var]["value"] for b in doc["results"]["bindings"] if var in b)


Q_WIN = f"REGISTER QUERY qwin AS SELECT ?o FROM s1 [RANGE 1s TUMBLING] WHERE {{ ?x <{EX}p> ?o }}"
Q_JOIN = (f"REGISTER QUERY qjoin AS SELECT ?x ?n FROM s1 [RANGE 1s TUMBLING] FROM <urn:jindou:default> "
          f"WHERE {{ ?x <{EX}p> ?y . GRAPH <urn:jindou:default> {{ ?x <{EX}name> ?n }} }}")
Q_S2 = f"REGISTER QUERY q2 AS SELECT * FROM STREAM <{EX}s2> [RANGE 2s STEP 1s] WHERE {{ ?a ?b ?c }}"


class Server:
    """A Database + StreamManager over one data dir, reopened like a server restart."""

    def __init__(self, path):
        self.path = str(path)
        self.db = None
        self.m = None

    def open(self, **kw):
        self.db = Database(shards=2, data_dir=self.path)
        self.m = StreamManager(self.db, data_dir=self.path, **kw)
        return self.db, self.m

    def close(self):
        if self.m is not None:
            self.m.close()
        if self.db is not None:
            self.db.close()
        self.db = self.m = None


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "data")
    yield s
    s.close()


def registry(path) -> dict:
    with open(os.path.join(str(path), REGISTRY_NAME), "rb") as f:
        return orjson.loads(f.read())


def populate(m: StreamManager) -> None:
    m.register_stream("s1", EX + "s1", absorb=[EX + "name"])
    m.register_stream("s2", EX + "s2", absorb="all")
    m.register_stream("s3", EX + "s3", clock="arrival")
    m.register_query(Q_WIN)
    m.register_query(Q_JOIN)
    m.register_query(Q_S2)


# ---------------------------------------------------------------- the file


def test_registry_written_on_every_change(server):
    _, m = server.open()
    path = server.path
    assert m.registry_path == os.path.join(path, REGISTRY_NAME)
    assert not os.path.exists(m.registry_path)   # nothing registered yet
    m.register_stream("s1", EX + "s1", absorb=[f"<{EX}name>"])
    doc = registry(path)
    assert doc == {"format": FORMAT, "version": VERSION, "queries": [],
                   "streams": [{"name": "s1", "iri": EX + "s1", "absorb": [EX + "name"], "clock": "event",
                                "progress": None}]}
    m.register_stream("s2", EX + "s2", absorb="all")
    m.register_stream("s3", EX + "s3", clock="arrival")
    m.register_query(Q_WIN)
    m.register_query(Q_S2)
    doc = registry(path)
    assert [s["name"] for s in doc["streams"]] == ["s1", "s2", "s3"]
    assert doc["streams"][2]["clock"] == "arrival" and doc["streams"][1]["absorb"] == "all"
    assert doc["queries"] == [{"name": "qwin", "text": Q_WIN}, {"name": "q2", "text": Q_S2}]
    m.delete_query("qwin")
    assert [q["name"] for q in registry(path)["queries"]] == ["q2"]
    m.delete_stream("s2", force=True)   # also deletes q2
    doc = registry(path)
    assert [s["name"] for s in doc["streams"]] == ["s1", "s3"] and doc["queries"] == []
    assert not os.path.exists(m.registry_path + ".tmp")
    # the store's garbage collection leaves the registry alone
    server.db.load_data(f"<{EX}a> <{EX}b> <{EX}c> .".encode(), "application/n-triples")
    assert registry(path) == doc


def test_no_data_dir_no_file(tmp_path):
    db = Database(shards=2)
    m = StreamManager(db)
    try:
        m.register_stream("s1", EX + "s1")
        m.ingest_ndjson("s1", body(line("a", "p", "b", 5)))
        m.sync_registry()   # no-op
        assert m.registry_path is None
    finally:
        m.close()
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- restart


def test_restart_restores_streams_queries_data_and_progress(server):
    db, m = server.open()
    populate(m)
    m.heartbeat("s1", 0)
    r = m.ingest_ndjson("s1", body(line("a", "p", "b0", 500), line("a", "name", '"A"', 600),
                                   line("a", "p", "b1", 1500)))
    assert r["accepted"] == 3
    r = m.ingest_ndjson("s2", body(line("k", "v", "w", 10_000), line("k", "v", "z", 12_000)))
    assert r["progress"] == 12_000
    m.heartbeat("s1", 2000)
    assert values(results(m, "qwin")[1000], "o") == [EX + "b0"]
    before_streams = [{k: s[k] for k in ("name", "iri", "absorb", "clock")} for s in m.streams()]
    before_queries = [(q["id"], q["text"], q["windows"]) for q in m.queries()]
    server.close()

    doc = registry(server.path)
    assert {s["name"]: s["progress"] for s in doc["streams"]}["s1"] == 2000
    assert {s["name"]: s["progress"] for s in doc["streams"]}["s2"] == 12_000

    db, m = server.open()
    assert [{k: s[k] for k in ("name", "iri", "absorb", "clock")} for s in m.streams()] == before_streams
    assert [(q["id"], q["text"], q["windows"]) for q in m.queries()] == before_queries
    assert m.stream("s1")["progress"] == 2000 and m.stream("s2")["progress"] == 12_000
    # absorbed timeless data of committed batches survived (it is in the store)
    assert db.query(f"SELECT ?n WHERE {{ <{EX}a> <{EX}name> ?n }}").rows() == [{"n": '"A"'}]
    got = db.query(f"SELECT ?o WHERE {{ <{EX}k> <{EX}v> ?o }}").rows()
    assert sorted(x["o"] for x in got) == [f"<{EX}w>", f"<{EX}z>"]
    assert not db.query(f"ASK {{ ?x <{EX}p> ?y }}").boolean   # not absorbed on s1
    # elements older than the persisted progress stay rejected
    r = m.ingest_ndjson("s1", body(line("a", "p", "late", 1999), line("a", "p", "ok", 2000)))
    assert r["accepted"] == 1 and r["rejected"] == 1 and "progress 2000" in r["errors"][0]["error"]
    with pytest.raises(LateElementError):
        m.ingest_graph("s2", f"<{EX}k> <{EX}v> <{EX}old> .".encode(), "application/n-triples", 11_999)
    assert not db.query(f"ASK {{ <{EX}k> <{EX}v> <{EX}old> }}").boolean
    # the continuous queries run again: windows from new elements, stored data joined
    m.ingest_ndjson("s1", body(line("a", "p", "b3", 3500)))
    m.heartbeat("s1", 4001)
    res = results(m, "qwin")
    # instant 1000 was evaluated before the restart: its result comes back from the durable log
    # (the same content); 2000 was not (P was 2000): it comes now. Window contents are
    # journaled: b1 (tau 1500, received before the restart) is in the window of 2000.
    assert {t: values(d, "o") for t, d in res.items()} == {0: [], 1000: [EX + "b0"],
                                                           2000: [EX + "b1", EX + "ok"],
                                                           3000: [], 4000: [EX + "b3"]}
    join = results(m, "qjoin")
    assert {t: values(d, "n") for t, d in join.items()} == {0: [], 1000: ["A"], 2000: ["A", "A"], 3000: [],
                                                            4000: ["A"]}
    m.ingest_ndjson("s2", body(line("k", "v", "y", 13_500)))
    m.heartbeat("s2", 14_001)
    res2 = results(m, "q2")
    assert values(res2[14_000], "c") == [EX + "y"]


def test_deletes_persist_across_restart(server):
    _, m = server.open()
    populate(m)
    m.delete_query("qjoin")
    m.delete_stream("s3")
    server.close()
    _, m = server.open()
    assert [s["name"] for s in m.streams()] == ["s1", "s2"]
    assert [q["id"] for q in m.queries()] == ["qwin", "q2"]
    m.delete_stream("s1", force=True)
    server.close()
    _, m = server.open()
    assert [s["name"] for s in m.streams()] == ["s2"]
    assert [q["id"] for q in m.queries()] == ["q2"]
    # a deleted name can be registered again with other settings
    m.register_stream("s1", EX + "other", clock="arrival")
    server.close()
    _, m = server.open()
    assert m.stream("s1")["iri"] == EX + "other" and m.stream("s1")["clock"] == "arrival"


def test_rsp_query_named_by_request_survives_restart(server):
    """Two RSP-QL output IRIs ending alike: the second is named by the request (``?name=``), and a
    restart restores it under that name (the text alone would name it like the first)."""
    _, m = server.open()
    m.register_stream("s1", EX + "s1")
    text = ("REGISTER RSTREAM <http://{}/out> AS SELECT ?s FROM NAMED WINDOW <w> ON <" + EX
            + "s1> [RANGE PT2S STEP PT1S] WHERE {{ WINDOW <w> {{ ?s ?p ?o }} }}")
    m.register_query(text.format("a.example"))
    m.register_query(text.format("b.example"), name="out_b")
    server.close()
    _, m = server.open()
    assert sorted(q["id"] for q in m.queries()) == ["out", "out_b"]
    assert "b.example" in m.query("out_b")["text"]


def test_arrival_progress_is_restored(server):
    clock = [1_000_000]
    _, m = server.open(now_ms=lambda: clock[0])
    m.register_stream("a", EX + "a", clock="arrival")
    r = m.ingest_ndjson("a", body(line("x", "p", "y", 0)))
    assert r["progress"] == 1_000_000
    server.close()
    clock[0] = 500   # the wall clock stepped back: the arrival stamps stay monotone
    _, m = server.open(now_ms=lambda: clock[0])
    r = m.ingest_ndjson("a", body(line("x", "p", "z", 0)))
    assert r["accepted"] == 1 and r["progress"] == 1_000_000


def test_progress_synced_periodically(server):
    _, m = server.open(progress_sync_s=0.05)
    m.register_stream("s1", EX + "s1")
    m.ingest_ndjson("s1", body(line("a", "p", "b", 700)))
    m.heartbeat("s1", 900)
    import time
    deadline = time.monotonic() + 5
    while registry(server.path)["streams"][0]["progress"] != 900:
        assert time.monotonic() < deadline, "progress was not written by the worker"
        time.sleep(0.02)


def test_crash_keeps_last_persisted_progress(server):
    """Without close (a crash), P is the last persisted value raised to the last journaled
    element (what the server had accepted); committed absorbed data is there."""
    db, m = server.open(progress_sync_s=3600)
    m.register_stream("s", EX + "s", absorb="all")
    m.ingest_ndjson("s", body(line("a", "p", "b", 100)))
    m.sync_registry()
    m.ingest_ndjson("s", body(line("a", "p", "c", 200)))
    # "crash": stop the worker without the final write, drop everything
    with m._reg.cv:
        m._scheduler.closed = True
        m._reg.cv.notify_all()
    m._scheduler.worker.join(5)
    server.db = server.m = None
    db2 = Database(shards=2, data_dir=server.path)
    m2 = StreamManager(db2, data_dir=server.path)
    try:
        assert m2.stream("s")["progress"] == 200   # the registry said 100; the journal holds c at 200
        got = db2.query(f"SELECT ?o WHERE {{ <{EX}a> <{EX}p> ?o }}").rows()
        assert sorted(x["o"] for x in got) == [f"<{EX}b>", f"<{EX}c>"]
        r = m2.ingest_ndjson("s", body(line("a", "p", "d", 99), line("a", "p", "e", 150),
                                       line("a", "p", "f", 250)))
        assert r["accepted"] == 1 and r["rejected"] == 2
    finally:
        m2.close()


# ---------------------------------------------------------------- crash / corruption


def test_leftover_temp_file_is_ignored(server):
    _, m = server.open()
    populate(m)
    server.close()
    reg = os.path.join(server.path, REGISTRY_NAME)
    good = registry(server.path)
    # a save interrupted before os.replace: a complete-looking and a torn temp file
    with open(reg + ".tmp", "wb") as f:
        f.write(orjson.dumps({"format": FORMAT, "version": VERSION, "streams": [], "queries": []}))
    _, m = server.open()
    assert [s["name"] for s in m.streams()] == ["s1", "s2", "s3"]
    assert [q["id"] for q in m.queries()] == ["qwin", "qjoin", "q2"]
    assert not os.path.exists(reg + ".tmp")
    server.close()
    with open(reg + ".tmp", "wb") as f:
        f.write(b'{"format": "jindou-stream-reg')
    _, m = server.open()
    assert [q["id"] for q in m.queries()] == ["qwin", "qjoin", "q2"]
    server.close()
    assert registry(server.path)["queries"] == good["queries"]


@pytest.mark.parametrize("content", [
    b'{"format": "jindou-stream-registry", "version": 1, "streams": [',   # torn
    b"\x00\x01garbage",
    b"[]",
    b'{"format": "jindou-stream-registry", "version": 99, "streams": [], "queries": []}',
    b'{"format": "jindou-stream-registry", "version": 1, "streams": [{"name": "s"}], "queries": []}',
    b'{"format": "jindou-stream-registry", "version": 1, "streams": [{"name": "s", "iri": "http://x/s", '
    b'"absorb": "none", "clock": "event", "progress": "soon"}], "queries": []}',
    b'{"format": "jindou-stream-registry", "version": 1, "streams": [{"name": "bad/name", "iri": "http://x/s", '
    b'"absorb": "none", "clock": "event", "progress": null}], "queries": []}',
    b'{"format": "jindou-stream-registry", "version": 1, "streams": [], '
    b'"queries": [{"name": "q", "text": "REGISTER QUERY q AS SELECT * FROM nope [RANGE 1s TUMBLING] '
    b'WHERE { ?s ?p ?o }"}]}',
])
def test_corrupt_registry_is_an_error(tmp_path, content):
    path = str(tmp_path / "data")
    os.makedirs(path)
    reg = os.path.join(path, REGISTRY_NAME)
    with open(reg, "wb") as f:
        f.write(content)
    db = Database(shards=2, data_dir=path)
    with pytest.raises(RegistryError) as ei:
        StreamManager(db, data_dir=path)
    assert reg in str(ei.value)
    with open(reg, "rb") as f:   # never reset
        assert f.read() == content


def test_unwritable_registry_rolls_back_registration(tmp_path, monkeypatch):
    path = str(tmp_path / "data")
    db = Database(shards=2, data_dir=path)
    m = StreamManager(db, data_dir=path)
    try:
        m.register_stream("s1", EX + "s1")

        def fail(doc):
            raise RegistryError("cannot write stream registry (test)")

        monkeypatch.setattr(m._reg.file, "save", fail)
        with pytest.raises(RegistryError):
            m.register_stream("s2", EX + "s2")
        with pytest.raises(RegistryError):
            m.register_query(Q_WIN)
        assert [s["name"] for s in m.streams()] == ["s1"] and m.queries() == []
        monkeypatch.undo()
        m.register_query(Q_WIN)
        assert [q["name"] for q in registry(path)["queries"]] == ["qwin"]
    finally:
        m.close()


def test_registry_file_roundtrip(tmp_path):
    rf = RegistryFile(str(tmp_path / "d"))
    assert rf.load() is None
    doc = {"format": FORMAT, "version": VERSION, "queries": [{"name": "q", "text": "x"}],
           "streams": [{"name": "s", "iri": "http://x/s", "absorb": ["http://x/p"], "clock": "event",
                        "progress": -5}]}
    rf.save(doc)
    assert rf.load() == doc and rf.writes == 1


# ---------------------------------------------------------------- the server


def test_server_restart_with_data_dir(tmp_path):
    """The real server with --data-dir: stop, start again, the stream and its data are back."""
    import httpx

    from server.app import create_app
    from server.settings import Settings
    from tests.conftest import start_server

    path = str(tmp_path / "data")
    srv = start_server(data_dir=path, shards=2)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s1", json={"iri": EX + "s1", "absorb": "all"}).status_code == 201
            r = c.post("/streams/s1", content=body(line("a", "p", "b", 1000)),
                       headers={"Content-Type": "application/x-ndjson"})
            assert r.status_code < 300, r.text
    finally:
        srv.stop()
    srv = start_server(data_dir=path, shards=2)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            r = c.get("/streams/s1")
            assert r.status_code == 200 and r.json()["progress"] == 1000 and r.json()["absorb"] == "all"
            r = c.post("/sparql", data={"query": f"ASK {{ <{EX}a> <{EX}p> <{EX}b> }}"},
                       headers={"Accept": "application/sparql-results+json"})
            assert r.status_code == 200 and r.json()["boolean"] is True
    finally:
        srv.stop()
    with open(os.path.join(path, REGISTRY_NAME), "wb") as f:
        f.write(b"{broken")
    with pytest.raises(RegistryError, match=REGISTRY_NAME):
        create_app(Settings(data_dir=path, shards=2))
