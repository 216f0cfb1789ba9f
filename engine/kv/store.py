"""Store: dictionary + default graph + named graphs, as immutable snapshots.

``commit(changes)`` builds a new :class:`Snapshot` under ``write_lock`` and
publishes it with one reference assignment, so readers holding an older
snapshot are never disturbed. Commits are copy-on-write per (graph,
predicate): only the predicates a commit touches get new CSR arrays.

Writers do not call ``commit`` themselves: they go through the one write path,
:func:`engine.io.ingest.apply`.

With ``data_dir`` the store is persistent (see :mod:`engine.kv.persist`): a
commit writes new segment files and atomically switches the manifest before
the new snapshot is published.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType

import numpy as np

from engine.kv import vertex_preds
from engine.kv.dictionary import Dictionary
from engine.kv.graph import GraphIndex, empty_graph

__all__ = ["Store", "Snapshot", "Changes", "apply_changes", "snapshot_stats"]


@dataclass
class Changes:
    """What one commit does, applied in this order: drop, create, remove, add."""

    drop: set[int | None] = field(default_factory=set)
    create: set[int] = field(default_factory=set)
    remove: dict[int | None, np.ndarray] = field(default_factory=dict)
    add: dict[int | None, np.ndarray] = field(default_factory=dict)
    #: the stream batches this commit carries (stream name -> batch number); a
    #: cluster advances each worker's vector timestamp by them (engine.snapshot.vts)
    origin: dict[str, int] | None = None

    def is_empty(self) -> bool:
        return not (self.drop or self.create or self.remove or self.add)


class Snapshot:
    """An immutable view of the store at one commit."""

    __slots__ = ("sn", "dictionary", "default", "named", "_empty")

    def __init__(self, sn: int, dictionary: Dictionary, default: GraphIndex,
                 named: Mapping[int, GraphIndex], empty: GraphIndex):
        self.sn = sn
        self.dictionary = dictionary
        self.default = default
        self.named: Mapping[int, GraphIndex] = MappingProxyType(dict(named))
        self._empty = empty

    def graph(self, gid: int | None) -> GraphIndex:
        if gid is None:
            return self.default
        return self.named.get(int(gid), self._empty)

    @property
    def n_triples(self) -> int:
        return self.default.n_triples + sum(g.n_triples for g in self.named.values())


def apply_changes(default: GraphIndex, named: Mapping[int, GraphIndex], changes: Changes, empty: GraphIndex
                  ) -> tuple[GraphIndex, dict[int, GraphIndex]]:
    """The graphs after ``changes`` (drop, create, remove, add in that order); the
    inputs are not modified. Shared by the single-process store and a cluster
    worker, which applies its share of a commit to its own partitions."""
    named = dict(named)
    for g in changes.drop:
        if g is None:
            default = empty
        else:
            named.pop(int(g), None)
    for g in changes.create:
        named.setdefault(int(g), empty)
    for g in set(changes.remove) | set(changes.add):
        rem = changes.remove.get(g)
        add = changes.add.get(g)
        if g is None:
            default = default.apply(rem, add)
            continue
        g = int(g)
        base = named.get(g)
        if base is None:
            if add is None or np.asarray(add).size == 0:
                continue  # removing from an absent graph: no-op
            base = empty
        named[g] = base.apply(rem, add)
    return default, named


def snapshot_stats(snap: Snapshot, n_shards: int, graph_bytes: int, persistent: bool) -> dict:
    """The figures /status shows of a store at ``snap`` (``graph_bytes``: what its graphs
    hold in this process)."""
    d = snap.dictionary
    return {
        "sn": snap.sn,
        "shards": n_shards,
        "terms": len(d),
        "triples": snap.n_triples,
        "default_triples": snap.default.n_triples,
        "named_graphs": len(snap.named),
        "graph_triples": {int(g): gi.n_triples for g, gi in snap.named.items()},
        "dictionary_bytes": d.nbytes,
        "dictionary_capacity_bytes": d.capacity_bytes,
        "graph_bytes": graph_bytes,
        "bytes": d.nbytes + graph_bytes,
        "persistent": persistent,
    }


class Store:
    """The one evolving store (see module docstring)."""

    #: called with each new snapshot right after it is published, still under the writer
    #: lock (so in commit order); the commit returns after it (None: nothing to call)
    on_commit = None

    #: the snapshot number read from ``data_dir`` at open (0: a new store): every commit numbered
    #: up to it is on disk (the stream journal's replay finishes a later one it recorded)
    opened_sn = 0

    def __init__(self, shards: int = 4, data_dir: str | None = None):
        if shards < 1:
            raise ValueError("shards must be >= 1")
        self.write_lock = threading.RLock()
        self.data_dir = data_dir
        self._persist = None
        self.load_counter = 0  # used by loaders to make blank node labels unique per load
        if data_dir is not None:
            from engine.kv.persist import Persistence

            self._persist = Persistence(data_dir)
            state = self._persist.open(shards)
            if state is not None:
                self.n_shards = state.n_shards
                self.dictionary = state.dictionary
                self._empty = empty_graph(self.n_shards)
                vertex_preds.seed_empty(self._empty)
                self.load_counter = state.load_counter
                self._snapshot = Snapshot(state.sn, self.dictionary, state.default, state.named, self._empty)
                self.opened_sn = state.sn
                for g in (state.default, *state.named.values()):  # (commits carry them from here on)
                    vertex_preds.prime(g)
                return
        self.n_shards = shards
        self.dictionary = Dictionary()
        self._empty = empty_graph(shards)
        vertex_preds.seed_empty(self._empty)  # (every graph the commits make carries its edge indexes)
        self._snapshot = Snapshot(0, self.dictionary, self._empty, {}, self._empty)
        self.opened_sn = 0

    def snapshot(self) -> Snapshot:
        """The current snapshot. (Shadowed per instance by the C call the ``_snapshot``
        setter makes: every query asks for it, the HTTP lane once per request, and this
        method returning an attribute was a Python call each time.)"""
        return self._snap

    @property
    def _snapshot(self) -> Snapshot:
        return self._snap

    @_snapshot.setter
    def _snapshot(self, snap: Snapshot) -> None:
        self._snap = snap
        self.snapshot = repeat(snap).__next__  # type: ignore[method-assign]  # (a C call answering ``snap``)

    def next_load_id(self) -> int:
        with self.write_lock:
            self.load_counter += 1
            return self.load_counter

    def commit(self, changes: Changes) -> Snapshot:
        with self.write_lock:
            cur = self._snapshot
            default, named = apply_changes(cur.default, cur.named, changes, self._empty)
            if default is not cur.default:  # (the writer pays for the edge-index patches)
                vertex_preds.settle(default)
            for g, gi in named.items():
                if gi is not cur.named.get(g):
                    vertex_preds.settle(gi)
            snap = Snapshot(cur.sn + 1, self.dictionary, default, named, self._empty)
            if self._persist is not None:
                self._persist.save(snap, cur, self.n_shards, self.load_counter)
            self._snapshot = snap
            hook = self.on_commit
            if hook is not None:  # e.g. server/processes.py: every query process switches before we return
                hook(snap)
            return snap

    def remap(self) -> None:
        """Swap the current snapshot's graph arrays for the persisted, memory-mapped ones
        (a persistent store only): after a bulk load the only copy of the graph is the
        one other processes map too (``jindou serve --processes``)."""
        if self._persist is None or self._persist.manifest is None:
            return
        with self.write_lock:
            default, named = self._persist.mapped()
            cur = self._snapshot
            vertex_preds.transfer(cur.default, default)  # (the same triples: the same edge indexes)
            for g, gi in named.items():
                if g in cur.named:
                    vertex_preds.transfer(cur.named[g], gi)
            self._snapshot = Snapshot(cur.sn, self.dictionary, default, named, self._empty)
            self._map_dictionary()

    def _map_dictionary(self) -> None:
        """The dictionary's arrays as the mapped chunk file when one chunk holds all of
        it (same content; an append copies them to the heap again, see Dictionary._reserve)."""
        import os

        d = self.dictionary
        chunks = self._persist.manifest["dictionary"]["chunks"]
        if len(chunks) != 1 or d.persisted_n != len(d) or len(d) == 0:
            return
        arrays = [np.load(os.path.join(self._persist.dir, f), mmap_mode="r").view(np.ndarray) for f in chunks[0]]
        if len(arrays[1]) == len(d):
            d.use_persisted(*arrays)

    def stats(self) -> dict:
        snap = self._snapshot
        # (with the vertex indexes held for them: the edge indexes are about the graphs' size)
        graph_bytes = sum(g.nbytes + vertex_preds.index_bytes(g) for g in (snap.default, *snap.named.values()))
        return snapshot_stats(snap, self.n_shards, graph_bytes, self.data_dir is not None)

    def close(self) -> None:
        pass
