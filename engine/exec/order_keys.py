"""ORDER BY keys read from a column instead of computed terms.

``ORDER BY STR(?x)`` over a column of IRIs orders its rows exactly as ``ORDER BY ?x``: an
IRI and its STR (a simple literal of the same characters) are both ordered by their code
points, equal strings are equal IRIs, and an unbound ``?x`` (STR of it an error, unbound)
is lowest either way; over a column of simple literals STR is the identity. So such a key
is the column itself, and no string is built and interned per row. Why: ``ORDER BY STR(?x)
LIMIT 4`` over 20k course IRIs spent 80 % of its time making and interning 20k strings that
only got ranked. Columns with any other
kind of term (blank nodes: STR is an error; typed or tagged literals: STR drops their
datatype or tag; a mix of IRIs and literals) keep the general path.
"""

from __future__ import annotations

import numpy as np

from engine.sparql.algebra import Call, Var

#: ORDER BY keys answered from their column (tests read it: the path is taken)
TAKEN = 0

_IRI, _LITERAL = 0, 2  # (kind codes, as ctx.kinds gives them)


def column_key(expr, res, ctx) -> np.ndarray | None:
    """The ids to rank for the ORDER BY key ``expr`` when they are a column of ``res``
    ordering as ``expr`` does (see the module docstring); None: evaluate ``expr``."""
    global TAKEN
    if not (isinstance(expr, Call) and expr.op == "STR" and len(expr.args) == 1 and isinstance(expr.args[0], Var)):
        return None
    name = expr.args[0].name
    if name not in res.cols:
        return None
    ids = np.asarray(res.col(name), dtype=np.int64)
    bound = ids[ids >= 0]
    if not len(bound):
        return None
    kinds = np.asarray(ctx.kinds(bound))
    if not (kinds == _IRI).all() and not ((kinds == _LITERAL).all() and _simple_literals(ctx, bound)):
        return None
    TAKEN += 1
    return ids


def _simple_literals(ctx, ids: np.ndarray) -> bool:
    """Whether every literal of ``ids`` is a simple one (its key ``"..."``: STR of it is
    itself; a tagged key ends in ``@tag``, a typed one in ``>``)."""
    import pyarrow.compute as pc  # noqa: PLC0415

    from engine.exec.bindings import distinct_inverse  # noqa: PLC0415
    from engine.exec.functions import _keys_arrow  # noqa: PLC0415

    uniq, _ = distinct_inverse(ids)
    keys = _keys_arrow(ctx, uniq)
    return bool(pc.all(pc.fill_null(pc.ends_with(keys, '"'), False)).as_py())
