"""Where a FILTER may be evaluated other than over its whole input.

A group ``{ P1 ... Pn FILTER(e) }`` is Filter(e, Join(P1..Pn)); joins are
associative and commutative, so the filter may run on any partial join that
binds every variable of ``e`` in every solution: the values it reads are the
same there, and each row it drops would only have been extended into rows it
drops later (multiset cardinality is kept). The rewrites merge a group of
plain BGPs into one BGP (engine/plan/rewrite.py), whose variables are bound in
every solution; the executor then applies such a filter inside the BGP's step
order, right after the step that binds its last variable
(:func:`engine.exec.bgp.run_bgp`'s ``early``), instead of over the full
product of the group's parts.

A deterministic filter is also a function of its variables' values alone: over
many rows with few distinct tuples of them it is evaluated once per tuple
(engine/exec/evaluate.py ``Evaluator.filter_rows``).

Only *deterministic* expressions qualify for either: no EXISTS / NOT EXISTS
(it reads the graph with the whole solution substituted), no RAND, BNODE,
UUID, STRUUID (a fresh value per call), no extension function (unknown), no
aggregate.
"""

from __future__ import annotations

import dataclasses

from engine.plan.nodes import ExploreJoin, ExploreLeftJoin, PathJoin
from engine.plan.order import bgp_vars
from engine.sparql import algebra as A

#: built-ins whose value is not a function of their arguments
_FRESH = frozenset({"RAND", "BNODE", "UUID", "STRUUID"})
_XSD = "http://www.w3.org/2001/XMLSchema#"

_VARS: dict[int, tuple[object, tuple[str, ...] | None]] = {}


def deterministic_vars(expr) -> tuple[str, ...] | None:
    """The variables ``expr`` reads (first-use order) when its value per solution is a
    function of those variables' values alone; None otherwise. Memoized per expression
    object (plans are cached with their expressions)."""
    hit = _VARS.get(id(expr))
    if hit is not None and hit[0] is expr:
        return hit[1]
    out: dict[str, None] = {}
    ok = _walk(expr, out)
    got = tuple(out) if ok else None
    if len(_VARS) > 4096:
        _VARS.clear()
    _VARS[id(expr)] = (expr, got)
    return got


def _walk(e, out: dict) -> bool:
    if isinstance(e, A.Var):
        out[e.name] = None
        return True
    if isinstance(e, A.Const):
        return True
    if isinstance(e, A.Call):
        if e.op in _FRESH:
            return False
        return all(_walk(a, out) for a in e.args)
    if isinstance(e, A.FunctionCall):
        if not e.iri.startswith(_XSD):
            return False
        return all(_walk(a, out) for a in e.args)
    return False  # Exists, Aggregate, anything unknown


def bgp_filter_vars(expr, bgp_names) -> frozenset[str] | None:
    """The variables of a deterministic ``expr`` when the BGP binds them all (its
    variables are bound in every solution), else None: the filter may then run
    inside the BGP's step order."""
    names = deterministic_vars(expr)
    if not names:
        return None   # (no variable: a constant filter, decided once over the result)
    s = frozenset(names)
    return s if s <= frozenset(bgp_names) else None


def certain_vars(node) -> frozenset[str]:
    """Variables ``node`` binds in every solution (conservative: a subset of them). Not
    those of an OPTIONAL's right side, of one UNION branch only, of a BIND (an error
    leaves it unbound), of VALUES (UNDEF), of a subquery."""
    if isinstance(node, A.BGP):
        return frozenset(bgp_vars(node.triples))
    if isinstance(node, (A.Join, ExploreJoin)):
        return certain_vars(node.left) | certain_vars(node.right)
    if isinstance(node, PathJoin):
        return certain_vars(node.left) | certain_vars(node.right)
    if isinstance(node, A.PathPattern):
        return frozenset(t.name for t in (node.s, node.o) if isinstance(t, A.Var))
    if isinstance(node, (A.LeftJoin, ExploreLeftJoin, A.Minus)):
        return certain_vars(node.left)
    if isinstance(node, A.Union):
        return certain_vars(node.left) & certain_vars(node.right)
    if isinstance(node, (A.Filter, A.Extend)):
        return certain_vars(node.input)
    return frozenset()


def push_filter(node):
    """Filter(e, X) with ``e`` moved down to the part of X that binds all of its variables
    in every solution (deterministic ``e`` only): the left side of a join, OPTIONAL or
    MINUS, either side of a plain join; past another FILTER. The filter then drops rows
    before they are joined with the rest (a Filter over a BGP runs inside its steps).
    Returns ``node`` itself when nothing moves."""
    if not isinstance(node, A.Filter):
        return node
    names = deterministic_vars(node.expr)
    if not names:
        return node
    need = frozenset(names)
    x = node.input
    if isinstance(x, A.Filter):
        inner = push_filter(A.Filter(node.expr, x.input))
        return node if isinstance(inner, A.Filter) and inner.input is x.input else A.Filter(x.expr, inner)
    if isinstance(x, (A.Join, ExploreJoin, PathJoin, A.LeftJoin, ExploreLeftJoin, A.Minus)):
        if need <= certain_vars(x.left):
            return dataclasses.replace(x, left=push_filter(A.Filter(node.expr, x.left)))
        if isinstance(x, A.Join) and need <= certain_vars(x.right):
            return dataclasses.replace(x, right=push_filter(A.Filter(node.expr, x.right)))
    return node
