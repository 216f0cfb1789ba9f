"""The lane's per-request steps outside the runner (wave 2l, helper P2): each fast step
answers as the step it replaces (or as an oracle) and is shown to be taken.

* ``HashedShape``: its kept hash is read without a Python frame, equal to the plain tuple's.
* ``RequestLog.request_id_line``: a header tuple seen without ``x-request-id`` is not
  searched again, and the lines are those of the searching path.
* ``SmallBGP.run``: the expansion from the one empty seed row makes its rows without a
  Python frame, in the same order as the general expansion.
* ``engine.kv.lists``: several shards of bucket tables (or of sorted key lists) are read
  by one folded function, which answers as the per-shard functions and the numpy lookups.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.bgp import _EXPAND, compile_small
from engine.kv import lists
from engine.kv.api import OUT
from engine.kv.graph import empty_graph
from engine.kv.shard import CSR
from server.api.common import HashedShape
from server.logs import RequestLog
from tests.test_kv_lists import _EX, _expect, _tp


def _python_calls(fn) -> list[str]:
    """The Python functions called while ``fn()`` runs (``sys.setprofile``)."""
    seen: list[str] = []

    def prof(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return [c for c in seen if c != "fn"]


# -- HashedShape -----------------------------------------------------------------------

_leaf = st.one_of(st.integers(), st.text(max_size=5), st.none(), st.booleans())
_nested = st.recursive(_leaf, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(_nested, max_size=5))
def test_hashed_shape_equals_and_hashes_as_the_plain_tuple(items):
    key = tuple(items)
    h = HashedShape(key)
    assert h == key and key == h and hash(h) == hash(key)
    assert {key: 1}[h] == 1 and {h: 2}[key] == 2
    assert HashedShape(key) == h and hash(HashedShape(key)) == hash(h)


def test_hashed_shape_hash_calls_no_python_function():
    h = HashedShape(("fast", (("SELECT", (("c", "<p>"), None)), ("x",), False)))
    table = {h: 1}

    def fn():
        hash(h)
        table.get(h)
        table[h] = 2
    assert _python_calls(fn) == []


# -- the request-id line -----------------------------------------------------------------

def _rlog() -> RequestLog:
    r = RequestLog(None)
    r._prefix, r._prefix_bytes, r._count = "abc", b"abc", itertools.count(1)
    return r


def test_request_id_line_skips_a_known_header_tuple_and_answers_alike():
    plain = ((b"host", b"x"), (b"accept", b"application/json"))
    fast, ref = _rlog(), _rlog()
    got = [fast.request_id_line(plain) for _ in range(4)]
    want = [ref.request_id_line(list(plain)) for _ in range(4)]  # a list: searched every time
    assert got == want == [b"x-request-id: abc-%x\r\n" % i for i in range(1, 5)]
    assert fast._plain[id(plain)] is plain  # taken: the tuple is known
    assert not ref._plain  # (lists are never remembered: they can change)
    # the client's own id is searched for and never remembered
    with_id = ((b"host", b"x"), (b"x-request-id", b"client-7"))
    assert fast.request_id_line(with_id) == b"x-request-id: client-7\r\n"
    assert id(with_id) not in fast._plain
    bad = ((b"x-request-id", b"bad id!"),)  # not a sane id: a new one
    assert fast.request_id_line(bad) == b"x-request-id: abc-5\r\n" and id(bad) not in fast._plain
    # a known tuple answers a new id each time, as the search would
    assert fast.request_id_line(plain) == b"x-request-id: abc-6\r\n"


def test_request_id_line_remembers_a_bounded_number_of_tuples():
    r = _rlog()
    kept = [((b"host", b"%d" % i),) for i in range(600)]
    for h in kept:
        r.request_id_line(h)
    assert 0 < len(r._plain) <= 256
    assert all(r._plain[k] is h for k, h in ((id(h), h) for h in kept) if k in r._plain)


# -- SmallBGP.run from the empty seed row -------------------------------------------------

def _db(edges, n_shards=1):
    data = "".join(f"<{_EX}e{s}> <{_EX}p{p}> <{_EX}e{o}> .\n" for s, p, o in sorted(edges))
    db = Database(shards=n_shards)
    db.load_data(data, "application/n-triples")
    return db


@settings(max_examples=60, deadline=None)
@given(edges=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2), st.integers(0, 7)), min_size=1, max_size=60),
       bgp=st.lists(st.tuples(st.just("e0"), st.integers(0, 2).map(lambda i: f"p{i}"),
                              st.sampled_from(["?a", "?b", "?c", "e1"])), min_size=1, max_size=3),
       chain=st.booleans())
def test_empty_seed_expansion_gives_the_general_rows_in_order(edges, bgp, chain):
    """From the one empty seed row, the rows in order; from two empty seed rows the general
    expansion (the comprehension) runs, and each step keeps the rows' order, so its
    answer is the first one twice over (constant predicates: no predicate-major sort)."""
    if chain and len(bgp) > 1:  # ?a p ?x: a chain from the first step's variable
        bgp = [bgp[0]] + [("?a", p, o) for _, p, o in bgp[1:] if o != "?a"]
    # (e0 and e1 have several neighbours by every predicate: lists of more than one)
    db = _db(set(edges) | {(s, p, o) for s in (0, 1) for p in range(3) for o in range(s + 1, s + 5)})
    g = db.store.snapshot().default
    prog = compile_small(tuple(_tp(*t) for t in bgp), g, db.store.dictionary.lookup)
    if prog is None or prog.empty:
        return
    rows, k = prog.run([()], 1000)
    twice, k2 = prog.run([(), ()], 1000)
    if k == k2 == len(prog.steps):
        assert twice == rows + rows


def test_empty_seed_expansion_is_taken_without_a_python_frame():
    db = _db([(0, 0, o) for o in range(1, 6)] + [(9, 0, 1)])
    g = db.store.snapshot().default
    prog = compile_small((_tp("e0", "p0", "?a"),), g, db.store.dictionary.lookup)
    assert prog is not None and [s[0] for s in prog.steps] == [_EXPAND]
    got: list = []
    calls = _python_calls(lambda: got.append(prog.run([()], 100)))
    rows, k = got[0]
    assert k == 1 and len(rows) == 5 and all(len(r) == 1 for r in rows)
    assert "<listcomp>" not in calls  # the general expansion's comprehension did not run
    # the general expansion (a non-empty seed row) gives the same neighbours, in order
    seeded, _ = prog.run([(7,)], 100)
    assert [r[1:] for r in seeded] == rows
    assert "<listcomp>" in _python_calls(lambda: prog.run([(7,)], 100))


# -- folded list lookups over several shards -----------------------------------------------

def _per_shard(csrs, stride):
    """The dispatching (nbrs, has) the folded functions replace: one function per shard."""
    fns = [lists._one(lists._view_spec(c, stride), stride) for c in csrs]
    n = len(fns)
    return (lambda v, cap: fns[v % n][0](v, cap)), (lambda v, o: fns[v % n][1](v, o))


def _csr(keys, rng):
    keys = np.asarray(sorted(set(keys)), dtype=np.int64)
    cnt = rng.integers(0, 4, len(keys))
    indptr = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int32)
    parts = [np.sort(rng.choice(10 ** 5, c, replace=False)) for c in cnt]
    indices = (np.concatenate(parts) if parts else np.zeros(0)).astype(np.int32)
    return CSR(keys, indptr, indices)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.sampled_from([2, 3, 4]), search=st.booleans(),
       empty=st.booleans(), probes=st.lists(st.integers(-3, 10 ** 6), max_size=10))
def test_folded_shards_answer_as_the_per_shard_functions(seed, n, search, empty, probes):
    rng = np.random.default_rng(seed)
    stride = n
    csrs = []
    for k in range(n):
        if empty and k == n - 1:
            csrs.append(None)
            continue
        ks = rng.choice(10 ** 5, 30, replace=False) * n + k  # shard k owns v % n == k
        if search:  # v and v +- 1 share a slot: not strictly increasing, a sorted-key search
            ks = np.concatenate([ks, ks + (1 if k < n - 1 else -1)])
        csrs.append(_csr(ks.tolist(), rng))
    nbrs, has = lists.list_lookups(csrs, stride)
    kinds = {lists._view_spec(c, stride)[0] for c in csrs}
    if kinds <= {"bucket", "empty"}:
        assert nbrs.__name__ == "nbrs_b" and has.__name__ == "has_b"  # taken
    elif kinds <= {"search", "empty"}:
        assert nbrs.__name__ == "nbrs_s" and has.__name__ == "has_s"
    ref_nbrs, ref_has = _per_shard(csrs, stride)
    vs = [int(x) for c in csrs if c is not None for x in c.keys[:12]] + probes + [10 ** 9]
    for v in vs:
        c = csrs[v % n]
        want = c.lookup(stride)(v).tolist() if c is not None else []
        assert nbrs(v, 10 ** 6) == ref_nbrs(v, 10 ** 6) == want
        if want:
            assert nbrs(v, len(want) - 1) is None and nbrs(v, len(want)) == want
        for o in want[:2] + [-1, 7, 99999]:
            assert has(v, o) is ref_has(v, o) is (o in want)


def test_graph_shards_of_bucket_tables_take_the_folded_lookup():
    """A store of several shards whose keys spread (the benchmark data's layout): one
    function reads them, answering as the model."""
    rng = np.random.default_rng(5)
    model = {(int(s), 1, int(o)) for s, o in zip(rng.integers(0, 50000, 300), rng.integers(0, 50000, 300), strict=True)}
    rows = np.array(sorted(model), dtype=np.int64).reshape(-1, 3)
    for n_shards in (2, 3, 4):
        g = empty_graph(n_shards).apply(None, rows)
        nbrs, has = g.local_lists(1, OUT)
        assert nbrs.__name__ == "nbrs_b"
        for v in sorted({s for s, _, _ in model})[:60] + [3, 49999, -1]:
            want = _expect(model, 1, OUT, v)
            assert nbrs(v, 10 ** 6) == want
            for o in want[:2] + [0, 50001]:
                assert has(v, o) is (o in want)


# -- the store's current snapshot ---------------------------------------------------------

def test_store_snapshot_is_a_c_call_answering_the_latest_commit():
    db = Database()
    store = db.store
    seen = [store.snapshot()]
    for i in range(3):
        db.load_data(f"<{_EX}s{i}> <{_EX}p> <{_EX}o{i}> .\n", "application/n-triples")
        snap = store.snapshot()
        assert snap is store._snapshot and snap is type(store).snapshot(store)  # as the method
        assert snap.n_triples == i + 1 and all(snap is not s for s in seen)
        seen.append(snap)
    assert _python_calls(store.snapshot) == []  # taken: no Python frame
