"""A known template's text, or any fast text, run with its answer left as Python lists
(``Database.query_template(..., lists=True)``, ``Database.query(..., lists=True)``,
``engine.exec.evaluate.run_fast_lists``)
gives the same answer, row order included, as ``Database.query`` of the text,
over random graphs and selective shapes with DISTINCT, LIMIT/OFFSET, projected
unbound variables, empty answers and constants absent from the graph."""

from __future__ import annotations

import random

import pytest

from engine.database import Database
from engine.small_answers import SmallSelect
from engine.sparql import normalize as norm

SHAPES = [
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}",
    "SELECT ?o WHERE {{ <{c}> <http://e/p0> ?o }}",
    "SELECT ?s WHERE {{ ?s <http://e/p1> <{c}> }}",
    "SELECT DISTINCT ?x WHERE {{ <{c}> ?p ?y . ?y <http://e/p2> ?x }}",
    "SELECT ?a ?b WHERE {{ <{c}> <http://e/p0> ?a ; <http://e/p1> ?b }}",
    "SELECT ?o WHERE {{ <{c}> ?p ?o }} LIMIT 2",
    "SELECT ?o WHERE {{ <{c}> ?p ?o }} LIMIT 3 OFFSET 1",
    "SELECT ?o WHERE {{ <{c}> ?p ?o }} OFFSET 9",
    "SELECT DISTINCT ?p WHERE {{ <{c}> ?p ?o }}",
    "SELECT ?s ?o WHERE {{ ?s <http://e/p0> <{c}> . <{c}> <http://e/p2> ?o }}",
    "SELECT * WHERE {{ <{c}> <http://e/p0> <http://e/n1> }}",
    "SELECT ?o ?x WHERE {{ <{c}> <http://e/p3> ?o }} LIMIT 1",
    "ASK {{ <{c}> <http://e/p1> ?o }}",
]


def edges(rnd: random.Random, n: int = 300, nodes: int = 40) -> list[str]:
    """``n`` random triples between ``nodes`` nodes over the predicates p0-p3 (the template
    tests' graphs)."""
    lines = []
    for _ in range(n):
        s, o = rnd.randrange(nodes), rnd.randrange(nodes)
        lines.append(f"<http://e/n{s}> <http://e/p{rnd.randrange(4)}> <http://e/n{o}> .")
    return lines


def _graph(seed: int) -> str:
    return "\n".join(edges(random.Random(seed))) + "\n"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_template_lists_equal_query(seed, tmp_path):
    f = tmp_path / "g.nt"
    f.write_text(_graph(seed))
    db = Database()
    db.load_file(str(f))
    base = "http://h/sparql"
    lists_seen = 0
    for shape in SHAPES:
        for i in range(45):  # node 40..44: constants absent from the graph
            text = shape.format(c=f"http://e/n{i}") + f"\n# {i}\n"
            want = db.query(text, base=base)
            again = db.query(text, base=base, lists=True)  # the text path (parsed plan cached)
            if type(again) is SmallSelect:
                lists_seen += 1
                again = again.result()
            assert again.vars == want.vars and again.boolean == want.boolean and len(again) == len(want)
            assert [c.tolist() for c in again.columns] == [c.tolist() for c in want.columns], (text,)
            hit = db.match_template(norm.normalize(text), base)
            if hit is None:
                continue
            got = db.query_template(hit, lists=True)
            if got is None:
                continue
            if type(got) is SmallSelect:
                lists_seen += 1
                got = got.result()
            assert got.vars == want.vars and got.boolean == want.boolean and len(got) == len(want)
            assert [c.tolist() for c in got.columns] == [c.tolist() for c in want.columns], (text,)
    assert lists_seen > 100
