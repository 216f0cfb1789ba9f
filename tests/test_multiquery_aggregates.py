"""Multi-query execution of aggregate queries (engine/stream/multiquery.py): property tests.

Random aggregate templates (COUNT / SUM / AVG / MIN / MAX, DISTINCT or not, with or without
GROUP BY, HAVING, SELECT expressions over the aggregates, DISTINCT, ORDER BY over every selected
variable with LIMIT / OFFSET) are registered many times
with random constants (an area to join, a FILTER and a HAVING threshold) over a stream of values of mixed
numeric types (integers, decimals, doubles, floats) and some non-numeric ones (SUM / AVG errors).
Every query's events must be exactly what it gets with batching off, and its answers what
pyoxigraph gives over the instant's dataset (numbers compared by datatype and value).
"""

from __future__ import annotations

import random
from collections import Counter

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.stream.multiquery import Refused
from tests.test_multiquery import canon, reg, run_registered, shape

EX = "http://ex.org/ag/"
S = EX + "stream"
XSD = "http://www.w3.org/2001/XMLSchema#"
AREAS = 5          # area4 has no sensors: its members have no solutions
SENSORS = 4
NUMERIC = {XSD + t for t in ("integer", "decimal", "double", "float")}


def static_triples() -> list[tuple[str, str, str]]:
    out = []
    for a in range(AREAS - 1):
        for j in range(SENSORS):
            out.append((f"<{EX}s{a}_{j}>", f"<{EX}in>", f"<{EX}area{a}>"))
            out.append((f"<{EX}s{a}_{j}>", f"<{EX}kind>", f"<{EX}kind{j % 2}>"))
    return out


def value(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.35:
        return f'"{rng.randint(-3, 9)}"^^<{XSD}integer>'
    if r < 0.55:
        return f'"{rng.randint(0, 99) / 10}"^^<{XSD}decimal>'
    if r < 0.8:   # doubles whose sums depend on the order of addition
        return f'"{rng.choice((0.1, 0.2, 0.3, 1e16, -1e16, 1.5, 3.3))}"^^<{XSD}double>'
    if r < 0.9:
        return f'"{rng.choice((0.5, 2.25))}"^^<{XSD}float>'
    return f'"x{rng.randint(0, 2)}"'   # not a number: SUM / AVG of its group is an error


def stream(rng: random.Random, end: int) -> list[tuple[str, str, str, int]]:
    out = []
    t, i = 0, 0
    while True:
        t += rng.choice((0, 40, 90, 130, 300))
        if t > end:
            return out
        o = f"<{EX}o{i}>"
        i += 1
        sensor = f"<{EX}s{rng.randrange(AREAS - 1)}_{rng.randrange(SENSORS)}>"
        out.append((o, f"<{EX}by>", sensor, t))
        out.append((o, f"<{EX}val>", value(rng), t))


AGGS = ["COUNT(*)", "COUNT(?v)", "COUNT(DISTINCT ?v)", "SUM(?v)", "SUM(DISTINCT ?v)", "AVG(?v)", "MIN(?v)",
        "MAX(?v)", "AVG(DISTINCT ?v)", "MAX(DISTINCT ?v)"]


@st.composite
def template(draw):
    """``(body with {A} for the area and {N} for a threshold, window)``."""
    aggs = draw(st.lists(st.sampled_from(AGGS), min_size=1, max_size=3))
    group = draw(st.sampled_from(["", "?s", "?k"]))
    having = draw(st.booleans())
    expr = draw(st.booleans())
    distinct = draw(st.booleans())
    threshold = draw(st.booleans())
    win = draw(st.sampled_from(["[RANGE 1s STEP 500ms]", "[RANGE 2s STEP 1s]", "[RANGE 500ms STEP 500ms]"]))
    cols = " ".join(f"({a} AS ?a{i})" for i, a in enumerate(aggs))
    if expr:
        cols += f" (({aggs[0]} * 2) AS ?x)"   # an error (unbound) where the aggregate is not a number
    head = f"SELECT {'DISTINCT ' if distinct else ''}{group + ' ' if group else ''}{cols}"
    where = f"?o <{EX}by> ?s . ?o <{EX}val> ?v . ?s <{EX}in> <{EX}area{{A}}> . ?s <{EX}kind> ?k"
    if threshold:
        where += " FILTER(?v > {N})"
    tail = f" GROUP BY {group}" if group else ""
    order = draw(st.sampled_from(["", "all", "all+limit"]))
    if having:
        # with GROUP BY a parameter per member; without, part of the shape (one per template)
        tail += f" HAVING (COUNT(*) > {'{H}' if group else draw(st.integers(0, 3))})"
    if order:   # over every selected variable (the order is total on the rows), most significant first
        sel = ([group] if group else []) + [f"?a{i}" for i in range(len(aggs))] + (["?x"] if expr else [])
        keys = draw(st.permutations(sel))
        tail += " ORDER BY " + " ".join(k if draw(st.booleans()) else f"DESC({k})" for k in keys)
        if order == "all+limit":
            tail += f" LIMIT {draw(st.integers(1, 3))}" + (" OFFSET 1" if draw(st.booleans()) else "")
    return head + " FROM STREAM <" + S + "> " + win + " FROM <urn:jindou:default> WHERE { " + where + " }" + tail


def run(static, data, end, texts, batching: bool):
    def read(m):
        logs = {name: [canon(e) for e in m.log(name).since(None, from_t=-1)] for name in texts}
        raw = {name: [(e.id, e.event, e.data) for e in m.log(name).since(None, from_t=-1)] for name in texts}
        info = {name: m._scheduler.batch_info(name) for name in texts}
        return logs, info, sum(g.batches for g in m._scheduler._groups.values()), raw

    full = {name: f"REGISTER QUERY {name} AS {text}" for name, text in texts.items()}
    return run_registered(static, data, end, full, batching, S, read)


def ox_term(key: str):
    if key.startswith("<"):
        return ox.NamedNode(key[1:-1])
    lex, _, dt = key[1:].partition('"^^<')
    return ox.Literal(lex, datatype=ox.NamedNode(dt[:-1])) if dt else ox.Literal(lex[:-1])


def num_norm(t: tuple) -> tuple:
    """A term as compared with pyoxigraph: numbers by datatype and value (to 9 digits: floating
    sums may be added up in another order)."""
    if t[0] == "lit" and t[2] in NUMERIC:
        v = float(t[1])
        return ("num", t[2], float(f"{v:.9g}") if abs(v) > 1e-6 else 0.0)
    return t


def oracle_rows(static, data, text: str, t: int, range_ms: int) -> Counter:
    store = ox.Store()
    quads = [ox.Quad(ox_term(s), ox_term(p), ox_term(o), ox.DefaultGraph()) for s, p, o in static]
    quads += [ox.Quad(ox_term(s), ox_term(p), ox_term(o), ox.DefaultGraph())
              for s, p, o, tau in data if t - range_ms < tau <= t]
    store.extend(quads)
    plain = text.split(" FROM STREAM ", 1)[0] + " WHERE " + text.split(" WHERE ", 1)[1]
    sol = store.query(plain)
    names = [v.value for v in sol.variables]

    def norm(term):
        if term is None:
            return ("unbound",)
        if isinstance(term, ox.NamedNode):
            return ("uri", term.value)
        return num_norm(("lit", term.value, term.datatype.value, None))

    return Counter(tuple(norm(s[v]) for v in names) for s in sol)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(template(), min_size=2, max_size=3), st.integers(0, 10_000))
def test_batched_aggregates_equal_alone_and_oracle(templates, seed):
    rng = random.Random(seed)
    static = static_triples()
    end = 4000
    data = stream(rng, end)
    texts = {}
    for i, tmpl in enumerate(templates):
        for j in range(5):
            a = AREAS - 1 if j == 4 else rng.randrange(AREAS - 1)   # one member without solutions
            texts[f"g{i}m{j}"] = tmpl.replace("{A}", str(a)).replace("{N}", str(rng.choice((0, 1, 3)))) \
                .replace("{H}", str(rng.randint(0, 3)))
    got, info, batches, got_raw = run(static, data, end, texts, True)
    want, _, none, want_raw = run(static, data, end, texts, False)
    assert none == 0 and batches > 0
    assert all(i["batched"] for i in info.values()), info
    for name in want:
        assert got[name] == want[name], (name, texts[name])
        if "ORDER BY" in texts[name]:   # the same rows in the same order
            assert got_raw[name] == want_raw[name], (name, texts[name])
    # and pyoxigraph over each instant's dataset (a few instants per query)
    for name, text in list(texts.items())[::3]:
        if "LIMIT" in text:   # which rows make the cut depends on the order of terms of different types
            continue
        range_ms = 1000 if "RANGE 1s" in text else 2000 if "RANGE 2s" in text else 500
        for ev in got[name][2::4]:
            if ev[1] != "result" or len(ev) != 5:
                continue
            rows = Counter({tuple(num_norm(x) for x in r): c for r, c in dict(ev[3]).items()})
            assert rows == oracle_rows(static, data, text, ev[0], range_ms), (text, ev[0])


def test_sample_and_group_concat_still_run_alone():
    """Alone, their value depends on the order of a group's rows, which the query's evaluation path
    decides (incremental maintenance carries the order of arrivals across instants): a batch
    cannot reproduce it."""
    for agg in ("SAMPLE(?v)", "GROUP_CONCAT(?v)"):
        body = f"SELECT ?o ({agg} AS ?n) %W WHERE {{ ?o :v ?v . ?o :at :s1 }} GROUP BY ?o"
        with pytest.raises(Refused, match="order of a group's rows"):
            shape(reg(body))


def test_float_sums_do_not_depend_on_row_order():
    """The engine's SUM / AVG over doubles adds a group's values in value order: any order of the
    rows gives the same bits (a batched query's rows come in another order than alone)."""
    import numpy as np

    from engine.exec import aggregates
    from engine.exec.evaluate import QueryContext
    from engine.sparql.algebra import Aggregate, Var

    db = Database()
    try:
        ctx = QueryContext(db.store.snapshot())
        vals = [0.1, 0.2, 0.3, 1e16, -1e16, 1.5, 3.3, 0.7] * 3
        ids = np.asarray(ctx.intern([f'"{v}"^^<{XSD}double>' for v in vals]), dtype=np.int64)
        gi = np.asarray([k % 2 for k in range(len(vals))], dtype=np.int64)
        rng = random.Random(4)
        for name in ("SUM", "AVG"):
            agg = Aggregate(name, Var("v"), False, None)
            first = aggregates.aggregate(agg, ids, gi, 2, ctx).tolist()
            for _ in range(20):
                perm = np.asarray(rng.sample(range(len(vals)), len(vals)))
                assert aggregates.aggregate(agg, ids[perm], gi[perm], 2, ctx).tolist() == first
    finally:
        db.close()
