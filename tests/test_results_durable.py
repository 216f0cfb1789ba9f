"""Durable result logs (--data-dir) across restarts of a real server (SIGTERM and SIGKILL), the
retain bound on disk, and SSE tickets for browsers under --read-token."""

from __future__ import annotations

import signal
import sqlite3
import time

import httpx
import orjson
import pytest

from engine.database import Database
from engine.stream.manager import StreamManager
from tests.pipeline_support import Server
from tests.test_http_queries_sse import SSE, _nd, _row

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}
SPARQL_Q = {"Content-Type": "application/sparql-query"}
Q = (f"REGISTER QUERY q AS SELECT ?s ?o FROM STREAM <{EX}s> [RANGE 2s STEP 1s] "
     f"WHERE {{ ?s <{EX}p> ?o }} ORDER BY ?s")


def _feed(c: httpx.Client, first: int, last: int) -> None:
    """One element per second at t = k*1000+500 for k in [first, last], then progress past the
    last one: instants (first+1)*1000 .. (last+1)*1000 become ready."""
    rows = [_row(k, k * 1000 + 500, f'"v{k}"') for k in range(first, last + 1)]
    r = c.post("/streams/s", content=_nd(rows), headers=NDJSON)
    assert r.status_code == 202 and r.json()["accepted"] == len(rows), r.text
    r = c.post(f"/streams/s/progress?t={(last + 1) * 1000 + 1}")
    assert r.status_code == 200, r.text


def _covered(sse: SSE) -> list[int]:
    """The instants the events received cover: a result's id, an idle run's from..to."""
    out: list[int] = []
    for e in list(sse.events):
        if e["event"] == "result":
            out.append(e["id"])
        elif e["event"] == "idle":
            d = orjson.loads(e["data"])
            out.extend(range(d["from"], d["to"] + 1, 1000))
    return out


def _events(sse: SSE) -> dict[int, str]:
    return {e["id"]: e["data"] for e in sse.of("result")}



def _setup(c: httpx.Client) -> None:
    """Stream ``s`` and the continuous query ``q`` over it."""
    assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
    assert c.post("/queries", content=Q, headers=SPARQL_Q).status_code == 201

@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_sse_resume_across_restart_has_no_gap(tmp_path, sig):
    data = tmp_path / "data"
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            with SSE(srv.url + "/queries/q/results?from=0") as sse:
                _feed(c, 0, 5)   # instants 1000..6000
                sse.wait(lambda s: 6000 in s.ids())
                before = _events(sse)
        assert sorted(before) == [1000, 2000, 3000, 4000, 5000, 6000]
    finally:
        srv.stop(sig)   # SIGKILL: no clean close; what any client saw must still be there

    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            # a client that saw up to 3000 resumes: the same ids and contents, then new instants
            with SSE(srv.url + "/queries/q/results", headers={"Last-Event-ID": "3000"}) as sse:
                sse.wait(lambda s: 6000 in s.ids())
                assert sse.of("gap") == []
                _feed(c, 6, 7)   # instants 7000, 8000: evaluated after the restart
                sse.wait(lambda s: 8000 in s.ids())
                got = _events(sse)
            assert sse.ids() == [4000, 5000, 6000, 7000, 8000]   # no gap, nothing twice
            assert {t: got[t] for t in (4000, 5000, 6000)} == {t: before[t] for t in (4000, 5000, 6000)}
            # 8000's window [6000, 8000) holds the elements at 6500 and 7500
            assert [b["o"]["value"] for b in orjson.loads(got[8000])["results"]["bindings"]] == ["v6", "v7"]
            # a replay from the start gives the pre-restart instants unchanged
            with SSE(srv.url + "/queries/q/results?from=0") as sse:
                sse.wait(lambda s: 8000 in s.ids())
                again = _events(sse)
            assert {t: again[t] for t in before} == before
            assert c.get("/queries/q").json()["next_instant"] == 9000
    finally:
        srv.stop()


def test_deleted_query_leaves_nothing_and_retain_bounds_the_file(tmp_path):
    data = tmp_path / "data"
    db = Database(data_dir=str(data))
    m = StreamManager(db, data_dir=str(data), retain=3)
    try:
        m.register_stream("s", EX + "s")
        m.register_query(Q)
        m.ingest_ndjson("s", _nd([_row(k, k * 1000 + 500) for k in range(10)]))
        m.heartbeat("s", 10_001)
        assert m.drain(20)
        assert [e.id for e in m.log("q").since(None, from_t=0)] == [8000, 9000, 10_000]
    finally:
        m.close()
        db.close()
    with sqlite3.connect(data / "results.sqlite") as con:
        ids = [r[0] for r in con.execute("SELECT id FROM events ORDER BY id")]
    # trimmed to `retain` once `retain // 4` (at least 1) more rows accumulated
    assert ids[-3:] == [8000, 9000, 10_000] and len(ids) <= 3 + 1
    db = Database(data_dir=str(data))
    m = StreamManager(db, data_dir=str(data), retain=3)
    try:
        log = m.log("q")
        evs = log.since(5000)   # older than what was retained: a gap first, also after the restart
        assert [e.event for e in evs] == ["gap", "result", "result", "result"]
        assert orjson.loads(evs[0].data) == {"missed_from": 6000, "resumed_at": 8000}
        m.delete_query("q")
        m.register_query(Q)   # the same name again: a new, empty log
        assert m.log("q").since(None, from_t=0) == []
    finally:
        m.close()
        db.close()
    with sqlite3.connect(data / "results.sqlite") as con:
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 0


# ---------------------------------------------------------------- tickets


@pytest.fixture
def locked(make_server):
    s = make_server(read_token="r-secret", token="w-secret", ticket_ttl=1.0, sse_keepalive=0.3)
    with httpx.Client(base_url=s.url, timeout=30) as c:
        auth = {"Authorization": "Bearer w-secret"}
        assert c.put("/streams/s", json={"iri": EX + "s"}, headers=auth).status_code == 201
        for name in ("q", "q2"):
            r = c.post("/queries", content=Q.replace("QUERY q ", f"QUERY {name} "), headers={**SPARQL_Q, **auth})
            assert r.status_code == 201, r.text
        yield c


def test_ticket_lets_an_eventsource_read_results(locked):
    c = locked
    assert c.post("/queries/q/tickets").status_code == 401
    assert c.post("/queries/q/tickets", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert c.post("/queries/nope/tickets", headers={"Authorization": "Bearer r-secret"}).status_code == 404
    r = c.post("/queries/q/tickets", headers={"Authorization": "Bearer r-secret"})
    assert r.status_code == 201 and r.headers["cache-control"] == "no-store"
    doc = r.json()
    ticket = doc["ticket"]
    assert len(ticket) >= 40 and doc["expires_in"] == 1.0 and doc["url"] == f"/queries/q/results?ticket={ticket}"
    assert c.post("/queries/q/tickets", headers={"Authorization": "Bearer r-secret"}).json()["ticket"] != ticket
    base = str(c.base_url).rstrip("/")
    assert c.get("/queries/q/results").status_code == 401             # no header, no ticket
    assert c.get("/queries/q2/results", params={"ticket": ticket}).status_code == 401   # another query
    assert c.get("/queries/q/results", params={"ticket": ticket[:-2] + "xx"}).status_code == 401
    with SSE(base + doc["url"]) as sse:   # no Authorization header: the ticket alone
        assert sse.status == 200
        auth = {"Authorization": "Bearer w-secret"}
        c.post("/streams/s", content=_nd([_row(1, 500)]), headers={**NDJSON, **auth})
        c.post("/streams/s/progress?t=1001", headers=auth)
        sse.wait(lambda s: 1000 in s.ids())
        # expiry: no new stream opens with it, the open one goes on
        time.sleep(1.1)
        r = c.get("/queries/q/results", params={"ticket": ticket})
        assert r.status_code == 401 and "expired" in r.json()["detail"]
        c.post("/streams/s/progress?t=2001", headers=auth)
        sse.wait(lambda s: 2000 in s.ids())


def test_an_event_is_visible_only_once_committed(tmp_path):
    """Group commit: while the writer cannot write (the connection is held), an appended event
    is neither readable nor signalled; once committed it is both, and it is in the file."""
    from engine.stream.resultlog import ResultLog
    from engine.stream.resultstore import ResultStore

    store = ResultStore(str(tmp_path))
    try:
        log = ResultLog(retain=10, step=1000, store=store, name="q")
        woken = []
        log.add_listener(lambda: woken.append(1))
        with store._lock:   # the writer blocks on the connection
            log.append(1000, b'{"a": 1}')
            log.append(2000, b'{"a": 2}')
            time.sleep(0.2)
            assert log.since(None, from_t=0) == [] and log.last_id is None and woken == []
        assert store.flush(10)
        assert [(e.id, e.data) for e in log.since(None, from_t=0)] == [(1000, b'{"a": 1}'), (2000, b'{"a": 2}')]
        assert woken and log.last_id == 2000
        again = ResultLog(retain=10, step=1000, store=store, name="q")   # what a restart reads
        assert [(e.id, e.data) for e in again.since(1000)] == [(2000, b'{"a": 2}')]
    finally:
        store.close()


def test_a_disk_behind_by_more_than_retain_keeps_the_newest(tmp_path):
    """The pending events are bounded by ``retain`` too: while the writer is blocked, older
    ones are dropped (a gap for a client resuming before them), on disk as in memory."""
    from engine.stream.resultlog import ResultLog
    from engine.stream.resultstore import ResultStore

    store = ResultStore(str(tmp_path))
    try:
        log = ResultLog(retain=5, step=1000, store=store, name="q")
        for t in range(1000, 4000, 1000):
            log.append(t, b"{}")
        assert store.flush(10)
        with store._lock:
            for t in range(4000, 20_000, 1000):
                log.append(t, b'{"t": %d}' % t)
        assert store.flush(10)
        ids = list(range(15_000, 20_000, 1000))
        evs = log.since(2000)
        assert [e.event for e in evs] == ["gap"] + ["result"] * 5 and [e.id for e in evs[1:]] == ids
        again = ResultLog(retain=5, step=1000, store=store, name="q")
        evs = again.since(2000)
        assert [e.id for e in evs[1:]] == ids and orjson.loads(evs[0].data) == {"missed_from": 3000,
                                                                                "resumed_at": 15_000}
        with store._lock:
            assert store._db.execute("SELECT count(*) FROM events").fetchone()[0] == 5
    finally:
        store.close()


def test_sigkill_mid_stream_loses_nothing_a_client_saw(tmp_path):
    """Kill -9 while instants are being evaluated and streamed: every event the client had
    received comes back identical after the restart, and resuming from its last one continues
    with the very next instant (the ones nobody saw are evaluated again)."""
    data = tmp_path / "data"
    n = 400
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            with SSE(srv.url + "/queries/q/results?from=0") as sse:
                _feed(c, 0, n - 1)   # instants 1000 .. n*1000
                sse.wait(lambda s: len(s.ids()) >= 30)
                srv.proc.kill()   # SIGKILL, mid-stream
                sse.wait(lambda s: s.closed)
                seen = _events(sse)
    finally:
        srv.stop()
    last = max(seen)
    assert sorted(seen) == list(range(1000, last + 1, 1000))
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            with SSE(srv.url + "/queries/q/results?from=0") as sse:
                sse.wait(lambda s: last in s.ids())
                again = _events(sse)
            assert {t: again[t] for t in seen} == seen
            # ten more elements after the restart: the resumed client gets every instant after its
            # last one, also when the worker had evaluated them all before the kill (last = n*1000)
            _feed(c, n, n + 9)
            end = (n + 10) * 1000
            with SSE(srv.url + "/queries/q/results", headers={"Last-Event-ID": str(last)}) as sse:
                try:
                    sse.wait(lambda s: _covered(s) and _covered(s)[-1] == end, timeout=60)
                except AssertionError as e:   # say what the server saw
                    status = c.get("/queries/q").text
                    log = (tmp_path / f"server-{srv.port}.log").read_text(errors="replace")[-4000:]
                    raise AssertionError(f"{e}\nlast={last}\nquery: {status}\nserver log: {log}") from None
                # every instant once, in order
                assert _covered(sse) == list(range(last + 1000, end + 1, 1000))
    finally:
        srv.stop()
