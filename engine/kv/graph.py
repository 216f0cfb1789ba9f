"""GraphIndex: one RDF graph as per-predicate CSR arrays split into shards.

Wukong's key ``[vid | pid | dir]`` -> neighbour list is, per predicate and
direction, a CSR (sorted unique key ids, ``indptr``, sorted ``indices``). The
predicate index ``[0|p|out]`` / ``[0|p|in]`` is the key array itself
(:meth:`GraphIndex.index`), the type index ``[0|t|in]`` is
``expand(rdf_type, IN, [t])``.

Vertices are split into ``N`` shards by ``vid % N``; OUT edges live with the
subject, IN edges with the object. ``GraphIndex`` reads shards only through
the :class:`engine.kv.shard.Shard` interface. Immutable: :meth:`apply` returns a
new index that shares every untouched predicate's arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from engine.arrays import unique
from engine.kv.shard import CSR, EMPTY_CSR, IN, OUT, PredShard, Shard, csr_from_sorted_pairs, has_neighbour

__all__ = ["OUT", "IN", "GraphIndex", "PredicateStats", "empty_graph"]

_EMPTY64 = np.zeros(0, dtype=np.int64)
_LOW32 = np.uint64(0xFFFFFFFF)
_SH32 = np.uint64(32)
# expand/contains inputs up to this many rows go vertex by vertex (Shard.lookup)
# instead of the vectorized path, whose fixed cost is ~12 us (expand) / ~30 us
# (contains) per shard touched; per vertex costs ~0.7 us (dense keys, span table)
# to ~2 us (binary search). Measured crossovers on a 1M-triple graph:
_SMALL_EXPAND = 12  # one shard
_SMALL_CONTAINS = 20  # one shard
_SMALL_SHARDED = 80  # several shards, expand and contains
# multi-shard expand results of at least this many edges are merged shard by shard
_MERGE_BY_SHARD_FROM = 32768


class PredicateStats(NamedTuple):
    triples: int
    subjects: int
    objects: int


_NO_STATS = PredicateStats(0, 0, 0)


def _pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a, b) id pairs -> one sortable uint64 (ids must be < 2**32)."""
    return (a.astype(np.uint64) << _SH32) | b.astype(np.uint64)


def _unpack(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (k >> _SH32).astype(np.int64), (k & _LOW32).astype(np.int64)


def _member(sorted_arr: np.ndarray, q: np.ndarray) -> np.ndarray:
    if len(sorted_arr) == 0 or len(q) == 0:
        return np.zeros(len(q), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_arr, q), len(sorted_arr) - 1)
    return sorted_arr[pos] == q


def build_pred_shards(pairs: np.ndarray, n_shards: int) -> list[PredShard | None]:
    """PredShard per shard from sorted unique packed (s, o) pairs of one predicate."""
    if len(pairs) == 0:
        return [None] * n_shards
    s, o = _unpack(pairs)
    mx = max(int(s[-1]), int(o.max()))
    id_dtype = np.int32 if mx < np.iinfo(np.int32).max else np.int64
    rev = np.sort(_pack(o, s))
    os_, ss = _unpack(rev)
    out: list[PredShard | None] = []
    for k in range(n_shards):
        if n_shards == 1:
            so, oo, io, is_ = s, o, os_, ss
        else:
            m = s % n_shards == k
            so, oo = s[m], o[m]
            m2 = os_ % n_shards == k
            io, is_ = os_[m2], ss[m2]
        if len(so) == 0 and len(io) == 0:
            out.append(None)
            continue
        out.append(PredShard(csr_from_sorted_pairs(so, oo, id_dtype), csr_from_sorted_pairs(io, is_, id_dtype)))
    return out


class GraphIndex:
    """Immutable index of one graph (see module docstring)."""

    def __init__(self, shards: list[Shard], stats: dict[int, PredicateStats] | None = None):
        self.shards = shards
        self.n_shards = len(shards)
        if stats is None:
            stats = {}
            pids = set()
            for sh in shards:
                pids.update(sh.preds)
            for pid in pids:
                t = su = ob = 0
                for sh in shards:
                    a, b, c = sh.degree_stats(pid)
                    t, su, ob = t + a, su + b, ob + c
                stats[pid] = PredicateStats(t, su, ob)
        self._stats = stats
        self.n_triples = int(sum(st.triples for st in stats.values()))
        self._preds = np.array(sorted(stats), dtype=np.int64)
        self._cache: dict = {}

    # ------------------------------------------------------------ contract
    def __len__(self) -> int:
        return self.n_triples

    def predicates(self) -> np.ndarray:
        return self._preds

    def stats(self, pid: int) -> PredicateStats:
        return self._stats.get(int(pid), _NO_STATS)

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
        if n <= (_SMALL_EXPAND if n_sh == 1 else _SMALL_SHARDED):
            # vertex by vertex: scalar lookups beat a dozen numpy calls per shard
            fs = self._cache.get((pid, direction))
            if fs is None:
                fs = self._cache[pid, direction] = [sh.lookup(pid, direction) for sh in shards]
            if n == 1:
                v = int(vids[0])
                nb = fs[v % n_sh](v)
                return np.zeros(len(nb), dtype=np.int64), nb.astype(np.int64)
            if n_sh == 1:
                parts = list(map(fs[0], vids.tolist()))
            else:
                parts = [fs[v % n_sh](v) for v in vids.tolist()]
            cnt = [len(p) for p in parts]
            if not any(cnt):
                return _EMPTY64, _EMPTY64
            return np.arange(n, dtype=np.int64).repeat(cnt), np.concatenate(parts, dtype=np.int64)
        if n_sh == 1:
            return shards[0].expand(pid, direction, vids)
        part = vids & (n_sh - 1) if n_sh & (n_sh - 1) == 0 else vids % n_sh
        res = []
        for k, sh in enumerate(shards):
            sel = (part == k).nonzero()[0]
            m = len(sel)
            if m == 0:
                continue
            if m == n:  # all input on one shard
                return sh.expand(pid, direction, vids)
            r, nb = sh.expand(pid, direction, vids[sel])
            if len(r):
                res.append((sel, r, nb))
        if not res:
            return _EMPTY64, _EMPTY64
        if len(res) == 1:
            sel, r, nb = res[0]
            return sel[r], nb
        return _merge_groups(n, res)

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        s = np.asarray(s, dtype=np.int64)
        o = np.asarray(o, dtype=np.int64)
        pid = int(pid)
        n = len(s)
        if n == 0 or pid not in self._stats:
            return np.zeros(n, dtype=bool)
        shards = self.shards
        n_sh = self.n_shards
        if n <= (_SMALL_CONTAINS if n_sh == 1 else _SMALL_SHARDED):
            fs = self._cache.get((pid, OUT))
            if fs is None:
                fs = self._cache[pid, OUT] = [sh.lookup(pid, OUT) for sh in shards]
            return np.array([has_neighbour(fs[a % n_sh](a), b) for a, b in zip(s.tolist(), o.tolist(), strict=True)],
                            dtype=bool)
        if n_sh == 1:
            return shards[0].contains(pid, s, o)
        res = np.zeros(n, dtype=bool)
        part = s & (n_sh - 1) if n_sh & (n_sh - 1) == 0 else s % n_sh
        for k, sh in enumerate(shards):
            sel = (part == k).nonzero()[0]
            m = len(sel)
            if m == n:
                return sh.contains(pid, s, o)
            if m:
                res[sel] = sh.contains(pid, s[sel], o[sel])
        return res

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
        parts = [_EMPTY64]
        for sh in self.shards:
            for ps in sh.preds.values():
                parts.append(ps.out.keys.astype(np.int64))
                parts.append(ps.inn.keys.astype(np.int64))
        res = unique(np.concatenate(parts))
        self._cache["vertices"] = res
        return res

    # ------------------------------------------------------------ extras
    @property
    def nbytes(self) -> int:
        return sum(sh.nbytes for sh in self.shards)

    def pairs(self, pid: int) -> np.ndarray:
        """Sorted unique packed (s << 32 | o) of one predicate."""
        s, o = self.scan(pid)
        k = _pack(s, o)
        if self.n_shards > 1:
            k.sort()
        return k

    def apply(self, remove: np.ndarray | None, add: np.ndarray | None) -> GraphIndex:
        """New index with ``remove`` rows (n,3 s,p,o) deleted, then ``add`` rows
        inserted (set semantics). Only touched predicates are rebuilt."""
        rem = _rows(remove)
        addr = _rows(add)
        if len(rem) == 0 and len(addr) == 0:
            return self
        for arr in (rem, addr):
            if len(arr) and (arr.min() < 0 or arr.max() >= 1 << 32):
                raise ValueError("term ids must be in [0, 2**32) in a graph")
        pids = unique(np.concatenate([rem[:, 1], addr[:, 1]]))
        rem_groups = _group(rem)
        add_groups = _group(addr)
        stats = dict(self._stats)
        updates: list[dict[int, PredShard | None]] = [{} for _ in self.shards]
        changed = False
        for pid in pids.tolist():
            r = rem_groups.get(pid)
            a = add_groups.get(pid)
            if pid in self._stats:
                built = self._update_pred(pid, r, a)
                if built is None:
                    continue
            else:
                if a is None:
                    continue
                built = build_pred_shards(unique(_pack(a[:, 0], a[:, 2])), self.n_shards)
            changed = True
            t = su = ob = 0
            for k, ps in enumerate(built):
                updates[k][pid] = ps
                if ps is not None:
                    t += len(ps.out.indices)
                    su += len(ps.out.keys)
                    ob += len(ps.inn.keys)
            if t:
                stats[pid] = PredicateStats(t, su, ob)
            else:
                stats.pop(pid, None)
        if not changed:
            return self
        shards = [sh.with_preds(up) if up else sh for sh, up in zip(self.shards, updates, strict=True)]
        return GraphIndex(shards, stats)


    def _update_pred(self, pid: int, r: np.ndarray | None, a: np.ndarray | None) -> list[PredShard | None] | None:
        """Per-shard PredShards of ``pid`` after removing ``r`` then adding ``a``;
        only the CSRs (shard, direction) that really change are rebuilt, by merging
        sorted runs (no full sort). None if nothing changes."""
        empty = np.zeros(0, np.uint64)
        rk = empty
        if r is not None:
            rk = unique(_pack(r[:, 0], r[:, 2]))
            s_, o_ = _unpack(rk)
            rk = rk[self.contains(pid, s_, o_)]
        ak = empty
        if a is not None:
            ak = unique(_pack(a[:, 0], a[:, 2]))
            if len(rk):
                rk = rk[~_member(ak, rk)]  # removed then re-added: stays
            s_, o_ = _unpack(ak)
            ak = ak[~self.contains(pid, s_, o_)]
        if len(rk) == 0 and len(ak) == 0:
            return None
        n = self.n_shards
        rs, ro = _unpack(rk)
        as_, ao = _unpack(ak)
        rrev, arev = np.sort(_pack(ro, rs)), np.sort(_pack(ao, as_))
        rrev_o, arev_o = _unpack(rrev)[0], _unpack(arev)[0]
        out: list[PredShard | None] = []
        for k, sh in enumerate(self.shards):
            ps = sh.preds.get(pid)
            if n == 1:
                m_r = m_a = m_rr = m_ar = slice(None)
            else:
                m_r, m_a, m_rr, m_ar = rs % n == k, as_ % n == k, rrev_o % n == k, arev_o % n == k
            o_csr = ps.out if ps is not None else None
            i_csr = ps.inn if ps is not None else None
            new_out = _merge_csr(o_csr, rk[m_r], ak[m_a])
            new_in = _merge_csr(i_csr, rrev[m_rr], arev[m_ar])
            if new_out is o_csr and new_in is i_csr:
                out.append(ps)
            elif (new_out is None or len(new_out) == 0) and (new_in is None or len(new_in) == 0):
                out.append(None)
            else:
                out.append(PredShard(new_out if new_out is not None else EMPTY_CSR,
                                     new_in if new_in is not None else EMPTY_CSR))
        return out


def _merge_groups(n: int, res: list) -> tuple[np.ndarray, np.ndarray]:
    """(rows, nbrs) in input-row order from per-shard ``(sel, r, nb)``: shard
    output ``(r, nb)`` for input rows ``sel`` (``r`` local, nondecreasing). Each
    input row's group is contiguous in exactly one shard's output, so every group
    moves to its offset in the result (counts per row -> cumsum): no sort."""
    total = sum(len(r) for _, r, _ in res)
    out = np.empty(total, dtype=np.int64)
    if total >= _MERGE_BY_SHARD_FROM:
        # large: place shard by shard (fewer passes over the edges)
        cnt = np.zeros(n, dtype=np.int64)
        local = []
        for sel, r, _ in res:
            c = np.bincount(r, minlength=len(sel))
            cnt[sel] = c
            local.append(c)
        starts = cnt.cumsum()
        starts -= cnt
        for (sel, r, nb), c in zip(res, local, strict=True):
            shift = starts[sel]
            shift -= c.cumsum()
            shift += c  # output start - local start, per local row
            dest = shift.repeat(c)
            dest += np.arange(len(r), dtype=np.int64)
            out[dest] = nb
        return np.arange(n, dtype=np.int64).repeat(cnt), out
    # small: one pass over the concatenation (fewer numpy calls)
    rows = np.concatenate([sel[r] for sel, r, _ in res])
    nbrs = np.concatenate([nb for _, _, nb in res])
    cnt = np.bincount(rows, minlength=n)
    starts = cnt.cumsum()
    starts -= cnt
    first = np.empty(total, dtype=bool)
    first[0] = True
    np.not_equal(rows[1:], rows[:-1], out=first[1:])
    first = first.nonzero()[0]  # where each group starts in the concatenation
    group = rows[first]
    shift = starts[group]
    shift -= first
    dest = shift.repeat(cnt[group])
    dest += np.arange(total, dtype=np.int64)
    out[dest] = nbrs
    return np.arange(n, dtype=np.int64).repeat(cnt), out


def _merge_csr(csr: CSR | None, rem: np.ndarray, add: np.ndarray) -> CSR | None:
    """CSR with sorted packed pairs ``rem`` removed and ``add`` (absent, sorted) merged in."""
    if len(rem) == 0 and len(add) == 0:
        return csr
    if csr is not None and len(csr):
        a, b = csr.pairs()
        packed = _pack(a, b)
        if len(rem):
            packed = packed[~_member(rem, packed)]
        if len(add):
            packed = np.sort(np.concatenate([packed, add]), kind="stable")  # merges two sorted runs
    else:
        packed = add
    if len(packed) == 0:
        return EMPTY_CSR
    a, b = _unpack(packed)
    mx = max(int(a[-1]), int(b.max()))
    return csr_from_sorted_pairs(a, b, np.int32 if mx < np.iinfo(np.int32).max else np.int64)


def _rows(x) -> np.ndarray:
    if x is None:
        return np.zeros((0, 3), dtype=np.int64)
    x = np.asarray(x, dtype=np.int64)
    if x.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    return x.reshape(-1, 3)


def _group(rows: np.ndarray) -> dict[int, np.ndarray]:
    if len(rows) == 0:
        return {}
    order = np.argsort(rows[:, 1], kind="stable")
    r = rows[order]
    p = r[:, 1]
    cut = np.flatnonzero(np.diff(p)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(r)]])
    return {int(p[a]): r[a:b] for a, b in zip(starts, ends, strict=True)}


def empty_graph(n_shards: int = 1) -> GraphIndex:
    return GraphIndex([Shard(k, n_shards) for k in range(n_shards)], {})
