"""SPARQL JSON (small SELECT answers) and N-Triples (small graphs) from rendered
terms kept between queries.

A selective query answers a few rows of terms that the next queries answer
again (the same professors, courses, departments). The general writer
(:mod:`engine.exec.serialize`) decodes every id through the dictionary and
renders it for each answer; here each store id's JSON object
(``{"type":"uri","value":...}``) is rendered once per snapshot term table and
the answer is joined from those bytes; likewise each id's N-Triples term for
a small graph (a DESCRIBE or CONSTRUCT of one entity). The bytes are those
``engine.exec.serialize`` writes (same renderer per term, same layout:
orjson's compact form of the same document; one ``s p o .`` line per triple).
"""

from __future__ import annotations

import threading

import orjson

from engine.exec.context import LOCAL_BASE
from engine.exec.result import UNBOUND
from engine.exec.serialize import _json_bytes, _nt_term, check_size

#: answers with more cells (graphs: triples) than this go to the general writer
MAX_CELLS = 256
#: rendered terms kept (the table restarts when it is full)
MAX_TERMS = 1 << 16


class TermFragments:
    """Store id -> its SPARQL JSON object's bytes, for one snapshot term table."""

    def __init__(self):
        self.terms = None
        self.frags: dict[int, bytes] = {}
        self.nt: dict[int, bytes] = {}
        self.heads: dict[tuple, tuple[bytes, list[bytes]]] = {}
        self.lock = threading.Lock()

    def table(self, terms) -> dict[int, bytes]:
        if self.terms is not terms:  # a new snapshot: ids are its dictionary's
            with self.lock:
                if self.terms is not terms:
                    self.frags = {}
                    self.nt = {}
                    self.terms = terms
        return self.frags

    def head(self, names: tuple) -> tuple[bytes, list[bytes]]:
        h = self.heads.get(names)
        if h is None:
            if len(self.heads) >= 1024:
                self.heads = {}
            h = self.heads[names] = (b'{"head":{"vars":' + orjson.dumps(list(names)) + b'},"results":{"bindings":[',
                                     [orjson.dumps(v) + b":" for v in names])
        return h


_FRAGS = TermFragments()


def select_json(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The SPARQL JSON body of a small SELECT ``result`` over store ids, or None
    (not small, or holding computed terms): the caller uses the general writer."""
    if result.form != "SELECT" or not result.vars:
        return None
    n = len(result)
    names = tuple(result.vars)
    if n * len(names) > MAX_CELLS:
        return None
    cols = [c.tolist() for c in result.columns]
    head, labels = fragments.head(names)
    frags = fragments.table(result.terms)
    # UNBOUND cells are skipped: the fragment of id -1 is never looked up
    lc = list(zip(labels, cols, strict=True))
    try:  # usually every term is rendered already: no scan for missing ones
        rows = [b"{" + b",".join([lab + frags[c[r]] for lab, c in lc if c[r] != UNBOUND]) + b"}" for r in range(n)]
    except KeyError:
        frags = _fill(fragments, "frags", result.terms, {i for c in cols for i in c}, _json_bytes)
        if frags is None:
            return None
        rows = [b"{" + b",".join([lab + frags[c[r]] for lab, c in lc if c[r] != UNBOUND]) + b"}" for r in range(n)]
    doc = head + b",".join(rows) + b"]}}"
    check_size(len(doc), max_bytes)
    return doc


def _nt_bytes(key: str) -> bytes:
    return _nt_term(key).encode("utf-8")


def _fill(fragments: TermFragments, which: str, terms, ids: set, render):
    """The fragments table ``which`` with every id of ``ids`` (UNBOUND aside)
    rendered; None when one is a computed term (not cached: the general writer)."""
    table = getattr(fragments, which)
    missing = [i for i in ids if i not in table and i != UNBOUND]
    if missing:
        if any(i < 0 or i >= LOCAL_BASE for i in missing):
            return None
        missing.sort()
        keys = terms.keys(missing)
        if len(table) + len(missing) > MAX_TERMS:
            table = {}
            setattr(fragments, which, table)
        for i, k in zip(missing, keys, strict=True):
            if k is None:
                return None
            table[i] = render(k)
    return table


def graph_ntriples(result, max_bytes: int | None = None, fragments: TermFragments = _FRAGS) -> bytes | None:
    """The N-Triples body of a small CONSTRUCT/DESCRIBE ``result`` over store ids,
    or None (the caller uses the general writer)."""
    t = result.triples
    if t is None or len(t) > MAX_CELLS:
        return None
    if len(t) == 0:
        return b""
    rows = t.tolist()
    fragments.table(result.terms)
    nt = _fill(fragments, "nt", result.terms, {i for r in rows for i in r}, _nt_bytes)
    if nt is None:
        return None
    doc = b"".join([b"%s %s %s .\n" % (nt[s], nt[p], nt[o]) for s, p, o in rows])
    check_size(len(doc), max_bytes)
    return doc
