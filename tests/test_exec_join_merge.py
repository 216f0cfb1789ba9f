"""Joins of basic graph patterns are planned as one BGP.

``{ ?a a C . ?b a C } { ?x p ?a . ?x q <k> } { ?y p ?b . ?y q <m> }`` has a
cross product in its first group; evaluated group by group it builds |C|^2
rows before the selective groups prune them. Merged, the planner starts from
the constants. The row budget makes the difference observable.
"""

from __future__ import annotations

import pyoxigraph as ox

from engine.database import Database

N = 600  # N^2 = 360k rows for the unmerged cross product


def _data() -> str:
    lines = [f"<http://e/p{i}> a <http://e/C> ." for i in range(N)]
    lines += [
        "<http://e/o1> <http://e/prop> <http://e/p3> .", "<http://e/o1> <http://e/by> <http://e/s1> .",
        "<http://e/o2> <http://e/prop> <http://e/p5> .", "<http://e/o2> <http://e/by> <http://e/s2> .",
        "<http://e/o3> <http://e/prop> <http://e/p7> .", "<http://e/o3> <http://e/by> <http://e/s1> .",
    ]
    return "\n".join(lines) + "\n"


QUERY = """SELECT ?o1 ?o2 ?p1 WHERE {
  ?p1 a <http://e/C> . ?p2 a <http://e/C> .
  { ?o1 <http://e/prop> ?p1 . ?o1 <http://e/by> <http://e/s1> }
  { ?o2 <http://e/prop> ?p2 . ?o2 <http://e/by> <http://e/s2> }
}"""


def test_joined_bgps_are_planned_together_and_match_oracle():
    db = Database(shards=2, max_rows=50_000)
    db.load_data(_data(), "text/turtle")
    got = sorted(tuple(sorted(r.items())) for r in db.query(QUERY).rows())

    store = ox.Store()
    store.load(_data().encode(), ox.RdfFormat.TURTLE)
    res = store.query(QUERY)
    names = list(res.variables)
    want = sorted(
        tuple(sorted((v.value, str(s[v])) for v in names if s[v] is not None))
        for s in res
    )
    assert got == [tuple((k, v) for k, v in row) for row in want]
    assert len(got) == 2


def test_merge_keeps_plan_identity():
    from engine.plan.rewrite import merged_bgp
    from engine.sparql.parser import parse_query

    q = parse_query("SELECT * WHERE { ?a <http://e/p> ?b { ?b <http://e/q> ?c } }")
    join = q.pattern.input if hasattr(q.pattern, "input") else q.pattern
    while not hasattr(join, "left"):
        join = join.input
    first = merged_bgp(join)
    assert first is not None and len(first.triples) == 2
    assert merged_bgp(join) is first
