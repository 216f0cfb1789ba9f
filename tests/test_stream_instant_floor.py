"""The work around an instant's evaluation (engine.stream.scheduler / continuous / delta):
what an unchanged instant reports as its latency, the unchanged-instant check kept per
evaluated instant, the delta check's constants kept across instants."""

from __future__ import annotations

import orjson

from engine.sparql.csparql import parse_continuous
from engine.stream.delta import DeltaGuard

EX = "http://ex.org/"


def nd(*rows) -> bytes:
    return b"\n".join(orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}{p}>", "o": f'"{o}"', "t": t})
                      for s, p, o, t in rows)


def test_unchanged_instant_reports_its_own_latency(env):
    """An instant reported as unchanged (the same windows as the last evaluated one) sets the
    query's ``last_latency_ms`` to what it cost, not the last evaluated instant's."""
    _, m = env
    m.register_stream("a", EX + "a")
    m.heartbeat("a", 0)
    m.register_query("REGISTER QUERY q AS SELECT ?o FROM a [RANGE 10s STEP 1s] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("a", nd(("x", "p", "1", 500)))
    m.heartbeat("a", 1001)     # instants 0 and 1000 (an instant is ready once progress passes it)
    assert m.drain(30)
    info = m.query("q")
    assert info["evaluated"] == 2 and info["unchanged_instants"] == 0
    q = m._reg.queries["q"]
    q.last_latency_ms = -1.0   # a marker: the next instant must replace it
    m.heartbeat("a", 2001)     # nothing entered or left: instant 2000 equals instant 1000
    assert m.drain(30)
    info = m.query("q")
    assert info["evaluated"] == 3 and info["unchanged_instants"] == 1
    assert info["last_latency_ms"] is not None and info["last_latency_ms"] >= 0
    evs = [e for e in m.log("q").since(None, from_t=0) if e.event == "result"]
    assert [orjson.loads(e.data)["window"] for e in evs[1:]] == [{"start": -9000, "end": 1000},
                                                                 {"start": -8000, "end": 2000}]
    assert orjson.loads(evs[1].data)["results"] == orjson.loads(evs[2].data)["results"]


def test_unchanged_check_sees_an_element_that_arrives_after_its_first_call(env):
    """The check keeps what it read per evaluated instant; an element arriving after the first
    check of that instant still ends the unchanged run at the instant it enters."""
    _, m = env
    m.register_stream("a", EX + "a")
    m.heartbeat("a", 0)
    m.register_query("REGISTER QUERY q AS SELECT ?o FROM a [RANGE 10s STEP 1s] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("a", nd(("x", "p", "1", 500)))
    m.heartbeat("a", 1001)
    assert m.drain(30)
    m.heartbeat("a", 2001)   # unchanged (first check of the state: no next element)
    assert m.drain(30)
    m.ingest_ndjson("a", nd(("y", "p", "2", 2500)))
    m.heartbeat("a", 4001)   # 3000 sees the new element, 4000 equals 3000
    assert m.drain(30)
    evs = [e for e in m.log("q").since(None, from_t=0) if e.event == "result"]
    got = {e.id: sorted(b["o"]["value"] for b in orjson.loads(e.data)["results"]["bindings"]) for e in evs}
    assert got == {0: [], 1000: ["1"], 2000: ["1"], 3000: ["1", "2"], 4000: ["1", "2"]}
    assert m.query("q")["evaluated"] == 5 and m.query("q")["unchanged_instants"] == 2


def test_delta_constants_kept_until_the_dictionary_grows(env):
    """The delta check resolves its constants once per dictionary size; a constant absent at
    first is found once a later element interns it."""
    db, m = env
    cq = parse_continuous(f"REGISTER QUERY d AS SELECT ?s FROM <{EX}a> [RANGE 10s STEP 1s] "
                          f"WHERE {{ ?s <{EX}p> <{EX}never-seen> }}")
    dg = DeltaGuard(cq.query)
    d = db.store.dictionary
    assert dg._resolve(d) == []          # the constant is absent: the pattern matches nothing
    first = dg._consts
    assert dg._resolve(d) == [] and dg._consts is first   # same size: kept
    with db.store.write_lock:
        d.encode([f"<{EX}never-seen>", f"<{EX}p>"])
    got = dg._resolve(d)
    assert got == [(None, d.lookup(f"<{EX}p>"), d.lookup(f"<{EX}never-seen>"))]
