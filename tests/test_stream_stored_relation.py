"""The join core probing wide stored relations (:mod:`engine.stream.stored_relation`).

A stored pattern with two variable ends and too many triples for the compact graph
(``?creator :knows ?friend``) is read by the tuple-at-a-time core through per-value lookups
kept across instants, instead of a per-instant restriction copied into the rows. These tests
check that

* random stored graphs (one or two FROM graphs, overlapping), sliding windows that repeat
  stored triples, and chain / star / cycle joins under plain, FILTER, DISTINCT and GROUP BY give,
  at every instant, the answers of the executor over the merged view and of pyoxigraph over the
  same triples -- and that the probing path answered most of those instants;
* an instant the core hands back gets the restriction (the executor's path reads the rows);
* the relation's lookups stay right past their cache's limit, and a window triple the store
  also holds is counted once.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.stream.continuous as C
from engine.database import Database
from engine.exec.evaluate import QueryContext
from engine.sparql.parser import parse_query
from engine.stream import stored_relation as SR
from engine.stream import tiny_vec
from engine.stream.continuous import BoundWindow, InstantEvaluator
from engine.stream.transient import TransientStore
from engine.stream.windows import Window
from tests.test_stream_anchor_choice import EX, PREDS, N, edges, join_queries, win_triples


@pytest.fixture(autouse=True)
def _other_paths(monkeypatch):
    """These tests look at the compact path's restriction and probes: the generated instants
    (engine.stream.tiny_gen, which read the stored graphs their own way) are off here."""
    monkeypatch.setattr(InstantEvaluator, "GENERATED", False)

G2 = "http://ex.org/g2"
SEEN: Counter = Counter()   # instants per path (the property test must take the probing one)

_solve = C.TinyCore.solutions


def _seeing(self, rows, ctx, stored=None, wide=None):
    got = _solve(self, rows, ctx, stored, wide)
    if wide:
        SEEN["probed" if got is not None else "handed back"] += 1
    return got


C.TinyCore.solutions = _seeing


def _nt(pairs, pred: str) -> str:
    return "".join(f"<{EX}n{a}> <{EX}{pred}> <{EX}n{b}> .\n" for a, b in pairs)


def _db(knows, made, knows2, ages: bool) -> Database:
    lines = _nt(knows, "knows") + _nt(made, "made")
    if ages:
        lines += "".join(f"<{EX}n{i}> <{EX}age> \"{20 + i % 7}\" .\n" for i in range(N))
    lines += "".join(f"<{EX}n{i}> <{EX}label> \"n{i}\" .\n" for i in range(N))
    d = Database()
    d.load_data(lines.encode(), "application/n-triples")
    if knows2:
        d.load_data(_nt(knows2, "knows").encode(), "application/n-triples", graph=G2)
    d.store.dictionary.encode([f"<{EX}{p}>" for p in PREDS])
    return d


def _window(db, triples, range_ms: int, gap: int) -> tuple[BoundWindow, list]:
    store = TransientStore("s")
    keys = []
    if triples:
        keys = [(f"<{EX}n{s}>", f"<{EX}{p}>", f"<{EX}n{o}>") for s, p, o in triples]
        flat = [k for t in keys for k in t]
        ids = np.array(db.store.dictionary.encode(flat), dtype=np.int64).reshape(-1, 3)
        store.append_rows(ids, np.arange(1, len(triples) + 1) * gap)
    gid = int(db.store.dictionary.encode([f"<{EX}stream>"])[0])
    bw = BoundWindow("s", EX + "stream", gid, Window.time(range_ms, 1000), store)
    return bw, [(k, (i + 1) * gap) for i, k in enumerate(keys)]


def _rows(res) -> list:
    """The rows as term keys, columns in the order of their variables' names."""
    order = sorted(range(len(res.vars)), key=lambda i: res.vars[i])
    cols = [res.terms.keys(res.columns[i]) for i in order]
    return sorted(tuple(x or "" for x in r) for r in zip(*cols, strict=True))


def _oracle(text: str, stored_nt: str, win: list, t: int, range_ms: int) -> list:
    """pyoxigraph over the FROM graphs' triples plus the window's (one default graph)."""
    store = ox.Store()
    if stored_nt:
        store.load(stored_nt.encode(), ox.RdfFormat.N_TRIPLES)
    quads = [ox.Quad(ox.NamedNode(s[1:-1]), ox.NamedNode(p[1:-1]), ox.NamedNode(o[1:-1]), ox.DefaultGraph())
             for (s, p, o), tau in win if t - range_ms < tau <= t]
    store.extend(quads)
    q = text.replace(f" FROM <urn:jindou:default> FROM <{G2}>", "").replace(" FROM <urn:jindou:default>", "")
    res = store.query(q)
    names = sorted(v.value for v in res.variables)
    out = []
    for sol in res:
        out.append(tuple(str(sol[v]) if sol[v] is not None else "" for v in names))
    return sorted(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(knows=edges(), made=edges(), knows2=st.one_of(st.just([]), edges()), win=win_triples,
       query=join_queries(), limit=st.sampled_from([4, 8, 16, 32]), ages=st.booleans(),
       range_ms=st.sampled_from([1000, 2000, 3000]), gap=st.sampled_from([100, 250]),
       cached=st.sampled_from([2, 1 << 17]), vec=st.sampled_from([0, tiny_vec.VEC_ROWS]),
       whole=st.sampled_from([(0, 0), (1 << 18, 0), (1 << 18, 1 << 16)]))
def test_probed_relations_equal_merged_view_and_pyoxigraph(knows, made, knows2, win, query, limit, ages, range_ms,
                                                           gap, cached, vec, whole, monkeypatch):
    """(``vec``: the joins' tails on columns from their first expanding step, or as planned;
    ``whole``: the relation kept as sorted arrays and as complete look-ups, or not.)"""
    monkeypatch.setattr(C, "SMALL_WINDOW", limit)
    monkeypatch.setattr(SR.StoredRelation, "max_arrays", whole[0])
    monkeypatch.setattr(SR.StoredRelation, "max_full", whole[1])
    monkeypatch.setattr(tiny_vec, "VEC_ROWS", vec)
    monkeypatch.setattr(SR.StoredRelation, "max_cached", cached)   # (2: the caches start again often)
    if knows2:
        query = query.replace(" FROM <urn:jindou:default>", f" FROM <urn:jindou:default> FROM <{G2}>")
    db = _db(knows, made, knows2, ages)
    try:
        bw, keyed = _window(db, win, range_ms, gap)
        q = parse_query(query)
        probed = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
        merged = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
        merged._compact.patterns = None
        stored_nt = _nt(knows, "knows") + _nt(made, "made") + _nt(knows2, "knows")
        if ages and "age" in query:
            stored_nt += "".join(f"<{EX}n{i}> <{EX}age> \"{20 + i % 7}\" .\n" for i in range(N))
        for t in (1000, 2000, 2000, 3000, 4000):
            a, b = probed.evaluate(t), merged.evaluate(t)
            assert (len(a), _rows(a)) == (len(b), _rows(b)), query
            if "age" not in query or ages:
                assert _rows(a) == _oracle(query, stored_nt, keyed, t, range_ms), query
    finally:
        db.close()


def test_the_probing_path_answered():
    """The property test above took the probing path on many instants."""
    assert SEEN["probed"] > 50, SEEN


L7 = (f"SELECT ?creator (COUNT(*) AS ?n) FROM <urn:jindou:default> WHERE {{ ?photo <{EX}made> ?creator . "
      f"?liker <{EX}like> ?photo . ?creator <{EX}knows> ?friend . ?friend <{EX}knows> ?liker }} GROUP BY ?creator")


@pytest.mark.parametrize("full", [0, 1 << 16])
def test_l7_shape_probes_without_restricting(monkeypatch, full):
    """LSBench L7's shape: both ``knows`` patterns are probed, no restriction is computed, and
    a value's neighbours are looked up in the store once over several instants (or the whole
    relation's at once)."""
    monkeypatch.setattr(C, "SMALL_WINDOW", 20)
    monkeypatch.setattr(SR.StoredRelation, "max_full", full)
    monkeypatch.setattr(SR.StoredRelation, "max_arrays", full)
    ring = [(a, (a + k) % N) for a in range(N) for k in (1, 2, 3)]   # 36 knows triples
    db = _db(ring, [], [], ages=False)
    restricted = []
    fills = Counter()
    restrict = C._Compact._restrict
    fill = SR.StoredRelation._fill
    monkeypatch.setattr(C._Compact, "_restrict", lambda self, r, n: restricted.append(1) or restrict(self, r, n))
    monkeypatch.setattr(SR.StoredRelation, "_fill", lambda self, k, v: fills.update([(k, v)]) or fill(self, k, v))
    try:
        win = [(1, "made", 6), (5, "like", 1), (3, "made", 2), (5, "like", 3), (4, "like", 1)]
        bw, _ = _window(db, win * 3, 3000, 300)
        q = parse_query(L7)
        probed = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
        merged = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
        merged._compact.patterns = None
        for t in (1000, 2000, 3000, 4000, 5000):
            a, b = probed.evaluate(t), merged.evaluate(t)
            assert _rows(a) == _rows(b)
        assert len(probed.evaluate(3000)) > 0
        assert not restricted
        assert (fills and max(fills.values()) == 1) if not full else not fills   # (kept across instants)
        other = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)   # (the same query again)
        assert _rows(other.evaluate(3000)) == _rows(probed.evaluate(3000))
        mine, theirs = probed._compact.relations(), other._compact.relations()
        assert mine and all(mine[p] is theirs[p] for p in mine)   # one relation for both
        assert not fills or max(fills.values()) == 1
    finally:
        db.close()


def test_handed_back_instant_gets_the_restriction(monkeypatch):
    """When the core hands an instant back (here: past a work bound of 0), the rows the
    executor reads carry the restricted stored triples, so its answer is the same."""
    monkeypatch.setattr(C, "SMALL_WINDOW", 20)
    monkeypatch.setattr(C.TinyCore, "max_work", 0)
    ring = [(a, (a + k) % N) for a in range(N) for k in (1, 2, 3)]
    db = _db(ring, [], [], ages=False)
    try:
        bw, _ = _window(db, [(1, "made", 6), (5, "like", 1), (3, "made", 2), (5, "like", 3)], 3000, 300)
        text = L7.replace("SELECT ?creator (COUNT(*) AS ?n)", "SELECT *").replace(" GROUP BY ?creator", "")
        q = parse_query(text)
        probed = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
        merged = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
        merged._compact.patterns = None
        a, b = probed.evaluate(2000), merged.evaluate(2000)
        assert len(a) > 0 and _rows(a) == _rows(b)
        assert probed._tiny_skip > 0   # (it was handed back)
    finally:
        db.close()


@pytest.mark.parametrize("full", [0, 1 << 16])
def test_relation_lookups_and_fresh_window_pairs(monkeypatch, full):
    """Per-value lookups at both ends, pair tests, and window pairs the store holds dropped,
    with the cache starting again past its limit."""
    db = _db([(0, 1), (0, 2), (3, 1)], [], [(0, 1), (4, 0)], ages=False)
    try:
        ids = {i: int(x) for i, x in enumerate(db.store.dictionary.encode([f"<{EX}n{i}>" for i in range(6)]))}
        pid = int(db.store.dictionary.lookup(f"<{EX}knows>"))
        snap = db.store.snapshot()
        gid = int(db.store.dictionary.lookup(f"<{G2}>"))
        monkeypatch.setattr(SR.StoredRelation, "max_cached", 3)
        monkeypatch.setattr(SR.StoredRelation, "max_full", full)
        rel = SR.StoredRelation(pid, [snap.default, snap.named[gid]])
        for _ in range(3):   # (the cache refills)
            assert sorted(rel.getter(0)(ids[0])) == sorted([(ids[1],), (ids[2],)])   # (0, 1) once
            assert sorted(rel.getter(1)(ids[1])) == sorted([(ids[0],), (ids[3],)])
            assert sorted(rel.getter(1)(ids[0])) == [(ids[4],)]
            assert not rel.getter(0)(ids[5])
            test = rel.pair_tester()
            assert test(ids[4], ids[0]) and test(ids[3], ids[1]) and not test(ids[1], ids[0])
        late = int(db.store.dictionary.encode([f"<{EX}late>"])[0])   # interned after the relation's bound
        fenced = SR.StoredRelation(pid, [snap.default], late)
        assert not fenced.getter(0)(late) and not fenced.others(1, late)
        assert not fenced._nb[0] or fenced._full[0]
        assert sorted(fenced.getter(0)(ids[0])) == sorted([(ids[1],), (ids[2],)])
        assert sorted(fenced.sorted_by(1)[0].tolist()) == sorted([ids[1], ids[2], ids[1]])
        pairs = [(ids[0], ids[1]), (ids[5], ids[0]), (ids[4], ids[0])]
        assert rel.fresh(pairs) == [(ids[5], ids[0])]
        m = SR.LazyMatch(rel, [(ids[5], ids[0])])
        assert sorted(m.getter(1)(ids[0])) == sorted([(ids[4],), (ids[5],)])
        assert m.pair_tester()(ids[5], ids[0]) and m.tester(0)(ids[5]) and m.tester(0)(ids[0])
        with pytest.raises(SR.WholeRelation):
            m.values(0)
        assert QueryContext(snap).lookup(f"<{EX}knows>") == pid
    finally:
        db.close()
