"""Start the real `jindou serve` in a subprocess on 127.0.0.1 and a free port.

Used by integration tests that need a whole server (the W3C harness, the
benchmarks' HTTP peers). The process is always stopped: use as a context
manager.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.processes import stop_processes

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, *args: str, startup_timeout: float = 120.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        cmd = [sys.executable, "-c", "from server.cli import main; main()", "serve",
               "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{out}")
            try:
                with urllib.request.urlopen(self.url + "/status", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.__exit__(None, None, None)
        raise RuntimeError("server did not start in time")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            stop_processes([self.proc])
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
