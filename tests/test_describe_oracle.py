"""DESCRIBE and CONSTRUCT answers against pyoxigraph's, as graphs (isomorphism: blank
nodes match up to renaming), in every graph format a client may negotiate: random
graphs with chains and cycles of blank nodes; DESCRIBE of constants, of ``?x WHERE``
solutions (a few: answered tuple at a time by ``engine.plan.point.describe_small``,
which the test checks), of both; CONSTRUCT with and without template blank nodes.
The tuple-at-a-time DESCRIBE also gives the general DESCRIBE's triples in its order."""

from __future__ import annotations

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rdflib import Graph
from rdflib.compare import isomorphic

import engine.database as database
import engine.exec.evaluate as evaluate
from engine import small_answers
from engine.database import Database
from engine.exec import serialize as ser
from engine.plan import point

#: media type -> pyoxigraph's format reading it back
FORMATS = {
    "application/n-triples": ox.RdfFormat.N_TRIPLES,
    "text/turtle": ox.RdfFormat.TURTLE,
    "application/trig": ox.RdfFormat.TRIG,
    "application/rdf+xml": ox.RdfFormat.RDF_XML,
    "application/ld+json": ox.RdfFormat.JSON_LD,
}


def _node(i: int) -> str:
    """0-4 IRIs, 5-9 blank nodes."""
    return f"<http://x/e{i}>" if i < 5 else f"_:b{i}"


def _obj(i: int) -> str:
    if i < 10:
        return _node(i)
    return ['"v"', '"w"@en', '"7"^^<http://www.w3.org/2001/XMLSchema#integer>', '"a\\nb \\"q\\""'][i % 4]


_triple = st.tuples(st.integers(0, 9), st.integers(0, 3), st.integers(0, 13))


def _graph_nt(rows) -> str:
    return "".join(f"{_node(s)} <http://x/p{p}> {_obj(o)} .\n" for s, p, o in rows)


def _rdflib(nt: bytes | str) -> Graph:
    g = Graph()
    g.parse(data=nt if isinstance(nt, str) else nt.decode("utf-8"), format="nt")
    return g


def _ox_nt(triples) -> bytes:
    return ox.serialize(list(triples), format=ox.RdfFormat.N_TRIPLES) or b""


def _read_back(body: bytes, fmt) -> bytes:
    """What pyoxigraph reads from ``body``, as N-Triples (the default graph's triples)."""
    quads = list(ox.parse(body, fmt)) if body else []
    return _ox_nt(ox.Triple(q.subject, q.predicate, q.object) for q in quads)


def _queries(resources, pred, target):
    e = " ".join(_node(r) for r in resources)
    return [
        f"DESCRIBE {e}",
        f"DESCRIBE ?x WHERE {{ ?x <http://x/p{pred}> ?y }}",
        f"DESCRIBE ?x WHERE {{ ?x <http://x/p{pred}> {_obj(target)} }}",
        f"DESCRIBE ?x {_node(resources[0])} WHERE {{ ?x <http://x/p{pred}> ?y }} LIMIT 2",
        f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ {_node(resources[0])} ?p ?o . BIND({_node(resources[0])} AS ?s) }}",
        f"CONSTRUCT {{ ?s <http://x/q> _:n . _:n <http://x/r> ?o }} WHERE {{ ?s <http://x/p{pred}> ?o }}",
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_triple, min_size=1, max_size=40),
       resources=st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True),
       pred=st.integers(0, 3), target=st.integers(0, 13))
def test_describe_and_construct_are_pyoxigraph_s_graphs_in_every_format(monkeypatch, rows, resources, pred,
                                                                        target):
    nt = _graph_nt(rows)
    db = Database()
    db.load_data(nt.encode("utf-8"), "application/n-triples")
    store = ox.Store()
    store.load(nt.encode("utf-8"), ox.RdfFormat.N_TRIPLES)
    real = point.describe_small
    calls: list[bool] = []

    def spy(*a, **kw):
        got = real(*a, **kw)
        calls.append(got is not None)
        return got

    for i, text in enumerate(_queries(resources, pred, target)):
        if "LIMIT" in text:  # (which solutions LIMIT keeps is the engine's choice: not compared)
            continue
        calls.clear()
        monkeypatch.setattr(database, "describe_small", spy)
        monkeypatch.setattr(evaluate, "describe_small", spy)
        res = db.query(f"{text} # {i}")
        if text.startswith("DESCRIBE") and len(res):
            assert calls and calls[-1], text  # answered tuple at a time
        want = _rdflib(_ox_nt(store.query(text)))
        for mt, fmt in FORMATS.items():
            got = _rdflib(_read_back(ser.serialize(res, mt), fmt))
            assert isomorphic(got, want), (text, mt)
        lane = small_answers.graph_ntriples(res)  # (the HTTP lane's N-Triples, when it writes them)
        if lane is not None:
            assert lane == ser.serialize(res, "application/n-triples"), text
            assert isomorphic(_rdflib(lane), want), text
        if text.startswith("DESCRIBE"):  # the general DESCRIBE: same triples, same order
            monkeypatch.setattr(database, "describe_small", lambda *a, **kw: None)
            monkeypatch.setattr(evaluate, "describe_small", lambda *a, **kw: None)
            slow = db.query(f"{text} # {i} general")
            assert res.triples.tolist() == slow.triples.tolist(), text
    db.close()


def test_a_describe_of_a_few_solutions_is_answered_tuple_at_a_time(monkeypatch):
    """``DESCRIBE ?x WHERE`` with a few solutions goes through describe_small (its result
    carries the runs the lane's N-Triples writer reads); past DESCRIBE_RESOURCES
    resources the vectorized DESCRIBE answers, with the same triples."""
    db = Database()
    db.load_data("".join(f"<http://x/e{i}> <http://x/p> <http://x/e{i + 1}> .\n"
                         f"<http://x/e{i}> <http://x/q> _:b{i} .\n_:b{i} <http://x/r> \"{i}\" .\n"
                         for i in range(100)).encode(), "application/n-triples")
    res = db.query("DESCRIBE ?x WHERE { ?x <http://x/p> <http://x/e3> }")
    assert isinstance(res, point.Described) and len(res) == 3
    monkeypatch.setattr(point, "DESCRIBE_RESOURCES", 10)
    monkeypatch.setattr(evaluate, "DESCRIBE_RESOURCES", 10)
    many = db.query("DESCRIBE ?x WHERE { ?x <http://x/p> ?y }")
    assert not isinstance(many, point.Described) and len(many) == 300
    monkeypatch.setattr(evaluate, "DESCRIBE_RESOURCES", 1000)
    again = db.query("DESCRIBE ?x WHERE { ?x <http://x/p> ?y } # again")
    assert isinstance(again, point.Described)
    assert again.triples.tolist() == many.triples.tolist()


if __name__ == "__main__":
    pytest.main([__file__])


def test_a_small_description_is_written_from_its_runs_in_every_format(monkeypatch):
    """A Described answer of a few triples is written from its runs (``flat_rows``, the
    lane's N-Triples from the runs themselves): no triple array is built, and the bytes
    are those of the same triples given as an array."""
    from engine.exec.result import QueryResult

    db = Database()
    db.update('INSERT DATA { <http://x/a> a <http://x/C> ; <http://x/p> "v"@en , _:b . '
              '_:b <http://x/q> "1"^^<http://www.w3.org/2001/XMLSchema#integer> }')
    res = db.query("DESCRIBE <http://x/a>")
    assert isinstance(res, point.Described) and res.runs is not None and len(res) == 4
    plain = QueryResult(form="DESCRIBE", terms=res.terms, triples=res.triples.copy())
    want = {mt: ser.serialize(plain, mt) for mt in FORMATS}
    again = db.query("DESCRIBE <http://x/a> # again")

    def no_array(self):
        raise AssertionError("the triple array was built")

    monkeypatch.setattr(point.Described, "triples", property(no_array))
    for mt in FORMATS:
        assert ser.serialize(again, mt) == want[mt], mt
    assert small_answers.graph_ntriples(again) == want["application/n-triples"]


@pytest.mark.parametrize("text,fast", [
    ("DESCRIBE ?x FROM <http://g/1> WHERE { ?x <http://x/p> ?y }", True),
    ("DESCRIBE ?x FROM <http://g/1> FROM <http://g/2> WHERE { ?x <http://x/p> ?y }", False),
    ("DESCRIBE ?x WHERE { GRAPH <http://g/2> { ?x <http://x/r> ?y } }", True),
    ("DESCRIBE ?x <http://x/d> WHERE { ?x <http://x/s> ?y }", True),
])
def test_describe_of_solutions_over_datasets_is_pyoxigraph_s(text, fast):
    """``DESCRIBE ?x`` with FROM (one graph: described tuple at a time over it; two: a merged
    view without in-process lookups, the vectorized DESCRIBE) and over GRAPH patterns: the
    graph pyoxigraph describes (the dataset's default graph)."""
    upd = ('INSERT DATA { GRAPH <http://g/1> { <http://x/a> <http://x/p> _:b . _:b <http://x/q> "v" . '
           "<http://x/c> <http://x/p> <http://x/a> } GRAPH <http://g/2> { <http://x/a> <http://x/r> <http://x/d> . "
           '<http://x/d> <http://x/p> "w" } <http://x/a> <http://x/s> "default" . <http://x/d> <http://x/s> _:e . '
           '_:e <http://x/q> "in default" }')
    db = Database()
    db.update(upd)
    store = ox.Store()
    store.update(upd)
    res = db.query(text)
    assert isinstance(res, point.Described) == fast
    want = _rdflib(_ox_nt(store.query(text)))
    assert len(want)
    for mt, fmt in FORMATS.items():
        assert isomorphic(_rdflib(_read_back(ser.serialize(res, mt), fmt)), want), mt
