"""Path alternatives and an OPTIONAL holding a BIND, rewritten into equal patterns the
small-window paths take (:mod:`engine.stream.tiny_rewrite`).

Each instant of a rewritten query on the fast paths (generated / maintained) is compared with the
ordinary path over the query *as parsed* (the rewrite switched off: the executor's own property
paths and OPTIONAL scoping) and with pyoxigraph; spies show the rewrite applied and the fast
paths taken; shapes the rewrite must leave alone are left alone and still answer right.
"""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.sparql.csparql import parse_continuous
from engine.stream import continuous, maintained, tiny_gen, tiny_rewrite
from engine.stream.transient import TransientStore
from tests.test_stream_maintained import _append
from tests.test_stream_tiny_aggs import P9, STRS, _norm, _pair, _replay_ordered, check_paths
from tests.test_stream_tiny_gen import (
    EX,
    NODES,
    PREDS,
    TERMS,
    _oracle,
    _oxigraph_zero_quotient,
    _rows,
    instants,
    static_db,
)

VALUES = TERMS + STRS[:3]
SEEN = {"gen": [0, 0], "maint": [0, 0]}
#: the hypothesis settings and the stream elements of the shape tests built on this file's
#: replay (nested OPTIONAL, OPTIONAL in UNION, marked OPTIONALs, guarded EXISTS)
SHAPE_SETTINGS = settings(max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
shape_elements = st.lists(st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(VALUES)),
                                   min_size=1, max_size=6), min_size=1, max_size=6)


def _shape_db():
    """The stored graph of the stream shape tests, every constant they draw interned."""
    d = static_db((f"<{EX}a>", *STRS))
    yield d
    d.close()


#: the module-scoped ``db`` fixture of the stream shape test files: imported under this name,
#: pytest registers it as ``db`` in each of them
shape_db = pytest.fixture(scope="module", name="db")(_shape_db)


@contextlib.contextmanager
def _no_rewrite():
    """The evaluator built over the query as parsed (the ordinary path's reference)."""
    old = continuous._tiny_rewrite
    continuous._tiny_rewrite = lambda q, mode=None: q
    try:
        yield
    finally:
        continuous._tiny_rewrite = old


def _replay(db, q: str, els: list, rng: int, maintain: bool, seen: dict = SEEN, must: bool = True) -> None:
    """``must``: the query is rewritten (else it may be left as parsed)."""
    store = TransientStore("a", slice_triples=8)
    r0 = tiny_rewrite.rewritten_total()
    on = _pair(db, q, store, rng, True, maintain)
    assert tiny_rewrite.rewritten_total() > r0 or not must, q
    with _no_rewrite():
        off = _pair(db, q, store, rng, False, False)
    taus = []
    for k, el in enumerate(els):
        tau = 1000 * (k + 1)
        _append(db, store, el, tau)
        taus += [(tau, tr) for tr in el]
    key = "maint" if maintain else "gen"
    for t, window in instants(taus, len(els), rng):
        g0, m0 = tiny_gen.taken_total(), maintained.answered_total()
        a, _ = on.run(t)
        b, _ = off.run(t)
        ra, rb = _norm(_rows(a)), _norm(_rows(b))
        assert ra == rb, (q, t)
        # (not over STR(): pyoxigraph writes a double in canonical form on load)
        if not _oxigraph_zero_quotient(db, q, window) and "STR(" not in q:
            ox_rows = _norm(_oracle(db, q, window))
            # (a pair two alternatives both connect: two solutions in Jindou -- SPARQL 1.1's
            # Union of the alternatives, 18.5 -- one in pyoxigraph, which keeps distinct pairs)
            if "|" not in q or rb == ox_rows:
                assert ra == ox_rows, (q, t)
            else:
                seen["ox_differs"] = seen.get("ox_differs", 0) + 1
        fast = (maintained.answered_total() - m0) if maintain else (tiny_gen.taken_total() - g0)
        if (on._maint if maintain else on._gen) is not None:
            seen[key][1] += 1
            seen[key][0] += fast
        for ev, r in ((on, a), (off, b)):
            ev.settle(r, t)
            ev.prepare(t + 1000)


# ---------------------------------------------------------------- path alternatives

def _link(draw) -> str:
    p = draw(st.sampled_from(PREDS))
    return "^" + p if draw(st.integers(0, 3)) == 0 else p


@st.composite
def alt_paths(draw) -> str:
    a, b, c = _link(draw), _link(draw), _link(draw)
    return draw(st.sampled_from([f"{a}|{b}", f"({a}|{b})/{c}", f"{a}/({b}|{c})", f"{a}|{a}", f"{a}|{b}|{c}",
                                 f"({a}/{b})|{c}"]))


@st.composite
def path_queries(draw) -> str:
    vars_ = ["a", "b", "c"]
    s = "?a" if draw(st.integers(0, 4)) else draw(st.sampled_from(NODES))
    o = "?" + draw(st.sampled_from(["b", "c"])) if draw(st.integers(0, 4)) else draw(st.sampled_from(TERMS[:8]))
    if not (s + o).count("?"):
        s = "?a"   # (two constant ends: left as a path, test_shapes_left_alone...)
    body = f"{s} {draw(alt_paths())} {o} ."
    if draw(st.booleans()):
        body += f" ?{draw(st.sampled_from(vars_))} {draw(st.sampled_from(PREDS))} ?{draw(st.sampled_from(vars_))} ."
    used = [v for v in vars_ if "?" + v in body]
    if not used:
        body += f" ?a {PREDS[0]} ?b ."
        used = ["a", "b"]
    if draw(st.booleans()):
        body += f" FILTER(?{draw(st.sampled_from(used))} != {draw(st.sampled_from(NODES))})"
    form = draw(st.sampled_from(["rows", "distinct", "count", "ask"]))
    if form == "count":
        g = draw(st.sampled_from(used))
        return f"SELECT ?{g} (COUNT(*) AS ?n) WHERE {{ {body} }} GROUP BY ?{g}"
    if form == "ask":
        return f"ASK WHERE {{ {body} }}"
    head = " ".join("?" + v for v in used)
    return f"SELECT {'DISTINCT ' if form == 'distinct' else ''}{head} WHERE {{ {body} }}"


elements = st.lists(st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(VALUES)),
                             min_size=1, max_size=6), min_size=1, max_size=6)

_SETTINGS = settings(max_examples=100, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@_SETTINGS
@given(q=path_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_path_alternatives_answer_like_the_parsed_query_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, False)


@_SETTINGS
@given(q=path_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_path_alternatives_answer_like_the_parsed_query_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, True)


# ---------------------------------------------------------------- an OPTIONAL holding a BIND

#: BINDs lifted as they are (an error when the OPTIONAL's own variable ?c is unbound), and ones
#: that are not errors then (lifted under IF(BOUND(?c), e, ?c))
STRICT = ["?c * 2", "STR(?c)", "CONCAT(STR(?c), STR(?b))", "?c + ?b", "IF(?c > 1, 1, 0)", "isIRI(?c)",
          "?c IN (1, ?b)", "true", "COALESCE(?c, 0)", "BOUND(?c)", "?b", "IF(BOUND(?c), 1, 2)",
          "?c > 1 || true", '"k"']


@st.composite
def opt_bind_queries(draw) -> str:
    p, q = draw(st.sampled_from(PREDS)), draw(st.sampled_from(PREDS))
    e = draw(st.sampled_from(STRICT))
    inner = f"?b {q} ?c BIND({e} AS ?z)"
    if draw(st.booleans()):   # a second BIND reading the first
        inner += " BIND(?z AS ?w)" if draw(st.booleans()) else " BIND(COALESCE(?z, 0) AS ?w)"
    if draw(st.booleans()):   # the OPTIONAL's FILTER (not over ?z)
        inner += f" FILTER(?c != {draw(st.sampled_from(NODES))})"
    head = "?a ?b ?c ?z" + (" ?w" if "?w" in inner else "")
    body = f"?a {p} ?b OPTIONAL {{ {inner} }}"
    if draw(st.booleans()):   # a second OPTIONAL after it (maybe with a BIND, maybe reading ?c)
        r = draw(st.sampled_from(PREDS))
        obj = draw(st.sampled_from(["?d", "?c"]))
        second = f"?a {r} {obj}"
        if obj == "?d" and draw(st.booleans()):
            second += " BIND(STR(?d) AS ?v)"
            head += " ?v"
        body += f" OPTIONAL {{ {second} }}"
    if draw(st.booleans()):
        body += " FILTER(!BOUND(?z) || isLiteral(?z))"
    if draw(st.booleans()):
        g = draw(st.sampled_from(["a", "b"]))
        return f"SELECT ?{g} (COUNT(?z) AS ?n) WHERE {{ {body} }} GROUP BY ?{g}"
    return f"SELECT {head} WHERE {{ {body} }}"


def _must(q: str) -> bool:
    # (a second OPTIONAL binding ?c, which the first one's BIND reads: the BIND stays below it,
    # two OPTIONALs sharing ?c are not generated, so the rewrite is not kept)
    return re.search(r"OPTIONAL \{ \?a <[^>]+> \?c \}", q) is None


@_SETTINGS
@given(q=opt_bind_queries(), els=elements, rng=st.sampled_from([3000, 1000]))
def test_generated_optional_binds_answer_like_the_parsed_query_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, False, must=_must(q))


@_SETTINGS
@given(q=opt_bind_queries(), els=elements, rng=st.sampled_from([3000, 2000]))
def test_maintained_optional_binds_answer_like_the_parsed_query_and_pyoxigraph(db, q, els, rng):
    _replay(db, q, els, rng, True, must=_must(q))


def test_the_property_tests_took_both_paths():
    """Most instants of the rewritten queries were answered by the fast paths."""
    for key in ("gen", "maint"):
        hit, n = SEEN[key]
        assert n > 0 and hit > n // 2, (key, SEEN)


# ---------------------------------------------------------------- REDUCED (the executor's: DISTINCT)

REDUCED = [f"SELECT REDUCED ?a WHERE {{ ?a {PREDS[0]} ?b }}",
           f"SELECT REDUCED ?b ?c WHERE {{ ?a {PREDS[1]} ?b . ?a {PREDS[0]} ?c }}",
           f"SELECT REDUCED ?a WHERE {{ ?a {PREDS[0]}|{PREDS[1]} ?b }}"]


@_SETTINGS
@given(k=st.integers(0, len(REDUCED) - 1), els=elements, rng=st.sampled_from([3000, 2000]),
       maintain=st.booleans())
def test_reduced_answers_like_the_parsed_query_and_pyoxigraph(db, k, els, rng, maintain):
    _replay(db, REDUCED[k], els, rng, maintain)


# ---------------------------------------------------------------- each shape takes both paths

P1 = PREDS[1]
SHAPES = [
    f"SELECT ?a ?b WHERE {{{{ ?a {{p}}|{P1} ?b }}}}",
    f"SELECT ?a (COUNT(*) AS ?n) WHERE {{{{ ?a ({{p}}|^{P1})/{P1} ?b }}}} GROUP BY ?a",
    f"SELECT ?a ?b ?z WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?a {P1} ?c BIND(?c * 2 AS ?z) }}}} }}}}",
    f"SELECT ?a ?z WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?b {P1} ?c BIND(STR(?c) AS ?z) }}}} }}}}",
    f"SELECT ?a ?f WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?a {P1} ?c BIND(true AS ?f) }}}} }}}}",
    "SELECT REDUCED ?a WHERE {{ ?a {p} ?b }}",
    f"SELECT ?a ?z ?w WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?a {P1} ?c BIND(?c * 2 AS ?z) }}}} "
    f"OPTIONAL {{{{ ?a {PREDS[2]} ?d BIND(STR(?d) AS ?w) }}}} }}}}",
]


@pytest.mark.parametrize("k", range(len(SHAPES)))
def test_each_shape_takes_the_generated_and_maintained_paths(db, k):
    check_paths(db, SHAPES[k].format(p=P9), [1, 2, 5])


# ---------------------------------------------------------------- left alone

def _parsed(q: str):
    return parse_continuous(f"REGISTER QUERY x AS {q.replace(' WHERE', f' FROM STREAM <{EX}a> [RANGE 3s STEP 1s] WHERE', 1)}").query


@pytest.mark.parametrize("q", [
    # reads a variable of the left side only (unbound inside the OPTIONAL)
    f"SELECT ?a ?z WHERE {{ ?a {PREDS[0]} ?b OPTIONAL {{ ?b {P1} ?c BIND(CONCAT(STR(?c), STR(?a)) AS ?z) }} }}",
    # the OPTIONAL's FILTER reads the BIND
    f"SELECT ?a ?z WHERE {{ ?a {PREDS[0]} ?b OPTIONAL {{ ?b {P1} ?c BIND(?c * 2 AS ?z) FILTER(?z > 2) }} }}",
    # closures read the graph's nodes
    f"SELECT ?a ?b WHERE {{ ?a {PREDS[0]}* ?b }}",
    f"SELECT ?a ?b WHERE {{ ?a ({PREDS[0]}|{P1})+ ?b }}",
    # two constant ends: the executor answers whether the path holds (one solution)
    f"SELECT ?a ?b WHERE {{ {NODES[0]} {PREDS[0]}|^{PREDS[0]} {NODES[1]} . ?a {P1} ?b }}",
])
def test_shapes_left_alone_are_not_rewritten_and_answer_right(db, q):
    """The rewrite would change these answers (or does not apply): the query is kept as parsed;
    the instants still answer like pyoxigraph."""
    parsed = _parsed(q)
    assert tiny_rewrite.rewrite(parsed) is parsed
    store = TransientStore("a", slice_triples=8)
    ev = _pair(db, q, store, 3000, True, True)
    els = [[(NODES[0], PREDS[0], NODES[1]), (NODES[1], P1, TERMS[6])], [(NODES[2], PREDS[0], NODES[3])]]
    taus = []
    for k, el in enumerate(els):
        _append(db, store, el, 1000 * (k + 1))
        taus += [(1000 * (k + 1), tr) for tr in el]
    for t, window in instants(taus, len(els), 3000):
        a, _ = ev.run(t)
        assert _norm(_rows(a)) == _norm(_oracle(db, q, window)), (q, t)
        ev.settle(a, t)
        ev.prepare(t + 1000)


def test_no_union_of_more_than_max_branches():
    """A join whose product would pass MAX_BRANCHES stays a join (of smaller unions)."""
    from engine.sparql import algebra as A
    alts = "|".join(PREDS)
    q = f"SELECT ?a ?b WHERE {{ ?a ({alts})/({alts})/({alts}) ?b }}"   # 27 branches
    node = tiny_rewrite.rewrite(_parsed(q)).pattern.input
    assert isinstance(node, A.Join)

    def branches(n) -> int:
        return branches(n.left) + branches(n.right) if isinstance(n, A.Union) else 1

    def unions(n):
        if isinstance(n, A.Union):
            yield n
        elif isinstance(n, A.Join):
            yield from unions(n.left)
            yield from unions(n.right)
    got = list(unions(node))
    assert got and all(branches(u) <= tiny_rewrite.MAX_BRANCHES for u in got)


def test_kept_only_where_the_generated_path_takes_it():
    """Given the mode, a rewrite the generated path does not take either is not kept (the
    ordinary path evaluates the query as parsed): here a UNION whose branches hold OPTIONALs
    nested two levels."""
    q = (f"SELECT * WHERE {{ ?a {PREDS[0]}|{P1} ?b OPTIONAL {{ ?b {PREDS[2]} ?c "
         f"OPTIONAL {{ ?c {P1} ?d OPTIONAL {{ ?d {P1} ?e }} }} }} }}")
    parsed = _parsed(q)
    assert tiny_rewrite.rewrite(parsed) is not parsed
    assert tiny_rewrite.rewrite(parsed, "RSTREAM") is parsed
    q = f"SELECT ?a ?b WHERE {{ ?a {PREDS[0]}|{P1} ?b }}"
    assert tiny_rewrite.rewrite(_parsed(q), "RSTREAM") is not _parsed(q)


def test_the_rewrite_is_the_union_of_the_alternatives():
    from engine.sparql import algebra as A
    got = tiny_rewrite.rewrite(_parsed(f"SELECT ?a ?b WHERE {{ ?a {PREDS[0]}|^{P1} ?b . ?b {PREDS[2]} ?c }}"))
    node = got.pattern.input
    assert isinstance(node, A.Union) and isinstance(node.left, A.BGP) and isinstance(node.right, A.BGP)
    assert len(node.left.triples) == len(node.right.triples) == 2


# ---------------------------------------------------------------- ORDER BY / LIMIT over a UNION

ORDER_SEEN = [0, 0]


@st.composite
def ordered_union_queries(draw):
    p1, p2, p3 = (draw(st.sampled_from(PREDS)) for _ in range(3))
    body = draw(st.sampled_from([f"{{ ?a {p1} ?b }} UNION {{ ?a {p2} ?b }}",
                                 f"?a {p3} ?c . {{ ?a {p1} ?b }} UNION {{ ?b {p2} ?a }}"]))
    used = [v for v in "abc" if "?" + v in body]
    mod = f" LIMIT {draw(st.integers(0, 4))}" if draw(st.booleans()) else ""
    if draw(st.booleans()):
        mod += f" OFFSET {draw(st.integers(0, 3))}"
    if draw(st.booleans()):   # top-k groups
        return f"SELECT ?a (COUNT(*) AS ?n) WHERE {{ {body} }} GROUP BY ?a ORDER BY DESC(?n) ?a{mod}"
    keys = draw(st.lists(st.sampled_from(used), min_size=1, max_size=2, unique=True))
    conds = " ".join(draw(st.sampled_from([f"?{k}", f"DESC(?{k})"])) for k in keys)
    sel = draw(st.sampled_from(["SELECT", "SELECT DISTINCT"]))
    return f"{sel} {' '.join('?' + v for v in used)} WHERE {{ {body} }} ORDER BY {conds}{mod}"


@_SETTINGS
@given(q=ordered_union_queries(), els=elements, rng=st.sampled_from([3000, 1000]), maintain=st.booleans())
def test_ordered_unions_answer_like_the_other_path_and_pyoxigraph(db, q, els, rng, maintain):
    """The UNION's rows (or groups) ordered and sliced after the branches, in the ordinary path's
    order (and pyoxigraph's where a fast path answered: no tie)."""
    _replay_ordered(db, q, els, rng, maintain, ORDER_SEEN)


def test_the_ordered_union_test_took_the_fast_paths():
    hit, n = ORDER_SEEN
    assert n > 0 and hit > n // 4, ORDER_SEEN
