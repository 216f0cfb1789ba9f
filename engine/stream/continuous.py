"""Evaluating one instant of a continuous query (contract "continuous query semantics").

:class:`InstantEvaluator` holds one registered query's windows (bound to the
streams' transient stores) and its output state. :meth:`InstantEvaluator.run`
evaluates instant ``t``:

1. **Dataset.** Every window becomes an in-memory :class:`GraphIndex` built
   from its distinct triples at ``t`` (a window is a set). The default graph
   is the RDF merge of all windows and of the stored graphs named with
   ``FROM <g>`` (``urn:jindou:default`` = the store's default graph). The
   named graphs are the windows (named by stream IRI), the ``FROM NAMED``
   graphs and the ``FROM`` graphs; with neither, all stored named graphs.
   The stored default graph is taken *as of event time t*: absorbed timeless
   triples with ``tau > t`` that were new to the store when absorbed are
   subtracted (see :class:`~engine.stream.absorb.AbsorbLog`).
   **Compact dataset.** A query whose triple patterns all have constant
   predicates (and no path, GRAPH, SERVICE, LIMIT, SAMPLE, GROUP_CONCAT)
   gets, instead, one :class:`~engine.stream.window_graph.SmallGraph` as its
   default graph: the windows' triples plus the stored ``FROM`` triples that
   match some pattern (:class:`_Compact`; in a conjunctive query, a pattern with
   two variable ends and many stored matches contributes only the triples whose
   shared variable another pattern's triples can bind at the instant); it falls
   back to the merge above when that would exceed
   :data:`~engine.stream.window_graph.SMALL_WINDOW` stored triples or the stored
   default graph is rewound by absorbed triples.
2. The inner query runs through the same executor as one-shot queries
   (:func:`engine.exec.evaluate.evaluate_query`) over a
   :class:`~engine.exec.evaluate.DatasetView` made here -- no change to the
   executor was needed. BGP plans are kept across the query's instants
   (:class:`_InstantPlans`). On the compact path, a query that is one BGP under
   unary operators has its BGP answered tuple at a time from the instant's
   triples (:mod:`engine.stream.tiny`) while the windows are small (any size
   for single-pattern components), and an instant whose window change matches
   none of the query's patterns reports the last result (:mod:`engine.stream.delta`).
3. **Output.** RSTREAM: the result; ISTREAM / DSTREAM: the multiset difference
   of the solutions against the previous instant (set difference of the
   triples for CONSTRUCT), computed on term-stable ids (vectorized:
   ``unique(axis=0)`` + ``bincount``). The ``data`` JSON gets a
   ``"window": {"start", "end"}`` member; SELECT results are written from a
   per-query cache of rendered terms (:class:`_JsonTerms`; an empty result from a cached
   head, a large one by one join over a grid of fragment references).

What does not change within an instant is computed once for it: the windows' seq ranges
(:meth:`InstantEvaluator.ranges`, shared by the scheduler's capture, the delta check and the
compact read, and advanced from the last instant's by :func:`advance_range`), the window
member; the compact path's stored graphs once per store snapshot. An instant whose BGP has no
solution skips the executor when nothing above the BGP can turn no rows into a row.
"""

from __future__ import annotations

import bisect
import collections
import threading
import time
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa

from engine.arrays import unique, unique_inverse
from engine.exec import serialize as _ser
from engine.exec.context import LOCAL_BASE, current_budget
from engine.exec.evaluate import DEFAULT_GRAPH_IRI, DatasetView, QueryContext, evaluate_query
from engine.exec.numbers import LAZY_BASE as _LAZY_BASE
from engine.exec.result import UNBOUND, QueryResult
from engine.exec.serialize import serialize, sparql_json
from engine.formats import NTRIPLES
from engine.kv.views import EmptyGraph, merged_view
from engine.plan.rewrite import is_pure_bgp
from engine.sparql import algebra as A
from engine.stream import cache_budget as _cache_budget
from engine.stream import event_json as _event_json
from engine.stream import gen_construct as _gen_construct
from engine.stream import pred_times
from engine.stream.absorb import AbsorbLog
from engine.stream.delta import DeltaGuard, patterns_of, query_patterns, relevant_predicates
from engine.stream.incremental import IncrementalCore, find_core
from engine.stream.maintained import Maintained
from engine.stream.pred_times import ALL, change_by, next_change
from engine.stream.stored_relation import shared_relation
from engine.stream.tiny import TinyCore, TinyEvaluator, TinyFallback
from engine.stream.tiny_aggs import order_free as _order_free
from engine.stream.tiny_closure import of as _closure_of
from engine.stream.tiny_closure import relevant_patterns as _closure_patterns
from engine.stream.tiny_gen import GEN_WINDOW, GenQuery
from engine.stream.tiny_rewrite import rewrite as _tiny_rewrite
from engine.stream.transient import TransientStore
from engine.stream.window_graph import SMALL_WINDOW, SlidingWindowGraph, SmallGraph
from engine.stream.windows import Window, first_instant, leaves_at, window_member

__all__ = ["BoundWindow", "InstantEvaluator", "WindowCache", "multiset_diff", "set_diff"]

_EMPTY3 = np.zeros((0, 3), dtype=np.int64)
_EMPTY1 = np.zeros(0, dtype=np.int64)
_EVERY = (pred_times.ALL,)   # every element of a stream (pred_times)
_EVALUATE = (None, True)     # InstantEvaluator.quiet_until: evaluate the instant
_NO_PRE = (None, 0.0)        # InstantEvaluator._pre: no capture timed for run()
#: instants reused by the relevance check, all queries of the process (a list: counting must not
#: write a class attribute, which would drop the interpreter's caches of the class's attributes)
_REUSED = [0]
#: repeat prefixes up to this many bytes are kept as bytes, longer ones as views of their event
_SMALL_PREFIX = 4096


def reused_total() -> int:
    """Instants the relevance check reused (:meth:`InstantEvaluator.quiet_until`), all queries."""
    return _REUSED[0]


#: relevance checks skipped by their back-off (InstantEvaluator.quiet_until), all queries
_REL_SKIPPED = [0]


def rel_skipped_total() -> int:
    """Relevance checks skipped by their back-off (:meth:`InstantEvaluator.quiet_until`), all queries."""
    return _REL_SKIPPED[0]


#: instants the scheduler's one-step maintained path answered (InstantEvaluator.maintained_instant)
_MFAST = [0]


def maintained_fast_total() -> int:
    """Instants answered by :meth:`InstantEvaluator.maintained_instant`, all queries (tests)."""
    return _MFAST[0]
_BIN = pa.large_binary()
#: instants whose compact default graph holds at most this many triples evaluate their BGP core
#: tuple at a time (:mod:`engine.stream.tiny`); larger ones take the vectorized executor
TINY_WINDOW = 1024
#: the dataset of the tuple-at-a-time path: nothing above its BGP core reads a graph
_NO_GRAPH = DatasetView(EmptyGraph(), {}, ("tiny",))
#: instants in a row whose restricted stored part exceeded the limit, after which a query with a
#: wide stored pattern takes the merged view without trying for a doubling number of instants
#: (8..256; each try reads the windows and expands the anchors' values)
_DEFER_TRIES = 2
#: the cost of one expansion call of a restricted pattern, in the rows it is weighed against
#: (a few numpy calls per stored graph, ~20-30 us, against ~0.3 us per row the instant reads)
_EXPAND_ROWS = 64
#: window values from which an anchor's expansion is extended from the last instant's rather
#: than made afresh (below, one expansion call costs about what the selection would)
_EXTEND_VALUES = 32
#: instants a restricted pattern keeps its anchor before the anchors are weighed again
_CHOOSE_EVERY = 16


# ---------------------------------------------------------------- multiset / set differences


def _row_groups(a: np.ndarray, b: np.ndarray):
    both = np.concatenate([a, b])
    uniq, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    ca = np.bincount(inv[:len(a)], minlength=len(uniq))
    cb = np.bincount(inv[len(a):], minlength=len(uniq))
    return uniq, ca, cb


def multiset_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of ``a`` minus rows of ``b`` as multisets (``a``, ``b``: (n, k) int64)."""
    if len(a) == 0 or len(b) == 0 or a.shape[1] == 0:
        if a.ndim == 2 and a.shape[1] == 0:
            return np.zeros((max(0, len(a) - len(b)), 0), dtype=np.int64)
        return a
    uniq, ca, cb = _row_groups(a, b)
    d = ca - cb
    keep = d > 0
    return np.repeat(uniq[keep], d[keep], axis=0)


def set_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distinct rows of ``a`` not in ``b``."""
    if len(a) == 0:
        return a
    if len(b) == 0:
        return np.unique(a, axis=0)
    uniq, ca, cb = _row_groups(a, b)
    return uniq[(ca > 0) & (cb == 0)]


# ---------------------------------------------------------------- term-stable ids


class _StableTerms:
    """Term table for diff results: store ids as they are, computed terms as ids < -1."""

    def __init__(self, dictionary):
        self.dictionary = dictionary
        self.key_of: dict[int, str] = {}
        self.id_of: dict[str, int] = {}
        self._next = -2

    def stabilize(self, ids: np.ndarray, ctx: QueryContext) -> np.ndarray:
        """Map query-local ids (>= LOCAL_BASE) to ids stable across instants."""
        ids = np.asarray(ids, dtype=np.int64)
        loc = ids >= LOCAL_BASE
        if not loc.any():
            return ids
        out = ids.copy()
        u, inv = np.unique(ids[loc], return_inverse=True)
        keys = ctx.keys(u)
        mapped = np.empty(len(u), dtype=np.int64)
        for i, k in enumerate(keys):  # one step per distinct computed term
            j = self.id_of.get(k)
            if j is None:
                j = self._next
                self._next -= 1
                self.id_of[k] = j
                self.key_of[j] = k
            mapped[i] = j
        out[loc] = mapped[inv.reshape(-1)]
        return out

    def refresh(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Computed terms the store has interned since become store ids, in every array alike:
        each key is looked up once, so the current rows and the previous ones agree even when
        a stream element interns the term meanwhile (one looked up before, the other after,
        would differ and make a row look added and removed)."""
        negs = [a[a < UNBOUND] for a in arrays if a.size]
        negs = [x for x in negs if len(x)]
        if not negs:
            return list(arrays)
        sid = {}
        for j in unique(np.concatenate(negs)).tolist():
            i = int(self.dictionary.lookup(self.key_of[j]))
            if i >= 0:
                sid[j] = i
        if not sid:
            return list(arrays)
        out = []
        for a in arrays:
            b = a
            for j, i in sid.items():
                hit = a == j
                if hit.any():
                    if b is a:
                        b = a.copy()
                    b[hit] = i
            out.append(b)
        return out

    def prune(self, keep: list[np.ndarray]) -> None:
        live = set()
        for r in keep:
            if r.size:
                live.update(unique(r[r < UNBOUND]).tolist())
        for j in [j for j in self.key_of if j not in live]:
            self.id_of.pop(self.key_of.pop(j), None)


def advance_range(store: TransientStore, g0: int, g1: int, lo: int, hi: int) -> tuple[int, int] | None:
    """The seq range of the triples with ``lo < tau <= hi`` from the range ``[g0, g1)`` of an
    earlier instant of the same time window (bounds ``lo' <= lo``, ``hi' <= hi``): each bound
    moves forward from where it was, by a timestamp read when it stays, else one
    ``searchsorted`` per slice it crosses -- no stream-index search (which builds a dict per
    bound) and no Python bisection. None when the GC freed the old start (the caller searches:
    ``TransientStore.window_range``). A stream's timestamps are non-decreasing in arrival
    order, so the triples before ``g0`` have ``tau <= lo' <= lo`` and those before ``g1`` have
    ``tau <= hi' <= hi``: the new start is the first seq from ``g0`` on with ``tau > lo``, the
    new end the first from ``g1`` on with ``tau > hi`` (elements newer than the instant, a
    stream ahead of its queries, stay beyond it)."""
    with store._lock:
        live, end = store.live_start, store.end_seq
        if g0 < live or g1 < g0 or g1 > end or hi <= lo:
            return None
        e1 = _first_after_from(store, g1, end, hi)
        return _first_after_from(store, g0, e1, lo), e1


def _first_after_from(store: TransientStore, a: int, end: int, x: int) -> int:
    """The first seq in ``[a, end)`` whose timestamp is ``> x`` (``end`` if none), the
    timestamps being non-decreasing (under the store's lock). The timestamps are read through a
    ``memoryview`` (Python ints, ``bisect`` in C): on the few elements an instant moves a bound
    over, numpy's scalar reads and ``searchsorted`` cost more than the search (~3.4 -> 1.9 µs)."""
    if a >= end:
        return end
    slices = store._slices
    k = store._slice_of(a)
    while a < end:
        sl = slices[k]
        base = sl.base
        stop = min(end, base + sl.fill)
        tau = memoryview(sl.tau)
        i = a - base
        if tau[i] > x:
            return a
        j = stop - base
        if tau[j - 1] > x:
            return base + bisect.bisect_right(tau, x, i, j)
        a = stop
        k += 1
    return end


# ---------------------------------------------------------------- plans across instants


class _InstantPlans(dict):
    """The BGP plans of one continuous query, kept across its instants (the executor's
    ``plan_cache``; the dataset's key is the query's, not the instant's).

    A plan is the step order plus the constants' ids, which stay valid: the dictionary is
    append-only, and the order only affects speed. Not kept: a plan that found a constant
    absent from the store (a later element may bring it), and a compiled tuple-at-a-time
    program (it holds the lookups of one instant's graph). :meth:`InstantEvaluator.evaluate`
    empties the cache when the statistics it was planned on moved a lot (window size,
    a commit to the store)."""

    __slots__ = ("size", "sn")

    #: the graph key of the compact path: its graph is one SmallGraph reloaded per instant, whose
    #: lookups follow the reloads, so a compiled program over it stays valid
    COMPACT = ("default", ("compact",))

    def __init__(self):
        super().__init__()
        self.size = -1
        self.sn = -1

    def __setitem__(self, key, value):
        if key[-1] == "small":
            prog = value[1]
            if prog is not None if key[0] != self.COMPACT else (prog is not None and prog.empty):
                return
        elif getattr(value, "resolved", None) is None:
            return
        super().__setitem__(key, value)

    def fresh(self, size: int, sn: int) -> None:
        """Forget the plans if the windows' size changed more than twofold or the store
        committed since they were made."""
        if sn != self.sn or size > 2 * self.size + 16 or 2 * size + 16 < self.size:
            self.clear()
            self.size, self.sn = size, sn


# ---------------------------------------------------------------- the evaluator


@dataclass
class BoundWindow:
    """A window of a registered query bound to its stream."""

    stream: str            # stream short name
    iri: str               # stream IRI (names the window graph)
    gid: int               # dictionary id of <iri>
    window: Window
    store: TransientStore


class WindowCache:
    """Window graphs of the current instants, shared by the queries that read the same window.

    Queries with the same window on the same stream share one in-memory GraphIndex per instant
    (and a tumbling window's unchanged content). While a maintained (incremental) query reads a
    sliding window, its graph is slid from the previous instant's and the change is kept
    (:mod:`engine.stream.window_graph`); otherwise it is rebuilt, which is cheaper."""

    TRACK_TTL = 8   # requests without tracking after which a shared window stops sliding

    def __init__(self, size: int = 16, slide: bool = True):
        self.size = size
        self.slide = slide
        self._lock = threading.RLock()
        self._d: collections.OrderedDict = collections.OrderedDict()
        self._sliding: collections.OrderedDict = collections.OrderedDict()  # (store, window) -> graph
        self.hits = 0
        self.misses = 0

    def graph(self, bw: BoundWindow, t: int, track: bool = True):
        """The window's graph at ``t``. ``track``: a reader wants the change from the previous
        instant (:meth:`change`), so the graph is slid and the change kept; otherwise it is
        rebuilt, which is cheaper than counting the change (see ``SlidingWindowGraph``)."""
        store = bw.store
        with self._lock:  # one builder at a time: a sliding graph is mutated in place
            skey = (id(store), bw.window)
            sw = self._sliding.get(skey) if self.slide else None
            if sw is not None and sw.store is not store:
                sw = None
            if sw is not None:  # queries sharing the window: keep sliding while any of them tracks it
                sw.track_ttl = self.TRACK_TTL if track else max(0, sw.track_ttl - 1)
                track = sw.track_ttl > 0
            with store._lock:  # the range and the read must see the same slices
                g0, g1 = store.window_range(bw.window, t)
                key = (id(store), g0, g1)
                if sw is not None and (sw.g0, sw.g1) == (g0, g1):
                    self.hits += 1
                    return sw.graph
                hit = None if self.slide else self._d.get(key)
                if hit is not None and hit[0] is store:
                    self._d.move_to_end(key)
                    self.hits += 1
                    return hit[1]
                slid = track and sw is not None and sw.can_slide(g0, g1)
                spo, _ = store.read(sw.g1 if slid else g0, g1)
            self.misses += 1
            if slid and not sw.slide(spo, g0, g1):
                spo = np.concatenate([sw.rows()[g0 - sw.g0:], spo])  # cannot slide: rebuild
                slid = False
            if not slid:
                if sw is None:
                    sw = SlidingWindowGraph(store)
                    sw.track_ttl = self.TRACK_TTL if track else 0
                sw.build(spo, g0, g1, counts=track)
            g = sw.graph
            if not self.slide:
                self._d[key] = (store, g)
                while len(self._d) > self.size:
                    self._d.popitem(last=False)
            else:
                self._sliding[skey] = sw
                self._sliding.move_to_end(skey)
                while len(self._sliding) > self.size:
                    self._sliding.popitem(last=False)
            return g

    def change(self, bw: BoundWindow, before: tuple[int, int], after: tuple[int, int]):
        """``(plus, minus)`` of the window between two seq ranges if its recent slides lead from one
        to the other, else None."""
        with self._lock:
            sw = self._sliding.get((id(bw.store), bw.window))
            if sw is None or sw.store is not bw.store:
                return None
            return sw.change(before, after)

    def range_of(self, bw: BoundWindow) -> tuple[int, int] | None:
        """The seq range of the window's current graph."""
        with self._lock:
            sw = self._sliding.get((id(bw.store), bw.window))
            return None if sw is None or sw.store is not bw.store else (sw.g0, sw.g1)


# ---------------------------------------------------------------- one small graph per instant


def _patterns(query: A.Query) -> list[A.TriplePattern] | None:
    """The triple patterns of ``query``'s WHERE clause if every one of them has a constant
    predicate and nothing in it reads the default graph otherwise (paths read whole
    predicates and the graph's vertices, SERVICE, GRAPH) or depends on the order of
    solutions (LIMIT/OFFSET, SAMPLE, GROUP_CONCAT); else None."""
    return patterns_of(query, _not_compact)


#: operators that map an empty input to an empty output (not Group: an aggregate without GROUP
#: BY has one row over no solutions)
_EMPTY_TO_EMPTY = (A.Project, A.Distinct, A.Reduced, A.OrderBy, A.Extend, A.Filter, A.Slice)


def _empty_preserving(query: A.Query) -> bool:
    """Whether ``query`` is a SELECT whose pattern is a chain of :data:`_EMPTY_TO_EMPTY`
    operators over its join core (so no solution of the core means an empty result)."""
    if query.form != "SELECT" or find_core(query) is None:
        return False
    node = query.pattern
    while isinstance(node, _EMPTY_TO_EMPTY):
        node = node.input
    return not isinstance(node, A.Group) and (isinstance(node, A.Join) or is_pure_bgp(node))


def _not_compact(x) -> bool:
    return (
        (isinstance(x, A.TriplePattern) and not isinstance(x.p, A.Const))
        or isinstance(x, (A.PathPattern, A.Service, A.Graph, A.Slice))
        or (isinstance(x, A.Aggregate) and x.name.upper() in ("SAMPLE", "GROUP_CONCAT"))
    )


class _Compact:
    """The default graph of an instant as one :class:`SmallGraph`: the windows' triples plus
    the triples of the stored ``FROM`` graphs that match some triple pattern of the query.

    A solution of a pattern only uses triples matching that pattern, so restricting the
    stored graphs to the triples matching any pattern of the query changes no solution; with
    constant predicates that part is small (the static facts about the query's sensors,
    types, ...), is found once per store snapshot, and the instant's graph is one sort of a
    few hundred rows -- instead of a merge view that asks every graph at every step. Used when
    the query qualifies (:func:`_patterns`), the stored part and the windows stay under
    :data:`SMALL_WINDOW` triples and the stored default graph is not rewound by absorbed
    stream triples; otherwise the instant takes the merged view."""

    def __init__(self, query: A.Query):
        self.patterns = _patterns(query)
        self._key: tuple | None = None
        self._rows: np.ndarray | None = None
        # a conjunctive query (one BGP under unary operators without EXISTS): every solution
        # matches all of its patterns at once, which lets a pattern with two variable ends and
        # too many stored triples (``?obs a ?type``) be restricted per instant (:meth:`anchored`)
        self.conjunctive = self.patterns is not None and find_core(query) is not None
        # per deferred pattern: (its predicate id, [(its var end 0/2, an anchor pattern's (s, p, o)
        # ids -- a str: a constant the dictionary did not hold yet --, the anchor's end), ...])
        self._deferred: list = []
        self.defer_failures = 0     # instants in a row whose restricted part was too large
        self.defer_skip = 0              # instants left before the restriction is tried again
        self._backoff = 0
        self._anchor_key: tuple | None = None   # the stored_rows key the memo below belongs to
        self._anchor_memo: dict = {}  # (deferred, option) -> (stored anchor values, their stored triples)
        self._graphs: list = []
        self._dictionary = None
        self._id_bound = 0            # ids from here on were interned after the stored snapshot
        self._fan: dict = {}          # (pid, end) -> stored triples per distinct value at that end
        self._resolved: dict = {}     # anchor ids with absent keys -> (resolved ids or None, dict size)
        # the deferred patterns read by probes instead (engine.stream.stored_relation): the
        # reader asks for it per instant (``lazy_next``, consumed by :meth:`anchored`), which then
        # leaves the restriction to :meth:`complete` -- run only if the reader hands the instant back
        self.lazy_next = False
        self._lazy_ok = False         # every deferred pattern has two distinct variable ends
        self._pending = False         # the last anchored() call left its restriction undone
        self._relations: dict = {}    # predicate id -> StoredRelation, for the stored_rows key

    def _anchors(self, tp: A.TriplePattern, resolved: list) -> list:
        """For a deferred pattern ``tp``: every (its end, an anchor's ids, the anchor's end)
        where the anchor is a pattern whose stored triples are all loaded (or that has none) and
        that shares the variable at that end. Every solution matches both patterns with the same
        value there, so any of them bounds ``tp``'s triples; :meth:`anchored` picks one per
        instant."""
        out = []
        for end in (0, 2):
            name = (tp.s, tp.p, tp.o)[end].name
            for q, qids in resolved:
                if q is tp:
                    continue
                for qend in (0, 2):
                    t = (q.s, q.p, q.o)[qend]
                    if isinstance(t, A.Var) and t.name == name:
                        out.append((end, qids, qend))
        return out

    def _ids(self, ids: tuple) -> tuple | None:
        """An anchor's ids with constants the dictionary did not hold resolved again (a stream
        element interns terms without a store commit); None while one is still absent (the
        anchor, hence the query, matches nothing). A resolved id is kept (ids never change);
        an absent key is looked up again only after the dictionary grew."""
        if not any(isinstance(i, str) for i in ids):
            return ids
        got = self._resolved.get(ids)
        n = len(self._dictionary)
        if got is not None and (got[0] is not None or got[1] == n):
            return got[0]
        out = []
        for i in ids:
            if isinstance(i, str):
                i = int(self._dictionary.lookup(i))
                if i < 0:
                    self._resolved[ids] = (None, n)
                    return None
            out.append(i)
        self._resolved[ids] = (tuple(out), n)
        return self._resolved[ids][0]

    def fanout(self, pid: int, end: int) -> float:
        """Stored triples of ``pid`` per distinct value at ``end`` (per snapshot)."""
        f = self._fan.get((pid, end))
        if f is None:
            n = d = 0
            for g in self._graphs:
                st = g.stats(pid)
                n += st.triples
                d += st.subjects if end == 0 else st.objects
            f = self._fan[pid, end] = n / max(1, d)
        return f

    def skip_deferred(self) -> bool:
        """Whether this instant takes the merged view without trying the restriction (it
        exceeded the limit at the last tries: retried after a doubling number of instants)."""
        if self.defer_skip > 0:
            self.defer_skip -= 1
            return True
        return False

    def deferred_result(self, ok: bool) -> None:
        """Book one try of the restriction."""
        if ok:
            self.defer_failures = 0
            self._backoff = 0
            return
        self.defer_failures += 1
        if self.defer_failures >= _DEFER_TRIES:
            self._backoff = min(2 * self._backoff or 8, 256)
            self.defer_skip = self._backoff

    def anchored(self, rows: np.ndarray, n_stored: int = 0) -> np.ndarray | None:
        """The stored triples of the deferred patterns that can take part in a solution over the
        instant's loaded ``rows`` (the ``n_stored`` stored rows first, then the windows'): those
        whose shared end holds a value some triple matching an anchor pattern holds at its end
        (every solution matches both patterns with the same value). A superset of what the
        solutions use, so the same solutions; None above :data:`SMALL_WINDOW` triples.

        Per deferred pattern the anchor is chosen per instant by the work it brings: the stored
        anchor values' expansion is kept per store snapshot (free per instant, but its triples
        are read by the instant), the window's values not among them are expanded per instant
        (the last instant's expansion reused when they are the same values). The expected rows
        of each (kept + window values x the predicate's fan-out, an expansion call counted as
        :data:`_EXPAND_ROWS`) decide; an anchor whose kept part exceeds the limit is not
        taken.

        With :attr:`lazy_next` set (the reader probes the deferred patterns' stored relations,
        :meth:`relations`) nothing is restricted here: :meth:`complete` does it if needed."""
        if self.lazy_next and self._lazy_ok:
            self.lazy_next = False
            self._pending = True
            return _EMPTY3
        self._pending = False
        return self._restrict(rows, n_stored)

    def relations(self) -> dict | None:
        """Predicate id -> :class:`~engine.stream.stored_relation.StoredRelation` of the deferred
        patterns when the last :meth:`anchored` call left them out of the rows; else None."""
        if not self._pending:
            return None
        rel = self._relations
        if not rel:
            for pid, _ in self._deferred:
                if pid not in rel:
                    rel[pid] = shared_relation(pid, self._graphs, self._id_bound, self._key[0])
        return rel

    def complete(self, rows: np.ndarray, n_stored: int) -> np.ndarray | None:
        """``rows`` with the deferred patterns' restriction when :meth:`anchored` left it out
        (the instant goes to a path that reads only the rows); None above the limit."""
        if not self._pending:
            return rows
        self._pending = False
        extra = self._restrict(rows, n_stored)
        self.deferred_result(extra is not None)
        if extra is None:
            return None
        return np.concatenate([rows, extra]) if len(extra) else rows

    def _restrict(self, rows: np.ndarray, n_stored: int) -> np.ndarray | None:
        """The restriction of :meth:`anchored`."""
        if self._anchor_key != self._key:
            self._anchor_key = self._key
            self._anchor_memo = {}
        memo = self._anchor_memo
        win = rows[n_stored:]
        head = rows[:n_stored]
        parts = []
        total = 0
        seen: dict = {}   # (anchor ids, end) -> its window values at this instant
        for k, (pid, opts) in enumerate(self._deferred):

            def weigh(oi: int, k=k, pid=pid, opts=opts) -> tuple | None:
                """(expected rows, oi, end, kept stored expansion, window values) of option oi."""
                end, anchor, qend = opts[oi]
                ids = self._ids(anchor)
                hit = memo.get((k, oi))
                if hit is None:
                    cs = _anchor_values(head, ids, qend) if ids is not None and n_stored else _EMPTY1
                    hit = memo[k, oi] = (cs, self._expand(pid, end, cs, SMALL_WINDOW))
                cs, ex = hit
                if ex is None:
                    return None   # too many stored anchor values
                cw = _EMPTY1
                if ids is not None and len(win):
                    wk = (ids, qend)
                    cw = seen.get(wk)
                    if cw is None:   # (the same anchor often bounds several deferred patterns)
                        cw = seen[wk] = _anchor_values(win, ids, qend, self._id_bound)
                if len(cw) and len(cs):
                    i = np.searchsorted(cs, cw).clip(max=len(cs) - 1)
                    cw = cw[cs[i] != cw]
                cost = len(ex) + (len(cw) * self.fanout(pid, end) + _EXPAND_ROWS if len(cw) else 0)
                return cost, oi, end, ex, cw

            # the choice is kept for _CHOOSE_EVERY instants (any anchor gives the same solutions;
            # meanwhile only the chosen one's window values are read), and weighed again at once
            # when the chosen one costs more than twice what it did (a window that was empty then)
            kept = memo.get(("choice", k))
            best = None
            if kept is not None and kept[1] > 0:
                kept[1] -= 1
                best = weigh(kept[0])
                if best is not None and best[0] > 2 * kept[2] + _EXPAND_ROWS:
                    best = None
            if best is None:
                for oi in range(len(opts)):
                    got = weigh(oi)
                    if got is not None and (best is None or got[0] < best[0]):
                        best = got
                        if not got[0]:
                            break
                if best is None:
                    return None
                memo["choice", k] = [best[1], _CHOOSE_EVERY, best[0]]
            _, oi, end, ex, cw = best
            total += len(ex)
            if total > SMALL_WINDOW:
                return None
            if len(ex):
                parts.append(ex)
            if len(cw):
                ew = self._window_expansion(k, oi, pid, end, cw)
                if ew is None:
                    return None
                total += len(ew)
                if total > SMALL_WINDOW:
                    return None
                if len(ew):
                    parts.append(ew)
        return np.concatenate(parts) if parts else _EMPTY3

    def _window_expansion(self, k: int, oi: int, pid: int, end: int, cw: np.ndarray) -> np.ndarray | None:
        """The stored triples of deferred pattern ``k`` whose ``end`` is one of the window's
        values ``cw`` (sorted, distinct): the last instant's when the values are the same; from
        :data:`_EXTEND_VALUES` values on, extended from it (a sliding window keeps most values: the
        kept values' triples selected by one ``searchsorted``, only the new values expanded);
        else expanded afresh. None above :data:`SMALL_WINDOW` triples."""
        memo = self._anchor_memo
        last = memo.get(~k)
        col = 0 if end == 0 else 2
        if last is not None and last[0] == oi and len(last[1]) == len(cw) and (last[1] == cw).all():
            return last[2]
        if last is not None and last[0] == oi and len(cw) >= _EXTEND_VALUES:
            _, vals, rows = last
            i = np.searchsorted(vals, cw).clip(max=max(len(vals) - 1, 0))
            new = cw[vals[i] != cw] if len(vals) else cw
            if len(rows):
                j = np.searchsorted(cw, rows[:, col]).clip(max=len(cw) - 1)
                rows = rows[cw[j] == rows[:, col]]
            if len(new):
                more = self._expand(pid, end, new, SMALL_WINDOW)
                if more is None:
                    memo.pop(~k, None)
                    return None
                if len(more):
                    rows = np.concatenate([rows, more]) if len(rows) else more
        else:
            rows = self._expand(pid, end, cw, SMALL_WINDOW)
            if rows is None:
                memo.pop(~k, None)
                return None
        if len(rows) > SMALL_WINDOW:
            memo.pop(~k, None)
            return None
        memo[~k] = (oi, cw, rows)
        return rows

    def _expand(self, pid: int, end: int, cand: np.ndarray, limit: int) -> np.ndarray | None:
        """The stored triples of predicate ``pid`` whose ``end`` (0: subject, 2: object) is one
        of ``cand``; None above ``limit`` triples."""
        parts = []
        total = 0
        if not len(cand):
            return _EMPTY3
        for g in self._graphs:
            r, nb = g.expand(pid, 0 if end == 0 else 1, cand)
            if not len(r):
                continue
            v = cand[np.asarray(r, dtype=np.int64)]
            nb = np.asarray(nb, dtype=np.int64)
            total += len(v)
            if total > limit:
                return None
            sp = np.full(len(v), pid, dtype=np.int64)
            parts.append(np.stack([v, sp, nb] if end == 0 else [nb, sp, v], axis=1))
        return np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else _EMPTY3)

    def stored_rows(self, ctx: QueryContext, graphs: list) -> np.ndarray | None:
        """The triples of ``graphs`` matching some pattern; None if more than SMALL_WINDOW."""
        key = (ctx.snapshot.sn, *map(id, graphs))
        if self._key == key:
            return self._rows
        self._graphs = list(graphs)
        deferred: list = []
        loaded: list = []
        parts: list[np.ndarray] = []
        total = 0
        done: dict = {}   # ids of a pattern -> deferred
        absent: list = []
        self._dictionary = ctx.dictionary
        # every id the snapshot's graphs hold was interned before it: later ids (a stream's new
        # observations, posts ...) have no stored triple to expand
        self._id_bound = len(ctx.dictionary)
        self._fan = {}
        for tp in self.patterns:
            ids = [ctx.lookup(t.key) if isinstance(t, A.Const) else None for t in (tp.s, tp.p, tp.o)]
            if any(i is not None and i < 0 for i in ids):
                # a constant the store does not hold: no stored triple matches, but the windows'
                # may (streams intern terms without a commit): an anchor with that constant open
                absent.append((tp, tuple(t.key if i is not None and i < 0 else i
                                         for t, i in zip((tp.s, tp.p, tp.o), ids, strict=True))))
                continue
            s, p, o = ids
            if (s, p, o) in done:  # the same stored triples: loaded, or restricted for this one too
                (deferred if done[s, p, o] else loaded).append(tp if done[s, p, o] else (tp, (s, p, o)))
                continue
            done[s, p, o] = False
            for g in graphs:
                if s is not None and o is not None:
                    hit = bool(g.contains(p, np.array([s]), np.array([o]))[0])
                    ss, os_ = (np.array([s]), np.array([o])) if hit else (_EMPTY1, _EMPTY1)
                elif s is not None:
                    _, os_ = g.expand(p, 0, np.array([s], dtype=np.int64))
                    ss = np.full(len(os_), s, dtype=np.int64)
                elif o is not None:
                    _, ss = g.expand(p, 1, np.array([o], dtype=np.int64))
                    os_ = np.full(len(ss), o, dtype=np.int64)
                else:
                    if g.stats(p).triples > SMALL_WINDOW:
                        ss = None
                    else:
                        ss, os_ = g.scan(p)
                    if (ss is None or total + len(ss) > SMALL_WINDOW) and self.conjunctive:
                        deferred.append(tp)  # restricted per instant (anchored)
                        break
                if ss is None or total + len(ss) > SMALL_WINDOW:
                    self._key, self._rows = key, None
                    return None
                if len(ss):
                    parts.append(np.stack([ss, np.full(len(ss), p, dtype=np.int64), os_], axis=1))
                    total += len(ss)
            if deferred and deferred[-1] is tp:
                done[s, p, o] = True
            else:
                loaded.append((tp, (s, p, o)))
        self._deferred = []
        self._relations = {}
        self._pending = False
        # probes of a relation give pairs with distinct ends (``?x :p ?x`` keeps the restriction)
        self._lazy_ok = bool(deferred) and all(tp.s != tp.o for tp in deferred)
        for tp in deferred:
            pid = ctx.lookup(tp.p.key)
            got = self._anchors(tp, loaded + absent)
            if not got:  # no pattern bounds it: the merged view
                self._key, self._rows = key, None
                return None
            self._deferred.append((pid, got))
        self._key = key
        self._rows = np.concatenate(parts).astype(np.int64) if parts else _EMPTY3
        return self._rows


def _anchor_values(rows: np.ndarray, anchor: tuple, qend: int, bound: int | None = None) -> np.ndarray:
    """Sorted distinct values at end ``qend`` of the ``rows`` matching the anchor pattern's
    constants ``(s, p, o)`` (None: a variable); only those below ``bound`` if given (ids
    interned after a store snapshot have no stored triple: dropped before the sort)."""
    qs, qp, qo = anchor
    m = rows[:, 1] == qp
    if qs is not None:
        m &= rows[:, 0] == qs
    if qo is not None:
        m &= rows[:, 2] == qo
    v = rows[m, qend]
    if bound is not None and len(v):
        v = v[v < bound]
    return unique(v) if len(v) > 1 else v


# ---------------------------------------------------------------- SPARQL JSON of the events

class _JsonTerms:
    """The SPARQL JSON object of each store term a query's results used, kept across its
    instants: consecutive windows bind mostly the same terms (sensors, static entities), and
    a store id's term never changes (append-only dictionary). Computed terms (query-local and
    diff ids, new every instant) are kept by their key instead (numbers and short strings)."""

    MAX = 1 << 16
    #: computed terms' fragments remembered by key (counts, BIND values repeat across instants)
    MAX_COMPUTED = 4096
    MAX_COMPUTED_KEY = 256   # (longer computed terms, a CONCAT's, are written every time)
    #: above this many rows the event is assembled by Arrow kernels (:mod:`engine.stream.event_json`)
    LARGE = 2048

    def __init__(self):
        self._d: dict[int, bytes] = {}
        self._heads: dict[tuple, bytes] = {}   # vars -> b'{"head":{"vars":[...]}' (the same every instant)
        self._names: dict[str, bytes] = {}     # var -> b'"var":'
        # var -> {store id -> b'"var":{...}'}: a small answer's cells are dict reads (C-level
        # ``map``), no concatenation per cell; bounded with ``_d`` (cleared together)
        self._cells: dict[str, dict[int, bytes]] = {}
        self._n_cells = 0
        self._by_key: dict[str, bytes] = {}   # computed term's key -> its JSON (short keys)
        self._slot = _cache_budget.JSON_TERMS.join(self)   # all queries' caches together: bounded

    def head(self, vars_) -> bytes:
        key = tuple(vars_)
        h = self._heads.get(key)
        if h is None:
            if len(self._heads) > 64:
                self._heads.clear()
            h = self._heads[key] = b'{"head":' + orjson.dumps({"vars": list(key)})
        return h

    def _clear(self) -> None:
        self._cells.clear()
        self._n_cells = 0

    def render(self, ids: list[int], terms) -> list[bytes | None]:
        """JSON bytes of each id of ``ids`` (distinct), None for UNBOUND."""
        d = self._d
        out = [d.get(i) for i in ids]
        miss = [k for k, x in enumerate(out) if x is None and ids[k] != UNBOUND]
        if miss:
            mids = [ids[k] for k in miss]
            keys = _few_keys(terms, mids) if len(mids) <= 16 else None
            if keys is None:
                keys = terms.keys(np.array(mids, dtype=np.int64))
            if len(d) + len(miss) > self.MAX:
                d.clear()
            self._fit(len(miss))
            by_key = self._by_key
            for k, key in zip(miss, keys, strict=True):
                if key is None:
                    continue
                i = ids[k]
                if 0 <= i < LOCAL_BASE:
                    # (b"%b" %: a copy of its own size; orjson's bytes sit in 4 KiB allocations,
                    # 40x what a kept fragment needs)
                    out[k] = d[i] = b"%b" % orjson.dumps(_ser._json_term(key))
                    continue
                # a computed term (a COUNT, a BIND's number): its query-local id is new every
                # instant, its key and fragment are not
                b = by_key.get(key)
                if b is None:
                    b = orjson.dumps(_ser._json_term(key))
                    if len(key) <= self.MAX_COMPUTED_KEY:
                        if len(by_key) >= self.MAX_COMPUTED:
                            by_key.clear()
                        by_key[key] = b = b"%b" % b   # (its own size: see above)
                out[k] = b
            self.account()
        return out

    def cells_full(self, adding: int) -> bool:
        """Whether the per-variable cells must start over before ``adding`` more: their own
        bound, or all queries' caches over their joint bound with this one above its share."""
        return self._n_cells + adding > self.MAX or _cache_budget.JSON_TERMS.over(
            self._slot, len(self._d) + self._n_cells + adding)

    def account(self) -> None:
        """Tell the joint bound how many entries this query's caches hold now."""
        _cache_budget.JSON_TERMS.set(self._slot, len(self._d) + self._n_cells)

    def _fit(self, adding: int) -> None:
        """Before ``adding`` entries: with all queries' caches over their joint bound
        (:data:`~engine.stream.cache_budget.JSON_TERMS`) and this one above its share, this
        query's caches start over (memory that grows with the number of queries, not charged
        anywhere else, stays bounded; the terms are rendered again as they come)."""
        bound = _cache_budget.JSON_TERMS
        if bound.over(self._slot, len(self._d) + self._n_cells + adding):
            self._d.clear()
            self._clear()
            bound.clears += 1
            bound.set(self._slot, 0)

    def select(self, res: QueryResult, extra: bytes) -> bytes:
        """SPARQL JSON of a SELECT result with ``extra`` members: the bytes
        :func:`~engine.exec.serialize.sparql_json` writes. Each column maps its distinct ids to
        ``"var":{...}`` fragments, rows are joined by C-level ``join`` over the columns."""
        n = len(res)
        if n == 0:   # the commonest event of a selective query: no work beyond two joins
            return b"".join((self.head(res.vars), b',"results":{"bindings":[]}', extra, b"}"))
        if not res.vars:
            return sparql_json(res, extra)
        if n > self.LARGE:   # (hook: engine.stream.event_json, the large answers' writer)
            return _event_json.large_select(self, res, extra) if _event_json.ENABLED else sparql_json(res, extra)
        cols = []
        holes = False
        if n <= 64:
            # a few rows: each cell's ``"var":{...}`` read from the per-variable cache; the misses
            # of all columns rendered by one call (one decode of the instant's new terms)
            lists = [np.asarray(c, dtype=np.int64).tolist() for c in res.columns]
            cells = self._cells
            tables = []
            for v, lst in zip(res.vars, lists, strict=True):
                cd = cells.get(v)
                if cd is None:
                    if len(cells) > 256:
                        self._clear()
                    cd = cells[v] = {}
                col = list(map(cd.get, lst))
                tables.append(cd)
                cols.append(col)
            miss = [i for col, lst in zip(cols, lists, strict=True) if None in col
                    for i, x in zip(lst, col, strict=True) if x is None]
            if miss:
                u = list(dict.fromkeys(miss))
                frag = dict(zip(u, self.render(u, res.terms), strict=True))
                if self.cells_full(len(miss)):
                    self._clear()
                    tables = [cells.setdefault(v, {}) for v in res.vars]
                names = self._names
                for v, lst, col, cd in zip(res.vars, lists, cols, tables, strict=True):
                    if None not in col:
                        continue
                    name = names.get(v)
                    if name is None:
                        if len(names) > 256:
                            names.clear()
                        name = names[v] = orjson.dumps(v) + b":"
                    for r, i in enumerate(lst):
                        if col[r] is not None:
                            continue
                        f = frag[i]
                        if f is None:    # unbound
                            holes = True
                            col[r] = b""
                            continue
                        col[r] = x = name + f
                        if 0 <= i < LOCAL_BASE and i not in cd:   # a store id: the same cell forever
                            cd[i] = x
                            self._n_cells += 1
                self.account()
        else:
            for v, c in zip(res.vars, res.columns, strict=True):
                name = orjson.dumps(v) + b":"
                c = np.asarray(c, dtype=np.int64)
                uniq, inv = unique_inverse(c)
                t = np.empty(len(uniq), dtype=object)
                t[:] = [b"" if x is None else name + x for x in self.render(uniq.tolist(), res.terms)]
                cols.append(t[inv].tolist())
                holes = holes or bool((c == UNBOUND).any())
        head = self.head(res.vars) + b',"results":{"bindings":[{'
        if holes:
            rows = [b",".join([x for x in r if x]) for r in zip(*cols, strict=True)]
            return b"".join([head, b"},{".join(rows), b"}]}", extra, b"}"])
        # one list of every fragment and separator, one join: no per-row strings, one copy
        k = len(cols)
        m = 2 * k * n
        flat = [b","] * (m + 3)
        flat[0] = head
        for j, col in enumerate(cols):
            flat[1 + 2 * j:1 + m:2 * k] = col
        flat[2 * k:1 + m:2 * k] = [b"},{"] * n
        flat[m] = b"}]}"
        flat[m + 1] = extra
        flat[m + 2] = b"}"
        return b"".join(flat)


def _few_keys(terms, ids: list[int]) -> list[str | None] | None:
    """The keys of a few ids (store and query-local) by scalar reads: one ``key`` call or list
    index each beats the ~10 numpy calls of a batch decode on an instant's handful of new
    terms (a new observation's IRI and value, a group's count). None when an id needs the
    batch path (lazily held numbers, computed terms still pending as Arrow)."""
    dic = getattr(terms, "dictionary", None)
    if dic is None:
        return None
    local = None
    out = []
    for i in ids:
        if 0 <= i < LOCAL_BASE:
            out.append(dic.key(i))
        elif LOCAL_BASE <= i < _LAZY_BASE:
            if local is None:
                if getattr(terms, "_pending", None) is not None:
                    return None
                local = getattr(terms, "_local_keys", None)
                if local is None:
                    return None
            j = i - LOCAL_BASE
            if j >= len(local):
                return None
            out.append(local[j])
        else:
            return None
    return out


def _window_member(window: dict) -> bytes:
    return b',"window":' + orjson.dumps(window)


class InstantEvaluator:
    """Evaluates the instants of one continuous query, in order (one thread at a time)."""

    def __init__(self, db, query: A.Query, mode: str, windows: list[BoundWindow],
                 absorb_log: AbsorbLog | None = None, cache: WindowCache | None = None,
                 incremental: bool = True):
        query = _tiny_rewrite(query, mode)   # (path alternatives, OPTIONAL + BIND: equal patterns, tiny_rewrite)
        self.db = db
        self.incremental = incremental
        self.cache = cache if cache is not None else WindowCache()
        self.query = query
        self.mode = mode
        self.form = query.form
        self.windows = windows
        self.absorb_log = absorb_log
        ds = query.dataset
        self.from_default = tuple(ds.default) if ds is not None else ()
        self.from_named = tuple(ds.named) if ds is not None else ()
        self._prev: np.ndarray | None = None
        self._terms = _StableTerms(db.store.dictionary)
        # CQELS-style maintenance of the join core, for sliding windows (a tumbling window shares nothing
        # between instants)
        sliding = any(bw.window.is_sliding for bw in windows)
        self.incremental_core = (IncrementalCore.of(query, adaptive=incremental != "always")
                                 if incremental and sliding else None)
        self._stored_parts: list = []
        self._window_graphs: list = []
        self._vars: list = []
        # the stored default graph is part of the dataset (absorbed triples change it over event time)
        self.reads_stored_default = DEFAULT_GRAPH_IRI in self.from_default + self.from_named
        self._plans = _InstantPlans()
        self._json = _JsonTerms()
        self._compact = _Compact(query)
        self._graph: SmallGraph | None = None   # the compact path's graph, reloaded per instant
        self._tiny_last = False   # the last instant took the tuple-at-a-time path
        self._tiny_skip = 0       # instants left before trying that path again (after a hand-back)
        self._tiny_backoff = 0
        self._n_stored = 0   # the stored part at the head of the compact rows (compact_rows)
        self._stored_arr = _EMPTY3
        delta = DeltaGuard(query)
        self._delta = delta if delta.patterns is not None else None
        # per instant, computed once however many steps ask (the scheduler's capture, the delta
        # check, the compact read, the event, its repeat prefix): the windows' seq ranges (stable
        # once the instant is ready: later elements have tau beyond it), the window member
        self._at: tuple | None = None        # (t, [(g0, g1) per window])
        self._wm: tuple | None = None        # (t, member dict, b',"window":{...}')
        self._pre: tuple = _NO_PRE           # (t, ms spent on t before run(t)): counted in its latency
        self._rp: tuple | None = None        # (the last event's data, its repeat prefix)
        self._fin: tuple | None = None       # (t, sn, ranges): the delta check remembers t (settle)
        self._ctx_next: tuple | None = None  # the next instant's QueryContext and the limits it has (prepare)
        self._until: list | None = None      # [state, leave known, leave instant, next-element instant per window]
        self._until_fails = 0      # unchanged-instant checks failed in a row
        self._until_skip = 0       # instants left whose check is skipped (windows changing every step)
        self._until_backoff = 1
        # the relevance check (engine.stream.pred_times), set up on its first use (_relevance),
        # and the ids of its predicates (_relevant_ids)
        self._rel: tuple | None = None
        self._rel_ids: tuple | None = None
        self._dg_skip: int | None = None   # the instant whose delta check is hopeless (quiet_until)
        self._mrows = False   # the instant's rows came from the maintained state (rows mode: run / evaluate)
        self._rel_fails = 0   # relevance checks in a row that found a change (quiet_until's back-off)
        self._rel_skip = 0    # instants left whose relevance check is skipped
        self._rel_backoff = 1
        self._ok: int | None = None   # the last instant run() answered (not an error)
        ranges = [bw.window.range_ms for bw in windows if bw.window.range_ms is not None]
        self._max_range = max(ranges) if ranges else None
        self._from_graphs: tuple | None = None   # (snapshot, the FROM graphs the compact path reads)
        tiny = TinyCore(query) if self._compact.patterns is not None else None
        self._tiny = tiny if tiny is not None and tiny.usable else None
        # the join core reads wide stored patterns by probes (not the one-pattern path: it masks rows)
        self._tiny_wide = self._tiny is not None and not self._tiny.flat and not self._tiny.general
        # a SELECT whose operators above the BGP all map no rows to no rows (no aggregation):
        # an instant without BGP solutions is the empty result; its variables are learned from
        # the first instant the executor evaluates
        self._empty_keeps = self._tiny is not None and _empty_preserving(query)
        self._empty_vars: tuple | None = None
        # the instant by code generated for the query's shape (engine.stream.tiny_gen), ahead of
        # the tuple-at-a-time core; backs off like it after a hand-back. It reads the compact
        # path's dataset (windows merged with the FROM graphs): not for an evaluator whose
        # dataset differs (RSP-QL's named windows: syntax_eval.WindowedEvaluator has no compact path)
        compact = type(self).compact_rows is InstantEvaluator.compact_rows
        self._gen = (GenQuery.of(query, mode) if self.GENERATED and compact and (
            self._compact.patterns is not None or _order_free(query)) else None)   # (SAMPLE, GROUP_CONCAT, LIMIT)
        if self._gen is None and self.GENERATED and compact and self.CLOSURES:   # (`:p+` `:p*` `:p?`: tiny_closure)
            self._gen = _closure_of(query, mode)
        self._gen_skip = 0
        self._gen_backoff = 0
        # the generated query's result maintained as the stream arrives (engine.stream.maintained):
        # the instant hands over rows already there (not when the join core is to be maintained
        # at every instant, incremental="always", nor every instant evaluated from scratch, False)
        # (RSTREAM: its event is the result itself; an I/DSTREAM query's rows -- without computed
        # numbers, which the state keeps as their keys -- are differenced here as the executor's)
        self._maint = (Maintained.of(self._gen, windows, db.max_rows, _JsonTerms())
                       if self.MAINTAINED and self._gen is not None and incremental and incremental != "always"
                       and (mode == "RSTREAM" or not self._gen.sh.computed) else None)
        if self._maint is not None and (mode != "RSTREAM" or self.form == "CONSTRUCT"):
            self._maint.rows_mode = True

    # -- dataset ---------------------------------------------------------------
    def window_graphs(self, t: int, track: bool = False):
        out = [(bw, self.cache.graph(bw, t, track)) for bw in self.windows]
        self._window_graphs = [g for _, g in out]
        return out

    def dataset(self, ctx: QueryContext, t: int, track: bool = False) -> DatasetView:
        snap = ctx.snapshot
        wins = self.window_graphs(t, track)
        stored_default = None

        def default_graph():
            nonlocal stored_default
            if stored_default is None:
                g = snap.default
                if self.absorb_log is not None and len(self.absorb_log):
                    fut = self.absorb_log.future_rows(t)
                    if len(fut):
                        g = g.apply(fut, None)
                stored_default = g
            return stored_default

        def stored(iri: str):
            if iri == DEFAULT_GRAPH_IRI:
                return default_graph()
            gid = ctx.lookup("<" + iri + ">")
            if gid >= 0 and gid in snap.named:
                return snap.named[gid]
            return None

        parts = [g for _, g in wins]
        self._stored_parts = []
        for iri in self.from_default:
            g = stored(iri)
            if g is not None and all(g is not h for h in parts):
                parts.append(g)
                self._stored_parts.append(g)
        default = merged_view(parts) if parts else EmptyGraph()
        named: dict[int, object] = {}
        if not self.from_default and not self.from_named:
            named.update(snap.named)
        else:
            for iri in self.from_named + self.from_default:
                g = stored(iri)
                if g is None:
                    continue
                gid = ctx.lookup("<" + iri + ">")  # the manager interns <urn:jindou:default>
                if gid >= 0:
                    named[gid] = g
        for bw, g in wins:
            named[bw.gid] = g
        self._plans.fresh(sum(g.n_triples for _, g in wins), snap.sn)
        return DatasetView(default, named, ("continuous",))

    def compact_dataset(self, ctx: QueryContext, t: int) -> DatasetView | None:
        """The dataset of instant ``t`` as one small graph (see :class:`_Compact`), or None
        when the query or the instant does not qualify."""
        rows = self.compact_rows(ctx, t)
        return None if rows is None else self._compact_view(rows)

    def _compact_view(self, rows: np.ndarray) -> DatasetView:
        if self._graph is None:
            self._graph = SmallGraph(rows)
        else:
            self._graph.load(rows)
        return DatasetView(self._graph, {}, _InstantPlans.COMPACT[1])

    def _stored_graphs(self, ctx: QueryContext) -> list:
        """The stored ``FROM`` graphs the compact and generated paths read, resolved once per
        store snapshot (a commit makes a new one)."""
        snap = ctx.snapshot
        fg = self._from_graphs
        if fg is not None and fg[0] is snap:
            return fg[1]
        graphs = []
        for iri in self.from_default:
            if iri == DEFAULT_GRAPH_IRI:
                g = snap.default
            else:
                gid = ctx.lookup("<" + iri + ">")
                g = snap.named.get(gid) if gid >= 0 else None
            if g is not None and not isinstance(g, EmptyGraph) and all(g is not h for h in graphs):
                graphs.append(g)
        self._from_graphs = (snap, graphs)
        return graphs

    def _generated(self, ctx: QueryContext, t: int) -> list | None:
        """Instant ``t`` by the query's generated code (:mod:`engine.stream.tiny_gen`): the
        windows' matching triples kept by the generator across instants (only the seqs new to a
        window are read), the stored graphs' per snapshot; None when it does not answer (the
        other paths then do)."""
        if self.reads_stored_default and self.absorb_log is not None and len(self.absorb_log):
            return None  # the stored default graph as of t: the merged path rewinds it
        graphs = self._stored_graphs(ctx)
        spec = []
        total = 0
        for bw, (g0, g1) in zip(self.windows, self.ranges(t), strict=True):
            total += g1 - g0
            if total > GEN_WINDOW:
                return None
            spec.append((bw.store, g0, g1))
        return self._gen.run(ctx, graphs, spec)

    def compact_rows(self, ctx: QueryContext, t: int, unbounded: bool = False) -> np.ndarray | None:
        """The triples of instant ``t``'s compact default graph (duplicates possible), or None
        when the query or the instant does not qualify (see :class:`_Compact`). ``unbounded``:
        windows of any size (for the one-pattern path of :mod:`engine.stream.tiny`, which
        reads them by masks and builds no graph)."""
        cp = self._compact
        if cp.patterns is None:
            return None
        if self.reads_stored_default and self.absorb_log is not None and len(self.absorb_log):
            return None  # the stored default graph as of t: the merged path rewinds it
        snap = ctx.snapshot
        graphs = self._stored_graphs(ctx)
        stored = cp.stored_rows(ctx, graphs) if graphs else _EMPTY3
        deferred = bool(graphs) and bool(cp._deferred)  # (set by stored_rows for these graphs)
        if deferred and cp.skip_deferred():
            return None  # the restricted part kept exceeding the limit: the merged view directly
        if stored is None:
            return None
        parts = [stored] if len(stored) else []
        total = len(stored)
        for bw, (g0, g1) in zip(self.windows, self.ranges(t), strict=True):
            if total + g1 - g0 > 2 * SMALL_WINDOW and not unbounded:
                return None
            if g1 > g0:
                spo, _ = bw.store.read(g0, g1)
                parts.append(spo)
                total += len(spo)
        if not parts:
            parts = [_EMPTY3]
        rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if deferred:
            extra = cp.anchored(rows, len(stored))
            cp.deferred_result(extra is not None)
            if extra is None:
                return None
            if len(extra):
                rows = np.concatenate([rows, extra])
        # the windows' size, as :meth:`dataset` counts it (the stored part changes only with ``sn``):
        # an instant on the other path then keeps the plans
        self._plans.fresh(total - len(stored), snap.sn)
        self._n_stored = len(stored)
        self._stored_arr = stored
        return rows

    # -- unchanged instants -------------------------------------------------------
    def ranges(self, t: int) -> list[tuple[int, int]]:
        """The seq range of each window at the ready instant ``t``, computed once per instant
        (a ready instant's ranges do not change: elements admitted later have tau beyond it)."""
        at = self._at
        if at is not None and at[0] == t:
            return at[1]
        rel = self._rel
        if rel is None:
            rel = self._relevance()
        if rel[0]:   # time windows: two bisections over the stream's element times (pred_times:
            # window_seqs inline, clamped to what the store retains)
            r = []
            for k, (store, pt, rng) in enumerate(rel[2]):
                if pt.seq != store.end_seq:
                    pt.sync(store)
                lo = t - rng
                g = pt.groups.get(ALL)   # the groups before their bound (see pred_times)
                since = pt.since
                if g is None or (since is not None and lo < since):
                    bw = self.windows[k]
                    r.append(bw.store.window_range(bw.window, t))
                    continue
                arr, head, seq0 = g
                i0 = bisect.bisect_right(arr, lo, head)
                g1 = seq0 + (bisect.bisect_right(arr, t, i0) if t > lo else i0)
                g0 = seq0 + i0
                live = store.live_start
                if g0 < live:
                    g0 = live
                r.append((g0, g1 if g1 > g0 else g0))
            self._at = (t, r)
            return r
        if at is not None and at[0] < t:   # from the last instant's ranges: a few steps, no search
            r = []
            for bw, (g0, g1) in zip(self.windows, at[1], strict=True):
                w = bw.window
                got = None
                if w.range_ms is not None and w.range_ms > 0:
                    got = advance_range(bw.store, g0, g1, t - w.range_ms, t)
                r.append(got if got is not None else bw.store.window_range(w, t))
        else:
            r = [bw.store.window_range(bw.window, t) for bw in self.windows]
        self._at = (t, r)
        return r

    def capture(self, t: int, spent_ms: float = 0.0) -> tuple:
        """What instant ``t``'s evaluation depends on: (t, store snapshot number, the seq range
        of each window). Taken before evaluating, so a commit meanwhile only makes
        :meth:`unchanged_until` more conservative. Its time counts in :meth:`run`'s latency,
        with ``spent_ms`` the scheduler spent on ``t`` before (the unchanged-instant check)."""
        t0 = time.perf_counter()
        st = (int(t), self.db.store.snapshot().sn, self.ranges(t))
        self._pre = (t, spent_ms + (time.perf_counter() - t0) * 1000.0)
        return st

    def state_at(self, t: int) -> tuple:
        """:meth:`capture` untimed: the scheduler times its check and this capture as one
        region and hands that time to :meth:`run` (it sets :attr:`_pre` to ``(t, ms)``)."""
        return (int(t), self.db.store.snapshot().sn, self.ranges(t))

    #: failed unchanged-instant checks in a row before skipping some, and the most skipped at a
    #: time: an instant whose check is skipped goes to the delta check (which reuses the last
    #: result when nothing changed), so a skip never changes a result; at most this many
    #: instants of an unchanged run are reported one by one rather than in the run's event
    UNTIL_FAILS = 3
    UNTIL_SKIP_MAX = 4

    def unchanged_until(self, state: tuple, t: int, last: int, step: int) -> int | None:
        """:meth:`_unchanged_until`, skipped (None) for a few instants after it kept failing
        (windows that change at every step: a check then costs 15-25 µs on a woken worker for
        nothing). Only while the delta check is on (not backing off): an unchanged instant whose
        check was skipped is then that check's cheap hit, not an evaluation."""
        if self._until_skip > 0:
            dg = self._delta
            if dg is not None and dg.last is not None and dg.checks_next():
                self._until_skip -= 1
                return None
            self._until_skip = 0
        u = self._unchanged_until(state, t, last, step)
        if u is not None:
            self._until_fails = 0
            self._until_backoff = 1
        else:
            self._until_fails += 1
            if self._until_fails >= self.UNTIL_FAILS:
                self._until_fails = 0
                self._until_skip = self._until_backoff
                self._until_backoff = min(self.UNTIL_SKIP_MAX, 2 * self._until_backoff)
        return u

    #: the relevance check on (tests compare with it off)
    RELEVANCE = True

    @property
    def delta_last(self) -> int | None:
        """The instant the delta check compares with (:class:`~engine.stream.delta.DeltaGuard`),
        None if none: the GC keeps the absorbed facts after it (:func:`engine.stream.gc.absorb_horizon`)."""
        dg = self._delta
        return None if dg is None else dg.last

    def _relevance(self) -> tuple:
        """``(usable, the relevant predicates' keys or None for every triple, per window
        (its store, the store's element-time index, RANGE), the ids of the predicates some
        pattern matches with both ends variable)``, made on the first check. A change of one of
        the latter matches that pattern: the delta check (finer: it compares subjects and
        objects too) is not asked then (:meth:`run`)."""
        rel = self._rel
        if rel is None:
            timed = self.RELEVANCE and all(bw.window.range_ms is not None for bw in self.windows)
            # f:timestamp reads element times, which a repeat of a triple changes (WindowedEvaluator)
            keys = relevant_predicates(self.query) if timed and not getattr(self, "element_times", False) else None
            wins = tuple((bw.store, pred_times.of(bw.store), int(bw.window.range_ms))
                         for bw in self.windows) if timed else ()
            coarse = frozenset()
            if keys is not None:   # predicates some pattern matches with both ends variable
                d = self.db.store.dictionary
                ids = (d.lookup(tp.p.key) for tp in (query_patterns(self.query) or _closure_patterns(self.query))
                       if not isinstance(tp.s, A.Const) and not isinstance(tp.o, A.Const))
                coarse = frozenset(int(i) for i in ids if i >= 0)
            rel = self._rel = (timed, keys, wins, coarse)
        return rel

    def _relevant_ids(self) -> tuple:
        """``(dictionary, its size then, the ids of the relevant predicates, how many keys are
        absent)``. Ids never change; a key absent from the dictionary can only appear later with
        an id at least its size then, so it is looked up again only once some stream of the
        query indexed such a predicate id (new predicates are rare; new subjects and objects
        are not)."""
        rel = self._rel
        d = self.db.store.dictionary
        memo = self._rel_ids
        if memo is not None and memo[0] is d and (not memo[3] or max(w[1].max_pid for w in rel[2]) < memo[1]):
            return memo
        size = len(d)   # before the lookups: a term interned after one has an id >= size
        ids = []
        for k in rel[1]:
            i = int(d.lookup(k))
            if i >= 0:
                ids.append(i)
        memo = self._rel_ids = (d, size, tuple(ids), len(rel[1]) - len(ids))
        return memo

    #: relevance checks that found a change in a row (one instant ready each) before some
    #: are skipped, and the most skipped at a time (see :meth:`quiet_until`)
    REL_FAILS = 16
    REL_SKIP_MAX = 4

    def _rel_failed(self) -> tuple:
        """A relevance check found instant ``t`` to evaluate: the back-off's count (quiet_until)."""
        f = self._rel_fails = self._rel_fails + 1
        if f >= self.REL_FAILS:
            self._rel_skip = self._rel_backoff
            self._rel_backoff = min(self.REL_SKIP_MAX, 2 * self._rel_backoff)
        return _EVALUATE

    def quiet_until(self, state: tuple, t: int, last: int, step: int, alone: bool = False) -> tuple[int | None, bool]:
        """The scheduler's check of instant ``t`` against the evaluated (or reused) instant
        ``te`` of ``state``: ``(u, True)`` when the windows and stored data stay the same for
        ``t..u`` (:meth:`unchanged_until`'s answer); ``(t, False)`` when no triple of a predicate
        the query's patterns can match entered or left its windows (the result is ``te``'s:
        :meth:`reuse`); ``(None, True)``: evaluate ``t``.

        For time windows both answers come from the streams' element times per predicate
        (:mod:`engine.stream.pred_times`: a few bisections, no window read); other windows take
        :meth:`unchanged_until`. A result is reused only after an answered instant (not after
        an error), with the same store snapshot and no absorbed fact of the stored default graph
        becoming visible "as of event time" (both also end an unchanged run). With one instant
        ready (``last == t``) an unchanged run is that instant alone, whose event is the same
        either way: only the relevant predicates are looked at then. Kept to one call on the
        commonest path (an instant runs on a woken thread, where every call and object touched
        costs a few cache misses).

        Back-off: after :attr:`REL_FAILS` checks in a row found a change (windows where every
        step brings a triple the query reads, like sensor observations), the next instants
        with one instant ready are evaluated without the check, 1, 2, then at most
        :attr:`REL_SKIP_MAX` at a time, each such period followed by one check; a check that
        reuses ends it. Only where the check could answer nothing but "reuse" or "evaluate"
        (one instant ready, the last instant answered, a query the relevance check reuses
        for: no NOW() and the like) or an unchanged run reported like an evaluated instant
        (``alone``: the scheduler's ``idle_after`` > 1): evaluating gives the same event, so a skip
        changes no result, only what the instant costs (a check that fails costs 10-15 µs on
        a woken worker; a skipped instant that could have been reused costs an evaluation)."""
        rel = self._rel
        if rel is None:
            rel = self._relevance()
        if not rel[0]:
            return self.unchanged_until(state, t, last, step), True
        te, sn, ranges = state
        mt = self._maint
        if mt is not None and alone and last == t and self._ok == te and rel[1] is not None and mt.healthy() \
                and not mt.rows_mode:
            # a maintained result answers about as cheaply as a reuse: no check (the same
            # conditions as the back-off's below: evaluating gives the same event)
            return _EVALUATE
        if self._rel_skip and alone and last == t and self._ok == te and rel[1] is not None:
            self._rel_skip -= 1
            _REL_SKIPPED[0] += 1
            return _EVALUATE
        dbs = self.db.store
        if dbs.snapshot().sn != sn:
            return self._rel_failed()
        ch = None
        if self.reads_stored_default:
            al = self.absorb_log
            if al is not None and len(al):
                nxt_abs = al.next_after(te)
                if nxt_abs is not None:
                    ch = first_instant(nxt_abs, step)
                    if ch <= t:
                        return self._rel_failed()
        reuse = rel[1] is not None and self._ok == te
        if reuse:
            memo = self._rel_ids
            if memo is None or memo[0] is not dbs.dictionary or memo[3]:
                memo = self._relevant_ids()
            ids = memo[2]
        every = last > t or not reuse   # the whole windows: an unchanged run, or no relevance
        ch_all = ch
        for store, pt, rng in rel[2]:
            if pt.seq != store.end_seq:
                pt.sync(store)
            lo = te - rng
            groups = pt.groups   # before its bound (pred_times: a trim publishes new groups after it)
            since = pt.since
            if since is not None and lo < since:   # trimmed below te's window: not known here
                return (None if ranges is None else self.unchanged_until(state, t, last, step)), True
            if reuse:
                for key in ids:
                    g = groups.get(key)
                    if g is None:
                        continue
                    arr = g[0]
                    if not arr or arr[-1] <= lo:   # all of them left before te's window
                        continue
                    c = change_by(g, te, rng, step, t)   # (the tail first: an element entering by t)
                    if c <= t:
                        if key in rel[3]:
                            self._dg_skip = t
                        if not every:
                            return self._rel_failed()
                        reuse = False
                        break
                    if ch is None or c < ch:
                        ch = c
            if every:
                c = next_change(groups, _EVERY, te, rng, step)
                if c is not None and (ch_all is None or c < ch_all):
                    ch_all = c
        if every:
            u = last if ch_all is None else min(last, ch_all - step)
            if u >= t:
                if self._rel_fails:   # (the back-off ends; nothing written on the commonest path)
                    self._rel_fails = self._rel_skip = 0
                    self._rel_backoff = 1
                return u, True
        if reuse:
            if self._rel_fails:
                self._rel_fails = self._rel_skip = 0
                self._rel_backoff = 1
            return t, False
        return self._rel_failed()

    def reuse(self, state: tuple, prefix, t: int) -> tuple[bytes, tuple]:
        """``(the event data, the state)`` of instant ``t``, whose result :meth:`quiet_until`
        found to be ``state``'s: the same result (an empty I/DSTREAM difference) with ``t``'s
        window; the state's instant moves on (the next check reads one step's change), the
        snapshot is the same, no seq ranges (only a time-window query reuses this way, and its
        checks read none)."""
        self._ok = t
        _REUSED[0] += 1
        r = self._max_range
        tail = b',"window":{"start":%d,"end":%d}}' % (t - r, t)
        return (prefix + tail if type(prefix) is bytes else b"".join((prefix, tail))), (t, state[1], None)

    def _unchanged_until(self, state: tuple, t: int, last: int, step: int) -> int | None:
        """The last instant ``u`` in ``[t, last]`` such that every instant in ``(te, u]`` has the
        same window contents and stored data as the evaluated instant ``te`` of ``state``
        (so the same result); None when instant ``t`` may differ.

        A time window's content changes only at the first instant >= the timestamp of the next
        element to enter (the one after its range) or >= tau + RANGE of the oldest element in
        it; a count window's only when an element enters. Elements admitted later have
        tau >= the progress, beyond every ready instant. The stored default graph "as of
        event time" changes at the next absorbed timestamp; any other commit since ``te``
        means "changed".

        The timestamps read here are fixed once read (a seq's element never changes), so they
        are kept per ``state`` (:attr:`_until`): a later call re-reads only a window whose next
        element had not arrived yet, and checks the GC's progress (two integers per window)."""
        te, sn, ranges = state
        if ranges is None or self.db.store.snapshot().sn != sn:   # (a reused instant's state: quiet_until)
            return None
        memo = self._until
        if memo is None or memo[0] is not state:
            memo = self._until = [state, False, None, [None] * len(ranges)]
        nxt = memo[3]
        change = None
        # first what usually decides it: a window's next element arrived and enters by t
        for k, (bw, (g0, g1)) in enumerate(zip(self.windows, ranges, strict=True)):
            store = bw.store
            live = store.live_start
            if (g0 < g1 and g0 < live) or g1 < live:
                return None   # the GC freed data this window held or was about to hold
            c = nxt[k]
            if c is None and g1 < store.end_seq:   # the next element arrived: when it enters
                with store._lock:
                    if g1 < store.live_start:
                        return None
                    c = nxt[k] = first_instant(store._tau_at(g1), step)
            if c is not None:
                if c <= t:
                    return None
                change = c if change is None or c < change else change
        if not memo[1]:   # the earliest instant at which an element leaves a time window
            leave = None
            for bw, (g0, g1) in zip(self.windows, ranges, strict=True):
                if not bw.window.is_count and g0 < g1:
                    store = bw.store
                    with store._lock:
                        if g0 < store.live_start:
                            return None
                        c = first_instant(leaves_at(bw.window, store._tau_at(g0)), step)
                    leave = c if leave is None or c < leave else leave
            memo[1], memo[2] = True, leave
        leave = memo[2]
        if leave is not None and (change is None or leave < change):
            change = leave
        if self.absorb_log is not None and self.reads_stored_default:
            nxt_abs = self.absorb_log.next_after(te)
            if nxt_abs is not None:
                c = first_instant(nxt_abs, step)
                change = c if change is None or c < change else change
        u = last if change is None else min(last, change - step)
        return u if u >= t else None

    def repeat_prefix(self, data: bytes, win: dict) -> bytes:
        """The part of an event's data before its ``window`` member, for reporting later
        unchanged instants: the same result (RSTREAM, errors) or an empty difference."""
        rp = self._rp
        if rp is not None and rp[0] is data:   # the one run() made (or reused) for this event
            return rp[1]
        wm = self._wm
        member = wm[2] if wm is not None and wm[1] is win else _window_member(win)
        if not (data.endswith(b"}") and data.endswith(member, 0, len(data) - 1)):
            raise ValueError("the event data does not end with its window member")
        if self.mode == "RSTREAM" or data.startswith(b'{"error"'):
            # a view, not a copy: an event of megabytes (C2: 8.7 MB) is not copied again per instant;
            # a small one is copied once (each repeat then concatenates bytes, cheaper than a join)
            n = len(data) - len(member) - 1
            return data[:n] if n <= _SMALL_PREFIX else memoryview(data)[:n]
        if self.form == "CONSTRUCT":
            return b'{"triples":""'
        return b'{"head":' + orjson.dumps({"vars": self._vars}) + b',"results":{"bindings":[]}'

    def repeat(self, prefix: bytes, t: int) -> bytes:
        """The data of an unchanged instant ``t`` from :meth:`repeat_prefix`."""
        return b"".join((prefix, self.member_bytes(t), b"}"))

    # -- one instant ---------------------------------------------------------
    def oldest_count_tau(self, t: int) -> int | None:
        taus = [bw.store.oldest_tau(bw.window, t) for bw in self.windows if bw.window.is_count]
        taus = [x for x in taus if x is not None]
        return min(taus) if taus else None

    def window_member(self, t: int) -> dict:
        """The event's ``window`` member at ``t`` (the same dict for every asker of instant ``t``)."""
        wm = self._wm
        if wm is not None and wm[0] == t:
            return wm[1]
        r = self._max_range
        if r is not None:   # the bytes orjson writes for the dict, by one formatting (cold: 1 µs, not 7)
            t = int(t)
            self._wm = (t, {"start": t - r, "end": t}, b',"window":{"start":%d,"end":%d}' % (t - r, t))
            return self._wm[1]
        win = window_member([bw.window for bw in self.windows], t, self.oldest_count_tau(t))
        self._wm = (t, win, _window_member(win))
        return win

    def member_bytes(self, t: int) -> bytes:
        """``b',"window":{...}'`` of instant ``t`` (a time-window query's by one formatting:
        the bytes ``orjson`` writes for :meth:`window_member`'s dict)."""
        r = self._max_range
        if r is not None:
            t = int(t)
            return b',"window":{"start":%d,"end":%d}' % (t - r, t)
        wm = self._wm
        if wm is None or wm[0] != t:
            self.window_member(t)
            wm = self._wm
        return wm[2]

    def _new_context(self, snap) -> QueryContext:
        db = self.db
        return QueryContext(snap, base=self.query.base, timeout=db.query_timeout, max_rows=db.max_rows,
                            term_cache=db._term_cache, query_memory=getattr(db, "query_memory", None),
                            plan_cache=self._plans)

    def _context(self, snap) -> QueryContext:
        """The instant's :class:`QueryContext`: the one :meth:`prepare` made after the last
        event, given its snapshot and deadline now, if the database's limits are still those
        it was made with; else a new one. Each context serves one instant."""
        pre = self._ctx_next
        if pre is None:
            return self._new_context(snap)
        self._ctx_next = None
        db = self.db
        ctx, timeout, max_rows, terms, qm = pre
        if timeout != db.query_timeout or max_rows != db.max_rows or terms is not db._term_cache \
                or qm != getattr(db, "query_memory", None) or (qm is None and current_budget() is not None):
            return self._new_context(snap)
        ctx.snapshot = snap
        ctx.dictionary = snap.dictionary
        ctx.deadline = (time.monotonic() + timeout) if timeout else None   # the instant's own time
        return ctx

    def prepare(self, t: int | None) -> None:
        """After an evaluated instant's event, before the next instant ``t`` is ready: what
        that instant will need and does not depend on its data -- its window member (time
        windows) and a :class:`QueryContext` without snapshot and deadline (:meth:`_context`).
        Made while the worker would wait anyway, so the instant itself (a woken thread, where
        every object it makes or code it runs first costs cache misses) does not."""
        if t is None:
            return
        if self._max_range is not None:
            self.window_member(t)
        db = self.db
        snap = db.store.snapshot()
        pre = self._ctx_next
        # one an instant answered without it (a maintained result) did not use stays, while of
        # the same snapshot (not holding an older one; its limits are checked where it is used)
        if pre is None or pre[0].snapshot is not snap:
            self._ctx_next = (self._new_context(snap), db.query_timeout, db.max_rows,
                              db._term_cache, getattr(db, "query_memory", None))
        m = self._maint
        if m is not None and self._maintained_ok():   # the state moved to t (expired triples out)
            m.advance(snap, self._stored_graphs(_SnapCtx(snap)), int(t))

    #: the generated-code path on (tests compare with it off)
    GENERATED = True
    #: the maintained-result path on (tests compare with it off)
    MAINTAINED = True
    #: `:p+` / `:p*` / `:p?` paths over the stored graphs on the generated / maintained paths
    #: (engine.stream.tiny_closure; tests compare with it off)
    CLOSURES = True

    def _maintained_ok(self) -> bool:
        """Whether the maintained state may answer: not while the stored default graph is read
        as of each instant (absorbed triples rewind it: the merged path's)."""
        return not (self.reads_stored_default and self.absorb_log is not None and len(self.absorb_log))

    def _maintained(self, t: int) -> bytes | None:
        """Instant ``t``'s event data from the maintained rows (:mod:`engine.stream.maintained`),
        None when the state is not its dataset (the ordinary path answers)."""
        if not self._maintained_ok():
            return None
        return self._maint.instant(self.db.store.snapshot(), self._graphs_of, self.ranges(t), t, self.member_bytes(t))

    def _graphs_of(self, snap) -> list:
        return self._stored_graphs(_SnapCtx(snap))

    def maintained_due(self, state: tuple, t: int, last: int, alone: bool) -> bool:
        """Whether instant ``t`` goes to :meth:`maintained_instant` without the scheduler's
        relevance / unchanged check and capture: the same conditions under which
        :meth:`quiet_until` answers "evaluate" for a maintained query at once (one instant
        ready, the last instant answered, a query the relevance check reuses for, a state kept
        and not backing off; evaluating gives the same event as any reuse), and no stored
        default graph read as of each instant. Attribute reads only: it runs on a woken worker
        (the conditions that cannot change -- the query's form, its windows -- are read once,
        :meth:`_due_static`)."""
        mt = self._mdue
        if mt is None:
            mt = self._due_static()
        if mt is False or not alone or last != t or self._ok != state[0]:
            return False
        if mt.state is None or mt._skip or mt._probe:
            return False
        ab = self._mdue_absorb   # (the merged path's: the stored default graph rewound)
        return ab is None or not len(ab)

    #: maintained_due's conditions that do not change: None (not known yet), False, or the state
    _mdue = None
    _mdue_absorb = None

    def _due_static(self):
        """:meth:`maintained_due`'s fixed conditions: the query's :class:`Maintained` if it has
        one that writes event bodies (RSTREAM, not rows mode) over time windows the relevance
        check reuses for, else False (None while the relevance check has not been made)."""
        mt = self._maint
        rel = self._rel
        if mt is None or mt.rows_mode:
            self._mdue = False
            return False
        if rel is None:
            return False
        if not (rel[0] and rel[1] is not None):
            self._mdue = False
            return False
        self._mdue_absorb = self.absorb_log if self.reads_stored_default else None
        self._mdue = mt
        return mt

    def maintained_instant(self, t: int) -> tuple[bytes, tuple] | None:
        """Instant ``t`` from the maintained state in one step (:meth:`maintained_due` said so):
        ``(its event data, its state)``, the data what :meth:`run` writes, the state what
        :meth:`state_at` takes; None when the state does not answer (the caller evaluates
        ``t`` by :meth:`run` with ``maintained=False``: the state is asked once per instant)."""
        snap = self.db.store.snapshot()
        r = self.ranges(t)
        wm = self._wm   # t's window member, formatted by prepare() after the last event
        data = self._maint.instant(snap, self._graphs_of, r, t,
                                   wm[2] if wm is not None and wm[0] == t else self.member_bytes(t))
        if data is None:
            return None
        _MFAST[0] += 1
        self._fin = None
        self._ok = t
        return data, (t, snap.sn, r)

    def evaluate(self, t: int) -> QueryResult:
        db = self.db
        t0 = time.perf_counter()
        snap = db.store.snapshot()  # before reading the absorb log (see AbsorbLog)
        ctx = self._context(snap)
        m = self._maint
        if m is not None and m.rows_mode and self._maintained_ok():
            # an I/DSTREAM or CONSTRUCT query's rows from its maintained state (differenced /
            # instantiated by render as the generated code's)
            rows = m.rows_at(snap, self._graphs_of, self.ranges(t), t)
            if rows is not None:
                self._mrows = True
                return _Generated(self._gen, rows, ctx)
        inc = self.incremental_core
        # while the windows are small enough for the tuple-at-a-time path, evaluating from scratch
        # is cheaper than maintaining (which reads the windows as slid graphs and joins deltas):
        # the adaptive choice is not asked (its probes would cost a slow instant now and then)
        maintain = inc is not None and not (self._tiny_last and inc.adaptive) and inc.wants()
        tiny = self._tiny
        flat = tiny is not None and tiny.flat
        gen = self._gen
        if gen is not None and self._gen_skip > 0:
            self._gen_skip -= 1
            gen = None
        if gen is not None and not maintain:
            out = self._generated(ctx, t)
            if out is not None:
                self._tiny_last = True
                self._gen_backoff = 0
                if inc is not None:
                    inc.record_plain((time.perf_counter() - t0) * 1000.0)
                return _Generated(gen, out, ctx)
            self._gen_backoff = min(2 * self._gen_backoff or 8, 256)
            self._gen_skip = self._gen_backoff
        self._compact.lazy_next = self._tiny_skip == 0 and self._tiny_wide   # (hook: stored_relation)
        rows = None if maintain else self.compact_rows(ctx, t, unbounded=flat)
        self._compact.lazy_next = False
        self._tiny_last = False
        if self._tiny_skip > 0:
            self._tiny_skip -= 1
        elif rows is not None and tiny is not None and (flat or len(rows) - self._n_stored <= TINY_WINDOW):
            res = self._evaluate_tiny(ctx, rows)
            if res is not None:
                self._tiny_last = True
                self._tiny_backoff = 0
                if inc is not None:
                    inc.record_plain((time.perf_counter() - t0) * 1000.0)
                return res
            # handed back (too many rows for tuple-at-a-time): do not try again for a while
            self._tiny_backoff = min(2 * self._tiny_backoff or 8, 256)
            self._tiny_skip = self._tiny_backoff
        if rows is not None:   # (hook: the deferred patterns' restriction, if the tiny path left it out)
            rows = self._compact.complete(rows, self._n_stored)
        if rows is not None and len(rows) - self._n_stored > 2 * SMALL_WINDOW:
            rows = None   # (read for the one-pattern path, which handed it back): too large a SmallGraph
        ds = None if rows is None else self._compact_view(rows)
        if ds is not None:
            res = evaluate_query(self.query, ctx, ds)
            if inc is not None:
                inc.record_plain((time.perf_counter() - t0) * 1000.0)
            return res
        ds = self.dataset(ctx, t, track=maintain)
        if maintain:
            try:
                res = inc.evaluate(ctx, ds, self.cache, self.windows, self._window_graphs, t, self._stored_parts,
                                   spent_ms=(time.perf_counter() - t0) * 1000.0)
            except BaseException:
                inc.reset()  # a failed instant (timeout, row budget) leaves no half-updated state
                raise
            if res is not None:
                return res
            t0 = time.perf_counter()   # abandoned (dearer than from scratch): the plain cost from here
        res = evaluate_query(self.query, ctx, ds)
        if inc is not None:
            inc.record_plain((time.perf_counter() - t0) * 1000.0)
        return res

    def _evaluate_tiny(self, ctx: QueryContext, rows: np.ndarray) -> QueryResult | None:
        """The instant by :class:`~engine.stream.tiny.TinyCore` (the BGP tuple at a time, the
        operators above it by the executor); None when it hands the instant back."""
        sol = self._tiny.solutions(rows, ctx, self._stored_arr, self._compact.relations())
        if sol is None:
            return None
        if len(sol) == 0 and self._empty_vars is not None:
            # no solution of the BGP, and every operator above it maps no rows to no rows: the
            # empty result without the executor (the commonest instant of a selective query)
            return QueryResult(form="SELECT", terms=ctx, vars=list(self._empty_vars),
                               columns=[_EMPTY1] * len(self._empty_vars))
        if self._tiny.direct is not None:   # SELECT [DISTINCT] ?vars over the BGP: no executor
            res = self._tiny.result(sol, ctx)
            if res is not None:
                return res
        ev = TinyEvaluator(ctx, _NO_GRAPH, self._tiny.base, sol)
        try:
            res = evaluate_query(self.query, ctx, _NO_GRAPH, evaluator=ev)
        except TinyFallback:
            return None
        finally:
            ctx.evaluator = None
        if self._empty_keeps and self._empty_vars is None and res.form == "SELECT":
            self._empty_vars = tuple(res.vars)   # a function of the query alone
        return res

    def prime(self, t: int) -> None:
        """I/DSTREAM after a restart: evaluate instant ``t`` -- the last one of the query's durable
        result log -- without reporting it, so the next instant's difference is taken against
        ``t``'s solutions as it would have been without the restart (not against nothing, which
        reported every solution as added). The windows are back from the window journal by then,
        and the GC keeps one step more of them for such queries (:func:`engine.stream.gc.stream_horizon`)."""
        if self.mode == "RSTREAM":
            return
        self.run(int(t))

    def run(self, t: int, maintained: bool = True) -> tuple[bytes, float]:
        """Evaluate instant ``t``: returns (the event's data JSON, latency in ms). An instant
        whose window change cannot touch the query's patterns (:mod:`engine.stream.delta`)
        reports the last evaluated result without evaluating. The latency covers the whole
        instant: what was spent on ``t`` before (:attr:`_pre`: :meth:`capture`'s time, or the
        scheduler's check and capture, :meth:`state_at`), reading the windows, evaluating and
        writing the event. What later instants need of it (its repeat prefix, the delta
        check's memory) is kept once the event is in the log (:meth:`settle`). ``maintained``
        False: the maintained state was asked for ``t`` already (:meth:`maintained_instant`)
        and did not answer; the ordinary path answers (and measures, for the state's guard)."""
        t0 = time.perf_counter()
        pre_t, spent_ms = self._pre
        if pre_t != t:
            spent_ms = 0.0
        self._pre = _NO_PRE
        m = self._maint
        if m is not None:
            # (a state in rows mode answers inside evaluate(): after the delta check's reuse)
            data = self._maintained(t) if maintained and not m.rows_mode else None
            if data is not None:
                self._fin = None
                self._ok = t
                return data, spent_ms + (time.perf_counter() - t0) * 1000.0
            # the ordinary path's cost, against which the maintenance's is weighed (its guard)
            c0 = time.thread_time()
            self._mrows = False
            out = self._ordinary(t, t0, spent_ms)
            if not self._mrows:
                m.ordinary(time.thread_time() - c0)
            return out
        return self._ordinary(t, t0, spent_ms)

    def _ordinary(self, t: int, t0: float, spent_ms: float) -> tuple[bytes, float]:
        """:meth:`run` without a maintained answer: the delta check's reuse or the evaluation."""
        dg = self._delta
        # the relevance check saw a change the delta check cannot find clean (a triple of a
        # predicate some pattern matches with variable ends): not asked, but remembered
        ask = 0 if dg is None else dg.ask(self._dg_skip == t)
        if ask:
            sn = self.db.store.snapshot().sn
            ranges = self.ranges(t)
            self._fin = (t, sn, ranges)   # remembered once the event is written (settle)
            if ask == 2:
                absorbed = False
                if self.reads_stored_default and self.absorb_log is not None:
                    nxt = self.absorb_log.next_after(dg.last)
                    absorbed = nxt is not None and nxt <= t
                prefix = dg.reusable(self.windows, sn, ranges, self.db.store.dictionary, absorbed)
                if prefix is not None:   # (the check moved its memory to t)
                    data = self.repeat(prefix, t)
                    self._rp = (data, prefix)
                    self._fin = None
                    self._ok = t
                    return data, spent_ms + (time.perf_counter() - t0) * 1000.0
        else:
            self._fin = None
        res = self.evaluate(t)
        data = self.render(res, self.window_member(t))
        self._ok = t
        return data, spent_ms + (time.perf_counter() - t0) * 1000.0

    def settle(self, data: bytes, t: int) -> bytes:
        """After instant ``t``'s event (``data``, :meth:`run`'s) went into the log, what later
        instants need of it: its repeat prefix (:meth:`repeat_prefix`, returned), and the delta
        check's memory of ``t`` if :meth:`run` asked for it. Neither is part of the result, so
        neither delays it; a run() not settled leaves the delta check an older memory, against
        which it only compares a longer change."""
        rp = self._rp
        if rp is not None and rp[0] is data:
            prefix = rp[1]
        else:
            wm = self._wm
            prefix = self.repeat_prefix(data, wm[1] if wm is not None and wm[0] == t else self.window_member(t))
            self._rp = (data, prefix)
        fin = self._fin
        if fin is not None:
            self._fin = None
            if fin[0] == t:
                self._delta.remember(t, fin[1], fin[2], prefix)
        return prefix

    def render(self, res: QueryResult, win: dict) -> bytes:
        wm = self._wm
        member = wm[2] if wm is not None and wm[1] is win else _window_member(win)
        if type(res) is _Generated and (self.form == "ASK" or (self.mode == "RSTREAM" and self.form == "SELECT")):
            # rows of the generated code (RSTREAM SELECT, ASK): written directly;
            # an I/DSTREAM SELECT's rows are differenced below as the executor's (_diff_rows
            # reads them as its QueryResult: _Generated.__getattr__)
            return res.gen.render(res.rows, self._json, res.ctx, member)
        if self.form == "ASK":
            return sparql_json(res, member)
        if self.form == "CONSTRUCT":
            if type(res) is _Generated:   # the template instantiated per generated row
                rows = res.rows
                if rows and res.gen.sh.names:
                    # counts, computed numbers and terms' keys as term ids, an error unbound (-1):
                    # the generated rows hold them as values (a sub-SELECT's SUM, a BIND)
                    cols = res.gen.result(rows, res.ctx).columns
                    rows = list(zip(*[c.tolist() for c in cols], strict=True))
                res = _gen_construct.triples(self.query.template, res.gen.sh.names, rows, res.ctx)
            if self.mode != "RSTREAM":
                res = self._diff_triples(res)
            nt = serialize(res, NTRIPLES).decode("utf-8")
            return orjson.dumps({"triples": nt, "window": win})
        if self.mode != "RSTREAM":
            res = self._diff_rows(res)
        return self._json.select(res, member)

    # -- I/DSTREAM -------------------------------------------------------------
    def batch_prev(self, k: int) -> np.ndarray | None:
        """For a batch that takes I/DSTREAM differences of many members at once
        (:mod:`engine.stream.multiquery`): the rows this SELECT's next difference is taken
        against ((n, k) store ids), or None when its term table holds computed terms (then
        :meth:`render` takes the difference, as alone)."""
        if self._terms.key_of:
            return None
        p = self._prev
        if p is None:
            return np.zeros((0, k), dtype=np.int64)
        return p if p.ndim == 2 and p.shape[1] == k else None

    def batch_advance(self, cur: np.ndarray, names: list[str]) -> None:
        """After a batch took this member's difference against :meth:`batch_prev`: the state
        :meth:`_diff_rows` leaves (the rows of this instant, the variables)."""
        self._prev = cur
        self._vars = names

    def _diff_rows(self, res: QueryResult) -> QueryResult:
        ctx = res.terms
        n = len(res)
        if res.columns:
            cur = np.stack([self._terms.stabilize(c, ctx) for c in res.columns], axis=1)
        else:
            cur = np.zeros((n, 0), dtype=np.int64)
        prev = self._prev if self._prev is not None else np.zeros((0, cur.shape[1]), dtype=np.int64)
        cur, prev = self._terms.refresh(cur, prev)
        out = multiset_diff(cur, prev) if self.mode == "ISTREAM" else multiset_diff(prev, cur)
        self._prev = cur
        self._vars = list(res.vars)
        frozen = _FrozenTerms(self._terms, out)
        self._terms.prune([cur])
        cols = [np.ascontiguousarray(out[:, j]) for j in range(out.shape[1])]
        return QueryResult(form="SELECT", terms=frozen, vars=list(res.vars),
                           columns=cols, n_rows=len(out))

    def _diff_triples(self, res: QueryResult) -> QueryResult:
        ctx = res.terms
        tr = res.triples if res.triples is not None else _EMPTY3
        cur = np.stack([self._terms.stabilize(tr[:, j], ctx) for j in range(3)], axis=1) if len(tr) else _EMPTY3
        prev = self._prev if self._prev is not None else _EMPTY3
        cur, prev = self._terms.refresh(cur, prev)
        out = set_diff(cur, prev) if self.mode == "ISTREAM" else set_diff(prev, cur)
        self._prev = cur
        frozen = _FrozenTerms(self._terms, out)
        self._terms.prune([cur])
        return QueryResult(form="CONSTRUCT", terms=frozen, triples=out)


class _Generated:
    """An instant's result rows from generated code (:mod:`engine.stream.tiny_gen`), written
    by :meth:`InstantEvaluator.render`."""

    __slots__ = ("gen", "rows", "ctx", "_res")
    form = "SELECT"

    def __init__(self, gen: GenQuery, rows: list, ctx: QueryContext):
        self.gen, self.rows, self.ctx = gen, rows, ctx
        self._res = None

    def __len__(self) -> int:
        return len(self.rows)

    def __getattr__(self, name: str):
        """Any other reader (tests, a caller that wants columns) gets the :class:`QueryResult`
        of the rows, made on first use."""
        if name.startswith("__"):
            raise AttributeError(name)
        res = self._res
        if res is None:
            res = self._res = self.gen.result(self.rows, self.ctx)
        return getattr(res, name)


class _SnapCtx:
    """A store snapshot as the little of a :class:`QueryContext` the maintained path reads:
    the stored graphs' lookup (:meth:`InstantEvaluator._stored_graphs`) and the terms' keys
    (:meth:`_JsonTerms.render`)."""

    __slots__ = ("snapshot", "dictionary")

    def __init__(self, snap):
        self.snapshot = snap
        self.dictionary = snap.dictionary

    def lookup(self, key: str) -> int:
        return int(self.dictionary.lookup(key))

    def keys(self, ids: np.ndarray) -> list[str | None]:
        return self.dictionary.keys(ids)


class _FrozenTerms:
    """Keys of a diff result, decoded before the term table is pruned."""

    def __init__(self, terms: _StableTerms, rows: np.ndarray):
        neg = rows[rows < UNBOUND] if rows.size else np.zeros(0, dtype=np.int64)
        self._local = {int(j): terms.key_of[int(j)] for j in unique(neg).tolist()} if len(neg) else {}
        self._terms = terms

    def keys(self, ids: np.ndarray) -> list[str | None]:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return []
        d = self._terms.dictionary
        if bool((ids >= 0).all()):
            return d.keys(ids)
        out: list[str | None] = [None] * len(ids)
        st = np.flatnonzero(ids >= 0)
        if len(st):
            for i, k in zip(st.tolist(), d.keys(ids[st]), strict=True):
                out[i] = k
        for i in np.flatnonzero(ids < UNBOUND).tolist():
            out[i] = self._local[int(ids[i])]
        return out
