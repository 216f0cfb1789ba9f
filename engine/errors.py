"""Errors the engine raises; the HTTP layer maps each class to one status code."""

from __future__ import annotations


class JindouError(Exception):
    """Base class. ``kind`` is the short machine-readable name used in JSON errors."""

    kind = "error"


class QuerySyntaxError(JindouError):
    """A syntax error in a query or update (HTTP 400). Line and column are 1-based."""

    kind = "syntax"

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(message + where)


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


class RowBudgetExceeded(JindouError):
    """An intermediate or final result grew past the row budget (HTTP 503)."""

    kind = "row_budget"


class UpdateError(JindouError):
    """An update that cannot be applied (HTTP 400); nothing of it was applied."""

    kind = "update"


class LoadError(JindouError):
    """A data file that does not parse (HTTP 400 / CLI exit 1). Nothing of the
    file was loaded unless the load was lenient."""

    kind = "load"

    def __init__(self, message: str, source: str | None = None, line: int | None = None):
        self.message = message
        self.source = source
        self.line = line
        where = ""
        if source:
            where += f" in {source}"
        if line is not None:
            where += f" at line {line}"
        super().__init__(message + where)


class MemoryBudgetExceeded(JindouError):
    """An intermediate result, computed strings or the response being built
    would pass the per-query memory budget (HTTP 503); checked before the
    memory is allocated."""

    kind = "memory_budget"


class ResponseTooLarge(MemoryBudgetExceeded):
    """The serialized answer would pass the response-size bound (HTTP 503)."""

    kind = "response_too_large"
