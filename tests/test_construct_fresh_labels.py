"""A CONSTRUCT whose template holds blank nodes makes them per answer without a term
table (``small_answers._own_terms``: counter labels, the store's terms' fragments from the
shared tables, only the fresh ones written; ``Constructed.terms`` made only when a general
writer asks). The shapes users write -- labels in subject and object places, several
labels per solution, nested ``[ ... ]``, literal and absent constants next to them, WHERE
of 1-4 patterns -- answer the graph pyoxigraph and the general CONSTRUCT give, up to
blank-node renaming, in every graph format; the fast path is taken and makes no term
table; every label is fresh per solution and answer."""

from __future__ import annotations

import os

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import formats
from engine import small_answers as sa
from engine.database import Database
from engine.errors import MemoryBudgetExceeded
from engine.exec import serialize as ser
from engine.exec.context import LOCAL_BASE, MemoryBudget, enter_budget, leave_budget
from engine.exec.graph_writers import jsonld_fragments, rdfxml_fragments
from engine.small_answers import Constructed, small_body
from tests.test_construct_own_terms import _READ, _general_nt, _graph, _oxigraph_nt

EX = "http://ex.org/"
P = f"PREFIX : <{EX}> "


def _data() -> str:
    out = []
    for i in range(10):
        out += [f"<{EX}s{i}> <{EX}name> \"name {i}\" .", f"<{EX}s{i}> <{EX}mail> \"s{i}@ex.org\" .",
                f"<{EX}s{i}> <{EX}dept> <{EX}d{i % 3}> .", f"<{EX}d{i % 3}> <{EX}partOf> <{EX}u{i % 2}> .",
                f"<{EX}s{(i * 3) % 10}> <{EX}advisor> <{EX}s{i}> .",
                f"<{EX}s{(i * 7 + 1) % 10}> <{EX}advisor> <{EX}s{i}> .", f"<{EX}s{i}> <{EX}tag> \"t{i % 4}\"@en ."]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def db():
    d = Database(shards=2)
    d.update(P + "INSERT DATA { " + _data().replace("\n", " ") + " }")
    return d


@pytest.fixture(scope="module")
def oxi():
    s = ox.Store()
    s.load(_data().encode(), ox.RdfFormat.N_TRIPLES)
    return s


#: the kinds of texts users write: labels in subject / object, several per solution,
#: nested [ ... ], literal and absent constants, WHERE of 1-4 patterns ({c}: a subject)
SHAPES = [
    "CONSTRUCT { _:b :name ?n ; :about {c} } WHERE { {c} :name ?n }",
    "CONSTRUCT { {c} :contact [ :email ?e ; :label \"mail\" ] } WHERE { {c} :mail ?e }",
    "CONSTRUCT { _:s :who ?s ; :advisedBy _:a . _:a :label \"advisor\" ; :is {c} } WHERE { ?s :advisor {c} }",
    "CONSTRUCT { _:x :name ?n ; :dept _:d . _:d :id ?d ; :partOf ?u } "
    "WHERE { {c} :name ?n ; :dept ?d . ?d :partOf ?u }",
    "CONSTRUCT { [] :name ?n ; :mail ?e ; :tag ?t ; :dept ?d } WHERE { {c} :name ?n ; :mail ?e ; :tag ?t ; :dept ?d }",
    "CONSTRUCT { [ :of [ :of ?d ] ] :p [ :q ?n ] . ?d :seenBy _:v } WHERE { {c} :dept ?d ; :name ?n }",
    "CONSTRUCT { _:a :knows _:b . _:b :knows _:a . _:a :n ?n } WHERE { ?s :advisor {c} . ?s :name ?n }",
    "CONSTRUCT { _:r :s ?s ; :o ?o ; :lit \"x\"@en ; :num 3 } WHERE { ?s :advisor ?o . ?o :dept {c} }",
]
_CONSTS = [f":s{i}" for i in range(10)] + [":d0", ":d1", ":d2"]


def _fast(db, text):
    """The answer of a text whose shape is known (the first text of a shape compiles it)."""
    return db.query(P + text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SHAPES), st.lists(st.sampled_from(_CONSTS), min_size=2, max_size=4))
def test_shapes_answer_as_oxigraph_and_the_general_path_in_every_format(db, oxi, shape, consts):
    for c in consts:  # (the first text compiles the shape, the next ones rebind it)
        text = shape.replace("{c}", c)
        res = _fast(db, text)
        if c.startswith(":s") != (shape == SHAPES[-1]):  # (a constant with solutions: the fast path)
            assert type(res) is Constructed and res.local, text
        want = _graph(_oxigraph_nt(oxi, text))
        assert _graph(_general_nt(db, text)) == want, text
        for mt in _READ:
            body = small_body(res, mt, 1 << 30) if type(res) is Constructed else None
            if body is None:  # (an empty RDF/XML answer, or the general path's result)
                body = ser.serialize(res, mt)
            assert _graph(body, mt) == want, (text, mt)
        # the general writers read the answer's own terms from the term table made on demand
        assert _graph(ser.serialize(res, formats.NTRIPLES)) == want, text


def _labels(body: bytes) -> set[str]:
    return {t.value for q in ox.parse(body, format=ox.RdfFormat.N_TRIPLES)
            for t in (q.subject, q.object) if isinstance(t, ox.BlankNode)}


def test_the_fast_path_is_taken_without_a_term_table_and_labels_are_fresh(db):
    shape = SHAPES[6]  # two labels per solution, a variable number of solutions
    db.query(P + shape.replace("{c}", ":s0"))
    seen: set[str] = set()
    for i in range(1, 10):
        res = _fast(db, shape.replace("{c}", f":s{i}"))
        assert type(res) is Constructed and res.local, i
        n = len(db.query(P + f"SELECT ?s WHERE {{ ?s :advisor :s{i} . ?s :name ?n }}").columns[0])
        fresh = [f for f in res.local.values() if f.startswith(b"_:")]
        assert len(fresh) == 2 * n  # one blank node per label and solution (:knows, :n: absent constants)
        bodies = {mt: small_body(res, mt, 1 << 30) for mt in _READ}
        assert all(b is not None for b in bodies.values())
        assert res._terms is None  # the small writers made no term table
        labels = _labels(bodies[formats.NTRIPLES])
        assert len(labels) == 2 * n
        assert not labels & seen  # fresh across answers
        seen |= labels
        for mt, b in bodies.items():
            assert _graph(b, mt) == _graph(bodies[formats.NTRIPLES]), mt
        # the general writer's term table holds the same labels at the same ids
        assert _labels(ser.serialize(res, formats.NTRIPLES)) == labels
        assert res._terms is not None


def test_the_same_text_twice_gives_fresh_labels(db):
    text = SHAPES[0].replace("{c}", ":s3")
    db.query(P + text)
    a, b = _fast(db, text), _fast(db, text)
    la, lb = _labels(small_body(a, formats.NTRIPLES)), _labels(small_body(b, formats.NTRIPLES))
    assert len(la) == len(lb) == 1 and not la & lb


def test_own_terms_charge_the_running_budget_and_are_fresh_per_label_and_solution():
    tpl = sa.OwnTemplate([(("b", 0), ("c", 1), ("v", 0)), (("b", 1), ("k", "<http://ex.org/absent>"), ("b", 0))])
    assert tpl.labels == 2 and tpl.resolved[1][1] == ("c", LOCAL_BASE)
    budget = MemoryBudget(0)
    token = enter_budget(budget)
    try:
        own = sa._own_terms(tpl, 5)
    finally:
        leave_budget(token)
    assert [list(ids) for ids in own] == [list(range(LOCAL_BASE + 1, LOCAL_BASE + 6)),
                                          list(range(LOCAL_BASE + 6, LOCAL_BASE + 11))]
    assert list(own.keys) == list(range(LOCAL_BASE, LOCAL_BASE + 11))  # (id order: the term table's)
    assert own.keys[LOCAL_BASE] == b"<http://ex.org/absent>"
    assert len({own.keys[i] for i in range(LOCAL_BASE + 1, LOCAL_BASE + 11)}) == 10
    assert budget.held >= sum(len(b) for b in own.keys.values())
    token = enter_budget(MemoryBudget(64))
    try:
        with pytest.raises(MemoryBudgetExceeded):
            sa._own_terms(tpl, 5)
    finally:
        leave_budget(token)


_LABEL = st.from_regex(r"q[0-9a-f]{8}[0-9a-f]{1,6}n[0-9]{1,5}c[0-9]{1,2}x[0-9]{1,3}", fullmatch=True)
_IRI = st.from_regex(r"<http://ex\.org/[a-z%#/]{0,8}[a-z0-9]{1,4}>", fullmatch=True)
_LIT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8).map(
    lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"')


@settings(max_examples=200, deadline=None)
@given(st.one_of(_LABEL.map(lambda s: "_:" + s), _IRI, _LIT, _LIT.map(lambda s: s + "@en")))
def test_own_fragments_are_the_general_renderings(key):
    nt = sa._nt_bytes(key)
    assert sa._jsonld_own(nt) == jsonld_fragments(key)
    assert sa._rdfxml_own(nt) == rdfxml_fragments(key)
    assert sa._jsonld_own(nt) == jsonld_fragments(key)  # (kept: the same again)


def _child_tag(q) -> None:
    from engine.exec.evaluate import bnode_tag_bytes  # noqa: PLC0415

    q.put((os.getpid(), bnode_tag_bytes()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_process_labels_with_its_own_id():
    import multiprocessing as mp  # noqa: PLC0415

    from engine.exec.evaluate import bnode_tag_bytes  # noqa: PLC0415

    mine = bnode_tag_bytes()
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_child_tag, args=(q,))
    p.start()
    pid, tag = q.get(timeout=30)
    p.join(30)
    assert tag.startswith(mine[:11])  # (the same process seed: _:q + 8 hex)
    assert tag[11:].startswith(b"%xn" % pid) and not mine[11:].startswith(b"%xn" % pid)
    assert mine[11:].startswith(b"%xn" % os.getpid())
