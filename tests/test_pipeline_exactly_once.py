"""Exactly once across crashes: `jindou pipeline run` (a real Spark job) against a real
`jindou serve --data-dir` subprocess.

1. run 1 is SIGKILLed by its own fault hook right after batch 2 reached the store and
   before Spark committed it (the replay of that batch must be recognised);
2. run 2 is SIGKILLed from outside mid-stream;
3. the server is restarted (same data dir);
4. run 3 finishes the input and is stopped with SIGTERM (clean exit 0).
Every input triple must be in the store, and the stream must have accepted exactly as
many triples as the input has: a batch applied twice would be counted twice (each file
is one element at one timestamp, so a re-delivery would not be rejected as late).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.pipeline_support import REPO, Server, pipeline_cmd, wait_for

pytestmark = pytest.mark.timeout(900)

FILES, PER_FILE, T0 = 12, 2000, 1_700_000_000_000
TOTAL = FILES * PER_FILE


def _write_input(d):
    d.mkdir()
    for k in range(FILES):
        lines = [f'<http://ex.org/s/{k}/{i}> <http://ex.org/p> "{i}"^^<http://www.w3.org/2001/XMLSchema#long> '
                 f'{T0 + k * 1000} .' for i in range(PER_FILE)]
        p = d / f"part-{k:03d}.nt"
        p.write_text("\n".join(lines) + "\n")
        os.utime(p, (1_600_000_000 + k * 10, 1_600_000_000 + k * 10))   # Spark reads files oldest first


def _accepted(server) -> int:
    return int(server.streams().get("events", {}).get("accepted", 0))


def test_sigkill_and_server_restart_deliver_every_triple_once(tmp_path):
    inp = tmp_path / "in"
    _write_input(inp)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "eo", "trigger_ms": 1500,
        "source": {"kind": "files", "path": str(inp), "glob": "*.nt", "max_files_per_trigger": 1},
        "checkpoint": str(tmp_path / "ckpt"), "dead_letter": {"path": str(tmp_path / "dead")},
        "mappings": [{"stream": "events", "stream_iri": "http://ex.org/events", "absorb": "all",
                      "format": "ntriples"}]}))
    data_dir = tmp_path / "data"
    server = Server(tmp_path, data_dir)
    logs = []
    procs = []

    def start(*extra, env=None):
        log = open(tmp_path / f"pipeline-{len(logs)}.log", "wb")
        logs.append(log)
        p = subprocess.Popen(pipeline_cmd(spec, server.url, *extra), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **(env or {})})
        procs.append(p)
        return p

    try:
        # 1. crash right after batch 2 is in the store, before Spark commits it
        p1 = start(env={"JINDOU_PIPELINE_FAULT": "kill-after-deliver:2"})
        assert p1.wait(600) == -signal.SIGKILL
        assert _accepted(server) == 3 * PER_FILE

        # 2. SIGKILL from outside, mid-stream
        p2 = start()
        wait_for(lambda: _accepted(server) >= 6 * PER_FILE, 600, "run 2 to deliver more batches")
        p2.send_signal(signal.SIGKILL)
        assert p2.wait(60) == -signal.SIGKILL
        before_restart = _accepted(server)
        assert before_restart < TOTAL, "run 2 finished before it could be killed mid-stream"

        # 3. restart the server on the same data dir
        assert server.stop() in (0, -signal.SIGTERM)     # uvicorn re-raises SIGTERM after its clean shutdown
        server = Server(tmp_path, data_dir)
        assert server.count() == before_restart     # absorbed triples survived

        # 4. finish, then a clean SIGTERM
        p3 = start()
        wait_for(lambda: before_restart + _accepted(server) >= TOTAL, 600, "run 3 to deliver the rest")
        time.sleep(3)                               # room for a wrongly repeated batch to show up
        p3.send_signal(signal.SIGTERM)
        assert p3.wait(120) == 0
        assert before_restart + _accepted(server) == TOTAL

        # every triple is in the store (a heartbeat past the last element makes it visible)
        with_progress = f"{server.url}/streams/events/progress?t={T0 + FILES * 1000}"
        import urllib.request
        urllib.request.urlopen(urllib.request.Request(with_progress, method="POST"), timeout=30).read()
        assert wait_for(lambda: server.count() == TOTAL, 60, "all triples to be visible")
        counters = json.loads((tmp_path / "ckpt" / "jindou-metrics.json").read_text())
        assert counters["duplicate_batches"] >= 1         # the replay of batch 2 was recognised
        assert counters["triples"] == TOTAL               # ... and its triples counted once
        assert counters["dead_letters"] == 0
        status = server.sparql("ASK { <http://ex.org/s/11/1999> <http://ex.org/p> ?o }")
        assert status["boolean"] is True
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
        for log in logs:
            log.close()
        server.stop()
