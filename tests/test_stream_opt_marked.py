"""An OPTIONAL that binds no variable of its own holding a BIND (``OPTIONAL { :me foaf:knows ?u
BIND(true AS ?friend) }``), rewritten with a renamed variable that marks whether it matched
(:func:`engine.stream.tiny_rewrite._marked`).

Random queries and streams: every instant of the rewritten query on the generated / maintained
paths equal to the ordinary path over the query as parsed and to pyoxigraph; spies show the
rewrite applied and the fast paths taken.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.sparql import algebra as A
from engine.stream import tiny_rewrite
from engine.stream.tiny_gen import GenQuery
from tests.test_stream_tiny_aggs import P9, check_paths
from tests.test_stream_tiny_gen import NODES, PREDS
from tests.test_stream_tiny_rewrite import (
    SHAPE_SETTINGS,
    _parsed,
    shape_db,  # noqa: F401 -- (the module's db fixture)
    shape_elements,
)
from tests.test_stream_tiny_rewrite import _replay as replay_rewritten

SEEN = {"gen": [0, 0], "maint": [0, 0]}
P0, P1, P2 = PREDS
_SETTINGS = SHAPE_SETTINGS
elements = shape_elements


@st.composite
def marked_queries(draw) -> str:
    q, r = draw(st.sampled_from(PREDS)), draw(st.sampled_from(PREDS))
    n = draw(st.sampled_from(NODES))
    left = draw(st.sampled_from([f"?a {P0} ?b", f"?a {P0} ?b . ?b {P1} ?c"]))
    inner = draw(st.sampled_from([f"?b {q} {n}", f"{n} {q} ?b", f"?a {q} ?b", f"?b {q} ?a . ?a {r} {n}"]))
    e = draw(st.sampled_from(["?b", "true", "?a", "COALESCE(?a, 1)", "IF(isIRI(?b), 1, 2)", "BOUND(?b)"]))
    # (a BIND reading ?a where the OPTIONAL does not bind it: unbound inside, not lifted)
    must = "?a" not in e or "?a" in inner
    inner += f" BIND({e} AS ?z)"
    if draw(st.booleans()):
        inner += f" FILTER(?b != {draw(st.sampled_from(NODES))})"
    body = f"{left} OPTIONAL {{ {inner} }}"
    if draw(st.integers(0, 3)) == 0:
        return f"SELECT ?a (COUNT(?z) AS ?k) WHERE {{ {body} }} GROUP BY ?a", must
    return f"SELECT ?a ?b ?z WHERE {{ {body} }}", must


@_SETTINGS
@given(q=marked_queries(), els=elements, rng=st.sampled_from([3000, 1000]), maintain=st.booleans())
def test_an_optional_without_own_variables_answers_like_the_parsed_query_and_pyoxigraph(db, q, els, rng, maintain):
    text, must = q
    replay_rewritten(db, text, els, rng, maintain, SEEN, must=must)


def test_the_property_test_took_both_paths():
    for key in ("gen", "maint"):
        hit, n = SEEN[key]
        assert n > 0 and hit > n // 2, (key, SEEN)


@pytest.mark.parametrize("q", [
    f"SELECT ?a ?f WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ ?b {P1} {NODES[1]} BIND(true AS ?f) }}}} }}}}",
    f"SELECT ?a ?f WHERE {{{{ ?a {{p}} ?b OPTIONAL {{{{ {NODES[0]} {P1} ?a BIND(?a AS ?f) }}}} }}}}",
])
def test_each_shape_takes_the_generated_and_maintained_paths(db, q):
    check_paths(db, q.format(p=P9), [1, 2, 5])


def test_the_rewrite_renames_inside_the_optional_only():
    q = _parsed(f"SELECT ?a ?f WHERE {{ ?a {P0} ?b OPTIONAL {{ {NODES[0]} {P1} ?b BIND(?b AS ?f) }} }}")
    out = tiny_rewrite.rewrite(q)
    ext = out.pattern.input
    assert isinstance(ext, A.Extend) and isinstance(ext.input, A.LeftJoin)
    lj = ext.input
    (tp,) = lj.right.triples
    assert tp.o.name.startswith("_:") and lj.left == q.pattern.input.left
    assert lj.expr == A.Call("SAMETERM", (tp.o, A.Var("b")))
    assert ext.expr == tp.o   # (strict in the marker: lifted as it is)


def test_the_probe_shapes_are_taken():
    from bench.shape_probe import _P
    from bench.shape_probe import SHAPES as PROBE
    from engine.sparql.csparql import parse_continuous
    for name in ("opt-static-friend", "opt-no-own-flag"):
        q = parse_continuous("REGISTER QUERY x AS " + _P + PROBE[name]).query
        r = tiny_rewrite.rewrite(q, "RSTREAM")
        assert r is not q and GenQuery.of(r, "RSTREAM") is not None, name
