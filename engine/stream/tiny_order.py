"""ORDER BY with LIMIT / OFFSET over the result rows of the small-window paths
(:mod:`engine.stream.tiny_gen`, :mod:`engine.stream.maintained`).

Why: "the top k posts by likes" per window is a query stream users write; without this it falls
to the ordinary path. The rows of an instant are few: they are sorted at the instant (the
generated code's rows, or the maintained rows when the event's body is written), then sliced.

Taken: ``ORDER BY`` of projected variables (ASC / DESC), with ``LIMIT`` / ``OFFSET``, over the
forms :class:`engine.stream.tiny_gen.GenQuery` takes; ``ORDER BY`` of an expression over projected
variables (``DESC(?v * 2)``, ``STR(?x)``) orders by its value, computed per row from the
columns' term ids by :class:`engine.stream.tiny_terms.TermFn` (a column that is no term id --
a count, a computed number -- hands the instant back). The order is SPARQL's (the executor's
ranking, :func:`engine.exec.values.order_key`): unbound < blank nodes < IRIs < literals;
numbers (``xsd:integer`` / ``decimal`` / ``double``) by value as doubles; simple strings, then
language-tagged ones, by their text. The executor's sort is stable over its own row order, which
these paths do not have: two different rows with equal keys (a tie) or two terms of one value
in a column (``1`` and ``1.0``: the executor ranks them by their ids) hand the instant back, as do keys of other kinds (booleans, dates, ``xsd:float``,
escaped text, NaN).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from engine.exec.functions import vars_of
from engine.sparql import algebra as A
from engine.stream.tiny_ops import Undecided, _value
from engine.terms import from_key

__all__ = ["Order", "strip"]


@dataclasses.dataclass(frozen=True)
class Order:
    """The ORDER BY conditions as (projected column, ascending), then OFFSET and LIMIT."""

    cols: tuple     # (column, ascending); a column -1 - k: the k-th of ``exprs``
    offset: int
    limit: int | None
    #: ORDER BY expressions: (TermFn over their variables, those variables' columns)
    exprs: tuple = dataclasses.field(default=(), compare=False, hash=False)

    def apply(self, rows: list, kinds: list, V) -> list:
        """``rows`` ordered and sliced; raises :class:`Undecided` on a tie of different rows
        or a key these paths do not order."""
        if len(rows) > 1 and self.cols:
            memo: dict = {}
            if self.exprs:   # (each row with its expressions' values' keys after its columns)
                rows = self._extended(rows, kinds, V)
                kinds = [*kinds, *(3 for _ in self.exprs)]
            width = len(kinds) - len(self.exprs)
            cols = [(j if j >= 0 else width - 1 - j, asc) for j, asc in self.cols]
            keyed = [(tuple(_key_of(r[j], kinds[j], V, memo) for j, _ in cols), r) for r in rows]
            for c, (j, _) in enumerate(cols):
                # two terms of one value (1 and 1.0E0): the executor ranks them by their ids
                seen: dict = {}
                for k, r in keyed:
                    cell = r[j]
                    ident = (type(cell), repr(cell)) if kinds[j] in (1, 2) else cell
                    if seen.setdefault(k[c], ident) != ident:
                        raise Undecided
            for c in range(len(self.cols) - 1, -1, -1):   # stable sorts, the last condition first
                keyed.sort(key=lambda x, c=c: x[0][c], reverse=not self.cols[c][1])
            for a, b in zip(keyed, keyed[1:], strict=False):
                if a[0] == b[0] and a[1] != b[1]:
                    raise Undecided   # (the executor's order of tied rows is its row order)
            rows = [r[:width] for _, r in keyed] if self.exprs else [r for _, r in keyed]
        end = None if self.limit is None else self.offset + self.limit
        if not self.offset and (end is None or end >= len(rows)):
            return rows
        if not self.cols and len(set(rows)) > 1:
            raise Undecided   # (a slice of unordered rows: the executor's are its first rows)
        return rows[self.offset:end]


    def _extended(self, rows: list, kinds: list, V) -> list:
        """Each row with its ORDER BY expressions' values' keys after its columns: over term
        ids by the expression's :class:`~engine.stream.tiny_terms.TermFn`; over a count or a
        computed number (``DESC(?likes * 2)``), arithmetic as the executor computes it
        (:func:`engine.stream.tiny_aggs.grouped_expr`), anything else handed back."""
        out = []
        fns = []
        for fn, pos in self.exprs:
            if any(kinds[j] != 0 for j in pos):
                fns.append(_numeric(fn, pos, kinds, V))
                continue
            fn.bind(V.dictionary)
            p = pos[0] if len(pos) == 1 else pos
            fns.append(lambda r, fn=fn, p=p: fn[r[p] if type(p) is int else tuple(r[j] for j in p)])
        for r in rows:
            out.append((*r, *(f(r) for f in fns)))
        return out


def _numeric(fn, pos: tuple, kinds: list, V):
    """A row's ORDER BY value of arithmetic over columns of any kind (see ``_extended``)."""
    from engine.stream.tiny_aggs import grouped_expr  # noqa: PLC0415 -- (tiny_aggs builds on the executor)

    got = grouped_expr(fn.expr)
    if got is None:
        raise Undecided
    key_of, names = got
    cols = [(pos[fn.names.index(n)], kinds[pos[fn.names.index(n)]]) for n in names]

    def value(cell, kind: int):
        if cell is None:
            return None
        if kind == 0:
            return V[cell]
        if kind == 1:
            return cell
        return _value(cell) if type(cell) is str else cell   # (a term's key, or an int / double)

    return lambda r: key_of([value(r[j], k) for j, k in cols])


def strip(query: A.Query) -> tuple[A.Query, Order | None] | None:
    """``query`` without its ORDER BY / OFFSET / LIMIT and their :class:`Order` (None: it has
    none); None when they are of a form not taken."""
    if query.form != "SELECT":
        return query, None
    node = query.pattern
    sl = None
    if isinstance(node, A.Slice):
        sl, node = node, node.input
    distinct = isinstance(node, A.Distinct)
    proj = node.input if distinct else node
    if not isinstance(proj, A.Project):
        return (query, None) if sl is None else None
    ob = proj.input
    if not isinstance(ob, A.OrderBy):
        if sl is None:
            return query, None
        cols: tuple = ()
        inner = proj
    else:
        names = [v.name for v in proj.vars]
        cols = []
        exprs = []
        # ``ORDER BY DESC(COUNT(?x))`` orders by the aggregate's hidden variable, which a projected
        # ``(COUNT(?x) AS ?n)`` copies (the parser makes one aggregate of both): that column
        copies = {}
        node = ob.input
        while isinstance(node, (A.Extend, A.Filter)):
            if isinstance(node, A.Extend) and isinstance(node.expr, A.Var) and node.var.name in names:
                copies.setdefault(node.expr.name, node.var.name)
            node = node.input
        for c in ob.conditions:
            if isinstance(c.expr, A.Var):
                name = c.expr.name if c.expr.name in names else copies.get(c.expr.name)
                if name is None:
                    return None
                cols.append((names.index(name), bool(c.ascending)))
                continue
            from engine.stream import tiny_terms as _tt  # noqa: PLC0415 -- (it imports the executor)

            vs = sorted(vars_of(c.expr))
            if not _tt.term_expr(c.expr) or not set(vs) <= set(names):
                return None
            fn = _tt.TermFn(c.expr, vs, False)
            exprs.append((fn, tuple(names.index(v) for v in vs)))
            cols.append((-len(exprs), bool(c.ascending)))
        cols = tuple(cols)
        inner = dataclasses.replace(proj, input=ob.input)
    top = A.Distinct(inner) if distinct else inner
    order = Order(cols, sl.offset if sl is not None else 0, sl.limit if sl is not None else None,
                  tuple(exprs) if ob is not None and isinstance(ob, A.OrderBy) else ())
    return dataclasses.replace(query, pattern=top), order


_CAT_NUM, _CAT_STR, _CAT_LANG = 0, 1, 2


def _key_of(cell, kind: int, V, memo: dict) -> tuple:
    """A cell's sort key: kind 0 a term id (-1 unbound), 1 a count, 2 a computed int / double
    (None: unbound), 3 a term's key (None: unbound) -- :meth:`GenQuery.kinds`."""
    if cell is None or (kind == 0 and cell < 0):
        return (0,)
    if kind == 2 and type(cell) is str:
        kind = 3   # (a computed term's key: tiny_terms)
    if kind == 1 or kind == 2:
        x = float(cell)
        if x != x:
            raise Undecided
        return (3, _CAT_NUM, x)
    got = memo.get((kind, cell))
    if got is not None:
        return got
    key = V.dictionary.key(cell) if kind == 0 else cell
    got = memo[kind, cell] = _term_key(key, V[cell] if kind == 0 else _value(key))
    return got


def _term_key(key: str, v) -> tuple:
    if key.startswith("_:"):
        return (1, key[2:])
    if key[0] == "<":
        return (2, key[1:-1])
    if "\\" in key:
        raise Undecided   # (escaped text: the executor ranks the key's text)
    t = type(v)
    if t is int or t is float or t is Fraction:
        x = float(v)
        if x != x:
            raise Undecided
        return (3, _CAT_NUM, x)
    lit = from_key(key)
    if lit.lang:
        return (3, _CAT_LANG, lit.lexical, lit.lang)
    if lit.datatype is None or lit.datatype.endswith("#string"):
        return (3, _CAT_STR, lit.lexical)
    raise Undecided   # (booleans, dates, other datatypes: the executor's order)
