"""Webhook sinks under attack: URL spellings against the operator's allow-list, names that
resolve to this machine (checked at connect time, through a test resolver: no real DNS),
redirects, huge, slow and silent destinations. Every server here listens on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

from engine.stream import webhook
from engine.stream.resultlog import ResultLog
from engine.stream.sinks import SinkPolicy, SinkRefused, WebhookSink, parse_sinks
from tests.pipeline_support import wait_for
from tests.support.http_listener import PostRecorder

ALLOW = "http://127.0.0.1:9000/a/, http://hooks.example/h/, https://hooks.example:8443/s, http://[::1]:9001/v6/"


def _url(u: str) -> str:
    return parse_sinks([{"type": "webhook", "url": u}], SinkPolicy.of(ALLOW))[0].url


@pytest.mark.parametrize("url,normal", [
    ("http://127.0.0.1:9000/a/x", "http://127.0.0.1:9000/a/x"),
    ("HTTP://HOOKS.Example/h/x", "http://hooks.example/h/x"),          # case of scheme and host
    ("http://hooks.example./h/x", "http://hooks.example/h/x"),         # one trailing dot
    ("http://hooks.example:80/h/x", "http://hooks.example/h/x"),       # the default port
    ("http://hooks.example/%68/x", "http://hooks.example/%68/x"),      # allowed as /h/x, sent as written
    ("http://hooks.example/h/a%3ab", "http://hooks.example/h/a%3ab"),
    ("https://hooks.example:8443/s", "https://hooks.example:8443/s"),
    ("https://hooks.example:8443/s/q?x=1", "https://hooks.example:8443/s/q?x=1"),
    ("http://[0:0:0:0:0:0:0:1]:9001/v6/x", "http://[::1]:9001/v6/x"),  # an IPv6 literal's spellings
])
def test_one_spelling_per_destination(url, normal):
    assert _url(url) == normal


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9000/a/x\x00", "http://127.0.0.1:9000/a/x\x7f", "http://127.0.0.1:9000/a/\x0bx",
    "http://127.0.0.1:9000/a/\u00e9",                               # characters no client sends as they are
    "http://allowed@127.0.0.1:9000/a/", "http://127.0.0.1:9000@evil/a/", "http://hooks.example\\@evil/h/",
    "http://2130706433:9000/a/", "http://0177.0.0.1:9000/a/", "http://127.1:9000/a/", "http://0x7f.0.0.1:9000/a/",
    "http://127.000.000.001:9000/a/", "http://hooks.123/h/",          # numeric last label: an IPv4 somewhere
    "http://[::ffff:127.0.0.1]:9000/a/", "http://[::127.0.0.1]:9000/a/", "http://[fe80::1%25eth0]:9001/v6/",
    "http://127.0.0.1:9000/a/../b", "http://127.0.0.1:9000/a/%2E%2e/b", "http://127.0.0.1:9000/a/x%2Fy",
    "http://127.0.0.1:9000/a/x%5cy", "http://127.0.0.1:9000/ab", "http://127.0.0.1:90000/a/",
    "http://127.0.0.1:+9000/a/", "http://127.0.0.1:9001/a/", "https://127.0.0.1:9000/a/", "ftp://127.0.0.1:9000/a/",
    "http://127.0.0.1:9000/a/#frag", "http://hooks.example.evil/h/", "http://evil.hooks.example/h/",
    "http://hooks.example/h", "//hooks.example/h/", "http:/hooks.example/h/", "http://hooks.example/h/a b",
    "http://hooks.example/h/a{b}", "https://hooks.example:8443/sx", "x" * 3000, 7, None,
])
def test_refused_spellings(url):
    with pytest.raises(SinkRefused) as e:
        _url(url)
    assert "Traceback" not in str(e.value) and "position" not in str(e.value)


def test_allow_list_entries_use_the_same_parser(caplog):
    p = SinkPolicy.of("http://HOOKS.example.:80/h/, http://2130706433/, http://u@h/, http://h/?q=1, "
                      "http://[::1]:9001/v6/")
    assert p.webhook_allow == ("http://HOOKS.example.:80/h/", "http://[::1]:9001/v6/")
    assert _ok(p, "http://hooks.example/h/x") and _ok(p, "http://[0::1]:9001/v6/")


def _ok(p: SinkPolicy, url: str) -> bool:
    try:
        parse_sinks([{"type": "webhook", "url": url}], p)
        return True
    except SinkRefused:
        return False


@pytest.mark.parametrize("server,normal", [
    ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"), ("127.0.0.1", "nats://127.0.0.1:4222"),
    ("NATS://Bus.Example.:4222", "nats://bus.example:4222"), ("nats://[0:0::1]:4223", "nats://[::1]:4223"),
    ("[::1]:4223", "nats://[::1]:4223"),   # an IPv6 server kept in brackets (nats://::1:4223 is no address)
    ("nats://u:p@127.0.0.1:4222", None), ("nats://127.0.0.1:4222@evil:4222", None), ("nats://2130706433:4222", None),
    ("nats://127.0.0.1:4222/x", None), ("http://127.0.0.1:4222", None), ("tls://127.0.0.1:4222", None),
    ("nats://127.0.0.1:0", None), ("nats://127.0.0.1:4222\x00", None), ("nats://[::ffff:127.0.0.1]:4222", None),
])
def test_nats_servers_have_one_spelling(server, normal):
    p = SinkPolicy.of(None, "nats://127.0.0.1:4222, nats://bus.example:4222, nats://[::1]:4223")
    if normal is None:
        with pytest.raises(SinkRefused):
            p.check_nats(server)
    else:
        assert p.check_nats(server) == normal


@pytest.mark.parametrize("addr,why", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"), ("::", "unspecified"), ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::7f00:1", "loopback"), ("2002:7f00:1::", "loopback"), ("::127.0.0.1", "loopback"),
    ("240.0.0.1", "reserved"), ("fec0::1", "site-local"),
    ("93.184.216.34", None), ("10.1.2.3", None), ("2001:db8::1", None), ("::ffff:93.184.216.34", None),
])
def test_address_policy_for_names(addr, why):
    assert webhook.address_refusal(addr) == why


# -- sinks on real local servers -------------------------------------------------------------------
def _log(n: int = 3) -> ResultLog:
    rlog = ResultLog(retain=100, step=1000)
    for k in range(1, n + 1):
        rlog.append(k * 1000, b'{"k": %d}' % k)
    return rlog


def _sink(policy: SinkPolicy, url: str, rlog: ResultLog, name: str = "hook") -> WebhookSink:
    spec = parse_sinks([{"name": name, "type": "webhook", "url": url}], policy)[0]
    s = WebhookSink("q", spec, rlog, None, policy, None)
    s.start()
    return s


class _Resolver:
    """A test resolver: names to addresses, counting the lookups (no real DNS)."""

    def __init__(self, table: dict[str, list[str]]):
        self.table, self.calls = table, []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return self.table[host]


def test_a_name_resolving_to_loopback_is_refused_at_connect():
    """Registration cannot know what a name resolves to when the sink connects (DNS rebinding):
    the check runs at every attempt, and the receiver on this machine never hears a thing."""
    rec = PostRecorder()
    port = rec.srv.server_address[1]
    res = _Resolver({"hooks.test": ["127.0.0.1"]})
    p = SinkPolicy.of(f"http://hooks.test:{port}/h/", retry_max_s=0.1, resolve=res)
    s = _sink(p, f"http://hooks.test:{port}/h/q", _log())
    try:
        wait_for(lambda: s.retries >= 2, 30, "refused attempts")
        assert s.delivered == 0 and rec.posts == []
        assert s.status()["state"] == "retrying" and "loopback" in s.last_error
        assert len(res.calls) >= 2           # looked up again at every attempt
        res.table["hooks.test"] = ["10.0.0.1", "::ffff:127.0.0.1"]   # one bad address is enough
        n = len(res.calls)
        wait_for(lambda: len(res.calls) > n, 30, "another attempt")
        assert "loopback" in s.last_error and rec.posts == []
    finally:
        s.stop()
        rec.close()


def test_the_connection_goes_to_the_checked_address():
    """With an address policy that lets loopback through, a name is delivered to the address the
    resolver gave (once per attempt, no second lookup), with the name in Host."""
    rec = PostRecorder()
    port = rec.srv.server_address[1]
    res = _Resolver({"hooks.test": ["127.0.0.1"]})
    p = SinkPolicy.of(f"http://hooks.test:{port}/h/", resolve=res, refuse_address=lambda a: None)
    s = _sink(p, f"http://hooks.test:{port}/h/q?x=1", _log(2))
    try:
        wait_for(lambda: s.delivered == 2, 30, "deliveries")
        assert res.calls == ["hooks.test", "hooks.test"]
        assert [(r["path"], r["headers"]["host"], r["headers"]["idempotency-key"]) for r in rec.posts] == \
            [("/h/q?x=1", f"hooks.test:{port}", "q:1000"), ("/h/q?x=1", f"hooks.test:{port}", "q:2000")]
        assert rec.posts[0]["body"] == b'{"k": 1}'
    finally:
        s.stop()
        rec.close()


def test_a_resolver_that_never_answers_costs_the_attempt_its_deadline():
    """getaddrinfo has no timeout: a DNS server that does not answer must not hold the sink past
    its attempt's deadline (and the next attempt looks the name up again)."""
    release = threading.Event()
    calls = []

    def stuck(host, port):
        calls.append(host)
        release.wait(30)
        return ["10.0.0.1"]

    p = SinkPolicy.of("http://hooks.test/h/", timeout_s=0.3, retry_max_s=0.1, resolve=stuck)
    s = _sink(p, "http://hooks.test/h/q", _log(1))
    try:
        t0 = time.monotonic()
        wait_for(lambda: s.retries >= 2, 30, "attempts that timed out")
        assert "timeout resolving the host" in s.last_error and s.delivered == 0
        assert time.monotonic() - t0 < 10 and len(calls) >= 2
    finally:
        release.set()
        s.stop()


class _Raw:
    """A raw TCP destination on 127.0.0.1 whose answer is scripted by ``answer(conn)``."""

    def __init__(self, answer):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.answer, self.conns, self.errors = answer, 0, []
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            self.answer(conn, self.stop)
        except OSError as e:
            self.errors.append(type(e).__name__)
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


def _endless_drip(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
    while not stop.is_set():
        conn.sendall(b"x")
        time.sleep(0.05)


def _huge(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n")
    chunk = b"y" * 65536
    for _ in range(4096):   # 256 MiB, unless the client hangs up first
        conn.sendall(chunk)


def _slow_head(conn, stop):
    for b in b"HTTP/1.1 200 OK\r\n\r\n":   # one byte every 0.4 s: never a status line by the deadline
        if stop.is_set():
            return
        conn.sendall(bytes([b]))
        time.sleep(0.4)


def _silent(conn, stop):
    stop.wait(60)


def _garbage(conn, stop):
    conn.sendall(b"SSH-2.0-OpenSSH\r\n" + b"z" * 100_000)


def _interim_then_ok(conn, stop):
    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX: y\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")


@pytest.mark.parametrize("answer", [_endless_drip, _huge, _interim_then_ok])
def test_answers_are_read_only_up_to_their_status(answer):
    """A 2xx status is a delivery, whatever follows it: an endless or huge body is not read."""
    dest = _Raw(answer)
    p = SinkPolicy.of(f"http://127.0.0.1:{dest.port}/", timeout_s=2.0)
    s = _sink(p, f"http://127.0.0.1:{dest.port}/x", _log(3))
    try:
        wait_for(lambda: s.delivered == 3, 30, "deliveries")
        assert s.retries == 0 and s.failed == 0
        if answer is _huge:   # the sink hung up long before the 256 MiB were written
            wait_for(lambda: len(dest.errors) == 3, 30, "the destination's failed writes")
    finally:
        s.stop()
        dest.close()


@pytest.mark.parametrize("answer,why", [(_slow_head, "timeout"), (_silent, "timeout"),
                                        (_garbage, "not HTTP")])
def test_destinations_that_never_answer_cost_bounded_retries_only(answer, why):
    """A destination that never gives a status within the deadline is retried with backoff; the
    query's other sink on the same log gets every event meanwhile."""
    dest, rec = _Raw(answer), PostRecorder()
    p = SinkPolicy.of(f"http://127.0.0.1:{dest.port}/, {rec.url}/", timeout_s=1.0, retry_max_s=0.5)
    rlog = _log(3)
    bad, good = _sink(p, f"http://127.0.0.1:{dest.port}/x", rlog, "bad"), _sink(p, rec.url + "/ok", rlog, "good")
    try:
        wait_for(lambda: good.delivered == 3, 30, "the other sink's deliveries")
        wait_for(lambda: bad.retries >= 2, 30, "retries")
        assert bad.delivered == 0 and why in bad.last_error and bad.status()["backlog"] == 3
        rlog.append(4000, b"{}")
        wait_for(lambda: good.delivered == 4, 30, "the other sink's next delivery")
        t0 = time.monotonic()
    finally:
        bad.stop()
        good.stop()
        dest.close()
        rec.close()
    assert time.monotonic() - t0 < 15   # stop is bounded by one attempt's deadline, not a hang


def test_a_redirect_is_not_followed():
    target = PostRecorder()

    def redirect(conn, stop):
        conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: " + target.url.encode()
                     + b"/stolen\r\nContent-Length: 0\r\n\r\n")

    dest = _Raw(redirect)
    p = SinkPolicy.of(f"http://127.0.0.1:{dest.port}/, {target.url}/", timeout_s=2.0)
    s = _sink(p, f"http://127.0.0.1:{dest.port}/x", _log(2))
    try:
        wait_for(lambda: s.failed == 2, 30, "refused deliveries")
        assert target.posts == [] and "redirect" in s.last_error
    finally:
        s.stop()
        dest.close()
        target.close()


def test_a_registered_destination_the_operator_no_longer_lists_is_not_contacted():
    rec = PostRecorder()
    spec = parse_sinks([{"type": "webhook", "url": rec.url + "/h/q"}], SinkPolicy.of(rec.url + "/h/"))[0]
    p = SinkPolicy.of(rec.url + "/other/", retry_max_s=0.1)
    s = WebhookSink("q", spec, _log(1), None, p, None)
    s.start()
    try:
        wait_for(lambda: s.retries >= 1, 30, "a refused attempt")
        assert rec.posts == [] and "--webhook-allow" in s.last_error
    finally:
        s.stop()
        rec.close()


# -- exactly once per instant id across a crash between the POST and its record ---------------------
class _KillingReceiver(PostRecorder):
    """Records every POST; on the POST of ``kill_key`` it SIGKILLs the server *before* answering:
    the destination has the event, the server never learns it was taken (the one crash window
    exactly-once has to cover with the idempotency key)."""

    def __init__(self, kill_key: str):
        super().__init__()
        self.kill_key, self.pid = kill_key, None
        handler = self.srv.RequestHandlerClass
        orig = handler.do_POST
        rec = self

        def do_post(h):
            if h.headers.get("Idempotency-Key") == rec.kill_key and rec.pid is not None:
                n = int(h.headers.get("Content-Length") or 0)
                body = h.rfile.read(n)
                with rec.lock:
                    rec.posts.append({"path": h.path, "headers": {k.lower(): v for k, v in h.headers.items()},
                                      "body": body, "status": 200})
                os.kill(rec.pid, signal.SIGKILL)
                rec.pid = None
                h.close_connection = True
                return
            orig(h)

        handler.do_POST = do_post


def test_a_crash_between_the_post_and_its_record_resends_that_instant_once_with_its_key(tmp_path):
    import httpx

    from tests.pipeline_support import Server
    from tests.test_results_durable import _feed, _setup

    rec = _KillingReceiver("q:3000")
    data = tmp_path / "data"
    allow = ["--webhook-allow", rec.url + "/hooks/", "--sink-retry-max", "0.5"]
    srv = Server(tmp_path, data, args=allow)
    try:
        rec.pid = srv.proc.pid
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _setup(c)
            assert c.put("/queries/q/sinks", json={"sinks": [{"name": "hook", "type": "webhook",
                                                              "url": rec.url + "/hooks/q"}]}).status_code == 200
            _feed(c, 0, 4)   # instants 1000..5000
        wait_for(lambda: srv.proc.poll() is not None, 60, "the server killed by the receiver")
    finally:
        srv.stop(signal.SIGKILL)
    srv = Server(tmp_path, data, args=allow)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            def sink():
                return c.get("/queries/q/sinks").json()["sinks"][0]
            wait_for(lambda: sink()["last_delivered"] == 5000, 60, "deliveries after the restart")
    finally:
        srv.stop()
        rec.close()
    keys = [p["headers"]["idempotency-key"] for p in rec.posts]
    assert keys == ["q:1000", "q:2000", "q:3000", "q:3000", "q:4000", "q:5000"]
    twice = [p for p in rec.posts if p["headers"]["idempotency-key"] == "q:3000"]
    assert twice[0]["body"] == twice[1]["body"] and twice[1]["headers"]["x-jindou-instant"] == "3000"
    assert {k: len(v) for k, v in rec.accepted().items()} == {f"q:{t}": 1 for t in (1000, 2000, 4000, 5000)} | \
        {"q:3000": 2}   # a receiver deduplicating by Idempotency-Key takes each instant once


# -- NATS: the allow-list holds across reconnects -------------------------------------------------
class _FakeNats(_Raw):
    """A listener on 127.0.0.1 speaking the first lines of the NATS protocol: INFO (naming another
    server in ``connect_urls``, as a cluster member does), PONG to the client's PING, then it
    closes the connection, so the client reconnects."""

    def __init__(self, other_port: int):
        self.other = other_port
        super().__init__(None)

    def _one(self, conn):
        import json

        try:
            conn.settimeout(5)
            info = {"server_id": "fake", "version": "2.10.0", "go": "go1", "host": "127.0.0.1",
                    "port": self.port, "max_payload": 1 << 20, "proto": 1, "headers": True,
                    "connect_urls": [f"127.0.0.1:{self.other}"]}
            conn.sendall(b"INFO " + json.dumps(info).encode() + b"\r\n")
            data = b""
            while b"PING" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            conn.sendall(b"PONG\r\n")
            time.sleep(0.2)
        except OSError:
            pass
        finally:
            conn.close()


def test_a_nats_sink_never_follows_a_server_to_unlisted_servers():
    other = _Raw(lambda conn, stop: None)    # the server a hostile or misconfigured INFO names
    fake = _FakeNats(other.port)
    p = SinkPolicy.of(None, f"nats://127.0.0.1:{fake.port}", timeout_s=1.0, retry_max_s=0.2)
    spec = parse_sinks([{"name": "bus", "type": "nats", "server": f"127.0.0.1:{fake.port}", "subject": "r.q"}],
                       p)[0]
    from engine.stream.sinks import NatsSink

    s = NatsSink("q", spec, _log(1), None, p, None)
    s.start()
    try:
        wait_for(lambda: fake.conns >= 4, 60, "reconnections")
        assert other.conns == 0 and s.delivered == 0
    finally:
        s.stop()
        fake.close()
        other.close()
