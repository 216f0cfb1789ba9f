"""Hostile continuous queries over the real server: a cross product in the window over the row
budget fails its instants with a clear error -- on its SSE stream *and* in GET /queries/{name}
(``errors``, ``last_error``) -- while another query on another stream keeps its instants, the
stream keeps ingesting and one-shot queries keep answering. Budgets are shrunk by settings
(``max_rows``) instead of using huge data."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest

EX = "http://ex.org/"
H = {"Content-Type": "application/sparql-query"}
ND = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def srv(make_server):
    return make_server(max_rows=1000, sse_keepalive=0.3)


def _nd(rows) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"


def _feed(c, stream, t, n, preds):
    rows = [{"s": f"<{EX}{stream}{t}_{i}>", "p": f"<{EX}{preds[i % len(preds)]}>", "o": f'"{i}"', "t": t + i % 400}
            for i in range(n)]
    r = c.post(f"/streams/{stream}", content=_nd(rows), headers=ND)
    assert r.status_code == 202, r.text


def _wait(c, name, pred, secs=20.0):
    end = time.monotonic() + secs
    while True:
        doc = c.get(f"/queries/{name}").json()
        if pred(doc) or time.monotonic() > end:
            return doc
        time.sleep(0.05)


@pytest.mark.parametrize("shape", [
    "?a <{ex}p> ?b . ?c <{ex}q> ?d",                              # two-way cross product
    "?a <{ex}p> ?b . ?c <{ex}q> ?d . ?e <{ex}r> ?f",             # three-way
])
def test_cross_product_over_the_row_budget_is_reported_in_the_status(srv, shape):
    where = shape.format(ex=EX)
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.put("/streams/a", json={"iri": EX + "a"}).status_code == 201
        assert c.put("/streams/b", json={"iri": EX + "b"}).status_code == 201
        bad = f"REGISTER QUERY bad AS SELECT * FROM STREAM <{EX}a> [RANGE 10s STEP 1s] WHERE {{ {where} }}"
        good = f"REGISTER QUERY good AS SELECT ?s ?o FROM STREAM <{EX}b> [RANGE 1s STEP 1s] WHERE {{ ?s <{EX}r> ?o }}"
        assert c.post("/queries", content=bad, headers=H).status_code == 201
        assert c.post("/queries", content=good, headers=H).status_code == 201
        doc = c.get("/queries/bad").json()
        assert doc["errors"] == 0 and doc["last_error"] is None
        # a small window first: the bad query answers (under the budget), no error yet
        _feed(c, "a", 0, 6, ["p", "q", "r"])
        _feed(c, "b", 0, 1, ["r"])
        for s in ("a", "b"):
            assert c.post(f"/streams/{s}/progress?t=1500").status_code == 200
        doc = _wait(c, "bad", lambda d: d["evaluated"] + d["errors"] >= 1)
        assert doc["errors"] == 0 and doc["last_error"] is None, doc
        # then a burst: 150 triples -> 50 x 50 (x 50) rows, over max_rows=1000
        _feed(c, "a", 1500, 150, ["p", "q", "r"])
        _feed(c, "b", 1500, 1, ["r"])
        for s in ("a", "b"):
            assert c.post(f"/streams/{s}/progress?t=2500").status_code == 200
        doc = _wait(c, "bad", lambda d: d["errors"] >= 1)
        assert doc["errors"] >= 1, doc
        err = doc["last_error"]
        assert err["instant"] == 2000 and err["error"] == "row_budget", err
        assert "row budget" in err["detail"] and len(err["detail"]) < 300
        # the other query kept its instants; the stream ingests; one-shot queries answer
        g = _wait(c, "good", lambda d: d["evaluated"] >= 2)
        assert g["evaluated"] >= 2 and g["errors"] == 0 and g["last_error"] is None, g
        _feed(c, "a", 3000, 3, ["p"])
        r = c.post("/sparql", content="ASK { }", headers=H)
        assert r.status_code == 200 and r.json()["boolean"] is True
        # the same error is the instant's result event on the SSE stream
        got = []
        with c.stream("GET", "/queries/bad/results?from=0", timeout=10) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    d = orjson.loads(line[5:])
                    got.append(d)
                    if "error" in d:
                        break
        assert got[-1]["error"] == "row_budget" and got[-1]["detail"] == err["detail"]
