"""A template's plain SELECT kept by its constant (``Database.query_template``'s first
step, engine/database.py ``_keep_plain``): a SELECT without ORDER BY, DISTINCT, OFFSET,
LIMIT or unbound column whose program runs tuple at a time is answered in
``query_template``'s frame -- no ``_template_program``, no term lookup, no ``_tiny_run``
-- once its constant's program is kept; another SELECT or an ASK skips the program
lookup and ``_tiny_run`` answers it. It is taken (spies on the steps it skips), answers
exactly as the text's ``Database.query`` and as the general steps do (several graphs,
constants in and out of the store, a hub whose program grows and hands over), keeps the
deadline, is not kept for CONSTRUCT / DESCRIBE, and is forgotten with the snapshot."""

from __future__ import annotations

import time

import pytest

import engine.database as dbm
from engine.database import Database
from engine.errors import QueryTimeout
from engine.sparql import normalize as norm
from tests.test_template_tiny import SHAPES, _graph, _rows

PLAIN = [
    SHAPES[0],
    SHAPES[1],
    SHAPES[3],
    "SELECT ?y ?x WHERE {{ <{c}> <http://e/p0> ?y . ?y <http://e/p2> ?x }}",
    "SELECT ?s WHERE {{ ?s <http://e/p1> <{c}> }}",
]
OTHER = [SHAPES[2], SHAPES[4], SHAPES[5]]  # DISTINCT + LIMIT, ORDER BY, ASK


def _db(tmp_path, seed: int) -> Database:
    f = tmp_path / f"g{seed}.nt"
    f.write_text(_graph(seed))
    out = Database()
    out.load_file(str(f))
    return out


def _hits(db, shape, n: int = 42):
    for i in range(3):  # teach the template and compile the shape's program
        db.query(shape.format(c=f"http://e/n{i}") + "\n# warm\n")
    for i in range(n):  # n40, n41: not in the store
        text = shape.format(c=f"http://e/n{i}") + f"\n# {i}\n"
        yield text, db.match_template(norm.normalize(text), None)


class _Spies:
    def __init__(self, monkeypatch):
        self.tiny = 0
        self.program = 0
        tiny, program = dbm._tiny_run, Database._template_program

        def spy_tiny(*a):
            self.tiny += 1
            return tiny(*a)

        def spy_program(db, *a):
            self.program += 1
            return program(db, *a)

        monkeypatch.setattr(dbm, "_tiny_run", spy_tiny)
        monkeypatch.setattr(Database, "_template_program", spy_program)


@pytest.mark.parametrize("seed", [3, 7, 11])
@pytest.mark.parametrize("shape", PLAIN)
def test_kept_plain_select_is_taken_and_answers_as_the_text(tmp_path, shape, seed, monkeypatch):
    db = _db(tmp_path, seed)
    spies = _Spies(monkeypatch)
    taken = 0
    for text, hit in _hits(db, shape):
        assert hit is not None, text
        first = db.query_template(hit, lists=True)  # (the general steps; keeps the constant's program)
        if first is None:
            continue
        spies.tiny = spies.program = 0
        again = db.query_template(hit, lists=True)
        if again is None:  # (a hub: its program starts big, the general steps say so, as before)
            assert spies.program == 1
            continue
        if spies.program == 0:
            taken += 1
        want = _rows(db.query(text))
        assert _rows(first) == want, text
        assert _rows(again) == want, text
    assert taken >= 30


def test_other_selects_and_asks_skip_the_program_lookup(tmp_path, monkeypatch):
    """DISTINCT + LIMIT, ORDER BY, ASK: kept without names -- no ``_template_program``,
    ``_tiny_run`` answers -- with the text's answer."""
    db = _db(tmp_path, 7)
    spies = _Spies(monkeypatch)
    for shape in OTHER:
        taken = 0
        for text, hit in _hits(db, shape):
            if db.query_template(hit, lists=True) is None:
                continue
            spies.program = spies.tiny = 0
            got = db.query_template(hit, lists=True)
            if got is None:  # (a hub's program starts big: the general steps say so, as before)
                assert spies.program == 1
                continue
            assert hit[0].memo[2][hit[1]][2] is None  # (no names: not the in-frame plain SELECT)
            assert (spies.program, spies.tiny) == (0, 1), text
            taken += 1
            assert _rows(got) == _rows(db.query(text)), text
        assert taken >= 30, shape


@pytest.mark.parametrize("shape", [SHAPES[6], SHAPES[7]])
def test_not_kept_for_construct_and_describe(tmp_path, shape, monkeypatch):
    """Their runs check the memory budget first: the general steps answer them every time."""
    db = _db(tmp_path, 7)
    spies = _Spies(monkeypatch)
    seen = 0
    for text, hit in _hits(db, shape):
        if db.query_template(hit, lists=True) is None:
            continue
        spies.program = 0
        got = db.query_template(hit, lists=True)
        memo = hit[0].memo
        assert memo is None or not memo[2].get(hit[1])
        if SHAPES.index(shape) == 6:  # (a DESCRIBE's template has its own path, no program)
            assert spies.program == 1
        if got is not None:
            seen += 1
            assert _rows(got) == _rows(db.query(text)), text
    assert seen >= 30


def test_a_program_that_grows_goes_on_budgeted(tmp_path, monkeypatch):
    """A kept program whose second step grows past the tiny run's rows (``a``'s ``p0``
    neighbour is a hub of 600 ``p0`` neighbours) hands over to the budgeted, vectorized
    steps from the rows it made, with the text's answer; the small ones stay kept."""
    lines = [f"<http://e/c{i}> <http://e/p0> <http://e/m{i}> ." for i in range(20)]
    lines += [f"<http://e/m{i}> <http://e/p0> <http://e/z{i}> ." for i in range(20)]
    lines.append("<http://e/a> <http://e/p0> <http://e/hub> .")
    lines += [f"<http://e/hub> <http://e/p0> <http://e/h{j}> ." for j in range(600)]
    f = tmp_path / "hub.nt"
    f.write_text("\n".join(lines) + "\n")
    db = Database()
    db.load_file(str(f))
    shape = "SELECT ?y ?x WHERE {{ <{c}> <http://e/p0> ?y . ?y <http://e/p0> ?x }}"
    for i in range(3):
        db.query(shape.format(c=f"http://e/c{i}") + "\n# warm\n")
    texts = [shape.format(c=c) + "\n# t\n" for c in ["http://e/a", "http://e/c5", "http://e/c6"]]
    hits = [db.match_template(norm.normalize(t), None) for t in texts]
    for hit in hits:
        assert db.query_template(hit, lists=True) is not None
    entered = []
    real = dbm.enter_budget
    monkeypatch.setattr(dbm, "enter_budget", lambda *a: entered.append(1) or real(*a))
    spies = _Spies(monkeypatch)
    for text, hit in zip(texts, hits, strict=True):
        entered.clear()
        spies.program = 0
        got = db.query_template(hit, lists=True)
        assert spies.program == 0  # (every run from its kept program, the hub's too)
        assert bool(entered) == ("/a>" in text)  # (only the hub's run was budgeted)
        assert _rows(got) == _rows(db.query(text)), text
        assert len(got) == (600 if "/a>" in text else 1)


def test_kept_plain_select_keeps_the_deadline(tmp_path):
    db = _db(tmp_path, 7)
    raised = 0
    for _text, hit in _hits(db, SHAPES[1]):
        if db.query_template(hit, lists=True) is None or not hit[0].memo[2].get(hit[1]):
            continue
        if hit[0].memo[2][hit[1]][0].starts_big:  # (a hub: the general steps give None, as before)
            assert db.query_template(hit, lists=True, deadline=time.monotonic() - 1) is None
            continue
        with pytest.raises(QueryTimeout):
            db.query_template(hit, lists=True, deadline=time.monotonic() - 1)
        raised += 1
    assert raised >= 30


def test_kept_plain_select_is_forgotten_with_the_snapshot(tmp_path, monkeypatch):
    db = _db(tmp_path, 7)
    hits = {text: hit for text, hit in _hits(db, SHAPES[1])}
    for hit in hits.values():
        db.query_template(hit, lists=True)
    db.update("INSERT DATA { <http://e/n5> <http://e/p0> <http://e/fresh> }")
    spies = _Spies(monkeypatch)
    for text, hit in hits.items():
        got = db.query_template(hit, lists=True)
        if got is not None:
            assert _rows(got) == _rows(db.query(text)), text
    assert spies.program >= 1  # (the new snapshot's programs: the general steps again)
    text = SHAPES[1].format(c="http://e/n5") + "\n# 5\n"
    got = db.query_template(hits[text], lists=True)
    got = _rows(got if got is not None else db.query(text))
    assert ("http://e/fresh",) in [tuple(r) for r in got[1]] or any("fresh" in str(r) for r in got[1])
