"""Whether a query is *anchored*: every pattern reached from a constant (or a
variable an earlier pattern or a small VALUES block binds), so it reads a few rows
near its constants whatever the store's size -- the selective class of issue 14.

The HTTP lane runs a query text whose cost shape it has never measured in the
thread pool (twice, before it trusts the cost: ``ServerState.inline_ok``). For an
anchored text that costs a thread hand-off and the ordinary path (0.3-1 ms, and
several ms on a loaded machine) for a query the engine answers in ~0.1 ms. So the
lane probes an anchored text of an unknown shape inline, as it probes a fast
shape's (``ServerState.try_inline`` with ``probe``): the run is capped at
``INLINE_PROBE`` and reruns in the pool past it, and only while nothing else runs.
Being anchored is a reason to try, not a promise: a chain through a hub can still be
large, which the cap catches.

Conservative: a pattern this does not know (GRAPH, SERVICE, EXISTS, property paths
with ``*`` / ``+`` / ``?`` or negated sets, a class scan ``?x a C``, a VALUES block
of more than :data:`MAX_VALUES` rows) makes the query not anchored.
"""

from __future__ import annotations

from engine.sparql import algebra as A

RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
#: a VALUES block of at most this many rows binds its variables as constants would
MAX_VALUES = 64
_FORMS = frozenset({"SELECT", "ASK", "CONSTRUCT"})


def anchored(query: A.Query) -> bool:
    """Whether ``query`` (parsed) is anchored (see the module docstring)."""
    if query.form not in _FORMS or (query.dataset is not None and (query.dataset.default or query.dataset.named)):
        return False
    return _pattern(query.pattern, frozenset()) is not None


def _anchor(term, bound: frozenset) -> bool:
    return isinstance(term, A.Const) or (isinstance(term, A.Var) and term.name in bound)


def _vars(*terms) -> set:
    return {t.name for t in terms if isinstance(t, A.Var)}


def _bgp(triples, bound: frozenset) -> frozenset | None:
    """The variables bound after exploring ``triples`` from ``bound`` and their
    constants; None when some triple is never reached."""
    left = list(triples)
    have = set(bound)
    while left:
        rest = []
        for t in left:
            if isinstance(t, A.PathPattern):
                ok = _simple_path(t.path) and (_anchor(t.s, have) or _anchor(t.o, have))
                terms = (t.s, t.o)
            else:
                subj = _anchor(t.s, have)
                obj = _anchor(t.o, have) and not (isinstance(t.p, A.Const) and t.p.key == RDF_TYPE
                                                    and isinstance(t.o, A.Const))
                ok = subj or obj
                terms = (t.s, t.p, t.o)
            if ok:
                have |= _vars(*terms)
            else:
                rest.append(t)
        if len(rest) == len(left):
            return None
        left = rest
    return frozenset(have)


def _simple_path(p) -> bool:
    """A path of links, inverses, sequences and alternatives (no closure, no negation)."""
    if isinstance(p, A.PathLink):
        return True
    if isinstance(p, A.PathInv):
        return _simple_path(p.path)
    if isinstance(p, (A.PathSeq, A.PathAlt)):
        return _simple_path(p.left) and _simple_path(p.right)
    return False


def _expr(e) -> bool:
    """An expression without EXISTS (its pattern is evaluated per row)."""
    if isinstance(e, A.Exists):
        return False
    if isinstance(e, (A.Call, A.FunctionCall)):
        return all(_expr(a) for a in e.args)
    if isinstance(e, A.Aggregate):
        return e.arg is None or _expr(e.arg)
    return True


def _pattern(node, bound: frozenset) -> frozenset | None:  # noqa: PLR0911 - one case per node kind
    """The variables bound after ``node`` explored from ``bound``; None when it is not anchored."""
    tp = type(node)
    if tp is A.BGP:
        return _bgp(node.triples, bound) if node.triples else bound
    if tp is A.PathPattern:
        return _bgp((node,), bound)
    if tp is A.Join:
        got = _pattern(node.left, bound)
        if got is not None:
            got = _pattern(node.right, got)
        if got is None:  # (the right side may be the anchored one: VALUES after the pattern it binds)
            got = _pattern(node.right, bound)
            if got is not None:
                got = _pattern(node.left, got)
        return got
    if tp is A.LeftJoin:
        got = _pattern(node.left, bound)
        if got is None or (node.expr is not None and not _expr(node.expr)):
            return None
        right = _pattern(node.right, got)
        return None if right is None else got | right
    if tp is A.Union:
        a = _pattern(node.left, bound)
        b = None if a is None else _pattern(node.right, bound)
        return None if b is None else a & b
    if tp is A.Minus:
        got = _pattern(node.left, bound)
        return None if got is None or _pattern(node.right, got) is None else got
    if tp is A.Filter:
        return _pattern(node.input, bound) if _expr(node.expr) else None
    if tp is A.Extend:
        got = _pattern(node.input, bound)
        return None if got is None or not _expr(node.expr) else got | {node.var.name}
    if tp is A.Values:
        return bound | {v.name for v in node.vars} if len(node.rows) <= MAX_VALUES else None
    if tp is A.Group:
        got = _pattern(node.input, bound)
        if got is None or not all(_expr(e) for e, _v in node.by) or not all(_expr(a) for _v, a in node.aggregates):
            return None
        return got | {v.name for _e, v in node.by} | {v.name for v, _a in node.aggregates}
    if tp is A.OrderBy:
        got = _pattern(node.input, bound)
        return got if got is not None and all(_expr(c.expr) for c in node.conditions) else None
    if tp in (A.Project, A.Distinct, A.Reduced, A.Slice):
        return _pattern(node.input, bound)
    return None
