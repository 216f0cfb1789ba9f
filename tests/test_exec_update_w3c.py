"""W3C SPARQL 1.1 Update evaluation tests, run in process against Database.update.

The shared harness skips update tests, so this reads the update manifests
itself: load ut:data / ut:graphData, run ut:request, compare the resulting
default graph and non-empty named graphs with the expected ones (RDF graph
isomorphism, so blank nodes compare up to renaming). Empty named graphs are
not compared: the tests do not distinguish an empty graph from an absent one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

rdflib = pytest.importorskip("rdflib")
from rdflib.compare import isomorphic  # noqa: E402

from engine.database import Database  # noqa: E402
from engine.exec import serialize as ser  # noqa: E402
from tests.support.shared import shared_dir  # noqa: E402

MF = rdflib.Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#")
UT = rdflib.Namespace("http://www.w3.org/2009/sparql/tests/test-update#")
DIRS = ["add", "basic-update", "clear", "copy", "delete-data", "delete-insert", "delete-where", "delete",
        "drop", "move", "update-silent"]


def _uri_path(u) -> Path:
    return Path(str(u).removeprefix("file://"))


def _collect():
    try:
        root = shared_dir() / "w3c-sparql" / "sparql" / "sparql11"
    except BaseException:  # noqa: BLE001 - skip when the suite is absent
        return []
    cases = []
    for d in DIRS:
        man = root / d / "manifest.ttl"
        if not man.exists():
            continue
        g = rdflib.Graph()
        g.parse(man, format="turtle", publicID="file://" + str(man))
        for test in g.subjects(rdflib.RDF.type, MF.UpdateEvaluationTest):
            name = str(test).rsplit("#", 1)[-1]
            cases.append(pytest.param(g, test, id=f"{d}/{name}"))
    return cases


def _graph_data(g, node):
    data = [_uri_path(x) for x in g.objects(node, UT.data)]
    named = []
    for gd in g.objects(node, UT.graphData):
        named.append((str(g.value(gd, rdflib.RDFS.label)), _uri_path(g.value(gd, UT.graph))))
    return data, named


def _actual(db, graph):
    body = ser.serialize(db.graph_get(graph), "application/n-triples")
    out = rdflib.Graph()
    out.parse(data=body.decode(), format="nt")
    return out


def _expected(paths):
    out = rdflib.Graph()
    for p in paths:
        out.parse(p, format="turtle", publicID="file://" + str(p))
    return out


@pytest.mark.parametrize("g,test", _collect())
def test_update_evaluation(g, test):
    action = g.value(test, MF.action)
    result = g.value(test, MF.result)
    request = _uri_path(g.value(action, UT.request))
    data, named = _graph_data(g, action)
    db = Database(shards=2)
    for p in data:
        db.load_file(p, format="text/turtle", base="file://" + str(p))
    for label, p in named:
        db.load_file(p, graph=label, format="text/turtle", base="file://" + str(p))
    db.update(request.read_text(), base="file://" + str(request))
    exp_data, exp_named = _graph_data(g, result)
    assert isomorphic(_actual(db, None), _expected(exp_data)), "default graph differs"
    expected_graphs: dict[str, list] = {}
    for label, p in exp_named:
        expected_graphs.setdefault(label, []).append(p)
    snap = db.store.snapshot()
    actual_graphs = set()
    for gid, gi in snap.named.items():
        if gi.n_triples:
            actual_graphs.add(snap.dictionary.key(gid)[1:-1])
    want = {k for k, ps in expected_graphs.items() if len(_expected(ps))}
    assert actual_graphs == want
    for label in want:
        assert isomorphic(_actual(db, label), _expected(expected_graphs[label])), f"graph <{label}> differs"
