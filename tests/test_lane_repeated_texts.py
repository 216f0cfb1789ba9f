"""A query text the HTTP lane has seen before (``_hit_job`` in server/api/sparql.py,
its normalized form kept in ``_QS_NORMS``): once its template is known, the same
text sent again is answered by the template path every time (no decoding, no
parse), with the bytes the parsed path answers, the store's current state after
an update, and a bounded memory of texts."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import requests

EX = "http://example.org/"


@pytest.fixture(scope="module")
def server():
    from tests.conftest import start_server

    s = start_server(None)
    try:
        body = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n<{EX}s{i}> <{EX}q> \"n{i}\" .\n" for i in range(5))
        r = requests.post(s.url + "/store?default", data=body.encode(),
                          headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 204
        yield s
    finally:
        s.stop()


def _get(s, text: str, accept: str):
    r = requests.get(s.url + "/sparql?query=" + quote(text, safe=""), headers={"Accept": accept})
    return r.status_code, r.headers.get("content-type"), r.content


#: tiny answers: ASK (true and false), a one-row SELECT, DESCRIBE of one entity. Each has a
#: skeleton of its own: the engine keeps one template per skeleton (the first learned), so
#: two texts differing only in a fixed IRI would not both be template hits
FAMILIES = {
    "ask": ("ASK {{ <{c}> <" + EX + "p> ?o }} # {k}\n", "application/sparql-results+json"),
    "ask-xml": ("ASK {{ <{c}> <" + EX + "q> ?n }} # {k}\n", "application/sparql-results+xml"),
    "select": ("SELECT ?o ?n WHERE {{ <{c}> <" + EX + "p> ?o ; <" + EX + "q> ?n }} # {k}\n",
               "application/sparql-results+json"),
    "describe": ("DESCRIBE <{c}> # {k}\n", "application/n-triples"),
}


def _spy(monkeypatch):
    from server.api import sparql

    hits = []
    real = sparql._HitJob.__call__

    def spy(self, deadline):
        hits.append(self.hit[1])
        return real(self, deadline)

    monkeypatch.setattr(sparql._HitJob, "__call__", spy)
    return hits


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_repeated_texts_take_the_template_path_and_answer_as_parsed(server, monkeypatch, family):
    from server.api import sparql

    tpl, accept = FAMILIES[family]
    for i in range(3):  # learn the layout and the template
        assert _get(server, tpl.format(c=f"{EX}s{i}", k=f"{family}learn{i}"), accept)[0] == 200
    hits = _spy(monkeypatch)
    texts = [tpl.format(c=c, k=family + "rep") for c in (f"{EX}s1", f"{EX}s3", f"{EX}none")]
    got = [_get(server, t, accept) for t in texts for _ in range(4)]  # each text four times in a row
    assert len(hits) == len(got)  # every sighting of a repeated text went the template way
    assert all(g == got[0] for g in got[:4]) and got[8] != got[0]  # (the store has no <none>)
    # the same texts with the template path off: parsed (the text path)
    monkeypatch.setattr(sparql, "_hit_job", lambda *a: None)
    want = [_get(server, t, accept) for t in texts for _ in range(4)]
    assert got == want
    assert all(status == 200 for status, _, _ in got)


def test_repeated_text_sees_an_update_between_two_identical_requests(server, monkeypatch):
    tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "w> ?o }} # {k}\n"
    ask = "ASK {{ <{c}> <" + EX + "w> ?w }} # {k}\n"  # (skeletons of their own: see FAMILIES)
    acc = "application/sparql-results+json"
    for k in range(3):
        assert _get(server, tpl.format(c=f"{EX}s{k}", k=f"learn{k}"), acc)[0] == 200
        assert _get(server, ask.format(c=f"{EX}s{k}", k=f"learn{k}"), acc)[0] == 200
    hits = _spy(monkeypatch)
    text, atext = tpl.format(c=f"{EX}s2", k="same"), ask.format(c=f"{EX}s2", k="same")
    for _ in range(2):
        assert json.loads(_get(server, text, acc)[2])["results"]["bindings"] == []
        assert json.loads(_get(server, atext, acc)[2])["boolean"] is False
    r = requests.post(server.url + "/update", data=f"INSERT DATA {{ <{EX}s2> <{EX}w> <{EX}new> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    for _ in range(2):
        rows = json.loads(_get(server, text, acc)[2])["results"]["bindings"]
        assert rows == [{"o": {"type": "uri", "value": f"{EX}new"}}]
        assert json.loads(_get(server, atext, acc)[2])["boolean"] is True
    assert len(hits) == 8
    r = requests.post(server.url + "/update", data=f"DELETE DATA {{ <{EX}s2> <{EX}w> <{EX}new> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    assert json.loads(_get(server, text, acc)[2])["results"]["bindings"] == []
    assert json.loads(_get(server, atext, acc)[2])["boolean"] is False


def test_the_lane_remembers_a_bounded_number_of_texts(server, monkeypatch):
    from server.api import sparql

    monkeypatch.setattr(sparql, "_LANE_TEXTS_MAX", 4)
    tpl, accept = FAMILIES["ask"]
    for i in range(12):
        assert _get(server, tpl.format(c=f"{EX}s{i % 5}", k=f"bound{i}"), accept)[0] == 200
        assert len(sparql._QS_NORMS) <= 4
    sparql._QS_NORMS.clear()
