"""The ``jindou`` command: ``jindou serve ...``, ``jindou worker ...``, ``jindou bench ...`` and
``jindou pipeline ...``."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import time

from server.settings import Settings, SettingsFailure, add_arguments
from server.settings import load as load_settings

log = logging.getLogger("jindou.server")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jindou", description="Jindou: a SPARQL 1.1 server with continuous queries")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("serve", help="load data and serve SPARQL over HTTP",
                       epilog="Every flag can also be set by its JINDOU_* environment variable; a flag "
                              "given here wins. docs/LIMITS.md lists them all.")
    add_arguments(s)  # one option per declared setting (server/settings.py)

    b = sub.add_parser("bench", help="run benchmarks (see bench/)", add_help=False)
    b.add_argument("args", nargs=argparse.REMAINDER)

    pl = sub.add_parser("pipeline", help="Spark ingestion pipelines (see docs/PIPELINES.md)", add_help=False)
    pl.add_argument("args", nargs=argparse.REMAINDER)

    sub.add_parser("worker", help="run a store worker for `serve --cluster` (see docs/ARCHITECTURE.md)",
                   add_help=False)
    sub.add_parser("version", help="print the version")
    return p


def config_from_args(a: argparse.Namespace) -> Settings:
    """The settings of ``jindou serve``: the flags given, then JINDOU_* variables, then the
    defaults. A bad value (flag or variable) exits with one line naming it."""
    given = {k: v for k, v in vars(a).items() if k in Settings.model_fields}
    try:
        return load_settings(given)
    except SettingsFailure as e:
        raise SystemExit(f"jindou: {e}") from None


def load_files(db, config: Settings, progress: bool = True, out=None) -> int:
    """Load --data / --graph files (and the demo). Returns the number of files loaded."""
    from engine.errors import LoadError

    jobs: list[tuple[str | None, str]] = [(None, f) for f in config.data] + list(config.graph)
    for _, path in jobs:
        if not os.path.isfile(path):
            raise SystemExit(f"jindou: no such file: {path}")
    if config.demo:
        from server.demo import load_demo

        n = load_demo(db)
        _say(out, f"demo data loaded ({n} triples)")
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
        _say(out, f"loaded {path} into {where}: {n if n is not None else '?'} triples in {dt:.2f}s{extra}")
    return len(jobs)


def _say(out, text: str) -> None:
    """A start-up line: a log line when serving (stderr, the configured format); printed
    as ``jindou: ...`` when a caller passes its own stream."""
    if out is None:
        log.info("%s", text)
    else:
        print(f"jindou: {text}", file=out)


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


def serve(config: Settings, progress: bool = True) -> None:
    import uvicorn

    from server.app import create_app
    from server.logs import RequestLog
    from server.logs import setup as setup_logging

    setup_logging(config.log_level, config.log_format)
    # the store workers this process starts (--workers) log in the same format
    os.environ["JINDOU_LOG_FORMAT"] = config.log_format
    os.environ["JINDOU_LOG_LEVEL"] = config.log_level
    sock = bind_socket(config.host, config.port)
    # a SIGTERM while loading still runs the cleanup below (a cluster's workers stop);
    # uvicorn installs its own handler once it serves
    signal.signal(signal.SIGTERM, _exit_on_signal)
    db = None
    group = None
    group_dir = None
    server = None
    try:
        if config.processes > 1:
            group_dir, store_dir = _group_dirs(config)
        db = _make_store_or_exit(config)
        if group_dir is not None and config.data_dir is None:
            db.store = _shared_store(config, store_dir)
        load_files(db, config, progress=progress)
        if group_dir is not None:
            db.store.remap()  # the graph now lives only in the packs every process maps
        app = create_app(config, database=db)
        # Everything loaded so far lives for the whole run: keep it out of the GC's
        # generations so collections during requests stay short.
        gc.collect()
        gc.freeze()
        if group_dir is not None:
            _release_memory()  # what loading freed (the arrays now mapped) goes back to the system
        sock.listen(2048)
        server_class, http = uvicorn.Server, _http()
        if group_dir is not None:
            from server.processes import ProcessGroup, primary_protocol_class, primary_server_class

            group = ProcessGroup(config, db.store, sock, group_dir, store_dir, own_dir=True)
            group.start()
            server_class, http = primary_server_class(), primary_protocol_class()
        log.info("serving on http://%s:%d/sparql  (docs: /docs)%s", config.host, config.port,
                 f"  with {config.processes} processes" if group is not None else "")
        # our RequestLog writes the access lines (request id, latency); uvicorn's loggers keep
        # the handler setup_logging gave them (log_config=None)
        server = server_class(uvicorn.Config(RequestLog(app, access=config.access_log), host=config.host,
                                             port=config.port, loop=_loop(), http=http, access_log=False,
                                             log_config=None, log_level=config.log_level, lifespan="on",
                                             timeout_keep_alive=config.keep_alive,
                                             server_header=False))  # (no `server: uvicorn`: a header less per answer)
        server.group = group
        apply_switch_interval(config)
        server.run(sockets=[sock])
    except _Terminated:
        # after the clean-up below, end as the signal would have (exit status -SIGTERM,
        # what supervisors and uvicorn's own re-raise give)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        terminated = True
    else:
        terminated = False
    finally:
        if group is not None:
            group.stop()  # the query processes stop with the server; the shared memory goes
        elif group_dir is not None:
            import shutil

            shutil.rmtree(group_dir, ignore_errors=True)
        sock.close()
        if db is not None:
            db.close()  # a cluster's workers stop with the server
    if terminated:
        os.kill(os.getpid(), signal.SIGTERM)
    if server is None or not server.started:  # start-up failed (uvicorn logged why)
        raise SystemExit(3)


def apply_switch_interval(config: Settings) -> float:
    """Set the GIL switch interval of this (the serving) process; returns the previous one.

    Under one-shot load the event loop keeps running Python, so a thread it or the ingestion
    wakes (the continuous-query worker with a ready instant, a pooled query) may wait up to the
    interval for the GIL. Measured end to end (``bench result-latency``, docs/BENCHMARKS.md
    "Result latency under one-shot load") 0.5-1 ms did not lower the ready -> SSE latency on
    2 cores, so the default stays Python's 5 ms; the setting is there to measure with.
    Set after loading."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(config.switch_interval)
    return old


def _group_dirs(config: Settings) -> tuple[str, str]:
    """``--processes N``: refuse what cannot be combined with it, then the group's
    directory (shared memory) and the store's (``--data-dir`` or inside the group's)."""
    if config.workers or config.cluster:
        raise SystemExit("jindou: --processes cannot be combined with --workers/--cluster (the query "
                         "processes map a store that lives in the serving process; use one or the other)")
    try:
        import httptools  # noqa: F401
    except ImportError:
        raise SystemExit("jindou: --processes needs httptools (the connection hand-over is built on "
                         "uvicorn's httptools protocol)") from None
    from server.processes import group_directory

    d, store_dir, _ = group_directory(config)
    return d, store_dir


def _release_memory() -> None:
    """Return freed heap to the system: Arrow's pool and glibc's arenas keep what the
    load freed (for --processes, the graph now lives in the mapped packs)."""
    import contextlib

    with contextlib.suppress(Exception):
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)


def _shared_store(config: Settings, store_dir: str):
    """The store of ``--processes`` without ``--data-dir``: persistent in shared memory
    (the query processes map its packs), reported as in memory."""
    from engine.kv.store import Store

    store = Store(shards=config.shards, data_dir=store_dir)
    store.data_dir = None  # /status: not persistent (the directory goes with the server)
    return store


def _worker_logging() -> None:
    """A store worker's log lines: the format and level of the server that started it
    (JINDOU_LOG_FORMAT / JINDOU_LOG_LEVEL, exported by ``serve``), else text at info."""
    from server.logs import FORMATS
    from server.logs import setup as setup_logging
    from server.settings import LOG_LEVELS

    fmt = os.environ.get("JINDOU_LOG_FORMAT", "text").strip().lower()
    level = os.environ.get("JINDOU_LOG_LEVEL", "info").strip().lower()
    setup_logging(level if level in LOG_LEVELS else "info", fmt if fmt in FORMATS else "text")


def _make_store_or_exit(config: Settings):
    """The database, or one line saying why it cannot start (a cluster file that is missing or
    lists no workers, a worker unreachable or holding another cluster's data...)."""
    from engine.errors import JindouError
    from server.app import _make_database

    try:
        return _make_database(config)
    except (OSError, ValueError, RuntimeError, JindouError) as e:
        raise SystemExit(f"jindou: cannot start the store: {e}") from None


class _Terminated(BaseException):
    """SIGTERM arrived outside uvicorn's own handling (while loading, or re-raised by
    uvicorn after its shutdown): unwind so the store is closed, then end."""


def _exit_on_signal(signum, frame) -> None:
    raise _Terminated()


def _loop() -> str:
    try:
        import uvloop  # noqa: F401

        return "uvloop"
    except ImportError:
        return "asyncio"


def _http():
    from server.app import http_protocol  # httptools with the /sparql fast lane, else h11

    return http_protocol()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from bench.runner import main as bench_main

        return bench_main(argv[1:]) or 0
    if argv and argv[0] == "worker":
        from engine.cluster.worker import main as worker_main

        _worker_logging()

        return worker_main(argv[1:]) or 0
    if argv and argv[0] == "pipeline":
        from pipeline.cli import main as pipeline_main

        return pipeline_main(argv[1:]) or 0
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command == "serve":
        config = config_from_args(a)
        # progress bars are not log lines: none when the lines go to a log shipper as JSON
        serve(config, progress=not config.no_progress and config.log_format == "text")
        return 0
    if a.command == "version":
        from server.api.admin import VERSION

        print(f"jindou {VERSION}")
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
