"""The cluster's wire: Arrow Flight calls whose data is Arrow IPC record batches.

Control calls are Flight *actions* whose body is a small JSON object and whose
single result is JSON. Data calls are Flight *exchanges*: the descriptor's
command is the JSON header (which call, snapshot, graph, partition,
predicate), the client streams one Arrow table, the worker answers with one
table. Write shares go up as a Flight *put* (rows as a table), acknowledged
with JSON in the put's metadata. Nothing here invents a format: tables are
Arrow, headers are JSON inside the fields Flight reserves for them.
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.flight as flight

from engine.arrays import unique

__all__ = ["location", "header", "parse_header", "table_of", "columns_of", "dumps", "loads", "ROWS_SCHEMA",
           "rows_table", "rows_of"]

#: a write share: graph (-1 = default), s, p, o, and whether the row is added (1) or removed (0)
ROWS_SCHEMA = pa.schema([("g", pa.int64()), ("s", pa.int64()), ("p", pa.int64()), ("o", pa.int64()),
                         ("add", pa.int8())])


def location(address: str) -> str:
    """A Flight location from ``HOST:PORT``, ``[v6]:PORT`` or ``unix:PATH``."""
    if address.startswith("unix:"):
        return "grpc+unix://" + address[5:]
    if address.startswith("grpc"):
        return address
    return "grpc+tcp://" + address


def dumps(obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def loads(data) -> dict:
    if isinstance(data, pa.Buffer):
        data = data.to_pybytes()
    return orjson.loads(data) if data else {}


def header(**fields) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(dumps(fields))


def parse_header(descriptor: flight.FlightDescriptor) -> dict:
    return loads(descriptor.command)


def table_of(**cols: np.ndarray) -> pa.Table:
    """An Arrow table of int64 (or bool) numpy columns, zero-copy where possible."""
    return pa.table({k: pa.array(np.ascontiguousarray(v)) for k, v in cols.items()})


def columns_of(table: pa.Table) -> dict[str, np.ndarray]:
    """numpy columns of an Arrow table (combined into one chunk each)."""
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if col.num_chunks == 0:
            out[name] = np.zeros(0, dtype=col.type.to_pandas_dtype())
            continue
        arr = col.combine_chunks() if col.num_chunks > 1 else col.chunk(0)
        out[name] = arr.to_numpy(zero_copy_only=False)
    return out


def rows_table(parts: list[tuple[int, np.ndarray, int]]) -> pa.Table:
    """One table of write rows from ``(graph, (n, 3) rows, add flag)`` parts."""
    gs, ss, ps, os_, fl = [], [], [], [], []
    for g, rows, add in parts:
        n = len(rows)
        if not n:
            continue
        gs.append(np.full(n, g, dtype=np.int64))
        ss.append(rows[:, 0])
        ps.append(rows[:, 1])
        os_.append(rows[:, 2])
        fl.append(np.full(n, add, dtype=np.int8))
    if not gs:
        return ROWS_SCHEMA.empty_table()
    return pa.table([pa.array(np.concatenate(x)) for x in (gs, ss, ps, os_, fl)], schema=ROWS_SCHEMA)


def rows_of(table: pa.Table) -> list[tuple[int, np.ndarray, int]]:
    """The inverse of :func:`rows_table`: ``(graph, rows, add flag)`` per graph and flag."""
    c = columns_of(table)
    if not len(c.get("g", ())):
        return []
    g, add = c["g"], c["add"]
    rows = np.stack([c["s"], c["p"], c["o"]], axis=1).astype(np.int64, copy=False)
    key = g * 2 + add
    out = []
    for k in unique(key).tolist():
        sel = key == k
        out.append((k // 2, rows[sel], k % 2))
    return out
