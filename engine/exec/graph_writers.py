"""Turtle, TriG, RDF/XML and JSON-LD written straight from a graph's term-id columns.

Why: these formats went from term ids to an N-Triples body and pyoxigraph parsed that text
back to write them, 1.5-3.4x pyoxigraph's own ``Store.dump`` (docs/BENCHMARKS.md). Here nothing
is parsed:

* the distinct terms of the rows (one counting pass over the ids) have their keys read once
  from the dictionary; byte scans over those keys find each term's kind and the byte ranges
  of its parts (IRI, label, lexical form, language, datatype, an IRI's namespace and local
  name), and each term's fragment for a format is one element-wise Arrow join of constant
  pieces and slices of its key. No Python runs per term, except for the rare blank node
  label outside the N-Triples label syntax and per distinct predicate of RDF/XML (its
  QName). Keys are canonical N-Triples (:mod:`engine.terms`: inside a literal only
  backslash, quote, newline and carriage return are escaped), so Turtle takes a literal's
  lexical form as it is, JSON escapes only raw control characters, and XML unescapes those
  four and escapes ``& < >``: a byte rewrite (:func:`rewrite`) that copies the text between
  the few special bytes with one ``take``.
* rows are sorted by subject, then predicate (``rdf:type`` first) with one numpy sort, and
  the body is assembled a chunk of rows at a time by one ``take`` gathering every piece of
  every row (separator, subject, predicate, object fragments) from one table: a subject is
  written once per group, a predicate once per subject (Turtle ``;`` and ``,``, RDF/XML
  ``rdf:Description`` elements, JSON-LD node objects).
* Turtle/TriG prefixes: the namespaces of the IRIs (and datatype IRIs) whose local name a
  prefixed name can write, counted over the distinct terms; the common ones and the
  caller's by name, the (at most :data:`MAX_NEW_PREFIXES`) most used others as
  ``ns1``, ``ns2`` ... (or their last path word).
* graphs of at most :data:`SMALL_ROWS` rows (a DESCRIBE of one resource) skip the fixed
  cost of those kernel calls: :class:`SmallGraph` writes them term by term in Python, to
  the same bytes.

Bounds: the exact size of the body is known before any row is assembled (the fragments'
lengths gathered by row) and checked against ``max_bytes`` and the query's memory budget
(:func:`engine.exec.serialize.check_size`); the key bytes of the distinct terms and the
rows' working arrays count against the memory budget; a deadline check runs between
chunks of rows.
"""

from __future__ import annotations

import operator
import re
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.exec.bindings import distinct_inverse
from engine.exec.context import LOCAL_BASE, charge_rows
from engine.exec.render import _slices
from engine.terms import RDF, RDF_TYPE_KEY, XSD

_BIN = pa.large_binary()

#: rows assembled per chunk (one take each: bounds the index arrays and the step between deadline checks)
CHUNK_ROWS = 1 << 15

#: kinds of a term (from its key's first bytes)
IRI, BNODE, PLAIN, LANG, DT = range(5)

COMMON_PREFIXES = {
    "rdf": RDF,
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "xsd": XSD,
    "owl": "http://www.w3.org/2002/07/owl#",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "dc": "http://purl.org/dc/terms/",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "schema": "http://schema.org/",
    "sosa": "http://www.w3.org/ns/sosa/",
    "ssn": "http://www.w3.org/ns/ssn/",
    "geo": "http://www.w3.org/2003/01/geo/wgs84_pos#",
    "sd": "http://www.w3.org/ns/sparql-service-description#",
    "void": "http://rdfs.org/ns/void#",
    "prov": "http://www.w3.org/ns/prov#",
}

#: namespaces of their own a Turtle/TriG answer declares at most (the most used ones): a
#: prefix per namespace of a data set with many (LUBM: one per professor) reads badly
MAX_NEW_PREFIXES = 16

_PN_PREFIX_OK = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")
_BNODE_OK = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_-])?\Z")
_BNODE_OK_RE2 = r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_-])?$"
#: a blank node label that is also an XML NCName (RDF/XML rdf:nodeID)
_NCNAME_LABEL_RE2 = r"^[A-Za-z_][A-Za-z0-9_.-]*$"


def bnode_label(label: str) -> str:
    """A blank node label in N-Triples/Turtle label syntax: itself when it is, else ``x`` + its
    UTF-8 in hex (the N-Triples writer's rule, so one graph's labels agree across formats)."""
    if _BNODE_OK.match(label):
        return label
    return "x" + label.encode("utf-8").hex()


# --------------------------------------------------------------------------
# Arrow buffers
# --------------------------------------------------------------------------


def _as_bin(arr: pa.Array) -> pa.Array:
    t = arr.type
    if t == _BIN:
        return arr
    if t in (pa.large_string(),):
        return arr.view(_BIN)
    return arr.cast(_BIN)


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Buffer]:
    """(offsets relative to the data's first byte, the data as uint8, its buffer) of a large binary array."""
    n = len(arr)
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    data = arr.buffers()[2]
    if data is None or n == 0 or offs[-1] == offs[0]:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8), pa.py_buffer(b"")
    base = int(offs[0])
    data = data.slice(base, int(offs[-1]) - base)
    return offs - base, np.frombuffer(data, dtype=np.uint8), data


def _lit(b: bytes) -> pa.Scalar:
    return pa.scalar(b, _BIN)


class _Consts:
    """A table of constant byte strings, each added once, and its index."""

    def __init__(self) -> None:
        self.items: list[bytes] = [b""]
        self.index: dict[bytes, int] = {b"": 0}

    def __call__(self, b: bytes) -> int:
        i = self.index.get(b)
        if i is None:
            i = self.index[b] = len(self.items)
            self.items.append(b)
        return i



def _frags(consts: _Consts, p0, x, p1, y, p2) -> pa.Array:
    """Each term's fragment ``p0 + x + p1 + y + p2`` (p*: constant indexes per term, x and y arrays)."""
    d = len(x)
    ps = pa.array(consts.items, _BIN).take(pa.array(np.concatenate([p0, p1, p2])))
    return pc.binary_join_element_wise(ps.slice(0, d), x, ps.slice(d, d), y, ps.slice(2 * d, d), _lit(b""))


# --------------------------------------------------------------------------
# Byte rewrites: escaping (and a literal key's unescaping) without Python per term
# --------------------------------------------------------------------------

#: key escapes inside a literal (engine.terms): the escaped byte -> the character it stands for
_KEY_ESCAPES = {ord("\\"): "\\", ord('"'): '"', ord("n"): "\n", ord("r"): "\r"}


def _json_ctrl() -> dict[int, bytes]:
    named = {8: b"\\b", 9: b"\\t", 10: b"\\n", 12: b"\\f", 13: b"\\r"}
    return {c: named.get(c, b"\\u%04x" % c) for c in range(0x20)}


class Rewrite:
    """A byte rewrite for :func:`rewrite`: ``repl`` byte -> its replacement and, with
    ``unesc``, a key escape (backslash + byte) -> the replacement of that byte; the lookup
    tables are built once."""

    def __init__(self, repl: dict[int, bytes], unesc: dict[int, bytes] | None = None):
        self.repl, self.unesc = repl, unesc
        items = list(repl.values()) + list((unesc or {}).values())
        self.items = pa.array(items, _BIN)
        self.rlen = np.array([len(x) for x in items], dtype=np.int64)
        self.special = np.zeros(256, dtype=bool)  # bytes that start something to rewrite
        self.special[list(repl)] = True
        self.single = np.full(256, -1, dtype=np.int64)
        self.single[list(repl)] = np.arange(len(repl))
        self.esc = np.full(256, -1, dtype=np.int64)
        if unesc is not None:
            self.special[0x5C] = True
            self.esc[list(unesc)] = len(repl) + np.arange(len(unesc))


#: JSON string text of a literal key's lexical form: its escapes are JSON's own; raw control characters
JSON_BODY = Rewrite(_json_ctrl())
#: JSON string text of an IRI or label (no escapes of its own)
JSON_TEXT = Rewrite({**_json_ctrl(), ord('"'): b'\\"', ord("\\"): b"\\\\"})
_XML_BASE = {ord("&"): b"&amp;", ord("<"): b"&lt;", ord(">"): b"&gt;", 13: b"&#13;"}
#: XML element content of a literal key's lexical form (key escapes undone; CR kept by a reference)
XML_BODY = Rewrite(_XML_BASE, {c: _XML_BASE.get(ord(ch), ch.encode()) for c, ch in _KEY_ESCAPES.items()})
#: an XML attribute value (whitespace other than space by reference: attribute values are normalized)
XML_ATTR = Rewrite({**_XML_BASE, ord('"'): b"&quot;", 9: b"&#9;", 10: b"&#10;"})


def rewrite(arr: pa.Array, how: Rewrite, only: np.ndarray | None = None) -> pa.Array:
    """``arr`` (large binary) rewritten by ``how``; ``only`` (bool per element): just those elements.

    The text between special bytes is copied, not looked at: the data becomes one array of
    alternating runs (plain text, special bytes) whose special elements are swapped for
    their replacements by one ``take``; the new offsets come from a cumulative sum over the
    special positions. Elements with nothing to rewrite come back as they were (zero copy
    when none has)."""
    arr = _as_bin(arr)
    offs, buf, data = _buffers(arr)
    if len(buf) == 0:
        return arr
    pos = np.flatnonzero(how.special[buf])
    if len(pos) == 0:
        return arr
    width = np.ones(len(pos), dtype=np.int64)
    if how.unesc is not None:
        isbs = buf[pos] == 0x5C
        bs = pos[isbs]
        if len(bs):
            pos = pos[~isbs]
            # in each run of backslashes every other one, from the run's first, starts an escape
            run0 = np.ones(len(bs), dtype=bool)
            run0[1:] = bs[1:] != bs[:-1] + 1
            first = np.maximum.accumulate(np.where(run0, np.arange(len(bs)), 0))
            esc = bs[(np.arange(len(bs)) - first) % 2 == 0]
            pos = np.concatenate([pos, esc])
            width = np.concatenate([np.ones(len(pos) - len(esc), dtype=np.int64),
                                    np.full(len(esc), 2, dtype=np.int64)])
            o = np.argsort(pos, kind="stable")
            pos, width = pos[o], width[o]
            # a byte an escape covers is not a special of its own
            inside = np.zeros(len(pos), dtype=bool)
            inside[1:] = (width[:-1] == 2) & (pos[1:] == pos[:-1] + 1)
            pos, width = pos[~inside], width[~inside]
        else:
            width = np.ones(len(pos), dtype=np.int64)
    if only is not None and len(pos):
        keep = only[np.searchsorted(offs, pos, side="right") - 1]
        pos, width = pos[keep], width[keep]
    if len(pos) == 0:
        return arr
    # replacement of each special: a byte's own, or (escapes) the replacement of the escaped byte
    code = how.single[buf[pos]]
    two = np.flatnonzero(width == 2)
    if len(two):
        code[two] = how.esc[buf[np.minimum(pos[two] + 1, len(buf) - 1)]]
    if (code < 0).any():
        raise ValueError("a literal key holds an escape the key syntax does not have")
    rlen = how.rlen
    # runs: plain text [0, p0), special [p0, p0+w0), plain [p0+w0, p1), ..., plain [last end, total)
    k = len(pos)
    cuts = np.empty(2 * k + 2, dtype=np.int64)
    cuts[0] = 0
    cuts[1:-1:2] = pos
    cuts[2:-1:2] = pos + width
    cuts[-1] = len(buf)
    runs = pa.Array.from_buffers(_BIN, 2 * k + 1, [None, pa.py_buffer(cuts), data])
    big = pa.concat_arrays([runs, how.items])
    idx = np.arange(2 * k + 1, dtype=np.int64)
    idx[1::2] = 2 * k + 1 + code
    out = big.take(pa.array(idx))
    # new offsets: each element grows by the growth of the specials before its end
    grow = np.concatenate([[0], np.cumsum(rlen[code] - width)])
    new_offs = offs + grow[np.searchsorted(pos, offs, side="left")]
    out_data = out.buffers()[2]
    base = int(np.frombuffer(out.buffers()[1], dtype=np.int64, count=1, offset=out.offset * 8)[0])
    out_data = out_data.slice(base, int(new_offs[-1]))
    return pa.Array.from_buffers(_BIN, len(arr), [None, pa.py_buffer(new_offs), out_data])


#: Turtle's own forms of numbers and booleans (a literal of these types whose lexical form matches is written bare)
_BARE = {XSD + "integer": r"^[+-]?[0-9]+$", XSD + "decimal": r"^[+-]?[0-9]*\.[0-9]+$",
         XSD + "double": r"^[+-]?([0-9]+\.[0-9]*|\.?[0-9]+)[eE][+-]?[0-9]+$", XSD + "boolean": r"^(true|false)$"}
_BARE_TYPES = pa.array([t.encode() for t in _BARE], _BIN)


# --------------------------------------------------------------------------
# The distinct terms: kinds and part ranges by byte scans over their keys
# --------------------------------------------------------------------------

#: bytes a prefixed name's local part (as written here: ``[A-Za-z_][A-Za-z0-9_-]*`` or digits) cannot hold
_NOT_LOCAL = np.ones(256, dtype=bool)
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789-":
    _NOT_LOCAL[_c] = False


class Terms:
    """Distinct terms (their keys) and, per term, its kind and the byte ranges of its parts
    in the keys' data: ``main`` (IRI, label, lexical form), ``second`` (language tag or
    datatype IRI), the IRI a prefixed name could write (an IRI's own, a literal's datatype)
    split into namespace and local name."""

    def __init__(self, keys: pa.Array):
        keys = _as_bin(keys)
        self.keys = keys
        self.d = d = len(keys)
        offs, buf, data = _buffers(keys)
        self.buf, self.data = buf, data
        start, end = offs[:-1], offs[1:]
        if d and (end <= start).any():
            raise ValueError("an empty term key")
        first = buf[start] if d else np.zeros(0, dtype=np.uint8)
        if not ((first == 0x3C) | (first == 0x5F) | (first == 0x22)).all():
            raise ValueError("a term key that is not an IRI, blank node or literal")
        kind = np.full(d, PLAIN, dtype=np.int8)
        kind[first == 0x3C] = IRI
        kind[first == 0x5F] = BNODE
        lit = np.flatnonzero(first == 0x22)
        notlocal = np.flatnonzero(_NOT_LOCAL[buf])  # positions of every byte a local name cannot hold
        a0, a1 = start + 1, end - 1  # IRI: inside the brackets
        b0, b1 = end.copy(), end.copy()
        bn = kind == BNODE
        a0[bn], a1[bn] = start[bn] + 2, end[bn]
        if len(lit):
            qpos = notlocal[buf[notlocal] == 0x22]
            q = qpos[np.searchsorted(qpos, end[lit], side="left") - 1]  # a literal key's closing quote
            a1[lit] = q
            after = q + 1 < end[lit]
            tag = np.zeros(len(lit), dtype=np.uint8)
            tag[after] = buf[q[after] + 1]
            lang, dt = lit[tag == 0x40], lit[tag == 0x5E]
            kind[lang] = LANG
            b0[lang] = q[tag == 0x40] + 2
            kind[dt] = DT
            b0[dt], b1[dt] = q[tag == 0x5E] + 4, end[dt] - 1
        self.kind, self.a0, self.a1, self.b0, self.b1 = kind, a0, a1, b0, b1
        # the IRI a prefixed name could write, split at its last '/' or '#'
        has = (kind == IRI) | (kind == DT)
        r0 = np.where(kind == IRI, a0, np.where(kind == DT, b0, end))
        r1 = np.where(kind == IRI, a1, np.where(kind == DT, b1, end))
        # the local name runs from after the last byte a local name cannot hold, which must be '/' or '#'
        j = np.searchsorted(notlocal, r1, side="left") - 1
        cut = notlocal[np.maximum(j, 0)] if len(notlocal) else np.zeros(d, dtype=np.int64)
        lo = cut + 1
        has &= (j >= 0) & (cut >= r0) & (lo < r1)
        ok = has.copy()
        hi = np.flatnonzero(has)
        sep = buf[cut[hi]]
        ok[hi] = ((sep == 0x2F) | (sep == 0x23)) & (buf[lo[hi]] != 0x2D)
        digit = hi[(buf[lo[hi]] >= 0x30) & (buf[lo[hi]] <= 0x39)]
        if len(digit):  # a local name that starts with a digit is all digits
            alld = pc.match_substring_regex(_slices(data, lo[digit], r1[digit]), r"^[0-9]+$")
            ok[digit] &= np.asarray(alld.to_numpy(zero_copy_only=False), bool)
        self.r0, self.r1, self.lo, self.local_ok = r0, r1, lo, ok
        self._bare: np.ndarray | None = None
        # namespaces: dictionary-encoded slices of the IRIs with a local name
        self.ns = np.full(d, -1, dtype=np.int64)
        self.namespaces: list[str] = []
        okix = np.flatnonzero(ok)
        if len(okix):
            enc = pc.dictionary_encode(_slices(data, r0[okix], lo[okix]))
            self.ns[okix] = enc.indices.to_numpy(zero_copy_only=False)
            self.namespaces = [b.decode("utf-8") for b in enc.dictionary.to_pylist()]

    def namespace_counts(self, skip: np.ndarray | None = None) -> dict[str, int]:
        """Namespace -> distinct IRIs (and datatype IRIs of distinct literals) in it whose local
        part a prefixed name can write; terms where ``skip`` is set are not counted."""
        ok = self.ns >= 0
        if skip is not None:
            ok &= ~skip
        if not ok.any():
            return {}
        c = np.bincount(self.ns[ok], minlength=len(self.namespaces))
        return {ns: int(n) for ns, n in zip(self.namespaces, c.tolist(), strict=True) if n}

    def bare(self) -> np.ndarray:
        """Per term: a typed literal Turtle writes bare (a number or boolean whose lexical form
        is Turtle's own form of its type)."""
        if self._bare is not None:
            return self._bare
        bare = np.zeros(self.d, dtype=bool)
        dti = np.flatnonzero(self.kind == DT)
        if len(dti):
            dts = _slices(self.data, self.b0[dti], self.b1[dti])
            which = pc.index_in(dts, value_set=_BARE_TYPES).fill_null(-1).to_numpy(zero_copy_only=False)
            if (which >= 0).any():
                bodies = _slices(self.data, self.a0[dti], self.a1[dti])
                for j, pattern in enumerate(_BARE.values()):
                    ci = np.flatnonzero(which == j)
                    if len(ci):
                        m = np.asarray(pc.match_substring_regex(bodies.take(pa.array(ci)), pattern)
                                       .to_numpy(zero_copy_only=False), bool)
                        bare[dti[ci[m]]] = True
        self._bare = bare
        return bare

    def main(self) -> pa.Array:
        return _slices(self.data, self.a0, self.a1)

    def second(self) -> pa.Array:
        return _slices(self.data, self.b0, self.b1)

    def labels(self, xml: bool = False) -> tuple[pa.Array, bool]:
        """Every term's main part with blank node labels in N-Triples label syntax
        (:func:`bnode_label`), and whether those labels are all XML NCNames (``xml``)."""
        x = self.main()
        bn = np.flatnonzero(self.kind == BNODE)
        if len(bn) == 0:
            return x, True
        labels = x.take(pa.array(bn))
        good = np.asarray(pc.match_substring_regex(labels, _BNODE_OK_RE2).to_numpy(zero_copy_only=False), bool)
        if not good.all():
            bad = bn[~good]
            fixed = pa.array([bnode_label(k.decode("utf-8")).encode() for k in x.take(pa.array(bad)).to_pylist()],
                             _BIN)
            mask = np.zeros(self.d, dtype=bool)
            mask[bad] = True
            x = pc.replace_with_mask(x, pa.array(mask), fixed)
            labels = x.take(pa.array(bn))
        nc = True
        if xml:
            nc = bool(pc.all(pc.match_substring_regex(labels, _NCNAME_LABEL_RE2)).as_py())
        return x, nc


# --------------------------------------------------------------------------
# Rows: grouped by subject, then predicate
# --------------------------------------------------------------------------


class Rows:
    """A graph's rows as indexes into its distinct terms, sorted by subject then predicate
    (``rdf:type`` first); ``gs``/``gp``: a row starts a subject / a (subject, predicate) group."""

    def __init__(self, triples: np.ndarray, keys_of: Callable[[np.ndarray], pa.Array]):
        t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        if (t < 0).any():
            t = t[(t >= 0).all(axis=1)]
        self.n = n = len(t)
        # the rows' term indexes, sort key, order and group marks, before they are allocated
        charge_rows(n, 8, "the rows of the graph being written")
        uniq, inv = distinct_inverse(t.reshape(-1))
        self.ids = uniq
        self.terms = Terms(keys_of(uniq))
        d = len(uniq)
        inv = inv.reshape(n, 3)
        s, p, o = inv[:, 0], inv[:, 1], inv[:, 2]
        hit = np.flatnonzero(pc.equal(self.terms.keys, _lit(RDF_TYPE_KEY.encode())).to_numpy(zero_copy_only=False))
        self.type_idx = int(hit[0]) if len(hit) else -1
        rank = p + 1
        if self.type_idx >= 0:
            rank = np.where(p == self.type_idx, 0, rank)
        key = s * (d + 1) + rank
        if n > 1 and not (key[1:] >= key[:-1]).all():
            # stable (timsort): rows read from the store come as runs sorted by subject (one run
            # per predicate), which it merges in a fraction of a full sort's time
            order = np.argsort(key, kind="stable")
            s, p, o, key = s[order], p[order], o[order], key[order]
        self.s, self.p, self.o = s, p, o
        self.gs = np.ones(n, dtype=bool)
        self.gp = np.ones(n, dtype=bool)
        if n > 1:
            np.not_equal(s[1:], s[:-1], out=self.gs[1:])
            np.not_equal(key[1:], key[:-1], out=self.gp[1:])

    def turtle_unnamed(self) -> np.ndarray:
        """Per term: Turtle writes it without its IRI (a bare number or boolean; ``rdf:type``
        when it is only ever a predicate, written ``a``)."""
        skip = self.terms.bare().copy()
        t = self.type_idx
        if t >= 0 and not (self.s == t).any() and not (self.o == t).any():
            skip[t] = True
        return skip


def _col(mask: np.ndarray, yes, no) -> np.ndarray:
    """Per row: ``yes`` (array or int) where ``mask``, else ``no``."""
    return np.where(mask, yes, no).astype(np.int64, copy=False)


def assemble(table: pa.Array, cols: Sequence[np.ndarray | int], n: int, head: bytes, tail: bytes,
             check: Callable[[int], None], tick: Callable[[], None] | None) -> list:
    """The body ``head + rows + tail``, each row the entries ``table[col[row]]`` of ``cols``
    in order (an int: the same entry in every row), as a list of pieces. The exact size is
    passed to ``check`` before any row is built; rows are built ``CHUNK_ROWS`` at a time,
    each chunk one ``take``, with ``tick()`` (deadline checks) before each."""
    table = _as_bin(table)
    offs = np.frombuffer(table.buffers()[1], dtype=np.int64, count=len(table) + 1, offset=table.offset * 8)
    lens = np.diff(offs)
    size = len(head) + len(tail)
    for c in cols:
        size += int(lens[c]) * n if isinstance(c, int) else int(lens[c].sum())
    check(size)
    out: list = [head]
    k = len(cols)
    for a in range(0, n, CHUNK_ROWS):
        if tick is not None:
            tick()
        b = min(n, a + CHUNK_ROWS)
        idx = np.empty((b - a, k), dtype=np.int64)
        for j, c in enumerate(cols):
            idx[:, j] = c if isinstance(c, int) else c[a:b]
        rows = table.take(pa.array(idx.reshape(-1)))
        ro = np.frombuffer(rows.buffers()[1], dtype=np.int64, count=len(rows) + 1, offset=rows.offset * 8)
        out.append(memoryview(rows.buffers()[2])[int(ro[0]):int(ro[-1])])
    out.append(tail)
    return out


# --------------------------------------------------------------------------
# Turtle / TriG
# --------------------------------------------------------------------------


def choose_prefixes(counts: dict[str, int], prefixes: dict[str, str] | None = None) -> dict[str, str]:
    """Prefix -> namespace a Turtle/TriG answer declares: the common ones (and the caller's)
    that its IRIs use, plus ``ns1``, ``ns2`` ... (or a namespace's last word) for the (at
    most :data:`MAX_NEW_PREFIXES`) most used other namespaces used at least twice."""
    known = dict(COMMON_PREFIXES)
    if prefixes:
        known.update({p: ns for p, ns in prefixes.items() if _PN_PREFIX_OK.match(p)})
    by_ns = {ns: p for p, ns in known.items()}
    chosen: dict[str, str] = {}
    i = 1
    new = 0
    for ns, cnt in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if ns in by_ns:
            chosen[ns] = by_ns[ns]
        elif cnt >= 2 and new < MAX_NEW_PREFIXES:
            new += 1
            name = _prefix_name(ns)
            if name is None or name in known:
                while f"ns{i}" in known:
                    i += 1
                name = f"ns{i}"
                i += 1
            known[name] = ns
            chosen[ns] = name
    return {p: ns for ns, p in sorted(chosen.items(), key=lambda kv: _natural(kv[1]))}


#: (namespace counts, caller's prefixes) -> (chosen prefixes, their head): small answers of
#: one shape count the same namespaces again and again
_CHOICES: dict[tuple, tuple[dict[str, str], bytes]] = {}


def _prefix_choice(counts: dict[str, int], prefixes: dict[str, str] | None) -> tuple[dict[str, str], bytes]:
    """:func:`choose_prefixes` and its :func:`prefix_head`, remembered by their inputs."""
    key = (frozenset(counts.items()), tuple(prefixes.items()) if prefixes else ())
    got = _CHOICES.get(key)
    if got is None:
        chosen = choose_prefixes(counts, prefixes)
        got = (chosen, prefix_head(chosen))
        if len(_CHOICES) >= 4096:
            _CHOICES.clear()
        _CHOICES[key] = got
    return got


def _natural(name: str) -> tuple[str, int]:
    """Sort key of a prefix: ns2 before ns10."""
    word = name.rstrip("0123456789")
    return word, int(name[len(word):] or -1)


def _prefix_name(ns: str) -> str | None:
    """A readable prefix for a namespace: its last path segment when that is a short word."""
    seg = ns.rstrip("/#").rsplit("/", 1)[-1].lower()
    if 1 < len(seg) <= 12 and seg.isalpha() and seg.isascii():
        return seg
    return None


def turtle_fragments(terms: Terms, prefixes: dict[str, str]) -> pa.Array:
    """Each term as Turtle: prefixed names where a declared prefix covers the IRI (and a
    typed literal's datatype), numbers and booleans bare when their lexical form is Turtle's
    own form of them, everything else as its (N-Triples) key."""
    d = terms.d
    k = terms.kind
    c = _Consts()
    p0 = np.zeros(d, dtype=np.int64)
    p1 = np.zeros(d, dtype=np.int64)
    p2 = np.zeros(d, dtype=np.int64)
    x0, x1 = terms.a0.copy(), terms.a1.copy()
    y0, y1 = terms.b0.copy(), terms.b1.copy()
    pfx_of = {ns: p for p, ns in prefixes.items()}
    ns_pfx = np.array([pfx_of.get(ns) is not None for ns in terms.namespaces] + [False], dtype=bool)
    has_pfx = terms.local_ok & ns_pfx[terms.ns]
    iri, bn = k == IRI, k == BNODE
    ip, iu = iri & has_pfx, iri & ~has_pfx
    p0[iu], p1[iu] = c(b"<"), c(b">")
    if ip.any():
        names = np.array([c((pfx_of.get(ns) or "").encode("utf-8") + b":") for ns in terms.namespaces] + [0])
        p0[ip] = names[terms.ns[ip]]
        x0[ip] = terms.lo[ip]
    p0[bn] = c(b"_:")
    lit = k >= PLAIN
    p0[lit] = c(b'"')
    p1[k == PLAIN] = c(b'"')
    p1[k == LANG] = c(b'"@')
    dt = k == DT
    dp, du = dt & has_pfx, dt & ~has_pfx
    p1[du], p2[du] = c(b'"^^<'), c(b">")
    if dp.any():
        names = np.array([c(b'"^^' + (pfx_of.get(ns) or "").encode("utf-8") + b":") for ns in terms.namespaces] + [0])
        p1[dp] = names[terms.ns[dp]]
        y0[dp] = terms.lo[dp]
    bare = terms.bare()
    p0[bare] = p1[bare] = p2[bare] = 0
    y0[bare] = y1[bare]
    x, _ = terms.labels()
    if ip.any():  # prefixed IRIs: their local part instead of the whole IRI
        x = pc.if_else(pa.array(ip), _slices(terms.data, x0, x1), x)
    return _frags(c, p0, x, p1, _slices(terms.data, y0, y1), p2)


def prefix_head(prefixes: dict[str, str]) -> bytes:
    return "".join(f"@prefix {p}: <{ns}> .\n" for p, ns in prefixes.items()).encode("utf-8")


def turtle_rows(rows: Rows, frags: pa.Array, indent: bytes) -> tuple[pa.Array, list]:
    """(table, columns) of a graph's Turtle statements: ``s p o`` grouped with ``;``
    and ``,``, each statement on its line after ``indent`` (the last one's `` .`` is the tail's)."""
    d = rows.terms.d
    spaced = pc.binary_join_element_wise(frags, _lit(b" "), _lit(b""))
    extra = [b"a ", b"", b" .\n" + indent, b" ;\n" + indent + b"\t", b" , "]
    table = pa.concat_arrays([_as_bin(frags), spaced, pa.array(extra, _BIN)])
    A, E, DOT, SEMI, COMMA = (2 * d + i for i in range(5))
    sep = np.where(rows.gs, DOT, np.where(rows.gp, SEMI, COMMA)).astype(np.int64)
    sep[0] = E
    subj = _col(rows.gs, d + rows.s, E)
    pred = _col(rows.gp, np.where(rows.p == rows.type_idx, A, d + rows.p), E)
    return table, [sep, subj, pred, rows.o]


def write_turtle(parts: Sequence[tuple[str | None, Rows | SmallGraph]], prefixes: dict[str, str] | None, trig: bool,
                 check, tick) -> bytes:
    """Turtle (one part, its graph None) or TriG (every part: its graph's statements in a
    ``<g> { }`` block, the default graph's at the top level) with one prefix head."""
    if len(parts) == 1 and isinstance(parts[0][1], SmallGraph):  # (one small graph: no chunks, one size check)
        graph, r = parts[0]
        chosen, head = _prefix_choice(r.turtle_counts(), prefixes)
        if r.n == 0:
            return b""
        named = trig and graph is not None
        indent = b"\t" if named else b""
        out = small_turtle(r, chosen, indent, head)
        out[0] = (head + b"<" + graph.encode("utf-8") + b"> {\n\t") if named else head
        out.append(b" .\n}\n" if named else b" .\n")
        body = b"".join(out)
        check(len(body))  # (built, then checked: at most SMALL_ROWS rows of kept fragments)
        return body
    counts: dict[str, int] = {}
    for _, r in parts:
        got = r.turtle_counts() if isinstance(r, SmallGraph) else r.terms.namespace_counts(r.turtle_unnamed())
        for ns, cnt in got.items():
            counts[ns] = counts.get(ns, 0) + cnt
    chosen, head = _prefix_choice(counts, prefixes)
    pieces: list = [head]
    size = len(pieces[0])
    for graph, r in parts:
        if r.n == 0:
            continue
        named = trig and graph is not None
        indent = b"\t" if named else b""
        head = (b"<" + graph.encode("utf-8") + b"> {\n\t") if named else b""
        tail = b" .\n}\n" if named else b" .\n"

        def bound(n: int, size=size) -> None:
            check(size + n)

        if isinstance(r, SmallGraph):
            got = [_small_body(head, small_turtle(r, chosen, indent), tail, bound)]
        else:
            table, cols = turtle_rows(r, turtle_fragments(r.terms, chosen), indent)
            got = assemble(table, cols, r.n, head, tail, bound, tick)
        size += sum(map(len, got))
        pieces.extend(got)
    if len(pieces) == 1:
        return b""
    return b"".join(pieces)


# --------------------------------------------------------------------------
# RDF/XML
# --------------------------------------------------------------------------

_XML_HEAD = b'<?xml version="1.0" encoding="UTF-8"?>\n'
_XML_TAIL = b"\t</rdf:Description>\n</rdf:RDF>\n"
#: rdf: names that cannot be a property element (syntax names; rdf:li is read as rdf:_n)
_RDF_NOT_PROPERTY = {"RDF", "Description", "ID", "about", "parseType", "resource", "nodeID", "datatype", "li",
                     "aboutEach", "aboutEachPrefix", "bagID"}
_QNAME_SPLIT = re.compile(r"^(.*?)([^\W\d][\w.-]*)\Z", re.S)


def _xml_escape_attr(s: str) -> str:
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("\t", "&#9;").replace("\n", "&#10;").replace("\r", "&#13;"))


def _predicate_qnames(iris: list[str], declared: dict[str, str]) -> list[str]:
    """The QName of each predicate IRI (namespace + the longest local part that is an XML
    NCName), adding a prefix for each new namespace to ``declared`` (namespace -> prefix).
    Per distinct predicate, not per row."""
    names = {ns: p for p, ns in COMMON_PREFIXES.items()}
    used = set(declared.values())
    out = []
    i = 1
    for iri in iris:
        m = _QNAME_SPLIT.match(iri)
        if m is None or not m.group(1):
            raise ValueError(f"cannot write this graph as RDF/XML: the predicate <{iri}> has no XML "
                             "local name (it does not end in a name)")
        ns, local = m.group(1), m.group(2)
        if ns == RDF and local in _RDF_NOT_PROPERTY:
            raise ValueError(f"cannot write this graph as RDF/XML: rdf:{local} cannot be written as a property")
        p = declared.get(ns)
        if p is None:
            p = names.get(ns)
            if p is None or p in used:
                while f"ns{i}" in used:
                    i += 1
                p = f"ns{i}"
            declared[ns] = p
            used.add(p)
        out.append(f"{p}:{local}")
    return out


def write_rdfxml(r: Rows | SmallGraph, check, tick) -> bytes:
    """RDF/XML: one ``rdf:Description`` per subject, a property element per triple
    (``rdf:resource`` / ``rdf:nodeID`` for IRIs and blank nodes, element text with
    ``xml:lang`` or ``rdf:datatype`` for literals); every predicate namespace declared on
    the root. A predicate with no XML local name is a ValueError."""
    if r.n == 0:
        return _XML_HEAD + b'<rdf:RDF xmlns:rdf="' + RDF.encode() + b'">\n</rdf:RDF>\n'
    if isinstance(r, SmallGraph):
        return _small_body(*small_rdfxml(r), _XML_TAIL, check)
    terms = r.terms
    d = terms.d
    declared: dict[str, str] = {RDF: "rdf"}
    preds = np.flatnonzero(np.bincount(r.p, minlength=d))
    pkeys = [k.decode("utf-8") for k in terms.keys.take(pa.array(preds)).to_pylist()]
    if any(not k.startswith("<") for k in pkeys):
        raise ValueError("cannot write this graph as RDF/XML: a predicate that is not an IRI")
    qn = _predicate_qnames([k[1:-1] for k in pkeys], declared)
    head = _XML_HEAD + b"<rdf:RDF" + "".join(
        f' xmlns:{p}="{_xml_escape_attr(ns)}"' for ns, p in sorted(declared.items(), key=lambda kv: kv[1])
    ).encode("utf-8") + b">\n"
    k = terms.kind
    labels, ncname = terms.labels(xml=True)
    lit = k >= PLAIN
    attr = rewrite(labels, XML_ATTR, only=~lit)
    second = rewrite(terms.second(), XML_ATTR)
    body = rewrite(terms.main(), XML_BODY, only=lit)
    empty = pa.nulls(d, _BIN).fill_null(b"")
    c = _Consts()
    node = b' rdf:nodeID="' + (b"" if ncname else b"b")
    # subjects: the element opening a node
    s0 = np.where(k == BNODE, c(b"\t<rdf:Description" + node), c(b'\t<rdf:Description rdf:about="'))
    opens = _frags(c, s0, attr, np.full(d, c(b'">\n')), empty, np.zeros(d, dtype=np.int64))
    # objects: the rest of a property element after its name
    o0 = np.zeros(d, dtype=np.int64)
    o1 = np.zeros(d, dtype=np.int64)
    o0[k == IRI] = c(b' rdf:resource="')
    o0[k == BNODE] = c(node)
    o1[~lit] = c(b'"/>\n')
    o0[k == PLAIN] = c(b">")
    o0[k == LANG] = c(b' xml:lang="')
    o0[k == DT] = c(b' rdf:datatype="')
    o1[(k == LANG) | (k == DT)] = c(b'">')
    x = pc.if_else(pa.array(lit), second, attr)
    objs = _frags(c, o0, x, o1, pc.if_else(pa.array(lit), body, empty), np.zeros(d, dtype=np.int64))
    pq = pa.array([q.encode("utf-8") for q in qn], _BIN)
    ends = pa.array([b"</" + q.encode("utf-8") + b">\n" for q in qn], _BIN)
    consts = [b"", b"\t</rdf:Description>\n", b"\t\t<"]
    table = pa.concat_arrays([opens, objs, pq, ends, pa.array(consts, _BIN)])
    np_ = len(qn)
    pmap = np.zeros(d, dtype=np.int64)
    pmap[preds] = np.arange(np_)
    E = 2 * d + 2 * np_
    CLOSE, LT = E + 1, E + 2
    close = _col(r.gs, CLOSE, E)
    close[0] = E
    cols = [close, _col(r.gs, r.s, E), LT, 2 * d + pmap[r.p], d + r.o,
            _col(lit[r.o], 2 * d + np_ + pmap[r.p], E)]
    out = assemble(table, cols, r.n, head, _XML_TAIL, check, tick)
    return b"".join(out)


# --------------------------------------------------------------------------
# JSON-LD
# --------------------------------------------------------------------------


def write_jsonld(r: Rows | SmallGraph, graph: str | None, check, tick) -> bytes:
    """JSON-LD in expanded form (as pyoxigraph writes it): an array of node objects, one per
    subject, each predicate's objects in one array (``@id`` for IRIs and blank nodes,
    ``@value`` with ``@language`` or ``@type`` for literals, the lexical form as a string);
    with ``graph``, the nodes inside that graph's ``@graph``."""
    if r.n == 0:
        return b"[]"
    head, tail = b"[", b"]}]\n"
    if graph is not None:
        g = rewrite(pa.array([graph.encode("utf-8")], _BIN), JSON_TEXT).to_pylist()[0]
        head, tail = b'[{"@id":"' + g + b'","@graph":[', b"]}]}]\n"
    if isinstance(r, SmallGraph):
        return _small_body(head, small_jsonld(r), tail, check)
    terms = r.terms
    d = terms.d
    k = terms.kind
    lit = k >= PLAIN
    labels, _ = terms.labels()
    x = rewrite(labels, JSON_TEXT, only=~lit)
    x = rewrite(x, JSON_BODY, only=lit)
    second = rewrite(terms.second(), JSON_TEXT)
    c = _Consts()
    zero = np.zeros(d, dtype=np.int64)
    empty = pa.nulls(d, _BIN).fill_null(b"")
    subj = _frags(c, np.where(k == BNODE, c(b'{"@id":"_:'), c(b'{"@id":"')), x, np.full(d, c(b'",')), empty, zero)
    pred = _frags(c, np.full(d, c(b'"')), x, np.full(d, c(b'":[')), empty, zero)
    o0 = np.where(lit, c(b'{"@value":"'), np.where(k == BNODE, c(b'{"@id":"_:'), c(b'{"@id":"')))
    o1 = np.full(d, c(b'"}'))
    o1[k == LANG] = c(b'","@language":"')
    o1[k == DT] = c(b'","@type":"')
    o2 = np.where((k == LANG) | (k == DT), c(b'"}'), 0)
    objs = _frags(c, o0, x, o1, second, o2)
    consts = [b"", b"]},\n", b"],", b","]
    table = pa.concat_arrays([subj, pred, objs, pa.array(consts, _BIN)])
    E, NODE, PROP, ITEM = (3 * d + i for i in range(4))
    sep = np.where(r.gs, NODE, np.where(r.gp, PROP, ITEM)).astype(np.int64)
    sep[0] = E
    cols = [sep, _col(r.gs, r.s, E), _col(r.gp, d + r.p, E), 2 * d + r.o]
    return b"".join(assemble(table, cols, r.n, head, tail, check, tick))


# --------------------------------------------------------------------------
# Small graphs: the exact per-term writer, its terms kept between answers
# --------------------------------------------------------------------------
#
# Why: the vectorized path has a fixed cost of some fifty numpy and Arrow calls (0.6-0.8 ms);
# a small graph (a DESCRIBE or CONSTRUCT of one resource) is written term by term in Python
# to the same bytes (tests hold the two paths equal). The terms such answers hold come back
# (the same predicates, classes, departments), so each store term's parts and its fragment
# in each format are kept per store dictionary (:class:`TermCache`): an answer of known terms
# costs a dictionary lookup per term and a few list appends per row, no key decoding, no
# regular expression, no encoding.

#: graphs of at most this many rows are written by the exact per-term writer (measured
#: crossover with the vectorized writers on rows of mostly distinct terms: ~400 rows when no
#: term is kept yet, 1,000-2,500 when all are; 200-260 before terms were kept)
SMALL_ROWS = 400

#: store terms a :class:`TermCache` keeps, and the characters of their keys (past either,
#: the next answer starts a new one: each kept term has a fragment per format besides)
MAX_CACHED = 1 << 15
MAX_CACHED_CHARS = 4 << 20

_BARE_PY = {dt: re.compile(p[1:-1]) for dt, p in _BARE.items()}
_NCNAME_LABEL = re.compile(_NCNAME_LABEL_RE2[1:-1])
_JSON_TEXT_PY = {c: r.decode() for c, r in JSON_TEXT.repl.items()}
_JSON_BODY_PY = {c: r.decode() for c, r in JSON_BODY.repl.items()}


#: namespace (up to the last '/' or '#') and a local name a prefixed name can write
_SPLIT_PY = re.compile(r"(.*[/#])([A-Za-z_][A-Za-z0-9_-]*|[0-9]+)\Z", re.S)


def _split_local(iri: str) -> tuple[str, str] | None:
    """(namespace, local name) when the IRI ends in a local name a prefixed name can write."""
    m = _SPLIT_PY.match(iri)
    return None if m is None else (m.group(1), m.group(2))


def _xml_text_py(body: str) -> str:
    from engine.terms import unescape_string

    return (unescape_string(body).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", "&#13;"))


def _term_parts(key: str) -> tuple[int, str, str, str]:
    """(kind, main part, second part, key) of a term key."""
    c = key[:1]
    if c == "<":
        return IRI, key[1:-1], "", key
    if c == "_":
        return BNODE, key[2:], "", key
    if c != '"':
        raise ValueError("a term key that is not an IRI, blank node or literal")
    q = key.rfind('"')
    body, sfx = key[1:q], key[q + 1 :]
    if not sfx:
        return PLAIN, body, "", key
    if sfx[0] == "@":
        return LANG, body, sfx[1:], key
    return DT, body, sfx[3:-1], key


def _bare_py(kind: int, body: str, dt: str) -> bool:
    rx = _BARE_PY.get(dt) if kind == DT else None
    return rx is not None and rx.fullmatch(body) is not None


def _json_text(s: str) -> str:
    return s.translate(_JSON_TEXT_PY) if _JSON_TEXT_SPECIAL.search(s) else s


_JSON_TEXT_SPECIAL = re.compile(r'[\x00-\x1f"\\]')
_JSON_BODY_SPECIAL = re.compile(r"[\x00-\x1f]")


class TermCache:
    """Term id -> its parts and, filled on first use, its fragment in each small-graph format.

    One per store dictionary (ids keep their meaning: the dictionary only grows), shared by
    the answers of every snapshot and thread: entries are only added (a dict's item set is
    atomic); a full cache is replaced, never cleared in place. A graph with terms the query
    computed gets a cache of its own for that answer. Fragments that depend on the whole
    graph (Turtle prefixes, RDF/XML blank node ids) are split into the parts that do not."""

    __slots__ = ("parts", "chars", "bnodes", "ttl", "ttl_ns", "ttl_frags", "ttl_kept", "nt", "xml_open", "xml_obj",
                 "js_subj", "js_pred", "js_obj", "type_id", "heads", "base")

    def __init__(self) -> None:
        #: id -> (kind, main, second, key)
        self.parts: dict[int, tuple] = {}
        #: characters of the keys of those terms
        self.chars = 0
        #: the ids of blank nodes among them
        self.bnodes: set[int] = set()
        #: id -> (namespace counted for prefixes or None, text before the prefix, local name, full form)
        self.ttl: dict[int, tuple] = {}
        #: id -> the namespace Turtle counts for it (None: none)
        self.ttl_ns: dict[int, str | None] = {}
        #: a Turtle prefix head -> id -> the term as Turtle under those prefixes
        self.ttl_frags: dict[bytes, dict[int, bytes]] = {}
        #: terms kept in ttl_frags over all its heads (bounds them together, see small_turtle)
        self.ttl_kept = 0
        self.nt: dict[int, bytes] = {}
        self.xml_open: dict[int, bytes] = {}
        self.xml_obj: dict[int, tuple[bytes, bool]] = {}
        self.js_subj: dict[int, bytes] = {}
        self.js_pred: dict[int, bytes] = {}
        self.js_obj: dict[int, bytes] = {}
        #: the id of rdf:type once seen (-1: not yet)
        self.type_id = -1
        #: RDF/XML heads (namespace declarations, property element names) by predicate ids
        self.heads: dict[tuple, tuple] = {}
        #: an answer's own cache (see _overlay): the kept cache its store terms' entries go to
        self.base: TermCache | None = None

    @staticmethod
    def fill(table: dict, make, ids) -> dict:
        """``table`` with an entry for each of ``ids`` (a set; ``make`` adds the missing ones)."""
        for i in ids.difference(table):
            make(i)
        return table

    # ---- per-term fragments (each computed once per cache)
    def ttl_of(self, i: int) -> tuple:
        rec = self.ttl.get(i)
        if rec is not None:
            return rec
        kind, main, second, _ = self.parts[i]
        if kind == IRI:
            sp = _split_local(main)
            full = ("<" + main + ">").encode("utf-8")
            rec = (None, b"", b"", full) if sp is None else (sp[0], b"", sp[1].encode("utf-8"), full)
        elif kind == BNODE:
            rec = (None, b"", b"", ("_:" + bnode_label(main)).encode("utf-8"))
        elif kind == PLAIN:
            rec = (None, b"", b"", ('"' + main + '"').encode("utf-8"))
        elif kind == LANG:
            rec = (None, b"", b"", ('"' + main + '"@' + second).encode("utf-8"))
        elif _bare_py(kind, main, second):
            rec = (None, b"", b"", main.encode("utf-8"))
        else:
            sp = _split_local(second)
            full = ('"' + main + '"^^<' + second + ">").encode("utf-8")
            rec = ((None, b"", b"", full) if sp is None
                   else (sp[0], ('"' + main + '"^^').encode("utf-8"), sp[1].encode("utf-8"), full))
        self.ttl_ns[i] = rec[0]
        self.ttl[i] = rec
        return rec

    def nt_of(self, i: int) -> bytes:
        b = self.nt.get(i)
        if b is None:
            kind, main, _, key = self.parts[i]
            b = self.nt[i] = (("_:" + bnode_label(main)) if kind == BNODE else key).encode("utf-8")
            if self.base is not None and i < LOCAL_BASE:
                self.base.nt[i] = b
        return b

    def xml_obj_of(self, i: int, node: str) -> tuple[bytes, bool]:
        """A property element's rest after its name (``node``: a blank node's attribute start)."""
        ob = self.xml_obj.get(i)
        if ob is not None:
            return ob
        kind, main, second, _ = self.parts[i]
        if kind == IRI:
            return self.xml_obj.setdefault(i, ((' rdf:resource="' + _xml_escape_attr(main) + '"/>\n')
                                               .encode("utf-8"), False))
        if kind == BNODE:  # (depends on the graph's labels: not kept)
            return (node + _xml_escape_attr(bnode_label(main)) + '"/>\n').encode("utf-8"), False
        if kind == PLAIN:
            ob = (">" + _xml_text_py(main)).encode("utf-8"), True
        else:
            attr = ' xml:lang="' if kind == LANG else ' rdf:datatype="'
            ob = (attr + _xml_escape_attr(second) + '">' + _xml_text_py(main)).encode("utf-8"), True
        self.xml_obj[i] = ob
        return ob

    def xml_open_of(self, i: int, node: str) -> bytes:
        b = self.xml_open.get(i)
        if b is not None:
            return b
        kind, main, _, _ = self.parts[i]
        if kind == BNODE:  # (depends on the graph's labels: not kept)
            return ("\t<rdf:Description" + node + _xml_escape_attr(bnode_label(main)) + '">\n').encode("utf-8")
        ident = _xml_escape_attr(main) if kind == IRI else main
        return self.xml_open.setdefault(i, ('\t<rdf:Description rdf:about="' + ident + '">\n').encode("utf-8"))

    def _js_x(self, i: int) -> str:
        kind, main, _, _ = self.parts[i]
        if kind == BNODE:
            return _json_text(bnode_label(main))
        if kind >= PLAIN:
            return main.translate(_JSON_BODY_PY) if _JSON_BODY_SPECIAL.search(main) else main
        return _json_text(main)

    def js_subj_of(self, i: int) -> bytes:
        b = self.js_subj.get(i)
        if b is None:
            pre = '{"@id":"_:' if self.parts[i][0] == BNODE else '{"@id":"'
            b = self.js_subj[i] = (pre + self._js_x(i) + '",').encode("utf-8")
        return b

    def js_pred_of(self, i: int) -> bytes:
        b = self.js_pred.get(i)
        if b is None:
            b = self.js_pred[i] = ('"' + self._js_x(i) + '":[').encode("utf-8")
        return b

    def js_obj_of(self, i: int) -> bytes:
        b = self.js_obj.get(i)
        if b is not None:
            return b
        kind, _, second, _ = self.parts[i]
        x = self._js_x(i)
        if kind == LANG:
            s = '{"@value":"' + x + '","@language":"' + _json_text(second) + '"}'
        elif kind == DT:
            s = '{"@value":"' + x + '","@type":"' + _json_text(second) + '"}'
        elif kind == PLAIN:
            s = '{"@value":"' + x + '"}'
        else:
            s = ('{"@id":"_:' if kind == BNODE else '{"@id":"') + x + '"}'
        b = self.js_obj[i] = s.encode("utf-8")
        return b


def jsonld_fragments(key: str) -> tuple[bytes, bytes, bytes]:
    """A term's JSON-LD fragments as a subject, a predicate and an object (the small
    writer's: :meth:`TermCache.js_subj_of` and the others) from its key alone, for
    writers that keep them elsewhere (``engine.small_answers.graph_jsonld``)."""
    c = TermCache()
    c.parts[0] = _term_parts(key)
    return c.js_subj_of(0), c.js_pred_of(0), c.js_obj_of(0)


#: a blank node's rdf:nodeID in :func:`rdfxml_fragments`: ``b`` + its label, whatever the
#: graph's other labels (an NCName, and one label per node)
_XML_NODE = ' rdf:nodeID="b'


def rdfxml_fragments(key: str) -> tuple:
    """A term's RDF/XML fragments for a document of one property element per triple:
    (its ``rdf:Description`` start as a subject, its object part after a property's name,
    whether that part is a literal's (the element's end follows), its property element's
    start and end as a predicate with its namespace declared on it, or None when it cannot
    be one: not an IRI, no XML local name, an rdf: syntax name)."""
    c = TermCache()
    kind, main, _, _ = c.parts[0] = _term_parts(key)
    ob, lit = c.xml_obj_of(0, _XML_NODE)
    pred = None
    if kind == IRI:
        m = _QNAME_SPLIT.match(main)
        if m is not None and m.group(1) and not (m.group(1) == RDF and m.group(2) in _RDF_NOT_PROPERTY):
            pred = (f'\t\t<p:{m.group(2)} xmlns:p="{_xml_escape_attr(m.group(1))}"'.encode(),
                    f"</p:{m.group(2)}>\n".encode())
    return c.xml_open_of(0, _XML_NODE), ob, lit, pred


#: store dictionary -> its TermCache; (weak reference, cache) of the last one asked for
#: at most this many store ids are decoded one by one (``Dictionary.key``, ~0.5 µs each)
#: rather than by one array call (~5 µs whatever the count)
FEW_KEYS = 8


def store_keys(terms, ids: list[int]) -> list:
    """Keys of ``ids`` in ``terms``: a few store ids (0 <= id < LOCAL_BASE) straight from its
    store dictionary one by one (the new terms of a small answer: the entity, its name),
    anything else by ``terms.keys``."""
    if len(ids) <= FEW_KEYS and ids:
        key = getattr(getattr(terms, "dictionary", None), "key", None)
        if key is not None and min(ids) >= 0 and max(ids) < LOCAL_BASE:
            return [key(i) for i in ids]
    return terms.keys(np.asarray(ids, dtype=np.int64))


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LAST: tuple = (lambda: None, None)
_CACHE_LOCK = threading.Lock()


def term_cache(terms) -> TermCache | None:
    """The kept TermCache of ``terms``' store dictionary (None: a term table with no store
    dictionary behind it, e.g. a server-built graph: nothing is kept)."""
    global _LAST
    d = getattr(terms, "dictionary", None)
    if d is None:
        return None
    ref, c = _LAST
    if ref() is d and len(c.parts) <= MAX_CACHED and c.chars <= MAX_CACHED_CHARS:
        return c
    with _CACHE_LOCK:
        try:
            c = _CACHES.get(d)
            if c is None or len(c.parts) > MAX_CACHED or c.chars > MAX_CACHED_CHARS:
                c = _CACHES[d] = TermCache()
            _LAST = (weakref.ref(d), c)
        except TypeError:  # (not weakly referable: nothing kept)
            return None
    return c


def small_terms(triples: np.ndarray | None, keys_of: Callable[[list[int]], list],
                cache: TermCache | None, flat: list | None = None) -> tuple[np.ndarray | None, list, set, TermCache]:
    """(rows with an unbound cell dropped, as an array and as one flat list of ids; their
    distinct ids; a cache holding every id's parts): ``cache`` when given and the graph holds
    store terms only, else a new one. Only the ids missing from the cache have their keys read.
    With ``flat`` (the rows as one flat list already) no array is made (None) unless a cell is unbound."""
    if flat is None:
        t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        flat = t.ravel().tolist()
    else:
        t = None
    ids = set(flat)
    if not ids:
        return t, flat, ids, cache if cache is not None else TermCache()
    lo, hi = min(ids), max(ids)  # (C-level over the distinct ids: cheaper than two numpy reductions)
    if lo < 0:  # (unbound cells: no triple)
        if t is None:
            t = np.asarray(flat, dtype=np.int64).reshape(-1, 3)
        t = t[(t >= 0).all(axis=1)]
        flat = t.ravel().tolist()
        ids = set(flat)
    kept = None
    if cache is None:
        cache = TermCache()
    elif hi >= LOCAL_BASE:
        kept, cache = cache, _overlay(cache, ids)
    parts = cache.parts
    miss = ids.difference(parts)
    if miss:
        miss = sorted(miss)
        for i, k in zip(miss, keys_of(miss), strict=True):
            k = str(k)
            pt = _term_parts(k)
            # (the sets first: another thread that finds the parts finds them too)
            for c in (cache,) if kept is None or i >= LOCAL_BASE else (cache, kept):
                if pt[0] == BNODE:
                    c.bnodes.add(i)
                elif k == RDF_TYPE_KEY:
                    c.type_id = i
                c.chars += len(k)
                c.parts[i] = pt
    return t, flat, ids, cache


#: graphs whose store terms came from the kept cache of their store dictionary although the
#: graph holds computed terms (tests read it: the overlay is taken)
OVERLAYS = 0


def _overlay(kept: TermCache, ids: set) -> TermCache:
    """A graph's own cache when it holds computed terms (ids past LOCAL_BASE mean something
    else in each answer, so they stay out of the kept cache), seeded with its store terms'
    parts and N-Triples fragments from the store dictionary's kept cache; the store terms it
    decodes, and their N-Triples fragments, go into both (``base``; see small_terms). Why: ``CONSTRUCT { ?d ub:hasHead ?x }`` with a
    predicate the store lacks decoded and parsed every store term of the answer again on
    every call (~2 µs each)."""
    global OVERLAYS
    OVERLAYS += 1
    c = TermCache()
    kp, kn = kept.parts, kept.nt
    store = [i for i in ids if i < LOCAL_BASE]
    c.parts = {i: kp[i] for i in store if i in kp}
    c.nt = {i: kn[i] for i in store if i in kn}
    if kept.bnodes:
        c.bnodes = kept.bnodes.intersection(store)
    if kept.type_id in c.parts:
        c.type_id = kept.type_id
    c.base = kept
    return c




class SmallGraph:
    """A graph of few rows for the exact writer: its rows (term ids) ordered as :class:`Rows`
    orders them (subject, then predicate with ``rdf:type`` first, stable), its distinct ids
    and the :class:`TermCache` holding their parts (``cache``: the store dictionary's kept
    one; None or a graph holding computed terms: one of its own). The rows are ``triples``
    (an (n, 3) array) or ``flat`` (one list s, p, o, s, p, o...: no array to convert)."""

    __slots__ = ("cols", "ids", "cache", "type_id", "n", "pred_ids", "typed_only")

    def __init__(self, triples: np.ndarray | None, keys_of: Callable[[list[int]], list],
                 cache: TermCache | None = None, flat: list | None = None):
        t, flat, ids, cache = small_terms(triples, keys_of, cache, flat)
        ty = cache.type_id if cache.type_id in ids else -1
        n = len(flat) // 3
        if n > 64:
            if t is None:
                t = np.asarray(flat, dtype=np.int64).reshape(-1, 3)
            s, p = t[:, 0], t[:, 1]
            if ty >= 0:
                p = np.where(p == ty, -1, p)
            # (subject, predicate) order, stable: rows that already are in it (one subject's
            # rows read from the store) keep their order without a sort
            if not ((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (p[1:] >= p[:-1]))).all():
                flat = t[np.lexsort((p, s))].ravel().tolist()
            cols = (flat[0::3], flat[1::3], flat[2::3])
        elif n > 1:
            # a stable sort of the row numbers by (subject, predicate with rdf:type first);
            # one subject's rows (a DESCRIBE, a CONSTRUCT about one entity) by the predicate
            # alone, or not at all when they are in order already
            sl, pl, ol = flat[0::3], flat[1::3], flat[2::3]
            pk = [-1 if x == ty else x for x in pl] if ty >= 0 else pl
            if sl.count(sl[0]) == n:
                order = None if pk == sorted(pk) else sorted(range(n), key=pk.__getitem__)
            else:
                order = sorted(range(n), key=list(zip(sl, pk, strict=True)).__getitem__)
            if order is None:
                cols = (sl, pl, ol)
            else:
                take = operator.itemgetter(*order)
                cols = (list(take(sl)), list(take(pl)), list(take(ol)))
        else:
            cols = (flat[0::3], flat[1::3], flat[2::3])
        #: the rows as three columns of ids (subjects, predicates, objects), in order
        self.cols = cols
        self.ids, self.cache, self.type_id, self.n = ids, cache, ty, n
        pl = flat[1::3]
        #: the distinct predicates; whether rdf:type is one and nothing else (Turtle writes it ``a``)
        self.pred_ids = set(pl)
        self.typed_only = ty >= 0 and flat.count(ty) == pl.count(ty)

    @property
    def rows(self):
        """The rows as (s, p, o) in order."""
        return zip(*self.cols, strict=True)

    def turtle_counts(self) -> dict[str, int]:
        """As :meth:`Terms.namespace_counts` with :meth:`Rows.turtle_unnamed` skipped."""
        ty = self.type_id
        cache = self.cache
        ttl = cache.fill(cache.ttl, cache.ttl_of, self.ids)
        counts = Counter(map(cache.ttl_ns.__getitem__, self.ids))
        counts.pop(None, None)
        if self.typed_only and ttl[ty][0] is not None:
            ns = ttl[ty][0]  # rdf:type only ever a predicate: written ``a``
            counts[ns] -= 1
            if not counts[ns]:
                del counts[ns]
        return counts


#: Turtle prefix heads whose terms' fragments a TermCache keeps (with at most MAX_CACHED terms over all)
TTL_HEADS = 1024


def small_turtle(g: SmallGraph, chosen: dict[str, str], indent: bytes, head: bytes | None = None) -> list[bytes]:
    """The rows of :func:`turtle_rows` (without the tail), term by term; with ``head`` (the
    prefix head of ``chosen``) the terms' Turtle under those prefixes is kept by it."""
    cache = g.cache
    got = None if head is None else cache.ttl_frags.get(head)
    if got is None:
        got = ({}, {})  # (each term as Turtle, and followed by a space: a subject's)
        if head is not None:
            # bounded by the terms kept over all heads, not by the heads' number: answers
            # about entities of many namespaces (one head each) keep theirs too
            if len(cache.ttl_frags) >= TTL_HEADS or cache.ttl_kept > MAX_CACHED:
                cache.ttl_frags = {}
                cache.ttl_kept = 0
            cache.ttl_frags[head] = got
    f, fsp = got
    miss = g.ids.difference(f)
    if miss:
        if head is not None:
            cache.ttl_kept += len(miss)
        pfx = {ns: (p + ":").encode("utf-8") for p, ns in chosen.items()}
        ttl = cache.fill(cache.ttl, cache.ttl_of, miss)
        for i in miss:
            ns, pre, local, full = ttl[i]
            b = pfx.get(ns)
            fsp[i] = (full if b is None else pre + b + local) + b" "
            f[i] = fsp[i][:-1]
    fp = {p: fsp[p] for p in g.pred_ids}  # (the few predicates: rdf:type written ``a``)
    if g.type_id >= 0:
        fp[g.type_id] = b"a "
    out: list[bytes] = []
    dot, semi, comma = b" .\n" + indent, b" ;\n" + indent + b"\t", b" , "
    ps = pp = -1
    for s, p, o in zip(*g.cols, strict=True):
        if s != ps:
            out += [dot, fsp[s], fp[p], f[o]]
            ps, pp = s, p
        elif p != pp:
            out += [semi, fp[p], f[o]]
            pp = p
        else:
            out += [comma, f[o]]
    if out:
        out[0] = b""
    return out


def small_rdfxml(g: SmallGraph) -> tuple[bytes, list[bytes]]:
    """(head, rows) of :func:`write_rdfxml`, term by term."""
    cache = g.cache
    parts = cache.parts
    preds = tuple(sorted(g.pred_ids))
    hd = cache.heads.get(preds)
    if hd is None:
        if any(parts[i][0] != IRI for i in preds):
            raise ValueError("cannot write this graph as RDF/XML: a predicate that is not an IRI")
        declared: dict[str, str] = {RDF: "rdf"}
        qn = dict(zip(preds, _predicate_qnames([parts[i][1] for i in preds], declared), strict=True))
        head = _XML_HEAD + b"<rdf:RDF" + "".join(
            f' xmlns:{p}="{_xml_escape_attr(ns)}"' for ns, p in sorted(declared.items(), key=lambda kv: kv[1])
        ).encode("utf-8") + b">\n"
        hd = (head, {p: ("\t\t<" + q).encode("utf-8") for p, q in qn.items()},
              {p: ("</" + q + ">\n").encode("utf-8") for p, q in qn.items()})
        if len(cache.heads) >= 4096:
            cache.heads = {}
        cache.heads[preds] = hd
    head, start, end = hd
    bn = g.ids & cache.bnodes
    nc = all(_NCNAME_LABEL.fullmatch(bnode_label(parts[i][1])) for i in bn)
    node = ' rdf:nodeID="' + ("" if nc else "b")
    opens = {s: cache.xml_open_of(s, node) for s in set(g.cols[0])}
    if bn:  # (a blank node's element depends on the graph's labels: made for this graph)
        objs = {i: cache.xml_obj_of(i, node) for i in g.ids}
    else:
        objs = cache.fill(cache.xml_obj, lambda i: cache.xml_obj_of(i, node), g.ids)
    close = b"\t</rdf:Description>\n"
    out: list[bytes] = []
    ps = -1
    for s, p, o in g.rows:
        if s != ps:
            if ps >= 0:
                out.append(close)
            out.append(opens[s])
            ps = s
        ob, lit = objs[o]
        if lit:
            out += [start[p], ob, end[p]]
        else:
            out += [start[p], ob]
    return head, out


def small_jsonld(g: SmallGraph) -> list[bytes]:
    """The rows of :func:`write_jsonld`, term by term."""
    cache = g.cache
    sl, pl, ol = g.cols
    subj = cache.fill(cache.js_subj, cache.js_subj_of, set(sl)).__getitem__
    pred = cache.fill(cache.js_pred, cache.js_pred_of, g.pred_ids).__getitem__
    obj = cache.fill(cache.js_obj, cache.js_obj_of, set(ol)).__getitem__
    out: list[bytes] = []
    ps = pp = -1
    for s, p, o in g.rows:
        if s != ps:
            if ps >= 0:
                out.append(b"]},\n")
            out += [subj(s), pred(p), obj(o)]
            ps, pp = s, p
        elif p != pp:
            out += [b"],", pred(p), obj(o)]
            pp = p
        else:
            out += [b",", obj(o)]
    return out


def small_ntriples(triples: np.ndarray | None, keys_of: Callable[[list[int]], list], cache: TermCache | None,
                   tail: bytes, flat: list | None = None) -> tuple[list[bytes], bytes]:
    """(every cell's term, a format of the body) of a small graph's N-Triples lines (N-Quads:
    ``tail`` names the graph) in the rows' order (as the vectorized writer keeps them), each
    term's text kept in ``cache``: the body is one ``%`` of the format with the terms."""
    _, flat, ids, cache = small_terms(triples, keys_of, cache, flat)
    nt = cache.fill(cache.nt, cache.nt_of, ids)
    frags = list(map(nt.__getitem__, flat))
    return frags, (b"%s %s %s" + tail.replace(b"%", b"%%")) * (len(flat) // 3)


def _small_body(head: bytes, rows: list[bytes], tail: bytes, check) -> bytes:
    """``head + rows + tail`` joined, then its size checked: a small graph's body is at
    most SMALL_ROWS rows of fragments already held (summing their lengths first cost as
    much as the join)."""
    rows.append(tail)
    rows[0] = head + rows[0]
    body = b"".join(rows)
    check(len(body))
    return body
