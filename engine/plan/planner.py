"""The plan of a query: the rewritten pattern tree and the fast-path choice.

``plan_query(query)`` is done once per parsed query (the Database caches the
plan with the parse; other callers get it memoized per query object). The
BGP step orders are chosen per snapshot (:mod:`engine.plan.order`) because
they depend on the statistics of the data the query runs on.

The fast path: a SELECT (or ASK, or a CONSTRUCT without modifiers or blank
nodes in its template) whose planned pattern is one BGP with
constant predicates (or a point lookup: one pattern with a variable predicate
and a constant end, :mod:`engine.plan.point`; or variable predicates next to a
constant subject or object, stepped through the edge index), possibly under
FILTERs decided from ids, or a UNION of such BGPs (:mod:`engine.plan.fast_tree`),
under Project / Distinct / Reduced / Slice runs as a
tuple-at-a-time program compiled once per snapshot
(:class:`engine.exec.bgp.SmallBGP`, run by :func:`engine.exec.evaluate.run_fast`):
a selective one-shot query then costs tens of microseconds in process, which
the operator tree over numpy tables (a few microseconds per numpy call on
tiny arrays) cannot reach. It applies only to the default dataset.
"""

from __future__ import annotations

from engine.plan.fast_tree import row_tests
from engine.plan.order import bgp_vars
from engine.plan.point import is_point
from engine.plan.rewrite import rewrite
from engine.sparql import algebra as A


class FastShape:
    """The fast path's view of a query: the BGP node of the planned tree, the
    projected names (None: ASK), DISTINCT / REDUCED, OFFSET and LIMIT."""

    __slots__ = ("bgp", "triples", "names", "distinct", "offset", "limit", "point", "template", "order",
                 "filters", "union", "describe", "tiny_bytes")

    def __init__(self, bgp, names, distinct, offset, limit, template=None, order=None, filters=(), union=None):
        #: the node the program answers (a BGP, or the Union node of ``union``)
        self.bgp = bgp
        #: a UNION of BGPs: its branches (:class:`Branch`), left to right; ``triples`` then
        #: lists all their patterns (the shape key adds the branches' sizes)
        self.union = union
        self.triples = bgp.triples if union is None else tuple(t for b in union for t in b.triples)
        self.names = names
        self.distinct = distinct
        self.offset = offset
        self.limit = limit
        #: FILTER conditions over the BGP's solutions that rows can be tested by tuple at a
        #: time (engine/plan/fast_tree.py); the program tests them as soon as their variables
        #: are bound, the hand-over to the general operators applies the Filter nodes above
        self.filters = filters
        #: a point lookup (one pattern, variable predicate, constant end): engine/plan/point.py
        self.point = union is None and is_point(bgp.triples) and not filters
        #: a CONSTRUCT's template over the BGP's solutions; None for SELECT / ASK
        self.template = template
        #: ORDER BY plain variables ((name, ascending), ...): the BGP runs tuple at a
        #: time, the operators above it are the general ones (None: no ORDER BY)
        self.order = order
        #: ``DESCRIBE ?v... WHERE { BGP }``: ``names`` are the described variables, whose
        #: values the program's solutions give (engine.database describes them)
        self.describe = False
        #: what a tiny run of the program may charge (engine.database._tiny_bytes, kept)
        self.tiny_bytes = None


class QueryPlan:
    """A parsed query, its planned pattern tree (``root``), the fast path when
    it qualifies, and the fast program compiled for the last snapshot it ran
    on (``state``: (snapshot, default graph, (program, slots) or None, term
    table), managed by the Database)."""

    __slots__ = ("query", "root", "fast", "state")

    def __init__(self, query: A.Query, root, fast: FastShape | None):
        self.query = query
        self.root = root
        self.fast = fast
        self.state: tuple | None = None


def fast_shape(query: A.Query, root) -> FastShape | None:
    if query.dataset is not None and (query.dataset.default or query.dataset.named):
        return None
    if query.form == "CONSTRUCT":
        # the template over a BGP of constant predicates, no modifiers; the template's blank
        # nodes are fresh per solution (engine.small_answers.construct_triples makes them)
        if (not isinstance(root, A.BGP) or not root.triples or not query.template
                or not _selective(root.triples)):
            return None
        fs = FastShape(root, None, False, 0, None, tuple(query.template))
        fs.point = False  # (a CONSTRUCT's program: compile_construct, also over one variable-predicate pattern)
        return fs
    if query.form == "DESCRIBE":
        # the resources a BGP's solutions bind: its rows as a SELECT of the described
        # variables' gives them (constants among the resources: the general path)
        if (not isinstance(root, A.BGP) or not root.triples or not query.describe
                or not all(isinstance(t, A.Var) for t in query.describe) or not _selective(root.triples)):
            return None
        names = list(dict.fromkeys(t.name for t in query.describe))
        if not set(names) <= set(bgp_vars(root.triples)):
            return None
        fs = FastShape(root, names, False, 0, None)
        fs.describe = True
        return fs
    if query.form not in ("SELECT", "ASK"):
        return None
    node = root
    offset, limit, distinct = 0, None, False
    if isinstance(node, A.Slice):
        offset, limit, node = node.offset, node.limit, node.input
    if isinstance(node, (A.Distinct, A.Reduced)):
        distinct, node = True, node.input
    names = None
    if isinstance(node, A.Project):
        names = [v.name for v in node.vars]
        node = node.input
    order = None
    if isinstance(node, A.OrderBy) and query.form == "SELECT":
        if not all(type(c.expr) is A.Var for c in node.conditions):
            return None  # computed sort keys: the general path
        order = tuple((c.expr.name, c.ascending) for c in node.conditions)
        node = node.input
    if isinstance(node, A.Union):
        if order is not None or query.form == "SELECT" and (
                names is None or names != [v.name for v in query.vars] or not names):
            return None
        if query.form == "ASK" and (names is not None or distinct or offset or limit is not None):
            return None
        branches = _branches(node)
        if branches is None:
            return None
        return FastShape(node, names, distinct, offset, limit, union=branches)
    filters = []
    while isinstance(node, A.Filter):
        filters.append(node.expr)
        node = node.input
    if not isinstance(node, A.BGP) or not node.triples:
        return None
    if query.form == "SELECT":
        if names is None or names != [v.name for v in query.vars] or not names:
            return None
    elif names is not None or distinct or offset or limit is not None:
        return None
    if not _selective(node.triples):
        return None
    if filters:
        tests = row_tests(filters, bgp_vars(node.triples))
        if tests is None:
            return None
        return FastShape(node, names, distinct, offset, limit, order=order, filters=tests)
    # (variable predicates: a graph with edge indexes runs them tuple at a time, see
    # engine.exec.bgp.compile_small; other graphs compile nothing and take the general path)
    return FastShape(node, names, distinct, offset, limit, order=order)


def _selective(triples) -> bool:
    """Whether a BGP may run tuple at a time: with constant predicates always (the
    program decides, as before); with a variable predicate only when a subject or
    object is a constant (else its first step is a scan) and no pattern repeats its
    predicate variable as its subject or object."""
    if all(isinstance(t.p, A.Const) for t in triples):
        return True
    const = False
    for t in triples:
        if isinstance(t.s, A.Const) or isinstance(t.o, A.Const):
            const = True
        if not isinstance(t.p, A.Const) and t.p in (t.s, t.o):
            return False
    return const


class Branch:
    """One branch of a UNION fast shape: a BGP and its FILTER conditions (row tests)."""

    __slots__ = ("triples", "filters")

    def __init__(self, triples, filters):
        self.triples = triples
        self.filters = filters


#: a UNION fast shape has at most this many branches
MAX_BRANCHES = 8


def _branches(node) -> tuple | None:
    """The branches of a tree of Unions whose leaves are BGPs under FILTERs of the row
    tests' subset, left to right; None otherwise."""
    out: list = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Union):
            stack += (n.right, n.left)
            continue
        filters = []
        while isinstance(n, A.Filter):
            filters.append(n.expr)
            n = n.input
        if (not isinstance(n, A.BGP) or not n.triples or not _selective(n.triples)
                or not any(isinstance(t.s, A.Const) or isinstance(t.o, A.Const) for t in n.triples)):
            return None
        tests = row_tests(filters, bgp_vars(n.triples)) if filters else ()
        if tests is None:
            return None
        out.append(Branch(n.triples, tests))
        if len(out) > MAX_BRANCHES:
            return None
    return tuple(out)


def make_plan(query: A.Query) -> QueryPlan:
    root = rewrite(query.pattern)
    return QueryPlan(query, root, fast_shape(query, root))


_PLANS: dict[int, tuple[A.Query, QueryPlan]] = {}


_PINNED: dict[int, tuple[A.Query, QueryPlan]] = {}


def pin_plan(query: A.Query) -> None:
    """Keep ``query``'s plan outside the bounded memo until :func:`unpin_plan`: a registered
    continuous query is evaluated at every instant, and with more of them registered than the
    memo holds, round-robin evaluation re-planned every one every time."""
    _PINNED[id(query)] = (query, plan_query(query))


def unpin_plan(query: A.Query) -> None:
    hit = _PINNED.get(id(query))
    if hit is not None and hit[0] is query:
        del _PINNED[id(query)]


def plan_query(query: A.Query) -> QueryPlan:
    """The plan of a parsed query, memoized per query object (callers that keep
    their parsed queries, e.g. continuous queries evaluated at every instant)."""
    hit = _PINNED.get(id(query))
    if hit is not None and hit[0] is query:
        return hit[1]
    hit = _PLANS.get(id(query))
    if hit is not None and hit[0] is query:
        return hit[1]
    out = make_plan(query)
    if len(_PLANS) >= 1024:
        _PLANS.clear()
    _PLANS[id(query)] = (query, out)  # holds the query: its id cannot be reused meanwhile
    return out
