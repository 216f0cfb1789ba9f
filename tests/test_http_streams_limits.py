"""The streaming limits over the real server: absurd heartbeats and times are 400s that change
nothing and leave /streams and /queries working; names, terms and UTF-8 checked on every path;
a far heartbeat ends in idle SSE events."""

from __future__ import annotations

import httpx
import orjson
import pyarrow as pa
import pytest

from engine.stream.limits import TIME_MAX
from tests.test_http_queries_sse import SSE

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}
NT = {"Content-Type": "application/n-triples"}
SPARQL_Q = {"Content-Type": "application/sparql-query"}
ARROW = {"Content-Type": "application/vnd.apache.arrow.stream"}


@pytest.fixture
def srv(make_server):
    return make_server(sse_keepalive=0.3)


def _c(s) -> httpx.Client:
    return httpx.Client(base_url=s.url, timeout=60)


def _nd(*rows) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"


def _row(i, t):
    return {"s": f"<{EX}s{i}>", "p": f"<{EX}p>", "o": f'"{i}"', "t": t}


def _bad(r, status=400):
    assert r.status_code == status, r.text
    doc = r.json()
    assert doc["error"] == "bad_request" and len(r.text) < 600, r.text
    return doc


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


ABSURD = ["99999999999999999999999", str(TIME_MAX + 1), str(2**63 - 1), "-1", "1.5", "1e3", "true", "0x10",
          "1_000", "9" * 5000, " ", "%00"]


def test_absurd_heartbeat_is_a_400_and_breaks_nothing(srv):
    with _c(srv) as c:
        assert c.put("/streams/m4", json={"iri": EX + "m4"}).status_code == 201
        q = "REGISTER QUERY q AS SELECT * FROM m4 [RANGE 1s STEP 100ms] WHERE { ?s ?p ?o }"
        assert c.post("/queries", content=q, headers=SPARQL_Q).status_code == 201
        assert c.post("/streams/m4", content=_nd(_row(1, 500)), headers=NDJSON).status_code == 202
        assert c.post("/streams/m4/progress?t=1000").json() == {"progress": 1000}
        before = c.get("/streams/m4").json()
        for t in ABSURD:
            r = c.post(f"/streams/m4/progress?t={t}")
            if t.strip() in ("", "%00"):
                assert r.status_code == 400
                continue
            assert "range" in _bad(r)["detail"] or "integer" in _bad(r)["detail"]
        after = c.get("/streams/m4").json()
        for k in ("progress", "accepted", "rejected", "published"):
            assert after[k] == before[k], k
        assert c.get("/streams").status_code == 200
        assert c.get("/queries").status_code == 200
        assert c.get("/queries/q").status_code == 200
        r = c.post("/streams/m4", content=_nd(_row(2, 1500)), headers=NDJSON)
        assert r.status_code == 202 and r.json()["accepted"] == 1
        assert c.post(f"/streams/m4/progress?t={TIME_MAX}").json() == {"progress": TIME_MAX}
        assert c.get("/streams").status_code == 200 and c.get("/queries").status_code == 200


def test_times_out_of_range_on_every_path(srv):
    with _c(srv) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        assert c.post("/queries", content="REGISTER QUERY q AS SELECT * FROM s [RANGE 1s STEP 1s] "
                                          "WHERE { ?s ?p ?o }", headers=SPARQL_Q).status_code == 201
        # ndjson and Arrow: bad lines / rows, the others kept
        r = c.post("/streams/s", content=_nd(_row(1, 10), _row(2, TIME_MAX + 1), _row(3, -1), _row(4, 2**63 - 1)),
                   headers=NDJSON)
        assert r.status_code == 207 and r.json()["accepted"] == 1
        assert [e["line"] for e in r.json()["errors"]] == [2, 3, 4]
        tab = pa.table({"s": [f"<{EX}a>"] * 3, "p": [f"<{EX}p>"] * 3, "o": ['"1"', '"2"', '"3"'],
                        "t": pa.array([20, 10**17, 30], pa.timestamp("s"))})
        r = c.post("/streams/s", content=_ipc(tab), headers=ARROW)
        assert r.status_code == 207, r.text
        assert r.json()["accepted"] == 2 and [e["line"] for e in r.json()["errors"]] == [2]
        # graph ?t=, SSE ?from= and Last-Event-ID: 400, nothing stored
        before = c.get("/streams/s").json()
        for t in ABSURD[:6]:
            _bad(c.post(f"/streams/s?t={t}", content=f"<{EX}a> <{EX}p> <{EX}b> .\n", headers=NT))
            _bad(c.get(f"/queries/q/results?from={t}"))
            _bad(c.get("/queries/q/results", headers={"Last-Event-ID": t}))
        after = c.get("/streams/s").json()
        assert (after["accepted"], after["progress"]) == (before["accepted"], before["progress"])


def test_names_and_terms_on_every_path(srv):
    with _c(srv) as c:
        long = "n" * 129
        _bad(c.put(f"/streams/{long}", json={"iri": EX + "x"}))
        assert c.put(f"/streams/{'n' * 128}", json={"iri": EX + "ok"}).status_code == 201
        _bad(c.put("/streams/x", json={"iri": EX + "i" * 100_000}))
        _bad(c.put("/streams/x", json={"iri": "urn:a b"}))
        r = c.post("/queries", content=f"REGISTER QUERY {'q' * 100_000} AS SELECT * FROM {'n' * 128} "
                                       "[RANGE 1s STEP 1s] WHERE { ?s ?p ?o }", headers=SPARQL_Q)
        assert r.status_code == 400 and r.json()["error"] == "syntax" and len(r.text) < 600, r.text[:300]
        for w in ("[RANGE 999999999999d STEP 1ms]", "[RANGE TRIPLES 1000000000000000000]", "[RANGE 1s STEP 0s]"):
            r = c.post("/queries", content=f"REGISTER QUERY w AS SELECT * FROM {'n' * 128} {w} "
                                           "WHERE { ?s ?p ?o }", headers=SPARQL_Q)
            assert r.status_code == 400 and r.json()["error"] == "syntax", r.text
        assert c.get("/queries").json()["queries"] == []
        _bad(c.post(f"/streams/{'n' * 128}?batch={'b' * 10_000}", content=_nd(_row(1, 1)), headers=NDJSON))
        # IRIs with spaces: refused alike in ndjson, Arrow and N-Triples bodies
        s = "n" * 128
        r = c.post(f"/streams/{s}", content=_nd(_row(1, 1), dict(_row(2, 2), s="<urn:a b>")), headers=NDJSON)
        assert r.status_code == 207 and r.json()["accepted"] == 1 and r.json()["errors"][0]["line"] == 2
        tab = pa.table({"s": [f"<{EX}a>", "<urn:a b>"], "p": [f"<{EX}p>"] * 2, "o": ['"1"', '"2"'], "t": [3, 3]})
        r = c.post(f"/streams/{s}", content=_ipc(tab), headers=ARROW)
        assert r.status_code == 207 and r.json()["accepted"] == 1 and r.json()["errors"][0]["line"] == 2
        r = c.post(f"/streams/{s}?t=4", content="<urn:a b> <urn:p> <urn:o> .\n", headers=NT)
        assert r.status_code == 400, r.text


def test_invalid_utf8_is_never_a_500(srv):
    with _c(srv) as c:
        assert c.put("/streams/u", json={"iri": EX + "u"}).status_code == 201
        body = (_nd(_row(1, 1)) + b'{"s":"<urn:a>","p":"<urn:p>","o":"\xff\xfe","t":2}\n'
                + b'{"s":"<urn:\xc3\x28>","p":"<urn:p>","o":"<urn:o>","t":2}\n' + _nd(_row(4, 3)))
        r = c.post("/streams/u", content=body, headers=NDJSON)
        assert r.status_code == 207, r.text
        assert r.json()["accepted"] == 2 and [e["line"] for e in r.json()["errors"]] == [2, 3]
        raw = [b"<urn:a>", b"<urn:\xff>"]
        offsets = pa.array([0, len(raw[0]), len(raw[0]) + len(raw[1])], pa.int32()).buffers()[1]
        col = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"".join(raw))])
        tab = pa.table({"s": [f"<{EX}a>"] * 2, "p": [f"<{EX}p>"] * 2, "o": col, "t": [5, 6]})
        r = c.post("/streams/u", content=_ipc(tab), headers=ARROW)
        assert r.status_code == 207, r.text
        assert r.json()["accepted"] == 1 and [e["line"] for e in r.json()["errors"]] == [2]


def test_far_heartbeat_over_sse_ends_in_idle_events(srv):
    with _c(srv) as c:
        assert c.put("/streams/f", json={"iri": EX + "f"}).status_code == 201
        assert c.post("/streams/f/progress?t=0").status_code == 200
        r = c.post("/queries", content="REGISTER QUERY far AS SELECT ?o FROM f [RANGE 1s STEP 1ms] "
                                       "WHERE { ?s ?p ?o }", headers=SPARQL_Q)
        assert r.status_code == 201
        assert c.post("/streams/f", content=_nd(_row(1, 5)), headers=NDJSON).status_code == 202
        with SSE(f"{srv.url}/queries/far/results?from=0", timeout=60) as sse:
            assert sse.status == 200
            assert c.post(f"/streams/f/progress?t={TIME_MAX}").status_code == 200
            sse.wait(lambda s: any(e.get("id") == TIME_MAX - 1 for e in s.of("idle")), timeout=60)
            idle = [orjson.loads(e["data"]) for e in sse.of("idle")]
            assert idle[-1] == {"from": 1006, "to": TIME_MAX - 1, "instants": TIME_MAX - 1006, "same_as": 1005}
            assert [e["id"] for e in sse.of("result")][:6] == [0, 1, 2, 3, 4, 5]
        # resuming inside the idle run gets the rest of it
        with SSE(f"{srv.url}/queries/far/results", headers={"Last-Event-ID": "5000000"}, timeout=60) as sse:
            sse.wait(lambda s: bool(s.of("idle")), timeout=30)
            assert orjson.loads(sse.of("idle")[0]["data"])["from"] == 5_000_001
        info = c.get("/queries/far").json()
        assert info["next_instant"] == TIME_MAX and info["unchanged_instants"] > TIME_MAX - 2000
        assert c.get("/streams").status_code == 200
