"""The tiny run of a template (``Database.query_template(..., lists=True)``: a program
that ends tuple at a time runs without entering the memory budget, engine/database.py
``_tiny_run``): it is taken (a spy on the budget), answers exactly as the text's
``Database.query`` does for every form (SELECT, DISTINCT/LIMIT, ORDER BY, ASK,
CONSTRUCT, DESCRIBE), still refuses past the deadline, and is not taken where the
budget could refuse what it charges (a budget smaller than a CONSTRUCT's or a
DESCRIBE's most), whose refusal stays the general path's."""

from __future__ import annotations

import random
import time

import pytest

import engine.database as dbm
from engine.database import Database
from engine.errors import JindouError, QueryTimeout
from engine.small_answers import SmallSelect
from engine.sparql import normalize as norm
from tests.test_template_lists import edges

SHAPES = [
    "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}",
    "SELECT ?o WHERE {{ <{c}> <http://e/p0> ?o }}",
    "SELECT DISTINCT ?x WHERE {{ <{c}> ?p ?y . ?y <http://e/p2> ?x }} LIMIT 3",
    "SELECT ?a ?b WHERE {{ <{c}> <http://e/p0> ?a ; <http://e/p1> ?b }}",
    "SELECT ?s ?o WHERE {{ ?s <http://e/p1> <{c}> . ?s <http://e/p0> ?o }} ORDER BY ?o",
    "ASK {{ <{c}> <http://e/p1> ?o }}",
    "CONSTRUCT {{ <{c}> <http://e/p2> ?o . ?o <http://e/p3> <{c}> }} WHERE {{ <{c}> <http://e/p0> ?o }}",
    "DESCRIBE <{c}>",
]


def _graph(seed: int) -> str:
    rnd = random.Random(seed)
    lines = edges(rnd)
    for o in range(40, 140):  # a hub: its programs hand over to the vectorized steps
        lines.append(f"<http://e/n0> <http://e/p0> <http://e/h{o}> .")
        lines.append(f"<http://e/h{o}> <http://e/p1> <http://e/n0> .")
        lines.append(f"<http://e/h{o}> <http://e/p0> <http://e/n{o % 7}> .")
    lines.append('<http://e/n1> <http://e/p0> "lit" .')
    lines.append("<http://e/n2> <http://e/p0> _:b1 .")
    lines.append("_:b1 <http://e/p3> <http://e/n5> .")
    return "\n".join(lines) + "\n"


def _rows(res):
    if type(res) is SmallSelect:
        res = res.result()
    if res.form == "ASK":
        return res.boolean
    if res.is_graph:
        return [tuple(res.terms.keys(t)) for t in res.triples]
    return res.vars, [tuple(r.get(v) for v in res.vars) for r in res.rows()]


@pytest.fixture()
def db(tmp_path):
    f = tmp_path / "g.nt"
    f.write_text(_graph(7))
    out = Database()
    out.load_file(str(f))
    return out


def _spy(monkeypatch):
    entered = []
    real = dbm.enter_budget
    monkeypatch.setattr(dbm, "enter_budget", lambda *a: entered.append(1) or real(*a))
    return entered


def _hits(db, shape):
    for i in range(3):  # teach the template and compile the shape's program
        db.query(shape.format(c=f"http://e/n{i}") + "\n# warm\n")
    for i in range(42):  # n40, n41: not in the store
        text = shape.format(c=f"http://e/n{i}") + f"\n# {i}\n"
        yield text, db.match_template(norm.normalize(text), None)


@pytest.mark.parametrize("shape", SHAPES)
def test_tiny_run_is_taken_and_answers_as_the_text(db, shape, monkeypatch):
    entered = _spy(monkeypatch)
    tiny = 0
    for text, hit in _hits(db, shape):
        assert hit is not None, text
        entered.clear()
        got = db.query_template(hit, lists=True)
        if got is None:  # (no program to rebind for this constant: the text path answers)
            continue
        tiny += not entered
        assert _rows(got) == _rows(db.query(text)), text
    assert tiny >= 30  # the budget was not entered for the tiny runs


def test_a_program_that_grows_goes_on_from_the_tiny_runs_rows(db, monkeypatch):
    """A hub's program hands over: the budgeted run finishes it from the rows the tiny run
    made (run_fast_lists' and ORDER BY's hand-over), with the text's answer."""
    handed = []
    real = dbm._tiny_run
    monkeypatch.setattr(dbm, "_tiny_run", lambda *a: handed.append(type(r := real(*a)) is tuple) or r)
    for shape in SHAPES[:5]:
        for text, hit in _hits(db, shape):
            got = db.query_template(hit, lists=True)
            if got is not None:
                assert _rows(got) == _rows(db.query(text)), text
    assert sum(handed) >= 3


@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[6], SHAPES[7]])
def test_tiny_run_keeps_the_deadline(db, shape):
    raised = 0
    for _text, hit in _hits(db, shape):
        if db.query_template(hit, lists=True) is None or db.store.dictionary.lookup(hit[1]) < 0:
            continue  # (a DESCRIBE of a term not in the store makes no step to check at, as before)
        try:
            got = db.query_template(hit, lists=True, deadline=time.monotonic() - 1)
        except QueryTimeout:
            raised += 1
            continue
        assert got is None  # (a program known to start big now: the text path answers, checking too)
    assert raised >= 30


@pytest.mark.parametrize("shape", [SHAPES[6], SHAPES[7]])
def test_a_budget_that_could_refuse_gets_the_budgeted_run(db, shape, monkeypatch):
    """CONSTRUCT and DESCRIBE charge their triples: with a budget below what a tiny run
    may charge, the budget is entered and refuses as the text's query does."""
    hits = list(_hits(db, shape))
    entered = _spy(monkeypatch)
    db.query_memory = 64
    refused = 0
    for text, hit in hits:
        entered.clear()
        try:
            got = db.query_template(hit, lists=True)
        except JindouError as e:
            got = type(e).__name__
        if got is None:
            continue
        assert entered  # the budgeted run
        try:
            want = db.query(text)
        except JindouError as e:
            want = type(e).__name__
        if isinstance(want, str):
            refused += 1
            assert got == want
        else:
            assert _rows(got) == _rows(want)
    assert refused >= 10


def test_a_template_the_table_let_go_drops_its_programs_with_the_snapshot(db):
    """A template held elsewhere (the lane's runners) after the template table let it go
    forgets its rebound programs when the snapshot changes (they would pin the old one)."""
    hits = [h for _, h in _hits(db, SHAPES[1])]
    tpl = hits[0][0]
    assert db.query_template(hits[5], lists=True) is not None
    assert tpl.memo is not None
    db._templates = {}  # (the table starts over: only the hit holds the template now)
    db.update("INSERT DATA { <http://e/x1> <http://e/p0> <http://e/x2> }")
    db.query("SELECT ?o WHERE { <http://e/x1> <http://e/p0> ?o }")  # (a new snapshot's first program)
    assert tpl.memo is None
    got = db.query_template(hits[5], lists=True)  # (and it still answers, from the new snapshot)
    text = SHAPES[1].format(c="http://e/n5") + "\n# again\n"
    assert got is None or _rows(got) == _rows(db.query(text))
