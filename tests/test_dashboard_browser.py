"""The dashboard in a real browser: Debian's chromium driven by playwright-core
(tests/browser/dashboard.test.mjs) against a real `jindou serve --demo`.

The script opens the dashboard, sees the demo query's live windows, runs a
one-shot query and sees rows (sorting, DESCRIBE, CSV download, a syntax error
with line and column), registers a continuous query and sees its windows
arrive through the EventSource (pause / resume without a missing window; a
dropped connection, cut by a TCP proxy, resumes with Last-Event-ID),
checks the streams and status view, deletes the query, and records every
console error. Set JINDOU_SCREENSHOTS=<dir> to also save the screenshots of
docs/screenshots/.

Skipped (with the reason) only when node, chromium or tests/browser/node_modules
(`cd tests/browser && npm ci`) are missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.server_process import ServerProcess

BROWSER_DIR = Path(__file__).resolve().parent / "browser"
SCRIPT = BROWSER_DIR / "dashboard.test.mjs"
CHROMIUM = os.environ.get("JINDOU_CHROMIUM", "/usr/bin/chromium")


def _skip_reason() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"chromium is not installed at {CHROMIUM} (apt-get install chromium, or set JINDOU_CHROMIUM)"
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        return "playwright-core is not installed: run `cd tests/browser && npm ci`"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def test_dashboard_in_chromium(tmp_path):
    shots = os.environ.get("JINDOU_SCREENSHOTS")
    with ServerProcess("--demo", startup_timeout=180) as srv:
        cmd = ["node", str(SCRIPT), "--url", srv.url, "--timeout", "90000", "--chromium", CHROMIUM]
        if shots:
            cmd += ["--screenshots", shots]
        env = dict(os.environ, HOME=str(tmp_path))  # chromium writes below $HOME: keep it out of the real one
        proc = subprocess.run(cmd, cwd=BROWSER_DIR, capture_output=True, text=True, timeout=600, env=env)
    assert proc.stdout.strip(), f"no report from the browser script (exit {proc.returncode}):\n{proc.stderr}"
    report = json.loads(proc.stdout)
    failed = {k: v for k, v in report["checks"].items() if not v["ok"]}
    assert report["failed"] is None, f"{report['failed']}\nchecks: {report['checks']}\nstderr: {proc.stderr[-2000:]}"
    assert not failed
    # a one-shot query showed rows
    assert report["rows"] > 0
    assert report["checks"]["iri-shortened"]["ok"] and report["checks"]["describe"]["ok"]
    assert "Line" in report["syntaxError"] and "column" in report["syntaxError"]
    # the demo query and a newly registered one delivered live windows
    assert report["demoWindows"] >= 1
    assert report["liveWindows"] >= 3 and report["liveState"] == "live"
    assert report["liveWindowsAfterResume"] >= report["liveWindows"] + 3
    assert report["checks"]["resume-contiguous"]["ok"]
    # a dropped connection: the EventSource reconnected with Last-Event-ID, no instant missing
    assert report["lastEventIdRequests"] >= 1 and "reconnecting" in report["reconnectStates"]
    assert report["checks"]["reconnect-contiguous"]["ok"]
    assert report["checks"]["prefix-completion"]["ok"]
    # streams view: the demo stream with a measured rate
    names = [s["name"] for s in report["streams"]]
    assert "sensors" in names
    # no console error and no uncaught exception in the page
    assert report["consoleErrors"] == [], report["consoleErrors"]
    assert report["pageErrors"] == [], report["pageErrors"]
    assert report["checks"]["offline"]["ok"]
    assert proc.returncode == 0 and report["ok"] is True


def test_dashboard_with_token(tmp_path):
    """A server that needs a token for reads and writes: the page says so, the token field
    (kept in session storage) unlocks it, queries run and the live view reads the event
    stream with the Authorization header (fetch, since EventSource cannot send one)."""
    token = "dash-" + os.urandom(6).hex()
    with ServerProcess("--demo", "--token", token, "--read-token", token, startup_timeout=180) as srv:
        cmd = ["node", str(SCRIPT), "--url", srv.url, "--timeout", "90000", "--chromium", CHROMIUM,
               "--token", token]
        env = dict(os.environ, HOME=str(tmp_path))
        proc = subprocess.run(cmd, cwd=BROWSER_DIR, capture_output=True, text=True, timeout=600, env=env)
    assert proc.stdout.strip(), f"no report from the browser script (exit {proc.returncode}):\n{proc.stderr}"
    report = json.loads(proc.stdout)
    assert report["failed"] is None, f"{report['failed']}\nchecks: {report['checks']}"
    for name in ("token-needed", "token-stored", "rows", "live-windows", "token-reload"):
        assert report["checks"][name]["ok"], name
    assert report["consoleErrors"] == [], report["consoleErrors"]
    assert report["pageErrors"] == [], report["pageErrors"]
    assert proc.returncode == 0 and report["ok"] is True
