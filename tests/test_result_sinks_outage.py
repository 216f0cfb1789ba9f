"""Result sinks through destination outages, on real servers: a real ``nats-server -js`` stopped
mid-stream and started again (same port, same JetStream store), and a real webhook receiver that
answers 500s, then goes away (a closed port), then comes back. In the end every instant id is at
the destination exactly once (JetStream's Nats-Msg-Id dedup window plus the sink's retries with
backoff; the webhook's Idempotency-Key), and the sink's status and /metrics show the retries."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.pipeline_support import Server, free_port, wait_for
from tests.support.http_listener import PostRecorder
from tests.test_results_durable import _feed, _setup


def _sink(c: httpx.Client, name: str) -> dict:
    return {s["name"]: s for s in c.get("/queries/q/sinks").json()["sinks"]}[name]


def _metrics(c: httpx.Client, sink: str) -> dict[str, float]:
    return {s.name: s.value for m in text_string_to_metric_families(c.get("/metrics").text)
            for s in m.samples if s.labels.get("query") == "q" and s.labels.get("sink") == sink}


class NatsProcess:
    """A real nats-server with JetStream that can be stopped and started again on the same port
    and store directory (its streams and their dedup state survive)."""

    def __init__(self, tmp: Path):
        self.exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not os.path.exists(self.exe):
            raise FileNotFoundError("nats-server is not installed (Debian package nats-server)")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.store = tmp / f"nats-{self.port}"
        self.store.mkdir()
        self.log = open(tmp / f"nats-{self.port}.log", "ab")
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, fresh: bool = False) -> None:
        """``fresh``: with a new, empty store directory (a server that lost its JetStream state)."""
        if fresh:
            self.store = self.store.with_name(self.store.name + "-fresh")
            self.store.mkdir()
        self.proc = subprocess.Popen([self.exe, "-js", "-a", "127.0.0.1", "-p", str(self.port),
                                      "-sd", str(self.store)], stdout=self.log, stderr=subprocess.STDOUT)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"nats-server exited with {self.proc.returncode}")
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True
        wait_for(up, 60, "nats-server to listen")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM: a clean stop; SIGKILL: the process dies (its writes are in the OS's cache)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def close(self) -> None:
        self.stop()
        self.log.close()


async def _messages(url: str, stream: str, subject: str) -> list[str]:
    """The Nats-Msg-Id of every message of the JetStream stream, in stream order."""
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        n = (await js.stream_info(stream)).state.messages
        sub = await js.pull_subscribe(subject, durable=None, stream=stream)
        out: list[str] = []
        while len(out) < n:
            for msg in await sub.fetch(n - len(out), timeout=5):
                out.append(msg.headers["Nats-Msg-Id"])
                await msg.ack()
        return out
    finally:
        await nc.close()


@contextlib.contextmanager
def _nats_bus(tmp_path):
    """A real ``nats-server -js`` and a Jindou server whose query ``q`` publishes to the subject
    ``jindou.q`` of JetStream stream ``JQ`` (sink ``bus``); yields (NATS server, client)."""
    try:
        nats_srv = NatsProcess(tmp_path)
    except FileNotFoundError as e:
        pytest.skip(str(e))
    srv = Server(tmp_path, tmp_path / "data", args=["--nats-allow", nats_srv.url, "--sink-retry-max", "0.5"])
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            r = c.put("/queries/q/sinks", json={"sinks": [{"name": "bus", "type": "nats", "server": nats_srv.url,
                                                           "subject": "jindou.q", "stream": "JQ"}]})
            assert r.status_code == 200, r.text
            yield nats_srv, c
    finally:
        srv.stop()
        nats_srv.close()


@pytest.mark.parametrize(("sig", "fresh"), [(signal.SIGTERM, False), (signal.SIGKILL, False),
                                           (signal.SIGTERM, True)], ids=["SIGTERM", "SIGKILL", "lost-state"])
def test_nats_server_stopped_mid_stream_and_restarted(tmp_path, sig, fresh):
    """Stopped while instants keep coming, then started again: with its JetStream store, the
    stream holds every instant once; started without it (``lost-state``), the sink (which
    reconnects from scratch after failed tries) creates its stream again and every instant it
    had not delivered is in it once."""
    with _nats_bus(tmp_path) as (nats_srv, c):
        _feed(c, 0, 2)   # 1000..3000 while the server is up
        wait_for(lambda: _sink(c, "bus")["last_delivered"] == 3000, 60, "the first publishes")
        nats_srv.stop(sig)
        _feed(c, 3, 6)   # 4000..7000 while it is down
        wait_for(lambda: _sink(c, "bus")["retries"] >= 2, 60, "retries while NATS is down")
        st = _sink(c, "bus")
        assert st["state"] == "retrying" and st["last_delivered"] == 3000, st
        assert st["last_error"] in ("cannot connect", "timeout", "publish failed"), st
        nats_srv.start(fresh)
        _feed(c, 7, 8)   # 8000, 9000 after it is back
        wait_for(lambda: _sink(c, "bus")["last_delivered"] == 9000, 90, "the publishes after the restart")
        st = _sink(c, "bus")
        assert st["state"] == "running" and st["failed"] == 0 and st["dropped"] == 0, st
        assert st["delivered"] == 9 and st["retries"] >= 2, st
        got = _metrics(c, "bus")
        assert got["jindou_sink_retries_total"] == st["retries"]
        assert got["jindou_sink_deliveries_total"] == 9 and got["jindou_sink_failures_total"] == 0
        ids = asyncio.run(_messages(nats_srv.url, "JQ", "jindou.q"))
        # every instant exactly once, in order: nothing lost while NATS was down, no duplicate of
        # a publish whose ack was lost (JetStream dropped it by its Nats-Msg-Id)
        assert ids == [f"q:{t}" for t in range(4000 if fresh else 1000, 10_000, 1000)]


def _recorder(port: int, **kw) -> tuple[PostRecorder, list[socket.socket]]:
    """A PostRecorder whose accepted connections are kept, so that going away closes them too
    (a receiver that stops closes its keep-alive connections; its handler threads would not)."""
    rec = PostRecorder(port=port, **kw)
    conns: list[socket.socket] = []
    accept = rec.srv.process_request

    def process_request(request, address):
        conns.append(request)
        accept(request, address)
    rec.srv.process_request = process_request
    return rec, conns


def _go_away(rec: PostRecorder, conns: list[socket.socket]) -> None:
    rec.close()
    for s in conns:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def test_webhook_500s_then_closed_port_then_recovery(tmp_path):
    port = free_port()
    rec, conns = _recorder(port, fail_next=3, fail_status=500)
    url = f"http://127.0.0.1:{port}/hooks/q"
    srv = Server(tmp_path, tmp_path / "data", args=["--webhook-allow", f"http://127.0.0.1:{port}/hooks/",
                                                    "--sink-retry-max", "0.3"])
    rec2 = None
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            assert c.put("/queries/q/sinks", json={"sinks": [{"name": "hook", "type": "webhook", "url": url}]}
                         ).status_code == 200
            _feed(c, 0, 1)   # 1000, 2000: the first three tries answer 500
            wait_for(lambda: _sink(c, "hook")["last_delivered"] == 2000, 60, "delivery after the 500s")
            assert _sink(c, "hook")["retries"] == 3
            _go_away(rec, conns)   # the receiver goes away: its connections and then the port closed
            _feed(c, 2, 4)   # 3000..5000
            wait_for(lambda: _sink(c, "hook")["retries"] >= 5, 60, "retries against the closed port")
            st = _sink(c, "hook")
            assert st["state"] == "retrying" and st["last_error"] in ("cannot connect", "transport error"), st
            rec2, _ = _recorder(port)   # back on the same port
            _feed(c, 5, 5)   # 6000
            wait_for(lambda: _sink(c, "hook")["last_delivered"] == 6000, 60, "delivery after recovery")
            st = _sink(c, "hook")
            assert st["delivered"] == 6 and st["failed"] == 0 and st["dropped"] == 0 and st["duplicates"] == 0, st
            got = _metrics(c, "hook")
            assert got["jindou_sink_retries_total"] == st["retries"] >= 5
            assert got["jindou_sink_deliveries_total"] == 6
        keys = [p["headers"]["idempotency-key"] for r in (rec, rec2) for p in r.posts if p["status"] == 200]
        assert keys == [f"q:{t}" for t in range(1000, 7000, 1000)]   # each once, in order
        # every try of an instant carried its key: the 500s were tries of q:1000
        assert [p["headers"]["idempotency-key"] for p in rec.posts[:4]] == ["q:1000"] * 4
    finally:
        srv.stop()
        rec.close()
        if rec2 is not None:
            rec2.close()


def test_nats_server_back_at_once_without_its_stream(tmp_path):
    """A quick restart without JetStream state: the client reconnects on its own before the next
    publish, which finds no stream (no responders); the sink creates its stream again and goes on
    (before, it retried forever)."""
    with _nats_bus(tmp_path) as (nats_srv, c):
        _feed(c, 0, 1)
        wait_for(lambda: _sink(c, "bus")["last_delivered"] == 2000, 60, "the first publishes")
        nats_srv.stop()
        nats_srv.start(fresh=True)

        async def reconnected_peer():   # the server answers again (the sink's client follows)
            import nats

            nc = await nats.connect(nats_srv.url)
            await nc.close()
        asyncio.run(reconnected_peer())
        time.sleep(4)   # nats-py's reconnect wait is 2 s: the sink's client is back
        _feed(c, 2, 4)   # 3000..5000
        wait_for(lambda: _sink(c, "bus")["last_delivered"] == 5000, 90, "the publishes after the restart")
        st = _sink(c, "bus")
        assert st["failed"] == 0 and st["dropped"] == 0 and st["delivered"] == 5, st
        # the try that found no stream says so (and created it), not a generic failure
        assert st["retries"] >= 1 and st["last_error"] == "no JetStream stream captures the subject", st
        ids = asyncio.run(_messages(nats_srv.url, "JQ", "jindou.q"))
        assert ids == ["q:3000", "q:4000", "q:5000"]
