"""SPARQL JSON for small SELECT answers from rendered terms kept between queries.

A selective query answers a few rows of terms that the next queries answer
again (the same professors, courses, departments). The general writer
(:mod:`engine.exec.serialize`) decodes every id through the dictionary and
renders it for each answer; here each store id's JSON object
(``{"type":"uri","value":...}``) is rendered once per snapshot term table and
the answer is joined from those bytes. The bytes are those
``engine.exec.serialize`` writes (same renderer per term, same layout:
orjson's compact form of the same document).
"""

from __future__ import annotations

import threading

import orjson

from engine.exec.context import LOCAL_BASE
from engine.exec.result import UNBOUND
from engine.exec.serialize import _json_bytes, check_size

#: answers with more cells than this go to the general writer
MAX_CELLS = 256
#: rendered terms kept (the table restarts when it is full)
MAX_TERMS = 1 << 16


class TermFragments:
    """Store id -> its SPARQL JSON object's bytes, for one snapshot term table."""

    def __init__(self):
        self.terms = None
        self.frags: dict[int, bytes] = {}
        self.heads: dict[tuple, tuple[bytes, list[bytes]]] = {}
        self.lock = threading.Lock()

    def table(self, terms) -> dict[int, bytes]:
        if self.terms is not terms:  # a new snapshot: ids are its dictionary's
            with self.lock:
                if self.terms is not terms:
                    self.frags = {}
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
    frags = fragments.table(result.terms)
    missing = {i for c in cols for i in c if i not in frags and i != UNBOUND}
    if missing:
        if any(i < 0 or i >= LOCAL_BASE for i in missing):
            return None
        ids = sorted(missing)
        keys = result.terms.keys(ids)
        if len(frags) + len(ids) > MAX_TERMS:
            frags = fragments.frags = {}
        for i, k in zip(ids, keys, strict=True):
            if k is None:
                return None
            frags[i] = _json_bytes(k)
    head, labels = fragments.head(names)
    rows = []
    for r in range(n):
        cells = [labels[j] + frags[c[r]] for j, c in enumerate(cols) if c[r] != UNBOUND]
        rows.append(b"{" + b",".join(cells) + b"}")
    doc = head + b",".join(rows) + b"]}}"
    check_size(len(doc), max_bytes)
    return doc
