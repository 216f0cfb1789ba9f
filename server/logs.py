"""The server's log lines: one format for access lines, Jindou's own lines and uvicorn's.

``setup(level, fmt)`` sends every logger to stderr in one format:

* ``text`` (default): ``2026-11-26T01:02:03.456Z INFO jindou.access: GET /sparql 200 1.52ms
  request_id=7f3a9c-1c`` -- timestamp (UTC, ms), level, logger, message, then ``key=value``
  fields;
* ``json``: one JSON object a line (``ts``, ``level``, ``logger``, ``msg`` and the same
  fields), for log shippers.

:class:`RequestLog` wraps the ASGI app: every request gets an id (the client's
``X-Request-Id`` when it sends a sane one, else a fresh one), answered in the
``X-Request-Id`` header and attached to every line logged while the request runs (an
internal error's traceback names it); with ``--access-log`` it writes one access line per
request with method, path, status, latency (ms) and that id. Uvicorn's own access log is
off: these lines replace it.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import re
import sys
import time
import urllib.parse

import orjson

__all__ = ["ACCESS_LOGGER", "RequestLog", "current_request_id", "setup"]

ACCESS_LOGGER = "jindou.access"
FORMATS = ("text", "json")

#: the id of the request being served (for every line logged meanwhile)
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("jindou_request_id", default=None)

#: fields a record may carry (``extra=``) that the formats print after the message
_FIELDS = ("method", "path", "status", "latency_ms", "request_id", "client", "bytes")
#: a client's X-Request-Id is echoed only when it is this tame (never a log-injection vector)
_SANE_ID = re.compile(rb"[A-Za-z0-9._:\-]{1,64}\Z")
#: longest path + query string an access line repeats (a query in the URL can be long)
_PATH_MAX = 300


def current_request_id() -> str | None:
    return _request_id.get()


_second = [-1, ""]  # the last second formatted (one strftime a second, not one a line)


def _timestamp(created: float) -> str:
    sec = int(created)
    if sec != _second[0]:
        _second[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _second[0] = sec
    return f"{_second[1]}.{int(created % 1 * 1000):03d}Z"


class _ContextFilter(logging.Filter):
    """Give every record the id of the request it was logged in (when there is one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            rid = _request_id.get()
            if rid is not None:
                record.request_id = rid
        return True


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        d = record.__dict__
        fields = " ".join(f"{k}={_text_value(d[k])}" for k in _TEXT_FIELDS if d.get(k) is not None)
        line = f"{_timestamp(record.created)} {record.levelname} {record.name}: {msg}"
        if fields:
            line += " " + fields
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


_PLAIN = re.compile(r'[^\s"=]+\Z')
#: fields the text format prints after the message (method, path, status and latency are in it)
_TEXT_FIELDS = tuple(k for k in _FIELDS if k not in ("method", "path", "status", "latency_ms"))


def _text_value(v) -> str:
    s = str(v)
    return s if _PLAIN.match(s) else orjson.dumps(s).decode()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": _timestamp(record.created), "level": record.levelname, "logger": record.name,
               "msg": record.getMessage()}
        for k in _FIELDS:
            v = getattr(record, k, None)
            if v is not None:
                doc[k] = v
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def setup(level: str = "info", fmt: str = "text", stream=None) -> logging.Handler:
    """Route every logger (Jindou's, uvicorn's, libraries') to one stderr handler in ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            lg.removeHandler(h)
        lg.propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # RequestLog writes the access lines
    return handler


def _request_ids():
    """Ids unique in this process and unlikely to repeat across restarts: a random
    prefix per process, then a counter (cheaper than random bytes per request):
    (the prefix, the counter)."""
    return os.urandom(3).hex(), itertools.count(1)


#: header tuples :meth:`RequestLog.request_id_line` remembers (then it starts over)
_PLAIN_MAX = 256


class RequestLog:
    """ASGI wrapper: request id (``X-Request-Id``), and one access line per request when
    ``access`` is on. Outside the whole app, so the time is what the client waited for
    the response head and body, errors and the fast paths included."""

    def __init__(self, app, access: bool = False):
        self.app = app
        self.access = access
        self.log = logging.getLogger(ACCESS_LOGGER)
        self._prefix, self._count = _request_ids()
        self._prefix_bytes = self._prefix.encode("ascii")
        #: id -> header tuple known to carry no ``x-request-id`` (:meth:`request_id_line`)
        self._plain: dict[int, tuple] = {}

    def request_id(self, headers) -> str:
        """The client's ``X-Request-Id`` when it is a sane one, else a new id; also for a
        request answered below this wrapper (the HTTP fast lane of ``server/app.py``)."""
        for k, v in headers:
            if k == b"x-request-id":
                if _SANE_ID.match(v):
                    return v.decode("ascii")
                break
        return f"{self._prefix}-{next(self._count):x}"

    def request_id_line(self, headers) -> bytes:
        """The ``x-request-id`` header line of an answer (:meth:`request_id`, formatted
        straight to bytes: the HTTP fast lane writes one with every answer). A header
        tuple seen without the header (the lane hands out one kept tuple per header
        block) is not searched again: one dict lookup by its id instead of a loop over
        its pairs."""
        plain = self._plain
        if plain.get(id(headers)) is not headers:
            for k, v in headers:
                if k == b"x-request-id":
                    if _SANE_ID.match(v):
                        return b"x-request-id: " + v + b"\r\n"
                    break
            else:
                if type(headers) is tuple:  # immutable: its id stands for its contents while kept
                    if len(plain) >= _PLAIN_MAX:
                        plain.clear()
                    plain[id(headers)] = headers
        return b"x-request-id: %s-%x\r\n" % (self._prefix_bytes, next(self._count))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = self.request_id(scope["headers"])
        token = _request_id.set(rid)
        t0 = time.perf_counter()
        status = [0]
        sent = [0]
        rid_header = (b"x-request-id", rid.encode("ascii"))

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), rid_header]
            elif message["type"] == "http.response.body":
                sent[0] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request_id.reset(token)
            if self.access:
                self._access_line(scope, status[0], time.perf_counter() - t0, rid, sent[0])

    def _access_line(self, scope, status: int, seconds: float, rid: str, nbytes: int) -> None:
        path = scope.get("path", "")
        qs = scope.get("query_string", b"")
        if qs:
            path += "?" + _redacted(qs.decode("latin-1"))
        if len(path) > _PATH_MAX:
            path = path[:_PATH_MAX] + "..."
        client = scope.get("client")
        ms = round(seconds * 1000.0, 3)
        method = scope.get("method", "")
        # status 0: the client went away before any answer was sent
        level = logging.WARNING if status >= 500 else logging.INFO
        if not self.log.isEnabledFor(level):
            return
        # makeRecord + handle: what Logger.log does, without looking up the caller's frame
        record = self.log.makeRecord(ACCESS_LOGGER, level, __file__, 0, "%s %s %d %.3fms",
                                     (method, _printable(path), status, ms), None, None,
                                     {"method": method, "path": path, "status": status, "latency_ms": ms,
                                      "request_id": rid, "client": client[0] if client else None,
                                      "bytes": nbytes})
        self.log.handle(record)


#: query parameters whose value is a credential (an SSE ticket; a token a client put in a URL)
_SECRET_KEYS = ("ticket", "token")


def _redacted(qs: str) -> str:
    """A query string with every credential's value replaced by ``<redacted>`` (keys compared
    decoded and case-folded, as the server reads them: ``tick%65t=`` is a ticket too)."""
    low = qs.lower()
    if "ticket" not in low and "token" not in low and "%" not in low:
        return qs
    parts = qs.split("&")
    for i, part in enumerate(parts):
        key, eq, _ = part.partition("=")
        k = urllib.parse.unquote_plus(key).lower()
        if eq and any(w in k for w in _SECRET_KEYS):
            parts[i] = key + "=<redacted>"
    return "&".join(parts)


def _printable(s: str) -> str:
    """A path in a text line: no control characters (a forged line break stays one line)."""
    return s if s.isprintable() else "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in s)
