"""RDF streams: registration, ingestion and heartbeats (contract "HTTP API").

* ``PUT /streams/{name}`` with JSON ``{"iri", "absorb", "clock"}`` registers a
  stream: 201 created, 200 when the same registration exists, 409 on a
  conflicting name or IRI.
* ``GET /streams``, ``GET /streams/{name}``, ``DELETE /streams/{name}[?force=true]``.
* ``POST /streams/{name}``: ``application/x-ndjson`` (one element a line), an
  Arrow IPC stream (``application/vnd.apache.arrow.stream``: columns s, p, o, t;
  the fast path for pipelines) or an RDF graph (``application/n-triples``,
  ``text/turtle``; timestamp ``?t=``), answered 202 with the ingestion report.
  An optional ``Batch-Id`` header (or ``?batch=``) makes the POST idempotent: a
  batch already applied to the stream answers ``{"duplicate": true, ...}``.
* ``POST /streams/{name}/progress?t=<ms>``: heartbeat.

The engine side is :class:`engine.stream.manager.StreamManager` (``state.streams``);
every call into it runs in the thread pool, so parsing a large body never
blocks the event loop.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from engine import formats
from engine.stream.adaptor import ARROW_STREAM_TYPE, MISSING_T, read_arrow_ipc
from engine.stream.limits import ABSORB_MAX, IRI_MAX, name_error, parse_time, shorten
from server.api.common import (
    HTTPError,
    ServerState,
    check_charset,
    check_read,
    check_write,
    error_response,
    json_object,
    one,
    parse_content_type,
    parse_params,
    request_body_reader,
)

router = APIRouter(tags=["Streams"])

_IRI_BAD = re.compile(r'[\x00-\x20<>"{}|^`\\]')

NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl",
                          "application/x-jsonlines", "application/jsonlines"})


def graph_body_format(ct: str | None) -> formats.Format | None:
    """The registry format of a graph body (one graph = one stream element), None if not one."""
    f = formats.for_media_type(ct) if ct else None
    return f if f is not None and f.stream and f.parser is not None else None


def _graph_body_types() -> list[str]:
    return sorted(f.media_type for f in formats.readable(formats.GRAPH) if f.stream)

_REG_KEYS = frozenset({"iri", "absorb", "clock"})

_ERR = {
    400: {"description": "Bad request (JSON, name, parameters, syntax of the body)"},
    401: {"description": "Token required"},
    403: {"description": "Wrong token"},
    404: {"description": "No such stream"},
    409: {"description": "Conflicting registration / stream in use"},
    413: {"description": "Request body too large"},
    415: {"description": "Unsupported media type"},
    422: {"description": "Element older than the stream's progress, or every line of a batch refused"},
    503: {"description": "Window store full (backpressure: retry after Retry-After) or streams unavailable"},
}
ARROW_TYPES = frozenset({ARROW_STREAM_TYPE, "application/x-apache-arrow-stream"})


def json_response(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(doc, default=str), status_code=status, media_type="application/json",
                    headers=headers)


def headers_of(request: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


def manager_of(state: ServerState):
    m = getattr(state, "streams", None)
    if m is None:
        raise HTTPError(503, "unavailable", "continuous queries are not available on this server")
    return m


async def manager_read(request: Request, call) -> Response:
    """A read endpoint of the stream manager: check the read token, run ``call(manager)`` off the
    event loop, answer its result as JSON (errors through :func:`error_response`)."""
    state: ServerState = request.app.state.jindou
    try:
        check_read(state.config, headers_of(request))
        m = manager_of(state)
        return json_response(await run_in_threadpool(call, m))
    except Exception as exc:
        return error_response(state, exc)


def check_name(name: str, what: str = "stream") -> None:
    err = name_error(name, what)
    if err is not None:
        raise HTTPError(400, "bad_request", err)


def int_param(params: dict[str, list[str]], key: str, required: bool = False) -> int | None:
    """A time parameter (``t``, ``from``): integer ms in the contract's range, else 400."""
    v = one(params, key)
    if v is None or v == "":
        if required:
            raise HTTPError(400, "bad_request", f"parameter {key!r} (integer milliseconds) is required")
        return None
    return parse_time(v, f"parameter {key!r}")  # BadTimestamp: a 400


def parse_registration(body: bytes) -> tuple[str, Any, str]:
    """Validate a PUT /streams/{name} body -> (iri, absorb, clock)."""
    if not body.strip():
        raise HTTPError(400, "bad_request", 'a JSON body {"iri": "<stream iri>"} is required')
    doc = json_object(body)
    unknown = sorted(set(doc) - _REG_KEYS)
    if unknown:
        raise HTTPError(400, "bad_request", f"unknown member(s) {unknown}; allowed: iri, absorb, clock")
    iri = doc.get("iri")
    if not isinstance(iri, str) or ":" not in iri or _IRI_BAD.search(iri) or not iri or len(iri) > IRI_MAX:
        raise HTTPError(400, "bad_request", f'"iri" must be an absolute IRI string of at most {IRI_MAX} '
                                            f"characters, not {shorten(iri)}")
    absorb = doc.get("absorb", "none")
    if isinstance(absorb, str):
        if absorb not in ("none", "all"):
            raise HTTPError(400, "bad_request", f'"absorb" must be "none", "all" or a list of predicate IRIs, not {shorten(absorb)}')
    elif isinstance(absorb, list):
        if len(absorb) > ABSORB_MAX:
            raise HTTPError(400, "bad_request", f'"absorb" lists at most {ABSORB_MAX} predicates, not {len(absorb)}')
        for p in absorb:
            if not isinstance(p, str) or ":" not in p or _IRI_BAD.search(p) or len(p) > IRI_MAX:
                raise HTTPError(400, "bad_request", f'"absorb" lists predicate IRIs (at most {IRI_MAX} '
                                                    f"characters); {shorten(p)} is not one")
    else:
        raise HTTPError(400, "bad_request", f'"absorb" must be "none", "all" or a list of predicate IRIs, not {shorten(absorb)}')
    clock = doc.get("clock", "event")
    if clock not in ("event", "arrival"):
        raise HTTPError(400, "bad_request", f'"clock" must be "event" or "arrival", not {shorten(clock)}')
    return iri, absorb, clock


@router.get("/streams", summary="List the registered streams", responses=_ERR)
async def streams_list(request: Request) -> Response:
    """`{"streams": [info, ...]}` with each stream's IRI, absorb, clock, progress and counters."""
    return await manager_read(request, lambda m: {"streams": m.streams()})


@router.put("/streams/{name}", summary="Register a stream", status_code=201,
            responses={200: {"description": "Already registered with this body"}, **_ERR},
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["iri"], "properties": {
                    "iri": {"type": "string"},
                    "absorb": {"oneOf": [{"type": "string", "enum": ["none", "all"]},
                                         {"type": "array", "items": {"type": "string"}}]},
                    "clock": {"type": "string", "enum": ["event", "arrival"]}}}}}}})
async def stream_put(name: str, request: Request) -> Response:
    """201 with the stream's info when created, 200 when the same registration exists; 409
    when the name has another IRI or the IRI is registered under another name."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, headers_of(request))
        check_name(name)
        m = manager_of(state)
        body = await request_body_reader(request, state.config.max_body)()
        iri, absorb, clock = parse_registration(body)
        created, info = await run_in_threadpool(m.register_stream, name, iri, absorb, clock)
        if created:
            return json_response(info, 201, {"Location": f"/streams/{name}"})
        return json_response(info, 200)
    except Exception as exc:
        return error_response(state, exc)


@router.get("/streams/{name}", summary="A stream's registration and counters", responses=_ERR)
async def stream_get(name: str, request: Request) -> Response:
    return await manager_read(request, lambda m: m.stream(name))


@router.delete("/streams/{name}", summary="Unregister a stream", responses=_ERR)
async def stream_delete(name: str, request: Request) -> Response:
    """409 while registered queries read the stream, unless `?force=true`, which deletes
    those queries too. Answers `{"deleted": name, "queries": [deleted query names]}`."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, headers_of(request))
        m = manager_of(state)
        params = parse_params(request.scope.get("query_string", b""))
        force_s = (one(params, "force") or "false").strip().lower()
        if force_s not in ("true", "false", "1", "0", "yes", "no", ""):
            raise HTTPError(400, "bad_request", f"force must be true or false, not {shorten(force_s)}")
        force = force_s in ("true", "1", "yes")
        queries = await run_in_threadpool(m.delete_stream, name, force)
        return json_response({"deleted": name, "queries": list(queries or [])})
    except Exception as exc:
        return error_response(state, exc)


_ARROW_SCHEMA = {"type": "string", "format": "binary", "description":
                 "Arrow IPC stream; columns s, p, o: utf8 / large_utf8 / dictionary<utf8> "
                 "(N-Triples terms), t: int64 event time in ms or a timestamp (not needed on an arrival-clock stream)"}


def batch_id_of(request: Request, params: dict[str, list[str]]) -> str | None:
    """The ``Batch-Id`` header or the ``batch`` query parameter (both: they must agree)."""
    h = request.headers.get("batch-id")
    q = one(params, "batch")
    if h is not None and q is not None and h.strip() != q.strip():
        raise HTTPError(400, "bad_request", f"Batch-Id header {shorten(h)} and ?batch={shorten(q)} differ")
    v = h if h is not None else q
    if v is None:
        return None
    v = v.strip()
    if not v:
        raise HTTPError(400, "bad_request", "an empty Batch-Id")
    return v


def _ingest_arrow_body(m, name: str, body: bytes, batch_id: str | None) -> dict:
    """Thread-pool side of an Arrow POST: read the IPC stream, then the manager's Arrow path."""
    return m.ingest_arrow(name, read_arrow_ipc(body), batch_id)


@router.post("/streams/{name}", summary="Send stream elements", status_code=202,
             responses={**_ERR, 207: {"description": "Some lines refused (listed in errors), the others kept"}},
             openapi_extra={"parameters": [
                 {"name": "t", "in": "query", "required": False, "schema": {"type": "integer"},
                  "description": "event time of a graph body, epoch milliseconds; required on an event-time "
                                 "stream (400 without it), ignored by an arrival-clock stream"},
                 {"name": "Batch-Id", "in": "header", "required": False, "schema": {"type": "string"},
                  "description": "idempotency key: a batch already applied to this stream is skipped "
                                 "and answered {\"duplicate\": true, ...} (the most recent 100k ids per "
                                 "stream are remembered, across restarts with --data-dir)"},
                 {"name": "batch", "in": "query", "required": False, "schema": {"type": "string"},
                  "description": "the same as the Batch-Id header"}],
                 "requestBody": {"required": True, "content": {
                     "application/x-ndjson": {"schema": {"type": "string"}},
                     ARROW_STREAM_TYPE: {"schema": _ARROW_SCHEMA},
                     **{mt: {"schema": {"type": "string"}} for mt in _graph_body_types()}}}})
async def stream_post(name: str, request: Request) -> Response:
    """ndjson: one `{"s","p","o","t"}` a line, bad lines reported and the others kept
    (`t`: integer ms in [0, 2^53-1]; more than 100,000 bad lines: 400, nothing stored).
    Arrow IPC stream (`application/vnd.apache.arrow.stream`): columns `s`, `p`, `o`
    (strings, N-Triples terms) and `t` (int64 ms), the vectorized fast path with the
    same rules as ndjson (`line` = 1-based row); a missing or mistyped column or a body
    that is not an IPC stream is 400 and stores nothing.
    N-Triples / Turtle: one graph = one element at `?t=` (epoch ms; an event-time stream
    without it is 400, an arrival-clock stream stamps it), atomic (400 on a syntax error,
    422 when `t` is below the stream's progress). Answers
    `{"accepted","rejected","errors","progress"}` with 202 when every line was taken,
    207 when some lines were refused (the others are kept; `errors` lists each refused
    line and why), 400 when no line had `t` on an event-time stream, 422 when all were
    refused otherwise; with a `Batch-Id` header (or
    `?batch=`) also `"duplicate"` and `"batch_id"`: a re-delivered batch changes nothing
    and answers `"duplicate": true`."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, headers_of(request))
        m = manager_of(state)
        ct, ct_params = parse_content_type(request.headers.get("content-type"))
        params = parse_params(request.scope.get("query_string", b""))
        batch_id = batch_id_of(request, params)
        if ct in ARROW_TYPES:
            body = await request_body_reader(request, state.config.max_body)()
            report = await run_in_threadpool(_ingest_arrow_body, m, name, body, batch_id)
        elif ct in NDJSON_TYPES:
            check_charset(ct_params)
            body = await request_body_reader(request, state.config.max_body)()
            report = await run_in_threadpool(m.ingest_ndjson, name, body, batch_id)
        elif (gf := graph_body_format(ct)) is not None:
            check_charset(ct_params)
            t = int_param(params, "t")
            body = await request_body_reader(request, state.config.max_body)()
            report = await run_in_threadpool(m.ingest_graph, name, body, gf.media_type, t, batch_id)
        else:
            raise HTTPError(415, "unsupported_media_type",
                            f"{ct or 'a missing Content-Type'} is not accepted here: send application/x-ndjson, "
                            f"{ARROW_STREAM_TYPE}, " + " or ".join(_graph_body_types()))
        status = ingest_status(report)
        if status == 400:
            report = {"error": "missing_time", "detail": f"stream {name!r} takes event time: every line needs "
                      "\"t\" (epoch milliseconds), or register the stream with \"clock\": \"arrival\"", **report}
        return json_response(report, status)
    except Exception as exc:
        return error_response(state, exc)


def ingest_status(report: dict) -> int:
    """202 when every line was taken; 207 when some were refused and the others kept (the
    report's ``errors`` say which and why); 400 when no line had a ``t`` on an event-time
    stream (the sender forgot the time: taking the clock instead would refuse the data's
    own times as late); 422 when every line was refused otherwise. Nothing is stored
    unless some line was taken. A re-delivered batch changes nothing: 202."""
    if report.get("duplicate") or not report.get("rejected"):
        return 202
    if report.get("accepted"):
        return 207
    errors = report.get("errors") or ()
    return 400 if errors and all(e.get("error") == MISSING_T for e in errors) else 422


@router.post("/streams/{name}/progress", summary="Heartbeat: raise the stream's progress", responses=_ERR,
             openapi_extra={"parameters": [{"name": "t", "in": "query", "required": True,
                                            "schema": {"type": "integer"}}]})
async def stream_progress(name: str, request: Request) -> Response:
    """`?t=<ms>`: all elements with a timestamp below t have arrived. A lower t changes
    nothing; t outside [0, 2^53-1] (or not a plain integer) is a 400 that changes nothing.
    Answers `{"progress": P}`."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, headers_of(request))
        m = manager_of(state)
        params = parse_params(request.scope.get("query_string", b""))
        t = int_param(params, "t", required=True)
        p = await run_in_threadpool(m.heartbeat, name, t)
        return json_response({"progress": p})
    except Exception as exc:
        return error_response(state, exc)
