"""Conformance: chains of derived streams (C-SPARQL REGISTER STREAM) against an oracle.

s --(d1: CONSTRUCT over s)--> d1 --(d2: CONSTRUCT over d1, COMPUTED EVERY 500ms)--> d2 --> r (SELECT),
and a reader of d1; written in C-SPARQL (REGISTER STREAM, an RSP-QL reader) and in RSP-QL
(REGISTER RSTREAM <iri> AS CONSTRUCT: the stream <iri>; a CQELS reader). The oracle computes each producer's instants with pyoxigraph, makes
them elements of the derived stream at the instant's time, and evaluates the readers' windows over
those. Every query's instants start at the first instant of the source (the producers' derived
streams start there too, whether or not the first result is empty), also across a restart."""

from __future__ import annotations

import random
import signal

import httpx
import orjson
import pyoxigraph as ox
import pytest

from engine.database import Database
from engine.stream.manager import StreamManager
from tests.pipeline_support import Server
from tests.test_http_queries_sse import SSE

EX = "http://ex.org/"
PFX = f"PREFIX : <{EX}> "
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
END = 9000
D1 = "CONSTRUCT { ?x :hot ?v } WHERE { ?x :v ?v FILTER(?v > 3) }"
D2 = "CONSTRUCT { ?x :veryhot true } WHERE { ?x :hot ?v FILTER(?v > 6) }"
R = "SELECT ?x (COUNT(*) AS ?n) WHERE { ?x :veryhot ?b } GROUP BY ?x"
R2 = "SELECT ?x ?v WHERE { ?x :hot ?v }"
TEXTS_RSPQL = [   # the same chain in RSP-QL (REGISTER RSTREAM <iri> AS CONSTRUCT is the stream <iri>) and CQELS
    "REGISTER RSTREAM <http://ex.org/out/d1> AS CONSTRUCT { ?x :hot ?v } FROM NAMED WINDOW :w ON :s "
    "[RANGE PT2S STEP PT1S] WHERE { WINDOW :w { ?x :v ?v FILTER(?v > 3) } }",
    "REGISTER RSTREAM :d2 COMPUTED EVERY PT0.5S AS CONSTRUCT { ?x :veryhot true } "
    "FROM NAMED WINDOW :w ON <http://ex.org/out/d1> [RANGE PT1.5S] WHERE { WINDOW :w { ?x :hot ?v FILTER(?v > 6) } }",
    "REGISTER RSTREAM <r> AS SELECT ?x (COUNT(*) AS ?n) FROM NAMED WINDOW :w ON :d2 [RANGE PT3S STEP PT1S] "
    "WHERE { WINDOW :w { ?x :veryhot ?b } } GROUP BY ?x",
    "REGISTER QUERY r2 AS SELECT ?x ?v WHERE { STREAM <http://ex.org/out/d1> [RANGE 1s SLIDE 1s] { ?x :hot ?v } }",
]
TEXTS = [
    "REGISTER STREAM d1 AS CONSTRUCT { ?x :hot ?v } FROM STREAM :s [RANGE 2s STEP 1s] WHERE { ?x :v ?v FILTER(?v > 3) }",
    "REGISTER STREAM d2 COMPUTED EVERY 500ms AS CONSTRUCT { ?x :veryhot true } FROM STREAM d1 [RANGE 1500ms] "
    "WHERE { ?x :hot ?v FILTER(?v > 6) }",
    "REGISTER QUERY r AS SELECT ?x (COUNT(*) AS ?n) FROM STREAM d2 [RANGE 3s STEP 1s] WHERE { ?x :veryhot ?b } "
    "GROUP BY ?x",
    "REGISTER RSTREAM <r2> AS SELECT ?x ?v FROM NAMED WINDOW :w ON <urn:jindou:stream:d1> [RANGE PT1S STEP PT1S] "
    "WHERE { WINDOW :w { ?x :hot ?v } }",
]


def run(rows, query) -> ox.QueryResults:
    st = ox.Store()
    st.load("".join(f"{s} {p} {o} .\n" for s, p, o in rows).encode(), format=ox.RdfFormat.N_TRIPLES)
    return st.query(PFX + query)


def triples(res) -> set:
    return {(str(x.subject), str(x.predicate), str(x.object)) for x in res}


def oracle(rows):
    d1 = {t: triples(run({(s, p, o) for s, p, o, tau in rows if t - 2000 < tau <= t}, D1))
          for t in range(0, END + 1, 1000)}
    d2 = {t: triples(run(set().union(*[v for u, v in d1.items() if t - 1500 < u <= t]), D2))
          for t in range(0, END + 1, 500)}
    r = {t: sorted((x["x"].value, x["n"].value) for x in run(set().union(*[v for u, v in d2.items()
                                                                            if t - 3000 < u <= t]), R))
         for t in range(0, END + 1, 1000)}
    r2 = {t: sorted((x["x"].value, x["v"].value) for x in run(d1[t], R2)) for t in range(0, END + 1, 1000)}
    return d1, d2, r, r2


@pytest.mark.parametrize("syntax", ["csparql", "rspql"])
@pytest.mark.parametrize("restart", [False, True])
def test_chain_of_derived_streams_matches_the_oracle(tmp_path, restart, syntax):
    rng = random.Random(1)
    rows, t = [], 0
    while t < END - 500:
        t += rng.choice((0, 100, 300, 700))
        rows.append((f"<{EX}x{rng.randrange(4)}>", f"<{EX}v>", f'"{rng.randrange(10)}"^^<{XSD_INT}>', t))
    db = Database(shards=1)
    data_dir = str(tmp_path) if restart else None
    m = StreamManager(db, data_dir=data_dir)

    def post(part):
        body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o, tau in part)
        assert m.ingest_ndjson("s", body)["rejected"] == 0

    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        for text in TEXTS if syntax == "csparql" else TEXTS_RSPQL:
            m.register_query(PFX + text)
        if syntax == "rspql":
            assert m.stream("d1")["iri"] == EX + "out/d1" and m.stream("d2")["iri"] == EX + "d2"
        cut = 4200 if restart else END + 1
        post([x for x in rows if x[3] < cut])
        if restart:
            assert m.drain(30)
            m.close()
            m = StreamManager(db, data_dir=data_dir)
            post([x for x in rows if x[3] >= cut])
        m.heartbeat("s", END + 1)
        assert m.drain(30)
        d1, d2, r, r2 = oracle(rows)

        def log(name):
            return {e.id: orjson.loads(e.data) for e in m.log(name).since(None, from_t=-1) if e.event == "result"}

        def nt(doc):
            return triples(ox.parse(doc["triples"].encode(), format=ox.RdfFormat.N_TRIPLES))

        got = log("d1")
        assert sorted(got) == sorted(d1)
        assert all(nt(got[t]) == d1[t] for t in d1)
        got = log("d2")
        assert sorted(got) == list(range(0, END + 501, 500))   # d1's progress passes END + 500
        assert all(nt(got[t]) == d2[t] for t in d2)
        got = log("r")
        assert sorted(got) == sorted(r)
        for t in r:
            assert sorted((b["x"]["value"], b["n"]["value"]) for b in got[t]["results"]["bindings"]) == \
                [(x, n) for x, n in r[t]], t
        got = log("r2")
        assert sorted(got) == sorted(r2)
        for t in r2:
            assert sorted((b["x"]["value"], b["v"]["value"]) for b in got[t]["results"]["bindings"]) == r2[t], t
        assert sum(bool(v) for v in r.values()) > 3
        assert m.query("d1")["derived"]["errors"] == 0 and m.query("d2")["derived"]["errors"] == 0
    finally:
        m.close()


@pytest.mark.parametrize("mode", ["RSTREAM", "ISTREAM"])
def test_rspql_output_stream_of_an_unchanged_run(mode):
    """An RSP-QL producer's stream over a run of unchanged instants (reported as one idle event):
    RSTREAM repeats the result as an element at every instant, ISTREAM adds nothing (an empty
    difference), so a reader sees the element once."""
    db = Database(shards=1)
    m = StreamManager(db, idle_after=3)
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        m.register_query(PFX + f"REGISTER {mode} <http://ex.org/out/o> AS CONSTRUCT {{ ?x :q ?y }} "
                               "FROM NAMED WINDOW :w ON :s [RANGE PT100S STEP PT1S] WHERE { WINDOW :w { ?x :p ?y } }")
        m.register_query(PFX + "REGISTER QUERY rd AS SELECT (COUNT(*) AS ?n) FROM STREAM <http://ex.org/out/o> "
                               "[RANGE TRIPLES 1000 STEP 1s] WHERE { ?x :q ?y }")
        m.ingest_ndjson("s", orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": f"<{EX}b>", "t": 500}))
        m.heartbeat("s", 12_001)
        assert m.drain(20)
        assert "idle" in [e.event for e in m.log("o").since(None, from_t=-1)]
        info = m.query("o")["derived"]
        assert info["errors"] == 0 and info["elements"] == (12 if mode == "RSTREAM" else 1)
        st = m.stream("o")
        assert st["iri"] == EX + "out/o" and st["producer"] == "o"
        # the count window holds every element written: one per instant (RSTREAM) or one
        assert st["accepted"] == info["elements"]
    finally:
        m.close()


def test_chain_across_sigkill_of_a_real_server(tmp_path):
    """The chain of C-SPARQL derived streams on a real server killed with SIGKILL mid-stream and
    started again on its data dir: every instant of every query (read back over SSE with
    ?from=0) equals the oracle, none missing, none twice."""
    rng = random.Random(5)
    rows, t = [], 0
    while t < END - 500:
        t += rng.choice((0, 100, 300, 700))
        rows.append((f"<{EX}x{rng.randrange(4)}>", f"<{EX}v>", f'"{rng.randrange(10)}"^^<{XSD_INT}>', t))
    nd = {"Content-Type": "application/x-ndjson"}

    def post(c, part):
        body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o, tau in part)
        r = c.post("/streams/s", content=body, headers=nd)
        assert r.status_code == 202, r.text

    data = tmp_path / "data"
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
            assert c.post("/streams/s/progress?t=0").status_code == 200
            for text in TEXTS:
                r = c.post("/queries", content=PFX + text, headers={"Content-Type": "application/sparql-query"})
                assert r.status_code == 201, r.text
            post(c, [x for x in rows if x[3] < 4700])
            with SSE(f"{srv.url}/queries/r/results?from=0") as sse:
                sse.wait(lambda s: 3000 in s.ids())
    finally:
        srv.stop(signal.SIGKILL)
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            post(c, [x for x in rows if x[3] >= 4700])
            assert c.post(f"/streams/s/progress?t={END + 1}").status_code == 200
            got = {}
            for name, last in (("d1", END), ("d2", END + 500), ("r", END), ("r2", END)):
                with SSE(f"{srv.url}/queries/{name}/results?from=0") as sse:
                    sse.wait(lambda s, last=last: last in s.ids(), timeout=60)
                    evs = sse.of("result")
                    ids = [e["id"] for e in evs]
                    assert len(ids) == len(set(ids)), name
                    got[name] = {e["id"]: orjson.loads(e["data"]) for e in evs}
    finally:
        srv.stop()
    d1, d2, r, r2 = oracle(rows)

    def nt(doc):
        return triples(ox.parse(doc["triples"].encode(), format=ox.RdfFormat.N_TRIPLES))

    assert sorted(got["d1"]) == sorted(d1) and all(nt(got["d1"][t]) == d1[t] for t in d1)
    assert all(nt(got["d2"][t]) == d2[t] for t in d2)
    assert sorted(got["r"]) == sorted(r)
    for t in r:
        assert sorted((b["x"]["value"], b["n"]["value"]) for b in got["r"][t]["results"]["bindings"]) == r[t], t
    for t in r2:
        assert sorted((b["x"]["value"], b["v"]["value"]) for b in got["r2"][t]["results"]["bindings"]) == r2[t], t
