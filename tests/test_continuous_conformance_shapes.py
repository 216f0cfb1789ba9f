"""Conformance: continuous queries of many shapes, every instant compared with an oracle.

One scenario (a seeded static graph of sensors and rooms, two seeded streams: observations
``?o :by ?sensor ; :value ?v`` and statuses ``?sensor :status :ok|:fail``) and ~40 continuous
queries in C-SPARQL, RSP-QL and CQELS-QL: OPTIONAL, UNION, MINUS, FILTER (NOT) EXISTS,
aggregates with GROUP BY / HAVING, ORDER BY + LIMIT / OFFSET, subqueries, VALUES, property
paths, GRAPH ?g, ASK, CONSTRUCT, BIND, tumbling / sliding / STEP > RANGE / count windows,
two windows with different steps, I/D/RSTREAM, a chain of two queries through a derived stream
(REGISTER STREAM) and f:timestamp.

The oracle is pyoxigraph over exactly one instant's dataset: the windows' triples (a set) and
the static graph, placed as each syntax's contract says (C-SPARQL: windows merged into the
default graph and named by stream IRI, stored data with FROM <urn:jindou:default>; RSP-QL /
CQELS: windows are named graphs only -- by window IRI / stream IRI -- and the default graph is
the store's). The oracle's query is the registration text with its REGISTER header and window
clauses taken out and WINDOW / STREAM blocks turned into GRAPH blocks.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import orjson
import pyoxigraph as ox
import pytest

from engine.database import Database
from engine.stream.manager import StreamManager
from tests.test_continuous_oracle import norm_json, norm_ox

EX = "http://ex.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
F = "http://larkc.eu/csparql/sparql/jena/ext#"
PFX = f"PREFIX : <{EX}> PREFIX f: <{F}> PREFIX xsd: <{XSD}> "
S, U = EX + "s", EX + "u"
END = 9000
RESTART_AT = 4321
NSENS = 6


def iri(x: str) -> str:
    return f"<{EX}{x}>"


def lit(v: int) -> str:
    return f'"{v}"^^<{XSD}integer>'


def gen_static() -> list[tuple[str, str, str]]:
    out = []
    for k in range(NSENS):
        out.append((iri(f"n{k}"), iri("in"), iri(f"room{k % 3}")))
        if k % 2 == 0:
            out.append((iri(f"n{k}"), iri("label"), f'"sensor {k}"@en'))
    for r in range(3):
        out.append((iri(f"room{r}"), iri("floor"), lit(r + 1)))
    return out


#: a stored named graph: GRAPH ?g sees it next to the windows, WINDOW ?w does not
G = EX + "g"
STORED_NAMED = [(iri("n1"), iri("status"), iri("fail")), (iri("x"), iri("p"), iri("n1"))]


def gen_streams(rng: random.Random) -> dict[str, list[tuple[str, str, str, int]]]:
    """(s, p, o, tau) per stream, non-decreasing tau; repeats and equal times happen."""
    s, u = [], []
    t = 0
    k = 0
    while True:
        t += rng.choice((0, 40, 130, 250, 333, 700))
        if t >= END:
            break
        o = iri(f"o{k % 23}")   # observation ids repeat: a window may hold an id twice
        k += 1
        s.append((o, iri("by"), iri(f"n{rng.randrange(NSENS)}"), t))
        if rng.random() < 0.8:
            s.append((o, iri("value"), lit(rng.randrange(0, 100, 5)), t))
    t = 0
    while True:
        t += rng.choice((100, 300, 450, 900))
        if t >= END:
            break
        u.append((iri(f"n{rng.randrange(NSENS)}"), iri("status"), iri(rng.choice(("ok", "ok", "fail"))), t))
    return {"s": s, "u": u}


# name -> (text after PFX, windows {stream: (range, step, count)}, options)
#   options: "static": C-SPARQL reads the stored default graph; "named": {stream: graph IRI} for
#   RSP-QL / CQELS (windows are named graphs, the default graph is the store's); "ordered":
#   compare solutions as sequences; "mode": ISTREAM / DSTREAM
W31 = (3000, 1000, None)
W2T = (2000, 2000, None)
Q: dict[str, tuple[str, dict, dict]] = {
    "opt_static": (
        "REGISTER QUERY {n} AS SELECT ?o ?s ?l FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "FROM <urn:jindou:default> WHERE { ?o :by ?s OPTIONAL { ?s :label ?l } }", {"s": W31}, {"static": True}),
    "opt_stream": (
        "REGISTER QUERY {n} AS SELECT ?o ?s ?v FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "WHERE { ?o :by ?s OPTIONAL { ?o :value ?v FILTER(?v > 40) } }", {"s": W31}, {}),
    "opt_two_streams": (
        "REGISTER QUERY {n} AS SELECT ?o ?s ?st FROM STREAM <http://ex.org/s> [RANGE 2s STEP 500ms] "
        "FROM STREAM <http://ex.org/u> [RANGE 3s STEP 1s] WHERE { ?o :by ?s OPTIONAL { ?s :status ?st } }",
        {"s": (2000, 500, None), "u": W31}, {}),
    "union": (
        "REGISTER QUERY {n} AS SELECT ?x ?y FROM STREAM <http://ex.org/s> [RANGE 2s STEP 1s] "
        "FROM STREAM <http://ex.org/u> [RANGE 2s STEP 1s] WHERE { { ?x :by ?y } UNION { ?x :status ?y } }",
        {"s": (2000, 1000, None), "u": (2000, 1000, None)}, {}),
    "minus": (
        "REGISTER QUERY {n} AS SELECT ?o ?s FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "FROM STREAM <http://ex.org/u> [RANGE 4s STEP 1s] WHERE { ?o :by ?s MINUS { ?s :status :fail } }",
        {"s": W31, "u": (4000, 1000, None)}, {}),
    "not_exists": (
        "REGISTER QUERY {n} AS SELECT ?o ?s FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "FROM STREAM <http://ex.org/u> [RANGE 4s STEP 1s] WHERE { ?o :by ?s FILTER NOT EXISTS { ?s :status :fail } }",
        {"s": W31, "u": (4000, 1000, None)}, {}),
    "exists_static": (
        "REGISTER QUERY {n} AS SELECT ?o FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] FROM <urn:jindou:default> "
        "WHERE { ?o :by ?s FILTER EXISTS { ?s :label ?l } }", {"s": W31}, {"static": True}),
    "agg_room": (
        "REGISTER QUERY {n} AS SELECT ?r (COUNT(*) AS ?n) (SUM(?v) AS ?sum) (MIN(?v) AS ?lo) (MAX(?v) AS ?hi) "
        "(AVG(?v) AS ?avg) FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] FROM <urn:jindou:default> "
        "WHERE { ?o :by ?s ; :value ?v . ?s :in ?r } GROUP BY ?r", {"s": W31}, {"static": True}),
    "agg_having": (
        "REGISTER QUERY {n} AS SELECT ?s (COUNT(?o) AS ?c) FROM STREAM <http://ex.org/s> [RANGE 4s STEP 1s] "
        "WHERE { ?o :by ?s } GROUP BY ?s HAVING (COUNT(?o) >= 3)", {"s": (4000, 1000, None)}, {}),
    "agg_distinct": (
        "REGISTER QUERY {n} AS SELECT (COUNT(DISTINCT ?s) AS ?ns) (COUNT(DISTINCT ?v) AS ?nv) "
        "FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] WHERE { ?o :by ?s ; :value ?v }", {"s": W31}, {}),
    "agg_empty_ok": (   # one row also over an empty window
        "REGISTER QUERY {n} AS SELECT (COUNT(*) AS ?n) (SUM(?v) AS ?sum) (MAX(?v) AS ?hi) "
        "FROM STREAM <http://ex.org/s> [RANGE 200ms STEP 500ms] WHERE { ?o :value ?v FILTER(?v > 70) }",
        {"s": (200, 500, None)}, {}),
    "agg_expr": (
        "REGISTER QUERY {n} AS SELECT ?s ((MAX(?v) - MIN(?v)) AS ?spread) FROM STREAM <http://ex.org/s> "
        "[RANGE 5s STEP 1s] WHERE { ?o :by ?s ; :value ?v } GROUP BY ?s", {"s": (5000, 1000, None)}, {}),
    "order_limit": (
        "REGISTER QUERY {n} AS SELECT ?o ?v FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "WHERE { ?o :value ?v } ORDER BY DESC(?v) ?o LIMIT 3", {"s": W31}, {"ordered": True}),
    "order_offset": (
        "REGISTER QUERY {n} AS SELECT ?o ?v FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "WHERE { ?o :value ?v } ORDER BY ?v DESC(?o) LIMIT 4 OFFSET 2", {"s": W31}, {"ordered": True}),
    "order_agg": (
        "REGISTER QUERY {n} AS SELECT ?s (COUNT(*) AS ?c) FROM STREAM <http://ex.org/s> [RANGE 4s STEP 1s] "
        "WHERE { ?o :by ?s } GROUP BY ?s ORDER BY DESC(?c) ?s LIMIT 2", {"s": (4000, 1000, None)}, {"ordered": True}),
    "distinct": (
        "REGISTER QUERY {n} AS SELECT DISTINCT ?s FROM STREAM <http://ex.org/s> [RANGE 2s STEP 1s] "
        "WHERE { ?o :by ?s }", {"s": (2000, 1000, None)}, {}),
    "bind_expr": (
        "REGISTER QUERY {n} AS SELECT ?o ?d ?big FROM STREAM <http://ex.org/s> [RANGE 2s STEP 1s] "
        "WHERE { ?o :value ?v BIND(?v * 2 + 1 AS ?d) BIND(IF(?v >= 50, \"big\", \"small\") AS ?big) }",
        {"s": (2000, 1000, None)}, {}),
    "subquery": (
        "REGISTER QUERY {n} AS SELECT ?s ?o ?m FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "WHERE { { SELECT ?s (MAX(?v) AS ?m) WHERE { ?x :by ?s ; :value ?v } GROUP BY ?s } ?o :by ?s ; :value ?m }",
        {"s": W31}, {}),
    "values": (
        "REGISTER QUERY {n} AS SELECT ?s ?o FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "WHERE { VALUES ?s { :n1 :n2 :n9 } ?o :by ?s }", {"s": W31}, {}),
    "path_static": (
        "REGISTER QUERY {n} AS SELECT ?o ?f FROM STREAM <http://ex.org/s> [RANGE 2s STEP 1s] "
        "FROM <urn:jindou:default> WHERE { ?o :by/:in/:floor ?f }", {"s": (2000, 1000, None)}, {"static": True}),
    "graph_var": (
        "REGISTER QUERY {n} AS SELECT ?g ?x FROM STREAM <http://ex.org/s> [RANGE 1s STEP 1s] "
        "FROM STREAM <http://ex.org/u> [RANGE 2s STEP 1s] WHERE { GRAPH ?g { ?x ?p :n1 } }",
        {"s": (1000, 1000, None), "u": (2000, 1000, None)}, {}),
    "graph_scoped": (
        "REGISTER QUERY {n} AS SELECT ?o ?st FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "FROM STREAM <http://ex.org/u> [RANGE 3s STEP 1s] "
        "WHERE { GRAPH <http://ex.org/s> { ?o :by ?s } GRAPH <http://ex.org/u> { ?s :status ?st } }",
        {"s": W31, "u": W31}, {}),
    "ask": (
        "REGISTER QUERY {n} AS ASK FROM STREAM <http://ex.org/s> [RANGE 1s STEP 500ms] "
        "WHERE { ?o :value ?v FILTER(?v >= 90) }", {"s": (1000, 500, None)}, {}),
    "construct": (
        "REGISTER QUERY {n} AS CONSTRUCT { ?s :saw ?o . ?o :room ?r } FROM STREAM <http://ex.org/s> "
        "[RANGE 2s STEP 1s] FROM <urn:jindou:default> WHERE { ?o :by ?s . ?s :in ?r }",
        {"s": (2000, 1000, None)}, {"static": True}),
    "construct_istream": (
        "REGISTER ISTREAM QUERY {n} AS CONSTRUCT { ?s :saw ?o } FROM STREAM <http://ex.org/s> "
        "[RANGE 2s STEP 1s] WHERE { ?o :by ?s }", {"s": (2000, 1000, None)}, {"mode": "ISTREAM"}),
    "tumbling": (
        "REGISTER QUERY {n} AS SELECT ?s (COUNT(*) AS ?c) FROM STREAM <http://ex.org/s> [RANGE 2s TUMBLING] "
        "WHERE { ?o :by ?s } GROUP BY ?s", {"s": W2T}, {}),
    "step_gt_range": (
        "REGISTER QUERY {n} AS SELECT ?o ?s FROM STREAM <http://ex.org/s> [RANGE 500ms STEP 1500ms] "
        "WHERE { ?o :by ?s }", {"s": (500, 1500, None)}, {}),
    "count_window": (
        "REGISTER QUERY {n} AS SELECT ?s ?st FROM STREAM <http://ex.org/u> [RANGE TRIPLES 3 STEP 1s] "
        "WHERE { ?s :status ?st }", {"u": (None, 1000, 3)}, {}),
    "count_only_agg": (
        "REGISTER QUERY {n} AS SELECT ?st (COUNT(*) AS ?c) FROM STREAM <http://ex.org/s> [RANGE TRIPLES 7 STEP 1s] "
        "FROM STREAM <http://ex.org/u> [RANGE TRIPLES 2 STEP 500ms] WHERE { { ?o :by ?x } UNION { ?x :status ?st } } "
        "GROUP BY ?st", {"s": (None, 1000, 7), "u": (None, 500, 2)}, {}),
    "count_and_time": (
        "REGISTER QUERY {n} AS SELECT ?o ?st FROM STREAM <http://ex.org/s> [RANGE 2s STEP 500ms] "
        "FROM STREAM <http://ex.org/u> [RANGE TRIPLES 2 STEP 1s] WHERE { ?o :by ?s . ?s :status ?st }",
        {"s": (2000, 500, None), "u": (None, 1000, 2)}, {}),
    "istream_select": (
        "REGISTER ISTREAM QUERY {n} AS SELECT ?o ?s FROM STREAM <http://ex.org/s> [RANGE 3s STEP 1s] "
        "WHERE { ?o :by ?s }", {"s": W31}, {"mode": "ISTREAM"}),
    "dstream_agg": (
        "REGISTER DSTREAM QUERY {n} AS SELECT ?s (COUNT(*) AS ?c) FROM STREAM <http://ex.org/s> "
        "[RANGE 3s STEP 1s] WHERE { ?o :by ?s } GROUP BY ?s", {"s": W31}, {"mode": "DSTREAM"}),
    "strings": (
        "REGISTER QUERY {n} AS SELECT ?s (STR(?l) AS ?t) (LANG(?l) AS ?lg) FROM STREAM <http://ex.org/s> "
        "[RANGE 2s STEP 1s] FROM <urn:jindou:default> WHERE { ?o :by ?s . ?s :label ?l FILTER(REGEX(?l, \"[024]$\")) }",
        {"s": (2000, 1000, None)}, {"static": True}),
    "csparql_every_spaces": (
        "REGISTER QUERY {n} COMPUTED EVERY 1 s AS SELECT ?s (MAX(?v) AS ?hi) FROM STREAM <http://ex.org/s> "
        "[RANGE 3 s] FROM <urn:jindou:default> WHERE { ?o :by ?s ; :value ?v . ?s :in :room1 } GROUP BY ?s",
        {"s": W31}, {"static": True}),
    # RSP-QL
    "rsp_static_opt": (
        "REGISTER RSTREAM <http://ex.org/out/{n}> AS SELECT ?o ?s ?l FROM NAMED WINDOW :w ON :s "
        "[RANGE PT3S STEP PT1S] WHERE { WINDOW :w { ?o :by ?s } OPTIONAL { ?s :label ?l } }",
        {"s": W31}, {"named": {"s": EX + "w"}}),
    "rsp_two_windows": (
        "REGISTER RSTREAM <{n}> AS SELECT ?o ?st FROM NAMED WINDOW :w1 ON :s [RANGE PT2S STEP PT0.5S] "
        "FROM NAMED WINDOW :w2 ON :u [FROM NOW-PT3S TO NOW STEP PT1S] "
        "WHERE { WINDOW :w1 { ?o :by ?s } WINDOW :w2 { ?s :status ?st } }",
        {"s": (2000, 500, None), "u": W31}, {"named": {"s": EX + "w1", "u": EX + "w2"}}),
    "rsp_agg_having": (
        "REGISTER RSTREAM <{n}> AS SELECT ?r (AVG(?v) AS ?a) FROM NAMED WINDOW :w ON :s [RANGE PT4S STEP PT1S] "
        "WHERE { WINDOW :w { ?o :by ?s ; :value ?v } ?s :in ?r } GROUP BY ?r HAVING (AVG(?v) > 30)",
        {"s": (4000, 1000, None)}, {"named": {"s": EX + "w"}}),
    "rsp_not_exists": (
        "REGISTER ISTREAM <{n}> AS SELECT ?o ?s FROM NAMED WINDOW :w1 ON :s [RANGE PT3S STEP PT1S] "
        "FROM NAMED WINDOW :w2 ON :u [RANGE PT5S STEP PT1S] "
        "WHERE { WINDOW :w1 { ?o :by ?s } FILTER NOT EXISTS { WINDOW :w2 { ?s :status :fail } } }",
        {"s": W31, "u": (5000, 1000, None)}, {"named": {"s": EX + "w1", "u": EX + "w2"}, "mode": "ISTREAM"}),
    "rsp_graph_var": (
        "REGISTER RSTREAM <{n}> AS SELECT ?g (COUNT(*) AS ?c) FROM NAMED WINDOW :w1 ON :s [RANGE PT1S STEP PT1S] "
        "FROM NAMED WINDOW :w2 ON :u [RANGE PT2S STEP PT1S] WHERE { GRAPH ?g { ?x ?p ?y } } GROUP BY ?g",
        {"s": (1000, 1000, None), "u": (2000, 1000, None)}, {"named": {"s": EX + "w1", "u": EX + "w2"}}),
    "rsp_window_var": (   # WINDOW ?w ranges over the declared windows (RSP-QL's VarOrIri)
        "REGISTER RSTREAM <{n}> AS SELECT ?w ?x ?y FROM NAMED WINDOW :w1 ON :s [RANGE PT2S STEP PT1S] "
        "FROM NAMED WINDOW :w2 ON :u [RANGE PT3S STEP PT1S] WHERE { WINDOW ?w { ?x ?p ?y FILTER(?y != :ok) } }",
        {"s": (2000, 1000, None), "u": W31}, {"named": {"s": EX + "w1", "u": EX + "w2"}, "oracle":
         "SELECT ?w ?x ?y WHERE { GRAPH ?w { ?x ?p ?y FILTER(?y != :ok) } FILTER(?w IN (:w1, :w2)) }"}),
    # CQELS-QL
    "cqels_static": (
        "REGISTER QUERY {n} AS SELECT ?o ?r WHERE { STREAM <http://ex.org/s> [RANGE 3s SLIDE 1s] { ?o :by ?s } "
        "?s :in ?r }", {"s": W31}, {"named": {"s": S}}),
    "cqels_union_order": (
        "REGISTER QUERY {n} AS SELECT ?x ?y WHERE { { STREAM <http://ex.org/s> [RANGE 2s SLIDE 1s] { ?x :value ?y } } "
        "UNION { STREAM <http://ex.org/u> [TRIPLES 2 SLIDE 1s] { ?x :status ?y } } } ORDER BY ?x ?y LIMIT 5",
        {"s": (2000, 1000, None), "u": (None, 1000, 2)}, {"named": {"s": S, "u": U}, "ordered": True}),
    "cqels_minus": (
        "REGISTER DSTREAM QUERY {n} AS SELECT ?s WHERE { STREAM <http://ex.org/s> [RANGE 3s SLIDE 1s] { ?o :by ?s } "
        "MINUS { STREAM <http://ex.org/u> [RANGE 5s SLIDE 1s] { ?s :status :ok } } }",
        {"s": W31, "u": (5000, 1000, None)}, {"named": {"s": S, "u": U}, "mode": "DSTREAM"}),
}


def oracle_text(text: str) -> str:
    """The registration text as a plain SPARQL query over the instant's dataset."""
    body = re.sub(r"^REGISTER .*? AS ", "", text, count=1)
    body = re.sub(r"FROM NAMED WINDOW \S+ ON (?:STREAM )?\S+ \[[^\]]*\] ", "", body)
    body = re.sub(r"FROM STREAM \S+ \[[^\]]*\] ", "", body)
    body = body.replace("FROM <urn:jindou:default> ", "")
    body = re.sub(r"\bWINDOW (\S+) \{", r"GRAPH \1 {", body)
    body = re.sub(r"\bSTREAM (<[^>]+>) \[[^\]]*\] \{", r"GRAPH \1 {", body)
    return PFX + body


def window_rows(rows, spec, t) -> set:
    r, _, n = spec
    if n is None:
        return {(s, p, o) for s, p, o, tau in rows if t - r < tau <= t}
    return {(s, p, o) for s, p, o, _ in [x for x in rows if x[3] <= t][-n:]}


def nq(rows, graph: str | None) -> str:
    g = f" <{graph}>" if graph else ""
    return "".join(f"{s} {p} {o}{g} .\n" for s, p, o in rows)


def canon(t: tuple) -> tuple:
    """Numeric literals by value (1.50 and 1.5 are the same decimal)."""
    if t[0] == "lit" and t[2] in (XSD + "decimal", XSD + "double"):
        return ("num", t[2], float(t[1]))
    return t


class Oracle:
    def __init__(self, static, data):
        self.static, self.data = static, data

    def dataset(self, wins: dict, opts: dict, t: int) -> ox.Store:
        st = ox.Store()
        text = []
        named = opts.get("named")
        for name, spec in wins.items():
            rows = window_rows(self.data[name], spec, t)
            if named is None:
                text.append(nq(rows, None))
                text.append(nq(rows, S if name == "s" else U))
            else:
                text.append(nq(rows, named[name]))
        if named is not None or opts.get("static"):
            text.append(nq(self.static, None))
        if not opts.get("static"):
            # no FROM <g> / FROM NAMED <g>: every stored named graph is a named graph of the query
            text.append(nq(STORED_NAMED, G))
        st.load("".join(text).encode(), format=ox.RdfFormat.N_QUADS)
        return st

    def answer(self, query: str, wins: dict, opts: dict, t: int):
        res = self.dataset(wins, opts, t).query(query)
        if isinstance(res, ox.QueryBoolean):
            return bool(res)
        if isinstance(res, ox.QueryTriples):
            return {(str(x.subject), str(x.predicate), str(x.object)) for x in res}
        names = [v.value for v in res.variables]
        rows = [tuple(canon(norm_ox(s[v])) for v in names) for s in res]
        return names, rows


def got_triples(doc: dict) -> set:
    out = set()
    for x in ox.parse(doc["triples"].encode(), format=ox.RdfFormat.N_TRIPLES):
        out.add((str(x.subject), str(x.predicate), str(x.object)))
    return out


def _post(m: StreamManager, name: str, rows, rng: random.Random, parts: int) -> None:
    cuts = sorted(rng.sample(range(1, len(rows)), parts)) if len(rows) > parts else []
    for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True):
        body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o, tau in rows[a:b])
        r = m.ingest_ndjson(name, body)
        assert r["rejected"] == 0, r


def _read_logs(m: StreamManager) -> dict:
    assert m.drain(60)
    return {name: [(e.id, e.event, orjson.loads(e.data)) for e in m.log(name).since(None, from_t=-1)]
            for name in Q}


@pytest.fixture(scope="module", params=["one-run", "restarted"])
def scenario(request, tmp_path_factory):
    """Every query over the same streams; ``restarted``: with a data dir, the manager is closed
    after the elements before RESTART_AT and opened again (registrations, progress, windows and
    result logs come back from disk) before the rest arrive."""
    restart = request.param == "restarted"
    data_dir = str(tmp_path_factory.mktemp("conf")) if restart else None
    rng = random.Random(20261126)
    static = gen_static()
    data = gen_streams(rng)
    db = Database(shards=2)
    db.load_data(nq(static, None).encode(), "application/n-triples")
    db.load_data(nq(STORED_NAMED, G).encode(), "application/n-quads")
    m = StreamManager(db, idle_after=10_000, data_dir=data_dir)
    try:
        m.register_stream("s", S)
        m.register_stream("u", U)
        m.heartbeat("s", 0)
        m.heartbeat("u", 0)
        for name, (text, _, _) in Q.items():
            m.register_query(PFX + text.replace("{n}", name))
        split = RESTART_AT if restart else END + 1
        for name in ("s", "u"):
            _post(m, name, [r for r in data[name] if r[3] < split], rng, 6)
        if restart:
            for name in ("s", "u"):
                m.heartbeat(name, split)
            assert m.drain(60)
            m.close()
            m = StreamManager(db, idle_after=10_000, data_dir=data_dir)
            for name in ("s", "u"):
                _post(m, name, [r for r in data[name] if r[3] >= split], rng, 3)
        m.heartbeat("s", END + 1)
        m.heartbeat("u", END + 1)
        yield Oracle(static, data), _read_logs(m)
    finally:
        m.close()


@pytest.mark.parametrize("name", sorted(Q))
def test_every_instant_matches_the_oracle(scenario, name):
    oracle, logs = scenario
    text, wins, opts = Q[name]
    query = PFX + opts["oracle"] if "oracle" in opts else oracle_text(text.replace("{n}", name))
    step = min(st for _, st, _ in wins.values())
    evs = logs[name]
    assert [e for _, e, _ in evs] == ["result"] * len(evs)
    assert [t for t, _, _ in evs] == list(range(0, END + 1, step)), name
    mode = opts.get("mode")
    prev = None
    nonempty = 0
    rmax = max((r for r, _, _ in wins.values() if r is not None), default=None)
    for t, _, doc in evs:
        assert "error" not in doc, (name, t, doc)
        if rmax is not None:
            assert doc["window"] == {"start": t - rmax, "end": t}, (name, t)
        else:   # count windows only: the oldest element time held (the instant when none)
            taus = [tau for st, spec in wins.items() for tau in
                    [x[3] for x in oracle.data[st] if x[3] <= t][-spec[2]:]]
            assert doc["window"] == {"start": min(taus, default=t), "end": t}, (name, t)
        want = oracle.answer(query, wins, opts, t)
        if isinstance(want, bool):
            assert doc["boolean"] is want, (name, t)
            nonempty += want
            continue
        if isinstance(want, set):
            got = got_triples(doc)
            cur = want
            if mode == "ISTREAM":
                want = cur - (prev or set())
            prev = cur
            assert got == want, (name, t)
            nonempty += bool(want)
            continue
        names, rows = want
        assert doc["head"]["vars"] == names, (name, doc["head"])
        got = [tuple(canon(norm_json(b.get(v))) for v in names) for b in doc["results"]["bindings"]]
        cur = Counter(rows)
        if mode == "ISTREAM":
            rows = list((cur - (prev or Counter())).elements())
        elif mode == "DSTREAM":
            rows = list(((prev or Counter()) - cur).elements())
        prev = cur
        if opts.get("ordered"):
            assert got == rows, (name, t)
        else:
            assert Counter(got) == Counter(rows), (name, t)
        nonempty += bool(rows)
    assert nonempty >= 2, f"{name}: the scenario should exercise the query ({nonempty} non-empty instants)"
