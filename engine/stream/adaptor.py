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

* Arrow (:func:`parse_arrow`, :func:`read_arrow_ipc`): a ``pyarrow.Table`` /
  ``RecordBatch`` (or an Arrow IPC stream) with string columns ``s``, ``p``,
  ``o`` (N-Triples term syntax) and int64 ``t`` (ms). Each column is
  dictionary-encoded and only its *distinct* values are validated (RE2 via
  pyarrow) and canonicalized, so a batch costs a few vectorized passes; a bad
  row is reported with its 1-based row number (``"line"``) and the others are
  kept. The ndjson fast path reads the body into the same columns and shares
  this validation, so both formats accept the same terms with the same errors.

:func:`split_elements` groups the admitted triples of a POST into stream
elements (the runs of equal timestamps) and :func:`timeless_mask` marks the
timeless triples (the stream's ``absorb`` setting: ``"none"``, ``"all"`` or a
list of predicates) that the manager absorbs into the store's default graph.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from engine.bom import strip_bom
from engine.errors import JindouError
from engine.kv import loader
from engine.stream.limits import (
    MAX_BAD_LINES,
    RANGE_TEXT,
    TIME_MAX,
    TIME_MIN,
    TooManyBadLines,
    shorten,
    time_out_of_range,
)
from engine.terms import canonical_key

__all__ = ["ParsedLines", "parse_ndjson", "parse_graph", "parse_arrow", "read_arrow_ipc", "BadArrowBatch",
           "ARROW_STREAM_TYPE", "MISSING_T", "split_elements", "timeless_mask", "normalize_absorb"]

#: media type of an Arrow IPC stream body (``POST /streams/{name}``)
ARROW_STREAM_TYPE = "application/vnd.apache.arrow.stream"

#: the error of a line (or row) without ``t`` on an event-time stream; a batch whose every line
#: says this is answered 400 (the client forgot the time, not a few late or bad lines)
MISSING_T = "missing 't' (event time in ms)"
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


#: a line whose first non-blank byte does not open an object (``null``, ``[...]``, a number):
#: such a body takes the per-line path, which reports the line; searched from each newline
#: (a literal prefix: the regular expression engine skips to the next newline at C speed)
_NOT_OBJECT_LINE = re.compile(rb"\n[ \t\r]*[^{ \t\r\n]")


def _nonblank_lines(body: bytes, block: int = 1 << 22) -> np.ndarray:
    """1-based numbers of the lines holding something other than whitespace (per block of
    whole lines, so a body of millions of lines needs little memory beyond the result)."""
    out: list[np.ndarray] = []
    pos, line0, n = 0, 0, len(body)
    while pos < n:
        end = body.find(b"\n", min(n, pos + block))
        end = n if end < 0 else end + 1
        b = np.frombuffer(body, dtype=np.uint8, count=end - pos, offset=pos)
        nl = np.flatnonzero(b == 10)
        starts = np.concatenate(([0], nl + 1))
        if starts[-1] >= len(b):
            starts = starts[:-1]   # the piece ends with a newline: no line starts after it
        counts = np.add.reduceat((~_WS[b]).view(np.uint8), starts, dtype=np.int64)
        out.append(np.flatnonzero(counts > 0).astype(np.int64) + (line0 + 1))
        line0 += len(nl)
        pos = end
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _fast_ndjson(body: bytes, need_t: bool, bnode_prefix: str, line0: int = 0) -> ParsedLines | None:
    """pyarrow's JSON reader into s/p/o/t columns, then the Arrow term validation.

    None when the body is not plain JSON lines of the expected shape (a line that is not
    an object, a term that is not a string, a non-integer ``t`` ...): the per-line path
    then finds and reports those lines."""
    if not body.strip():
        e = pa.array([], pa.large_string())
        z = np.zeros(0, dtype=np.int64)
        return ParsedLines(e, e, e, z, np.zeros(0, dtype=bool), z)
    if body.lstrip()[:1] != b"{" or _NOT_OBJECT_LINE.search(body):
        return None   # (pyarrow 26's reader crashes the process on a block that starts with null)
    try:   # first: a body of bad lines fails here at once, before any per-line array is made
        tab = pj.read_json(io.BytesIO(body), parse_options=pj.ParseOptions(
            explicit_schema=_SCHEMA, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    total = body.count(b"\n") + (0 if body.endswith(b"\n") else 1)
    if tab.num_rows == total:   # no blank line
        lines = np.arange(1 + line0, total + 1 + line0, dtype=np.int64)
    else:
        lines = _nonblank_lines(body) + line0
    if tab.num_rows != len(lines):
        return None
    s, p, o, t = (_one_chunk(tab.column(k)) for k in ("s", "p", "o", "t"))
    return _term_columns(s, p, o, t, lines, need_t, bnode_prefix)


# ---------------------------------------------------------------- Arrow columns


class BadArrowBatch(JindouError):
    """An Arrow batch without the expected columns / types, or an unreadable IPC stream (HTTP 400)."""

    kind = "bad_request"


def _one_chunk(col) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 1:
            return col.chunk(0)
        if col.num_chunks == 0:
            return pa.array([], col.type)
        return col.combine_chunks()
    return col


def _string_column(col: pa.Array, name: str) -> pa.Array:
    """A column of N-Triples terms as large_string or a dictionary of large_string."""
    typ = col.type
    if pa.types.is_dictionary(typ):
        vt = typ.value_type
        if not (pa.types.is_string(vt) or pa.types.is_large_string(vt) or vt == pa.string_view()):
            raise BadArrowBatch(f"column {name!r} must hold strings (N-Triples terms), not {typ}")
        vals = col.dictionary
        if vt != pa.large_string():
            vals = vals.cast(pa.large_string())
        return pa.DictionaryArray.from_arrays(col.indices, vals)
    if pa.types.is_large_string(typ):
        return col
    if pa.types.is_string(typ) or typ == pa.string_view():
        return col.cast(pa.large_string())
    raise BadArrowBatch(f"column {name!r} must hold strings (N-Triples terms), not {typ}")


def _time_column(col: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """``t`` as int64 ms and the mask of the rows whose value cannot be one (None: all can).

    Timestamp units are converted here with exact integer arithmetic (Arrow's unsafe cast
    would wrap a seconds value times 1000 around int64); the range of the contract is
    checked by :func:`_term_columns` for every format alike."""
    typ = col.type
    if pa.types.is_int64(typ):
        return col, None
    if pa.types.is_integer(typ):
        if pa.types.is_unsigned_integer(typ) and typ.bit_width == 64:
            v = col.fill_null(0).to_numpy(zero_copy_only=False)
            big = v > np.uint64(TIME_MAX)
            if big.any():
                v = np.where(big, 0, v)
            return pa.array(v.astype(np.int64), pa.int64(), mask=~col.is_valid().to_numpy(
                zero_copy_only=False) if col.null_count else None), (big if big.any() else None)
        return col.cast(pa.int64()), None
    if pa.types.is_timestamp(typ):   # e.g. Spark's timestamp[us]: whole milliseconds since the epoch
        raw = col.cast(pa.int64())
        valid = None if raw.null_count == 0 else ~raw.is_valid().to_numpy(zero_copy_only=False)
        v = raw.fill_null(0).to_numpy(zero_copy_only=False)
        bad = None
        if typ.unit == "s":
            bad = (v < TIME_MIN) | (v > TIME_MAX // 1000)
            v = np.where(bad, 0, v) * 1000
        elif typ.unit == "us":
            v = v // 1000
        elif typ.unit == "ns":
            v = v // 1_000_000
        return pa.array(v, pa.int64(), mask=valid), (bad if bad is not None and bad.any() else None)
    raise BadArrowBatch(f"column 't' must be int64 (event time in ms) or a timestamp, not {typ}")


def parse_arrow(data, *, need_t: bool = True, bnode_prefix: str = "") -> ParsedLines:
    """Validate the ``s``/``p``/``o``/``t`` columns of a Table or RecordBatch (extra columns ignored).

    A missing or mistyped column raises :class:`BadArrowBatch` (nothing is taken); bad
    rows (null or malformed terms, null ``t`` on an event-time stream) land in
    ``errors`` with their 1-based row number as ``"line"``."""
    if not isinstance(data, (pa.Table, pa.RecordBatch)):
        raise BadArrowBatch(f"expected a pyarrow Table or RecordBatch, not {type(data).__name__}")
    names = data.schema.names
    need = ["s", "p", "o"] + (["t"] if need_t else [])
    missing = [k for k in need if k not in names]
    if missing:
        raise BadArrowBatch(f"missing column(s) {missing}: an Arrow stream batch has string columns "
                            "s, p, o (N-Triples terms) and int64 t (event time in ms); got " + str(names))
    dup = sorted({k for k in names if names.count(k) > 1} & {"s", "p", "o", "t"})
    if dup:
        raise BadArrowBatch(f"column(s) {dup} appear more than once")
    s, p, o = (_string_column(_one_chunk(data.column(k)), k) for k in ("s", "p", "o"))
    t_bad = None
    if "t" in names and need_t:
        t, t_bad = _time_column(_one_chunk(data.column("t")))
    else:   # an arrival-clock stream stamps the elements itself: a given t is ignored
        t = pa.nulls(data.num_rows, pa.int64())
    lines = np.arange(1, data.num_rows + 1, dtype=np.int64)
    return _term_columns(s, p, o, t, lines, need_t, bnode_prefix, t_bad)


def read_arrow_ipc(body: bytes) -> pa.Table:
    """The table of an Arrow IPC *stream* body (:class:`BadArrowBatch` if it is not one)."""
    try:
        with pa.ipc.open_stream(pa.py_buffer(body)) as reader:
            table = reader.read_all()
        # the reader checks the messages' structure, not the buffers' content: offsets, lengths
        # and dictionary indices past their buffers would be read out of bounds later (a crash
        # of the whole process); full validation is one pass over the data
        _validate_layout(table)
        table.schema.names  # noqa: B018 - column names are UTF-8 too (decoded when first read)
        return table
    except pa.ArrowNotImplementedError:
        raise BadArrowBatch("the body is an Arrow IPC stream with a feature or type this server does not "
                            "read (send s, p, o as strings and t as int64)") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, UnicodeDecodeError):
        # pyarrow's own text names its C++ internals (offsets, buffers, flatbuffers): not for clients
        raise BadArrowBatch("the body is not an Arrow IPC stream (a malformed or truncated message, "
                            "or a buffer that does not match its schema)") from None


_AS_BYTES = {pa.string(): pa.binary(), pa.large_string(): pa.large_binary()}


def _validate_layout(table: pa.Table) -> None:
    """Full validation of ``table``'s buffers (ArrowInvalid), with string columns read as
    bytes: invalid UTF-8 in a value is that row's error (:func:`_term_column` reports it per
    line and keeps the others), not the whole body's."""
    for col in table.columns:
        for chunk in col.chunks:
            if chunk.type in _AS_BYTES:
                chunk = chunk.view(_AS_BYTES[chunk.type])
            elif pa.types.is_dictionary(chunk.type) and chunk.type.value_type in _AS_BYTES:
                chunk.indices.validate(full=True)
                d = chunk.dictionary
                d.view(_AS_BYTES[d.type]).validate(full=True)
                chunk = pa.DictionaryArray.from_arrays(chunk.indices, d.view(_AS_BYTES[d.type]))
            chunk.validate(full=True)


_FAST_RE = {"s": loader._F_SUBJ, "p": loader._F_PRED, "o": loader._F_OBJ}


def _term_column(col: pa.Array, where: str) -> tuple[pa.DictionaryArray, np.ndarray, dict[int, str]]:
    """Validate / canonicalize the distinct terms of one column.

    -> (dictionary array with canonical keys, per-row dictionary index (-1 for null),
    {distinct index: error} for the malformed terms). Values the RE2 fast check rejects
    (escapes, spaces around a term ...) go through :func:`_line_term` one distinct value
    at a time, so they are accepted or rejected exactly as on the per-line ndjson path."""
    t = pa.large_string()
    if isinstance(col, pa.DictionaryArray):
        values, indices = col.dictionary, col.indices
    else:
        enc = pc.dictionary_encode(col)
        values, indices = enc.dictionary, enc.indices
    if values.type != t:
        values = values.cast(t)
    bad: dict[int, str] = {}
    try:
        values.validate(full=True)
    except pa.ArrowInvalid:   # invalid UTF-8 (Arrow IPC and the JSON reader take bytes as they come)
        values, bad = _utf8_errors(values, where)
    idx = indices.to_numpy(zero_copy_only=False) if indices.null_count == 0 else \
        indices.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)
    ok = pc.match_substring_regex(values, _FAST_RE[where]).to_numpy(zero_copy_only=False)
    if where == "o":
        redo = ~ok | pc.match_substring_regex(values, loader._F_NEEDS_CANON).to_numpy(zero_copy_only=False)
    else:
        redo = ~ok
    if bad:
        redo[list(bad)] = False
    if redo.any():
        pos = np.flatnonzero(redo)
        fixed: list[str | None] = []
        for j, v in zip(pos.tolist(), values.take(pa.array(pos)).to_pylist(), strict=True):
            try:
                k = _line_term(v, where, "")
                k.encode("utf-8")
                fixed.append(k)
            except ValueError as e:   # _line_term's and canonical_key's own wording
                bad[j] = str(e)
                fixed.append(None)
            except UnicodeError:
                bad[j] = _surrogate_error(v, where)
                fixed.append(None)
        values = pc.replace_with_mask(values, pa.array(redo), pa.array(fixed, t))
    return values, idx, bad


def _surrogate_error(v: str, where: str) -> str:
    """Our wording for a term UTF-8 cannot encode (a lone surrogate, from a ``\\ud800``-style
    JSON escape), with its position in the term."""
    pos = next((i for i, c in enumerate(v) if 0xD800 <= ord(c) <= 0xDFFF), 0)
    return (f"{where!r} holds a lone surrogate U+{ord(v[pos]) if v else 0:04X} at character {pos + 1}, "
            "which is not a Unicode character")


def _utf8_errors(values: pa.Array, where: str) -> tuple[pa.Array, dict[int, str]]:
    """The distinct values that are not valid UTF-8 (replaced by "" so the vectorized checks
    can run) and an error for each; only runs for a column that failed validation."""
    raw = values.cast(pa.large_binary()).to_pylist()
    bad: dict[int, str] = {}
    for j, b in enumerate(raw):
        if b is None:
            continue
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as e:
            bad[j] = f"{where!r} is not valid UTF-8 (byte {e.start})"
    mask = np.zeros(len(raw), dtype=bool)
    mask[list(bad)] = True
    fixed = pa.array([None if m else b for m, b in zip(mask.tolist(), raw, strict=True)], pa.large_binary())
    fixed = pc.if_else(pa.array(mask), pa.scalar(b"", pa.large_binary()), fixed)
    return fixed.cast(pa.large_string()), bad


def _term_columns(s: pa.Array, p: pa.Array, o: pa.Array, t: pa.Array, lines: np.ndarray,
                  need_t: bool, bnode_prefix: str, t_bad: np.ndarray | None = None) -> ParsedLines:
    """Shared by the Arrow and ndjson paths: per-row errors in the per-line path's order
    (missing term, missing ``t``, malformed s / p / o) and the good rows as dictionary columns."""
    n = len(lines)
    cols = []
    ok = np.ones(n, dtype=bool)
    why: list[tuple[np.ndarray, object]] = []   # (rows, message or per-row message source)
    for where, col in (("s", s), ("p", p), ("o", o)):
        values, idx, bad = _term_column(col, where)
        cols.append((where, values, idx, bad))
        if col.null_count:
            m = idx < 0
            why.append((m & ok, f"missing {where!r}"))
            ok &= ~m
    t_np = t.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    has_t = t.is_valid().to_numpy(zero_copy_only=False) if t.null_count else np.ones(n, dtype=bool)
    if need_t and not has_t.all():
        why.append((~has_t & ok, MISSING_T))
        ok &= has_t
    if need_t:
        oob = time_out_of_range(t_np) & has_t
        if t_bad is not None:
            oob |= t_bad
        if oob.any():
            why.append((oob & ok, f"'t' out of range: event times are {RANGE_TEXT}"))
            ok &= ~oob
    for _where, _values, idx, bad in cols:
        if bad:
            codes = np.fromiter(bad, dtype=np.int64, count=len(bad))
            m = np.isin(idx, codes) & ok
            if m.any():
                why.append((m, (idx, bad)))
                ok &= ~m
    n_bad = n - int(np.count_nonzero(ok))
    if n_bad > MAX_BAD_LINES:
        m, msg = why[0]
        r = int(np.flatnonzero(m)[0])
        text = msg if isinstance(msg, str) else msg[1][int(msg[0][r])]
        raise TooManyBadLines(n_bad, {"line": int(lines[r]), "error": text})
    errors: list[dict] = []
    for m, msg in why:
        for r in np.flatnonzero(m).tolist():
            text = msg if isinstance(msg, str) else msg[1][int(msg[0][r])]
            errors.append({"line": int(lines[r]), "error": text})
    keep = None if ok.all() else np.flatnonzero(ok)
    out = []
    for where, values, idx, _bad in cols:
        if bnode_prefix and where != "p":
            values = loader._relabel_bnodes(values, bnode_prefix)
        ii = idx if keep is None else idx[keep]
        out.append(pa.DictionaryArray.from_arrays(pa.array(ii.astype(np.int32, copy=False)), values))
    if keep is not None:
        t_np, has_t, lines = t_np[keep], has_t[keep], lines[keep]
    return ParsedLines(out[0], out[1], out[2], t_np, has_t, lines, errors)


# the N-Triples term grammar of the graph path (engine.kv.loader), so every format accepts the same terms
_NT_TERM = {
    "s": re.compile(f"(?:{loader._IRI}|{loader._BN})"),
    "p": re.compile(loader._IRI),
    "o": re.compile(f"(?:{loader._IRI}|{loader._BN}|{loader._LIT})"),
}


def _line_term(v, where: str, bnode_prefix: str) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{where!r} must be a string holding a term in N-Triples syntax")
    v = v.strip()
    if not _NT_TERM[where].fullmatch(v):
        if where == "p" and v[:1] in ('"', "_"):
            raise ValueError("the predicate must be an IRI")
        if where == "s" and v[:1] == '"':
            raise ValueError("the subject must be an IRI or a blank node")
        raise ValueError(f"{where!r} is not an N-Triples term (IRIs exclude spaces, <>\"{{}}|^`\\ and "
                         f"control characters): {shorten(v)}")
    k = canonical_key(v)
    if where == "p" and k[0] != "<":
        raise ValueError("the predicate must be an IRI")
    if where == "s" and k[0] == '"':
        raise ValueError("the subject must be an IRI or a blank node")
    if k[0] == "_":
        k = "_:" + bnode_prefix + k[2:]
    return k


def _ndjson_lines(body: bytes, line0: int = 0):
    """(1-based number, line) of each line, without splitting the whole body at once."""
    pos, i, n = 0, 1 + line0, len(body)
    while pos <= n:
        j = body.find(b"\n", pos)
        if j < 0:
            j = n
        yield i, body[pos:j]
        pos, i = j + 1, i + 1


_SLOW_CHUNK = 65_536   # lines turned into Arrow columns at a time (bounded Python memory)


def _slow_ndjson(body: bytes, need_t: bool, bnode_prefix: str, line0: int = 0) -> ParsedLines:
    """The path for bodies the JSON reader refuses: each line's JSON shape is checked here
    (one ``orjson.loads`` a line), the terms by the same vectorized validation as the fast
    path and Arrow (:func:`_term_columns`). Stops at the bad-line limit."""
    errors: list[dict] = []
    parts: list[ParsedLines] = []
    cols: tuple[list, ...] = ([], [], [], [], [])   # s, p, o, t (None: absent), line

    def flush() -> None:
        s_, p_, o_, t_, ln = cols
        if ln:
            lt = pa.large_string()
            part = _term_columns(pa.array(s_, lt), pa.array(p_, lt), pa.array(o_, lt), pa.array(t_, pa.int64()),
                                 np.asarray(ln, dtype=np.int64), need_t, bnode_prefix)
            errors.extend(part.errors)
            parts.append(part)
            for c in cols:
                c.clear()

    def bad(i: int, why: str) -> None:
        errors.append({"line": i, "error": why})
        if len(errors) > MAX_BAD_LINES:   # stop here: the POST is refused anyway
            raise TooManyBadLines(None, min(errors, key=lambda e: e["line"]))

    for i, raw in _ndjson_lines(body, line0):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            bad(i, f"not valid JSON (column {e.colno})")
            continue
        if not isinstance(obj, dict):
            bad(i, "a line must be a JSON object")
            continue
        miss = next((k for k in ("s", "p", "o") if k not in obj), None)
        if miss is not None:
            bad(i, f"missing {miss!r}")
            continue
        tv = obj.get("t") if need_t else None   # arrival clock: any t is ignored
        if tv is None:
            if need_t:
                bad(i, MISSING_T)
                continue
        elif isinstance(tv, bool) or not isinstance(tv, int):
            bad(i, f"'t' must be an integer: event times are {RANGE_TEXT}")
            continue
        elif not TIME_MIN <= tv <= TIME_MAX:
            bad(i, f"'t' out of range: event times are {RANGE_TEXT}")
            continue
        nonstr = next((k for k in ("s", "p", "o") if not isinstance(obj[k], str)), None)
        if nonstr is not None:
            bad(i, f"{nonstr!r} must be a string holding a term in N-Triples syntax")
            continue
        cols[0].append(obj["s"])
        cols[1].append(obj["p"])
        cols[2].append(obj["o"])
        cols[3].append(tv)
        cols[4].append(i)
        if len(cols[4]) >= _SLOW_CHUNK:
            flush()
            if len(errors) > MAX_BAD_LINES:
                raise TooManyBadLines(len(errors), min(errors, key=lambda e: e["line"]))
    flush()
    if len(errors) > MAX_BAD_LINES:
        raise TooManyBadLines(len(errors), min(errors, key=lambda e: e["line"]))
    errors.sort(key=lambda e: e["line"])
    return _combine(parts, errors)


def _combine(parts: list[ParsedLines], errors: list[dict]) -> ParsedLines:
    """One ParsedLines from consecutive parts (their own errors replaced by ``errors``)."""
    if not parts:
        e = pa.array([], pa.large_string())
        z = np.zeros(0, dtype=np.int64)
        return ParsedLines(e, e, e, z, np.zeros(0, dtype=bool), z, errors)
    if len(parts) == 1:
        out = parts[0]
        out.errors = errors
        return out
    lt = pa.large_string()
    return ParsedLines(*(pa.concat_arrays([getattr(x, k).cast(lt) for x in parts]) for k in ("s", "p", "o")),
                       np.concatenate([x.t for x in parts]), np.concatenate([x.has_t for x in parts]),
                       np.concatenate([x.line for x in parts]), errors)


_NDJSON_CHUNK = 1 << 20   # a body the JSON reader refuses is retried in pieces of about this size


def _chunked_ndjson(body: bytes, need_t: bool, bnode_prefix: str) -> ParsedLines:
    """Fast path per piece of whole lines; only the pieces holding a bad line take the
    per-line path (a few bad lines in a large body cost little)."""
    parts: list[ParsedLines] = []
    errors: list[dict] = []
    pos, line0, n = 0, 0, len(body)
    while pos < n:
        end = body.find(b"\n", min(n, pos + _NDJSON_CHUNK))
        end = n if end < 0 else end + 1
        piece = body[pos:end]
        part = _fast_ndjson(piece, need_t, bnode_prefix, line0)
        if part is None:
            part = _slow_ndjson(piece, need_t, bnode_prefix, line0)
        parts.append(part)
        errors.extend(part.errors)
        if len(errors) > MAX_BAD_LINES:
            raise TooManyBadLines(len(errors), errors[0])
        line0 += piece.count(b"\n")
        pos = end
    return _combine(parts, errors)


#: a body of fewer lines than this first tries the plain-Python path (:func:`_small_ndjson`;
#: measured faster up to ~200 lines of new terms, slower from ~400):
#: below it, pyarrow's JSON reader and the vectorized term checks (a few dozen Arrow calls of
#: 5-20 µs each, whatever the size) cost more than one ``orjson.loads`` and a cached term check
#: a line (measured by ``python -m bench.stream_post``)
SMALL_LINES = 128
#: how often the small path answered / handed the body to the general path (tests, bench)
small_path_stats = {"taken": 0, "fallback": 0}
#: raw term -> canonical key (before blank-node relabeling), per position: a stream's
#: predicates, sensors and common values recur in every POST; bounded (cleared when full)
_TERM_CACHE: dict[str, dict[str, str]] = {"s": {}, "p": {}, "o": {}}
_TERM_CACHE_MAX = 8192


def _small_key(v, where: str) -> str | None:
    """The canonical key of a term the general path accepts, None for any other (the general
    path then reports it in its own words)."""
    cache = _TERM_CACHE[where]
    k = cache.get(v)
    if k is not None:
        return k
    try:
        k = _line_term(v, where, "")
        k.encode("utf-8")
    except (ValueError, UnicodeError):
        return None
    if len(cache) >= _TERM_CACHE_MAX:
        cache.clear()
    cache[v] = k
    return k


def _small_ndjson(body: bytes, need_t: bool, bnode_prefix: str) -> ParsedLines | None:
    """A small body of good lines in plain Python: one ``orjson.loads`` and three cached term
    checks a line, no Arrow reader and no vectorized validation.

    None at the first line that is not a JSON object with string ``s``/``p``/``o`` terms the
    general path accepts and (event time) an integer ``t`` in range: the general path
    (:func:`_general_ndjson`) then parses the whole body, so bad lines get exactly its errors.
    Keys and line numbers are the general path's (tests/test_stream_small_post.py compares
    them over random bodies)."""
    ss: list[str] = []
    ps: list[str] = []
    os_: list[str] = []
    ts: list[int] = []
    ln: list[int] = []
    relabel = "_:" + bnode_prefix if bnode_prefix else None
    cs, cp, co = _TERM_CACHE["s"], _TERM_CACHE["p"], _TERM_CACHE["o"]
    i = 0
    for raw in body.split(b"\n"):
        i += 1
        if not raw.strip(b" \t\r"):
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if type(obj) is not dict:
            return None
        try:
            sv, pv, ov = obj["s"], obj["p"], obj["o"]
        except KeyError:
            return None
        if need_t:
            tv = obj.get("t")
            if type(tv) is not int or not TIME_MIN <= tv <= TIME_MAX:
                return None
            ts.append(tv)
        if type(sv) is not str or type(pv) is not str or type(ov) is not str:
            return None
        sk = cs.get(sv) or _small_key(sv, "s")
        pk = cp.get(pv) or _small_key(pv, "p")
        ok = co.get(ov) or _small_key(ov, "o")
        if sk is None or pk is None or ok is None:
            return None
        if relabel is not None:
            if sk[0] == "_":
                sk = relabel + sk[2:]
            if ok[0] == "_":
                ok = relabel + ok[2:]
        ss.append(sk)
        ps.append(pk)
        os_.append(ok)
        ln.append(i)
    n = len(ln)
    lt = pa.large_string()
    if need_t:
        t = np.array(ts, dtype=np.int64)
        has_t = np.ones(n, dtype=bool)
    else:   # an arrival-clock stream stamps the elements itself (as the per-line path: no t)
        t = np.zeros(n, dtype=np.int64)
        has_t = np.zeros(n, dtype=bool)
    return ParsedLines(pa.array(ss, lt), pa.array(ps, lt), pa.array(os_, lt), t, has_t,
                       np.array(ln, dtype=np.int64))


def parse_ndjson(body: bytes, *, need_t: bool = True, bnode_prefix: str = "") -> ParsedLines:
    """Parse an ndjson body; bad lines land in ``errors`` (1-based line numbers).

    A body of fewer than :data:`SMALL_LINES` lines first tries :func:`_small_ndjson`."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    body = bytes(strip_bom(body))   # (a file saved with a BOM: engine.bom)
    if body.count(b"\n") < SMALL_LINES:
        small = _small_ndjson(body, need_t, bnode_prefix)
        if small is not None:
            small_path_stats["taken"] += 1
            return small
        small_path_stats["fallback"] += 1
    return _general_ndjson(body, need_t, bnode_prefix)


def _general_ndjson(body: bytes, need_t: bool, bnode_prefix: str) -> ParsedLines:
    """Any body: pyarrow's JSON reader, else per piece, else line by line."""
    fast = _fast_ndjson(body, need_t, bnode_prefix)
    if fast is not None:
        return fast
    if len(body) > _NDJSON_CHUNK:
        return _chunked_ndjson(body, need_t, bnode_prefix)
    return _slow_ndjson(body, need_t, bnode_prefix)


def parse_graph(data: bytes, media_type: str, *, bnode_prefix: str = "") -> loader.ParsedKeys:
    """Parse one graph body (atomic: LoadError on any syntax error)."""
    fmt = loader.format_for_media_type(media_type)
    if isinstance(data, str):
        data = data.encode("utf-8")
    return loader.parse_to_keys(bytes(data), fmt, bnode_prefix=bnode_prefix, name="<body>")   # (BOM: the loader's)


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
