"""Query and update deadlines (issue 10, item 3): parsing, VALUES, property path
closures and the HTTP layer all stop at the deadline; small queries keep
answering meanwhile. Timing assertions use generous bounds only."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from urllib.parse import quote_plus

import pytest
import requests

from engine.database import Database
from engine.errors import QueryTimeout
from engine.sparql.parser import parse_query, parse_update

E = "http://ex.org/"
TIMEOUT = 2.0
GRACE = 4.0  # generous: the server answers about 0.5 s after the deadline


def values_query(n_rows: int) -> str:
    rows = "\n".join(f'(<{E}v{i}> "label {i}")' for i in range(n_rows))
    return "SELECT ?x ?l WHERE { VALUES (?x ?l) {\n" + rows + "\n} }"


# ---------------------------------------------------------------- parser


def test_parser_calls_check_every_few_thousand_tokens():
    text = values_query(20_000)  # ~100k tokens
    calls = []
    parse_query(text, check=lambda: calls.append(1))
    assert len(calls) >= 100_000 // 8192

    def stop_at_third():
        calls.append(1)
        if len(calls) >= 3:
            raise QueryTimeout("deadline")

    calls.clear()
    with pytest.raises(QueryTimeout):
        parse_query(text, check=stop_at_third)
    calls.clear()
    with pytest.raises(QueryTimeout):
        parse_update("INSERT DATA { " + " ".join(f"<{E}s{i}> <{E}p> {i} ." for i in range(20_000)) + " }",
                     check=stop_at_third)


def test_database_deadline_covers_parsing_and_updates():
    db = Database(query_timeout=30)
    db.load_data(f"<{E}a> <{E}p> <{E}b> .\n", "application/n-triples")
    with pytest.raises(QueryTimeout):
        db.query(values_query(5000), deadline=time.monotonic() - 1)
    with pytest.raises(QueryTimeout):
        db.update(f"INSERT DATA {{ <{E}a> <{E}p> <{E}c> }}", deadline=time.monotonic() - 1)
    # the caller gave up before the commit: nothing is applied
    with pytest.raises(QueryTimeout):
        db.update(f"INSERT DATA {{ <{E}a> <{E}p> <{E}c> }}", may_commit=lambda: False)
    assert db.query(f"ASK {{ <{E}a> <{E}p> <{E}c> }}").boolean is False
    db.update(f"INSERT DATA {{ <{E}a> <{E}p> <{E}c> }}", may_commit=lambda: True)
    assert db.query(f"ASK {{ <{E}a> <{E}p> <{E}c> }}").boolean is True


def test_values_bulk_intern_keeps_terms_apart():
    db = Database()
    db.load_data(f'<{E}a> <{E}p> "x" .\n<{E}b> <{E}p> "y" .\n', "application/n-triples")
    rows = []
    for i in range(300):  # enough rows for the bulk path
        rows.append(f'(<{E}a> "x")' if i % 3 == 0 else f'(<{E}new{i % 7}> UNDEF)' if i % 3 == 1 else f'(<{E}b> "z{i % 5}")')
    q = "SELECT ?s ?o WHERE { VALUES (?s ?o) { " + " ".join(rows) + f" }} ?s <{E}p> ?o }}"
    res = db.query(q)
    pairs = sorted(zip(*[res.terms.keys(c) for c in res.columns], strict=True))
    # (<new>, UNDEF) rows have no triples, (<b>, "z..") rows do not match "y"
    assert pairs == [(f"<{E}a>", '"x"')] * 100
    # UNDEF joins with anything
    q2 = "SELECT ?s WHERE { VALUES (?s ?o) { " + " ".join(f"(<{E}b> UNDEF)" for _ in range(100)) + f" }} ?s <{E}p> ?o }}"
    res2 = db.query(q2)
    assert res2.n_rows == 100


# ---------------------------------------------------------------- property paths


def _bfs_closure(edges: dict[int, set[int]], starts, zero: bool, nodes: set[int]) -> set[tuple[int, int]]:
    out = set()
    for x in starts:
        seen = {x} if zero else set()
        todo = list(edges.get(x, ()))
        reach = set()
        while todo:
            y = todo.pop()
            if y in reach:
                continue
            reach.add(y)
            todo.extend(edges.get(y, ()))
        out |= {(x, y) for y in reach | seen}
    return out


@pytest.mark.parametrize("seed", range(6))
def test_path_closure_matches_a_plain_bfs(seed):
    rng = random.Random(seed)
    n = rng.randint(5, 60)
    triples = {(rng.randrange(n), rng.randrange(4) + 1, rng.randrange(n)) for _ in range(rng.randint(0, 3 * n))}
    db = Database()
    if triples:
        db.load_data("".join(f"<{E}n{s}> <{E}p{p}> <{E}n{o}> .\n" for s, p, o in triples), "application/n-triples")
    # (p1|^p2|p3|^p4): p1/p3 forward, p2/p4 backward
    edges: dict[int, set[int]] = {}
    nodes = set()
    for s, p, o in triples:
        nodes |= {s, o}
        a, b = (s, o) if p in (1, 3) else (o, s)
        edges.setdefault(a, set()).add(b)
    # (p1|^p2|p3|^p4) and the negated set that means the same edges
    paths = [f"(<{E}p1>|^<{E}p2>|<{E}p3>|^<{E}p4>)", f"(!(<{E}p2>|<{E}p4>|^<{E}p1>|^<{E}p3>))"]
    for path, (op, zero) in [(p, o) for p in paths for o in (("+", False), ("*", True))]:
        res = db.query(f"SELECT ?x ?y WHERE {{ ?x {path}{op} ?y }}")
        got = {(int(a[len(E) + 2:-1]), int(b[len(E) + 2:-1]))
               for a, b in zip(res.terms.keys(res.columns[0]), res.terms.keys(res.columns[1]), strict=True)}
        assert got == _bfs_closure(edges, nodes, zero, nodes)
        assert res.n_rows == len(got)  # distinct pairs
        if nodes:
            x = min(nodes)
            res = db.query(f"SELECT ?y WHERE {{ <{E}n{x}> {path}{op} ?y }}")
            got1 = {int(k[len(E) + 2:-1]) for k in res.terms.keys(res.columns[0])}
            assert got1 == {y for _, y in _bfs_closure(edges, [x], zero, nodes)}


# ---------------------------------------------------------------- server side


def test_server_answers_the_timeout_even_when_the_engine_is_stuck():
    from server.api.common import ServerState
    from server.settings import Settings

    state = ServerState(Settings(query_timeout=0.3), database=None)
    release = threading.Event()

    def stuck(deadline):  # ignores its deadline, like one long C call
        release.wait(30)
        return "late"

    async def go():
        t0 = time.monotonic()
        with pytest.raises(QueryTimeout):
            await state.run(stuck, deadline=state.deadline())
        elapsed = time.monotonic() - t0
        assert elapsed < 0.3 + GRACE
        assert state.running == 1  # the abandoned call still holds its slot
        release.set()
        for _ in range(300):
            if state.running == 0:
                break
            await asyncio.sleep(0.02)
        assert state.running == 0
        assert await state.run(lambda deadline: "ok", deadline=state.deadline()) == "ok"

    asyncio.run(go())


def _random_graph(n_nodes: int, n_edges: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return "".join(f"<{E}n{rng.randrange(n_nodes)}> <{E}p{k % 4 + 1}> <{E}n{rng.randrange(n_nodes)}> .\n"
                   for k in range(n_edges))


@pytest.fixture(scope="module")
def slow_server():
    from tests.conftest import start_server

    db = Database(query_timeout=TIMEOUT)
    db.load_data(_random_graph(40_000, 80_000), "application/n-triples")
    s = start_server(db, query_timeout=TIMEOUT)
    try:
        yield s
    finally:
        s.stop()


def _post(url: str, path: str, text: str, ctype: str):
    t0 = time.monotonic()
    r = requests.post(url + path, data=text.encode(), headers={"Content-Type": ctype}, timeout=120)
    return r, time.monotonic() - t0


def _with_point_queries(url: str, slow):
    """Run ``slow()`` while point queries are sent; (slow result, slow end, point latencies and ends)."""
    point = f"SELECT ?p ?o WHERE {{ <{E}n5> ?p ?o }}"
    for _ in range(3):  # warm: its shape is known cheap
        _post(url, "/sparql", point, "application/sparql-query")
    out = {}
    th = threading.Thread(target=lambda: out.update(res=slow(), end=time.monotonic()))
    th.start()
    time.sleep(0.4)
    lat = []
    while th.is_alive() and len(lat) < 20:
        r, dt = _post(url, "/sparql", point, "application/sparql-query")
        assert r.status_code == 200
        lat.append((dt, time.monotonic()))
        time.sleep(0.05)
    th.join()
    return out["res"], out["end"], lat


def test_http_path_closure_answers_by_its_deadline(slow_server):
    q = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?x (<{E}p1>|^<{E}p2>|<{E}p3>|^<{E}p4>)* ?y }}"
    (r, elapsed), end, lat = _with_point_queries(
        slow_server.url, lambda: _post(slow_server.url, "/sparql", q, "application/sparql-query"))
    assert r.status_code in (200, 422, 503), r.text
    if r.status_code == 503:
        assert r.json()["error"] in ("timeout", "memory")
    if r.status_code == 422:  # a deterministic budget refusal: not retryable
        assert r.json()["error"] in ("row_budget", "memory_budget") and "Retry-After" not in r.headers
    assert elapsed < TIMEOUT + GRACE
    if lat:  # point queries were answered while the closure ran, and quickly
        assert lat[0][1] < end
        assert min(dt for dt, _ in lat) < 1.0


@pytest.mark.parametrize("form", [False, True])
def test_http_big_values_answers_by_its_deadline(slow_server, form):
    q = values_query(120_000)  # ~6 MB: parsing alone took ~10 s before the deadline covered it
    if form:  # a form body is percent-decoded off the event loop
        body, ctype = "query=" + quote_plus(q), "application/x-www-form-urlencoded"
    else:
        body, ctype = q, "application/sparql-query"
    (r, elapsed), end, lat = _with_point_queries(slow_server.url, lambda: _post(slow_server.url, "/sparql", body, ctype))
    assert r.status_code in (200, 503), r.text
    if r.status_code == 503:
        assert r.json()["error"] == "timeout"
    else:
        assert len(r.json()["results"]["bindings"]) == 120_000
    assert elapsed < TIMEOUT + GRACE
    if lat:
        assert lat[0][1] < end


def test_http_update_past_its_deadline_changes_nothing(slow_server):
    url = slow_server.url
    body = "INSERT DATA { " + " ".join(f'<{E}u{i}> <{E}q> "value number {i}" .' for i in range(150_000)) + " }"
    r, elapsed = _post(url, "/update", body, "application/sparql-update")
    assert elapsed < TIMEOUT + GRACE
    assert r.status_code in (204, 503), r.text
    time.sleep(TIMEOUT + 1)  # an abandoned update must not commit late
    c, _ = _post(url, "/sparql", f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{E}q> ?o }}", "application/sparql-query")
    n = int(c.json()["results"]["bindings"][0]["n"]["value"])
    assert n == (150_000 if r.status_code == 204 else 0)
    if r.status_code == 503:
        assert r.json()["error"] == "timeout"


def test_a_write_is_either_abandoned_before_its_commit_or_waited_for():
    from server.api.common import CommitGate, ServerState
    from server.settings import Settings

    state = ServerState(Settings(query_timeout=0.2), database=None)
    outcome = {}

    def committing(gate):
        def fn(deadline):
            assert gate.commit()  # the commit starts before the deadline ...
            time.sleep(1.2)       # ... and ends after the server's grace
            return "committed"
        return fn

    def late(gate, done):
        def fn(deadline):
            time.sleep(1.2)
            outcome["late_commit_allowed"] = gate.commit()
            done.set()
            return "committed"
        return fn

    async def go():
        g = CommitGate()
        assert await state.run(committing(g), deadline=state.deadline(), gate=g) == "committed"
        g = CommitGate()
        done = threading.Event()
        with pytest.raises(QueryTimeout):
            await state.run(late(g, done), deadline=state.deadline(), gate=g)
        await asyncio.get_running_loop().run_in_executor(None, done.wait, 10)
        assert outcome["late_commit_allowed"] is False

    asyncio.run(go())


def test_no_timeout_means_no_deadline():
    from server.api.common import ServerState
    from server.settings import Settings

    state = ServerState(Settings(query_timeout=0), database=None)
    assert state.deadline() is None
    got = asyncio.run(state.run(lambda deadline: deadline, deadline=state.deadline()))
    assert got is None and state.running == 0
    db = Database(query_timeout=0)
    assert db.query("ASK {}", deadline=None).boolean is True
