"""The aggregates beyond COUNT(*) / COUNT(?v) for the small-window paths (:mod:`engine.stream.tiny_gen`,
:mod:`engine.stream.maintained`): SUM, AVG, MIN, MAX, SAMPLE, GROUP_CONCAT, with and without
DISTINCT.

Why: per-sensor / per-area aggregates are what stream users write; without these the query
falls to the ordinary path (~1x the composite peer on windows this small). Both paths keep, per
group, the aggregate's argument as *value counts* (term id -> solutions holding it): the
generated instant counts them in its join, the maintained state adds and removes them as triples
enter and leave (a group's extreme, sum or sample is recomputed from its counts when they
change, so a leaving maximum needs no rescan of the window). The value of a group is computed
from its counts here, as :mod:`engine.exec.aggregates` computes it:

* SUM / AVG: integers exactly (Python ints), decimals exactly (Fractions, written by the
  executor's own :func:`engine.exec.aggregates._result_key`), any double makes the group's
  sum a double summed over the distinct values in value order (the executor's order: the result
  depends on the values only); an error (a non-numeric value) makes the group an error; the empty
  group sums and averages to ``0``.
* MIN / MAX: by ORDER BY's order (blank nodes < IRIs < numbers < other literals, by category,
  :func:`engine.exec.values.order_key`); numbers (``xsd:integer`` / ``decimal`` / ``double``
  below 2^53, no NaN) compared as doubles, as the executor's ranking does, among tied values the
  widest type, its canonical form. An ``xsd:float``, an ill-typed literal, a NaN or a string with
  an escaped character, a boolean or date hands the instant back (:class:`Undecided`).
* SAMPLE: the group's value when it holds one distinct value; more: handed back (the executor
  takes the first row's, an order these paths do not have).
* GROUP_CONCAT: the lexical forms of string literals joined by the separator (a simple literal);
  another term makes the group an error. A group of several distinct values is handed back:
  SPARQL leaves the pieces' order undefined, the executor's is its row order, which the value
  counts do not keep, and an instant evaluated again (after a restart, on another path) must
  write the same string.

* COUNT of an expression (``COUNT(?v * 2)``, ``COUNT(DISTINCT STR(?t))``, ``COUNT(?z)`` of a
  BIND): value counts keyed by the expression's term key; a solution whose expression is an
  error (key None) is not counted, as the executor counts (the bound values, SPARQL 1.1
  18.5.1.2; pyoxigraph makes such a group's COUNT unbound instead).

A value the closures do not decide (an ``xsd:float``, an ill-typed literal: ``_OTHER`` of
:mod:`engine.stream.tiny_ops`) hands the instant back.
"""

from __future__ import annotations

import weakref
from decimal import Decimal
from fractions import Fraction

from engine.exec import values as _V
from engine.exec.aggregates import _result_key
from engine.exec.functions import vars_of
from engine.sparql import algebra as A
from engine.stream.tiny_ops import _NONNUM, _OTHER, Undecided, _num_item, _value
from engine.stream.tiny_terms import term_expr
from engine.terms import XSD_DECIMAL, XSD_DOUBLE, XSD_INTEGER, XSD_STRING, from_key, literal_key

__all__ = ["AggGroup", "agg_fn", "below_group", "expr_agg_fn", "expr_name", "group_fn", "optional_group", "NAMES", "bound_ok", "computed_ok", "grouped_expr"]

#: aggregates these paths compute besides COUNT
NAMES = ("SUM", "AVG", "MIN", "MAX", "SAMPLE", "GROUP_CONCAT")
_ZERO = (f'"0"^^<{XSD_INTEGER}>', 0)
_NONE = (None, None)
_TYPE_RANK = {XSD_INTEGER: 0, XSD_DECIMAL: 1, XSD_DOUBLE: 3}
_EXACT = 2.0 ** 53


class AggGroup:
    """A GROUP BY over plain variables whose aggregates are COUNTs or :data:`NAMES` over a
    variable: ``aggs`` as :class:`engine.stream.tiny_ops.CountGroup`'s ((output, argument or
    None, distinct)), ``kinds`` the non-COUNT ones by position ((name, separator))."""

    __slots__ = ("by", "aggs", "kinds", "exprs", "byexprs")

    def __init__(self, by: list, aggs: list, kinds: dict, exprs: dict | None = None, byexprs: dict | None = None):
        self.by, self.aggs, self.kinds = by, aggs, kinds
        # group key -> its expression (``GROUP BY (?age / 10 AS ?decade)``): the key's slot holds
        # the value's term key (:meth:`engine.stream.tiny_gen.GenQuery.by_lines`)
        self.byexprs = byexprs or {}
        # position -> the argument expression of ``SUM(?a * ?b)``, ``AVG(xsd:double(?v))``: the
        # argument slot is then a name no SPARQL variable has (:func:`expr_name`), assigned per
        # solution from a :class:`~engine.stream.tiny_terms.TermFn` (the value's term key)
        self.exprs = exprs or {}

    @staticmethod
    def of(node: A.Group) -> AggGroup | None:
        by = []
        byexprs = {}
        for expr, var in node.by:
            if isinstance(expr, A.Var) and expr.name == var.name:
                by.append(var.name)
                continue
            if isinstance(expr, A.Var) or not term_expr(expr):
                return None
            by.append(var.name)
            byexprs[var.name] = expr
        aggs, kinds, exprs = [], {}, {}
        for var, agg in node.aggregates:
            name = agg.name.upper()
            if name == "COUNT" and agg.arg is None and not agg.distinct:
                aggs.append((var.name, None, False))
                continue
            if name != "COUNT" and name not in NAMES:
                return None
            if not isinstance(agg.arg, A.Var):
                # an expression: its values' keys are counted (SUM, AVG, MIN, ...; COUNT leaves
                # the errors' key, None, out: :func:`expr_agg_fn`)
                if agg.arg is None or not term_expr(agg.arg):
                    return None
                exprs[len(aggs)] = agg.arg
                kinds[len(aggs)] = (name, " " if agg.separator is None else agg.separator)
                aggs.append((var.name, expr_name(len(aggs)), bool(agg.distinct)))
                continue
            if name != "COUNT":
                kinds[len(aggs)] = (name, " " if agg.separator is None else agg.separator)
            aggs.append((var.name, agg.arg.name, bool(agg.distinct)))
        return AggGroup(by, aggs, kinds, exprs, byexprs)


def expr_name(j: int) -> str:
    """The argument slot's name of aggregate ``j`` over an expression (no SPARQL variable's)."""
    return f" agg{j}"


# ---------------------------------------------------------------- the terms' keys

_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _keys_of(dictionary) -> dict:
    got = _KEYS.get(dictionary)
    if got is None or len(got) > 1 << 16:
        got = _KEYS[dictionary] = {}
    return got


def _key(V, i: int) -> str:
    """Term id ``i``'s key (kept per dictionary: ids never change meaning)."""
    ks = _keys_of(V.dictionary)
    k = ks.get(i)
    if k is None:
        k = ks[i] = V.dictionary.key(i)
    return k


def _out(key: str | None) -> tuple:
    """(key, its numeric value for HAVING / expressions over the aggregate)."""
    return (None, None) if key is None else (key, _value(key))


# ---------------------------------------------------------------- the aggregates over value counts


def _sum_avg(avg: bool, distinct: bool):
    def f(vc: dict, V) -> tuple:
        if not vc:
            return _ZERO
        fracs = dbls = False
        items = []
        n_rows = 0
        for i, n in vc.items():
            v = V[i]
            t = type(v)
            if t is int:
                pass
            elif t is Fraction:
                fracs = True
            elif t is float:
                dbls = True
            elif v is _OTHER:
                raise Undecided
            else:   # an error or a non-numeric term: op:numeric-add of an error
                return _NONE
            if distinct:
                n = 1
            items.append((v, n))
            n_rows += n
        if dbls:
            # the executor's: float64 products of the distinct values (in value order) and
            # their rows, added in that order from 0.0
            try:
                vals = sorted(((float(v), n) for v, n in items), key=_dbl_order)
            except OverflowError:
                raise Undecided from None
            s = 0.0
            for x, n in vals:
                s += x * n
            if avg:
                s = s / n_rows
            return _num_item(s)[0], s
        total = sum(v * n for v, n in items)
        if not fracs:
            if not avg:
                return f'"{total}"^^<{XSD_INTEGER}>', total
            return _out(_result_key(_V.Num(_V.INTEGER, total), n_rows, True))
        dec = _decimal(total)
        if dec is None:
            raise Undecided
        return _out(_result_key(_V.Num(_V.DECIMAL, dec), n_rows, avg))
    return f


def _dbl_order(item) -> tuple:
    x = item[0]
    return (1, 0.0) if x != x else (0, x)   # (NaN last, as the executor's argsort puts it)


def _decimal(f: Fraction) -> Decimal | None:
    """A sum of decimals exactly as a Decimal (its denominator divides a power of ten); None
    when it has more digits than the executor's decimal context keeps (28)."""
    d = f.denominator
    k = 0
    while d % 10 == 0:
        d //= 10
        k += 1
    while d % 2 == 0:
        d //= 2
        k += 1
    while d % 5 == 0:
        d //= 5
        k += 1
    if d != 1:
        return None
    out = Decimal(f.numerator * (10 ** k // f.denominator)).scaleb(-k)
    return out if len(out.as_tuple().digits) <= 28 else None


def _min_max(is_max: bool):
    def f(vc: dict, V) -> tuple:
        if not vc:
            return _NONE
        best = None
        tied: list = []
        terms = []   # ids of terms that are no numbers (IRIs, blank nodes, strings, ...)
        for i in vc:
            v = V[i]
            t = type(v)
            if t is not int and t is not float and t is not Fraction:
                if v is _NONNUM:
                    terms.append(i)
                    continue
                raise Undecided   # (an ill-typed or xsd:float literal: the executor's)
            x = float(v)
            if x != x or abs(x) >= _EXACT:
                raise Undecided
            if best is None or (x > best if is_max else x < best):
                best, tied = x, [i]
            elif x == best:
                tied.append(i)
        if terms:
            # ORDER BY's order: blank nodes < IRIs < numbers < other literals (by category)
            ks = [(_order_key(V, i), i) for i in terms]
            other = ks if best is None else [x for x in ks if (x[0][0] == 3) == is_max]
            if other:
                return _out(_key(V, (max if is_max else min)(other)[1]))
        return _numeric_winner(tied, V)
    return f


def _order_key(V, i: int) -> tuple:
    k = _key(V, i)
    if "\\" in k:
        raise Undecided   # (an escaped character: the executor ranks the key's text)
    ok = _V.order_key(from_key(k))
    if ok[0] == 3 and ok[1] not in (_V.CAT_STRING, _V.CAT_LANG):
        raise Undecided   # (booleans, dates, other datatypes: their order is the executor's)
    return ok


def _numeric_winner(tied: list, V) -> tuple:
    """Among values equal to the winner (1 = 1.0 = 1E0) the widest type, in canonical form."""
    wide = -1
    keys = set()
    for i in tied:
        k = _key(V, i)
        r = _TYPE_RANK.get(k[k.rfind("^^<") + 3:-1], -1) if "^^<" in k else -1
        if r < 0:
            raise Undecided   # (a derived numeric type: its canonical form is the executor's)
        if r > wide:
            wide, keys = r, {_canonical(V[i], r)}
        elif r == wide:
            keys.add(_canonical(V[i], r))
    if len(keys) != 1:
        raise Undecided   # (0.0E0 and -0.0E0: the executor picks one by id)
    return _out(keys.pop())


def _canonical(v, rank: int) -> str:
    if rank == 0:
        return f'"{v}"^^<{XSD_INTEGER}>'
    if rank == 3:
        return _num_item(v)[0]
    dec = _decimal(v)
    if dec is None:
        raise Undecided
    lit = _V.num_literal(_V.Num(_V.DECIMAL, dec))
    return literal_key(lit.lexical, lit.datatype)


def _sample(vc: dict, V) -> tuple:
    if not vc:
        return _NONE
    if len(vc) > 1:
        raise Undecided   # (the executor's: its first row's value)
    return _out(_key(V, next(iter(vc))))


def _group_concat(sep: str, distinct: bool):
    # a group of several distinct values is handed back: the pieces' order is the executor's row
    # order, which the value counts do not keep (SPARQL leaves it open, but an instant evaluated
    # again -- after a restart, on another path -- must write the same string)
    def f(vc: dict, V) -> tuple:
        if len(vc) > 1:
            raise Undecided
        parts = []
        for i, n in vc.items():
            k = _key(V, i)
            if k[0] != '"':
                return _NONE
            t = from_key(k)
            if not (t.lang or t.datatype is None or t.datatype == XSD_STRING):
                return _NONE   # (CONCAT of a term that is no string literal: an error)
            parts += [t.lexical] * (1 if distinct else n)
        return literal_key(sep.join(parts)), _NONNUM
    return f


def _count(distinct: bool):
    """COUNT over value counts holding -1 (an OPTIONAL's variable left unbound: not counted)."""
    def f(vc: dict, V) -> tuple:
        n = sum(1 for i in vc if i != -1) if distinct else sum(c for i, c in vc.items() if i != -1)
        return f'"{n}"^^<{XSD_INTEGER}>', n
    return f


def _bound_only(inner, name: str):
    """``inner`` where the argument may be unbound (an OPTIONAL's variable, id -1): an error
    for SUM / MIN / MAX (:data:`_ERROR_IS_ERROR`); for AVG the executor's ``Avg(M) = 0`` where
    no value is bound (SPARQL 1.1 18.5.1.4: Count leaves the errors out) and an error where one
    is among bound ones (:func:`engine.exec.aggregates._sum_avg`); else handed back."""
    def f(vc: dict, V) -> tuple:
        if -1 in vc:
            if name in _ERROR_IS_ERROR:
                return _NONE
            if name == "AVG":
                return _ZERO if len(vc) == 1 else _NONE
            raise Undecided
        return inner(vc, V)
    return f


def group_fn(sh, j: int):
    """The function computing aggregate ``j`` of shape ``sh`` from a group's value counts:
    over an expression's keys (:func:`expr_agg_fn`), over an OPTIONAL's variable
    (:func:`optional_group`), or over term ids (:func:`agg_fn`)."""
    name, sep = sh.agg_kinds[j]
    dist = sh.aggs[j][2]
    if j in sh.agg_exprs:
        return expr_agg_fn(name, dist, sep)
    if name == "COUNT":
        return _count(dist)
    fn = agg_fn(name, dist, sep)
    return _bound_only(fn, name) if sh.aggs[j][1] not in sh.required_vars else fn


def optional_group(sh, rvars: set) -> bool:
    """Whether a GROUP BY over OPTIONAL groups is taken (``likes per post, zero included``):
    its keys are required variables (always bound); a COUNT of a variable an OPTIONAL binds
    becomes value counts (-1 for unbound, left out, :func:`_count`), SUM / MIN / ... of one
    hand an unbound value back (:func:`group_fn`)."""
    if not set(sh.by) <= rvars:
        return False
    for j, (_, arg, _) in enumerate(sh.aggs):
        if arg is None or arg in rvars or j in sh.agg_exprs or j in sh.agg_kinds:
            continue
        sh.agg_kinds[j] = ("COUNT", " ")
    return True


def agg_fn(name: str, distinct: bool, sep: str = " "):
    """``f(value counts, V) -> (key or None, numeric value)`` of one aggregate over a group's
    argument value counts (term id -> solutions); raises :class:`Undecided` for what it does
    not decide."""
    if name in ("SUM", "AVG"):
        return _sum_avg(name == "AVG", distinct)
    if name in ("MIN", "MAX"):
        return _min_max(name == "MAX")
    if name == "SAMPLE":
        return _sample
    if name == "GROUP_CONCAT":
        return _group_concat(sep, distinct)
    raise ValueError(name)


class _KeyDictionary:
    """A stand-in dictionary whose ids are the terms' keys (:func:`expr_agg_fn`)."""

    __slots__ = ("__weakref__",)

    @staticmethod
    def key(k: str) -> str:
        return k


class _KeyValues(dict):
    """Term key -> numeric value (:func:`engine.stream.tiny_ops._value`), as :class:`_Values`
    of :mod:`tiny_gen` maps ids."""

    __slots__ = ("dictionary",)

    def __init__(self):
        super().__init__()
        self.dictionary = _KeyDictionary()

    def __missing__(self, k: str):
        v = _value(k)
        if len(self) > 1 << 16:
            self.clear()
        self[k] = v
        return v


_KV = _KeyValues()


def expr_agg_fn(name: str, distinct: bool, sep: str = " "):
    """:func:`agg_fn` over value counts keyed by the argument expression's term keys (an
    aggregate of an expression: the solutions' values are terms no dictionary holds). A solution
    whose expression is an error (key None) hands the instant back: the executor's rules for an
    error inside MIN / MAX / SAMPLE / GROUP_CONCAT are its own (SUM and AVG of an error: an
    error; taken from the ordinary path too, rare in practice)."""
    if name == "COUNT":
        return _count_keys(distinct)
    inner = agg_fn(name, distinct, sep)

    def f(vc: dict, V) -> tuple:
        if None in vc:
            if name in _ERROR_IS_ERROR:
                return _NONE
            raise Undecided
        return inner(vc, _KV)
    return f


def _count_keys(distinct: bool):
    """COUNT of an expression over its values' term keys: a solution whose expression is an
    error (key None) is left out (SPARQL's COUNT counts the bound values only); DISTINCT counts
    the distinct keys, which are the distinct terms (a key names one RDF term)."""
    def f(vc: dict, V) -> tuple:
        n = sum(1 for k in vc if k is not None) if distinct else sum(c for k, c in vc.items() if k is not None)
        return f'"{n}"^^<{XSD_INTEGER}>', n
    return f


#: aggregates whose group is an error when one of its values is (the executor's
#: :mod:`engine.exec.aggregates`: ``op:numeric-add`` of an error; no order over an error);
#: AVG of errors only is 0 there, SAMPLE / GROUP_CONCAT have rules of their own: handed back
_ERROR_IS_ERROR = frozenset({"SUM", "MIN", "MAX"})


def below_group(sh, node, conjuncts):
    """The BGP's node under a GROUP BY, with the FILTERs and BINDs between them taken into
    ``sh``: FILTER conjuncts appended to ``sh.filters``, a ``BIND (expr AS ?x)`` inlined where
    ``?x`` is read -- in FILTERs above it and in the arguments of SUM / AVG / MIN / COUNT / ...
    (which become aggregates of ``expr``, :func:`expr_agg_fn`); a group key that is a copy of a
    variable (``BIND(?u AS ?who)``) is that variable's, written under the key's name. None (not
    taken) when another bound variable is a group key, or an expression is not one
    :mod:`tiny_terms` decides."""
    from engine.stream import tiny_terms as _tt  # noqa: PLC0415 -- (tiny_gen's helpers, no cycle)

    chain = []
    while isinstance(node, (A.Extend, A.Filter)):
        chain.append(node)
        node = node.input
    if not any(isinstance(op, A.Extend) for op in chain):
        for op in chain:
            sh.filters += conjuncts(op.expr)
        return node
    binds: dict = {}
    for op in reversed(chain):   # bottom-up: an operator sees the BINDs below it
        e = _tt.inline(op.expr, binds)
        if not term_expr(e):
            return None
        if isinstance(op, A.Extend):
            if op.var.name in binds:
                return None
            binds[op.var.name] = e
        else:
            sh.filters += conjuncts(e)
    for k in [b for b in sh.by if b in binds]:
        # ``BIND(?u AS ?who) ... GROUP BY ?who``: grouped by ?u (unbound exactly where ?who is),
        # the key written under its name (an alias); any other BIND as a key: not taken
        e = binds[k]
        if not isinstance(e, A.Var) or e.name in sh.by or k in sh.by_exprs or k in sh.alias:
            return None
        sh.by[sh.by.index(k)] = e.name
        sh.alias[k] = e.name
    for j, (out, arg, dist) in enumerate(sh.aggs):
        if j in sh.agg_exprs:
            sh.agg_exprs[j] = _tt.inline(sh.agg_exprs[j], binds)
        elif arg in binds:
            if j not in sh.agg_kinds:   # COUNT(?x) of a BIND: COUNT(expr), its errors left out
                sh.agg_kinds[j] = ("COUNT", " ")
            sh.agg_exprs[j] = binds[arg]
            sh.aggs[j] = (out, expr_name(j), dist)
    return node


# ---------------------------------------------------------------- what the shapes may hold


def bound_ok(expr, sh) -> bool:
    """Whether ``expr`` asks no ``BOUND`` of a non-COUNT aggregate (an error leaves it unbound:
    the generated sources take every aggregate's variable as bound)."""
    keyed = {sh.aggs[j][0] for j in sh.agg_kinds}

    def ok(e) -> bool:
        if isinstance(e, A.Call):
            if e.op == "BOUND" and any(isinstance(a, A.Var) and a.name in keyed for a in e.args):
                return False
            return all(ok(a) for a in e.args)
        return True
    return ok(expr)


def computed_ok(sh) -> bool:
    """Whether the projected expressions of a grouping query read only its groups' variables and
    aggregates (``(SUM(?x) / COUNT(?x) AS ?m)``), with no ``BOUND`` of an aggregate."""
    outs = set(sh.by) | {a for a, _, _ in sh.aggs}
    return all(set(vars_of(e)) <= outs and bound_ok(e, sh)
               and (grouped_expr(e) is not None or (set(vars_of(e)) <= set(sh.by) and term_expr(e)))
               for e in sh.computed.values())


def _structural(x) -> bool:
    return ((isinstance(x, A.TriplePattern) and not isinstance(x.p, A.Const))
            or isinstance(x, (A.PathPattern, A.Service, A.Graph)))


def order_free(query: A.Query) -> bool:
    """Whether ``query`` is refused by the compact path only for its SAMPLE / GROUP_CONCAT or
    OFFSET / LIMIT (whose values the ordinary path takes in its row order): its patterns are
    otherwise of the forms the generated code reads (:class:`engine.stream.tiny_gen.GenQuery`),
    which decides SAMPLE and GROUP_CONCAT only where the order does not matter and hands back
    an ORDER BY tie (:mod:`engine.stream.tiny_order`)."""
    from engine.stream.delta import patterns_of  # noqa: PLC0415 -- (delta imports the executor)

    return patterns_of(query, _structural) is not None


# ---------------------------------------------------------------- expressions over the aggregates


def grouped_expr(expr) -> tuple | None:
    """``(f, names)``: ``f(values) -> key or None`` of a projected ``+ - * /`` / unary-minus
    expression over a group's aggregates and keys (``values``: their numeric values in
    ``names``' order), computed as the executor's scalar arithmetic does
    (:func:`engine.exec.values.numeric_op`: an integer quotient is a decimal of 28 digits, a
    decimal or integer division by zero an error); None when not of these forms."""
    names: list = []

    def comp(e):
        if isinstance(e, A.Var):
            if e.name not in names:
                names.append(e.name)
            k = names.index(e.name)
            return lambda env: _as_num(env[k])
        if isinstance(e, A.Const):
            v = _value(e.key)
            if type(v) not in (int, Fraction, float):
                return None
            n = _as_num(v)
            return lambda env: n
        if not isinstance(e, A.Call):
            return None
        subs = [comp(a) for a in e.args]
        if any(s is None for s in subs):
            return None
        if e.op in ("+", "-", "*", "/") and len(subs) == 2:
            fa, fb, op = subs[0], subs[1], e.op

            def f(env):
                a, b = fa(env), fb(env)
                if a is None or b is None:
                    return None
                try:
                    return _V.numeric_op(op, a, b)
                except _V.ExprError:
                    return None
            return f
        if e.op == "NEG" and len(subs) == 1:
            fa = subs[0]
            return lambda env: None if (a := fa(env)) is None else _V.num_neg(a)
        if e.op == "POS" and len(subs) == 1:
            return subs[0]
        return None

    fn = comp(expr)
    if fn is None:
        return None

    def key(env) -> str | None:
        n = fn(env)
        if n is None:
            return None
        try:
            lit = _V.num_literal(n)
        except _V.ExprError:
            return None
        return literal_key(lit.lexical, lit.datatype)
    return key, names


def _as_num(v):
    t = type(v)
    if t is int:
        return _V.Num(_V.INTEGER, v)
    if t is float:
        return _V.Num(_V.DOUBLE, v)
    if t is Fraction:
        d = _decimal(v)
        if d is None:
            raise Undecided
        return _V.Num(_V.DECIMAL, d)
    if v is _OTHER:
        raise Undecided
    return None   # (unbound, an error, a term that is no number: a type error)
