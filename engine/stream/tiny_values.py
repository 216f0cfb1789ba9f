"""VALUES blocks joined with a small window's pattern, and a sub-SELECT that is the whole
pattern, for the generated paths.

Why: "these sensors / these hashtags" is written as ``VALUES ?tag { :t1 :t2 }`` joined with the
window's BGP; the generated instant (:mod:`engine.stream.tiny_gen`) and the maintained result
(:mod:`engine.stream.maintained`) take a BGP with FILTERs, not a join with inline data, so such
a query fell to the ordinary path (~2-4x the composite peer).

How: ``Join(VALUES, P)`` (either side) where every VALUES variable is bound by every solution of
``P`` (a variable of its BGP) and the rows are distinct and have no ``UNDEF`` is the same bag as
``FILTER(P)`` with the condition "the solution's values are one row's" -- each solution matches
at most one row, so the join neither multiplies nor adds a variable. ``UNDEF`` puts no condition
on its variable; rows holding it are taken when every two rows differ in a column both define
(then still one row at most per solution). The condition is written
with ``sameTerm`` (join compatibility is term equality, not value equality: ``1`` and ``01``
differ), decided over terms by :class:`engine.stream.tiny_terms.TermFn`.

``SELECT ?p ?n WHERE { { SELECT ?p (COUNT(*) AS ?n) ... GROUP BY ?p } FILTER(?n > 1) }`` -- a
sub-SELECT (no DISTINCT / ORDER BY / LIMIT of its own) that is the whole pattern, under FILTERs
reading only its projected variables, projected to some of them -- is the inner query with the
FILTERs above its projection expressions (a HAVING, for a grouped one): the outer query sees
the inner projected variables only, and those mean the same below the inner projection.

Anything else is left as it is (and not generated).
"""

from __future__ import annotations

import dataclasses

from engine.exec.functions import vars_of
from engine.sparql import algebra as A

__all__ = ["bound_vars", "rewrite"]

_XSD_STRING = "^^<http://www.w3.org/2001/XMLSchema#string>"


def bound_vars(node) -> set | None:
    """The variables every solution of ``node`` binds (BGPs under FILTERs, joins, an OPTIONAL's
    left side, a BIND's input); None when not of the forms read here."""
    if isinstance(node, A.BGP):
        return {t.name for tp in node.triples for t in (tp.s, tp.p, tp.o) if isinstance(t, A.Var)}
    if isinstance(node, A.Filter):
        return bound_vars(node.input)
    if isinstance(node, A.LeftJoin):
        return bound_vars(node.left)
    if isinstance(node, A.Extend):
        return bound_vars(node.input)   # (the BIND's own variable may be unbound: an error)
    if isinstance(node, A.Join):
        a, b = bound_vars(node.left), bound_vars(node.right)
        return None if a is None or b is None else a | b
    return None


def _condition(values: A.Values):
    """The FILTER equal to joining ``values`` (rows distinct; UNDEF where no solution can match two rows), or None."""
    rows = values.rows
    if not rows or not values.vars or len(set(rows)) != len(rows):
        return None
    # UNDEF (no condition on that variable): taken when every two rows differ in a column both
    # define -- a solution then matches one row at most (else it would be joined with two)
    if any(k is None for row in rows for k in row):
        for i, r1 in enumerate(rows):
            for r2 in rows[:i]:
                if not any(a is not None and b is not None and a != b for a, b in zip(r1, r2, strict=True)):
                    return None
    alts = []
    for row in rows:
        conj = None
        for v, k in zip(values.vars, row, strict=True):
            if k is None:
                continue
            if k.endswith(_XSD_STRING):
                return None   # (xsd:string: its key's form)
            c = A.Call("SAMETERM", (v, A.Const(k)))
            conj = c if conj is None else A.Call("&&", (conj, c))
        if conj is None:
            return None   # (a row of UNDEF only)
        alts.append(conj)
    out = alts[0]
    for c in alts[1:]:
        out = A.Call("||", (out, c))
    return out


def _walk(node):
    if isinstance(node, A.Join):
        for vals, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(vals, A.Values):
                got = bound_vars(other)
                cond = _condition(vals) if got is not None and {v.name for v in vals.vars} <= got else None
                if cond is not None:
                    return A.Filter(cond, _walk(other))
        got = _regroup(node)
        if got is not None:
            return got
    if not dataclasses.is_dataclass(node):
        return node
    changes = {}
    for f in ("input", "left", "right"):
        if hasattr(node, f):
            sub = getattr(node, f)
            new = _walk(sub)
            if new is not sub:
                changes[f] = new
    return dataclasses.replace(node, **changes) if changes else node


def _regroup(node: A.Join):
    """``Join(Join(X, VALUES), Y)`` (either order on each level) as ``FILTER(Join(X, Y))`` when the
    VALUES block, joined last, is such a FILTER: ``{ P1 . VALUES ?t {...} P2 }`` (a join is
    associative and commutative over bags); None otherwise."""
    for inner, other in ((node.left, node.right), (node.right, node.left)):
        if not isinstance(inner, A.Join):
            continue
        for vals, x in ((inner.left, inner.right), (inner.right, inner.left)):
            if isinstance(vals, A.Values) and not isinstance(x, A.Values):
                rest = A.Join(x, other) if inner is node.left else A.Join(other, x)
                got = bound_vars(rest)
                if got is not None and {v.name for v in vals.vars} <= got:
                    cond = _condition(vals)
                    if cond is not None:
                        return A.Filter(cond, _walk(rest))
    return None


def _has_exists(e) -> bool:
    if isinstance(e, A.Exists):
        return True
    return isinstance(e, (A.Call, A.FunctionCall)) and any(_has_exists(a) for a in e.args)


def _flatten(node):
    """``Project(Filter*(Project(P)))`` as ``Project(Filter*(P))`` where that is the same (see
    the module), else ``node``."""
    if not isinstance(node, A.Project):
        return node
    outer = {v.name for v in node.vars}
    filters = []
    sub = node.input
    while isinstance(sub, A.Filter):
        filters.append(sub.expr)
        sub = sub.input
    if not isinstance(sub, A.Project):
        return node
    inner = {v.name for v in sub.vars}
    if not outer <= inner or any(not set(vars_of(e)) <= inner or _has_exists(e) for e in filters):
        return node   # (an EXISTS would see the inner query's other variables once flattened)
    body = sub.input
    for e in reversed(filters):
        body = A.Filter(e, body)
    return dataclasses.replace(node, input=body)


def rewrite(query: A.Query) -> A.Query:
    """``query`` with its VALUES joins taken as FILTERs where that is the same (see the module)."""
    node = query.pattern
    new = _walk(_flatten(node) if query.form == "SELECT" else node)
    return query if new is node else dataclasses.replace(query, pattern=new)
