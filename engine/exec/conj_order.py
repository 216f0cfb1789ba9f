"""Which operand of a ``&&`` / ``||`` the vectorized evaluator tests first.

SPARQL's ``&&`` and ``||`` are commutative, errors included (``F && E = E && F = F``,
``T || E = E || T = T``, ``E && T = T && E = E``; SPARQL 1.1, 17.2), so the evaluator may
test the cheaper operand first and the dearer one only over the rows the first left
undecided (``functions._Evaluator._bools_where``). Why: ``REGEX(?e, "...") && STRLEN(?e) < 38``
as written ran the regular expression over all 150k e-mails; the length test first
leaves it a few hundred. The cost is a static weight per operator (a regular
expression or an EXISTS dwarfs a comparison); operands of equal weight keep the
written order.
"""

from __future__ import annotations

from engine.sparql.algebra import Call, Exists, FunctionCall

#: (tier, weight) per operator: comparisons, arithmetic and tests of ids are tier 0, functions
#: that read or build strings tier 1, regular expressions tier 2, EXISTS (a graph read per
#: solution) tier 3; an expression's tier is its dearest operator's, its weight the sum
_TIER = {"REGEX": 2, "REPLACE": 2}
_STRINGS = frozenset({"STR", "CONTAINS", "STRSTARTS", "STRENDS", "STRLEN", "LANGMATCHES", "STRLANG", "STRDT", "IRI"})
#: tier-1 functions that build a new string per value weigh more than tests of one
_BUILDERS = {"LCASE": 3, "UCASE": 3, "CONCAT": 3, "SUBSTR": 3, "STRBEFORE": 3, "STRAFTER": 3,
             "ENCODE_FOR_URI": 3, "MD5": 3, "SHA1": 3, "SHA256": 3, "SHA384": 3, "SHA512": 3}

#: how many times an operand pair was swapped (tests read it: the reordering is taken)
SWAPS = 0

_COST: dict[int, tuple[object, tuple[int, int]]] = {}


def cost(expr) -> tuple[int, int]:
    """(tier, weight) of evaluating ``expr`` over a column (memoized per expression object)."""
    got = _COST.get(id(expr))
    if got is not None and got[0] is expr:
        return got[1]
    if isinstance(expr, Exists):
        c = (3, 1)
    elif isinstance(expr, Call | FunctionCall):
        op = expr.op if isinstance(expr, Call) else None
        weight = _BUILDERS.get(op, 1)
        tier = _TIER.get(op, 1 if (op in _STRINGS or op is None or weight > 1) else 0)
        for a in expr.args:
            t, w = cost(a)
            tier = max(tier, t)
            weight += w
        c = (tier, weight)
    else:
        c = (0, 0)
    if len(_COST) > 4096:
        _COST.clear()
    _COST[id(expr)] = (expr, c)
    return c


def ordered(left, right) -> tuple:
    """(first, second): the operands of a commutative ``&&`` / ``||``, the cheaper first. Two
    tier-0 operands (comparisons, arithmetic) keep their order: testing the second over the
    first's undecided rows only costs more than a whole column of a comparison saves."""
    global SWAPS
    lc = cost(left)
    if lc[0] == 0:
        return left, right
    if cost(right) < lc:
        SWAPS += 1
        return right, left
    return left, right
