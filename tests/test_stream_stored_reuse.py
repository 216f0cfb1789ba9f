"""The stored part of a maintained / generated query read again per class only, and shared.

* :meth:`GenQuery._stored`: a constant coming into the dictionary (the stream brings it)
  re-reads only its own class; the other classes' entries (pairs, indexes) are kept -- and
  equal what a fresh read gives (:attr:`GenQuery.KEEP_CLASSES`, counted in ``tiny_gen._KEPT``).
* :meth:`Maintained._build` takes those entries as they are when the stored part has no
  solution of its own (no copy; :attr:`Maintained.SHARE_STORED`, counted in
  ``maintained._SHARED``); with both off, the state is built the general way (each stored
  triple added with its delta joins).

Both are caches: the logs must be byte for byte the ones with them off.
"""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.test_stream_maintained_instant as MI
from engine.database import Database
from engine.stream import maintained, tiny_gen
from engine.stream.continuous import InstantEvaluator, _SnapCtx
from engine.stream.maintained import Maintained
from engine.stream.manager import StreamManager
from engine.stream.tiny_gen import GenQuery
from tests.test_stream_tiny_gen import _rows, queries

EX = "http://ex.org/"
STATIC = EX + "static"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"

# the stored part: many sensors of a type, readings only in the stream; <EX>late and the
# sensor <EX>s0 are terms only the stream brings (constants of the query absent at registration)
Q_NO_OWN = (f"SELECT ?o ?s ?v FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE {{ "
            f"?o <{EX}late> <{EX}s0> . ?o <{EX}by> ?s . ?s <{EX}type> <{EX}Sensor> . ?o <{EX}value> ?v }}")
# the stored part has solutions of its own (the general branch of _build)
Q_OWN = (f"SELECT ?s ?k FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE {{ "
         f"?s <{EX}type> <{EX}Sensor> . ?s <{EX}kind> ?k }}")


def _static() -> bytes:
    lines = [f"<{EX}s{i}> <{EX}type> <{EX}Sensor> .\n" for i in range(1, 300)]
    lines += [f"<{EX}s{i}> <{EX}kind> \"k{i % 3}\" .\n" for i in range(1, 300, 7)]
    return "".join(lines).encode()


def _feed(k: int) -> list:
    out = []
    for j in range(3):
        o = f"<{EX}o{k}_{j}>"
        t = k * 1000 + 100 * j + 1
        out += [{"s": o, "p": f"<{EX}by>", "o": f"<{EX}s{1 + (k + j) % 5}>", "t": t},
                {"s": o, "p": f"<{EX}value>", "o": f'"{(k + j) % 4}"^^<{XSD_INT}>', "t": t}]
        if k >= 2 and j != 1:   # the constants arrive after the first instants
            out.append({"s": o, "p": f"<{EX}late>", "o": f"<{EX}s0>", "t": t})
        if k % 3 == 1:
            out.append({"s": f"<{EX}s{1 + k}>", "p": f"<{EX}kind>", "o": '"k9"', "t": t})
    return out


def _run(query: str, monkeypatch, on: bool = True, probe=None):
    """The query's events ``(id, kind, data)`` over 9 one-second buckets, each followed by a
    heartbeat; ``probe(evaluator, k)`` is called after bucket ``k``'s instants."""
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", True)
    monkeypatch.setattr(GenQuery, "KEEP_CLASSES", on)
    monkeypatch.setattr(Maintained, "SHARE_STORED", on)
    db = Database()
    m = StreamManager(db)
    try:
        db.load_data(_static(), "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS {query}")
        assert m.drain(30)
        ev = m._reg.queries["q"].evaluator
        for k in range(9):
            lines = _feed(k)
            assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0
            m.heartbeat("a", (k + 1) * 1000)
            assert m.drain(30)
            if probe is not None:
                probe(ev, k, db)
        return [(e.id, e.event, bytes(e.data)) for e in m.log("q").since(None, from_t=-1)]
    finally:
        m.close()
        db.close()


def test_a_new_constant_rereads_its_class_only(monkeypatch):
    """The first instants run with <EX>late / <EX>s0 unknown; once the stream brings them the
    generator's stored entries of the other classes are the same objects (their indexes too),
    every entry equals a fresh read of the stored part, and the maintained state reads them as
    they are."""
    seen = {}

    def probe(ev, k, db):
        gen = ev._gen
        if k == 1:   # (the constants still absent)
            seen["ids"] = list(gen._ids[2])
            seen["entries"] = list(gen._sidx[1])
            return
        if k != 4:
            return
        ids = list(gen._ids[2])
        assert ids != seen["ids"]   # a constant came in
        same = [c for c, (a, b) in enumerate(zip(ids, seen["ids"], strict=True)) if a == b]
        changed = [c for c in range(len(ids)) if c not in same]
        assert same and changed
        now = gen._sidx[1]
        assert all(now[c] is seen["entries"][c] for c in same)
        assert all(now[c] is not seen["entries"][c] for c in changed)
        big = max(same, key=lambda c: len(now[c][3]))
        assert len(now[big][3]) >= 299 and now[big][1] is not None   # its index kept, not made again
        # a fresh read equals the kept entries
        snap = db.store.snapshot()
        graphs = ev._stored_graphs(_SnapCtx(snap))
        got = gen._sidx
        gen._sidx = None
        fresh = gen._stored(snap, graphs)
        gen._sidx = got
        assert [(dict(e[0]), list(e[3])) for e in fresh] == [(dict(e[0]), list(e[3])) for e in now]
        # the maintained state reads the generator's entries as they are (no own solution: no copy)
        mt = ev._maint
        assert mt.state is not None
        for c in range(len(ids)):
            assert mt.ns[f"S{c}l"] is now[c][3] and mt.ns[f"S{c}s"] is now[c][1] and mt.ns[f"S{c}p"] is now[c][0]
        seen["checked"] = True

    k0, s0 = tiny_gen._KEPT[0], maintained._SHARED[0]
    # (the rebuild a constant new to the dictionary made: the ingestion's refresh takes its id
    # without one, Maintained._refresh_ids, tests/test_stream_maintained_refresh.py)
    monkeypatch.setattr(Maintained, "REFRESH_IDS", False)
    on = _run(Q_NO_OWN, monkeypatch, probe=probe)
    assert seen.get("checked")
    assert tiny_gen._KEPT[0] > k0 and maintained._SHARED[0] > s0   # taken
    monkeypatch.undo()
    off = _run(Q_NO_OWN, monkeypatch, on=False)
    monkeypatch.undo()
    assert on == off
    assert any(_rows(d) for _, kind, d in on if kind == "result")


def test_the_general_build_when_the_stored_part_has_solutions(monkeypatch):
    """A query whose stored part has rows of its own is built the general way (no sharing):
    the same log with the caches off."""
    s0 = maintained._SHARED[0]
    a0 = maintained.answered_total()
    on = _run(Q_OWN, monkeypatch)
    assert maintained._SHARED[0] == s0
    assert maintained.answered_total() - a0 >= 4
    monkeypatch.undo()
    off = _run(Q_OWN, monkeypatch, on=False)
    monkeypatch.undo()
    assert on == off
    assert any(_rows(d) for _, kind, d in on if kind == "result")


SEEN = [0, 0]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=MI.periods, jumps=st.lists(st.sampled_from([1, 1, 2]), min_size=4, max_size=4),
       mode=st.sampled_from(["RSTREAM", "RSTREAM", "ISTREAM", "DSTREAM"]))
def test_random_queries_equal_with_and_without_the_reuse(q, per, jumps, mode, monkeypatch):
    """Random queries of the generator's forms over random streams (test_stream_maintained_instant;
    their constants may come into the dictionary with the stream): the log with the kept
    classes and the shared stored part equals the one without, byte for byte."""
    if q.startswith("ASK"):
        mode = "RSTREAM"   # (ASK is RSTREAM only)
    k0, s0 = tiny_gen._KEPT[0], maintained._SHARED[0]
    monkeypatch.setattr(GenQuery, "KEEP_CLASSES", True)
    monkeypatch.setattr(Maintained, "SHARE_STORED", True)
    on, _, _ = MI._run(q, per, jumps, None, "fast", monkeypatch, mode=mode)
    monkeypatch.undo()
    SEEN[0] += tiny_gen._KEPT[0] - k0
    SEEN[1] += maintained._SHARED[0] - s0
    monkeypatch.setattr(GenQuery, "KEEP_CLASSES", False)
    monkeypatch.setattr(Maintained, "SHARE_STORED", False)
    off, _, _ = MI._run(q, per, jumps, None, "fast", monkeypatch, mode=mode)
    monkeypatch.undo()
    assert on == off, q


def test_the_property_test_took_both_paths():
    assert SEEN[1] > 5   # (after the property test: states built on shared entries were compared)
