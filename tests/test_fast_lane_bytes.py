"""The HTTP fast lane (server/app.py FastLaneProtocol) answers byte for byte what
the ordinary ASGI path answers: status line, headers (CORS, Vary, Content-Type,
Content-Length, X-Request-Id) and body, for every result format and the query
kinds with their own fast programs (point lookups, templates, CONSTRUCT,
DESCRIBE, small answers from cached term bytes), repeated and unique texts."""

from __future__ import annotations

import asyncio
import re

import pytest

from bench import lubm
from bench.lane_profile import make_protocol, request
from engine.database import Database

UB = "PREFIX ub: <http://swat.cse.lehigh.edu/onto/univ-bench.owl#>\n"
D = "http://www.Department0.University0.edu"
QUERIES = [
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}",
    "SELECT ?s ?p WHERE {{ ?s ?p <{c}> }}",
    "SELECT ?n ?e WHERE {{ <{c}> ub:name ?n ; ub:emailAddress ?e }}",
    "SELECT ?s WHERE {{ ?s ub:advisor <{c}> }} LIMIT 2",
    "ASK {{ <{c}> ub:worksFor ?d }}",
    "CONSTRUCT {{ <{c}> ub:name ?n }} WHERE {{ <{c}> ub:name ?n }}",
    "DESCRIBE <{c}>",
    "SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY ?n",
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }} ORDER BY DESC(?o) ?p",
    "SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY DESC(?n) LIMIT 2",
    "SELECT DISTINCT ?k WHERE {{ ?s ub:advisor <{c}> . ?s ub:takesCourse ?k }} LIMIT 10",
]
ENTITIES = [f"{D}/FullProfessor{i}" for i in range(3)] + [f"{D}/GraduateStudent{i}" for i in range(2)] + [f"{D}/None"]
ACCEPTS = [None, "application/sparql-results+json", "application/sparql-results+xml", "text/csv",
           "text/tab-separated-values", "application/n-triples", "text/turtle", "*/*"]


@pytest.fixture(scope="module")
def lane(tmp_path_factory):
    path = tmp_path_factory.mktemp("lane") / "d.nt"
    lubm.generate(path, triples=6000, seed=3)
    db = Database()
    db.load_file(str(path))
    loop = asyncio.new_event_loop()
    proto, tr = make_protocol(db, loop)
    yield proto, tr, loop
    loop.close()


def _answer(proto, tr, loop, req: bytes) -> tuple[bytes, bool]:
    """(the answer's bytes with the date and request id blanked, answered inline)."""
    tr.out.clear()
    proto.data_received(req)
    inline = bool(tr.out)
    for _ in range(2000):
        if tr.out and (proto.cycle is None or proto.cycle.response_complete):
            break
        loop.run_until_complete(asyncio.sleep(0.001))
    if proto.timeout_keep_alive_task is not None:
        proto.timeout_keep_alive_task.cancel()
        proto.timeout_keep_alive_task = None
    out = b"".join(tr.out)
    out = re.sub(rb"date: [^\r]*", b"date: -", out)
    return re.sub(rb"x-request-id: [^\r]*", b"x-request-id: -", out), inline


def test_the_lane_answers_what_the_ordinary_path_answers(lane):
    proto, tr, loop = lane
    from server.app import _edge_of

    edge = _edge_of(proto.app)[0]
    assert edge is not None
    inline = 0
    for i, q in enumerate(QUERIES):
        for j, c in enumerate(ENTITIES):
            text = UB + q.format(c=c) + f"# {i}-{j}\n"
            for acc in ACCEPTS:
                req = request(text, acc) if acc is not None else request(text).replace(
                    b"Accept: application/sparql-results+json\r\n", b"")
                if j % 2:  # a browser's CORS request: the CORS headers, on both paths alike
                    req = req.replace(b"\r\n\r\n", b"\r\nOrigin: http://app.example\r\n\r\n", 1)
                got, was_inline = _answer(proto, tr, loop, req)
                assert (b"access-control-allow-origin: *\r\n" in got) == bool(j % 2)
                inline += was_inline
                orig = edge.answer_inline, edge.answer_get
                edge.answer_inline = lambda scope, qs: None  # the lane declines: the ASGI path answers
                edge.answer_get = lambda scope, fields, qs: None
                try:
                    want, was = _answer(proto, tr, loop, req)
                finally:
                    edge.answer_inline, edge.answer_get = orig
                assert not was
                assert got == want, (text, acc)
    assert inline > len(QUERIES) * len(ENTITIES)  # the lane did answer most of them
