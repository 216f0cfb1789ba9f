"""Repeated POSTed query texts on the HTTP lane (``post_answer`` in server/api/sparql.py):
an ``application/sparql-query`` body and a form body (``query=...``) sent again are
answered from the answers kept for the store's current snapshot (``LaneAnswers``), as a
repeated GET's query string is, with the bytes the uncached path answers; a write (an
update, or a stream's absorbed elements) between two identical requests gives the new
answer; Accept and dataset parameters are part of what is kept."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import orjson
import pytest
import requests

from tests.test_lane_repeated_texts import template_hit_spy

EX = "http://example.org/"
SRJ = "application/sparql-results+json"
QUERY_TYPE = "application/sparql-query"
FORM_TYPE = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def server():
    from tests.conftest import start_server

    s = start_server(None)
    try:
        nt = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n<{EX}s{i}> <{EX}q> \"n{i}\" .\n" for i in range(5))
        r = requests.post(s.url + "/store?default", data=nt.encode(),
                          headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 204
        r = requests.post(s.url + "/store?graph=" + quote(EX + "graph1", safe=""),
                          data=f"<{EX}s1> <{EX}p> <{EX}g> .\n".encode(),
                          headers={"Content-Type": "application/n-triples"})
        assert r.status_code in (201, 204)
        yield s
    finally:
        s.stop()


def _post(s, text: str, accept: str = SRJ, kind: str = "query", qs: str = ""):
    """(status, content type, body) of ``text`` POSTed as a query body or a form body."""
    if kind == "query":
        data, ctype = text.encode(), QUERY_TYPE
    else:
        data, ctype = ("query=" + quote_plus(text, safe="")).encode(), FORM_TYPE
    r = requests.post(s.url + "/sparql" + qs, data=data, headers={"Content-Type": ctype, "Accept": accept})
    return r.status_code, r.headers.get("content-type"), r.content


def _learn(s, tpl: str, kind: str, accept: str = SRJ) -> None:
    """Teach the server the template of ``tpl`` (three texts of it, new constants each)."""
    for i in range(3):
        assert _post(s, tpl.format(c=f"{EX}s{i}", k=f"learn{kind}{i}"), accept, kind)[0] == 200


def _kept(monkeypatch, **kw):
    from server.api import sparql

    kept = sparql.LaneAnswers(**kw)
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    return kept


FAMILIES = {  # (each a skeleton of its own, per POST kind: the engine keeps one template per skeleton)
    "ask": ("ASK {{ <{c}> <" + EX + "p> ?o }} # {k} {kind}\n", SRJ),
    "select": ("SELECT ?o ?n WHERE {{ <{c}> <" + EX + "p> ?o ; <" + EX + "q> ?n }} # {k} {kind}\n", SRJ),
    "select-xml": ("SELECT ?n WHERE {{ <{c}> <" + EX + "q> ?n }} # {k} {kind}\n", "application/sparql-results+xml"),
    "describe": ("DESCRIBE <{c}> # {k} {kind}\n", "application/n-triples"),
}


@pytest.mark.parametrize("kind", ["query", "form"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_repeated_posts_are_answered_from_kept_answers_as_uncached(server, monkeypatch, family, kind):
    from server.api import sparql

    tpl, accept = FAMILIES[family]
    tpl = tpl.replace("{kind}", kind + "-" + family)
    kept = _kept(monkeypatch)
    _learn(server, tpl, kind, accept)
    hits = template_hit_spy(monkeypatch)
    texts = [tpl.format(c=c, k="kept") for c in (f"{EX}s1", f"{EX}s3", f"{EX}none")]
    got = [_post(server, t, accept, kind) for t in texts for _ in range(4)]
    # a text's first two sightings run (the first answer is not kept), the other two are kept answers
    assert kept.served == 2 * len(texts) and len(hits) == 2 * len(texts)
    assert all(g[0] == 200 for g in got)
    # uncached: nothing kept, and then the text path (no template hit at all)
    _kept(monkeypatch, max_body=-1)
    assert [_post(server, t, accept, kind) for t in texts for _ in range(4)] == got
    monkeypatch.setattr(sparql, "_hit_job", lambda *a: None)
    monkeypatch.setattr(sparql, "_body_hit_job", lambda *a: None)
    assert [_post(server, t, accept, kind) for t in texts for _ in range(4)] == got
    assert got[0] == got[3] and got[0] != got[8]  # (the store has no <none>)


def test_a_body_and_a_query_string_of_the_same_bytes_are_not_one_key(server, monkeypatch):
    """A query body's kept answer is tagged: a form body or GET whose bytes are equal is another key."""
    from server.api import sparql

    kept = _kept(monkeypatch)
    tpl = "ASK {{ <{c}> <" + EX + "q> ?o }} # {k} tag\n"
    _learn(server, tpl, "query")
    text = tpl.format(c=f"{EX}s2", k="tag")
    for _ in range(3):
        _post(server, text)
    assert kept.served == 1 and all(len(k) == 4 and k[3] is True for k in kept.map)
    assert sparql.LaneAnswers.body_key
    work = type("W", (), {"repeat": True, "base": "b", "accept": SRJ})()
    monkeypatch.setitem(sparql._BODY_TEXTS, b"x", ("ASK { <a> <b> ?o }", ()))
    monkeypatch.setitem(sparql._QS_NORMS, b"x", ("ASK { <a> <b> ?o }", ()))
    assert sparql.LaneAnswers.body_key(work, b"x") != sparql.LaneAnswers.key(work, b"x")


@pytest.mark.parametrize("kind", ["query", "form"])
def test_a_write_between_two_identical_posts_gives_the_new_answer(server, monkeypatch, kind):
    tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "w" + kind + "> ?o }} # {k}\n"
    kept = _kept(monkeypatch)
    _learn(server, tpl, kind)
    text = tpl.format(c=f"{EX}s2", k="same")
    for _ in range(3):
        assert json.loads(_post(server, text, kind=kind)[2])["results"]["bindings"] == []
    assert kept.served == 1
    r = requests.post(server.url + "/update", data=f"INSERT DATA {{ <{EX}s2> <{EX}w{kind}> <{EX}new> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    for _ in range(3):
        rows = json.loads(_post(server, text, kind=kind)[2])["results"]["bindings"]
        assert rows == [{"o": {"type": "uri", "value": f"{EX}new"}}]
    assert kept.served == 3  # (the first after the update ran anew, its answer kept for the others)
    # a stream's absorbed element is a store commit too
    pred = f"{EX}w{kind}"
    r = requests.put(server.url + f"/streams/st{kind}", json={"iri": f"{EX}st{kind}", "absorb": [pred]})
    assert r.status_code == 201, r.text
    row = orjson.dumps({"s": f"<{EX}s2>", "p": f"<{pred}>", "o": f"<{EX}newer>", "t": 1000}) + b"\n"
    r = requests.post(server.url + f"/streams/st{kind}", data=row, headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202, r.text
    for _ in range(3):
        rows = json.loads(_post(server, text, kind=kind)[2])["results"]["bindings"]
        assert sorted(b["o"]["value"] for b in rows) == [f"{EX}new", f"{EX}newer"]
    assert kept.served == 5


def test_kept_posts_are_keyed_by_accept(server, monkeypatch):
    kept = _kept(monkeypatch)
    tpl = "SELECT ?n WHERE {{ <{c}> <" + EX + "q> ?n }} # {k} accept\n"
    _learn(server, tpl, "query")
    text = tpl.format(c=f"{EX}s1", k="acc")
    for accept, want in ((SRJ, SRJ), ("text/csv", "text/csv"), ("application/sparql-results+xml",
                                                                 "application/sparql-results+xml")):
        got = [_post(server, text, accept) for _ in range(3)]
        assert all(g == got[0] and g[1].split(";")[0] == want for g in got)
        got = [_post(server, text, accept, "form") for _ in range(3)]
        assert all(g[2] == got[0][2] and g[1].split(";")[0] == want for g in got)
    assert kept.served >= 6


def test_dataset_parameters_are_never_answered_from_another_datasets_kept_answer(server, monkeypatch):
    """A text with ``default-graph-uri`` is answered for that dataset every time (not from the
    default graph's kept answer of the same text); the format parameters are."""
    kept = _kept(monkeypatch)
    tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "p> ?o }} # {k} graphs\n"
    _learn(server, tpl, "query")
    text = tpl.format(c=f"{EX}s1", k="g")
    plain = [json.loads(_post(server, text)[2])["results"]["bindings"] for _ in range(3)]
    assert kept.served == 1 and {b["o"]["value"] for b in plain[0]} == {f"{EX}o1"}
    g = "?default-graph-uri=" + quote(EX + "graph1", safe="")
    for kind in ("query", "form"):
        for _ in range(3):
            rows = json.loads(_post(server, text, kind=kind, qs=g)[2])["results"]["bindings"]
            assert rows == [{"o": {"type": "uri", "value": f"{EX}g"}}]
    for _ in range(3):
        r = requests.get(server.url + "/sparql" + g + "&query=" + quote(text, safe=""), headers={"Accept": SRJ})
        assert json.loads(r.content)["results"]["bindings"] == [{"o": {"type": "uri", "value": f"{EX}g"}}]
    assert kept.served == 1
    # result-format parameters in any order are the plain text's key with that format's Accept
    for _ in range(3):  # (a GET's first sighting runs, its second is kept, the third served)
        r = requests.get(server.url + "/sparql?format=csv&query=" + quote(text, safe=""))
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert kept.served == 2


def test_a_kept_post_checks_the_read_token_first(monkeypatch):
    from tests.conftest import start_server

    s = start_server(None, read_token="sesame")
    try:
        kept = _kept(monkeypatch)
        auth = {"Authorization": "Bearer sesame", "Content-Type": QUERY_TYPE, "Accept": SRJ}
        tpl = "ASK {{ <{c}> <" + EX + "p> ?o }} # {k} token\n"
        for i in range(3):
            assert requests.post(s.url + "/sparql", data=tpl.format(c=f"{EX}s{i}", k=i).encode(),
                                 headers=auth).status_code == 200
        text = tpl.format(c=f"{EX}s1", k="t").encode()
        for _ in range(3):
            assert requests.post(s.url + "/sparql", data=text, headers=auth).status_code == 200
        assert kept.served == 1
        r = requests.post(s.url + "/sparql", data=text, headers={**auth, "Authorization": "Bearer wrong"})
        assert r.status_code == 403
        r = requests.post(s.url + "/sparql", data=text, headers={"Content-Type": QUERY_TYPE, "Accept": SRJ})
        assert r.status_code == 401
        assert kept.served == 1
    finally:
        s.stop()


def _raw(url: str, chunks: list[bytes]) -> bytes:
    """The answer to one request sent in ``chunks`` (one write each, apart in time)."""
    import socket
    import time

    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        for i, c in enumerate(chunks):
            if i:
                time.sleep(0.05)  # (the server reads the head before the body arrives)
            s.sendall(c)
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        head, _, body = got.partition(b"\r\n\r\n")
        n = int(next(v for k, v in (ln.split(b": ", 1) for ln in head.split(b"\r\n")[1:])
                     if k.lower() == b"content-length"))
        while len(body) < n:
            body += s.recv(65536)
        return body


def test_a_post_whose_body_comes_later_has_its_head_read_once(server, monkeypatch):
    """``http.client`` (``bench sparql --alternate-http``) and requests write a POST's head and
    body apart: the lane holds the head's reading (``_held_head``) and does not read it again
    when the body comes; the answer is the one of the POST in one write."""
    from bench.client_forms import forms
    from server import app

    reads = []
    real = app.read_head

    def spy(data, pos=0):
        reads.append(pos)
        return real(data, pos)

    monkeypatch.setattr(app, "read_head", spy)
    text = "SELECT ?n WHERE { <" + EX + "s3> <" + EX + "q> ?n } # held\n"
    split = forms(text)["http.client-post-query"]
    assert len(split) == 2
    whole = [b"".join(split)]
    for _ in range(3):
        reads.clear()
        a = _raw(server.url, split)
        assert len(reads) == 1  # (the head's bytes only: the body's arrival reads nothing again)
        assert a == _raw(server.url, whole)
    assert json.loads(a)["results"]["bindings"] == [{"n": {"type": "literal", "value": "n3"}}]


def test_format_split_readings_are_kept_and_the_same(monkeypatch):
    """``_format_split`` keeps its reading of a short parameter string (a client repeating a
    text sends the same string): the kept reading is the one it computes."""
    from server.api import sparql

    monkeypatch.setattr(sparql, "_SPLITS", {})
    cases = [b"format=json&query=ASK%7B%7D", b"query=ASK%7B%7D&output=csv&results=csv",
             b"query=a&query=b", b"query=ASK%7B%7D&format=nope", b"query=ASK%7B%7D&timeout=5"]
    first = [sparql._format_split(c) for c in cases]
    assert set(sparql._SPLITS) == set(cases)
    assert first[0] == (b"query=ASK%7B%7D", "application/sparql-results+json") or first[0][0] == b"query=ASK%7B%7D"
    assert first[1][1].startswith("text/csv") and first[2] is None and first[3] is None
    assert first[4] == (b"query=ASK%7B%7D", "")  # (timeout= is read by no one: the plain text)
    again = [sparql._format_split(c) for c in cases]
    assert all(a is b for a, b in zip(again, first, strict=True))  # (kept: the same objects)
    sparql._SPLITS.clear()
    assert [sparql._format_split(c) for c in cases] == first
    long = b"query=" + b"a" * (sparql._SPLIT_KEEP + 1) + b"&format=json"
    assert sparql._format_split(long) is not None and long not in sparql._SPLITS
