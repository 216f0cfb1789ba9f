"""SERVICE: federated query, off unless the operator allows it.

``SERVICE <iri> { P }`` sends ``SELECT * WHERE { P }`` (the group as written,
with the query's PREFIX and BASE declarations) to the endpoint over HTTP (the
SPARQL 1.1 Protocol: a form POST asking for SPARQL JSON results) and joins the
answer with the rest of the pattern. It runs only when the server is started
with ``--allow-service`` *and* the endpoint is on ``--service-endpoints`` (an
entry is an exact IRI, or an IRI prefix when it ends in ``*``): a server must
not become a proxy to whatever address a client names. Anything else is a 400
naming the option, or, with ``SERVICE SILENT``, the unit solution (SPARQL's
"errors are ignored").

The remote call lives under the query's own limits: the HTTP timeout is the
time left before the query's deadline, the body is read in pieces with the
deadline and the memory budget checked as it grows, the rows count against the
row budget, and no redirect is followed (a redirect could lead outside the
allow-list). A remote failure (connection, HTTP status, unreadable results) is
a :class:`ServiceError` (400), or the unit solution under ``SILENT``.
Remote blank nodes are relabelled per call: they are never the store's.
"""

from __future__ import annotations

import itertools
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

import numpy as np

from engine.errors import QueryEvaluationError, QueryTimeout, RowBudgetExceeded, UnsupportedError
from engine.exec.bindings import Bindings, join
from engine.terms import literal_key

#: the option that turns federation on (named in errors)
ALLOW_OPTION = "--allow-service"
ENDPOINTS_OPTION = "--service-endpoints"
#: HTTP timeout of a call when the query itself has no deadline (s)
DEFAULT_TIMEOUT = 60.0
#: largest remote answer read (bytes); the query's memory budget applies too
MAX_RESPONSE_BYTES = 256 << 20
_READ = 1 << 16
_ACCEPT = "application/sparql-results+json"
_calls = itertools.count()


class ServiceError(QueryEvaluationError):
    """A SERVICE call that failed: the endpoint was unreachable, answered an error
    status, or sent results that are not SPARQL JSON (HTTP 400)."""

    kind = "service"


class ServiceRefused(UnsupportedError):
    """A SERVICE this server does not evaluate: federation off, the endpoint not
    allowed, or a variable endpoint (HTTP 400)."""


@dataclass(frozen=True)
class ServicePolicy:
    """Which SERVICE endpoints a server may call (``allow`` off: none)."""

    allow: bool = False
    endpoints: tuple[str, ...] = ()

    def allowed(self, iri: str) -> bool:
        if not self.allow or urllib.parse.urlsplit(iri).scheme.lower() not in ("http", "https"):
            return False
        for e in self.endpoints:
            if e.endswith("*"):
                if iri.startswith(e[:-1]):
                    return True
            elif iri == e:
                return True
        return False

    def refusal(self, iri: str) -> str:
        if not self.allow:
            return (f"SERVICE <{iri}> is not evaluated: federated queries are off (start the server with "
                    f"{ALLOW_OPTION} and list the endpoint in {ENDPOINTS_OPTION})")
        return f"SERVICE <{iri}> is not evaluated: the endpoint is not an http(s) IRI listed in {ENDPOINTS_OPTION}"


DISABLED = ServicePolicy()
_NOT_A_QUERY = object()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 - urllib's hook
        raise ServiceError(f"SERVICE <{req.full_url}> answered a redirect ({code}), which is not followed")


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def evaluate(ev, node, seed) -> Bindings:
    """The SERVICE pattern ``node`` joined with ``seed`` (the evaluator's hook)."""
    ctx = ev.ctx
    policy = getattr(ctx, "service_policy", _NOT_A_QUERY)
    endpoint = node.endpoint
    key = getattr(endpoint, "key", None)
    try:
        if policy is _NOT_A_QUERY:  # an update's WHERE, a continuous query: no policy reaches them
            raise ServiceRefused("SERVICE is evaluated in one-shot queries only, not in updates or "
                                 "continuous queries")
        policy = policy or DISABLED
        if key is None or not key.startswith("<"):
            raise ServiceRefused("SERVICE with a variable endpoint is not supported: name the endpoint's IRI")
        iri = key[1:-1]
        if not policy.allowed(iri):
            raise ServiceRefused(policy.refusal(iri))
        res = _call(ctx, iri, node)
    except (QueryTimeout, RowBudgetExceeded):
        raise
    except (ServiceError, ServiceRefused):
        if not node.silent:
            raise
        res = Bindings.unit()
    if seed is None:
        return res
    return join(seed, res, ctx.max_rows)


def query_text(node) -> str:
    """The sub-query sent for ``node``: its prologue, then ``SELECT * WHERE`` its group."""
    head = []
    if node.base:
        head.append(f"BASE <{node.base}>")
    head += [f"PREFIX {p}: <{ns}>" for p, ns in node.prefixes]
    return "\n".join([*head, "SELECT * WHERE " + node.text])


def _remaining(ctx) -> float:
    if ctx.deadline is None:
        return DEFAULT_TIMEOUT
    left = ctx.deadline - time.monotonic()
    if left <= 0:
        raise QueryTimeout(f"query exceeded its timeout of {ctx.timeout} s")
    return left


def _call(ctx, iri: str, node) -> Bindings:
    body = urllib.parse.urlencode({"query": query_text(node)}).encode("utf-8")
    req = urllib.request.Request(iri, data=body, method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded", "Accept": _ACCEPT, "User-Agent": "jindou"})
    try:
        with _OPENER.open(req, timeout=_remaining(ctx)) as r:
            ctype = (r.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            data = _read(ctx, r, iri)
    except urllib.error.HTTPError as e:
        raise ServiceError(f"SERVICE <{iri}> answered HTTP {e.code}") from None
    except TimeoutError:
        _remaining(ctx)  # past the deadline: QueryTimeout
        raise ServiceError(f"SERVICE <{iri}> did not answer in time") from None
    except (urllib.error.URLError, OSError, ValueError):
        if ctx.deadline is not None and time.monotonic() > ctx.deadline:
            raise QueryTimeout(f"query exceeded its timeout of {ctx.timeout} s") from None
        # the socket's own words are not the client's business (no port scanner)
        raise ServiceError(f"SERVICE <{iri}> could not be reached") from None
    if ctype not in (_ACCEPT, "application/json"):
        raise ServiceError(f"SERVICE <{iri}> answered {ctype or 'no Content-Type'}, not SPARQL JSON results")
    return _bindings(ctx, data, iri)


def _read(ctx, r, iri: str) -> bytes:
    """The response body, read in pieces under the deadline, the size cap and the memory budget."""
    chunks = []
    size = 0
    while True:
        if ctx.deadline is not None and time.monotonic() > ctx.deadline:
            raise QueryTimeout(f"query exceeded its timeout of {ctx.timeout} s")
        piece = r.read(_READ)
        if not piece:
            break
        size += len(piece)
        if size > MAX_RESPONSE_BYTES:
            raise ServiceError(f"SERVICE <{iri}> answered more than {MAX_RESPONSE_BYTES} bytes")
        ctx.check_memory(2 * size)
        chunks.append(piece)
    return b"".join(chunks)


def _term_key(t: dict, bnodes: str) -> str:
    kind = t["type"]
    v = t["value"]
    if kind == "uri":
        return "<" + v + ">"
    if kind == "bnode":
        return "_:" + bnodes + v
    if kind in ("literal", "typed-literal"):
        lang = t.get("xml:lang")
        return literal_key(v, None if lang else t.get("datatype"), lang)
    raise ValueError(kind)


def _bindings(ctx, data: bytes, iri: str) -> Bindings:
    """SPARQL JSON results -> Bindings (ids of the query's term table)."""
    import orjson

    try:
        doc = orjson.loads(data)
        names = [str(v) for v in doc["head"]["vars"]]
        rows = doc["results"]["bindings"]
        if not isinstance(rows, list):
            raise TypeError
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise ServiceError(f"SERVICE <{iri}> answered something that is not SPARQL JSON results") from None
    n = len(rows)
    if ctx.max_rows is not None and n > ctx.max_rows:
        raise RowBudgetExceeded(f"SERVICE <{iri}> answered {n} rows, over the row budget of {ctx.max_rows}")
    ctx.charge_rows(n, len(names))
    bnodes = f"S{next(_calls)}x"
    cols = {}
    try:
        for name in names:
            ctx.check_budget()
            keys = [None if (t := row.get(name)) is None else _term_key(t, bnodes) for row in rows]
            cols[name] = ctx.intern(keys) if n else np.zeros(0, np.int64)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ServiceError(f"SERVICE <{iri}> answered a malformed term") from None
    return Bindings(cols, n)
