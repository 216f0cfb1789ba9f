"""``--process-session own``: each query process of ``--processes N`` starts in a session
(and so, with the kernel's autogroup scheduling, a CPU-sharing group) of its own; shared
(the default) keeps it in the primary's. Either way it serves, restarts, stops with the
server and dies with the primary."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import time
import urllib.parse
import urllib.request

import pytest

from server.processes import own_session
from server.settings import Settings
from tests.test_process_cpus import _processes, _two


def test_when_own():
    assert own_session(Settings(processes=2)) is False  # shared by default
    assert own_session(Settings(processes=2, process_session="own")) is True
    assert own_session(Settings(processes=1, process_session="own")) is False  # no query process


def _wait_up(url: str, old: int | None = None) -> tuple[dict, dict]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        procs = _processes(url)
        if len(procs) == 2 and all(p.get("state") == "up" for p in procs):
            reader = next(p for p in procs if p["role"] == "query")
            if reader["pid"] != old:
                return next(p for p in procs if p["role"] == "primary"), reader
        time.sleep(0.1)
    raise AssertionError("the query process did not come up")


def _autogroup(pid: int) -> str | None:
    """The process's autogroup name, or None where the kernel (or a sandbox's /proc)
    reports none: the file absent, unreadable or empty."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            fields = f.read().split()
    except OSError:
        return None
    return fields[0] if fields else None


def _count(url: str) -> int:
    q = urllib.parse.quote("SELECT (COUNT(*) AS ?n) WHERE { ?s <http://example.org/p> ?o }")
    req = urllib.request.Request(f"{url}/sparql?query={q}", headers={"Accept": "application/sparql-results+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(json.loads(r.read())["results"]["bindings"][0]["n"]["value"])


def _served_by_query_process(url: str, port: int) -> bool:
    """Queries answered, the query process among those answering: eight keep-alive
    connections open at once (the balance gives it about half), its request count
    (reported every second) grows."""
    before = next(p for p in _processes(url) if p["role"] == "query").get("requests", 0)
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(8)]
    try:
        for c in conns:
            c.connect()
        q = urllib.parse.quote("SELECT (COUNT(*) AS ?n) WHERE { ?s <http://example.org/p> ?o }")
        for _ in range(5):
            for c in conns:
                c.request("GET", f"/sparql?query={q}", headers={"Accept": "application/sparql-results+json"})
                r = c.getresponse()
                assert r.status == 200
                assert int(json.loads(r.read())["results"]["bindings"][0]["n"]["value"]) == 20
    finally:
        for c in conns:
            c.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if next(p for p in _processes(url) if p["role"] == "query").get("requests", 0) > before:
            return True
        time.sleep(0.2)
    return False


def _gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours counts as gone
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_own_session_serves_restarts_and_stops(tmp_path):
    with _two(tmp_path, "--process-session", "own") as s:
        primary, reader = _wait_up(s.url)
        assert os.getsid(reader["pid"]) == reader["pid"]  # the leader of a session of its own
        assert os.getsid(reader["pid"]) != os.getsid(primary["pid"])
        if _autogroup(primary["pid"]) is not None:
            assert _autogroup(reader["pid"]) != _autogroup(primary["pid"])
        assert _served_by_query_process(s.url, s.port)
        # a killed query process's successor gets a session of its own again
        os.kill(reader["pid"], signal.SIGKILL)
        _, again = _wait_up(s.url, old=reader["pid"])
        assert os.getsid(again["pid"]) == again["pid"]
        assert _count(s.url) == 20
        last = again["pid"]
    assert _gone(last)  # stopped with the server


def test_shared_session_is_the_default(tmp_path):
    with _two(tmp_path) as s:
        primary, reader = _wait_up(s.url)
        assert os.getsid(reader["pid"]) == os.getsid(primary["pid"])
        if _autogroup(primary["pid"]) is not None:
            assert _autogroup(reader["pid"]) == _autogroup(primary["pid"])


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux only")
def test_own_session_query_process_dies_with_a_killed_primary(tmp_path):
    with _two(tmp_path, "--process-session", "own") as s:
        primary, reader = _wait_up(s.url)
        shm = [d for d in os.listdir("/dev/shm") if d.startswith(f"jindou-procs-{primary['pid']}-")]
        os.kill(primary["pid"], signal.SIGKILL)
        try:
            assert _gone(reader["pid"]), "a query process in its own session outlived its primary"
        finally:  # nobody else cleans up after a killed primary (the next start would)
            for d in shm:
                shutil.rmtree(os.path.join("/dev/shm", d), ignore_errors=True)
