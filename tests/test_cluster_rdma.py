"""RangedShard (a shard read by ranges through a RangeReader) against the in-process
Shard and a brute-force model; the RDMA transport end to end where a device exists."""

import gc
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.cluster.ranged import LocalRangeReader, RangedSegment, RangedShard, describe_shard
from engine.cluster.rdma import unavailable_reason
from engine.kv.api import IN, OUT, ShardReader
from engine.kv.graph import GraphIndex
from engine.kv.shard import Shard

BIG = 1 << 31  # ids from here on make the CSRs int64


def build(rows, n_shards):
    rows = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return [Shard(k, n_shards).apply(None, rows) for k in range(n_shards)]


class BatchingReader(LocalRangeReader):
    """The same-process reader offering read_many (as the RDMA reader does): counts batches."""

    batches = 0

    def read_many(self, desc, starts, stops):
        self.batches += 1
        return [self.read(desc, a, b) for a, b in zip(starts, stops, strict=True)]


def ranged(shards, reader_cls=LocalRangeReader, **kw):
    reader = reader_cls()
    out = [RangedShard(sh.no, sh.n_shards, describe_shard(sh, reader.register), reader, **kw) for sh in shards]
    return out, reader


def model_expand(triples, pid, direction, vids, no, n):
    """(rows, nbrs) by brute force; an id the shard does not own has no edges there."""
    rows, nbrs = [], []
    for i, v in enumerate(vids.tolist()):
        if v % n != no:
            continue
        if direction == OUT:
            nb = sorted({o for s, p, o in triples if p == pid and s == v})
        else:
            nb = sorted({s for s, p, o in triples if p == pid and o == v})
        rows += [i] * len(nb)
        nbrs += nb
    return rows, nbrs


def check_equal(rs: RangedShard, sh: Shard, triples, vids, pairs_o):
    n, no = sh.n_shards, sh.no
    assert isinstance(rs, ShardReader)
    assert rs.no == no and rs.n_shards == n
    assert rs.local_lookup(1, OUT) is None
    assert sorted(rs.pids()) == sorted(sh.pids())
    pids = sorted(sh.pids()) + [97]  # 97: a predicate nobody has
    owned = vids[vids % n == no]
    for pid in pids:
        assert rs.degree_stats(pid) == sh.degree_stats(pid)
        for d in (OUT, IN):
            a, b = rs.index(pid, d), sh.index(pid, d)
            assert a.dtype == b.dtype and a.tolist() == b.tolist()
            r, nb = rs.expand(pid, d, vids)
            assert r.dtype == np.int64 and nb.dtype == np.int64
            assert (r.tolist(), nb.tolist()) == model_expand(triples, pid, d, vids, no, n)
            r2, nb2 = sh.expand(pid, d, owned)
            r1, nb1 = rs.expand(pid, d, owned)
            assert r1.tolist() == r2.tolist() and nb1.tolist() == nb2.tolist()
        got = rs.contains(pid, vids, pairs_o)
        want = [s % n == no and (s, pid, o) in triples for s, o in zip(vids.tolist(), pairs_o.tolist(), strict=True)]
        assert got.dtype == bool and got.tolist() == want
        m = vids % n == no
        assert rs.contains(pid, vids[m], pairs_o[m]).tolist() == sh.contains(pid, vids[m], pairs_o[m]).tolist()
        (s1, o1), (s2, o2) = rs.scan(pid), sh.scan(pid)
        assert s1.tolist() == s2.tolist() and o1.tolist() == o2.tolist()
    assert rs.vertices().tolist() == sh.vertices().tolist()
    mine = {pid: (cols, seg) for pid, cols, seg in rs.export()}
    theirs = {pid: cols for pid, cols, _ in sh.export()}
    assert mine.keys() == theirs.keys()
    for pid, (cols, seg) in mine.items():
        assert isinstance(seg, RangedSegment) and seg.files is None
        for x, y in zip(cols, theirs[pid], strict=True):
            assert x.dtype == y.dtype and x.tolist() == y.tolist()
    # every segment's index metadata is now local; nothing else is
    want_bytes = sum(c.out_keys.nbytes + c.out_indptr.nbytes + c.in_keys.nbytes + c.in_indptr.nbytes
                     for c in theirs.values())
    assert rs.nbytes == want_bytes


ids = st.one_of(st.integers(0, 40), st.integers(BIG, BIG + 6))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(triples=st.lists(st.tuples(ids, st.integers(0, 3), ids), max_size=80),
       probes=st.lists(st.tuples(ids, ids), min_size=0, max_size=30),
       n_shards=st.integers(1, 4),
       gap=st.sampled_from([0, 8, 16384]), max_reads=st.sampled_from([1, 2, 64]),
       dense=st.sampled_from([0, 2]))
def test_ranged_shard_matches_shard(triples, probes, n_shards, gap, max_reads, dense):
    tset = set(triples)
    shards = build(triples, n_shards)
    rss, _reader = ranged(shards, gap_bytes=gap, max_reads=max_reads, dense_factor=dense)
    # probes: random ids (absent, unowned, duplicated) plus the subjects of real triples
    vids = np.array([v for v, _ in probes] + [s for s, _, _ in triples[:10]], dtype=np.int64)
    pairs_o = np.array([o for _, o in probes] + [o for _, _, o in triples[:10]], dtype=np.int64)
    for rs, sh in zip(rss, shards, strict=True):
        check_equal(rs, sh, tset, vids, pairs_o)


@pytest.mark.parametrize("seed", range(12))
def test_ranged_shard_split_reads(seed):
    """Many small reads (no gap merging, no dense rule): range offsets across blocks."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5))
    m = int(rng.integers(1, 300))
    rows = np.stack([rng.integers(0, 60, m), rng.integers(0, 3, m), rng.integers(0, 60, m)], axis=1)
    rows[rng.random(m) < 0.1, 0] += BIG
    shards = build(rows, n)
    triples = set(map(tuple, rows.tolist()))
    vids = rng.integers(0, 70, int(rng.integers(1, 40)))
    o = rng.integers(0, 60, len(vids))
    for max_reads in (2, 64):
        for cls in (LocalRangeReader, BatchingReader):
            rss, _ = ranged(shards, cls, gap_bytes=0, dense_factor=0, max_reads=max_reads)
            for rs, sh in zip(rss, shards, strict=True):
                check_equal(rs, sh, triples, vids, o)


@pytest.mark.parametrize("n_shards", [1, 3])
def test_graph_index_over_ranged_shards(n_shards):
    rng = np.random.default_rng(7)
    rows = np.stack([rng.integers(0, 300, 2000), rng.integers(0, 5, 2000), rng.integers(0, 300, 2000)], axis=1)
    shards = build(rows, n_shards)
    rss, _ = ranged(shards)
    g, h = GraphIndex(shards), GraphIndex(rss)
    assert g.local_lookup(1, OUT) is not None and h.local_lookup(1, OUT) is None
    assert g.n_triples == h.n_triples and g.predicates().tolist() == h.predicates().tolist()
    vids = rng.integers(-2, 320, 3000)  # unsorted and many: the sorted-probe path
    for pid in range(6):
        assert g.stats(pid) == h.stats(pid)
        for d in (OUT, IN):
            a, b = g.expand(pid, d, vids), h.expand(pid, d, vids)
            assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
            assert g.index(pid, d).tolist() == h.index(pid, d).tolist()
        o = rng.integers(0, 300, len(vids))
        assert g.contains(pid, vids, o).tolist() == h.contains(pid, vids, o).tolist()
    x, y = g.scan_all(), h.scan_all()
    assert sorted(zip(*(c.tolist() for c in x), strict=True)) == sorted(zip(*(c.tolist() for c in y), strict=True))
    assert g.vertices().tolist() == h.vertices().tolist()


def star_shard():
    """One predicate: vertex v in 0..999 has neighbours 10v..10v+9 (so rows are 10 apart)."""
    v = np.repeat(np.arange(1000), 10)
    rows = np.stack([v, np.zeros_like(v), 10 * v + np.tile(np.arange(10), 1000)], axis=1)
    return build(rows, 1)[0]


def test_metadata_fetched_once_and_dense_ranges_in_one_read():
    sh = star_shard()
    (rs,), reader = ranged([sh])
    assert rs.nbytes == 0 and rs.degree_stats(0) == (10000, 1000, 10000) and reader.reads == 0
    rs.expand(0, OUT, np.array([5]))
    assert reader.reads == 3  # keys, indptr, then the one neighbour range
    reader.reads = reader.elements = 0
    vids = np.arange(100, 900)[::-1].copy()
    r, nb = rs.expand(0, OUT, vids)
    assert reader.reads == 1 and reader.elements == 8000  # dense: one read, nothing extra
    assert nb[:10].tolist() == list(range(8990, 9000))


def test_sparse_ranges_are_coalesced_within_the_read_budget():
    sh = star_shard()
    vids = np.array([0, 1, 300, 301, 302, 999], dtype=np.int64)
    (rs,), reader = ranged([sh], gap_bytes=0)
    rs.expand(0, OUT, vids[:1])  # metadata
    reader.reads = reader.elements = 0
    r, nb = rs.expand(0, OUT, vids)
    assert reader.reads == 3 and reader.elements == 60  # adjacent rows merge, gaps split
    assert nb.tolist() == [x for v in vids.tolist() for x in range(10 * v, 10 * v + 10)]
    (rs,), reader = ranged([sh], gap_bytes=0, max_reads=2)
    rs.expand(0, OUT, vids[:1])
    reader.reads = reader.elements = 0
    assert rs.expand(0, OUT, vids)[1].tolist() == nb.tolist()
    # two reads: the largest gap (indices 3030..9990, between rows 302 and 999) is
    # kept, the other (20..3000) is read through
    assert reader.reads == 2 and reader.elements == 3030 + 10
    (rs,), reader = ranged([sh], BatchingReader, gap_bytes=0)
    rs.expand(0, OUT, vids[:1])
    reader.reads = 0
    assert rs.expand(0, OUT, vids)[1].tolist() == nb.tolist()
    assert reader.reads == 3 and reader.batches == 1  # three ranges in one batch
    (rs,), reader = ranged([sh], gap_bytes=1 << 20)
    rs.expand(0, OUT, vids[:1])
    reader.reads = 0
    assert rs.contains(0, vids, 10 * vids + 3).all() and reader.reads == 1


def test_shared_cache_keeps_segments_across_versions():
    shards = build([[1, 2, 3], [1, 5, 4]], 1)
    reader = LocalRangeReader()
    segs = describe_shard(shards[0], reader.register)
    cache = weakref.WeakValueDictionary()
    a = RangedShard(0, 1, segs, reader, cache=cache)
    a.vertices()
    n = reader.reads
    b = RangedShard(0, 1, segs, reader, cache=cache)
    assert b.vertices().tolist() == [1, 3, 4] and reader.reads == n  # nothing fetched again
    assert all(x is y for (_, _, x), (_, _, y) in zip(a.export(), b.export(), strict=True))
    assert len(cache) == 2
    del a, b
    gc.collect()
    assert len(cache) == 0  # no shard uses them any more


def test_reader_rejects_ranges_outside_the_array():
    reader = LocalRangeReader()
    desc = reader.register(np.arange(5, dtype=np.int32))
    assert reader.read(desc, 1, 3).tolist() == [1, 2]
    with pytest.raises(ValueError):
        reader.read(desc, 3, 6)
    with pytest.raises(ValueError):
        RangedShard(0, 1, {1: {"out_keys": desc}}, reader)


def test_unavailable_reason_is_plain():
    reason = unavailable_reason()
    assert reason is None or isinstance(reason, str) and reason


@pytest.mark.hardware
@pytest.mark.skipif(unavailable_reason() is not None, reason=f"RDMA: {unavailable_reason()}")
def test_rdma_ranged_shard_equals_shard():
    from engine.cluster.rdma import RdmaExporter, RdmaRangeReader

    rng = np.random.default_rng(3)
    rows = np.stack([rng.integers(0, 1500, 5000), rng.integers(0, 4, 5000), rng.integers(0, 1500, 5000)], axis=1)
    rows[:50, 0] += BIG  # some int64 CSRs too
    shards = build(rows, 2)
    triples = set(map(tuple, rows.tolist()))
    with RdmaExporter() as exporter:
        segments = [describe_shard(sh, exporter.register) for sh in shards]
        # the QP details go through a plain function here; the cluster passes them over Flight
        with RdmaRangeReader(exchange=exporter.accept, buffer_bytes=4096) as reader:
            for sh, seg in zip(shards, segments, strict=True):
                rs = RangedShard(sh.no, sh.n_shards, seg, reader)
                vids = np.concatenate([rng.integers(0, 1600, 200), rows[:20, 0]])
                check_equal(rs, sh, triples, vids, rng.integers(0, 1500, len(vids)))
            # a read larger than the local buffer grows it; ranges split across several READs
            d = segments[0][0]["out_indices"]
            whole = reader.read(d, 0, d["length"])
            assert whole.tolist() == dict((p, c) for p, c, _ in shards[0].export())[0].out_indices.tolist()
            parts = reader.read_many(d, [0, 7, 100], [5, 50, d["length"]])
            assert [p.tolist() for p in parts] == [whole[0:5].tolist(), whole[7:50].tolist(), whole[100:].tolist()]
