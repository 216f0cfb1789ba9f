"""Result serializers (the writers of the format registry, engine/formats.py).

Every serializer takes a columnar :class:`QueryResult` and returns bytes. Term
ids are decoded once per *distinct* id of a column; each distinct term is
rendered once into a text fragment. SELECT answers (JSON, XML, CSV, TSV) are
rendered and assembled by :mod:`engine.exec.render` (Arrow kernels, no Python
per row; :func:`serialize_lazy` returns them unbuilt for streaming), except answers of
at most :data:`SMALL_CELLS` cells, written term by term (cheaper below that); graph
rows are assembled by gathering fragments with numpy object arrays.

Formats
-------
SELECT / ASK: SPARQL JSON, SPARQL XML, CSV, TSV (SPARQL 1.1 Query Results
CSV and TSV Formats). CONSTRUCT / DESCRIBE and Graph Store reads: N-Triples
and N-Quads written straight from term keys; Turtle (with prefixes), TriG,
JSON-LD and RDF/XML written from the id columns by
:mod:`engine.exec.graph_writers` (no Python per triple). Which media type names which writer, and content
negotiation, live in :mod:`engine.formats`.

Size bound: with ``max_bytes``, the size of the answer is computed from the
rendered length of each distinct term times its row count *before* any row is
assembled, and an answer over the bound raises :class:`ResponseTooLarge`;
rows are assembled a chunk at a time, so building the body needs about twice
its size (the graph writers likewise). A variable name is rendered once, not once per distinct term.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from contextvars import ContextVar

import numpy as np
import orjson

from engine import formats
from engine.errors import QueryTimeout, ResponseTooLarge
from engine.exec import graph_writers, render
from engine.exec.context import MemoryBudget, query_deadline
from engine.exec.result import UNBOUND, QueryResult
from engine.terms import XSD_STRING, unescape_string

# --------------------------------------------------------------------------
# Term parsing helpers (keys -> parts)
# --------------------------------------------------------------------------


def _literal_parts(key: str) -> tuple[str, str | None, str | None]:
    """(lexical, datatype or None, lang or None) of a literal key; plain
    literals give datatype None."""
    end = key.rfind('"')
    body = key[1:end]
    if "\\" in body:
        body = unescape_string(body)
    suffix = key[end + 1 :]
    if not suffix:
        return body, None, None
    if suffix[0] == "@":
        return body, None, suffix[1:]
    return body, suffix[3:-1], None


_BNODE_OK = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_-])?\Z")


def _bnode_label(label: str) -> str:
    if _BNODE_OK.match(label):
        return label
    return "x" + label.encode("utf-8").hex()


# --------------------------------------------------------------------------
# Column decoding
# --------------------------------------------------------------------------


def _row_count(result: QueryResult) -> int:
    return len(result)


def _flat_keys(result: QueryResult) -> list:
    """Every cell's key (None: unbound) in one decode call, column-major (cell (row i,
    column j) at ``j * n + i``)."""
    return result.terms.keys(np.concatenate([np.asarray(c, dtype=np.int64) for c in result.columns]))


#: variable names longer than this are not copied into every distinct term's fragment
_LONG_NAME = 256

#: SELECT answers of at most this many cells are written term by term in plain Python
#: (one decode call for all cells, each term by the memoized per-term writer): the
#: vectorized row assembly's fixed cost (~250-350 µs: per column distinct ids, Arrow
#: key arrays, the row template) is most of a small answer's time, e.g. an aggregate's
#: one row or an answer holding computed terms, which the lane's kept fragments
#: (engine/small_answers.py) do not cover
SMALL_CELLS = 256
#: ... and SELECT answers in SPARQL JSON of at most this many cells with an unbound one
#: (OPTIONAL): the row assembly's unbound cells take its distinct path (per column distinct
#: ids, a fragment table per variant, the first bound column per row), 0.4-0.8 ms at any
#: size, while the term-by-term writer costs 0.3 µs a cell (memoized fragments, 0.9 µs on
#: a term's first sighting): an OPTIONAL's 129 rows were 0.6 ms against 0.17
SMALL_CELLS_UNBOUND = 768


def _any_unbound(columns) -> bool:
    return any(bool((np.asarray(c) == UNBOUND).any()) for c in columns)


#: (max_bytes, memory budget of the query or None) of the serialization running in this context
_BOUND: ContextVar[tuple[int, MemoryBudget | None] | None] = ContextVar("jindou_response_bound", default=None)


def _bounded(result: QueryResult, max_bytes: int | None):
    """Enter the bounds of serializing ``result``: ``max_bytes`` and, when the
    result carries its query's memory budget, that budget (the body and its
    pieces, about twice the body, are charged to it)."""
    return _BOUND.set((max_bytes or 0, getattr(result.terms, "memory", None)))


#: the deadline (time.monotonic()) of the serialization running in this context, if given
_DEADLINE: ContextVar[float | None] = ContextVar("jindou_serialize_deadline", default=None)


def _tick():
    """A deadline check between chunks of rows (None when neither the serialization nor the
    running query has a deadline): a big answer stops at its deadline instead of running past it."""
    dl = _DEADLINE.get()
    if dl is None:
        dl = query_deadline()
    if dl is None:
        return None
    return deadline_check(dl)


def deadline_check(dl: float):
    """A function raising QueryTimeout once ``time.monotonic()`` passes ``dl``."""

    def tick() -> None:
        if time.monotonic() > dl:
            raise QueryTimeout("the query ran past its timeout while its answer was written")

    return tick


def check_size(size: int, max_bytes: int | None, what: str = "the response") -> None:
    """Raise ResponseTooLarge when ``size`` passes ``max_bytes`` (None/0: no bound),
    MemoryBudgetExceeded when building it would pass the query's memory budget."""
    if max_bytes and size > max_bytes:
        raise ResponseTooLarge(
            f"{what} would be about {size / (1 << 20):.1f} MiB, over the response bound of "
            f"{max_bytes / (1 << 20):.1f} MiB (--max-response-bytes); add a LIMIT or select fewer "
            "or shorter values")
    b = _BOUND.get()
    if b is not None and b[1] is not None:
        b[1].check(2 * size, "the response being built")


def check_memory(nbytes: int, what: str = "the response being built") -> None:
    """MemoryBudgetExceeded when holding ``nbytes`` would pass the query's memory budget
    (the response bound is not involved: key bytes are not response bytes)."""
    b = _BOUND.get()
    if b is not None and b[1] is not None:
        b[1].check(nbytes, what)


# --------------------------------------------------------------------------
# SPARQL JSON
# --------------------------------------------------------------------------


def _json_term(key: str) -> dict:
    c = key[0]
    if c == "<":
        return {"type": "uri", "value": key[1:-1]}
    if c == "_":
        return {"type": "bnode", "value": key[2:]}
    lex, dt, lang = _literal_parts(key)
    if lang is not None:
        return {"type": "literal", "value": lex, "xml:lang": lang}
    if dt is not None and dt != XSD_STRING:
        return {"type": "literal", "value": lex, "datatype": dt}
    return {"type": "literal", "value": lex}


def sparql_json(result: QueryResult, extra: bytes = b"", max_bytes: int | None = None) -> bytes:
    """SPARQL JSON results; ``extra``: more top-level members, e.g. ``b',"window":{...}'``
    (written in place: a result of megabytes is not copied again to add them)."""
    token = _bounded(result, max_bytes)
    try:
        return _serialize_json(result, extra, max_bytes)
    finally:
        _BOUND.reset(token)


#: terms whose rendered fragment is remembered (per format), and the longest key remembered:
#: at most ~8k x 1.5 KiB per format
_MEMO_TERMS = 8192
_MEMO_KEY_CHARS = 512


def _memo(render_term):
    """``render_term`` with its answers for short keys remembered (LRU, bounded).

    Why: the terms of a small distinct set (ages, research interests, departments) recur
    in answer after answer, and the exact writer costs 2-4 us a term against ~0.1 us a
    lookup; the fragment of a key never changes."""
    cached = functools.lru_cache(maxsize=_MEMO_TERMS)(render_term)

    def rendered(key: str) -> bytes:
        return cached(key) if len(key) <= _MEMO_KEY_CHARS else render_term(key)

    rendered.cache_clear = cached.cache_clear
    return rendered


@_memo
def _json_bytes(key: str) -> bytes:
    # (b"%b" %: a copy of its own size -- orjson's bytes sit in 4 KiB allocations, and
    # the memo keeps thousands of them)
    return b"%b" % orjson.dumps(_json_term(key))


def _serialize_json(result: QueryResult, extra: bytes = b"", max_bytes: int | None = None,
                    lazy: bool = False) -> bytes | render.Rendered:
    if result.form == "ASK":
        return orjson.dumps({"head": {}, "boolean": bool(result.boolean)})[:-1] + extra + b"}"
    head = orjson.dumps({"vars": list(result.vars)})
    n = _row_count(result)
    size = len(head) + len(extra) + 32
    check_size(size, max_bytes)
    if n == 0:
        return b'{"head":' + head + b',"results":{"bindings":[]}' + extra + b"}"
    if not result.vars:
        check_size(size + 3 * n, max_bytes)
        body = ",".join(["{}"] * n)
        return b'{"head":' + head + b',"results":{"bindings":[' + body.encode() + b"]}" + extra + b"}"
    names = [orjson.dumps(v) + b":" for v in result.vars]
    cells = n * len(result.vars)
    if sum(map(len, names)) <= _LONG_NAME and (
            cells <= SMALL_CELLS or (cells <= SMALL_CELLS_UNBOUND and _any_unbound(result.columns))):
        # small answers: each term's memoized fragment joined per row beats the table machinery
        flat = _flat_keys(result)
        cols = [[None if k is None else name + _json_bytes(k) for k in flat[j * n:(j + 1) * n]]
                for j, name in enumerate(names)]
        if any(None in c for c in cols):
            rows = b"},{".join([b",".join([c for c in row if c is not None]) for row in zip(*cols, strict=True)])
        else:
            rows = b"},{".join([b",".join(row) for row in zip(*cols, strict=True)])
        doc = b'{"head":' + head + b',"results":{"bindings":[{' + rows + b"}]}" + extra + b"}"
        check_size(len(doc), max_bytes)
        return doc
    r = _json_rendered(result, head, names, n, extra, size, max_bytes)
    return r if lazy else r.body(_tick())


def _json_rendered(result: QueryResult, head: bytes, names: list[bytes], n: int, extra: bytes, size: int,
                   max_bytes: int | None) -> render.Rendered:
    """The JSON body of a result with variables and rows: each distinct term
    rendered once as '"var":{...}' (and ',"var":{...}' after an earlier bound
    cell of its row); the exact size is checked before any row is built."""
    masks = [np.asarray(c) != UNBOUND for c in result.columns]
    all_bound = all(bool(m.all()) for m in masks)
    first_bound = None if all_bound else np.argmax(np.vstack(masks), axis=0)
    cols = []
    size += 3 * n

    def held(key_bytes: int) -> None:  # a column's keys, held while it is rendered
        check_memory(2 * size + key_bytes)

    for j, (name, c) in enumerate(zip(names, result.columns, strict=True)):
        if j == 0:
            cols.append(render.column(result, c, _json_frags, [(name, b"")], check=held, fmt="json"))
        elif all_bound:
            cols.append(render.column(result, c, _json_frags, [(b"," + name, b"")], check=held, fmt="json"))
        else:
            variant = (first_bound < j).astype(np.int64)
            cols.append(render.column(result, c, _json_frags, [(name, b""), (b"," + name, b"")], variant,
                                      check=held, fmt="json"))
        size += cols[-1].size
        check_size(size, max_bytes)
    r = render.Rendered(b'{"head":' + head + b',"results":{"bindings":[', cols, n, b"{", b"", b"},", 1,
                        b"]}" + extra + b"}")
    check_size(r.size, max_bytes)
    return r


def _json_frags(keys, wraps=None, parts=False):
    return render.json_fragments(keys, _json_bytes, wraps, parts)


# --------------------------------------------------------------------------
# SPARQL XML
# --------------------------------------------------------------------------

_XML_ESC = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(s: str) -> str:
    s = s.translate(_XML_ESC)
    if _XML_BAD.search(s):
        s = _XML_BAD.sub(lambda m: "&#x%X;" % ord(m.group()), s)  # noqa: UP031 (XML 1.1 style escape)
    return s


def _xml_term(key: str) -> str:
    c = key[0]
    if c == "<":
        return "<uri>" + _xml_text(key[1:-1]) + "</uri>"
    if c == "_":
        return "<bnode>" + _xml_text(key[2:]) + "</bnode>"
    lex, dt, lang = _literal_parts(key)
    if lang is not None:
        return '<literal xml:lang="' + _xml_text(lang) + '">' + _xml_text(lex) + "</literal>"
    if dt is not None and dt != XSD_STRING:
        return '<literal datatype="' + _xml_text(dt) + '">' + _xml_text(lex) + "</literal>"
    return "<literal>" + _xml_text(lex) + "</literal>"


_XML_HEAD = '<?xml version="1.0" encoding="utf-8"?>\n<sparql xmlns="http://www.w3.org/2005/sparql-results#">\n'


def _serialize_xml(result: QueryResult, max_bytes: int | None = None, lazy: bool = False) -> bytes | render.Rendered:
    if result.form == "ASK":
        return (
            _XML_HEAD + "<head/>\n<boolean>" + ("true" if result.boolean else "false") + "</boolean>\n</sparql>\n"
        ).encode("utf-8")
    parts = [_XML_HEAD, "<head>"]
    for v in result.vars:
        parts.append('<variable name="' + _xml_text(v) + '"/>')
    parts.append("</head>\n<results>\n")
    head = "".join(parts).encode("utf-8")
    tail = b"</results>\n</sparql>\n"
    size = len(head) + len(tail)
    check_size(size, max_bytes)
    out = [head]
    n = _row_count(result)
    if n and result.vars and n * len(result.vars) <= SMALL_CELLS:  # term by term (see SMALL_CELLS)
        flat = _flat_keys(result)
        pres = [('<binding name="' + _xml_text(v) + '">').encode("utf-8") for v in result.vars]
        rows = []
        for i in range(n):
            cells = [b"<result>"]
            for j, pre in enumerate(pres):
                k = flat[j * n + i]
                if k is not None:
                    cells += (pre, _xml_bytes(k), b"</binding>")
            cells.append(b"</result>\n")
            rows.append(b"".join(cells))
        body = head + b"".join(rows) + tail
        check_size(len(body), max_bytes)
        return body
    if n:
        if result.vars:
            size += n * 18  # <result>...</result>\n
            cols = []

            def held(key_bytes: int) -> None:  # a column's keys, held while it is rendered
                check_memory(2 * size + key_bytes)

            for v, c in zip(result.vars, result.columns, strict=True):
                pre = ('<binding name="' + _xml_text(v) + '">').encode("utf-8")
                cols.append(render.column(result, c, _xml_frags, [(pre, b"</binding>")], check=held, fmt="xml"))
                size += cols[-1].size
                check_size(size, max_bytes)
            r = render.Rendered(head, cols, n, b"<result>", b"", b"</result>\n", 0, tail)
            check_size(r.size, max_bytes)
            return r if lazy else r.body(_tick())
        check_size(size + 18 * n, max_bytes)
        out.append(b"<result></result>\n" * n)
    out.append(tail)
    return b"".join(out)


def _xml_frags(keys, wraps=None, parts=False):
    return render.xml_fragments(keys, _xml_bytes, wraps, parts)


@_memo
def _xml_bytes(key: str) -> bytes:
    return _xml_term(key).encode("utf-8")


# --------------------------------------------------------------------------
# CSV / TSV
# --------------------------------------------------------------------------


def _csv_field(s: str) -> str:
    if '"' in s or "," in s or "\n" in s or "\r" in s:
        return '"' + s.replace('"', '""') + '"'
    return s


def _csv_value(key: str) -> str:
    c = key[0]
    if c == "<":
        return _csv_field(key[1:-1])
    if c == "_":
        return _csv_field(key)
    return _csv_field(_literal_parts(key)[0])


def _tsv_term(key: str) -> str:
    if key[0] == '"':
        return key.replace("\t", "\\t")
    if key[0] == "_":
        return "_:" + _bnode_label(key[2:])
    return key


def _serialize_delimited(result: QueryResult, sep: str, eol: str, header: str, frags,
                         max_bytes: int | None = None, lazy: bool = False,
                         fmt: str | None = None) -> bytes | render.Rendered:
    if result.form == "ASK":
        # Not defined by the CSV/TSV spec; the common convention.
        return (("_askResult" if sep == "," else "?_askResult") + eol + ("true" if result.boolean else "false") + eol).encode()
    head = (header + eol).encode("utf-8")
    size = len(head)
    check_size(size, max_bytes)
    out = [head]
    n = _row_count(result)
    if n and result.columns and n * len(result.columns) <= SMALL_CELLS and fmt in _TERM_BYTES:
        flat = _flat_keys(result)  # term by term (see SMALL_CELLS)
        one = _TERM_BYTES[fmt]
        sepb, eolb = sep.encode(), eol.encode()
        m = len(result.columns)
        rows = [sepb.join([b"" if (k := flat[j * n + i]) is None else one(k) for j in range(m)]) + eolb
                for i in range(n)]
        body = head + b"".join(rows)
        check_size(len(body), max_bytes)
        return body
    if n:
        if not result.columns:  # no variables: one empty line per solution
            check_size(size + len(eol) * n, max_bytes)
            out.append(eol.encode() * n)
        else:
            size += n * (len(sep) * (len(result.columns) - 1) + len(eol))
            cols = []

            def held(key_bytes: int) -> None:  # a column's keys, held while it is rendered
                check_memory(2 * size + key_bytes)

            for c in result.columns:
                cols.append(render.column(result, c, frags, check=held, fmt=fmt))
                size += cols[-1].size
                check_size(size, max_bytes)
            r = render.Rendered(head, cols, n, b"", sep.encode(), eol.encode(), 0, b"")
            check_size(r.size, max_bytes)
            return r if lazy else r.body(_tick())
    return b"".join(out)


def _serialize_csv(result: QueryResult, max_bytes: int | None = None, lazy: bool = False) -> bytes | render.Rendered:
    return _serialize_delimited(result, ",", "\r\n", ",".join(_csv_field(v) for v in result.vars), _csv_frags,
                                max_bytes, lazy, "csv")


def _serialize_tsv(result: QueryResult, max_bytes: int | None = None, lazy: bool = False) -> bytes | render.Rendered:
    return _serialize_delimited(result, "\t", "\n", "\t".join("?" + v for v in result.vars), _tsv_frags,
                                max_bytes, lazy, "tsv")


def _csv_frags(keys, wraps=None, parts=False):
    return render.csv_fragments(keys, _csv_bytes, wraps, parts)


def _tsv_frags(keys, wraps=None, parts=False):
    return render.tsv_fragments(keys, _tsv_bytes, wraps, parts)


@_memo
def _csv_bytes(key: str) -> bytes:
    return _csv_value(key).encode("utf-8")


@_memo
def _tsv_bytes(key: str) -> bytes:
    return _tsv_term(key).encode("utf-8")


#: the per-term writer of each delimited format (its term-by-term path)
_TERM_BYTES = {"csv": _csv_bytes, "tsv": _tsv_bytes}


# --------------------------------------------------------------------------
# Graphs: N-Triples, N-Quads here; Turtle, TriG, JSON-LD, RDF/XML in engine.exec.graph_writers
# --------------------------------------------------------------------------


def _nt_term(key: str) -> str:
    if key[0] == "_":
        return "_:" + _bnode_label(key[2:])
    return key


def _serialize_ntriples(result: QueryResult, graph: str | None = None, max_bytes: int | None = None) -> bytes:
    """N-Triples (N-Quads with ``graph``): each column's distinct terms are their
    keys (blank nodes relabelled where their label is not N-Triples syntax), rows
    joined by the vectorized row assembly (:mod:`engine.exec.render`); the exact
    size is checked before any row is built."""
    n = _n_triples(result)
    if n == 0:
        return b""
    tail = b" .\n" if graph is None else (" <" + graph + "> .\n").encode("utf-8")
    flat_rows = getattr(result, "flat_rows", None)
    if flat_rows is not None and n <= FLAT_ROWS:  # (a DESCRIBE's runs: rows without an array)
        frags, form = graph_writers.small_ntriples(None, functools.partial(graph_writers.store_keys, result.terms),
                                                   graph_writers.term_cache(result.terms), tail, flat_rows())
        check_size(sum(map(len, frags)) + len(form) - 6 * n, max_bytes)
        return form % tuple(frags)
    t = result.triples
    if n <= graph_writers.SMALL_ROWS and t.min() >= 0:  # term by term, each term's text kept
        frags, form = graph_writers.small_ntriples(t, functools.partial(graph_writers.store_keys, result.terms),
                                                   graph_writers.term_cache(result.terms), tail)
        check_size(sum(map(len, frags)) + len(form) - 6 * n, max_bytes)
        return form % tuple(frags)
    size = n * (2 + len(tail))
    check_size(size, max_bytes)
    cols = []
    for i in range(3):
        cols.append(render.column(result, np.asarray(t[:, i]), _nt_frags, fmt="nt"))
        size += cols[-1].size
        check_size(size, max_bytes)
    return render.Rendered(b"", cols, n, b"", b" ", tail, 0, b"").body(_tick())


def _nt_frags(keys, wraps=None, parts=False):
    return render.nt_fragments(keys, lambda k: _nt_term(k).encode("utf-8"), wraps, parts)


# Turtle, TriG, RDF/XML and JSON-LD: written from the id columns by engine.exec.graph_writers
COMMON_PREFIXES = graph_writers.COMMON_PREFIXES
MAX_NEW_PREFIXES = graph_writers.MAX_NEW_PREFIXES


#: a result that gives its rows as one flat list (``flat_rows``: engine.plan.point.Described)
#: is written from that list up to this many rows (above, its array is the cheaper start)
FLAT_ROWS = 64


def _rows(result: QueryResult) -> graph_writers.Rows | graph_writers.SmallGraph:
    """``result``'s triples grouped by subject and predicate, their distinct terms' keys read
    once (those key bytes held against the query's memory budget); a graph of few rows for
    the exact per-term writer."""
    flat_rows = getattr(result, "flat_rows", None)
    if flat_rows is not None and len(result) <= FLAT_ROWS:  # (a DESCRIBE's runs: rows without an array)
        return graph_writers.SmallGraph(None, functools.partial(graph_writers.store_keys, result.terms),
                                        graph_writers.term_cache(result.terms), flat=flat_rows())
    t = result.triples
    t = np.zeros((0, 3), np.int64) if t is None else t
    if len(t) <= graph_writers.SMALL_ROWS:
        return graph_writers.SmallGraph(t, functools.partial(graph_writers.store_keys, result.terms),
                                        graph_writers.term_cache(result.terms))

    def keys_of(ids: np.ndarray):
        keys = render.keys_arrow(result, ids, sorted_ids=True)
        check_memory(int(keys.nbytes), "the terms of the answer being written")
        return keys

    return graph_writers.Rows(t, keys_of)


def _n_triples(result: QueryResult) -> int:
    """The rows of a graph result (0 when it holds none), without building a result's
    triple array when it gives its rows otherwise (``flat_rows``)."""
    if getattr(result, "flat_rows", None) is not None:
        return len(result)
    t = result.triples
    return 0 if t is None else len(t)


def _checker(max_bytes: int | None):
    return lambda size: check_size(size, max_bytes)


def _serialize_turtle(result: QueryResult, prefixes: dict[str, str] | None = None,
                      max_bytes: int | None = None) -> bytes:
    """Turtle with prefixes, ``a``, and statements grouped by subject (``;``) and predicate (``,``)."""
    if _n_triples(result) == 0:
        return b""
    return graph_writers.write_turtle([(None, _rows(result))], prefixes, False, _checker(max_bytes), _tick())


def _serialize_jsonld(result: QueryResult, graph: str | None = None, max_bytes: int | None = None) -> bytes:
    if _n_triples(result) == 0:
        return b"[]"
    return graph_writers.write_jsonld(_rows(result), graph, _checker(max_bytes), _tick())


def _serialize_rdfxml(result: QueryResult, max_bytes: int | None = None) -> bytes:
    return graph_writers.write_rdfxml(_rows(result), _checker(max_bytes), _tick())


def _serialize_trig(result: QueryResult, graph: str | None = None, prefixes: dict[str, str] | None = None,
                    max_bytes: int | None = None) -> bytes:
    """TriG: the triples in ``graph`` (a ``<g> { }`` block; None: default-graph statements)."""
    if _n_triples(result) == 0:
        return b""
    return graph_writers.write_turtle([(graph, _rows(result))], prefixes, True, _checker(max_bytes), _tick())


def write_dataset(parts: Sequence[tuple[str | None, QueryResult]], media_type: str, *,
                  prefixes: dict[str, str] | None = None, max_bytes: int | None = None) -> bytes:
    """A whole dataset (``(graph IRI or None, graph)`` per graph) as N-Quads or TriG
    (Graph Store ``GET /store`` without a graph). The bound applies to the whole answer."""
    fmt = formats.output_format(media_type, formats.GRAPH)
    if fmt is None or not fmt.quads or fmt.name not in ("nq", "trig"):
        raise ValueError(f"cannot write a dataset as {media_type}")
    if fmt.name == "trig":
        rows = []
        for graph, res in parts:
            token = _bounded(res, max_bytes)
            try:
                rows.append((graph, _rows(res)))
            finally:
                _BOUND.reset(token)
        return graph_writers.write_turtle(rows, prefixes, True, _checker(max_bytes), _tick())
    chunks: list[bytes] = []
    size = 0
    for graph, res in parts:
        token = _bounded(res, max_bytes)
        try:
            room = (max_bytes - size) if max_bytes else None
            if room is not None and room <= 0:
                check_size(size + 1, max_bytes)
            body = _serialize_ntriples(res, graph, room)
        finally:
            _BOUND.reset(token)
        size += len(body)
        chunks.append(body)
    return b"".join(chunks)


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def serialize(
    result: QueryResult, media_type: str, *, graph: str | None = None, prefixes: dict[str, str] | None = None,
    max_bytes: int | None = None, deadline: float | None = None,
) -> bytes:
    """Serialize ``result`` as ``media_type`` (a type :func:`engine.formats.negotiate` returned).

    ``graph`` names the graph the triples belong to (N-Quads only);
    ``prefixes`` adds Turtle prefixes; ``max_bytes`` bounds the answer (ResponseTooLarge,
    raised before the body is built); past ``deadline`` (``time.monotonic()``) the
    building of a large SELECT body stops with QueryTimeout. Raises ValueError for a
    media type that does not fit the result's form.
    """
    token = _bounded(result, max_bytes)
    dtoken = _DEADLINE.set(deadline)
    try:
        return _serialize(result, media_type, graph, prefixes, max_bytes)
    finally:
        _DEADLINE.reset(dtoken)
        _BOUND.reset(token)


#: the lazy writers of the SELECT result formats, by format name
_LAZY = {"srj": lambda r, m: _serialize_json(r, b"", m, True), "srx": lambda r, m: _serialize_xml(r, m, True),
         "csv": lambda r, m: _serialize_csv(r, m, True), "tsv": lambda r, m: _serialize_tsv(r, m, True)}


def serialize_lazy(result: QueryResult, media_type: str, *, max_bytes: int | None = None,
                   deadline: float | None = None) -> bytes | render.Rendered:
    """As :func:`serialize`, but a SELECT answer with many rows in a result format
    (JSON, XML, CSV, TSV) comes back as a :class:`~engine.exec.render.Rendered`:
    its exact size checked against ``max_bytes`` and the memory budget, its rows
    not yet built, so a server can stream ``chunks()`` (bounded memory) after
    sending that size. Everything else comes back as bytes."""
    fmt = formats.output_format(media_type, formats.GRAPH if result.is_graph else formats.RESULTS)
    lazy = _LAZY.get(fmt.name) if fmt is not None and result.form == "SELECT" else None
    if lazy is None:
        return serialize(result, media_type, max_bytes=max_bytes, deadline=deadline)
    token = _bounded(result, max_bytes)
    try:
        return lazy(result, max_bytes)
    finally:
        _BOUND.reset(token)


def _serialize(result: QueryResult, media_type: str, graph, prefixes, max_bytes) -> bytes:
    fmt = formats.output_format(media_type, formats.GRAPH if result.is_graph else formats.RESULTS)
    if fmt is None:
        if result.is_graph:
            raise ValueError(f"cannot serialize a graph as {media_type}")
        raise ValueError(f"cannot serialize {result.form} results as {media_type}")
    return fmt.write(result, graph=graph, prefixes=prefixes, max_bytes=max_bytes)


# The writers of the format registry (engine/formats.py), one signature for all:
# write(result, *, graph, prefixes, max_bytes) -> bytes.


def write_sparql_json(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_json(result, b"", max_bytes)


def write_sparql_xml(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_xml(result, max_bytes)


def write_csv(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_csv(result, max_bytes)


def write_tsv(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_tsv(result, max_bytes)


def write_turtle(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_turtle(result, prefixes, max_bytes)


def write_ntriples(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_ntriples(result, None, max_bytes)


def write_nquads(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    """N-Quads: the triples in ``graph`` (N-Triples lines when None: the default graph)."""
    return _serialize_ntriples(result, graph, max_bytes)


def write_jsonld(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_jsonld(result, None, max_bytes)


def write_rdfxml(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    return _serialize_rdfxml(result, max_bytes)


def write_trig(result: QueryResult, *, graph=None, prefixes=None, max_bytes=None) -> bytes:
    """TriG: the triples in ``graph`` (the default graph when None)."""
    return _serialize_trig(result, graph, prefixes, max_bytes)


class KeyTable:
    """A TermTable over a plain list of keys (id = index); for small
    server-built results such as the service description."""

    def __init__(self, keys: Sequence[str]):
        self._keys = list(keys)

    def keys(self, ids: np.ndarray) -> list[str | None]:
        return [None if i < 0 else self._keys[i] for i in np.asarray(ids).tolist()]


def graph_from_keys(triples: Sequence[tuple[str, str, str]]) -> QueryResult:
    """A CONSTRUCT-form QueryResult from key triples (duplicates removed)."""
    index: dict[str, int] = {}
    rows = []
    seen = set()
    for tr in triples:
        if tr in seen:
            continue
        seen.add(tr)
        rows.append([index.setdefault(k, len(index)) for k in tr])
    arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return QueryResult(form="CONSTRUCT", terms=KeyTable(list(index)), triples=arr)
