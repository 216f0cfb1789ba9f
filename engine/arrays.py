"""Array helpers that keep long steps fast and interruptible.

``unique`` / ``unique_inverse``: sorted distinct values of a 1-D array by sorting. numpy >= 2.3
answers a plain ``np.unique(x)`` with a hash table that is 10-60x slower than
a sort on large integer arrays (2 s for 1M distinct int64) and holds the GIL
for most of that time, so every other request of the server waits; numpy's
sort releases the GIL.
"""

from __future__ import annotations

import numpy as np


def unique(x: np.ndarray) -> np.ndarray:
    """np.unique(x), sort-based (like np.unique, flattens its input)."""
    x = np.asarray(x).ravel()
    if len(x) <= 1:
        return x.copy()
    s = np.sort(x)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, int64 index of each value among them), as
    ``np.unique(x, return_inverse=True)``, by one stable sort (small columns: no
    counting pass to set up, unlike :func:`engine.exec.bindings.distinct_inverse`)."""
    x = np.asarray(x).ravel()
    if len(x) <= 1:
        return x.copy(), np.zeros(len(x), dtype=np.int64)
    order = np.argsort(x, kind="stable")
    s = x[order]
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    inv = np.empty(len(x), dtype=np.int64)
    inv[order] = np.cumsum(keep) - 1
    return s[keep], inv
