"""A maintained state keeps its constants' ids current on the ingestion thread
(:meth:`engine.stream.maintained.Maintained._refresh_ids`, issue 13: the first maintained instant).

A query whose constants are not in the dictionary yet (a predicate, a subject or an object only
the stream brings) was built with them absent; before, every instant after the dictionary grew
rebuilt the state from the stores (a query's first maintained instants). Now the ingestion
looks them up again and the state takes a new id without a rebuild. Checked: random streams
bringing the constants at random periods give byte-identical events with the refresh on and
off (and the same rows as without maintenance), sliding and tumbling; the refresh is taken and
spares the rebuilds; a window that already holds a triple with the new id (another stream
interned it meanwhile) leaves the state to the instant's rebuild, with the same events.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.stream import instant_fast, maintained
from tests.test_stream_maintained_instant import _run
from tests.test_stream_tiny_gen import EX, NODES, PREDS, TERMS, _rows

#: terms the stored graph does not hold: only the stream brings them into the dictionary
FP = f"<{EX}fresh_p>"
FN = f"<{EX}fresh_n>"
FO = f"<{EX}fresh_o>"
NEVER = f"<{EX}never>"

QUERIES = [
    f"SELECT ?x ?z WHERE {{ ?x {FP} ?y . ?x {PREDS[2]} ?z }}",
    f"SELECT ?x ?z WHERE {{ ?x {PREDS[1]} ?y . ?y {FP} ?z }}",
    f"SELECT ?x WHERE {{ ?x {PREDS[1]} {FO} . ?x {PREDS[2]} ?z }}",
    f"SELECT ?z WHERE {{ {FN} {PREDS[2]} ?z . ?z {PREDS[1]} ?y }}",
    f"SELECT DISTINCT ?x WHERE {{ ?x {FP} {FO} }}",
    f"SELECT ?x (COUNT(?z) AS ?c) WHERE {{ ?x {FP} ?y . ?x {PREDS[2]} ?z }} GROUP BY ?x",
    f"ASK WHERE {{ ?x {FP} ?y . ?y {PREDS[0]} ?z }}",
    f"SELECT ?x ?y WHERE {{ ?x {PREDS[0]} ?y . ?x {NEVER} ?w }}",   # a constant that never comes
    f"SELECT ?x ?y WHERE {{ ?x {FP} ?y . ?x {PREDS[0]} {FO} . OPTIONAL {{ ?y {PREDS[1]} ?w }} }}",
]
SUBJ = NODES + [FN]
PRED = PREDS + [FP]
OBJ = TERMS + [FO]
triple = st.tuples(st.sampled_from(SUBJ), st.sampled_from(PRED), st.sampled_from(OBJ))
periods = st.lists(st.lists(st.tuples(st.integers(1, 999), st.lists(triple, min_size=1, max_size=4)),
                            max_size=3), min_size=3, max_size=10)
WINDOWS = ["[RANGE 3s STEP 1s]", "[RANGE 2s STEP 2s]", "[RANGE 1s STEP 1s]"]

TAKEN = [0, 0]   # (refreshes that took a new id, instants compared)


def _both(q: str, per: list, jumps: list, window: str, monkeypatch) -> tuple[list, list]:
    """The query's events with the refresh on, and off (the one-function path both times);
    also checked against no maintenance (the same rows)."""
    r0 = maintained._REFRESHED[1]
    on, _, _ = _run(q, per, jumps, None, "one", monkeypatch, window=window)
    TAKEN[0] += maintained._REFRESHED[1] - r0
    TAKEN[1] += len(on)
    monkeypatch.setattr(maintained.Maintained, "REFRESH_IDS", False)
    r0 = list(maintained._REFRESHED)
    off, _, _ = _run(q, per, jumps, None, "one", monkeypatch, window=window)
    assert maintained._REFRESHED == r0   # (off: not called)
    monkeypatch.setattr(maintained.Maintained, "REFRESH_IDS", True)
    plain, _, _ = _run(q, per, jumps, None, "off", monkeypatch, window=window)
    assert on == off, q   # byte for byte: ids, kinds, data
    assert [(i, k) for i, k, _ in on] == [(i, k) for i, k, _ in plain]
    for (i, k, a), (_, _, b) in zip(on, plain, strict=True):
        if k == "result":
            assert _rows(a) == _rows(b), (q, i)
    return on, off


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=st.sampled_from(QUERIES), per=periods, window=st.sampled_from(WINDOWS),
       jumps=st.lists(st.sampled_from([1, 1, 1, 2]), min_size=3, max_size=3))
def test_the_refreshed_state_equals_the_rebuilt_one_byte_for_byte(q, per, window, jumps, monkeypatch):
    _both(q, per, jumps, window, monkeypatch)


def test_the_property_test_took_new_ids():
    assert TAKEN[1] > 0 and TAKEN[0] > 0, TAKEN


def _arriving(n: int, at: int, dt: int = 10) -> list:
    """A period per second (its elements ``dt`` ms after its start); from period ``at`` on,
    the fresh predicate joins each subject."""
    out = []
    for k in range(n):
        x = NODES[k % len(NODES)]
        els = [(x, PREDS[2], TERMS[(k + 3) % len(TERMS)])]
        if k >= at:
            els.append((x, FP, TERMS[k % len(TERMS)]))
        out.append([(dt, els)])
    return out


@pytest.mark.parametrize("window", ["[RANGE 3s STEP 1s]", "[RANGE 2s STEP 2s]"])
def test_the_refresh_spares_the_rebuild_and_the_one_function_path_answers(window, monkeypatch):
    """The fresh predicate arrives at period 2: with the refresh the state is built once (after
    the first instant) and every later instant is answered by instant_fast; without it, the
    instant after the arrival rebuilds the state."""
    builds = [0]
    build = maintained.Maintained._build

    def spy(self, *a):
        builds[0] += 1
        return build(self, *a)

    monkeypatch.setattr(maintained.Maintained, "_build", spy)
    q = QUERIES[0]
    per = _arriving(12, 2)
    r0, k0 = maintained._REFRESHED[1], instant_fast.taken_total()
    on, _ = _run(q, per, [1], None, "one", monkeypatch, window=window)[0], None
    assert maintained._REFRESHED[1] == r0 + 1   # the predicate's id taken once
    assert builds[0] == 1
    n_instants = sum(1 for _, k, _ in on if k == "result")
    assert instant_fast.taken_total() - k0 >= n_instants - 2   # (the first: no state yet)
    builds[0] = 0
    monkeypatch.setattr(maintained.Maintained, "REFRESH_IDS", False)
    off, _, _ = _run(q, per, [1], None, "one", monkeypatch, window=window)
    assert builds[0] >= 2   # (the instant after the predicate came: the state rebuilt)
    assert on == off
    assert any(_rows(d) for _, k, d in on if k == "result")   # (the fresh triples joined)


def test_a_window_holding_the_new_id_leaves_the_state_to_the_instant(monkeypatch):
    """The race the refresh guards against: a window triple read while the constant was still
    absent (here: the refresh held back for the batch that brings it, then made before any
    instant). It finds the triple in the window and leaves the state as it was; the instant
    rebuilds it; the events equal the ordinary path's."""
    append = maintained.Maintained.on_append
    seen = [0]

    def held_back(self, store, seq0, rows, tau):
        d = self._dict
        fresh = d is not None and int(d.lookup(FP)) >= 0 and seen[0] == 0
        if fresh:
            seen[0] = 1
            self.REFRESH_IDS = False   # (this batch only: its triples join with the old ids)
        try:
            append(self, store, seq0, rows, tau)
        finally:
            if fresh:
                del self.REFRESH_IDS
        if fresh:   # (the next batch's refresh, before any instant: the race's order)
            with self.lock:
                st_ = self.state
                if st_ is not None and st_.dict_n is not None:
                    self._refresh_ids(st_)

    monkeypatch.setattr(maintained.Maintained, "on_append", held_back)
    q = QUERIES[0]
    per = _arriving(10, 2, dt=0)   # (at the instant itself: joined at once, not when the next completes it)
    r0 = list(maintained._REFRESHED)
    on, _, _ = _run(q, per, [1], None, "one", monkeypatch, window="[RANGE 3s STEP 1s]")
    assert seen[0] == 1
    assert maintained._REFRESHED[2] > r0[2]   # left for the instant
    monkeypatch.setattr(maintained.Maintained, "on_append", append)
    plain, _, _ = _run(q, per, [1], None, "off", monkeypatch, window="[RANGE 3s STEP 1s]")
    assert [(i, k) for i, k, _ in on] == [(i, k) for i, k, _ in plain]
    for (i, k, a), (_, _, b) in zip(on, plain, strict=True):
        if k == "result":
            assert _rows(a) == _rows(b), i


@pytest.mark.parametrize("q", [QUERIES[2], QUERIES[3], QUERIES[7], QUERIES[8]])
def test_the_refresh_looks_up_the_ids_the_generator_does(q, monkeypatch):
    """The refresh's own look-up (reads only, not the generator's) gives the ids
    ``GenQuery._resolve`` gives for the same dictionary, absent constants included (-2)."""
    seen = []
    advance = maintained.Maintained.advance

    def spy(self, *a):
        if not seen:
            seen.append(self)
        return advance(self, *a)

    monkeypatch.setattr(maintained.Maintained, "advance", spy)
    _run(q, _arriving(6, 2), [1], None, "one", monkeypatch)
    m = seen[0]
    # (a state whose ids all differ: every one looked up and taken)
    st_ = maintained._State([(-3, -3, -3)] * len(m.gen.classes), 0, 0, (), len(m.windows))
    monkeypatch.setattr(maintained.Maintained, "REFRESH_ABSENT", False)
    m._refresh_ids(st_)
    got = m.gen._resolve(m._dict)
    assert st_.ids == got[2]
    assert (st_.dict_n is not None) == got[3]
    # (REFRESH_ABSENT, wave 2o: a state whose constants were all absent looks each one up)
    monkeypatch.setattr(maintained.Maintained, "REFRESH_ABSENT", True)
    st_ = maintained._State([tuple(None if i is None else -2 for i in ids) for ids in got[2]], 0, 0, (),
                            len(m.windows))
    m._refresh_ids(st_)
    assert st_.ids == got[2]
    assert (st_.dict_n is not None) == got[3]
