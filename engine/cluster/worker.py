"""A cluster worker: the partitions it owns, their versions, and its Flight service.

A worker holds partition ``k`` of ``P`` for each ``k`` it owns
(:mod:`engine.kv.partition`: OUT edges with the subject's owner, IN edges with
the object's owner), for every graph, as a :class:`engine.kv.graph.GraphIndex`
whose other shards stay empty. It knows no terms: ids only.

Writes are two-phase. ``prepare(sn, base)`` builds version ``sn`` from the
current one (``base``) in memory; ``commit(sn)`` persists it (segment packs +
an atomically replaced manifest, :mod:`engine.kv.persist`), makes it current
and advances the worker's Local_VTS by the stream batches it carried
(:class:`engine.snapshot.vts.VectorClock`); ``abort`` forgets it. Older
versions stay readable while the serving process still reads them (it sends
the versions to keep with each commit).

The data directory is always a real one: ``--data-dir`` (durable) or, without
it, a private directory in shared memory (``/dev/shm``). Either way the
serving process on the same host maps the worker's packs read-only and
explores them without calling the worker (:mod:`engine.cluster.transport`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from engine.cluster import wire
from engine.errors import JindouError
from engine.kv.api import PredColumns
from engine.kv.dictionary import Dictionary
from engine.kv.graph import GraphIndex, empty_graph
from engine.kv.persist import MANIFEST, Persistence
from engine.kv.store import Changes, Snapshot, apply_changes
from engine.snapshot.vts import VectorClock

__all__ = ["Partitions", "WorkerService", "main", "boot_id"]

_NO_TERMS = Dictionary()
#: versions kept beyond the ones the serving process says it reads
_SPARE_VERSIONS = 2


def boot_id() -> str:
    """This host's boot id: two processes with the same one share /dev/shm and page cache."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Conflict(Exception):
    """A call that does not fit the worker's state (wrong base version, other assignment)."""


class Partitions:
    """The partitions one worker owns, by version (see module docstring)."""

    def __init__(self, data_dir: str):
        self.dir = os.path.abspath(data_dir)
        os.makedirs(self.dir, exist_ok=True)
        self.lock = threading.RLock()
        self.persist: Persistence | None = None
        self.n_parts = 0
        self.owned: frozenset[int] = frozenset()
        self.cluster = ""
        self.sn = 0
        self.vts = VectorClock()
        self.versions: dict[int, tuple[GraphIndex, dict[int, GraphIndex]]] = {}
        self._pending: tuple | None = None
        self._empty: GraphIndex | None = None
        path = os.path.join(self.dir, MANIFEST)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                extra = json.load(f).get("extra") or {}
            if "n_parts" in extra:
                self._open(int(extra["n_parts"]), frozenset(extra["owned"]), extra.get("cluster", ""))

    def _open(self, n_parts: int, owned: frozenset[int], cluster: str) -> None:
        self.persist = Persistence(self.dir, owned)
        state = self.persist.open(n_parts)
        self.n_parts, self.owned, self.cluster = n_parts, owned, cluster
        self._empty = empty_graph(n_parts, owned)
        if state is None:
            self.sn = 0
            self.versions = {0: (self._empty, {})}
            return
        extra = (self.persist.manifest or {}).get("extra") or {}
        self.sn = state.sn
        self.vts = VectorClock(extra.get("vts") or {})
        self.versions = {state.sn: (state.default, dict(state.named))}

    # ------------------------------------------------------------ state
    @property
    def attached(self) -> bool:
        return self.persist is not None

    def attach(self, n_parts: int, owned: list[int], cluster: str) -> dict:
        """Take partitions ``owned`` of ``n_parts`` for cluster ``cluster`` (the first
        call initializes an empty data directory; later ones must match it)."""
        owned_set = frozenset(int(k) for k in owned)
        with self.lock:
            if self.persist is None:
                self._open(int(n_parts), owned_set, cluster)
                self.persist.save(self._snapshot(self.sn), None, self.n_parts, 0, extra=self._extra())
            elif (self.n_parts, self.owned) != (int(n_parts), owned_set) or (self.cluster and cluster
                                                                              and self.cluster != cluster):
                raise Conflict(f"this worker's data directory holds partitions {sorted(self.owned)} of "
                               f"{self.n_parts} for cluster {self.cluster!r}, not {sorted(owned_set)} of "
                               f"{n_parts} for {cluster!r}")
            return self.describe()

    def _extra(self) -> dict:
        return {"n_parts": self.n_parts, "owned": sorted(self.owned), "cluster": self.cluster,
                "vts": self.vts.snapshot()}

    def _snapshot(self, sn: int, graphs=None) -> Snapshot:
        default, named = graphs if graphs is not None else self.versions[self.sn]
        return Snapshot(sn, _NO_TERMS, default, named, self._empty)

    def describe(self) -> dict:
        """What the serving process needs to read this worker's current version."""
        with self.lock:
            man = self.persist.manifest if self.persist is not None else None
            default, named = self.versions.get(self.sn, (None, {}))
            return {
                "pid": os.getpid(), "boot_id": boot_id(), "dir": self.dir, "sn": self.sn,
                "n_parts": self.n_parts, "owned": sorted(self.owned), "cluster": self.cluster,
                "vts": self.vts.snapshot(),
                "graphs": man["graphs"] if man else {"default": [], "named": {}},
                "stats": _stats_of(default, named) if default is not None else {},
                "triples": self.triples(),
                **({"rdma": self._rdma_publish(default, named)} if default is not None and self._rdma_ready()
                   else {}),
            }

    # ------------------------------------------------------------ RDMA
    _rdma = None
    _rdma_why: str | None = "not tried"

    def _rdma_ready(self) -> bool:
        """Whether this worker publishes its arrays for one-sided RDMA reads (an RDMA
        device and pyverbs are present; :mod:`engine.cluster.rdma`)."""
        if self._rdma is None and self._rdma_why == "not tried":
            from engine.cluster import rdma

            self._rdma_why = rdma.unavailable_reason()
            if self._rdma_why is None:
                self._rdma = rdma.RdmaExporter()
                self._rdma_regs: dict[tuple, tuple] = {}
        return self._rdma is not None

    def _rdma_publish(self, default: GraphIndex, named: dict) -> dict:
        """``{graph: {partition: {pid: six descriptors}}}`` of the current version, every
        array registered once (by segment); registrations of segments no retained
        version holds are released."""
        from engine.cluster.ranged import COLUMNS

        out, used = {}, set()
        for g, gi in [(-1, default), *named.items()]:
            per = {}
            for sh in gi.shards:
                if gi.owned is not None and sh.no not in gi.owned:
                    continue
                segs = {}
                for pid, cols, seg in sh.export():
                    key = (id(seg), int(pid))
                    hit = self._rdma_regs.get(key)
                    if hit is None:
                        # the entry holds the segment: its id cannot be reused while registered
                        hit = (seg, {n: self._rdma.register(a) for n, a in zip(COLUMNS, cols, strict=True)})
                        self._rdma_regs[key] = hit
                    segs[str(pid)] = hit[1]
                per[str(sh.no)] = segs
            out[str(g)] = per
        for d, nm in self.versions.values():
            for gi in [d, *nm.values()]:
                for sh in gi.shards:
                    used.update((id(seg), int(pid)) for pid, _, seg in sh.export())
        for key in [k for k in self._rdma_regs if k not in used]:
            for desc in self._rdma_regs.pop(key)[1].values():
                self._rdma.unregister(desc)
        return out

    def rdma_accept(self, peer: dict) -> dict:
        with self.lock:
            if not self._rdma_ready():
                raise Conflict(f"no RDMA here: {self._rdma_why}")
            return self._rdma.accept(peer)

    def triples(self) -> int:
        """Triples stored here: OUT edges of owned subjects (each triple counted by one worker)."""
        got = self.versions.get(self.sn)
        if got is None:
            return 0
        default, named = got
        return sum(_owned_triples(g) for g in [default, *named.values()])

    def graph(self, sn: int, g: int) -> GraphIndex:
        got = self.versions.get(int(sn))
        if got is None:
            raise Conflict(f"version {sn} is not held here (current {self.sn})")
        default, named = got
        if g < 0:
            return default
        return named.get(int(g), self._empty)

    # ------------------------------------------------------------ writes
    def prepare(self, sn: int, base: int, drop: list, create: list, parts: list, origin: dict | None) -> None:
        with self.lock:
            if not self.attached:
                raise Conflict("not attached to a cluster")
            if base != self.sn:
                raise Conflict(f"prepare of version {sn} on base {base}, but this worker is at {self.sn}")
            ch = Changes(drop={None if g is None or g < 0 else int(g) for g in drop},
                         create={int(g) for g in create}, origin=origin)
            for g, rows, add in parts:
                key = None if g < 0 else int(g)
                target = ch.add if add else ch.remove
                target[key] = rows if key not in target else np.concatenate([target[key], rows])
            default, named = self.versions[self.sn]
            self._pending = (int(sn), apply_changes(default, named, ch, self._empty), origin or {})

    def commit(self, sn: int, keep: list[int]) -> dict:
        with self.lock:
            p = self._pending
            if p is None or p[0] != sn:
                if sn == self.sn:  # a retried commit that already happened
                    return self.describe()
                raise Conflict(f"commit of version {sn} that was not prepared")
            _, graphs, origin = p
            vts_before = self.vts.snapshot()
            for stream, batch in origin.items():
                self.vts.advance(stream, int(batch))
            try:
                self.persist.save(self._snapshot(sn, graphs), None, self.n_parts, 0, extra=self._extra())
            except BaseException:
                self.vts = VectorClock(vts_before)
                raise
            self._pending = None
            self.versions[sn] = self.persist.mapped()  # the heap copies go with the older versions
            self.sn = sn
            keep_set = {int(k) for k in keep} | {sn}
            older = sorted(v for v in self.versions if v not in keep_set)
            for v in older[:max(0, len(older) - _SPARE_VERSIONS)]:
                del self.versions[v]
            return self.describe()

    def abort(self, sn: int) -> None:
        with self.lock:
            if self._pending is not None and self._pending[0] == sn:
                self._pending = None


def _owned_triples(g: GraphIndex) -> int:
    owned = g.owned
    return sum(sh.degree_stats(int(p))[0] for sh in g.shards if owned is None or sh.no in owned for p in sh.pids())


def _stats_of(default: GraphIndex, named: dict[int, GraphIndex]) -> dict:
    """Per graph (-1 = default) and owned partition: ``[[pid, triples, subjects, objects], ...]``
    (the planner's statistics of a remote shard, sent once per version)."""
    out = {}
    for g, gi in [(-1, default), *named.items()]:
        per = {}
        for sh in gi.shards:
            if gi.owned is not None and sh.no not in gi.owned:
                continue
            per[str(sh.no)] = [[int(p), *sh.degree_stats(int(p))] for p in sh.pids()]
        out[str(g)] = per
    return out


class WorkerService(flight.FlightServerBase):
    """The Flight service of one worker (calls in :mod:`engine.cluster.wire`'s terms)."""

    def __init__(self, location: str, parts: Partitions, **kw):
        super().__init__(location, **kw)
        self.parts = parts
        self.requests = 0
        self.started = time.time()

    # ------------------------------------------------------------ control
    def do_action(self, context, action):
        self.requests += 1
        body = wire.loads(action.body)
        kind = action.type
        try:
            if kind == "attach":
                res = self.parts.attach(body["n_parts"], body["owned"], body.get("cluster", ""))
            elif kind == "describe":
                res = self.parts.describe()
            elif kind == "commit":
                res = self.parts.commit(int(body["sn"]), body.get("keep", []))
            elif kind == "abort":
                self.parts.abort(int(body["sn"]))
                res = {}
            elif kind == "status":
                res = {"pid": os.getpid(), "sn": self.parts.sn, "triples": self.parts.triples(),
                       "rss_bytes": rss_bytes(), "requests": self.requests, "owned": sorted(self.parts.owned),
                       "n_parts": self.parts.n_parts, "uptime_s": round(time.time() - self.started, 3)}
            elif kind == "rdma_accept":
                res = self.parts.rdma_accept(body["peer"])
            elif kind == "ping":
                res = {"sn": self.parts.sn}
            else:
                raise flight.FlightServerError(f"unknown action {kind!r}")
        except Conflict as e:
            raise flight.FlightServerError(f"conflict: {e}") from None
        return iter([flight.Result(wire.dumps(res))])

    def list_actions(self, context):
        return [("attach", "take partitions"), ("describe", "current version"), ("commit", "commit a version"),
                ("abort", "forget a prepared version"), ("status", "process figures"), ("ping", "liveness")]

    # ------------------------------------------------------------ writes
    def do_put(self, context, descriptor, reader, writer):
        self.requests += 1
        h = wire.parse_header(descriptor)
        table = reader.read_all()
        try:
            self.parts.prepare(int(h["sn"]), int(h["base"]), h.get("drop", []), h.get("create", []),
                               wire.rows_of(table), h.get("origin"))
        except Conflict as e:
            raise flight.FlightServerError(f"conflict: {e}") from None
        writer.write(pa.py_buffer(wire.dumps({"prepared": int(h["sn"])})))

    # ------------------------------------------------------------ reads
    def do_exchange(self, context, descriptor, reader, writer):
        self.requests += 1
        h = wire.parse_header(descriptor)
        cols = wire.columns_of(reader.read_all())
        try:
            g = self.parts.graph(int(h["sn"]), int(h.get("g", -1)))
        except Conflict as e:
            raise flight.FlightServerError(f"conflict: {e}") from None
        try:
            out = _read_call(g, h, cols)
        except JindouError as e:  # a budget refusal travels as itself, not as a crash
            raise flight.FlightServerError(f"{e.kind}: {e.detail()}") from None
        writer.begin(out.schema)
        writer.write_table(out)
        writer.close()


def _read_call(g: GraphIndex, h: dict, cols: dict) -> pa.Table:
    op = h["op"]
    if op == "expand":
        r, nb = g.expand(int(h["pid"]), int(h["dir"]), cols["v"])
        return wire.table_of(rows=np.asarray(r, dtype=np.int64), nbrs=np.asarray(nb, dtype=np.int64))
    if op == "contains":
        return wire.table_of(hit=g.contains(int(h["pid"]), cols["s"], cols["o"]))
    if op == "index":
        return wire.table_of(v=np.asarray(g.index(int(h["pid"]), int(h["dir"])), dtype=np.int64))
    if op == "scan":
        s, o = g.scan(int(h["pid"]))
        return wire.table_of(s=np.asarray(s, dtype=np.int64), o=np.asarray(o, dtype=np.int64))
    if op == "vertices":
        return wire.table_of(v=np.asarray(g.vertices(), dtype=np.int64))
    if op == "export":
        pid = int(h["pid"])
        cols = {p: c for p, c, _ in g.shards[int(h["part"])].export()}.get(pid)
        if cols is None:
            cols = [np.zeros(0, dtype=np.int64)] * 6
        return pa.table({f: pa.array([np.asarray(a, dtype=np.int64)], type=pa.list_(pa.int64()))
                         for f, a in zip(PredColumns._fields, cols, strict=True)})
    if op == "step":
        from engine.cluster.forkjoin import run_local_steps

        return run_local_steps(g, h, cols)
    raise flight.FlightServerError(f"unknown read call {op!r}")


# ---------------------------------------------------------------- process
def _watch_parent(ppid: int, server: WorkerService, orphaned: threading.Event) -> None:
    """A worker started by a serving process ends when that process is gone."""
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            orphaned.set()
            server.shutdown()
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="jindou worker",
                                 description="Run a Jindou store worker (see docs/ARCHITECTURE.md, the distributed store)")
    ap.add_argument("--listen", required=True,
                    help="HOST:PORT (or unix:PATH) to serve Arrow Flight on; the serving process connects here")
    ap.add_argument("--data-dir", default=None,
                    help="where the partitions persist (default: a private directory in /dev/shm, removed at exit)")
    ap.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    # set by a serving process for the workers it starts in shared memory: when that
    # process is gone (even killed), the worker removes its data and socket itself
    ap.add_argument("--remove-on-orphan", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    private = None
    data_dir = a.data_dir
    if data_dir is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        private = data_dir = os.path.join(base or "/tmp", f"jindou-worker-{os.getpid()}-{secrets.token_hex(4)}")

        def _remove() -> None:
            shutil.rmtree(private, ignore_errors=True)
        atexit.register(_remove)
    try:
        parts = Partitions(data_dir)
    except (OSError, ValueError, KeyError) as e:
        print(f"jindou worker: cannot open {data_dir}: {e}", file=sys.stderr)
        return 2
    try:
        server = WorkerService(wire.location(a.listen), parts)
    except (OSError, pa.ArrowException) as e:
        print(f"jindou worker: cannot listen on {a.listen}: {e}", file=sys.stderr)
        return 2
    orphaned = threading.Event()
    if a.parent_pid:
        threading.Thread(target=_watch_parent, args=(a.parent_pid, server, orphaned), daemon=True).start()

    def _stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    logging.getLogger("jindou.worker").info("listening on %s (pid %d, data in %s, version %s)", a.listen,
                                            os.getpid(), data_dir, parts.sn)  # the server's log format
    server.serve()
    if orphaned.is_set() and a.remove_on_orphan:
        shutil.rmtree(data_dir, ignore_errors=True)
        if a.listen.startswith("unix:"):
            with contextlib.suppress(OSError):
                os.unlink(a.listen[5:])
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(data_dir))  # the last one out removes the cluster's directory
    return 0


if __name__ == "__main__":
    sys.exit(main())
