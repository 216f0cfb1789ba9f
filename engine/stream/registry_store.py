"""The on-disk registry of streams and continuous queries (``<data_dir>/streams.json``).

Format (JSON, UTF-8)::

    {"format": "jindou-stream-registry", "version": 1,
     "streams": [{"name": "s1", "iri": "http://ex.org/s1", "absorb": "all",
                  "clock": "event", "progress": 1700000000000}, ...],
     "queries": [{"name": "q1", "text": "REGISTER QUERY q1 AS ..."}, ...]}

``absorb`` is ``"none"``, ``"all"`` or a list of predicate IRIs; ``progress``
is the stream's progress ``P`` in integer milliseconds (``null`` before the
stream received a timestamp). Streams and queries are listed in registration
order; queries are registered again in that order.

Writes are atomic: the new content goes to ``streams.json.tmp``, which is
fsynced, ``os.replace``-d over ``streams.json``, and the directory is fsynced.
A crash at any point leaves either the previous or the new file complete; a
left-over ``streams.json.tmp`` is ignored (and removed) when the registry is
loaded. A registry that cannot be read or does not have the expected shape
raises :class:`RegistryError` naming the file: it is never silently reset.

Applied batch ids (idempotent ingestion, ``batch_id`` of
:meth:`~engine.stream.manager.StreamManager.ingest_arrow`) are kept by
:class:`BatchLedger` in ``<data_dir>/stream-batches.jsonl``: an append-only
journal, one JSON object a line (``{"s": stream, "b": batch id}``, or
``{"s": stream, "reset": true}`` when a stream is deleted), compacted to the
retained ids (the most recent ``limit`` per stream) by an atomic rewrite once
it holds about twice as many lines. A batch whose absorbed triples were
committed to the store is journaled with an fsync right after that commit, so
a restarted server skips its re-delivery; other ids are flushed to the OS
(they survive a server crash, not a power loss). A torn last line (crash
during a write) is ignored.

The store's own files (``MANIFEST.json``, ``pack-*``, ``dict-*``, see
:mod:`engine.kv.persist`) share the directory; its garbage collection only
touches those names.
"""

from __future__ import annotations

import collections
import os
import threading

import orjson

from engine.errors import JindouError
from engine.kv.persist import atomic_write

__all__ = ["RegistryError", "RegistryFile", "BatchLedger", "REGISTRY_NAME", "LEDGER_NAME", "FORMAT", "VERSION"]

REGISTRY_NAME = "streams.json"
LEDGER_NAME = "stream-batches.jsonl"
FORMAT = "jindou-stream-registry"
VERSION = 1


class RegistryError(JindouError):
    """The stream registry file cannot be read or written."""

    kind = "registry"


def empty_registry() -> dict:
    return {"format": FORMAT, "version": VERSION, "streams": [], "queries": []}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate(doc, path: str) -> dict:
    """Check the shape of a loaded registry; :class:`RegistryError` naming ``path`` if wrong."""

    def bad(why: str) -> RegistryError:
        return RegistryError(f"stream registry {path} is invalid: {why}")

    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    if doc.get("format") != FORMAT:
        raise bad(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise bad(f"unsupported version {doc.get('version')!r} (this server reads version {VERSION})")
    streams, queries = doc.get("streams"), doc.get("queries")
    if not isinstance(streams, list) or not isinstance(queries, list):
        raise bad('"streams" and "queries" must be lists')
    for i, s in enumerate(streams):
        if not isinstance(s, dict):
            raise bad(f"streams[{i}] is not an object")
        for k in ("name", "iri", "clock"):
            if not isinstance(s.get(k), str):
                raise bad(f"streams[{i}].{k} must be a string")
        absorb = s.get("absorb")
        if not (isinstance(absorb, str) or (isinstance(absorb, list) and all(isinstance(a, str) for a in absorb))):
            raise bad(f"streams[{i}].absorb must be a string or a list of strings")
        p = s.get("progress")
        if p is not None and not _is_int(p):
            raise bad(f"streams[{i}].progress must be an integer or null")
    for i, q in enumerate(queries):
        if not isinstance(q, dict) or not isinstance(q.get("name"), str) or not isinstance(q.get("text"), str):
            raise bad(f"queries[{i}] must be an object with string name and text")
    return doc


class RegistryFile:
    """Atomic load/save of ``<data_dir>/streams.json`` (saves are serialized)."""

    def __init__(self, data_dir: str, name: str = REGISTRY_NAME):
        self.dir = os.fspath(data_dir)
        self.path = os.path.join(self.dir, name)
        self.tmp = self.path + ".tmp"
        self._lock = threading.Lock()
        self.writes = 0

    def load(self) -> dict | None:
        """The registry, or ``None`` if there is none yet. Removes a left-over temp file."""
        os.makedirs(self.dir, exist_ok=True)
        if os.path.exists(self.tmp):   # an interrupted save: the previous file is authoritative
            try:
                os.remove(self.tmp)
            except OSError:
                pass
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RegistryError(f"cannot read stream registry {self.path}: {e}") from e
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise RegistryError(f"stream registry {self.path} is not valid JSON: {e}") from e
        return validate(doc, self.path)

    def save(self, doc: dict) -> None:
        """Replace the registry atomically with ``doc`` (temp file, fsync, rename, fsync dir)."""
        data = orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
        with self._lock:
            try:
                atomic_write(self.path, data)
            except OSError as e:
                raise RegistryError(f"cannot write stream registry {self.path}: {e}") from e
            self.writes += 1


class _Recent:
    """The most recent ``limit`` ids of one stream: O(1) membership, insert and eviction."""

    __slots__ = ("limit", "order", "members")

    def __init__(self, limit: int):
        self.limit = limit
        self.order: collections.deque[str] = collections.deque()
        self.members: set[str] = set()

    def add(self, bid: str) -> None:
        if bid in self.members:
            return
        self.order.append(bid)
        self.members.add(bid)
        while len(self.order) > self.limit:
            self.members.discard(self.order.popleft())


class BatchLedger:
    """Per stream, the ids of the batches already applied (bounded; journaled with a data dir).

    Thread-safe (one lock, held for O(1) work plus a journal line). Callers serialize the
    check-then-record of one stream themselves (the stream's lock)."""

    def __init__(self, data_dir: str | None = None, limit: int = 100_000, name: str = LEDGER_NAME):
        if limit <= 0:
            raise ValueError("the batch id limit must be positive")
        self.limit = int(limit)
        self._lock = threading.Lock()
        self._ids: dict[str, _Recent] = {}
        self.path = None if data_dir is None else os.path.join(os.fspath(data_dir), name)
        self._f = None
        self._lines = 0
        if self.path is not None:
            self._load()
            self._f = open(self.path, "ab")   # noqa: SIM115 - kept open for appends, closed in close()

    def _load(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return
        except OSError as e:
            raise RegistryError(f"cannot read the batch id journal {self.path}: {e}") from e
        lines = raw.split(b"\n")
        torn = lines.pop() if lines else b""   # after the last newline: b"" or a torn write
        for no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
                name = rec["s"]
                if not isinstance(name, str):
                    raise TypeError("stream name")
                if rec.get("reset"):
                    self._ids.pop(name, None)
                    continue
                bid = rec["b"]
                if not isinstance(bid, str):
                    raise TypeError("batch id")
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise RegistryError(f"batch id journal {self.path} line {no} is invalid: {e}") from e
            self._recent(name).add(bid)
        self._lines = len(lines)
        if torn.strip():   # rewrite without the torn tail, so later appends start on a fresh line
            self._compact_locked(reopen=False)

    def _recent(self, stream: str) -> _Recent:
        r = self._ids.get(stream)
        if r is None:
            r = self._ids[stream] = _Recent(self.limit)
        return r

    def seen(self, stream: str, batch_id: str) -> bool:
        with self._lock:
            r = self._ids.get(stream)
            return r is not None and batch_id in r.members

    def count(self, stream: str) -> int:
        with self._lock:
            r = self._ids.get(stream)
            return 0 if r is None else len(r.order)

    def record(self, stream: str, batch_id: str, durable: bool = False) -> None:
        """Remember an applied batch; ``durable``: fsync the journal (its data is in the store)."""
        with self._lock:
            self._recent(stream).add(batch_id)
            self._write(orjson.dumps({"s": stream, "b": batch_id}) + b"\n", durable)

    def forget(self, stream: str) -> None:
        """A deleted stream: its ids no longer apply (a new stream of that name starts empty)."""
        with self._lock:
            if self._ids.pop(stream, None) is None:
                return
            self._write(orjson.dumps({"s": stream, "reset": True}) + b"\n", True)

    def _write(self, line: bytes, durable: bool) -> None:
        if self._f is None:
            return
        try:
            self._f.write(line)
            self._f.flush()
            if durable:
                os.fsync(self._f.fileno())
        except OSError as e:
            raise RegistryError(f"cannot write the batch id journal {self.path}: {e}") from e
        self._lines += 1
        if self._lines > 2 * sum(len(r.order) for r in self._ids.values()) + 1024:
            self._compact_locked()

    def _compact_locked(self, reopen: bool = True) -> None:
        """Rewrite the journal with the retained ids only (atomic)."""
        out = bytearray()
        n = 0
        for name, r in self._ids.items():
            for bid in r.order:
                out += orjson.dumps({"s": name, "b": bid}) + b"\n"
                n += 1
        if reopen and self._f is not None:
            self._f.close()
        try:
            atomic_write(self.path, bytes(out))
        except OSError as e:
            raise RegistryError(f"cannot rewrite the batch id journal {self.path}: {e}") from e
        finally:
            if reopen:
                self._f = open(self.path, "ab")   # noqa: SIM115
        self._lines = n

    def close(self) -> None:
        with self._lock:
            if self._f is not None:
                try:
                    self._f.flush()
                    os.fsync(self._f.fileno())
                except OSError:
                    pass
                self._f.close()
                self._f = None
