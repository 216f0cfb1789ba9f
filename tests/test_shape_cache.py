"""Plans cached by query shape: a new text of a known shape (another constant in
the same BGP) reuses the shape's compiled program with the constant swapped,
and answers exactly what a fresh compile and pyoxigraph answer."""

from __future__ import annotations

import pytest

from bench import lubm
from engine.database import Database, _fast_shape_key

pyoxigraph = pytest.importorskip("pyoxigraph")

UB = "PREFIX ub: <http://swat.cse.lehigh.edu/onto/univ-bench.owl#>\n"


def _dept(d: int) -> str:
    return f"http://www.Department{d}.University0.edu"


TEMPLATES = (
    "SELECT ?n ?e ?t ?w WHERE {{ <{c}> ub:name ?n ; ub:emailAddress ?e ; ub:telephone ?t ; ub:worksFor ?w }}",
    "SELECT ?c ?t WHERE {{ <{c}> ub:takesCourse ?c . ?t ub:teacherOf ?c }}",
    "SELECT ?p ?d ?u WHERE {{ <{c}> ub:advisor ?p . ?p ub:worksFor ?d . ?d ub:subOrganizationOf ?u }}",
    "SELECT ?s WHERE {{ ?s ub:advisor <{c}> }}",
    "SELECT DISTINCT ?s WHERE {{ ?s ub:advisor <{c}> . ?s a ub:GraduateStudent }} LIMIT 500",
    "ASK {{ <{c}> ub:worksFor ?d }}",
    # CONSTRUCT of one entity (the constant in the template too)
    "CONSTRUCT {{ <{c}> ub:name ?n ; ub:memberOf ?d . ?d ub:name ?dn }} WHERE {{ <{c}> ub:name ?n ; "
    "ub:worksFor ?d . ?d ub:name ?dn }}",
    "CONSTRUCT {{ ?s ub:advisor <{c}> ; ub:takesCourse ?k }} WHERE {{ ?s ub:advisor <{c}> ; ub:takesCourse ?k }}",
    "SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY DESC(?n)",
    # point lookups (a variable predicate): engine/plan/point.py
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}",
    "SELECT ?s ?p WHERE {{ ?s ?p <{c}> }}",
    "SELECT DISTINCT ?p WHERE {{ <{c}> ?p ?o }} LIMIT 5000",
    "SELECT ?o WHERE {{ <{c}> ?p ?o }} OFFSET 0 LIMIT 5000",
)
ENTITIES = [f"{_dept(d)}/{k}{i}" for d in range(2) for k in ("FullProfessor", "GraduateStudent") for i in range(4)]
ENTITIES += ["http://www.Department0.University0.edu/NoSuchEntity",
             # many triples on one vertex: the point program hands over to the vectorized step
             "http://swat.cse.lehigh.edu/onto/univ-bench.owl#GraduateStudent", "http://www.Department0.University0.edu"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    path = tmp_path_factory.mktemp("lubm") / "d.nt"
    lubm.generate(path, triples=6000, seed=3)
    db = Database()
    db.load_file(str(path))
    ox = pyoxigraph.Store()
    ox.bulk_load(path=str(path), format=pyoxigraph.RdfFormat.N_TRIPLES)
    return db, ox


def _rows(db, text):
    res = db.query(text)
    if res.form == "ASK":
        return res.boolean
    if res.is_graph:
        return sorted(tuple(res.terms.keys(t)) for t in res.triples)
    return sorted(tuple(r.get(v) for v in res.vars) for r in res.rows())


def _ox_rows(ox, text):
    r = ox.query(text)
    if text.lstrip().split("\n")[-1].startswith("CONSTRUCT"):
        return sorted((str(t.subject), str(t.predicate), str(t.object)) for t in r)
    if not hasattr(r, "variables"):  # an ASK answer
        return bool(r)
    names = [v.value for v in r.variables]
    return sorted(tuple(None if s[n] is None else str(s[n]) for n in names) for s in r)



@pytest.mark.parametrize("tpl", TEMPLATES)
def test_rebound_programs_answer_like_fresh_compiles_and_pyoxigraph(stores, tpl):
    db, ox = stores
    rebound = 0
    for i, c in enumerate(ENTITIES):
        text = UB + tpl.format(c=c) + f"\n# run {i}\n"
        before = len(db._shapes)
        got = _rows(db, text)
        pq = db._prepared.get((text, None))
        if pq is None:  # answered from the shape's template without a parse
            rebound += 1
        elif db._prepared_shape[(text, None)] is not None and before and pq.state[2] is not None:
            rebound += 1
        # a fresh parse and compile of the same text (no template or shape program to reuse)
        templates, db._templates = db._templates, {}
        db._shapes = {}
        if pq is not None:
            pq.state = None
        assert _rows(db, text) == got, c
        db._templates = templates
        want = _ox_rows(ox, UB + tpl.format(c=c))
        assert got == want, c
    assert rebound > 0  # the shape cache was used


def test_shape_keys(stores):
    db, _ = stores
    k1 = db.shape_key(UB + "SELECT ?s WHERE { ?s ub:advisor <http://a/1> }")
    k2 = db.shape_key(UB + "# another text\nSELECT ?s WHERE { ?s ub:advisor <http://a/2> }")
    assert k1 is not None and k1 == k2
    # the class of a type pattern is part of the shape
    ka = db.shape_key(UB + "SELECT ?s WHERE { ?s ub:advisor <http://a/1> . ?s a ub:GraduateStudent }")
    kb = db.shape_key(UB + "SELECT ?s WHERE { ?s ub:advisor <http://a/1> . ?s a ub:UndergraduateStudent }")
    assert ka != kb
    # two different constants of constant predicates (their fan-outs order the steps): no shape
    assert db.shape_key(UB + "SELECT ?s WHERE { ?s ub:advisor <http://a/1> ; ub:memberOf <http://d/1> }") is None
    # a point lookup (variable predicate, one pattern) has a shape, so do variable-predicate steps
    # (wave 2i: their order reads no constant's fan-out), of one constant or several
    assert db.shape_key("SELECT ?p ?o WHERE { <http://a/1> ?p ?o }") == db.shape_key(
        "SELECT ?p ?o WHERE { <http://a/2> ?p ?o }")
    assert db.shape_key("SELECT * WHERE { <http://a/1> ?p ?o . ?o ?q ?x }") == db.shape_key(
        "SELECT * WHERE { <http://a/2> ?p ?o . ?o ?q ?x }") is not None
    assert db.shape_key("SELECT * WHERE { <http://a/1> ?p ?o . ?o ?q <http://a/3> }") == db.shape_key(
        "SELECT * WHERE { <http://a/2> ?p ?o . ?o ?q <http://a/4> }") is not None
    # the constant used as a predicate too: never rebound
    pq = db._prepare("SELECT ?s WHERE { ?s <http://p> <http://p> }", None)
    assert _fast_shape_key(pq) is None


def test_a_commit_drops_shape_programs():
    db = Database()
    db.update("INSERT DATA { <http://x/a> <http://x/p> <http://x/b> . <http://x/c> <http://x/p> <http://x/d> }")
    q = "SELECT ?o WHERE {{ <{}> <http://x/p> ?o }}"
    assert db.query(q.format("http://x/a")).rows() == [{"o": "<http://x/b>"}]
    assert len(db._shapes) == 1
    db.update("INSERT DATA { <http://x/c> <http://x/p> <http://x/e> }")
    assert sorted(r["o"] for r in db.query(q.format("http://x/c")).rows()) == ["<http://x/d>", "<http://x/e>"]
    assert all(v[0] is db.store.snapshot() for v in db._shapes.values())


ORDERED = (
    "SELECT ?s ?n WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY ?n",
    "SELECT ?s WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n }} ORDER BY DESC(?n) LIMIT 3",
    "SELECT DISTINCT ?k WHERE {{ ?s ub:advisor <{c}> ; ub:takesCourse ?k }} ORDER BY DESC(?k) OFFSET 1 LIMIT 4",
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }} ORDER BY ?o ?p",
    "SELECT ?s ?p WHERE {{ ?s ?p <{c}> }} ORDER BY DESC(?s) LIMIT 600",
)


@pytest.mark.parametrize("tpl", ORDERED)
def test_order_by_over_a_fast_bgp_answers_like_the_general_evaluator(stores, tpl):
    """ORDER BY plain variables over a fast BGP (its solutions tuple at a time, the
    operators above general): the same rows in the same order, rebound texts too."""
    db, _ = stores
    for i, c in enumerate(ENTITIES):
        text = UB + tpl.format(c=c) + f"# {i}\n"
        res = db.query(text)
        pq = db._prepare(text, None)
        assert pq.fast is not None and pq.fast.order
        fast, pq.fast, pq.state = pq.fast, None, None
        try:
            ref = db.query(text)
        finally:
            pq.fast = fast
        assert res.rows() == ref.rows(), c


POINTS = (
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}",
    "SELECT ?s ?p WHERE {{ ?s ?p <{c}> }}",
    "SELECT DISTINCT ?p WHERE {{ <{c}> ?p ?o }} LIMIT 3",
    "SELECT ?o WHERE {{ <{c}> ?p ?o }} OFFSET 2 LIMIT 4",
    "SELECT * WHERE {{ ?s ?p <{c}> }} LIMIT 700",
    "ASK {{ ?s ?p <{c}> }}",
    "ASK {{ <{c}> ?p <http://www.Department0.University0.edu> }}",
    "SELECT ?p WHERE {{ <{c}> ?p <http://www.Department0.University0.edu> }}",
)


@pytest.mark.parametrize("tpl", POINTS)
def test_point_programs_answer_in_the_general_evaluators_order(stores, tpl):
    """The point program's rows, their order (LIMIT/OFFSET without ORDER BY cut the
    same rows) and the hand-over past its row limit equal the general evaluator's."""
    db, _ = stores
    for c in ENTITIES:
        text = UB + tpl.format(c=c)
        res = db.query(text)
        pq = db._prepare(text, None)
        assert pq.fast is not None and pq.fast.point
        fast, pq.fast, pq.state = pq.fast, None, None
        try:
            ref = db.query(text)
        finally:
            pq.fast = fast
        if res.form == "ASK":
            assert res.boolean == ref.boolean, c
        else:
            assert res.rows() == ref.rows(), c


CONSTRUCTS = (
    "CONSTRUCT {{ <{c}> ?q ?n . ?n ub:name <{c}> . ?x ub:advisor ?n . <{c}> ub:advisor ?n }} WHERE {{ <{c}> ub:name ?n }}",
    "CONSTRUCT {{ ?s <http://x/p> ?k . ?k <http://x/q> ?s }} WHERE {{ ?s ub:advisor <{c}> ; ub:takesCourse ?k }}",
    "CONSTRUCT WHERE {{ ?s ub:advisor <{c}> . ?s ub:takesCourse ?k }}",
    "CONSTRUCT {{ ?n ub:advisor <{c}> }} WHERE {{ <{c}> ub:name ?n }}",  # literal subjects are dropped
    "CONSTRUCT {{ ?s ub:advisor ?s }} WHERE {{ ?s a <{c}> }}",  # many solutions: the hand-over
    "CONSTRUCT {{ <{c}> ub:p <http://x/absent> }} WHERE {{ <{c}> ub:name ?n }}",  # a constant not in the store
)


@pytest.mark.parametrize("tpl", CONSTRUCTS)
def test_construct_fast_answers_in_the_general_evaluators_order(stores, tpl):
    """CONSTRUCT over a fast BGP: the same triples in the same order as the general
    CONSTRUCT (unbound template variables, literal subjects, the hand-over)."""
    db, _ = stores
    for c in ENTITIES:
        text = UB + tpl.format(c=c)
        res = db.query(text)
        pq = db._prepare(text, None)
        fast, pq.fast, pq.state = pq.fast, None, None
        try:
            ref = db.query(text)
        finally:
            pq.fast = fast
        assert [tuple(res.terms.keys(t)) for t in res.triples] == [tuple(ref.terms.keys(t)) for t in ref.triples], c
