"""A column with unbound cells (OPTIONAL answers) rendered from the dictionary's term shapes.

Why: :func:`engine.exec.render.shaped_column` handed any column with an unbound cell to the
distinct path (a sort of the ids, the distinct terms' keys scanned and rendered, a fragment
table joined per variant and concatenated, a take per row). An OPTIONAL's column is
mostly distinct terms with some cells unbound (UO1: 1,881 distinct of 2,011 rows, 131
unbound), so the distinct step bought nothing. Here the bound cells take the shaped path's
pieces (a per-shape and per-variant prefix, the key's main part in place, a suffix) and
each piece's table gets one more entry, empty, that the unbound rows point at: three takes a
row and no distinct, no scan, no fragment built per term. A column unbound everywhere is one
empty entry.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from engine.arrays import unique
from engine.exec.context import LOCAL_BASE

#: columns rendered here (a spy for the tests)
TAKEN = [0]


#: sample size of the repetition estimate, and the mean repeats per term from which the
#: distinct path is kept (it renders each distinct term once: UO8's courses, 48,965 rows of
#: a few thousand terms, were 2x slower here)
_SAMPLE = 512
_REPEATS = 3.0


def _repeated(ids: np.ndarray) -> bool:
    """Whether the terms of ``ids`` repeat ``_REPEATS`` times or more on average, estimated
    from the duplicate pairs of a spread sample (k^2 / 2d of them for d equally frequent
    terms): a few numpy calls on at most ``_SAMPLE`` ids."""
    n = len(ids)
    k = min(n, _SAMPLE)
    sample = ids[(np.arange(k, dtype=np.int64) * 7919 + 13) % n]
    dups = k - len(unique(sample))
    if dups == 0:
        return False
    if k == n:
        return n >= _REPEATS * (n - dups)
    return n >= _REPEATS * (k * k / (2.0 * dups))


def partly_bound(result, col: np.ndarray, bound: np.ndarray, fmt: str, wrap: list[tuple[bytes, bytes]],
                 variant: np.ndarray | None, check: Callable[[int], None] | None):
    """The Column of ``col`` (some cells UNBOUND: ``~bound``) in ``fmt``, or None when a bound
    term is not a store term or has no template in ``fmt`` (the caller's distinct path)."""
    from engine.exec import render as R  # noqa: PLC0415

    n = len(col)
    ids = col[bound]
    nb = len(ids)
    if nb == 0:
        TAKEN[0] += 1
        return R.Column(pa.array([b""], R._BIN), np.zeros(n, dtype=np.int64))
    if _repeated(ids):
        return None
    d = getattr(result.terms, "dictionary", None)
    if d is None or not hasattr(d, "as_arrow"):
        return None
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= min(len(d), LOCAL_BASE):
        return None
    cache = R._shape_cache(d)
    marks = cache.marks_of(d, ids, hi)
    if marks is None:
        return None
    bit = R._FMT_BIT[fmt]
    codes = marks & R._CODE_MASK
    if bool(((marks & bit) != 0).any()) or bool((codes == R._NO_SHAPE).any()):
        return None
    dict_arr = d.as_arrow()
    if check is not None:
        doffs = np.frombuffer(dict_arr.buffers()[1], dtype=np.int64, count=len(dict_arr) + 1,
                              offset=dict_arr.offset * 8)
        check(int((doffs[ids + 1] - doffs[ids]).sum()))
    keys = R._as_bin(dict_arr.take(pa.array(ids)))
    koffs, _, data = R._offsets_data(keys)
    s0, e0 = koffs[:-1] + cache.cut0[codes], koffs[1:] - cache.cut1[codes]
    # main parts at the even elements of one zero-copy array over the keys, gaps at the odd
    # ones, and a last empty element for the unbound rows
    n2 = 2 * nb + 1
    offs = np.empty(n2 + 1, dtype=np.int64)
    offs[0:2 * nb:2] = s0
    offs[1:2 * nb:2] = e0
    offs[2 * nb:] = e0[-1]
    inner = pa.Array.from_buffers(R._BIN, n2, [None, pa.py_buffer(offs), data])
    main_idx = np.full(n, 2 * nb, dtype=np.int64)
    main_idx[bound] = np.arange(0, 2 * nb, 2, dtype=np.int64)
    ucodes, local, heads, tails = R.shape_affixes(cache, codes, fmt, wrap)
    heads.append(b"")
    tails.append(b"")
    if variant is not None:
        local = local + len(ucodes) * np.asarray(variant, dtype=np.int64)[bound]
    side_idx = np.full(n, len(heads) - 1, dtype=np.int64)
    side_idx[bound] = local
    TAKEN[0] += 1
    return R.Column(pieces=[(pa.array(heads, R._BIN), side_idx), (inner, main_idx),
                            (pa.array(tails, R._BIN), side_idx)])
