"""``:p+`` / ``:p*`` / ``:p?`` paths over the stored graph on the generated and maintained paths
(:mod:`engine.stream.tiny_closure`): every instant equals the ordinary path's (closures off,
generated and maintained off) and pyoxigraph's, over a stored graph with cycles and random
streams that sometimes hold a triple of the path's predicate (the instant is handed back); the
paths are taken (counters)."""
from __future__ import annotations

import random

import orjson
import pytest

from engine.sparql.csparql import parse_continuous
from engine.stream import maintained, tiny_closure
from engine.stream.continuous import BoundWindow, InstantEvaluator
from engine.stream.transient import TransientStore
from engine.stream.windows import Window
from tests.test_stream_maintained import _append
from tests.test_stream_tiny_gen import EX, NODES, PREDS, STATIC, TERMS, _oracle, _rows, static_db

P0, P1, P2 = PREDS
N = NODES
#: the shapes taken (path kinds, ends constant / bound by a window pattern / by a :p pattern)
TAKEN_QS = [
    f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?u {P0}+ ?y }}",
    f"SELECT ?x ?c WHERE {{ ?x {P1} ?c . ?c {P0}* {N[1]} }}",
    f"SELECT ?x ?c WHERE {{ ?x {P1} ?c . {N[0]} {P0}* ?c }}",
    f"SELECT ?x ?c WHERE {{ ?x {P1} ?c . ?c {P0}? {N[2]} }}",
    f"SELECT ?x ?c WHERE {{ ?x {P1} ?c . {N[2]} {P0}? ?c }}",
    f"SELECT ?x ?c WHERE {{ ?x {P1} ?c . ?c {P0}* {TERMS[5]} }}",
    f"SELECT ?x ?f WHERE {{ ?x {P1} {N[0]} . {N[0]} {P0} ?b . ?b {P0}? ?f }}",
    f"SELECT ?x ?f WHERE {{ ?x {P1} {N[1]} . ?b {P0} {N[3]} . ?b {P0}* ?f }}",
    f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?y ^{P0}+ ?u }}",
    f"SELECT DISTINCT ?u WHERE {{ ?x {P1} ?u . ?u {P0}+ ?u }}",
    f"SELECT ?u (COUNT(?y) AS ?n) WHERE {{ ?x {P2} ?u . ?u {P0}+ ?y }} GROUP BY ?u",
    f"SELECT ?x WHERE {{ ?x {P1} ?u . {N[3]} {P0}+ ?u }}",
    f"SELECT ?x ?y WHERE {{ ?x {P1} ?u OPTIONAL {{ ?u {P2} ?v . ?v {P0}+ ?y }} }}",
    f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?u {P0}+ ?y }} ORDER BY ?y ?x LIMIT 3",
    f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?u {P0}/{P0}* ?y }}",   # (?b p0* ?y: ?b bound by a p0 pattern)
]
#: zero-length paths whose identity would need the windows' terms: not taken
NOT_TAKEN_QS = [
    f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?u {P0}* ?y }}",
    f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?u {P0}? ?y }}",
    f"SELECT ?c WHERE {{ ?c {P0}* {N[1]} }}",
]


@pytest.fixture(scope="module")
def db():
    d = static_db((f"<{EX}a>",))
    extra = [f"{N[3]} {P0} {N[1]} .\n", f"{N[4]} {P0} {N[4]} .\n", f"{N[1]} {P0} {N[4]} .\n"]
    d.load_data("".join(extra).encode(), "application/n-triples", graph=STATIC)
    d.static_lines = d.static_lines + extra
    yield d
    d.close()


def _evaluators(db, q: str, store):
    text = f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE', 1)}"
    cq = parse_continuous(text)
    bw = BoundWindow("a", EX + "a", int(db.store.dictionary.lookup(f"<{EX}a>")), Window.time(3000, 1000), store)
    flags = (InstantEvaluator.CLOSURES, InstantEvaluator.GENERATED, InstantEvaluator.MAINTAINED)
    try:
        on = InstantEvaluator(db, cq.query, "RSTREAM", [bw])
        InstantEvaluator.CLOSURES = InstantEvaluator.GENERATED = InstantEvaluator.MAINTAINED = False
        off = InstantEvaluator(db, cq.query, "RSTREAM", [bw])
        InstantEvaluator.CLOSURES, InstantEvaluator.GENERATED, InstantEvaluator.MAINTAINED = True, True, False
        gen_only = InstantEvaluator(db, cq.query, "RSTREAM", [bw])
    finally:
        InstantEvaluator.CLOSURES, InstantEvaluator.GENERATED, InstantEvaluator.MAINTAINED = flags
    assert off._gen is None and gen_only._maint is None
    assert on._gen is None or isinstance(on._gen, tiny_closure.ClosureGen)
    return text, on, off, gen_only


def _replay(db, q: str, seed: int, guard_rate: float) -> tuple[int, int, int]:
    """``q`` over a random stream; (instants, maintained answers, generated answers)."""
    rnd = random.Random(seed)
    store = TransientStore("a", slice_triples=8)
    text, on, off, gen = _evaluators(db, q, store)
    held = []
    m0 = maintained.answered_total()
    g0 = tiny_closure.taken_total()[0]
    n = 0
    for k in range(12):
        t = 1000 * (k + 1)
        els = []
        for _ in range(rnd.randint(0, 4)):
            p = P0 if rnd.random() < guard_rate else rnd.choice([P1, P1, P2])
            els.append((rnd.choice(N), p, rnd.choice(N + TERMS[5:7])))
        if els:
            _append(db, store, els, t - rnd.randint(0, 999))
            held += [(t, tr) for tr in els]
        window = {tr for tau, tr in held if t - 3000 < tau <= t}
        got = []
        for ev in (on, off, gen):
            a, _ = ev.run(t)
            got.append(_rows(a))
            ev.settle(a, t)
            ev.prepare(t + 1000)
        assert got[0] == got[1] == got[2], (text, t)
        assert got[0] == _oracle(db, q, window), (text, t)
        n += 1
    return n, maintained.answered_total() - m0, tiny_closure.taken_total()[0] - g0


@pytest.mark.parametrize("q", TAKEN_QS)
def test_closure_instants_answer_like_the_ordinary_path_and_pyoxigraph(db, q):
    """Random streams with and without window triples of the path's predicate; the generated
    and maintained paths are taken for each shape."""
    maint = gen = 0
    for seed in range(6):
        _, m, g = _replay(db, q, seed, 0.0 if seed < 3 else 0.25)
        maint += m
        gen += g
    assert maint > 0, q
    assert gen > 0, q


@pytest.mark.parametrize("q", NOT_TAKEN_QS)
def test_zero_length_paths_needing_window_terms_are_not_taken(db, q):
    store = TransientStore("a", slice_triples=8)
    _, on, _, _ = _evaluators(db, q, store)
    assert on._gen is None
    assert _replay(db, q, 1, 0.1)[0] > 0


def test_a_window_triple_of_the_paths_predicate_hands_the_instant_back(db):
    """A window triple of ``:p`` the stored graph lacks (the closure would change): the
    instant is handed back and still right (it makes ``?u`` reach ``n0``)."""
    q = f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?u {P0}+ ?y }}"
    store = TransientStore("a", slice_triples=8)
    text, on, off, gen = _evaluators(db, q, store)
    _append(db, store, [(N[2], P1, N[3])], 1000)
    g0, b0 = tiny_closure.taken_total()
    a, _ = gen.run(1000)
    first = _rows(a)
    assert first == _rows(off.run(1000)[0])
    assert tiny_closure.taken_total()[0] == g0 + 1
    _append(db, store, [(N[4], P0, N[0])], 2000)   # n4 p0 n0: n3 -> n1 -> n4 -> n0 now
    a, _ = gen.run(2000)
    b, _ = off.run(2000)
    assert tiny_closure.taken_total() == (g0 + 1, b0 + 1)
    assert _rows(a) == _rows(b) == _oracle(db, q, {(N[2], P1, N[3]), (N[4], P0, N[0])})
    assert sum(_rows(a).values()) > sum(first.values())   # (n0 and its own p0 object reached now)


def test_relevant_predicates_of_closure_shapes():
    """The relevance check knows a taken closure query's predicates (the path's included); a
    zero-length path whose identity needs every term stays "every triple"."""
    from engine.stream.delta import relevant_predicates

    q = parse_continuous(f"REGISTER QUERY g AS SELECT ?x ?c FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
                         f"WHERE {{ ?x {P1} ?c . ?c {P0}* {N[1]} }}").query
    assert set(relevant_predicates(q)) == {P0, P1}
    q = parse_continuous(f"REGISTER QUERY g AS SELECT ?x ?y FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
                         f"WHERE {{ ?x {P1} ?u . ?u {P0}* ?y }}").query
    assert relevant_predicates(q) is None


def _manager_events(on: bool, monkeypatch) -> tuple[list, int]:
    """Through the manager (ingestion hook, scheduler, relevance check): a closure query's
    events, and the instants answered from a maintained state."""
    from engine.database import Database
    from engine.stream.manager import StreamManager

    for flag in ("CLOSURES", "GENERATED", "MAINTAINED"):
        monkeypatch.setattr(InstantEvaluator, flag, on)
    db = Database()
    m = StreamManager(db)
    rnd = random.Random(7)
    try:
        lines = "".join(f"<{EX}c{i}> <{EX}sub> <{EX}c{i // 2}> .\n" for i in range(1, 12))
        db.load_data((lines + f"<{EX}c3> <{EX}sub> <{EX}c7> .\n").encode(), "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query(f"REGISTER QUERY q AS SELECT ?x ?c FROM <{STATIC}> FROM STREAM <{EX}a> "
                         f"[RANGE 3s STEP 1s] WHERE {{ ?x <{EX}type> ?c . ?c <{EX}sub>* <{EX}c1> . ?x <{EX}by> ?u }}")
        before = maintained.answered_total()
        for k in range(10):
            out = []
            for j in range(rnd.randint(0, 3)):
                x, t = f"<{EX}x{k}_{j}>", k * 1000 + 100 * j + 1
                p = "sub" if k == 6 and j == 0 else "type"   # (one window triple of the path's predicate)
                out += [{"s": x, "p": f"<{EX}{p}>", "o": f"<{EX}c{rnd.randint(0, 13)}>", "t": t},
                        {"s": x, "p": f"<{EX}by>", "o": f"<{EX}u{j}>", "t": t}]
            if out:
                assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in out))["rejected"] == 0
            m.heartbeat("a", (k + 1) * 1000)
            assert m.drain(30)
        events = [(e.id, _rows(e.data)) for e in m.log("q").since(None, from_t=-1) if e.event == "result"]
        return events, maintained.answered_total() - before
    finally:
        m.close()
        db.close()


def test_through_the_manager_like_the_ordinary_path(monkeypatch):
    on, answered = _manager_events(True, monkeypatch)
    off, none = _manager_events(False, monkeypatch)
    assert on == off and any(rows for _, rows in on)
    assert none == 0 and answered > 0


def _random_db(rnd: random.Random):
    """A stored graph of random ``p0`` edges (cycles and self-loops likely) and a few ``p1`` /
    ``p2`` triples, every term of the streams interned."""
    from engine.database import Database

    d = Database()
    lines = sorted({f"{rnd.choice(N)} {P0} {rnd.choice(N + TERMS[5:6])} .\n" for _ in range(rnd.randint(0, 9))}
                   | {f"{rnd.choice(N)} {rnd.choice([P1, P2])} {rnd.choice(N)} .\n" for _ in range(rnd.randint(0, 3))})
    if lines:
        d.load_data("".join(lines).encode(), "application/n-triples", graph=STATIC)
    with d.store.write_lock:
        d.store.dictionary.encode(TERMS + list(PREDS) + [f"<{EX}a>"])
    d.static_lines = lines
    return d


@pytest.mark.parametrize("seed", range(8))
def test_random_stored_graphs(seed):
    """Random stored graphs, every taken shape, random streams: as the ordinary path and pyoxigraph."""
    rnd = random.Random(1000 + seed)
    d = _random_db(rnd)
    try:
        for q in TAKEN_QS:
            _replay(d, q, rnd.randint(0, 1 << 30), rnd.choice([0.0, 0.1, 0.3]))
    finally:
        d.close()


@pytest.mark.parametrize("mode", ["RSTREAM", "ISTREAM", "DSTREAM"])
def test_a_commit_of_a_path_edge_between_instants(mode):
    """A stored ``:p`` edge committed between instants (a new snapshot): the closure is
    computed again; every instant as the ordinary path's and pyoxigraph's, in each mode."""
    rnd = random.Random(5)
    d = _random_db(rnd)
    try:
        q = f"SELECT ?x ?y WHERE {{ ?x {P1} ?u . ?u {P0}+ ?y }}"
        text = f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE', 1)}"
        cq = parse_continuous(text)
        store = TransientStore("a", slice_triples=8)
        bw = BoundWindow("a", EX + "a", int(d.store.dictionary.lookup(f"<{EX}a>")), Window.time(3000, 1000), store)
        on = InstantEvaluator(d, cq.query, mode, [bw])
        flags = (InstantEvaluator.CLOSURES, InstantEvaluator.GENERATED, InstantEvaluator.MAINTAINED)
        try:
            InstantEvaluator.CLOSURES = InstantEvaluator.GENERATED = InstantEvaluator.MAINTAINED = False
            off = InstantEvaluator(d, cq.query, mode, [bw])
        finally:
            InstantEvaluator.CLOSURES, InstantEvaluator.GENERATED, InstantEvaluator.MAINTAINED = flags
        assert isinstance(on._gen, tiny_closure.ClosureGen)
        held = []
        g0 = tiny_closure.taken_total()[0]
        for k in range(10):
            t = 1000 * (k + 1)
            if k in (3, 6):
                line = f"{N[k % 5]} {P0} {N[(k + 2) % 5]} .\n"
                d.load_data(line.encode(), "application/n-triples", graph=STATIC)
                d.static_lines = d.static_lines + [line]
            els = [(rnd.choice(N), P1, rnd.choice(N)) for _ in range(rnd.randint(1, 3))]
            _append(d, store, els, t - 500)
            held += [(t, tr) for tr in els]
            a, _ = on.run(t)
            b, _ = off.run(t)
            assert _rows(a) == _rows(b), (mode, t)   # (rows as multisets: their order is not defined)
            if mode == "RSTREAM":
                assert _rows(a) == _oracle(d, q, {tr for tau, tr in held if t - 3000 < tau <= t}), t
            for ev, data in ((on, a), (off, b)):
                ev.settle(data, t)
                ev.prepare(t + 1000)
        assert tiny_closure.taken_total()[0] > g0
    finally:
        d.close()
