"""Incremental evaluation of a continuous query's join core across instants (CQELS, seed 002).

A sliding window (RANGE much larger than STEP) changes little from one instant
to the next, yet evaluating each instant from scratch re-runs the whole join of
the window with the stored graphs. :class:`IncrementalCore` keeps the solutions
``R`` of the query's *core* -- its one BGP (a Join tree of BGPs, merged) under
the deterministic FILTERs directly above it -- and maintains them from the
change of the default graph ``D = W ∪ S`` (``W``: the union of the windows,
``S``: the stored graphs merged in):

* ``Δ- = D_old − D_new`` and ``Δ+ = D_new − D_old``, computed on the window
  contents as sets (a window is a set) minus the triples ``S`` holds anyway.
* **Expiration** (negative tuples): a solution of ``D_old`` survives iff none
  of the triples its patterns instantiate is in ``Δ-``; one vectorized
  membership test per pattern over ``R``.
* **Arrival** (delta join): every new solution uses some ``Δ+`` triple; for
  pattern ``i`` the solutions whose *first* ``Δ+`` triple is at ``i`` are
  found by scanning pattern ``i`` over the small ``Δ+`` graph and exploring the
  other patterns over ``D_new`` from there (the CQELS probe order: start at the
  new triple), dropping rows where an earlier pattern is also in ``Δ+`` so no
  solution is counted twice. The pushed FILTERs run on these new rows only.

The operators above the core (Extend, GROUP BY/aggregates, ORDER BY,
DISTINCT, projection, CONSTRUCT templates) run on ``R`` through the ordinary
executor, so results are identical to a full evaluation. The state is rebuilt
by a full run of the core when it cannot be carried over: the first instant,
a changed stored graph (snapshot objects differ, or absorbed facts are hidden
as of event time), a query constant that became known, or a change (arrived
plus expired triples) larger than the window itself, where a rerun is cheaper.
"""

from __future__ import annotations

import time

import numpy as np

from engine.arrays import unique
from engine.exec.bgp import run_bgp
from engine.exec.bindings import Bindings, concat
from engine.exec.evaluate import Evaluator, evaluate_query
from engine.plan.order import resolve
from engine.plan.rewrite import bgp_of
from engine.sparql import algebra as A
from engine.stream.window_graph import contained, triple_hash

__all__ = ["IncrementalCore", "TripleSet", "find_core"]

_EMPTY3 = np.zeros((0, 3), dtype=np.int64)
_IMPURE = frozenset({"RAND", "BNODE", "UUID", "STRUUID", "NOW"})


class TripleSet:
    """A set of (s, p, o) id rows, sorted by a 64-bit hash, with exact membership tests."""

    __slots__ = ("h", "rows")

    def __init__(self, rows: np.ndarray):
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
        h = triple_hash(rows)
        order = np.argsort(h, kind="stable")
        h, rows = h[order], rows[order]
        if len(rows) > 1:
            dup = np.flatnonzero(h[1:] == h[:-1]) + 1
            if len(dup):
                same = (rows[dup] == rows[dup - 1]).all(axis=1)
                if same.any():  # equal rows are adjacent unless a collision sits between them
                    keep = np.ones(len(rows), dtype=bool)
                    keep[dup[same]] = False
                    h, rows = h[keep], rows[keep]
                if not same.all():
                    rows = np.unique(rows, axis=0)  # a hash collision: exact but slower
                    h = triple_hash(rows)
                    order = np.argsort(h, kind="stable")
                    h, rows = h[order], rows[order]
        self.h = h
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @classmethod
    def _sorted(cls, h: np.ndarray, rows: np.ndarray) -> TripleSet:
        out = cls.__new__(cls)
        out.h, out.rows = h, rows
        return out

    def subset(self, mask: np.ndarray) -> TripleSet:
        """The rows where ``mask`` is true (still sorted: no new sort)."""
        return TripleSet._sorted(self.h[mask], self.rows[mask])

    def contains(self, q: np.ndarray) -> np.ndarray:
        """Mask of the rows of ``q`` ((n, 3) int64) that are in the set."""
        n = len(q)
        if n == 0 or len(self.h) == 0:
            return np.zeros(n, dtype=bool)
        hq = triple_hash(q)
        lo = np.searchsorted(self.h, hq, side="left")
        hi = np.searchsorted(self.h, hq, side="right")
        cand = hi > lo
        out = np.zeros(n, dtype=bool)
        ci = np.flatnonzero(cand)
        if len(ci):
            out[ci] = (self.rows[lo[ci]] == q[ci]).all(axis=1)
            for k in np.flatnonzero(cand & ~out & (hi - lo > 1)).tolist():  # collisions only
                out[k] = bool((self.rows[lo[k]:hi[k]] == q[k]).all(axis=1).any())
        return out

    def minus(self, other: TripleSet) -> np.ndarray:
        """Rows of this set that are not in ``other``."""
        if len(other) == 0:
            return self.rows
        return self.rows[~other.contains(self.rows)]


class WindowChange:
    """How the union of a query's windows changed since the previous instant.

    The window graphs are slid by the shared :class:`~engine.stream.continuous.WindowCache`, which
    keeps each window's last change; this class remembers the seq ranges the query saw last and
    takes the change only if it is exactly the step from there. With several windows, a triple
    entering one window is new to the union only if no window held it before, and one leaving is
    gone only if no window holds it now.
    """

    def __init__(self):
        self.ranges: list | None = None
        self.graphs: list = []
        self.size = 0

    def reset(self) -> None:
        self.__init__()

    def build(self, cache, windows, graphs: list) -> None:
        self.ranges = [cache.range_of(bw) for bw in windows]
        self.graphs = list(graphs)
        self.size = sum(getattr(g, "n_triples", 0) for g in graphs)

    def advance(self, cache, windows, graphs: list) -> tuple[TripleSet, TripleSet] | None:
        """(distinct triples that entered the union, those that left it), or None if unknown."""
        if self.ranges is None:
            return None
        ranges = [cache.range_of(bw) for bw in windows]
        pluses, minuses = [], []
        for bw, before, after in zip(windows, self.ranges, ranges, strict=True):
            if before is None or after is None:
                return None
            if before == after:
                continue
            ch = cache.change(bw, before, after)
            if ch is None:
                return None
            pluses.append(ch[0])
            minuses.append(ch[1])
        old_graphs = self.graphs
        self.ranges, self.graphs = ranges, list(graphs)
        self.size = sum(getattr(g, "n_triples", 0) for g in graphs)
        plus, minus = _distinct([p for p in pluses if len(p)]), _distinct([m for m in minuses if len(m)])
        if len(windows) > 1:
            if len(plus):
                plus = plus.subset(~contained(old_graphs, plus.rows))
            if len(minus):
                minus = minus.subset(~contained(self.graphs, minus.rows))
        return plus, minus


def _distinct(parts: list[np.ndarray]) -> TripleSet:
    if not parts:
        return TripleSet(_EMPTY3)
    return TripleSet(parts[0] if len(parts) == 1 else np.concatenate(parts))


# ---------------------------------------------------------------- the core of a query


def _pure(expr) -> bool:
    """True when an expression's value depends on the solution only (may be pushed to new rows)."""
    if isinstance(expr, A.Exists | A.Aggregate):
        return False
    if isinstance(expr, A.Call):
        return expr.op not in _IMPURE and all(_pure(a) for a in expr.args)
    if isinstance(expr, A.FunctionCall):
        return all(_pure(a) for a in expr.args)
    return True


_UNARY = (A.Project, A.Distinct, A.Reduced, A.OrderBy, A.Extend, A.Group, A.Filter)


def _exprs(node) -> list:
    if isinstance(node, A.Extend):
        return [node.expr]
    if isinstance(node, A.Filter):
        return [node.expr]
    if isinstance(node, A.OrderBy):
        return [c.expr for c in node.conditions]
    if isinstance(node, A.Group):
        return [e for e, _ in node.by] + [a.arg for _, a in node.aggregates if a.arg is not None]
    return []


def _has_pattern(expr) -> bool:
    if isinstance(expr, A.Exists):
        return True
    if isinstance(expr, A.Call | A.FunctionCall):
        return any(_has_pattern(a) for a in expr.args)
    if isinstance(expr, A.Aggregate):
        return expr.arg is not None and _has_pattern(expr.arg)
    return False


def find_core(query: A.Query):
    """(core node, BGP, pushed filter expressions) of a query whose pattern is a chain of unary
    operators over one BGP, or None. The core node is what the executor evaluates to ``R``."""
    if query.form not in ("SELECT", "ASK", "CONSTRUCT"):
        return None
    node = query.pattern
    ordered = False
    chain = []
    while isinstance(node, _UNARY + (A.Slice,)):
        if isinstance(node, A.Slice) and not ordered and not _below_order(node):
            return None  # LIMIT without ORDER BY: keep the full evaluation's (arbitrary) choice of rows
        chain.append(node)
        node = node.input
    # the filters directly above the BGP form the core with it
    k = len(chain)
    while k > 0 and isinstance(chain[k - 1], A.Filter) and _pure(chain[k - 1].expr):
        k -= 1
    core = chain[k] if k < len(chain) else node
    pushed = [f.expr for f in chain[k:]]
    for op in chain[:k]:
        if any(_has_pattern(e) for e in _exprs(op)):
            return None
    bgp = bgp_of(node)
    if bgp is None:
        return None
    return core, bgp, pushed


def _below_order(node: A.Slice) -> bool:
    n = node.input
    while isinstance(n, A.Project | A.Distinct | A.Reduced):
        n = n.input
    return isinstance(n, A.OrderBy)


class _CoreEvaluator(Evaluator):
    """The executor, with the core node answered by the maintained solutions."""

    def __init__(self, ctx, dataset, core, rows: Bindings):
        super().__init__(ctx, dataset)
        self._core = core
        self._rows = rows

    def eval(self, node, seed=None):
        if node is self._core and seed is None:
            return self._check(self._rows)
        return super().eval(node, seed)


def _inst(rows: Bindings, term: tuple) -> np.ndarray:
    return np.full(rows.n, term[1], dtype=np.int64) if term[0] == "c" else rows.cols[term[1]]


def _instances(rows: Bindings, rt) -> np.ndarray:
    """The triples a pattern (resolved) instantiates in each row, as an (n, 3) array."""
    return np.stack([_inst(rows, rt[0]), _inst(rows, rt[1]), _inst(rows, rt[2])], axis=1)


class IncrementalCore:
    """Maintains the core solutions of one continuous query from instant to instant.

    Adaptive (unless ``adaptive=False``): maintenance has fixed costs that a cheap, selective query
    evaluated from scratch does not pay, so the evaluator times both ways (exponential moving
    averages) and, when maintaining is slower, evaluates from scratch for a while (a back-off that
    doubles each time maintenance loses, up to 1024 instants) before trying again. A maintained
    instant that has already cost :attr:`ABANDON_AT` times the plain cost is abandoned midway
    (:meth:`evaluate` returns None, the caller evaluates from scratch) and the back-off grows
    fourfold: a query whose deltas are as large as its answer (CityBench C8, a product of 13,932
    rows) used to pay three instants of 6-8x the plain cost at every probe, the latency's tail."""

    REBUILD_FRACTION = 1.0
    BACKOFF_MIN, BACKOFF_MAX = 16, 1024
    WARMUP_PLAIN = 6   # from-scratch instants measured before the first maintained one
    WARMUP_SKIP = 2    # of them, the first ones pay one-time costs (plans, imports, numeric parsing): not averaged
    PROBE_EVERY = 32   # maintained instants between two from-scratch ones that re-measure the plain cost
    ABANDON_AT = 1.5   # a maintained instant past this many times the plain cost is abandoned
    ABANDON_MIN_MS = 1.0   # ... but never before it has spent this long (noise on sub-ms instants)

    def __init__(self, query: A.Query, core, bgp: A.BGP, pushed: list, adaptive: bool = True):
        self.query = query
        self.core = core
        self.bgp = bgp
        self.pushed = pushed
        self.vars = _bgp_vars(bgp.triples)
        # the delta join's BGPs (all patterns but one), built once: the executor's plan cache keys a
        # BGP by the identity of its pattern tuple, so the same tuples keep their plans across instants
        tr = bgp.triples
        self._rests = [tr[:i] + tr[i + 1:] for i in range(len(tr))]
        self._change = WindowChange()
        self._live = False                     # the content and the rows describe the previous instant
        self._stored: list | None = None
        self._resolved = None
        self._rows: Bindings | None = None
        self.full_runs = 0
        self.delta_runs = 0
        self.plain_runs = 0
        self.adaptive = adaptive
        self.cost_plain: float | None = None   # ms, moving averages
        self.cost_delta: float | None = None
        self._pause = 0
        self._backoff = self.BACKOFF_MIN
        self._since_resume = 0
        self._since_probe = 0
        self._deadline: float | None = None   # perf_counter() past which a delta instant is abandoned
        self.abandoned = 0

    @staticmethod
    def of(query: A.Query, adaptive: bool = True) -> IncrementalCore | None:
        found = find_core(query)
        if found is None:
            return None
        return IncrementalCore(query, *found, adaptive=adaptive)

    # -- the adaptive choice ---------------------------------------------------------
    def wants(self) -> bool:
        """Maintain at this instant (else the caller evaluates from scratch and reports the time)?"""
        if not self.adaptive:
            return True
        if self.plain_runs < self.WARMUP_PLAIN or self._pause > 0:  # the first instant pays one-time costs
            self._pause = max(0, self._pause - 1)
            return False
        if self._since_probe >= self.PROBE_EVERY:  # the plain cost drifts with the data: measure it again
            self._since_probe = 0
            return False
        return True

    def record_plain(self, ms: float) -> None:
        self.plain_runs += 1
        self._live = False
        if self.plain_runs <= self.WARMUP_SKIP:
            return  # the first instants pay one-time costs (plans, numeric parsing of stored literals)
        self.cost_plain = ms if self.cost_plain is None else 0.5 * self.cost_plain + 0.5 * ms

    def _record_delta(self, ms: float) -> None:
        self.cost_delta = ms if self.cost_delta is None else 0.7 * self.cost_delta + 0.3 * ms
        self._since_resume += 1
        self._since_probe += 1
        if not self.adaptive or self.cost_plain is None or self._since_resume < 3:
            return
        if self.cost_delta > self.cost_plain:
            self._lose(2)
        else:
            self._backoff = self.BACKOFF_MIN

    def _lose(self, grow: int) -> None:
        """Maintenance lost: evaluate from scratch for the back-off's instants, then try again."""
        self._pause = self._backoff
        self._backoff = min(self._backoff * grow, self.BACKOFF_MAX)
        self._since_resume = 0
        self.cost_delta = None
        self.reset()

    def _check(self, ctx) -> None:
        """The query's deadline and budgets, and the maintained instant's own limit (see
        :attr:`ABANDON_AT`)."""
        ctx.check_budget()
        if self._deadline is not None and time.perf_counter() > self._deadline:
            raise _Abandon

    # -- solutions of the core ----------------------------------------------------
    def _filter(self, ctx, dataset, rows: Bindings) -> Bindings:
        if not self.pushed or rows.n == 0:
            return rows
        ev = Evaluator(ctx, dataset)
        for e in self.pushed:
            rows = rows.mask(ev.filter_mask(e, rows))
            if rows.n == 0:
                break
        return rows

    def _full(self, ctx, dataset) -> Bindings:
        self.full_runs += 1
        rows = run_bgp(self.bgp.triples, dataset.default, ctx.lookup, max_rows=ctx.max_rows,
                       check=ctx.check_budget, plan_cache=ctx.plan_cache, cache_key=("incremental", -1))
        return self._filter(ctx, dataset, rows)

    def _arrivals(self, ctx, dataset, resolved, plus: np.ndarray) -> Bindings:
        """Solutions of D_new that use at least one triple of ``plus``, each once."""
        triples = self.bgp.triples
        parts = []
        for i in range(len(triples)):
            seed = _scan(resolved[i], plus.rows)
            if seed.n == 0:
                continue
            rest = self._rests[i]
            rows = run_bgp(rest, dataset.default, ctx.lookup, seed=seed, max_rows=ctx.max_rows,
                           check=lambda: self._check(ctx), plan_cache=ctx.plan_cache,
                           cache_key=("incremental", i)) if rest else seed
            self._check(ctx)
            for j in range(i):  # counted at its first Δ+ pattern only
                if rows.n == 0:
                    break
                rows = rows.mask(~plus.contains(_instances(rows, resolved[j])))
            if rows.n:
                parts.append(rows.project(self.vars))
        if not parts:
            return Bindings.empty(self.vars)
        return self._filter(ctx, dataset, concat(parts))

    def _expire(self, ctx, resolved, rows: Bindings, minus: TripleSet) -> Bindings:
        if rows.n == 0:
            return rows
        mset = minus
        preds = set(unique(minus.rows[:, 1]).tolist())
        gone = np.zeros(rows.n, dtype=bool)
        for rt in resolved:
            if rt[1][0] == "c" and rt[1][1] not in preds:
                continue
            gone |= mset.contains(_instances(rows, rt))
            self._check(ctx)
        return rows.mask(~gone) if gone.any() else rows

    def solutions(self, ctx, dataset, cache, windows, graphs: list, t: int, stored: list) -> Bindings:
        """The core's solutions at instant ``t`` over ``dataset.default`` (= the windows ∪ ``stored``);
        ``graphs``: the window graphs at ``t``, aligned with ``windows``."""
        resolved = resolve(self.bgp.triples, ctx.lookup)
        same_stored = (self._stored is not None and len(self._stored) == len(stored)
                       and all(a is b for a, b in zip(self._stored, stored, strict=True)))
        self._stored = list(stored)
        carry = self._live and same_stored and self._resolved == resolved and resolved is not None
        self._live = False
        change = self._change.advance(cache, windows, graphs) if carry else None
        if change is not None:
            plus, minus = change
            if len(plus) + len(minus) > self.REBUILD_FRACTION * max(self._change.size, 1):
                change = None
        self._resolved = resolved
        if change is None:
            self._change.build(cache, windows, graphs)
            self._rows = (Bindings.empty(self.vars) if resolved is None
                          else self._full(ctx, dataset).project(self.vars))
        else:
            self.delta_runs += 1
            if stored:  # a triple the stored graphs hold does not change D when it enters or leaves W
                plus = plus.subset(~contained(stored, plus.rows))
                minus = minus.subset(~contained(stored, minus.rows))
            rows = self._expire(ctx, resolved, self._rows, minus) if len(minus) else self._rows
            if len(plus):
                new = self._arrivals(ctx, dataset, resolved, plus)
                if new.n:
                    rows = concat([rows, new])
            self._rows = rows
        self._live = True
        return self._rows

    def reset(self) -> None:
        self._live = False
        self._rows = None

    def evaluate(self, ctx, dataset, cache, windows, graphs: list, t: int, stored: list,
                 spent_ms: float = 0.0):
        """Evaluate instant ``t`` from the maintained core; ``spent_ms``: time already spent on this
        instant (building the dataset), counted in the cost of the maintained path. None when
        the instant was abandoned (past :attr:`ABANDON_AT` times the plain cost): the caller
        evaluates it from scratch."""
        t0 = time.perf_counter()
        before = self.delta_runs
        self._deadline = None
        if self.adaptive and self.cost_plain is not None:
            budget_ms = max(self.ABANDON_AT * self.cost_plain, self.ABANDON_MIN_MS) - spent_ms
            self._deadline = t0 + max(budget_ms, 0.0) / 1000.0
        try:
            rows = self.solutions(ctx, dataset, cache, windows, graphs, t, stored)
        except _Abandon:
            self.abandoned += 1
            self._deadline = None
            self._lose(4)
            return None
        self._deadline = None
        res = evaluate_query(self.query, ctx, dataset, _CoreEvaluator(ctx, dataset, self.core, rows))
        if self.delta_runs > before:
            self._record_delta(spent_ms + (time.perf_counter() - t0) * 1000.0)
        return res


class _Abandon(Exception):
    """A maintained instant went past its limit (:attr:`IncrementalCore.ABANDON_AT`)."""


def _bgp_vars(triples) -> list[str]:
    seen: dict[str, None] = {}
    for t in triples:
        for term in (t.s, t.p, t.o):
            if not isinstance(term, A.Const):
                seen[term.name] = None
    return list(seen)


def _scan(rt, rows: np.ndarray) -> Bindings:
    """Solutions of one resolved triple pattern over the rows of a small triple set."""
    m = np.ones(len(rows), dtype=bool)
    first: dict[str, int] = {}
    for k, (kind, x) in enumerate(rt):
        if kind == "c":
            m &= rows[:, k] == x
        elif x in first:
            m &= rows[:, k] == rows[:, first[x]]
        else:
            first[x] = k
    idx = np.flatnonzero(m)
    return Bindings({v: rows[idx, k] for v, k in first.items()}, len(idx))



