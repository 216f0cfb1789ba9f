"""POST /streams/{name} with Arrow IPC bodies over the real server: ingest, Batch-Id
idempotency, bad bodies (400/415), OpenAPI, and the id set across a --data-dir restart."""

from __future__ import annotations

import httpx
import pyarrow as pa
import pytest

from engine.stream.adaptor import ARROW_STREAM_TYPE
from tests.support.server_process import ServerProcess

EX = "http://ex.org/"
ARROW = {"Content-Type": ARROW_STREAM_TYPE}


def ipc(tab: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tab.schema) as w:
        w.write_table(tab, max_chunksize=max(1, tab.num_rows // 2))   # several record batches
    return sink.getvalue().to_pybytes()


def rows_table(rows) -> pa.Table:
    s, p, o, t = (list(c) for c in zip(*rows, strict=True))
    return pa.table({"s": s, "p": p, "o": o, "t": pa.array(t, pa.int64())})


def obs(i0: int, n: int, t0: int) -> pa.Table:
    return rows_table([(f"<{EX}x{i}>", f"<{EX}p>", f'"{i}"', t0 + i) for i in range(i0, i0 + n)])


def count(c: httpx.Client, pattern: str) -> int:
    r = c.get("/sparql", params={"query": f"SELECT (COUNT(*) AS ?n) WHERE {{ {pattern} }}"},
              headers={"Accept": "application/sparql-results+json"})
    assert r.status_code == 200, r.text
    return int(r.json()["results"]["bindings"][0]["n"]["value"])


@pytest.fixture
def srv(make_server):
    return make_server()


def test_arrow_post_and_batch_id(srv):
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.put("/streams/s", json={"iri": EX + "s", "absorb": "all"}).status_code == 201
        r = c.post("/streams/s", content=ipc(obs(0, 10, 1000)), headers=ARROW)
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 10, "rejected": 0, "errors": [], "progress": 1009}
        assert count(c, f"?x <{EX}p> ?o") == 10
        # Batch-Id header: applied once; a re-delivery is a duplicate and changes nothing
        body = ipc(obs(10, 5, 2000))
        r = c.post("/streams/s", content=body, headers={**ARROW, "Batch-Id": "b-1"})
        assert r.status_code == 202 and r.json()["duplicate"] is False and r.json()["accepted"] == 5
        r = c.post("/streams/s", content=body, headers={**ARROW, "Batch-Id": "b-1"})
        assert r.status_code == 202
        assert r.json() == {"accepted": 0, "rejected": 0, "errors": [], "progress": 2014,
                            "duplicate": True, "batch_id": "b-1", "original": {"accepted": 5, "rejected": 0}}
        # ?batch= is the same id space, also for ndjson bodies
        r = c.post("/streams/s?batch=b-1", content=b'{"s":"<a:x>","p":"<a:p>","o":"<a:y>","t":3000}\n',
                   headers={"Content-Type": "application/x-ndjson"})
        assert r.json()["duplicate"] is True
        assert count(c, f"?x <{EX}p> ?o") == 15
        assert c.get("/streams/s").json()["accepted"] == 15
        r = c.post("/streams/s?batch=b-2", content=body, headers={**ARROW, "Batch-Id": "b-3"})
        assert r.status_code == 400 and "differ" in r.json()["detail"]


def test_arrow_row_errors(srv):
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        c.put("/streams/s", json={"iri": EX + "s"})
        tab = rows_table([(f"<{EX}a>", f"<{EX}p>", f"<{EX}b>", 10),
                          ('"lit"', f"<{EX}p>", f"<{EX}b>", 11),
                          (f"<{EX}a>", f"<{EX}p>", f"<{EX}c>", 5)])
        r = c.post("/streams/s", content=ipc(tab), headers=ARROW)
        assert r.status_code == 207
        doc = r.json()
        assert doc["accepted"] == 1 and doc["rejected"] == 2
        assert [e["line"] for e in doc["errors"]] == [2, 3]
        assert "late element" in doc["errors"][1]["error"]


@pytest.mark.parametrize("body, ctype, status, words", [
    (b"not arrow at all", ARROW_STREAM_TYPE, 400, "not an Arrow IPC stream"),
    (None, ARROW_STREAM_TYPE, 400, "missing column"),
    ("int_s", ARROW_STREAM_TYPE, 400, "column 's' must hold strings"),
    (b"x", "application/vnd.apache.arrow.file", 415, "vnd.apache.arrow.stream"),
])
def test_bad_arrow_bodies(srv, body, ctype, status, words):
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        c.put("/streams/s", json={"iri": EX + "s"})
        if body is None:
            body = ipc(pa.table({"s": [f"<{EX}a>"], "p": [f"<{EX}p>"], "o": [f"<{EX}b>"]}))
        elif body == "int_s":
            body = ipc(pa.table({"s": [1], "p": [f"<{EX}p>"], "o": [f"<{EX}b>"], "t": [1]}))
        r = c.post("/streams/s", content=body, headers={"Content-Type": ctype, "Batch-Id": "z"})
        assert r.status_code == status, r.text
        assert words in r.json()["detail"]
        info = c.get("/streams/s").json()
        assert info["accepted"] == 0 and info["progress"] is None
        # the failed batch id was not recorded: a good body with it is applied
        r = c.post("/streams/s", content=ipc(obs(0, 2, 100)), headers={**ARROW, "Batch-Id": "z"})
        assert r.json()["accepted"] == 2 and r.json()["duplicate"] is False


def test_openapi_documents_arrow(srv):
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        doc = c.get("/openapi.json").json()
    post = doc["paths"]["/streams/{name}"]["post"]
    assert ARROW_STREAM_TYPE in post["requestBody"]["content"]
    assert any(p["name"] == "Batch-Id" and p["in"] == "header" for p in post["parameters"])


def test_batch_ids_survive_server_restart(tmp_path):
    """A restarted `jindou serve --data-dir` still skips a re-delivered batch whose data it kept."""
    d = str(tmp_path / "data")
    body = ipc(obs(0, 4, 1000))
    with ServerProcess("--data-dir", d, "--no-progress") as s, httpx.Client(base_url=s.url, timeout=60) as c:
        assert c.put("/streams/s", json={"iri": EX + "s", "absorb": "all"}).status_code == 201
        r = c.post("/streams/s", content=body, headers={**ARROW, "Batch-Id": "spark-0-0"})
        assert r.json()["accepted"] == 4
    with ServerProcess("--data-dir", d, "--no-progress") as s, httpx.Client(base_url=s.url, timeout=60) as c:
        assert count(c, f"?x <{EX}p> ?o") == 4
        r = c.post("/streams/s", content=body, headers={**ARROW, "Batch-Id": "spark-0-0"})
        assert r.status_code == 202 and r.json()["duplicate"] is True
        r = c.post("/streams/s", content=ipc(obs(4, 2, 2000)), headers={**ARROW, "Batch-Id": "spark-0-1"})
        assert r.json()["accepted"] == 2
        assert count(c, f"?x <{EX}p> ?o") == 6
