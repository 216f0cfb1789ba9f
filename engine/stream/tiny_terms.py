"""FILTER / BIND / SELECT expressions over terms for the generated small-window paths.

Why: the generated instant (:mod:`engine.stream.tiny_gen`) and the maintained result
(:mod:`engine.stream.maintained`) decide numeric comparisons and arithmetic inline; a FILTER
on a string, an IRI, a language tag or a time, or a BIND of ``STR(?x)``, made them hand every
instant back (or not generate the query at all). Stream users filter on exactly those.

How: such an expression is decided by the executor's own scalar evaluator
(:class:`engine.exec.functions._Scalar`: SPARQL 1.1 section 17's type errors, effective boolean
values, RDF term vs value equality, simple literal vs ``xsd:string``, language tags, REGEX
flags through :func:`~engine.exec.functions.xpath_regex`), over the decoded terms of the
variables it reads -- once per distinct tuple of their term ids: a :class:`TermFn` is a dict
from that tuple (one id when the expression reads one variable) to the result, filled on a miss.
The result depends on the terms only (the functions taken are deterministic and read no query
context), and a stream's terms recur across instants, so an instant mostly pays one dict
look-up per row and expression. A FILTER's entry is its effective boolean value (True / False,
None for an error); a computed value's is its term's key (None for an error: unbound), written
as the ordinary path writes it (:func:`engine.terms.to_key`).

What is handed back (:class:`~engine.stream.tiny_ops.Undecided`: the instant takes the
ordinary path): an error where a ``xsd:dateTime`` / ``xsd:date`` takes part (an indeterminate
comparison of a time with and one without a time zone is an error in the scalar evaluator; the
ordinary path is the reference there), a regular expression the regex engine refuses (the
ordinary path reports it), a query-local term id.
"""

from __future__ import annotations

import dataclasses

from engine.errors import UnsupportedError
from engine.exec import functions as _fn
from engine.exec.context import LOCAL_BASE
from engine.exec.values import ExprError, datetime_of
from engine.sparql import algebra as A
from engine.stream.tiny_ops import Undecided
from engine.terms import XSD_DATE, XSD_DATETIME, Literal, from_key, to_key

__all__ = ["TermFn", "taken", "term_expr"]

#: the executor's functions taken here: deterministic, reading no query context (NOW reads the
#: instant, REPLACE the deadline, RAND / BNODE / UUID / STRUUID differ per call); IRI() reads the
#: query's BASE: taken as with none (:class:`_NoBase`; tiny_gen does not generate a query with a
#: BASE that calls it)
_OPS = frozenset({"IRI", "URI",
    "||", "&&", "!", "BOUND", "IF", "COALESCE", "IN", "NOT IN", "=", "!=", "<", ">", "<=", ">=",
    "STR", "LANG", "LANGMATCHES", "DATATYPE", "ABS", "CEIL", "FLOOR", "ROUND", "CONCAT", "STRLEN",
    "UCASE", "LCASE", "ENCODE_FOR_URI", "CONTAINS", "STRSTARTS", "STRENDS", "STRBEFORE",
    "STRAFTER", "YEAR", "MONTH", "DAY", "HOURS", "MINUTES", "SECONDS", "TIMEZONE", "TZ", "MD5",
    "SHA1", "SHA256", "SHA384", "SHA512", "STRLANG", "STRDT", "SAMETERM", "ISIRI", "ISURI",
    "ISBLANK", "ISLITERAL", "ISNUMERIC", "REGEX", "SUBSTR", "+", "-", "*", "/", "NEG", "POS",
})
#: entries a :class:`TermFn` keeps before it starts again (memory)
MAX_ENTRIES = 1 << 16
#: terms decoded per dictionary before the cache starts again
MAX_TERMS = 1 << 18
_TAKEN = [0]   # expressions decided here (misses evaluated), all queries (tests: the path is taken)


def taken() -> int:
    """Expression values computed by :class:`TermFn` (cache misses), all queries of the process."""
    return _TAKEN[0]


def term_expr(expr) -> bool:
    """Whether ``expr`` is made only of what :class:`TermFn` decides."""
    if isinstance(expr, (A.Var, A.Const)):
        return True
    if isinstance(expr, A.Call):
        return expr.op in _OPS and all(term_expr(a) for a in expr.args)
    if isinstance(expr, A.FunctionCall):   # the XSD casts (not an extension: f:timestamp reads the windows)
        return (expr.iri in _fn._CASTS and expr.iri not in _fn.EXTENSION_FUNCTIONS
                and all(term_expr(a) for a in expr.args))
    return False


def _zones(t, out: set) -> None:
    """Adds to ``out`` whether the time ``t`` (an ``xsd:dateTime`` / ``xsd:date``) has a zone."""
    if isinstance(t, Literal) and t.datatype in (XSD_DATETIME, XSD_DATE):
        d = datetime_of(t)
        if d is not None:
            out.add(d.tz is not None)


def _const_zones(expr, out: set) -> set:
    """The zones of the times among ``expr``'s constants; a cast to a time: both (its zone is
    the argument's)."""
    if isinstance(expr, A.Const):
        _zones(from_key(expr.key), out)
    elif isinstance(expr, (A.Call, A.FunctionCall)):
        if isinstance(expr, A.FunctionCall) and expr.iri in (XSD_DATETIME, XSD_DATE):
            out |= {True, False}
        for a in expr.args:
            _const_zones(a, out)
    return out


class _Terms(dict):
    """Term id -> decoded term of one dictionary (ids of stored terms never change)."""

    __slots__ = ("dictionary",)

    def __init__(self, dictionary):
        super().__init__()
        self.dictionary = dictionary

    def __missing__(self, i):
        if i >= LOCAL_BASE:
            raise Undecided   # a query-local term: not this dictionary's
        t = from_key(self.dictionary.key(i))
        if len(self) > MAX_TERMS:
            self.clear()
        self[i] = t
        return t


_TERMS: dict = {}


def _terms(dictionary) -> _Terms:
    got = _TERMS.get(id(dictionary))
    if got is None or got.dictionary is not dictionary:
        if len(_TERMS) > 8:
            _TERMS.clear()
        got = _TERMS[id(dictionary)] = _Terms(dictionary)
    return got


_UNDECIDED = object()   # a value whose instants are handed back


class _NoBase:
    """The scalar evaluator's query context here: no BASE (``IRI("rel")`` is ``<rel>``, as the
    executor makes it for a query without one)."""

    base = None


def reads_base(node) -> bool:
    """Whether ``node`` (a pattern or an expression, anywhere below) calls IRI() (its value
    depends on the query's BASE)."""
    if isinstance(node, A.Call) and node.op in ("IRI", "URI"):
        return True
    if isinstance(node, (tuple, list)):
        return any(reads_base(x) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return any(reads_base(getattr(node, f.name)) for f in dataclasses.fields(node))
    return False


class TermFn(dict):
    """One expression's values per tuple of its variables' term ids (a single id when it reads
    one variable; -1: unbound), evaluated on a miss by the executor's scalar evaluator.
    ``boolean``: the FILTER's effective boolean value (None: an error), else the value's key
    (None: an error). Bound to one dictionary (:meth:`bind`, by the query's id resolution)."""

    __slots__ = ("expr", "names", "boolean", "zones", "scalar", "terms")

    def __init__(self, expr, names: list[str], boolean: bool):
        super().__init__()
        self.expr = expr
        self.names = names          # the variables the key holds, in its order
        self.boolean = boolean
        self.zones = frozenset(_const_zones(expr, set()))   # the constant times' zones (with / without)
        self.scalar = _fn._Scalar(_NoBase, {})
        self.terms: _Terms | None = None

    def bind(self, dictionary) -> None:
        """Use ``dictionary``'s ids (entries of another dictionary's are dropped)."""
        t = self.terms
        if t is None or t.dictionary is not dictionary:
            self.clear()
            self.terms = _terms(dictionary)

    def __missing__(self, key):
        terms = self.terms
        if terms is None:
            raise Undecided
        ids = (key,) if len(self.names) == 1 else key
        env = {}
        for name, i in zip(self.names, ids, strict=True):
            if i >= 0:
                env[name] = terms[i]
        try:
            if self.boolean:
                got = self.scalar.ebv(self.expr, env)
            else:
                got = to_key(self.scalar.eval(self.expr, env))
        except ExprError as e:
            # (the executor raises one shared instance: its traceback would grow with every raise,
            # holding each frame alive)
            e.__traceback__ = None
            # a time with and one without a zone take part: the error may be an indeterminate
            # comparison (within 14 hours), which the ordinary path decides
            zones = set(self.zones)
            for t in env.values():
                _zones(t, zones)
            got = _UNDECIDED if len(zones) == 2 else None
        except UnsupportedError:
            got = _UNDECIDED   # the ordinary path reports it
        _TAKEN[0] += 1
        if got is _UNDECIDED:
            raise Undecided   # (not kept: each instant with this value is handed back)
        if len(self) > MAX_ENTRIES:
            self.clear()
        self[key] = got
        return got


def source(fn: TermFn, name: str, slot_of) -> str:
    """Python source of ``fn``'s value in generated code where ``fn`` is the global ``name``;
    ``slot_of(var)`` gives a variable's id source ("None" when the variable is never bound)."""
    parts = []
    for v in fn.names:
        s = slot_of(v)
        parts.append("-1" if s == "None" else s)
    key = parts[0] if len(parts) == 1 else "()" if not parts else "(" + "".join(p + ", " for p in parts) + ")"
    return f"{name}[{key}]"


def inline(expr, computed: dict):
    """``expr`` with the variables ``computed`` maps (BIND) replaced by their expressions."""
    if isinstance(expr, A.Var):
        return computed.get(expr.name, expr)
    if isinstance(expr, A.Call):
        return A.Call(expr.op, tuple(inline(a, computed) for a in expr.args))
    if isinstance(expr, A.FunctionCall):
        return A.FunctionCall(expr.iri, tuple(inline(a, computed) for a in expr.args))
    return expr
