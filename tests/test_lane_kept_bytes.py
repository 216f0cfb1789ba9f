"""Kept answers of repeated texts by size (``LaneAnswers`` in server/api/sparql.py, wave 2o):
an answer of a few hundred rows (tens of KiB) is kept like a one-row answer, under a bound
on all the kept bytes together (past it everything is dropped, as at a new snapshot), and
a kept answer is byte for byte the one the uncached path gives."""

from __future__ import annotations

import pytest
import requests

from server.api import sparql

EX = "http://example.org/"
SRJ = "application/sparql-results+json"


class _Snap:
    sn = 1


class _Store:
    def snapshot(self):
        return _SNAP


_SNAP = _Snap()


class _DB:
    store = _Store()
    queries = 0


def _result(n: int) -> tuple:
    return ("SELECT", SRJ, b"x" * n)


def test_bytes_bound_drops_all_and_counts_exactly():
    kept = sparql.LaneAnswers(max_entries=100, max_body=1000, max_bytes=2500)
    db = _DB()
    assert not kept._current(db)
    sn = kept.sn
    kept.put(("a",), db, _result(1000), sn)
    kept.put(("b",), db, _result(1000), sn)
    assert kept.bytes == 2000 and len(kept.map) == 2
    kept.put(("b",), db, _result(400), sn)  # (a key kept again: its old bytes leave the count)
    assert kept.bytes == 1400
    kept.put(("c",), db, _result(1001), sn)  # (over max_body: not kept)
    assert ("c",) not in kept.map and kept.bytes == 1400
    kept.put(("c",), db, _result(1000), sn)
    assert kept.bytes == 2400 and len(kept.map) == 3
    kept.put(("d",), db, _result(200), sn)  # past max_bytes: all dropped, then kept
    assert list(kept.map) == [("d",)] and kept.bytes == 200
    assert kept.find(("d",), db) == _result(200)


def test_a_new_snapshot_resets_the_count():
    kept = sparql.LaneAnswers(max_bytes=1 << 20)
    db = _DB()
    kept._current(db)
    kept.put(("a",), db, _result(500), kept.sn)
    assert kept.bytes == 500
    global _SNAP
    old = _SNAP
    try:
        _SNAP = _Snap()
        _SNAP.sn = 2
        assert kept.find(("a",), db) is None and kept.bytes == 0 and not kept.map
    finally:
        _SNAP = old


@pytest.fixture(scope="module")
def server():
    from tests.conftest import start_server

    s = start_server(None)
    try:
        nt = "".join(f"<{EX}s{i}> <{EX}p> <{EX}hub> .\n<{EX}s{i}> <{EX}name> \"member number {i}\" .\n"
                     for i in range(400))
        r = requests.post(s.url + "/store?default", data=nt.encode(),
                          headers={"Content-Type": "application/n-triples"})
        assert r.status_code == 204
        yield s
    finally:
        s.stop()


def test_a_large_selective_answer_is_kept_and_equal(server, monkeypatch):
    kept = sparql.LaneAnswers()
    monkeypatch.setattr(sparql, "_ANSWERS", kept)
    text = f"SELECT ?s ?n WHERE {{ ?s <{EX}p> <{EX}hub> . ?s <{EX}name> ?n }} # kept bytes\n"

    def post():
        r = requests.post(server.url + "/sparql", data=text.encode(),
                          headers={"Content-Type": "application/sparql-query", "Accept": SRJ})
        assert r.status_code == 200
        return r.content

    got = []
    while kept.served < 2 and len(got) < 15:  # (kept once its cost says inline: a few runs)
        got.append(post())
    assert len(got[0]) > 8192 and len(set(got)) == 1
    assert kept.served == 2 and kept.bytes == len(got[0])
    # the uncached path's bytes (nothing kept)
    monkeypatch.setattr(sparql, "_ANSWERS", sparql.LaneAnswers(max_body=-1))
    assert post() == got[0]


def test_answer_cache_zero_keeps_nothing_and_answers_the_same():
    """``--answer-cache 0``: a repeated text is run every time (nothing kept, nothing served
    from the cache), with the same bytes as with the cache on."""
    from server.settings import Settings
    from tests.conftest import start_server

    s = start_server(None, answer_cache=0)
    try:
        assert sparql._ANSWERS.max_bytes == 0 and sparql._ANSWERS.max_body == 0
        nt = "".join(f"<{EX}s{i}> <{EX}p> <{EX}hub> .\n" for i in range(50))
        assert requests.post(s.url + "/store?default", data=nt.encode(),
                             headers={"Content-Type": "application/n-triples"}).status_code == 204
        served = sparql._ANSWERS.served
        for text, mark in ((f"SELECT ?s WHERE {{ ?s <{EX}p> <{EX}hub> }}", b"s49"),
                           (f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{EX}p> ?o }} # no template\n", b'"50"')):
            got = {requests.get(s.url + "/sparql", params={"query": text}, headers={"Accept": SRJ}).content
                   for _ in range(12)}
            assert len(got) == 1 and mark in next(iter(got)), got
        assert sparql._ANSWERS.served == served and not sparql._ANSWERS.map
    finally:
        s.stop()
        sparql._ANSWERS.configure(Settings.model_fields["answer_cache"].default)
    assert sparql._ANSWERS.max_bytes == 32 << 20 and sparql._ANSWERS.max_body == 256 << 10
