"""LIMIT without ORDER BY from the first rows: a chunked evaluation that stops early.

Why: the evaluator is vectorized whole-column, so ``SELECT * WHERE { ?s ?p ?o } LIMIT 10``
scanned every triple (25 ms on 1M triples against Oxigraph's 0.03 ms) and an OPTIONAL or
FILTER under a LIMIT ran over every row of its input (14-40x Oxigraph's time) although any
LIMIT rows of the solutions are a correct answer.

How: when the Slice's input is a chain of row-local operators (projection, FILTER, BIND,
an OPTIONAL or join whose right side is explored from the left rows) over a leftmost BGP,
one variable end of one of that BGP's patterns splits the solutions: its values (a
predicate's distinct subjects from the index, or the subjects / objects next to a
constant; a variable predicate: each predicate's subjects with the predicate) are taken
in chunks (256, then doubling), each chunk seeds the BGP (which then answers only the
solutions binding that variable to a value of the chunk: each solution falls in exactly
one chunk, so the chunks' answers are disjoint and together the whole answer), and the
chain runs over that chunk's solutions; it stops once OFFSET + LIMIT rows are out (with
DISTINCT / REDUCED right under the Slice: distinct rows, kept distinct across chunks). A BGP
whose best splitting pattern has few values and whose whole exploration the planner
estimates small (e.g. anchored at a selective constant) keeps the whole evaluation: it is
cheap, and a selective join would need many chunks. Few values need not mean a small
answer (``?x ub:memberOf ?d . ?d ub:subOrganizationOf ?u . ?x ub:name ?n``: a few thousand
departments, hundreds of members each): such a BGP is chunked too, and the first chunk is
sized from the planner's estimate of the solutions per driving value (twice the rows the
Slice wants, at most FIRST_CHUNK values), so a LIMIT 3 over a fan-out of hundreds seeds one
value, not 256 (each next chunk still doubles: an estimate too high costs a few more chunks).

Past a UNION, a plain join, OPTIONAL or MINUS on the way down (the leftmost operand a UNION, a
sub-SELECT joined with more patterns, a MINUS): a UNION's solutions are its left branch's then
its right branch's, so each branch is a piece of its own (the other branch answering nothing
while it runs: the pieces are disjoint and together whole), chunked in turn when its own
leftmost BGP splits; the right side of a plain join / OPTIONAL / MINUS is the same for every
piece, so it is evaluated once and kept for the next pieces; a leftmost ``GRAPH ?g { ... }``
is a piece per named graph. The pieces run in order until OFFSET + LIMIT rows are out
(``{ ?x a A } UNION { ?x a B } LIMIT 15``: only the left branch).
"""

from __future__ import annotations

import numpy as np

from engine.exec.bindings import Bindings, concat
from engine.kv.graph import GraphIndex
from engine.kv.shard import Shard
from engine.plan.nodes import ExploreJoin, ExploreLeftJoin, PathJoin
from engine.plan.order import IN, OUT, plan_bgp
from engine.sparql import algebra as A

#: a driving pattern with fewer matches than this: the whole evaluation (cheap enough)
CHUNK_MIN_ROWS = 4096
#: the first chunk of driving rows; each next chunk is twice as large
FIRST_CHUNK = 256
#: how many Slices were answered by chunks (a spy for the tests)
TAKEN = [0]

_ROW_LOCAL = (A.Project, A.Filter, A.Extend)
_LEFT_LOCAL = (ExploreLeftJoin, ExploreJoin, PathJoin)
#: operators whose right side is evaluated whole, the same for every piece (kept once)
_RIGHT_KEPT = (A.Join, A.LeftJoin, A.Minus)


class Chunk:
    """What the evaluation of one piece is told (``Evaluator._chunk``): the leaf BGP and its
    seed (the chunk), the UNION branches that answer nothing in this piece, and the right
    sides evaluated once for all pieces, the one named graph of a ``GRAPH ?g``."""

    __slots__ = ("leaf", "seed", "skip", "kept", "memo", "graph")

    def __init__(self, leaf, seed, skip, kept, memo, graph=None):
        self.leaf, self.seed, self.skip, self.kept, self.memo = leaf, seed, skip, kept, memo
        self.graph = graph  # (id of a GRAPH ?g node, the one named graph it runs over) or None


def replaced(ev, node, ch: Chunk) -> Bindings | None:
    """A skipped UNION branch's empty answer, a kept right side's answer, else None."""
    key = id(node)
    if key in ch.skip:
        from engine.exec.evaluate import pattern_vars  # noqa: PLC0415

        return Bindings.empty(pattern_vars(node))
    if key in ch.kept:
        got = ch.memo.get(key)
        if got is None:
            ev._chunk = None  # (the right side whole: not this piece's chunk)
            try:
                got = ev.eval(node)
            finally:
                ev._chunk = ch
            ch.memo[key] = got
        return got
    return None


def _pieces(node, kept: set, named=()) -> list[tuple[frozenset, A.BGP | None, tuple | None]]:
    """[(ids of the UNION branches skipped, leftmost BGP or None, (GRAPH node id, graph id)
    or None)]: the pieces of ``node``'s solutions in order (a piece with a BGP is chunked by
    it when it splits, else whole; a ``GRAPH ?g`` leftmost: one piece per named graph of
    ``named``, each whole); ``kept`` collects the right sides evaluated once."""
    while True:
        if isinstance(node, _ROW_LOCAL):
            node = node.input
        elif isinstance(node, _LEFT_LOCAL):
            node = node.left
        elif isinstance(node, _RIGHT_KEPT):
            kept.add(id(node.right))
            node = node.left
        elif isinstance(node, A.Union) and node.left is not node.right:
            left, right = _pieces(node.left, kept, named), _pieces(node.right, kept, named)
            return ([(sk | {id(node.right)}, leaf, g) for sk, leaf, g in left]
                    + [(sk | {id(node.left)}, leaf, g) for sk, leaf, g in right])
        elif isinstance(node, A.BGP) and node.triples:
            return [(frozenset(), node, None)]
        elif isinstance(node, A.Graph) and isinstance(node.name, A.Var) and len(named) > 1:
            return [(frozenset(), None, (id(node), gid)) for gid in named]
        else:
            return [(frozenset(), None, None)]


def _driver(bgp: A.BGP, graph, lookup, estimate=None):
    """(variable, [(predicate id or None, sorted ids)], predicate variable or None,
    estimated solutions per value or None): the pattern whose one end's values split the
    solutions into chunks (every solution binds that end to exactly one value: the chunks'
    answers are disjoint and together whole), the one with the fewest values; None when no
    pattern has a variable end to split on, or the fewest is below CHUNK_MIN_ROWS and the
    whole exploration is estimated below it too (``estimate()``: (total rows of its steps,
    solutions); the whole evaluation is cheap then)."""
    best = None
    for t in bgp.triples:
        s, p, o = t.s, t.p, t.o
        sv, ov = isinstance(s, A.Var), isinstance(o, A.Var)
        if isinstance(p, A.Var):
            # every predicate's subjects, the predicate fixed with them
            if not (sv and ov) or len({s.name, p.name, o.name}) < 3:
                continue
            cand = (s.name, [(int(q), None) for q in graph.predicates().tolist()], p.name, graph.n_triples)
        else:
            pid = int(lookup(p.key))
            if pid < 0:
                return None  # no match at all: the whole evaluation is instant
            if sv and ov:
                if s.name == o.name:
                    continue
                cand = (s.name, [(pid, None)], None, graph.stats(pid).subjects)
            elif sv or ov:
                end = int(lookup((o if sv else s).key))
                if end < 0:
                    return None
                _, ids = graph.expand(pid, IN if sv else OUT, np.array([end], dtype=np.int64))
                ids = np.asarray(ids, dtype=np.int64)
                cand = ((s if sv else o).name, [(pid, ids)], None, len(ids))
            else:
                continue
        if best is None or cand[3] < best[3]:
            best = cand
    if best is None:
        return None
    got = estimate() if estimate is not None else None
    if best[3] < CHUNK_MIN_ROWS and (got is None or got[0] < CHUNK_MIN_ROWS):
        return None
    per = got[1] / max(1, best[3]) if got is not None else None
    return (*best[:3], per)


def _estimate(ev, bgp: A.BGP, graph, lookup):
    """(rows all the steps of ``bgp``'s unseeded exploration make, its solutions) as the
    planner estimates them; None when a constant is absent (no solution). The plan is the
    one the whole evaluation would run (kept in the snapshot's plan cache under
    run_bgp's key)."""
    triples = bgp.triples
    cache = getattr(ev.ctx, "plan_cache", None)
    key = (getattr(ev, "graph_key", None), id(triples), frozenset())
    entry = cache.get(key) if cache is not None else None
    if entry is None or entry.triples is not triples:
        entry = plan_bgp(triples, graph, lookup, frozenset())
        if cache is not None and key[0] is not None:
            cache[key] = entry
    if entry.estimates is None:
        return None
    return sum(entry.estimates), (entry.estimates[-1] if entry.estimates else 0.0)


def _chunks(graph, var: str, sources, pvar: str | None, first: int = 0, grow=(2,)):
    """Seeds of the splitting variable (and the predicate variable), ``first`` values (at
    most FIRST_CHUNK; 0: FIRST_CHUNK) then growing by ``grow[0]`` (read at each step:
    the caller quadruples after a chunk with no solution, an estimate that was too
    high), a predicate at a time."""
    size = min(first, FIRST_CHUNK) if first > 0 else FIRST_CHUNK
    for pid, ids in sources:
        for part in _subjects(graph, pid) if ids is None else (ids,):
            n = len(part)
            a = 0
            while a < n:
                b = min(n, a + size)
                cols = {var: part[a:b].astype(np.int64, copy=False)}
                if pvar is not None:
                    cols[pvar] = np.full(b - a, pid, dtype=np.int64)
                yield Bindings(cols, b - a)
                a = b
                size *= grow[0]


def _subjects(graph, pid: int):
    """The distinct subjects of ``pid``, as arrays to chunk in turn: a local store's
    shards' own sorted key arrays one after the other (disjoint: a vertex has one owner
    shard, and any order of the values makes disjoint chunks), not the merged sorted copy
    ``graph.index`` builds on its first use (a sort of all the predicate's subjects: 30 ms
    for the first LIMIT over a predicate of a 1M-triple store); other graphs' index."""
    if type(graph) is GraphIndex and graph.n_shards > 1 and all(type(sh) is Shard for sh in graph.shards):
        for sh in graph.shards:
            yield sh.index(pid, OUT)
    else:
        yield graph.index(pid, OUT)  # (sorted distinct subjects, kept by the index)


def _first(want: int, per: float | None) -> int:
    """The first chunk's values: twice the rows wanted over the estimated solutions per
    value (0: FIRST_CHUNK, no estimate or fewer than one solution per value)."""
    if per is None or per <= 1.0:
        return 0
    return max(1, int(2 * want / per) + 1)


def sliced(ev, node: A.Slice) -> Bindings | None:
    """The Slice's rows by chunks / pieces (see the module), None when its input is not such
    a chain (the caller evaluates it whole)."""
    if node.limit is None or node.limit <= 0:
        return None
    inner = node.input
    distinct = isinstance(inner, (A.Distinct, A.Reduced))
    if distinct:  # (the distinct rows so far kept across chunks)
        inner = inner.input
    graph = getattr(ev, "graph", None)  # (none: an evaluator over solutions already known)
    if graph is None:
        return None
    splits = all(hasattr(graph, x) for x in ("index", "expand", "stats", "predicates", "n_triples"))
    kept: set = set()
    dataset = getattr(ev, "dataset", None)
    pieces = _pieces(inner, kept, tuple(getattr(dataset, "named", None) or ()))
    lookup = ev.ctx.lookup

    def driver(leaf):
        if leaf is None or not splits:
            return None
        return _driver(leaf, graph, lookup, lambda: _estimate(ev, leaf, graph, lookup))

    first = driver(pieces[0][1]) if len(pieces) == 1 else None
    if len(pieces) == 1 and first is None:
        return None  # one piece, not split: the whole evaluation
    TAKEN[0] += 1
    want = node.offset + node.limit
    memo: dict = {}
    parts, have, res = [], 0, None
    for k, (skip, leaf, g) in enumerate(pieces):
        got = first if k == 0 and first is not None else driver(leaf)  # (when the piece is reached)
        grow = [2]
        seeds = (_chunks(graph, *got[:3], _first(want, got[3]), grow) if got is not None else (None,))
        for seed in seeds:
            ev._chunk = Chunk(leaf if seed is not None else None, seed, skip, kept, memo, g)
            try:
                res = ev.eval(inner)
            finally:
                ev._chunk = None
            grow[0] = 2 if res.n else 4
            if res.n:
                parts.append(res)
                if distinct:
                    parts = [concat(parts).distinct()]
                    have = parts[0].n
                else:
                    have += res.n
                if have >= want:
                    return concat(parts).slice(node.offset, node.limit)
    if not parts:  # no solution: the last piece's empty answer (its columns)
        return res.slice(node.offset, node.limit) if res is not None else ev.eval(node.input)
    return concat(parts).slice(node.offset, node.limit)
