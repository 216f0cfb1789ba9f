"""Multi-query execution (engine/stream/multiquery.py): shapes, fallback rules, and equivalence.

Equivalence: seeded random templates (the continuous oracle's generator, stream WatDiv style) are
registered many times with random constants in the parameterized positions; every query's
events (result / idle, ids, window members, solutions as multisets, I/DSTREAM differences,
ASK and CONSTRUCT answers) must be what it gets with batching off, and its RSTREAM SELECT
answers what pyoxigraph gives over the instant's dataset (the continuous oracle).
"""

from __future__ import annotations

import random
import re
from collections import Counter

import orjson
import pytest

from engine.database import Database
from engine.sparql.csparql import parse_continuous
from engine.stream.continuous import BoundWindow
from engine.stream.multiquery import QVAR, Refused, analyze
from tests.test_continuous_oracle import (
    COUNTS,
    EX,
    S1,
    Oracle,
    gen_query,
    gen_static,
    gen_stream,
    norm_json,
    open_scenario,
)

P = "PREFIX : <http://ex.org/> "


def shape(text: str):
    cq = parse_continuous(text)
    bws = [BoundWindow(r.name or r.iri, r.iri or r.name, 0, w, None) for r, w in zip(cq.streams, cq.windows,
                                                                                        strict=True)]
    return analyze(cq.query, cq.mode, bws)


def reg(body: str, name: str = "q", mode: str = "", win: str = "[RANGE 1s STEP 100ms]") -> str:
    return f"{P}REGISTER {mode}QUERY {name} AS {body.replace('%W', f'FROM STREAM <{S1}> {win}')}"


# ---------------------------------------------------------------- shapes and fallback rules


def test_same_shape_differing_constants_share_a_key():
    a = shape(reg("SELECT ?o %W WHERE { ?o :at ?s . ?s :area :a1 FILTER(?o != :x) }"))
    b = shape(reg("SELECT ?o %W WHERE { ?o :at ?s . ?s :area :a2 FILTER(?o != :y) }", name="other"))
    assert a.key == b.key
    assert a.params == (f"<{EX}a1>", f"<{EX}x>") and b.params == (f"<{EX}a2>", f"<{EX}y>")
    assert QVAR in [v.name for v in a.batched.vars]


@pytest.mark.parametrize("other", [
    "SELECT ?o %W WHERE { ?o :at ?s . ?s :zone :a1 }",                 # a predicate
    "SELECT ?s %W WHERE { ?o :at ?s . ?s :area :a1 }",                 # the projection
    "SELECT DISTINCT ?o %W WHERE { ?o :at ?s . ?s :area :a1 }",        # DISTINCT
    "SELECT ?o %W FROM <urn:jindou:default> WHERE { ?o :at ?s . ?s :area :a1 }",   # the dataset
    "SELECT ?o %W WHERE { ?o :at ?s . ?s :area ?a }",                  # a variable, not a constant
])
def test_different_shapes_have_different_keys(other):
    base = shape(reg("SELECT ?o %W WHERE { ?o :at ?s . ?s :area :a1 }")).key
    assert shape(reg(other)).key != base


def test_window_and_mode_are_part_of_the_shape():
    base = shape(reg("SELECT ?o %W WHERE { ?o :at :s1 }")).key
    assert shape(reg("SELECT ?o %W WHERE { ?o :at :s1 }", win="[RANGE 2s STEP 100ms]")).key != base
    assert shape(reg("SELECT ?o %W WHERE { ?o :at :s1 }", mode="ISTREAM ")).key != base


@pytest.mark.parametrize(("body", "why"), [
    ("SELECT ?o %W WHERE { ?o :at :s1 } LIMIT 3", "LIMIT"),
    ("SELECT ?o %W WHERE { ?o :at :s1 } OFFSET 1", "LIMIT"),
    ("SELECT ?o ?s %W WHERE { ?o :at ?s } ORDER BY ?o", "ORDER BY"),
    ("SELECT ?o ?s %W WHERE { ?o :at ?s } ORDER BY ?o LIMIT 1", "ORDER BY"),
    ("CONSTRUCT { ?o :r :s1 } %W WHERE { ?o :at :s1 } LIMIT 2", "modifiers"),
    ("SELECT ?o (SAMPLE(?v) AS ?n) %W WHERE { ?o :v ?v . ?o :at :s1 } GROUP BY ?o", "SAMPLE"),
    ("SELECT ?o (GROUP_CONCAT(?v) AS ?n) %W WHERE { ?o :v ?v . ?o :at :s1 } GROUP BY ?o", "GROUP_CONCAT"),
])
def test_refused_shapes_run_alone(body, why):
    with pytest.raises(Refused, match=why):
        shape(reg(body))


def test_grouped_count_min_max_are_batched_with_the_query_index_as_key():
    s = shape(reg("SELECT ?o (COUNT(*) AS ?n) (MAX(?v) AS ?m) %W WHERE { ?o :v ?v . ?o :at :s1 } GROUP BY ?o"))
    assert s.params == (f"<{EX}s1>",)
    node = s.batched.pattern
    while not hasattr(node, "by"):
        node = node.input
    assert node.by[-1][1].name == QVAR


@pytest.mark.parametrize(("body", "params"), [
    # MINUS right side, EXISTS, property paths, GRAPH names, REGEX patterns: part of the shape
    ("SELECT ?o %W WHERE { ?o :at ?s MINUS { ?o :at :s9 } }", ()),
    ("SELECT ?o %W WHERE { ?o :at ?s FILTER NOT EXISTS { ?o :at :s9 } }", ()),
    ("SELECT ?o %W WHERE { ?o :at/:in* :z }", ()),
    (f"SELECT ?o %W WHERE {{ GRAPH <{S1}> {{ ?o :at ?s }} }}", ()),
    # BIND, VALUES, IN lists, string tests: parameters
    ("SELECT ?o ?k %W WHERE { ?o :at ?s BIND(:k AS ?k) }", (f"<{EX}k>",)),
    ("SELECT ?o %W WHERE { VALUES ?s { :s1 :s2 } ?o :at ?s }", (f"<{EX}s1>", f"<{EX}s2>")),
    ("SELECT ?o %W WHERE { ?o :at ?s FILTER(?s IN (:s1, :s2)) }", (f"<{EX}s1>", f"<{EX}s2>")),
    ('SELECT ?o %W WHERE { ?o :name ?n FILTER(CONTAINS(?n, "ab")) }', ('"ab"',)),
    # HAVING: with GROUP BY a parameter (a group key), without it part of the shape
    ("SELECT ?o (COUNT(*) AS ?n) %W WHERE { ?o :at ?s } GROUP BY ?o HAVING (COUNT(*) > 2)",
     ('"2"^^<http://www.w3.org/2001/XMLSchema#integer>',)),
    ("SELECT (COUNT(*) AS ?n) %W WHERE { ?o :at ?s } HAVING (COUNT(*) > 2)", ()),
    # not parameterized: a regex pattern, a constant inside a function call
    ('SELECT ?o %W WHERE { ?o :name ?n FILTER(REGEX(?n, "^a")) }', ()),
    # parameterized: BGP subjects/objects on and off the spine, comparisons, OPTIONAL on the spine
    ("SELECT ?o %W WHERE { :u1 :posts ?o . ?o :v ?v FILTER(?v > 3 && ?o != :p2) }",
     (f"<{EX}u1>", '"3"^^<http://www.w3.org/2001/XMLSchema#integer>', f"<{EX}p2>")),
    ("SELECT ?o ?g %W WHERE { ?o :at ?s OPTIONAL { ?s :in :z1 } }", (f"<{EX}z1>",)),
    (f"SELECT ?o %W WHERE {{ ?o :at ?s {{ ?s :in :z1 }} UNION {{ GRAPH <{S1}> {{ ?s :in :z2 }} }} }}",
     (f"<{EX}z1>", f"<{EX}z2>")),
])
def test_which_constants_are_parameters(body, params):
    assert shape(reg(body)).params == params


def test_optional_off_the_spine_keeps_its_constants():
    s = shape(reg("SELECT ?o %W WHERE { ?o :at ?s { ?s :in ?z OPTIONAL { ?z :of :k } } }"))
    assert f"<{EX}k>" not in s.params


# ---------------------------------------------------------------- equivalence with the single path

ENT = re.compile(r"<http://ex\.org/(user|post|product|genre)(\d+)>")
NUM = re.compile(r"\b(>|<=|!=) (\d+)\)")


def variant(text: str, rng: random.Random, name: str) -> str:
    """The template's text with other random constants in its entity and FILTER number positions."""
    body = text.split(" AS ", 1)[1]
    body = ENT.sub(lambda m: f"<{EX}{m.group(1)}{rng.randrange(COUNTS[m.group(1).capitalize()])}>", body)
    body = NUM.sub(lambda m: f"{m.group(1)} {rng.choice((1, 2, 3, 4, 5, 30, 40))})", body)
    head = text.split(" AS ", 1)[0].rsplit(" ", 1)[0]
    return f"{head} {name} AS {body}"


def templates(rng: random.Random, n: int, wins_s1=None, wins_s2=None) -> list[dict]:
    """Random queries of the oracle's generator that have constants to vary."""
    out = []
    k = 0
    while len(out) < n:
        kw = {} if wins_s1 is None else {"wins_s1": wins_s1, "wins_s2": wins_s2}
        q = gen_query(rng, 1000 + k, **kw)
        k += 1
        if ENT.search(q["text"].split(" WHERE ", 1)[1]) or NUM.search(q["text"]):
            out.append(q)
    return out


def feed(m, rng, data, end):
    for name in ("s1", "s2"):
        rows = data[name]
        cuts = sorted(rng.sample(range(1, len(rows)), 4))
        for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True):
            body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o, tau in rows[a:b])
            assert m.ingest_ndjson(name, body)["rejected"] == 0
    m.heartbeat("s1", end + 1)
    m.heartbeat("s2", end + 1)
    assert m.drain(120)


def run_registered(static, data, end, texts: dict[str, str], batching: bool, stream: str, read, chunk: int = 37):
    """A fresh store holding ``static`` ((s, p, o) N-Triples terms), the stream ``st`` (IRI
    ``stream``) and the queries ``texts`` (name -> full REGISTER text); ``data`` ((s, p, o, t))
    sent as ndjson in posts of ``chunk`` lines, progress past ``end``, every instant evaluated;
    returns ``read(manager)``."""
    from engine.stream.manager import StreamManager

    db = Database()
    db.load_data("".join(f"{s} {p} {o} .\n" for s, p, o in static).encode(), "application/n-triples")
    m = StreamManager(db)
    m._scheduler.batching = batching
    try:
        m.register_stream("st", stream)
        m.heartbeat("st", 0)
        for text in texts.values():
            m.register_query(text)
        for a in range(0, len(data), chunk):
            body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": t}) for s, p, o, t in data[a:a + chunk])
            assert m.ingest_ndjson("st", body)["rejected"] == 0
        m.heartbeat("st", end + 1)
        assert m.drain(120)
        return read(m)
    finally:
        m.close()
        db.close()


def canon(e) -> tuple:
    """An event with its answer as a multiset (row order within an answer is unspecified)."""
    if e.event != "result":
        return (e.id, e.event, e.data)
    doc = orjson.loads(e.data)
    if "results" in doc:
        names = doc["head"]["vars"]
        rows = Counter(tuple(norm_json(b.get(v)) for v in names) for b in doc["results"]["bindings"])
        return (e.id, "result", tuple(names), frozenset(rows.items()), orjson.dumps(doc["window"]))
    if "triples" in doc:
        return (e.id, "result", frozenset(x for x in doc["triples"].split("\n") if x), orjson.dumps(doc["window"]))
    return (e.id, "result", e.data)


def run_scenario(rng, static, data, end, texts, batching: bool, between=None, db_opts=None, **opts):
    db = Database(**(db_opts or {}))
    m = open_scenario(db, static, False, **opts)
    m._scheduler.batching = batching
    try:
        for t in texts:
            m.register_query(t)
        if between is not None:
            between(m)
        feed(m, rng, data, end)
        logs = {name: [canon(e) for e in m.log(name).since(None, from_t=-1)] for name in m._reg.queries}
        info = {name: m._scheduler.batch_info(name) for name in m._reg.queries}
        groups = m._scheduler._groups.values()
        batches = sum(g.batches for g in groups)
        if db_opts:
            info["#failures"] = sum(g.failures > 0 or g.skip > 0 for g in groups)
        return logs, info, batches
    finally:
        m.close()
        db.close()


@pytest.mark.parametrize("seed", [3, 17, 2026])
def test_batched_queries_equal_queries_registered_alone(seed):
    rng = random.Random(seed)
    static = gen_static(rng)
    end = 8000
    data = {"s1": gen_stream(rng, "s1", end=end), "s2": gen_stream(rng, "s2", end=end)}
    texts, plain = [], {}
    for i, q in enumerate(templates(rng, 5)):
        for j in range(6):
            name = f"t{i}v{j}"
            t = q["text"].replace(f" {q['name']} AS", f" {name} AS", 1) if j == 0 else variant(q["text"], rng, name)
            texts.append(t)
            plain[name] = (q, t)
            if i % 2 == 0 and "GROUP BY" not in t:
                for mode in ("ISTREAM", "DSTREAM"):
                    texts.append(t.replace("REGISTER QUERY ", f"REGISTER {mode} QUERY ")
                                 .replace(f" {name} AS", f" {name}_{mode} AS", 1))
            where = t.split(" WHERE ", 1)[1]
            frm = t.split(" WHERE ", 1)[0][t.index(" FROM "):]
            if i % 2 == 1 and "GROUP BY" not in where:   # the same pattern as ASK
                texts.append(f"REGISTER QUERY {name}_ask AS ASK{frm} WHERE {where}")
            if q["cvars"] and "GROUP BY" not in where:   # and as CONSTRUCT
                a, b = q["cvars"]
                texts.append(f"REGISTER QUERY {name}_c AS CONSTRUCT {{ {a} <{EX}rel> {b} }}{frm} WHERE {where}")
    assert any(t.split(" AS ", 2)[1].startswith("CONSTRUCT") for t in texts)
    got, info, batches = run_scenario(random.Random(seed), static, data, end, texts, True)
    want, _, none = run_scenario(random.Random(seed), static, data, end, texts, False)
    assert none == 0 and batches > 0
    assert sum(i["batched"] for i in info.values()) >= len(texts) // 2, info
    for name in want:
        assert got[name] == want[name], name
    # and the oracle, for the RSTREAM SELECT answers
    oracle = Oracle(static, data, False)
    checked = 0
    for name, (q, text) in plain.items():
        spec = dict(q)
        spec["plain"] = "SELECT " + text.split(" AS SELECT ", 1)[1]
        spec["plain"] = re.sub(r" FROM (STREAM )?\S+( \[[^\]]*\])?", "", spec["plain"])
        for ev in got[name]:
            if ev[1] != "result" or len(ev) != 5:
                continue
            names, rows = oracle.want(spec, ev[0])
            assert list(ev[2]) == names and Counter(dict(ev[3])) == rows, (text, ev[0])
            checked += 1
    assert checked > 100


def test_registering_and_deleting_queries_while_batched():
    rng = random.Random(99)
    static = gen_static(rng)
    end = 9000
    data = {"s1": gen_stream(rng, "s1", end=end), "s2": gen_stream(rng, "s2", end=end)}
    tmpl = (f"REGISTER QUERY %s AS SELECT ?u ?p FROM STREAM <{S1}> [RANGE 1500ms STEP 500ms] "
            f"FROM <urn:jindou:default> WHERE {{ ?u <{EX}posts> ?p . ?u <{EX}follows> <{EX}user%d> }}")
    first = [tmpl % (f"a{i}", i) for i in range(8)]

    half = end // 2
    early = {k: [r for r in v if r[3] <= half] for k, v in data.items()}
    late = {k: [r for r in v if r[3] > half] for k, v in data.items()}

    def churn(m):
        # the first half of the data, then delete some, register others (one under a deleted name)
        for name, rows in early.items():
            m.ingest_ndjson(name, b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": t}) for s, p, o, t in rows))
            m.heartbeat(name, half)
        assert m.drain(60)
        for name in ("a1", "a4", "a6"):
            m.delete_query(name)
        m.register_query(tmpl % ("a4", 11))
        m.register_query(tmpl % ("b0", 3))
        m.register_query(tmpl % ("b1", 5))

    got, info, batches = run_scenario(random.Random(1), static, late, end, first, True, churn)
    want, _, _ = run_scenario(random.Random(1), static, late, end, first, False, churn)
    assert batches > 0 and info["b0"]["batched"] and info["a4"]["peers"] == 7
    assert set(got) == set(want) == {"a0", "a2", "a3", "a4", "a5", "a7", "b0", "b1"}
    for name in want:
        assert got[name] == want[name], name
        assert any(len(e) == 5 and e[3] for e in got[name]), name   # some non-empty answers


def test_sparse_streams_idle_runs_match_alone():
    """Unchanged instants are reported per member exactly as alone (idle events, short repeats)."""
    rng = random.Random(5)
    static = gen_static(rng)
    end = 30_000
    gaps = (0, 0, 30, 400, 2500, 9000)
    data = {"s1": gen_stream(rng, "s1", gaps, end), "s2": gen_stream(rng, "s2", gaps, end)}
    texts = []
    for i, q in enumerate(templates(rng, 3, [(2000, 100, None), (1000, 250, None)], [(1000, 100, None)])):
        for j in range(4):
            texts.append(variant(q["text"], rng, f"s{i}v{j}"))
    got, info, batches = run_scenario(random.Random(2), static, data, end, texts, True, idle_after=4)
    want, _, _ = run_scenario(random.Random(2), static, data, end, texts, False, idle_after=4)
    assert batches > 0
    assert sum(1 for evs in got.values() for e in evs if e[1] == "idle") > 10
    for name in want:
        assert got[name] == want[name], name


HAND = [
    # OPTIONAL with a condition on the spine, a BGP constant after it (off the spine)
    "SELECT ?u ?p ?r {W} WHERE {{ ?u <{EX}posts> ?p OPTIONAL {{ ?p <{EX}rating> ?r FILTER(?r > {n}) }} "
    "?p <{EX}about> <{EX}product{a}> }}",
    # UNION; GRAPH scoped pattern; constants in both
    "SELECT ?u ?x {W} WHERE {{ {{ ?u <{EX}posts> ?x . ?x <{EX}about> <{EX}product{a}> }} UNION "
    "{{ GRAPH <{S1}> {{ ?x <{EX}about> <{EX}product{b}> }} ?u <{EX}posts> ?x }} }}",
    # grouped COUNT / MAX joining the stored graph
    "SELECT ?p (COUNT(*) AS ?n) (MAX(?r) AS ?m) {W} FROM <urn:jindou:default> WHERE {{ ?u <{EX}posts> ?p . "
    "?p <{EX}rating> ?r . ?u <{EX}follows> <{EX}user{a}> }} GROUP BY ?p",
    # DISTINCT, a numeric comparison, a subject constant
    "SELECT DISTINCT ?p {W} WHERE {{ <{EX}user{a}> <{EX}posts> ?p . ?p <{EX}rating> ?r FILTER(?r >= {n} || ?r = {m}) }}",
    # top-k: ORDER BY over every selected variable, a per-member LIMIT / OFFSET
    "SELECT ?p ?r {W} WHERE {{ ?p <{EX}rating> ?r . ?p <{EX}about> ?x FILTER(?x != <{EX}product{a}>) }} "
    "ORDER BY DESC(?r) ?p LIMIT 3 OFFSET 1",
    # no constants at all: identical members
    "SELECT ?p ?r {W} WHERE {{ ?p <{EX}rating> ?r }}",
]


@pytest.mark.parametrize("mode", ["", "ISTREAM ", "DSTREAM "])
def test_handwritten_templates_batched_equal_alone(mode):
    rng = random.Random(41)
    static = gen_static(rng)
    end = 7000
    data = {"s1": gen_stream(rng, "s1", end=end), "s2": gen_stream(rng, "s2", end=end)}
    texts = []
    for i, tmpl in enumerate(HAND):
        if mode and "GROUP BY" in tmpl:
            continue
        for j in range(5):
            body = tmpl.format(W=f"FROM STREAM <{S1}> [RANGE 1500ms STEP 500ms]", EX=EX, S1=S1,
                               a=rng.randrange(COUNTS["Product"]), b=rng.randrange(COUNTS["Product"]),
                               n=rng.randint(1, 5), m=rng.randint(1, 5))
            texts.append(f"REGISTER {mode}QUERY h{i}v{j} AS {body}")
    got, info, batches = run_scenario(random.Random(3), static, data, end, texts, True)
    want, _, _ = run_scenario(random.Random(3), static, data, end, texts, False)
    assert batches > 0 and all(i["batched"] for i in info.values()), info
    nonempty = 0
    for name in want:
        assert got[name] == want[name], name
        nonempty += sum(1 for e in got[name] if len(e) == 5 and e[3])
    assert nonempty > 20


def test_status_says_batched_and_peers():
    db = Database()
    m = open_scenario(db, gen_static(random.Random(1)), False)
    try:
        tmpl = f"REGISTER QUERY %s AS SELECT ?p FROM STREAM <{S1}> [RANGE 1s STEP 500ms] WHERE {{ <{EX}user%d> <{EX}posts> ?p }}"
        for i in range(3):
            m.register_query(tmpl % (f"a{i}", i))
        m.register_query(f"REGISTER QUERY lim AS SELECT ?p ?u FROM STREAM <{S1}> [RANGE 1s STEP 500ms] "
                         f"WHERE {{ ?u <{EX}posts> ?p }} ORDER BY ?p LIMIT 1")
        m.heartbeat("s1", 2000)
        m.heartbeat("s2", 2000)
        assert m.drain(30)
        a0 = m.query("a0")
        assert a0["batched"] is True and a0["peers"] == 2
        lim = m.query("lim")
        assert lim["batched"] is False and "ORDER BY" in lim["unbatched_reason"]
        m.delete_query("a1")
        m.delete_query("a2")
        a0 = m.query("a0")
        assert a0["batched"] is False and a0["peers"] == 0
    finally:
        m.close()
        db.close()


def test_queries_of_different_shapes_share_the_window_graph():
    """Four groups and queries that run alone (LIMIT, RSP-QL and CQELS-QL syntax), all on one
    window: one window graph per instant (the WindowCache), not one per query, group or syntax."""
    rng = random.Random(8)
    static = gen_static(rng)
    end = 6000
    data = gen_stream(rng, "s1", end=end)
    db = Database()
    m = open_scenario(db, static, False)
    w = f"FROM STREAM <{S1}> [RANGE 1s STEP 500ms]"
    try:
        for i in range(4):
            m.register_query(f"REGISTER QUERY a{i} AS SELECT ?p {w} WHERE {{ <{EX}user{i}> <{EX}posts> ?p }}")
            m.register_query(f"REGISTER QUERY b{i} AS SELECT ?u {w} WHERE {{ ?u <{EX}posts> ?p . "
                             f"?p <{EX}about> <{EX}product{i}> }}")
            m.register_query(f"REGISTER ISTREAM QUERY c{i} AS SELECT ?p ?r {w} WHERE {{ ?p <{EX}rating> ?r "
                             f"FILTER(?r > {i}) }}")
        m.register_query(f"REGISTER QUERY l0 AS SELECT ?p {w} WHERE {{ ?u <{EX}posts> ?p }} LIMIT 2")
        m.register_query(f"REGISTER QUERY l1 AS SELECT ?p {w} WHERE {{ ?p <{EX}about> ?x }} ORDER BY ?p")
        # aggregates (batched), and the same window written in RSP-QL and CQELS-QL (evaluated alone)
        for i in range(3):
            m.register_query(f"REGISTER QUERY n{i} AS SELECT (SUM(?r) AS ?s) {w} WHERE {{ ?p <{EX}rating> ?r . "
                             f"?p <{EX}about> <{EX}product{i}> }}")
        m.register_query(f"REGISTER RSTREAM <{EX}rw> AS SELECT ?p FROM NAMED WINDOW <{EX}w> ON <{S1}> "
                         f"[RANGE PT1S STEP PT0.5S] WHERE {{ WINDOW <{EX}w> {{ ?u <{EX}posts> ?p }} }}")
        m.register_query(f"REGISTER QUERY cq AS SELECT ?p ?r WHERE {{ STREAM <{S1}> [RANGE 1 s SLIDE 500 ms] "
                         f"{{ ?p <{EX}rating> ?r }} }}")
        m.heartbeat("s2", end + 10_000)
        steps = 0
        for t in range(500, end + 1, 500):
            body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o, tau in data
                              if t - 500 < tau <= t)
            if body:
                m.ingest_ndjson("s1", body)
            m.heartbeat("s1", t)
            assert m.drain(30)
            steps += 1
        cache = m._window_cache
        sched = m._scheduler
        assert sum(g.batches for g in sched._groups.values()) > 10
        assert {m.query(n)["batched"] for n in ("a0", "b1", "c2", "n1")} == {True}
        assert all(m.query(n)["evaluated"] >= steps - 1 for n in ("rw", "cq", "l0"))
        assert cache.misses <= steps + 1, (cache.misses, cache.hits, steps)
        assert cache.hits >= steps
    finally:
        m.close()
        db.close()


def test_a_batch_over_the_row_budget_is_evaluated_member_by_member():
    """The batch's intermediate rows count against the row budget like one query's: over it,
    each member is evaluated alone and gets its own answer (or its own budget error)."""
    rng = random.Random(12)
    static = gen_static(rng)
    end = 8000
    data = {"s1": gen_stream(rng, "s1", end=end), "s2": gen_stream(rng, "s2", end=end)}
    texts = [f"REGISTER QUERY r{i} AS SELECT ?p ?r FROM STREAM <{S1}> [RANGE 3s STEP 1s] "
             f"WHERE {{ ?p <{EX}rating> ?r FILTER(?r >= {1 + i % 5}) }}" for i in range(12)]
    opts = {"max_rows": 80}
    got, info, _ = run_scenario(random.Random(4), static, data, end, texts, True, db_opts=opts)
    want, _, _ = run_scenario(random.Random(4), static, data, end, texts, False, db_opts=opts)
    assert info["#failures"] >= 1
    for name in want:
        assert got[name] == want[name], name
    assert sum(1 for evs in got.values() for e in evs if len(e) == 5 and e[3]) > 20


def test_batch_rendering_writes_the_bytes_of_the_single_path():
    """RSTREAM SELECT answers rendered together equal sparql_json of each member's answer, with
    unbound cells, typed / language / escaped literals and computed terms."""
    import numpy as np

    from engine.exec.evaluate import QueryContext
    from engine.exec.result import QueryResult
    from engine.exec.serialize import sparql_json
    from engine.stream.multiquery import Group

    db = Database()
    try:
        db.load_data(b'<http://e/a> <http://e/p> "x\\"y\\n"@en .\n<http://e/b> <http://e/p> "5"^^<http://www.w3.org/2001/'
                      b'XMLSchema#integer> .\n_:b1 <http://e/p> "plain" .\n', "application/n-triples")
        ctx = QueryContext(db.store.snapshot())
        keys = ['<http://e/a>', '"x\\"y\\n"@en', '<http://e/b>', '"5"^^<http://www.w3.org/2001/XMLSchema#integer>',
                '"plain"', '"computed only here"']
        ids = ctx.intern(keys)
        u = -1
        c1 = np.array([ids[0], ids[2], u, ids[5], ids[0]], dtype=np.int64)
        c2 = np.array([ids[1], ids[3], ids[4], u, u], dtype=np.int64)
        bounds = [0, 2, 2, 5]     # member 0: rows 0-1, member 1: none, member 2: rows 2-4
        g = Group.__new__(Group)
        g._cells = {}
        g._framed = {}
        tail = b',"window":{"start":0,"end":1}}'
        out = g._render_rows(ctx, ["a", "b"], [c1, c2], bounds, tail)
        for i in range(3):
            a, b = bounds[i], bounds[i + 1]
            r = QueryResult(form="SELECT", terms=ctx, vars=["a", "b"], columns=[c1[a:b], c2[a:b]], n_rows=b - a)
            want = sparql_json(r, b',"window":{"start":0,"end":1}')
            assert out[i][0] == want
            assert out[i][0] == bytes(out[i][1]) + tail
        assert 0 < len(g._cells) < len(keys)   # store terms cached, the computed one not
    finally:
        db.close()


def test_named_window_syntaxes_and_f_timestamp_run_alone():
    """RSP-QL / CQELS datasets and f:timestamp live in their own evaluator: never batched."""
    db = Database()
    m = open_scenario(db, gen_static(random.Random(1)), False)
    try:
        rsp = (f"REGISTER RSTREAM <{EX}r%d> AS SELECT ?p FROM NAMED WINDOW <{EX}w> ON <{S1}> "
               f"[RANGE PT1S STEP PT0.5S] WHERE {{ WINDOW <{EX}w> {{ <{EX}user%d> <{EX}posts> ?p }} }}")
        ts = (f"PREFIX f: <http://larkc.eu/csparql/sparql/jena/ext#> REGISTER QUERY t%d AS "
              f"SELECT ?p (f:timestamp(<{EX}user%d>, <{EX}posts>, ?p) AS ?ts) "
              f"FROM STREAM <{S1}> [RANGE 1s STEP 500ms] WHERE {{ <{EX}user%d> <{EX}posts> ?p }}")
        for i in range(2):
            m.register_query(rsp % (i, i))
            m.register_query(ts % (i, i, i))
        m.heartbeat("s1", 2000)
        m.heartbeat("s2", 2000)
        assert m.drain(30)
        for name in ("r0", "r1", "t0", "t1"):
            st = m.query(name)
            assert st["batched"] is False and "evaluated alone" in st["unbatched_reason"], (name, st)
            assert st["evaluated"] > 0
    finally:
        m.close()
        db.close()
