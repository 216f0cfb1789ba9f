"""The lane's ready runners (``_Runner`` / ``_run_bound`` in server/api/sparql.py,
``engine.sparql.normalize.RawBinder``): a new text of a known template's raw layout
is read from its URL bytes with one split, one lookup and one pass over its raw
slots, and run and answered without the template path's set-up. They are taken
(a spy), answer byte for byte what the parsed path answers (new and absent
constants, comments, other predicates of one skeleton: its variants, constants
that are no parameter, a malformed IRI), see an update between two requests, and
leave repeated texts to the kept answers."""

from __future__ import annotations

import json

import pytest
import requests

from tests.test_lane_repeated_texts import _get, serving

EX = "http://example.org/"
JSON = "application/sparql-results+json"
NT = "application/n-triples"

#: {c}: the parameter; {p}: a fixed IRI (a predicate: another value is a variant of the skeleton)
FAMILIES = {
    "select": ("SELECT ?o ?n WHERE {{ <{c}> <{p}> ?o . ?o <" + EX + "q> ?n }} # {k}\n", JSON),
    "inverse": ("SELECT ?s WHERE {{ ?s <{p}> <{c}> }} # {k}\n", JSON),
    "ask": ("ASK {{ <{c}> <{p}> ?o }} # {k}\n", JSON),
    "ask-xml": ("ASK {{ <{c}> <{p}> ?o . ?o <" + EX + "q> ?n }} # {k}\n", "application/sparql-results+xml"),
    "orderby": ("SELECT ?o WHERE {{ <{c}> <{p}> ?o }} ORDER BY DESC(?o) # {k}\n", "text/csv"),
    "construct": ("CONSTRUCT {{ ?o <" + EX + "q> <{c}> }} WHERE {{ <{c}> <{p}> ?o }} # {k}\n", NT),
    "describe": ("DESCRIBE <{c}> # {k} <{p}>\n", NT),
}
PREDS = [f"{EX}p", f"{EX}r"]


@pytest.fixture(scope="module")
def server():
    yield from serving("".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i % 3}> .\n<{EX}s{i}> <{EX}r> <{EX}o{(i + 1) % 3}> .\n"
                               f"<{EX}o{i % 3}> <{EX}q> \"n{i}\" .\n" for i in range(8)) + f"<{EX}s0> <{EX}w> <{EX}o0> .\n")


def _post(s, text: str, accept: str):
    r = requests.post(s.url + "/sparql", data=text.encode(),
                      headers={"Accept": accept, "Content-Type": "application/sparql-query"})
    return r.status_code, r.headers.get("content-type"), r.content


def _state(s):
    return s.app.state.jindou


def runner_spy(monkeypatch) -> list:
    """What every call of ``_run_bound`` gave (None: no runner answered)."""
    from server.api import sparql

    out = []
    real = sparql._run_bound

    def spy(*a):
        got = real(*a)
        out.append(got)
        return got

    monkeypatch.setattr(sparql, "_run_bound", spy)
    return out


def _general(monkeypatch):
    """The parsed path only: no runner, no template path."""
    from server.api import sparql

    monkeypatch.setattr(sparql, "_run_bound", lambda *a: None)
    monkeypatch.setattr(sparql, "_hit_job", lambda *a: None)
    monkeypatch.setattr(sparql, "_body_hit_job", lambda *a: None)


@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_runners_are_taken_and_answer_as_parsed(server, monkeypatch, family, method):
    send = _get if method == "get" else _post
    tpl, accept = FAMILIES[family]
    for p in PREDS:  # learn the layout, the template and its variant, and their runners
        for i in range(3):
            assert send(server, tpl.format(c=f"{EX}s{i}", p=p, k=f"{family}{method}learn{i}"), accept)[0] == 200
    calls = runner_spy(monkeypatch)
    texts = [tpl.format(c=c, p=p, k=f"{family}{method}new{j}") for j, c in enumerate(
        [f"{EX}s3", f"{EX}s7", f"{EX}none", f"{EX}o1", "urn:x:y", f"{EX}q", f"{EX}a%20b", f"{EX}a b"])
        for p in PREDS]
    got = [send(server, t, accept) for t in texts]
    answered = [g for g in calls if g is not None]
    assert len(answered) >= 8  # (the variants' runners too)
    _general(monkeypatch)
    want = [send(server, t.replace("new", "general"), accept) for t in texts]
    assert got == want
    assert [g[0] for g in got].count(200) >= len(got) - 2


def test_a_layout_keeps_a_runner_per_variant(server):
    tpl = "SELECT ?o WHERE {{ <{c}> <{p}> ?o }} # variant {k}\n"
    for p in PREDS:
        for i in range(3):
            assert _get(server, tpl.format(c=f"{EX}s{i}", p=p, k=i), JSON)[0] == 200
    runners = _state(server).lane_runners
    both = [v for v in runners.values() if len({r.tpl for r in v}) == 2]
    assert both  # one layout, the two predicates' templates
    for p in PREDS:
        rows = json.loads(_get(server, tpl.format(c=f"{EX}s4", p=p, k="x"), JSON)[2])["results"]["bindings"]
        o = 4 % 3 if p.endswith("p") else (4 + 1) % 3
        assert rows == [{"o": {"type": "uri", "value": f"{EX}o{o}"}}]


def test_a_runner_sees_an_update_between_two_requests(server, monkeypatch):
    tpl = "SELECT ?o WHERE {{ <{c}> <" + EX + "w> ?o }} # upd {k}\n"
    for i in range(1, 4):
        assert _get(server, tpl.format(c=f"{EX}s{i}", k=f"learn{i}"), JSON)[0] == 200
    calls = runner_spy(monkeypatch)
    assert json.loads(_get(server, tpl.format(c=f"{EX}s5", k="a"), JSON)[2])["results"]["bindings"] == []
    r = requests.post(server.url + "/update", data=f"INSERT DATA {{ <{EX}s5> <{EX}w> <{EX}new> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    for k in "bc":  # (the first after the commit compiles the shape's program anew: the template path)
        rows = json.loads(_get(server, tpl.format(c=f"{EX}s5", k=k), JSON)[2])["results"]["bindings"]
        assert rows == [{"o": {"type": "uri", "value": f"{EX}new"}}]
    assert calls[0] is not None and calls[-1] is not None
    r = requests.post(server.url + "/update", data=f"DELETE DATA {{ <{EX}s5> <{EX}w> <{EX}new> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    assert json.loads(_get(server, tpl.format(c=f"{EX}s5", k="d"), JSON)[2])["results"]["bindings"] == []


def test_repeated_texts_still_get_kept_answers(server, monkeypatch):
    from server.api import sparql

    kept = sparql.LaneAnswers()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    tpl = "ASK {{ <{c}> <" + EX + "p> ?o }} # rep {k}\n"
    for i in range(3):
        assert _get(server, tpl.format(c=f"{EX}s{i}", k=f"learn{i}"), JSON)[0] == 200
    calls = runner_spy(monkeypatch)
    text = tpl.format(c=f"{EX}s6", k="same")
    got = [_get(server, text, JSON) for _ in range(4)]
    assert all(g == got[0] for g in got) and json.loads(got[0][2])["boolean"] is True
    assert calls == [calls[0]] and calls[0] is not None  # the first sighting: the runner; then repeats
    assert kept.served == 2  # (kept at the second sighting, served at the third and fourth)
