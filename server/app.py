"""FastAPI app factory.

``create_app(config, database=None)`` builds the app: one router per resource
(server/api/*), JSON errors for everything, and one pure-ASGI middleware
(:class:`EdgeMiddleware`) that does the cross-cutting work cheaply:

* CORS headers on every response (errors included) to a request that carries
  an ``Origin`` header (every CORS request does: Fetch standard), ``Vary``
  naming ``Origin`` on all of them, and preflight answers;
* 413 for a declared Content-Length above ``config.max_body`` before any of
  the body is read (streamed bodies are counted while read);
* request counts and latencies for /metrics;
* the fast path: /sparql and /update go straight to their handlers (no
  routing, no dependency injection, no pydantic); the FastAPI routes for them
  exist for /docs and run the very same handler functions.

Below the ASGI app, :class:`FastLaneProtocol` (uvicorn's httptools protocol,
``http_protocol()`` for ``uvicorn.Config(http=...)``) answers a ``GET
/sparql?query=`` (or a ``POST /sparql`` of a small query or form body) whose
shape runs inline synchronously from the bytes received: no ASGI task, no
request/response cycle, no per-message dicts, the response written in one
piece. Everything else, and any such request the lane
declines, takes the ordinary path unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from time import perf_counter

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine import formats
from server.api import admin, queries, sparql, store, streams, update
from server.api.admin import LANE_FOLD
from server.api.common import (
    HTTPError,
    Reply,
    ServerState,
    asgi_body_reader,
    error_reply,
    failure,
    header_dict,
)
from server.api.sparql import VARY_ACCEPT, _ok, handle_sparql_inline, inline_answer, post_answer
from server.idle_poll import idle_poll_for
from server.lane import DECLINES as LANE_DECLINES
from server.lane import read_head
from server.logs import RequestLog
from server.settings import Settings

log = logging.getLogger("jindou.server")

DESCRIPTION = """\
Jindou is a SPARQL 1.1 server (Wukong-style integrated store).

* `GET/POST /sparql` — SPARQL 1.1 Protocol query operation; `GET /sparql` without a
  query returns the Service Description.
* `POST /update` — SPARQL 1.1 Update.
* `/store?default`, `/store?graph=<iri>` — Graph Store HTTP Protocol.
* `/streams/{name}` — RDF streams: register (PUT), send elements (POST), heartbeats.
* `/queries` — C-SPARQL continuous queries; results as Server-Sent Events at
  `/queries/{name}/results`.
* `/status`, `/metrics`, `/healthz`, `/readyz` — operations.

Errors are JSON `{"error": kind, "detail": ...}`. Writes need
`Authorization: Bearer <token>` when the server was started with `--token`.
Requests with an `Origin` header (browsers' CORS requests) get the CORS headers;
every answer names `Origin` in `Vary`.
"""

_CORS_ALLOW_HEADERS = b"Accept, Authorization, Content-Type, Last-Event-ID, Cache-Control, X-Requested-With"
_CORS_METHODS = b"GET, POST, PUT, DELETE, HEAD, OPTIONS"


FAST_PATHS = frozenset({"/sparql", "/sparql/", "/update", "/update/"})


class EdgeMiddleware:
    """CORS, body-size guard, metrics, and the /sparql + /update fast path."""

    def __init__(self, app, state: ServerState):
        self.app = app
        self.state = state
        cfg = state.config
        self.origin = cfg.cors_origin.encode("latin-1")
        self.max_body = cfg.max_body
        self.metrics = state.metrics
        self.cors = _cors_headers(self.origin)
        self._heads: dict = {}  # the fast lane's header bytes (see _head)
        self._ok_heads: dict = {}  # ... of a 200 answer by (media type, CORS) (see answer_get)
        self._lane_kept: dict = {}  # ... and the metrics' list by (form, media type, CORS, path, method)
        self.fast = {
            "/sparql": sparql.handle_sparql,
            "/sparql/": sparql.handle_sparql,
            "/update": update.handle_update,
            "/update/": update.handle_update,
        }

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        method = scope["method"]
        path = scope["path"]
        status_box = [500]
        started = [False]
        cl = None
        cors = method == "OPTIONS"  # preflights: the CORS headers always, as before
        vary = not cors or self.origin != b"*"
        for k, v in scope["headers"]:
            if k == b"content-length":
                cl = v
            elif k == b"origin":
                cors = True

        async def send_wrapped(message):
            if message["type"] == "http.response.start":
                started[0] = True
                status_box[0] = message["status"]
                message = dict(message)
                message["headers"] = self.edge_headers(list(message.get("headers", [])), cors, vary)
            await send(message)

        try:
            if method == "OPTIONS":
                await self._preflight(scope, send_wrapped)
            else:
                if cl is not None:
                    try:
                        n = int(cl)
                    except ValueError:
                        n = -1
                    if n < 0:
                        await self._send_reply(send_wrapped, method, error_reply(
                            HTTPError(400, "bad_request", "invalid Content-Length")))
                        return
                    if n > self.max_body:
                        await self._send_reply(send_wrapped, method, error_reply(HTTPError(
                            413, "too_large", f"request body of {n} bytes is larger than the limit of {self.max_body}")))
                        return
                handler = self.fast.get(path)
                if handler is not None:
                    headers = header_dict(scope)
                    reply = await handler(self.state, method, scope, headers, scope.get("query_string", b""),
                                          asgi_body_reader(receive, self.max_body))
                    await reply.send(send_wrapped, method, receive)
                else:
                    await self.app(scope, receive, send_wrapped)
        except Exception as exc:  # the last line of defence: answer JSON, never crash
            err = failure(exc, self.metrics)
            if not started[0]:
                try:
                    await self._send_reply(send_wrapped, method, error_reply(err))
                except Exception:  # client went away
                    pass
        finally:
            if self.metrics is not None:
                self.metrics.observe_request(path, method, status_box[0], time.perf_counter() - t0)

    def edge_headers(self, headers: list, cors: bool, vary: bool = True) -> list:
        """``headers`` (a response's, as ASGI lists them) with the edge's: the CORS
        lines only when ``cors`` (the request carried ``Origin``), and with ``vary``
        ``Origin`` named in the one ``Vary`` line (added when there is none). Every
        CORS request carries ``Origin`` (Fetch standard), so other clients are spared
        two header lines per answer; ``Vary: Origin`` on the answers without them keeps
        a shared cache from handing one of those to a browser's CORS request."""
        if vary:
            for i, (k, v) in enumerate(headers):
                if k == b"vary":
                    if b"origin" not in v.lower() and v.strip() != b"*":
                        headers[i] = (k, v + b", Origin")
                    break
            else:
                headers.append((b"vary", b"Origin"))
        if cors:
            headers += self.cors
        return headers

    def answer_post_inline(self, scope: dict, body: bytes) -> tuple[int, bytes, bytes] | None:
        """:meth:`answer_get` of a ``POST /sparql`` with a small body complete in
        hand (:mod:`server.lane`; see :func:`server.api.sparql.handle_sparql_post_inline`):
        the same bytes, metrics and outcomes; None to take the ordinary path, which the
        body-size guard comes first on."""
        if len(body) > self.max_body:  # (the ordinary path answers 413)
            return None
        return self._lane_answer(scope, scope["jindou.fields"], body, "POST", post_answer)

    def answer_inline(self, scope: dict, qs: bytes) -> tuple[int, bytes, bytes] | None:
        """(status, header lines, body) of a ``GET /sparql?query=`` answered right now
        (see :func:`server.api.sparql.handle_sparql_inline`), CORS headers and
        metrics as on the ordinary path; None to take the ordinary path. The
        headers as :func:`header_dict` gives them come from ``scope["jindou.fields"]``
        when the caller has them already (:mod:`server.lane`)."""
        t0 = time.perf_counter()
        fields = scope.get("jindou.fields")
        if fields is None:
            fields = header_dict(scope)
        reply = handle_sparql_inline(self.state, scope, fields, qs)
        if reply is None:
            return None
        if self.metrics is not None:
            self.metrics.observe_request(scope["path"], "GET", reply.status, time.perf_counter() - t0)
        return reply.status, self._head(reply, "origin" in fields), reply.body

    def _lane_answer(self, scope: dict, fields: dict, arg: bytes, method: str = "GET", answer=inline_answer):
        """A lane GET's or POST's answer: ``answer(state, scope, fields, arg)`` gives None (take
        the ordinary path), (kind, media type, body bytes) written with the kept header lines,
        or a result for :func:`_ok`; any failure becomes a JSON error, never a crash.

        As :meth:`answer_get` (its defaults: ``arg`` the query string), :meth:`answer_inline`
        of a lane GET (``fields``: its header dict) in fewer steps for a query run inline: its
        answer's header lines from the kept ones of (form, media type, CORS, path, method)
        without a :class:`Reply`, the query and request counted by one append (folded into
        the metrics later: ``Metrics.lane_record``); the same bytes, metrics and outcomes
        (errors, declines)."""
        t0 = perf_counter()
        state = self.state
        try:
            got = answer(state, scope, fields, arg)
        except Exception as exc:  # every failure becomes a JSON error, never a crash
            reply = error_reply(failure(exc, state.metrics))
        else:
            if got is None:
                return None
            form, mt, body = got
            if type(body) is bytes:
                cors = "origin" in fields
                kept = self._lane_kept.get((form, mt, cors, scope["path"], method))
                if kept is None:
                    kept = self._lane_keep(form, mt, cors, scope["path"], method)
                before, after, rec = kept
                if rec is not None:  # (Metrics.query_request, folded later: Metrics.lane_record)
                    rec.append(perf_counter() - t0)
                    if len(rec) >= LANE_FOLD:
                        self.metrics.fold_lane()
                return 200, b"%scontent-length: %d\r\n%s" % (before, len(body), after), body
            reply = _ok(state, *got)
        if self.metrics is not None:
            self.metrics.observe_request(scope["path"], method, reply.status, time.perf_counter() - t0)
        return reply.status, self._head(reply, "origin" in fields), reply.body

    answer_get = _lane_answer

    def _lane_keep(self, form: str, mt: str, cors: bool, path: str, method: str) -> tuple:
        """(the header lines around the length (:meth:`_ok_head`), the metrics' list of the
        answers' seconds (``Metrics.lane_record``; None without metrics)) of a lane answer
        of ``form`` as ``mt`` on (``path``, ``method``), kept per those."""
        parts = self._ok_heads.get((mt, cors))
        if parts is None:
            parts = self._ok_head(mt, cors)
        m = self.metrics
        kept = (parts[0], parts[1], None if m is None else m.lane_record(form, path, method))
        if len(self._lane_kept) >= 256:
            self._lane_kept = {}
        self._lane_kept[(form, mt, cors, path, method)] = kept
        return kept

    def _ok_head(self, mt: str, cors: bool) -> tuple[bytes, bytes]:
        """The header lines around the length of a 200 answer of media type ``mt``
        (:meth:`_head` of the reply ``_ok`` builds for it), kept per (mt, CORS)."""
        reply = Reply(200, b"", formats.content_type(mt), VARY_ACCEPT)
        self._head(reply, cors)
        parts = self._heads[(reply.content_type, cors)]
        if len(self._ok_heads) >= 256:
            self._ok_heads = {}
        self._ok_heads[(mt, cors)] = parts
        return parts

    def _head(self, reply: Reply, cors: bool) -> bytes:
        """The header lines of ``reply`` and the edge's (:meth:`edge_headers`; CORS when
        ``cors``), as :meth:`Reply.raw_headers` orders them: built once per (content
        type, headers, CORS) and kept, only the length written per answer."""
        if reply.stream is not None:
            return b"".join(k + b": " + v + b"\r\n" for k, v in self.edge_headers(reply.raw_headers(), cors))
        key = ((reply.content_type, cors) if reply.headers is VARY_ACCEPT
               else (reply.content_type, cors, *reply.headers.items()))
        parts = self._heads.get(key)
        if parts is None:
            lines = [k + b": " + v + b"\r\n" for k, v in self.edge_headers(reply.raw_headers(), cors)]
            cut = 1 if reply.content_type is not None else 0  # the content-length line goes there
            parts = (b"".join(lines[:cut]), b"".join(lines[cut + 1:]))
            if len(self._heads) >= 256:
                self._heads = {}
            self._heads[key] = parts
        return b"%scontent-length: %d\r\n%s" % (parts[0], len(reply.body), parts[1])

    async def _send_reply(self, send, method: str, reply: Reply) -> None:
        await reply.send(send, method)

    async def _preflight(self, scope, send) -> None:
        headers = [
            (b"access-control-allow-methods", _CORS_METHODS),
            (b"access-control-allow-headers", _CORS_ALLOW_HEADERS),
            (b"access-control-max-age", b"86400"),
            (b"allow", _CORS_METHODS),
            (b"content-length", b"0"),
        ]
        for k, v in scope["headers"]:
            if k == b"access-control-request-headers":
                headers[1] = (b"access-control-allow-headers", v)
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _cors_headers(origin: bytes) -> list[tuple[bytes, bytes]]:
    """The CORS lines of an answer to a request with ``Origin`` (``Vary: Origin`` is
    :meth:`EdgeMiddleware.edge_headers`' part, on every answer)."""
    return [(b"access-control-allow-origin", origin),
            (b"access-control-expose-headers", b"Content-Type, Content-Length, Location, Retry-After, WWW-Authenticate, X-Request-Id")]


def _edge_of(app) -> tuple[EdgeMiddleware | None, RequestLog | None]:
    """The EdgeMiddleware inside uvicorn's wrappers of the app (built at the first
    call, the lifespan start-up), or None; and the request log wrapping it, if any."""
    rlog = None
    for _ in range(8):
        if isinstance(app, RequestLog):
            rlog = app
        if isinstance(app, JindouApp):
            stack = app.middleware_stack
            return (stack if isinstance(stack, EdgeMiddleware) else None), rlog
        app = getattr(app, "app", None)
        if app is None:
            break
    return None, rlog


def http_protocol():
    """The ``http`` setting for ``uvicorn.Config``: :class:`FastLaneProtocol` when
    httptools is installed, else uvicorn's h11 protocol (no fast lane)."""
    try:
        return _fast_lane_class()
    except ImportError:
        return "h11"


_FAST_LANE = None

#: a lane answer up to this size waits for the end of the event loop's pass (see
#: _defer_write); a larger one is written at once (after the connection's waiting ones)
DEFER_MAX = 16 << 10
#: answers one connection may have waiting before they are written (a pipelining client)
DEFER_ANSWERS = 32


class _Outbox:
    """One server's connections with lane answers waiting (:meth:`FastLaneProtocol._defer_write`)."""

    __slots__ = ("conns", "last", "poll")

    def __init__(self, poll=None):
        self.conns: list = []
        self.last = 0  # id() of the connection of the server's last lane answer
        self.poll = poll  # the loop's spin before it sleeps (server.idle_poll; None: --poll-us 0)


def _flush_outbox(box: _Outbox) -> None:
    """Write the lane answers of the loop's last pass (one connection whose write fails
    does not keep the others' answers back: it is aborted)."""
    conns = box.conns
    box.conns = []
    for conn in conns:
        try:
            conn._flush_out()
        except Exception:  # noqa: BLE001 - a broken transport: drop that connection only
            log.warning("lane answer not written: connection aborted", exc_info=True)
            with contextlib.suppress(Exception):
                conn.transport.abort()


def _fast_lane_class():
    global _FAST_LANE
    if _FAST_LANE is not None:
        return _FAST_LANE
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

    from server.coalesce import HeldHeads

    class FastLaneProtocol(HeldHeads, HttpToolsProtocol):
        """uvicorn's httptools protocol with a synchronous lane for selective
        ``GET /sparql?query=`` requests and ``POST /sparql`` ones with a small
        query or form body (:mod:`server.lane`): when nothing is in flight on the
        connection, uvicorn's access log is off, and the query's shape runs
        inline, the answer is computed from the bytes received (a POST's body
        waits for its last piece) and written in one piece (status line,
        uvicorn's default headers, the reply's, CORS). Otherwise the request goes through the ordinary ASGI
        path exactly as uvicorn would run it."""

        _lane: bytes | None = None
        _dh_of: list | None = None  # the default headers last rendered, and their bytes
        _dh_bytes: bytes = b""
        _edge: EdgeMiddleware | None = None
        _rlog: RequestLog | None = None
        _mid = False  # httptools is inside a request (between its message begin and complete)
        _lean: bool | None = None  # heads read by server.lane (None: not decided yet)
        _no_lane = False  # the next request httptools parses was declined by the lane already
        _answered = 0.0  # loop time of the last answer written by the lane (keep-alive)
        _active_at = 0.0  # loop time of the last request httptools began (connection balance)
        _opened_at = 0.0  # loop time the connection was opened (connection balance)
        _lane_scope: dict | None = None  # the scope of the lane's requests on this connection
        _held: bytes | None = None  # a lane POST whose body has not all arrived (data_received)
        _held_head = None  # ... its head (server.lane.Head), read when its first bytes came: not read again
        _outbox: _Outbox | None = None  # the server's waiting lane answers (None: write at once)
        _out: list | None = None  # this connection's lane answers waiting for the end of the loop's pass

        def _lean_ok(self) -> bool:
            """Whether this connection's plain lane requests are read by :mod:`server.lane`
            (decided once: the app is built and no access log needs the ASGI cycle)."""
            ok = False
            if not self.config.access_log:
                edge = self._edge
                if edge is None:
                    edge, self._rlog = _edge_of(self.app)
                    self._edge = edge
                ok = edge is not None and (self._rlog is None or not self._rlog.access)
            # (a connection driven without a running loop, as the in-process harnesses drive
            # one, writes at once: nothing would come round to write the waiting answers)
            if ok and edge.state.config.batch_writes and self.loop.is_running():
                box = getattr(self.server_state, "jindou_outbox", None)  # one per server (and loop)
                if box is None:
                    box = self.server_state.jindou_outbox = _Outbox(
                        idle_poll_for(self.loop, edge.state.config.poll_us))
                self._outbox = box
            self._lean = ok
            return ok

        def _defer_write(self, data: bytes) -> None:
            """Write ``data`` (a lane answer) once the event loop has run this pass's other
            ready connections: the answers to the requests one ``epoll`` wait returned are
            computed back to back, then written. Each write wakes a client (on loopback, in
            the writer's own system call), which is often placed on the server's CPU and
            preempts it; written as they were computed, the requests of one pass were
            computed between those preemptions, with the caches the clients left. The
            connection's answers keep their order: whatever else this connection writes
            (httptools, the ASGI path, a close) goes after :meth:`_flush_out`."""
            out = self._out
            if out is None:
                self._out = [data]
                conns = self._outbox.conns
                if not conns:
                    self.loop.call_soon(_flush_outbox, self._outbox)
                conns.append(self)
            else:
                out.append(data)
                if len(out) >= DEFER_ANSWERS:  # a pipelining client: no more than this held
                    self._flush_out()

        def _flush_out(self) -> None:
            """Write this connection's waiting lane answers (in one piece)."""
            out = self._out
            if out is not None:
                self._out = None
                if not self.transport.is_closing():
                    self.transport.write(out[0] if len(out) == 1 else b"".join(out))

        def connection_lost(self, exc) -> None:
            self._out = None
            super().connection_lost(exc)

        def shutdown(self) -> None:
            self._flush_out()
            super().shutdown()

        def data_received(self, data: bytes) -> None:
            # Plain lane requests complete in ``data`` are answered here without httptools
            # (server.lane); the rest (everything, while a request is in flight) as before.
            # A lane POST whose body is still on its way waits in _held for the rest.
            held = self._held
            first = None
            if held is not None:
                self._held = None
                data = held + data
                first = self._held_head
            if ((self._lean or (self._lean is None and self._lean_ok())) and not self._mid and not self._no_lane
                    and (self.cycle is None or self.cycle.response_complete) and not self.pipeline
                    and not self.flow.write_paused and not self.transport.is_closing()):
                data = self._answer_heads(data, True, first)
                if not data:
                    return
            if self._out is not None:  # httptools may write at once (an error): after our answers
                self._flush_out()
            super().data_received(data)

        def _answer_heads(self, data: bytes, hold: bool = False, first=None) -> bytes:
            """Answer the plain lane requests at the start of ``data`` (pipelined ones
            in order); the bytes left for httptools (b"" when none). With ``hold``, a
            lane POST whose body is not all in ``data`` yet is kept (in ``_held``, for
            the next read: b"" is returned); without, it is left to the caller. ``first``: the
            head of the held POST ``data`` starts with (read already, its offsets ``data``'s)."""
            pos = 0
            edge = self._edge
            while True:
                if first is None:
                    head = read_head(data, pos)
                else:  # (a held POST: its head bytes are the same, and so is their reading)
                    head, first = first, None
                if head is None:
                    break
                post = head.body >= 0
                if post and head.end - head.body > edge.max_body:  # the ordinary path's 413, at once
                    self._no_lane = True
                    break
                if post and head.end > len(data):  # the body is on its way
                    if hold:
                        # as httptools would: no keep-alive timeout while a request arrives
                        self._unset_keepalive_if_required()
                        self._held = data[pos:]
                        self._held_head = head if pos == 0 else None  # (offsets of data[0:])
                        return b""
                    break
                path = head.path
                # one scope per connection, its request fields set per request (the lane's
                # handler keeps no reference to it; a declined request gets httptools' own)
                scope = self._lane_scope
                if scope is None:
                    scope = self._lane_scope = {"type": "http", "method": "GET", "server": self.server,
                                                "client": self.client, "scheme": self.scheme,
                                                "root_path": self.root_path}
                scope["http_version"] = "1.0" if head.http10 else "1.1"
                scope["path"] = "/sparql" if path == b"/sparql" else "/sparql/"
                scope["raw_path"] = path
                scope["headers"] = head.headers
                scope["jindou.fields"] = head.fields
                try:
                    if post:
                        scope["method"] = "POST"
                        scope["query_string"] = head.qs or b""
                        answer = edge.answer_post_inline(scope, data[head.body:head.end])
                    else:
                        scope["method"] = "GET"
                        scope["query_string"] = head.qs
                        answer = edge.answer_get(scope, head.fields, head.qs)
                except Exception:  # the ordinary path answers (and logs) whatever went wrong
                    answer = None
                if answer is None:  # httptools parses it, the ASGI path answers it
                    self._no_lane = True
                    break
                pos = head.end
                if not self._write_answer(answer, head.headers, not head.close, self._outbox is not None):
                    return b""
                if self.flow.write_paused:  # the client does not read: the rest waits in httptools
                    break
                if pos == len(data):
                    return b""
            return data[pos:] if pos else data

        def _write_answer(self, answer, headers, keep_alive: bool, defer: bool = False) -> bool:
            """Write one lane answer in one piece; False when the connection closes after it.
            With ``defer`` (the lane's own reading, :meth:`_answer_heads`), a small answer on a
            connection kept open waits for the end of the loop's pass (:meth:`_defer_write`)."""
            status, head, body = answer
            dh = self.server_state.default_headers
            if dh is not FastLaneProtocol._dh_of:  # uvicorn renews the list (its date) every second
                FastLaneProtocol._dh_bytes = b"".join(k + b": " + v + b"\r\n" for k, v in dh)
                FastLaneProtocol._dh_of = dh
            rlog = self._rlog
            if keep_alive and rlog is not None:  # the common case, in one format
                out = b"%s%s%s%s\r\n%s" % (STATUS_LINE[status], FastLaneProtocol._dh_bytes, head,
                                            rlog.request_id_line(headers), body)
            else:
                parts = [STATUS_LINE[status], FastLaneProtocol._dh_bytes, head]
                if rlog is not None:
                    parts.append(rlog.request_id_line(headers))
                if not keep_alive:
                    parts.append(b"connection: close\r\n")
                parts += (b"\r\n", body)
                out = b"".join(parts)
            # (deferred while answers alternate between connections: one client's requests,
            # one at a time, gain nothing from waiting for the loop and are written at once)
            box = self._outbox
            if box is not None:
                me = id(self)
                if box.poll is not None:  # poll a while before the loop sleeps (server.idle_poll)
                    box.poll.after_pass(me)
                if box.last != me:
                    box.last = me
                elif self._out is None:
                    defer = False
            if defer and keep_alive and len(out) <= DEFER_MAX:
                self._defer_write(out)
            else:
                if self._out is not None:  # the connection's waiting answers go first
                    self._flush_out()
                self.transport.write(out)
            self.server_state.total_requests += 1
            if not keep_alive:
                self.transport.close()
                return False
            # one keep-alive timer per idle spell, not one per request: the timer checks
            # the time of the last answer when it fires (timeout_keep_alive_handler)
            self._answered = self.loop.time()
            if self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                    self.timeout_keep_alive_handler)
            return True

        def timeout_keep_alive_handler(self) -> None:
            idle = self.loop.time() - self._answered
            if idle < self.timeout_keep_alive:  # answered since the timer was set: wait the rest
                self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive - idle,
                                                                    self.timeout_keep_alive_handler)
                return
            super().timeout_keep_alive_handler()

        def on_message_begin(self) -> None:
            self._mid = True
            self._active_at = self.loop.time()
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._lane = None
            if self._no_lane:  # declined by the lane a moment ago: straight to the ASGI path
                self._no_lane = False
                super().on_headers_complete()
                return
            url = self.url
            if ((url.startswith(b"/sparql?") or url.startswith(b"/sparql/?"))
                    and not self.config.access_log  # uvicorn's access lines come from its ASGI cycle
                    and (self.cycle is None or self.cycle.response_complete) and not self.pipeline
                    and self.parser.get_method() == b"GET"
                    and not any(k in LANE_DECLINES for k, _ in self.headers)):
                edge = self._edge
                if edge is None:
                    edge, self._rlog = _edge_of(self.app)
                    self._edge = edge
                # our access lines are written by the request log's ASGI wrapper
                if edge is not None and (self._rlog is None or not self._rlog.access):
                    self._lane = url
                    return
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._mid = False
            url = self._lane
            if url is None:
                super().on_message_complete()
                return
            self._lane = None
            path, _, qs = url.partition(b"?")
            qs = qs.partition(b"#")[0]   # a fragment is not part of the query (httptools.parse_url)
            scope = self.scope
            scope["method"] = "GET"
            scope["path"] = path.decode("ascii")
            scope["raw_path"] = path
            scope["query_string"] = qs
            http10 = self.parser.get_http_version() == "1.0"
            if http10:
                scope["http_version"] = "1.0"
            try:
                answer = self._edge.answer_inline(scope, qs)
            except Exception:  # the ordinary path answers (and logs) whatever went wrong
                answer = None
            if answer is None:
                super().on_headers_complete()
                super().on_message_complete()
                return
            self._write_answer(answer, self.headers, not http10 and self.parser.should_keep_alive())

    _FAST_LANE = FastLaneProtocol
    return _FAST_LANE


def _make_database(config: Settings):
    from engine.database import Database

    return Database(shards=config.shards, data_dir=config.data_dir, query_timeout=config.query_timeout,
                    max_rows=config.max_rows, allow_load=config.allow_load, query_memory=config.query_memory,
                    workers=config.workers, cluster=config.cluster, cluster_transport=config.cluster_transport,
                    cluster_exec=config.cluster_exec)


def _service_policy(config: Settings):
    """Which SERVICE endpoints queries may call (engine/exec/service.py)."""
    from engine.exec.service import ServicePolicy

    return ServicePolicy(config.allow_service, tuple(config.service_endpoints))


def _make_stream_manager(config: Settings, database):
    """The continuous-query engine over ``database`` (None when it is not available)."""
    try:
        from engine.stream.manager import StreamManager
    except ImportError:
        log.warning("engine.stream.manager is not available: /streams and /queries answer 503")
        return None
    from engine.stream.registry_store import RegistryError

    try:
        manager = StreamManager(database, retain=config.retain, retain_bytes=config.retain_bytes,
                                retain_total_bytes=config.retain_total_bytes,
                                transient_budget=config.transient_budget,
                                data_dir=config.data_dir, idle_after=config.idle_after,
                                batch_id_limit=config.batch_id_limit, skip_behind=config.skip_behind,
                                maintain_cpu_ratio=config.maintain_cpu_ratio)
        from engine.stream.sinks import SinkPolicy  # result sinks: the operator's allow-lists

        manager.sinks.start(SinkPolicy.of(config.webhook_allow, config.nats_allow, config.sink_retry_max),
                            manager.log)
        return manager
    except RegistryError:
        raise  # an unreadable streams.json stops the start (never a silent reset)
    except Exception as exc:  # e.g. a stand-in database object without a store
        log.warning("continuous queries are off: %s: %s", type(exc).__name__, exc)
        return None


class JindouApp(FastAPI):
    """FastAPI with :class:`EdgeMiddleware` *outside* the whole middleware stack:
    the fast path then skips FastAPI's per-request error, telemetry and body-limit
    layers (about 100 µs per request here), and CORS covers every answer."""

    def build_middleware_stack(self):
        inner = super().build_middleware_stack()
        return EdgeMiddleware(inner, self.state.jindou)

    async def __call__(self, scope, receive, send):
        # The hot paths skip FastAPI's per-request telemetry check (an environment lookup).
        if scope["type"] == "http" and scope["path"] in FAST_PATHS and self.middleware_stack is not None:
            scope["app"] = self
            await self.middleware_stack(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def static_dir() -> Path | None:
    """The web front end: ``$JINDOU_STATIC`` or the repository's ``static/``."""
    env = os.environ.get("JINDOU_STATIC")
    d = Path(env) if env else Path(__file__).resolve().parent.parent / "static"
    return d if (d / "index.html").is_file() else None


#: the dashboard's assets: revalidated on every load (ETag / Last-Modified make that a cheap 304)
_STATIC_CACHE = "no-cache"
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".svg": "image/svg+xml", ".html": "text/html; charset=utf-8", ".json": "application/json",
                 ".txt": "text/plain; charset=utf-8", ".png": "image/png", ".woff2": "font/woff2"}


class _StaticFiles(StaticFiles):
    """StaticFiles with fixed content types (not the host's mime.types) and a Cache-Control header."""

    def file_response(self, full_path, stat_result, scope, status_code: int = 200) -> Response:
        resp = super().file_response(full_path, stat_result, scope, status_code)
        ctype = _STATIC_TYPES.get(Path(full_path).suffix.lower())
        if ctype is not None and "content-type" in resp.headers:
            resp.headers["content-type"] = ctype
        resp.headers["cache-control"] = _STATIC_CACHE
        return resp


def _mount_static(app: FastAPI) -> None:
    d = static_dir()
    if d is None:
        log.warning("no static/ folder with index.html found: '/' answers 404")
        return

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(d / "index.html", media_type="text/html", headers={"Cache-Control": _STATIC_CACHE})

    app.mount("/static", _StaticFiles(directory=d), name="static")


def create_app(config: Settings | None = None, database=None) -> FastAPI:
    """Build the ASGI app. ``database`` defaults to a new ``engine.database.Database``
    made from ``config`` (shards, data_dir, query_timeout, max_rows, allow_load)."""
    config = config or Settings()
    if database is None:
        database = _make_database(config)
    database.service_policy = _service_policy(config)
    metrics = admin.Metrics() if config.metrics else None
    state = ServerState(config, database, metrics)
    sparql._ANSWERS.configure(config.answer_cache)   # repeated texts' kept answers (--answer-cache)
    state.streams = _make_stream_manager(config, database)
    if metrics is not None:
        metrics.bind(state)  # /metrics reads the stream manager, and hears its evaluations

    @contextlib.asynccontextmanager
    async def lifespan(app):
        demo = None
        if config.demo and state.streams is not None:
            from server.demo_stream import DemoStream

            demo = DemoStream(state.streams)
            await demo.start()
        try:
            yield
        finally:
            if demo is not None:
                await demo.stop()
            if state.streams is not None:
                from starlette.concurrency import run_in_threadpool

                await run_in_threadpool(state.streams.close)

    app = JindouApp(
        title="Jindou",
        version=admin.VERSION,
        description=DESCRIPTION,
        docs_url=None,  # /docs is server/api/admin.py's: Swagger UI from local assets, no CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.jindou = state
    app.state.config = config
    app.state.db = database

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError):
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _starlette_error(request: Request, exc: StarletteHTTPException):
        kinds = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized", 403: "forbidden",
                 413: "too_large", 415: "unsupported_media_type"}
        return HTTPError(exc.status_code, kinds.get(exc.status_code, "http_error"), exc.detail,
                         headers=dict(exc.headers or {})).response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in exc.errors()]
        return HTTPError(400, "bad_request", errors).response()

    @app.exception_handler(Exception)
    async def _any_error(request: Request, exc: Exception):
        return failure(exc, metrics).response()

    app.include_router(sparql.router)
    app.include_router(update.router)
    app.include_router(store.router)
    app.include_router(streams.router)
    app.include_router(queries.router)
    app.include_router(admin.router)
    _mount_static(app)
    return app
