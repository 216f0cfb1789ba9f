"""LIMIT over a BGP whose splitting pattern has few values but a large fan-out
(engine/exec/limit_chunks.py, wave 2o): ``?x :memberOf ?d . ?d :subOrg ?u . ?x :name ?n``
with few ``?d`` and hundreds of members each used to be evaluated whole (few driving
values read as "cheap"); now the planner's estimate of the whole exploration decides, the
BGP is chunked, and the first chunk is sized from the estimated solutions per value. The
answers are LIMIT rows of the whole answer (pyoxigraph), and the path is taken (a spy)."""

from __future__ import annotations

from collections import Counter

import pytest

from engine.exec import limit_chunks as LC
from tests.test_engine_classes_oracle import both_stores
from tests.test_limit_chunks import _j, _o

pytest.importorskip("pyoxigraph")

EX = "http://ex.org/"


def _data(depts: int = 12, members: int = 400) -> str:
    out = []
    for d in range(depts):
        out.append(f"<{EX}d{d}> <{EX}subOrg> <{EX}u{d % 3}> .\n")
        for m in range(members):
            x = f"<{EX}x{d}_{m}>"
            out.append(f"{x} <{EX}memberOf> <{EX}d{d}> .\n")
            if m % 7:  # (some members without a name: not every driving row is a solution)
                out.append(f'{x} <{EX}name> "n{d}_{m}" .\n')
    return "".join(out)


@pytest.fixture(scope="module")
def stores():
    return both_stores(_data())


BODY = f"?x <{EX}memberOf> ?d . ?d <{EX}subOrg> ?u . ?x <{EX}name> ?n"


@pytest.mark.parametrize("limit,offset", [(1, 0), (3, 0), (50, 0), (700, 0), (5, 4000), (10, 100000)])
def test_fanout_limit_rows_are_rows_of_the_whole_answer(stores, limit, offset):
    db, ox = stores
    whole = Counter(_o(ox, f"SELECT * WHERE {{ {BODY} }}"))
    assert whole == Counter(_j(db, f"SELECT * WHERE {{ {BODY} }}"))
    got = _j(db, f"SELECT * WHERE {{ {BODY} }} LIMIT {limit} OFFSET {offset}")
    assert len(got) == max(0, min(limit, sum(whole.values()) - offset))
    assert not Counter(got) - whole


def test_fanout_is_chunked_from_a_small_first_chunk(stores, monkeypatch):
    db, _ = stores
    sizes = []
    orig = LC._chunks

    def spy(*a, **kw):
        for b in orig(*a, **kw):
            sizes.append(b.n)
            yield b

    monkeypatch.setattr(LC, "_chunks", spy)
    before = LC.TAKEN[0]
    res = db.query(f"SELECT (COUNT(*) AS ?k) WHERE {{ {{ SELECT ?x ?n WHERE {{ {BODY} }} LIMIT 3 }} }}")
    assert LC.TAKEN[0] == before + 1
    assert sizes == [1]  # one department's members fill a LIMIT 3 (not 256 departments)
    assert res.rows()[0]["k"].startswith('"3"')


def test_a_selective_constant_keeps_the_whole_evaluation(stores):
    db, _ = stores
    before = LC.TAKEN[0]
    assert len(db.query(f"SELECT * WHERE {{ ?x <{EX}memberOf> <{EX}d3> . ?x <{EX}name> ?n }} LIMIT 3")) == 3
    assert LC.TAKEN[0] == before


def test_first_chunk_size():
    assert LC._first(3, None) == 0 and LC._first(3, 0.5) == 0  # (FIRST_CHUNK)
    assert LC._first(3, 400.0) == 1
    assert LC._first(100, 10.0) == 21


def test_empty_chunks_grow_faster(stores, monkeypatch):
    """A chunk with no solution (the estimate was too high: a FILTER rejects every row)
    makes the next one four times larger, not two: fewer evaluations before the end (one
    shard: the subjects one array, see test_subjects_chunked_shard_by_shard)."""
    from engine.database import Database

    _, ox = stores
    db = Database(shards=1)
    db.load_data(_data(), "application/n-triples")
    sizes = []
    orig = LC._chunks

    def spy(*a, **kw):
        for b in orig(*a, **kw):
            sizes.append(b.n)
            yield b

    monkeypatch.setattr(LC, "_chunks", spy)
    flt = 'FILTER(STRSTARTS(?n, "n11_"))'  # (the last department's members only)
    whole = Counter(_o(ox, f"SELECT * WHERE {{ {BODY} {flt} }}"))
    res = db.query(f"SELECT * WHERE {{ {BODY} {flt} }} LIMIT 2")
    assert len(res) == 2
    assert sizes == [1, 4, 7]  # (doubling: 1, 2, 4, 5)
    got = _j(db, f"SELECT * WHERE {{ {BODY} {flt} }} LIMIT 2")
    assert len(got) == 2 and not Counter(got) - whole


@pytest.mark.parametrize("limit,offset", [(5, 0), (300, 0), (7, 2390), (50, 4790), (10, 100000)])
def test_subjects_chunked_shard_by_shard(monkeypatch, limit, offset):
    """On a store of several shards a predicate's subjects are chunked from each shard's
    own key array in turn (disjoint), never from the merged sorted copy ``graph.index``
    builds (a sort of every subject on first use); the rows are rows of the whole answer."""
    import pyoxigraph

    from engine.database import Database
    from engine.kv.graph import GraphIndex

    data = _data()
    db = Database(shards=4)
    db.load_data(data, "application/n-triples")
    ox = pyoxigraph.Store()
    ox.load(data, format=pyoxigraph.RdfFormat.N_TRIPLES)
    calls = []
    orig = GraphIndex.index

    def spy(self, pid, direction):
        calls.append((pid, direction))
        return orig(self, pid, direction)

    monkeypatch.setattr(GraphIndex, "index", spy)
    body = f"?x <{EX}memberOf> ?d"
    whole = Counter(_o(ox, f"SELECT * WHERE {{ {body} }}"))
    before = LC.TAKEN[0]
    got = _j(db, f"SELECT * WHERE {{ {body} }} LIMIT {limit} OFFSET {offset}")
    assert LC.TAKEN[0] > before and not calls
    assert len(got) == max(0, min(limit, sum(whole.values()) - offset))
    assert len(set(got)) == len(got) and not Counter(got) - whole
