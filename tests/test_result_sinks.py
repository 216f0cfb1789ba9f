"""Result sinks on a real server: a webhook to a real local HTTP receiver (refused destinations,
failures then recovery, exactly once per instant id across a SIGKILL restart) and a NATS
JetStream subject on a real nats-server -js (exactly once, checked by a JetStream consumer)."""

from __future__ import annotations

import asyncio
import signal

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.stream import sinks as sinks_mod
from engine.stream.sinks import SinkPolicy, SinkRefused, parse_sinks
from tests.pipeline_support import Nats, Server, wait_for
from tests.support.http_listener import PostRecorder, closed_port
from tests.test_results_durable import _feed, _setup

EX = "http://ex.org/"


def _sink(c: httpx.Client, name: str = "hook") -> dict:
    return {s["name"]: s for s in c.get("/queries/q/sinks").json()["sinks"]}[name]


def test_allow_list_rules():
    p = SinkPolicy.of("https://hooks.example:8443/jindou/, http://127.0.0.1:9000/a", "nats://127.0.0.1:4222")
    ok = parse_sinks({"sinks": [{"type": "webhook", "url": "https://hooks.example:8443/jindou/q1"},
                                {"type": "webhook", "url": "http://127.0.0.1:9000/a/b"},
                                {"type": "nats", "server": "127.0.0.1:4222", "subject": "r.q"}]}, p)
    assert [s.name for s in ok] == ["webhook-0", "webhook-1", "nats-2"]
    assert ok[2].server == "nats://127.0.0.1:4222"
    for url in ("https://hooks.example/jindou/q1",          # other port
                "http://hooks.example:8443/jindou/q1",      # other scheme
                "https://hooks.example:8443/other",         # outside the path prefix
                "http://127.0.0.1:9000/ab",                 # a prefix without "/" ends at a segment
                "https://user@hooks.example:8443/jindou/",  # user info
                "https://evil.example:8443/jindou/",
                "file:///etc/passwd", "ftp://127.0.0.1:9000/a"):
        with pytest.raises(SinkRefused):
            parse_sinks([{"type": "webhook", "url": url}], p)
    for bad in ([{"type": "nats", "server": "127.0.0.1:4223", "subject": "r.q"}],
                [{"type": "nats", "server": "127.0.0.1:4222", "subject": "r.*"}],
                [{"type": "smtp"}], [{"type": "webhook", "url": "http://127.0.0.1:9000/a", "x": 1}],
                [{"type": "webhook", "name": "a", "url": "http://127.0.0.1:9000/a"}] * 2, "no"):
        with pytest.raises(SinkRefused):
            parse_sinks(bad, p)
    with pytest.raises(SinkRefused, match="--webhook-allow"):
        parse_sinks([{"type": "webhook", "url": "http://127.0.0.1:9000/a"}], SinkPolicy())
    assert SinkPolicy.of("127.0.0.1:9000/a, ftp://h/, https://ok:1/", "http://x:1, 127.0.0.1:4222").webhook_allow \
        == ("https://ok:1/",)
    assert SinkPolicy.of("", "http://x:1, 127.0.0.1:4222").nats_allow == ("127.0.0.1:4222",)


def test_webhook_exactly_once_through_failures_and_a_crash(tmp_path):
    rec = PostRecorder(fail_next=3)   # down for the first three tries, then up
    data = tmp_path / "data"
    allow = ["--webhook-allow", rec.url + "/hooks/", "--sink-retry-max", "0.5"]
    srv = Server(tmp_path, data, args=allow)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            # refused destinations: a clear 400, and nothing reaches them
            for url in (rec.url + "/other", f"http://127.0.0.1:{closed_port()}/hooks/x", "http://[::1]/hooks/"):
                r = c.put("/queries/q/sinks", json={"sinks": [{"type": "webhook", "url": url}]})
                assert r.status_code == 400 and r.json()["error"] == "bad_sink", r.text
                assert "--webhook-allow" in r.json()["detail"] or "http" in r.json()["detail"]
            assert c.put("/queries/q/sinks", content=b"{", headers={"Content-Type": "application/json"}
                         ).status_code == 400
            assert c.put("/queries/nope/sinks", json={"sinks": []}).status_code == 404
            r = c.put("/queries/q/sinks", json={"sinks": [{"name": "hook", "type": "webhook",
                                                           "url": rec.url + "/hooks/q"}]})
            assert r.status_code == 200, r.text
            assert r.json()["sinks"][0]["state"] == "running"
            _feed(c, 0, 4)   # instants 1000..5000
            wait_for(lambda: _sink(c)["last_delivered"] == 5000, 60, "the webhook deliveries")
            st = _sink(c)
            assert st["retries"] == 3 and st["delivered"] == 5 and st["failed"] == 0 and st["dropped"] == 0
        acc = rec.accepted()
        assert sorted(acc) == [f"q:{t}" for t in (1000, 2000, 3000, 4000, 5000)]
        assert all(len(b) == 1 for b in acc.values())   # each instant taken exactly once
        ok = [p for p in rec.posts if p["status"] == 200]
        assert [p["headers"]["x-jindou-instant"] for p in ok] == ["1000", "2000", "3000", "4000", "5000"]
        assert ok[0]["path"] == "/hooks/q" and ok[0]["headers"]["content-type"] == "application/json"
        doc = orjson.loads(ok[1]["body"])
        assert doc["window"] and [b["o"]["value"] for b in doc["results"]["bindings"]] == ["v0", "v1"]
        # the three failed tries carried the same key as the first accepted one
        assert [p["headers"]["idempotency-key"] for p in rec.posts[:4]] == ["q:1000"] * 4
    finally:
        srv.stop(signal.SIGKILL)

    srv = Server(tmp_path, data, args=allow)   # the sink and its progress come back
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert _sink(c)["last_delivered"] == 5000
            _feed(c, 5, 6)   # instants 6000, 7000
            wait_for(lambda: _sink(c)["last_delivered"] == 7000, 60, "deliveries after the restart")
        acc = rec.accepted()
        assert sorted(acc) == [f"q:{t}" for t in range(1000, 8000, 1000)]
        assert all(len(b) == 1 for b in acc.values())   # nothing resent, nothing skipped
    finally:
        srv.stop()
        rec.close()


def test_a_down_webhook_never_holds_evaluation_back(tmp_path):
    port = closed_port()
    srv = Server(tmp_path, None, args=["--webhook-allow", f"http://127.0.0.1:{port}/", "--retain", "3",
                                       "--sink-retry-max", "0.2"])
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            r = c.put("/queries/q/sinks", json={"sinks": [{"name": "hook", "type": "webhook",
                                                           "url": f"http://127.0.0.1:{port}/x"}]})
            assert r.status_code == 200
            _feed(c, 0, 9)   # instants 1000..10000 while nobody listens
            wait_for(lambda: c.get("/queries/q").json()["next_instant"] == 11_000, 60, "evaluation")
            wait_for(lambda: _sink(c)["retries"] >= 2, 30, "retries")
            st = _sink(c)
            assert st["state"] == "retrying" and st["last_error"] == "cannot connect" and st["delivered"] == 0
            # the receiver comes up on that port: the sink resumes; what the log dropped is counted
            rec = PostRecorder(port=port)
            try:
                wait_for(lambda: _sink(c)["last_delivered"] == 10_000, 60, "delivery after recovery")
                st = _sink(c)
                keys = sorted(rec.accepted(), key=lambda k: int(k.split(":")[1]))
                # the retained tail arrives (and the event the sink held while retrying, if it had
                # read one before the log moved past it); everything else is counted as dropped,
                # also what the log dropped before the sink first read it
                assert keys[-3:] == ["q:8000", "q:9000", "q:10000"]
                assert st["delivered"] == len(keys) and st["delivered"] + st["dropped"] == 10
                # the same counters in /metrics, per query and sink
                got = {(m.name, s.name): s.value for m in text_string_to_metric_families(c.get("/metrics").text)
                       for s in m.samples if s.labels.get("query") == "q" and s.labels.get("sink") == "hook"}
                assert got[("jindou_sink_deliveries", "jindou_sink_deliveries_total")] == st["delivered"]
                assert got[("jindou_sink_dropped", "jindou_sink_dropped_total")] == st["dropped"]
                assert got[("jindou_sink_retries", "jindou_sink_retries_total")] >= 2
                assert got[("jindou_sink_backlog", "jindou_sink_backlog")] == 0
            finally:
                rec.close()
    finally:
        srv.stop()


async def _consume(url: str, stream: str) -> list[tuple[str, bytes]]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        n = info.state.messages
        sub = await js.pull_subscribe("jindou.q", durable=None, stream=stream)
        out = []
        while len(out) < n:
            for msg in await sub.fetch(n - len(out), timeout=5):
                out.append((msg.headers["Nats-Msg-Id"], msg.data))
                await msg.ack()
        return out
    finally:
        await nc.close()


def test_nats_jetstream_exactly_once(tmp_path):
    try:
        nats_srv = Nats(tmp_path)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    data = tmp_path / "data"
    allow = ["--nats-allow", nats_srv.url]
    srv = Server(tmp_path, data, args=allow)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            r = c.put("/queries/q/sinks", json={"sinks": [{"type": "nats", "server": "nats://127.0.0.1:1",
                                                           "subject": "jindou.q"}]})
            assert r.status_code == 400 and "--nats-allow" in r.json()["detail"]
            r = c.put("/queries/q/sinks", json={"sinks": [{"name": "bus", "type": "nats", "server": nats_srv.url,
                                                           "subject": "jindou.q", "stream": "JQ"}]})
            assert r.status_code == 200, r.text
            _feed(c, 0, 3)   # 1000..4000
            wait_for(lambda: _sink(c, "bus")["last_delivered"] == 4000, 60, "the NATS publishes")
        srv.stop(signal.SIGKILL)
        srv = Server(tmp_path, data, args=allow)
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _feed(c, 4, 5)   # 5000, 6000
            wait_for(lambda: _sink(c, "bus")["last_delivered"] == 6000, 60, "publishes after the restart")
            assert _sink(c, "bus")["failed"] == 0
            msgs = asyncio.run(_consume(nats_srv.url, "JQ"))
        assert [k for k, _ in msgs] == [f"q:{t}" for t in range(1000, 7000, 1000)]
        doc = orjson.loads(msgs[1][1])
        assert [b["o"]["value"] for b in doc["results"]["bindings"]] == ["v0", "v1"]
        # a re-sent id (a crash between the publish and the commit of the progress) is dropped
        # by JetStream: publish instant 2000 again with its id and count the stream
        async def resend():
            import nats

            nc = await nats.connect(nats_srv.url)
            try:
                ack = await nc.jetstream().publish("jindou.q", msgs[1][1], headers={"Nats-Msg-Id": "q:2000"})
                return ack.duplicate, (await nc.jetstream().stream_info("JQ")).state.messages
            finally:
                await nc.close()
        assert asyncio.run(resend()) == (True, 6)
    finally:
        srv.stop()
        nats_srv.stop()


class _Recording(sinks_mod.Sink):
    """A sink that records what it is given (the accounting of the base class, no network)."""

    def __init__(self, rlog):
        super().__init__("q", sinks_mod.SinkSpec("rec", "webhook", url="http://127.0.0.1:1/x"), rlog, None,
                         sinks_mod.SinkPolicy(), None)
        self.got: list[int] = []

    def deliver(self, ev) -> bool:
        self.got.append(ev.id)
        return False


@pytest.mark.parametrize("before", [0, 2, 3, 5])
def test_events_the_log_dropped_before_a_new_sink_read_count_as_dropped(before):
    """A sink is owed what the log retains when it is set and everything after; what the log
    drops before the sink's thread first reads it is counted as dropped, however late it reads."""
    from engine.stream.resultlog import ResultLog

    rlog = ResultLog(retain=3, step=1000)
    for t in range(1, before + 1):
        rlog.append(t * 1000, b"{}")
    sink = _Recording(rlog)
    for t in range(before + 1, 11):
        rlog.append(t * 1000, b"{}")
    sink.start()
    try:
        wait_for(lambda: sink.cursor == 10_000, 30, "delivery")
    finally:
        sink.stop()
    owed = 10 - max(0, before - 3)   # retained at creation, and everything appended after
    assert sink.got == [8000, 9000, 10_000]
    assert sink.delivered + sink.dropped == owed, (sink.delivered, sink.dropped)
