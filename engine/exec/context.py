"""What expression evaluation needs from the running query.

``engine.exec.functions`` evaluates expressions over columns of term ids and
asks the query for everything else through this protocol; the executor
(``engine.exec.evaluate``) implements it. Keeping the boundary this narrow lets
the function library be tested without a store.
"""

from __future__ import annotations

import datetime as _dt
from contextvars import ContextVar
from typing import Protocol

import numpy as np

from engine.errors import MemoryBudgetExceeded
from engine.sparql.algebra import Pattern

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

    def charge_rows(self, n_rows: int, n_cols: int) -> None:
        """Raise MemoryBudgetExceeded if a table of n_rows x n_cols ids would
        pass the query's memory budget (call before allocating it)."""
        ...

    def check_memory(self, nbytes: int) -> None:
        """Raise MemoryBudgetExceeded if allocating nbytes would pass the budget."""
        ...


# ---------------------------------------------------------------- memory budget
#
# Operators estimate the bytes an intermediate result will take from its row
# and column counts and check that estimate against the query's budget BEFORE
# allocating it, so the peak stays under the budget instead of being noticed
# after the kernel has paged it in. The running query's budget is a context
# variable: the join and exploration helpers (``bindings``, ``bgp``) are
# called from many places that do not carry the QueryContext.

CELL = 8  # bytes of one int64 id


class MemoryBudget:
    """Per-query memory accounting. ``check(nbytes)`` refuses one allocation
    (an operator's working set: its inputs it keeps, its output and
    temporaries) larger than the budget; ``hold(nbytes)`` adds memory that
    lives until the query ends (computed strings of the term overlay).
    ``limit`` 0 or None: unlimited, but the peak is still recorded."""

    __slots__ = ("limit", "held", "peak")

    def __init__(self, limit: int | None):
        self.limit = int(limit) if limit else 0
        self.held = 0
        self.peak = 0

    def check(self, nbytes: int, what: str = "intermediate result") -> None:
        need = self.held + int(nbytes)
        if need > self.peak:
            self.peak = need
        if self.limit and need > self.limit:
            raise MemoryBudgetExceeded(
                f"{what} needs about {_mib(nbytes)} (query holds {_mib(self.held)}), over the per-query "
                f"memory budget of {_mib(self.limit)} (--query-memory)")

    def check_rows(self, n_rows: int, n_cols: int, what: str = "intermediate result") -> None:
        self.check(int(n_rows) * max(1, int(n_cols)) * CELL, what)

    def hold(self, nbytes: int, what: str = "computed terms") -> None:
        self.check(nbytes, what)
        self.held += int(nbytes)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


_CURRENT: ContextVar[MemoryBudget | None] = ContextVar("jindou_memory_budget", default=None)


def current_budget() -> MemoryBudget | None:
    return _CURRENT.get()


#: the running query's deadline (time.monotonic()), for waits outside the executor's own
#: checks: a call to a store worker is bounded by it
_DEADLINE: ContextVar[float | None] = ContextVar("jindou_query_deadline", default=None)


def enter_budget(budget: MemoryBudget | None, deadline: float | None = None):
    """Make ``budget`` (and ``deadline``) the running query's; returns the token for
    ``leave_budget``."""
    return _CURRENT.set(budget), _DEADLINE.set(deadline)


def leave_budget(token) -> None:
    _CURRENT.reset(token[0])
    _DEADLINE.reset(token[1])


def query_deadline() -> float | None:
    """The running query's deadline (time.monotonic()), None without one."""
    return _DEADLINE.get()


def charge_rows(n_rows: int, n_cols: int, what: str = "intermediate result") -> None:
    """Check a table of ``n_rows`` x ``n_cols`` int64 cells against the budget."""
    b = _CURRENT.get()
    if b is not None:
        b.check(int(n_rows) * max(1, int(n_cols)) * CELL, what)


class StringMeter:
    """Counts the bytes of the strings a loop builds (computed terms) and
    checks them against the running query's budget after every MiB, so a
    loop of CONCATs is refused while it grows, not after."""

    __slots__ = ("budget", "n", "next")

    def __init__(self):
        self.budget = _CURRENT.get()
        self.n = 0
        self.next = 1 << 20

    def add(self, s: str | None) -> str | None:
        if s is not None:
            self.n += len(s) + 56
            if self.n > self.next:
                if self.budget is not None:
                    self.budget.check(self.n, "computed strings")
                self.next = self.n + (1 << 20)
        return s


class holding:  # noqa: N801 - used like a function: ``with holding(nbytes): ...``
    """Count ``nbytes`` (a table kept alive meanwhile, e.g. the left side of a
    join while its right side is evaluated) in every check inside the block."""

    __slots__ = ("budget", "n")

    def __init__(self, nbytes: int):
        self.budget = _CURRENT.get()
        self.n = int(nbytes)

    def __enter__(self):
        if self.budget is not None:
            self.budget.held += self.n
        return self

    def __exit__(self, *exc) -> None:
        if self.budget is not None:
            self.budget.held -= self.n

    def add(self, nbytes: int) -> None:
        """Hold ``nbytes`` more until the block ends."""
        nbytes = int(nbytes)
        self.n += nbytes
        if self.budget is not None:
            self.budget.held += nbytes


def table_bytes(n_rows: int, n_cols: int) -> int:
    return int(n_rows) * max(1, int(n_cols)) * CELL


_GLIBC = None


def glibc():
    """The process's glibc (a ``ctypes.CDLL``), or None where the C library is not glibc."""
    global _GLIBC
    if _GLIBC is None:
        _GLIBC = False
        try:
            import ctypes  # noqa: PLC0415
            import ctypes.util  # noqa: PLC0415
            import platform  # noqa: PLC0415

            if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
                _GLIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            _GLIBC = False
    return _GLIBC or None


_TRIM = None


def release_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``); a no-op
    elsewhere. numpy's large arrays are mmapped and go back on free, but the
    many small objects of a big decode/serialize leave glibc arenas that
    otherwise stay resident."""
    global _TRIM
    if _TRIM is None:
        _TRIM = False
        libc = glibc()
        if libc is not None:
            import ctypes  # noqa: PLC0415

            _TRIM = libc.malloc_trim
            _TRIM.argtypes = [ctypes.c_size_t]
            _TRIM.restype = ctypes.c_int
    if _TRIM:
        _TRIM(0)
