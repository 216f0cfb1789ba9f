"""``--cpu-affinity auto``: with ``--processes N`` each serving process's event-loop thread
runs on a CPU of its own (the primary on the first); off (the default), one process, or
fewer CPUs than processes: the kernel places them."""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pytest

from server.processes import process_cpus
from server.settings import Settings
from tests.support.server_process import ServerProcess

CPUS = sorted(os.sched_getaffinity(0))


def test_which_cpus():
    assert process_cpus(Settings(processes=1, cpu_affinity="auto")) is None
    assert process_cpus(Settings(processes=2)) is None  # off by default
    if len(CPUS) >= 2:
        assert process_cpus(Settings(processes=2, cpu_affinity="auto")) == CPUS[:2]
    assert process_cpus(Settings(processes=len(CPUS) + 1, cpu_affinity="auto")) is None  # more processes than CPUs


def _allowed(pid: int) -> set[int]:
    """The CPUs the main thread of ``pid`` may run on."""
    return os.sched_getaffinity(pid)


def _processes(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/status", timeout=10) as r:
        return json.loads(r.read()).get("processes") or []


def _two(tmp_path, *extra):
    data = tmp_path / "g.nt"
    data.write_text("".join(f"<http://example.org/s{i}> <http://example.org/p> <http://example.org/o{i}> .\n"
                            for i in range(20)))
    return ServerProcess("--data", str(data), "--processes", "2", "--log-level", "warning", *extra)


def _wait_up(url: str) -> list[dict]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        procs = _processes(url)
        if len(procs) == 2 and all(p.get("state") == "up" for p in procs):
            return procs
        time.sleep(0.1)
    raise AssertionError("the query process did not come up")


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")
def test_two_processes_run_on_two_cpus(tmp_path):
    with _two(tmp_path, "--cpu-affinity", "auto") as s:
        procs = _wait_up(s.url)
        got = sorted(tuple(sorted(_allowed(p["pid"]))) for p in procs)
        assert got == [(CPUS[0],), (CPUS[1],)]
        # the query process keeps its CPU across a restart (the primary passes it on)
        primary = next(p for p in procs if p["role"] == "primary")
        assert _allowed(primary["pid"]) == {CPUS[0]}
        reader = next(p for p in procs if p["role"] == "query")
        os.kill(reader["pid"], 9)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = [p for p in _processes(s.url) if p["role"] == "query"]
            if now and now[0]["pid"] != reader["pid"] and now[0].get("state") == "up":
                break
            time.sleep(0.1)
        assert _allowed(now[0]["pid"]) == {CPUS[1]}


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")
def test_off_leaves_them_to_the_kernel(tmp_path):
    with _two(tmp_path) as s:  # (off: the default)
        procs = _wait_up(s.url)
        assert all(_allowed(p["pid"]) == set(CPUS) for p in procs)
