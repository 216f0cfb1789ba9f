"""Vertex -> shard placement: the only module that knows the rule.

Wukong's differentiated partitioning (001 section 4.2): a vertex ``v`` is owned
by shard ``v % n_shards``; the OUT edges of a triple ``(s, p, o)`` live with the
owner of ``s``, its IN edges with the owner of ``o``, and each shard's predicate
index vertices (``[0|p|out]`` / ``[0|p|in]``) list only the vertices it owns.

Every module that routes ids to shards (graph building and reads, the
single-vertex fast path, a shard's CSR slot numbering via :func:`stride`) goes
through these functions, so a different placement (hash, range, a directory of
hot vertices) changes this file only. Batches are split by owner (:func:`split`, :func:`split_or_single`,
:func:`split_edges`: per-shard positions) and the per-shard answers placed back
(:func:`merge_groups`, or ``out[sel] = answer``), all vectorized; :func:`router`
builds the one-vertex dispatch of the in-place fast path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["owner", "owners", "owned_mask", "split", "split_or_single", "split_edges", "merge_groups", "stride",
           "router"]


def owner(vid: int, n_shards: int) -> int:
    """The shard owning one vertex id (a Python int)."""
    return vid % n_shards


def owners(vids: np.ndarray, n_shards: int) -> np.ndarray:
    """The owning shard of every id of int64 ``vids`` (int64, same length)."""
    if n_shards & (n_shards - 1) == 0:  # power of two (also 1): a mask beats the modulo
        return vids & (n_shards - 1)
    return vids % n_shards


def owned_mask(vids: np.ndarray, n_shards: int, shard_no: int) -> np.ndarray:
    """Bool mask of the ids of ``vids`` that shard ``shard_no`` owns."""
    return owners(vids, n_shards) == shard_no


def split(vids: np.ndarray, n_shards: int) -> list[np.ndarray | None]:
    """Per shard, the positions (int64, increasing) in ``vids`` of the ids it owns;
    None for a shard that owns none."""
    if n_shards == 1:
        return [np.arange(len(vids), dtype=np.int64)] if len(vids) else [None]
    part = owners(vids, n_shards)
    out: list[np.ndarray | None] = []
    for k in range(n_shards):
        sel = (part == k).nonzero()[0]
        out.append(sel if len(sel) else None)
    return out


def split_or_single(vids: np.ndarray, n_shards: int) -> tuple[int, list[np.ndarray | None] | None]:
    """``(k, None)`` when shard ``k`` owns every id of ``vids`` (the caller sends the
    whole array, no gather), else ``(-1, split(vids))``. ``vids`` non-empty."""
    if n_shards == 1:
        return 0, None
    part = owners(vids, n_shards)
    n = len(vids)
    out: list[np.ndarray | None] = []
    for k in range(n_shards):
        sel = (part == k).nonzero()[0]
        m = len(sel)
        if m == n:
            return k, None
        out.append(sel if m else None)
    return -1, out


# multi-shard expand results of at least this many edges are merged shard by shard
_MERGE_BY_SHARD_FROM = 32768


def merge_groups(n: int, res: list) -> tuple[np.ndarray, np.ndarray]:
    """Place per-shard expand answers back: (rows, nbrs) in input-row order from
    per-shard ``(sel, r, nb)``, shard output ``(r, nb)`` for the input rows
    ``sel`` that :func:`split` gave it (``r`` local, nondecreasing). Each
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


def stride(n_shards: int) -> int:
    """The step between consecutive ids one shard owns: ``v // stride`` numbers a
    shard's vertices densely (the CSR span tables are indexed by it)."""
    return n_shards


def router(per_shard: Sequence[Callable[[int], np.ndarray]]) -> Callable[[int], np.ndarray]:
    """One function ``v -> per_shard[owner(v)](v)`` for single Python-int ids (the
    in-place fast path). With one shard it is that shard's function itself: no
    dispatch at all."""
    n = len(per_shard)
    if n == 1:
        return per_shard[0]
    fs = tuple(per_shard)

    def route(v: int) -> np.ndarray:
        return fs[v % n](v)
    return route


def split_edges(s: np.ndarray, o: np.ndarray, n_shards: int) -> list[np.ndarray | None]:
    """Per shard, the positions (increasing) of the edges ``(s[i], o[i])`` it stores:
    those whose subject (OUT side) or object (IN side) it owns; None for none."""
    if n_shards == 1:
        return [np.arange(len(s), dtype=np.int64) if len(s) else None]
    ps, po = owners(s, n_shards), owners(o, n_shards)
    out: list[np.ndarray | None] = []
    for k in range(n_shards):
        sel = ((ps == k) | (po == k)).nonzero()[0]
        out.append(sel if len(sel) else None)
    return out
