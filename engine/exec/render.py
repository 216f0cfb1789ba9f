"""Vectorized rendering of SELECT answers (SPARQL JSON, XML, CSV, TSV).

Why: the per-term Python of the older writers (one ``orjson.dumps`` or string
build per distinct term, one ``b"".join`` per row) cost 10-20x the query on
answers of 10^4-10^5 rows. Here each column's distinct ids are decoded once
as an Arrow string array (straight from the dictionary buffers), every
distinct term is rendered by Arrow string kernels (terms that need escaping,
a handful in practice, go through the exact per-term writer of
:mod:`engine.exec.serialize`), and rows are assembled by ``take`` plus one
element-wise join per chunk of rows: no Python per row or per term.

The body is produced as a sequence of chunks (:class:`Rendered`): its exact
size is known before the first row is assembled, so a size bound is checked
before anything is written, and a server can stream the chunks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.arrays import unique
from engine.exec.bindings import distinct_inverse
from engine.exec.context import LOCAL_BASE
from engine.exec.result import UNBOUND, QueryResult
from engine.memo import PerObject
from engine.terms import XSD_STRING

#: rows assembled per chunk (bounds the memory of one step, and the latency to the first byte)
CHUNK_ROWS = 1 << 15

_BIN = pa.large_binary()

#: below this many distinct terms the exact per-term writer renders them: the vectorized
#: path costs about 0.25 ms whatever the count, the exact writer 2-7 us per term
#: (crossover measured at 128-256 terms)
SMALL_DISTINCT = 160


def _lit(b: bytes) -> pa.Scalar:
    return pa.scalar(b, _BIN)


_STRINGS = (pa.large_string(), pa.large_binary())


def _as_bin(arr: pa.Array) -> pa.Array:
    """``arr`` as large_binary: a zero-copy view of large_string (a cast costs a
    compute call), a cast from anything else."""
    t = arr.type
    if t == _BIN:
        return arr
    return arr.view(_BIN) if t in _STRINGS else arr.cast(_BIN)


def keys_arrow(result: QueryResult, ids: np.ndarray, sorted_ids: bool = False) -> pa.LargeStringArray:
    """Keys of distinct valid ids, as Arrow strings: from the store dictionary's
    buffers when every id is a store id, through ``terms.keys`` otherwise."""
    terms = result.terms
    d = getattr(terms, "dictionary", None)
    if d is not None and hasattr(d, "as_arrow"):
        if len(ids) == 0:
            return d.keys_arrow(ids)
        lo, hi = (int(ids[0]), int(ids[-1])) if sorted_ids else (int(ids.min()), int(ids.max()))
        if lo >= 0 and hi < min(len(d), LOCAL_BASE):  # every id a store id: a take from its buffers
            return d.as_arrow().take(pa.array(ids))
    fn = getattr(terms, "keys_arrow", None)
    if fn is not None and len(ids) > 64:  # computed terms among them (engine.exec.evaluate.QueryContext)
        return fn(ids).cast(pa.large_string())
    return pa.array(terms.keys(ids), pa.large_string())


# --------------------------------------------------------------------------
# Term anatomy by byte scans: keys -> kind and piece boundaries
# --------------------------------------------------------------------------

#: kinds of a key (the fragment templates are indexed by them)
IRI, BNODE, PLAIN, LANG, DT, SLOW = range(6)

_XSD_STRING_SFX = ("^^<" + XSD_STRING + ">").encode()


def _offsets_data(keys: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Buffer]:
    """(offsets relative to the data's first byte, the data as uint8, its buffer) of a large binary/string array."""
    n = len(keys)
    offs = np.frombuffer(keys.buffers()[1], dtype=np.int64, count=n + 1, offset=keys.offset * 8)
    base = int(offs[0]) if n else 0
    data = keys.buffers()[2]
    if data is None or n == 0:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8), pa.py_buffer(b"")
    data = data.slice(base, int(offs[-1]) - base)
    return offs - base, np.frombuffer(data, dtype=np.uint8), data


class _Anatomy:
    """Each key's kind and the byte ranges of its parts, found by scans over the
    keys' bytes (no per-key Python, no regular expression).

    A key is written by a fast template when its bytes among ``special`` (those a
    format must escape) are exactly its own delimiters: the quotes of a literal
    (when ``"`` is special) and the angle brackets of an IRI or datatype (when
    ``<``/``>`` are). Anything else, and any key of unexpected shape, is ``SLOW``:
    the exact per-term writer renders it. ``a``/``b`` are the main part (IRI,
    label, lexical form) and the second part (language tag or datatype IRI, empty
    otherwise) as [start, end) byte ranges into ``data``."""

    def __init__(self, keys: pa.Array, special: bytes, ctrl: bool, high_ef: bool = False):
        keys = _as_bin(keys)
        self.keys = keys
        n = self.n = len(keys)
        offs, buf, self.data = _offsets_data(keys)
        start, end = offs[:-1], offs[1:]
        self.start, self.end = start, end
        length = end - start
        if n and int(length.min()) > 0:
            first, last = buf[start], buf[end - 1]
        else:
            nonempty = length > 0
            first = np.zeros(n, dtype=np.uint8)
            first[nonempty] = buf[start[nonempty]]
            last = np.zeros(n, dtype=np.uint8)
            last[nonempty] = buf[end[nonempty] - 1]
        kind = np.full(n, SLOW, dtype=np.int8)
        a0, a1 = start.copy(), end.copy()
        b0, b1 = end.copy(), end.copy()
        is_lit = first == 0x22
        if is_lit.any():
            self._literals(buf, is_lit, last, kind, a0, a1, b0, b1)
        iri = (first == 0x3C) & (last == 0x3E) & (length >= 2)
        kind[iri] = IRI
        a0[iri] += 1
        a1[iri] -= 1
        bn = (first == 0x5F) & (length >= 2)
        kind[bn] = BNODE
        a0[bn] += 2
        # special bytes: each key must hold exactly its own delimiters among them. Every key of
        # a template kind holds at least its delimiters, so when each special byte's total over
        # all keys is what the kinds need, each key holds exactly those: one count per byte, no
        # per-key pass (the usual case); otherwise the per-key count finds the keys to escape.
        kc = np.bincount(kind, minlength=SLOW + 1)
        need = {c: 0 for c in special}
        if 0x22 in need:
            need[0x22] = 2 * int(kc[PLAIN] + kc[LANG] + kc[DT])
        for c in (0x3C, 0x3E):
            if c in need:
                need[c] = int(kc[IRI] + kc[DT])
        extra = (buf < 0x20,) if ctrl else ()
        if high_ef:
            extra += (buf == 0xEF,)  # U+F000..U+FFFF (XML's U+FFFE/U+FFFF among them): the exact writer decides
        exact = all(np.count_nonzero(buf == c) == k for c, k in need.items()) and not any(m.any() for m in extra)
        if not exact:
            mask = None
            for c in special:
                m = buf == c
                mask = m if mask is None else mask | m
            for m in extra:
                mask = m if mask is None else mask | m
            pos = np.flatnonzero(mask) if mask is not None else np.zeros(0, np.int64)
            cnt = (np.bincount(np.searchsorted(end, pos, side="right"), minlength=n)[:n] if len(pos)
                   else np.zeros(n, np.int64))
            per_kind = np.zeros(SLOW + 1, dtype=np.int64)  # delimiters among the special bytes, by kind
            if 0x22 in special:
                per_kind[[PLAIN, LANG, DT]] += 2
            per_kind[[IRI, DT]] += (0x3C in special) + (0x3E in special)
            kind[cnt != per_kind[kind]] = SLOW
        slow = kind == SLOW
        if slow.any():
            s = start[slow]
            a0[slow] = a1[slow] = b0[slow] = b1[slow] = s
        self.kind = kind
        self.a0, self.a1, self.b0, self.b1 = a0, a1, b0, b1

    def _literals(self, buf, is_lit, last, kind, a0, a1, b0, b1) -> None:
        """Kinds and parts of the literal keys: the last quote closes the lexical form."""
        start, end = self.start, self.end
        qpos = np.flatnonzero(buf == 0x22)
        j = np.searchsorted(qpos, end) - 1
        lastq = qpos[np.maximum(j, 0)]  # a literal key holds its opening quote: j >= 0 for it
        lit_ok = is_lit & (lastq > start)
        sfx = np.where(lit_ok, lastq + 1, end)
        sfx_len = end - sfx
        has_sfx = lit_ok & (sfx_len > 0)
        sfx_first = np.zeros(len(start), dtype=np.uint8)
        sfx_first[has_sfx] = buf[sfx[has_sfx]]
        a0[is_lit] += 1
        a1[lit_ok] = lastq[lit_ok]
        kind[lit_ok & (sfx_len == 0)] = PLAIN
        lang = has_sfx & (sfx_first == 0x40) & (sfx_len > 1)
        kind[lang] = LANG
        b0[lang] = sfx[lang] + 1
        dtm = has_sfx & (sfx_first == 0x5E) & (sfx_len > 4) & (last == 0x3E)
        if dtm.any():
            # '^^<' then the IRI then '>'
            d = np.flatnonzero(dtm)
            d = d[(buf[sfx[d] + 1] == 0x5E) & (buf[sfx[d] + 2] == 0x3C)]
            kind[d] = DT
            b0[d] = sfx[d] + 3
            b1[d] = end[d] - 1
            # xsd:string literals are written as plain ones
            xs = d[sfx_len[d] == len(_XSD_STRING_SFX)]
            if len(xs):
                pieces = _slices(self.data, sfx[xs], end[xs])
                eq = np.asarray(pc.equal(pieces, pa.scalar(_XSD_STRING_SFX, _BIN)).to_numpy(zero_copy_only=False),
                                dtype=bool)
                xs = xs[eq]
                kind[xs] = PLAIN
                b0[xs] = end[xs]
                b1[xs] = end[xs]


def _slices(data: pa.Buffer, s: np.ndarray, e: np.ndarray) -> pa.Array:
    """data[s[i]:e[i]] for each i (ranges may overlap or leave gaps): the ranges
    become every other element of one zero-copy array over ``data`` whose
    offsets run s0, e0, s1, e1, ... (gaps between ranges are the odd elements;
    ranges must come in increasing order of start, which keys' parts do), then
    one ``take`` of the even elements."""
    n = len(s)
    if n == 0:
        return pa.array([], _BIN)
    offs = np.empty(2 * n + 1, dtype=np.int64)
    offs[0:-1:2] = s
    offs[1:-1:2] = e
    offs[-1] = e[-1]
    arr = pa.Array.from_buffers(_BIN, 2 * n, [None, pa.py_buffer(offs), data])
    return arr.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))


# --------------------------------------------------------------------------
# Per-format renderers of distinct keys: keys -> fragments (large_binary)
# --------------------------------------------------------------------------

#: a fragment template per kind: (pre, mid, post, swap); the fragment is
#: pre + X + mid + Y + post with (X, Y) = (main, second) part, or swapped
Template = tuple[bytes, bytes, bytes, bool]


def _few(keys: pa.Array, slow_render: Callable[[str], bytes], wraps) -> pa.Array | None:
    """The fragments by the exact writer when there are few keys, else None."""
    if len(keys) >= SMALL_DISTINCT:
        return None
    frags = [slow_render(k) for k in keys.to_pylist()]
    return pa.array([pre + f + post for pre, post in wraps for f in frags], _BIN)


def _render(keys: pa.Array, slow_render: Callable[[str], bytes], templates: dict[int, Template],
            special: bytes, ctrl: bool, wraps: list[tuple[bytes, bytes]] | None, *, high_ef: bool = False,
            bnode_whole: bool = False, second: bool = True, parts: bool = False):
    """Fragments of ``keys`` by per-kind templates, one table per (pre, post)
    wrap, concatenated; keys of no template (or needing escapes) by ``slow_render``.
    With ``parts``, may answer (pres, table, posts) instead (see :func:`_uniform`).

    Cost: a few numpy passes over the keys' bytes and offsets, two ``take`` of
    byte ranges and one element-wise join per wrap; constant in the number of
    kinds."""
    wraps = wraps or [(b"", b"")]
    if len(keys) == 0:  # a column never bound
        return pa.array([], _BIN)
    if (few := _few(keys, slow_render, wraps)) is not None:
        return few
    if (same := _uniform(keys, templates, special, ctrl, high_ef, bnode_whole, wraps, second, parts)) is not None:
        return same
    an = _Anatomy(keys, special, ctrl, high_ef)
    kind = an.kind
    for k in (IRI, BNODE, PLAIN, LANG, DT):
        if k not in templates:
            kind[kind == k] = SLOW
    a0, a1, b0, b1 = an.a0, an.a1, an.b0, an.b1
    if bnode_whole:
        bn = kind == BNODE
        a0[bn] = an.start[bn]
    if not second:
        b0 = b1
    s = kind == SLOW
    if s.any():
        a0[s] = a1[s] = an.start[s]
        b0 = np.where(s, an.start, b0)
        b1 = np.where(s, an.start, b1)
    swap = np.zeros(len(kind), dtype=bool)
    for k, t in templates.items():
        if t[3]:
            swap |= kind == k
    if swap.any():
        a0, a1, b0, b1 = np.where(swap, b0, a0), np.where(swap, b1, a1), np.where(swap, a0, b0), np.where(swap, a1, b1)
    xs = _slices(an.data, a0, a1)
    ys = _slices(an.data, b0, b1) if bool((b1 > b0).any()) else None
    slow = np.flatnonzero(s)
    if len(slow):
        frags = [slow_render(k) for k in an.keys.take(pa.array(slow)).cast(pa.large_string()).to_pylist()]
        xs = pc.replace_with_mask(xs, pa.array(s), pa.array(frags, _BIN))
    k0 = int(kind[0])
    uniform = bool((kind == k0).all())
    kidx = None if uniform else pa.array(kind.astype(np.int64))

    def per_kind(values: list[bytes]):
        return values[k0] if uniform else pa.array(values, _BIN).take(kidx)

    tables = []
    for wpre, wpost in wraps:
        pre = [wpre] * (SLOW + 1)
        mid = [b""] * (SLOW + 1)
        post = [wpost] * (SLOW + 1)
        for k, (tp, tm, tpost, _) in templates.items():
            pre[k], mid[k], post[k] = wpre + tp, tm, tpost + wpost
        if ys is None:
            args = [per_kind(pre), xs, per_kind([m + p for m, p in zip(mid, post, strict=True)])]
        else:
            args = [per_kind(pre), xs, per_kind(mid), ys, per_kind(post)]
        tables.append(_join(*args))
    return tables[0] if len(tables) == 1 else pa.concat_arrays(tables)


def _uniform(keys: pa.Array, templates: dict[int, Template], special: bytes, ctrl: bool, high_ef: bool,
             bnode_whole: bool, wraps: list[tuple[bytes, bytes]], second: bool = True,
             parts: bool = False):
    """The fragments when every key has one shape whose varying part is the key
    less a fixed number of bytes at each end -- IRIs ``<x>``, blank nodes
    ``_:x``, simple literals ``"x"``, literals of one datatype ``"x"^^<dt>`` or
    one language ``"x"@en`` -- and no key needs escaping; None otherwise.

    Why: a column is usually all IRIs, or all numbers of one datatype, and the
    general anatomy costs some 25 numpy calls; here a few byte scans decide, one
    slice and one join per wrap render. With ``parts`` the answer is (pres,
    main parts, posts), a constant prefix and suffix per wrap left to the row
    join, which saves the join over the keys."""
    keys = _as_bin(keys)
    n = len(keys)
    if n == 0:
        return None
    offs, buf, _ = _offsets_data(keys)
    start, end = offs[:-1], offs[1:]
    shortest = int((end - start).min())
    if shortest < 2:
        return None
    first = buf[start]
    f0 = int(first[0])
    if not bool((first == f0).all()):
        return None
    sfx = b""
    if f0 == 0x3C:
        kind, cut, quotes, angles = IRI, (1, 1), 0, n
    elif f0 == 0x5F:
        kind, cut, quotes, angles = BNODE, ((0 if bnode_whole else 2), 0), 0, 0
    elif f0 == 0x22:
        k0 = bytes(buf[start[0]:end[0]])
        sfx = k0[k0.rindex(b'"') + 1:]  # what follows the lexical form (the same in every key, checked below)
        quotes, angles = 2 * n, 0
        if not sfx:
            kind = PLAIN
        elif sfx[:3] == b"^^<" and sfx[-1:] == b">" and len(sfx) > 4:
            kind, angles = (PLAIN, n) if sfx[3:-1] == _XSD_STRING_SFX[3:-1] else (DT, n)
        elif sfx[:1] == b"@" and len(sfx) > 1:
            kind = LANG
        else:
            return None
        cut = (1, len(sfx) + 1)
        if shortest < len(sfx) + 2 or not bool((buf[end - len(sfx) - 1] == 0x22).all()):
            return None
        if sfx and not pc.all(pc.ends_with(keys, pattern=sfx)).as_py():
            return None
    else:
        return None
    if kind not in templates or (kind == IRI and not bool((buf[end - 1] == 0x3E).all())):
        return None
    # each key holds at least its own delimiters: totals equal to theirs mean no key holds another
    need = {0x22: quotes, 0x3C: angles, 0x3E: angles}
    for c in special:
        if np.count_nonzero(buf == c) != need.get(c, 0):
            return None
    if ctrl and bool((buf < 0x20).any()):
        return None
    if high_ef and bool((buf == 0xEF).any()):
        return None
    if cut == (0, 0):
        xs = keys
    else:  # (a stop past the end overflows in Arrow: the longest key's length instead)
        xs = pc.binary_slice(keys, cut[0], -cut[1] if cut[1] else int((end - start).max()))
    second_part = (sfx[3:-1] if kind == DT else sfx[1:] if kind == LANG else b"") if second else b""
    pre, mid, post, swap = templates[kind]
    if swap:  # pre + second + mid + main + post
        head, tail = pre + second_part + mid, post
    else:     # pre + main + mid + second + post
        head, tail = pre, mid + second_part + post
    pres = [wpre + head for wpre, _ in wraps]
    posts = [tail + wpost for _, wpost in wraps]
    if parts:
        return pres, xs, posts
    tables = [_join(p, xs, q) for p, q in zip(pres, posts, strict=True)]
    return tables[0] if len(tables) == 1 else pa.concat_arrays(tables)


def _join(*xs) -> pa.Array:
    """Element-wise concatenation of arrays and byte constants."""
    args = [_lit(x) if isinstance(x, bytes) else x if isinstance(x, pa.Scalar) else _as_bin(x) for x in xs]
    return pc.binary_join_element_wise(*args, _lit(b""))


_JSON = {
    IRI: (b'{"type":"uri","value":"', b'"}', b"", False),
    BNODE: (b'{"type":"bnode","value":"', b'"}', b"", False),
    PLAIN: (b'{"type":"literal","value":"', b'"}', b"", False),
    LANG: (b'{"type":"literal","value":"', b'","xml:lang":"', b'"}', False),
    DT: (b'{"type":"literal","value":"', b'","datatype":"', b'"}', False),
}

_XML = {
    IRI: (b"<uri>", b"</uri>", b"", False),
    BNODE: (b"<bnode>", b"</bnode>", b"", False),
    PLAIN: (b"<literal>", b"</literal>", b"", False),
    LANG: (b'<literal xml:lang="', b'">', b"</literal>", True),
    DT: (b'<literal datatype="', b'">', b"</literal>", True),
}

#: CSV writes a literal's lexical form alone (its tag or datatype dropped)
_CSV = {k: (b"", b"", b"", False) for k in (IRI, BNODE, PLAIN, LANG, DT)}


def json_fragments(keys: pa.Array, slow_render: Callable[[str], bytes], wraps=None, parts: bool = False):
    """Each key as its SPARQL JSON term object (orjson's bytes exactly)."""
    return _render(keys, slow_render, _JSON, b'"\\', True, wraps, parts=parts)


def xml_fragments(keys: pa.Array, slow_render: Callable[[str], bytes], wraps=None, parts: bool = False):
    """Each key as its SPARQL XML term element."""
    return _render(keys, slow_render, _XML, b'&<>"\\', True, wraps, high_ef=True, parts=parts)


def csv_fragments(keys: pa.Array, slow_render: Callable[[str], bytes], wraps=None, parts: bool = False):
    """Each key as its CSV field (IRIs bare, blank nodes as ``_:x``, literals by lexical form)."""
    return _render(keys, slow_render, _CSV, b'",\r\n\\', False, wraps, bnode_whole=True, second=False,
                   parts=parts)


_TSV_BNODE_OK = r"^_:[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_-])?$"


def tsv_fragments(keys: pa.Array, slow_render: Callable[[str], bytes], wraps=None, parts: bool = False):
    """Each key as its TSV field: the key itself, except tabs in literals and
    blank node labels outside the N-Triples label syntax (exact writer)."""
    return _keys_as_is(keys, slow_render, wraps, True)


def nt_fragments(keys: pa.Array, slow_render: Callable[[str], bytes], wraps=None, parts: bool = False):
    """Each key as its N-Triples term: the key itself (keys are N-Triples terms),
    except blank node labels outside the N-Triples label syntax (exact writer)."""
    return _keys_as_is(keys, slow_render, wraps, False)


def _keys_as_is(keys: pa.Array, slow_render: Callable[[str], bytes], wraps, tabs: bool) -> pa.Array:
    """The keys themselves, those that are not (blank nodes with another label
    syntax, and with ``tabs`` literals holding a tab) by ``slow_render``."""
    wraps = wraps or [(b"", b"")]
    if (few := _few(keys, slow_render, wraps)) is not None:
        return few
    keys = _as_bin(keys)
    offs, buf, _ = _offsets_data(keys)
    n = len(keys)
    start, end = offs[:-1], offs[1:]
    first = np.zeros(n, dtype=np.uint8)
    ne = end > start
    first[ne] = buf[start[ne]]
    fast = (first == 0x3C) | (first == 0x22)
    if tabs:
        tab = np.flatnonzero(buf == 0x09)
        if len(tab):
            fast[np.searchsorted(end, tab, side="right")] = False
    bn = np.flatnonzero(first == 0x5F)
    if len(bn):
        ok = np.asarray(pc.match_substring_regex(keys.take(pa.array(bn)).cast(pa.large_string()),
                                                 _TSV_BNODE_OK).to_numpy(zero_copy_only=False), dtype=bool)
        fast[bn[ok]] = True
    out = keys
    if not fast.all():
        slow = np.flatnonzero(~fast)
        vals = pa.array([slow_render(k) for k in keys.take(pa.array(slow)).cast(pa.large_string()).to_pylist()],
                        _BIN)
        out = pc.replace_with_mask(keys, pa.array(~fast), vals)
    tables = [out if (pre, post) == (b"", b"") else _join(pre, out, post) for pre, post in wraps]
    return tables[0] if len(tables) == 1 else pa.concat_arrays(tables)


# --------------------------------------------------------------------------
# Row assembly
# --------------------------------------------------------------------------


class Column:
    """One column's rows as pieces for the row join, each either constant bytes
    (the same in every row) or (table, idx): entry ``idx[row]`` of the table in
    each row, or (table, None): the table holds the rows' entries in row order.
    ``Column(table, idx)`` is the one-piece form: a table of each
    distinct term's fragment (per variant) and an empty entry for UNBOUND."""

    def __init__(self, table: pa.Array | None = None, idx: np.ndarray | None = None, pieces: list | None = None):
        if pieces is None:
            pieces = [(table, idx)]
        self.pieces: list = []
        size = const = rows = 0
        for p in pieces:
            if isinstance(p, bytes):
                const += len(p)
                self.pieces.append(p)
                continue
            t, i = _as_bin(p[0]), p[1]
            offs = np.frombuffer(t.buffers()[1], dtype=np.int64, count=len(t) + 1, offset=t.offset * 8)
            if i is None:  # the table is the rows' entries in order
                rows = len(t)
                size += int(offs[-1] - offs[0])
            else:
                rows = len(i)
                size += int(np.diff(offs)[i].sum()) if rows else 0
            self.pieces.append((t, i))
        self.size = size + rows * const


def column(result: QueryResult, col: np.ndarray, render, wrap: list[tuple[bytes, bytes]] | None = None,
           variant: np.ndarray | None = None, check: Callable[[int], None] | None = None,
           fmt: str | None = None) -> Column:
    """The Column of ``col`` with fragments from ``render(keys, wrap, parts=True)``.

    ``fmt`` (one of :data:`FORMATS`, the format ``render`` writes): try
    :func:`shaped_column` first (the same bytes without a distinct step).

    ``wrap``: (pre, post) per variant, around each bound cell; ``variant`` (int
    per row, default 0) picks it. ``check(bytes)`` is called with the size of
    the decoded keys before rendering (a bound on the distinct terms alone).
    ``render`` answers a table of fragments (each wrap's, concatenated) or
    (pres, main parts, posts) (see :func:`_uniform`): for a column bound in
    every row with one wrap, the main parts go to the row join between its
    constant prefix and suffix, and no fragment is joined per term."""
    col = np.asarray(col, dtype=np.int64)
    wrap = wrap or [(b"", b"")]
    if fmt is not None and (shaped := shaped_column(result, col, fmt, wrap, variant, check)) is not None:
        return shaped
    bound = col != UNBOUND
    all_bound = bool(bound.all())
    ids = col if all_bound else col[bound]
    uniq, inv = distinct_inverse(ids)
    keys = keys_arrow(result, uniq, sorted_ids=True)
    if check is not None:
        check(int(keys.nbytes))
    d = len(uniq)
    out = render(keys, wrap, parts=True)
    if isinstance(out, tuple):
        pres, xs, posts = out
        if all_bound and (len(wrap) == 1 or variant is None):
            return Column(pieces=[pres[0], (xs, inv), posts[0]])
        # cells unbound or of several variants: one table of fragments (a take per row, not
        # three: the rows outnumber the distinct terms)
        out = pa.concat_arrays([_join(p, xs, q) for p, q in zip(pres, posts, strict=True)])
    table = pa.concat_arrays([out, pa.array([b""], _BIN)])
    if variant is not None:
        inv = inv + d * (variant if all_bound else variant[bound])
    if all_bound:
        idx = inv
    else:
        idx = np.full(len(col), len(wrap) * d, dtype=np.int64)
        idx[bound] = inv
    return Column(table, idx)


def _buffer_bytes(arr: pa.Array) -> memoryview:
    """The concatenated values of a (large) binary array, without a copy."""
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    data = arr.buffers()[2]
    if data is None:
        return memoryview(b"")
    return memoryview(data)[int(offs[0]):int(offs[-1])]


class RenderCancelled(Exception):
    """The reader of a streamed answer went away (:meth:`Rendered.cancel`): the
    rest of the body is not built."""


class Rendered:
    """A body of known size made of ``head``, rows rendered chunk by chunk and
    ``tail``. ``size`` is exact; :meth:`chunks` yields the bytes in order
    (rows built lazily, ``CHUNK_ROWS`` at a time); :meth:`body` joins them.
    :meth:`cancel` (from any thread, e.g. when the client disconnects) makes
    the next chunk raise :class:`RenderCancelled` instead of being built."""

    def __init__(self, head: bytes, columns: list[Column], n: int, row_pre: bytes, col_sep: bytes,
                 row_post: bytes, strip: int, tail: bytes):
        self.cancelled = False
        self._tmpl: tuple | None = None
        self.head, self.columns, self.n = head, columns, n
        self.row_pre, self.col_sep, self.row_post, self.strip, self.tail = row_pre, col_sep, row_post, strip, tail
        per_row = len(row_pre) + len(row_post) + len(col_sep) * max(0, len(columns) - 1)
        self.size = len(head) + len(tail) + n * per_row + sum(c.size for c in columns) - (strip if n else 0)

    def _template(self) -> tuple[pa.Array, list]:
        """The row assembly's plan: every constant (merged) and every column table
        in one array, and per piece of a row the index of its constant or the
        base of its table there (with the piece's row indices, None: row order)."""
        args: list = [self.row_pre]
        for j, c in enumerate(self.columns):
            if j:
                args.append(self.col_sep)
            args.extend(c.pieces)
        args.append(self.row_post)
        merged: list = []
        for x in args:
            if isinstance(x, bytes):
                if not x:
                    continue
                if merged and isinstance(merged[-1], bytes):
                    merged[-1] += x
                    continue
            merged.append(x)
        consts = [x for x in merged if isinstance(x, bytes)]
        tables = [_as_bin(x[0]) for x in merged if not isinstance(x, bytes)]
        plan: list = []
        ci, base = 0, len(consts)
        for x in merged:
            if isinstance(x, bytes):
                plan.append((ci, None, False))
                ci += 1
            else:
                plan.append((base, x[1], True))
                base += len(x[0])
        big = pa.concat_arrays([pa.array(consts, _BIN), *tables])
        self.columns = []  # their tables are copied into ``big``: not held twice while rows are built
        return big, plan

    def _rows(self, a: int, b: int) -> pa.Array:
        """Rows ``a:b`` as one array whose data is their bytes: a single ``take`` of
        every piece of every row, row-major, from the plan's array (an element-wise
        join of the pieces measured 1.3-1.6x slower)."""
        if self._tmpl is None:
            self._tmpl = self._template()
        big, plan = self._tmpl
        idx = np.empty((b - a, len(plan)), dtype=np.int64)
        for j, (base, rows, table) in enumerate(plan):
            if not table:
                idx[:, j] = base
            elif rows is None:
                idx[:, j] = np.arange(base + a, base + b, dtype=np.int64)
            else:
                np.add(rows[a:b], base, out=idx[:, j])
        return big.take(pa.array(idx.reshape(-1)))

    def chunks(self, tick: Callable[[], None] | None = None) -> Iterator[bytes | memoryview]:
        """The body in pieces; ``tick()`` runs before each chunk of rows (deadline checks)."""
        yield self.head
        n = self.n
        for a in range(0, n, CHUNK_ROWS):
            if self.cancelled:
                raise RenderCancelled(f"the answer's reader went away after {a:,} of {n:,} rows")
            if tick is not None:
                tick()
            b = min(n, a + CHUNK_ROWS)
            mv = _buffer_bytes(self._rows(a, b))
            if b == n and self.strip:
                mv = mv[: len(mv) - self.strip]
            yield mv
        yield self.tail

    def cancel(self) -> None:
        """Stop building: the next chunk raises :class:`RenderCancelled`."""
        self.cancelled = True

    def body(self, tick: Callable[[], None] | None = None) -> bytes:
        return b"".join(self.chunks(tick))


# --------------------------------------------------------------------------
# Per-dictionary term shapes: rows rendered without a distinct step
# --------------------------------------------------------------------------
#
# Why: a mid-size answer (10^3-10^4 rows) of mostly distinct terms paid, per column, a sort
# for its distinct ids, byte scans over their keys to find their shape, a slice of their
# main parts and a take of those by row. A term's shape (kind, the bytes after its main part,
# and whether each format can write it by template) never changes: the dictionary is
# append-only, so the shape is found once per id, kept in 2 bytes, and later answers only
# gather it. A column whose rows' shapes all have templates is then one take of the rows'
# keys from the dictionary (row order), one slice of their main parts, and a constant (or
# per-shape) prefix and suffix for the row join: no distinct, no scan, no second take.

#: formats with a shape template, and their bit in the per-id "needs the exact writer" mask
FORMATS = ("json", "xml", "csv", "tsv", "nt")
_FMT_BIT = {f: 1 << (11 + i) for i, f in enumerate(FORMATS)}
_CODE_MASK = (1 << 11) - 1  # code 0: shape not yet found; _NO_SHAPE: no template shape
_NO_SHAPE = _CODE_MASK
#: the shape cache covers ids below this (2 bytes an id: 32 MiB at most per dictionary)
SHAPE_MAX_IDS = 1 << 24
#: rows below which the distinct path is kept (its fixed costs are lower on tiny columns)
SHAPE_MIN_ROWS = 64
#: rows above which the distinct path is kept: it assembles rows a chunk at a time, while
#: this path holds every row's key at once (bounded memory for big answers)
SHAPE_MAX_ROWS = 1 << 17

_FMT_SPECIAL = {"json": (b'"\\', True, False), "xml": (b'&<>"\\', True, True), "csv": (b'",\r\n\\', False, False)}
_FMT_TEMPLATES = {"json": _JSON, "xml": _XML, "csv": _CSV}
_KEY_HEAD = {IRI: b"<", BNODE: b"_:", PLAIN: b'"', LANG: b'"', DT: b'"'}
_CUT0 = {IRI: 1, BNODE: 2, PLAIN: 1, LANG: 1, DT: 1}


class ShapeCache:
    """Per id of one dictionary (uint16): a shape code (kind + the key's bytes after its
    main part) in the low 11 bits, one bit per format whose template cannot write the term
    (escapes, control bytes, odd blank node labels: the exact writer's job). Filled lazily
    for the ids answers touch; entries are written once with the same value by any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.marks = np.zeros(0, dtype=np.uint16)
        self.shapes: list[tuple[int, bytes]] = [(SLOW, b"")]  # code -> (kind, suffix); 0 unused
        self.code_of: dict[tuple[int, bytes], int] = {}
        self.cut1 = np.zeros(_CODE_MASK + 1, dtype=np.int64)
        self.cut0 = np.zeros(_CODE_MASK + 1, dtype=np.int64)

    def marks_of(self, d, ids: np.ndarray, hi: int) -> np.ndarray | None:
        """The marks of store ids ``ids`` (all ``< len(d)``, the largest ``hi``), finding unknown
        ones; None past the bound."""
        if hi >= SHAPE_MAX_IDS:
            return None
        marks = self.marks
        if hi >= len(marks):
            with self.lock:
                marks = self.marks
                if hi >= len(marks):
                    grown = np.zeros(min(SHAPE_MAX_IDS, max(hi + 1, 2 * len(marks), 1 << 12)), dtype=np.uint16)
                    grown[: len(marks)] = marks
                    self.marks = marks = grown
        m = marks[ids]
        unknown = m == 0
        if unknown.any():
            new = unique(ids[unknown])
            marks[new] = self._find(d.as_arrow().take(pa.array(new)))
            m = marks[ids]
        return m

    def _find(self, keys: pa.Array) -> np.ndarray:
        """Marks of ``keys`` by the anatomy scans (once per id ever)."""
        base = _Anatomy(keys, b"", False)
        kind = base.kind
        sfx_start = base.a1
        out = np.full(len(keys), _NO_SHAPE, dtype=np.uint16)
        ok = np.flatnonzero(kind != SLOW)
        if len(ok):
            sfx = _slices(base.data, sfx_start[ok], base.end[ok])
            tag = (kind[ok].astype(np.uint8) + 0x41).tobytes()  # the kind as one letter before the suffix
            tags = pa.Array.from_buffers(_BIN, len(ok), [None, pa.py_buffer(np.arange(len(ok) + 1, dtype=np.int64)),
                                                         pa.py_buffer(tag)])
            pairs = pc.binary_join_element_wise(tags, sfx, _lit(b""))
            vc = pc.unique(pairs)
            codes = np.zeros(len(vc), dtype=np.uint16)
            with self.lock:
                for i, p in enumerate(vc.to_pylist()):
                    k, s = p[0] - 0x41, p[1:]
                    c = self.code_of.get((k, s))
                    if c is None:
                        if len(self.shapes) >= _NO_SHAPE:
                            c = _NO_SHAPE
                        else:
                            c = len(self.shapes)
                            self.shapes.append((k, s))
                            self.cut0[c] = _CUT0[k]
                            self.cut1[c] = len(s)
                            self.code_of[(k, s)] = c
                    codes[i] = c
            out[ok] = codes[np.asarray(pc.index_in(pairs, vc).to_numpy(zero_copy_only=False), dtype=np.int64)]
        for f, (special, ctrl, high_ef) in _FMT_SPECIAL.items():
            slow = _Anatomy(keys, special, ctrl, high_ef).kind == SLOW
            out[slow] |= _FMT_BIT[f]
        # TSV and N-Triples write the key itself: odd blank node labels (and tabs, TSV) need the writer
        bn = kind == BNODE
        if bn.any():
            i = np.flatnonzero(bn)
            good = np.asarray(pc.match_substring_regex(_as_bin(keys).take(pa.array(i)).cast(pa.large_string()),
                                                       _TSV_BNODE_OK).to_numpy(zero_copy_only=False), dtype=bool)
            out[i[~good]] |= _FMT_BIT["tsv"] | _FMT_BIT["nt"]
        tab = np.flatnonzero(_offsets_data(_as_bin(keys))[1] == 0x09)
        if len(tab):
            out[np.searchsorted(base.end, tab, side="right")] |= _FMT_BIT["tsv"]
        out[kind == SLOW] |= sum(_FMT_BIT.values())
        return out

    def head_tail(self, code: int, fmt: str, wpre: bytes, wpost: bytes) -> tuple[bytes, bytes]:
        """The bytes before and after a term's main part in ``fmt``, inside the wrap."""
        kind, sfx = self.shapes[code]
        if fmt in ("tsv", "nt"):
            return wpre + _KEY_HEAD[kind], sfx + wpost
        second = sfx[4:-1] if kind == DT else sfx[2:] if kind == LANG else b""
        if fmt == "csv":
            return wpre + (b"_:" if kind == BNODE else b""), wpost
        pre, mid, post, swap = _FMT_TEMPLATES[fmt][kind]
        if swap:
            return wpre + pre + second + mid, post + wpost
        return wpre + pre, mid + second + post + wpost


_shape_cache: PerObject[ShapeCache] = PerObject(lambda _d: ShapeCache())   # per store dictionary


def shape_affixes(cache, codes: np.ndarray, fmt, wrap) -> tuple[np.ndarray, np.ndarray, list, list]:
    """The distinct term shapes of ``codes``, each code's index among them, and the prefix and
    suffix of each shape within each ``wrap`` variant (variant-major: ``heads[v * len(ucodes) +
    i]``): the small tables a column's pieces take per row."""
    ucodes = unique(codes)
    local = np.searchsorted(ucodes, codes)
    heads, tails = [], []
    for wpre, wpost in wrap:
        for c in ucodes.tolist():
            h, t = cache.head_tail(c, fmt, wpre, wpost)
            heads.append(h)
            tails.append(t)
    return ucodes, local, heads, tails


def shaped_column(result: QueryResult, col: np.ndarray, fmt: str, wrap: list[tuple[bytes, bytes]],
                  variant: np.ndarray | None = None, check: Callable[[int], None] | None = None) -> Column | None:
    """The Column of ``col`` in ``fmt`` from the dictionary's shape cache, or None when
    a term is not a store term, has no template in ``fmt``, or the column is small
    (then :func:`column`'s distinct path renders it, with the same bytes)."""
    n = len(col)
    if not SHAPE_MIN_ROWS <= n <= SHAPE_MAX_ROWS:
        return None
    d = getattr(result.terms, "dictionary", None)
    if d is None or not hasattr(d, "as_arrow"):
        return None
    # cells unbound (OPTIONAL): the bound cells' shapes as below, each piece of a row taken
    # from a table with one more, empty, entry for the unbound rows (unbound_column.py)
    bound = col != UNBOUND
    if not bound.all():
        from engine.exec.unbound_column import partly_bound  # noqa: PLC0415

        return partly_bound(result, col, bound, fmt, wrap, variant, check)
    ids = col
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= min(len(d), LOCAL_BASE):
        return None
    cache = _shape_cache(d)
    marks = cache.marks_of(d, ids, hi)
    if marks is None:
        return None
    bit = _FMT_BIT[fmt]
    mm = marks & (bit | _CODE_MASK)
    m_lo, m_hi = int(mm.min()), int(mm.max())
    uniform = m_lo == m_hi
    if uniform:
        if m_lo & bit or m_lo == _NO_SHAPE:
            return None
        codes = None
    else:
        codes = marks & _CODE_MASK
        if bool(((marks & bit) != 0).any()) or bool((codes == _NO_SHAPE).any()):
            return None
    c0 = m_lo
    dict_arr = d.as_arrow()
    if check is not None:
        doffs = np.frombuffer(dict_arr.buffers()[1], dtype=np.int64, count=len(dict_arr) + 1,
                              offset=dict_arr.offset * 8)
        check(int((doffs[ids + 1] - doffs[ids]).sum()))
    keys = _as_bin(dict_arr.take(pa.array(ids)))
    koffs, _, data = _offsets_data(keys)
    if uniform:
        s0, e0 = koffs[:-1] + int(cache.cut0[c0]), koffs[1:] - int(cache.cut1[c0])
    else:
        s0, e0 = koffs[:-1] + cache.cut0[codes], koffs[1:] - cache.cut1[codes]
    # the main parts as the even elements of one zero-copy array over the keys (row order, so
    # its offsets only grow): the row assembly takes them from there, no slice is copied
    n2 = 2 * len(ids)
    offs = np.empty(n2 + 1, dtype=np.int64)
    offs[0:-1:2] = s0
    offs[1:-1:2] = e0
    offs[-1] = e0[-1]
    inner = pa.Array.from_buffers(_BIN, n2, [None, pa.py_buffer(offs), data])
    even = np.arange(0, n2, 2, dtype=np.int64)
    if uniform and (len(wrap) == 1 or variant is None):
        head, tail = cache.head_tail(c0, fmt, *wrap[0])
        return Column(pieces=[head, (inner, even), tail])
    if uniform:
        codes = np.full(len(ids), c0, dtype=np.uint16)
    # per-shape (and per-variant) prefixes and suffixes: small tables, a take per row
    ucodes, local, heads, tails = shape_affixes(cache, codes, fmt, wrap)
    idx = local if variant is None else local + len(ucodes) * np.asarray(variant, dtype=np.int64)
    return Column(pieces=[(pa.array(heads, _BIN), idx), (inner, even), (pa.array(tails, _BIN), idx)])
