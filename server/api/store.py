"""SPARQL 1.1 Graph Store HTTP Protocol at /store (indirect identification).

``/store?default`` is the default graph, ``/store?graph=<iri>`` a named graph.
GET/HEAD read (404 for a missing named graph), PUT replaces, POST merges
(201 when the graph was created, 204 otherwise), DELETE removes (404 when
missing). Without a parameter:

* ``GET /store`` serves the whole dataset (every graph) as TriG or N-Quads;
* ``POST /store`` with a graph (Turtle, N-Triples, RDF/XML) creates a new
  named graph with a fresh IRI under the server's address and answers 201
  with its IRI in ``Location`` (GSP "graph creation"); a dataset (N-Quads,
  TriG, JSON-LD) is loaded as it is: quads into their graphs, the rest into
  the default graph, answered with a load report. A created graph also answers
  at its own IRI, ``/store/graphs/{id}`` (direct identification).

Bodies may be ``multipart/form-data`` (file uploads of Fuseki's and YASGUI's
forms): each file part is read by its own Content-Type, or by its file name's
extension when that type is generic, and all parts are committed as one write
(a bad part stores nothing).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response

from engine import formats
from engine.errors import NotFound
from engine.exec import serialize as ser
from engine.io import ingest
from server.api.common import (
    HTTPError,
    ServerState,
    base_url,
    check_charset,
    check_read,
    check_write,
    error_response,
    iri_params,
    parse_content_type,
    parse_params,
    request_body_reader,
)

router = APIRouter(tags=["Graph Store"])

_GRAPH_PARAMS = [
    {"name": "default", "in": "query", "required": False, "allowEmptyValue": True, "schema": {"type": "string"},
     "description": "Address the default graph (give `?default` or `?graph=`)."},
    {"name": "graph", "in": "query", "required": False, "schema": {"type": "string", "format": "iri"},
     "description": "IRI of the named graph."},
]
_BODY = {"requestBody": {"required": True, "content": {
    **{f.media_type: {"schema": {"type": "string"}} for f in formats.readable(formats.GRAPH)},
    "multipart/form-data": {"schema": {"type": "object", "additionalProperties": {"type": "string",
                                                                                  "format": "binary"}}}}}}
_ERR = {
    400: {"description": "Bad parameters or unparsable data"},
    401: {"description": "Token required"},
    403: {"description": "Wrong token"},
    404: {"description": "Named graph not found"},
    406: {"description": "No acceptable RDF format"},
    413: {"description": "Request body too large"},
    415: {"description": "Unsupported RDF media type"},
}


def _target(request: Request, allow_none: bool = False) -> tuple[bool, str | None]:
    """(addressed, graph IRI or None for the default graph)."""
    params = parse_params(request.scope.get("query_string", b""))
    direct = request.scope.get(_DIRECT)
    if direct is not None:  # /store/graphs/{id}: the request IRI names the graph
        if "default" in params or "graph" in params:
            raise HTTPError(400, "bad_request", "a graph addressed by its own IRI takes no ?default or ?graph=")
        return True, direct
    has_default = "default" in params
    graphs = params.get("graph", [])
    if has_default and graphs:
        raise HTTPError(400, "bad_request", "give either ?default or ?graph=, not both")
    if len(graphs) > 1:
        raise HTTPError(400, "bad_request", "more than one 'graph' parameter")
    if graphs:
        (iri,) = iri_params({"graph": [graphs[0].strip()]}, "graph")
        if iri == "urn:jindou:default":
            return True, None
        return True, iri
    if has_default:
        return True, None
    if allow_none:
        return False, None
    raise HTTPError(400, "bad_request", "address a graph with ?default or ?graph=<iri>")


#: scope key of the graph IRI a direct request (/store/graphs/{id}) names
_DIRECT = "jindou.gsp_graph"


def _headers(request: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


def _graph_label(g: str | None) -> str:
    return "the default graph" if g is None else f"graph <{g}>"


def _input_types() -> str:
    """The canonical media types of the RDF formats the store reads (named in 415 answers)."""
    return ", ".join(sorted(f.media_type for f in formats.readable(formats.GRAPH)))


#: media types a browser gives files it does not know: the file name's extension decides
_GENERIC_TYPES = frozenset({"application/octet-stream", "text/plain", "application/x-www-form-urlencoded", ""})
#: parts of one multipart upload at most
MAX_PARTS = 100
MULTIPART = "multipart/form-data"


@dataclass
class Part:
    """One RDF payload of a request: the body, or a file part of a multipart body."""

    data: bytes
    media_type: str  # canonical media type of a readable format
    name: str  # shown in errors: "<data>" or the part's file name

    @property
    def quads(self) -> bool:
        fmt = formats.for_media_type(self.media_type)
        return fmt is not None and fmt.quads


async def _read_rdf(request: Request, state: ServerState) -> list[Part]:
    """The RDF payloads of the request: the body (any media type of a readable format of
    the registry), or the file parts of a ``multipart/form-data`` body."""
    ct, params = parse_content_type(request.headers.get("content-type"))
    if ct is None:
        raise HTTPError(415, "unsupported_media_type", "a Content-Type is needed: " + _input_types())
    if ct == MULTIPART:
        boundary = params.get("boundary")
        if not boundary:
            raise HTTPError(400, "bad_request", "a multipart/form-data body needs a boundary parameter")
        data = await request_body_reader(request, state.config.max_body)()
        if len(data) < 1 << 16:
            return _multipart_parts(data, boundary)
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(_multipart_parts, data, boundary)  # off the event loop
    fmt = formats.for_media_type(ct)
    if fmt is None or fmt.parser is None:
        raise HTTPError(415, "unsupported_media_type", f"{ct} is not a supported RDF format: " + _input_types())
    check_charset(params)
    data = await request_body_reader(request, state.config.max_body)()
    return [Part(data, fmt.media_type, "<data>")]


def _multipart_parts(body: bytes, boundary: str) -> list[Part]:
    """Split a multipart/form-data body into its RDF parts (python-multipart does the
    framing). A part is RDF when it is a file (it has a file name) or names an RDF media
    type; plain form fields are skipped; an empty file field (nothing chosen) too."""
    from python_multipart.exceptions import MultipartParseError
    from python_multipart.multipart import MultipartParser, parse_options_header

    raw: list[dict] = []
    cur: dict = {}
    hdr = {"field": b"", "value": b""}

    def on_part_begin():
        cur.clear()
        cur.update(headers={}, chunks=[])
        if len(raw) >= MAX_PARTS:
            raise HTTPError(400, "bad_request", f"more than {MAX_PARTS} parts in the multipart body")

    def on_header_field(data, start, end):
        hdr["field"] += data[start:end]

    def on_header_value(data, start, end):
        hdr["value"] += data[start:end]

    def on_header_end():
        cur["headers"][hdr["field"].decode("latin-1").strip().lower()] = hdr["value"].decode("utf-8", "replace")
        hdr["field"] = hdr["value"] = b""

    def on_part_data(data, start, end):
        cur["chunks"].append(data[start:end])

    def on_part_end():
        raw.append({"headers": dict(cur["headers"]), "data": b"".join(cur["chunks"])})

    parser = MultipartParser(boundary, {"on_part_begin": on_part_begin, "on_header_field": on_header_field,
                                        "on_header_value": on_header_value, "on_header_end": on_header_end,
                                        "on_part_data": on_part_data, "on_part_end": on_part_end})
    try:
        parser.write(body)
        parser.finalize()
    except MultipartParseError:
        raise HTTPError(400, "bad_request", "the multipart/form-data body is malformed") from None
    parts = []
    for i, p in enumerate(raw, 1):
        _, disp = parse_options_header(p["headers"].get("content-disposition", ""))
        filename = disp.get(b"filename")
        filename = None if filename is None else filename.decode("utf-8", "replace")
        label = filename or (disp.get(b"name") or b"").decode("utf-8", "replace") or f"part {i}"
        ct, params = parse_content_type(p["headers"].get("content-type"))
        fmt = formats.for_media_type(ct) if ct else None
        if fmt is not None and fmt.parser is None:
            fmt = None
        if filename is None and fmt is None:
            continue  # a plain form field
        if filename == "" and not p["data"]:
            continue  # a file field with nothing chosen
        if fmt is None or ct in _GENERIC_TYPES:
            by_ext = formats.for_path(filename) if filename else None
            if by_ext is not None and by_ext.parser is not None:
                fmt = by_ext
            elif fmt is None:
                raise HTTPError(415, "unsupported_media_type",
                                f"multipart part {label!r}: {ct or 'no Content-Type'} and its file name name no "
                                "supported RDF format: " + _input_types())
        try:
            check_charset(params)
        except HTTPError as e:
            raise HTTPError(415, "unsupported_media_type", f"multipart part {label!r}: {e.detail}") from None
        parts.append(Part(p["data"], fmt.media_type, label))
    if not parts:
        raise HTTPError(400, "bad_request", "the multipart/form-data body holds no RDF file part")
    return parts


def _base(request: Request, graph: str | None) -> str:
    if graph is not None:
        return graph
    host = request.headers.get("host", "localhost")
    return f"{request.url.scheme}://{host}/store"


@router.head("/store", summary="Headers of a graph read", responses=_ERR, openapi_extra={"parameters": _GRAPH_PARAMS})
async def store_head(request: Request) -> Response:
    """Like GET, without the body."""
    return await store_get(request)


@router.get("/store", summary="Read a graph, or the whole dataset", responses=_ERR,
            openapi_extra={"parameters": _GRAPH_PARAMS})
async def store_get(request: Request) -> Response:
    """Serialize the addressed graph; format by `Accept` (Turtle by default, N-Triples, N-Quads, TriG,
    JSON-LD, RDF/XML). Without `?default`/`?graph=`: the whole dataset as TriG (default) or N-Quads."""
    state: ServerState = request.app.state.jindou
    try:
        check_read(state.config, _headers(request))
        addressed, graph = _target(request, allow_none=True)
        accept = request.headers.get("accept")
        if not addressed:
            return await _get_dataset(request, state, accept)
        mt = formats.negotiate(accept, "GRAPH")
        if mt is None:
            raise HTTPError(406, "not_acceptable", f"no RDF format in {accept!r} is available",
                            extra={"available": list(formats.offers("GRAPH")[0])})
        db = state.db

        def work():
            try:
                res = db.graph_get(graph)
            except NotFound:
                raise HTTPError(404, "not_found", f"{_graph_label(graph)} does not exist") from None
            return ser.serialize(res, mt, graph=graph, max_bytes=state.config.max_response_bytes)

        body = await state.run(work)
        return _graph_response(request, body, mt)
    except Exception as exc:
        return error_response(state, exc)


def _graph_response(request: Request, body: bytes, mt: str) -> Response:
    headers = {"Content-Type": formats.content_type(mt), "Vary": "Accept"}
    if request.method == "HEAD":
        return Response(b"", headers={**headers, "Content-Length": str(len(body))})
    return Response(body, media_type=None, headers=headers)


def _dataset_offers() -> list[formats.Format]:
    """The writable formats that carry named graphs and write a whole dataset, preferred first."""
    return [f for f in (formats.by_name("trig"), formats.by_name("nq")) if f is not None and f.writer is not None]


def negotiate_dataset(accept: str | None) -> str | None:
    """The media type of a whole-dataset answer: TriG or N-Quads by ``Accept`` (TriG when
    the header is absent or only wildcards); None when neither is acceptable."""
    offers = _dataset_offers()
    if not accept or not accept.strip():
        return offers[0].media_type
    best, best_score = None, None
    ranges = formats.parse_accept(accept)
    for pref, f in enumerate(offers):
        for mt in f.media_types:
            t, _, sub = mt.partition("/")
            for rt, rs, q, pos in ranges:
                spec = 2 if (rt, rs) == (t, sub) else 1 if (rt == t and rs == "*") else 0 if rt == rs == "*" else -1
                if spec < 0 or q <= 0:
                    continue
                score = (q, spec, -pos, -pref)
                if best_score is None or score > best_score:
                    best, best_score = f.media_type, score
    return best


def dataset_parts(db) -> list[tuple[str | None, object]]:
    """Every graph of one snapshot as ``(IRI or None, QueryResult)``: the default graph
    first, then the named graphs by IRI (one snapshot: a write meanwhile is all or nothing)."""
    import numpy as np

    from engine.exec.evaluate import QueryContext
    from engine.exec.result import QueryResult

    snap = db.store.snapshot()
    ctx = QueryContext(snap)

    def result(g):
        s, p, o = g.scan_all()
        t = np.stack([np.asarray(s, np.int64), np.asarray(p, np.int64), np.asarray(o, np.int64)], axis=1)
        return QueryResult(form="CONSTRUCT", terms=ctx, triples=t)

    named = sorted((snap.dictionary.key(int(gid))[1:-1], gid) for gid in snap.named)
    return [(None, result(snap.default))] + [(iri, result(snap.named[gid])) for iri, gid in named]


async def _get_dataset(request: Request, state: ServerState, accept: str | None) -> Response:
    mt = negotiate_dataset(accept)
    if mt is None:
        raise HTTPError(406, "not_acceptable", f"the whole dataset is served as TriG or N-Quads, not {accept!r} "
                        "(address one graph with ?default or ?graph=<iri> for the other formats)",
                        extra={"available": [f.media_type for f in _dataset_offers()]})
    db = state.db

    def work():
        return ser.write_dataset(dataset_parts(db), mt, max_bytes=state.config.max_response_bytes)

    body = await state.run(work)
    return _graph_response(request, body, mt)


def new_graph_iri(request: Request) -> str:
    """A fresh graph IRI under the server's own address (GSP graph creation by POST)."""
    return f"{base_url(_headers(request), request.scope)}/store/graphs/{uuid.uuid4().hex}"


async def _write(request: Request, op: str) -> Response:
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, _headers(request))
        addressed, graph = _target(request, allow_none=(op == "post"))
        parts = await _read_rdf(request, state)
        db = state.db
        location = None
        if not addressed:
            if all(p.quads for p in parts):  # a dataset: quads keep their graphs
                base = _base(request, None)

                def load():
                    return ingest.load_parts(db.store, [(p.data, p.media_type, p.name) for p in parts],
                                             base=base, allow_fetch=db.allow_load)[0]

                report = await state.run(load)  # bad data: LoadError (400)
                state.data_changed()
                return Response(_report_json(report), status_code=200, media_type="application/json")
            graph = location = new_graph_iri(request)
        base = _base(request, graph)

        def work():
            if len(parts) == 1 and location is None:
                p = parts[0]
                if op == "put":
                    return db.graph_put(graph, p.data, p.media_type, base=base)
                return db.graph_post(graph, p.data, p.media_type, base=base)
            return ingest.load_parts(db.store, [(p.data, p.media_type, p.name) for p in parts], graph=graph,
                                     replace=(op == "put"), base=base, allow_fetch=db.allow_load)[1]

        created = await state.run(work)  # bad data: LoadError (400)
        state.data_changed()
        if state.metrics is not None:
            state.metrics.store_write(op)
        if location is not None:
            return Response(status_code=201, headers={"Location": location})
        return Response(status_code=201 if created else 204)
    except Exception as exc:
        return error_response(state, exc)


def _report_json(report) -> bytes:
    import orjson

    if report is None:
        return b"{}"
    if isinstance(report, dict):
        return orjson.dumps(report, default=str)
    d = getattr(report, "__dict__", None)
    if d is None:
        try:
            import dataclasses

            d = dataclasses.asdict(report)
        except TypeError:
            d = {"report": str(report)}
    return orjson.dumps(d, default=str)


@router.put("/store", summary="Replace a graph", status_code=204, responses={201: {"description": "Graph created"}, **_ERR},
            openapi_extra={"parameters": _GRAPH_PARAMS, **_BODY})
async def store_put(request: Request) -> Response:
    """Replace the addressed graph by the RDF body. 201 if the graph was created, else 204."""
    return await _write(request, "put")


@router.post("/store", summary="Add to a graph", status_code=204, responses={201: {"description": "Graph created"}, **_ERR},
             openapi_extra={"parameters": _GRAPH_PARAMS, **_BODY})
async def store_post(request: Request) -> Response:
    """Merge the RDF body into the addressed graph. 201 if the graph was created, else 204.
    Without `?default`/`?graph=`: a graph body creates a new graph (201, its IRI in `Location`);
    a dataset body (N-Quads, TriG, JSON-LD) is loaded as it is and answered with a load report.
    `multipart/form-data` bodies: each file part read by its Content-Type or file name, one write."""
    return await _write(request, "post")


@router.delete("/store", summary="Delete a graph", status_code=204, responses=_ERR,
               openapi_extra={"parameters": _GRAPH_PARAMS})
async def store_delete(request: Request) -> Response:
    """Delete the addressed named graph (404 if missing) or empty the default graph."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, _headers(request))
        _, graph = _target(request)
        db = state.db

        def work():
            try:
                db.graph_delete(graph)
            except NotFound:
                raise HTTPError(404, "not_found", f"{_graph_label(graph)} does not exist") from None

        await state.run(work)
        state.data_changed()
        if state.metrics is not None:
            state.metrics.store_write("delete")
        return Response(status_code=204)
    except Exception as exc:
        return error_response(state, exc)


@router.api_route("/store/graphs/{name}", methods=["GET", "HEAD", "PUT", "POST", "DELETE"],
                  summary="A graph created by POST /store, by its own IRI", responses=_ERR)
async def store_direct(request: Request, name: str) -> Response:
    """Direct identification of the graphs ``POST /store`` creates: their IRI (the
    ``Location`` of the 201) answers GET, HEAD, PUT, POST and DELETE like
    ``/store?graph=<that IRI>``."""
    request.scope[_DIRECT] = f"{base_url(_headers(request), request.scope)}/store/graphs/{name}"
    if request.method in ("GET", "HEAD"):
        return await store_get(request)
    if request.method == "DELETE":
        return await store_delete(request)
    return await _write(request, "put" if request.method == "PUT" else "post")
