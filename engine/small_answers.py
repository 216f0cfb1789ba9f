"""Small SELECT answers in every results format (SPARQL JSON and XML, CSV, TSV)
and small graphs as N-Triples, from rendered terms kept between queries.

A selective query answers a few rows of terms that the next queries answer
again (the same professors, courses, departments). The general writer
(:mod:`engine.exec.serialize`) decodes every id through the dictionary and
renders it for each answer (and, for XML, CSV and TSV, through the vectorized
row assembly, whose fixed cost of a few hundred microseconds is most of a
selective query's time); here each store id's term in each format (its JSON
object ``{"type":"uri","value":...}``, its XML element, its CSV or TSV field,
its N-Triples term) is rendered once per store dictionary (ids keep their
meaning: it only grows) and the answer is joined from those bytes (a small graph:
a DESCRIBE or CONSTRUCT of one entity). The bytes are those
``engine.exec.serialize`` writes (same renderer per term, same layout: orjson's
compact form of the same document; the XML writer's lines; one CSV/TSV line per
row, an unbound cell empty; one ``s p o .`` line per triple).
"""

from __future__ import annotations

import threading
import weakref
from itertools import chain
from operator import itemgetter

import numpy as np
import orjson

from engine import formats
from engine.exec.bgp import SMALL_ROWS
from engine.exec.context import LOCAL_BASE, charge_rows, current_budget
from engine.exec.evaluate import bnode_tag_bytes, project_lists
from engine.exec.graph_writers import RDF_TYPE_KEY, jsonld_fragments, rdfxml_fragments, store_keys
from engine.exec.result import UNBOUND, QueryResult
from engine.exec.serialize import (
    _BOUND,
    _XML_HEAD,
    _csv_bytes,
    _csv_field,
    _json_bytes,
    _nt_term,
    _serialize_csv,
    _serialize_json,
    _serialize_tsv,
    _serialize_xml,
    _tsv_bytes,
    _xml_bytes,
    _xml_text,
    check_size,
)
from engine.kv.vertex_preds import EDGE_NB

#: answers with more cells (graphs: triples) than this go to the general writer
MAX_CELLS = 256
#: rendered terms kept per snapshot (past it, an answer renders what it misses without keeping it)
MAX_TERMS = 1 << 16


def _gone():
    """A weak reference's call once its object is gone (nothing kept yet)."""
    return None


#: the kept tables of a store dictionary, by position: each format's term rendering
JSON, NT, XML, CSV, TSV = range(5)
#: the graph formats' tables: a term's JSON-LD (subject, predicate, object) fragments
JSONLD, RDFXML = 5, 6
_N_TABLES = 7
#: the tables an unbound cell (UNBOUND) is looked up in, and its bytes there (an empty CSV/TSV field)
_UNBOUND_CELL = {CSV: b"", TSV: b""}


def _new_table(fmt: int) -> dict:
    return {UNBOUND: _UNBOUND_CELL[fmt]} if fmt in _UNBOUND_CELL else {}


class TermFragments:
    """Store id -> its rendered term's bytes per format (SPARQL JSON object, N-Triples
    term, SPARQL XML element, CSV field, TSV field), for one store dictionary.

    The dictionary (or a term table without one) the tables belong to is held weakly:
    a store that is closed and dropped is freed even while its rendered terms are the
    last ones kept here."""

    def __init__(self):
        #: (weak reference to the term table's owner, the tables by format), replaced as one
        self.kept: tuple = (_gone, tuple(_new_table(f) for f in range(_N_TABLES)))
        #: (kept's owner reference, its JSON table), replaced with kept: select_json's one read
        self.json: tuple = (_gone, self.kept[1][JSON])
        self.heads: dict[tuple, tuple] = {}
        self.lock = threading.Lock()

    def table(self, terms, fmt: int) -> dict[int, bytes]:
        """The ``fmt`` table for ``terms``: kept per store dictionary (its ids keep
        their meaning from snapshot to snapshot: the dictionary only grows), new ones for
        another dictionary or a term table without one; a table holding more than
        MAX_TERMS terms is replaced (never cleared in place: other threads may be
        reading it). An owner that cannot be weakly referenced gets a table of its
        own, not kept."""
        owner = getattr(terms, "dictionary", None)  # store ids keep their meaning per dictionary
        if owner is None:   # (a truth test would call the dictionary's __len__ in Python)
            owner = terms
        kept = self.kept
        t = kept[1][fmt]
        # another store dictionary (or term table): other ids; a full table: restarted
        if kept[0]() is not owner or len(t) > MAX_TERMS:
            with self.lock:
                kept = self.kept
                if kept[0]() is not owner:
                    try:
                        kept = self.kept = (weakref.ref(owner), tuple(_new_table(f) for f in range(_N_TABLES)))
                        self.json = (kept[0], kept[1][JSON])
                    except TypeError:  # (not weakly referable: nothing kept)
                        return _new_table(fmt)
                elif len(kept[1][fmt]) > MAX_TERMS:
                    tables = list(kept[1])
                    tables[fmt] = _new_table(fmt)
                    kept = self.kept = (kept[0], tuple(tables))
                    self.json = (kept[0], kept[1][JSON])
                t = kept[1][fmt]
        return t

    def tables(self, terms) -> tuple[dict[int, bytes], dict[int, bytes]]:
        """(JSON, N-Triples) tables for ``terms`` (see :meth:`table`)."""
        return self.table(terms, JSON), self.table(terms, NT)

    def head(self, names: tuple, fmt: int = JSON) -> tuple:
        """For ``names`` in ``fmt``: (document start, each variable's piece before a
        bound cell's term, the row of a binding of every variable as a ``%`` format of
        the terms' fragments[, XML: each variable's piece after its term])."""
        h = self.heads.get((fmt, names))
        if h is None:
            if len(self.heads) >= 1024:
                self.heads = {}
            h = self.heads[(fmt, names)] = _HEADS[fmt](names)
        return h


def _json_head(names: tuple) -> tuple:
    labels = [orjson.dumps(v) + b":" for v in names]
    return (b'{"head":{"vars":' + orjson.dumps(list(names)) + b'},"results":{"bindings":[',
            labels,
            b"{" + b",".join(lab.replace(b"%", b"%%") + b"%s" for lab in labels) + b"}")


def _xml_head(names: tuple) -> tuple:
    head = (_XML_HEAD + "<head>" + "".join('<variable name="' + _xml_text(v) + '"/>' for v in names)
            + "</head>\n<results>\n").encode("utf-8")
    pres = [('<binding name="' + _xml_text(v) + '">').encode("utf-8") for v in names]
    row = b"<result>" + b"".join(p.replace(b"%", b"%%") + b"%s</binding>" for p in pres) + b"</result>\n"
    return head, pres, row


def _csv_head(names: tuple) -> tuple:
    return (",".join(_csv_field(v) for v in names) + "\r\n").encode("utf-8"), None, \
        b",".join([b"%s"] * len(names)) + b"\r\n"


def _tsv_head(names: tuple) -> tuple:
    return ("\t".join("?" + v for v in names) + "\n").encode("utf-8"), None, b"\t".join([b"%s"] * len(names)) + b"\n"


_HEADS = {JSON: _json_head, XML: _xml_head, CSV: _csv_head, TSV: _tsv_head}


_FRAGS = TermFragments()

#: an ASK answer's SPARQL JSON body by its boolean (the general writer's bytes)
_ASK_JSON = {b: _serialize_json(QueryResult(form="ASK", terms=None, boolean=b)) for b in (False, True)}


class SmallSelect:
    """A SELECT answer of a few rows as Python sequences of store ids (one per
    variable, UNBOUND = -1), as ``engine.exec.evaluate.run_fast_lists`` leaves it:
    the small writers (:func:`select_json`, :func:`select_xml`, ...) read the sequences
    as they are; any other writer gets the :class:`QueryResult` of :meth:`result`
    (numpy columns)."""

    __slots__ = ("vars", "cols", "terms", "n")
    form = "SELECT"
    triples = None

    def __init__(self, names, cols, terms, n: int):
        self.vars = names
        self.cols = cols
        self.terms = terms
        self.n = n

    def __len__(self) -> int:
        return self.n

    def result(self) -> QueryResult:
        """The same answer as a QueryResult (what run_fast gives)."""
        if self.n == 0:
            cols = [np.zeros(0, dtype=np.int64) for _ in self.cols]
        else:
            cols = [np.array(c, dtype=np.int64) for c in self.cols]
        return QueryResult(form="SELECT", terms=self.terms, vars=list(self.vars), columns=cols, n_rows=self.n)


#: the response bound and memory budget check_size reads (a ContextVar's get)
_bound = _BOUND.get
#: (variable names, rows) -> the whole SPARQL JSON document of that many rows, every cell
#: bound, as one ``%`` format of the cells' fragments (select_json's one-frame path)
_JSON_DOCS: dict[tuple, bytes] = {}
_JSON_DOCS_MAX = 4096


def _json_doc(names: tuple, rows: int) -> bytes:
    """The ``%`` format of a whole JSON document of ``rows`` rows of ``names``, all bound:
    the bytes :func:`select_json`'s general steps write (head, rows joined by ``,``, tail)."""
    head, _labels, row = _json_head(names)
    doc = head.replace(b"%", b"%%") + b",".join([row] * rows) + b"]}}"
    if len(_JSON_DOCS) >= _JSON_DOCS_MAX:
        _JSON_DOCS.clear()
    _JSON_DOCS[(names, rows)] = doc
    return doc


def select_json(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The SPARQL JSON body of a small SELECT ``result`` over store ids, or None
    (not small, or holding computed terms): the caller uses the general writer. An
    ASK answer's body is one of two constants.

    The lane's usual answer (a :class:`SmallSelect`, every cell bound, every term
    rendered already in the kept table of its store dictionary) is written in this one
    frame: its cells' fragments (one C-level pass) filled into the kept format of the
    whole document for its names and row count; anything else takes the general steps
    (heads, :meth:`TermFragments.table`, :func:`_rows`), which write the same bytes."""
    if type(result) is SmallSelect:
        ref, frags = fragments.json  # (read, never filled here: a full table is replaced by table() on a miss)
        owner = getattr(result.terms, "dictionary", None)
        if owner is not None and ref() is owner:
            cols = result.cols
            get = frags.__getitem__
            try:  # (UNBOUND is never kept in the JSON table: an unbound cell is a KeyError too)
                doc = _JSON_DOCS[(result.vars, result.n)]  # (made by the general steps: small enough)
                if len(cols) == 1:
                    cells = tuple(map(get, cols[0]))
                else:  # (ValueError for columns of different lengths, as _one_format)
                    cells = tuple(map(get, chain.from_iterable(zip(*cols, strict=True))))
                doc = doc % cells  # (TypeError: not n rows)
            except (KeyError, TypeError):  # a term not rendered yet, an unbound cell, a new document
                pass
            else:
                if (max_bytes and len(doc) > max_bytes) or _bound() is not None:  # (check_size's cases)
                    check_size(len(doc), max_bytes)
                return doc
    if result.form != "SELECT" or not result.vars:
        return _ASK_JSON[bool(result.boolean)] if result.form == "ASK" else None
    if type(result) is SmallSelect:  # (the lane's usual answer: its fields as they are)
        n = result.n
        names = result.vars
        if type(names) is not tuple:
            names = tuple(names)
        cols = result.cols
    else:
        n = len(result)
        names = tuple(result.vars)
        cols = None
    if n * len(names) > MAX_CELLS:
        return None
    if cols is None:
        cols = [c.tolist() for c in result.columns]
    elif (names, n) not in _JSON_DOCS:  # (the one-frame path's document, from the next answer on)
        _json_doc(names, n)
    head, labels, row = fragments.head(names)
    frags = fragments.table(result.terms, JSON)
    try:  # usually every term is rendered already: no scan for missing ones
        rows = _rows(cols, labels, row, frags, n)
    except KeyError:
        frags = _fill(frags, result.terms, {i for c in cols for i in c}, _json_bytes)
        if frags is None:
            return None
        rows = _rows(cols, labels, row, frags, n)
    doc = head + rows + b"]}}"
    check_size(len(doc), max_bytes)
    return doc


def _rows(cols: list[list[int]], labels: list[bytes], row: bytes, frags: dict, n: int) -> bytes:
    """The rows' JSON objects, joined by commas: with every variable bound, the row
    format repeated once per row filled with all the terms' fragments (one C-level
    format per answer, :func:`_one_format`); else the bound cells only (the fragment of
    UNBOUND is never looked up). KeyError: a term not rendered yet."""
    for c in cols:  # (a loop, not any() over a generator: a frame less per answer)
        if UNBOUND in c:
            break
    else:
        return _one_format(cols, row, b",", frags.__getitem__)
    lc = list(zip(labels, cols, strict=True))
    return b",".join([b"{" + b",".join([lab + frags[c[r]] for lab, c in lc if c[r] != UNBOUND]) + b"}"
                      for r in range(n)])


def _one_format(cols: list, row: bytes, sep: bytes, get) -> bytes:
    """Every row of ``cols`` (one sequence of ids per variable) as the ``%`` format ``row``
    of its cells' fragments (``get``), the rows joined by ``sep``: one format of all the
    cells (the row format repeated), not one per row (a tuple and a format call per row
    cost more than the answer's few cells). The columns must be of one length (ValueError,
    as the per-row zip's strict check), KeyError: a term not rendered yet."""
    k = len(cols)
    if k == 1:
        cells = tuple(map(get, cols[0]))
    elif len(cols[0]) <= 2:  # (a row or two: the cells in one pass of C iterators)
        cells = tuple(map(get, chain.from_iterable(zip(*cols, strict=True))))
    else:  # (more: a column per slice assignment)
        cells = [None] * (len(cols[0]) * k)
        for j, c in enumerate(cols):
            cells[j::k] = map(get, c)
        cells = tuple(cells)
    n = len(cells) // k if k else 0
    if n == 1:
        return row % cells
    return sep.join([row] * n) % cells


def select_xml(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The SPARQL XML body of a small SELECT ``result`` over store ids, or None (see
    :func:`select_json`): the XML writer's lines, each row's bound cells as
    ``<binding name="v">term</binding>``, an unbound one left out."""
    return _select(result, max_bytes, fragments, XML, _xml_bytes)


def select_csv(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The CSV body of a small SELECT ``result`` over store ids, or None (see
    :func:`select_json`): a header line, one ``\\r\\n`` line per row, an unbound cell empty."""
    return _select(result, max_bytes, fragments, CSV, _csv_bytes)


def select_tsv(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The TSV body of a small SELECT ``result`` over store ids, or None (see
    :func:`select_json`): a header line, one line per row, an unbound cell empty."""
    return _select(result, max_bytes, fragments, TSV, _tsv_bytes)


def _select(result, max_bytes: int | None, fragments: TermFragments, fmt: int, render) -> bytes | None:
    """The ``fmt`` (XML, CSV, TSV) body of a small SELECT, as :func:`select_json` does
    it for JSON: each row one ``%`` format of its terms' kept fragments (CSV/TSV: an
    unbound cell's fragment is the empty field, kept in the table under UNBOUND)."""
    if result.form != "SELECT" or not result.vars:
        return _ASK[fmt][bool(result.boolean)] if result.form == "ASK" else None
    n = len(result)
    names = tuple(result.vars)
    if n * len(names) > MAX_CELLS:
        return None
    cols = result.cols if type(result) is SmallSelect else [c.tolist() for c in result.columns]
    head, pres, row = fragments.head(names, fmt)
    frags = fragments.table(result.terms, fmt)
    try:  # usually every term is rendered already: no scan for missing ones
        rows = _format_rows(cols, pres, row, frags)
    except KeyError:
        frags = _fill(frags, result.terms, {i for c in cols for i in c}, render)
        if frags is None:
            return None
        rows = _format_rows(cols, pres, row, frags)
    doc = head + rows + _TAIL[fmt]
    check_size(len(doc), max_bytes)
    return doc


def _format_rows(cols: list[list[int]], pres: list[bytes] | None, row: bytes, frags: dict) -> bytes:
    """The rows' lines: the row format filled with the terms' fragments (one C-level
    format per answer, :func:`_one_format`) when every cell is bound or an unbound cell
    has a fragment (CSV/TSV: ``pres`` None); else (XML) each row's bound cells only.
    KeyError: a term not rendered yet."""
    if pres is not None:
        for c in cols:
            if UNBOUND in c:
                lc = list(zip(pres, cols, strict=True))
                return b"".join([b"<result>" + b"".join([pre + frags[c[r]] + b"</binding>" for pre, c in lc
                                                         if c[r] != UNBOUND]) + b"</result>\n"
                                 for r in range(len(cols[0]))])
    return _one_format(cols, row, b"", frags.__getitem__)


#: what follows the rows, by format
_TAIL = {XML: b"</results>\n</sparql>\n", CSV: b"", TSV: b""}


def _ask(writer) -> dict[bool, bytes]:
    """An ASK answer's body by its boolean (the general writer's bytes)."""
    return {b: writer(QueryResult(form="ASK", terms=None, boolean=b)) for b in (False, True)}


_ASK = {XML: _ask(_serialize_xml), CSV: _ask(_serialize_csv), TSV: _ask(_serialize_tsv)}


def _nt_bytes(key: str) -> bytes:
    return _nt_term(key).encode("utf-8")


def _fill(table: dict, terms, ids: set, render) -> dict | None:
    """``table`` (a kept table, never cleared in place: another thread may be
    reading it; :meth:`TermFragments.tables` replaces a full one) with every id
    of ``ids`` (UNBOUND aside) rendered. None when an id is a computed term (not
    cached: the general writer answers)."""
    missing = ids.difference(table)  # (C-level: usually every term is kept)
    missing.discard(UNBOUND)
    if missing:
        missing = list(missing)
        if any(i < 0 or i >= LOCAL_BASE for i in missing):
            return None
        missing.sort()
        keys = store_keys(terms, missing)
        for i, k in zip(missing, keys, strict=True):
            if k is None:
                return None
            table[i] = render(k)
    return table


def graph_ntriples(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The N-Triples body of a small CONSTRUCT/DESCRIBE ``result`` over store ids,
    or None (the caller uses the general writer). Usually every term is rendered
    already: the body is one ``%`` format of the kept fragments, no scan for
    missing ones (the body is at most MAX_CELLS lines: built, then its size checked)."""
    runs = getattr(result, "runs", None)
    if runs is not None:  # (a DESCRIBE through the edge index: each subject's edges as they are)
        return _runs_ntriples(runs, result.terms, max_bytes, fragments)
    flat = getattr(result, "flat", None)
    if flat is not None:  # (a CONSTRUCT answered tuple at a time: its ids as a list already)
        n = result.n
        if n > MAX_CELLS:
            return None
    else:
        t = result.triples
        if t is None or len(t) > MAX_CELLS:
            return None
        n = len(t)
        flat = t.ravel().tolist()
    if n == 0:
        return b""
    local = getattr(result, "local", None)
    if local is not None:  # (a CONSTRUCT's fresh blank nodes: this answer's own fragments)
        nt = fragments.table(result.base, NT)
        try:
            frags = tuple([local[i] if i >= LOCAL_BASE else nt[i] for i in flat])
        except KeyError:
            nt = _fill(nt, result.base, {i for i in flat if i < LOCAL_BASE}, _nt_bytes)
            if nt is None:
                return None
            frags = tuple([local[i] if i >= LOCAL_BASE else nt[i] for i in flat])
        body = _NT_LINES[n] % frags if n < len(_NT_LINES) else b"%s %s %s .\n" * n % frags
        check_size(len(body), max_bytes)
        return body
    nt = fragments.table(result.terms, NT)
    try:
        frags = tuple(map(nt.__getitem__, flat))
    except KeyError:
        nt = _fill(nt, result.terms, set(flat), _nt_bytes)
        if nt is None:
            return None
        frags = tuple(map(nt.__getitem__, flat))
    body = _NT_LINES[n] % frags if n < len(_NT_LINES) else b"%s %s %s .\n" * n % frags
    check_size(len(body), max_bytes)
    return body


#: the ``%`` format of n N-Triples lines, by n
_NT_LINES = [b"%s %s %s .\n" * n for n in range(MAX_CELLS + 1)]


# ---------------------------------------------------------------- small graphs as Turtle and JSON-LD
#
# Why: clients ask for Turtle first (browsers, rdflib, Jena) and the general graph writers
# build a SmallGraph, count namespaces and choose prefixes for every answer (2-4x the
# N-Triples answer's time); here a small graph is one ``%`` format of kept fragments,
# as graph_ntriples writes it.


def _cells(result, fragments: TermFragments, fmt: int, render, own) -> tuple[list, list] | None:
    """(the triples' ids as one flat list s, p, o..., each cell's kept ``fmt`` fragment) of a
    small graph ``result``; None when it is not small or holds a computed term (the general
    writer answers). ``render`` makes a store term's fragment from its key, ``own`` an
    answer's own terms' (a CONSTRUCT's fresh blank nodes, absent constants) from their
    N-Triples bytes (an :class:`_OwnRenderer`; None: those bytes are the fragments)."""
    if not result.is_graph or len(result) > MAX_CELLS:
        return None
    flat = getattr(result, "flat", None)
    if flat is None:
        flat_rows = getattr(result, "flat_rows", None)
        if flat_rows is not None:
            flat = flat_rows()
        else:
            t = result.triples
            flat = [] if t is None else t.ravel().tolist()
    local = getattr(result, "local", None)
    if local is not None:  # (a CONSTRUCT's own terms: rendered from their N-Triples bytes)
        table = fragments.table(result.base, fmt)
        mine = local if own is None else own.many(local)
        try:
            return flat, [mine[i] if i >= LOCAL_BASE else table[i] for i in flat]
        except KeyError:
            table = _fill(table, result.base, {i for i in flat if i < LOCAL_BASE}, render)
            if table is None:
                return None
            return flat, [mine[i] if i >= LOCAL_BASE else table[i] for i in flat]
    table = fragments.table(result.terms, fmt)
    try:
        cells = list(map(table.__getitem__, flat))
    except KeyError:
        table = _fill(table, result.terms, set(flat), render)
        if table is None:
            return None
        cells = list(map(table.__getitem__, flat))
    return flat, cells


#: the ``%`` format of n Turtle triples of one subject (``;`` between them), by n, made on first use
_TTL_ONE: dict[int, bytes] = {}


def _ttl_one(n: int) -> bytes:
    f = _TTL_ONE.get(n)
    if f is None:
        f = _TTL_ONE[n] = b"%s %s %s" + b" ;\n\t%.0s%s %s" * (n - 1) + b" .\n"
    return f


def graph_turtle(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The Turtle body of a small CONSTRUCT/DESCRIBE ``result``, or None (the general
    writer answers): prefix-free Turtle of the N-Triples terms (N-Triples is a subset
    of Turtle: same terms, same blank node labels), the rows in the answer's order,
    consecutive rows of one subject joined by ``;``. The same graph as the general
    writer's (which chooses prefixes and writes ``a``), not the same bytes."""
    got = _cells(result, fragments, NT, _nt_bytes, None)
    if got is None:
        return None
    flat, cells = got
    n = len(flat) // 3
    if n == 0:
        return b""
    sl = flat[0::3]
    if sl.count(sl[0]) == n:
        form = _ttl_one(n)
    else:
        parts = [b"%s %s %s"]
        for i in range(1, n):
            parts.append(b" ;\n\t%.0s%s %s" if sl[i] == sl[i - 1] else b" .\n%s %s %s")
        parts.append(b" .\n")
        form = b"".join(parts)
    body = form % tuple(cells)
    check_size(len(body), max_bytes)
    return body


class _OwnRenderer:
    """An answer's own terms' fragments (tuples, as ``render`` gives them from a key) from
    their N-Triples bytes: fresh blank nodes' by ``%`` formats made once from ``render``'s
    own fragments of a model label (their labels are letters and digits: nothing to
    escape, the same bytes ``render`` gives), all of an answer's at once (one pass per
    format piece); absent constants' by ``render``, kept (the same texts' constants come
    again)."""

    def __init__(self, render):
        mark = b"Zq0mark"
        self.render = render
        self.forms = tuple(f.replace(b"%", b"%%").replace(mark, b"%s") if type(f) is bytes else f
                           for f in render("_:" + mark.decode()))
        self.which = {j for j, f in enumerate(self.forms) if type(f) is bytes and b"%s" in f}
        self.kept: dict[bytes, tuple] = {}

    def __call__(self, nt: bytes) -> tuple:
        return self.many({0: nt})[0]

    def many(self, local: dict[int, bytes]) -> dict[int, tuple]:
        """id -> fragments of each of an answer's own terms (``local``: id -> N-Triples bytes)."""
        out = {}
        bids = []
        labels = []
        for i, nt in local.items():
            if nt[:2] == b"_:":
                bids.append(i)
                labels.append(nt[2:])
                continue
            got = self.kept.get(nt)
            if got is None:
                got = self.render(nt.decode("utf-8"))
                if len(self.kept) < _ABSENT_KEPT:
                    self.kept[nt] = got
            out[i] = got
        if bids:
            n = len(bids)
            which = self.which
            cols = [[f % x for x in labels] if j in which else (f,) * n for j, f in enumerate(self.forms)]
            out.update(zip(bids, zip(*cols, strict=True), strict=True))
        return out


_jsonld_own = _OwnRenderer(jsonld_fragments)


#: rdf:type's JSON-LD predicate fragment (the general writer orders it first among a subject's)
_TYPE_PRED = jsonld_fragments(RDF_TYPE_KEY)[1]


def graph_jsonld(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The JSON-LD (expanded form) body of a small CONSTRUCT/DESCRIBE ``result``, or None
    (the general writer answers): the general writer's bytes (its rows' order: by subject
    id, then predicate id with rdf:type first, stable), from each term's kept fragments."""
    got = _cells(result, fragments, JSONLD, jsonld_fragments, _jsonld_own)
    if got is None:
        return None
    flat, cells = got
    n = len(flat) // 3
    if n == 0:
        return b"[]"
    sl, pl = flat[0::3], flat[1::3]
    pk = [-1 if cells[3 * i + 1][1] == _TYPE_PRED else pl[i] for i in range(n)]
    keys = list(zip(sl, pk, strict=True))
    # (one subject's rows read from the store are in this order already: no sort)
    order = range(n) if keys == sorted(keys) else sorted(range(n), key=keys.__getitem__)
    out = [b"["]
    ps = pp = None
    for i in order:
        s, p = sl[i], pl[i]
        if s != ps:
            if ps is not None:
                out.append(b"]},\n")
            out += [cells[3 * i][0], cells[3 * i + 1][1], cells[3 * i + 2][2]]
            ps, pp = s, p
        elif p != pp:
            out += [b"],", cells[3 * i + 1][1], cells[3 * i + 2][2]]
            pp = p
        else:
            out += [b",", cells[3 * i + 2][2]]
    out.append(b"]}]\n")
    body = b"".join(out)
    check_size(len(body), max_bytes)
    return body


_rdfxml_own = _OwnRenderer(rdfxml_fragments)


_RDFXML_HEAD = b'<?xml version="1.0" encoding="UTF-8"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\n'


def graph_rdfxml(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The RDF/XML body of a small CONSTRUCT/DESCRIBE ``result``, or None (the general
    writer answers, or refuses a predicate RDF/XML cannot write): one ``rdf:Description``
    per run of rows of one subject, one property element per triple with its namespace
    declared on it (no head of the whole graph's namespaces to build), blank nodes as
    ``rdf:nodeID="b<label>"``. The same graph as the general writer's, not the same bytes."""
    got = _cells(result, fragments, RDFXML, rdfxml_fragments, _rdfxml_own)
    if got is None:
        return None
    flat, cells = got
    n = len(flat) // 3
    if n == 0:
        return None  # (the general writer's empty document)
    out = [_RDFXML_HEAD]
    close = b"\t</rdf:Description>\n"
    ps = None
    for i in range(n):
        s = flat[3 * i]
        pred = cells[3 * i + 1][3]
        if pred is None:
            return None
        if s != ps:
            if ps is not None:
                out.append(close)
            out.append(cells[3 * i][0])
            ps = s
        _, ob, lit, _ = cells[3 * i + 2]
        out += [pred[0], ob, pred[1]] if lit else [pred[0], ob]
    out.append(close + b"</rdf:RDF>\n")
    body = b"".join(out)
    check_size(len(body), max_bytes)
    return body


#: the small-answer writer of each media type (the lane asks it first; None: the general writer)
WRITERS = {formats.SPARQL_JSON: select_json, formats.SPARQL_XML: select_xml, formats.CSV: select_csv,
           formats.TSV: select_tsv, formats.NTRIPLES: graph_ntriples,
           formats.TURTLE: graph_turtle, formats.JSONLD: graph_jsonld, formats.RDFXML: graph_rdfxml}


def small_body(result, media_type: str, max_bytes: int | None = None) -> bytes | None:
    """The body of a small answer ``result`` as ``media_type`` from the kept term
    fragments, or None: another media type, not small, or holding computed terms
    (the caller uses the general writer, :func:`engine.exec.serialize.serialize`)."""
    w = WRITERS.get(media_type)
    return None if w is None else w(result, max_bytes)


def _runs_ntriples(runs: list, terms, max_bytes, fragments: TermFragments) -> bytes | None:
    """The N-Triples body of triples given as runs of one subject's edges
    (``engine.plan.point.Described``: (subject, packed edges, their (neighbour, pid)
    int32 halves as a list)): per run one ``%`` format of the subject's line with the
    kept terms of its predicates and objects, no triple array, no row of three ids."""
    nt = fragments.table(terms, NT)
    out = []
    for s, _, flat in runs:
        try:
            subj = nt[s]
            f = list(map(nt.__getitem__, flat))
        except KeyError:
            nt = _fill(nt, terms, {s, *flat}, _nt_bytes)
            if nt is None:
                return None
            subj = nt[s]
            f = list(map(nt.__getitem__, flat))
        if EDGE_NB == 0:  # (neighbour first in each pair: the line wants the predicate first)
            f[0::2], f[1::2] = f[1::2], f[0::2]
        out.append((subj.replace(b"%", b"%%") + b" %s %s .\n") * (len(f) >> 1) % tuple(f))
    body = out[0] if len(out) == 1 else b"".join(out)
    check_size(len(body), max_bytes)
    return body


# ---------------------------------------------------------------- ORDER BY of a few rows

#: ORDER BY over at most this many rows is ordered here (plain Python over each
#: distinct term's order key) instead of by the vectorized ranking, whose fixed cost
#: (a dozen numpy calls per condition: distinct ids, kinds, numeric values, lexsort)
#: is most of a selective ordered query's time; below engine.exec.functions'
#: _CLASSIFY_MIN_ROWS, so both rank the distinct terms the same way
SMALL_ORDER_ROWS = 48
_EXACT = 2.0 ** 53


#: per store dictionary (ids keep their meaning: append-only): store id -> (its
#: ORDER BY key, its numeric value when its key is a typed literal's, else None), so
#: the terms a selective ordered query answers again (the same names, courses) are
#: not decoded and classified per query; at most MAX_TERMS ids (then restarted)
_ORDER_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: (weak reference to the dictionary last asked for, its table): the usual hit
#: without the weak dictionary's lookup
_LAST_ORDER: tuple = (lambda: None, None)


def _order_table(ctx) -> dict:
    global _LAST_ORDER
    d = getattr(ctx, "dictionary", None)
    ref, table = _LAST_ORDER
    if d is not None and ref() is d and len(table) <= MAX_TERMS:
        return table
    try:
        table = _ORDER_KEYS.get(d)
        if table is None or len(table) > MAX_TERMS:
            table = _ORDER_KEYS[d] = {}
        _LAST_ORDER = (weakref.ref(d), table)
    except TypeError:  # (no dictionary to key by: nothing kept)
        return {}
    return table


def _order_entries(valid: list[int], ctx) -> list[tuple]:
    """(order key, numeric value or None) of each bound id of ``valid``: store ids
    from the kept table, the others (and the kept table's misses) decoded now."""
    table = _order_table(ctx)
    got = [table.get(i) for i in valid]
    miss = [i for i, g in zip(valid, got, strict=True) if g is None]
    if not miss:
        return got
    # (imported here, on a miss only: two import statements cost ~2 µs a call)
    from engine.exec.values import order_key  # noqa: PLC0415
    from engine.terms import from_key  # noqa: PLC0415

    keys = store_keys(ctx, miss)
    # (a numeric literal's key ends in its XSD datatype: a key without "^^<" is no number)
    typed = [j for j, k in enumerate(keys) if k is not None and k[:1] == '"' and '"^^<' in k]
    nums: list = [None] * len(miss)
    if typed:
        vals = ctx.numeric(np.asarray([miss[j] for j in typed], dtype=np.int64)).tolist()
        for j, x in zip(typed, vals, strict=True):
            nums[j] = x
    new = {}
    for i, k, x in zip(miss, keys, nums, strict=True):
        new[i] = (order_key(None if k is None else from_key(k)), x)
    for i, e in new.items():
        if 0 <= i < LOCAL_BASE:
            table[i] = e
    return [g if g is not None else new[i] for i, g in zip(valid, got, strict=True)]


def _small_ranks(ids: list[int], ctx) -> dict[int, int]:
    """id -> rank of the distinct ``ids`` in the SPARQL total order, exactly as
    ``engine.exec.functions._unique_ranks`` ranks them below its block threshold:
    unbound first; when every bound one is a finite numeric literal (exact in a
    double), by value then id; otherwise by the term's order key then id."""
    uniq = sorted(set(ids))
    valid = [i for i in uniq if i >= 0]
    entries = _order_entries(valid, ctx) if valid else []
    if all(x is not None and x == x and abs(x) < _EXACT for _, x in entries):
        order = [i for i in uniq if i < 0] + [i for (_, x), i in sorted(zip(entries, valid, strict=True),
                                                                         key=_by_value)]
        return {i: r for r, i in enumerate(order)}
    sk = [((0,), i) for i in uniq if i < 0]
    sk += [(e[0], i) for e, i in zip(entries, valid, strict=True)]
    sk.sort()
    return {i: r for r, (_, i) in enumerate(sk)}


def _by_value(pair):
    """(numeric value, id): the vectorized ranking's order of finite numerics."""
    return pair[0][1], pair[1]


def small_order_permutation(keys: list[tuple[np.ndarray, bool]], ctx) -> np.ndarray | None:
    """The stable permutation ``engine.exec.functions.order_permutation`` gives for
    the (ids, ascending) conditions of at most :data:`SMALL_ORDER_ROWS` rows (None:
    more rows, the vectorized ranking orders them): each condition's distinct terms
    ranked once, the rows sorted by their rank tuples (Python's sort is stable, as
    np.lexsort is)."""
    if not keys:
        return None
    n = len(keys[0][0])
    if n > SMALL_ORDER_ROWS:
        return None
    perm = _order_perm([(np.asarray(ids, dtype=np.int64).tolist(), asc) for ids, asc in keys], ctx, n)
    return np.asarray(perm, dtype=np.int64)


def _order_perm(keys: list[tuple[list[int], bool]], ctx, n: int) -> list[int]:
    """The stable permutation of ``n`` rows ordered by the (ids, ascending) conditions
    (Python sequences): each condition's distinct terms ranked once, the rows sorted by
    their rank tuples (Python's sort is stable, as np.lexsort is)."""
    cols = []
    for il, asc in keys:
        rank = _small_ranks(il, ctx)
        cols.append([rank[i] for i in il] if asc else [-rank[i] for i in il])
    if len(cols) == 1:
        return sorted(range(n), key=cols[0].__getitem__)
    rows = list(zip(*cols, strict=True))
    return sorted(range(n), key=rows.__getitem__)


def ordered_lists(fast, compiled, rows: list[tuple], ctx) -> tuple[list, int] | None:
    """``(columns, rows)`` (as :func:`engine.exec.evaluate.run_fast_lists` gives them)
    of a SELECT ... ORDER BY plain variables whose BGP solutions ``rows`` (tuples in
    the program's slot order) are at most :data:`SMALL_ORDER_ROWS`: ordered here
    (:func:`small_order_permutation`'s order), then projected, DISTINCT, OFFSET/LIMIT,
    as the general operators do; None for more rows (the general operators)."""
    n = len(rows)
    if n > SMALL_ORDER_ROWS:
        return None
    prog, out = compiled
    if n == 0:
        return [() for _ in out], 0
    slots = prog.slots
    tcols = list(zip(*rows, strict=True)) if slots else []
    if n > 1 and tcols:
        # (a variable the BGP does not bind is unbound in every row: a tie, no key)
        keys = [(tcols[slots.index(v)], asc) for v, asc in fast.order if v in slots]
        if keys:
            take = itemgetter(*_order_perm(keys, ctx, n))
            tcols = [take(c) for c in tcols]
    return project_lists(fast, tcols, out, n)


# ---------------------------------------------------------------- CONSTRUCT of a few solutions

_SUBJECT_KINDS = (0, 1)  # engine.kv.dictionary kinds: IRI, blank node


def construct_triples(compiled, terms, max_rows: int) -> QueryResult | None:
    """A CONSTRUCT's triples from its fast BGP's solutions run tuple at a time, as
    :func:`engine.exec.evaluate.construct` makes them (template triple by template
    triple over the solutions in order, subjects IRIs or blank nodes, predicates
    IRIs, each triple once); None when the solutions are not few (the general path
    runs the query). ``compiled``: (program, template triples of ``("c", id)`` /
    ``("v", slot or None)`` / ``("b", label)`` / ``("k", absent key)``: the last two
    made per answer in a term table of its own, :func:`_own_terms`).

    The kind rule is settled from the patterns where it can be: a template term the
    WHERE also holds as a subject or predicate is an IRI or blank node in every
    solution, one it holds as a predicate an IRI; only the other template terms have
    their kinds read (one dictionary call for all of them)."""
    prog, tpl = compiled
    rows, k = prog.run([()], min(max_rows, SMALL_ROWS))
    if k < len(prog.steps):
        return None
    if not rows:
        return QueryResult(form="CONSTRUCT", terms=terms, triples=_NO_TRIPLES)
    n = len(rows)
    charge_rows(n * len(tpl), 3 * 2 + 3, "CONSTRUCT")
    fresh = None
    if type(tpl) is OwnTemplate:  # (the template's own terms: query-local ids of this answer)
        fresh = _own_terms(tpl, n)
        plan = tpl.plan
        if plan is None or plan[0] is not prog:  # (made once per rebound program: the same each answer)
            plan = tpl.plan = (prog, *_template_plan(prog, tpl.resolved))
        _, check, trows = plan
    else:
        check, trows = _template_plan(prog, tpl)
    out: list[tuple] = []
    have: set = set()
    for (a, x), (b, y), (c, z) in trows:
        if a == "b" or c == "b":  # the label's blank node of each solution
            bs = fresh[x] if a == "b" else None
            bo = fresh[z] if c == "b" else None
            for i, r in enumerate(rows):
                tr = (bs[i] if a == "b" else x if a == "c" else r[x], y if b == "c" else r[y],
                      bo[i] if c == "b" else z if c == "c" else r[z])
                if tr not in have:
                    have.add(tr)
                    out.append(tr)
            continue
        for r in rows:
            tr = (x if a == "c" else r[x], y if b == "c" else r[y], z if c == "c" else r[z])
            if tr not in have:
                have.add(tr)
                out.append(tr)
    if out and check:
        ids = sorted({v for tr in out for v in tr[:2]})
        if fresh is not None and ids[-1] >= LOCAL_BASE:  # (this answer's own terms: the kind is their key's first byte)
            store = [i for i in ids if i < LOCAL_BASE]
            kinds = dict(zip(store, terms.kinds(np.asarray(store, dtype=np.int64)).tolist(), strict=True))
            kinds.update((i, _KIND_OF_BYTE[fresh.keys[i][0]]) for i in ids if i >= LOCAL_BASE)
        else:
            kinds = dict(zip(ids, terms.kinds(np.asarray(ids, dtype=np.int64)).tolist(), strict=True))
        out = [tr for tr in out if kinds[tr[0]] in _SUBJECT_KINDS and kinds[tr[1]] == 0]
    return Constructed(terms, [x for tr in out for x in tr], len(out), None if fresh is None else fresh.keys)


def _template_plan(prog, tpl) -> tuple[bool, list]:
    """(whether the triples' subjects and predicates need their kinds read, the template
    triples a solution can make: none of a variable the WHERE does not bind) of a
    resolved template over ``prog``'s solutions. The kind rule is settled from the
    patterns where it can be: a template term the WHERE also holds as a subject or
    predicate is an IRI or blank node in every solution, one it holds as a predicate an
    IRI; a fresh blank node is a subject, an absent constant (a query-local id) in a
    predicate's place an IRI (the grammar's)."""
    slots = prog.slots
    subj_like = set()
    pred_like = set()
    for s, p, _ in prog.rtriples:
        subj_like.add(s)
        subj_like.add(p)
        pred_like.add(p)
    trows = []
    check_s = check_p = False
    for tr in tpl:
        (a, x), (b, y), (c, z) = tr
        if (a == "v" and x is None) or (b == "v" and y is None) or (c == "v" and z is None):
            continue  # a variable the WHERE does not bind: never a triple
        if not check_s:
            check_s = a != "b" and (a, slots[x] if a == "v" else x) not in subj_like
        if not check_p:
            check_p = (b, slots[y] if b == "v" else y) not in pred_like and not (b == "c" and y >= LOCAL_BASE)
        trows.append(tr)
    return check_s or check_p, trows


#: a term's kind (engine.kv.dictionary: 0 IRI, 1 blank node, 2 literal) by the first byte
#: of its N-Triples fragment
_KIND_OF_BYTE = {ord("<"): 0, ord("_"): 1, ord('"'): 2}


class OwnTemplate(tuple):
    """A compiled CONSTRUCT template (``engine.database.compile_construct``) holding
    terms each answer makes in a term table of its own (``("b", label)``: a fresh blank
    node per solution, ``("k", key)``: a constant the store does not hold): its type
    tells :func:`construct_triples` so without a scan of the template per answer.

    Made (at compile, and by each rebinding to a new constant) with what every answer
    of it shares: the number of labels (``labels``), the template with each absent
    constant resolved to its query-local id -- the j-th distinct one LOCAL_BASE + j in
    every answer, the labels' blank nodes after them (``resolved``) -- and those ids'
    N-Triples fragments (``absent``)."""

    def __new__(cls, rows):
        self = super().__new__(cls, rows)
        k = 0
        ids: dict[str, int] = {}
        for row in self:
            for e in row:
                if e[0] == "b":
                    if e[1] >= k:
                        k = e[1] + 1
                elif e[0] == "k" and e[1] not in ids:
                    ids[e[1]] = LOCAL_BASE + len(ids)
        self.labels = k
        self.absent = {i: _absent_nt(key) for key, i in ids.items()}
        #: what the absent constants' keys hold in memory (charged per answer, as a term table does)
        self.absent_bytes = sum(len(key) + _KEY_OVERHEAD for key in ids)
        self.resolved = tuple(tuple(("c", ids[e[1]]) if e[0] == "k" else e for e in row)
                              for row in self) if ids else tuple(self)
        #: (the program it was last answered over, its _template_plan): kept per rebound program
        self.plan = None
        return self

    def __getnewargs__(self):  # (a copy or pickle makes it from its rows, as a rebinding does)
        return (tuple(self),)


#: a template constant the store does not hold (its key) -> its N-Triples bytes: the same
#: texts' constants come again (bounded: past _ABSENT_KEPT keys, rendered each time)
_ABSENT_NT: dict[str, bytes] = {}
_ABSENT_KEPT = 4096
#: what one query-local key holds in memory besides its characters (QueryContext's charge)
_KEY_OVERHEAD = 120


def _absent_nt(key: str) -> bytes:
    b = _ABSENT_NT.get(key)
    if b is None:
        b = _nt_bytes(key)
        if len(_ABSENT_NT) < _ABSENT_KEPT:
            _ABSENT_NT[key] = b
    return b


class _Own(list):
    """A CONSTRUCT answer's own terms (:func:`_own_terms`): one id sequence per blank node
    label (an id per solution) and the N-Triples fragment of every query-local id, in id
    order (``keys``)."""

    __slots__ = ("keys",)


def _own_terms(tpl: OwnTemplate, n: int) -> _Own:
    """What the general CONSTRUCT makes in its query's term table, made here without one
    (no ``QueryContext`` per answer; :class:`Constructed` makes one only when a general
    writer asks for its ``terms``): a fresh blank node per template label and solution,
    labelled as ``QueryContext.fresh_bnodes`` labels them (the process's seed and id and
    a count shared with every query: distinct across solutions, labels and answers),
    after the template's absent constants' ids (``OwnTemplate.resolved``); their key
    memory charged to the running budget, as the term table charges it."""
    out = _Own()
    keys = out.keys = dict(tpl.absent)
    held = tpl.absent_bytes
    k = tpl.labels
    if k:
        tag = bnode_tag_bytes()
        start = LOCAL_BASE + len(keys)
        if n == 1:
            for j in range(1, k + 1):
                keys[start] = b"%sc%dx0" % (tag, j)
                out.append((start,))
                start += 1
        else:
            for j in range(1, k + 1):
                ids = range(start, start + n)
                keys.update(zip(ids, [b"%sc%dx%d" % (tag, j, i) for i in range(n)], strict=True))
                out.append(ids)
                start += n
        held += k * n * (len(tag) + 12 + _KEY_OVERHEAD)
    budget = current_budget()
    if budget is not None:
        budget.hold(held, "blank nodes")
    return out


class Constructed(QueryResult):
    """A CONSTRUCT answered tuple at a time (:func:`construct_triples`): its triples as
    one flat list of store ids (s, p, o, s, p, o...), which the small N-Triples writer
    reads as it is (:func:`graph_ntriples`: no array made and turned back into a list);
    the ``triples`` array the other writers read is built from it on first use.

    An answer with its own terms (fresh blank nodes, absent constants: ``local``, their
    N-Triples fragments by query-local id) keeps the store's term table as ``base``; the
    small writers read store terms there and their own from ``local``; ``terms``, a term
    table holding both, is made only when something else (a general writer) asks."""

    # (the fields other than the triples are constants: class attributes, as point.Described's)
    form = "CONSTRUCT"
    vars = ()
    columns = ()
    boolean = None
    ordered = False
    n_rows = 0

    def __init__(self, terms, flat: list[int], n: int, local: dict | None = None):
        self.base = terms
        self._terms = terms if local is None else None
        self.flat = flat
        self.n = n
        self._triples = None
        #: the answer's own terms' N-Triples fragments by (query-local) id, in id order; None: none
        self.local = local

    def __len__(self) -> int:
        return self.n

    @property
    def terms(self):
        t = self._terms
        if t is None:
            t = self._terms = _own_table(self.base, self.local)
        return t

    @property
    def triples(self) -> np.ndarray:
        t = self._triples
        if t is None:
            t = self._triples = np.array(self.flat, dtype=np.int64).reshape(-1, 3)
        return t


def _own_table(base, local: dict[int, bytes]):
    """A term table over ``base``'s snapshot (its shared key cache) holding an answer's own
    terms at their query-local ids (``local``: ids from LOCAL_BASE on, in order), for the
    writers that read keys (already charged: :func:`_own_terms`)."""
    from engine.exec.evaluate import QueryContext  # noqa: PLC0415

    ctx = QueryContext(base.snapshot, term_cache=base._term_cache, query_memory=0)
    keys = [b.decode("utf-8") for b in local.values()]
    ctx._local_keys.extend(keys)
    ctx._local.update(zip(keys, range(LOCAL_BASE, LOCAL_BASE + len(keys)), strict=True))
    return ctx


_NO_TRIPLES = np.zeros((0, 3), dtype=np.int64)
_NO_TRIPLES.flags.writeable = False
