"""Anchored texts of a never-measured shape probed inline on the HTTP lane
(server/api/anchored.py, ``_probe_anchored`` in server/api/sparql.py): a first-seen
selective text that is no template (VALUES, OPTIONAL, an aggregate, a UNION, a BIND)
is answered inline at its first sighting, byte for byte as the ordinary path
answers it, instead of twice in the thread pool while its cost is learned; a text
that is not anchored (a class scan, a variable-predicate scan, a closure path, GRAPH)
still goes to the pool first; nothing is probed while another query runs; and
``anchored`` itself says yes exactly for the patterns reached from constants."""

from __future__ import annotations

from urllib.parse import quote_plus

import pytest

from engine.sparql.parser import parse_query
from server.api import sparql
from server.api.anchored import anchored
from tests.test_lane_post import FORM, UB, D, _feed, _get, _post, _same, server  # noqa: F401 - the fixture

C = f"{D}/FullProfessor0"
ANCHORED = [
    "SELECT ?x ?n WHERE {{ VALUES ?x {{ <{c}> <{D}/FullProfessor1> }} ?x ub:name ?n }}",
    "SELECT ?n ?e WHERE {{ <{c}> ub:name ?n OPTIONAL {{ <{c}> ub:emailAddress ?e }} }}",
    "SELECT (COUNT(?s) AS ?k) WHERE {{ ?s ub:advisor <{c}> }}",
    "SELECT ?x WHERE {{ {{ <{c}> ub:teacherOf ?x }} UNION {{ ?x ub:advisor <{c}> }} }}",
    "SELECT ?s ?m WHERE {{ ?s ub:advisor <{c}> BIND(STRLEN(STR(?s)) AS ?m) }} ORDER BY ?m",
    "SELECT ?s ?c WHERE {{ ?s ub:advisor <{c}> . ?s ub:takesCourse ?c FILTER(?c != <{c}>) }}",
    "SELECT ?o WHERE {{ <{c}> ^ub:advisor/ub:takesCourse ?o }}",
]
NOT_ANCHORED = [
    "SELECT ?x WHERE {{ ?x a ub:FullProfessor }} LIMIT 3",
    "SELECT ?x ?y WHERE {{ ?x ub:advisor ?y }} LIMIT 3",
    "SELECT ?x WHERE {{ <{c}> ub:worksFor/ub:subOrganizationOf* ?x }}",
    "SELECT ?x WHERE {{ GRAPH ?g {{ <{c}> ?p ?x }} }}",
    "SELECT ?x WHERE {{ ?x ub:name ?n FILTER EXISTS {{ ?x ub:advisor <{c}> }} }}",
    "SELECT ?x WHERE {{ VALUES ?x {{ " + " ".join(f"<{D}/X{i}>" for i in range(70)) + " }} ?x ub:name ?n }}",
]


def _renamed(text: str, tag: str) -> str:
    """The text with every variable renamed: a skeleton (and cost shape) never seen."""
    import re

    return re.sub(r"\?([A-Za-z]\w*)", rf"?\1_{tag}", text)


def test_anchored_patterns():
    for t in ANCHORED:
        assert anchored(parse_query(UB + t.format(c=C, D=D))), t
    for t in NOT_ANCHORED:
        assert not anchored(parse_query(UB + t.format(c=C, D=D))), t
    # the other forms, datasets
    assert not anchored(parse_query(f"DESCRIBE ?x WHERE {{ ?x ?p <{C}> }}"))
    assert anchored(parse_query(f"CONSTRUCT {{ ?x ?p <{C}> }} WHERE {{ ?x ?p <{C}> }}"))
    assert not anchored(parse_query(f"SELECT * FROM <{D}> WHERE {{ ?x ?p <{C}> }}"))
    assert anchored(parse_query(f"ASK {{ <{C}> ?p ?o . ?o ?q ?r }}"))
    assert not anchored(parse_query(f"ASK {{ <{C}> ?p ?o . ?x ?q ?r }}"))


@pytest.fixture()
def roomy(monkeypatch):
    """Inline caps no loaded machine reaches (the path taken, not the timing, is tested)."""
    from server.api import common

    monkeypatch.setattr(common, "INLINE_PROBE", 30.0)
    monkeypatch.setattr(common, "INLINE_BUDGET", 30.0)


@pytest.mark.parametrize("kind", ["post", "form", "get"])
def test_first_seen_anchored_texts_are_probed_inline_with_the_ordinary_bytes(server, roomy, kind):  # noqa: F811
    db = server[1].state.db
    probes = sparql.ANCHORED_PROBES[0]
    n = 0
    for i, t in enumerate(ANCHORED):
        text = UB + _renamed(t.format(c=C, D=D), f"{kind}{i}")
        req = {"post": lambda x: _post(x), "form": lambda x: _post("query=" + quote_plus(x), FORM),
               "get": _get}[kind](text)
        # (a fast shape, e.g. a chain with a FILTER, is probed inline as ever: not counted here)
        n += db.shape_key(text, "http://127.0.0.1:7878/sparql") is None
        assert _same(server, [req]), text  # (inline at its first sighting)
    assert n >= 4 and sparql.ANCHORED_PROBES[0] - probes == n


def test_texts_not_anchored_go_to_the_pool_first(server, roomy):  # noqa: F811
    probes = sparql.ANCHORED_PROBES[0]
    for i, t in enumerate(NOT_ANCHORED):
        text = UB + _renamed(t.format(c=C, D=D), f"na{i}")
        out, inline, _closed = _feed(server, [_post(text)], 1, True)
        assert not inline and out.startswith(b"HTTP/1.1 200"), text
    assert sparql.ANCHORED_PROBES[0] == probes


def test_nothing_is_probed_while_another_query_runs(server, roomy):  # noqa: F811
    _connect, edge, _loop = server
    state = edge.state
    probes = sparql.ANCHORED_PROBES[0]
    state.running += 1  # (a query under way in the pool)
    try:
        text = UB + _renamed(ANCHORED[0].format(c=C, D=D), "busy")
        out, inline, _closed = _feed(server, [_post(text)], 1, True)
    finally:
        state.running -= 1
    assert not inline and out.startswith(b"HTTP/1.1 200")
    assert sparql.ANCHORED_PROBES[0] == probes


def test_a_first_seen_anchored_text_with_a_request_dataset_is_probed_inline(server, roomy):  # noqa: F811
    """``default-graph-uri`` / ``named-graph-uri`` (the general parameter path, never a kept
    answer): an anchored text is still probed inline, with the ordinary path's bytes."""
    probes = sparql.ANCHORED_PROBES[0]
    g = quote_plus(D)
    for i, t in enumerate(ANCHORED[:3]):
        text = UB + _renamed(t.format(c=C, D=D), f"ds{i}")
        for params in (f"default-graph-uri={g}", f"named-graph-uri={g}&default-graph-uri={g}"):
            req = (f"GET /sparql?query={quote_plus(text)}&{params} HTTP/1.1\r\nHost: 127.0.0.1:7878\r\n"
                   "Accept: text/csv\r\n\r\n").encode()
            assert _same(server, [req]), (text, params)
    assert sparql.ANCHORED_PROBES[0] - probes >= 3

