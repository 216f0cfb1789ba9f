"""The graph writers' vectorized helpers (engine/exec/serialize.py) against their
per-term definitions: the namespaces Turtle/TriG prefixes are chosen from, and
the prefixes an RDF/XML answer declares."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.exec import serialize as ser
from engine.exec.result import QueryResult
from engine.exec.serialize import KeyTable

_seg = st.sampled_from(["a", "b1", "_x", "9", "12", "x-y", "c d", "é", "", "q.r", "-z"])
_sep = st.sampled_from(["/", "#", ""])


@st.composite
def iri(draw) -> str:
    base = draw(st.sampled_from(["http://e.org/", "http://www.w3.org/2001/XMLSchema#", "urn:x:", "http://a/b#c/",
                                 "http://www.w3.org/1999/02/22-rdf-syntax-ns#", "http://xmlns.com/foaf/0.1/"]))
    return base + "".join(draw(st.lists(st.tuples(_seg, _sep).map("".join), max_size=3)))


@st.composite
def key(draw) -> str:
    kind = draw(st.sampled_from(["iri", "dt", "lang", "plain", "bnode"]))
    if kind == "iri":
        return "<" + draw(iri()) + ">"
    if kind == "dt":
        return '"1"^^<' + draw(iri()) + ">"
    if kind == "lang":
        return '"x"@en'
    if kind == "plain":
        return '"<' + draw(iri()) + '>"'  # an IRI-looking string inside a literal
    return "_:b" + str(draw(st.integers(0, 9)))


def _reference_counts(keys: list[str]) -> dict[str, int]:
    iris = [k[1:-1] for k in keys if k and k[0] == "<"]
    iris += [k[k.rfind('"') + 4 : -1] for k in keys if k and k[0] == '"' and "^^<" in k[k.rfind('"') :]]
    counts: dict[str, int] = {}
    for x in iris:
        ns, local = ser._namespace(x)
        if ns and ser._PN_LOCAL.match(local):
            counts[ns] = counts.get(ns, 0) + 1
    return counts


@settings(max_examples=300, deadline=None)
@given(st.lists(key(), min_size=1, max_size=40, unique=True))
def test_namespace_counts_equal_the_per_term_count(keys):
    assert ser._namespace_counts(pa.array(keys, pa.large_string())) == _reference_counts(keys)


@settings(max_examples=100, deadline=None)
@given(st.lists(key(), min_size=3, max_size=40, unique=True), st.integers(0, 2**32 - 1))
def test_used_prefixes_from_the_terms_equal_those_from_the_body(keys, seed):
    rng = np.random.default_rng(seed)
    res = QueryResult(form="CONSTRUCT", terms=KeyTable(keys),
                      triples=rng.integers(0, len(keys), (50, 3)).astype(np.int64))
    body = ser._serialize_ntriples(res)
    assert ser._used_prefixes_of(res, {"ex": "http://e.org/"}) == ser._used_prefixes(body, {"ex": "http://e.org/"})
