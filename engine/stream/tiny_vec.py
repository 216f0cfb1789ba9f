"""The wide tail of a tuple-at-a-time join, run on columns.

Why: a compiled join order (:mod:`engine.stream.tiny_plan`) costs ~0.3-1 us of Python per row and
step, which is what a join of a few window rows needs -- but where a step fans the rows out
(CityBench C5: 3 readings x the 99 cultural events that share their ``?ob``, then each event's
location; LSBench's friends of friends) the rows after it are hundreds, each built as a tuple,
looped over by the next steps and finally split into columns. From the first step the planner
saw produce :data:`VEC_ROWS` rows or more, :func:`run_tail` runs the remaining steps on int64
columns instead: a probe is one ``searchsorted`` pair over the stored pairs' sorted arrays (kept
with the match for the store snapshot) plus the instant's few pairs looked up per distinct
key, and the row expansion is ``repeat`` / gather. The steps and their meaning are the
compiled plan's (see :mod:`engine.stream.tiny_plan`), the result the same bag of rows.
"""

from __future__ import annotations

import numpy as np

from engine.arrays import unique_inverse

__all__ = ["ColRows", "VEC_ROWS", "run_tail", "tail_start"]

#: rows out of a step from which the join's remaining steps run on columns (measured on
#: CityBench's cold instants: at ~50-100 rows a step on columns -- ~5 numpy calls -- costs what
#: the loops do; C5's 297-row product and LSBench L7's ~1,000 friends of friends are far above)
VEC_ROWS = 128

_E = np.zeros(0, dtype=np.int64)
_PACK = 1 << 31
#: rows produced on columns per unit of the join's work bound (which counts the loops' rows at
#: ~0.3-1 us each; a step on columns costs ~10-20 us plus ~0.02 us a row)
ROW_WORK = 16


class ColRows:
    """A join's rows as an (n x slots) int64 array (what :func:`run_tail` returns); ``cols``: one
    contiguous column per slot, made on first use."""

    __slots__ = ("_a", "_cols", "n")

    def __init__(self, a: np.ndarray):
        self._a = a
        self._cols: list | None = None
        self.n = len(a)

    def __len__(self) -> int:
        return self.n

    def matrix(self) -> np.ndarray:
        return self._a

    @property
    def cols(self) -> list[np.ndarray]:
        if self._cols is None:
            self._cols = list(np.ascontiguousarray(self._a.T))
        return self._cols


def tail_start(steps: list[tuple], sizes: list[int]) -> int | None:
    """The first step whose rows (as the planner saw them, ``sizes[i]`` after step ``i``)
    reach :data:`VEC_ROWS` and that expands rows (a probe or a product); None if none does."""
    for i, (st, n) in enumerate(zip(steps, sizes, strict=False)):
        if n >= VEC_ROWS and st[0] in ("pr", "gp", "s1", "s2", "gs"):
            return i
    return None


def _expand(keys: np.ndarray, sk: np.ndarray, so: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``keys`` matched against sorted ``sk`` (with ``so`` aligned, 1-d or 2-d):
    ``(row of each match, its so row)``, grouped by row."""
    lo = np.searchsorted(sk, keys, "left")
    cnt = np.searchsorted(sk, keys, "right") - lo
    total = int(cnt.sum())
    if not total:
        return _E, so[:0]
    rep = np.repeat(np.arange(len(keys), dtype=np.int64), cnt)
    idx = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(total, dtype=np.int64)
    return rep, so[idx]


def _sorted_pairs(m, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A tiny-core match's stored pairs sorted by end ``k``: (keys, other ends), kept on the
    match (its stored part is the same for the store snapshot)."""
    arrs = m._arrs
    got = arrs.get(k)
    if got is None:
        if m.pairs:
            a = np.array(m.pairs, dtype=np.int64)
            order = np.argsort(a[:, k], kind="stable")
            got = (a[order, k], a[order, 1 - k])
        else:
            got = (_E, _E)
        arrs[k] = got
    return got


def _by_key(uk: list, get, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted keys ``uk``'s hits (``get(key)`` -> tuples of ``width`` values, or falsy) as sorted
    arrays ``(keys, values)`` for :func:`_expand`."""
    ks: list = []
    vs: list = []
    for u in uk:
        h = get(u)
        if h:
            ks += [u] * len(h)
            vs += h
    if not ks:
        return _E, np.zeros((0, width), dtype=np.int64) if width != 1 else _E
    sk = np.array(ks, dtype=np.int64)
    so = np.array(vs, dtype=np.int64).reshape(len(vs), width)
    return sk, so[:, 0] if width == 1 else so


def _per_key(keys: np.ndarray, get) -> tuple[np.ndarray, np.ndarray]:
    """``(row, other end)`` of each row's hits through ``get`` (key -> 1-tuples), asked once
    per distinct key."""
    uk, inv = unique_inverse(keys)
    sk, so = _by_key(uk.tolist(), get, 1)
    r, v = _expand(uk, sk, so)
    if not len(r):
        return _E, _E
    return _spread_keys(inv, r, v)


def _inst_index(m, k: int) -> dict:
    ii = m._iidx.get(("vec", k))
    if ii is None:
        ii = m._iidx[("vec", k)] = {}
        for p in m.inst:
            ii.setdefault(p[k], []).append((p[1 - k],))
    return ii


def _probe(m, k: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``keys`` expanded by pattern match ``m``'s pairs with the key at end ``k``:
    ``(row, other end)``: stored pairs (and a small enough stored relation) by sorted arrays,
    a wide relation's kept look-ups and the instant's pairs per distinct key."""
    parts = []
    if m.lazy:
        arr = m.rel.sorted_by(k)
        parts.append(_expand(keys, *arr) if arr is not None else _per_key(keys, m.rel.getter(k)))
    elif m.pairs:
        parts.append(_expand(keys, *_sorted_pairs(m, k)))
    if m.inst:
        parts.append(_per_key(keys, _inst_index(m, k).get))
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return _E, _E
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _packed_pairs(pairs) -> np.ndarray | None:
    a = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    if len(a) and (int(a.min()) < 0 or int(a.max()) >= _PACK):
        return None
    return np.sort((a[:, 0] << 32) | a[:, 1])


def _in_sorted(x: np.ndarray, sorted_: np.ndarray) -> np.ndarray:
    if not len(sorted_):
        return np.zeros(len(x), dtype=bool)
    pos = np.searchsorted(sorted_, x)
    np.minimum(pos, len(sorted_) - 1, out=pos)
    return sorted_[pos] == x


def _pair_mask(m, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether each ``(a[i], b[i])`` is one of ``m``'s pairs: packed keys against sorted packed
    pairs; row by row through the match's tester where the ids do not pack."""
    n = len(a)
    if n and ((a | b) >> 31).any():   # (a negative id or one past 2^31: not packed)
        test = m.pair_tester()
        return np.fromiter((bool(test(x, y)) for x, y in zip(a.tolist(), b.tolist(), strict=True)),
                           dtype=bool, count=n)
    key = (a << 32) | b
    if m.lazy:
        stored = m.rel.packed()
        if stored is None:
            test = m.pair_tester()
            return np.fromiter((bool(test(x, y)) for x, y in zip(a.tolist(), b.tolist(), strict=True)),
                               dtype=bool, count=n)
    else:
        stored = m._arrs.get("packed", False) if m.pairs else None
        if stored is False:
            stored = m._arrs["packed"] = _packed_pairs(m.pairs)
    out = _in_sorted(key, stored) if stored is not None else np.zeros(n, dtype=bool)
    if m.inst:
        inst = m._iidx.get("packed", False)
        if inst is False:
            inst = m._iidx["packed"] = _packed_pairs(m.inst)
        if inst is None:
            iset = set(m.inst)
            out |= np.fromiter(((x, y) in iset for x, y in zip(a.tolist(), b.tolist(), strict=True)),
                               dtype=bool, count=n)
        else:
            out |= _in_sorted(key, inst)
    return out


def _spread_keys(inv: np.ndarray, r: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Matches per distinct key (``r``: the key's index, grouped; ``v``: values) to matches per
    row (row ``i`` has key ``inv[i]``)."""
    nk = int(inv.max()) + 1 if len(inv) else 0
    cnt_k = np.bincount(r, minlength=nk)
    start_k = np.cumsum(cnt_k) - cnt_k
    cnt = cnt_k[inv]
    total = int(cnt.sum())
    if not total:
        return _E, v[:0]
    rep = np.repeat(np.arange(len(inv), dtype=np.int64), cnt)
    idx = np.repeat(start_k[inv] - (np.cumsum(cnt) - cnt), cnt) + np.arange(total, dtype=np.int64)
    return rep, v[idx]


def _group_arrays(g, names: tuple) -> tuple[np.ndarray, np.ndarray, list]:
    """A joined static group's rows sorted by its (single) bound variable: (keys, the free
    variables' values as a 2-d array, positions), kept on the group."""
    got = g._vec.get(names)
    if got is None:
        a = np.array(g.rows, dtype=np.int64).reshape(len(g.rows), len(g.slots))
        (b,) = [g.slots[v] for v in names]
        fpos = [k for v, k in g.slots.items() if v not in names]
        order = np.argsort(a[:, b], kind="stable")
        got = g._vec[names] = (a[order, b], a[order][:, fpos], fpos)
    return got


class _Rows:
    """The tail's rows: a materialized (n x slots) array ``a``, or rows of it picked by ``rep``
    (an expansion's source rows) plus the columns the expansion bound (``ext``). A test reads
    only the columns it needs and filters ``rep`` / ``ext``; the next expansion (or the end)
    builds the array -- so a probe followed by tests (a path closed by a pair test, LSBench
    L7's friend of a friend) never gathers the rows the tests drop."""

    __slots__ = ("a", "rep", "ext")

    def __init__(self, a: np.ndarray):
        self.a = a
        self.rep: np.ndarray | None = None
        self.ext: list = []

    def __len__(self) -> int:
        return len(self.a) if self.rep is None else len(self.rep)

    def col(self, j: int) -> np.ndarray:
        w = self.a.shape[1]
        if j >= w:
            return self.ext[j - w]
        c = self.a[:, j] if self.rep is None else self.a[self.rep, j]
        return np.ascontiguousarray(c)

    def keep(self, m: np.ndarray) -> None:
        if self.rep is None:
            self.a = self.a[m]
        else:
            self.rep = self.rep[m]
            self.ext = [e[m] for e in self.ext]

    def matrix(self) -> np.ndarray:
        if self.rep is None:
            return self.a
        w = self.a.shape[1]
        out = np.empty((len(self.rep), w + len(self.ext)), dtype=np.int64)
        if w:
            out[:, :w] = self.a[self.rep]
        for x, e in enumerate(self.ext):
            out[:, w + x] = e
        self.a, self.rep, self.ext = out, None, []
        return out

    def expand(self, rep: np.ndarray, ext: list) -> None:
        self.a = self.matrix()
        self.rep, self.ext = rep, ext


def run_tail(rows, objs: list, steps: list[tuple], width: int, limit: int, bound: int) -> tuple | None:
    """``steps`` (with their matches / groups ``objs``) over ``rows`` (tuples of ``width``
    slots, or a :class:`ColRows`), on columns: ``(ColRows, work)``, None past ``bound`` rows
    of work or ``limit`` rows (see :class:`_Rows`)."""
    if isinstance(rows, ColRows):
        r = _Rows(rows.matrix())
    else:
        r = _Rows(np.array(rows, dtype=np.int64).reshape(len(rows), width))
    work = 0
    for st, o in zip(steps, objs, strict=True):
        kind = st[0]
        n = len(r)
        if kind == "t0":   # a pattern without variables: all rows or none
            if not len(o) and n:
                r.keep(np.zeros(n, dtype=bool))
            continue
        if kind == "t1":
            _, k, j = st
            if n:
                uk, inv = unique_inverse(r.col(j))
                has = o.tester(k)
                r.keep(np.fromiter((bool(has(u)) for u in uk.tolist()), dtype=bool, count=len(uk))[inv])
            continue
        if kind == "t2":
            _, js, jo = st
            if n:
                r.keep(_pair_mask(o, r.col(js), r.col(jo)))
            continue
        if kind == "pr":
            _, k, j = st
            rep, v = _probe(o, k, r.col(j)) if n else (_E, _E)
            r.expand(rep, [v])
        elif kind == "gp":
            _, names, cpos, nf = st
            if len(cpos) == 1:
                sk, so, _ = _group_arrays(o, names)
                rep, v = _expand(r.col(cpos[0]), sk, so) if n else (_E, so[:0])
            else:   # probed by several variables (rare): per row through the group's hash index
                idx = o.index(names)
                reps: list = []
                vs: list = []
                for i, key in enumerate(zip(*[r.col(j).tolist() for j in cpos], strict=True)):
                    h = idx.get(key)
                    if h:
                        reps += [i] * len(h)
                        vs += h
                rep = np.array(reps, dtype=np.int64)
                v = np.array(vs, dtype=np.int64).reshape(len(vs), nf)
            r.expand(rep, [np.ascontiguousarray(v[:, x]) for x in range(nf)])
        else:   # products: s1 / s2 / gs
            if kind == "s1":
                vals = np.array([x for x, in o.values(st[1])], dtype=np.int64).reshape(-1, 1)
            elif kind == "s2":
                vals = np.array(o.all_pairs(), dtype=np.int64).reshape(-1, 2)
            else:   # (the compiled loop binds a group's row values in their order)
                vals = _group_matrix(o)[:, :st[1]]
            m = len(vals)
            if n * m > limit:
                return None
            rep = np.repeat(np.arange(n, dtype=np.int64), m)
            r.expand(rep, [vals[:, x].reshape(1, m).repeat(n, axis=0).reshape(n * m) for x in range(vals.shape[1])])
        n = len(r)
        work += (1 + n // ROW_WORK) if n else 0   # (never more than the loops count)
        if work > bound or n > limit:
            return None
    return ColRows(r.matrix()), work


def _group_matrix(g) -> np.ndarray:
    got = g._vec.get("matrix")
    if got is None:
        got = g._vec["matrix"] = np.array(g.rows, dtype=np.int64).reshape(len(g.rows), len(g.slots))
    return got
