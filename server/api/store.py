"""SPARQL 1.1 Graph Store HTTP Protocol at /store (indirect identification).

``/store?default`` is the default graph, ``/store?graph=<iri>`` a named graph.
GET/HEAD read (404 for a missing named graph), PUT replaces, POST merges
(201 when the graph was created, 204 otherwise), DELETE removes (404 when
missing). ``POST /store`` with no parameter loads a whole RDF dataset
(N-Quads / TriG; triple formats go to the default graph).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from engine import formats
from engine.errors import NotFound
from engine.exec import serialize as ser
from server.api.common import (
    HTTPError,
    ServerState,
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
_BODY = {"requestBody": {"required": True, "content": {f.media_type: {"schema": {"type": "string"}}
                                                        for f in formats.readable(formats.GRAPH)}}}
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


def _headers(request: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


def _graph_label(g: str | None) -> str:
    return "the default graph" if g is None else f"graph <{g}>"


def _input_types() -> str:
    """The canonical media types of the RDF formats the store reads (named in 415 answers)."""
    return ", ".join(sorted(f.media_type for f in formats.readable(formats.GRAPH)))


async def _read_rdf(request: Request, state: ServerState) -> tuple[bytes, str]:
    """(body, canonical media type); any media type of a readable format of the registry is accepted."""
    ct, params = parse_content_type(request.headers.get("content-type"))
    if ct is None:
        raise HTTPError(415, "unsupported_media_type", "a Content-Type is needed: " + _input_types())
    fmt = formats.for_media_type(ct)
    if fmt is None or fmt.parser is None:
        raise HTTPError(415, "unsupported_media_type", f"{ct} is not a supported RDF format: " + _input_types())
    check_charset(params)
    data = await request_body_reader(request, state.config.max_body)()
    return data, fmt.media_type


def _base(request: Request, graph: str | None) -> str:
    if graph is not None:
        return graph
    host = request.headers.get("host", "localhost")
    return f"{request.url.scheme}://{host}/store"


@router.head("/store", summary="Headers of a graph read", responses=_ERR, openapi_extra={"parameters": _GRAPH_PARAMS})
async def store_head(request: Request) -> Response:
    """Like GET, without the body."""
    return await store_get(request)


@router.get("/store", summary="Read a graph", responses=_ERR, openapi_extra={"parameters": _GRAPH_PARAMS})
async def store_get(request: Request) -> Response:
    """Serialize the addressed graph; format by `Accept` (Turtle by default, N-Triples, N-Quads, JSON-LD, RDF/XML)."""
    state: ServerState = request.app.state.jindou
    try:
        check_read(state.config, _headers(request))
        _, graph = _target(request)
        accept = request.headers.get("accept")
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
        if request.method == "HEAD":
            return Response(b"", headers={"Content-Type": formats.content_type(mt), "Content-Length": str(len(body)),
                                          "Vary": "Accept"})
        return Response(body, media_type=None, headers={"Content-Type": formats.content_type(mt), "Vary": "Accept"})
    except Exception as exc:
        return error_response(state, exc)


async def _write(request: Request, op: str) -> Response:
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, _headers(request))
        addressed, graph = _target(request, allow_none=(op == "post"))
        data, mt = await _read_rdf(request, state)
        db = state.db
        base = _base(request, graph)
        if not addressed:
            def load():
                return db.load_data(data, mt, graph=None, base=base)

            report = await state.run(load)  # bad data: LoadError (400)
            state.data_changed()
            return Response(_report_json(report), status_code=200, media_type="application/json")
        def work():
            if op == "put":
                return db.graph_put(graph, data, mt, base=base)
            return db.graph_post(graph, data, mt, base=base)

        created = await state.run(work)  # bad data: LoadError (400)
        state.data_changed()
        if state.metrics is not None:
            state.metrics.store_write(op)
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
    Without `?default`/`?graph=`, loads a dataset (N-Quads/TriG) and answers a load report."""
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
