"""The same continuous query written in C-SPARQL, RSP-QL and CQELS-QL gives the same windows;
f:timestamp; unknown functions; REGISTER STREAM (derived streams); COMPUTED EVERY."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from engine.database import Database
from engine.errors import QuerySyntaxError
from engine.stream.manager import StreamInUse, StreamIsDerived, StreamManager

EX = "http://ex.org/"
F = "http://larkc.eu/csparql/sparql/jena/ext#"
PFX = f"PREFIX : <{EX}> PREFIX f: <{F}> "


def line(s, p, o, t) -> bytes:
    return orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}{p}>", "o": f"<{EX}{o}>", "t": t})


def events(m: StreamManager, name: str) -> list[tuple[int, dict]]:
    assert m.drain(20)
    return [(e.id, orjson.loads(e.data)) for e in m.log(name).since(None, from_t=-(1 << 62))
            if e.event == "result"]


def solutions(doc: dict) -> list:
    if "triples" in doc:
        return sorted(x for x in doc["triples"].split("\n") if x)
    if "boolean" in doc:
        return [doc["boolean"]]
    return sorted(tuple(sorted((k, v["value"]) for k, v in b.items())) for b in doc["results"]["bindings"])


def random_elements(rng: random.Random, n: int, t_max: int) -> list[bytes]:
    """Stream elements over :p and :r (never :q, which only the store has), in time order."""
    ts = sorted(rng.randrange(0, t_max) for _ in range(n))
    out = []
    for t in ts:
        s, o = f"n{rng.randrange(6)}", f"n{rng.randrange(6)}"
        out.append(line(s, rng.choice(["p", "r"]), o, t))
    return out


# Each case: the same query in the three syntaxes (C-SPARQL windows are in the default graph and
# stored data needs FROM <urn:jindou:default>; RSP-QL and CQELS see the store's default graph).
CASES = {
    "bgp": (
        "REGISTER QUERY {n} AS SELECT ?s ?o FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] WHERE {{ ?s :p ?o }}",
        "REGISTER RSTREAM <http://ex.org/out/{n}> AS SELECT ?s ?o FROM NAMED WINDOW :w ON :s [RANGE PT3S STEP PT1S] "
        "WHERE {{ WINDOW :w {{ ?s :p ?o }} }}",
        "REGISTER QUERY {n} AS SELECT ?s ?o WHERE {{ STREAM <http://ex.org/s> [RANGE 3s SLIDE 1s] {{ ?s :p ?o }} }}",
    ),
    "static_join": (
        "REGISTER QUERY {n} AS SELECT ?s ?x FROM STREAM <http://ex.org/s> [RANGE 2500ms STEP 500ms] "
        "FROM <urn:jindou:default> WHERE {{ ?s :p ?o . ?o :q ?x }}",
        "REGISTER RSTREAM <{n}> AS SELECT ?s ?x FROM NAMED WINDOW <w1> ON <http://ex.org/s> [RANGE PT2.5S STEP PT0.5S] "
        "WHERE {{ WINDOW <w1> {{ ?s :p ?o }} ?o :q ?x }}",
        "REGISTER QUERY {n} AS SELECT ?s ?x WHERE {{ STREAM <http://ex.org/s> [RANGE 2500 ms SLIDE 500 ms] "
        "{{ ?s :p ?o }} ?o :q ?x }}",
    ),
    "count": (
        "REGISTER QUERY {n} AS SELECT ?p (COUNT(*) AS ?c) FROM STREAM <http://ex.org/s> [RANGE 5s TUMBLING] "
        "WHERE {{ ?s ?p ?o }} GROUP BY ?p",
        "REGISTER RSTREAM <{n}> AS SELECT ?p (COUNT(*) AS ?c) FROM NAMED WINDOW :w ON STREAM :s "
        "[FROM NOW-PT5S TO NOW STEP PT5S] WHERE {{ WINDOW :w {{ ?s ?p ?o }} }} GROUP BY ?p",
        "REGISTER QUERY {n} COMPUTED EVERY 5s AS SELECT ?p (COUNT(*) AS ?c) "
        "WHERE {{ STREAM <http://ex.org/s> [RANGE 5s] {{ ?s ?p ?o }} }} GROUP BY ?p",
    ),
    "istream_construct": (
        "REGISTER ISTREAM QUERY {n} AS CONSTRUCT {{ ?o :back ?s }} FROM STREAM <http://ex.org/s> "
        "[RANGE 2s STEP 1s] WHERE {{ ?s :r ?o }}",
        "REGISTER ISTREAM <{n}> AS CONSTRUCT {{ ?o :back ?s }} FROM NAMED WINDOW :w ON :s [RANGE PT2S STEP PT1S] "
        "WHERE {{ WINDOW :w {{ ?s :r ?o }} }}",
        "REGISTER ISTREAM QUERY {n} AS CONSTRUCT {{ ?o :back ?s }} WHERE {{ STREAM <http://ex.org/s> "
        "[RANGE 2s SLIDE 1s] {{ ?s :r ?o }} }}",
    ),
    "two_streams": (
        "REGISTER QUERY {n} AS SELECT ?s ?x FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "FROM STREAM <http://ex.org/u> [RANGE 2s STEP 1s] "
        "WHERE {{ GRAPH <http://ex.org/s> {{ ?s :p ?o }} GRAPH <http://ex.org/u> {{ ?o :r ?x }} }}",
        "REGISTER RSTREAM <{n}> AS SELECT ?s ?x FROM NAMED WINDOW :ws ON :s [RANGE PT3S STEP PT1S] "
        "FROM NAMED WINDOW :wu ON :u [RANGE PT2S STEP PT1S] WHERE {{ WINDOW :ws {{ ?s :p ?o }} WINDOW :wu {{ ?o :r ?x }} }}",
        "REGISTER QUERY {n} AS SELECT ?s ?x WHERE {{ STREAM <http://ex.org/s> [RANGE 3s SLIDE 1s] {{ ?s :p ?o }} "
        "STREAM <http://ex.org/u> [RANGE 2s SLIDE 1s] {{ ?o :r ?x }} }}",
    ),
    # CQELS evaluates a window without SLIDE on every arrival and expiry: one instant per
    # millisecond (the unit of element times), the same windows as STEP 1ms elsewhere
    "continuous": (
        "REGISTER QUERY {n} AS SELECT ?s ?x FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1ms] "
        "FROM <urn:jindou:default> WHERE {{ ?s :p ?o OPTIONAL {{ ?o :q ?x }} }}",
        "REGISTER RSTREAM <{n}> AS SELECT ?s ?x FROM NAMED WINDOW :w ON :s [RANGE PT3S STEP PT0.001S] "
        "WHERE {{ WINDOW :w {{ ?s :p ?o }} OPTIONAL {{ ?o :q ?x }} }}",
        "REGISTER QUERY {n} AS SELECT ?s ?x WHERE {{ STREAM <http://ex.org/s> [RANGE 3s] {{ ?s :p ?o }} "
        "OPTIONAL {{ ?o :q ?x }} }}",
    ),
    "continuous_istream_now": (
        "REGISTER ISTREAM QUERY {n} AS SELECT ?s ?o FROM STREAM <http://ex.org/s> [RANGE 1ms STEP 1ms] "
        "WHERE {{ ?s :r ?o }}",
        "REGISTER ISTREAM <{n}> AS SELECT ?s ?o FROM NAMED WINDOW :w ON :s [FROM NOW-PT0.001S TO NOW "
        "STEP PT0.001S] WHERE {{ WINDOW :w {{ ?s :r ?o }} }}",
        "REGISTER ISTREAM QUERY {n} AS SELECT ?s ?o WHERE {{ STREAM <http://ex.org/s> [NOW] {{ ?s :r ?o }} }}",
    ),
    "continuous_count_window": (
        "REGISTER QUERY {n} AS SELECT ?s ?o FROM STREAM <http://ex.org/s> [RANGE TRIPLES 3 STEP 1ms] "
        "WHERE {{ ?s ?p ?o }}",
        "REGISTER RSTREAM <{n}> AS SELECT ?s ?o FROM NAMED WINDOW :w ON :s [ITEM 3 STEP PT0.001S] "
        "WHERE {{ WINDOW :w {{ ?s ?p ?o }} }}",
        "REGISTER QUERY {n} AS SELECT ?s ?o WHERE {{ STREAM <http://ex.org/s> [TRIPLES 3] {{ ?s ?p ?o }} }}",
    ),
    "count_window": (
        "REGISTER QUERY {n} AS SELECT ?s ?o FROM STREAM <http://ex.org/s> [RANGE TRIPLES 4 STEP 1s] "
        "WHERE {{ ?s ?p ?o }}",
        "REGISTER QUERY {n} COMPUTED EVERY PT1S AS SELECT ?s ?o FROM STREAM <http://ex.org/s> [RANGE TRIPLES 4] "
        "WHERE {{ ?s ?p ?o }}",
        "REGISTER QUERY {n} AS SELECT ?s ?o WHERE {{ STREAM <http://ex.org/s> [TRIPLES 4 SLIDE 1s] {{ ?s ?p ?o }} }}",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [1, 2])
def test_same_windows_in_every_syntax(case, seed):
    rng = random.Random(seed * 7919 + len(case))
    db = Database(shards=2)
    db.update(PFX + "INSERT DATA { " + " ".join(f":n{i} :q :x{i % 3} ." for i in range(0, 6, 2)) + " }")
    m = StreamManager(db)
    try:
        m.register_stream("s", EX + "s")
        m.register_stream("u", EX + "u")
        names = []
        for k, tmpl in enumerate(CASES[case]):
            name = f"{case}{k}"
            info = m.register_query(PFX + tmpl.format(n=name))
            assert info["id"] == name
            names.append(name)
        for st in ("s", "u"):
            elems = random_elements(rng, 40, 12_000)
            for i in range(0, len(elems), 7):
                m.ingest_ndjson(st, b"\n".join(elems[i:i + 7]))
            m.heartbeat(st, 15_000)
        got = [events(m, n) for n in names]
        assert len(got[0]) >= 2
        assert any(solutions(d) for _, d in got[0]), "the windows should not all be empty"
        for other in got[1:]:
            assert [t for t, _ in other] == [t for t, _ in got[0]]
            for (t, a), (_, b) in zip(got[0], other, strict=True):
                assert solutions(a) == solutions(b), f"instant {t}"
                assert a["window"] == b["window"]
        syntaxes = [m.query(n)["syntax"] for n in names]
        assert syntaxes[0] == "csparql" and syntaxes[2] == "cqels"
    finally:
        m.close()


_SPELL = {
    "csparql": lambda ms: f"{ms}ms",
    "spaced": lambda ms: f"{ms} ms" if ms % 1000 else f"{ms // 1000} s",
    "iso": lambda ms: f"PT{ms // 1000}.{ms % 1000:03d}S",
}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.integers(1, 8), hs.integers(1, 4), hs.sampled_from(sorted(_SPELL)), hs.integers(0, 1 << 30))
def test_random_windows_agree_across_syntaxes(range_units, step_units, spelling, seed):
    """Random RANGE / STEP (multiples of 250 ms) spelled three ways; every window is the same."""
    rng_ms, step_ms = range_units * 250, step_units * 250
    sp = _SPELL[spelling]
    texts = [
        f"REGISTER QUERY a AS SELECT ?s ?o FROM STREAM :s [RANGE {sp(rng_ms)} STEP {sp(step_ms)}] WHERE {{ ?s ?p ?o }}",
        f"REGISTER RSTREAM <b> AS SELECT ?s ?o FROM NAMED WINDOW :w ON :s [RANGE PT{rng_ms / 1000}S "
        f"STEP PT{step_ms / 1000}S] WHERE {{ WINDOW :w {{ ?s ?p ?o }} }}",
        f"REGISTER QUERY c COMPUTED EVERY {sp(step_ms)} AS SELECT ?s ?o WHERE {{ STREAM :s [RANGE {sp(rng_ms)}] "
        "{ ?s ?p ?o } }",
    ]
    db = Database(shards=1)
    m = StreamManager(db)
    try:
        m.register_stream("s", EX + "s")
        for t in texts:
            m.register_query(PFX + t)
        elems = random_elements(random.Random(seed), 25, 5000)
        m.ingest_ndjson("s", b"\n".join(elems))
        m.heartbeat("s", 6000)
        got = [[(t, solutions(d)) for t, d in events(m, n)] for n in "abc"]
        assert got[0] and got[0] == got[1] == got[2]
    finally:
        m.close()


def test_rspql_window_is_named_by_its_iri_and_not_in_the_default_graph(env):
    db, m = env
    m.register_stream("s", EX + "s")
    db.update(PFX + "INSERT DATA { :a :p :stored }")
    m.register_query(PFX + "REGISTER RSTREAM <g> AS SELECT ?g ?o FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] "
                           "WHERE { GRAPH ?g { :a :p ?o } }")
    m.register_query(PFX + "REGISTER RSTREAM <d> AS SELECT ?o FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] "
                           "WHERE { :a :p ?o }")
    m.register_query(PFX + "REGISTER QUERY c AS SELECT ?o FROM STREAM :s [RANGE 1s STEP 1s] WHERE { :a :p ?o }")
    m.ingest_ndjson("s", line("a", "p", "win", 500))
    m.heartbeat("s", 1001)
    (_, g), = events(m, "g")
    assert solutions(g) == [(("g", EX + "w"), ("o", EX + "win"))]
    (_, d), = events(m, "d")
    assert solutions(d) == [(("o", EX + "stored"),)]          # the default graph is the store's
    (_, c), = events(m, "c")
    assert solutions(c) == [(("o", EX + "win"),)]             # C-SPARQL: the window is the default graph
    assert m.query("g")["windows"][0]["name"] == EX + "w"


def test_f_timestamp_is_the_latest_element_time_in_the_windows(env):
    _, m = env
    m.register_stream("s", EX + "s")
    m.register_stream("u", EX + "u")
    m.register_query(PFX + "REGISTER QUERY ts AS SELECT ?s ?o (f:timestamp(?s, :p, ?o) AS ?t) "
                           "FROM STREAM :s [RANGE 3s STEP 1s] FROM STREAM :u [RANGE 1s STEP 1s] "
                           "WHERE { ?s :p ?o }")
    m.register_query(PFX + "REGISTER QUERY flt AS SELECT ?s FROM STREAM :s [RANGE 3s STEP 1s] "
                           "WHERE { ?s :p ?o FILTER(f:timestamp(?s, :p, ?o) >= 1000) }")
    rng = random.Random(5)
    data = {"s": [], "u": []}
    for st in ("s", "u"):
        ts = sorted(rng.randrange(0, 6000) for _ in range(30))
        data[st] = [(f"n{rng.randrange(3)}", f"n{rng.randrange(2)}", t) for t in ts]
        m.ingest_ndjson(st, b"\n".join(line(s, "p", o, t) for s, o, t in data[st]))
    m.heartbeat("s", 8000)
    m.heartbeat("u", 8000)
    evs = events(m, "ts")
    assert len(evs) >= 5
    for t, doc in evs:
        expect = {}
        for st, rng_ms in (("s", 3000), ("u", 1000)):
            for s, o, tau in data[st]:
                if t - rng_ms < tau <= t:
                    expect[(s, o)] = max(expect.get((s, o), -1), tau)
        got = {(b["s"]["value"][len(EX):], b["o"]["value"][len(EX):]): int(b["t"]["value"])
               for b in doc["results"]["bindings"]}
        assert got == expect, f"instant {t}"
        for b in doc["results"]["bindings"]:
            assert b["t"]["datatype"] == "http://www.w3.org/2001/XMLSchema#integer"
    flt = dict(events(m, "flt"))
    for t, _ in evs:   # flt reads only stream s: the latest time of each (s, o) in its 3 s window
        latest: dict = {}
        for s, o, tau in data["s"]:
            if t - 3000 < tau <= t:
                latest[(s, o)] = max(latest.get((s, o), -1), tau)
        want = sorted(EX + s for (s, _), tau in latest.items() if tau >= 1000)
        assert sorted(b["s"]["value"] for b in flt[t]["results"]["bindings"]) == want


def test_f_timestamp_outside_a_continuous_query_is_an_error_value(env):
    db, _ = env
    db.update(PFX + "INSERT DATA { :a :p :b }")
    res = db.query(PFX + "SELECT ?s (f:timestamp(?s, :p, ?o) AS ?t) WHERE { ?s :p ?o }")
    assert len(res) == 1 and res.columns[1][0] < 0          # unbound
    assert len(db.query(PFX + "SELECT ?s WHERE { ?s :p ?o FILTER(f:timestamp(?s, :p, ?o) > 0) }")) == 0


@pytest.mark.parametrize("text,fragment,col_of", [
    ("REGISTER QUERY q AS SELECT ?s FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?s ?p ?o "
     "FILTER(f:nope(?s) > 1) }", "unknown function <http://larkc.eu/csparql/sparql/jena/ext#nope>", "f:nope"),
    ("REGISTER QUERY q AS SELECT (<http://ex.org/fn>(?s) AS ?x) FROM STREAM :s [RANGE 1s STEP 1s] "
     "WHERE { ?s ?p ?o }", "unknown function <http://ex.org/fn>", "<http://ex.org/fn>"),
    ("REGISTER QUERY q AS SELECT (f:timestamp(?s, ?p) AS ?x) FROM STREAM :s [RANGE 1s STEP 1s] "
     "WHERE { ?s ?p ?o }", "takes 3 argument(s), not 2", "f:timestamp"),
])
def test_unknown_functions_are_refused_at_registration(env, text, fragment, col_of):
    _, m = env
    m.register_stream("s", EX + "s")
    with pytest.raises(QuerySyntaxError) as ei:
        m.register_query(PFX + text)
    e = ei.value
    assert fragment in e.message
    assert (e.line, e.column) == (1, len(PFX) + text.index(col_of) + 1)
    assert m.queries() == []
    # casts are functions too
    m.register_query(PFX + "REGISTER QUERY ok AS SELECT (<http://www.w3.org/2001/XMLSchema#string>(?s) AS ?x) "
                           "FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?s ?p ?o }")


# ---------------------------------------------------------------- REGISTER STREAM


PRODUCER = ("REGISTER STREAM out AS CONSTRUCT { ?s :q ?o } FROM STREAM :s [RANGE 2s STEP 1s] "
            "WHERE { ?s :p ?o }")
READER = "REGISTER QUERY rd AS SELECT ?s ?o FROM STREAM out [RANGE 1s STEP 1s] WHERE { ?s :q ?o }"
READER2 = ("REGISTER QUERY rd2 AS SELECT (COUNT(*) AS ?n) FROM STREAM <urn:jindou:stream:out> "
           "[RANGE 3s STEP 1s] WHERE { ?s :q ?o }")


def test_derived_stream_feeds_readers_with_the_instants_results(env):
    _, m = env
    m.register_stream("s", EX + "s")
    m.register_query(PFX + PRODUCER)
    st = m.stream("out")
    assert st["producer"] == "out" and st["iri"] == "urn:jindou:stream:out"
    m.register_query(PFX + READER)
    m.register_query(PFX + READER2)
    rng = random.Random(3)
    elems = random_elements(rng, 30, 9000)
    for i in range(0, len(elems), 5):
        m.ingest_ndjson("s", b"\n".join(elems[i:i + 5]))
    m.heartbeat("s", 10_000)
    prod = events(m, "out")
    rd = dict(events(m, "rd"))
    rd2 = dict(events(m, "rd2"))
    assert prod and any(d["triples"] for _, d in prod)
    by_t = {t: solutions(d) for t, d in prod}
    for t, lines in by_t.items():
        if t not in rd:
            continue
        # the reader's 1 s window at t holds exactly the producer's element of instant t
        want = sorted(tuple(sorted((("s", x.split(" ")[0][1:-1]), ("o", x.split(" ")[2][1:-1]))))
                      for x in lines)
        assert solutions(rd[t]) == want, f"instant {t}"
        # the 3 s window: the distinct triples of the producer's instants t-2s..t
        distinct = set()
        for u in (t - 2000, t - 1000, t):
            distinct.update(by_t.get(u, []))
        if t in rd2:
            assert int(rd2[t]["results"]["bindings"][0]["n"]["value"]) == len(distinct)
    assert len(rd) >= len(prod) - 1
    assert m.query("out")["derived"]["errors"] == 0


def test_derived_stream_rules(env):
    _, m = env
    m.register_stream("s", EX + "s")
    with pytest.raises(QuerySyntaxError, match="CONSTRUCT"):
        m.register_query(PFX + "REGISTER STREAM o2 AS SELECT * FROM STREAM :s [RANGE 1s STEP 1s] WHERE {?s ?p ?o}")
    with pytest.raises(Exception, match="already|exists|registered"):
        m.register_query(PFX + "REGISTER STREAM s AS CONSTRUCT { ?s ?p ?o } FROM STREAM :s [RANGE 1s STEP 1s] "
                               "WHERE { ?s ?p ?o }")
    assert m.stream("s")["producer"] is None
    m.register_query(PFX + PRODUCER)
    m.register_query(PFX + READER)
    with pytest.raises(StreamInUse, match="rd"):
        m.delete_query("out")                         # a reader exists
    with pytest.raises(StreamInUse, match="DELETE /queries/out"):
        m.delete_stream("out")
    with pytest.raises(StreamInUse):
        m.delete_stream("out", force=True)
    with pytest.raises(StreamIsDerived):
        m.ingest_ndjson("out", line("a", "q", "b", 5))
    with pytest.raises(StreamIsDerived):
        m.heartbeat("out", 5)
    with pytest.raises(Exception, match="written by"):
        m.register_stream("out", "urn:jindou:stream:out")
    # an unknown-stream failure of the producer leaves no stream behind
    with pytest.raises(Exception, match="unknown stream"):
        m.register_query(PFX + "REGISTER STREAM o3 AS CONSTRUCT { ?s ?p ?o } FROM STREAM nope [RANGE 1s STEP 1s] "
                               "WHERE { ?s ?p ?o }")
    assert [s["name"] for s in m.streams()] == ["s", "out"]
    # deleting the source stream with force removes the reader before the producer, then the stream
    deleted = m.delete_stream("s", force=True)
    assert deleted == ["rd", "out"]
    assert m.queries() == [] and m.streams() == []


def test_derived_stream_and_its_readers_survive_a_restart(tmp_path):
    db = Database(shards=2)
    m = StreamManager(db, data_dir=str(tmp_path))
    m.register_stream("s", EX + "s")
    m.register_query(PFX + PRODUCER)
    m.register_query(PFX + READER)
    m.ingest_ndjson("s", line("a", "p", "b", 500))
    m.heartbeat("s", 3000)
    assert m.drain(10)
    m.close()
    m2 = StreamManager(db, data_dir=str(tmp_path))
    try:
        assert [q["id"] for q in m2.queries()] == ["out", "rd"]
        assert m2.stream("out")["producer"] == "out"
        assert m2.stream("out")["progress"] >= 3000
        m2.ingest_ndjson("s", line("c", "p", "d", 3500))
        m2.heartbeat("s", 5000)
        rd = dict(events(m2, "rd"))
        assert solutions(rd[4000]) == [(("o", EX + "d"), ("s", EX + "c"))]
    finally:
        m2.close()


def test_headerless_query_with_a_given_name(env):
    _, m = env
    m.register_stream("s", EX + "s")
    info = m.register_query(PFX + "SELECT ?s FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] "
                                  "WHERE { WINDOW :w { ?s ?p ?o } }", name="plain")
    assert info["id"] == "plain"
    with pytest.raises(QuerySyntaxError, match="REGISTER"):
        m.register_query(PFX + "SELECT ?s FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] "
                               "WHERE { WINDOW :w { ?s ?p ?o } }")


def test_derived_stream_gets_an_element_per_instant_of_an_unchanged_run():
    """A producer whose result stays the same for a long run (reported as one ``idle`` event)
    still writes one element per instant: its readers see the triples at every instant."""
    db = Database(shards=2)
    m = StreamManager(db, idle_after=3)
    try:
        m.register_stream("s", EX + "s")
        m.register_query(PFX + "REGISTER STREAM out AS CONSTRUCT { ?s :q ?o } FROM STREAM :s "
                               "[RANGE TRIPLES 1 STEP 1s] WHERE { ?s :p ?o }")
        m.register_query(PFX + READER)
        m.ingest_ndjson("s", line("a", "p", "b", 500))
        m.heartbeat("s", 12_000)
        assert m.drain(20)
        kinds = [e.event for e in m.log("out").since(None, from_t=0)]
        assert "idle" in kinds
        rd = dict(events(m, "rd"))
        assert sorted(rd) == list(range(1000, 12_000, 1000))
        for t, doc in rd.items():
            assert solutions(doc) == [(("o", EX + "b"), ("s", EX + "a"))], f"instant {t}"
        assert m.query("out")["derived"] == {"stream": "out", "elements": 11, "errors": 0}
    finally:
        m.close()
