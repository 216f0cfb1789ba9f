"""HAVING before the aggregates it does not read.

A HAVING is a Filter right above the Group over the grouping variables and some aggregates
(``HAVING (COUNT(?x) > 140)``); the other aggregates of the SELECT (``MIN(STR(?x))``) were
computed for every group and most groups then dropped: UG15 spent 1.1 of its 2 ms on a
MIN over the strings of 30 groups' 3,871 rows to keep 3 groups. Here the aggregates the
HAVING reads are computed first (over every row, as ever), the HAVING keeps its groups, and
the others are computed over the rows of the kept groups only: a kept group keeps all of
its rows, so each aggregate sees the same values as before and the answer is the same bag.
Only for a plain ``GROUP BY ?v ...`` (grouping variables, no expressions), a deterministic
HAVING, at least one aggregate the HAVING does not read, and inputs of at least
:data:`MIN_ROWS` rows (below that the whole group is cheap anyway).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from engine.exec.bindings import Bindings, _joint_keys
from engine.exec.functions import _exists_of, _nondeterministic, vars_of
from engine.sparql import algebra as A

__all__ = ["MIN_ROWS", "TAKEN", "run"]

#: the input rows from which the HAVING goes first
MIN_ROWS = 64
#: HAVINGs run before the other aggregates (a test's spy)
TAKEN = [0]


def run(ev, node: A.Filter) -> Bindings | None:
    """The Filter ``node`` over its Group with the HAVING first; None: not for this node."""
    group = node.input
    if not isinstance(group, A.Group) or not group.by or not group.aggregates:
        return None
    if not all(isinstance(e, A.Var) and e.name == v.name for e, v in group.by):
        return None
    expr = node.expr
    if _nondeterministic(expr) or _exists_of(expr):
        return None
    names = set(vars_of(expr))
    by_names = {v.name for _, v in group.by}
    agg_names = {v.name for v, _ in group.aggregates}
    if not names <= by_names | agg_names:
        return None
    first = tuple((v, a) for v, a in group.aggregates if v.name in names)
    later = tuple((v, a) for v, a in group.aggregates if v.name not in names)
    if not later:
        return None
    res = ev.eval(group.input)
    if res.n < MIN_ROWS:
        return _plain(ev, node, group, res)
    TAKEN[0] += 1
    t0 = time.perf_counter()
    head = ev._group(dataclasses.replace(group, aggregates=first), res)
    _note(ev, group, head.n, t0)
    if head.n == 0:
        return _with_empty(head, later)
    keep = np.asarray(ev.filter_rows(expr, head), dtype=bool)
    by = [v.name for _, v in group.by]
    if not keep.all():
        head = head.mask(keep)
        if head.n == 0:
            return _with_empty(head, later)
        # the rows of the kept groups (a group's rows share its grouping values)
        row_key, kept_key = _joint_keys([res.col(b) for b in by], [head.cols[b] for b in by])
        res = res.mask(np.isin(row_key, kept_key))
    tail = ev._group(dataclasses.replace(group, aggregates=later), res)
    # the later aggregates lined up with the kept groups by their grouping values
    tail_key, kept_key = _joint_keys([tail.cols[b] for b in by], [head.cols[b] for b in by])
    order = np.argsort(tail_key, kind="stable")
    at = order[np.searchsorted(tail_key[order], kept_key)]
    cols = dict(head.cols)
    for v, _ in later:
        cols[v.name] = np.asarray(tail.cols[v.name])[at]
    return Bindings(cols, head.n)


def _note(ev, group, groups: int, t0: float) -> None:
    """The Group's line of an analyzing evaluator (``EXPLAIN`` with analyze: its groups, the
    time of the aggregates the HAVING reads; the others' is in the Filter's)."""
    stats = getattr(ev, "stats", None)
    if isinstance(stats, dict):
        st = stats.setdefault(id(group), [group, 0, 0, 0.0])  # (the node pins its id)
        st[1] += 1
        st[2] += groups
        st[3] += time.perf_counter() - t0


def _plain(ev, node, group, res) -> Bindings:
    """The Filter over the Group as the general path computes it, the input already read."""
    out = ev._group(group, res)
    if out.n == 0:
        return out
    return out.mask(ev.filter_rows(node.expr, out))


def _with_empty(head: Bindings, later) -> Bindings:
    cols = dict(head.cols)
    for v, _ in later:
        cols[v.name] = np.zeros(0, dtype=np.int64)
    return Bindings(cols, 0)
