"""Conformance over HTTP (a real server on a free 127.0.0.1 port): the same query in C-SPARQL,
RSP-QL and CQELS-QL gives the same SSE windows, equal to a pyoxigraph oracle; stream input rules
(207 / 422 / 400 statuses, arrival clocks); unregister and register again; registration errors."""

from __future__ import annotations

import random

import httpx
import orjson
import pyoxigraph as ox
import pytest

from tests.test_http_queries_sse import SSE

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}
SPARQL_Q = {"Content-Type": "application/sparql-query"}
NT = {"Content-Type": "application/n-triples"}
PFX = f"PREFIX : <{EX}> "
END = 8000


@pytest.fixture
def srv(make_server):
    return make_server(sse_keepalive=0.3, retain=1000)


def _nd(rows) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"


def _c(s) -> httpx.Client:
    return httpx.Client(base_url=s.url, timeout=30)


SAME = {
    "c": "REGISTER QUERY c AS SELECT ?s (COUNT(?o) AS ?n) (MAX(?v) AS ?hi) FROM STREAM <http://ex.org/obs> "
         "[RANGE 3 s STEP 1 s] FROM <urn:jindou:default> WHERE { ?o :by ?s ; :v ?v . ?s :in :r1 "
         "OPTIONAL { ?s :label ?l } FILTER(!BOUND(?l) || ?v > 2) } GROUP BY ?s HAVING (COUNT(?o) > 0) ORDER BY ?s",
    "r": "REGISTER RSTREAM <http://ex.org/out/r> AS SELECT ?s (COUNT(?o) AS ?n) (MAX(?v) AS ?hi) "
         "FROM NAMED WINDOW :w ON <http://ex.org/obs> [RANGE PT3S STEP PT1S] WHERE { WINDOW :w { ?o :by ?s ; :v ?v } "
         "?s :in :r1 OPTIONAL { ?s :label ?l } FILTER(!BOUND(?l) || ?v > 2) } GROUP BY ?s HAVING (COUNT(?o) > 0) "
         "ORDER BY ?s",
    "q": "REGISTER QUERY q AS SELECT ?s (COUNT(?o) AS ?n) (MAX(?v) AS ?hi) WHERE { STREAM <http://ex.org/obs> "
         "[RANGE 3s SLIDE 1s] { ?o :by ?s ; :v ?v } ?s :in :r1 OPTIONAL { ?s :label ?l } "
         "FILTER(!BOUND(?l) || ?v > 2) } GROUP BY ?s HAVING (COUNT(?o) > 0) ORDER BY ?s",
}
PLAIN = ("SELECT ?s (COUNT(?o) AS ?n) (MAX(?v) AS ?hi) WHERE { ?o :by ?s ; :v ?v . ?s :in :r1 "
         "OPTIONAL { ?s :label ?l } FILTER(!BOUND(?l) || ?v > 2) } GROUP BY ?s HAVING (COUNT(?o) > 0) ORDER BY ?s")
STATIC = "".join(f"<{EX}n{k}> <{EX}in> <{EX}r{k % 2}> .\n" for k in range(6)) + \
    f'<{EX}n1> <{EX}label> "one" .\n<{EX}n3> <{EX}label> "three" .\n'


def test_same_query_in_three_syntaxes_over_http_matches_the_oracle(srv):
    rng = random.Random(13)
    rows, t, k = [], 0, 0
    while True:
        t += rng.choice((0, 120, 400, 650))
        if t >= END:
            break
        o = f"<{EX}o{k}>"
        k += 1
        rows.append({"s": o, "p": f"<{EX}by>", "o": f"<{EX}n{rng.randrange(6)}>", "t": t})
        rows.append({"s": o, "p": f"<{EX}v>", "o": f'"{rng.randrange(6)}"^^<http://www.w3.org/2001/XMLSchema#integer>',
                     "t": t})
    with _c(srv) as c:
        assert c.post("/store?default", content=STATIC, headers=NT).status_code in (200, 201, 204)
        assert c.put("/streams/obs", json={"iri": EX + "obs"}).status_code == 201
        assert c.post("/streams/obs/progress?t=0").status_code == 200
        for name, text in SAME.items():
            r = c.post("/queries", content=PFX + text, headers=SPARQL_Q)
            assert r.status_code == 201 and r.json()["id"] == name, r.text
        for i in range(0, len(rows), 9):
            r = c.post("/streams/obs", content=_nd(rows[i:i + 9]), headers=NDJSON)
            assert r.status_code == 202, r.text
        assert c.post(f"/streams/obs/progress?t={END + 1}").status_code == 200
        got = {}
        for name in SAME:
            with SSE(f"{srv.url}/queries/{name}/results?from=0") as sse:
                sse.wait(lambda s: END in s.ids())
                got[name] = {e["id"]: orjson.loads(e["data"]) for e in sse.of("result")}
    assert sorted(got["c"]) == list(range(0, END + 1, 1000))
    nonempty = 0
    for t in sorted(got["c"]):
        st = ox.Store()
        win = {(r["s"], r["p"], r["o"]) for r in rows if t - 3000 < r["t"] <= t}
        st.load((STATIC + "".join(f"{s} {p} {o} .\n" for s, p, o in win)).encode(), format=ox.RdfFormat.N_TRIPLES)
        want = [{v.value: x[v].value for v in x.variables if x[v] is not None} if False else
                {"s": x["s"].value, "n": x["n"].value, "hi": x["hi"].value} for x in st.query(PFX + PLAIN)]
        nonempty += bool(want)
        for name in SAME:
            doc = got[name][t]
            assert doc["window"] == {"start": t - 3000, "end": t}
            have = [{k: v["value"] for k, v in b.items()} for b in doc["results"]["bindings"]]
            assert have == want, (name, t)
    assert nonempty > 4


def test_stream_input_statuses_and_good_lines_kept(srv):
    with _c(srv) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        assert c.put("/streams/a", json={"iri": EX + "a", "clock": "arrival"}).status_code == 201
        r = c.post("/queries", content=PFX + "REGISTER QUERY q AS SELECT ?x ?y FROM STREAM :s [RANGE 10s STEP 1s] "
                                             "WHERE { ?x :p ?y } ORDER BY ?y", headers=SPARQL_Q)
        assert r.status_code == 201, r.text
        good = lambda i, t: {"s": f"<{EX}x>", "p": f"<{EX}p>", "o": f'"{i}"', "t": t}  # noqa: E731
        body = _nd([good(1, 1000), {"s": f"<{EX}x>", "p": f"<{EX}p>", "o": '"no t"'}, good(2, 1200),
                    good(3, 900), {"s": "not a term", "p": f"<{EX}p>", "o": '"x"', "t": 1300}, good(4, 1300)])
        body += b"{not json\n"
        r = c.post("/streams/s", content=body, headers=NDJSON)
        assert r.status_code == 207, r.text          # some refused, the rest kept
        rep = r.json()
        assert rep["accepted"] == 3 and rep["rejected"] == 4 and rep["progress"] == 1300
        assert [e["line"] for e in rep["errors"]] == [2, 4, 5, 7]
        assert "'t'" in rep["errors"][0]["error"] and "late" in rep["errors"][1]["error"]
        # every line refused: 422, nothing stored, progress unchanged
        r = c.post("/streams/s", content=_nd([good(9, 5), good(9, 6)]), headers=NDJSON)
        assert r.status_code == 422 and r.json()["accepted"] == 0 and r.json()["progress"] == 1300
        # ndjson with no t on any line (an event-time stream): 400 with the per-line report,
        # nothing stored, progress unchanged; one line with t among them makes it a 207
        r = c.post("/streams/s", content=_nd([{"s": f"<{EX}x>", "p": f"<{EX}p>", "o": f'"{i}"'} for i in range(3)]),
                   headers=NDJSON)
        assert r.status_code == 400 and r.json()["error"] == "missing_time", r.text
        assert r.json()["accepted"] == 0 and r.json()["rejected"] == 3 and r.json()["progress"] == 1300
        assert "arrival" in r.json()["detail"]
        r = c.post("/streams/s", content=_nd([{"s": f"<{EX}x>", "p": f"<{EX}p>", "o": '"no t"'}, good(8, 5)]),
                   headers=NDJSON)
        assert r.status_code == 422, r.text   # refused for two reasons, not only a missing time
        assert c.get("/streams/s").json()["progress"] == 1300
        # a graph without t on an event-time stream: 400, nothing stored
        r = c.post("/streams/s", content=f'<{EX}x> <{EX}p> "graph" .\n', headers=NT)
        assert r.status_code == 400 and "t" in r.json()["detail"]
        # a graph below the progress: 422
        r = c.post("/streams/s?t=1000", content=f'<{EX}x> <{EX}p> "late" .\n', headers=NT)
        assert r.status_code == 422
        r = c.post("/streams/s?t=1300", content=f'<{EX}x> <{EX}p> "graph" .\n', headers=NT)
        assert r.status_code == 202 and r.json()["accepted"] == 1
        # an arrival-clock stream stamps elements without t (a t given is ignored)
        r = c.post("/streams/a", content=f'<{EX}x> <{EX}p> "arr" .\n', headers=NT)
        assert r.status_code == 202, r.text
        r = c.post("/streams/a", content=_nd([{"s": f"<{EX}x>", "p": f"<{EX}p>", "o": '"arr2"'}]), headers=NDJSON)
        assert r.status_code == 202 and r.json()["accepted"] == 1
        assert c.get("/streams/a").json()["progress"] > 1_000_000_000_000   # epoch ms of the wall clock
        assert c.post("/streams/s/progress?t=2001").status_code == 200
        with SSE(f"{srv.url}/queries/q/results?from=0") as sse:
            sse.wait(lambda s: 2000 in s.ids())
            docs = {e["id"]: orjson.loads(e["data"]) for e in sse.of("result")}
        assert [b["y"]["value"] for b in docs[2000]["results"]["bindings"]] == ["1", "2", "4", "graph"]
        assert [b["y"]["value"] for b in docs[1000]["results"]["bindings"]] == ["1"]


def test_unregister_and_register_again(srv):
    q1 = PFX + "REGISTER QUERY q AS SELECT ?y FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?x :p ?y }"
    q2 = PFX + "REGISTER ISTREAM QUERY q AS SELECT ?y FROM STREAM :s [RANGE 3s STEP 500ms] WHERE { ?x :p ?y }"
    with _c(srv) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        assert c.post("/queries", content=q1, headers=SPARQL_Q).status_code == 201
        assert c.post("/queries", content=q1, headers=SPARQL_Q).status_code == 409
        r = c.post("/streams/s", content=_nd([{"s": f"<{EX}x>", "p": f"<{EX}p>", "o": '"a"', "t": 500}]),
                   headers=NDJSON)
        assert r.status_code == 202
        assert c.post("/streams/s/progress?t=2001").status_code == 200
        with SSE(f"{srv.url}/queries/q/results?from=0") as sse:
            sse.wait(lambda s: 2000 in s.ids())
            assert c.delete("/queries/q").status_code == 204
            sse.wait(lambda s: s.of("end"))
        assert c.get("/queries/q").status_code == 404
        assert c.delete("/queries/q").status_code == 404
        # the name again, another window and mode: its instants start at the stream's progress
        assert c.post("/queries", content=q2, headers=SPARQL_Q).status_code == 201
        r = c.post("/streams/s", content=_nd([{"s": f"<{EX}x>", "p": f"<{EX}p>", "o": '"b"', "t": 2100}]),
                   headers=NDJSON)
        assert r.status_code == 202
        assert c.post("/streams/s/progress?t=3001").status_code == 200
        with SSE(f"{srv.url}/queries/q/results?from=0") as sse:
            sse.wait(lambda s: 3000 in s.ids())
            evs = {e["id"]: [b["y"]["value"] for b in orjson.loads(e["data"])["results"]["bindings"]]
                   for e in sse.of("result")}
        assert sorted(evs) == [2500, 3000]            # nothing of the first registration
        # ISTREAM: the first instant adds everything. "a" (t=500) would be in the window at 2500, but
        # the stream had no reader between the two registrations, and a stream no query reads keeps
        # no elements (docs/CONTINUOUS_QUERIES.md, "Elements that arrived before a query")
        assert evs[2500] == ["b"] and evs[3000] == []


@pytest.mark.parametrize(("text", "status", "needle"), [
    ("REGISTER QUERY e AS SELECT ?x FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?x ?p ?y FILTER(:nofn(?y)) }",
     400, "unknown function"),
    ("REGISTER QUERY e AS SELECT ?x FROM STREAM :nope [RANGE 1s STEP 1s] WHERE { ?x ?p ?y }", 400, "unknown stream"),
    ("REGISTER QUERY e AS SELECT ?x FROM STREAM :s [RANGE 1s STEP 1s] FROM STREAM s [RANGE 2s STEP 1s] "
     "WHERE { ?x ?p ?y }", 400, "twice"),
    ("REGISTER STREAM s AS CONSTRUCT { ?x ?p ?y } FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?x ?p ?y }",
     409, "exists"),
    ("REGISTER QUERY e AS SELECT ?x FROM STREAM :s [RANGE 1 sec STEP 1s] WHERE { ?x ?p ?y }", 400, "unit"),
])
def test_registration_errors(srv, text, status, needle):
    with _c(srv) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        r = c.post("/queries", content=PFX + text, headers=SPARQL_Q)
        assert r.status_code == status, r.text
        assert needle in r.json()["detail"]
        if status == 400 and r.json()["error"] == "syntax":
            assert r.json()["line"] == 1 and r.json()["column"] > 1
        assert c.get("/queries").json()["queries"] == []
        assert [s["name"] for s in c.get("/streams").json()["streams"]] == ["s"]
