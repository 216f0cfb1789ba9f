"""Stream adaptor: turn one POST body into admitted, interned stream batches.

Input formats (contract "HTTP API", ``POST /streams/{name}``):

* ndjson (:func:`parse_ndjson`): one JSON object a line ``{"s", "p", "o", "t"}``
  with the terms in N-Triples syntax. Bad lines are reported with their 1-based
  line number and the good lines are kept. Fast path: pyarrow's JSON reader
  plus the vectorized N-Triples parser of :mod:`engine.kv.loader` (no Python
  work per line); only a body with at least one bad line goes through the
  per-line path, which finds and reports the bad lines.
* graph bodies (:func:`parse_graph`): one N-Triples / Turtle document = one
  stream element; a syntax error raises :class:`~engine.errors.LoadError`.

:func:`split_elements` groups the admitted triples of a POST into stream
elements (the runs of equal timestamps) and :func:`timeless_mask` marks the
timeless triples (the stream's ``absorb`` setting: ``"none"``, ``"all"`` or a
list of predicates) that the manager absorbs into the store's default graph.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from engine.errors import LoadError
from engine.kv import loader
from engine.terms import canonical_key

__all__ = ["ParsedLines", "parse_ndjson", "parse_graph", "split_elements", "timeless_mask",
           "normalize_absorb"]

_SCHEMA = pa.schema([("s", pa.string()), ("p", pa.string()), ("o", pa.string()), ("t", pa.int64())])
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 13, 32]] = True


@dataclass
class ParsedLines:
    """Good lines of an ndjson body: key columns, timestamps (None where absent) and line numbers."""

    s: pa.Array
    p: pa.Array
    o: pa.Array
    t: np.ndarray            # int64; only meaningful where has_t
    has_t: np.ndarray        # bool
    line: np.ndarray         # 1-based line numbers, int64
    errors: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.line)


def _nonblank_lines(body: bytes) -> np.ndarray:
    """1-based numbers of the lines holding something other than whitespace."""
    if not body:
        return np.zeros(0, dtype=np.int64)
    b = np.frombuffer(body, dtype=np.uint8)
    nl = np.flatnonzero(b == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [len(b)]))
    cs = np.concatenate(([0], np.cumsum(~_WS[b], dtype=np.int64)))
    nonblank = (cs[ends] - cs[starts]) > 0
    return np.flatnonzero(nonblank).astype(np.int64) + 1


def _concat_bytes(arr: pa.Array) -> bytes:
    """All values of a string array without nulls, concatenated (read from its buffers)."""
    arr = arr.cast(pa.large_string())
    if len(arr) == 0:
        return b""
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    return data.to_pybytes()[int(offs[0]):int(offs[-1])]


def _fast_ndjson(body: bytes, need_t: bool, bnode_prefix: str) -> ParsedLines | None:
    lines = _nonblank_lines(body)
    if len(lines) == 0:
        e = pa.array([], pa.large_string())
        z = np.zeros(0, dtype=np.int64)
        return ParsedLines(e, e, e, z, np.zeros(0, dtype=bool), z)
    try:
        tab = pj.read_json(io.BytesIO(body), parse_options=pj.ParseOptions(
            explicit_schema=_SCHEMA, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if tab.num_rows != len(lines):
        return None
    s, p, o, t = (tab.column(k).combine_chunks() for k in ("s", "p", "o", "t"))
    if s.null_count or p.null_count or o.null_count or (need_t and t.null_count):
        return None
    nt = pc.binary_join_element_wise(s, p, o, " ")
    text = pc.binary_join_element_wise(nt, pa.scalar(" .\n"), "")
    payload = _concat_bytes(text)
    try:
        pk = loader.parse_to_keys(payload, "nt", bnode_prefix=bnode_prefix, name="<ndjson>")
    except LoadError:
        return None
    if len(pk) != len(lines):
        return None
    has_t = t.is_valid().to_numpy(zero_copy_only=False)
    tv = t.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return ParsedLines(pk.s, pk.p, pk.o, tv, has_t, lines)


def _line_term(v, where: str, bnode_prefix: str) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{where!r} must be a string holding a term in N-Triples syntax")
    k = canonical_key(v.strip())
    if where == "p" and k[0] != "<":
        raise ValueError("the predicate must be an IRI")
    if where == "s" and k[0] == '"':
        raise ValueError("the subject must be an IRI or a blank node")
    if k[0] == "_":
        k = "_:" + bnode_prefix + k[2:]
    return k


def _slow_ndjson(body: bytes, need_t: bool, bnode_prefix: str) -> ParsedLines:
    ss, ps, os_, ts, hts, lines, errors = [], [], [], [], [], [], []
    for i, raw in enumerate(body.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("a line must be a JSON object")
            for k in ("s", "p", "o"):
                if k not in obj:
                    raise ValueError(f"missing {k!r}")
            tv = obj.get("t") if need_t else None   # arrival clock: any t is ignored
            if tv is None:
                if need_t:
                    raise ValueError("missing 't' (event time in ms)")
            elif isinstance(tv, bool) or not isinstance(tv, int):
                raise ValueError("'t' must be an integer (ms)")
            elif not -(1 << 63) <= tv < (1 << 63):
                raise ValueError("'t' out of range")
            s = _line_term(obj["s"], "s", bnode_prefix)
            p = _line_term(obj["p"], "p", bnode_prefix)
            o = _line_term(obj["o"], "o", bnode_prefix)
        except (ValueError, orjson.JSONDecodeError) as e:
            errors.append({"line": i, "error": str(e)})
            continue
        ss.append(s)
        ps.append(p)
        os_.append(o)
        ts.append(0 if tv is None else tv)
        hts.append(tv is not None)
        lines.append(i)
    t = pa.large_string()
    return ParsedLines(pa.array(ss, t), pa.array(ps, t), pa.array(os_, t),
                       np.asarray(ts, dtype=np.int64), np.asarray(hts, dtype=bool),
                       np.asarray(lines, dtype=np.int64), errors)


def parse_ndjson(body: bytes, *, need_t: bool = True, bnode_prefix: str = "") -> ParsedLines:
    """Parse an ndjson body; bad lines land in ``errors`` (1-based line numbers)."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    fast = _fast_ndjson(bytes(body), need_t, bnode_prefix)
    if fast is not None:
        return fast
    return _slow_ndjson(bytes(body), need_t, bnode_prefix)


def parse_graph(data: bytes, media_type: str, *, bnode_prefix: str = "") -> loader.ParsedKeys:
    """Parse one graph body (atomic: LoadError on any syntax error)."""
    fmt = loader.format_for_media_type(media_type)
    if isinstance(data, str):
        data = data.encode("utf-8")
    return loader.parse_to_keys(bytes(data), fmt, bnode_prefix=bnode_prefix, name="<body>")


def split_elements(tau: np.ndarray) -> np.ndarray:
    """Start offsets of the stream elements (runs of equal timestamps) of an admitted batch."""
    tau = np.asarray(tau, dtype=np.int64)
    if len(tau) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(([0], np.flatnonzero(tau[1:] != tau[:-1]) + 1)).astype(np.int64)


def normalize_absorb(absorb) -> str | tuple[str, ...]:
    """``"none"`` / ``"all"`` / a sorted tuple of predicate IRIs (angle brackets stripped)."""
    if absorb is None:
        return "none"
    if isinstance(absorb, str):
        if absorb in ("none", "all"):
            return absorb
        raise ValueError('absorb must be "none", "all" or a list of predicate IRIs')
    if isinstance(absorb, (list, tuple)):
        out = []
        for a in absorb:
            if not isinstance(a, str) or not a:
                raise ValueError("absorb lists predicate IRIs (strings)")
            if a.startswith("<") and a.endswith(">"):
                a = a[1:-1]
            out.append(a)
        return tuple(sorted(set(out)))
    raise ValueError('absorb must be "none", "all" or a list of predicate IRIs')


def timeless_mask(p_ids: np.ndarray, absorb, absorb_pids: np.ndarray | None) -> np.ndarray:
    """Which triples are timeless (absorbed into the store) under the stream's absorb setting."""
    p_ids = np.asarray(p_ids, dtype=np.int64)
    if absorb == "all":
        return np.ones(len(p_ids), dtype=bool)
    if absorb == "none" or absorb_pids is None or len(absorb_pids) == 0:
        return np.zeros(len(p_ids), dtype=bool)
    return np.isin(p_ids, absorb_pids)
