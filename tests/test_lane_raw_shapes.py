"""Query texts read from their URL bytes (engine.sparql.normalize.raw_normalize,
the lane's ``_hit_job`` in server/api/sparql.py): whatever layouts were learned
before and however the text is percent-encoded, the raw reading is either
"don't know" or exactly :func:`normalize` of the decoded text; over HTTP, texts
of a known template read from their bytes answer what the same texts answer
when parsed, errors included."""

from __future__ import annotations

import json
import re
from urllib.parse import quote, quote_plus

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sparql import normalize as norm
from server.api.common import _unquote_plus
from tests.test_lane_repeated_texts import template_hit_spy
from tests.test_normalize import PIECES, WS

#: IRI references a parameter slot may be swapped for (quotes, '#', escapes, spaces, non-ASCII)
IRIS = ["<http://e/x>", "<http://e/y>", "<http://e/'q'>", "<http://e/a#b>", "<a b>", "<http://e/é>",
        "<http://e/%41>", "<urn:x>", "<http://e/a\"b>", "<>", "<http://e/x>#c"]
COMMENTS = ["# c\n", "#'\n", '#"\n', "# <http://e/x>\n", "#é\n", "#\n", "# a'b \"c\n", "#\r\n"]


def _encode(text: str, how: str) -> bytes:
    if how == "quote":
        raw = quote(text, safe="")
    elif how == "plus":
        raw = quote_plus(text, safe="")
    elif how == "subdelims":  # sub-delimiters (the quote among them) left as they are
        raw = quote(text, safe="/:?@!$'()*,;=")
    elif how == "browser":  # WHATWG's query set: braces, brackets, |, ^, ` and \ raw (+ & % encoded)
        raw = quote(text, safe="/:?@!$()*,;={}|^[]`\\")
    elif how == "raw":  # ... and quotes and angle brackets raw too (a hand-made URL)
        raw = quote(text, safe="/:?@!$'()*,;={}|^[]`\\\"<>")
    else:  # lower-case escapes
        raw = re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(text, safe=""))
    return raw.encode("ascii")


def _text(data, pieces, iris=IRIS, comments=COMMENTS) -> str:
    """The pieces joined by drawn white space or comments, some IRI slots swapped for ``iris``."""
    out = []
    for p in pieces:
        if p == "<http://e/x>" and data.draw(st.booleans()):
            p = data.draw(st.sampled_from(iris))
        out.append(p)
        out.append(data.draw(st.sampled_from([" ", " "] + WS + comments)))
    return "".join(out)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_raw_reading_is_normalize_or_nothing(data):
    n = data.draw(st.integers(1, 10))
    pieces = data.draw(st.lists(st.sampled_from(PIECES + ["<http://e/x>"] * 4), min_size=n, max_size=n))
    for _ in range(3):  # the first text of a layout teaches it, the next ones are read with it
        text = _text(data, pieces)
        payload = _encode(text, data.draw(st.sampled_from(["quote", "plus", "subdelims", "lower", "browser", "raw"])))
        assert _unquote_plus(payload) == text
        got = norm.raw_normalize(payload, _unquote_plus)
        if got is not None:
            assert got == norm.normalize(text), text


def test_raw_reading_examples():
    norm._RAW_LAYOUTS.clear()
    first = "SELECT ?o WHERE { <http://e/s1> <http://e/p> ?o } # one\n"
    assert norm.raw_normalize(_encode(first, "quote"), _unquote_plus) == norm.normalize(first)
    other = "SELECT ?o WHERE { <http://e/s2> <http://e/p> ?o } # two\n"
    got = norm.raw_normalize(_encode(other, "quote"), _unquote_plus)
    assert got == norm.normalize(other) and got[1] == ["<http://e/s2>", "<http://e/p>", ""]
    # a quote in the new slot could end a string begun before it: not read from the bytes
    assert norm.raw_normalize(_encode(other.replace("s2", "s'2"), "quote"), _unquote_plus) is None
    # an IRI inside a string is no slot: that layout is never read from the bytes
    lit = 'SELECT ?o WHERE { ?s <http://e/p> "a <http://e/s1> b" }'
    assert norm.raw_normalize(_encode(lit, "quote"), _unquote_plus) == norm.normalize(lit)
    assert norm.raw_normalize(_encode(lit.replace("s1", "s2"), "quote"), _unquote_plus) is None
    # bytes that are not UTF-8 in a new slot: the caller decodes (and answers the error)
    assert norm.raw_normalize(_encode(other, "quote").replace(b"s2", b"%FF"), _unquote_plus) is None


EX = "http://example.org/"


@pytest.fixture(scope="module")
def server():
    from tests.conftest import start_server

    s = start_server(None)
    try:
        yield _loaded(s)
    finally:
        s.stop()


def _loaded(s):
    body = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n<{EX}s{i}> <{EX}q> \"n{i}\" .\n" for i in range(5))
    r = requests.post(s.url + "/store?default", data=body.encode(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 204
    return s


def _ask(s, text: str, accept: str = "application/sparql-results+json"):
    r = requests.get(s.url + "/sparql?query=" + quote(text, safe=""), headers={"Accept": accept})
    return r.status_code, r.headers.get("content-type"), r.content


def _post(s, body: bytes, accept: str = "application/sparql-results+json"):
    r = requests.post(s.url + "/sparql", data=body,
                      headers={"Accept": accept, "Content-Type": "application/sparql-query"})
    return r.status_code, r.headers.get("content-type"), r.content


#: a text sent as a GET's URL (read by ``raw_normalize``) or as a POST's sparql-query body
#: (``body_normalize``), and the lane's reading of it to switch off for the parsed answers
SENDERS = {"get": (_ask, "_hit_job"), "post": (lambda s, text, **kw: _post(s, text.encode(), **kw), "_body_hit_job")}


@pytest.mark.parametrize("how", sorted(SENDERS))
def test_template_texts_read_from_bytes_answer_as_parsed(server, monkeypatch, how):
    from server.api import sparql

    send, reader = SENDERS[how]
    tpl = "SELECT ?o ?n WHERE {{ <{c}> <" + EX + "p> ?o ; <" + EX + "q> ?n }} # {k}\n"
    consts = [f"{EX}s{i}" for i in range(5)] + [f"{EX}none", f"{EX}o1", "urn:x:y"]
    hits = template_hit_spy(monkeypatch)
    got = [send(server, tpl.format(c=c, k=f"{how}{i}")) for i, c in enumerate(consts * 2)]
    assert len(hits) >= len(consts)  # the unique texts after the first went the raw way
    # the same texts with the raw reading off: parsed
    monkeypatch.setattr(sparql, reader, lambda *a: None)
    want = [send(server, tpl.format(c=c, k=f"{how}p{i}")) for i, c in enumerate(consts * 2)]
    assert got == want
    rows = json.loads(got[1][2])["results"]["bindings"]
    assert rows == [{"o": {"type": "uri", "value": f"{EX}o1"}, "n": {"type": "literal", "value": "n1"}}]


@pytest.mark.parametrize("how", sorted(SENDERS))
def test_template_texts_read_from_bytes_negotiate_and_fail_alike(server, how):
    send = SENDERS[how][0]
    tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "p> ?o }} # {k}\n"
    send(server, tpl.format(c=f"{EX}s0", k=how + "learn"))
    send(server, tpl.format(c=f"{EX}s1", k=how + "learn2"))
    status, ctype, body = send(server, tpl.format(c=f"{EX}s2", k="x"), accept="text/csv")
    assert status == 200 and ctype.startswith("text/csv") and body.splitlines()[1] == f"{EX}o2".encode()
    status, _, body = send(server, tpl.format(c=f"{EX}s3", k="y"), accept="image/png")
    assert status == 406 and json.loads(body)["error"] == "not_acceptable"
    # invalid UTF-8 where the constant goes (or, in a body, in the comment): the decoder's 400
    if how == "get":
        r = requests.get(server.url + "/sparql?query=" + quote(tpl.format(c=f"{EX}s4", k="z"), safe="").replace(
            "s4", "%FF"))
        assert r.status_code == 400 and "Traceback" not in r.text
    else:
        for bad in (tpl.format(c=f"{EX}s4", k="z").encode().replace(b"s4", b"\xff"),
                    tpl.format(c=f"{EX}s4", k="z\xffz").encode("latin-1")):
            status, _, body = _post(server, bad)
            assert status == 400 and b"Traceback" not in body


def test_template_texts_read_from_bytes_see_writes(server):
    """A write makes a new snapshot: the next text read from its bytes runs the shape's
    program of that snapshot (the template's kept programs belong to the old one)."""
    tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "w> ?o }} # {k}\n"
    for k in range(3):  # learn the layout and the template, and keep a program
        assert _ask(server, tpl.format(c=f"{EX}s{k}", k=f"w{k}"))[0] == 200
    before = json.loads(_ask(server, tpl.format(c=f"{EX}s1", k="before"))[2])["results"]["bindings"]
    assert before == []
    r = requests.post(server.url + "/update", data=f"INSERT DATA {{ <{EX}s1> <{EX}w> <{EX}new> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    for k in range(3):
        rows = json.loads(_ask(server, tpl.format(c=f"{EX}s1", k=f"after{k}"))[2])["results"]["bindings"]
        assert rows == [{"o": {"type": "uri", "value": f"{EX}new"}}]
