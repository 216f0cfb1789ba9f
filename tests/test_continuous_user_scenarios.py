"""Issue 13 items 3-6 checked with what users send that earlier tests did not: every syntax's
query shapes (count windows, CQELS without SLIDE, RSP-QL ISTREAM, f:timestamp, a derived
stream and its reader) resumed across a SIGKILL of a real server, streams posted by the
three syntaxes' users, tickets and sinks used the wrong way."""

from __future__ import annotations

import signal

import httpx
import orjson
import pytest

from tests.pipeline_support import Server
from tests.test_http_queries_sse import SSE
from tests.test_result_sinks_outage import _messages

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
                for s in sses.values():
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
                assert {t: after.get(t) for t in before} == before, n   # what a client saw comes back
                ids = sorted(after)
                step = ids[1] - ids[0]
                assert ids == list(range(ids[0], ids[-1] + 1, step)), (n, ids)   # no instant missing
    finally:
        srv.stop()


# ------------------------------------------------------------------ kill -9 in the middle of POSTs

CNT_Q = (f"REGISTER QUERY c AS SELECT ?s ?o FROM STREAM <{EX}s> [RANGE TRIPLES 4 STEP 1s] "
         f"WHERE {{ ?s <{EX}p> ?o }}")


def _batch(b: int) -> bytes:
    """Batch ``b``: 50 elements at b*1000 + 10*i ms (a count window notices a line stored twice)."""
    return b"\n".join(orjson.dumps({"s": f"<{EX}a{i % 7}>", "p": f"<{EX}p>", "o": f'"{b}-{i}"',
                                    "t": b * 1000 + 10 * i}) for i in range(50))


def _reference(batches: int) -> dict[int, str]:
    """The count query's results over the batches, each posted once, without a crash."""
    from engine.database import Database
    from engine.stream.manager import StreamManager
    m = StreamManager(Database(shards=1))
    try:
        m.register_stream("s", EX + "s")
        m.register_query(CNT_Q)
        for b in range(batches):
            m.ingest_ndjson("s", _batch(b), batch_id=f"b{b}")
        m.heartbeat("s", batches * 1000 + 1)
        assert m.drain(30)
        return {e.id: e.data.decode() for e in m.log("c").since(None, from_t=-1) if e.event == "result"}
    finally:
        m.close()


def test_sigkill_while_batches_are_posted_then_redelivered_stores_each_once(tmp_path):
    """A producer posts batches with Batch-Id; the server is killed while they arrive; after the
    restart the producer sends every batch again (it cannot know which were applied). Each batch
    is applied once (a count window would hold a line stored twice) and every instant equals a
    run without the crash, also the ones a client had seen before it."""
    import threading
    n = 40
    data = tmp_path / "data"
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
            assert c.post("/queries", content=CNT_Q, headers=SPARQL_Q).status_code == 201
        stop = threading.Event()

        def produce():
            with httpx.Client(base_url=srv.url, timeout=30) as pc:
                for b in range(n):
                    if stop.is_set():
                        return
                    try:
                        pc.post("/streams/s", content=_batch(b), headers={**NDJSON, "Batch-Id": f"b{b}"})
                    except httpx.HTTPError:
                        return
        th = threading.Thread(target=produce, daemon=True)
        with SSE(srv.url + "/queries/c/results?from=0") as sse:
            th.start()
            sse.wait(lambda s: len(s.ids()) >= 5, timeout=60)
            srv.proc.kill()
            stop.set()
            sse.wait(lambda s: s.closed)
            seen = {e["id"]: e["data"] for e in sse.of("result")}
        th.join(30)
    finally:
        srv.stop()
    srv = Server(tmp_path, data)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            for b in range(n):
                r = c.post("/streams/s", content=_batch(b), headers={**NDJSON, "Batch-Id": f"b{b}"})
                assert r.status_code in (202, 207, 422), r.text
            assert c.post(f"/streams/s/progress?t={n * 1000 + 1}").status_code == 200
            with SSE(srv.url + "/queries/c/results?from=0") as sse:
                sse.wait(lambda s: n * 1000 in s.ids(), timeout=60)
                after = {e["id"]: e["data"] for e in sse.of("result")}
    finally:
        srv.stop()
    ref = _reference(n)
    assert {t: after[t] for t in seen} == seen
    assert {t: orjson.loads(v) for t, v in after.items()} == {t: orjson.loads(v) for t, v in ref.items()}


class _CrashHere(BaseException):
    """Stands for the process dying at this point (not an error any code path handles)."""


def _crash_at(monkeypatch, which: str):
    """Make the ledger's record of batch id ``which`` "kill the process" (after the batch is in
    the window journal, before the ledger's line)."""
    from engine.stream.ledger import BatchLedger
    real = BatchLedger.record

    def dies(self, stream, batch_id, *a, **kw):
        if batch_id == which:
            raise _CrashHere
        return real(self, stream, batch_id, *a, **kw)
    monkeypatch.setattr(BatchLedger, "record", dies)
    return real


def test_crash_between_the_window_journal_and_the_batch_ledger(tmp_path, monkeypatch):
    """The deterministic form of the test above: the process dies after a batch's elements are
    in the window journal and before its id is in the batch-id ledger. After the restart the
    producer re-sends the batch: it must be answered as a duplicate (with the first delivery's
    counts) and change nothing -- before the fix its last element, at the stream's progress,
    was stored a second time and the count window lost a triple to the copy. Then the same for
    a graph POST (one element: a derived stream writes its instants this way)."""
    from engine.database import Database
    from engine.stream.ledger import BatchLedger
    from engine.stream.manager import StreamManager
    data = str(tmp_path / "data")
    nt = f"<{EX}g> <{EX}p> <{EX}graph> .\n".encode()
    # life 1: batch b0, then the crash while b1 is stored
    db = Database(shards=1, data_dir=data)
    m = StreamManager(db, data_dir=data)
    try:
        m.register_stream("s", EX + "s")
        m.register_query(CNT_Q)
        m.ingest_ndjson("s", _batch(0), batch_id="b0")
        real = _crash_at(monkeypatch, "b1")
        with pytest.raises(_CrashHere):
            m.ingest_ndjson("s", _batch(1), batch_id="b1")
        monkeypatch.setattr(BatchLedger, "record", real)
    finally:
        m.close()
        db.close()
    # life 2: b1 re-sent (a duplicate), then the crash while the graph g2 is stored
    db = Database(shards=1, data_dir=data)
    m = StreamManager(db, data_dir=data)
    try:
        again = m.ingest_ndjson("s", _batch(1), batch_id="b1")
        assert again["duplicate"] is True and again["accepted"] == 0, again
        assert again["original"] == {"accepted": 50, "rejected": 0}
        assert m.stream("s")["accepted"] == 0
        real = _crash_at(monkeypatch, "g2")
        with pytest.raises(_CrashHere):
            m.ingest_graph("s", nt, "application/n-triples", 2000, batch_id="g2")
        monkeypatch.setattr(BatchLedger, "record", real)
    finally:
        m.close()
        db.close()
    # life 3: g2 re-sent (a duplicate); every instant as without the crashes
    db = Database(shards=1, data_dir=data)
    m = StreamManager(db, data_dir=data)
    try:
        g = m.ingest_graph("s", nt, "application/n-triples", 2000, batch_id="g2")
        assert g["duplicate"] is True and g["original"] == {"accepted": 1, "rejected": 0}, g
        assert m.ingest_ndjson("s", _batch(1), batch_id="b1")["duplicate"] is True
        assert m.stream("s")["accepted"] == 0   # nothing stored after the restarts
        m.heartbeat("s", 3001)
        assert m.drain(30)
        got = {e.id: orjson.loads(e.data) for e in m.log("c").since(None, from_t=-1) if e.event == "result"}
    finally:
        m.close()
        db.close()
    mr = StreamManager(Database(shards=1))
    try:
        mr.register_stream("s", EX + "s")
        mr.register_query(CNT_Q)
        mr.ingest_ndjson("s", _batch(0))
        mr.ingest_ndjson("s", _batch(1))
        mr.ingest_graph("s", nt, "application/n-triples", 2000)
        mr.heartbeat("s", 3001)
        assert mr.drain(30)
        ref = {e.id: orjson.loads(e.data) for e in mr.log("c").since(None, from_t=-1) if e.event == "result"}
    finally:
        mr.close()
    assert got == ref and sorted(ref) == [0, 1000, 2000, 3000]


def test_journal_records_without_a_batch_id_replay_as_before(tmp_path):
    """Records written without a batch id (and files written before ids were kept) replay with
    ``batch_id`` None; a record's id and outcome come back as written."""
    import numpy as np
    import pyarrow as pa

    from engine.stream.window_journal import WindowJournal
    j = WindowJournal(str(tmp_path))
    keys = [pa.array([f"<{EX}a>"] * 2)] * 3
    j.record("s", keys, np.array([1, 2]), None)
    j.record("s", keys, np.array([3, 4]), None, None, "id-1", (2, 5))
    j.record("s", keys, np.array([5, 6]), None, None, "id-2")
    j.close()
    got = [(b.batch_id, b.outcome, b.t.tolist()) for b in WindowJournal(str(tmp_path)).replay("s")]
    assert got == [(None, None, [1, 2]), ("id-1", (2, 5), [3, 4]), ("id-2", None, [5, 6])]


# ------------------------------------------------------------------ a locked server used the wrong way

def test_posts_tickets_and_webhooks_used_the_wrong_way(tmp_path):
    """Under --token/--read-token with a short ticket TTL and one allowed webhook prefix: what
    users get wrong about stream times, tickets and webhook destinations gets a clear answer,
    and a failing endpoint still gets every instant once, in order, with its key."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.pipeline_support import free_port, wait_for

    got: list[tuple[str, str]] = []
    fail = {"n": 3}

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            self.rfile.read(int(self.headers.get("content-length", 0)))
            if fail["n"] > 0:
                fail["n"] -= 1
                self.send_response(503)
            else:
                got.append((self.path, self.headers.get("Idempotency-Key")))
                self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    hp = free_port()
    hook = ThreadingHTTPServer(("127.0.0.1", hp), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    W, R = {"Authorization": "Bearer W"}, {"Authorization": "Bearer R"}
    srv = Server(tmp_path, None, ["--token", "W", "--read-token", "R", "--ticket-ttl", "2", "--webhook-allow",
                                  f"http://127.0.0.1:{hp}/hooks/", "--sink-retry-max", "1"])
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s"}, headers=W).status_code == 201
            for q in ("q", "q2"):
                r = c.post("/queries", content=f"REGISTER QUERY {q} AS SELECT ?o FROM STREAM <{EX}s> [RANGE 2s STEP 1s] "
                           f"WHERE {{ ?x <{EX}p> ?o }}", headers={**W, **SPARQL_Q})
                assert r.status_code == 201, r.text
            nt = {**W, "Content-Type": "application/n-triples"}
            body = f"<{EX}a> <{EX}p> <{EX}b> .\n".encode()
            # stream times: a graph without ?t, or with a time that is not integer ms, changes nothing
            for qs in ("", "?t=", "?t=abc", "?t=-1", "?t=1.5", "?t=2026-11-27T12:00:00Z", "?t=1000&t=2000"):
                r = c.post("/streams/s" + qs, content=body, headers=nt)
                assert r.status_code == 400 and r.json()["error"] == "bad_request", (qs, r.text)
                assert "'t'" in r.text or "?t=" in r.text, (qs, r.text)
            assert c.get("/streams/s", headers=R).json()["progress"] is None
            assert c.post("/streams/s?t=1000", content=body, headers=nt).status_code == 202
            r = c.post("/streams/s?t=500", content=body, headers=nt)
            assert r.status_code == 422 and r.json()["error"] == "late_element"
            nd = {**W, **NDJSON}
            r = c.post("/streams/s", content=orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": f"<{EX}b>"}), headers=nd)
            assert r.status_code == 400 and r.json()["error"] == "missing_time"
            lines = [{"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"ok1"', "t": 1500},
                     {"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"no t"'},
                     {"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"str"', "t": "1600"},
                     {"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"float"', "t": 1700.0},
                     {"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"neg"', "t": -5},
                     {"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"late"', "t": 900},
                     {"s": f"<{EX}a>", "p": f"<{EX}p>", "o": '"ok2"', "t": 1800}]
            r = c.post("/streams/s", content=b"\n".join(orjson.dumps(x) for x in lines), headers=nd)
            assert r.status_code == 207, r.text
            doc = r.json()
            assert (doc["accepted"], doc["rejected"], doc["progress"]) == (2, 5, 1800)
            assert [e["line"] for e in doc["errors"]] == [2, 3, 4, 5, 6]
            # tickets: one query, until they expire, void once the query is deleted
            assert c.post("/queries/q/tickets").status_code == 401
            tk = c.post("/queries/q/tickets", headers=R).json()["ticket"]

            def opens(url, headers=None) -> int:
                with c.stream("GET", url, headers=headers) as r:
                    return r.status_code
            assert opens(f"/queries/q/results?ticket={tk}") == 200
            assert opens(f"/queries/q/results?ticket={tk}") == 200   # EventSource reconnects with it
            assert opens(f"/queries/q2/results?ticket={tk}") == 401
            assert opens(f"/queries/q/results?ticket={tk}&ticket={tk}") == 401
            assert opens(f"/queries/q/results?ticket={tk[:-1]}") == 401
            assert opens("/queries/q/results?access_token=R") == 401
            tk2 = c.post("/queries/q/tickets", headers=R).json()["ticket"]
            assert c.delete("/queries/q", headers=W).status_code in (200, 204)
            assert c.post("/queries", content=f"REGISTER QUERY q AS SELECT ?o FROM STREAM <{EX}s> [RANGE 2s STEP 1s] "
                          f"WHERE {{ ?x <{EX}p> ?o }}", headers={**W, **SPARQL_Q}).status_code == 201
            assert opens(f"/queries/q/results?ticket={tk2}") == 401
            time.sleep(2.2)   # --ticket-ttl 2
            tk3 = c.post("/queries/q2/tickets", headers=R).json()["ticket"]
            assert opens(f"/queries/q2/results?ticket={tk}") == 401    # expired
            assert opens(f"/queries/q2/results?ticket={tk3}") == 200
            # webhooks: only the operator's prefix, spelled one way
            for url in ("http://evil.example/hooks/x", f"http://127.0.0.1:{hp}/other", f"http://localhost:{hp}/hooks/x",
                        f"http://127.0.0.1:{hp}/hooks/../x", f"http://127.0.0.1:{hp}/hooks/%2e%2e/x",
                        f"http://0x7f.0.0.1:{hp}/hooks/x", f"http://user@127.0.0.1:{hp}/hooks/x"):
                r = c.put("/queries/q2/sinks", json={"sinks": [{"type": "webhook", "url": url}]}, headers=W)
                assert r.status_code == 400 and r.json()["error"] == "bad_sink", (url, r.text)
            r = c.put("/queries/q2/sinks", json={"sinks": [{"type": "nats", "server": "nats://127.0.0.1:4222",
                                                            "subject": "x"}]}, headers=W)
            assert r.status_code == 400
            r = c.put("/queries/q2/sinks", json={"sinks": [{"name": "h", "type": "webhook",
                                                            "url": f"http://127.0.0.1:{hp}/hooks/x"}]}, headers=W)
            assert r.status_code == 200, r.text
            rows = b"\n".join(orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": f'"v{k}"', "t": 3000 + k * 1000})
                              for k in range(5))
            assert c.post("/streams/s", content=rows, headers=nd).status_code == 202
            assert c.post("/streams/s/progress?t=9000", headers=W).status_code == 200
            wait_for(lambda: len(got) >= 7, 60, "the webhook deliveries")
            time.sleep(1)
            keys = [k for _, k in got]
            assert keys == [f"q2:{t}" for t in range(2000, 9000, 1000)], keys   # each once, in order
            st = c.get("/queries/q2/sinks", headers=R).json()["sinks"][0]
            assert st["retries"] >= 3 and st["delivered"] == 7 and st["failed"] == 0
    finally:
        srv.stop()
        hook.shutdown()


# ------------------------------------------------------------------ NATS: exactly once past the duplicate window

@pytest.mark.parametrize("last", ["ours", "unreadable", "foreign"])
def test_nats_restart_after_the_duplicate_window_publishes_no_instant_twice(tmp_path, monkeypatch, last):
    """A crash between a publish and the record of the sink's progress, and a restart that
    takes longer than the JetStream stream's duplicate window (2 minutes by default; 1 s here):
    JetStream no longer drops the re-published id, so before the fix the subject held that
    instant twice. The restored sink reads the subject's last message first and skips what is
    there. Where that message cannot be read (credentials that may only publish), or is a
    message of an earlier query of the same name (its id, not its data), the sink skips nothing
    and delivers everything (the duplicate window is then the only guard)."""
    import asyncio
    import time

    from engine.stream import resultstore
    from engine.stream.resultlog import ResultLog
    from engine.stream.resultstore import ResultStore
    from engine.stream.sinks import SinkPolicy, Sinks
    from tests.pipeline_support import Nats, wait_for

    try:
        nats_srv = Nats(tmp_path)
    except FileNotFoundError as e:
        pytest.skip(str(e))

    async def make_stream():
        import nats
        from nats.js.api import StreamConfig
        nc = await nats.connect(nats_srv.url)
        try:
            await nc.jetstream().add_stream(StreamConfig(name="JQ", subjects=["jindou.q"], duplicate_window=1.0))
        finally:
            await nc.close()

    def published():
        return _messages(nats_srv.url, "JQ", "jindou.q")

    try:
        asyncio.run(make_stream())
        data = str(tmp_path / "data")
        policy = SinkPolicy.of(nats_allow=nats_srv.url, retry_max_s=0.5, timeout_s=5)
        rlog = ResultLog(retain=100, step=1000)
        store = ResultStore(data)
        sinks = Sinks(store, policy)
        spec = [{"name": "bus", "type": "nats", "server": nats_srv.url, "subject": "jindou.q", "stream": "JQ"}]
        sinks.put("q", rlog, spec)
        real = ResultStore.delivered

        def dies(self, query, name, upto):
            if upto == 3000:   # published, then the process "dies" before recording it
                raise RuntimeError("the process dies here")
            return real(self, query, name, upto)
        monkeypatch.setattr(resultstore.ResultStore, "delivered", dies)
        for t in (1000, 2000, 3000, 4000):
            rlog.append(t, orjson.dumps({"instant": t}))
        wait_for(lambda: sinks.status("q")[0]["state"] == "failed", 30, "the sink to stop at 3000")
        sinks.close()
        store.close()
        monkeypatch.setattr(resultstore.ResultStore, "delivered", real)
        assert asyncio.run(published()) == ["q:1000", "q:2000", "q:3000"]
        time.sleep(1.5)   # the restart takes longer than the duplicate window
        if last == "foreign":   # an earlier registration of the name published a later instant
            async def foreign():
                import nats
                nc = await nats.connect(nats_srv.url)
                try:
                    await nc.jetstream().publish("jindou.q", b"{}", headers={"Nats-Msg-Id": "q:9000"})
                finally:
                    await nc.close()
            asyncio.run(foreign())
        if last == "unreadable":
            from engine.stream.sinks import NatsSink

            async def refused(self):
                raise PermissionError("no permission for $JS.API.STREAM.MSG.GET")
            monkeypatch.setattr(NatsSink, "_last_published", refused)
        store = ResultStore(data)
        sinks = Sinks(store, policy)
        sinks.start(policy, lambda q: rlog if q == "q" else None)
        rlog.append(5000, orjson.dumps({"instant": 5000}))
        wait_for(lambda: sinks.status("q")[0]["last_delivered"] == 5000, 30, "the deliveries after the restart")
        st = sinks.status("q")[0]
        sinks.close()
        store.close()
        again = {"ours": [], "unreadable": ["q:3000"], "foreign": ["q:9000", "q:3000"]}[last]
        assert asyncio.run(published()) == [f"q:{t}" for t in (1000, 2000, 3000)] + again + ["q:4000", "q:5000"]
        assert st["duplicates"] == (1 if last == "ours" else 0) and st["failed"] == 0
    finally:
        nats_srv.stop()


def test_a_heartbeat_lost_in_a_crash_still_holds_back_late_elements(tmp_path, monkeypatch):
    """The registry persists progress every ``progress_sync_s``; a crash right after a heartbeat
    lost it, and the restored progress was the last element's time: an element below the lost
    heartbeat was then taken (202) and entered windows of instants after the restart that a run
    without the crash never had it in. A durable log holding instant L proves progress > L."""
    from engine.database import Database
    from engine.stream.manager import StreamManager
    from engine.stream.registry import Registry

    data = str(tmp_path / "data")
    q = f"REGISTER QUERY w AS SELECT ?o FROM STREAM <{EX}s> [RANGE 10s STEP 1s] WHERE {{ ?x <{EX}p> ?o }}"

    def el(o: str, t: int) -> bytes:
        return orjson.dumps({"s": f"<{EX}a>", "p": f"<{EX}p>", "o": f'"{o}"', "t": t})
    db = Database(shards=1, data_dir=data)
    m = StreamManager(db, data_dir=data)
    try:
        m.register_stream("s", EX + "s")
        m.register_query(q)
        m.ingest_ndjson("s", el("first", 500))
        m.sync_registry()
        monkeypatch.setattr(Registry, "persist", lambda self: None)   # the crash loses what follows
        assert m.heartbeat("s", 5001) == 5001
        assert m.drain(30)
        assert m.log("w").last_id == 5000
        assert m.ingest_ndjson("s", el("late", 3000))["rejected"] == 1
    finally:
        m.close()
        db.close()
    monkeypatch.undo()
    db = Database(shards=1, data_dir=data)
    m = StreamManager(db, data_dir=data)
    try:
        assert m.stream("s")["progress"] == 5001
        r = m.ingest_ndjson("s", el("late", 3000))
        assert r["accepted"] == 0 and "late element" in r["errors"][0]["error"], r
        m.heartbeat("s", 6001)
        assert m.drain(30)
        (ev,) = [e for e in m.log("w").since(5000) if e.event == "result"]
        assert [b["o"]["value"] for b in orjson.loads(ev.data)["results"]["bindings"]] == ["first"]
    finally:
        m.close()
        db.close()
