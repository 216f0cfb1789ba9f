"""The one write path: parse -> intern -> apply.

Every writer -- file loads, Graph Store PUT/POST/DELETE, SPARQL Update (one
commit per request, LOAD included) and stream absorption -- goes through:

* :func:`intern` / :func:`intern_keys`: term keys -> ids in the store's
  dictionary, under the store's write lock (the dictionary is append-only and
  shared, so interned terms of a write that then fails stay, unused);
* :func:`changes_for`: id rows grouped by graph -> one :class:`Changes`;
* :func:`apply`: the one commit entry point -- under the write lock, with the
  deadline / ``may_commit`` gate of a request that can be answered as timed
  out (such a write never commits).

:func:`read` is parse + intern (the parsers are :mod:`engine.kv.loader`'s);
:func:`load` is the whole path for one input, atomic: the input is parsed and
interned first and committed with one :func:`apply`, so a syntax error
commits nothing. Blank node labels are made unique per load by
:func:`bnode_prefix` (``_:b0`` of two loads differ).
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from engine.arrays import unique
from engine.errors import LoadError, QueryTimeout
from engine.kv import loader
from engine.kv.store import Changes, Snapshot, Store
from engine.terms import iri_key

__all__ = ["LoadReport", "Interned", "bnode_prefix", "intern", "intern_keys", "graph_id", "read", "changes_for",
           "apply", "write_locked", "load", "load_parts", "load_file", "load_data"]

_MAX_ERRORS = loader.MAX_ERRORS


@dataclass
class LoadReport:
    triples: int = 0  # statements accepted (before set de-duplication)
    skipped: int = 0  # bad statements skipped (lenient)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, message)
    graphs: list[str | None] = field(default_factory=list)  # graphs written: IRI / key, None = default


class Interned(NamedTuple):
    """Ids of one interned block: ``rows`` (n, 3) int64; ``gids`` (n,) int64 with -1
    for the default graph, or None when every row is in the default graph;
    ``first_new``: ids from here on were interned by this call, as of snapshot ``sn``
    (stream absorption skips the edge test for rows holding one)."""

    rows: np.ndarray
    gids: np.ndarray | None
    first_new: int
    sn: int


# ------------------------------------------------------------------ intern
def bnode_prefix(store: Store) -> str:
    """The blank node label prefix of one load / payload / stream POST (``L<n>x``)."""
    return f"L{store.next_load_id()}x"


def _intern_columns(d, cols) -> np.ndarray:
    """(n, len(cols)) ids. Dictionary columns (the N-Triples parser's) are interned each
    distinct key once per column; plain columns are concatenated and interned in one call
    (one hash of each distinct key across subjects and objects)."""
    n = len(cols[0])
    out = np.empty((n, len(cols)), dtype=np.int64)
    if n == 0:
        return out
    if all(isinstance(c, pa.DictionaryArray) for c in cols):
        # one encode of the used values of every column (not one per column): a small write
        # (a stream POST) pays the dictionary's fixed costs -- hashing, the numeric-value
        # regexes, the merge into the sorted hash index, O(dictionary) -- once, not three times.
        # New ids are handed out in the same order (column by column, first use first).
        t = pa.large_string()
        parts, codes = [], []
        base = 0
        for c in cols:
            if c.null_count:
                raise ValueError("null key")
            idx = c.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            values = c.dictionary
            used = np.bincount(idx, minlength=len(values)) > 0
            if not used.all():   # a filtered array keeps its whole dictionary: intern the used part
                pos = np.flatnonzero(used)
                remap = np.full(len(values), -1, dtype=np.int64)
                remap[pos] = np.arange(len(pos), dtype=np.int64)
                values, idx = values.take(pa.array(pos)), remap[idx]
            parts.append(values if values.type == t else values.cast(t))
            codes.append(idx + base)
            base += len(values)
        ids = np.asarray(d.encode(pa.concat_arrays(parts)), dtype=np.int64)
        for j, idx in enumerate(codes):
            out[:, j] = ids[idx]
    else:
        t = pa.large_string()
        ids = np.asarray(d.encode(pa.concat_arrays([c if c.type == t else c.cast(t) for c in cols])),
                         dtype=np.int64)
        out.T[:] = ids.reshape(len(cols), n)
    return out


def intern(store: Store, s: pa.Array, p: pa.Array, o: pa.Array, g: pa.Array | None = None) -> Interned:
    """Intern key columns (pyarrow string or dictionary arrays; ``g`` null = default graph)."""
    d = store.dictionary
    n = len(s)
    with store.write_lock:
        first, sn = len(d), store.snapshot().sn
        rows = _intern_columns(d, (s, p, o))
        gids = None
        if g is not None and n and g.null_count < n:
            gids = np.full(n, -1, dtype=np.int64)
            valid = g.is_valid()
            gids[valid.to_numpy(zero_copy_only=False)] = d.encode(g.filter(valid))
    return Interned(rows, gids, first, sn)


def intern_keys(store: Store, keys) -> np.ndarray:
    """Ids of a list of term keys, interning the missing ones."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    with store.write_lock:
        return np.asarray(store.dictionary.encode(keys), dtype=np.int64)


def graph_id(store: Store, iri: str | None, create: bool) -> int | None:
    """The id of graph ``iri`` (None: the default graph); without ``create`` -1 if unknown."""
    if iri is None:
        return None
    if create:
        return int(intern_keys(store, [iri_key(iri)])[0])
    return int(store.dictionary.lookup(iri_key(iri)))


# ------------------------------------------------------------------ parse + intern
def read(store: Store, source, format: str | None = None, *, base: str | None = None, lenient: bool = False,
         name: str | None = None, progress: bool = False,
         allow_fetch: bool | None = None) -> tuple[np.ndarray, np.ndarray | None, LoadReport]:
    """Parse ``source`` (a path, or the data as bytes; ``format`` None: by the path's
    extension) and intern it block by block: (rows (n, 3), gids as in :class:`Interned`,
    report). Nothing is committed."""
    if format is None:
        format = loader.guess_format(os.fspath(source))
    report = LoadReport()
    prefix = bnode_prefix(store)
    row_blocks: list[np.ndarray] = []
    g_blocks: list[np.ndarray | None] = []
    for block in loader.iter_parse(source, format, base=base, lenient=lenient, bnode_prefix=prefix,
                                   name=name, progress=progress, allow_fetch=allow_fetch):
        report.skipped += block.skipped
        report.errors.extend(block.errors[: max(0, _MAX_ERRORS - len(report.errors))])
        if len(block) == 0:
            continue
        iv = intern(store, block.s, block.p, block.o, block.g)
        row_blocks.append(iv.rows)
        g_blocks.append(iv.gids)
        report.triples += len(iv.rows)
    if not row_blocks:
        return np.zeros((0, 3), dtype=np.int64), None, report
    rows = np.concatenate(row_blocks) if len(row_blocks) > 1 else row_blocks[0]
    if all(g is None for g in g_blocks):
        return rows, None, report
    gids = np.concatenate([np.full(len(r), -1, dtype=np.int64) if g is None else g
                           for r, g in zip(row_blocks, g_blocks, strict=True)])
    return rows, gids, report


# ------------------------------------------------------------------ apply
def changes_for(rows: np.ndarray, gids: np.ndarray | None, target: int | None = None,
                replace: bool = False) -> Changes:
    """Add ``rows`` (default-graph rows, gid -1, go to ``target``; the others keep their
    graph, which is created), optionally replacing ``target`` first."""
    ch = Changes()
    if replace:
        ch.drop.add(target)
    if target is not None:
        ch.create.add(target)
    if len(rows) == 0:
        return ch
    if gids is None:
        ch.add[target] = rows
        return ch
    if target is not None:
        gids = np.where(gids < 0, target, gids)
    for gv in unique(gids).tolist():
        key = None if gv < 0 else int(gv)
        ch.add[key] = rows[gids == gv]
        if key is not None:
            ch.create.add(key)
    return ch


@contextmanager
def write_locked(store: Store, deadline: float | None = None, timeout: float | None = None, what: str = "update"):
    """Hold the store's write lock, waiting at most until ``deadline`` (time.monotonic())."""
    lock = store.write_lock
    if not lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic())):
        raise QueryTimeout(f"{what} exceeded its timeout of {timeout} s waiting for other writes")
    try:
        yield
    finally:
        lock.release()


def apply(store: Store, changes: Changes, *, deadline: float | None = None, may_commit=None,
          timeout: float | None = None, what: str = "update") -> Snapshot:
    """Commit ``changes`` atomically: the one commit entry point of every writer.

    Past ``deadline`` (time.monotonic()) or when ``may_commit()`` (asked once, right
    before the commit) says False -- the request was answered as timed out -- nothing
    is applied and QueryTimeout is raised."""
    with store.write_lock:
        if (deadline is not None and time.monotonic() > deadline) or (may_commit is not None and not may_commit()):
            raise QueryTimeout(f"{what} exceeded its timeout of {timeout} s")
        return store.commit(changes)


# ------------------------------------------------------------------ whole loads
def load(store: Store, source, format: str | None = None, *, media_type: str | None = None,
         graph: str | None = None, replace: bool = False, base: str | None = None, lenient: bool = False,
         name: str | None = None, progress: bool = False, allow_fetch: bool | None = None) -> tuple[LoadReport, bool]:
    """Parse, intern and commit one input atomically: (report, whether ``graph`` was
    created). ``source``: a path, or a payload (bytes / str) of ``media_type``.
    Default-graph statements go to ``graph`` (None = the default graph), replacing its
    content with ``replace``; quads keep their own graph."""
    if media_type is not None:
        format = loader.format_for_media_type(media_type)
        if isinstance(source, str):
            source = source.encode("utf-8")
        source, name = bytes(source), name or "<data>"
    target = graph_id(store, graph, create=True)
    rows, gids, report = read(store, source, format, base=base, lenient=lenient, name=name, progress=progress,
                              allow_fetch=allow_fetch)
    return _commit(store, rows, gids, report, target, replace)


def load_parts(store: Store, parts, *, graph: str | None = None, replace: bool = False, base: str | None = None,
               allow_fetch: bool = False) -> tuple[LoadReport, bool]:
    """Several payloads (``(data, media_type, name)`` each: the files of one multipart
    upload) committed as one write: every part is parsed and interned first (each with
    its own blank node scope), so a bad part commits nothing of any part. Otherwise as
    :func:`load`: (report, whether ``graph`` was created)."""
    target = graph_id(store, graph, create=True)
    report = LoadReport()
    rows_l: list[np.ndarray] = []
    gids_l: list[np.ndarray | None] = []
    for data, media_type, name in parts:
        fmt = loader.format_for_media_type(media_type)
        try:
            rows, gids, rep = read(store, bytes(data), fmt, base=base, name=name, allow_fetch=allow_fetch)
        except LoadError as e:  # say which part
            raise LoadError(f"{name}: {e.message}", source=e.source, line=e.line, column=e.column) from None
        report.triples += rep.triples
        rows_l.append(rows)
        gids_l.append(gids)
    if not rows_l:
        return _commit(store, np.zeros((0, 3), dtype=np.int64), None, report, target, replace)
    rows = np.concatenate(rows_l)
    gids = None
    if any(g is not None for g in gids_l):
        gids = np.concatenate([np.full(len(r), -1, dtype=np.int64) if g is None else g
                               for r, g in zip(rows_l, gids_l, strict=True)])
    return _commit(store, rows, gids, report, target, replace)


def _commit(store: Store, rows: np.ndarray, gids: np.ndarray | None, report: LoadReport, target: int | None,
            replace: bool) -> tuple[LoadReport, bool]:
    changes = changes_for(rows, gids, target, replace)
    d = store.dictionary
    with store.write_lock:
        created = target is not None and target not in store.snapshot().named
        apply(store, changes)
        names = []
        for gv in set(changes.add) | ({target} if target is not None else set()):
            if gv is None:
                names.append(None)
            else:
                k = d.key(gv)
                names.append(k[1:-1] if k.startswith("<") else k)
    report.graphs = sorted(names, key=lambda x: (x is not None, x or ""))
    return report, created


def _release_memory() -> None:
    """Give the parse temporaries back to the OS (arrow pool, glibc arenas)."""
    try:
        pa.default_memory_pool().release_unused()
    except Exception:  # noqa: BLE001
        pass
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except Exception:  # noqa: BLE001
            pass


def load_file(store: Store, path, graph: str | None = None, format: str | None = None,
              base: str | None = None, lenient: bool = False, progress: bool = False) -> LoadReport:
    """Load one RDF file into ``store`` atomically (see :func:`load`; ``lenient``: bad
    statements are skipped and reported)."""
    path = os.fspath(path)
    fmt = loader.normalize_format(format).name if format else loader.guess_format(path)
    if not os.path.exists(path):
        raise LoadError("file not found", source=path)
    if base is None:  # (line formats have no relative IRIs and ignore it)
        base = "file://" + os.path.abspath(path)
    try:
        return load(store, path, fmt, graph=graph, base=base, lenient=lenient, progress=progress,
                    name=os.path.basename(path))[0]
    finally:
        _release_memory()


def load_data(store: Store, data: bytes | str, media_type: str, graph: str | None = None,
              base: str | None = None, lenient: bool = False, allow_fetch: bool = False) -> LoadReport:
    """Load an in-memory payload (``media_type`` like ``text/turtle``) atomically; its
    parser fetches nothing unless ``allow_fetch``."""
    try:
        return load(store, data, media_type=media_type, graph=graph, base=base, lenient=lenient,
                    allow_fetch=allow_fetch)[0]
    finally:
        if len(data) > 1 << 20:
            _release_memory()
