"""Maintained results (:mod:`engine.stream.maintained`) answer like the path they replace and like
pyoxigraph.

Random queries of the generator's forms (:mod:`tests.test_stream_tiny_gen`'s strategy: BGPs with
constants, absent constants, repeated variables, disconnected components, numeric FILTERs with
errors, DISTINCT, aliases, GROUP BY with COUNT / COUNT(DISTINCT) / HAVING, the implicit group,
ASK, and forms not maintained) over random streams: one window or two streams of different
ranges, sliding and tumbling, duplicates, triples the stored graph also holds, elements beyond
the instant already stored when it runs (the buffer), instants skipped (jumps), the ingestion
hook called as the ingestion path calls it. Every instant's event equals, as a multiset of rows,
the event of the same evaluator with maintenance off and pyoxigraph's answer over the windows
merged with the stored graph.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.sparql.csparql import parse_continuous
from engine.stream import maintained
from engine.stream.continuous import BoundWindow, InstantEvaluator
from engine.stream.manager import StreamManager
from engine.stream.transient import TransientStore
from engine.stream.windows import Window
from tests.test_stream_tiny_gen import (
    EX,
    NODES,
    PREDS,
    STATIC,
    TERMS,
    XSD,
    _oracle,
    _oxigraph_zero_quotient,
    _rows,
    queries,
    static_db,
)

SEEN = [0, 0]   # (instants answered by a maintained state, instants of maintained queries)


@pytest.fixture(scope="module")
def db():
    d = static_db((f"<{EX}a>", f"<{EX}b>"))
    yield d
    d.close()


def _pair(db, text: str, wins: list) -> tuple[InstantEvaluator, InstantEvaluator]:
    cq = parse_continuous(text)
    d = db.store.dictionary
    bound = [BoundWindow(n, EX + n, int(d.lookup(f"<{EX}{n}>")), Window.time(r, 1000), s) for n, r, s in wins]
    old = InstantEvaluator.MAINTAINED
    try:
        InstantEvaluator.MAINTAINED = True
        on = InstantEvaluator(db, cq.query, "RSTREAM", bound)
        InstantEvaluator.MAINTAINED = False
        off = InstantEvaluator(db, cq.query, "RSTREAM", bound)
    finally:
        InstantEvaluator.MAINTAINED = old
    assert off._maint is None
    return on, off


def _append(db, store, els: list, tau: int) -> None:
    """One ingested batch, as :meth:`Ingestor.store_batch` stores it (and calls the hook)."""
    d = db.store.dictionary
    ids = np.array([[int(d.lookup(x)) for x in tr] for tr in els], dtype=np.int64)
    t = np.full(len(ids), tau, dtype=np.int64)
    seq0 = store.end_seq
    store.append_rows(ids, t)
    maintained.note(store, seq0, ids, t)


triple = st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(TERMS))
# per period (1 s) of each stream: its batches (each a few triples at one time in the period)
periods = st.lists(st.lists(st.tuples(st.integers(1, 1000), st.lists(triple, min_size=1, max_size=4)),
                            max_size=3), min_size=2, max_size=9)


def replays(test):
    """The replay tests' hypothesis settings and examples: random queries over two streams'
    periods, one or two windows of these ranges, elements ahead of their instant, jumps."""
    return settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])(given(
        q=queries(), pa=periods, pb=periods, two=st.booleans(),
        rngs=st.sampled_from([(3000, 2000), (1000, 3000), (2000, 1000)]),
        ahead=st.lists(st.integers(0, 2), min_size=12, max_size=12),
        jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=12, max_size=12))(test))


@replays
def test_maintained_instants_answer_like_the_other_path_and_pyoxigraph(db, q, pa, pb, two, rngs, ahead, jumps):
    _replay(db, q, pa, pb, two, rngs, ahead, jumps)


@replays
def test_kept_stored_groups_answer_like_the_other_path_and_pyoxigraph(db, q, pa, pb, two, rngs, ahead, jumps):
    """The same with every group of patterns whose classes the stored part holds pairs of
    joined through its kept list (``CACHE_MIN`` 0, ``CACHE_PATTERNS`` 1: the test's stored
    graph is small), the solutions with window pairs joined at the triple."""
    was = maintained.Maintained.CACHE_MIN, maintained.Maintained.CACHE_PATTERNS
    maintained.Maintained.CACHE_MIN, maintained.Maintained.CACHE_PATTERNS = 0, 1
    hits = maintained._SCHIT[0]
    try:
        _replay(db, q, pa, pb, two, rngs, ahead, jumps)
    finally:
        maintained.Maintained.CACHE_MIN, maintained.Maintained.CACHE_PATTERNS = was
    KEPT[0] += maintained._SCHIT[0] - hits


KEPT = [0]


def test_the_kept_lists_were_read():
    """The property test above read kept lists (the path it checks was taken)."""
    assert KEPT[0] > 0


def _replay(db, q, pa, pb, two, rngs, ahead, jumps):
    """``q`` over streams ``pa`` (and ``pb``): each instant's event with maintenance on equals
    the one with it off and pyoxigraph's over the windows merged with the stored graph."""
    streams = [("a", rngs[0], TransientStore("a", slice_triples=8), pa)]
    if two:
        streams.append(("b", rngs[1], TransientStore("b", slice_triples=8), pb))
    clause = " ".join(f"FROM STREAM <{EX}{n}> [RANGE {r // 1000}s STEP 1s]" for n, r, _, _ in streams)
    text = f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> {clause} WHERE', 1)}"
    on, off = _pair(db, text, [(n, r, s) for n, r, s, _ in streams])
    # every batch of every stream in time order: (tau, stream, triples)
    batches = sorted(((1000 * k + dt, i, els) for i, (_, _, _, per) in enumerate(streams)
                      for k, period in enumerate(per) for dt, els in period), key=lambda b: (b[0], b[1]))
    held = []   # (tau, stream, triple) stored so far
    nxt = 0
    t = 1000
    end = 1000 * (max(len(s[3]) for s in streams) + 3)
    step = 0
    while t <= end:
        # stored: everything up to t, and up to ``ahead`` periods beyond it (elements past the instant)
        upto = t + 1000 * ahead[step % len(ahead)]
        while nxt < len(batches) and batches[nxt][0] <= upto:
            tau, i, els = batches[nxt]
            _append(db, streams[i][2], els, tau)
            held += [(tau, i, tr) for tr in els]
            nxt += 1
        before = maintained.answered_total()
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b), (text, t)
        window = {tr for tau, i, tr in held if t - streams[i][1] < tau <= t}
        if not _oxigraph_zero_quotient(db, q, window):
            assert _rows(a) == _oracle(db, q, window), (text, t)
        if on._maint is not None:
            SEEN[1] += 1
            SEEN[0] += maintained.answered_total() - before
        on.settle(a, t)
        off.settle(b, t)
        t_next = t + 1000 * jumps[step % len(jumps)]
        on.prepare(t_next)
        off.prepare(t_next)
        t = t_next
        step += 1


def test_the_property_test_took_the_maintained_path():
    """Most instants of maintained queries in the property test were answered from the state."""
    assert SEEN[1] > 0 and SEEN[0] > SEEN[1] // 3, SEEN


def _citybench_like(db, store):
    q = (f"REGISTER QUERY c AS SELECT ?o1 ?v1 ?v2 FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
         f"WHERE {{ ?o1 {PREDS[1]} ?v1 . ?o1 {PREDS[2]} {NODES[1]} . ?o2 {PREDS[1]} ?v2 . "
         f"?o2 {PREDS[2]} {NODES[2]} . FILTER(?v1 < 2 || ?v2 > 0.5) }}")
    return _pair(db, q, [("a", 3000, store)])


def test_maintained_path_is_taken(db):
    """A CityBench-like query: after the first instant (the ordinary path; the state is built
    after its event), every instant is answered from the state, equal to the other path's."""
    store = TransientStore("a", slice_triples=16)
    on, off = _citybench_like(db, store)
    assert on._maint is not None
    els = [[(NODES[3], PREDS[1], TERMS[6]), (NODES[3], PREDS[2], NODES[1]),
            (NODES[4], PREDS[1], TERMS[11]), (NODES[4], PREDS[2], NODES[2])],
           [(NODES[0], PREDS[1], TERMS[8]), (NODES[0], PREDS[2], NODES[2])],
           [(NODES[3], PREDS[1], TERMS[5])], [], [(NODES[1], PREDS[2], NODES[1])]]
    taken = 0
    for k in range(len(els) + 3):
        t = 1000 * (k + 1)
        if k < len(els) and els[k]:
            _append(db, store, els[k], t)
        before = maintained.answered_total()
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b)
        taken += maintained.answered_total() - before
        on.settle(a, t)
        on.prepare(t + 1000)
        off.settle(b, t)
        off.prepare(t + 1000)
    assert taken == len(els) + 2   # all but the first


def test_a_commit_rebuilds_the_state():
    """A commit to the stored graph between instants: the state built for the old snapshot is
    not used; the next instant answers with the new stored triple's solution."""
    d = Database()
    try:
        d.load_data(f"{NODES[0]} {PREDS[0]} {NODES[1]} .\n".encode(), "application/n-triples", graph=STATIC)
        with d.store.write_lock:
            d.store.dictionary.encode(TERMS + PREDS + [f"<{EX}a>"])
        store = TransientStore("a", slice_triples=16)
        q = (f"REGISTER QUERY c AS SELECT ?x ?z FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
             f"WHERE {{ ?x {PREDS[0]} ?y . ?y {PREDS[1]} ?z }}")
        on, off = _pair(d, q, [("a", 3000, store)])
        _append(d, store, [(NODES[1], PREDS[1], NODES[2]), (NODES[3], PREDS[1], NODES[4])], 1000)
        for t in (1000, 2000):
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _rows(a) == _rows(b)
            on.settle(a, t)
            on.prepare(t + 1000)
        assert len(_rows(a)) == 1
        d.load_data(f"{NODES[2]} {PREDS[0]} {NODES[3]} .\n".encode(), "application/n-triples", graph=STATIC)
        before = maintained.answered_total()
        a, _ = on.run(3000)
        b, _ = off.run(3000)
        assert _rows(a) == _rows(b) and len(_rows(a)) == 2
        on.settle(a, 3000)
        on.prepare(4000)
        a, _ = on.run(4000)
        b, _ = off.run(4000)
        assert _rows(a) == _rows(b)
        # both from a state rebuilt for the new snapshot (the window is small: at the instant)
        assert maintained.answered_total() - before == 2
    finally:
        d.close()


def _manager_events(maintain: bool, monkeypatch) -> tuple[list, int, list]:
    """A manager fed by ``ingest_ndjson`` / ``heartbeat`` (the ingestion path's hook): the
    query's events, the instants answered from the state, and per POST whether the state's
    window had taken the POST's elements before their instant was ready."""
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", maintain)
    db = Database()
    m = StreamManager(db)
    joined = []
    try:
        db.load_data(f"<{EX}s1> <{EX}type> <{EX}Sensor> .\n<{EX}s2> <{EX}type> <{EX}Sensor> .\n".encode(),
                     "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS SELECT ?s ?v FROM <{STATIC}> FROM STREAM <{EX}a> "
                         f"[RANGE 3s STEP 1s] WHERE {{ ?o <{EX}by> ?s . ?s <{EX}type> <{EX}Sensor> . "
                         f"?o <{EX}value> ?v FILTER(?v > 2) }}")
        ev = m._reg.queries["q"].evaluator
        before = maintained.answered_total()
        for k in range(8):
            lines = []
            for j in range(3):
                o = f"<{EX}o{k}_{j}>"
                t = k * 1000 + 100 * j + 1
                lines += [{"s": o, "p": f"<{EX}by>", "o": f"<{EX}s{1 + (j % 3)}>", "t": t},
                          {"s": o, "p": f"<{EX}value>", "o": f'"{(k + j) % 5}"^^<http://www.w3.org/2001/XMLSchema#integer>',
                           "t": t}]
            assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0
            mt = ev._maint
            if mt is not None and mt.state is not None and mt.state.tau is not None:
                joined.append(mt.state.ws[0][2] == m._reg.streams["a"].store.end_seq)
            m.heartbeat("a", (k + 1) * 1000)
            assert m.drain(30)
        events = [(e.id, _rows(e.data)) for e in m.log("q").since(None, from_t=-1) if e.event == "result"]
        return events, maintained.answered_total() - before, joined
    finally:
        m.close()
        db.close()


def test_ingestion_hook_maintains_and_answers_like_the_other_path(monkeypatch):
    """Through the manager: the ingestion path joins each POST into the state before its
    instant is ready, the instants are answered from it, the events equal those with the
    maintained results off."""
    on, answered, joined = _manager_events(True, monkeypatch)
    off, none, _ = _manager_events(False, monkeypatch)
    assert on == off and any(rows for _, rows in on)
    assert none == 0 and answered >= len(on) - 2
    assert len(joined) >= 5 and all(joined)


def test_a_deleted_query_is_no_longer_maintained():
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS SELECT ?s FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
                         f"WHERE {{ ?s <{EX}p> ?o }}")
        mt = m._reg.queries["q"].evaluator._maint
        store = m._reg.streams["a"].store
        assert mt is not None and mt in maintained._OBSERVERS[store]
        m.delete_query("q")
        assert mt not in maintained._OBSERVERS.get(store, ()) and mt.state is None
    finally:
        m.close()
        db.close()


def test_computed_numbers_equal_as_values_are_distinct_rows(db):
    """``0`` and ``-0.0E0`` are equal Python numbers (equal dict keys) but distinct terms: the
    maintained rows keep them apart, term for term as the other path writes them."""
    store = TransientStore("a", slice_triples=16)
    q = (f"REGISTER QUERY c AS SELECT ?s ?z FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
         f"WHERE {{ ?s {PREDS[2]} ?o BIND(-(?o * 1) AS ?z) }}")
    on, off = _pair(db, q, [("a", 3000, store)])
    assert on._maint is not None
    zero_i, zero_d = f'"0"^^<{XSD}integer>', f'"0"^^<{XSD}double>'

    def terms(data: bytes) -> list:
        return sorted(orjson.dumps(b, option=orjson.OPT_SORT_KEYS) for b in orjson.loads(data)["results"]["bindings"])

    before = maintained.answered_total()
    for k in range(4):
        t = 1000 * (k + 1)
        _append(db, store, [(NODES[0], PREDS[2], zero_i), (NODES[0], PREDS[2], zero_d)], t)
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert terms(a) == terms(b) and len(terms(a)) == 2 and b"-0.0E0" in a
        on.settle(a, t)
        on.prepare(t + 1000)
    assert maintained.answered_total() - before >= 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), pa=periods, ahead=st.lists(st.integers(0, 2), min_size=12, max_size=12))
def test_two_windows_of_one_stream(db, q, pa, ahead):
    """Two windows of different ranges over the same stream (a triple in both counts once in
    D, and leaves it with the longer one): the events equal the other path's."""
    store = TransientStore("a", slice_triples=8)
    text = (f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE', 1)}")
    on, off = _pair(db, text, [("a", 3000, store), ("a", 1000, store)])
    batches = sorted(((1000 * k + dt, els) for k, period in enumerate(pa) for dt, els in period), key=lambda b: b[0])
    nxt = 0
    for step, t in enumerate(range(1000, 1000 * (len(pa) + 3), 1000)):
        while nxt < len(batches) and batches[nxt][0] <= t + 1000 * ahead[step % len(ahead)]:
            _append(db, store, batches[nxt][1], batches[nxt][0])
            nxt += 1
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b), (text, t)
        on.settle(a, t)
        off.settle(b, t)
        on.prepare(t + 1000)
        off.prepare(t + 1000)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), pa=periods, at=st.integers(1, 6),
       extra=st.lists(triple, min_size=1, max_size=3))
def test_a_store_commit_in_the_middle(q, pa, at, extra):
    """The stored graph changes between two instants (a commit: a new snapshot): every event
    still equals the other path's and pyoxigraph's over the windows and the stored graph as it
    is at that instant."""
    d = Database()
    try:
        lines = [f"{NODES[i]} {PREDS[j]} {TERMS[(i * 3 + j * 5) % len(TERMS)]} .\n"
                 for i in range(len(NODES)) for j in range(len(PREDS)) if (i + j) % 2 == 1]
        d.load_data("".join(lines).encode(), "application/n-triples", graph=STATIC)
        with d.store.write_lock:
            d.store.dictionary.encode(TERMS + PREDS + [f"<{EX}a>"])
        d.static_lines = lines
        store = TransientStore("a", slice_triples=8)
        text = f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE', 1)}"
        on, off = _pair(d, text, [("a", 3000, store)])
        batches = sorted(((1000 * k + dt, els) for k, period in enumerate(pa) for dt, els in period),
                         key=lambda b: b[0])
        held, nxt = [], 0
        for step, t in enumerate(range(1000, 1000 * (len(pa) + 3), 1000)):
            if step == at:
                new = [f"{s} {p} {o} .\n" for s, p, o in extra]
                d.load_data("".join(new).encode(), "application/n-triples", graph=STATIC)
                d.static_lines = d.static_lines + new
            while nxt < len(batches) and batches[nxt][0] <= t + 1000:
                _append(d, store, batches[nxt][1], batches[nxt][0])
                held += [(batches[nxt][0], tr) for tr in batches[nxt][1]]
                nxt += 1
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _rows(a) == _rows(b), (text, t)
            window = {tr for tau, tr in held if t - 3000 < tau <= t}
            if not _oxigraph_zero_quotient(d, q, window):
                assert _rows(a) == _oracle(d, q, window), (text, t)
            on.settle(a, t)
            off.settle(b, t)
            on.prepare(t + 1000)
            off.prepare(t + 1000)
    finally:
        d.close()


@pytest.mark.parametrize("tick", [1.0, 0.0])
def test_the_cost_guard_stops_an_expensive_maintenance_only(db, monkeypatch, tick):
    """The guard weighs this query's maintenance CPU per instant against the ordinary path's.
    The maintenance's clock is replaced (``tick`` seconds per reading: 1 s makes it cost far
    more than any ordinary instant, 0 nothing; ``GUARD_FAST`` raised so the real ordinary
    instant counts as fast): the expensive one stops being maintained after two checks, the
    cheap one never does; every instant equals the path without maintenance either way."""
    now = [0.0]

    def clock() -> float:
        now[0] += tick
        return now[0]

    monkeypatch.setattr(maintained, "_clock", clock)
    monkeypatch.setattr(maintained.Maintained, "GUARD_FAST", 10.0)
    store = TransientStore("a", slice_triples=16)
    on, off = _citybench_like(db, store)
    m = on._maint
    els = [[(NODES[3], PREDS[1], TERMS[6]), (NODES[3], PREDS[2], NODES[1])],
           [(NODES[4], PREDS[1], TERMS[11]), (NODES[4], PREDS[2], NODES[2])],
           [(NODES[0], PREDS[1], TERMS[8]), (NODES[0], PREDS[2], NODES[2])], [(NODES[3], PREDS[1], TERMS[5])]]
    answered = []
    for k in range(70):
        t = 1000 * (k + 1)
        _append(db, store, els[k % len(els)], t)
        before = maintained.answered_total()
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b), t
        answered.append(maintained.answered_total() - before)
        on.settle(a, t)
        on.prepare(t + 1000)
        off.settle(b, t)
        off.prepare(t + 1000)
    if tick:
        assert m.guarded == 1 and m.state is None and m._skip > 0
        # two checks of 16 answered instants (plus the fresh measure handed to the ordinary path)
        assert 32 <= sum(answered) <= 34 and not any(answered[40:])
    else:
        assert m.guarded == 0 and sum(answered) >= 60
