"""XSD value model for expression evaluation.

Parses the lexical forms of the XSD types SPARQL operates on (numerics with
their derived integer types, boolean, dateTime, date, strings) into Python
values, and formats computed values back into lexical forms that match what
the W3C SPARQL 1.1 tests expect:

* xsd:integer   ``3``
* xsd:decimal   ``2.0`` / ``1.5`` (XSD 1.0 canonical: always a '.' and a
  fraction digit) for arithmetic and aggregates; CEIL/FLOOR/ROUND and
  SECONDS use the integral form (``3``), as the tests expect
* xsd:double    ``3.21E4`` / ``4.0E-1`` / ``2.5E0`` (shortest round-trip digits)
* xsd:float     the same with float32 shortest digits

Also: SPARQL value comparison (``=`` with RDFterm-equal fallback, ``<``),
the ORDER BY total order key and the effective boolean value. Everything here
works on ``engine.terms`` objects and raises :class:`ExprError` for a SPARQL
expression error.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation, localcontext

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.terms import (
    IRI,
    RDF_LANGSTRING,
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
)


class ExprError(Exception):
    """A SPARQL expression evaluation error (type error, unbound variable...)."""


#: shared instance: raising it needs no allocation. Raised as ``ERR.with_traceback(None)``:
#: raising an instance that still holds a traceback *extends* it, so every raise of a bare
#: ``ERR`` kept the frames (and their locals) of all earlier raises alive, and later ones got slower
ERR = ExprError()

# ---------------------------------------------------------------- numerics

INTEGER, DECIMAL, FLOAT, DOUBLE = 0, 1, 2, 3
RANK_DATATYPE = {INTEGER: XSD_INTEGER, DECIMAL: XSD_DECIMAL, FLOAT: XSD_FLOAT, DOUBLE: XSD_DOUBLE}

# derived integer types -> (min, max) inclusive (None = unbounded)
INTEGER_TYPES: dict[str, tuple[int | None, int | None]] = {
    XSD_INTEGER: (None, None),
    XSD + "nonPositiveInteger": (None, 0),
    XSD + "negativeInteger": (None, -1),
    XSD + "long": (-(1 << 63), (1 << 63) - 1),
    XSD + "int": (-(1 << 31), (1 << 31) - 1),
    XSD + "short": (-(1 << 15), (1 << 15) - 1),
    XSD + "byte": (-(1 << 7), (1 << 7) - 1),
    XSD + "nonNegativeInteger": (0, None),
    XSD + "unsignedLong": (0, (1 << 64) - 1),
    XSD + "unsignedInt": (0, (1 << 32) - 1),
    XSD + "unsignedShort": (0, (1 << 16) - 1),
    XSD + "unsignedByte": (0, (1 << 8) - 1),
    XSD + "positiveInteger": (1, None),
}
NUMERIC_TYPES: dict[str, int] = {dt: INTEGER for dt in INTEGER_TYPES}
NUMERIC_TYPES.update({XSD_DECIMAL: DECIMAL, XSD_FLOAT: FLOAT, XSD_DOUBLE: DOUBLE})

_INTEGER_RE = re.compile(r"[+-]?[0-9]+")
_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_DOUBLE_RE = re.compile(r"(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?INF|NaN)")

DECIMAL_PREC = 28  # significant digits of decimal division

# Integers are exact up to Python's int/str conversion limit (a guard against
# its quadratic cost; never lifted globally). An integer literal with more
# significant digits is treated as ill-typed (numeric operations on it are
# expression errors; the term itself is kept as written), and a computed
# integer or decimal beyond that many digits is an expression error (overflow).
MAX_INTEGER_DIGITS = sys.get_int_max_str_digits() or 4300
_INT_BOUND = 10**MAX_INTEGER_DIGITS  # exclusive bound of the exact integers


@dataclass(frozen=True, slots=True)
class Num:
    """A numeric value: ``rank`` is INTEGER/DECIMAL/FLOAT/DOUBLE, ``v`` an
    int, Decimal or float accordingly."""

    rank: int
    v: int | Decimal | float


def parse_integer(lex: str) -> int | None:
    """Value of an xsd:integer lexical form; None if invalid or longer than
    MAX_INTEGER_DIGITS significant digits."""
    s = lex.strip()
    if not _INTEGER_RE.fullmatch(s):
        return None
    if len(s) > MAX_INTEGER_DIGITS:
        digits = s.lstrip("+-").lstrip("0")
        if len(digits) > MAX_INTEGER_DIGITS:
            return None
        s = ("-" if s[0] == "-" else "") + (digits or "0")
    return int(s)


def checked_int(v: int) -> int:
    """``v`` if it can be written as an xsd:integer, else an expression error."""
    if -_INT_BOUND < v < _INT_BOUND:
        return v
    raise ERR.with_traceback(None)


def parse_decimal(lex: str) -> Decimal | None:
    s = lex.strip()
    if not _DECIMAL_RE.fullmatch(s):
        return None
    return Decimal(s)


def parse_double(lex: str) -> float | None:
    s = lex.strip()
    if not _DOUBLE_RE.fullmatch(s):
        return None
    if s.endswith("INF"):
        return -math.inf if s[0] == "-" else math.inf
    return float(s)


def to_double(v) -> float:
    """float of an int/Decimal/float; integers beyond the double range give
    +-INF (XPath casting) instead of Python's OverflowError. xsd:decimal has no
    negative zero: a decimal "-0.0" is the double 0.0."""
    try:
        if isinstance(v, Decimal) and not v:
            return 0.0
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def to_float32(x: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def parse_numeric(lexical: str, datatype: str) -> Num | None:
    """Value of a numeric literal, None if the datatype is not numeric or the
    lexical form is invalid."""
    rank = NUMERIC_TYPES.get(datatype)
    if rank is None:
        return None
    if rank == INTEGER:
        v = parse_integer(lexical)
        if v is None:
            return None
        lo, hi = INTEGER_TYPES[datatype]
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            return None
        return Num(INTEGER, v)
    if rank == DECIMAL:
        d = parse_decimal(lexical)
        return None if d is None else Num(DECIMAL, d)
    f = parse_double(lexical)
    if f is None:
        return None
    return Num(rank, to_float32(f) if rank == FLOAT else f)


def numeric_of(term: Term | None) -> Num | None:
    if isinstance(term, Literal):
        return parse_numeric(term.lexical, term.datatype)
    return None


def promote(a: Num, b: Num) -> tuple[int, object, object]:
    """Common rank of two numerics and both values converted to it."""
    r = max(a.rank, b.rank)
    return r, _as_rank(a, r), _as_rank(b, r)


def _as_rank(n: Num, r: int):
    if n.rank == r:
        return n.v
    if r == DECIMAL:
        return Decimal(n.v)
    if r == FLOAT:
        return to_float32(to_double(n.v))
    return to_double(n.v)


def _fix(r: int, v) -> Num:
    if r == FLOAT:
        return Num(FLOAT, to_float32(v))
    return Num(r, v)


def numeric_op(op: str, a: Num, b: Num) -> Num:
    """``+ - * /`` with XPath type promotion; integer division gives a decimal;
    division by zero is an error for integer/decimal, INF/NaN for float/double."""
    r, x, y = promote(a, b)
    if r == INTEGER:
        if op == "+":
            return Num(INTEGER, checked_int(x + y))
        if op == "-":
            return Num(INTEGER, checked_int(x - y))
        if op == "*":
            return Num(INTEGER, checked_int(x * y))
        if y == 0:
            raise ERR.with_traceback(None)
        return Num(DECIMAL, _decimal_div(Decimal(x), Decimal(y)))
    if r == DECIMAL:
        if op == "+":
            return Num(DECIMAL, _dec_exact(x, y, "+"))
        if op == "-":
            return Num(DECIMAL, _dec_exact(x, y, "-"))
        if op == "*":
            return Num(DECIMAL, _dec_exact(x, y, "*"))
        if y == 0:
            raise ERR.with_traceback(None)
        return Num(DECIMAL, _decimal_div(x, y))
    # float / double (IEEE semantics)
    if op == "+":
        return _fix(r, x + y)
    if op == "-":
        return _fix(r, x - y)
    if op == "*":
        return _fix(r, x * y)
    if y == 0:
        if x == 0 or math.isnan(x):
            return _fix(r, math.nan)
        neg = (math.copysign(1.0, x) < 0) != (math.copysign(1.0, y) < 0)
        return _fix(r, -math.inf if neg else math.inf)
    return _fix(r, x / y)


def _dec_exact(x: Decimal, y: Decimal, op: str) -> Decimal:
    with localcontext() as c:
        c.prec = 1000
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        return x * y


def _decimal_div(x: Decimal, y: Decimal) -> Decimal:
    with localcontext() as c:
        c.prec = DECIMAL_PREC
        return x / y


def num_abs(a: Num) -> Num:
    # Decimal's abs() and unary minus round to the context's 28 digits: copy_abs/copy_negate are exact
    return Num(a.rank, a.v.copy_abs() if isinstance(a.v, Decimal) else abs(a.v))


def num_neg(a: Num) -> Num:
    if isinstance(a.v, Decimal):
        return Num(a.rank, a.v.copy_negate() if a.v else a.v.copy_abs())  # xsd:decimal has no -0
    return Num(a.rank, -a.v)


def num_ceil(a: Num) -> Num:
    if a.rank == INTEGER:
        return a
    if a.rank == DECIMAL:
        return Num(DECIMAL, a.v.to_integral_value(rounding=ROUND_CEILING))
    if math.isnan(a.v) or math.isinf(a.v):
        return a
    r = float(math.ceil(a.v))
    return Num(a.rank, -0.0 if r == 0 and a.v < 0 else r)


def num_floor(a: Num) -> Num:
    if a.rank == INTEGER:
        return a
    if a.rank == DECIMAL:
        return Num(DECIMAL, a.v.to_integral_value(rounding=ROUND_FLOOR))
    if math.isnan(a.v) or math.isinf(a.v):
        return a
    return Num(a.rank, float(math.floor(a.v)))


def num_round(a: Num) -> Num:
    """fn:round: half rounds towards positive infinity (-2.5 -> -2)."""
    if a.rank == INTEGER:
        return a
    if a.rank == DECIMAL:
        return Num(DECIMAL, (a.v + Decimal("0.5")).to_integral_value(rounding=ROUND_FLOOR))
    v = a.v
    if math.isnan(v) or math.isinf(v):
        return a
    r = math.floor(v)
    if v - r >= 0.5:
        r += 1
    return Num(a.rank, float(r))


# ---------------------------------------------------------------- formatting


def format_integer(v: int) -> str:
    return str(checked_int(v))


def format_decimal(d: Decimal) -> str:
    """XSD 1.0 canonical decimal: no exponent, no superfluous zeros, but
    always a '.' with at least one digit on each side (``2.0``, ``0.5``)."""
    if not d.is_finite() or (d and abs(d.adjusted()) > MAX_INTEGER_DIGITS):
        raise ERR.with_traceback(None)  # written without exponent it would be longer than the integer limit
    s = format(d, "f")
    neg = s.startswith("-")
    if neg:
        s = s[1:]
    if "." in s:
        ip, fp = s.split(".", 1)
        fp = fp.rstrip("0") or "0"
    else:
        ip, fp = s, "0"
    ip = ip.lstrip("0") or "0"
    if ip == "0" and fp == "0":
        neg = False
    return ("-" if neg else "") + ip + "." + fp


def format_decimal_integral(d: Decimal) -> str:
    """Decimal without a trailing ``.0`` when integral (``3``, ``1.5``)."""
    s = format_decimal(d)
    return s[:-2] if s.endswith(".0") else s


def _sci(x: float, digits_repr: str) -> str:
    """Turn numpy's unique scientific repr ('1.25e+00', '1.e+02') into XSD
    canonical ``1.25E0`` / ``1.0E2``."""
    mant, _, exp = digits_repr.partition("e")
    if "." in mant:
        ip, fp = mant.split(".", 1)
        fp = fp.rstrip("0") or "0"
        mant = ip + "." + fp
    else:
        mant = mant + ".0"
    return mant + "E" + str(int(exp))


def format_double(x: float) -> str:
    """XSD canonical double: one digit before the point, shortest round-trip
    digits, ``E`` exponent (``3.21E4``, ``4.0E-1``, ``1.0E0``)."""
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "INF" if x > 0 else "-INF"
    if x == 0:
        return "-0.0E0" if math.copysign(1.0, x) < 0 else "0.0E0"
    r = repr(abs(x))  # shortest round-trip digits
    m, _, e = r.partition("e")
    ip, _, fp = m.partition(".")
    digits = ip + fp
    stripped = digits.lstrip("0")
    exp = len(ip) - (len(digits) - len(stripped)) - 1 + (int(e) if e else 0)
    stripped = stripped.rstrip("0") or "0"
    return ("-" if x < 0 else "") + stripped[0] + "." + (stripped[1:] or "0") + "E" + str(exp)


def format_doubles(x: np.ndarray, pre: str = "", post: str = "") -> list[str]:
    """:func:`format_double` of every value of a float64 array, by Arrow kernels:
    Arrow writes each double's shortest round-trip digits (``1e-06``,
    ``0.000123``, ``1.5e+16``: double-conversion, ~0.1 us a value against
    ``repr``'s 0.6), and the digits and the decimal exponent are cut out of
    that and put in XSD's canonical form with no Python per value; each between
    ``pre`` and ``post`` (a literal's quotes and datatype: the keys to intern)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    if n < 64:
        return [pre + format_double(v) + post for v in x.tolist()]
    finite = np.isfinite(x) & (x != 0)
    out = np.empty(n, dtype=object)
    special = np.flatnonzero(~finite)
    if len(special):
        out[special] = [pre + format_double(v) + post for v in x[special].tolist()]
    idx = np.flatnonzero(finite)
    if len(idx):
        out[idx] = _finite_doubles(x[idx], pre, post).to_pylist()
    return out.tolist()


def _finite_doubles(v: np.ndarray, pre: str, post: str) -> pa.Array:
    """:func:`format_doubles` of finite non-zero doubles, as an Arrow string array."""
    s = pc.cast(pa.array(np.abs(v)), pa.large_string())
    offs = np.frombuffer(s.buffers()[1], dtype=np.int64, count=len(s) + 1)
    start, end = offs[:-1], offs[1:]
    epos = np.asarray(pc.find_substring(s, "e").to_numpy(zero_copy_only=False), dtype=np.int64)
    has_e = epos >= 0
    mend = np.where(has_e, start + epos, end)  # the mantissa: digits with maybe a point
    buf = np.frombuffer(s.buffers()[2], dtype=np.uint8)
    e0 = np.minimum(mend + 1, end)
    e0 = e0 + (has_e & (buf[np.minimum(e0, len(buf) - 1)] == 0x2B))  # '+' of the exponent
    exps = _cut(s, e0, end)
    e = np.asarray(pc.cast(pc.if_else(pc.equal(exps, ""), "0", exps), pa.int64())
                   .to_numpy(zero_copy_only=False), dtype=np.int64)
    m = _cut(s, start, mend)
    dot = np.asarray(pc.find_substring(m, ".").to_numpy(zero_copy_only=False), dtype=np.int64)
    mlen = mend - start
    ip_len = np.where(dot >= 0, dot, mlen)
    digits = pc.replace_substring(m, ".", "")
    nz = pc.utf8_ltrim(digits, characters="0")
    lead = (mlen - (dot >= 0)) - np.asarray(pc.binary_length(nz).to_numpy(zero_copy_only=False), dtype=np.int64)
    exp = ip_len - lead - 1 + e
    sig = pc.utf8_rtrim(nz, characters="0")
    first = pc.utf8_slice_codeunits(sig, 0, 1)
    rest = pc.utf8_slice_codeunits(sig, 1, 1 << 30)
    rest = pc.if_else(pc.equal(rest, ""), "0", rest)
    sign = pa.array(np.where(v < 0, "-", ""), pa.large_string())
    lit = [pa.scalar(c, pa.large_string()) for c in (pre, ".", "E", post, "")]
    txt = pc.binary_join_element_wise(lit[0], sign, first, lit[1], rest, lit[2],
                                      pc.cast(pa.array(exp), pa.large_string()), lit[3], lit[4])
    return txt


def format_doubles_arrow(x: np.ndarray, pre: str = "", post: str = "") -> pa.Array:
    """:func:`format_doubles` as an Arrow string array (no Python string per value
    when every value is finite and non-zero, as RAND()'s are)."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 64 or not (np.isfinite(x) & (x != 0)).all():
        return pa.array(format_doubles(x, pre, post), pa.large_string())
    return _finite_doubles(x, pre, post)


def _cut(s: pa.Array, a: np.ndarray, b: np.ndarray) -> pa.Array:
    """s's bytes [a[i], b[i]) for each i (positions into its data buffer, in order
    of i): every other element of one zero-copy array over the data, then a take."""
    k = len(a)
    offs = np.empty(2 * k + 1, dtype=np.int64)
    offs[0:-1:2] = a
    offs[1:-1:2] = b
    offs[-1] = b[-1]
    arr = pa.Array.from_buffers(pa.large_string(), 2 * k, [None, pa.py_buffer(offs), s.buffers()[2]])
    return arr.take(pa.array(np.arange(0, 2 * k, 2, dtype=np.int64)))


def format_float(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "INF" if x > 0 else "-INF"
    if x == 0:
        return "-0.0E0" if math.copysign(1.0, x) < 0 else "0.0E0"
    return _sci(x, np.format_float_scientific(np.float32(x), unique=True, trim="-"))


def format_num(n: Num, integral_decimal: bool = False) -> str:
    if n.rank == INTEGER:
        return format_integer(n.v)
    if n.rank == DECIMAL:
        return format_decimal_integral(n.v) if integral_decimal else format_decimal(n.v)
    if n.rank == FLOAT:
        return format_float(n.v)
    return format_double(n.v)


def num_literal(n: Num, integral_decimal: bool = False) -> Literal:
    return Literal(format_num(n, integral_decimal), RANK_DATATYPE[n.rank])


def integer_literal(v: int) -> Literal:
    return Literal(format_integer(v), XSD_INTEGER)


def bool_literal(b: bool) -> Literal:
    return Literal("true" if b else "false", XSD_BOOLEAN)


TRUE = bool_literal(True)
FALSE = bool_literal(False)


def string_cast_of_num(n: Num) -> str:
    """XPath casting of a numeric to xs:string (``1.0`` -> ``1``; doubles in
    [1e-6, 1e6) written as decimals)."""
    if n.rank == INTEGER:
        return format_integer(n.v)
    if n.rank == DECIMAL:
        return format_decimal_integral(n.v)
    x = n.v
    if math.isnan(x) or math.isinf(x):
        return format_double(x)
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    if 1e-6 <= abs(x) < 1e6:
        r = np.format_float_positional(np.float32(x) if n.rank == FLOAT else np.float64(x), unique=True, trim="-")
        return r
    return format_float(x) if n.rank == FLOAT else format_double(x)


# ---------------------------------------------------------------- booleans


def parse_boolean(lex: str) -> bool | None:
    s = lex.strip()
    if s in ("true", "1"):
        return True
    if s in ("false", "0"):
        return False
    return None


# ---------------------------------------------------------------- dateTime / date

_DATETIME_RE = re.compile(
    r"(-?[0-9]{4,})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2}(?:\.[0-9]+)?)"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?"
)
_DATE_RE = re.compile(r"(-?[0-9]{4,})-([0-9]{2})-([0-9]{2})(Z|[+-][0-9]{2}:[0-9]{2})?")


@dataclass(frozen=True, slots=True)
class DateTime:
    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: Decimal
    tz: int | None  # offset in minutes, None = no timezone
    tz_lex: str  # the timezone as written ('' when absent)
    is_date: bool = False

    def instant(self, assume_tz: int = 0) -> Decimal:
        """Seconds since 0001-01-01T00:00:00Z of the normalized value (local
        values are taken at offset ``assume_tz``)."""
        days = _days_from_civil(self.year, self.month, self.day)
        off = self.tz if self.tz is not None else assume_tz
        return Decimal(days * 86400 + self.hour * 3600 + self.minute * 60 - off * 60) + self.second


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe


def _days_in_month(y: int, m: int) -> int:
    if m == 2:
        leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
        return 29 if leap else 28
    return 30 if m in (4, 6, 9, 11) else 31


def _parse_tz(tz: str | None) -> int | None:
    if not tz:
        return None
    if tz == "Z":
        return 0
    h, mi = int(tz[1:3]), int(tz[4:6])
    if h > 14 or mi > 59 or (h == 14 and mi):
        raise ValueError
    off = h * 60 + mi
    return -off if tz[0] == "-" else off


def parse_datetime(lex: str) -> DateTime | None:
    m = _DATETIME_RE.fullmatch(lex.strip())
    if not m:
        return None
    try:
        y, mo, d, h, mi = (int(m.group(i)) for i in range(1, 6))
        s = Decimal(m.group(6))
        tz = _parse_tz(m.group(7))
    except (ValueError, InvalidOperation):
        return None
    if not (1 <= mo <= 12 and 1 <= d <= _days_in_month(y, mo) and mi < 60 and s < 60):
        return None
    if h == 24:
        if mi or s:
            return None
    elif h > 23:
        return None
    return DateTime(y, mo, d, h, mi, s, tz, m.group(7) or "")


def parse_date(lex: str) -> DateTime | None:
    m = _DATE_RE.fullmatch(lex.strip())
    if not m:
        return None
    try:
        y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
        tz = _parse_tz(m.group(4))
    except ValueError:
        return None
    if not (1 <= mo <= 12 and 1 <= d <= _days_in_month(y, mo)):
        return None
    return DateTime(y, mo, d, 0, 0, Decimal(0), tz, m.group(4) or "", True)


def datetime_of(term: Term | None) -> DateTime | None:
    if isinstance(term, Literal):
        if term.datatype == XSD_DATETIME:
            return parse_datetime(term.lexical)
        if term.datatype == XSD_DATE:
            return parse_date(term.lexical)
    return None


_FOURTEEN_H = 14 * 60


def compare_datetimes(a: DateTime, b: DateTime) -> int:
    """-1/0/1 per XSD 1.1 order; raises ExprError when indeterminate (one
    value with and one without timezone, within 14 hours)."""
    if (a.tz is None) == (b.tz is None):
        x, y = a.instant(), b.instant()
        return (x > y) - (x < y)
    if a.tz is None:
        return -compare_datetimes(b, a)
    # a has a timezone, b has none: b ranges over [b at +14:00, b at -14:00]
    x = a.instant()
    lo, hi = b.instant(_FOURTEEN_H), b.instant(-_FOURTEEN_H)
    if x < lo:
        return -1
    if x > hi:
        return 1
    raise ERR.with_traceback(None)


def format_timezone_duration(tz: int) -> str:
    if tz == 0:
        return "PT0S"
    sign = "-" if tz < 0 else ""
    tz = abs(tz)
    h, m = divmod(tz, 60)
    return sign + "PT" + (f"{h}H" if h else "") + (f"{m}M" if m else "")


# ---------------------------------------------------------------- term classes


# category codes of literals for comparison / ordering
CAT_NUMERIC, CAT_STRING, CAT_LANG, CAT_BOOLEAN, CAT_DATETIME, CAT_DATE, CAT_OTHER = range(7)


def _literal_value(t: Literal) -> tuple[int, object]:
    """(category, value) of a literal; CAT_OTHER (value None) for unknown
    datatypes and invalid lexical forms of known ones."""
    dt = t.datatype
    if dt == XSD_STRING:
        return CAT_STRING, t.lexical
    if dt == RDF_LANGSTRING:
        return CAT_LANG, t.lexical
    if dt in NUMERIC_TYPES:
        n = parse_numeric(t.lexical, dt)
        return (CAT_NUMERIC, n) if n is not None else (CAT_OTHER, None)
    if dt == XSD_BOOLEAN:
        b = parse_boolean(t.lexical)
        return (CAT_BOOLEAN, b) if b is not None else (CAT_OTHER, None)
    if dt == XSD_DATETIME:
        d = parse_datetime(t.lexical)
        return (CAT_DATETIME, d) if d is not None else (CAT_OTHER, None)
    if dt == XSD_DATE:
        d = parse_date(t.lexical)
        return (CAT_DATE, d) if d is not None else (CAT_OTHER, None)
    return CAT_OTHER, None


def _num_cmp(a: Num, b: Num) -> int | None:
    """-1/0/1, None when unordered (NaN)."""
    _, x, y = promote(a, b)
    if x != x or y != y:  # NaN
        return None
    return (x > y) - (x < y)


def term_equal(a: Term, b: Term) -> bool:
    """SPARQL ``=``: value equality for known literal types, RDFterm-equal
    otherwise (error for two different literals of unknown types)."""
    if a == b:
        if isinstance(a, Literal) and a.datatype in (XSD_DOUBLE, XSD_FLOAT):
            n = numeric_of(a)
            if n is not None and n.v != n.v:
                return False  # NaN != NaN
        return True
    if not isinstance(a, Literal) or not isinstance(b, Literal):
        return False
    ca, va = _literal_value(a)
    cb, vb = _literal_value(b)
    if ca == CAT_OTHER or cb == CAT_OTHER:
        raise ERR.with_traceback(None)
    if ca != cb:
        return False
    if ca == CAT_NUMERIC:
        return _num_cmp(va, vb) == 0
    if ca == CAT_LANG:
        return va == vb and a.lang.lower() == b.lang.lower()
    if ca in (CAT_DATETIME, CAT_DATE):
        return compare_datetimes(va, vb) == 0
    return va == vb


def term_less(a: Term, b: Term) -> int:
    """-1/0/1 for the SPARQL ``<`` family; raises ExprError when the pair has
    no '<' operator (or is unordered: NaN)."""
    if not isinstance(a, Literal) or not isinstance(b, Literal):
        raise ERR.with_traceback(None)
    ca, va = _literal_value(a)
    cb, vb = _literal_value(b)
    if ca != cb or ca in (CAT_OTHER, CAT_LANG):
        raise ERR.with_traceback(None)
    if ca == CAT_NUMERIC:
        r = _num_cmp(va, vb)
        if r is None:
            raise ERR.with_traceback(None)
        return r
    if ca in (CAT_DATETIME, CAT_DATE):
        return compare_datetimes(va, vb)
    return (va > vb) - (va < vb)


def compare(op: str, a: Term, b: Term) -> bool:
    if op == "=":
        return term_equal(a, b)
    if op == "!=":
        return not term_equal(a, b)
    if op in ("<", ">", "<=", ">="):
        # NaN: every comparison is false, not an error
        na, nb = numeric_of(a), numeric_of(b)
        if na is not None and nb is not None and _num_cmp(na, nb) is None:
            return False
        r = term_less(a, b)
        if op == "<":
            return r < 0
        if op == ">":
            return r > 0
        if op == "<=":
            return r <= 0
        return r >= 0
    raise ERR.with_traceback(None)


def ebv(t: Term) -> bool:
    """Effective boolean value (17.2.2)."""
    if not isinstance(t, Literal):
        raise ERR.with_traceback(None)
    dt = t.datatype
    if dt == XSD_BOOLEAN:
        return parse_boolean(t.lexical) is True
    if dt == XSD_STRING or dt == RDF_LANGSTRING:
        return len(t.lexical) > 0
    if dt in NUMERIC_TYPES:
        n = parse_numeric(t.lexical, dt)
        if n is None:
            return False
        return not (n.v == 0 or n.v != n.v)
    raise ERR.with_traceback(None)


# ---------------------------------------------------------------- ORDER BY

_NAN_SLOT = 0
_NUM_SLOT = 1


def order_key(t: Term | None) -> tuple:
    """A total-order key for ORDER BY / MIN / MAX: unbound < blank nodes <
    IRIs < literals; literals by value where '<' is defined (numerics,
    strings, booleans, dateTimes, dates), grouped by category, then a
    deterministic tie-break by datatype and lexical form."""
    if t is None:
        return (0,)
    if isinstance(t, BNode):
        return (1, t.label)
    if isinstance(t, IRI):
        return (2, t.value)
    cat, v = _literal_value(t)
    if cat == CAT_NUMERIC:
        x = v.v
        if isinstance(x, float) and x != x:
            return (3, CAT_NUMERIC, _NAN_SLOT, 0, t.datatype, t.lexical)
        return (3, CAT_NUMERIC, _NUM_SLOT, x, t.datatype, t.lexical)
    if cat == CAT_STRING:
        return (3, CAT_STRING, t.lexical)
    if cat == CAT_LANG:
        return (3, CAT_LANG, t.lexical, t.lang or "")
    if cat == CAT_BOOLEAN:
        return (3, CAT_BOOLEAN, v, t.lexical)
    if cat in (CAT_DATETIME, CAT_DATE):
        return (3, cat, v.instant(), t.lexical)
    return (3, CAT_OTHER, t.datatype, t.lexical)


_QUOTIENT_CHUNK = 1 << 16


def decimal_quotients(num: np.ndarray, den: np.ndarray) -> pa.Array:
    """Canonical lexical forms of the xsd:decimal quotients ``num / den`` (int64, ``den`` > 0,
    ``|num|`` < 2^62), as :func:`_decimal_div` and :func:`format_decimal` write them
    (28 significant digits, half-even rounding, trailing zeros dropped), column-wise:
    long division digit by digit over the whole column (AVG of integers per group)."""
    num = np.asarray(num, dtype=np.int64)
    den = np.asarray(den, dtype=np.int64)
    n = len(num)
    if n == 0:
        return pa.array([], pa.large_string())
    if n > _QUOTIENT_CHUNK:  # (a digit matrix of ~50 bytes a row and its temporaries: in chunks)
        return pa.concat_arrays([decimal_quotients(num[i:i + _QUOTIENT_CHUNK], den[i:i + _QUOTIENT_CHUNK])
                                 for i in range(0, n, _QUOTIENT_CHUNK)])
    neg = num < 0
    a = np.abs(num)
    q, r = a // den, a % den
    d_int = np.where(q > 0, np.asarray(pc.utf8_length(pc.cast(pa.array(q), pa.large_string()))
                                       .to_numpy(zero_copy_only=False), dtype=np.int64), 0)
    width = DECIMAL_PREC + 21  # fraction digits enough for 28 significant ones after any leading zeros
    digits = np.zeros((n, width + 1), dtype=np.uint8)
    for k in range(width + 1):
        r = r * 10
        digits[:, k] = r // den
        r = r % den
    rest_nonzero = r != 0  # anything after the last digit computed
    first_nz = np.argmax(digits != 0, axis=1)
    keep = np.where(q > 0, DECIMAL_PREC - d_int, first_nz + DECIMAL_PREC)  # fraction digits kept
    keep = np.clip(keep, 0, width)
    rows = np.arange(n)
    nxt = digits[rows, keep]
    after = (np.cumsum(digits[:, ::-1] != 0, axis=1)[:, ::-1])  # nonzero digits from a position on
    tail = np.where(keep + 1 <= width, after[rows, np.minimum(keep + 1, width)] > 0, False) | rest_nonzero
    last = np.where(keep > 0, digits[rows, np.maximum(keep - 1, 0)], q % 10)
    up = (nxt > 5) | ((nxt == 5) & (tail | (last % 2 == 1)))
    col = np.arange(width + 1)
    digits[col[None, :] >= keep[:, None]] = 0
    # round up: the run of 9s before the last kept digit becomes 0s, the digit before it +1
    ui = np.flatnonzero(up)
    if len(ui):
        sub = digits[ui]
        inside = col[None, :] < keep[ui, None]
        non9 = (sub != 9) & inside
        has = non9.any(axis=1)
        pos = np.where(has, width - np.argmax(non9[:, ::-1], axis=1), -1)  # the last non-9 kept digit
        sub[(col[None, :] > pos[:, None]) & inside] = 0
        hit = np.flatnonzero(has)
        sub[hit, pos[hit]] += 1
        digits[ui] = sub
        q[ui[~has]] += 1
    frac = np.ascontiguousarray((digits[:, :width] + 48).astype(np.uint8))
    offs = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    fs = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offs), pa.py_buffer(frac))
    fs = pc.utf8_rtrim(fs, characters="0")
    fs = pc.if_else(pc.equal(fs, ""), "0", fs)
    zero = (q == 0) & np.asarray(pc.equal(fs, "0").to_numpy(zero_copy_only=False), dtype=bool)
    sign = pa.array(np.where(neg & ~zero, "-", ""), pa.large_string())
    ip = pc.cast(pa.array(q), pa.large_string())
    dot, empty = pa.scalar(".", pa.large_string()), pa.scalar("", pa.large_string())
    return pc.binary_join_element_wise(sign, ip, dot, fs, empty)
