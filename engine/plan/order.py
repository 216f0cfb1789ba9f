"""Cost-based order of the steps of a basic graph pattern (Wukong section 5.2).

A BGP runs as one graph exploration: every step takes one triple pattern with
at least one end already bound (a constant or a variable bound by an earlier
step) and either *expands* the history through the CSR lists of that end or,
when both ends are bound, *prunes* it. The order matters by orders of
magnitude, so the planner orders the steps by the estimated size of the
history after each step (greedily, an expansion chosen by the estimated rows
of the whole greedy remainder after it):

* constants give exact fan-outs (one CSR lookup each: ``?x rdf:type C`` is a
  type-index start whose size is the number of instances of C);
* otherwise per-predicate statistics give the average fan-out
  (triples/subjects going out, triples/objects going in);
* pruning steps (both ends bound) never grow the history and go first;
* a step with no bound end is a scan of the predicate index, used only to
  start the exploration (or for a disconnected part).

The order is chosen from one snapshot's statistics: the executor asks
:func:`plan_bgp` on the first run of a BGP over a snapshot and keeps the
:class:`BgpPlan` in the per-snapshot plan cache (``QueryContext.plan_cache``),
so a commit (new statistics) re-plans; ``explain`` shows the same plan.
"""

from __future__ import annotations

import numpy as np

from engine.sparql.algebra import Const

OUT, IN = 0, 1

# A resolved triple: each position is ("c", id) or ("v", name).
Pos = tuple[str, object]
RTriple = tuple[Pos, Pos, Pos]


class _Stats:
    """Memoised statistics of one graph view for one planning run."""

    def __init__(self, graph):
        self.graph = graph
        self.pstats: dict[int, tuple[int, int, int]] = {}
        self.fanout: dict[tuple[int, int, int], int] = {}
        self._n_preds = None

    def pred(self, pid: int) -> tuple[int, int, int]:
        st = self.pstats.get(pid)
        if st is None:
            s = self.graph.stats(pid)
            st = (int(s.triples), max(1, int(s.subjects)), max(1, int(s.objects)))
            self.pstats[pid] = st
        return st

    def exact(self, pid: int, direction: int, vid: int) -> int:
        k = (pid, direction, vid)
        c = self.fanout.get(k)
        if c is None:
            rows, _ = self.graph.expand(pid, direction, np.array([vid], dtype=np.int64))
            c = len(rows)
            self.fanout[k] = c
        return c

    def n_preds(self) -> int:
        if self._n_preds is None:
            self._n_preds = max(1, len(self.graph.predicates()))
        return self._n_preds


def estimate(t: RTriple, bound: set, rows: float, st: _Stats) -> tuple[float, int]:
    """(estimated rows after the step, class) for step ``t`` given the bound vars.
    class 0 = prune, 1 = expand, 2 = scan (no bound end)."""
    s, p, o = t
    s_b = s[0] == "c" or s[1] in bound
    o_b = o[0] == "c" or o[1] in bound
    if p[0] == "c":
        pid = p[1]
        triples, subjects, objects = st.pred(pid)
        if triples == 0:
            return 0.0, 0
        if s_b and o_b:
            if s[0] == "c" and o[0] == "c":
                return rows, 0
            return rows * min(1.0, triples / (subjects * objects) * 4), 0
        if s_b:
            if s[0] == "c":
                return rows * st.exact(pid, OUT, s[1]), 1
            return rows * triples / subjects, 1
        if o_b:
            if o[0] == "c":
                return rows * st.exact(pid, IN, o[1]), 1
            return rows * triples / objects, 1
        return rows * triples, 2
    # variable predicate
    n = max(1, st.graph.n_triples)
    p_b = p[1] in bound
    if s_b and o_b:
        return rows * (0.5 if p_b else 1.0), 0
    if s_b or o_b:
        return rows * (2.0 if p_b else 4.0 * st.n_preds() ** 0.5), 1
    return rows * n, 2


def plan(triples: list[RTriple], graph, bound: set, rows: float = 1.0) -> list[int]:
    """Greedy order of the triple indices."""
    return [i for i, _, _ in ordered(triples, graph, bound, rows)]


_LOOKAHEAD_MAX = 8  # patterns left up to which every expansion is tried with its greedy completion


def ordered(triples: list[RTriple], graph, bound: set, rows: float = 1.0) -> list[tuple[int, float, int]]:
    """Order as (triple index, estimated rows after the step, class) per step.

    Prunes go first and connected steps before scans, as in Wukong; among the
    expansions (or scans) the choice is by the estimated total of the rows
    every later step produces when the rest is ordered greedily (one-step
    greedy takes the smallest next step, and on a cycle such as LUBM Q2 that
    can force a large expansion right after it)."""
    st = _Stats(graph)
    return _order(triples, list(range(len(triples))), set(bound), rows, st, lookahead=True)


def _order(triples, left: list[int], bound: set, rows: float, st: _Stats, lookahead: bool):
    left = list(left)
    order: list[tuple[int, float, int]] = []
    while left:
        cands = []
        for i in left:
            est, cls = estimate(triples[i], bound, rows, st)
            cands.append(((cls == 2, cls != 0, est), i, est))
        cands.sort(key=lambda c: c[0])
        key, i, est = cands[0]
        if lookahead and key[1] and 1 < len(left) <= _LOOKAHEAD_MAX:
            # the same kind of step as the greedy choice (expansion or scan), by total cost
            best = None
            for k2, j, e2 in cands:
                if k2[:2] != key[:2]:
                    continue
                b2 = bound | {pos[1] for pos in triples[j] if pos[0] == "v"}
                rest = _order(triples, [x for x in left if x != j], b2, max(e2, 0.0), st, lookahead=False)
                total = e2 + sum(e for _, e, _ in rest)
                if best is None or total < best[0]:
                    best = (total, k2, j, e2)
            _, key, i, est = best
        order.append((i, est, 2 if key[0] else 1 if key[1] else 0))
        left.remove(i)
        rows = max(est, 0.0)
        for pos in triples[i]:
            if pos[0] == "v":
                bound.add(pos[1])
    return order


def resolve(triples, lookup) -> list | None:
    """Map constants to store ids; None when a constant is absent from the
    store (no triple can match it)."""
    out = []
    for t in triples:
        r = []
        for term in (t.s, t.p, t.o):
            if isinstance(term, Const):
                tid = lookup(term.key)
                if tid < 0:
                    return None
                r.append(("c", int(tid)))
            else:
                r.append(("v", term.name))
        out.append(tuple(r))
    return out


def bgp_vars(triples) -> list[str]:
    seen: dict[str, None] = {}
    for t in triples:
        for term in (t.s, t.p, t.o):
            if not isinstance(term, Const):
                seen[term.name] = None
    return list(seen)


class BgpPlan:
    """The physical plan of one BGP over one snapshot's graph view, given the
    variables its seed binds: constants resolved to ids (None: a constant the
    store does not hold, no solution), the step order and each step's
    estimate (rows after it) and class (0 prune, 1 expand, 2 scan)."""

    __slots__ = ("triples", "all_vars", "resolved", "order", "estimates", "classes")

    def __init__(self, triples, all_vars, resolved, steps):
        self.triples = triples
        self.all_vars = all_vars
        self.resolved = resolved
        self.order = [i for i, _, _ in steps] if steps is not None else None
        self.estimates = [e for _, e, _ in steps] if steps is not None else None
        self.classes = [c for _, _, c in steps] if steps is not None else None


def plan_bgp(triples, graph, lookup, bound, rows: float = 1.0) -> BgpPlan:
    """Resolve and order a BGP (``bound``: the seed's variables)."""
    all_vars = bgp_vars(triples)
    resolved = resolve(triples, lookup)
    if resolved is None:
        return BgpPlan(triples, all_vars, None, None)
    bound_here = {v for v in bound if v in all_vars}
    return BgpPlan(triples, all_vars, resolved, ordered(resolved, graph, bound_here, rows))
