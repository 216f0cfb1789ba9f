"""The small-window path of continuous queries equals the full-index path.

* :class:`~engine.stream.window_graph.SmallGraph` answers every GraphReader call like the
  :class:`~engine.kv.graph.GraphIndex` of the same triples (random triples, random calls);
* random queries (BGPs with constants, variable predicates, OPTIONAL, UNION, FILTER) over a
  random window give the same solutions over either index;
* the evaluator's SPARQL JSON writer (:class:`~engine.stream.continuous._JsonTerms`) writes
  the bytes :func:`~engine.exec.serialize.sparql_json` writes, also across instants (its
  term cache) and with unbound cells;
* plans kept across instants give the same answers when a constant appears only later.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query
from engine.exec.serialize import sparql_json
from engine.kv.graph import empty_graph
from engine.sparql.parser import parse_query
from engine.stream.continuous import _InstantPlans, _JsonTerms
from engine.stream.window_graph import SmallGraph, window_index

EX = "http://ex.org/"
N_NODES, N_PREDS = 8, 4
WINDOW = '"w"'


@pytest.fixture(scope="module")
def db():
    """A store whose dictionary holds the vocabulary (nodes, predicates, literals)."""
    d = Database()
    lines = [f"<{EX}n{i}> <{EX}p{j}> \"{i * j}\" .\n" for i in range(N_NODES) for j in range(N_PREDS)]
    lines += [f"<{EX}n{i}> <{EX}label> \"n{i}\"@en .\n" for i in range(N_NODES)]
    d.load_data("".join(lines).encode(), "application/n-triples")
    yield d
    d.close()


def _vocab(db):
    dic = db.store.dictionary
    nodes = [int(dic.lookup(f"<{EX}n{i}>")) for i in range(N_NODES)]
    preds = [int(dic.lookup(f"<{EX}p{j}>")) for j in range(N_PREDS)]
    lits = [int(dic.lookup(f'"{v}"')) for v in (0, 1, 2, 3)]
    assert min(nodes + preds + lits) >= 0
    return nodes, preds, lits


# ---------------------------------------------------------------- the index calls

rows_st = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 5), st.integers(0, 12)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(rows=rows_st, probes=st.lists(st.integers(-1, 14), max_size=25), data=st.data())
def test_small_graph_answers_like_graph_index(rows, probes, data):
    # ids near 2**21 take the general sort (below it, (p, s, o) is packed into one int64)
    base = data.draw(st.sampled_from([0, (1 << 21) - 6]))
    spo = np.array(rows, dtype=np.int64).reshape(-1, 3) + base
    small = SmallGraph(spo)
    full = empty_graph(1).apply(None, spo) if len(spo) else None
    if full is None:
        assert small.n_triples == 0 and len(small.predicates()) == 0
        return
    assert small.n_triples == full.n_triples == len(small)
    assert small.predicates().tolist() == full.predicates().tolist()
    vids = np.array(probes, dtype=np.int64) + base
    for pid in range(base - 1, base + 7):
        assert tuple(small.stats(pid)) == tuple(full.stats(pid))
        for d in (0, 1):
            a, b = small.expand(pid, d, vids), full.expand(pid, d, vids)
            assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
            assert a[0].dtype == b[0].dtype == np.int64 and a[1].dtype == np.int64
            assert small.index(pid, d).tolist() == full.index(pid, d).tolist()
            for v in vids[:6].tolist():  # one vertex: the slice fast path
                a, b = small.expand(pid, d, np.array([v], dtype=np.int64)), full.expand(pid, d, np.array([v]))
                assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
                assert a[0].dtype == a[1].dtype == np.int64
        s = np.array(data.draw(st.lists(st.integers(-1, 13), min_size=len(probes), max_size=len(probes))),
                     dtype=np.int64) + base
        assert small.contains(pid, s, vids).tolist() == full.contains(pid, s, vids).tolist()
        assert [x.tolist() for x in small.scan(pid)] == [x.tolist() for x in full.scan(pid)]
        for d in (0, 1):
            fs, ff = small.local_lookup(pid, d), full.local_lookup(pid, d)
            assert [fs(v).tolist() for v in vids.tolist()] == [ff(v).tolist() for v in vids.tolist()]
    assert [x.tolist() for x in small.scan_all()] == [x.tolist() for x in full.scan_all()]
    assert small.vertices().tolist() == full.vertices().tolist()


def test_small_graph_reload_keeps_lookups():
    """A lookup function handed out before :meth:`SmallGraph.load` answers for the new triples."""
    g = SmallGraph(np.array([[1, 2, 3], [1, 2, 4]]))
    f = g.local_lookup(2, 0)
    assert f(1).tolist() == [3, 4]
    g.load(np.array([[1, 2, 5], [7, 2, 3]]))
    assert f(1).tolist() == [5] and f(7).tolist() == [3] and g.local_lookup(2, 0) is f
    assert g.local_lookup(2, 1)(3).tolist() == [7]
    g.load(np.zeros((0, 3), dtype=np.int64))
    assert f(1).tolist() == [] and g.n_triples == 0


def test_window_index_threshold():
    spo = np.array([[1, 2, 3], [1, 2, 3], [4, 2, 3]], dtype=np.int64)
    assert isinstance(window_index(spo), SmallGraph)
    assert window_index(spo).n_triples == 2
    assert not isinstance(window_index(spo, small=2), SmallGraph)
    assert window_index(spo[:0]).n_triples == 0
    with pytest.raises(ValueError):
        SmallGraph(np.array([[-1, 2, 3]]))


# ---------------------------------------------------------------- random queries


def _term(draw, kind: str, vars_: list[str]):
    if draw(st.booleans()):
        return "?" + draw(st.sampled_from(vars_))
    if kind == "p":
        return f"<{EX}p{draw(st.integers(0, N_PREDS))}>"  # p<N_PREDS> is absent from the store
    if kind == "o" and draw(st.integers(0, 3)) == 0:
        return f'"{draw(st.integers(0, 4))}"'
    return f"<{EX}n{draw(st.integers(0, N_NODES - 1))}>"


@st.composite
def queries(draw):
    vars_ = ["a", "b", "c", "d"]

    def bgp(k):
        return " ".join(f"{_term(draw, 's', vars_)} {_term(draw, 'p', vars_)} {_term(draw, 'o', vars_)} ."
                        for _ in range(k))

    body = bgp(draw(st.integers(1, 3)))
    shape = draw(st.sampled_from(["plain", "optional", "union", "filter"]))
    if shape == "optional":
        body += " OPTIONAL { " + bgp(draw(st.integers(1, 2))) + " }"
    elif shape == "union":
        body = "{ " + body + " } UNION { " + bgp(draw(st.integers(1, 2))) + " }"
    elif shape == "filter":
        body += f" FILTER(?a != <{EX}n{draw(st.integers(0, N_NODES - 1))}>)"
    return f"SELECT * WHERE {{ {body} }}"


def _window_rows(draw, nodes, preds, lits):
    n = draw(st.integers(0, 40))
    objs = nodes + lits
    return np.array([[draw(st.sampled_from(nodes)), draw(st.sampled_from(preds)), draw(st.sampled_from(objs))]
                     for _ in range(n)], dtype=np.int64).reshape(-1, 3)


def _solutions(db, q, graph, plans=None):
    ctx = QueryContext(db.store.snapshot(), plan_cache=plans)
    res = evaluate_query(q, ctx, DatasetView(graph, {}, ("t",)))
    keys = [ctx.keys(c) for c in res.columns]
    rows = [tuple(k or "" for k in r) for r in zip(*keys, strict=True)] if keys else [()] * len(res)
    return sorted(rows), res


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_small_window_path_equals_full_index(db, data):
    nodes, preds, lits = _vocab(db)
    spo = _window_rows(data.draw, nodes, preds, lits)
    text = data.draw(queries())
    q = parse_query(text)
    small = window_index(spo)
    full = window_index(spo, small=0)
    assert len(spo) == 0 or not isinstance(full, SmallGraph)
    got, res = _solutions(db, q, small)
    want, _ = _solutions(db, q, full)
    assert got == want, text
    # plans kept across instants (a second window, same plan cache) answer like fresh ones
    plans = _InstantPlans()
    _solutions(db, q, small, plans)
    spo2 = _window_rows(data.draw, nodes, preds, lits)
    assert _solutions(db, q, window_index(spo2), plans)[0] == _solutions(db, q, window_index(spo2, small=0))[0]
    # the event JSON is byte for byte what sparql_json writes, first and second time (term cache)
    jt = _JsonTerms()
    extra = b',"window":{"start":0,"end":1}'
    assert jt.select(res, extra) == sparql_json(res, extra)
    assert jt.select(res, extra) == sparql_json(res, extra)


def test_json_writer_large_and_unbound(db):
    nodes, preds, lits = _vocab(db)
    rng = np.random.default_rng(3)
    spo = np.stack([rng.choice(nodes, 200), rng.choice(preds, 200), rng.choice(nodes + lits, 200)], axis=1)
    jt = _JsonTerms()
    for text in ("SELECT * WHERE { ?a ?p ?b . ?b ?q ?c }",
                 f"SELECT ?a ?x ?l WHERE {{ ?a ?p ?b OPTIONAL {{ ?a <{EX}label> ?l }} "
                 f"OPTIONAL {{ ?b <{EX}p9> ?x }} }}",
                 f"SELECT ?a ?l WHERE {{ ?a ?p ?b OPTIONAL {{ ?b <{EX}p0> ?l }} }}"):
        q = parse_query(text)
        for g in (window_index(spo), window_index(spo[:30])):
            _, res = _solutions(db, q, g)
            assert len(res) > 0
            assert jt.select(res, b"") == sparql_json(res)


def test_plan_cache_forgets_absent_constants(db):
    """A plan that found a constant absent is not kept: the constant may arrive later."""
    plans = _InstantPlans()
    q = parse_query(f"SELECT ?a WHERE {{ ?a <{EX}later> ?b }}")
    nodes, preds, _ = _vocab(db)
    assert _solutions(db, q, window_index(np.array([[nodes[0], preds[0], nodes[1]]])), plans)[0] == []
    assert all(k[-1] == "small" and v[1] is None for k, v in plans.items())  # no BgpPlan kept
    db.load_data(f"<{EX}x> <{EX}later> <{EX}y> .\n".encode(), "application/n-triples")
    pid = int(db.store.dictionary.lookup(f"<{EX}later>"))
    got = _solutions(db, q, window_index(np.array([[nodes[0], pid, nodes[1]]])), plans)[0]
    assert got == [(f"<{EX}n0>",)]
    plans.fresh(10, 1)
    assert plans.size == 10
    plans["k"] = None  # not a plan: not kept
    assert "k" not in plans


# ---------------------------------------------------------------- the compact dataset of an instant


@st.composite
def static_queries(draw):
    """Queries over a window joined with the stored graph: constant predicates (the compact
    path) and, now and then, a shape it must leave to the merged path."""
    vars_ = ["a", "b", "c"]

    def tp():
        s = _term(draw, "s", vars_)
        p = f"<{EX}p{draw(st.integers(0, N_PREDS))}>" if draw(st.integers(0, 5)) else "?p"
        return f"{s} {p} {_term(draw, 'o', vars_)} ."

    body = " ".join(tp() for _ in range(draw(st.integers(1, 3))))
    shape = draw(st.sampled_from(["plain", "optional", "filter", "exists", "limit", "path", "group"]))
    head = "SELECT *"
    tail = ""
    if shape == "optional":
        body += " OPTIONAL { " + tp() + " }"
    elif shape == "filter":
        body += " FILTER(?a != ?b)"
    elif shape == "exists":
        body += " FILTER NOT EXISTS { " + tp() + " }"
    elif shape == "limit":
        tail = " ORDER BY ?a ?b ?c LIMIT 3"
    elif shape == "path":
        body += f" ?a <{EX}p0>+ ?c ."
    elif shape == "group":
        head, tail = "SELECT ?a (COUNT(*) AS ?n)", " GROUP BY ?a"
    return f"{head} FROM <urn:jindou:default> WHERE {{ {body} }}{tail}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_compact_dataset_equals_merged_view(db, data):
    from engine.stream.continuous import BoundWindow, InstantEvaluator
    from engine.stream.transient import TransientStore
    from engine.stream.windows import Window

    nodes, preds, lits = _vocab(db)
    spo = _window_rows(data.draw, nodes, preds + [preds[0]], lits)
    store = TransientStore("s")
    if len(spo):
        store.append_rows(spo, np.arange(1, len(spo) + 1) * 100)
    iri = EX + "stream"
    gid = int(db.store.dictionary.lookup(f"<{EX}n0>"))  # any id: only GRAPH patterns would read it
    bw = BoundWindow("s", iri, gid, Window.time(2000, 1000), store)
    text = data.draw(static_queries())
    q = parse_query(text)
    compact = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    merged = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    merged._compact.patterns = None
    for t in (1000, 2000, 4000):
        ctx = QueryContext(db.store.snapshot())
        assert (compact.compact_dataset(ctx, t) is not None) == (compact._compact.patterns is not None)
        a, b = compact.evaluate(t), merged.evaluate(t)
        ka = sorted(tuple(x or "" for x in r) for r in zip(*[a.terms.keys(c) for c in a.columns], strict=True))
        kb = sorted(tuple(x or "" for x in r) for r in zip(*[b.terms.keys(c) for c in b.columns], strict=True))
        assert (len(a), ka) == (len(b), kb), text


@st.composite
def wide_queries(draw):
    """Queries with patterns whose both ends are variables (``?obs a ?type``): with a small
    limit, their stored triples are restricted per instant by a pattern sharing a variable."""
    vars_ = ["a", "b", "c"]

    def tp():
        s = "?" + draw(st.sampled_from(vars_)) if draw(st.integers(0, 6)) else _term(draw, "s", vars_)
        o = "?" + draw(st.sampled_from(vars_)) if draw(st.integers(0, 6)) else _term(draw, "o", vars_)
        return f"{s} <{EX}p{draw(st.integers(0, N_PREDS - 1))}> {o} ."

    body = " ".join(tp() for _ in range(draw(st.integers(1, 4))))
    if draw(st.booleans()):  # a selective pattern that can bound the others
        v = draw(st.sampled_from(vars_))
        o = draw(st.sampled_from([f'"{k}"' for k in range(5)] + [f"<{EX}n{k}>" for k in range(N_NODES)]))
        body = f"?{v} <{EX}p{draw(st.integers(0, N_PREDS - 1))}> {o} . " + body
    shape = draw(st.sampled_from(["plain", "plain", "filter", "group", "optional", "exists", "union"]))
    head, tail = "SELECT *", ""
    if shape == "filter":
        body += " FILTER(?a != ?b)"
    elif shape == "group":
        head, tail = "SELECT ?a (COUNT(*) AS ?n)", " GROUP BY ?a"
    elif shape == "optional":
        body += " OPTIONAL { " + tp() + " }"
    elif shape == "exists":
        body += " FILTER EXISTS { " + tp() + " }"
    elif shape == "union":
        body = "{ " + body + " } UNION { " + tp() + " }"
    return f"{head} FROM <urn:jindou:default> WHERE {{ {body} }}{tail}"


def _rows_of(res):
    return sorted(tuple(x or "" for x in r) for r in zip(*[res.terms.keys(c) for c in res.columns], strict=True))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_compact_restricted_stored_rows_equal_merged_view(db, data, monkeypatch):
    """A stored pattern too large for the compact graph, restricted by the values a pattern
    sharing its variable holds at the instant, gives the merged view's solutions."""
    import engine.stream.continuous as C
    from engine.stream.continuous import BoundWindow, InstantEvaluator
    from engine.stream.transient import TransientStore
    from engine.stream.windows import Window

    monkeypatch.setattr(C, "SMALL_WINDOW", data.draw(st.sampled_from([6, 10, 16])))
    nodes, preds, lits = _vocab(db)
    spo = _window_rows(data.draw, nodes, preds, lits)
    store = TransientStore("s")
    if len(spo):
        store.append_rows(spo, np.arange(1, len(spo) + 1) * 100)
    gid = int(db.store.dictionary.lookup(f"<{EX}n0>"))
    bw = BoundWindow("s", EX + "stream", gid, Window.time(1000, 1000), store)
    text = data.draw(wide_queries())
    q = parse_query(text)
    compact = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    merged = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    merged._compact.patterns = None
    for t in (1000, 2000, 4000):
        a, b = compact.evaluate(t), merged.evaluate(t)
        assert (len(a), _rows_of(a)) == (len(b), _rows_of(b)), text


def test_compact_restricts_a_wide_stored_pattern(db, monkeypatch):
    import engine.stream.continuous as C
    from engine.stream.continuous import BoundWindow, InstantEvaluator
    from engine.stream.transient import TransientStore
    from engine.stream.windows import Window

    monkeypatch.setattr(C, "SMALL_WINDOW", 12)
    nodes, preds, lits = _vocab(db)
    spo = np.array([[nodes[1], preds[0], nodes[2]], [nodes[3], preds[0], nodes[2]]], dtype=np.int64)
    store = TransientStore("s")
    store.append_rows(spo, np.array([100, 200]))
    bw = BoundWindow("s", EX + "stream", int(db.store.dictionary.lookup(f"<{EX}n0>")),
                     Window.time(2000, 1000), store)
    # ?a p1 ?x and ?a p2 ?y: 8 stored triples each, 16 > 12: the second is restricted by ?a
    q = parse_query(f"SELECT * FROM <urn:jindou:default> WHERE {{ ?a <{EX}p0> <{EX}n2> . "
                    f"?a <{EX}p1> ?x . ?a <{EX}p2> ?y }}")
    compact = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    merged = InstantEvaluator(db, q, "RSTREAM", [bw], incremental=False)
    merged._compact.patterns = None
    assert compact.compact_dataset(QueryContext(db.store.snapshot()), 1000) is not None
    assert compact._compact._deferred
    a, b = compact.evaluate(1000), merged.evaluate(1000)
    assert len(a) == 2 and _rows_of(a) == _rows_of(b)
