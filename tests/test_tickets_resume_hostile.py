"""SSE tickets and Last-Event-ID resume under attack: tickets after a delete and re-register,
tickets on other endpoints, tickets in the access log; garbage resume ids; two clients
resuming at once while retention trims the log (in memory and with --data-dir)."""

from __future__ import annotations

import threading
import time

import httpx
import orjson
import pytest

from tests.pipeline_support import Server, wait_for
from tests.test_http_queries_sse import SSE, _nd, _row

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}
SPARQL_Q = {"Content-Type": "application/sparql-query"}
Q = (f"REGISTER QUERY q AS SELECT ?s ?o FROM STREAM <{EX}s> [RANGE 2s STEP 1s] "
     f"WHERE {{ ?s <{EX}p> ?o }} ORDER BY ?s")
W = {"Authorization": "Bearer w-secret"}
R = {"Authorization": "Bearer r-secret"}


@pytest.fixture
def locked(make_server):
    s = make_server(read_token="r-secret", token="w-secret", ticket_ttl=30.0, sse_keepalive=0.3)
    with httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}, headers=W).status_code == 201
        for name in ("q", "q2"):
            r = c.post("/queries", content=Q.replace("QUERY q ", f"QUERY {name} "), headers={**SPARQL_Q, **W})
            assert r.status_code == 201, r.text
        yield c


def _ticket(c: httpx.Client, name: str = "q") -> str:
    r = c.post(f"/queries/{name}/tickets", headers=R)
    assert r.status_code == 201, r.text
    return r.json()["ticket"]


def test_a_ticket_dies_with_its_query_also_when_the_name_comes_back(locked):
    c = locked
    t = _ticket(c)
    assert c.delete("/queries/q", headers=W).status_code == 204
    r = c.get("/queries/q/results", params={"ticket": t})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"   # not 404: no existence probe
    assert c.post("/queries", content=Q, headers={**SPARQL_Q, **W}).status_code == 201
    r = c.get("/queries/q/results", params={"ticket": t})   # the new q is another query
    assert r.status_code == 401 and "POST /queries/{name}/tickets" in r.json()["detail"]
    base = str(c.base_url).rstrip("/")
    with SSE(f"{base}/queries/q/results?ticket={_ticket(c)}") as sse:   # a ticket of the new q works
        assert sse.status == 200


def test_a_ticket_opens_its_result_stream_only(locked):
    c = locked
    t = _ticket(c)
    for method, path in (("GET", "/queries/q"), ("GET", "/queries"), ("GET", "/queries/q/sinks"),
                         ("POST", "/queries/q/tickets"), ("GET", "/queries/q2/results"), ("GET", "/status"),
                         ("GET", "/metrics"), ("GET", "/pipelines"), ("GET", "/streams"),
                         ("GET", "/sparql?query=ASK%7B%7D"), ("DELETE", "/queries/q")):
        sep = "&" if "?" in path else "?"
        r = c.request(method, f"{path}{sep}ticket={t}")
        anon = c.request(method, path)   # a ticket adds nothing anywhere else
        assert r.status_code == anon.status_code, (method, path, r.status_code)
        if path.startswith(("/queries", "/sparql", "/streams")):
            assert r.status_code == 401, (method, path, r.status_code)
    r = c.get("/queries/q/results", params=[("ticket", t), ("ticket", t)])   # one ticket, not two
    assert r.status_code == 401
    assert c.get("/queries/nope/results", params={"ticket": t}).status_code == 401


def test_the_access_log_never_holds_a_ticket(tmp_path):
    """The access lines (a real `jindou serve`, --access-log) name a ticket's parameter, never
    its value: an access log is read by more people than the token's holders."""
    srv = Server(tmp_path, None, args=["--read-token", "r-secret", "--token", "w-secret", "--access-log",
                                       "--log-level", "info", "--sse-keepalive", "0.3"])
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s"}, headers=W).status_code == 201
            for name in ("q", "q2"):
                r = c.post("/queries", content=Q.replace("QUERY q ", f"QUERY {name} "),
                           headers={**SPARQL_Q, **W})
                assert r.status_code == 201, r.text
            t = _ticket(c)
            c.get("/queries/q2/results", params={"ticket": t})                  # refused
            c.get(f"/queries/q2/results?tick%65t={t}&x=1")                      # an escaped key is a ticket too
            c.get(f"/queries/q2/results?TICKET={t}")
            c.get("/queries/q2/results", params={"token": "w-secret"})
            with SSE(f"{srv.url}/queries/q/results?ticket={t}") as sse:         # accepted
                assert sse.status == 200
            c.get("/status?done=1")
            wait_for(lambda: b"done=1" in (tmp_path / f"server-{srv.port}.log").read_bytes(), 30, "the access log")
    finally:
        srv.stop()
    text = (tmp_path / f"server-{srv.port}.log").read_text()
    lines = [ln for ln in text.splitlines() if "jindou.access" in ln and "/queries/q" in ln]
    assert len(lines) >= 6, text
    assert t not in text and t[:16] not in text and "w-secret" not in text
    assert sum("=<redacted>" in ln for ln in lines) >= 5 and any("x=1" in ln for ln in lines)
    assert any("/queries/q/results?ticket=<redacted>" in ln and " 200 " in ln for ln in lines)


# ---------------------------------------------------------------- resume


def _feed(c: httpx.Client, first: int, last: int, headers=None) -> None:
    rows = [_row(k, k * 1000 + 500, f'"v{k}"') for k in range(first, last + 1)]
    r = c.post("/streams/s", content=_nd(rows), headers={**NDJSON, **(headers or {})})
    assert r.status_code == 202, r.text
    r = c.post(f"/streams/s/progress?t={(last + 1) * 1000 + 1}", headers=headers or {})
    assert r.status_code == 200, r.text


@pytest.fixture
def open_server(make_server):
    s = make_server(sse_keepalive=0.3)
    with httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        assert c.post("/queries", content=Q, headers=SPARQL_Q).status_code == 201
        _feed(c, 0, 4)   # instants 1000..5000
        yield c


def test_a_ticket_is_not_looked_at_where_reads_are_open(open_server):
    c = open_server
    for qs in ("ticket=", "ticket=stale-one-from-before-a-restart"):
        with c.stream("GET", f"/queries/q/results?{qs}") as r:
            assert r.status_code == 200


@pytest.mark.parametrize("leid", ["-5", "-99999999999999999999", "99999999999999999999999", "abc", "1e3",
                                  "0x10", "1000.0", "10 00", "9007199254740992", "\u0661\u0660"])
def test_garbage_last_event_ids_are_a_clear_400(open_server, leid):
    c = open_server
    r = c.get("/queries/q/results", headers={"Last-Event-ID": leid.encode("utf-8")})
    assert r.status_code == 400, r.text
    doc = r.json()
    assert "Last-Event-ID" in doc["detail"] and "Traceback" not in r.text and "invalid literal" not in r.text


@pytest.mark.parametrize("leid,first", [("0", 1000), ("1500", 2000), ("+3000", 4000),
                                        ("5000", None), ("9007199254740991", None)])
def test_resume_ids_in_range(open_server, leid, first):
    """A gap id resumes after it; an id at or beyond the last instant waits for the next one."""
    c = open_server
    base = str(c.base_url).rstrip("/")
    deadline = time.monotonic() + 20
    while c.get("/queries/q").json().get("next_instant", 0) < 6000 and time.monotonic() < deadline:
        time.sleep(0.05)
    with SSE(base + "/queries/q/results", headers={"Last-Event-ID": leid}) as sse:
        assert sse.status == 200
        if first is not None:
            sse.wait(lambda s: 5000 in s.ids())
            assert sse.ids() == list(range(first, 5001, 1000))
        else:
            time.sleep(0.5)
            assert sse.ids() == [] and sse.error is None and not sse.of("error")


def _check_stream(sse: SSE, leid: int, last: int, step: int = 1000) -> None:
    """Ids strictly increase (no duplicate), and every instant after ``leid`` up to ``last`` was
    either received or announced missing by a gap before the next event."""
    seen: list[int] = []
    missing: set[int] = set()
    for e in list(sse.events):
        assert e["event"] in ("result", "gap", "idle"), e
        if e["event"] == "gap":
            g = orjson.loads(e["data"])
            missing.update(range(g["missed_from"], g["resumed_at"], step))
        else:
            assert not seen or e["id"] > seen[-1], (seen[-5:], e["id"])
            seen.append(e["id"])
    lost = set(range(leid + step, last + 1, step)) - set(seen) - missing
    assert not lost, (sorted(lost), [(e["event"], e.get("id"), e["data"] if e["event"] == "gap" else "")
                                     for e in sse.events])
    assert not (set(seen) & missing)


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "data-dir"])
def test_two_clients_resume_while_retention_trims(make_server, tmp_path, durable):
    s = make_server(sse_keepalive=0.3, retain=3, **({"data_dir": str(tmp_path / "d")} if durable else {}))
    with httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        assert c.post("/queries", content=Q, headers=SPARQL_Q).status_code == 201
        _feed(c, 0, 9)   # instants 1000..10000; the log keeps the last 3
        deadline = time.monotonic() + 30
        while c.get("/queries/q").json().get("next_instant", 0) < 11_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        base = str(c.base_url).rstrip("/")
        stop = threading.Event()

        def feeder():
            k = 10
            with httpx.Client(base_url=s.url, timeout=30) as f:
                while not stop.is_set() and k < 60:
                    _feed(f, k, k + 1)
                    k += 2
                    time.sleep(0.01)

        th = threading.Thread(target=feeder)
        th.start()
        clients = []
        try:
            for leid in (2000, 2000, 7000):
                clients.append((leid, SSE(base + "/queries/q/results", headers={"Last-Event-ID": str(leid)})))
            th.join(60)
        finally:
            stop.set()
            th.join(60)
        last = 60_000
        try:
            for leid, sse in clients:
                assert sse.status == 200
                sse.wait(lambda x: last in x.ids(), timeout=60)
                _check_stream(sse, leid, last)
                if leid == 2000:
                    assert sse.of("gap"), "the log was trimmed past 2000 before the clients came"
        finally:
            for _, sse in clients:
                sse.close()


def test_a_batch_committed_behind_cut_pending_events_keeps_the_newest_dropped_id(tmp_path):
    """With --data-dir, events that ``retain`` cut while still pending (the disk behind) are
    newer than the visible ones the next publish trims: the log's newest dropped id is the
    larger of the two, so a resume from before the cut ones gets its gap (it used to get the
    events after them with no gap: instants lost without a word)."""
    from engine.stream.resultlog import ResultLog
    from engine.stream.resultstore import ResultStore

    st = ResultStore(str(tmp_path))
    try:
        rl = ResultLog(3, 1000, store=st, name="q")
        rl.append(1000, b"{}")
        assert st.flush(10)
        with st._lock:   # the writer is held in its commit: appends pile up as pending events
            for k in range(2, 11):
                rl.append(k * 1000, b"{}")
        assert st.flush(10)
        evs = rl.since(3000)
        assert [(e.event, e.id) for e in evs] == [("gap", 3000), ("result", 8000), ("result", 9000),
                                                  ("result", 10_000)]
        assert orjson.loads(evs[0].data) == {"missed_from": 4000, "resumed_at": 8000}
    finally:
        st.close()


# ---------------------------------------------------------------- error texts

_LIBRARY_WORDS = ("unexpected character", "(char ", "codec", "can't decode", "flatbuffer", "Expected to read",
                  "Invalid IPC", "ArrowInvalid", "position", "Traceback", "orjson", "pyarrow")


def _ours(r: httpx.Response, status: int = 400) -> str:
    assert r.status_code == status, r.text
    assert not any(w in r.text for w in _LIBRARY_WORDS), r.text
    return r.text


def test_errors_quote_no_library_text(open_server):
    c = open_server
    js = {"Content-Type": "application/json"}
    assert "line 1, column 2" in _ours(c.put("/queries/q/sinks", content=b"{", headers=js))
    assert "line 2, column 1" in _ours(c.put("/queries/q/sinks", content=b'{"sinks":\n]', headers=js))
    assert "not valid JSON (line 1" in _ours(c.put("/streams/s2", content=b'{"iri": }', headers=js))
    assert "not UTF-8" in _ours(c.get("/queries/q/results?from=%ff%fe"))
    t = _ours(c.post("/streams/s", content=b'{"s": "<http://a>", "p": "<http://p>", "o": "x", "t": 1}\n{"s": oops}\n',
                     headers=NDJSON), 422)
    assert "not valid JSON (column 7)" in t
    t = _ours(c.post("/streams/s", content=b"\xff\xff\xff\xff\x10\x00\x00\x00garbage-not-arrow",
                     headers={"Content-Type": "application/vnd.apache.arrow.stream"}))
    assert "Arrow IPC stream" in t
