"""Durable result logs and sink progress: ``<data_dir>/results.sqlite`` (stdlib sqlite3).

Why SQLite: the retained window of each log is "the last ``retain`` events", which is an
insert plus a range delete per query; a transaction gives the atomicity a home-made file
format would have to re-invent, and the library is in the standard library.

Tables::

    events(query, id, event, data, start, same_as)   -- one row per retained event (PK query, id)
    logs(query, dropped_last)                         -- id of the newest event dropped by ``retain``
    sinks(query, name, config, delivered)             -- a sink's JSON config and its last delivered id

Durability policy (group commit): the evaluation worker never waits for the disk. An appended
event is *pending*; the writer thread takes every pending event of every log, writes them in
one transaction (WAL journal, ``synchronous=FULL``: the commit is fsynced) and only then makes
them visible to SSE clients and sinks (:meth:`ResultLog._publish`). So an event any client or
sink has seen is on disk: after a crash (SIGKILL included) every delivered instant is replayed
from the file with the same id and content, and the evaluation resumes at the instant after
the log's last one (never re-evaluating a delivered instant). Instants evaluated but not yet
committed at the crash were seen by nobody; they are evaluated again after the restart.

A sink's progress (``delivered``) is committed (fsynced) after each successful delivery.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time

from engine.stream.registry_store import RegistryError

__all__ = ["ResultStore", "RESULTS_NAME"]

RESULTS_NAME = "results.sqlite"
log = logging.getLogger("jindou.stream")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    query TEXT NOT NULL, id INTEGER NOT NULL, event TEXT NOT NULL, data BLOB NOT NULL,
    start INTEGER, same_as INTEGER, PRIMARY KEY (query, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS logs (query TEXT PRIMARY KEY, dropped_last INTEGER);
CREATE TABLE IF NOT EXISTS sinks (
    query TEXT NOT NULL, name TEXT NOT NULL, config TEXT NOT NULL, delivered INTEGER,
    PRIMARY KEY (query, name));
"""


class ResultStore:
    """One SQLite file per data dir; one writer thread doing group commits of pending events."""

    def __init__(self, data_dir: str):
        os.makedirs(data_dir, exist_ok=True)
        self.path = os.path.join(os.fspath(data_dir), RESULTS_NAME)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            raise RegistryError(f"cannot open the result log file {self.path}: {e}") from e
        self._lock = threading.Lock()          # the connection
        self._cv = threading.Condition()       # dirty logs, writer state
        self._dirty: dict[int, object] = {}    # id(log) -> ResultLog with pending events
        self._busy = False
        self._closing = False
        self.commits = 0
        self._writer = threading.Thread(target=self._run, name="jindou-resultlog", daemon=True)
        self._writer.start()

    # -- reading at (re)registration ---------------------------------------------
    def load(self, query: str) -> tuple[list[tuple], int | None]:
        """The retained rows ``(id, event, data, start, same_as)`` of ``query`` in id order and
        the id of the newest dropped event (``None`` if none was dropped)."""
        with self._lock:
            rows = self._db.execute("SELECT id, event, data, start, same_as FROM events WHERE query=? "
                                    "ORDER BY id", (query,)).fetchall()
            d = self._db.execute("SELECT dropped_last FROM logs WHERE query=?", (query,)).fetchone()
        return rows, (None if d is None else d[0])

    def queries(self) -> set[str]:
        with self._lock:
            names = {r[0] for r in self._db.execute("SELECT DISTINCT query FROM events")}
            names |= {r[0] for r in self._db.execute("SELECT query FROM logs")}
            names |= {r[0] for r in self._db.execute("SELECT DISTINCT query FROM sinks")}
        return names

    def forget(self, query: str) -> None:
        """Remove everything of ``query`` (deleted, its log closed): a later query of that name
        starts empty. The flush first lets a commit in flight end, after which a closed log
        gives the writer nothing more."""
        self.flush()
        with self._lock, self._db:
            self._db.execute("BEGIN")
            for table in ("events", "logs", "sinks"):
                self._db.execute(f"DELETE FROM {table} WHERE query=?", (query,))  # noqa: S608 - fixed names

    # -- the writer --------------------------------------------------------------
    def submit(self, rlog) -> None:
        """``rlog`` has pending events: the writer commits and then publishes them."""
        with self._cv:
            self._dirty[id(rlog)] = rlog
            self._cv.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every event submitted so far is committed and published."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._dirty or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self) -> None:
        self.flush()
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._writer.join(timeout=30)
        with self._lock:
            self._db.close()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._dirty and not self._closing:
                    self._cv.wait()
                if not self._dirty:
                    return
                logs = list(self._dirty.values())
                self._dirty.clear()
                self._busy = True
            batch = []
            for rl in logs:
                try:
                    batch.append((rl, rl._take_pending()))
                except Exception:  # noqa: BLE001 - one log's failure must not stop every log's writer
                    log.exception("result log %s: taking its pending events", rl.durable_name)
            try:
                self._write(batch)
            except sqlite3.Error:
                log.exception("cannot write the result logs to %s (will retry)", self.path)
                for rl, (evs, dropped, _cut) in batch:
                    rl._requeue(evs, dropped)
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
                time.sleep(1.0)
                continue
            for rl, (evs, dropped, cut) in batch:
                try:
                    rl._publish(evs, dropped, cut)
                except Exception:  # noqa: BLE001 - one log's listener must not stop every log's writer
                    log.exception("result log %s: publishing committed events", rl.durable_name)
            with self._cv:
                self._busy = False
                self.commits += 1
                self._cv.notify_all()

    def _write(self, batch) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN")
            # one statement for the events of every log (per-statement cost dominates small batches)
            self._db.executemany(
                "INSERT OR REPLACE INTO events (query, id, event, data, start, same_as) VALUES (?,?,?,?,?,?)",
                [(rl.durable_name, *e) for rl, (evs, _d, _c) in batch   # (id, event, data, start, same_as)
                 for e in evs])
            for rl, (_evs, dropped, cut) in batch:
                q = rl.durable_name
                if dropped is not None:
                    cut = dropped if cut is None else max(cut, dropped)
                if cut is not None:
                    self._db.execute("DELETE FROM events WHERE query=? AND id<=?", (q, cut))
                    self._db.execute("INSERT INTO logs (query, dropped_last) VALUES (?, ?) ON CONFLICT(query) "
                                     "DO UPDATE SET dropped_last=max(dropped_last, excluded.dropped_last)",
                                     (q, cut))

    # -- sinks -------------------------------------------------------------------
    def sink_rows(self) -> list[tuple[str, str, str, int | None]]:
        """Every persisted sink: ``(query, name, config JSON, delivered id)``."""
        with self._lock:
            return self._db.execute("SELECT query, name, config, delivered FROM sinks "
                                    "ORDER BY query, name").fetchall()

    def save_sink(self, query: str, name: str, config: str, delivered: int | None) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO sinks (query, name, config, delivered) VALUES (?,?,?,?)",
                             (query, name, config, delivered))

    def drop_sink(self, query: str, name: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM sinks WHERE query=? AND name=?", (query, name))

    def delivered(self, query: str, name: str, upto: int) -> None:
        """Sink ``name`` of ``query`` delivered every event up to id ``upto`` (committed, fsynced)."""
        with self._lock, self._db:
            self._db.execute("UPDATE sinks SET delivered=? WHERE query=? AND name=?", (upto, query, name))
