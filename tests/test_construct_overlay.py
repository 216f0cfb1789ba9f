"""A small CONSTRUCT graph holding terms the query computed (a template IRI or literal the
store lacks, a BIND value) reads its store terms' parts from the store dictionary's kept
term cache (engine/exec/graph_writers.py ``_overlay``): the graphs equal pyoxigraph's in
every graph format, on the first call and the later ones, and the later calls decode only
the computed terms."""

from __future__ import annotations

import pytest

from bench.lubm import department_lines
from engine.exec import graph_writers as GW
from engine.exec import serialize as ser
from engine.exec.context import LOCAL_BASE
from tests.test_engine_classes_oracle import both_stores

pyoxigraph = pytest.importorskip("pyoxigraph")

UB = "PREFIX ub: <http://swat.cse.lehigh.edu/onto/univ-bench.owl#>\n"
QUERIES = [
    "CONSTRUCT { ?d <urn:hasHead> ?x } WHERE { ?x ub:headOf ?d }",
    'CONSTRUCT { ?x <urn:label> "not in the store" . ?x ub:name ?n } WHERE { ?x ub:worksFor ?d ; ub:name ?n } ORDER BY ?x LIMIT 40',
    "CONSTRUCT { ?c <urn:taughtBy> ?p . ?c a ub:Course } WHERE { ?p ub:teacherOf ?c . ?c a ub:Course }",
    "CONSTRUCT { ?s <urn:twice> ?b } WHERE { ?s ub:age ?a BIND(?a * 2 AS ?b) FILTER(?a > 66) }",
    "CONSTRUCT { ?s <urn:in> ?d . ?d <urn:t> _:b } WHERE { ?s ub:headOf ?d }",
]
FORMATS = [("application/n-triples", pyoxigraph.RdfFormat.N_TRIPLES),
           ("text/turtle", pyoxigraph.RdfFormat.TURTLE),
           ("application/ld+json", pyoxigraph.RdfFormat.JSON_LD),
           ("application/rdf+xml", pyoxigraph.RdfFormat.RDF_XML)]


@pytest.fixture(scope="module")
def stores():
    return both_stores("".join(line for d in range(3) for line in department_lines(0, 0, d)))


def _triples(items) -> list[str]:
    out = []
    for t in items:
        s, p, o = t.subject, t.predicate, t.object
        out.append(" ".join("_:" if isinstance(x, pyoxigraph.BlankNode) else str(x) for x in (s, p, o)))
    return sorted(out)


@pytest.mark.parametrize("q", QUERIES)
def test_graphs_equal_pyoxigraph(stores, q):
    db, ox = stores
    want = _triples(ox.query(UB + q))
    assert len(want) >= 3
    for _ in range(3):  # (the first call fills the kept cache, the later ones read it)
        for mt, fmt in FORMATS:
            body = ser.serialize(db.query(UB + q), mt)
            assert _triples(pyoxigraph.parse(body, fmt)) == want, mt


def test_later_calls_decode_only_the_computed_terms(stores, monkeypatch):
    db, _ = stores
    q = UB + "CONSTRUCT { ?d <urn:headedBy> ?x . ?x <urn:note> \"x\" } WHERE { ?x ub:headOf ?d . ?x ub:name ?n }"
    ser.serialize(db.query(q), "application/n-triples")
    asked = []
    real = GW.store_keys

    def spy(terms, ids):
        asked.extend(ids)
        return real(terms, ids)

    made = []
    real_nt = GW.TermCache.nt_of

    def nt_spy(self, i):
        made.append(i)
        return real_nt(self, i)

    monkeypatch.setattr(GW, "store_keys", spy)
    monkeypatch.setattr(GW.TermCache, "nt_of", nt_spy)
    before = GW.OVERLAYS
    ser.serialize(db.query(q), "application/n-triples")
    assert GW.OVERLAYS > before  # the overlay is taken
    assert asked and all(i >= LOCAL_BASE for i in asked), asked  # no store term decoded again
    assert made and all(i >= LOCAL_BASE for i in made), made  # nor written as N-Triples again
