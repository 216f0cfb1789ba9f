"""The relevance check (:mod:`engine.stream.pred_times`, ``InstantEvaluator.quiet_until``).

* The index against recomputing the window: random streams of elements of a few predicates
  (batches of one or many elements, repeated timestamps), the transient store's GC and the
  index's trims in between, the ingestion hook taking the batch or reading the store back, a
  catch-up read when it did not run; for random
  instants, windows and predicate sets, :func:`next_change` is the first instant at which an
  element of those predicates enters or leaves the window by the conservative rule, and the
  window holds the same elements of them at every instant before it.
* Queries through the manager: every event of a manager with the check equals (rows as
  multisets) the one evaluating every instant (relevance and delta check off), over queries
  of every mode with constant and variable predicates, a predicate interned part-way, two
  streams, tumbling and hopping windows, stored-graph commits, facts absorbed "as of event
  time", RSP-QL named windows and ``f:timestamp``; and the check reuses instants. A query
  calling NOW() is never reused by it.
"""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.sparql.parser import parse_query
from engine.stream import continuous, pred_times
from engine.stream.delta import relevant_predicates
from engine.stream.manager import StreamManager
from engine.stream.pred_times import ALL, PredicateTimes, next_change, window_seqs
from engine.stream.transient import TransientStore
from engine.stream.windows import first_instant
from tests.test_stream_delta import _canon, _nd, _Off

EX = "http://ex.org/"

# ---------------------------------------------------------------- the index, by brute force

batch = st.tuples(
    st.integers(0, 900),                                  # time from the previous batch
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 300)), min_size=1, max_size=7),  # (pred, +tau)
    st.integers(0, 2),                                    # the ingestion hook: 0 not (a catch-up
    #                                                       later), 1 reading the store, 2 the batch
    st.integers(0, 3),                                    # 0: store GC, 1: index trim, else nothing
)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(batch, min_size=1, max_size=30), rng=st.sampled_from([300, 1000, 2500, 4000]),
       step=st.sampled_from([250, 1000, 3000]), keys=st.sets(st.integers(-1, 5), min_size=1, max_size=3),
       probes=st.lists(st.integers(0, 10_000), min_size=1, max_size=4))
def test_next_change_is_the_window_recomputed(batches, rng, step, keys, probes):
    store = TransientStore("a", slice_triples=6)
    pt = PredicateTimes()
    hist_p: list[int] = []
    hist_t: list[int] = []
    tau = 0
    keys = tuple(keys)
    for dt, elems, hook, gc in batches:
        tau += dt
        taus = []
        for _, d in elems:   # non-decreasing in arrival order, often repeated
            if d % 3 == 0:
                tau += d
            taus.append(tau)
        ps = [p for p, _ in elems]
        rows = np.array([[1, 100 + p, 2] for p in ps], dtype=np.int64)
        store.append_rows(rows, np.array(taus, dtype=np.int64))
        hist_p += [100 + p for p in ps]
        hist_t += taus
        if hook == 1:
            pt.sync(store)
        elif hook == 2:
            pt.append(store, rows[:, 1], np.array(taus, dtype=np.int64))
        if gc == 0:
            store.gc(tau - 2 * rng)
        elif gc == 1:
            pt.sync(store)
            pt.trim(tau - 3 * rng)
        pt.sync(store)
        # complete above `since`: every element of the history above it, per predicate
        for key in {ALL, *[100 + p for p in range(5)]}:
            want = [x for p, x in zip(hist_p, hist_t, strict=True)
                    if (key == ALL or p == key) and (pt.since is None or x > pt.since)]
            g = pt.groups.get(key)
            have = [] if g is None else list(g[0][g[1]:])
            assert [x for x in have if pt.since is None or x > pt.since] == want
        ks = tuple(k if k < 0 else 100 + k for k in keys)
        for pr in probes:
            te = first_instant(pr % (tau + 1), step)
            if pt.since is not None and te - rng < pt.since:
                continue   # not answerable from the index: the caller evaluates
            # the window's seq range by the index, as the store's own search finds it
            seqs = window_seqs(pt.groups, te - rng, te)
            if seqs is not None:
                live = store.live_start
                g0 = max(seqs[0], live)
                assert (g0, max(seqs[1], g0)) == store.time_range(te - rng, te)
            got = next_change(pt.groups, ks, te, rng, step)
            rel = [x for p, x in zip(hist_p, hist_t, strict=True) if ALL in ks or p in ks]
            cands = [first_instant(x, step) if x > te else first_instant(x + rng, step)
                     for x in rel if x > te - rng]
            assert got == (min(cands) if cands else None)
            # the rule's promise: before that instant the window holds the same elements of them
            # (instants below the last time: a later element's time is at least that)
            held = [i for i, x in enumerate(rel) if te - rng < x <= te]
            x = te + step
            while x < tau and (got is None or x < got):
                assert [i for i, y in enumerate(rel) if x - rng < y <= x] == held
                x += step


@pytest.mark.parametrize("seed", range(3))
def test_batches_of_any_size_are_grouped_in_arrival_order(seed):
    """Small batches (list calls) and large ones (one argsort): each group holds its
    predicate's times in arrival order, ALL every time."""
    rng = np.random.default_rng(seed)
    store = TransientStore("a", slice_triples=64)
    pt = PredicateTimes()
    hist: list[tuple[int, int]] = []
    for i in range(60):
        n = int(rng.choice([1, 3, 40, 127, 128, 129, 400]))
        rows = np.stack([np.zeros(n, dtype=np.int64), rng.integers(0, 6, n), np.zeros(n, dtype=np.int64)], axis=1)
        tau = np.sort(rng.integers(0, 50, n)) + i * 100
        store.append_rows(rows, tau)
        r = rng.random()
        if r < 0.35:
            pt.sync(store)
        elif r < 0.7:   # the ingestion hook with the batch (small ones one by one, large ones sorted)
            pt.append(store, rows[:, 1], tau)
        hist += list(zip(rows[:, 1].tolist(), tau.tolist(), strict=True))
    pt.sync(store)
    for pid in range(6):
        g = pt.groups.get(pid)
        assert (list(g[0]) if g else []) == [x for p, x in hist if p == pid]
    assert list(pt.groups[ALL][0]) == [x for _, x in hist]
    assert pt.max_pid == max(p for p, _ in hist)
    # trims (compacting groups past their first 256 entries) and the store's GC: window ranges
    # by the index equal the store's search wherever the index still holds the window
    end = hist[-1][1]
    for h in range(0, end, 450):
        if rng.random() < 0.5:
            store.gc(h - 300)
        pt.trim(h)
        pt.sync(store)
        for lo in range(h, end + 100, 170):
            got = window_seqs(pt.groups, lo, lo + 1000)
            live = store.live_start
            g0 = max(got[0], live)
            assert (g0, max(got[1], g0)) == store.time_range(lo, lo + 1000)
        for pid in range(6):
            g = pt.groups.get(pid)
            assert (list(g[0][g[1]:]) if g else []) == [x for p, x in hist if p == pid and x > h]


def test_a_fresh_index_starts_from_what_the_store_retains():
    store = TransientStore("a", slice_triples=4)
    rows = np.array([[1, 7, 2]] * 4, dtype=np.int64)
    for k in range(3):
        store.append_rows(rows, np.arange(4 * k, 4 * k + 4, dtype=np.int64) * 100)
    store.gc(450)            # frees the first slice (times 0..300)
    pt = pred_times.of(store)
    pt.sync(store)
    assert pt.since == store.freed_tau == 300
    assert list(pt.groups[7][0]) == [x * 100 for x in range(4, 12)]
    assert pred_times.known(store) is pt
    store.append_rows(rows[:2], np.array([1200, 1300], dtype=np.int64))
    pred_times.note(store)   # the ingestion hook
    assert pt.seq == store.end_seq and list(pt.groups[pred_times.ALL][0])[-2:] == [1200, 1300]


def test_the_batch_hook_reads_the_store_when_the_batch_is_not_next():
    """``PredicateTimes.append`` indexes the batch from its arrays only when it follows what the
    index has seen and is still retained: after a skipped hook, or once the store's GC freed
    the batch before the hook ran (the worker's GC, between the append and the hook), it does
    what a catch-up from the store does."""
    rows = np.array([[1, 7, 2], [1, 8, 2]], dtype=np.int64)
    for case in ("skipped", "freed"):
        store = TransientStore("a", slice_triples=2)
        pt = PredicateTimes()
        ref = PredicateTimes()
        store.append_rows(rows, np.array([100, 200], dtype=np.int64))
        if case == "freed":
            pt.append(store, rows[:, 1], np.array([100, 200], dtype=np.int64))
        tau = np.array([300, 400], dtype=np.int64)
        store.append_rows(rows, tau)
        if case == "freed":
            store.gc(450)   # frees both batches before the second one's hook
        pt.append(store, rows[:, 1], tau)
        ref.sync(store)
        assert pt.seq == ref.seq == store.end_seq
        assert pt.since == ref.since
        assert {k: list(g[0][g[1]:]) for k, g in pt.groups.items() if len(g[0]) > g[1]} == \
            {k: list(g[0][g[1]:]) for k, g in ref.groups.items() if len(g[0]) > g[1]}, case


def test_which_predicates_are_relevant():
    def rel(where, extra=""):
        return relevant_predicates(parse_query(f"SELECT * WHERE {{ {where} }} {extra}"))

    assert set(rel(f"?s <{EX}p> ?o OPTIONAL {{ ?o <{EX}q> ?z }} FILTER NOT EXISTS {{ ?s <{EX}r> ?o }}")) == \
        {f"<{EX}p>", f"<{EX}q>", f"<{EX}r>"}
    assert rel(f"?s ?p <{EX}o>") is None                          # a variable predicate
    assert rel(f"?s <{EX}p>+ ?o") == (f"<{EX}p>",)                # a closure (tiny_closure): p's triples
    assert rel(f"?s <{EX}p>* ?o") is None                         # its identity: every term
    assert set(rel(f"?s <{EX}p>/<{EX}q> ?o")) == {f"<{EX}p>", f"<{EX}q>"}   # (a sequence: patterns)
    assert rel(f"?s (<{EX}p>|<{EX}q>) ?o") is None                # a path
    assert rel(f"GRAPH ?g {{ ?s <{EX}p> ?o }}") is None           # GRAPH ?g
    assert rel(f"?s <{EX}p> ?o BIND(NOW() AS ?n)") is None        # volatile
    assert rel(f"?s <{EX}p> ?o FILTER(RAND() < 2)") is None
    assert rel(f"?s <{EX}p> ?o", "LIMIT 1") is None               # order-dependent
    assert rel(f"?s <{EX}p> ?o BIND(<http://www.w3.org/2001/XMLSchema#string>(?o) AS ?x)") == (f"<{EX}p>",)


# ---------------------------------------------------------------- queries through the manager

F = "http://larkc.eu/csparql/sparql/jena/ext#"
QUERIES = [
    "SELECT ?s ?o FROM STREAM <{a}> [RANGE 3s STEP 1s] WHERE {{ ?s <{ex}p> ?o }}",
    "SELECT ?s FROM STREAM <{a}> [RANGE 2s STEP 2s] WHERE {{ ?s <{ex}p> <{ex}v1> }}",      # tumbling
    "SELECT ?s ?o FROM STREAM <{a}> [RANGE 1s STEP 2s] WHERE {{ ?s <{ex}p> ?o }}",         # hopping
    "SELECT ?s (COUNT(*) AS ?n) FROM STREAM <{a}> [RANGE 4s STEP 1s] WHERE {{ ?s <{ex}p> ?o }} GROUP BY ?s",
    "SELECT ?s ?l FROM STREAM <{a}> [RANGE 3s STEP 1s] FROM <urn:jindou:default> "
    "WHERE {{ ?s <{ex}p> ?o OPTIONAL {{ ?s <{ex}label> ?l }} }}",
    "SELECT ?s ?o FROM STREAM <{a}> [RANGE 3s STEP 1s] FROM STREAM <{b}> [RANGE 2s STEP 1s] "
    "WHERE {{ ?s <{ex}p> ?o . ?o <{ex}r> ?z }}",
    "SELECT ?s ?q FROM STREAM <{a}> [RANGE 2s STEP 1s] WHERE {{ ?s ?q <{ex}v1> }}",
    "SELECT ?s ?o FROM STREAM <{a}> [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}q> ?o }}",        # <q> interned later
    "ASK FROM STREAM <{a}> [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> <{ex}v2> }}",
    "SELECT ?s ?o FROM STREAM <{a}> [RANGE 3s STEP 1s] WHERE {{ GRAPH <{a}> {{ ?s <{ex}p> ?o }} }}",
    "SELECT ?s FROM STREAM <{a}> [RANGE TRIPLES 4 STEP 1s] WHERE {{ ?s <{ex}p> ?o }}",     # count window
    "SELECT ?s (f:timestamp(?s, <{ex}p>, ?o) AS ?t) FROM STREAM <{a}> [RANGE 3s STEP 1s] "
    "WHERE {{ ?s <{ex}p> ?o }}",
    "SELECT ?s ?o FROM NAMED WINDOW <{ex}w> ON <{a}> [RANGE PT3S STEP PT1S] "
    "WHERE {{ WINDOW <{ex}w> {{ ?s <{ex}p> ?o }} }}",
    "CONSTRUCT {{ ?s <{ex}seen> ?o }} FROM STREAM <{a}> [RANGE 2s STEP 1s] WHERE {{ ?s <{ex}p> ?o }}",
]


def _scenario(rng: random.Random):
    """Elements mostly of predicates no query reads; commits, absorbed labels, quiet stretches,
    buckets after which the worker is not waited for (several instants ready at once)."""
    steps = []
    quiet = 0
    for k in range(40):
        t0 = k * 700
        rows_a = []
        if quiet > 0:
            quiet -= 1
        elif rng.random() < 0.15:
            quiet = rng.randint(2, 6)   # a stretch with nothing but noise
        if rng.random() < (0.3 if quiet else 0.8):   # sometimes nothing at all: unchanged windows
            for j in range(rng.randint(0, 4)):
                p = rng.choice(["noise"] * 4 + (["noise"] if quiet else ["p", "q" if k > 15 else "noise"]))
                rows_a.append((f"x{rng.randint(0, 3)}", p, f"v{rng.randint(0, 3)}", t0 + j))
            if rng.random() < 0.15:
                rows_a.append((f"x{rng.randint(0, 3)}", "label", f"v{k}", t0 + 5))   # absorbed
        rows_b = [(f"v{rng.randint(0, 3)}", rng.choice(["r", "noise"]), "z", t0 + 3)] \
            if rng.random() < (0.1 if quiet else 0.4) else []
        if rng.random() < 0.3:   # absorbed from a stream the query may not read: "as of event time"
            rows_b.append((f"x{rng.randint(0, 3)}", "label", f"b{k}", t0 + rng.choice([6, 400, 690])))
        steps.append((t0 + 699, rows_a, rows_b, rng.random() < 0.2, rng.random() < 0.6))
    # a commit lands between instants: the worker has caught up before it (else which instants
    # see it would depend on the threads' timing)
    return [(*x[:4], x[4] or (k + 1 < len(steps) and steps[k + 1][3])) for k, x in enumerate(steps)]


def _run(scenario, text: str, mode: str, relevance: bool, monkeypatch) -> list[tuple]:
    if not relevance:
        monkeypatch.setattr(continuous, "DeltaGuard", _Off)
        monkeypatch.setattr(continuous.InstantEvaluator, "RELEVANCE", False)
    db = Database()
    db.load_data(f"<{EX}x1> <{EX}label> \"one\" .\n".encode(), "application/n-triples")
    m = StreamManager(db, idle_after=4)
    try:
        m.register_stream("a", EX + "a", absorb=[EX + "label"])
        m.register_stream("b", EX + "b", absorb=[EX + "label"])
        m.heartbeat("a", 0)
        m.heartbeat("b", 0)
        head = "REGISTER QUERY q AS " if not mode else f"REGISTER {mode} QUERY q AS "
        m.register_query(f"PREFIX f: <{F}>\n" + head + text.format(a=EX + "a", b=EX + "b", ex=EX))
        pend_a: list = []
        pend_b: list = []
        for k, (end, rows_a, rows_b, commit, send) in enumerate(scenario):
            if commit:
                db.update(f'INSERT DATA {{ <{EX}x{k % 4}> <{EX}label> "l{k}" }}')
            pend_a += rows_a
            pend_b += rows_b
            if not send and k + 1 < len(scenario):
                continue   # posted with the next buckets': several instants ready at once
            if pend_a:
                m.ingest_ndjson("a", _nd(pend_a))
            if pend_b:
                m.ingest_ndjson("b", _nd(pend_b))
            pend_a, pend_b = [], []
            m.heartbeat("a", end)
            m.heartbeat("b", end)
            assert m.drain(30)
        return [(e.event, e.id, _events(e.data)) for e in m.log("q").since(None, from_t=0)]
    finally:
        m.close()
        db.close()
        monkeypatch.undo()


def _events(data: bytes):
    d = _canon(data)
    if "triples" in d:
        d["triples"] = sorted(d["triples"].splitlines())
    return d


def _expand(events: list[tuple]) -> list[tuple]:
    """Idle runs as the events of their instants (the grouping of a run may differ)."""
    out, by_id = [], {}
    for ev, i, d in events:
        if ev == "idle":
            step = (d["to"] - d["from"]) // max(1, d["instants"] - 1) if d["instants"] > 1 else 1
            same = by_id[d["same_as"]]
            for x in range(d["from"], d["to"] + 1, step):
                dd = dict(same)
                dd["window"] = {"start": x - (same["window"]["end"] - same["window"]["start"]), "end": x}
                out.append(("result", x, dd))
                by_id[x] = dd
        else:
            out.append((ev, i, d))
            by_id[i] = d
    return out


@pytest.mark.parametrize("seed", range(3))
def test_relevance_reuse_equals_evaluating_every_instant(seed, monkeypatch):
    rng = random.Random(seed)
    used = 0
    for qi, text in enumerate(QUERIES):
        scenario = _scenario(random.Random(seed * 1000 + qi))
        mode = rng.choice(["", "ISTREAM", "DSTREAM"]) if text.startswith("SELECT") else ""
        before = continuous.reused_total()
        got = _run(scenario, text, mode, True, monkeypatch)
        used += continuous.reused_total() - before
        want = _run(scenario, text, mode, False, monkeypatch)
        assert _expand(got) == _expand(want), (text, mode)
    assert used > 0


def test_now_is_never_reused(monkeypatch):
    before = continuous.reused_total()
    got = _run(_scenario(random.Random(7)), "SELECT ?s (NOW() AS ?n) FROM STREAM <{a}> [RANGE 3s STEP 1s] "
               "WHERE {{ ?s <{ex}p> ?o }}", "", True, monkeypatch)
    assert continuous.reused_total() == before
    assert len(got) > 10
    assert any("n" in orjson.loads(b) for _, _, d in got for b in d["results"]["bindings"])


def test_the_index_goes_with_its_last_reader(monkeypatch):
    """A stream no window reads any more drops its index (the GC's horizon would trim it to the
    end); a query registered later builds a new one and is reused by the check again."""
    # (the check's reuse shows the index is read: a maintained result skips the check)
    monkeypatch.setattr(continuous.InstantEvaluator, "MAINTAINED", False)
    db = Database()
    m = StreamManager(db)
    text = f"SELECT ?s FROM STREAM <{EX}a> [RANGE 2s STEP 1s] WHERE {{ ?s <{EX}p> ?o }}"

    def feed(k0: int, k1: int) -> None:
        for k in range(k0, k1):
            rows = [("x1", "p", "v1", k * 1000 + 1)] if k == k0 else [("x2", "noise", "v", k * 1000 + 1)]
            m.ingest_ndjson("a", _nd(rows))
            m.heartbeat("a", (k + 1) * 1000)
            assert m.drain(30)

    try:
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query("REGISTER QUERY q1 AS " + text)
        store = m._reg.streams["a"].store
        before = continuous.reused_total()
        feed(0, 8)
        assert continuous.reused_total() > before and pred_times.known(store) is not None
        m.delete_query("q1")
        assert pred_times.known(store) is None
        m.register_query("REGISTER QUERY q2 AS " + text)
        before = continuous.reused_total()
        feed(8, 16)
        assert continuous.reused_total() > before
        events = [e for e in m.log("q2").since(None, from_t=0) if e.event == "result"]
        assert len(events) >= 7
        assert all(orjson.loads(e.data)["results"]["bindings"] == [] for e in events if e.id >= 11_000)
    finally:
        m.close()
        db.close()
