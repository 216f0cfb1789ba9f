"""The expression language of a mapping spec, evaluated column-wise with pyarrow.

Expressions are Python expression syntax restricted to: column names (and the
``let`` names defined before them, ``t`` = the record's timestamp in ms once
computed, ``row`` = the record's ordinal), number and string constants,
``+ - * / %``, comparisons, ``and or not``, ``a if c else b`` (or ``iff(c, a, b)``) and the functions in
:data:`FUNCTIONS`. They are parsed once (``ast``) and evaluated over whole Arrow
columns, never row by row. A value that cannot be computed for a row (a
non-numeric field, an empty field, a missing lookup key, division by zero)
marks that row bad with a reason; the caller sends bad rows to the dead letters.
"""

from __future__ import annotations

import ast
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_INT_RE = r"^\s*[+-]?\d+\s*$"
_FLOAT_RE = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"


class SpecError(ValueError):
    """A spec (or an expression in it) that cannot work: reported before any data is read."""


@dataclass
class Context:
    """Columns of one chunk of records plus the per-row failure reasons."""

    columns: dict[str, pa.Array]
    n: int
    tables: dict[str, dict] = field(default_factory=dict)   # lookup tables: name -> {"keys": Array, "cols": {...}}
    reason: np.ndarray = None                                # object array: None or the first failure reason

    def __post_init__(self):
        if self.reason is None:
            self.reason = np.full(self.n, None, dtype=object)

    def fail(self, mask, message: str | Callable[[np.ndarray], list[str]]) -> None:
        """Mark rows (bool mask, numpy or Arrow) bad; the first reason of a row wins."""
        m = _np_mask(mask, self.n) & np.equal(self.reason, None)
        if not m.any():
            return
        if callable(message):
            idx = np.flatnonzero(m)
            self.reason[idx] = message(idx)
        else:
            self.reason[m] = message

    @property
    def ok(self) -> np.ndarray:
        return np.equal(self.reason, None)


def _np_mask(mask, n: int) -> np.ndarray:
    if isinstance(mask, (pa.Array, pa.ChunkedArray)):
        return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)
    if isinstance(mask, pa.Scalar):
        return np.full(n, bool(mask.as_py()))
    if isinstance(mask, (bool, np.bool_)):
        return np.full(n, bool(mask))
    return np.asarray(mask, dtype=bool)


def _is_str(v) -> bool:
    t = v.type if isinstance(v, (pa.Array, pa.ChunkedArray, pa.Scalar)) else None
    return t is not None and (pa.types.is_string(t) or pa.types.is_large_string(t))


def to_number(ctx: Context, v, label: str):
    """A numeric Arrow array from v: strings are parsed (int64 if every value is
    integral, else float64); unparsable or empty values mark their rows bad."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return pa.scalar(v)
    if isinstance(v, str):
        raise SpecError(f"{label}: {v!r} is a string, not a number")
    if isinstance(v, pa.Scalar):
        return v if not _is_str(v) else pa.scalar(float(v.as_py()))
    if pa.types.is_boolean(v.type):
        return pc.cast(v, pa.int64())
    if not _is_str(v):
        if v.null_count:
            ctx.fail(pc.is_null(v), f"{label}: empty value")
        return v
    if not v.null_count:                         # fast path: the whole column parses
        trimmed = pc.utf8_trim_whitespace(v)
        for typ in (pa.int64(), pa.float64()):
            try:
                return pc.cast(trimmed, typ)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
    is_int = pc.match_substring_regex(v, _INT_RE)
    is_num = pc.or_(is_int, pc.match_substring_regex(v, _FLOAT_RE))
    bad = pc.invert(pc.fill_null(is_num, False))
    if pc.any(bad).as_py():
        vals = v

        def why(idx, vals=vals):
            raw = vals.take(pa.array(idx)).to_pylist()
            return [f"{label}: empty value" if r is None or not r.strip() else f"{label}: not a number {r!r}"
                    for r in raw]
        ctx.fail(bad, why)
        v = pc.if_else(bad, pa.scalar("0"), v)
    v = pc.utf8_trim_whitespace(v)
    if pc.all(pc.fill_null(is_int, True)).as_py():
        return pc.cast(v, pa.int64())
    return pc.cast(v, pa.float64())


def to_string(v, n: int) -> pa.Array:
    if isinstance(v, (str, int, float)):
        return pa.array([str(v)] * n, pa.string()) if not isinstance(v, str) else pa.repeat(pa.scalar(v), n)
    if isinstance(v, pa.Scalar):
        return pa.repeat(pc.cast(v, pa.string()), n)
    if _is_str(v):
        return v
    if pa.types.is_floating(v.type):
        return pc.cast(v, pa.string())
    return pc.cast(v, pa.string())


def parse_time(ctx: Context, v, fmt: str, label: str) -> pa.Array:
    """strptime (UTC) -> int64 ms; unparsable values mark rows bad."""
    if isinstance(v, str):
        d = dt.datetime.strptime(v, fmt).replace(tzinfo=dt.UTC)
        return pa.scalar(int(d.timestamp() * 1000))
    if not _is_str(v):
        raise SpecError(f"{label}: ts() wants a text column or constant")
    ts = pc.strptime(v, format=fmt, unit="ms", error_is_null=True)
    bad = pc.is_null(ts)
    if pc.any(bad).as_py():
        vals = v

        def why(idx, vals=vals):
            return [f"{label}: time {r!r} does not match {fmt!r}" for r in vals.take(pa.array(idx)).to_pylist()]
        ctx.fail(bad, why)
    return pc.fill_null(pc.cast(ts, pa.int64()), 0)


_BINOPS = {ast.Add: pc.add, ast.Sub: pc.subtract, ast.Mult: pc.multiply}
_CMPS = {ast.Eq: pc.equal, ast.NotEq: pc.not_equal, ast.Lt: pc.less, ast.LtE: pc.less_equal,
         ast.Gt: pc.greater, ast.GtE: pc.greater_equal}


class Expr:
    """One compiled expression; ``eval(ctx)`` returns an Arrow array or scalar."""

    def __init__(self, text: str, where: str = "expression"):
        self.text = str(text)
        self.where = where
        try:
            self.tree = ast.parse(self.text.strip(), mode="eval").body
        except SyntaxError as e:
            raise SpecError(f"{where}: cannot parse {self.text!r}: {e.msg}") from None
        self.names: set[str] = set()
        self._check(self.tree)

    def _check(self, node) -> None:
        if isinstance(node, ast.Name):
            self.names.add(node.id)
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str)) or isinstance(node.value, bool):
                raise SpecError(f"{self.where}: constant {node.value!r} not allowed")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in (*_BINOPS, ast.Div, ast.Mod):
                raise SpecError(f"{self.where}: operator {type(node.op).__name__} not allowed")
            self._check(node.left)
            self._check(node.right)
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
                raise SpecError(f"{self.where}: operator {type(node.op).__name__} not allowed")
            self._check(node.operand)
        elif isinstance(node, ast.Compare):
            if len(node.ops) != 1 or type(node.ops[0]) not in _CMPS:
                raise SpecError(f"{self.where}: one comparison (== != < <= > >=) at a time")
            self._check(node.left)
            self._check(node.comparators[0])
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                self._check(v)
        elif isinstance(node, ast.IfExp):
            for v in (node.test, node.body, node.orelse):
                self._check(v)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                raise SpecError(f"{self.where}: unknown function in {self.text!r} "
                                f"(known: {', '.join(sorted(FUNCTIONS))})")
            for a in node.args:
                self._check(a)
        else:
            raise SpecError(f"{self.where}: {type(node).__name__} not allowed in {self.text!r}")

    def eval(self, ctx: Context):
        return self._ev(self.tree, ctx)

    def _ev(self, node, ctx: Context):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in ctx.columns:
                raise SpecError(f"{self.where}: no column or variable {node.id!r} "
                                f"(have: {', '.join(sorted(ctx.columns))})")
            return ctx.columns[node.id]
        if isinstance(node, ast.BinOp):
            a = to_number(ctx, self._ev(node.left, ctx), _src(node.left))
            b = to_number(ctx, self._ev(node.right, ctx), _src(node.right))
            if isinstance(node.op, ast.Div):
                a, b = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
                zero = pc.equal(b, 0.0)
                ctx.fail(zero if not isinstance(zero, pa.Scalar) else zero.as_py(), f"{self.text}: division by zero")
                return pc.divide(a, pc.if_else(zero, pa.scalar(1.0), b))
            if isinstance(node.op, ast.Mod):
                a, b = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
                return pc.subtract(a, pc.multiply(pc.floor(pc.divide(a, b)), b))
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp):
            v = self._ev(node.operand, ctx)
            if isinstance(node.op, ast.Not):
                return pc.invert(_bool(v))
            v = to_number(ctx, v, _src(node.operand))
            return pc.negate(v) if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Compare):
            a, b = self._ev(node.left, ctx), self._ev(node.comparators[0], ctx)
            if not (_is_str(a) or isinstance(a, str)) or not (_is_str(b) or isinstance(b, str)):
                a = to_number(ctx, a, _src(node.left))
                b = to_number(ctx, b, _src(node.comparators[0]))
            return _CMPS[type(node.ops[0])](a, b)
        if isinstance(node, ast.BoolOp):
            vals = [_bool(self._ev(v, ctx)) for v in node.values]
            f = pc.and_ if isinstance(node.op, ast.And) else pc.or_
            out = vals[0]
            for v in vals[1:]:
                out = f(out, v)
            return out
        if isinstance(node, ast.IfExp):
            return _if(ctx, self._ev(node.test, ctx), self._ev(node.body, ctx), self._ev(node.orelse, ctx),
                       self.text)
        if isinstance(node, ast.Call):
            args = [self._ev(a, ctx) for a in node.args]
            return FUNCTIONS[node.func.id](ctx, self.text, *args)
        raise SpecError(f"{self.where}: cannot evaluate {type(node).__name__}")


def _src(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - ast.unparse handles every node _check allows
        return "value"


def _bool(v):
    if isinstance(v, bool):
        return pa.scalar(v)
    return v


def _if(ctx, cond, a, b, text):
    if (_is_str(a) or isinstance(a, str)) != (_is_str(b) or isinstance(b, str)):
        raise SpecError(f"{text}: both branches of if() must be text or both numbers")
    if not (_is_str(a) or isinstance(a, str)):
        a, b = to_number(ctx, a, text), to_number(ctx, b, text)
        if pa.types.is_floating(_type(a)) or pa.types.is_floating(_type(b)):
            a, b = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
    return pc.if_else(_bool(cond), a, b)


def _type(v) -> pa.DataType:
    return v.type if isinstance(v, (pa.Array, pa.ChunkedArray, pa.Scalar)) else pa.scalar(v).type


def _fn_if(ctx, text, cond, a, b):
    return _if(ctx, cond, a, b, text)


def _fn_minmax(which):
    def f(ctx, text, *args):
        if not args:
            raise SpecError(f"{text}: {which}() needs arguments")
        nums = [to_number(ctx, a, text) for a in args]
        if any(pa.types.is_floating(_type(x)) for x in nums):
            nums = [pc.cast(x, pa.float64()) for x in nums]
        return (pc.max_element_wise if which == "max" else pc.min_element_wise)(*nums)
    return f


def _fn_float(ctx, text, v):
    return pc.cast(to_number(ctx, v, text), pa.float64())


def _fn_int(ctx, text, v):
    x = to_number(ctx, v, text)
    if pa.types.is_floating(_type(x)):
        return pc.cast(pc.trunc(x), pa.int64())
    return x


def _fn_str(ctx, text, v):
    return to_string(v, ctx.n)


def _fn_abs(ctx, text, v):
    return pc.abs(to_number(ctx, v, text))


def _fn_ts(ctx, text, v, fmt="%Y-%m-%dT%H:%M:%S"):
    return parse_time(ctx, v, fmt, text)


def _fn_substr(ctx, text, v, start, stop=None):
    return pc.utf8_slice_codeunits(to_string(v, ctx.n), int(start), None if stop is None else int(stop))


def _fn_split(ctx, text, v, sep, i):
    s = to_string(v, ctx.n)
    parts = pc.split_pattern(s, str(sep))
    n_parts = pc.list_value_length(parts)
    bad = pc.less_equal(n_parts, int(i))
    if pc.any(pc.fill_null(bad, True)).as_py():
        ctx.fail(pc.fill_null(bad, True), f"{text}: fewer than {int(i) + 1} parts")
        parts = pc.if_else(pc.fill_null(bad, True), pa.scalar([""] * (int(i) + 1), parts.type), parts)
    return pc.list_element(parts, int(i))


def _fn_concat(ctx, text, *args):
    return pc.binary_join_element_wise(*[to_string(a, ctx.n) for a in args], "")


def _fn_empty(ctx, text, v):
    s = to_string(v, ctx.n)
    return pc.fill_null(pc.equal(pc.utf8_trim_whitespace(s), ""), True)


def _fn_lookup(ctx, text, table, key, column):
    tab = ctx.tables.get(table)
    if tab is None:
        raise SpecError(f"{text}: no lookup table {table!r} (spec 'tables')")
    if column not in tab["cols"]:
        raise SpecError(f"{text}: table {table!r} has no column {column!r}")
    k = to_string(key, ctx.n)
    idx = pc.index_in(k, value_set=tab["keys"])
    miss = pc.is_null(idx)
    if pc.any(miss).as_py():
        def why(i, k=k):
            return [f"{text}: no {table!r} row for key {r!r}" for r in k.take(pa.array(i)).to_pylist()]
        ctx.fail(miss, why)
    return pc.fill_null(pc.take(tab["cols"][column], idx), "")


FUNCTIONS: dict[str, Callable] = {
    "iff": _fn_if, "max": _fn_minmax("max"), "min": _fn_minmax("min"), "float": _fn_float, "int": _fn_int,
    "str": _fn_str, "abs": _fn_abs, "ts": _fn_ts, "substr": _fn_substr, "split": _fn_split,
    "concat": _fn_concat, "empty": _fn_empty, "lookup": _fn_lookup,
}
