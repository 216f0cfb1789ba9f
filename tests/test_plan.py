"""The plan stage: rewrites, the fast-path choice, BGP orders per snapshot,
and EXPLAIN (shape, analyze counts, no effect on answers)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.database import Database
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query
from engine.plan.nodes import ExploreJoin, ExploreLeftJoin, PathJoin
from engine.plan.planner import QueryPlan, make_plan, plan_query
from engine.plan.rewrite import rewrite
from engine.sparql import algebra as A
from engine.sparql.parser import parse_query

P = "PREFIX : <http://ex.org/> "


@pytest.fixture(scope="module")
def db():
    d = Database(shards=3)
    triples = []
    for i in range(40):
        triples.append(f":s{i} :p :o{i % 7} .")
        triples.append(f":s{i} :q {i} .")
        triples.append(f":o{i % 7} :r :s{(i * 3) % 40} .")
        if i % 5 == 0:
            triples.append(f":s{i} a :T .")
        if i % 3 == 0:
            triples.append(f":s{i} :name \"n{i}\" .")
    graph = " ".join(f":g{i} :p :o{i} ." for i in range(5))
    d.update(P + "INSERT DATA { " + " ".join(triples) + " GRAPH :G { " + graph + " } }")
    return d


QUERIES = {
    "bgp": "SELECT ?s ?o WHERE { ?s a :T . ?s :p ?o }",
    "fast_point": "SELECT ?o WHERE { :s3 :p ?o }",
    "fast_distinct": "SELECT DISTINCT ?o WHERE { ?s a :T . ?s :p ?o } LIMIT 2",
    "optional": "SELECT ?s ?n WHERE { ?s a :T OPTIONAL { ?s :name ?n } }",
    "optional_filter": "SELECT ?s ?v WHERE { ?s a :T OPTIONAL { ?s :q ?v FILTER(?v > 10) } }",
    "union": "SELECT ?x WHERE { { ?x a :T } UNION { ?x :name ?n } }",
    "group": "SELECT ?o (COUNT(?s) AS ?c) WHERE { ?s :p ?o } GROUP BY ?o ORDER BY DESC(?c) ?o",
    "path": "SELECT ?x ?y WHERE { ?x a :T . ?x :p/:r+ ?y }",
    "path_alone": "SELECT ?y WHERE { :o1 (:r/:p)+ ?y }",
    "subquery": "SELECT ?s ?m WHERE { ?s a :T { SELECT ?s (MAX(?v) AS ?m) WHERE { ?s :q ?v } GROUP BY ?s } }",
    "join_groups": "SELECT * WHERE { { ?s a :T } { ?s :p ?o } }",
    "filter_join": "SELECT * WHERE { ?s a :T { ?s :q ?v FILTER(?v < 20) } }",
    "graph": "SELECT ?g ?s WHERE { GRAPH ?g { ?s :p :o2 } }",
    "values_minus": "SELECT ?s WHERE { VALUES ?s { :s0 :s1 :s5 } ?s :p ?o MINUS { ?s a :T } }",
    "exists": "SELECT ?s WHERE { ?s :p ?o FILTER EXISTS { ?s a :T } }",
    "ask": "ASK { ?s a :T . ?s :p :o0 }",
    "construct": "CONSTRUCT { ?s :pp ?o } WHERE { ?s a :T . ?s :p ?o }",
    "empty_const": "SELECT ?s WHERE { ?s :p :nowhere }",
}


def result_size(res) -> int:
    if res.form == "ASK":
        return int(bool(res.boolean))
    return len(res)


def walk(node):
    yield node
    for c in node.get("children", ()):
        yield from walk(c)


def ops(doc) -> list[str]:
    return [n["operator"] for n in walk(doc["plan"])]


# ------------------------------------------------------------------ rewrites


def test_joins_of_bgps_merge_and_explore_nodes():
    q = parse_query(P + "SELECT * WHERE { ?a :p ?b { ?b :q ?c } { ?c :r ?d } }")
    root = rewrite(q.pattern)
    assert isinstance(root.input, A.BGP) and len(root.input.triples) == 3
    q = parse_query(P + "SELECT * WHERE { ?a :p ?b OPTIONAL { ?b :q ?c } ?c :r ?d }")
    root = rewrite(q.pattern).input
    assert isinstance(root, ExploreJoin) and isinstance(root.left, ExploreLeftJoin)
    q = parse_query(P + "SELECT * WHERE { ?a :p ?b . ?b :q* ?c }")
    assert isinstance(rewrite(q.pattern).input, PathJoin)


def test_rewrite_keeps_unchanged_nodes_and_reaches_exists():
    q = parse_query(P + "SELECT ?s WHERE { ?s :p ?o }")
    assert rewrite(q.pattern) is q.pattern  # nothing to rewrite: the same object
    q = parse_query(P + "SELECT ?s WHERE { ?s :p ?o FILTER NOT EXISTS { { ?s :q ?v } { ?v :r ?w } } }")
    flt = rewrite(q.pattern).input
    ex = flt.expr if isinstance(flt.expr, A.Exists) else flt.expr.args[0]
    assert isinstance(ex.pattern, A.BGP) and len(ex.pattern.triples) == 2


def test_plan_query_memoized_per_query_object():
    q = parse_query(P + "SELECT * WHERE { ?s :p ?o }")
    assert plan_query(q) is plan_query(q)
    assert plan_query(parse_query(P + "SELECT * WHERE { ?s :p ?o }")) is not plan_query(q)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_rewrites_never_change_answers(db, name):
    """The planned tree and the tree as parsed give the same solutions in the same order."""
    q = parse_query(P + QUERIES[name])
    snap = db.store.snapshot()

    def run(plan):
        ctx = QueryContext(snap, timeout=30, max_rows=db.max_rows)
        return evaluate_query(q, ctx, DatasetView(snap.default, snap.named), plan=plan)

    planned, parsed = run(make_plan(q)), run(QueryPlan(q, q.pattern, None))
    if q.form == "ASK":
        assert planned.boolean == parsed.boolean
    elif q.form == "CONSTRUCT":
        assert sorted(map(tuple, planned.triples.tolist())) == sorted(map(tuple, parsed.triples.tolist()))
    else:
        assert planned.rows() == parsed.rows()


# ------------------------------------------------------------------ fast-path choice


def test_fast_path_chosen_by_the_planner():
    assert make_plan(parse_query(P + QUERIES["fast_point"])).fast is not None
    # joins of groups merge into one BGP, which the fast path runs
    assert make_plan(parse_query(P + QUERIES["join_groups"])).fast is not None
    for name in ("optional", "union", "group", "path", "graph", "ask"):
        fast = make_plan(parse_query(P + QUERIES[name])).fast
        assert (fast is not None) == (name == "ask"), name
    assert make_plan(parse_query(P + "SELECT * FROM :G WHERE { ?s :p ?o }")).fast is None
    # a variable predicate: a point lookup (one pattern, a constant end: engine/plan/point.py), or
    # steps through the edge index from a constant (wave 2i); no constant end, or the predicate
    # variable repeated in its pattern: the general path
    assert make_plan(parse_query(P + "SELECT * WHERE { ?s ?p :o1 }")).fast.point
    fast = make_plan(parse_query(P + "SELECT * WHERE { ?s ?p :o1 . ?s :q ?x }")).fast
    assert fast is not None and not fast.point
    assert make_plan(parse_query(P + "SELECT * WHERE { ?s ?p ?o }")).fast is None
    assert make_plan(parse_query(P + "SELECT * WHERE { :a ?p ?p }")).fast is None
    # FILTERs decided from ids over such a BGP, UNIONs of them: fast (engine/plan/fast_tree.py)
    assert make_plan(parse_query(P + "SELECT * WHERE { :a ?p ?o FILTER(isIRI(?o)) }")).fast.filters
    assert make_plan(parse_query(P + "SELECT * WHERE { :a ?p ?o FILTER(?o != 'x') }")).fast is None
    fast = make_plan(parse_query(P + "SELECT * WHERE { { :a ?p ?o } UNION { ?o ?p :a } }")).fast
    assert fast is not None and len(fast.union) == 2
    # ORDER BY plain variables over such a BGP: fast (the operators above it general); computed keys: not
    assert make_plan(parse_query(P + "SELECT * WHERE { ?s :p ?o } ORDER BY DESC(?o) ?s")).fast.order
    assert make_plan(parse_query(P + "SELECT * WHERE { ?s :p ?o } ORDER BY STR(?o)")).fast is None


def test_fast_path_handover_uses_general_operators():
    """Past SMALL_ROWS rows the fast program hands over to the vectorized steps and
    the ordinary DISTINCT / LIMIT: same answers as the general evaluator."""
    d = Database(shards=2)
    d.update(P + "INSERT DATA { " + " ".join(f":a :p :b{i} . :b{i} :q :c{i % 50} ." for i in range(700)) + " }")
    q = P + "SELECT DISTINCT ?c WHERE { :a :p ?b . ?b :q ?c } LIMIT 30 OFFSET 5"
    got = d.query(q)
    assert d._prepared[(q, None)].state[2] is not None  # compiled: the fast path ran
    snap = d.store.snapshot()
    ctx = QueryContext(snap, timeout=30, max_rows=d.max_rows)
    want = evaluate_query(parse_query(q), ctx, DatasetView(snap.default, snap.named))
    assert got.rows() == want.rows() and len(got) == 30


# ------------------------------------------------------------------ explain


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_explain_shape(db, name):
    doc = db.explain(P + QUERIES[name])
    assert doc["form"] in ("SELECT", "ASK", "CONSTRUCT")
    assert doc["path"] in ("fast", "general") and doc["analyze"] is False
    assert "result" not in doc
    for n in walk(doc["plan"]):
        assert isinstance(n["operator"], str)
        assert "actual_rows" not in n and "time_ms" not in n
        assert n["estimated_rows"] is None or n["estimated_rows"] >= 0
        if "patterns" in n:
            assert sorted(n["order"]) == list(range(len(n["patterns"]))) or n["order"] == []
            assert [s["pattern"] for s in n["steps"]] == [n["patterns"][i] for i in n["order"]]
            assert all(s["step"] in ("prune", "expand", "scan") for s in n["steps"])


def test_explain_operators_per_query_kind(db):
    e = {k: ops(db.explain(P + q)) for k, q in QUERIES.items()}
    assert e["fast_point"][:3] == ["FastSelect", "Project", "BGP"]
    assert e["bgp"][0] == "FastSelect"
    assert "ExploreLeftJoin" in e["optional"]
    assert "Union" in e["union"] and e["union"].count("BGP") == 2
    assert "Group" in e["group"] and "OrderBy" in e["group"]
    assert "PathJoin" in e["path"]
    assert "PathPattern" in e["path_alone"]
    assert e["subquery"].count("Project") == 2 and "Group" in e["subquery"]
    assert "Graph" in e["graph"]
    assert "Minus" in e["values_minus"] and "Values" in e["values_minus"]
    assert "ExploreJoin" in e["filter_join"]
    doc = db.explain(P + QUERIES["empty_const"])
    bgp = [n for n in walk(doc["plan"]) if n["operator"] == "BGP"][0]
    assert bgp["estimated_rows"] == 0 and "note" in bgp


def test_explain_order_is_the_executed_order(db):
    """The order explain shows is the one the executor cached for the snapshot."""
    q = P + "SELECT ?s ?o ?n WHERE { ?s :p ?o . ?s a :T . ?s :name ?n }"
    doc = db.explain(q, default_graph_uris=["urn:jindou:default"])  # general path, default graph
    bgp = [n for n in walk(doc["plan"]) if n["operator"] == "BGP"][0]
    assert bgp["patterns"][bgp["order"][0]].endswith("<http://ex.org/T>")  # the type index start
    db.query(q)
    pq = db._prepared[(q, None)]
    # the fast program was compiled from the same cost model with the same statistics
    prog = pq.state[2][0]
    assert [bgp["patterns"].index(" ".join(_pos(x) for x in rt)) for rt in prog.rtriples] == bgp["order"]


def _pos(x):
    return "?" + x[1] if x[0] == "v" else db_key[x[1]]


db_key: dict = {}


@pytest.fixture(autouse=True)
def _keys(db):
    snap = db.store.snapshot()
    db_key.clear()
    db_key.update({i: snap.dictionary.key(i) for i in range(len(snap.dictionary))})


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_analyze_counts_equal_results(db, name):
    text = P + QUERIES[name]
    before = db.query(text)
    doc = db.explain(text, analyze=True)
    after = db.query(text)
    assert doc["analyze"] is True and doc["time_ms"] >= 0
    size = result_size(before)
    res = doc["result"]
    assert res.get("rows", res.get("triples", res.get("boolean"))) == (
        bool(size) if "boolean" in res else len(before))
    root = doc["plan"]
    if before.form == "SELECT":
        assert root["actual_rows"] == len(before)
    elif before.form == "ASK":
        assert (root["actual_rows"] > 0) == before.boolean
    for n in walk(root):
        if n.get("fused"):  # inside the fast path's one program
            assert doc["path"] == "fast" and "actual_rows" not in n
            continue
        assert n["calls"] >= 0 and n["actual_rows"] >= 0 and n["time_ms"] >= 0
        if n["operator"] == "Union" and n["calls"] == 1:
            assert n["actual_rows"] == sum(c["actual_rows"] for c in n["children"])
        if n["operator"] in ("Project", "Extend", "OrderBy") and n["calls"] == 1:
            assert n["actual_rows"] == n["children"][0]["actual_rows"]
    # explain changes no answer
    if before.form == "SELECT":
        assert before.rows() == after.rows()
    elif before.form == "ASK":
        assert before.boolean == after.boolean
    else:
        assert len(before) == len(after)


def test_analyze_bgp_actuals_match_subpattern_size(db):
    doc = db.explain(P + "SELECT ?x WHERE { { ?x a :T } UNION { ?x :name ?n } }", analyze=True)
    u = [n for n in walk(doc["plan"]) if n["operator"] == "Union"][0]
    sizes = [len(db.query(P + "SELECT * WHERE { ?x a :T }")), len(db.query(P + "SELECT * WHERE { ?x :name ?n }"))]
    assert [c["actual_rows"] for c in u["children"]] == sizes


def test_explain_follows_commits():
    d = Database(shards=2)
    q = P + "SELECT ?o WHERE { :a :p ?o }"
    doc = d.explain(q)
    assert [n for n in walk(doc["plan"]) if n["operator"] == "BGP"][0]["estimated_rows"] == 0
    d.update(P + "INSERT DATA { :a :p :b , :c }")
    doc2 = d.explain(q, analyze=True)
    assert doc2["snapshot"] > doc["snapshot"] and doc2["result"] == {"rows": 2}
    assert [n for n in walk(doc2["plan"]) if n["operator"] == "BGP"][0]["estimated_rows"] == 2


def test_explain_of_bad_query_is_a_syntax_error(db):
    from engine.errors import QuerySyntaxError

    with pytest.raises(QuerySyntaxError):
        db.explain("SELECT WHERE {")


def test_analyze_step_rows_of_a_vectorized_exploration(db):
    """An exploration from many left rows runs vectorized: its last step's rows
    are the operator's rows, and every step reports its rows."""
    text = P + "SELECT * WHERE { ?s :p ?o . ?o :r ?x OPTIONAL { ?s :name ?n } ?x :q ?v }"
    doc = db.explain(text, analyze=True)
    ej = [n for n in walk(doc["plan"]) if n["operator"] == "ExploreJoin"][0]
    assert ej["calls"] == 1 and ej["actual_rows"] == doc["result"]["rows"] == len(db.query(text)) > 40
    assert all("actual_rows" in s for s in ej["steps"])
    assert ej["steps"][-1]["actual_rows"] == ej["actual_rows"]


ORACLE = [
    # joins of groups, a filter inside a group, explorations from left rows
    "SELECT * WHERE { { ?s a :T } { ?s :p ?o } { ?o :r ?x } }",
    "SELECT * WHERE { ?s a :T { ?s :q ?v FILTER(?v > 10) } }",
    "SELECT * WHERE { ?s a :T { ?s :q ?v FILTER(?v > ?w) } BIND(5 AS ?w) }",
    # the left rows leave the shared variable unbound: the exploration falls back to a join
    "SELECT * WHERE { ?s a :T OPTIONAL { ?s :name ?n } ?x :name ?n }",
    "SELECT * WHERE { ?s a :T OPTIONAL { ?s :name ?n } { ?x :name ?n FILTER(?x != ?s) } }",
    "SELECT * WHERE { ?s :p ?o OPTIONAL { ?s :name ?n FILTER(STRLEN(?n) > 2) } }",
    "SELECT * WHERE { ?s a :T . ?s :p/:r ?y }",
    "SELECT * WHERE { ?s a :T . ?s (:p|:q) ?y }",
    "SELECT ?s WHERE { ?s :p ?o FILTER EXISTS { { ?s a :T } { ?s :q ?v } } }",
    "SELECT ?s WHERE { ?s :p ?o FILTER NOT EXISTS { ?o :r ?s } }",
    "SELECT * WHERE { ?s :p ?o MINUS { { ?s a :T } { ?s :name ?n } } }",
    "SELECT * WHERE { { ?s a :T } UNION { ?s :name ?n } ?s :p ?o }",
    "SELECT * WHERE { GRAPH ?g { ?s :p ?o } ?o :r ?x }",
    "SELECT ?o (COUNT(*) AS ?c) WHERE { { ?s :p ?o } { ?s :q ?v } } GROUP BY ?o",
]


@pytest.mark.parametrize("q", ORACLE)
def test_planned_queries_agree_with_rdflib(db, q):
    import rdflib

    snap = db.store.snapshot()
    g = rdflib.Dataset()
    for gid, graph in [(None, snap.default)] + list(snap.named.items()):
        target = g.default_graph if gid is None else g.graph(rdflib.URIRef(snap.dictionary.key(gid)[1:-1]))
        cols = [snap.dictionary.keys(np.asarray(c, dtype=np.int64)) for c in graph.scan_all()]
        target.parse(data="".join(f"{s} {p} {o} .\n" for s, p, o in zip(*cols, strict=True)), format="nt")
    want = sorted(
        tuple(sorted((str(k), v.n3()) for k, v in row.asdict().items()))
        for row in g.query(P + q)
    )
    got = sorted(tuple(sorted(r.items())) for r in db.query(P + q).rows())
    assert got == want
