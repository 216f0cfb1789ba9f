"""Generated instants (:mod:`engine.stream.tiny_gen`) answer like the path they replace and like
pyoxigraph.

Random windows (duplicates, triples also stored) over a small vocabulary of IRIs and numeric
literals (integers, decimals, doubles, strings), random queries of the forms the generator takes
(BGPs of 1-4 patterns with constant subjects / objects, absent constants, repeated variables,
disconnected components; numeric FILTERs with type errors and division; DISTINCT; aliases;
GROUP BY with COUNT / COUNT(DISTINCT) / HAVING; the implicit group) and some it does not: each
instant's event equals, as a multiset of rows, the event of the same evaluator with the generated
path off and pyoxigraph's answer over the window merged with the stored graph.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import orjson
import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.streams import key_json, key_ox
from engine.database import Database
from engine.sparql.csparql import parse_continuous
from engine.stream import tiny_gen
from engine.stream.continuous import BoundWindow, InstantEvaluator
from engine.stream.transient import TransientStore
from engine.stream.windows import Window

EX = "http://ex.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
STATIC = EX + "static"
LITS = [f'"{i}"^^<{XSD}integer>' for i in (0, 1, 2, 5)] + [f'"{i}.5"^^<{XSD}decimal>' for i in (0, 1)] \
    + [f'"{i}.25E0"^^<{XSD}double>' for i in (0, 3)] + ['"x"', '"0"^^<' + XSD + 'double>']
NODES = [f"<{EX}n{i}>" for i in range(5)]
PREDS = [f"<{EX}p{j}>" for j in range(3)]
TERMS = NODES + LITS
TAKEN = [0, 0]   # (generated instants seen, instants evaluated) over the property test


def static_db(extra: tuple = ()) -> Database:
    """A database holding the stored graph of these tests (``static_lines``), every term of
    their streams (and ``extra``) interned."""
    d = Database()
    lines = [f"{NODES[i]} {PREDS[j]} {TERMS[(i * 3 + j * 5) % len(TERMS)]} .\n"
             for i in range(len(NODES)) for j in range(len(PREDS)) if (i + j) % 2 == 0]
    lines += [f"{NODES[i]} {PREDS[0]} {NODES[(i + 1) % len(NODES)]} .\n" for i in range(3)]
    d.load_data("".join(lines).encode(), "application/n-triples", graph=STATIC)
    with d.store.write_lock:
        d.store.dictionary.encode(TERMS + PREDS + list(extra))
    d.static_lines = lines
    return d


@pytest.fixture(scope="module")
def db():
    d = static_db()
    yield d
    d.close()


def _term(draw, vars_, obj: bool) -> str:
    if draw(st.integers(0, 3)) > 0:
        return "?" + draw(st.sampled_from(vars_))
    if obj and draw(st.booleans()):
        return draw(st.sampled_from(LITS + [f'"9"^^<{XSD}integer>']))   # 9: absent
    return draw(st.sampled_from(NODES + [f"<{EX}absent>"]))


@st.composite
def queries(draw):
    vars_ = ["a", "b", "c", "d"]
    k = draw(st.integers(1, 4))
    body = " ".join(f"{_term(draw, vars_, False)} {draw(st.sampled_from(PREDS))} {_term(draw, vars_, True)} ."
                    for _ in range(k))
    used = [v for v in vars_ if "?" + v in body]
    if not used:
        body += f" ?a {PREDS[0]} ?b ."
        used = ["a", "b"]
    shape = draw(st.sampled_from(["plain", "distinct", "filter", "group", "having", "alias", "implicit",
                                  "optional", "compute", "bind", "ask"]))
    if shape in ("filter", "having", "group") and draw(st.booleans()) or shape == "filter":
        a, b = draw(st.sampled_from(used)), draw(st.sampled_from(used))
        op = draw(st.sampled_from(["<", ">", "=", "!=", "<=", ">="]))
        c = draw(st.sampled_from(["1", "0.5", "1.0e0", "-1", '"x"']))
        body += " FILTER(" + draw(st.sampled_from([
            f"?{a} {op} {c}", f"?{a} + ?{b} {op} {c}", f"(?{a} - ?{b}) * (?{a} - ?{b}) {op} {c}",
            f"?{a} / ?{b} {op} {c}", f"?{a} {op} {c} || ?{b} {op} 2", f"!(?{a} {op} {c}) && bound(?{b})",
            f"-?{a} {op} ?{b} * 2.0e0", f"?{a} * 0.5e0 {op} {c}"])) + ")"
    proj = " ".join("?" + v for v in used)
    if shape == "distinct":
        return f"SELECT DISTINCT {draw(st.sampled_from(used))} WHERE {{ {body} }}".replace("DISTINCT ", "DISTINCT ?")
    if shape == "ask":
        return f"ASK WHERE {{ {body} }}"
    if shape in ("compute", "bind"):   # computed numbers: ints, doubles, errors (unbound), decimals
        a, b = draw(st.sampled_from(used)), draw(st.sampled_from(used))
        e = draw(st.sampled_from([f"(?{a} + ?{b}) / 2.0e0", f"?{a} * 2 - ?{b}", f"-?{a} + 1.5", f"?{a} / ?{b}",
                                  f"?{a} * 0.5e0", f"?{a} + 1"]))
        if shape == "bind":
            return f"SELECT {proj} ?z WHERE {{ {body} BIND({e} AS ?z) }}"
        return f"SELECT {proj} ({e} AS ?z) WHERE {{ {body} }}"
    if shape == "alias":
        v = draw(st.sampled_from(used))
        return f"SELECT (?{v} AS ?z) {proj} WHERE {{ {body} }}"
    if shape in ("group", "having"):
        g = draw(st.sampled_from(used))
        c = draw(st.sampled_from(used))
        agg = draw(st.sampled_from(["COUNT(*)", f"COUNT(?{c})", f"COUNT(DISTINCT ?{c})"]))
        hop = draw(st.sampled_from(["<", ">", "=", "!=", "<=", ">="]))
        hc = draw(st.sampled_from(["1", "2", "1.5", "2.0e0", "3"]))
        having = draw(st.sampled_from([f" HAVING ({agg} {hop} {hc})", f" HAVING (!({agg} {hop} {hc}) || {agg} = 1)",
                                       f" HAVING ({agg} + 1 > {hc})"])) if shape == "having" else ""
        return f"SELECT ?{g} ({agg} AS ?n) WHERE {{ {body} }} GROUP BY ?{g}{having}"
    if shape == "implicit":
        return f"SELECT (COUNT(*) AS ?n) WHERE {{ {body} }}"
    if shape == "optional":   # one or two OPTIONAL groups over the required part, FILTERs in and over them
        a, b = draw(st.sampled_from(used)), draw(st.sampled_from(used))
        opt = f" OPTIONAL {{ ?{a} {draw(st.sampled_from(PREDS))} ?e "
        opt += draw(st.sampled_from(["", f". ?e {PREDS[0]} ?f ", f"FILTER(?e > {draw(st.sampled_from(['0', '1.5', '1.0e0']))}) ",
                                     f"FILTER(?e != ?{b}) "])) + "}"
        if draw(st.booleans()):
            opt += f" OPTIONAL {{ ?{b} {draw(st.sampled_from(PREDS))} ?g }}"
        if draw(st.booleans()):
            opt += draw(st.sampled_from([" FILTER(!bound(?e))", " FILTER(?e > 0 || ?" + a + " = 1)", " FILTER(bound(?e))"]))
        sel = draw(st.sampled_from(["*", "DISTINCT *"]))
        return f"SELECT {sel} WHERE {{ {body}{opt} }}"
    return f"SELECT {proj} WHERE {{ {body} }}"


def _evaluator(db, text: str, store, generated: bool, rng: int = 3000) -> InstantEvaluator:
    cq = parse_continuous(text)
    bw = BoundWindow("a", EX + "a", int(db.store.dictionary.lookup(f"<{EX}a>")), Window.time(rng, 1000), store)
    old = InstantEvaluator.GENERATED
    InstantEvaluator.GENERATED = generated
    try:
        return InstantEvaluator(db, cq.query, cq.mode if hasattr(cq, "mode") else "RSTREAM", [bw])
    finally:
        InstantEvaluator.GENERATED = old


def _rows(data: bytes) -> Counter | bool:
    doc = orjson.loads(data)
    assert "error" not in doc, doc
    if "boolean" in doc:
        return doc["boolean"]
    vs = doc["head"]["vars"]
    return Counter(tuple(sorted((v, key_json(b.get(v))) for v in vs)) for b in doc["results"]["bindings"])


def _oracle(db, q: str, window: set) -> Counter | bool:
    st_ = ox.Store()
    nt = "".join(db.static_lines) + "".join(f"{s} {p} {o} .\n" for s, p, o in window)
    st_.load(nt.encode(), ox.RdfFormat.N_TRIPLES)
    res = st_.query(q)
    if isinstance(res, ox.QueryBoolean):
        return bool(res)
    vs = [v.value for v in res.variables]
    return Counter(tuple(sorted((v, key_ox(sol[v]) if sol[v] is not None else ("unbound",)) for v in vs))
                   for sol in res)


def _oxigraph_zero_quotient(db, q: str, window: set) -> bool:
    """Whether pyoxigraph's known wrong answer may be asked: ``0 / 0.5`` is 0, but pyoxigraph
    0.5 leaves ``0 / 0.5`` (a zero over a decimal with a fraction) unbound, an error. Then only
    the comparison with the other path holds (it is exact either way)."""
    if " / " not in q:
        return False
    data = "".join(db.static_lines) + " ".join(o for _, _, o in window)
    return ('"0"^^' in data) and any(f'"{i}.5"^^<{XSD}decimal>' in data for i in (0, 1))


def pattern_end(draw, vars_: list, weight: int = 5) -> str:
    """A pattern's subject or object: a node (or one the data lacks), a literal, or (``weight``
    times as likely) one of ``vars_``."""
    k = draw(st.integers(0, 1 + weight))
    if k == 0:
        return draw(st.sampled_from(NODES + [f"<{EX}absent>"]))
    if k == 1:
        return draw(st.sampled_from(LITS))
    return "?" + draw(st.sampled_from(vars_))


def fill(db, store, els: list) -> list:
    """Element ``k`` of ``els`` (triples of N-Triples terms) appended to ``store`` at second
    ``k + 1``; the (time, triple) pairs, for :func:`instants`."""
    d = db.store.dictionary
    taus = []
    for k, el in enumerate(els):
        if el:
            ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
            store.append_rows(ids, np.full(len(ids), 1000 * (k + 1)))
            taus += [(1000 * (k + 1), tr) for tr in el]
    return taus


def instants(taus: list, n: int, rng: int):
    """(t, the window's triples) of each instant, a second apart, up to a second past the ``n``
    elements of ``taus`` (:func:`fill`), for a window of ``rng`` ms."""
    for t in range(1000, 1000 * (n + 2), 1000):
        yield t, {tr for tau, tr in taus if t - rng < tau <= t}


def compare_instants(db, q: str, on, off, els: list, store, rng: int) -> int:
    """``els`` appended to ``store`` (:func:`fill`); at every instant ``on`` (fast paths) and
    ``off`` answer the same rows, and pyoxigraph's where its answer holds; the instants run."""
    taus = fill(db, store, els)
    n = 0
    for t, window in instants(taus, len(els), rng):
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b), (q, t)
        if not _oxigraph_zero_quotient(db, q, window):
            assert _rows(a) == _oracle(db, q, window), (q, t)
        n += 1
    return n


elements = st.lists(st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(TERMS)),
                             max_size=6), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(q=queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_instants_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng):
    """Sliding (RANGE 3s STEP 1s: the matches kept across instants) and tumbling windows."""
    text = f"REGISTER QUERY g AS {q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {rng // 1000}s STEP 1s] WHERE', 1)}"
    store = TransientStore("a", slice_triples=16)
    on = _evaluator(db, text, store, True, rng)
    off = _evaluator(db, text, store, False, rng)
    assert off._gen is None
    before = tiny_gen.taken_total()
    TAKEN[1] += compare_instants(db, q, on, off, els, store, rng)
    TAKEN[0] += tiny_gen.taken_total() - before


def test_the_property_test_took_the_generated_path():
    """Most generated-shape instants of the property test were answered by generated code."""
    assert TAKEN[1] > 0 and TAKEN[0] > TAKEN[1] // 4, TAKEN


def test_generated_path_is_taken_for_a_citybench_shape(db):
    """A CityBench-like query (two components joined by a static pattern, a numeric FILTER):
    the generator takes it, its instants are answered there, and they equal the other path's."""
    q = (f"REGISTER QUERY c AS SELECT ?o1 ?v1 ?v2 FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE 3s STEP 1s] "
         f"WHERE {{ ?o1 {PREDS[1]} ?v1 . ?o1 {PREDS[2]} {NODES[1]} . ?o2 {PREDS[1]} ?v2 . "
         f"?o2 {PREDS[2]} {NODES[2]} . FILTER(?v1 < 2 || ?v2 > 0.5) }}")
    store = TransientStore("a", slice_triples=16)
    on = _evaluator(db, q, store, True)
    off = _evaluator(db, q, store, False)
    assert on._gen is not None and off._gen is None
    d = db.store.dictionary
    els = [[(NODES[3], PREDS[1], LITS[1]), (NODES[3], PREDS[2], NODES[1]),
            (NODES[4], PREDS[1], LITS[6]), (NODES[4], PREDS[2], NODES[2])],
           [(NODES[0], PREDS[1], LITS[3]), (NODES[0], PREDS[2], NODES[2])]]
    for k, el in enumerate(els):
        ids = np.array([[int(d.lookup(x)) for x in tr] for tr in el], dtype=np.int64)
        store.append_rows(ids, np.full(len(ids), 1000 * (k + 1)))
    before = tiny_gen.taken_total()
    for t in (1000, 2000, 3000):
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b)
        assert len(_rows(a)) > 0
    assert tiny_gen.taken_total() - before == 3


def test_shapes_not_generated():
    """Forms outside the generator's (dependent OPTIONALs, groups keyed by an OPTIONAL's variable, DISTINCT computed
    projections not decided over terms (tiny_terms; RAND), ORDER BY, other aggregates, other modes)."""
    for q in ("SELECT * WHERE { ?a <http://ex.org/p0> ?b OPTIONAL { ?b <http://ex.org/p1> ?c } "
              "OPTIONAL { ?a <http://ex.org/p1> ?c } }",   # two OPTIONALs sharing their own ?c
              "SELECT ?c (COUNT(?a) AS ?n) WHERE { ?a <http://ex.org/p0> ?b OPTIONAL { ?b <http://ex.org/p1> ?c } } "
              "GROUP BY ?c",   # (grouped by an OPTIONAL's variable)
              "SELECT DISTINCT ((RAND() + ?b) AS ?z) WHERE { ?a <http://ex.org/p0> ?b }",
              "SELECT ?a WHERE { ?a <http://ex.org/p0> ?b } ORDER BY ?b",   # (not projected: tiny_order)
              "SELECT ?a (COUNT(?b * RAND()) AS ?s) WHERE { ?a <http://ex.org/p0> ?b } GROUP BY ?a"):
        cq = parse_continuous(f"REGISTER QUERY x AS {q.replace(' WHERE', ' FROM STREAM <http://ex.org/a> [RANGE 3s STEP 1s] WHERE', 1)}")
        assert tiny_gen.GenQuery.of(cq.query, "RSTREAM") is None, q
    cq = parse_continuous("REGISTER QUERY x AS SELECT ?a FROM STREAM <http://ex.org/a> [RANGE 3s STEP 1s] "
                          "WHERE { ?a <http://ex.org/p0> ?b }")
    assert tiny_gen.GenQuery.of(cq.query, "ISTREAM") is not None   # (differenced as the executor's rows)
    assert tiny_gen.GenQuery.of(cq.query, "RSTREAM") is not None


def test_optional_shapes_are_generated():
    """OPTIONAL groups that join the required part only (with FILTERs in and over them) are
    generated (their answers: the property test)."""
    for q in ("SELECT * WHERE { ?a <http://ex.org/p0> ?b OPTIONAL { ?a <http://ex.org/p1> ?e FILTER(?e > 1) } "
              "FILTER(!bound(?e)) }",
              "SELECT DISTINCT * WHERE { ?a <http://ex.org/p0> ?b OPTIONAL { ?a <http://ex.org/p1> ?e . "
              "?e <http://ex.org/p0> ?f } OPTIONAL { ?b <http://ex.org/p1> ?g } }"):
        cq = parse_continuous(f"REGISTER QUERY x AS {q.replace(' WHERE', ' FROM STREAM <http://ex.org/a> [RANGE 3s STEP 1s] WHERE', 1)}")
        assert tiny_gen.GenQuery.of(cq.query, "RSTREAM") is not None, q
