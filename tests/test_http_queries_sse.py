"""/queries and the SSE results over the real server: registration, events per
instant, Last-Event-ID resume, ?from replay, gap, end, shared results, slow
clients, and the --demo stream."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import orjson
import pytest

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}
SPARQL_Q = {"Content-Type": "application/sparql-query"}


def _nd(rows) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"


def _row(i, t, o=None):
    return {"s": f"<{EX}a{i}>", "p": f"<{EX}p>", "o": o or f'"{i}"', "t": t}


def _query(name="q", stream="s", rng="2s", step="1s", mode=""):
    return (f"REGISTER {mode} QUERY {name} AS SELECT ?s ?o FROM STREAM <{EX}{stream}> "
            f"[RANGE {rng} STEP {step}] WHERE {{ ?s <{EX}p> ?o }} ORDER BY ?s")


class SSE:
    """Reads one SSE response in a thread; parsed events land in ``events``."""

    def __init__(self, url: str, headers: dict | None = None, timeout: float = 20):
        self.url = url
        self.headers = headers or {}
        self.events: list[dict] = []
        self.comments = 0
        self.status = None
        self.response_headers = None
        self.closed = False
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._stop = False
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, read=timeout))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(timeout), "no response headers"

    def _run(self):
        try:
            with self._client.stream("GET", self.url, headers=self.headers) as r:
                self.status = r.status_code
                self.response_headers = r.headers
                self._ready.set()
                ev: dict = {}
                for line in r.iter_lines():
                    if self._stop:
                        return
                    if line == "":
                        if ev:
                            ev.setdefault("event", "message")
                            self.events.append(ev)
                        ev = {}
                    elif line.startswith(":"):
                        self.comments += 1
                    else:
                        k, _, v = line.partition(":")
                        v = v[1:] if v.startswith(" ") else v
                        if k == "data":
                            ev["data"] = ev["data"] + "\n" + v if "data" in ev else v
                        elif k == "id":
                            ev["id"] = int(v)
                        else:
                            ev[k] = v
        except BaseException as e:  # noqa: BLE001
            if not self._stop:
                self.error = e
        finally:
            self.closed = True
            self._ready.set()

    def of(self, kind="result") -> list[dict]:
        return [e for e in list(self.events) if e["event"] == kind]

    def ids(self) -> list[int]:
        return [e["id"] for e in self.of("result")]

    def wait(self, pred, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self):
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out; events: {self.events[-5:]} closed={self.closed} error={self.error}")

    def close(self):
        self._stop = True
        self._client.close()
        self._thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def srv(make_server):
    return make_server(sse_keepalive=0.3, retain=1000)


def _setup(c: httpx.Client, stream="s", **kw) -> dict:
    assert c.put(f"/streams/{stream}", json={"iri": EX + stream}).status_code in (200, 201)
    r = c.post("/queries", content=_query(stream=stream, **kw), headers=SPARQL_Q)
    assert r.status_code == 201, r.text
    return r.json()


def _feed_three(c: httpx.Client, stream="s"):
    """Elements at 500, 1500, 2500 and progress 3001: instants 1000, 2000, 3000."""
    r = c.post(f"/streams/{stream}", content=_nd([_row(1, 500), _row(2, 1500), _row(3, 2500)]), headers=NDJSON)
    assert r.status_code == 202 and r.json()["accepted"] == 3, r.text
    assert c.post(f"/streams/{stream}/progress?t=3001").json()["progress"] == 3001


def _subjects(ev) -> list[str]:
    doc = orjson.loads(ev["data"])
    return [b["s"]["value"] for b in doc["results"]["bindings"]]


def test_register_queries(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        info = _setup(c)
        assert info == {"id": "q", "streams": ["s"], "vars": ["s", "o"]}
        r = c.post("/queries", content=_query(), headers=SPARQL_Q)
        assert r.status_code == 409, r.text
        r = c.post("/queries", content="REGISTER QUERY bad AS SELECT ?s WHERE {\n  ?s ?p \n",
                   headers={"Content-Type": "text/plain"})
        assert r.status_code == 400
        doc = r.json()
        assert doc["error"] == "syntax" and doc["detail"] and isinstance(doc["line"], int)
        assert "column" in doc
        r = c.post("/queries", content=_query(name="q2", stream="nostream"), headers=SPARQL_Q)
        assert r.status_code == 400 and r.json()["error"] == "unknown_stream"
        r = c.post("/queries", content=_query(name="q3"), headers={"Content-Type": "application/json"})
        assert r.status_code == 415
        r = c.get("/queries")
        assert [q["id"] for q in r.json()["queries"]] == ["q"]
        r = c.get("/queries/q")
        assert r.status_code == 200 and r.json()["id"] == "q" and r.json()["streams"] == ["s"]
        assert c.get("/queries/zz").status_code == 404
        assert c.get("/queries/zz/results").status_code == 404
        assert c.delete("/queries/zz").status_code == 404
        assert c.delete("/queries/q").status_code == 204
        assert c.get("/queries/q").status_code == 404
        # the name can be registered again
        assert c.post("/queries", content=_query(), headers=SPARQL_Q).status_code == 201


def test_events_per_instant(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        _setup(c)
        # as a cross-origin EventSource asks: with Origin
        with SSE(srv.url + "/queries/q/results", headers={"Origin": "http://app.example"}) as sse:
            # headers come at once, before any event
            assert sse.status == 200
            assert sse.response_headers["content-type"].startswith("text/event-stream")
            assert sse.response_headers["access-control-allow-origin"] == "*"
            assert sse.events == []
            _feed_three(c)
            sse.wait(lambda s: len(s.of()) >= 3)
            evs = sse.of()
            assert [e["id"] for e in evs] == [1000, 2000, 3000]
            assert [_subjects(e) for e in evs] == [[EX + "a1"], [EX + "a1", EX + "a2"], [EX + "a2", EX + "a3"]]
            docs = [orjson.loads(e["data"]) for e in evs]
            assert [d["window"] for d in docs] == [{"start": t - 2000, "end": t} for t in (1000, 2000, 3000)]
            assert docs[0]["head"]["vars"] == ["s", "o"]
            # keep-alive comments while idle
            n = sse.comments
            sse.wait(lambda s: s.comments > n, timeout=5)
            # empty windows are evaluated too
            assert c.post("/streams/s/progress?t=6001").status_code == 200
            sse.wait(lambda s: len(s.of()) >= 6)
            assert sse.ids() == [1000, 2000, 3000, 4000, 5000, 6000]
            assert _subjects(sse.of()[-1]) == []


def test_resume_replay_and_shared(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        _setup(c)
        with SSE(srv.url + "/queries/q/results") as a, SSE(srv.url + "/queries/q/results") as b:
            _feed_three(c)
            a.wait(lambda s: len(s.of()) >= 3)
            b.wait(lambda s: len(s.of()) >= 3)
            assert a.ids() == b.ids() == [1000, 2000, 3000]
            assert [e["data"] for e in a.of()] == [e["data"] for e in b.of()]
        # a new client without Last-Event-ID starts at the next instant
        with SSE(srv.url + "/queries/q/results") as fresh:
            time.sleep(0.3)
            assert fresh.of() == []
            # Last-Event-ID: every later instant
            with SSE(srv.url + "/queries/q/results", {"Last-Event-ID": "1000"}) as r:
                r.wait(lambda s: len(s.of()) >= 2)
                assert r.ids() == [2000, 3000]
                assert r.of("gap") == []
                c.post("/streams/s/progress?t=4001")
                r.wait(lambda s: len(s.of()) >= 3)
                assert r.ids() == [2000, 3000, 4000]
                fresh.wait(lambda s: len(s.of()) >= 1)
                assert fresh.ids() == [4000]
        # ?from replays retained history
        with SSE(srv.url + "/queries/q/results?from=2000") as f:
            f.wait(lambda s: len(s.of()) >= 3)
            assert f.ids() == [2000, 3000, 4000]
        # Last-Event-ID wins over ?from (a browser reconnecting keeps the URL)
        with SSE(srv.url + "/queries/q/results?from=1000", {"Last-Event-ID": "3000"}) as f:
            f.wait(lambda s: len(s.of()) >= 1)
            time.sleep(0.2)
            assert f.ids() == [4000]
        assert c.get("/queries/q/results", headers={"Last-Event-ID": "x"}).status_code == 400
        assert c.get("/queries/q/results?from=y").status_code == 400


def test_gap_when_resuming_before_retained(make_server):
    s = make_server(sse_keepalive=0.3, retain=2)
    with httpx.Client(base_url=s.url, timeout=30) as c:
        _setup(c)
        _feed_three(c)
        c.post("/streams/s/progress?t=5001")  # instants 1000..5000; 4000 and 5000 retained
        deadline = time.monotonic() + 10
        while c.get("/queries/q").json().get("evaluated", 0) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        with SSE(s.url + "/queries/q/results", {"Last-Event-ID": "1000"}) as r:
            r.wait(lambda x: len(x.of()) >= 2)
            assert r.events[0]["event"] == "gap"
            gap = orjson.loads(r.events[0]["data"])
            assert gap["resumed_at"] == 4000 and gap["missed_from"] <= 2000
            assert r.ids() == [4000, 5000]


def test_istream_and_construct_events(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        _setup(c, mode="ISTREAM")
        con = (f"REGISTER QUERY c AS CONSTRUCT {{ ?s <{EX}q> ?o }} FROM STREAM <{EX}s> [RANGE 2s STEP 1s] "
               f"WHERE {{ ?s <{EX}p> ?o }}")
        assert c.post("/queries", content=con, headers=SPARQL_Q).status_code == 201
        with SSE(srv.url + "/queries/q/results") as i, SSE(srv.url + "/queries/c/results") as k:
            _feed_three(c)
            i.wait(lambda s: len(s.of()) >= 3)
            k.wait(lambda s: len(s.of()) >= 3)
            # ISTREAM: only the solutions new at each instant
            assert [_subjects(e) for e in i.of()] == [[EX + "a1"], [EX + "a2"], [EX + "a3"]]
            docs = [orjson.loads(e["data"]) for e in k.of()]
            assert all(set(d) >= {"triples", "window"} for d in docs)
            assert f"<{EX}a3> <{EX}q> \"3\" ." in docs[2]["triples"]
            assert f"<{EX}a1>" not in docs[2]["triples"]


def test_arrival_clock_stream(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.put("/streams/w", json={"iri": EX + "w", "clock": "arrival"}).status_code == 201
        r = c.post("/queries", content=_query(stream="w", rng="5s", step="200ms"), headers=SPARQL_Q)
        assert r.status_code == 201, r.text
        with SSE(srv.url + "/queries/q/results") as sse:
            r = c.post("/streams/w", content=f"<{EX}z> <{EX}p> <{EX}o> .\n".encode(),
                       headers={"Content-Type": "application/n-triples"})
            assert r.status_code == 202, r.text
            # instants follow the wall clock: the element shows up without any heartbeat
            sse.wait(lambda s: any(_subjects(e) == [EX + "z"] for e in s.of()), timeout=10)
            ids = sse.ids()
            assert ids == sorted(ids) and all(t % 200 == 0 for t in ids)


def test_end_on_delete(srv):
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        _setup(c)
        with SSE(srv.url + "/queries/q/results") as a, SSE(srv.url + "/queries/q/results") as b:
            _feed_three(c)
            a.wait(lambda s: len(s.of()) >= 3)
            assert c.delete("/queries/q").status_code == 204
            for sse in (a, b):
                sse.wait(lambda s: s.closed)
                assert sse.events[-1]["event"] == "end"
                assert sse.error is None
        # a client of the re-registered query gets the new query's events
        _setup(c)
        with SSE(srv.url + "/queries/q/results") as n:
            c.post("/streams/s", content=_nd([_row(9, 3500)]), headers=NDJSON)
            c.post("/streams/s/progress?t=5001")
            n.wait(lambda s: len(s.of()) >= 1)
            assert not n.closed


@pytest.mark.parametrize("buffer,retain", [(100, 1000), (60, 20)])
def test_stalled_client_is_cut_off(make_server, buffer, retain):
    # The stalled client (4 KB receive window) blocks after the kernel buffers a
    # few MB (at most ~70 of the 300 ~60 KB events), so its backlog passes either
    # buffer; the healthy reader gets enough headroom (6 MB / 3.6 MB) not to be
    # cut off itself on a loaded machine. (60, 20): the backlog counts events
    # the log has dropped too.
    s = make_server(sse_keepalive=5, sse_buffer=buffer, retain=retain, sse_error_timeout=10)
    port = int(s.url.rsplit(":", 1)[1])
    big = '"' + "x" * 500 + '"'
    with httpx.Client(base_url=s.url, timeout=60) as c:
        _setup(c, rng="10s", step="100ms")
        stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            stalled.connect(("127.0.0.1", port))
            stalled.sendall(b"GET /queries/q/results HTTP/1.1\r\nHost: test\r\n\r\n")
            with SSE(s.url + "/queries/q/results", timeout=60) as good:
                time.sleep(0.3)
                n = 300  # one element every 100 ms, ~100 in each window: events of ~60 KB
                rows = [_row(i, 50 + 100 * i, big) for i in range(n)]
                # the data moves the stream's progress: posted in steps of 20 elements, each step's
                # instants awaited by the healthy reader, so that its backlog stays under either
                # buffer however fast the engine evaluates (the stalled one's grows without bound)
                for k in range(20, n + 1, 20):
                    part = rows[k - 20:k]
                    assert c.post("/streams/s", content=_nd(part), headers=NDJSON).json()["accepted"] == 20
                    good.wait(lambda x, k=k: x.ids() and x.ids()[-1] >= 100 * (k - 1), timeout=60)
                c.post(f"/streams/s/progress?t={100 * n + 1}")
                good.wait(lambda x: x.ids() and x.ids()[-1] == 100 * n, timeout=60)
                if retain >= n:
                    assert good.ids() == [100 * (i + 1) for i in range(n)]
                else:  # a reader may fall behind the short history: a gap, never a duplicate
                    assert good.ids() == sorted(set(good.ids()))
                assert good.of("error") == [] and not good.closed
                # the stalled client now reads what it was sent: a prefix, the error, then EOF
                stalled.settimeout(30)
                data = b""
                while True:
                    chunk = stalled.recv(1 << 16)
                    if not chunk:
                        break
                    data += chunk
                assert data.startswith(b"HTTP/1.1 200")
                assert b"event: error" in data
                assert data.count(b"event: result") < n
                err = data[data.index(b"event: error"):].split(b"data: ", 1)[1].split(b"\n", 1)[0]
                assert orjson.loads(err)["error"] == "slow_client"
                # the good client still gets new instants
                c.post(f"/streams/s/progress?t={100 * (n + 2) + 1}")
                good.wait(lambda x: x.ids()[-1] == 100 * (n + 2))
        finally:
            stalled.close()


def test_demo_serves_live_results():
    from tests.support.server_process import ServerProcess

    with ServerProcess("--demo", "--no-progress", "--shards", "1") as p:
        with SSE(p.url + "/queries/demo/results", timeout=30) as sse:
            sse.wait(lambda s: len(s.of()) >= 1, timeout=12)
            doc = orjson.loads(sse.of()[0]["data"])
            assert doc["results"]["bindings"], doc  # the feeder's readings are in the window
            assert doc["head"]["vars"] == ["property", "readings", "average"]
            assert doc["window"]["end"] - doc["window"]["start"] == 10_000
        with httpx.Client(base_url=p.url, timeout=10) as c:
            assert c.get("/streams/sensors").json()["accepted"] > 0
            assert c.get("/queries/demo").json()["streams"] == ["sensors"]
