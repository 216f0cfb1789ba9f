"""W3C SPARQL 1.1 query-evaluation tests against the real server.

The harness of the steering repo loads each test's data through our Graph
Store Protocol endpoint, resets through /update (DROP ALL) and compares
terms exactly. Every failure we accept is listed with its reason in
tests/w3c-known-failures.txt; any other failure, or fewer than 225 passes,
fails this test.

The whole suite runs on every topology (issue 12: same answers whatever the
topology): one process, and ``jindou serve --workers 3`` read over shared
memory (adaptive, and every step forced to fork-join) and over Arrow Flight
(every step forced in place), so both step kinds answer the whole suite over
both transports (a run takes about 10 s, so all of them run in full).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.clusters import SERVE_ARGS, cluster_of, leftovers, server_workers
from tests.support.server_process import ServerProcess
from tests.support.shared import shared_dir

KNOWN = Path(__file__).with_name("w3c-known-failures.txt")
BAR = 225

TOPOLOGIES = {
    "single": [],
    "cluster-shm": SERVE_ARGS["cluster"],
    "cluster-fork-join": SERVE_ARGS["cluster-fork-join"],
    "cluster-flight-in-place": SERVE_ARGS["cluster-flight-in-place"],
}


@pytest.mark.parametrize("topology", list(TOPOLOGIES))
def test_w3c_sparql11_evaluation(tmp_path, topology):
    args = TOPOLOGIES[topology]
    shared = shared_dir()
    harness = shared / "tools" / "w3c_sparql_harness.py"
    log = tmp_path / "w3c.log"
    with ServerProcess(*args) as server:
        workers = server_workers(server.url)
        assert len(workers) == (3 if args else 0), workers
        assert all(w["state"] == "up" for w in workers), workers
        proc = subprocess.run(
            [sys.executable, str(harness), "--suite", "sparql11",
             "--endpoint", server.url + "/sparql", "--store", server.url + "/store",
             "--update", server.url + "/update", "--tests-dir", str(shared / "w3c-sparql"),
             "--known-failures", str(KNOWN), "--log", str(log), "--timeout", "30"],
            capture_output=True, text=True, timeout=1200,
        )
        after = server_workers(server.url)
        # Ctrl-C (test_cluster_lifecycle stops one with SIGTERM too)
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=30)
    # a stopped `jindou serve` ends its workers and removes their shared memory
    pids, dirs = cluster_of(workers)
    assert not leftovers(pids, dirs), leftovers(pids, dirs, wait=0)
    assert [w["pid"] for w in after] == [w["pid"] for w in workers], "a worker restarted during the suite"
    out = proc.stdout + proc.stderr
    last = [ln for ln in out.splitlines() if re.search(r"\d+ passed, \d+ failed", ln)]
    assert last, out[-3000:]
    passed = int(re.search(r"(\d+) passed", last[-1]).group(1))
    details = log.read_text() if log.exists() else ""
    failing = "\n".join(ln for ln in details.splitlines() if ln.startswith(("FAIL", "ERROR")))
    assert proc.returncode == 0, f"unexpected W3C failures ({topology}):\n{failing}\n{out[-2000:]}"
    assert passed >= BAR, f"only {passed} W3C tests pass (bar {BAR}, {topology}):\n{failing}"
