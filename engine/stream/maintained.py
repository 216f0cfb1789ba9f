"""A small-window query's result maintained while the stream arrives (CQELS-style).

Why: an instant on a woken worker costs 1-3 µs per first touch of an object, so evaluating
even a tiny window *at* the instant (:mod:`engine.stream.tiny_gen`) costs 200-1000 µs there.
Here the join is done when a triple arrives (on the ingestion thread, :func:`note`) and when it
expires (after the last instant's event, :meth:`Maintained.advance`): the instant only writes
the rows that are already there.

The state of one query is the dataset ``D`` of its *next* instant ``tau`` -- per window the seq
range ``[g0, g1)`` of its elements with ``tau - RANGE < t <= tau`` (elements beyond ``tau`` wait in
the stream's store, the "buffer"), as sets, merged with the stored ``FROM`` graphs -- and the
solutions of the query's BGP over ``D`` passing its FILTERs, counted per output row (SELECT: the
multiplicity; DISTINCT: present while the count is positive; GROUP BY / COUNT: solutions per group
and, for ``COUNT(DISTINCT ?v)``, per-group value counts; ASK: the total). Windows are sets: a
triple changes ``D`` only when its count over the windows goes 0 -> 1 or 1 -> 0 and the stored
graphs do not hold it. A triple ``x`` entering ``D`` adds, for each pattern ``i`` it matches, the
solutions with pattern ``i`` bound to ``x``, patterns ``j < i`` over ``D`` without ``x`` and
``j > i`` over ``D`` with ``x`` (each new solution once: at the first pattern using ``x``); leaving,
the same before it is removed. The delta joins are Python generated per starting pattern.

The next event's body is written on the ingestion thread once the elements changed the rows
(each row's JSON fragment once, when the row first appears). When every stream of the query holds
an element beyond the next instant, that instant is complete: its body is kept with the windows'
seq ranges it holds and the state moves on to the following instant. The instant
(:meth:`Maintained.instant`) answers only from a body whose dataset is exactly its own: the
windows' seq ranges equal :meth:`InstantEvaluator.ranges`, the store snapshot and the constants'
ids are those the state was built with; a state a few seqs behind is caught up there. Anything
else (a jump, a commit, a window above :data:`~engine.stream.tiny_gen.GEN_WINDOW`, more than
:data:`~engine.stream.tiny_gen.MAX_ROWS` rows or :data:`~engine.stream.tiny_gen.MAX_WORK` join
steps per triple, a FILTER value the closures do not decide) drops the state: the instant takes
the ordinary path and the state is rebuilt after it (:meth:`Maintained.advance`), backing off
after repeated drops. One lock per query: the ingestion thread and the worker both touch it.

What it costs, and why: the instant is cheap (the body is there), the CPU moves to the triples.
Each triple entering or leaving ``D`` runs a delta join; a query whose solutions join each window
triple with many stored solutions (CityBench's C5 / C9: every observation with every cultural
event and its coordinates, through a FILTER or a shared type) pays that join twice per triple
(in and out), where the instant's own evaluation (:mod:`tiny_gen`) pays it once per instant and
keeps the stored component's bindings per snapshot. The delta joins do the same where they can:
a group of patterns that reads no variable the delta has bound yet and whose classes the stored
part holds pairs of (:meth:`Maintained._cached_groups`) is read from a list of its stored-only
solutions kept per key and state, plus the few solutions that use a window pair, joined at the
triple; what remains is the cross product (and its FILTER) per triple, about twice what the
instant pays per instant on a 3-instant sliding window (each triple enters and leaves once).
Maintenance is kept while it costs up to ~8x an ordinary instant: that buys the latency users
wait for (a tumbling window, L6, pays ~7x: each element joined on arrival, the window cleared
after its instant, against one join of the window at the instant), and one query's maintenance
stays a small share of its step. Beyond that, where the ordinary instant is already fast
(< 1 ms), the CPU of a server with thousands of queries is worth more than the latency: the cost
guard (:attr:`Maintained.GUARD_EVERY`) stops maintaining that query for a long while.
"""

from __future__ import annotations

import logging
import threading
import weakref
from bisect import bisect_right
from collections import deque
from itertools import chain
from time import thread_time as _clock

from engine.stream import pred_times as _pt
from engine.stream import tiny_gen as _tg
from engine.stream.maint_opt import OptState, scope_of
from engine.stream.maint_opt import required_of as _required_of
from engine.stream.tiny_closure import guard_delta as _closure_guard
from engine.stream.tiny_gen import GEN_WINDOW, MAX_ROWS, MAX_WORK, GenQuery, _Hand, _index, _slot, _values
from engine.stream.tiny_gen import code_of as _code_of
from engine.stream.tiny_ops import Undecided, _num_item
from engine.stream.tiny_union import branch_of as _branch_of
from engine.stream.windows import query_step

__all__ = ["Maintained", "note", "answered_total", "spent"]

log = logging.getLogger("jindou.stream")

#: seqs an instant itself catches up (a state a little behind); more: the ordinary path
CATCH_UP = 64
#: join steps of the stored part's own solutions (once per store snapshot) above which a
#: query is not maintained
BUILD_WORK = 50 * MAX_WORK
#: instants the ingestion thread moves a state ahead per batch (an element beyond the next
#: instant completes it)
AHEAD = 4
#: output rows (groups) up to which :meth:`Maintained.advance` writes the next instant's body
#: when the expired triples changed them (more: the instant or the next element writes it, once)
READY_AHEAD = 32
_READY_AHEAD = [0]   # bodies advance() wrote (tests: the path is taken)
#: batches whose body writing was left to a later batch or the instant (Maintained.LAZY_BODY;
#: tests: the path is taken)
_LAZY = [0]
#: instants that wrote the body a batch had left (a wrong guess: LAZY_BODY off for LAZY_HOLD instants)
_LAZY_MISS = [0]
#: the gaps between a stream's batches (their last elements' times) the guess reads: the
#: largest of the last LAZY_GAPS, times LAZY_MARGIN, must fit before the instant
LAZY_GAPS = 4
LAZY_MARGIN = 2
LAZY_HOLD = 32
#: instants in a row completed by an element beyond them (on the ingestion thread, before they
#: were asked) after which the body is written only by the batch that completes its instant,
#: not also by the batches guessed to be its last (the guess above: the last two or three
#: batches of a long step each wrote it). An instant asked before that batch came writes the
#: body itself (latency, as a wrong guess) and the query then needs twice the run, up to
#: COMPLETED_RUN_MAX (a stream that now and then goes quiet past an instant stops using it)
COMPLETED_RUN = 2
COMPLETED_RUN_MAX = 64
#: instants that wrote the body a completing batch was to write (the run above guessed wrong)
_RUN_MISS = [0]
#: batches that left the body to the batch completing the instant (tests: the path is taken)
_BY_COMPLETE = [0]
#: (gap: only the completing batch writes the body)
_ONLY_COMPLETE = -(1 << 62)
#: windows' seq ranges read from the stream's element times (Maintained.PT_RANGES; tests: taken)
_PT_RANGES = [0]
#: windows moved past a completed instant from the batch in hand, not read back from the store
#: (Maintained._sync; tests: taken)
_BATCH_ROWS = [0]
#: instants the ingestion moves a state past without any instant asking for it before it stops
#: maintaining it (a query evaluated in a batch of queries of its shape, :mod:`multiquery`)
IDLE_MAX = 8
#: CPU seconds spent maintaining (the calling thread's), all queries of the process: on the
#: ingestion thread and on the worker after events (the benchmark reports both next to the instants)
_SPENT = [0.0, 0.0]
#: instants answered by a maintained state, all queries of the process (tests: the path is taken)
_ANSWERED = [0]
#: states built on the generator's stored entries, not a copy (tests: the path is taken)
_SHARED = [0]
#: maintained queries the cost guard stopped, all queries of the process
_GUARDED = [0]
#: joins that read a stored group's kept list (tests: the path is taken)
_SCHIT = [0]
#: the ingestion looked a state's constants up again after the dictionary grew (:meth:`Maintained._refresh_ids`;
#: tests: the path is taken): (times, a constant came in and the state took its id, one came in but a
#: window triple held it already: left for the instant)
_REFRESHED = [0, 0, 0]
#: aggregate values read from their kept value (:func:`_memo_agg`; tests: the path is taken)
_AGHIT = [0]
#: transient store -> the maintained queries reading it (weakly: a deleted query's goes with it)
_OBSERVERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_OBS_LOCK = threading.Lock()


def spent() -> tuple[float, float]:
    """CPU seconds spent maintaining (ingestion thread, worker's advance), all queries of the process."""
    return _SPENT[0], _SPENT[1]


def answered_total() -> int:
    """Instants answered from a maintained state, all queries of the process."""
    return _ANSWERED[0]


class _Drop(Exception):
    """The state cannot be kept (too many rows or join steps, an undecided value, a count
    below zero): it is dropped and rebuilt later."""


def note(store, seq0: int, rows, tau) -> None:
    """The ingestion hook (:meth:`engine.stream.ingest.Ingestor.store_batch`, under the stream's
    lock): the batch just appended to ``store`` from seq ``seq0`` -- ``rows`` (n, 3) ids, ``tau``
    their times -- joined into the maintained states of the queries reading it."""
    obs = _OBSERVERS.get(store)
    if not obs:
        return
    with _OBS_LOCK:
        obs = list(obs)
    rl = tl = None
    for m in obs:
        if m.state is None:
            continue
        if rl is None:
            rl, tl = rows.tolist(), tau.tolist()
        m.on_append(store, seq0, rl, tl)


class _State:
    """One query's maintained dataset and rows (see the module)."""

    __slots__ = ("ids", "dict_n", "sn", "graphs", "ws", "tau")

    def __init__(self, ids, dict_n, sn, graphs, n_windows: int):
        self.ids = ids            # the constants' ids per class the code's globals hold
        self.dict_n = dict_n      # the dictionary's size then (an absent constant: looked up again)
        self.sn = sn              # the store snapshot of the stored part
        self.graphs = graphs      # the stored FROM graphs (identity)
        self.ws = [[None, 0, 0, deque()] for _ in range(n_windows)]   # per window: store, g0, g1, log
        self.tau = None           # the instant the windows are kept for (None: only at the instant)


class Maintained:
    """The maintained result of one query :class:`GenQuery` takes, over time windows (OPTIONAL
    and [NOT] EXISTS / MINUS groups: :mod:`.maint_opt`; a UNION: each branch's delta joins,
    :mod:`.tiny_union`)."""

    #: instants of the ordinary path after a drop, doubling up to this
    BACKOFF_MAX = 256
    #: a stored part without solutions of its own is read from the generator's entries as
    #: they are, not copied (:meth:`_build`; tests compare with it off)
    SHARE_STORED = True
    #: the cost guard: every GUARD_EVERY instants answered from the state, the maintenance's
    #: CPU per instant (this query's: ingestion and advance) is weighed against the ordinary
    #: path's (measured on an instant it answered: the first, after a drop, or one handed to it
    #: for that); above GUARD_RATIO times an ordinary instant cheaper than GUARD_FAST seconds
    #: on two checks in a row (the second on a fresh measure), the query is no longer
    #: maintained for GUARD_SKIP instants: a latency it did not need is not bought with more
    #: CPU (thousands of queries share the cores)
    GUARD_EVERY = 16
    GUARD_RATIO = 8.0
    GUARD_FAST = 0.001
    GUARD_SKIP = 4096
    #: checks between fresh measures of the ordinary path while the maintenance is cheap
    GUARD_REFRESH = 8
    #: the ingestion keeps the state's constants' ids current (:meth:`_refresh_ids`; tests
    #: compare with it off)
    REFRESH_IDS = True
    #: ... looking up only the constants that were absent (a present one's id never changes in
    #: a dictionary: ids are appended), not all of them (wave 2o: every batch of a query with an
    #: absent constant looked each of its constants up, 30-80 µs per batch on L1; tests compare
    #: with it off)
    REFRESH_ABSENT = True
    #: the windows' seq ranges of the next instant (:meth:`_targets`) by two bisections over
    #: the stream's element times (:mod:`.pred_times`, the index the relevance check keeps and
    #: :mod:`.instant_fast` reads), not through the store's index (numpy searches: 6-10 µs a
    #: window hot, the most of an advance with nothing to move, wave 2o); tests compare with it off
    PT_RANGES = True
    #: the ingestion writes the next event's body (:meth:`_ready`) only for a batch that may be
    #: that instant's last: one whose last element plus twice the largest of the stream's last
    #: four gaps between batches (their last elements' times) reaches past the instant. A
    #: tumbling or long-step window gets many batches per instant, each of which changed the
    #: rows and wrote the whole body again (wave 2m: V08's 15 s window wrote it 15 times per
    #: instant, most of its maintenance). A batch that turns out to be the last after all
    #: leaves the body to the instant (written there, as after a drop: latency), and the guess
    #: is off for that query for :data:`LAZY_HOLD` instants. Tests compare with it off.
    LAZY_BODY = True

    def __init__(self, gen: GenQuery, windows: list, json):
        # what an instant reads first (instant(), maintained_due): adjacent in the instance's
        # dict (insertion order), a few cache lines for a woken worker
        self.lock = threading.Lock()
        self.state: _State | None = None
        self._skip = 0
        self._probe = False   # the next instant is handed to the ordinary path (a fresh measure)
        self._done: dict = {}    # instant -> (windows' ranges, snapshot number, body, event) kept by the ingestion
        self._idle = 0   # instants the ingestion moved the state past that no instant asked for
        self._n = 0           # instants answered from the state since the guard's last check
        self._body: bytes | None = None   # the next event's data up to its window member (_ready)
        self._last_in: dict = {}   # id(store) -> (its last batch's last element time, the last gaps) (LAZY_BODY)
        self._skipped = False      # a batch left the body since it was last written (LAZY_BODY)
        self._lazy_hold = 0        # instants LAZY_BODY is off after a wrong guess
        self._completed = None     # the last instant an element beyond it completed (on_append)
        self._run = 0              # instants in a row completed before they were asked (COMPLETED_RUN)
        self._run_need = COMPLETED_RUN   # the run this query needs (doubled by each miss)
        self._run_skip = False     # a batch left the body the guess alone would have written
        self.gen = gen
        self.json = json            # the query's own _JsonTerms (used under the lock only)
        sh = gen.sh
        self.sh = sh
        self.windows = windows
        self.ranges_ms = [int(bw.window.range_ms) for bw in windows]
        self._rmax = max(self.ranges_ms)   # the window member's RANGE (_event)
        self._backoff = 0
        self._cost = 0.0      # CPU seconds maintaining since the guard's last check
        self._ord: float | None = None   # the ordinary path's CPU seconds, last measured
        self._fresh = False   # measured since the guard's last check
        self._strikes = 0     # checks in a row the maintenance cost too much
        self._checks = 0      # the guard's checks
        self.guarded = 0      # times the guard stopped the maintenance (tests)
        self._frags: dict = {}   # output row -> its JSON members (render)
        self._base: tuple = ({}, [{} for _ in sh.aggs] if sh.by is not None else [])   # (_build)
        self.step = query_step([bw.window for bw in windows])
        self.grouping = sh.by is not None
        self.ns = dict(_tg._HELPERS)
        ncls = len(gen.classes)
        # the containers the generated code reads (globals of its namespace, cleared on reset)
        self.W = [(set(), {}, {}) for _ in range(ncls)]   # window-only pairs of D: set, s -> {o}, o -> {s}
        self.C = [{} for _ in range(ncls)]                # pair -> window triples holding it
        self.R: dict = {}                                 # output row / group -> solutions
        self.D = [{} for _ in sh.aggs] if self.grouping else []   # per COUNT(DISTINCT): group -> {value: n}
        self.by_p: dict = {}             # predicate id -> [(class, s id or None, o id or None, same)]
        self._plain: dict = {}           # predicate id -> its classes, where none has a constant end (_set_by_p)
        self.deltas: dict = {}           # class -> the delta functions of the patterns in it
        self._compiled: dict = {}        # stored sizes' magnitudes -> deltas (join orders differ)
        self._gid = 0                    # groups with kept lists compiled (their functions' names)
        self._scs: list = []             # their lists per key (cleared with the state)
        self._extra: list = []
        self.opt = OptState(self) if sh.opts or sh.antis else None   # OPTIONAL groups: per required solution (maint_opt)
        # (maint_opt writes the value counts of its own groups: their aggregates are not kept)
        self._memo_aggs = self.MEMO_AGGS and self.grouping and self.opt is None and bool(sh.agg_kinds)
        self._setup()
        self.deltas = self._compile([0] * ncls)
        if self.grouping:
            self._tail = self._compile_tail()

    @staticmethod
    def of(gen: GenQuery | None, windows: list, max_rows: int | None, json) -> Maintained | None:
        """A maintained state for ``gen``'s query when it qualifies: time windows, a row budget
        not below the loops' own bound."""
        if gen is None or not windows:
            # ([NOT] EXISTS groups with SUM / MIN / ...: maint_opt's grouped rows carry their values)
            return None
        if max_rows is not None and max_rows < MAX_WORK:
            return None
        if any(bw.window.range_ms is None or bw.window.range_ms <= 0 for bw in windows):
            return None
        m = Maintained(gen, windows, json)
        with _OBS_LOCK:
            for bw in windows:
                got = _OBSERVERS.get(bw.store)
                if got is None:
                    got = _OBSERVERS[bw.store] = weakref.WeakSet()
                got.add(m)
        return m

    # -- the generated delta joins ---------------------------------------------------
    def _setup(self) -> None:
        gen = self.gen
        ns = self.ns
        for c in range(len(gen.classes)):
            ns[f"W{c}p"], ns[f"W{c}s"], ns[f"W{c}o"] = self.W[c]
            ns[f"S{c}p"], ns[f"S{c}s"], ns[f"S{c}o"], ns[f"S{c}l"] = set(), {}, {}, []
        ns["R"] = self.R
        for j, d in enumerate(self.D):
            ns[f"D{j}"] = d
        ns["_chain"] = chain
        ns["_CK"] = _computed_key
        ns["_Drop"] = _Drop
        ns["MAX_WORK"] = MAX_WORK
        ns["_SCHIT"] = _SCHIT
        ns["SCON"] = True
        ns["CACHE_KEYS"] = self.CACHE_KEYS
        ns["MEMO_MAX"] = self.MEMO_MAX
        for j in self.sh.agg_kinds if self.grouping else ():
            ns[f"AC{j}"] = {}
        ns["_ONCE1"] = (None,)
        for fi, (_, _, consts, _) in enumerate(gen._fcode):
            for ci, v in enumerate(consts):
                ns[f"F{fi}_K{ci}"] = v
        for k, (_, consts) in enumerate(gen._ccode.values()):
            for ci, v in enumerate(consts):
                ns[f"E{k}_K{ci}"] = v

    def _compile(self, sizes: list) -> dict:
        """class -> the delta functions of its patterns, with join orders for the stored parts'
        ``sizes`` per class (kept per their magnitudes: a new snapshot of similar sizes reuses them)."""
        sig = tuple(int(x).bit_length() for x in sizes)
        got = self._compiled.get(sig)
        if got is not None:
            return got
        gen, ns = self.gen, self.ns
        pats = gen.pats
        src = []
        self._extra = []
        n0 = self._gid
        for i in range(len(pats)):
            src += self._delta_source(i, sizes)
        src += self._extra
        exec(_code_of("\n".join(src), "<maintained delta>"), ns)   # noqa: S102 -- our own source
        got = {}
        for i in range(len(pats)):
            got.setdefault(gen.cls[i], []).append(ns[f"d{i}"])
        for c in getattr(gen, "guards", ()):   # (tiny_closure: a window triple of a closure's predicate)
            got.setdefault(c, []).append(_closure_guard(ns))
        if len(self._compiled) > 16:
            self._compiled.clear()
            self._scs = [ns[f"SC{k}"] for k in range(n0, self._gid)]
        self._compiled[sig] = got
        return got

    def _end(self, pi: int, which: int) -> str:
        """The source of pattern ``pi``'s subject (0) or object (1): its variable's slot or its
        class's constant (a global set per state)."""
        x = self.gen.pats[pi][0 if which == 0 else 2]
        if x[0] == "v":
            return _slot(x[1])
        return f"K{self.gen.cls[pi]}{'so'[which]}"

    def _delta_source(self, i: int, sizes: list) -> list[str]:
        """``d<i>(xs, xp, xo, sign, V)``: the solutions with pattern ``i`` bound to triple x
        (the patterns before ``i`` over D without x), each counted into the rows by ``sign``.
        Join order: tests, then probes from a bound variable, then (a new component) the
        pattern whose class holds the fewest stored pairs (a probe from a constant end reads the
        whole class: a scan), the windows' pairs taken as few."""
        gen, sh = self.gen, self.sh
        pats = gen.pats
        lines = [f"def d{i}(xs, xp, xo, sign, V):", " w = 0"]
        have: set = set()
        s, _, o = pats[i]
        if s[0] == "v":
            lines.append(f" {_slot(s[1])} = xs")
            have.add(s[1])
        if o[0] == "v" and o[1] not in have:
            lines.append(f" {_slot(o[1])} = xo")
            have.add(o[1])
        ind = [1]
        depth = [0]

        def emit(x: str) -> None:
            lines.append(" " * ind[0] + x)

        # (a UNION: the patterns, FILTERs and variables of i's branch only, tiny_union)
        peers, pending, bvars = (scope_of if sh.opts or sh.antis else _branch_of)(gen, i)
        pending = list(pending)

        def place() -> None:
            for fi in list(pending):
                fv, fsrc, _, _ = gen._fcode[fi]
                if fv <= have:
                    pending.remove(fi)
                    for x in self._filter_lines(fi, 'continue' if depth[0] else 'return'):
                        emit(x)

        place()
        left = [j for j in peers if j != i]
        cached = []   # groups of stored patterns joined through a kept list (_cached_groups)
        # the arriving triple's subject: a stream element's own IRI (an observation), held by
        # no stored pair; its object is mostly a stored term (a type, a property, a sensor)
        fresh = {s[1]} if s[0] == "v" else set()
        while left:
            for g in self._cached_groups(left, have, fresh, sizes):
                cached.append(g)
                for j in g:
                    left.remove(j)
            if not left:
                break
            # a test first, then a probe from a bound end, then a scan (a new component)
            best = None
            for j in left:
                sj, _, oj = pats[j]
                vs, vo = sj[0] == "v" and sj[1] in have, oj[0] == "v" and oj[1] in have
                bs = sj[0] == "c" or vs
                bo = oj[0] == "c" or vo
                size = sizes[gen.cls[j]]
                rank = ((0, 0, 0) if bs and bo else (1, size, 0) if vs or vo else
                        (2, size, 0 if bs or bo else 1))
                if best is None or rank < best[0]:
                    best = (rank, j, bs, bo)
            _, j, bs, bo = best
            left.remove(j)
            c = gen.cls[j]
            sj, _, oj = pats[j]
            a, b = self._end(j, 0), self._end(j, 1)
            excl = j < i   # D without x: x's own triple is not a candidate
            same = sj[0] == "v" and oj[0] == "v" and sj[1] == oj[1]
            nxt = "continue" if depth[0] else "return"
            if bs and bo:
                emit(f"if ({a}, {b}) not in W{c}p and ({a}, {b}) not in S{c}p: {nxt}")
                if excl:
                    emit(f"if {a} == xs and {b} == xo and xp == K{c}p: {nxt}")
            else:
                if bs:
                    emit(f"for {b} in _chain(W{c}s.get({a}, ()), S{c}s.get({a}, ())):")
                    have.add(oj[1])
                elif bo:
                    emit(f"for {a} in _chain(W{c}o.get({b}, ()), S{c}o.get({b}, ())):")
                    have.add(sj[1])
                else:
                    va = a if sj[0] == "v" else "_s"
                    vb = b if oj[0] == "v" and not same else "_o"
                    emit(f"for {va}, {vb} in _chain(W{c}p, S{c}l):")
                    for x in (sj, oj):
                        if x[0] == "v":
                            have.add(x[1])
                ind[0] += 1
                depth[0] += 1
                emit("w += 1")
                emit("if w > MAX_WORK: raise _Drop")
                if excl:
                    emit(f"if {a} == xs and {b} == xo and xp == K{c}p: continue")
            place()
        for g in cached:
            # the group's solutions for the bound variables it shares: those over the stored
            # part alone from a list kept per key (per state: the stored part is the
            # snapshot's), those using a window pair joined now (few: the windows are small)
            gid = self._gid
            self._gid += 1
            gv = {x[1] for j in g for x in (pats[j][0], pats[j][2]) if x[0] == "v"}
            keyv = sorted(gv & have)
            outv = sorted(gv - have)
            self._extra += self._group_source(gid, g, keyv, outv, i, sizes)
            args = "".join(f"{_slot(v)}, " for v in keyv)
            wsets = " or ".join(sorted({f"W{gen.cls[j]}p" for j in g}))
            emit(f"_L = sc{gid}({args}xs, xp, xo)")
            emit(f"if {wsets}: _L = _chain(_L, wc{gid}({args}xs, xp, xo))")
            emit(f"for {''.join(_slot(v) + ', ' for v in outv) or '_'} in _L:")
            ind[0] += 1
            depth[0] += 1
            emit("w += 1")
            emit("if w > MAX_WORK: raise _Drop")
            have |= set(outv)
            place()
        for fi in pending:   # (over variables outside the BGP: their sources read None)
            for x in gen.filter_lines(fi, 'continue' if depth[0] else 'return'):
                emit(x)
        if self.opt is not None:   # (the required solution, or the OPTIONAL group's shared values)
            emit(self.opt.sink(i))
        elif self.grouping:
            key = (_slot(sh.by[0]) if len(sh.by) == 1 else
                   "(" + "".join(f"{_slot(v)}, " for v in sh.by) + ")")
            for x in gen.by_lines(self.ns):   # (GROUP BY (expr AS ?k), tiny_aggs)
                emit(x)
            emit(f"g = {key}")
            emit("n = R.get(g, 0) + sign")
            emit("if n > 0: R[g] = n")
            emit("elif n == 0: del R[g]")
            emit("else: raise _Drop")
            for j, (_, arg, dist) in enumerate(sh.aggs):
                if not dist and j not in sh.agg_kinds:   # (SUM, MIN, ...: value counts too, tiny_aggs)
                    continue
                val = _slot(arg) if arg else "None"
                for x in gen.agg_arg_lines(j, self.ns):   # (an aggregate of an expression, tiny_aggs)
                    emit(x)
                emit(f"dj = D{j}.get(g)")
                emit(f"if dj is None: dj = D{j}[g] = {{}}")
                if self._memo_aggs and j in sh.agg_kinds:   # (its kept value is stale: _memo_agg)
                    emit(f"if AC{j}: AC{j}.pop(id(dj), None)")
                emit(f"m = dj.get({val}, 0) + sign")
                emit(f"if m > 0: dj[{val}] = m")
                emit("elif m == 0:")
                emit(f"    del dj[{val}]")
                emit(f"    if not dj: del D{j}[g]")
                emit("else: raise _Drop")
        else:
            if sh.ask:
                key = "()"
            else:   # (a computed projection: its number's term key -- 1 and 1.0, 0.0 and -0.0 are
                # equal dict keys, their terms are not)
                cells = []
                for n in sh.names:
                    if n in gen._ccode:
                        pre, cell = gen.computed_lines(n, "_CK(_CV({}))")
                        for x in pre:
                            emit(x)
                        cells.append(cell)
                    else:
                        cells.append(_slot(sh.alias.get(n, n)) if bvars is None or sh.alias.get(n, n) in bvars
                                     else "-1")
                key = "(" + "".join(f"{c}, " for c in cells) + ")"
            emit(f"k = {key}")
            emit("n = R.get(k, 0) + sign")
            emit("if n > 0: R[k] = n")
            emit("elif n == 0: del R[k]")
            emit("else: raise _Drop")
        lines.append(" return w")
        return lines

    #: a FILTER conjunct over two variables or more that calls a helper (arithmetic, a
    #: function) is decided once per combination of its variables' ids and kept
    #: (:meth:`_filter_lines`): a triple leaving the windows runs the join it ran when it came
    #: in, the same combinations again (CityBench's C4 / C5: each location against every
    #: event's coordinates, exact decimal arithmetic each); its value reads only the ids'
    #: terms (the functions taken are deterministic, :mod:`tiny_terms`). Tests compare with it off.
    MEMO_FILTERS = True
    #: combinations a conjunct's kept values hold before they are forgotten (memory: ~200
    #: bytes each; CityBench's C4 / C5 keep a window's worth in this many)
    MEMO_MAX = 1 << 13
    #: a grouped query's SUM / MIN / MAX / AVG / ... (tiny_aggs, over a group's value counts)
    #: is computed again only for a group whose value counts changed since the last body
    #: (:func:`_memo_agg`): a sliding window's body is written per step, and most groups keep
    #: their values over a step. Tests compare with it off.
    MEMO_AGGS = True

    def _filter_lines(self, fi: int, fail: str) -> list[str]:
        """Statements testing FILTER conjunct ``fi`` as :meth:`GenQuery.filter_lines` does, its
        value kept per combination of its variables' ids (:attr:`MEMO_FILTERS`); only where
        all its variables are bound."""
        gen = self.gen
        fv, src, _, _ = gen._fcode[fi]
        if not self.MEMO_FILTERS or len(fv) < 2 or "(" not in src:
            return gen.filter_lines(fi, fail)
        self.ns.setdefault(f"FM{fi}", {})
        key = "(" + "".join(f"{_slot(v)}, " for v in sorted(fv)) + ")"
        alt = gen._falt.get(fi)
        lines = [f"_fk = {key}", f"_ok = FM{fi}.get(_fk)", "if _ok is None:"]
        if alt is None:
            lines.append(f"    _ok = {src} is True")
        else:
            lines += ["    try:", f"        _ok = {src} is True", "    except Undecided:",
                      f"        _ok = {alt} is True"]
        lines += [f"    if len(FM{fi}) >= MEMO_MAX: FM{fi}.clear()", f"    FM{fi}[_fk] = _ok",
                  f"if not _ok: {fail}"]
        return lines

    #: stored pairs of a group's classes from which its stored solutions are kept in a list
    #: (below: joining them again per triple is cheap)
    CACHE_MIN = 32
    #: patterns a group has at least for a kept list (one: a probe, as cheap as the list's)
    CACHE_PATTERNS = 2
    #: keys a group's kept lists hold before they are forgotten (memory)
    CACHE_KEYS = 4096

    def _cached_groups(self, left: list, have: set, fresh: set, sizes: list) -> list:
        """The groups of ``left``'s patterns not reading the arriving triple's subject
        (``fresh``: a pattern that does is a probe from it, left to the delta's own order --
        no stored pair holds a new observation's IRI), connected through variables not bound
        yet, worth a kept list: :data:`CACHE_PATTERNS` patterns or more, each of a class the
        stored part holds pairs of, :data:`CACHE_MIN` stored pairs or more. Their key: the
        variables the delta binds before the list is read (at its end)."""
        gen, pats = self.gen, self.gen.pats
        groups: list = []   # [unbound vars, patterns]
        for j in left:
            vall = {x[1] for x in (pats[j][0], pats[j][2]) if x[0] == "v"}
            if vall & fresh:
                continue
            vs = vall - have
            hit = [g for g in groups if g[0] & vs]
            merged = [vs, [j]]
            for g in hit:
                groups.remove(g)
                merged[0] |= g[0]
                merged[1] += g[1]
            groups.append(merged)
        out = []
        for vs, g in groups:
            sz = [sizes[gen.cls[j]] for j in g]
            if len(g) < self.CACHE_PATTERNS or not vs or min(sz) == 0 or sum(sz) < self.CACHE_MIN:
                continue
            out.append(sorted(g))
        return out

    def _loops(self, steps: list, have: set, i: int, sizes: list, ret: str) -> tuple[list, int]:
        """Nested loops joining ``steps`` ((pattern, 'S' stored pairs / 'W' window pairs / 'D'
        both), the first one first, the others tests, probes, scans as the delta orders them)
        from the bound ``have``; x's triple excluded from patterns before ``i``. Returns the
        lines and the innermost indentation; a failed test at the top runs ``ret``."""
        gen, pats = self.gen, self.gen.pats
        lines: list = []
        ind = 1
        depth = 0
        left = list(steps)
        first = True
        while left:
            if first:
                j, mode = left.pop(0)
                first = False
            else:
                best = None
                for j, mode in left:
                    sj, _, oj = pats[j]
                    vs, vo = sj[0] == "v" and sj[1] in have, oj[0] == "v" and oj[1] in have
                    bs, bo = sj[0] == "c" or vs, oj[0] == "c" or vo
                    size = sizes[gen.cls[j]]
                    rank = ((0, 0, 0) if bs and bo else (1, size, 0) if vs or vo else
                            (2, size, 0 if bs or bo else 1))
                    if best is None or rank < best[0]:
                        best = (rank, j, mode)
                _, j, mode = best
                left.remove((j, mode))
            c = gen.cls[j]
            sj, _, oj = pats[j]
            vs, vo = sj[0] == "v" and sj[1] in have, oj[0] == "v" and oj[1] in have
            bs, bo = sj[0] == "c" or vs, oj[0] == "c" or vo
            a, b = self._end(j, 0), self._end(j, 1)
            same = sj[0] == "v" and oj[0] == "v" and sj[1] == oj[1]
            excl = j < i   # (a stored pair only while the state is built: nothing is kept then)
            nxt = "continue" if depth else ret
            pad = " " * ind
            if bs and bo:
                test = {"S": f"({a}, {b}) not in S{c}p", "W": f"({a}, {b}) not in W{c}p",
                        "D": f"({a}, {b}) not in W{c}p and ({a}, {b}) not in S{c}p"}[mode]
                lines.append(f"{pad}if {test}: {nxt}")
                if excl:
                    lines.append(f"{pad}if {a} == xs and {b} == xo and xp == K{c}p: {nxt}")
                continue
            if bs or bo:
                k, var, ix = (a, b, "s") if bs else (b, a, "o")
                src = {"S": f"S{c}{ix}.get({k}, ())", "W": f"W{c}{ix}.get({k}, ())",
                       "D": f"_chain(W{c}{ix}.get({k}, ()), S{c}{ix}.get({k}, ()))"}[mode]
                lines.append(f"{pad}for {var} in {src}:")
                have.add(oj[1] if bs else sj[1])
            else:
                va = a if sj[0] == "v" else "_s"
                vb = b if oj[0] == "v" and not same else "_o"
                src = {"S": f"S{c}l", "W": f"W{c}p", "D": f"_chain(W{c}p, S{c}l)"}[mode]
                lines.append(f"{pad}for {va}, {vb} in {src}:")
                for x in (sj, oj):
                    if x[0] == "v":
                        have.add(x[1])
            ind += 1
            depth += 1
            pad = " " * ind
            lines += [f"{pad}w += 1", f"{pad}if w > MAX_WORK: raise _Drop"]
            if excl:
                lines.append(f"{pad}if {a} == xs and {b} == xo and xp == K{c}p: continue")
        return lines, ind

    def _group_source(self, gid: int, g: list, keyv: list, outv: list, i: int, sizes: list) -> list[str]:
        """``sc<gid>(keys, xs, xp, xo)``: group ``g``'s solutions over the stored pairs alone for
        the key, kept in ``SC<gid>`` (not while the state is built: its stored part grows);
        ``wc<gid>(...)``: those with a window pair -- at the first pattern (in ``g``'s order)
        bound to one, the patterns before it over stored pairs, those after it over both
        (each solution once)."""
        args = "".join(f"{_slot(v)}, " for v in keyv)
        key = f"({args})"
        row = "(" + "".join(f"{_slot(v)}, " for v in outv) + ")"
        self.ns[f"SC{gid}"] = sc = {}
        self._scs.append(sc)
        src = [f"def sc{gid}({args}xs, xp, xo):",
               f" L = SC{gid}.get({key})",
               " if L is not None:",
               "  _SCHIT[0] += 1",
               "  return L",
               " L = []",
               " w = 0"]
        body, ind = self._loops([(j, "S") for j in g], set(keyv), i, sizes, "return L")
        src += body
        src.append(" " * ind + f"L.append({row})")
        src += [" if SCON:",
                f"  if len(SC{gid}) > CACHE_KEYS: SC{gid}.clear()",
                f"  SC{gid}[{key}] = L",
                " return L"]
        src += [f"def wc{gid}({args}xs, xp, xo):", " L = []", " w = 0"]
        for n, j in enumerate(g):
            steps = [(j, "W")] + [(q, "S") for q in g[:n]] + [(q, "D") for q in g[n + 1:]]
            body, ind = self._loops(steps, set(keyv), i, sizes, "continue")
            # each start in a loop of one (a failed test at its top moves to the next start)
            src.append(" for _once in _ONCE1:")
            src += [" " + x for x in body]
            src.append(" " * (ind + 1) + f"L.append({row})")
        src.append(" return L")
        return src

    def _compile_tail(self):
        """``tail(G, V) -> rows`` over the groups: tiny_gen's (HAVING, the projection)."""
        ns = self.ns
        lines = ["def tail(G, V):"]
        lines += [f" D{j} = DD[{j}]" for j in range(len(self.sh.aggs))]
        lines += self.gen._group_tail(ns)
        ns["DD"] = self.D
        ns["MAX_ROWS"] = MAX_ROWS
        exec(_code_of("\n".join(lines), "<maintained tail>"), ns)   # noqa: S102 -- our own source
        if self._memo_aggs:
            for j in self.sh.agg_kinds:
                ns[f"_AG{j}"] = _memo_agg(ns[f"_AG{j}"], ns[f"AC{j}"])
        return ns["tail"]

    # -- the state -------------------------------------------------------------------
    def _reset(self) -> None:
        for W in self.W:
            for x in W:
                x.clear()
        for c in self.C:
            c.clear()
        self.R.clear()
        for d in self.D:
            d.clear()
        for sc in self._scs:
            sc.clear()
        for k, v in self.ns.items():   # (the kept FILTER values: _filter_lines; aggregates: _memo_agg)
            if k.startswith(("FM", "AC")) and type(v) is dict:
                v.clear()
        if self.opt is not None:
            self.opt.reset()
        self.state = None
        self._body = None
        self._done.clear()

    def _build(self, snap, graphs: list) -> _State | None:
        """A new empty state for ``snap`` (the stored part read, the windows empty), or None
        when the stored part is too large (:meth:`GenQuery._stored`)."""
        self._reset()
        gen = self.gen
        d = snap.dictionary
        gen._resolve(d)
        sidx = gen._stored(snap, graphs)
        if sidx is None:
            return None
        ids = gen._ids[2]
        ns = self.ns
        by_p: dict = {}
        for c, ((cs, p, co), (_, _, _, same)) in enumerate(zip(ids, gen.classes, strict=True)):
            ns[f"K{c}s"], ns[f"K{c}p"], ns[f"K{c}o"] = cs, p, co
            if p is not None and p >= 0:
                by_p.setdefault(p, []).append((c, cs, co, same))
            ns[f"S{c}p"], ns[f"S{c}s"], ns[f"S{c}o"], ns[f"S{c}l"] = set(), {}, {}, []
        self._set_by_p(by_p)
        self.deltas = self._compile([len(sidx[c][3]) for c in range(len(ids))])
        self._dict = d
        self._sp = [ns[f"S{c}p"] for c in range(len(ids))]
        # the solutions over the stored part alone: its triples added one at a time, as the
        # windows' are (a new snapshot's cost, not an instant's)
        V = _values(d)
        work = 0
        ns["SCON"] = False   # (the stored part grows below: no list is kept from it)
        solving = ([pis for pis, _ in _required_of(self.sh)] if self.sh.opts or self.sh.antis else
                   [_branch_of(gen, i)[0] for i in range(len(gen.pats))])   # patterns every solution matches
        if self.SHARE_STORED and all(any(not sidx[gen.cls[j]][3] for j in ps) for ps in solving):
            # a pattern (of each UNION branch) the stored part does not match: it has no solution of its own
            # the stored part is read only from here on (the delta joins never write it): the
            # generator's per-class entries (pair dict, indexes, list) are taken as they are, not
            # copied, their indexes made once per snapshot and class (a constant that comes into
            # the dictionary rebuilds the state but reads only its own class again)
            for c in range(len(ids)):
                e = sidx[c]
                if e[1] is None:
                    e[1] = _index(e[3], False)
                if e[2] is None:
                    e[2] = _index(e[3], True)
                ns[f"S{c}p"], ns[f"S{c}s"], ns[f"S{c}o"], ns[f"S{c}l"] = e[0], e[1], e[2], e[3]
            self._sp = [ns[f"S{c}p"] for c in range(len(ids))]
            _SHARED[0] += 1
            held = {}
        else:
            held = {}   # stored triple -> the classes it is in
            for c, (_, p, _) in enumerate(ids):
                for s, o in sidx[c][3]:
                    held.setdefault((s, p, o), []).append(c)
        try:
            for (s, p, o), cls in held.items():
                k = (s, o)
                for c in cls:
                    ns[f"S{c}p"].add(k)
                    ns[f"S{c}s"].setdefault(s, []).append(o)
                    ns[f"S{c}o"].setdefault(o, []).append(s)
                    ns[f"S{c}l"].append(k)
                for c in cls:
                    for fn in self.deltas.get(c, ()):
                        work += fn(s, p, o, 1, V) or 0
                if self.opt is not None:
                    self.opt.settle(V)
                if work > BUILD_WORK or len(self.R) > MAX_ROWS:
                    self._reset()
                    return None
        finally:
            ns["SCON"] = True
        # the stored part's own rows: what the windows' leaving all at once goes back to
        self._base = (dict(self.R), [{g: dict(vals) for g, vals in d.items()} for d in self.D])
        if self.opt is not None:
            self.opt.keep_base()
        # (the size the ids were looked up at, not len(d) now: a POST may have interned an
        # absent constant since, and the state would never look it up again)
        st = _State(ids, gen._ids[1] if gen._ids[3] else None, snap.sn, tuple(map(id, graphs)), len(self.windows))
        self.state = st
        return st

    def _drop(self) -> None:
        self._reset()
        self._backoff = min(2 * self._backoff or 4, self.BACKOFF_MAX)
        self._skip = self._backoff

    def _set_by_p(self, by_p: dict) -> None:
        """The predicates' candidate classes, and (:attr:`_plain`) the classes of each predicate
        none of whose classes has a constant subject or object or a repeated variable: every
        triple of it is in all of them (:meth:`_add` skips the per-triple tests)."""
        self.by_p = by_p
        self._plain = {p: [c for c, _, _, _ in cand] for p, cand in by_p.items()
                       if all(cs is None and co is None and not same for _, cs, co, same in cand)}

    def _add(self, st: _State, ws: list, seq: int, rows: list, V) -> None:
        """Window triples ``rows`` (from seq ``seq``) into the windows' counts and D, their
        solutions into the rows; each matching one logged in the window's ``ws[3]``."""
        by_p, C, W, sp, deltas, plain = self.by_p, self.C, self.W, self._sp, self.deltas, self._plain
        log = ws[3].append
        for s, p, o in rows:
            cls = plain.get(p)   # (shared by the log's entries: never changed)
            if cls is None:
                cand = by_p.get(p)
                if cand is None:
                    seq += 1
                    continue
                cls = [c for c, cs, co, same in cand
                       if (cs is None or s == cs) and (co is None or o == co) and (not same or s == o)]
            if cls:
                log((seq, s, p, o, cls))
                k = (s, o)
                new = False
                for c in cls:
                    n = C[c].get(k, 0)
                    C[c][k] = n + 1
                    if n == 0 and k not in sp[c]:
                        new = True
                        w = W[c]
                        w[0].add(k)
                        w[1].setdefault(s, {})[o] = None
                        w[2].setdefault(o, {})[s] = None
                if new:
                    self._body = None
                    for c in cls:
                        for fn in deltas.get(c, ()):
                            fn(s, p, o, 1, V)
                    if self.opt is not None:
                        self.opt.settle(V)
                    if len(self.R) > MAX_ROWS:
                        raise _Drop
            seq += 1

    def _remove(self, entry: tuple, V) -> None:
        _, s, p, o, cls = entry
        C, W, sp, deltas = self.C, self.W, self._sp, self.deltas
        k = (s, o)
        gone = False
        for c in cls:
            n = C[c][k] - 1
            if n:
                C[c][k] = n
            else:
                del C[c][k]
                if k not in sp[c]:
                    gone = True
        if not gone:
            return
        self._body = None
        for c in cls:   # the solutions using x, while D still holds it
            for fn in deltas.get(c, ()):
                fn(s, p, o, -1, V)
        for c in cls:
            w = W[c]
            w[0].discard(k)
            x = w[1].get(s)
            if x is not None:
                x.pop(o, None)
                if not x:
                    del w[1][s]
            x = w[2].get(o)
            if x is not None:
                x.pop(s, None)
                if not x:
                    del w[2][o]
        if self.opt is not None:   # (D without x now: the rows its OPTIONAL matches gave, computed again)
            self.opt.settle(V)

    def _sync(self, st: _State, targets: list, V, limit: int, batch: tuple | None = None) -> bool:
        """Move the windows of ``st`` to ``targets`` ((g0, g1) per window): the triples that
        left removed (from the windows' logs), the new ones read from the stores and added
        (``batch``: ``(store, seq0, rows)`` of the batch in hand, read from it where it holds
        them: the ingestion's move past a completed instant). False, with nothing changed, when
        more than ``limit`` seqs would be read, the windows would hold more than GEN_WINDOW
        triples or one would grow backwards (the caller rebuilds or hands the instant back)."""
        if sum(g1 - g0 for g0, g1 in targets) > GEN_WINDOW:
            return False
        work = 0
        plan = []
        kept = False   # a triple of the windows stays
        for bw, w, (g0, g1) in zip(self.windows, st.ws, targets, strict=True):
            if w[0] is not bw.store:
                if w[0] is not None:
                    return False
                w[0], w[1], w[2] = bw.store, g0, g0
            w1, w2 = w[1], w[2]
            overlap = max(w1, g0) < min(w2, g1)
            if overlap and w1 > g0:
                return False   # (the log is kept in seq order: nothing is added before it)
            kept = kept or (overlap and bool(w[3]))
            a = min(w2, g1) if overlap else g0
            work += max(0, g1 - a)
            plan.append(a)
        if work > limit:
            return False
        if not kept and any(w[3] for w in st.ws):
            self._clear_windows()   # (a tumbling window, a jump: all of it leaves at once)
        for bw, w, (g0, g1), a in zip(self.windows, st.ws, targets, plan, strict=True):
            E = w[3]
            while E and E[0][0] < g0:
                self._remove(E.popleft(), V)
            while E and E[-1][0] >= g1:
                self._remove(E.pop(), V)
            w[1], w[2] = g0, a
            if g1 > a:
                if batch is not None and batch[0] is bw.store and batch[1] <= a and g1 <= batch[1] + len(batch[2]):
                    got = batch[2][a - batch[1]:g1 - batch[1]]   # (the batch's own rows: not read back)
                    _BATCH_ROWS[0] += 1
                else:
                    got = bw.store.read(a, g1)[0].tolist()
                self._add(st, w, a, got, V)
                w[2] = g1
        return True

    def _targets(self, t: int) -> list:
        """The windows' seq ranges at instant ``t`` (what ``store.window_range`` gives): from the
        stream's element times where its index holds every element (reads only: one not synced
        yet, or trimmed above the window's start, leaves it to the store)."""
        out = []
        for bw, rng in zip(self.windows, self.ranges_ms, strict=True):
            store = bw.store
            pt = _pt.known(store) if self.PT_RANGES else None
            if pt is not None and pt.seq == store.end_seq:
                g = pt.groups.get(_pt.ALL)   # (groups first, then since: pred_times' readers)
                since = pt.since
                lo = t - rng
                if g is not None and (since is None or lo >= since):
                    arr, head, seq0 = g
                    i0 = bisect_right(arr, lo, head)
                    g0 = seq0 + i0
                    g1 = seq0 + (bisect_right(arr, t, i0) if t > lo else i0)
                    live = store.live_start
                    if g0 < live:
                        g0 = live
                    out.append((g0, g1 if g1 > g0 else g0))
                    _PT_RANGES[0] += 1
                    continue
            out.append(store.window_range(bw.window, t))
        return out

    def _clear_windows(self) -> None:
        """Every window triple leaves: the counts, the windows' part of D and the logs cleared,
        the rows back to the stored part's own (:meth:`_build`), no delta join."""
        for W in self.W:
            for x in W:
                x.clear()
        for c in self.C:
            c.clear()
        for w in self.state.ws:
            w[3].clear()
        R, D = self.R, self.D
        R.clear()
        for j in self.sh.agg_kinds if self._memo_aggs else ():
            self.ns[f"AC{j}"].clear()
        base_r, base_d = self._base
        R.update(base_r)
        for d, b in zip(D, base_d, strict=True):
            d.clear()
            d.update({g: dict(vals) for g, vals in b.items()})
        if self.opt is not None:
            self.opt.restore_base()
        self._body = None

    def _current(self, snap, graphs: list) -> _State | None:
        """The state if it was built for ``snap``'s stored part and constants' ids, else a new one."""
        st = self.state
        gen = self.gen
        if st is not None and st.sn == snap.sn and st.graphs == tuple(map(id, graphs)):
            d = snap.dictionary
            if st.dict_n is None or st.dict_n == len(d):
                return st
            gen._resolve(d)
            if gen._ids[2] == st.ids:
                st.dict_n = gen._ids[1] if gen._ids[3] else None   # (the size looked up at)
                return st
        return self._build(snap, graphs)

    def _refresh_ids(self, st: _State) -> None:
        """The ingestion thread (under the lock), when the dictionary grew since ``st`` looked
        its constants up while one was absent (stream elements intern terms: a query's first
        windows bring most of them): the constants looked up again, reads only (the generator's
        own ids are the worker's). The same ids: the state holds, its dictionary size moves on.
        A constant that came in: the state takes its id -- ``K<c>`` globals, the predicates'
        candidates -- without a rebuild, because nothing in ``D`` holds it (the stored part of
        ``st.sn`` was written before the constant was absent; every window triple joined since
        was matched against ids looked up after the dictionary last grew, here or by
        :meth:`_current`). So the instant finds its held event or body fresh, instead of
        rebuilding the state from the stores (``_current`` + ``_sync``, 100-800 µs on a
        woken worker: each query's first maintained instant before). Should a window triple
        read meanwhile hold the new id (another stream's ingestion interned it while this one
        read that stream's store: a race), the state is left as it was, its size stale, for the
        instant to rebuild; the held events go either way (written with the old ids)."""
        d = self._dict
        n = len(d)
        ids, absent = _absent_ids(self.gen.classes, st.ids, d) if self.REFRESH_ABSENT else \
            _tg.class_ids(self.gen.classes, d)
        if ids != st.ids:
            new = {b for x, y in zip(st.ids, ids, strict=True) for a, b in zip(x, y, strict=True)
                   if a != b and b is not None and b >= 0}
            self._done.clear()
            for w in st.ws:
                if w[0] is not None and w[2] > w[1]:
                    try:
                        spo, _ = w[0].read(w[1], w[2])
                    except Exception:   # noqa: BLE001 -- (freed): the instant rebuilds, as before
                        spo = None
                    if spo is None or not new.isdisjoint(spo.ravel().tolist()):
                        _REFRESHED[2] += 1
                        return
            ns = self.ns
            by_p: dict = {}
            for c, ((cs, p, co), (_, _, _, same)) in enumerate(zip(ids, self.gen.classes, strict=True)):
                ns[f"K{c}s"], ns[f"K{c}p"], ns[f"K{c}o"] = cs, p, co
                if p is not None and p >= 0:
                    by_p.setdefault(p, []).append((c, cs, co, same))
            self._set_by_p(by_p)
            st.ids = ids
            _REFRESHED[1] += 1
        st.dict_n = n if absent else None
        _REFRESHED[0] += 1

    def close(self) -> None:
        """The query is deleted: no more maintenance (the ingestion forgets it)."""
        with _OBS_LOCK:
            for bw in self.windows:
                got = _OBSERVERS.get(bw.store)
                if got is not None:
                    got.discard(self)
        with self.lock:
            self._reset()

    def healthy(self) -> bool:
        """Whether a state is kept (not dropped, not backing off): the next instant is likely
        answered from it."""
        return self.state is not None and self._skip == 0

    # -- the three entry points ------------------------------------------------------
    def on_append(self, store, seq0: int, rows: list, tau: list) -> None:
        """The ingestion thread: a batch appended to ``store`` from seq ``seq0``. Its elements up
        to the state's next instant join the windows whose range ends at ``seq0``; once every
        stream of the query holds an element beyond that instant, its elements are all in
        (they arrive in time order): its event's body is kept (:attr:`_done`, with the
        windows' ranges it holds: the instant checks them) and the state moves on to the
        following instant (expired triples out, stored ones up to it in), at most
        :data:`AHEAD` instants per batch."""
        t0 = _clock()
        with self.lock:
            st = self.state
            if st is None or st.tau is None:
                return
            try:
                dn = st.dict_n
                if dn is not None and dn != len(self._dict) and self.REFRESH_IDS:
                    self._refresh_ids(st)
                # the body is written for the batch expected to be the instant's last (see
                # :attr:`LAZY_BODY`): the next batch is expected within ``gap`` of this one
                last = tau[-1]
                lin = self._last_in
                got = lin.get(id(store))   # (per stream: another stream's batches interleave)
                if got is None or last <= got[0]:
                    lin[id(store)] = (last, ())
                    gap = None
                else:
                    gaps = (last - got[0], *got[1][:LAZY_GAPS - 1])
                    lin[id(store)] = (last, gaps)
                    gap = (LAZY_MARGIN * max(gaps) if self.LAZY_BODY and not self._lazy_hold
                           and len(gaps) == LAZY_GAPS else None)
                guess = gap
                if self._run >= self._run_need and self.LAZY_BODY and not self._lazy_hold:
                    gap = _ONLY_COMPLETE   # (the instants are completed before they are asked)
                V = _values(self._dict)
                for _ in range(AHEAD + 1):
                    hi = st.tau
                    for k, w in enumerate(st.ws):
                        if w[0] is not store or w[2] < seq0 or w[2] >= seq0 + len(tau):
                            continue
                        a = w[2] - seq0
                        n = bisect_right(tau, hi, a)   # (a stream's times never decrease: TransientStore)
                        if n == a:
                            continue
                        if tau[a] <= hi - self.ranges_ms[k] or w[2] - w[1] + n - a > GEN_WINDOW:
                            raise _Drop
                        self._add(st, w, w[2], rows[a:n], V)
                        w[2] = seq0 + n
                    # (an instant is complete once every stream of the query is past it)
                    complete = not (last <= hi or _ + 1 > AHEAD or any(
                        (bw.store.last_tau or hi) <= hi for bw in self.windows))
                    if self._body is None and not self.rows_mode and (
                            complete or gap is None or last + gap > hi):
                        self._ready()
                    elif self._body is None and not self.rows_mode:
                        _LAZY[0] += 1
                        if gap is _ONLY_COMPLETE:
                            _BY_COMPLETE[0] += 1
                            if guess is None or last + guess > hi:
                                self._run_skip = True
                        self._skipped = True
                    if not complete:
                        break
                    # instant hi is complete for this stream: its body kept, the state moved on
                    self._completed = hi
                    done = self._done
                    if len(done) >= AHEAD * 2:
                        del done[min(done)]
                    done[hi] = ([(w[1], w[2]) for w in st.ws], st.sn, self._body,
                                self._rows() if self.rows_mode else self._event(hi))
                    nxt = hi + self.step
                    targets = self._targets(nxt)
                    if not self._sync(st, targets, _values(self._dict), GEN_WINDOW, (store, seq0, rows)):
                        raise _Drop
                    st.tau = nxt   # (its body: written once its own elements arrive, or at its instant)
                    self._idle += 1
                    if self._idle > IDLE_MAX:
                        # nobody reads these instants (the query is evaluated in a batch of its
                        # shape, or stopped): stop maintaining; an instant evaluated alone
                        # builds the state again (advance)
                        self._reset()
                        return
            except (_Drop, _Hand, Undecided):
                self._drop()
            except Exception:   # noqa: BLE001 -- never the POST's failure: its data is stored
                log.exception("maintained result dropped on ingestion")
                self._drop()
            finally:
                dt = _clock() - t0
                _SPENT[0] += dt
                self._cost += dt

    def advance(self, snap, graphs: list, tau: int) -> None:
        """The worker, after an instant's event: the state moved to the next instant ``tau``
        (expired triples removed, those already stored up to ``tau`` added), or rebuilt."""
        t0 = _clock()
        with self.lock:
            self._idle = 0
            if self._lazy_hold:
                self._lazy_hold -= 1
            # (the instant before tau was completed by an element before it was asked: the
            # ingestion moves the state past an instant only before its advance)
            c = self._completed
            self._run = self._run + 1 if c is not None and c + self.step >= tau else 0
            if self._skip > 0:
                self._skip -= 1
                return
            try:
                st = self._current(snap, graphs)
                if st is None:
                    self._drop()
                    return
                for k in [k for k in self._done if k < tau]:
                    del self._done[k]
                if st.tau is not None and st.tau >= tau:
                    return   # (the ingestion moved it there already)
                self._dict = snap.dictionary
                targets = self._targets(tau)
                V = _values(snap.dictionary)
                if not self._sync(st, targets, V, GEN_WINDOW):
                    st = self._build(snap, graphs)
                    if st is None or not self._sync(st, targets, V, GEN_WINDOW):
                        self._drop()
                        return
                st.tau = tau   # (its body: written once its elements arrive, or at the instant)
                if self._body is None and not self.rows_mode and len(self.R) <= READY_AHEAD:
                    # a few rows: their body now (after the event; a few µs), not at an instant
                    # no element reaches (a woken worker pays each first touch); an element that
                    # changes the rows writes it again on the ingestion thread
                    self._ready()
                    _READY_AHEAD[0] += 1
            except (_Drop, _Hand, Undecided):
                self._drop()
            except Exception:   # noqa: BLE001 -- the next instant takes the ordinary path
                log.exception("maintained result dropped after an instant")
                self._drop()
            finally:
                dt = _clock() - t0
                _SPENT[1] += dt
                self._cost += dt

    def instant(self, snap, graphs_of, ranges: list, t: int, member: bytes) -> bytes | None:
        """Instant ``t``'s event data (``member``: its window member) if the state is (or is
        caught up to) its dataset, else None (the ordinary path answers). ``graphs_of(snap)``:
        the stored graphs, asked only when the snapshot is not the state's. The body is the one
        written when the state last changed (:meth:`_ready`), usually on the ingestion thread."""
        with self.lock:
            self._idle = 0
            if self._skip > 0:
                return None
            st = self.state
            if st is None:
                return None
            if self._probe:   # (the guard's fresh measure: the state stays, the next advance moves it)
                self._probe = False
                return None
            done = self._done.pop(t, None)
            if done is not None and done[1] == snap.sn and done[0] == ranges and (
                    st.dict_n is None or st.dict_n == len(snap.dictionary)):
                _ANSWERED[0] += 1
                n = self._n = self._n + 1   # (_answered inline: the guard's check every GUARD_EVERY)
                if n >= self.GUARD_EVERY:
                    self._guard()
                return done[3]   # (= body + member + "}", written whole on the ingestion thread)
            try:
                if st.sn != snap.sn or (st.dict_n is not None and st.dict_n != len(snap.dictionary)):
                    st = self._current(snap, graphs_of(snap))
                    if st is None:
                        self._drop()
                        return None
                for w, (g0, g1) in zip(st.ws, ranges, strict=True):   # (a loop: no generator to make)
                    if w[1] != g0 or w[2] != g1:
                        if not self._sync(st, ranges, _values(snap.dictionary), CATCH_UP):
                            return None   # (the state is left as it was: the next advance moves it)
                        break
                st.tau = t
                body = self._body
                if body is None:
                    if self._skipped and self._run_skip:   # (the run guessed wrong: a longer one needed)
                        _RUN_MISS[0] += 1
                        self._run = 0
                        self._run_need = min(2 * self._run_need, COMPLETED_RUN_MAX)
                    elif self._skipped:   # (LAZY_BODY guessed wrong: off for a while)
                        _LAZY_MISS[0] += 1
                        self._lazy_hold = LAZY_HOLD
                        self._run = 0
                    body = self._ready()
            except (_Drop, _Hand, Undecided):
                self._drop()
                return None
            except Exception:   # noqa: BLE001 -- the ordinary path answers
                log.exception("maintained result dropped at an instant")
                self._drop()
                return None
            _ANSWERED[0] += 1
            n = self._n = self._n + 1
            if n >= self.GUARD_EVERY:
                self._guard()
            return b"".join((body, member, b"}"))

    def _event(self, t: int) -> bytes:
        """Instant ``t``'s whole event data from the body (under the lock): the body, the
        window member :meth:`InstantEvaluator.member_bytes` writes for time windows (RANGE the
        longest of the query's), the closing brace -- written on the ingestion thread with the
        body, so the instant hands it over as it is (:meth:`instant`)."""
        return b"%s,\"window\":{\"start\":%d,\"end\":%d}}" % (self._body, t - self._rmax, t)

    #: the instant asks for the rows (:meth:`rows_at`: an I/DSTREAM query, differenced by its
    #: evaluator), not for an event body
    rows_mode = False

    def _rows(self) -> list:
        """The output rows as they are now, with their multiplicities (what :meth:`_ready`
        writes; the same rows :meth:`GenQuery.run` returns)."""
        R = self.R
        if self.grouping:
            return self._tail(R if R else {}, _values(self._dict))
        if self.sh.distinct or not R or max(R.values()) == 1:
            return list(R)
        rows = [k for k, n in R.items() for _ in range(n)]
        if len(rows) > MAX_ROWS:
            raise _Drop
        return rows

    def rows_at(self, snap, graphs_of, ranges: list, t: int) -> list | None:
        """:meth:`instant` for :attr:`rows_mode`: instant ``t``'s output rows if the state is
        (or is caught up to) its dataset, else None."""
        with self.lock:
            self._idle = 0
            if self._skip > 0 or self.state is None:
                return None
            if self._probe:
                self._probe = False
                return None
            st = self.state
            done = self._done.pop(t, None)
            if done is not None and done[1] == snap.sn and done[0] == ranges and (
                    st.dict_n is None or st.dict_n == len(snap.dictionary)):
                _ANSWERED[0] += 1
                self._answered()
                return done[3]
            try:
                if st.sn != snap.sn or (st.dict_n is not None and st.dict_n != len(snap.dictionary)):
                    st = self._current(snap, graphs_of(snap))
                    if st is None:
                        self._drop()
                        return None
                if any(w[1] != g0 or w[2] != g1 for w, (g0, g1) in zip(st.ws, ranges, strict=True)):
                    if not self._sync(st, ranges, _values(snap.dictionary), CATCH_UP):
                        return None
                st.tau = t
                rows = self._rows()
            except (_Drop, _Hand, Undecided):
                self._drop()
                return None
            except Exception:   # noqa: BLE001 -- the ordinary path answers
                log.exception("maintained result dropped at an instant")
                self._drop()
                return None
            _ANSWERED[0] += 1
            self._answered()
            return rows

    def ordinary(self, cpu: float) -> None:
        """The ordinary path answered an instant of this query in ``cpu`` thread seconds."""
        self._ord = cpu
        self._fresh = True

    def _answered(self) -> None:
        """An instant answered from the state (under the lock): every :data:`GUARD_EVERY`, the
        cost guard (see there)."""
        self._n += 1
        if self._n >= self.GUARD_EVERY:
            self._guard()

    def _guard(self) -> None:
        """The cost guard's check (:meth:`_answered`, every :data:`GUARD_EVERY` answers)."""
        per = self._cost / self._n
        self._cost = 0.0
        self._n = 0
        self._checks += 1
        o, fresh = self._ord, self._fresh
        self._fresh = False
        if o is not None and fresh and o < self.GUARD_FAST and per > self.GUARD_RATIO * o:
            self._strikes += 1
            self._probe = True
            if self._strikes >= 2:
                self._strikes = 0
                self.guarded += 1
                _GUARDED[0] += 1
                self._reset()
                self._backoff = self.BACKOFF_MAX
                self._skip = self.GUARD_SKIP
            return
        if o is not None and per <= self.GUARD_RATIO * o:
            self._strikes = 0
        # a fresh measure: at the first check (the first instant was a cold one: compiling,
        # first touches), every GUARD_REFRESH checks after, and when the last one is stale
        # against a maintenance that costs more
        if o is None or self._checks % self.GUARD_REFRESH == 1 or (
                per > self.GUARD_RATIO * o and not fresh):
            self._probe = True

    _dict = None

    #: row fragments kept (a row's JSON is written when it first appears)
    MAX_FRAGS = 4 * MAX_ROWS

    def _ready(self) -> bytes:
        """The next event's data up to its window member, from the rows as they are now: what
        :meth:`GenQuery.render` writes, each row's fragment written once, when the row first
        appears (a sliding window's rows stay for several instants). Written on the ingestion
        thread after the next instant's elements changed the rows, under the lock (the instant
        then only appends its window member); not after an advance or a move to the following
        instant, whose rows the next elements change again (measured: writing it there too
        doubled the writing on CityBench's C5), so an instant no element reached writes it."""
        gen, sh, R = self.gen, self.sh, self.R
        self._skipped = False
        self._run_skip = False
        if sh.ask:
            body = self._body = b'{"head":{},"boolean":true' if R else b'{"head":{},"boolean":false'
            return body
        if self.grouping:
            rows = self._tail(R if R else {}, _values(self._dict))
        elif sh.distinct or not R or max(R.values()) == 1:
            rows = list(R)
        else:
            rows = [k for k, n in R.items() for _ in range(n)]
            if len(rows) > MAX_ROWS:
                raise _Drop
        if gen.order is not None:   # (tiny_order; computed numbers are their keys here)
            rows = gen.order.apply(rows, [3 if k == 2 else k for k in gen.kinds()], _values(self._dict))
        json = self.json
        if not rows:
            body = self._body = json.head(sh.names) + b',"results":{"bindings":[]}'
            return body
        fc = self._frags
        frs = list(map(fc.get, rows))
        if None in frs:
            miss = list(dict.fromkeys([r for r, f in zip(rows, frs, strict=True) if f is None]))
            got = dict(zip(miss, gen.fragments(miss, json, _Terms(self._dict), keyed=True), strict=True))
            if len(fc) + len(got) > self.MAX_FRAGS:
                fc.clear()
            fc.update(got)
            frs = list(map(fc.__getitem__, rows))
        elif len(fc) > 2 * len(rows) + 256:   # rows that left: their fragments go
            self._frags = dict(zip(rows, frs, strict=True))
        body = self._body = b"".join((json.head(sh.names), b',"results":{"bindings":[{', b"},{".join(frs),
                                      b"}]}"))
        return body


def _memo_agg(fn, kept: dict):
    """``fn`` (an aggregate over a group's value counts ``vc``, tiny_aggs) with its value kept
    per ``vc`` dict until the delta joins change that dict (they drop its entry first, by
    ``id``; the entry holds ``vc`` itself, so the id is not reused while it is kept)."""
    def f(vc, V):
        if not vc:
            return fn(vc, V)
        got = kept.get(id(vc))
        if got is not None and got[0] is vc:
            _AGHIT[0] += 1
            return got[1]
        out = fn(vc, V)
        if len(kept) >= MAX_ROWS:
            kept.clear()
        kept[id(vc)] = (vc, out)
        return out
    return f


def _absent_ids(classes, old: list, dictionary) -> tuple[list[tuple], bool]:
    """:func:`tiny_gen.class_ids` where ``old`` (its earlier answer on the same dictionary) has
    a constant absent (-2): only those looked up again, the rest kept as they are."""
    out = []
    absent = False
    for (cs, p, co, _), ids in zip(classes, old, strict=True):
        if -2 not in ids:
            out.append(ids)
            continue
        new = []
        for k, i in zip((cs, p, co), ids, strict=True):
            if i == -2:
                i = int(dictionary.lookup(k))
                if i < 0:
                    absent = True
                    i = -2
            new.append(i)
        out.append(tuple(new))
    return out, absent


def _computed_key(v) -> str | None:
    """A computed number's term key (None: unbound, an error)."""
    return None if v is None else v if type(v) is str else _num_item(v)[0]   # (str: a key, tiny_terms)


class _Terms:
    """A dictionary as the terms :meth:`GenQuery.fragments` renders from (its keys)."""

    __slots__ = ("dictionary",)

    def __init__(self, dictionary):
        self.dictionary = dictionary

    def keys(self, ids) -> list:
        return self.dictionary.keys(ids)
