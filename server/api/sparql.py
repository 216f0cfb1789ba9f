"""SPARQL 1.1 Protocol at /sparql: the query operation, and the update
operation for clients configured with one endpoint (an ``application/sparql-update``
body or a form with ``update=`` goes to :func:`server.api.update.handle_update`,
same token rules as /update).

``handle_sparql`` is the whole operation on raw request data; the app's ASGI
fast path calls it directly (no routing, no pydantic), and the FastAPI routes
below call it too, so /docs documents exactly what runs.
"""

from __future__ import annotations

import asyncio
import re
from functools import partial

import orjson
from fastapi import APIRouter, Request, Response

from engine import formats, small_answers
from engine.bom import strip_bom
from engine.errors import JindouError
from engine.exec import render
from engine.exec import serialize as ser
from engine.exec.context import release_memory
from engine.small_answers import SmallSelect
from engine.sparql import normalize as norm
from server.api import update
from server.api.anchored import anchored
from server.api.common import (
    SHAPE_MAX_CHARS,
    HashedShape,
    HTTPError,
    Reply,
    ServerState,
    _unquote_plus,
    base_url,
    check_charset,
    check_read,
    deadline_tick,
    decode_body,
    error_reply,
    failure,
    iri_params,
    one,
    parse_content_type,
    parse_form,
    parse_params_cached,
    query_shape,
    request_body_reader,
)
from server.lane import URL_BYTES

router = APIRouter(tags=["SPARQL"])

QUERY_TYPES = ("application/sparql-query",)
UPDATE_TYPE = "application/sparql-update"
FORM_TYPE = "application/x-www-form-urlencoded"
ALLOW = "GET, POST, OPTIONS"
#: answers with more rows than this return their freed heap to the OS after serializing
_TRIM_ROWS = 100_000
#: SELECT answers with more rows than this are streamed (built a chunk of rows at a time while sent) ...
_STREAM_ROWS = render.CHUNK_ROWS
#: ... when their body is larger than this (a smaller one is built whole where the query ran: a
#: streamed piece of 1 MiB costs a thread hand-off, and the memory saved is small)
STREAM_MIN_BYTES = 8 << 20

def _acceptable_at_all(accept: str | None) -> bool:
    """False if the Accept header rules out every result and graph format."""
    return formats.acceptable_at_all(accept)


def not_acceptable(accept: str | None, form: str) -> HTTPError:
    offers = formats.offers(form)[0]
    return HTTPError(
        406,
        "not_acceptable",
        f"none of the accepted media types ({accept}) is available for {form} results",
        extra={"available": list(offers)},
    )


async def handle_sparql(
    state: ServerState, method: str, scope: dict, headers: dict[str, str], qs: bytes, read_body
) -> Reply:
    try:
        return await _handle(state, method, scope, headers, qs, read_body)
    except Exception as exc:  # every failure becomes a JSON error, never a crash
        return error_reply(failure(exc, state.metrics))


async def _handle(state, method, scope, headers, qs, read_body) -> Reply:
    check_read(state.config, headers)
    if method == "HEAD":
        method = "GET"
    if method not in ("GET", "POST"):
        raise HTTPError(405, "method_not_allowed", f"{method} is not allowed on /sparql", headers={"Allow": ALLOW})
    params = parse_params_cached(qs)
    if method == "GET":
        if "update" in params:
            raise HTTPError(400, "bad_request", "SPARQL updates need POST (application/sparql-update, or a form "
                                                "with 'update'), not GET")
        text = one(params, "query")
        if text is None:
            return service_description(state, scope, headers)
    else:
        ct, ctp = parse_content_type(headers.get("content-type"))
        if ct is None:
            raise HTTPError(415, "unsupported_media_type",
                            f"POST /sparql needs Content-Type application/sparql-query, {UPDATE_TYPE} or {FORM_TYPE}")
        check_charset(ctp)
        if ct in QUERY_TYPES:
            if "query" in params:
                raise HTTPError(400, "bad_request", "query given both in the URL and in the body")
            if "update" in params:
                raise HTTPError(400, "bad_request", "the 'update' parameter cannot come with a query body")
            text = decode_body(await read_body(), "query")
        elif ct == UPDATE_TYPE:
            # the update operation, as at /update (same token rules, same handler)
            if "query" in params:
                raise HTTPError(400, "bad_request", "the 'query' parameter cannot come with an update body")
            return await update.handle_update(state, method, scope, headers, qs, read_body)
        elif ct == FORM_TYPE:
            body = await read_body()
            form = await parse_form(body)
            if "update" in form:
                if "query" in form or "query" in params:
                    raise HTTPError(400, "bad_request", "give either 'query' or 'update', not both")

                async def again() -> bytes:
                    return body

                return await update.handle_update(state, method, scope, headers, qs, again)
            merged = {k: list(v) for k, v in params.items()}
            for k, v in form.items():
                merged.setdefault(k, []).extend(v)
            params = merged
            if "update" in params:
                raise HTTPError(400, "bad_request", "the 'update' parameter belongs in the form body")
            text = one(params, "query")
            if text is None:
                raise HTTPError(400, "bad_request", "missing 'query' (or 'update') parameter")
        else:
            raise HTTPError(415, "unsupported_media_type",
                            f"{ct} is neither a query nor an update media type; use application/sparql-query, "
                            f"{UPDATE_TYPE} or {FORM_TYPE}")
    return await _run_query(state, scope, headers, params, text)


def _query_job(state: ServerState, scope: dict, headers: dict[str, str], params: dict, text: str,
               stream: bool = False) -> tuple:
    """(work, explain mode, dataset given, base) of a query request: ``work(deadline)``
    runs the query and serializes it, -> (form, media type, body). With ``stream``,
    a SELECT answer of more than ``_STREAM_ROWS`` rows comes back unbuilt (a
    :class:`~engine.exec.render.Rendered`, size checked) for the reply to stream."""
    explain = explain_mode(params)
    accept = headers.get("accept")
    fmt = params.get("format") or params.get("output")
    if fmt:
        accept = format_override(fmt[0])
    if explain is None and not _acceptable_at_all(accept):  # an explain answers JSON whatever Accept says
        raise not_acceptable(accept, "SELECT")
    dg = iri_params(params, "default-graph-uri")
    ng = iri_params(params, "named-graph-uri")
    base = base_url(headers, scope) + "/sparql"
    db = state.db
    max_bytes = state.config.max_response_bytes

    def work(deadline):
        if explain is not None:
            doc = db.explain(text, analyze=explain == "analyze", default_graph_uris=dg, named_graph_uris=ng,
                             base=base, deadline=deadline)
            return "EXPLAIN", "application/json", orjson.dumps(doc)
        res = db.query(text, default_graph_uris=dg, named_graph_uris=ng, base=base, deadline=deadline)
        mt = formats.negotiate(accept, res.form)
        if mt is None:
            raise not_acceptable(accept, res.form)
        big = len(res) > _TRIM_ROWS
        try:
            body = small_answers.small_body(res, mt, max_bytes)
            if body is not None:
                pass
            elif stream and res.form == "SELECT" and len(res) > _STREAM_ROWS:
                body = ser.serialize_lazy(res, mt, max_bytes=max_bytes, deadline=deadline)
                if isinstance(body, render.Rendered) and body.size <= STREAM_MIN_BYTES:
                    # built here, in one go: each streamed piece costs a hand-off to a thread
                    body = body.body(None if deadline is None else deadline_tick(deadline))
            else:
                body = ser.serialize(res, mt, max_bytes=max_bytes, deadline=deadline)
            err = None
        except JindouError as e:
            err = e.with_traceback(None)  # its frames would keep the result alive
        form = res.form
        if big:  # a big answer's decoded terms leave freed heap behind
            del res
            release_memory()
        if err is not None:
            raise err
        return form, mt, body

    return work, explain, bool(dg or ng), base


#: (Accept value, query form) -> formats.negotiate's media type (a client sends the same
#: Accept with every request; negotiate parses it each time)
_NEGOTIATED: dict[tuple, str | None] = {}


class _PlainJob:
    """``work(deadline)`` of :func:`_query_job` for the plain ``?query=`` form (no
    explain, format or dataset parameters): the same query, negotiation, small
    answers and size check, without the closure and the parameter lookups."""

    __slots__ = ("db", "text", "base", "accept", "max_bytes")

    def __init__(self, db, text: str, base: str, accept: str | None, max_bytes):
        self.db = db
        self.text = text
        self.base = base
        self.accept = accept
        self.max_bytes = max_bytes

    def __call__(self, deadline):
        return self.answer(self.db.query(self.text, base=self.base, deadline=deadline, lists=True), deadline)

    def answer(self, res, deadline) -> tuple:
        """(form, media type, body) of the query's result ``res``."""
        form = res.form
        mt = _NEGOTIATED.get((self.accept, form), False)
        if mt is False:
            mt = formats.negotiate(self.accept, form)
            if len(_NEGOTIATED) >= 512:
                _NEGOTIATED.clear()
            _NEGOTIATED[(self.accept, form)] = mt
        if mt is None:
            raise not_acceptable(self.accept, form)
        if len(res) > _TRIM_ROWS:  # a big answer: the general job (releases its freed heap)
            return _serialize(res.result() if type(res) is SmallSelect else res, mt, self.max_bytes, deadline)
        body = _small_or_general(res, mt, self.max_bytes, deadline)
        return form, mt, body


class _HitJob(_PlainJob):
    """The :class:`_PlainJob` of a text read from the URL's bytes as a known
    template with its constant (``engine.sparql.normalize.raw_normalize``,
    ``Database.match_template``): run without decoding, tokenizing or parsing
    the text (``Database.query_template``); decoded and run as a text only when
    the shape has no program for the current snapshot yet."""

    __slots__ = ("hit", "payload", "shape", "decode", "repeat")

    def __init__(self, db, hit, payload: bytes, base: str, accept: str | None, max_bytes, decode=_unquote_plus):
        self.db = db
        self.text = None
        self.base = base
        self.accept = accept
        self.max_bytes = max_bytes
        self.hit = hit
        self.payload = payload
        self.decode = decode  # the payload's text (a URL's percent-encoding, or a body's UTF-8)
        tpl = hit[0]
        shape = tpl.cost_key
        if shape is None:  # as _cost_shape gives it for the text, hashed once
            shape = tpl.cost_key = HashedShape(("fast", tpl.key))
        self.shape = shape
        self.repeat = False  # a query string the lane has read before (_hit_job)

    def __call__(self, deadline):
        res = self.db.query_template(self.hit, deadline=deadline, lists=True)
        if res is None:
            self.text = self.decode(self.payload)
            res = self.db.query(self.text, base=self.base, deadline=deadline, lists=True)
        return self.answer(res, deadline)


def _utf8(body: bytes) -> str:
    return body.decode("utf-8")


def _body_hit_job(state: ServerState, scope: dict, headers: dict[str, str], body: bytes,
                  accept: str | None) -> _HitJob | None:
    """:func:`_hit_job` of an ``application/sparql-query`` body: a text of a known
    template read from its UTF-8 bytes (``engine.sparql.normalize.body_normalize``),
    repeated texts too (a body is decoded anew for every request, so the text path's
    caches keyed by the text object do not help it); None otherwise."""
    n = _BODY_TEXTS.get(body)
    if n is None or n is True:  # (True: answered by a runner, its normalized form not made then)
        n = norm.body_normalize(body)
        if n is None:
            return None
        if len(_BODY_TEXTS) >= _LANE_TEXTS_MAX:
            _BODY_TEXTS.clear()
        _BODY_TEXTS[body] = n = (n[0], tuple(n[1]))  # (a tuple of strings: nothing for the collector to trace)
    db = state.db
    base = _sparql_base(headers, scope)
    hit = db.match_template(n, base)
    if hit is None:
        return None
    # (read from its bytes: the body is UTF-8, checked as the text path checks it, and
    # then the token and the Accept value, in the text path's order)
    check_read(state.config, headers)
    if accept is None:
        accept = headers.get("accept")
    if not formats.acceptable_at_all(accept):
        raise not_acceptable(accept, "SELECT")
    return _HitJob(db, hit, body, base, accept, state.config.max_response_bytes, _utf8)


def _small_or_general(res, mt: str, max_bytes: int, deadline) -> bytes:
    """A template run's answer body: the small writers', else the general one's."""
    try:
        body = small_answers.small_body(res, mt, max_bytes)
        if body is None:
            if type(res) is SmallSelect:  # (a SELECT's Python lists: the general writer takes numpy)
                res = res.result()
            body = ser.serialize(res, mt, max_bytes=max_bytes, deadline=deadline)
    except JindouError as e:
        raise e.with_traceback(None) from None
    return body


def _run_hit(state: ServerState, work: _HitJob) -> tuple | None:
    """(form, media type, body) of a template hit's job run inline, None when its
    shape goes to the pool (see :func:`_inline_run`)."""
    try:
        done, result = state.try_inline_lane(work, work.shape)
    except Exception as exc:
        _failed(state, exc)
        raise
    if not done:
        if result is not None:  # passed its inline budget: the pool runs it, knowing its cost
            state.record_cost(work.shape, result)
        return None
    return result


def _hit_job(state: ServerState, scope: dict, headers: dict[str, str], qs: bytes,
             accept: str | None = None) -> _HitJob | None:
    """The job of a plain ``query=<text>`` whose text is a known template with its
    constant, read from the bytes (see :class:`_HitJob`); None otherwise. ``accept``:
    the Accept value a ``format=`` parameter stands for (None: the header's)."""
    db = state.db
    match = getattr(db, "match_template", None)
    if match is None:
        return None
    n = _QS_NORMS.get(qs)
    repeat = n is not None
    if n is None or n is True:  # (True: answered by a runner, its normalized form not made then)
        if len(_QS_NORMS) >= _LANE_TEXTS_MAX:
            _QS_NORMS.clear()
        if not qs.startswith(b"query=") or b"&" in qs:
            _QS_NORMS[qs] = False
            return None
        n = norm.raw_normalize(qs[6:], _unquote_plus)
        if n is None:  # (not read from its bytes: remembered, the next sighting goes straight on)
            _QS_NORMS[qs] = False
            return None
        _QS_NORMS[qs] = n = (n[0], tuple(n[1]))  # (a tuple of strings: nothing for the collector to trace)
    elif n is False:
        return None
    payload = qs[6:]
    base = _sparql_base(headers, scope)
    hit = match(n, base)
    if hit is None:
        return None
    if accept is None:
        accept = headers.get("accept")
    if not formats.acceptable_at_all(accept):
        raise not_acceptable(accept, "SELECT")
    job = _HitJob(db, hit, payload, base, accept, state.config.max_response_bytes)
    job.repeat = repeat
    return job


#: _run_bound: the runner ran the query and its shape goes to the pool (the ordinary path answers)
_DECLINED = object()
#: a layout keeps runners for at most this many templates (a skeleton's variants), newest last
_RUNNERS_PER_LAYOUT = 8
#: runners a server keeps (then it starts over)
_RUNNERS_MAX = 1024


class _Runner:
    """A ready answer path for the new texts of one raw layout of a plain ``query=``
    string (``engine.sparql.normalize.raw_normalize``; or of an ``application/sparql-query``
    body, ``body_normalize``) that are a known single-parameter
    template's text with its IRI parameter swapped, for one base and Accept value: the
    template, how the layout's raw slots write its parameter
    (:class:`~engine.sparql.normalize.RawBinder`), the cost key and the media type its
    answers negotiated. Such a text is read with one split of its bytes, one dict
    lookup and one pass over its raw slots (no normalized form, no template lookup, no
    job set-up), then admitted, run and answered exactly as :func:`_hit_job`'s job is
    (:meth:`ServerState.try_inline_lane`, ``Database.query_template``, the same answer
    writer): the same bytes and outcomes. Made by :func:`_bind` from a text the
    template path answered."""

    __slots__ = ("tpl", "binder", "base", "accept", "max_bytes", "shape", "form", "mt", "one", "keys", "writer")

    def __init__(self, tpl, binder, base: str, accept: str | None, max_bytes, shape, form: str, mt: str):
        self.tpl = tpl
        self.binder = binder
        self.base = base
        self.accept = accept
        self.max_bytes = max_bytes
        self.shape = shape
        self.form = form
        self.mt = mt
        # the binder's one parameter slot: (its index among the raw slots, the raw slots
        # before it, those after it), when the parameter is written in exactly one raw slot
        # (the usual text); None otherwise (the binder's own loop reads the slots)
        self.one = _one_slot(binder)
        # a text's raw slots (a tuple) -> the runner's outcome for it (:func:`_runner_key`):
        # the parameter's key (str; several parameters: their tuple), None (an IRI that is no
        # parameter: not answered) or False (not this runner's: the next runner of the layout
        # tries); the same constants come back, and a text's comments are not raw slots
        self.keys: dict = {}
        # the small-answer writer of the runner's media type (None: the general writer)
        self.writer = small_answers.WRITERS.get(mt)


#: a runner keeps at most this many parameter slots' keys (then it starts over)
_RUNNER_KEYS_MAX = 4096


def _one_slot(binder) -> tuple | None:
    """(index, the expected raw slots before it, after it) of a single-parameter binder
    whose parameter is written in one raw slot; None for any other binder."""
    expect = getattr(binder, "expect", None)
    if type(binder) is not norm.RawBinder or type(expect) is not tuple:
        return None
    at = [j for j, e in enumerate(expect) if e is norm._PARAM]
    if len(at) != 1:
        return None
    j = at[0]
    return j, list(expect[:j]), list(expect[j + 1:])


def _runner_key(r: _Runner, raws: list, read: tuple):
    """Runner ``r``'s outcome for a text whose raw slots are ``raws``: its parameter's key
    (str; a template of several parameters: their tuple, checked by its binder), None (not
    answered: the text's parameter is no parameter of the template) or False (the runner
    does not read it: the next one of the layout tries) -- what ``r.binder.value`` and the
    key checks decide; kept in ``r.keys`` by the raw slots (:func:`_run_bound` reads the
    kept outcome in place). A single parameter slot is read without the binder's loop."""
    one = r.one
    if one is None:
        s = r.binder.value(raws, read[4], read[2], read[3])
        if s is None:
            key = False
        elif type(s) is tuple:  # (a template of several parameters: their keys, checked by its binder)
            key = s
        else:
            key = norm.slot_key(s)
            if key is None or key in r.tpl.others:
                key = None
    else:
        j, pre, post = one
        v = raws[j]
        if raws[:j] != pre or raws[j + 1:] != post or v is None:
            key = False  # (not the layout with its parameter swapped, or a comment where it was)
        else:
            s = norm.iri_slot(v, read[4], read[2], read[3])
            key = False if s is None else norm.slot_key(s)
            if key and key in r.tpl.others:
                key = None
    keys = r.keys
    if len(keys) >= _RUNNER_KEYS_MAX:
        keys.clear()
    keys[tuple(raws)] = key
    return key


#: _runner_key / _run_bound: no outcome kept for these raw slots yet
_UNREAD = object()


def _run_runner(db, r: _Runner, key, payload: bytes, accept: str | None, decode, deadline) -> tuple:
    """(form, media type, body) of a runner's text (``try_inline_lane``'s job, bound with
    ``functools.partial``: no job object per request): the template run with the text's
    key and answered by the runner's small writer, in one frame; a result that is not the
    runner's usual one (another form, many rows) is answered by the :class:`_HitJob` of the
    text, exactly as the template path answers it; with no program of the current snapshot
    to rebind yet, the text is run by :meth:`Database.query` (as ``_HitJob`` runs it)."""
    res = db.query_template((r.tpl, key), deadline=deadline, lists=True)
    if res is None:  # (no program of the current snapshot yet: the text path compiles one)
        res = db.query(decode(payload), base=r.base, deadline=deadline, lists=True)
    if type(res) is SmallSelect:  # (the usual answer: a SELECT of a few rows)
        if res.n > _TRIM_ROWS or r.form != "SELECT":
            return _HitJob(db, (r.tpl, key), payload, r.base, accept, r.max_bytes, decode).answer(res, deadline)
    elif res.form != r.form or len(res) > _TRIM_ROWS:
        return _HitJob(db, (r.tpl, key), payload, r.base, accept, r.max_bytes, decode).answer(res, deadline)
    w = r.writer
    if w is not None:  # (small_body's writer of the runner's media type, looked up once)
        try:
            body = w(res, r.max_bytes)
        except JindouError as e:
            raise e.with_traceback(None) from None
        if body is not None:
            return r.form, r.mt, body
    return r.form, r.mt, _small_or_general(res, r.mt, r.max_bytes, deadline)


#: how a runner's texts are read: (the raw slots' expression, learned layouts, decoded IRI
#: slots, the bytes a slot's group leaves out, the decoder): a URL's query string, or an
#: ``application/sparql-query`` body (:func:`engine.sparql.normalize.body_normalize`)
_URL_READ = (norm._RAW_SLOTS, norm._RAW_LAYOUTS, norm._RAW_IRIS, b"%", _unquote_plus)
_BODY_READ = (norm._BODY_SLOTS, norm._BODY_LAYOUTS, norm._BODY_IRIS, b"<", _utf8)


def _run_bound(state: ServerState, runners: dict, scope: dict, headers: dict[str, str], qs: bytes,
               accept: str | None, read: tuple = _URL_READ):
    """(form, media type, body) of a new plain ``query=`` string (or, with ``read`` =
    :data:`_BODY_READ`, a query body ``qs``) that a runner of its layout answers (see
    :class:`_Runner`), :data:`_DECLINED` when its shape goes to the pool (the ordinary
    path answers), None when no runner answers it (the template path then reads it).
    Errors raise, as on the template path."""
    if read is _URL_READ:
        if not qs.startswith(b"query=") or b"&" in qs:
            return None
        payload = qs[6:]
    else:
        payload = qs
    if len(payload) > norm.MAX_CHARS or b"\x00" in payload:  # (raw_normalize's guards)
        return None
    # (a text without slots makes a layout key without a NUL: no runner's, whose layouts
    # have a slot at least, and the payload has no NUL)
    parts = read[0].split(payload)
    if accept is None:
        accept = headers.get("accept")
    # (_sparql_base's kept base, looked up in place: no Host, no key kept there)
    base = _BASES.get((headers.get("host"), scope.get("scheme", "http")))
    if base is None:
        base = _sparql_base(headers, scope)
    got = runners.get((b"\x00".join(parts[0::2]), base, accept, read[3]))
    if got is None:
        return None
    raws = tuple(parts[1::2])
    for r in got:
        key = r.keys.get(raws, _UNREAD)  # (_runner_key's kept outcome, read in place)
        if key is _UNREAD:
            key = _runner_key(r, list(raws), read)
        if key is False:
            continue
        if key is None:
            return None
        break
    else:
        return None
    if read is _URL_READ:
        _QS_NORMS[qs] = True  # (seen: its next sighting is a repeat, see _hit_job)
        if len(_QS_NORMS) > _LANE_TEXTS_MAX:
            _QS_NORMS.clear()
    else:  # (a body's token is checked once its template is known: _body_hit_job's order)
        check_read(state.config, headers)
        if len(_BODY_TEXTS) >= _LANE_TEXTS_MAX:
            _BODY_TEXTS.clear()
        _BODY_TEXTS[qs] = True  # (seen: its next sighting is a repeat, its answer kept, see post_answer)
    job = partial(_run_runner, state.db, r, key, payload, accept, read[4])
    try:  # (_run_hit, in place: one call less for every runner's text)
        done, result = state.try_inline_lane(job, r.shape)
    except Exception as exc:
        _failed(state, exc)
        raise
    if not done:
        if result is not None:  # passed its inline budget: the pool runs it, knowing its cost
            state.record_cost(r.shape, result)
        return _DECLINED
    return result


_UNSET = object()


class _ManyBinder:
    """:class:`~engine.sparql.normalize.RawBinder` of a template of several parameters
    (``DESCRIBE <a> <b>``): for each raw slot of the layout, the index of the parameter
    it writes or the exact bytes it must have. :meth:`value` gives the parameters' keys
    exactly when ``Database._match_params`` would match the text's slots: the fixed raw
    slots byte-equal, each parameter's raw slots equal to each other and decoding to an
    IRI slot (raw_normalize's decoding and check), its key not one of the template's
    other constants; a parameter written in the skeleton keeps its key."""

    __slots__ = ("expect", "skeleton", "others")

    def __init__(self, expect: tuple, skeleton: tuple, others):
        self.expect = expect
        self.skeleton = skeleton
        self.others = others

    @classmethod
    def make(cls, payload: bytes, tpl, rx, layouts: dict) -> _ManyBinder | None:
        fixed = tpl.fixed
        got = norm.raw_layout(payload, fixed, rx, layouts)
        if got is None:
            return None
        pos, raws = got
        return cls(tuple(tpl.params[i] if fixed[i] is None else raws[j] for j, i in enumerate(pos)),
                   tpl.skeleton_keys, tpl.others)

    def value(self, raws: list, decode, iris: dict, lead: bytes) -> tuple | None:
        vals: list = [_UNSET] * len(self.skeleton)
        for s, e in zip(raws, self.expect, strict=True):
            if type(e) is int:
                if vals[e] is _UNSET:
                    vals[e] = s
                elif s != vals[e]:
                    return None
            elif s != e:
                return None
        keys = []
        for v, fixed in zip(vals, self.skeleton, strict=True):
            if fixed is not None:
                keys.append(fixed)
                continue
            if v is None or v is _UNSET:  # (a comment where the parameter was)
                return None
            iri = norm.iri_slot(v, decode, iris, lead)
            key = None if iri is None else norm.slot_key(iri)
            if key is None or key in self.others:
                return None
            keys.append(key)
        return tuple(keys)


def _bind(state: ServerState, work: _HitJob, result: tuple) -> None:
    """Keep a runner (:class:`_Runner`) for the layout of ``work``'s text (a query
    string's or a query body's bytes), a new text the template path just answered
    inline as ``result``, when its template has one IRI parameter written in the
    layout's raw slots."""
    tpl = work.hit[0]
    if type(work) is not _HitJob or work.text is not None:
        return  # (answered from the text)
    read = _BODY_READ if work.decode is _utf8 else _URL_READ
    if tpl.params is not None:  # (several parameters: IRIs each, or written in the skeleton)
        if any(q not in ("<", None) for q in tpl.quote):
            return
        binder = _ManyBinder.make(work.payload, tpl, read[0], read[1])
    elif tpl.quote != "<":  # (a string parameter)
        return
    else:
        binder = norm.RawBinder.make(work.payload, tpl.fixed, read[0], read[1])
    if binder is None:
        return
    parts = read[0].split(work.payload)
    runners = state.lane_runners
    k = (b"\x00".join(parts[0::2]), work.base, work.accept, read[3])
    have = runners.get(k)
    if have is None:
        if len(runners) >= _RUNNERS_MAX:
            runners.clear()
        have = runners[k] = []
    elif any(r.tpl is tpl and r.binder.expect == binder.expect for r in have):
        return
    if len(have) >= _RUNNERS_PER_LAYOUT:
        del have[0]
    have.append(_Runner(tpl, binder, work.base, work.accept, work.max_bytes, work.shape, result[0], result[1]))


#: (Host header, scheme) -> the query's base IRI (``base_url`` + "/sparql"): a client
#: sends the same Host with every request; one kept string is hashed once, not per
#: request in the template lookup
_BASES: dict[tuple, str] = {}


def _sparql_base(headers: dict[str, str], scope: dict) -> str:
    host = headers.get("host")
    if not host:  # (base_url then reads the scope's server address)
        return base_url(headers, scope) + "/sparql"
    key = (host, scope.get("scheme", "http"))
    base = _BASES.get(key)
    if base is None:
        if len(_BASES) >= 256:
            _BASES.clear()
        base = _BASES[key] = base_url(headers, scope) + "/sparql"
    return base


def _serialize(res, mt: str, max_bytes, deadline) -> tuple:
    """(form, media type, body) of a large answer, its freed heap returned after."""
    form = res.form
    try:
        body = ser.serialize(res, mt, max_bytes=max_bytes, deadline=deadline)
        err = None
    except JindouError as e:
        err = e.with_traceback(None)
    del res
    release_memory()
    if err is not None:
        raise err
    return form, mt, body


def _plain_job(state: ServerState, scope: dict, headers: dict[str, str], text: str,
               accept: str | None = None) -> _PlainJob:
    if accept is None:
        accept = headers.get("accept")
    if not _acceptable_at_all(accept):
        raise not_acceptable(accept, "SELECT")
    return _PlainJob(state.db, text, _sparql_base(headers, scope), accept, state.config.max_response_bytes)


#: the headers of a query's answer (one read-only dict: ``EdgeMiddleware._head`` keys
#: its rendered header lines by this object)
VARY_ACCEPT = {"Vary": "Accept"}


def _ok(state: ServerState, form: str, mt: str, body, deadline: float | None = None) -> Reply:
    if state.metrics is not None:
        state.metrics.query_done(form, "ok")
    if isinstance(body, render.Rendered):
        return Reply(200, b"", formats.content_type(mt), VARY_ACCEPT, stream=body, deadline=deadline)
    return Reply(200, body, formats.content_type(mt), VARY_ACCEPT)


def _failed(state: ServerState, exc: Exception) -> None:
    if state.metrics is not None:
        state.metrics.query_done("unknown", getattr(exc, "kind", "error"))


async def _run_query(state: ServerState, scope: dict, headers: dict[str, str], params: dict, text: str) -> Reply:
    work, explain, dataset, base = _query_job(state, scope, headers, params, text, stream=True)
    try:
        # long texts have no shape: they never run inline and are not remembered;
        # explains run in the pool and do not teach the inline cost of the query's shape
        shape = _cost_shape(state.db, text, base, dataset) if explain is None else None
        deadline = state.deadline()
        form, mt, body = await state.run(work, shape, deadline=deadline, probe=isinstance(shape, tuple))
    except Exception as exc:
        _failed(state, exc)
        raise
    return _ok(state, form, mt, body, deadline)


def handle_sparql_inline(state: ServerState, scope: dict, headers: dict[str, str], qs: bytes,
                         form: bool = False) -> Reply | None:
    """The GET query operation answered synchronously, for the HTTP fast lane
    (``server.app.FastLaneProtocol``): the answer when the query's shape runs
    inline (:meth:`ServerState.try_inline`) or the request fails before it
    runs; None when it needs the thread pool, has no query (service
    description), is an explain or names an update: the ordinary path
    (:func:`handle_sparql`) answers those, with the same outcome. ``form``: ``qs``
    is a form body (a parameter string that does not parse is then left to the
    ordinary path, which names the form body in its error)."""
    try:
        got = inline_answer(state, scope, headers, qs, form)
    except Exception as exc:  # every failure becomes a JSON error, never a crash
        return error_reply(failure(exc, state.metrics))
    return None if got is None else _ok(state, *got)


def inline_answer(state: ServerState, scope: dict, headers: dict[str, str], qs: bytes,
                  form: bool = False) -> tuple | None:
    """:func:`handle_sparql_inline` before its reply: (form, media type, body) of a
    query run inline (its ``query_done`` not counted yet: :func:`_ok` or the lane's
    ``EdgeMiddleware.answer_get`` counts it), None to take the ordinary path;
    failures raise (the caller answers them as :func:`handle_sparql_inline` does)."""
    if state.config.read_token:  # (check_read's own first test, without its call)
        check_read(state.config, headers)
    accept = None
    whole = qs
    if b"&" in qs:  # query=<text> with result-format parameters (SPARQLWrapper's): as the plain form
        split = _format_split(qs)
        if split is not None:
            qs, accept = split[0], split[1] or None
    if _ANSWERS.map:  # a repeated text's kept answer, if any: no template lookup, no job
        got = _ANSWERS.find((qs, _BASES.get((headers.get("host"), scope.get("scheme", "http"))),
                             headers.get("accept") if accept is None else accept), state.db)
        if got is not None:
            return got
    # a text of a known template is read from its bytes (new or repeated: the template
    # path costs less than the text path's cached parse, and its answer may be kept);
    # a text first seen before its template was learned becomes a hit once it is
    runners = state.lane_runners
    if runners and qs not in _QS_NORMS:  # a new text: a ready runner of its layout answers it
        got = _run_bound(state, runners, scope, headers, qs, accept)
        if got is not None:
            return None if got is _DECLINED else got
    seen = _QS_NORMS.get(qs)  # (a tuple: a text read before; its answer may be kept below)
    work = _hit_job(state, scope, headers, qs, accept)
    if work is not None:  # a known template's text: no decoding, normalizing or parsing
        key = _ANSWERS.key(work, qs)
        if key is not None:
            got = _ANSWERS.get(key, work.db)
            if got is not None:
                return got
            sn = _ANSWERS.sn  # (the snapshot number before the run: get() just read it)
        try:  # (_run_hit, in place: one call less for the lane's every GET)
            done, result = state.try_inline_lane(work, work.shape)
        except Exception as exc:
            _failed(state, exc)
            raise
        if not done:
            if result is not None:
                state.record_cost(work.shape, result)
            return None
        if key is not None:
            _ANSWERS.put(key, work.db, result, sn)
        elif not work.repeat:
            _bind(state, work, result)
        return result
    text = _lane_text(qs)
    if text is not None:  # the plain form: no explain or dataset parameters
        job = _plain_job(state, scope, headers, text, accept)
        if type(seen) is tuple and _text_keepable(seen[0]):  # a repeated text of no template
            return _kept_run(state, job, text, (qs, _BASES.get((headers.get("host"), scope.get("scheme", "http"))),
                                                job.accept))
        return _inline_run(state, job, text, None, False)
    if form:
        try:
            params = parse_params_cached(whole)
        except HTTPError:  # (the ordinary path says "form body", not "query string")
            return None
    else:
        params = parse_params_cached(whole)
    text = one(params, "query")
    if text is None or "update" in params:
        return None
    work, explain, dataset, base = _query_job(state, scope, headers, params, text)
    if explain is not None:
        return None
    return _inline_run(state, work, text, base, dataset)


def _inline_run(state: ServerState, work, text: str, base: str | None, dataset: bool) -> tuple | None:
    """(form, media type, body) of ``work`` (a query job of ``text``) run inline, or None
    when its shape does not run inline (the pool runs it, knowing its cost)."""
    try:
        shape = _cost_shape(state.db, text, base or work.base, dataset)
        # (try_inline declines what does not run inline; an anchored text of a shape not yet
        # measured twice is probed inline while nothing else runs: server/api/anchored.py)
        done, result = (state.try_inline_lane(work, shape) if isinstance(shape, tuple)
                        else state.try_inline(work, shape, state.deadline(),
                                              _probe_anchored(state, shape, text, base or work.base)))
    except Exception as exc:
        _failed(state, exc)
        raise
    if not done:
        if result is not None:  # passed its inline budget: the pool runs it, knowing its cost
            state.record_cost(shape, result)
        return None
    return result


#: text cost shape -> whether its text is anchored (server/api/anchored.py)
_ANCHORED: dict[str, bool] = {}
#: [anchored texts probed inline] (tests see the path taken)
ANCHORED_PROBES = [0]


def _probe_anchored(state: ServerState, shape, text: str, base: str) -> bool:
    """Whether the lane probes ``text`` inline although its cost shape ``shape`` (a
    string) was not measured twice yet: it is anchored and nothing else is running."""
    if shape is None or state.running:
        return False
    seen = state.shape_cost.get(shape)
    if seen is not None and seen[1] >= 2:  # (measured: inline_ok decides as ever)
        return False
    prepare = getattr(state.db, "_prepare", None)
    if prepare is None:  # (a database that parses nothing for us: no probe, whatever was cached)
        return False
    got = _ANCHORED.get(shape)
    if got is None:
        try:
            got = anchored(prepare(text, base).query)
        except JindouError:  # (the run reports the text's error)
            got = False
        if len(_ANCHORED) >= 2048:
            _ANCHORED.clear()
        _ANCHORED[shape] = got
    if got:
        ANCHORED_PROBES[0] += 1
    return got


def handle_sparql_post_inline(state: ServerState, scope: dict, headers: dict[str, str], body: bytes) -> Reply | None:
    """:func:`handle_sparql_inline` of a ``POST /sparql`` without a query string
    and with its whole (small) body: an ``application/sparql-query`` body is the
    query text (a new text of a known template read from its UTF-8 bytes, as a
    GET's from its URL bytes); an ``application/x-www-form-urlencoded`` one
    of URL bytes reads as a GET's query string would, as the form it is. None
    (the ordinary path, :func:`handle_sparql`, answers) for any other media type or
    charset, a body that is not clean UTF-8, a form that does not parse cleanly or
    names an update, and whatever handle_sparql_inline declines, so that every
    error the lane answers is one the ordinary path answers the same way."""
    try:
        got = post_answer(state, scope, headers, body)
    except Exception as exc:  # every failure becomes a JSON error, never a crash
        return error_reply(failure(exc, state.metrics))
    return None if got is None else _ok(state, *got)


#: Content-Type value -> (media type, parameters), or None when a charset parameter
#: is not UTF-8 (a client sends the same value with every request)
_CTYPES: dict[str | None, tuple | None] = {}


def _post_type(value: str | None) -> tuple | None:
    got = _CTYPES.get(value, False)
    if got is not False:
        return got
    ct, ctp = parse_content_type(value)
    got = (ct, ctp)
    if ctp:
        try:
            check_charset(ctp)
        except HTTPError:
            got = None
    if len(_CTYPES) >= 64:
        _CTYPES.clear()
    _CTYPES[value] = got
    return got


def post_answer(state: ServerState, scope: dict, headers: dict[str, str], body: bytes) -> tuple | None:
    """:func:`handle_sparql_post_inline` before its reply, as :func:`inline_answer` is
    handle_sparql_inline's: (form, media type, body) of a query run inline, None to
    take the ordinary path; failures raise (the caller answers them)."""
    got = _post_type(headers.get("content-type"))
    if got is None:
        return None
    ct = got[0]
    qs = scope.get("query_string")
    if ct == FORM_TYPE:
        if qs or body.translate(None, URL_BYTES):  # (URL parameters merged with the form's: the ordinary path)
            return None
        # (the plain query=<text> is not decoded here: a new text of a known template is read from its bytes)
        if not (body.startswith(b"query=") and (b"&" not in body or _format_split(body) is not None)):
            try:  # its parameters must parse cleanly
                params = parse_params_cached(body)
            except HTTPError:  # (the ordinary path says "form body", not "query string")
                return None
            if "update" in params:
                return None
        return inline_answer(state, scope, headers, body, True)
    if ct not in QUERY_TYPES:
        return None
    body = strip_bom(body)  # (a text saved with a BOM: the same query, engine.bom)
    accept = None
    if qs:  # only result-format parameters (SPARQLWrapper's) with a query body
        accept = _format_accept(qs)
        if accept is None:
            return None
        accept = accept or None
    if len(body) <= norm.MAX_CHARS:
        if _ANSWERS.map:  # a repeated body's kept answer, if any (as a GET's: inline_answer)
            key = (body, _BASES.get((headers.get("host"), scope.get("scheme", "http"))),
                   headers.get("accept") if accept is None else accept, True)
            if key in _ANSWERS.map:
                if state.config.read_token:  # (the token is checked before any answer)
                    check_read(state.config, headers)
                got = _ANSWERS.find(key, state.db)
                if got is not None:
                    return got
        runners = state.lane_runners
        new = body not in _BODY_TEXTS
        if runners and new:  # a new body: a ready runner of its layout answers it
            got = _run_bound(state, runners, scope, headers, body, accept, _BODY_READ)
            if got is not None:
                return None if got is _DECLINED else got
        work = _body_hit_job(state, scope, headers, body, accept)
        if work is not None:  # a known template's text: no decoding, normalizing or parsing
            work.repeat = not new
            key = LaneAnswers.body_key(work, body)
            if key is not None:  # (a repeated body: its answer is kept, as a GET's)
                got = _ANSWERS.get(key, work.db)
                if got is not None:
                    return got
                sn = _ANSWERS.sn
            got = _run_hit(state, work)
            if got is not None:
                if key is not None:
                    _ANSWERS.put(key, work.db, got, sn)
                elif new:
                    _bind(state, work, got)
            return got
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    check_read(state.config, headers)
    job = _plain_job(state, scope, headers, text, accept)
    if len(body) <= norm.MAX_CHARS and not new:  # a repeated body of no template: its answer may be kept
        n = _BODY_TEXTS.get(body)
        if type(n) is tuple and _text_keepable(n[0]):
            return _kept_run(state, job, text, (body, _BASES.get((headers.get("host"), scope.get("scheme", "http"))),
                                                job.accept, True))
    return _inline_run(state, job, text, None, False)


#: in a skeleton: what makes a text's answer change from run to run whatever the
#: snapshot (a call of RAND / NOW / UUID / STRUUID / BNODE, or of a function named
#: by an IRI or a prefixed name: an extension function may be any of those), or
#: come from elsewhere (SERVICE)
_UNKEPT = re.compile(r"SERVICE|(?:RAND|NOW|UUID|STRUUID|BNODE)\s*\(|[\x01:][\w.-]*\s*\(", re.IGNORECASE)


def _text_keepable(skeleton: str) -> bool:
    """Whether the answer of a repeated text of no template, with this skeleton, may be
    kept (:func:`_kept_run`): none of :data:`_UNKEPT`. FILTER, BIND, aggregates and
    VALUES keep their answers (the same text on the same snapshot answers the same)."""
    return _UNKEPT.search(skeleton) is None


def _kept_run(state: ServerState, job: _PlainJob, text: str, key: tuple) -> tuple | None:
    """:func:`_inline_run` of a repeated text that is no template hit (VALUES, an
    OPTIONAL, an aggregate ...), its answer kept under ``key`` as a template hit's is
    (:class:`LaneAnswers`: from the second sighting, the current snapshot only, Accept
    and base in the key; the lane's first lookup, ``LaneAnswers.find``, serves the
    next one). A request without a Host (no kept base) is run as ever."""
    if key[1] is None:
        return _inline_run(state, job, text, None, False)
    db = job.db
    _ANSWERS._current(db)
    sn = _ANSWERS.sn  # (the snapshot before the run: a commit during it, and put() keeps nothing)
    result = _inline_run(state, job, text, None, False)
    if result is not None:
        _ANSWERS.put(key, db, result, sn)
        _ANSWERS.kept_texts += 1
    return result


#: the parameters that only choose the result format (``format`` and ``output`` as in
#: :func:`_query_job`; ``results``, which SPARQLWrapper also sends, is read by no one)
_FORMAT_KEYS = frozenset({"format", "output", "results"})
#: the parameters the query operation reads besides those (:func:`_handle`, :func:`_query_job`):
#: any other (``timeout=`` of Virtuoso's and Fuseki's clients, a cache buster, an API key
#: a proxy reads) changes nothing in the answer, so a text sent with it is the plain text
_READ_KEYS = frozenset({"query", "update", "explain", "default-graph-uri", "named-graph-uri"})
#: such parameters (their bytes) -> the Accept value they stand for ("": the header's),
#: or None when they are not only those, do not parse cleanly or name no known format
_FORMATS: dict[bytes, str | None] = {}


def _format_accept(params: bytes) -> str | None:
    """The Accept value of a parameter string of result-format parameters and parameters
    the query operation does not read (:data:`_READ_KEYS`), as :func:`_query_job` reads
    them ("" when it names none: the Accept header's); None for any other parameter
    string (the general path answers it, errors included)."""
    hit = _FORMATS.get(params, False)
    if hit is not False:
        return hit
    hit = None
    if len(params) <= 1024 and all(b"=" in p for p in params.split(b"&")):
        try:
            got = parse_params_cached(params)
            if got and got.keys().isdisjoint(_READ_KEYS):
                fmt = got.get("format") or got.get("output")
                hit = format_override(fmt[0]) if fmt else ""
        except HTTPError:  # malformed, or an unknown format: the general path's error
            hit = None
    if len(_FORMATS) >= 256:
        _FORMATS.clear()
    _FORMATS[params] = hit
    return hit


def _format_split(qs: bytes) -> tuple[bytes, str] | None:
    """(``query=<text>``, Accept value) of a parameter string that is one
    ``query=<text>`` and result-format parameters (:func:`_format_accept`), in any
    order; None otherwise. The general parser splits at every ``&`` and decodes
    each parameter on its own, so the query's text and the format are what it reads.
    Kept for short strings (:data:`_SPLITS`): a client repeating a text sends its
    parameters in the same order every time."""
    got = _SPLITS.get(qs, False)
    if got is not False:
        return got
    pieces = qs.split(b"&")
    at = [i for i, p in enumerate(pieces) if p.startswith(b"query=")]
    if len(at) != 1:
        got = None
    else:
        q = pieces.pop(at[0])
        accept = _format_accept(b"&".join(pieces))
        got = None if accept is None else (q, accept)
    if len(qs) <= _SPLIT_KEEP:
        if len(_SPLITS) >= 512:
            _SPLITS.clear()
        _SPLITS[qs] = got
    return got


#: :func:`_format_split`'s readings of parameter strings of at most _SPLIT_KEEP bytes
_SPLITS: dict[bytes, tuple | None] = {}
_SPLIT_KEEP = 2048


#: the lane's plain query strings (``query=...`` and nothing else) -> the query text.
#: Strings only: a cache entry holding a dict and a list per text (parse_params_cached)
#: gives the garbage collector two tracked objects per unique text to promote through
#: its generations, and a full collection of the grown heap costs milliseconds.
_LANE_TEXTS: dict[bytes, str] = {}
_LANE_TEXTS_MAX = 1024
#: plain query strings the lane read from their bytes (:func:`_hit_job`) -> their
#: normalized form (skeleton, slots), False when not read from the bytes: a repeated
#: text is neither scanned nor decoded again, and keeps the template path (its
#: per-request cost is below the text path's)
_QS_NORMS: dict[bytes, tuple | bool] = {}


class LaneAnswers:
    """The answers (form, media type, body bytes) of repeated plain query texts (of a
    known template, or of none: :func:`_kept_run`), kept for the store's current snapshot only: keyed by the query
    string, the base and the Accept value, and all dropped as soon as the store
    shows another snapshot (number, or object of that number) or is another store
    (every commit makes a snapshot numbered one higher, so nothing is served from
    before a write; the object's id is compared, not kept, so no old snapshot is
    pinned). Bounded: at most
    ``max_entries`` answers of at most ``max_body`` bytes each, ``max_bytes`` in all (past
    either bound all are dropped, as a new snapshot drops them). A selective answer of a
    few hundred rows is 10-60 KiB of JSON; kept, its repeat costs what a one-row answer's
    does (~0.2 ms over HTTP) instead of a run and its rendering. Only texts without a
    call that answers anew each time (RAND(), NOW(), UUID(), STRUUID(), BNODE(), a
    function named by an IRI or prefixed name) nor SERVICE (a remote endpoint's answer
    is not the store's): :func:`_text_keepable`; and stores whose snapshots are numbered."""

    __slots__ = ("store", "sn", "map", "max_entries", "max_body", "max_bytes", "bytes", "served", "kept_texts")

    def __init__(self, max_entries: int = 1024, max_body: int = 256 << 10, max_bytes: int = 32 << 20):
        self.store = None
        self.sn = None
        self.map: dict[tuple, tuple] = {}
        self.max_entries = max_entries
        self.max_body = max_body
        self.max_bytes = max_bytes
        self.bytes = 0  # the kept bodies' bytes
        self.served = 0  # answers given from here (tests see the path taken)
        self.kept_texts = 0  # answers of texts of no template run to be kept (_kept_run)

    @staticmethod
    def key(work, qs: bytes) -> tuple | None:
        """The cache key of a template hit's job, None when its answer is not kept: only
        a text's second sighting on is (a text sent once, e.g. with a new constant every
        time, costs no kept answer: no memory churn, nothing more for the collector)."""
        if not work.repeat:
            return None
        n = _QS_NORMS.get(qs)
        if not n or not _text_keepable(n[0]):
            return None
        return (qs, work.base, work.accept)

    @staticmethod
    def body_key(work, body: bytes) -> tuple | None:
        """:meth:`key` of an ``application/sparql-query`` body's template hit (its
        normalized form in ``_BODY_TEXTS``): tagged, so that no body shares a key with
        a query string (or a form body) of the same bytes."""
        if not work.repeat:
            return None
        n = _BODY_TEXTS.get(body)
        if not n or not _text_keepable(n[0]):
            return None
        return (body, work.base, work.accept, True)

    def _current(self, db) -> bool:
        """Whether the kept answers are of ``db``'s current snapshot (dropped if not)."""
        store = db.store
        snap = store.snapshot()
        sn = getattr(snap, "sn", None)
        if sn is not None:  # (and the object: a cluster may publish a second snapshot of one number)
            sn = (sn, id(snap))
        if store is self.store and sn == self.sn and sn is not None:
            return True
        self.map.clear()
        self.bytes = 0
        self.store = store
        self.sn = sn
        return False

    def get(self, key: tuple, db) -> tuple | None:
        """The kept answer of ``key``, None when there is none for the current snapshot
        (``sn`` then holds the current snapshot's number, for :meth:`put`)."""
        if not self._current(db):
            return None
        got = self.map.get(key)
        if got is not None:
            self.served += 1
            db.queries += 1  # (answered, as the run would have counted it)
        return got

    def find(self, key: tuple, db) -> tuple | None:
        """The kept answer of ``key`` when there is one and it is of ``db``'s current
        snapshot; None otherwise. The lane's first lookup for a request (before any
        template matching or job): a miss costs one dict lookup and changes nothing
        (:meth:`get`, on the template path, then notes the snapshot for :meth:`put`)."""
        got = self.map.get(key)
        if got is None:
            return None
        store = db.store  # (_current's test in place: one call less for every kept answer)
        snap = store.snapshot()
        if store is not self.store or (getattr(snap, "sn", None), id(snap)) != self.sn:
            self._current(db)  # (another snapshot: all dropped)
            return None
        self.served += 1
        db.queries += 1  # (answered, as the run would have counted it)
        return got

    def configure(self, max_bytes: int) -> None:
        """The server's ``--answer-cache``: ``max_bytes`` in all (0: none kept); what is
        kept now is dropped."""
        self.max_bytes = int(max_bytes)
        self.max_body = min(256 << 10, self.max_bytes)
        self.map.clear()
        self.bytes = 0

    def put(self, key: tuple, db, result: tuple, sn) -> None:
        """Keep ``result``, the answer of a run begun at snapshot number ``sn``, if the
        store still shows that snapshot (a commit during the run: not kept)."""
        body = result[2]
        if type(body) is not bytes or len(body) > self.max_body or sn is None:
            return
        if not self._current(db) or self.sn != sn:
            return
        if len(self.map) >= self.max_entries or self.bytes + len(body) > self.max_bytes:
            self.map.clear()
            self.bytes = 0
        old = self.map.get(key)
        if old is not None:
            self.bytes -= len(old[2])
        self.map[key] = result
        self.bytes += len(body)


#: the lane's kept answers of repeated texts (:class:`LaneAnswers`)
_ANSWERS = LaneAnswers()
#: ``application/sparql-query`` bodies -> their normalized form (:func:`_body_hit_job`): a
#: repeated body is neither scanned again nor decoded
_BODY_TEXTS: dict[bytes, tuple] = {}


def _lane_text(qs: bytes) -> str | None:
    """The query text of a query string that is ``query=<text>`` alone (decoded as
    :func:`server.api.common.parse_params_cached` would); None for any other form,
    or when the text is not clean UTF-8 (the general decoder says what is wrong)."""
    text = _LANE_TEXTS.get(qs)
    if text is not None:
        return text
    if not qs.startswith(b"query=") or b"&" in qs or len(qs) > SHAPE_MAX_CHARS * 3:
        return None
    try:
        text = _unquote_plus(qs[6:])
    except (UnicodeDecodeError, ValueError):
        return None
    if not text:
        return None
    if len(_LANE_TEXTS) >= _LANE_TEXTS_MAX:
        _LANE_TEXTS.clear()
    _LANE_TEXTS[qs] = text
    return text


def format_override(value: str) -> str:
    """The Accept value that ``?format=`` / ``?output=`` (handy in a browser, and
    sent by SPARQLWrapper) stands for: a shorthand of the format registry ("json"
    names both SPARQL JSON and JSON-LD, the query form picks) or a media type. A
    known format without a writer is a 406, an unknown name a 400 listing the
    accepted ones (a silent fallback would answer in a format nobody asked for)."""
    v = value.strip().lower()
    if "/" in v:
        return v
    accept = formats.format_param(v)
    if accept is not None:
        return accept
    known = formats.by_name(v, formats.GRAPH) or formats.by_name(v, formats.RESULTS)
    if known is not None:
        raise HTTPError(406, "not_acceptable", f"format {v!r} ({known.media_type}) cannot be written by this server",
                        extra={"available": formats.format_param_names()})
    shown = v if len(v) <= 64 else v[:64] + "..."
    raise HTTPError(400, "bad_request", f"unknown format {shown!r}; use one of: "
                    + ", ".join(formats.format_param_names()) + " (or a media type)",
                    extra={"available": formats.format_param_names()})


def _cost_shape(db, text: str, base: str, dataset) -> object:
    """The key under which the server learns what a query costs (inline on the
    event loop or in the thread pool): the engine's shape (a fast-path BGP with
    its one entity constant as a parameter, so a new constant of a known shape
    runs inline at once) when it has one, else the text with literals and
    comments blanked. Parsing here is cheap (short texts only) and cached for
    the run itself; a syntax error answers 400 from here as it would from there."""
    if len(text) > SHAPE_MAX_CHARS:
        return None
    key = None
    if not dataset:
        fn = getattr(db, "shape_key", None)
        if fn is not None:
            key = fn(text, base)
    if key is None:
        return query_shape(text)
    got = _FAST_SHAPES.get(id(key))  # (the engine hands out its kept key object for a known text)
    if got is None or got[0] is not key:
        if len(_FAST_SHAPES) >= 1024:
            _FAST_SHAPES.clear()
        got = _FAST_SHAPES[id(key)] = (key, HashedShape(("fast", key)))
    return got[1]


#: id(engine shape key) -> (that key, its cost key hashed once): the key object is kept
#: alongside, so a reused id of a freed key is never taken for it
_FAST_SHAPES: dict[int, tuple] = {}


def explain_mode(params: dict) -> str | None:
    """``explain=true`` (the plan instead of the results) or ``explain=analyze``
    (the plan with per-operator actuals after running the query); None without it."""
    v = one(params, "explain")
    if v is None:
        return None
    v = v.strip().lower()
    if v in ("true", "analyze"):
        return v
    if v == "false":
        return None
    raise HTTPError(400, "bad_request", f"explain must be true, analyze or false, not {v[:64]!r}")


# --------------------------------------------------------------------------
# Service description
# --------------------------------------------------------------------------

SD = "http://www.w3.org/ns/sparql-service-description#"
RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
VOID_TRIPLES = "<http://rdfs.org/ns/void#triples>"
XSD_INTEGER = "http://www.w3.org/2001/XMLSchema#integer"


def service_description_triples(endpoint: str, update_endpoint: str, status: dict | None) -> list[tuple[str, str, str]]:
    svc = "<" + endpoint + ">"

    def sd(x: str) -> str:
        return "<" + SD + x + ">"

    t = [
        (svc, RDF_TYPE, sd("Service")),
        (svc, sd("endpoint"), svc),
        (svc, sd("supportedLanguage"), sd("SPARQL11Query")),
        (svc, sd("supportedLanguage"), sd("SPARQL11Update")),
        (svc, sd("feature"), sd("EmptyGraphs")),
        (svc, "<http://www.w3.org/2000/01/rdf-schema#label>", '"Jindou SPARQL 1.1 endpoint"'),
        (svc, "<http://www.w3.org/2000/01/rdf-schema#seeAlso>", "<" + update_endpoint + ">"),
    ]
    for f in formats.writable(formats.RESULTS) + formats.writable(formats.GRAPH):
        t.append((svc, sd("resultFormat"), "<" + f.iri + ">"))
    for f in formats.readable(formats.GRAPH):
        t.append((svc, sd("inputFormat"), "<" + f.iri + ">"))
    ds = "_:dataset"
    dg = "_:defaultGraph"
    t += [
        (svc, sd("defaultDataset"), ds),
        (ds, RDF_TYPE, sd("Dataset")),
        (ds, sd("defaultGraph"), dg),
        (dg, RDF_TYPE, sd("Graph")),
    ]
    if status:
        n = status.get("default_triples", status.get("triples"))
        if isinstance(n, int):
            t.append((dg, VOID_TRIPLES, f'"{n}"^^<{XSD_INTEGER}>'))
    return t


def service_description(state: ServerState, scope: dict, headers: dict[str, str]) -> Reply:
    accept = headers.get("accept")
    mt = formats.negotiate(accept, "GRAPH")
    if mt is None:
        raise not_acceptable(accept, "GRAPH")
    root = base_url(headers, scope)
    try:
        status = state.db.status()
    except Exception:
        status = None
    res = ser.graph_from_keys(service_description_triples(root + "/sparql", root + "/update", status))
    body = ser.serialize(res, mt)
    return Reply(200, body, formats.content_type(mt), {"Vary": "Accept"})


# --------------------------------------------------------------------------
# FastAPI routes (documentation; the app's fast path normally answers first)
# --------------------------------------------------------------------------

_QUERY_PARAMS = [
    {"name": "query", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "SPARQL 1.1 query (GET). Without it, GET returns the Service Description."},
    {"name": "default-graph-uri", "in": "query", "required": False,
     "schema": {"type": "array", "items": {"type": "string"}}, "style": "form", "explode": True,
     "description": "IRI of a graph to merge into the default graph (repeatable)."},
    {"name": "format", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "Result format overriding Accept: json, xml, csv, tsv, turtle, nt, nq, jsonld, rdfxml "
                    "(or a media type); an unknown name is a 400 listing the accepted ones."},
    {"name": "explain", "in": "query", "required": False, "schema": {"type": "string", "enum": ["true", "analyze"]},
     "description": "Answer the query plan as JSON instead of the results (true), or after running the query "
                    "with actual rows and time per operator (analyze)."},
    {"name": "named-graph-uri", "in": "query", "required": False,
     "schema": {"type": "array", "items": {"type": "string"}}, "style": "form", "explode": True,
     "description": "IRI of a named graph of the dataset (repeatable)."},
]

_RESULT_CONTENT = {f.media_type: {} for f in formats.writable(formats.RESULTS) + formats.writable(formats.GRAPH)}

_RESPONSES = {
    200: {"description": "Query results, negotiated by Accept (an alias such as application/xml is answered "
                          "under the canonical type; text/plain gets CSV, or N-Triples for graphs)",
          "content": _RESULT_CONTENT},
    204: {"description": "Update applied (POST with an update)"},
    400: {"description": "Syntax error or bad request: JSON {error, detail[, line, column]}"},
    401: {"description": "Token required (updates, or reads with --read-token)"},
    403: {"description": "Wrong token"},
    406: {"description": "No acceptable result format"},
    413: {"description": "Request body too large"},
    415: {"description": "Unsupported Content-Type"},
    422: {"description": "Row, memory or response-size budget exceeded (deterministic: no Retry-After)"},
    503: {"description": "Timeout or too many concurrent queries (Retry-After)"},
}


async def _via_fastapi(request: Request) -> Response:
    state: ServerState = request.app.state.jindou
    headers = {k.lower(): v for k, v in request.headers.items()}
    reply = await handle_sparql(
        state, request.method, request.scope, headers, request.scope.get("query_string", b""),
        request_body_reader(request, state.config.max_body),
    )
    body = reply.body
    if reply.stream is not None:  # this path (the API docs' try-it-out) builds the body whole
        body = await asyncio.get_running_loop().run_in_executor(None, b"".join, reply.stream.chunks(None))
    return Response(body, status_code=reply.status, headers=reply.headers, media_type=reply.content_type)


@router.get("/sparql", summary="SPARQL query (GET) or Service Description", responses=_RESPONSES,
            openapi_extra={"parameters": _QUERY_PARAMS})
async def sparql_get(request: Request) -> Response:
    """`GET /sparql?query=...`: run a query; results by `Accept` (SPARQL JSON by
    default for SELECT/ASK, Turtle for CONSTRUCT/DESCRIBE). Without `query`,
    returns the SPARQL Service Description (Turtle by default)."""
    return await _via_fastapi(request)


@router.post(
    "/sparql",
    summary="SPARQL query or update (POST)",
    responses=_RESPONSES,
    openapi_extra={
        "parameters": _QUERY_PARAMS[1:],
        "requestBody": {
            "required": True,
            "content": {
                "application/sparql-query": {"schema": {"type": "string"}, "example": "SELECT * WHERE { ?s ?p ?o } LIMIT 10"},
                UPDATE_TYPE: {"schema": {"type": "string"}, "example": "INSERT DATA { <urn:a> <urn:b> <urn:c> }"},
                FORM_TYPE: {"schema": {"type": "object", "properties": {
                    "query": {"type": "string"},
                    "update": {"type": "string"},
                    "default-graph-uri": {"type": "array", "items": {"type": "string"}},
                    "named-graph-uri": {"type": "array", "items": {"type": "string"}},
                }}},
            },
        },
    },
)
async def sparql_post(request: Request) -> Response:
    """`POST /sparql` with the query as body (`application/sparql-query`) or as
    form field `query` (`application/x-www-form-urlencoded`); an update as body
    (`application/sparql-update`) or form field `update` runs as at `/update`."""
    return await _via_fastapi(request)
