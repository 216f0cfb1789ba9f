"""Which operand of a ``&&`` / ``||`` the vectorized evaluator tests first.

SPARQL's ``&&`` and ``||`` are commutative, errors included (``F && E = E && F = F``,
``T || E = E || T = T``, ``E && T = T && E = E``; SPARQL 1.1, 17.2), so the evaluator may
test the cheaper operand first and the dearer one only over the rows the first left
undecided (``functions._Evaluator._bools_where``). Why: ``REGEX(?e, "Professor1") &&
?a > 65`` as written ran the regular expression over every e-mail of the join (2.7x slower
than the comparison first, which leaves it 1 row in 20). The cost is a static tier per operator (a regular
expression or an EXISTS dwarfs a comparison); equal costs keep the written order.
"""

from __future__ import annotations

from engine.sparql.algebra import Call, Exists, FunctionCall

#: (tier, weight) per operator: comparisons, arithmetic, tests of ids and of strings (STR,
#: STRSTARTS, CONTAINS, STRLEN: reads of the values) are tier 0, functions that build a new
#: string per value tier 1, regular expressions tier 2, EXISTS (a graph read per solution)
#: tier 3; an expression's tier is its dearest operator's, its weight the sum. Only a higher
#: tier is worth moving behind: between tier-0 tests the written order may be the
#: selective one (``STRSTARTS(STR(?o), "x") && ?o > 3``: the test narrows the comparison)
_TIER = {"REGEX": 2, "REPLACE": 2}
_BUILDERS = frozenset({"LCASE", "UCASE", "CONCAT", "SUBSTR", "STRBEFORE", "STRAFTER", "ENCODE_FOR_URI",
                       "MD5", "SHA1", "SHA256", "SHA384", "SHA512"})

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
        tier = _TIER.get(op, 1 if op in _BUILDERS else 0)
        weight = 1
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
    """(first, second): the operands of a commutative ``&&`` / ``||``, the cheaper first; a
    tier-0 left operand keeps its place (see _TIER)."""
    global SWAPS
    lc = cost(left)
    if lc[0] == 0:
        return left, right
    if cost(right) < lc:
        SWAPS += 1
        return right, left
    return left, right
