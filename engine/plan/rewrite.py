"""Algebra rewrites, done once per parsed query (the plan is cached with it).

* a tree of Joins of BGPs becomes one BGP: Join(BGP1, BGP2) over one graph is
  BGP(t1 + t2) (blank-node labels cannot be shared between two BGPs, the
  parser rejects that), and as one BGP the step order covers all patterns:
  ``{ ?a a C . ?b a C } { ?x p ?a } ...`` then starts from the selective
  patterns instead of building the cross product of the first group;
* Join(left, BGP) and Join(left, BGP FILTER f) with f over the BGP's own
  variables become :class:`ExploreJoin` (the filter sees the same values when
  the BGP explores from the left rows), Join(left, path) :class:`PathJoin`,
  LeftJoin(left, BGP) :class:`ExploreLeftJoin`; Join(path without a constant end, BGP
  binding one of its ends) PathJoin(BGP, path) (:func:`path_seeded_by`);
* a FILTER moves down to the part of its group that binds its variables in every
  solution (:func:`engine.plan.filters.push_filter`).

The rewrite returns the same node object wherever nothing below it changed,
and descends into expressions (EXISTS patterns are rewritten too).
"""

from __future__ import annotations

import dataclasses

from engine.plan.filters import push_filter
from engine.plan.nodes import ExploreJoin, ExploreLeftJoin, PathJoin
from engine.plan.order import bgp_vars
from engine.sparql import algebra as A

# nodes without patterns or expressions below them
_LEAVES = (A.Var, A.Const, A.BGP, A.Values, A.TriplePattern, A.PathPattern, str, int, float, bool, type(None))


def is_pure_bgp(node) -> bool:
    return isinstance(node, A.BGP) and len(node.triples) > 0


def filter_local(expr, bgp: A.BGP) -> bool:
    """Whether a filter only reads variables the BGP binds (and has no EXISTS)."""
    own = set(bgp_vars(bgp.triples))

    def walk(e) -> bool:
        if isinstance(e, A.Var):
            return e.name in own
        if isinstance(e, A.Exists):
            return False
        if isinstance(e, (A.Call, A.FunctionCall)):
            return all(walk(a) for a in e.args)
        return True

    return walk(expr)


def path_seeded_by(path: A.PathPattern, bgp: A.BGP) -> bool:
    """Whether Join(path, BGP) should run as PathJoin(BGP, path): the path has no constant
    end (alone it walks from every node: ``?x (p|q)/r <c>`` splits into ``?x p|q ?b`` and
    ``?b r <c>``, 40 ms at 1M triples for 13k answers) and the BGP binds one of its ends,
    so the path starts from the BGP's values instead. A join is commutative (bags)."""
    s, o = path.s, path.o
    if not (isinstance(s, A.Var) and isinstance(o, A.Var)):
        return False
    own = bgp_vars(bgp.triples)
    return s.name in own or o.name in own


def rewrite(node):
    """The planned form of a pattern (or expression)."""
    if isinstance(node, _LEAVES):
        return node
    if isinstance(node, tuple):
        items = [rewrite(x) for x in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else tuple(items)
    if not dataclasses.is_dataclass(node):
        return node
    changed = {}
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        nv = rewrite(v)
        if nv is not v:
            changed[f.name] = nv
    if changed:
        node = dataclasses.replace(node, **changed)
    if isinstance(node, A.Join):
        left, right = node.left, node.right
        if is_pure_bgp(left) and is_pure_bgp(right):
            return A.BGP(left.triples + right.triples)
        if isinstance(left, A.PathPattern) and is_pure_bgp(right) and path_seeded_by(left, right):
            return PathJoin(right, left)  # the BGP first, the path from its values
        if is_pure_bgp(right):
            return ExploreJoin(left, right, right)
        if isinstance(right, A.Filter) and is_pure_bgp(right.input) and filter_local(right.expr, right.input):
            return ExploreJoin(left, right, right.input, right.expr)
        if isinstance(right, A.PathPattern):
            return PathJoin(left, right)
    elif isinstance(node, A.LeftJoin) and is_pure_bgp(node.right):
        return ExploreLeftJoin(node.left, node.right, node.expr)
    elif isinstance(node, A.Filter):
        return push_filter(node)
    return node


def bgp_of(node) -> A.BGP | None:
    """``node`` as one BGP: a pure BGP itself, a tree of Joins of BGPs merged
    (:func:`merged_bgp`), else None."""
    if isinstance(node, A.Join):
        return merged_bgp(node)
    return node if is_pure_bgp(node) else None


_MERGED: dict[int, tuple[A.Join, A.BGP | None]] = {}


def merged_bgp(node: A.Join) -> A.BGP | None:
    """The one BGP a tree of Joins of BGPs equals, or None (for callers that
    read the parsed tree, e.g. the incremental core of a continuous query).
    Memoized per node object so the merged BGP keeps its identity (plans are
    cached by it)."""
    hit = _MERGED.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    sides = []
    for side in (node.left, node.right):
        if isinstance(side, A.Join):
            side = merged_bgp(side)
        if side is None or not is_pure_bgp(side):
            sides = None
            break
        sides.append(side)
    out = A.BGP(sides[0].triples + sides[1].triples) if sides else None
    if len(_MERGED) > 4096:
        _MERGED.clear()
    _MERGED[id(node)] = (node, out)
    return out
