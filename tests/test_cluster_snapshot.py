"""Snapshot consistency on a 3-worker cluster: a commit is seen whole or not at all.

The property of :mod:`tests.test_snapshot_consistency` (pairs ``<x> <a> <y>`` /
``<x> <b> <y>`` written in one commit, readers counting both in one query)
on a cluster store: a pair's two triples usually live on different workers
(the subjects and objects are spread by id), so a reader that saw one
worker's share of a two-phase commit before another's would count them
differently. Both transports; writers ingest stream batches (Arrow, ndjson,
re-deliveries) and, in one variant, a deleter removes whole batches with
SPARQL UPDATE meanwhile.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings

from engine.database import Database
from tests.support.processes import closed_after
from tests.test_snapshot_consistency import (
    EX,
    PAIR_QUERY,
    Readers,
    check_pair_batches,
    counts_of,
    plan,
    run_writers,
)
from tests.test_snapshot_consistency import st as strategies

_examples = itertools.count()


@pytest.fixture(scope="module", params=["shm", "flight"])
def cluster_db(request):
    db = Database(workers=3, cluster_transport=request.param)
    with closed_after(db, db.store._own_tmp):
        yield db


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(plan=plan, seed=strategies.integers(0, 2**16), delete=strategies.booleans())
def test_cluster_readers_never_see_half_a_batch(cluster_db, plan, seed, delete):
    """``plan``: per writer thread, its batches as (pairs, layout, format, re-delivered)."""
    db = cluster_db
    db.update("DROP ALL")
    left = check_pair_batches(db, plan, seed, delete, prefix=f"e{next(_examples)}", timeout=120)
    # the pairs really are spread: both predicates' triples sit on more than one worker
    if left >= 20:
        a = db.store.dictionary.lookup(f"<{EX}a>")
        holders = [k for k, sh in enumerate(db.store.snapshot().default.shards) if sh.degree_stats(a)[0]]
        assert len(holders) > 1, holders


def test_pairs_written_by_sparql_updates(cluster_db):
    """The same with plain SPARQL updates as the writers: INSERT DATA of whole pairs, and
    DELETE/INSERT WHERE that moves pairs between subjects, racing three readers."""
    db = cluster_db
    db.update("DROP ALL")
    a, b = f"<{EX}a>", f"<{EX}b>"

    def insert(w: int) -> None:
        for k in range(15):
            data = " ".join(f"<{EX}s{w}_{k}_{i}> {a} <{EX}o{w}_{k}_{i}> . <{EX}s{w}_{k}_{i}> {b} <{EX}o{w}_{k}_{i}> ."
                            for i in range(25))
            db.update(f"INSERT DATA {{ {data} }}")

    def move() -> None:
        for k in range(15):
            db.update(f"DELETE {{ ?s {a} ?o . ?s {b} ?o }} INSERT {{ ?o {a} ?s . ?o {b} ?s }} "
                      f"WHERE {{ ?s {a} ?o . ?s {b} ?o FILTER(STRSTARTS(STR(?s), \"{EX}s0_{k}_\")) }}")

    with Readers(lambda: counts_of(db.query(PAIR_QUERY).rows()[0]), n=3, monotonic=False) as readers:
        errors = run_writers([lambda: insert(0), lambda: insert(1), move], timeout=120)
    assert not errors, errors
    assert not readers.bad, readers.bad[:5]
    assert counts_of(db.query(PAIR_QUERY).rows()[0]) == (2 * 15 * 25, 2 * 15 * 25)


def test_held_snapshot_stays_readable(cluster_db):
    """A snapshot a reader still holds reads the same triples after many later commits (the
    workers keep the versions live snapshots read; over Flight every call names its version)."""
    db = cluster_db
    db.update("DROP ALL")
    db.update(f"INSERT DATA {{ {' '.join(f'<{EX}h{i}> <{EX}a> <{EX}k{i}> .' for i in range(50))} }}")
    held = db.store.snapshot()
    before = sorted(zip(*(c.tolist() for c in held.default.scan_all()), strict=True))
    for k in range(8):
        db.update(f"DELETE WHERE {{ <{EX}h{k}> ?p ?o }} ; INSERT DATA {{ <{EX}n{k}> <{EX}b> <{EX}k{k}> }}")
    assert db.store.snapshot().sn >= held.sn + 8
    assert sorted(zip(*(c.tolist() for c in held.default.scan_all()), strict=True)) == before
    a = db.store.dictionary.lookup(f"<{EX}a>")
    h0 = db.store.dictionary.lookup(f"<{EX}h0>")
    assert held.default.expand(a, 0, [h0])[1].tolist() == [db.store.dictionary.lookup(f"<{EX}k0>")]
    assert len(db.query(f"SELECT * WHERE {{ ?s <{EX}a> ?o }}")) == 42
