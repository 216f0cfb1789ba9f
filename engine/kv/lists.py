"""One-vertex lookups as Python lists, for the tuple-at-a-time executor.

A selective query makes ~10 one-vertex lookups and iterates their neighbours in
Python. ``CSR.lookup`` answers a numpy slice (the caller then calls ``tolist``),
reads ``indptr`` / the span table as numpy scalars (~85 ns each, a comparison with
a Python int ~135 ns) and, with several shards, goes through
:func:`engine.kv.partition.router` (one more call). Here the same spans are read
through ``memoryview`` s of the same arrays (an item is a Python int in ~45 ns; a
slice's ``tolist`` half a numpy one's; ``bisect`` over it is twice as fast), and
the shards' span specs (:meth:`engine.kv.shard.CSR.spec`) are folded into one
function per (predicate, direction): the owner's table is picked by ``v % n``
inside it.

:func:`list_lookups` gives two functions: ``nbrs(v, cap)`` -> the sorted neighbours
of ``v`` as a new list of Python ints, or None when there are more than ``cap`` (a
hub's list is not made only to be handed to the vectorized steps), ``has(v, o)`` -> whether ``o`` is one
of them (a binary search of the span, nothing copied: hubs cost log k).
Both read immutable arrays only (a commit makes new CSRs and a new
:class:`engine.kv.graph.GraphIndex`), so a snapshot's functions keep answering
its own version.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from engine.kv.shard import CSR, has_neighbour

#: memoryview formats whose items index as Python ints
_INT_FORMATS = frozenset("bhilqBHILQ")


def _mv(a):
    """A 1-d memoryview of ``a`` whose items are Python ints, or None."""
    if a.ndim != 1 or not a.flags.c_contiguous:
        return None
    m = memoryview(a)
    return m if m.format in _INT_FORMATS else None


def _view_spec(csr: CSR | None, stride: int):
    """A shard's spec with memoryviews: ("dense", base, width, dptr, idx),
    ("bucket", base, width, shift, bptr, keys, indptr, idx), ("search", keys,
    indptr, idx), ("empty",); None when an array does not view as ints."""
    if csr is None:
        return ("empty",)
    spec = csr.spec(stride)
    kind = spec[0]
    if kind == "empty":
        return spec
    idx = _mv(csr.indices)
    if kind == "dense":
        dptr = _mv(spec[3])
        return None if idx is None or dptr is None else ("dense", spec[1], spec[2], dptr, idx)
    keys, indptr = _mv(csr.keys), _mv(csr.indptr)
    if idx is None or keys is None or indptr is None:
        return None
    if kind == "bucket":
        bptr = _mv(spec[4])
        return None if bptr is None else ("bucket", spec[1], spec[2], spec[3], bptr, keys, indptr, idx)
    return ("search", keys, indptr, idx)


def list_lookups(csrs: list[CSR | None], stride: int):
    """(nbrs, has) over the shards' CSRs of one predicate and direction (``csrs[k]``:
    shard k's, None when it has none; the owner of ``v`` is ``v % len(csrs)``), or
    None when one does not view as Python ints (the caller wraps the numpy lookups)."""
    specs = [_view_spec(c, stride) for c in csrs]
    if any(s is None for s in specs):
        return None
    n = len(specs)
    kinds = {s[0] for s in specs}
    if kinds <= {"dense", "empty"}:
        return _dense(specs, stride)
    if n == 1:
        return _one(specs[0], stride)
    if kinds <= {"bucket", "empty"}:
        return _buckets(specs, stride)
    if kinds <= {"search", "empty"}:
        return _searches(specs)
    fns = [_one(s, stride) for s in specs]
    nb = tuple(f[0] for f in fns)
    hs = tuple(f[1] for f in fns)

    def nbrs(v: int, cap: int) -> list | None:
        return nb[v % n](v, cap)

    def has(v: int, o: int) -> bool:
        return hs[v % n](v, o)
    return nbrs, has


def _dense(specs: list, stride: int):
    """Every shard a direct table (or empty): one function, the owner's table by ``v % n``."""
    n = len(specs)
    # an empty shard: a table no slot is in
    tabs = tuple((s[1], s[2], s[3], s[4]) if s[0] == "dense" else (0, 0, None, None) for s in specs)
    if n == 1:
        base, width, dptr, idx = tabs[0]

        def nbrs1(v: int, cap: int) -> list | None:
            j = v // stride - base
            if 0 <= j < width:
                lo, hi = dptr[j], dptr[j + 1]
                cnt = hi - lo  # (one neighbour: its item, not a memoryview slice and its tolist)
                return None if cnt > cap else [idx[lo]] if cnt == 1 else idx[lo:hi].tolist()
            return []

        def has1(v: int, o: int) -> bool:
            j = v // stride - base
            if 0 <= j < width:
                hi = dptr[j + 1]
                i = bisect_left(idx, o, dptr[j], hi)
                return i < hi and idx[i] == o
            return False
        return nbrs1, has1

    def nbrs(v: int, cap: int) -> list | None:
        base, width, dptr, idx = tabs[v % n]
        j = v // stride - base
        if 0 <= j < width:
            lo, hi = dptr[j], dptr[j + 1]
            cnt = hi - lo  # (one neighbour: its item, not a memoryview slice and its tolist)
            return None if cnt > cap else [idx[lo]] if cnt == 1 else idx[lo:hi].tolist()
        return []

    def has(v: int, o: int) -> bool:
        base, width, dptr, idx = tabs[v % n]
        j = v // stride - base
        if 0 <= j < width:
            hi = dptr[j + 1]
            i = bisect_left(idx, o, dptr[j], hi)
            return i < hi and idx[i] == o
        return False
    return nbrs, has


def _buckets(specs: list, stride: int):
    """Several shards, each a bucket table (or empty): one function, the owner's table
    by ``v % n`` read in it (the span search of :func:`_one`'s bucket kind written out:
    the per-shard dispatch was a second Python call per lookup)."""
    n = len(specs)
    # an empty shard: a table of width 0 (no slot is in it)
    tabs = tuple(s[1:] if s[0] == "bucket" else (0, 0, 0, None, None, None, None) for s in specs)

    def nbrs_b(v: int, cap: int) -> list | None:
        base, width, shift, bptr, keys, indptr, idx = tabs[v % n]
        j = v // stride - base
        if 0 <= j < width:
            b = j >> shift
            e = bptr[b + 1]
            i = bisect_left(keys, v, bptr[b], e)
            if i < e and keys[i] == v:
                lo, hi = indptr[i], indptr[i + 1]
                cnt = hi - lo  # (one neighbour: its item, not a memoryview slice and its tolist)
                return None if cnt > cap else [idx[lo]] if cnt == 1 else idx[lo:hi].tolist()
        return []

    def has_b(v: int, o: int) -> bool:
        base, width, shift, bptr, keys, indptr, idx = tabs[v % n]
        j = v // stride - base
        if 0 <= j < width:
            b = j >> shift
            e = bptr[b + 1]
            i = bisect_left(keys, v, bptr[b], e)
            if i < e and keys[i] == v:
                hi = indptr[i + 1]
                k = bisect_left(idx, o, indptr[i], hi)
                return k < hi and idx[k] == o
        return False
    return nbrs_b, has_b


def _searches(specs: list):
    """Several shards, each a sorted key list (or empty): one function, as :func:`_buckets`."""
    n = len(specs)
    tabs = tuple((s[1], len(s[1]), s[2], s[3]) if s[0] == "search" else ((), 0, None, None) for s in specs)

    def nbrs_s(v: int, cap: int) -> list | None:
        keys, nk, indptr, idx = tabs[v % n]
        i = bisect_left(keys, v)
        if i < nk and keys[i] == v:
            lo, hi = indptr[i], indptr[i + 1]
            cnt = hi - lo  # (one neighbour: its item, not a memoryview slice and its tolist)
            return None if cnt > cap else [idx[lo]] if cnt == 1 else idx[lo:hi].tolist()
        return []

    def has_s(v: int, o: int) -> bool:
        keys, nk, indptr, idx = tabs[v % n]
        i = bisect_left(keys, v)
        if i < nk and keys[i] == v:
            hi = indptr[i + 1]
            k = bisect_left(idx, o, indptr[i], hi)
            return k < hi and idx[k] == o
        return False
    return nbrs_s, has_s


def _one(spec: tuple, stride: int):
    """(nbrs, has) of one shard's spec."""
    kind = spec[0]
    if kind == "empty":
        return (lambda v, cap: []), (lambda v, o: False)
    if kind == "dense":
        return _dense([spec], stride)
    if kind == "bucket":  # (the span search written out in both: a call costs ~60 ns)
        _, base, width, shift, bptr, keys, indptr, idx = spec

        def nbrs(v: int, cap: int) -> list | None:
            j = v // stride - base
            if 0 <= j < width:
                b = j >> shift
                e = bptr[b + 1]
                i = bisect_left(keys, v, bptr[b], e)
                if i < e and keys[i] == v:
                    lo, hi = indptr[i], indptr[i + 1]
                    cnt = hi - lo  # (one neighbour: its item, not a memoryview slice and its tolist)
                    return None if cnt > cap else [idx[lo]] if cnt == 1 else idx[lo:hi].tolist()
            return []

        def has(v: int, o: int) -> bool:
            j = v // stride - base
            if 0 <= j < width:
                b = j >> shift
                e = bptr[b + 1]
                i = bisect_left(keys, v, bptr[b], e)
                if i < e and keys[i] == v:
                    hi = indptr[i + 1]
                    k = bisect_left(idx, o, indptr[i], hi)
                    return k < hi and idx[k] == o
            return False
        return nbrs, has
    _, keys, indptr, idx = spec
    nk = len(keys)

    def nbrs_s(v: int, cap: int) -> list | None:
        i = bisect_left(keys, v)
        if i < nk and keys[i] == v:
            lo, hi = indptr[i], indptr[i + 1]
            cnt = hi - lo  # (one neighbour: its item, not a memoryview slice and its tolist)
            return None if cnt > cap else [idx[lo]] if cnt == 1 else idx[lo:hi].tolist()
        return []

    def has_s(v: int, o: int) -> bool:
        i = bisect_left(keys, v)
        if i < nk and keys[i] == v:
            hi = indptr[i + 1]
            k = bisect_left(idx, o, indptr[i], hi)
            return k < hi and idx[k] == o
        return False
    return nbrs_s, has_s


def wrap(f):
    """(nbrs, has) over a numpy one-vertex lookup ``f`` (a store without list lookups)."""
    def nbrs(v: int, cap: int) -> list | None:
        nb = f(v)
        return None if len(nb) > cap else nb.tolist()

    def has(v: int, o: int) -> bool:
        return has_neighbour(f(v), o)
    return nbrs, has


def flat_lookup(csr: CSR):
    """``(v, cap) -> flat list | None`` over a CSR of packed int64 edges (stride 1;
    :class:`engine.kv.vertex_preds.VertexEdges`): the int32 halves of ``v``'s edges
    in order (``edges_of(v).view(np.int32).tolist()`` without the numpy slice and
    view), None when it has more than ``cap`` edges; None when the arrays do not
    view as ints (the caller converts the numpy slice)."""
    spec = _view_spec(csr, 1)
    if spec is None:
        return None
    kind = spec[0]
    if kind == "empty":
        return lambda v, cap: []
    if csr.indices.dtype.itemsize != 8:
        return None
    halves = _mv(csr.indices.view(np.int32))
    if halves is None:
        return None
    if kind == "dense":
        _, base, width, dptr, _ = spec

        def flat_d(v: int, cap: int) -> list | None:
            j = v - base
            if 0 <= j < width:
                lo, hi = dptr[j], dptr[j + 1]
                return None if hi - lo > cap else halves[2 * lo:2 * hi].tolist()
            return []
        return flat_d
    if kind == "bucket":
        _, base, width, shift, bptr, keys, indptr, _ = spec

        def flat_b(v: int, cap: int) -> list | None:
            j = v - base
            if 0 <= j < width:
                b = j >> shift
                e = bptr[b + 1]
                i = bisect_left(keys, v, bptr[b], e)
                if i < e and keys[i] == v:
                    lo, hi = indptr[i], indptr[i + 1]
                    return None if hi - lo > cap else halves[2 * lo:2 * hi].tolist()
            return []
        return flat_b
    _, keys, indptr, _ = spec
    nk = len(keys)

    def flat_s(v: int, cap: int) -> list | None:
        i = bisect_left(keys, v)
        if i < nk and keys[i] == v:
            lo, hi = indptr[i], indptr[i + 1]
            return None if hi - lo > cap else halves[2 * lo:2 * hi].tolist()
        return []
    return flat_s
