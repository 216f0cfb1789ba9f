"""CONSTRUCT on the generated and maintained paths: the template instantiated per row.

Why: C-SPARQL ``REGISTER STREAM ... AS CONSTRUCT`` (derived streams, :mod:`engine.stream.derived`)
and plain CONSTRUCT queries over small windows took the ordinary path only. Their WHERE is what
:mod:`engine.stream.tiny_gen` generates code for; the template is a projection of its variables.
So the query is generated as ``SELECT <the template's variables> WHERE ...`` (:func:`select_of`),
and each instant's rows are instantiated here as the executor's
:func:`~engine.exec.evaluate.construct` does: every template triple of every row, a triple with
an unbound position, a literal subject or a non-IRI predicate left out, then the distinct
triples in order of first occurrence. The event is then written by the ordinary CONSTRUCT
rendering (and I/DSTREAM difference) of :meth:`InstantEvaluator.render`. Templates with blank
nodes (fresh per solution) are not taken.
"""

from __future__ import annotations

import numpy as np

from engine.exec.result import QueryResult
from engine.sparql import algebra as A

_EMPTY3 = np.zeros((0, 3), dtype=np.int64)


def select_of(query: A.Query) -> A.Query | None:
    """``SELECT`` of the template's variables over ``query``'s WHERE (a CONSTRUCT without
    blank nodes in its template), else None."""
    if query.form != "CONSTRUCT" or not query.template:
        return None
    names: list[str] = []
    for tp in query.template:
        for x in (tp.s, tp.p, tp.o):
            if isinstance(x, A.Var):
                if x.name not in names:
                    names.append(x.name)
            elif x.key.startswith("_:"):
                return None
    vs = tuple(A.Var(n) for n in names)
    return A.Query(form="SELECT", pattern=A.Project(query.pattern, vs), vars=vs, dataset=query.dataset,
                   base=query.base, prefixes=query.prefixes)


def triples(template, names: list[str], rows: list, ctx) -> QueryResult:
    """The CONSTRUCT result of ``rows`` (tuples of term ids in ``names`` order, -1 unbound)."""
    if not rows:
        return QueryResult(form="CONSTRUCT", terms=ctx, triples=_EMPTY3)
    col = {n: j for j, n in enumerate(names)}
    spec = []
    for tp in template:
        spec.append([(True, col[x.name]) if isinstance(x, A.Var) else (False, ctx.term_id(x.key))
                     for x in (tp.s, tp.p, tp.o)])
    out = []
    for parts in spec:
        (vs, s), (vp, p), (vo, o) = parts
        for r in rows:
            out.append((r[s] if vs else s, r[p] if vp else p, r[o] if vo else o))
    m = np.array(out, dtype=np.int64)
    ok = (m >= 0).all(axis=1)
    ks = ctx.kinds(np.where(ok, m[:, 0], 0))
    kp = ctx.kinds(np.where(ok, m[:, 1], 0))
    ok &= ((ks == 0) | (ks == 1)) & (kp == 0)
    m = m[ok]
    # distinct, in order of first occurrence (the executor's _unique_rows), in Python: few rows
    seen = dict.fromkeys(map(tuple, m.tolist()))
    tr = np.array(list(seen), dtype=np.int64).reshape(-1, 3) if seen else _EMPTY3
    return QueryResult(form="CONSTRUCT", terms=ctx, triples=tr)
