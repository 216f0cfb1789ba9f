"""``s :p+ o`` / ``:p*`` / ``:p?`` over the stored graphs for the generated and maintained paths.

Why: a small-window query holding such a path took the ordinary path (~1-7x the composite):
the generated code (:mod:`engine.stream.tiny_gen`) reads plain triple patterns only. Here a
path of one IRI with ``+``, ``*`` or ``?`` is read as a pattern of its own ("closure class",
a pseudo predicate no triple holds) whose pairs are the path's pairs over the stored ``FROM``
graphs, computed once per store snapshot (:meth:`ClosureGen._stored`). That is exact while the
windows hold no triple of ``:p`` the stored graphs lack (the merged graph's ``:p`` edges are
then the stored ones): a pattern-less "guard" class of ``(?, :p, ?)`` matches the windows'
triples of ``:p``; one the stored part lacks hands the instant back (generated path) or drops
the maintained state (:mod:`engine.stream.maintained` runs :func:`guard_delta` for it).

Zero-length paths (``*``, ``?``) hold the identity on every term of the active graph, which
includes the windows' terms. Taken only where that identity is known from the stored part:
one end a constant ``c`` (the pair ``(c, c)``) and the other end a variable another pattern of
the same BGP binds, or both ends variables and one of them bound by another pattern of the same
BGP with the predicate ``:p`` itself (its values are then nodes of the stored ``:p`` edges, on
which the identity is added). Anything else is not rewritten (the ordinary path answers).
"""

from __future__ import annotations

from engine.sparql import algebra as A
from engine.stream import tiny_gen as _tg

__all__ = ["of", "rewrite", "relevant_patterns", "ClosureGen", "PSEUDO", "guard_delta", "taken_total"]

#: the pseudo predicate's key prefix (looked up as id -3: no triple holds it, tiny_gen.class_ids)
PSEUDO = "<urn:jindou:closure:"
_KINDS = {A.PathOneOrMore: "plus", A.PathZeroOrMore: "star", A.PathZeroOrOne: "opt"}
#: instants the generated code answered for a query with a closure class (tests: taken)
_TAKEN = [0]
#: instants handed back because a window held a triple of a closure's predicate (tests)
_GUARDED = [0]


def taken_total() -> tuple[int, int]:
    """(instants answered with a closure class, instants handed back by a guard)."""
    return _TAKEN[0], _GUARDED[0]


def _link(path):
    """(the IRI, inverse?) of ``:p`` / ``^:p``, else None."""
    if isinstance(path, A.PathLink):
        return path.iri, False
    if isinstance(path, A.PathInv) and isinstance(path.path, A.PathLink):
        return path.path.iri, True
    return None


def _flatten(node, out: list) -> bool:
    if isinstance(node, A.Join):
        return _flatten(node.left, out) and _flatten(node.right, out)
    if isinstance(node, A.BGP):
        out.extend(node.triples)
        return True
    if isinstance(node, A.PathPattern):
        out.append(node)
        return True
    return False


def _group(node):
    """A Join tree of BGPs and taken PathPatterns as one BGP (closures as pseudo patterns),
    or None when it holds none or one not taken."""
    items: list = []
    if not _flatten(node, items) or not any(isinstance(x, A.PathPattern) for x in items):
        return None
    plain = [x for x in items if isinstance(x, A.TriplePattern)]
    out = []
    for x in items:
        if isinstance(x, A.TriplePattern):
            out.append(x)
            continue
        kind = _KINDS.get(type(x.path))
        got = None if kind is None else _link(x.path.path)
        if got is None:
            return None
        iri, inv = got
        s, o = (x.o, x.s) if inv else (x.s, x.o)
        sv, ov = isinstance(s, A.Var), isinstance(o, A.Var)
        if not sv and not ov:
            return None
        if kind != "plus":
            if sv and ov and s.name == o.name:
                return None
            bound = {t.name for tp in plain for t in (tp.s, tp.o) if isinstance(t, A.Var)}
            if sv != ov:   # one constant end: the other bound by a pattern of the group
                if (s if sv else o).name not in bound:
                    return None
            else:          # both variables: one bound by a pattern of :p itself (identity on its nodes)
                own = {t.name for tp in plain if isinstance(tp.p, A.Const) and tp.p.key == f"<{iri}>"
                       for t in (tp.s, tp.o) if isinstance(t, A.Var)}
                if s.name not in own and o.name not in own:
                    return None
        out.append(A.TriplePattern(s, A.Const(f"{PSEUDO}{kind}:{iri}>"), o))
    return A.BGP(tuple(out))


def _walk(node):
    """``node`` with its closure groups rewritten (the same object where nothing changed)."""
    if isinstance(node, (A.Join, A.PathPattern)):
        g = _group(node)
        if g is not None:
            return g
    if not hasattr(node, "__dataclass_fields__") or isinstance(node, (A.BGP, A.TriplePattern)):
        return node
    changes = {}
    for f in node.__dataclass_fields__:
        v = getattr(node, f)
        # (not into GRAPH: its active graph is a named one, not the merged default graph)
        if isinstance(v, (A.Join, A.LeftJoin, A.Filter, A.Union, A.Minus, A.Extend, A.Group,
                          A.Project, A.Distinct, A.PathPattern, A.OrderBy, A.Slice, A.Reduced)):
            w = _walk(v)
            if w is not v:
                changes[f] = w
    if not changes:
        return node
    import dataclasses  # noqa: PLC0415

    return dataclasses.replace(node, **changes)


def rewrite(query: A.Query) -> A.Query | None:
    """``query`` with its taken closure paths as pseudo patterns, or None when it holds none
    (or one that is not taken: a PathPattern is left, which the generated code refuses)."""
    p = _walk(query.pattern)
    if p is query.pattern:
        return None
    import dataclasses  # noqa: PLC0415

    return dataclasses.replace(query, pattern=p)


def relevant_patterns(query: A.Query) -> list | None:
    """The triple patterns whose stream triples can change ``query``'s result when its paths
    are all taken here (the relevance check, :func:`engine.stream.delta.relevant_predicates`):
    its triple patterns and ``(?, :p, ?)`` per closure (a zero-length identity taken here is
    bounded by the group's other patterns, so no other triple changes it); else None."""
    from engine.stream.delta import query_patterns  # noqa: PLC0415 -- (delta imports the executor)

    rq = rewrite(query)
    pats = None if rq is None else query_patterns(rq)
    if pats is None:
        return None
    return [A.TriplePattern(A.Var(" s"), A.Const(f"<{tp.p.key[len(PSEUDO):-1].split(':', 1)[1]}>"), A.Var(" o"))
            if isinstance(tp.p, A.Const) and tp.p.key.startswith(PSEUDO) else tp for tp in pats]


def of(query: A.Query, mode: str):
    """The generated instant (:class:`ClosureGen`) of ``query`` when it holds closure paths
    taken here and is otherwise of a form :class:`~engine.stream.tiny_gen.GenQuery` takes."""
    rq = rewrite(query)
    if rq is None:
        return None
    return _tg.GenQuery.of(rq, mode, ClosureGen)


def guard_delta(ns: dict):
    """The maintained state's delta function of a guard class: a window triple of a closure's
    predicate the stored part lacks drops the state (the stored part's own are added while
    ``SCON`` is False: those are the closure's edges)."""
    def guard(s, p, o, sign, V):
        if ns["SCON"]:
            raise ns["_Drop"]
        return 0
    return guard


class _Back(Exception):
    """A window holds a triple of a closure's predicate the stored part lacks."""


class ClosureGen(_tg.GenQuery):
    """A :class:`GenQuery` with closure classes (pairs from the stored graphs) and guard classes."""

    def __init__(self, sh):
        super().__init__(sh)
        # closure class -> (kind, its guard class); guard classes: (?, :p, ?) without a pattern
        self.closures: dict = {}
        guards: dict = {}
        for c, (_, p, _, _) in enumerate(list(self.classes)):
            if p.startswith(PSEUDO):
                kind, iri = p[len(PSEUDO):-1].split(":", 1)
                key = (None, f"<{iri}>", None, False)
                if key not in guards:
                    guards[key] = len(self.classes)
                    self.classes.append(key)
                self.closures[c] = (kind, guards[key])
        self.guards = tuple(guards.values())

    def _window(self, spec: list) -> list:
        M = super()._window(spec)
        sidx = self._sidx[1] if self._sidx is not None else None
        for g in self.guards:
            if M[g] and (sidx is None or any(k not in sidx[g][0] for k in M[g])):
                _GUARDED[0] += 1
                raise _Back
        return M

    def run(self, ctx, graphs: list, spec: list):
        try:
            out = super().run(ctx, graphs, spec)
        except _Back:
            return None
        if out is not None:
            _TAKEN[0] += 1
        return out

    def _stored(self, snap, graphs: list):
        got = self._sidx
        out = super()._stored(snap, graphs)
        if out is None or (got is not None and self._sidx is got):
            return out
        total = sum(len(e[0]) for c, e in enumerate(out) if c not in self.closures)
        for c, (kind, g) in self.closures.items():
            cs, _, co = self._ids[2][c]
            pairs = _pairs(kind, out[g][3], cs, co, self.classes[c][3], _tg.STORED_LIMIT - total)
            if pairs is None:
                self._sidx = (self._sidx[0], None)
                return None
            total += len(pairs)
            out[c] = [pairs, None, None, list(pairs)]
        return out


def _pairs(kind: str, edges: list, cs, co, same: bool, limit: int) -> dict | None:
    """The path's pairs over the stored ``edges`` ((s, o) ids): ``cs`` / ``co`` a constant end's
    id (-2: absent) or None; None when more than ``limit`` pairs or steps."""
    fwd: dict = {}
    back: dict = {}
    for s, o in edges:
        fwd.setdefault(s, []).append(o)
        back.setdefault(o, []).append(s)
    out: dict = {}
    work = [0]

    def reach(x, adj) -> list | None:
        if kind == "opt":
            return list(adj.get(x, ()))
        seen: dict = {}
        todo = list(adj.get(x, ()))
        while todo:
            y = todo.pop()
            if y in seen:
                continue
            seen[y] = None
            work[0] += 1
            if work[0] > 4 * limit:
                return None
            todo.extend(adj.get(y, ()))
        return list(seen)

    if cs is not None:
        ys = reach(cs, fwd) if cs >= 0 else []
        if ys is None:
            return None
        out.update(((cs, y), None) for y in ys)
        if kind != "plus" and cs >= 0:
            out[cs, cs] = None
    elif co is not None:
        xs = reach(co, back) if co >= 0 else []
        if xs is None:
            return None
        out.update(((x, co), None) for x in xs)
        if kind != "plus" and co >= 0:
            out[co, co] = None
    else:
        for x in fwd:
            ys = reach(x, fwd)
            if ys is None:
                return None
            out.update(((x, y), None) for y in ys)
            if len(out) > limit:
                return None
        if kind != "plus":   # the identity on the stored :p edges' nodes (see the module)
            for n in (*fwd, *back):
                out[n, n] = None
    if same:
        out = {k: None for k in out if k[0] == k[1]}
    return out if len(out) <= limit else None
