"""Query texts of ``application/sparql-query`` POST bodies read from their UTF-8
bytes (engine.sparql.normalize.body_normalize, the lane's ``_body_hit_job`` in
server/api/sparql.py): whatever layouts were learned before, the reading is
either "don't know" or exactly :func:`normalize` of the decoded text; over HTTP,
bodies of a known template read from their bytes answer what the same texts
answer when parsed, errors included."""

from __future__ import annotations

import json

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sparql import normalize as norm
from tests.test_lane_raw_shapes import COMMENTS, IRIS, _loaded
from tests.test_normalize import PIECES, WS

#: comments a body may carry besides those of the URL test: non-ASCII, a backslash, a quote late
BODY_COMMENTS = COMMENTS + ["# é'\n", "#\\\n", "# a\\'b\n", "# x\xa0y\n", "#\u2028\n"]


def _text(data, pieces) -> str:
    out = []
    for p in pieces:
        if p == "<http://e/x>" and data.draw(st.booleans()):
            p = data.draw(st.sampled_from(IRIS + ["<http://e/\xa0>", "<http://e/\u2028>"]))
        out.append(p)
        out.append(data.draw(st.sampled_from([" ", " "] + WS + BODY_COMMENTS)))
    return "".join(out)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_body_reading_is_normalize_or_nothing(data):
    n = data.draw(st.integers(1, 10))
    pieces = data.draw(st.lists(st.sampled_from(PIECES + ["<http://e/x>"] * 4), min_size=n, max_size=n))
    for _ in range(3):  # the first text of a layout teaches it, the next ones are read with it
        text = _text(data, pieces)
        got = norm.body_normalize(text.encode("utf-8"))
        if got is not None:
            assert got == norm.normalize(text), text


def test_body_reading_examples():
    norm._BODY_LAYOUTS.clear()
    first = "SELECT ?o WHERE { <http://e/s1> <http://e/p> ?o } # one\n"
    assert norm.body_normalize(first.encode()) == norm.normalize(first)
    other = "SELECT ?o WHERE { <http://e/s2> <http://e/p> ?o } # two\n"
    got = norm.body_normalize(other.encode())
    assert got == norm.normalize(other) and got[1] == ["<http://e/s2>", "<http://e/p>", ""]
    # a quote in the new slot could end a string begun before it: not read as that layout's
    # slot (a layout of its own, learned from the text itself)
    q2 = other.replace("s2", "s'2")
    assert norm.body_normalize(q2.encode()) == norm.normalize(q2)
    assert norm.body_normalize(other.replace("s2", "s'3").encode()) == norm.normalize(other.replace("s2", "s'3"))
    # an IRI inside a string is no slot: that layout is never read from the bytes
    lit = 'SELECT ?o WHERE { ?s <http://e/p> "a <http://e/s1> b" }'
    assert norm.body_normalize(lit.encode()) == norm.normalize(lit)
    assert norm.body_normalize(lit.replace("s1", "s2").encode()) is None
    # bytes that are not UTF-8, in a new IRI slot or in a comment: never read as text
    assert norm.body_normalize(other.encode().replace(b"s2", b"\xff")) is None
    assert norm.body_normalize(other.encode().replace(b"two", b"t\xffo")) is None
    # a comment with a quote: the rest of its line is layout, a new layout (learned: the text's own)
    q = other.replace("two", "it's")
    assert norm.body_normalize(q.encode()) == norm.normalize(q)


EX = "http://example.org/"


@pytest.fixture(scope="module")
def server():
    from tests.conftest import start_server

    s = start_server(None)
    try:
        yield _loaded(s)
    finally:
        s.stop()


def _post(s, body: bytes, accept: str = "application/sparql-results+json"):
    r = requests.post(s.url + "/sparql", data=body,
                      headers={"Accept": accept, "Content-Type": "application/sparql-query"})
    return r.status_code, r.headers.get("content-type"), r.content


def test_template_bodies_read_from_bytes_answer_as_parsed(server, monkeypatch):
    from server.api import sparql

    tpl = "SELECT ?o ?n WHERE {{ <{c}> <" + EX + "p> ?o ; <" + EX + "q> ?n }} # {k}\n"
    consts = [f"{EX}s{i}" for i in range(5)] + [f"{EX}none", f"{EX}o1", "urn:x:y"]
    hits = []
    real = sparql._HitJob.__call__

    def spy(self, deadline):
        hits.append(self.hit[1])
        return real(self, deadline)

    monkeypatch.setattr(sparql._HitJob, "__call__", spy)
    got = [_post(server, tpl.format(c=c, k=i).encode()) for i, c in enumerate(consts * 2)]
    assert len(hits) >= len(consts)  # the texts after the first went the raw way
    monkeypatch.setattr(sparql, "_body_hit_job", lambda *a: None)  # the raw reading off: parsed
    want = [_post(server, tpl.format(c=c, k=f"p{i}").encode()) for i, c in enumerate(consts * 2)]
    assert got == want
    rows = json.loads(got[1][2])["results"]["bindings"]
    assert rows == [{"o": {"type": "uri", "value": f"{EX}o1"}, "n": {"type": "literal", "value": "n1"}}]


def test_template_bodies_read_from_bytes_negotiate_and_fail_alike(server):
    tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "p> ?o }} # {k}\n"
    _post(server, tpl.format(c=f"{EX}s0", k="learn").encode())
    _post(server, tpl.format(c=f"{EX}s1", k="learn2").encode())
    status, ctype, body = _post(server, tpl.format(c=f"{EX}s2", k="x").encode(), accept="text/csv")
    assert status == 200 and ctype.startswith("text/csv") and body.splitlines()[1] == f"{EX}o2".encode()
    status, _, body = _post(server, tpl.format(c=f"{EX}s3", k="y").encode(), accept="image/png")
    assert status == 406 and json.loads(body)["error"] == "not_acceptable"
    # invalid UTF-8 where the constant goes, or in the comment: the ordinary path's 400
    for bad in (tpl.format(c=f"{EX}s4", k="z").encode().replace(b"s4", b"\xff"),
                tpl.format(c=f"{EX}s4", k="z\xffz").encode("latin-1")):
        status, _, body = _post(server, bad)
        assert status == 400 and b"Traceback" not in body
