"""Persistence of a Store in a data directory: segment files + one manifest.

Layout of ``data_dir``::

    MANIFEST.json          the only mutable file; replaced atomically
    pack-<sn>-<tag>.npy    one per commit: raw bytes of the CSR arrays the commit built
    dict-<sn>-<tag>-*.npy  dictionary tail chunks (blob, offsets, numeric) and hash index

A commit (under the store's writer lock) writes the arrays that are new since
the last commit (PredShards without ``files``, dictionary ids past
``persisted_n``) as new files, fsyncs them, writes ``MANIFEST.json.tmp``,
fsyncs it, ``os.replace``-s it over the manifest and fsyncs the directory.
Only then are files that no manifest references deleted. A crash at any
point leaves the previous manifest and everything it names intact; files of
an interrupted commit are garbage-collected at the next start.

Shards are read and rebuilt only through their columnar export/import calls
(:meth:`engine.kv.api.ShardReader.export`, :meth:`Shard.from_columns`): a pack
entry is one predicate's :class:`PredColumns` in one shard.

Start-up reads the manifest and memory-maps the packs (``np.load(mmap_mode='r')``);
CSR arrays are zero-copy views into them. The dictionary blob/offsets/numeric
are read into growable in-memory arrays (they are appended to), its hash
index is memory-mapped.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass

import numpy as np

from engine.kv.api import PredColumns
from engine.kv.dictionary import Dictionary
from engine.kv.graph import GraphIndex
from engine.kv.shard import Shard

MANIFEST = "MANIFEST.json"
_VERSION = 1
_MAX_DICT_CHUNKS = 32


@dataclass
class PersistedState:
    sn: int
    n_shards: int
    load_counter: int
    dictionary: Dictionary
    default: GraphIndex
    named: dict[int, GraphIndex]


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new
    content, never a mix: write ``path.tmp``, fsync it, fsync the directory
    (entries of files written before), rename over ``path``, fsync again."""
    d = os.path.dirname(path) or "."
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(d)
    os.replace(tmp, path)
    _fsync_dir(d)


def _write_npy(path: str, arr: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def map_graph(directory: str, entries: list, n_shards: int, packs: dict[str, np.ndarray],
              owned: frozenset[int] | None = None) -> GraphIndex:
    """The graph a manifest's ``entries`` describe, as zero-copy CSR views of the
    pack files in ``directory``, memory-mapped read-only (``packs`` caches the
    maps by file name). Also how a cluster's serving process reads a worker's
    partition on the same host: the worker's packs live in shared memory (or its
    data directory), so in-place reads cost the worker no CPU."""
    per_shard: list[dict] = [{} for _ in range(n_shards)]
    for shard_no, pid, pack, refs in entries:
        raw = packs.get(pack)
        if raw is None:
            # a plain ndarray view of the map: np.memmap's slices run Python code (its
            # __array_finalize__) that costs microseconds per one-vertex lookup
            raw = packs[pack] = np.load(os.path.join(directory, pack), mmap_mode="r").view(np.ndarray)
        arrs = [raw[off : off + n * np.dtype(dt).itemsize].view(dt) for off, dt, n in refs]
        per_shard[shard_no][int(pid)] = (PredColumns(*arrs), {"pack": pack, "refs": refs})
    return GraphIndex([Shard.from_columns(k, n_shards, per_shard[k]) for k in range(n_shards)], owned=owned)


class Persistence:
    def __init__(self, data_dir: str, owned: frozenset[int] | None = None):
        self.dir = os.fspath(data_dir)
        os.makedirs(self.dir, exist_ok=True)
        #: the shards this directory holds (a cluster worker's partitions); None = all
        self.owned = owned
        #: the manifest last read or written (a worker sends its graph entries to the coordinator)
        self.manifest: dict | None = None
        # per chunk of ids: [blob, offsets, numeric, hashes, hash_ids] file names; the
        # hash files hold the sorted (hash, id) entries of that chunk's ids only
        self._dict_chunks: list[list[str]] = []
        self._packs: dict[str, np.ndarray] = {}

    def _p(self, name: str) -> str:
        return os.path.join(self.dir, name)

    # ------------------------------------------------------------ open
    def open(self, shards: int) -> PersistedState | None:
        path = self._p(MANIFEST)
        if not os.path.exists(path):
            self._gc(set())
            return None
        with open(path, encoding="utf-8") as f:
            man = json.load(f)
        if man.get("version") != _VERSION:
            raise ValueError(f"unsupported manifest version in {path}")
        self._gc(self._referenced(man))
        self.manifest = man
        dm = man["dictionary"]
        self._dict_chunks = [list(c) for c in dm["chunks"]]
        if self._dict_chunks:
            ch = self._dict_chunks
            blob = np.concatenate([np.load(self._p(c[0])) for c in ch])
            offs = np.concatenate([np.zeros(1, np.int64)] + [np.load(self._p(c[1])) for c in ch])
            num = np.concatenate([np.load(self._p(c[2])) for c in ch])
            hashes = [np.load(self._p(c[3]), mmap_mode="r").view(np.ndarray) for c in ch]
            hids = [np.load(self._p(c[4]), mmap_mode="r").view(np.ndarray) for c in ch]
            if len(ch) == 1:
                hashes, hids = hashes[0], hids[0]
            else:
                hashes, hids = np.concatenate(hashes), np.concatenate(hids)
                order = np.argsort(hashes, kind="stable")
                hashes, hids = hashes[order], hids[order]
            d = Dictionary.from_arrays(blob, offs, num, hashes, hids)
        else:
            d = Dictionary()
        n_shards = int(man["shards"])
        default = self._graph(man["graphs"]["default"], n_shards)
        named = {int(g): self._graph(entries, n_shards) for g, entries in man["graphs"]["named"].items()}
        return PersistedState(int(man["sn"]), n_shards, int(man.get("load_counter", 0)), d, default, named)

    def mapped(self) -> tuple[GraphIndex, dict[int, GraphIndex]]:
        """The graphs of the last manifest, memory-mapped from the packs (a cluster
        worker swaps its freshly built arrays for these after each commit, so the
        only copy of its partition is the one the serving process maps too)."""
        man = self.manifest
        n = int(man["shards"])
        return (self._graph(man["graphs"]["default"], n),
                {int(g): self._graph(e, n) for g, e in man["graphs"]["named"].items()})

    def _graph(self, entries: list, n_shards: int) -> GraphIndex:
        return map_graph(self.dir, entries, n_shards, self._packs, self.owned)

    # ------------------------------------------------------------ save
    def save(self, snap, prev, n_shards: int, load_counter: int, extra: dict | None = None) -> None:
        """Persist ``snap`` (``prev``: the snapshot before it). ``extra`` is kept in the
        manifest as it is (a cluster worker's partitions and vector timestamps)."""
        tag = f"{snap.sn:08d}-{secrets.token_hex(4)}"
        written: list[str] = []
        dict_chunks = self._save_dictionary(snap.dictionary, tag, written)
        graphs = {"default": snap.default, **{str(g): gi for g, gi in snap.named.items()}}
        # collect the segments (one predicate in one shard) not yet on disk
        new: list = []  # (segment, columns)
        seen: set[int] = set()
        exported: dict[str, list] = {}  # graph -> [(shard no, pid, segment)]
        for name, gi in graphs.items():
            rows = exported[name] = []
            for sh in gi.shards:
                for pid, cols, seg in sh.export():
                    rows.append((sh.no, pid, seg))
                    if seg.files is None and id(seg) not in seen:
                        seen.add(id(seg))
                        new.append((seg, cols))
        if new:
            pack = f"pack-{tag}.npy"
            chunks: list[np.ndarray] = []
            pos = 0
            refs_of: list[list] = []
            for _, cols in new:
                refs = []
                for a in cols:
                    b = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
                    refs.append([pos, a.dtype.str, int(len(a))])
                    chunks.append(b)
                    pos += len(b)
                    pad = (-pos) % 8
                    if pad:
                        chunks.append(np.zeros(pad, np.uint8))
                        pos += pad
                refs_of.append(refs)
            _write_npy(self._p(pack), np.concatenate(chunks) if chunks else np.zeros(0, np.uint8))
            written.append(pack)
        else:
            pack, refs_of = None, []
        man_graphs: dict = {"default": None, "named": {}}
        pending = {id(seg): (pack, refs) for (seg, _), refs in zip(new, refs_of, strict=True)}
        for name, rows in exported.items():
            entries = []
            for no, pid, seg in rows:
                if seg.files is not None:
                    entries.append([no, int(pid), seg.files["pack"], seg.files["refs"]])
                else:
                    pk, refs = pending[id(seg)]
                    entries.append([no, int(pid), pk, refs])
            if name == "default":
                man_graphs["default"] = entries
            else:
                man_graphs["named"][name] = entries
        man = {
            "version": _VERSION,
            "sn": snap.sn,
            "shards": n_shards,
            "load_counter": load_counter,
            "dictionary": {"n": len(snap.dictionary), "chunks": dict_chunks},
            "graphs": man_graphs,
        }
        if extra is not None:
            man["extra"] = extra
        atomic_write(self._p(MANIFEST), json.dumps(man, separators=(",", ":")).encode("utf-8"))
        # the switch happened: mark arrays as persisted, then collect garbage
        for seg, _ in new:
            pk, refs = pending[id(seg)]
            seg.files = {"pack": pk, "refs": refs}
        snap.dictionary.persisted_n = len(snap.dictionary)
        self._dict_chunks = dict_chunks
        self.manifest = man
        self._gc(self._referenced(man))

    def _save_dictionary(self, d: Dictionary, tag: str, written: list[str]) -> list[list[str]]:
        n = len(d)
        pn = d.persisted_n
        if n == pn and (self._dict_chunks or n == 0):  # nothing new (a cluster worker has no terms)
            return self._dict_chunks
        raw = d.raw_arrays()
        if len(self._dict_chunks) >= _MAX_DICT_CHUNKS:
            pn = 0  # compact: rewrite everything as one chunk
            chunks: list[list[str]] = []
        else:
            chunks = list(self._dict_chunks)
        off = raw["offsets"]
        hashes, hids = raw["hashes"], raw["hash_ids"]
        if pn > 0:
            sel = np.flatnonzero(hids >= pn)
            hashes, hids = hashes[sel], hids[sel]
        names = [f"dict-{tag}-{k}.npy" for k in ("blob", "offsets", "numeric", "hashes", "hashids")]
        arrays = [raw["blob"][int(off[pn]) : int(off[n])], off[pn + 1 : n + 1], raw["numeric"][pn:n], hashes, hids]
        for name, arr in zip(names, arrays, strict=True):
            _write_npy(self._p(name), arr)
        written.extend(names)
        chunks.append(names)
        return chunks

    # ------------------------------------------------------------ garbage
    @staticmethod
    def _referenced(man: dict) -> set[str]:
        refs = {MANIFEST}
        dm = man["dictionary"]
        for c in dm["chunks"]:
            refs.update(c)
        gr = man["graphs"]
        for entries in [gr["default"], *gr["named"].values()]:
            for e in entries:
                refs.add(e[2])
        return refs

    def _gc(self, keep: set[str]) -> None:
        for name in os.listdir(self.dir):
            if name in keep:
                continue
            if name.startswith(("pack-", "dict-")) or name == MANIFEST + ".tmp":
                try:
                    os.remove(self._p(name))
                except OSError:
                    pass
        self._packs = {k: v for k, v in self._packs.items() if k in keep}
