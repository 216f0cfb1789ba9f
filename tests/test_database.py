"""The Database facade: updates (atomic per request), Graph Store operations,
LOAD, budgets, snapshots."""

from __future__ import annotations

import pytest

from engine.database import Database
from engine.errors import QueryTimeout, RowBudgetExceeded, UpdateError

P = "PREFIX : <http://ex.org/> "


def keys(db, q, **kw):
    return sorted(tuple(sorted(r.items())) for r in db.query(P + q, **kw).rows())


def count(db, q="SELECT * WHERE { ?s ?p ?o }"):
    return len(db.query(P + q))


def test_insert_delete_data_and_modify():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { :a :p :b . :b :p :c . GRAPH :g { :a :q 1 } }")
    assert count(db) == 2
    assert count(db, "SELECT * WHERE { GRAPH :g { ?s ?p ?o } }") == 1
    db.update(P + "DELETE { ?s :p ?o } INSERT { ?o :inv ?s } WHERE { ?s :p ?o }")
    assert keys(db, "SELECT ?s WHERE { ?s :inv ?o }") == [(("s", "<http://ex.org/b>"),), (("s", "<http://ex.org/c>"),)]
    assert count(db, "SELECT * WHERE { ?s :p ?o }") == 0
    db.update(P + "DELETE DATA { :b :inv :a }")
    assert count(db) == 1
    db.update(P + "DELETE WHERE { ?s :inv ?o }")
    assert count(db) == 0


def test_operations_see_previous_ones_and_request_is_atomic():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { :a :p 1 } ; INSERT { ?s :q ?o } WHERE { ?s :p ?o }")
    assert count(db) == 2
    sn = db.store.snapshot().sn
    with pytest.raises(UpdateError):
        db.update(P + "INSERT DATA { :z :z :z } ; DROP GRAPH :absent")
    assert db.store.snapshot().sn == sn
    assert count(db) == 2
    db.update(P + "INSERT DATA { :z :z :z } ; DROP SILENT GRAPH :absent")
    assert count(db) == 3


def test_computed_terms_and_blank_nodes_are_interned():
    db = Database(shards=2)
    db.update(P + 'INSERT { :a :name ?n . :a :r [] } WHERE { BIND(CONCAT("x", "y") AS ?n) }')
    rows = db.query(P + "SELECT ?n WHERE { :a :name ?n }").rows()
    assert rows == [{"n": '"xy"'}]
    assert db.query(P + "SELECT ?b WHERE { :a :r ?b }").rows()[0]["b"].startswith("_:")


def test_with_using_and_graph_management():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { GRAPH :g1 { :a :p :b } GRAPH :g2 { :c :p :d } }")
    db.update(P + "WITH :g1 INSERT { ?s :q ?o } WHERE { ?s :p ?o }")
    assert count(db, "SELECT * WHERE { GRAPH :g1 { ?s :q ?o } }") == 1
    db.update(P + "INSERT { ?s :r ?o } USING :g2 WHERE { ?s :p ?o }")
    assert keys(db, "SELECT ?s WHERE { ?s :r ?o }") == [(("s", "<http://ex.org/c>"),)]
    db.update(P + "COPY :g1 TO :g3 ; MOVE :g2 TO DEFAULT ; ADD :g1 TO :g3")
    assert count(db, "SELECT * WHERE { GRAPH :g3 { ?s ?p ?o } }") == 2
    assert count(db, "SELECT * WHERE { GRAPH :g2 { ?s ?p ?o } }") == 0
    assert count(db, "SELECT * WHERE { ?s :p ?o }") == 1
    with pytest.raises(UpdateError):
        db.update(P + "CREATE GRAPH :g1")
    db.update(P + "CREATE GRAPH :empty")
    assert count(db, "SELECT ?g WHERE { GRAPH ?g { } }") == 3
    db.update(P + "CLEAR GRAPH :g1")
    assert count(db, "SELECT * WHERE { GRAPH :g1 { ?s ?p ?o } }") == 0
    db.update("DROP ALL")
    assert count(db) == 0 and db.status()["named_graphs"] == 0


def test_load_is_gated(tmp_path):
    f = tmp_path / "d.ttl"
    f.write_text("<http://ex.org/a> <http://ex.org/p> <http://ex.org/b> .\n")
    db = Database(shards=2)
    with pytest.raises(UpdateError):
        db.update(f"LOAD <file://{f}>")
    db.update(f"LOAD SILENT <file://{f}>")
    assert count(db) == 0
    db = Database(shards=2, allow_load=True)
    db.update(f"LOAD <file://{f}> INTO GRAPH <http://ex.org/g>")
    assert count(db, "SELECT * WHERE { GRAPH :g { ?s ?p ?o } }") == 1
    with pytest.raises(UpdateError):
        db.update("LOAD <http://example.org/remote.ttl>")


def test_graph_store_operations():
    db = Database(shards=2)
    ttl = "<http://ex.org/a> <http://ex.org/p> <http://ex.org/b> ."
    assert db.graph_put("http://ex.org/g", ttl, "text/turtle") is True
    assert db.graph_put("http://ex.org/g", ttl, "text/turtle") is False
    assert len(db.graph_get("http://ex.org/g")) == 1
    assert db.graph_post("http://ex.org/g", "<http://ex.org/c> <http://ex.org/p> <http://ex.org/d> .",
                         "text/turtle") is False
    assert len(db.graph_get("http://ex.org/g")) == 2
    db.graph_post(None, ttl, "text/turtle")
    assert len(db.graph_get(None)) == 1
    db.graph_delete("http://ex.org/g")
    with pytest.raises(KeyError):
        db.graph_get("http://ex.org/g")
    with pytest.raises(KeyError):
        db.graph_delete("http://ex.org/g")


def test_budgets():
    db = Database(shards=2, max_rows=1000)
    lines = "".join(f"<http://ex.org/s{i}> <http://ex.org/p> <http://ex.org/o{i % 7}> .\n" for i in range(300))
    db.load_data(lines, "application/n-triples")
    with pytest.raises(RowBudgetExceeded):
        db.query(P + "SELECT * WHERE { ?a :p ?x . ?b :p ?y }")
    with pytest.raises(QueryTimeout):
        db.query(P + "SELECT * WHERE { ?a :p ?x . ?b :p ?y . ?c :p ?z }", timeout=1e-9, max_rows=10**9)


def test_snapshot_isolation():
    db = Database(shards=2)
    db.update(P + "INSERT DATA { :a :p :b }")
    snap = db.store.snapshot()
    db.update(P + "INSERT DATA { :a :p :c }")
    from engine.exec.evaluate import QueryContext, evaluate_query, make_dataset
    from engine.sparql.parser import parse_query

    ctx = QueryContext(snap)
    res = evaluate_query(parse_query(P + "SELECT * WHERE { ?s ?p ?o }"), ctx, make_dataset(ctx))
    assert len(res) == 1
    assert count(db) == 2


def test_concurrent_queries_and_updates():
    import threading

    db = Database(shards=2)
    db.update(P + "INSERT DATA { :a :n 0 }")
    errors = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                n = len(db.query(P + "SELECT * WHERE { ?s :n ?v }"))
                assert n >= 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(1, 40):
        db.update(P + f"INSERT DATA {{ :s{i} :n {i} }}")
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert count(db, "SELECT * WHERE { ?s :n ?v }") == 40


def test_status_is_json_ready():
    import json

    db = Database(shards=2)
    db.update(P + "INSERT DATA { GRAPH :g { :a :p :b } }")
    st = db.status()
    json.dumps(st)
    assert st["graph_triples"] == {"http://ex.org/g": 1}
