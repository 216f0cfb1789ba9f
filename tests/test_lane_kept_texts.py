"""Kept answers of repeated texts that are no template hit (``_kept_run`` in
server/api/sparql.py): a VALUES block, an OPTIONAL, an aggregate, a FILTER, a UNION sent
again (GET query string, ``application/sparql-query`` body, form body) is answered from
the lane's kept answers (``LaneAnswers``) from its third sighting, with the bytes the
uncached path answers; texts whose answer may change without a write (RAND, NOW, UUID,
STRUUID, BNODE, a function named by an IRI or prefixed name, SERVICE) are never kept; a
write between two identical requests gives the new answer; Accept is part of the key."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import requests

from tests.test_lane_kept_posts import EX, SRJ, _kept, _post

TEXTS = [
    f"SELECT ?x ?o WHERE {{ VALUES ?x {{ <{EX}s1> <{EX}s3> <{EX}none> }} ?x <{EX}p> ?o }} # kt",
    f"SELECT ?n WHERE {{ VALUES (?x) {{ (<{EX}s2>) }} ?x <{EX}q> ?n }} # kt",
    f"SELECT ?o ?n WHERE {{ <{EX}s1> <{EX}p> ?o OPTIONAL {{ <{EX}s1> <{EX}nothing> ?n }} }} # kt",
    f"SELECT (COUNT(?s) AS ?k) WHERE {{ ?s <{EX}p> ?o }} # kt",
    f"SELECT ?s WHERE {{ ?s <{EX}q> ?n FILTER(?n != \"n1\") }} ORDER BY ?s # kt",
    f"ASK {{ VALUES ?x {{ <{EX}s1> }} ?x <{EX}p> ?o . ?o <{EX}p> ?z }} # kt",
    f"SELECT ?s WHERE {{ {{ ?s <{EX}p> <{EX}o1> }} UNION {{ ?s <{EX}p> <{EX}o2> }} }} # kt",
]
UNKEPT = [
    f"SELECT ?o (RAND() AS ?r) WHERE {{ <{EX}s1> <{EX}p> ?o }} # ku",
    f"SELECT ?o (NOW() AS ?r) WHERE {{ <{EX}s1> <{EX}p> ?o }} # ku",
    f"SELECT ?o (STRUUID() AS ?r) WHERE {{ VALUES ?x {{ 1 }} <{EX}s1> <{EX}p> ?o }} # ku",
    f"SELECT ?o (BNODE () AS ?r) WHERE {{ <{EX}s1> <{EX}p> ?o . <{EX}s1> <{EX}q> ?n }} # ku",
    f"SELECT ?o (uuid() AS ?r) WHERE {{ <{EX}s1> <{EX}p> ?o . <{EX}s1> <{EX}q> ?n }} # ku",
    f"SELECT ?o (<http://www.w3.org/2001/XMLSchema#string>(?o) AS ?r) WHERE {{ <{EX}s1> <{EX}p> ?o OPTIONAL "
    f"{{ ?o <{EX}q> ?z }} }} # ku",
    f"PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> SELECT ?o (xsd:string(?o) AS ?r) WHERE {{ <{EX}s1> <{EX}p> ?o "
    f"OPTIONAL {{ ?o <{EX}q> ?z }} }} # ku",
]


@pytest.fixture(scope="module")
def server():
    from tests.conftest import start_server

    s = start_server(None)
    try:
        nt = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n<{EX}s{i}> <{EX}q> \"n{i}\" .\n" for i in range(5))
        r = requests.post(s.url + "/store?default", data=nt.encode(),
                          headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 204
        yield s
    finally:
        s.stop()


def _send(s, text: str, kind: str, accept: str = SRJ):
    if kind == "get":
        r = requests.get(s.url + "/sparql?query=" + quote(text, safe=""), headers={"Accept": accept})
        return r.status_code, r.headers.get("content-type"), r.content
    return _post(s, text, accept, kind)


class _Runs:
    """Counts the engine's runs of query texts (``Database.query``) in the server."""

    def __init__(self, monkeypatch):
        from engine.database import Database

        self.n = 0
        real = Database.query

        def spy(db, *a, **k):
            self.n += 1
            return real(db, *a, **k)

        monkeypatch.setattr(Database, "query", spy)


@pytest.mark.parametrize("kind", ["query", "form", "get"])
def test_repeated_texts_of_no_template_are_kept_and_answer_as_uncached(server, monkeypatch, kind):
    from server.api import sparql

    texts = [t.replace("# kt", f"# kt {kind}") for t in TEXTS]
    kept = _kept(monkeypatch)
    runs = _Runs(monkeypatch)
    got = [_send(server, t, kind) for t in texts for _ in range(5)]
    assert all(g[0] == 200 for g in got), got
    # a text's first sighting runs, its answer not kept; a new shape's first two run in the pool
    # (their cost unknown: never inline, so not kept); then the lane runs it once and keeps its
    # answer, and every later sighting is the kept answer
    assert kept.kept_texts == len(texts)
    assert kept.served >= 2 * len(texts) and runs.n + kept.served == 5 * len(texts)
    # keyed as the lane's first lookup reads them: the body (tagged) or the query string, base, Accept
    for k in kept.map:
        assert k[2] == SRJ and k[1].endswith("/sparql")
        assert (len(k) == 4 and k[3] is True and k[0] in {t.encode() for t in texts}) if kind == "query" else (
            len(k) == 3 and k[0].startswith(b"query=") and sparql._lane_text(k[0]) in texts)
    # uncached: the same bytes
    _kept(monkeypatch, max_body=-1)
    again = [_send(server, t, kind) for t in texts for _ in range(5)]
    assert again == got
    assert got[0] == got[4] and got[0] != got[5]


@pytest.mark.parametrize("kind", ["query", "get"])
def test_texts_whose_answer_may_change_are_never_kept(server, monkeypatch, kind):
    kept = _kept(monkeypatch)
    runs = _Runs(monkeypatch)
    for t in UNKEPT:
        for _ in range(3):
            r = _send(server, t.replace("# ku", f"# ku {kind}"), kind)
            assert r[0] == 200, (t, r)
    assert kept.served == 0 and kept.kept_texts == 0 and not kept.map
    assert runs.n >= 3 * len(UNKEPT) - 6  # (a SELECT of a template's shape may go the template way)


def test_the_skeleton_rule():
    from engine.sparql.normalize import normalize
    from server.api.sparql import _text_keepable

    for t in TEXTS:
        assert _text_keepable(normalize(t)[0]), t
    for t in UNKEPT:
        assert not _text_keepable(normalize(t)[0]), t
    assert not _text_keepable(normalize(f"SELECT * {{ SERVICE <{EX}e> {{ ?s ?p ?o }} }}")[0])
    assert not _text_keepable(normalize("SELECT (ex:f (?x) AS ?y) { ?x ?p ?o }")[0])
    # a word inside a string or an IRI is no call
    assert _text_keepable(normalize("SELECT * { ?s ?p \"RAND()\" ; <http://e/now(> ?o }")[0])


@pytest.mark.parametrize("kind", ["query", "get"])
def test_a_write_between_two_identical_texts_gives_the_new_answer(server, monkeypatch, kind):
    kept = _kept(monkeypatch)
    pred = f"{EX}kw{kind}"
    text = f"SELECT ?x ?o WHERE {{ VALUES ?x {{ <{EX}s2> <{EX}s4> }} ?x <{pred}> ?o }} # w {kind}"
    for _ in range(4):  # (the second sighting run inline is kept, the later ones served)
        assert json.loads(_send(server, text, kind)[2])["results"]["bindings"] == []
    before = kept.served
    assert before >= 1
    r = requests.post(server.url + "/update", data=f"INSERT DATA {{ <{EX}s4> <{pred}> <{EX}new> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    for _ in range(5):
        rows = json.loads(_send(server, text, kind)[2])["results"]["bindings"]
        assert rows == [{"x": {"type": "uri", "value": f"{EX}s4"}, "o": {"type": "uri", "value": f"{EX}new"}}]
    assert kept.served > before  # (run anew after the update, its answer kept again for the later ones)


def test_kept_texts_are_keyed_by_accept(server, monkeypatch):
    kept = _kept(monkeypatch)
    text = TEXTS[0].replace("# kt", "# accept")
    for accept in (SRJ, "text/csv", "text/tab-separated-values", "application/sparql-results+xml"):
        for kind in ("query", "form", "get"):
            got = [_send(server, text, kind, accept) for _ in range(4)]
            assert all(g == got[0] for g in got) and got[0][1].split(";")[0] == accept
    assert kept.served >= 12
