"""Fixtures that run the REAL server: uvicorn (uvloop + httptools when present)
on 127.0.0.1 and a free port, in a background thread of the test process.

* ``server``      — one server for the session (open, no token); tests that
                    need a clean store use ``clean_server``.
* ``make_server`` — factory for servers with their own Config (token, limits...)
                    and optionally their own database object.

Every server is stopped at teardown, also when a test fails.

* ``env``         — an in-process (Database, StreamManager) pair, closed after the test.
* ``cluster_server`` / ``flight_cluster_server`` — one server per session over
                    a 3-worker cluster (``--workers 3``; shm / Arrow Flight
                    transport); stopping it closes the cluster and checks its
                    worker processes ended and its /dev/shm directory is gone.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass

import pytest

#: set by .ci/run (the README's test command): a test skipped for a missing
#: tool or data set fails the run instead of passing unnoticed
NO_SKIP = os.environ.get("JINDOU_NO_SKIP") == "1"


def _skipped(config) -> list:
    """Skipped tests, except those marked ``hardware``: a test needing a device this
    machine has not (an RDMA NIC) is skipped with that reason, and that is no failure."""
    rep = config.pluginmanager.get_plugin("terminalreporter")
    skipped = rep.stats.get("skipped", []) if rep is not None else []
    return [r for r in skipped if "hardware" not in getattr(r, "keywords", {})]


def pytest_sessionfinish(session, exitstatus):
    if NO_SKIP and exitstatus == 0 and _skipped(session.config):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if NO_SKIP and _skipped(config):
        terminalreporter.write_line(f"JINDOU_NO_SKIP=1: {len(_skipped(config))} test(s) skipped; every test "
                                    "must run here (a missing tool or data set?)", red=True)


@pytest.fixture
def env():
    """(database, stream manager) in process, for the stream-engine tests; the manager is closed."""
    from engine.database import Database  # noqa: PLC0415
    from engine.stream.manager import StreamManager  # noqa: PLC0415

    db = Database(shards=2)
    m = StreamManager(db)
    yield db, m
    m.close()


@pytest.fixture
def listener():
    """A recording HTTP listener on 127.0.0.1 (must not be contacted by parsers); closed after."""
    from tests.support.http_listener import Listener  # noqa: PLC0415

    li = Listener()
    try:
        yield li
    finally:
        li.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningServer:
    url: str
    app: object
    db: object
    config: object
    _server: object
    _thread: threading.Thread

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)

    def reset(self) -> None:
        """Empty the store (DROP ALL through the real HTTP interface)."""
        req = urllib.request.Request(self.url + "/update", data=b"DROP ALL", method="POST",
                                     headers={"Content-Type": "application/sparql-update"})
        if self.config.token:
            req.add_header("Authorization", "Bearer " + self.config.token)
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status in (200, 204)


def start_server(database=None, **overrides) -> RunningServer:
    import uvicorn

    from server.app import create_app
    from server.settings import Settings

    port = free_port()
    config = Settings(host="127.0.0.1", port=port, **overrides)
    app = create_app(config, database=database)
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    from server.app import http_protocol

    uc = uvicorn.Config(app, host="127.0.0.1", port=port, loop=loop, log_level="warning",
                        access_log=False, lifespan="on", http=http_protocol())
    server = uvicorn.Server(uc)
    thread = threading.Thread(target=server.run, name=f"jindou-test-{port}", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/status", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    return RunningServer(url, app, app.state.db, config, server, thread)


@pytest.fixture(scope="session")
def server():
    s = start_server()
    try:
        yield s
    finally:
        s.stop()


def _cluster_server(**overrides):
    """A server made from Settings(workers=3, ...) as `jindou serve --workers 3` makes it.
    The app does not close its database (the CLI does, after uvicorn returns), so this does,
    after the server stopped."""
    from tests.support.clusters import close_database  # noqa: PLC0415

    s = start_server(workers=3, **overrides)
    try:
        yield s
    finally:
        s.stop()
        close_database(s.db)


@pytest.fixture(scope="session")
def cluster_server():
    yield from _cluster_server()


@pytest.fixture(scope="session")
def flight_cluster_server():
    yield from _cluster_server(cluster_transport="flight")


@pytest.fixture
def clean_server(server):
    server.reset()
    yield server


@pytest.fixture
def make_server():
    started: list[RunningServer] = []

    def make(database=None, **overrides) -> RunningServer:
        s = start_server(database, **overrides)
        started.append(s)
        return s

    try:
        yield make
    finally:
        for s in started:
            s.stop()
