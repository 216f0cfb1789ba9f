"""A kill -9 between an absorbing batch's window-journal record and its store commit.

A stream's timeless (absorbed) triples are committed to the store after the batch is journaled
(engine/stream/absorb.py: the absorb record is durable before the store holds the rows). A crash
in between used to leave the store without them while the journal -- and so the batch-id
ledger after the replay -- said the batch was delivered: the producer's re-delivery was a
duplicate, and the triples were lost for good. The journal record names the store commit it
precedes; the replay commits the rows of a record the persistent store does not have.

The crash is made by a test-only variable (``JINDOU_TEST_KILL_BEFORE_ABSORB_COMMIT=n``: the
server SIGKILLs itself at its n-th absorbing batch, after the record, before the commit)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from engine.stream import absorb as absorb_mod
from tests.pipeline_support import Server

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}
JSON = {"Accept": "application/sparql-results+json"}


def _batch(b: int) -> bytes:
    """Batch ``b``: window triples and timeless :name triples, at b*1000 + 10*i ms."""
    lines = []
    for i in range(6):
        lines.append({"s": f"<{EX}a{b}_{i}>", "p": f"<{EX}p>", "o": f'"{b}-{i}"', "t": b * 1000 + 10 * i})
        lines.append({"s": f"<{EX}a{b}_{i}>", "p": f"<{EX}name>", "o": f'"n{b}-{i}"', "t": b * 1000 + 10 * i})
    return b"\n".join(orjson.dumps(x) for x in lines)


def _names(c: httpx.Client) -> set[str]:
    r = c.get("/sparql", params={"query": f"SELECT ?o WHERE {{ ?s <{EX}name> ?o }}"}, headers=JSON)
    assert r.status_code == 200, r.text
    return {b["o"]["value"] for b in r.json()["results"]["bindings"]}


def _want(batches) -> set[str]:
    return {f"n{b}-{i}" for b in batches for i in range(6)}


@pytest.mark.parametrize("load", [False, True])
def test_restart_completes_a_commit_cut_off_by_a_crash(tmp_path, monkeypatch, load):
    """``load``: the restarted server also loads a file (a commit before the replay, which
    must not hide the missing one)."""
    data = tmp_path / "data"
    extra = tmp_path / "extra.nt"
    extra.write_text(f"<{EX}x> <{EX}q> \"loaded\" .\n")
    monkeypatch.setenv(absorb_mod._CRASH_ENV, "3")   # the 3rd absorbing batch dies before its commit
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s", "absorb": [EX + "name"]}).status_code == 201
            for b in (0, 1):
                r = c.post("/streams/s", content=_batch(b), headers={**NDJSON, "Batch-Id": f"b{b}"})
                assert r.status_code == 202, r.text
            assert _names(c) == _want((0, 1))
            with pytest.raises(httpx.TransportError):
                c.post("/streams/s", content=_batch(2), headers={**NDJSON, "Batch-Id": "b2"})
        assert srv.proc.wait(30) == -9
    finally:
        srv.stop()
    monkeypatch.delenv(absorb_mod._CRASH_ENV)
    srv = Server(tmp_path, data, ["--data", str(extra)] if load else [])
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            # the journal had batch 2 (its id is in the ledger again): the store has its triples too
            assert _names(c) == _want((0, 1, 2))
            r = c.post("/streams/s", content=_batch(2), headers={**NDJSON, "Batch-Id": "b2"})
            assert r.status_code in (200, 202) and r.json()["duplicate"] is True, r.text
            r = c.post("/streams/s", content=_batch(3), headers={**NDJSON, "Batch-Id": "b3"})
            assert r.status_code == 202, r.text
            assert _names(c) == _want((0, 1, 2, 3))
    finally:
        srv.stop()
    # once completed, a second restart commits nothing again (and loses nothing)
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert _names(c) == _want((0, 1, 2, 3))
        log = (tmp_path / f"server-{srv.port}.log").read_bytes()
        assert b"had not reached the store" not in log
    finally:
        srv.stop()


def _count(db) -> int:
    return len(db.query(f"SELECT ?o WHERE {{ ?s <{EX}name> ?o }}").rows())


@pytest.mark.parametrize("store_persists", [True, False])
def test_replay_commits_only_what_the_persistent_store_lacks(tmp_path, monkeypatch, store_persists):
    """In process: the commit of batch 1 is lost (as if the process died right before it); a
    new manager over the reopened store commits it at replay, and nothing else. A store that
    does not persist (no data_dir of its own) gets nothing from the journal, as before."""
    from engine.database import Database
    from engine.stream.manager import StreamManager

    sdir, jdir = tmp_path / "store", tmp_path / "journal"
    db = Database(shards=1, data_dir=str(sdir) if store_persists else None)
    m = StreamManager(db, data_dir=str(jdir))
    m.register_stream("s", EX + "s", absorb=[EX + "name"])
    m.ingest_ndjson("s", _batch(0), batch_id="b0")
    real = absorb_mod.commit_absorbed
    monkeypatch.setattr(absorb_mod, "commit_absorbed", lambda *a, **k: None)   # the lost commit
    m.ingest_ndjson("s", _batch(1), batch_id="b1")
    monkeypatch.setattr(absorb_mod, "commit_absorbed", real)
    assert _count(db) == 6
    sn = db.store.snapshot().sn
    m.close()
    if store_persists:
        db.close()
        db = Database(shards=1, data_dir=str(sdir))
        assert db.store.opened_sn == sn
    else:
        db = Database(shards=1)
    m = StreamManager(db, data_dir=str(jdir))
    try:
        assert _count(db) == (12 if store_persists else 0)
        assert m.ingest_ndjson("s", _batch(1), batch_id="b1")["duplicate"] is True
        m.ingest_ndjson("s", _batch(2), batch_id="b2")
        assert _count(db) == (18 if store_persists else 6)
    finally:
        m.close()
        db.close()
