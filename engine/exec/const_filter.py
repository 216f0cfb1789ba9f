"""FILTER(?v = const), sameTerm(?v, const), ?v IN (consts): the constants as a seed binding.

Why: ``?s ?p ?o FILTER(?o = <x>)`` (or a variable predicate, or a path) evaluated the whole
pattern and then compared every row: 50-80 ms at 1M triples for a dozen answers, where a
pattern started from ``?o = <x>`` explores a handful of edges.

When exact: RDF term equality with an IRI, a simple (xsd:string) literal or a language-tagged
literal is term identity (another term is never equal to it, a literal of another datatype is
an error or false: the row is dropped either way), and the store keeps one canonical key per
such term (xsd:string folded into the simple literal, language tags in lower case), so
``?v = c`` holds exactly on the rows whose id of ?v is c's id. Numbers, dates and other
datatypes compare by value ("01"^^xsd:integer = 1.0): for an integer or decimal constant
(|value| < 2^52) the candidates are the store's numeric literals whose value in the
dictionary's numeric side array is the constant's (every numeric term equal to it by value is
among them; the FILTER run afterwards drops any other), from one vectorized pass over that
array; other datatypes keep the general path. ``sameTerm`` is term identity for any constant.
A variable the pattern may leave unbound keeps the general path (OPTIONAL, one UNION branch,
BIND, VALUES, sub-SELECT: :func:`engine.plan.filters.certain_vars`).

How: a top-level conjunct of that form over a variable the input binds in every solution gives
the seed ``{?v: ids of the constants}`` (several such conjuncts: their cross product, up to
SEED_MAX rows); the input is evaluated from that seed (a BGP explores from the bound ends, a
path starts there) and the whole FILTER expression still runs over those few rows, so the
other conjuncts (and the seeded one again) decide as before. Only for inputs whose seeded
evaluation is a join with the seed (no MINUS, GRAPH, VALUES, sub-SELECT, aggregates inside).
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from engine.exec.bindings import Bindings
from engine.kv.dictionary import numeric_values
from engine.plan.filters import certain_vars
from engine.plan.nodes import ExploreJoin, ExploreLeftJoin, PathJoin
from engine.sparql import algebra as A
from engine.terms import XSD

#: at most this many seed rows (the cross product of the constants of several conjuncts)
SEED_MAX = 256
#: how many FILTERs were answered from a seed (a spy for the tests)
TAKEN = [0]

# node types whose evaluation from a seed is the join of the seed with their solutions
_SEEDABLE = (A.BGP, A.PathPattern, A.Join, ExploreJoin, PathJoin, A.LeftJoin, ExploreLeftJoin,
             A.Union, A.Filter, A.Extend)

_MEMO: dict[int, tuple[object, object]] = {}


def exact_key(key: str) -> bool:
    """Whether ``=`` with this constant is term identity: an IRI, a simple literal, a
    language-tagged literal (canonical keys: xsd:string folded, tags lower-cased)."""
    if key.startswith("<"):
        return True
    if not key.startswith('"'):
        return False
    tail = key[key.rfind('"') + 1:]
    return tail == "" or tail.startswith("@")


def _seedable(node) -> bool:
    if not isinstance(node, _SEEDABLE):
        return False
    for attr in ("input", "left", "right"):
        sub = getattr(node, attr, None)
        if sub is not None and not isinstance(sub, A.PathPattern) and not _seedable(sub):
            return False
    return True


def _conjuncts(e):
    if isinstance(e, A.Call) and e.op == "&&":
        for a in e.args:
            yield from _conjuncts(a)
    else:
        yield e


_NUMBER_TYPES = tuple(f"^^<{XSD}{t}>" for t in ("integer", "decimal", "int", "long", "short", "byte",
                                                  "nonNegativeInteger", "positiveInteger", "nonPositiveInteger",
                                                  "negativeInteger", "unsignedLong", "unsignedInt",
                                                  "unsignedShort", "unsignedByte"))


def number_of(key: str) -> float | None:
    """The value of an integer / decimal constant small enough to be exact in a float (its
    equal terms are then exactly those whose side-array value is it), else None."""
    if not key.endswith(_NUMBER_TYPES):
        return None
    v = float(numeric_values(pa.array([key], pa.large_string()))[0])
    return v if np.isfinite(v) and abs(v) < 2.0**52 else None


def _var_consts(e) -> tuple[str, tuple] | None:
    """(variable, constants) when ``e`` is ``?v = c`` / ``c = ?v`` / sameTerm / ``?v IN
    (c, ...)`` with exact constants (a key, or ``(value,)`` for a number), else None."""
    if not isinstance(e, A.Call):
        return None
    op, args = e.op, e.args
    if op in ("=", "SAMETERM") and len(args) == 2:
        a, b = args
        if isinstance(b, A.Var):
            a, b = b, a
        if isinstance(a, A.Var) and isinstance(b, A.Const):
            c = _const(b.key, op == "SAMETERM")
            return None if c is None else (a.name, (c,))
        return None
    if op == "IN" and len(args) >= 2 and isinstance(args[0], A.Var):
        items = [_const(c.key, False) if isinstance(c, A.Const) else None for c in args[1:]]
        if all(c is not None for c in items):
            return args[0].name, tuple(dict.fromkeys(items))
    return None


def _const(key: str, same_term: bool):
    """A key equal exactly by id, ``(value,)`` for a number equal by value, else None."""
    if same_term or exact_key(key):
        return key
    v = number_of(key)
    return None if v is None else (v,)


def _ids(ctx, consts) -> list[int]:
    """Store ids of the terms equal to the constants (None: a number the dictionary cannot
    search by value)."""
    out: set[int] = set()
    for c in consts:
        if isinstance(c, tuple):
            find = getattr(getattr(ctx, "dictionary", None), "ids_of_number", None)
            if find is None:
                return None
            out.update(find(c[0]).tolist())
        else:
            i = int(ctx.lookup(c))
            if i >= 0:
                out.add(i)
    return sorted(out)


def _analysis(node: A.Filter):
    """[(variable, keys)] of the seeding conjuncts of this Filter (memoized per node)."""
    hit = _MEMO.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    out = []
    if _seedable(node.input):
        sure = certain_vars(node.input)
        seen = set()
        for c in _conjuncts(node.expr):
            got = _var_consts(c)
            if got is not None and got[0] in sure and got[0] not in seen:
                seen.add(got[0])
                out.append(got)
    if len(_MEMO) > 4096:
        _MEMO.clear()
    _MEMO[id(node)] = (node, out)
    return out


def seeded(ev, node: A.Filter) -> Bindings | None:
    """The Filter's rows evaluated from the seed of its constant conjuncts, None when it has
    none (the caller evaluates it as before)."""
    if ev._chunk is not None:
        return None  # (a LIMIT's chunk seeds the BGP below: a second seed would not reach it)
    parts = _analysis(node)
    if not parts:
        return None
    cols: list[tuple[str, list[int]]] = []
    size = 1
    for var, consts in sorted(parts, key=lambda p: len(p[1])):
        ids = _ids(ev.ctx, consts)
        if ids is None or size * max(len(ids), 1) > SEED_MAX:
            continue
        size *= len(ids)
        cols.append((var, ids))
        if size == 0:
            break
    if not cols:
        return None
    TAKEN[0] += 1
    if size == 0:  # a constant the store does not hold: no solution binds it
        from engine.exec.evaluate import pattern_vars  # noqa: PLC0415

        return Bindings.empty(pattern_vars(node.input))
    names = [v for v, _ in cols]
    rows = list(itertools.product(*(ids for _, ids in cols)))
    seed = Bindings({v: np.array([r[i] for r in rows], dtype=np.int64) for i, v in enumerate(names)}, len(rows))
    res = ev.eval(node.input, seed)
    if res.n == 0:
        return res
    return res.mask(ev.filter_rows(node.expr, res))
