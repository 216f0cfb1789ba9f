"""A pipeline rerun under the same name with a new checkpoint loses nothing: `jindou
pipeline run --once` (files source, a real Spark job) against `jindou serve --data-dir`,
whose batch-id ledger survives restarts. Spark numbers the batches of a new checkpoint
from 0 again; the batch ids carry the run identity kept in the checkpoint, so they do
not collide with the ids the server keeps from the first run.

Also the counters across a crash between delivery and the counters: the replay is
answered "duplicate" and its triples are counted once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request

import pytest

from tests.pipeline_support import REPO, Server, pipeline_cmd, wait_for

pytestmark = pytest.mark.timeout(900)
T0 = 1_700_000_000_000


def _input(d, tag: str, t0: int, n: int = 10):
    d.mkdir()
    lines = [f'<http://ex.org/{tag}/{i}> <http://ex.org/p> "{i}" {t0 + i} .' for i in range(n)]
    (d / "records.nt").write_text("\n".join([*lines, f"<http://ex.org/{tag}/bad> not a triple"]) + "\n")


def _run(spec, url, tmp_path, log_name, *extra, env=None):
    with open(tmp_path / log_name, "wb") as log:
        p = subprocess.Popen(pipeline_cmd(spec, url, "--once", *extra), cwd=REPO, stdout=log,
                             stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        try:
            return p.wait(600)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(30)


def _counters(ck):
    return json.loads((ck / "jindou-metrics.json").read_text())


def test_rerun_with_a_new_checkpoint_loses_nothing(tmp_path):
    in1, in2, ck1, ck2 = (tmp_path / n for n in ("in1", "in2", "ck1", "ck2"))
    _input(in1, "a", T0)
    _input(in2, "b", T0 + 1000)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "rerun", "source": {"kind": "files", "path": str(in1)}, "checkpoint": str(ck1),
        "dead_letter": {"path": str(tmp_path / "dead")},
        "mappings": [{"stream": "events", "stream_iri": "http://ex.org/events", "absorb": "all",
                      "format": "ntriples"}]}))
    data = tmp_path / "data"
    server = Server(tmp_path, data)
    try:
        # run 1 dies (SIGKILL) right after its batch reached the store, before it was counted
        rc = _run(spec, server.url, tmp_path, "run1.log", env={"JINDOU_PIPELINE_FAULT": "kill-after-deliver:0"})
        assert rc == -signal.SIGKILL
        assert server.streams()["events"]["accepted"] == 10
        # its restart on the same checkpoint replays batch 0 under the same id: skipped, counted once
        assert _run(spec, server.url, tmp_path, "run1b.log") == 0
        assert server.streams()["events"]["accepted"] == 10
        c1 = _counters(ck1)
        assert (c1["triples"], c1["duplicate_batches"], c1["dead_letters"], c1["batches"]) == (10, 1, 1, 1)

        server.stop()
        server = Server(tmp_path, data)         # the ledger of applied batch ids survives

        # the same pipeline on new input with a new checkpoint
        assert _run(spec, server.url, tmp_path, "run2.log", "--checkpoint", str(ck2), "--input", str(in2)) == 0
        log = (tmp_path / "run2.log").read_text()
        assert "0 duplicate stream batches skipped" in log, log[-2000:]
        c2 = _counters(ck2)
        assert (c2["triples"], c2["duplicate_batches"], c2["dead_letters"]) == (10, 0, 1)
        assert (ck1 / "jindou-run-id").read_text() != (ck2 / "jindou-run-id").read_text()

        req = urllib.request.Request(f"{server.url}/streams/events/progress?t={T0 + 2000}", method="POST")
        urllib.request.urlopen(req, timeout=30).read()
        assert wait_for(lambda: server.count() == 20, 60, "the 20 triples to be in the store")
        assert server.count("<http://ex.org/b/9> ?p ?o") == 1
        # each run's dead letter is kept (a new run does not overwrite the earlier one's file)
        dead = [json.loads(x) for f in sorted((tmp_path / "dead").glob("*.ndjson")) for x in f.read_text().splitlines()]
        assert sorted(d["source"].rsplit("/", 2)[-2] for d in dead) == ["in1", "in2"]
    finally:
        server.stop()


def test_spool_keeps_a_batch_of_many_sources(tmp_path):
    """A spooled batch reads back as it was, also when its chunks (files) came with different
    dictionaries for the per-chunk columns; pending batches come oldest first."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipeline.job import Spool, _Prepared

    def chunk(src, n, t0):
        return pa.table({"stream": pc.dictionary_encode(pa.array(["e"] * n)), "s": [f"<s{i}>" for i in range(n)],
                         "p": ["<p>"] * n, "o": ['"o"'] * n, "t": pa.array(range(t0, t0 + n), pa.int64()),
                         "timeless": [True] * n, "source": pc.dictionary_encode(pa.array([src] * n)),
                         "rec": pa.array(range(n), pa.int64())})

    sub = pa.concat_tables([chunk("a.nt", 3, 0), chunk("b.nt", 2, 10)])
    sp = Spool(str(tmp_path))
    sp.put(_Prepared(7, {"e": sub, "f": chunk("c.nt", 1, 5)}, {"chunks": 3, "dead_letters": 0, "filtered": 0,
                                                               "collect_s": 0.1}))
    sp.put(_Prepared(3, {}, {"chunks": 0, "dead_letters": 1, "filtered": 0, "collect_s": 0.1}))
    (sp.dir / "000000000009.tmp").mkdir()              # a half-written batch of a crashed run
    assert sp.pending() == [3, 7]
    b = sp.get(7)
    assert b.meta["chunks"] == 3 and sorted(b.streams) == ["e", "f"]
    got = b.streams["e"]
    assert got["source"].to_pylist() == ["a.nt"] * 3 + ["b.nt"] * 2 and got["t"].to_pylist() == [0, 1, 2, 10, 11]
    assert sp.get(3).streams == {} and sp.get(3).meta["dead_letters"] == 1
    sp.drop(7)
    assert sp.pending() == [3]


def test_run_identity_lives_in_the_checkpoint(tmp_path):
    from pipeline.job import run_identity, stream_batch_id

    a, b = run_identity(str(tmp_path / "ck1")), run_identity(str(tmp_path / "ck2"))
    assert a and b and a != b
    assert run_identity(str(tmp_path / "ck1")) == a                  # a restart keeps it
    assert stream_batch_id("p", a, 4, "s") == f"p:{a}:4:s"
    legacy = tmp_path / "old"
    (legacy / "offsets").mkdir(parents=True)
    (legacy / "offsets" / "0").write_text("v1\n{}\n{\"seq\": 3}\n")
    assert run_identity(str(legacy)) == ""                             # Spark state from before run ids
    assert stream_batch_id("p", "", 4, "s") == "p:4:s"                 # ... keeps its old ids
