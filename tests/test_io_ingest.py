"""The one write path (engine/io/ingest.py): every writer commits through ``ingest.apply``,
interning is one function for every column kind, and a write is atomic."""

from __future__ import annotations

import sys
import time

import numpy as np
import orjson
import pyarrow as pa
import pytest

from engine.database import Database
from engine.errors import LoadError, QueryTimeout
from engine.io import ingest
from engine.kv.store import Changes, Store

EX = "http://ex.org/"


def _commit_sites(monkeypatch) -> list[tuple[str, bool]]:
    """Record every Store.commit: (caller's function, whether ingest.apply is on the stack)."""
    calls: list[tuple[str, bool]] = []
    orig = Store.commit

    def commit(self, changes):
        f = sys._getframe(1)
        caller = f.f_code.co_name
        via = False
        while f is not None:
            if f.f_code is ingest.apply.__code__:
                via = True
                break
            f = f.f_back
        calls.append((caller, via))
        return orig(self, changes)

    monkeypatch.setattr(Store, "commit", commit)
    return calls


def test_every_writer_commits_through_apply(tmp_path, monkeypatch):
    calls = _commit_sites(monkeypatch)
    db = Database(shards=2, allow_load=True)
    f = tmp_path / "a.nt"
    f.write_text(f"<{EX}a> <{EX}p> <{EX}b> .\n")

    def writes(what, fn):
        n0 = len(calls)
        fn()
        assert len(calls) > n0, f"{what} did not commit"
        assert all(via for _, via in calls[n0:]), f"{what} committed outside ingest.apply: {calls[n0:]}"

    writes("load_file", lambda: db.load_file(f))
    writes("load_data", lambda: db.load_data(f"<{EX}c> <{EX}p> <{EX}d> .", "application/n-triples"))
    writes("GSP PUT", lambda: db.graph_put(EX + "g", f"<{EX}e> <{EX}p> <{EX}f> .", "text/turtle"))
    writes("GSP POST", lambda: db.graph_post(EX + "g", f"<{EX}e> <{EX}p> <{EX}h> .", "text/turtle"))
    writes("GSP DELETE", lambda: db.graph_delete(EX + "g"))
    for u in (f"INSERT DATA {{ <{EX}x> <{EX}p> <{EX}y> }}",
              f"DELETE DATA {{ <{EX}x> <{EX}p> <{EX}y> }}",
              f"INSERT {{ ?s <{EX}q> ?o }} WHERE {{ ?s <{EX}p> ?o }}",
              f"LOAD <{f.as_uri()}> INTO GRAPH <{EX}l>",
              f"CREATE GRAPH <{EX}c>", f"COPY <{EX}l> TO <{EX}c2>", f"MOVE <{EX}c2> TO <{EX}c3>",
              f"ADD <{EX}l> TO <{EX}c>", f"CLEAR GRAPH <{EX}l>", f"DROP GRAPH <{EX}c3>"):
        writes(u.split()[0], lambda u=u: db.update(u))

    from engine.stream.manager import StreamManager  # noqa: PLC0415

    m = StreamManager(db)
    try:
        m.register_stream("s", EX + "s", absorb="all")
        line = orjson.dumps({"s": f"<{EX}k>", "p": f"<{EX}p>", "o": f"<{EX}v>", "t": 1000})
        writes("stream absorption (ndjson)", lambda: m.ingest_ndjson("s", line + b"\n"))
        writes("stream absorption (graph)",
               lambda: m.ingest_graph("s", f"<{EX}k2> <{EX}p> <{EX}v> .".encode(), "application/n-triples", 2000))
    finally:
        m.close()
    assert {c for c, _ in calls} == {"apply"}  # and apply is the only caller of Store.commit


def test_apply_gate_commits_nothing():
    store = Store(shards=1)
    rows = np.array([[1, 2, 3]], dtype=np.int64)
    with pytest.raises(QueryTimeout):
        ingest.apply(store, Changes(add={None: rows}), may_commit=lambda: False)
    with pytest.raises(QueryTimeout):
        ingest.apply(store, Changes(add={None: rows}), deadline=time.monotonic() - 1)
    assert store.snapshot().sn == 0 and store.snapshot().n_triples == 0
    asked = []
    snap = ingest.apply(store, Changes(add={None: rows}), deadline=time.monotonic() + 60,
                        may_commit=lambda: asked.append(1) or True)
    assert asked == [1] and snap.sn == 1 and snap.n_triples == 1


def test_write_locked_times_out_while_another_writer_holds_the_lock():
    import threading  # noqa: PLC0415

    store = Store(shards=1)
    held, done = threading.Event(), threading.Event()

    def holder():
        with store.write_lock:
            held.set()
            done.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    try:
        held.wait(30)
        with pytest.raises(QueryTimeout, match="waiting for other writes"):
            with ingest.write_locked(store, deadline=time.monotonic() + 0.05, timeout=0.05):
                pass
    finally:
        done.set()
        t.join()


def test_intern_column_kinds_agree():
    """Dictionary columns, plain columns and a mix of both intern to the same ids."""
    keys = [f"<{EX}s{i % 3}>" for i in range(7)]
    preds = [f"<{EX}p{i % 2}>" for i in range(7)]
    objs = [f'"{i % 4}"' for i in range(7)]
    store = Store(shards=1)
    plain = ingest.intern(store, pa.array(keys), pa.array(preds), pa.array(objs))
    d = ingest.intern(store, *(pa.array(c).dictionary_encode() for c in (keys, preds, objs)))
    mixed = ingest.intern(store, pa.array(keys).dictionary_encode(), pa.array(preds, pa.large_string()),
                          pa.array(objs))
    assert plain.rows.shape == (7, 3) and plain.gids is None
    assert (plain.rows == d.rows).all() and (plain.rows == mixed.rows).all()
    assert plain.first_new == 0 and d.first_new == len(store.dictionary) == 3 + 2 + 4
    assert store.dictionary.keys(plain.rows[:, 0]) == keys
    empty = ingest.intern(store, pa.array([], pa.string()), pa.array([], pa.string()), pa.array([], pa.string()))
    assert empty.rows.shape == (0, 3)


def test_intern_graph_column_and_changes_for():
    store = Store(shards=1)
    g = pa.array([None, f"<{EX}g1>", None, f"<{EX}g2>"], pa.large_string())
    s = pa.array([f"<{EX}a>"] * 4)
    p = pa.array([f"<{EX}p>"] * 4)
    o = pa.array([f"<{EX}o{i}>" for i in range(4)])
    iv = ingest.intern(store, s, p, o, g)
    g1, g2 = (store.dictionary.lookup(f"<{EX}{x}>") for x in ("g1", "g2"))
    assert iv.gids.tolist() == [-1, g1, -1, g2]
    target = ingest.graph_id(store, EX + "t", create=True)
    ch = ingest.changes_for(iv.rows, iv.gids, target, replace=True)
    assert ch.drop == {target} and ch.create == {target, g1, g2}
    assert (ch.add[target] == iv.rows[[0, 2]]).all() and (ch.add[g1] == iv.rows[[1]]).all()
    ch = ingest.changes_for(iv.rows, iv.gids)  # no target: default-graph rows stay there
    assert set(ch.add) == {None, g1, g2} and not ch.drop and ch.create == {g1, g2}
    assert ingest.graph_id(store, EX + "unknown", create=False) == -1


def test_graph_store_error_applies_nothing():
    db = Database(shards=2)
    db.graph_put(EX + "g", f"<{EX}a> <{EX}p> <{EX}b> .", "application/n-triples")
    sn = db.store.snapshot().sn
    bad = f"<{EX}c> <{EX}p> <{EX}d> .\n<{EX}e> <{EX}p> .\n"
    for write in (db.graph_put, db.graph_post):
        with pytest.raises(LoadError):
            write(EX + "g", bad, "application/n-triples")
    with pytest.raises(LoadError):
        db.load_data(bad, "application/n-triples")
    assert db.store.snapshot().sn == sn
    res = db.query(f"ASK {{ GRAPH <{EX}g> {{ <{EX}a> <{EX}p> <{EX}b> }} }}")
    assert res.boolean
    assert not db.query(f"ASK {{ GRAPH ?g {{ <{EX}c> ?p ?o }} }}").boolean


def test_blank_nodes_are_scoped_per_write(tmp_path):
    """Each load, payload, LOAD and stream POST gets its own blank node labels (``L<n>x``)."""
    db = Database(shards=2, allow_load=True)
    f = tmp_path / "b.nt"
    f.write_text(f"_:b0 <{EX}p> <{EX}o> .\n")
    db.load_file(f)
    db.load_data(f.read_text(), "application/n-triples")
    db.graph_post(None, f.read_text(), "text/turtle")
    db.update(f"LOAD <{f.as_uri()}>")
    db.update(f"LOAD <{f.as_uri()}>")
    subjects = {r["s"] for r in db.query(f"SELECT ?s WHERE {{ ?s <{EX}p> <{EX}o> }}").rows()}
    assert len(subjects) == 5 and all(s.startswith("_:L") for s in subjects)
