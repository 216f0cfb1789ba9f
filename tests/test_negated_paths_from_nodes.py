"""Negated property sets from given start nodes (engine/exec/paths.py
``PathEvaluator._negated_from``): each other predicate's adjacency expanded from the
starts instead of a scan of every triple. Answers equal pyoxigraph's on random graphs
(forward, inverse and mixed sets, from a constant subject or object, after a join, inside
sequences and closures, duplicates kept), equal the scan's, and the scan is not taken."""

from __future__ import annotations

import numpy as np
import pytest

from engine.exec import paths as P
from engine.kv.graph import GraphIndex
from tests.test_engine_classes_oracle import _jindou_rows, _norm, _ox_rows, both_stores

pyoxigraph = pytest.importorskip("pyoxigraph")

PREDS = [f"<urn:p{i}>" for i in range(6)]


def _graph(seed: int, n: int = 4000) -> str:
    rng = np.random.default_rng(seed)
    lines = set()
    while len(lines) < n:
        s = f"<urn:n{int(rng.integers(0, 120))}>"
        p = PREDS[int(rng.integers(0, len(PREDS)))]
        k = int(rng.integers(0, 10))
        o = f'"v{int(rng.integers(0, 9))}"' if k == 0 else f"<urn:n{int(rng.integers(0, 120))}>"
        lines.add(f"{s} {p} {o} .\n")
    return "".join(sorted(lines))


@pytest.fixture(scope="module", params=[7, 8])
def stores(request):
    return both_stores(_graph(request.param))


QUERIES = [
    "SELECT ?o WHERE { <urn:n3> !<urn:p0> ?o }",
    "SELECT ?o WHERE { <urn:n3> !(<urn:p0>|<urn:p1>|<urn:p2>) ?o }",
    "SELECT ?o WHERE { <urn:n5> !(^<urn:p1>) ?o }",
    "SELECT ?o WHERE { <urn:n5> !(<urn:p1>|^<urn:p2>) ?o }",
    "SELECT ?s WHERE { ?s !(<urn:p3>|<urn:p4>) <urn:n7> }",
    "SELECT ?s WHERE { ?s !(^<urn:p3>) <urn:n7> }",
    "SELECT ?o WHERE { <urn:n9> !<urn:nothere> ?o }",
    "SELECT ?x ?o WHERE { <urn:n1> <urn:p2> ?x . ?x !(<urn:p2>|<urn:p5>) ?o }",
    "SELECT ?o WHERE { <urn:n2> !<urn:p0>/!(^<urn:p1>) ?o }",
    "SELECT ?o WHERE { <urn:n4> (!(<urn:p0>|<urn:p1>|<urn:p2>|<urn:p3>))+ ?o }",
    "SELECT ?s WHERE { ?s (!(<urn:p4>|^<urn:p5>))* <urn:n6> }",
    "ASK { <urn:n3> !(<urn:p0>|<urn:p1>) <urn:n4> }",
]


def _bag(rows):
    return sorted(_norm(rows), key=repr)


#: a set of both directions is the spec's alternative of its two halves, a multiset union
#: (18.2.2.4, 18.5): Oxigraph answers it without duplicates, so it is compared there with
#: the UNION of the halves
MIXED = {
    "SELECT ?o WHERE { <urn:n5> !(<urn:p1>|^<urn:p2>) ?o }":
        "SELECT ?o WHERE { { <urn:n5> !<urn:p1> ?o } UNION { <urn:n5> !^<urn:p2> ?o } }",
}


@pytest.mark.parametrize("q", QUERIES)
def test_negated_sets_from_nodes_equal_pyoxigraph(stores, q):
    db, ox = stores
    if q.startswith("ASK"):
        assert db.query(q).boolean == bool(ox.query(q))
        return
    assert _bag(_jindou_rows(db, q)) == _bag(_ox_rows(ox, MIXED.get(q, q))), q


@pytest.mark.parametrize("q", [q for q in QUERIES if not q.startswith("ASK")])
def test_negated_sets_from_nodes_equal_the_scan(stores, q, monkeypatch):
    db, _ = stores
    got = _bag(_jindou_rows(db, q))
    monkeypatch.setattr(P, "NEGATED_EXPAND_TRIPLES", 1 << 40)  # every graph "too many predicates": the scan
    assert _bag(_jindou_rows(db, q + " ")) == got


def test_the_scan_is_not_taken_from_a_constant(stores, monkeypatch):
    db, _ = stores
    calls = []
    real = P.PathEvaluator._negated_from

    def spy(self, path, starts):
        got = real(self, path, starts)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(P.PathEvaluator, "_negated_from", spy)

    def no_scan(self):
        raise AssertionError("every triple scanned")

    monkeypatch.setattr(GraphIndex, "scan_all", no_scan)
    rows = _jindou_rows(db, "SELECT ?o WHERE { <urn:n3> !(<urn:p0>|^<urn:p1>) ?o }")
    assert rows and calls and all(calls)
