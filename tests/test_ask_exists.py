"""An ASK of a template answered depth first (engine/database.py ``_exists``: the
program's steps one partial solution at a time, stopping at the first solution): the
general evaluator's boolean over random graphs with hubs (constants with hundreds of
neighbours, where making every solution would hand over to the vectorized steps),
chains, prunes, type tests and cycles, constants in and out of the store; the search
is taken (a spy), and gives up (the usual run answers) past its work bound."""

from __future__ import annotations

import random

import pytest

import engine.database as dbm
from engine.database import Database
from engine.exec.evaluate import DatasetView, QueryContext, evaluate_query
from engine.plan.planner import QueryPlan
from engine.sparql import normalize as norm
from engine.sparql.parser import parse_query
from tests.test_template_lists import edges

T = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
SHAPES = [
    "ASK {{ <{c}> <http://e/p0> ?o }}",
    "ASK {{ ?s <http://e/p0> <{c}> }}",
    "ASK {{ <{c}> <http://e/p0> ?o . ?o <http://e/p1> ?x }}",
    "ASK {{ <{c}> <http://e/p0> ?o . ?o <http://e/p1> <http://e/n3> }}",
    "ASK {{ ?s <http://e/p0> <{c}> . ?s <http://e/p2> ?o . ?o <http://e/p3> ?z }}",
    "ASK {{ <{c}> <http://e/p0> ?o . ?o <http://e/p1> ?x . ?x <http://e/p2> <{c}> }}",
    "ASK {{ <{c}> <http://e/p0> ?o . ?o " + T + " <http://e/C1> }}",
    "ASK {{ ?s <http://e/p1> <{c}> . ?s " + T + " <http://e/C0> . ?s <http://e/p3> ?z }}",
    "ASK {{ <{c}> <http://e/p3> ?o . ?o <http://e/p3> ?x . ?x <http://e/p3> ?y . ?y <http://e/p3> <http://e/n1> }}",
]


def _graph(seed: int) -> str:
    rnd = random.Random(seed)
    lines = edges(rnd, 400, 60)
    for h in range(2):  # hubs: many neighbours each way
        for o in range(60):
            if rnd.random() < 0.9:
                lines.append(f"<http://e/n{h}> <http://e/p0> <http://e/n{o}> .")
                lines.append(f"<http://e/n{o}> <http://e/p0> <http://e/n{h}> .")
                lines.append(f"<http://e/n{o}> <http://e/p1> <http://e/n{h}> .")
    for n in range(60):
        lines.append(f"<http://e/n{n}> {T} <http://e/C{rnd.randrange(3)}> .")
    return "\n".join(lines) + "\n"


def _general(db, text) -> bool:
    q = parse_query(text)
    snap = db.store.snapshot()
    ctx = QueryContext(snap, timeout=30, max_rows=db.max_rows)
    return evaluate_query(q, ctx, DatasetView(snap.default, snap.named), plan=QueryPlan(q, q.pattern, None)).boolean


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ask_depth_first_answers_as_the_general_evaluator(seed, tmp_path, monkeypatch):
    f = tmp_path / "g.nt"
    f.write_text(_graph(seed))
    db = Database()
    db.load_file(str(f))
    found = []
    real = dbm._exists
    monkeypatch.setattr(dbm, "_exists", lambda steps: found.append(real(steps)) or found[-1])
    for shape in SHAPES:
        for i in range(63):  # n60..n62: not in the store
            text = shape.format(c=f"http://e/n{i}") + f"\n# {i}\n"
            hit = db.match_template(norm.normalize(text), None)
            got = db.query_template(hit, lists=True) if hit is not None else None
            if got is None:
                got = db.query(text, lists=True)
            assert got.boolean == _general(db, text), text
    answered = [x for x in found if x is not None]
    assert len(answered) > 300 and True in answered and False in answered


def test_ask_depth_first_gives_up_past_its_bound(tmp_path, monkeypatch):
    f = tmp_path / "g.nt"
    f.write_text(_graph(4))
    db = Database()
    db.load_file(str(f))
    monkeypatch.setattr(dbm, "EXISTS_WORK", 3)
    found = []
    real = dbm._exists
    monkeypatch.setattr(dbm, "_exists", lambda steps: found.append(real(steps)) or found[-1])
    for shape in SHAPES:  # (the hubs' expansions pass 3 partial solutions at once)
        for i in range(60):
            text = shape.format(c=f"http://e/n{i}") + f"\n# {i}\n"
            assert db.query(text, lists=True).boolean == _general(db, text), text
    assert None in found and False in found
