"""Two windows on one stream (issue 13: a short and a long window over one sensor stream).

RSP-QL names every window, so ``FROM NAMED WINDOW :short ON :s [...] FROM NAMED WINDOW :long
ON :s [...]`` are two graphs read by ``WINDOW :short`` / ``WINDOW :long``; the query is
evaluated at the multiples of the smallest STEP (as with windows on two streams), each window
covering its own RANGE (or count) at each instant. Checked against pyoxigraph over the two
windows' contents, with equal and different STEPs, time and count windows, a third window on
another stream, I/DSTREAM and CONSTRUCT. C-SPARQL (windows merged into one default graph) and
CQELS (a block's graph is named by its stream) cannot tell two windows on one stream apart:
those stay errors, pointing at the RSP-QL form."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import orjson
import pyoxigraph as ox
import pytest

from engine.errors import JindouError, QuerySyntaxError
from engine.sparql.csparql import parse_continuous
from engine.stream.manager import StreamManager
from tests.support.clusters import close_database, open_database
from tests.test_continuous_oracle import norm_json, norm_ox, ox_term

EX = "http://ex.org/"
S, S2 = EX + "s", EX + "s2"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
XSD_DEC = "http://www.w3.org/2001/XMLSchema#decimal"
END = 9_000
PFX = f"PREFIX : <{EX}> "

#: window specs (range ms or None, count or None, step ms): (short, long) on stream s
SPECS = [
    ((1000, None, 500), (3000, None, 500)),      # equal steps
    ((1000, None, 500), (3000, None, 1000)),     # different steps: instants every 500 ms
    ((2000, None, 1000), (500, None, 250)),      # the "long" one steps faster
    ((1500, None, 500), (None, 4, 1000)),        # a time and a count window
]

#: WHERE clauses over the windows :short and :long (and :other on stream s2)
WHERES = [
    "{ WINDOW :short { ?x :p ?a } }",
    "{ WINDOW :short { ?x :p ?a } WINDOW :long { ?x :p ?b } }",
    "{ WINDOW :long { ?x :p ?a } FILTER NOT EXISTS { WINDOW :short { ?x :p ?a } } }",
    "{ WINDOW ?w { ?x :p ?a } }",
    "{ { SELECT ?x (AVG(?v) AS ?a) (COUNT(?v) AS ?n) WHERE { WINDOW :short { ?x :v ?v } } GROUP BY ?x } "
    "{ SELECT ?x (AVG(?v) AS ?b) WHERE { WINDOW :long { ?x :v ?v } } GROUP BY ?x } }",
    "{ WINDOW :long { ?x :p ?a } WINDOW :other { ?x :q ?b } }",
    "{ WINDOW :short { ?x :v ?a } OPTIONAL { WINDOW :long { ?x :p ?b } } }",
]
SELECTS = ["SELECT ?x ?a", "SELECT ?x ?a ?b", "SELECT ?x ?a", "SELECT ?w ?x ?a", "SELECT ?x ?a ?b ?n",
           "SELECT ?x ?a ?b", "SELECT ?x ?a ?b"]


def _win(spec) -> str:
    r, n, step = spec
    body = f"RANGE PT{r / 1000}S" if r is not None else f"ITEM {n}"
    return f"[{body} STEP PT{step / 1000}S]"


def _text(name: str, mode: str, k: int, si: int, other: bool) -> tuple[str, str]:
    short, long_ = SPECS[si]
    froms = (f"FROM NAMED WINDOW :short ON :s {_win(short)} FROM NAMED WINDOW :long ON <{S}> {_win(long_)} ")
    if other:
        froms += "FROM NAMED WINDOW :other ON :s2 [RANGE PT2S STEP PT1S] "
    head = f"REGISTER {mode} <{EX}out/{name}> AS "
    # the oracle's query: a window is the named graph of its IRI (the store holds no other)
    plain = PFX + SELECTS[k] + " WHERE " + WHERES[k].replace("WINDOW ", "GRAPH ")
    return PFX + head + SELECTS[k] + " " + froms + "WHERE " + WHERES[k], plain


def _gen(rng: random.Random, pred_weights, gaps=(0, 70, 130, 250, 400)) -> list[tuple[str, str, str, int]]:
    rows, t = [], 0
    while t < END:
        t += rng.choice(gaps)
        if t >= END:
            break
        for _ in range(rng.randint(1, 2)):
            p = rng.choices(list(pred_weights), weights=list(pred_weights.values()))[0]
            o = f'"{rng.randint(1, 9)}"^^<{XSD_INT}>' if p != "p" else f"<{EX}o{rng.randint(0, 4)}>"
            rows.append((f"<{EX}x{rng.randint(0, 3)}>", f"<{EX}{p}>", o, t))
    return rows


def _num(term: tuple) -> tuple:
    """Decimals by value to 12 places (AVG: the engine writes "2.0", pyoxigraph "2"; digits differ)."""
    if term[0] == "lit" and term[2] == XSD_DEC:
        return ("lit", round(Decimal(term[1]), 12), XSD_DEC, None)
    return term


def _window(data, spec, t):
    r, n, _ = spec
    if r is not None:
        return {(s, p, o) for s, p, o, tau in data if t - r < tau <= t}
    return set([(s, p, o) for s, p, o, tau in data if tau <= t][-n:])


def _post(m, name, rows, rng):
    cuts = sorted(rng.sample(range(1, len(rows)), 4))
    for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True):
        r = m.ingest_ndjson(name, b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau})
                                             for s, p, o, tau in rows[a:b]))
        assert r["rejected"] == 0, r


@pytest.mark.parametrize("seed, backend, sparse", [(1, "single", False), (2, "single", False),
                                                   (3, "cluster", False), (4, "single", True)])
def test_two_windows_on_one_stream_match_oracle(seed, backend, sparse):
    """``sparse``: bursts seconds apart, so most instants' windows are unchanged (the
    unchanged-instant and relevance checks answer them, per window)."""
    rng = random.Random(seed)
    gaps = (0, 0, 20, 2600, 3100) if sparse else (0, 70, 130, 250, 400)
    data = {"s": _gen(rng, {"p": 2, "v": 2}, gaps), "s2": _gen(rng, {"q": 1}, gaps)}
    db = open_database(backend)
    m = None
    try:
        m = StreamManager(db)
        m.register_stream("s", S)
        m.register_stream("s2", S2)
        m.heartbeat("s", 0)
        m.heartbeat("s2", 0)
        cases = []
        for k in range(len(WHERES)):
            for si in range(len(SPECS)):
                other = k == 5
                modes = ("RSTREAM", "ISTREAM", "DSTREAM") if (k + si) % 3 == 0 else ("RSTREAM",)
                for mode in modes:
                    name = f"q{k}_{si}_{mode}"
                    text, plain = _text(name, mode, k, si, other)
                    info = m.register_query(text)
                    assert info["streams"] == (["s", "s2"] if other else ["s"])
                    cases.append((name, mode, si, other, plain))
        # a CONSTRUCT over both windows (its results as a derived stream)
        con = (PFX + f"REGISTER RSTREAM <{EX}out/con> AS CONSTRUCT {{ ?x :both ?a }} FROM NAMED WINDOW :short "
               f"ON :s {_win(SPECS[1][0])} FROM NAMED WINDOW :long ON :s {_win(SPECS[1][1])} "
               "WHERE { WINDOW :short { ?x :p ?a } WINDOW :long { ?x :v ?b } }")
        m.register_query(con)
        _post(m, "s", data["s"], rng)
        _post(m, "s2", data["s2"], rng)
        m.heartbeat("s", END + 1)
        m.heartbeat("s2", END + 1)
        assert m.drain(60)

        stores: dict = {}

        def store_at(si, other, t):
            key = (si, other, t)
            st = stores.get(key)
            if st is None:
                st = stores[key] = ox.Store()
                wins = {"short": ("s", SPECS[si][0]), "long": ("s", SPECS[si][1])}
                if other:
                    wins["other"] = ("s2", (2000, None, 1000))
                st.extend([ox.Quad(ox_term(a), ox_term(b), ox_term(c), ox.NamedNode(EX + w))
                           for w, (sname, spec) in wins.items() for a, b, c in _window(data[sname], spec, t)])
            return st

        checked = nonempty = 0
        prev: dict = {}
        for name, mode, si, other, plain in cases:
            step = min(SPECS[si][0][2], SPECS[si][1][2], *((1000,) if other else ()))
            events = [e for e in m.log(name).since(None, from_t=-1) if e.event == "result"]
            assert [e.id for e in events] == list(range(0, END + 1, step)), name
            for e in events:
                doc = orjson.loads(e.data)
                assert "error" not in doc, (name, doc)
                sol = store_at(si, other, e.id).query(plain)
                names = [v.value for v in sol.variables]
                want = Counter(tuple(_num(norm_ox(s[v])) for v in names) for s in sol)
                got = Counter(tuple(_num(norm_json(b.get(v))) for v in names) for b in doc["results"]["bindings"])
                if mode == "RSTREAM":
                    assert got == want, (name, e.id)
                else:
                    last = prev.get(name, Counter())
                    assert got == (want - last if mode == "ISTREAM" else last - want), (name, e.id)
                    prev[name] = want
                checked += 1
                nonempty += bool(want)
        assert checked > 1000 and nonempty > checked // (8 if sparse else 2), (checked, nonempty)
        if sparse:   # the unchanged instants were answered without an evaluation
            assert sum(m.query(n)["unchanged_instants"] for n, *_ in cases) > checked // 4
        events = [e for e in m.log("con").since(None, from_t=-1) if e.event == "result"]
        assert [e.id for e in events] == list(range(0, END + 1, 500))
        both = 0
        for e in events:
            got = {x for x in orjson.loads(e.data)["triples"].split(" .\n") if x}
            want = {f"{tr.subject} {tr.predicate} {tr.object}" for tr in store_at(1, False, e.id).query(
                PFX + "CONSTRUCT { ?x :both ?a } WHERE { WINDOW :short { ?x :p ?a } WINDOW :long { ?x :v ?b } }"
                .replace("WINDOW :short", f"GRAPH <{EX}short>").replace("WINDOW :long", f"GRAPH <{EX}long>"))}
            assert got == want, e.id
            both += bool(want)
        assert both > 5
    finally:
        if m is not None:
            m.close()
        close_database(db)


# ------------------------------------------------------------------ what is refused, and why

TWO = (PFX + "REGISTER RSTREAM <http://ex.org/out/two> AS SELECT ?x ?a ?b "
       "FROM NAMED WINDOW :short ON :s [RANGE PT1S STEP PT0.5S] FROM NAMED WINDOW :long ON :s [RANGE PT6S STEP PT1S] "
       "WHERE { WINDOW :short { ?x :p ?a } WINDOW :long { ?x :p ?b } }")


def test_parser_keeps_both_windows_of_one_stream():
    cq = parse_continuous(TWO)
    assert cq.syntax == "rspql"
    assert [s.iri for s in cq.streams] == [S, S]
    assert cq.window_names == (EX + "short", EX + "long")
    assert [(w.range_ms, w.step_ms) for w in cq.windows] == [(1000, 500), (6000, 1000)]


@pytest.mark.parametrize("text", [
    "REGISTER QUERY q AS SELECT * FROM STREAM :s [RANGE 10s STEP 5s] FROM STREAM :s [RANGE 60s STEP 5s] "
    "WHERE { ?x :p ?o }",
    "REGISTER QUERY q AS SELECT * FROM STREAM s [RANGE 10s STEP 5s] FROM NAMED STREAM s [RANGE 60s STEP 5s] "
    "WHERE { ?x :p ?o }",
    "REGISTER QUERY q AS SELECT * FROM STREAM :s [RANGE 10s STEP 5s] FROM STREAM :s [RANGE 10s STEP 5s] "
    "WHERE { ?x :p ?o }",
])
def test_two_csparql_windows_on_one_stream_are_refused(text):
    """C-SPARQL merges its windows into the default graph (each named by its stream)."""
    with pytest.raises(QuerySyntaxError) as e:
        parse_continuous(PFX + text)
    assert "C-SPARQL merges" in str(e.value) and "FROM NAMED WINDOW <w1> ON <s>" in str(e.value)


def test_cqels_blocks_on_one_stream():
    """CQELS: the first window on a stream is the stream IRI's graph, another window one of its
    own, a repeated window the same graph (one window)."""
    cq = parse_continuous(PFX + "REGISTER QUERY q AS SELECT * WHERE { STREAM <http://ex.org/s> [NOW] { ?a :at ?l } "
                          "STREAM <http://ex.org/s> [RANGE 3s] { ?b :at ?l } "
                          "STREAM <http://ex.org/s> [RANGE 3s] { ?b :p ?o } }")
    assert [(w.range_ms, w.step_ms) for w in cq.windows] == [(1, 1), (3000, 1)]
    alias = "urn:jindou:window:2:" + S
    assert cq.window_names == (None, alias)
    graphs = [str(x) for x in _graph_names(cq.query.pattern)]
    assert graphs == [f"<{S}>", f"<{alias}>", f"<{alias}>"], graphs
    # an RSP-QL window named like a CQELS block's stream: two windows would be one graph
    with pytest.raises(QuerySyntaxError, match="graph <http://ex.org/s>"):
        parse_continuous(PFX + "REGISTER RSTREAM <o> AS SELECT * FROM NAMED WINDOW <http://ex.org/s> ON :t "
                         "[RANGE PT1S STEP PT1S] WHERE { WINDOW <http://ex.org/s> { ?x :p ?o } "
                         "STREAM <http://ex.org/s> [RANGE 1s] { ?x :q ?o } }")


def _graph_names(node) -> list:
    import dataclasses

    from engine.sparql import algebra as A
    out = []
    if isinstance(node, A.Graph):
        out.append(getattr(node.name, "key", node.name))
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            for x in (v if isinstance(v, tuple | list) else (v,)):
                if dataclasses.is_dataclass(x):
                    out += _graph_names(x)
    return out


def test_cqels_two_windows_on_one_stream_equal_rspql():
    """Each CQELS query against its RSP-QL twin (itself checked against pyoxigraph above)."""
    rng = random.Random(9)
    data = _gen(rng, {"p": 2, "v": 2})
    pairs = {
        "c1": ("SELECT ?x ?a ?b WHERE { STREAM <http://ex.org/s> [RANGE 1s SLIDE 250ms] { ?x :p ?a } "
               "STREAM <http://ex.org/s> [RANGE 3s SLIDE 500ms] { ?x :v ?b } }",
               "SELECT ?x ?a ?b FROM NAMED WINDOW :w1 ON :s [RANGE PT1S STEP PT0.25S] FROM NAMED WINDOW :w2 ON :s "
               "[RANGE PT3S STEP PT0.5S] WHERE { WINDOW :w1 { ?x :p ?a } WINDOW :w2 { ?x :v ?b } }"),
        "c2": ("SELECT ?x ?a WHERE { STREAM <http://ex.org/s> [NOW] { ?x :p ?a } "
               "STREAM <http://ex.org/s> [RANGE 2s] { ?x :v ?b } } ",
               "SELECT ?x ?a FROM NAMED WINDOW :w1 ON :s [RANGE PT0.001S STEP PT0.1S] FROM NAMED WINDOW :w2 ON :s "
               "[RANGE PT2S STEP PT0.1S] WHERE { WINDOW :w1 { ?x :p ?a } WINDOW :w2 { ?x :v ?b } }"),
        "c3": ("SELECT ?x ?a ?b WHERE { STREAM <http://ex.org/s> [TRIPLES 5 SLIDE 500ms] { ?x :p ?a } "
               "STREAM <http://ex.org/s> [TRIPLES 5 SLIDE 500ms] { ?x :v ?b } }",
               "SELECT ?x ?a ?b FROM NAMED WINDOW :w ON :s [ITEM 5 STEP PT0.5S] "
               "WHERE { WINDOW :w { ?x :p ?a } WINDOW :w { ?x :v ?b } }"),
    }
    db = open_database("single")
    m = StreamManager(db)
    try:
        m.register_stream("s", S)
        m.heartbeat("s", 0)
        for name, (cqels, rsp) in pairs.items():
            every = " COMPUTED EVERY 100ms" if name == "c2" else ""
            m.register_query(PFX + f"REGISTER QUERY {name}{every} AS " + cqels)
            m.register_query(PFX + f"REGISTER RSTREAM <{EX}out/{name}_r> AS " + rsp)
        _post(m, "s", data, rng)
        m.heartbeat("s", END + 1)
        assert m.drain(60)
        nonempty = 0
        for name in pairs:
            got = {e.id: orjson.loads(e.data) for e in m.log(name).since(None, from_t=-1) if e.event == "result"}
            want = {e.id: orjson.loads(e.data) for e in m.log(name + "_r").since(None, from_t=-1)
                    if e.event == "result"}
            assert sorted(got) == sorted(want) and len(got) > 10, name
            for t, doc in got.items():
                rows = Counter(orjson.dumps(b, option=orjson.OPT_SORT_KEYS) for b in doc["results"]["bindings"])
                assert rows == Counter(orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
                                       for b in want[t]["results"]["bindings"]), (name, t)
                nonempty += bool(rows)
        assert nonempty > 30
    finally:
        m.close()
        close_database(db)


def test_manager_matches_a_short_name_with_its_iri():
    db = open_database("single")
    m = StreamManager(db)
    try:
        m.register_stream("s", S)
        # C-SPARQL: the short name and the IRI of one stream (only the registry can tell)
        with pytest.raises(JindouError, match="read twice"):
            m.register_query(PFX + "REGISTER QUERY q AS SELECT * FROM STREAM s [RANGE 1s STEP 1s] "
                             "FROM STREAM :s [RANGE 2s STEP 1s] WHERE { ?x :p ?o }")
        # RSP-QL: two named windows, one by name and one by IRI
        info = m.register_query(PFX + "REGISTER RSTREAM <o> AS SELECT * FROM NAMED WINDOW :a ON s "
                                "[RANGE PT1S STEP PT1S] FROM NAMED WINDOW :b ON :s [RANGE PT2S STEP PT1S] "
                                "WHERE { WINDOW :a { ?x :p ?o } }")
        assert info["streams"] == ["s"]
        ws = {w["name"]: (w["stream"], w["range_ms"]) for w in m.query("o")["windows"]}
        assert ws == {EX + "a": ("s", 1000), EX + "b": ("s", 2000)}
    finally:
        m.close()
        close_database(db)


def test_equal_windows_on_one_stream_are_two_graphs_of_equal_content():
    db = open_database("single")
    m = StreamManager(db)
    try:
        m.register_stream("s", S)
        m.heartbeat("s", 0)
        m.register_query(PFX + "REGISTER RSTREAM <e> AS SELECT ?w ?x WHERE { WINDOW ?w { ?x :p ?o } } "
                         .replace("WHERE", "FROM NAMED WINDOW :a ON :s [RANGE PT1S STEP PT1S] "
                                  "FROM NAMED WINDOW :b ON :s [RANGE PT1S STEP PT1S] WHERE"))
        m.ingest_ndjson("s", orjson.dumps({"s": f"<{EX}x>", "p": f"<{EX}p>", "o": '"1"', "t": 500}))
        m.heartbeat("s", 2001)
        assert m.drain(30)
        ev = {e.id: orjson.loads(e.data) for e in m.log("e").since(None, from_t=-1) if e.event == "result"}
        rows = sorted((b["w"]["value"], b["x"]["value"]) for b in ev[1000]["results"]["bindings"])
        assert rows == [(EX + "a", EX + "x"), (EX + "b", EX + "x")]
        assert ev[2000]["results"]["bindings"] == []
    finally:
        m.close()
        close_database(db)


# ------------------------------------------------------------------ across a SIGKILL (--data-dir)

def test_two_windows_on_one_stream_resume_across_sigkill(tmp_path):
    import signal

    import httpx

    from tests.pipeline_support import Server
    from tests.test_continuous_user_scenarios import _covered, _feed
    from tests.test_http_queries_sse import SSE

    text = TWO.replace("REGISTER RSTREAM <http://ex.org/out/two>", "REGISTER ISTREAM <http://ex.org/out/two>")
    data = tmp_path / "data"
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": S}).status_code == 201
            r = c.post("/queries", content=text, headers={"Content-Type": "application/sparql-query"})
            assert r.status_code == 201, r.text
            with SSE(srv.url + "/queries/two/results?from=0") as s:
                _feed(c, 0, 7)
                s.wait(lambda s: 7500 in _covered(list(s.events)), timeout=60)
                before = _covered(list(s.events))
    finally:
        srv.stop(signal.SIGKILL)
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _feed(c, 8, 11)
            with SSE(srv.url + "/queries/two/results?from=0") as s:
                s.wait(lambda s: 11500 in _covered(list(s.events)), timeout=60)
                after = _covered(list(s.events))
            assert s.of("gap") == []
            assert {t: after.get(t) for t in before} == before
            ids = sorted(after)
            assert ids == list(range(ids[0], ids[-1] + 1, 500)), ids   # every 500 ms, none missing
            info = c.get("/queries/two").json()
            assert [w["range_ms"] for w in info["windows"]] == [1000, 6000]
    finally:
        srv.stop()
    # the instants after the restart read windows restored from the journal (the long window
    # at 11500 holds elements posted before the kill): as a run without the crash
    want = _no_crash(text)
    assert {t: orjson.loads(d) for t, d in after.items() if d is not None} == \
        {t: orjson.loads(want[t]) for t, d in after.items() if d is not None}


def _no_crash(text: str) -> dict[int, bytes]:
    from tests.test_continuous_user_scenarios import _rows
    db = open_database("single")
    m = StreamManager(db)
    try:
        m.register_stream("s", S)
        m.register_query(text)
        m.ingest_ndjson("s", _rows(0, 7))
        m.heartbeat("s", 8001)
        m.ingest_ndjson("s", _rows(8, 11))
        m.heartbeat("s", 12001)
        assert m.drain(30)
        return {e.id: e.data for e in m.log("two").since(None, from_t=-1) if e.event == "result"}
    finally:
        m.close()
        close_database(db)
