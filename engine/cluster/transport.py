"""How the serving process reads a worker's partitions: one interface, three transports.

A transport turns what a worker says of its current version (its manifest's
segment entries, per-predicate statistics, its version number: the
``describe`` / ``commit`` answers of :mod:`engine.cluster.worker`) into one
:class:`engine.kv.api.ShardReader` per partition and graph:

* :class:`SharedMemoryTransport` (same host): the worker's segment packs are
  files in shared memory (or its data directory), memory-mapped read-only here
  and wrapped as ordinary in-process shards -- so in-place steps, the
  one-vertex fast path included, cost the worker no CPU at all: the
  single-host analogue of Wukong's one-sided RDMA READ. Unchanged segments keep
  their mapped arrays (and lookup tables) from one version to the next.
* :class:`FlightTransport` (any host): :class:`engine.cluster.remote.RemoteShard`,
  one Arrow Flight exchange per batched call.
* :class:`RdmaTransport`: one-sided RDMA READs of the worker's registered
  arrays through pyverbs (:mod:`engine.cluster.rdma`); only where a device exists.

:func:`choose` picks one for a worker: ``shm`` needs the same boot id and the
worker's directory visible here.
"""

from __future__ import annotations

import os
import weakref

import numpy as np

from engine.cluster.remote import RemoteShard, WorkerClient
from engine.kv.api import PredColumns
from engine.kv.shard import Shard, segment

__all__ = ["Transport", "SharedMemoryTransport", "FlightTransport", "RdmaTransport", "choose", "TRANSPORTS"]


class Transport:
    """Readers of one worker's partitions (see module docstring)."""

    name = "?"
    #: per-vertex reads are local memory reads (the adaptive planner's cost model uses this)
    in_process = False

    def __init__(self, client: WorkerClient):
        self.client = client

    def shards(self, desc: dict, n_parts: int) -> dict[int, dict[int, object]]:
        """``{graph (-1 = default): {partition: ShardReader}}`` for the worker's version in ``desc``."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class SharedMemoryTransport(Transport):
    name = "shm"
    in_process = True

    def __init__(self, client: WorkerClient, directory: str):
        super().__init__(client)
        self.dir = directory
        self._packs: dict[str, np.ndarray] = {}
        self._segments: dict[tuple, object] = {}
        self._shards: dict[tuple, tuple[tuple, Shard]] = {}

    def shards(self, desc: dict, n_parts: int) -> dict[int, dict[int, object]]:
        packs: dict[str, np.ndarray] = {}
        segments: dict[tuple, object] = {}
        shards: dict[tuple, tuple[tuple, Shard]] = {}
        graphs = desc["graphs"]
        out: dict[int, dict[int, object]] = {}
        for g, entries in [(-1, graphs["default"]), *((int(k), v) for k, v in graphs["named"].items())]:
            per: dict[int, dict[int, object]] = {int(k): {} for k in desc["owned"]}
            for shard_no, pid, pack, refs in entries:
                key = (pack, tuple(tuple(r) for r in refs))
                seg = segments.get(key) or self._segments.get(key)
                if seg is None:
                    raw = packs.get(pack)
                    if raw is None:
                        raw = self._packs.get(pack)
                    if raw is None:
                        # plain ndarray view: np.memmap slices cost microseconds per lookup
                        raw = np.load(os.path.join(self.dir, pack), mmap_mode="r").view(np.ndarray)
                    packs[pack] = raw
                    c = PredColumns(*[raw[off:off + n * np.dtype(dt).itemsize].view(dt) for off, dt, n in refs])
                    seg = segment(c, {"pack": pack, "refs": refs})
                else:
                    packs.setdefault(pack, self._packs.get(pack))
                segments[key] = seg
                per.setdefault(int(shard_no), {})[int(pid)] = seg
            out[g] = {}
            for k, preds in per.items():
                # the same segments: the same Shard object, so the graph above it (and its
                # caches) carries over to the next version
                ids = tuple(sorted((p, id(s)) for p, s in preds.items()))
                hit = self._shards.get((g, k))
                sh = hit[1] if hit is not None and hit[0] == ids else Shard.of_segments(k, n_parts, preds)
                shards[(g, k)] = (ids, sh)
                out[g][k] = sh
        # keep only what this version names: older versions' arrays stay alive
        # through the snapshots that still hold them, not through this cache
        self._packs = {k: v for k, v in packs.items() if v is not None}
        self._segments = segments
        self._shards = shards
        return out


class FlightTransport(Transport):
    """Remote shards; each predicate index a query fetched (Wukong's index vertices) is
    kept here while the worker's segment of that predicate is unchanged, so a
    selective query pays round trips for its expansions only."""

    name = "flight"

    def __init__(self, client: WorkerClient):
        super().__init__(client)
        self._cache: dict = {}

    def shards(self, desc: dict, n_parts: int) -> dict[int, dict[int, object]]:
        sn = int(desc["sn"])
        stats = desc.get("stats", {})
        graphs = desc["graphs"]
        seg_keys: dict[tuple, dict[int, tuple]] = {}
        for g, entries in [(-1, graphs["default"]), *((int(k), v) for k, v in graphs["named"].items())]:
            for shard_no, pid, pack, refs in entries:
                seg_keys.setdefault((g, int(shard_no)), {})[int(pid)] = (pack, tuple(tuple(r) for r in refs))
        live = {key for per in seg_keys.values() for key in per.values()}
        cache = {k: v for k, v in self._cache.items() if k[0] in live}
        self._cache = cache
        out: dict[int, dict[int, object]] = {}
        for g in [-1, *(int(k) for k in graphs["named"])]:
            per = stats.get(str(g), {})
            out[g] = {int(k): RemoteShard(self.client, int(k), n_parts, sn, g, per.get(str(k), []),
                                          seg_keys.get((g, int(k)), {}), cache)
                      for k in desc["owned"]}
        return out


class RdmaTransport(Transport):
    """One-sided RDMA READs through pyverbs (:mod:`engine.cluster.rdma`): the worker
    registers its arrays and says where they are in each version's description;
    :class:`engine.cluster.ranged.RangedShard` caches each predicate's index arrays
    and reads neighbour ranges. Only where a device exists (none on our CI machines:
    :func:`engine.cluster.rdma.unavailable_reason` says why)."""

    name = "rdma"

    def __init__(self, client: WorkerClient):
        from engine.cluster import rdma

        why = rdma.unavailable_reason()
        if why is not None:
            raise RuntimeError(f"the rdma transport cannot run here: {why}")
        super().__init__(client)
        self._reader = rdma.RdmaRangeReader(lambda info: client.action("rdma_accept", peer=info))
        self._cache: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def shards(self, desc: dict, n_parts: int) -> dict[int, dict[int, object]]:
        from engine.cluster.ranged import RangedShard

        if "rdma" not in desc:
            raise RuntimeError(f"worker {self.client.address} publishes no RDMA regions (no device there)")
        out: dict[int, dict[int, object]] = {}
        for g, per in desc["rdma"].items():
            out[int(g)] = {int(k): RangedShard(int(k), n_parts, {int(p): d for p, d in segs.items()}, self._reader,
                                               cache=self._cache)
                           for k, segs in per.items()}
        return out

    def close(self) -> None:
        self._reader.close()


TRANSPORTS = {"shm": SharedMemoryTransport, "flight": FlightTransport, "rdma": RdmaTransport}


def same_host(desc: dict) -> bool:
    """Whether a worker's directory is this host's: same boot id and its manifest readable here."""
    from engine.cluster.worker import boot_id

    d = desc.get("dir") or ""
    return bool(d) and desc.get("boot_id") == boot_id() and os.path.exists(os.path.join(d, "MANIFEST.json"))


def choose(name: str, client: WorkerClient, desc: dict) -> Transport:
    """The transport ``name`` (``auto``: shared memory when the worker is on this host,
    else Flight) for a worker described by ``desc``."""
    if name == "auto":
        name = "shm" if same_host(desc) else "flight"
    if name == "shm":
        if not same_host(desc):
            raise RuntimeError(f"worker {client.address} is not on this host: the shm transport cannot map "
                               "its partitions (use --cluster-transport flight)")
        return SharedMemoryTransport(client, desc["dir"])
    if name == "flight":
        return FlightTransport(client)
    if name == "rdma":
        return RdmaTransport(client)
    raise ValueError(f"unknown transport {name!r}")
