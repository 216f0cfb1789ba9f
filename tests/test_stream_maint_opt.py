"""OPTIONAL groups in maintained states (:mod:`engine.stream.maint_opt`): each instant equals the
ordinary path's and pyoxigraph's.

Random queries ``BGP OPTIONAL { ... [FILTER] } [OPTIONAL { ... }] ... [FILTER]``: one to three
groups of one or two patterns joining the required part (constants, absent constants), the
left join's FILTER reading required and optional variables, FILTERs over possibly unbound
variables outside, SELECT / DISTINCT / computed projections, replayed over the random streams
of :mod:`tests.test_stream_maintained` (one or two windows, sliding and tumbling, elements
ahead of their instant, jumps): a required solution's rows change as its optional part gains
its first match or loses its last.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.stream import maint_opt, maintained
from engine.stream.transient import TransientStore
from tests.test_stream_maintained import _pair, _replay, periods
from tests.test_stream_tiny_gen import EX, LITS, NODES, PREDS, STATIC, _rows, pattern_end, static_db

SEEN = [0, 0]   # (instants answered from OPTIONAL states, replays)
SETTLED = [0]


@pytest.fixture(scope="module")
def db():
    d = static_db((f"<{EX}a>", f"<{EX}b>"))
    yield d
    d.close()


@st.composite
def optional_queries(draw):
    req = [f"?a {draw(st.sampled_from(PREDS))} {pattern_end(draw, ['b'])} ."]
    if draw(st.booleans()):
        req.append(f"?{draw(st.sampled_from(['a', 'b']))} {draw(st.sampled_from(PREDS))} {pattern_end(draw, ['b', 'c'])} .")
    body = " ".join(req)
    rv = [v for v in "abc" if "?" + v in body]
    own_names = [("e", "f"), ("g", "h"), ("i", "j")]
    opt_vars = []
    for k in range(draw(st.integers(1, 3))):
        e, f = own_names[k]
        x = draw(st.sampled_from(rv))
        pats = [draw(st.sampled_from([f"?{x} {PREDS[j]} ?{e} ." for j in range(3)] + [f"?{e} {PREDS[0]} ?{x} ."]))]
        if draw(st.booleans()):
            pats.append(f"?{e} {draw(st.sampled_from(PREDS))} {draw(st.sampled_from([f'?{f}', f'?{x}', NODES[1]]))} .")
        grp = " ".join(pats)
        y = draw(st.sampled_from(rv))   # (a required variable the group may not bind)
        if draw(st.integers(0, 2)) == 0:
            grp += " " + draw(st.sampled_from([f"FILTER(?{e} > 1)", f"FILTER(?{e} != ?{x})", f"FILTER(?{e} != ?{y})",
                                               f"FILTER(?{e} >= 0.5 || ?{x} < 2)", "FILTER(bound(?b))"]))
        body += f" OPTIONAL {{ {grp} }}"
        opt_vars += [v for v in (e, f) if "?" + v in grp]
    if draw(st.integers(0, 2)) == 0:
        v = draw(st.sampled_from(opt_vars))
        body += " " + draw(st.sampled_from([f"FILTER(!bound(?{v}))", f"FILTER(bound(?{v}))",
                                            f"FILTER(?{v} > 0 || !bound(?{v}))", f"FILTER(?{v} > 1)"]))
    shape = draw(st.sampled_from(["star", "distinct", "proj", "compute"]))
    if shape == "star":
        return f"SELECT * WHERE {{ {body} }}"
    if shape == "distinct":
        return f"SELECT DISTINCT ?a ?{draw(st.sampled_from(opt_vars))} WHERE {{ {body} }}"
    if shape == "compute":
        return f"SELECT ?a (?{draw(st.sampled_from(opt_vars))} + 1 AS ?z) WHERE {{ {body} }}"
    return f"SELECT ?{draw(st.sampled_from(opt_vars))} ?a WHERE {{ {body} }}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(q=optional_queries(), pa=periods, pb=periods, two=st.booleans(),
       rngs=st.sampled_from([(3000, 2000), (1000, 3000), (2000, 1000)]),
       ahead=st.lists(st.integers(0, 2), min_size=12, max_size=12),
       jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=12, max_size=12))
def test_maintained_optional_instants_answer_like_the_other_path_and_pyoxigraph(db, q, pa, pb, two, rngs, ahead,
                                                                                jumps):
    before = maintained.answered_total()
    _replay(db, q, pa, pb, two, rngs, ahead, jumps)
    SEEN[0] += maintained.answered_total() - before
    SEEN[1] += 1


def test_the_optional_replay_took_the_maintained_path():
    """More than one instant per query on average was answered from an OPTIONAL state."""
    assert SEEN[1] > 0 and SEEN[0] > SEEN[1], SEEN


def test_first_and_last_optional_match(db, monkeypatch):
    """The unbound row leaves when a required solution's first optional match arrives and
    comes back when its last leaves; answered from the state, equal to the ordinary path."""
    q = (f"REGISTER QUERY o AS SELECT ?a ?v FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
         f"WHERE {{ ?a {PREDS[2]} {NODES[0]} OPTIONAL {{ ?a {PREDS[1]} ?v FILTER(?v > 0) }} }}")
    calls = [0]
    real = maint_opt.OptState.settle

    def spy(self, V):
        calls[0] += 1
        return real(self, V)

    monkeypatch.setattr(maint_opt.OptState, "settle", spy)
    store = TransientStore("a", slice_triples=8)
    on, off = _pair(db, q, [("a", 3000, store)])
    assert on._maint is not None and on._maint.opt is not None
    d = db.store.dictionary
    req, v0, v1, v2 = (NODES[3], PREDS[2], NODES[0]), (NODES[3], PREDS[1], LITS[0]), \
        (NODES[3], PREDS[1], LITS[1]), (NODES[3], PREDS[1], LITS[2])
    els = [[req], [v1], [req, v2], [], [req], [v0]]
    a0 = maintained.answered_total()
    got = []
    for k, el in enumerate(els):
        t = 1000 * (k + 1)
        if el:
            ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
            tt = np.full(len(ids), t, dtype=np.int64)
            seq0 = store.end_seq
            store.append_rows(ids, tt)
            maintained.note(store, seq0, ids, tt)
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b), t
        got.append(_rows(a))
        on.settle(a, t)
        off.settle(b, t)
        on.prepare(t + 1000)
        off.prepare(t + 1000)
    a = ("a", ("uri", f"{EX}n3"))

    def row(v):
        return {(a, ("v", v)): 1}

    one, two, unbound = ("num", "1"), ("num", "2"), ("unbound",)
    assert [dict(r) for r in got] == [row(unbound), row(one), {**row(one), **row(two)},
                                      {**row(one), **row(two)}, row(two), row(unbound)]
    assert maintained.answered_total() - a0 >= 3
    assert calls[0] > 0


def test_an_optional_filter_reading_a_required_variable_the_group_does_not_bind(db, caplog):
    """``OPTIONAL { ?s :p0 ?e FILTER(?e != ?o) }`` with ``?o`` bound by the required part only:
    the group's matches are filtered with the required solution's ``?o`` (the state used to
    fail with a NameError at every rebuild, the ordinary path answering)."""
    q = (f"REGISTER QUERY o AS SELECT * FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 2s STEP 1s] "
         f"WHERE {{ ?s {PREDS[2]} ?o OPTIONAL {{ ?s {PREDS[0]} ?e FILTER(?e != ?o) }} }}")
    store = TransientStore("a", slice_triples=16)
    on, off = _pair(db, q, [("a", 2000, store)])
    assert on._maint is not None and on._maint.opt is not None
    d = db.store.dictionary
    a0 = maintained.answered_total()
    for k in range(10):
        t = 1000 * (k + 1)
        # the optional match equals the required ?o on odd instants: filtered out there
        el = [(NODES[k % 3], PREDS[2], LITS[k % 4]), (NODES[k % 3], PREDS[0], LITS[(k + k % 2) % 4])]
        ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
        tt = np.full(len(ids), t, dtype=np.int64)
        seq0 = store.end_seq
        store.append_rows(ids, tt)
        maintained.note(store, seq0, ids, tt)
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b), t
        on.settle(a, t)
        off.settle(b, t)
        on.prepare(t + 1000)
        off.prepare(t + 1000)
    assert maintained.answered_total() - a0 >= 5
    assert "maintained result dropped" not in caplog.text
