"""The vertex -> predicates index (engine/kv/vertex_preds.py) and the point
lookups / DESCRIBE that use it (engine/plan/point.py): the index against a
brute-force scan over random graphs and writes, and point/DESCRIBE answers
against pyoxigraph over random data, with the index built at once, never
built (every predicate probed) and required (more predicates than
MAX_PREDICATES)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.database as database
from engine.database import Database
from engine.kv import vertex_preds
from engine.kv.api import IN, OUT
from engine.kv.graph import empty_graph
from engine.plan import point
from tests.test_shape_cache import _rows

pyoxigraph = pytest.importorskip("pyoxigraph")

_triple = st.tuples(st.integers(0, 30), st.integers(0, 6), st.integers(0, 30))
_batch = st.lists(_triple, max_size=25)


def _brute(triples: set, direction: int) -> dict[int, list[int]]:
    out: dict[int, set[int]] = {}
    for s, p, o in triples:
        out.setdefault(s if direction == OUT else o, set()).add(p)
    return {v: sorted(ps) for v, ps in out.items()}


def _check(graph, triples: set) -> None:
    for d in (OUT, IN):
        idx = vertex_preds.vertex_predicates(graph, d)
        assert idx is not None
        want = _brute(triples, d)
        for v in range(-2, 40):
            assert idx.preds_of(v).tolist() == want.get(v, []), (d, v)
        assert idx.pairs == sum(len(x) for x in want.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shards=st.sampled_from([1, 3]), first=_batch,
       writes=st.lists(st.tuples(_batch, _batch), max_size=4))
def test_index_equals_a_brute_force_scan_across_writes(shards, first, writes):
    """Every snapshot's graph gets its own exact index; the older graphs' indexes
    (still cached while they live) keep answering for their own triples."""
    g = empty_graph(shards).apply(None, np.array(first, dtype=np.int64).reshape(-1, 3))
    have = set(first)
    history = [(g, set(have))]
    _check(g, have)
    for rem, add in writes:
        g = g.apply(np.array(rem, dtype=np.int64).reshape(-1, 3), np.array(add, dtype=np.int64).reshape(-1, 3))
        have = (have - set(rem)) | set(add)
        history.append((g, set(have)))
        _check(g, have)
    for old, ts in history:  # the cached indexes of earlier snapshots are untouched
        _check(old, ts)


def _brute_edges(triples: set, direction: int) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for s, p, o in triples:
        out.setdefault(s if direction == OUT else o, []).append((p, o if direction == OUT else s))
    return {v: sorted(x) for v, x in out.items()}


def _check_edges(graph, triples: set) -> None:
    for d in (OUT, IN):
        idx = vertex_preds.vertex_edges(graph, d)
        assert idx is not None
        want = _brute_edges(triples, d)
        for v in range(-2, 40):
            flat = idx.edges_of(v).view(np.int32).tolist()
            got = list(zip(flat[vertex_preds.EDGE_PID::2], flat[vertex_preds.EDGE_NB::2], strict=True))
            assert got == want.get(v, []), (d, v)
        assert idx.triples == len(triples)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shards=st.sampled_from([1, 3]), first=_batch,
       writes=st.lists(st.tuples(_batch, _batch), max_size=4))
def test_edge_index_equals_a_brute_force_scan_across_writes(shards, first, writes):
    """The vertex -> (predicate, neighbour) index: every vertex's triples in one slice,
    (predicate, neighbour) ascending, exact for each snapshot's graph."""
    g = empty_graph(shards).apply(None, np.array(first, dtype=np.int64).reshape(-1, 3))
    have = set(first)
    history = [(g, set(have))]
    _check_edges(g, have)
    for rem, add in writes:
        g = g.apply(np.array(rem, dtype=np.int64).reshape(-1, 3), np.array(add, dtype=np.int64).reshape(-1, 3))
        have = (have - set(rem)) | set(add)
        history.append((g, set(have)))
        _check_edges(g, have)
    for old, ts in history:
        _check_edges(old, ts)


def test_edge_index_budget_and_wide_ids(monkeypatch):
    monkeypatch.setattr(vertex_preds, "EAGER", False)  # (the lazy build: no index carried from the empty graph)
    g = empty_graph(1).apply(None, np.array([[1, p, 2] for p in range(10)], dtype=np.int64))
    assert vertex_preds.build_edges(g, OUT, budget=8) is None
    assert vertex_preds.vertex_edges(g, OUT, budget=8) is None and vertex_preds.cached_edges(g, OUT) is None
    wide = empty_graph(1).apply(None, np.array([[1, 0, (1 << 32) - 5]], dtype=np.int64))
    assert vertex_preds.build_edges(wide, OUT) is None  # (a neighbour id past 31 bits: no packed edges)


def test_above_the_budget_there_is_no_index_and_the_point_path_falls_back(monkeypatch):
    monkeypatch.setattr(vertex_preds, "EAGER", False)
    g = empty_graph(1).apply(None, np.array([[1, p, 2] for p in range(10)], dtype=np.int64))
    assert vertex_preds.build(g, OUT, budget=8) is None
    assert vertex_preds.vertex_predicates(g, OUT, budget=8) is None
    assert vertex_preds.cached(g, OUT) is None  # remembered as "none"
    monkeypatch.setattr(point, "MAX_PREDICATES", 4)
    src = point.point_source(g, OUT)
    assert src is not None and src.every is None and not src.usable()  # the general path answers
    g2 = empty_graph(1).apply(None, np.array([[1, p, 2] for p in range(10)], dtype=np.int64))
    src2 = point.point_source(g2, OUT)
    assert src2.usable() and [pid for pid, _ in src2.lookups_of(1)] == list(range(10))
    assert src2.lookups_of(2) == []


# ------------------------------------------------------------ answers vs pyoxigraph

_N_PREDS = 12


def answer_spy(monkeypatch, owner, name: str, real=None) -> list[bool]:
    """Patch ``owner.name`` with a spy of ``real`` (by default the attribute itself): the list
    it returns gets, per call, whether the fast path answered (a result, not None)."""
    real = getattr(owner, name) if real is None else real
    calls: list[bool] = []

    def spy(*a, **k):
        res = real(*a, **k)
        calls.append(res is not None)
        return res

    monkeypatch.setattr(owner, name, spy)
    return calls


def _iri(kind: str, i: int) -> str:
    return f"<http://x.example/{kind}{i}>"


def _term(o: int) -> str:
    return _iri("e", o) if o % 3 else f'"lit{o}"'


_data_triple = st.tuples(st.integers(0, 14), st.integers(0, _N_PREDS - 1), st.integers(0, 20))


def _nt(triples) -> str:
    return "\n".join(f"{_iri('e', s)} {_iri('p', p)} {_term(o)} ." for s, p, o in triples)


def _ox_rows(ox, text):
    r = ox.query(text)
    if hasattr(r, "variables"):
        names = [v.value for v in r.variables]
        return sorted(tuple(None if s[n] is None else str(s[n]) for n in names) for s in r)
    return sorted((str(t.subject), str(t.predicate), str(t.object)) for t in r)


POINT_QUERIES = (
    "SELECT ?p ?o WHERE {{ {e} ?p ?o }}",
    "SELECT ?s ?p WHERE {{ ?s ?p {e} }}",
    "SELECT ?p WHERE {{ {e} ?p {f} }}",
    "SELECT DISTINCT ?p WHERE {{ ?s ?p {e} }}",
)


@pytest.mark.parametrize("mode", ["built", "never", "required", "edges", "eager"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(first=st.lists(_data_triple, min_size=1, max_size=60),
       writes=st.lists(st.tuples(st.lists(_data_triple, max_size=8), st.lists(_data_triple, max_size=8)),
                       max_size=3))
def test_point_and_describe_answers_equal_pyoxigraph(monkeypatch, mode, first, writes):
    """Every way the one-vertex lookups can be answered: the predicates index built at
    once, never, or required; the edge index built lazily at the first lookup; or
    (``eager``, the default) carried along every commit from the empty graph's."""
    monkeypatch.setattr(vertex_preds, "EAGER", mode == "eager")
    if mode == "never":  # probe every predicate until the build is due, which fails (budget)
        monkeypatch.setattr(point, "BUILD_NS", 1)  # due at once, refused by the budget
        monkeypatch.setattr(vertex_preds, "MAX_BYTES", 0)
    else:  # build_after = 0: built on the first lookup
        monkeypatch.setattr(point, "BUILD_NS", 0)
    if mode == "required":  # more predicates than probing each allows: the index or nothing
        monkeypatch.setattr(point, "MAX_PREDICATES", 3)
    if mode == "edges":  # the edge index, built (here: synchronously) at the first lookup
        monkeypatch.setattr(point, "EDGE_BUILD_NS", 0)
        monkeypatch.setattr(point, "EDGE_MIN_USES", 1)
        monkeypatch.setattr(point, "_spawn", lambda fn: fn())
    else:  # never built: the probes answer
        monkeypatch.setattr(point, "EDGE_MIN_USES", 1 << 62)
    calls = answer_spy(monkeypatch, database, "describe_small")
    db = Database()
    ox = pyoxigraph.Store()
    db.update(f"INSERT DATA {{ {_nt(first)} }}")
    ox.update(f"INSERT DATA {{ {_nt(first)} }}")
    rounds = [None, *writes]
    answered = False  # some lookup found a vertex of the last snapshot's graph
    for w in rounds:
        answered = False
        if w is not None:
            rem, add = w
            for text in (f"DELETE DATA {{ {_nt(rem)} }}", f"INSERT DATA {{ {_nt(add)} }}"):
                db.update(text)
                ox.update(text)
        for e in range(0, 21, 2):
            f = _term((e * 7 + 1) % 21)
            for q in POINT_QUERIES:
                text = q.format(e=_term(e), f=f)
                got = _rows(db, text)
                assert got == _ox_rows(ox, text), text
                answered = answered or bool(got)
                pq = db._prepared.get((text, None))
                if pq is not None:  # (answered from a template otherwise: a rebound point program)
                    assert pq.fast is not None and pq.fast.point and pq.state[2] is not None, text
            if e % 3:
                text = f"DESCRIBE {_term(e)}"
                cons = f"CONSTRUCT {{ {_term(e)} ?p ?o }} WHERE {{ {_term(e)} ?p ?o }}"
                assert _rows(db, text) == _ox_rows(ox, cons), text
    assert calls and all(calls)  # DESCRIBE went through describe_small every time
    g = db.store.snapshot().default
    built = vertex_preds.cached(g, OUT)
    if mode == "never":
        assert built is None or g.n_triples == 0  # (an empty graph's index costs nothing)
    elif answered and mode not in ("edges", "eager"):  # (the edge index answers: no predicates index)
        assert built is not None
    if mode == "eager":  # (carried by every commit: there even when no lookup ran)
        assert vertex_preds.cached_edges(g, OUT) is not None and vertex_preds.cached_edges(g, IN) is not None
    elif answered:
        assert (vertex_preds.cached_edges(g, OUT) is not None
                or vertex_preds.cached_edges(g, IN) is not None) == (mode == "edges")


@pytest.mark.parametrize("build_ns,edges", [(0, False), (1 << 30, False), (0, True)])
def test_describe_closes_over_blank_nodes_like_the_vectorized_describe(monkeypatch, build_ns, edges):
    """Blank-node objects are described in later rounds (through the index, or every
    predicate before it is built, or the edge index): the same triples as the general DESCRIBE."""
    monkeypatch.setattr(point, "BUILD_NS", build_ns)
    monkeypatch.setattr(vertex_preds, "EAGER", False)
    db = Database()
    db.update("INSERT DATA { <http://x/a> <http://x/p3> _:b1 ; <http://x/p1> <http://x/c> . "
              "_:b1 <http://x/p2> _:b2 , _:b3 ; <http://x/p5> \"v\" . _:b2 <http://x/p0> <http://x/a> . "
              "_:b3 <http://x/p0> <http://x/c> ; <http://x/p1> _:b2 . "
              "<http://x/c> <http://x/p4> <http://x/a> }")
    text = "DESCRIBE <http://x/a>"
    if edges:
        src = point.point_source(db.store.snapshot().default, OUT)
        src.edges = vertex_preds.vertex_edges(db.store.snapshot().default, OUT)
        assert src.edges is not None
    got = _rows(db, text)
    monkeypatch.setattr(database, "describe_small", lambda *a, **k: None)
    want = _rows(db, text + " # general")
    assert got == want and len(got) == 8
    assert (vertex_preds.cached(db.store.snapshot().default, OUT) is not None) == (build_ns == 0 and not edges)


# ------------------------------------------------------------ <s> ?p <o> through the edge index

_dense_triple = st.tuples(st.integers(0, 5), st.integers(0, _N_PREDS - 1), st.integers(0, 8))


@pytest.mark.parametrize("scan", ["python", "numpy", "probes"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(first=st.lists(_dense_triple, min_size=1, max_size=120),
       writes=st.lists(st.tuples(st.lists(_dense_triple, max_size=10), st.lists(_dense_triple, max_size=10)),
                       max_size=2))
def test_predicates_between_two_constants_equal_pyoxigraph(monkeypatch, scan, first, writes):
    """``<s> ?p <o>`` (several predicates often join the same two ends here) answered
    from the edge index's slice of ``s`` (scanned in Python, or with numpy), or, for a
    vertex above EDGE_SCAN_MAX edges, by the per-predicate probes: pyoxigraph's rows,
    across writes (each snapshot's graph its own index)."""
    monkeypatch.setattr(point, "BUILD_NS", 0)
    monkeypatch.setattr(point, "EDGE_BUILD_NS", 0)
    monkeypatch.setattr(point, "EDGE_MIN_USES", 1)
    monkeypatch.setattr(point, "_spawn", lambda fn: fn())
    if scan == "numpy":
        monkeypatch.setattr(point, "PY_SCAN_MAX", 0)
    elif scan == "probes":
        monkeypatch.setattr(point, "EDGE_SCAN_MAX", 0)
    db = Database()
    ox = pyoxigraph.Store()
    for store in (db, ox):
        store.update(f"INSERT DATA {{ {_nt(first)} }}")
    for w in [None, *writes]:
        if w is not None:
            for text in (f"DELETE DATA {{ {_nt(w[0])} }}", f"INSERT DATA {{ {_nt(w[1])} }}"):
                db.update(text)
                ox.update(text)
        found = 0
        for e in range(7):
            for f in range(10):
                for q in ("SELECT ?p WHERE {{ {e} ?p {f} }}", "SELECT ?p WHERE {{ {e} ?p {f} }} LIMIT 1",
                          "ASK {{ {e} ?p {f} }}"):
                    text = q.format(e=_term(e), f=_term(f))
                    got = _rows(db, text)
                    if "ASK" in text:
                        assert got is bool(ox.query(text)), text
                        continue
                    want = _ox_rows(ox, text)
                    if "LIMIT" in text:
                        assert len(got) == len(want) and set(got) <= set(_ox_rows(ox, text.split(" LIMIT")[0])), text
                    else:
                        assert got == want, text
                        found += len(got)
        g = db.store.snapshot().default
        if found:  # the edge index was built by the lookups (and served them)
            assert vertex_preds.cached_edges(g, OUT) is not None


def test_describes_alone_build_the_edge_index(monkeypatch):
    """A workload of DESCRIBEs (no point lookups) rents the edge index like point
    lookups do: once their probes have cost what the build does, it is built and
    later DESCRIBEs read each resource's triples in one slice, with the same answer."""
    import time

    monkeypatch.setattr(vertex_preds, "EAGER", False)
    monkeypatch.setattr(point, "EDGE_MIN_USES", 3)
    monkeypatch.setattr(point, "EDGE_BUILD_NS", 0)  # the build costs nothing: due at the third use
    db = Database()
    db.update("INSERT DATA { <http://x/a> <http://x/p1> <http://x/c> ; <http://x/p2> \"v\" . "
              "<http://x/c> <http://x/p1> <http://x/a> }")
    src = point.point_source(db.store.snapshot().default, OUT)
    assert src.edges is None
    first = _rows(db, "DESCRIBE <http://x/a>")
    for i in range(5):
        assert _rows(db, f"DESCRIBE <http://x/a> # {i}") == first
    deadline = time.monotonic() + 10
    while src.edges is None and time.monotonic() < deadline:  # (built by a background thread)
        time.sleep(0.01)
    assert src.edges is not None
    assert _rows(db, "DESCRIBE <http://x/a> # after") == first and len(first) == 2


# ------------------------------------------------------------ the eager edge index, carried by commits

_wide_triple = st.tuples(st.integers(0, 60), st.integers(0, 9), st.integers(0, 60))


@pytest.mark.parametrize("overlay_min", [0, 8, 1 << 20])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(shards=st.sampled_from([1, 2, 3]), first=st.lists(_wide_triple, max_size=80),
       writes=st.lists(st.tuples(st.lists(_wide_triple, max_size=20), st.lists(_wide_triple, max_size=20),
                                 st.booleans()), min_size=1, max_size=6))
def test_carried_edge_index_equals_a_recomputation(monkeypatch, overlay_min, shards, first, writes):
    """Random deletes and inserts (rows absent, present, repeated, deleted and re-inserted
    in one commit): each commit's graph has both edge indexes from its predecessor's,
    patched in an overlay (``overlay_min`` large; on top of an earlier overlay, or as
    a chain of pending steps), rebuilt (0), or either by size (8), and each equals a
    brute-force recomputation, as does every earlier snapshot's; the vertex ->
    predicates lists read off them equal the recomputed ones too."""
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    monkeypatch.setattr(vertex_preds, "OVERLAY_MIN", overlay_min)
    monkeypatch.setattr(vertex_preds, "OVERLAY_SHARE", 1 << 30)
    g0 = empty_graph(shards)
    vertex_preds.seed_empty(g0)  # (as a store's empty graph)
    g = g0.apply(None, np.array(first, dtype=np.int64).reshape(-1, 3))
    have = set(first)
    history = [(g, set(have))]
    overlays = 0
    for rem, add, settle in writes:
        if rem and add:  # (a triple deleted and inserted by one commit stays)
            add = [*add, rem[0]]
        g = g.apply(np.array(rem, dtype=np.int64).reshape(-1, 3), np.array(add, dtype=np.int64).reshape(-1, 3))
        if settle:  # (as a store's commit: resolved now, the next patch goes on top of its overlay;
            vertex_preds.settle(g)  # else the next graph's pending patch extends this one's steps)
        have = (have - set(rem)) | set(add)
        history.append((g, set(have)))
    vertex_preds.wait_builds(10)  # (a settled rebuild runs in the background)
    for gr, ts in history:
        for d in (OUT, IN):
            idx = vertex_preds.cached_edges(gr, d)
            assert idx is not None  # carried, never built lazily here
            overlays += idx.overlay is not None
            want = _brute_edges(ts, d)
            for v in range(-1, 62):
                flat = idx.edges_of(v).view(np.int32).tolist()
                got = list(zip(flat[vertex_preds.EDGE_PID::2], flat[vertex_preds.EDGE_NB::2], strict=True))
                assert got == want.get(v, []), (d, v)
                assert sorted(set(flat[vertex_preds.EDGE_PID::2])) == _brute(ts, d).get(v, [])
            assert idx.triples == len(ts)
    if overlay_min == 0:
        assert overlays == 0
    elif overlay_min > 1000 and any(b[0] is not a[0] for a, b in zip(history, history[1:], strict=False)):
        assert overlays > 0


def test_a_store_opened_from_disk_and_a_remapped_one_have_the_edge_index(tmp_path):
    """Persistence: the graphs read back from the data directory get their edge
    indexes at open (built), a remapped store keeps its own (same triples), and
    later commits carry them; answers equal pyoxigraph's after reopening."""
    from engine.kv.store import Store

    data = "<http://x/a> <http://x/p> <http://x/b> . <http://x/b> <http://x/q> \"v\" ."
    db = Database(data_dir=str(tmp_path))
    db.update(f"INSERT DATA {{ {data} }} ; INSERT DATA {{ GRAPH <http://x/g> {{ {data} }} }}")
    snap = db.store.snapshot()
    before = vertex_preds.cached_edges(snap.default, OUT)
    assert before is not None
    db.store.remap()
    snap = db.store.snapshot()
    assert vertex_preds.cached_edges(snap.default, OUT) is before
    db.update("DELETE DATA { <http://x/a> <http://x/p> <http://x/b> } ; INSERT DATA { <http://x/c> <http://x/p> <http://x/a> }")
    del db
    st2 = Store(data_dir=str(tmp_path))
    snap = st2.snapshot()
    for gr in (snap.default, *snap.named.values()):
        for d in (OUT, IN):
            assert vertex_preds.cached_edges(gr, d) is not None
    db2 = Database(data_dir=str(tmp_path))
    ox = pyoxigraph.Store()
    ox.update(f"INSERT DATA {{ {data} }}")
    ox.update("DELETE DATA { <http://x/a> <http://x/p> <http://x/b> } ; INSERT DATA { <http://x/c> <http://x/p> <http://x/a> }")
    for text in ("SELECT ?p ?o WHERE { <http://x/a> ?p ?o }", "SELECT ?s ?p WHERE { ?s ?p <http://x/a> }",
                 "SELECT ?p ?o WHERE { <http://x/b> ?p ?o }"):
        assert _rows(db2, text) == _ox_rows(ox, text), text


_bn_triple = st.tuples(st.integers(0, 9), st.integers(0, 5), st.integers(0, 14))


def _bn_term(i: int, obj: bool) -> str:
    """Vertices 0-4 IRIs, 5-9 blank nodes; objects 10-14 literals."""
    if i >= 10:
        return f'"l{i}"' if obj else _iri("e", i % 5)
    return _iri("e", i) if i < 5 else f"_:b{i}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(triples=st.lists(_bn_triple, min_size=1, max_size=50),
       resources=st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True))
def test_describe_through_the_edge_index_equals_the_general_describe(monkeypatch, triples, resources):
    """DESCRIBE of one or several resources (an absent one too) over random graphs with
    chains and cycles of blank nodes, through the carried edge index: the general
    (vectorized) DESCRIBE's triples in its order (by round, predicate, resource,
    object); and each resource's own triples are pyoxigraph's CONSTRUCT of them."""
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    db = Database()
    nt = " ".join(f"{_bn_term(s, False)} {_iri('p', p)} {_bn_term(o, True)} ." for s, p, o in triples)
    db.update(f"INSERT DATA {{ {nt} }}")
    assert vertex_preds.cached_edges(db.store.snapshot().default, OUT) is not None
    text = "DESCRIBE " + " ".join(_iri("e", r) for r in resources)
    # (the spy wraps point's: a previous example's patch of database's stays until the test ends)
    calls = answer_spy(monkeypatch, database, "describe_small", point.describe_small)
    fast = db.query(text)
    assert calls == [True]
    monkeypatch.setattr(database, "describe_small", lambda *a, **k: None)
    slow = db.query(text + " # general")
    assert [tuple(fast.terms.keys(t)) for t in fast.triples] == [tuple(slow.terms.keys(t)) for t in slow.triples]
    ox = pyoxigraph.Store()
    ox.update(f"INSERT DATA {{ {nt} }}")
    def anon(row):  # (blank node labels differ between the stores)
        return tuple("_" if x.startswith("_:") else x for x in row)

    for r in resources:
        mine = sorted(anon(fast.terms.keys(t)) for t in fast.triples if fast.terms.keys(t)[0] == _iri("e", r))
        cons = f"CONSTRUCT {{ {_iri('e', r)} ?p ?o }} WHERE {{ {_iri('e', r)} ?p ?o }}"
        assert mine == sorted(anon(t) for t in _ox_rows(ox, cons))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(first=st.lists(_wide_triple, min_size=1, max_size=40),
       writes=st.lists(st.tuples(st.lists(_wide_triple, max_size=10), st.lists(_wide_triple, max_size=10),
                                 st.booleans()), min_size=1, max_size=4))
def test_a_query_process_follows_the_primary_s_edge_index(tmp_path_factory, first, writes):
    """``--processes``: a query process (ReaderStore) maps each version the primary
    commits; its graphs' edge indexes are the last version's patched by the difference
    of the rebuilt segments (resolved when read, or when the next version comes), and
    equal a recomputation; point lookups answer as the primary does."""
    from engine.kv.store import Store
    from server.processes import ReaderStore

    d = tmp_path_factory.mktemp("procs")
    writer = Database()
    writer.store = Store(shards=3, data_dir=str(d))
    reader_db = Database()
    reader_db.store = reader = ReaderStore(str(d))

    def nt(ts):
        return " ".join(f"{_iri('e', s)} {_iri('p', p)} {_iri('e', o)} ." for s, p, o in ts)

    writer.update(f"INSERT DATA {{ {nt(first)} }}")
    for rem, add, read in [([], [], True), *writes]:
        if rem:
            writer.update(f"DELETE DATA {{ {nt(rem)} }}")
        if add:
            writer.update(f"INSERT DATA {{ {nt(add)} }}")
        assert reader.refresh() == writer.store.snapshot().sn
        if not read:  # (left pending: the next version's switch resolves it)
            continue
        g = reader.snapshot().default
        s, p, o = writer.store.snapshot().default.scan_all()
        ids = set(zip(s.tolist(), p.tolist(), o.tolist(), strict=True))
        for dd in (OUT, IN):
            idx = vertex_preds.cached_edges(g, dd)
            assert idx is not None
            want = _brute_edges(ids, dd)
            for v in {x for t in ids for x in (t[0], t[2])} | {10 ** 6}:
                flat = idx.edges_of(v).view(np.int32).tolist()
                got = list(zip(flat[vertex_preds.EDGE_PID::2], flat[vertex_preds.EDGE_NB::2], strict=True))
                assert got == want.get(v, []), (dd, v)
        for e in range(0, 61, 7):
            for q in ("SELECT ?p ?o WHERE {{ {e} ?p ?o }}", "SELECT ?s ?p WHERE {{ ?s ?p {e} }}", "DESCRIBE {e}"):
                text = q.format(e=_iri("e", e))
                assert _rows(reader_db, text) == _rows(writer, text), text


def test_a_bulk_load_builds_the_edge_index_in_the_background(monkeypatch):
    """A commit of more rows than an overlay holds builds the index afresh in a
    background thread (the commit does not wait); lookups meanwhile answer their
    general way, and once built the graph's index is exact."""
    monkeypatch.setattr(vertex_preds, "OVERLAY_MIN", 8)
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    db = Database()
    rows = [(s, p, (s * 7 + p) % 40) for s in range(40) for p in range(3)]
    db.update(f"INSERT DATA {{ {_nt(rows)} }}")
    ox = pyoxigraph.Store()
    ox.update(f"INSERT DATA {{ {_nt(rows)} }}")
    text = f"SELECT ?p ?o WHERE {{ {_term(4)} ?p ?o }}"
    assert _rows(db, text) == _ox_rows(ox, text)  # (built or not yet: the same answer)
    vertex_preds.wait_builds(10)
    g = db.store.snapshot().default
    want = set(rows)
    for d in (OUT, IN):
        idx = vertex_preds.cached_edges(g, d)
        assert idx is not None and idx.overlay is None and idx.triples == len(want)
    db.update(f"INSERT DATA {{ {_nt([(1, 5, 2)])} }}")  # (then a small commit: an overlay on it)
    assert vertex_preds.cached_edges(db.store.snapshot().default, OUT).overlay is not None
    ox.update(f"INSERT DATA {{ {_nt([(1, 5, 2)])} }}")
    for e in range(0, 21, 4):
        for q in ("SELECT ?p ?o WHERE {{ {e} ?p ?o }}", "SELECT ?s ?p WHERE {{ ?s ?p {e} }}"):
            assert _rows(db, q.format(e=_term(e))) == _ox_rows(ox, q.format(e=_term(e)))


def test_bulk_loads_in_a_row_build_the_newest_graph_s_index(monkeypatch):
    """A second bulk commit right after a first carries the first's pending rows on;
    the background build of the superseded graph is skipped, the newest graph's
    index is exact, and the older graph still gets its own (exact) when read."""
    monkeypatch.setattr(vertex_preds, "OVERLAY_MIN", 8)
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    db = Database()
    one = [(s, 1, (s * 3) % 30) for s in range(30)]
    two = [(s, 2, (s * 5) % 30) for s in range(30)]
    db.update(f"INSERT DATA {{ {_nt(one)} }}")
    g1 = db.store.snapshot().default
    db.update(f"INSERT DATA {{ {_nt(two)} }}")
    g2 = db.store.snapshot().default
    vertex_preds.wait_builds(10)
    for g, n in ((g2, len(set(one) | set(two))), (g1, len(set(one)))):
        s, p, o = g.scan_all()  # (store ids, from the per-predicate arrays)
        ts = set(zip(s.tolist(), p.tolist(), o.tolist(), strict=True))
        assert len(ts) == n
        for d in (OUT, IN):
            idx = vertex_preds.cached_edges(g, d)
            assert idx is not None and idx.triples == n
            want = _brute_edges(ts, d)
            for v in {x for t in ts for x in (t[0], t[2])}:
                flat = idx.edges_of(v).view(np.int32).tolist()
                got = list(zip(flat[vertex_preds.EDGE_PID::2], flat[vertex_preds.EDGE_NB::2], strict=True))
                assert got == want.get(v, []), (d, v)
