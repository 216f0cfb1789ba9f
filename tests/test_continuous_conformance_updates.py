"""Conformance: stored data changed through SPARQL Update / the Graph Store Protocol while
continuous queries run is seen from the first instant evaluated after the change commits (and
not before), whatever evaluation path the query takes (tuple at a time, compact, incremental,
batched with peers of its shape, RSP-QL's default graph, FILTER NOT EXISTS over stored data)."""

from __future__ import annotations

import orjson
import pytest

from engine.database import Database
from engine.stream.manager import StreamManager

EX = "http://ex.org/"
PFX = f"PREFIX : <{EX}> "
QUERIES = {
    "join": "SELECT ?o ?r FROM STREAM :s [RANGE 2s STEP 1s] FROM <urn:jindou:default> WHERE { ?o :by ?x . ?x :in ?r }",
    "agg": "SELECT ?r (COUNT(*) AS ?n) FROM STREAM :s [RANGE 3s STEP 1s] FROM <urn:jindou:default> "
           "WHERE { ?o :by ?x . ?x :in ?r } GROUP BY ?r",
    "notex": "SELECT ?o FROM STREAM :s [RANGE 2s STEP 1s] FROM <urn:jindou:default> "
             "WHERE { ?o :by ?x FILTER NOT EXISTS { ?x :in :r9 } }",
    "opt": "SELECT ?o ?r FROM STREAM :s [RANGE 2s STEP 1s] FROM <urn:jindou:default> "
           "WHERE { ?o :by ?x OPTIONAL { ?x :in ?r } }",
    "peer1": "SELECT ?o FROM STREAM :s [RANGE 2s STEP 1s] FROM <urn:jindou:default> WHERE { ?o :by ?x . ?x :in :r1 }",
    "peer9": "SELECT ?o FROM STREAM :s [RANGE 2s STEP 1s] FROM <urn:jindou:default> WHERE { ?o :by ?x . ?x :in :r9 }",
    "named": "SELECT ?o ?r FROM STREAM :s [RANGE 2s STEP 1s] FROM <http://ex.org/g> WHERE { ?o :by ?x . ?x :in ?r }",
}
RSP = ("REGISTER RSTREAM <rsp> AS SELECT ?o ?r FROM NAMED WINDOW :w ON :s [RANGE PT2S STEP PT1S] "
       "WHERE { WINDOW :w { ?o :by ?x } ?x :in ?r }")


def rows(doc) -> list:
    return sorted(tuple(sorted((k, v["value"].replace(EX, "")) for k, v in b.items()))
                  for b in doc["results"]["bindings"])


@pytest.mark.parametrize("incremental", [True, "always"])
@pytest.mark.parametrize("via", ["update", "gsp"])
def test_stored_changes_are_seen_from_the_next_instant(incremental, via):
    db = Database(shards=2)
    db.update(PFX + "INSERT DATA { :x1 :in :r1 . :x2 :in :r1 . GRAPH :g { :x1 :in :g1 } }")
    m = StreamManager(db, incremental=incremental)
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        for name, q in QUERIES.items():
            m.register_query(PFX + f"REGISTER QUERY {name} AS " + q)
        m.register_query(PFX + RSP)
        t = 0
        for k in range(8):   # an element every 500 ms, observations by x1 and x2 in turn
            t = 250 + k * 500
            body = orjson.dumps({"s": f"<{EX}o{k}>", "p": f"<{EX}by>", "o": f"<{EX}x{k % 2 + 1}>", "t": t})
            assert m.ingest_ndjson("s", body)["rejected"] == 0
            if k == 3:
                m.heartbeat("s", 2001)   # instants 0..2000 are evaluated before the change
                assert m.drain(20)
                if via == "update":
                    db.update(PFX + "DELETE DATA { :x2 :in :r1 } ; INSERT DATA { :x2 :in :r9 . GRAPH :g { :x2 :in :g2 } }")
                else:
                    db.graph_put(None, f"<{EX}x1> <{EX}in> <{EX}r1> .\n<{EX}x2> <{EX}in> <{EX}r9> .\n".encode(),
                                 "application/n-triples")
                    db.graph_post(EX + "g", f"<{EX}x2> <{EX}in> <{EX}g2> .\n".encode(), "application/n-triples")
        m.heartbeat("s", 4001)
        assert m.drain(20)
        got = {n: {e.id: rows(orjson.loads(e.data)) for e in m.log(n).since(None, from_t=-1)}
               for n in [*QUERIES, "rsp"]}
        before = {"x1": "r1", "x2": "r1"}
        after = {"x1": "r1", "x2": "r9"}
        for t in range(0, 4001, 1000):
            where = before if t <= 2000 else after
            win = [(f"o{k}", f"x{k % 2 + 1}") for k in range(8) if t - 2000 < 250 + k * 500 <= t]
            win3 = [(f"o{k}", f"x{k % 2 + 1}") for k in range(8) if t - 3000 < 250 + k * 500 <= t]
            join = sorted(((("o", o), ("r", where[x])) for o, x in win))
            assert got["join"][t] == join, t
            assert got["rsp"][t] == join, t
            assert got["opt"][t] == join, t
            counts: dict = {}
            for _, x in win3:
                counts[where[x]] = counts.get(where[x], 0) + 1
            assert got["agg"][t] == sorted(((("n", str(c)), ("r", r)) for r, c in counts.items())), t
            assert got["notex"][t] == sorted(((("o", o),) for o, x in win if where[x] != "r9")), t
            assert got["peer1"][t] == sorted(((("o", o),) for o, x in win if where[x] == "r1")), t
            assert got["peer9"][t] == sorted(((("o", o),) for o, x in win if where[x] == "r9")), t
            ing = {"x1": "g1"} if t <= 2000 else {"x1": "g1", "x2": "g2"}
            assert got["named"][t] == sorted(((("o", o), ("r", ing[x])) for o, x in win if x in ing)), t
    finally:
        m.close()
