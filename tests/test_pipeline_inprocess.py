"""`jindou pipeline run --in-process`: the server and the Spark job in one process, the
batches handed to the StreamManager without HTTP; SIGTERM stops both cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.parse

import pytest

from tests.pipeline_support import REPO, free_port, http, wait_for

pytestmark = pytest.mark.timeout(600)


def test_in_process_pipeline_and_sigterm(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    for k in range(3):
        (inp / f"r{k}.ndjson").write_text("\n".join(
            json.dumps({"id": f"{k}-{i}", "t": 1000 * k + i, "v": i * 0.5}) for i in range(100)) + "\n")
    (inp / "r3.ndjson").write_text('{"id": "x", "t": 5000, "v": "hot"}\n')
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
name: inproc
source: {{kind: files, path: {inp}, glob: "*.ndjson"}}
checkpoint: {tmp_path / 'ckpt'}
dead_letter: {{path: {tmp_path / 'dead'}}}
prefixes: {{ex: "http://ex.org/"}}
mappings:
  - stream: readings
    stream_iri: ex:readings
    absorb: all
    format: ndjson
    timestamp: t
    nodes:
      - subject: ex:r/{{id}}
        properties:
          - [ex:v, {{value: v, datatype: xsd:double}}]
""")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "run.log", "wb")
    p = subprocess.Popen([sys.executable, "-m", "server.cli", "pipeline", "run", str(spec), "--in-process",
                          "--port", str(port), "--once", "--master", "local[2]"], cwd=REPO, stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        def done():
            doc = http("GET", url + "/status", timeout=5)
            return doc["pipelines"].get("inproc", {}).get("state") == "finished" and doc
        status = wait_for(done, 400, "the in-process pipeline to finish")
        assert status["pipelines"]["inproc"]["counters"]["triples"] == 300
        assert status["pipelines"]["inproc"]["counters"]["dead_letters"] == 1
        http("POST", url + "/streams/readings/progress?t=10000")
        q = urllib.parse.urlencode({"query": "SELECT (COUNT(*) AS ?n) WHERE { ?s <http://ex.org/v> ?o }"})
        assert wait_for(lambda: http("GET", f"{url}/sparql?{q}")["results"]["bindings"][0]["n"]["value"] == "300",
                        60, "the triples to be queryable")
        p.send_signal(signal.SIGTERM)
        assert p.wait(120) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
        log.close()
