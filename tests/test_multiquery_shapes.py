"""Multi-query execution of the shapes users register one per user / sensor / area with their
constants outside triple patterns (engine/stream/multiquery.py): property tests.

Random templates put the member's constants in a triple pattern, a FILTER comparison, an IN
list, VALUES, BIND, an OPTIONAL's condition or both sides of a UNION, with or without a
threshold FILTER, a BIND over IF, with or without GROUP BY and a COUNT, in RSTREAM, ISTREAM or
DSTREAM mode. Every member's events must be exactly what it gets with batching off, and its
RSTREAM answers what pyoxigraph gives over the instant's dataset.
"""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pyoxigraph as ox
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_multiquery import EX as EX0
from tests.test_multiquery import reg, run_registered, shape

EX = "http://ex.org/sh/"
S = EX + "stream"
XSD = "http://www.w3.org/2001/XMLSchema#"
AREAS, SENSORS, KINDS = 5, 4, 3   # area4 has no sensors


def static_triples() -> list[tuple[str, str, str]]:
    out = []
    for a in range(AREAS - 1):
        for j in range(SENSORS):
            s = f"<{EX}s{a}_{j}>"
            out.append((s, f"<{EX}in>", f"<{EX}area{a}>"))
            if j < KINDS:   # the last sensor of each area has no kind (OPTIONAL leaves ?k unbound)
                out.append((s, f"<{EX}kind>", f"<{EX}kind{j}>"))
    return out


def stream(rng: random.Random, end: int) -> list[tuple[str, str, str, int]]:
    out, t, i = [], 0, 0
    while True:
        t += rng.choice((0, 30, 80, 150, 400))
        if t > end:
            return out
        o = f"<{EX}o{i}>"
        i += 1
        out.append((o, f"<{EX}by>", f"<{EX}s{rng.randrange(AREAS - 1)}_{rng.randrange(SENSORS)}>", t))
        v = f'"{rng.randint(0, 9)}"^^<{XSD}integer>' if rng.random() < 0.85 else f'"w{rng.randint(0, 2)}"'
        out.append((o, f"<{EX}val>", v, t))


# where the member's area goes ({A}, {B}: areas; {K}: a kind)
ANCHORS = {
    "bgp": "?s <{EX}in> <{EX}area{A}> .",
    "filter": "?s <{EX}in> ?a . FILTER(?a = <{EX}area{A}>)",
    "in": "?s <{EX}in> ?a . FILTER(?a IN (<{EX}area{A}>, <{EX}area{B}>))",
    "values": "VALUES ?a { <{EX}area{A}> <{EX}area{B}> } ?s <{EX}in> ?a .",
    "bind": "BIND(<{EX}area{A}> AS ?a) ?s <{EX}in> ?a .",
    "union": "{ ?s <{EX}in> <{EX}area{A}> } UNION { ?s <{EX}kind> <{EX}kind{K}> }",
}


@st.composite
def template(draw):
    anchor = draw(st.sampled_from(sorted(ANCHORS)))
    where = "?o <{EX}by> ?s . ?o <{EX}val> ?v . " + ANCHORS[anchor]
    if draw(st.booleans()):
        where += " OPTIONAL { ?s <{EX}kind> ?k FILTER(?k != <{EX}kind{K}>) }"
    if draw(st.booleans()):
        where += " FILTER(?v > {N} || ?v = \"w{W}\")"
    hot = draw(st.booleans())
    if hot:
        where += " BIND(IF(?v >= {N}, \"hot\", \"cold\") AS ?h)"
    mod = draw(st.sampled_from(["", "count"]))
    win = draw(st.sampled_from(["[RANGE 1s STEP 500ms]", "[RANGE 2s STEP 1s]"]))
    if mod == "":
        head = "SELECT ?o ?v ?s" + (" ?h" if hot else "")
        tail = ""
    else:
        agg = "COUNT(DISTINCT ?v)"
        key = draw(st.sampled_from(["?s", "?a" if anchor in ("filter", "in", "values", "bind") else "?s", ""]))
        head = f"SELECT {key} ({agg} AS ?g) (COUNT(*) AS ?n)"
        tail = f" GROUP BY {key}" if key else ""
    text = (head + " FROM STREAM <" + S + "> " + win + " FROM <urn:jindou:default> WHERE { " + where + " }"
            + tail)
    mode = draw(st.sampled_from(["", "", "ISTREAM ", "DSTREAM "]))   # I/DSTREAM: differences per member
    return mode + text.replace("{EX}", EX), mod


def fill(tmpl: str, rng: random.Random, j: int) -> str:
    a = AREAS - 1 if j == 4 else rng.randrange(AREAS - 1)   # one member without sensors
    return (tmpl.replace("{A}", str(a)).replace("{B}", str(rng.randrange(AREAS)))
            .replace("{K}", str(rng.randrange(KINDS))).replace("{N}", str(rng.randint(0, 9)))
            .replace("{W}", str(rng.randint(0, 2))))


def run(static, data, end, texts, batching: bool):
    def read(m):
        logs = {name: [(e.id, e.event, _answer(e.data) if e.event == "result" else e.data)
                       for e in m.log(name).since(None, from_t=-1)] for name in texts}
        info = {name: m._scheduler.batch_info(name) for name in texts}
        return logs, info, sum(g.batches for g in m._scheduler._groups.values())

    full = {}
    for name, text in texts.items():
        mode, _, body = text.rpartition("SELECT ")
        full[name] = f"REGISTER {mode}QUERY {name} AS SELECT {body}"
    return run_registered(static, data, end, full, batching, S, read, chunk=29)


def _term(b) -> tuple:
    if b is None:
        return ("unbound",)
    return (b["type"], b["value"], b.get("datatype"), b.get("xml:lang"))


def _answer(data: bytes):
    """An answer's rows as a multiset (the order of rows is unspecified without ORDER BY), exact
    terms)."""
    doc = orjson.loads(data)
    if "results" not in doc:
        return data
    names = doc["head"]["vars"]
    rows = Counter(tuple(_term(b.get(v)) for v in names) for b in doc["results"]["bindings"])
    return tuple(names), frozenset(rows.items()), orjson.dumps(doc["window"])


def _ox(key: str):
    if key.startswith("<"):
        return ox.NamedNode(key[1:-1])
    lex, _, dt = key[1:].partition('"^^<')
    return ox.Literal(lex, datatype=ox.NamedNode(dt[:-1])) if dt else ox.Literal(lex[:-1])


def _ox_term(t) -> tuple:
    if t is None:
        return ("unbound",)
    if isinstance(t, ox.NamedNode):
        return ("uri", t.value, None, None)
    return ("literal", t.value, None if t.datatype.value == XSD + "string" else t.datatype.value, t.language)


def oracle(static, data, text: str, t: int, range_ms: int) -> tuple[list[str], list[tuple]]:
    store = ox.Store()
    store.extend([ox.Quad(_ox(s), _ox(p), _ox(o), ox.DefaultGraph()) for s, p, o in static]
                 + [ox.Quad(_ox(s), _ox(p), _ox(o), ox.DefaultGraph())
                    for s, p, o, tau in data if t - range_ms < tau <= t])
    plain = text.split(" FROM STREAM ", 1)[0] + " WHERE " + text.split(" WHERE ", 1)[1]
    sol = store.query(plain)
    names = [v.value for v in sol.variables]
    return names, [tuple(_ox_term(s[v]) for v in names) for s in sol]


def check_oracle(static, data, text, mod, names, rows: Counter, t: int) -> None:
    range_ms = 1000 if "RANGE 1s" in text else 2000
    onames, orows = oracle(static, data, text, t, range_ms)
    assert onames == list(names)
    assert rows == Counter(orows), (text, t)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(template(), min_size=2, max_size=3), st.integers(0, 10_000))
def test_batched_shapes_equal_alone_and_oracle(templates, seed):
    rng = random.Random(seed)
    static = static_triples()
    end = 4000
    data = stream(rng, end)
    texts, mods = {}, {}
    for i, (tmpl, mod) in enumerate(templates):
        for j in range(5):
            texts[f"g{i}m{j}"] = fill(tmpl, rng, j)
            mods[f"g{i}m{j}"] = mod
    got, info, batches = run(static, data, end, texts, True)
    want, _, none = run(static, data, end, texts, False)
    assert none == 0 and batches > 0
    assert all(i["batched"] for i in info.values()), info
    for name in want:
        assert got[name] == want[name], (name, texts[name])
    for name, text in list(texts.items())[::2]:
        if text.startswith(("ISTREAM", "DSTREAM")):
            continue
        for ev in got[name][1::3]:
            if ev[1] != "result" or not isinstance(ev[2], tuple):
                continue
            names, rows, _ = ev[2]
            check_oracle(static, data, text, mods[name], names, Counter(dict(rows)), ev[0])


def test_constants_outside_triple_patterns_make_one_group():
    tmpl = ["SELECT ?o %W WHERE { ?o :at ?s FILTER(?s = :s1) }",
            "SELECT ?o %W WHERE { VALUES ?s { :s1 } ?o :at ?s }",
            "SELECT ?o ?k %W WHERE { ?o :at ?s BIND(:s1 AS ?k) }",
            "SELECT ?o %W WHERE { ?o :at ?s OPTIONAL { ?s :in ?z FILTER(?z = :s1) } }",
            "SELECT ?o %W WHERE { { ?o :at :s1 } UNION { ?o :in ?z FILTER(?z != :s1) } }"]
    for body in tmpl:
        a = shape(reg(body))
        b = shape(reg(body.replace(":s1", ":s7"), name="other"))
        assert a.key == b.key and a.params != b.params, body


def test_the_table_is_joined_into_union_branches_and_anchored_right_sides():
    """Both UNION branches and an OPTIONAL that starts from a constant get the members' table
    (so their FILTER / BIND constants are parameters); a constant-free OPTIONAL does not (it
    would be the cross product of the table and the pattern): its BIND constant stays in the shape."""
    from engine.stream.multiquery import ParamTable

    def tables(node, out):
        if isinstance(node, ParamTable):
            out.append(node)
        elif hasattr(node, "__dataclass_fields__"):
            for f in node.__dataclass_fields__:
                tables(getattr(node, f), out)
        elif isinstance(node, tuple):
            for x in node:
                tables(x, out)
        return out

    s = shape(reg("SELECT ?o %W WHERE { { ?o :at :s1 FILTER(?o != :x) } UNION { ?o :in :z1 } }"))
    found = tables(s.batched.pattern, [])
    assert len(found) == 2 and all(len(t.vars) == 1 + len(s.params) for t in found)
    assert len(s.params) == 3
    anchored = shape(reg("SELECT ?o ?k %W WHERE { ?o :at ?s OPTIONAL { ?s :in :z1 BIND(:x AS ?k) } }"))
    assert len(anchored.params) == 2 and len(tables(anchored.batched.pattern, [])) == 2
    free = shape(reg("SELECT ?o ?k %W WHERE { ?o :at :s1 OPTIONAL { ?o :in ?z BIND(:x AS ?k) } }"))
    assert free.params == (f"<{EX0}s1>",) and len(tables(free.batched.pattern, [])) == 1
