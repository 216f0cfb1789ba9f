"""FILTERs on the fast path: conditions a few rows can be tested by tuple at a time.

A selective query with a FILTER (``<s> ?p ?o FILTER(isIRI(?o))``) would otherwise
leave the fast path for the operator tree: numpy tables of a dozen rows, the
general expression evaluator, a term table per query. The conditions kept here
are those decided by store ids alone, never raising an error over a BGP's
solutions (every variable of the condition is bound by the BGP):

* ``isIRI`` / ``isURI`` / ``isBlank`` / ``isLiteral`` of a variable: the term's
  kind is the first byte of its key, read once per id and kept
  (:func:`engine.plan.point.kinds_kept`, one dictionary call for the misses);
* ``sameTerm`` of variables and constants, ``=`` / ``!=`` between a variable
  and an IRI constant, ``IN`` / ``NOT IN`` of IRI constants: RDF term equality
  with an IRI is term identity (a literal is never equal to an IRI, and no type
  error arises unless both sides are literals), so id equality; a constant the
  store does not hold equals no solution's term;
* ``BOUND`` of a BGP variable (always true), ``!``, ``&&``, ``||`` of those.

Anything else (comparisons of literals, string functions, arithmetic) keeps the
general path. The program (:func:`engine.exec.bgp.compile_small`) tests each
condition right after the step that binds its last variable; when the program
hands its rows to the vectorized steps the Filter nodes above the BGP are
evaluated by the general operators, so a row tested twice answers the same.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from engine.exec.bgp import SMALL_ROWS, compile_small, with_output_slots
from engine.exec.bindings import Bindings, concat
from engine.exec.functions import eval_filter, vars_of
from engine.plan.point import kinds_kept
from engine.sparql import algebra as A

_KIND_TESTS = {"ISIRI": 0, "ISURI": 0, "ISBLANK": 1, "ISLITERAL": 2}


def _ok(expr, own: set) -> bool:
    """Whether ``expr`` is in the subset above over the BGP variables ``own``."""
    if not isinstance(expr, A.Call):
        return False
    op, args = expr.op, expr.args
    if op in _KIND_TESTS or op == "BOUND":
        return len(args) == 1 and isinstance(args[0], A.Var) and args[0].name in own
    if op == "SAMETERM":
        return len(args) == 2 and all((isinstance(a, A.Var) and a.name in own) or isinstance(a, A.Const)
                                      for a in args)
    if op in ("=", "!="):
        if len(args) != 2:
            return False
        a, b = args
        if isinstance(b, A.Var):
            a, b = b, a
        return isinstance(a, A.Var) and a.name in own and isinstance(b, A.Const) and b.key.startswith("<")
    if op in ("IN", "NOT IN"):
        return (len(args) >= 1 and isinstance(args[0], A.Var) and args[0].name in own
                and all(isinstance(c, A.Const) and c.key.startswith("<") for c in args[1:]))
    if op == "!":
        return len(args) == 1 and _ok(args[0], own)
    if op in ("&&", "||"):
        return len(args) == 2 and _ok(args[0], own) and _ok(args[1], own)
    return False


def _conjuncts(expr, out: list) -> None:
    if isinstance(expr, A.Call) and expr.op == "&&" and len(expr.args) == 2:
        _conjuncts(expr.args[0], out)
        _conjuncts(expr.args[1], out)
    else:
        out.append(expr)


def row_tests(filters, bgp_vars) -> tuple | None:
    """The FILTER conditions ``filters`` (of nested Filter nodes over one BGP binding
    ``bgp_vars``) as conjuncts ``(variables, expression)``, or None when one is
    outside the subset (the general path answers)."""
    own = set(bgp_vars)
    out = []
    for f in filters:
        parts: list = []
        _conjuncts(f, parts)
        for e in parts:
            if not _ok(e, own):
                return None
            out.append((tuple(sorted(vars_of(e))), e))
    return tuple(out)


def constants(tests) -> set:
    """The term keys of the constants the conditions name."""
    out: set = set()

    def walk(e):
        if isinstance(e, A.Const):
            out.add(e.key)
        elif isinstance(e, A.Call):
            for a in e.args:
                walk(a)

    for _, e in tests:
        walk(e)
    return out


def _mask(expr, slots: dict, lookup, kinds):
    """rows -> one bool per row for ``expr`` (in the subset)."""
    op, args = expr.op, expr.args
    if op in _KIND_TESTS:
        i, want = slots[args[0].name], _KIND_TESTS[op]
        return lambda rows: [k == want for k in kinds([r[i] for r in rows])]
    if op == "BOUND":
        return lambda rows: [True] * len(rows)
    if op in ("SAMETERM", "=", "!="):
        a, b = args
        neg = op == "!="
        if isinstance(a, A.Const) and isinstance(b, A.Const):
            same = a.key == b.key
            return lambda rows: [same != neg] * len(rows)
        if isinstance(a, A.Const):
            a, b = b, a
        i = slots[a.name]
        if isinstance(b, A.Const):
            c = lookup(b.key)
            if neg:
                return lambda rows: [r[i] != c for r in rows]
            return lambda rows: [r[i] == c for r in rows]
        j = slots[b.name]
        return lambda rows: [r[i] == r[j] for r in rows]
    if op in ("IN", "NOT IN"):
        i = slots[args[0].name]
        ids = frozenset(lookup(c.key) for c in args[1:])
        if op == "IN":
            return lambda rows: [r[i] in ids for r in rows]
        return lambda rows: [r[i] not in ids for r in rows]
    if op == "!":
        f = _mask(args[0], slots, lookup, kinds)
        return lambda rows: [not x for x in f(rows)]
    f, g = _mask(args[0], slots, lookup, kinds), _mask(args[1], slots, lookup, kinds)
    if op == "&&":
        return lambda rows: [x and y for x, y in zip(f(rows), g(rows), strict=True)]
    return lambda rows: [x or y for x, y in zip(f(rows), g(rows), strict=True)]


def row_filter(expr, lookup, kinds):
    """slots (variable -> tuple position) -> (rows -> the rows ``expr`` holds for), for
    :func:`engine.exec.bgp.compile_small`'s ``tests``. ``lookup(key) -> id`` (-1: not
    in the store), ``kinds(list of ids) -> list of kinds`` (0 IRI, 1 blank, 2 literal)."""

    def make(slots: dict):
        if expr.op in _KIND_TESTS:  # (the common case in one comprehension)
            i, want = slots[expr.args[0].name], _KIND_TESTS[expr.op]
            return lambda rows: [r for r, k in zip(rows, kinds([r[i] for r in rows]), strict=True) if k == want]
        m = _mask(expr, slots, lookup, kinds)
        return lambda rows: [r for r, ok in zip(rows, m(rows), strict=True) if ok]

    return make


def compile_filtered(fast, graph, terms):
    """(program, output slots) of a fast shape with FILTER conditions (``fast.filters``)
    over ``graph`` for the term table ``terms`` (a QueryContext: its ``lookup`` and its
    dictionary's kinds), or None (the general path): :func:`compile_small` with the
    conditions as its tests."""
    d = getattr(terms, "dictionary", None)
    kinds = partial(kinds_kept, d) if d is not None else (lambda ids: terms.kinds(np.asarray(ids, dtype=np.int64)).tolist())
    tests = tuple((vs, row_filter(e, terms.lookup, kinds)) for vs, e in fast.filters)
    return with_output_slots(compile_small(fast.triples, graph, terms.lookup, (), tests), fast.names)


# ---------------------------------------------------------------- UNION of small BGPs


class UnionProgram:
    """A UNION of BGPs (each with its FILTER conditions) run tuple at a time: each
    branch's :class:`engine.exec.bgp.SmallBGP`, its rows laid out in the union's
    slots (the variables in order of first appearance; UNBOUND = -1 where a branch
    does not bind one), left branch first as the general Union's concatenation.
    SmallBGP's interface (``slots``, ``steps``, ``run``, ``finish``, ``empty``,
    ``starts_big``): ``run`` answers all of it or hands over (k = 0) when a branch
    does; ``finish`` then gives the union node's solutions by each branch's
    vectorized hand-over, its conditions applied by the general filter evaluator."""

    __slots__ = ("slots", "steps", "rtriples", "widths", "empty", "starts_big", "branches", "terms")

    def __init__(self, slots: list[str], branches: list, terms):
        self.slots = slots
        self.steps = [None]
        self.rtriples = [None]
        self.widths = [0]
        #: [(program, the branch's slot of each union slot or None, its FILTER expressions)]
        self.branches = branches
        self.empty = all(b[0].empty for b in branches)
        self.starts_big = False
        self.terms = terms

    def run(self, rows: list[tuple], limit: int) -> tuple[list[tuple], int]:
        out: list[tuple] = []
        for prog, remap, _ in self.branches:
            got, k = prog.run([()], limit)
            if k < len(prog.steps):
                if prog.starts_big:
                    self.starts_big = True
                return rows, 0
            if remap is None:
                out += got
            else:
                out += [tuple(-1 if i is None else t[i] for i in remap) for t in got]
            if len(out) > limit:
                return rows, 0
        return out, 1

    def finish(self, rows: list[tuple], k: int, graph, max_rows, check=None) -> Bindings:
        if k >= 1:
            return Bindings.from_rows(self.slots, rows)
        parts = []
        limit = SMALL_ROWS if max_rows is None else min(max_rows, SMALL_ROWS)
        for prog, _, exprs in self.branches:
            got, kk = prog.run([()], limit)
            res = prog.finish(got, kk, graph, max_rows, check)
            for e in exprs:
                if res.n:
                    res = res.mask(np.asarray(eval_filter(e, res.cols, res.n, self.terms), dtype=bool))
            parts.append(res)
        out = concat(parts)
        if out.n == 0:
            return Bindings({v: np.zeros(0, dtype=np.int64) for v in self.slots}, 0)
        return out

    def rebound(self, fn) -> UnionProgram:
        """This program with each branch's program replaced by ``fn(program)``."""
        return UnionProgram(self.slots, [(fn(p), r, e) for p, r, e in self.branches], self.terms)


def compile_union(fast, graph, terms):
    """(program, output slots) of a UNION fast shape (``fast.union``: its branches)
    over ``graph``, or None when a branch does not compile (the general path)."""
    d = getattr(terms, "dictionary", None)
    kinds = partial(kinds_kept, d) if d is not None else (lambda ids: terms.kinds(np.asarray(ids, dtype=np.int64)
                                                                                  ).tolist())
    progs = []
    slots: dict[str, int] = {}
    for br in fast.union:
        tests = tuple((vs, row_filter(e, terms.lookup, kinds)) for vs, e in br.filters)
        prog = compile_small(br.triples, graph, terms.lookup, (), tests)
        if prog is None:
            return None
        progs.append((prog, tuple(e for _, e in br.filters)))
        for v in prog.slots:
            slots.setdefault(v, len(slots))
    branches = []
    for prog, exprs in progs:
        pos = {v: i for i, v in enumerate(prog.slots)}
        remap = tuple(pos.get(v) for v in slots)
        branches.append((prog, None if remap == tuple(range(len(slots))) else remap, exprs))
    prog = UnionProgram(list(slots), branches, terms)
    if fast.names is None:
        return prog, ()
    return prog, tuple(slots.get(v) for v in fast.names)
