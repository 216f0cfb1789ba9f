"""Conformance: seeded random continuous queries with OPTIONAL, UNION, MINUS, FILTER (NOT)
EXISTS, BIND, aggregates, DISTINCT, ORDER BY + LIMIT and I/DSTREAM over one or two windows and the
stored graph, every instant compared with the pyoxigraph oracle of
:mod:`tests.test_continuous_conformance_shapes` -- with the evaluator's adaptive choices and with
incremental maintenance forced on every sliding window."""

from __future__ import annotations

import random
import re
from collections import Counter

import orjson
import pytest

from engine.database import Database
from engine.stream.manager import StreamManager
from tests.test_continuous_conformance_shapes import (
    END,
    PFX,
    STORED_NAMED,
    G,
    Oracle,
    S,
    U,
    canon,
    gen_static,
    gen_streams,
    norm_json,
    nq,
)

STREAM_PATS = {"s": ["?o :by ?s", "?o :value ?v"], "u": ["?s :status ?st"]}
STATIC_PATS = ["?s :in ?r", "?r :floor ?f", "?s :label ?l"]
WINS = {"s": [(3000, 1000, None), (2000, 500, None), (1000, 1000, None), (2000, 2000, None), (None, 1000, 6)],
        "u": [(3000, 1000, None), (4000, 500, None), (None, 500, 3), (1500, 1500, None)]}


def vars_of(pats) -> set:
    return {w for p in pats for w in p.split() if w.startswith("?")}


def gen_query(rng: random.Random, k: int) -> tuple[str, str, dict, dict]:
    """(registration text, oracle text, windows, options) of one random query."""
    streams = ["s"] if rng.random() < 0.5 else (["u"] if rng.random() < 0.3 else ["s", "u"])
    core = []
    for st in streams:
        pats = STREAM_PATS[st]
        core += pats if rng.random() < 0.6 else pats[:1]
    static = rng.random() < 0.4
    if static:
        core.append(rng.choice(STATIC_PATS[:1] + STATIC_PATS[2:]))
        if "?s :in ?r" in core and rng.random() < 0.5:
            core.append("?r :floor ?f")
    parts = [" . ".join(core)]
    bound = vars_of(core)
    certain = set(bound)   # bound in every solution (engines differ on MIN/MAX/SUM over unbound values)
    extras = []
    r = rng.random()
    if r < 0.2:
        opt = rng.choice(["?s :label ?l", "?o :value ?v2", "?s :status ?st2"])
        extras.append(f"OPTIONAL {{ {opt} }}")
        if "?s :label" in opt:
            static = True
        bound |= vars_of([opt])
    elif r < 0.35 and "?s" in bound:
        extras.append(rng.choice(["MINUS { ?s :status :fail }", "FILTER NOT EXISTS { ?s :status :fail }",
                                  "FILTER EXISTS { ?s :status :ok }"]))
        if "u" not in streams:
            streams.append("u")
    elif r < 0.5:
        alt = rng.choice(["?s :status ?st", "?o :by ?s"])
        parts = [f"{{ {parts[0]} }} UNION {{ {alt} }}"]
        certain &= vars_of([alt])
        bound |= vars_of([alt])
        for st, pats in STREAM_PATS.items():
            if alt in pats and st not in streams:
                streams.append(st)
    if "?v" in bound and rng.random() < 0.5:
        extras.append(f"FILTER(?v {rng.choice(['>', '<=', '!='])} {rng.choice([20, 50, 75])})")
    if "?v" in bound and rng.random() < 0.2:
        extras.append("BIND(?v + 1 AS ?w)")
        bound.add("?w")
    where = " ".join(parts + extras)
    vs = sorted(bound - {"?v2", "?st2"}) if rng.random() < 0.7 else sorted(bound)
    mode = "RSTREAM"
    ordered = False
    shape = rng.random()
    if shape < 0.25 and "?s" in bound:
        agg = rng.choice(["(COUNT(*) AS ?n)", "(COUNT(DISTINCT ?o) AS ?n)"] +
                         (["(MAX(?v) AS ?n)", "(SUM(?v) AS ?n)", "(MIN(?v) AS ?n)"] if "?v" in certain else []))
        proj, tail = f"?s {agg}", " GROUP BY ?s"
        if rng.random() < 0.3:
            tail += " HAVING (COUNT(*) > 1)"
        vs = ["?s", "?n"]
    elif shape < 0.35:
        proj = "(COUNT(*) AS ?n)"
        tail = ""
        vs = ["?n"]
    else:
        vs = vs[: rng.randint(1, len(vs))] if rng.random() < 0.4 else vs
        proj, tail = ("DISTINCT " if rng.random() < 0.25 else "") + " ".join(vs), ""
        if rng.random() < 0.2:
            tail = f" ORDER BY {' '.join(vs)} LIMIT {rng.randint(1, 5)}"
            ordered = True
        elif rng.random() < 0.3:
            mode = rng.choice(["ISTREAM", "DSTREAM"])
    wins = {st: rng.choice(WINS[st]) for st in streams}
    froms = []
    for st, (rg, step, n) in wins.items():
        w = f"[RANGE TRIPLES {n} STEP {step}ms]" if n is not None else f"[RANGE {rg}ms STEP {step}ms]"
        froms.append(f"FROM STREAM <{S if st == 's' else U}> {w}")
    if static:
        froms.append("FROM <urn:jindou:default>")
    name = f"r{k}"
    head = f"REGISTER {mode} QUERY {name} AS " if mode != "RSTREAM" else f"REGISTER QUERY {name} AS "
    text = f"{head}SELECT {proj} {' '.join(froms)} WHERE {{ {where} }}{tail}"
    plain = f"SELECT {proj} WHERE {{ {where} }}{tail}"
    return text, plain, wins, {"static": static, "mode": mode, "ordered": ordered}


_STREAM_TRIPLE = re.compile(r"(\?\w+|:\w+) :(by|value|status) (\?\w+|:\w+)")


def to_rspql(text: str, wins: dict) -> str:
    """The C-SPARQL text in RSP-QL: each window a named window, each stream triple pattern in a
    WINDOW block of its stream's window. The same solutions: the stream predicates occur in one
    stream each and never in the stored default graph."""
    head, _, rest = text.partition(" AS SELECT ")
    mode, name = head.split()[1], head.split()[-1]
    head = f"REGISTER {'RSTREAM' if mode == 'QUERY' else mode} <http://ex.org/out/{name}> AS SELECT "
    for st, (rg, step, n) in wins.items():
        iri = S if st == "s" else U
        w = f"[RANGE TRIPLES {n} STEP {step}ms]" if n is not None else f"[RANGE {rg}ms STEP {step}ms]"
        rest = rest.replace(f"FROM STREAM <{iri}> {w}",
                            f"FROM NAMED WINDOW :w{st} ON <{iri}> {w}".replace("RANGE TRIPLES", "ITEM"))

    def wrap(m):
        st = "u" if m.group(2) == "status" else "s"
        # a pattern over a stream the query has no window on matches nothing either way
        return f"WINDOW :w{st} {{ {m.group(0)} }}" if st in wins else m.group(0)

    select, _, where = rest.partition(" WHERE ")
    return head + select + " WHERE " + _STREAM_TRIPLE.sub(wrap, where)


@pytest.mark.parametrize(("seed", "incremental", "syntax"),
                         [(1, True, "csparql"), (2, "always", "csparql"), (3, True, "rspql"), (4, "always", "rspql")])
def test_random_queries_match_the_oracle(seed, incremental, syntax):
    rng = random.Random(seed)
    static = gen_static()
    data = gen_streams(random.Random(seed * 31))
    queries = [gen_query(rng, k) for k in range(30)]
    if syntax == "rspql":
        queries = [(to_rspql(text, wins), plain, wins, opts) for text, plain, wins, opts in queries]
    db = Database(shards=2)
    db.load_data(nq(static, None).encode(), "application/n-triples")
    db.load_data(nq(STORED_NAMED, G).encode(), "application/n-quads")
    m = StreamManager(db, idle_after=10_000, incremental=incremental)
    oracle = Oracle(static, data)
    try:
        m.register_stream("s", S)
        m.register_stream("u", U)
        m.heartbeat("s", 0)
        m.heartbeat("u", 0)
        for text, *_ in queries:
            m.register_query(PFX + text)
        for name in ("s", "u"):
            rows = data[name]
            cuts = sorted(rng.sample(range(1, len(rows)), 5))
            for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True):
                body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o, tau in rows[a:b])
                assert m.ingest_ndjson(name, body)["rejected"] == 0
        m.heartbeat("s", END + 1)
        m.heartbeat("u", END + 1)
        assert m.drain(90)
        checked = nonempty = 0
        for k, (text, plain, wins, opts) in enumerate(queries):
            step = min(st for _, st, _ in wins.values())
            evs = [(e.id, orjson.loads(e.data)) for e in m.log(f"r{k}").since(None, from_t=-1)]
            assert [t for t, _ in evs] == list(range(0, END + 1, step)), text
            prev = Counter()
            for t, doc in evs:
                assert "error" not in doc, (text, doc)
                names, rows = oracle.answer(PFX + plain, wins, opts, t)
                got = [tuple(canon(norm_json(b.get(v))) for v in names) for b in doc["results"]["bindings"]]
                cur = Counter(rows)
                want = rows
                if opts["mode"] == "ISTREAM":
                    want = list((cur - prev).elements())
                elif opts["mode"] == "DSTREAM":
                    want = list((prev - cur).elements())
                prev = cur
                if opts["ordered"]:
                    assert got == want, (text, t)
                else:
                    assert Counter(got) == Counter(want), (text, t)
                checked += 1
                nonempty += bool(want)
        assert checked > 300 and nonempty > checked // 4, (checked, nonempty)
    finally:
        m.close()
