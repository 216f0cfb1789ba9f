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
"""

from __future__ import annotations

import numpy as np

from engine.exec import values as V
from engine.exec.context import StringMeter
from engine.exec.functions import (
    _NONDETERMINISTIC,
    VECTOR_EXTENSIONS,
    _Evaluator,
    _exists_of,
    _Scalar,
    _walk,
    vars_of,
)
from engine.exec.values import ExprError
from engine.sparql.algebra import Call, FunctionCall
from engine.terms import from_key, to_key

__all__ = ["SMALL_ROWS", "decode", "filter_rows", "ids_rows", "stats"]

#: rows up to which an expression is evaluated row by row (measured: at 64 rows of one
#: to three variables the row-wise evaluation is still 2-10x below the vectorized one's
#: fixed cost; see docs/BENCHMARKS.md "Expressions over a few rows, wave 2k (helper O)")
SMALL_ROWS = 64

#: how often each path answered (tests read it to see the small path taken)
stats = {"rows": 0, "vector": 0}

UNBOUND = -1

# decoded terms by key, shared by all queries (a term is a function of its key alone and
# immutable): a window's terms come back at every instant
_TERMS: dict[str, object] = {}
_TERMS_MAX = 65_536

# per expression (by identity, kept alive next to its entry): (variables, EXISTS nodes) or
# None when the expression is left to the vectorized path
_PLANS: dict[int, tuple] = {}
_PLANS_MAX = 4096


def _plan(expr):
    ent = _PLANS.get(id(expr))
    if ent is not None and ent[0] is expr:
        return ent[1]
    plan = None
    ok = True
    for e in _walk(expr):
        if isinstance(e, Call) and e.op in _NONDETERMINISTIC:
            ok = False
            break
        if isinstance(e, FunctionCall) and e.iri in VECTOR_EXTENSIONS:
            ok = False
            break
    if ok:
        plan = (vars_of(expr), list(dict.fromkeys(_exists_of(expr))))
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[id(expr)] = (expr, plan)
    return plan


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


def _rows(expr, columns: dict, n: int, ctx):
    """(names, row tuples of ids, terms by id, scalar evaluator) for ``expr`` over the
    table, or None when it is left to the vectorized path."""
    if n > SMALL_ROWS:
        return None
    plan = _plan(expr)
    if plan is None:
        return None
    names, exists = plan
    cols = []
    for nm in names:
        c = columns.get(nm)
        cols.append([UNBOUND] * n if c is None else np.asarray(c).tolist())
    exists_names: dict = {}
    extra: dict = {}
    if exists:
        ev = _Evaluator(columns, n, ctx)
        for k, ex in enumerate(exists):
            pseudo = f"\x00exists{k}"
            val, err = ev.bools(ex)
            exists_names[ex] = pseudo
            extra[pseudo] = [None if e else (V.TRUE if v else V.FALSE)
                             for v, e in zip(val.tolist(), err.tolist(), strict=True)]
    rows = list(zip(*cols, strict=True)) if cols else [()] * n
    seen = set()
    for c in cols:
        seen.update(c)
    seen.discard(UNBOUND)
    terms = decode(seen, ctx)
    return names, rows, terms, _Scalar(ctx, exists_names), extra


def filter_rows(expr, columns: dict, n: int, ctx) -> np.ndarray | None:
    """Effective boolean value of ``expr`` per row (errors: False), row by row; None: left
    to the vectorized path (see the module docstring)."""
    got = _rows(expr, columns, n, ctx)
    if got is None:
        stats["vector"] += 1
        return None
    stats["rows"] += 1
    names, rows, terms, scalar, extra = got
    out = np.zeros(n, dtype=bool)
    memo: dict = {}
    get = terms.get
    for r, row in enumerate(rows):
        b = None if extra else memo.get(row)
        if b is None:
            env = {nm: get(i) for nm, i in zip(names, row, strict=True)}
            for nm, vals in extra.items():
                env[nm] = vals[r]
            try:
                b = scalar.ebv(expr, env)
            except ExprError:
                b = False
            memo[row] = b
        out[r] = b
    return out


def ids_rows(expr, columns: dict, n: int, ctx) -> np.ndarray | None:
    """Ids of ``expr``'s value per row (UNBOUND on error), row by row; None: left to the
    vectorized path."""
    got = _rows(expr, columns, n, ctx)
    if got is None:
        stats["vector"] += 1
        return None
    stats["rows"] += 1
    names, rows, terms, scalar, extra = got
    memo: dict = {}
    keys: list = []
    meter = StringMeter()  # the memory budget sees the strings as they are built
    get = terms.get
    for r, row in enumerate(rows):
        if extra or row not in memo:
            env = {nm: get(i) for nm, i in zip(names, row, strict=True)}
            for nm, vals in extra.items():
                env[nm] = vals[r]
            try:
                k = meter.add(to_key(scalar.eval(expr, env)))
            except ExprError:
                k = None
            memo[row] = k
        keys.append(memo[row])
    return np.asarray(ctx.intern(keys), dtype=np.int64)
