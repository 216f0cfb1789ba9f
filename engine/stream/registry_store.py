"""The on-disk registry of streams and continuous queries (``<data_dir>/streams.json``).

Format (JSON, UTF-8)::

    {"format": "jindou-stream-registry", "version": 1,
     "streams": [{"name": "s1", "iri": "http://ex.org/s1", "absorb": "all",
                  "clock": "event", "progress": 1700000000000}, ...],
                 # a derived stream also has "producer": "<query name>" (REGISTER STREAM)
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

Applied batch ids are journaled next to it by :class:`engine.stream.ledger.BatchLedger`
(``stream-batches.jsonl``).

The store's own files (``MANIFEST.json``, ``pack-*``, ``dict-*``, see
:mod:`engine.kv.persist`) share the directory; its garbage collection only
touches those names.
"""

from __future__ import annotations

import os
import threading

import orjson

from engine.errors import JindouError
from engine.kv.persist import atomic_write

__all__ = ["RegistryError", "RegistryFile", "REGISTRY_NAME", "FORMAT", "VERSION"]

REGISTRY_NAME = "streams.json"
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
        if s.get("producer") is not None and not isinstance(s.get("producer"), str):
            raise bad(f"streams[{i}].producer must be a string (the REGISTER STREAM query writing it)")
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
