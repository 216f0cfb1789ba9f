"""Instants whose BGP has no solution skip the executor when every operator above it maps no
rows to no rows (:func:`engine.stream.continuous._empty_preserving`): the events equal those
of evaluating every instant through the executor -- for projections, DISTINCT, ORDER BY +
LIMIT, BIND, FILTER, and (where the executor must run: one row over no solutions) COUNT
without GROUP BY, GROUP BY + HAVING -- in every mode."""

from __future__ import annotations

import random

import pytest

from engine.database import Database
from engine.sparql.parser import parse_query
from engine.stream import continuous
from engine.stream.manager import StreamManager
from engine.stream.tiny import TinyCore
from tests.test_stream_delta import EX, _canon, _nd

QUERIES = [
    ("SELECT ?s ?o FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> ?o . ?o <{ex}q> ?z }}", True),
    ("SELECT DISTINCT ?s FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> <{ex}v1> }}", True),
    ("SELECT * FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> ?o }} ORDER BY ?o LIMIT 2", True),
    ("SELECT ?s (STR(?o) AS ?x) FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> ?o FILTER(?o != <{ex}v0>) }}",
     True),
    ("SELECT ?s ?y FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> ?o BIND(1 AS ?y) }}", True),
    ("SELECT (COUNT(*) AS ?n) FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> <{ex}v2> }}", False),
    ("SELECT ?s (COUNT(*) AS ?n) FROM {a} [RANGE 3s STEP 1s] WHERE {{ ?s <{ex}p> ?o }} GROUP BY ?s "
     "HAVING (COUNT(*) > 1)", False),
    ("ASK FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> <{ex}v2> }}", False),
]


def _scenario(rng: random.Random):
    """Sparse elements: many instants' windows hold nothing the query matches."""
    steps = []
    for k in range(16):
        t0 = k * 1000
        rows = []
        if rng.random() < 0.4:
            for j in range(rng.randint(1, 3)):
                rows.append((f"x{rng.randint(0, 2)}", rng.choice(["p", "q", "noise"]), f"v{rng.randint(0, 3)}", t0 + j))
        steps.append((t0 + 999, rows))
    return steps


def _run(scenario, text: str, mode: str, fast: bool, monkeypatch) -> tuple[list, int]:
    monkeypatch.setattr(continuous, "DeltaGuard", _Off)   # evaluate every instant
    monkeypatch.setattr(continuous.InstantEvaluator, "RELEVANCE", False)   # (pred_times: no reuse either)
    # the tuple-at-a-time core's shortcut is what is counted: not the generated code or a
    # maintained state (which answer I/DSTREAM too since wave 2k, without the executor)
    monkeypatch.setattr(continuous.InstantEvaluator, "GENERATED", False)
    monkeypatch.setattr(continuous.InstantEvaluator, "MAINTAINED", False)
    if not fast:   # every instant through the executor (no empty shortcut, no direct SELECT)
        monkeypatch.setattr(continuous, "_empty_preserving", lambda q: False)
        monkeypatch.setattr(TinyCore, "result", lambda self, sol, ctx: None)
    calls = [0]
    real = continuous.evaluate_query

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(continuous, "evaluate_query", counted)
    if fast:   # a result the direct SELECT made counts as an evaluation too (only the empty shortcut skips)
        direct = TinyCore.result

        def counted_direct(self, sol, ctx):
            got = direct(self, sol, ctx)
            calls[0] += got is not None
            return got

        monkeypatch.setattr(TinyCore, "result", counted_direct)
    db = Database()
    db.load_data(f"<{EX}x1> <{EX}label> \"one\" .\n".encode(), "application/n-triples")
    m = StreamManager(db, idle_after=1000)
    try:
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER {mode} QUERY q AS " + text.format(a="a", ex=EX))
        for end, rows in scenario:
            if rows:
                m.ingest_ndjson("a", _nd(rows))
            m.heartbeat("a", end)
            assert m.drain(30)
        return [(e.event, e.id, _canon(e.data)) for e in m.log("q").since(None, from_t=0)], calls[0]
    finally:
        m.close()
        db.close()
        monkeypatch.undo()


class _Off(continuous.DeltaGuard):
    def __init__(self, query):
        super().__init__(query)
        self.patterns = None


def test_which_queries_keep_empty():
    for text, keeps in QUERIES:
        q = parse_query(text.format(a="<urn:a>", ex=EX).replace(" FROM <urn:a> [RANGE 2s STEP 1s]", "")
                        .replace(" FROM <urn:a> [RANGE 3s STEP 1s]", ""))
        assert continuous._empty_preserving(q) is keeps, text


@pytest.mark.parametrize("seed", range(3))
def test_empty_instants_equal_the_executor(seed, monkeypatch):
    rng = random.Random(seed)
    skipped = 0
    for qi, (text, keeps) in enumerate(QUERIES):
        scenario = _scenario(random.Random(seed * 100 + qi))
        mode = rng.choice(["", "ISTREAM", "DSTREAM"]) if not text.startswith("ASK") else ""
        got, n_fast = _run(scenario, text, mode, True, monkeypatch)
        want, n_slow = _run(scenario, text, mode, False, monkeypatch)
        assert got == want, (text, mode)
        assert any(ev == "result" for ev, _, _ in got)
        if not keeps:
            assert n_fast == n_slow, text
        skipped += n_slow - n_fast
    assert skipped > 0
