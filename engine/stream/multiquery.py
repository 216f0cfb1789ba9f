"""Multi-query execution: continuous queries of one shape run as one batched execution per instant.

Applications register one continuous query per user, sensor or area, all of one shape: the same
algebra, windows and output mode, differing only in constants. Evaluated one by one, each instant
pays the fixed per-query cost (dataset, plan walk, numpy calls on tiny arrays) a thousand times.
Here a *group* of such queries is evaluated once per instant:

* :func:`analyze` turns a query into its **shape** (the algebra with the parameterized constants
  replaced by hidden variables ``~p0, ~p1, ...``, the windows and the mode; equal shapes = one
  group) and its **parameters** (the constants, in the order of the placeholders), or says why the
  query is not batched (:class:`Refused`; it then runs alone, as before). The parser never makes
  a name starting with ``~``; the placeholders are not ``#``-prefixed because the BGP planner
  does not count ``#`` columns of a seed as bound (it would explore from the wrong end).
* The batched query joins a :class:`ParamTable` -- one row per member: the hidden query index
  ``#q`` and the member's constants -- at the leftmost leaf of the pattern, so the BGP explores
  from the members' constants (``ExploreJoin``) and every solution carries the ``#q`` of the
  member it belongs to. ``#q`` is projected (and added to GROUP BY), so :meth:`Group.run` splits
  the result per member with one stable sort. RSTREAM SELECT answers are rendered together (each
  distinct term once, the bytes the single path writes); the others through each member's own
  :class:`~engine.stream.continuous.InstantEvaluator` (its I/DSTREAM state, ASK, CONSTRUCT).
  The window graphs are built once for the group (the evaluators share the manager's
  :class:`~engine.stream.continuous.WindowCache`).

Which constants are parameters (a constant replaced by a variable joined with the table gives the
same solutions exactly when the variable is bound by the table before, or joined with it after,
every operator that reads it):

* subject and object constants of the triple patterns of BGPs -- on the *spine* (the chain of
  left operands of Join / LeftJoin / Minus, the inputs of Filter / Extend and both sides of a
  Union from the top of the WHERE pattern, where the table is joined first:
  ``T ⋈ (A ∪ B) = (T ⋈ A) ∪ (T ⋈ B)``), in the right side of a Join or OPTIONAL on the spine,
  and below Union / Graph / Filter / Extend there;
* the right side of a Join or OPTIONAL on the spine that starts from a constant gets the table
  joined in as well (``T ⋈ L ⋈ (T ⋈ R) = T ⋈ L ⋈ R``: the table's rows are distinct), so its
  FILTER / BIND / VALUES constants are parameters too (from a constant-free start the table
  would multiply the pattern's rows: its FILTER constants then stay in the shape);
* in expressions over rows that carry the table (FILTERs and BINDs on the spine, OPTIONAL
  conditions, HAVING and SELECT expressions with GROUP BY, whose placeholders become group keys,
  constant per member): a BIND of a constant, operands of comparisons, IN / NOT IN lists,
  CONTAINS / STRSTARTS / STRENDS / LANGMATCHES / SAMETERM arguments, IF / COALESCE branches,
  under ``&& || !`` (these read their arguments' terms only, so a placeholder bound to the same
  term gives the same value);
* VALUES constants (on the spine or off it): the table becomes :class:`ParamValues`, every
  member's rows tagged with ``#q`` -- joined with the spine's rows on ``#q``, so each member
  meets its own rows only (rows without ``#q`` stay compatible with every member).

Every other constant is part of the shape (queries differing there are different groups):
predicates, GRAPH names, property-path ends (a zero-length path treats a constant end differently
from a variable one), constants inside arithmetic, REGEX / REPLACE patterns (compiled once as
constants) and other calls, EXISTS, MINUS right sides (a shared hidden variable would make MINUS
remove rows it keeps), subqueries, HAVING of aggregates without GROUP BY, the CONSTRUCT template,
LIMIT / OFFSET values and the dataset.

Aggregates: the Group gets ``#q`` as its last key, so every member's groups are its own: COUNT,
SUM, AVG, MIN, MAX (also DISTINCT) are computed for all members at once by the engine's aggregate
code (the same type promotion and error rules as alone; a floating SUM / AVG is summed in value
order within a group, so the result does not depend on the order rows come in). Aggregates
without GROUP BY are grouped by ``#q`` alone; a member without solutions gets the row of the
query over no solutions (``Shape.empty``: COUNT 0, SUM / AVG 0, MIN / MAX unbound, then the
SELECT expressions and HAVING), computed once per batch.

ORDER BY whose conditions include every selected variable (as a plain variable) is batched: the
order is then total on the answer's rows (ties are equal rows), so each member's rows, split by a
stable sort on ``#q``, are in the order it gets alone, and its OFFSET / LIMIT (``Shape.cut``, part
of the shape) is applied to its own rows.

Not batched (the query runs alone): DESCRIBE; solution modifiers on ASK and CONSTRUCT; and
whatever depends on the order of rows, because alone that order is the query's own history, not
a function of the window: ORDER BY that leaves some selected variable out (ties), LIMIT / OFFSET
without an ORDER BY over every selected variable (the rows kept), SAMPLE and GROUP_CONCAT (the
value). Alone, incremental maintenance keeps rows in the order they arrived over past instants,
the tuple-at-a-time and vectorized paths are chosen per instant (by measured cost, with a
back-off), and an instant whose window change cannot match reuses the answer of the last
evaluated one -- rows picked from an earlier window's order. A batch has none of that history.
Tried: batching them with a per-member check (a member whose answer provably does not depend on
the order -- a cut keeping all its rows or none, groups with one distinct value -- takes the
batch's, the others are evaluated alone): the members evaluated alone then differ from the query
registered alone, whose evaluator saw the instants the batches took (property tests found it).

What each member gets is what it gets registered alone: the same window member, the same
solutions (as a multiset: the order of rows within an answer is unspecified, as for SPARQL without
ORDER BY), the same I/DSTREAM differences and unchanged-instant handling (the scheduler decides
those per member, sharing the work between members with equal states). A batch that fails as a
whole (timeout, row or memory budget: the batch's intermediate results count against the
budgets like one query's) is evaluated again member by member, so each member gets its own
answer or error; the group then runs alone for a while (a back-off that doubles per failure).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import orjson

from engine.exec.bindings import UNBOUND, Bindings, distinct_inverse, join
from engine.exec.context import LOCAL_BASE
from engine.exec.evaluate import Evaluator, QueryContext, construct, evaluate_query
from engine.exec.result import QueryResult
from engine.exec.serialize import _json_term
from engine.plan.planner import QueryPlan, make_plan
from engine.sparql import algebra as A
from engine.stream import cache_budget as _cache_budget
from engine.stream.continuous import multiset_diff

__all__ = ["ParamTable", "ParamValues", "Refused", "Shape", "Group", "analyze", "QVAR"]

#: the hidden query-index variable of a batched query (the parser never makes a name with '#')
QVAR = "#q"
_CMP = frozenset(("=", "!=", "<", ">", "<=", ">="))
_LOGIC = frozenset(("&&", "||", "!"))
#: calls whose constant arguments are parameters (a placeholder bound to the same term gives the
#: same value: these functions read their arguments' terms only)
_VALUE_ARGS = frozenset(("CONTAINS", "STRSTARTS", "STRENDS", "LANGMATCHES", "SAMETERM"))
#: aggregates whose value is a function of the multiset of a group's rows (SUM / AVG: integer and
#: decimal sums are exact, floating ones are summed in value order by engine.exec.aggregates)
_GROUPABLE = frozenset(("COUNT", "MIN", "MAX", "SUM", "AVG"))


class Refused(Exception):
    """Why a query is not batched (it runs alone)."""


@dataclass(frozen=True, slots=True)
class ParamTable:
    """Plan leaf: the members' parameter table (``#q`` and one column per placeholder), supplied
    per instant by the evaluator of the batch."""

    vars: tuple[A.Var, ...]


@dataclass(frozen=True)
class Shape:
    """A query's batching identity: ``key`` (equal keys = one group), ``params`` (its constants,
    one per placeholder), the batched query and the original form."""

    key: tuple
    params: tuple[str, ...]
    batched: A.Query
    form: str
    #: aggregates without GROUP BY: the query over no solutions (its one group's row, or none if
    #: HAVING drops it), the answer of a member without solutions
    empty: A.Query | None = None
    #: (OFFSET, LIMIT) of each member's rows (an ORDER BY over every selected variable: the order
    #: is total on the rows, so the cut is the one alone)
    cut: tuple[int, int | None] | None = None


@dataclass(frozen=True, slots=True)
class ParamValues:
    """Plan leaf: a VALUES table whose constants are parameters. ``cells``: per row, per
    variable, the placeholder index of the cell (None: UNDEF); evaluated as every member's rows,
    with ``#q``."""

    vars: tuple[A.Var, ...]
    cells: tuple[tuple[int | None, ...], ...]




# ---------------------------------------------------------------- parameterizing the algebra


class _Params:
    def __init__(self, base: int = 0):
        self.base = base
        self.keys: list[str] = []

    def var(self, key: str) -> A.Var:
        v = A.Var(f"~p{self.base + len(self.keys)}")
        self.keys.append(key)
        return v

    def bgp(self, node: A.BGP) -> A.BGP:
        out = []
        for tp in node.triples:
            s = self.var(tp.s.key) if isinstance(tp.s, A.Const) else tp.s
            o = self.var(tp.o.key) if isinstance(tp.o, A.Const) else tp.o
            out.append(A.TriplePattern(s, tp.p, o))
        return A.BGP(tuple(out))

    def values(self, node: A.Values):
        """VALUES: each member's own rows (:class:`ParamValues`, tagged with ``#q``); a table
        without constants stays in the shape."""
        if not any(c is not None for row in node.rows for c in row):
            return node
        cells = tuple(tuple(None if c is None else self._index(c) for c in row) for row in node.rows)
        return ParamValues(node.vars, cells)

    def _index(self, key: str) -> int:
        self.var(key)
        return self.base + len(self.keys) - 1

    def value(self, e):
        """An operand whose constant may be a placeholder (the rows carry the table)."""
        return self.var(e.key) if isinstance(e, A.Const) else self.expr(e)

    def expr(self, e):
        """Constants of an expression over rows that carry the table: operands of comparisons,
        IN lists, string tests, SAMETERM, IF / COALESCE branches, under && || ! (not inside
        EXISTS, arithmetic, REGEX patterns or other calls, which stay in the shape)."""
        if not isinstance(e, A.Call):
            return e
        op = e.op
        if op in _CMP or op in _VALUE_ARGS:
            args = tuple(self.value(a) for a in e.args)
        elif op in _LOGIC:
            args = tuple(self.expr(a) for a in e.args)
        elif op in ("IN", "NOT IN"):
            args = (self.expr(e.args[0]), *(self.value(a) for a in e.args[1:]))
        elif op == "IF" and len(e.args) == 3:
            args = (self.expr(e.args[0]), self.value(e.args[1]), self.value(e.args[2]))
        elif op == "COALESCE":
            args = tuple(self.value(a) for a in e.args)
        else:
            return e
        return A.Call(op, args)

    def off(self, node):
        """A pattern evaluated on its own and joined with the table's rows afterwards: only BGP
        constants (each placeholder is bound where the constant matched) and VALUES (its rows
        carry ``#q``)."""
        if isinstance(node, A.BGP):
            return self.bgp(node)
        if isinstance(node, A.Values):
            return self.values(node)
        if isinstance(node, (A.Join, A.Union)):
            return type(node)(self.off(node.left), self.off(node.right))
        if isinstance(node, A.Graph):
            return A.Graph(node.name, self.off(node.input))
        if isinstance(node, A.Filter):
            return A.Filter(node.expr, self.off(node.input))
        if isinstance(node, A.Extend):
            return A.Extend(self.off(node.input), node.var, node.expr)
        if isinstance(node, A.LeftJoin):   # the optional part has no placeholder to be joined on
            return A.LeftJoin(self.off(node.left), node.right, node.expr)
        if isinstance(node, A.Minus):
            return A.Minus(self.off(node.left), node.right)
        return node

    def sub(self, node, table: ParamTable):
        """The right side of a Join / OPTIONAL on the spine. With the table joined into it
        (``T ⋈ L ⋈ (T ⋈ R) = T ⋈ L ⋈ R``: T's rows are distinct) its FILTER / BIND / VALUES
        constants become placeholders too -- when it starts from a constant (explored from the
        members' constants; from a constant-free pattern it would be the cross product of the
        table and the pattern); otherwise only its BGP constants, joined on their placeholders
        (explored from the left rows, which carry them)."""
        base = self.base + len(self.keys)
        lone, whole = _Params(base), _Params(base)
        a = lone.off(node)
        if _anchored(node):
            b = whole.spine(node, table)
            if len(whole.keys) > len(lone.keys):
                self.keys += whole.keys
                return b
        self.keys += lone.keys
        return a

    def spine(self, node, table: ParamTable):
        """The pattern with the table joined at its leftmost leaf: every row above carries it."""
        if isinstance(node, A.Filter):
            inner = self.spine(node.input, table)
            return A.Filter(self.expr(node.expr), inner)
        if isinstance(node, A.Join):
            left = self.spine(node.left, table)
            return A.Join(left, self.sub(node.right, table))
        if isinstance(node, A.LeftJoin):
            left = self.spine(node.left, table)
            right = self.sub(node.right, table)
            return A.LeftJoin(left, right, None if node.expr is None else self.expr(node.expr))
        if isinstance(node, A.Extend):
            inner = self.spine(node.input, table)
            return A.Extend(inner, node.var, self.value(node.expr))
        if isinstance(node, A.Minus):
            return A.Minus(self.spine(node.left, table), node.right)
        if isinstance(node, A.Union):   # T ⋈ (A ∪ B) = (T ⋈ A) ∪ (T ⋈ B)
            left = self.spine(node.left, table)
            return A.Union(left, self.spine(node.right, table))
        if isinstance(node, A.BGP):
            return A.Join(table, self.bgp(node))
        return A.Join(table, self.off(node))


def _anchored(node) -> bool:
    """Whether a pattern's leftmost leaf binds a parameter in every row: a BGP with a subject or
    object constant, VALUES with constants, a UNION of such."""
    while isinstance(node, (A.Filter, A.Extend, A.Join, A.LeftJoin, A.Minus)):
        node = node.input if isinstance(node, (A.Filter, A.Extend)) else node.left
    if isinstance(node, A.BGP):
        return any(isinstance(x, A.Const) for tp in node.triples for x in (tp.s, tp.o))
    if isinstance(node, A.Values):
        return any(c is not None for row in node.rows for c in row)
    if isinstance(node, A.Union):
        return _anchored(node.left) and _anchored(node.right)
    return False


def _group_part(node: A.Pattern, p: _Params, table: ParamTable, q: A.Var):
    """Below Project: Extend/Filter nodes (SELECT expressions, HAVING) down to a Group, whose
    input gets the table and whose keys get ``#q``; without a Group, the whole pattern. Returns
    ``(pattern, implicit)``: ``implicit`` is the Group of aggregates without GROUP BY (then
    ``#q`` is its only key, and a member without solutions gets the empty group's row)."""
    chain = []
    cur = node
    while isinstance(cur, (A.Extend, A.Filter)):
        chain.append(cur)
        cur = cur.input
    if not isinstance(cur, A.Group):
        if _has_group(node):
            raise Refused("aggregates below SELECT expressions")
        return p.spine(node, table), None
    bad = sorted({a.name for _, a in cur.aggregates if a.name not in _GROUPABLE})
    if bad:
        raise Refused(f"{', '.join(bad)} (alone, the value depends on the order of a group's rows, which "
                      "its evaluation path and the query's history decide)")
    inner = p.spine(cur.input, table)
    keys = cur.by + ((q, q),)
    aggs = cur.aggregates
    implicit = None
    if not cur.by:   # HAVING's constants stay in the shape: the empty group's row is shared
        implicit = cur
        for c in reversed(chain):
            implicit = dataclasses.replace(c, input=implicit)
    else:
        # HAVING comparisons: their placeholders are group keys too (one value per member, so the
        # groups are the same), hence bound in the rows HAVING filters
        first = len(p.keys)
        chain = [dataclasses.replace(c, expr=p.expr(c.expr) if isinstance(c, A.Filter) else p.value(c.expr))
                 for c in chain]
        keys += tuple((A.Var(f"~p{j}"), A.Var(f"~p{j}")) for j in range(first, len(p.keys)))
    out = A.Group(inner, keys, aggs)
    for c in reversed(chain):
        out = dataclasses.replace(c, input=out)
    return out, implicit


def _has_group(node) -> bool:
    if isinstance(node, A.Group):
        return True
    if isinstance(node, (A.Extend, A.Filter)):
        return _has_group(node.input)
    return False


def analyze(query: A.Query, mode: str, windows) -> Shape:
    """The shape and parameters of a continuous query (``windows``: its bound windows); raises
    :class:`Refused` when it cannot be batched."""
    p = _Params()
    q = A.Var(QVAR)
    form = query.form
    empty = None
    cut = None   # (OFFSET, LIMIT) of a SELECT, applied to each member's rows
    pattern = query.pattern
    if form == "SELECT":
        node = pattern
        if isinstance(node, A.Slice):
            cut = (node.offset, node.limit)
            node = node.input
        wrap = None
        if isinstance(node, (A.Distinct, A.Reduced)):
            wrap, node = type(node), node.input
        if not isinstance(node, A.Project):
            raise Refused("an unexpected SELECT form")
        inner = node.input
        order = None
        if isinstance(inner, A.OrderBy) and set(node.vars) <= {
                c.expr for c in inner.conditions if isinstance(c.expr, A.Var)}:
            order, inner = inner, inner.input
        elif isinstance(inner, A.OrderBy):
            raise Refused("ORDER BY not over every selected variable (ties are broken by row order)")
        elif cut is not None:
            raise Refused("LIMIT / OFFSET without an ORDER BY over every selected variable (alone, the rows "
                          "kept depend on the row order its evaluation path and history give)")
        body, implicit = _group_part(inner, p, _TABLE_PLACEHOLDER, q)
        if order is not None:
            body = A.OrderBy(body, order.conditions)
        new = A.Project(body, node.vars + (q,))
        if wrap is not None:
            new = wrap(new)
        bvars = query.vars + (q,)
        if implicit is not None:
            # the same aggregates, SELECT expressions and HAVING over no solutions (an empty table)
            top = A.Project(_put_table(_empty_group(implicit), _EMPTY_TABLE), node.vars)
            empty = dataclasses.replace(query, form="SELECT", pattern=top if wrap is None else wrap(top),
                                        prefixes=(), template=())
    elif form in ("ASK", "CONSTRUCT"):
        if isinstance(pattern, (A.Slice, A.OrderBy, A.Project, A.Distinct, A.Reduced, A.Group)):
            raise Refused(f"solution modifiers on {form}")
        body = p.spine(pattern, _TABLE_PLACEHOLDER)
        if form == "ASK":
            bvars = (q,)
            new = A.Distinct(A.Project(body, bvars))
        else:
            names = []
            for t in query.template:
                for x in (t.s, t.p, t.o):
                    if isinstance(x, A.Var) and x not in names:
                        names.append(x)
            bvars = (*names, q)
            new = A.Project(body, bvars)
    else:
        raise Refused(f"{form} queries")
    table = ParamTable((q, *(A.Var(f"~p{i}") for i in range(len(p.keys)))))
    new = _put_table(new, table)
    batched = dataclasses.replace(query, form="SELECT", pattern=new, vars=bvars, prefixes=(),
                                  template=query.template if form == "CONSTRUCT" else ())
    key = (batched, form, query.template, mode, cut,
           tuple((bw.stream, bw.iri, bw.window) for bw in windows))
    return Shape(key, tuple(p.keys), batched, form, empty, cut)


# the table's columns are known only after the walk: a placeholder leaf, replaced afterwards
_TABLE_PLACEHOLDER = ParamTable(())
# the input of the empty group (answered by an evaluator whose table has no rows)
_EMPTY_TABLE = ParamTable((A.Var(QVAR),))


def _empty_group(node):
    """The implicit Group (under its Extend / Filter chain) with the placeholder as its input."""
    if isinstance(node, A.Group):
        return dataclasses.replace(node, input=_TABLE_PLACEHOLDER)
    return dataclasses.replace(node, input=_empty_group(node.input))


def _put_table(node, table: ParamTable):
    if node is _TABLE_PLACEHOLDER:
        return table
    if isinstance(node, (A.Join, A.LeftJoin, A.Union)):   # the table may be joined into both sides
        return dataclasses.replace(node, left=_put_table(node.left, table), right=_put_table(node.right, table))
    if isinstance(node, A.Minus):
        return dataclasses.replace(node, left=_put_table(node.left, table))
    if isinstance(node, (A.Filter, A.Extend, A.Project, A.Distinct, A.Reduced, A.Group, A.OrderBy)):
        return dataclasses.replace(node, input=_put_table(node.input, table))
    return node


# ---------------------------------------------------------------- one batched execution


def _cut(order: np.ndarray, bounds: list[int], offset: int, limit: int | None) -> tuple[np.ndarray, list[int]]:
    """``order`` (row positions, member by member) keeping rows ``[offset, offset + limit)`` of
    each member, and the new member bounds."""
    b = np.asarray(bounds, dtype=np.int64)
    lo = np.minimum(b[:-1] + offset, b[1:])
    hi = b[1:] if limit is None else np.minimum(lo + limit, b[1:])
    size = hi - lo
    nb = np.zeros(len(b), dtype=np.int64)
    np.cumsum(size, out=nb[1:])
    pos = np.arange(int(nb[-1]), dtype=np.int64) - np.repeat(nb[:-1] - lo, size)
    return order[pos], nb.tolist()


class _BatchEvaluator(Evaluator):
    """The ordinary evaluator; the :class:`ParamTable` leaf answers the members' table."""

    def __init__(self, ctx, dataset, table: Bindings):
        super().__init__(ctx, dataset)
        self._table = table
        self.grouped: np.ndarray | None = None   # the #q of the members the top Group has a group for

    def _ParamTable(self, node: ParamTable, seed):
        t = self._table
        return t if seed is None else join(seed, t, self.ctx.max_rows)

    def _ParamValues(self, node: ParamValues, seed):
        t = self._table
        n, k = t.n, len(node.cells)
        cols = {QVAR: np.repeat(t.cols[QVAR], k)}
        for j, v in enumerate(node.vars):
            grid = np.full((n, k), UNBOUND, dtype=np.int64)
            for r, row in enumerate(node.cells):
                if row[j] is not None:
                    grid[:, r] = t.cols[f"~p{row[j]}"]
            cols[v.name] = grid.reshape(-1)
        res = Bindings(cols, n * k)
        return res if seed is None else join(seed, res, self.ctx.max_rows)

    def _group(self, node: A.Group) -> Bindings:
        out = super()._group(node)
        if node.by and node.by[-1][1].name == QVAR:
            self.grouped = out.col(QVAR)
        return out


class Group:
    """The registered queries of one shape (members keep their own evaluators and logs)."""

    __slots__ = ("shape", "plan", "empty_plan", "members", "failures", "skip", "batches", "_cells", "_framed",
                 "_params", "last_ms", "_slot", "__weakref__")

    #: rendered cells kept per group (store ids only: they never change meaning)
    CELL_CACHE = 1 << 17

    def __init__(self, shape: Shape):
        self.shape = shape
        self.plan: QueryPlan = make_plan(shape.batched)
        self.empty_plan = None if shape.empty is None else make_plan(shape.empty)
        self.members: dict[str, tuple] = {}   # name -> (QueryEntry, params)
        self.failures = 0
        self.skip = 0       # batches to run alone after a failed batch
        self.batches = 0
        self.last_ms: float | None = None     # the last batch's latency (the scheduler's GC pause)
        self._cells: dict[int, bytes] = {}    # term id -> its SPARQL JSON term
        self._params: tuple | None = None     # (member entries, their table): see _table
        self._framed: dict = {}               # (pre, post) -> {term id: framed cell}: see _framed_cells

    def run(self, members: list, t: int) -> tuple[list[tuple], float]:
        """Evaluate instant ``t`` for ``members`` ((QueryEntry, params) pairs) at once: each
        member's ``(event data, its repeat prefix or None)`` -- or ``(exception, None)`` when
        rendering that member's answer failed -- and the latency of the batch in ms. Raises what
        the batched evaluation raises (the caller then evaluates the members alone)."""
        t0 = time.perf_counter()
        ev0 = members[0][0].evaluator
        db = ev0.db
        snap = db.store.snapshot()  # before reading the absorb log, as InstantEvaluator.evaluate
        ctx = QueryContext(snap, base=ev0.query.base, timeout=db.query_timeout, max_rows=db.max_rows,
                           term_cache=db._term_cache, query_memory=getattr(db, "query_memory", None))
        ds = ev0.dataset(ctx, t)
        n = len(members)
        bev = _BatchEvaluator(ctx, ds, Bindings(self._table(ctx, members), n))
        res = evaluate_query(self.shape.batched, ctx, ds, evaluator=bev, plan=self.plan)
        ctx.evaluator = None   # ctx <-> evaluator is a cycle (see evaluate_query)
        columns = res.columns
        if self.shape.empty is not None:
            columns = self._with_empty_groups(ctx, ds, columns, bev.grouped, n)
        qcol = columns[-1]
        order = np.argsort(qcol, kind="stable")
        bounds = np.searchsorted(qcol[order], np.arange(n + 1, dtype=np.int64)).tolist()
        if self.shape.cut is not None:   # each member's OFFSET / LIMIT (its rows are in ORDER BY order)
            order, bounds = _cut(order, bounds, *self.shape.cut)
        vals = [c[order] for c in columns[:-1]]
        names = res.vars[:-1]
        form = self.shape.form
        win = ev0.window_member(t)
        tail = b',"window":' + orjson.dumps(win) + b"}"
        diff = None
        if form == "SELECT" and ev0.mode != "RSTREAM" and names:
            diff = self._differences(members, names, vals, bounds, ev0.mode)
        if form == "SELECT" and ev0.mode == "RSTREAM":
            out = self._render_rows(ctx, names, vals, bounds, tail)
        elif diff is not None:
            # I/DSTREAM: every member's difference rendered together; the repeat prefix of a
            # difference is the empty one (InstantEvaluator.repeat_prefix), the same for all
            empty = b'{"head":' + orjson.dumps({"vars": list(names)}) + b',"results":{"bindings":[]}'
            out = [(d, empty) for d, _ in self._render_rows(ctx, names, diff[0], diff[1], tail)]
            # rendered: each member's state moves on as its own render would move it (not
            # before: a batch that fails is evaluated again member by member from the old state)
            shared = list(names)
            cur = diff[2]
            for (m, _), x, y in zip(members, bounds[:-1], bounds[1:], strict=True):
                m.evaluator.batch_advance(cur[x:y], shared)
        else:
            out = []
            fixed: dict = {}   # ASK: one rendering per answer
            for i, (m, _) in enumerate(members):
                a, b = bounds[i], bounds[i + 1]
                ev = m.evaluator
                if form == "ASK":
                    hit = fixed.get(b > a)
                    if hit is None:
                        hit = fixed[b > a] = ev.render(QueryResult(form="ASK", terms=ctx, boolean=b > a), win)
                    out.append((hit, None))
                    continue
                # a member's own answer (its I/DSTREAM state moves on here): an error in it is that
                # member's error, as alone, and the batch is not evaluated again
                try:
                    if form == "CONSTRUCT":
                        rows = Bindings({v: c[a:b] for v, c in zip(names, vals, strict=True)}, b - a)
                        r = QueryResult(form="CONSTRUCT", terms=ctx,
                                        triples=construct(ev.query.template, rows, ctx))
                    else:
                        r = QueryResult(form="SELECT", terms=ctx, vars=list(names),
                                        columns=[c[a:b] for c in vals], n_rows=b - a)
                    out.append((ev.render(r, win), None))
                except Exception as e:  # noqa: BLE001 - reported in that member's result stream
                    out.append((e, None))
        self.batches += 1
        return out, (time.perf_counter() - t0) * 1000.0

    def _table(self, ctx, members: list) -> dict[str, np.ndarray]:
        """The members' parameter table (``#q`` and each placeholder's ids). Kept for the next
        batch of the same members when every constant is a store id (those never change
        meaning; a constant absent from the store gets a query-local id, interned per batch):
        consecutive instants usually batch the same members, and interning a thousand
        constants per instant was a tenth of a batch's cost."""
        who = tuple([m for m, _ in members])
        hit = self._params
        if hit is not None and hit[0] == who:
            return dict(hit[1])
        n = len(members)
        cols = {QVAR: np.arange(n, dtype=np.int64)}
        stored = True
        for j in range(len(self.shape.params)):
            ids = cols[f"~p{j}"] = ctx.intern([p[j] for _, p in members])
            stored = stored and bool(((ids >= 0) & (ids < LOCAL_BASE)).all())
        for c in cols.values():
            c.setflags(write=False)   # shared by the batches that reuse the table
        self._params = (who, cols) if stored else None
        return dict(cols)

    def _differences(self, members: list, names, vals: list[np.ndarray], bounds: list[int],
                     mode: str) -> tuple[list[np.ndarray], list[int], np.ndarray] | None:
        """ISTREAM / DSTREAM SELECT: every member's difference with its previous answer in one
        multiset difference over rows tagged with the member's index (rows of different
        members never match). ``(columns, bounds)`` of the differences, member by member, and
        this instant's rows (member by member as ``bounds`` says: each member's next previous
        answer, set by the caller once the batch is rendered); None when some answer or
        previous answer holds a computed term (query-local ids: each member then takes its own
        difference through :meth:`~engine.stream.continuous.InstantEvaluator.render`)."""
        k = len(names)
        for c in vals:
            if len(c) and bool(((c < UNBOUND) | (c >= LOCAL_BASE)).any()):
                return None
        evs = [m.evaluator for m, _ in members]
        prevs = [ev.batch_prev(k) for ev in evs]
        if any(p is None for p in prevs):
            return None
        n = len(members)
        b = np.asarray(bounds, dtype=np.int64)
        cur = np.stack(vals, axis=1) if vals[0].size else np.zeros((0, k), dtype=np.int64)
        lens = np.fromiter(map(len, prevs), dtype=np.int64, count=n)
        prev = np.concatenate(prevs) if n else np.zeros((0, k), dtype=np.int64)
        who = np.arange(n, dtype=np.int64)
        a_rows = np.column_stack((np.repeat(who, np.diff(b)), cur))
        b_rows = np.column_stack((np.repeat(who, lens), prev))
        out = multiset_diff(a_rows, b_rows) if mode == "ISTREAM" else multiset_diff(b_rows, a_rows)
        out = out[np.argsort(out[:, 0], kind="stable")]
        ob = np.searchsorted(out[:, 0], np.arange(n + 1, dtype=np.int64)).tolist()
        return [np.ascontiguousarray(out[:, j + 1]) for j in range(k)], ob, cur

    def _with_empty_groups(self, ctx, ds, columns: list[np.ndarray], grouped, n: int) -> list[np.ndarray]:
        """Aggregates without GROUP BY: the members the top Group had no group for (no solutions)
        get the answer of the query over no solutions, as each gets alone."""
        has = np.zeros(n, dtype=bool)
        if grouped is not None and len(grouped):
            has[grouped] = True
        missing = np.flatnonzero(~has)
        if len(missing) == 0:
            return columns
        ev = _BatchEvaluator(ctx, ds, Bindings({}, 0))
        er = evaluate_query(self.shape.empty, ctx, ds, evaluator=ev, plan=self.empty_plan)
        ctx.evaluator = None
        k = len(er.columns[0]) if er.columns else er.n_rows
        if k == 0:   # HAVING drops the empty group
            return columns
        extra = [np.tile(c, len(missing)) for c in er.columns] + [np.repeat(missing.astype(np.int64), k)]
        return [np.concatenate((c, e)) for c, e in zip(columns, extra, strict=True)]

    def _render_rows(self, ctx, names: list[str], vals: list[np.ndarray], bounds: list[int],
                     tail: bytes) -> list[tuple[bytes, memoryview]]:
        """SPARQL JSON of every member's RSTREAM answer (the bytes the single path writes for
        them) and its repeat prefix (the data before the window member, a view as
        ``InstantEvaluator.repeat_prefix`` gives): each distinct term rendered once with its
        label and separators, the rows made by whole-column concatenation (no per-row Python
        when every cell is bound), all rows joined once, each member one slice of them."""
        total = bounds[-1]
        head = b'{"head":' + orjson.dumps({"vars": list(names)}) + b',"results":{"bindings":['
        close = b"]}" + tail
        lt = len(tail)
        if total == 0:
            d = head + close
            return [(d, memoryview(d)[:len(d) - lt])] * (len(bounds) - 1)
        if not names:
            rows = np.full(total, b"{}", dtype=object)
        else:
            rows = self._rows(ctx, names, vals, total)
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=total)
        starts = np.zeros(total + 1, dtype=np.int64)
        np.cumsum(lens + 1, out=starts[1:])   # row i starts at starts[i] in the comma-joined body
        body = b",".join(rows.tolist())
        b = np.asarray(bounds, dtype=np.int64)
        lo = starts[b[:-1]]
        hi = np.maximum(starts[b[1:]] - 1, lo)
        join = b"".join
        datas = [join((head, body[x:y], close)) for x, y in zip(lo.tolist(), hi.tolist(), strict=True)]
        # the repeat prefix: a copy while small (cheaper than a view), a view of a large answer
        return [(d, d[:len(d) - lt] if len(d) < 4096 else memoryview(d)[:len(d) - lt]) for d in datas]

    def _rows(self, ctx, names: list[str], vals: list[np.ndarray], total: int) -> np.ndarray:
        """Each row's JSON object (an object array of bytes). When every cell is bound, the
        ``{``, labels, commas and ``}`` are part of each column's distinct cells (kept across
        instants: a window slides by a step, most of its terms stay), so a row is the sum of
        its columns' cells."""
        k = len(names)
        parts = []
        for j, (v, c) in enumerate(zip(names, vals, strict=True)):
            uniq, inv = distinct_inverse(c)
            label = orjson.dumps(v) + b":"
            pre = (b"{" if j == 0 else b",") + label
            cells = self._framed_cells(ctx, uniq, pre, b"}" if j == k - 1 else b"")
            if not all(cells):   # an UNBOUND cell: rows joined one by one below
                break
            parts.append((cells, inv.reshape(-1)))
        else:
            rows = None
            for cells, inv in parts:
                table = np.empty(len(cells), dtype=object)
                table[:] = cells
                col = table[inv]
                rows = col if rows is None else rows + col
            return rows
        cols = []
        for v, c in zip(names, vals, strict=True):
            uniq, inv = distinct_inverse(c)
            table = np.empty(len(uniq), dtype=object)
            table[:] = self._framed_cells(ctx, uniq, orjson.dumps(v) + b":", b"")
            cols.append(table[inv.reshape(-1)].tolist())
        rows = np.empty(total, dtype=object)
        rows[:] = [b"{" + b",".join([x for x in r if x]) + b"}" for r in zip(*cols, strict=True)]
        return rows

    def _framed_cells(self, ctx, ids: np.ndarray, pre: bytes, post: bytes) -> list[bytes]:
        """``pre + cell + post`` of each distinct id's SPARQL JSON term (b"" for UNBOUND), store
        ids cached per framing."""
        framed = self._framed
        cache = framed.get((pre, post))
        if cache is None:
            if len(framed) > 64:
                framed.clear()
            cache = framed[(pre, post)] = {}
        out: list[bytes | None] = [cache.get(i) for i in ids.tolist()]
        miss = [k for k, x in enumerate(out) if x is None]
        if miss:
            mids = ids[miss]
            # one bound over all framings (a group has a few: its variables, first / last)
            held = sum(map(len, framed.values()))
            if held + len(miss) > self.CELL_CACHE or self._over(held + len(miss)):
                for c in framed.values():
                    c.clear()
                _cache_budget.JSON_TERMS.clears += 1
            for k, i, cell in zip(miss, mids.tolist(), self._term_cells(ctx, mids), strict=True):
                f = pre + cell + post if cell else b""
                out[k] = f
                if 0 <= i < LOCAL_BASE:
                    cache[i] = f
            self._account()
        return out

    def _over(self, framed_n: int = -1, cells_n: int = -1) -> bool:
        """All queries' term caches over their joint bound (:mod:`engine.stream.cache_budget`)
        and this group's above its share, if its framed cells / cells grew to these counts."""
        if framed_n < 0:
            framed_n = sum(map(len, self._framed.values()))
        return _cache_budget.JSON_TERMS.over(self._budget_slot(), framed_n + (len(self._cells) if cells_n < 0 else cells_n))

    def _budget_slot(self) -> list[int]:
        """This group's count in the joint bound (joined at its first rendering)."""
        slot = getattr(self, "_slot", None)
        if slot is None:
            slot = self._slot = _cache_budget.JSON_TERMS.join(self)
        return slot

    def _account(self) -> None:
        _cache_budget.JSON_TERMS.set(self._budget_slot(), sum(map(len, self._framed.values())) + len(self._cells))

    def _term_cells(self, ctx, ids: np.ndarray) -> list[bytes]:
        """The SPARQL JSON term of each distinct id (store ids cached; b"" for UNBOUND)."""
        cache = self._cells
        out: list[bytes | None] = [cache.get(i) for i in ids.tolist()]
        miss = [k for k, x in enumerate(out) if x is None]
        if miss:
            mids = ids[miss]
            keys = ctx.keys(mids)
            if len(cache) + len(miss) > self.CELL_CACHE or self._over(cells_n=len(cache) + len(miss)):
                cache.clear()
                _cache_budget.JSON_TERMS.clears += 1
            for k, i, key in zip(miss, mids.tolist(), keys, strict=True):
                # (b"%b" %: a copy of its own size -- orjson's bytes sit in 4 KiB allocations)
                cell = b"" if key is None else b"%b" % orjson.dumps(_json_term(key))
                out[k] = cell
                if 0 <= i < LOCAL_BASE:
                    cache[i] = cell
            self._account()
        return out
