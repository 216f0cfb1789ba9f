"""Continuous queries over streams (Wukong+S): one module per concept.

Time semantics: :mod:`~engine.stream.limits` (the contract's ranges), :mod:`~engine.stream.progress`
(stream clocks, admission), :mod:`~engine.stream.windows` (the one Window type, instants, triggers).
Stream data: :mod:`~engine.stream.transient` and :mod:`~engine.stream.stream_index` (time slices
under a budget), :mod:`~engine.stream.adaptor` (parsing), :mod:`~engine.stream.ingest` (the
ingestion path), :mod:`~engine.stream.ledger` (applied batch ids), :mod:`~engine.stream.absorb`
(timeless triples into the store). Queries: :mod:`~engine.stream.registry` (+
:mod:`~engine.stream.registry_store`, its file), :mod:`~engine.stream.scheduler` (the worker),
:mod:`~engine.stream.continuous` (one instant), :mod:`~engine.stream.window_graph` and
:mod:`~engine.stream.incremental` (incremental maintenance), :mod:`~engine.stream.gc`,
:mod:`~engine.stream.resultlog`. :mod:`~engine.stream.manager` is the facade the HTTP layer uses.
"""

from engine.stream.progress import ARRIVAL, EVENT, LateElementError, StreamClock
from engine.stream.windows import (
    DEFAULT_COUNT_STEP_MS,
    Trigger,
    Window,
    first_instant,
    query_step,
    window_member,
)

__all__ = [
    "ARRIVAL", "EVENT", "LateElementError", "StreamClock", "DEFAULT_COUNT_STEP_MS", "Trigger",
    "Window", "first_instant", "query_step", "window_member",
]
