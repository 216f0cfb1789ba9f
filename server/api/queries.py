"""Continuous queries: registration and results as Server-Sent Events.

* ``POST /queries`` (C-SPARQL text) -> 201 ``{"id", "streams", "vars"}``.
* ``GET /queries``, ``GET|DELETE /queries/{name}``.
* ``GET /queries/{name}/results`` -> ``text/event-stream``: one ``event:
  result`` per evaluated instant (``id: <t>``), ``event: idle`` for a run of
  unchanged instants, ``event: gap`` when a client
  resumes before the retained history, ``event: end`` when the query is
  deleted, ``event: error`` when a client fell too far behind.

* ``POST /queries/{name}/tickets`` -> 201 ``{"ticket", "expires_in", "url"}``: a short-lived
  ticket for ``GET /queries/{name}/results?ticket=...`` (browsers: EventSource cannot send an
  ``Authorization`` header; the long-lived token never goes into a URL).
* ``PUT|GET /queries/{name}/sinks``: result sinks (webhook, NATS JetStream), see
  :mod:`engine.stream.sinks`.

Delivery model: the engine appends each instant's result once to the query's
:class:`ResultLog`; every SSE client only remembers the id of the last event it
sent and reads ``log.since(last_id)`` when woken. The log's listener runs on
the engine thread and only schedules ``asyncio.Event.set`` on the loop
(``call_soon_threadsafe``), so neither the engine nor other clients ever wait
for a slow client. A client whose unsent backlog exceeds ``config.sse_buffer``
events while its socket does not drain is sent ``event: error`` and
disconnected (it may reconnect with ``Last-Event-ID``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import signal
import threading
import time
import weakref

import orjson
from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from engine.bom import strip_bom
from engine.errors import NotFound
from engine.stream.limits import parse_time
from server.api import admin
from server.api.common import (
    HTTPError,
    ServerState,
    check_charset,
    check_read,
    check_write,
    decode_body,
    error_response,
    parse_content_type,
    parse_params,
    request_body_reader,
)
from server.api.streams import headers_of, int_param, json_response, manager_of, manager_read

try:  # importing it early hooks uvicorn's exit handler (server_exiting)
    from sse_starlette.sse import AppStatus
except ImportError:  # pragma: no cover
    AppStatus = None

router = APIRouter(tags=["Continuous queries"])

QUERY_TYPES = frozenset({"application/sparql-query", "text/plain"})
_MIN_T = -(2**62)

_ERR = {
    400: {"description": "Syntax error or unknown stream"},
    401: {"description": "Token required"},
    403: {"description": "Wrong token"},
    404: {"description": "No such query"},
    409: {"description": "A query with this name exists"},
    415: {"description": "Unsupported media type"},
}


class Tickets:
    """Short-lived SSE tickets: random (``secrets``), scoped to one registration of one query,
    expiring after ``--ticket-ttl`` seconds. Kept by their SHA-256: a lookup is a hash-table
    probe on a digest the client cannot steer, so its timing says nothing about a valid
    ticket, and the server's memory holds no ticket itself. A ticket may open the query's
    result stream any number of times until it expires (an EventSource reconnects by itself
    with the same URL and ``Last-Event-ID``); a stream opened before the expiry stays open.
    A ticket names the query's result log, not only its name: once the query is deleted it
    is void, also when a query of the same name is registered again. Tickets live in memory:
    a restart invalidates them."""

    LIMIT = 10_000   # live tickets; past it the oldest are forgotten

    def __init__(self):
        self._lock = threading.Lock()
        self._live: dict[bytes, tuple[str, weakref.ref, float]] = {}

    @staticmethod
    def _key(ticket: str) -> bytes:
        return hashlib.sha256(ticket.encode("utf-8", "surrogatepass")).digest()

    def issue(self, query: str, log, ttl: float) -> str:
        ticket = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            if len(self._live) >= self.LIMIT:
                self._live = {k: v for k, v in self._live.items() if v[2] > now}
                while len(self._live) >= self.LIMIT:
                    self._live.pop(next(iter(self._live)))
            self._live[self._key(ticket)] = (query, weakref.ref(log), now + ttl)
        return ticket

    def valid(self, ticket: str, query: str, log) -> bool:
        """Does ``ticket`` open ``query`` whose result log is now ``log``?"""
        key = self._key(ticket)
        with self._lock:
            got = self._live.get(key)
            if got is None:
                return False
            name, ref, expiry = got
            issued_for = ref()
            if expiry <= time.monotonic() or issued_for is None or issued_for.closed:
                del self._live[key]
                return False
        return name == query and issued_for is log


_tickets_lock = threading.Lock()


def tickets_of(state: ServerState) -> Tickets:
    t = getattr(state, "sse_tickets", None)
    if t is None:
        with _tickets_lock:
            t = getattr(state, "sse_tickets", None)
            if t is None:
                t = state.sse_tickets = Tickets()
    return t


@router.post("/queries", summary="Register a continuous query", status_code=201, responses=_ERR,
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/sparql-query": {"schema": {"type": "string"},
                                              "example": "REGISTER QUERY q AS SELECT ?s ?p ?o "
                                                         "FROM STREAM <http://ex.org/s> [RANGE 10s STEP 1s] "
                                                         "WHERE { ?s ?p ?o }"},
                 "text/plain": {"schema": {"type": "string"}}}}})
async def queries_post(request: Request, name: str | None = None) -> Response:
    """Body: `REGISTER [RSTREAM|ISTREAM|DSTREAM] QUERY <name> AS <query>` (C-SPARQL), an RSP-QL
    or CQELS-QL query (see the README's "Continuous-query syntaxes"); `?name=` names a query
    written without a REGISTER header. Answers 201 `{"id", "streams", "vars"}`; 400 `{"error": "syntax", "detail", "line",
    "column"}` on a syntax error, 400 on an unknown stream, 409 when the name exists."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, headers_of(request))
        m = manager_of(state)
        ct, params = parse_content_type(request.headers.get("content-type"))
        if ct is not None and ct not in QUERY_TYPES:
            raise HTTPError(415, "unsupported_media_type",
                            f"{ct} is not accepted: send the C-SPARQL text as application/sparql-query or text/plain")
        check_charset(params)
        text = decode_body(await request_body_reader(request, state.config.max_body)())
        if not text.strip():
            raise HTTPError(400, "bad_request", "the body must be a continuous query (C-SPARQL, RSP-QL or CQELS-QL)")
        info = await run_in_threadpool(m.register_query, text, name)
        return json_response(info, 201, {"Location": f"/queries/{info['id']}"})
    except Exception as exc:
        return error_response(state, exc)


@router.get("/queries", summary="List the registered continuous queries", responses=_ERR)
async def queries_list(request: Request) -> Response:
    """`{"queries": [info, ...]}`."""
    return await manager_read(request, lambda m: {"queries": m.queries()})


@router.get("/queries/{name}", summary="A continuous query's text, windows and progress", responses=_ERR)
async def query_get(name: str, request: Request) -> Response:
    return await manager_read(request, lambda m: m.query(name))


@router.delete("/queries/{name}", summary="Delete a continuous query", status_code=204, responses=_ERR)
async def query_delete(name: str, request: Request) -> Response:
    """Open result streams get `event: end` and close; the name can be registered again."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, headers_of(request))
        m = manager_of(state)
        await run_in_threadpool(m.delete_query, name)
        return Response(status_code=204)
    except Exception as exc:
        return error_response(state, exc)


@router.get("/queries/{name}/results", summary="Results as Server-Sent Events", responses={
    200: {"description": "text/event-stream", "content": {"text/event-stream": {}}}, **_ERR},
    openapi_extra={"parameters": [
        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "integer"},
         "description": "resume after this instant (epoch ms)"},
        {"name": "from", "in": "query", "required": False, "schema": {"type": "integer"},
         "description": "replay the retained instants from this one (epoch ms)"},
        {"name": "ticket", "in": "query", "required": False, "schema": {"type": "string"},
         "description": "a ticket from POST /queries/{name}/tickets, instead of the Authorization header"}]})
async def query_results(name: str, request: Request) -> Response:
    """One `event: result` per instant (`id: <t>`, `data:` SPARQL JSON results + `window`);
    instants are event-time milliseconds since the epoch.
    a run of unchanged instants (at least `--idle-after`) is one `event: idle` (`id:` its last
    instant, `data: {"from", "to", "instants", "same_as"}`): each of its instants has the result
    of instant `same_as` (RSTREAM), or an empty difference (ISTREAM / DSTREAM).
    Send `Last-Event-ID` to resume after that instant (an `event: gap` first if it is older
    than the retained history); `?from=<t>` replays the retained instants from t; otherwise
    the stream starts at the next instant. `event: end` when the query is deleted.

    With `--data-dir` the retained instants survive a restart (SIGKILL included): resuming with
    `Last-Event-ID` after a restart continues without a gap, with the same ids and contents.
    Delivery is at-least-once: the server re-sends exactly the retained events after the
    client's `Last-Event-ID` (the only proof of delivery it has); an event is sent to anyone
    only after it is on disk, so no client ever sees an instant that a crash could take back.

    Under `--read-token`, instead of `Authorization: Bearer`, `?ticket=` may carry a ticket from
    `POST /queries/{name}/tickets` (for EventSource, which cannot send headers)."""
    state: ServerState = request.app.state.jindou
    try:
        params = parse_params(request.scope.get("query_string", b""))
        # a ticket stands in for the read token: where reads are open it is not looked at (a
        # stale one, kept by a page across a restart, would otherwise close an open stream)
        ticket = params.get("ticket") if state.config.read_token else None
        m = None
        if ticket:
            m = manager_of(state)
            try:   # an unknown query is the ticket's 401 too: no existence check without credentials
                current = await run_in_threadpool(m.log, name)
            except NotFound:
                current = None
            if len(ticket) != 1 or current is None or not tickets_of(state).valid(ticket[0], name, current):
                raise HTTPError(401, "unauthorized", "the ticket is not valid for this query or has expired: "
                                                     "get a new one with POST /queries/{name}/tickets")
        else:
            check_read(state.config, headers_of(request))
        m = m or manager_of(state)
        from_t = int_param(params, "from")
        last_id = None
        leid = request.headers.get("last-event-id")
        if leid is not None and leid.strip():
            last_id = parse_time(leid, "Last-Event-ID (an instant)")  # BadTimestamp: a 400
        log = await run_in_threadpool(m.log, name)
        return ResultStream(state, log, last_id, from_t)
    except Exception as exc:
        return error_response(state, exc)


@router.post("/queries/{name}/tickets", summary="A short-lived ticket to read results from a browser",
             status_code=201, responses=_ERR)
async def query_ticket(name: str, request: Request) -> Response:
    """Needs the read token (or the write token) like any read. Answers 201
    `{"ticket", "query", "expires_in", "url"}`: open `url`
    (`/queries/{name}/results?ticket=...`) with an EventSource. The ticket is random, valid
    for this query only and for `--ticket-ttl` seconds (default 60): it may open the stream
    (and reopen it, e.g. EventSource reconnecting with `Last-Event-ID`) until then; an open
    stream is not cut at the expiry. Get a new ticket for a later reconnection. Deleting the
    query voids its tickets (a query registered again under the name needs new ones); the
    access log records `ticket=<redacted>`."""
    state: ServerState = request.app.state.jindou
    try:
        check_read(state.config, headers_of(request))
        m = manager_of(state)
        log = await run_in_threadpool(m.log, name)   # 404 for an unknown query
        ttl = float(state.config.ticket_ttl)
        ticket = tickets_of(state).issue(name, log, ttl)
        doc = {"ticket": ticket, "query": name, "expires_in": ttl,
               "url": f"/queries/{name}/results?ticket={ticket}"}
        return json_response(doc, 201, {"Cache-Control": "no-store"})
    except Exception as exc:
        return error_response(state, exc)


_SINK_DOC = {"type": "object", "properties": {"sinks": {"type": "array", "items": {"oneOf": [
    {"type": "object", "required": ["type", "url"], "properties": {
        "type": {"const": "webhook"}, "name": {"type": "string"}, "url": {"type": "string"}}},
    {"type": "object", "required": ["type", "server", "subject"], "properties": {
        "type": {"const": "nats"}, "name": {"type": "string"}, "server": {"type": "string"},
        "subject": {"type": "string"}, "stream": {"type": "string"}}}]}}}}


@router.put("/queries/{name}/sinks", summary="Set the result sinks of a continuous query (webhook, NATS)",
            responses=_ERR, openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                "schema": _SINK_DOC,
                "example": {"sinks": [{"name": "hook", "type": "webhook", "url": "https://example.org/hooks/q"},
                                      {"name": "bus", "type": "nats", "server": "nats://127.0.0.1:4222",
                                       "subject": "jindou.q", "stream": "JINDOU"}]}}}}})
async def query_sinks_put(name: str, request: Request) -> Response:
    """Replaces the query's sinks with the listed ones (`[]` removes them all). Each event of
    the query's result stream (`result` and `idle`, the same JSON as SSE's `data:`) is
    delivered to every sink exactly once per instant id, in id order:

    * `webhook`: `POST url` with the JSON, headers `Idempotency-Key: <query>:<instant>`,
      `X-Jindou-Query`, `X-Jindou-Instant`, `X-Jindou-Event`. A 2xx is delivered; a 5xx, 408,
      425, 429 or a network error is retried with exponential backoff (0.5 s doubling up to
      `--sink-retry-max`); another status counts as `failed` and is not retried. Redirects
      are not followed. The URL must start with one of the operator's `--webhook-allow`
      prefixes (same scheme, host and port; path prefix), else 400; a path with `.` / `..`
      segments or an encoded slash or backslash (which could leave the prefix) is refused too.
    * `nats`: JetStream publish to `subject` on `server` (which must be listed in
      `--nats-allow`, else 400) with `Nats-Msg-Id: <query>:<instant>` (JetStream drops a
      re-sent id within its duplicate window); `stream` (optional) is created for the subject
      if it does not exist.

    A sink kept under the same name and destination keeps its progress; a new one starts
    with the next instant. With `--data-dir` the sinks and their progress (committed after each
    delivery) survive a restart: nothing delivered is resent (except the one event in flight
    at a crash, with the same idempotency key) and nothing undelivered is skipped. A slow or
    unreachable sink never holds evaluation back: it reads the query's retained log (its
    bounded queue, `--retain` events) on its own thread; events it fell too far behind for are
    counted as `dropped`. Answers `{"sinks": [status, ...]}` as `GET`."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, headers_of(request))
        m = manager_of(state)
        ct, params = parse_content_type(request.headers.get("content-type"))
        if ct is not None and ct != "application/json":
            raise HTTPError(415, "unsupported_media_type", f"{ct} is not accepted: send application/json")
        body = await request_body_reader(request, state.config.max_body)()
        try:
            doc = orjson.loads(strip_bom(body))
        except orjson.JSONDecodeError as e:
            raise HTTPError(400, "bad_request",
                            f"the body is not valid JSON (line {e.lineno}, column {e.colno})") from None
        log = await run_in_threadpool(m.log, name)
        sinks = await run_in_threadpool(m.sinks.put, name, log, doc)
        return json_response({"sinks": sinks})
    except Exception as exc:
        return error_response(state, exc)


@router.get("/queries/{name}/sinks", summary="The result sinks of a continuous query and their progress",
            responses=_ERR)
async def query_sinks_get(name: str, request: Request) -> Response:
    """`{"sinks": [{"name", "type", "url" | "server", "subject", "stream", "state" ("running",
    "retrying", "ended", "failed"), "delivered", "last_delivered" (instant id), "retries",
    "failed", "dropped", "duplicates", "backlog", "last_error"}, ...]}`."""

    def call(m):
        m.log(name)
        return {"sinks": m.sinks.status(name)}

    return await manager_read(request, call)


# --------------------------------------------------------------------------
# SSE
# --------------------------------------------------------------------------


def encode_event(event: str, data: bytes, ident: int | None) -> bytes:
    parts = []
    if ident is not None and ident >= 0:
        parts.append(b"id: %d\n" % ident)
    parts.append(b"event: " + event.encode() + b"\n")
    if b"\n" in data or b"\r" in data:
        for line in data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
            parts.append(b"data: " + line + b"\n")
    else:
        parts.append(b"data: " + data + b"\n")
    parts.append(b"\n")
    return b"".join(parts)


def server_exiting() -> bool:
    """True once uvicorn began shutting down (it waits for open responses before the
    lifespan shutdown, so endless SSE responses must notice by themselves)."""
    if AppStatus is not None and AppStatus.should_exit:
        return True
    try:
        handler = signal.getsignal(signal.SIGTERM)
        srv = getattr(handler, "__self__", None)
        return bool(getattr(srv, "should_exit", False))
    except Exception:  # pragma: no cover
        return False


class _Overflow(Exception):
    pass


class ResultStream(Response):
    """A text/event-stream response reading one query's ResultLog (pure ASGI)."""

    media_type = "text/event-stream"

    def __init__(self, state: ServerState, log, last_id: int | None, from_t: int | None):
        super().__init__(status_code=200, headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache, no-store",
            "X-Accel-Buffering": "no",
            # the stream ends only at `end` / `error`: the connection is done then
            "Connection": "close",
        })
        self.state = state
        self.log = log
        cfg = state.config
        self.keepalive = max(0.01, float(cfg.sse_keepalive))
        self.max_pending = max(1, int(cfg.sse_buffer))
        self.error_timeout = float(cfg.sse_error_timeout)
        # position: resume after last_id, or (when last_id is None) everything retained from from_t
        self.last = last_id
        self.from_t = from_t
        self.sending = False
        self.appended = 0  # appends signalled by the log (counted on the loop)
        self.mark = 0  # value of `appended` when the pump last read the log
        self.remaining = 0  # events of the last read not sent yet
        self._idle = 0.0
        # an endless body has no length (Response.__init__ adds "content-length: 0")
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]

    def _fetch(self) -> list:
        if self.last is not None:
            return self.log.since(self.last)
        return self.log.since(None, from_t=self.from_t if self.from_t is not None else _MIN_T)

    def _pending(self) -> int:
        """Events this client has not been sent yet: those of the batch being sent plus every
        append since that batch was read (also those the log has dropped meanwhile)."""
        return self.appended - self.mark + self.remaining

    async def __call__(self, scope, receive, send) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        watch = asyncio.Event()

        def _set() -> None:
            self.appended += 1
            wake.set()
            watch.set()

        def listener() -> None:  # called on any thread, must never block
            try:
                loop.call_soon_threadsafe(_set)
            except RuntimeError:  # loop closed
                pass

        self.log.add_listener(listener)
        admin.sse_opened(self.state)  # metrics: jindou_sse_subscribers
        try:
            if self.last is None and self.from_t is None:
                # no Last-Event-ID, no ?from: start at the next instant
                cur = self.log.last_id
                self.from_t = None if cur is None else cur + 1
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            if scope.get("method") == "HEAD":
                await send({"type": "http.response.body", "body": b""})
                return
            pump = asyncio.ensure_future(self._pump(send, wake))
            gone = asyncio.ensure_future(self._disconnected(receive))
            guard = asyncio.ensure_future(self._guard(watch))
            try:
                done, _ = await asyncio.wait({pump, gone, guard}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (pump, gone, guard):
                    if not t.done():
                        t.cancel()
                for t in (pump, gone, guard):
                    with contextlib.suppress(BaseException):
                        await t
            if pump in done and pump.exception() is None:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            elif guard in done and gone not in done:
                await self._cut_off(send)
        finally:
            self.log.remove_listener(listener)
            admin.sse_closed(self.state)

    async def _disconnected(self, receive) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return

    async def _guard(self, watch: asyncio.Event) -> None:
        """Return when the client is stuck in a send with too many events waiting."""
        while True:
            await watch.wait()
            watch.clear()
            if self.sending and self._pending() > self.max_pending:
                return

    async def _cut_off(self, send) -> None:
        n = self._pending()
        admin.sse_cut_off(self.state, n)  # metrics: jindou_sse_clients_cut_off_total, _events_dropped_total
        doc = {"error": "slow_client",
               "detail": f"this client fell {n} events behind (limit {self.max_pending}) and was disconnected; "
                         "reconnect with Last-Event-ID to resume",
               "last_id": self.last}
        try:
            await asyncio.wait_for(send({"type": "http.response.body",
                                         "body": encode_event("error", orjson.dumps(doc), None),
                                         "more_body": False}), self.error_timeout)
        except (TimeoutError, OSError, RuntimeError):
            # still not draining: returning with the response incomplete makes the server drop the connection
            pass

    async def _send(self, send, chunk: bytes) -> None:
        self.sending = True
        try:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            self.sending = False

    async def _pump(self, send, wake: asyncio.Event) -> None:
        log = self.log
        while True:
            wake.clear()
            self.mark = self.appended
            events = self._fetch()
            self.remaining = len(events)
            for ev in events:
                if ev.event == "end":
                    await self._send(send, encode_event("end", ev.data, ev.id))
                    return
                await self._send(send, encode_event(ev.event, ev.data, ev.id))
                self.remaining -= 1
                if ev.event in ("result", "idle"):
                    if self.last is None or ev.id > self.last:
                        self.last = ev.id
            if events:
                continue  # more may have arrived while sending
            if log.closed:
                doc = {"reason": "the query was deleted"}
                await self._send(send, encode_event("end", orjson.dumps(doc), self.last))
                return
            if server_exiting():
                return
            try:
                await asyncio.wait_for(wake.wait(), min(self.keepalive, 1.0))
            except TimeoutError:
                self._idle += min(self.keepalive, 1.0)
                if self._idle >= self.keepalive:
                    self._idle = 0.0
                    await self._send(send, b": keep-alive\n\n")
                continue
            self._idle = 0.0
