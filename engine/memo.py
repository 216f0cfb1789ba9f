"""Per-object memos: one value per live object (a store, a dictionary), made on first use.

Several caches hang state off an object they must not keep alive (a dictionary's rendered
terms, a store's stream-time index). :class:`PerObject` holds them in a weak-keyed map,
made under a lock so two threads never build two values for one object.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PerObject"]

V = TypeVar("V")


class PerObject(Generic[V]):
    """``memo(obj)``: the value kept for ``obj`` (``make(obj)`` on first use); ``get``, ``forget``."""

    __slots__ = ("_values", "_lock", "_make")

    def __init__(self, make: Callable[[object], V]):
        self._values: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._make = make

    def __call__(self, obj) -> V:
        got = self._values.get(obj)
        if got is None:
            with self._lock:
                got = self._values.get(obj)
                if got is None:
                    got = self._values[obj] = self._make(obj)
        return got

    def get(self, obj) -> V | None:
        """The value kept for ``obj``, or None (nothing is made)."""
        return self._values.get(obj)

    def forget(self, obj) -> None:
        """Drop the value kept for ``obj`` (a later call makes a new one)."""
        with self._lock:
            self._values.pop(obj, None)
