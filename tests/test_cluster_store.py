"""A 3-worker cluster Database answers exactly like a single-process one.

The same loads, SPARQL updates (data, pattern, multi-operation requests that
read their own writes) and Graph Store operations go to a cluster Database
(``shm`` and ``flight`` transports) and to a single-process Database; after
each step a fixed set of queries must give the same SPARQL JSON results
(compared as multisets). Also: every worker holds its share of the triples,
a cluster's ``data_dir`` survives close and reopen (named graphs and the
dictionary too), and a worker directory from another cluster is refused.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.serialize import serialize
from engine.formats import SPARQL_JSON

EX = "http://ex.org/c/"
NT = "application/n-triples"
TRANSPORTS = ["shm", "flight"]

QUERIES = [
    "SELECT * WHERE { ?s ?p ?o }",
    "SELECT * WHERE { GRAPH ?g { ?s ?p ?o } }",
    "SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } GROUP BY ?g",
    f"SELECT ?a ?c WHERE {{ ?a <{EX}knows> ?b . ?b <{EX}knows> ?c }}",
    f"SELECT ?x WHERE {{ ?x <{EX}knows> <{EX}p3> }}",
    f"SELECT ?o WHERE {{ <{EX}p1> <{EX}knows> ?o }}",
    f"SELECT ?x ?n WHERE {{ ?x a <{EX}Person> OPTIONAL {{ ?x <{EX}name> ?n }} }}",
    f"SELECT ?x ?age WHERE {{ ?x <{EX}age> ?age FILTER(?age > 40) }}",
    f"SELECT ?x (COUNT(?y) AS ?k) WHERE {{ ?x <{EX}knows> ?y }} GROUP BY ?x HAVING(COUNT(?y) > 2)",
    f"SELECT DISTINCT ?y WHERE {{ <{EX}p0> <{EX}knows>+ ?y }}",
    f"SELECT ?x WHERE {{ ?x <{EX}knows> ?y . ?y <{EX}knows> ?x FILTER(STR(?x) < STR(?y)) }}",
    f"ASK {{ <{EX}p2> <{EX}knows> ?x . ?x <{EX}age> ?a }}",
    f"CONSTRUCT {{ ?y <{EX}knownBy> ?x }} WHERE {{ ?x <{EX}knows> ?y . ?y <{EX}age> ?a FILTER(?a < 30) }}",
    f"SELECT ?g ?x WHERE {{ GRAPH ?g {{ ?x <{EX}likes> ?y }} . ?x <{EX}knows> ?y }}",
    f"SELECT ?s ?o FROM <{EX}g1> WHERE {{ ?s ?p ?o }}",
    f"SELECT ?g ?s FROM NAMED <{EX}g2> WHERE {{ GRAPH ?g {{ ?s <{EX}likes> ?o }} }}",
]


def answer(db: Database, q: str):
    """A query's SPARQL JSON result as a comparable value: bindings as a multiset."""
    res = db.query(q)
    if res.is_graph:
        return ("graph", sorted(res.triple_keys()))
    doc = json.loads(serialize(res, SPARQL_JSON))
    if "boolean" in doc:
        return ("ask", doc["boolean"])
    return ("select", sorted(doc["head"]["vars"]),
            Counter(json.dumps(b, sort_keys=True) for b in doc["results"]["bindings"]))


def assert_same(cluster: Database, single: Database, where: str) -> None:
    for q in QUERIES:
        assert answer(cluster, q) == answer(single, q), f"{where}: {q}"
    for g in (None, f"{EX}g1", f"{EX}g2"):
        try:
            want = sorted(single.graph_get(g).triple_keys())
        except Exception as e:  # noqa: BLE001 - the cluster must fail the same way
            with pytest.raises(type(e)):
                cluster.graph_get(g)
        else:
            assert sorted(cluster.graph_get(g).triple_keys()) == want, f"{where}: graph {g}"


def people(seed: int, n: int = 90) -> str:
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        p = f"<{EX}p{i}>"
        lines.append(f"{p} <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{EX}Person> .")
        lines.append(f'{p} <{EX}age> "{rnd.randrange(18, 70)}"^^<http://www.w3.org/2001/XMLSchema#integer> .')
        if rnd.random() < 0.7:
            lines.append(f'{p} <{EX}name> "n{i}"@{rnd.choice(["en", "fr"])} .')
        for j in rnd.sample(range(n), rnd.randrange(0, 5)):
            lines.append(f"{p} <{EX}knows> <{EX}p{j}> .")
    return "\n".join(lines) + "\n"


def likes(seed: int, n: int = 90, k: int = 60) -> str:
    rnd = random.Random(seed)
    return "".join(f"<{EX}p{rnd.randrange(n)}> <{EX}likes> <{EX}p{rnd.randrange(n)}> .\n" for _ in range(k))


def total_triples(db: Database) -> int:
    snap = db.store.snapshot()
    return snap.default.n_triples + sum(g.n_triples for g in snap.named.values())


def wait_status_triples(db: Database, timeout: float = 10.0) -> list[dict]:
    """Workers' status once their triple counts reflect the current version (pings refresh it)."""
    want = total_triples(db)
    deadline = time.monotonic() + timeout
    while True:
        ws = db.store.workers_status()
        if sum(w["triples"] or 0 for w in ws) == want or time.monotonic() > deadline:
            return ws
        time.sleep(0.1)


@pytest.fixture(scope="module", params=TRANSPORTS)
def pair(request):
    cluster = Database(workers=3, cluster_transport=request.param)
    root = cluster.store._own_tmp
    try:
        yield cluster, Database(shards=3)
    finally:
        cluster.close()
    assert root is None or not os.path.exists(root), f"{root} left behind"


def both(pair, fn) -> None:
    """Run ``fn(db)`` on both databases; they must both succeed or fail with the same error type."""
    out = []
    for db in pair:
        try:
            fn(db)
            out.append(None)
        except Exception as e:  # noqa: BLE001 - compared below
            out.append(type(e))
    assert out[0] == out[1], f"cluster: {out[0]}, single process: {out[1]}"


UPDATES = [
    ("insert data", f"INSERT DATA {{ <{EX}p1> <{EX}knows> <{EX}p3> . <{EX}new1> <{EX}knows> <{EX}p1> . "
                    f"GRAPH <{EX}g1> {{ <{EX}p5> <{EX}likes> <{EX}p6> }} }}"),
    ("delete data", f"DELETE DATA {{ <{EX}p1> <{EX}knows> <{EX}p3> . <{EX}absent> <{EX}knows> <{EX}p1> }}"),
    ("delete/insert where", f"DELETE {{ ?x <{EX}age> ?a }} INSERT {{ ?x <{EX}age> 99 ; <{EX}was> ?a }} "
                            f"WHERE {{ ?x <{EX}age> ?a FILTER(?a < 25) }}"),
    ("delete where", f"DELETE WHERE {{ ?x <{EX}name> ?n . ?x <{EX}age> 99 }}"),
    ("reads own writes", f"INSERT DATA {{ <{EX}q1> <{EX}knows> <{EX}q2> . <{EX}q2> <{EX}knows> <{EX}q3> }} ; "
                         f"INSERT {{ ?a <{EX}knows2> ?c }} WHERE {{ ?a <{EX}knows> ?b . ?b <{EX}knows> ?c }} ; "
                         f"DELETE {{ ?a <{EX}knows> ?b }} WHERE {{ ?a <{EX}knows2> ?c . ?a <{EX}knows> ?b "
                         f"FILTER(STRSTARTS(STR(?a), \"{EX}q\")) }} ; "
                         f"INSERT {{ GRAPH <{EX}g2> {{ ?a <{EX}likes> ?c }} }} WHERE {{ ?a <{EX}knows2> ?c }}"),
    ("with graph", f"WITH <{EX}g1> DELETE {{ ?s <{EX}likes> ?o }} INSERT {{ ?o <{EX}likes> ?s }} "
                   f"WHERE {{ ?s <{EX}likes> ?o FILTER(STR(?s) < STR(?o)) }}"),
    ("create graph", f"CREATE GRAPH <{EX}g3>"),
    ("create existing", f"CREATE GRAPH <{EX}g3>"),
    ("copy", f"COPY <{EX}g1> TO <{EX}g3>"),
    ("add default", f"ADD DEFAULT TO <{EX}g3>"),
    ("move", f"MOVE <{EX}g3> TO <{EX}g4>"),
    ("clear graph", f"CLEAR GRAPH <{EX}g2>"),
    ("drop graph", f"DROP GRAPH <{EX}g4>"),
    ("drop silent absent", f"DROP SILENT GRAPH <{EX}nope>"),
    ("insert g2 again", f"INSERT {{ GRAPH <{EX}g2> {{ ?x <{EX}likes> ?y }} }} WHERE {{ ?x <{EX}knows> ?y . "
                        f"?y <{EX}age> ?a FILTER(?a > 50) }}"),
]


def test_same_answers_as_single_process(pair):
    """Loads, every kind of update and Graph Store operation, step by step, against a single process."""
    cluster, single = pair
    both(pair, lambda db: db.update("CLEAR ALL"))
    both(pair, lambda db: db.load_data(people(1), NT))
    both(pair, lambda db: db.load_data(likes(2), NT, graph=f"{EX}g1"))
    both(pair, lambda db: db.load_data(likes(3), NT, graph=f"{EX}g2"))
    assert_same(cluster, single, "after loads")
    for name, text in UPDATES:
        both(pair, lambda db, t=text: db.update(t))
        assert_same(cluster, single, name)
    # the Graph Store Protocol's operations
    both(pair, lambda db: db.graph_put(f"{EX}g1", likes(4, k=20), NT))
    assert_same(cluster, single, "graph store PUT")
    both(pair, lambda db: db.graph_post(f"{EX}g1", likes(5, k=20), NT))
    both(pair, lambda db: db.graph_post(f"{EX}g5", likes(6, k=10), NT))
    assert_same(cluster, single, "graph store POST")
    both(pair, lambda db: db.graph_delete(f"{EX}g5"))
    both(pair, lambda db: db.graph_delete(f"{EX}g5"))   # NotFound on both
    both(pair, lambda db: db.graph_put(None, people(7, n=40), NT))
    assert_same(cluster, single, "graph store DELETE / PUT default")
    # shares: each worker holds about a third of the triples, and together all of them
    ws = wait_status_triples(cluster)
    total = total_triples(cluster)
    assert total == total_triples(single)
    assert sum(w["triples"] for w in ws) == total, ws
    for w in ws:
        assert w["state"] == "up" and w["transport"] == cluster.store.transport_name
        assert total / 6 <= w["triples"] <= total / 2, (w, total)
    assert sorted(p for w in ws for p in w["partitions"]) == [0, 1, 2]


update_op = st.one_of(
    st.tuples(st.just("insert"), st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["knows", "likes"]),
                                                    st.integers(0, 30), st.sampled_from([None, "g1", "g6"])),
                                          min_size=1, max_size=12)),
    st.tuples(st.just("delete"), st.lists(st.tuples(st.integers(0, 30), st.sampled_from(["knows", "likes"]),
                                                    st.integers(0, 30), st.sampled_from([None, "g1", "g6"])),
                                          min_size=1, max_size=12)),
    st.tuples(st.just("pattern"), st.integers(0, 30)),
    st.tuples(st.just("drop"), st.sampled_from(["g1", "g6"])),
)


def _data(quads) -> str:
    out = []
    for s, p, o, g in quads:
        t = f"<{EX}p{s}> <{EX}{p}> <{EX}p{o}> ."
        out.append(f"GRAPH <{EX}{g}> {{ {t} }}" if g else t)
    return " ".join(out)


def _update_text(op) -> str:
    kind, arg = op
    if kind == "insert":
        return f"INSERT DATA {{ {_data(arg)} }}"
    if kind == "delete":
        return f"DELETE DATA {{ {_data(arg)} }}"
    if kind == "pattern":
        return (f"DELETE {{ ?x <{EX}knows> ?y }} INSERT {{ GRAPH <{EX}g6> {{ ?y <{EX}likes> ?x }} }} "
                f"WHERE {{ ?x <{EX}knows> ?y . ?y <{EX}knows> <{EX}p{arg}> }}")
    return f"DROP SILENT GRAPH <{EX}{arg}>"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(ops=st.lists(update_op, min_size=1, max_size=4))
def test_random_updates_same_answers(pair, ops):
    """Random update requests (one operation each, then all of them as one request)."""
    cluster, single = pair
    for op in ops:
        both(pair, lambda db, t=_update_text(op): db.update(t))
    both(pair, lambda db: db.update(" ; ".join(_update_text(op) for op in reversed(ops))))
    for q in QUERIES[:6] + QUERIES[-3:]:
        assert answer(cluster, q) == answer(single, q), q


# ---------------------------------------------------------------- persistence
def _snapshot_answers(db: Database) -> list:
    return [answer(db, q) for q in QUERIES]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_data_dir_survives_reopen(tmp_path, transport):
    """Close a cluster Database and open one on the same data_dir: the same data (named graphs and
    the dictionary included), and it keeps working."""
    d = str(tmp_path / "cluster")
    single = Database(shards=3)
    db = Database(workers=3, data_dir=d, cluster_transport=transport)
    try:
        for x in (db, single):
            x.load_data(people(11, n=60), NT)
            x.load_data(likes(12), NT, graph=f"{EX}g1")
            x.update(UPDATES[0][1])
            x.update(UPDATES[4][1])
            x.update(f"CREATE GRAPH <{EX}empty>")
        before = _snapshot_answers(db)
        terms = len(db.store.dictionary)
        sn = db.store.snapshot().sn
        named = sorted(db.store.dictionary.key(g) for g in db.store.snapshot().named)
    finally:
        db.close()
    assert {"coordinator", "worker-0", "worker-1", "worker-2"} <= set(os.listdir(d))
    db = Database(workers=3, data_dir=d, cluster_transport=transport)
    try:
        assert db.store.snapshot().sn == sn
        assert len(db.store.dictionary) == terms
        assert sorted(db.store.dictionary.key(g) for g in db.store.snapshot().named) == named
        assert f"<{EX}empty>" in named
        assert _snapshot_answers(db) == before
        assert_same(db, single, "reopened")
        # the dictionary is the same one: known terms keep their ids, new ones get new ids
        knows = db.store.dictionary.lookup(f"<{EX}knows>")
        assert knows >= 0
        for x in (db, single):
            x.update(f"INSERT DATA {{ <{EX}p0> <{EX}knows> <{EX}fresh> }} ; DELETE DATA {{ <{EX}p1> <{EX}knows> "
                     f"<{EX}p3> }}")
        assert db.store.dictionary.lookup(f"<{EX}knows>") == knows
        assert len(db.store.dictionary) == terms + 1
        assert_same(db, single, "reopened, then updated")
        ws = wait_status_triples(db)
        assert sum(w["triples"] for w in ws) == total_triples(single)
    finally:
        db.close()


def _processes_using(path: str) -> list[int]:
    """Pids of live processes whose command line names ``path`` (workers left running)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if path.encode() in cmd and not zombie:
            out.append(int(pid))
    return out


def test_foreign_worker_directory_is_refused(tmp_path):
    """A worker directory that belongs to another cluster (or another layout) is refused at
    start with an error that says so; a missing one is refused too (the versions differ);
    a refused start leaves no worker running."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for d, seed in ((a, 21), (b, 22)):
        db = Database(workers=2, data_dir=d)
        try:
            db.load_data(people(seed, n=20), NT)
        finally:
            db.close()
    shutil.rmtree(os.path.join(b, "worker-1"))
    shutil.copytree(os.path.join(a, "worker-1"), os.path.join(b, "worker-1"))
    with pytest.raises(Exception, match=r"worker-1\.sock.*data directory holds partitions \[1\] of 2 for "
                                        r"cluster '[0-9a-f]+', not \[1\] of 2 for '[0-9a-f]+'"):
        Database(workers=2, data_dir=b)
    assert _processes_using(b) == []
    # the data directory of a 2-worker cluster opened with 3 workers
    with pytest.raises(Exception, match=r"partitions \[0\] of 2 .*not \[0\] of 3"):
        Database(workers=3, data_dir=a)
    assert _processes_using(a) == []
    # a worker directory missing: that worker starts empty, the versions differ
    shutil.rmtree(os.path.join(b, "worker-1"))
    with pytest.raises(Exception, match="different versions"):
        Database(workers=2, data_dir=b)
    assert _processes_using(b) == []


def test_reopen_before_any_write(tmp_path):
    """A cluster started on a fresh data_dir and closed before its first write opens again
    (its workers were attached to the cluster then: the coordinator must remember which)."""
    d = str(tmp_path / "fresh")
    Database(workers=2, data_dir=d).close()
    db = Database(workers=2, data_dir=d)
    try:
        db.load_data(people(31, n=10), NT)
        n = total_triples(db)
    finally:
        db.close()
    db = Database(workers=2, data_dir=d)
    try:
        assert total_triples(db) == n
    finally:
        db.close()


def test_status_right_after_a_write(pair):
    """A worker's status row describes one version: right after a write its triples are the
    new version's, as its version number already is."""
    cluster, _ = pair
    time.sleep(0.6)   # a supervisor ping has refreshed every row
    cluster.load_data(likes(41, k=30), NT, graph=f"{EX}g7")
    ws = cluster.store.workers_status()
    sn = cluster.store.snapshot().sn
    assert [w["version"] for w in ws] == [sn] * len(ws)
    assert sum(w["triples"] for w in ws) == total_triples(cluster), ws
