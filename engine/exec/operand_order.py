"""Which operand of a ``&&`` / ``||`` the column evaluator runs first.

``_Evaluator.bools`` runs the left operand over every row and the right one only over the
rows the left did not decide (F && x = F, T || x = T: ``_bools_where``). SPARQL's ``&&`` and
``||`` are commutative, errors included (T && E = E && T = E, F && E = E && F = F, likewise for
``||``), so running the cheaper operand first gives the same answer and leaves the costly one
the fewer rows: ``FILTER(CONTAINS(LCASE(?e), "x") && !STRSTARTS(?e, "U"))`` over 72k e-mails
ran the substring search (Arrow's byte-by-byte matcher) and the case mapping over all of them
(33 ms); the prefix test first leaves them a quarter (16 ms). The cost is a static guess per
operation (substring and regex searches, case mapping and string building above prefix tests,
comparisons and type tests); an operand that draws random values or fresh blank nodes keeps
its place (the order would change which rows draw).
"""

from __future__ import annotations

from engine.sparql.algebra import Call, Exists, FunctionCall

__all__ = ["SWAPPED", "cost", "right_first"]

#: how many times the right operand went first (a test's spy)
SWAPPED = [0]
#: a left operand at least this costly (a substring search) may give way
COSTLY = 20

_OP_COST = {
    "REGEX": 50, "REPLACE": 50,
    "CONTAINS": 20, "STRBEFORE": 20, "STRAFTER": 20,
    "LCASE": 10, "UCASE": 10, "ENCODE_FOR_URI": 10, "SUBSTR": 10, "CONCAT": 10, "STRLEN": 10,
    "MD5": 10, "SHA1": 10, "SHA256": 10, "SHA384": 10, "SHA512": 10, "STRLANG": 10, "STRDT": 10,
    "IRI": 10, "URI": 10,
    "STRSTARTS": 5, "STRENDS": 5, "STR": 5, "LANG": 5, "DATATYPE": 5, "LANGMATCHES": 5,
}
_CHEAP = frozenset({"=", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "NEG", "POS", "!", "&&", "||",
                    "IN", "NOT IN", "BOUND", "SAMETERM", "ISIRI", "ISURI", "ISBLANK", "ISLITERAL", "ISNUMERIC",
                    "IF", "COALESCE", "ABS", "FLOOR", "CEIL", "ROUND"})
_DRAWS = frozenset({"RAND", "BNODE", "UUID", "STRUUID"})


def cost(expr) -> int:
    """A static guess of what evaluating ``expr`` over a column costs (relative units)."""
    if isinstance(expr, Exists):
        return 1000
    if isinstance(expr, Call):
        own = 1 if expr.op in _CHEAP else _OP_COST.get(expr.op, 10)
        return own + sum(cost(a) for a in expr.args)
    if isinstance(expr, FunctionCall):
        return 10 + sum(cost(a) for a in expr.args)
    return 0


def _draws(expr) -> bool:
    if isinstance(expr, Call):
        return expr.op in _DRAWS or any(_draws(a) for a in expr.args)
    if isinstance(expr, FunctionCall):
        return any(_draws(a) for a in expr.args)
    return False


def right_first(left, right) -> bool:
    """Whether the right operand of a ``&&`` / ``||`` should run first: the left one is a
    costly search (a substring, regex or EXISTS; cheap tests stay in the written order, which
    may be the more selective one) and the right one costs at most half of it, and neither
    draws random values or fresh terms."""
    c = cost(left)
    if c < COSTLY or 2 * cost(right) > c or _draws(left) or _draws(right):
        return False
    SWAPPED[0] += 1
    return True
