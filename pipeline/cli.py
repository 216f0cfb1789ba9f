"""``jindou pipeline ...``: run, check and generate pipeline specs.

* ``jindou pipeline run SPEC [--master local[*]|spark://host:7077] [--server URL | --in-process ...]``
  runs the Spark job until SIGTERM/SIGINT (clean stop after the batch in flight) or,
  with ``--once``, until the input available at start is processed.
* ``jindou pipeline check SPEC [--sample FILE]`` validates a spec and maps a sample
  file without Spark (prints N-Triples with timestamps and dead letters).
* ``jindou pipeline citybench-spec [--sensors ...]`` writes the CityBench spec.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

import yaml

from pipeline.expr import SpecError
from pipeline.injector import InjectionError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jindou pipeline", description="Spark ingestion pipelines into Jindou streams")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    r = sub.add_parser("run", help="run a pipeline spec (YAML/JSON) with Spark Structured Streaming")
    r.add_argument("spec")
    r.add_argument("--master", default=os.environ.get("JINDOU_SPARK_MASTER", "local[*]"),
                   help="Spark master (default local[*]; e.g. spark://host:7077)")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--server", default=os.environ.get("JINDOU_SERVER", "http://127.0.0.1:8000"),
                   help="Jindou server to inject into over HTTP (default %(default)s)")
    g.add_argument("--in-process", action="store_true",
                   help="start a Jindou server in this process and inject without HTTP")
    r.add_argument("--token", default=os.environ.get("JINDOU_TOKEN"), help="Bearer token for writes")
    r.add_argument("--once", action="store_true", help="process what is available now, then exit")
    r.add_argument("--checkpoint", default=None, help="override the spec's checkpoint directory")
    r.add_argument("--input", default=None, help="override the spec's source.path (files)")
    r.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    r.add_argument("--retry-for", type=float, default=600.0, metavar="SECONDS",
                   help="retry an unreachable, busy (502/503/504) or cut-short server for at most this long "
                        "per request, then fail with exit status 1 (default %(default)g)")
    r.add_argument("--upload-queue", type=int, default=1, metavar="N",
                   help="micro-batches that may wait for upload while Spark maps the next (spooled in the "
                        "checkpoint; default %(default)s; 0: upload inside the micro-batch)")
    r.add_argument("--no-warm-up", action="store_true",
                   help="skip the start-up job that readies the Python workers before the first micro-batch")
    r.add_argument("--host", default="127.0.0.1", help="--in-process: server host")
    r.add_argument("--port", type=int, default=8000, help="--in-process: server port")
    r.add_argument("--data-dir", default=None, help="--in-process: persist the store in DIR")
    r.add_argument("--quiet", action="store_true")
    c = sub.add_parser("check", help="validate a spec; map a sample file without Spark")
    c.add_argument("spec")
    c.add_argument("--sample", default=None, help="a file to map (its name selects the mapping)")
    c.add_argument("--limit", type=int, default=20, help="triples to print (default 20)")
    b = sub.add_parser("citybench-spec", help="write the CityBench mappings as a pipeline spec")
    b.add_argument("--sensors", default=None, help="comma-separated sensors (default: those of Q1-Q12)")
    b.add_argument("--input", default=None, help="input directory (default: shared/citybench/streams)")
    b.add_argument("--citybench", default=None, help="path of shared/citybench")
    b.add_argument("--name", default="citybench")
    b.add_argument("--start", default=None, help="startDate (default 2014-08-11T11:00:00)")
    b.add_argument("--end", default=None, help="endDate (default 2014-08-31T11:00:00)")
    b.add_argument("--frequency", type=float, default=1.0, help="location rows per second (default 1)")
    b.add_argument("--out", default=None, help="write here (.json or .yaml) instead of stdout")
    return p


def _load(path: str, checkpoint: str | None = None, input_dir: str | None = None):
    from pathlib import Path

    from pipeline.spec import parse_spec, read_spec_doc

    doc, base = read_spec_doc(path)
    if checkpoint:
        doc["checkpoint"] = str(Path(checkpoint).resolve())
    if input_dir:
        doc.setdefault("source", {})["path"] = str(Path(input_dir).resolve())
    spec = parse_spec(doc, base)
    return spec, doc, str(base)


def _run(a) -> int:
    from pipeline.job import Pipeline

    if a.upload_queue < 0 or not a.retry_for > 0:
        raise SpecError("--upload-queue must be >= 0 and --retry-for > 0")
    spec, doc, _ = _load(a.spec, a.checkpoint, a.input)
    say = (lambda *_: None) if a.quiet else (lambda s: print(f"jindou pipeline: {s}", file=sys.stderr, flush=True))
    conf = {}
    for kv in a.conf:
        k, _, v = kv.partition("=")
        conf[k] = v
    stop = threading.Event()

    def on_signal(signum, _frame):
        say(f"signal {signum}: stopping after the batch in flight")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = server_thread = None
    if a.in_process:
        from pipeline.injector import LocalInjector

        server, state = _start_server(a)
        server_thread = threading.Thread(target=server.run, name="jindou-server", daemon=True)
        server_thread.start()
        deadline = time.monotonic() + 120
        while not server.started:                  # lifespan start-up done (stream manager running)
            if not server_thread.is_alive() or time.monotonic() > deadline:
                raise SystemExit("jindou pipeline: the in-process server did not start")
            time.sleep(0.05)
        say(f"serving on http://{a.host}:{a.port}/sparql")
        injector = LocalInjector(state.streams, state)
    else:
        from pipeline.injector import HttpInjector

        injector = HttpInjector(a.server, a.token, retry_for=a.retry_for)
    pipe = Pipeline(spec, doc, injector, master=a.master, once=a.once, log=say, spark_conf=conf,
                    upload_queue=a.upload_queue, warm=not a.no_warm_up)
    rc = 1
    try:
        pipe.start()
        say(f"{spec.name}: {spec.source.kind} -> {', '.join(sorted(spec.streams()))} on {a.master}")
        rc = pipe.wait(stop)
        if rc == 0 and a.once and a.in_process:
            say("input processed; serving until SIGTERM")
            stop.wait()
    finally:
        pipe.stop()
        if server is not None:
            server.should_exit = True
            server_thread.join(30)
    c = pipe.counters.doc
    say(f"{spec.name} {pipe.state}: {c['triples']} triples, {c['dead_letters']} dead letters, "
        f"{c['duplicate_batches']} duplicate stream batches skipped")
    return rc


def _start_server(a):
    import uvicorn

    from server.app import create_app
    from server.settings import Settings

    cfg = Settings(host=a.host, port=a.port, data_dir=a.data_dir, token=a.token or None)
    app = create_app(cfg)
    state = app.state.jindou
    if state.streams is None:
        raise SystemExit("jindou pipeline: this server has no stream manager")
    server = uvicorn.Server(uvicorn.Config(app, host=a.host, port=a.port, log_level="warning", lifespan="on"))
    return server, state


def _check(a) -> int:
    from pathlib import Path

    from pipeline.mapping import load_tables, map_chunk

    spec, _, _ = _load(a.spec)
    print(f"spec {spec.name!r}: source {spec.source.kind}, {len(spec.mappings)} mapping(s), "
          f"streams {', '.join(sorted(spec.streams()))}")
    if not a.sample:
        return 0
    m = spec.mapping_for(a.sample)
    if m is None:
        print(f"no mapping matches {a.sample}", file=sys.stderr)
        return 1
    trip, dead, filtered = map_chunk(m, Path(a.sample).read_bytes(), os.path.abspath(a.sample), load_tables(spec))
    for r in trip.slice(0, a.limit).to_pylist():
        print(f"{r['s']} {r['p']} {r['o']} {r['t']} .")
    print(f"# mapping {m.name!r}: {trip.num_rows} triples, {dead.num_rows} dead letters, {filtered} filtered",
          file=sys.stderr)
    for r in dead.slice(0, a.limit).to_pylist():
        print(f"# dead: rec {r['rec']}: {r['reason']}", file=sys.stderr)
    return 0


def _citybench(a) -> int:
    from pipeline.citybench import DEFAULT_END, DEFAULT_START, citybench_spec

    sensors = [s.strip() for s in a.sensors.split(",") if s.strip()] if a.sensors else None
    doc = citybench_spec(sensors, input_dir=a.input, root=a.citybench, name=a.name, start=a.start or DEFAULT_START,
                         end=a.end or DEFAULT_END, frequency=a.frequency)
    if a.out and a.out.endswith(".json"):
        text = json.dumps(doc, indent=2)
    else:
        import yaml

        text = yaml.safe_dump(doc, sort_keys=False, width=200, default_flow_style=None)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    try:
        if a.cmd == "run":
            return _run(a)
        if a.cmd == "check":
            return _check(a)
        if a.cmd == "citybench-spec":
            return _citybench(a)
    except (SpecError, FileNotFoundError, InjectionError, json.JSONDecodeError, yaml.YAMLError) as e:
        print(f"jindou pipeline: {e}", file=sys.stderr)
        return 2
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
