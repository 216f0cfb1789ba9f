"""A query text the HTTP lane has seen before (``_hit_job`` in server/api/sparql.py,
its normalized form kept in ``_QS_NORMS``): once its template is known, the same
text sent again is answered by the template path every time (no decoding, no
parse), or from the answers kept for the current snapshot (``LaneAnswers``), with
the bytes the parsed path answers, the store's current state after an update, and
a bounded memory of texts and answers."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import requests

EX = "http://example.org/"


def serving(body: str):
    """A real server on 127.0.0.1 holding the N-Triples ``body`` (a generator for a fixture)."""
    from tests.conftest import start_server

    s = start_server(None)
    try:
        r = requests.post(s.url + "/store?default", data=body.encode(),
                          headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 204
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def server():
    yield from serving("".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n<{EX}s{i}> <{EX}q> \"n{i}\" .\n" for i in range(5)))


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


def template_hit_spy(monkeypatch) -> list:
    """The template (``hit[1]``) of every template-hit job the lane runs, in order (a
    runner's run, ``_run_runner``, included: its key)."""
    from server.api import sparql

    hits = []
    real = sparql._HitJob.__call__
    real_run = sparql._run_runner

    def spy(self, deadline):
        hits.append(self.hit[1])
        return real(self, deadline)

    def run_spy(db, r, key, *rest):
        hits.append(key)
        return real_run(db, r, key, *rest)

    monkeypatch.setattr(sparql._HitJob, "__call__", spy)
    monkeypatch.setattr(sparql, "_run_runner", run_spy)
    return hits


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_repeated_texts_take_the_template_path_and_answer_as_parsed(server, monkeypatch, family):
    from server.api import sparql

    monkeypatch.setattr(sparql, "_ANSWERS", sparql.LaneAnswers(max_body=-1))  # (no answer kept)
    tpl, accept = FAMILIES[family]
    for i in range(3):  # learn the layout and the template
        assert _get(server, tpl.format(c=f"{EX}s{i}", k=f"{family}learn{i}"), accept)[0] == 200
    hits = template_hit_spy(monkeypatch)
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
    from server.api import sparql

    kept = sparql.LaneAnswers()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    hits = template_hit_spy(monkeypatch)
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
    assert len(hits) == 6 and kept.served == 2  # (kept from the second sighting on, until the update)
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


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kept_answers_are_served_and_answer_as_parsed(server, monkeypatch, family):
    from server.api import sparql

    kept = sparql.LaneAnswers()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    tpl, accept = FAMILIES[family]
    for i in range(3):
        assert _get(server, tpl.format(c=f"{EX}s{i}", k=f"{family}klearn{i}"), accept)[0] == 200
    hits = template_hit_spy(monkeypatch)
    texts = [tpl.format(c=c, k=family + "kept") for c in (f"{EX}s1", f"{EX}s3", f"{EX}none")]
    got = [_get(server, t, accept) for t in texts for _ in range(4)]
    # two runs per text (a first sighting's answer is not kept), then kept
    assert len(hits) == 2 * len(texts) and kept.served == 2 * len(texts)
    monkeypatch.setattr(sparql, "_hit_job", lambda *a: None)
    want = [_get(server, t, accept) for t in texts for _ in range(4)]
    assert got == want
    # another Accept value is another answer
    other = "text/csv" if not family.startswith("describe") else "text/turtle"
    monkeypatch.undo()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    assert _get(server, texts[0], other)[1].split(";")[0] == other


def test_no_answer_is_kept_for_texts_that_may_answer_anew(server, monkeypatch):
    """A call of RAND / NOW / UUID / STRUUID / BNODE or of an extension function: not kept
    (a FILTER or BIND of other functions is: see tests/test_lane_kept_texts.py)."""
    from server.api import sparql

    kept = sparql.LaneAnswers()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    for tpl in ("ASK {{ <{c}> <" + EX + "p> ?pp FILTER(isIRI(?pp) && RAND() < 2) }} # {k}\n",
                "ASK {{ <{c}> <" + EX + "p> ?pp FILTER(STRLEN(STRUUID()) > 2) }} # {k}\n",
                "ASK {{ <{c}> <" + EX + "p> ?pp FILTER(<" + EX + "fn>(?pp) || true) }} # {k}\n"):
        for i in range(3):
            assert _get(server, tpl.format(c=f"{EX}s{i}", k=i), "application/json")[0] == 200
        for _ in range(3):
            assert json.loads(_get(server, tpl.format(c=f"{EX}s1", k="same"), "application/json")[2])["boolean"]
    assert kept.served == 0 and not kept.map


def test_a_filter_templates_answer_is_kept(server, monkeypatch):
    """A template with a FILTER of a deterministic function: its repeated text's answer is
    kept (the same bytes), from its second sighting."""
    from server.api import sparql

    tpl = "ASK {{ <{c}> <" + EX + "p> ?pp FILTER(isIRI(?pp)) }} # {k} kept\n"
    kept = sparql.LaneAnswers()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    for i in range(3):
        assert _get(server, tpl.format(c=f"{EX}s{i}", k=i), "application/json")[0] == 200
    hits = template_hit_spy(monkeypatch)
    got = [_get(server, tpl.format(c=f"{EX}s1", k="same"), "application/json") for _ in range(4)]
    assert len(hits) == 2 and kept.served == 2  # (the first two run, the others kept)
    assert all(g == got[0] for g in got) and json.loads(got[0][2])["boolean"]


def test_kept_answers_are_bounded(server, monkeypatch):
    from server.api import sparql

    kept = sparql.LaneAnswers(max_entries=3, max_body=60)
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    tpl, accept = FAMILIES["ask"]
    for i in range(10):
        for _ in range(2):  # (a text's answer is kept from its second sighting)
            assert _get(server, tpl.format(c=f"{EX}s{i % 5}", k=f"kbound{i}"), accept)[0] == 200
        assert len(kept.map) <= 3
    assert kept.map  # (ASK's JSON answer is under 60 bytes)
    tpl, accept = FAMILIES["describe"]  # two triples of N-Triples: over 60 bytes, never kept
    for i in range(8):
        assert _get(server, tpl.format(c=f"{EX}s{i % 4}", k="kbig"), accept)[0] == 200
    assert all(len(v[2]) <= 60 for v in kept.map.values())


def test_an_answer_run_across_a_commit_is_not_kept():
    """A commit between the snapshot number read before the run and the put: the
    answer (possibly of the old snapshot) is not kept under the new number."""
    from engine.database import Database
    from server.api.sparql import LaneAnswers

    db = Database()
    db.update(f"INSERT DATA {{ <{EX}a> <{EX}p> <{EX}b> }}")
    kept = LaneAnswers()
    key = (b"query=x", "base", None)
    assert kept.get(key, db) is None
    sn = kept.sn
    db.update(f"INSERT DATA {{ <{EX}a> <{EX}p> <{EX}c> }}")
    kept.put(key, db, ("ASK", "application/sparql-results+json", b"old"), sn)
    assert kept.get(key, db) is None and not kept.map
    sn = kept.sn
    kept.put(key, db, ("ASK", "application/sparql-results+json", b"new"), sn)
    assert kept.get(key, db)[2] == b"new"
    db.update(f"DELETE DATA {{ <{EX}a> <{EX}p> <{EX}c> }}")
    assert kept.get(key, db) is None


def test_a_text_repeated_from_its_first_sighting_becomes_a_template_hit(server, monkeypatch):
    """The first sighting of a new skeleton is parsed (and teaches the template); the
    same text sent again is then a template hit, its answer kept."""
    from server.api import sparql

    kept = sparql.LaneAnswers()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    hits = template_hit_spy(monkeypatch)
    text = "SELECT ?n ?o WHERE { <" + EX + "s4> <" + EX + "q> ?n ; <" + EX + "p> ?o } # first\n"
    got = [_get(server, text, "application/sparql-results+json") for _ in range(6)]
    assert all(g == got[0] for g in got)
    rows = json.loads(got[0][2])["results"]["bindings"]
    assert rows == [{"n": {"type": "literal", "value": "n4"}, "o": {"type": "uri", "value": f"{EX}o4"}}]
    assert hits and kept.served == 6 - 1 - len(hits) and kept.served >= 2


def test_no_answer_is_kept_for_service_texts(monkeypatch):
    """A SERVICE answer is the remote endpoint's, not the store's: never kept (the key says
    so before any run); a plain text of the same form is."""
    from types import SimpleNamespace

    from server.api import sparql

    norms = {b"q=1": ("SELECT * WHERE { SERVICE <http://r/> { ?s ?p ?o } }", ()),
             b"q=2": ("SELECT * WHERE { service <http://r/> { ?s ?p ?o } }", ()),
             b"q=3": ("SELECT * WHERE { <http://r/> ?p ?o }", ())}
    monkeypatch.setattr(sparql, "_QS_NORMS", norms)
    work = SimpleNamespace(repeat=True, base=None, accept="application/json")
    assert sparql.LaneAnswers.key(work, b"q=1") is None
    assert sparql.LaneAnswers.key(work, b"q=2") is None
    assert sparql.LaneAnswers.key(work, b"q=3") == (b"q=3", None, "application/json")
