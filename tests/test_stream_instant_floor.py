"""The work around an instant's evaluation (engine.stream.scheduler / continuous / delta):
what an unchanged instant reports as its latency, the unchanged-instant check kept per
evaluated instant, the delta check's constants kept across instants."""

from __future__ import annotations

import orjson

from engine.sparql.csparql import parse_continuous
from engine.stream.delta import DeltaGuard

EX = "http://ex.org/"


def nd(*rows) -> bytes:
    return b"\n".join(orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}{p}>", "o": f'"{o}"', "t": t})
                      for s, p, o, t in rows)


def test_unchanged_instant_reports_its_own_latency(env):
    """An instant reported as unchanged (the same windows as the last evaluated one) sets the
    query's ``last_latency_ms`` to what it cost, not the last evaluated instant's."""
    _, m = env
    m.register_stream("a", EX + "a")
    m.heartbeat("a", 0)
    m.register_query("REGISTER QUERY q AS SELECT ?o FROM a [RANGE 10s STEP 1s] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("a", nd(("x", "p", "1", 500)))
    m.heartbeat("a", 1001)     # instants 0 and 1000 (an instant is ready once progress passes it)
    assert m.drain(30)
    info = m.query("q")
    assert info["evaluated"] == 2 and info["unchanged_instants"] == 0
    q = m._reg.queries["q"]
    q.last_latency_ms = -1.0   # a marker: the next instant must replace it
    m.heartbeat("a", 2001)     # nothing entered or left: instant 2000 equals instant 1000
    assert m.drain(30)
    info = m.query("q")
    assert info["evaluated"] == 3 and info["unchanged_instants"] == 1
    assert info["last_latency_ms"] is not None and info["last_latency_ms"] >= 0
    evs = [e for e in m.log("q").since(None, from_t=0) if e.event == "result"]
    assert [orjson.loads(e.data)["window"] for e in evs[1:]] == [{"start": -9000, "end": 1000},
                                                                 {"start": -8000, "end": 2000}]
    assert orjson.loads(evs[1].data)["results"] == orjson.loads(evs[2].data)["results"]


def test_unchanged_check_sees_an_element_that_arrives_after_its_first_call(env):
    """The check keeps what it read per evaluated instant; an element arriving after the first
    check of that instant still ends the unchanged run at the instant it enters."""
    _, m = env
    m.register_stream("a", EX + "a")
    m.heartbeat("a", 0)
    m.register_query("REGISTER QUERY q AS SELECT ?o FROM a [RANGE 10s STEP 1s] WHERE { ?s ?p ?o }")
    m.ingest_ndjson("a", nd(("x", "p", "1", 500)))
    m.heartbeat("a", 1001)
    assert m.drain(30)
    m.heartbeat("a", 2001)   # unchanged (first check of the state: no next element)
    assert m.drain(30)
    m.ingest_ndjson("a", nd(("y", "p", "2", 2500)))
    m.heartbeat("a", 4001)   # 3000 sees the new element, 4000 equals 3000
    assert m.drain(30)
    evs = [e for e in m.log("q").since(None, from_t=0) if e.event == "result"]
    got = {e.id: sorted(b["o"]["value"] for b in orjson.loads(e.data)["results"]["bindings"]) for e in evs}
    assert got == {0: [], 1000: ["1"], 2000: ["1"], 3000: ["1", "2"], 4000: ["1", "2"]}
    assert m.query("q")["evaluated"] == 5 and m.query("q")["unchanged_instants"] == 2


def test_delta_constants_kept_until_a_row_carries_a_newer_id(env):
    """The delta check resolves its constants once per dictionary; a constant absent at first
    is looked up again only when a changed row carries an id interned since where it stands,
    and is found then."""
    import numpy as np

    db, m = env
    cq = parse_continuous(f"REGISTER QUERY d AS SELECT ?s FROM <{EX}a> [RANGE 10s STEP 1s] "
                          f"WHERE {{ ?s <{EX}p> <{EX}never-seen> }}")
    dg = DeltaGuard(cq.query)
    d = db.store.dictionary
    assert dg._resolve(d) == []          # the constant is absent: the pattern matches nothing
    first = dg._consts
    assert first[6] == (1,) or first[6] == (2,)   # where a newer id must be looked for
    with db.store.write_lock:
        d.encode([f"<{EX}other>"])
    assert dg._resolve(d) == [] and dg._consts is first   # grown, but no row asked: kept
    old = dg._consts[4]
    other = d.lookup(f"<{EX}other>")
    # a row with a newer id elsewhere than where the absent constant stands: no lookup
    col = first[6][0]
    row = np.zeros((1, 3), dtype=np.int64)
    row[0, 0 if col else 1] = other
    assert dg._clean_rows(row, old) and dg._consts is first
    # a row with a newer id where it stands: looked up again (still absent: clean)
    row = np.zeros((1, 3), dtype=np.int64)
    row[0, col] = other
    assert dg._clean_rows(row, old) and dg._consts is not first and dg._consts[4] is old
    with db.store.write_lock:
        d.encode([f"<{EX}never-seen>", f"<{EX}p>"])
    p, ns = d.lookup(f"<{EX}p>"), d.lookup(f"<{EX}never-seen>")
    row = np.array([[0, p, ns]], dtype=np.int64)
    assert not dg._clean_rows(row, old)    # the constant is there now: not clean
    assert dg._resolve(d) == [(None, p, ns)]
    complete = dg._consts
    with db.store.write_lock:
        d.encode([f"<{EX}another>"])
    assert dg._resolve(d) == [(None, p, ns)] and dg._consts is complete   # nothing absent: kept


def test_small_event_cells_cached_across_instants_equal_sparql_json():
    """The per-variable cell cache of small answers (:class:`_JsonTerms`): a run of instants
    with one writer -- variables reordered and renamed, store ids and computed (query-local)
    terms, unbound cells, a tiny cache bound forcing clears -- writes what ``sparql_json``
    writes, every instant."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from engine.database import Database
    from engine.exec.evaluate import QueryContext
    from engine.exec.result import UNBOUND, QueryResult
    from engine.exec.serialize import sparql_json
    from engine.stream.continuous import _JsonTerms

    db = Database()
    try:
        db.load_data("".join(f"<{EX}s{i}> <{EX}p> \"v{i}\" .\n" for i in range(30)).encode(),
                     "application/n-triples")
        d = db.store.dictionary
        store_ids = [int(d.lookup(f"<{EX}s{i}>")) for i in range(30)] + [int(d.lookup(f'"v{i}"')) for i in range(30)]

        @settings(max_examples=40, deadline=None)
        @given(data=st.data())
        def run(data):
            jt = _JsonTerms()
            jt.MAX = data.draw(st.sampled_from([4, 16, _JsonTerms.MAX]))
            for _ in range(data.draw(st.integers(1, 6))):
                ctx = QueryContext(db.store.snapshot())
                names = data.draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3,
                                           unique=True))
                n = data.draw(st.integers(1, 12))
                cols = []
                for _v in names:
                    vals = []
                    for _r in range(n):
                        kind = data.draw(st.integers(0, 9))
                        if kind == 0:
                            vals.append(UNBOUND)
                        elif kind == 1:
                            vals.append(ctx.term_id(f'"computed {data.draw(st.integers(0, 3))}"'))
                        else:
                            vals.append(data.draw(st.sampled_from(store_ids)))
                    cols.append(np.array(vals, dtype=np.int64))
                res = QueryResult(form="SELECT", terms=ctx, vars=names, columns=cols)
                extra = b',"window":{"start":0,"end":1}'
                assert jt.select(res, extra) == sparql_json(res, extra)

        run()
    finally:
        db.close()


def test_diff_refresh_maps_current_and_previous_rows_alike():
    """I/DSTREAM: a computed term (a COUNT's "0") that a stream element interns between two
    instants is a query-local id in one instant's rows and a store id in the other's; both are
    mapped by one lookup per key, so an unchanged row is not reported as removed and added."""
    import numpy as np

    from engine.database import Database
    from engine.exec.evaluate import QueryContext
    from engine.stream.continuous import _StableTerms

    db = Database()
    try:
        key = '"0"^^<http://www.w3.org/2001/XMLSchema#integer>'
        st = _StableTerms(db.store.dictionary)
        ctx = QueryContext(db.store.snapshot())
        prev = st.stabilize(np.array([ctx.term_id(key)], dtype=np.int64), ctx).reshape(1, 1)
        assert int(prev[0, 0]) < 0                       # computed: a stable negative id
        with db.store.write_lock:
            sid = int(db.store.dictionary.encode([key])[0])   # a stream element brings the term
        cur = np.array([[sid]], dtype=np.int64)          # the next instant finds it in the store
        a, b = st.refresh(cur, prev)
        assert a.tolist() == b.tolist() == [[sid]]
        ctx2 = QueryContext(db.store.snapshot())
        neg = st.stabilize(np.array([ctx2.term_id('"other"')], dtype=np.int64), ctx2).reshape(1, 1)
        a, b = st.refresh(neg, np.zeros((0, 1), dtype=np.int64))
        assert a.tolist() == neg.tolist() and b.shape == (0, 1)   # not interned: kept
    finally:
        db.close()


def test_delta_match_equals_a_row_by_row_check():
    """The broadcast match of the delta check equals matching each row against each pattern."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from engine.stream import delta

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(*[st.integers(0, 4)] * 3), max_size=30),
           st.lists(st.tuples(*[st.one_of(st.none(), st.integers(0, 4))] * 3), max_size=6),
           st.sampled_from([1, 3, 1 << 16]))
    def run(rows, pats, chunk):
        arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
        consts = np.array([[-1 if c is None else c for c in p] for p in pats], dtype=np.int64).reshape(-1, 3)
        want = any(all(c is None or c == r[k] for k, c in enumerate(p)) for r in rows for p in pats)
        old = delta._CHUNK
        delta._CHUNK = chunk
        try:
            assert delta._any_match(arr, consts) == want
        finally:
            delta._CHUNK = old

    run()


def test_unchanged_until_equals_comparing_the_window_ranges():
    """``unchanged_until`` (checked, memo kept per state, early exit) against brute force: the
    last instant ``u`` up to which every instant's windows hold the same seq ranges as the
    evaluated instant's, for random streams (ties, bursts, quiet spells), time and count
    windows on one or two streams, and elements arriving between two checks of one state."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from engine.database import Database
    from engine.sparql.csparql import parse_continuous
    from engine.stream.continuous import BoundWindow, InstantEvaluator
    from engine.stream.transient import TransientStore
    from engine.stream.windows import Window

    db = Database()
    query = parse_continuous(f"REGISTER QUERY u AS SELECT * FROM <{EX}a> [RANGE 1s STEP 1s] "
                             "WHERE { ?s ?p ?o }").query

    def taus(data, n):
        out, tau = [], 0
        for _ in range(n):
            tau += data.draw(st.sampled_from([0, 0, 1, 3, 10, 40]))
            out.append(tau)
        return out

    @settings(max_examples=120, deadline=None)
    @given(data=st.data())
    def run(data):
        step = data.draw(st.sampled_from([1, 5, 10]))
        windows = []
        for k in range(data.draw(st.integers(1, 2))):
            store = TransientStore(f"s{k}", slice_triples=data.draw(st.sampled_from([2, 4, 64])))
            ts = taus(data, data.draw(st.integers(0, 25)))
            if ts:
                store.append_rows(np.zeros((len(ts), 3), dtype=np.int64), ts)
            w = (Window.count(data.draw(st.integers(1, 4)), step) if data.draw(st.integers(0, 3)) == 0
                 else Window.time(data.draw(st.sampled_from([5, 20, 60])), step))
            windows.append(BoundWindow(f"s{k}", f"{EX}s{k}", 0, w, store))
        ev = InstantEvaluator(db, query, "RSTREAM", windows, None, incremental=False)

        def ranges(t):
            return [bw.store.window_range(bw.window, t) for bw in windows]

        hi = max([bw.store.end_seq and bw.store._tau_at(bw.store.end_seq - 1) for bw in windows] + [0])
        te = step * data.draw(st.integers(0, hi // step + 2))
        last = te + step * data.draw(st.integers(1, 20))
        # instants up to ``last`` are ready: elements arriving later (here between two checks
        # of the same state) have tau beyond it
        arrive = {bw.stream: te + step * data.draw(st.integers(1, 20)) for bw in windows if data.draw(st.booleans())}
        state = (te, db.store.snapshot().sn, ranges(te))
        for t in range(te + step, last + 1, step):
            for bw in windows:
                if arrive.get(bw.stream) == t:
                    start = bw.store.end_seq and bw.store._tau_at(bw.store.end_seq - 1)
                    extra = max(last + data.draw(st.integers(1, 30)), start)
                    bw.store.append_rows(np.zeros((1, 3), dtype=np.int64), [extra])
            want = None
            for x in range(t, last + 1, step):
                if ranges(x) != state[2]:
                    break
                want = x
            assert ev.unchanged_until(state, t, last, step) == want, (te, t, last)
            if want is None:
                break

    try:
        run()
    finally:
        db.close()
