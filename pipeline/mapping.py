"""Records -> timestamped triples (the Adaptor's parse/validate step), pure pyarrow.

:func:`map_chunk` turns one chunk (a whole file, or the messages of one subject in a
micro-batch) into an Arrow table of triples (``stream, s, p, o, t, timeless, source,
rec``; terms in N-Triples syntax) and a table of dead letters (``stream, source,
rec, reason, raw``). It runs inside Spark's Python workers (``mapInArrow``), so
each chunk is parsed column-wise: CSV/JSON by pyarrow's readers, expressions and
templates by pyarrow.compute. Python loops only touch the rows that fail.

Observation IRIs of the CityBench mapping end in a UUID. Here it is derived
(splitmix64) from the source name, the record's id in the source (row ordinal
of a file, sequence number of a JetStream message) and the node's index, so a
record replayed after a crash yields the same IRIs.
"""

from __future__ import annotations

import hashlib
import io
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from pipeline.expr import Context, SpecError, to_number, to_string
from pipeline.spec import XSD, Mapping, Spec, Term

TRIPLES = pa.schema([("stream", pa.string()), ("s", pa.string()), ("p", pa.string()), ("o", pa.string()),
                     ("t", pa.int64()), ("timeless", pa.bool_()), ("source", pa.string()), ("rec", pa.int64())])
DEAD = pa.schema([("stream", pa.string()), ("source", pa.string()), ("rec", pa.int64()),
                  ("reason", pa.string()), ("raw", pa.string())])

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_INTS = {"long", "integer", "int", "short", "byte"}
_NUMERIC_LEX = _INTS | {"double", "float", "boolean", "dateTime"}


# ------------------------------------------------------------------ lexical forms
def _java_double_one(x: float) -> str:
    """Java's Double.toString for |x| outside [1e-3, 1e7): d.dddE<n> with shortest digits."""
    r = repr(abs(x))
    mant, _, exp = r.partition("e")
    digits = mant.replace(".", "")
    point = mant.index(".") if "." in mant else len(mant)
    e = (int(exp) if exp else 0) + point - 1
    stripped = digits.lstrip("0")
    e -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:] or '0'}E{e}"


def java_doubles(values: pa.Array) -> pa.Array:
    """Lexical forms of doubles as Java's Double.toString writes them (what CityBench
    sends): shortest round-trip digits, plain for 1e-3 <= |x| < 1e7, else d.dddE<n>."""
    v = pc.cast(values, pa.float64())
    txt = pc.cast(v, pa.string())
    absv = pc.abs(v)
    plain = pc.or_(pc.equal(v, 0.0), pc.and_(pc.greater_equal(absv, 1e-3), pc.less(absv, 1e7)))
    dotted = pc.if_else(pc.match_substring(txt, "."), txt, pc.binary_join_element_wise(txt, ".0", ""))
    out = pc.if_else(plain, dotted, txt)
    other = np.flatnonzero(~np.asarray(pc.fill_null(plain, True).to_numpy(zero_copy_only=False), dtype=bool))
    if len(other):
        py = out.to_pylist()
        raw = v.to_numpy(zero_copy_only=False)
        for i in other.tolist():
            py[i] = _java_double_one(float(raw[i]))
        out = pa.array(py, pa.string())
    return out


_BAD_IRI_BYTES = np.zeros(256, dtype=bool)
_BAD_IRI_BYTES[:0x21] = True
_BAD_IRI_BYTES[[ord(c) for c in '<>"{}|^`\\']] = True


def bad_iri_rows(arr: pa.Array) -> np.ndarray | None:
    """Rows holding a character IRIs may not contain (numpy over the UTF-8 buffer, no regex);
    None when there is none."""
    arr = pc.cast(arr, pa.string()) if not pa.types.is_string(arr.type) else arr
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if len(arr) == 0:
        return None
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
    if bufs[2] is None:
        return None
    data = np.frombuffer(bufs[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    hits = np.flatnonzero(_BAD_IRI_BYTES[data])
    if len(hits) == 0:
        return None
    rows = np.searchsorted(offsets, hits + offsets[0], side="right") - 1
    mask = np.zeros(len(arr), dtype=bool)
    mask[rows] = True
    return mask


def _escape_literal(s: pa.Array) -> pa.Array:
    for a, b in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r")):
        s = pc.replace_substring(s, a, b)
    return s


# ------------------------------------------------------------------ deterministic uuids
def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def source_seed(source: str) -> int:
    return int.from_bytes(hashlib.blake2b(source.encode(), digest_size=8).digest(), "little")


def uuids(seed: int, rec: np.ndarray, node: int) -> pa.Array:
    """Version-4-shaped UUID strings, one per record, a pure function of (seed, rec, node)."""
    with np.errstate(over="ignore"):
        r = rec.astype(np.uint64) * np.uint64(0x100000001B3) + np.uint64(node * 0x1F3D5B79 + 1)
        a = _mix(r ^ np.uint64(seed))
        b = _mix(a ^ np.uint64(seed >> 1) ^ np.uint64(0xD6E8FEB86659FD93))
    n = len(rec)
    raw = np.empty((n, 2), dtype=np.uint64)
    raw[:, 0], raw[:, 1] = a, b
    by = raw.view(np.uint8).reshape(n, 16).copy()
    by[:, 6] = (by[:, 6] & 0x0F) | 0x40
    by[:, 8] = (by[:, 8] & 0x3F) | 0x80
    hx = np.empty((n, 32), dtype=np.uint8)
    hx[:, 0::2] = _HEX[by >> 4]
    hx[:, 1::2] = _HEX[by & 0x0F]
    out = np.full((n, 36), ord("-"), dtype=np.uint8)
    for dst, src in ((0, 0), (9, 8), (14, 12), (19, 16), (24, 20)):
        ln = {0: 8, 8: 4, 12: 4, 16: 4, 20: 12}[src]
        out[:, dst:dst + ln] = hx[:, src:src + ln]
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out.tobytes())])


# ------------------------------------------------------------------ record parsing
def load_tables(spec: Spec) -> dict[str, dict]:
    """Lookup tables of the spec: key column -> other columns (all text)."""
    out = {}
    for name, t in spec.tables.items():
        tab = pacsv.read_csv(t["path"], parse_options=pacsv.ParseOptions(delimiter=t["delimiter"]),
                             convert_options=pacsv.ConvertOptions(strings_can_be_null=False,
                                                                  column_types=None, auto_dict_encode=False))
        tab = pa.table({c: pc.cast(tab[c], pa.string()) for c in tab.column_names})
        if t["key"] not in tab.column_names:
            raise SpecError(f"tables.{name}: no column {t['key']!r} in {t['path']}")
        out[name] = {"keys": tab[t["key"]].combine_chunks(),
                     "cols": {c: tab[c].combine_chunks() for c in tab.column_names}}
    return out


def _header(data: bytes, delim: str) -> list[str]:
    import csv  # the header is one line: the stdlib reader handles its quoting

    first = data.split(b"\n", 1)[0].decode("utf-8-sig").rstrip("\r")
    return next(csv.reader([first], delimiter=delim))


def parse_csv(m: Mapping, data: bytes) -> tuple[pa.Table, list[tuple[int, str, str]]]:
    """All columns as text; rows with the wrong number of fields become dead letters."""
    bad: list[tuple[int, str, str]] = []
    if m.csv_header:
        names = _header(data, m.csv_delimiter)
        skip = 1
    else:
        names, skip = list(m.csv_columns or []), 0
    if m.csv_columns and m.csv_header and names != m.csv_columns:
        missing = set(m.csv_columns) - set(names)
        if missing:
            raise ValueError(f"CSV header lacks column(s) {sorted(missing)}")

    def invalid(row):
        bad.append((row.number if row.number is not None else -1,
                    f"expected {row.expected_columns} fields, got {row.actual_columns}", row.text))
        return "skip"

    if not data.strip():
        return pa.table({c: pa.array([], pa.string()) for c in names}), bad
    tab = pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=skip, use_threads=False),
        parse_options=pacsv.ParseOptions(delimiter=m.csv_delimiter, invalid_row_handler=invalid,
                                         newlines_in_values=False),
        convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in names},
                                             strings_can_be_null=False, quoted_strings_can_be_null=False))
    return tab, bad


#: a line whose first non-blank byte does not open a JSON object
_NOT_OBJECT_LINE = re.compile(rb"\n[ \t\r]*[^{ \t\r\n]")


def parse_ndjson(data: bytes) -> tuple[pa.Table, list[tuple[int, str, str]]]:
    """One JSON object a line. A chunk with a bad line is re-read line by line to
    isolate it (the slow path runs only when something is wrong)."""
    body = data.strip()
    if not body:
        return pa.table({}), []
    # (pyarrow 26's reader crashes the process on a block that starts with null: a line that
    # opens no object takes the line-by-line path, which reports it)
    if body[:1] == b"{" and not _NOT_OBJECT_LINE.search(body):
        try:
            return pajson.read_json(io.BytesIO(body)), []
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    good, bad = [], []
    for i, line in enumerate(body.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            good.append(obj)
        except ValueError as e:
            bad.append((i, f"bad JSON: {e}", line.decode("utf-8", "replace")))
    cols = sorted({k for o in good for k in o})
    tab = pa.table({c: pa.array([None if o.get(c) is None else str(o[c]) for o in good], pa.string())
                    for c in cols}) if good else pa.table({})
    return tab, bad


_NT_LINE = (r"^\s*(?P<s><[^<>\"{}|^`\\\s]*>|_:[A-Za-z0-9_.\-]+)\s+(?P<p><[^<>\"{}|^`\\\s]*>)\s+"
            r"(?P<o><[^<>\"{}|^`\\\s]*>|_:[A-Za-z0-9_.\-]+|\"(?:[^\"\\\n]|\\.)*\"(?:@[A-Za-z]+(?:-[A-Za-z0-9]+)*|"
            r"\^\^<[^<>\"{}|^`\\\s]*>)?)\s+(?P<t>-?\d+)\s*\.\s*$")


def parse_ntriples(data: bytes) -> tuple[pa.Table, list[tuple[int, str, str]]]:
    """Timestamped N-Triples: ``<s> <p> <o> <t-ms> .`` a line (# comments, blanks skipped)."""
    lines = pa.array(data.decode("utf-8", "replace").split("\n"), pa.string())
    lineno = np.arange(1, len(lines) + 1, dtype=np.int64)
    stripped = pc.utf8_trim_whitespace(lines)
    keep = pc.and_(pc.not_equal(stripped, ""), pc.invert(pc.starts_with(stripped, "#")))
    lines, lineno = lines.filter(keep), lineno[np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)]
    ex = pc.extract_regex(lines, _NT_LINE)
    bad_mask = np.asarray(pc.is_null(ex).to_numpy(zero_copy_only=False), dtype=bool)
    bad = [(int(lineno[i]), "not an N-Triples line with a timestamp (<s> <p> <o> <t-ms> .)",
            lines[int(i)].as_py()) for i in np.flatnonzero(bad_mask)]
    ok = pa.array(~bad_mask)
    ex = ex.filter(ok)
    tab = pa.table({"s": ex.field("s"), "p": ex.field("p"), "o": ex.field("o"),
                    "t": pc.cast(ex.field("t"), pa.int64()), "line": pa.array(lineno[~bad_mask])})
    return tab, bad


def parse_records(m: Mapping, data: bytes) -> tuple[pa.Table, list[tuple[int, str, str]]]:
    if m.format == "csv":
        return parse_csv(m, data)
    if m.format == "ndjson":
        return parse_ndjson(data)
    return parse_ntriples(data)


# ------------------------------------------------------------------ terms
def _template(ctx: Context, tpl, uu: dict[int, pa.Array], where: str, check_iri: bool = False,
              wrap: tuple[str, str] = ("", "")) -> pa.Array:
    """Fill a template; ``check_iri``: substituted values with characters an IRI may not
    hold mark their rows bad; ``wrap`` text goes around the result (``<``/``>``)."""
    pieces = [wrap[0]] if wrap[0] else []
    for kind, v in tpl.parts:
        if kind == "text":
            pieces.append(v)
        elif kind == "uuid":
            pieces.append(uu[v])
        else:
            col = ctx.columns.get(v)
            if col is None:
                raise SpecError(f"{where}: no column or variable {v!r} (have: {', '.join(sorted(ctx.columns))})")
            s = to_string(col, ctx.n)
            if s.null_count:
                ctx.fail(pc.is_null(s), f"{where}: {v} is empty")
                s = pc.fill_null(s, "")
            if check_iri:
                bad = bad_iri_rows(s)
                if bad is not None:
                    ctx.fail(bad, lambda idx, s=s, v=v: [f"{where}: {v} {x!r} cannot be part of an IRI"
                                                         for x in s.take(pa.array(idx)).to_pylist()])
            pieces.append(s)
    if wrap[1]:
        pieces.append(wrap[1])
    if not pieces:
        return pa.repeat(pa.scalar(""), ctx.n)
    if all(isinstance(p, str) for p in pieces):
        return pa.repeat(pa.scalar("".join(pieces)), ctx.n)
    arrs = [p if not isinstance(p, str) else pa.repeat(pa.scalar(p), ctx.n) for p in pieces]
    return arrs[0] if len(arrs) == 1 else pc.binary_join_element_wise(*arrs, "")


def _literal_lex(ctx: Context, term: Term, value, where: str) -> pa.Array:
    dt = term.datatype[len(XSD):] if term.datatype and term.datatype.startswith(XSD) else None
    if dt in ("double", "float"):
        x = pc.cast(to_number(ctx, value, where), pa.float64())
        x = x if not isinstance(x, pa.Scalar) else pa.repeat(x, ctx.n)
        fin = pc.is_finite(x)
        ctx.fail(pc.invert(fin), f"{where}: not a finite number")
        return java_doubles(pc.if_else(fin, x, 0.0))
    if dt in _INTS:
        x = to_number(ctx, value, where)
        x = x if not isinstance(x, pa.Scalar) else pa.repeat(x, ctx.n)
        if pa.types.is_floating(x.type):
            integral = pc.and_(pc.is_finite(x), pc.equal(pc.trunc(x), x))
            ctx.fail(pc.invert(integral), f"{where}: not an integer")
            x = pc.cast(pc.if_else(integral, x, 0.0), pa.int64())
        return pc.cast(x, pa.string())
    if dt == "boolean":
        v = value
        if pa.types.is_boolean(v.type):
            return pc.if_else(v, "true", "false")
        if pa.types.is_integer(v.type) or pa.types.is_floating(v.type):
            return pc.if_else(pc.not_equal(v, 0), "true", "false")
        s = pc.utf8_lower(pc.utf8_trim_whitespace(to_string(v, ctx.n)))
        okb = pc.is_in(s, value_set=pa.array(["true", "false", "1", "0"]))
        ctx.fail(pc.invert(okb), f"{where}: not a boolean")
        return s
    if dt == "dateTime":
        x = to_number(ctx, value, where)
        x = x if not isinstance(x, pa.Scalar) else pa.repeat(x, ctx.n)
        ts = pc.cast(pc.cast(x, pa.int64()), pa.timestamp("ms", tz="UTC"))
        return pc.strftime(ts, format="%Y-%m-%dT%H:%M:%SZ")
    return to_string(value, ctx.n)


def _term(ctx: Context, term: Term, uu: dict[int, pa.Array], where: str) -> pa.Array:
    if term.kind == "raw":
        return _template(ctx, term.template, uu, where)
    if term.kind == "iri":
        fixed = [x for k, x in term.template.parts if k == "text"]
        if bad_iri_rows(pa.array(["".join(fixed)])) is not None:
            raise SpecError(f"{where}: the IRI template {''.join(fixed)!r} has characters an IRI may not hold")
        return _template(ctx, term.template, uu, where, check_iri=True, wrap=("<", ">"))
    if term.kind == "bnode":
        v = _template(ctx, term.template, uu, where)
        v = pc.replace_substring_regex(v, r"[^A-Za-z0-9_\-]", "_")
        return pc.binary_join_element_wise("_:", v, "")
    value = term.expr.eval(ctx) if term.expr is not None else _template(ctx, term.template, uu, where)
    if isinstance(value, (str, int, float, bool)):
        value = pa.repeat(pa.scalar(value), ctx.n)
    elif isinstance(value, pa.Scalar):
        value = pa.repeat(value, ctx.n)
    if isinstance(value, (pa.Array, pa.ChunkedArray)) and value.null_count:
        ctx.fail(pc.is_null(value), f"{where}: empty value")
    lex = pc.fill_null(_literal_lex(ctx, term, value, where), "")
    dt = term.datatype[len(XSD):] if term.datatype and term.datatype.startswith(XSD) else None
    if dt not in _NUMERIC_LEX:                  # numbers, booleans, dates never need escaping
        lex = _escape_literal(lex)
    if term.lang:
        return pc.binary_join_element_wise('"', lex, f'"@{term.lang}', "")
    return pc.binary_join_element_wise('"', lex, f'"^^<{term.datatype or XSD + "string"}>', "")


# ------------------------------------------------------------------ the mapping
def _raw_rows(records: pa.Table, idx: np.ndarray) -> list[str]:
    rows = records.take(pa.array(idx)).to_pylist()
    return [json.dumps(r, default=str, ensure_ascii=False) for r in rows]


def _dead(m: Mapping, source: str, recs, reasons, raws) -> pa.Table:
    n = len(reasons)
    return pa.table({"stream": pa.array([m.stream] * n, pa.string()),
                     "source": pa.array([source] * n, pa.string()),
                     "rec": pa.array(np.asarray(recs, dtype=np.int64)), "reason": pa.array(reasons, pa.string()),
                     "raw": pa.array(raws, pa.string())}, schema=DEAD)


def map_chunk(m: Mapping, data: bytes, source: str, tables: dict | None = None,
              rec_ids: np.ndarray | None = None) -> tuple[pa.Table, pa.Table, int]:
    """Parse and map one chunk. Returns (triples, dead letters, rows filtered out).

    ``rec_ids`` gives each parsed record its id in the source (default: its ordinal
    in the chunk); it feeds the deterministic UUIDs and the dead letters."""
    try:
        records, bad = parse_records(m, data)
    except (pa.ArrowInvalid, ValueError, UnicodeDecodeError) as e:
        return TRIPLES.empty_table(), _dead(m, source, [-1], [f"unreadable {m.format} chunk: {e}"],
                                           [data[:2000].decode("utf-8", "replace")]), 0
    dead = [_dead(m, source, [b[0] for b in bad], [b[1] for b in bad], [b[2] for b in bad])] if bad else []
    n = records.num_rows
    recs = np.arange(n, dtype=np.int64) if rec_ids is None else np.asarray(rec_ids, dtype=np.int64)[:n]
    if m.format == "ntriples":
        recs = records["line"].to_numpy()
    if m.skip_rows:
        records, recs = records.slice(m.skip_rows), recs[m.skip_rows:]
        n = records.num_rows
    filtered = 0
    cols = {c: records[c].combine_chunks() for c in records.column_names}
    cols["row"] = pa.array(np.arange(n, dtype=np.int64))
    ctx = Context(cols, n, tables or {})
    if m.format == "ntriples":
        t = cols["t"]
    else:
        t = m.timestamp.eval(ctx)
        t = to_number(ctx, t, "timestamp")
        t = t if not isinstance(t, pa.Scalar) else pa.repeat(t, n)
        t = pc.cast(t, pa.int64()) if not pa.types.is_floating(t.type) else pc.cast(pc.trunc(t), pa.int64())
    cols["t"] = t
    keep = np.ones(n, dtype=bool)
    if m.filter is not None:
        f = m.filter.eval(ctx)
        fm = np.asarray(pc.fill_null(f, False).to_numpy(zero_copy_only=False), dtype=bool) \
            if not isinstance(f, pa.Scalar) else np.full(n, bool(f.as_py()))
        passed = fm | ~ctx.ok        # rows that failed already are dead letters, not filtered
        filtered += int((~passed).sum())
        keep = passed
    bad_idx = np.flatnonzero(keep & ~ctx.ok)
    if len(bad_idx):
        dead.append(_dead(m, source, recs[bad_idx], ctx.reason[bad_idx].tolist(), _raw_rows(records, bad_idx)))
    keep &= ctx.ok
    if m.max_rows is not None:
        over = np.flatnonzero(keep)[m.max_rows:]
        keep[over] = False
        filtered += len(over)
    sel = pa.array(keep)
    records = records.filter(sel)
    recs = recs[keep]
    n = records.num_rows
    if n == 0:
        return TRIPLES.empty_table(), _concat_dead(dead), filtered
    cols = {c: records[c].combine_chunks() for c in records.column_names}
    cols["row"] = ctx.columns["row"].filter(sel)
    cols["t"] = t.filter(sel)
    if m.format == "ntriples":
        return _ntriples_out(m, cols, recs, source, ctx, records, dead, filtered)
    ctx = Context(cols, n, tables or {})
    for name, ex in m.lets:
        v = ex.eval(ctx)
        ctx.columns[name] = v if not isinstance(v, pa.Scalar) else pa.repeat(v, n)
    seed = source_seed(source)
    uu = {k: uuids(seed, recs, k) for k in range(m.n_nodes)}
    parts, masks = [], []
    cache: dict[int, pa.Array] = {}
    for j, (_node, s, p, o, when) in enumerate(m.triples):
        where = f"mapping {m.name!r} triple {j + 1}"
        if id(s) not in cache:
            cache[id(s)] = _term(ctx, s, uu, where)
        sv = cache[id(s)]
        pv = _term(ctx, p, uu, where)
        ov = _term(ctx, o, uu, where)
        mask = None
        if when is not None:
            w = when.eval(ctx)
            mask = np.asarray(pc.fill_null(w, False).to_numpy(zero_copy_only=False), dtype=bool) \
                if not isinstance(w, pa.Scalar) else np.full(n, bool(w.as_py()))
        parts.append((sv, pv, ov, p))
        masks.append(mask)
    ok = ctx.ok
    bad_idx = np.flatnonzero(~ok)
    if len(bad_idx):
        dead.append(_dead(m, source, recs[bad_idx], ctx.reason[bad_idx].tolist(), _raw_rows(records, bad_idx)))
    out = []
    for (sv, pv, ov, p), mask in zip(parts, masks, strict=True):
        keep_t = ok if mask is None else (ok & mask)
        if not keep_t.any():
            continue
        sel = pa.array(keep_t)
        k = int(keep_t.sum())
        pred_iri = "".join(x[1] for x in p.template.parts) if all(x[0] == "text" for x in p.template.parts) \
            else None
        timeless = m.timeless(pred_iri) if pred_iri is not None else m.absorb == "all"
        out.append(pa.table({"stream": pa.repeat(pa.scalar(m.stream), k), "s": sv.filter(sel),
                             "p": pv.filter(sel), "o": ov.filter(sel), "t": cols["t"].filter(sel),
                             "timeless": pa.repeat(pa.scalar(timeless), k),
                             "source": pa.repeat(pa.scalar(source), k), "rec": pa.array(recs[keep_t])},
                            schema=TRIPLES))
    trip = pa.concat_tables(out) if out else TRIPLES.empty_table()
    return trip, _concat_dead(dead), filtered


def _ntriples_out(m, cols, recs, source, ctx, records, dead, filtered):
    n = len(recs)
    p = cols["p"]
    if m.absorb == "all":
        timeless = pa.repeat(pa.scalar(True), n)
    elif m.absorb == "none":
        timeless = pa.repeat(pa.scalar(False), n)
    else:
        timeless = pc.is_in(p, value_set=pa.array([f"<{a}>" for a in m.absorb]))
    trip = pa.table({"stream": pa.repeat(pa.scalar(m.stream), n), "s": cols["s"], "p": p, "o": cols["o"],
                     "t": cols["t"], "timeless": timeless, "source": pa.repeat(pa.scalar(source), n),
                     "rec": pa.array(recs)}, schema=TRIPLES)
    return trip, _concat_dead(dead), filtered


def _concat_dead(parts: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(parts) if parts else DEAD.empty_table()
