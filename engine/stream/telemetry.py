"""Hooks from the continuous-query engine to whoever exports metrics (server/api/admin.py).

The engine must not import the server, and a test process holds several servers at once,
so a hook names its *owner* (the stream registry of one manager) and only the sinks attached
to that owner hear it. A hook with no sink attached costs one dictionary lookup.

Counts that the engine already keeps (elements accepted/refused per stream, instants per
query) are read from the manager when /metrics is scraped; only what has to be seen as it
happens (each evaluation's duration, for a histogram) goes through here.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable

__all__ = ["attach", "detach", "evaluation", "evaluations", "listening"]

_lock = threading.Lock()
#: owner -> callbacks ``fn(query_name, seconds)``; weak, so a closed manager leaves nothing behind
_evaluation_sinks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _ref(fn):
    """A bound method is held weakly: a sink whose object (the server's metrics, which hold
    the manager that owns the key) is gone must not keep that key alive."""
    if inspect.ismethod(fn):
        return weakref.WeakMethod(fn)
    return lambda: fn


def attach(owner: object, fn: Callable[[str, float], None]) -> None:
    """Call ``fn(query, seconds)`` after each instant that ``owner``'s queries evaluate."""
    with _lock:
        sinks = [r for r in _evaluation_sinks.get(owner, ()) if r() is not None]
        sinks.append(_ref(fn))
        _evaluation_sinks[owner] = tuple(sinks)


def detach(owner: object, fn: Callable[[str, float], None]) -> None:
    with _lock:
        sinks = tuple(r for r in _evaluation_sinks.get(owner, ()) if r() is not None and r() != fn)
        if sinks:
            _evaluation_sinks[owner] = sinks
        else:
            _evaluation_sinks.pop(owner, None)


def evaluation(owner: object, query: str, ms: float | None) -> None:
    """Hook: ``owner``'s query ``query`` evaluated one instant in ``ms`` milliseconds
    (None: the instant failed). Never raises into the engine."""
    if ms is None:
        return
    sinks = _evaluation_sinks.get(owner)
    if not sinks:
        return
    for ref in sinks:
        fn = ref()
        if fn is None:
            continue
        try:
            fn(query, ms / 1000.0)
        except Exception:  # noqa: BLE001 - a metrics failure must not fail an evaluation
            pass


def evaluations(owner: object, queries: list[str], ms: float | None) -> None:
    """Hook: :func:`evaluation` for each of ``queries`` (a batch's members, each evaluated in
    ``ms``) -- one lookup for the batch when no sink is attached."""
    if ms is None or not queries or not _evaluation_sinks.get(owner):
        return
    for q in queries:
        evaluation(owner, q, ms)


def listening(owner: object) -> bool:
    """Whether a sink is attached to ``owner`` (a batch skips collecting its members' names
    for :func:`evaluations` otherwise)."""
    return bool(_evaluation_sinks.get(owner))
