"""The cluster store: the serving process's :class:`engine.kv.store.Store` over workers.

It has the single-process store's interface (``snapshot``, ``commit``,
``dictionary``, ``write_lock``, ``stats``), so everything above the storage
API runs unchanged; only where the partitions live differs.

* **Partitions.** ``P`` = the number of workers; worker ``w`` owns partition
  ``w`` (:mod:`engine.kv.partition`). The dictionary stays here.
* **Writes** (:meth:`ClusterStore.commit`, called only by
  :func:`engine.io.ingest.apply`): split by owner (a row goes to the owner of
  its subject and of its object), then two-phase: every worker prepares
  version ``sn`` (in parallel); if one fails the others abort and the write is
  a 503 that changed nothing; else every worker commits (persists) and only
  then is snapshot ``sn`` published -- a reader never sees half of a write.
  Stream batches carry their ``(stream, batch)``; each worker's commit
  advances its Local_VTS, the coordinator's :class:`StableVTS` takes the
  minimum and the :class:`SnapshotPlan` moves the Stable_SN
  (:mod:`engine.snapshot.vts`, Wukong+S section 4.3): the published snapshot
  is always one every worker has.
* **Reads.** A snapshot's graphs are :class:`engine.kv.graph.GraphIndex`
  objects whose shards come from each worker's transport
  (:mod:`engine.cluster.transport`). Workers keep every version a live
  snapshot here still reads (sent with each commit).
* **Failures.** A supervisor thread watches the workers (process exit for
  the ones it started, pings for the others). A down worker makes
  :meth:`snapshot` and writes raise :class:`WorkerUnavailable` at once (503
  naming it). Workers it started are restarted; a restarted worker reopens its
  data directory, and if it missed the commit during which it died, that
  commit's share (kept here) is replayed before it counts as up again.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from engine.cluster import wire
from engine.cluster.remote import TIMED_OUT, WorkerClient
from engine.cluster.transport import choose
from engine.errors import WorkerUnavailable
from engine.kv import partition
from engine.kv.dictionary import Dictionary
from engine.kv.graph import GraphIndex, empty_graph
from engine.kv.persist import Persistence, atomic_write
from engine.kv.store import Changes, Snapshot, snapshot_stats
from engine.snapshot.vts import SnapshotPlan, StableVTS

__all__ = ["ClusterStore", "ClusterSnapshot", "read_cluster_file"]

log = logging.getLogger("jindou.cluster")

_START_TIMEOUT = 60.0
_PING_EVERY = 0.5
#: how often the supervisor looks at the workers' processes (a dead one is noticed this fast)
_WATCH_EVERY = 0.05
_PING_TIMEOUT = 2.0
#: slow pings in a row after which a --cluster worker counts as down
_SLOW_PINGS = 3
_CALL_TIMEOUT = 600.0
#: a dead worker this process started is restarted after this many seconds, doubling
#: (to _RESTART_MAX) while it keeps failing: a crash loop never spins, and the down
#: state is visible in /status meanwhile
_RESTART_AFTER = 1.0
_RESTART_MAX = 30.0


class ClusterSnapshot(Snapshot):
    """A published version (weak-referenceable: live ones are the versions workers keep)."""


def read_cluster_file(path: str) -> list[str]:
    """Worker addresses from a TOML (``[[worker]] address = "h:p"``) or YAML
    (``workers: [{address: h:p}]`` or ``workers: [h:p]``) file."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(raw) or {}
        else:
            import tomllib

            data = tomllib.loads(raw.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - any syntax error of either format: one message
        raise ValueError(f"{path}: not a valid cluster file ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a cluster file is a table with a 'worker' (TOML) or 'workers' (YAML) list")
    items = data.get("worker") or data.get("workers") or []
    out = []
    for it in items:
        addr = it.get("address") if isinstance(it, dict) else it
        if not isinstance(addr, str) or not addr:
            raise ValueError(f"{path}: every worker needs an address (HOST:PORT)")
        out.append(addr)
    if not out:
        raise ValueError(f"{path}: no workers listed")
    return out


def _closer(ref: weakref.ref):
    def close_at_exit() -> None:
        store = ref()
        if store is not None:
            store.close()
    return close_at_exit


class _Worker:
    """One worker as the coordinator sees it."""

    def __init__(self, no: int, address: str, data_dir: str | None = None):
        self.no = no
        self.address = address
        self.name = f"w{no}"
        self.client = WorkerClient(address, call_timeout=_CALL_TIMEOUT)
        self.data_dir = data_dir          # set when this process starts the worker
        self.proc: subprocess.Popen | None = None
        self.state = "starting"
        self.why = ""
        self.desc: dict = {}
        self.transport = None
        self.restarts = 0
        self.slow_pings = 0
        self.down_since = 0.0
        self.backoff = _RESTART_AFTER
        self.replay: tuple[dict, object, int] | None = None  # (prepare header, rows table, sn)
        self.status: dict = {}

    def alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            return False
        return self.state == "up"


class ClusterStore:
    """See module docstring."""

    def __init__(self, *, workers: int = 0, addresses: list[str] | None = None, transport: str = "auto",
                 data_dir: str | None = None, exec_mode: str = "adaptive", restart: bool = True):
        if workers < 1 and not addresses:
            raise ValueError("a cluster store needs workers")
        self.write_lock = threading.RLock()
        self.data_dir = data_dir
        self.transport_name = transport
        self.exec_mode = exec_mode
        self.restart = restart
        self.load_counter = 0
        self._closed = False
        self._lock = threading.Lock()  # worker states
        self._live: weakref.WeakSet = weakref.WeakSet()
        self._graph_ids: set[int] = set()
        self._batch_seq: dict[str, int] = {}
        #: every worker up and alive, as the supervisor last saw it (False until it has looked)
        self._healthy = False
        self._own_tmp: str | None = None
        meta_dir = None
        if data_dir is not None:
            meta_dir = os.path.join(data_dir, "coordinator")
        self._meta = self._read_meta(meta_dir)
        self.cluster_id = self._meta.get("cluster") or secrets.token_hex(8)
        if addresses:
            self.workers = [_Worker(k, a) for k, a in enumerate(addresses)]
        else:
            root = data_dir
            if root is None:
                base = "/dev/shm" if os.path.isdir("/dev/shm") else None
                root = self._own_tmp = os.path.join(base or "/tmp", f"jindou-{os.getpid()}-{secrets.token_hex(4)}")
            os.makedirs(root, exist_ok=True)
            self.workers = [_Worker(k, f"unix:{os.path.join(root, f'worker-{k}.sock')}",
                                    os.path.join(root, f"worker-{k}")) for k in range(workers)]
        self.n_shards = len(self.workers)
        self.vts = StableVTS(w.name for w in self.workers)
        self.plan = SnapshotPlan()
        self._pool = ThreadPoolExecutor(max_workers=max(2, self.n_shards), thread_name_prefix="jindou-cluster")
        # in-place reads of remote partitions, the owners asked at once (a pool of its own:
        # a commit never waits behind reads, nor reads behind a commit)
        self._reads = ThreadPoolExecutor(max_workers=4 * max(2, self.n_shards), thread_name_prefix="jindou-reads")
        self._persist = Persistence(meta_dir) if meta_dir else None
        self.dictionary = Dictionary()
        if self._persist is not None:
            state = self._persist.open(1)
            if state is not None:
                self.dictionary = state.dictionary
                self.load_counter = state.load_counter
        self._empty = empty_graph(self.n_shards)
        if self._persist is not None and not self._meta:
            self._write_meta(0)  # the cluster id, before any worker records it
        try:
            for w in self.workers:
                if w.data_dir is not None:
                    self._spawn(w)
            for w in self.workers:
                self._connect(w)
            sns = {int(w.desc["sn"]) for w in self.workers}
            if len(sns) != 1:
                raise RuntimeError("the workers hold different versions ("
                                   + ", ".join(f"{w.address}: {w.desc['sn']}" for w in self.workers)
                                   + "); the cluster cannot start consistently")
            sn = sns.pop()
            if self._meta and int(self._meta.get("sn", sn)) > sn:
                raise RuntimeError(f"the workers are at version {sn} but the coordinator committed "
                                   f"{self._meta['sn']}: a worker's data directory is missing or older")
            self._graph_ids = set(int(g) for g in self._meta.get("graphs", []))
            for w in self.workers:
                self._graph_ids.update(int(g) for g in w.desc["graphs"]["named"])
            for w in self.workers:
                for stream, batch in (w.desc.get("vts") or {}).items():
                    self.vts.report(w.name, stream, int(batch))
            self._snapshot = self._build(sn)
        except BaseException:
            self.close()
            raise
        self._at_exit = _closer(weakref.ref(self))
        atexit.register(self._at_exit)  # weakly: a closed store can be collected (its maps unmapped)
        self._monitor = threading.Thread(target=self._watch, name="jindou-cluster-monitor", daemon=True)
        self._monitor.start()

    # ------------------------------------------------------------ metadata
    @staticmethod
    def _read_meta(meta_dir: str | None) -> dict:
        if meta_dir is None:
            return {}
        path = os.path.join(meta_dir, "cluster.json")
        if not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def _write_meta(self, sn: int) -> None:
        if self._persist is None:
            return
        snap = Snapshot(sn, self.dictionary, self._empty, {}, self._empty)
        self._persist.save(snap, None, 1, self.load_counter)
        meta = {"cluster": self.cluster_id, "sn": sn, "workers": [w.address for w in self.workers],
                "graphs": sorted(self._graph_ids)}
        atomic_write(os.path.join(self._persist.dir, "cluster.json"), json.dumps(meta).encode("utf-8"))

    # ------------------------------------------------------------ workers
    def _spawn(self, w: _Worker) -> None:
        sock = w.address[len("unix:"):]
        try:
            os.unlink(sock)
        except FileNotFoundError:
            pass
        argv = [sys.executable, "-m", "server.cli", "worker", "--listen", w.address, "--data-dir", w.data_dir,
                "--parent-pid", str(os.getpid())]
        if self._own_tmp is not None:
            argv.append("--remove-on-orphan")
        w.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        w.state = "starting"

    def _connect(self, w: _Worker, deadline: float | None = None) -> None:
        """Wait for the worker, attach it, learn its version and pick its transport."""
        deadline = deadline or time.monotonic() + _START_TIMEOUT
        while True:
            if w.proc is not None and w.proc.poll() is not None:
                raise WorkerUnavailable(w.address, f"exited with status {w.proc.returncode} while starting")
            try:
                w.desc = w.client.action("attach", timeout=5.0, n_parts=len(self.workers), owned=[w.no],
                                         cluster=self.cluster_id)
                break
            except WorkerUnavailable as e:
                if "conflict" in e.why or time.monotonic() > deadline:
                    raise
                if w.proc is None and not w.why:
                    log.warning("waiting for store worker %s", w.address)
                    w.why = "waiting"
                time.sleep(0.05)
        w.transport = choose(self.transport_name, w.client, w.desc)
        w.state = "up"
        w.why = ""

    def _watch(self) -> None:
        """Supervisor: notice dead workers, restart the ones this process started."""
        last_ping = 0.0
        while not self._closed:
            time.sleep(_WATCH_EVERY)
            self._healthy = all(w.state == "up" and (w.proc is None or w.proc.poll() is None)
                                for w in self.workers)
            now = time.monotonic()
            ping = now - last_ping >= _PING_EVERY
            if ping:
                last_ping = now
            for w in self.workers:
                if self._closed:
                    return
                if w.state == "up":
                    dead = w.proc is not None and w.proc.poll() is not None
                    if not dead and ping:
                        try:
                            w.status = w.client.action("status", timeout=_PING_TIMEOUT)
                            w.slow_pings = 0
                        except WorkerUnavailable as e:
                            # refused: gone. Slow: perhaps only busy -- a process this one
                            # started is judged by its exit alone, another after a few
                            # slow pings in a row
                            if e.why != TIMED_OUT:
                                dead = True
                            elif w.proc is None:
                                w.slow_pings += 1
                                dead = w.slow_pings >= _SLOW_PINGS
                    if dead:
                        self._mark_down(w, "down")
                if (w.state == "down" and w.data_dir is not None and self.restart
                        and now - w.down_since >= w.backoff):
                    self._recover(w)
                elif w.state == "down" and w.proc is None and ping:
                    self._recover(w)  # a --cluster worker: try it again (the operator restarts it)

    def _mark_down(self, w: _Worker, why: str) -> None:
        with self._lock:
            self._healthy = False
            if w.state != "down":
                log.warning("store worker %s is %s", w.address, why)
                w.down_since = time.monotonic()
            w.state = "down"
            w.why = why

    def _recover(self, w: _Worker) -> None:
        with self.write_lock:
            if self._closed or w.state == "up":
                return
            w.state = "recovering"
            try:
                if w.data_dir is not None:
                    if w.proc is not None and w.proc.poll() is None:
                        w.proc.kill()
                        w.proc.wait()
                    w.restarts += 1
                    self._spawn(w)
                    w.state = "recovering"
                    self._connect(w, time.monotonic() + _START_TIMEOUT)
                else:
                    self._connect(w, time.monotonic() + _PING_TIMEOUT)
                w.state = "recovering"
                sn = self._snapshot.sn
                have = int(w.desc["sn"])
                if have != sn and w.replay is not None and w.replay[2] == sn and have == sn - 1:
                    header, table, _ = w.replay
                    w.client.put_rows(header, table)
                    w.desc = w.client.action("commit", sn=sn, keep=self._keep())
                    have = int(w.desc["sn"])
                if have != sn:
                    w.state = "down"
                    w.why = f"stale (holds version {have}, the cluster is at {sn})"
                    return
                w.replay = None
                self._snapshot = self._build(sn)
                w.state = "up"
                w.why = ""
                w.backoff = _RESTART_AFTER
                log.warning("store worker %s is up again (version %d)", w.address, sn)
            except WorkerUnavailable as e:
                w.state = "down"
                w.why = e.why
            except Exception as e:  # noqa: BLE001 - a failed recovery leaves the worker down, says why
                w.state = "down"
                w.why = f"recovery failed: {type(e).__name__}"
                log.exception("recovery of store worker %s failed", w.address)
            finally:
                if w.state != "up":
                    w.down_since = time.monotonic()
                    w.backoff = min(_RESTART_MAX, w.backoff * 2)

    def _require_up(self) -> None:
        if self._healthy:  # the supervisor's word, at most _WATCH_EVERY old
            return
        for w in self.workers:
            if w.state != "up" or (w.proc is not None and w.proc.poll() is not None):
                if w.state == "up":
                    self._mark_down(w, "down")
                raise WorkerUnavailable(w.address, w.why or w.state)

    # ------------------------------------------------------------ reads
    def snapshot(self) -> ClusterSnapshot:
        """The published snapshot; WorkerUnavailable at once if a worker is down."""
        self._require_up()
        return self._snapshot

    def _keep(self) -> list[int]:
        return sorted({s.sn for s in list(self._live)})

    def _build(self, sn: int) -> ClusterSnapshot:
        """The snapshot at ``sn`` from every worker's current description."""
        per_worker = [w.transport.shards(w.desc, self.n_shards) for w in self.workers]
        default = self._graph(-1, per_worker, sn)
        named = {g: self._graph(g, per_worker, sn) for g in sorted(self._graph_ids)}
        snap = ClusterSnapshot(sn, self.dictionary, default, named, self._empty)
        self._live.add(snap)
        return snap

    def _graph(self, g: int, per_worker: list, sn: int) -> GraphIndex:
        """Graph ``g`` at version ``sn``: a new index (fork-join names its version) over
        the transports' shards (which keep unchanged segments and their tables)."""
        shards = []
        for k, w in enumerate(self.workers):
            sh = per_worker[k].get(g, {}).get(w.no)
            shards.append(sh if sh is not None else self._empty.shards[k])
        gi = GraphIndex(shards)
        gi.cluster = self
        if not all(w.transport is not None and w.transport.in_process for w in self.workers):
            gi.remote_reads = self._reads
        gi.cluster_sn = sn
        gi.cluster_gid = g
        return gi

    @property
    def transport_kind(self) -> str:
        """The transport the workers are read with (the fork-join cost model's input)."""
        t = self.workers[0].transport
        return t.name if t is not None else "flight"

    # ------------------------------------------------------------ writes
    def next_load_id(self) -> int:
        with self.write_lock:
            self.load_counter += 1
            return self.load_counter

    def _shares(self, changes: Changes) -> list[object]:
        """Per worker, its rows of the commit as one Arrow table."""
        parts: list[list] = [[] for _ in self.workers]
        n = self.n_shards
        for flag, by_graph in ((0, changes.remove), (1, changes.add)):
            for g, rows in by_graph.items():
                if rows is None:
                    continue
                rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
                if not len(rows):
                    continue
                gk = -1 if g is None else int(g)
                for k, sel in enumerate(partition.split_edges(rows[:, 0], rows[:, 2], n)):
                    if sel is not None:
                        parts[k].append((gk, rows[sel], flag))
        return [wire.rows_table(p) for p in parts]

    def _graph_ids_after(self, changes: Changes) -> set[int]:
        ids = set(self._graph_ids)
        for g in changes.drop:
            if g is not None:
                ids.discard(int(g))
        ids.update(int(g) for g in changes.create)
        for g, rows in changes.add.items():
            if g is not None and rows is not None and np.asarray(rows).size:
                ids.add(int(g))
        return ids

    def commit(self, changes: Changes) -> ClusterSnapshot:
        with self.write_lock:
            self._require_up()
            cur = self._snapshot
            sn = cur.sn + 1
            if self._persist is not None:
                self._write_meta(cur.sn)  # the terms first: worker data must never name unknown ids
            # the coordinator numbers each stream's batches itself (the dispatcher of
            # Wukong+S 4.3): increasing within the stream whatever the caller's counters
            origin = {}
            for stream in (changes.origin or {}):
                origin[stream] = self._batch_seq.get(stream, self.vts.value(stream) or 0) + 1
                self._batch_seq[stream] = origin[stream]
                self.plan.assign(stream, origin[stream])
            header = {"sn": sn, "base": cur.sn,
                      "drop": [-1 if g is None else int(g) for g in changes.drop],
                      "create": sorted(int(g) for g in changes.create), "origin": origin}
            tables = self._shares(changes)
            futs = [self._pool.submit(w.client.put_rows, header, t) for w, t in zip(self.workers, tables,
                                                                                     strict=True)]
            failed = None
            for w, f in zip(self.workers, futs, strict=True):
                try:
                    f.result()
                except WorkerUnavailable as e:
                    failed = failed or e
                    self._mark_down(w, e.why)
            if failed is not None:
                for w in self.workers:
                    if w.state == "up":
                        try:
                            w.client.action("abort", timeout=_PING_TIMEOUT, sn=sn)
                        except WorkerUnavailable:
                            pass
                raise failed
            # every worker prepared: the write is decided; commit everywhere
            keep = self._keep()
            futs = [self._pool.submit(w.client.action, "commit", sn=sn, keep=keep) for w in self.workers]
            for w, t, f in zip(self.workers, tables, futs, strict=True):
                try:
                    w.desc = f.result()
                except WorkerUnavailable as e:
                    w.replay = (header, t, sn)  # replayed when it comes back
                    self._mark_down(w, e.why)
            for w in self.workers:
                if w.state == "up":
                    for stream, batch in origin.items():
                        self.vts.report(w.name, stream, int(batch))
            if origin:
                self.plan.advance(self.vts.stable())
            self._graph_ids = self._graph_ids_after(changes)
            if all(w.state == "up" for w in self.workers):
                snap = self._build(sn)
            else:
                # a worker died between the phases: its share waits for its recovery;
                # until then reads fail (503) and the others serve nothing half-done
                snap = ClusterSnapshot(sn, self.dictionary, cur.default, dict(cur.named), self._empty)
                self._live.add(snap)
            self._snapshot = snap
            if self._persist is not None:
                self._write_meta(sn)
            return snap

    # ------------------------------------------------------------ status
    def workers_status(self) -> list[dict]:
        """Per worker: address, pid, state (up / down / recovering / starting), partitions,
        triples, resident memory, requests served (as of the last ping), version."""
        out = []
        for w in self.workers:
            st = w.status  # refreshed by the supervisor every _PING_EVERY seconds
            out.append({
                "address": w.address, "pid": st.get("pid", w.desc.get("pid")), "state": w.state,
                **({"why": w.why} if w.why else {}),
                "partitions": list(w.desc.get("owned", [w.no])), "triples": w.desc.get("triples", st.get("triples")),  # as of its last commit
                "rss_bytes": st.get("rss_bytes"), "requests": st.get("requests"), "version": w.desc.get("sn"),
                "transport": w.transport.name if w.transport is not None else None, "restarts": w.restarts,
                "vts": w.desc.get("vts", {}),
            })
        return out

    def stats(self) -> dict:
        st = snapshot_stats(self._snapshot, self.n_shards, 0, self.data_dir is not None)  # graphs: on the workers
        st["cluster"] = {"workers": len(self.workers), "transport": self.transport_name, "exec": self.exec_mode,
                         "stable_vts": self.vts.stable(), "stable_sn": self.plan.stable_sn}
        return st

    def close(self) -> None:
        self._closed = True
        at_exit = getattr(self, "_at_exit", None)
        if at_exit is not None:
            atexit.unregister(at_exit)
        for w in getattr(self, "workers", []):
            w.client.close()
            if w.proc is not None and w.proc.poll() is None:
                w.proc.terminate()
        for w in getattr(self, "workers", []):
            if w.proc is not None:
                try:
                    w.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    w.proc.wait()
        for pool in (getattr(self, "_pool", None), getattr(self, "_reads", None)):
            if pool is not None:
                pool.shutdown(wait=False)
        if self._own_tmp is not None:
            shutil.rmtree(self._own_tmp, ignore_errors=True)
