"""The fast path of a point lookup: one triple pattern with a variable
predicate and a constant end (``<s> ?p ?o``, ``?s ?p <o>``, ``<s> ?p <o>``).

The general evaluator answers it by testing every predicate's index for the
vertex and then stepping each candidate predicate with numpy tables: a dozen
numpy calls per predicate for a handful of rows. Here the program holds the
graph's :class:`PointSource`: per predicate, the in-process one-vertex lookup
(``GraphIndex.local_lookup``, a slice of the CSR neighbour lists), and the
vertex -> predicates index (:mod:`engine.kv.vertex_preds`) that names the
predicates the vertex has, and walks those with plain Python: one lookup per
predicate the vertex has (every predicate until the index is built), rows as
tuples; with the graph's vertex -> (predicate, neighbour) edge index (always
there for a store's graphs; for others built in the background once the
lookups have paid for it), a vertex's rows are one slice of it, and
``<s> ?p <o>`` one scan of the subject's edges for the object.
Rows come out in the evaluator's order
(predicates ascending, neighbours ascending within one) and, past
``limit`` rows, the step is handed to the vectorized executor
(:meth:`PointProgram.finish`) like :class:`engine.exec.bgp.SmallBGP` does.
The program has SmallBGP's interface, so :func:`engine.exec.evaluate.run_fast`
runs it (projection, DISTINCT, slice) unchanged.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from engine.exec.bgp import _step
from engine.exec.bindings import Bindings
from engine.exec.context import LOCAL_BASE, charge_rows
from engine.exec.result import QueryResult
from engine.kv import vertex_preds
from engine.kv.shard import has_neighbour
from engine.kv.vertex_preds import EDGE_NB, EDGE_PID
from engine.plan.order import IN, OUT
from engine.sparql.algebra import Const

#: up to this many predicates a graph's point lookups may probe every predicate
#: (while its vertex -> predicates index is not built yet); above it they need the index
MAX_PREDICATES = 256
#: a graph's vertex -> predicates index is built once the graph has served as
#: many point lookups the probe-every-predicate way as the build costs: ~BUILD_NS
#: a (vertex, predicate) pair (measured 15-45 ms for 760k pairs, 2 busy cores)
#: against ~PROBE_NS per predicate probed in vain. A rent-or-buy rule: a
#: write-heavy store does not rebuild an index per snapshot for a handful of
#: lookups, a read-mostly one pays at most about twice the better choice
BUILD_NS = 45
PROBE_NS = 700
#: the same rule for the vertex -> (predicate, neighbour) edge index (all of a
#: vertex's rows in one slice, :class:`engine.kv.vertex_preds.VertexEdges`): ~EDGE_BUILD_NS
#: a triple to build (measured 25-90 ms for 1M triples, 2 busy cores) against the
#: rent of the lookups made without it: ~EDGE_PROBE_NS per predicate probed (a LUBM
#: entity's ~11 probes with their rows: 13 µs, against 2 µs with the index). It is
#: built in a background thread once the rent paid reaches the build's cost, so the
#: lookups go on meanwhile (the event loop never waits for it)
EDGE_BUILD_NS = 50
EDGE_PROBE_NS = 1100
#: ... and not before this many lookups (a thread's start costs ~20 lookups' savings)
EDGE_MIN_USES = 64


#: ``<s> ?p <o>`` through the edge index scans the subject's edges for the object up to
#: this many (one slice, one conversion); a vertex with more probes each of its
#: predicates by binary search instead
EDGE_SCAN_MAX = 4096
#: ... in plain Python up to this many edges, with numpy above
PY_SCAN_MAX = 48
_NB_MAX = int(np.iinfo(np.int32).max)


def _preds_to(packed: np.ndarray, o: int) -> list[tuple]:
    """[(pid,)] of the edges to neighbour ``o`` among one vertex's packed edges
    (:class:`engine.kv.vertex_preds.VertexEdges`; pid ascending, each once)."""
    if not 0 <= o <= _NB_MAX:  # (the index holds 31-bit ids only: no such neighbour)
        return []
    halves = packed.view(np.int32)
    if len(packed) <= PY_SCAN_MAX:  # plain Python beats numpy's per-call overhead on a few edges
        flat = halves.tolist()
        return [(p,) for p, x in zip(flat[EDGE_PID::2], flat[EDGE_NB::2], strict=True) if x == o]
    pairs = halves.reshape(-1, 2)
    return [(p,) for p in pairs[pairs[:, EDGE_NB] == o, EDGE_PID].tolist()]


def _spawn(fn) -> None:
    """Run ``fn`` in a background thread (the edge index build)."""
    threading.Thread(target=fn, name="jindou-vertex-edges", daemon=True).start()


class _Fns(dict):
    """pid -> the graph's one-vertex lookup, filled on first use (weak: the
    source must not keep its graph alive)."""

    __slots__ = ("ref", "direction")

    def __missing__(self, pid: int):
        g = self.ref()
        f = g.local_lookup(pid, self.direction) if g is not None else None
        if f is None:  # (no in-process lookup after all: the batched call, one vertex)
            ref, d = self.ref, self.direction

            def f(v: int) -> np.ndarray:
                return ref().expand(pid, d, np.array([v], dtype=np.int64))[1]
        self[pid] = f
        return f


class PointSource:
    """The probes of one graph in one direction: every predicate's lookup in
    ascending pid order (``every``; None above MAX_PREDICATES) and, once built,
    the vertex -> predicates index (:mod:`engine.kv.vertex_preds`) that narrows
    them to the predicates the vertex has. Immutable graph -> exact for it."""

    __slots__ = ("ref", "direction", "every", "fns", "index", "uses", "build_after", "edges", "edge_uses",
                 "edge_rent", "edge_cost", "__weakref__")

    def __init__(self, graph, direction: int, every: list | None):
        self.ref = weakref.ref(graph)
        self.direction = direction
        self.every = every
        self.fns = _Fns(every or ())
        self.fns.ref, self.fns.direction = self.ref, direction
        self.index = vertex_preds.cached(graph, direction)
        self.uses = 0
        self.build_after = 0 if not every else (
            vertex_preds.estimated_pairs(graph, direction) * BUILD_NS // (len(every) * PROBE_NS))
        self.edges = vertex_preds.cached_edges(graph, direction)
        self.edge_uses = 0
        self.edge_rent = 0
        self.edge_cost = vertex_preds.estimated_triples(graph) * EDGE_BUILD_NS

    def edge_index(self, probes: int):
        """The graph's edge index in this direction once built, else None; counts the
        rent of a point lookup made without it (``probes`` predicates probed) and starts
        its build (a background thread) when the lookups have cost what the build does."""
        e = self.edges
        if e is not None:
            return e
        g = self.ref()
        if g is not None and (e := vertex_preds.cached_edges(g, self.direction)) is not None:
            self.edges = e  # (a store's graph: its carried index, built after this source was made)
            return e
        # (racy counts: a lost increment only delays the build)
        self.edge_uses += 1
        self.edge_rent += probes * EDGE_PROBE_NS
        if self.edge_rent >= self.edge_cost and self.edge_uses >= EDGE_MIN_USES:
            self.edge_cost = 1 << 62  # (started: once)
            _spawn(self._build_edges)
        return None

    def _build_edges(self) -> None:
        g = self.ref()
        if g is not None:
            self.edges = vertex_preds.vertex_edges(g, self.direction)

    def _build(self):
        g = self.ref()
        if g is None:
            return None
        self.index = idx = vertex_preds.vertex_predicates(g, self.direction)
        if idx is None:
            self.build_after = 1 << 62  # above the budget: probe every predicate for good
        return idx

    def usable(self) -> bool:
        """Whether lookups can be answered (every predicate, or the index, built now if need be)."""
        return self.every is not None or self.index is not None or self._build() is not None

    def lookups_of(self, v: int) -> list:
        """[(pid, v -> sorted neighbours)] covering every predicate ``v`` has in
        this direction, ascending pid (:meth:`usable` must hold)."""
        idx = self.index
        if idx is None:
            if self.uses < self.build_after:
                self.uses += 1  # (racy count: a lost increment only delays the build)
                return self.every
            idx = self._build()
            if idx is None:
                return self.every
        fns = self.fns
        return [(pid, fns[pid]) for pid in idx.preds_of(v).tolist()]


_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def point_source(graph, direction: int) -> PointSource | None:
    """The graph's :class:`PointSource` for ``direction``, kept per graph index
    (immutable: a commit makes a new one); None for a graph without in-process
    lookups (a view, a cluster's remote shards: the general path)."""
    per = _SOURCES.get(graph)
    if per is None:
        per = {}
        try:
            _SOURCES[graph] = per
        except TypeError:  # an index that cannot be weakly referenced: no fast path
            return None
    hit = per.get(direction, False)
    if hit is not False:
        return hit
    src = None
    if graph.local_lookup(0, OUT) is not None:
        preds = graph.predicates()
        every: list | None = None
        if len(preds) <= MAX_PREDICATES:
            every = []
            for pid in preds.tolist():
                f = graph.local_lookup(pid, direction)
                if f is None:
                    every = None
                    break
                every.append((pid, f))
            if every is None:
                per[direction] = None
                return None
        src = PointSource(graph, direction, every)
    per[direction] = src
    return src


def is_point(triples) -> bool:
    """One pattern, a variable predicate, a constant end, no variable repeated."""
    if len(triples) != 1:
        return False
    s, p, o = triples[0].s, triples[0].p, triples[0].o
    if isinstance(p, Const) or not (isinstance(s, Const) or isinstance(o, Const)):
        return False
    names = [t.name for t in (s, p, o) if not isinstance(t, Const)]
    return len(names) == len(set(names))


class PointProgram:
    """A compiled point lookup (SmallBGP's interface: ``slots``, ``steps``,
    ``run``, ``finish``, ``empty``, ``starts_big``)."""

    __slots__ = ("slots", "steps", "rtriples", "widths", "empty", "starts_big", "src", "const", "other",
                 "pfirst")

    def __init__(self, slots, rtriple, src: PointSource, const: int, other: int | None, pfirst: bool, empty: bool = False):
        self.slots = slots
        self.steps = [None]
        self.rtriples = [rtriple]
        self.widths = [0]
        self.empty = empty
        self.starts_big = False
        self.src = src          # the graph's probes from the constant end's direction
        self.const = const      # the constant end's id (the lookups' direction starts there)
        self.other = other      # the other end's id when both ends are constants
        self.pfirst = pfirst    # rows are (pid, neighbour) (else (neighbour, pid))

    def run(self, rows: list[tuple], limit: int) -> tuple[list[tuple], int]:
        if self.empty:
            return [], 1
        c = self.const
        out: list[tuple] = []
        src = self.src
        if self.other is not None:  # <s> ?p <o>: the predicates between two constants
            o = self.other
            edges = src.edges
            if edges is None:
                lookups = src.lookups_of(c)
                edges = src.edge_index(len(lookups))
            if edges is not None:
                packed = edges.edges_of(c)
                if len(packed) <= EDGE_SCAN_MAX:
                    return _preds_to(packed, o), 1
                lookups = src.lookups_of(c)  # a big vertex: a binary search per predicate it has
            for pid, f in lookups:
                if has_neighbour(f(c), o):
                    out.append((pid,))
            return out, 1
        lookups = () if src.edges is not None else src.lookups_of(c)
        pfirst = self.pfirst
        edges = self.src.edges or self.src.edge_index(len(lookups))
        if edges is not None:  # all of the vertex's rows in one slice, (pid, neighbour) ascending
            flat = edges.flat_of(c, limit)  # (neighbour, pid) int32 halves of each edge
            if flat is None:  # many rows: the vectorized step from the seed row
                return rows, 0
            if pfirst:
                return list(zip(flat[EDGE_PID::2], flat[EDGE_NB::2], strict=True)), 1
            return list(zip(flat[EDGE_NB::2], flat[EDGE_PID::2], strict=True)), 1
        for pid, f in lookups:
            nb = f(c)
            if len(nb):
                if pfirst:
                    out += [(pid, x) for x in nb.tolist()]
                else:
                    out += [(x, pid) for x in nb.tolist()]
                if len(out) > limit:  # many rows: the vectorized step from the seed row
                    return rows, 0
        return out, 1

    def finish(self, rows: list[tuple], k: int, graph, max_rows, check=None) -> Bindings:
        if k >= 1:
            return Bindings.from_rows(self.slots, rows)
        if check is not None:
            check()
        cols, n = _step({}, 1, self.rtriples[0], graph, max_rows)
        return Bindings(cols, n)

    def rebound(self, old: int, new: int) -> PointProgram:
        """This program for the constant ``new`` where it had ``old``."""
        rt = tuple(("c", new) if e[0] == "c" and e[1] == old else e for e in self.rtriples[0])
        return PointProgram(self.slots, rt, self.src, new if self.const == old else self.const,
                            new if self.other == old else self.other, self.pfirst)


def compile_point(fast, graph, lookup):
    """(program, output slots) of a point lookup's fast shape over ``graph``, or
    None (the general path): a graph without in-process lookups, or with more
    than MAX_PREDICATES predicates and no vertex -> predicates index (above its budget)."""
    t = fast.triples[0]
    s, p, o = t.s, t.p, t.o
    src = point_source(graph, OUT if isinstance(s, Const) else IN)
    if src is None or not src.usable():
        return None
    ids = {}
    for term in (s, o):
        if isinstance(term, Const):
            ids[term.key] = lookup(term.key)
    rt = tuple(("c", int(ids[x.key])) if isinstance(x, Const) else ("v", x.name) for x in (s, p, o))
    if isinstance(s, Const) and isinstance(o, Const):
        slots = [p.name]
        const, other, pfirst = ids[s.key], ids[o.key], True
    elif isinstance(s, Const):
        slots = [p.name, o.name]
        const, other, pfirst = ids[s.key], None, True
    else:
        slots = [s.name, p.name]
        const, other, pfirst = ids[o.key], None, False
    empty = any(v < 0 for v in ids.values())
    prog = PointProgram(slots, rt, src, int(const), None if other is None else int(other), pfirst, empty)
    if fast.names is None:
        return prog, ()
    pos = {v: i for i, v in enumerate(slots)}
    return prog, tuple(pos.get(v) for v in fast.names)


#: a DESCRIBE answered tuple at a time stops here and the vectorized one runs instead
DESCRIBE_ROWS = 512
#: ... and is tried for at most this many resources (``DESCRIBE ?x WHERE ...``'s solutions)
DESCRIBE_RESOURCES = 64


class Described(QueryResult):
    """A DESCRIBE answered tuple at a time (:func:`describe_small`): its triples in the
    general DESCRIBE's order (by round, subject, predicate, object). Through the edge
    index they are ``runs``, one per subject: (subject, None, its packed edges' int32
    halves as a list), which the small writers read as they are (the lane's N-Triples:
    ``engine.small_answers.graph_ntriples``); the ``triples`` array the other writers
    read is built from them on first use."""

    # (a DESCRIBE's fields other than its triples are constants: class attributes, so an
    # answer sets four attributes, not ten)
    form = "DESCRIBE"
    vars = ()
    columns = ()
    boolean = None
    ordered = False
    n_rows = 0

    def __init__(self, terms, runs: list | None, n: int, triples: np.ndarray | None = None):
        self.terms = terms
        self.runs = runs
        self.n = n
        self._triples = triples

    def __len__(self) -> int:
        return self.n

    def flat_rows(self) -> list[int]:
        """The triples as one flat list (s, p, o, s, p, o...), read from the runs' lists."""
        if self.runs is None:
            return self.triples.ravel().tolist()
        out: list[int] = []
        for s, _, f in self.runs:
            m = len(f) >> 1
            rows = [s] * (3 * m)
            rows[1::3] = f[EDGE_PID::2]
            rows[2::3] = f[EDGE_NB::2]
            out += rows
        return out

    @property
    def triples(self) -> np.ndarray:
        t = self._triples
        if t is None:
            t = self._triples = np.array(self.flat_rows(), dtype=np.int64).reshape(-1, 3)
        return t


def describe_small(ids: list[int], graph, terms, check=None) -> Described | None:
    """The triples of ``DESCRIBE`` of a few constant resources (store ids),
    as :func:`engine.exec.evaluate.describe` answers them (outgoing triples,
    closed over blank-node objects, in its order: by round, resource,
    predicate, object), walking the one-vertex lookups with plain
    Python (only the predicates each resource has, once the graph's vertex ->
    predicates index is built; each resource's triples in one slice once the
    edge index is, whose build its probes count toward as point lookups'
    do); None when the graph has no in-process lookups,
    too many predicates for probing each and no index, or the description
    passes DESCRIBE_ROWS triples (the vectorized one answers then)."""
    src = point_source(graph, OUT)
    if src is None or not src.usable():
        return None
    frontier = sorted({i for i in ids if 0 <= i < LOCAL_BASE})
    if src.edges is not None:
        return _describe_edges(frontier, src.edges, terms, check)
    seen: set[int] = set()
    rows: list[tuple[int, int, int]] = []
    while frontier:
        if check is not None:
            check()
        seen.update(frontier)
        objs = []
        # (resource, pid) ascending: the frontier is sorted, each one's predicates ascending
        probes = [(pid, v, f) for v in frontier for pid, f in src.lookups_of(v)]
        src.edge_index(len(probes))  # (a DESCRIBE rents the edge index as point lookups do)
        for pid, v, f in probes:
            nb = f(v)
            if len(nb):
                got = nb.tolist()
                objs += got
                rows += [(v, pid, x) for x in got]  # (a round's triples are new: new subjects)
                if len(rows) > DESCRIBE_ROWS:
                    return None
        charge_rows(len(rows), 3 + 3, "DESCRIBE")
        if not objs:
            break
        cand = sorted(set(objs))  # (a few ids: Python's set beats a numpy unique)
        kinds = terms.kinds(np.asarray(cand, dtype=np.int64)).tolist()
        frontier = [x for x, k in zip(cand, kinds, strict=True) if k == 1 and x not in seen]
    return Described(terms, None, len(rows), np.asarray(rows, dtype=np.int64).reshape(-1, 3))


#: kinds (0 IRI, 1 blank node, 2 literal) of store ids kept per store dictionary
#: (its ids keep their meaning: it only grows); at most this many (then restarted)
KINDS_KEPT = 1 << 16
#: (weak reference to the dictionary, id -> kind), replaced as one (never cleared in place:
#: other threads read it; weak: a dropped store's dictionary is not kept alive by it)
_KINDS: tuple = (lambda: None, {})


def kinds_kept(d, ids: list[int]) -> list[int]:
    """The kinds of the store ids ``ids`` (of dictionary ``d``): a DESCRIBE's objects
    are mostly terms other answers named before (the same departments, courses,
    classes), so each id's kind is read from the dictionary once and kept (a dict
    lookup per id against ~3 µs of small-array numpy per call); misses are read by
    one dictionary call."""
    global _KINDS
    ref, table = _KINDS
    if ref() is not d or len(table) > KINDS_KEPT:
        table = {}
        try:
            _KINDS = (weakref.ref(d), table)
        except TypeError:  # (not weakly referable: nothing kept)
            return d.kinds(np.asarray(ids, dtype=np.int64)).tolist()
    try:
        return list(map(table.__getitem__, ids))
    except KeyError:
        miss = sorted(set(ids).difference(table))
        got = d.kinds(np.asarray(miss, dtype=np.int64)).tolist()
        new = dict(zip(miss, got, strict=True))
        table.update({i: k for i, k in new.items() if k >= 0})  # (-1: not in this dictionary yet)
        return [table.get(i, new.get(i, -1)) for i in ids]


def _describe_edges(frontier: list[int], edges, terms, check=None) -> Described | None:
    """:func:`describe_small` through the edge index: each resource's triples are its
    edges' int32 halves as one list (``VertexEdges.flat_of``: read through memoryviews;
    the objects' kinds and the small writers read that list); the blank-node objects not
    described yet are the next round's frontier (their triples are new: their subject
    is new, so no triple repeats). None past DESCRIBE_ROWS triples."""
    d = getattr(terms, "dictionary", None)
    flat_of = edges.flat_of  # (memoryview reads: no numpy slice, view and conversion per resource)
    seen: set[int] = set()
    runs: list[tuple] = []
    total = 0
    while frontier:
        if check is not None:
            check()
        seen.update(frontier)
        objs: list[int] = []
        for v in frontier:
            flat = flat_of(v, DESCRIBE_ROWS - total)  # (neighbour, pid) halves, (pid, neighbour) ascending
            if flat is None:
                return None
            if flat:
                total += len(flat) >> 1
                runs.append((v, None, flat))
                objs += flat[EDGE_NB::2]
        if not objs:
            break
        charge_rows(total, 3 + 3, "DESCRIBE")
        # (store ids: the dictionary's kinds, as the context's would)
        kinds = kinds_kept(d, objs) if d is not None else terms.kinds(np.asarray(objs, dtype=np.int64)).tolist()
        if 1 not in kinds:
            break
        frontier = sorted({x for x, k in zip(objs, kinds, strict=True) if k == 1 and x not in seen})
    return Described(terms, runs, total)
