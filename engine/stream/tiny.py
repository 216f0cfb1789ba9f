"""Tuple-at-a-time evaluation of a continuous query's BGP over a window of a few hundred triples.

Why: on windows of tens to hundreds of triples (CityBench, small LSBench) the vectorized
executor's fixed cost per BGP step (~10-30 numpy calls on arrays of a few rows, ~20 us a step)
and the per-instant sort of the window into a :class:`~engine.stream.window_graph.SmallGraph`
dominate an instant. :class:`TinyCore` answers the query's join core -- the one BGP under its
chain of unary operators (:func:`~engine.stream.incremental.find_core`; every predicate
constant) -- from the instant's triples directly: the triples are grouped by predicate with one
sort, each pattern's matches are selected (constants by numpy masks) and its distinct
``(s, o)`` pairs read out as Python ints, and the patterns are joined by hash lookups in an
order chosen at each instant from the match counts. Everything above the BGP (FILTER,
aggregates, projection, DISTINCT, ORDER BY) still runs through the ordinary executor, so its
semantics (errors, bags, unbound values) are the executor's.

The intermediate results are bounded (:attr:`TinyCore.max_rows`): beyond that the instant is
evaluated by the vectorized path (``None`` from :meth:`TinyCore.solutions`), which also owns
the row budget's error.
"""

from __future__ import annotations

import numpy as np

from engine.exec.bindings import Bindings
from engine.exec.evaluate import Evaluator
from engine.plan.order import bgp_vars, resolve
from engine.plan.rewrite import is_pure_bgp, merged_bgp
from engine.sparql import algebra as A
from engine.stream.incremental import _UNARY, find_core

__all__ = ["TinyCore", "TinyEvaluator", "TinyFallback"]


class TinyFallback(Exception):
    """The executor asked the core for something the tuple-at-a-time rows cannot answer."""


class TinyCore:
    """The BGP core of one continuous query, evaluated tuple at a time over an instant's triples."""

    #: intermediate rows above which an instant is handed to the vectorized path
    max_rows = 4096

    def __init__(self, query: A.Query):
        self.base = None
        self.triples: tuple = ()
        found = find_core(query)
        if found is None:
            return
        node = query.pattern
        while isinstance(node, _UNARY + (A.Slice,)):
            node = node.input
        bgp = merged_bgp(node) if isinstance(node, A.Join) else node if is_pure_bgp(node) else None
        if bgp is None or any(not isinstance(tp.p, A.Const) for tp in bgp.triples):
            return
        self.base = node                      # the node of the parsed tree the rows answer
        self.triples = bgp.triples
        self.vars = bgp_vars(bgp.triples)
        self._sn = None
        self._pats: list | None = None        # per pattern: (s, p, o) with ("c", id) / ("v", name)
        self._preds = np.zeros(0, dtype=np.int64)

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
            self._preds = np.array(sorted({p[1] for _, p, _ in res}), dtype=np.int64)
        self._sn = sn

    # -- matches ---------------------------------------------------------------
    def _matches(self, rows: np.ndarray) -> list[list[tuple]] | None:
        """Per pattern, its distinct matching triples as ``(s, o)`` pairs of Python ints."""
        order = np.argsort(rows[:, 1], kind="stable")
        ps = rows[order, 1]
        lo = ps.searchsorted(self._preds, "left").tolist()
        hi = ps.searchsorted(self._preds, "right").tolist()
        span = dict(zip(self._preds.tolist(), zip(lo, hi, strict=True), strict=True))
        out: list[list[tuple]] = []
        memo: dict[tuple, list[tuple]] = {}
        for s, p, o in self._pats:
            key = (s if s[0] == "c" else None, p[1], o if o[0] == "c" else None,
                   s[0] == "v" and s == o)
            got = memo.get(key)
            if got is None:
                a, b = span[p[1]]
                if a == b:
                    got = []
                else:
                    sel = rows[order[a:b]]
                    if s[0] == "c" or o[0] == "c" or key[3]:
                        m = np.ones(b - a, dtype=bool)
                        if s[0] == "c":
                            m &= sel[:, 0] == s[1]
                        if o[0] == "c":
                            m &= sel[:, 2] == o[1]
                        if key[3]:
                            m &= sel[:, 0] == sel[:, 2]
                        sel = sel[m]
                    got = list(dict.fromkeys(zip(sel[:, 0].tolist(), sel[:, 2].tolist(), strict=True)))
                memo[key] = got
            out.append(got)
        return out

    # -- the join ----------------------------------------------------------------
    def solutions(self, rows: np.ndarray, ctx) -> Bindings | None:
        """The BGP's solutions over the distinct triples of ``rows`` ((n, 3) int64, duplicates
        allowed); None when the intermediate rows exceed the bound (the caller evaluates the
        instant vectorized)."""
        self._resolve(ctx)
        if self._pats is None:   # a constant the store does not hold: no solution
            return Bindings.empty(self.vars)
        matches = self._matches(rows)
        limit = self.max_rows if ctx.max_rows is None else min(self.max_rows, ctx.max_rows)
        pats = self._pats
        left = list(range(len(pats)))
        slots: dict[str, int] = {}
        cur: list[tuple] = [()]
        while left:
            ctx.check_budget()
            # the connected pattern with the fewest matches (any pattern when none is connected)
            best = None
            for i in left:
                s, _, o = pats[i]
                conn = (s[0] == "v" and s[1] in slots) or (o[0] == "v" and o[1] in slots)
                k = (not conn, len(matches[i]))
                if best is None or k < best[0]:
                    best = (k, i)
            i = best[1]
            left.remove(i)
            cur = self._step(cur, pats[i], matches[i], slots, limit)
            if cur is None:
                return None
            if not cur:
                return Bindings.empty(self.vars)
        pos = [slots[v] for v in self.vars]
        cols = list(zip(*cur, strict=True))
        return Bindings({v: np.array(cols[j], dtype=np.int64) for v, j in zip(self.vars, pos, strict=True)},
                        len(cur))

    @staticmethod
    def _step(cur: list[tuple], pat, pairs: list[tuple], slots: dict, limit: int) -> list[tuple] | None:
        s, _, o = pat
        ends = []   # (index in the pair, var name) of the variable ends, a repeated variable once
        if s[0] == "v":
            ends.append((0, s[1]))
        if o[0] == "v" and not (s[0] == "v" and o[1] == s[1]):
            ends.append((1, o[1]))
        bound = [(k, slots[v]) for k, v in ends if v in slots]
        free = [(k, v) for k, v in ends if v not in slots]
        if not pairs:
            return []
        if not free:   # a test of every row
            if not bound:
                return cur
            if len(bound) == 1:
                (k, j), = bound
                have = {p[k] for p in pairs}
                return [r for r in cur if r[j] in have]
            (k0, j0), (k1, j1) = bound
            have = {(p[k0], p[k1]) for p in pairs}
            return [r for r in cur if (r[j0], r[j1]) in have]
        for _, v in free:
            slots[v] = len(slots)
        if not bound:   # a product with the pattern's (distinct) values
            if len(cur) * len(pairs) > limit:
                return None
            if len(free) == 1:
                k = free[0][0]
                vals = [(p[k],) for p in pairs]
            else:
                vals = pairs
            return [r + x for r in cur for x in vals]
        (kb, j), = bound
        (kf, _), = free
        idx: dict[int, list] = {}
        for p in pairs:
            idx.setdefault(p[kb], []).append((p[kf],))
        out: list[tuple] = []
        get = idx.get
        for r in cur:
            hit = get(r[j])
            if hit is not None:
                out += [r + x for x in hit]
                if len(out) > limit:
                    return None
        return out


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
        return super().eval(node, seed)
