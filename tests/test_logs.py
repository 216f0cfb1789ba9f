"""Log lines of `jindou serve` read from its stderr: one format (text or JSON) for access lines,
Jindou's own lines and uvicorn's; access lines carry method, path, status, latency and the
request id answered in X-Request-Id."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import sys
import time
import urllib.request

import pytest
import requests

from server import logs
from tests.support.processes import stop_processes
from tests.support.server_process import ROOT, free_port

TEXT_LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                       r"([\w.]+): (.*)\Z")
ACCESS_TEXT = re.compile(r"(\S+) (.+) (\d{3}) (\d+\.\d{3})ms request_id=(\S+)")


def run_server(tmp_path, *args: str) -> tuple[str, callable]:
    """Start `jindou serve` with stderr to a file; returns (url, stop) where stop() ends the
    process and returns everything it wrote."""
    port = free_port()
    out = tmp_path / f"server-{port}.log"
    f = open(out, "wb")  # noqa: SIM115 - closed by stop()
    cmd = [sys.executable, "-c", "from server.cli import main; main()", "serve", "--host", "127.0.0.1",
           "--port", str(port), "--no-progress", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def stop() -> str:
        stop_processes([proc])
        f.close()
        return out.read_text()

    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start:\n" + stop()) from None
            time.sleep(0.1)
    return url, stop


def _traffic(url: str) -> dict:
    """A few requests; returns what the log should show for them."""
    ok = requests.get(url + "/sparql", params={"query": "ASK {}"})
    bad = requests.get(url + "/sparql", params={"query": "ASK {"})
    missing = requests.get(url + "/no/such/thing")
    mine = requests.get(url + "/status", headers={"X-Request-Id": "client-id-42"})
    forged = requests.get(url + "/status", headers={"X-Request-Id": "evil\tid"})
    assert (ok.status_code, bad.status_code, missing.status_code) == (200, 400, 404)
    assert mine.headers["X-Request-Id"] == "client-id-42"
    assert forged.headers["X-Request-Id"] not in ("evil\tid", "")  # not echoed: a fresh one
    for r in (ok, bad, missing):
        assert re.fullmatch(r"[0-9a-f]{6}-[0-9a-f]+", r.headers["X-Request-Id"])
    assert len({r.headers["X-Request-Id"] for r in (ok, bad, missing, forged)}) == 4
    return {"ids": {r.headers["X-Request-Id"]: r.status_code for r in (ok, bad, missing, mine, forged)}}


def test_text_lines_one_format(tmp_path):
    url, stop = run_server(tmp_path, "--access-log")
    try:
        expect = _traffic(url)
    finally:
        out = stop()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    parsed = [TEXT_LINE.match(ln) for ln in lines]
    assert all(parsed), [ln for ln, m in zip(lines, parsed, strict=True) if not m]
    loggers = {m.group(3) for m in parsed}
    assert {"jindou.server", "jindou.access", "uvicorn.error"} <= loggers, loggers
    assert any("serving on http://127.0.0.1" in m.group(4) for m in parsed)
    access = {}
    for m in parsed:
        if m.group(3) == "jindou.access":
            a = ACCESS_TEXT.match(m.group(4))
            assert a, m.group(4)
            access[a.group(5).split()[0]] = (a.group(1), a.group(2), int(a.group(3)), float(a.group(4)))
    for rid, status in expect["ids"].items():
        method, path, st, ms = access[rid]
        assert method == "GET" and st == status and ms >= 0
    assert access["client-id-42"][1] == "/status"
    sparql = [v for v in access.values() if v[1].startswith("/sparql?query=")]
    assert sorted(v[2] for v in sparql) == [200, 400]
    # uvicorn's own access format is gone (its lines would repeat ours)
    assert "HTTP/1.1\" 200" not in out


def test_json_lines_for_shippers(tmp_path):
    url, stop = run_server(tmp_path, "--access-log", "--log-format", "json")
    try:
        expect = _traffic(url)
    finally:
        out = stop()
    docs = [json.loads(ln) for ln in out.splitlines() if ln.strip()]  # every line is one JSON object
    for d in docs:
        assert {"ts", "level", "logger", "msg"} <= set(d), d
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d["ts"])
    access = {d["request_id"]: d for d in docs if d["logger"] == "jindou.access"}
    for rid, status in expect["ids"].items():
        d = access[rid]
        assert d["method"] == "GET" and d["status"] == status and d["latency_ms"] >= 0
        assert d["client"] == "127.0.0.1" and d["bytes"] > 0
    assert any(d["logger"] == "jindou.server" and d["msg"].startswith("serving on") for d in docs)
    assert any(d["logger"].startswith("uvicorn") for d in docs)


def test_no_access_lines_unless_asked(tmp_path):
    url, stop = run_server(tmp_path)
    try:
        r = requests.get(url + "/status")
        assert r.headers["X-Request-Id"]
        # selective GET /sparql is answered in the HTTP fast lane, below the ASGI wrappers:
        # it still carries a request id, the client's own when sane
        with requests.Session() as sess:
            ids = set()
            for _ in range(3):
                r = sess.get(url + "/sparql", params={"query": "ASK { <urn:a> <urn:b> ?o }"})
                assert r.status_code == 200 and re.fullmatch(r"[0-9a-f]{6}-[0-9a-f]+", r.headers["X-Request-Id"])
                ids.add(r.headers["X-Request-Id"])
            assert len(ids) == 3
            r = sess.get(url + "/sparql", params={"query": "ASK { <urn:a> <urn:b> ?o }"},
                         headers={"X-Request-Id": "client-7"})
            assert r.headers["X-Request-Id"] == "client-7"
    finally:
        out = stop()
    assert "jindou.access" not in out and "serving on" in out


def test_lines_logged_during_a_request_carry_its_id():
    """An error logged while a request runs (an internal error's traceback) names the
    request id the client was answered with."""
    buf = io.StringIO()
    handler = logs.setup("info", "json", stream=buf)
    try:
        async def app(scope, receive, send):
            logging.getLogger("jindou.server").error("inside the handler")
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"x"})

        wrapped = logs.RequestLog(app, access=True)
        sent = []

        async def send(msg):
            sent.append(msg)

        async def receive():
            return {"type": "http.request", "body": b""}

        scope = {"type": "http", "method": "POST", "path": "/update", "query_string": b"", "headers": [],
                 "client": ("127.0.0.1", 5)}
        asyncio.run(wrapped(scope, receive, send))
    finally:
        logging.getLogger().removeHandler(handler)
    rid = dict(sent[0]["headers"])[b"x-request-id"].decode()
    docs = [json.loads(ln) for ln in buf.getvalue().splitlines()]
    inside = [d for d in docs if d["msg"] == "inside the handler"]
    assert inside and inside[0]["request_id"] == rid
    line = [d for d in docs if d["logger"] == "jindou.access"][0]
    assert (line["status"], line["method"], line["path"], line["level"]) == (500, "POST", "/update", "WARNING")
    assert logs.current_request_id() is None  # nothing leaks past the request


def test_bad_log_format_is_refused():
    with pytest.raises(ValueError):
        logs.setup("info", "xml")
    p = subprocess.run([sys.executable, "-c", "from server.cli import main; main()", "serve", "--log-format",
                        "xml"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--log-format" in p.stderr


def test_store_workers_log_in_the_servers_format(tmp_path):
    """`--workers`: the worker processes inherit the format (their lines are JSON too)."""
    url, stop = run_server(tmp_path, "--workers", "2", "--log-format", "json")
    try:
        assert requests.get(url + "/readyz").status_code == 200
    finally:
        out = stop()
    docs = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    assert sum(1 for d in docs if d["logger"] == "jindou.worker" and d["msg"].startswith("listening on")) == 2
