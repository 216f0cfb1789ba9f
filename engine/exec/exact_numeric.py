"""Exact numeric expressions (decimals, integer division, FLOOR / CEIL / ROUND / ABS, casts to
xsd:integer / xsd:decimal) over id columns, one value object per distinct operand, no terms.

The column-wise numeric path (``_Evaluator._num_tree``) computes integer and double results in
numpy; a decimal result (``AVG(?a) * 1000``, ``?x / 3``, ``FLOOR(AVG(?a))``) went to the scalar
evaluator, which per row decoded every operand, parsed each lexical form, built a literal for
every intermediate node, parsed it again one node up and parsed the constants again: 25-60 µs
a row (UG4's ``xsd:integer(FLOOR(AVG(?A) * 1000))`` over 1,000 groups: 63 ms of a 75 ms
query). Here each distinct operand id is decoded and parsed once (``values.numeric_of``, the
scalar path's own parser), constants once, and each distinct combination of operands runs
the tree over plain values (an int is an xsd:integer, a Decimal an xsd:decimal) with the
scalar path's arithmetic (``values.numeric_op``'s promotion, its exact + - * and its
28-digit division, in contexts made once). An intermediate literal is only ever re-read for
its value, so it is not built; what building it could raise (an integer or a decimal too
long to write) is checked instead, so errors stay where the scalar path has them. Only the
root value is written (by the same formatting as the scalar path). Float / double operands and anything else go to the
caller's general path: :func:`ids_of` says for which rows.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, DefaultContext

import numpy as np

from engine.arrays import unique
from engine.exec import values as V
from engine.exec.values import ERR, ExprError, Num
from engine.sparql.algebra import Call, Const, FunctionCall
from engine.terms import XSD_DECIMAL, XSD_INTEGER, Literal, from_key

__all__ = ["TAKEN", "ids_of", "is_tree"]

#: rows answered by this path (a test's spy that it is taken)
TAKEN = [0]

_BINARY = frozenset({"+", "-", "*", "/"})
_UNARY = {"NEG": V.num_neg, "POS": lambda a: a, "ABS": V.num_abs, "FLOOR": V.num_floor, "CEIL": V.num_ceil,
          "ROUND": V.num_round}
#: the functions whose literal writes an integral decimal without ".0" (values.format_num)
_INTEGRAL = frozenset({"FLOOR", "CEIL", "ROUND"})
_CASTS = frozenset({XSD_INTEGER, XSD_DECIMAL})


def _node(expr) -> bool:
    if isinstance(expr, Call):
        return (expr.op in _BINARY and len(expr.args) == 2) or (expr.op in _UNARY and len(expr.args) == 1)
    return isinstance(expr, FunctionCall) and expr.iri in _CASTS and len(expr.args) == 1


def is_tree(expr) -> bool:
    """Whether ``expr`` is one of this module's operations (its operands: anything)."""
    return _node(expr)


def _leaves(expr, out: list) -> None:
    if _node(expr):
        for a in expr.args:
            _leaves(a, out)
    elif expr not in out:
        out.append(expr)


#: the scalar path's contexts: + - * exact (values._dec_exact), / to DECIMAL_PREC digits
#: (values._decimal_div); made once instead of a ``localcontext`` per operation
_EXACT = DefaultContext.copy()
_EXACT.prec = 1000
_DIV = DefaultContext.copy()
_DIV.prec = V.DECIMAL_PREC
_INT_SUFFIX = '"^^<' + XSD_INTEGER + ">"
_DEC_SUFFIX = '"^^<' + XSD_DECIMAL + ">"


def _dec(d: Decimal) -> Decimal:
    """``d`` if the scalar path could write it (format_decimal), else the error it raises."""
    if not d.is_finite() or (d and abs(d.adjusted()) > V.MAX_INTEGER_DIGITS):
        raise ERR.with_traceback(None)
    return d


def _int(v: int) -> int:
    return v if -(2**62) < v < 2**62 else V.checked_int(v)


def _binary(op: str):
    """``op`` over an integer (int) or decimal (Decimal) pair, as values.numeric_op computes it."""
    if op == "+":
        def f(a, b):
            if type(a) is int and type(b) is int:
                return _int(a + b)
            return _dec(_EXACT.add(a, b))
    elif op == "-":
        def f(a, b):
            if type(a) is int and type(b) is int:
                return _int(a - b)
            return _dec(_EXACT.subtract(a, b))
    elif op == "*":
        def f(a, b):
            if type(a) is int and type(b) is int:
                return _int(a * b)
            return _dec(_EXACT.multiply(a, b))
    else:
        def f(a, b):
            if not b:
                raise ERR.with_traceback(None)
            return _dec(_DIV.divide(Decimal(a) if type(a) is int else a, Decimal(b) if type(b) is int else b))
    return f


def _unary(op: str):
    if op == "POS":
        return lambda a: a
    if op == "NEG":
        return lambda a: -a if type(a) is int else (a.copy_negate() if a else a.copy_abs())
    if op == "ABS":
        return lambda a: abs(a) if type(a) is int else a.copy_abs()
    if op == "FLOOR":
        return lambda a: a if type(a) is int else _dec(a.to_integral_value(rounding=ROUND_FLOOR))
    if op == "CEIL":
        return lambda a: a if type(a) is int else _dec(a.to_integral_value(rounding=ROUND_CEILING))
    return lambda a: a if type(a) is int else _dec(V.num_round(Num(V.DECIMAL, a)).v)


def _compile(expr, slot: dict):
    """A function of the operand values (a list of int | Decimal | None: an integer, a
    decimal, an error) to the value of ``expr`` (int or Decimal; ERR raised for an error)."""
    if not _node(expr):
        k = slot[expr]

        def leaf(vals):
            v = vals[k]
            if v is None:
                raise ERR.with_traceback(None)
            return v
        return leaf
    if isinstance(expr, FunctionCall):
        arg = _compile(expr.args[0], slot)
        if expr.iri == XSD_INTEGER:
            def to_int(vals):
                v = arg(vals)
                return v if type(v) is int else V.checked_int(int(v))
            return to_int

        def to_dec(vals):
            v = arg(vals)
            return _dec(Decimal(v)) if type(v) is int else v
        return to_dec
    if expr.op in _BINARY:
        a, b = _compile(expr.args[0], slot), _compile(expr.args[1], slot)
        f = _binary(expr.op)
        return lambda vals: f(a(vals), b(vals))
    a = _compile(expr.args[0], slot)
    f = _unary(expr.op)
    return lambda vals: f(a(vals))


def _root_key(expr, v) -> str:
    """The key of the literal the scalar path writes for the root's value ``v``."""
    if isinstance(expr, FunctionCall):
        if expr.iri == XSD_INTEGER:
            return '"' + str(v) + _INT_SUFFIX
        return '"' + V.format_decimal(Decimal(v) if type(v) is int else v) + _DEC_SUFFIX
    if type(v) is int:
        return '"' + V.format_integer(v) + _INT_SUFFIX
    if expr.op in _INTEGRAL:
        return '"' + V.format_decimal_integral(v) + _DEC_SUFFIX
    return '"' + V.format_decimal(v) + _DEC_SUFFIX


def ids_of(ev, expr, unique_rows) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids, rest) of ``expr`` over ``ev``'s rows: ``rest`` marks the rows this path leaves
    to the general one (an operand that is a float or double, or a value the exact
    arithmetic raised on other than an expression error). None: not for this expression."""
    if not _node(expr):
        return None
    leaves: list = []
    _leaves(expr, leaves)
    ctx = ev.ctx
    n = ev.n
    slot = {lf: k for k, lf in enumerate(leaves)}
    cols, consts = [], {}
    for k, lf in enumerate(leaves):
        if isinstance(lf, Const):
            consts[k] = _parse_key(lf.key)
        else:
            cols.append((k, np.asarray(ev.ids(lf), dtype=np.int64)))
    if any(c is _OTHER for c in consts.values()):
        return None  # a float / double constant: the general path
    fn = _compile(expr, slot)
    if cols:
        uniq, inv = unique_rows([c for _, c in cols])
    else:
        uniq, inv = np.zeros((1, 0), dtype=np.int64), np.zeros(n, dtype=np.int64)
    # each distinct operand id decoded and parsed once
    flat = uniq.reshape(-1)
    ids = unique(flat[flat >= 0])
    nums: dict = {}
    if len(ids):
        for i, key in zip(ids.tolist(), ctx.keys(ids), strict=True):
            t = from_key(key)
            got = V.numeric_of(t) if isinstance(t, Literal) else None
            nums[i] = None if got is None else _OTHER if got.rank > V.DECIMAL else got.v
    m = len(uniq)
    out_keys: list = [None] * m
    rest_u = np.zeros(m, dtype=bool)
    width = len(leaves)
    col_slots = [k for k, _ in cols]
    for j, row in enumerate(uniq.tolist()):
        if j % 4096 == 4095:
            ctx.check_budget()
        vals = [None] * width
        other = False
        for k, i in zip(col_slots, row, strict=True):
            v = nums.get(i)
            if v is _OTHER:
                other = True
                break
            vals[k] = v
        if other:
            rest_u[j] = True
            continue
        for k, v in consts.items():
            vals[k] = v
        try:
            out_keys[j] = _root_key(expr, fn(vals))
        except ExprError:
            pass
        except (ArithmeticError, ValueError):  # (decimal signals the scalar path may treat otherwise)
            rest_u[j] = True
    res = np.asarray(ctx.intern([None if r else k for k, r in zip(out_keys, rest_u.tolist(), strict=True)]),
                     dtype=np.int64)
    rest = rest_u[inv]
    TAKEN[0] += int(n - rest.sum())
    return res[inv], rest


class _Other:
    """A numeric operand outside the exact ranks (float / double)."""


_OTHER = _Other()


def _parse_key(key: str):
    """A constant's Num (None: no number, an error where it is an operand; _OTHER: float / double)."""
    t = from_key(key)
    got = V.numeric_of(t) if isinstance(t, Literal) else None
    if got is not None and got.rank > V.DECIMAL:
        return _OTHER
    return None if got is None else got.v
