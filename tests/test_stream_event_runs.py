"""The large-answer event writer (:mod:`engine.stream.event_json`) writes the bytes
:func:`~engine.exec.serialize.sparql_json` writes, for cross products whose rows repeat in runs (a stream join with
static entities it does not project: CityBench C8's shape), repeat out of order, or do not
repeat (C2's shape); and a continuous query of those shapes answers every instant like the
same query with the writer off and like pyoxigraph over the window, with the run mode taken."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.evaluate import QueryContext
from engine.exec.result import UNBOUND, QueryResult
from engine.exec.serialize import sparql_json
from engine.stream import event_json
from engine.stream.continuous import BoundWindow, InstantEvaluator, _JsonTerms
from engine.stream.transient import TransientStore
from engine.stream.windows import Window
from tests.test_stream_event_json import _ids
from tests.test_stream_tiny_gen import _oracle, _rows

EX = "http://ex.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
STATIC = EX + "static"
N_TERMS = 400
N_EVENTS = 150   # static entities the stream joins without projecting them


def make_db() -> Database:
    """Store terms, static events (graph STATIC) and the streams' terms, interned."""
    d = Database()
    lines = [f"<{EX}s{i}> <{EX}p> \"v{i}\" .\n" for i in range(N_TERMS // 4)]
    lines += [f"<{EX}s{i}> <{EX}q> \"{i}\"^^<{XSD}integer> .\n" for i in range(N_TERMS // 4)]
    lines += [f"<{EX}s{i}> <{EX}r> \"x\\\"{i}\"@en .\n" for i in range(N_TERMS // 4)]
    d.load_data("".join(lines).encode(), "application/n-triples")
    static = [f"<{EX}e{i}> <{EX}a> <{EX}Event> .\n" for i in range(N_EVENTS)]
    static += [f"<{EX}e{i}> <{EX}title> \"t{i}\" .\n" for i in range(N_EVENTS)]
    d.load_data("".join(static).encode(), "application/n-triples", graph=STATIC)
    obs = [f"<{EX}o{s}_{i}>" for s in range(4) for i in range(40)]
    vals = [f'"{v}"^^<{XSD}integer>' for v in range(-3, 12)] + [f'"{v}.5"^^<{XSD}decimal>' for v in range(3)]
    with d.store.write_lock:
        d.store.dictionary.encode(obs + vals + [f"<{EX}src{s}>" for s in range(4)]
                                  + [f"<{EX}{p}>" for p in ("val", "by", "a")])
    d.static_lines = static
    d.obs, d.vals = obs, vals
    return d


@pytest.fixture(scope="module")
def db():
    d = make_db()
    yield d
    d.close()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_large_writer_equals_sparql_json(db, data):
    ids = _ids(db)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    # a cross product of groups of columns bound together, then each row repeated (runs: a join
    # with entities not projected), in nested-loop order or not
    groups = []
    for _ in range(data.draw(st.integers(1, 3))):
        width = data.draw(st.integers(1, 3))
        size = data.draw(st.sampled_from([1, 2, 3, 7, 40]))
        groups.append(rng.choice(ids, size=(size, width)))
    n = int(np.prod([len(g) for g in groups]))
    cols: list[np.ndarray] = []
    rep, tile = n, 1
    for g in groups:
        rep //= len(g)
        for j in range(g.shape[1]):
            cols.append(np.tile(np.repeat(g[:, j], rep), tile))
        tile *= len(g)
    how = data.draw(st.sampled_from(["same", "random", "tile", "shuffled"]))
    k = data.draw(st.sampled_from([1, 2, 8, 9, 30]))
    if how == "same":       # every row k times in a row
        cols = [np.repeat(c, k) for c in cols]
    elif how == "random":   # runs of random lengths
        counts = rng.integers(1, 2 * k + 1, size=n)
        cols = [np.repeat(c, counts) for c in cols]
    elif how == "tile":     # the repeats not adjacent
        cols = [np.tile(c, k) for c in cols]
    else:
        cols = [np.repeat(c, k) for c in cols]
        perm = rng.permutation(len(cols[0]))
        cols = [c[perm] for c in cols]
    if len(cols[0]) > 60_000:
        return
    order = rng.permutation(len(cols))
    cols = [cols[i] for i in order]
    if data.draw(st.integers(0, 5)) == 0:   # some unbound cells
        c = cols[0].copy()
        c[rng.random(len(c)) < 0.1] = UNBOUND
        cols[0] = c
    names = [f"v{i}" for i in range(len(cols))]
    ctx = QueryContext(db.store.snapshot())
    res = QueryResult(form="SELECT", terms=ctx, vars=names, columns=cols)
    extra = b',"window":{"start":0,"end":1}'
    want = sparql_json(res, extra)
    jt = _JsonTerms()
    if len(res) == 0:
        return
    before = event_json.RUNS_TAKEN[0]
    before_p = event_json.PERIODS_TAKEN[0]
    assert event_json.large_select(jt, res, extra) == want
    assert event_json.large_select(jt, res, extra) == want   # cached terms
    if how == "same" and k >= event_json.RUN_FACTOR and not (cols[0] == UNBOUND).any():
        assert event_json.RUNS_TAKEN[0] == before + 2    # the run mode answered
    if how == "tile" and k >= event_json.RUN_FACTOR and not (cols[0] == UNBOUND).any() \
            and event_json.row_runs(cols, len(cols[0])) is None:
        assert event_json.PERIODS_TAKEN[0] == before_p + 2   # the period mode answered


def test_row_runs():
    a = np.array([1] * 8 + [2] * 8, dtype=np.int64)
    a = np.tile(a, 4)
    b = np.repeat(np.arange(4, dtype=np.int64), 16)
    assert event_json.row_runs([b, a], 64).tolist() == list(range(0, 64, 8))   # 8 runs of 8 rows
    assert event_json.row_runs([a, b], 64).tolist() == list(range(0, 64, 8))
    assert event_json.row_runs([b], 64).tolist() == [0, 16, 32, 48]
    assert event_json.row_runs([b, np.tile(a, 2)[:64] * 0 + np.arange(64) % 9], 64) is None   # runs of < 8
    assert event_json.row_runs([np.arange(32)], 32) is None


def test_row_period():
    a = np.tile(np.array([5, 6, 7], dtype=np.int64), 11)
    b = np.tile(np.array([1, 1, 2], dtype=np.int64), 11)
    assert event_json.row_period([a, b], 33) == 3
    assert event_json.row_period([b, a], 33) == 3
    assert event_json.row_period([b], 33) == 3   # (row 1 equals row 0; the period is 3)
    c = a.copy()
    c[-1] = 9
    assert event_json.row_period([c, b], 33) is None
    assert event_json.row_period([np.arange(40)], 40) is None
    rr = np.tile(np.repeat(np.arange(4, dtype=np.int64), 2), 8)   # runs of 2 in a period of 8
    assert event_json.row_period([rr], 64) == 8
    assert event_json.row_runs([np.zeros(5, dtype=np.int64)], 5) is None   # too few rows to pay


# ---------------------------------------------------------------- continuous queries

def _evaluator(db, text: str, store) -> InstantEvaluator:
    from engine.sparql.csparql import parse_continuous  # noqa: PLC0415

    cq = parse_continuous(text)
    bw = BoundWindow("a", EX + "a", int(db.store.dictionary.lookup(f"<{EX}a>")), Window.time(3000, 1000), store)
    return InstantEvaluator(db, cq.query, cq.mode if hasattr(cq, "mode") else "RSTREAM", [bw])


SHAPES = {
    # C8's shape: two stream components, static entities joined but not projected, FILTER over ||
    "runs": (f"SELECT ?o1 ?o2 ?v1 ?v2 FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE {{ "
             f"?e <{EX}a> <{EX}Event> . ?e <{EX}title> ?t . "
             f"?o1 <{EX}val> ?v1 . ?o1 <{EX}by> <{EX}src0> . ?o2 <{EX}val> ?v2 . ?o2 <{EX}by> <{EX}src1> . "
             f"FILTER(?v1 > 2 || ?v2 > 5) }}"),
    # C2's shape: a cross product of four stream components, every row distinct
    "cross": (f"SELECT ?o1 ?o2 ?o3 ?o4 ?v1 ?v2 ?v3 ?v4 FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE {{ "
              + " ".join(f"?o{s + 1} <{EX}val> ?v{s + 1} . ?o{s + 1} <{EX}by> <{EX}src{s}> ." for s in range(4))
              + " }"),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_large_instants_answer_like_the_general_writer_and_pyoxigraph(db, shape, seed):
    q = SHAPES[shape]
    text = "REGISTER QUERY g AS " + q
    rng = np.random.default_rng(seed)
    store = TransientStore("a", slice_triples=64)
    on = _evaluator(db, text, store)
    off = _evaluator(db, text, store)
    d = db.store.dictionary
    taus = []
    per = 3 if shape == "runs" else 4    # observations per source per second
    for k in range(5):
        el = []
        for s in range(4 if shape == "cross" else 2):
            for _ in range(per):
                o = db.obs[s * 40 + int(rng.integers(40))]
                el.append((o, f"<{EX}val>", db.vals[int(rng.integers(len(db.vals)))]))
                el.append((o, f"<{EX}by>", f"<{EX}src{s}>"))
        ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
        store.append_rows(ids, np.full(len(ids), 1000 * (k + 1)))
        taus += [(1000 * (k + 1), tr) for tr in el]
    plain = q.replace(f" FROM STREAM <{EX}a> [RANGE 3s STEP 1s]", "").replace(f"FROM <{STATIC}> ", "")
    before = event_json.RUNS_TAKEN[0] + event_json.PERIODS_TAKEN[0]
    large = 0
    for t in range(1000, 7000, 1000):
        window = {tr for tau, tr in taus if t - 3000 < tau <= t}
        a, _ = on.run(t)
        event_json.ENABLED = False
        try:
            b, _ = off.run(t)
        finally:
            event_json.ENABLED = True
        ra = _rows(a)
        assert ra == _rows(b), (shape, t)
        assert ra == _oracle(db, plain, window), (shape, t)
        large += sum(ra.values()) > _JsonTerms.LARGE
    assert large > 0   # the large-answer writer was asked
    if shape == "runs":   # and its run or period mode answered (as the join orders the rows)
        assert event_json.RUNS_TAKEN[0] + event_json.PERIODS_TAKEN[0] > before


@pytest.mark.parametrize("how", ["runs", "period", "plain"])
def test_large_writer_charges_the_whole_event(db, how):
    """The run and period modes write a row once and reference it many times, but the event
    holds every copy: its whole size counts against the query's memory budget (the budget's
    error, not megabytes built), and the same answer under a larger budget is written."""
    from engine.errors import MemoryBudgetExceeded  # noqa: PLC0415

    ids = _ids(db)
    base = np.stack([np.repeat(ids[:20], 20), np.tile(ids[100:120], 20)])   # 400 distinct rows
    if how == "runs":
        cols = [np.repeat(c, 50) for c in base]
    elif how == "period":
        cols = [np.tile(c, 50) for c in base]
    else:
        cols = [np.concatenate([c, c[::-1]] * 25) for c in base]
    names = ["a", "b"]
    want_runs, want_periods = event_json.RUNS_TAKEN[0], event_json.PERIODS_TAKEN[0]
    for limit, ok in ((512 << 10, False), (64 << 20, True)):
        ctx = QueryContext(db.store.snapshot(), query_memory=limit)
        res = QueryResult(form="SELECT", terms=ctx, vars=names, columns=cols)
        size = len(sparql_json(QueryResult(form="SELECT", terms=QueryContext(db.store.snapshot()),
                                           vars=names, columns=cols)))
        assert size > 1 << 20   # the event: > 1 MiB, its distinct rows ~ 30 KiB
        if ok:
            assert event_json.large_select(_JsonTerms(), res, b"") == sparql_json(res, b"")
        else:
            with pytest.raises(MemoryBudgetExceeded):
                event_json.large_select(_JsonTerms(), res, b"")
    if how == "runs":
        assert event_json.RUNS_TAKEN[0] > want_runs
    if how == "period":
        assert event_json.PERIODS_TAKEN[0] > want_periods
