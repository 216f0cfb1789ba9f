"""The delta check's own rules (:class:`engine.stream.delta.DeltaGuard`), against brute force.

Random histories of one or two transient stores (windows sliding forward by random amounts,
tumbling jumps, instants with no change), rows of predicates the query reads or not, a constant
interned in the dictionary only part-way (its rows then start to match), evaluations forced now
and then: whenever the guard reports "reusable", the triples of the windows matching a pattern
are exactly those of the instant last evaluated (so the result is the same). Covers the memory
moving on a hit, the clean seq ranges kept per window, the predicate test of small changes and
the absent constants looked up only when a row carries a newer id.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.sparql.csparql import parse_continuous
from engine.stream.continuous import BoundWindow
from engine.stream.delta import DeltaGuard
from engine.stream.transient import TransientStore
from engine.stream.windows import Window

EX = "http://ex.org/"

QUERIES = [
    "?s <{ex}p0> ?o",                                  # one constant predicate
    "?s <{ex}p0> ?o . ?o <{ex}late> ?z",               # a predicate interned part-way
    "?s ?q <{ex}late>",                                # variable predicate, absent object
    "<{ex}s1> <{ex}p1> ?o OPTIONAL {{ ?o <{ex}p2> ?z }}",
    "?s <{ex}late> <{ex}s0>",
    "?s ?q <{ex}s0> . ?z ?r <{ex}p1>",                 # constants only in the object position
    "?s ?q <{ex}s0> . <{ex}s1> ?r ?z",                 # no position constant in every pattern
]


def _matching(rows: np.ndarray, d, patterns) -> set:
    """Seqs (row positions) of rows matching some pattern, by the dictionary as it is now."""
    out = set()
    for tp in patterns:
        mask = np.ones(len(rows), dtype=bool)
        for j, term in enumerate((tp.s, tp.p, tp.o)):
            if hasattr(term, "key"):
                i = d.lookup(term.key)
                mask &= rows[:, j] == i if i >= 0 else False
        out |= set(np.flatnonzero(mask).tolist())
    return out


step = st.tuples(
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)),
             max_size=40),             # (store, s, p, o) of the rows entering, as term numbers
    st.integers(0, 30), st.integers(0, 30),   # how far each window's start moves
    st.booleans(),                     # force an evaluation
    st.booleans(),                     # intern <late> (once) before this step's rows
)


@settings(max_examples=250, deadline=None)
@given(q=st.sampled_from(QUERIES), steps=st.lists(step, min_size=1, max_size=25))
def test_a_reusable_instant_has_the_same_matching_triples(q, steps):
    db = Database()
    d = db.store.dictionary
    terms = [f"<{EX}s0>", f"<{EX}s1>", f"<{EX}p0>", f"<{EX}p1>", f"<{EX}p2>", f"<{EX}noise>"]
    with db.store.write_lock:
        ids = [int(i) for i in d.encode(terms)]
    cq = parse_continuous(f"REGISTER QUERY d AS SELECT * FROM <{EX}a> [RANGE 10s STEP 1s] "
                          f"WHERE {{ {q.format(ex=EX)} }}")
    dg = DeltaGuard(cq.query)
    stores = [TransientStore("a", slice_triples=16), TransientStore("b", slice_triples=16)]
    wins = [BoundWindow("a", EX + "a", 0, Window.time(10_000, 1000), stores[0]),
            BoundWindow("b", EX + "b", 0, Window.time(10_000, 1000), stores[1])]
    all_rows = [[], []]
    starts = [0, 0]
    late = None
    evaluated = None          # matching triples (per store) at the last evaluated instant
    sn = db.store.snapshot().sn
    tau = 0
    for rows, m0, m1, force, intern in steps:
        if intern and late is None:
            with db.store.write_lock:
                late = int(d.encode([f"<{EX}late>"])[0])
        pool = ids + ([late] if late is not None else [])
        for k in (0, 1):
            mine = np.array([[pool[s % len(pool)], pool[p % len(pool)], pool[o % len(pool)]]
                             for w, s, p, o in rows if w == k], dtype=np.int64).reshape(-1, 3)
            if len(mine):
                tau += 1
                stores[k].append_rows(mine, np.full(len(mine), tau))
                all_rows[k].extend(mine.tolist())
        for k, mv in ((0, m0), (1, m1)):
            starts[k] = min(starts[k] + mv, stores[k].end_seq)
        ranges = [(starts[k], stores[k].end_seq) for k in (0, 1)]
        now = []
        for k in (0, 1):
            arr = np.array(all_rows[k], dtype=np.int64).reshape(-1, 3)
            g0, g1 = ranges[k]
            now.append({x + g0 for x in _matching(arr[g0:g1], d, dg.patterns)})
        prefix = None if force or evaluated is None else dg.reusable(wins, sn, ranges, d)
        if prefix is not None:
            assert bytes(prefix) == b"result"
            assert now == evaluated, "reused an instant whose matching triples changed"
        else:
            dg.remember(tau, sn, ranges, b"result")
            evaluated = now
