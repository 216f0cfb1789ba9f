"""Regression (issue 13's differential hunt): a CONSTRUCT whose template reads a computed
value on the generated / maintained paths.

``InstantEvaluator.render`` handed the generated rows to :func:`gen_construct.triples` as term
ids, but a generated row holds counts, computed numbers and terms' keys as values, and an
error as None: ``CONSTRUCT { ?o :out ?w } WHERE { ?o ^:p ?s . { SELECT ?s (SUM(?e) AS ?w) ...
GROUP BY ?s } }`` over a window where a SUM was an error answered an internal error at every
instant. The rows are now turned into ids as the SELECT result does (:meth:`GenQuery.result`).
Each query's events must equal those with the generated and maintained paths off, and the
generated path must have answered.
"""

from __future__ import annotations

import orjson
import pytest

from engine.database import Database
from engine.stream import maintained, tiny_gen
from engine.stream.continuous import InstantEvaluator
from engine.stream.manager import StreamManager

EX = "http://ex.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
PFX = f"PREFIX : <{EX}> "
WIN = f"FROM STREAM <{EX}s> [RANGE 2s STEP 1s]"

QUERIES = [
    f"CONSTRUCT {{ ?s :out ?n }} {WIN} WHERE {{ ?s :p ?o {{ SELECT ?s (SUM(?v) AS ?n) WHERE {{ ?s :q ?v }} GROUP BY ?s }} }}",
    f"CONSTRUCT {{ ?s :out ?b }} {WIN} WHERE {{ ?s :q ?v BIND(?v + 1 AS ?b) }}",
    f"CONSTRUCT {{ ?s :count ?n }} {WIN} WHERE {{ {{ SELECT ?s (COUNT(*) AS ?n) WHERE {{ ?s :q ?v }} GROUP BY ?s }} }}",
    f"CONSTRUCT {{ ?s :label ?l }} {WIN} WHERE {{ ?s :q ?v BIND(STR(?v) AS ?l) }}",
    f"CONSTRUCT {{ ?s :half ?h . ?s :p ?o }} {WIN} WHERE {{ ?s :p ?o OPTIONAL {{ ?s :q ?v }} BIND(?v / 2 AS ?h) }}",
]

VALUES = [f'"2"^^<{XSD}integer>', f'"3"^^<{XSD}integer>', '"abc"', f'"1.5"^^<{XSD}decimal>', f"<{EX}x>"]


def _events(monkeypatch, on: bool, mode: str) -> dict:
    monkeypatch.setattr(InstantEvaluator, "GENERATED", on)
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", on)
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        for k, q in enumerate(QUERIES):
            head = "REGISTER QUERY" if mode == "RSTREAM" else f"REGISTER {mode} QUERY"
            m.register_query(f"{head} c{k} AS {PFX}{q}")
        lines = []
        for t in range(1, 6000, 137):
            s = f"<{EX}n{t % 3}>"
            lines.append({"s": s, "p": f"<{EX}p>", "o": f"<{EX}o{t % 4}>", "t": t})
            if t % 2:
                lines.append({"s": s, "p": f"<{EX}q>", "o": VALUES[t % len(VALUES)], "t": t})
        for a in range(0, len(lines), 7):
            assert m.ingest_ndjson("s", b"\n".join(orjson.dumps(x) for x in lines[a:a + 7]))["rejected"] == 0
        m.heartbeat("s", 7000)
        assert m.drain(30)
        out = {}
        for k in range(len(QUERIES)):
            evs = []
            for e in m.log(f"c{k}").since(None, from_t=-1):
                doc = orjson.loads(e.data) if e.event == "result" else {}
                assert "error" not in doc, (QUERIES[k], doc)
                evs.append((e.id, e.event, sorted(doc.get("triples", "").splitlines())))
            out[k] = evs
        return out
    finally:
        m.close()
        db.close()


@pytest.mark.parametrize("mode", ["RSTREAM", "ISTREAM"])
def test_construct_of_computed_values_equals_the_ordinary_path(monkeypatch, mode):
    g0, a0 = tiny_gen.taken_total(), maintained.answered_total()
    on = _events(monkeypatch, True, mode)
    taken = tiny_gen.taken_total() - g0 + maintained.answered_total() - a0
    off = _events(monkeypatch, False, mode)
    assert on == off
    assert taken > 0   # (the generated / maintained paths answered instants of these queries)
    assert any(triples for evs in on.values() for _, _, triples in evs)
