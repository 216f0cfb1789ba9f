"""The tuple-at-a-time path of small windows (:mod:`engine.stream.tiny`) answers like the
vectorized executor and like pyoxigraph.

Random windows (duplicates included) over a small vocabulary and random queries of the forms
the path takes (BGPs with constants, absent constants, repeated variables, joined groups,
FILTERs with type errors and ``!bound``, GROUP BY / COUNT / HAVING, DISTINCT, ORDER BY, ASK)
and of forms it must hand back (OPTIONAL, UNION): the solutions equal, as multisets, those of
the executor over the window's index and those of pyoxigraph over the same triples.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query
from engine.kv.views import EmptyGraph
from engine.sparql.parser import parse_query
from engine.stream.tiny import TinyCore, TinyEvaluator, TinyFallback
from engine.stream.window_graph import window_index

EX = "http://ex.org/"
N_NODES, N_PREDS = 6, 3
INT = "<http://www.w3.org/2001/XMLSchema#integer>"
TAKEN: list[str] = []   # queries the tiny path answered (the property test must exercise it)


@pytest.fixture(scope="module")
def db():
    d = Database()
    lines = [f"<{EX}n{i}> <{EX}p{j}> \"{i * j}\"^^{INT} .\n" for i in range(N_NODES) for j in range(N_PREDS)]
    lines += [f"<{EX}n{i}> <{EX}label> \"n{i}\"@en .\n" for i in range(N_NODES)]
    d.load_data("".join(lines).encode(), "application/n-triples")
    yield d
    d.close()


def _vocab(db):
    dic = db.store.dictionary
    nodes = [int(dic.lookup(f"<{EX}n{i}>")) for i in range(N_NODES)]
    preds = [int(dic.lookup(f"<{EX}p{j}>")) for j in range(N_PREDS)]
    lits = [int(dic.lookup(f'"{v}"^^{INT}')) for v in (0, 1, 2, 4)]
    assert min(nodes + preds + lits) >= 0
    return nodes, preds, lits


def _term(draw, kind: str, vars_: list[str]) -> str:
    if draw(st.integers(0, 2)) > 0:
        return "?" + draw(st.sampled_from(vars_))
    if kind == "p":
        return f"<{EX}p{draw(st.integers(0, N_PREDS))}>"   # p<N_PREDS> is absent from the store
    if kind == "o" and draw(st.booleans()):
        return f'"{draw(st.sampled_from([0, 1, 2, 4, 7]))}"^^{INT}'   # 7: absent
    return f"<{EX}n{draw(st.integers(0, N_NODES - 1))}>"


@st.composite
def queries(draw):
    vars_ = ["a", "b", "c"]

    def bgp(k):
        return " ".join(f"{_term(draw, 's', vars_)} <{EX}p{draw(st.integers(0, N_PREDS))}> "
                        f"{_term(draw, 'o', vars_)} ." for _ in range(k))

    body = bgp(draw(st.integers(1, 3)))
    shape = draw(st.sampled_from(["plain", "groups", "filter", "notbound", "optional", "union"]))
    if shape == "groups":
        body = "{ " + body + " } { " + bgp(draw(st.integers(1, 2))) + " }"
    elif shape == "filter":
        body += f" FILTER(?{draw(st.sampled_from(vars_))} {draw(st.sampled_from(['>', '<', '=', '!=']))} 1)"
    elif shape == "notbound":
        body += f" FILTER(!bound(?{draw(st.sampled_from(vars_))}))"
    elif shape == "optional":
        body += " OPTIONAL { " + bgp(1) + " }"
    elif shape == "union":
        body = "{ " + body + " } UNION { " + bgp(1) + " }"
    form = draw(st.sampled_from(["star", "distinct", "count", "ask", "order"]))
    v = draw(st.sampled_from(vars_))
    if form == "ask":
        return f"ASK {{ {body} }}"
    if form == "count":
        return (f"SELECT ?{v} (COUNT(*) AS ?n) WHERE {{ {body} }} GROUP BY ?{v} "
                f"HAVING (COUNT(*) >= {draw(st.integers(1, 2))})")
    if form == "distinct":
        return f"SELECT DISTINCT ?{v} WHERE {{ {body} }}"
    if form == "order":
        return f"SELECT * WHERE {{ {body} }} ORDER BY ?{v}"
    return f"SELECT * WHERE {{ {body} }}"


def _rows(draw, nodes, preds, lits):
    n = draw(st.integers(0, 30))
    out = [[draw(st.sampled_from(nodes)), draw(st.sampled_from(preds)), draw(st.sampled_from(nodes + lits))]
           for _ in range(n)]
    out += out[: draw(st.integers(0, 3))]   # duplicates: a window is a set
    return np.array(out, dtype=np.int64).reshape(-1, 3)


def _canon(res, ctx):
    if res.form == "ASK":
        return bool(res.boolean)
    keys = [ctx.keys(c) for c in res.columns]
    rows = [tuple(k or "" for k in r) for r in zip(*keys, strict=True)] if keys else [()] * len(res)
    return Counter(rows)


def _tiny(db, q, rows, k=0):
    """The tiny path's answer; the first ``k`` rows are the stored part (kept across instants:
    a first call over other instant rows builds its indexes, the second reuses them)."""
    core = TinyCore(q)
    if not core.usable:
        return None
    ctx = QueryContext(db.store.snapshot())
    stored = rows[:k].copy()
    core.solutions(np.concatenate([stored, rows[k:][::-1][:5]]), ctx, stored)
    sol = core.solutions(np.concatenate([stored, rows[k:]]), ctx, stored)
    assert sol is not None   # windows this small never exceed the bound
    ds = DatasetView(EmptyGraph(), {}, ("tiny",))
    try:
        res = evaluate_query(q, ctx, ds, evaluator=TinyEvaluator(ctx, ds, core.base, sol))
    except TinyFallback:
        return None
    return _canon(res, ctx)


def _vectorized(db, q, rows):
    ctx = QueryContext(db.store.snapshot())
    res = evaluate_query(q, ctx, DatasetView(window_index(rows), {}, ("t",)))
    return _canon(res, ctx)


def _oracle(db, text, rows, q):
    store = ox.Store()
    keys = db.store.dictionary.keys(rows.reshape(-1)) if len(rows) else []
    nt = "".join(f"{keys[3 * i]} {keys[3 * i + 1]} {keys[3 * i + 2]} .\n" for i in range(len(rows)))
    if nt:
        store.load(nt.encode(), ox.RdfFormat.N_TRIPLES)
    res = store.query(text)
    if isinstance(res, ox.QueryBoolean):
        return bool(res)
    names = [v.name for v in q.vars]   # our column order
    out = Counter()
    for sol in res:
        out[tuple(_ox_key(sol[n]) for n in names)] += 1
    return out


def _ox_key(term) -> str:
    if term is None:
        return ""
    if isinstance(term, ox.NamedNode):
        return f"<{term.value}>"
    if isinstance(term, ox.Literal):
        if term.language:
            return f'"{term.value}"@{term.language}'
        dt = term.datatype.value
        if dt == "http://www.w3.org/2001/XMLSchema#string":
            return f'"{term.value}"'
        return f'"{term.value}"^^<{dt}>'
    return str(term)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tiny_path_equals_executor_and_pyoxigraph(db, data):
    nodes, preds, lits = _vocab(db)
    rows = _rows(data.draw, nodes, preds, lits)
    text = data.draw(queries())
    q = parse_query(text)
    got = _tiny(db, q, rows, data.draw(st.integers(0, len(rows))))
    want = _vectorized(db, q, rows)
    if got is not None:
        TAKEN.append(text)
        assert got == want, text
    assert want == _oracle(db, text, rows, q), text


def test_tiny_path_was_exercised():
    assert len(TAKEN) >= 50


def test_tiny_takes_the_forms_it_supports():
    for text, usable in ((f"SELECT * WHERE {{ ?a <{EX}p0> ?b . ?b <{EX}p1> ?c }}", True),
                         (f"ASK {{ {{ ?a <{EX}p0> ?b }} {{ ?b <{EX}p1> ?c }} FILTER(!bound(?a)) }}", True),
                         (f"SELECT ?a (COUNT(*) AS ?n) WHERE {{ ?a <{EX}p0> ?b }} GROUP BY ?a", True),
                         ("SELECT * WHERE { ?a ?p ?b }", False),
                         (f"SELECT * WHERE {{ ?a <{EX}p0> ?b OPTIONAL {{ ?b <{EX}p1> ?c }} }}", False),
                         (f"SELECT * WHERE {{ ?a <{EX}p0> ?b }} LIMIT 3", False)):
        assert TinyCore(parse_query(text)).usable is usable, text


def test_tiny_hands_large_intermediate_results_back(db, monkeypatch):
    nodes, preds, _ = _vocab(db)
    rows = np.array([[s, preds[0], o] for s in nodes for o in nodes], dtype=np.int64)
    q = parse_query(f"SELECT * WHERE {{ ?a <{EX}p0> ?b . ?b <{EX}p0> ?c }}")
    core = TinyCore(q)
    ctx = QueryContext(db.store.snapshot())
    assert core.solutions(rows, ctx).n == N_NODES ** 3
    monkeypatch.setattr(TinyCore, "max_rows", 50)
    assert core.solutions(rows, ctx) is None


def test_a_constant_interned_later_is_found(db):
    """Stream elements intern terms without a store commit: an absent constant is looked up
    again at the next instant."""
    q = parse_query(f"SELECT * WHERE {{ ?a <{EX}p0> <{EX}later> }}")
    core = TinyCore(q)
    ctx = QueryContext(db.store.snapshot())
    assert core.solutions(np.zeros((0, 3), dtype=np.int64), ctx).n == 0
    later = int(db.store.dictionary.encode([f"<{EX}later>"])[0])
    nodes, preds, _ = _vocab(db)
    rows = np.array([[nodes[0], preds[0], later]], dtype=np.int64)
    assert core.solutions(rows, QueryContext(db.store.snapshot())).n == 1
