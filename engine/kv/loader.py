"""Parsers: RDF files / payloads -> key columns (the parse stage of :mod:`engine.io.ingest`).

* N-Triples / N-Quads: vectorized with pyarrow. The input is cut into chunks
  of whole lines; each chunk becomes one ``large_string`` array of lines
  (zero-copy over the bytes), every line is matched against one RE2 regex of
  the N-Triples/N-Quads grammar (``pyarrow.compute.extract_regex``), and only
  the terms that need it (escapes, ``^^xsd:string``, upper-case language tags)
  are canonicalized in Python with :func:`engine.terms.canonical_key`.
* Turtle, TriG, RDF/XML, JSON-LD: parsed by pyoxigraph (lexical forms kept
  exactly, line and column in syntax errors) and written by it as N-Quads,
  which the vectorized N-Quads path reads: no Python code runs per statement.
  rdflib remains only for JSON-LD documents with a remote context (pyoxigraph
  fetches nothing): fetched with ``--allow-load``, refused by name without.

Parsers fetch nothing from a payload (bytes) unless the caller allows it (the
server passes ``--allow-load``); files named by path are the operator's own and
may fetch (a JSON-LD context next to the file). RDF/XML DTDs are checked before
parsing (:func:`check_xml_prolog`): no external or nested entities, bounded
expansion.

A syntax error raises :class:`engine.errors.LoadError` (source name and
1-based line); with ``lenient=True`` bad statements are skipped and reported.
Blank node labels get the caller's ``bnode_prefix`` (unique per load: see
:func:`engine.io.ingest.bnode_prefix`). Interning and committing are
:mod:`engine.io.ingest`'s.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import re
import sys
import threading
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine import formats
from engine.bom import BOM, strip_bom
from engine.errors import LoadError
from engine.terms import XSD_DECIMAL, XSD_INTEGER, XSD_STRING, canonical_key, iri_key, literal_key

__all__ = [
    "ParsedKeys",
    "iter_parse",
    "normalize_format",
    "parse_to_keys",
    "guess_format",
    "format_for_media_type",
]

MAX_ERRORS = 1000  # errors kept in a report (all are counted in ``skipped``)
_CHUNK_BYTES = 16 << 20


@dataclass
class ParsedKeys:
    """Key columns of one parsed input; ``g`` is null for the default graph."""

    s: pa.Array
    p: pa.Array
    o: pa.Array
    g: pa.Array
    skipped: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.s)


# ------------------------------------------------------------------ formats (engine/formats.py)
def _readable(f: formats.Format | None) -> formats.Format | None:
    return f if f is not None and f.parser is not None else None


def guess_format(path: str) -> str:
    """The loader name of a file's RDF format, by its extension (``.gz`` removed first)."""
    f = _readable(formats.for_path(path))
    if f is None:
        ext = formats.path_extension(path)
        raise LoadError(f"cannot guess the RDF format of {ext or 'a file without extension'}", source=str(path))
    return f.name


def format_for_media_type(media_type: str) -> str:
    """The loader name of an RDF media type (parameters ignored) or of a format name (``turtle``)."""
    mt = media_type.split(";")[0].strip().lower()
    f = _readable(formats.for_media_type(mt) or formats.by_name(mt))
    if f is None:
        raise LoadError(f"unsupported media type {media_type!r}")
    return f.name


def normalize_format(fmt: str) -> formats.Format:
    """A format given as a name, a media type or an extension (with or without the dot)."""
    f = fmt.lower().lstrip(".")
    found = _readable(formats.by_name(f) or formats.for_media_type(f.split(";")[0].strip())
                      or formats.for_extension("." + f))
    if found is None:
        raise LoadError(f"unknown RDF format {fmt!r}")
    return found


# ------------------------------------------------------------------ N-Triples / N-Quads (vectorized)
# Full grammar (Python ``re``), used for the lines the vectorized fast path does not accept.
_HEX = "[0-9A-Fa-f]"
_UCHAR = rf"\\u{_HEX}{{4}}|\\U{_HEX}{{8}}"
_IRI = rf'<[A-Za-z][A-Za-z0-9+.\-]*:(?:[^\x00-\x20<>"{{}}|^`\\]|{_UCHAR})*>'
_PN = "A-Za-z0-9_\u00b7\u00c0-\U0010ffff"
_BN = rf"_:[{_PN}](?:[{_PN}.\-]*[{_PN}\-])?"
_LIT = rf'"(?:[^"\\\n\r]|\\[tbnrf"\'\\]|{_UCHAR})*"(?:@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*|\^\^{_IRI})?'
_WS = r"[ \t]*"
_STMT = rf"^{_WS}(?P<s>{_IRI}|{_BN}){_WS}(?P<p>{_IRI}){_WS}(?P<o>{_IRI}|{_BN}|{_LIT})"
_TAIL = rf"{_WS}\.{_WS}(?:#[^\r\n]*)?[\r\n]*$"
_NT_PY = re.compile(_STMT + _TAIL)
_NQ_PY = re.compile(_STMT + rf"{_WS}(?:(?P<g>{_IRI}|{_BN}))?" + _TAIL)
_BLANK_PY = re.compile(r"^[ \t]*(?:#[^\r\n]*)?[\r\n]*$")

# Fast path (RE2 via pyarrow): terms without escapes, single spaces, " ." at the end.
_F_IRI = r'<[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20<>"{}|^`\\]*>'
_F_BN = r"_:[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_\-])?"
_F_LIT = r'"[^"\\\n\r]*"(?:@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*|\^\^' + _F_IRI + ")?"
_F_SUBJ = rf"^(?:{_F_IRI}|{_F_BN})$"
_F_PRED = rf"^{_F_IRI}$"
_F_OBJ = rf"^(?:{_F_IRI}|{_F_BN}|{_F_LIT})$"
_F_NEEDS_CANON = r'\^\^<http://www\.w3\.org/2001/XMLSchema#string>$|"@[^"]*[A-Z][^"]*$'


def _iter_chunks(stream, chunk_bytes: int | None = None) -> Iterator[bytes]:
    """Yield blocks of whole lines (the last one may lack its newline)."""
    size = chunk_bytes or _CHUNK_BYTES
    rest = b""
    while True:
        block = stream.read(size)
        if not block:
            break
        buf = rest + block if rest else block
        cut = buf.rfind(b"\n")
        if cut < 0:
            rest = buf
            continue
        chunk, rest = buf[: cut + 1], buf[cut + 1 :]
        yield chunk
    if rest:
        yield rest


def _lines_array(chunk: bytes) -> pa.LargeStringArray:
    data = np.frombuffer(chunk, dtype=np.uint8)
    nl = np.flatnonzero(data == 10)
    n = len(nl) + (0 if len(chunk) == 0 or chunk[-1:] == b"\n" else 1)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1 : len(nl) + 1] = nl + 1
    offsets[-1] = len(chunk)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chunk))


def _np(a) -> np.ndarray:
    return a.to_numpy(zero_copy_only=False)


def _slow_line(text: str, quads: bool, prefix: str):
    """Parse one line with the full grammar -> None (blank), tuple of keys, or error str."""
    m = (_NQ_PY if quads else _NT_PY).match(text)
    if m is None:
        if _BLANK_PY.match(text):
            return None
        return f"syntax error in statement: {text.rstrip(chr(13) + chr(10))[:120]!r}"
    out = []
    for name in ("s", "p", "o", "g") if quads else ("s", "p", "o"):
        t = m.group(name)
        if t is None:
            out.append(None)
            continue
        try:
            k = canonical_key(t)
            k.encode("utf-8")
        except (ValueError, UnicodeError) as e:
            return f"bad term {t[:80]}: {e}"
        if prefix and k.startswith("_:"):
            k = "_:" + prefix + k[2:]
        out.append(k)
    if not quads:
        out.append(None)
    return tuple(out)


def _parse_nt_chunk(chunk: bytes, quads: bool, bnode_prefix: str):
    """-> (s, p, o, g, bad, n_lines); bad maps row (0-based line in chunk) -> message."""
    bad: dict[int, str] = {}
    lines = _lines_array(chunk)
    try:
        lines.validate(full=True)
    except pa.ArrowInvalid:
        pieces = chunk.split(b"\n")
        for r, raw in enumerate(pieces):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                bad[r] = "invalid UTF-8"
                pieces[r] = b""
        lines = _lines_array(b"\n".join(pieces))
    n = len(lines)
    t = pa.large_string()
    # ---- fast path
    # two trailing spaces guarantee three parts on every line
    parts = pc.split_pattern(pc.binary_join_element_wise(lines, pa.scalar("  ", t), pa.scalar("", t)), " ", max_splits=2)
    ok = np.ones(n, dtype=bool)
    s = pc.list_element(parts, 0)
    p = pc.list_element(parts, 1)
    r = pc.utf8_rtrim(pc.list_element(parts, 2), characters=" \t\r\n")
    ok &= _np(pc.fill_null(pc.ends_with(r, "."), False))
    o = pc.utf8_rtrim(pc.utf8_slice_codeunits(r, 0, -1), characters=" \t")
    g = None
    if quads:
        # a leading space guarantees two parts; a real quad has "<o> <g>"
        og = pc.split_pattern(pc.binary_join_element_wise(pa.scalar(" ", t), o.cast(t), pa.scalar("", t)), " ", max_splits=1, reverse=True)
        g_c = pc.list_element(og, 1)
        o_c = pc.utf8_ltrim(pc.list_element(og, 0), characters=" ")
        two = _np(pc.fill_null(pc.greater(pc.utf8_length(o_c), 0), False))
        is_q = two & _np(pc.fill_null(pc.match_substring_regex(g_c, _F_SUBJ), False))
        is_q &= _np(pc.fill_null(pc.match_substring_regex(o_c, _F_OBJ), False))
        qm = pa.array(is_q)
        o = pc.if_else(qm, o_c, o)
        g = pc.if_else(qm, g_c, pa.scalar(None, t))
    # validate / canonicalize each distinct term once (terms repeat a lot)
    s, vs = _dict_column(s, _F_SUBJ, None, bnode_prefix)
    p, vp = _dict_column(p, _F_PRED, None, "")
    o, vo = _dict_column(o, _F_OBJ, _F_NEEDS_CANON, bnode_prefix)
    ok &= vs & vp & vo
    for r_ in bad:
        if r_ < n:
            ok[r_] = False
    if g is not None:
        g = g.cast(t)
    if not ok.all():
        km = pa.array(ok)
        s, p, o = s.filter(km), p.filter(km), o.filter(km)
        if g is not None:
            g = g.filter(km)
    g = pa.nulls(len(s), t) if g is None else g
    if bnode_prefix and g.null_count < len(g):
        g = _relabel_bnodes(g, bnode_prefix)
    # ---- slow path: the other lines, one by one
    rest = [int(x) for x in np.flatnonzero(~ok) if int(x) not in bad]
    if rest:
        texts = lines.take(pa.array(rest, pa.int64())).to_pylist()
        cols: list[list] = [[], [], [], []]
        for r_, text in zip(rest, texts, strict=True):
            res = _slow_line(text, quads, bnode_prefix)
            if res is None:
                continue
            if isinstance(res, str):
                bad[r_] = res
                continue
            for c, v in zip(cols, res, strict=True):
                c.append(v)
        if cols[0]:
            s = pa.concat_arrays([_plain(s), pa.array(cols[0], t)])
            p = pa.concat_arrays([_plain(p), pa.array(cols[1], t)])
            o = pa.concat_arrays([_plain(o), pa.array(cols[2], t)])
            g = pa.concat_arrays([g, pa.array(cols[3], t)])
    return s, p, o, g, bad, n


def _plain(col: pa.Array) -> pa.Array:
    """A large_string array (dictionary arrays decoded)."""
    if isinstance(col, pa.DictionaryArray):
        col = col.dictionary.take(col.indices)
    return col.cast(pa.large_string())


def _dict_column(col: pa.Array, valid_re: str, canon_re: str | None, prefix: str):
    """Dictionary-encode a term column, validate / canonicalize / relabel its
    distinct values; -> (DictionaryArray, per-row validity mask)."""
    t = pa.large_string()
    enc = pc.dictionary_encode(col.cast(t))
    values = enc.dictionary
    idx = enc.indices
    valid_u = _np(pc.fill_null(pc.match_substring_regex(values, valid_re), False))
    changed = False
    if canon_re is not None:
        canon = _np(pc.match_substring_regex(values, canon_re)) & valid_u
        if canon.any():
            rows = np.flatnonzero(canon)
            fixed = [canonical_key(v) for v in values.take(pa.array(rows)).to_pylist()]
            values = pc.replace_with_mask(values, pa.array(canon), pa.array(fixed, t))
            changed = True
    if prefix:
        relabeled = _relabel_bnodes(values, prefix)
        changed = changed or relabeled is not values
        values = relabeled
    if changed:
        enc = pa.DictionaryArray.from_arrays(idx, values)
    idx_np = _np(idx)
    return enc, valid_u[idx_np] if len(idx_np) else np.zeros(0, dtype=bool)


def _relabel_bnodes(col: pa.Array, prefix: str) -> pa.Array:
    if not pc.any(pc.starts_with(col, "_:")).as_py():
        return col
    return pc.replace_substring_regex(col, "^_:", "_:" + prefix)


# ------------------------------------------------------------------ fetching and XML entities
#: the CLI option that allows parsers to fetch remote documents (named in errors)
ALLOW_FETCH_OPTION = "--allow-load"
#: fetching a remote JSON-LD context (only when allowed): timeout (s) and largest body (bytes)
FETCH_TIMEOUT = 10.0
FETCH_MAX_BYTES = 1 << 20
#: internal XML entities may expand the input to at most max(this factor x its size, _MIN) bytes
ENTITY_EXPANSION_FACTOR = 4
ENTITY_EXPANSION_MIN = 1 << 20
#: encodings whose '&' is the byte 0x26 (so counting that byte bounds the entity references)
_XML_ENTITY_ENCODINGS = frozenset({"utf-8", "utf8", "utf-16", "utf-16le", "utf-16be", "iso-8859-1", "latin-1",
                                   "latin1", "us-ascii", "ascii"})

_fetch_state = threading.local()  # .deny: list of refused targets while an untrusted parse runs
_NET_EVENTS = frozenset({"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
                         "socket.sendto", "urllib.Request"})
_hook_installed = False


class _FetchRefused(Exception):
    def __init__(self, target: str):
        super().__init__(target)
        self.target = target


class _ContextFailed(Exception):
    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


def _audit(event: str, args) -> None:
    # The net under the parsers: whatever path a parser takes to the network
    # (a context, an entity, a future feature), it fails in the parsing thread
    # while fetching is not allowed. Cheap when no parse is running.
    if event in _NET_EVENTS:
        deny = getattr(_fetch_state, "deny", None)
        if deny is not None:
            target = str(args[1] if event == "socket.connect" and len(args) > 1 else args[0])
            deny.append(target)
            raise _FetchRefused(target)


def _install_audit_hook() -> None:
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)
        _hook_installed = True


def _refused_error(what: str, source: str) -> LoadError:
    return LoadError(f"{what} is not loaded: this server fetches no remote documents unless it is started "
                     f"with {ALLOW_FETCH_OPTION}", source=source)


def _fetch_json(url: str):
    """GET a remote JSON-LD context (http, https or file) with a timeout and a size cap."""
    import json
    import urllib.request
    from urllib.parse import urlsplit

    if urlsplit(url).scheme not in ("http", "https", "file"):
        raise ValueError("unsupported scheme")
    req = urllib.request.Request(url, headers={"Accept": "application/ld+json, application/json;q=0.9"})
    with urllib.request.urlopen(req, timeout=FETCH_TIMEOUT) as r:  # noqa: S310 - scheme checked above
        body = r.read(FETCH_MAX_BYTES + 1)
    if len(body) > FETCH_MAX_BYTES:
        raise ValueError("too large")
    return json.loads(body), None


class _PrologDone(Exception):
    pass


def check_xml_prolog(data: bytes, source: str = "<data>") -> None:
    """Refuse, before any parser expands anything, the DTD features that make
    XML fetch or blow up: external DTDs and entities, parameter and unparsed
    entities, entities that reference entities (the "billion laughs"),
    attribute defaults, and internal entities whose references could expand
    the document beyond ``ENTITY_EXPANSION_FACTOR`` x its size (the quadratic
    blow-up). Plain internal entities (``<!ENTITY xsd "http://...#">``, common
    in OWL files) stay allowed. Reads only up to the first element."""
    from xml.parsers import expat

    p = expat.ParserCreate()
    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    entities: dict[str, int] = {}
    encoding: list[str | None] = [None]
    problem: list[str] = []

    def refuse(msg: str):
        problem.append(msg)
        raise _PrologDone

    def xml_decl(version, enc, standalone):
        encoding[0] = enc

    def doctype(name, sysid, pubid, has_internal):
        if sysid or pubid:
            refuse(f"the external DTD {sysid or pubid!r} is not loaded (DTDs must be internal)")

    def entity(name, is_pe, value, base, sysid, pubid, notation):
        if is_pe:
            refuse(f"DTD parameter entity %{name}; is not supported")
        if value is None:
            refuse(f"external entity &{name}; ({sysid or pubid!r}) is not loaded")
        if "&" in value or "%" in value:
            refuse(f"entity &{name}; references other entities (nested entities are not supported)")
        entities[name] = len(value.encode("utf-8"))

    def unparsed(name, base, sysid, pubid, notation):
        refuse(f"unparsed entity {name} is not supported")

    def attlist(elname, attname, type_, default, required):
        if default is not None:
            refuse(f"DTD attribute default for {elname}/{attname} is not supported")

    def start(name, attrs):
        raise _PrologDone

    p.XmlDeclHandler = xml_decl
    p.StartDoctypeDeclHandler = doctype
    p.EntityDeclHandler = entity
    p.UnparsedEntityDeclHandler = unparsed
    p.AttlistDeclHandler = attlist
    p.StartElementHandler = start
    try:
        p.Parse(data, True)
    except _PrologDone:
        pass
    except expat.ExpatError as e:
        raise LoadError(f"syntax error: {expat.ErrorString(e.code)}", source=source, line=e.lineno) from None
    if problem:
        raise LoadError(f"XML DTD refused: {problem[0]}", source=source)
    if entities:
        if encoding[0] is not None and encoding[0].lower() not in _XML_ENTITY_ENCODINGS:
            raise LoadError(f"XML DTD refused: entities are supported only in UTF-8, UTF-16, ISO-8859-1 or "
                            f"US-ASCII documents, not {encoding[0]}", source=source)
        worst = data.count(b"&") * max(entities.values())
        limit = max(ENTITY_EXPANSION_MIN, ENTITY_EXPANSION_FACTOR * len(data))
        if worst > limit:
            raise LoadError(f"XML DTD refused: entity references could expand the document to {worst} bytes "
                            f"(limit {limit})", source=source)


# ------------------------------------------------------------------ rdflib formats
_rdflib_lock = threading.Lock()
#: a Turtle number of 4000+ characters (Python's int() refuses more than 4300 digits)
_TTL_LONG_NUMBER = re.compile(r"[+-]?[0-9]{4000,}(?![0-9eE]|\.[0-9eE])")


def _parse_rdflib(data: bytes, fmt: formats.Format, base: str | None, source: str, bnode_prefix: str,
                  allow_fetch: bool = False):
    """Parse with rdflib. Without ``allow_fetch`` nothing is fetched: a remote
    JSON-LD context (a string, in an array, nested, ``@import``) is a
    LoadError naming the option, and any other network access in this thread
    fails (audit hook). With it, contexts are fetched with a timeout and a size
    cap and a failure says only "could not load context <url>"."""
    import rdflib
    from rdflib.plugins.shared.jsonld import context as jsonld_context
    from rdflib.term import BNode, Literal, URIRef

    default_id = "urn:x-rdflib:default"
    try:
        from rdflib.graph import DATASET_DEFAULT_GRAPH_ID

        default_id = str(DATASET_DEFAULT_GRAPH_ID)
    except ImportError:  # pragma: no cover
        pass

    cache: dict = {}

    def key(t) -> str:
        k = cache.get(t)
        if k is not None:
            return k
        if isinstance(t, URIRef):
            k = iri_key(str(t))
        elif isinstance(t, BNode):
            k = "_:" + bnode_prefix + str(t)
        elif isinstance(t, Literal):
            dt = str(t.datatype) if t.datatype is not None else None
            if dt == XSD_STRING:
                dt = None
            k = literal_key(str(t), dt, t.language)
        else:
            raise LoadError(f"unsupported term {t!r}", source=source)
        cache[t] = k
        return k

    from rdflib.plugins.parsers import notation3

    orig = notation3.SinkParser.nodeOrLiteral

    def node_or_literal(self, argstr, i, res):
        # rdflib turns Turtle numbers into Python values (01 -> "1"); keep the lexical form
        start = self.skipSpace(argstr, i)
        if start >= 0:
            m = _TTL_LONG_NUMBER.match(argstr, start)
            if m is not None:  # too long for int(): take the lexical form as it is
                res.append(Literal(m.group(0), datatype=URIRef(XSD_INTEGER)))
                return m.end()
        n0 = len(res)
        j = orig(self, argstr, i, res)
        if j >= 0 and len(res) == n0 + 1 and type(res[-1]) in (int, Decimal):
            text = argstr[self.skipSpace(argstr, i) : j]
            dt = XSD_INTEGER if type(res[-1]) is int else XSD_DECIMAL
            res[-1] = Literal(text, datatype=URIRef(dt))
        return j

    def fetch_context(url, fragment_id=None, extract_all_scripts=False):
        if not allow_fetch:
            raise _FetchRefused(str(url))
        try:
            return _fetch_json(str(url))
        except Exception:  # noqa: BLE001 - the cause is not the client's business (no port scanner)
            raise _ContextFailed(str(url)) from None

    # guards of rdflib's parsers, so they hold for every format read with them
    if fmt.rdflib == "xml":
        check_xml_prolog(data, source)
    elif fmt.rdflib == "json-ld" and data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
        # rdflib would take a top-level JSON string for a document to fetch
        raise LoadError("a JSON-LD document must be a JSON object or array", source=source)
    _install_audit_hook()
    with _rdflib_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = rdflib.NORMALIZE_LITERALS
        old_fetch = jsonld_context.source_to_json
        rdflib.NORMALIZE_LITERALS = False
        notation3.SinkParser.nodeOrLiteral = node_or_literal
        jsonld_context.source_to_json = fetch_context
        # rdflib logs a traceback for each literal it cannot turn into a Python value
        # (e.g. an integer over 4300 digits); we keep lexical forms, so that is noise
        term_log = logging.getLogger("rdflib.term")
        term_log_disabled = term_log.disabled
        term_log.disabled = True
        refused: list[str] = []
        if not allow_fetch:
            _fetch_state.deny = refused
        try:
            ds = rdflib.Dataset()
            kwargs = {"format": fmt.rdflib}
            if base:
                kwargs["publicID"] = base
            ds.parse(source=io.BytesIO(data), **kwargs)
            quads = list(ds.quads((None, None, None, None)))
        except LoadError:
            raise
        except _FetchRefused as e:
            raise _refused_error(f"the remote JSON-LD context <{e.target}>", source) from None
        except _ContextFailed as e:
            raise LoadError(f"could not load context <{e.url}>", source=source) from None
        except RecursionError:
            raise LoadError("the document is nested too deeply", source=source) from None
        except Exception as e:  # rdflib raises many kinds
            if refused:  # a parser tried the network and wrapped the refusal
                raise _refused_error(f"the remote document {refused[0]!r}", source) from None
            cause = e.__context__ or e.__cause__
            if isinstance(cause, _FetchRefused):
                raise _refused_error(f"the remote JSON-LD context <{cause.target}>", source) from None
            if isinstance(cause, _ContextFailed):
                raise LoadError(f"could not load context <{cause.url}>", source=source) from None
            raise LoadError(f"syntax error: {_rdflib_message(e)}", source=source, line=_rdflib_line(e)) from e
        finally:
            term_log.disabled = term_log_disabled
            _fetch_state.deny = None
            rdflib.NORMALIZE_LITERALS = old
            notation3.SinkParser.nodeOrLiteral = orig
            jsonld_context.source_to_json = old_fetch
        if refused:  # refused, and the parser swallowed the error
            raise _refused_error(f"the remote document {refused[0]!r}", source)
    ss, ps, os_, gs = [], [], [], []
    for s, p, o, c in quads:
        ss.append(key(s))
        ps.append(key(p))
        os_.append(key(o))
        cid = c.identifier if hasattr(c, "identifier") else c
        gs.append(None if cid is None or str(cid) == default_id else key(cid))
    t = pa.large_string()
    try:
        return pa.array(ss, t), pa.array(ps, t), pa.array(os_, t), pa.array(gs, t)
    except UnicodeEncodeError:  # e.g. "\uD800" in Turtle: rdflib keeps the lone surrogate
        raise LoadError("a term holds a surrogate code point (U+D800..U+DFFF), which is not a "
                        "Unicode scalar value", source=source) from None


def _rdflib_line(e: Exception) -> int | None:
    lines = getattr(e, "lines", None)
    if isinstance(lines, int):
        return lines + 1
    get = getattr(e, "getLineNumber", None)
    if callable(get):
        try:
            return int(get())
        except Exception:  # noqa: BLE001
            return None
    ln = getattr(e, "lineno", None)
    return ln if isinstance(ln, int) else None


def _rdflib_message(e: Exception) -> str:
    why = getattr(e, "_why", None)
    if why:
        return str(why)
    get = getattr(e, "getMessage", None)
    if callable(get):
        try:
            return str(get())
        except Exception:  # noqa: BLE001
            pass
    return str(e) or type(e).__name__


# ------------------------------------------------------------------ pyoxigraph formats
#: pyoxigraph's name of each format it parses for us (Turtle also reads ``.n3`` files, as Turtle)
_OX_FORMATS = {"ttl": "TURTLE", "trig": "TRIG", "xml": "RDF_XML", "jsonld": "JSON_LD"}
_OX_WHERE = re.compile(r"^Parser error at line \d+ (?:between columns \d+ and \d+|column \d+): ")
#: what pyoxigraph's JSON-LD parser says of a remote context (it fetches nothing itself)
_OX_REMOTE = "LoadDocumentCallback"


def _nquads_format() -> formats.Format:
    return formats.by_name("nq")


#: N-Quads written by pyoxigraph beyond this stay in a temporary file, read back a chunk at a time
_SPOOL_BYTES = 64 << 20


def _ox_parse_to_nquads(source, fmt: formats.Format, base: str | None, display: str, out) -> None:
    """Write the document ``source`` (bytes or a binary stream) as N-Quads into ``out``,
    parsed and written by pyoxigraph (Rust, no Python per statement).

    Lexical forms, datatypes and blank node labels are kept as written (language tags
    lower-cased, as :func:`engine.terms.canonical_key` does); relative IRIs are resolved
    against ``base`` (none: a relative IRI is an error). Raises LoadError with the
    line and column of a syntax error."""
    import pyoxigraph as ox

    oxf = getattr(ox.RdfFormat, _OX_FORMATS[fmt.name])
    try:
        ox.serialize(ox.parse(source, oxf, base_iri=base or None), out, format=ox.RdfFormat.N_QUADS)
    except SyntaxError as e:
        msg = _OX_WHERE.sub("", str(e.msg or e))
        raise LoadError(f"syntax error: {msg}", source=display, line=e.lineno,
                        column=e.offset if e.lineno is not None else None) from None
    except ValueError as e:  # a bad base IRI
        raise LoadError(f"cannot parse: {e}", source=display) from None
    except RecursionError:
        raise LoadError("the document is nested too deeply", source=display) from None
    except (OSError, EOFError, zlib.error) as e:
        raise LoadError(f"cannot read input: {e}", source=display) from None


def _rdf12_error(err: LoadError, source: str) -> LoadError:
    """An N-Quads line pyoxigraph wrote that our store cannot hold: RDF 1.2 terms."""
    return LoadError("the document uses RDF 1.2 triple terms or directional language tags, which this store "
                     f"does not hold ({err.message})", source=source)


def parse_with_oxigraph(stream, fmt: formats.Format, *, display: str, base: str | None, lenient: bool,
                        bnode_prefix: str, allow_fetch: bool, bar) -> Iterator[ParsedKeys]:
    """Turtle, TriG, RDF/XML, JSON-LD: pyoxigraph parses the whole document (atomic:
    ``lenient`` does not apply) and writes it as N-Quads, which the vectorized
    N-Quads path turns into key columns a chunk at a time. Turtle and TriG are read
    from the stream as they come, and N-Quads past ``_SPOOL_BYTES`` wait in a
    temporary file, so a large file never sits in memory whole, twice.

    rdflib stays for one case pyoxigraph cannot do: a JSON-LD document naming a remote
    context (pyoxigraph fetches nothing). With ``allow_fetch`` rdflib fetches it under
    the guards of :func:`_parse_rdflib`; without, it refuses naming the context."""
    import tempfile

    source = stream
    if fmt.name in ("xml", "jsonld"):  # their guards read the document first
        try:
            source = stream.read()
        except (OSError, EOFError, zlib.error) as e:
            raise LoadError(f"cannot read input: {e}", source=display) from e
        if fmt.name == "xml":
            check_xml_prolog(source, display)  # pyoxigraph expands internal entities: bound them first
        elif source.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
            raise LoadError("a JSON-LD document must be a JSON object or array", source=display)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as nq:
        try:
            _ox_parse_to_nquads(source, fmt, base, display, nq)
        except LoadError as e:
            if fmt.name == "jsonld" and _OX_REMOTE in e.message:
                s, p, o, g = _parse_rdflib(source, fmt, base, display, bnode_prefix, allow_fetch)
                if bar is not None:
                    bar.update(len(source))
                yield ParsedKeys(s, p, o, g)
                return
            raise
        del source
        if bar is not None:
            bar.update(bar.total or 0)
        nq.seek(0)
        blocks = parse_lines(nq, _nquads_format(), display=display, base=None, lenient=False,
                             bnode_prefix=bnode_prefix, allow_fetch=False, bar=None)
        while True:
            try:
                block = next(blocks)
            except StopIteration:
                return
            except LoadError as e:
                raise _rdf12_error(e, display) from None
            yield block


# ------------------------------------------------------------------ parse_to_keys
def _open_source(source) -> tuple[io.BufferedIOBase, str, int | None]:
    """(binary stream, display name, size or None) of a path / bytes / str."""
    if isinstance(source, bytes | bytearray | memoryview):
        b = bytes(source)
        if b[:2] == b"\x1f\x8b":
            try:
                b = gzip.decompress(b)
            except (OSError, EOFError, zlib.error) as e:
                raise LoadError(f"corrupt gzip data: {e}", source="<data>") from e
        b = strip_bom(b)   # (every format is text: a leading byte order mark is no part of it, engine.bom)
        return io.BytesIO(b), "<data>", len(b)
    path = os.fspath(source)
    name = os.path.basename(path)
    try:
        if path.lower().endswith(formats.GZIP_SUFFIX):
            return _past_bom(gzip.open(path, "rb")), name, None
        return _past_bom(open(path, "rb")), name, os.path.getsize(path)
    except OSError as e:
        raise LoadError(f"cannot read file: {e.strerror or e}", source=name) from e


def _past_bom(f):
    """``f`` moved past a leading UTF-8 byte order mark (a file saved by a Windows editor); a
    stream that cannot be peeked at is left as it is (its read says what is wrong)."""
    try:
        if f.peek(3)[:3] == BOM:
            f.read(3)
    except (OSError, EOFError, zlib.error):
        pass
    return f


def _safe_chunks(stream, display: str) -> Iterator[bytes]:
    it = _iter_chunks(stream)
    while True:
        try:
            chunk = next(it)
        except StopIteration:
            return
        except (OSError, EOFError, zlib.error) as e:
            raise LoadError(f"cannot read input: {e}", source=display) from e
        yield chunk


def iter_parse(source, format: str, *, base: str | None = None, lenient: bool = False,
               bnode_prefix: str = "", name: str | None = None,
               progress: bool = False, allow_fetch: bool | None = None) -> Iterator[ParsedKeys]:
    """Parse ``source`` (a path, or bytes of data) into ParsedKeys blocks.

    Raises :class:`LoadError` on the first bad statement unless ``lenient``.
    ``allow_fetch``: may a parser fetch remote documents (JSON-LD contexts)?
    None = only for a path (the operator's own file), never for bytes (a
    client's payload; the server passes its ``--allow-load`` setting).
    """
    fmt = normalize_format(format)
    if allow_fetch is None:
        allow_fetch = not isinstance(source, bytes | bytearray | memoryview)
    stream, display, size = _open_source(source)
    display = name or display
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"loading {display}", file=sys.stderr)
    try:
        yield from fmt.parse(stream, fmt, display=display, base=base, lenient=lenient, bnode_prefix=bnode_prefix,
                             allow_fetch=allow_fetch, bar=bar)
    finally:
        stream.close()
        if bar is not None:
            bar.close()


# The parsers of the format registry (engine/formats.py), one signature for all.
def parse_lines(stream, fmt: formats.Format, *, display: str, base: str | None, lenient: bool,
                bnode_prefix: str, allow_fetch: bool, bar) -> Iterator[ParsedKeys]:
    """N-Triples / N-Quads (``fmt.quads``), vectorized, a chunk of lines at a time."""
    quads = fmt.quads
    n_err = 0
    first = 1
    for chunk in _safe_chunks(stream, display):
        if first == 1 and chunk.startswith(b"\xef\xbb\xbf"):
            chunk = chunk[3:]  # UTF-8 byte order mark
        s, p, o, g, bad, n_lines = _parse_nt_chunk(chunk, quads, bnode_prefix)
        errors = []
        if bad:
            rows = sorted(bad)
            if not lenient:
                r = rows[0]
                raise LoadError(bad[r], source=display, line=first + r)
            for r in rows:
                if n_err < MAX_ERRORS:
                    errors.append((first + r, bad[r]))
                n_err += 1
        if bar is not None:
            bar.update(len(chunk))
        first += n_lines
        yield ParsedKeys(s, p, o, g, skipped=len(bad), errors=errors)


def parse_with_rdflib(stream, fmt: formats.Format, *, display: str, base: str | None, lenient: bool,
                      bnode_prefix: str, allow_fetch: bool, bar) -> Iterator[ParsedKeys]:
    """A whole document through rdflib's ``fmt.rdflib`` parser (atomic: ``lenient`` does not apply)."""
    try:
        data = stream.read()
    except (OSError, EOFError, zlib.error) as e:
        raise LoadError(f"cannot read input: {e}", source=display) from e
    s, p, o, g = _parse_rdflib(data, fmt, base, display, bnode_prefix, allow_fetch)
    if bar is not None:
        bar.update(len(data))
    yield ParsedKeys(s, p, o, g)


def parse_to_keys(source, format: str, *, base: str | None = None, lenient: bool = False,
                  bnode_prefix: str = "", name: str | None = None, allow_fetch: bool | None = None) -> ParsedKeys:
    """Parse a whole input into key columns (s, p, o, g: pyarrow large_string,
    g null for the default graph). ``source`` is a path (str / PathLike) or the
    data itself as bytes; ``allow_fetch`` as in :func:`iter_parse`."""
    blocks = list(iter_parse(source, format, base=base, lenient=lenient, bnode_prefix=bnode_prefix, name=name,
                             allow_fetch=allow_fetch))
    t = pa.large_string()
    if not blocks:
        e = pa.array([], t)
        return ParsedKeys(e, e, e, e)
    cat = (lambda xs: pa.concat_arrays([_plain(x) for x in xs]))  # noqa: E731
    return ParsedKeys(
        cat([b.s for b in blocks]),
        cat([b.p for b in blocks]),
        cat([b.o for b in blocks]),
        cat([b.g for b in blocks]),
        skipped=sum(b.skipped for b in blocks),
        errors=[e for b in blocks for e in b.errors][:MAX_ERRORS],
    )
