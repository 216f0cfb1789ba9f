"""Column-wise string functions for the expression evaluator (engine/exec/functions.py).

``STR``, ``LCASE``, ``UCASE``, ``SUBSTR`` (integer constants), ``STRBEFORE`` /
``STRAFTER`` (a constant string), ``CONCAT`` and ``STRLEN`` evaluated with
Arrow kernels over the distinct values of their argument, instead of one
Python call per distinct value: ``FILTER(STRSTARTS(STR(?x), "http://a/"))``
over 139k distinct IRIs took 1.0-1.4 s term by term against pyoxigraph's
0.1 s (issue 14: such a filter made the class slower than Oxigraph).

A string expression's value is a :class:`Lex`: per row an entry number (-1:
an error or unbound), per entry the lexical form and language tag of a string
literal. Consumers read it without interning a term per value: the string
tests, REGEX, comparisons with a constant string (functions.py), STRLEN (a
few distinct integers); only where the value itself is wanted (a projection,
a BIND, a GROUP BY key) are its keys built, column-wise, and interned in one
call. Semantics are the per-value functions' (functions.py ``_f_*``): string
literal arguments (simple or language-tagged), results of the first
argument's kind, argument compatibility for STRBEFORE / STRAFTER; anything
else (non-integer SUBSTR bounds, a typed constant) returns None and the
per-value path decides.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.exec.bindings import distinct_inverse
from engine.sparql.algebra import Call, Const
from engine.terms import XSD_INTEGER, from_key, unescape_string

#: functions whose value is a string literal computed here
LEX_OPS = frozenset({"STR", "LCASE", "UCASE", "SUBSTR", "STRBEFORE", "STRAFTER", "CONCAT", "LANG", "STRLANG",
                     "ENCODE_FOR_URI", "MD5", "SHA1", "SHA256", "SHA384", "SHA512"})
#: ... and the ones whose value is an integer or an IRI
INT_OPS = frozenset({"STRLEN"})
IRI_OPS = frozenset({"IRI", "URI"})
#: DATATYPE: an IRI per distinct argument
DT_OP = "DATATYPE"
_INTEGER_SUFFIX = "^^<" + XSD_INTEGER + ">"
_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]*:"
_TYPED_BODY = r'^"(?P<b>.*)"\^\^<[^<>"]*>$'
_LS = pa.large_string()
#: per-value fix-ups (escaped bodies, non-ASCII case mapping) run this many at a time
_CHUNK = 65536


class Lex:
    """String literal values of an expression over ``len(inv)`` rows: row r holds
    entry ``inv[r]`` (-1: an error or unbound), entry i is the literal with
    lexical form ``lex[i]`` and language tag ``tag[i]`` ("": none; ``tag`` None:
    no entry has one). Entries need not be distinct."""

    __slots__ = ("inv", "lex", "tag")

    def __init__(self, inv: np.ndarray, lex: pa.Array, tag: pa.Array | None):
        self.inv = inv
        self.lex = lex
        self.tag = tag

    def tags(self) -> pa.Array:
        return self.tag if self.tag is not None else pa.nulls(len(self.lex), _LS).fill_null("")


def supported(expr) -> bool:
    """Whether ``expr`` is a call this module may evaluate (it can still decline)."""
    return isinstance(expr, Call) and (expr.op in LEX_OPS or expr.op in INT_OPS or expr.op == DT_OP
                                       or (expr.op in IRI_OPS and len(expr.args) == 1
                                           and isinstance(expr.args[0], Call) and expr.args[0].op in LEX_OPS))


def lex_of(ev, expr) -> Lex | None:
    """The string values of ``expr`` over the evaluator's rows; None when the
    per-value path must decide (an argument form not handled here)."""
    if isinstance(expr, Call) and expr.op in LEX_OPS:
        fn = _LEX_FUNCS[expr.op]
        return fn(ev, expr)
    if isinstance(expr, Const):
        return None
    return _string_literals(ev, ev.ids(expr))


def ids_of(ev, expr) -> np.ndarray | None:
    """Term ids of a :data:`LEX_OPS` / :data:`INT_OPS` call per row (UNBOUND for
    errors); None when the per-value path must decide."""
    if expr.op in INT_OPS:
        lx = lex_of(ev, expr.args[0]) if len(expr.args) == 1 else None
        if lx is None:
            return None
        if not len(lx.lex):
            return np.full(len(lx.inv), -1, dtype=np.int64)
        lengths = pc.utf8_length(lx.lex).to_numpy(zero_copy_only=False).astype(np.int64)
        uniq, inv = distinct_inverse(lengths)
        ids = np.asarray(ev.ctx.intern([f'"{v}"{_INTEGER_SUFFIX}' for v in uniq.tolist()]), dtype=np.int64)
        return _gather(ids[inv.reshape(-1)], lx.inv)
    if expr.op in IRI_OPS:
        return _iri_ids(ev, expr)
    if expr.op == DT_OP:
        return _datatype_ids(ev, expr)
    lx = lex_of(ev, expr)
    if lx is None:
        return None
    return _gather(intern_lex(ev.ctx, lx.lex, lx.tag), lx.inv)


def _iri_ids(ev, expr) -> np.ndarray | None:
    """IRI / URI of a string function's values: a simple literal with a scheme is
    that IRI, a relative one is resolved against the query's base (one by one);
    a language-tagged string is an error (``functions._f_iri``)."""
    from engine.iri import resolve_iri  # noqa: PLC0415

    lx = lex_of(ev, expr.args[0])
    if lx is None:
        return None
    m = len(lx.lex)
    if not m:
        return np.full(len(lx.inv), -1, dtype=np.int64)
    lex = lx.lex
    base = getattr(ev.ctx, "base", None)
    if base:
        rel = ~pc.match_substring_regex(lex, _SCHEME).to_numpy(zero_copy_only=False)
        if rel.any():
            fixed = [resolve_iri(base, v) for v in lex.filter(pa.array(rel)).to_pylist()]
            lex = pc.replace_with_mask(lex, pa.array(rel), pa.array(fixed, _LS))
    lt, gt, empty = (pa.scalar(c, _LS) for c in ("<", ">", ""))
    keys = pc.binary_join_element_wise(lt, lex, gt, empty)
    ev.ctx.check_budget()
    fn = getattr(ev.ctx, "intern_arrow", None)
    ids = np.asarray(fn(keys) if fn is not None else ev.ctx.intern(keys.to_pylist()), dtype=np.int64)
    if lx.tag is not None:  # a language-tagged string is no IRI
        ids[pc.not_equal(lx.tag, "").to_numpy(zero_copy_only=False)] = -1
    return _gather(ids, lx.inv)


def _gather(per_entry: np.ndarray, inv: np.ndarray) -> np.ndarray:
    out = np.full(len(inv), -1, dtype=np.int64)
    ok = inv >= 0
    if len(per_entry):
        out[ok] = per_entry[inv[ok]]
    return out


def key_array(lex: pa.Array, tag: pa.Array | None) -> pa.Array:
    """Term keys of string literals (as ``engine.terms.literal_key`` writes them),
    column-wise."""
    body = lex.cast(_LS)
    if _needs_escape(body):  # (Arrow's substring replacement scans plainly: only when needed)
        for a, b in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r")):
            body = pc.replace_substring(body, a, b)
    quote, at, empty = (pa.scalar(c, _LS) for c in ('"', "@", ""))
    body = pc.binary_join_element_wise(quote, body.cast(_LS), quote, empty)
    if tag is None:
        return body
    tagged = pc.binary_join_element_wise(body, tag.cast(_LS), at)
    return pc.if_else(pc.equal(tag, ""), body, tagged)


def _needs_escape(arr: pa.Array) -> bool:
    """Whether any value of a string array holds a byte a key escapes (\\ " LF CR):
    one pass over the data buffer (it may hold bytes of other values: a false
    "yes" only costs the replacements)."""
    if len(arr) == 0:
        return False
    data = arr.buffers()[2]
    if data is None:
        return False
    b = np.frombuffer(data, dtype=np.uint8)
    return bool(((b == 0x5C) | (b == 0x22) | (b == 0x0A) | (b == 0x0D)).any())


def intern_lex(ctx, lex: pa.Array, tag: pa.Array | None) -> np.ndarray:
    """Ids of string literals given column-wise (one bulk intern)."""
    if len(lex) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = key_array(lex, tag)
    ctx.check_budget()
    fn = getattr(ctx, "intern_arrow", None)
    if fn is not None:
        return np.asarray(fn(keys), dtype=np.int64)
    return np.asarray(ctx.intern(keys.to_pylist()), dtype=np.int64)


# ---------------------------------------------------------------- sources


def _keys(ctx, ids: np.ndarray) -> pa.Array:
    from engine.exec.functions import _keys_arrow  # noqa: PLC0415 (functions imports this module)

    keys = _keys_arrow(ctx, ids).cast(_LS)
    _charge(ctx, keys.nbytes * 3)  # the keys, and the bodies and results made from them
    return keys


def _charge(ctx, nbytes: int) -> None:
    """The query's memory budget sees ``nbytes`` about to be allocated (contexts
    without a budget, such as test stand-ins, have no check)."""
    check = getattr(ctx, "check_memory", None)
    if check is not None:
        check(nbytes)


def _string_literals(ev, ids: np.ndarray) -> Lex:
    """The string literals (simple or language-tagged) of an id column; any other
    term, and unbound, is an error (entry -1)."""
    return string_literal_values(ev.ctx, ids)


def string_literal_values(ctx, ids: np.ndarray) -> Lex:
    """``_string_literals`` given the query context (GROUP_CONCAT's arguments)."""
    from engine.exec.functions import _string_keys  # noqa: PLC0415

    uniq, inv = distinct_inverse(ids)
    inv = inv.reshape(-1)
    cand = np.flatnonzero(uniq >= 0)
    emap = np.full(len(uniq), -1, dtype=np.int64)
    if not len(cand):
        return Lex(emap[inv], pa.array([], _LS), None)
    pos, bodies, tags = _string_keys(_keys(ctx, uniq[cand]))
    ctx.check_budget()
    emap[cand[pos]] = np.arange(len(pos), dtype=np.int64)
    if len(tags) and not pc.any(pc.not_equal(tags, "")).as_py():
        tags = None
    return Lex(emap[inv], bodies.cast(_LS), tags)


def _unescape(bodies: pa.Array) -> pa.Array:
    """Literal bodies as in keys (\\\\ \\" \\n \\r escaped) -> lexical forms."""
    from engine.exec.functions import has_backslash  # noqa: PLC0415

    esc = has_backslash(bodies)
    if not esc.any():
        return bodies
    fixed = [unescape_string(b) for b in bodies.filter(pa.array(esc)).to_pylist()]
    return pc.replace_with_mask(bodies, pa.array(esc), pa.array(fixed, _LS))


def _str(ev, expr) -> Lex | None:
    """STR: an IRI's text, a literal's lexical form (a simple literal); blank nodes
    and unbound are errors."""
    if len(expr.args) != 1:
        return None
    return str_values(ev.ctx, ev.ids(expr.args[0]))


def str_values(ctx, ids: np.ndarray) -> Lex:
    """STR of each id: an IRI's text, a literal's lexical form; blank nodes and
    unbound are errors (entry -1)."""
    from engine.exec.functions import _string_keys  # noqa: PLC0415

    uniq, inv = distinct_inverse(ids)
    inv = inv.reshape(-1)
    cand = np.flatnonzero(uniq >= 0)
    emap = np.full(len(uniq), -1, dtype=np.int64)
    if not len(cand):
        return Lex(emap[inv], pa.array([], _LS), None)
    keys = _keys(ctx, uniq[cand])
    iri = pc.fill_null(pc.starts_with(keys, "<"), False).to_numpy(zero_copy_only=False)
    lit = pc.fill_null(pc.starts_with(keys, '"'), False).to_numpy(zero_copy_only=False)
    pieces = []
    done = 0

    def add(where: np.ndarray, values: pa.Array) -> None:
        nonlocal done
        emap[cand[where]] = np.arange(done, done + len(where), dtype=np.int64)
        pieces.append(values.cast(_LS))
        done += len(where)

    ix = np.flatnonzero(iri)
    if len(ix):
        inner = pc.binary_slice(keys.filter(pa.array(iri)).cast(pa.large_binary()), 1, -1)
        add(ix, inner.cast(_LS))
    lx = np.flatnonzero(lit)
    if len(lx):
        lkeys = keys.filter(pa.array(lit))
        pos, bodies, _ = _string_keys(lkeys)  # simple and language-tagged
        add(lx[pos], bodies)
        typed = np.ones(len(lx), dtype=bool)
        typed[pos] = False
        if typed.any():
            parts = pc.extract_regex(lkeys.filter(pa.array(typed)), pattern=_TYPED_BODY)
            ok = parts.is_valid().to_numpy(zero_copy_only=False)
            add(lx[np.flatnonzero(typed)[ok]], _unescape(parts.filter(pa.array(ok)).field("b").cast(_LS)))
    ctx.check_budget()
    lex = pa.concat_arrays(pieces) if pieces else pa.array([], _LS)
    return Lex(emap[inv], lex, None)


def _case(ev, expr) -> Lex | None:
    """LCASE / UCASE: ASCII strings by Arrow's ASCII kernels, the others by
    Python's case mapping (the per-value functions' own)."""
    if len(expr.args) != 1:
        return None
    lx = lex_of(ev, expr.args[0])
    if lx is None:
        return None
    upper = expr.op == "UCASE"
    out = pc.ascii_upper(lx.lex) if upper else pc.ascii_lower(lx.lex)
    other = ~pc.string_is_ascii(lx.lex).to_numpy(zero_copy_only=False)
    if other.any():
        vals = lx.lex.filter(pa.array(other)).to_pylist()
        fixed = [v.upper() for v in vals] if upper else [v.lower() for v in vals]
        out = pc.replace_with_mask(out, pa.array(other), pa.array(fixed, _LS))
    ev.ctx.check_budget()
    return Lex(lx.inv, out, lx.tag)


def _int_const(expr) -> int | None:
    """The value of an xsd:integer constant (None for any other expression)."""
    if not isinstance(expr, Const) or not expr.key.endswith(_INTEGER_SUFFIX):
        return None
    try:
        return int(from_key(expr.key).lexical)
    except ValueError:
        return None


def _substr(ev, expr) -> Lex | None:
    """SUBSTR with integer constant bounds: the characters at positions p with
    start <= p < start + length (1-based, codepoints), of the argument's kind."""
    if len(expr.args) not in (2, 3):
        return None
    start = _int_const(expr.args[1])
    length = _int_const(expr.args[2]) if len(expr.args) == 3 else None
    if start is None or (len(expr.args) == 3 and length is None):
        return None
    lx = lex_of(ev, expr.args[0])
    if lx is None:
        return None
    first = max(start, 1)
    if length is None:
        out = pc.utf8_slice_codeunits(lx.lex, first - 1)
    else:
        end = start + length
        if end <= first:
            out = pc.utf8_slice_codeunits(lx.lex, 0, 0)
        else:
            out = pc.utf8_slice_codeunits(lx.lex, first - 1, end - 1)
    return Lex(lx.inv, out, lx.tag)


def _string_const(expr):
    """(lexical form, tag or "") of a string literal constant; None otherwise."""
    if not isinstance(expr, Const) or expr.key[:1] != '"' or '"^^' in expr.key:
        return None
    t = from_key(expr.key)
    return t.lexical, (t.lang or "").lower()


def _before_after(ev, expr) -> Lex | None:
    """STRBEFORE / STRAFTER with a constant string: the part before / after its
    first occurrence, of the first argument's kind; no occurrence: "" (a simple
    literal). A tagged constant against another tag (or none) is an error."""
    if len(expr.args) != 2:
        return None
    c = _string_const(expr.args[1])
    if c is None:
        return None
    lx = lex_of(ev, expr.args[0])
    if lx is None:
        return None
    needle, ctag = c
    inv = lx.inv
    if ctag:  # argument compatibility: the same language tag
        ok = pc.equal(pc.utf8_lower(lx.tags()), ctag).to_numpy(zero_copy_only=False)
        if not ok.all():
            inv = np.where((inv >= 0) & ~ok[np.maximum(inv, 0)], -1, inv) if len(ok) else inv
    before = expr.op == "STRBEFORE"
    if needle == "":
        out = pc.utf8_slice_codeunits(lx.lex, 0, 0) if before else lx.lex
        return Lex(inv, out, lx.tag)
    parts = pc.split_pattern(lx.lex, pattern=needle, max_splits=1)
    found = pc.equal(pc.list_value_length(parts), 2)
    empty = pc.utf8_slice_codeunits(lx.lex, 0, 0)
    if before:
        out = pc.if_else(found, pc.list_element(parts, 0), empty)
    else:
        after = pc.list_flatten(pc.list_slice(parts, 1, 2))
        out = pc.replace_with_mask(empty, found, after.cast(_LS))
    tag = None if lx.tag is None else pc.if_else(found, lx.tag, pa.scalar("", _LS))
    ev.ctx.check_budget()
    return Lex(inv, out.cast(_LS), tag)


def _concat(ev, expr) -> Lex | None:
    """CONCAT: the arguments' lexical forms joined, once per distinct combination of
    their values; the common language tag when every argument has the same one,
    else a simple literal."""
    from engine.exec.functions import unique_rows  # noqa: PLC0415

    if not expr.args or all(isinstance(a, Const) for a in expr.args):
        return None  # (constants alone: the per-value path evaluates them once)
    args: list = []
    for a in expr.args:
        c = _string_const(a)
        if c is not None:
            args.append(c)
            continue
        if isinstance(a, Const):
            return None
        lx = lex_of(ev, a)
        if lx is None:
            return None
        args.append(lx)
    lexes = [a for a in args if isinstance(a, Lex)]
    if len(lexes) == 1:
        combos, inv = np.arange(len(lexes[0].lex), dtype=np.int64).reshape(-1, 1), lexes[0].inv
    else:
        combos, inv = unique_rows([a.inv for a in lexes])
        bad = (combos < 0).any(axis=1)
        if bad.any():  # a combination with an argument in error
            keep = np.flatnonzero(~bad)
            remap = np.full(len(combos), -1, dtype=np.int64)
            remap[keep] = np.arange(len(keep), dtype=np.int64)
            combos, inv = combos[keep], remap[inv]
    m = len(combos)
    _charge(ev.ctx, sum((a.lex.nbytes // max(1, len(a.lex)) + 16) * m for a in lexes))
    bodies, tags = [], []
    k = 0
    for a in args:
        if isinstance(a, Lex):
            idx = pa.array(combos[:, k])
            k += 1
            bodies.append(a.lex.take(idx))
            tags.append(a.tags().take(idx))
        else:
            bodies.append(pa.scalar(a[0], _LS))
            tags.append(pa.scalar(a[1], _LS))
    ev.ctx.check_budget()
    if m == 0:
        return Lex(inv, pa.array([], _LS), None)
    out = pc.binary_join_element_wise(*bodies, pa.scalar("", _LS))
    tag = None
    if any(isinstance(t, pa.Array) and pc.any(pc.not_equal(t, "")).as_py() or
           (isinstance(t, pa.Scalar) and t.as_py()) for t in tags):
        same = None
        for t in tags[1:]:
            eq = pc.equal(tags[0], t)
            same = eq if same is None else pc.and_(same, eq)
        first = tags[0] if isinstance(tags[0], pa.Array) else pa.array([tags[0].as_py()] * m, _LS)
        tag = first if same is None else pc.if_else(same, first, pa.scalar("", _LS))
    return Lex(inv, out.cast(_LS), tag)


def _one_argument(ev, expr) -> tuple | None:
    """A one-argument call's distinct argument ids: ``(uniq, inverse, positions of the
    bound ones, a per-distinct map of -1)``; None for another arity."""
    if len(expr.args) != 1:
        return None
    uniq, inv = distinct_inverse(ev.ids(expr.args[0]))
    return uniq, inv.reshape(-1), np.flatnonzero(uniq >= 0), np.full(len(uniq), -1, dtype=np.int64)


def _lang(ev, expr) -> Lex | None:
    """LANG: a literal's language tag ("" for simple and typed ones); IRIs, blank
    nodes and unbound are errors."""
    from engine.exec.functions import _string_keys  # noqa: PLC0415

    got = _one_argument(ev, expr)
    if got is None:
        return None
    uniq, inv, cand, emap = got
    if not len(cand):
        return Lex(emap[inv], pa.array([], _LS), None)
    keys = _keys(ev.ctx, uniq[cand])
    lit = np.flatnonzero(pc.fill_null(pc.starts_with(keys, '"'), False).to_numpy(zero_copy_only=False))
    tags = pa.nulls(len(lit), _LS).fill_null("")
    if len(lit):
        pos, _, t = _string_keys(keys.take(pa.array(lit)))
        if len(pos):
            mask = np.zeros(len(lit), dtype=bool)
            mask[pos] = True
            tags = pc.replace_with_mask(tags, pa.array(mask), t.cast(_LS))
    emap[cand[lit]] = np.arange(len(lit), dtype=np.int64)
    ev.ctx.check_budget()
    return Lex(emap[inv], tags, None)


_LANG_TAG = r"^[A-Za-z]+(?:-[A-Za-z0-9]+)*$"


def _strlang(ev, expr) -> Lex | None:
    """STRLANG(simple literal, "tag"): the literal with the (lower-cased) tag; a
    tagged first argument, or a malformed tag, is an error."""
    import re  # noqa: PLC0415

    if len(expr.args) != 2:
        return None
    c = _string_const(expr.args[1])
    if c is None or c[1]:
        return None
    lx = lex_of(ev, expr.args[0])
    if lx is None:
        return None
    inv = _simple_only(lx)
    if not re.fullmatch(_LANG_TAG[1:-1], c[0]):
        inv = np.full(len(inv), -1, dtype=np.int64)
    tag = pa.array([c[0].lower()] * len(lx.lex), _LS)
    return Lex(inv, lx.lex, tag)


def _simple_only(lx: Lex) -> np.ndarray:
    """``lx.inv`` with the rows of language-tagged entries made errors."""
    if lx.tag is None or not len(lx.lex):
        return lx.inv
    tagged = pc.not_equal(lx.tag, "").to_numpy(zero_copy_only=False)
    return np.where((lx.inv >= 0) & tagged[np.maximum(lx.inv, 0)], -1, lx.inv)


#: bytes ENCODE_FOR_URI keeps (RFC 3986's unreserved characters), and the hex digits
_KEEP = np.zeros(256, dtype=bool)
_KEEP[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~", dtype=np.uint8)] = True
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def _percent_encode(arr: pa.Array) -> pa.Array:
    """Every UTF-8 byte of every string outside the unreserved set as %XX, in one
    pass over the data buffer (numpy): each byte's output width, their running
    sum for the output positions and the strings' new offsets."""
    arr = arr.cast(_LS)
    n = len(arr)
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    buf = arr.buffers()[2]
    data = np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.zeros(0, dtype=np.uint8)
    b = data[offs[0]:offs[-1]]
    keep = _KEEP[b]
    w = np.where(keep, 1, 3)
    ends = np.cumsum(w)
    starts = ends - w
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    out[starts[keep]] = b[keep]
    esc = ~keep
    p, v = starts[esc], b[esc]
    out[p] = 0x25  # %
    out[p + 1] = _HEX[v >> 4]
    out[p + 2] = _HEX[v & 15]
    new_offs = np.concatenate([np.zeros(1, dtype=np.int64), ends])[offs - offs[0]]
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(new_offs), pa.py_buffer(out))


def _encode(ev, expr) -> Lex | None:
    """ENCODE_FOR_URI: every UTF-8 byte outside the unreserved set as %XX (a simple
    literal), column-wise (:func:`_percent_encode`)."""
    if len(expr.args) != 1:
        return None
    lx = lex_of(ev, expr.args[0])
    if lx is None:
        return None
    if not len(lx.lex):
        return Lex(lx.inv, lx.lex, None)
    _charge(ev.ctx, lx.lex.nbytes * 8)  # the output (up to 3x) and the per-byte positions
    out = _percent_encode(lx.lex)
    ev.ctx.check_budget()
    return Lex(lx.inv, out, None)


def _digest(ev, expr) -> Lex | None:
    """MD5 / SHA1 / SHA256 / SHA384 / SHA512 of a simple literal's UTF-8 bytes, as
    lower-case hex (a simple literal); a tagged string is an error."""
    import hashlib  # noqa: PLC0415

    if len(expr.args) != 1:
        return None
    lx = lex_of(ev, expr.args[0])
    if lx is None:
        return None
    algo = expr.op.lower()
    vals = lx.lex.to_pylist()
    out = []
    for i in range(0, len(vals), _CHUNK):
        ev.ctx.check_budget()
        out.extend(hashlib.new(algo, v.encode("utf-8")).hexdigest() for v in vals[i:i + _CHUNK])
    return Lex(_simple_only(lx), pa.array(out, _LS), None)


def _datatype_ids(ev, expr) -> np.ndarray | None:
    """DATATYPE: per distinct argument, xsd:string for a simple literal,
    rdf:langString for a tagged one, its datatype for a typed one; IRIs, blank
    nodes and unbound are errors."""
    from engine.terms import RDF_LANGSTRING, XSD_STRING  # noqa: PLC0415

    got = _one_argument(ev, expr)
    if got is None:
        return None
    uniq, inv, cand, per = got
    if len(cand):
        keys = _keys(ev.ctx, uniq[cand])
        lit = pc.fill_null(pc.starts_with(keys, '"'), False)
        simple = pc.and_(lit, pc.ends_with(keys, '"'))
        typed = pc.and_(lit, pc.ends_with(keys, ">"))
        dt = pc.extract_regex(keys, pattern=r'"\^\^<(?P<d>[^<>"]*)>$').field("d")
        name = pc.if_else(simple, pa.scalar(XSD_STRING, _LS),
                          pc.if_else(typed, dt.cast(_LS), pa.scalar(RDF_LANGSTRING, _LS)))
        name = pc.if_else(lit, name, pa.scalar(None, _LS))
        lt, gt, empty = (pa.scalar(c, _LS) for c in ("<", ">", ""))
        iri = pc.binary_join_element_wise(lt, name, gt, empty)
        ok = pc.is_valid(iri).to_numpy(zero_copy_only=False)
        if ok.any():
            got = iri.filter(pa.array(ok))
            fn = getattr(ev.ctx, "intern_arrow", None)
            per[cand[ok]] = np.asarray(fn(got) if fn is not None else ev.ctx.intern(got.to_pylist()), dtype=np.int64)
    ev.ctx.check_budget()
    return per[inv]


_LEX_FUNCS = {"LANG": _lang, "STRLANG": _strlang, "ENCODE_FOR_URI": _encode, "MD5": _digest, "SHA1": _digest,
              "SHA256": _digest, "SHA384": _digest, "SHA512": _digest, "STR": _str, "LCASE": _case, "UCASE": _case,
              "SUBSTR": _substr, "STRBEFORE": _before_after, "STRAFTER": _before_after, "CONCAT": _concat}

