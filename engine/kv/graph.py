"""GraphIndex: one RDF graph as per-predicate CSR arrays split into shards.

Wukong's key ``[vid | pid | dir]`` -> neighbour list is, per predicate and
direction, a CSR (sorted unique key ids, ``indptr``, sorted ``indices``). The
predicate index ``[0|p|out]`` / ``[0|p|in]`` is the key array itself
(:meth:`GraphIndex.index`), the type index ``[0|t|in]`` is
``expand(rdf_type, IN, [t])``.

:mod:`engine.kv.partition` places vertices on shards (OUT edges with the
subject, IN edges with the object). ``GraphIndex`` implements
:class:`engine.kv.api.GraphReader` and reaches its shards only through the
batched :class:`engine.kv.api.ShardReader` / ``ShardWriter`` calls (plus
``local_lookup`` when every shard is in this process). Immutable:
:meth:`apply` returns a new index that shares every untouched predicate's arrays.
"""

from __future__ import annotations

import contextvars

import numpy as np

from engine.arrays import unique
from engine.kv import lists, partition, vertex_preds
from engine.kv.api import IN, OUT, PredicateStats
from engine.kv.merged import BUDGET_FLOOR, BUDGET_SHARE, MergedCache
from engine.kv.shard import Shard, has_neighbour

__all__ = ["OUT", "IN", "GraphIndex", "PredicateStats", "empty_graph"]

_EMPTY64 = np.zeros(0, dtype=np.int64)
# expand/contains inputs up to this many rows go vertex by vertex (local_lookup)
# instead of the vectorized path, whose fixed cost is ~12 us (expand) / ~30 us
# (contains) per shard touched; per vertex costs ~0.7 us (dense keys, span table)
# to ~2 us (binary search). Measured crossovers on a 1M-triple graph:
_SMALL_EXPAND = 12  # one shard
_SMALL_CONTAINS = 20  # one shard
_SMALL_SHARDED = 80  # several shards, expand and contains
# several in-process shards: batches above this many rows read the merged
# adjacency (engine/kv/merged.py: ~10 us + ~0.03 us a row, against ~0.7-2 us a
# row vertex by vertex and ~15 us per shard through the shards)
_SMALL_MERGED = 6

_NO_STATS = PredicateStats(0, 0, 0)
_NO_LOOKUP = object()


class GraphIndex:
    """Immutable index of one graph (see module docstring)."""

    #: the :class:`engine.cluster.coordinator.ClusterStore` whose workers hold the
    #: shards (fork-join steps go to them), None in a single process
    cluster = None
    #: an executor for per-shard reads that wait on another process (a remote
    #: transport): the owners are asked at once, one round trip instead of one per shard
    remote_reads = None

    def __init__(self, shards: list[Shard], stats: dict[int, PredicateStats] | None = None,
                 owned: frozenset[int] | None = None):
        self.shards = shards
        self.n_shards = len(shards)
        #: the shards this process holds (a cluster worker's partitions); None = all.
        #: :meth:`apply` leaves the others empty: their rows belong to other workers
        self.owned = owned
        if stats is None:
            pids = set()
            for sh in shards:
                pids.update(sh.pids())
            stats = self._stats_of(shards, pids)
        self._stats = stats
        self.n_triples = int(sum(st.triples for st in stats.values()))
        self._preds = np.array(sorted(stats), dtype=np.int64)
        self._cache: dict = {}
        self._merged: MergedCache | None = None

    @staticmethod
    def _stats_of(shards, pids) -> dict[int, PredicateStats]:
        stats = {}
        for pid in pids:
            t = su = ob = 0
            for sh in shards:
                a, b, c = sh.degree_stats(pid)
                t, su, ob = t + a, su + b, ob + c
            if t or ob:  # a cluster worker may hold only IN edges of a predicate
                stats[pid] = PredicateStats(t, su, ob)
        return stats

    # ------------------------------------------------------------ GraphReader
    def __len__(self) -> int:
        return self.n_triples

    def predicates(self) -> np.ndarray:
        return self._preds

    def stats(self, pid: int) -> PredicateStats:
        return self._stats.get(int(pid), _NO_STATS)

    def local_lookup(self, pid: int, direction: int):
        """``v -> sorted neighbours`` over every shard (:func:`partition.router` of the
        shards' own functions), None if a shard is not in-process; cached per index."""
        key = (pid, direction)
        f = self._cache.get(key)
        if f is None:
            fs = [sh.local_lookup(pid, direction) for sh in self.shards]
            f = _NO_LOOKUP if any(x is None for x in fs) else partition.router(fs)
            self._cache[key] = f
        return None if f is _NO_LOOKUP else f

    def local_lists(self, pid: int, direction: int):
        """``(nbrs, has)`` (:func:`engine.kv.lists.list_lookups`: ``v -> sorted neighbours``
        as a list of Python ints, ``(v, o) -> o among them``) over every shard, one
        function each with the owner's table picked inside; None when a shard is not
        in-process (as :meth:`local_lookup`). Cached per index (a snapshot's own)."""
        key = (pid, direction, "lists")
        f = self._cache.get(key)
        if f is None:
            if self.local_lookup(pid, direction) is None:
                f = _NO_LOOKUP
            else:
                shards = self.shards
                if all(type(sh) is Shard for sh in shards):
                    f = lists.list_lookups([sh.local_csr(pid, direction) for sh in shards],
                                           partition.stride(shards[0].n_shards))
                else:
                    f = None
                if f is None:  # (arrays that do not view as ints, other in-process shards)
                    f = lists.wrap(self.local_lookup(pid, direction))
            self._cache[key] = f
        return None if f is _NO_LOOKUP else f

    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each ``vids[i]`` its neighbours: ``(rows, nbrs)`` with ``rows[k] = i``,
        grouped by row in input order, neighbours sorted within a row."""
        vids = np.asarray(vids, dtype=np.int64)
        pid = int(pid)
        n = len(vids)
        if n == 0 or pid not in self._stats:
            return _EMPTY64, _EMPTY64
        shards = self.shards
        n_sh = self.n_shards
        if n_sh > 1 and n > _SMALL_MERGED:
            m = self.merged(pid, direction)
            if m is not None:
                return m.expand(vids, 1)
        if n <= (_SMALL_EXPAND if n_sh == 1 else _SMALL_SHARDED):
            # vertex by vertex: scalar lookups beat a dozen numpy calls per shard
            f = self.local_lookup(pid, direction)
            if f is not None:
                if n == 1:
                    nb = f(int(vids[0]))
                    return np.zeros(len(nb), dtype=np.int64), nb.astype(np.int64)
                parts = list(map(f, vids.tolist()))
                cnt = [len(p) for p in parts]
                if not any(cnt):
                    return _EMPTY64, _EMPTY64
                return np.arange(n, dtype=np.int64).repeat(cnt), np.concatenate(parts, dtype=np.int64)
        k, sels = partition.split_or_single(vids, n_sh)
        if sels is None:  # all input on one shard
            return shards[k].expand(pid, direction, vids)
        res = []
        asked = [(sh, sel) for sh, sel in zip(shards, sels, strict=True) if sel is not None]
        if self.remote_reads is not None and len(asked) > 1:
            answers = self._remote_map(lambda a: a[0].expand(pid, direction, vids[a[1]]), asked)
        else:
            answers = [sh.expand(pid, direction, vids[sel]) for sh, sel in asked]
        for (_, sel), (r, nb) in zip(asked, answers, strict=True):
            if len(r):
                res.append((sel, r, nb))
        if not res:
            return _EMPTY64, _EMPTY64
        if len(res) == 1:
            sel, r, nb = res[0]
            return sel[r], nb
        return partition.merge_groups(n, res)

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        s = np.asarray(s, dtype=np.int64)
        o = np.asarray(o, dtype=np.int64)
        pid = int(pid)
        n = len(s)
        if n == 0 or pid not in self._stats:
            return np.zeros(n, dtype=bool)
        shards = self.shards
        if self.n_shards > 1 and n > _SMALL_MERGED:
            m = self.merged(pid, OUT)
            if m is not None:
                return m.contains(s, o, 1)
        if n <= (_SMALL_CONTAINS if self.n_shards == 1 else _SMALL_SHARDED):
            f = self.local_lookup(pid, OUT)
            if f is not None:
                return np.array([has_neighbour(f(a), b) for a, b in zip(s.tolist(), o.tolist(), strict=True)],
                                dtype=bool)
        k, sels = partition.split_or_single(s, self.n_shards)
        if sels is None:
            return shards[k].contains(pid, s, o)
        res = np.zeros(n, dtype=bool)
        asked = [(sh, sel) for sh, sel in zip(shards, sels, strict=True) if sel is not None]
        if self.remote_reads is not None and len(asked) > 1:
            answers = self._remote_map(lambda a: a[0].contains(pid, s[a[1]], o[a[1]]), asked)
        else:
            answers = [sh.contains(pid, s[sel], o[sel]) for sh, sel in asked]
        for (_, sel), hit in zip(asked, answers, strict=True):
            res[sel] = hit
        return res

    def merged(self, pid: int, direction: int):
        """The :class:`~engine.kv.merged.MergedAdjacency` of ``pid`` in ``direction``
        over all shards, when every shard is in this process and building it pays
        (:class:`~engine.kv.merged.MergedCache`); else None."""
        mc = self._merged
        if mc is None:
            if self.n_shards < 2 or self.remote_reads is not None or self.cluster is not None:
                return None
            mc = self._merged = MergedCache(BUDGET_FLOOR + int(BUDGET_SHARE * self._shard_bytes()))
        return mc.get((pid, direction), lambda: self._shard_csrs(pid, direction))

    def _shard_csrs(self, pid: int, direction: int):
        """Every shard's CSR of ``pid`` in ``direction``; None if a shard is not a local :class:`Shard`."""
        if not all(type(sh) is Shard for sh in self.shards):
            return None
        return [sh._csr(pid, direction) for sh in self.shards]

    def _remote_map(self, fn, items: list) -> list:
        """``fn`` over ``items`` at once on :attr:`remote_reads`, each call in a copy of the
        caller's context (the running query's deadline and budget go along)."""
        ctxs = [contextvars.copy_context() for _ in items]
        return list(self.remote_reads.map(lambda ci: ci[0].run(fn, ci[1]), zip(ctxs, items, strict=True)))

    def index(self, pid: int, direction: int) -> np.ndarray:
        """Sorted unique subjects (OUT) / objects (IN) of ``pid`` (int64)."""
        pid = int(pid)
        if pid not in self._stats:
            return _EMPTY64
        ck = ("index", pid, direction)
        hit = self._cache.get(ck)
        if hit is not None:
            return hit
        parts = [sh.index(pid, direction) for sh in self.shards]
        if self.n_shards == 1:
            res = parts[0].astype(np.int64)
        else:
            res = np.sort(np.concatenate(parts).astype(np.int64))
        self._cache[ck] = res
        return res

    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """(s, o) of all triples of ``pid`` (sorted by s, o within each shard)."""
        pid = int(pid)
        if pid not in self._stats:
            return _EMPTY64, _EMPTY64
        if self.n_shards == 1:
            return self.shards[0].scan(pid)
        ss, os_ = zip(*(sh.scan(pid) for sh in self.shards), strict=True)
        return np.concatenate(ss), np.concatenate(os_)

    def scan_all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ss, ps, os_ = [_EMPTY64], [_EMPTY64], [_EMPTY64]
        for pid in self._preds:
            s, o = self.scan(int(pid))
            ss.append(s)
            os_.append(o)
            ps.append(np.full(len(s), pid, dtype=np.int64))
        return np.concatenate(ss), np.concatenate(ps), np.concatenate(os_)

    def vertices(self) -> np.ndarray:
        hit = self._cache.get("vertices")
        if hit is not None:
            return hit
        parts = [sh.vertices() for sh in self.shards]
        res = parts[0] if len(parts) == 1 else unique(np.concatenate(parts))
        self._cache["vertices"] = res
        return res

    # ------------------------------------------------------------ extras
    @property
    def nbytes(self) -> int:
        """The shards' bytes and the merged adjacencies built from them."""
        mc = self._merged
        return self._shard_bytes() + (mc.used if mc is not None else 0)

    def _shard_bytes(self) -> int:
        return sum(sh.nbytes for sh in self.shards)

    def apply(self, remove: np.ndarray | None, add: np.ndarray | None) -> GraphIndex:
        """New index with ``remove`` rows (n,3 s,p,o) deleted, then ``add`` rows
        inserted (set semantics). Each shard gets, sorted by predicate, the rows
        of which it owns the subject or the object (:meth:`Shard.apply`); only
        touched predicates are rebuilt."""
        rem = _rows(remove)
        addr = _rows(add)
        if len(rem) == 0 and len(addr) == 0:
            return self
        for arr in (rem, addr):
            if len(arr) and (arr.min() < 0 or arr.max() >= 1 << 32):
                raise ValueError("term ids must be in [0, 2**32) in a graph")
        rem, addr = _by_pred(rem), _by_pred(addr)
        n = self.n_shards
        rem_parts = partition.split_edges(rem[:, 0], rem[:, 2], n)
        add_parts = partition.split_edges(addr[:, 0], addr[:, 2], n)
        shards = []
        changed = False
        owned = self.owned
        for sh, rs, as_ in zip(self.shards, rem_parts, add_parts, strict=True):
            if (rs is None and as_ is None) or (owned is not None and sh.no not in owned):
                shards.append(sh)
                continue
            if n == 1:
                new = sh.apply(rem, addr)
            else:
                new = sh.apply(None if rs is None else rem[rs], None if as_ is None else addr[as_])
            changed = changed or new is not sh
            shards.append(new)
        if not changed:
            return self
        touched = unique(np.concatenate([rem[:, 1], addr[:, 1]])).tolist()
        stats = dict(self._stats)
        for pid in touched:
            stats.pop(pid, None)
        stats.update(self._stats_of(shards, touched))
        new = GraphIndex(shards, stats, owned)
        if self._merged is not None and self._merged.merged:  # untouched predicates keep theirs
            gone = set(touched)
            mc = new._merged = MergedCache(BUDGET_FLOOR + int(BUDGET_SHARE * new._shard_bytes()))
            mc.carry(self._merged, lambda pid: pid not in gone)
        if owned is None:  # (a cluster worker applies only its partitions' share of the rows)
            vertex_preds.carry(self, new, rem, addr)
        return new


def _by_pred(rows: np.ndarray) -> np.ndarray:
    """Rows sorted by predicate (stable), so every shard's share arrives grouped."""
    p = rows[:, 1]
    if len(p) > 1 and not (p[1:] >= p[:-1]).all():
        return rows[np.argsort(p, kind="stable")]
    return rows


def _rows(x) -> np.ndarray:
    if x is None:
        return np.zeros((0, 3), dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    if x.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    return x.reshape(-1, 3)


def empty_graph(n_shards: int = 1, owned: frozenset[int] | None = None) -> GraphIndex:
    return GraphIndex([Shard(k, n_shards) for k in range(n_shards)], {}, owned)
