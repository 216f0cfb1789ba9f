"""The ``jindou`` command: ``jindou serve ...``, ``jindou bench ...`` and ``jindou pipeline ...``."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys
import time

from server.config import Config


def _graph_arg(value: str) -> tuple[str, str]:
    """IRI=FILE; IRIs may contain '=', so the file is what follows the last '='
    unless only the first split names an existing file."""
    if "=" not in value:
        raise argparse.ArgumentTypeError(f"--graph wants IRI=FILE, got {value!r}")
    iri, path = value.rsplit("=", 1)
    if not os.path.exists(path):
        first_iri, first_path = value.split("=", 1)
        if os.path.exists(first_path):
            iri, path = first_iri, first_path
    if not iri or ":" not in iri:
        raise argparse.ArgumentTypeError(f"--graph: {iri!r} is not an absolute IRI")
    return iri, path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jindou", description="Jindou: a SPARQL 1.1 server with continuous queries")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("serve", help="load data and serve SPARQL over HTTP")
    s.add_argument("--data", action="append", default=[], metavar="FILE",
                   help="RDF file to load into the default graph (repeatable; format by extension)")
    s.add_argument("--graph", action="append", default=[], type=_graph_arg, metavar="IRI=FILE",
                   help="RDF file to load into the named graph IRI (repeatable)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--data-dir", default=None, metavar="DIR", help="persist the store in DIR (default: in memory)")
    s.add_argument("--token", default=os.environ.get("JINDOU_TOKEN"),
                   help="Bearer token required for writes (default: $JINDOU_TOKEN; none = open)")
    s.add_argument("--read-token", default=os.environ.get("JINDOU_READ_TOKEN"),
                   help="Bearer token required for reads too (default: $JINDOU_READ_TOKEN; none = open reads)")
    s.add_argument("--cors-origin", default="*", help="Access-Control-Allow-Origin value (default *)")
    s.add_argument("--shards", type=int, default=4)
    s.add_argument("--demo", action="store_true", help="start with the built-in demo data")
    s.add_argument("--lenient", action="store_true", help="skip bad lines of data files instead of failing")
    s.add_argument("--allow-load", action="store_true", help="allow SPARQL Update LOAD <url>")
    s.add_argument("--query-timeout", type=float, default=30.0, metavar="S")
    s.add_argument("--max-rows", type=int, default=5_000_000, metavar="N")
    s.add_argument("--query-memory", type=int, default=768 << 20, metavar="BYTES",
                   help="per-query memory budget for intermediate results, computed strings and the answer being built (default 768 MiB; 0 = unlimited)")
    s.add_argument("--max-response-bytes", type=int, default=256 << 20, metavar="BYTES",
                   help="largest query answer; a bigger one is refused before it is built "
                        "(default 256 MiB; 0 = unlimited)")
    s.add_argument("--max-body", type=int, default=64 << 20, metavar="BYTES", help="largest accepted request body")
    s.add_argument("--max-concurrent", type=int, default=32, metavar="N",
                   help="queries running at once before 503 (default 32)")
    s.add_argument("--inline-ms", type=float, default=2.0, metavar="MS",
                   help="queries whose shape last ran faster than this run on the event loop, others in "
                        "the thread pool (0 = always the thread pool; default 2)")
    s.add_argument("--retain", type=int, default=1000, metavar="N",
                   help="result instants kept per continuous query for SSE resume (default 1000)")
    s.add_argument("--idle-after", type=int, default=100, metavar="N",
                   help="report a run of at least N unchanged continuous-query instants as one SSE "
                        "'idle' event (default 100)")
    s.add_argument("--transient-budget", type=int, default=256 << 20, metavar="BYTES",
                   help="memory for stream window data (default 256 MiB)")
    s.add_argument("--sse-buffer", type=int, default=1000, metavar="N",
                   help="events an SSE client may fall behind before it is cut off (default 1000)")
    s.add_argument("--sse-keepalive", type=float, default=15.0, metavar="S",
                   help="seconds between SSE keep-alive comments (default 15)")
    s.add_argument("--access-log", action="store_true")
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.add_argument("--no-progress", action="store_true", help="no progress bars while loading")

    b = sub.add_parser("bench", help="run benchmarks (see bench/)", add_help=False)
    b.add_argument("args", nargs=argparse.REMAINDER)

    pl = sub.add_parser("pipeline", help="Spark ingestion pipelines (see docs/PIPELINES.md)", add_help=False)
    pl.add_argument("args", nargs=argparse.REMAINDER)

    sub.add_parser("version", help="print the version")
    return p


def config_from_args(a: argparse.Namespace) -> Config:
    return Config(
        host=a.host, port=a.port, data=list(a.data), graphs=list(a.graph), data_dir=a.data_dir,
        token=a.token or None, read_token=a.read_token or None, cors_origin=a.cors_origin, shards=a.shards, demo=a.demo, lenient=a.lenient, allow_load=a.allow_load,
        query_timeout=a.query_timeout, max_rows=a.max_rows, max_body=a.max_body,
        query_memory=a.query_memory, max_response_bytes=a.max_response_bytes,
        max_concurrent_queries=a.max_concurrent, inline_threshold=a.inline_ms / 1000.0, access_log=a.access_log, log_level=a.log_level,
        stream_retain=a.retain, transient_budget=a.transient_budget, sse_buffer=a.sse_buffer,
        sse_keepalive=a.sse_keepalive, stream_idle_after=a.idle_after,
    )


def load_files(db, config: Config, progress: bool = True, out=sys.stderr) -> int:
    """Load --data / --graph files (and the demo). Returns the number of files loaded."""
    from engine.errors import LoadError

    jobs: list[tuple[str | None, str]] = [(None, f) for f in config.data] + list(config.graphs)
    for _, path in jobs:
        if not os.path.isfile(path):
            raise SystemExit(f"jindou: no such file: {path}")
    if config.demo:
        from server.demo import load_demo

        n = load_demo(db)
        print(f"jindou: demo data loaded ({n} triples)", file=out)
    for graph, path in jobs:
        t0 = time.perf_counter()
        try:
            report = db.load_file(path, graph=graph, lenient=config.lenient, progress=progress)
        except LoadError as e:
            raise SystemExit(f"jindou: cannot load {path}: {e}") from None
        dt = time.perf_counter() - t0
        n = getattr(report, "triples", None)
        if n is None and isinstance(report, dict):
            n = report.get("triples")
        where = "default graph" if graph is None else f"<{graph}>"
        extra = ""
        skipped = getattr(report, "skipped", None)
        if skipped:
            extra = f", {skipped} bad lines skipped"
        print(f"jindou: loaded {path} into {where}: {n if n is not None else '?'} triples in {dt:.2f}s{extra}",
              file=out)
    return len(jobs)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket, or exit with one line saying why (port taken,
    no permission, unknown host): before any data is loaded, so a busy port
    fails at once, and "serving on" is printed only for a port that is ours."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise SystemExit(f"jindou: cannot listen on {where}: unknown host ({getattr(e, 'strerror', None) or e})") \
            from None
    except OverflowError:
        raise SystemExit(f"jindou: cannot listen on {where}: port out of range") from None
    family, type_, proto, _, addr = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        why = (e.strerror or str(e)).lower()
        raise SystemExit(f"jindou: cannot listen on {where}: {why}") from None
    sock.set_inheritable(True)
    return sock


def serve(config: Config, progress: bool = True) -> None:
    import uvicorn

    from server.app import _make_database, create_app

    logging.basicConfig(level=getattr(logging, config.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sock = bind_socket(config.host, config.port)
    try:
        db = _make_database(config)
        load_files(db, config, progress=progress)
        app = create_app(config, database=db)
        # Everything loaded so far lives for the whole run: keep it out of the GC's
        # generations so collections during requests stay short.
        gc.collect()
        gc.freeze()
        sock.listen(2048)
        print(f"jindou: serving on http://{config.host}:{config.port}/sparql  (docs: /docs)", file=sys.stderr)
        server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, loop=_loop(), http=_http(),
                                               access_log=config.access_log, log_level=config.log_level,
                                               lifespan="on", timeout_keep_alive=30))
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:  # start-up failed (uvicorn logged why)
        raise SystemExit(3)


def _loop() -> str:
    try:
        import uvloop  # noqa: F401

        return "uvloop"
    except ImportError:
        return "asyncio"


def _http() -> str:
    try:
        import httptools  # noqa: F401

        return "httptools"
    except ImportError:
        return "h11"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from bench.runner import main as bench_main

        return bench_main(argv[1:]) or 0
    if argv and argv[0] == "pipeline":
        from pipeline.cli import main as pipeline_main

        return pipeline_main(argv[1:]) or 0
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command == "serve":
        serve(config_from_args(a), progress=not a.no_progress)
        return 0
    if a.command == "version":
        from server.api.admin import VERSION

        print(f"jindou {VERSION}")
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
