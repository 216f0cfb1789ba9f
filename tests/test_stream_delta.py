"""Instants whose window change cannot match the query's patterns report the last result
(:mod:`engine.stream.delta`): every event equals the one evaluating each instant gives.

Random scenarios over one or two streams where most elements carry predicates or constants the
query does not read, queries of every mode (RSTREAM / ISTREAM / DSTREAM), forms and shapes
(constants in subject and object, OPTIONAL, FILTER, aggregates, a pattern with a variable
predicate), store commits and absorbed triples between instants: the events of a manager with
the mechanism equal (rows as multisets) those of a manager without it, and the mechanism is used.
"""

from __future__ import annotations

import random

import orjson
import pytest

from engine.database import Database
from engine.sparql import algebra as A
from engine.sparql.parser import parse_query
from engine.stream import continuous
from engine.stream.delta import DeltaGuard, query_patterns
from engine.stream.delta import hits_total as delta_hits
from engine.stream.manager import StreamManager

EX = "http://ex.org/"

QUERIES = [
    "SELECT ?s ?o FROM {a} [RANGE 3s STEP 1s] WHERE {{ ?s <{ex}p> ?o }}",
    "SELECT ?s FROM {a} [RANGE 2s STEP 500ms] WHERE {{ ?s <{ex}p> <{ex}v1> }}",
    "SELECT ?o FROM {a} [RANGE 3s STEP 1s] WHERE {{ <{ex}x1> <{ex}p> ?o }}",
    "SELECT ?s (COUNT(*) AS ?n) FROM {a} [RANGE 4s STEP 1s] WHERE {{ ?s <{ex}p> ?o }} GROUP BY ?s",
    "SELECT ?s ?l FROM {a} [RANGE 3s STEP 1s] FROM <urn:jindou:default> "
    "WHERE {{ ?s <{ex}p> ?o OPTIONAL {{ ?s <{ex}label> ?l }} }}",
    "SELECT ?s ?o FROM {a} [RANGE 3s STEP 1s] WHERE {{ ?s <{ex}p> ?o FILTER(?o != <{ex}v0>) }}",
    "ASK FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> <{ex}v2> }}",
    "SELECT ?s ?o FROM {a} [RANGE 3s STEP 1s] FROM {b} [RANGE 2s STEP 1s] "
    "WHERE {{ ?s <{ex}p> ?o . ?o <{ex}r> ?z }}",
    "SELECT ?s ?q FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s ?q <{ex}v1> }}",
    "SELECT ?s FROM {a} [RANGE TRIPLES 5 STEP 1s] WHERE {{ ?s <{ex}p> ?o }}",
    # <q> is in no dictionary until an element carries it: every pattern's constant absent first
    "SELECT ?s ?o FROM {a} [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}q> ?o }}",
]


def _nd(rows) -> bytes:
    return b"\n".join(orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}{p}>", "o": f"<{EX}{o}>", "t": t})
                      for s, p, o, t in rows)


def _scenario(rng: random.Random):
    """Elements per stream (mostly of predicates no query reads), commits between buckets."""
    steps = []
    for k in range(20):
        t0 = k * 700
        rows_a = []
        for j in range(rng.randint(0, 4)):
            p = rng.choice(["p", "noise", "noise", "noise", "q"])
            rows_a.append((f"x{rng.randint(0, 3)}", p, f"v{rng.randint(0, 3)}", t0 + j))
        rows_b = [(f"v{rng.randint(0, 3)}", rng.choice(["r", "noise"]), "z", t0 + 3)] if rng.random() < 0.4 else []
        commit = rng.random() < 0.1
        steps.append((t0 + 699, rows_a, rows_b, commit))
    return steps


def _run(scenario, text: str, mode: str, delta: bool, monkeypatch) -> list[tuple]:
    if not delta:
        monkeypatch.setattr(continuous, "DeltaGuard", _Off)
        monkeypatch.setattr(continuous.InstantEvaluator, "RELEVANCE", False)   # (pred_times)
    db = Database()
    db.load_data(f"<{EX}x1> <{EX}label> \"one\" .\n".encode(), "application/n-triples")
    m = StreamManager(db, idle_after=1000)
    try:
        m.register_stream("a", EX + "a")
        m.register_stream("b", EX + "b")
        m.heartbeat("a", 0)
        m.heartbeat("b", 0)
        m.register_query(f"REGISTER {mode} QUERY q AS " + text.format(a="a", b="b", ex=EX))
        for k, (end, rows_a, rows_b, commit) in enumerate(scenario):
            if rows_a:
                m.ingest_ndjson("a", _nd(rows_a))
            if rows_b:
                m.ingest_ndjson("b", _nd(rows_b))
            if commit:
                db.update(f'INSERT DATA {{ <{EX}x{k % 4}> <{EX}label> "l{k}" }}')
            m.heartbeat("a", end)
            m.heartbeat("b", end)
            assert m.drain(30)
        return [(e.event, e.id, _canon(e.data)) for e in m.log("q").since(None, from_t=0)]
    finally:
        m.close()
        db.close()
        monkeypatch.undo()


def _canon(data: bytes):
    """An event's data with its rows as a multiset (SPARQL leaves their order open)."""
    d = orjson.loads(data)
    res = d.get("results")
    if res is not None:
        res["bindings"] = sorted(orjson.dumps(b, option=orjson.OPT_SORT_KEYS) for b in res["bindings"])
    return d


class _Off(DeltaGuard):
    def __init__(self, query):
        super().__init__(query)
        self.patterns = None


@pytest.mark.parametrize("seed", range(4))
def test_delta_reuse_equals_evaluating_every_instant(seed, monkeypatch):
    rng = random.Random(seed)
    used = 0
    for qi, text in enumerate(QUERIES):
        scenario = _scenario(random.Random(seed * 100 + qi))
        mode = rng.choice(["", "ISTREAM", "DSTREAM"]) if not text.startswith("ASK") else ""
        before = delta_hits()
        got = _run(scenario, text, mode, True, monkeypatch)
        used += delta_hits() - before
        want = _run(scenario, text, mode, False, monkeypatch)
        assert got == want, (text, mode)
    assert used > 0


def test_patterns_of_a_query():
    q = parse_query(f"SELECT * WHERE {{ ?a <{EX}p> ?b OPTIONAL {{ ?b <{EX}q> ?c }} "
                    f"FILTER NOT EXISTS {{ ?a <{EX}r> <{EX}x> }} }}")
    pats = query_patterns(q)
    assert sorted(tp.p.key for tp in pats) == [f"<{EX}p>", f"<{EX}q>", f"<{EX}r>"]
    assert all(isinstance(tp, A.TriplePattern) for tp in pats)
    assert query_patterns(parse_query(f"SELECT * WHERE {{ ?a <{EX}p>+ ?b }}")) is None
    assert query_patterns(parse_query(f"SELECT * WHERE {{ GRAPH ?g {{ ?a <{EX}p> ?b }} }}")) is None
    assert query_patterns(parse_query(f"SELECT * WHERE {{ GRAPH <{EX}g> {{ ?a <{EX}p> ?b }} }}")) is not None
