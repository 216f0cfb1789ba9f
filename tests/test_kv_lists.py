"""The list one-vertex lookups (engine/kv/lists.py): ``GraphIndex.local_lists`` answers
what ``local_lookup`` does (as Python lists, and ``has`` as a membership test) over
random graphs whose keys make every span kind (dense tables, bucket tables, binary
search, empty shards), with 1-4 shards and int32 / int64 ids; a snapshot's functions
keep answering its own version after a write."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.bgp import _run_small, compile_small, run_bgp
from engine.exec.bindings import Bindings
from engine.kv import lists, partition, vertex_preds
from engine.kv.api import IN, OUT
from engine.kv.graph import empty_graph
from engine.kv.shard import CSR
from engine.sparql.algebra import Const, TriplePattern, Var
from tests.test_kv_api import _batched_only

_BIG = (1 << 32) - 100  # past int32: int64 key arrays (graph ids are < 2**32)


def _graph(triples, n_shards):
    rows = np.array(sorted(triples), dtype=np.int64).reshape(-1, 3)
    return empty_graph(n_shards).apply(None, rows)


def _expect(model, pid, direction, v):
    if direction == OUT:
        return sorted({o for s, p, o in model if p == pid and s == v})
    return sorted({s for s, p, o in model if p == pid and o == v})


_ids = st.one_of(st.integers(0, 40), st.integers(0, 5000), st.integers(_BIG, _BIG + 60))
_triples = st.sets(st.tuples(_ids, st.integers(0, 3), _ids), max_size=120)


@settings(max_examples=60, deadline=None)
@given(model=_triples, n_shards=st.sampled_from([1, 2, 3, 4]),
       probes=st.lists(_ids, min_size=1, max_size=15), others=st.lists(_ids, min_size=1, max_size=5))
def test_local_lists_equal_local_lookup_and_the_model(model, n_shards, probes, others):
    g = _graph(model, n_shards)
    vs = sorted({s for s, _, _ in model} | {o for _, _, o in model})[:20] + probes + [-1, -5, _BIG * 4]
    for pid in range(5):
        for direction in (OUT, IN):
            f = g.local_lookup(pid, direction)
            nbrs, has = g.local_lists(pid, direction)
            for v in vs:
                want = _expect(model, pid, direction, v)
                got = nbrs(v, 1 << 30)
                assert type(got) is list and got == want == f(v).tolist()
                assert nbrs(v, len(want)) == want
                if want:
                    assert nbrs(v, len(want) - 1) is None  # more than the cap: none made
                for o in want[:3] + others + [-1, _BIG * 4]:
                    assert has(v, o) is (o in want)


def test_every_span_kind_is_read():
    """Dense, bucket and binary-search CSRs (the kinds ``CSR.spec`` reports) answer alike."""
    rng = np.random.default_rng(3)
    for keys in (np.arange(0, 300, 1), np.sort(rng.choice(10**6, 300, replace=False)),
                 np.array([], dtype=np.int64)):
        cnt = rng.integers(0, 5, len(keys))
        indptr = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int32)
        indices = np.concatenate([np.sort(rng.choice(10**5, c, replace=False)) for c in cnt] or
                                 [np.zeros(0)]).astype(np.int32)
        for kdt in (np.int32, np.int64):
            csr = CSR(keys.astype(kdt), indptr, indices)
            kinds = {csr.spec(1)[0]}
            nbrs, has = lists.list_lookups([csr], 1)
            f = csr.lookup(1)
            for v in list(keys[:50].tolist()) + [-1, 10**7, 7]:
                assert nbrs(v, 10**6) == f(v).tolist()
                for o in f(v).tolist()[:2] + [-3, 99999]:
                    assert has(v, o) is (o in f(v).tolist())
            assert kinds <= {"dense", "bucket", "search", "empty"}
    # a sparse key set too big for a dense table is a bucket table
    keys = np.sort(rng.choice(10**7, 1000, replace=False)).astype(np.int32)
    csr = CSR(keys, np.arange(1001, dtype=np.int32), np.arange(1000, dtype=np.int32))
    assert csr.spec(1)[0] == "bucket"
    assert CSR(np.arange(100, dtype=np.int32), np.arange(101, dtype=np.int32),
               np.arange(100, dtype=np.int32)).spec(1)[0] == "dense"


@pytest.mark.parametrize("n_shards", [1, 2, 3])
@pytest.mark.parametrize("kind", ["dense", "bucket"])
def test_one_neighbour_lists_are_the_span(kind, n_shards):
    """A vertex with exactly one neighbour (the item read in place, no memoryview slice) in
    every span kind and shard layout: a list of one Python int, equal to the numpy
    lookup's; None at cap 0; next to vertices of 0 and several neighbours."""
    rng = np.random.default_rng(7 + n_shards)
    if kind == "dense":
        subjects = list(range(0, 40))
    else:
        subjects = sorted(rng.choice(10**6, 40, replace=False).tolist())
    model = set()
    for j, s in enumerate(subjects):
        for o in range(j % 3):  # 0, 1 or 2 neighbours
            model.add((s, 0, 1000 + 7 * j + o))
    g = _graph(model, n_shards)
    stride = partition.stride(n_shards)
    assert kind in {lists._view_spec(sh.local_csr(0, OUT), stride)[0] for sh in g.shards}
    nbrs, has = g.local_lists(0, OUT)
    f = g.local_lookup(0, OUT)
    ones = 0
    for s in subjects + [-1, 5]:
        want = _expect(model, 0, OUT, s)
        got = nbrs(s, 10)
        assert got == want == f(s).tolist()
        assert all(type(x) is int for x in got)
        if len(want) == 1:
            ones += 1
            assert nbrs(s, 1) == want and nbrs(s, 0) is None
            assert has(s, want[0]) and not has(s, want[0] + 1)
    assert ones >= 5

def test_a_snapshot_keeps_its_version_and_the_next_sees_the_write():
    model = {(1, 0, 2), (1, 0, 3), (4, 0, 2)}
    g = _graph(model, 4)
    nbrs, has = g.local_lists(0, OUT)
    g2 = g.apply(np.array([[1, 0, 3]], dtype=np.int64), np.array([[1, 0, 9], [5, 0, 2]], dtype=np.int64))
    assert nbrs(1, 9) == [2, 3] and has(1, 3) and not has(1, 9) and nbrs(5, 9) == []
    n2, h2 = g2.local_lists(0, OUT)
    assert n2(1, 9) == [2, 9] and h2(1, 9) and not h2(1, 3) and n2(5, 9) == [2]
    assert g2.local_lists(0, IN)[0](2, 9) == [1, 4, 5]
    assert g.local_lists(0, IN)[0](2, 9) == [1, 4]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3), st.integers(0, 12)), min_size=1,
                     max_size=60),
       dels=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3), st.integers(0, 12)), max_size=10),
       more=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 3), st.integers(0, 12)), max_size=6),
       caps=st.lists(st.integers(0, 8), min_size=1, max_size=3))
def test_flat_of_is_the_packed_slice_across_writes(monkeypatch, data, dels, more, caps):
    """``VertexEdges.flat_of`` (memoryview halves) equals ``edges_of(v).view(int32).tolist()``
    over a base and an overlay (small writes after the build), None past ``cap``; the
    memoryview reader is the one taken."""
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    monkeypatch.setattr(vertex_preds, "OVERLAY_MIN", 16)
    db = Database()
    nt = lambda rows: " ".join(f"<http://e/{s}> <http://p/{p}> <http://e/{o}> ." for s, p, o in rows)  # noqa: E731
    db.update("INSERT DATA { " + nt(data) + " }")
    if dels:
        db.update("DELETE DATA { " + nt(dels) + " }")
    if more:
        db.update("INSERT DATA { " + nt(more) + " }")
    vertex_preds.wait_builds()
    snap = db.store.snapshot()
    g = snap.default
    terms = db._snapshot_terms(snap)
    ids = [terms.lookup(f"<http://e/{i}>") for i in range(13)]
    for d in (OUT, IN):
        e = vertex_preds.cached_edges(g, d)
        assert e is not None
        assert e.flat_of.__name__ in ("flat_d", "flat_b", "flat_s", "flat_of", "<lambda>")  # not by_numpy
        for v in [i for i in ids if i is not None] + [10 ** 6, -1]:
            pk = e.edges_of(v) if v >= 0 else e.edges_of(0)[:0]
            want = pk.view(np.int32).tolist()
            for cap in caps + [10 ** 6]:
                assert e.flat_of(v, cap) == (want if len(pk) <= cap else None)


_EX = "http://ex.org/"
_term = st.one_of(st.integers(0, 7).map(lambda i: f"e{i}"), st.sampled_from(["?a", "?b", "?c"]))
_pattern = st.tuples(_term, st.integers(0, 2).map(lambda i: f"p{i}"), _term)


def _tp(s, p, o):
    def term(x):
        return Var(x[1:]) if x.startswith("?") else Const(f"<{_EX}{x}>")
    return TriplePattern(term(s), term(p), term(o))


@settings(max_examples=80, deadline=None)
@given(edges=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2), st.integers(0, 7)), max_size=80),
       hub=st.integers(0, 70), bgp=st.lists(_pattern, min_size=1, max_size=3),
       n_shards=st.sampled_from([1, 4]))
def test_small_bgp_on_list_lookups_answers_as_the_vectorized_steps(edges, hub, bgp, n_shards):
    """SmallBGP's steps read the list lookups (taken: the step functions are
    engine.kv.lists'), and its answers (hand-overs past a cap on hubs included) equal the
    vectorized executor's over the same graph without local lookups."""
    rows = set(edges) | {(0, 0, 100 + i) for i in range(hub)} | {(200 + i, 1, 1) for i in range(hub)}
    data = "".join(f"<{_EX}e{s}> <{_EX}p{p}> <{_EX}e{o}> .\n" for s, p, o in sorted(rows))
    db = Database(shards=n_shards)
    db.load_data(data, "application/n-triples")
    g = db.store.snapshot().default
    lookup = db.store.dictionary.lookup
    pats = tuple(_tp(*t) for t in bgp)
    prog = compile_small(pats, g, lookup)
    if prog is not None and not prog.empty:
        for _kind, fs, _, _ in prog.steps:
            f = fs[1] if isinstance(fs, tuple) else fs
            assert f.__module__ == "engine.kv.lists"
    if prog is None:  # (a scan: no tuple-at-a-time program)
        return
    got, want = _run_small(prog, Bindings.unit(), g, None, None), run_bgp(pats, _batched_only(g), lookup)
    names = sorted(v for v in want.cols if not v.startswith("#"))

    def table(b):
        return sorted(zip(*(b.cols[v].tolist() for v in names), strict=True)) if b.n else []
    assert got.n == want.n and table(got) == table(want)
