"""The window journal: each stream's stored elements on disk, so windows survive a restart.

Without it a restarted server's windows held only the elements received after the restart, so
an instant evaluated after the restart (a query resumes after its durable result log's last
instant) did not have the content it would have had without one. With ``--data-dir`` every batch
appended to a stream's transient store is also appended, as term keys (N-Triples forms, blank
nodes already scoped to their POST) with their timestamps, to the stream's journal:
``<data_dir>/windows/<stream>/<n>.arrows``, Arrow IPC stream files (one schema, then one record
batch per stored batch). At start :meth:`WindowJournal.replay` reads them back into the
transient stores in their original order before the first instant is evaluated.

Keys rather than ids: a term first seen in a stream is interned in the in-memory dictionary, which
is not on disk until the store persists, so an id may mean nothing after a crash; a key always
does.

Durability is the ledger's: each record batch is flushed to the OS after its write (it survives a
crash of the server, not a power loss). A torn last record (crash mid-write) ends the replay of
that file at the last whole batch.

Bounded: a journal file is closed at ``SEGMENT_BYTES`` and a new one begun; a closed file is
deleted once the stream's GC has freed every timestamp it holds (all its triples have
``tau <= TransientStore.freed_tau``: no present or future instant reads them).

A batch sent with a batch id carries it (with what its POST was answered) as the record's custom
metadata; the replay gives it back (:attr:`JournalBatch.batch_id`) so the batch-id ledger learns
an id whose batch is in the journal even when the crash came between the journal's record and
the ledger's line -- otherwise the producer's re-delivery would be applied a second time.

Absorbed rows carry their :class:`~engine.stream.absorb.AbsorbLog` record: column ``a`` is null
for a window-only triple and, for a timeless one, whether it was new to the store's default graph
when absorbed. The record is written before the store commit of those rows, and names the store
snapshot number that commit makes (metadata ``c``; commits are numbered one by one under the
store's write lock, and a persistent store's number is durable with its data): a replay whose
persistent store is below that number commits the rows itself (a crash between the record and
the commit, :meth:`~engine.stream.ingest.Ingestor.replay_windows`). Replaying a batch re-adds those records, so after a restart an instant still sees
the stored default graph "as of event time" (absorbed triples with ``tau`` after it hidden), as it
would have without the restart. Files written before the column existed replay without records.
One case stays approximate: a triple absorbed by two streams out of timestamp order, the older
record in a file already deleted, is hidden from instants between the two timestamps.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

__all__ = ["JOURNAL_DIR", "SEGMENT_BYTES", "JournalBatch", "WindowJournal"]

log = logging.getLogger("jindou.stream")

JOURNAL_DIR = "windows"
#: a journal file is closed (and may be deleted once its elements are freed) past this size
SEGMENT_BYTES = 8 << 20

_SCHEMA = pa.schema([("s", pa.string()), ("p", pa.string()), ("o", pa.string()), ("t", pa.int64()),
                     ("a", pa.bool_())])
_FILE = re.compile(r"^(\d{12})\.arrows$")


@dataclass
class JournalBatch:
    """One stored batch read back: key columns and timestamps (non-decreasing)."""

    s: pa.Array
    p: pa.Array
    o: pa.Array
    t: np.ndarray
    #: per triple: None (window only) or whether it was new to the default graph when absorbed
    absorbed: pa.Array | None = None
    #: the client's batch id of the POST that stored it (None: sent without one)
    batch_id: str | None = None
    #: (accepted, rejected) that POST was answered, when known
    outcome: tuple[int, int] | None = None
    #: an absorbing batch: the store snapshot number its commit made (None: not recorded)
    commit_sn: int | None = None


def _plain(a) -> pa.Array:
    """A key column as string (dictionary-encoded and chunked inputs decoded; a POST's keys are
    far below string's 2 GiB offsets)."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    if a.type != pa.string():
        a = a.cast(pa.string())
    return a


def _batch_meta(meta) -> tuple[str | None, tuple[int, int] | None, int | None]:
    """The batch id, outcome and commit sn of a record's custom metadata (None each: none or
    unreadable)."""
    if not meta:
        return None, None, None
    try:
        d = {k.decode("utf-8") if isinstance(k, bytes) else k: v.decode("utf-8") if isinstance(v, bytes) else v
             for k, v in meta.items()}
        bid = d.get("b") or None
        outcome = (int(d["a"]), int(d["r"])) if "a" in d and "r" in d else None
        csn = int(d["c"]) if "c" in d else None
    except (UnicodeDecodeError, ValueError, AttributeError):
        return None, None, None
    return bid, outcome, csn


class _Segment:
    """The open journal file of one stream."""

    def __init__(self, path: str):
        self.path = path
        self.file = open(path, "ab")
        self.writer = pa.ipc.new_stream(self.file, _SCHEMA)
        self.file.flush()
        self.max_tau: int | None = None

    def write(self, batch: pa.RecordBatch, max_tau: int, meta: dict[str, str] | None = None) -> None:
        self.writer.write_batch(batch, custom_metadata=meta)
        self.file.flush()
        self.max_tau = max_tau

    def size(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.file.close()


class _StreamJournal:
    def __init__(self, root: str):
        self.root = root
        self.lock = threading.Lock()
        self.current: _Segment | None = None
        self.closed: list[tuple[str, int | None]] = []   # (path, max tau) of closed files, oldest first
        self.failed = False

    def _files(self) -> list[str]:
        try:
            names = sorted(n for n in os.listdir(self.root) if _FILE.match(n))
        except FileNotFoundError:
            return []
        return [os.path.join(self.root, n) for n in names]

    def _next_path(self) -> str:
        files = self._files()
        n = int(_FILE.match(os.path.basename(files[-1])).group(1)) + 1 if files else 0
        return os.path.join(self.root, f"{n:012d}.arrows")


class WindowJournal:
    """The journals of every stream under ``<data_dir>/windows`` (thread-safe; a stream's
    records are written under its ingestion lock, in the order they are stored)."""

    def __init__(self, data_dir: str, segment_bytes: int = SEGMENT_BYTES):
        self.root = os.path.join(data_dir, JOURNAL_DIR)
        os.makedirs(self.root, exist_ok=True)
        self.segment_bytes = int(segment_bytes)
        self._lock = threading.Lock()
        self._streams: dict[str, _StreamJournal] = {}

    def _dir(self, stream: str) -> str:
        # stream names are [A-Za-z0-9_.-]+ (registry); never "." or ".." as a directory
        return os.path.join(self.root, "s-" + stream)

    def _of(self, stream: str) -> _StreamJournal:
        with self._lock:
            j = self._streams.get(stream)
            if j is None:
                j = self._streams[stream] = _StreamJournal(self._dir(stream))
            return j

    # -- writing -------------------------------------------------------------
    def record(self, stream: str, keys, tau: np.ndarray, freed_tau: int | None,
               absorbed: pa.Array | None = None, batch_id: str | None = None,
               outcome: tuple[int, int] | None = None, commit_sn: int | None = None) -> None:
        """Append one stored batch (``keys``: the s, p, o key columns aligned with ``tau``).
        ``freed_tau``: the stream's GC horizon, below which closed files are deleted.
        ``absorbed``: per triple, null or its absorb record's "new" flag (module docstring).
        ``batch_id`` / ``outcome``: the POST's batch id and its (accepted, rejected) answer.
        ``commit_sn``: the store snapshot number the absorbed rows' commit is to make.

        A write error is logged once per stream and journaling of the stream stops (the
        element is stored and answered as usual; only its durability is lost)."""
        if len(tau) == 0:
            return
        j = self._of(stream)
        with j.lock:
            if j.failed:
                return
            try:
                s, p, o = (_plain(k) for k in keys)
                a = pa.nulls(len(tau), pa.bool_()) if absorbed is None else absorbed
                batch = pa.record_batch([s, p, o, pa.array(tau, type=pa.int64()), a], schema=_SCHEMA)
                if j.current is None:
                    os.makedirs(j.root, exist_ok=True)
                    j.current = _Segment(j._next_path())
                meta = None
                if batch_id is not None:
                    meta = {"b": batch_id}
                    if outcome is not None:
                        meta["a"], meta["r"] = str(int(outcome[0])), str(int(outcome[1]))
                if commit_sn is not None:
                    meta = meta or {}
                    meta["c"] = str(int(commit_sn))
                j.current.write(batch, int(tau[-1]), meta)
                if j.current.size() >= self.segment_bytes:
                    j.closed.append((j.current.path, j.current.max_tau))
                    j.current.close()
                    j.current = None
                self._drop_freed(j, freed_tau)
            except (OSError, pa.ArrowException):
                j.failed = True
                log.exception("stream %r: the window journal could not be written; its windows will "
                              "not survive a restart", stream)

    @staticmethod
    def _drop_freed(j: _StreamJournal, freed_tau: int | None) -> None:
        if freed_tau is None:
            return
        while j.closed and j.closed[0][1] is not None and j.closed[0][1] <= freed_tau:
            path, _ = j.closed.pop(0)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    # -- reading back ----------------------------------------------------------
    def replay(self, stream: str):
        """The stored batches of ``stream`` in their original order (an iterator of
        :class:`JournalBatch`). Files found at start are treated as closed: the next record
        begins a new file."""
        j = self._of(stream)
        with j.lock:
            files = j._files()
        for path in files:
            max_tau = None
            try:
                with pa.OSFile(path, "rb") as f:
                    reader = pa.ipc.open_stream(f)
                    while True:
                        try:
                            rb, meta = reader.read_next_batch_with_custom_metadata()
                        except StopIteration:
                            break
                        except (pa.ArrowInvalid, OSError):   # a torn last record: keep what is whole
                            log.warning("stream %r: %s ends in a partial record; replayed up to it",
                                        stream, path)
                            break
                        t = rb.column(3).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                        if len(t):
                            max_tau = int(t[-1])
                            a = rb.column(4) if rb.num_columns > 4 else None
                            bid, outcome, csn = _batch_meta(meta)
                            yield JournalBatch(rb.column(0), rb.column(1), rb.column(2), t,
                                               a if a is not None and a.null_count < len(a) else None,
                                               bid, outcome, csn)
            except (pa.ArrowInvalid, OSError):
                log.warning("stream %r: journal file %s is unreadable; skipped", stream, path)
            if max_tau is None:   # nothing in it (or unreadable): nothing to keep
                try:
                    os.unlink(path)
                except OSError:
                    pass
                continue
            with j.lock:
                j.closed.append((path, max_tau))

    def forget(self, stream: str) -> None:
        """Delete the stream's journal (the stream was deleted)."""
        with self._lock:
            j = self._streams.pop(stream, None)
        if j is not None:
            with j.lock:
                if j.current is not None:
                    j.current.close()
                    j.current = None
        shutil.rmtree(self._dir(stream), ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            js = list(self._streams.values())
        for j in js:
            with j.lock:
                if j.current is not None:
                    try:
                        j.current.close()
                    except (OSError, pa.ArrowException):
                        log.exception("closing a window journal file")
                    j.current = None
