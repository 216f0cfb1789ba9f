"""Plan operators the rewrites put into the algebra tree (the executor runs
them next to the algebra nodes of :mod:`engine.sparql.algebra`).

Each keeps the pattern it replaces (``right``): when the run-time condition
of the faster execution does not hold (the left rows leave a shared variable
unbound in some row, see :func:`engine.exec.bgp.seed_ok`), the executor
evaluates ``right`` as the parser built it and joins."""

from __future__ import annotations

from dataclasses import dataclass

from engine.sparql import algebra as A


@dataclass(frozen=True, slots=True)
class ExploreJoin:
    """Join(left, right) where ``right`` is a BGP, or a FILTER over a BGP reading
    only the BGP's variables (``expr``): the BGP's exploration starts from the
    left rows (no intermediate join), the filter runs on its output."""

    left: A.Pattern
    right: A.Pattern
    bgp: A.BGP
    expr: A.Expr | None = None


@dataclass(frozen=True, slots=True)
class PathJoin:
    """Join(left, path pattern): the path starts from the left rows' values
    when they bind one of its ends."""

    left: A.Pattern
    right: A.PathPattern


@dataclass(frozen=True, slots=True)
class ExploreLeftJoin:
    """LeftJoin(left, BGP [, expr]): the BGP explores from the left rows, each
    tagged with its row number; rows without a match are kept unextended."""

    left: A.Pattern
    right: A.BGP
    expr: A.Expr | None = None
