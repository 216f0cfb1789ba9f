"""SPARQL 1.1 Protocol: the update operation at /update."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response

from server.api.common import (
    CommitGate,
    HTTPError,
    Reply,
    ServerState,
    base_url,
    check_charset,
    check_write,
    decode_body,
    error_reply,
    failure,
    iri_params,
    one,
    parse_content_type,
    parse_form,
    parse_params,
    request_body_reader,
)

router = APIRouter(tags=["SPARQL"])

UPDATE_TYPE = "application/sparql-update"
FORM_TYPE = "application/x-www-form-urlencoded"

# Strings, IRIs and comments removed, so keywords are found only where they are keywords.
_NOISE = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|<[^<>\s]*>|#[^\n]*')
_DATASET_KW = re.compile(r"(?i)(?<![\w:?$])(USING|WITH)(?![\w:])")


def uses_dataset_clause(text: str) -> bool:
    """True if the update has a USING / USING NAMED / WITH clause."""
    return _DATASET_KW.search(_NOISE.sub(" ", text)) is not None


async def handle_update(
    state: ServerState, method: str, scope: dict, headers: dict[str, str], qs: bytes, read_body
) -> Reply:
    try:
        return await _handle(state, method, scope, headers, qs, read_body)
    except Exception as exc:
        err = failure(exc, state.metrics)
        if state.metrics is not None:
            state.metrics.update_done(err.kind)
        return error_reply(err)


async def _handle(state, method, scope, headers, qs, read_body) -> Reply:
    if method != "POST":
        raise HTTPError(405, "method_not_allowed", "SPARQL Update needs POST", headers={"Allow": "POST, OPTIONS"})
    check_write(state.config, headers)
    params = parse_params(qs)
    ct, ctp = parse_content_type(headers.get("content-type"))
    if ct is None:
        raise HTTPError(415, "unsupported_media_type",
                        f"POST /update needs Content-Type {UPDATE_TYPE} or {FORM_TYPE}")
    check_charset(ctp)
    if ct == UPDATE_TYPE:
        if "update" in params:
            raise HTTPError(400, "bad_request", "update given both in the URL and in the body")
        text = decode_body(await read_body(), "update")
    elif ct == FORM_TYPE:
        form = await parse_form(await read_body())
        if "update" in params:
            raise HTTPError(400, "bad_request", "the 'update' parameter belongs in the body")
        for k, v in form.items():
            params.setdefault(k, []).extend(v)
        if "query" in params:
            raise HTTPError(400, "bad_request", "queries go to /sparql, not /update")
        text = one(params, "update")
        if text is None:
            raise HTTPError(400, "bad_request", "missing 'update' parameter")
    elif ct == "application/sparql-query":
        raise HTTPError(400, "bad_request", "queries go to /sparql, not /update")
    else:
        raise HTTPError(415, "unsupported_media_type",
                        f"{ct} is not an update media type; use {UPDATE_TYPE} or {FORM_TYPE}")
    using = iri_params(params, "using-graph-uri")
    using_named = iri_params(params, "using-named-graph-uri")
    base = base_url(headers, scope) + "/update"
    db = state.db

    gate = CommitGate()

    def work(deadline):
        # scanning a large text for USING/WITH runs here, off the event loop
        if (using or using_named) and uses_dataset_clause(text):
            raise HTTPError(400, "bad_request",
                            "using-graph-uri / using-named-graph-uri cannot be combined with USING or WITH in the update")
        db.update(text, base=base, using_graph_uris=using, using_named_graph_uris=using_named, deadline=deadline,
                  may_commit=gate.commit)

    try:
        await state.run(work, deadline=state.deadline(), gate=gate)
    finally:
        state.data_changed()
    if state.metrics is not None:
        state.metrics.update_done("ok")
    return Reply(204)


# --------------------------------------------------------------------------
# FastAPI route (documentation; the app's fast path normally answers first)
# --------------------------------------------------------------------------


@router.post(
    "/update",
    summary="SPARQL 1.1 Update",
    status_code=204,
    responses={
        204: {"description": "Update applied"},
        400: {"description": "Syntax error or update error: JSON {error, detail[, line, column]}"},
        401: {"description": "Token required (server started with --token)"},
        403: {"description": "Wrong token"},
        413: {"description": "Request body too large"},
        415: {"description": "Unsupported Content-Type"},
    },
    openapi_extra={
        "parameters": [
            {"name": "using-graph-uri", "in": "query", "required": False,
             "schema": {"type": "array", "items": {"type": "string"}}, "style": "form", "explode": True},
            {"name": "using-named-graph-uri", "in": "query", "required": False,
             "schema": {"type": "array", "items": {"type": "string"}}, "style": "form", "explode": True},
        ],
        "requestBody": {
            "required": True,
            "content": {
                UPDATE_TYPE: {"schema": {"type": "string"},
                              "example": "INSERT DATA { <http://example.org/s> <http://example.org/p> 1 }"},
                FORM_TYPE: {"schema": {"type": "object", "properties": {"update": {"type": "string"}},
                                       "required": ["update"]}},
            },
        },
    },
)
async def update_post(request: Request) -> Response:
    """Apply a SPARQL 1.1 Update, sent as body (`application/sparql-update`) or as
    form field `update`. Needs `Authorization: Bearer <token>` when the server has a token."""
    state: ServerState = request.app.state.jindou
    headers = {k.lower(): v for k, v in request.headers.items()}
    reply = await handle_update(
        state, request.method, request.scope, headers, request.scope.get("query_string", b""),
        request_body_reader(request, state.config.max_body),
    )
    return Response(reply.body, status_code=reply.status, headers=reply.headers, media_type=reply.content_type)
