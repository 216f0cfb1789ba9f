"""Continuous queries against an oracle, Stream-WatDiv style (seed 004).

A seeded random static graph (users, products, genres) and seeded random
streams (posts about products with ratings; visits), then seeded random
continuous queries -- linear and star shapes of 1-4 triple patterns, some
constants, some FILTERs, some joining the stored graph (``FROM
<urn:jindou:default>``), some scoped with ``GRAPH <stream>``. For every
instant the result must equal pyoxigraph running the plain SPARQL (the inner
query without stream clauses) over exactly that instant's window triples
(default graph = merge of the windows + the static graph when joined; each
window also as the named graph of its stream), compared as multisets of terms.

Each scenario also runs on a 3-worker cluster (``--workers 3``, shared-memory
transport; one scenario per test over Arrow Flight): the stored graph, the
absorbed stream elements and every window's answer must be the same as on one
process. Each run gets a fresh store: stream batch numbers and the cluster's
VTS start together.
"""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pyoxigraph as ox
import pytest

from engine.stream.manager import StreamManager
from tests.support.clusters import close_database, open_database

EX = "http://ex.org/"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
S1, S2 = EX + "stream/posts", EX + "stream/visits"
END = 12_000

# predicate -> (domain type, range type, where)
SCHEMA = {
    "posts": ("User", "Post", "s1"),
    "about": ("Post", "Product", "s1"),
    "rating": ("Post", "Int", "s1"),
    "visits": ("User", "Product", "s2"),
    "follows": ("User", "User", "static"),
    "likes": ("User", "Product", "static"),
    "genre": ("Product", "Genre", "static"),
    "age": ("User", "Int", "static"),
}
COUNTS = {"User": 12, "Post": 40, "Product": 10, "Genre": 3}


def ent(kind: str, i: int) -> str:
    return f"<{EX}{kind.lower()}{i}>"


def intlit(v: int) -> str:
    return f'"{v}"^^<{XSD_INT}>'


def gen_static(rng: random.Random) -> list[tuple[str, str, str]]:
    out = set()
    for u in range(COUNTS["User"]):
        for v in rng.sample(range(COUNTS["User"]), 2):
            if v != u:
                out.add((ent("User", u), f"<{EX}follows>", ent("User", v)))
        for p in rng.sample(range(COUNTS["Product"]), 2):
            out.add((ent("User", u), f"<{EX}likes>", ent("Product", p)))
        out.add((ent("User", u), f"<{EX}age>", intlit(rng.randint(18, 60))))
    for p in range(COUNTS["Product"]):
        out.add((ent("Product", p), f"<{EX}genre>", ent("Genre", rng.randrange(COUNTS["Genre"]))))
    return sorted(out)


def gen_stream(rng: random.Random, which: str, gaps=(0, 50, 100, 137, 250, 400),
               end: int = END) -> list[tuple[str, str, str, int]]:
    """(s, p, o, tau) in arrival order, non-decreasing tau; repeats happen."""
    out = []
    t = 0
    while True:
        t += rng.choice(gaps)
        if t > end:
            break
        if which == "s1":
            post = ent("Post", rng.randrange(COUNTS["Post"]))
            out.append((ent("User", rng.randrange(COUNTS["User"])), f"<{EX}posts>", post, t))
            out.append((post, f"<{EX}about>", ent("Product", rng.randrange(COUNTS["Product"])), t))
            if rng.random() < 0.7:
                out.append((post, f"<{EX}rating>", intlit(rng.randint(1, 5)), t))
        else:
            out.append((ent("User", rng.randrange(COUNTS["User"])), f"<{EX}visits>",
                        ent("Product", rng.randrange(COUNTS["Product"])), t))
    return out


WINS_S1 = [(2000, 1000, None), (3000, 1000, None), (1000, 1000, None), (1500, 500, None)]
WINS_S2 = [(1000, 500, None), (2000, 1000, None), (None, 1000, 15)]


def gen_query(rng: random.Random, k: int, wins_s1=WINS_S1, wins_s2=WINS_S2) -> dict:
    n = rng.randint(1, 4)
    shape = rng.choice(("linear", "star"))
    types: dict[str, str] = {}
    pats: list[tuple[str, str, str]] = []
    start_type = rng.choice(("User", "Post", "Product"))
    types["?v0"] = start_type
    cur = "?v0"
    nvar = 1
    for i in range(n):
        ty = types[cur]
        options = [(p, "out") for p, (d, _, _) in SCHEMA.items() if d == ty]
        options += [(p, "in") for p, (_, r, _) in SCHEMA.items() if r == ty and r not in ("Int",)]
        if i == 0 and rng.random() < 0.85:  # most queries start from stream data
            options = [(p, d) for p, d in options if SCHEMA[p][2] != "static"] or options
        if not options:
            break
        p, d = rng.choice(options)
        dom, rng_t, _ = SCHEMA[p]
        other = f"?v{nvar}"
        nvar += 1
        types[other] = rng_t if d == "out" else dom
        pats.append((cur, p, other) if d == "out" else (other, p, cur))
        if shape == "linear":
            cur = other
    # occasionally replace a leaf variable of entity type by a constant
    consts = {}
    for v, ty in list(types.items()):
        if v != "?v0" and ty in COUNTS and rng.random() < 0.15:
            consts[v] = ent(ty, rng.randrange(COUNTS[ty]))
    used_streams = sorted({SCHEMA[p][2] for _, p, _ in pats} - {"static"})
    uses_static = any(SCHEMA[p][2] == "static" for _, p, _ in pats)
    join_static = uses_static and rng.random() < 0.85
    scope = None
    if len(used_streams) == 1 and rng.random() < 0.25:
        scope = used_streams[0]

    def term(x):
        return consts.get(x, x)

    triples = []
    for s, p, o in pats:
        t = f"{term(s)} <{EX}{p}> {term(o)} ."
        if scope is not None and SCHEMA[p][2] == scope:
            t = f"GRAPH <{S1 if scope == 's1' else S2}> {{ {t} }}"
        triples.append(t)
    filters = []
    int_vars = [v for v, ty in types.items() if ty == "Int" and v not in consts]
    ent_vars = [v for v, ty in types.items() if ty in COUNTS and v not in consts]
    if int_vars and rng.random() < 0.5:
        v = rng.choice(int_vars)
        op = rng.choice((">", "<=", "!="))
        filters.append(f"FILTER({v} {op} {rng.choice((2, 3, 4, 30, 40))})")
    if ent_vars and rng.random() < 0.2:
        v = rng.choice(ent_vars)
        ty = types[v]
        filters.append(f"FILTER({v} != {ent(ty, rng.randrange(COUNTS[ty]))})")
    vars_ = sorted({x for pat in pats for x in (pat[0], pat[2]) if x.startswith("?") and x not in consts})
    distinct = "DISTINCT " if rng.random() < 0.2 else ""
    where = " ".join(triples + filters)
    proj = " ".join(vars_) if vars_ else "(1 AS ?one)"
    group = ""
    if vars_ and rng.random() < 0.2:  # an aggregate: COUNT per group
        key = rng.choice(vars_)
        proj, group, distinct = f"{key} (COUNT(*) AS ?cnt)", f" GROUP BY {key}", ""
    # windows: every query reads s1; s2 when it uses visits or by chance
    streams = set(used_streams) | {"s1"}
    if rng.random() < 0.3:
        streams.add("s2")
    wins = {}
    wins["s1"] = rng.choice(wins_s1)
    if "s2" in streams:
        wins["s2"] = rng.choice(wins_s2)
    from_parts = []
    for s, (r, st, n) in wins.items():
        ref = rng.choice((s, f"<{S1 if s == 's1' else S2}>"))
        if n is not None:
            w = f"[RANGE TRIPLES {n} STEP {st}ms]"
        else:
            w = f"[RANGE {r}ms STEP {st}ms]"
        from_parts.append(f"FROM STREAM {ref} {w}")
    if join_static:
        from_parts.append("FROM <urn:jindou:default>")
    name = f"q{k}"
    text = f"REGISTER QUERY {name} AS SELECT {distinct}{proj} {' '.join(from_parts)} WHERE {{ {where} }}{group}"
    plain = f"SELECT {distinct}{proj} WHERE {{ {where} }}{group}"
    cvars = None
    subj = [v for v in vars_ if types[v] in COUNTS]
    if subj and len(vars_) >= 2 and not group:
        a = rng.choice(subj)
        cvars = (a, rng.choice([v for v in vars_ if v != a]))
    return {"name": name, "text": text, "plain": plain, "wins": wins, "static": join_static,
            "step": min(st for _, st, _ in wins.values()), "cvars": cvars, "where": where,
            "from": " ".join(from_parts)}


def open_scenario(db, static, absorb: bool, **manager_options) -> StreamManager:
    """Load ``static`` into ``db`` and open a stream manager with the scenario's streams
    (s1 = posts/about/rating; s2 = visits, absorbed into the store when ``absorb``), both at
    progress 0."""
    db.load_data("".join(f"{s} {p} {o} .\n" for s, p, o in static).encode(), "application/n-triples")
    m = StreamManager(db, **manager_options)
    m.register_stream("s1", S1)
    m.register_stream("s2", S2, absorb=[EX + "visits"] if absorb else "none")
    m.heartbeat("s1", 0)
    m.heartbeat("s2", 0)
    return m


def window_rows(data, spec, t):
    r, _, n = spec
    if n is None:
        return {(s, p, o) for s, p, o, tau in data if t - r < tau <= t}
    upto = [(s, p, o) for s, p, o, tau in data if tau <= t]
    return set(upto[-n:])


def ox_term(key: str):
    if key.startswith("<"):
        return ox.NamedNode(key[1:-1])
    lex, dt = key[1:].split('"^^<')
    return ox.Literal(lex, datatype=ox.NamedNode(dt[:-1]))


def norm_ox(term) -> tuple:
    if term is None:
        return ("unbound",)
    if isinstance(term, ox.NamedNode):
        return ("uri", term.value)
    if isinstance(term, ox.BlankNode):
        return ("bnode",)
    if term.language:
        return ("lit", term.value, None, term.language)
    return ("lit", term.value, term.datatype.value, None)


def norm_json(b: dict | None) -> tuple:
    if b is None:
        return ("unbound",)
    if b["type"] == "uri":
        return ("uri", b["value"])
    if b["type"] == "bnode":
        return ("bnode",)
    if "xml:lang" in b:
        return ("lit", b["value"], None, b["xml:lang"])
    return ("lit", b["value"], b.get("datatype", XSD_STRING), None)


def _cases(cases: list[tuple], flight: int) -> list[tuple]:
    """Every case on one process and on a shm cluster; case ``flight`` also over Flight."""
    out = [(*c, b) for c in cases for b in ("single", "cluster")]
    return out + [(*cases[flight], "cluster-flight")]


@pytest.mark.parametrize(("seed", "absorb", "backend"),
                         _cases([(4, False), (11, True), (2026, False), (7, True)], flight=1))
def test_random_continuous_queries_match_oracle(seed, absorb, backend):
    """``absorb``: stream s2's visits are timeless, absorbed into the stored default graph,
    so a query joining stored data sees the visits with ``tau <= t`` (as of event time t)."""
    rng = random.Random(seed)
    static = gen_static(rng)
    data = {"s1": gen_stream(rng, "s1"), "s2": gen_stream(rng, "s2")}
    queries = [gen_query(rng, k) for k in range(16)]

    db = open_database(backend)
    m = None
    try:
        m = open_scenario(db, static, absorb)
        for k, q in enumerate(queries):
            m.register_query(q["text"])
            if k % 3 == 0 and "GROUP BY" not in q["text"]:
                for mode in ("ISTREAM", "DSTREAM"):
                    m.register_query(q["text"].replace("REGISTER QUERY ", f"REGISTER {mode} QUERY ")
                                     .replace(f" {q['name']} AS", f" {q['name']}_{mode} AS", 1))
                q["modes"] = True
            if k % 3 == 1 and q["cvars"]:
                a, b = q["cvars"]
                tmpl = f"{{ {a} <{EX}rel> {b} }}"
                m.register_query(f"REGISTER QUERY {q['name']}_c AS CONSTRUCT {tmpl} {q['from']} "
                                 f"WHERE {{ {q['where']} }}")
                q["construct"] = f"CONSTRUCT {tmpl} WHERE {{ {q['where']} }}"
        for name in ("s1", "s2"):
            rows = data[name]
            # several POSTs; lines sharing a timestamp may be split across POSTs
            cuts = sorted(rng.sample(range(1, len(rows)), 5))
            for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True):
                body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau})
                                  for s, p, o, tau in rows[a:b])
                r = m.ingest_ndjson(name, body)
                assert r["rejected"] == 0, r
        m.heartbeat("s1", END + 1)
        m.heartbeat("s2", END + 1)
        assert m.drain(45)

        cache: dict = {}
        wants: dict = {}
        diff_events = {}
        construct_events = {q["name"]: {e.id: orjson.loads(e.data)
                                        for e in m.log(q["name"] + "_c").since(None, from_t=-1)}
                            for q in queries if q.get("construct")}
        constructs = 0
        for q in queries:
            if q.get("modes"):
                for mode in ("ISTREAM", "DSTREAM"):
                    diff_events[(q["name"], mode)] = {
                        e.id: orjson.loads(e.data) for e in m.log(f"{q['name']}_{mode}").since(None, from_t=-1)}
        checked = nonempty = 0
        for q in queries:
            events = [e for e in m.log(q["name"]).since(None, from_t=-1) if e.event == "result"]
            step = q["step"]
            assert [e.id for e in events] == list(range(0, END + 1, step)), q["text"]
            for e in events:
                t = e.id
                doc = orjson.loads(e.data)
                assert "error" not in doc, (q["text"], doc)
                key = (tuple(sorted(q["wins"].items())), t, q["static"])
                st = cache.get(key)
                if st is None:
                    st = ox.Store()
                    quads = []
                    default = set()
                    for s, spec in q["wins"].items():
                        g = ox.NamedNode(S1 if s == "s1" else S2)
                        w = window_rows(data[s], spec, t)
                        default |= w
                        quads += [ox.Quad(ox_term(a), ox_term(b), ox_term(c), g) for a, b, c in w]
                    if q["static"]:
                        default |= set(static)
                        if absorb:
                            default |= {(a, b, c) for a, b, c, tau in data["s2"] if tau <= t}
                    quads += [ox.Quad(ox_term(a), ox_term(b), ox_term(c), ox.DefaultGraph()) for a, b, c in default]
                    st.extend(quads)
                    cache[key] = st
                sol = st.query(q["plain"])
                names = [v.value for v in sol.variables]
                want = Counter(tuple(norm_ox(s[v]) for v in names) for s in sol)
                assert doc["head"]["vars"] == names
                got = Counter(tuple(norm_json(b.get(v)) for v in names) for b in doc["results"]["bindings"])
                assert got == want, (q["text"], t)
                rmax = max((r for r, _, _ in q["wins"].values() if r is not None), default=None)
                if rmax is not None:
                    assert doc["window"] == {"start": t - rmax, "end": t}
                checked += 1
                nonempty += bool(want)
                if q.get("construct"):
                    ev = construct_events[q["name"]][t]
                    got_t = {x for x in ev["triples"].split(" .\n") if x}
                    want_t = {f"{tr.subject} {tr.predicate} {tr.object}" for tr in st.query(q["construct"])}
                    assert got_t == want_t, (q["construct"], t)
                    constructs += bool(want_t)
                if q.get("modes"):
                    prev = wants.get(q["name"], Counter())
                    for mode, exp in (("ISTREAM", want - prev), ("DSTREAM", prev - want)):
                        ev = diff_events[(q["name"], mode)][t]
                        got_d = Counter(tuple(norm_json(b.get(v)) for v in names)
                                        for b in ev["results"]["bindings"])
                        assert got_d == exp, (mode, q["text"], t)
                    wants[q["name"]] = want
        assert checked > 200
        assert constructs > 10, constructs
        if absorb:
            n = len({(a, c) for a, _, c, _ in data["s2"]})
            got = db.query(f"SELECT (COUNT(*) AS ?n) WHERE {{ ?u <{EX}visits> ?p }}").rows()
            assert got == [{"n": f'"{n}"^^<{XSD_INT}>'}]
        assert nonempty > checked // 4, (checked, nonempty)
    finally:
        if m is not None:
            m.close()
        close_database(db)


# ---------------------------------------------------------------- sparse streams: unchanged instants skipped

SPARSE_END = 60_000


class Oracle:
    """pyoxigraph over exactly one instant's dataset (cached per windows, instant, static join)."""

    def __init__(self, static, data, absorb):
        self.static, self.data, self.absorb = static, data, absorb
        self.stores: dict = {}

    def store(self, q, t):
        key = (tuple(sorted(q["wins"].items())), t, q["static"])
        st = self.stores.get(key)
        if st is None:
            st = ox.Store()
            quads, default = [], set()
            for s, spec in q["wins"].items():
                g = ox.NamedNode(S1 if s == "s1" else S2)
                w = window_rows(self.data[s], spec, t)
                default |= w
                quads += [ox.Quad(ox_term(a), ox_term(b), ox_term(c), g) for a, b, c in w]
            if q["static"]:
                default |= set(self.static)
                if self.absorb:
                    default |= {(a, b, c) for a, b, c, tau in self.data["s2"] if tau <= t}
            quads += [ox.Quad(ox_term(a), ox_term(b), ox_term(c), ox.DefaultGraph()) for a, b, c in default]
            st.extend(quads)
            self.stores[key] = st
        return st

    def want(self, q, t) -> tuple[list[str], Counter]:
        sol = self.store(q, t).query(q["plain"])
        names = [v.value for v in sol.variables]
        return names, Counter(tuple(norm_ox(s[v]) for v in names) for s in sol)


@pytest.mark.parametrize(("seed", "absorb", "backend"), _cases([(5, False), (31, True), (77, False)], flight=1))
def test_sparse_streams_skip_unchanged_instants_and_match_oracle(seed, absorb, backend):
    """Sparse bursts with long gaps, small steps and heartbeats at random points: every instant
    is reported exactly once, by a result (equal to the oracle) or inside an idle run (the
    oracle gives the same result at its first, middle and last instant as at the evaluated
    instant it repeats), and most instants are never evaluated."""
    rng = random.Random(seed)
    static = gen_static(rng)
    gaps = (0, 0, 30, 400, 2500, 9000, 17000)
    data = {"s1": gen_stream(rng, "s1", gaps, SPARSE_END), "s2": gen_stream(rng, "s2", gaps, SPARSE_END)}
    wins_s1 = [(2000, 100, None), (1000, 250, None), (500, 500, None), (3000, 200, None)]
    wins_s2 = [(1000, 100, None), (None, 100, 3), (2500, 500, None)]
    queries = [gen_query(rng, k, wins_s1, wins_s2) for k in range(10)]
    db = open_database(backend, **({"shards": 1} if backend == "single" else {}))
    oracle = Oracle(static, data, absorb)
    m = None
    try:
        m = open_scenario(db, static, absorb, idle_after=4)
        for q in queries:
            m.register_query(q["text"])
            if "GROUP BY" not in q["text"]:
                for mode in ("ISTREAM", "DSTREAM"):
                    m.register_query(q["text"].replace("REGISTER QUERY ", f"REGISTER {mode} QUERY ")
                                     .replace(f" {q['name']} AS", f" {q['name']}_{mode} AS", 1))
                q["modes"] = True
        # interleave the streams' elements and heartbeats at random points, as a feed would
        feed = sorted([(tau, name) for name in ("s1", "s2") for *_, tau in data[name]] +
                      [(rng.randrange(SPARSE_END), rng.choice(("s1", "s2"))) for _ in range(12)])
        pos = {"s1": 0, "s2": 0}
        i = 0
        while i < len(feed):
            tau, name = feed[i]
            rows = data[name]
            j = pos[name]
            k = j
            while k < len(rows) and rows[k][3] <= tau:
                k += 1
            if k > j:
                body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": t}) for s, p, o, t in rows[j:k])
                assert m.ingest_ndjson(name, body)["rejected"] == 0
                pos[name] = k
            else:
                m.heartbeat(name, tau)
            if rng.random() < 0.3:
                m.drain(30)   # sometimes let the worker catch up, so runs are split by progress too
            i += 1
        m.heartbeat("s1", SPARSE_END + 1)
        m.heartbeat("s2", SPARSE_END + 1)
        assert m.drain(60)

        results = idles = instants = 0
        for q in queries:
            step = q["step"]
            for mode in ("RSTREAM", "ISTREAM", "DSTREAM") if q.get("modes") else ("RSTREAM",):
                name = q["name"] if mode == "RSTREAM" else f"{q['name']}_{mode}"
                evs = [e for e in m.log(name).since(None, from_t=0) if e.event in ("result", "idle")]
                nxt = 0
                for e in evs:
                    if e.event == "result":
                        assert e.id == nxt, (q["text"], e.id, nxt)
                        doc = orjson.loads(e.data)
                        assert "error" not in doc, (q["text"], doc)
                        names, want = oracle.want(q, e.id)
                        if mode != "RSTREAM":
                            prev = oracle.want(q, e.id - step)[1] if e.id else Counter()
                            want = want - prev if mode == "ISTREAM" else prev - want
                        got = Counter(tuple(norm_json(b.get(v)) for v in names) for b in doc["results"]["bindings"])
                        assert got == want, (mode, q["text"], e.id)
                        results += 1
                    else:
                        assert e.start == nxt, (q["text"], e.start, nxt)
                        d = orjson.loads(e.data)
                        assert d["same_as"] < e.start and d["instants"] == (e.id - e.start) // step + 1
                        base = oracle.want(q, d["same_as"])[1]
                        mid = e.start + (e.id - e.start) // (2 * step) * step
                        for t in {e.start, mid, e.id}:
                            assert oracle.want(q, t)[1] == base, (mode, q["text"], t, d)
                        idles += 1
                        instants += d["instants"]
                    nxt = e.id + step
                assert nxt == SPARSE_END + step - SPARSE_END % step if SPARSE_END % step else nxt == SPARSE_END + step
        assert results > 100 and idles > 20, (results, idles)
        assert instants > 5 * results, (instants, results)   # most instants were not evaluated
    finally:
        if m is not None:
            m.close()
        close_database(db)
