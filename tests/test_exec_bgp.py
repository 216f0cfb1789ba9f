"""BGP graph exploration, planner, property paths and the algebra operators."""

from __future__ import annotations

import pytest

from engine.database import Database
from engine.plan.order import plan
from engine.sparql import algebra as A

DATA = """
@prefix : <http://ex.org/> .
:a :p :b . :b :p :c . :c :p :a . :c :p :c .
:a :q "1"^^<http://www.w3.org/2001/XMLSchema#integer> .
:b :q "2"^^<http://www.w3.org/2001/XMLSchema#integer> .
:a a :T . :b a :T . :d a :U .
:a :name "alice"@en . :b :name "bob" .
"""
P = "PREFIX : <http://ex.org/> "


@pytest.fixture(scope="module")
def db():
    d = Database(shards=3)
    d.load_data(DATA, "text/turtle")
    d.load_data("@prefix : <http://ex.org/> . :a :p :z . :z :in :g1 .", "text/turtle", graph="http://ex.org/g1")
    d.load_data("@prefix : <http://ex.org/> . :a :p :b . :y :in :g2 .", "text/turtle", graph="http://ex.org/g2")
    return d


def sel(db, q, **kw):
    res = db.query(P + q, **kw)
    return sorted(tuple(sorted(r.items())) for r in res.rows())


def short(k):
    if k.startswith("<http://ex.org/"):
        return ":" + k[len("<http://ex.org/"):-1]
    return k


def vals(db, q, var, **kw):
    return sorted(short(r[var]) for r in db.query(P + q, **kw).rows() if var in r)


def test_chain_and_cycle(db):
    assert vals(db, "SELECT ?z WHERE { :a :p ?y . ?y :p ?z }", "z") == [":c"]
    # triangle through full-history pruning
    tri = sel(db, "SELECT * WHERE { ?x :p ?y . ?y :p ?z . ?z :p ?x }")
    assert len(tri) == 4  # a-b-c rotations (3) + c-c-c


def test_repeated_variable(db):
    assert vals(db, "SELECT ?x WHERE { ?x :p ?x }", "x") == [":c"]
    assert vals(db, "SELECT ?x WHERE { ?x ?p ?x }", "x") == [":c"]


def test_variable_predicate(db):
    assert vals(db, "SELECT ?p WHERE { :a ?p :b }", "p") == [":p"]
    assert len(sel(db, "SELECT * WHERE { ?s ?p ?o }")) == 11
    # bound predicate variable from an earlier step
    assert vals(db, "SELECT ?o WHERE { :a ?p :b . :b ?p ?o }", "o") == [":c"]


def test_absent_constant_is_empty(db):
    assert sel(db, "SELECT * WHERE { ?s :nope ?o }") == []
    assert sel(db, "SELECT * WHERE { :nope :p ?o }") == []
    assert db.query(P + "ASK { :a :p :b }").boolean
    assert not db.query(P + "ASK { :a :p :nope }").boolean


def test_blank_node_variables_not_projected(db):
    res = db.query(P + "SELECT * WHERE { _:x :p ?y }")
    assert res.vars == ["y"]
    assert sorted(short(r["y"]) for r in res.rows()) == [":a", ":b", ":c", ":c"]


def test_optional_union_minus_filter(db):
    rows = sel(db, "SELECT ?x ?n WHERE { ?x a :T OPTIONAL { ?x :name ?n FILTER(lang(?n) = 'en') } }")
    assert len(rows) == 2 and sum(1 for r in rows if len(r) == 2) == 1
    assert vals(db, "SELECT ?x WHERE { { ?x a :T } UNION { ?x a :U } }", "x") == [":a", ":b", ":d"]
    assert vals(db, "SELECT ?x WHERE { ?x a :T MINUS { ?x :q 2 } }", "x") == [":a"]
    assert vals(db, "SELECT ?x WHERE { ?x :q ?v FILTER(?v > 1) }", "x") == [":b"]


def test_exists_substitution(db):
    q = "SELECT ?x WHERE { ?x a :T FILTER EXISTS { ?x :p ?y FILTER(?y != :c) } }"
    assert vals(db, q, "x") == [":a"]
    q = "SELECT ?x WHERE { ?x a ?t FILTER NOT EXISTS { ?x :q ?v } }"
    assert vals(db, q, "x") == [":d"]


def test_graph_patterns_and_dataset(db):
    assert vals(db, "SELECT ?g WHERE { GRAPH ?g { :a :p ?o } }", "g") == [":g1", ":g2"]
    assert vals(db, "SELECT ?o WHERE { GRAPH :g1 { :a :p ?o } }", "o") == [":z"]
    assert vals(db, "SELECT ?o WHERE { GRAPH :nope { :a :p ?o } }", "o") == []
    # inner pattern binding the graph variable must agree
    assert vals(db, "SELECT ?g WHERE { GRAPH ?g { ?s :in ?g } }", "g") == [":g1", ":g2"]
    # FROM merge: set semantics (:a :p :b is in default? no: only g1+g2 here)
    assert vals(db, "SELECT ?o FROM :g1 FROM :g2 WHERE { :a :p ?o }", "o") == [":b", ":z"]
    assert vals(db, "SELECT ?o WHERE { :a :p ?o }", "o",
                default_graph_uris=["http://ex.org/g1"]) == [":z"]
    assert vals(db, "SELECT ?g WHERE { GRAPH ?g { ?s ?p ?o } }", "g",
                named_graph_uris=["http://ex.org/g2"]) == [":g2", ":g2"]


def test_paths(db):
    assert vals(db, "SELECT ?o WHERE { :a :p+ ?o }", "o") == [":a", ":b", ":c"]
    assert vals(db, "SELECT ?o WHERE { :d :p* ?o }", "o") == [":d"]
    # zero-length from a term the store does not hold
    assert vals(db, "SELECT ?o WHERE { :nowhere :p* ?o }", "o") == [":nowhere"]
    assert vals(db, "SELECT ?s WHERE { ?s :p/:q 2 }", "s") == [":a"]
    assert vals(db, "SELECT ?s WHERE { ?s ^:p :a }", "s") == [":b"]
    assert vals(db, "SELECT ?o WHERE { :a !(:p|:q|:name) ?o }", "o") == [":T"]
    assert vals(db, "SELECT ?o WHERE { :a (:p/:p)* ?o }", "o") == [":a", ":b", ":c"]


def test_aggregates_and_modifiers(db):
    rows = db.query(P + "SELECT ?s (COUNT(?o) AS ?n) WHERE { ?s :p ?o } GROUP BY ?s ORDER BY DESC(?n) ?s").rows()
    assert short(rows[0]["s"]) == ":c" and rows[0]["n"].startswith('"2"')
    res = db.query(P + "SELECT (COUNT(*) AS ?n) WHERE { ?s :nope ?o }")
    assert res.rows() == [{"n": '"0"^^<http://www.w3.org/2001/XMLSchema#integer>'}]
    assert len(db.query(P + "SELECT DISTINCT ?s WHERE { ?s :p ?o }")) == 3
    assert len(db.query(P + "SELECT ?s WHERE { ?s :p ?o } LIMIT 2 OFFSET 1")) == 2


def test_construct_and_describe(db):
    res = db.query(P + "CONSTRUCT { ?s :r _:n . _:n :v ?o } WHERE { ?s :q ?o }")
    triples = res.triple_keys()
    assert len(triples) == 4
    bn = {t[2] for t in triples if t[1] == "<http://ex.org/r>"}
    assert len(bn) == 2  # one fresh blank node per solution
    # literal subjects are skipped
    res = db.query(P + "CONSTRUCT { ?o :r ?s } WHERE { ?s :q ?o }")
    assert res.triple_keys() == []
    d = db.query(P + "DESCRIBE :b").triple_keys()
    assert {short(t[1]) for t in d} == {":p", ":q", "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>", ":name"}


def test_values_and_bind(db):
    assert vals(db, "SELECT ?o WHERE { VALUES ?s { :a :zz } ?s :q ?o }", "o") == ['"1"^^<http://www.w3.org/2001/XMLSchema#integer>']
    rows = db.query(P + "SELECT ?x WHERE { BIND(1 + 2 AS ?x) }").rows()
    assert rows == [{"x": '"3"^^<http://www.w3.org/2001/XMLSchema#integer>'}]


def test_service_unsupported(db):
    from engine.errors import UnsupportedError

    with pytest.raises(UnsupportedError):
        db.query(P + "SELECT * WHERE { SERVICE <http://x/> { ?s ?p ?o } }")
    assert len(db.query(P + "SELECT * WHERE { SERVICE SILENT <http://x/> { ?s ?p ?o } }")) == 1


def test_planner_prefers_constant_and_prunes(db):
    snap = db.store.snapshot()
    d = snap.dictionary
    p = d.lookup("<http://ex.org/p>")
    t = d.lookup("<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>")
    u = d.lookup("<http://ex.org/U>")
    triples = [(("v", "x"), ("c", p), ("v", "y")), (("v", "x"), ("c", t), ("c", u)),
               (("v", "y"), ("c", p), ("v", "x"))]
    order = plan(triples, snap.default, set())
    assert order[0] == 1  # the type-index start (:U has one instance)
    assert order[2] == 2 or order[1] == 0


def test_plan_cache_is_used(db):
    q = P + "SELECT * WHERE { ?x :p ?y . ?y :q ?z }"
    db.query(q)
    n = len(db._plan_cache)
    db.query(q)
    assert len(db._plan_cache) == n and n >= 1


def test_algebra_values_node_direct(db):
    from engine.exec.evaluate import Evaluator, QueryContext, make_dataset

    ctx = QueryContext(db.store.snapshot())
    ev = Evaluator(ctx, make_dataset(ctx))
    node = A.Values((A.Var("x"),), (("<http://ex.org/a>",), (None,), ('"new"',)))
    out = ev.eval(node)
    assert ctx.keys(out.cols["x"]) == ["<http://ex.org/a>", None, '"new"']
    assert out.cols["x"][2] >= 1 << 40  # query-local id


def test_fork_join_path_gives_same_answers(db, monkeypatch):
    from engine.exec import bgp

    qs = ["SELECT * WHERE { ?x :p ?y . ?y :p ?z . ?z :p ?x }", "SELECT * WHERE { ?s ?p ?o . ?o :p ?z }",
          "SELECT * WHERE { ?x a :T . ?x :p ?y . ?y :q ?v }"]
    before = [sel(db, q) for q in qs]
    monkeypatch.setattr(bgp, "FORK_ROWS", 1)
    monkeypatch.setattr(bgp, "_WORKERS", 3)
    db._plan_cache.clear()
    assert [sel(db, q) for q in qs] == before
