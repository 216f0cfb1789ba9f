"""``FILTER NOT EXISTS { BGP }``, ``FILTER EXISTS { BGP }`` and ``MINUS { BGP }`` on the small-window
paths (:mod:`engine.stream.tiny_gen`, :mod:`engine.stream.maint_opt`).

Why: "the posts nobody liked yet" is a stream query users write; without this it takes the
ordinary path (~1x the composite peer on windows this small).

A solution ``mu`` of the required BGP (no OPTIONAL) is kept when its group -- the patterns of
the ``{ BGP }`` with ``mu``'s values substituted, its FILTER (which may read ``mu``'s variables:
EXISTS substitutes them) -- has no match (NOT EXISTS), has one (EXISTS), or (MINUS) has no
match sharing a variable with ``mu``: MINUS over a group that shares no variable with the
required BGP removes nothing (dropped), and its FILTER reads the group's own variables only
(else not taken). The group's own variables (those the required BGP does not bind) are local:
a query reading them anywhere else (projection, another FILTER, grouping) is not taken.

``FILTER(A || EXISTS { BGP })`` / ``FILTER(A || NOT EXISTS { BGP })`` (either order; ``A`` without
EXISTS, over the required BGP's variables): the group with a guard (``sh.anti_guard``) -- the
solution is kept when ``A`` is true, else as the group decides (an error of ``A`` is ``false ||
x``'s ``x`` and ``error || false`` is an error, which FILTER drops: the same).

Generated code: after the required part's loops, per group a loop of one around the group's
loops that stops at its first match; the row continues or not. Maintained state: each group is
one more :class:`~engine.stream.maint_opt.OptState` group whose matches decide whether the
required solution has its row (one row) or none.
"""

from __future__ import annotations

from engine.plan.rewrite import bgp_of
from engine.sparql import algebra as A

__all__ = ["split", "attach", "codes", "emit"]


def _conj(expr) -> list:
    if isinstance(expr, A.Call) and expr.op == "&&" and len(expr.args) == 2:
        return _conj(expr.args[0]) + _conj(expr.args[1])
    return [expr]


def _tv(triples) -> set:
    return {t.name for tp in triples for t in (tp.s, tp.o) if isinstance(t, A.Var)}


def _group(node) -> tuple | None:
    fs: list = []
    while isinstance(node, A.Filter):
        fs += _conj(node.expr)
        node = node.input
    bgp = bgp_of(node)
    if bgp is None or not bgp.triples or not all(isinstance(tp.p, A.Const) for tp in bgp.triples):
        return None
    return list(bgp.triples), fs


def split(sh, node) -> tuple:
    """``(node below the MINUS groups, groups)``: the MINUS groups peeled off ``node`` and the
    ``[NOT] EXISTS`` conjuncts taken out of ``sh.filters``, each ``(kind, triples, FILTER
    conjuncts)``; ``(None, None)`` when one is not over a BGP."""
    groups = []
    while isinstance(node, A.Minus):
        g = _group(node.right)
        if g is None:
            return None, None
        groups.append(("minus", *g))
        node = node.left
    keep = []
    guards = {}
    for e in sh.filters:
        guard = None
        if isinstance(e, A.Call) and e.op == "||" and len(e.args) == 2:
            a, b = e.args
            if isinstance(a, A.Exists) and not _has_exists(b):
                e, guard = a, b
            elif isinstance(b, A.Exists) and not _has_exists(a):
                e, guard = b, a
        if isinstance(e, A.Exists):
            g = _group(e.pattern)
            if g is None:
                return None, None
            if guard is not None:
                guards[len(groups)] = guard
            groups.append(("not" if e.negated else "exists", *g))
        else:
            keep.append(e)
    sh.filters = keep
    sh.anti_guard = guards
    return node, groups


def _has_exists(e) -> bool:
    if isinstance(e, A.Exists):
        return True
    return isinstance(e, (A.Call, A.FunctionCall)) and any(_has_exists(x) for x in e.args)


def attach(sh, groups: list, rvars: set, expr_vars) -> bool:
    """The groups' patterns appended to ``sh.triples`` (after the required BGP) and
    ``sh.antis`` set: ``(pattern indices, FILTER or None, kind)``. False when not taken."""
    if sh.opts:
        return False
    own_all: set = set()
    out = []
    for kind, triples, fs in groups:
        gv = _tv(triples)
        if gv & (set(sh.alias) | set(sh.computed)):
            return False   # (a BIND / alias the group would read: its value, not a free variable)
        if kind == "minus":
            if not gv & rvars:
                continue   # (no shared variable: MINUS removes nothing)
            if any(not expr_vars(e) <= gv for e in fs):
                return False
        own_all |= gv - rvars
        e = None
        for x in fs:
            e = x if e is None else A.Call("&&", (e, x))
        out.append((triples, e, kind))
    # the groups' own variables are theirs: read nowhere else
    used = {sh.alias.get(n, n) for n in sh.names} | set(sh.by or ())
    used |= {x for _, x, _ in sh.aggs if x is not None}
    for e in list(sh.filters) + list(sh.having) + list(sh.computed.values()):
        used |= expr_vars(e)
    if used & own_all:
        return False
    guards = getattr(sh, "anti_guard", {})
    if any(not expr_vars(e) <= rvars for e in guards.values()) or (guards and len(out) != len(groups)):
        return False   # (a guard reads the required variables only; groups kept as they are numbered)
    antis = []
    for triples, e, kind in out:
        n0 = len(sh.triples)
        sh.triples += triples
        antis.append((list(range(n0, len(sh.triples))), e, kind))
    sh.antis = antis
    return True


def codes(gen, expr_code, expr_vars, slot) -> list | None:
    """Per group: its FILTER as ``(vars, source, constants)`` or None; None when a FILTER is not
    of the forms the generated code computes."""
    bvars = {x[1] for s, _, o in gen.pats for x in (s, o) if x[0] == "v"}
    out = []
    for g, (_, e, _) in enumerate(gen.sh.antis):
        if e is None:
            out.append(None)
            continue
        consts: list = []
        src = expr_code(e, True, lambda n: f"V[{slot(n)}]" if n in bvars else "None", consts, f"N{g}_")
        if src is None:   # (a FILTER decided over terms, if the base has them)
            ts = getattr(gen, "_term_source", None)
            src = ts(e, True, consts, f"N{g}_", bvars) if ts is not None else None
            if src is None:
                return None
        out.append((expr_vars(e) & bvars, src, consts))
    gen._aguard = {}   # group -> its guard's (vars, source, constants): the solution kept when true
    for g, e in getattr(gen.sh, "anti_guard", {}).items():
        consts = []
        src = expr_code(e, True, lambda n: f"V[{slot(n)}]" if n in bvars else "None", consts, f"NG{g}_")
        if src is None:
            ts = getattr(gen, "_term_source", None)
            src = ts(e, True, consts, f"NG{g}_", bvars) if ts is not None else None
            if src is None:
                return None
        gen._aguard[g] = (expr_vars(e) & bvars, src, consts)
    return out


def emit(gen, order: tuple, emit_line, step, state: dict, ns: dict) -> None:
    """The groups' tests after the required part's loops (bound: the required variables): per
    group a loop of one around its loops, left at the first match; the row ``continue``s
    unless kept."""
    k0 = gen.sh.n_required
    for g, (pis, _, kind) in enumerate(gen.sh.antis):
        base = state["ind"]
        emit_line(f"a{g} = False")
        guard = gen._aguard.get(g)
        if guard is not None:   # (kept when the guard is true: the group not searched)
            for ci, v in enumerate(guard[2]):
                ns[f"NG{g}_K{ci}"] = v
            emit_line(f"k{g} = {guard[1]} is True")
            emit_line(f"for _once in (() if k{g} else _ONCE):")
        else:
            emit_line("for _once in _ONCE:")
        state["ind"] += 1
        opened = []
        have = set(gen.sh.required_vars)
        for j in range(len(pis)):
            k = k0 + j
            lv = state["ind"]
            step(k, order[k][0], order[k][1], have)
            if state["ind"] > lv:
                opened.append(lv)
        code = gen._acode[g]
        if code is not None:
            for ci, v in enumerate(code[2]):
                ns[f"N{g}_K{ci}"] = v
            emit_line(f"if {code[1]} is not True: continue")
        emit_line(f"a{g} = True")
        emit_line("break")
        for lv in reversed(opened):
            state["ind"] = lv
            emit_line(f"if a{g}: break")
        state["ind"] = base
        emit_line(f"if {'not k' + str(g) + ' and ' if guard is not None else ''}{'not ' if kind == 'exists' else ''}a{g}: continue")
        k0 += len(pis)
