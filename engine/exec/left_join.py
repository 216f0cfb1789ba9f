"""OPTIONAL over a BGP as a left join without a re-sort, and ``FILTER(!BOUND(?v))`` over it
as an anti-join.

:class:`~engine.plan.nodes.ExploreLeftJoin` explores the optional BGP from the left rows.
Earlier, every left column was carried through the exploration, the matched rows were
concatenated with the unmatched left rows and the whole output was put back in left order
by an argsort (3 ms of UP13's 12 ms at 1M triples: 26,598 left rows, 935 matches). Here:

* the exploration's seed is only the left columns the BGP reads plus the left row number
  (``#lrow``): the steps gather two or three columns instead of all of them;
* the matches' left row numbers come out non-decreasing from the exploration (each step
  keeps its input order; they are sorted stably otherwise), so the output positions follow
  from a count per left row (a bincount and two cumsums): each left column is gathered
  once into the output and each optional column scattered into an UNBOUND-filled array;
* a FILTER inside the OPTIONAL (``LeftJoin``'s expression, which sees both sides) runs on
  the matches, with the left columns gathered for it, before the unmatched rows are known
  (SPARQL 18.5: a left row none of whose compatible matches passes the filter is kept
  unextended);
* ``Filter(!BOUND(?v), LeftJoin(L, BGP, f))`` where ``?v`` is a variable of the BGP that the
  left side never binds keeps exactly the left rows without a (filter-passing) match, with
  the BGP's variables unbound: the matched rows (``?v`` bound, a BGP binds all its
  variables) are never built.

Both run only when the left rows bind the BGP's shared variables in every row (the
exploration's condition, :func:`engine.exec.bgp.seed_ok`); else the general join.
"""

from __future__ import annotations

import numpy as np

from engine.exec.bindings import UNBOUND, Bindings
from engine.exec.context import charge_rows
from engine.plan.nodes import ExploreLeftJoin
from engine.plan.order import bgp_vars
from engine.sparql import algebra as A

#: how often each path ran (a spy for the tests): "left" the left join, "anti" the anti-join,
#: "top" an ORDER BY + LIMIT that cut the left rows first, "seeded" a nested OPTIONAL's right
#: side evaluated from the left rows' values
TAKEN = {"left": 0, "anti": 0, "top": 0, "seeded": 0}


def _matches(ev, node: ExploreLeftJoin, left: Bindings) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The left row of every match of the BGP (non-decreasing) and the columns the BGP adds,
    the OPTIONAL's FILTER applied."""
    shared = [v for v in bgp_vars(node.right.triples) if v in left.cols]
    cols = {v: left.cols[v] for v in shared}
    cols["#lrow"] = np.arange(left.n, dtype=np.int64)
    res = ev._run_bgp(node, node.right.triples, Bindings(cols, left.n))
    if res.n == 0:
        return np.zeros(0, np.int64), {}
    li = res.cols["#lrow"]
    new = {v: c for v, c in res.cols.items() if v not in cols}
    if node.expr is not None:
        merged = {v: c[li] for v, c in left.cols.items()}
        merged.update(new)
        keep = ev.filter_rows(node.expr, Bindings(merged, len(li)))
        if not keep.all():
            idx = np.flatnonzero(keep)
            li = li[idx]
            new = {v: c[idx] for v, c in new.items()}
    if len(li) > 1 and bool((li[1:] < li[:-1]).any()):
        order = np.argsort(li, kind="stable")
        li = li[order]
        new = {v: c[order] for v, c in new.items()}
    return li, new


def _unbound_cols(n: int, names) -> dict[str, np.ndarray]:
    return {v: np.full(n, UNBOUND, dtype=np.int64) for v in names}


def explore_left_join(ev, node: ExploreLeftJoin, left: Bindings) -> Bindings:
    """``LeftJoin(left, BGP, expr)`` for left rows that bind the BGP's shared variables
    everywhere: the left rows in order, each followed by its matches or kept once unextended."""
    TAKEN["left"] += 1
    li, new = _matches(ev, node, left)
    names = [v for v in bgp_vars(node.right.triples) if v not in left.cols]
    n, m = left.n, len(li)
    if m == 0:
        charge_rows(n, len(left.cols) + len(names), "left join")
        out = dict(left.cols)
        out.update(_unbound_cols(n, names))
        return Bindings(out, n)
    cnt = np.bincount(li, minlength=n)
    miss = cnt == 0
    if not miss.any():
        charge_rows(m, len(left.cols) + len(names) + 1, "left join")
        out = {v: c[li] for v, c in left.cols.items()}
        for v in names:
            out[v] = new[v]
        return Bindings(out, m)
    per = cnt + miss                      # rows per left row: its matches, or 1
    total = int(m + np.count_nonzero(miss))
    charge_rows(total, len(left.cols) + len(names) + 3, "left join")
    ends = np.cumsum(per)
    # match j of left row i sits at (start of i) + (j - first match of i)
    first = np.cumsum(cnt) - cnt
    pos = (ends - per)[li] + (np.arange(m, dtype=np.int64) - first[li])
    rows = np.repeat(np.arange(n, dtype=np.int64), per)
    out = {v: c[rows] for v, c in left.cols.items()}
    for v in names:
        col = np.full(total, UNBOUND, dtype=np.int64)
        col[pos] = new[v]
        out[v] = col
    return Bindings(out, total)


def unbound_var(expr) -> str | None:
    """``?v`` of a filter ``!BOUND(?v)``, else None."""
    if isinstance(expr, A.Call) and expr.op == "!" and len(expr.args) == 1:
        inner = expr.args[0]
        if (isinstance(inner, A.Call) and inner.op == "BOUND" and len(inner.args) == 1
                and isinstance(inner.args[0], A.Var)):
            return inner.args[0].name
    return None


def anti_join(ev, node: A.Filter, seed) -> Bindings | None:
    """``Filter(!BOUND(?v), ExploreLeftJoin(L, BGP, f))`` with ``?v`` one of the BGP's variables
    and not one of ``L``'s: the left rows without a match passing ``f`` (the BGP's variables
    unbound). None when the shape does not hold (the caller evaluates the general way)."""
    from engine.exec.bgp import seed_ok  # noqa: PLC0415
    from engine.exec.evaluate import pattern_vars  # noqa: PLC0415

    inp = node.input
    v = unbound_var(node.expr)
    if v is None or not isinstance(inp, ExploreLeftJoin):
        return None
    own = bgp_vars(inp.right.triples)
    if v not in own or v in pattern_vars(inp.left) or (seed is not None and v in seed.cols):
        return None
    left = ev.eval(inp.left, seed)
    names = [x for x in own if x not in left.cols]
    if left.n == 0:
        return Bindings.empty(list(left.cols) + names)
    if v in left.cols or not seed_ok(left, inp.right.triples):
        res = ev._left_join_eval(inp, left, seed)   # (the general join, then the filter)
        return res.mask(ev.filter_rows(node.expr, res)) if res.n else res
    TAKEN["anti"] += 1
    li, _ = _matches(ev, inp, left)
    kept = left if len(li) == 0 else left.mask(np.bincount(li, minlength=left.n) == 0)
    if kept.n == 0:
        return Bindings.empty(list(left.cols) + names)
    out = dict(kept.cols)
    out.update(_unbound_cols(kept.n, names))
    return Bindings(out, kept.n)


def _join_left(ev, node: ExploreLeftJoin, left: Bindings, seed) -> Bindings:
    """What ``Evaluator._ExploreLeftJoin`` does once its left rows are in hand."""
    from engine.exec.bgp import seed_ok  # noqa: PLC0415
    from engine.exec.evaluate import pattern_vars  # noqa: PLC0415

    if left.n == 0:
        return Bindings.empty(set(left.cols) | pattern_vars(node.right))
    if seed_ok(left, node.right.triples):
        return explore_left_join(ev, node, left)
    return ev._left_join_eval(node, left, seed)


def top_candidates(ev, node: A.OrderBy, top: int, seed) -> Bindings | None:
    """``OrderBy(ExploreLeftJoin(L, BGP, f))`` under a LIMIT keeping ``top`` rows, when every
    ORDER BY key is a deterministic expression of variables the left rows fix (the BGP does
    not bind them, or binds them to the left row's value: shared variables bound in every
    left row): the left join of only the left rows whose first key is within the ``top``
    smallest, its ties included. Each left row gives at least one output row with its own
    keys, so the ``top`` first output rows come from those left rows, in the same relative
    order (the merge keeps left order): the caller's stable top-k over this answer is the one
    over the whole left join. None when the shape does not hold (the caller evaluates the
    input whole)."""
    from engine.exec.functions import order_ranks  # noqa: PLC0415
    from engine.exec.order_keys import column_key  # noqa: PLC0415
    from engine.plan.filters import deterministic_vars  # noqa: PLC0415

    inp = node.input
    if not isinstance(inp, ExploreLeftJoin) or top <= 0:
        return None
    own = set(bgp_vars(inp.right.triples))
    fixed: set[str] = set()
    for c in node.conditions:
        names = deterministic_vars(c.expr)
        if names is None:
            return None
        fixed.update(v for v in names if v in own)
    left = ev.eval(inp.left, seed)
    if left.n >= 4 * top and all(v in left.cols and not (left.cols[v] == UNBOUND).any() for v in fixed):
        first = node.conditions[0]
        vals = column_key(first.expr, left, ev.ctx)   # (STR(?x) of a column: the column)
        r = order_ranks(ev.expr_values(first.expr, left) if vals is None else vals, ev.ctx)
        if not first.ascending:
            r = -r
        bound = np.partition(r, top - 1)[top - 1]
        cand = np.flatnonzero(r <= bound)
        if len(cand) < left.n:
            TAKEN["top"] += 1
            left = left.take(cand)
    return _join_left(ev, inp, left, seed)


def right_seed(node: A.LeftJoin, left: Bindings) -> Bindings | None:
    """The seed for a nested OPTIONAL's right side: ``LeftJoin(L, R)`` where ``R`` is itself
    OPTIONALs over a BGP (``{ ?x :p ?c OPTIONAL { ... } }``) is evaluated as a whole, then
    joined (its right side is no BGP: no exploration from the left rows), so it answered the
    inner BGP over the whole graph (UP2: every course and its TAs for 776 lecturers' rows).
    Seeded by the distinct left values of the variables that BGP binds (bound in every left
    row), ``R`` answers only its solutions compatible with some left row: each of them binds
    those variables from the BGP, so the seed shows no filter inside ``R`` a variable ``R``
    would not bind itself, and the left join's compatibility test is unchanged. None when
    ``R`` is of another shape or no such variable exists."""
    r = node.right
    while isinstance(r, (ExploreLeftJoin, A.LeftJoin)):
        r = r.left
    if not (isinstance(r, A.BGP) and r.triples):
        return None
    shared = [v for v in bgp_vars(r.triples) if v in left.cols and not (left.cols[v] == UNBOUND).any()]
    if not shared:
        return None
    TAKEN["seeded"] += 1
    return Bindings({v: left.cols[v] for v in shared}, left.n).distinct()
