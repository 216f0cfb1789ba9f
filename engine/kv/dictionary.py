"""Term dictionary: canonical key string <-> dense integer id.

No per-term Python objects: all keys live in one UTF-8 byte blob (``uint8``,
grown by doubling) addressed by ``int64`` offsets; the hash index is a sorted
``uint64`` array of key hashes with the matching ids (lookup = hash the key,
``searchsorted``, compare bytes). Hashes are computed with numpy over whole
batches (a polynomial hash over the bytes, wrapped at 2**64, then a 64-bit
finalizer), and the same function hashes single keys.

The dictionary is append-only: ids are dense from 0 and never reused, so a
reader holding an id ``< len(d)`` can always decode it, even while a writer
appends. Writers (``encode``) must be serialized by the caller (the store's
writer lock); readers need no lock: every mutable array is replaced by a new
object or only written beyond the published length.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.exec.values import MAX_INTEGER_DIGITS, parse_integer
from engine.terms import XSD

_MASK = (1 << 64) - 1
_P = 0x100000001B3  # FNV prime, used as the polynomial base
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_HASH_CHUNK_BYTES = 1 << 18  # bytes hashed per vectorized pass (bounds temporaries and tables)

_INT_TYPES = {
    "integer": (None, None),
    "nonPositiveInteger": (None, 0),
    "negativeInteger": (None, -1),
    "nonNegativeInteger": (0, None),
    "positiveInteger": (1, None),
    "long": (-(2**63), 2**63 - 1),
    "int": (-(2**31), 2**31 - 1),
    "short": (-(2**15), 2**15 - 1),
    "byte": (-128, 127),
    "unsignedLong": (0, 2**64 - 1),
    "unsignedInt": (0, 2**32 - 1),
    "unsignedShort": (0, 2**16 - 1),
    "unsignedByte": (0, 255),
}
_XSD_RE = XSD.replace(".", r"\.")
_NUM_SUFFIX_RE = r'"\^\^<' + _XSD_RE + r"(?P<dt>[A-Za-z]+)>$"
_NUM_KEY_RE = r'^"(?P<lex>[^"\\]*)' + _NUM_SUFFIX_RE
_INT_LEX = r"^[+-]?[0-9]+$"
_DEC_LEX = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$"
_FLT_LEX = r"^([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?INF|NaN)$"


# --------------------------------------------------------------------- hashing
_pow_lock = threading.Lock()
_pow_table = np.ones(1, dtype=np.uint64)
_ipow_table = np.ones(1, dtype=np.uint64)
_PINV = pow(_P, -1, 1 << 64)


def _powers() -> tuple[np.ndarray, np.ndarray]:
    """(P**k, P**-k) mod 2**64 for k <= _HASH_CHUNK_BYTES (uint64), built once."""
    global _pow_table, _ipow_table
    t, it = _pow_table, _ipow_table
    if len(t) > _HASH_CHUNK_BYTES:
        return t, it
    with _pow_lock:
        size = _HASH_CHUNK_BYTES + 1
        base = np.full(size, _P, dtype=np.uint64)
        base[0] = 1
        ibase = np.full(size, _PINV, dtype=np.uint64)
        ibase[0] = 1
        _ipow_table = np.cumprod(ibase, dtype=np.uint64)  # wraps modulo 2**64
        _pow_table = np.cumprod(base, dtype=np.uint64)
        return _pow_table, _ipow_table


#: keys up to this many bytes are hashed in plain Python (a Horner loop beats the numpy calls)
_SMALL_POLY = 96


def _poly(b: bytes) -> int:
    """sum b[j] * P**j mod 2**64, block by block (any length)."""
    if len(b) <= _SMALL_POLY:
        h = 0
        for x in reversed(b):
            h = (h * _P + x) & _MASK
        return h
    pw = _powers()[0]
    h = 0
    step = _HASH_CHUNK_BYTES
    for k in range(0, len(b), step):
        arr = np.frombuffer(b, dtype=np.uint8, count=min(step, len(b) - k), offset=k).astype(np.uint64)
        part = int(np.sum(arr * pw[: len(arr)], dtype=np.uint64))
        h = (h + part * pow(_P, k, 1 << 64)) & _MASK
    return h


def _finalize(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(_M1)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(_M2)
    return h ^ (h >> np.uint64(31))


def hash_key(key: str | bytes) -> int:
    """64-bit hash of one key (the same function as :func:`hash_batch`)."""
    b = key.encode("utf-8") if isinstance(key, str) else key
    h = (_poly(b) + len(b) * _M2) & _MASK
    h ^= h >> 30
    h = (h * _M1) & _MASK
    h ^= h >> 27
    h = (h * _M2) & _MASK
    return h ^ (h >> 31)


def hash_batch(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Hashes of the keys ``data[offsets[i]:offsets[i+1]]`` (uint64).

    ``data`` is a uint8 array, ``offsets`` int64 of length n+1 (keys may be
    empty). Works in chunks of about 256 KB of key bytes.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.uint64)
    if n <= 0:
        return out
    lens = np.diff(offsets)
    pw, ipw = _powers()
    i = 0
    cum = offsets - offsets[0]
    while i < n:
        # take keys until ~_HASH_CHUNK_BYTES bytes (at least one key)
        j = int(np.searchsorted(cum, cum[i] + _HASH_CHUNK_BYTES, side="right")) - 1
        j = min(max(j, i + 1), n)
        lo, hi = int(offsets[i]), int(offsets[j])
        if hi - lo > _HASH_CHUNK_BYTES:  # one key longer than a chunk
            out[i] = _poly(data[lo:hi].tobytes())
        elif hi > lo:
            # sum_j b[j] P**(j-start) = P**-start * (prefix(end) - prefix(start)), all mod 2**64
            w = data[lo:hi].astype(np.uint64)
            w *= pw[: hi - lo]
            c = np.empty(hi - lo + 1, dtype=np.uint64)
            c[0] = 0
            np.cumsum(w, out=c[1:])
            st = offsets[i:j] - lo
            out[i:j] = (c[st + lens[i:j]] - c[st]) * ipw[st]
        i = j
    out = out + lens.astype(np.uint64) * np.uint64(_M2)
    return _finalize(out)


# ------------------------------------------------------------------ arrow utils
def _as_large_string(keys) -> pa.LargeStringArray:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if isinstance(keys, pa.Array):
        if keys.type != pa.large_string():
            keys = keys.cast(pa.large_string())
        return keys
    return pa.array(list(keys) if not isinstance(keys, list) else keys, type=pa.large_string())


def _arrow_bytes(arr: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 data, int64 offsets starting anywhere) of a large_string array, zero-copy."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offsets


# ------------------------------------------------------------------ numeric
#: up to this many keys :func:`numeric_values` works in plain Python (a stream POST's few new
#: terms: the vectorized path's dozen Arrow calls cost more than a regex a key)
_SMALL_NUMERIC = 32
_NUM_KEY_PY = re.compile(_NUM_KEY_RE)
_INT_LEX_PY, _DEC_LEX_PY, _FLT_LEX_PY = re.compile(_INT_LEX), re.compile(_DEC_LEX), re.compile(_FLT_LEX)


def _numeric_small(keys: list[str]) -> np.ndarray:
    """:func:`numeric_values` of a few keys, one at a time with the same patterns and rules
    (``fullmatch``: ``$`` must not match before a final newline, as in RE2)."""
    out = np.full(len(keys), np.nan)
    for i, k in enumerate(keys):
        m = _NUM_KEY_PY.fullmatch(k)
        if m is None:
            continue
        lex, name = m.group("lex"), m.group("dt")
        if name in _INT_TYPES:
            if not _INT_LEX_PY.fullmatch(lex) or len(lex.lstrip("+-0")) > MAX_INTEGER_DIGITS:
                continue
            v = float(lex)
            lo, hi = _INT_TYPES[name]
            if abs(v) >= 2.0**52:
                e = parse_integer(lex)
                if (lo is not None and e < lo) or (hi is not None and e > hi):
                    continue
            elif (lo is not None and v < lo) or (hi is not None and v > hi):
                continue
            out[i] = v
        elif name == "decimal":
            if _DEC_LEX_PY.fullmatch(lex):
                out[i] = float(lex)
        elif name in ("float", "double"):
            if _FLT_LEX_PY.fullmatch(lex):
                out[i] = float(lex)
    return out


def numeric_values(keys: pa.LargeStringArray) -> np.ndarray:
    """float64 value of each key that is a valid xsd numeric literal, else NaN."""
    n = len(keys)
    if 0 < n <= _SMALL_NUMERIC:
        return _numeric_small(keys.to_pylist())
    out = np.full(n, np.nan)
    if n == 0:
        return out
    cand = pc.match_substring_regex(keys, _NUM_SUFFIX_RE)
    idx = np.flatnonzero(cand.to_numpy(zero_copy_only=False))
    if len(idx) == 0:
        return out
    sub = keys.take(pa.array(idx))
    parts = pc.extract_regex(sub, _NUM_KEY_RE)
    ok = parts.is_valid().to_numpy(zero_copy_only=False)
    lex = parts.field("lex")
    dt = parts.field("dt")
    for name in pc.unique(dt.filter(parts.is_valid())).to_pylist():
        sel = ok & pc.equal(dt, name).fill_null(False).to_numpy(zero_copy_only=False)
        if not sel.any():
            continue
        rows = np.flatnonzero(sel)
        lx = lex.take(pa.array(rows))
        if name in _INT_TYPES:
            pattern = _INT_LEX
        elif name == "decimal":
            pattern = _DEC_LEX
        elif name in ("float", "double"):
            pattern = _FLT_LEX
        else:
            continue
        valid = pc.match_substring_regex(lx, pattern).to_numpy(zero_copy_only=False)
        if name in _INT_TYPES:  # beyond the exact-integer limit: not numeric (engine.exec.values)
            sig = pc.utf8_length(pc.utf8_ltrim(lx, characters="+-0")).to_numpy(zero_copy_only=False)
            valid &= sig <= MAX_INTEGER_DIGITS
        rows, lx = rows[valid], lx.filter(pa.array(valid))
        if len(rows) == 0:
            continue
        vals = _cast_float(lx)
        if name in _INT_TYPES:
            lo, hi = _INT_TYPES[name]
            good = np.ones(len(vals), dtype=bool)
            if lo is not None or hi is not None:
                # exact range check for values near the bounds
                near = np.flatnonzero(np.abs(vals) >= 2.0**52)
                if lo is not None:
                    good &= vals >= lo
                if hi is not None:
                    good &= vals <= hi
                for k in near:
                    v = parse_integer(lx[int(k)].as_py())
                    good[k] = (lo is None or v >= lo) and (hi is None or v <= hi)
            rows, vals = rows[good], vals[good]
        out[idx[rows]] = vals
    return out


def _cast_float(lx: pa.Array) -> np.ndarray:
    try:
        return pc.cast(lx, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        vals = []
        for s in lx.to_pylist():
            try:
                vals.append(float(s))
            except ValueError:
                vals.append(float("nan"))
        return np.array(vals, dtype=np.float64)


# ------------------------------------------------------------------ dictionary
#: a key's first byte -> its kind as Dictionary.kinds gives it
#: up to this many ids :meth:`Dictionary.kinds` checks their range in plain Python
_SMALL_KINDS = 64
#: up to this many keys :meth:`Dictionary.encode` works key by key (:meth:`Dictionary._encode_few`)
_SMALL_ENCODE = 32
#: entries of the second, small sorted hash index that new keys go to; past it (or past the
#: main index's size) both are merged. Why: an append used to insert into the one sorted index,
#: a copy of all of it -- on a store of 10M terms ~170 ms for every stream POST with one new
#: term; now it copies at most this many entries, and the whole index once per this many new keys
_RECENT_MAX = 1 << 16
_EMPTY_H = np.zeros(0, np.uint64)
_EMPTY_I = np.zeros(0, np.int64)
_KIND_OF_FIRST = np.full(256, -1, dtype=np.int8)
_KIND_OF_FIRST[ord("<")], _KIND_OF_FIRST[ord("_")], _KIND_OF_FIRST[ord('"')] = 0, 1, 2


class Dictionary:
    """Append-only key <-> id map (see module docstring)."""

    def __init__(self) -> None:
        self._blob = np.zeros(1 << 16, dtype=np.uint8)
        self._offsets = np.zeros(1 << 12, dtype=np.int64)
        self._numeric = np.full(1 << 12, np.nan)
        self._n = 0
        # sorted hashes and matching ids, and the small sorted index of recent keys (hashes,
        # ids): replaced together (readers take the tuple; a key is in one of the two)
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = (_EMPTY_H, _EMPTY_I, _EMPTY_H, _EMPTY_I)
        self._arrow_cache: tuple[int, pa.LargeStringArray] | None = None
        self.persisted_n = 0  # number of ids already written to disk (persist.py)

    # ------------------------------------------------------------ basics
    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Resident bytes of the used part of the arrays."""
        n = self._n
        return int(self._offsets[n]) + 8 * (n + 1) + 8 * n + sum(a.nbytes for a in self._index)

    @property
    def capacity_bytes(self) -> int:
        return self._blob.nbytes + self._offsets.nbytes + self._numeric.nbytes + sum(a.nbytes for a in self._index)

    def key(self, id: int) -> str:
        id = int(id)
        if not 0 <= id < self._n:
            raise KeyError(id)
        off = self._offsets
        return self._blob[off[id] : off[id + 1]].tobytes().decode("utf-8")

    def as_arrow(self) -> pa.LargeStringArray:
        """All keys as one large_string array (zero-copy view of the blob)."""
        n = self._n
        c = self._arrow_cache
        if c is not None and c[0] == n:
            return c[1]
        off = self._offsets
        blob = self._blob
        arr = pa.LargeStringArray.from_buffers(
            n, pa.py_buffer(off[: n + 1]), pa.py_buffer(blob[: int(off[n])])
        )
        self._arrow_cache = (n, arr)
        return arr

    def keys_arrow(self, ids: np.ndarray) -> pa.LargeStringArray:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= self._n):
            raise KeyError("id out of range")
        return self.as_arrow().take(pa.array(ids))

    def keys(self, ids: np.ndarray) -> list[str]:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return []
        if len(ids) <= 256:
            # small results: slicing the blob directly beats pyarrow's take
            if ids.min() < 0 or ids.max() >= self._n:
                raise KeyError("id out of range")
            off = self._offsets
            mv = memoryview(self._blob)
            starts = off[ids].tolist()
            ends = off[ids + 1].tolist()
            return [str(mv[s:e], "utf-8") for s, e in zip(starts, ends, strict=True)]
        return self.keys_arrow(ids).to_pylist()

    def numeric(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        n = self._n
        ok = (ids >= 0) & (ids < n)
        if ok.all():
            return self._numeric[ids]
        out = np.full(len(ids), np.nan)
        out[ok] = self._numeric[ids[ok]]
        return out

    def ids_of_number(self, value: float) -> np.ndarray:
        """Ids of the numeric literals whose value (the side array) is ``value``, any datatype
        or lexical form: the candidates of ``?v = 23`` (engine/exec/const_filter.py)."""
        return np.flatnonzero(self._numeric[: self._n] == value).astype(np.int64)

    def kinds(self, ids: np.ndarray) -> np.ndarray:
        """int8 per id: 0 IRI, 1 blank node, 2 literal (-1 for ids not in the dictionary)."""
        ids = np.asarray(ids, dtype=np.int64)
        n = self._n
        k = len(ids)
        if k and k <= _SMALL_KINDS:  # (a few ids: Python's min/max of a list beat two numpy reductions)
            lst = ids.tolist()
            if min(lst) >= 0 and max(lst) < n:
                return _KIND_OF_FIRST[self._blob[self._offsets[ids]]]
        elif k and int(ids.min()) >= 0 and int(ids.max()) < n:  # (the usual case: two array reads)
            return _KIND_OF_FIRST[self._blob[self._offsets[ids]]]
        ok = (ids >= 0) & (ids < n)
        first = np.zeros(len(ids), dtype=np.uint8)
        first[ok] = self._blob[self._offsets[ids[ok]]]
        out = np.full(len(ids), -1, dtype=np.int8)
        out[first == ord("<")] = 0
        out[first == ord("_")] = 1
        out[first == ord('"')] = 2
        return out

    # ------------------------------------------------------------ lookup
    def lookup(self, key: str) -> int:
        b = key.encode("utf-8", "surrogatepass")  # lone surrogates never match a stored key
        h = np.uint64(hash_key(b))
        mh, mi, rh, ri = self._index
        off, blob = self._offsets, self._blob
        for hashes, ids in ((mh, mi), (rh, ri)):
            lo = int(np.searchsorted(hashes, h, side="left"))
            while lo < len(hashes) and hashes[lo] == h:
                i = int(ids[lo])
                if blob[off[i] : off[i + 1]].tobytes() == b:
                    return i
                lo += 1
        return -1

    def lookup_many(self, keys: Sequence[str] | pa.Array) -> np.ndarray:
        arr = _as_large_string(keys)
        data, offsets = _arrow_bytes(arr)
        return self._find(arr, hash_batch(data, offsets))

    def _find(self, arr: pa.LargeStringArray, hq: np.ndarray) -> np.ndarray:
        """ids of the keys of ``arr`` (whose hashes are ``hq``); -1 if absent."""
        n = len(hq)
        res = np.full(n, -1, dtype=np.int64)
        mh, mi, rh, ri = self._index
        if n == 0:
            return res
        self._find_in(mh, mi, arr, hq, res)
        if len(rh):
            miss = np.flatnonzero(res < 0)
            if len(miss):
                sub = np.full(len(miss), -1, dtype=np.int64)
                self._find_in(rh, ri, arr if len(miss) == n else arr.take(pa.array(miss)), hq[miss], sub)
                res[miss] = sub
        return res

    def _find_in(self, hashes: np.ndarray, hids: np.ndarray, arr: pa.LargeStringArray, hq: np.ndarray,
                 res: np.ndarray) -> None:
        """:meth:`_find` over one sorted index: the found ids into ``res``."""
        n = len(hq)
        if len(hashes) == 0:
            return
        lo = np.searchsorted(hashes, hq, side="left")
        lo_c = np.minimum(lo, len(hashes) - 1)
        hit = hashes[lo_c] == hq
        one = np.flatnonzero(hit)
        if len(one):
            cand = hids[lo_c[one]].astype(np.int64)
            stored = self.as_arrow().take(pa.array(cand))
            query = arr if len(one) == n else arr.take(pa.array(one))
            ok = pc.equal(stored, query).to_numpy(zero_copy_only=False)
            res[one[ok]] = cand[ok]
            # a mismatch may be a hash collision: look at the other entries of that hash
            for q in one[~ok]:
                qb = arr[int(q)].as_py().encode("utf-8")
                off, blob = self._offsets, self._blob
                k = int(lo[q]) + 1
                while k < len(hashes) and hashes[k] == hq[q]:
                    i = int(hids[k])
                    if blob[off[i] : off[i + 1]].tobytes() == qb:
                        res[q] = i
                        break
                    k += 1

    # ------------------------------------------------------------ encode
    def encode(self, keys: Sequence[str] | pa.Array) -> np.ndarray:
        """ids of ``keys``, interning the missing ones (caller holds the writer lock)."""
        if isinstance(keys, pa.DictionaryArray):
            if keys.null_count:
                raise ValueError("null key")
            idx = keys.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            values = keys.dictionary
            used = np.bincount(idx, minlength=len(values)) > 0
            if used.all():
                return self.encode(values)[idx]
            # intern only the values the rows use (a filtered array keeps its whole dictionary)
            pos = np.flatnonzero(used)
            remap = np.full(len(values), -1, dtype=np.int64)
            remap[pos] = self.encode(values.take(pa.array(pos)))
            return remap[idx]
        arr = _as_large_string(keys)
        if len(arr) == 0:
            return np.zeros(0, dtype=np.int64)
        if arr.null_count:
            raise ValueError("null key")
        if len(arr) == 1:
            return np.array([self._encode_one(arr[0].as_py())], dtype=np.int64)
        if len(arr) <= _SMALL_ENCODE:
            return self._encode_few(arr.to_pylist())
        denc = pc.dictionary_encode(arr)
        uniq = denc.dictionary
        if uniq.type != pa.large_string():
            uniq = uniq.cast(pa.large_string())
        codes = denc.indices.to_numpy(zero_copy_only=False)
        uids = self._encode_unique(uniq)
        return uids[codes]

    def _encode_one(self, key: str) -> int:
        i = self.lookup(key)
        if i >= 0:
            return i
        return int(self._encode_unique(pa.array([key], type=pa.large_string()))[0])

    def _encode_few(self, keys: list[str]) -> np.ndarray:
        """:meth:`encode` of a few keys (a stream POST's): hashed and looked up one by one in
        plain Python, the new ones appended by the same code as a large batch's, in the same
        order (first occurrence first)."""
        uniq = list(dict.fromkeys(keys))
        raw = [k.encode("utf-8") for k in uniq]
        hs = [hash_key(b) for b in raw]
        hq = np.array(hs, dtype=np.uint64)
        ids = np.full(len(uniq), -1, dtype=np.int64)
        mh, mi, rh, ri = self._index
        off, blob = self._offsets, self._blob
        for hashes, hids in ((mh, mi), (rh, ri)):
            nh = len(hashes)
            if not nh:
                continue
            for j, lo in enumerate(np.searchsorted(hashes, hq, side="left").tolist()):
                if ids[j] >= 0:
                    continue
                h = hs[j]
                while lo < nh and int(hashes[lo]) == h:
                    i = int(hids[lo])
                    if blob[off[i] : off[i + 1]].tobytes() == raw[j]:
                        ids[j] = i
                        break
                    lo += 1
        new = np.flatnonzero(ids < 0)
        if len(new):
            fresh = pa.array([uniq[j] for j in new.tolist()], type=pa.large_string())
            data, offsets = _arrow_bytes(fresh)
            ids[new] = self._append_new(fresh, data, offsets, hq[new], np.arange(len(new)))
        if len(uniq) == len(keys):
            return ids
        pos = {k: j for j, k in enumerate(uniq)}
        return ids[[pos[k] for k in keys]]

    def _encode_unique(self, uniq: pa.LargeStringArray) -> np.ndarray:
        data, offsets = _arrow_bytes(uniq)
        hq = hash_batch(data, offsets)
        ids = self._find(uniq, hq)
        new = np.flatnonzero(ids < 0)
        if len(new) == 0:
            return ids
        ids[new] = self._append_new(uniq, data, offsets, hq, new)
        return ids

    def _append_new(self, uniq: pa.LargeStringArray, data: np.ndarray, offsets: np.ndarray, hq: np.ndarray,
                    new: np.ndarray) -> np.ndarray:
        """Append the keys ``uniq[new]`` (absent, distinct; ``hq`` the hashes of ``uniq``):
        their new ids, in order."""
        k = len(new)
        n0 = self._n
        new_ids = np.arange(n0, n0 + k, dtype=np.int64)
        # --- append bytes
        lens = offsets[new + 1] - offsets[new]
        total = int(lens.sum())
        start = int(self._offsets[n0])
        self._reserve(start + total, n0 + k)
        if k == len(uniq):
            self._blob[start : start + total] = data[offsets[0] : offsets[-1]]
        else:
            within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
            self._blob[start : start + total] = data[np.repeat(offsets[new], lens) + within]
        self._offsets[n0 + 1 : n0 + k + 1] = start + np.cumsum(lens)
        newkeys = uniq if k == len(uniq) else uniq.take(pa.array(new))
        self._numeric[n0 : n0 + k] = numeric_values(newkeys)
        # --- merge the hash index
        hn = hq[new]
        order = np.argsort(hn, kind="stable")
        self._add_index(hn[order], new_ids[order], n0 + k)
        self._n = n0 + k  # publish last
        return new_ids

    def _add_index(self, hn: np.ndarray, idn: np.ndarray, n: int) -> None:
        """Sorted entries (``hn``, ``idn``) into the recent index, or both indexes merged into
        the main one when the recent one would pass :data:`_RECENT_MAX` or the main one's size
        (``n``: the ids after this append)."""
        mh, mi, rh, ri = self._index
        id_dtype = np.int32 if n < 2**31 else np.int64
        idn = idn.astype(id_dtype, copy=False)
        pos = np.searchsorted(rh, hn, side="right")
        rh, ri = np.insert(rh, pos, hn), np.insert(ri.astype(id_dtype, copy=False), pos, idn)
        if len(rh) > _RECENT_MAX or len(rh) > len(mh):
            pos = np.searchsorted(mh, rh, side="right")
            self._index = (np.insert(mh, pos, rh), np.insert(mi.astype(id_dtype, copy=False), pos, ri), _EMPTY_H, _EMPTY_I)
        else:
            self._index = (mh, mi, rh, ri)

    def _merged_index(self) -> tuple[np.ndarray, np.ndarray]:
        """The two sorted indexes as one (a copy when the recent one holds entries)."""
        mh, mi, rh, ri = self._index
        if not len(rh):
            return mh, mi
        pos = np.searchsorted(mh, rh, side="right")
        dt = np.int64 if mi.dtype == np.int64 or ri.dtype == np.int64 else np.int32
        return np.insert(mh, pos, rh), np.insert(mi.astype(dt, copy=False), pos, ri.astype(dt, copy=False))

    def _reserve(self, nbytes: int, n: int) -> None:
        if nbytes > len(self._blob) or n + 1 > len(self._offsets):
            self._arrow_cache = None  # do not keep the old arrays alive
        if nbytes > len(self._blob):
            cap = max(nbytes, 2 * len(self._blob))
            nb = np.zeros(cap, dtype=np.uint8)
            used = int(self._offsets[self._n])
            nb[:used] = self._blob[:used]
            self._blob = nb
        if n + 1 > len(self._offsets):
            cap = max(n + 1, 2 * len(self._offsets))
            no = np.zeros(cap, dtype=np.int64)
            no[: self._n + 1] = self._offsets[: self._n + 1]
            nn = np.full(cap, np.nan)
            nn[: self._n] = self._numeric[: self._n]
            self._offsets = no
            self._numeric = nn

    # ------------------------------------------------------------ persistence helpers
    def raw_arrays(self) -> dict[str, np.ndarray]:
        """Views of the used parts of the arrays (for persistence / stats)."""
        n = self._n
        h, i = self._merged_index()
        return {
            "blob": self._blob[: int(self._offsets[n])],
            "offsets": self._offsets[: n + 1],
            "numeric": self._numeric[:n],
            "hashes": h,
            "hash_ids": i,
        }

    def use_persisted(self, blob, offsets, numeric, hashes, hash_ids) -> None:
        """Hold these arrays (a persisted chunk holding every id, memory-mapped; ``offsets``
        the chunk's end offsets) instead of its own: the same content without a heap copy,
        shared by every process mapping the file. The next append copies them to the heap
        (:meth:`_reserve`: a mapped array has no room to grow)."""
        n = len(offsets)
        if n != self._n and self._n:
            raise ValueError("the chunk does not hold this dictionary")
        self._arrow_cache = None
        self._blob = blob if n else np.zeros(1 << 16, dtype=np.uint8)
        self._offsets = np.concatenate([np.zeros(1, np.int64), np.asarray(offsets, dtype=np.int64)])
        self._numeric = numeric
        self._index = (hashes, hash_ids, _EMPTY_H, _EMPTY_I)
        self._n = n
        self.persisted_n = n

    def extend_persisted(self, blob, offsets, numeric, hashes, hash_ids) -> None:
        """Append a chunk :mod:`engine.kv.persist` wrote (the ids ``len(self)`` on: its
        bytes, absolute end offsets, numeric values and sorted (hash, id) entries): how a
        read-only process follows the writer's dictionary without re-reading it all."""
        k = len(offsets)
        if k == 0:
            return
        n0 = self._n
        start = int(self._offsets[n0])
        total = len(blob)
        if int(offsets[-1]) != start + total:
            raise ValueError(f"dictionary chunk does not continue this dictionary ({n0} ids, {start} bytes; "
                             f"chunk of {k} ids, {total} bytes, ending at {int(offsets[-1])})")
        self._reserve(start + total, n0 + k)
        self._blob[start : start + total] = blob
        self._offsets[n0 + 1 : n0 + k + 1] = offsets
        self._numeric[n0 : n0 + k] = numeric
        self._add_index(np.asarray(hashes, dtype=np.uint64), np.asarray(hash_ids), n0 + k)
        self._n = n0 + k  # publish last

    @classmethod
    def from_arrays(cls, blob, offsets, numeric, hashes, hash_ids) -> Dictionary:
        d = cls()
        n = len(offsets) - 1
        d._blob = np.array(blob, dtype=np.uint8)
        d._offsets = np.array(offsets, dtype=np.int64)
        d._numeric = np.array(numeric, dtype=np.float64)
        d._index = (hashes, hash_ids, _EMPTY_H, _EMPTY_I)
        d._n = n
        d.persisted_n = n
        if len(d._blob) == 0:
            d._blob = np.zeros(1 << 16, dtype=np.uint8)
        return d
