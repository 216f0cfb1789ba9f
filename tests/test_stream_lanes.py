"""The heavy-query lane (engine/stream/lanes.py): a query classified heavy is evaluated on the
lane's thread; the cheap queries of an instant are published before a heavy query of that instant;
every query's instants stay complete, in order and the same as with the lane off (no timing
assertions: which queries are heavy is pinned in the order tests, the classification is tested
with given costs)."""

from __future__ import annotations

import random
import threading
import time

import orjson
import pytest

from engine.database import Database
from engine.stream import gc as stream_gc
from engine.stream.lanes import HeavyLane
from engine.stream.manager import StreamManager

EX = "http://ex.org/lane/"

CHEAP = ("REGISTER QUERY {name} AS SELECT ?o ?v FROM STREAM <" + EX + "s> [RANGE 400ms STEP 100ms] "
         "FROM <urn:jindou:default> WHERE {{ ?o <" + EX + "by> ?x . ?o <" + EX + "v> ?v . ?x <" + EX + "in> <"
         + EX + "a{k}> }}")
HEAVY = (
    "REGISTER QUERY {name} AS SELECT (COUNT(*) AS ?n) (SUM(?v) AS ?s) FROM STREAM <" + EX + "s> "
    "[RANGE 400ms STEP 100ms] WHERE {{ ?a <" + EX + "v> ?v . ?b <" + EX + "v> ?w }}",
    "REGISTER QUERY {name} AS SELECT ?v (COUNT(*) AS ?n) FROM STREAM <" + EX + "s> [RANGE 400ms STEP 100ms] "
    "WHERE {{ ?a <" + EX + "v> ?v . ?b <" + EX + "v> ?w FILTER(?v < ?w) }} GROUP BY ?v",
    "REGISTER ISTREAM QUERY {name} AS SELECT ?o ?x FROM STREAM <" + EX + "s> [RANGE 300ms STEP 100ms] "
    "FROM <urn:jindou:default> WHERE {{ ?o <" + EX + "by> ?x . ?x <" + EX + "in> ?a }}",
    # RSP-QL (its own evaluator: named windows)
    "REGISTER RSTREAM <" + EX + "out/{name}> AS SELECT ?v (COUNT(*) AS ?n) FROM NAMED WINDOW <" + EX + "w> ON <"
    + EX + "s> [RANGE PT0.4S STEP PT0.1S] WHERE {{ WINDOW <" + EX + "w> {{ ?a <" + EX + "v> ?v . ?b <" + EX
    + "v> ?w }} }} GROUP BY ?v",
)
STATIC = "".join(f"<{EX}x{i}> <{EX}in> <{EX}a{i % 3}> .\n" for i in range(12)).encode()


def _elements(seed: int, instants: int) -> list[tuple[int, bytes]]:
    """Per instant (100 ms), the ndjson body of its elements."""
    rng = random.Random(seed)
    out = []
    k = 0
    for i in range(1, instants + 1):
        lines = []
        for _ in range(rng.randrange(0, 6)):
            k += 1
            tau = (i - 1) * 100 + rng.randrange(1, 101)
            o = f"<{EX}o{k}>"
            lines.append(orjson.dumps({"s": o, "p": f"<{EX}by>", "o": f"<{EX}x{rng.randrange(12)}>", "t": tau}))
            lines.append(orjson.dumps({"s": o, "p": f"<{EX}v>", "o": f'"{rng.randrange(20)}"^^'
                                       '<http://www.w3.org/2001/XMLSchema#integer>', "t": tau}))
        out.append((i * 100, b"\n".join(sorted(lines, key=lambda b: orjson.loads(b)["t"]))))
    return out


def _norm(data: bytes):
    """An event's content, order-independent over its solutions."""
    doc = orjson.loads(data)
    res = doc.get("results")
    if isinstance(res, dict) and "bindings" in res:
        res = dict(res, bindings=sorted(orjson.dumps(b, option=orjson.OPT_SORT_KEYS).decode()
                                        for b in res["bindings"]))
        doc = dict(doc, results=res)
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def _run(seed: int, names: list[tuple[str, str]], lane_on: bool, pinned: set[str], instants: int = 15,
         one_by_one: bool = True, order: list | None = None, defer_ms: float = 60_000.0, pause_s: float = 0.0):
    """Every query's events (instant, normalized content) and the lane's hand-over count."""
    db = Database()
    db.load_data(STATIC, "application/n-triples")
    m = StreamManager(db, retain=4 * instants)
    lane = m._scheduler.lane
    lane.enabled = lane_on
    lane.defer_ms = defer_ms
    lock = threading.Lock()
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        for name, text in names:
            m.register_query(text.format(name=name), name=name)
            if name in pinned:   # (the cost rule is tested on its own below)
                with m._reg.cv:
                    lane.pin(m._reg.queries[name])
        if order is not None:
            for q in m._reg.queries.values():
                app = q.log.append

                def spy(t, data, _app=app, _name=q.name):
                    if pause_s and _name not in pinned:
                        time.sleep(pause_s)   # (the GIL free: a lane that did not wait would start now)
                    with lock:
                        order.append((_name, int(t)))
                    _app(t, data)
                q.log.append = spy
        for t, body in _elements(seed, instants):
            if body:
                m.ingest_ndjson("s", body)
            m.heartbeat("s", t + 1)
            if one_by_one:
                assert m.drain(60)
        assert m.drain(120)
        out = {}
        for name, _ in names:
            evs = [(e.id, e.event, _norm(e.data) if e.event == "result" else e.data)
                   for e in m.log(name).since(None, from_t=-1)]
            out[name] = evs
        return out, lane.taken, {name: m.query(name) for name, _ in names}
    finally:
        m.close()
        db.close()


def _names(n_cheap: int, n_heavy: int) -> list[tuple[str, str]]:
    out = [(f"c{k}", CHEAP.replace("{k}", str(k % 3))) for k in range(n_cheap)]
    out += [(f"heavy{h}", HEAVY[h % len(HEAVY)]) for h in range(n_heavy)]
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_lane_taken_and_answers_equal_lane_off(seed):
    """Heavy queries pinned to the lane (C-SPARQL RSTREAM and ISTREAM, RSP-QL; next to batched
    cheap peers): the lane evaluates
    them (hand-over count), and every query's events -- instants, order, content -- equal those
    with the lane off."""
    names = _names(4, 4)
    pinned = {"heavy0", "heavy1", "heavy2", "heavy3"}
    on, taken_on, st = _run(seed, names, True, pinned, one_by_one=False)
    off, taken_off, _ = _run(seed, names, False, pinned, one_by_one=False)
    assert taken_off == 0
    assert taken_on >= 4 * 10, taken_on   # (an unchanged run is one turn: fewer than 3 x 16)
    assert st["heavy0"]["lane"] == "heavy" and st["c0"]["lane"] == "main"
    for name, _ in names:
        assert on[name] == off[name], name
        assert len(on[name]) >= 5, name   # (an unchanged run is one idle event)
        ids = [i for i, ev, _ in on[name] if ev == "result"]
        assert ids == sorted(ids) and len(set(ids)) == len(ids), name


def test_a_batch_member_pinned_to_the_lane_leaves_the_batch():
    """Three queries of one shape (a batch); one of them pinned heavy: it is evaluated in the
    lane, never in a batch, and every member's answers equal the lane-off run's."""
    names = [(f"c{k}", CHEAP.replace("{k}", str(k % 3))) for k in range(3)]
    on, taken, _ = _run(3, names, True, {"c1"})
    off, _, _ = _run(3, names, False, {"c1"})
    assert taken >= 10
    assert on == off and all(len(v) >= 5 for v in on.values())


def test_cheap_queries_of_an_instant_are_published_before_the_heavy_one():
    """With the lane on, at every instant the heavy query's event comes after every cheap
    query's event of that instant (the lane starts when the worker has nothing ready); with it
    off, the order is the ready FIFO's (the heavy one registered first goes first)."""
    names = [("heavy0", HEAVY[0])] + _names(5, 0)
    order: list = []
    # each cheap event is appended after a short sleep, which lets any other thread run: the
    # heavy query's instant is not started in it because the worker is not idle yet
    _run(4, names, True, {"heavy0"}, one_by_one=True, order=order, pause_s=0.01)
    pos = {key: i for i, key in enumerate(order)}
    instants = sorted({t for n, t in order if n == "heavy0"})
    assert len(instants) >= 10
    for t in instants:
        for k in range(5):
            if (f"c{k}", t) in pos:
                assert pos[(f"c{k}", t)] < pos[("heavy0", t)], (k, t)
    # also across instants fed at once: the heavy instant t still after every cheap instant t
    order2: list = []
    _run(5, names, True, {"heavy0"}, one_by_one=False, order=order2, pause_s=0.01)
    pos2 = {key: i for i, key in enumerate(order2)}
    for n, t in order2:
        if n == "heavy0":
            assert all(pos2[(f"c{k}", t)] < pos2[("heavy0", t)] for k in range(5) if (f"c{k}", t) in pos2), t


def test_cost_rule_with_given_costs():
    """A query is heavy when its average instant time reaches the bound, light again below
    half of it (hysteresis); its status says which lane."""

    class Q:
        name = "q"
        deleted = False

    lane = HeavyLane.__new__(HeavyLane)
    lane.bound_ms, lane.enabled, lane.cost, lane.heavy_ids, lane.pinned, lane.skipped = 10.0, True, {}, set(), set(), {}
    q = Q()
    lane.nominate(q)
    assert lane.tracked(q)
    lane.observe(q, 1.0)
    assert not lane.heavy(q) and lane.info(q)["lane"] == "main" and not lane.tracked(q)   # (cheap: untracked)
    lane.observe(q, 80.0)
    assert lane.heavy(q) and lane.info(q)["lane"] == "heavy" and lane.info(q)["avg_instant_ms"] == 80.0
    for _ in range(8):   # 80 -> 56.3 -> 39.7 -> 28.1 -> 20.0 -> 14.3 -> 10.3 -> 7.5 -> 5.5: still heavy
        lane.observe(q, 1.0)
    assert lane.heavy(q)
    lane.observe(q, 1.0)   # -> 4.2: light
    assert not lane.heavy(q) and lane.tracked(q)
    lane.observe(q, 1.0)   # -> 3.2
    lane.observe(q, 1.0)   # -> 2.6
    assert lane.tracked(q)
    lane.observe(q, 1.0)   # -> 2.1: under a quarter of the bound, untracked
    assert not lane.tracked(q)
    lane.enabled = False
    lane.observe(q, 500.0)
    assert lane.heavy(q) and lane.info(q)["lane"] == "main"   # (off: everything on the worker)


def test_measured_cost_moves_an_expensive_query_to_the_lane():
    """Without a pin: a query whose instants cost more CPU than the bound (bound set to 0 ms: any
    measured cost is enough) is handed to the lane by the worker's own measurement."""
    db = Database()
    db.load_data(STATIC, "application/n-triples")
    m = StreamManager(db)
    lane = m._scheduler.lane
    lane.bound_ms = 0.0
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        m.register_query(HEAVY[0].format(name="h"))
        for t, body in _elements(7, 6):
            if body:
                m.ingest_ndjson("s", body)
            m.heartbeat("s", t + 1)
            assert m.drain(60)
        assert lane.taken >= 1
        assert m.query("h")["lane"] == "heavy"
    finally:
        m.close()
        db.close()


def test_gc_keeps_the_instant_the_lane_evaluates():
    """While the lane evaluates instant t of a query (``lane_t``), the stream's GC horizon
    keeps t's window, although the query's trigger has moved past t."""
    db = Database()
    m = StreamManager(db)
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        m.register_query(HEAVY[0].format(name="h"))
        for t, body in _elements(8, 12):
            if body:
                m.ingest_ndjson("s", body)
            m.heartbeat("s", t + 1)
        assert m.drain(60)
        q = m._reg.queries["h"]
        nxt = q.trigger.next_instant
        h_next = stream_gc.stream_horizon(m._reg, "s")
        q.lane_t = nxt - 500
        h_lane = stream_gc.stream_horizon(m._reg, "s")
        abs_lane = stream_gc.absorb_horizon(m._reg)
        q.lane_t = None
        assert h_lane is not None and h_next is not None and h_lane < h_next
        assert abs_lane is not None and abs_lane < nxt - 500
    finally:
        m.close()
        db.close()


def test_deleted_while_in_the_lane():
    """A query deleted while the lane holds it: no event after its deletion, the lane forgets
    it, the others go on and drain completes."""
    db = Database()
    db.load_data(STATIC, "application/n-triples")
    m = StreamManager(db)
    lane = m._scheduler.lane
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        m.register_query(HEAVY[1].format(name="h"))
        with m._reg.cv:
            lane.pin(m._reg.queries["h"])
        m.register_query(CHEAP.format(name="c", k=0))
        els = _elements(9, 20)
        for t, body in els[:10]:
            if body:
                m.ingest_ndjson("s", body)
            m.heartbeat("s", t + 1)
        m.delete_query("h")
        for t, body in els[10:]:
            if body:
                m.ingest_ndjson("s", body)
            m.heartbeat("s", t + 1)
        assert m.drain(60)
        assert m.query("c")["evaluated"] == 21
        with m._reg.cv:
            assert not lane.busy() and not lane.owned
            assert all(c[0].name != "h" for c in lane.cost.values()) and not lane.heavy_ids
    finally:
        m.close()
        db.close()


def _feed_at_once(m, seed: int, instants: int) -> None:
    """Every element, then one heartbeat: all instants ready together."""
    els = _elements(seed, instants)
    body = b"\n".join(b for _, b in els if b)
    if body:
        m.ingest_ndjson("s", body)
    m.heartbeat("s", els[-1][0] + 1)


@pytest.mark.parametrize("shape", [0, 1])
def test_a_heavy_query_far_behind_skips_to_its_newest_instant(shape):
    """A heavy query max_lag or more instants behind (all instants ready at once): the skipped
    run is one error event {"error": "skipped", from, to, instants}, then its newest instant is
    evaluated and equals the same query's answer at that instant with the lane off (every
    instant evaluated); a cheap query next to it answers every instant, as with the lane off."""
    out = {}
    for lane_on in (True, False):
        db = Database()
        db.load_data(STATIC, "application/n-triples")
        m = StreamManager(db, retain=100)
        lane = m._scheduler.lane
        lane.enabled, lane.max_lag = lane_on, 5
        try:
            m.register_stream("s", EX + "s")
            m.heartbeat("s", 0)
            m.register_query(HEAVY[shape].format(name="h"))
            m.register_query(CHEAP.format(name="c", k=1))
            with m._reg.cv:
                lane.pin(m._reg.queries["h"])
            _feed_at_once(m, 10 + shape, 20)
            assert m.drain(60)
            out[lane_on] = ({n: [(e.id, e.event, e.data) for e in m.log(n).since(None, from_t=-1)] for n in ("h", "c")},
                            m.query("h"))
        finally:
            m.close()
            db.close()
    (on, st_on), (off, _) = out[True], out[False]
    assert [(i, ev, _norm(d)) for i, ev, d in on["c"]] == [(i, ev, _norm(d)) for i, ev, d in off["c"]]
    results_off = {i: _norm(d) for i, ev, d in off["h"] if ev == "result"}
    assert len(results_off) >= 20
    skipped = [(i, orjson.loads(d)) for i, ev, d in on["h"] if ev == "result" and b'"skipped"' in d]
    assert len(skipped) == 1, on["h"]
    v, sk = skipped[0]
    assert sk["error"] == "skipped" and sk["to"] == v and sk["instants"] == (v - sk["from"]) // 100 + 1 >= 5
    assert st_on["skipped_instants"] == sk["instants"] and st_on["lane"] == "heavy"
    rest = [(i, ev, d) for i, ev, d in on["h"] if i > v]
    assert rest and rest[0][0] == v + 100 and rest[0][1] == "result"
    ids = [i for i, _, _ in on["h"]]
    assert ids == sorted(ids)
    for i, ev, d in rest:   # (RSTREAM: each evaluated instant's answer is the query's own)
        assert ev == "result" and _norm(d) == results_off[i], i
    before = [(i, _norm(d)) for i, ev, d in on["h"] if i < sk["from"]]
    assert all(results_off[i] == d for i, d in before)


def test_by_default_a_heavy_query_far_behind_answers_every_instant():
    """Skipping loses instants, so it is the operator's choice (``--skip-behind``, off by
    default): a pinned heavy query 20 instants behind answers all of them, equal to the lane-off
    run, and the manager hands a given ``skip_behind`` to its lane."""
    out = {}
    for lane_on in (True, False):
        db = Database()
        db.load_data(STATIC, "application/n-triples")
        m = StreamManager(db, retain=100)
        lane = m._scheduler.lane
        assert lane.max_lag == 0
        lane.enabled = lane_on
        try:
            m.register_stream("s", EX + "s")
            m.heartbeat("s", 0)
            m.register_query(HEAVY[0].format(name="h"))
            with m._reg.cv:
                lane.pin(m._reg.queries["h"])
            _feed_at_once(m, 10, 20)
            assert m.drain(60)
            out[lane_on] = [(e.id, e.event, _norm(e.data)) for e in m.log("h").since(None, from_t=-1)]
            assert m.query("h")["skipped_instants"] == 0
        finally:
            m.close()
            db.close()
    assert len(out[True]) >= 20 and out[True] == out[False]
    assert not any(b"skipped" in repr(d).encode() for _, _, d in out[True])
    db = Database()
    try:
        m = StreamManager(db, skip_behind=7)
        assert m._scheduler.lane.max_lag == 7
        m.close()
    finally:
        db.close()
