"""What expression evaluation needs from the running query.

``engine.exec.functions`` evaluates expressions over columns of term ids and
asks the query for everything else through this protocol; the executor
(``engine.exec.evaluate``) implements it. Keeping the boundary this narrow lets
the function library be tested without a store.
"""

from __future__ import annotations

import datetime as _dt
from typing import Protocol

import numpy as np

from engine.exec.algebra import Pattern

UNBOUND = -1
LOCAL_BASE = 1 << 40  # ids of terms a query computed that the store does not hold


class EvalContext(Protocol):
    now: _dt.datetime
    """NOW() for the whole query (timezone-aware)."""

    base: str | None
    """BASE IRI of the query, for IRI()/URI() of relative strings."""

    def keys(self, ids: np.ndarray) -> list[str | None]:
        """Term keys of ``ids`` (None for UNBOUND)."""
        ...

    def intern(self, keys: list[str | None]) -> np.ndarray:
        """Ids for term keys: the store id when the store holds the term, else
        a query-local id (>= LOCAL_BASE); None -> UNBOUND."""
        ...

    def numeric(self, ids: np.ndarray) -> np.ndarray:
        """float64 value of numeric literals (xsd numeric types), NaN otherwise."""
        ...

    def kinds(self, ids: np.ndarray) -> np.ndarray:
        """int8: 0 IRI, 1 blank node, 2 literal, -1 UNBOUND."""
        ...

    def exists(self, pattern: Pattern, columns: dict[str, np.ndarray], n: int) -> np.ndarray:
        """EXISTS: for each of the n solutions given as columns (var name ->
        ids), whether ``pattern`` has a match with those bindings substituted.
        Returns a bool array of length n."""
        ...

    def check_budget(self) -> None:
        """Raise QueryTimeout if the query ran out of time (call in long loops)."""
        ...
