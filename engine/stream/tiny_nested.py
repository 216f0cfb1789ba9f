"""Nested OPTIONALs on the small-window paths: ``P OPTIONAL { R OPTIONAL { K } }``.

Why: "the like, and the liker's age if known" is written as an OPTIONAL inside an OPTIONAL; the
generated instant (:mod:`engine.stream.tiny_gen`) and the maintained rows
(:mod:`engine.stream.maint_opt`) took independent OPTIONAL groups only, so such a query ran on
the ordinary path (~1-2x the composite peer).

How: the generated code evaluates the OPTIONAL groups one after the other, each over the row so
far, a group that matched nothing leaving its own variables at the id ``-1``, which no pattern
lookup finds. A nested group ``K`` placed right after its parent ``R`` (``sh.opt_parent``) with
``R``'s variables bound therefore matches nothing where ``R`` matched nothing, and otherwise
extends each of ``R``'s matches -- SPARQL's ``LeftJoin(P, LeftJoin(R, K, fk), fr)`` exactly
when (:func:`nested_ok`):

* ``K`` reads a variable of ``R`` that ``P`` does not bind (``R`` unmatched: ``-1`` there);
* ``K`` shares no variable with ``P`` or the other groups except through ``R`` (inside, ``K``
  joins ``R`` only; a variable of ``P`` ``R`` does not bind would be free there);
* ``K``'s FILTER reads variables of ``R`` and ``K`` only (``P``'s are out of its scope);
* ``R``'s FILTER reads none of ``K``'s own variables (it is evaluated with or without them:
  over ``R``'s matches either way).

Then ``fr`` decides over ``R``'s matches alone, as it does here, and a match of ``R`` with no
match of ``K`` passing ``fk`` keeps ``K``'s variables unbound, as here. Anything else is not
taken (the ordinary path). The parser's OPTIONAL inside an OPTIONAL is the only source: the
query itself is not rewritten, so the ordinary path evaluates the nested form as written.
"""

from __future__ import annotations

from engine.sparql import algebra as A

__all__ = ["nested_ok", "parent_vars"]


def _tv(triples) -> set:
    return {t.name for tp in triples for t in (tp.s, tp.o) if isinstance(t, A.Var)}


def nested_ok(sh, opts: list, rvars: set, seen: set, expr_vars) -> bool:
    """Whether the nested groups of ``opts`` (``sh.opt_parent``) are taken (see the module);
    ``seen``: the outer groups' own variables."""
    seen = set(seen)
    for g, p in sorted(sh.opt_parent.items()):
        if p in sh.opt_parent:
            return False   # (one level of nesting)
        ptr, pe = opts[p]
        ktr, ke = opts[g]
        pv, kv = _tv(ptr), _tv(ktr)
        own = kv - pv
        if not own or own & (rvars | seen) or not kv & (pv - rvars):
            return False
        if ke is not None and not expr_vars(ke) <= pv | kv:
            return False
        if pe is not None and expr_vars(pe) & own:
            return False
        seen |= own
    return True


def parent_vars(sh, pats, g: int) -> set:
    """The variables of group ``g``'s parent group (empty for an outer group)."""
    p = sh.opt_parent.get(g)
    if p is None:
        return set()
    return {x[1] for j in sh.opts[p][0] for x in (pats[j][0], pats[j][2]) if x[0] == "v"}
