"""Shared HTTP plumbing: JSON errors, engine-error mapping, content types,
body reading with a size cap, auth, and running queries off (or on) the
event loop with a concurrency bound.

The hot routes (/sparql, /update) work on raw ASGI data (a header dict, the
query string bytes, an async body reader) so the same code serves both the
lean ASGI fast path and the FastAPI routes that document them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import logging
import queue
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Any
from urllib.parse import parse_qs, unquote_to_bytes

import orjson
from starlette.responses import Response

from engine.bom import strip_bom
from engine.errors import Category, JindouError, QueryTimeout
from server.settings import Settings

JSON_CT = b"application/json"
log = logging.getLogger("jindou.server")


class HTTPError(Exception):
    """An error answer: status, kind (the JSON ``error`` member), detail."""

    def __init__(
        self,
        status: int,
        kind: str,
        detail: Any,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        super().__init__(f"{status} {kind}: {detail}")
        self.status = status
        self.kind = kind
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> bytes:
        doc = {"error": self.kind, "detail": self.detail}
        doc.update(self.extra)
        return orjson.dumps(doc, default=str)

    def response(self) -> Response:
        return Response(self.body(), status_code=self.status, headers=self.headers, media_type="application/json")


@dataclass
class Reply:
    """A complete HTTP answer built by a handler: ``body``, or ``stream`` (an
    object with an exact ``size`` and ``chunks(tick)``, e.g. a large SELECT
    answer from :func:`engine.exec.serialize.serialize_lazy`) whose rows are
    built while they are sent. ``deadline`` (``time.monotonic()``) bounds the
    building of a streamed body."""

    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    stream: Any = None
    deadline: float | None = None

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        out = []
        if self.content_type is not None:
            out.append((b"content-type", self.content_type.encode("latin-1")))
        size = len(self.body) if self.stream is None else self.stream.size
        out.append((b"content-length", str(size).encode()))
        for k, v in self.headers.items():
            out.append((k.lower().encode("latin-1"), str(v).encode("latin-1")))
        return out

    async def send(self, send, method: str, receive=None) -> None:
        """Write the answer as ASGI messages. A streamed body goes out in pieces of
        about ``STREAM_PIECE`` bytes, each built in a worker thread (the loop stays
        free); its Content-Length is exact and was checked against the response
        bounds before the status line. Should building a piece fail (the deadline
        passed), the body ends short of its Content-Length and the connection
        closes: the client sees an incomplete answer, never a short one that
        looks complete. With ``receive`` (the request body already read), a
        client that goes away stops the building at the next piece: the
        renderer is cancelled instead of writing the rest into a closed socket."""
        await send({"type": "http.response.start", "status": self.status, "headers": self.raw_headers()})
        if method == "HEAD" or self.status in (204, 304):
            await send({"type": "http.response.body", "body": b""})
            return
        if self.stream is None:
            await send({"type": "http.response.body", "body": self.body})
            return
        loop = asyncio.get_running_loop()
        tick = None if self.deadline is None else deadline_tick(self.deadline)
        pieces = _pieces(self.stream.chunks(tick))
        gone = asyncio.Event()
        watch = None if receive is None else asyncio.ensure_future(_watch_disconnect(receive, gone, self.stream))
        sent = 0
        try:
            while True:
                if gone.is_set():
                    log.info("streamed answer stopped after %d of %d bytes: the client went away", sent, self.stream.size)
                    raise StreamAborted("the client went away")
                try:
                    piece = await loop.run_in_executor(None, next, pieces, None)
                except Exception as exc:
                    if gone.is_set():
                        log.info("streamed answer stopped after %d of %d bytes: the client went away",
                                 sent, self.stream.size)
                    else:
                        log.warning("streamed answer stopped after %d of %d bytes: %s", sent, self.stream.size, exc)
                    raise StreamAborted(str(exc)) from None
                if piece is None:
                    break
                sent += len(piece)
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            if watch is not None:
                watch.cancel()


#: bytes gathered into one write of a streamed answer
STREAM_PIECE = 1 << 20


class StreamAborted(Exception):
    """A streamed body stopped part way; the response has started, so the only
    honest ending is to close the connection short of its Content-Length."""


async def _watch_disconnect(receive, gone: asyncio.Event, stream) -> None:
    """Wait for the client to go away (``http.disconnect``) while an answer streams;
    then flag it and cancel the renderer (``cancel()``, where it has one) so the
    piece being built in its thread stops at its next chunk."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            gone.set()
            cancel = getattr(stream, "cancel", None)
            if cancel is not None:
                cancel()
            return


class HashedShape(tuple):
    """A cost-table shape key (a nested tuple, equal to the plain one) whose hash is
    computed once: the HTTP lane looks a template's cost up and records it for every
    request, and hashing the nested tuple each time costs more than the lookup.
    The kept hash is read without a Python frame: ``__hash__`` is a property whose
    getter (``attrgetter``) hands back a ``repeat(h).__next__``, which the hash slot
    calls: all C (a ``def __hash__`` was a Python call per dict lookup, two per
    lane request)."""

    def __new__(cls, items):
        self = super().__new__(cls, items)
        self._hash_of = repeat(tuple.__hash__(self)).__next__
        return self

    __hash__ = property(attrgetter("_hash_of"))  # type: ignore[assignment]


def deadline_tick(deadline: float):
    """A check raising QueryTimeout once ``deadline`` (``time.monotonic()``) has passed."""
    def tick() -> None:
        if time.monotonic() > deadline:
            raise QueryTimeout("the query ran past its timeout while its answer was sent")

    return tick


def _pieces(chunks):
    """Chunks gathered into bytes pieces of at least ``STREAM_PIECE`` (the last may be shorter)."""
    buf: list = []
    size = 0
    for c in chunks:
        if not len(c):
            continue
        buf.append(c)
        size += len(c)
        if size >= STREAM_PIECE:
            yield b"".join(buf)
            buf, size = [], 0
    if buf:
        yield b"".join(buf)


def error_reply(err: HTTPError) -> Reply:
    return Reply(err.status, err.body(), "application/json", dict(err.headers))


#: The one table from an error's category to its HTTP status, with the
#: Retry-After of the categories worth retrying. A deterministic limit (row,
#: memory or response-size budget: the same query on the same data passes it
#: again) is 422, "well-formed but the server cannot process what it asks for"
#: (RFC 9110 section 15.5.21), with no Retry-After: not 413, which is about the
#: request's own content, nor a 5xx, which says the server failed and invites a
#: retry. Backpressure (Category.BUDGET) clears by itself: 503 with Retry-After.
CATEGORY_STATUS: dict[Category, tuple[int, str | None]] = {
    Category.BAD_REQUEST: (400, None),
    Category.NOT_FOUND: (404, None),
    Category.CONFLICT: (409, None),
    Category.UNPROCESSABLE: (422, None),
    Category.LIMIT: (422, None),
    Category.TIMEOUT: (503, "1"),
    Category.BUDGET: (503, "1"),
    Category.OUT_OF_MEMORY: (503, "5"),
    Category.UNAVAILABLE: (503, "2"),
    Category.INTERNAL: (500, None),
}

#: Python's own exceptions that input can cause: (class, category, kind, detail)
_BUILTIN_ERRORS = (
    (MemoryError, Category.OUT_OF_MEMORY, "memory", "the server ran out of memory for this request"),
    # input nested deeper than the parsers/evaluator can follow
    (RecursionError, Category.BAD_REQUEST, "too_deep", "the request is nested too deeply to process"),
)


def _by_category(category: Category, kind: str, detail: str, extra: dict | None = None) -> HTTPError:
    status, retry = CATEGORY_STATUS[category]
    return HTTPError(status, kind, detail, headers={"Retry-After": retry} if retry else None, extra=extra)


def http_error_from(exc: BaseException) -> HTTPError:
    """Map any exception to the HTTPError the client gets: engine errors by their
    category, anything unforeseen (a stray KeyError included) as a 500."""
    if isinstance(exc, HTTPError):
        return exc
    if isinstance(exc, JindouError) and exc.category is not Category.INTERNAL:
        return _by_category(exc.category, exc.kind, exc.detail(), exc.fields())
    for cls, category, kind, detail in _BUILTIN_ERRORS:
        if isinstance(exc, cls):
            return _by_category(category, kind, detail)
    return internal_error(exc)


def failure(exc: BaseException, metrics=None) -> HTTPError:
    """What every request handler answers for an exception it did not handle
    itself: the mapped error; an unexpected one (500) is also counted in
    /metrics. Render it with :func:`error_reply` (ASGI fast path) or
    :meth:`HTTPError.response` (FastAPI routes)."""
    err = http_error_from(exc)
    if err.status == 500 and metrics is not None:
        metrics.log_internal(exc)
    return err


def error_response(state: ServerState, exc: BaseException) -> Response:
    """:func:`failure` as a Starlette response (the FastAPI routes' except clause)."""
    return failure(exc, state.metrics).response()


def internal_error(exc: BaseException) -> HTTPError:
    """The answer to an unexpected exception: a generic 500 with a short id; the
    id and the full traceback go to the server log (once per exception), the
    exception's text never to the client."""
    err_id = getattr(exc, "_jindou_error_id", None)
    if err_id is None:
        err_id = secrets.token_hex(6)
        try:
            exc._jindou_error_id = err_id  # type: ignore[attr-defined]
        except AttributeError:  # pragma: no cover - exceptions without __dict__
            pass
        log.error("internal error id=%s: %s: %s", err_id, type(exc).__name__, exc, exc_info=exc)
    return HTTPError(500, "internal", f"internal error (id {err_id})", extra={"id": err_id})


# --------------------------------------------------------------------------
# Request parsing
# --------------------------------------------------------------------------


def json_object(body: bytes, what: str = "the body") -> dict:
    """A request body that must be one JSON object, else a 400 saying why (a leading BOM is
    dropped, as RFC 8259 allows a parser to)."""
    try:
        doc = orjson.loads(strip_bom(body))
    except orjson.JSONDecodeError as e:
        raise HTTPError(400, "bad_request", f"{what} is not valid JSON (line {e.lineno}, column {e.colno})") from None
    if not isinstance(doc, dict):
        raise HTTPError(400, "bad_request", f"{what} must be a JSON object")
    return doc


def parse_content_type(value: str | None) -> tuple[str | None, dict[str, str]]:
    """(media type lower-cased, params) of a Content-Type value; (None, {}) when absent."""
    if not value or not value.strip():
        return None, {}
    parts = value.split(";")
    mt = parts[0].strip().lower()
    params = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        params[k.strip().lower()] = v.strip().strip('"')
    return mt, params


def check_charset(params: dict[str, str]) -> None:
    cs = params.get("charset")
    if cs is not None and cs.lower().replace("_", "-") not in ("utf-8", "utf8", "us-ascii", "ascii"):
        raise HTTPError(415, "unsupported_media_type", f"charset {cs!r} is not supported; send UTF-8")


def decode_body(data: bytes, what: str = "request body") -> str:
    """A text request body (query, update, continuous query) as a string: UTF-8 without a
    leading byte order mark (:mod:`engine.bom`), else a 400 saying where it is not UTF-8."""
    return decode_utf8(strip_bom(data), what)


def decode_utf8(data: bytes, what: str = "request body") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HTTPError(400, "encoding", f"{what} is not valid UTF-8 (byte {e.start})") from None


def parse_params(data: bytes | str, what: str = "query string") -> dict[str, list[str]]:
    """Decode an application/x-www-form-urlencoded string (repeatable keys)."""
    if not data:
        return {}
    if isinstance(data, bytes):
        data = decode_utf8(data, what)
    try:
        return parse_qs(data, keep_blank_values=True, strict_parsing=False, encoding="utf-8", errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise HTTPError(400, "bad_request", f"malformed {what}: a percent-encoded part is not UTF-8") from None


async def parse_form(body: bytes, what: str = "form body") -> dict[str, list[str]]:
    """parse_params of a request body; a large one is decoded off the event loop
    (percent-decoding 10 MB takes seconds, and other requests would wait)."""
    body = strip_bom(body)
    if len(body) <= 65536:
        return parse_params(body, what)
    return await asyncio.get_running_loop().run_in_executor(None, parse_params, body, what)


_QS_CACHE: dict[bytes, dict[str, list[str]]] = {}


def _unquote_plus(v: bytes) -> str:
    v = v.replace(b"+", b" ")
    if b"%" in v:
        try:
            # C speed: every '%XX' as a '\xXX' escape (backslashes doubled first, so they are
            # the only escapes), decoded to one code point per byte and back to those bytes
            v = v.replace(b"\\", b"\\\\").replace(b"%", b"\\x").decode("unicode_escape").encode("latin-1")
        except UnicodeDecodeError:  # a '%' not followed by two hex digits stays as it is
            v = unquote_to_bytes(v)
    return v.decode("utf-8")


def _fast_params(qs: bytes) -> dict[str, list[str]]:
    """parse_params of a query string, decoding bytes in one pass (a query in a URL is
    a few hundred escapes: urllib's str round trip costs twice as much). Raises on
    anything that is not clean UTF-8; the caller then takes parse_params' answer."""
    out: dict[str, list[str]] = {}
    for part in qs.split(b"&"):
        if part:
            k, _, v = part.partition(b"=")
            key = _unquote_plus(k)
            if key in out:
                out[key].append(_unquote_plus(v))
            else:
                out[key] = [_unquote_plus(v)]
    return out


def parse_params_cached(qs: bytes) -> dict[str, list[str]]:
    """parse_params for a URL query string, memoized (treat the result as read-only)."""
    hit = _QS_CACHE.get(qs)
    if hit is None:
        try:
            hit = _fast_params(qs)
        except (UnicodeDecodeError, ValueError):  # parse_params says what is wrong
            hit = parse_params(qs)
        if len(qs) <= 4096:
            if len(_QS_CACHE) >= 1024:
                _QS_CACHE.clear()
            _QS_CACHE[qs] = hit
    return hit


def one(params: dict[str, list[str]], name: str) -> str | None:
    vals = params.get(name)
    if not vals:
        return None
    if len(vals) > 1:
        raise HTTPError(400, "bad_request", f"parameter {name!r} given {len(vals)} times")
    return vals[0]


#: an absolute IRI as a protocol parameter: a scheme, then IRIREF characters (no
#: spaces, controls or <>"{}|^`\\), at most MAX_IRI_PARAM characters
_IRI_PARAM_RE = re.compile(r'[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20<>"{}|^`\\]*')
MAX_IRI_PARAM = 4096


def iri_params(params: dict[str, list[str]], name: str) -> tuple[str, ...]:
    """The values of a repeatable graph-IRI parameter (``default-graph-uri``,
    ``using-graph-uri``, ``graph``...), each checked to be an absolute IRI (400 otherwise)."""
    vals = params.get(name, ())
    for v in vals:
        if len(v) > MAX_IRI_PARAM or not _IRI_PARAM_RE.fullmatch(v):
            shown = v if len(v) <= 80 else v[:80] + "..."
            raise HTTPError(400, "bad_request", f"{name} must be an absolute IRI, not {shown!r}")
    return tuple(vals)


def header_dict(scope: dict) -> dict[str, str]:
    """Lower-cased header names -> values (repeated headers joined by ', ')."""
    out: dict[str, str] = {}
    for k, v in scope["headers"]:
        name = k.decode("latin-1").lower()
        val = v.decode("latin-1")
        if name in out:
            out[name] += ", " + val
        else:
            out[name] = val
    return out


BodyReader = Callable[[], Awaitable[bytes]]


def asgi_body_reader(receive, max_body: int) -> BodyReader:
    async def read() -> bytes:
        chunks = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise HTTPError(400, "bad_request", "client disconnected")
            chunk = msg.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > max_body:
                    raise HTTPError(413, "too_large", f"request body larger than {max_body} bytes")
                chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        return b"".join(chunks)

    return read


def request_body_reader(request, max_body: int) -> BodyReader:
    """Body reader over a Starlette Request (size checked while streaming)."""

    async def read() -> bytes:
        chunks = []
        size = 0
        async for chunk in request.stream():
            if chunk:
                size += len(chunk)
                if size > max_body:
                    raise HTTPError(413, "too_large", f"request body larger than {max_body} bytes")
                chunks.append(chunk)
        return b"".join(chunks)

    return read


def base_url(headers: dict[str, str], scope: dict) -> str:
    host = headers.get("host")
    if not host:
        server = scope.get("server") or ("localhost", 80)
        host = f"{server[0]}:{server[1]}" if server[1] not in (80, None) else str(server[0])
    scheme = scope.get("scheme", "http")
    return f"{scheme}://{host}"


# --------------------------------------------------------------------------
# Auth
# --------------------------------------------------------------------------


def _bearer(headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization")
    if auth is None:
        return None
    scheme, _, cred = auth.strip().partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return cred.strip()


def check_write(config: Settings, headers: dict[str, str]) -> None:
    """401 (missing credentials) / 403 (wrong token) for writes when a token is set."""
    if not config.token:
        return
    given = _bearer(headers)
    if given is None:
        raise HTTPError(
            401,
            "unauthorized",
            "this server needs 'Authorization: Bearer <token>' for writes",
            headers={"WWW-Authenticate": 'Bearer realm="jindou"'},
        )
    if not hmac.compare_digest(given.encode(), config.token.encode()):
        raise HTTPError(403, "forbidden", "wrong token", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


def check_read(config: Settings, headers: dict[str, str]) -> None:
    if not config.read_token:
        return
    given = _bearer(headers)
    if given is None:
        raise HTTPError(401, "unauthorized", "this server needs a Bearer token for reads",
                        headers={"WWW-Authenticate": 'Bearer realm="jindou"'})
    ok = hmac.compare_digest(given.encode(), config.read_token.encode()) or (
        config.token is not None and hmac.compare_digest(given.encode(), config.token.encode())
    )
    if not ok:
        raise HTTPError(403, "forbidden", "wrong token")


# --------------------------------------------------------------------------
# Server state and query execution
# --------------------------------------------------------------------------

_SHAPE_RE = re.compile(
    r'(<[^<>"{}|^`\\\s]*>)|(#[^\n\r]*)|"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|\b[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?\b'
)


def _blank_literal(m: re.Match) -> str:
    if m.group(2) is not None:  # a comment: no part of the shape
        return ""
    return m.group(1) or "$"


#: Longer query texts get no shape: they always run in the thread pool (their
#: cost grows with their size, and blanking a huge text would itself hold the
#: event loop).
SHAPE_MAX_CHARS = 4096


def query_shape(text: str) -> str | None:
    """The query with its literal constants and comments blanked: queries of one shape
    usually cost alike. IRIs are kept, since they decide the cost (``?x a
    <RareClass>`` vs ``?x a <Thing>``): a query runs inline on the event loop
    only when this exact pattern was cheap before. None for long texts, and for
    texts that call SERVICE: such a query spends its time waiting on another
    endpoint, which a CPU-time cost (:func:`cost_clock`) would call cheap, and the
    event loop must never wait on the network."""
    shape = _SHAPES.get(text, _NO_SHAPE)
    if shape is not _NO_SHAPE:
        return shape
    if len(text) > SHAPE_MAX_CHARS or _SERVICE_RE.search(text):
        return None
    shape = _SHAPE_RE.sub(_blank_literal, text)
    if len(_SHAPES) >= _SHAPES_MAX:
        _SHAPES.clear()
    _SHAPES[text] = shape
    return shape


def coarse_shape(shape: Any) -> str | None:
    """A text shape (:func:`query_shape`) with its IRIs blanked too: the cost key a shape never
    seen falls back on. A new constant of a shape whose queries all ran cheap (``?s ?p <x1>``,
    then ``<x2>``, ...) is probed inline like a selective query rather than sent to the pool
    until its own text was seen twice; an expensive constant holds the loop at most
    :data:`INLINE_PROBE` once and reruns in the pool (and its cost sends the coarse shape to the
    pool for the next few runs). None for other shapes (the lane's tuples)."""
    if type(shape) is not str:
        return None
    c = _COARSE.get(shape)
    if c is None:
        c = _IRI_RE.sub("<>", shape)
        if len(_COARSE) >= _SHAPES_MAX:
            _COARSE.clear()
        _COARSE[shape] = c
    return c


_IRI_RE = re.compile(r'<[^<>"{}|^`\\\s]*>')
_COARSE: dict[str, str] = {}


#: query text -> its shape: the blanking is a regular expression with a Python call
#: per IRI, literal and comment (~30 us for a 400-character query, a tenth of a
#: cheap query's server time); a repeated text is looked up instead
_SHAPES: dict[str, str] = {}
_SHAPES_MAX = 2048
_NO_SHAPE: Any = object()


#: the SERVICE keyword anywhere (also inside a literal or a comment: such a text
#: only loses the inline lane, it still runs in the pool)
_SERVICE_RE = re.compile(r"(?i)\bSERVICE\b")


#: An answer past its deadline waits at most this long for the engine's own
#: timeout (its checks run every few milliseconds) before the server answers
#: the timeout itself and abandons the engine call.
TIMEOUT_GRACE = 0.5
#: An inline run (on the event loop) gets at most this much time; past it the
#: engine stops at its next check and the query reruns in the thread pool, so
#: a shape that was cheap before can never hold the event loop long.
INLINE_BUDGET = 0.02
#: The inline budget of the first run of a shape never seen (its cost unknown).
INLINE_PROBE = 0.005
#: A shape measured cheaper than this (but not under ``--inline-ms``) also runs
#: inline while the server is otherwise idle: no query running and the last
#: queries arriving further apart than its cost (see
#: :meth:`ServerState.inline_ok`). A query of a few milliseconds in the pool
#: holds the interpreter lock for about as long as inline (the switch interval
#: is 5 ms), and then pays two thread wake-ups (0.3-0.8 ms at load 2-5).
IDLE_INLINE = 0.005


def cost_clock(shape: Any) -> Callable[[], float]:
    """The clock a query's cost is taken on: the thread's CPU time (0.7 us a call
    here; wall time on a loaded machine is mostly waiting for a core), except for
    the engine's fast-path shapes (tuples: selective by construction, tens of
    microseconds), which keep the cheaper wall clock."""
    return time.perf_counter if isinstance(shape, tuple) else time.thread_time


class _Workers:
    """Daemon worker threads for engine calls. An abandoned call (its client
    got the timeout) keeps its thread until the engine's next deadline check;
    daemon threads never hold up process exit behind it."""

    def __init__(self, size: int):
        self.size = max(1, size)
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.idle = 0
        self.lock = threading.Lock()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.jobs.put((fn, fut))
        with self.lock:
            if self.idle > 0:
                self.idle -= 1
            elif len(self.threads) < self.size:
                t = threading.Thread(target=self._loop, name=f"jindou-query-{len(self.threads)}", daemon=True)
                self.threads.append(t)
                t.start()
        return fut

    def _loop(self) -> None:
        while True:
            fn, fut = self.jobs.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting handler
                    fut.set_exception(exc)
            del fn, fut
            with self.lock:
                self.idle += 1


class CommitGate:
    """Settles once, between threads, whether a write commits or its request
    was answered with a timeout: a write the client was told timed out must
    never be applied afterwards, and a commit under way is waited for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: str | None = None

    def commit(self) -> bool:
        """The engine is about to commit: True unless the request was given up."""
        with self._lock:
            if self._state is None:
                self._state = "commit"
            return self._state == "commit"

    def abandon(self) -> bool:
        """The server answers the timeout: True unless the commit already started."""
        with self._lock:
            if self._state is None:
                self._state = "abandoned"
            return self._state == "abandoned"


_UNSET: Any = object()  # run(): no deadline argument for fn


def _discard(fut: asyncio.Future) -> None:
    """Result of an abandoned call: dropped (and its exception marked retrieved)."""
    if not fut.cancelled():
        fut.exception()


class ServerState:
    """Everything the handlers share: database, config, metrics, counters."""

    def __init__(self, config: Settings, database, metrics=None):
        self.config = config
        self.db = database
        self.metrics = metrics
        self.started = time.time()
        #: queries running in the pool and inline outside the lane (changed under the lock)
        self._pooled = 0
        #: ... inline on the HTTP lane (try_inline_lane: the event loop's thread alone changes it)
        self._inline = 0
        self._running_lock = threading.Lock()
        # one thread per admitted call, so an admitted query never queues behind another
        self._workers = _Workers(config.max_concurrent + 4)
        #: seconds: a shape measured cheaper than this runs inline (--inline-ms)
        self.inline_threshold = config.inline_ms / 1000.0
        #: shape -> (recent cost s, runs, last run's cost s): see record_cost
        self.shape_cost: dict[Any, tuple[float, int, float]] = {}
        #: engine.stream.manager.StreamManager (set by create_app; None when streaming is off)
        self.streams = None
        #: perf_counter of the last two queries' arrivals at try_inline (the idle test)
        self._arrived = (0.0, 0.0)
        #: the HTTP lane's ready runners of known templates' texts (server/api/sparql.py _Runner):
        #: (raw layout, base, Accept) -> runners, one per template (a skeleton's variants)
        self.lane_runners: dict = {}

    @property
    def running(self) -> int:
        """Queries running now (admitted and not finished), wherever they run."""
        return self._pooled + self._inline

    @running.setter
    def running(self, value: int) -> None:  # (the count outside the lane: tests stand in for a pooled query)
        self._pooled = value - self._inline

    def data_changed(self) -> None:
        """Forget measured query costs: after a write a cheap shape may have become expensive."""
        self.shape_cost.clear()

    def deadline(self) -> float | None:
        """time.monotonic() deadline of a query admitted now (``--query-timeout``;
        None when it is 0: no timeout)."""
        t = self.config.query_timeout
        return time.monotonic() + t if t and t > 0 else None

    def _admit(self) -> None:
        if self.running >= self.config.max_concurrent:
            if self.metrics is not None:
                self.metrics.rejected.inc()
            raise HTTPError(
                503,
                "overloaded",
                f"{self.running} queries are running (limit {self.config.max_concurrent}); retry later",
                headers={"Retry-After": "1"},
            )

    def _release(self) -> None:
        with self._running_lock:
            self._pooled -= 1

    def record_cost(self, shape: Any, dt: float) -> None:
        """Teach the cost of one run of ``shape``: a decaying maximum of the lesser
        of the last two runs (``max(min(dt, last), previous / 2)``). Two expensive
        runs in a row send the shape to the pool for several runs; one alone does
        not. ``dt`` is the engine's time on its thread's CPU clock (:func:`cost_clock`):
        on a loaded machine a cheap query's wall time is mostly waiting for a
        core, which would send cheap shapes to the pool, whose hand-off then
        waits for a core twice more. A shape's first run alone never sets the decaying
        maximum: it pays the snapshot's one-time builds (a predicate's lookup table, an
        edge index, the program's compilation: 5-30 ms once, where the warm run costs
        0.1 ms), so the second run's estimate is the lesser of the two, not half the
        cold one, which kept a cheap shape in the pool for four more runs."""
        self._teach(shape, dt)
        c = coarse_shape(shape)
        if c is not None and c != shape:
            self._teach(c, dt)

    def _teach(self, key: Any, dt: float) -> None:
        seen = self.shape_cost.get(key)
        if seen is None:
            if len(self.shape_cost) >= 4096:
                self.shape_cost.clear()
            self.shape_cost[key] = (dt, 1, dt)
        elif seen[1] == 1:  # (the first run was alone: the lesser of two, see record_cost)
            self.shape_cost[key] = (min(dt, seen[2]), 2, dt)
        else:
            self.shape_cost[key] = (max(min(dt, seen[2]), seen[0] * 0.5), seen[1] + 1, dt)

    def inline_ok(self, shape: Any, probe: bool = False, gap: float = 0.0) -> bool:
        """Whether a query of ``shape`` runs inline on the event loop (see :meth:`run`):
        its shape ran under ``--inline-ms``; or under :data:`IDLE_INLINE` while the
        server is idle: nothing running and ``gap`` (the shorter of the last two
        intervals between query arrivals) longer than its cost: a client waiting
        for each answer before asking again, whom no one else waits behind. Under
        concurrent clients the queued requests arrive closer than that (a lane
        answer apart) and the pool runs it."""
        if shape is None or self.inline_threshold <= 0:
            return False
        seen = self.shape_cost.get(shape)
        if seen is None:
            if probe:
                return True
            c = coarse_shape(shape)   # a new constant of a shape that ran cheap: probed
            cs = None if c is None or c == shape else self.shape_cost.get(c)
            return cs is not None and cs[1] >= 2 and cs[0] < self.inline_threshold
        if (seen[1] >= 2 or probe) and seen[0] < self.inline_threshold:
            return True
        return seen[1] >= 2 and seen[0] < IDLE_INLINE and self.running == 0 and gap > seen[0]

    def try_inline(self, fn: Callable[..., Any], shape: Any, deadline: Any = _UNSET,
                   probe: bool = False) -> tuple[bool, Any]:
        """Run ``fn`` right here when its shape runs inline (:meth:`inline_ok`):
        (True, result); (False, None) when it belongs in the thread pool;
        (False, seconds spent) when it passed its inline budget (the caller runs
        it in the pool and teaches the cost, at least the time spent here).
        Admission as in :meth:`run` (503 when full). Synchronous: the HTTP fast
        lane answers such a query without a task."""
        now = time.perf_counter()
        t2, t1 = self._arrived
        self._arrived = (t1, now)
        if not self.inline_ok(shape, probe, min(now - t1, t1 - t2)):
            return False, None
        first = shape not in self.shape_cost
        self._admit()
        with self._running_lock:
            self._pooled += 1
        clock = cost_clock(shape)
        t0 = clock()
        spent = None
        try:
            if deadline is _UNSET:
                return True, fn()
            cap = time.monotonic() + (INLINE_PROBE if first else INLINE_BUDGET)
            if deadline is not None and cap >= deadline:
                return True, fn(deadline)
            w0 = time.perf_counter()
            try:
                return True, fn(cap)
            except QueryTimeout:  # expensive after all: the pool runs it under its own deadline
                # the loop was held for the whole cap, whatever the CPU clock says
                spent = max(clock() - t0, time.perf_counter() - w0)
                return False, spent
        finally:
            self._release()
            if spent is None:
                self.record_cost(shape, clock() - t0)

    def try_inline_lane(self, fn: Callable[[float | None], Any], shape: tuple) -> tuple[bool, Any]:
        """:meth:`try_inline` of a fast-path shape (a tuple: selective by construction,
        probed when new, wall-clock cost, one cost lookup: only the loop's thread changes
        the estimates) with the query's own deadline (``--query-timeout``, as
        :meth:`deadline` gives it) taken from the same clock reading as the inline cap:
        the HTTP lane's admission in one call (same budgets, cost record and outcomes).
        ``shape`` is best a :class:`HashedShape` (hashed once, not per lookup). Two clock
        readings (``time.monotonic``: the deadline's clock, and the cost's: a wall clock,
        see :func:`cost_clock`) and no lock: the run is counted in ``_inline``, which only
        the loop's thread changes (a query runs inline on it at a time)."""
        cost = self.shape_cost
        seen = cost.get(shape)
        threshold = self.inline_threshold
        if threshold <= 0 or (seen is not None and seen[0] >= threshold):
            return False, None
        config = self.config
        if self._pooled + self._inline >= config.max_concurrent:
            self._admit()  # 503
        self._inline += 1
        spent = None
        now = time.monotonic()
        try:
            cap = now + (INLINE_PROBE if seen is None else INLINE_BUDGET)
            t = config.query_timeout
            if t and t > 0 and cap >= now + t:
                return True, fn(now + t)
            try:
                return True, fn(cap)
            except QueryTimeout:  # expensive after all: the pool runs it under its own deadline
                spent = time.monotonic() - now
                return False, spent
        finally:
            self._inline -= 1
            if spent is None:
                dt = time.monotonic() - now
                if seen is None:
                    self.record_cost(shape, dt)
                else:  # record_cost's decaying maximum, in comparisons (no builtin calls)
                    low = dt if dt < seen[2] else seen[2]
                    half = seen[0] * 0.5 if seen[1] > 1 else 0.0  # (a first run alone: see record_cost)
                    cost[shape] = (low if low > half else half, seen[1] + 1, dt)

    async def run(self, fn: Callable[..., Any], shape: Any = None, deadline: Any = _UNSET,
                  gate: CommitGate | None = None, probe: bool = False) -> Any:
        """Run ``fn`` (a blocking engine call) with admission control.

        With ``deadline`` (a ``time.monotonic()`` instant, or None for none),
        ``fn`` is called as ``fn(deadline)`` and the caller gets ``QueryTimeout`` at most
        ``TIMEOUT_GRACE`` after it even when the engine is stuck in one long
        step: the call is then abandoned, its result dropped, and it keeps its
        admission slot until its thread really ends (so runaway calls cannot
        pile up beyond ``--max-concurrent``).

        A shape (the query with its constants blanked) whose recent cost is
        below ``inline_threshold`` runs right here on the event loop: the
        thread-pool hop (a queue, a thread wake-up and two GIL hand-overs, which
        under load wait for the switch interval) costs more than such a query
        does. The inline run gets a deadline ``INLINE_BUDGET`` away; if the
        constants make it expensive the engine stops at that deadline and the
        query reruns in the thread pool with its own deadline. A shape never
        seen is probed inline with the shorter ``INLINE_PROBE``: most queries
        are cheap, and an expensive one holds the loop that long once and is
        then known. Only callers that know the query is selective by construction
        (``probe``: the engine compiled its shape to a tuple-at-a-time program
        from a constant) get the probe; other shapes run in the pool until seen
        twice, or until their shape with the IRIs blanked too (:func:`coarse_shape`) ran
        cheap twice: a new constant of such a shape is probed. A write passes a ``gate`` (its engine call asks
        ``gate.commit()`` before committing): past the deadline the write is
        either abandoned before its commit or waited for. Everything else runs
        in the thread pool so the loop stays responsive. The recent cost is a
        decaying maximum (``max(last, previous / 2)``) of the engine's own time:
        one expensive run of a shape sends it to the thread pool for the next
        several runs. Writes clear the estimates.
        """
        spent = 0.0
        if gate is None:
            done, result = self.try_inline(fn, shape, deadline, probe and deadline is not _UNSET)
            if done:
                return result
            spent = result or 0.0
        self._admit()
        with self._running_lock:
            self._pooled += 1
        t0 = time.perf_counter()
        released = False
        # the engine's own time in the pool (the hop and the queue are not the query's cost:
        # counting them would keep a cheap shape in the pool for good)
        ran: list[float | None] = [None]
        clock = cost_clock(shape)
        try:

            def job():
                t1 = clock()
                try:
                    return fn() if deadline is _UNSET else fn(deadline)
                finally:
                    ran[0] = clock() - t1
                    self._release()

            fut = asyncio.wrap_future(self._workers.submit(job))
            released = True  # the job releases its slot when it ends (never cancel it: shield)
            try:
                if deadline is _UNSET or deadline is None:
                    return await asyncio.shield(fut)
                return await asyncio.wait_for(asyncio.shield(fut), max(0.0, deadline - time.monotonic()) + TIMEOUT_GRACE)
            except TimeoutError:
                if gate is not None and not gate.abandon():
                    return await asyncio.shield(fut)  # already committing: its outcome is the answer
                fut.add_done_callback(_discard)
                raise QueryTimeout(f"query exceeded its timeout of {self.config.query_timeout} s") from None
            except asyncio.CancelledError:  # the client went away: drop the result when it comes
                fut.add_done_callback(_discard)
                raise
        finally:
            if not released:
                self._release()
            if shape is not None:
                self.record_cost(shape, max(spent, ran[0]) if ran[0] is not None else time.perf_counter() - t0)
