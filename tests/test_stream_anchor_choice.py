"""The compact path's restriction of wide stored patterns (:meth:`_Compact.anchored`), with the
join core's probes of the stored relations (:mod:`engine.stream.stored_relation`) turned off.

A stored pattern with two variable ends and too many triples (``?liker :knows ?creator``) is
restricted per instant through the candidates of its variables. These tests check that

* random stored graphs, windows and join shapes (where the cheapest anchor is sometimes a
  window pattern, sometimes a stored one) give the answers of the executor over the merged
  view (no compact path) at every instant, with the expansion call weighed at random;
* a query whose first anchor would be a stored pattern on every node (LSBench L6's
  ``?liker foaf:age ?age``) is restricted through the selective window pattern instead and
  stays on the compact path, as does a two-hop chain of restricted patterns (L7's shape);
* a pattern whose predicate the store did not hold yet is resolved again once a stream
  element brings it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.stream.continuous as C
from engine.database import Database
from engine.exec.evaluate import QueryContext
from engine.sparql.parser import parse_query
from engine.stream.continuous import BoundWindow, InstantEvaluator
from engine.stream.transient import TransientStore
from engine.stream.windows import Window


@pytest.fixture(autouse=True)
def _other_paths(monkeypatch):
    """These tests look at the compact path's restriction and probes: the generated instants
    (engine.stream.tiny_gen, which read the stored graphs their own way) are off here."""
    monkeypatch.setattr(InstantEvaluator, "GENERATED", False)

EX = "http://ex.org/"
N = 12
PREDS = ("knows", "age", "like", "made")


def _db(knows: list, made: list, ages: bool = True) -> Database:
    lines = [f"<{EX}n{a}> <{EX}knows> <{EX}n{b}> .\n" for a, b in knows]
    lines += [f"<{EX}n{a}> <{EX}made> <{EX}n{b}> .\n" for a, b in made]
    if ages:
        lines += [f"<{EX}n{i}> <{EX}age> \"{20 + i % 7}\" .\n" for i in range(N)]
    lines += [f"<{EX}n{i}> <{EX}label> \"n{i}\" .\n" for i in range(N)]  # every node interned
    d = Database()
    d.load_data("".join(lines).encode(), "application/n-triples")
    d.store.dictionary.encode([f"<{EX}{p}>" for p in PREDS])
    return d


def _ids(db, keys):
    return [int(x) for x in db.store.dictionary.encode(keys)]


def _window(db, triples: list, range_ms: int = 1000, gap: int = 100) -> BoundWindow:
    """A time window of 1 s over ``triples`` (subject index, predicate name, object index),
    the k-th at 100*(k+1) ms."""
    store = TransientStore("s")
    if triples:
        ks = [f"<{EX}n{s}>" for s, _, _ in triples] + [f"<{EX}{p}>" for _, p, _ in triples] + \
             [f"<{EX}n{o}>" for _, _, o in triples]
        ids = np.array(_ids(db, ks), dtype=np.int64).reshape(3, -1).T
        store.append_rows(ids, np.arange(1, len(triples) + 1) * gap)
    gid = _ids(db, [f"<{EX}stream>"])[0]
    return BoundWindow("s", EX + "stream", gid, Window.time(range_ms, 1000), store)


def _rows_of(res):
    return sorted(tuple(x or "" for x in r) for r in zip(*[res.terms.keys(c) for c in res.columns], strict=True))


def _pair(db, text: str, bw: BoundWindow):
    q = parse_query(text)
    compact = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    # the restriction itself (the join core probing the stored relations instead is
    # tests/test_stream_stored_relation.py's)
    compact._tiny_wide = False
    merged = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    merged._compact.patterns = None
    return compact, merged


def _same(compact, merged, t: int, text: str) -> None:
    a, b = compact.evaluate(t), merged.evaluate(t)
    assert (len(a), _rows_of(a)) == (len(b), _rows_of(b)), text


@st.composite
def edges(draw):
    """A random graph on the N nodes: from none to about half of all pairs."""
    n = draw(st.integers(0, N * N // 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    return [tuple(map(int, e)) for e in rng.integers(0, N, size=(n, 2))]


win_triples = st.lists(st.tuples(st.integers(0, N - 1), st.sampled_from(PREDS), st.integers(0, N - 1)),
                       max_size=14)


@st.composite
def join_queries(draw):
    """Conjunctive BGPs over ``?a ?b ?c ?d``: wide stored patterns (knows, made), a stored
    pattern on every node (age), a window-only one (like), chained (a path through up to five
    variables, L7's shape) or starred, under plain / FILTER / DISTINCT / GROUP BY."""
    vars_ = ["a", "b", "c", "d"]
    pats = []
    if draw(st.booleans()):   # a path ?a - ?b - ?c - ... through random predicates and directions
        path = ["a", "b", "c", "d", "e"][:draw(st.integers(3, 5))]
        if draw(st.booleans()):
            path.append("a")   # a cycle: every variable joins two patterns
        for x, y in zip(path, path[1:], strict=False):
            p = draw(st.sampled_from(("knows", "like", "made")))
            pats.append(f"?{x} <{EX}{p}> ?{y} ." if draw(st.booleans()) else f"?{y} <{EX}{p}> ?{x} .")
    for _ in range(draw(st.integers(0 if pats else 2, 3 if pats else 5))):
        p = draw(st.sampled_from(PREDS + ("knows", "knows", "made")))
        s = draw(st.sampled_from(vars_))
        if p == "age":
            o = "?age" if draw(st.booleans()) else f'"{20 + draw(st.integers(0, 6))}"'
        elif draw(st.integers(0, 7)):
            o = "?" + draw(st.sampled_from(vars_))
        else:
            o = f"<{EX}n{draw(st.integers(0, N - 1))}>"
        pats.append(f"?{s} <{EX}{p}> {o} .")
    body = " ".join(pats)
    shape = draw(st.sampled_from(["plain", "plain", "filter", "distinct", "group"]))
    head, tail = "SELECT *", ""
    if shape == "filter":
        body += " FILTER(?a != ?b)"
    elif shape == "distinct":
        head = "SELECT DISTINCT ?a ?b"
    elif shape == "group":
        head, tail = "SELECT ?a (COUNT(*) AS ?n)", " GROUP BY ?a"
    return f"{head} FROM <urn:jindou:default> WHERE {{ {body} }}{tail}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)   # (a fixed set of examples: the count below is deterministic)
@given(knows=edges(), made=edges(), win=win_triples, query=join_queries(), limit=st.sampled_from([4, 8, 16, 32, 64]),
       ages=st.booleans(), expand=st.sampled_from([0, 64, 10_000]), slide=st.sampled_from([1000, 2000, 3000]),
       gap=st.sampled_from([100, 250]), every=st.sampled_from([0, 1, 16]), extend=st.sampled_from([0, 1, 2, 32]))
def test_anchor_choice_equals_merged_view(knows, made, win, query, limit, ages, expand, slide, gap, every,
                                          extend, monkeypatch):
    """(``slide``: a window of 1-3 s stepping by 1 s over elements ``gap`` ms apart, so consecutive
    instants share values and the last instant's expansion is extended.)"""
    monkeypatch.setattr(C, "SMALL_WINDOW", limit)
    monkeypatch.setattr(C, "_EXPAND_ROWS", expand)   # stored anchors preferred, or window ones
    monkeypatch.setattr(C, "_CHOOSE_EVERY", every)   # the anchor weighed at every instant, or kept
    monkeypatch.setattr(C, "_EXTEND_VALUES", extend)  # expansions extended from the last one, or made afresh
    grow = C._Compact._window_expansion

    def counting(self, k, oi, pid, end, cw):
        last = self._anchor_memo.get(~k, (None,))[0] == oi and len(cw) >= C._EXTEND_VALUES
        EXTENDED["from last" if last else "fresh"] += 1
        return grow(self, k, oi, pid, end, cw)

    monkeypatch.setattr(C._Compact, "_window_expansion", counting)
    db = _db(knows, made, ages)
    try:
        bw = _window(db, win, slide, gap)
        compact, merged = _pair(db, query, bw)
        for t in (1000, 1000, 2000, 3000, 4000):
            _same(compact, merged, t, query)
    finally:
        db.close()


EXTENDED: Counter = Counter()


def test_window_expansions_were_extended():
    """The property test above reached the extension of the last instant's expansion."""
    assert EXTENDED["from last"] > 10 and EXTENDED["fresh"] > 10, EXTENDED


L6 = (f"SELECT * FROM <urn:jindou:default> WHERE {{ ?post <{EX}made> ?creator . "
      f"?liker <{EX}like> ?post ; <{EX}knows> ?creator ; <{EX}age> ?age . FILTER(?age != \"0\") }}")
L7 = (f"SELECT ?creator (COUNT(*) AS ?n) FROM <urn:jindou:default> WHERE {{ ?photo <{EX}made> ?creator . "
      f"?liker <{EX}like> ?photo . ?creator <{EX}knows> ?friend . ?friend <{EX}knows> ?liker }} "
      f"GROUP BY ?creator")


def _ring():
    """Each node knows the next three: 36 triples."""
    return [(a, (a + k) % N) for a in range(N) for k in (1, 2, 3)]


@pytest.mark.parametrize("text", [L6, L7])
def test_selective_window_anchor_keeps_the_compact_path(text, monkeypatch):
    """Every node has an age: restricting ``knows`` through the ages would take all 36 of
    its triples (over the limit of 20); through the window's likes and posts, a few."""
    monkeypatch.setattr(C, "SMALL_WINDOW", 20)
    db = _db(_ring(), [], ages=True)
    try:
        bw = _window(db, [(1, "made", 6), (5, "like", 1), (3, "made", 2), (5, "like", 3)])
        compact, merged = _pair(db, text, bw)
        for t in (1000, 2000):
            assert compact.compact_rows(QueryContext(db.store.snapshot()), t) is not None
            _same(compact, merged, t, text)
        assert len(compact.evaluate(1000)) > 0
    finally:
        db.close()


def test_absent_predicate_is_resolved_when_a_stream_brings_it(monkeypatch):
    """``like`` is not in the store at the first instant (no anchor values at all); once an
    element interns it, the compact path sees its triples like the merged view does."""
    monkeypatch.setattr(C, "SMALL_WINDOW", 20)
    lines = [f"<{EX}n{a}> <{EX}knows> <{EX}n{b}> .\n" for a, b in _ring()]
    lines += [f"<{EX}n{i}> <{EX}made> <{EX}n{(i + 2) % N}> .\n" for i in range(N)]
    db = Database()
    db.load_data("".join(lines).encode(), "application/n-triples")
    try:
        store = TransientStore("s")
        gid = _ids(db, [f"<{EX}stream>"])[0]
        bw = BoundWindow("s", EX + "stream", gid, Window.time(1000, 1000), store)
        text = (f"SELECT * FROM <urn:jindou:default> WHERE {{ ?liker <{EX}like> ?post . "
                f"?liker <{EX}knows> ?creator . ?post <{EX}made> ?creator }}")
        compact, merged = _pair(db, text, bw)
        _same(compact, merged, 1000, text)
        ids = _ids(db, [f"<{EX}n1>", f"<{EX}like>", f"<{EX}n0>"])
        store.append_rows(np.array([ids], dtype=np.int64), np.array([1500]))
        _same(compact, merged, 2000, text)
        assert len(compact.evaluate(2000)) > 0
        assert compact.compact_rows(QueryContext(db.store.snapshot()), 2000) is not None
    finally:
        db.close()


@pytest.mark.parametrize("wide", [False, True])
def test_restriction_is_tried_again_after_a_burst(monkeypatch, wide):
    """A burst whose restriction exceeds the limit sends the query to the merged view for a
    while (not for good): once the windows are small again, the compact path comes back.
    With the join core probing the stored ``knows`` relation (``wide``,
    :mod:`engine.stream.stored_relation`) no restriction is made and the burst stays on it."""
    monkeypatch.setattr(C, "SMALL_WINDOW", 20)
    db = _db(_ring(), [], ages=False)
    try:
        store = TransientStore("s")
        like, *nodes = _ids(db, [f"<{EX}like>"] + [f"<{EX}n{i}>" for i in range(N)])
        burst = [[nodes[i], like, nodes[(i + 5) % N]] for i in range(N)]   # every node likes: 36 > 20
        calm = [[nodes[k % N], like, nodes[(k + 4) % N]] for k in range(1, 40)]
        store.append_rows(np.array(burst + burst, dtype=np.int64), np.repeat([500, 1500], N))
        store.append_rows(np.array(calm, dtype=np.int64), np.arange(1, 40) * 1000 + 500)
        gid = _ids(db, [f"<{EX}stream>"])[0]
        bw = BoundWindow("s", EX + "stream", gid, Window.time(1000, 1000), store)
        text = f"SELECT * FROM <urn:jindou:default> WHERE {{ ?liker <{EX}like> ?post . ?liker <{EX}knows> ?c }}"
        compact, merged = _pair(db, text, bw)
        compact._tiny_wide = wide
        used = []
        for t in range(1000, 40001, 1000):
            _same(compact, merged, t, text)
            used.append(compact._compact.defer_failures == 0 and compact._compact.defer_skip == 0)
        if wide:
            assert all(used)
        else:
            assert not any(used[:10]) and used[-1]   # two failures, then 8 instants without trying
    finally:
        db.close()
