"""GROUP_CONCAT over a few rows joined in plain Python (engine/exec/aggregates.py
``_few_concat``): the same ids as the column-wise path and the same answers as pyoxigraph on
random graphs (simple, typed, language-tagged and escaped strings, numbers, IRIs and blank
nodes making a group an error, DISTINCT, separators, empty groups), and the path is taken."""

from __future__ import annotations

import pytest

from engine.exec import aggregates as AG
from tests.test_engine_classes_oracle import P, _graph, _jindou_rows, _norm, _ox_rows, both_stores

pyoxigraph = pytest.importorskip("pyoxigraph")


@pytest.fixture(scope="module", params=[21, 22])
def stores(request):
    return both_stores(_graph(request.param, 900))


def _concat_sets(rows):
    """A group's joined string compared as the multiset of its parts (the order within a
    group is each engine's row order), without a language tag (Oxigraph keeps the tag its
    values share, as CONCAT does; Jindou answers a simple literal, column-wise too)."""
    out = []
    for r in _norm(rows):
        out.append(tuple(tuple(sorted(x[1:x.rindex('"')].split("|"))) if isinstance(x, str) and x[:1] == '"' else x
                         for x in r))
    return sorted(out, key=repr)


QUERIES = [
    f'SELECT ?s (GROUP_CONCAT(?o; separator="|") AS ?g) WHERE {{ ?s {P[1]} ?o FILTER(isLiteral(?o) && (datatype(?o) = <http://www.w3.org/2001/XMLSchema#string> || lang(?o) != "")) }} GROUP BY ?s',
    f'SELECT ?s (GROUP_CONCAT(?o; separator="|") AS ?g) WHERE {{ ?s {P[2]} ?o }} GROUP BY ?s',
    f'SELECT ?s (GROUP_CONCAT(DISTINCT ?o; separator="|") AS ?g) WHERE {{ ?s {P[3]} ?o FILTER(isLiteral(?o) && !isNumeric(?o)) }} GROUP BY ?s',
    f'SELECT (GROUP_CONCAT(?o; separator="|") AS ?g) WHERE {{ ?s {P[1]} ?o FILTER(?o = "nothing") }}',
]


@pytest.mark.parametrize("q", QUERIES)
def test_few_concat_equals_pyoxigraph_and_the_columns(stores, q, monkeypatch):
    db, ox = stores
    before = AG._FEW_CONCAT_CALLS[0]
    got = _jindou_rows(db, q)
    assert AG._FEW_CONCAT_CALLS[0] > before  # the plain-Python path answered
    assert _concat_sets(got) == _concat_sets(_ox_rows(ox, q))
    monkeypatch.setattr(AG, "_FEW_CONCAT_ROWS", -1)
    assert sorted(_norm(_jindou_rows(db, q + " ")), key=repr) == sorted(_norm(got), key=repr)
