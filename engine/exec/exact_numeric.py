"""Exact numeric expressions (decimals, integer division, FLOOR / CEIL / ROUND / ABS, casts to
xsd:integer / xsd:decimal) over id columns, one value object per distinct operand, no terms.

The column-wise numeric path (``_Evaluator._num_tree``) computes integer and double results in
numpy; a decimal result (``AVG(?a) * 1000``, ``?x / 3``, ``FLOOR(AVG(?a))``) went to the scalar
evaluator, which per row decoded every operand, parsed each lexical form, built a literal for
every intermediate node, parsed it again one node up and parsed the constants again: 25-60 µs
a row (UG4's ``xsd:integer(FLOOR(AVG(?A) * 1000))`` over 1,000 groups: 63 ms of a 75 ms
query). Here each distinct operand id is decoded and parsed once (``values.numeric_of``, the
scalar path's own parser), constants once, and each distinct combination of operands runs
the tree over ``Num`` values with the scalar path's own operations (``values.numeric_op``,
``num_floor``...). An intermediate literal is only ever re-read for its value, so it is not
built; what building it could raise (an integer or a decimal too long to write) is checked
instead, so errors stay where the scalar path has them. Only the root value is written (by the
same functions as the scalar path). Float / double operands and anything else go to the
caller's general path: :func:`ids_of` says for which rows.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from engine.arrays import unique
from engine.exec import values as V
from engine.exec.values import ERR, ExprError, Num
from engine.sparql.algebra import Call, Const, FunctionCall
from engine.terms import XSD_DECIMAL, XSD_INTEGER, Literal, from_key, to_key

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


def _checked(n: Num) -> Num:
    """``n`` if the scalar path could write it as a literal (format_num), else the error it raises."""
    if n.rank == V.INTEGER:
        V.checked_int(n.v)
    elif n.rank == V.DECIMAL:
        d = n.v
        if not d.is_finite() or (d and abs(d.adjusted()) > V.MAX_INTEGER_DIGITS):
            raise ERR.with_traceback(None)
    else:  # (a float / double never reaches here: such operands are the general path's)
        raise ERR.with_traceback(None)
    return n


def _compile(expr, slot: dict):
    """A function of the operand values (a tuple of Num | None) to the Num of ``expr``."""
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
                n = arg(vals)
                return Num(V.INTEGER, n.v if n.rank == V.INTEGER else V.checked_int(int(n.v)))
            return to_int

        def to_dec(vals):
            return _checked(Num(V.DECIMAL, Decimal(arg(vals).v)))
        return to_dec
    if expr.op in _BINARY:
        a, b = _compile(expr.args[0], slot), _compile(expr.args[1], slot)
        op = expr.op

        def binary(vals):
            return _checked(V.numeric_op(op, a(vals), b(vals)))
        return binary
    a = _compile(expr.args[0], slot)
    fn = _UNARY[expr.op]

    def unary(vals):
        return _checked(fn(a(vals)))
    return unary


def _root_literal(expr, n: Num) -> Literal:
    """The literal the scalar path writes for the root's value."""
    if isinstance(expr, FunctionCall):
        if expr.iri == XSD_INTEGER:
            return Literal(str(n.v), XSD_INTEGER)
        return Literal(V.format_decimal(n.v), XSD_DECIMAL)
    if expr.op == "POS":
        return V.num_literal(n)
    return V.num_literal(n, integral_decimal=expr.op in _INTEGRAL)


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
            nums[i] = _OTHER if got is not None and got.rank > V.DECIMAL else got
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
            out_keys[j] = to_key(_root_literal(expr, fn(vals)))
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
    return got
