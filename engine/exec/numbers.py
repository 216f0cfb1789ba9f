"""Computed numbers held as values: their keys are written only when read as text.

A column of many distinct computed numbers (``RAND()`` per row, arithmetic over
a column of many values, per-group sums) would cost a key written and hashed
per value to get its ids (72k ``RAND()`` doubles: ~35 ms of formatting alone)
although most queries only compare, count, group or aggregate them.
:class:`LazyNumbers` gives such values query-local ids in a band of their own
(from :data:`LAZY_BASE`) and keeps each one's float64 / int64 value and
datatype code; ``QueryContext.numeric`` / ``kinds`` / ``known_numbers`` read
those, and only a reader of text (``keys``, ``keys_arrow``: rendering, STR,
a string function) has the keys written, once, column-wise.

Ids stay canonical (one term, one id) because a lazy value is only created
after it was matched, by value, against the store (the dictionary's numeric
side array, kept sorted per dictionary here; candidates' keys looked up), the
query's keyed computed terms and the earlier lazy values; and every key the
query interns afterwards is matched against the lazy values (:meth:`find`).
Only canonical keys are made lazily (``"12"^^xsd:integer``, ``"1.5E0"^^xsd:double``),
integers below 2^53 and doubles: the others take the keyed path.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.exec import values as V
from engine.exec.context import LOCAL_BASE
from engine.terms import XSD_DOUBLE, XSD_INTEGER

#: ids of lazily written computed numbers: a band of their own above the keyed query-local ids
LAZY_BASE = LOCAL_BASE + (1 << 38)
INT, DBL = 0, 2  # datatype codes (engine.exec.functions._DT_INT / _DT_DBL)
INT_SFX = "^^<" + XSD_INTEGER + ">"
DBL_SFX = "^^<" + XSD_DOUBLE + ">"
#: fewer distinct values than this are interned by their keys (the fixed costs here would not pay)
LAZY_MIN = 256
_EXACT = 2.0**53
_NAN_BITS = np.array([np.nan]).view(np.int64)[0]
_KEY_BYTES = 64  # a written key (~20 bytes of digits and ~45 of datatype) and its offset


def value_keys(vals: np.ndarray, code: int) -> np.ndarray:
    """The int64 key a value is indexed by: the integer itself, a double's bit
    pattern (NaNs made one; -0.0 and 0.0 apart: their lexical forms differ)."""
    if code == INT:
        return np.asarray(vals, dtype=np.int64)
    bits = np.asarray(vals, dtype=np.float64).view(np.int64).copy()
    bits[np.isnan(np.asarray(vals, dtype=np.float64))] = _NAN_BITS
    return bits


def canonical_keys(vals: np.ndarray, code: int) -> pa.Array:
    """Canonical term keys of integers (int64) or doubles (float64), column-wise."""
    if code == INT:
        digits = pc.cast(pa.array(np.asarray(vals, dtype=np.int64)), pa.large_string())
        return pc.binary_join_element_wise(pa.scalar('"', pa.large_string()), digits,
                                           pa.scalar('"' + INT_SFX, pa.large_string()), pa.scalar("", pa.large_string()))
    return V.format_doubles_arrow(np.asarray(vals, dtype=np.float64), '"', '"' + DBL_SFX).cast(pa.large_string())


# ---------------------------------------------------------------- the store's numbers, per dictionary

_STORE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_STORE_LOCK = threading.Lock()


def store_values(d) -> np.ndarray | None:
    """Sorted distinct finite numeric values of the store dictionary's terms (its
    numeric side array), memoised per dictionary and size (append-only: ids keep
    their meaning); None when the dictionary cannot give them."""
    if not (hasattr(d, "numeric") and hasattr(d, "lookup_many") and hasattr(d, "__len__")):
        return None
    n = len(d)
    try:
        got = _STORE.get(d)
    except TypeError:
        got = None
    if got is not None and got[0] == n:
        return got[1]
    with _STORE_LOCK:
        got = _STORE.get(d)
        if got is not None and got[0] == n:
            return got[1]
        if got is not None and got[0] < n:  # the new terms' values merged in
            new = np.asarray(d.numeric(np.arange(got[0], n, dtype=np.int64)), dtype=np.float64)
            vals = np.concatenate([got[1], new[np.isfinite(new)]])
        else:
            vals = np.asarray(d.numeric(np.arange(n, dtype=np.int64)), dtype=np.float64) if n else np.zeros(0)
            vals = vals[np.isfinite(vals)]
        vals.sort()
        if len(vals) > 1:
            keep = np.ones(len(vals), dtype=bool)
            keep[1:] = vals[1:] != vals[:-1]
            vals = vals[keep]
        try:
            _STORE[d] = (n, vals)
        except TypeError:
            pass
        return vals


def maybe_in(sorted_vals: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Which of ``x`` may equal a value of ``sorted_vals`` (non-finite ones always may)."""
    out = ~np.isfinite(x)
    if len(sorted_vals):  # by hashing (+0.0: -0.0 hashes apart from 0.0 but equals it)
        hit = pc.is_in(pa.array(x + 0.0), value_set=pa.array(sorted_vals + 0.0))
        out |= np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
    return out


class LazyNumbers:
    """The lazy band of one query: values, datatype codes and, per code, the value keys
    and their ids (looked up by hashing); the keys written so far (a prefix of the band)."""

    __slots__ = ("n", "_vals", "_ints", "_codes", "_chunks", "_index", "_keys")

    def __init__(self):
        self.n = 0
        self._vals = np.zeros(0)
        self._ints = np.zeros(0, dtype=np.int64)
        self._codes = np.zeros(0, dtype=np.int8)
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._index: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._keys: pa.Array | None = None

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._chunks:
            vs, ints, cs = zip(*self._chunks, strict=True)
            self._vals = np.concatenate([self._vals, *vs])
            self._ints = np.concatenate([self._ints, *ints])
            self._codes = np.concatenate([self._codes, *cs])
            self._chunks = []
        return self._vals, self._ints, self._codes

    def add(self, keys: np.ndarray, code: int) -> np.ndarray:
        """New ids for distinct value keys (:func:`value_keys`) found nowhere else."""
        m = len(keys)
        ids = np.arange(LAZY_BASE + self.n, LAZY_BASE + self.n + m, dtype=np.int64)
        if code == INT:
            ints = np.asarray(keys, dtype=np.int64)
            vals = ints.astype(np.float64)
        else:
            vals = np.asarray(keys, dtype=np.int64).view(np.float64)
            ints = np.zeros(m, dtype=np.int64)
        self._chunks.append((vals, ints, np.full(m, code, dtype=np.int8)))
        self.n += m
        have = self._index.get(code)
        k = np.asarray(keys, dtype=np.int64)
        self._index[code] = (k, ids) if have is None else (np.concatenate([have[0], k]), np.concatenate([have[1], ids]))
        return ids

    def lookup(self, keys: np.ndarray, code: int) -> np.ndarray:
        """Ids of value keys among the lazy values of ``code``, -1 where absent (Arrow's
        hashing: no sort of either side)."""
        out = np.full(len(keys), -1, dtype=np.int64)
        have = self._index.get(code)
        if have is None or not len(keys) or not len(have[0]):
            return out
        at = pc.index_in(pa.array(np.asarray(keys, dtype=np.int64)), value_set=pa.array(have[0]))
        pos = np.asarray(at.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
        hit = pos >= 0
        out[hit] = have[1][pos[hit]]
        return out

    def values(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(float64 values, datatype codes) of lazy ids."""
        vals, _, codes = self._arrays()
        j = np.asarray(ids, dtype=np.int64) - LAZY_BASE
        return vals[j], codes[j]

    def keys_arrow(self, ids: np.ndarray, hold=None) -> pa.Array:
        """Keys of lazy ids: the band's keys written up to the highest id asked, once
        (``hold(nbytes)``: the query's memory budget told before they are written)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return pa.array([], pa.large_string())
        j = ids - LAZY_BASE
        need = int(j.max()) + 1
        have = self._keys
        done = 0 if have is None else len(have)
        if done < need:
            if hold is not None:
                hold(_KEY_BYTES * (need - done))
            vals, ints, codes = self._arrays()
            parts = [] if have is None else [have]
            start = done
            while start < need:  # runs of one code
                c = int(codes[start])
                diff = np.flatnonzero(codes[start:need] != c)
                end = need if not len(diff) else start + int(diff[0])
                parts.append(canonical_keys(ints[start:end] if c == INT else vals[start:end], c))
                start = end
            have = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
            self._keys = have
        return have.take(pa.array(j))

    def find(self, keys: pa.Array) -> np.ndarray:
        """Ids of the lazy values whose canonical key is among ``keys`` (an Arrow
        string array of keys the store does not hold), -1 elsewhere: a key interned
        after its value was made lazily gets the same id."""
        from engine.kv.dictionary import numeric_values  # noqa: PLC0415

        keys = keys.cast(pa.large_string())
        out = np.full(len(keys), -1, dtype=np.int64)
        if not self.n or not len(keys):
            return out
        for code, sfx in ((INT, INT_SFX), (DBL, DBL_SFX)):
            if code not in self._index:
                continue
            sel = np.flatnonzero(pc.fill_null(pc.ends_with(keys, sfx), False).to_numpy(zero_copy_only=False))
            if not len(sel):
                continue
            sub = keys.take(pa.array(sel))
            nums = numeric_values(sub)
            if code == INT:
                ok = np.isfinite(nums) & (np.abs(nums) < _EXACT)
                kv = np.where(ok, nums, 0).astype(np.int64)
            else:
                ok = np.ones(len(sub), dtype=bool)
                kv = value_keys(nums, DBL)
            got = self.lookup(kv, code)
            got[~ok] = -1
            hit = np.flatnonzero(got >= 0)
            if len(hit):  # only canonical spellings are the same term
                _, ints, _ = self._arrays()
                j = got[hit] - LAZY_BASE
                mine = canonical_keys(ints[j] if code == INT else self._vals[j], code)
                same = pc.equal(mine, sub.take(pa.array(hit))).to_numpy(zero_copy_only=False)
                out[sel[hit[same]]] = got[hit[same]]
        return out
