"""GROUP BY with COUNT, and the HAVING above it, over the tuple-at-a-time path's solutions.

Why: on a small window the executor's GROUP BY turns every group's count into a term id
(an ``xsd:integer`` literal, interned -- a dictionary lookup per distinct count, since counts
are rarely stored terms) and HAVING then reads those literals back as numbers; on LSBench's
``GROUP BY ?post HAVING (COUNT(?liker) >= 3)`` over ~90 window triples that is most of an
instant. Here the counts stay integers until the groups HAVING keeps are known: the
comparison runs on the integer column and only the surviving groups' counts become terms.

Exact for what it takes (:meth:`CountGroup.of`, :func:`having`): grouping by plain variables;
``COUNT(*)``, ``COUNT(?v)``, ``COUNT(DISTINCT ?v)``; HAVING made of ``= != < > <= >=`` between
counts and numeric constants (``xsd:integer`` / ``xsd:decimal`` / ``xsd:double`` in their
plain lexical forms) joined by ``&&``, ``||``, ``!``. A count is always a bound
integer, so none of these raises a SPARQL error. Anything else is left to the executor.
"""

from __future__ import annotations

import math
import operator
import re
import struct
import threading
import weakref
from fractions import Fraction

import numpy as np

from engine.arrays import unique, unique_inverse
from engine.exec.bindings import Bindings, distinct_inverse, factorize, row_keys
from engine.exec.context import LOCAL_BASE
from engine.exec.result import UNBOUND
from engine.exec.values import format_double as _fmt_double
from engine.sparql import algebra as A
from engine.terms import XSD_INTEGER

__all__ = ["CountGroup", "expr_ids", "filter_mask", "having"]

_XSD = "http://www.w3.org/2001/XMLSchema#"
_CONST = re.compile(r'^"([^"\\]*)"\^\^<' + re.escape(_XSD) + r'(integer|decimal|double|float)>$')
_INT = re.compile(r"^[+-]?[0-9]+$")
_DEC = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$")
_DBL = re.compile(r"^([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?INF|NaN)$")
_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, ">": np.greater,
        "<=": np.less_equal, ">=": np.greater_equal}
_FLIP = {"=": "=", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


#: rows up to which a group's keys are found by one stable sort (engine.arrays.unique_inverse)
#: rather than the dense-range counting pass, whose set-up costs more on a window's rows
_SMALL_ROWS = 1024


class CountGroup:
    """A GROUP BY (plain variables) whose aggregates are all COUNTs, over the core's rows."""

    __slots__ = ("by", "aggs")

    def __init__(self, by: list[str], aggs: list[tuple[str, str | None, bool]]):
        self.by = by        # grouping variables (output name = input name)
        self.aggs = aggs    # (output var, counted var or None for *, distinct)

    @staticmethod
    def of(node: A.Group) -> CountGroup | None:
        by = []
        for expr, var in node.by:
            if not isinstance(expr, A.Var) or expr.name != var.name:
                return None
            by.append(var.name)
        aggs = []
        for var, agg in node.aggregates:
            if agg.name.upper() != "COUNT":
                return None
            if agg.arg is None:
                if agg.distinct:
                    return None
                aggs.append((var.name, None, False))
            elif isinstance(agg.arg, A.Var):
                aggs.append((var.name, agg.arg.name, bool(agg.distinct)))
            else:
                return None
        return CountGroup(by, aggs)

    def counts(self, rows: Bindings) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]:
        """(grouping columns, integer counts per aggregate variable, number of groups)."""
        n = rows.n
        if not self.by:
            gi = np.zeros(n, dtype=np.int64)
            ng = 1
            out = {}
        elif n == 0:
            return {v: np.zeros(0, dtype=np.int64) for v in self.by}, \
                {a: np.zeros(0, dtype=np.int64) for a, _, _ in self.aggs}, 0
        elif len(self.by) == 1:
            # one sort on a window's few hundred rows; the counting pass pays on large ones
            col = rows.col(self.by[0])
            uniq, gi = unique_inverse(col) if n <= _SMALL_ROWS else distinct_inverse(col)
            gi = gi.reshape(-1)
            ng = len(uniq)
            out = {self.by[0]: uniq}
        else:
            cols = [rows.col(v) for v in self.by]
            gi, ng = factorize(row_keys(cols))
            first = np.full(ng, n, dtype=np.int64)
            np.minimum.at(first, gi, np.arange(n, dtype=np.int64))
            out = {v: c[first] for v, c in zip(self.by, cols, strict=True)}
        counts = {}
        for name, arg, distinct in self.aggs:
            if arg is None:
                counts[name] = np.bincount(gi, minlength=ng)[:ng]
                continue
            ids = rows.col(arg)
            ok = ids >= 0
            g = gi[ok]
            if distinct and len(g):
                _, inv = distinct_inverse(ids[ok])
                k = int(inv.max()) + 1
                g = unique(g * k + inv.reshape(-1)) // k
            counts[name] = np.bincount(g, minlength=ng)[:ng]
        return out, counts, ng

    def run(self, rows: Bindings, ctx, keep=None) -> Bindings:
        """The group's solutions (counts as ``xsd:integer`` terms); ``keep``: a HAVING
        predicate over the integer counts (:func:`having`), applied before any term is made."""
        out, counts, ng = self.counts(rows)
        if keep is not None and ng:
            m = np.asarray(keep(counts, ng), dtype=bool)
            if not m.all():
                idx = np.flatnonzero(m)
                out = {v: c[idx] for v, c in out.items()}
                counts = {v: c[idx] for v, c in counts.items()}
                ng = len(idx)
        elif keep is not None:
            ng = 0
        cols = dict(out)
        for name, c in counts.items():
            cols[name] = _count_ids(c, ctx)
        return Bindings(cols, ng)


class NumericTerms:
    """The term ids of computed numbers (COUNTs, arithmetic BINDs: ``xsd:integer`` /
    ``xsd:double`` literals), kept across instants and queries for one dictionary. A key's
    store id never changes once the dictionary holds it; a key found absent stays absent until a
    term with the same numeric value is added (the ids added since the last call are read by
    their numeric values, vectorized, and those keys looked up again), so an instant makes its
    numbers' terms without a dictionary look-up (~10 us each, most of a small GROUP BY or BIND).
    Keys without a finite value that the dictionary also records (NaN, INF, integers past its
    exact range) are looked up every time."""

    #: keys remembered per dictionary before the memo starts again
    max_entries = 4096
    #: integers above this magnitude are looked up every time (the dictionary's numeric values
    #: stop at :data:`engine.exec.values.MAX_INTEGER_DIGITS` digits)
    exact_int = 10**15

    def __init__(self, dictionary):
        self._dic = dictionary
        self._ids: dict[str, int] = {}
        self._absent: dict[float, list[str]] = {}   # numeric value -> keys absent with it
        self._gone: set[str] = set()
        self._n = len(dictionary)
        self._lock = threading.Lock()
        self._values: ValueFilter | None = None   # built at the first key never seen

    def ids(self, items: list, ctx) -> list[int]:
        """The ids of ``items`` ((key, its numeric value or None), or None for unbound)."""
        dic = self._dic
        with self._lock:
            n = len(dic)
            if n != self._n:
                vf = self._values
                num = dic.numeric(np.arange(self._n, n, dtype=np.int64)) if vf is not None or self._absent else None
                if vf is not None:   # the filter follows the dictionary's additions
                    vf.add(num)
                if self._absent:   # terms were added: keys absent with their values looked up again
                    if len(num) <= 4096:
                        # an instant's new stream terms: the few absent values met by a set
                        # (NaN never equals a key: absent values are finite)
                        found = self._absent.keys() & set(num.tolist())
                    else:
                        num = num[np.isfinite(num)]
                        found = unique(num).tolist() if len(num) else ()
                    for v in found:
                        for k in self._absent.pop(v, ()):
                            self._gone.discard(k)
                self._n = n
            if len(self._ids) + len(self._gone) > self.max_entries:
                self._ids.clear()
                self._absent.clear()
                self._gone.clear()
            known, gone = self._ids, self._gone
            out = []
            for item in items:
                if item is None:
                    out.append(UNBOUND)
                    continue
                key, v = item
                i = known.get(key)
                if i is None:
                    if key in gone:
                        i = ctx.absent_term_id(key)
                    elif v is not None and not self._may_hold(v, ctx):
                        # no stored term has this value, so none has this key: absent without
                        # the dictionary's probe (~10 us warm, ~30 cold: a new reading's average)
                        gone.add(key)
                        self._absent.setdefault(v, []).append(key)
                        i = ctx.absent_term_id(key)
                    else:
                        i = ctx.lookup(key)
                        if i >= 0:
                            known[key] = i
                        else:
                            if v is not None:
                                gone.add(key)
                                self._absent.setdefault(v, []).append(key)
                            i = ctx.term_id(key)
                out.append(i)
            return out


    def _may_hold(self, v: float, ctx) -> bool:
        """Whether some term of the dictionary (its first ``self._n`` ids) may have the
        numeric value ``v`` (False: none has)."""
        vf = self._values
        if vf is None:
            if self._n > ValueFilter.max_build:
                return True   # (too large to scan once: looked up)
            vf = self._values = ValueFilter.of(self._dic, self._n, ctx.check_budget)
        return vf.may_hold(v)


class ValueFilter:
    """The finite numeric values of a dictionary's terms as a bit set of their hashes (one
    bit per value, false positives only): "no term has value v" is then decided without a
    look-up of the key, exactly -- a term whose key is a number's canonical form has that
    number as its numeric value. Fixed size: as values accumulate the bits fill and more
    answers are "maybe" (a look-up, as without the filter)."""

    #: log2 of the bits (1 MiB)
    bits_log = 23
    #: dictionaries larger than this are not scanned to build a filter
    max_build = 1 << 21
    _MUL = 0x9E3779B97F4A7C15

    def __init__(self):
        self._bits = bytearray(1 << (self.bits_log - 3))
        self._shift = 64 - self.bits_log

    @classmethod
    def of(cls, dictionary, n: int, check=None) -> ValueFilter:
        """The filter of the dictionary's first ``n`` ids (~75 ms per million terms, once);
        ``check`` (the query's deadline) is called between chunks of a million."""
        vf = cls()
        flags = np.zeros(1 << vf.bits_log, dtype=bool)
        for a in range(0, n, 1 << 20):
            if check is not None:
                check()
            num = dictionary.numeric(np.arange(a, min(n, a + (1 << 20)), dtype=np.int64))
            num = num[np.isfinite(num)]
            if len(num):
                flags[vf._slots(num)] = True
        vf._bits[:] = np.packbits(flags, bitorder="little").tobytes()
        return vf

    def _slots(self, num: np.ndarray) -> np.ndarray:
        x = (num + 0.0).view(np.uint64)   # (+ 0.0: -0.0 and 0.0 are one value)
        return ((x * np.uint64(self._MUL)) >> np.uint64(self._shift)).astype(np.int64)

    def add(self, num: np.ndarray) -> None:
        num = np.asarray(num, dtype=np.float64)
        bits = self._bits
        if len(num) <= 64:   # an instant's few new terms: by scalars (a scatter's set-up costs more)
            for v in num.tolist():
                if v - v == 0.0:   # (finite)
                    h = self._slot(v)
                    bits[h >> 3] |= 1 << (h & 7)
            return
        num = num[np.isfinite(num)]
        if len(num):
            h = self._slots(num)
            arr = np.frombuffer(bits, dtype=np.uint8)   # (a view: written in place)
            np.bitwise_or.at(arr, h >> 3, np.left_shift(np.uint8(1), (h & 7).astype(np.uint8)))

    def _slot(self, v: float) -> int:
        x = struct.unpack("=Q", struct.pack("=d", v + 0.0))[0]   # (the bits .view reads)
        return ((x * self._MUL) & 0xFFFFFFFFFFFFFFFF) >> self._shift

    def may_hold(self, v: float) -> bool:
        h = self._slot(v)
        return bool(self._bits[h >> 3] >> (h & 7) & 1)


_DOUBLE_ITEMS: dict[float, tuple] = {}   # non-zero finite double -> its item (readings repeat)


def _num_item(v):
    """(key, value) of a computed int / float for :class:`NumericTerms`; None if another type.
    A double's canonical form (~3 us to write) is kept for the next instants (not for zeros:
    ``-0.0 == 0.0`` as dictionary keys, but their forms differ)."""
    t = type(v)
    if t is int:
        return f'"{v}"^^<{XSD_INTEGER}>', (float(v) if -NumericTerms.exact_int < v < NumericTerms.exact_int else None)
    if t is float:
        got = _DOUBLE_ITEMS.get(v)
        if got is not None:
            return got
        item = f'"{_fmt_double(v)}"^^<{_XSD}double>', (v if math.isfinite(v) else None)
        if v and item[1] is not None:
            if len(_DOUBLE_ITEMS) >= 4096:
                _DOUBLE_ITEMS.clear()
            _DOUBLE_ITEMS[v] = item
        return item
    return None


_NUMERIC_TERMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def numeric_terms(dictionary) -> NumericTerms:
    got = _NUMERIC_TERMS.get(dictionary)
    if got is None:
        got = _NUMERIC_TERMS.setdefault(dictionary, NumericTerms(dictionary))
    return got


#: groups up to which a count column's distinct values are found by a dict (Python per group,
#: not per triple): below a few hundred values that beats a sort's ~6 numpy calls
_SMALL_GROUPS = 256


def _count_ids(counts: np.ndarray, ctx) -> np.ndarray:
    if not len(counts):
        return np.zeros(0, dtype=np.int64)
    if len(counts) <= _SMALL_GROUPS:
        lst = counts.tolist()
        u = list(dict.fromkeys(lst))
        got = dict(zip(u, numeric_terms(ctx.dictionary).ids([_num_item(c) for c in u], ctx), strict=True))
        return np.array([got[c] for c in lst], dtype=np.int64)
    uniq, inv = distinct_inverse(counts)
    ids = np.array(numeric_terms(ctx.dictionary).ids([_num_item(c) for c in uniq.tolist()], ctx), dtype=np.int64)
    return ids[inv.reshape(-1)]


def _number(key: str):
    """A numeric constant's exact value (int / Fraction) or its double (float); None otherwise."""
    m = _CONST.match(key)
    if m is None:
        return None
    lex, dt = m.group(1), m.group(2)
    if dt == "integer":
        return int(lex) if _INT.match(lex) else None
    if dt == "decimal":
        return Fraction(lex) if _DEC.match(lex) else None
    if dt == "float" or not _DBL.match(lex):
        return None   # (a count compared with a float is rounded to a float first: the executor's)
    return float(lex.replace("INF", "inf"))


def having(expr, group: CountGroup):
    """``expr`` as a function (counts, n) -> bool array over the groups, or None when it is not
    made of comparisons between counts and numeric constants."""
    names = {a for a, _, _ in group.aggs}
    if isinstance(expr, A.Call):
        op = expr.op
        if op in ("&&", "||") and len(expr.args) == 2:
            a, b = having(expr.args[0], group), having(expr.args[1], group)
            if a is None or b is None:
                return None
            if op == "&&":
                return lambda c, n: a(c, n) & b(c, n)
            return lambda c, n: a(c, n) | b(c, n)
        if op == "!" and len(expr.args) == 1:
            a = having(expr.args[0], group)
            return None if a is None else (lambda c, n: ~a(c, n))
        if op in _CMP and len(expr.args) == 2:
            left, right = expr.args
            if isinstance(left, A.Const) and isinstance(right, A.Var):
                left, right, op = right, left, _FLIP[op]
            if not isinstance(left, A.Var) or left.name not in names:
                return None
            if isinstance(right, A.Var):
                if right.name not in names:
                    return None
                f, ln, rn = _CMP[op], left.name, right.name
                return lambda c, n: f(c[ln], c[rn])
            if isinstance(right, A.Const):
                return _against(left.name, op, _number(right.key))
    return None


def _against(name: str, op: str, v):
    """``count op v``, exactly: an integer count against an exact value by integer
    thresholds, against a double as doubles (a count is exact as a double)."""
    if v is None:
        return None
    if isinstance(v, float):
        f = _CMP[op]
        return lambda c, n: f(c[name].astype(np.float64), v)
    if isinstance(v, Fraction) and v.denominator != 1:
        lo, hi = math.floor(v), math.ceil(v)   # no integer equals v
        if op == "=":
            return lambda c, n: np.zeros(n, dtype=bool)
        if op == "!=":
            return lambda c, n: np.ones(n, dtype=bool)
        op, v = {"<": ("<=", lo), "<=": ("<=", lo), ">": (">=", hi), ">=": (">=", hi)}[op]
    f, k = _CMP[op], max(min(int(v), 1 << 62), -(1 << 62))   # counts are far below 2^62
    return lambda c, n: f(c[name], k)


# ---------------------------------------------------------------- FILTER over a few rows

#: rows x operators up to which a FILTER runs here (Python per row and operator, ~0.3 us
#: each) rather than through the executor's vectorized evaluator (a fixed ~20-50 us per
#: operator and leaf): measured on CityBench, 9 rows x 5 operators 2x faster here, 297 rows
#: x 13 operators 1.6x faster there
FILTER_WORK = 1024

_NONNUM = object()   # an IRI, blank node or non-numeric literal: arithmetic on it is a type error
_OTHER = object()    # a value these closures do not decide (ill-typed, xsd:float, derived types)
_TERM = re.compile(r'^"([^"\\]*)"\^\^<' + re.escape(_XSD) + r'([A-Za-z]+)>$')


#: the types derived from xsd:integer (XPath: integers in arithmetic and comparisons), by range
_INT_RANGE = {
    "long": (-(1 << 63), (1 << 63) - 1), "int": (-(1 << 31), (1 << 31) - 1), "short": (-(1 << 15), (1 << 15) - 1),
    "byte": (-128, 127), "unsignedLong": (0, (1 << 64) - 1), "unsignedInt": (0, (1 << 32) - 1),
    "unsignedShort": (0, 65535), "unsignedByte": (0, 255), "nonNegativeInteger": (0, None),
    "positiveInteger": (1, None), "nonPositiveInteger": (None, 0), "negativeInteger": (None, -1),
}


class Undecided(Exception):
    """A row holds a value the compiled FILTER does not decide: the executor's FILTER runs."""


def _value(key: str | None):
    """A term's numeric value: int (xsd:integer), Fraction (xsd:decimal), float (xsd:double);
    None unbound, _NONNUM for terms that are no number, _OTHER for the undecided rest."""
    if key is None:
        return None
    if key[0] != '"':
        return _NONNUM   # IRI, blank node
    m = _TERM.match(key)
    if m is None:
        return _NONNUM if (key.endswith('"') or '"@' in key or key.endswith("#string>")
                           or key.endswith("#langString>")) else _OTHER
    lex, dt = m.group(1), m.group(2)
    if dt == "integer" or dt in _INT_RANGE:
        if not _INT.match(lex):
            return _OTHER
        v = int(lex)
        lo, hi = _INT_RANGE.get(dt, (None, None))
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            return _OTHER   # out of its type's range: ill-typed, the executor's
        return v
    if dt == "decimal":
        return Fraction(lex) if _DEC.match(lex) else _OTHER
    if dt == "double":
        return float(lex.replace("INF", "inf")) if _DBL.match(lex) else _OTHER
    if dt in ("boolean", "string", "dateTime", "date", "time", "duration"):
        return _NONNUM
    return _OTHER


class _Values:
    """Term id -> numeric value, per store dictionary (ids of stored terms never change)."""

    def __init__(self):
        self._by: dict[int, tuple] = {}   # id(dictionary) -> (dictionary, {term id: value})

    def column(self, ids: np.ndarray, ctx) -> list:
        d = ctx.dictionary
        got = self._by.get(id(d))
        if got is None or got[0] is not d or len(got[1]) > 1_000_000:
            if len(self._by) > 8:
                self._by.clear()
            got = self._by[id(d)] = (d, {})
        vals = got[1]   # (this dictionary's, whatever other threads do meanwhile)
        lst = ids.tolist()
        miss = [i for i in dict.fromkeys(lst) if i not in vals and i >= 0]
        if miss:
            if len(miss) <= 16 and max(miss) < LOCAL_BASE:
                # an instant's few new readings: a scalar read each, not a batch decode's ~12
                # numpy calls on a one- or two-element array
                keys = [d.key(i) for i in miss]
            else:
                keys = ctx.keys(np.array(miss, dtype=np.int64))
            for i, k in zip(miss, keys, strict=True):
                v = _value(k)
                if i < LOCAL_BASE:
                    vals[i] = v
                else:   # a query-local (computed) term: this query's only
                    return [_value(k) for k in ctx.keys(ids)]
        return [vals[i] if i >= 0 else None for i in lst]


_VALUES = _Values()


def _num(a, b):
    """Both operands as XPath promotes them: a double on either side makes both doubles."""
    if type(a) is float or type(b) is float:
        try:
            return float(a), float(b)
        except OverflowError:
            raise Undecided from None
    return a, b


def _rowwise(fa, fb, op):
    """A binary numeric operator row by row: ``op(a, b)`` on two numbers; an unbound or
    non-numeric operand gives a type error (None); a value only the executor decides
    (:data:`_OTHER`) raises :class:`Undecided`, as may ``op``."""
    def f(env):
        out = []
        for a, b in zip(fa(env), fb(env), strict=True):
            if a is _OTHER or b is _OTHER:
                raise Undecided
            if a is None or b is None or a is _NONNUM or b is _NONNUM:
                out.append(None)   # a type error
            else:
                out.append(op(a, b))
        return out
    return f


def _arith(op, fa, fb):
    fn = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op]
    return _rowwise(fa, fb, lambda a, b: fn(*_num(a, b)))


def _divide(a, b):
    """``a / b`` where an operand is a double (IEEE division: x/0 is an infinity or NaN); an
    integer or decimal quotient (a decimal) is the executor's."""
    if type(a) is not float and type(b) is not float:
        raise Undecided
    a, b = _num(a, b)
    if b == 0.0:
        return math.nan if a == 0.0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)
    try:
        return a / b
    except OverflowError:
        raise Undecided from None


def _div(fa, fb):
    return _rowwise(fa, fb, _divide)


def _neg(fa):
    def f(env):
        out = []
        for a in fa(env):
            if a is _OTHER:
                raise Undecided
            out.append(None if a is None or a is _NONNUM else -a)
        return out
    return f


def _compare(op, fa, fb):
    fn = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
          ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}[op]

    def f(env):
        out = []
        for a, b in zip(fa(env), fb(env), strict=True):
            if a is None or b is None:
                out.append(None)   # an unbound operand (or an arithmetic error): an error
            elif a is _NONNUM or b is _NONNUM or a is _OTHER or b is _OTHER:
                raise Undecided    # comparisons of other terms: the executor's
            else:
                a, b = _num(a, b)
                out.append(fn(a, b))
        return out
    return f


def _logic(op, fa, fb):
    def f(env):
        out = []
        for a, b in zip(fa(env), fb(env), strict=True):
            if op == "&&":
                out.append(False if a is False or b is False else True if a is True and b is True else None)
            else:
                out.append(True if a is True or b is True else False if a is False and b is False else None)
        return out
    return f


def _not(fa):
    def f(env):
        return [None if a is None else not a for a in fa(env)]
    return f


def _var(name):
    def f(env):
        return env.column(name)
    return f


def _bound(name):
    def f(env):
        c = env.cols.get(name)
        return [False] * env.n if c is None else (c >= 0).tolist()
    return f


def _const(v):
    def f(env):
        return [v] * env.n
    return f


def _compile(expr, boolean: bool):
    """``expr`` as a closure env -> list per row (bool / None for a FILTER error when
    ``boolean``, else numeric values), or None when it is not of the forms decided here."""
    if isinstance(expr, A.Var):
        return None if boolean else _var(expr.name)
    if isinstance(expr, A.Const):
        if boolean:
            return None
        v = _value(expr.key)
        return None if v is None or v is _NONNUM or v is _OTHER else _const(v)
    if not isinstance(expr, A.Call):
        return None
    op, args = expr.op, expr.args
    if boolean:
        if op in ("&&", "||") and len(args) == 2:
            a, b = _compile(args[0], True), _compile(args[1], True)
            return None if a is None or b is None else _logic(op, a, b)
        if op == "!" and len(args) == 1:
            a = _compile(args[0], True)
            return None if a is None else _not(a)
        if op == "BOUND" and len(args) == 1 and isinstance(args[0], A.Var):
            return _bound(args[0].name)
        if op in _CMP and len(args) == 2:
            a, b = _compile(args[0], False), _compile(args[1], False)
            return None if a is None or b is None else _compare(op, a, b)
        return None
    if op in ("+", "-", "*") and len(args) == 2:
        a, b = _compile(args[0], False), _compile(args[1], False)
        return None if a is None or b is None else _arith(op, a, b)
    if op == "/" and len(args) == 2:
        a, b = _compile(args[0], False), _compile(args[1], False)
        return None if a is None or b is None else _div(a, b)
    if op == "NEG" and len(args) == 1:
        a = _compile(args[0], False)
        return None if a is None else _neg(a)
    if op == "POS" and len(args) == 1:
        return _compile(args[0], False)
    return None


def _size(expr) -> int:
    """Operators and leaves of an expression."""
    if isinstance(expr, A.Call):
        return 1 + sum(_size(a) for a in expr.args)
    return 1


class _Env:
    __slots__ = ("cols", "n", "ctx", "_memo", "spread")

    def __init__(self, cols, n, ctx, spread: Spread | None = None):
        self.cols, self.n, self.ctx, self._memo, self.spread = cols, n, ctx, {}, spread

    def doubles(self, name: str) -> np.ndarray:
        got = self._memo.get(("d", name))
        if got is None:
            sp = self.spread
            part = None if sp is None else sp.parts.get(name)
            if part is None:
                got = _doubles(self, name)
            else:   # the component's column decoded (or kept), then spread as its ids were
                arr, dbl = sp.doubles(part[0], self.ctx)
                got = (spread(arr, part[1], part[2]), dbl)
            self._memo[("d", name)] = got
        return got

    def column(self, name: str) -> list:
        got = self._memo.get(name)
        if got is None:
            c = self.cols.get(name)
            got = [None] * self.n if c is None else _VALUES.column(np.asarray(c), self.ctx)
            self._memo[name] = got
        return got


_COMPILED: dict = {}


def filter_mask(expr, cols: dict, n: int, ctx, factors: Spread | None = None) -> np.ndarray | None:
    """The FILTER's mask over ``n`` rows (``n`` x its size <= :data:`FILTER_WORK`) when ``expr`` is made of
    comparisons, ``+ - *`` and unary minus over variables and numeric constants, ``&& || !``
    and ``BOUND`` -- with XPath's promotions (integers exact, decimals exact, a double operand
    makes both doubles) and SPARQL's errors (unbound or non-numeric operands) -- and every row's
    values are decided here; None otherwise (the executor's evaluator then runs). ``factors``:
    how ``cols`` were spread from the core's components (:class:`Spread`), for the doubles."""
    got = _COMPILED.get(id(expr))
    if got is None or got[0] is not expr:
        if len(_COMPILED) > 4096:
            _COMPILED.clear()
        got = _COMPILED[id(expr)] = (expr, _compile(expr, True), _size(expr))
    f = got[1]
    if f is None:
        return None
    if n * got[2] > FILTER_WORK // 8:
        m = filter_mask_doubles(expr, cols, n, ctx, factors)
        if m is not None or n * got[2] > FILTER_WORK:
            return m
    try:
        vals = f(_Env(cols, n, ctx))
    except Undecided:
        return None
    return np.fromiter((v is True for v in vals), dtype=bool, count=n)




def expr_ids(expr, cols: dict, n: int, ctx) -> np.ndarray | None:
    """The ids of an arithmetic expression's value per row (``BIND``, ``SELECT (expr AS ?v)``)
    over ``n`` rows (``n`` x its size <= :data:`FILTER_WORK`): integers and doubles written as
    the executor writes them, errors unbound; None when the expression is not arithmetic of the
    forms above or a row's value is not decided here (a decimal result, another term)."""
    if not isinstance(expr, A.Call) or expr.op not in ("+", "-", "*", "/", "NEG"):
        return None
    key = ("expr", id(expr))
    got = _COMPILED.get(key)
    if got is None or got[0] is not expr:
        if len(_COMPILED) > 4096:
            _COMPILED.clear()
        got = _COMPILED[key] = (expr, _compile(expr, False), _size(expr))
    f = got[1]
    if f is None or n * got[2] > FILTER_WORK:
        return None
    try:
        vals = f(_Env(cols, n, ctx))
    except Undecided:
        return None
    items: list = []
    for v in vals:
        if v is None:
            items.append(None)
            continue
        it = _num_item(v)
        if it is None:
            return None   # a decimal: its canonical form is the executor's
        items.append(it)
    return np.asarray(numeric_terms(ctx.dictionary).ids(items, ctx), dtype=np.int64)


# ---------------------------------------------------------------- FILTER over doubles, vectorized


def _has_var(expr) -> bool:
    if isinstance(expr, A.Var):
        return True
    return isinstance(expr, A.Call) and any(_has_var(a) for a in expr.args)


_VOPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


def _vcompile(expr, boolean: bool):
    """``expr`` as a closure env -> numpy column computed in doubles, or None when it is not of
    the forms below. A numeric closure returns ``(column, doubles)``: ``doubles`` when every
    row's value is an ``xsd:double``. An operator with a double operand is a double operation
    in XPath (the other operand, integer or decimal, cast to its nearest double): IEEE
    arithmetic and comparison, as numpy computes them. An operator whose operands may both be
    integers or decimals is exact in XPath: :class:`Undecided` (the row-wise closures). Constant
    sub-expressions are folded exactly first. A column holding anything but numbers (unbound,
    an IRI, a string) raises :class:`Undecided` too."""
    if boolean:
        if not isinstance(expr, A.Call):
            return None
        op, args = expr.op, expr.args
        if op in ("&&", "||") and len(args) == 2:
            a, b = _vcompile(args[0], True), _vcompile(args[1], True)
            if a is None or b is None:
                return None
            fn = np.logical_and if op == "&&" else np.logical_or
            return lambda env: fn(a(env), b(env))
        if op == "!" and len(args) == 1:
            a = _vcompile(args[0], True)
            return None if a is None else (lambda env: ~a(env))
        if op in _CMP and len(args) == 2 and (_has_var(args[0]) or _has_var(args[1])):
            both = _double_operands(args)
            if both is None:
                return None
            fn = _CMP[op]
            return lambda env: np.broadcast_to(fn(*both(env)), (env.n,))
        return None
    if not _has_var(expr):   # a constant (sub-)expression: its exact value, then as a double
        f = _compile(expr, False)
        if f is None:
            return None
        try:
            v = f(_Env({}, 1, None))[0]
        except Undecided:
            return None
        if v is None or v is _NONNUM or v is _OTHER:
            return None
        try:
            got = (float(v), type(v) is float)
        except OverflowError:
            return None
        return lambda env: got
    if isinstance(expr, A.Var):
        name = expr.name
        return lambda env: env.doubles(name)
    if not isinstance(expr, A.Call):
        return None
    op, args = expr.op, expr.args
    if op in _VOPS and len(args) == 2:
        both = _double_operands(args)
        if both is None:
            return None
        fn = _VOPS[op]

        def f(env):
            x, y = both(env)
            with np.errstate(all="ignore"):
                return fn(x, y), True
        return f
    if op == "NEG" and len(args) == 1:
        a = _vcompile(args[0], False)
        if a is None:
            return None

        def neg(env):
            x, dx = a(env)
            if not dx:
                raise Undecided   # (an integer or decimal zero negated is no -0.0)
            return np.negative(x), True
        return neg
    if op == "POS" and len(args) == 1:
        return _vcompile(args[0], False)
    return None


def _double_operands(args):
    """The two operands of a binary operator as a closure env -> (x, y) of double columns
    (None when either is not of :func:`_vcompile`'s forms). With neither operand a double the
    operation is exact in XPath: :class:`Undecided`."""
    a, b = _vcompile(args[0], False), _vcompile(args[1], False)
    if a is None or b is None:
        return None

    def both(env):
        (x, dx), (y, dy) = a(env), b(env)
        if not (dx or dy):
            raise Undecided
        return x, y
    return both


def _doubles(env, name: str) -> tuple[np.ndarray, bool]:
    c = env.cols.get(name)
    if c is None:
        raise Undecided
    return _doubles_of(np.asarray(c), env.ctx)[:2]


def _doubles_of(c: np.ndarray, ctx) -> tuple[np.ndarray, bool, bool]:
    """A column's values as doubles, whether all are ``xsd:double``, and whether every id is a
    stored term's (its values never change: the column's doubles may be kept). A column of a
    few rows (a window component's) is read row by row: no sort for its distinct ids."""
    if len(c) <= _FEW:
        lst = c.tolist()
        if lst and (min(lst) < 0):
            raise Undecided   # an unbound row: an error there, the row-wise closures decide it
        uniq, inv = c, None
    else:
        got = _DOUBLES.column(c, ctx)
        if got is not None:
            return got[0], got[1], True
        uniq, inv = distinct_inverse(c)
        if len(uniq) and int(uniq[0]) < 0:
            raise Undecided
        lst = None
    vals = _VALUES.column(uniq, ctx)
    dbl = True
    for v in vals:
        t = type(v)
        if t is not float:
            if t is not int and t is not Fraction:
                raise Undecided
            dbl = False
    try:
        arr = np.array([float(v) for v in vals] if not dbl else vals, dtype=np.float64)
    except OverflowError:
        raise Undecided from None
    if inv is None:
        return arr, dbl, not lst or max(lst) < LOCAL_BASE
    return arr[inv.reshape(-1)], dbl, not len(uniq) or int(uniq[-1]) < LOCAL_BASE


#: columns of at most this many rows are decoded row by row (a sort costs more below it)
_FEW = 32

_K_DBL, _K_EXACT, _K_UNDECIDED = 1, 2, 3   # kinds of term ids in :class:`_Doubles`


class _Doubles:
    """Stored term id -> its value as a double and its kind (an ``xsd:double``, an exact number,
    or undecided here), per store dictionary, as sorted numpy arrays: a column of a few hundred
    rows (CityBench C5's coordinates over its 297 join rows, new arrays every instant) is read
    by one ``searchsorted`` and two gathers, instead of a sort for its distinct ids and a
    Python loop over them. Misses go through :data:`_VALUES` and are inserted (a copy of the
    arrays: new stream values arrive every instant); at most :attr:`cap` ids are kept -- past it
    the arrays start again from the column at hand, so an insert copies at most ~300 KB. The
    arrays are replaced, never written in place, so a concurrent reader sees one consistent
    triple."""

    cap = 1 << 14

    def __init__(self):
        self._by: dict[int, tuple] = {}   # id(dictionary) -> (dictionary, ids, doubles, kinds)

    def column(self, c: np.ndarray, ctx) -> tuple[np.ndarray, bool] | None:
        """``(doubles, all xsd:double)`` of column ``c``; None when it holds a query-local id
        (the caller's own path); :class:`Undecided` for an unbound row or a non-number."""
        d = ctx.dictionary
        got = self._by.get(id(d))
        if got is None or got[0] is not d:
            got = (d, _EMPTY_I, _EMPTY_F, _EMPTY_K)
        _, ids, vals, kinds = got
        pos = np.searchsorted(ids, c)
        if len(ids):
            np.minimum(pos, len(ids) - 1, out=pos)
            hit = ids[pos] == c
            ok = bool(hit.all())
        else:
            hit, ok = None, False
        if not ok:
            miss = unique(c if hit is None else c[~hit])
            if int(miss[0]) < 0:
                raise Undecided   # an unbound row: the row-wise closures decide it
            if int(miss[-1]) >= LOCAL_BASE:
                return None
            if len(ids) + len(miss) > self.cap:   # full: start again from this column's ids (all
                ids, vals, kinds = _EMPTY_I, _EMPTY_F, _EMPTY_K   # of them: its hits go too)
                miss = unique(c)
            mv, mk = [], []
            for v in _VALUES.column(miss, ctx):
                t = type(v)
                if t is float:
                    mv.append(v)
                    mk.append(_K_DBL)
                    continue
                k = _K_UNDECIDED
                f = 0.0
                if t is int or t is Fraction:
                    try:
                        f, k = float(v), _K_EXACT
                    except OverflowError:
                        pass
                mv.append(f)
                mk.append(k)
            at = np.searchsorted(ids, miss)
            ids = np.insert(ids, at, miss)
            vals = np.insert(vals, at, np.array(mv, dtype=np.float64))
            kinds = np.insert(kinds, at, np.array(mk, dtype=np.int8))
            if len(ids) <= self.cap:
                if len(self._by) > 8:
                    self._by.clear()
                self._by[id(d)] = (d, ids, vals, kinds)
            pos = np.searchsorted(ids, c)
        k = kinds[pos]
        if len(k) and int(k.max()) == _K_UNDECIDED:
            raise Undecided
        return vals[pos], bool((k == _K_DBL).all())


_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)
_EMPTY_K = np.zeros(0, dtype=np.int8)
_DOUBLES = _Doubles()


def spread(col: np.ndarray, inner: int, outer: int) -> np.ndarray:
    """One component's column in the cross product of components: each value repeated for
    the ``inner`` rows of the components after it, the whole tiled for the ``outer`` ones
    before it."""
    if inner > 1:
        col = np.repeat(col, inner)
    if outer > 1:   # (np.tile's Python wrapper costs more than these three calls on a few rows)
        col = col.reshape(1, -1).repeat(outer, axis=0).reshape(-1)
    return col


class Spread:
    """How the tuple-at-a-time core's solutions were made from its connected components'
    columns (``parts``: variable -> (component column, inner, outer) of :func:`spread`), with
    the doubles of component columns kept by array identity.

    Why: a FILTER across a static component and the window's (CityBench C4: 99 cultural
    events x 3 location readings, 297 rows) read its coordinates as doubles over the product:
    a sort for the distinct ids and a decode per variable per instant, ~60 us each. Decoded per
    component column instead, the static component's columns -- the same arrays while the
    store snapshot is (:meth:`~engine.stream.tiny.TinyCore._base_solutions` keeps them) -- are
    decoded once, and an instant decodes the window's few rows and spreads the doubles
    (elementwise, so the same as decoding the product's columns)."""

    __slots__ = ("parts", "_kept")

    def __init__(self):
        self.parts: dict[str, tuple] = {}
        self._kept: dict[int, tuple] = {}   # id(column) -> (column, dictionary, doubles, all doubles)

    def doubles(self, col: np.ndarray, ctx) -> tuple[np.ndarray, bool]:
        got = self._kept.get(id(col))
        d = ctx.dictionary
        if got is not None and got[0] is col and got[1] is d:
            return got[2], got[3]
        arr, dbl, stored = _doubles_of(col, ctx)
        if stored:
            if len(self._kept) >= 64:
                self._kept.clear()
            self._kept[id(col)] = (col, d, arr, dbl)   # (the column kept alive: its id stays its own)
        return arr, dbl


def filter_mask_doubles(expr, cols: dict, n: int, ctx, factors: Spread | None = None) -> np.ndarray | None:
    """The FILTER's mask when every variable its arithmetic and comparisons read holds
    doubles (CityBench's coordinates and readings): one numpy operation per operator,
    whatever the rows; None otherwise."""
    key = ("vec", id(expr))
    got = _COMPILED.get(key)
    if got is None or got[0] is not expr:
        if len(_COMPILED) > 4096:
            _COMPILED.clear()
        got = _COMPILED[key] = (expr, _vcompile(expr, True))
    f = got[1]
    if f is None:
        return None
    try:
        m = f(_Env(cols, n, ctx, factors))
    except Undecided:
        return None
    return np.asarray(m, dtype=bool)
