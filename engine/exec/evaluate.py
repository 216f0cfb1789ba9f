"""Evaluation of the SPARQL algebra over columnar bindings.

``QueryContext`` is the per-query state: the snapshot, the dataset (default
graph view and named graphs), the term overlay for computed terms (ids >=
LOCAL_BASE; it asks the store dictionary first, so id equality is term
equality), the deadline and row budget, and the EXISTS callback of
:class:`engine.exec.context.EvalContext`. It is also the ``TermTable`` of the
``QueryResult``.

``Evaluator.eval(node, seed)`` returns a :class:`Bindings`. ``seed`` is only
used for EXISTS (substitution semantics: the seed's rows, tagged with a
``#row`` column, are visible to every leaf and filter of the pattern) and,
internally, to start a BGP's exploration from the rows of the pattern to its
left (``{ ... } ?x :p ?y``) instead of joining two independent results.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import threading
import time
import uuid
import weakref

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.arrays import unique
from engine.errors import QueryEvaluationError, QueryTimeout, RowBudgetExceeded
from engine.exec import aggregates as _agg_module
from engine.exec import const_filter, having_first, limit_chunks
from engine.exec import functions as _fn_module
from engine.exec import numbers as N
from engine.exec import rowwise as _rowwise
from engine.exec import values as V
from engine.exec.bgp import (
    SMALL_ROWS,
    candidate_predicates,
    compile_small,
    run_bgp,
    seed_ok,
    with_output_slots,
)
from engine.exec.bindings import (
    UNBOUND,
    Bindings,
    concat,
    distinct_inverse,
    factorize,
    join,
    join_pairs,
    left_outer,
    merge,
    minus,
    row_keys,
)
from engine.exec.context import (
    LOCAL_BASE,
    MemoryBudget,
    charge_rows,
    current_budget,
    enter_budget,
    holding,
    leave_budget,
    table_bytes,
)
from engine.exec.order_keys import column_key as _column_key
from engine.exec.paths import PathEvaluator
from engine.exec.result import QueryResult
from engine.kv.views import EmptyGraph, merged_view
from engine.plan.filters import bgp_filter_vars, deterministic_vars
from engine.plan.nodes import ExploreJoin, ExploreLeftJoin, PathJoin
from engine.plan.order import bgp_vars
from engine.plan.planner import QueryPlan, plan_query
from engine.plan.point import DESCRIBE_RESOURCES, describe_small
from engine.sparql import algebra as A

ROW = "#row"
_KEY_OVERHEAD = 120  # str object, dict entry and list slot of one overlay term
DEFAULT_GRAPH_IRI = "urn:jindou:default"


def _functions():
    return _fn_module


def _small_order(keys, ctx):
    return _small_answers.small_order_permutation(keys, ctx)


# imported at load, not on the first GROUP BY: with PYTHONDONTWRITEBYTECODE (set where the
# server and the benchmarks run) no bytecode is cached, and a lazy import compiled the module
# inside the first query that needed it (~34 ms into a continuous query's first instant)
def _aggregates():
    return _agg_module


def _small_groups(key_cols: list[np.ndarray]) -> tuple[np.ndarray, int, np.ndarray]:
    """GROUP BY's (group of each row, number of groups, first row of each group) over a few
    rows in plain Python, numbered as ``factorize(row_keys(...))`` numbers them (the distinct
    key tuples in id order), without its numpy calls' fixed cost."""
    rows = list(zip(*[c.tolist() for c in key_cols], strict=True))
    pos = {t: g for g, t in enumerate(sorted(set(rows)))}
    groups = [pos[t] for t in rows]
    first = [-1] * len(pos)
    for i, g in enumerate(groups):
        if first[g] < 0:
            first[g] = i
    return np.asarray(groups, dtype=np.int64), len(pos), np.asarray(first, dtype=np.int64)


# ---------------------------------------------------------------- context

#: float64 value (NaN: not numeric) of short computed/query-local keys, shared by all queries: the
#: value is a function of the key alone, and the same few keys (a FILTER constant, small COUNT
#: results) come back at every instant of a continuous query, where one Arrow parse costs ~100 us
_NUMERIC_MEMO: dict[str, float] = {}
_NUMERIC_MEMO_MAX = 65_536
_NUMERIC_MEMO_KEY = 80


#: more distinct computed terms than this are read from their Arrow copy, not as Python strings
_LOCAL_ARROW_MIN = 256
#: a few keys interned while at least this many computed terms wait as Arrow: looked up there
_PENDING_HASH_MIN = 8192


def _local_numeric(keys: list[str]) -> np.ndarray:
    """``numeric_values`` of ``keys``, through :data:`_NUMERIC_MEMO`."""
    from engine.kv.dictionary import numeric_values  # noqa: PLC0415

    memo = _NUMERIC_MEMO
    vals = [memo.get(k) for k in keys]
    miss = [i for i, v in enumerate(vals) if v is None]
    if not miss:
        return np.array(vals, dtype=np.float64)
    got = numeric_values(pa.array([keys[i] for i in miss], type=pa.large_string())).tolist()
    if len(memo) + len(miss) > _NUMERIC_MEMO_MAX:
        memo.clear()
    for i, v in zip(miss, got, strict=True):
        vals[i] = v
        if len(keys[i]) <= _NUMERIC_MEMO_KEY:
            memo[keys[i]] = v
    return np.array(vals, dtype=np.float64)



#: per store dictionary: (its length then, the byte length of its longest key)
_LONGEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_NO_ABSENT: set[str] = set()  # (a context whose dictionary cannot tell)


def _longest_key(d) -> int | None:
    """Byte length of the store dictionary's longest key (memoised per dictionary and
    length: append-only, it only grows); None when the dictionary cannot tell."""
    if not hasattr(d, "as_arrow"):
        return None
    n = len(d)
    try:
        got = _LONGEST.get(d)
    except TypeError:
        return None
    if got is not None and got[0] == n:
        return got[1]
    if got is not None and got[0] < n:
        new = d.as_arrow().slice(got[0])
        m = max(got[1], int(pc.max(pc.binary_length(new)).as_py() or 0))
    else:
        m = int(pc.max(pc.binary_length(d.as_arrow())).as_py() or 0) if n else 0
    _LONGEST[d] = (n, m)
    return m


class _Absent:
    """Keys a store dictionary did not hold, as of its first ``n`` ids: a computed term (a
    count, a sum, a BIND's value) is usually no stored term, and a continuous query asks for
    the same few at every instant, each time a dictionary look-up (~5 us a key, ~20 us a
    batch) in a fresh QueryContext. The dictionary only appends, so a key stays absent unless
    one of the ids added since ``n`` holds it: those are read (and the keys they hold dropped)
    once per query, before the query trusts the set; keys appended later have ids past its
    snapshot, which no triple it reads uses."""

    __slots__ = ("n", "keys", "lock")

    def __init__(self, n: int):
        self.n = n
        self.keys: set[str] = set()
        self.lock = threading.Lock()


_ABSENT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ABSENT_LOCK = threading.Lock()
_ABSENT_MAX = 65_536
#: at most this many ids added since the keys were checked: the added keys are read; more: the
#: remembered keys (at most _ABSENT_RECHECK of them, else they are forgotten) are looked up again
_ABSENT_READ = 256
_ABSENT_RECHECK = 4096


def _absent_keys(d) -> set[str] | None:
    """The keys ``d`` does not hold now (see :class:`_Absent`), None if it cannot tell."""
    if not hasattr(d, "keys") or not hasattr(d, "__len__"):
        return None
    try:
        a = _ABSENT.get(d)
        if a is None:
            with _ABSENT_LOCK:
                a = _ABSENT.get(d)
                if a is None:
                    a = _ABSENT[d] = _Absent(len(d))
    except TypeError:  # (not weakly referable)
        return None
    with a.lock:
        n = len(d)
        if n != a.n:
            if n < a.n or len(a.keys) > _ABSENT_MAX:
                a.keys = set()
            elif a.keys and n - a.n <= _ABSENT_READ:  # a few ids added: their keys read
                for k in d.keys(np.arange(a.n, n, dtype=np.int64)):
                    a.keys.discard(k)
            elif a.keys and len(a.keys) <= _ABSENT_RECHECK and hasattr(d, "lookup_many"):
                keys = list(a.keys)  # many added: the remembered keys looked up again at once
                found = np.asarray(d.lookup_many(keys)) >= 0
                a.keys = {k for k, f in zip(keys, found.tolist(), strict=True) if not f}
            elif a.keys:
                a.keys = set()
            a.n = n
        elif len(a.keys) > _ABSENT_MAX:
            a.keys = set()
        return a.keys
#: fresh blank nodes' labels (:meth:`QueryContext.fresh_bnodes`): a random seed per process
#: start, the process id (a forked query process has its own) and a count -- unique per
#: query and answer without a uuid4 (an ``os.urandom`` call, 2-8 µs) per query
_BNODE_SEED = uuid.uuid4().hex[:8]
_BNODE_TAGS = itertools.count()


def _bnode_tag() -> str:
    return f"_:q{_BNODE_SEED}{os.getpid():x}n{next(_BNODE_TAGS)}"


def _bnode_start() -> None:
    global _BNODE_START
    _BNODE_START = f"_:q{_BNODE_SEED}{os.getpid():x}n".encode()


#: ``_:q<seed><pid>n`` as bytes: :func:`bnode_tag_bytes`' start, made again in a forked child
_BNODE_START = b""
_bnode_start()
os.register_at_fork(after_in_child=_bnode_start)


def bnode_tag_bytes() -> bytes:
    """:func:`_bnode_tag` as bytes (the same count: labels stay distinct from every other
    query's and answer's; a forked query process's labels hold its own id), for answers
    that make their blank nodes without a ``QueryContext`` (``engine.small_answers``'
    CONSTRUCT templates)."""
    return b"%s%d" % (_BNODE_START, next(_BNODE_TAGS))


class QueryContext:
    """Per-query EvalContext and TermTable."""

    def __init__(self, snapshot, *, base=None, timeout=None, max_rows=None, plan_cache=None, now=None,
                 term_cache: dict | None = None, query_memory: int | None = None):
        self.snapshot = snapshot
        self.dictionary = snapshot.dictionary
        self.base = base
        self._now = now  # NOW(): read on first use, then fixed for the query
        self.deadline = (time.monotonic() + timeout) if timeout else None
        self.timeout = timeout
        self.max_rows = max_rows
        self.plan_cache = plan_cache
        self._lookup_cache: dict[str, int] = {}
        self._absent: set[str] | None = None  # keys the store lacks (_absent_keys), read on first use
        # ids of keys the store holds never change (append-only dictionary):
        # the Database shares this cache between queries
        self._term_cache = term_cache if term_cache is not None else {}
        self._local: dict[str, int] = {}
        self._local_keys: list[str] = []
        #: the local keys as Arrow (:meth:`keys_arrow`): one array over a prefix of the local ids
        self._local_arrow: pa.Array | None = None
        #: local keys interned in bulk (:meth:`intern_arrow`) and not yet in ``_local`` /
        #: ``_local_keys`` (the ids right after theirs): a projected computed column need
        #: never become Python strings; :meth:`_sync` moves them when a reader needs them
        self._pending: pa.Array | None = None
        self._hashed_interns = 0  # intern() calls of a few keys answered by hashing the pending locals
        self._known: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # see remember_numbers
        #: computed numbers held as values, keys written on first read as text (intern_numbers)
        self._lazy: N.LazyNumbers | None = None
        self._local_nums: tuple[int, np.ndarray] | None = None  # sorted numeric values of the keyed locals
        self._bnode_counter = 0
        self.evaluator: Evaluator | None = None
        #: memory accounting of this query (intermediate tables, computed terms); without
        #: a budget of its own, the running one (e.g. of the update request it serves)
        running = current_budget() if query_memory is None else None
        self.memory = running if running is not None else MemoryBudget(query_memory)

    @property
    def now(self) -> _dt.datetime:
        n = self._now
        if n is None:
            n = self._now = _dt.datetime.now(_dt.UTC)
        return n

    # ---- term ids
    def lookup(self, key: str) -> int:
        """Store id of a key, -1 if the store does not hold it."""
        c = self._term_cache.get(key)
        if c is not None:
            return c
        c = self._lookup_cache.get(key)
        if c is None:
            absent = self._absent_set()
            if absent is not None and key in absent:
                c = self._lookup_cache[key] = -1
                return c
            c = int(self.dictionary.lookup(key))
            if c >= 0:
                if len(self._term_cache) > 100_000:
                    self._term_cache.clear()
                self._term_cache[key] = c
            else:
                self._lookup_cache[key] = c
                if absent is not None:
                    absent.add(key)
        return c

    def _absent_set(self) -> set[str] | None:
        a = self._absent
        if a is None:
            a = self._absent = _absent_keys(self.dictionary)
            if a is None:
                self._absent = _NO_ABSENT
        return None if a is _NO_ABSENT else a

    def _sync(self) -> None:
        """Move the bulk-interned local keys into ``_local`` / ``_local_keys``."""
        pend = self._pending
        if pend is not None:
            self._pending = None
            keys = pend.to_pylist()
            base = LOCAL_BASE + len(self._local_keys)
            self._local.update(zip(keys, range(base, base + len(keys)), strict=True))
            self._local_keys.extend(keys)

    def _many_pending(self) -> bool:
        """Whether so many computed terms wait as Arrow that reading a few of them there
        beats moving them all into Python strings (a constant next to a RAND() column)."""
        return self._pending is not None and len(self._pending) >= _PENDING_HASH_MIN

    def _n_local(self) -> int:
        return len(self._local_keys) + (len(self._pending) if self._pending is not None else 0)

    def term_id(self, key: str) -> int:
        """Store id, else a query-local id."""
        i = self.lookup(key)
        if i >= 0:
            return i
        if self._pending is not None:
            self._sync()
        j = self._local.get(key)
        if j is None and self._lazy is not None and key.endswith((N.INT_SFX, N.DBL_SFX)):
            z = int(self._lazy.find(pa.array([key], pa.large_string()))[0])
            if z >= 0:
                return z
        if j is None:
            # a computed term lives until the query ends: charged by its size
            self.memory.hold(len(key) + _KEY_OVERHEAD, "computed terms")
            j = LOCAL_BASE + len(self._local_keys)
            self._local[key] = j
            self._local_keys.append(key)
        return j

    def absent_term_id(self, key: str) -> int:
        """:meth:`term_id` of a key the caller has found absent from the dictionary since its
        last addition (engine.stream.tiny_ops' count terms): the query-local id, no look-up."""
        self._lookup_cache[key] = -1
        return self.term_id(key)

    def intern(self, keys) -> np.ndarray:
        """ids of ``keys`` (None -> UNBOUND): known ones from the caches; the others
        looked up in the store in one vectorized call when there are more than a
        few (a computed COUNT or BIND value is usually not in the store, and a
        look-up one key at a time costs ~8 us against ~35 us for a batch)."""
        if len(keys) > 64:
            return self._intern_bulk(keys)
        if self._pending is not None:
            if self._many_pending() and self._hashed_interns < 2:
                # a constant or a group's count after a large computed column: a hash look-up
                # in the locals' Arrow copy (~4 ms for 72k) instead of moving them all into
                # Python strings (~14 ms); from the third such call on, the move pays
                self._hashed_interns += 1
                return self.intern_arrow(pa.array(keys, type=pa.large_string()), by_hash=True)
            self._sync()
        out = np.empty(len(keys), dtype=np.int64)
        known, local, missed = self._term_cache, self._local, self._lookup_cache
        todo = []
        for i, k in enumerate(keys):
            if k is None:
                out[i] = UNBOUND
                continue
            c = known.get(k)
            if c is None:
                c = local.get(k)
            if c is None:
                if k not in missed:
                    todo.append(i)
                    continue
                c = self.term_id(k)
            out[i] = c
        if len(todo) > 4:
            absent = self._absent_set()
            if absent:  # keys the store is known to lack: their local ids, no look-up
                for i in [i for i in todo if keys[i] in absent]:
                    out[i] = self.term_id(keys[i])
                todo = [i for i in todo if keys[i] not in absent]
        if len(todo) > 4:
            ids = self.dictionary.lookup_many([keys[i] for i in todo]).tolist()
            for i, c in zip(todo, ids, strict=True):
                k = keys[i]
                if c >= 0:
                    if len(known) > 100_000:
                        known.clear()
                    known[k] = c
                else:
                    missed[k] = c
                    if absent is not None:
                        absent.add(k)
                out[i] = c if c >= 0 else self.term_id(k)
        else:
            for i in todo:
                out[i] = self.term_id(keys[i])
        return out

    def _intern_bulk(self, keys) -> np.ndarray:
        """intern() of many keys: distinct keys found by Arrow's hashing, the
        store's ids in one vectorized dictionary lookup, query-local ids for
        the rest."""
        return self.intern_arrow(pa.array(keys, type=pa.large_string()))

    def intern_fresh(self, keys: pa.Array) -> np.ndarray:
        """Query-local ids for distinct keys no term of the store or of this query
        has (BNODE()'s salted, numbered labels, random UUIDs): no look-up, the next ids in one
        ``arange``, the keys waiting as Arrow like :meth:`intern_arrow`'s new ones."""
        chunk = keys.cast(pa.large_string())
        if len(chunk) == 0:
            return np.zeros(0, dtype=np.int64)
        self.memory.hold(int(pc.sum(pc.binary_length(chunk)).as_py() or 0) + _KEY_OVERHEAD * len(chunk),
                         "computed terms")
        n_local = self._n_local()
        prefix = self._locals_arrow() if n_local else None
        base = LOCAL_BASE + n_local
        self._pending = chunk if self._pending is None else pa.concat_arrays([self._pending, chunk])
        self._local_arrow = chunk if prefix is None else pa.concat_arrays([prefix, chunk])
        return np.arange(base, base + len(chunk), dtype=np.int64)

    def intern_arrow(self, keys: pa.Array, by_hash: bool = False, lazy: bool = True) -> np.ndarray:
        """:meth:`intern` of keys given as an Arrow string array (the column-wise string
        functions build theirs so): no Python string per key but the new ones.
        ``by_hash``: the locals searched by Arrow's hashing even for a few keys;
        ``lazy``: whether numbers held as values (:meth:`intern_numbers`) may hold them."""
        enc = keys.dictionary_encode()
        distinct = enc.dictionary
        ids = self._store_ids(distinct)
        miss = np.flatnonzero(ids < 0)
        if len(miss) and lazy and self._lazy is not None:
            z = self._lazy.find(distinct.take(pa.array(miss)))
            if (z >= 0).any():
                ids = np.array(ids, dtype=np.int64, copy=True)
                ids[miss] = z
                miss = miss[z < 0]
        if len(miss):
            ids = np.array(ids, dtype=np.int64, copy=True)
            missing_arr = distinct.take(pa.array(miss)).cast(pa.large_string())
            n_local = self._n_local()
            if n_local and len(missing_arr) * 4 < n_local and not by_hash:  # a few keys against many locals: the dict
                self._sync()
                missing = missing_arr.to_pylist()
                local = self._local
                new = [k for k in missing if k not in local]
                if new:  # computed terms live until the query ends: charged by their size
                    self.memory.hold(sum(map(len, new)) + _KEY_OVERHEAD * len(new), "computed terms")
                    self._locals_arrow()  # (its Arrow copy caught up before the list grows)
                base = LOCAL_BASE + len(self._local_keys)
                local.update(zip(new, range(base, base + len(new)), strict=True))
                self._local_keys.extend(new)
                ids[miss] = np.fromiter(map(local.__getitem__, missing), dtype=np.int64, count=len(missing))
            else:
                # found among the locals by Arrow's hashing; the new ones take the next ids and
                # wait in _pending (no Python string per key until a reader needs one)
                if n_local:
                    at = pc.index_in(missing_arr, value_set=self._locals_arrow())
                    found = at.is_valid().to_numpy(zero_copy_only=False)
                else:
                    at, found = None, np.zeros(len(missing_arr), dtype=bool)
                fresh = ~found
                chunk = missing_arr.filter(pa.array(fresh)) if found.any() else missing_arr
                got = np.empty(len(missing_arr), dtype=np.int64)
                if found.any():
                    got[found] = LOCAL_BASE + at.to_numpy(zero_copy_only=False)[found].astype(np.int64)
                if len(chunk):  # computed terms live until the query ends: charged by their size
                    self.memory.hold(int(pc.sum(pc.binary_length(chunk)).as_py() or 0)
                                     + _KEY_OVERHEAD * len(chunk), "computed terms")
                    prefix = self._locals_arrow() if n_local else None
                    base = LOCAL_BASE + n_local
                    got[fresh] = np.arange(base, base + len(chunk), dtype=np.int64)
                    self._pending = chunk if self._pending is None else pa.concat_arrays([self._pending, chunk])
                    self._local_arrow = chunk if prefix is None else pa.concat_arrays([prefix, chunk])
                ids[miss] = got
        idx = enc.indices
        if idx.null_count:
            idx = idx.fill_null(-1)
        idx = idx.to_numpy(zero_copy_only=False).astype(np.int64)
        out = np.full(len(idx), UNBOUND, dtype=np.int64)
        ok = idx >= 0
        out[ok] = np.asarray(ids, dtype=np.int64)[idx[ok]]
        return out

    def _store_ids(self, distinct: pa.Array) -> np.ndarray:
        """Store ids of distinct keys (-1: absent). A key longer than the store's longest
        cannot be one of its terms: not hashed (GROUP_CONCAT's long strings, ~40 KB each)."""
        if not len(distinct):
            return np.zeros(0, np.int64)
        longest = _longest_key(self.dictionary)
        if longest is not None:
            lens = np.asarray(pc.binary_length(distinct).to_numpy(zero_copy_only=False), dtype=np.int64)
            fit = lens <= longest
            if not fit.all():
                out = np.full(len(distinct), -1, dtype=np.int64)
                sel = np.flatnonzero(fit)
                if len(sel):
                    out[sel] = self.dictionary.lookup_many(distinct.take(pa.array(sel)))
                return out
        return self.dictionary.lookup_many(distinct)

    def _locals_arrow(self) -> pa.Array:
        """Every query-local key as one Arrow array (index = id - LOCAL_BASE), extended
        by the keys added since the last call."""
        have = self._local_arrow
        n = len(self._local_keys)  # (pending keys are in it already: intern_arrow puts them there)
        done = 0 if have is None else len(have)
        if done < n and self._pending is None:
            more = pa.array(self._local_keys[done:], pa.large_string())
            have = more if have is None else pa.concat_arrays([have, more])
            self._local_arrow = have
        return have if have is not None else pa.array([], pa.large_string())

    def keys_arrow(self, ids) -> pa.Array:
        """Keys of ids as an Arrow string array (None for UNBOUND): store ids taken
        from the dictionary's buffers, query-local ones from their Arrow copy (a
        computed column of 16k terms: 6 ms through Python strings, 0.3 ms so)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not hasattr(self.dictionary, "as_arrow"):  # (a remote dictionary: through its keys)
            return pa.array(self.keys(ids), pa.large_string())
        store = (ids >= 0) & (ids < LOCAL_BASE)
        if store.all():
            return self.dictionary.as_arrow().take(pa.array(ids)) if len(ids) else pa.array([], pa.large_string())
        lazy = ids >= N.LAZY_BASE
        local = (ids >= LOCAL_BASE) & ~lazy
        si, li, zi = np.flatnonzero(store), np.flatnonzero(local), np.flatnonzero(lazy)
        parts = [self.dictionary.as_arrow().take(pa.array(ids[si])).cast(pa.large_string()),
                 self._locals_arrow().take(pa.array(ids[li] - LOCAL_BASE)),
                 self._lazy.keys_arrow(ids[zi], self._hold_keys) if len(zi) else pa.array([], pa.large_string()),
                 pa.nulls(1, pa.large_string())]
        pos = np.full(len(ids), len(si) + len(li) + len(zi), dtype=np.int64)  # unbound: the null
        pos[si] = np.arange(len(si), dtype=np.int64)
        pos[li] = len(si) + np.arange(len(li), dtype=np.int64)
        pos[zi] = len(si) + len(li) + np.arange(len(zi), dtype=np.int64)
        return pa.concat_arrays(parts).take(pa.array(pos))

    def keys(self, ids) -> list[str | None]:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return []
        store = (ids >= 0) & (ids < LOCAL_BASE)
        if store.all():
            return self.dictionary.keys(ids)
        out: list[str | None] = [None] * len(ids)
        sidx = np.flatnonzero(store)
        if len(sidx):
            for i, k in zip(sidx.tolist(), self.dictionary.keys(ids[sidx]), strict=True):
                out[i] = k
        lazy = np.flatnonzero(ids >= N.LAZY_BASE)
        if len(lazy):
            for i, k in zip(lazy.tolist(), self._lazy.keys_arrow(ids[lazy], self._hold_keys).to_pylist(), strict=True):
                out[i] = k
        local = np.flatnonzero((ids >= LOCAL_BASE) & (ids < N.LAZY_BASE))
        if len(local):
            if self._pending is not None:
                self._sync()
            lk = self._local_keys
            for i in local.tolist():
                out[i] = lk[int(ids[i]) - LOCAL_BASE]
        return out

    def intern_numbers(self, vals: np.ndarray, code: int, fresh: bool = False) -> np.ndarray:
        """Ids of computed numbers, one per row: integers (int64, ``N.INT``) or doubles
        (float64, ``N.DBL``). Many distinct values are held as values (``N.LazyNumbers``),
        their keys written only if a reader needs text; a value that may be a term of the
        store or a keyed computed term (equal number: its canonical key looked up) and few
        distinct values go by their keys. ``fresh``: values drawn at random (RAND()), taken
        as distinct without a sort (two of n rows drawing one double: odds ~n^2 / 2^54)."""
        kv = N.value_keys(vals, code)
        if fresh and len(kv) >= N.LAZY_MIN:  # (distinct with odds 1 - n^2/2^54: RAND()'s draws)
            u, inv = kv, None
        else:
            u, inv = distinct_inverse(kv)
            inv = inv.reshape(-1)
        store = N.store_values(self.dictionary) if len(u) >= N.LAZY_MIN else None
        if store is None:
            if len(u) <= 64:  # (a few keys: the dict path of intern)
                keys = ([f'"{v}"{N.INT_SFX}' for v in u.tolist()] if code == N.INT
                        else V.format_doubles(u.view(np.float64), '"', '"' + N.DBL_SFX))
                got = np.asarray(self.intern(keys), dtype=np.int64)
            else:
                got = self.intern_arrow(N.canonical_keys(u if code == N.INT else u.view(np.float64), code))
            return got if inv is None else got[inv]
        ids = np.full(len(u), UNBOUND, dtype=np.int64)
        fl = u.astype(np.float64) if code == N.INT else u.view(np.float64)
        keyed = N.maybe_in(store, fl)
        if code == N.INT:
            keyed |= np.abs(fl) >= 2.0**53
        if self._n_local():
            keyed |= N.maybe_in(self._local_values(), fl)
        if self._lazy is not None and not fresh:  # (a fresh draw equal to an earlier value: same odds)
            ids = self._lazy.lookup(u, code)
            keyed &= ids < 0
        if keyed.any():
            k = np.flatnonzero(keyed)
            ids[k] = self.intern_arrow(N.canonical_keys(u[k] if code == N.INT else fl[k], code), lazy=False)
        rest = np.flatnonzero(ids < 0)
        if len(rest):
            self.memory.hold(24 * len(rest), "computed numbers")
            if self._lazy is None:
                self._lazy = N.LazyNumbers()
            ids[rest] = self._lazy.add(u[rest], code)
        return ids if inv is None else ids[inv]

    def _hold_keys(self, nbytes: int) -> None:
        self.memory.hold(nbytes, "computed terms")

    def lazy_values(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(float64 values, datatype codes) of ids that are all numbers held as values
        (every id >= ``N.LAZY_BASE``)."""
        return self._lazy.values(ids)

    def _local_values(self) -> np.ndarray:
        """Sorted finite numeric values of the keyed computed terms (kept up to date as
        they are added: the locals only grow)."""
        from engine.kv.dictionary import numeric_values  # noqa: PLC0415

        n = self._n_local()
        have = self._local_nums
        if have is not None and have[0] == n:
            return have[1]
        done = 0 if have is None else have[0]
        new = numeric_values(self._locals_arrow().slice(done).cast(pa.large_string()))
        vals = np.concatenate([have[1], new[np.isfinite(new)]]) if have is not None else new[np.isfinite(new)]
        vals.sort()
        self._local_nums = (n, vals)
        return vals

    def remember_numbers(self, ids: np.ndarray, values: np.ndarray, codes: np.ndarray) -> None:
        """Values and datatype codes (functions.py ``_DT_*``) of computed numbers as their
        maker knew them (RAND()): later readers skip parsing their keys back."""
        loc = ids >= LOCAL_BASE
        ids, values, codes = ids[loc], values[loc], codes[loc]
        if self._known is not None:
            ids = np.concatenate([self._known[0], ids])
            values = np.concatenate([self._known[1], values])
            codes = np.concatenate([self._known[2], codes])
        order = np.argsort(ids, kind="stable")
        ids, values, codes = ids[order], values[order], codes[order]
        first = np.ones(len(ids), dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        self._known = (ids[first], values[first], codes[first])

    def known_numbers(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, values, datatype codes) of ids among :meth:`remember_numbers`' ones."""
        n = len(ids)
        lazy = ids >= N.LAZY_BASE
        if self._lazy is not None and lazy.any():
            found, vals, codes = self.known_numbers(np.where(lazy, UNBOUND, ids))
            zi = np.flatnonzero(lazy)
            found[zi] = True
            vals[zi], codes[zi] = self._lazy.values(ids[zi])
            return found, vals, codes
        if self._known is None or n == 0:
            return np.zeros(n, dtype=bool), np.full(n, np.nan), np.full(n, -1, dtype=np.int8)
        kid, kval, kcode = self._known
        pos = np.minimum(np.searchsorted(kid, ids), len(kid) - 1)
        found = kid[pos] == ids
        return found, np.where(found, kval[pos], np.nan), np.where(found, kcode[pos], -1).astype(np.int8)

    def numeric(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if self._lazy is not None and len(ids) and int(ids.min()) >= N.LAZY_BASE:  # a computed column
            return self._lazy.values(ids)[0]
        out = self.dictionary.numeric(np.where(ids >= LOCAL_BASE, -1, ids))
        loc = np.flatnonzero(ids >= LOCAL_BASE)
        if len(loc) and self._lazy is not None:
            lazy = ids[loc] >= N.LAZY_BASE
            if lazy.any():
                out = np.array(out, dtype=np.float64, copy=True)
                out[loc[lazy]] = self._lazy.values(ids[loc[lazy]])[0]
                loc = loc[~lazy]
        if len(loc) and self._known is not None:
            found, vals, _ = self.known_numbers(ids[loc])
            if found.any():
                out = np.array(out, dtype=np.float64, copy=True)
                out[loc[found]] = vals[found]
                loc = loc[~found]
        if len(loc):
            # computed values (COUNT, arithmetic) repeat: parse each distinct local term once
            uniq, inv = distinct_inverse(ids[loc])
            out = np.array(out, dtype=np.float64, copy=True)
            if len(uniq) > _LOCAL_ARROW_MIN or self._many_pending():  # their Arrow copy (RAND, arithmetic)
                from engine.kv.dictionary import numeric_values  # noqa: PLC0415

                keys = self._locals_arrow().take(pa.array(uniq - LOCAL_BASE))
                out[loc] = numeric_values(keys.cast(pa.large_string()))[inv.reshape(-1)]
                return out
            if self._pending is not None:
                self._sync()
            keys = [self._local_keys[i - LOCAL_BASE] for i in uniq.tolist()]
            out[loc] = _local_numeric(keys)[inv.reshape(-1)]
        return out

    def kinds(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and int(ids.max()) < LOCAL_BASE:  # store ids only (a DESCRIBE's objects...)
            return self.dictionary.kinds(ids)
        out = self.dictionary.kinds(np.where(ids >= LOCAL_BASE, -1, ids))
        loc = np.flatnonzero(ids >= LOCAL_BASE)
        if len(loc) and self._lazy is not None:
            lazy = ids[loc] >= N.LAZY_BASE
            if lazy.any():  # computed numbers: literals
                out = np.array(out, dtype=np.int8, copy=True)
                out[loc[lazy]] = 2
                loc = loc[~lazy]
        if len(loc):
            out = np.array(out, dtype=np.int8, copy=True)
            uniq, inv = distinct_inverse(ids[loc])
            if len(uniq) > _LOCAL_ARROW_MIN or self._many_pending():  # each key's first byte, from Arrow
                keys = self._locals_arrow().take(pa.array(uniq - LOCAL_BASE)).cast(pa.large_string())
                first = pc.utf8_slice_codeunits(keys, 0, 1)
                kinds = np.where(pc.equal(first, "<").to_numpy(zero_copy_only=False), 0,
                                 np.where(pc.equal(first, "_").to_numpy(zero_copy_only=False), 1, 2)).astype(np.int8)
            else:
                if self._pending is not None:
                    self._sync()
                firsts = [self._local_keys[i - LOCAL_BASE][0] for i in uniq.tolist()]
                kinds = np.array([0 if c == "<" else 1 if c == "_" else 2 for c in firsts], dtype=np.int8)
            out[loc] = kinds[inv.reshape(-1)]
        return out

    def fresh_bnodes(self, n: int, label: str) -> np.ndarray:
        """n new blank nodes (CONSTRUCT templates, one per solution)."""
        self._bnode_counter += 1
        if self._bnode_counter == 1:
            self._bnode_tag = _bnode_tag()
        tag = f"{self._bnode_tag}c{self._bnode_counter}x"
        if self._pending is not None:
            self._sync()
        base = LOCAL_BASE + len(self._local_keys)
        self.memory.hold(n * (len(tag) + 12 + _KEY_OVERHEAD), "blank nodes")
        keys = [f"{tag}{i}" for i in range(n)]
        for i, k in enumerate(keys):
            self._local[k] = base + i
        self._local_keys.extend(keys)
        return np.arange(base, base + n, dtype=np.int64)

    # ---- budgets
    def check_budget(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise QueryTimeout(f"query exceeded its timeout of {self.timeout} s")

    def charge_rows(self, n_rows: int, n_cols: int) -> None:
        """Refuse (MemoryBudgetExceeded) a table of n_rows x n_cols ids that
        would pass the memory budget; call before allocating it."""
        self.memory.check(table_bytes(n_rows, n_cols))

    def check_memory(self, nbytes: int) -> None:
        """Refuse an allocation of ``nbytes`` that would pass the memory budget."""
        self.memory.check(nbytes)

    def check_rows(self, n: int) -> None:
        if self.max_rows is not None and n > self.max_rows:
            raise RowBudgetExceeded(f"intermediate result of {n} rows exceeds the row budget of {self.max_rows}")

    # ---- EXISTS
    def exists(self, pattern, columns: dict[str, np.ndarray], n: int) -> np.ndarray:
        return self.evaluator.exists(pattern, columns, n)


# ---------------------------------------------------------------- dataset


class DatasetView:
    """The active dataset: the default graph view and the named graphs."""

    def __init__(self, default, named: dict[int, object], key=()):
        self.default = default
        self.named = named
        self.key = key  # identifies the default graph in plan-cache keys


def make_dataset(ctx: QueryContext, default_iris=(), named_iris=()) -> DatasetView:
    snap = ctx.snapshot
    if not default_iris and not named_iris:
        return DatasetView(snap.default, snap.named)
    graphs = []
    for iri in default_iris:
        if iri == DEFAULT_GRAPH_IRI:
            graphs.append(snap.default)
            continue
        gid = ctx.lookup("<" + iri + ">")
        if gid >= 0 and gid in snap.named:
            graphs.append(snap.named[gid])
    seen = []
    for g in graphs:
        if all(g is not h for h in seen):
            seen.append(g)
    default = merged_view(seen) if seen else EmptyGraph()
    key = ("from", tuple(default_iris))
    named = {}
    for iri in named_iris:
        gid = ctx.lookup("<" + iri + ">")
        if gid >= 0 and gid in snap.named:
            named[gid] = snap.named[gid]
    return DatasetView(default, named, key)


# ---------------------------------------------------------------- evaluator


def pattern_vars(node, out: set | None = None) -> set:
    """All variable names mentioned in a pattern (for EXISTS seeding)."""
    if out is None:
        out = set()
    if isinstance(node, A.Var):
        out.add(node.name)
    elif isinstance(node, A.BGP):
        out.update(bgp_vars(node.triples))
    elif isinstance(node, A.PathPattern):
        for t in (node.s, node.o):
            if isinstance(t, A.Var):
                out.add(t.name)
    elif isinstance(node, A.Values):
        out.update(v.name for v in node.vars)
    elif isinstance(node, (A.Call, A.FunctionCall)):
        for a in node.args:
            pattern_vars(a, out)
    elif isinstance(node, A.Exists):
        pattern_vars(node.pattern, out)
    elif isinstance(node, A.Group):
        for _e, v in node.by:
            out.add(v.name)
        for v, _ in node.aggregates:
            out.add(v.name)
    elif isinstance(node, A.Project):
        out.update(v.name for v in node.vars)
    elif hasattr(node, "__dataclass_fields__"):
        for f in node.__dataclass_fields__:
            val = getattr(node, f)
            if isinstance(val, (A.Var,)) or hasattr(val, "__dataclass_fields__"):
                pattern_vars(val, out)
    return out


def top_k_order(node: A.Slice):
    """The ORDER BY node whose first OFFSET + LIMIT rows are all a Slice keeps
    (right below it, or below a projection), else None."""
    if node.limit is None:
        return None
    inner = node.input
    if isinstance(inner, A.Project):
        inner = inner.input
    return inner if isinstance(inner, A.OrderBy) else None


#: a FILTER over at least this many rows may be evaluated once per distinct tuple of its
#: variables (Evaluator.filter_rows), when there are at most 1/DISTINCT_FILTER_SHARE as many
DISTINCT_FILTER_ROWS = 256
DISTINCT_FILTER_SHARE = 4
#: how many FILTERs were evaluated once per distinct tuple (a spy for the tests)
FILTER_ONCE = [0]


class Evaluator:
    #: (BGP node, early filters) asked of the next evaluation of that BGP (_Filter -> _BGP)
    _early = None
    #: limit_chunks.Chunk: the chunk of driving rows a BGP's evaluation starts from, the UNION
    #: branches skipped, the right sides kept (limit_chunks)
    _chunk = None

    def __init__(self, ctx: QueryContext, dataset: DatasetView):
        self.ctx = ctx
        self.dataset = dataset
        self.graph = dataset.default
        self.graph_key: object = ("default", dataset.key)
        self._tops: dict[int, int] = {}  # id(OrderBy node) -> rows its Slice keeps
        ctx.evaluator = self

    # ---- helpers
    def _check(self, b: Bindings) -> Bindings:
        self.ctx.check_budget()
        self.ctx.check_rows(b.n)
        return b

    def eval(self, node, seed: Bindings | None = None) -> Bindings:
        meth = getattr(self, "_" + type(node).__name__, None)
        if meth is None:
            raise QueryEvaluationError(f"cannot evaluate {type(node).__name__}")
        ch = self._chunk
        if ch is not None and seed is None:  # (limit_chunks: this piece's rows)
            if node is ch.leaf:
                seed = ch.seed
            elif ch.skip or ch.kept:
                got = limit_chunks.replaced(self, node, ch)
                if got is not None:
                    return self._check(got)
        return self._check(meth(node, seed))

    def _unseeded(self, node, seed, fn) -> Bindings:
        res = fn(node)
        if seed is None:
            return res
        return join(seed, res, self.ctx.max_rows)

    # ---- leaves
    def _BGP(self, node: A.BGP, seed):
        ctx = self.ctx
        early = ()
        pend = self._early
        if pend is not None and pend[0] is node:
            # a FILTER right above this BGP over its variables (_Filter): inside the step order
            self._early = None
            early = pend[1]
        if seed is not None and not seed_ok(seed, node.triples):
            res = self._run_bgp(node, node.triples, None, early)
            return join(seed, res, ctx.max_rows)
        return self._run_bgp(node, node.triples, seed, early)

    def _run_bgp(self, node, triples, seed: Bindings | None, early=()) -> Bindings:
        """The exploration of ``triples`` for plan node ``node`` (a hook for EXPLAIN ANALYZE)."""
        ctx = self.ctx
        return run_bgp(triples, self.graph, ctx.lookup, seed=seed, max_rows=ctx.max_rows,
                       check=ctx.check_budget, plan_cache=ctx.plan_cache, cache_key=self.graph_key,
                       early=early)

    def _PathPattern(self, node: A.PathPattern, seed):
        ctx = self.ctx
        pe = PathEvaluator(self.graph, ctx.lookup, ctx.check_budget, ctx.max_rows)
        s, o, path = node.s, node.o, node.path
        starts = None
        if isinstance(s, A.Const):
            sid = ctx.term_id(s.key)
            a, b = pe.pairs(path, np.array([sid], dtype=np.int64))
            if isinstance(o, A.Const):
                m = b == ctx.term_id(o.key)
                res = Bindings.unit() if m.any() else Bindings({}, 0)
            else:
                res = Bindings({o.name: unique(b) if _set_path(path) else b})
        elif isinstance(o, A.Const):
            oid = ctx.term_id(o.key)
            from engine.exec.paths import inverse  # noqa: PLC0415

            a, b = pe.pairs(inverse(path), np.array([oid], dtype=np.int64))
            res = Bindings({s.name: unique(b) if _set_path(path) else b})
        else:
            if seed is not None and s.name in seed.cols and (seed.cols[s.name] != UNBOUND).all():
                starts = self._graph_nodes(unique(seed.cols[s.name]), path)
                a, b = pe.pairs(path, starts)
            elif seed is not None and o.name in seed.cols and (seed.cols[o.name] != UNBOUND).all():
                from engine.exec.paths import inverse  # noqa: PLC0415

                starts = self._graph_nodes(unique(seed.cols[o.name]), path)
                b, a = pe.pairs(inverse(path), starts)
            else:
                a, b = pe.pairs(path, None)
            if s.name == o.name:
                m = a == b
                res = Bindings({s.name: a[m]})
            else:
                res = Bindings({s.name: a, o.name: b})
        if seed is None:
            return res
        return join(seed, res, ctx.max_rows)

    def _graph_nodes(self, starts: np.ndarray, path) -> np.ndarray:
        """Starts taken from other patterns' bindings: a zero-length path with
        variable ends only matches terms of the graph (not e.g. VALUES terms)."""
        if not _may_be_zero(path) or len(starts) == 0:
            return starts
        nodes = self.graph.vertices()
        if len(nodes) == 0:
            return starts[:0]
        pos = np.minimum(np.searchsorted(nodes, starts), len(nodes) - 1)
        return starts[nodes[pos] == starts]

    def _Values(self, node: A.Values, seed):
        ctx = self.ctx
        names = [v.name for v in node.vars]
        n = len(node.rows)
        cols = {}
        for j, v in enumerate(names):
            ctx.check_budget()
            cols[v] = ctx.intern([row[j] for row in node.rows]) if n else np.zeros(0, np.int64)
        res = Bindings(cols, n)
        if seed is None:
            return res
        return join(seed, res, ctx.max_rows)

    def _Service(self, node: A.Service, seed):
        from engine.exec import service  # noqa: PLC0415 - federation: engine/exec/service.py

        return service.evaluate(self, node, seed)

    # ---- combinators
    def _Join(self, node: A.Join, seed):
        left = self.eval(node.left, seed)
        if left.n == 0:
            return Bindings.empty(set(left.cols) | pattern_vars(node.right))
        return self._join_eval(left, node.right, seed)

    def _join_eval(self, left: Bindings, right_node, seed) -> Bindings:
        with holding(table_bytes(left.n, len(left.cols))):
            right = self.eval(right_node, seed)
        return join(left, right, self.ctx.max_rows)

    def _ExploreJoin(self, node: ExploreJoin, seed):
        left = self.eval(node.left, seed)
        if left.n == 0:
            return Bindings.empty(set(left.cols) | pattern_vars(node.right))
        if not seed_ok(left, node.bgp.triples):
            return self._join_eval(left, node.right, seed)
        # explore from the left rows (no intermediate join)
        res = self._run_bgp(node, node.bgp.triples, left)
        if node.expr is not None and res.n:
            return res.mask(self.filter_rows(node.expr, res))
        return res

    def _PathJoin(self, node: PathJoin, seed):
        left = self.eval(node.left, seed)
        if left.n == 0:
            return Bindings.empty(set(left.cols) | pattern_vars(node.right))
        # the path starts from the left rows' values when they bind an end
        return self._PathPattern(node.right, left)

    def _ExploreLeftJoin(self, node: ExploreLeftJoin, seed):
        left = self.eval(node.left, seed)
        if left.n == 0:
            return Bindings.empty(set(left.cols) | pattern_vars(node.right))
        if seed_ok(left, node.right.triples):
            tagged = left.with_col("#lrow", np.arange(left.n, dtype=np.int64))
            res = self._run_bgp(node, node.right.triples, tagged)
            if node.expr is not None and res.n:
                keep = self.filter_mask(node.expr, res)
                res = res.mask(keep)
            li = res.cols["#lrow"] if res.n else np.zeros(0, np.int64)
            res = res.drop(("#lrow",))
            hit = np.zeros(left.n, dtype=bool)
            hit[li] = True
            if hit.all():
                return res
            rest = left.take(np.flatnonzero(~hit))
            allcols = list(res.cols) if res.cols else list(left.cols)
            out = concat([res if res.n else Bindings.empty(allcols), rest])
            origin = np.concatenate([li, np.flatnonzero(~hit)])
            return out.take(np.argsort(origin, kind="stable"))
        return self._left_join_eval(node, left, seed)

    def _LeftJoin(self, node: A.LeftJoin, seed):
        left = self.eval(node.left, seed)
        if left.n == 0:
            return Bindings.empty(set(left.cols) | pattern_vars(node.right))
        return self._left_join_eval(node, left, seed)

    def _left_join_eval(self, node, left: Bindings, seed) -> Bindings:
        ctx = self.ctx
        with holding(table_bytes(left.n, len(left.cols))):
            right = self.eval(node.right, seed)
        li, ri = join_pairs(left, right, ctx.max_rows, len(left.cols) + len(right.cols))
        if node.expr is not None and len(li):
            merged = merge(left, right, li, ri)
            keep = self.filter_mask(node.expr, merged)
            li, ri = li[keep], ri[keep]
        out = left_outer(left, right, li, ri)
        if not out.n and not out.cols:
            return Bindings.empty(set(left.cols) | set(right.cols))
        for v in right.cols:
            if v not in out.cols:
                out = out.with_col(v, np.full(out.n, UNBOUND, dtype=np.int64))
        return out

    def _Union(self, node: A.Union, seed):
        left = self.eval(node.left, seed)
        with holding(table_bytes(left.n, len(left.cols))):
            right = self.eval(node.right, seed)
        out = concat([left, right])
        if out.n == 0:
            return Bindings.empty(set(left.cols) | set(right.cols))
        return out

    def _Minus(self, node: A.Minus, seed):
        left = self.eval(node.left, seed)
        if left.n == 0:
            return left
        with holding(table_bytes(left.n, len(left.cols))):
            right = self.eval(node.right, seed)
        charge_rows(left.n + right.n, 4, "MINUS")
        return minus(left, right)

    def _Filter(self, node: A.Filter, seed):
        if seed is None:  # ?v = constant / IN / sameTerm: the input evaluated from those ids
            got = const_filter.seeded(self, node)
            if got is not None:
                return got
        inp = node.input
        if (seed is None and isinstance(inp, A.Group) and type(self)._group is Evaluator._group
                and type(self)._Group is Evaluator._Group):  # a HAVING: before the aggregates it does not read
            got = having_first.run(self, node)
            if got is not None:
                return got
        if isinstance(inp, A.BGP) and inp.triples:
            names = bgp_filter_vars(node.expr, bgp_vars(inp.triples))
            if names is not None:
                # Filter(e, BGP) with e over the BGP's (always bound) variables: applied by
                # the BGP's steps as soon as they bind them (engine/plan/filters.py). A
                # subclass answering the BGP itself leaves the request untaken.
                expr = node.expr
                self._early = (inp, ((names, lambda b: self.filter_rows(expr, b)),))
                try:
                    res = self.eval(inp, seed)
                    taken = self._early is None
                finally:
                    self._early = None
                if taken:
                    return res
                if res.n == 0:
                    return res
                return res.mask(self.filter_rows(node.expr, res))
        res = self.eval(inp, seed)
        if res.n == 0:
            return res
        return res.mask(self.filter_rows(node.expr, res))

    def _Extend(self, node: A.Extend, seed):
        res = self.eval(node.input, seed)
        name = node.var.name
        if res.n == 0:
            return res if name in res.cols else res.with_col(name, np.zeros(0, np.int64))
        vals = self.expr_values(node.expr, res)
        old = res.cols.get(name)
        if old is not None:
            ok = (old == UNBOUND) | (vals == UNBOUND) | (old == vals)
            vals = np.where(vals == UNBOUND, old, vals)
            res = res.with_col(name, vals)
            return res.mask(ok)
        return res.with_col(name, vals)

    def _Graph(self, node: A.Graph, seed):
        ctx = self.ctx
        saved = self.graph, self.graph_key
        try:
            if isinstance(node.name, A.Const):
                gid = ctx.lookup(node.name.key)
                g = self.dataset.named.get(gid) if gid >= 0 else None
                if g is None:
                    return Bindings.empty(set(seed.cols if seed else ()) | pattern_vars(node.input))
                self.graph, self.graph_key = g, ("g", gid)
                return self.eval(node.input, seed)
            name = node.name.name
            gids = list(self.dataset.named)
            ch = self._chunk
            if ch is not None and ch.graph is not None and ch.graph[0] == id(node):
                gids = [ch.graph[1]]  # (limit_chunks: this piece's named graph)
            if seed is not None and name in seed.cols:
                present = set(unique(seed.cols[name]).tolist())
                if UNBOUND not in present:
                    gids = [g for g in gids if g in present]
            parts = []
            for gid in gids:
                self.graph, self.graph_key = self.dataset.named[gid], ("g", gid)
                sub_seed = seed
                if seed is not None and name in seed.cols:
                    c = seed.cols[name]
                    sub_seed = seed.mask((c == gid) | (c == UNBOUND))
                    if sub_seed.n == 0:
                        continue
                r = self.eval(node.input, sub_seed)
                if r.n == 0:
                    continue
                c = r.cols.get(name)
                if c is not None:
                    r = r.mask((c == gid) | (c == UNBOUND))
                r = r.with_col(name, np.full(r.n, gid, dtype=np.int64))
                parts.append(r)
                ctx.check_rows(sum(p.n for p in parts))
            out = concat(parts)
            if out.n == 0:
                return Bindings.empty(set(seed.cols if seed else ()) | pattern_vars(node.input) | {name})
            return out
        finally:
            self.graph, self.graph_key = saved

    # ---- solution modifiers and subqueries (evaluated without the seed)
    def _Group(self, node: A.Group, seed):
        return self._unseeded(node, seed, self._group)

    def _group(self, node: A.Group, res: Bindings | None = None) -> Bindings:
        ctx = self.ctx
        res = self.eval(node.input) if res is None else res  # (engine/exec/having_first.py: read already)
        # group keys, codes and per-aggregate argument columns next to the input
        ctx.charge_rows(res.n, len(res.cols) + len(node.by) + 4 + 2 * len(node.aggregates))
        key_cols = []
        out_cols: dict[str, np.ndarray] = {}
        for expr, var in node.by:
            if isinstance(expr, A.Var):
                vals = res.col(expr.name)
            else:
                vals = self.expr_values(expr, res) if res.n else np.zeros(0, np.int64)
            key_cols.append(vals)
            out_cols[var.name] = vals
        if not node.by:
            groups = np.zeros(res.n, dtype=np.int64)
            n_groups = 1
            first = np.zeros(1, dtype=np.int64)
        else:
            if res.n == 0:
                return Bindings.empty([v.name for _, v in node.by] + [v.name for v, _ in node.aggregates])
            if res.n <= _rowwise.SMALL_ROWS:
                groups, n_groups, first = _small_groups(key_cols)
            else:
                key = row_keys(key_cols)
                groups, n_groups = factorize(key)
                first = np.full(n_groups, res.n, dtype=np.int64)
                np.minimum.at(first, groups, np.arange(res.n, dtype=np.int64))
        cols = {name: c[first] for name, c in out_cols.items()} if node.by else {}
        aggmod = _aggregates()
        for var, agg in node.aggregates:
            ctx.check_budget()
            if agg.arg is None:
                arg = None
                if agg.distinct:  # COUNT(DISTINCT *): one code per distinct solution
                    names = [v for v in res.cols if not v.startswith("#")]
                    arg = row_keys([res.cols[v] for v in names]) if names else np.zeros(res.n, np.int64)
                    if names and len(names) == 1:
                        arg = factorize(arg)[0]
            else:
                won = self._min_max_strings(agg, res, groups, n_groups)
                if won is not None:
                    cols[var.name] = won
                    continue
                arg = self.expr_values(agg.arg, res) if res.n else np.zeros(0, np.int64)
            cols[var.name] = np.asarray(aggmod.aggregate(agg, arg, groups, n_groups, ctx), dtype=np.int64)
        if not cols:
            return Bindings({}, n_groups)
        return Bindings(cols, n_groups)

    def _min_max_strings(self, agg, res: Bindings, groups: np.ndarray, n_groups: int) -> np.ndarray | None:
        """MIN / MAX of a string function (``MAX(STR(?x))``) when every value is a simple
        literal: ranked by their lexical forms column-wise (UTF-8 byte order is code
        point order, SPARQL's order of simple literals) and only each group's winner
        interned, instead of a term per value first. None: the general path decides."""
        from engine.exec import strings as S  # noqa: PLC0415

        name = agg.name.upper()
        arg = agg.arg
        if (name not in ("MIN", "MAX", "GROUP_CONCAT") or res.n < 64 or not isinstance(arg, A.Call)
                or arg.op not in S.LEX_OPS):
            return None
        fn = _functions()
        lx = S.lex_of(fn._Evaluator(res.cols, res.n, self.ctx), arg)
        if lx is not None and name == "GROUP_CONCAT":  # the values' texts joined: no term per value
            sep = " " if agg.separator is None else agg.separator
            return _aggregates().group_concat_lex(sep, lx, groups, n_groups, agg.distinct, self.ctx)
        if lx is None or (lx.tag is not None and not pc.all(pc.equal(lx.tag, "")).as_py()):
            return None
        out = np.full(n_groups, UNBOUND, dtype=np.int64)
        ok = np.flatnonzero(lx.inv >= 0)
        # a group holding an error has no MIN or MAX (aggregates.py)
        erred = (np.bincount(groups[lx.inv < 0], minlength=n_groups)[:n_groups] > 0
                 if len(ok) < len(lx.inv) else None)
        if len(ok) == 0 or len(lx.lex) == 0:
            return out
        order = np.asarray(pc.sort_indices(lx.lex).to_numpy(zero_copy_only=False), dtype=np.int64)
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order), dtype=np.int64)
        r, g = rank[lx.inv[ok]], groups[ok]
        if name == "MAX":
            best = np.full(n_groups, -1, dtype=np.int64)
            np.maximum.at(best, g, r)
        else:
            best = np.full(n_groups, len(order), dtype=np.int64)
            np.minimum.at(best, g, r)
        has = np.flatnonzero((best >= 0) & (best < len(order)))
        if len(has):
            win = order[best[has]]
            out[has] = S.intern_lex(self.ctx, lx.lex.take(pa.array(win)), None)
        if erred is not None:
            out[erred] = UNBOUND
        return out

    def _OrderBy(self, node: A.OrderBy, seed):
        """ORDER BY; under an OFFSET/LIMIT (see _slice) only the first OFFSET +
        LIMIT rows, chosen without ordering the others (functions.order_top)."""
        top = self._tops.pop(id(node), None) if self._tops else None
        res = self.eval(node.input, seed)
        if res.n <= 1:
            return res
        self.ctx.charge_rows(res.n, len(res.cols) + 2 * len(node.conditions) + 4)
        first = node.conditions[0].expr
        if isinstance(first, A.Call) and first.op == "RAND" and not first.args:
            # ORDER BY RAND() ...: a fresh double per row puts the rows in a uniformly random
            # order (two rows tie with probability ~n^2 / 2^54, so later keys decide nothing):
            # a random permutation, no term per row (72k rows: 0.35 s so, pyoxigraph 0.28 s)
            perm = np.random.permutation(res.n)
            return res.take(perm[:top] if top is not None else perm)
        keys = [(_column_key(c.expr, res, self.ctx), c.ascending) for c in node.conditions]
        keys = [(self.expr_values(c.expr, res) if k is None else k, a)
                for c, (k, a) in zip(node.conditions, keys, strict=True)]
        self.ctx.check_budget()
        perm = _small_order(keys, self.ctx)  # a few rows (a selective query's answer): plain Python
        if perm is not None:
            return res.take(perm[:top] if top is not None else perm)
        if top is not None:
            perm = _functions().order_top(keys, top, self.ctx)
        else:
            perm = _functions().order_permutation(keys, self.ctx)
        return res.take(np.asarray(perm, dtype=np.int64))

    def _Project(self, node: A.Project, seed):
        def f(n):
            res = self.eval(n.input)
            return res.project([v.name for v in n.vars])

        return self._unseeded(node, seed, f)

    def _Distinct(self, node: A.Distinct, seed):
        return self._unseeded(node, seed, lambda n: self.eval(n.input).distinct())

    def _Reduced(self, node: A.Reduced, seed):
        return self._unseeded(node, seed, lambda n: self.eval(n.input).distinct())

    def _Slice(self, node: A.Slice, seed):
        return self._unseeded(node, seed, self._slice)

    def _slice(self, node: A.Slice) -> Bindings:
        """OFFSET/LIMIT; an ORDER BY right below (or below a projection: no
        DISTINCT in between) is told to keep only the OFFSET + LIMIT first rows."""
        order = top_k_order(node)
        if order is None:
            got = limit_chunks.sliced(self, node)
            if got is not None:
                return got
        if order is not None:
            self._tops[id(order)] = node.offset + node.limit
        try:
            return self.eval(node.input).slice(node.offset, node.limit)
        finally:
            if order is not None:
                self._tops.pop(id(order), None)

    # ---- expressions
    def filter_rows(self, expr, res: Bindings) -> np.ndarray:
        """:meth:`filter_mask`, once per distinct tuple of the expression's variables when
        the rows hold far fewer of them than rows (a deterministic expression is a function
        of those values: engine/plan/filters.py): runs of equal tuples in row order (one
        comparison per column), else the distinct tuples when a sample of the rows repeats."""
        n = res.n
        if n < DISTINCT_FILTER_ROWS:
            return self.filter_mask(expr, res)
        names = deterministic_vars(expr)
        if names is None:
            return self.filter_mask(expr, res)
        cols = [(v, res.cols[v]) for v in names if v in res.cols]   # (absent: unbound everywhere)
        if not cols:
            m = self.filter_mask(expr, Bindings({}, 1))
            FILTER_ONCE[0] += 1
            return np.full(n, bool(m[0]), dtype=bool)
        # runs of equal tuples in row order; first counted on a prefix (rows of all-distinct
        # values pay one short pass)
        head = DISTINCT_FILTER_ROWS
        ch = cols[0][1][1:head] != cols[0][1][:head - 1]
        for _, c in cols[1:]:
            ch |= c[1:head] != c[:head - 1]
        if (1 + int(np.count_nonzero(ch))) * DISTINCT_FILTER_SHARE <= head:
            change = np.zeros(n, dtype=bool)
            change[0] = True
            for _, c in cols:
                change[1:] |= c[1:] != c[:-1]
            starts = np.flatnonzero(change)
            k = len(starts)
            if k * DISTINCT_FILTER_SHARE <= n:
                sub = Bindings({v: c[starts] for v, c in cols}, k)
                m = np.asarray(self.filter_mask(expr, sub), dtype=bool)
                FILTER_ONCE[0] += 1
                return np.repeat(m, np.diff(np.append(starts, n)))
        # not in runs: a strided sample says whether the tuples repeat at all
        step = n // 64
        sample = set(zip(*(c[::step][:64].tolist() for _, c in cols), strict=True))
        if len(sample) * 4 > 64:
            return self.filter_mask(expr, res)
        key = row_keys([c for _, c in cols])
        uniq, inv = distinct_inverse(key)
        k = len(uniq)
        inv = inv.reshape(-1)
        if k * DISTINCT_FILTER_SHARE > n:
            return self.filter_mask(expr, res)
        rep = np.empty(k, dtype=np.int64)
        rep[inv] = np.arange(n, dtype=np.int64)   # (any row of each tuple)
        sub = Bindings({v: c[rep] for v, c in cols}, k)
        m = np.asarray(self.filter_mask(expr, sub), dtype=bool)
        FILTER_ONCE[0] += 1
        return m[inv]

    def filter_mask(self, expr, res: Bindings) -> np.ndarray:
        if res.n == 0:
            return np.zeros(0, dtype=bool)
        m = _functions().eval_filter(expr, res.cols, res.n, self.ctx)
        return np.asarray(m, dtype=bool)

    def expr_values(self, expr, res: Bindings) -> np.ndarray:
        if isinstance(expr, A.Var):
            return res.col(expr.name)
        return np.asarray(_functions().eval_expr(expr, res.cols, res.n, self.ctx), dtype=np.int64)

    # ---- EXISTS
    def exists(self, pattern, columns: dict[str, np.ndarray], n: int) -> np.ndarray:
        if n == 0:
            return np.zeros(0, dtype=bool)
        pv = pattern_vars(pattern)
        use = [v for v in columns if v in pv and not v.startswith("#")]
        if not use:
            r = self.eval(pattern, None)
            return np.full(n, r.n > 0, dtype=bool)
        cols = [np.asarray(columns[v], dtype=np.int64) for v in use]
        key = row_keys(cols)
        uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
        seed = Bindings({v: c[first] for v, c in zip(use, cols, strict=True)}, len(first))
        # unbound values are no substitution: drop those columns per row group
        seed = seed.with_col(ROW, np.arange(seed.n, dtype=np.int64))
        r = self.eval(pattern, seed)
        hit = np.zeros(seed.n, dtype=bool)
        if r.n:
            hit[r.cols[ROW]] = True
        return hit[inv.reshape(-1)]


def _may_be_zero(path) -> bool:
    """Whether the path can match with length zero."""
    if isinstance(path, (A.PathZeroOrMore, A.PathZeroOrOne)):
        return True
    if isinstance(path, A.PathSeq):
        return _may_be_zero(path.left) and _may_be_zero(path.right)
    if isinstance(path, A.PathAlt):
        return _may_be_zero(path.left) or _may_be_zero(path.right)
    if isinstance(path, A.PathInv):
        return _may_be_zero(path.path)
    return False


def _set_path(path) -> bool:
    return isinstance(path, (A.PathZeroOrMore, A.PathOneOrMore, A.PathZeroOrOne))


# ---------------------------------------------------------------- query forms


def evaluate_query(query: A.Query, ctx: QueryContext, dataset: DatasetView,
                   evaluator: Evaluator | None = None, plan: QueryPlan | None = None) -> QueryResult:
    """Evaluate a parsed query by its plan (``plan``, else the plan memoized for
    the query object). ``evaluator`` may be a subclass answering some nodes of
    ``query.pattern`` itself (the incremental core of a continuous query): it
    identifies them as the parser built them, so it walks the parsed tree (the
    rewrites only change speed, never answers). The query's memory budget is
    the running one meanwhile (see :mod:`engine.exec.context`)."""
    if plan is not None:
        root = plan.root
    elif evaluator is not None:
        root = query.pattern
    else:
        root = plan_query(query).root
    token = enter_budget(ctx.memory, ctx.deadline)
    try:
        ev = evaluator if evaluator is not None else Evaluator(ctx, dataset)
        return _evaluate_query(query, ctx, ev, root)
    finally:
        leave_budget(token)
        if evaluator is None:
            # ctx <-> evaluator is a cycle: without this the result's term overlay
            # (ctx) lives until the cyclic GC runs, after the heap was trimmed
            ctx.evaluator = None


def _evaluate_query(query: A.Query, ctx: QueryContext, ev: Evaluator, root) -> QueryResult:
    form = query.form
    if form == "ASK":
        res = ev.eval(root)
        return QueryResult(form="ASK", terms=ctx, boolean=res.n > 0)
    if form == "SELECT":
        res = ev.eval(root)
        names = [v.name for v in query.vars]
        cols = [res.col(v) for v in names]
        return QueryResult(form="SELECT", terms=ctx, vars=names, columns=cols, ordered=_has_order(query.pattern),
                           n_rows=res.n)
    if form == "CONSTRUCT":
        res = ev.eval(root)
        return QueryResult(form="CONSTRUCT", terms=ctx, triples=construct(query.template, res, ctx))
    if form == "DESCRIBE":
        got = describe(query, ev, root)
        return got if isinstance(got, QueryResult) else QueryResult(form="DESCRIBE", terms=ctx, triples=got)
    raise QueryEvaluationError(f"unknown query form {form}")


def _has_order(node) -> bool:
    while isinstance(node, (A.Slice, A.Distinct, A.Reduced, A.Project)):
        node = node.input
    return isinstance(node, A.OrderBy)


def construct(template, res: Bindings, ctx: QueryContext) -> np.ndarray:
    n = res.n
    parts = []
    if n == 0:
        return np.zeros((0, 3), dtype=np.int64)
    bnodes: dict[str, np.ndarray] = {}
    # every template triple of every solution, then the set of them
    ctx.charge_rows(n * len(template), 3 * 2 + 3)
    for t in template:
        ctx.check_budget()
        cols = []
        for term in (t.s, t.p, t.o):
            if isinstance(term, A.Var):
                cols.append(res.col(term.name))
            elif term.key.startswith("_:"):
                b = bnodes.get(term.key)
                if b is None:
                    b = bnodes[term.key] = ctx.fresh_bnodes(n, term.key[2:])
                cols.append(b)
            else:
                cols.append(np.full(n, ctx.term_id(term.key), dtype=np.int64))
        s, p, o = cols
        ok = (s != UNBOUND) & (p != UNBOUND) & (o != UNBOUND)
        ks = ctx.kinds(np.where(ok, s, 0))
        kp = ctx.kinds(np.where(ok, p, 0))
        ok &= ((ks == 0) | (ks == 1)) & (kp == 0)
        if ok.any():
            parts.append(np.stack([s[ok], p[ok], o[ok]], axis=1))
    if not parts:
        return np.zeros((0, 3), dtype=np.int64)
    return _unique_rows(np.concatenate(parts))


def _unique_rows(m: np.ndarray) -> np.ndarray:
    if len(m) <= 1:
        return m
    key = row_keys([m[:, 0], m[:, 1], m[:, 2]])
    _, first = np.unique(key, return_index=True)
    first.sort()
    return m[first]


def describe(query: A.Query, ev: Evaluator, root=None) -> np.ndarray | QueryResult:
    """DESCRIBE: for each resource its outgoing triples in the default graph,
    closed over blank-node objects (a concise bounded description without
    reification). Only the default graph of the dataset is described. Order: by
    round (the resources, then the blank nodes they reach...), subject, predicate,
    object. A few resources of the WHERE's solutions over a graph with in-process
    lookups are described tuple at a time (:func:`engine.plan.point.describe_small`:
    its result, same triples, same order)."""
    ctx = ev.ctx
    ids = []
    res = None
    if any(isinstance(t, A.Var) for t in query.describe) or not query.describe:
        res = ev.eval(query.pattern if root is None else root)
    for t in query.describe:
        if isinstance(t, A.Var):
            c = res.col(t.name)
            ids.append(c[c != UNBOUND])
        else:
            i = ctx.lookup(t.key)
            if i >= 0:
                ids.append(np.array([i], dtype=np.int64))
    if not query.describe and res is not None:
        for v in query.vars:
            c = res.col(v.name)
            ids.append(c[c != UNBOUND])
    if not ids:
        return np.zeros((0, 3), dtype=np.int64)
    frontier = unique(np.concatenate(ids))
    frontier = frontier[frontier < LOCAL_BASE]
    g = ev.dataset.default
    if res is not None and len(frontier) <= DESCRIBE_RESOURCES:
        # a few resources from the WHERE's solutions: tuple at a time (DESCRIBE of constants
        # only came here when the caller's describe_small did not answer it)
        got = describe_small(frontier.tolist(), g, ctx, ctx.check_budget)
        if got is not None:
            return got
    seen = set()
    parts = []
    held = 0
    while len(frontier):
        ctx.check_budget()
        seen.update(frontier.tolist())
        nxt = []
        got = []
        for pid in candidate_predicates(g, {"#d": frontier}, len(frontier), ("v", "#d"), ("v", "#o")):
            ctx.check_budget()
            rows, nbrs = g.expand(pid, 0, frontier)
            if len(rows):
                nbrs = np.asarray(nbrs, dtype=np.int64)
                held += len(rows)
                charge_rows(held, 3 + 3, "DESCRIBE")
                got.append(np.stack([frontier[rows], np.full(len(rows), pid, np.int64), nbrs], axis=1))
                kinds = ctx.kinds(nbrs)
                nxt.append(nbrs[kinds == 1])
        if got:
            # a round's triples by subject (then predicate, object as read): each resource's
            # description in one run, as the tuple-at-a-time DESCRIBE gives them
            r = np.concatenate(got) if len(got) > 1 else got[0]
            parts.append(r[np.argsort(r[:, 0], kind="stable")] if len(frontier) > 1 else r)
        if not nxt:
            break
        cand = unique(np.concatenate(nxt))
        frontier = np.array([x for x in cand.tolist() if x not in seen], dtype=np.int64)
    if not parts:
        return np.zeros((0, 3), dtype=np.int64)
    return _unique_rows(np.concatenate(parts))


# ---------------------------------------------------------------- fast path


def compile_fast(fast, graph, lookup):
    """(program, output slots) of a plan's fast path for one snapshot's default
    graph, or None (see :mod:`engine.plan.planner`)."""
    return with_output_slots(compile_small(fast.triples, graph, lookup), fast.names)


class _GivenBGP(Evaluator):
    """The ordinary operators over a BGP whose solutions are already known (the
    fast program's hand-over): the modifiers above it run the general code."""

    def __init__(self, ctx, bgp, res: Bindings):
        # no super().__init__: ctx is the snapshot's shared term table, left untouched
        self.ctx = ctx
        self._bgp = bgp
        self._res = res

    def eval(self, node, seed=None):
        if node is self._bgp:
            return self._res
        return super().eval(node, seed)


def run_fast(plan: QueryPlan, compiled, terms, graph, max_rows: int, check) -> QueryResult:
    """Run a plan's fast path. While the solutions stay small the program runs
    tuple at a time and the projection, DISTINCT and slice are applied to the
    tuples (building numpy tables for a few rows would cost more than the
    query); once a step would grow past SMALL_ROWS the rest of the BGP runs
    vectorized and the operators above it are the general ones. Answers and
    their order are those of :func:`evaluate_query`."""
    got = run_fast_lists(plan, compiled, terms, graph, max_rows, check)
    if isinstance(got, QueryResult):
        return got
    pcols, n = got
    return QueryResult(form="SELECT", terms=terms, vars=list(plan.fast.names),
                       columns=[np.array(c, dtype=np.int64) for c in pcols], n_rows=n)


def run_fast_lists(plan: QueryPlan, compiled, terms, graph, max_rows: int, check):
    """:func:`run_fast` of a SELECT without ORDER BY whose program ends tuple at a
    time, its answer left as Python sequences: ``(columns, rows)`` (one sequence of
    ids per projected variable, UNBOUND = -1; the same answer and order). For a few
    rows, building numpy columns (and turning them back into lists for a small JSON
    answer) costs more than the rows themselves. Any other case (ASK, the vectorized
    hand-over) gives run_fast's QueryResult."""
    fast = plan.fast
    names = fast.names
    prog, out = compiled
    rows, k = prog.run([()], min(max_rows, SMALL_ROWS))
    if k < len(prog.steps) or names is None:
        if k < len(prog.steps):
            res = prog.finish(rows, k, graph, max_rows, check)
            return _evaluate_query(plan.query, terms, _GivenBGP(terms, fast.bgp, res), plan.root)
        return QueryResult(form="ASK", terms=terms, boolean=len(rows) > 0)
    n = len(rows)
    if n == 0:
        return [() for _ in out], 0
    return project_lists(fast, list(zip(*rows, strict=True)) if prog.slots else [], out, n)


def project_lists(fast, tcols: list, out: list, n: int) -> tuple[list, int]:
    """The projected columns of ``n`` tuple-at-a-time solutions (``tcols``: one tuple per slot;
    ``out``: the slot of each selected variable, None when unbound), DISTINCT and
    OFFSET/LIMIT of the fast plan ``fast`` applied, and their count."""
    pcols = [(-1,) * n if i is None else tcols[i] for i in out]
    if fast.distinct and n > 1:
        prows = dict.fromkeys(zip(*pcols, strict=True))
        if len(prows) < n:
            n = len(prows)
            pcols = list(zip(*prows, strict=True))
    if fast.offset or fast.limit is not None:
        end = None if fast.limit is None else fast.offset + fast.limit
        pcols = [c[fast.offset:end] for c in pcols]
        n = len(range(n)[fast.offset:end])
    return pcols, n


# imported at load (last: it imports this module), not on the first ORDER BY: see _aggregates
from engine import small_answers as _small_answers  # noqa: E402
