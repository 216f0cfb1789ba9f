"""EXPLAIN: the plan of a query as JSON, optionally with what a run did.

The document (``explain_plan``) is::

    {"form": "SELECT", "path": "fast" | "general", "snapshot": sn, "analyze": bool,
     "plan": operator, ["result": {"rows": n} | {"boolean": b} | {"triples": n},
     "time_ms": total]}

and each operator ``{"operator": name, ...details, "estimated_rows": x | null,
"children": [...]}``. A BGP lists its ``patterns``, the ``order`` the planner
chose for the snapshot (indices into ``patterns``) and one entry per step
(``pattern``, ``step`` = prune / expand / scan, ``estimated_rows`` after it).
Estimates come from the cost model of :mod:`engine.plan.order`; above BGPs
they are rough (a filter keeps its input's estimate, a join of two parts
sharing a variable the larger of the two, without one their product).

With ``analyze`` the query runs first and every operator gets
``actual_rows`` (summed over its executions), ``calls`` and ``time_ms``
(wall time including its children); the steps of a BGP get ``actual_rows``
after the step when it ran vectorized (``small_program_runs`` counts its
tuple-at-a-time runs, which keep no per-step counts; ``executed_order`` is
set when the run used another order, e.g. from a differently sized seed).
On the fast path the projection,
DISTINCT, slice and BGP run fused in one program: its ``FastSelect``
operator carries the actuals (the operators inside it are marked
``"fused": true``).
"""

from __future__ import annotations

import time

from engine.exec.bgp import run_bgp
from engine.exec.evaluate import Evaluator, evaluate_query, pattern_vars, run_fast, top_k_order
from engine.kv.views import EmptyGraph, merged_view
from engine.plan.nodes import ExploreJoin, ExploreLeftJoin, PathJoin
from engine.plan.order import plan_bgp
from engine.sparql import algebra as A

EXPLAIN_VALUES = ("true", "analyze")
_STEP = {0: "prune", 1: "expand", 2: "scan"}


class AnalyzingEvaluator(Evaluator):
    """The executor, counting rows, calls and time per operator node."""

    def __init__(self, ctx, dataset):
        super().__init__(ctx, dataset)
        self.stats: dict[int, list] = {}
        self.traces: dict[int, list] = {}

    def _run_bgp(self, node, triples, seed, early=()):
        ctx = self.ctx
        trace = self.traces.setdefault(id(node), [])  # the node is pinned by its stats entry
        return run_bgp(triples, self.graph, ctx.lookup, seed=seed, max_rows=ctx.max_rows,
                       check=ctx.check_budget, plan_cache=ctx.plan_cache, cache_key=self.graph_key, trace=trace,
                       early=early)

    def eval(self, node, seed=None):
        t0 = time.perf_counter()
        res = super().eval(node, seed)
        dt = time.perf_counter() - t0
        st = self.stats.get(id(node))
        if st is None:
            st = self.stats[id(node)] = [node, 0, 0, 0.0]  # the node pins its id
        st[1] += 1
        st[2] += res.n
        st[3] += dt
        return res


def explain_plan(plan, ctx, dataset, *, fast_state=None, analyze: bool = False, max_rows: int | None = None,
                 check=None) -> dict:
    """The explain document of a plan over ``dataset``; ``fast_state`` is the
    Database's compiled fast program when the fast path runs this query."""
    q = plan.query
    doc: dict = {"form": q.form, "path": "fast" if fast_state is not None else "general",
                 "snapshot": ctx.snapshot.sn, "analyze": analyze}
    stats: dict[int, list] = {}
    traces: dict[int, list] = {}
    fused = None
    if analyze:
        t0 = time.perf_counter()
        if fast_state is not None:
            res = run_fast(plan, fast_state[2], fast_state[3], fast_state[1], max_rows or ctx.max_rows, check)
            if check is not None:
                check()
        else:
            ev = AnalyzingEvaluator(ctx, dataset)
            try:
                res = evaluate_query(q, ctx, dataset, evaluator=ev, plan=plan)
            finally:
                ctx.evaluator = None
            stats, traces = ev.stats, ev.traces
        total = time.perf_counter() - t0
        doc["time_ms"] = _ms(total)
        if res.form == "ASK":
            doc["result"] = {"boolean": bool(res.boolean)}
        elif res.form == "SELECT":
            doc["result"] = {"rows": len(res)}
        else:
            doc["result"] = {"triples": len(res)}
        if fast_state is not None:
            fused = {"calls": 1, "actual_rows": len(res) if res.form == "SELECT" else int(bool(res.boolean)),
                     "time_ms": doc["time_ms"]}
    tree = _Describer(ctx, dataset, stats, traces, analyze and fast_state is None).node(plan.root, dataset.default, "default", frozenset(), 1.0)
    if fast_state is not None:
        top = {"operator": "FastSelect",
               "program": "tuple at a time over one-vertex lookups, vectorized past a few hundred rows",
               "estimated_rows": tree.get("estimated_rows")}
        if fused is not None:
            top.update(fused)
        for n in _walk(tree):
            n["fused"] = True  # runs inside the FastSelect program: no actuals of its own
        top["children"] = [tree]
        tree = top
    doc["plan"] = tree
    return doc


def _walk(node: dict):
    yield node
    for c in node.get("children", ()):
        yield from _walk(c)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 4)


class _Describer:
    def __init__(self, ctx, dataset, stats, traces, analyzed: bool):
        self.analyzed = analyzed
        self.ctx = ctx
        self.dataset = dataset
        self.stats = stats
        self.traces = traces

    def node(self, n, graph, gname: str, bound: frozenset, rows_in: float) -> dict:
        name = type(n).__name__
        out: dict = {"operator": name}
        children: list = []
        est = None
        if isinstance(n, A.BGP):
            est = self._bgp(n, n.triples, graph, gname, bound, rows_in, out)
        elif isinstance(n, ExploreJoin):
            left = self.node(n.left, graph, gname, bound, rows_in)
            children.append(left)
            lb = bound | pattern_vars(n.left)
            est = self._bgp(n, n.bgp.triples, graph, gname, lb, _num(left.get("estimated_rows"), 1.0), out)
            if n.expr is not None:
                out["filter"] = expr_text(n.expr)
        elif isinstance(n, ExploreLeftJoin):
            left = self.node(n.left, graph, gname, bound, rows_in)
            children.append(left)
            lb = bound | pattern_vars(n.left)
            le = _num(left.get("estimated_rows"), 1.0)
            est = max(le, self._bgp(n, n.right.triples, graph, gname, lb, le, out))
            if n.expr is not None:
                out["filter"] = expr_text(n.expr)
        elif isinstance(n, PathJoin):
            left = self.node(n.left, graph, gname, bound, rows_in)
            children.append(left)
            out["path"] = f"{term_text(n.right.s)} {path_text(n.right.path)} {term_text(n.right.o)}"
            out["graph"] = gname
        elif isinstance(n, A.PathPattern):
            out["path"] = f"{term_text(n.s)} {path_text(n.path)} {term_text(n.o)}"
            out["graph"] = gname
        elif isinstance(n, A.Graph):
            if isinstance(n.name, A.Const):
                gid = self.ctx.lookup(n.name.key)
                g = self.dataset.named.get(gid) if gid >= 0 else None
                sub = g if g is not None else EmptyGraph()
                gn = n.name.key
            else:
                sub = merged_view(list(self.dataset.named.values()))
                gn = "?" + n.name.name
            out["graph"] = gn
            c = self.node(n.input, sub, gn, bound, rows_in)
            children.append(c)
            est = c.get("estimated_rows")
        elif isinstance(n, A.Values):
            out["vars"] = [v.name for v in n.vars]
            est = float(len(n.rows))
        else:
            kids = [getattr(n, f) for f in ("left", "right", "input") if hasattr(n, f)]
            for k in kids:
                children.append(self.node(k, graph, gname, bound, rows_in))
            ests = [c.get("estimated_rows") for c in children]
            est = self._combine(n, children, ests, out)
        out["estimated_rows"] = None if est is None else round(float(est), 2)
        st = self.stats.get(id(n))
        if st is not None:
            out["calls"] = st[1]
            out["actual_rows"] = st[2]
            out["time_ms"] = _ms(st[3])
        elif self.analyzed:  # not run (e.g. the right side of a join whose left side is empty)
            out["calls"] = 0
            out["actual_rows"] = 0
            out["time_ms"] = 0.0
        if children:
            out["children"] = children
        return out

    def _combine(self, n, children, ests, out):
        if isinstance(n, A.Project):
            out["vars"] = [v.name for v in n.vars]
        elif isinstance(n, A.Filter):
            out["expr"] = expr_text(n.expr)
        elif isinstance(n, A.Extend):
            out["var"] = n.var.name
            out["expr"] = expr_text(n.expr)
        elif isinstance(n, A.OrderBy):
            out["conditions"] = [("ASC(" if c.ascending else "DESC(") + expr_text(c.expr) + ")"
                                 for c in n.conditions]
        elif isinstance(n, A.Slice):
            out["offset"] = n.offset
            out["limit"] = n.limit
            if top_k_order(n) is not None:
                out["top_k"] = n.offset + n.limit  # the ORDER BY below keeps only these rows
            if ests[0] is None:
                return None
            return max(0.0, min(ests[0] - n.offset, n.limit if n.limit is not None else ests[0]))
        elif isinstance(n, A.Group):
            out["by"] = [v.name for _, v in n.by]
            out["aggregates"] = [f"{v.name} = {agg_text(a)}" for v, a in n.aggregates]
            return 1.0 if not n.by else ests[0]
        elif isinstance(n, A.LeftJoin):
            if n.expr is not None:
                out["filter"] = expr_text(n.expr)
            return ests[0]
        elif isinstance(n, A.Minus):
            return ests[0]
        elif isinstance(n, A.Union):
            return None if None in ests else ests[0] + ests[1]
        elif isinstance(n, A.Join):
            if None in ests:
                return None
            shared = pattern_vars(n.left) & pattern_vars(n.right)
            return max(ests) if shared else ests[0] * ests[1]
        elif isinstance(n, A.Service):
            out["endpoint"] = term_text(n.endpoint)
            return None
        return ests[0] if len(ests) == 1 else None

    def _bgp(self, node, triples, graph, gname, bound, rows_in, out) -> float:
        out["graph"] = gname
        out["patterns"] = [triple_text(t) for t in triples]
        bp = plan_bgp(triples, graph, self.ctx.lookup, bound, rows_in)
        b = sorted(v for v in bound if v in bp.all_vars)
        if b:
            out["bound"] = b
        if bp.resolved is None:
            out["order"] = []
            out["steps"] = []
            out["note"] = "a constant of the pattern is not in the store: no solution"
            return 0.0
        out["order"] = bp.order
        out["steps"] = [{"pattern": out["patterns"][i], "step": _STEP[c], "estimated_rows": round(float(e), 2)}
                        for i, e, c in zip(bp.order, bp.estimates, bp.classes, strict=True)]
        if getattr(graph, "cluster", None) is not None:
            _cluster_choices(graph, bp, bound, rows_in, out["steps"])
        self._step_actuals(node, out)
        return float(bp.estimates[-1]) if bp.estimates else rows_in


    def _step_actuals(self, node, out) -> None:
        """Rows after each step of the vectorized runs (summed), keyed by pattern;
        runs of the tuple-at-a-time program are only counted."""
        runs = self.traces.get(id(node))
        if not runs:
            return
        small = sum(1 for order, _ in runs if order is None)
        if small:
            out["small_program_runs"] = small
        vec = [(order, sizes) for order, sizes in runs if order is not None]
        if not vec:
            return
        after: dict[int, int] = {}
        for order, sizes in vec:
            for i, k in zip(order, sizes, strict=True):
                after[i] = after.get(i, 0) + int(k)
        for st in out["steps"]:
            st["actual_rows"] = after.get(out["patterns"].index(st["pattern"]), 0)
        executed = vec[0][0]
        if list(executed) != out["order"]:
            out["executed_order"] = list(executed)


def _num(x, default: float) -> float:
    return default if x is None else float(x)


def term_text(t) -> str:
    if isinstance(t, A.Var):
        return "?" + t.name
    if isinstance(t, A.Const):
        return t.key
    return str(t)


def triple_text(t) -> str:
    return f"{term_text(t.s)} {term_text(t.p)} {term_text(t.o)}"


def path_text(p) -> str:
    if isinstance(p, A.PathLink):
        return "<" + p.iri + ">"
    if isinstance(p, A.PathInv):
        return "^" + path_text(p.path)
    if isinstance(p, A.PathSeq):
        return f"({path_text(p.left)}/{path_text(p.right)})"
    if isinstance(p, A.PathAlt):
        return f"({path_text(p.left)}|{path_text(p.right)})"
    if isinstance(p, A.PathZeroOrMore):
        return path_text(p.path) + "*"
    if isinstance(p, A.PathOneOrMore):
        return path_text(p.path) + "+"
    if isinstance(p, A.PathZeroOrOne):
        return path_text(p.path) + "?"
    if isinstance(p, A.PathNegated):
        items = ["<" + i + ">" for i in p.forward] + ["^<" + i + ">" for i in p.inverse]
        return "!(" + "|".join(items) + ")"
    return str(p)


_INFIX = {"||", "&&", "=", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/"}


def expr_text(e) -> str:
    if isinstance(e, (A.Var, A.Const)):
        return term_text(e)
    if isinstance(e, A.Call):
        args = [expr_text(a) for a in e.args]
        if e.op in _INFIX and len(args) == 2:
            return f"({args[0]} {e.op} {args[1]})"
        if e.op in ("IN", "NOT IN") and args:
            return f"({args[0]} {e.op} ({', '.join(args[1:])}))"
        if e.op == "!" and len(args) == 1:
            return "!" + args[0]
        if e.op == "NEG" and len(args) == 1:
            return "-" + args[0]
        return f"{e.op}({', '.join(args)})"
    if isinstance(e, A.FunctionCall):
        return f"<{e.iri}>({'DISTINCT ' if e.distinct else ''}{', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, A.Exists):
        return ("NOT EXISTS" if e.negated else "EXISTS") + " {...}"
    if isinstance(e, A.Aggregate):
        return agg_text(e)
    return str(e)


def agg_text(a: A.Aggregate) -> str:
    arg = "*" if a.arg is None else expr_text(a.arg)
    return f"{a.name}({'DISTINCT ' if a.distinct else ''}{arg})"


def _cluster_choices(graph, bp, bound, rows_in: float, steps: list[dict]) -> None:
    """On a distributed store: each step's ``exec``, in-place or fork-join, as the
    executor will choose it from the estimated rows before the step
    (:mod:`engine.cluster.forkjoin`)."""
    from engine.cluster import forkjoin

    names = dict.fromkeys(v for v in bound if v in bp.all_vars)
    order = bp.order
    pos = 0
    while pos < len(order):
        rows = rows_in if pos == 0 else float(bp.estimates[pos - 1])
        run = forkjoin.plan_run(bp.resolved, order, pos, names) if rows > 1 else []
        how = forkjoin.choose(graph, bp.resolved, run, int(rows), names) if run else "in-place"
        for k in range(pos, pos + max(1, len(run))):
            steps[k]["exec"] = how
            for x in (bp.resolved[order[k]][0], bp.resolved[order[k]][2]):
                if x[0] == "v":
                    names[x[1]] = None
        pos += max(1, len(run))
