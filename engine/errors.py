"""Errors the engine raises. Each class carries its :class:`Category` (what went
wrong, protocol-neutral); the server maps a category to an HTTP status in one
table (``server.api.common.CATEGORY_STATUS``), so a new error class needs no
server change."""

from __future__ import annotations

from enum import StrEnum


class Category(StrEnum):
    """What kind of failure an error is, for whoever answers the caller."""

    BAD_REQUEST = "bad_request"        # the input is wrong; resending it fails again
    NOT_FOUND = "not_found"            # a named graph, stream or query does not exist
    CONFLICT = "conflict"              # the request contradicts the current state (names, registrations)
    UNPROCESSABLE = "unprocessable"    # well-formed but refused by the data's rules (late stream elements)
    TIMEOUT = "timeout"                # the deadline passed; retrying may succeed
    LIMIT = "limit"                    # a row/memory/size budget of one request: retrying fails again
    BUDGET = "budget"                  # backpressure (a full buffer); retrying later may succeed
    OUT_OF_MEMORY = "out_of_memory"    # the process ran out of memory for this request
    UNAVAILABLE = "unavailable"        # a part of the service (a store worker) is down; retry later
    INTERNAL = "internal"              # a bug: never the caller's fault


class JindouError(Exception):
    """Base class. ``kind`` is the short machine-readable name used in JSON errors,
    ``category`` decides the status; ``detail()`` and ``fields()`` are what the
    caller is told (the message and structured members such as line/column)."""

    kind = "error"
    category = Category.BAD_REQUEST

    def detail(self) -> str:
        return str(self)

    def fields(self) -> dict:
        return {}


class QuerySyntaxError(JindouError):
    """A syntax error in a query or update (HTTP 400). Line and column are 1-based."""

    kind = "syntax"

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(message + where)

    def detail(self) -> str:
        return self.message

    def fields(self) -> dict:
        return {"line": self.line, "column": self.column}


class QueryEvaluationError(JindouError):
    """A query that parses but cannot be evaluated (HTTP 400), e.g. an unknown
    FROM graph in strict mode or SERVICE."""

    kind = "evaluation"


class UnsupportedError(QueryEvaluationError):
    kind = "unsupported"


class NotFound(JindouError, KeyError):
    """A named thing (graph, stream, continuous query) that does not exist (HTTP
    404). Also a KeyError, so lookups read like dict lookups; the HTTP layer maps
    only this class to 404, never a stray KeyError."""

    kind = "not_found"
    category = Category.NOT_FOUND

    def __init__(self, what: str, name: str):
        self.what = what
        self.name = name
        shown = name if len(name) <= 80 else name[:80] + "..."
        super().__init__(f"no {what} named {shown}")

    def __str__(self) -> str:  # KeyError's str() would quote the message
        return self.args[0]


class QueryTimeout(JindouError):
    """The query ran past its timeout (HTTP 503); its memory is released."""

    kind = "timeout"
    category = Category.TIMEOUT


class WorkerUnavailable(JindouError):
    """A store worker the request needs is down or unreachable (HTTP 503 naming the
    worker): the request fails at once instead of waiting or answering partly."""

    kind = "worker_unavailable"
    category = Category.UNAVAILABLE

    def __init__(self, address: str, why: str = "down"):
        self.address = address
        self.why = why
        super().__init__(f"store worker {address} is {why}")

    def fields(self) -> dict:
        return {"worker": self.address}


class RowBudgetExceeded(JindouError):
    """An intermediate or final result grew past the row budget (HTTP 422: the
    same query on the same data does again; not worth a retry)."""

    kind = "row_budget"
    category = Category.LIMIT


class UpdateError(JindouError):
    """An update that cannot be applied (HTTP 400); nothing of it was applied."""

    kind = "update"


class LoadError(JindouError):
    """A data file that does not parse (HTTP 400 / CLI exit 1). Nothing of the
    file was loaded unless the load was lenient."""

    kind = "load"

    def __init__(self, message: str, source: str | None = None, line: int | None = None,
                 column: int | None = None):
        self.message = message
        self.source = source
        self.line = line
        self.column = column if line is not None else None
        where = ""
        if source:
            where += f" in {source}"
        if line is not None:
            where += f" at line {line}"
            if self.column is not None:
                where += f", column {self.column}"
        super().__init__(message + where)

    def detail(self) -> str:
        return self.message

    def fields(self) -> dict:
        if self.line is None:
            return {}
        if self.column is None:
            return {"line": self.line}
        return {"line": self.line, "column": self.column}


class MemoryBudgetExceeded(JindouError):
    """An intermediate result, computed strings or the response being built
    would pass the per-query memory budget (HTTP 422, not retryable); checked
    before the memory is allocated."""

    kind = "memory_budget"
    category = Category.LIMIT


class ResponseTooLarge(MemoryBudgetExceeded):
    """The serialized answer would pass the response-size bound (HTTP 422)."""

    kind = "response_too_large"
