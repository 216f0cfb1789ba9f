"""`python -m bench pipeline`: end-to-end throughput and added latency of the Spark
ingestion pipelines (pipeline/), input -> queryable in a running `jindou serve`.

* **files**: --files CSV files of sensor readings (each row -> 4 triples) in a
  directory; the job runs with ``availableNow`` and --max-files per micro-batch.
* **jetstream**: the same rows published to a real nats-server (--rows-per-message
  rows a message) and read by the JetStream source, --max-records a micro-batch.
* **latency**: with a processing-time trigger of 0 (next batch as soon as the last
  ends), single readings are published one at a time and the time until each is
  visible through /sparql is measured, with Spark's own trigger time per batch.

Two rates per source, both up to the last triple answered by /sparql:

* ``triples_per_s`` (end to end, what a user waits for): from the job's start
  (``Pipeline.start``: the first micro-batch's planning and every batch included) to
  the last triple visible. ``target_met`` is judged on this rate. The Spark session's
  own start (the JVM, and the warm-up job that pays the first job's cold start: the
  Python workers, the first planning) is reported apart (``spark_session_seconds``), as
  it is paid once per process and shared by the benchmarks of one run;
  ``with_session_triples_per_s`` adds it for the first benchmark of the run.
* ``sustained_triples_per_s``: from the end of the first micro-batch's delivery
  to the last triple visible (the steady state of a long-running job).

The stream absorbs every triple into the store, which is what makes them queryable
by one-shot SPARQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

TARGET = 200_000          # triples/s end to end (Strider: ~86k triples/s per core)
T0 = 1_700_000_000_000

MAPPING = {
    "format": "csv", "absorb": "all",
    "csv": {"header": False, "columns": ["sensor", "time_ms", "temperature", "humidity"]},
    "timestamp": "int(time_ms)",
    "nodes": [{"subject": "ex:obs/{sensor}-{time_ms}", "properties": [
        ["a", "ex:Observation"],
        ["ex:sensor", "ex:sensor/{sensor}"],
        ["ex:temperature", {"value": "float(temperature)", "datatype": "xsd:double"}],
        ["ex:humidity", {"value": "int(humidity)", "datatype": "xsd:long"}]]}]}
TRIPLES_PER_ROW = 4


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 120):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _count(url: str) -> int:
    """Triples queryable now: 4 x the readings whose humidity triple is visible (the 4 triples
    of a reading share its timestamp, so they become visible together)."""
    q = urllib.parse.urlencode({"query": "SELECT (COUNT(*) AS ?n) WHERE { ?s <http://example.org/humidity> ?o }"})
    for _ in range(60):
        try:
            return TRIPLES_PER_ROW * int(_get(f"{url}/sparql?{q}")["results"]["bindings"][0]["n"]["value"])
        except urllib.error.HTTPError as e:        # 503: busy absorbing a large batch; ask again
            if e.code != 503:
                raise
            time.sleep(1.0)
    raise RuntimeError("the server kept answering 503")


def _heartbeat(url: str, stream: str, t: int) -> None:
    req = urllib.request.Request(f"{url}/streams/{stream}/progress?t={t}", method="POST")
    urllib.request.urlopen(req, timeout=60).read()


class _Server:
    def __init__(self, work: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(work / "server.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--port", str(self.port),
                                      "--no-progress", "--log-level", "warning",
                                      "--transient-budget", str(2 << 30)],
                                     cwd=Path(__file__).resolve().parents[1], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while True:
            try:
                _get(self.url + "/status", 5)
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("jindou serve did not start") from None
                time.sleep(0.3)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _rows(n: int, start: int = 0) -> list[str]:
    return [f"s{i % 500},{T0 + i},{15 + (i % 200) / 10},{30 + i % 60}" for i in range(start, start + n)]


def _wait_count(url: str, want: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while True:
        n = _count(url)
        if n >= want:
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {n} of {want} triples became queryable")
        time.sleep(0.05)


OPTIONS = {"upload_queue": 1, "warm": True}     # set from the command line


def _pipeline(doc: dict, base: Path, url: str, spark, once: bool):
    from pipeline.injector import HttpInjector
    from pipeline.job import Pipeline
    from pipeline.spec import parse_spec

    spec = parse_spec(doc, base)
    log = (lambda m: print(f"  {time.time():.3f} {m}", file=sys.stderr, flush=True)) \
        if os.environ.get("BENCH_VERBOSE") else None
    return Pipeline(spec, doc, HttpInjector(url), master="local[*]", once=once, spark=spark, log=log, **OPTIONS)


def _run_once(pipe, url: str, stream: str, total_triples: int, last_t: int, base_count: int) -> dict:
    """Start -> every triple answered by /sparql. ``sustained`` leaves out the first
    micro-batch (Python worker start, first planning): from its end to the last triple."""
    t0 = time.time()
    pipe.start()
    rc = pipe.wait(threading.Event())
    if rc != 0:
        raise RuntimeError("the pipeline failed")
    t_delivered = time.time()
    _heartbeat(url, stream, last_t + 1)
    t_done = _wait_count(url, base_count + total_triples, 300)
    c = pipe.counters.doc
    hist = list(pipe.writer.history)
    pipe.stop()
    secs = t_done - t0
    out = {"triples": total_triples, "delivered": c["triples"], "batches": c["batches"],
           "seconds": round(secs, 3), "triples_per_s": round(total_triples / secs),
           "deliver_seconds": round(t_delivered - t0, 3),
           "warm_up_seconds": None if pipe.warm_up_s is None else round(pipe.warm_up_s, 3)}
    if hist:
        out["first_batch_seconds"] = round(hist[0][1] - t0, 3)      # job start -> first batch delivered
    if len(hist) >= 2:
        rest = sum(n for _b, _t, n in hist[1:])
        out["sustained_triples_per_s"] = round(rest / (t_done - hist[0][1]))
        gaps = [b[1] - a[1] for a, b in zip(hist[1:], hist[2:], strict=False)]
        if gaps:
            out["batch_seconds_median"] = round(statistics.median(gaps), 3)
    return out


def bench_files(spark, url: str, work: Path, files: int, rows_per_file: int, max_files: int, base: int) -> dict:
    inp = work / "files-in"
    inp.mkdir()
    for k in range(files):
        (inp / f"part-{k:04d}.csv").write_text("\n".join(_rows(rows_per_file, k * rows_per_file)) + "\n")
        os.utime(inp / f"part-{k:04d}.csv", (1_600_000_000 + k, 1_600_000_000 + k))
    doc = {"name": "bench-files", "source": {"kind": "files", "path": str(inp), "max_files_per_trigger": max_files},
           "checkpoint": str(work / "files-ckpt"), "dead_letter": {"path": str(work / "files-dead")},
           "prefixes": {"ex": "http://example.org/"},
           "mappings": [dict(MAPPING, stream="bench_files", stream_iri="ex:bench_files")]}
    pipe = _pipeline(doc, work, url, spark, once=True)
    total = files * rows_per_file * TRIPLES_PER_ROW
    return _run_once(pipe, url, "bench_files", total, T0 + files * rows_per_file, base)


async def _publish(url: str, stream: str, subject: str, rows: list[str], per_msg: int, create: bool) -> int:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    if create:
        await js.add_stream(name=stream, subjects=[subject.rsplit(".", 1)[0] + ".>"])
    futs = []
    for i in range(0, len(rows), per_msg):
        futs.append(await js.publish_async(subject, "\n".join(rows[i:i + per_msg]).encode()))
        if len(futs) >= 2000:
            await asyncio.gather(*futs)
            futs = []
    await asyncio.gather(*futs)
    info = await js.stream_info(stream)
    await nc.close()
    return info.state.last_seq


def bench_jetstream(spark, url: str, work: Path, nats_url: str, rows: int, per_msg: int, max_records: int,
                    base: int) -> dict:
    t = time.perf_counter()
    asyncio.run(_publish(nats_url, "BENCH", "bench.rows", _rows(rows, 100_000_000), per_msg, True))
    publish_s = time.perf_counter() - t
    doc = {"name": "bench-js", "source": {"kind": "jetstream", "url": nats_url, "stream": "BENCH",
                                          "subjects": ["bench.>"], "max_records_per_trigger": max_records},
           "checkpoint": str(work / "js-ckpt"), "dead_letter": {"path": str(work / "js-dead")},
           "prefixes": {"ex": "http://example.org/"},
           "mappings": [dict(MAPPING, stream="bench_js", stream_iri="ex:bench_js")]}
    pipe = _pipeline(doc, work, url, spark, once=True)
    out = _run_once(pipe, url, "bench_js", rows * TRIPLES_PER_ROW, T0 + 100_000_000 + rows, base)
    out["publish_seconds"] = round(publish_s, 3)
    return out


def bench_latency(spark, url: str, work: Path, nats_url: str, probes: int) -> dict:
    from pipeline.spec import parse_spec

    doc = {"name": "bench-lat", "trigger_ms": 0,
           "source": {"kind": "jetstream", "url": nats_url, "stream": "LAT", "subjects": ["lat.>"]},
           "checkpoint": str(work / "lat-ckpt"), "dead_letter": {"path": str(work / "lat-dead")},
           "prefixes": {"ex": "http://example.org/"},
           "mappings": [dict(MAPPING, stream="bench_lat", stream_iri="ex:bench_lat")]}
    parse_spec(doc, work)
    asyncio.run(_publish(nats_url, "LAT", "lat.x", [], 1, True))
    pipe = _pipeline(doc, work, url, spark, once=False)
    pipe.start()
    lat, vis, trig = [], [], []
    try:
        for i in range(probes + 2):
            t_ms = T0 + 10_000_000 + i
            q = urllib.parse.urlencode({"query": f"ASK {{ <http://example.org/obs/p{i}-{t_ms}> ?p ?o }}"})
            asyncio.run(_publish(nats_url, "LAT", "lat.x", [f"p{i},{t_ms},20.5,40"], 1, False))
            t = time.perf_counter()              # the reading is in JetStream (acknowledged)
            deadline = time.monotonic() + 120
            while _get(f"{url}/streams/bench_lat")["accepted"] < TRIPLES_PER_ROW * (i + 1):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a latency probe was never injected (Spark: {pipe.query.status})")
                time.sleep(0.005)
            t_in = time.perf_counter()
            # the producer's heartbeat: only now, a heartbeat ahead of the data would make it late
            _heartbeat(url, "bench_lat", t_ms + 1)
            while not _get(f"{url}/sparql?{q}")["boolean"]:
                if time.monotonic() > deadline:
                    raise RuntimeError("an injected probe never became visible")
                time.sleep(0.005)
            if i >= 2:                      # the first batches warm up the Python workers
                lat.append((t_in - t) * 1000)
                vis.append((time.perf_counter() - t) * 1000)
                p = pipe.query.lastProgress or {}
                te = (p.get("durationMs") or {}).get("triggerExecution")
                if te is not None:
                    trig.append(te)
    finally:
        pipe.stop()
    return {"probes": len(lat), "injected_ms_median": round(statistics.median(lat), 1),
            "injected_ms_p90": round(sorted(lat)[int(0.9 * (len(lat) - 1))], 1),
            "visible_ms_median": round(statistics.median(vis), 1),
            "spark_trigger_ms_median": round(statistics.median(trig), 1) if trig else None}


def run(args) -> dict:
    from pipeline.job import spark_session

    work = Path(tempfile.mkdtemp(prefix="jindou-pipeline-bench-"))
    server = _Server(work)
    nats_proc = None
    try:
        t = time.perf_counter()
        spark = spark_session("local[*]", "jindou-pipeline-bench", warm=OPTIONS["warm"])
        session_s = time.perf_counter() - t
        res = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "spark_session_seconds": round(session_s, 1), "target_triples_per_s": TARGET}
        if "files" in args.only:
            res["files"] = bench_files(spark, server.url, work, args.files, args.rows_per_file, args.max_files, 0)
        nats_url = None
        if "jetstream" in args.only or "latency" in args.only:
            exe = shutil.which("nats-server")
            if exe is None:
                raise RuntimeError("nats-server is not installed")
            port = _free_port()
            (work / "nats").mkdir()
            nats_proc = subprocess.Popen([exe, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(work / "nats")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            nats_url = f"nats://127.0.0.1:{port}"
        if "jetstream" in args.only:
            base = _count(server.url)
            res["jetstream"] = bench_jetstream(spark, server.url, work, nats_url, args.js_rows, args.rows_per_message,
                                               args.max_records, base)
        if "latency" in args.only:
            res["latency"] = bench_latency(spark, server.url, work, nats_url, args.probes)
        spark.stop()
        first = True
        for k in ("files", "jetstream"):
            if k in res:
                r = res[k]
                if first:
                    r["with_session_triples_per_s"] = round(r["triples"] / (r["seconds"] + session_s))
                    first = False
                r["target_met"] = r["triples_per_s"] >= TARGET       # end to end, as a user waits
                r["sustained_target_met"] = r.get("sustained_triples_per_s", 0) >= TARGET
        res["options"] = dict(OPTIONS)
        return res
    finally:
        if nats_proc is not None:
            nats_proc.terminate()
            nats_proc.wait(30)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench pipeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="files,jetstream,latency", help="comma-separated: files,jetstream,latency")
    ap.add_argument("--files", type=int, default=40, help="input files (default 40)")
    ap.add_argument("--rows-per-file", type=int, default=25_000, help="CSV rows a file, 4 triples each")
    ap.add_argument("--max-files", type=int, default=10, help="maxFilesPerTrigger (default 10)")
    ap.add_argument("--js-rows", type=int, default=500_000, help="rows published to JetStream")
    ap.add_argument("--rows-per-message", type=int, default=100)
    ap.add_argument("--max-records", type=int, default=2000, help="maxRecordsPerTrigger (messages)")
    ap.add_argument("--probes", type=int, default=20, help="latency probes")
    ap.add_argument("--upload-queue", type=int, default=1,
                    help="batches waiting for upload while Spark maps the next (0: upload inside the batch)")
    ap.add_argument("--no-warm-up", action="store_true", help="no warm-up job before the first batch")
    ap.add_argument("--json", default=None, help="also write the result here")
    a = ap.parse_args(argv)
    OPTIONS.update(upload_queue=a.upload_queue, warm=not a.no_warm_up)
    a.only = {x.strip() for x in a.only.split(",") if x.strip()}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))    # run the clean-up (server, nats-server)
    res = run(a)
    text = json.dumps(res, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
