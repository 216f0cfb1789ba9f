"""W3C SPARQL 1.1 query-evaluation tests against the real server.

The harness of the steering repo loads each test's data through our Graph
Store Protocol endpoint, resets through /update (DROP ALL) and compares
terms exactly. Every failure we accept is listed with its reason in
tests/w3c-known-failures.txt; any other failure, or fewer than 225 passes,
fails this test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.server_process import ServerProcess
from tests.support.shared import shared_dir

KNOWN = Path(__file__).with_name("w3c-known-failures.txt")
BAR = 225


def test_w3c_sparql11_evaluation(tmp_path):
    shared = shared_dir()
    harness = shared / "tools" / "w3c_sparql_harness.py"
    log = tmp_path / "w3c.log"
    with ServerProcess() as server:
        proc = subprocess.run(
            [sys.executable, str(harness), "--suite", "sparql11",
             "--endpoint", server.url + "/sparql", "--store", server.url + "/store",
             "--update", server.url + "/update", "--tests-dir", str(shared / "w3c-sparql"),
             "--known-failures", str(KNOWN), "--log", str(log), "--timeout", "30"],
            capture_output=True, text=True, timeout=1200,
        )
    out = proc.stdout + proc.stderr
    last = [ln for ln in out.splitlines() if re.search(r"\d+ passed, \d+ failed", ln)]
    assert last, out[-3000:]
    passed = int(re.search(r"(\d+) passed", last[-1]).group(1))
    details = log.read_text() if log.exists() else ""
    failing = "\n".join(ln for ln in details.splitlines() if ln.startswith(("FAIL", "ERROR")))
    assert proc.returncode == 0, f"unexpected W3C failures:\n{failing}\n{out[-2000:]}"
    assert passed >= BAR, f"only {passed} W3C tests pass (bar {BAR}):\n{failing}"
