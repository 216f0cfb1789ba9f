"""LIMIT without ORDER BY by chunks of a splitting variable (engine/exec/limit_chunks.py):
on random graphs, with chunks small enough that answers span many of them, every answer
is LIMIT rows (or all there are past OFFSET) of the whole answer as a multiset (the whole
answer from pyoxigraph and from Jindou without the LIMIT), and the chunked path is taken
(a spy) for the chains it covers and not for others."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.database import Database
from engine.exec import limit_chunks as LC
from tests.test_engine_classes_oracle import _jindou_rows, _norm, _ox_rows, both_stores, result_rows


def _j(db, q):
    """Rows as sorted (variable, term) tuples (SELECT * orders its columns per engine)."""
    names = [v for v in db.query(q).vars]
    return [tuple(sorted(zip(names, r, strict=True))) for r in _norm(_jindou_rows(db, q))]


def _o(ox, q):
    names = [v.value for v in ox.query(q).variables]
    return [tuple(sorted(zip(names, r, strict=True))) for r in _norm(_ox_rows(ox, q))]

pyoxigraph = pytest.importorskip("pyoxigraph")

PREDS = [f"<urn:p{i}>" for i in range(5)]


def _graph(seed: int, n: int = 5000) -> str:
    rng = np.random.default_rng(seed)
    lines = set()
    while len(lines) < n:
        s = f"<urn:n{int(rng.integers(0, 400))}>"
        k = int(rng.integers(0, 10))
        if k == 0:
            lines.add(f"{s} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <urn:C{int(rng.integers(0, 3))}> .\n")
            continue
        p = PREDS[int(rng.integers(0, len(PREDS)))]
        o = (f'"{int(rng.integers(0, 50))}"^^<http://www.w3.org/2001/XMLSchema#integer>' if k < 4
             else f"<urn:n{int(rng.integers(0, 400))}>")
        lines.add(f"{s} {p} {o} .\n")
    return "".join(sorted(lines))


@pytest.fixture(scope="module", params=[11, 12])
def stores(request):
    return both_stores(_graph(request.param))


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(LC, "CHUNK_MIN_ROWS", 16)
    monkeypatch.setattr(LC, "FIRST_CHUNK", 4)


#: (pattern, whether the chunked path covers it)
BODIES = [
    ("?s ?p ?o", True),
    ("?s <urn:p1> ?o", True),
    ("?s a <urn:C1>", True),
    ("?s a <urn:C1> . ?s <urn:p2> ?o", True),
    ("?s <urn:p1> ?x . ?x <urn:p2> ?o", True),
    ("?s <urn:p1> ?o FILTER(isLiteral(?o) && ?o > 20)", True),
    ("?s <urn:p3> ?o OPTIONAL { ?o <urn:p4> ?x }", True),
    ("?s <urn:p3> ?o OPTIONAL { ?o <urn:p4> ?x } FILTER(!BOUND(?x))", True),
    ("?s <urn:p0> ?o BIND(STR(?o) AS ?x)", True),
    ("?s ?p ?o FILTER(?p != <urn:p0>)", True),
    ("?s <urn:p0> ?o MINUS { ?s a <urn:C0> }", True),
    ("{ ?s <urn:p0> ?o } UNION { ?s <urn:p1> ?o }", True),
    # pieces: UNION branches in turn, right sides kept (wave 2n)
    ("{ ?s a <urn:C0> } UNION { ?s a <urn:C1> }", True),
    ("{ ?s <urn:p0> ?o } UNION { ?s <urn:p0> ?o }", True),
    ("{ { ?s <urn:p0> ?o } UNION { ?s <urn:p2> ?o } } UNION { ?s a ?o }", True),
    ("{ ?s <urn:p3> ?o } UNION { ?s <urn:p4> ?o . ?o <urn:p1> ?x } FILTER(?s != <urn:n3>)", True),
    ("{ SELECT ?s WHERE { ?s <urn:p1> ?x } } ?s <urn:p2> ?o", True),
    ("{ SELECT DISTINCT ?s WHERE { ?s <urn:p1> ?x } } ?s <urn:p2> ?o", False),
    ("?s <urn:p1> ?o OPTIONAL { { ?o <urn:p2> ?x } UNION { ?o <urn:p3> ?x } }", True),
    ("?s <urn:p3> ?o MINUS { { ?o <urn:p4> ?x } UNION { ?s a <urn:C2> } }", True),
    ("?s <urn:p1> ?o FILTER(?o = <urn:n5> || ?o = <urn:n6>)", True),
    ("?s ?p ?o FILTER(?p = <urn:p2>)", True),
    ("{ ?s ?p ?o FILTER(?o IN (<urn:n1>, <urn:n2>)) } UNION { ?s <urn:p1> ?o }", True),
]


@pytest.mark.parametrize("body,covered", BODIES)
@pytest.mark.parametrize("limit,offset", [(1, 0), (7, 0), (50, 0), (5, 30), (100000, 0), (3, 100000)])
def test_limit_rows_are_rows_of_the_whole_answer(stores, body, covered, limit, offset):
    db, ox = stores
    whole = Counter(_o(ox, f"SELECT * WHERE {{ {body} }}"))
    assert whole == Counter(_j(db, f"SELECT * WHERE {{ {body} }}"))
    before = LC.TAKEN[0]
    got = _j(db, f"SELECT * WHERE {{ {body} }} LIMIT {limit} OFFSET {offset}")
    assert len(got) == max(0, min(limit, sum(whole.values()) - offset))
    assert not Counter(got) - whole  # a sub-multiset of the whole answer
    if not covered:
        assert LC.TAKEN[0] == before


#: chains the general evaluator answers (the fast program takes plain BGPs first)
CHUNKED = [
    "SELECT * WHERE { ?s ?p ?o } LIMIT 5",
    "SELECT ?s WHERE { ?s <urn:p3> ?o OPTIONAL { ?o <urn:p4> ?x } FILTER(!BOUND(?x)) } LIMIT 5",
    "SELECT ?s ?x WHERE { ?s <urn:p0> ?o BIND(STR(?o) AS ?x) } LIMIT 5",
    "SELECT ?s WHERE { ?s a <urn:C1> OPTIONAL { ?s <urn:p2> ?o } } LIMIT 5 OFFSET 2",
    "SELECT ?s WHERE { { ?s <urn:p1> ?o OPTIONAL { ?o <urn:p2> ?x } } UNION { ?s a <urn:C1> } } LIMIT 5",
    "SELECT ?s ?o WHERE { { SELECT ?s WHERE { ?s <urn:p1> ?x } } ?s <urn:p2> ?o } LIMIT 5",
    "SELECT ?s WHERE { ?s <urn:p0> ?o MINUS { ?s a <urn:C0> } } LIMIT 5",
]


@pytest.mark.parametrize("q", CHUNKED)
def test_the_chunked_path_is_taken(stores, q):
    db, _ = stores
    before = LC.TAKEN[0]
    assert len(db.query(q)) == 5
    assert LC.TAKEN[0] == before + 1


def test_a_union_stops_after_the_branch_that_fills_the_limit(stores, monkeypatch):
    """The right branch is not evaluated when the left one gives LIMIT rows, and a kept
    right side (MINUS) is evaluated once for all chunks."""
    db, _ = stores
    from engine.exec import evaluate as E  # noqa: PLC0415

    seen = []
    orig = E.Evaluator._BGP

    def spy(self, node, seed):
        seen.append(tuple(str(t.o) for t in node.triples))
        return orig(self, node, seed)

    monkeypatch.setattr(E.Evaluator, "_BGP", spy)
    assert len(db.query("SELECT ?s WHERE { { ?s <urn:p0> ?o } UNION { ?s <urn:p4> <urn:n9> } } LIMIT 3")) == 3
    assert seen and not any("urn:n9" in "".join(t) for t in seen), seen
    seen.clear()
    assert len(db.query("SELECT ?s WHERE { ?s <urn:p0> ?o MINUS { ?s <urn:p4> <urn:n8> } } LIMIT 60")) == 60
    assert sum("urn:n8" in "".join(t) for t in seen) == 1, seen


def test_order_by_is_not_chunked(stores):
    db, _ = stores
    before = LC.TAKEN[0]
    db.query("SELECT ?s ?o WHERE { ?s <urn:p1> ?o } ORDER BY ?o LIMIT 3")
    db.query("SELECT ?o WHERE { ?s <urn:p1> ?o } ORDER BY ?o LIMIT 3")
    assert LC.TAKEN[0] == before


@pytest.mark.parametrize("body", ["?s <urn:p1> ?o", "?s ?p ?o", "?s a ?o", "?s <urn:p3> ?x OPTIONAL { ?x <urn:p4> ?o }",
                                  "?s <urn:p0> ?x . ?x <urn:p2> ?o",
                                  "{ ?s <urn:p1> ?o } UNION { ?o <urn:p2> ?s }"])
@pytest.mark.parametrize("limit,offset", [(1, 0), (6, 0), (40, 3), (100000, 0)])
def test_distinct_limit_rows_are_distinct_rows_of_the_whole_answer(stores, body, limit, offset):
    db, ox = stores
    whole = set(_o(ox, f"SELECT DISTINCT ?o WHERE {{ {body} }}"))
    before = LC.TAKEN[0]
    got = _j(db, f"SELECT DISTINCT ?o WHERE {{ {body} }} LIMIT {limit} OFFSET {offset}")
    assert LC.TAKEN[0] > before
    assert len(got) == len(set(got)) == max(0, min(limit, len(whole) - offset))
    assert set(got) <= whole


def test_few_values_keep_the_whole_evaluation(stores, monkeypatch):
    db, _ = stores
    monkeypatch.setattr(LC, "CHUNK_MIN_ROWS", 1 << 30)
    before = LC.TAKEN[0]
    assert len(db.query("SELECT * WHERE { ?s ?p ?o } LIMIT 3")) == 3
    assert LC.TAKEN[0] == before


def _quads_db(seed: int) -> tuple[Database, object]:
    """The random graph split over two named graphs (the default graph empty), in both engines."""
    lines = _graph(seed, 1200).splitlines()
    return both_stores("".join(f"{ln[:-1]}<urn:g{i % 2}> .\n" for i, ln in enumerate(lines)), quads=True)


@pytest.mark.parametrize("defaults,named", [((), ("urn:g0",)), (("urn:g0", "urn:g1"), ()), (("urn:nowhere",), ()),
                                           (("urn:g1",), ("urn:g0",))])
@pytest.mark.parametrize("body", ["?s ?p ?o", "?s <urn:p1> ?o", "?s a <urn:C1> . ?s <urn:p2> ?o"])
def test_limit_over_a_request_dataset(defaults, named, body):
    """A request's dataset (default-graph-uri / named-graph-uri) makes the default graph an
    empty graph or the merge of several: the chunks split it as any other graph (the fuzz
    test found `?s ?p ?o` over an empty default graph failing)."""
    db, ox = _quads_db(5)
    q = f"SELECT * WHERE {{ {body} }}"
    whole = Counter(_o(ox, q if not defaults else q.replace("SELECT *", "SELECT * " + " ".join(
        f"FROM <{g}>" for g in defaults))))
    for limit in (1, 9, 100000):
        rows = db.query(f"{q} LIMIT {limit}", default_graph_uris=defaults, named_graph_uris=named)
        names = list(rows.vars)
        got = [tuple(sorted(zip(names, r, strict=True))) for r in _norm(result_rows(rows))]
        assert len(got) == min(limit, sum(whole.values()))
        assert not Counter(got) - whole


def _named_db(seed: int, graphs: int = 5) -> tuple[Database, object]:
    """The random graph spread over several named graphs and the default graph."""
    lines = _graph(seed, 1500).splitlines()
    return both_stores("".join(f"{ln}\n" if i % (graphs + 1) == graphs else f"{ln[:-1]}<urn:g{i % (graphs + 1)}> .\n"
                               for i, ln in enumerate(lines)), quads=True)


@pytest.mark.parametrize("body", [
    "GRAPH ?g { ?s ?p ?o }",
    "GRAPH ?g { ?s <urn:p1> ?o }",
    "GRAPH ?g { ?s <urn:p1> ?o } ?o <urn:p2> ?x",
    "GRAPH ?g { ?s a <urn:C1> OPTIONAL { ?s <urn:p2> ?o } }",
    "{ GRAPH ?g { ?s <urn:p3> ?o } } UNION { ?s <urn:p4> ?o }",
    "GRAPH ?g { ?s <urn:p0> ?o } MINUS { ?s a <urn:C0> }",
])
@pytest.mark.parametrize("limit,offset", [(1, 0), (9, 0), (40, 25), (100000, 0)])
def test_limit_over_graph_pieces(body, limit, offset):
    """A leftmost GRAPH ?g: one piece per named graph, in turn (and the pieces path taken)."""
    db, ox = _named_db(3)
    whole = Counter(_o(ox, f"SELECT * WHERE {{ {body} }}"))
    assert whole == Counter(_j(db, f"SELECT * WHERE {{ {body} }}"))
    before = LC.TAKEN[0]
    got = _j(db, f"SELECT * WHERE {{ {body} }} LIMIT {limit} OFFSET {offset}")
    assert len(got) == max(0, min(limit, sum(whole.values()) - offset))
    assert not Counter(got) - whole
    assert LC.TAKEN[0] > before


def test_graph_pieces_stop_at_the_limit(monkeypatch):
    """Only the named graphs up to the one that fills the LIMIT are evaluated."""
    db, _ = _named_db(3)
    from engine.exec import evaluate as E  # noqa: PLC0415

    graphs = []
    orig = E.Evaluator._BGP

    def spy(self, node, seed):
        graphs.append(self.graph_key)
        return orig(self, node, seed)

    monkeypatch.setattr(E.Evaluator, "_BGP", spy)
    assert len(db.query("SELECT * WHERE { GRAPH ?g { ?s ?p ?o } } LIMIT 3")) == 3
    assert len(set(graphs)) == 1, graphs
