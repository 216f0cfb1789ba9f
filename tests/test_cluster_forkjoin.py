"""In-place and fork-join give the single-process answers on a cluster.

Random graphs and random basic graph patterns (stars, chains, cycles, constants
at either end, repeated predicates) run on 3-worker clusters with each
``--cluster-exec`` mode forced and with the adaptive choice, over both the
shared-memory and the Flight transport; every answer must equal the
single-process Database's (multisets of SPARQL JSON bindings). Also: EXPLAIN
names the choice of every step, a fork-join that outgrows the row budget is a
budget refusal (not a worker failure), and the cost model's choice moves as
its inputs say.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from engine.cluster import forkjoin
from engine.database import Database
from engine.errors import RowBudgetExceeded
from engine.exec.serialize import sparql_json

EX = "http://ex.org/f/"
NT = "application/n-triples"
MODES = ["in-place", "fork-join", "adaptive"]


def _graph(seed: int, n_nodes: int = 120, n_edges: int = 900) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_edges):
        s, o = rng.randrange(n_nodes), rng.randrange(n_nodes)
        p = rng.choice(["a", "b", "c", "c"])
        lines.append(f"<{EX}n{s}> <{EX}{p}> <{EX}n{o}> .")
    for k in range(0, n_nodes, 3):
        lines.append(f'<{EX}n{k}> <{EX}label> "l{k % 7}" .')
    return "\n".join(lines) + "\n"


def _queries(seed: int, k: int = 12) -> list[str]:
    rng = random.Random(seed)
    shapes = [
        "?x <{a}> ?y . ?x <{b}> ?z",
        "?x <{a}> ?y . ?y <{b}> ?z",
        "?x <{a}> ?y . ?y <{b}> ?z . ?z <{c}> ?x",
        "?x <{a}> ?y . ?x <{b}> ?y",
        "?x <{a}> ?y . ?x <{b}> ?z . ?x <{c}> ?w . ?x <" + EX + "label> ?l",
        "<" + EX + "n{n}> <{a}> ?y . ?y <{b}> ?z",
        "?x <{a}> <" + EX + "n{n}> . ?x <{b}> ?z . ?z <" + EX + "label> ?l",
        "?x <{a}> ?y . ?y <{b}> ?z . ?z <{c}> <" + EX + "n{n}>",
    ]
    out = []
    for _ in range(k):
        preds = {x: EX + rng.choice("abc") for x in "abc"}
        out.append("SELECT * WHERE { " + rng.choice(shapes).format(n=rng.randrange(120), **preds) + " }")
    return out


def _answer(db, q: str) -> Counter:
    doc = json.loads(sparql_json(db.query(q)))
    return Counter(json.dumps(b, sort_keys=True) for b in doc["results"]["bindings"])


@pytest.fixture(scope="module")
def data():
    return _graph(7)


@pytest.fixture(scope="module")
def single(data):
    db = Database()
    db.load_data(data, NT)
    return db


@pytest.mark.parametrize("transport", ["shm", "flight"])
def test_every_mode_gives_the_single_process_answers(transport, data, single):
    queries = _queries(11)
    expected = [_answer(single, q) for q in queries]
    assert any(len(e) > 50 for e in expected)  # the comparison is not over empty answers only
    for mode in MODES:
        db = Database(workers=3, cluster_transport=transport, cluster_exec=mode)
        try:
            db.load_data(data, NT)
            for q, exp in zip(queries, expected, strict=True):
                assert _answer(db, q) == exp, (mode, q)
        finally:
            db.close()


def test_explain_names_each_steps_choice(data):
    db = Database(workers=2, cluster_exec="fork-join")
    try:
        db.load_data(data, NT)
        doc = db.explain(f"SELECT * WHERE {{ ?x <{EX}a> ?y . ?x <{EX}b> ?z }}", analyze=True)
        steps = doc["plan"]["children"][0]["steps"]
        assert [s["exec"] for s in steps][1:] == ["fork-join"]  # the first step starts from a scan
        assert all(s["exec"] in ("in-place", "fork-join") for s in steps)
    finally:
        db.close()


def test_a_fork_join_past_the_row_budget_is_a_budget_refusal(data):
    db = Database(workers=2, cluster_exec="fork-join", max_rows=50)
    try:
        db.load_data(data, NT)
        with pytest.raises(RowBudgetExceeded):
            db.query(f"SELECT * WHERE {{ ?x <{EX}c> ?y . ?y <{EX}c> ?z . ?z <{EX}c> ?w }}")
        assert all(w["state"] == "up" for w in db.store.workers_status())
    finally:
        db.close()


class _Stats:
    def __init__(self, triples, subjects, objects):
        self.triples, self.subjects, self.objects = triples, subjects, objects


class _Cluster:
    def __init__(self, kind, workers=3):
        self.exec_mode = "adaptive"
        self.transport_kind = kind
        self.n_shards = workers


class _Graph:
    """Statistics only: what :func:`forkjoin.choose` reads of a graph."""

    def __init__(self, kind, fan):
        self.cluster = _Cluster(kind)
        self._fan = fan

    def stats(self, pid):
        return _Stats(1000 * self._fan, 1000, 1000)


def test_the_choice_follows_the_costs():
    star = [(("v", "x"), ("c", 1), ("v", f"y{k}")) for k in range(4)]
    run = [0, 1, 2, 3]
    cols = {"x": None}
    # shared memory: reads cost nothing but CPU, histories would travel by Flight: in place
    assert forkjoin.choose(_Graph("shm", 2.0), star, run, 50_000, cols) == "in-place"
    # Flight: a star of four steps is four round trips per worker in place, one forked
    assert forkjoin.choose(_Graph("flight", 1.0), star, run, 200, cols) == "fork-join"
    # a single step over a handful of rows: in place (no history to ship, the same round trip)
    assert forkjoin.choose(_Graph("flight", 1.0), star[:1], [0], 3, cols) == "in-place"
    # a big frontier: with a small fan-out the shared CPU and the saved round trip win; with a
    # big one, whole history rows coming back cost more than neighbour lists do
    assert forkjoin.choose(_Graph("flight", 1.0), star[:2], [0, 1], 400_000, cols) == "fork-join"
    assert forkjoin.choose(_Graph("flight", 50.0), star[:2], [0, 1], 400_000, cols) == "in-place"


@pytest.mark.parametrize("mode", ["in-place", "fork-join"])
def test_a_stopped_worker_cannot_hold_a_query_past_its_deadline(mode, data):
    """SIGSTOP (alive, silent): every call to it is bounded by the query's deadline, so
    the query ends as a timeout soon after it, whichever way the steps run."""
    import os
    import signal
    import time

    from engine.errors import QueryTimeout, WorkerUnavailable

    db = Database(workers=2, cluster_transport="flight", cluster_exec=mode, query_timeout=1.0)
    pid = None
    try:
        db.load_data(data, NT)
        pid = db.store.workers_status()[1]["pid"]
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises((QueryTimeout, WorkerUnavailable)):
            db.query(f"SELECT * WHERE {{ ?x <{EX}a> ?y . ?x <{EX}b> ?z }}")
        assert time.monotonic() - t0 < 3.0
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        db.close()
