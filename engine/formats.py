"""The one registry of RDF and query-result formats (rdflib style: registered by name).

A :class:`Format` says everything the server knows about a format: its media
types (canonical first, then aliases), file extensions, the short names of
``?format=`` and of the loader's ``format=``, whether it can carry named graphs,
and its parser (in ``engine/kv/loader.py``) and writer (in
``engine/exec/serialize.py``). Every site that reads or writes RDF asks this
module: content negotiation (:func:`negotiate`, :func:`content_type`),
``/sparql``'s ``?format=``, ``/store``'s Content-Type and Accept, ``/streams``
graph bodies, the loader's format guessing and the service description. Adding
a format is one :func:`register` call below plus its parser or writer function.

Parsers and writers are named ``"module:function"`` and imported on first use,
so this module sits below both the loader and the serializers (no import
cycle) and importing it costs nothing.

Names are unique within a kind (``graph`` / ``results``), not across kinds:
``application/json`` is SPARQL JSON for SELECT/ASK and JSON-LD for graphs,
and ``?format=json`` means both. Extensions are unique across all formats.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from functools import cached_property

GRAPH = "graph"
RESULTS = "results"

#: compression suffix a file name may add after its format's extension (read with gzip)
GZIP_SUFFIX = ".gz"
#: namespace of the W3C format IRIs (service description ``sd:resultFormat`` / ``sd:inputFormat``)
W3C_FORMATS = "http://www.w3.org/ns/formats/"

SPARQL_JSON = "application/sparql-results+json"
SPARQL_XML = "application/sparql-results+xml"
CSV = "text/csv"
TSV = "text/tab-separated-values"
TURTLE = "text/turtle"
NTRIPLES = "application/n-triples"
NQUADS = "application/n-quads"
TRIG = "application/trig"
JSONLD = "application/ld+json"
RDFXML = "application/rdf+xml"


@dataclass(frozen=True)
class Format:
    name: str  # short name, what the loader API returns and takes ("ttl")
    kind: str  # GRAPH or RESULTS
    media_types: tuple[str, ...]  # canonical first, then aliases (lower case)
    content_type: str  # Content-Type header of an answer in the canonical type
    w3c: str  # local name of the format's IRI under W3C_FORMATS
    extensions: tuple[str, ...] = ()  # with the dot, lower case
    names: tuple[str, ...] = ()  # more short names (?format= shorthands, loader format names)
    quads: bool = False  # can carry named graphs
    stream: bool = False  # accepted as a /streams graph body (one graph = one stream element)
    parser: str | None = None  # "module:function" (engine/kv/loader.py)
    writer: str | None = None  # "module:function" (engine/exec/serialize.py)
    rdflib: str | None = None  # rdflib plugin name, for the formats rdflib parses

    @property
    def media_type(self) -> str:
        return self.media_types[0]

    @property
    def iri(self) -> str:
        return W3C_FORMATS + self.w3c

    @cached_property
    def parse(self):
        """The parser: ``parse(stream, fmt, *, display, base, lenient, bnode_prefix, allow_fetch, bar)``
        yielding :class:`engine.kv.loader.ParsedKeys` blocks."""
        return _resolve(self.parser, self.name, "parser")

    @cached_property
    def write(self):
        """The writer: ``write(result, *, graph, prefixes, max_bytes) -> bytes``."""
        return _resolve(self.writer, self.name, "writer")


def _resolve(ref: str | None, name: str, what: str):
    if ref is None:
        raise ValueError(f"format {name!r} has no {what}")
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


_FORMATS: list[Format] = []
# derived lookup tables, rebuilt by register() / unregister()
_BY_NAME: dict[str, dict[str, Format]] = {GRAPH: {}, RESULTS: {}}
_BY_MEDIA: dict[str, dict[str, Format]] = {GRAPH: {}, RESULTS: {}}
_BY_EXT: dict[str, Format] = {}
_CONTENT_TYPES: dict[str, str] = {}
_FORMAT_PARAM: dict[str, str] = {}
#: per kind: (offered canonical types in server preference order, alias -> canonical) of writable formats
_OFFERS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {GRAPH: ((), {}), RESULTS: ((), {})}
_ACCEPT_CACHE: dict[tuple[str, str], str | None] = {}
_ANY_CACHE: dict[str, bool] = {}


def register(fmt: Format) -> Format:
    """Add a format (meant for import time: registering is not locked against itself).
    Raises ValueError when a name or media type is already claimed by a format of
    the same kind, or an extension by any format."""
    if fmt.kind not in (GRAPH, RESULTS):
        raise ValueError(f"format {fmt.name!r}: kind must be {GRAPH!r} or {RESULTS!r}")
    names = (fmt.name, *fmt.names)
    if len(set(names)) < len(names) or any(n in _BY_NAME[fmt.kind] for n in names):
        raise ValueError(f"format {fmt.name!r}: a name of {names} is already taken")
    mts = fmt.media_types
    if not mts or len(set(mts)) < len(mts) or any(m in _BY_MEDIA[fmt.kind] or m != m.lower() for m in mts):
        raise ValueError(f"format {fmt.name!r}: a media type of {mts} is already taken (or not lower case)")
    exts = fmt.extensions
    if len(set(exts)) < len(exts) or any(e in _BY_EXT or e != e.lower() or not e.startswith(".")
                                         or e == GZIP_SUFFIX for e in exts):
        raise ValueError(f"format {fmt.name!r}: an extension of {exts} is already taken (or malformed)")
    _FORMATS.append(fmt)
    _rebuild()
    return fmt


def unregister(name: str, kind: str = GRAPH) -> None:
    """Remove a format (tests register a throwaway format and take it out again)."""
    f = _BY_NAME[kind].get(name)
    if f is None or f.name != name:
        raise KeyError(f"no {kind} format named {name!r}")
    _FORMATS.remove(f)
    _rebuild()


def _rebuild() -> None:
    """Recompute the lookup tables and swap them in whole (a lookup running meanwhile sees
    the old or the new tables, never half-built ones)."""
    global _BY_NAME, _BY_MEDIA, _BY_EXT, _CONTENT_TYPES, _FORMAT_PARAM, _OFFERS, _ACCEPT_CACHE
    by_name: dict[str, dict[str, Format]] = {GRAPH: {}, RESULTS: {}}
    by_media: dict[str, dict[str, Format]] = {GRAPH: {}, RESULTS: {}}
    by_ext: dict[str, Format] = {}
    ctypes: dict[str, str] = {}
    param: dict[str, list[str]] = {}
    for f in _FORMATS:
        for n in (f.name, *f.names):
            by_name[f.kind][n] = f
            if f.writer is not None:
                param.setdefault(n, []).append(f.media_type)
        for mt in f.media_types:
            by_media[f.kind][mt] = f
        for ext in f.extensions:
            by_ext[ext] = f
        if f.writer is not None:
            ctypes[f.media_type] = f.content_type
    offers_ = {}
    for kind in (GRAPH, RESULTS):
        out = [f for f in _FORMATS if f.kind == kind and f.writer is not None]
        offers_[kind] = (tuple(f.media_type for f in out), {a: f.media_type for f in out for a in f.media_types[1:]})
    _BY_NAME, _BY_MEDIA, _BY_EXT, _CONTENT_TYPES, _OFFERS = by_name, by_media, by_ext, ctypes, offers_
    # "json" names SPARQL JSON and JSON-LD: the Accept value lists both, negotiation picks by the form
    _FORMAT_PARAM = {n: ", ".join(mts) for n, mts in param.items()}
    _ACCEPT_CACHE = {}
    _ANY_CACHE.clear()


# ----------------------------------------------------------------- lookups


def registered(kind: str | None = None) -> tuple[Format, ...]:
    """Every format (of ``kind``), in registration order."""
    return tuple(f for f in _FORMATS if kind is None or f.kind == kind)


def readable(kind: str = GRAPH) -> tuple[Format, ...]:
    """The formats of ``kind`` that have a parser."""
    return tuple(f for f in _FORMATS if f.kind == kind and f.parser is not None)


def writable(kind: str = GRAPH) -> tuple[Format, ...]:
    """The formats of ``kind`` that have a writer, in server preference order."""
    return tuple(f for f in _FORMATS if f.kind == kind and f.writer is not None)


def by_name(name: str, kind: str = GRAPH) -> Format | None:
    """The format of ``kind`` a short name (``ttl``, ``turtle``, ``n3`` ...) names, exactly."""
    return _BY_NAME[kind].get(name)


def for_media_type(media_type: str, kind: str = GRAPH) -> Format | None:
    """The format of ``kind`` a bare, lower-case media type (canonical or alias) names."""
    return _BY_MEDIA[kind].get(media_type)


def for_extension(ext: str) -> Format | None:
    """The format of a file extension (with the dot, lower case)."""
    return _BY_EXT.get(ext)


def path_extension(path) -> str:
    """The format extension of a file name: lower case, after removing a ``.gz`` suffix ('' if none)."""
    name = os.fspath(path).lower()
    if name.endswith(GZIP_SUFFIX):
        name = name[: -len(GZIP_SUFFIX)]
    return os.path.splitext(name)[1]


def for_path(path) -> Format | None:
    """The format of a file by its extension (``data.ttl``, ``dump.nq.gz``)."""
    return _BY_EXT.get(path_extension(path))


def format_param(value: str) -> str | None:
    """The Accept value a ``?format=`` / ``?output=`` shorthand stands for (lower case), None if unknown."""
    return _FORMAT_PARAM.get(value)


def format_param_names() -> list[str]:
    """Every ``?format=`` shorthand (the names of the writable formats), sorted."""
    return sorted(_FORMAT_PARAM)


# ----------------------------------------------------------------- content negotiation


def offers(form: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """(canonical media types offered, in server preference order; alias -> canonical)
    for a query form ('SELECT', 'ASK', 'CONSTRUCT', 'DESCRIBE') or 'GRAPH'."""
    form = (form or "SELECT").upper()
    return _OFFERS[GRAPH if form in ("CONSTRUCT", "DESCRIBE", "GRAPH") else RESULTS]


def output_format(media_type: str, kind: str) -> Format | None:
    """The writable format of ``kind`` a negotiated (canonical or alias) media type names."""
    f = _BY_MEDIA[kind].get(media_type)
    return f if f is not None and f.writer is not None else None


def content_type(media_type: str) -> str:
    """The Content-Type header value for a negotiated media type."""
    return _CONTENT_TYPES.get(media_type) or (
        media_type + "; charset=utf-8" if media_type.startswith(("text/", "application/xml")) else media_type
    )


def parse_accept(header: str) -> list[tuple[str, str, float, int]]:
    """Media ranges of an Accept header as (type, subtype, q, position).
    Malformed ranges are skipped; a malformed q counts as 1."""
    out = []
    for pos, part in enumerate(header.split(",")):
        fields = part.split(";")
        mr = fields[0].strip().lower()
        if not mr:
            continue
        if "/" not in mr:
            if mr == "*":
                mr = "*/*"
            else:
                continue
        typ, _, sub = mr.partition("/")
        q = 1.0
        for f in fields[1:]:
            k, _, v = f.strip().partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v.strip())
                except ValueError:
                    q = 1.0
                q = min(max(q, 0.0), 1.0)
        out.append((typ.strip(), sub.strip(), q, pos))
    return out


#: Generic types a client names to read the answer as text: a match is answered
#: under this name (the body in the format it is an alias of: CSV for results,
#: N-Triples for graphs, whose historical type it is), since the canonical
#: ``text/csv`` / ``application/n-triples`` is not what such a client accepts
#: and a browser would download it instead of showing it.
VIEW_TYPES = frozenset({"text/plain"})


def acceptable_at_all(accept_header: str | None) -> bool:
    """False if the Accept header rules out every result and graph format
    (memoized: a client sends the same Accept with every request)."""
    if not accept_header:
        return True
    hit = _ANY_CACHE.get(accept_header)
    if hit is None:
        hit = any(negotiate(accept_header, f) is not None for f in ("SELECT", "ASK", "CONSTRUCT"))
        if len(_ANY_CACHE) >= 512:
            _ANY_CACHE.clear()
        _ANY_CACHE[accept_header] = hit
    return hit


def negotiate(accept_header: str | None, form: str) -> str | None:
    """Pick the media type to answer with.

    ``form`` is the query form ('SELECT', 'ASK', 'CONSTRUCT', 'DESCRIBE') or
    'GRAPH' for RDF graphs. Returns the media type to send: the canonical type
    of a writable format (an alias the client named, such as ``application/xml``
    in a browser's Accept or ``application/json``, is answered under the
    format's canonical type, which says what the body is), a :data:`VIEW_TYPES`
    name as itself; the default when the header is absent, empty or only
    wildcards, and None when nothing offered is acceptable (HTTP 406).

    Highest q wins; among equal q, the more specific range, then the range the
    client listed first, then server preference.
    """
    if not accept_header or not accept_header.strip():
        return offers(form)[0][0]
    ck = (accept_header, form)
    hit = _ACCEPT_CACHE.get(ck, False)
    if hit is not False:
        return hit  # type: ignore[return-value]
    offered, aliases = offers(form)
    ranges = parse_accept(accept_header)
    candidates = list(offered) + [a for a in aliases if aliases[a] in offered]
    best = None
    best_score = None
    for pref, mt in enumerate(candidates):
        t, _, s = mt.partition("/")
        match = None  # (specificity, q, pos)
        for rt, rs, q, pos in ranges:
            if rt == t and rs == s:
                spec = 2
            elif rt == t and rs == "*":
                spec = 1
            elif rt == "*" and rs == "*":
                spec = 0
            else:
                continue
            if match is None or spec > match[0]:
                match = (spec, q, pos)
        if match is None or match[1] <= 0:
            continue
        # aliases only count when named explicitly
        if pref >= len(offered) and match[0] < 2:
            continue
        score = (match[1], match[0], -match[2], -pref)
        if best_score is None or score > best_score:
            best, best_score = mt, score
    if best is not None and best not in VIEW_TYPES:
        best = aliases.get(best, best)
    if len(_ACCEPT_CACHE) > 512:
        _ACCEPT_CACHE.clear()
    _ACCEPT_CACHE[ck] = best
    return best


# ----------------------------------------------------------------- the formats
# Registration order is server preference among the writable formats of a kind
# (first = the default answer: SPARQL JSON for SELECT/ASK, Turtle for graphs).

_SER = "engine.exec.serialize:"
_LOAD = "engine.kv.loader:"

register(Format("srj", RESULTS, (SPARQL_JSON, "application/json"), SPARQL_JSON, "SPARQL_Results_JSON",
                extensions=(".srj",), names=("json",), writer=_SER + "write_sparql_json"))
register(Format("srx", RESULTS, (SPARQL_XML, "application/xml", "text/xml"), SPARQL_XML + "; charset=utf-8",
                "SPARQL_Results_XML", extensions=(".srx",), names=("xml",), writer=_SER + "write_sparql_xml"))
register(Format("csv", RESULTS, (CSV, "text/plain"), CSV + "; charset=utf-8", "SPARQL_Results_CSV",
                extensions=(".csv",), writer=_SER + "write_csv"))
register(Format("tsv", RESULTS, (TSV,), TSV + "; charset=utf-8", "SPARQL_Results_TSV",
                extensions=(".tsv",), writer=_SER + "write_tsv"))

register(Format("ttl", GRAPH, (TURTLE, "application/x-turtle", "text/n3"), TURTLE + "; charset=utf-8", "Turtle",
                extensions=(".ttl", ".turtle", ".n3"), names=("turtle", "n3"), stream=True,
                parser=_LOAD + "parse_with_oxigraph", writer=_SER + "write_turtle", rdflib="turtle"))
register(Format("nt", GRAPH, (NTRIPLES, "text/plain"), NTRIPLES, "N-Triples",
                extensions=(".nt", ".ntriples"), names=("ntriples", "n-triples"), stream=True,
                parser=_LOAD + "parse_lines", writer=_SER + "write_ntriples", rdflib="nt"))
register(Format("nq", GRAPH, (NQUADS, "text/x-nquads"), NQUADS, "N-Quads",
                extensions=(".nq", ".nquads"), names=("nquads", "n-quads"), quads=True,
                parser=_LOAD + "parse_lines", writer=_SER + "write_nquads", rdflib="nquads"))
register(Format("jsonld", GRAPH, (JSONLD, "application/json"), JSONLD, "JSON-LD",
                extensions=(".jsonld", ".json"), names=("json-ld", "json"), quads=True,
                parser=_LOAD + "parse_with_oxigraph", writer=_SER + "write_jsonld", rdflib="json-ld"))
register(Format("xml", GRAPH, (RDFXML, "application/xml", "text/xml"), RDFXML + "; charset=utf-8", "RDF_XML",
                extensions=(".rdf", ".owl", ".xml"), names=("rdfxml", "rdf+xml", "rdf"),
                parser=_LOAD + "parse_with_oxigraph", writer=_SER + "write_rdfxml", rdflib="xml"))
register(Format("trig", GRAPH, (TRIG, "application/x-trig"), TRIG, "TriG",
                extensions=(".trig",), quads=True, parser=_LOAD + "parse_with_oxigraph", writer=_SER + "write_trig",
                rdflib="trig"))
