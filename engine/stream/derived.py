"""Derived streams: C-SPARQL's ``REGISTER STREAM <name> AS CONSTRUCT ...`` and RSP-QL's
``REGISTER RSTREAM|ISTREAM|DSTREAM <iri> AS CONSTRUCT ...`` (the stream ``<iri>``, named after its
last segment; with ISTREAM / DSTREAM each element is the instant's difference).

The query's result at each instant ``t`` (its CONSTRUCT triples) becomes one element of the
stream ``<name>`` with event time ``t``, which other continuous queries read like any stream
(``FROM STREAM <name> [RANGE ...]``). The element goes through the ordinary ingestion path
(:meth:`engine.stream.ingest.Ingestor.ingest_graph`: N-Triples parse, intern, admission, one
transient batch, publish), with the batch id ``<query>@<t>`` so that an instant evaluated
again (at-least-once) is not stored twice. After instant ``t`` the stream's progress is raised
to ``t + STEP`` (a heartbeat; before its first instant, to that instant): the producer's next instant is the earliest time it can still
write, so readers' instants before it fire without waiting.

:class:`DerivedStreamLog` sits in front of the producer's result log: every event the
scheduler appends is kept as usual and then written to the stream -- a ``result`` event with
its triples (an ``error`` event writes nothing but still advances the progress), an ``idle``
run (the same result at every instant of the run) one element per instant. A write that fails
(the stream's transient budget, a late element after a restart) is logged and counted in
``errors``; the producer's own results are never affected.
"""

from __future__ import annotations

import logging

import orjson

from engine.errors import JindouError
from engine.stream.limits import TIME_MAX
from engine.stream.progress import LateElementError

__all__ = ["DERIVED_IRI_PREFIX", "DerivedStreamLog", "DerivedWriter", "derived_iri"]

log = logging.getLogger("jindou.stream")

#: the IRI of the stream ``REGISTER STREAM <name>`` creates
DERIVED_IRI_PREFIX = "urn:jindou:stream:"
_NTRIPLES = "application/n-triples"


def derived_iri(name: str) -> str:
    return DERIVED_IRI_PREFIX + name


class DerivedWriter:
    """Writes a producer's instants into its derived stream (on the evaluation worker)."""

    def __init__(self, ingestor, stream: str, query: str, step: int, diff: bool = False):
        """``diff``: the producer is ISTREAM / DSTREAM (RSP-QL), its instants' triples are differences,
        and an unchanged run adds no element (an empty difference at each of its instants)."""
        self.ingest = ingestor
        self.diff = diff
        self.stream = stream
        self.query = query
        self.step = int(step)
        self.last: bytes | None = None   # N-Triples of the last evaluated instant (idle runs repeat it)
        self.elements = 0
        self.errors = 0
        self.started = False   # the stream's progress was raised to the first instant written

    def _write(self, t: int, nt: bytes) -> None:
        try:
            self.ingest.ingest_graph(self.stream, nt, _NTRIPLES, int(t), batch_id=f"{self.query}@{t}")
            self.elements += 1
        except LateElementError:
            # instant t was written before a restart (the stream's progress is past it)
            log.debug("derived stream %s: instant %d is already behind its progress", self.stream, t)
        except JindouError as e:
            self.errors += 1
            log.warning("derived stream %s: instant %d not written: %s", self.stream, t, e)

    def _advance(self, t: int) -> None:
        nxt = int(t) + self.step
        if nxt > TIME_MAX:
            return
        try:
            self.ingest.heartbeat(self.stream, nxt)
        except JindouError as e:
            self.errors += 1
            log.warning("derived stream %s: progress not advanced to %d: %s", self.stream, nxt, e)

    def _start(self, t: int) -> None:
        """Before the producer's first instant (in this process): raise the stream's progress to
        it. Nothing of the stream can be older, and a reader waiting for the stream's first
        timestamp then starts at the producer's first instant whether or not that instant's
        result is empty (else an empty one showed up only as the heartbeat ``t + STEP``)."""
        self.started = True
        try:
            self.ingest.heartbeat(self.stream, int(t))
        except JindouError as e:
            self.errors += 1
            log.warning("derived stream %s: progress not raised to %d: %s", self.stream, t, e)

    def instant(self, t: int, data: bytes) -> None:
        if not self.started:
            self._start(t)
        try:
            doc = orjson.loads(data)
            nt = None if "error" in doc else doc.get("triples")
            self.last = nt.encode("utf-8") if nt else None
            if self.last:
                self._write(t, self.last)
            self._advance(t)
        except Exception:  # noqa: BLE001 - the producer's own result is kept whatever happens here
            self.errors += 1
            log.exception("derived stream %s: instant %d", self.stream, t)

    def run(self, start: int, end: int) -> None:
        """An idle run ``start..end``: the last evaluated result at every instant of it."""
        if not self.started:
            self._start(start)
        try:
            if self.last and not self.diff:
                for t in range(int(start), int(end) + 1, self.step):
                    self._write(t, self.last)
            self._advance(end)
        except Exception:  # noqa: BLE001
            self.errors += 1
            log.exception("derived stream %s: instants %d..%d", self.stream, start, end)

    def info(self) -> dict:
        return {"stream": self.stream, "elements": self.elements, "errors": self.errors}


class DerivedStreamLog:
    """The producer's result log, each appended event also written to the derived stream
    (every other attribute is the wrapped log's)."""

    def __init__(self, inner, writer: DerivedWriter):
        self._inner = inner
        self.writer = writer

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)

    def append(self, t: int, data: bytes) -> None:
        self._inner.append(t, data)
        self.writer.instant(t, data)

    def append_idle(self, start: int, end: int, same_as: int) -> None:
        self._inner.append_idle(start, end, same_as)
        self.writer.run(start, end)
