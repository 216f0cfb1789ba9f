"""Expressions over a few rows, evaluated row by row on decoded terms.

Why: the vectorized evaluator (:mod:`engine.exec.functions`) pays a fixed cost per operator
and per call -- kinds, numeric values, ``distinct_inverse``, masks, a ``ctx.keys`` and an
``intern`` per sub-expression -- which is nothing on a large column and everything on a
small window's 5-60 rows: a FILTER such as ``DATATYPE(?lat) = xsd:double && isLiteral(?long)
&& ?lat >= 55.5`` made ~1,500 Python/numpy calls (~700 us) over 10 rows. Here the rows'
distinct ids are decoded once (one ``ctx.keys``), the expression is evaluated per distinct
tuple of the variables it reads by the executor's own scalar evaluator
(``functions._Scalar``, the per-value semantics the vectorized path falls back to: SPARQL's
type errors, EBV, numeric promotion and lexical forms, language tags, term equality), and
the results are interned in one call.

Left to the vectorized path (``None``): more than :data:`SMALL_ROWS` rows, and expressions
whose per-row value is not a function of the row -- RAND / BNODE / UUID / STRUUID (fresh
values, numbered labels) -- or that call an extension with a column form. EXISTS is
evaluated once for the whole table by the vectorized path (one ``ctx.exists`` call) and read
per row.

Per-term cache: the value of a context-free expression (no EXISTS, NOW, IRI/URI (the base),
extension functions, nor the nondeterministic ones) is a function of the terms it reads, and a
store id always names the same term (the dictionary is append-only), so results are kept per
(dictionary, expression text, row of store ids) across calls: a sliding window's rows come back
at every instant (RANGE 10s STEP 1s: each row is seen ten times) and are then a dict look-up,
with no decoding.
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from engine.exec import values as V
from engine.exec.context import LOCAL_BASE, StringMeter
from engine.exec.functions import (
    _NONDETERMINISTIC,
    EXTENSION_FUNCTIONS,
    VECTOR_EXTENSIONS,
    _Evaluator,
    _exists_of,
    _Scalar,
    _walk,
    vars_of,
)
from engine.exec.values import ExprError
from engine.sparql.algebra import Call, Exists, FunctionCall
from engine.terms import from_key, to_key

__all__ = ["SMALL_ROWS", "decode", "filter_rows", "ids_rows", "stats"]

#: rows up to which an expression is evaluated row by row (measured with
#: ``python -m bench.rowwise_probe``: see docs/BENCHMARKS.md "Expressions and aggregates over
#: a few rows, wave 2k (helper O)")
SMALL_ROWS = 64

#: how often each path answered, and the rows answered from the cache (tests read it)
stats = {"rows": 0, "vector": 0, "memo": 0}

UNBOUND = -1

# decoded terms by key, shared by all queries (a term is a function of its key alone and
# immutable): a window's terms come back at every instant
_TERMS: dict[str, object] = {}
_TERMS_MAX = 65_536

# per expression (by identity, kept alive next to its entry): (variables, EXISTS nodes, cache
# key or None) or None when the expression is left to the vectorized path
_PLANS: dict[int, tuple] = {}
_PLANS_MAX = 4096
#: operators whose value depends on more than their arguments' terms
_CONTEXTUAL = _NONDETERMINISTIC | {"NOW", "IRI", "URI"}

# per store dictionary: {(expression number, kind, row of ids): EBV or result key (None: error)}
_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MEMO_MAX = 65_536  # entries per dictionary (~150 bytes each)
_MEMO_KEY_CHARS = 128  # longer computed keys are not kept
_MEMO_EXPR_CHARS = 2048  # nor the rows of longer expressions (their texts are the key)
_MEMO_LOCK = threading.Lock()
_EXPR_NUMBERS: dict[str, int] = {}  # expression text -> number (the cache's key)
_NUMBERING = itertools.count()


def _plan(expr):
    ent = _PLANS.get(id(expr))
    if ent is not None and ent[0] is expr:
        return ent[1]
    plan = None
    ok = True
    pure = True
    for e in _walk(expr):
        if isinstance(e, Call) and e.op in _NONDETERMINISTIC:
            ok = False
            break
        if isinstance(e, FunctionCall) and e.iri in VECTOR_EXTENSIONS:
            ok = False
            break
        if (isinstance(e, Exists) or (isinstance(e, Call) and e.op in _CONTEXTUAL)
                or (isinstance(e, FunctionCall) and e.iri in EXTENSION_FUNCTIONS)):
            pure = False
    if ok:
        number = None
        text = repr(expr) if pure else ""
        if pure and len(text) <= _MEMO_EXPR_CHARS:
            number = _EXPR_NUMBERS.get(text)
            if number is None:
                if len(_EXPR_NUMBERS) >= _PLANS_MAX * 4:
                    _EXPR_NUMBERS.clear()  # (numbers are never reused: a plan keeps its own)
                number = _EXPR_NUMBERS[text] = next(_NUMBERING)
        plan = (vars_of(expr), list(dict.fromkeys(_exists_of(expr))), number)
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[id(expr)] = (expr, plan)
    return plan


def _memo_of(ctx) -> dict | None:
    d = getattr(ctx, "dictionary", None)
    if d is None:
        return None
    try:
        m = _MEMO.get(d)
        if m is None:
            with _MEMO_LOCK:
                m = _MEMO.setdefault(d, {})
    except TypeError:  # (a dictionary that cannot be weakly referenced: no cache)
        return None
    if len(m) >= _MEMO_MAX:
        m.clear()
    return m


def decode(ids: set, ctx) -> dict:
    """Decoded terms of the bound ids (one ``ctx.keys`` call; terms cached by key)."""
    if not ids:
        return {}
    idl = list(ids)
    keys = ctx.keys(np.asarray(idl, dtype=np.int64))
    cache = _TERMS
    out = {}
    for i, k in zip(idl, keys, strict=True):
        if k is None:
            continue
        t = cache.get(k)
        if t is None:
            if len(cache) >= _TERMS_MAX:
                cache.clear()
            t = cache[k] = from_key(k)
        out[i] = t
    return out


class _Rows:
    """The table's rows of the ids ``expr`` reads, the results the cache holds, and the
    scalar evaluation of the others."""

    __slots__ = ("names", "rows", "extra", "scalar", "memo", "number", "terms")

    def __init__(self, expr, plan, columns: dict, n: int, ctx):
        names, exists, number = plan
        self.names = names
        cols = []
        for nm in names:
            c = columns.get(nm)
            cols.append([UNBOUND] * n if c is None else np.asarray(c).tolist())
        exists_names: dict = {}
        self.extra: dict = {}
        if exists:
            ev = _Evaluator(columns, n, ctx)
            for k, ex in enumerate(exists):
                pseudo = f"\x00exists{k}"
                val, err = ev.bools(ex)
                exists_names[ex] = pseudo
                self.extra[pseudo] = [None if e else (V.TRUE if v else V.FALSE)
                                      for v, e in zip(val.tolist(), err.tolist(), strict=True)]
        self.rows = list(zip(*cols, strict=True)) if cols else [()] * n
        self.scalar = _Scalar(ctx, exists_names)
        self.memo = _memo_of(ctx) if number is not None else None
        self.number = number
        self.terms: dict = {}

    def decode_rows(self, todo: list[int], ctx) -> None:
        seen = set()
        rows = self.rows
        for r in todo:
            seen.update(rows[r])
        seen.discard(UNBOUND)
        self.terms = decode(seen, ctx)

    def env(self, r: int) -> dict:
        get = self.terms.get
        env = {nm: get(i) for nm, i in zip(self.names, self.rows[r], strict=True)}
        for nm, vals in self.extra.items():
            env[nm] = vals[r]
        return env


def _cacheable(row: tuple) -> bool:
    """A row of store ids (or unbound): the same terms whenever it comes back."""
    for i in row:
        if i >= LOCAL_BASE:
            return False
    return True


def filter_rows(expr, columns: dict, n: int, ctx) -> np.ndarray | None:
    """Effective boolean value of ``expr`` per row (errors: False), row by row; None: left
    to the vectorized path (see the module docstring)."""
    plan = _plan(expr) if n <= SMALL_ROWS else None
    if plan is None:
        stats["vector"] += 1
        return None
    stats["rows"] += 1
    t = _Rows(expr, plan, columns, n, ctx)
    out = [False] * n
    memo, number = t.memo, t.number
    local: dict = {}
    todo = []
    for r, row in enumerate(t.rows):
        if memo is not None:
            b = memo.get((number, True, row))
            if b is not None:
                out[r] = b
                continue
        todo.append(r)
    stats["memo"] += n - len(todo)
    if todo:
        t.decode_rows(todo, ctx)
        scalar = t.scalar
        for r in todo:
            row = t.rows[r]
            b = None if t.extra else local.get(row)
            if b is None:
                try:
                    b = scalar.ebv(expr, t.env(r))
                except ExprError:
                    b = False
                local[row] = b
                if memo is not None and _cacheable(row):
                    memo[(number, True, row)] = b
            out[r] = b
    return np.asarray(out, dtype=bool)


_MISS = object()


def ids_rows(expr, columns: dict, n: int, ctx) -> np.ndarray | None:
    """Ids of ``expr``'s value per row (UNBOUND on error), row by row; None: left to the
    vectorized path."""
    plan = _plan(expr) if n <= SMALL_ROWS else None
    if plan is None:
        stats["vector"] += 1
        return None
    stats["rows"] += 1
    t = _Rows(expr, plan, columns, n, ctx)
    keys: list = [None] * n
    memo, number = t.memo, t.number
    todo = []
    for r, row in enumerate(t.rows):
        if memo is not None:
            k = memo.get((number, False, row), _MISS)
            if k is not _MISS:
                keys[r] = k
                continue
        todo.append(r)
    stats["memo"] += n - len(todo)
    if todo:
        t.decode_rows(todo, ctx)
        scalar = t.scalar
        meter = StringMeter()  # the memory budget sees the strings as they are built
        local: dict = {}
        for r in todo:
            row = t.rows[r]
            if t.extra or row not in local:
                try:
                    k = meter.add(to_key(scalar.eval(expr, t.env(r))))
                except ExprError:
                    k = None
                local[row] = k
                if memo is not None and (k is None or len(k) <= _MEMO_KEY_CHARS) and _cacheable(row):
                    memo[(number, False, row)] = k
            keys[r] = local[row]
    return np.asarray(ctx.intern(keys), dtype=np.int64)
