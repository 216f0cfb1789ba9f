"""UNION on the small-window paths: a query over ``{ A } UNION { B } ...`` as one generated query
per branch (:mod:`engine.stream.tiny_gen`) and one maintained state over all of them
(:mod:`engine.stream.maintained`).

Why: a UNION of a few BGPs is how stream queries read "either kind of observation"; without
this such a query takes the ordinary path (~1x the composite peer on windows this small).

What is taken: the forms :func:`tiny_gen._shape` takes, with the BGP replaced by a join of
BGPs and UNIONs of groups (``{ A } UNION { B }``, ``P . { A } UNION { B }``, several UNIONs:
their branches' product, at most :data:`MAX_BRANCHES`), each group a BGP with FILTERs. A
branch of the product is the BGP of ``P`` and the chosen groups merged, with the groups'
FILTERs -- exact when a group's FILTER reads none of the variables the rest of the branch
binds and the group does not (in SPARQL it sees its group's solutions only) -- and the
FILTERs above the UNION, which read a variable the branch does not bind as unbound. The
solutions of the UNION are the branches' solutions, a bag: SELECT concatenates the branches'
rows (a variable a branch does not bind is unbound, -1), DISTINCT keeps each row once, GROUP BY
/ COUNT sums the branches' per-group counts (and unites their ``COUNT(DISTINCT)`` value sets)
before HAVING and the projection; ASK is whether any branch has a solution. Grouping and
counted variables and computed projections' variables are bound in every branch (else not
taken: the ordinary path).

A branch holding OPTIONALs (``{ A OPTIONAL { C } } UNION { B }``, wave 2n) is taken as a query of
its own when the UNION is the whole pattern below the modifiers: the generated code runs it as
any OPTIONAL query; the maintained state keeps its rows per required solution keyed by its
branch (:mod:`engine.stream.maint_opt`).

The maintained state (:class:`engine.stream.maintained.Maintained`) needs no state of its own:
its delta join for a pattern joins the other patterns of that pattern's branch only
(:func:`branch_of`), and every branch's solutions count into the same rows -- bag semantics.
"""

from __future__ import annotations

import dataclasses
from itertools import chain, product

from engine.plan.rewrite import bgp_of
from engine.sparql import algebra as A
from engine.stream import tiny_gen as _tg

__all__ = ["UnionGen", "union_of", "branch_of", "union_taken_total"]

#: branches (the product of the UNIONs' groups) above which a query is not taken
MAX_BRANCHES = 8
#: instants a union's generated code answered, all queries of the process (tests: the path is taken)
_TAKEN = [0]


def union_taken_total() -> int:
    """Instants answered by a UNION's generated code, all queries of the process."""
    return _TAKEN[0]


def _tvars(triples) -> set:
    return {t.name for tp in triples for t in (tp.s, tp.o) if isinstance(t, A.Var)}


def _group(node) -> tuple[list, list] | None:
    """A UNION's group as (its triples, its FILTER conjuncts), a group holding OPTIONALs as
    (None, its pattern) (:func:`_opt_group`), or None."""
    if _opt_group(node):
        return None, node
    fs: list = []
    while isinstance(node, A.Filter):
        fs += _tg._conjuncts(node.expr)
        node = node.input
    bgp = bgp_of(node)
    if bgp is None:
        return None
    return list(bgp.triples), fs


def _opt_group(node) -> bool:
    """Whether ``node`` is ``FILTER*(OPTIONAL*(BGP, BGP [FILTER] [OPTIONAL*]))`` with at least one OPTIONAL
    (a branch ``tiny_gen._shape`` takes as a query of its own: its OPTIONALs, then its FILTERs
    over possibly unbound variables)."""
    while isinstance(node, A.Filter):
        node = node.input
    if not isinstance(node, A.LeftJoin):
        return False
    while isinstance(node, A.LeftJoin):
        r = node.right
        while isinstance(r, A.LeftJoin):   # (an OPTIONAL nested in it: tiny_gen._shape checks it)
            if bgp_of(r.right) is None:
                return False
            r = r.left
        if bgp_of(r) is None:
            return False
        node = node.left
    return bgp_of(node) is not None


def _groups(node, out: list) -> bool:
    if isinstance(node, A.Union):
        return _groups(node.left, out) and _groups(node.right, out)
    g = _group(node)
    if g is None:
        return False
    out.append(g)
    return True


def _branches(body) -> list | None:
    """The BGP + FILTER of each branch of ``body`` (a join of BGPs and UNIONs), or None."""
    leaves: list = []
    stack = [body]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Join):
            stack += [n.right, n.left]
        else:
            leaves.append(n)
    required: list = []
    unions: list = []
    for n in leaves:
        if isinstance(n, A.Union):
            gs: list = []
            if not _groups(n, gs):
                return None
            unions.append(gs)
        else:
            b = bgp_of(n)
            if b is None:
                return None
            required += b.triples
    if not unions:
        return None
    if any(trs is None for gs in unions for trs, _ in gs):
        # (a branch holding OPTIONALs: one UNION, nothing joined with it -- its groups as they are)
        if len(unions) != 1 or required or len(unions[0]) > MAX_BRANCHES:
            return None
        return [g if trs is None else _filtered(A.BGP(tuple(trs)), g) for trs, g in unions[0]]
    n = 1
    for gs in unions:
        n *= len(gs)
    if n > MAX_BRANCHES:
        return None
    out = []
    for pick in product(*unions):
        triples = list(required) + [tp for trs, _ in pick for tp in trs]
        fs = []
        for k, (trs, gf) in enumerate(pick):
            # a group's FILTER sees its group's variables only: none the rest of the branch binds
            rest = _tvars(required) | _tvars([tp for j, (t2, _) in enumerate(pick) if j != k for tp in t2])
            for e in gf:
                if _tg._expr_vars(e) & (rest - _tvars(trs)):
                    return None
            fs += gf
        out.append(_filtered(A.BGP(tuple(triples)), fs))
    return out


def _filtered(node, fs: list):
    """``node`` under the conjunction of ``fs`` (none: ``node``)."""
    if fs:
        e = fs[0]
        for x in fs[1:]:
            e = A.Call("&&", (e, x))
        node = A.Filter(e, node)
    return node


_ABOVE = (A.Project, A.Distinct, A.Extend, A.Filter, A.Group)


def _with_body(query: A.Query, body) -> A.Query:
    """``query`` with the node below its modifiers, FILTERs and grouping replaced by ``body``."""
    path = []
    node = query.pattern
    while isinstance(node, _ABOVE):
        path.append(node)
        node = node.input
    for op in reversed(path):
        body = dataclasses.replace(op, input=body)
    return dataclasses.replace(query, pattern=body)


def union_of(query: A.Query) -> UnionGen | None:
    """The generated instant of a UNION query of the forms taken (see the module), else None."""
    node = query.pattern
    while isinstance(node, _ABOVE):
        node = node.input
    if not isinstance(node, (A.Union, A.Join)):
        return None
    bodies = _branches(node)
    if bodies is None:
        return None
    shapes = []
    for b in bodies:
        sh = _tg._shape(_with_body(query, b), loose=True)
        if sh is None or sh.antis or getattr(sh, "by_exprs", None):
            return None   # ([NOT] EXISTS in a branch, a group key of an expression: not taken)
        if sh.opts and not _opts_ok(sh):
            return None
        if shapes and (sh.agg_kinds != shapes[0].agg_kinds or sh.agg_exprs != shapes[0].agg_exprs):
            return None   # (an aggregate counted one way in a branch, another way in the other: the
            # COUNT of a variable an OPTIONAL binds in one branch only, tiny_aggs.optional_group)
        shapes.append(sh)
    children = []
    for sh in shapes:
        g = _tg.GenQuery(sh)
        if not g.usable:
            return None
        g.raw = True
        children.append(g)
    u = UnionGen(shapes, children)
    return u if u.usable else None


def _opts_ok(sh) -> bool:
    """A branch's OPTIONALs (:mod:`engine.stream.maint_opt` keeps a branch's rows per its
    required solution, grouped rows counted into the same groups): no projected variable
    renamed or computed from an OPTIONAL's variable."""
    own = {t.name for tp in sh.triples[sh.n_required:] for t in (tp.s, tp.o) if isinstance(t, A.Var)}
    return not any(_tg._expr_vars(e) & own for e in sh.computed.values()) and not set(sh.alias.values()) & own


def branch_of(gen, i: int) -> tuple[list, list, set | None]:
    """Pattern ``i``'s branch in ``gen``'s patterns: (its patterns, its FILTER conjuncts'
    indices in ``gen._fcode``, its variables); all of them (variables None) without a UNION."""
    br = gen.sh.branches
    if not br:
        return list(range(len(gen.pats))), list(range(len(gen._fcode))), None
    for pis, fis, vs in br:
        if i in pis:
            return pis, fis, vs
    raise AssertionError(i)


class UnionGen(_tg.GenQuery):
    """A UNION query's generated instant: one :class:`GenQuery` per branch (``children``), their
    rows or groups combined; itself the query over all branches' patterns (one after the
    other, :attr:`_Shape.branches`) for the maintained state and the rendering."""

    def __init__(self, shapes: list, children: list):
        self.children = children
        self.shapes = shapes
        first = shapes[0]
        sh = _tg._Shape()
        for k in ("names", "distinct", "by", "aggs", "having", "alias", "computed", "ask", "agg_kinds",
                  "agg_exprs"):
            setattr(sh, k, getattr(first, k))
        sh.triples = [tp for s in shapes for tp in s.triples]
        sh.filters = [e for s in shapes for e in s.filters]
        sh.n_required = len(sh.triples)
        sh.required_vars = _tvars(sh.triples)
        br = []
        p0 = f0 = 0
        opts, opt_branch = [], []   # a branch's OPTIONAL groups, over all patterns (maint_opt)
        opt_parent = {}   # (a nested group's parent, tiny_nested: numbered over all branches)
        for b, s in enumerate(shapes):
            for kid, par in s.opt_parent.items():
                opt_parent[len(opts) + kid] = len(opts) + par
            # (its required patterns: its OPTIONALs' follow them, in sh.opts)
            br.append((list(range(p0, p0 + s.n_required)), list(range(f0, f0 + len(s.filters))),
                       _tvars(s.triples)))
            for pis, e in s.opts:
                opts.append(([p0 + j for j in pis], e))
                opt_branch.append(b)
            p0 += len(s.triples)
            f0 += len(s.filters)
        sh.branches = br
        sh.opts = opts
        sh.opt_branch = opt_branch
        sh.opt_parent = opt_parent
        if opts:   # (bound in every row: required in every branch -- an aggregate of another may
            # meet an OPTIONAL's unbound -1, tiny_aggs.group_fn)
            sh.required_vars = set.intersection(*[_tvars(s.triples[:s.n_required]) for s in shapes])
        self._tail = None
        super().__init__(sh)

    def _filters_ok(self) -> bool:
        """The base's, with each branch's FILTERs compiled over its own variables (one it does
        not bind reads as unbound); computed projections' variables bound in every branch."""
        sh = self.sh
        every = set.intersection(*[vs for _, _, vs in sh.branches])
        if any(not _tg._expr_vars(e) <= every for e in sh.computed.values()):
            return False
        filters, sh.filters = sh.filters, []
        try:
            if not super()._filters_ok():
                return False
        finally:
            sh.filters = filters
        fcode = []
        # (a FILTER decided over terms where the numeric source does not, if the base has them)
        term_source = getattr(self, "_term_source", None)
        for _, fis, bvars in sh.branches:
            for fi in fis:
                e = filters[fi]
                consts: list = []
                prefix = f"F{fi}_"
                src = _tg._expr_code(e, True, lambda n, b=bvars: f"V[{_tg._slot(n)}]" if n in b else "None",
                                     consts, prefix)
                fv = _tg._expr_vars(e)
                fast = None
                if src is not None:
                    fast = _tg._fast_code(e, prefix, iter(range(len(consts))), consts) if fv <= bvars else None
                    if fast is not None and any(_tg._as_float(v) is None for v in consts):
                        fast = None
                alt = term_source(e, True, consts, prefix, bvars) if term_source is not None else None
                if src is None:
                    if alt is None:
                        return False
                    src, alt = alt, None
                if alt is not None:
                    self._falt[fi] = alt
                fcode.append((fv & bvars, src, consts, fast))
        self._fcode = fcode
        return True

    def run(self, ctx, graphs: list, spec: list):
        """The branches' results combined (see the module), or None when one hands back."""
        t0 = _tg._TAKEN[0]
        outs = []
        for ch in self.children:
            r = ch.run(ctx, graphs, spec)
            if r is None:
                _tg._TAKEN[0] = t0
                return None
            outs.append(r)
        sh = self.sh
        if sh.ask:
            out = any(outs)
        elif sh.by is not None:
            G: dict = {}
            kinds = sh.agg_kinds
            DD = [{} if d or j in kinds else None for j, (_, _, d) in enumerate(sh.aggs)]
            for g, ds in outs:
                for k, n in g.items():
                    G[k] = G.get(k, 0) + n
                for j, d in enumerate(ds):
                    if d is not None and j in kinds:   # (SUM, MIN, ...: value counts, summed, tiny_aggs)
                        acc = DD[j]
                        for k, vc in d.items():
                            got = acc.get(k)
                            if got is None:
                                acc[k] = dict(vc)
                            else:
                                for v, n in vc.items():
                                    got[v] = got.get(v, 0) + n
                    elif d is not None:
                        acc = DD[j]
                        for k, vals in d.items():
                            got = acc.get(k)
                            if got is None:
                                acc[k] = set(vals)
                            else:
                                got |= vals
            tail = self._tail
            if tail is None:
                tail = self._tail = self._compile_tail()
            try:
                out = tail(G, _tg._values(ctx.dictionary), DD)
            except (_tg._Hand, _tg.Undecided):
                _tg._TAKEN[0] = t0
                return None
        elif sh.distinct:
            out = list(dict.fromkeys(chain.from_iterable(outs)))
        else:
            out = list(chain.from_iterable(outs))
        if not sh.ask and len(out) > _tg.MAX_ROWS:
            _tg._TAKEN[0] = t0
            return None
        if self.order is not None:   # (ORDER BY / LIMIT / OFFSET over the combined rows, tiny_order)
            try:
                out = self.order.apply(out, self.kinds(), _tg._values(ctx.dictionary))
            except _tg.Undecided:
                _tg._TAKEN[0] = t0
                return None
        _tg._TAKEN[0] = t0 + 1
        _TAKEN[0] += 1
        return out

    def _compile_tail(self):
        """``tail(G, V, DD) -> rows`` over the summed groups: tiny_gen's (HAVING, the projection)."""
        ns = dict(_tg._HELPERS)
        ns["MAX_ROWS"] = _tg.MAX_ROWS
        lines = ["def tail(G, V, DD):"]
        lines += [f" D{j} = DD[{j}]" for j in range(len(self.sh.aggs))]
        lines += self._group_tail(ns)
        exec(_tg.code_of("\n".join(lines), "<tiny_union tail>"), ns)   # noqa: S102 -- our own source
        return ns["tail"]
