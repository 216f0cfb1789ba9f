"""The lane's per-request steps of wave 2m (issue 14): each one answers as the steps it
replaces and is shown to be taken.

* ``engine.small_answers.select_json``'s one-frame path: a SmallSelect of kept fragments,
  every cell bound, written as one ``%`` format of the kept whole document;
* ``server.api.admin.Metrics.lane_record`` / ``fold_lane``: the lane's answered queries
  appended to a kept list and folded into the batched counts, as ``query_request``
  counts each;
* ``server.api.sparql._run_bound``: a runner's outcome kept per raw slots and read in
  place, its job a ``partial`` of ``_run_runner`` (and that function's fallbacks);
* ``server.lane.read_head``: a GET's header block from ``_GET_BLOCKS``.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from engine import small_answers as sa
from engine.exec import serialize as ser
from engine.exec.result import UNBOUND
from server import lane
from server.api import admin, sparql

JSON_MT = "application/sparql-results+json"


# --------------------------------------------------------------------------- select_json


class _Owner:
    """A store dictionary stand-in (weakly referable), the owner of kept tables."""


class _Terms(ser.KeyTable):
    """A term table with a store dictionary, as the lane's snapshot terms have one."""

    def __init__(self, keys, owner):
        super().__init__(keys)
        self.dictionary = owner


_KEYS = ["<http://ex.org/a>", "<http://ex.org/b%41>", '"50% off"', '"say ""hi"""@en', "_:b1",
         '"1"^^<http://www.w3.org/2001/XMLSchema#integer>', '"tab\\there"', "<urn:x:%25>"]


@st.composite
def _selects(draw):
    k = draw(st.integers(1, 4))
    n = draw(st.integers(0, 8))
    names = tuple(draw(st.lists(st.sampled_from(["s", "p", "o", "x", "y", "n"]), min_size=k, max_size=k,
                                unique=True)))
    cells = st.integers(0, len(_KEYS) - 1) | (st.just(UNBOUND) if draw(st.booleans()) else st.nothing())
    cols = [tuple(draw(st.lists(cells, min_size=n, max_size=n))) for _ in range(k)]
    return names, cols, n


@settings(max_examples=300, deadline=None)
@given(_selects(), st.booleans())
def test_select_json_one_frame_writes_the_general_writers_bytes(case, list_cols):
    names, cols, n = case
    terms = _Terms(_KEYS, _Owner())
    frags = sa.TermFragments()
    res = sa.SmallSelect(names, [list(c) for c in cols] if list_cols else cols, terms, n)
    want = ser.serialize(res.result(), JSON_MT)
    for _ in range(3):  # (first: the general steps, rendering and making the document; then kept)
        assert sa.select_json(res, None, frags) == want


def test_select_json_one_frame_is_taken(monkeypatch):
    terms = _Terms(_KEYS, _Owner())
    frags = sa.TermFragments()
    res = sa.SmallSelect(("s", "o"), [(0, 1, 2), (3, 4, 7)], terms, 3)
    want = sa.select_json(res, None, frags)  # (the general steps: fragments rendered, document made)
    assert want == ser.serialize(res.result(), JSON_MT)
    monkeypatch.setattr(sa, "_rows", lambda *a: pytest.fail("the general steps were taken"))
    monkeypatch.setattr(sa.TermFragments, "table", lambda *a: pytest.fail("the general steps were taken"))
    assert sa.select_json(res, None, frags) == want
    # a new constant's rows of the same names: one frame too, once its terms are rendered
    res2 = sa.SmallSelect(("s", "o"), [(5, 6, 0), (1, 2, 3)], terms, 3)
    monkeypatch.undo()
    want2 = sa.select_json(res2, None, frags)
    monkeypatch.setattr(sa, "_rows", lambda *a: pytest.fail("the general steps were taken"))
    assert sa.select_json(res2, None, frags) == want2 == ser.serialize(res2.result(), JSON_MT)


def test_select_json_one_frame_declines_what_it_cannot_write(monkeypatch):
    """An unbound cell, a term not rendered yet, another store's table, a dictionary-less term
    table, a row count that is not the columns': the general steps answer (taken: a spy)."""
    owner = _Owner()
    terms = _Terms(_KEYS, owner)
    frags = sa.TermFragments()
    base = sa.SmallSelect(("s", "o"), [(0, 1), (2, 3)], terms, 2)
    sa.select_json(base, None, frags)  # (document of 2 rows of (s, o) made, terms 0-3 rendered)
    calls = []
    real = sa._rows
    monkeypatch.setattr(sa, "_rows", lambda *a: calls.append(1) or real(*a))
    cases = [
        sa.SmallSelect(("s", "o"), [(0, UNBOUND), (2, 3)], terms, 2),  # unbound cell
        sa.SmallSelect(("s", "o"), [(0, 6), (2, 3)], terms, 2),  # term 6 not rendered yet
        sa.SmallSelect(("s", "o"), [(0, 1), (2, 3)], _Terms(_KEYS[::-1], _Owner()), 2),  # another store
    ]
    for res in cases:
        calls.clear()
        assert sa.select_json(res, None, frags) == ser.serialize(res.result(), JSON_MT)
        assert calls, res.cols
    plain = ser.KeyTable(_KEYS)  # (no dictionary: never the one-frame path)
    res = sa.SmallSelect(("s", "o"), [(0, 1), (2, 3)], plain, 2)
    calls.clear()
    assert sa.select_json(res, None, frags) == ser.serialize(res.result(), JSON_MT)
    assert calls
    # the columns hold 3 rows, n says 2: the general steps decide (what they always did)
    odd = sa.SmallSelect(("s", "o"), [(0, 1, 2), (2, 3, 0)], terms, 2)
    calls.clear()
    want = sa.select_json(odd, None, sa.TermFragments())
    assert sa.select_json(odd, None, frags) == want
    assert calls


def test_select_json_one_frame_checks_the_response_bound():
    terms = _Terms(_KEYS, _Owner())
    frags = sa.TermFragments()
    res = sa.SmallSelect(("s",), [(0, 1, 2)], terms, 3)
    body = sa.select_json(res, None, frags)
    assert sa.select_json(res, len(body), frags) == body
    with pytest.raises(Exception) as e:
        sa.select_json(res, len(body) - 1, frags)
    assert "response" in str(e.value)


# --------------------------------------------------------------------------- metrics


_answers = st.lists(st.tuples(st.sampled_from(["SELECT", "ASK", "CONSTRUCT"]), st.sampled_from(["/sparql", "/sparql/"]),
                              st.sampled_from(["GET", "POST"]),
                              st.one_of(st.sampled_from(list(admin._LAT_BUCKETS)), st.floats(0, 30, allow_nan=False))),
                    max_size=80)


def _exposed(m: admin.Metrics) -> list[str]:
    text = generate_latest(m.registry).decode()
    return sorted(ln for ln in text.splitlines()
                  if ln.startswith(("jindou_http_request", "jindou_queries_total")) and "_created" not in ln)


@settings(max_examples=150, deadline=None)
@given(_answers, st.integers(0, 80), st.integers(1, 7), st.lists(st.tuples(st.sampled_from(["/status", "/sparql"]),
                                                                           st.floats(0, 2, allow_nan=False)),
                                                                 max_size=5))
def test_lane_records_count_as_query_request(answers, cut, fold_every, others):
    """Appends to the kept lists, folded by fold_lane at any points and by flush, expose
    exactly what one query_request call per answer exposes (and other requests between)."""
    direct, lane_m = admin.Metrics(), admin.Metrics()
    for path, s in others:
        direct.observe_request(path, "GET", 200, s)
        lane_m.observe_request(path, "GET", 200, s)
    for i, (form, path, method, s) in enumerate(answers):
        direct.query_request(form, path, method, s)
        lane_m.lane_record(form, path, method).append(s)
        if i % fold_every == 0:
            lane_m.fold_lane()
        if i == cut:
            direct.flush()
            lane_m.flush()
    direct.flush()
    lane_m.flush()
    got, want = _exposed(lane_m), _exposed(direct)
    assert [g.rsplit(" ", 1)[0] for g in got] == [w.rsplit(" ", 1)[0] for w in want]
    for g, w in zip(got, want, strict=True):
        a, b = float(g.rsplit(" ", 1)[1]), float(w.rsplit(" ", 1)[1])
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), (g, w)


def test_lane_record_is_one_list_per_key():
    m = admin.Metrics()
    r = m.lane_record("SELECT", "/sparql", "GET")
    assert m.lane_record("SELECT", "/sparql", "GET") is r
    assert m.lane_record("ASK", "/sparql", "GET") is not r
    r += [0.001, 0.002]
    m.fold_lane()
    assert r == [] and m.lane_record("SELECT", "/sparql", "GET") is r  # (emptied in place: the lane keeps it)


# --------------------------------------------------------------------------- over HTTP

EX = "http://example.org/"


@pytest.fixture(scope="module")
def server():
    from tests.test_lane_repeated_texts import serving

    yield from serving("".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i % 3}> .\n<{EX}o{i % 3}> <{EX}q> \"n{i} %\" .\n"
                               for i in range(12)))


def _metric(server, name: str, labels: str) -> float:
    import requests

    for ln in requests.get(server.url + "/metrics").text.splitlines():
        if ln.startswith(name + "{") and labels in ln:
            return float(ln.rsplit(" ", 1)[1])
    return 0.0


def test_lane_answers_are_counted_without_query_request(server, monkeypatch):
    """Lane answers (runners, kept heads) count in jindou_queries_total and the request
    metrics as before; Metrics.query_request is not called on the way (a spy), and the
    lane folds its list at LANE_FOLD answers."""
    from server import app as appm
    from tests.test_lane_repeated_texts import _get

    text = "SELECT ?o ?n WHERE {{ <{c}> <" + EX + "p> ?o . ?o <" + EX + "q> ?n }} # {k}\n"
    for i in range(3):  # learned, a runner bound
        _get(server, text.format(c=f"{EX}s{i}", k=f"warm-{i}"), JSON_MT)
    q0 = _metric(server, "jindou_queries_total", 'form="SELECT",outcome="ok"')
    r0 = _metric(server, "jindou_http_requests_total", 'method="GET",route="/sparql",status="200"')
    monkeypatch.setattr(admin.Metrics, "query_request", lambda *a: pytest.fail("query_request was called"))
    monkeypatch.setattr(appm, "LANE_FOLD", 5)  # (the lane folds every 5 answers)
    folds = []
    real_fold = admin.Metrics.fold_lane
    monkeypatch.setattr(admin.Metrics, "fold_lane", lambda self: folds.append(1) or real_fold(self))
    n = 12
    for j in range(n):
        _get(server, text.format(c=f"{EX}s{j % 12}", k=f"count-{j}"), JSON_MT)
    assert len(folds) == n // 5, "the lane did not fold at LANE_FOLD"
    assert _metric(server, "jindou_queries_total", 'form="SELECT",outcome="ok"') == q0 + n
    # (the /metrics GETs themselves are counted under their own route)
    assert _metric(server, "jindou_http_requests_total", 'method="GET",route="/sparql",status="200"') == r0 + n


def test_runner_outcome_is_read_in_place_and_falls_back_as_the_template_path(server, monkeypatch):
    """A text whose raw slots a runner has seen is answered without _runner_key (kept
    outcome); after a commit (a new snapshot) and for a constant with no answer, the runner's
    answers equal the parsed path's, byte for byte."""
    from tests.test_lane_repeated_texts import _get
    from tests.test_lane_runners import _general

    text = "SELECT ?o WHERE {{ <{c}> <" + EX + "p> ?o }} # {k}\n"
    for i in range(3):
        _get(server, text.format(c=f"{EX}s{i}", k=f"w-{i}"), JSON_MT)
    consts = [f"{EX}s{i}" for i in range(12)] + [f"{EX}absent", f"{EX}p"]
    first = [_get(server, text.format(c=c, k=f"a-{j}"), JSON_MT) for j, c in enumerate(consts)]
    calls = []
    real = sparql._runner_key
    monkeypatch.setattr(sparql, "_runner_key", lambda *a: calls.append(1) or real(*a))
    runs = []
    real_run = sparql._run_runner
    monkeypatch.setattr(sparql, "_run_runner", lambda *a: runs.append(1) or real_run(*a))
    again = [_get(server, text.format(c=c, k=f"b-{j}"), JSON_MT) for j, c in enumerate(consts)]
    assert again == first
    assert not calls, "the kept outcome was not read in place"
    assert len(runs) >= len(consts) - 1, "the runners did not answer"
    # a commit: a new snapshot, the runner's template run again (no program kept for it yet)
    import requests

    r = requests.post(server.url + "/update", data=f"INSERT DATA {{ <{EX}s1> <{EX}p> <{EX}o9> }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    runs.clear()
    after = [_get(server, text.format(c=c, k=f"c-{j}"), JSON_MT) for j, c in enumerate(consts)]
    assert runs, "the runners did not answer after the commit"
    monkeypatch.undo()
    _general(monkeypatch)
    want = [_get(server, text.format(c=c, k=f"g-{j}"), JSON_MT) for j, c in enumerate(consts)]
    assert after == want
    assert after[1] != first[1]  # (the commit's triple is in the answer)


# --------------------------------------------------------------------------- read_head


def test_get_blocks_keep_only_blocks_a_get_may_have():
    """A header block with a Content-Length is a POST's (a GET with it is declined, from the
    cache too); one without is a GET's (a POST with it is declined); in either order."""
    rnd = random.Random(7)
    tag = str(rnd.random()).encode()
    plain = b"Host: h\r\nX-Tag: " + tag + b"\r\n"
    sized = b"Host: h\r\nContent-Length: 3\r\nX-Tag: " + tag + b"\r\n"
    get = b"GET /sparql?query=x HTTP/1.1\r\n"
    post = b"POST /sparql HTTP/1.1\r\n"
    for order in (0, 1, 0, 1):
        for req_line, block, ok in ((get, plain, True), (get, sized, False), (post, sized, True),
                                    (post, plain, False))[::1 if order == 0 else -1]:
            h = lane.read_head(req_line + block + b"\r\n" + (b"abc" if req_line is post else b""))
            assert (h is not None) == ok, (req_line, block)
            if h is not None:
                assert list(h.headers)[0] == (b"host", b"h")
    assert plain in lane._GET_BLOCKS and sized not in lane._GET_BLOCKS
    assert lane._BLOCKS[sized][3] == 3
