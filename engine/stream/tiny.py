"""Tuple-at-a-time evaluation of a continuous query's BGP over a window of a few hundred triples.

Why: on windows of tens to hundreds of triples (CityBench, small LSBench) the vectorized
executor's fixed cost per BGP step (~10-30 numpy calls on arrays of a few rows, ~20 us a step)
and the per-instant sort of the window into a :class:`~engine.stream.window_graph.SmallGraph`
dominate an instant. :class:`TinyCore` answers the query's join core -- the one BGP under its
chain of unary operators (:func:`~engine.stream.incremental.find_core`; every predicate
constant) -- from the instant's triples directly: one (rows x patterns) match matrix selects
every pattern's triples, their distinct ``(s, o)`` pairs are read out as Python ints (the
stored part's once per store snapshot, with its hash indexes), each connected component is
joined by hash lookups in an order chosen at each instant from the match counts, and the
components are combined by ``repeat`` / ``tile``. A BGP whose components are single patterns
needs no join: its solutions are the masked triples, at any window size. Everything above the BGP (FILTER,
aggregates, projection, DISTINCT, ORDER BY) still runs through the ordinary executor, so its
semantics (errors, bags, unbound values) are the executor's.

The intermediate results are bounded (:attr:`TinyCore.max_rows`, :attr:`TinyCore.max_work`):
beyond that the instant is evaluated by the vectorized path (``None`` from
:meth:`TinyCore.solutions`), which also owns the row budget's error.
"""

from __future__ import annotations

import numpy as np

from engine.arrays import unique
from engine.errors import RowBudgetExceeded
from engine.exec.bindings import Bindings, join
from engine.exec.evaluate import DatasetView, Evaluator
from engine.exec.result import QueryResult
from engine.kv.views import EmptyGraph
from engine.plan.order import bgp_vars, resolve
from engine.plan.rewrite import bgp_of
from engine.sparql import algebra as A
from engine.stream import tiny_vec
from engine.stream.incremental import _UNARY, _exprs, _has_pattern, find_core
from engine.stream.stored_relation import LazyMatch, WholeRelation
from engine.stream.tiny_ops import CountGroup, Spread, expr_ids, filter_mask, having
from engine.stream.tiny_ops import spread as _spread
from engine.stream.tiny_plan import compilable, compile_plan, group_step, pattern_ends, pattern_step
from engine.stream.tiny_vec import ColRows, run_tail, tail_start

__all__ = ["TinyCore", "TinyEvaluator", "TinyFallback"]


_NONE = np.zeros((0, 3), dtype=np.int64)
_PACK = 1 << 31


class TinyFallback(Exception):
    """The executor asked the core for something the tuple-at-a-time rows cannot answer."""


class TinyCore:
    """The BGP core of one continuous query, evaluated tuple at a time over an instant's triples."""

    #: intermediate rows above which an instant is handed to the vectorized path
    max_rows = 4096
    #: rows produced over all steps above which it is handed back too: ~1 us of Python per row
    #: and step against ~20-40 us per vectorized step, so past a few dozen rows a step the
    #: vectorized executor wins (CityBench C5: 300 rows through 8 steps)
    max_work = 1024
    #: solutions of a BGP of one-pattern components above which it is handed to the executor
    flat_rows = 1 << 20
    #: joins run in a kept (compiled) order before the planner weighs the order again
    replan_every = 32

    def __init__(self, query: A.Query | None, bgp: A.BGP | None = None):
        self.base = None
        self.triples: tuple = ()
        self.general = False
        self.flat = False
        self.never = False
        self.direct: tuple | None = None   # (names, DISTINCT, FILTERs/BINDs, CountGroup): :meth:`result`
        self._subs: dict[int, tuple] = {}   # general queries: id(BGP node) -> (node, its core)
        if bgp is not None:   # one BGP of a general query
            self._setup(bgp, bgp.triples)
            return
        found = find_core(query)
        if found is not None:
            node = query.pattern
            while isinstance(node, _UNARY + (A.Slice,)):
                node = node.input
            bgp = bgp_of(node)
            if bgp is not None and all(isinstance(tp.p, A.Const) for tp in bgp.triples):
                self._setup(node, bgp.triples)
                # a FILTER right above the BGP that no solution can pass (``!bound(?v)`` of a
                # variable every solution binds): the core's rows are never read
                have = set(self.vars)
                self.never = any(_static_truth(e, have) is False for e in found[2])
                # only the variables the operators above read become columns (CityBench C5 binds
                # 13, reads 7; LSBench L7 counts rows per ?creator): a bag's rows stay its rows
                used = _read_above(query, node)
                if used is not None:
                    self.out = [v for v in self.vars if v in used]
                    self._keep = set(self.out)
                # SELECT [DISTINCT] ?vars over FILTERs / BINDs right over the core: its result
                # is made from the core's columns by the compiled closures, without the executor
                top, distinct = query.pattern, False
                if isinstance(top, A.Distinct):
                    top, distinct = top.input, True
                if query.form == "SELECT" and isinstance(top, A.Project):
                    ops = []
                    below = top.input
                    while isinstance(below, (A.Filter, A.Extend)):
                        ops.append(below)
                        below = below.input
                    group = None   # a GROUP BY + COUNT right over the core (tiny_ops.CountGroup)
                    if isinstance(below, A.Group) and below.input is node:
                        group = CountGroup.of(below)
                        below = node if group is not None else below
                    if below is node:
                        self.direct = ([v.name for v in top.vars], distinct, ops[::-1], group)
            return
        # OPTIONAL, UNION, MINUS, joins of groups: every BGP answered tuple at a time, the
        # operators between them by the executor over those rows
        bgps: list = []
        if query.form in ("SELECT", "ASK", "CONSTRUCT") and _general(query.pattern, bgps) and bgps:
            self._subs = {id(b): (b, TinyCore(None, b)) for b in bgps}
            self.base = query.pattern
            self.general = True
            self.vars = list(dict.fromkeys(v for b in bgps for v in bgp_vars(b.triples)))
            self.out = self.vars

    def result(self, sol: Bindings, ctx) -> QueryResult | None:
        """The query's result from the core's solutions when the query is ``SELECT [DISTINCT]
        ?vars`` over FILTERs and BINDs right over the BGP (:attr:`direct`): each FILTER / BIND
        by :func:`~engine.stream.tiny_ops.filter_mask` / :func:`~engine.stream.tiny_ops.expr_ids`
        and the projection as the executor's ``_Filter`` / ``_Extend`` / ``_Project`` /
        ``_Distinct`` make them, without walking the operator tree; None when a closure leaves
        rows undecided (the executor then evaluates the instant's rows)."""
        names, distinct, ops, group = self.direct
        ctx.check_budget()
        ctx.check_rows(sol.n)
        if group is not None:   # as TinyEvaluator.eval: the counts, a HAVING right above on integers
            keep = None
            if ops and isinstance(ops[0], A.Filter):
                keep = having(ops[0].expr, group)
                if keep is None:
                    return None
                ops = ops[1:]
            sol = group.run(sol, ctx, keep)
            ctx.check_budget()
            ctx.check_rows(sol.n)
        # the first FILTERs read the core's own solutions: their doubles per component column
        first = sol if self._spread_of is sol else None
        for op in ops:
            if isinstance(op, A.Filter):
                if sol.n:
                    m = filter_mask(op.expr, sol.cols, sol.n, ctx, self._spread if sol is first else None)
                    if m is None:
                        return None
                    sol = sol.mask(m)
            else:
                name = op.var.name
                if name in sol.cols:
                    return None   # (a variable bound below: the executor's compatibility rule)
                if isinstance(op.expr, A.Var):   # (an aggregate's value under its name)
                    vals = sol.col(op.expr.name)
                elif sol.n:
                    vals = expr_ids(op.expr, sol.cols, sol.n, ctx) if isinstance(op.expr, A.Call) else None
                    if vals is None:
                        return None
                else:
                    vals = np.zeros(0, np.int64)
                sol = sol.with_col(name, vals)
            ctx.check_budget()
            ctx.check_rows(sol.n)
        if distinct:
            sol = sol.project(names).distinct()
        return QueryResult(form="SELECT", terms=ctx, vars=list(names), columns=[sol.col(v) for v in names],
                           ordered=False, n_rows=sol.n)

    def _setup(self, node, triples) -> None:
        self.base = node                      # the node of the parsed tree the rows answer
        self.triples = triples
        self.vars = bgp_vars(triples)
        self.out = self.vars          # the variables the solutions carry as columns
        self._keep: set | None = None   # the same as a set, when some variable is left out
        self._components = _components(triples)
        self.flat = all(len(c) == 1 for c in self._components)
        self._flat_key = None
        self._flat_stored: list = []
        self._sn = None
        self._pats: list | None = None        # per pattern: (s, p, o) with ("c", id) / ("v", name)
        self._kp = np.zeros(0, dtype=np.int64)   # per distinct selection: p, s, o ids (-1: variable)
        self._kof: list[int] = []                 # per pattern: its selection
        self._stored_key = None
        self._stored: list = []
        self._stored_ref = None
        self._base_key = None
        self._base: dict[int, tuple | None] = {}   # per component: its solutions over the stored part
        self._groups_key = None
        self._fan_est: dict[tuple, list] = {}   # (pattern, end) -> [window fan-out, instants left]
        self._stat_parts: dict[tuple, list] = {}   # static patterns -> their connected groups
        self._groups: dict[tuple, _Joined | None] = {}   # joined static pattern groups (per snapshot)
        self._plans: dict[tuple, list] = {}   # (patterns, groups, bound slots) -> a kept join order, compiled
        self._spread = Spread()   # how the last solutions were spread from the components' columns
        self._spread_of: Bindings | None = None   # ... those solutions

    @property
    def usable(self) -> bool:
        return self.base is not None

    def _resolve(self, ctx) -> None:
        """The patterns' constants as ids, kept per store snapshot -- but not when a constant is
        absent: stream elements intern terms without a commit, so it may arrive at any instant."""
        sn = ctx.snapshot.sn
        if self._sn == sn and self._pats is not None:
            return
        res = resolve(self.triples, ctx.lookup)
        self._pats = res
        if res is not None:
            # the distinct selections (patterns equal up to variable names select the same)
            keys: dict[tuple, int] = {}
            self._kof = []
            for s, p, o in res:
                key = (s[1] if s[0] == "c" else -1, p[1], o[1] if o[0] == "c" else -1, s[0] == "v" and s == o)
                self._kof.append(keys.setdefault(key, len(keys)))
            ks = list(keys)
            self._ks = np.array([x[0] for x in ks], dtype=np.int64)
            self._kp = np.array([x[1] for x in ks], dtype=np.int64)
            self._ko = np.array([x[2] for x in ks], dtype=np.int64)
            self._svar, self._ovar = self._ks < 0, self._ko < 0
            self._same = np.array([x[3] for x in ks], dtype=bool)
            self._any_same = bool(self._same.any())
            # the same as (distinct selections x 1) columns, for a (selections x rows) match
            # matrix whose rows nonzero() reads in order; a test left out when no selection needs it
            self._cp = self._kp[:, None]
            self._cs = (self._ks[:, None], self._svar[:, None]) if not self._svar.all() else None
            self._co = (self._ko[:, None], self._ovar[:, None]) if not self._ovar.all() else None
            self._csame = ~self._same[:, None]
            self._bounds_at = np.arange(len(ks) + 1)
            # per distinct selection: its predicate when both ends are distinct variables (a wide
            # stored predicate the caller may hand over as a StoredRelation), else None
            self._kwide = [x[1] if x[0] < 0 and x[2] < 0 and not x[3] else None for x in ks]
        self._sn = sn

    # -- matches ---------------------------------------------------------------
    def _select(self, rows: np.ndarray) -> list[list[tuple]]:
        """Per distinct selection (``self._kof`` maps patterns to them), its distinct matching
        triples of ``rows`` as ``(s, o)`` pairs of ints: one (selections x rows) match matrix (the
        subject / object tests only when some selection has a constant there), one ``nonzero``,
        one read-out."""
        k = len(self._kp)
        if not len(rows) or not k:
            return [[] for _ in range(k)]
        pi, ri = np.nonzero(self._mask(rows))
        if not len(pi):
            return [[] for _ in range(k)]
        sel = rows[ri]
        sv, ov = sel[:, 0].tolist(), sel[:, 2].tolist()
        if k == 1:
            per = [list(dict.fromkeys(zip(sv, ov, strict=True)))]
        else:
            bounds = pi.searchsorted(self._bounds_at).tolist()
            per = [list(dict.fromkeys(zip(sv[a:b], ov[a:b], strict=True))) if b > a else []
                   for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return per

    def _matches(self, rows: np.ndarray, stored: np.ndarray, wide: dict | None = None) -> list:
        """Per pattern, its matches: the stored part (``stored``, the first rows of ``rows``;
        the same array object for a store snapshot: selected and indexed once) and the
        instant's part (the other rows, minus triples the stored part holds). ``wide``: predicate
        -> :class:`~engine.stream.stored_relation.StoredRelation` of the stored predicates the
        rows leave out; a selection of one of them (both ends variables) reads it by probes
        (:class:`~engine.stream.stored_relation.LazyMatch`) and counts as having no stored
        part (the component is joined from its matches at every instant, as when the rows
        carried the relation's restriction)."""
        n_stored = len(stored)
        lazy = None
        if wide:
            lazy = [wide.get(p) if p is not None else None for p in self._kwide]
            if not any(x is not None for x in lazy):
                lazy = None
        key = (self._sn, id(stored), n_stored, lazy is not None)
        if self._stored_key != key or self._stored_ref is not stored:
            # one match per distinct selection: patterns equal up to variable names share it
            # (and its indexes)
            self._stored_sel = [_Match(m) for m in self._select(stored)]
            if lazy is not None:   # (their stored pairs are the relation's: read from it)
                self._stored_sel = [_Match([]) if rel is not None else sm
                                    for sm, rel in zip(self._stored_sel, lazy, strict=True)]
            self._stored = [self._stored_sel[j] for j in self._kof]
            self._stored_key = key
            self._stored_ref = stored   # keeps the array (and so its id) alive
        inst = self._select(rows[n_stored:])
        out = []
        for j, (sm, wm) in enumerate(zip(self._stored_sel, inst, strict=True)):
            rel = lazy[j] if lazy is not None else None
            if rel is not None:
                out.append(LazyMatch(rel, rel.fresh(wm) if wm else wm))
                continue
            if sm.pairs and wm:
                have = sm.pairset()
                wm = [p for p in wm if p not in have]
            out.append(sm.with_instant(wm) if wm else sm)
        return [out[j] for j in self._kof]

    # -- one pattern per component: vectorized at any size ------------------------
    def _mask(self, rows: np.ndarray) -> np.ndarray:
        """(distinct selections x rows) booleans: which rows each selection matches."""
        m = self._cp == rows[:, 1]
        if self._cs is not None:
            m &= (self._cs[0] == rows[:, 0]) | self._cs[1]
        if self._co is not None:
            m &= (self._co[0] == rows[:, 2]) | self._co[1]
        if self._any_same:
            m &= (rows[:, 0] == rows[:, 2]) | self._csame
        return m

    def _flat(self, rows: np.ndarray, stored: np.ndarray, ctx) -> Bindings | None:
        """Every component is one pattern (``?liker :like ?post``; a product of such): each
        pattern's solutions are its distinct matching triples, selected by masks -- no index, no
        Python per triple, whatever the window's size."""
        n_stored = len(stored)
        key = (self._sn, id(stored), n_stored)
        if self._flat_key != key or self._stored_ref is not stored:
            ms = self._mask(stored) if n_stored else None
            self._flat_stored = [stored[ms[j]] if ms is not None else _NONE for j in range(len(self._kp))]
            self._flat_key = key
            self._stored_ref = stored
        inst = rows[n_stored:]
        mi = self._mask(inst) if len(inst) else None
        sel = []
        for j in range(len(self._kp)):
            st = self._flat_stored[j]
            if mi is None:
                r = st
            else:
                r = inst[mi[j]]
                if len(st):   # (a stream-only pattern has no stored part to add)
                    r = np.concatenate([st, r])
            sel.append(_distinct_so(r))
        cols: dict[str, np.ndarray] = {}
        total = 1
        per = []
        for i, (s, _, o) in enumerate(self._pats):
            ss, os_ = sel[self._kof[i]]
            if not len(ss):
                return Bindings.empty(self.out)
            c = {}
            if s[0] == "v":
                c[s[1]] = ss
            if o[0] == "v" and o[1] not in c:
                c[o[1]] = os_
            n = len(ss) if c else 1
            per.append((c, n))
            total *= n
        if total > (self.flat_rows if ctx.max_rows is None else min(self.flat_rows, ctx.max_rows)):
            return None
        outer = 1
        factors: dict[str, tuple] = {}
        for c, n in per:
            inner = total // (outer * n)
            for v, col in c.items():
                if self._keep is None or v in self._keep:
                    col = np.ascontiguousarray(col, dtype=np.int64)
                    cols[v] = _spread(col, inner, outer)
                    factors[v] = (col, inner, outer)
            outer *= n
        out = Bindings({v: cols[v] for v in self.out}, total)
        self._spread.parts = factors
        self._spread_of = out
        return out

    # -- the join ----------------------------------------------------------------
    def solutions(self, rows: np.ndarray, ctx, stored: np.ndarray | None = None,
                  wide: dict | None = None) -> Bindings | None:
        """The BGP's solutions over the distinct triples of ``rows`` ((n, 3) int64, duplicates
        allowed), whose first rows are ``stored`` (the store's part: the same array object
        while the store snapshot is the same, its matches are kept), plus the stored relations
        ``wide`` (predicate -> :class:`~engine.stream.stored_relation.StoredRelation`: wide
        stored predicates the rows leave out, read by probes); None when the intermediate rows
        exceed the bound or a step needs a whole relation (the caller evaluates the instant
        vectorized)."""
        try:
            return self._solutions(rows, ctx, stored, wide)
        except WholeRelation:
            return None

    def _solutions(self, rows: np.ndarray, ctx, stored: np.ndarray | None, wide: dict | None) -> Bindings | None:
        if self.general:
            try:
                return _Nested(ctx, self._subs, rows, stored).eval(self.base)
            except (_HandBack, TinyFallback, RowBudgetExceeded):
                return None   # the vectorized path evaluates the instant (and reports a budget)
        if self.never:   # the FILTER above drops every row: none needs computing
            return Bindings.empty(self.out)
        self._resolve(ctx)
        if self._pats is None:   # a constant the store does not hold: no solution
            return Bindings.empty(self.out)
        if self.flat:
            return self._flat(rows, _NONE if stored is None else stored, ctx)
        matches = self._matches(rows, _NONE if stored is None else stored, wide)
        limit = self.max_rows if ctx.max_rows is None else min(self.max_rows, ctx.max_rows)
        parts = []   # per connected component: (var -> column, number of rows)
        budget = [self.max_work]
        for ci, comp in enumerate(self._components):
            got = self._component(ci, comp, matches, limit, ctx, budget)
            if got is None:
                return None
            if not got[1]:
                return Bindings.empty(self.out)
            parts.append(got)
        # the product of the components, by repeat / tile of their columns: no Python per row
        total = 1
        for _, n in parts:
            total *= n
        if ctx.max_rows is not None and total > ctx.max_rows:
            return None   # the vectorized path reports the row budget
        cols: dict[str, np.ndarray] = {}
        factors: dict[str, tuple] = {}
        outer = 1
        for got, n in parts:
            inner = total // (outer * n)
            for v, col in got.items():
                cols[v] = _spread(col, inner, outer)
                factors[v] = (col, inner, outer)
            outer *= n
        out = Bindings({v: cols[v] for v in self.out}, total)
        self._spread.parts = factors
        self._spread_of = out
        return out

    def _component(self, ci: int, comp: list[int], matches: list, limit: int, ctx,
                   budget: list[int]) -> tuple | None:
        """One connected component's solutions as ``(var -> column, n)``, by the delta
        decomposition against the stored part (CQELS' static side): every solution takes each
        pattern's triple either from the stored part S or from the instant's other triples W
        (disjoint: W excludes S), so the solutions are those all in S -- joined once per store
        snapshot and kept -- plus, for each pattern i with W matches, those taking pattern i
        from W, the patterns before it from S and the ones after it from S or W. Each such
        term starts from pattern i's few W triples and probes the others' hash indexes, so an
        instant costs in proportion to the window's matches, not to the static data."""
        stored = self._stored
        if not all(len(stored[j]) for j in comp):
            # a pattern without stored triples: no solution lies in S alone and every term but
            # the one seeded by that pattern is empty -- the component is one join of its
            # matches (the patterns without window triples probed as kept static groups)
            left, groups = self._static_groups(comp, matches, ctx)
            got = self._join(left, matches, limit, ctx, budget, groups=groups)
            if got is None:
                return None
            return _columns(*got, self._keep), len(got[0])
        base = self._base_solutions(ci, comp, ctx)
        if base is None:
            return None
        cols = [base[0]] if base[1] else []
        n = base[1]
        # any order of the patterns gives the same union; patterns without stored triples first
        # (the fewest matches leading): every term after the first of them is empty, so a
        # component of window-only patterns costs one join, seeded by its most selective one
        order = sorted(comp, key=lambda j: (len(stored[j]) > 0, len(matches[j])))
        for k, i in enumerate(order):
            inst = matches[i].inst
            if not inst:
                if not len(stored[i]):
                    break   # a pattern with no match at all: no solution
                continue
            if any(not len(stored[j]) for j in order[:k]):
                break   # a pattern before i has no stored triple: this term and the later ones are empty
            before = set(order[:k])
            pick = {j: (stored[j] if j in before else matches[j]) for j in comp}
            slots: dict[str, int] = {}
            cur = self._step([()], self._pats[i], _Match(inst), slots, limit)
            if cur is None:
                return None
            if cur:
                left, groups = self._static_groups([j for j in comp if j != i], matches, ctx)
                got = self._join(left, pick, limit, ctx, budget, cur, slots, groups)
                if got is None:
                    return None
                cur, slots = got
            budget[0] -= len(cur)
            if budget[0] < 0:   # many rows through many steps: the vectorized steps are cheaper
                return None
            if cur:
                cols.append(_columns(cur, slots, self._keep))
                n += len(cur)
                if n > limit:
                    return None
        if len(cols) == 1:
            return cols[0], n
        if not cols:
            return {}, 0
        return {v: np.concatenate([c[v] for c in cols]) for v in cols[0]}, n

    def _base_solutions(self, ci: int, comp: list[int], ctx) -> tuple | None:
        """The component's solutions over the stored part alone, kept per store snapshot (the
        key of the stored matches); None when they exceed :attr:`max_rows` (kept as such)."""
        key = self._stored_key
        if self._base_key != key:
            self._base = {}
            self._base_key = key
        if ci in self._base:
            return self._base[ci]
        stored = self._stored
        out: tuple | None
        if any(not len(stored[j]) for j in comp):
            out = ({}, 0)
        else:
            got = self._join(list(comp), {j: stored[j] for j in comp}, self.max_rows, ctx, [1 << 62],
                             compiled=False)
            out = None if got is None else (_columns(*got, self._keep), len(got[0]))
            if out is not None and not out[1]:
                out = ({}, 0)
        self._base[ci] = out
        return out

    def _fanout(self, i: int, m: _Match, k: int) -> float:
        """Pattern ``i``'s matches per value at end ``k``: the stored part's (kept per snapshot),
        else an estimate from the windows, refreshed every 32 instants (stream data keeps its
        shape: one value per observation and property)."""
        if m.pairs or m.lazy:
            return m.fanout(k)
        est = self._fan_est.get((i, k))
        if est is None or est[1] <= 0:
            est = self._fan_est[i, k] = [m.fanout(k), 32]
        est[1] -= 1
        return est[0]

    def _static_groups(self, left: list[int], matches: list, ctx) -> tuple[list[int], list]:
        """``left`` split into the patterns with window matches at this instant and groups of
        connected patterns without (the static side): a group's join over the stored part is
        kept per store snapshot with hash indexes on the variables it is probed by, so a term
        reaches a chain of static patterns (sensor -> property -> location ...) in one lookup."""
        # (a wide stored relation is probed, never joined whole)
        stat = [j for j in left if not matches[j].inst and not matches[j].lazy]
        if len(stat) < 2:
            return left, []
        if self._groups_key != self._stored_key:
            self._groups = {}
            self._groups_key = self._stored_key
        dyn = [j for j in left if matches[j].inst or matches[j].lazy]
        groups = []
        key = tuple(stat)
        parts = self._stat_parts.get(key)
        if parts is None:   # (structural: kept for the query's life)
            parts = self._stat_parts[key] = [tuple(stat[k] for k in g)
                                             for g in _components([self.triples[j] for j in stat])]
        for members in parts:
            if len(members) < 2:
                dyn.append(members[0])
                continue
            got = self._groups.get(members, False)
            if got is False:
                st = self._stored
                j = self._join(list(members), {m: st[m] for m in members}, self.max_rows, ctx, [1 << 62],
                               compiled=False)
                got = self._groups[members] = None if j is None else _Joined(*j)
            if got is None:
                dyn.extend(members)   # too many rows to keep: joined pattern by pattern
            else:
                groups.append(got)
        return dyn, groups

    def _join(self, left: list[int], matches, limit: int, ctx, budget: list[int],
              cur: list[tuple] | None = None, slots: dict | None = None, groups: list | None = None,
              compiled: bool = True) -> tuple | None:
        """The solutions of one connected group of patterns (``left``, and ``groups`` of already
        joined ones; extending ``cur`` whose variables are at ``slots``): ``(rows, var -> slot)``,
        None past the bound. Order: a pattern whose variables are all bound (a test) first, then
        the connected pattern with the fewest matches -- chosen by :meth:`_plan_join` and then
        kept, compiled (:mod:`engine.stream.tiny_plan`), for :attr:`replan_every` calls."""
        slots = {} if slots is None else slots
        cur = [()] if cur is None else cur
        if not compiled:   # (a static group's rows, kept as tuples: joined once per snapshot)
            return self._plan_join(left, matches, limit, ctx, budget, cur, slots, groups, None, columns=False)
        key = (tuple(left), tuple(map(id, groups)) if groups else (), tuple(slots))
        plan = self._plans.get(key)
        if plan is not None and plan[2] > 0:
            plan[2] -= 1
            if plan[0] is None:   # compiled on its second use: a join run once is not worth ~0.3 ms
                plan[0] = compile_plan(*plan[4]) if plan[4][0] or plan[5] is None else True
            got = self._run_plan(plan, matches, limit, ctx, budget, cur, slots, groups)
            if got is not None:
                return got
            # past the work bound in the kept order: weighed again at once
        order: list = []
        sizes: list = []
        start = dict(slots)
        got = self._plan_join(left, matches, limit, ctx, budget, cur, slots, groups, order, sizes)
        if got is not None and len(order) == len(left) + (len(groups) if groups else 0):
            plan = self._compile(order, start, groups, sizes)
            if compilable(plan[4][0]):   # (else interpreted at every call: too deep to compile)
                if len(self._plans) > 256:
                    self._plans.clear()
                self._plans[key] = plan
        return got

    def _compile(self, order: list, slots: dict, groups: list | None, sizes: list | None = None) -> list:
        """``[run (None until compiled), step objects' refs, uses left, final slots, (steps,
        width), tail]`` for a join order the planner chose (refs: a pattern index, or ``~k`` for
        ``groups[k]``). ``tail``: None, or ``(s, steps, width)`` -- from step ``s`` on, where the
        planner saw the rows reach :data:`~engine.stream.tiny_vec.VEC_ROWS` (``sizes``), the
        steps run on columns (:func:`~engine.stream.tiny_vec.run_tail`), the compiled loops
        before it."""
        slots = dict(slots)
        width = len(slots)
        steps, refs, widths = [], [], []
        for item in order:
            widths.append(len(slots))
            if isinstance(item, _Joined):
                k = next(x for x, g in enumerate(groups) if g is item)
                steps.append(group_step(item.slots, slots))
                refs.append(~k)
            else:
                steps.append(pattern_step(self._pats[item], slots))
                refs.append(item)
        s = tail_start(steps, sizes) if sizes else None
        if s is None:
            return [None, refs, self.replan_every, slots, (steps, width), None]
        return [None, refs, self.replan_every, slots, (steps[:s], width), (s, steps[s:], widths[s])]

    def _run_plan(self, plan: list, matches, limit: int, ctx, budget: list[int], cur: list[tuple],
                  slots: dict, groups: list | None) -> tuple | None:
        """A kept join order's compiled loops; None past the work bound (then the planner runs)."""
        run, refs, _, final, _, tail = plan
        objs = []
        for r in refs:
            if r < 0:
                objs.append(groups[~r])
            else:
                m = matches[r]
                if not len(m):   # a pattern without matches: no solution
                    slots.update(final)
                    return [], slots
                objs.append(m)
        ctx.check_budget()
        if tail is None:
            got = run(cur, objs, min(limit, budget[0]))
        else:   # the loops up to the fan-out, the rest on columns
            s, tsteps, twidth = tail
            got = run(cur, objs[:s], min(limit, budget[0])) if s else (cur, 0)
            if got is not None:
                pre, w0 = got
                got = run_tail(pre, objs[s:], tsteps, twidth, limit, min(limit, budget[0]) - w0)
                if got is not None:
                    got = got[0], got[1] + w0
        if got is None:
            return None
        out, work = got
        if len(out) > limit:
            return None
        budget[0] -= work
        slots.update(final)
        return out, slots

    def _plan_join(self, left: list, matches, limit: int, ctx, budget: list[int], cur: list[tuple],
                   slots: dict, groups: list | None, order: list | None, sizes: list | None = None,
                   columns: bool = True) -> tuple | None:
        """The interpreted join, choosing the order step by step (recorded in ``order``, the
        rows after each step in ``sizes``); from :data:`~engine.stream.tiny_vec.VEC_ROWS` rows
        on, the steps run on columns (unless ``columns`` is false)."""
        pats = self._pats
        left = list(left)
        if groups:
            left += groups
        while left:
            ctx.check_budget()
            best = None
            n = len(cur)
            for i in left:
                if isinstance(i, _Joined):
                    conn = any(v in slots for v in i.slots)
                    if conn and all(v in slots for v in i.slots):
                        best = (None, i)
                        break   # a test
                    key = (n if conn else n * len(i.rows), 0 if conn else 1)
                else:
                    s, _, o = pats[i]
                    sv = s[0] == "v" and s[1] in slots
                    ov = o[0] == "v" and o[1] in slots
                    if sv or ov:
                        if (sv or s[0] == "c") and (ov or o[0] == "c"):
                            best = (None, i)
                            break   # a test: every row kept or dropped, none added
                        # the rows it would produce: per bound row, its matches per value of
                        # the bound end (a chain through a selective pattern beats a wide fan-out)
                        key = (n * self._fanout(i, matches[i], 0 if sv else 1), 0)
                    elif matches[i].lazy:
                        key = (float("inf"), 2)   # a wide stored relation: only probed by a bound end
                    else:
                        key = (n * len(matches[i]), 1)
                if best is None or key < best[0]:
                    best = (key, i)
            i = best[1]
            left.remove(i)
            if order is not None:
                order.append(i)
            # wide (from VEC_ROWS rows in; or a step the loops give up on: too many rows out of
            # it for the work bound): the step on columns
            joined = isinstance(i, _Joined)
            step_in = cur
            if not (columns and (isinstance(cur, ColRows) or len(cur) >= tiny_vec.VEC_ROWS)):
                before = dict(slots)
                if joined:
                    cur = i.step(cur, slots, min(limit, budget[0]))
                else:
                    cur = self._step(cur, pats[i], matches[i], slots, min(limit, budget[0]))
                work = len(cur) if cur is not None else 0
                if columns and (cur is None or work > budget[0]):
                    slots.clear()   # (the same dict: the caller reads it)
                    slots.update(before)
                    cur = None
                else:
                    step_in = None
            if step_in is not None:
                width = len(slots)
                st = group_step(i.slots, slots) if joined else pattern_step(pats[i], slots)
                got = run_tail(step_in, [i if joined else matches[i]], [st], width, limit, budget[0])
                if got is None:
                    return None
                cur, work = got
            if cur is None:
                return None
            if sizes is not None:
                sizes.append(len(cur))
            budget[0] -= work
            if budget[0] < 0:   # many rows through many steps: the vectorized steps are cheaper
                return None
            if not cur:
                if order is not None:
                    order += self._rest_order(left, slots)
                return cur, slots
        return cur, slots

    def _rest_order(self, left: list, slots: dict) -> list:
        """An order for the patterns / groups a join did not reach (it ran out of rows): each
        next one connected to the variables bound so far when one is, to be compiled with the
        order that was chosen (a later instant with rows weighs it again past the work bound)."""
        bound = set(slots)
        left = list(left)
        out = []
        while left:
            pick = left[0]
            for i in left:
                names = i.slots if isinstance(i, _Joined) else [t[1] for t in (self._pats[i][0], self._pats[i][2])
                                                                if t[0] == "v"]
                if any(v in bound for v in names):
                    pick = i
                    break
            left.remove(pick)
            out.append(pick)
            bound.update(pick.slots if isinstance(pick, _Joined)
                         else (t[1] for t in (self._pats[pick][0], self._pats[pick][2]) if t[0] == "v"))
        return out

    @staticmethod
    def _step(cur: list[tuple], pat, m: _Match, slots: dict, limit: int) -> list[tuple] | None:
        bound, free = pattern_ends(pat, slots)
        if not len(m):
            return []
        if not free:   # a test of every row
            if not bound:
                return cur
            if len(bound) == 1:
                (k, j), = bound
                has = m.tester(k)
                return [r for r in cur if has(r[j])]
            (k0, j0), (k1, j1) = bound
            test = m.pair_tester()
            if k0 == 0:
                return [r for r in cur if test(r[j0], r[j1])]
            return [r for r in cur if test(r[j1], r[j0])]
        for _, v in free:
            slots[v] = len(slots)
        if not bound:   # a product with the pattern's (distinct) values
            if len(cur) * len(m) > limit:
                return None
            vals = m.values(free[0][0]) if len(free) == 1 else m.all_pairs()
            return [r + x for r in cur for x in vals]
        (kb, j), = bound
        get = m.getter(kb)
        out: list[tuple] = []
        for r in cur:
            hit = get(r[j])
            if hit:
                if len(hit) == 1:   # (at most one row per row of cur: checked at the end)
                    out.append(r + hit[0])
                else:
                    out += [r + x for x in hit]
                    if len(out) > limit:
                        return None
        return None if len(out) > limit else out


class _Joined:
    """A group of patterns joined over the stored part: its rows, its variables' slots, and
    hash indexes by the tuple of variables it is probed with (built on first use)."""

    __slots__ = ("rows", "slots", "_idx", "_vec")

    def __init__(self, rows: list[tuple], slots: dict[str, int]):
        self.rows = rows
        self.slots = dict(slots)
        self._idx: dict[tuple, dict] = {}
        self._vec: dict = {}   # (engine.stream.tiny_vec: sorted arrays per probing variable)

    def index(self, bound: tuple) -> dict:
        """The group's rows by their values of the variables ``bound``: tuples of the other
        variables' values (in the group's order), built on first use."""
        idx = self._idx.get(bound)
        if idx is None:
            bpos = [self.slots[v] for v in bound]
            fpos = [k for v, k in self.slots.items() if v not in bound]
            idx = self._idx[bound] = {}
            for r in self.rows:
                idx.setdefault(tuple(r[k] for k in bpos), []).append(tuple(r[k] for k in fpos))
        return idx

    def step(self, cur: list[tuple], slots: dict, limit: int) -> list[tuple] | None:
        """``cur`` joined with the group's rows on the variables both bind."""
        bound = tuple(v for v in self.slots if v in slots)
        free = [v for v in self.slots if v not in slots]
        fpos = [self.slots[v] for v in free]
        for v in free:
            slots[v] = len(slots)
        if not bound:
            if len(cur) * len(self.rows) > limit:
                return None
            ext = [tuple(r[k] for k in fpos) for r in self.rows]
            return [r + x for r in cur for x in ext]
        idx = self.index(bound)
        cpos = [slots[v] for v in bound]
        out: list[tuple] = []
        if len(cpos) == 1:
            (c0,) = cpos
            for r in cur:
                hit = idx.get((r[c0],))
                if hit:
                    out += [r + x for x in hit]
                    if len(out) > limit:
                        return None
            return out
        for r in cur:
            hit = idx.get(tuple(r[k] for k in cpos))
            if hit:
                out += [r + x for x in hit]
                if len(out) > limit:
                    return None
        return out


class _Match:
    """One pattern's distinct ``(s, o)`` pairs: a stored part whose indexes are built on first use
    and kept while the store snapshot is the same, plus an instant's part (not in the stored one)."""

    __slots__ = ("pairs", "inst", "_set", "_ends", "_idx", "_iset", "_iidx", "_fan", "_arrs")

    lazy = False   # (a StoredRelation's LazyMatch: True)

    def __init__(self, pairs: list[tuple], base: _Match | None = None):
        self.pairs = pairs
        self.inst: list[tuple] = []
        self._set = None
        self._ends: dict[int, set] = {}
        self._idx: dict[int, dict] = {}
        self._iset = None
        self._iidx: dict[int, dict] = {}
        self._fan: list = [None, None]
        self._arrs: dict = {}   # end -> the stored pairs sorted by it (engine.stream.tiny_vec)

    def fanout(self, k: int) -> float:
        """Matches per distinct value at end ``k`` (of the stored part when it has any: kept
        across instants)."""
        fan = self._fan
        f = fan[k]
        if f is None:
            pairs = self.pairs or self.inst
            f = fan[k] = len(pairs) / max(1, len({p[k] for p in pairs}))
        return f

    def with_instant(self, inst: list[tuple]) -> _Match:
        m = _Match.__new__(_Match)
        m.pairs, m.inst = self.pairs, inst
        # the stored indexes are shared with the cached match (built there, kept across instants)
        m._set, m._ends, m._idx, m._arrs = self, self._ends, self._idx, self._arrs
        m._iset, m._iidx = None, {}
        m._fan = self._fan if self.pairs else [None, None]
        return m

    def __len__(self) -> int:
        return len(self.pairs) + len(self.inst)

    def pairset(self) -> set:
        base = self._set
        if isinstance(base, _Match):
            return base.pairset()
        if base is None:
            base = self._set = set(self.pairs)
        return base

    def has_instant(self, pair: tuple) -> bool:
        if not self.inst:
            return False
        if self._iset is None:
            self._iset = set(self.inst)
        return pair in self._iset

    def has(self, k: int, v: int) -> bool:
        e = self._ends.get(k)
        if e is None:
            e = self._ends[k] = {p[k] for p in self.pairs}
        if v in e:
            return True
        if self.inst:
            ie = self._iidx.get(-1 - k)
            if ie is None:
                ie = self._iidx[-1 - k] = {p[k]: None for p in self.inst}
            return v in ie
        return False

    def getter(self, kb: int):
        """``v -> the (other end,) tuples of the pairs with v at end kb`` (None if there are
        none): the index's own ``get`` when one part is empty, else both parts'."""
        idx = self._idx.get(kb)
        if idx is None:
            idx = self._idx[kb] = _index(self.pairs, kb)
        if not self.inst:
            return idx.get
        ii = self._iidx.get(kb)
        if ii is None:
            ii = self._iidx[kb] = _index(self.inst, kb)
        if not idx:
            return ii.get
        sg, ig = idx.get, ii.get

        def get(v):
            a, b = sg(v), ig(v)
            if b is None:
                return a
            return b if a is None else a + b
        return get

    def pair_tester(self):
        """``(s, o) -> whether the pair is a match``."""
        have = self.pairset()
        if not self.inst:
            return lambda a, b: (a, b) in have
        if self._iset is None:
            self._iset = set(self.inst)
        iset = self._iset
        if not have:
            return lambda a, b: (a, b) in iset
        return lambda a, b: (a, b) in have or (a, b) in iset

    def tester(self, k: int):
        """``v -> whether some pair has v at end k``."""
        e = self._ends.get(k)
        if e is None:
            e = self._ends[k] = {p[k] for p in self.pairs}
        if not self.inst:
            return e.__contains__
        ie = self._iidx.get(-1 - k)
        if ie is None:
            ie = self._iidx[-1 - k] = {p[k]: None for p in self.inst}
        if not e:
            return ie.__contains__
        return lambda v: v in e or v in ie

    def get(self, kb: int, v: int) -> list[tuple]:
        idx = self._idx.get(kb)
        if idx is None:
            idx = self._idx[kb] = _index(self.pairs, kb)
        hit = idx.get(v, ())
        if self.inst:
            ii = self._iidx.get(kb)
            if ii is None:
                ii = self._iidx[kb] = _index(self.inst, kb)
            more = ii.get(v)
            if more:
                return list(hit) + more
        return hit

    def values(self, k: int) -> list[tuple]:
        return [(p[k],) for p in self.pairs] + [(p[k],) for p in self.inst]

    def all_pairs(self) -> list[tuple]:
        return self.pairs + self.inst if self.inst else self.pairs


def _columns(rows: list[tuple] | ColRows, slots: dict, keep: set | None = None) -> dict[str, np.ndarray]:
    """Tuple rows (or a join's columns) as one int64 column per variable (of ``keep`` only, when
    given)."""
    if keep is not None:
        slots = {v: j for v, j in slots.items() if v in keep}
    if isinstance(rows, ColRows):
        return {v: rows.cols[j] for v, j in slots.items()}
    if not rows:
        return {v: np.zeros(0, dtype=np.int64) for v in slots}
    vals = list(zip(*rows, strict=True))
    return {v: np.array(vals[j], dtype=np.int64) for v, j in slots.items()}


def _index(pairs: list[tuple], kb: int) -> dict[int, list[tuple]]:
    kf = 1 - kb
    idx: dict[int, list] = {}
    for p in pairs:
        idx.setdefault(p[kb], []).append((p[kf],))
    return idx


def _distinct_so(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (s, o) pairs of the triples of one selection (one predicate): a window is
    a set, and stored and window triples may coincide. One sort of packed keys when the ids fit
    in 31 bits (they do below 2^31 terms), else a lexsort."""
    s, o = r[:, 0], r[:, 2]
    if len(r) <= 1:
        return s, o
    if int(s.max()) < _PACK and int(o.max()) < _PACK:
        u = unique((s << 32) | o)
        return u >> 32, u & (_PACK - 1)
    order = np.lexsort((o, s))
    s, o = s[order], o[order]
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    keep[1:] = (s[1:] != s[:-1]) | (o[1:] != o[:-1])
    return s[keep], o[keep]


def _components(triples) -> list[list[int]]:
    """The patterns' indexes grouped by connected component (patterns sharing a variable)."""
    parent = list(range(len(triples)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, tp in enumerate(triples):
        for term in (tp.s, tp.o):
            if isinstance(term, A.Var):
                j = first.setdefault(term.name, i)
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(triples)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


class TinyEvaluator(Evaluator):
    """The executor, with the query's BGP core answered by :class:`TinyCore`'s rows."""

    def __init__(self, ctx, dataset, base, rows: Bindings):
        super().__init__(ctx, dataset)
        self._base = base
        self._rows = rows

    def eval(self, node, seed=None):
        if node is self._base:
            if seed is not None:
                raise TinyFallback
            return self._check(self._rows)
        if seed is None:
            # GROUP BY + COUNT (and a HAVING on the counts) right above the core: on integers
            keep = None
            group = node
            if isinstance(node, A.Filter) and isinstance(node.input, A.Group):
                group = node.input
            rows = self._direct(group.input) if isinstance(group, A.Group) else None
            if rows is not None:
                cg = CountGroup.of(group)
                if cg is not None and group is not node:
                    keep = having(node.expr, cg)
                    if keep is None:
                        cg = None   # the executor's HAVING over the executor's group
                if cg is not None:
                    self.ctx.check_budget()
                    return self._check(cg.run(rows, self.ctx, keep))
        return super().eval(node, seed)

    def _direct(self, node) -> Bindings | None:
        """The rows of ``node`` when the core answers it directly, else None."""
        return self._rows if node is self._base else None


    def expr_values(self, expr, res: Bindings) -> np.ndarray:
        """Arithmetic over a few rows by :func:`engine.stream.tiny_ops.expr_ids`, else the
        executor's."""
        if res.n and isinstance(expr, A.Call):
            got = expr_ids(expr, res.cols, res.n, self.ctx)
            if got is not None:
                return got
        return super().expr_values(expr, res)

    def filter_mask(self, expr, res: Bindings) -> np.ndarray:
        """A FILTER over a few rows of numbers by :func:`engine.stream.tiny_ops.filter_mask`
        (no fixed cost per operator), else the executor's."""
        if res.n:
            m = filter_mask(expr, res.cols, res.n, self.ctx)
            if m is not None:
                return m
        return super().filter_mask(expr, res)


class _HandBack(Exception):
    """A BGP of a general query exceeded the tuple-at-a-time bounds."""


_NO_DATA = DatasetView(EmptyGraph(), {}, ("tiny",))


class _Nested(TinyEvaluator):
    """The pattern of a query with several BGPs: each BGP from its :class:`TinyCore` over the
    instant's triples (a seeded BGP: joined with the seed, as the executor's contract says),
    the operators between them by the executor."""

    def __init__(self, ctx, subs: dict, rows: np.ndarray, stored):
        super().__init__(ctx, _NO_DATA, None, None)
        self._subs = subs
        self._in = rows
        self._stored_in = stored

    def _direct(self, node) -> Bindings | None:
        got = self._subs.get(id(node))
        if got is None or got[0] is not node:
            return None
        sol = got[1].solutions(self._in, self.ctx, self._stored_in)
        if sol is None:
            raise _HandBack
        return sol

    def _BGP(self, node, seed):
        if not node.triples:
            return Bindings.unit() if seed is None else seed
        sol = self._direct(node)
        if sol is None:
            raise _HandBack   # (every BGP of the query has its core)
        return sol if seed is None else join(seed, sol, self.ctx.max_rows)


#: the algebra a general query may use: operators the executor evaluates from their inputs'
#: rows alone (no graph access besides the BGPs)
_GENERAL = (A.Join, A.LeftJoin, A.Union, A.Minus, A.Filter, A.Extend, A.OrderBy, A.Group, A.Project,
            A.Distinct, A.Reduced, A.Values)


def _general(node, bgps: list) -> bool:
    """Whether ``node`` is made of BGPs with constant predicates under :data:`_GENERAL`
    operators without EXISTS; collects the BGPs."""
    if isinstance(node, A.BGP):
        if any(not isinstance(tp.p, A.Const) for tp in node.triples):
            return False
        if node.triples:
            bgps.append(node)
        return True
    if not isinstance(node, _GENERAL):
        return False
    exprs = _exprs(node) + ([node.expr] if isinstance(node, A.LeftJoin) and node.expr is not None else [])
    if isinstance(node, A.Group):
        exprs += [a for _, a in node.aggregates]
    if any(_has_pattern(e) for e in exprs if e is not None):
        return False
    if isinstance(node, A.Values):
        return True
    kids = [node.left, node.right] if isinstance(node, (A.Join, A.LeftJoin, A.Union, A.Minus)) else [node.input]
    return all(_general(k, bgps) for k in kids)


def _read_above(query: A.Query, base) -> set[str] | None:
    """The variables the operators between ``query.pattern`` and the core's node ``base`` (a
    chain of unary operators and Slice) and the query's template read; None when every
    column matters: no projection or grouping shapes the output (ASK, CONSTRUCT, a bare
    pattern), or a DISTINCT / REDUCED / ``COUNT(DISTINCT *)`` compares whole solutions below
    one."""
    chain = []
    node = query.pattern
    while node is not base:
        chain.append(node)
        node = node.input
    shaped = False
    for n in chain:
        if isinstance(n, (A.Project, A.Group)):
            shaped = True
        elif isinstance(n, (A.Distinct, A.Reduced)) and shaped:
            return None
        if isinstance(n, A.Group) and any(a.arg is None and a.distinct for _, a in n.aggregates):
            return None
    if not shaped:
        return None
    names: set[str] = set()

    def walk(x) -> None:
        if isinstance(x, A.Var):
            names.add(x.name)
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        elif hasattr(x, "__dataclass_fields__"):
            for f in x.__dataclass_fields__:
                if f != "input":
                    walk(getattr(x, f))

    for n in chain:
        walk(n)
    walk(query.template)
    return names


def _static_truth(expr, bound: set[str]) -> bool | None:
    """A FILTER expression's value on every solution of a BGP whose variables are ``bound``
    (each solution binds all of them; any other variable is unbound there) when it does not
    depend on the row: ``BOUND`` under ``! && ||`` (SPARQL's logic: ``false && error`` is
    false, ``true || error`` true); None otherwise."""
    if not isinstance(expr, A.Call):
        return None
    op, args = expr.op, expr.args
    if op == "BOUND" and len(args) == 1 and isinstance(args[0], A.Var):
        return args[0].name in bound
    if op == "!" and len(args) == 1:
        v = _static_truth(args[0], bound)
        return None if v is None else not v
    if op in ("&&", "||") and len(args) == 2:
        a, b = _static_truth(args[0], bound), _static_truth(args[1], bound)
        decisive = op == "||"   # the value that decides alone
        if a is decisive or b is decisive:
            return decisive
        return (not decisive) if a is not None and b is not None else None
    return None
