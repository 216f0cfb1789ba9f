"""Variable-predicate steps of the general evaluator through the carried edge index
(``engine.exec.bgp._step_any_p`` over :func:`engine.kv.vertex_preds.expand_edges`):
one-entity lookups with a variable predicate that are not a lone point pattern
(two hops, inverse then out, both ends bound, ``GRAPH ?g``, UNION of both
directions, FILTER), against pyoxigraph and, row for row in order, against the
per-predicate steps (no edge index), across writes that leave the index an
overlay on its base; the row budget holds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.errors import RowBudgetExceeded
from engine.exec import bgp
from engine.kv import vertex_preds
from engine.kv.api import IN, OUT
from engine.plan import point
from tests.test_vertex_preds import answer_spy

pyoxigraph = pytest.importorskip("pyoxigraph")

_N_PREDS = 5


def _iri(kind: str, i: int) -> str:
    return f"<http://x.example/{kind}{i}>"


def _obj(o: int) -> str:
    return _iri("e", o) if o % 4 else f'"l{o}"'


_quad = st.tuples(st.integers(0, 9), st.integers(0, _N_PREDS - 1), st.integers(0, 12), st.sampled_from([None, 1, 2]))


def _data(quads) -> str:
    parts = []
    for s, p, o, g in quads:
        t = f"{_iri('e', s)} {_iri('p', p)} {_obj(o)} ."
        parts.append(t if g is None else f"GRAPH {_iri('g', g)} {{ {t} }}")
    return " ".join(parts)


QUERIES = (
    "SELECT ?p ?o ?q ?x WHERE {{ {e} ?p ?o . ?o ?q ?x }}",
    "SELECT ?s ?p ?q ?x WHERE {{ ?s ?p {e} . ?s ?q ?x }}",
    "SELECT ?g ?p ?o WHERE {{ GRAPH ?g {{ {e} ?p ?o }} }}",
    "SELECT ?g ?s ?p WHERE {{ GRAPH ?g {{ ?s ?p {e} }} }}",
    "SELECT ?a ?p WHERE {{ {e} <http://x.example/p1> ?a . ?a ?p {f} }}",
    "SELECT ?x ?y ?p WHERE {{ ?x <http://x.example/p0> ?y . ?x ?p ?y }}",
    "SELECT ?a ?p ?o WHERE {{ ?a <http://x.example/p2> {f} . {e} ?p ?o }}",
    "SELECT ?p ?q WHERE {{ {e} ?p ?y . ?y ?q ?y }}",
    "SELECT ?p ?x WHERE {{ {{ {e} ?p ?x }} UNION {{ ?x ?p {e} }} }}",
    "SELECT ?p ?o WHERE {{ {e} ?p ?o FILTER(isIRI(?o)) }}",
    "SELECT DISTINCT ?p WHERE {{ {e} ?p ?o . ?o ?p ?z }}",
    "SELECT ?p ?o ?q WHERE {{ {e} ?p ?o OPTIONAL {{ ?o ?q {f} }} }}",
)


def _rows(res):
    return [tuple(r.get(v) for v in res.vars) for r in res.rows()]


def _ox(ox, text):
    r = ox.query(text)
    names = [v.value for v in r.variables]
    return sorted(tuple(None if s[n] is None else str(s[n]) for n in names) for s in r)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(first=st.lists(_quad, min_size=1, max_size=70),
       writes=st.lists(st.tuples(st.lists(_quad, max_size=8), st.lists(_quad, max_size=8)), max_size=3))
def test_variable_predicate_steps_equal_pyoxigraph_and_the_per_predicate_steps(monkeypatch, first, writes):
    monkeypatch.setattr(point, "EDGE_MIN_USES", 1 << 62)  # (the lazy build never runs here)
    monkeypatch.setattr(vertex_preds, "OVERLAY_MIN", 16)  # (small: both overlays and rebuilds happen)
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    fast = Database()
    monkeypatch.setattr(vertex_preds, "EAGER", False)
    slow = Database()  # no edge index: a step per predicate
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    ox = pyoxigraph.Store()
    steps = answer_spy(monkeypatch, bgp, "_step_any_p")
    first = [(1, 0, 4, None), *first]  # (the default graph is never empty: the steps run)
    for w in [(None, first), *writes]:
        for rows, verb in ((w[0], "DELETE"), (w[1], "INSERT")):
            if rows:
                text = f"{verb} DATA {{ {_data(rows)} }}"
                for db in (fast, slow):
                    db.update(text)
                ox.update(text)
        g = fast.store.snapshot().default
        assert vertex_preds.cached_edges(g, OUT) is not None and vertex_preds.cached_edges(g, IN) is not None
        assert vertex_preds.cached_edges(slow.store.snapshot().default, OUT) is None
        for e in range(0, 12, 3):
            for q in QUERIES:
                text = q.format(e=_obj(e or 1), f=_obj((e * 5 + 2) % 13))
                got = fast.query(text)
                assert _rows(got) == _rows(slow.query(text)), text  # same rows, same order
                assert sorted(tuple(None if x is None else x for x in r) for r in _rows(got)) == _ox(ox, text), text
    assert any(steps)


def test_the_row_budget_holds_on_the_edge_index_step(monkeypatch):
    db = Database()
    db.update("INSERT DATA { " + " ".join(f"<http://x/a> <http://x/p{i % 7}> <http://x/o{i}> ." for i in range(50))
              + " " + " ".join(f"<http://x/b{i}> <http://x/q> <http://x/c> ." for i in range(30)) + " }")
    assert vertex_preds.cached_edges(db.store.snapshot().default, OUT) is not None
    text = "SELECT * WHERE { ?b <http://x/q> <http://x/c> . <http://x/a> ?p ?o }"
    assert len(db.query(text).rows()) == 1500
    with pytest.raises(RowBudgetExceeded):
        db.query(text + " # small budget", max_rows=1000)
    gathered = []
    real = vertex_preds._csr_expand
    monkeypatch.setattr(vertex_preds, "_csr_expand", lambda *a: gathered.append(1) or real(*a))
    with pytest.raises(RowBudgetExceeded):  # (refused before the 50 edges are gathered)
        db.query("SELECT * WHERE { <http://x/a> ?p ?o . ?o ?q ?z }", max_rows=20)
    assert gathered == []
    assert len(db.query("SELECT * WHERE { <http://x/a> ?p ?o . ?o ?q ?z } # all").rows()) == 0 and gathered


def test_expand_edges_groups_by_input_row_over_base_and_overlay(monkeypatch):
    """Rows in input order (repeats, absent and out-of-range ids too), each row's
    edges (predicate, neighbour) ascending, from the base CSR and the overlay alike."""
    monkeypatch.setattr(vertex_preds, "EAGER", True)
    from engine.kv.graph import empty_graph

    rng = np.random.default_rng(3)
    base = rng.integers(0, 40, size=(300, 3))
    g0 = empty_graph(2)
    vertex_preds.seed_empty(g0)
    g = g0.apply(None, base)
    g2 = g.apply(base[:20], rng.integers(0, 40, size=(15, 3)))
    assert vertex_preds.cached_edges(g2, OUT).overlay is not None
    s, p, o = g2.scan_all()
    have = set(zip(s.tolist(), p.tolist(), o.tolist(), strict=True))
    vids = np.array([5, 3, 5, -1, 39, 1 << 40, 0, 17], dtype=np.int64)
    for d in (OUT, IN):
        rows, pids, nbrs = vertex_preds.expand_edges(g2, d, vids)
        want = []
        for i, v in enumerate(vids.tolist()):
            es = sorted((pp, (oo if d == OUT else ss)) for ss, pp, oo in have if (ss if d == OUT else oo) == v)
            want += [(i, pp, nb) for pp, nb in es]
        assert list(zip(rows.tolist(), pids.tolist(), nbrs.tolist(), strict=True)) == want
