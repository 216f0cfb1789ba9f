"""A small window's instant by Python code generated once per query shape.

Why: on windows of tens to a few hundred triples an instant of the tuple-at-a-time core
(:mod:`engine.stream.tiny`) still pays a few dozen numpy calls (match matrix, distinct pairs,
columns, the executor's operators above the BGP, the event's columns), 2-5 µs each on a woken
worker. Here a query of the form

    SELECT [DISTINCT] ?v ... | (COUNT(...) AS ?c) ...     (aliases of variables allowed)
    WHERE { BGP with constant predicates  FILTER(...) ... }
    [GROUP BY ?v ...  [HAVING (...)]]

is compiled, once per join order, into plain Python: the windows' triples are matched against
the patterns by one generated loop (an ``if`` chain on the predicates, the constant ends tested
inline) -- only the seqs new to a window since the last instant, the matches of those that left
uncounted --, the stored ``FROM`` triples of each pattern are read into dicts once per store
snapshot (a component only they match is joined once per snapshot), the BGP is joined by nested
loops over dict lookups with each FILTER conjunct tested at the first level that binds its
variables (in doubles where XPath computes in doubles), COUNTs are counted into a dict, and the
event's JSON is written from the per-variable fragment cache of the query
(:class:`~engine.stream.continuous._JsonTerms`). No numpy call but the new seqs' ``tolist``
and no operator objects.

Exact for what it takes: FILTERs of comparisons, ``+ - * /``, unary minus, ``&& || !``,
``BOUND`` over variables and numeric constants, with the promotions and errors of
:mod:`engine.stream.tiny_ops` (a value those closures do not decide -- a comparison of
non-numeric terms, a decimal quotient -- hands the instant back); projections of variables,
aliases and arithmetic (ints and doubles written as the executor writes them); ASK; up to three
OPTIONAL groups that each join the required BGP only (their own variables unbound, id -1, when
none matches); GROUP BY plain variables with ``COUNT(*)``, ``COUNT(?v)``, ``COUNT(DISTINCT ?v)``;
HAVING over the counts; SUM / AVG / MIN / MAX / SAMPLE / GROUP_CONCAT, HAVING and arithmetic
over them (:mod:`engine.stream.tiny_aggs`); ORDER BY of projected variables with LIMIT / OFFSET
(:mod:`engine.stream.tiny_order`); ``FILTER [NOT] EXISTS`` / ``MINUS`` over a BGP
(:mod:`.tiny_anti`); a UNION of BGP groups, one generated query per branch (:mod:`.tiny_union`).
Anything else (other forms and modes, dependent OPTIONALs, more than :data:`MAX_ROWS` rows or
:data:`MAX_WORK` loop steps) is not
generated or hands the instant back: the caller then takes the ordinary path
(:meth:`engine.stream.continuous.InstantEvaluator.evaluate`), unchanged.
"""

from __future__ import annotations

import operator
from collections import deque
from fractions import Fraction
from itertools import repeat

import numpy as np
import orjson

from engine.exec import serialize as _ser
from engine.exec.functions import vars_of
from engine.exec.result import QueryResult
from engine.plan.rewrite import bgp_of
from engine.sparql import algebra as A
from engine.stream import tiny_aggs as _aggs
from engine.stream import tiny_nested as _nested
from engine.stream import tiny_ops as _ops
from engine.stream import tiny_order as _order
from engine.stream import tiny_terms as _tt
from engine.stream.tiny_ops import _NONNUM, _OTHER, Undecided, _divide, _num, _num_item, _value

__all__ = ["GenQuery", "GEN_WINDOW", "taken_total"]

#: window triples up to which an instant takes the generated code
GEN_WINDOW = 1024
#: stored triples matching the patterns above which a query does not take the generated code
#: (they are read into dicts once per store snapshot)
STORED_LIMIT = 1 << 16
#: result rows (before DISTINCT / grouping) above which an instant is handed back
MAX_ROWS = 4096
#: loop steps of the join above which an instant is handed back (~0.1-0.2 µs each)
MAX_WORK = 20000
_XSD_INTEGER = "http://www.w3.org/2001/XMLSchema#integer"
_CMPS = ("=", "!=", "<", ">", "<=", ">=")
#: instants the generated code answered, all queries of the process (tests: the path is taken)
_TAKEN = [0]
#: class entries of the stored part kept across a change of the constants' ids (tests: taken)
_KEPT = [0]


def taken_total() -> int:
    """Instants answered by generated code (:class:`GenQuery`), all queries of the process."""
    return _TAKEN[0]


#: compiled generated source, all queries of the process: queries of one shape write the same
#: source (their constants are globals of their own namespaces), so 1,000 registrations of one
#: template compile once (a compile is ~0.5 ms; executing the code object per query ~µs)
_CODES: dict = {}
_CODES_MAX = 512


def code_of(src: str, name: str):
    """``src`` compiled (kept per source text)."""
    code = _CODES.get(src)
    if code is None:
        if len(_CODES) >= _CODES_MAX:
            _CODES.clear()
        code = _CODES[src] = compile(src, name, "exec")
    return code


class _Hand(Exception):
    """The instant leaves the generated code (too many rows or steps)."""


# ---------------------------------------------------------------- FILTER helpers (three-valued)
# values: a number (int, Fraction, float), None (an error or unbound), _NONNUM / _OTHER (a term
# the closures of tiny_ops do not compare: the instant is handed back, as they do)

def _arith(fn):
    def f(a, b):
        if a is _OTHER or b is _OTHER:
            raise Undecided
        if a is None or b is None or a is _NONNUM or b is _NONNUM:
            return None
        return fn(*_num(a, b))
    return f


_ADD = _arith(operator.add)
_SUB = _arith(operator.sub)
_MUL = _arith(operator.mul)


def _DIV(a, b):
    if a is _OTHER or b is _OTHER:
        raise Undecided
    if a is None or b is None or a is _NONNUM or b is _NONNUM:
        return None
    return _divide(a, b)


def _NEG(a):
    if a is _OTHER:
        raise Undecided
    return None if a is None or a is _NONNUM else -a


def _cmp(fn):
    def f(a, b):
        if a is None or b is None:
            return None
        if a is _NONNUM or b is _NONNUM or a is _OTHER or b is _OTHER:
            raise Undecided
        return fn(*_num(a, b))
    return f


_CMP_FN = {"=": _cmp(operator.eq), "!=": _cmp(operator.ne), "<": _cmp(operator.lt),
           ">": _cmp(operator.gt), "<=": _cmp(operator.le), ">=": _cmp(operator.ge)}


def _CV(v):
    """A computed projection's value: an int or a double (as the executor writes them), None
    for an error (unbound); a decimal's canonical form is the executor's: handed back."""
    t = type(v)
    if t is int or t is float or t is str or v is None:   # (str: a term's key, tiny_terms)
        return v
    if v is _NONNUM:
        return None
    raise Undecided


def _AND(a, b):
    return False if a is False or b is False else True if a is True and b is True else None


def _OR(a, b):
    return True if a is True or b is True else False if a is False and b is False else None


def _NOT(a):
    return None if a is None else not a


class _Values(dict):
    """Term id -> numeric value (:func:`engine.stream.tiny_ops._value`), decoded on first use."""

    __slots__ = ("dictionary", "doubles")

    def __init__(self, dictionary):
        super().__init__()
        self.dictionary = dictionary
        self.doubles = _DoubleValues(self)

    def __missing__(self, i):
        v = _value(self.dictionary.key(i)) if i >= 0 else None
        if len(self) > 1 << 18:
            self.clear()
        self[i] = v
        return v


_HELPERS = {"_ADD": _ADD, "_SUB": _SUB, "_MUL": _MUL, "_DIV": _DIV, "_NEG": _NEG, "_AND": _AND,
            "_OR": _OR, "_NOT": _NOT, "_Hand": _Hand, "_CV": _CV, "_ONCE": (0,), "Undecided": Undecided,
            **{f"_C{k}": f for k, f in enumerate(_CMP_FN.values())}}
_CMP_NAME = {op: f"_C{k}" for k, op in enumerate(_CMP_FN)}


def _expr_code(expr, boolean: bool, var_code, consts: list, prefix: str) -> str | None:
    """Python source of ``expr`` over the helpers above; ``var_code(name)`` gives a variable's
    value's source (None: unbound). None when the expression is not of the forms taken."""
    if isinstance(expr, A.Var):
        if boolean:
            return None
        return var_code(expr.name)
    if isinstance(expr, A.Const):
        if boolean:
            return None
        v = _value(expr.key)
        if v is None or v is _NONNUM or v is _OTHER:
            return None
        consts.append(v)
        return f"{prefix}K{len(consts) - 1}"
    if not isinstance(expr, A.Call):
        return None
    op, args = expr.op, expr.args
    sub = [_expr_code(a, op in ("&&", "||", "!"), var_code, consts, prefix)
           for a in args] if op != "BOUND" else []
    if any(s is None for s in sub):
        return None
    if boolean:
        if op in ("&&", "||") and len(args) == 2:
            return f"{'_AND' if op == '&&' else '_OR'}({sub[0]}, {sub[1]})"
        if op == "!" and len(args) == 1:
            return f"_NOT({sub[0]})"
        if op == "BOUND" and len(args) == 1 and isinstance(args[0], A.Var):
            vc = var_code(args[0].name)
            if vc == "None":
                return "False"
            # an id (an OPTIONAL's variable may be unbound: -1); a count is always bound
            return f"({vc[2:-1]} >= 0)" if vc.startswith("V[") else "True"
        if op in _CMPS and len(args) == 2:
            return f"{_CMP_NAME[op]}({sub[0]}, {sub[1]})"
        return None
    if op in ("+", "-", "*", "/") and len(args) == 2:
        fn = {"+": "_ADD", "-": "_SUB", "*": "_MUL", "/": "_DIV"}[op]
        return f"{fn}({sub[0]}, {sub[1]})"
    if op == "NEG" and len(args) == 1:
        return f"_NEG({sub[0]})"
    if op == "POS" and len(args) == 1:
        return sub[0]
    return None


def _fast_code(expr, prefix: str, ks, consts: list) -> tuple | None:
    """``(source, is-double source, condition source)`` of a FILTER (sub-)expression computed
    in doubles: the variables' values are read as ``k_<var>`` = (the number as a double, whether
    it is an ``xsd:double``) (:class:`_DoubleValues`). Where the condition holds (the row's
    values make every operator a double operation in XPath: an operand is a double), XPath
    computes in IEEE doubles as Python's floats do, the other operand cast to its nearest double
    (a division by zero raises ``ZeroDivisionError``: the row takes the general source). ``ks``
    numbers the constants in the order :func:`_expr_code` did. None when not of these forms."""
    if isinstance(expr, A.Var):
        k = f"k_{_ident(expr.name)}"
        return f"{k}[0]", f"{k}[1]", "True"
    if isinstance(expr, A.Const):
        j = next(ks)
        return f"{prefix}KF{j}", ("True" if type(consts[j]) is float else "False"), "True"
    if not isinstance(expr, A.Call):
        return None
    op, args = expr.op, expr.args
    if op == "BOUND":
        return "True", "False", "True"
    if not any(_expr_vars(a) for a in args) and op not in ("&&", "||", "!"):
        return None   # a constant sub-expression: exact in XPath (the general source)
    sub = [_fast_code(a, prefix, ks, consts) for a in args]
    if any(x is None for x in sub):
        return None
    if op in ("&&", "||") and len(sub) == 2:
        return (f"({sub[0][0]} {'and' if op == '&&' else 'or'} {sub[1][0]})", "False",
                _all(sub[0][2], sub[1][2]))
    if op == "!" and len(sub) == 1:
        return f"(not {sub[0][0]})", "False", sub[0][2]
    if len(sub) == 2 and (op in _CMPS or op in ("+", "-", "*", "/")):
        cond = _all(sub[0][2], sub[1][2], _any(sub[0][1], sub[1][1]))
        sym = "==" if op == "=" else op
        return f"({sub[0][0]} {sym} {sub[1][0]})", "True", cond
    if op == "NEG" and len(sub) == 1:
        return f"(-{sub[0][0]})", "True", _all(sub[0][2], sub[0][1])
    if op == "POS" and len(sub) == 1:
        return sub[0]
    return None


def _all(*xs: str) -> str:
    """The source of the conjunction of conditions (sources), constants folded, repeats once."""
    parts: list[str] = []
    for x in xs:
        if x == "False":
            return "False"
        for p in x.split(" and ") if x != "True" else ():
            if p not in parts:
                parts.append(p)
    return " and ".join(parts) or "True"


def _any(a: str, b: str) -> str:
    if "True" in (a, b):
        return "True"
    if a == "False":
        return b
    if b == "False":
        return a
    return f"({a} or {b})"


def _having_fast(expr, counts: set, consts: list, prefix: str) -> str | None:
    """Python source of a HAVING made of ``= != < > <= >=`` between counts and numeric
    constants joined by ``&& || !``: a count is always a bound integer, so no operand is an
    error; an integer or decimal constant compares exactly (ints, Fractions), a double one
    against the count cast to a double, as XPath promotes. None when not of these forms."""
    if not isinstance(expr, A.Call):
        return None
    op, args = expr.op, expr.args
    if op in ("&&", "||") and len(args) == 2:
        a, b = (_having_fast(x, counts, consts, prefix) for x in args)
        return None if a is None or b is None else f"({a} {'and' if op == '&&' else 'or'} {b})"
    if op == "!" and len(args) == 1:
        a = _having_fast(args[0], counts, consts, prefix)
        return None if a is None else f"(not {a})"
    if op not in _CMPS or len(args) != 2:
        return None
    side = []
    dbl = False
    for x in args:
        if isinstance(x, A.Var) and x.name in counts:
            side.append(f"N_{_ident(x.name)}")
        elif isinstance(x, A.Const):
            v = _value(x.key)
            if type(v) not in (int, Fraction, float) or (type(v) is float and _as_float(v) is None):
                return None
            dbl = dbl or type(v) is float
            consts.append(v)
            side.append(f"{prefix}K{len(consts) - 1}")
        else:
            return None
    if dbl:
        side = [f"float({x})" if x.startswith("N_") else x for x in side]
    return f"({side[0]} {'==' if op == '=' else op} {side[1]})"


def _as_float(v) -> float | None:
    try:
        return float(v)
    except (OverflowError, TypeError, ValueError):
        return None


def _emit_filter(emit, fv: set, src: str, fast: tuple | None, alt: str | None = None) -> None:
    """A FILTER conjunct at the current loop level: rows failing it ``continue``. ``alt``: the
    conjunct over terms (:mod:`engine.stream.tiny_terms`), for a row whose values the numeric
    source does not decide (it raises :class:`Undecided`: a string, an IRI, a decimal quotient)."""
    def general(ind: str) -> None:
        if alt is None:
            emit(f"{ind}ok = {src} is True")
            return
        emit(f"{ind}try:")
        emit(f"{ind}    ok = {src} is True")
        emit(f"{ind}except Undecided:")
        emit(f"{ind}    ok = {alt} is True")

    if fast is None or fast[2] == "False":   # (False: no row computes in doubles only)
        if alt is None:
            emit(f"if {src} is not True: continue")
            return
        general("")
        emit("if not ok: continue")
        return
    names = sorted(fv)   # (their k_<var> are read where the variables are bound: _compile_join)
    cond = _all(*[f"k_{_ident(n)}[0] is not None" for n in names], fast[2])
    emit(f"if {cond}:")
    emit("    try:")
    emit(f"        ok = {fast[0]}")
    emit("    except ZeroDivisionError:")
    general("        ")
    emit("else:")
    general("    ")
    emit("if not ok: continue")


class _DoubleValues(dict):
    """Term id -> (its number as a double or None, whether it is an ``xsd:double``)."""

    __slots__ = ("values",)

    def __init__(self, values: _Values):
        super().__init__()
        self.values = values

    def __missing__(self, i):
        v = self.values[i]
        t = type(v)
        if t is float:
            got = (v, True)
        elif t is int or t is Fraction:
            got = (_as_float(v), False)
        else:
            got = (None, False)
        if len(self) > 1 << 18:
            self.clear()
        self[i] = got
        return got


def _conjuncts(expr) -> list:
    if isinstance(expr, A.Call) and expr.op == "&&" and len(expr.args) == 2:
        return _conjuncts(expr.args[0]) + _conjuncts(expr.args[1])
    return [expr]


def _substitute(expr, alias: dict):
    """``expr`` with the aliased variables replaced by what they rename."""
    if not alias:
        return expr
    if isinstance(expr, A.Var):
        return A.Var(alias[expr.name]) if expr.name in alias else expr
    if isinstance(expr, A.Call):
        return A.Call(expr.op, tuple(_substitute(a, alias) for a in expr.args))
    return expr


def _expr_vars(expr) -> set:
    return set(vars_of(expr))


# ---------------------------------------------------------------- the query's shape


class _Shape:
    """What a query is made of, when it is of the form taken (:meth:`GenQuery.of`)."""

    def __init__(self):
        self.names: list[str] = []        # projected variables, in order
        self.distinct = False
        self.triples: list = []           # TriplePatterns (constant predicates)
        self.filters: list = []           # FILTER conjuncts over the BGP's variables
        self.by: list[str] | None = None  # GROUP BY variables (None: no grouping)
        self.aggs: list = []              # (output var, counted var or None, distinct)
        self.agg_kinds: dict = {}         # aggregate position -> (SUM/AVG/MIN/..., separator): not COUNTs
        self.agg_exprs: dict = {}         # aggregate position -> its argument expression (tiny_aggs)
        self.by_exprs: dict = {}          # group key -> its expression (GROUP BY (expr AS ?k), tiny_aggs)
        self.having: list = []            # HAVING conjuncts over by / aggregate variables
        self.alias: dict[str, str] = {}   # projected name -> the variable it renames
        self.computed: dict = {}          # projected name -> its arithmetic expression
        self.ask = False                  # ASK: a boolean, no rows
        self.opts: list = []              # OPTIONAL groups: (their pattern indices, their FILTER or None)
        self.n_required = 0               # the required BGP's patterns come first
        self.required_vars: set = set()
        self.branches: list | None = None  # UNION: per branch (patterns, FILTERs, variables) (tiny_union)
        self.antis: list = []             # [NOT] EXISTS / MINUS groups: (pattern indices, FILTER, kind) (tiny_anti)
        self.opt_parent: dict = {}        # nested OPTIONAL group -> the group it is nested in (tiny_nested)


def _shape(query: A.Query, loose: bool = False) -> _Shape | None:
    """``loose``: projected variables the BGP does not bind are unbound (-1: a UNION's branch)."""
    if query.form not in ("SELECT", "ASK"):
        return None
    sh = _Shape()
    node = query.pattern
    if query.form == "ASK":   # whether the BGP has a solution passing the FILTERs: the first one ends it
        sh.ask = True
        while isinstance(node, A.Filter):
            sh.filters += _conjuncts(node.expr)
            node = node.input
    else:
        if isinstance(node, A.Distinct):
            sh.distinct = True
            node = node.input
        if not isinstance(node, A.Project):
            return None
        sh.names = [v.name for v in node.vars]
        node = node.input
    chain: list = []   # the Extends (aliases of variables) and FILTERs above a GROUP BY or the BGP
    while not sh.ask and isinstance(node, (A.Extend, A.Filter)):
        chain.append(node)
        node = node.input
    # bottom-up: a FILTER sees the aliases made below it (an alias made above it is unbound there)
    alias: dict[str, str] = {}
    computed: dict[str, object] = {}   # SELECT (expr AS ?v) / BIND: projected only
    above: list = []
    for op in reversed(chain):
        if isinstance(op, A.Extend):
            if op.var.name in alias or op.var.name in computed:
                return None
            if isinstance(op.expr, A.Var):
                if op.expr.name in computed:   # a copy of a BIND's value: its expression again
                    computed[op.var.name] = computed[op.expr.name]
                    continue
                alias[op.var.name] = alias.get(op.expr.name, op.expr.name)
            else:
                e = op.expr
                if _expr_vars(e) & (set(computed) | set(alias)):
                    # a BIND over an earlier one's variable (or an alias): that expression in its
                    # place, over terms (an unbound variable and its expression's error are one)
                    e = _tt.inline(_substitute(e, dict(alias)), computed)
                    if not _tt.term_expr(e):
                        return None
                computed[op.var.name] = e
        else:
            if _expr_vars(op.expr) & set(computed):
                # a BIND's variable in a FILTER: the expression in its place (an error leaves the
                # variable unbound, and an unbound variable is an error where the expression's
                # error is: the same value for every operator, BOUND included), over terms
                e = _tt.inline(op.expr, computed)
                if not _tt.term_expr(e):
                    return None
                above += [_substitute(c, dict(alias)) for c in _conjuncts(e)]
                continue
            above += [_substitute(c, dict(alias)) for c in _conjuncts(op.expr)]
    sh.alias = alias
    sh.computed = computed
    if sh.ask:
        pass
    elif isinstance(node, A.Group):
        group = _ops.CountGroup.of(node) or _aggs.AggGroup.of(node)   # (tiny_aggs: SUM, AVG, MIN, ...)
        if group is None:
            return None
        sh.by, sh.aggs, sh.having = list(group.by), list(group.aggs), above
        sh.agg_kinds = dict(getattr(group, "kinds", {}))
        sh.agg_exprs = dict(getattr(group, "exprs", {}))
        sh.by_exprs = dict(getattr(group, "byexprs", {}))
        node = _aggs.below_group(sh, node.input, _conjuncts)   # (FILTERs; BINDs read by aggregates)
        if node is None:
            return None
    else:
        sh.filters = above
    if sh.ask and (sh.computed or sh.alias):
        return None
    from engine.stream import tiny_anti as _anti  # (it builds on this module's shapes)
    node, antis = _anti.split(sh, node)   # FILTER [NOT] EXISTS / MINUS over a BGP
    if node is None:
        return None
    # OPTIONAL { BGP [FILTER] } groups over the required BGP (LeftJoins, innermost first)
    opts = []
    while isinstance(node, A.LeftJoin):
        right = node.right
        kids = []   # OPTIONAL { R OPTIONAL { K } ... }: nested groups (tiny_nested checks them below)
        while isinstance(right, A.LeftJoin):
            kb = bgp_of(right.right)
            if kb is None or not kb.triples or not all(isinstance(tp.p, A.Const) for tp in kb.triples):
                return None
            kids.append((list(kb.triples), right.expr))
            right = right.left
        rb = bgp_of(right)
        if rb is None or not rb.triples or not all(isinstance(tp.p, A.Const) for tp in rb.triples):
            return None
        opts.append((list(rb.triples), node.expr, kids[::-1]))
        node = node.left
    opts.reverse()
    flat: list = []   # each group, then the groups nested in it (their parent: sh.opt_parent)
    for trs, e, kids in opts:
        parent = len(flat)
        flat.append((trs, e))
        for kid in kids:
            sh.opt_parent[len(flat)] = parent
            flat.append(kid)
    opts = flat
    bgp = bgp_of(node)
    if bgp is None or not bgp.triples:
        return None
    if not all(isinstance(tp.p, A.Const) for tp in bgp.triples):
        return None
    sh.triples = list(bgp.triples)
    rvars = {t.name for tp in sh.triples for t in (tp.s, tp.o) if isinstance(t, A.Var)}
    if opts:
        # each OPTIONAL joins the required part only: its other variables are its own (then the
        # groups are independent left joins); at most 3 (the emission is written per outcome);
        # no grouping over possibly unbound variables
        if len(opts) > 3 or sh.ask or (sh.by is not None and not _aggs.optional_group(sh, rvars)):
            return None
        seen: set = set()
        for g, (trs, _) in enumerate(opts):
            if g in sh.opt_parent:   # (a nested group: its own checks, tiny_nested)
                continue
            own = {t.name for tp in trs for t in (tp.s, tp.o) if isinstance(t, A.Var)} - rvars
            if own & seen or not own:
                return None
            seen |= own
        if sh.opt_parent and not _nested.nested_ok(sh, opts, rvars, seen, _expr_vars):
            return None
        sh.opts = [(list(range(len(sh.triples) + sum(len(t) for t, _ in opts[:g]),
                               len(sh.triples) + sum(len(t) for t, _ in opts[:g + 1]))), e)
                   for g, (_, e) in enumerate(opts)]
        sh.n_required = len(sh.triples)
        sh.triples += [tp for trs, _ in opts for tp in trs]
    else:
        sh.n_required = len(sh.triples)
    if antis and not _anti.attach(sh, antis, rvars, _expr_vars):
        return None
    bvars = {t.name for tp in sh.triples for t in (tp.s, tp.o) if isinstance(t, A.Var)}
    sh.required_vars = rvars
    if sh.computed and ((not _aggs.computed_ok(sh)) if sh.by is not None else
                        (sh.distinct and not all(map(_tt.term_expr, sh.computed.values())))):
        return None   # (a computed double's NaN is one term, not one value per row: DISTINCT's; over
        # terms (tiny_terms) the values are their keys, equal exactly when the terms are; over a
        # group's aggregates: tiny_aggs)
    if sh.by is not None:
        outs = set(sh.by) | {a for a, _, _ in sh.aggs}
        if not set(sh.by) - set(sh.by_exprs) <= bvars or any(x is not None and x not in bvars and j not in sh.agg_exprs
                                          for j, (_, x, _) in enumerate(sh.aggs)):
            return None
        if any(not _expr_vars(e) <= bvars for e in [*sh.agg_exprs.values(), *sh.by_exprs.values()]):
            return None
        if any(_expr_vars(e) & set(sh.by_exprs) for e in [*sh.having, *sh.computed.values()]):
            return None   # (an expression's key is no term id: HAVING / projections read ids)
        if any(alias.get(n, n) not in outs and n not in sh.computed for n in sh.names):
            return None
        if any(not _expr_vars(e) <= outs or not _aggs.bound_ok(e, sh) for e in sh.having):
            return None
    elif not loose and any(alias.get(n, n) not in bvars and n not in sh.computed for n in sh.names):
        return None
    return sh


# ---------------------------------------------------------------- the generated code


def class_ids(classes, dictionary) -> tuple[list[tuple], bool]:
    """(the (s, p, o) ids of each pattern class's constants -- None where the class has a
    variable, -2 where the term is absent, matching nothing --, whether one is absent):
    what a query's generated code and its maintained state look up (reads only)."""
    out = []
    absent = False
    for cs, p, co, _ in classes:
        ids = []
        for k in (cs, p, co):
            if k is None:
                ids.append(None)
                continue
            if k.startswith("<urn:jindou:closure:"):   # (tiny_closure's pseudo predicate: no triple)
                ids.append(-3)
                continue
            i = int(dictionary.lookup(k))
            if i < 0:
                absent = True
                i = -2
            ids.append(i)
        out.append(tuple(ids))
    return out, absent


class GenQuery:
    """One registered query's generated instant: the matcher, the join per order, the renderer."""

    #: instants in a row a join order is kept before the sizes are weighed again
    REPLAN = 16
    #: a change of the constants' ids keeps the stored entries of the classes it does not
    #: touch (:meth:`_stored`; tests compare with it off)
    KEEP_CLASSES = True
    #: a grouped join returns its groups and distinct values (a UNION's branch, tiny_union)
    raw = False
    #: ORDER BY / OFFSET / LIMIT of the rows (tiny_order; a class default: subclasses have none)
    order = None

    def __init__(self, sh: _Shape):
        self.sh = sh
        pats = []
        for tp in sh.triples:
            s = ("v", tp.s.name) if isinstance(tp.s, A.Var) else ("c", tp.s.key)
            o = ("v", tp.o.name) if isinstance(tp.o, A.Var) else ("c", tp.o.key)
            pats.append((s, tp.p.key, o))
        self.pats = pats
        # patterns with the same constants match the same triples: one match set per class
        classes: dict = {}
        self.cls = []
        for s, p, o in pats:
            same = s[0] == "v" and o[0] == "v" and s[1] == o[1]
            key = (s[1] if s[0] == "c" else None, p, o[1] if o[0] == "c" else None, same)
            self.cls.append(classes.setdefault(key, len(classes)))
        self.classes = list(classes)
        self._ids: tuple | None = None     # (dictionary, its size, resolved constant ids, any absent)
        self._match = None
        self._ns: dict = {}
        self._sidx: tuple | None = None    # (snapshot key, per class [pair dict, s -> [o], o -> [s], pairs])
        self._rkey = None                  # the stored part's key the component cache belongs to
        self._rcache: dict = {}            # (order, component) -> its bindings from stored triples
        self._win: tuple | None = None     # (constants' ids, per window [store, g0, g1, log], per class counts)
        self._joins: dict = {}             # order -> compiled join
        self._order: tuple | None = None
        self._keep = 0
        self._fcode: list | None = None    # per filter conjunct: (its vars, source) or None
        self._count_frag: dict[int, bytes] = {}
        self._kinds: list | None = None
        self.order: _order.Order | None = None
        self.usable = self._filters_ok()

    @staticmethod
    def of(query: A.Query, mode: str, cls=None) -> GenQuery | None:
        """The generated instant of ``query`` if its form is taken (SELECT, ASK; see the
        module), else None. ISTREAM / DSTREAM: the rows go to the ordinary difference
        (:meth:`InstantEvaluator.render` takes it from :meth:`result`), so the events are the
        ordinary path's."""
        if mode not in ("RSTREAM", "ISTREAM", "DSTREAM"):
            return None
        if query.base and _tt.reads_base(query.pattern):
            return None   # (IRI() of a relative string resolves against the BASE: tiny_terms takes none)
        construct = query.form == "CONSTRUCT"
        if construct:   # as SELECT of the template's variables (engine.stream.gen_construct)
            from engine.stream.gen_construct import select_of  # noqa: PLC0415
            query = select_of(query)
            if query is None:
                return None
        from engine.stream.tiny_values import rewrite as _values_rewrite  # noqa: PLC0415
        query = _values_rewrite(query)   # (VALUES joined with the BGP: a FILTER, tiny_values)
        got = _order.strip(query)   # (ORDER BY / LIMIT / OFFSET: tiny_order, over the rows)
        if got is None or (got[1] is not None and (mode != "RSTREAM" or construct)):
            return None   # (ordered / limited rows: RSTREAM SELECT only)
        sh = _shape(got[0])
        if construct and sh is not None and sh.computed:   # (the template takes term ids only)
            return None
        if sh is None:
            if mode != "RSTREAM" or construct or cls is not None:   # (a UNION's rows: RSTREAM SELECT only)
                return None
            from engine.stream.tiny_union import union_of  # (it builds on this module)
            u = union_of(got[0])   # (ORDER BY / LIMIT over the branches' rows: after them)
            if u is not None:
                u.order = got[1]
            return u
        g = (cls or GenQuery)(sh)   # (cls: tiny_closure.ClosureGen)
        g.order = got[1]
        return g if g.usable else None

    # -- set-up ---------------------------------------------------------------
    def _filters_ok(self) -> bool:
        bvars = {x[1] for s, _, o in self.pats for x in (s, o) if x[0] == "v"}
        self._fcode = []
        self._tfns: list = []   # the expressions decided over terms (tiny_terms.TermFn)
        self._falt: dict = {}   # filter conjunct -> its source over terms, where the numeric one may not decide
        for e in self.sh.filters:
            consts: list = []
            src = _expr_code(e, True, lambda n: f"V[{_slot(n)}]" if n in bvars else "None", consts,
                             f"F{len(self._fcode)}_")
            fv = _expr_vars(e)
            fast = None
            if src is not None:
                fast = _fast_code(e, f"F{len(self._fcode)}_", iter(range(len(consts))), consts) if fv <= bvars else None
                if fast is not None and any(_as_float(v) is None for v in consts):
                    fast = None
            alt = self._term_source(e, True, consts, f"F{len(self._fcode)}_", bvars)
            if src is None:
                if alt is None:
                    return False
                src, alt = alt, None
            if alt is not None:
                self._falt[len(self._fcode)] = alt
            self._fcode.append((fv & bvars, src, consts, fast))
        self._ocode = []   # per OPTIONAL: its FILTER as (vars, source, constants, fast source) or None
        for g, (_, e) in enumerate(self.sh.opts):
            if e is None:
                self._ocode.append(None)
                continue
            consts = []
            src = _expr_code(e, True, lambda n: f"V[{_slot(n)}]" if n in bvars else "None", consts, f"O{g}_")
            fv = _expr_vars(e)
            fast = None
            if src is not None:
                fast = _fast_code(e, f"O{g}_", iter(range(len(consts))), consts) if fv <= bvars else None
                if fast is not None and any(_as_float(v) is None for v in consts):
                    fast = None
            alt = self._term_source(e, True, consts, f"O{g}_", bvars)
            if src is None:
                if alt is None:
                    return False
                src, alt = alt, None
            if alt is not None:
                self._falt[("O", g)] = alt
            self._ocode.append((fv & bvars, src, consts, fast))
        if self.sh.antis:   # (tiny_anti)
            from engine.stream import tiny_anti as _anti
            self._acode = _anti.codes(self, _expr_code, _expr_vars, _slot)
            if self._acode is None:
                return False
        self._ccode = {}
        self._calt: dict = {}   # computed name -> its source over terms, where the numeric one may not decide
        grouped = self.sh.by is not None   # (expressions over the groups' aggregates: tiny_aggs)
        aggv = {a for a, _, _ in self.sh.aggs}
        self._gterm: dict = {}   # computed name -> its source over the group's key terms
        for n, e in self.sh.computed.items():
            consts = []
            if grouped and _aggs.grouped_expr(e) is None:   # (over the group's keys only, as terms:
                # ``(STR(?s) AS ?name)``, tiny_aggs.computed_ok; the tail writes its key)
                src = self._term_source(e, False, consts, f"E{len(self._ccode)}_", set(self.sh.by),
                                        lambda n: f"G_{_ident(n)}")
                self._gterm[n] = src
                alt = None
            elif grouped:   # (checked here; the tail computes them by tiny_aggs.grouped_expr)
                src = _expr_code(e, False, lambda n: f"N_{_ident(n)}" if n in aggv else f"V[G_{_ident(n)}]",
                                 consts, f"E{len(self._ccode)}_")
                alt = None
            else:
                # (DISTINCT: the values over terms, whose keys are equal exactly when the terms are)
                src = None if self.sh.distinct else _expr_code(
                    e, False, lambda n: f"V[{_slot(n)}]" if n in bvars else "None", consts, f"E{len(self._ccode)}_")
                alt = self._term_source(e, False, consts, f"E{len(self._ccode)}_", bvars)
            if src is None:
                if alt is None:
                    return False
                src, alt = alt, None
            if alt is not None:
                self._calt[n] = alt
            self._ccode[n] = (src, consts)
        self._bycode = []   # group keys' expressions: (name, source over terms, constants)
        for k, (n, e) in enumerate(self.sh.by_exprs.items()):
            consts = []
            src = self._term_source(e, False, consts, f"B{k}_", bvars)
            if src is None:
                return False
            self._bycode.append((n, src, consts))
        self._aggcode = {}   # aggregate position -> its argument's source over terms (tiny_aggs)
        for j, e in self.sh.agg_exprs.items():
            consts = []
            src = self._term_source(e, False, consts, f"A{j}_", bvars)
            if src is None:
                return False
            self._aggcode[j] = (src, consts)
        self._hcode = []
        outs = set(self.sh.by or ()) | {a for a, _, _ in self.sh.aggs}
        counts = {a for a, _, _ in self.sh.aggs}
        only = {a for j, (a, _, _) in enumerate(self.sh.aggs) if j not in self.sh.agg_kinds}   # COUNTs
        for e in self.sh.having:
            consts = []
            fast = _having_fast(e, only, consts, f"H{len(self._hcode)}_")
            if fast is not None:
                self._hcode.append((fast, consts))
                continue
            consts = []
            src = _expr_code(e, True, lambda n: (f"N_{_ident(n)}" if n in counts else f"V[G_{_ident(n)}]")
                             if n in outs else "None", consts, f"H{len(self._hcode)}_")
            if src is None and not _expr_vars(e) & counts:   # over the grouping terms only
                consts = []
                src = self._term_source(e, True, consts, f"H{len(self._hcode)}_", set(self.sh.by or ()),
                                        lambda n: f"G_{_ident(n)}")
            if src is None:
                return False
            self._hcode.append((src, consts))
        return True

    def by_lines(self, ns: dict) -> list[str]:
        """Statements assigning the slots of group keys that are expressions (their values'
        term keys; an error -- an unbound key -- hands back), their constants put in ``ns``."""
        out = []
        for k, (n, src, consts) in enumerate(self._bycode):
            for ci, v in enumerate(consts):
                ns[f"B{k}_K{ci}"] = v
            out += [f"{_slot(n)} = {src}", f"if {_slot(n)} is None: raise Undecided"]
        return out

    def agg_arg_lines(self, j: int, ns: dict) -> list[str]:
        """Statements assigning aggregate ``j``'s argument slot when it is an expression (its
        value's term key; None for an error), its constants put in ``ns``; none otherwise."""
        got = self._aggcode.get(j)
        if got is None:
            return []
        src, consts = got
        for ci, v in enumerate(consts):
            ns[f"A{j}_K{ci}"] = v
        return [f"{_slot(self.sh.aggs[j][1])} = {src}"]

    def _term_source(self, e, boolean: bool, consts: list, prefix: str, bvars: set, slot=None) -> str | None:
        """The source of ``e`` decided over terms (:class:`~engine.stream.tiny_terms.TermFn`,
        appended to ``consts``: a global of the generated code), or None when not of its forms;
        ``slot(var)``: the source of a variable's term id."""
        if not _tt.term_expr(e):
            return None
        fn = _tt.TermFn(e, sorted(_expr_vars(e)), boolean)
        self._tfns.append(fn)
        consts.append(fn)
        slot = slot or _slot
        return _tt.source(fn, f"{prefix}K{len(consts) - 1}", lambda n: slot(n) if n in bvars else "None")

    def filter_lines(self, fi: int, fail: str) -> list[str]:
        """Statements testing FILTER conjunct ``fi`` (no fast doubles), ``fail`` (``continue`` /
        ``return``) for a row failing it; a value the numeric source does not decide is decided
        over terms."""
        _, src, _, _ = self._fcode[fi]
        alt = self._falt.get(fi)
        if alt is None:
            return [f"if {src} is not True: {fail}"]
        return ["try:", f"    ok = {src} is True", "except Undecided:", f"    ok = {alt} is True",
                f"if not ok: {fail}"]

    def computed_lines(self, name: str, cell: str) -> tuple[list[str], str]:
        """(statements, expression) of computed column ``name``'s cell; ``cell`` wraps the
        numeric source (a ``{}`` format); a value it does not decide is decided over terms."""
        src = self._ccode[name][0]
        alt = self._calt.get(name)
        if alt is None:
            return [], cell.format(src)
        c = f"c_{_ident(name)}"
        return ["try:", f"    {c} = {cell.format(src)}", "except Undecided:", f"    {c} = {alt}"], c

    def _resolve(self, dictionary) -> tuple:
        """The constants' ids (-2: absent, matching nothing), looked up again when the
        dictionary grew while one was absent (a stream element interns terms)."""
        got = self._ids
        if got is not None and got[0] is dictionary and (not got[3] or got[1] == len(dictionary)):
            return got
        n = len(dictionary)
        out, absent = class_ids(self.classes, dictionary)
        self._ids = got = (dictionary, n, out, absent)
        for fn in self._tfns:
            fn.bind(dictionary)
        ns = self._ns
        for c, (s, p, o) in enumerate(out):
            ns[f"P{c}"], ns[f"S{c}"], ns[f"O{c}"] = p, s, o
        if self._match is None:
            self._match = self._compile_match()
        return got

    def _compile_match(self):
        """``match(rows, base, E, M)``: one pass over window triples (seqs from ``base``), an
        ``if`` chain on the predicates (globals ``P<c>``, ``S<c>``, ``O<c>``, set by
        :meth:`_resolve`, so new ids need no new code); each match counted in its class's dict
        ``M[c]`` (pair -> triples of the windows holding it) and logged in ``E`` as (seq, the
        dict, the pair), for its removal when it leaves the window (:meth:`_window`)."""
        by_p: dict = {}
        for c, (cs, p, co, same) in enumerate(self.classes):
            by_p.setdefault(p, []).append((c, cs, co, same))
        lines = ["def match(rows, base, E, M):", " add = None if E is None else E.append"]
        for c in range(len(self.classes)):
            lines.append(f" m{c} = M[{c}]")
        lines.append(" for i, (s, p, o) in enumerate(rows, base):")
        first = True
        for _p, group in by_p.items():
            c0 = group[0][0]
            lines.append(f"  {'if' if first else 'elif'} p == P{c0}:")
            first = False
            for c, cs, co, same in group:
                cond = []
                if cs is not None:
                    cond.append(f"s == S{c}")
                if co is not None:
                    cond.append(f"o == O{c}")
                if same:
                    cond.append("s == o")
                ind = "   "
                if cond:
                    lines.append(f"   if {' and '.join(cond)}:")
                    ind = "    "
                lines.append(f"{ind}k = (s, o)")
                lines.append(f"{ind}m{c}[k] = m{c}.get(k, 0) + 1")
                lines.append(f"{ind}if add: add((i, m{c}, k))")
        ns = self._ns
        exec(code_of("\n".join(lines), "<tiny_gen match>"), ns)   # noqa: S102 -- our own source
        return ns["match"]

    def _window(self, spec: list) -> list:
        """Per class: the windows' matching pairs (a dict pair -> count) for ``spec`` = [(store,
        g0, g1) per window]. Kept across instants: a window that slid forward is read only for
        its new seqs, and the matches of the seqs that left are removed from the counts -- so an
        instant matches only the triples that arrived since the last one (the matching of
        "match at ingest", done at the first instant that reads them, with no work on the ingest
        path). Anything else (a jump, a new store, constants resolved anew) reads the window."""
        ids = self._ids[2]
        st = self._win
        if st is None or st[0] != ids or len(st[1]) != len(spec) or not all(
                w[0] is store and w[1] <= g0 < w[2] for (store, g0, _), w in zip(spec, st[1], strict=True)):
            # no match of the last instant stays (a tumbling window, the first instant, a jump):
            # the windows matched afresh, without the log (the next instant reads them again)
            self._win = None
            M = [{} for _ in self.classes]
            for store, g0, g1 in spec:
                if g1 > g0:
                    self._match(store.read(g0, g1)[0].tolist(), g0, None, M)
            self._win = (ids, [[store, g0, g1, None] for store, g0, g1 in spec], M)
            return M
        if any(w[3] is None for w in st[1]):   # matched without the log: read again, logged
            st = self._win = (ids, [[None, 0, 0, deque()] for _ in spec], [{} for _ in self.classes])
        _, ws, M = st
        try:
            for (store, g0, g1), w in zip(spec, ws, strict=True):
                E = w[3]
                if w[0] is store and w[1] <= g0 <= w[2] <= g1:
                    a = w[2]
                else:
                    a = g0
                    g0 = 1 << 62   # every entry leaves
                popleft = E.popleft
                while E and E[0][0] < g0:
                    _, d, k = popleft()
                    n = d[k] - 1
                    if n:
                        d[k] = n
                    else:
                        del d[k]
                if g1 > a:
                    self._match(store.read(a, g1)[0].tolist(), a, E, M)
                w[0], w[1], w[2] = store, (a if g0 == 1 << 62 else g0), g1
        except BaseException:
            self._win = None
            raise
        return M

    def _stored(self, snap, graphs: list) -> list | None:
        """Per class: the stored ``FROM`` triples matching it, ``[pair dict, s -> [o], o -> [s],
        pairs]`` (the two indexes made on first use), read once per store snapshot and set of
        constants' ids; None when a class holds more than :data:`STORED_LIMIT` of them."""
        key = (snap.sn, tuple(map(id, graphs)), self._ids[2])
        got = self._sidx
        if got is not None and got[0] == key:
            return got[1]
        # a class whose ids did not change (another constant came into the dictionary) keeps its
        # entry, indexes included: only the classes of the new ids are read again
        prev = {}
        if self.KEEP_CLASSES and got is not None and got[1] is not None and got[0][:2] == key[:2]:
            prev = {(ids, self.classes[c][3]): e for c, (ids, e) in enumerate(zip(got[0][2], got[1], strict=True))}
        out = []
        total = 0
        for cs, p, co in self._ids[2]:
            same = self.classes[len(out)][3]
            kept = prev.get(((cs, p, co), same))
            if kept is not None:
                total += len(kept[0])
                if total > STORED_LIMIT:
                    self._sidx = (key, None)
                    return None
                out.append(kept)
                _KEPT[0] += 1
                continue
            pairs: dict = {}
            if p is not None and p >= 0 and (cs is None or cs >= 0) and (co is None or co >= 0):
                for g in graphs:
                    if cs is not None and co is not None:
                        if bool(g.contains(p, np.array([cs], dtype=np.int64), np.array([co], dtype=np.int64))[0]):
                            pairs[cs, co] = None
                        continue
                    if cs is not None:
                        _, os_ = g.expand(p, 0, np.array([cs], dtype=np.int64))
                        ss = [cs] * len(os_)
                        os_ = np.asarray(os_).tolist()
                    elif co is not None:
                        _, ss = g.expand(p, 1, np.array([co], dtype=np.int64))
                        ss = np.asarray(ss).tolist()
                        os_ = [co] * len(ss)
                    else:
                        if g.stats(p).triples > STORED_LIMIT:
                            self._sidx = (key, None)
                            return None
                        ss, os_ = g.scan(p)
                        ss, os_ = np.asarray(ss).tolist(), np.asarray(os_).tolist()
                    if same:
                        pairs.update(((s, o), None) for s, o in zip(ss, os_, strict=True) if s == o)
                    else:
                        pairs.update(zip(zip(ss, os_, strict=True), repeat(None)))
            total += len(pairs)
            if total > STORED_LIMIT:
                self._sidx = (key, None)
                return None
            out.append([pairs, None, None, list(pairs)])
        self._sidx = (key, out)
        return out

    def run(self, ctx, graphs: list, spec: list) -> list | None:
        """The instant's result rows from the stored ``graphs`` and the windows (``spec``:
        (store, g0, g1) per window), or None when handed back."""
        if ctx.max_rows is not None and ctx.max_rows < MAX_WORK:
            return None   # a row budget below the loops' own bound: the executor owns its error
        d = ctx.dictionary
        self._resolve(d)
        sidx = self._stored(ctx.snapshot, graphs)
        if sidx is None:
            return None
        wm = self._window(spec)
        # per class: the window's pairs the stored part does not hold already (a window is a set)
        idx = []
        for st, w in zip(sidx, wm, strict=True):
            sset = st[0]
            if w and sset:
                w = [x for x in w if x not in sset]
            idx.append((st, w))
        order = self._plan(idx)
        got = self._joins.get(order)
        if got is None:
            if len(self._joins) > 64:
                self._joins.clear()
            got = self._joins[order] = self._compile_join(order)
        fn, comps = got
        # a component none of whose patterns the windows match: its bindings are the stored
        # graphs' (per snapshot), kept
        rc = [None] * len(comps) if comps else []
        static = []
        if comps:
            skey = self._sidx[0]
            if self._rkey != skey:
                self._rkey = skey
                self._rcache = {}
            for ci, steps in enumerate(comps):
                if all(not idx[self.cls[order[k][0]]][1] for k in steps):
                    rc[ci] = self._rcache.get((order, ci))
                    static.append(ci)
        args = []
        for pi, kind in order:
            st, w = idx[self.cls[pi]]
            if kind == "all":
                spairs = st[3]
                args.append(spairs + w if w and spairs else (w or spairs))
            elif kind == "so":
                args.append((st[0], w if type(w) is dict else set(w)))
            else:
                j = 1 if kind == "s" else 2
                base = st[j]
                if base is None:
                    base = st[j] = _index(st[3], j == 2)
                # the window's keys with their stored values too (a probe reads these first): the
                # stored index is not copied
                m = _index(w, j == 2) if w else _NO_KEYS
                if w and base:
                    for k, lst in m.items():
                        sv = base.get(k)
                        if sv:
                            m[k] = sv + lst
                args.append((m, base))
        vals = _values(d)
        ctx.check_budget()
        try:
            out = fn(args, vals, vals.doubles, rc)
            if self.order is not None:
                out = self.order.apply(out, self.kinds(), vals)
        except (_Hand, Undecided):
            return None
        ctx.check_budget()
        for ci in static:
            if len(self._rcache) > 64:
                self._rcache.clear()
            self._rcache[order, ci] = rc[ci]
        _TAKEN[0] += 1
        return out

    def _plan(self, idx: list) -> tuple:
        """The join order ``((pattern, step kind), ...)``: greedily the smallest pattern first,
        then the connected pattern with the fewest candidates (a pattern whose variables are all
        bound is a test); kept for :attr:`REPLAN` instants."""
        if self._order is not None and self._keep > 0:
            self._keep -= 1
            return self._order
        size = [len(idx[c][0][3]) + len(idx[c][1]) for c in self.cls]
        order = self._greedy(list(range(self.sh.n_required)), set(), size)
        for g, (pis, _) in enumerate(self.sh.opts):   # each OPTIONAL from the required part's variables
            # (a nested group: and its parent's, bound or -1 by then, tiny_nested)
            bound = set(self.sh.required_vars) | (_nested.parent_vars(self.sh, self.pats, g) if self.sh.opt_parent else set())
            order += self._greedy(list(pis), bound, size)
        for pis, _, _ in self.sh.antis:   # each [NOT] EXISTS / MINUS group too (tiny_anti)
            order += self._greedy(list(pis), set(self.sh.required_vars), size)
        self._order = tuple(order)
        self._keep = self.REPLAN
        return self._order

    def _greedy(self, left: list, bound: set, size: list) -> list:
        order = []
        while left:
            best = None
            for pi in left:
                s, _, o = self.pats[pi]
                vs = s[0] == "v" and s[1] in bound
                vo = o[0] == "v" and o[1] in bound
                if vs and vo:
                    cost, kind = -1.0, "so"
                elif vs:
                    cost, kind = size[pi] ** 0.5, "s"
                elif vo:
                    cost, kind = size[pi] ** 0.5, "o"
                else:
                    cost, kind = float(size[pi]) + (1e6 if bound else 0.0), "all"
                if best is None or cost < best[0]:
                    best = (cost, pi, kind)
            _, pi, kind = best
            left.remove(pi)
            order.append((pi, kind))
            s, _, o = self.pats[pi]
            for x in (s, o):
                if x[0] == "v":
                    bound.add(x[1])
        return order

    def _compile_join(self, order: tuple):
        """``join(args, V) -> rows``: each connected component of the BGP by nested loops in
        ``order`` into a list of its bindings (FILTERs over its variables at the first level
        binding them), then the components' cross product with the remaining FILTERs; rows,
        DISTINCT rows or COUNT groups at the innermost level."""
        sh = self.sh
        ns = dict(_HELPERS)
        lines = ["def join(A, V, DV, Rc):", " w = 0"]
        for k, (_, kind) in enumerate(order):
            lines.append(f" A{k}m, A{k}s = A[{k}]" if kind in ("s", "o") else f" A{k} = A[{k}]")
        # the components of the required BGP, in order: a step binding nothing bound before starts one
        nreq = sh.n_required
        comps: list[list] = []
        bound: set = set()
        for k, (pi, kind) in enumerate(order[:nreq]):
            s, _, o = self.pats[pi]
            pv = {x[1] for x in (s, o) if x[0] == "v"}
            if not comps or (kind == "all" and not (pv & bound)):
                comps.append([])
            comps[-1].append((k, pi, kind))
            bound |= pv
        pending = list(range(len(self._fcode)))
        single = len(comps) == 1
        # variables the double-valued FILTERs read: their values looked up once, where bound
        fast_vars = {v for fv, _, _, fast in self._fcode + [c for c in self._ocode if c] if fast is not None
                     for v in fv}
        state = {"ind": 1}

        def emit(s: str) -> None:
            lines.append(" " * state["ind"] + s)

        def place(have: set) -> None:
            for fi in list(pending):
                fv, src, consts, fast = self._fcode[fi]
                if fv <= have:
                    pending.remove(fi)
                    for ci, v in enumerate(consts):
                        ns[f"F{fi}_K{ci}"] = v
                        ns[f"F{fi}_KF{ci}"] = _as_float(v)
                    _emit_filter(emit, fv, src, fast, self._falt.get(fi))

        def step(k: int, pi: int, kind: str, have: set) -> None:
            s, _, o = self.pats[pi]
            sv = _slot(s[1]) if s[0] == "v" else None
            ov = _slot(o[1]) if o[0] == "v" else None
            if kind == "so":
                emit(f"if ({sv}, {ov}) not in A{k}[0] and ({sv}, {ov}) not in A{k}[1]: continue")
            elif kind in ("s", "o"):
                key, val, vname = (sv, ov, o) if kind == "s" else (ov, sv, s)
                var = val if vname[0] == "v" else "_"
                emit(f"for {var} in (A{k}m.get({key}) or A{k}s.get({key}, ())):")
                state["ind"] += 1
                emit("w += 1")
            else:
                a = sv if s[0] == "v" else "_s"
                b = ov if o[0] == "v" else "_o"
                if s[0] == "v" and o[0] == "v" and s[1] == o[1]:
                    b = "_o"
                emit(f"for {a}, {b} in A{k}:")
                state["ind"] += 1
                emit("w += 1")
            emit("if w > MAX_WORK: raise _Hand")
            for x in (s, o):
                if x[0] == "v" and x[1] not in have:
                    have.add(x[1])
                    if x[1] in fast_vars:
                        emit(f"k_{_ident(x[1])} = DV[{_slot(x[1])}]")

        cvars = []
        for ci, comp in enumerate(comps):
            if not single:   # a component's bindings: kept by the caller while only stored triples match it
                lines.append(f" R{ci} = Rc[{ci}]")
                lines.append(f" if R{ci} is None:")
                lines.append(f"  R{ci} = Rc[{ci}] = []")
                state["ind"] = 2
            have: set = set()
            for k, pi, kind in comp:
                step(k, pi, kind, have)
                place(have)
            cv = sorted(have)
            cvars.append(cv)
            if not single:
                emit(f"R{ci}.append(({''.join(_slot(v) + ', ' for v in cv)}))")
        if not single:   # the cross product of the components
            state["ind"] = 1
            have = set()
            for ci, cv in enumerate(cvars):
                emit(f"for {''.join(_slot(v) + ', ' for v in cv)} in R{ci}:" if cv else f"for _ in R{ci}:")
                state["ind"] += 1
                emit("w += 1")
                emit("if w > MAX_WORK: raise _Hand")
                for v in cv:
                    if v in fast_vars:
                        emit(f"k_{_ident(v)} = DV[{_slot(v)}]")
                have |= set(cv)
                place(have)
        else:
            have = set(cvars[0]) if cvars else set()
        # the OPTIONAL groups (each joins the required part only): per group, its matches in
        # loops, or -- none passing its FILTER -- its own variables unbound; then the next group
        # in both branches, and the row (the FILTERs over optional variables) at the end
        groups = []
        k0 = nreq
        for g, (pis, _) in enumerate(sh.opts):
            groups.append((g, [(k0 + j, *order[k0 + j]) for j in range(len(pis))]))
            k0 += len(pis)

        def emit_rest(gi: int, have: set) -> None:
            if gi == len(groups):
                for fi in list(pending):   # (their variables are all bound or unbound by now)
                    place(set(self._fcode[fi][0]))
                emit_row()
                return
            g, steps = groups[gi]
            base = state["ind"]
            emit(f"f{g} = False")
            # a loop of one: a test step or FILTER of the group that fails ``continue``s here
            emit("for _once in _ONCE:")
            state["ind"] += 1
            mine = set(have)
            for k, pi, kind in steps:
                step(k, pi, kind, mine)
            oc = self._ocode[g]
            if oc is not None:
                fv, src, consts, fast = oc
                for ci, v in enumerate(consts):
                    ns[f"O{g}_K{ci}"] = v
                    ns[f"O{g}_KF{ci}"] = _as_float(v)
                _emit_filter(emit, fv, src, fast, self._falt.get(("O", g)))
            emit(f"f{g} = True")
            saved = list(pending)
            emit_rest(gi + 1, mine)
            pending[:] = saved
            state["ind"] = base
            emit(f"if not f{g}:")
            state["ind"] += 1
            own = sorted(mine - have)
            for v in own:
                emit(f"{_slot(v)} = -1")
                if v in fast_vars:
                    emit(f"k_{_ident(v)} = DV[-1]")
            emit_rest(gi + 1, mine)
            pending[:] = saved
            state["ind"] = base

        def emit_row() -> None:
            if sh.ask:
                emit("return True")
            elif grouping:
                key = _slot(sh.by[0]) if len(sh.by) == 1 else "(" + "".join(f"{_slot(b)}, " for b in sh.by) + ")"
                for x in self.by_lines(ns):   # (GROUP BY (expr AS ?k), tiny_aggs)
                    emit(x)
                emit(f"g = {key}")
                counted = False
                for j, (_, arg, dist) in enumerate(sh.aggs):
                    if j in sh.agg_kinds:   # value counts (tiny_aggs computes the group's value)
                        for x in self.agg_arg_lines(j, ns):
                            emit(x)
                        emit(f"dj = D{j}.get(g)")
                        emit(f"if dj is None: dj = D{j}[g] = {{}}")
                        emit(f"dj[{_slot(arg)}] = dj.get({_slot(arg)}, 0) + 1")
                    elif dist:
                        emit(f"D{j}.setdefault(g, set()).add({_slot(arg) if arg else 'None'})")
                    elif not counted:   # COUNT(*) and COUNT(?v) of a BGP variable: the group's rows
                        emit("G[g] = G.get(g, 0) + 1")
                        counted = True
                if not counted:
                    emit("G[g] = 0")
            else:
                cells = []
                for n in sh.names:
                    if n in self._ccode:
                        src, consts = self._ccode[n]
                        for ci, v in enumerate(consts):
                            ns[f"E{list(self._ccode).index(n)}_K{ci}"] = v
                        pre, cell = self.computed_lines(n, "_CV({})")
                        for x in pre:
                            emit(x)
                        cells.append(cell)
                    else:   # (a UNION branch's row: a variable it does not bind is unbound)
                        x = sh.alias.get(n, n)
                        cells.append(_slot(x) if x in all_vars else "-1")
                row = "(" + "".join(f"{c}, " for c in cells) + ")"
                emit(f"out[{row}] = None" if sh.distinct else f"add({row})")

        grouping = sh.by is not None
        all_vars = {x[1] for s, _, o in self.pats for x in (s, o) if x[0] == "v"}
        if sh.antis:   # [NOT] EXISTS / MINUS groups: the row goes on or not (tiny_anti)
            from engine.stream import tiny_anti as _anti
            _anti.emit(self, order, emit, step, state, ns)
        emit_rest(0, have)
        head = []
        if grouping:
            head.append(" G = {}")
            for j, (_, _, dist) in enumerate(sh.aggs):
                if dist or j in sh.agg_kinds:
                    head.append(f" D{j} = {{}}")
        elif sh.distinct:
            head.append(" out = {}")
        else:
            head += [" out = []", " add = out.append"]
        lines[2:2] = head
        # (rows and groups are at most the innermost level's steps, bounded by MAX_WORK: their
        # number is checked once, after the loops)
        if sh.ask:
            lines.append(" return False")
        elif grouping and self.raw:   # (a UNION branch: the groups, summed over the branches)
            lines.append(" return G, (" + "".join(f"D{j}, " if d or j in sh.agg_kinds else "None, "
                                                  for j, (_, _, d) in enumerate(sh.aggs)) + ")")
        elif grouping:
            lines += self._group_tail(ns)
        else:
            lines.append(" if len(out) > MAX_ROWS: raise _Hand")
            lines.append(" return list(out)" if sh.distinct else " return out")
        ns["MAX_WORK"] = MAX_WORK
        ns["MAX_ROWS"] = MAX_ROWS
        exec(code_of("\n".join(lines), "<tiny_gen join>"), ns)   # noqa: S102 -- our own source
        return ns["join"], (None if single else [[k for k, _, _ in comp] for comp in comps])

    def _group_tail(self, ns: dict) -> list[str]:
        """After the loops: one row per group (the implicit group of no GROUP BY even over no
        solution), HAVING over the counts, the projection (counts as ints, tagged per column)."""
        sh = self.sh
        lines = []
        lines.append(" if len(G) > MAX_ROWS: raise _Hand")
        if not sh.by:
            lines.append(" if not G: G[()] = 0")
        lines.append(" out = []")
        lines.append(" for g, n in G.items():")
        if len(sh.by) == 1:
            lines.append(f"  G_{_ident(sh.by[0])} = g")
        for k, b in enumerate(sh.by if len(sh.by) > 1 else ()):
            lines.append(f"  G_{_ident(b)} = g[{k}]")
        for j, (a, _, dist) in enumerate(sh.aggs):
            if j in sh.agg_kinds:   # (its term's key, its numeric value)
                ns[f"_AG{j}"] = _aggs.group_fn(sh, j)
                lines.append(f"  K_{_ident(a)}, N_{_ident(a)} = _AG{j}(D{j}.get(g, _NOVC), V)")
                continue
            lines.append(f"  N_{_ident(a)} = len(D{j}.get(g, ()))" if dist else f"  N_{_ident(a)} = n")
        ns["_NOVC"] = {}
        for hi, (src, consts) in enumerate(self._hcode):
            for ci, v in enumerate(consts):
                ns[f"H{hi}_K{ci}"] = v
            lines.append(f"  if {src} is not True: continue")
        counts = {a for a, _, _ in sh.aggs}
        keyed = {sh.aggs[j][0] for j in sh.agg_kinds}
        cells = []
        for n in sh.names:
            x = sh.alias.get(n, n)
            if n in self._gterm:   # an expression over the group's keys, as terms: its key
                k = list(self._ccode).index(n)
                for ci, v in enumerate(self._ccode[n][1]):
                    ns[f"E{k}_K{ci}"] = v
                cells.append(self._gterm[n])
                continue
            if n in self._ccode:   # an expression over the aggregates: its term's key (tiny_aggs)
                fn, used = _aggs.grouped_expr(sh.computed[n])
                k = list(self._ccode).index(n)
                ns[f"_GE{k}"] = fn
                args = "".join((f"N_{_ident(v)}" if v in counts else f"V[G_{_ident(v)}]") + ", " for v in used)
                cells.append(f"_GE{k}(({args}))")
                continue
            cells.append(f"K_{_ident(x)}" if x in keyed else f"N_{_ident(x)}" if x in counts else f"G_{_ident(x)}")
        lines.append("  out.append((" + "".join(c + ", " for c in cells) + "))")
        lines.append(" return list(dict.fromkeys(out))" if sh.distinct else " return out")
        return lines

    # -- the event's JSON ---------------------------------------------------------------
    def kinds(self) -> list[int]:
        """Per projected column: 0 for term ids, 1 for counts (ints), 2 for computed numbers
        (int / float, None for an error: unbound), 3 for terms' keys (the other aggregates and
        expressions over aggregates, :mod:`tiny_aggs`; None: unbound)."""
        k = self._kinds
        if k is None:
            counts = {a for a, _, _ in self.sh.aggs} if self.sh.by is not None else set()
            keyed = {self.sh.aggs[j][0] for j in self.sh.agg_kinds}
            grouped = self.sh.by is not None
            keyed |= set(self.sh.by_exprs)   # (GROUP BY (expr AS ?k): the value's key)
            k = self._kinds = [3 if grouped and n in self.sh.computed or self.sh.alias.get(n, n) in keyed
                               else 2 if n in self.sh.computed else 1 if self.sh.alias.get(n, n) in counts else 0
                               for n in self.sh.names]
        return k

    def result(self, rows: list, ctx) -> QueryResult:
        """The rows as the executor's :class:`QueryResult` (counts and computed numbers as term
        ids, errors unbound)."""
        if self.sh.ask:
            return QueryResult(form="ASK", terms=ctx, boolean=bool(rows))
        kinds = self.kinds()
        cols = []
        for j, k in enumerate(kinds):
            col = [r[j] for r in rows]
            if k == 0:
                cols.append(np.array(col, dtype=np.int64))
            elif k == 1:
                cols.append(_ops._count_ids(np.array(col, dtype=np.int64), ctx))
            elif k == 3:
                items = [None if v is None else (v, None) for v in col]
                cols.append(np.array(_ops.numeric_terms(ctx.dictionary).ids(items, ctx), dtype=np.int64))
            else:
                if any(type(v) is str for v in col):   # keys of terms (tiny_terms): the executor's ids
                    cols.append(np.asarray(ctx.intern([v if v is None or type(v) is str else _num_item(v)[0]
                                                       for v in col]), dtype=np.int64))
                    continue
                items = [None if v is None else _num_item(v) for v in col]
                cols.append(np.array(_ops.numeric_terms(ctx.dictionary).ids(items, ctx), dtype=np.int64))
        return QueryResult(form="SELECT", terms=ctx, vars=list(self.sh.names), columns=cols, n_rows=len(rows))

    def render(self, rows: list, json, ctx, extra: bytes) -> bytes:
        """SPARQL JSON of ``rows`` with ``extra`` members, the bytes
        :meth:`~engine.stream.continuous._JsonTerms.select` writes: each cell from the query's
        per-variable cache (misses rendered by one call), counts from a per-query cache."""
        if self.sh.ask:   # the bytes sparql_json writes for ASK
            return (b'{"head":{},"boolean":true' if rows else b'{"head":{},"boolean":false') + extra + b"}"
        names = self.sh.names
        if not rows:
            return b"".join((json.head(names), b',"results":{"bindings":[]}', extra, b"}"))
        head = json.head(names) + b',"results":{"bindings":[{'
        return b"".join((head, b"},{".join(self.fragments(rows, json, ctx)), b"}]}", extra, b"}"))

    def fragments(self, rows: list, json, ctx, keyed: bool = False) -> list[bytes]:
        """Each row's bindings as JSON members without braces (``"a":{...},"b":{...}``), the
        cells from the query's per-variable cache (misses rendered by one call). ``keyed``: the
        computed numbers' cells are their terms' keys already (:func:`_num_item`)."""
        names = self.sh.names
        kinds = self.kinds()
        cells = json._cells
        tables = []
        for j, v in enumerate(names):
            if kinds[j]:
                tables.append(None)
                continue
            cd = cells.get(v)
            if cd is None:
                if len(cells) > 256:
                    json._clear()
                cd = cells[v] = {}
            tables.append(cd)
        miss = []
        opt = bool(self.sh.opts or self.sh.branches)   # OPTIONAL / UNION variables may be unbound (-1): an empty cell
        for j, cd in enumerate(tables):
            if cd is not None:
                for r in rows:
                    if r[j] not in cd and r[j] >= 0:
                        miss.append(r[j])
        if miss:
            u = list(dict.fromkeys(miss))
            if json.cells_full(len(u)):
                # the cells start over: every cell of these rows is rendered now (not only the
                # misses: the cached ones go with the tables)
                json._clear()
                tables = [None if kinds[j] else cells.setdefault(v, {}) for j, v in enumerate(names)]
                u = list(dict.fromkeys(r[j] for j, cd in enumerate(tables) if cd is not None for r in rows if r[j] >= 0))
            frag = dict(zip(u, json.render(u, ctx), strict=True))
            for j, cd in enumerate(tables):
                if cd is None:
                    continue
                name = orjson.dumps(names[j]) + b":"
                for r in rows:
                    i = r[j]
                    if i not in cd and i >= 0:
                        cd[i] = name + frag[i]
                        json._n_cells += 1
            json.account()
        cf = self._count_frag
        parts = []
        holes = opt
        for j, cd in enumerate(tables):
            if cd is not None:
                parts.append([cd[r[j]] for r in rows] if not opt else
                             [cd[r[j]] if r[j] >= 0 else b"" for r in rows])
                continue
            name = orjson.dumps(names[j]) + b":"
            col = []
            if kinds[j] == 1:
                for r in rows:
                    c = r[j]
                    f = cf.get((j, c))
                    if f is None:
                        if len(cf) > 4096:
                            cf.clear()
                        f = cf[j, c] = name + orjson.dumps(_ser._json_term(f'"{c}"^^<{_XSD_INTEGER}>'))
                    col.append(f)
            else:   # computed numbers: their terms as the executor writes them (tiny_ops._num_item)
                as_key = keyed or kinds[j] == 3   # (3: terms' keys already, tiny_aggs)
                for r in rows:
                    c = r[j]
                    if c is None:
                        col.append(b"")
                        holes = True
                        continue
                    key = c if as_key or type(c) is str else _num_item(c)[0]
                    f = cf.get((j, key))
                    if f is None:
                        if len(cf) > 4096:
                            cf.clear()
                        f = cf[j, key] = name + orjson.dumps(_ser._json_term(key))
                    col.append(f)
            parts.append(col)
        if holes:
            return [b",".join([x for x in r if x]) for r in zip(*parts, strict=True)]
        return [b",".join(r) for r in zip(*parts, strict=True)]


_IDENTS: dict[str, str] = {}


def _ident(name: str) -> str:
    """A Python identifier for a SPARQL variable (names may hold ``.``, ``_:``, non-ASCII)."""
    got = _IDENTS.get(name)
    if got is None:
        got = _IDENTS[name] = "x" + name.encode("utf-8").hex()
    return got


def _slot(name: str) -> str:
    return "v_" + _ident(name)


def _index(pairs: list, by_o: bool) -> dict:
    """``s -> [o]`` (or ``o -> [s]``) of a class's stored pairs."""
    out: dict = {}
    if by_o:
        for s, o in pairs:
            got = out.get(o)
            if got is None:
                out[o] = [s]
            else:
                got.append(s)
    else:
        for s, o in pairs:
            got = out.get(s)
            if got is None:
                out[s] = [o]
            else:
                got.append(o)
    return out


_NO_KEYS: dict = {}   # (never written)
_VALS: dict = {}


def _values(dictionary) -> _Values:
    """The process's id -> numeric value cache of ``dictionary`` (ids never change meaning)."""
    got = _VALS.get(id(dictionary))
    if got is None or got.dictionary is not dictionary:
        if len(_VALS) > 8:
            _VALS.clear()
        got = _VALS[id(dictionary)] = _Values(dictionary)
    return got
