"""Expression evaluation over columns of term ids.

Public API (called by the executor):

* :func:`eval_expr` -- ids of the value of an expression per solution (-1 on error)
* :func:`eval_filter` -- effective boolean value per solution (errors -> False)
* :func:`order_permutation` -- stable ORDER BY permutation
* :func:`order_ranks` -- dense total-order ranks of ids (used by MIN/MAX)

Evaluation is two-level. Operators whose result follows from ids, kinds and
numeric values run vectorized over whole columns: ``= != < > <= >=``
(numerics via ``ctx.numeric``; IRIs/blank nodes by id; simple strings,
language strings, booleans, dateTimes and dates through per-distinct-value
ranks), ``&& || !`` with SPARQL's three-valued error logic, BOUND, sameTerm,
isIRI / isBlank / isLiteral, IN / NOT IN, IF, COALESCE, EXISTS (one
``ctx.exists`` call per expression), ``+ - *`` on xsd:integer operands (int64)
and RAND / BNODE() / UUID / STRUUID. Everything else is evaluated per
*distinct* tuple of the variables it uses (``np.unique`` + inverse) on decoded
terms, so a built-in costs one Python call per distinct input, not per row;
BNODE(str) is evaluated per row (a fresh node per solution).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import secrets
import threading
import uuid
import weakref
from decimal import Decimal
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import re2

from engine.arrays import unique
from engine.errors import UnsupportedError
from engine.exec import conj_order, render
from engine.exec import exact_numeric as X
from engine.exec import strings as S
from engine.exec import values as V
from engine.exec.bindings import distinct_inverse
from engine.exec.context import LOCAL_BASE, StringMeter
from engine.exec.numbers import LAZY_BASE as _LAZY_BASE
from engine.exec.values import ERR, ExprError, Num
from engine.iri import resolve_iri
from engine.sparql.algebra import Call, Const, Exists, FunctionCall, Var
from engine.terms import (
    FALSE_KEY,
    IRI,
    RDF_LANGSTRING,
    TRUE_KEY,
    XSD,
    XSD_BOOLEAN,
    XSD_DATE,
    XSD_DATETIME,
    XSD_DECIMAL,
    XSD_DOUBLE,
    XSD_FLOAT,
    XSD_INTEGER,
    XSD_STRING,
    BNode,
    Literal,
    Term,
    from_key,
    literal_key,
    to_key,
    unescape_string,
)

UNBOUND = -1
_BUDGET_EVERY = 512  # loop iterations between deadline checks (a check costs ~0.1 us)

# ---------------------------------------------------------------- public API


def eval_expr(expr, columns: dict[str, np.ndarray], n: int, ctx) -> np.ndarray:
    """Ids (int64) of ``expr`` evaluated for each of the n solutions; -1 where
    the expression raises an error. A few rows: row by row (engine/exec/rowwise.py)."""
    if n <= _rowwise.SMALL_ROWS:
        got = _rowwise.ids_rows(expr, columns, n, ctx)
        if got is not None:
            return got
    return _Evaluator(columns, n, ctx).ids(expr)


def eval_filter(expr, columns: dict[str, np.ndarray], n: int, ctx) -> np.ndarray:
    """Effective boolean value of ``expr`` per solution; errors are False. A few rows:
    row by row (engine/exec/rowwise.py)."""
    if n <= _rowwise.SMALL_ROWS:
        got = _rowwise.filter_rows(expr, columns, n, ctx)
        if got is not None:
            return got
    val, err = _Evaluator(columns, n, ctx).bools(expr)
    return val & ~err


def order_ranks(ids: np.ndarray, ctx) -> np.ndarray:
    """int64 rank of each id in the ORDER BY total order (unbound lowest);
    equal ranks only for equal ids."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    uniq, inv = distinct_inverse(ids)
    return _unique_ranks(uniq, ctx)[inv.reshape(-1)]


def order_permutation(keys: list[tuple[np.ndarray, bool]], ctx) -> np.ndarray:
    """Stable permutation ordering solutions by the given (ids, ascending)
    conditions, first condition most significant."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    n = len(keys[0][0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cols = []
    for ids, asc in keys:
        r = order_ranks(ids, ctx)
        cols.append(r if asc else -r)
    # np.lexsort: last key is the primary one; it is stable
    return np.lexsort(tuple(reversed(cols))).astype(np.int64)


# ---------------------------------------------------------------- ranks


def order_top(keys: list[tuple[np.ndarray, bool]], k: int, ctx) -> np.ndarray:
    """The first ``k`` positions of :func:`order_permutation` (ORDER BY + LIMIT)
    without ordering every row: the ``k``-th smallest rank of the first
    condition (np.partition) bounds the candidates, all of its ties included,
    and only those are ordered by every condition (a stable sort of the
    candidates in row order is the full order restricted to them)."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    n = len(keys[0][0])
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n or n < 4 * k:
        return order_permutation(keys, ctx)[:k]
    ids, asc = keys[0]
    r = order_ranks(ids, ctx)
    if not asc:
        r = -r
    ctx.check_budget()
    bound = np.partition(r, k - 1)[k - 1]
    cand = np.flatnonzero(r <= bound)
    sub = [(np.asarray(x)[cand], a) for x, a in keys]
    perm = order_permutation(sub, ctx) if len(keys) > 1 or len(cand) > k else np.argsort(
        r[cand], kind="stable")
    return cand[perm[:k]]


def _rank_strings(arr: pa.Array) -> np.ndarray:
    """Rank of each (distinct) string by code points: Arrow sorts UTF-8 bytes,
    whose order is the code point order."""
    order = pc.sort_indices(arr).to_numpy(zero_copy_only=False)
    out = np.empty(len(arr), dtype=np.int64)
    out[order] = np.arange(len(arr))
    return out


def _unique_ranks(uniq: np.ndarray, ctx) -> np.ndarray:
    """Ranks (0..len-1) of sorted unique ids in the SPARQL total order."""
    m = len(uniq)
    ranks = np.empty(m, dtype=np.int64)
    valid = uniq >= 0
    kinds = np.full(m, -1, dtype=np.int8)
    nums = np.full(m, np.nan)
    if valid.any():
        kinds[valid] = ctx.kinds(uniq[valid])
        nums[valid] = ctx.numeric(uniq[valid])
    # fast path: every bound value is a numeric literal of a finite value
    fast = (kinds == 2) & ~np.isnan(nums) & (np.abs(nums) < 2.0**53)
    if fast[valid].all():
        order = np.lexsort((uniq, nums, valid))
        ranks[order] = np.arange(m)
        return ranks
    if m >= _CLASSIFY_MIN_ROWS:
        return _unique_ranks_blocks(uniq, ctx, kinds, nums)
    keys = ctx.keys(uniq)
    sort_keys = []
    for i, k in enumerate(keys):
        if i % _BUDGET_EVERY == _BUDGET_EVERY - 1:
            ctx.check_budget()
        t = None if k is None else from_key(k)
        sort_keys.append((V.order_key(t), int(uniq[i])))
    order = sorted(range(m), key=sort_keys.__getitem__)
    ranks[np.asarray(order, dtype=np.int64)] = np.arange(m)
    return ranks


#: per store dictionary: (its length then, the rank of each IRI id among the store's IRIs, -1
#: for other terms): ids keep their meaning (append-only), so MIN / MAX / ORDER BY over many
#: IRIs read ranks instead of sorting their texts per query
_IRI_RANKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_IRI_RANKS_LOCK = threading.Lock()
_IRI_RANKS_SHARE = 8  # rebuilt (after the store grew) for a query ranking at least 1/8 of its terms


def _iri_ranks(ctx, ids: np.ndarray) -> np.ndarray | None:
    """Order-preserving ranks of store IRI ids (their texts in code point order), from
    a memo per dictionary; None where the memo does not serve (computed IRIs, a grown
    store and too few ids to pay for ranking it again: the caller sorts)."""
    d = getattr(ctx, "dictionary", None)
    if d is None or not hasattr(d, "as_arrow") or not len(ids):
        return None
    n = len(d)
    if int(ids.max()) >= min(n, LOCAL_BASE):
        return None
    try:
        memo = _IRI_RANKS.get(d)
    except TypeError:
        return None
    if memo is None or memo[0] != n:
        if len(ids) * _IRI_RANKS_SHARE < n:
            return None
        with _IRI_RANKS_LOCK:
            memo = _IRI_RANKS.get(d)
            if memo is None or memo[0] != n:
                ctx.check_budget()
                check = getattr(ctx, "check_memory", None)
                if check is not None:
                    check(16 * n)
                keys = d.as_arrow()
                iri = np.flatnonzero(pc.fill_null(pc.starts_with(keys, "<"), False).to_numpy(zero_copy_only=False))
                bodies = pc.binary_slice(keys.take(pa.array(iri)).cast(pa.large_binary()), 1, -1)
                order = np.asarray(pc.sort_indices(bodies).to_numpy(zero_copy_only=False), dtype=np.int64)
                ranks = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)  # (4 bytes a term)
                ranks[iri[order]] = np.arange(len(order), dtype=ranks.dtype)
                memo = (n, ranks)
                _IRI_RANKS[d] = memo
    got = memo[1][ids].astype(np.int64)
    return got if (got >= 0).all() else None


def _unique_ranks_blocks(uniq: np.ndarray, ctx, kinds: np.ndarray, nums: np.ndarray) -> np.ndarray:
    """_unique_ranks by blocks of the order (unbound < blank nodes < IRIs <
    literals by category): blank nodes, IRIs, simple strings and numerics
    with distinct float values (float rounding is monotonic, so distinct
    floats order like the values) are ranked by vectorized sorts; the other
    literals (tagged, booleans, dates, tied or NaN numerics) by their
    ``order_key`` in Python, which also gives their category."""
    m = len(uniq)
    block = np.zeros(m, dtype=np.int64)  # unbound: block 0
    intra = np.zeros(m, dtype=np.int64)
    lit_base = 3 * 16
    ctx.check_budget()
    for kind, blk, start in ((1, 1, 2), (0, 2, 1)):
        sel = np.flatnonzero(kinds == kind)
        if len(sel) and kind == 0:
            memo = _iri_ranks(ctx, uniq[sel])
            if memo is not None:  # the store's IRIs ranked once per dictionary
                block[sel] = blk
                intra[sel] = memo
                continue
        if len(sel):
            arr = _keys_arrow(ctx, uniq[sel])
            body = pc.utf8_slice_codeunits(arr, start, -1 if kind == 0 else None)
            block[sel] = blk
            intra[sel] = _rank_strings(body)
    lit = np.flatnonzero(kinds == 2)
    slow = np.zeros(m, dtype=bool)
    if len(lit):
        num = lit[~np.isnan(nums[lit])]
        if len(num):
            vals = nums[num]
            if len(unique(vals)) == len(vals):
                block[num] = lit_base + V.CAT_NUMERIC
                intra[num] = np.argsort(np.argsort(vals, kind="stable"), kind="stable")
            else:
                slow[num] = True
        other = lit[np.isnan(nums[lit])]
        if len(other):
            ctx.check_budget()
            pos, bodies, tags = _string_keys(_keys_arrow(ctx, uniq[other]))
            simple = pc.equal(tags, "").to_numpy(zero_copy_only=False)
            sp = other[pos[simple]]
            block[sp] = lit_base + V.CAT_STRING
            intra[sp] = _rank_strings(bodies.filter(pa.array(simple)))
            rest = np.ones(len(other), dtype=bool)
            rest[pos[simple]] = False
            slow[other[rest]] = True
    sl = np.flatnonzero(slow)
    if len(sl):
        keys = ctx.keys(uniq[sl])
        sort_keys = []
        for i, k in enumerate(keys):
            if i % _BUDGET_EVERY == _BUDGET_EVERY - 1:
                ctx.check_budget()
            sort_keys.append((V.order_key(from_key(k)), int(uniq[sl[i]])))
        order = sorted(range(len(sl)), key=sort_keys.__getitem__)
        for r, i in enumerate(order):
            block[sl[i]] = lit_base + sort_keys[i][0][1]
            intra[sl[i]] = r
    order = np.lexsort((intra, block))
    ranks = np.empty(m, dtype=np.int64)
    ranks[order] = np.arange(m)
    return ranks


# ---------------------------------------------------------------- helpers

_ARITH_MIN_ROWS = 32  # a column this long holding one id is read as a constant
# numeric columns (_Evaluator._num_tree): classes of a value, and from how many rows the
# column path beats the per-value one (~0.2 ms of fixed cost against ~30 us per row)
# (_N_DECS: a decimal of at most 15 significant digits, which its double identifies among
# those and the integers below 2**53: equal doubles mean equal values)
_N_ERR, _N_OTHER, _N_INT, _N_DEC, _N_DECS, _N_DBL = -1, 0, 1, 2, 3, 4
_NUM_MIN_ROWS = 8
_NUM_BINARY = frozenset({"+", "-", "*", "/"})
_NUM_UNARY = frozenset({"NEG", "POS"})
#: the calls over one number answered by :mod:`engine.exec.exact_numeric` at the root
_EXACT_ROOTS = frozenset({"FLOOR", "CEIL", "ROUND", "ABS"})
_INT_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply}
_DT_INT, _DT_DEC, _DT_DBL, _DT_FLT = 0, 1, 2, 3
_DT_FAMILY, _DT_LONG = 0x0F, 0x10  # a datatype code's family, and its flag: lexical form over 15 bytes
_SHORT_LEXICAL = 15
_INT_TYPE_NAMES = ("integer", "nonPositiveInteger", "negativeInteger", "nonNegativeInteger", "positiveInteger",
                   "long", "int", "short", "byte", "unsignedLong", "unsignedInt", "unsignedShort", "unsignedByte")
_NUM_DT_NAMES = [XSD + t for t in _INT_TYPE_NAMES] + [XSD_DECIMAL, XSD_DOUBLE, XSD_FLOAT]
_NUM_DT_SET = pa.array([t.encode() for t in _NUM_DT_NAMES], pa.large_binary())
_NUM_DT_CODE = np.array([_DT_INT] * len(_INT_TYPE_NAMES) + [_DT_DEC, _DT_DBL, _DT_FLT], dtype=np.int8)
_INTEGER_SUFFIX = "^^<" + XSD_INTEGER + ">"
_BOOLEAN_SUFFIX = "^^<" + XSD_BOOLEAN + ">"
_DOUBLE_SUFFIX = "^^<" + XSD_DOUBLE + ">"
_FLOAT_SUFFIX = "^^<" + XSD_FLOAT + ">"
_DATETIME_SUFFIX = "^^<" + XSD_DATETIME + ">"
_DATE_SUFFIX = "^^<" + XSD_DATE + ">"
# literal classes of the vectorized comparison path, and their families
# (classes of one family compare with each other: with/without timezone)
_C_STRING, _C_LANG, _C_BOOLEAN, _C_DATETIME_TZ, _C_DATETIME, _C_DATE_TZ, _C_DATE = 1, 2, 3, 4, 5, 6, 7
_FAMILY = np.array([0, 1, 2, 3, 4, 4, 6, 6], dtype=np.int8)
_CLASSIFY_MIN_ROWS = 64
#: comparisons of a column with a constant over at least this many rows are decided per distinct id
_BY_DISTINCT_ROWS = 256
#: rows from which a decided ``&&`` / ``||`` evaluates its right operand on the other rows only
#: (:meth:`_Evaluator._bools_where`; below, masking the columns costs about what it saves)
_SHORT_CIRCUIT_ROWS = 256
_NONDETERMINISTIC = frozenset({"RAND", "BNODE", "UUID", "STRUUID"})
_RX_CHUNK_CHARS = 8 << 20  # text per RE2 kernel call between deadline checks
_RX_CHUNK_ROWS = 65536
_BOOL_OPS = frozenset(
    {"||", "&&", "!", "=", "!=", "<", ">", "<=", ">=", "IN", "NOT IN", "BOUND", "SAMETERM",
     "ISIRI", "ISBLANK", "ISLITERAL", "ISNUMERIC"}
)
_CMP = {
    "=": np.equal, "!=": np.not_equal, "<": np.less, ">": np.greater,
    "<=": np.less_equal, ">=": np.greater_equal,
}
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!="}
_STRING_CMP = {"<": pc.less, ">": pc.greater, "<=": pc.less_equal, ">=": pc.greater_equal}
_FLOAT_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}
# STRSTARTS / STRENDS / CONTAINS with a constant string: one Arrow kernel over the
# distinct values of the text argument (issue 14: 0.5 s term by term over 72k e-mails)
def _contains(arr: pa.Array, pattern: str) -> pa.Array:
    """``pc.match_substring``, by RE2 on the escaped needle: Arrow's substring
    search scans each string plainly (11 ms over 72k e-mail addresses here,
    RE2's literal search 1.6 ms)."""
    try:
        return pc.match_substring_regex(arr, pattern=re2_literal(pattern))
    except pa.ArrowInvalid:  # (a needle RE2 would not take)
        return pc.match_substring(arr, pattern)


def re2_literal(text: str) -> str:
    """An RE2 pattern matching ``text`` literally (ASCII punctuation escaped)."""
    return "".join("\\" + c if c.isascii() and not c.isalnum() else c for c in text)


def has_backslash(arr: pa.Array) -> np.ndarray:
    """Per string of ``arr``: whether it holds a backslash. The data buffer is
    scanned once first (most columns have none); ``pc.match_substring`` alone
    takes ~20 ms over 72k strings."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    data = arr.buffers()[2]
    if data is None or not (np.frombuffer(data, dtype=np.uint8) == 0x5C).any():
        return np.zeros(n, dtype=bool)
    return pc.fill_null(pc.match_substring_regex(arr, pattern=r"\\"), False).to_numpy(zero_copy_only=False)


_STR_TESTS = {"STRSTARTS": pc.starts_with, "STRENDS": pc.ends_with, "CONTAINS": _contains}
_STR_TEST_MIN_ROWS = 64


def _walk(expr):
    yield expr
    if isinstance(expr, (Call, FunctionCall)):
        for a in expr.args:
            yield from _walk(a)


def vars_of(expr) -> list[str]:
    """The names of the variables ``expr`` reads (through calls), first seen first."""
    seen: dict[str, None] = {}
    for e in _walk(expr):
        if isinstance(e, Var):
            seen.setdefault(e.name, None)
    return list(seen)


def _exists_of(expr) -> list[Exists]:
    return [e for e in _walk(expr) if isinstance(e, Exists)]


def _vector_regex(expr) -> bool:
    """REGEX(text, "p"[, "f"]) / REPLACE(text, "p", "r"[, "f"]) with simple
    literal constants: evaluated over a column at once (RE2 kernels)."""
    if not isinstance(expr, Call) or expr.op not in ("REGEX", "REPLACE"):
        return False
    lo, hi = (2, 3) if expr.op == "REGEX" else (3, 4)
    if not lo <= len(expr.args) <= hi or _nondeterministic(expr.args[0]) or _exists_of(expr.args[0]):
        return False
    return all(isinstance(a, Const) and a.key[0] == '"' and a.key[-1] == '"' for a in expr.args[1:])


_STRING_KEY = r'^"(?P<b>.*)"(?:@(?P<l>[A-Za-z0-9-]+))?$'  # simple or language-tagged string keys


def _keys_arrow(ctx, ids: np.ndarray) -> pa.Array:
    """Keys of (valid) ids as an Arrow string array: straight from the store
    dictionary's buffers when every id is a store id, no Python strings."""
    d = getattr(ctx, "dictionary", None)
    if d is not None and hasattr(d, "keys_arrow") and (len(ids) == 0 or int(ids.max()) < len(d)):
        return d.keys_arrow(ids)
    fn = getattr(ctx, "keys_arrow", None)
    if fn is not None and len(ids) > 64:  # computed (query-local) terms among them
        return fn(ids)
    return pa.array(ctx.keys(ids), pa.large_string())


def _string_keys(keys) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(positions, lexical forms, language tags or "") of the simple and
    language-tagged string literals among term keys (a list or an Arrow
    string array), unescaped, column-wise. Simple strings (a key that starts
    and ends with a quote) are sliced; only tagged ones go through a regex."""
    arr = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.large_string())
    arr = arr.cast(pa.large_string())

    def mask(x) -> np.ndarray:  # absent keys (None) are no strings
        return pc.fill_null(x, False).to_numpy(zero_copy_only=False)

    lit = mask(pc.starts_with(arr, '"'))
    simple = lit & mask(pc.ends_with(arr, '"'))
    # (byte lengths and byte slices: the quotes are single bytes, and the byte kernels
    # take a fraction of the UTF-8 ones' time)
    simple &= pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False) >= 2
    tagged = lit & ~simple & ~mask(pc.ends_with(arr, ">"))
    spos = np.flatnonzero(simple)
    sb = pc.binary_slice(arr.filter(pa.array(simple)).cast(pa.large_binary()), 1, -1).cast(pa.large_string())
    if tagged.any():
        tpos = np.flatnonzero(tagged)
        parts = pc.extract_regex(arr.filter(pa.array(tagged)), pattern=_STRING_KEY)
        ok = parts.is_valid().to_numpy(zero_copy_only=False)
        parts = parts.filter(pa.array(ok))
        pos = np.concatenate([spos, tpos[ok]])
        bodies = pa.concat_arrays([sb, parts.field("b").cast(pa.large_string())])
        tags = pa.concat_arrays([pa.array([""] * len(spos), pa.large_string()),
                                 parts.field("l").cast(pa.large_string())])
        order = np.argsort(pos, kind="stable")
        pos, bodies, tags = pos[order], bodies.take(pa.array(order)), tags.take(pa.array(order))
    else:
        pos, bodies = spos, sb
        tags = pa.nulls(len(spos), pa.large_string()).fill_null("")
    bodies = bodies.cast(pa.large_string())
    esc = has_backslash(bodies)
    if esc.any():  # keys escape only \\ \" \n \r: rare, resolved one by one
        fixed = [unescape_string(b) for b in bodies.filter(pa.array(esc)).to_pylist()]
        bodies = pc.replace_with_mask(bodies, pa.array(esc), pa.array(fixed, pa.large_string()))
    return pos, bodies, tags


_CAST_EDGE = r"[^0-9A-Za-z+.\-]*"  # what ``str.strip()`` may remove around a lexical form (and more)
_CAST_INT = r"[+-]?[0-9]+"
_CAST_DT = r"-?[0-9]{4,}-[0-9]{2}-[0-9]{2}[\s\S]*"


def _cast_shape(core: str) -> str:
    return "^" + _CAST_EDGE + "(?:" + core + ")" + _CAST_EDGE + "$"


#: per cast target (not xsd:string): a regex every string a cast may accept matches
_CAST_SHAPES = {
    XSD_DECIMAL: _cast_shape(r"[+-]?[0-9.]+"),
    XSD_FLOAT: _cast_shape(r"[+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?|[+-]?INF|NaN"),
    XSD_DOUBLE: _cast_shape(r"[+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?|[+-]?INF|NaN"),
    XSD_BOOLEAN: _cast_shape(r"true|false|1|0"),
    XSD_DATETIME: _cast_shape(_CAST_DT),
    XSD_DATE: _cast_shape(_CAST_DT),
    **{t: _cast_shape(_CAST_INT) for t in V.INTEGER_TYPES},
}


def _is_arith(expr) -> bool:
    """An arithmetic operation (+ - * / or a sign)."""
    return isinstance(expr, Call) and ((expr.op in _NUM_BINARY and len(expr.args) == 2)
                                       or (expr.op in _NUM_UNARY and len(expr.args) == 1))


def _datatype_codes(keys: pa.Array) -> np.ndarray:
    """Per key: its numeric datatype family (``_DT_*``, with ``_DT_LONG`` set when the
    lexical form is longer than ``_SHORT_LEXICAL`` bytes), -1 for any other term (one byte
    scan of the keys, one set lookup of their datatype IRIs)."""
    an = render._Anatomy(keys, b"", False)
    out = np.full(len(keys), -1, dtype=np.int8)
    dt = np.flatnonzero(an.kind == render.DT)
    if len(dt):
        dts = render._slices(an.data, an.b0[dt], an.b1[dt])
        idx = pc.fill_null(pc.index_in(dts, value_set=_NUM_DT_SET), -1).to_numpy(zero_copy_only=False)
        hit = idx >= 0
        lex_len = an.a1[dt] - an.a0[dt]
        out[dt[hit]] = _NUM_DT_CODE[idx[hit]] | np.where(lex_len[hit] > _SHORT_LEXICAL, _DT_LONG, 0).astype(np.int8)
    return out


_NUM_DT_INDEX = {t: i for i, t in enumerate(_NUM_DT_NAMES)}
_FEW_KEYS = 256  # below this many keys the memo by key beats the column scan's fixed cost


@lru_cache(maxsize=4096)
def _key_dt_code(key: str | None) -> int:
    """``_datatype_codes`` of one key."""
    if not key or key[0] != '"' or not key.endswith(">"):
        return -1
    end = key.rfind('"')
    sfx = key[end + 1:]
    if not sfx.startswith("^^<"):
        return -1
    i = _NUM_DT_INDEX.get(sfx[3:-1])
    if i is None:
        return -1
    return int(_NUM_DT_CODE[i]) | (_DT_LONG if end - 1 > _SHORT_LEXICAL else 0)


#: per store dictionary: the numeric datatype code of each id seen so far (``_DT_*``, -1 none,
#: -2 not yet read): ids never change meaning (append-only), so each key is scanned once per
#: process, not once per query or per instant of a continuous query; 1 byte per term
_DT_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_DT_MEMO_LOCK = threading.Lock()


def _datatype_codes_of(ctx, ids: np.ndarray) -> np.ndarray:
    """``_datatype_codes`` of the keys of literal ids, memoised per store dictionary."""
    if not len(ids):   # (e.g. a column of IRIs only in an arithmetic leaf: no literal left)
        return np.zeros(0, dtype=np.int8)
    d = getattr(ctx, "dictionary", None)
    n = len(d) if d is not None and hasattr(d, "keys_arrow") else 0
    if n == 0 or int(ids.max()) >= min(n, LOCAL_BASE) or int(ids.min()) < 0:
        # terms outside the store's dictionary (a window's, a query's): a few keys are looked
        # up in a memo by key (constants and windows repeat), many scanned as a column
        known = getattr(ctx, "known_numbers", None)
        if known is not None:  # numbers whose maker told their datatype (RAND())
            found, _, codes = known(ids)
            if found.all():
                return codes
            if found.any():
                rest = np.flatnonzero(~found)
                codes[rest] = _datatype_codes_of(ctx, ids[rest])
                return codes
        many = getattr(ctx, "_many_pending", None)
        if len(ids) <= _FEW_KEYS and not (many is not None and many()):
            return np.array([_key_dt_code(k) for k in ctx.keys(ids)], dtype=np.int8)
        kfn = getattr(ctx, "keys_arrow", None)  # (many computed terms waiting as Arrow: read there)
        return _datatype_codes(kfn(ids) if kfn is not None else _keys_arrow(ctx, ids))
    try:
        memo = _DT_MEMO.get(d)
    except TypeError:  # not weak-referenceable: no memo
        return _datatype_codes(_keys_arrow(ctx, ids))
    if memo is None or len(memo) < n:
        with _DT_MEMO_LOCK:
            memo = _DT_MEMO.get(d)
            if memo is None or len(memo) < n:
                grown = np.full(max(n, 2 * len(memo) if memo is not None else 0), -2, dtype=np.int8)
                if memo is not None:
                    grown[: len(memo)] = memo
                memo = grown
                _DT_MEMO[d] = memo
    codes = memo[ids]
    miss = np.flatnonzero(codes == -2)
    if len(miss):
        mids = ids[miss]
        if len(mids) <= _FEW_KEYS:  # the new terms of an instant, say
            got = np.array([_key_dt_code(k) for k in d.keys(mids)], dtype=np.int8)
        else:
            got = _datatype_codes(d.keys_arrow(mids))
        codes[miss] = got
        memo[ids[miss]] = got
    return codes


@lru_cache(maxsize=4096)
def _num_const(key: str) -> tuple[int, float, int]:
    """(class, float64, int64) of a constant of the query text, as ``_num_leaf`` gives for an id."""
    t = from_key(key)
    if not isinstance(t, Literal):
        return _N_ERR, 0.0, 0
    num = V.numeric_of(t)
    if num is None:
        return (_N_OTHER if t.datatype in _NUM_DT_NAMES else _N_ERR), 0.0, 0
    if num.rank == V.INTEGER:
        if abs(num.v) < 2**53:
            return _N_INT, float(num.v), int(num.v)
        return _N_DEC, float(num.v), 0
    if num.rank == V.DECIMAL:
        return (_N_DECS if len(t.lexical) <= _SHORT_LEXICAL else _N_DEC), float(num.v) + 0.0, 0
    if num.rank == V.DOUBLE:
        return _N_DBL, float(num.v), 0
    return _N_OTHER, 0.0, 0


def _constant(ids: np.ndarray) -> bool:
    """A long column holding one id throughout (a constant's column)."""
    return len(ids) >= _ARITH_MIN_ROWS and ids[0] == ids[-1] and bool((ids == ids[0]).all())


def _intern_keys(ctx, keys) -> np.ndarray:
    """Ids of fresh per-row keys (a list or an Arrow string array) in one bulk
    intern: Arrow's hashing where the context has it, no Python string per key."""
    fn = getattr(ctx, "intern_arrow", None)
    if fn is not None:
        arr = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.large_string())
        return np.asarray(fn(arr.cast(pa.large_string())), dtype=np.int64)
    return np.asarray(ctx.intern(keys if isinstance(keys, list) else keys.to_pylist()), dtype=np.int64)


def _fixed_width(buf: np.ndarray) -> pa.Array:
    """An Arrow string array over the rows of a 2-d uint8 array (ASCII, one value a row)."""
    n, w = buf.shape
    offs = np.arange(0, (n + 1) * w, w, dtype=np.int64)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offs), pa.py_buffer(np.ascontiguousarray(buf)))


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
#: where each of a UUID's 16 bytes writes its two hex digits in ``8-4-4-4-12``
_UUID_POS = np.array([0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34], dtype=np.int64)


def _uuid4_keys(n: int, head: str, tail: str) -> pa.Array:
    """``n`` random (version 4) UUIDs between ``head`` and ``tail``, written
    column-wise from one ``secrets`` draw (72k of them: 0.5 s one ``uuid4()`` at
    a time, pyoxigraph 0.13 s)."""
    raw = np.frombuffer(secrets.token_bytes(16 * n), dtype=np.uint8).reshape(n, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40  # version 4
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
    h, t = head.encode(), tail.encode()
    w = len(h) + 36 + len(t)
    buf = np.empty((n, w), dtype=np.uint8)
    buf[:, :len(h)] = np.frombuffer(h, dtype=np.uint8)
    buf[:, len(h) + 36:] = np.frombuffer(t, dtype=np.uint8)
    body = buf[:, len(h):len(h) + 36]
    body[:, [8, 13, 18, 23]] = ord("-")
    body[:, _UUID_POS] = _HEX[raw >> 4]
    body[:, _UUID_POS + 1] = _HEX[raw & 0x0F]
    return _fixed_width(buf)


def _numbered_keys(prefix: str, start: int, n: int) -> pa.Array:
    """``prefix`` followed by the numbers ``start .. start+n-1``, column-wise."""
    nums = pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.large_string())
    return pc.binary_join_element_wise(pa.scalar(prefix, pa.large_string()), nums, pa.scalar("", pa.large_string()))


def _nondeterministic(expr) -> bool:
    return any(isinstance(e, Call) and e.op in _NONDETERMINISTIC for e in _walk(expr))


class _QueryState:
    """Per-query state for BNODE labels (kept on the context object)."""

    __slots__ = ("salt", "counter")

    def __init__(self):
        self.salt = secrets.token_hex(4)
        self.counter = 0


_STATES: dict[int, tuple[object, _QueryState]] = {}


def _state(ctx) -> _QueryState:
    st = getattr(ctx, "_jindou_fn_state", None)
    if st is not None:
        return st
    st = _QueryState()
    try:
        ctx._jindou_fn_state = st
    except (AttributeError, TypeError):
        ent = _STATES.get(id(ctx))
        if ent is not None and ent[0] is ctx:
            return ent[1]
        if len(_STATES) > 256:
            _STATES.clear()
        _STATES[id(ctx)] = (ctx, st)
    return st


# ---------------------------------------------------------------- vectorized evaluator


class _Evaluator:
    def __init__(self, columns: dict[str, np.ndarray], n: int, ctx, rows: np.ndarray | None = None):
        self.columns = columns
        self.n = n
        self.ctx = ctx
        self.rows = rows  # original row numbers (None = identity), for BNODE(str)
        self._true_id: int | None = None
        self._false_id: int | None = None
        self._dist: tuple | None = None  # (column, distinct ids, inverse): see _distinct

    # -- small utilities

    def _const_id(self, key: str) -> int:
        return int(self.ctx.intern([key])[0])

    def _bool_ids(self) -> tuple[int, int]:
        if self._true_id is None:
            t, f = self.ctx.intern([TRUE_KEY, FALSE_KEY])
            self._true_id, self._false_id = int(t), int(f)
        return self._true_id, self._false_id

    def _distinct(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``distinct_inverse(ids)``, remembered for the last column asked (a filter
        such as ``?a = 1 || ?a > 9`` reads one column in each comparison)."""
        d = self._dist
        if d is not None and d[0] is ids:
            return d[1], d[2]
        uniq, inv = distinct_inverse(ids)
        inv = inv.reshape(-1)
        if len(ids) >= _BY_DISTINCT_ROWS:  # (not the short distinct columns derived from it)
            self._dist = (ids, uniq, inv)
        return uniq, inv

    def _bools_to_ids(self, val: np.ndarray, err: np.ndarray) -> np.ndarray:
        t, f = self._bool_ids()
        out = np.where(val, t, f).astype(np.int64)
        out[err] = UNBOUND
        return out

    def _kinds(self, ids: np.ndarray) -> np.ndarray:
        if _constant(ids):  # a constant's column: one lookup
            return np.full(len(ids), self._kinds(ids[:1])[0], dtype=np.int8)
        out = np.full(len(ids), -1, dtype=np.int8)
        ok = ids >= 0
        if ok.any():
            out[ok] = self.ctx.kinds(ids[ok])
        return out

    def _numeric(self, ids: np.ndarray) -> np.ndarray:
        if _constant(ids):  # a constant's column (a query-local term: parsed once, not per row)
            return np.full(len(ids), self._numeric(ids[:1])[0])
        out = np.full(len(ids), np.nan)
        ok = ids >= 0
        if ok.any():
            out[ok] = self.ctx.numeric(ids[ok])
        return out

    # -- entry points

    def ids(self, expr) -> np.ndarray:
        n = self.n
        if isinstance(expr, Var):
            col = self.columns.get(expr.name)
            if col is None:
                return np.full(n, UNBOUND, dtype=np.int64)
            return np.asarray(col, dtype=np.int64)
        if isinstance(expr, Const):
            return np.full(n, self._const_id(expr.key), dtype=np.int64)
        if isinstance(expr, Exists) or (isinstance(expr, Call) and expr.op in _BOOL_OPS):
            val, err = self.bools(expr)
            return self._bools_to_ids(val, err)
        if isinstance(expr, Call) and expr.op in _STR_TESTS:
            got = self._str_test(expr)
            if got is not None:
                return self._bools_to_ids(*got)
        if isinstance(expr, Call):
            if expr.op == "COALESCE":
                out = np.full(n, UNBOUND, dtype=np.int64)
                for a in expr.args:
                    miss = out < 0
                    if not miss.any():
                        break
                    v = self._sub(a, miss)
                    out[miss] = v
                return out
            if expr.op == "IF" and len(expr.args) == 3:
                val, err = self.bools(expr.args[0])
                out = np.full(n, UNBOUND, dtype=np.int64)
                yes = val & ~err
                no = ~val & ~err
                if yes.any():
                    out[yes] = self._sub(expr.args[1], yes)
                if no.any():
                    out[no] = self._sub(expr.args[2], no)
                return out
            if expr.op == "RAND" and not expr.args:
                vals = np.random.random(n)
                lazy = getattr(self.ctx, "intern_numbers", None)
                if lazy is not None and n >= _CLASSIFY_MIN_ROWS:  # held as values, written if read as text
                    return np.asarray(lazy(vals, _DT_DBL, fresh=True), dtype=np.int64)
                keys = V.format_doubles_arrow(vals, '"', '"' + _DOUBLE_SUFFIX)
                # 53 random bits a value: two rows drawing the same double, or one a stored
                # term, have odds of ~n^2 / 2^54 (3e-7 for 72k rows): fresh ids, no look-up
                fresh = getattr(self.ctx, "intern_fresh", None)
                out = _intern_keys(self.ctx, keys) if fresh is None or n < _CLASSIFY_MIN_ROWS \
                    else np.asarray(fresh(keys), dtype=np.int64)
                remember = getattr(self.ctx, "remember_numbers", None)
                if remember is not None and n >= _CLASSIFY_MIN_ROWS:  # (their values: no parse back)
                    lex_len = (np.asarray(pc.binary_length(keys).to_numpy(zero_copy_only=False), dtype=np.int64)
                               - (2 + len(_DOUBLE_SUFFIX)))
                    remember(out, vals, np.where(lex_len > _SHORT_LEXICAL, _DT_DBL | _DT_LONG, _DT_DBL)
                             .astype(np.int8))
                return out
            if expr.op == "BNODE" and not expr.args:
                st = _state(self.ctx)
                start = st.counter + 1
                st.counter += n
                keys = _numbered_keys(f"_:q{st.salt}n", start, n)
                fresh = getattr(self.ctx, "intern_fresh", None)  # (labels no other term has: no look-up)
                return _intern_keys(self.ctx, keys) if fresh is None else np.asarray(fresh(keys), dtype=np.int64)
            if expr.op in ("UUID", "STRUUID") and not expr.args:
                head, tail = ("<urn:uuid:", ">") if expr.op == "UUID" else ('"', '"')
                keys = _uuid4_keys(n, head, tail)
                # 122 random bits a key: that one equals a stored term or another's has odds
                # of 2^-122 a pair, so no look-up (which took half the time)
                fresh = getattr(self.ctx, "intern_fresh", None)
                return _intern_keys(self.ctx, keys) if fresh is None else np.asarray(fresh(keys), dtype=np.int64)
            if n >= _NUM_MIN_ROWS and _is_arith(expr):
                out = self._num_ids(expr)
                if out is not None:
                    return out
            if n >= _NUM_MIN_ROWS and expr.op in _EXACT_ROOTS:  # FLOOR / CEIL / ROUND / ABS of a number
                out = self._exact_tree(expr)
                if out is not None:
                    return out
            if n and _vector_regex(expr):
                out = self._regex_vector(expr)
                if out is not None:
                    return out
            if n >= _CLASSIFY_MIN_ROWS and S.supported(expr):
                out = S.ids_of(self, expr)
                if out is not None:
                    return out
        if isinstance(expr, FunctionCall):
            vec = VECTOR_EXTENSIONS.get(expr.iri)
            if vec is not None:  # a registered extension evaluated over whole id columns
                return vec(self.ctx, [self.ids(a) for a in expr.args])
            if n >= _NUM_MIN_ROWS and len(expr.args) == 1 and X.is_tree(expr) and X.is_tree(expr.args[0]):
                out = self._exact_tree(expr)  # xsd:integer / xsd:decimal of arithmetic
                if out is not None:
                    return out
            if n >= _CLASSIFY_MIN_ROWS and expr.iri in _CAST_SHAPES and len(expr.args) == 1:
                return self._cast(expr)
        return self._fallback(expr)

    def _cast(self, expr) -> np.ndarray:
        """An XSD cast to a number, boolean or date type over the distinct ids of its
        argument: IRIs, blank nodes, tagged strings and simple strings whose lexical
        form cannot be the target's (a superset test of the parsers' regexes, by RE2
        over the column) are errors at once; typed literals and the strings left go
        term by term (``xsd:integer(?o)`` over 1M objects: 106k distinct, 5.9 s term
        by term, pyoxigraph 1.5 s)."""
        uniq, inv = distinct_inverse(self.ids(expr.args[0]))
        inv = inv.reshape(-1)
        per = np.full(len(uniq), UNBOUND, dtype=np.int64)
        cand = np.flatnonzero(uniq >= 0)
        if len(cand):
            keys = _keys_arrow(self.ctx, uniq[cand]).cast(pa.large_string())
            lit = pc.fill_null(pc.starts_with(keys, '"'), False).to_numpy(zero_copy_only=False)
            typed = lit & pc.fill_null(pc.ends_with(keys, ">"), False).to_numpy(zero_copy_only=False)
            go = typed
            pos, bodies, tags = _string_keys(keys)
            if len(pos):
                simple = pc.equal(tags, "").to_numpy(zero_copy_only=False)
                fits = pc.match_substring_regex(bodies, _CAST_SHAPES[expr.iri]).to_numpy(zero_copy_only=False)
                go = go.copy()
                go[pos[simple & fits]] = True
            sel = cand[go]
            self.ctx.check_budget()
            if len(sel):
                one = _Evaluator({"\x00c": uniq[sel]}, len(sel), self.ctx)
                per[sel] = one._fallback(FunctionCall(expr.iri, (Var("\x00c"),)))
        return per[inv]

    def _regex_run(self, expr):
        """Run a REGEX / REPLACE with constant pattern, flags and replacement
        over the distinct string values of its text argument in RE2 (Arrow's
        kernels), chunk by chunk with the deadline checked in between.
        Returns (uniq ids, inverse, positions in uniq of the strings, their
        lexical forms, tags, results: bools or new lexical forms); () when the
        pattern is an error for every row; None when the per-value path must
        decide (a replacement naming group 10 or more, a pattern Arrow refuses)."""
        ctx = self.ctx
        args = [from_key(a.key).lexical for a in expr.args[1:]]
        is_regex = expr.op == "REGEX"
        flags = args[-1] if len(args) == (2 if is_regex else 3) else ""
        try:
            rx = xpath_regex(args[0], flags)
            rewrite = None
            if not is_regex:
                if rx.search(""):
                    raise ERR.with_traceback(None)  # FORX0003
                rewrite = _rewrite(args[1], rx.groups, rx.literal)
                if rewrite is None:
                    return None
        except ExprError:
            return ()
        # REPLACE of a literal text by a literal text (no metacharacter, group or escape): Arrow's
        # plain substring replacement, ~5x faster than RE2's over IRIs' texts
        plain = None
        if (not is_regex and set(flags) <= {"s", "m"} and not any(c in args[0] for c in _RX_META)
                and "$" not in args[1] and "\\" not in args[1]):
            plain = (args[0], args[1])
        lx = S.lex_of(self, expr.args[0]) if S.supported(expr.args[0]) else None
        if lx is not None:  # a string function's values (STR(?iri), LCASE(?x) ...): no term per value
            m = len(lx.lex)
            uniq, inv = np.arange(m + 1), np.where(lx.inv < 0, m, lx.inv)  # entry m: the errors
            cand, pos, bodies, tags = uniq[:m], np.arange(m), lx.lex, lx.tags()
        else:
            text = self.ids(expr.args[0])
            uniq, inv = distinct_inverse(text)
            cand = np.flatnonzero(uniq >= 0)
            pos, bodies, tags = _string_keys(_keys_arrow(ctx, uniq[cand]))
        results = []
        start, m = 0, len(pos)
        while start < m:
            ctx.check_budget()
            end = min(m, start + _RX_CHUNK_ROWS)
            chunk = bodies.slice(start, end - start)
            while end - start > 1 and pc.sum(pc.binary_length(chunk)).as_py() > _RX_CHUNK_CHARS:
                end = start + (end - start) // 2
                chunk = bodies.slice(start, end - start)
            try:
                if is_regex:
                    results.append(pc.match_substring_regex(chunk, pattern=rx.text))
                elif plain is not None:  # a literal pattern and replacement: a plain substring scan
                    results.append(pc.replace_substring(chunk, pattern=plain[0], replacement=plain[1]))
                else:
                    results.append(pc.replace_substring_regex(chunk, pattern=rx.text, replacement=rewrite))
            except pa.ArrowInvalid:
                return None
            start = end
        ctx.check_budget()
        got = pa.concat_arrays(results) if results else pa.array([], pa.bool_() if is_regex else pa.large_string())
        return uniq, inv.reshape(-1), cand[pos], bodies, tags, got

    def _regex_vector(self, expr) -> np.ndarray | None:
        """Ids of a column-wise REGEX / REPLACE (see _regex_run); None for the
        per-value path."""
        run = self._regex_run(expr)
        if run is None:
            return None
        out = np.full(self.n, UNBOUND, dtype=np.int64)
        if not run:
            return out
        uniq, inv, pos, _, tags, got = run
        res = np.full(len(uniq), UNBOUND, dtype=np.int64)
        if expr.op == "REGEX":
            t_id, f_id = self._bool_ids()
            res[pos] = np.where(got.to_numpy(zero_copy_only=False), t_id, f_id)
        else:  # the new strings' keys written and interned column-wise
            res[pos] = S.intern_lex(self.ctx, got.cast(pa.large_string()), tags.cast(pa.large_string()))
        return res[inv]

    def _regex_table(self, expr) -> dict | None:
        """A nested column-wise REGEX / REPLACE as a table (lexical form, tag)
        -> result term for the per-value evaluator: no interning of results."""
        run = self._regex_run(expr)
        if run is None:
            return None
        if not run:
            return {}
        _, _, _, bodies, tags, got = run
        lex, tag = bodies.to_pylist(), tags.to_pylist()
        if expr.op == "REGEX":
            vals = [V.TRUE if h else V.FALSE for h in got.to_pylist()]
        else:
            vals = [Literal(v, RDF_LANGSTRING, g) if g else Literal(v) for v, g in zip(got.to_pylist(), tag, strict=True)]
        return dict(zip(zip(lex, tag, strict=True), vals, strict=True))

    # -- numeric columns: arithmetic and comparisons over whole columns

    def _num_leaf(self, ids: np.ndarray, arith: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(class, float64, int64) per row of an id column (see ``_N_*``): the
        class and value of each distinct id from the dictionary's numeric side
        array and its memoised datatype code (``_datatype_codes_of``), no term
        decoded. Without ``arith`` (comparisons) every id that is no number is
        ``_N_OTHER`` (the general path decides those); with it, an id that is no
        literal or a literal of another datatype is ``_N_ERR`` (a type error)."""
        if _constant(ids):
            c, f, i = self._num_leaf(ids[:1], arith)
            n = len(ids)
            return np.full(n, c[0], dtype=np.int8), np.full(n, f[0]), np.full(n, i[0], dtype=np.int64)
        uniq, inv = self._distinct(ids)
        m = len(uniq)
        lazy = getattr(self.ctx, "lazy_values", None)
        if lazy is not None and m and int(uniq[0]) >= _LAZY_BASE:  # computed numbers held as values
            v, code = lazy(uniq)
            isnan = np.isnan(v)
            cls = np.where(code == _DT_INT, _N_INT, np.where(isnan, _N_OTHER, _N_DBL)).astype(np.int8)
            f = np.where(code == _DT_INT, 0.0 + v, np.where(isnan, 0.0, v))
            i = np.where(cls == _N_INT, f, 0.0).astype(np.int64)
            return cls[inv], f[inv], i[inv]
        nums = self._numeric(uniq)  # NaN for unbound, non-numeric and ill-typed ids (and "NaN")
        has = np.flatnonzero(~np.isnan(nums))  # numeric literals only
        cls = np.full(m, _N_OTHER, dtype=np.int8)
        if arith:
            cls[:] = _N_ERR
            nan_lit = np.flatnonzero(np.isnan(nums) & (uniq >= 0))
            if len(nan_lit):
                nan_lit = nan_lit[self._kinds(uniq[nan_lit]) == 2]
                # a numeric datatype: "NaN", ill-typed or a float: the exact path decides
                cls[nan_lit[_datatype_codes_of(self.ctx, uniq[nan_lit]) >= 0]] = _N_OTHER
        f = np.zeros(m)
        if len(has):
            code = _datatype_codes_of(self.ctx, uniq[has])
            v = nums[has]
            fam = code & _DT_FAMILY
            c = np.full(len(has), _N_OTHER, dtype=np.int8)  # floats
            big = np.abs(v) >= 2.0**53
            c[(fam == _DT_INT) & ~big] = _N_INT
            c[(fam == _DT_INT) & big] = _N_DEC
            c[fam == _DT_DEC] = _N_DEC
            c[(fam == _DT_DEC) & (code & _DT_LONG == 0)] = _N_DECS
            c[fam == _DT_DBL] = _N_DBL
            cls[has] = c
            # integers and decimals have no -0 (their "-0" is 0: 0.0 + (-0.0) = +0.0)
            f[has] = np.where(c == _N_DBL, v, np.where(c > 0, 0.0 + v, 0.0))
        i = np.where(cls == _N_INT, f, 0.0).astype(np.int64)
        return cls[inv], f[inv], i[inv]

    def _num_tree(self, expr, leaves: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(class, float64, int64) per row of a numeric expression, computed over
        whole columns with XPath's promotion where the result is exact: integer
        + - * in int64 (no overflow), anything with a double in float64 (an
        integer or decimal operand cast to its nearest double, as the XPath cast
        does). Decimal and float results, integer division and overflows are
        ``_N_OTHER`` (the exact per-value path computes them); an operand that is
        no number makes the row ``_N_ERR``. Any other sub-expression is a leaf
        (its ids classified); a leaf repeated in the tree is read once."""
        if isinstance(expr, Call) and expr.op in _NUM_UNARY and len(expr.args) == 1:
            c, f, i = self._num_tree(expr.args[0], leaves)
            if expr.op == "NEG":
                i = -i
                f = np.where(c == _N_DBL, -f, 0.0 - f)  # an integer or decimal zero negated is no -0.0
            return c, f, i
        if isinstance(expr, Call) and expr.op in _NUM_BINARY and len(expr.args) == 2:
            ca, fa, ia = self._num_tree(expr.args[0], leaves)
            cb, fb, ib = self._num_tree(expr.args[1], leaves)
            op = expr.op
            c = np.full(self.n, _N_OTHER, dtype=np.int8)
            with np.errstate(all="ignore"):
                f = _FLOAT_OPS[op](fa, fb)
            num_a, num_b = ca > 0, cb > 0
            c[num_a & num_b & ((ca == _N_DBL) | (cb == _N_DBL))] = _N_DBL
            i = np.zeros(self.n, dtype=np.int64)
            if op != "/":
                ints = (ca == _N_INT) & (cb == _N_INT) & (np.abs(f) < 2.0**62)
                if ints.any():
                    c[ints] = _N_INT
                    i[ints] = _INT_OPS[op](ia[ints], ib[ints])
                    f[ints] = i[ints]
            c[(ca == _N_ERR) | (cb == _N_ERR)] = _N_ERR
            return c, f, i
        got = leaves.get(expr)
        if got is None:
            if isinstance(expr, Const):
                c, f, i = _num_const(expr.key)
                got = np.full(self.n, c, dtype=np.int8), np.full(self.n, f), np.full(self.n, i, dtype=np.int64)
            else:
                got = self._num_leaf(self.ids(expr))
            if not _nondeterministic(expr):  # (each RAND() of the tree draws its own values)
                leaves[expr] = got
        return got

    def _one_column_distinct(self, expr) -> tuple[np.ndarray, np.ndarray, str] | None:
        """(distinct ids, inverse, variable) when ``expr`` reads one variable only, holds no
        RAND() / BNODE() / EXISTS, and that column has at most half as many distinct ids as
        rows: the value per row is then a function of the id (``?a * 3 + 1`` over 72k ages:
        60 evaluations, not 72k). None otherwise."""
        if self.n < _BY_DISTINCT_ROWS or _nondeterministic(expr) or _exists_of(expr):
            return None
        names = set(vars_of(expr))
        if len(names) != 1:
            return None
        name = names.pop()
        col = self.columns.get(name)
        if col is None:
            return None
        uniq, inv = self._distinct(np.asarray(col, dtype=np.int64))
        if len(uniq) * 2 > self.n:
            return None
        return uniq, inv, name

    def _num_ids(self, expr) -> np.ndarray | None:
        """ids of an arithmetic expression's value per row: integers and doubles
        computed over the columns and interned once per distinct value, errors
        unbound, the rest (decimals, floats, integer division...) by the exact
        per-value path on those rows only. None: not for this expression."""
        if _exists_of(expr):
            return None
        few = self._one_column_distinct(expr)
        if few is not None:  # a function of one column of few distinct ids: computed per id
            uniq, inv, name = few
            got = _Evaluator({name: uniq}, len(uniq), self.ctx)._num_ids(expr)
            return None if got is None else got[inv]
        c, f, i = self._num_tree(expr, {})
        out = np.full(self.n, UNBOUND, dtype=np.int64)
        ints = np.flatnonzero(c == _N_INT)
        lazy = getattr(self.ctx, "intern_numbers", None)
        if len(ints) and lazy is not None:  # (many distinct values: held as values, not keys)
            out[ints] = np.asarray(lazy(i[ints], _DT_INT), dtype=np.int64)
        elif len(ints):
            u, inv = distinct_inverse(i[ints])
            keys = [f'"{v}"{_INTEGER_SUFFIX}' for v in u.tolist()]
            out[ints] = np.asarray(self.ctx.intern(keys), dtype=np.int64)[inv.reshape(-1)]
        dbl = np.flatnonzero(c == _N_DBL)
        if len(dbl) and lazy is not None:
            out[dbl] = np.asarray(lazy(f[dbl], _DT_DBL), dtype=np.int64)
        elif len(dbl):
            # distinct by bit pattern: -0.0 and 0.0 are written apart, NaNs together
            bits = f[dbl].copy()
            bits[np.isnan(bits)] = np.nan
            u, inv = distinct_inverse(bits.view(np.int64))
            keys = V.format_doubles(u.view(np.float64), '"', '"' + _DOUBLE_SUFFIX)
            out[dbl] = np.asarray(self.ctx.intern(keys), dtype=np.int64)[inv.reshape(-1)]
        rest = (c == _N_OTHER) | (c == _N_DEC) | (c == _N_DECS)  # decimals: written by the per-value path
        if rest.any():
            out[rest] = self._exact_rows(expr, rest)
        return out

    def _exact_rows(self, expr, mask: np.ndarray) -> np.ndarray:
        """ids of ``expr`` on the rows of ``mask`` by the exact per-value path."""
        names = [nm for nm in vars_of(expr) if nm in self.columns]
        cols = {k: np.asarray(self.columns[k])[mask] for k in names}
        rows = np.flatnonzero(mask) if self.rows is None else self.rows[mask]
        sub = _Evaluator(cols, int(mask.sum()), self.ctx, rows)
        out = sub._exact_tree(expr) if sub.n >= _NUM_MIN_ROWS else None
        return sub._fallback(expr) if out is None else out

    def _exact_tree(self, expr) -> np.ndarray | None:
        """ids of an exact numeric tree (decimals, FLOOR..., casts: :mod:`engine.exec.exact_numeric`),
        its rows with float / double operands by the general path; None: not for ``expr``."""
        if _nondeterministic(expr) or _exists_of(expr):
            return None
        got = X.ids_of(self, expr, unique_rows)
        if got is None:
            return None
        out, rest = got
        if rest.any():
            names = [nm for nm in vars_of(expr) if nm in self.columns]
            cols = {k: np.asarray(self.columns[k])[rest] for k in names}
            rows = np.flatnonzero(rest) if self.rows is None else self.rows[rest]
            out[rest] = _Evaluator(cols, int(rest.sum()), self.ctx, rows)._fallback(expr)
        return out

    def _num_compare(self, op: str, left, right) -> tuple[np.ndarray, np.ndarray] | None:
        """``left op right`` where a side is arithmetic: numbers compared over
        the columns after promotion (a double on either side: as doubles;
        otherwise exactly, by int64, or by the doubles when they differ: the
        rounding to the nearest double is monotonic, so only ties between
        inexact values are undecided); an arithmetic side in error makes the
        row an error; the other rows (undecided ties, non-numeric leaves,
        decimal or float results) by the general path."""
        if _exists_of(left) or _exists_of(right):
            return None
        few = self._one_column_distinct(Call("=", (left, right)))
        if few is not None:  # both sides functions of one column of few distinct ids
            uniq, inv, name = few
            got = _Evaluator({name: uniq}, len(uniq), self.ctx)._num_compare(op, left, right)
            return None if got is None else (got[0][inv], got[1][inv])
        leaves: dict = {}
        cl, fl, il = self._num_tree(left, leaves)
        cr, fr, ir = self._num_tree(right, leaves)
        n = self.n
        val = np.zeros(n, dtype=bool)
        err = np.zeros(n, dtype=bool)
        cmp = _CMP[op]
        both = (cl > 0) & (cr > 0)
        dbl = both & ((cl == _N_DBL) | (cr == _N_DBL))
        ints = both & (cl == _N_INT) & (cr == _N_INT)
        with np.errstate(invalid="ignore"):
            val[dbl] = cmp(fl[dbl], fr[dbl])
            val[ints] = cmp(il[ints], ir[ints])
            exact = both & ~dbl & ~ints
            # equal doubles: equal values when both sides are integers or short decimals
            decided = dbl | ints | (exact & ((fl != fr) | ((cl != _N_DEC) & (cr != _N_DEC))))
            val[exact] = cmp(fl[exact], fr[exact])
        for side, c in ((left, cl), (right, cr)):
            if _is_arith(side):
                bad = c == _N_ERR
                err |= bad
                decided |= bad
        rest = ~decided
        if rest.any():
            rv, re_ = self._general_compare_rows(op, left, right, rest)
            val[rest] = rv
            err[rest] = re_
        return val & ~err, err

    def _general_compare_rows(self, op: str, left, right, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        names = [nm for nm in dict.fromkeys(vars_of(left) + vars_of(right)) if nm in self.columns]
        cols = {k: np.asarray(self.columns[k])[mask] for k in names}
        rows = np.flatnonzero(mask) if self.rows is None else self.rows[mask]
        sub = _Evaluator(cols, int(mask.sum()), self.ctx, rows)
        a = sub._fallback(left) if _is_arith(left) else sub.ids(left)
        b = sub._fallback(right) if _is_arith(right) else sub.ids(right)
        return sub._compare_ids(op, a, b)

    def _sub(self, expr, mask: np.ndarray) -> np.ndarray:
        """Evaluate ``expr`` for the rows selected by ``mask`` only."""
        if mask.all():
            return self.ids(expr)
        if isinstance(expr, Const):
            return np.full(int(mask.sum()), self._const_id(expr.key), dtype=np.int64)
        return self._masked(expr, mask, int(mask.sum())).ids(expr)

    def _masked(self, expr, mask: np.ndarray, k: int) -> _Evaluator:
        """An evaluator of ``expr`` over the ``k`` rows ``mask`` selects: the columns it reads
        (all of them for EXISTS, which sees the whole solution), those rows only."""
        if _exists_of(expr):
            names = list(self.columns)
        else:
            names = [nm for nm in vars_of(expr) if nm in self.columns]
        cols = {nm: np.asarray(self.columns[nm])[mask] for nm in names}
        rows = np.flatnonzero(mask) if self.rows is None else self.rows[mask]
        return _Evaluator(cols, k, self.ctx, rows)

    def bools(self, expr) -> tuple[np.ndarray, np.ndarray]:
        """(value, error) bool arrays of the effective boolean value."""
        n = self.n
        if isinstance(expr, Exists):
            r = np.asarray(self.ctx.exists(expr.pattern, self.columns, n), dtype=bool)
            return (~r if expr.negated else r), np.zeros(n, dtype=bool)
        if isinstance(expr, Call):
            op = expr.op
            if op == "||":
                first, second = conj_order.ordered(expr.args[0], expr.args[1])  # (commutative)
                lv, le = self.bools(first)
                rv, re_ = self._bools_where(second, ~lv | le)  # (T || x is T)
                lt, rt = lv & ~le, rv & ~re_
                val = lt | rt
                err = ~val & (le | re_)
                return val, err
            if op == "&&":
                first, second = conj_order.ordered(expr.args[0], expr.args[1])  # (commutative)
                lv, le = self.bools(first)
                rv, re_ = self._bools_where(second, lv | le)  # (F && x is F)
                lf, rf = ~lv & ~le, ~rv & ~re_
                val = lv & rv & ~le & ~re_
                err = ~(lf | rf) & (le | re_)
                return val, err
            if op == "!":
                v, e = self.bools(expr.args[0])
                return ~v & ~e, e
            if op in _CMP:
                return self._compare(op, expr.args[0], expr.args[1])
            if op in ("IN", "NOT IN"):
                return self._in(expr)
            if op in _STR_TESTS:
                got = self._str_test(expr)
                if got is not None:
                    return got
            if op == "BOUND":
                a = expr.args[0]
                if isinstance(a, Var):
                    col = self.columns.get(a.name)
                    v = np.zeros(n, dtype=bool) if col is None else np.asarray(col) >= 0
                    return v, np.zeros(n, dtype=bool)
                ids = self.ids(a)
                return ids >= 0, np.zeros(n, dtype=bool)
            if op == "SAMETERM":
                a, b = self.ids(expr.args[0]), self.ids(expr.args[1])
                err = (a < 0) | (b < 0)
                return (a == b) & ~err, err
            if op == "LANGMATCHES" and n >= _CLASSIFY_MIN_ROWS:
                got = self._langmatches(expr)
                if got is not None:
                    return got
            if op in ("ISIRI", "ISBLANK", "ISLITERAL"):
                ids = self.ids(expr.args[0])
                k = self._kinds(ids)
                want = {"ISIRI": 0, "ISBLANK": 1, "ISLITERAL": 2}[op]
                err = ids < 0
                return (k == want) & ~err, err
            if op == "ISNUMERIC":  # (one argument: the parser checks arity)
                return self._isnumeric(self.ids(expr.args[0]))
        ids = self.ids(expr)
        return self._ebv(ids)

    def _bools_where(self, expr, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`bools` of ``expr`` where it can still change the answer: a ``&&`` or
        ``||`` whose left operand already decided most rows (false for ``&&``, true
        for ``||``, errors included in ``live``) evaluates its right operand over the
        other rows only (SPARQL's F && E = F, T || E = T); the decided rows read
        (False, no error), which their operator ignores. Why: a selective first test
        (a CONTAINS over 72k e-mails keeping 5 %) made the second one run over every
        row, string kernels included. Small inputs and rows mostly live: whole columns."""
        n = self.n
        if n < _SHORT_CIRCUIT_ROWS:
            return self.bools(expr)
        k = int(np.count_nonzero(live))
        if 2 * k > n:
            return self.bools(expr)
        val = np.zeros(n, dtype=bool)
        err = np.zeros(n, dtype=bool)
        if k == 0:
            return val, err
        v, e = self._masked(expr, live, k).bools(expr)
        val[live] = v
        err[live] = e
        return val, err

    def _isnumeric(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """isNumeric per distinct id: a literal whose value the dictionary's numeric
        side parses (a valid numeric lexical form of a numeric datatype, as
        ``parse_numeric``); of the rest only literals spelling ``NaN`` (a valid
        double or float with no number to show) go term by term."""
        uniq, inv = self._distinct(ids)
        per = np.zeros(len(uniq), dtype=bool)
        ok = np.flatnonzero(uniq >= 0)
        if len(ok):
            num = self.ctx.numeric(uniq[ok])
            per[ok] = ~np.isnan(num)
            nan = ok[np.isnan(num)]
            if len(nan):
                kinds = self.ctx.kinds(uniq[nan])
                nan = nan[kinds == 2]
            if len(nan):
                keys = _keys_arrow(self.ctx, uniq[nan])
                maybe = nan[pc.fill_null(pc.match_substring(keys, "NaN"), False).to_numpy(zero_copy_only=False)]
                if len(maybe):
                    self.ctx.check_budget()
                    per[maybe] = [V.numeric_of(from_key(k)) is not None for k in self.ctx.keys(uniq[maybe])]
        err = ids < 0
        return per[inv] & ~err, err

    def _str_test(self, expr) -> tuple[np.ndarray, np.ndarray] | None:
        """(value, error) of STRSTARTS / STRENDS / CONTAINS(text, "const"[@tag]) over
        the distinct ids of ``text`` in one Arrow kernel: text that is no string
        literal, or whose tag the constant's tag does not match, is an error
        (argument compatibility). None: the per-value path decides (few rows, a
        non-string or typed constant, a text argument that must run per row)."""
        if len(expr.args) != 2 or self.n < _STR_TEST_MIN_ROWS:
            return None
        text, const = expr.args
        if not isinstance(const, Const) or const.key[:1] != '"' or '"^^' in const.key:
            return None
        if _nondeterministic(text) or _exists_of(text):
            return None
        lit_ = from_key(const.key)
        want = lit_.lang.lower() if lit_.lang else ""
        if S.supported(text):
            lx = S.lex_of(self, text)
            if lx is not None:
                return self._lex_test(expr.op, lx, lit_.lexical, want)
        ids = self.ids(text)
        uniq, inv = distinct_inverse(ids)
        inv = inv.reshape(-1)
        cand = np.flatnonzero(uniq >= 0)
        uv = np.zeros(len(uniq), dtype=bool)
        ue = np.ones(len(uniq), dtype=bool)  # not a string literal: an error
        self.ctx.check_budget()
        keys = _keys_arrow(self.ctx, uniq[cand])
        if expr.op == "STRSTARTS" and not want:
            # on the keys themselves: escaping maps characters to a prefix code, so the
            # escaped body starts with the escaped constant iff the string starts with it
            lit = pc.fill_null(pc.starts_with(keys, '"'), False).to_numpy(zero_copy_only=False)
            string = lit & ~pc.fill_null(pc.ends_with(keys, ">"), False).to_numpy(zero_copy_only=False)
            hit = pc.fill_null(pc.starts_with(keys, literal_key(lit_.lexical)[:-1]), False)
            uv[cand] = hit.to_numpy(zero_copy_only=False) & string
            ue[cand] = ~string
            self.ctx.check_budget()
            return uv[inv], ue[inv]
        pos, bodies, tags = _string_keys(keys)
        if len(pos):
            ok = np.ones(len(pos), dtype=bool)
            if want:
                ok = pc.equal(pc.utf8_lower(tags), want).to_numpy(zero_copy_only=False)
            hit = _STR_TESTS[expr.op](bodies, pattern=lit_.lexical).to_numpy(zero_copy_only=False)
            where = cand[pos]
            uv[where] = hit & ok
            ue[where] = ~ok
        self.ctx.check_budget()
        return uv[inv], ue[inv]

    def _langmatches(self, expr) -> tuple[np.ndarray, np.ndarray] | None:
        """LANGMATCHES(tag, "range") with a constant simple range over the tags'
        values (LANG(?x) column-wise, engine/exec/strings.py): "*" matches any
        non-empty tag, else the range itself or a prefix of it followed by "-",
        case-insensitively; a tagged (non-simple) first argument is an error."""
        if len(expr.args) != 2:
            return None
        rng = expr.args[1]
        if not isinstance(rng, Const) or rng.key[:1] != '"' or rng.key[-1] != '"':
            return None
        lx = S.lex_of(self, expr.args[0])
        if lx is None:
            return None
        r = from_key(rng.key).lexical.lower()
        m = len(lx.lex)
        uv = np.zeros(m + 1, dtype=bool)
        ue = np.ones(m + 1, dtype=bool)
        if m:
            low = pc.utf8_lower(lx.lex)
            if r == "*":
                hit = pc.not_equal(lx.lex, "")
            else:
                hit = pc.equal(low, r)
                if r:
                    hit = pc.or_(hit, pc.starts_with(low, r + "-"))
            simple = pc.equal(lx.tags(), "").to_numpy(zero_copy_only=False)
            uv[:m] = hit.to_numpy(zero_copy_only=False) & simple
            ue[:m] = ~simple
        self.ctx.check_budget()
        inv = np.where(lx.inv < 0, m, lx.inv)
        return uv[inv], ue[inv]

    def _lex_test(self, op: str, lx, needle: str, want: str) -> tuple[np.ndarray, np.ndarray]:
        """(value, error) of STRSTARTS / STRENDS / CONTAINS(string function, "needle"[@want])
        over the function's values (engine/exec/strings.py): a tagged needle
        against another tag (or none) is an error."""
        m = len(lx.lex)
        uv = np.zeros(m + 1, dtype=bool)
        ue = np.ones(m + 1, dtype=bool)  # entry m: the rows in error
        if m:
            ok = (pc.equal(pc.utf8_lower(lx.tags()), want).to_numpy(zero_copy_only=False) if want
                  else np.ones(m, dtype=bool))
            hit = _STR_TESTS[op](lx.lex, pattern=needle).to_numpy(zero_copy_only=False)
            uv[:m] = hit & ok
            ue[:m] = ~ok
        self.ctx.check_budget()
        inv = np.where(lx.inv < 0, m, lx.inv)
        return uv[inv], ue[inv]

    def _lex_compare(self, op: str, lx, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``f op "c"`` for a string function f (its values are string literals,
        engine/exec/strings.py) and a string constant: = and != are term
        equality (lexical form and tag; never an error between string
        literals); < <= > >= against a simple constant compare simple strings
        by code points, tagged ones are errors. None: the general path decides
        (an order against a tagged constant)."""
        c = from_key(key)
        ctag = (c.lang or "").lower()
        m = len(lx.lex)
        uv = np.zeros(m + 1, dtype=bool)
        ue = np.zeros(m + 1, dtype=bool)
        ue[m] = True
        if op in ("=", "!="):
            if m:
                same = pc.and_(pc.equal(lx.lex, pa.scalar(c.lexical, pa.large_string())),
                               pc.equal(lx.tags(), ctag)).to_numpy(zero_copy_only=False)
                uv[:m] = same if op == "=" else ~same
        elif ctag:
            return None
        elif m:
            simple = pc.equal(lx.tags(), "").to_numpy(zero_copy_only=False)
            got = _STRING_CMP[op](lx.lex, pa.scalar(c.lexical, pa.large_string())).to_numpy(zero_copy_only=False)
            uv[:m] = got & simple
            ue[:m] = ~simple
        self.ctx.check_budget()
        inv = np.where(lx.inv < 0, m, lx.inv)
        return uv[inv], ue[inv]

    # -- EBV of ids

    def _ebv(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(ids)
        val = np.zeros(n, dtype=bool)
        err = ids < 0
        if n == 0:
            return val, err
        t, f = self._bool_ids()
        is_t = ids == t
        is_f = ids == f
        val |= is_t
        rest = ~err & ~is_t & ~is_f
        if rest.any():
            rids = ids[rest]
            uniq, inv = distinct_inverse(rids)
            uv = np.zeros(len(uniq), dtype=bool)
            ue = np.zeros(len(uniq), dtype=bool)
            nums = self._numeric(uniq)
            kinds = self._kinds(uniq)
            num_ok = (kinds == 2) & ~np.isnan(nums)
            uv[num_ok] = nums[num_ok] != 0
            slow = np.flatnonzero(~num_ok)
            if len(slow):
                keys = self.ctx.keys(uniq[slow])
                for j, k in zip(slow, keys, strict=False):
                    try:
                        uv[j] = V.ebv(from_key(k))
                    except ExprError:
                        ue[j] = True
            inv = inv.reshape(-1)
            val[rest] = uv[inv]
            err = err.copy()
            err[rest] = ue[inv]
        return val, err

    # -- comparisons

    def _compare(self, op: str, left, right) -> tuple[np.ndarray, np.ndarray]:
        n = self.n
        if n >= _NUM_MIN_ROWS and (_is_arith(left) or _is_arith(right)):
            got = self._num_compare(op, left, right)
            if got is not None:
                return got
        if n >= _CLASSIFY_MIN_ROWS:
            for const, other in ((right, left), (left, right)):
                if not isinstance(const, Const) or const.key[0] != '"' or const.key[-1] == ">":
                    continue
                if isinstance(other, Call) and other.op in S.LEX_OPS:  # STR(?x) = "..." and the like
                    lx = S.lex_of(self, other)
                    if lx is not None:
                        got = self._lex_compare(op if const is right else _FLIP[op], lx, const.key)
                        if got is not None:
                            return got
                if op in ("=", "!="):
                    return self._equal_string(op, self.ids(other), self._const_id(const.key))
                if const.key[-1] == '"':  # a simple string
                    flipped = op if const is right else _FLIP[op]
                    return self._order_string(flipped, self.ids(other), const.key)
        a = self.ids(left)
        b = self.ids(right)
        return self._compare_ids(op, a, b)

    def _equal_string(self, op: str, x: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
        """``x = "c"`` / ``x != "c"`` for a simple or language-tagged string
        constant: against any IRI, blank node or string literal the answer is
        term identity (ids); only rows holding a typed literal (a number, a
        date, an unknown datatype: errors or value comparisons) take the
        general path."""
        err = x < 0
        val = (x == c) if op == "=" else (x != c)
        uniq, inv = distinct_inverse(x)
        cand = np.flatnonzero(uniq >= 0)
        typed = np.zeros(len(uniq), dtype=bool)
        if len(cand):
            keys = _keys_arrow(self.ctx, uniq[cand])
            typed[cand] = (pc.starts_with(keys, '"').to_numpy(zero_copy_only=False)
                           & pc.ends_with(keys, ">").to_numpy(zero_copy_only=False))
        rows = np.flatnonzero(typed[inv.reshape(-1)])
        val &= ~err
        if len(rows):
            v, e = self._compare_ids(op, x[rows], np.full(len(rows), c, dtype=np.int64))
            val[rows] = v
            err = err.copy()
            err[rows] = e
        return val, err

    def _order_string(self, op: str, x: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray]:
        """``x op "c"`` (< <= > >=) for a simple string constant: simple strings
        compare by code points (Arrow compares UTF-8 bytes: the same order) over
        the distinct ids; IRIs, blank nodes and tagged strings are errors;
        typed literals take the general path."""
        c = from_key(key).lexical
        uniq, inv = distinct_inverse(x)
        cand = np.flatnonzero(uniq >= 0)
        uv = np.zeros(len(uniq), dtype=bool)
        ue = np.ones(len(uniq), dtype=bool)
        typed = np.zeros(len(uniq), dtype=bool)
        self.ctx.check_budget()
        if len(cand):
            keys = _keys_arrow(self.ctx, uniq[cand])
            typed[cand] = (pc.fill_null(pc.starts_with(keys, '"'), False).to_numpy(zero_copy_only=False)
                           & pc.fill_null(pc.ends_with(keys, ">"), False).to_numpy(zero_copy_only=False))
            pos, bodies, tags = _string_keys(keys)
            simple = pc.equal(tags, "").to_numpy(zero_copy_only=False)
            where = cand[pos[simple]]
            got = _STRING_CMP[op](bodies.filter(pa.array(simple)), pa.scalar(c, pa.large_string()))
            uv[where] = got.to_numpy(zero_copy_only=False)
            ue[where] = False
        self.ctx.check_budget()
        val, err = uv[inv], ue[inv]
        rows = np.flatnonzero(typed[inv])
        if len(rows):
            v, e = self._compare_ids(op, x[rows], np.full(len(rows), self._const_id(key), dtype=np.int64))
            val[rows] = v
            err[rows] = e
        return val, err

    def _compare_ids(self, op: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(a)
        if n >= _BY_DISTINCT_ROWS:
            # a column against a constant: the answer depends on the column's id only, so
            # it is decided once per distinct id and gathered (ages, prices: ~100 distinct
            # values in thousands of rows; every pass below then runs over those)
            for col, const in ((a, b), (b, a)):
                if _constant(const) and not _constant(col):
                    uniq, inv = self._distinct(col)
                    if len(uniq) * 2 <= n:
                        c = const[:len(uniq)]
                        v, e = self._compare_ids(op, uniq, c) if col is a else self._compare_ids(op, c, uniq)
                        return v[inv], e[inv]
                    break
        err = (a < 0) | (b < 0)
        val = np.zeros(n, dtype=bool)
        # numbers: decided over the columns where promotion makes it exact (see _num_compare)
        ca, fa, ia = self._num_leaf(a, arith=False)
        cb, fb, ib = self._num_leaf(b, arith=False)
        if (ca == _N_INT).all() and (cb == _N_INT).all():  # the usual integer column against a constant
            return _CMP[op](ia, ib), err
        both = (ca > 0) & (cb > 0)
        if both.all() and not ((ca == _N_DEC).any() or (cb == _N_DEC).any()):
            # leaves' integers are below 2**53 and short decimals are told apart by their doubles:
            # every row is decided by the doubles (with a double on a side, that is the promotion)
            return _CMP[op](fa, fb), err
        dbl = both & ((ca == _N_DBL) | (cb == _N_DBL))
        ints = both & (ca == _N_INT) & (cb == _N_INT)
        exact = both & ~dbl & ~ints
        with np.errstate(invalid="ignore"):
            fast = dbl | ints | (exact & ((fa != fb) | ((ca != _N_DEC) & (cb != _N_DEC))))
            if fast.any():
                cmp = _CMP[op]
                val[dbl] = cmp(fa[dbl], fb[dbl])
                val[ints] = cmp(ia[ints], ib[ints])
                ex = exact & fast
                val[ex] = cmp(fa[ex], fb[ex])
        rest = ~err & ~fast
        if not rest.any():
            return val, err
        ka = self._kinds(a)
        kb = self._kinds(b)
        nonlit = rest & (ka != 2) & (kb != 2)
        mixed = rest & ((ka == 2) != (kb == 2))
        if op in ("=", "!="):
            eq = a == b
            val[nonlit] = eq[nonlit] if op == "=" else ~eq[nonlit]
            val[mixed] = op == "!="
        else:
            err = err | nonlit | mixed
        lit = rest & (ka == 2) & (kb == 2)
        if lit.sum() >= _CLASSIFY_MIN_ROWS:
            # simple strings, language strings and booleans: decided by ranks / ids
            li = np.flatnonzero(lit)
            (ca, ra), (cb, rb) = self._literal_classes(a[li], b[li])
            fa, fb = _FAMILY[ca], _FAMILY[cb]
            # dateTimes with and without timezone (same family, other class)
            # may be indeterminate: those pairs stay for the per-pair path
            known = (ca != 0) & (cb != 0) & ~((ca != cb) & (fa == fb))
            same = known & (ca == cb)
            if op in ("=", "!="):
                eq = np.where(ca == _C_LANG, a[li] == b[li], ra == rb)
                v = np.where(same, eq, False)
                if op == "!=":
                    v = np.where(known, ~v, False)
                val[li[known]] = v[known]
            else:
                ordered = same & (ca != _C_LANG)
                val[li[ordered]] = _CMP[op](ra[ordered], rb[ordered])
                bad = known & ~ordered
                err = err.copy()
                err[li[bad]] = True
            lit = lit.copy()
            lit[li[known]] = False
        if lit.any():
            lv, le = self._pairwise(lambda x, y: V.compare(op, x, y), a[lit], b[lit])
            val[lit] = lv
            err = err.copy()
            err[lit] = le
        return val, err

    def _pairwise(self, fn, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply a boolean term function to distinct (a, b) id pairs."""
        uniq, inv = unique_rows([a, b])
        ids_needed = unique(uniq.reshape(-1))
        terms = dict(zip(ids_needed.tolist(), (from_key(k) for k in self.ctx.keys(ids_needed)), strict=False))
        m = len(uniq)
        uv = np.zeros(m, dtype=bool)
        ue = np.zeros(m, dtype=bool)
        for j, (x, y) in enumerate(uniq.tolist()):
            if j % _BUDGET_EVERY == _BUDGET_EVERY - 1:
                self.ctx.check_budget()
            try:
                uv[j] = fn(terms[x], terms[y])
            except ExprError:
                ue[j] = True
        return uv[inv], ue[inv]

    def _literal_classes(self, *arrays: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per id of each array: a literal class (``_C_*``; 0 = other) and a
        rank, shared by all arrays, ordering the values within each class
        (strings by codepoints, booleans, dateTimes and dates by instant);
        equal values have equal ranks."""
        uniqs = [distinct_inverse(x) for x in arrays]
        union = unique(np.concatenate([u for u, _ in uniqs]))
        m = len(union)
        cls = np.zeros(m, dtype=np.int8)
        rank = np.zeros(m, dtype=np.int64)
        ranked: dict[int, list] = {}
        vidx = np.flatnonzero(union >= 0)
        arr = _keys_arrow(self.ctx, union[vidx])
        # strings: classified and ranked column-wise (distinct ids: distinct lexical forms)
        pos, bodies, tags = _string_keys(arr)
        simple = pc.equal(tags, "").to_numpy(zero_copy_only=False)
        sp = vidx[pos[simple]]
        cls[sp] = _C_STRING
        rank[sp] = _rank_strings(bodies.filter(pa.array(simple)))
        cls[vidx[pos[~simple]]] = _C_LANG
        # booleans, dateTimes and dates: parsed one by one
        typed = (pc.ends_with(arr, _BOOLEAN_SUFFIX).to_numpy(zero_copy_only=False)
                 | pc.ends_with(arr, _DATETIME_SUFFIX).to_numpy(zero_copy_only=False)
                 | pc.ends_with(arr, _DATE_SUFFIX).to_numpy(zero_copy_only=False))
        tix = vidx[typed]
        for i, (j, k) in enumerate(zip(tix.tolist(), self.ctx.keys(union[tix]), strict=True)):
            if i % _BUDGET_EVERY == _BUDGET_EVERY - 1:
                self.ctx.check_budget()
            if k.endswith(_BOOLEAN_SUFFIX):
                b = V.parse_boolean(from_key(k).lexical)
                if b is None:
                    continue
                c, v = _C_BOOLEAN, b
            else:
                d = V.datetime_of(from_key(k))
                if d is None:
                    continue
                c = (_C_DATE_TZ if d.tz is not None else _C_DATE) if d.is_date else (
                    _C_DATETIME_TZ if d.tz is not None else _C_DATETIME)
                v = d.instant()
            cls[j] = c
            ranked.setdefault(c, []).append((v, j))
        for entries in ranked.values():
            entries.sort(key=lambda e: e[0])
            r = 0
            for pos, (v, j) in enumerate(entries):
                if pos and v != entries[pos - 1][0]:
                    r += 1
                rank[j] = r
        out = []
        for u, inv in uniqs:
            pos = np.searchsorted(union, u)[inv.reshape(-1)]
            out.append((cls[pos], rank[pos]))
        return out

    def _in(self, expr) -> tuple[np.ndarray, np.ndarray]:
        n = self.n
        found = np.zeros(n, dtype=bool)
        anyerr = np.zeros(n, dtype=bool)
        left = expr.args[0]
        lids = self.ids(left)
        items = expr.args[1:]
        if items and all(isinstance(it, Const) and it.key[0] in "<_" for it in items):
            # IRIs / blank nodes: '=' is id equality, never an error
            item_ids = self.ctx.intern([it.key for it in items])
            found = np.isin(lids, item_ids)
            err = lids < 0
            if expr.op == "NOT IN":
                return ~found & ~err, err
            return found & ~err, err
        lexpr = _IdsExpr(lids)
        for item in expr.args[1:]:
            sub = _Evaluator({**self.columns, _IdsExpr.NAME: lids}, n, self.ctx, self.rows)
            v, e = sub._compare("=", lexpr.var, item)
            found |= v & ~e
            anyerr |= e
        err = ~found & anyerr
        if expr.op == "NOT IN":
            return ~found & ~err, err
        return found, err

    # -- scalar fallback

    def _fallback(self, expr) -> np.ndarray:
        n = self.n
        ctx = self.ctx
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        names = vars_of(expr)
        cols = {}
        for name in names:
            c = self.columns.get(name)
            cols[name] = np.full(n, UNBOUND, dtype=np.int64) if c is None else np.asarray(c, dtype=np.int64)
        exists_names: dict[Exists, str] = {}
        for k, ex in enumerate(_exists_of(expr)):
            if ex in exists_names:
                continue
            pseudo = f"\x00exists{k}"
            val, err = self.bools(ex)
            cols[pseudo] = self._bools_to_ids(val, err)
            exists_names[ex] = pseudo
            names.append(pseudo)
        scalar = _Scalar(ctx, exists_names)
        per_row = _nondeterministic(expr)
        if not per_row and n >= _CLASSIFY_MIN_ROWS:
            # nested REGEX/REPLACE with constant patterns: the whole column in RE2 first
            for sub in _walk(expr):
                if sub is not expr and _vector_regex(sub) and id(sub) not in scalar.tables:
                    table = self._regex_table(sub)
                    if table is not None:
                        scalar.tables[id(sub)] = table
        if per_row:
            return self._per_row(expr, names, cols, scalar)
        if not names:
            try:
                t = scalar.eval(expr, {})
            except ExprError:
                return np.full(n, UNBOUND, dtype=np.int64)
            return np.full(n, int(ctx.intern([to_key(t)])[0]), dtype=np.int64)
        uniq, inv = unique_rows([cols[nm] for nm in names])
        terms = _decode(uniq, ctx)
        out_keys: list[str | None] = []
        meter = StringMeter()  # the memory budget sees the strings as they are built
        for j, row in enumerate(uniq.tolist()):
            if j % _BUDGET_EVERY == _BUDGET_EVERY - 1:
                ctx.check_budget()
            env = {nm: terms.get(i) for nm, i in zip(names, row, strict=False)}
            try:
                out_keys.append(meter.add(to_key(scalar.eval(expr, env))))
            except ExprError:
                out_keys.append(None)
        res = np.asarray(ctx.intern(out_keys), dtype=np.int64)
        return res[inv]

    def _per_row(self, expr, names, cols, scalar) -> np.ndarray:
        n = self.n
        ctx = self.ctx
        if names:
            mat = np.stack([cols[nm] for nm in names], axis=1)
            terms = _decode(mat, ctx)
        else:
            mat = np.zeros((n, 0), dtype=np.int64)
            terms = {}
        out_keys: list[str | None] = []
        meter = StringMeter()
        for i, row in enumerate(mat.tolist()):
            if i % _BUDGET_EVERY == _BUDGET_EVERY - 1:
                ctx.check_budget()
            env = {nm: terms.get(x) for nm, x in zip(names, row, strict=False)}
            scalar.row = i if self.rows is None else int(self.rows[i])
            try:
                out_keys.append(meter.add(to_key(scalar.eval(expr, env))))
            except ExprError:
                out_keys.append(None)
        return np.asarray(ctx.intern(out_keys), dtype=np.int64)


def unique_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of equally long int64 columns: (unique rows as an
    (m, k) array, inverse index of each row)."""
    if len(columns) == 1:
        uniq, inv = distinct_inverse(columns[0])
        return uniq.reshape(-1, 1), inv.reshape(-1)
    code = None
    size = 1
    for c in columns:
        u, inv = distinct_inverse(c)
        inv = inv.reshape(-1).astype(np.int64)
        if code is None:
            code, size = inv, len(u)
            continue
        if size * len(u) >= 2**62:
            mat = np.stack(columns, axis=1)
            uniq, inv = np.unique(mat, axis=0, return_inverse=True)
            return uniq, inv.reshape(-1)
        code = code * len(u) + inv
        size *= len(u)
        code_u, code = distinct_inverse(code)
        code = code.reshape(-1)
        size = len(code_u)
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    uniq = np.stack([c[first] for c in columns], axis=1)
    return uniq, inv.reshape(-1)


class _IdsExpr:
    """Wraps an already evaluated id column as a pseudo variable."""

    NAME = "\x00in-left"

    def __init__(self, ids):
        self.ids = ids
        self.var = Var(self.NAME)


def _decode(mat: np.ndarray, ctx) -> dict[int, Term]:
    ids = unique(mat.reshape(-1))
    ids = ids[ids >= 0]
    if len(ids) == 0:
        return {}
    return dict(zip(ids.tolist(), (from_key(k) for k in ctx.keys(ids)), strict=False))


# ---------------------------------------------------------------- scalar evaluator


class _Scalar:
    """Evaluates an expression on decoded terms for one solution."""

    def __init__(self, ctx, exists_names: dict):
        self.ctx = ctx
        self.exists_names = exists_names
        self.tables: dict[int, dict] = {}  # id(REGEX/REPLACE call) -> (lexical, tag) -> result
        self.row = 0
        self._consts: dict[str, Term] = {}

    def eval(self, expr, env: dict) -> Term:
        if isinstance(expr, Var):
            t = env.get(expr.name)
            if t is None:
                raise ERR.with_traceback(None)
            return t
        if isinstance(expr, Const):
            t = self._consts.get(expr.key)
            if t is None:
                t = self._consts[expr.key] = from_key(expr.key)
            return t
        if isinstance(expr, Call):
            op = expr.op
            if self.tables and op in ("REGEX", "REPLACE"):
                table = self.tables.get(id(expr))  # evaluated over the column beforehand
                if table is not None:
                    t = self.eval(expr.args[0], env)
                    if isinstance(t, Literal):
                        r = table.get((t.lexical, t.lang or ""))
                        if r is not None:
                            return r
            special = _SPECIAL.get(op)
            if special is not None:
                return special(self, expr.args, env)
            fn = _FUNCS.get(op)
            if fn is None:
                raise ERR.with_traceback(None)
            args = [self.eval(a, env) for a in expr.args]
            return fn(self, *args)
        if isinstance(expr, FunctionCall):
            args = [self.eval(a, env) for a in expr.args]
            ext = EXTENSION_FUNCTIONS.get(expr.iri)
            if ext is not None:  # a registered extension (C-SPARQL's f:timestamp) sees the query context
                return ext(self.ctx, args)
            return call_function(expr.iri, args)
        if isinstance(expr, Exists):
            name = self.exists_names.get(expr)
            t = env.get(name) if name is not None else None
            if t is None:
                raise ERR.with_traceback(None)
            return t
        raise ERR.with_traceback(None)

    def ebv(self, expr, env) -> bool:
        t = self.eval(expr, env)
        if t is V.TRUE:  # (the logical operators' and comparisons' results)
            return True
        if t is V.FALSE:
            return False
        return V.ebv(t)


# special forms: lazy / error-tolerant argument evaluation


def _try_ebv(s: _Scalar, e, env) -> bool | None:
    try:
        return s.ebv(e, env)
    except ExprError:
        return None


def _sp_or(s, args, env):
    a = _try_ebv(s, args[0], env)
    if a is True:
        return V.TRUE
    b = _try_ebv(s, args[1], env)
    if b is True:
        return V.TRUE
    if a is None or b is None:
        raise ERR.with_traceback(None)
    return V.FALSE


def _sp_and(s, args, env):
    a = _try_ebv(s, args[0], env)
    if a is False:
        return V.FALSE
    b = _try_ebv(s, args[1], env)
    if b is False:
        return V.FALSE
    if a is None or b is None:
        raise ERR.with_traceback(None)
    return V.TRUE


def _sp_not(s, args, env):
    return V.FALSE if s.ebv(args[0], env) else V.TRUE


def _sp_bound(s, args, env):
    a = args[0]
    if isinstance(a, Var):
        return V.bool_literal(env.get(a.name) is not None)
    try:
        s.eval(a, env)
        return V.TRUE
    except ExprError:
        return V.FALSE


def _sp_if(s, args, env):
    if len(args) != 3:
        raise ERR.with_traceback(None)
    return s.eval(args[1] if s.ebv(args[0], env) else args[2], env)


def _sp_coalesce(s, args, env):
    for a in args:
        try:
            return s.eval(a, env)
        except ExprError:
            continue
    raise ERR.with_traceback(None)


def _sp_in(s, args, env):
    if len(args) == 1:
        return V.FALSE
    x = s.eval(args[0], env)
    err = False
    for item in args[1:]:
        try:
            if V.term_equal(x, s.eval(item, env)):
                return V.TRUE
        except ExprError:
            err = True
    if err:
        raise ERR.with_traceback(None)
    return V.FALSE


def _sp_not_in(s, args, env):
    return V.bool_literal(not V.ebv(_sp_in(s, args, env)))


#: numeric value (or None) of numeric literals, by term: a FILTER's constant and a window's
#: values are compared again row after row (V.compare parses each side twice a comparison)
_NUMS: dict = {}
_NUMS_MAX = 65_536
_CMP_NUMERIC_TYPES = frozenset((XSD_INTEGER, XSD_DECIMAL, XSD_DOUBLE, XSD_FLOAT))


def _num_term(t) -> Num | None:
    n = _NUMS.get(t, _NUMS)
    if n is _NUMS:
        if len(_NUMS) >= _NUMS_MAX:
            _NUMS.clear()
        n = _NUMS[t] = V.numeric_of(t)
    return n


def _sp_cmp(op):
    order = op not in ("=", "!=")

    def f(s, args, env):
        a, b = s.eval(args[0], env), s.eval(args[1], env)
        # two valid numbers of the common types: V.compare's numeric case with the values
        # parsed once per term (equal terms, invalid forms and the rest: V.compare itself)
        if (isinstance(a, Literal) and isinstance(b, Literal) and a.datatype in _CMP_NUMERIC_TYPES
                and b.datatype in _CMP_NUMERIC_TYPES and a != b):
            na, nb = _num_term(a), _num_term(b)
            if na is not None and nb is not None:
                r = V._num_cmp(na, nb)
                if r is None:  # NaN: every comparison false, = too; != true
                    return V.TRUE if op == "!=" else V.FALSE
                if order:
                    got = r < 0 if op == "<" else r > 0 if op == ">" else r <= 0 if op == "<=" else r >= 0
                else:
                    got = (r == 0) == (op == "=")
                return V.TRUE if got else V.FALSE
        return V.TRUE if V.compare(op, a, b) else V.FALSE

    return f


_SPECIAL = {
    "||": _sp_or, "&&": _sp_and, "!": _sp_not, "BOUND": _sp_bound, "IF": _sp_if,
    "COALESCE": _sp_coalesce, "IN": _sp_in, "NOT IN": _sp_not_in,
}
for _op in ("=", "!=", "<", ">", "<=", ">="):
    _SPECIAL[_op] = _sp_cmp(_op)


# ---------------------------------------------------------------- argument helpers


def _num(t: Term) -> Num:
    n = V.numeric_of(t)
    if n is None:
        raise ERR.with_traceback(None)
    return n


def _string_lit(t: Term) -> Literal:
    """A string literal argument (simple, xsd:string or language-tagged)."""
    if isinstance(t, Literal) and (t.datatype == XSD_STRING or t.datatype == RDF_LANGSTRING):
        return t
    raise ERR.with_traceback(None)


def _simple(t: Term) -> str:
    if isinstance(t, Literal) and t.datatype == XSD_STRING:
        return t.lexical
    raise ERR.with_traceback(None)


def _compatible(a: Literal, b: Literal) -> None:
    """Argument compatibility rules of 17.4.3.1.1."""
    if b.datatype == XSD_STRING:
        return
    if a.lang is not None and b.lang is not None and a.lang.lower() == b.lang.lower():
        return
    raise ERR.with_traceback(None)


def _like(a: Literal, lexical: str) -> Literal:
    """A string literal of the same kind (language tag) as ``a``."""
    if a.lang is not None:
        return Literal(lexical, RDF_LANGSTRING, a.lang)
    return Literal(lexical)


# ---------------------------------------------------------------- built-ins


def _f_str(s, t):
    if isinstance(t, IRI):
        return Literal(t.value)
    if isinstance(t, Literal):
        return Literal(t.lexical)
    raise ERR.with_traceback(None)


def _f_lang(s, t):
    if isinstance(t, Literal):
        return Literal(t.lang or "")
    raise ERR.with_traceback(None)


def _f_langmatches(s, tag, rng):
    tag = _simple_or_lang_free(tag)
    rng = _simple_or_lang_free(rng)
    if rng == "*":
        return V.bool_literal(tag != "")
    tl, rl = tag.lower(), rng.lower()
    return V.bool_literal(tl == rl or (rl != "" and tl.startswith(rl + "-")))


def _simple_or_lang_free(t) -> str:
    if isinstance(t, Literal) and t.datatype == XSD_STRING:
        return t.lexical
    raise ERR.with_traceback(None)


def _f_datatype(s, t):
    if isinstance(t, Literal):
        return IRI(t.datatype)
    raise ERR.with_traceback(None)


_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")


def _f_iri(s, t):
    if isinstance(t, IRI):
        return t
    if isinstance(t, Literal) and t.datatype == XSD_STRING:
        v = t.lexical
        if _SCHEME_RE.match(v) or not s.ctx.base:
            return IRI(v)
        return IRI(resolve_iri(s.ctx.base, v))
    raise ERR.with_traceback(None)


def _f_bnode(s, *args):
    st = _state(s.ctx)
    if not args:
        st.counter += 1
        return BNode(f"q{st.salt}n{st.counter}")
    lex = _simple(args[0])
    h = hashlib.sha1(lex.encode("utf-8")).hexdigest()[:16]
    return BNode(f"q{st.salt}r{s.row}s{h}")


def _f_rand(s):
    return Literal(V.format_double(random.random()), XSD_DOUBLE)


def _f_abs(s, t):
    return V.num_literal(V.num_abs(_num(t)))


def _f_ceil(s, t):
    return V.num_literal(V.num_ceil(_num(t)), integral_decimal=True)


def _f_floor(s, t):
    return V.num_literal(V.num_floor(_num(t)), integral_decimal=True)


def _f_round(s, t):
    return V.num_literal(V.num_round(_num(t)), integral_decimal=True)


def _f_concat(s, *args):
    lits = [_string_lit(a) for a in args]
    text = "".join(x.lexical for x in lits)
    langs = {x.lang.lower() if x.lang else None for x in lits}
    if len(langs) == 1:
        (lang,) = langs
        if lang is not None:
            return Literal(text, RDF_LANGSTRING, lang)
    return Literal(text)


def _f_strlen(s, t):
    return V.integer_literal(len(_string_lit(t).lexical))


def _f_ucase(s, t):
    a = _string_lit(t)
    return _like(a, a.lexical.upper())


def _f_lcase(s, t):
    a = _string_lit(t)
    return _like(a, a.lexical.lower())


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")


def _f_encode(s, t):
    a = _string_lit(t)
    out = []
    for byte in a.lexical.encode("utf-8"):
        out.append(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}")
    return Literal("".join(out))


def _str_pair(a, b) -> tuple[Literal, Literal]:
    x, y = _string_lit(a), _string_lit(b)
    _compatible(x, y)
    return x, y


def _f_contains(s, a, b):
    x, y = _str_pair(a, b)
    return V.bool_literal(y.lexical in x.lexical)


def _f_strstarts(s, a, b):
    x, y = _str_pair(a, b)
    return V.bool_literal(x.lexical.startswith(y.lexical))


def _f_strends(s, a, b):
    x, y = _str_pair(a, b)
    return V.bool_literal(x.lexical.endswith(y.lexical))


def _f_strbefore(s, a, b):
    x, y = _str_pair(a, b)
    i = x.lexical.find(y.lexical)
    if i < 0:
        return Literal("")
    return _like(x, x.lexical[:i])


def _f_strafter(s, a, b):
    x, y = _str_pair(a, b)
    i = x.lexical.find(y.lexical)
    if i < 0:
        return Literal("")
    return _like(x, x.lexical[i + len(y.lexical):])


def _dt(t) -> V.DateTime:
    if isinstance(t, Literal) and t.datatype == XSD_DATETIME:
        d = V.parse_datetime(t.lexical)
        if d is not None:
            return d
    raise ERR.with_traceback(None)


def _date_or_dt(t) -> V.DateTime:
    d = V.datetime_of(t)
    if d is None:
        raise ERR.with_traceback(None)
    return d


def _f_year(s, t):
    return V.integer_literal(_date_or_dt(t).year)


def _f_month(s, t):
    return V.integer_literal(_date_or_dt(t).month)


def _f_day(s, t):
    return V.integer_literal(_date_or_dt(t).day)


def _f_hours(s, t):
    return V.integer_literal(_dt(t).hour)


def _f_minutes(s, t):
    return V.integer_literal(_dt(t).minute)


def _f_seconds(s, t):
    return Literal(V.format_decimal_integral(_dt(t).second), XSD_DECIMAL)


def _f_timezone(s, t):
    d = _date_or_dt(t)
    if d.tz is None:
        raise ERR.with_traceback(None)
    return Literal(V.format_timezone_duration(d.tz), XSD + "dayTimeDuration")


def _f_tz(s, t):
    return Literal(_date_or_dt(t).tz_lex)


def format_now(now) -> str:
    """xsd:dateTime lexical of a datetime (``Z`` for UTC)."""
    txt = now.isoformat()
    if txt.endswith("+00:00"):
        txt = txt[:-6] + "Z"
    return txt


def _f_now(s):
    return Literal(format_now(s.ctx.now), XSD_DATETIME)


def _f_uuid(s):
    return IRI("urn:uuid:" + str(uuid.uuid4()))


def _f_struuid(s):
    return Literal(str(uuid.uuid4()))


def _hash(algo):
    def f(s, t):
        if not (isinstance(t, Literal) and t.datatype == XSD_STRING):
            raise ERR.with_traceback(None)
        return Literal(hashlib.new(algo, t.lexical.encode("utf-8")).hexdigest())

    return f


def _f_strlang(s, t, lang):
    lex = _simple(t)
    tag = _simple(lang)
    if not re.fullmatch(r"[A-Za-z]+(?:-[A-Za-z0-9]+)*", tag):
        raise ERR.with_traceback(None)
    return Literal(lex, RDF_LANGSTRING, tag.lower())


def _f_strdt(s, t, dt):
    lex = _simple(t)
    if not isinstance(dt, IRI) or dt.value == RDF_LANGSTRING:
        raise ERR.with_traceback(None)
    return Literal(lex, dt.value)


def _f_sameterm(s, a, b):
    return V.bool_literal(a == b)


def _f_isiri(s, t):
    return V.bool_literal(isinstance(t, IRI))


def _f_isblank(s, t):
    return V.bool_literal(isinstance(t, BNode))


def _f_isliteral(s, t):
    return V.bool_literal(isinstance(t, Literal))


def _f_isnumeric(s, t):
    return V.bool_literal(V.numeric_of(t) is not None)


def _f_regex(s, text, pattern, flags=None):
    x = _string_lit(text)
    rx = xpath_regex(_simple(pattern), "" if flags is None else _simple(flags))
    return V.bool_literal(rx.search(x.lexical))


def _f_replace(s, text, pattern, repl, flags=None):
    x = _string_lit(text)
    rx = xpath_regex(_simple(pattern), "" if flags is None else _simple(flags))
    r = _simple(repl)
    if rx.search(""):
        raise ERR.with_traceback(None)  # pattern matching the empty string (FORX0003)
    parts = _replacement_parts(r, rx.groups, rx.literal)
    lex = x.lexical
    if len(lex) > _RX_LONG_TEXT:
        rewrite = _rewrite(r, rx.groups, rx.literal)
        if rewrite is not None:  # one long text: RE2's own loop, not one Python call per match
            try:
                arr = pa.array([lex], pa.large_string())
                return _like(x, pc.replace_substring_regex(arr, pattern=rx.text, replacement=rewrite)[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeEncodeError):
                pass
    ctx = s.ctx
    count = 0

    def each(m):
        # one text can hold millions of matches: keep the deadline in force
        nonlocal count
        count += 1
        if count % _BUDGET_EVERY == 0:
            ctx.check_budget()
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts)

    try:
        return _like(x, rx.rx.sub(each, lex))
    except UnicodeEncodeError:
        raise ERR.with_traceback(None) from None


_RX_LONG_TEXT = 4096
_RX_META = frozenset("\\^$.|?*+()[]{}")  # a pattern without these (and no flag but s / m) is a literal text


def _replacement_parts(r: str, ngroups: int, literal: bool) -> list[str | int]:
    r"""An XPath replacement string as literal pieces and group numbers: ``$N``
    is group N (the longest digit run naming an existing group; a group past
    the last one is empty), ``\$`` and ``\\`` are ``$`` and ``\``; any other
    use of them is an error (FORX0004)."""
    if literal:
        return [r]
    parts: list[str | int] = []
    i = 0
    buf: list[str] = []
    while i < len(r):
        c = r[i]
        if c == "\\":
            if i + 1 < len(r) and r[i + 1] in "\\$":
                buf.append(r[i + 1])
                i += 2
                continue
            raise ERR.with_traceback(None)
        if c == "$":
            j = i + 1
            if j >= len(r) or not r[j].isdigit():
                raise ERR.with_traceback(None)
            num = int(r[j])
            j += 1
            while j < len(r) and r[j].isdigit() and num * 10 + int(r[j]) <= ngroups:
                num = num * 10 + int(r[j])
                j += 1
            if buf:
                parts.append("".join(buf))
                buf = []
            if num <= ngroups:
                parts.append(num)
            i = j
            continue
        buf.append(c)
        i += 1
    if buf:
        parts.append("".join(buf))
    return parts


def _rewrite(r: str, ngroups: int, literal: bool) -> str | None:
    r"""The replacement as an RE2 rewrite string (``\N`` groups, ``\\`` a
    backslash); None when it names a group past 9, which RE2 cannot."""
    out = []
    for p in _replacement_parts(r, ngroups, literal):
        if isinstance(p, int):
            if p > 9:
                return None
            out.append("\\" + str(p))
        else:
            out.append(p.replace("\\", "\\\\"))
    return "".join(out)


def _f_substr(s, text, start, length=None):
    x = _string_lit(text)
    st = _xpath_round_float(V.to_double(_num(start).v))
    chars = x.lexical
    if length is None:
        if math.isnan(st):
            return _like(x, "")
        first = max(st, 1.0)
        return _like(x, chars[int(first) - 1:] if first != math.inf else "")
    ln = _xpath_round_float(V.to_double(_num(length).v))
    end = st + ln  # positions p with st <= p < end
    if math.isnan(end) or math.isnan(st):
        return _like(x, "")
    first = max(st, 1.0)
    if end == math.inf:
        return _like(x, chars[int(first) - 1:] if first != math.inf else "")
    if end <= first:
        return _like(x, "")
    return _like(x, chars[int(first) - 1:int(end) - 1])


def _xpath_round_float(v: float) -> float:
    if math.isnan(v) or math.isinf(v):
        return v
    return float(math.floor(v + 0.5))


def _arith(op):
    def f(s, a, b):
        return V.num_literal(V.numeric_op(op, _num(a), _num(b)))

    return f


def _f_neg(s, t):
    return V.num_literal(V.num_neg(_num(t)))


def _f_pos(s, t):
    return V.num_literal(_num(t))


_FUNCS = {
    "STR": _f_str, "LANG": _f_lang, "LANGMATCHES": _f_langmatches, "DATATYPE": _f_datatype,
    "IRI": _f_iri, "URI": _f_iri, "BNODE": _f_bnode, "RAND": _f_rand, "ABS": _f_abs, "CEIL": _f_ceil,
    "FLOOR": _f_floor, "ROUND": _f_round, "CONCAT": _f_concat, "STRLEN": _f_strlen,
    "UCASE": _f_ucase, "LCASE": _f_lcase, "ENCODE_FOR_URI": _f_encode, "CONTAINS": _f_contains,
    "STRSTARTS": _f_strstarts, "STRENDS": _f_strends, "STRBEFORE": _f_strbefore,
    "STRAFTER": _f_strafter, "YEAR": _f_year, "MONTH": _f_month, "DAY": _f_day,
    "HOURS": _f_hours, "MINUTES": _f_minutes, "SECONDS": _f_seconds, "TIMEZONE": _f_timezone,
    "TZ": _f_tz, "NOW": _f_now, "UUID": _f_uuid, "STRUUID": _f_struuid, "MD5": _hash("md5"),
    "SHA1": _hash("sha1"), "SHA256": _hash("sha256"), "SHA384": _hash("sha384"),
    "SHA512": _hash("sha512"), "STRLANG": _f_strlang, "STRDT": _f_strdt,
    "SAMETERM": _f_sameterm, "ISIRI": _f_isiri, "ISURI": _f_isiri, "ISBLANK": _f_isblank,
    "ISLITERAL": _f_isliteral, "ISNUMERIC": _f_isnumeric, "REGEX": _f_regex,
    "SUBSTR": _f_substr, "REPLACE": _f_replace, "+": _arith("+"), "-": _arith("-"),
    "*": _arith("*"), "/": _arith("/"), "NEG": _f_neg, "POS": _f_pos,
}


def _checked(fn, lo: int, hi: int):
    def f(s, *args):
        if not lo <= len(args) <= hi:
            raise ERR.with_traceback(None)
        return fn(s, *args)

    return f


_ARITY = {
    "BNODE": (0, 1), "RAND": (0, 0), "NOW": (0, 0), "UUID": (0, 0), "STRUUID": (0, 0),
    "CONCAT": (0, 10**9), "REGEX": (2, 3), "SUBSTR": (2, 3), "REPLACE": (3, 4),
    "LANGMATCHES": (2, 2), "CONTAINS": (2, 2), "STRSTARTS": (2, 2), "STRENDS": (2, 2),
    "STRBEFORE": (2, 2), "STRAFTER": (2, 2), "STRLANG": (2, 2), "STRDT": (2, 2),
    "SAMETERM": (2, 2), "+": (2, 2), "-": (2, 2), "*": (2, 2), "/": (2, 2),
}
for _name, _fn in list(_FUNCS.items()):
    _lo, _hi = _ARITY.get(_name, (1, 1))
    _FUNCS[_name] = _checked(_fn, _lo, _hi)


# ---------------------------------------------------------------- XSD casts


def _cast_string(t: Term) -> Literal:
    if isinstance(t, IRI):
        return Literal(t.value)
    if not isinstance(t, Literal):
        raise ERR.with_traceback(None)
    dt = t.datatype
    if dt in V.NUMERIC_TYPES:
        n = V.parse_numeric(t.lexical, dt)
        if n is None:
            raise ERR.with_traceback(None)
        return Literal(V.string_cast_of_num(n))
    if dt == XSD_BOOLEAN:
        b = V.parse_boolean(t.lexical)
        if b is None:
            raise ERR.with_traceback(None)
        return Literal("true" if b else "false")
    return Literal(t.lexical)


def _cast_source(t: Term) -> tuple[str, Literal]:
    """('string'|'numeric'|'boolean'|'datetime'|'date'|'other', literal)."""
    if not isinstance(t, Literal) or t.datatype == RDF_LANGSTRING:
        raise ERR.with_traceback(None)
    dt = t.datatype
    if dt == XSD_STRING:
        return "string", t
    if dt in V.NUMERIC_TYPES:
        return "numeric", t
    if dt == XSD_BOOLEAN:
        return "boolean", t
    if dt == XSD_DATETIME:
        return "datetime", t
    if dt == XSD_DATE:
        return "date", t
    return "other", t


def _cast_integer_value(t: Term) -> int:
    kind, lit = _cast_source(t)
    if kind == "string":
        v = V.parse_integer(lit.lexical)
        if v is None:
            raise ERR.with_traceback(None)
        return v
    if kind == "boolean":
        b = V.parse_boolean(lit.lexical)
        if b is None:
            raise ERR.with_traceback(None)
        return int(b)
    if kind == "numeric":
        n = _num(lit)
        if n.rank == V.INTEGER:
            return n.v
        if n.rank == V.DECIMAL:
            return V.checked_int(int(n.v))
        if math.isnan(n.v) or math.isinf(n.v):
            raise ERR.with_traceback(None)
        return V.checked_int(int(n.v))
    raise ERR.with_traceback(None)


def _cast_integer_type(dt: str):
    lo, hi = V.INTEGER_TYPES[dt]

    def f(t):
        v = _cast_integer_value(t)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ERR.with_traceback(None)
        return Literal(str(v), dt)

    return f


def _cast_decimal(t: Term) -> Literal:
    kind, lit = _cast_source(t)
    if kind == "string":
        d = V.parse_decimal(lit.lexical)
        if d is None:
            raise ERR.with_traceback(None)
    elif kind == "boolean":
        b = V.parse_boolean(lit.lexical)
        if b is None:
            raise ERR.with_traceback(None)
        d = Decimal(int(b))
    elif kind == "numeric":
        n = _num(lit)
        if n.rank in (V.FLOAT, V.DOUBLE):
            if math.isnan(n.v) or math.isinf(n.v):
                raise ERR.with_traceback(None)
            d = Decimal(repr(n.v)) if n.rank == V.DOUBLE else Decimal(np.format_float_positional(np.float32(n.v), unique=True))
        else:
            d = Decimal(n.v)
    else:
        raise ERR.with_traceback(None)
    return Literal(V.format_decimal(d), XSD_DECIMAL)


def _cast_floating(rank: int):
    dt = V.RANK_DATATYPE[rank]

    def f(t):
        kind, lit = _cast_source(t)
        if kind == "string":
            x = V.parse_double(lit.lexical)
            if x is None:
                raise ERR.with_traceback(None)
        elif kind == "boolean":
            b = V.parse_boolean(lit.lexical)
            if b is None:
                raise ERR.with_traceback(None)
            x = float(b)
        elif kind == "numeric":
            x = V.to_double(_num(lit).v)
        else:
            raise ERR.with_traceback(None)
        if rank == V.FLOAT:
            return Literal(V.format_float(V.to_float32(x)), dt)
        return Literal(V.format_double(x), dt)

    return f


def _cast_boolean(t: Term) -> Literal:
    kind, lit = _cast_source(t)
    if kind in ("string", "boolean"):
        b = V.parse_boolean(lit.lexical)
        if b is None:
            raise ERR.with_traceback(None)
        return V.bool_literal(b)
    if kind == "numeric":
        n = _num(lit)
        return V.bool_literal(not (n.v == 0 or n.v != n.v))
    raise ERR.with_traceback(None)


def _cast_datetime(t: Term) -> Literal:
    kind, lit = _cast_source(t)
    if kind in ("string", "datetime"):
        if V.parse_datetime(lit.lexical) is None:
            raise ERR.with_traceback(None)
        return Literal(lit.lexical.strip(), XSD_DATETIME)
    if kind == "date":
        d = V.parse_date(lit.lexical)
        if d is None:
            raise ERR.with_traceback(None)
        return Literal(f"{_year(d.year)}-{d.month:02d}-{d.day:02d}T00:00:00{d.tz_lex}", XSD_DATETIME)
    raise ERR.with_traceback(None)


def _year(y: int) -> str:
    return f"-{-y:04d}" if y < 0 else f"{y:04d}"


def _cast_date(t: Term) -> Literal:
    kind, lit = _cast_source(t)
    if kind in ("string", "date"):
        if V.parse_date(lit.lexical) is None:
            raise ERR.with_traceback(None)
        return Literal(lit.lexical.strip(), XSD_DATE)
    if kind == "datetime":
        d = V.parse_datetime(lit.lexical)
        if d is None:
            raise ERR.with_traceback(None)
        return Literal(f"{_year(d.year)}-{d.month:02d}-{d.day:02d}{d.tz_lex}", XSD_DATE)
    raise ERR.with_traceback(None)


_CASTS = {
    XSD_STRING: _cast_string, XSD_DECIMAL: _cast_decimal, XSD_FLOAT: _cast_floating(V.FLOAT),
    XSD_DOUBLE: _cast_floating(V.DOUBLE), XSD_BOOLEAN: _cast_boolean, XSD_DATETIME: _cast_datetime,
    XSD_DATE: _cast_date,
}
for _dt_iri in V.INTEGER_TYPES:
    _CASTS[_dt_iri] = _cast_integer_type(_dt_iri)


#: extension functions by IRI: ``fn(ctx, args: list[Term]) -> Term`` (raise ExprError for an
#: error). Registered by the modules that define them (``engine.stream.syntax_eval``: C-SPARQL's
#: ``f:timestamp``, which reads the element times of a continuous query's windows from ``ctx``).
EXTENSION_FUNCTIONS: dict = {}


#: the same functions over id columns: ``fn(ctx, [int64 id arrays]) -> int64 ids`` (UNBOUND = error)
VECTOR_EXTENSIONS: dict = {}
_ARITY: dict[str, int] = {}


def register_extension(iri: str, fn, arity: int, vector=None) -> None:
    """Make ``fn`` the function called by ``<iri>(...)`` with ``arity`` arguments (``vector``:
    the same over whole id columns, used where the expression is the call itself)."""
    EXTENSION_FUNCTIONS[iri] = fn
    _ARITY[iri] = arity
    if vector is not None:
        VECTOR_EXTENSIONS[iri] = vector


def function_arity(iri: str) -> int | None:
    """The number of arguments of a function called by IRI (XSD casts: 1; registered
    extensions: theirs), None for an unknown function (which evaluates to an error)."""
    if iri in _CASTS:
        return 1
    return _ARITY.get(iri)


def call_function(iri: str, args: list[Term]) -> Term:
    """A function called by IRI: the XSD constructor casts; anything else is
    an unknown function (error)."""
    cast = _CASTS.get(iri)
    if cast is None or len(args) != 1:
        raise ERR.with_traceback(None)
    return cast(args[0])


# ---------------------------------------------------------------- XPath regex
#
# User patterns run on RE2 (google-re2), whose matching time is linear in the
# text: a backtracking engine (Python's re) can run for ever on patterns such
# as ^(a|aa)+$ while holding the GIL, which no deadline can interrupt. XPath
# syntax is translated to RE2 syntax here; XPath features RE2 cannot do are an
# UnsupportedError (HTTP 400 naming the feature), invalid patterns an
# expression error (FORX0002 -> unbound / FILTER false).

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_MAX_REPEAT = 1000  # RE2's largest repetition count
_MAX_CP = 0x10FFFF


class _Regex:
    """A compiled XPath pattern: the RE2 object, its text, group count, q flag."""

    __slots__ = ("rx", "text", "groups", "literal")

    def __init__(self, rx, text: str, literal: bool):
        self.rx = rx
        self.text = text  # the RE2 pattern (flags inline), also for Arrow's RE2 kernels
        self.groups = rx.groups
        self.literal = literal

    def search(self, text: str) -> bool:
        try:
            return self.rx.search(text) is not None
        except UnicodeEncodeError:  # a lone surrogate cannot be matched as UTF-8
            raise ERR.with_traceback(None) from None


@lru_cache(maxsize=64)
def xpath_regex(pattern: str, flags: str) -> _Regex:
    """Compile an XPath/XSD regular expression with XPath flags (s m i x q)
    for RE2; raises ExprError on an invalid pattern or flag, UnsupportedError
    on a valid XPath feature RE2 cannot evaluate."""
    if any(c not in "smixq" for c in flags):
        raise ERR.with_traceback(None)
    if "q" in flags:
        body = re2.escape(pattern)
    else:
        body = _translate_regex(pattern, "x" in flags, "m" in flags, "s" in flags)
    mode = "".join(c for c in "ims" if c in flags)
    text = ("(?" + mode + ")" if mode else "") + body
    try:
        rx = re2.compile(text, _RE2_OPTIONS)
    except re2.error as e:
        msg = str(e)
        if "repetition size" in msg:
            raise UnsupportedError(
                "regular expression: repetition counts above 1000 (nested counts multiply) are not "
                "supported by the linear-time regex engine") from None
        if "too large" in msg or "too big" in msg:
            raise UnsupportedError("regular expression too large for the regex engine") from None
        raise ERR.with_traceback(None) from None
    except UnicodeEncodeError:
        raise ERR.with_traceback(None) from None
    return _Regex(rx, text, "q" in flags)


_SINGLE_ESC = frozenset("nrt\\|.-^?*+{}()[]$")
_QUANT_RE = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")


def _translate_regex(p: str, strip_ws: bool, multiline: bool, dotall: bool) -> str:
    out: list[str] = []
    i = 0
    n = len(p)
    in_class = False
    class_open = 0  # index in p just after '[' / '[^' of the open class
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                raise ERR.with_traceback(None)
            d = p[i + 1]
            if d in "pP":
                if i + 2 >= n or p[i + 2] != "{":
                    raise ERR.with_traceback(None)
                j = p.find("}", i + 3)
                if j < 0:
                    raise ERR.with_traceback(None)
                out.append(_class_text(_property_ranges(p[i + 3:j]), d == "P", in_class))
                i = j + 1
                continue
            if d in _CLASS_ESC:
                out.append(_class_text(_CLASS_ESC[d.lower()](), d.isupper(), in_class))
                i += 2
                continue
            if d in "123456789" and not in_class:
                raise UnsupportedError(
                    f"regular expression: back-references (\\{d}) are not supported by the "
                    "linear-time regex engine")
            if d not in _SINGLE_ESC:
                raise ERR.with_traceback(None)  # not an XPath escape
            out.append("\\" + d)
            i += 2
            continue
        if in_class:
            if c == "[":
                if i > class_open and p[i - 1] == "-":
                    raise UnsupportedError(
                        "regular expression: character class subtraction ([a-z-[aeiou]]) is not supported")
                raise ERR.with_traceback(None)
            if c == "]":
                if i == class_open:
                    raise ERR.with_traceback(None)  # empty class
                in_class = False
            out.append(c)
            i += 1
            continue
        if strip_ws and c in " \t\n\r":
            i += 1
            continue
        if c == "[":
            in_class = True
            if p.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            class_open = i
            continue
        if c == "]":
            raise ERR.with_traceback(None)
        if c == ".":
            out.append("." if dotall else r"[^\n\r]")
        elif c == "$":
            out.append("$" if multiline else r"\z")
        elif c == "(":
            if p.startswith("(?", i) and not p.startswith("(?:", i):
                raise ERR.with_traceback(None)  # lookaround, inline flags ...: not XPath
            out.append(c)
        elif c == "{":
            m = _QUANT_RE.match(p, i)
            if m is None:
                raise ERR.with_traceback(None)
            lo, hi = int(m.group(1)), m.group(3)
            if lo > _MAX_REPEAT or (hi and int(hi) > _MAX_REPEAT):
                raise UnsupportedError(
                    "regular expression: repetition counts above 1000 are not supported by the "
                    "linear-time regex engine")
            if hi and int(hi) < lo:
                raise ERR.with_traceback(None)
            out.append(m.group())
            i = m.end()
            continue
        elif c == "}":
            raise ERR.with_traceback(None)
        else:
            out.append(c)
        i += 1
    if in_class:
        raise ERR.with_traceback(None)
    return "".join(out)


# ranges are sorted, disjoint lists of (first, last) code points

def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    nxt = 0
    for a, b in ranges:
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = b + 1
    if nxt <= _MAX_CP:
        out.append((nxt, _MAX_CP))
    return out


def _union(*sets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(r for s in sets for r in s):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _class_text(ranges: list[tuple[int, int]], negate: bool, inside: bool) -> str:
    """RE2 text of a class escape: a class body inside ``[...]``, else a class."""
    if negate:
        ranges = _complement(ranges)
    body = "".join(
        f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges)
    return body if inside else "[" + body + "]"


_CATEGORIES = frozenset(
    "L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp C Cc Cf Co Cn".split()
)


@lru_cache(maxsize=1)
def _all_categories() -> dict[str, list[tuple[int, int]]]:
    """Ranges of every Unicode general category (two-letter names), from
    ``unicodedata`` (the same tables as the rest of the engine), in one pass
    on first use so no query pays for more than one."""
    import unicodedata  # noqa: PLC0415 - only for \p{..} patterns

    out: dict[str, list[tuple[int, int]]] = {}
    cur, start = None, 0
    for cp in range(_MAX_CP + 1):
        cat = unicodedata.category(chr(cp))
        if cat != cur:
            if cur is not None:
                out.setdefault(cur, []).append((start, cp - 1))
            cur, start = cat, cp
    out.setdefault(cur, []).append((start, _MAX_CP))
    return out


@lru_cache(maxsize=64)
def _category_set(name: str) -> list[tuple[int, int]]:
    """Ranges of a Unicode general category (one- or two-letter name)."""
    cats = _all_categories()
    if len(name) == 2:
        return cats.get(name, [])
    return _union(*(r for c, r in cats.items() if c[0] == name))


def _property_ranges(name: str) -> list[tuple[int, int]]:
    if name in _CATEGORIES:
        return _category_set(name)
    if name.startswith("Is") and len(name) > 2:
        raise UnsupportedError(f"regular expression: Unicode block escapes (\\p{{{name}}}) are not supported")
    raise ERR.with_traceback(None)


@lru_cache(maxsize=1)
def _word_set() -> list[tuple[int, int]]:
    """XPath \\w: every character but punctuation, separators and others."""
    return _complement(_union(_category_set("P"), _category_set("Z"), _category_set("C")))


# XML 1.1 NameStartChar / NameChar (XPath \i and \c)
_NAME_START = [(0x3A, 0x3A), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A), (0xC0, 0xD6), (0xD8, 0xF6),
               (0xF8, 0x2FF), (0x370, 0x37D), (0x37F, 0x1FFF), (0x200C, 0x200D), (0x2070, 0x218F),
               (0x2C00, 0x2FEF), (0x3001, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFFD), (0x10000, 0xEFFFF)]
_NAME_CHAR = _union(_NAME_START, [(0x2D, 0x2E), (0x30, 0x39), (0xB7, 0xB7), (0x300, 0x36F), (0x203F, 0x2040)])
_CLASS_ESC = {
    "s": lambda: [(0x9, 0xA), (0xD, 0xD), (0x20, 0x20)],
    "d": lambda: _category_set("Nd"),
    "w": lambda: _word_set(),
    "i": lambda: _NAME_START,
    "c": lambda: _NAME_CHAR,
}
_CLASS_ESC.update({k.upper(): v for k, v in list(_CLASS_ESC.items())})


# the row-by-row evaluation of a few rows reads this module's scalar evaluator (imported last)
from engine.exec import rowwise as _rowwise  # noqa: E402
