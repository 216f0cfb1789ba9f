"""A shape's cold first run does not keep it in the thread pool (``ServerState.record_cost``).

A query's first run over a snapshot pays one-time builds (a predicate's lookup table, an
edge index, the compiled program: 5-30 ms) where its warm runs cost 0.1 ms. The cost
estimate is a decaying maximum; before, the first run set it, and the warm runs after it
only halved it: a cheap shape ran in the pool four or five more times (0.5-1 ms each over
HTTP, the "selective queries behind Oxigraph" of issue 14). Now the second run's estimate
is the lesser of the two runs; two expensive runs in a row still send a shape to the pool,
and a shape measured more than once still decays as before."""

from __future__ import annotations

import time

import requests

from server.api.common import HashedShape, ServerState
from server.settings import Settings


def _busy(seconds: float) -> None:  # (costs are taken on the thread's CPU clock: sleeping costs nothing)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_second_run_replaces_a_cold_first_run():
    state = ServerState(Settings(inline_ms=2), None)
    shape = "SELECT * WHERE { ?s <p> ?o } # cold"
    state.record_cost(shape, 0.030)
    assert not state.inline_ok(shape)
    state.record_cost(shape, 0.0001)
    assert state.shape_cost[shape][:2] == (0.0001, 2)
    assert state.inline_ok(shape)  # the third run is inline


def test_two_expensive_runs_and_later_runs_keep_the_decaying_maximum():
    state = ServerState(Settings(inline_ms=2), None)
    shape = "SELECT * WHERE { ?s <p> ?o } # hot"
    state.record_cost(shape, 0.030)
    state.record_cost(shape, 0.020)
    assert state.shape_cost[shape][0] == 0.020 and not state.inline_ok(shape)
    state.record_cost(shape, 0.0001)  # a third run: half the estimate, as ever
    assert state.shape_cost[shape][0] == 0.010 and not state.inline_ok(shape)


def test_lane_shape_cold_probe_then_inline():
    """A fast shape (the lane's tuple key) whose first, inline probe was slow (but under its
    cap) runs in the pool once, and inline from its third run on."""
    state = ServerState(Settings(inline_ms=2), None)
    key = HashedShape(("fast", ("cold", 1)))
    t0 = time.monotonic()

    def slow(deadline):
        end = t0 + 0.004
        while time.monotonic() < end:
            pass
        return "a"

    assert state.try_inline_lane(slow, key) == (True, "a")
    assert state.try_inline_lane(lambda deadline: "b", key) == (False, None)  # the pool's turn
    state.record_cost(key, 0.00005)  # (what ServerState.run records for the pool's run)
    assert state.try_inline_lane(lambda deadline: "c", key) == (True, "c")
    # and the lane's own inline estimate follows the same rule for its second run
    key2 = HashedShape(("fast", ("cold", 2)))
    state.shape_cost[key2] = (0.001, 1, 0.001)
    assert state.try_inline_lane(lambda deadline: "d", key2)[0]
    assert state.shape_cost[key2][0] < 0.001 and state.shape_cost[key2][1] == 2


def test_cold_first_run_over_http(make_server, monkeypatch):
    """A repeated text of no template whose first run is expensive (cold) runs in the pool
    twice, then inline (its answer kept), then from the kept answers: before, five pool runs."""
    from engine.database import Database
    from server.api import common

    class ColdFirst(Database):
        """The first run of each text is 30 ms of CPU (a snapshot's one-time builds)."""

        seen: set = set()

        def query(self, text, *a, **kw):
            if text not in self.seen:
                self.seen.add(text)
                _busy(0.03)
            return super().query(text, *a, **kw)

    db = ColdFirst()
    db.update("INSERT DATA { <http://ex.org/a> <http://ex.org/p> <http://ex.org/b> . "
              "<http://ex.org/b> <http://ex.org/p> <http://ex.org/c> }")
    s = make_server(database=db, inline_ms=2)
    pooled = []
    submit = common._Workers.submit

    def spy(self, fn):
        pooled.append(1)
        return submit(self, fn)

    monkeypatch.setattr(common._Workers, "submit", spy)
    text = "SELECT (COUNT(*) AS ?k) WHERE { { SELECT * WHERE { ?x <http://ex.org/p> ?y } LIMIT 5 } }"
    bodies = []
    for _ in range(6):
        r = requests.post(s.url + "/sparql", data=text.encode(),
                          headers={"Content-Type": "application/sparql-query",
                                   "Accept": "application/sparql-results+json"})
        assert r.status_code == 200
        bodies.append(r.content)
    assert len(set(bodies)) == 1 and b'"2"' in bodies[0]
    assert len(pooled) == 2, pooled
