"""The batch-id ledger: which batches each stream has already applied (idempotent ingestion).

An injector that may deliver a batch twice (a retry after a lost answer, a Spark task re-run)
sends a batch id with it; a batch id the ledger holds for the stream is answered
``{"duplicate": true, ...}`` before anything is parsed, interned or stored (:func:`duplicate`),
and an id is recorded only after its batch was stored, so a refused batch (400, 503) is applied
by its retry.

Journal. The applied ids (``batch_id`` of
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
"""

from __future__ import annotations

import collections
import os
import threading

import orjson

from engine.kv.persist import atomic_write
from engine.stream.adaptor import BadArrowBatch
from engine.stream.limits import BATCH_ID_MAX, shorten
from engine.stream.registry_store import RegistryError

__all__ = ["BatchLedger", "LEDGER_NAME", "check_batch_id", "duplicate"]

LEDGER_NAME = "stream-batches.jsonl"


def check_batch_id(batch_id) -> str | None:
    """A client's batch id (None: none given); a bad one is a 400 that changes nothing."""
    if batch_id is None:
        return None
    if not isinstance(batch_id, str) or not batch_id or len(batch_id) > BATCH_ID_MAX \
            or not batch_id.isprintable():
        raise BadArrowBatch(f"a batch id is a non-empty printable string of at most {BATCH_ID_MAX} "
                            f"characters, not {shorten(batch_id)}")
    return batch_id


def duplicate(ledger: BatchLedger, stream: str, batch_id: str | None, progress: int | None) -> dict | None:
    """The answer for a batch already applied to ``stream`` (nothing changes), else None."""
    if batch_id is None or not ledger.seen(stream, batch_id):
        return None
    doc = {"accepted": 0, "rejected": 0, "errors": [], "progress": progress, "duplicate": True,
           "batch_id": batch_id}
    first = ledger.outcome(stream, batch_id)
    if first is not None:   # what the first delivery was answered: a re-sender counts it once
        doc["original"] = {"accepted": first[0], "rejected": first[1]}
    return doc


def _outcome(accepted, rejected) -> tuple[int, int] | None:
    if isinstance(accepted, int) and isinstance(rejected, int) and not isinstance(accepted, bool) \
            and not isinstance(rejected, bool):
        return accepted, rejected
    return None


def _line(stream: str, batch_id: str, outcome: tuple[int, int] | None) -> bytes:
    rec = {"s": stream, "b": batch_id}
    if outcome is not None:
        rec["a"], rec["r"] = outcome
    return orjson.dumps(rec) + b"\n"


class _Recent:
    """The most recent ``limit`` ids of one stream with the (accepted, rejected) counts of
    their first delivery (None when unknown: journals written before they were kept):
    O(1) membership, insert and eviction."""

    __slots__ = ("limit", "order", "members")

    def __init__(self, limit: int):
        self.limit = limit
        self.order: collections.deque[str] = collections.deque()
        self.members: dict[str, tuple[int, int] | None] = {}

    def add(self, bid: str, outcome: tuple[int, int] | None = None) -> None:
        if bid in self.members:
            return
        self.order.append(bid)
        self.members[bid] = outcome
        while len(self.order) > self.limit:
            self.members.pop(self.order.popleft(), None)


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
                outcome = _outcome(rec.get("a"), rec.get("r"))
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise RegistryError(f"batch id journal {self.path} line {no} is invalid: {e}") from e
            self._recent(name).add(bid, outcome)
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

    def outcome(self, stream: str, batch_id: str) -> tuple[int, int] | None:
        """(accepted, rejected) of the batch's first delivery, None if unknown."""
        with self._lock:
            r = self._ids.get(stream)
            return None if r is None else r.members.get(batch_id)

    def count(self, stream: str) -> int:
        with self._lock:
            r = self._ids.get(stream)
            return 0 if r is None else len(r.order)

    def record(self, stream: str, batch_id: str, durable: bool = False, accepted: int | None = None,
               rejected: int | None = None) -> None:
        """Remember an applied batch and what it was answered; ``durable``: fsync the
        journal (its data is in the store)."""
        outcome = _outcome(accepted, rejected)
        with self._lock:
            self._recent(stream).add(batch_id, outcome)
            self._write(_line(stream, batch_id, outcome), durable)

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
                out += _line(name, bid, r.members.get(bid))
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
