"""Unchanged instants cost nothing: far heartbeats, idle events, fairness between queries,
resuming inside an idle run (engine.stream.manager / continuous)."""

from __future__ import annotations

import threading
import time

import orjson

from engine.stream.limits import TIME_MAX

EX = "http://ex.org/"


def nd(*rows) -> bytes:
    return b"\n".join(orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}p>", "o": f'"{o}"', "t": t}) for s, o, t in rows)


def events(m, name):
    return [e for e in m.log(name).since(None, from_t=0) if e.event in ("result", "idle")]


def covered(evs, step):
    """(first, last) instants covered by the events, checking they tile them without gap or overlap."""
    nxt = None
    first = None
    for e in evs:
        start = e.start if e.event == "idle" else e.id
        if nxt is not None:
            assert start == nxt, (start, nxt)
        first = start if first is None else first
        if e.event == "idle":
            d = orjson.loads(e.data)
            assert (d["from"], d["to"]) == (e.start, e.id) and d["instants"] == (e.id - e.start) // step + 1
        nxt = e.id + step
    return first, nxt - step


def bindings(e):
    return sorted(b["o"]["value"] for b in orjson.loads(e.data)["results"]["bindings"])


def test_far_heartbeat_finishes_and_other_queries_keep_their_windows(env):
    _, m = env
    m.register_stream("a", EX + "a")
    m.register_stream("b", EX + "b")
    m.heartbeat("a", 0)
    m.heartbeat("b", 0)
    m.register_query("REGISTER QUERY far AS SELECT ?o FROM a [RANGE 1s STEP 1ms] WHERE { ?s ?p ?o }")
    m.register_query("REGISTER DSTREAM QUERY fard AS SELECT ?o FROM a [RANGE 1s STEP 1ms] WHERE { ?s ?p ?o }")
    m.register_query("REGISTER QUERY cnt AS SELECT ?o FROM a [RANGE TRIPLES 2 STEP 1ms] WHERE { ?s ?p ?o }")
    m.register_query("REGISTER QUERY other AS SELECT ?o FROM b [RANGE 1s STEP 100ms] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("a", nd(("x", "1", 5), ("y", "2", 2000), ("z", "3", 10**12)))
    t0 = time.monotonic()
    assert m.heartbeat("a", TIME_MAX) == TIME_MAX
    m.ingest_ndjson("b", nd(*[("w", i, i * 250) for i in range(12)]))
    m.heartbeat("b", 3001)
    assert m.drain(60), "the worker did not finish"
    assert time.monotonic() - t0 < 60
    # every instant of the far queries is reported, the unchanged runs as a few idle events
    for name in ("far", "fard", "cnt"):
        evs = events(m, name)
        assert covered(evs, 1) == (0, TIME_MAX - 1)
        assert len(evs) < 200, (name, len(evs))
        assert m.query(name)["evaluated"] == TIME_MAX and m.query(name)["unchanged_instants"] > TIME_MAX - 200
    far = {e.id: e for e in events(m, "far") if e.event == "result"}
    assert bindings(far[5]) == ["1"] and bindings(far[1005]) == [] and bindings(far[2000]) == ["2"]
    assert bindings(far[10**12]) == ["3"] and bindings(far[10**12 + 1000]) == []
    idle = [orjson.loads(e.data) for e in events(m, "far") if e.event == "idle"]
    assert {"from": 1006, "to": 1999, "instants": 994, "same_as": 1005} in idle
    # DSTREAM: a removal only where an element leaves; idle runs are empty differences
    fard = {e.id: bindings(e) for e in events(m, "fard") if e.event == "result"}
    assert fard[1005] == ["1"] and fard[3000] == ["2"] and sum(map(len, fard.values())) == 3
    # the count window changes only when elements arrive
    cnt = [e for e in events(m, "cnt") if e.event == "result"]
    assert bindings(max(cnt, key=lambda e: e.id)) == ["2", "3"]
    other = events(m, "other")
    assert [e.id for e in other] == list(range(0, 3001, 100))
    assert bindings(other[-1]) == sorted(str(i) for i in range(9, 12))   # (2000, 3000]


def test_short_unchanged_runs_are_reported_instant_by_instant(env):
    _, m = env
    m.register_stream("s", EX + "s")
    m.heartbeat("s", 0)
    m.register_query("REGISTER QUERY r AS SELECT ?o FROM s [RANGE 10s STEP 1s] WHERE { ?s ?p ?o }")
    m.register_query("REGISTER ISTREAM QUERY i AS SELECT ?o FROM s [RANGE 10s STEP 1s] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("s", nd(("x", "1", 500)))
    m.heartbeat("s", 5001)
    assert m.drain(20)
    r = events(m, "r")
    assert [e.event for e in r] == ["result"] * 6 and [bindings(e) for e in r] == [[]] + [["1"]] * 5
    assert [orjson.loads(e.data)["window"] for e in r] == [{"start": t - 10000, "end": t} for t in range(0, 5001, 1000)]
    i = events(m, "i")
    assert [bindings(e) for e in i] == [[], ["1"], [], [], [], []]
    assert m.query("r")["evaluated"] == 6 and m.query("r")["unchanged_instants"] == 4


def test_store_changes_end_an_unchanged_run(env):
    db, m = env
    m.register_stream("s", EX + "s")
    m.heartbeat("s", 0)
    m.register_query(f"REGISTER QUERY q AS SELECT ?l FROM s [RANGE 1000s STEP 1ms] FROM <urn:jindou:default> "
                     f"WHERE {{ ?x <{EX}p> ?y . ?x <{EX}label> ?l }}")
    m.ingest_ndjson("s", nd(("a", "b", 5)))
    m.heartbeat("s", 100_000)
    assert m.drain(20)
    db.update(f'INSERT DATA {{ <{EX}a> <{EX}label> "A" }}')
    m.heartbeat("s", 200_000)
    assert m.drain(20)
    evs = events(m, "q")
    assert covered(evs, 1) == (0, 199_999)
    res = {e.id: [b["l"]["value"] for b in orjson.loads(e.data)["results"]["bindings"]]
           for e in evs if e.event == "result"}
    assert res[100_000] == ["A"] and res[5] == []
    assert len(evs) < 20


def test_absorbed_triples_end_an_unchanged_run(env):
    _, m = env
    m.register_stream("s", EX + "s")
    m.register_stream("t", EX + "t", absorb="all")
    m.heartbeat("s", 0)
    m.heartbeat("t", 0)
    m.register_query(f"REGISTER QUERY q AS SELECT ?o FROM s [RANGE 1s STEP 1ms] FROM <urn:jindou:default> "
                     f"WHERE {{ ?x <{EX}p> ?o }}")
    m.ingest_ndjson("t", nd(("k", "stored", 50_000)))   # in the stored graph as of t >= 50000
    m.heartbeat("t", TIME_MAX)
    m.heartbeat("s", 100_000)
    assert m.drain(30)
    evs = events(m, "q")
    assert covered(evs, 1) == (0, 99_999)
    res = {e.id: bindings(e) for e in evs if e.event == "result"}
    assert res[50_000] == ["stored"] and res[0] == []
    for e in evs:   # an idle run never straddles the change
        if e.event == "idle":
            assert e.id < 50_000 or e.start > 50_000


def test_resume_inside_an_idle_run(env):
    _, m = env
    m.register_stream("s", EX + "s")
    m.heartbeat("s", 0)
    m.register_query("REGISTER QUERY q AS SELECT ?o FROM s [RANGE 1s STEP 10ms] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("s", nd(("x", "1", 5)))
    m.heartbeat("s", 1_000_000)
    assert m.drain(20)
    log = m.log("q")
    last = [e for e in log.since(None, from_t=0) if e.event == "idle"][-1]
    assert (last.start, last.id) == (1020, 999_990)
    # Last-Event-ID inside the run: the rest of the run, as one idle event
    evs = log.since(5000)
    assert len(evs) == 1 and evs[0].event == "idle"
    assert orjson.loads(evs[0].data) == {"from": 5010, "to": 999_990, "instants": 99_499, "same_as": 1010}
    assert log.since(999_990) == []
    # ?from= inside the run (not aligned): from the first instant at or after it
    evs = log.since(None, from_t=123_456)
    assert orjson.loads(evs[0].data)["from"] == 123_460 and evs[0].id == 999_990
    assert log.since(None, from_t=TIME_MAX) == []


def test_worker_is_round_robin(env):
    """A query with a long backlog of changing instants does not hold the worker: every other
    ready query gets a turn after each of its instants."""
    _, m = env
    m.register_stream("a", EX + "a")
    m.register_stream("b", EX + "b")
    m.heartbeat("a", 0)
    m.heartbeat("b", 0)
    m.register_query("REGISTER QUERY busy AS SELECT ?o FROM a [RANGE 5ms STEP 1ms] WHERE { ?s ?p ?o }")
    m.register_query("REGISTER QUERY calm AS SELECT ?o FROM b [RANGE 1s STEP 1s] WHERE { ?s ?p ?o }")
    order: list[str] = []
    gate = threading.Event()
    for name in ("busy", "calm"):
        ev = m._reg.queries[name].evaluator
        real = ev.run

        def run(t, real=real, name=name):
            order.append(name)
            gate.wait(30)
            return real(t)
        ev.run = run
    m.ingest_ndjson("a", nd(*[("x", i, i) for i in range(400)]))   # a change at every instant
    m.heartbeat("a", 400)
    deadline = time.monotonic() + 30
    while not order and time.monotonic() < deadline:
        time.sleep(0.01)
    m.ingest_ndjson("b", nd(*[("y", i, i * 1000) for i in range(5)]))
    m.heartbeat("b", 5001)   # calm becomes ready while busy's backlog is being evaluated
    gate.set()
    assert m.drain(60)
    first_calm = order.index("calm")
    assert first_calm <= 3, order[:10]
    calm_at = [i for i, n in enumerate(order) if n == "calm"]
    assert calm_at == list(range(first_calm, first_calm + 2 * len(calm_at), 2)), order[:20]
    assert len(events(m, "calm")) == 6 and len(events(m, "busy")) == 400
