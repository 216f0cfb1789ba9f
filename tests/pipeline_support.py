"""Shared helpers of the pipeline tests: real server / nats-server subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: bytes | None = None, ctype: str | None = None, timeout: float = 60):
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": ctype} if ctype else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def wait_for(pred, timeout: float, what: str, every: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Server:
    """`jindou serve` in a subprocess."""

    def __init__(self, tmp: Path, data_dir: Path | None = None, args: list[str] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"server-{self.port}.log", "wb")
        cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(self.port), "--no-progress",
               "--log-level", "warning", *args]
        if data_dir is not None:
            cmd += ["--data-dir", str(data_dir)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._up, 180, "the server to answer /status")

    def _up(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}")
        return http("GET", self.url + "/status", timeout=5)

    def sparql(self, q: str) -> dict:
        return http("GET", self.url + "/sparql?" + urllib.parse.urlencode({"query": q}))

    def count(self, where: str = "?s ?p ?o") -> int:
        res = self.sparql(f"SELECT (COUNT(*) AS ?n) WHERE {{ {where} }}")
        return int(res["results"]["bindings"][0]["n"]["value"])

    def streams(self) -> dict[str, dict]:
        doc = http("GET", self.url + "/streams")
        items = doc["streams"] if isinstance(doc, dict) else doc
        return {s["name"]: s for s in items}

    def stop(self, sig=signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()
        return self.proc.returncode


class Nats:
    """A real nats-server with JetStream on a free port."""

    def __init__(self, tmp: Path):
        exe = shutil.which("nats-server") or "/usr/bin/nats-server"
        if not os.path.exists(exe):
            raise FileNotFoundError("nats-server is not installed (Debian package nats-server)")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        store = tmp / f"nats-{self.port}"
        store.mkdir()
        self.log = open(tmp / f"nats-{self.port}.log", "wb")
        self.proc = subprocess.Popen([exe, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(store)],
                                     stdout=self.log, stderr=subprocess.STDOUT)

        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"nats-server exited with {self.proc.returncode}")
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return True
        wait_for(up, 60, "nats-server to listen")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()


def pipeline_cmd(spec: Path, server: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "server.cli", "pipeline", "run", str(spec), "--server", server,
            "--master", "local[2]", *extra]
