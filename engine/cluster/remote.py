"""The serving process's side of one worker: a Flight client and a remote shard.

:class:`WorkerClient` makes the calls of :mod:`engine.cluster.wire`; every
failure to reach the worker (refused, reset, deadline) becomes
:class:`engine.errors.WorkerUnavailable` naming the worker, which the server
answers with 503: a query never waits on a dead worker and never returns a
partial answer as complete.

:class:`RemoteShard` is a :class:`engine.kv.api.ShardReader` for one partition
at one version whose arrays stay on the worker: each batched call is one
Flight exchange (Wukong's in-place step over TCP: the neighbour lists of the
frontier's remote vertices come back, the query continues here). The planner's
statistics arrive with the version, so planning costs no call.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from engine.arrays import unique
from engine.cluster import wire
from engine.errors import QueryTimeout, RowBudgetExceeded, WorkerUnavailable
from engine.exec.context import query_deadline
from engine.kv.api import PredColumns
from engine.kv.shard import Shard, segment

__all__ = ["WorkerClient", "RemoteShard", "TIMED_OUT"]

#: why a call failed when the worker did not answer in time (it may just be busy)
TIMED_OUT = "not answering in time"

_EMPTY64 = np.zeros(0, dtype=np.int64)
_EMPTY_V = wire.table_of(v=_EMPTY64)


class WorkerClient:
    """Flight calls to one worker (thread-safe: Flight clients are)."""

    def __init__(self, address: str, *, connect_timeout: float = 5.0, call_timeout: float | None = None):
        self.address = address
        self._location = wire.location(address)
        self._call_timeout = call_timeout
        self._connect_timeout = connect_timeout
        self._client: flight.FlightClient | None = None
        self._lock = threading.Lock()
        self.calls = 0

    def _c(self) -> flight.FlightClient:
        c = self._client
        if c is None:
            with self._lock:
                if self._client is None:
                    self._client = flight.FlightClient(self._location)
                c = self._client
        return c

    def _options(self, timeout: float | None) -> flight.FlightCallOptions:
        t = timeout if timeout is not None else self._call_timeout
        deadline = query_deadline()
        if deadline is not None:  # a query's call ends with the query (a stopped worker cannot hold it)
            left = deadline - time.monotonic()
            if left <= 0:
                raise QueryTimeout("the query's deadline passed while it waited for a store worker")
            t = min(t, left) if t else left
        return flight.FlightCallOptions(timeout=t) if t else flight.FlightCallOptions()

    def _fail(self, e: Exception) -> Exception:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, flight.FlightServerError) and "conflict:" in msg:
            return WorkerUnavailable(self.address, msg[msg.index("conflict:"):])
        if isinstance(e, flight.FlightTimedOutError) and query_deadline() is not None:
            return QueryTimeout(f"the query's deadline passed while it waited for store worker {self.address}")
        if isinstance(e, flight.FlightServerError) and "row_budget:" in msg:
            return RowBudgetExceeded(msg[msg.index("row_budget:") + len("row_budget:"):].strip())
        if isinstance(e, flight.FlightTimedOutError):
            return WorkerUnavailable(self.address, TIMED_OUT)
        return WorkerUnavailable(self.address, "unreachable")

    @contextlib.contextmanager
    def _call(self):
        """One Flight call: counted, and every transport failure turned into this
        module's errors (see :meth:`_fail`)."""
        self.calls += 1
        try:
            yield self._c()
        except (flight.FlightError, pa.ArrowException, OSError) as e:
            raise self._fail(e) from None

    @staticmethod
    def _descriptor(header: dict) -> flight.FlightDescriptor:
        return flight.FlightDescriptor.for_command(wire.dumps(header))

    def action(self, kind: str, timeout: float | None = None, **body) -> dict:
        with self._call() as c:
            res = list(c.do_action(flight.Action(kind, wire.dumps(body)), self._options(timeout)))
        return wire.loads(res[0].body) if res else {}

    def put_rows(self, header: dict, table: pa.Table, timeout: float | None = None) -> dict:
        with self._call() as c:
            writer, meta = c.do_put(self._descriptor(header), table.schema, self._options(timeout))
            writer.write_table(table)
            writer.done_writing()
            buf = meta.read()
            writer.close()
        return wire.loads(buf) if buf is not None else {}

    def exchange(self, header: dict, table: pa.Table, timeout: float | None = None) -> dict[str, np.ndarray]:
        with self._call() as c:
            writer, reader = c.do_exchange(self._descriptor(header), self._options(timeout))
            writer.begin(table.schema)
            writer.write_table(table)
            writer.done_writing()
            out = reader.read_all()
            writer.close()
        return wire.columns_of(out)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                try:
                    self._client.close()
                except (flight.FlightError, pa.ArrowException, OSError):
                    pass
                self._client = None


class RemoteShard:
    """ShardReader of partition ``no`` of graph ``g`` at version ``sn`` on a worker (see module docstring)."""

    def __init__(self, client: WorkerClient, no: int, n_shards: int, sn: int, g: int, stats: list,
                 segments: dict[int, tuple] | None = None, cache: dict | None = None):
        self.client = client
        self._no = no
        self._n = n_shards
        self.sn = sn
        self.g = g
        self._stats = {int(p): (int(t), int(su), int(ob)) for p, t, su, ob in stats}
        #: pid -> the identity of the worker's immutable segment (its pack and offsets), and
        #: a cache of index arrays by (segment, direction) shared across versions
        self._segments = segments or {}
        self._cache = cache if cache is not None else {}

    @property
    def no(self) -> int:
        return self._no

    @property
    def n_shards(self) -> int:
        return self._n

    def _h(self, op: str, **kw) -> dict:
        return {"op": op, "sn": self.sn, "g": self.g, **kw}

    def pids(self):
        return iter(self._stats)

    def degree_stats(self, pid: int) -> tuple[int, int, int]:
        return self._stats.get(int(pid), (0, 0, 0))

    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if int(pid) not in self._stats or not len(vids):
            return _EMPTY64, _EMPTY64
        c = self.client.exchange(self._h("expand", pid=int(pid), dir=int(direction)),
                                 wire.table_of(v=np.asarray(vids, dtype=np.int64)))
        return c["rows"], c["nbrs"]

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        if int(pid) not in self._stats or not len(s):
            return np.zeros(len(s), dtype=bool)
        c = self.client.exchange(self._h("contains", pid=int(pid)),
                                 wire.table_of(s=np.asarray(s, dtype=np.int64), o=np.asarray(o, dtype=np.int64)))
        return c["hit"].astype(bool, copy=False)

    def index(self, pid: int, direction: int) -> np.ndarray:
        pid = int(pid)
        if pid not in self._stats:
            return _EMPTY64
        seg = self._segments.get(pid)
        key = (seg, int(direction)) if seg is not None else None
        hit = self._cache.get(key) if key is not None else None
        if hit is None:
            hit = self.client.exchange(self._h("index", pid=pid, dir=int(direction)), _EMPTY_V)["v"]
            if key is not None:
                self._cache[key] = hit
        return hit

    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        if int(pid) not in self._stats:
            return _EMPTY64, _EMPTY64
        c = self.client.exchange(self._h("scan", pid=int(pid)), _EMPTY_V)
        return c["s"], c["o"]

    def vertices(self) -> np.ndarray:
        if not self._stats:
            return _EMPTY64
        return self.client.exchange(self._h("vertices"), _EMPTY_V)["v"]

    def local_lookup(self, pid: int, direction: int):
        return None  # not in this process: the caller uses the batched calls

    def columns(self, pid: int) -> PredColumns:
        """One predicate's six CSR arrays, fetched whole."""
        t = self.client.exchange(self._h("export", pid=int(pid), part=self._no), _EMPTY_V)
        return PredColumns(*(t[f][0] for f in PredColumns._fields))

    def export(self):
        for pid in self._stats:
            yield pid, self.columns(pid), None

    def apply(self, remove: np.ndarray | None, add: np.ndarray | None) -> OverlayShard:
        """A working copy for a multi-operation update: the predicates the rows touch
        are fetched and changed here, the others stay remote (the worker's data is
        only changed by the commit)."""
        return OverlayShard(self, Shard(self._no, self._n), frozenset()).apply(remove, add)

    @property
    def nbytes(self) -> int:
        return 0  # held by the worker

    def __repr__(self) -> str:
        return f"RemoteShard({self.client.address}, no={self._no}, sn={self.sn}, g={self.g})"



class OverlayShard:
    """A remote shard with some predicates replaced by local, changed copies (the
    working view of a SPARQL update that reads its own writes)."""

    def __init__(self, remote: RemoteShard, local: Shard, touched: frozenset[int]):
        self.remote = remote
        self.local = local
        self.touched = touched
        self.no = remote.no
        self.n_shards = remote.n_shards

    def _of(self, pid: int):
        return self.local if int(pid) in self.touched else self.remote

    def pids(self):
        return iter([p for p in self.remote.pids() if p not in self.touched] + list(self.local.pids()))

    def degree_stats(self, pid):
        return self._of(pid).degree_stats(pid)

    def expand(self, pid, direction, vids):
        return self._of(pid).expand(pid, direction, vids)

    def contains(self, pid, s, o):
        return self._of(pid).contains(pid, s, o)

    def index(self, pid, direction):
        return self._of(pid).index(pid, direction)

    def scan(self, pid):
        return self._of(pid).scan(pid)

    def vertices(self):
        parts = [self.local.vertices()]
        for p in self.remote.pids():
            if p not in self.touched:
                parts.extend(np.asarray(self.remote.index(p, d), dtype=np.int64) for d in (0, 1))
        return unique(np.concatenate(parts))

    def local_lookup(self, pid, direction):
        return None

    def export(self):
        raise NotImplementedError("a working copy is never persisted")

    @property
    def nbytes(self) -> int:
        return self.local.nbytes

    def apply(self, remove, add) -> OverlayShard:
        rows = [r for r in (remove, add) if r is not None and len(r)]
        if not rows:
            return self
        pids = set(unique(np.concatenate([np.asarray(r)[:, 1] for r in rows])).tolist())
        fetch = {p for p in pids - self.touched if p in self.remote._stats}
        local = self.local
        if fetch:
            segs = local.segments()
            for p in fetch:
                segs[p] = segment(self.remote.columns(p))
            local = Shard.of_segments(self.no, self.n_shards, segs)
        return OverlayShard(self.remote, local.apply(remove, add), self.touched | pids)
