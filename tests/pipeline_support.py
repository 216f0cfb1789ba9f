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


class CuttingProxy:
    """A real HTTP peer on 127.0.0.1 in front of a Jindou server that, for the requests
    ``cut(method, path, n)`` selects (n: the 1-based count of such method+path requests so
    far), forwards the request (the server applies it) and then cuts the answer short the
    way a server dying mid-answer does: ``"body"`` sends the status line, the headers and
    half the body (IncompleteRead), ``"status"`` closes before the status line
    (RemoteDisconnected, a BadStatusLine), ``"garbage"`` sends a broken status line."""

    def __init__(self, upstream: str, cut):
        import http.client
        import socketserver
        import threading

        self.upstream = urllib.parse.urlsplit(upstream)
        self.cut = cut
        self.seen: list[tuple[str, str, dict]] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline().decode("latin-1").rstrip("\r\n")
                if not line:
                    return
                method, path, _ = line.split(" ", 2)
                headers = {}
                while True:
                    h = self.rfile.readline().decode("latin-1").rstrip("\r\n")
                    if not h:
                        break
                    k, _, v = h.partition(":")
                    headers[k.strip()] = v.strip()
                body = self.rfile.read(int(headers.get("Content-Length", 0) or 0))
                with proxy.lock:
                    proxy.seen.append((method, path, headers))
                    n = sum(1 for m, p, _ in proxy.seen if m == method and p == path)
                mode = proxy.cut(method, path, n)
                fwd = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
                c = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=120)
                try:
                    c.request(method, path, body=body, headers=fwd)
                    r = c.getresponse()
                    data = r.read()
                    head = [f"HTTP/1.1 {r.status} {r.reason}"]
                    head += [f"{k}: {v}" for k, v in r.getheaders()
                             if k.lower() not in ("content-length", "connection", "transfer-encoding")]
                    head += [f"Content-Length: {len(data)}", "Connection: close", "", ""]
                finally:
                    c.close()
                if mode == "status":
                    return
                if mode == "garbage":
                    self.wfile.write(b"HTTP/1.1 2xx what\r\n\r\n")
                    return
                self.wfile.write("\r\n".join(head).encode("latin-1"))
                self.wfile.write(data[: len(data) // 2] if mode == "body" else data)

        class Srv(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Srv(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
