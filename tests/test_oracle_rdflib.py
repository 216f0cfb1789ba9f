"""Differential tests: Jindou vs an independent engine (pyoxigraph) on the same data.

A small generated dataset (IRIs, integers, language-tagged strings, a couple
of named graphs) is loaded into both; every query's solutions are compared as
multisets of rows of term keys. Hypothesis then generates random BGPs over
random small graphs and compares again. Blank nodes are avoided in the data
so that rows compare exactly.

Every test runs on each topology (``backend``, tests/support/clusters.py):
one process, and a 3-worker cluster (``--workers 3``) read over shared memory
and over Arrow Flight, adaptive and with each step kind forced. A
cluster is started once per module and backend; a dataset replaces the
previous one there through DROP ALL and a load (so deletes on the cluster are
exercised too), where one process gets a fresh ``Database`` per dataset.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

pyoxigraph = pytest.importorskip("pyoxigraph")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from engine.terms import literal_key  # noqa: E402
from tests.support.clusters import BACKENDS, close_database, open_database  # noqa: E402

EX = "http://ex.org/"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
PFX = "PREFIX : <http://ex.org/> PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#> "


def _ox_key(term) -> str | None:
    if term is None:
        return None
    if isinstance(term, pyoxigraph.NamedNode):
        return "<" + term.value + ">"
    if isinstance(term, pyoxigraph.BlankNode):
        return "_:" + term.value
    if isinstance(term, pyoxigraph.Literal):
        return literal_key(term.value, term.datatype.value if term.datatype else None, term.language)
    raise TypeError(term)


def generate(seed: int, n_nodes: int = 14, n_triples: int = 60, graphs: int = 2) -> list[str]:
    """N-Quads lines."""
    rnd = random.Random(seed)
    nodes = [f"<{EX}n{i}>" for i in range(n_nodes)]
    preds = [f"<{EX}{p}>" for p in ("p", "q", "r", "knows")]
    lits = [f'"{i}"^^<{XSD_INT}>' for i in range(6)] + ['"a"@en', '"b"', '"a"']
    lines = set()
    for _ in range(n_triples):
        s = rnd.choice(nodes)
        p = rnd.choice(preds)
        o = rnd.choice(nodes) if rnd.random() < 0.65 else rnd.choice(lits)
        g = "" if rnd.random() < 0.7 else f" <{EX}g{rnd.randrange(graphs)}>"
        lines.add(f"{s} {p} {o}{g} .")
    for i in range(0, n_nodes, 3):
        lines.add(f"{nodes[i]} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{EX}C{i % 2}> .")
    return sorted(lines)


class Backend:
    """The Jindou store of one topology, holding one dataset at a time."""

    def __init__(self, name: str):
        self.name = name
        self.shared = None if name == "single" else open_database(name)
        self.loaded: tuple | None = None
        self.oxes: dict[tuple, object] = {}
        self.singles: dict[tuple, object] = {}

    def pair(self, lines: list[str]):
        key = tuple(lines)
        data = "\n".join(lines) + "\n"
        ox = self.oxes.get(key)
        if ox is None:
            ox = self.oxes[key] = pyoxigraph.Store()
            ox.load(data.encode(), format=pyoxigraph.RdfFormat.N_QUADS)
        if self.shared is None:
            db = self.singles.get(key)
            if db is None:
                db = self.singles[key] = open_database("single")
                db.load_data(data, "application/n-quads")
            return db, ox
        if self.loaded != key:
            self.shared.update("DROP ALL")
            self.shared.load_data(data, "application/n-quads")
            self.loaded = key
        return self.shared, ox

    def close(self) -> None:
        for db in [self.shared, *self.singles.values()]:
            if db is not None:
                close_database(db)


@pytest.fixture(scope="module", params=list(BACKENDS))
def backend(request):
    b = Backend(request.param)
    try:
        yield b
    finally:
        b.close()


def jindou_rows(db, q):
    res = db.query(q)
    if res.form == "ASK":
        return res.boolean
    if res.is_graph:
        return Counter(res.triple_keys())
    cols = [res.terms.keys(c) for c in res.columns]
    rows = Counter(frozenset((v, c[i]) for v, c in zip(res.vars, cols, strict=True) if c[i] is not None)
                   for i in range(len(res)))
    return rows, sorted(res.vars)


def ox_rows(ox, q):
    res = ox.query(q)
    if isinstance(res, bool | pyoxigraph.QueryBoolean):
        return bool(res)
    if isinstance(res, pyoxigraph.QueryTriples):
        return Counter((_ox_key(t.subject), _ox_key(t.predicate), _ox_key(t.object)) for t in res)
    names = [v.value for v in res.variables]
    rows = Counter(frozenset((v, _ox_key(sol[v])) for v in names if sol[v] is not None) for sol in res)
    return rows, sorted(names)


QUERIES = [
    "SELECT * WHERE { ?s :p ?o }",
    "SELECT * WHERE { ?s :p ?o . ?o :q ?z }",
    "SELECT * WHERE { ?s ?p ?o }",
    "SELECT * WHERE { ?s ?p ?s }",
    "SELECT * WHERE { ?s :p ?s }",
    "SELECT * WHERE { :n1 ?p ?o . ?o ?p2 ?z }",
    "SELECT * WHERE { ?s :p ?o . ?s :q ?o }",
    "SELECT * WHERE { ?s :p ?x . ?x :p ?y . ?y :p ?s }",
    "SELECT * WHERE { ?s a :C0 ; :p ?o }",
    "SELECT * WHERE { ?s :nothere ?o }",
    "SELECT * WHERE { :nothere :p ?o }",
    "SELECT * WHERE { ?s :p ?o OPTIONAL { ?o :q ?z } }",
    "SELECT * WHERE { ?s :p ?o OPTIONAL { ?o :q ?z FILTER(isIRI(?z)) } }",
    "SELECT * WHERE { ?s :p ?o OPTIONAL { ?o :q ?z } OPTIONAL { ?z :r ?w } }",
    "SELECT * WHERE { ?s :p ?o OPTIONAL { ?s :q ?z } ?z :r ?w }",
    "SELECT * WHERE { { ?s :p ?o } UNION { ?s :q ?o } }",
    "SELECT * WHERE { { ?s :p ?o } UNION { ?s :q ?z } ?s :r ?w }",
    "SELECT * WHERE { ?s :p ?o MINUS { ?s :q ?x } }",
    "SELECT * WHERE { ?s :p ?o MINUS { ?a :q ?b } }",
    "SELECT * WHERE { ?s :p ?o FILTER NOT EXISTS { ?o :q ?x } }",
    "SELECT * WHERE { ?s :p ?o FILTER EXISTS { ?o ?pp ?s } }",
    "SELECT * WHERE { ?s ?p ?o FILTER(isLiteral(?o) && ?o > 2) }",
    "SELECT ?s (COUNT(*) AS ?n) WHERE { ?s ?p ?o } GROUP BY ?s",
    "SELECT ?p (COUNT(DISTINCT ?s) AS ?n) WHERE { ?s ?p ?o } GROUP BY ?p HAVING (COUNT(*) > 3)",
    "SELECT (COUNT(*) AS ?n) WHERE { ?s :nothere ?o }",
    "SELECT DISTINCT ?s WHERE { ?s ?p ?o }",
    "SELECT ?s WHERE { ?s ?p ?o } ORDER BY ?s LIMIT 5",
    "SELECT * WHERE { ?s :p+ ?o }",
    "SELECT * WHERE { ?s :p* ?o }",
    "SELECT * WHERE { :n1 :p* ?o }",
    "SELECT * WHERE { ?s :p? :n2 }",
    "SELECT * WHERE { ?s (:p|:q)/:r ?o }",
    "SELECT * WHERE { ?s ^:p/:q ?o }",
    "SELECT * WHERE { ?s !(:p|:q) ?o }",
    "SELECT * WHERE { ?s (:p/:q)+ ?o }",
    "SELECT * WHERE { GRAPH ?g { ?s ?p ?o } }",
    "SELECT * WHERE { GRAPH :g0 { ?s ?p ?o } }",
    "SELECT * WHERE { ?s :p ?o GRAPH ?g { ?o ?p2 ?z } }",
    "SELECT * FROM :g0 FROM :g1 WHERE { ?s ?p ?o }",
    "SELECT * FROM NAMED :g1 WHERE { GRAPH ?g { ?s ?p ?o } }",
    "SELECT * WHERE { ?s :p ?o { SELECT ?o (COUNT(*) AS ?c) WHERE { ?o ?x ?y } GROUP BY ?o } }",
    "SELECT * WHERE { ?s :p ?o BIND(STR(?o) AS ?str) }",
    "SELECT * WHERE { VALUES ?s { :n1 :n2 :n99 } ?s ?p ?o }",
    "SELECT * WHERE { ?s ?p ?o VALUES (?p ?o) { (:p UNDEF) (UNDEF \"a\") } }",
    "SELECT * WHERE { ?s :p ?o { ?o :q ?z FILTER(isIRI(?z)) } }",
    "SELECT * WHERE { ?s :p ?o { ?o :q ?z FILTER(?z != ?s) } }",
    "SELECT * WHERE { ?s :p ?o OPTIONAL { ?o :q ?w } { ?w :r ?z FILTER(isIRI(?z)) } }",
    "SELECT * WHERE { ?s :p ?o . ?o :q+ ?z }",
    "SELECT * WHERE { ?s :p ?o . ?z :q* ?o }",
    "SELECT * WHERE { ?s :p ?o OPTIONAL { ?s :r ?w } ?w :q* ?z }",
    "SELECT * WHERE { VALUES ?v { 1 :n1 :zz } ?v :p? ?v }",
    "SELECT * WHERE { VALUES ?v { 1 :n1 :zz } ?v :p* ?w }",
    "ASK { ?s :p ?o }",
    "ASK { :nothere ?p ?o }",
    "CONSTRUCT { ?o :inv ?s } WHERE { ?s :p ?o }",
    "CONSTRUCT WHERE { ?s :q ?o }",
]


def test_backend_is_the_topology_it_names(backend):
    """A cluster backend really is 3 workers read over its transport (else the rest proves nothing)."""
    db, _ = backend.pair(generate(7))
    ws = getattr(db.store, "workers_status", None)
    if backend.name == "single":
        assert ws is None
        return
    kw = BACKENDS[backend.name]
    assert [(w["state"], w["transport"]) for w in ws()] == [("up", kw.get("cluster_transport", "shm"))] * 3
    assert db.status()["cluster"]["exec"] == kw.get("cluster_exec", "adaptive")


@pytest.mark.parametrize("q", QUERIES)
def test_against_oxigraph(backend, q):
    db, ox = backend.pair(generate(7))
    assert jindou_rows(db, PFX + q) == ox_rows(ox, PFX + q), q


# ------------------------------------------------------------ random BGPs

_TERMS_S = ["?a", "?b", "?c", ":n1", ":n2", ":n3"]
_TERMS_P = [":p", ":q", ":r", ":knows", "?p", "?q"]
_TERMS_O = ["?a", "?b", "?c", ":n1", ":n4", '"a"', "3"]


@st.composite
def bgps(draw):
    k = draw(st.integers(1, 4))
    triples = []
    for _ in range(k):
        s = draw(st.sampled_from(_TERMS_S))
        p = draw(st.sampled_from(_TERMS_P))
        o = draw(st.sampled_from(_TERMS_O))
        triples.append(f"{s} {p} {o} .")
    return " ".join(triples)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 5), bgp=bgps(), optional=st.booleans())
def test_random_bgps(backend, seed, bgp, optional):
    db, ox = backend.pair(small(seed))
    q = PFX + "SELECT * WHERE { " + bgp + (" OPTIONAL { ?a :q ?z }" if optional else "") + " }"
    assert jindou_rows(db, q) == ox_rows(ox, q), q


def small(seed: int) -> list[str]:
    return generate(seed, n_nodes=6, n_triples=30)


_OPS = [
    "{ %s } UNION { %s }",
    "%s OPTIONAL { %s }",
    "%s MINUS { %s }",
    "%s FILTER EXISTS { %s }",
    "%s FILTER NOT EXISTS { %s }",
    "{ %s } { %s }",
    "%s { SELECT DISTINCT * WHERE { %s } }",
    "%s { %s FILTER(!isLiteral(?a)) }",
    "%s { %s FILTER(?b != ?c) }",
    "%s ?a :p* ?b { %s }",
]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 5), a=bgps(), b=bgps(), op=st.sampled_from(_OPS))
def test_random_compositions(backend, seed, a, b, op):
    db, ox = backend.pair(small(seed))
    q = PFX + "SELECT * WHERE { " + (op % (a, b)) + " }"
    assert jindou_rows(db, q) == ox_rows(ox, q), q
