"""The generated instant's window indexes kept across instants (:mod:`engine.stream.gen_index`)
give the same event, byte for byte, as the indexes rebuilt every instant
(``GenQuery.KEEP_INDEX`` off), over random queries of the generated forms, random windows on one
and on two streams (duplicates, expiry, gaps that empty a window, a jump), a stored graph that
changes between instants; and they are used.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.sparql.csparql import parse_continuous
from engine.stream import gen_index, tiny_gen
from engine.stream.continuous import BoundWindow, InstantEvaluator
from engine.stream.transient import TransientStore
from engine.stream.windows import Window
from tests.test_stream_tiny_gen import EX, NODES, PREDS, STATIC, TERMS, _rows, queries, static_db

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
USED = [0, 0]   # (instants whose indexes were kept, instants compared) over the property tests


@pytest.fixture(scope="module")
def db():
    d = static_db()
    yield d
    d.close()


def _pair(db, text: str, stores: list, rng: int) -> tuple[InstantEvaluator, InstantEvaluator]:
    """Two evaluators of ``text`` over ``stores`` (one window each): kept indexes on, off."""
    out = []
    for keep in (True, False):
        cq = parse_continuous(text)
        bws = [BoundWindow(n, EX + n, int(db.store.dictionary.lookup(f"<{EX}{n}>")), Window.time(rng, 1000), s)
               for n, s in zip("ab", stores, strict=False)]
        ev = InstantEvaluator(db, cq.query, getattr(cq, "mode", "RSTREAM"), bws)
        assert ev._gen is not None, text
        ev._gen.KEEP_INDEX = keep   # (an instance attribute: the other evaluator keeps the class's)
        out.append(ev)
    return out[0], out[1]


def _fill(db, store, els: list, offset: int = 0) -> None:
    d = db.store.dictionary
    for k, el in enumerate(els):
        if el:
            ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
            store.append_rows(ids, np.full(len(ids), 1000 * (k + 1) + offset))


def _compare(on, off, n: int, jump_at: int | None = None) -> int:
    """Instants a second apart (one skipped at ``jump_at``: the windows jump): equal events."""
    k = 0
    for t in range(1000, 1000 * (n + 2), 1000):
        if t == jump_at:
            continue
        before = gen_index.kept_total()
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert a == b, t
        _rows(a)   # (no error event)
        USED[0] += gen_index.kept_total() - before
        USED[1] += 1
        k += 1
    return k


elements = st.lists(st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(TERMS)),
                             max_size=6), min_size=1, max_size=12)


def _text(q: str, rng: int, streams: str = "a") -> str:
    froms = " ".join(f"FROM STREAM <{EX}{s}> [RANGE {rng // 1000}s STEP 1s]" for s in streams)
    return f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> {froms} WHERE', 1)}"


def _generated(q: str) -> bool:
    cq = parse_continuous(_text(q, 5000))
    return tiny_gen.GenQuery.of(cq.query, "RSTREAM") is not None


@SETTINGS
@given(q=queries(), els=elements, rng=st.sampled_from([4000, 6000, 8000, 2000]), jump=st.integers(0, 14))
def test_kept_indexes_answer_like_rebuilt_ones(db, q, els, rng, jump):
    """One stream: sliding windows (the transitions applied), gaps, a jump."""
    if not _generated(q):
        return
    store = TransientStore("a", slice_triples=16)
    on, off = _pair(db, _text(q, rng), [store], rng)
    _fill(db, store, els)
    _compare(on, off, len(els), jump_at=1000 * jump)


@SETTINGS
@given(q=queries(), els=elements, els2=elements, rng=st.sampled_from([4000, 6000, 8000]))
def test_kept_indexes_over_two_streams_answer_like_rebuilt_ones(db, q, els, els2, rng):
    """Two windows feeding the same pattern classes: their transitions interleave (a pair can
    leave one window and stay, or come back, in the other)."""
    if not _generated(q):
        return
    a, b = TransientStore("a", slice_triples=16), TransientStore("b", slice_triples=16)
    on, off = _pair(db, _text(q, rng, "ab"), [a, b], rng)
    _fill(db, a, els)
    _fill(db, b, els2, offset=500)
    _compare(on, off, max(len(els), len(els2)))


def test_the_property_tests_kept_the_indexes():
    """The kept indexes answered most of the compared instants (not only rebuilt ones)."""
    assert USED[1] > 200 and USED[0] > USED[1] // 4, USED


Q_JOIN = f"SELECT ?a ?b ?c WHERE {{ ?a <{EX}p0> ?b . ?b <{EX}p1> ?c }}"


def _slide(db, keep_broken: bool = False) -> tuple[list, list, int]:
    """A fixed sliding join (RANGE 6s over 10 seconds of elements that repeat and expire)."""
    store = TransientStore("a", slice_triples=16)
    on, off = _pair(db, _text(Q_JOIN, 6000), [store], 6000)
    els = [[(NODES[i % 5], PREDS[i % 2], NODES[(i * 2 + 1) % 5]), (NODES[(i + 2) % 5], PREDS[(i + 1) % 2], NODES[i % 5])]
           for i in range(10)]
    _fill(db, store, els)
    if keep_broken:   # (transitions dropped: the kept indexes go stale)
        on._gen._trans = tiny_gen._DONE
        orig = gen_index.WindowIndex.apply
        gen_index.WindowIndex.apply = lambda self, sidx, trans: None
    k0 = gen_index.kept_total()
    try:
        a = [on.run(t)[0] for t in range(1000, 12000, 1000)]
    finally:
        if keep_broken:
            gen_index.WindowIndex.apply = orig
    b = [off.run(t)[0] for t in range(1000, 12000, 1000)]
    return a, b, gen_index.kept_total() - k0


def test_a_sliding_join_uses_the_kept_indexes(db):
    a, b, kept = _slide(db)
    assert a == b
    assert kept >= 4   # (the spy: transitions applied rather than rebuilt on most instants)
    assert any(_rows(x) for x in a)


def test_the_comparison_catches_stale_indexes(db):
    """Transitions not applied leave the kept indexes stale: the events then differ (the
    property tests' comparison can fail)."""
    a, b, _ = _slide(db, keep_broken=True)
    assert a != b


def test_a_stored_graph_change_rebuilds_the_indexes(db):
    """A commit between instants (a new snapshot: stored pairs the window's part must now leave
    out) rebuilds them; the events stay equal."""
    d = static_db(extra=(f"<{EX}q>",))
    try:
        store = TransientStore("a", slice_triples=16)
        on, off = _pair(d, _text(Q_JOIN, 6000), [store], 6000)
        els = [[(NODES[i % 5], PREDS[0], NODES[(i + 1) % 5]), (NODES[(i + 1) % 5], PREDS[1], NODES[(i + 3) % 5])]
               for i in range(8)]
        _fill(d, store, els)
        for t in range(1000, 10000, 1000):
            if t == 5000:   # the window's pair (n4 p0 n0) and one more into the stored graph
                d.update(f"INSERT DATA {{ GRAPH <{STATIC}> {{ {NODES[4]} {PREDS[0]} {NODES[0]} . "
                         f"{NODES[0]} {PREDS[1]} {NODES[3]} }} }}")
            x, _ = on.run(t)
            y, _ = off.run(t)
            assert x == y, t
    finally:
        d.close()


RENDERED = [0]


@SETTINGS
@given(q=queries(), els=elements, rng=st.sampled_from([3000, 6000]), small=st.booleans())
def test_generated_events_are_the_bytes_select_writes(db, q, els, rng, small):
    """The generated rows' event (``GenQuery.render``: cells by column, cached per variable) is
    byte for byte what ``_JsonTerms.select`` writes for the same rows as a QueryResult; with a
    cell cache small enough to start over inside an instant (``small``) too."""
    if not _generated(q):
        return
    from engine.stream.continuous import _JsonTerms

    store = TransientStore("a", slice_triples=16)
    on, _ = _pair(db, _text(q, rng), [store], rng)
    if small:
        on._json.MAX = 3
    _fill(db, store, els)
    gen = on._gen
    real = type(gen).render

    def render(self, rows, json, ctx, extra):
        got = real(self, rows, json, ctx, extra)
        if not self.sh.ask and self.order is None:
            want = _JsonTerms().select(self.result(rows, ctx), extra)
            assert got == want
            RENDERED[0] += bool(rows)
        return got

    type(gen).render = render
    try:
        for t in range(1000, 1000 * (len(els) + 2), 1000):
            on.run(t)
    finally:
        type(gen).render = real


def test_the_byte_test_rendered_rows():
    assert RENDERED[0] > 50, RENDERED
