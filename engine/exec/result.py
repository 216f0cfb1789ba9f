"""The columnar answer of a query, handed from the executor to the serializers.

Solutions stay as term-id columns until serialization, so a million-row
result never becomes a million Python dicts; ``TermTable.keys`` decodes a
whole column at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

UNBOUND = -1


class TermTable(Protocol):
    """Decodes term ids of one query: store ids and ids of terms the query
    computed (BIND, aggregates, CONSTRUCT blank nodes)."""

    def keys(self, ids: np.ndarray) -> list[str | None]:
        """Keys of ``ids`` (None for UNBOUND)."""
        ...


@dataclass
class QueryResult:
    """``form`` is 'SELECT', 'ASK', 'CONSTRUCT' or 'DESCRIBE'.

    SELECT: ``vars`` (names without '?') and ``columns`` (one int64 array of
    term ids per var, UNBOUND = -1, all of one length ``len(self)``).
    ASK: ``boolean``. CONSTRUCT/DESCRIBE: ``triples``, an (n, 3) int64 array of
    term ids (a set: no duplicate rows).
    """

    form: str
    terms: TermTable
    vars: list[str] = field(default_factory=list)
    columns: list[np.ndarray] = field(default_factory=list)
    boolean: bool | None = None
    triples: np.ndarray | None = None
    ordered: bool = False

    def __len__(self) -> int:
        if self.form == "SELECT":
            return int(len(self.columns[0])) if self.columns else self.n_rows
        if self.triples is not None:
            return int(len(self.triples))
        return 1

    n_rows: int = 0  # row count when there are no columns (SELECT with no variables)

    @property
    def is_graph(self) -> bool:
        return self.form in ("CONSTRUCT", "DESCRIBE")

    def rows(self) -> list[dict[str, str]]:
        """Solutions as dicts var -> key (unbound vars left out); for tests and small results."""
        decoded = [self.terms.keys(c) for c in self.columns]
        out = []
        for i in range(len(self)):
            out.append({v: col[i] for v, col in zip(self.vars, decoded, strict=True) if col[i] is not None})
        return out

    def triple_keys(self) -> list[tuple[str, str, str]]:
        if self.triples is None or len(self.triples) == 0:
            return []
        s = self.terms.keys(self.triples[:, 0])
        p = self.terms.keys(self.triples[:, 1])
        o = self.terms.keys(self.triples[:, 2])
        return list(zip(s, p, o, strict=True))
