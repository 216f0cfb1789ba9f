"""Query texts of ``application/sparql-query`` POST bodies read from their UTF-8
bytes (engine.sparql.normalize.body_normalize, the lane's ``_body_hit_job`` in
server/api/sparql.py): whatever layouts were learned before, the reading is
either "don't know" or exactly :func:`normalize` of the decoded text (over HTTP:
tests/test_lane_raw_shapes.py, GET and POST alike)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sparql import normalize as norm
from tests.test_lane_raw_shapes import COMMENTS, IRIS
from tests.test_lane_raw_shapes import _text as raw_text
from tests.test_normalize import PIECES

#: comments a body may carry besides those of the URL test: non-ASCII, a backslash, a quote late
BODY_COMMENTS = COMMENTS + ["# é'\n", "#\\\n", "# a\\'b\n", "# x\xa0y\n", "#\u2028\n"]


def _text(data, pieces) -> str:
    return raw_text(data, pieces, IRIS + ["<http://e/\xa0>", "<http://e/\u2028>"], BODY_COMMENTS)


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
