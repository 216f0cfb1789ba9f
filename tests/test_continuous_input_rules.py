"""Stream input rules checked with new inputs: stream POSTs without ``t`` on an event-time
stream and mixed batches (the status says what happened, nothing is stored when nothing was
taken), and an SSE client resuming with ``Last-Event-ID`` across a SIGKILL of the server."""

from __future__ import annotations

import signal

import httpx
import orjson
import pyarrow as pa
import pytest

from tests.pipeline_support import Server
from tests.test_continuous_user_scenarios import _covered, _feed
from tests.test_http_queries_sse import SSE

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}


def _line(i: int, **t) -> bytes:
    return orjson.dumps({"s": f"<{EX}a{i}>", "p": f"<{EX}p>", "o": f'"{i}"', **t})


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("recheck"))
    try:
        with httpx.Client(base_url=s.url, timeout=30) as c:
            assert c.put("/streams/ev", json={"iri": EX + "ev"}).status_code == 201
        yield s
    finally:
        s.stop()


def _progress(c: httpx.Client) -> int | None:
    return c.get("/streams/ev").json()["progress"]


@pytest.mark.parametrize("body", [
    b"\n".join(_line(i) for i in range(3)),                              # no t at all
    b"\r\n".join(_line(i) for i in range(3)) + b"\r\n",                  # CRLF lines
    b"\xef\xbb\xbf" + b"\n".join(_line(i) for i in range(2)),            # a BOM, then no t
    b"\n".join(orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"x"', "T": 5}) for _ in range(2)),  # "T"
    b"\n".join(_line(i, t=None) for i in range(3)),                      # "t": null
    b"\n".join(_line(i) for i in range(2500)),                           # past the small-body parser
])
def test_no_time_on_an_event_time_stream_is_a_400_that_stores_nothing(srv, body):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        before = c.get("/streams/ev").json()
        r = c.post("/streams/ev", content=body, headers=NDJSON)
        assert r.status_code == 400, r.text
        doc = r.json()
        assert doc["error"] == "missing_time" and doc["accepted"] == 0, doc
        after = c.get("/streams/ev").json()
        assert after["progress"] == before["progress"]
        assert after.get("accepted") == before.get("accepted")


def test_mixed_lines_are_a_207_naming_each_refused_line(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        p0 = _progress(c) or 0
        body = b"\n".join([_line(1, t=p0 + 10), _line(2), b"", _line(3, t=True), _line(4, t=p0 + 20),
                           _line(5, t="12"), _line(6, t=p0 + 5), _line(7, t=p0 + 30)])
        r = c.post("/streams/ev", content=body, headers=NDJSON)
        assert r.status_code == 207, r.text
        doc = r.json()
        assert doc["accepted"] == 3 and doc["rejected"] == 4, doc
        # (line 3 is blank: lines are numbered as sent)
        assert [e["line"] for e in doc["errors"]] == [2, 4, 6, 7], doc
        assert "late" in doc["errors"][-1]["error"]
        assert doc["progress"] == p0 + 30
        # every line late: a 422, not a 400 (the times were given)
        r = c.post("/streams/ev", content=_line(8, t=p0 + 1), headers=NDJSON)
        assert r.status_code == 422, r.text


def test_graph_and_arrow_bodies_without_time(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        before = _progress(c)
        r = c.post("/streams/ev", content=f"<{EX}a> <{EX}p> <{EX}b> .\n".encode(),
                   headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 400, r.text
        assert "?t=" in r.json()["detail"]
        tbl = pa.table({"s": [f"<{EX}a>"], "p": [f"<{EX}p>"], "o": ['"1"']})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, tbl.schema) as w:
            w.write_table(tbl)
        r = c.post("/streams/ev", content=sink.getvalue().to_pybytes(),
                   headers={"Content-Type": "application/vnd.apache.arrow.stream"})
        assert r.status_code == 400, r.text
        assert _progress(c) == before


def test_last_event_id_resume_across_sigkill_has_no_gap(tmp_path):
    data = tmp_path / "data"
    text = (f"PREFIX : <{EX}> REGISTER RSTREAM <{EX}out/r> AS SELECT (COUNT(*) AS ?n) "
            "FROM NAMED WINDOW :w ON :s [RANGE PT2S STEP PT0.5S] WHERE { WINDOW :w { ?x :p ?o } }")
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
            assert c.post("/queries", content=text, headers={"Content-Type": "application/sparql-query"}
                          ).status_code == 201
            with SSE(srv.url + "/queries/r/results?from=0") as s:
                _feed(c, 0, 5)
                s.wait(lambda s: 5500 in _covered(list(s.events)), timeout=60)
                seen = _covered(list(s.events))
                last = max(int(e["id"]) for e in s.events if e.get("id"))
    finally:
        srv.stop(signal.SIGKILL)
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _feed(c, 6, 9)
            with SSE(srv.url + "/queries/r/results", headers={"Last-Event-ID": str(last)}) as s:
                s.wait(lambda s: 9500 in _covered(list(s.events)), timeout=60)
                events = list(s.events)
            assert s.of("gap") == []
            after = _covered(events)
            assert min(after) == last + 500, (last, sorted(after)[:3])   # the next instant, none skipped
            assert sorted(after) == list(range(last + 500, max(after) + 1, 500))
            assert set(seen) | set(after) == set(range(min(seen), max(after) + 1, 500))
    finally:
        srv.stop()
