"""Rewrites of a continuous query's pattern into equal patterns the small-window paths take.

Why: the generated instant (:mod:`engine.stream.tiny_gen`) and the maintained result
(:mod:`engine.stream.maintained`) take BGPs with FILTERs, OPTIONALs, BINDs and UNIONs of such; these
shapes users write were outside them and ran on the ordinary path (~0.4-4x the composite peer):

* property-path alternatives (``?x sioc:has_creator|sib:usertag ?u``, ``(:p|^:q)/:r``): the
  compact instant graph (:class:`engine.stream.continuous._Compact`) is not built for a query
  holding a :class:`~engine.sparql.algebra.PathPattern` at all;
* an OPTIONAL holding a BIND (``OPTIONAL { ?u foaf:age ?a BIND(?a * 2 AS ?a2) }``);
* ``SELECT REDUCED``, which the executor evaluates as DISTINCT (SPARQL allows any number of a
  row's duplicates between one and all): DISTINCT here, which the generated paths take;
* an OPTIONAL over a UNION (``{ A } UNION { B } OPTIONAL { C }``): the OPTIONAL in each branch
  (``LeftJoin(Union(A, B), C, f) = Union(LeftJoin(A, C, f), LeftJoin(B, C, f))``: a left join
  is decided per solution of its left side), which :mod:`engine.stream.tiny_union` takes;
* a grouped sub-SELECT joined with a BGP (``{ SELECT ?u (MAX(?v) AS ?m) ... GROUP BY ?u } ?u
  :p ?o``): the BGP joined inside and its variables grouping keys too (:func:`_subselect_join`);
* an OPTIONAL binding no variable of its own holding a BIND (``OPTIONAL { :me foaf:knows ?u
  BIND(true AS ?friend) }``): one variable renamed inside with a ``sameTerm`` condition, a
  marker the BIND is lifted over (:func:`_marked`).

How -- both exact, bag for bag:

* A path made of links, inverses, sequences and alternatives (no ``*`` / ``+`` / ``?`` / negated
  sets: those read the graph's nodes and closures) is SPARQL 1.1's union of its alternatives'
  triple patterns (18.4: ``eval(P1|P2) = Union(eval(P1), eval(P2))``, a sequence a join over a
  fresh variable, an inverse the swapped pattern); a join of BGPs and such unions is distributed
  into a UNION of BGPs (a join distributes over a bag union), at most :data:`MAX_BRANCHES`. Two
  constant ends are left alone (the executor answers whether such a path holds: one solution).
  The fresh variables are blank-node variables (``_:.aN``: no label a user can write), never
  projected.
* ``LeftJoin(L, Extend(R, ?z, e), f)`` is ``Extend(LeftJoin(L, R, f), ?z, e)`` when ``e`` reads
  only the OPTIONAL's own variables (inside it, a variable of ``L`` only is unbound), ``?z`` is
  not a variable of ``L`` or of ``f``, ``e`` holds no EXISTS, and ``e`` is an error whenever a
  variable only ``R`` binds is unbound (:func:`_strict`): a row ``R`` did not extend then gets
  ``?z`` unbound, as in the OPTIONAL; a row it extended gets ``e`` over the same values. An
  ``e`` that is not such an error (``BIND(true AS ?flag)``, ``COALESCE``, a variable ``L``
  binds too) is lifted as ``IF(BOUND(?m), e, ?m)`` over a variable ``?m`` every solution of ``R``
  binds and ``L`` does not (none: not rewritten).

Anything else is left as it is. Applied once per continuous query, before every path of the
evaluator (:class:`engine.stream.continuous.InstantEvaluator`), and kept only when the generated
path takes the result, so the ordinary path evaluates the same (equal) pattern; the tests compare
the rewritten query instant by instant with the query as parsed and with pyoxigraph.
"""

from __future__ import annotations

import dataclasses
import itertools

from engine.exec.functions import vars_of
from engine.sparql import algebra as A
from engine.stream.tiny_values import bound_vars

__all__ = ["rewrite", "rewritten_total", "MAX_BRANCHES"]

#: the most UNION branches a join of path alternatives is distributed into (the generated UNION,
#: :data:`engine.stream.tiny_union.MAX_BRANCHES`, takes no more)
MAX_BRANCHES = 8
_XSD = "http://www.w3.org/2001/XMLSchema#"
_REWRITTEN = [0]


def rewritten_total() -> int:
    """Queries this module changed (a counter for the tests: the rewrite was applied)."""
    return _REWRITTEN[0]


def rewrite(query: A.Query, mode: str | None = None) -> A.Query:
    """``query`` with its pattern rewritten (see the module); the same object when nothing
    applies, or -- given the query's ``mode`` -- when the generated path
    (:meth:`engine.stream.tiny_gen.GenQuery.of`) does not take the rewritten query either: a
    UNION of BGPs evaluated by the ordinary path repeats the shared joins per branch, which a
    large window would pay for nothing."""
    fresh = itertools.count()
    pat = _rw(query.pattern, fresh)
    if pat is query.pattern:
        return query
    out = dataclasses.replace(query, pattern=pat)
    if mode is not None:
        from engine.stream.tiny_gen import GenQuery  # noqa: PLC0415 -- (tiny_gen imports the stream modules)
        if GenQuery.of(out, mode) is None:
            return query
    _REWRITTEN[0] += 1
    return out


# ---------------------------------------------------------------- the walk

def _rw(node, fresh):
    """``node`` with its sub-patterns rewritten bottom-up (the same object if none changed)."""
    if isinstance(node, A.PathPattern):
        if not (isinstance(node.s, A.Var) or isinstance(node.o, A.Var)):
            return node   # (two constant ends: the executor answers whether the path holds, once)
        alts = _path_alts(node.s, node.path, node.o, fresh)
        return node if alts is None else _union(alts)
    if not dataclasses.is_dataclass(node) or isinstance(node, (A.BGP, A.Values, A.Service)):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if _is_pattern(v):
            w = _rw(v, fresh)
            if w is not v:
                changes[f.name] = w
    if changes:
        node = dataclasses.replace(node, **changes)
    if isinstance(node, A.Join) and changes:
        got = _joined(node)
        if got is not None:
            return got
    if isinstance(node, A.Join):
        got = _subselect_join(node)
        if got is not None:
            return got
    if isinstance(node, A.LeftJoin):
        got = _lift_binds(node) or _lift_binds(_marked(node, fresh))
        if got is not None:
            node = got
        node = _binds_up(node)
        if isinstance(node, A.LeftJoin):
            got = _opt_over_union(node)
            if got is not None:
                return got
    if isinstance(node, A.Reduced):   # (the executor's REDUCED keeps each row once: DISTINCT)
        return A.Distinct(node.input)
    return node


_PATTERNS = (A.BGP, A.PathPattern, A.Join, A.LeftJoin, A.Filter, A.Union, A.Minus, A.Graph, A.Extend,
             A.Values, A.Group, A.OrderBy, A.Project, A.Distinct, A.Reduced, A.Slice, A.Service)


def _is_pattern(v) -> bool:
    return isinstance(v, _PATTERNS)


# ---------------------------------------------------------------- path alternatives

def _path_alts(s, path, o, fresh) -> list[list[A.TriplePattern]] | None:
    """The alternatives of ``s path o`` as lists of triple patterns, or None (a closure, a
    negated set, more than :data:`MAX_BRANCHES`)."""
    if isinstance(path, A.PathLink):
        return [[A.TriplePattern(s, A.Const("<" + path.iri + ">"), o)]]
    if isinstance(path, A.PathInv):
        return _path_alts(o, path.path, s, fresh)
    if isinstance(path, A.PathAlt):
        a = _path_alts(s, path.left, o, fresh)
        b = _path_alts(s, path.right, o, fresh) if a is not None else None
        return None if b is None or len(a) + len(b) > MAX_BRANCHES else a + b
    if isinstance(path, A.PathSeq):
        v = A.Var(f"_:.a{next(fresh)}")
        a = _path_alts(s, path.left, v, fresh)
        b = _path_alts(v, path.right, o, fresh) if a is not None else None
        if b is None or len(a) * len(b) > MAX_BRANCHES:
            return None
        return [x + y for x in a for y in b]
    return None


def _union(alts: list[list[A.TriplePattern]]):
    node = A.BGP(tuple(alts[0]))
    for a in alts[1:]:
        node = A.Union(node, A.BGP(tuple(a)))
    return node


def _bgp_alts(node) -> list[list[A.TriplePattern]] | None:
    """A BGP or a UNION of BGPs as its branches' triple patterns, else None."""
    if isinstance(node, A.BGP):
        return [list(node.triples)]
    if isinstance(node, A.Union):
        a = _bgp_alts(node.left)
        b = _bgp_alts(node.right) if a is not None else None
        return None if b is None else a + b
    return None


def _joined(node: A.Join):
    """A join of BGPs and UNIONs of BGPs (one side from a path) as a UNION of BGPs."""
    a, b = _bgp_alts(node.left), _bgp_alts(node.right)
    if a is None or b is None or len(a) * len(b) > MAX_BRANCHES:
        return None
    return _union([x + y for x in a for y in b])


# ---------------------------------------------------------------- a grouped sub-SELECT joined with a BGP

#: aggregates whose value does not depend on the order of a group's solutions (SAMPLE and
#: GROUP_CONCAT may pick or order differently once the group is made another way)
_ORDER_FREE = ("COUNT", "SUM", "MIN", "MAX", "AVG")


def _subselect_join(node: A.Join):
    """``Join({ SELECT ?k.. (agg AS ?a).. WHERE { P } GROUP BY ?k.. }, Q)`` (either order), Q a
    BGP, as ``SELECT ?k.. ?a.. <Q's variables> WHERE { P Q } GROUP BY ?k.. <Q's variables>``: a
    group of the new grouping is one group ``g`` of the sub-SELECT with one solution ``q`` of Q
    compatible with it (Q's solutions are distinct over its variables, every one of them a key),
    so its solutions are ``g``'s, each extended by ``q``, and every aggregate over P's variables
    is ``g``'s; the groups without a compatible ``q`` are the join's rows missing. Taken when Q
    shares no variable with the sub-SELECT but its keys (another one is another variable there:
    scoping), the keys are plain variables every solution of P binds, and the aggregates do not
    depend on the solutions' order (no SAMPLE / GROUP_CONCAT); None otherwise."""
    for sub, q in ((node.left, node.right), (node.right, node.left)):
        if not isinstance(sub, A.Project) or not isinstance(q, A.BGP) or not q.triples:
            continue
        chain = []
        x = sub.input
        while isinstance(x, (A.Extend, A.Filter)):
            chain.append(x)
            x = x.input
        if not isinstance(x, A.Group) or not x.by:
            continue
        keys = []
        for e, v in x.by:
            if not isinstance(e, A.Var) or e.name != v.name:
                break
            keys.append(v.name)
        else:
            if any(agg.name not in _ORDER_FREE for _, agg in x.aggregates):
                continue
            fixed = bound_vars(x.input)
            qv = {t.name for tp in q.triples for t in (tp.s, tp.p, tp.o) if isinstance(t, A.Var)}
            if fixed is None or not set(keys) <= fixed or (qv & _pattern_vars(sub)) - set(keys):
                continue
            extra = sorted(qv - set(keys))
            group = A.Group(A.Join(x.input, q), tuple(x.by) + tuple((A.Var(n), A.Var(n)) for n in extra),
                            x.aggregates)
            out = group
            for op in reversed(chain):
                out = dataclasses.replace(op, input=out)
            return A.Project(out, tuple(sub.vars) + tuple(A.Var(n) for n in extra))
    return None


# ---------------------------------------------------------------- an OPTIONAL over a UNION

def _opt_over_union(node: A.LeftJoin):
    """``LeftJoin(Union(A, B), C, f)`` as ``Union(LeftJoin(A, C, f), LeftJoin(B, C, f))`` (a left
    join is decided per solution of its left side, and a UNION's solutions are its branches'),
    a BGP joined with a UNION of BGPs distributed first (:func:`_joined`); None for other
    shapes or more than :data:`MAX_BRANCHES` branches."""
    left = node.left
    if isinstance(left, A.Join):
        left = _joined(left)
    if not isinstance(left, A.Union):
        return None
    branches: list = []
    stack = [left]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Union):
            stack += [n.right, n.left]
        else:
            branches.append(n)
    if len(branches) > MAX_BRANCHES:
        return None
    out = A.LeftJoin(branches[0], node.right, node.expr)
    for b in branches[1:]:
        out = A.Union(out, A.LeftJoin(b, node.right, node.expr))
    return out


# ---------------------------------------------------------------- an OPTIONAL holding a BIND

def _binds_up(node):
    """``LeftJoin(Extend*(X), R, f)`` as ``Extend*(LeftJoin(X, R, f))`` where no BIND's variable
    is one of ``R`` or ``f`` (compatibility and the FILTER do not read it) and every variable a
    BIND reads that ``R`` or ``f`` mentions is bound by every solution of ``X`` (R cannot change
    it): a second OPTIONAL after one holding a BIND; ``node`` unchanged otherwise."""
    if isinstance(node, A.Extend):
        return dataclasses.replace(node, input=_binds_up(node.input))
    if not isinstance(node, A.LeftJoin) or not isinstance(node.left, A.Extend):
        return node
    chain = []
    x = node.left
    while isinstance(x, A.Extend):
        chain.append(x)
        x = x.input
    reads = _pattern_vars(node.right) | (set(vars_of(node.expr)) if node.expr is not None else set())
    # (nor may R bind a variable a BIND reads that X leaves unbound: above, the BIND would see it)
    fixed = bound_vars(x) or set()
    if any(ext.var.name in reads or (set(vars_of(ext.expr)) & reads) - fixed for ext in chain):
        return node
    out = A.LeftJoin(_binds_up(x), node.right, node.expr)
    for ext in reversed(chain):
        out = A.Extend(out, ext.var, ext.expr)
    return out


def _pattern_vars(node) -> set:
    """Every variable mentioned in ``node`` (its patterns and expressions)."""
    out: set = set()

    def walk(x) -> None:
        if isinstance(x, A.Var):
            out.add(x.name)
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name))
    walk(node)
    return out


def _has_exists(e) -> bool:
    if isinstance(e, A.Exists):
        return True
    if isinstance(e, (A.Call, A.FunctionCall)):
        return any(_has_exists(a) for a in e.args)
    return False


def _strict(e, m: set) -> bool:
    """Whether ``e`` is an error whenever the variables ``m`` are unbound (SPARQL's error
    propagation: every function of an error is one, except BOUND, COALESCE, IF's branches,
    ``||`` / ``&&`` with one side decided, and IN's list)."""
    if isinstance(e, A.Var):
        return e.name in m
    if isinstance(e, A.Call):
        op, args = e.op, e.args
        if op == "BOUND":
            return False
        if op in ("COALESCE", "||", "&&"):
            return bool(args) and all(_strict(a, m) for a in args)
        if op == "IF":
            return _strict(args[0], m) or (len(args) == 3 and _strict(args[1], m) and _strict(args[2], m))
        if op in ("IN", "NOT IN"):
            return _strict(args[0], m)
        return any(_strict(a, m) for a in args)
    if isinstance(e, A.FunctionCall):   # (casts: an error of the argument is one; other functions: unknown)
        return e.iri.startswith(_XSD) and any(_strict(a, m) for a in e.args)
    return False


def _renamed(x, old: str, new: A.Var):
    """``x`` (a pattern or an expression) with the variable ``old`` renamed ``new``."""
    if isinstance(x, A.Var):
        return new if x.name == old else x
    if isinstance(x, tuple):
        return tuple(_renamed(y, old, new) for y in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        ch = {}
        for f in dataclasses.fields(x):
            v = getattr(x, f.name)
            w = _renamed(v, old, new)
            if w is not v:
                ch[f.name] = w
        return dataclasses.replace(x, **ch) if ch else x
    return x


def _marked(node: A.LeftJoin, fresh):
    """``LeftJoin(L, Extend*(R), f)`` where ``R`` (a BGP) binds no variable of its own, with one of
    its variables ``?v`` renamed ``?v2`` (fresh) inside the OPTIONAL -- its BINDs included -- and
    ``sameTerm(?v2, ?v)`` added to the condition: the same solutions (``R``'s matches compatible
    with a solution of ``L`` are those of the renamed patterns whose ``?v2`` is ``L``'s ``?v``,
    at most one: every variable is bound), now with a variable of the OPTIONAL's own that marks
    whether it matched, which :func:`_lift_binds` needs. None when not of that form."""
    chain = []
    r = node.right
    while isinstance(r, A.Extend):
        chain.append(r)
        r = r.input
    if not chain or not isinstance(r, A.BGP) or not r.triples:
        return None
    rv = bound_vars(r)
    lv = bound_vars(node.left)
    if rv is None or lv is None or not rv or not rv <= lv:
        return None
    if any(isinstance(tp.p, A.Var) for tp in r.triples):
        return None
    v = sorted(rv)[0]
    v2 = A.Var(f"_:.m{next(fresh)}")
    out = _renamed(r, v, v2)
    for ext in reversed(chain):
        out = A.Extend(out, ext.var, _renamed(ext.expr, v, v2))
    cond = A.Call("SAMETERM", (v2, A.Var(v)))
    if node.expr is not None:
        cond = A.Call("&&", (cond, node.expr))
    return A.LeftJoin(node.left, out, cond)


def _lift_binds(node: A.LeftJoin | None):
    """``LeftJoin(L, Extend*(R), f)`` as ``Extend*(LeftJoin(L, R, f))`` when exact (module), or None."""
    if node is None:
        return None
    chain = []
    r = node.right
    while isinstance(r, A.Extend):
        chain.append(r)
        r = r.input
    if not chain:
        return None
    certain = bound_vars(r)
    if certain is None:
        return None
    left_vars = _pattern_vars(node.left)
    f_vars = set(vars_of(node.expr)) if node.expr is not None else set()
    scope = _pattern_vars(r)
    only_r = certain - left_vars
    marker = sorted(certain - left_vars)
    lifted = []
    for ext in reversed(chain):   # bottom-up: a BIND reads the ones below it
        z, e = ext.var.name, ext.expr
        ev = set(vars_of(e))
        if z in left_vars or z in f_vars or z in scope or _has_exists(e) or not ev <= scope:
            return None
        if (ev & left_vars) - certain:
            return None   # (a variable R may leave unbound inside, bound by L outside)
        if not _strict(e, only_r):
            if not marker:
                return None
            # a constant, COALESCE, BOUND, a variable L binds too: bound only where R matched, as
            # ``IF(BOUND(?m), e, ?m)`` over a variable ``?m`` R binds and L does not (unbound ?m:
            # the IF's value is ?m's, an error)
            m = A.Var(marker[0])
            e = A.Call("IF", (A.Call("BOUND", (m,)), e, m))
        lifted.append((ext.var, e))
        scope.add(z)
        only_r.add(z)
    out = A.LeftJoin(node.left, r, node.expr)
    for var, e in lifted:
        out = A.Extend(out, var, e)
    return out
