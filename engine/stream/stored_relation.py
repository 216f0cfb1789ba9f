"""A wide stored relation read by the tuple-at-a-time join through per-value lookups kept
across instants, instead of a per-instant restriction copied into the instant's triples.

Why: a pattern with two variable ends over a stored predicate with thousands of triples
(LSBench's ``?creator foaf:knows ?friend``, CityBench's ``?evtId a ?ob``) cannot be loaded into
an instant's compact graph, so :class:`~engine.stream.continuous._Compact` restricted it at every
instant to the triples whose shared end holds a value of an anchor pattern: ~10 numpy calls per
restricted pattern (70-190 us on CityBench C5 / LSBench L7), then the tuple-at-a-time core
selected, deduplicated and hash-indexed those ~100-800 triples again at every instant (they
change with the window's values, so nothing could be kept). The join only ever probes such a
pattern by a bound value (its anchor binds one end first), so :class:`StoredRelation` answers
those probes from the store's own adjacency (one ``expand`` per value never seen before, ~3 us)
and keeps each value's neighbours for the next instants: a sliding window sees mostly the same
users, sensors and types again. Nothing is copied per instant.

Exactness: the relation is every stored triple of the predicate (a superset of any
restriction, so the same solutions); a window triple the relation also holds is counted once
(:meth:`StoredRelation.fresh`), as the merged default graph is a set. A join step that would need
the whole relation (a product with it) raises :class:`WholeRelation` and the instant goes to the
vectorized path, whose dataset then gets the restricted triples as before.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["LazyMatch", "StoredRelation", "WholeRelation", "shared_relation"]


class WholeRelation(Exception):
    """A join step asked for every pair of a stored relation (a product): not done here."""


_MISS = object()
_NONE: frozenset = frozenset()
_PACK = 1 << 31


class StoredRelation:
    """The stored triples of one predicate over the FROM graphs of one store snapshot, probed
    by value: ``v -> [(other end,), ...]`` per end, filled on first ask and kept (at most
    :attr:`max_cached` neighbours over both ends; past it the caches start again)."""

    max_cached = 1 << 17
    #: relations up to this many triples are also kept whole as sorted arrays (built on first
    #: use: one scan and sort per store snapshot, ~1 ms for 10k triples), for the join's steps on
    #: columns (:mod:`engine.stream.tiny_vec`): a probe or pair test of hundreds of rows is then a
    #: few ``searchsorted`` calls instead of a look-up per distinct value
    max_arrays = 1 << 18
    #: relations up to this many triples get every value's look-up at once, from those arrays
    #: (~0.2 us a triple, once per snapshot: 2 ms for LSBench's 10k ``knows``), instead of one
    #: ``expand`` per value first seen (~5-20 us each on a cold instant: a tumbling window's
    #: twenty new users cost more than the join)
    max_full = 1 << 16

    __slots__ = ("pid", "graphs", "bound", "n", "_nb", "_sets", "_cached", "_fan", "_arrays", "_full", "_lock")

    def __init__(self, pid: int, graphs: list, bound: int | None = None):
        self.pid = int(pid)
        self.graphs = list(graphs)
        # ids from here on were interned after the graphs' snapshot: no stored triple holds them
        # (a stream's new observations, posts ...), answered without a look-up or a cache entry
        self.bound = (1 << 62) if bound is None else int(bound)
        self.n = sum(int(g.stats(self.pid).triples) for g in self.graphs)   # (an upper bound)
        self._nb: tuple[dict, dict] = ({}, {})     # per end (0: by subject, 1: by object)
        self._sets: tuple[dict, dict] = ({}, {})   # per end: v -> set of the other ends (pair tests)
        self._cached = 0
        self._fan: list = [None, None]
        self._arrays: dict = {}
        self._full = [False, False]   # per end: _nb holds every value (a value not in it has none)
        # (shared by the queries reading the graphs, maybe on several threads: completing an end
        # and the cache's clearing are exclusive; a dict is never emptied while it is complete)
        self._lock = threading.Lock()

    def _fill(self, k: int, v: int) -> list | tuple:
        if v >= self.bound or v < 0:
            return ()
        if self._full[k]:
            return self._nb[k].get(v) or ()
        if self._cached > self.max_cached:
            with self._lock:
                for end in (0, 1):
                    if not self._full[end]:   # (a complete end stays: its look-ups read absent as none)
                        self._nb[end].clear()   # (the same dicts: closures handed out keep reading them)
                        self._sets[end].clear()
                self._cached = 0
        got: list = []
        key = np.array([v], dtype=np.int64)
        for g in self.graphs:
            _, nb = g.expand(self.pid, k, key)
            if len(nb):
                got += nb.tolist()
        if len(self.graphs) > 1 and got:
            got = list(dict.fromkeys(got))   # (a triple in two FROM graphs is one triple of their merge)
        out = [(x,) for x in got] if got else ()
        self._nb[k][v] = out
        self._cached += len(got) + 1
        return out

    def _whole(self, k: int) -> bool:
        """Fill end ``k``'s look-ups from the sorted arrays at once (relations up to
        :attr:`max_full` triples); whether they are complete."""
        if self._full[k]:
            return True
        if self.n > self.max_full:
            return False
        arr = self.sorted_by(k)
        if arr is None:
            return False
        keys, others = arr
        nb: dict = {}
        if len(keys):
            cut = (np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist()
            ks = keys[[0] + cut].tolist()
            vals = [(x,) for x in others.tolist()]
            for key, a, b in zip(ks, [0] + cut, cut + [len(vals)], strict=True):
                nb[key] = vals[a:b]
        with self._lock:
            if not self._full[k]:
                # (added to what per-value fills hold -- the same values -- never emptied: the
                # look-ups handed out keep reading this dict)
                self._nb[k].update(nb)
                self._full[k] = True
        return True

    def getter(self, k: int):
        """``v -> the (other end,) tuples of the triples with v at end k`` (falsy if none)."""
        if self._whole(k):
            return self._nb[k].get
        get = self._nb[k].get
        fill = self._fill

        def look(v):
            hit = get(v, _MISS)
            if hit is _MISS:
                hit = fill(k, v)
            return hit
        return look

    def others(self, k: int, v: int) -> set:
        """The set of other ends of the triples with ``v`` at end ``k``."""
        s = self._sets[k].get(v)
        if s is None:
            if v >= self.bound or v < 0:
                return _NONE
            hit = self._nb[k].get(v, _MISS)
            if hit is _MISS:
                hit = self._fill(k, v)
            s = self._sets[k][v] = {x for x, in hit}
        return s

    def pair_tester(self):
        """``(s, o) -> whether (s, pid, o) is stored``."""
        sets = self._sets[0]
        if self._whole(0):   # every subject's set at once
            full = self._arrays.get("sets")
            if full is None:
                full = self._arrays["sets"] = {v: {x for x, in h} for v, h in list(self._nb[0].items())}
            get = full.get
            return lambda a, b: b in get(a, _NONE)
        others = self.others

        def test(a, b):
            s = sets.get(a)
            if s is None:
                s = others(0, a)
            return b in s
        return test

    def tester(self, k: int):
        """``v -> whether some triple has v at end k``."""
        look = self.getter(k)
        return lambda v: bool(look(v))

    def fanout(self, k: int) -> float:
        """Triples per distinct value at end ``k`` (the graphs' statistics)."""
        f = self._fan[k]
        if f is None:
            d = 0
            for g in self.graphs:
                st = g.stats(self.pid)
                d += st.subjects if k == 0 else st.objects
            f = self._fan[k] = self.n / max(1, d)
        return f

    def _scan(self) -> tuple[np.ndarray, np.ndarray] | None:
        got = self._arrays.get("scan", False)
        if got is False:
            got = None
            if self.n <= self.max_arrays:
                ss, os_ = [], []
                for g in self.graphs:
                    s, o = g.scan(self.pid)
                    ss.append(np.asarray(s, dtype=np.int64))
                    os_.append(np.asarray(o, dtype=np.int64))
                s = np.concatenate(ss) if ss else np.zeros(0, dtype=np.int64)
                o = np.concatenate(os_) if os_ else np.zeros(0, dtype=np.int64)
                if len(self.graphs) > 1 and len(s):   # (one triple of the graphs' merge)
                    order = np.lexsort((o, s))
                    s, o = s[order], o[order]
                    keep = np.ones(len(s), dtype=bool)
                    keep[1:] = (s[1:] != s[:-1]) | (o[1:] != o[:-1])
                    s, o = s[keep], o[keep]
                got = (s, o)
            self._arrays["scan"] = got
        return got

    def sorted_by(self, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(keys, other ends)``: every triple sorted by end ``k``; None above :attr:`max_arrays`."""
        got = self._arrays.get(k, False)
        if got is False:
            sc = self._scan()
            if sc is not None:
                a, b = sc if k == 0 else sc[::-1]
                order = np.argsort(a, kind="stable")
                got = (a[order], b[order])
            else:
                got = None
            self._arrays[k] = got
        return got

    def packed(self) -> np.ndarray | None:
        """Every triple's ``s << 32 | o``, sorted (ids below 2^31); None when too large or wider."""
        got = self._arrays.get("packed", False)
        if got is False:
            sc = self._scan()
            got = None
            if sc is not None:
                s, o = sc
                if not len(s) or (int(s.max()) < _PACK and int(o.max()) < _PACK and int(s.min()) >= 0
                                  and int(o.min()) >= 0):
                    got = np.sort((s << 32) | o)
            self._arrays["packed"] = got
        return got

    def fresh(self, pairs: list[tuple]) -> list[tuple]:
        """The window's ``(s, o)`` pairs of this predicate that no stored graph holds (a pair
        with an id past :attr:`bound` cannot be stored: a stream's new observations)."""
        bound = self.bound
        cand = [p for p in pairs if 0 <= p[0] < bound and 0 <= p[1] < bound]
        if not cand:
            return pairs
        packed = self.packed()
        if packed is not None and max(max(p) for p in cand) < _PACK:
            held = set()
            keys = np.array([(x << 32) | y for x, y in cand], dtype=np.int64)
            if len(packed):
                pos = np.minimum(np.searchsorted(packed, keys), len(packed) - 1)
                held = {p for p, h in zip(cand, (packed[pos] == keys).tolist(), strict=True) if h}
            return [p for p in pairs if p not in held] if held else pairs
        s = np.array([p[0] for p in pairs], dtype=np.int64)
        o = np.array([p[1] for p in pairs], dtype=np.int64)
        held = np.zeros(len(pairs), dtype=bool)
        for g in self.graphs:
            held |= np.asarray(g.contains(self.pid, s, o), dtype=bool)
        if not held.any():
            return pairs
        return [p for p, h in zip(pairs, held.tolist(), strict=True) if not h]


_SHARED: dict = {}   # (pid, graphs' ids) -> (snapshot number, graphs, relation)
_SHARED_LOCK = threading.Lock()


def shared_relation(pid: int, graphs: list, bound: int, sn: int) -> StoredRelation:
    """The :class:`StoredRelation` of ``pid`` over ``graphs`` (of store snapshot ``sn``), one for
    every query reading the same graphs: a thousand registered queries of one shape fill and
    keep one set of look-ups and arrays. Only the newest snapshot's relations are kept (an older
    one's graphs are let go); ``bound`` is any dictionary size read after the snapshot (valid for
    every reader of it)."""
    key = (int(pid), tuple(id(g) for g in graphs))
    with _SHARED_LOCK:
        got = _SHARED.get(key)
        if got is not None and got[0] == sn and all(a is b for a, b in zip(got[1], graphs, strict=True)):
            return got[2]
        if any(v[0] != sn for v in _SHARED.values()) or len(_SHARED) >= 256:
            for k in [k for k, v in _SHARED.items() if v[0] != sn or len(_SHARED) >= 256]:
                del _SHARED[k]
        rel = StoredRelation(pid, graphs, bound)
        _SHARED[key] = (sn, tuple(graphs), rel)
        return rel


class LazyMatch:
    """A pattern's matches as :class:`~engine.stream.tiny._Match` offers them to the join, for
    a pattern over a :class:`StoredRelation` plus the instant's own pairs (``inst``, none of
    which the relation holds). Only probes and tests: a product raises :class:`WholeRelation`."""

    lazy = True
    pairs: list = []

    __slots__ = ("rel", "inst", "_iidx", "_iset")

    def __init__(self, rel: StoredRelation, inst: list[tuple]):
        self.rel = rel
        self.inst = inst
        self._iidx: dict = {}
        self._iset = None

    def __len__(self) -> int:
        return self.rel.n + len(self.inst)

    def fanout(self, k: int) -> float:
        return self.rel.fanout(k)

    def getter(self, kb: int):
        look = self.rel.getter(kb)
        if not self.inst:
            return look
        ii = self._iidx.get(kb)
        if ii is None:
            ii = self._iidx[kb] = {}
            kf = 1 - kb
            for p in self.inst:
                ii.setdefault(p[kb], []).append((p[kf],))
        ig = ii.get

        def get(v):
            a, b = look(v), ig(v)
            if b is None:
                return a
            return b if not a else list(a) + b
        return get

    def tester(self, k: int):
        has = self.rel.tester(k)
        if not self.inst:
            return has
        ends = {p[k] for p in self.inst}
        return lambda v: v in ends or has(v)

    def pair_tester(self):
        test = self.rel.pair_tester()
        if not self.inst:
            return test
        if self._iset is None:
            self._iset = set(self.inst)
        iset = self._iset
        return lambda a, b: (a, b) in iset or test(a, b)

    def values(self, k: int):
        raise WholeRelation

    def all_pairs(self):
        raise WholeRelation

    def pairset(self):
        raise WholeRelation
