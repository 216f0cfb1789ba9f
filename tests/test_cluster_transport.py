"""Transport conformance: every way the serving process reads a worker answers
like the in-process shard built from the same triples.

One suite, parametrized by transport (``shm``: the worker's packs mapped here;
``flight``: one Arrow Flight exchange per call; ``rdma`` where a device exists).
Real worker processes hold the data; each hypothesis example commits a random
change (adds, removes, named graphs created and dropped) to the cluster, to a
single-process :class:`engine.kv.store.Store` and to a set-of-triples model,
then asks every :class:`engine.kv.api.ShardReader` call of every worker's
readers and compares with a :class:`engine.kv.shard.Shard` built locally from
the model's triples, and every :class:`engine.kv.graph.GraphIndex` call (what
the executor sees) with the single-process store's answer and the brute-force
model.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.cluster import wire
from engine.cluster.remote import WorkerClient
from engine.cluster.transport import choose
from engine.errors import WorkerUnavailable
from engine.kv.graph import IN, OUT, GraphIndex, empty_graph
from engine.kv.store import Changes, Store
from tests.support.graph_model import model_expand
from tests.support.processes import closed_after, stop_processes

N = 3
#: predicate ids (disjoint from nothing on purpose: ids are only ids here)
PIDS = [100, 101, 102, 103]
ABSENT_PID = 999
#: named graph ids
GRAPHS = [None, 7, 8]
SPARSE = 1 << 20


def _rdma_param():
    """The rdma transport, skipped (marked ``hardware``) where it cannot run."""
    try:
        from engine.cluster import rdma  # noqa: PLC0415
    except ImportError as e:
        why = f"engine.cluster.rdma is not importable: {e}"
    else:
        why = rdma.unavailable_reason()
    marks = [pytest.mark.hardware]
    if why is not None:
        marks.append(pytest.mark.skip(reason=f"rdma transport: {why}"))
    return pytest.param("rdma", marks=marks, id="rdma")


TRANSPORT_PARAMS = [pytest.param("shm", id="shm"), pytest.param("flight", id="flight"), _rdma_param()]


class Mirror:
    """A cluster store, a single-process store and a model, changed together."""

    def __init__(self, transport: str):
        from engine.cluster.coordinator import ClusterStore  # noqa: PLC0415

        self.cluster = ClusterStore(workers=N, transport=transport)
        self.local = Store(shards=N)
        self.model: dict[int | None, set[tuple[int, int, int]]] = {None: set()}
        self.rng = random.Random(0)

    def commit(self, ch: Changes) -> None:
        self.cluster.commit(ch)
        self.local.commit(ch)
        for g in ch.drop:
            if g is None:
                self.model[None] = set()
            else:
                self.model.pop(g, None)
        for g in ch.create:
            self.model.setdefault(g, set())
        for g in set(ch.remove) | set(ch.add):
            rem = {tuple(r) for r in np.asarray(ch.remove.get(g, np.zeros((0, 3))), dtype=np.int64).tolist()}
            add = {tuple(r) for r in np.asarray(ch.add.get(g, np.zeros((0, 3))), dtype=np.int64).tolist()}
            if g not in self.model:
                if not add:
                    continue
                self.model[g] = set()
            self.model[g] = (self.model[g] - rem) | add

    def close(self) -> None:
        self.cluster.close()


@pytest.fixture(scope="module", params=TRANSPORT_PARAMS)
def mirror(request):
    m = Mirror(request.param)
    with closed_after(m, m.cluster._own_tmp):
        yield m


# ---------------------------------------------------------------- strategies
vertex = st.one_of(st.integers(0, 40), st.integers(0, 12).map(lambda k: SPARSE + 7919 * k))
triple = st.tuples(vertex, st.sampled_from(PIDS), vertex)
change = st.fixed_dictionaries({
    "add": st.lists(st.tuples(st.sampled_from(GRAPHS), triple), max_size=60),
    "remove_existing": st.floats(0, 0.5),
    "remove_random": st.lists(st.tuples(st.sampled_from(GRAPHS), triple), max_size=8),
    "drop": st.sets(st.sampled_from(GRAPHS), max_size=1),
    "create": st.sets(st.sampled_from([9]), max_size=1),
})


def _rows(ts) -> np.ndarray:
    return np.array(sorted(ts), dtype=np.int64).reshape(-1, 3)


def changes_of(spec: dict, m: Mirror, rnd: random.Random) -> Changes:
    add: dict = {}
    for g, t in spec["add"]:
        add.setdefault(g, set()).add(t)
    rem: dict = {}
    for g, ts in m.model.items():
        for t in sorted(ts):
            if rnd.random() < spec["remove_existing"]:
                rem.setdefault(g, set()).add(t)
    for g, t in spec["remove_random"]:
        rem.setdefault(g, set()).add(t)
    return Changes(drop=set(spec["drop"]), create=set(spec["create"]),
                   add={g: _rows(ts) for g, ts in add.items()}, remove={g: _rows(ts) for g, ts in rem.items()})


# ---------------------------------------------------------------- checks
def _l(a) -> list[int]:
    return np.asarray(a, dtype=np.int64).tolist()


def _pairs(s, o) -> list[tuple[int, int]]:
    return sorted(zip(_l(s), _l(o), strict=True))


def probe_vids(model: set, owner: int | None, rnd: random.Random) -> np.ndarray:
    """Vertices of the model plus absent ones (dense and sparse), shuffled, with
    duplicates; only ones shard ``owner`` owns unless None."""
    present = sorted({t[0] for t in model} | {t[2] for t in model})
    absent = [41, 43, 44, 45, SPARSE + 7919 * 13, SPARSE + 3, 5 * SPARSE + 1, 3 * SPARSE]
    pool = present + absent
    if owner is not None:
        pool = [v for v in pool if v % N == owner]
    vids = pool + rnd.sample(pool, min(len(pool), 5))
    rnd.shuffle(vids)
    return np.array(vids, dtype=np.int64)


def check_shard(reader, local, model: set, k: int, rnd: random.Random, where: str) -> None:
    """Every ShardReader call of ``reader`` (partition ``k``) equals the local Shard's and the model's."""
    owned = {t for t in model if t[0] % N == k}
    assert sorted(reader.pids()) == sorted(local.pids()), where
    pids = sorted(set(local.pids()) | {ABSENT_PID, PIDS[0]})
    for pid in pids:
        w = f"{where} pid {pid}"
        assert tuple(int(x) for x in reader.degree_stats(pid)) == tuple(local.degree_stats(pid)), w
        trip = sum(1 for t in owned if t[1] == pid)
        assert int(reader.degree_stats(pid)[0]) == trip, w
        for d in (OUT, IN):
            keys = sorted({t[0] if d == OUT else t[2] for t in model if t[1] == pid
                           and (t[0] if d == OUT else t[2]) % N == k})
            assert _l(reader.index(pid, d)) == keys, (w, d)
            vids = probe_vids(model, k, rnd)
            r, nb = reader.expand(pid, d, vids)
            want = model_expand(model, pid, d, _l(vids))
            assert (_l(r), _l(nb)) == want, (w, d, _l(vids))
            lr, lnb = local.expand(pid, d, vids)
            assert (_l(lr), _l(lnb)) == want, (w, "local", d)
            one = vids[:1]
            assert tuple(map(_l, reader.expand(pid, d, one))) == model_expand(model, pid, d, _l(one)), (w, d)
            assert _l(reader.expand(pid, d, np.zeros(0, dtype=np.int64))[0]) == []
            f = reader.local_lookup(pid, d)
            if f is not None:
                for v in _l(vids):
                    assert _l(f(v)) == model_expand(model, pid, d, [v])[1], (w, d, v)
        s, o = reader.scan(pid)
        assert _pairs(s, o) == sorted((t[0], t[2]) for t in owned if t[1] == pid), w
        subj = probe_vids(model, k, rnd)
        objs = np.array([rnd.choice([t[2] for t in model] or [0]) for _ in subj], dtype=np.int64)
        hit = reader.contains(pid, subj, objs)
        assert hit.dtype == bool, w
        assert _l(hit) == [int((a, pid, b) in model) for a, b in zip(_l(subj), _l(objs), strict=True)], w
        assert _l(reader.contains(pid, np.zeros(0, np.int64), np.zeros(0, np.int64))) == []
    verts = sorted({v for t in model for v in (t[0], t[2]) if v % N == k})
    assert _l(reader.vertices()) == verts, where


def check_graph(c: GraphIndex, s: GraphIndex, model: set, rnd: random.Random, where: str) -> None:
    """The GraphIndex calls of the cluster's graph equal the single-process store's (and the model's)."""
    assert c.n_triples == s.n_triples == len(model), where
    assert _l(c.predicates()) == _l(s.predicates()) == sorted({t[1] for t in model}), where
    for pid in [*PIDS, ABSENT_PID]:
        w = f"{where} pid {pid}"
        assert tuple(c.stats(pid)) == tuple(s.stats(pid)), w
        for d in (OUT, IN):
            assert _l(c.index(pid, d)) == _l(s.index(pid, d)), (w, d)
            for size in (1, 7, 200):   # one vertex, the small path, the vectorized split
                base = probe_vids(model, None, rnd).tolist()
                vids = np.array([rnd.choice(base) for _ in range(size)], dtype=np.int64)
                got = tuple(map(_l, c.expand(pid, d, vids)))
                assert got == tuple(map(_l, s.expand(pid, d, vids))), (w, d, size)
                assert got == model_expand(model, pid, d, _l(vids)), (w, d, size)
            cs = probe_vids(model, None, rnd)
            co = np.array([rnd.choice([t[2] for t in model] or [0]) for _ in cs], dtype=np.int64)
            assert _l(c.contains(pid, cs, co)) == _l(s.contains(pid, cs, co)), w
        assert _pairs(*c.scan(pid)) == _pairs(*s.scan(pid)), w
    assert sorted(zip(*map(_l, c.scan_all()), strict=True)) == sorted(model), where
    assert _l(c.vertices()) == _l(s.vertices()), where


def check_all(m: Mirror, rnd: random.Random) -> None:
    csnap, ssnap = m.cluster.snapshot(), m.local.snapshot()
    assert csnap.sn == ssnap.sn
    assert sorted(csnap.named) == sorted(ssnap.named) == sorted(g for g in m.model if g is not None)
    graphs = {g: _rows(ts) for g, ts in m.model.items()}
    # ShardReader level: every reader each worker's transport hands out
    for w in m.cluster.workers:
        per = w.transport.shards(w.desc, N)
        assert -1 in per, f"{w.address}: no default graph"
        for g, parts in per.items():
            key = None if g == -1 else g
            assert key in m.model, f"{w.address} reads graph {g}, which does not exist"
            ref = empty_graph(N).apply(None, graphs[key])
            assert set(parts) == {w.no}, f"{w.address} serves partitions {sorted(parts)}"
            for k, reader in parts.items():
                check_shard(reader, ref.shards[k], m.model[key], k, rnd, f"{w.transport.name} {w.address} g={g}")
    # GraphIndex level: what the executor sees
    check_graph(csnap.default, ssnap.default, m.model[None], rnd, "default graph")
    for g in csnap.named:
        check_graph(csnap.named[g], ssnap.named[g], m.model[g], rnd, f"graph {g}")
    if m.cluster.transport_name == "shm":
        # in-place reads: the one-vertex fast path exists and needs no worker
        assert csnap.default.local_lookup(PIDS[0], OUT) is not None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(spec=change, seed=st.integers(0, 2**16))
def test_readers_conform(mirror, spec, seed):
    """Each example commits one random change, then checks every call (see module docstring)."""
    rnd = random.Random(seed)
    mirror.commit(changes_of(spec, mirror, rnd))
    check_all(mirror, rnd)


def test_unowned_vids_read_as_no_edges(mirror):
    """ShardReader contract (engine.kv.api): an id the shard does not own reads as a
    vertex without edges -- also on a shard whose keys are dense (span table)."""
    rows = np.array([[3 * i + k, PIDS[1], 3 * i + (k + 1) % 3] for i in range(300) for k in range(3)],
                    dtype=np.int64)
    mirror.commit(Changes(add={None: rows}))
    model = mirror.model[None]
    for w in mirror.cluster.workers:
        reader = w.transport.shards(w.desc, N)[-1][w.no]
        others = np.array([v for v in range(0, 60) if v % N != w.no], dtype=np.int64)
        for d in (OUT, IN):
            r, nb = reader.expand(PIDS[1], d, others)
            assert _l(r) == [], f"{w.transport.name} partition {w.no}: unowned ids {_l(others[r[:5]])} have edges"
            r, nb = reader.expand(PIDS[1], d, others[:1])
            assert _l(r) == [], f"{w.transport.name} partition {w.no}: unowned id {int(others[0])} has edges"
        objs = np.array([v + 1 for v in others], dtype=np.int64)
        assert not reader.contains(PIDS[1], others, objs).any()
    assert any(t[1] == PIDS[1] for t in model)


# ---------------------------------------------------------------- hand-attached workers
def _start_worker(root: str, k: int) -> tuple[subprocess.Popen, str]:
    addr = f"unix:{os.path.join(root, f'w{k}.sock')}"
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "worker", "--listen", addr, "--data-dir",
                             os.path.join(root, f"w{k}")], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, addr


def _attach(client: WorkerClient, **body) -> dict:
    deadline = time.monotonic() + 30
    while True:
        try:
            return client.action("attach", timeout=5.0, **body)
        except WorkerUnavailable as e:
            if "conflict" in e.why or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("transport", [p for p in TRANSPORT_PARAMS if p.id != "rdma"])
def test_hand_attached_workers(transport):
    """``jindou worker`` processes driven by WorkerClient alone (no coordinator): two-phase
    versions, aborts, conflicts, and the transport's readers of each version."""
    n = 2
    rnd = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="jindou-ctest-") as root:
        procs = []
        clients = []
        try:
            for k in range(n):
                proc, addr = _start_worker(root, k)
                procs.append(proc)
                clients.append(WorkerClient(addr))
            descs = [_attach(c, n_parts=n, owned=[k], cluster="hand") for k, c in enumerate(clients)]
            assert [d["sn"] for d in descs] == [0, 0]
            # a second attach with the same assignment is fine; another one is refused
            assert _attach(clients[0], n_parts=n, owned=[0], cluster="hand")["owned"] == [0]
            with pytest.raises(WorkerUnavailable, match="conflict"):
                clients[0].action("attach", n_parts=n, owned=[1], cluster="hand")
            with pytest.raises(WorkerUnavailable, match="conflict"):
                clients[0].action("attach", n_parts=n, owned=[0], cluster="other")
            model: set = set()
            base = 0
            for sn in (1, 2, 3):
                add = {(rnd.randrange(30), rnd.choice(PIDS), rnd.randrange(30)) for _ in range(40)}
                rem = set(rnd.sample(sorted(model), len(model) // 3)) if model else set()
                header = {"sn": sn, "base": base, "drop": [], "create": [], "origin": {}}
                rows_rem, rows_add = _rows(rem), _rows(add)
                for c in clients:
                    # all rows to each: a worker keeps what it owns (OUT with the subject's, IN with
                    # the object's owner)
                    part = wire.rows_table([(-1, rows_rem, 0), (-1, rows_add, 1)])
                    assert c.put_rows(header, part) == {"prepared": sn}
                if sn == 2:   # an aborted version leaves no trace
                    for c in clients:
                        c.action("abort", sn=sn)
                    with pytest.raises(WorkerUnavailable, match="conflict"):
                        clients[0].action("commit", sn=sn, keep=[])
                    continue
                descs = [c.action("commit", sn=sn, keep=[]) for c in clients]
                model = (model - rem) | add
                base = sn
                ref = empty_graph(n).apply(None, _rows(model))
                for k, (c, desc) in enumerate(zip(clients, descs, strict=True)):
                    assert desc["sn"] == sn
                    assert desc["triples"] == sum(1 for t in model if t[0] % n == k)
                    reader = choose(transport, c, desc).shards(desc, n)[-1][k]
                    check_shard_n(reader, ref.shards[k], model, k, n, rnd)
            # a prepare on a stale base is refused
            with pytest.raises(WorkerUnavailable, match="conflict"):
                clients[0].put_rows({"sn": 9, "base": 0}, wire.rows_table([]))
        finally:
            for c in clients:
                c.close()
            stop_processes(procs)


def check_shard_n(reader, local, model: set, k: int, n: int, rnd: random.Random) -> None:
    """check_shard's core for an ``n``-partition layout (index, expand, scan, vertices, stats)."""
    assert sorted(reader.pids()) == sorted(local.pids())
    for pid in sorted(local.pids()):
        assert tuple(int(x) for x in reader.degree_stats(pid)) == tuple(local.degree_stats(pid))
        for d in (OUT, IN):
            assert _l(reader.index(pid, d)) == _l(local.index(pid, d))
            vids = np.array([v for v in range(35) if v % n == k] * 2, dtype=np.int64)
            rnd.shuffle(vids)
            assert tuple(map(_l, reader.expand(pid, d, vids))) == model_expand(model, pid, d, _l(vids))
        assert _pairs(*reader.scan(pid)) == sorted((t[0], t[2]) for t in model if t[1] == pid and t[0] % n == k)
    assert _l(reader.vertices()) == sorted({v for t in model for v in (t[0], t[2]) if v % n == k})
