"""A committed stream batch is seen by one-shot queries entirely or not at all.

Every batch holds pairs ``<x> <a> <y>`` / ``<x> <b> <y>`` absorbed as timeless facts
into the default graph; writer threads ingest batches (Arrow or ndjson, some
re-delivered with the same batch id) while reader threads count the ``<a>`` and
``<b>`` triples in one query. A reader that ever sees the two counts differ saw a
half-applied batch. Readers also check monotonic reads (their count never drops
while nothing is deleted). A variant deletes whole batches with SPARQL UPDATE
meanwhile (one update = one commit), and one run goes over HTTP against the real
server with concurrent clients.
"""

from __future__ import annotations

import random
import threading
import time

import httpx
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.stream.adaptor import ARROW_STREAM_TYPE
from engine.stream.manager import StreamManager

EX = "http://ex.org/pc/"
A, B = f"<{EX}a>", f"<{EX}b>"
PAIR_QUERY = (f"SELECT (COUNT(?ia) AS ?na) (COUNT(?ib) AS ?nb) WHERE {{ "
              f"{{ ?x {A} ?y BIND(1 AS ?ia) }} UNION {{ ?x {B} ?y BIND(1 AS ?ib) }} }}")
LAYOUTS = ("adjacent", "a_then_b", "b_then_a", "shuffled")


def batch_rows(writer: int, k: int, pairs: int, layout: str, t: int, seed: int) -> list[tuple]:
    """The 2*pairs triples of batch k of a writer, in the given order, all with timestamp t."""
    a = [(f"<{EX}x{writer}_{k}_{i}>", A, f"<{EX}y{writer}_{k}_{i}>", t) for i in range(pairs)]
    b = [(s, B, o, t) for s, _, o, _ in a]
    if layout == "adjacent":
        rows = [r for ab in zip(a, b, strict=True) for r in ab]
    elif layout == "a_then_b":
        rows = a + b
    elif layout == "b_then_a":
        rows = b + a
    else:
        rows = a + b
        random.Random(seed).shuffle(rows)
    return rows


def arrow_table(rows) -> pa.Table:
    s, p, o, t = (list(c) for c in zip(*rows, strict=True))
    return pa.table({"s": s, "p": p, "o": o, "t": pa.array(t, pa.int64())})


def ndjson(rows) -> bytes:
    return b"".join(orjson.dumps({"s": s, "p": p, "o": o, "t": t}) + b"\n" for s, p, o, t in rows)


def delete_batch_update(writer: int, k: int) -> str:
    prefix = f"{EX}x{writer}_{k}_"
    return (f"DELETE {{ ?x {A} ?y . ?x {B} ?y }} WHERE {{ ?x {A} ?y . ?x {B} ?y . "
            f'FILTER(STRSTARTS(STR(?x), "{prefix}")) }}')


def counts_of(rows: dict) -> tuple[int, int]:
    return int(rows["na"].split('"')[1]), int(rows["nb"].split('"')[1])


class Readers:
    """Reader threads running ``read() -> (na, nb)`` until stopped; they record what they saw."""

    def __init__(self, read, n: int, monotonic: bool):
        self.read = read
        self.monotonic = monotonic
        self.stop = threading.Event()
        self.bad: list[str] = []
        self.reads = 0
        self.seen_nonzero = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, name=f"reader-{i}", daemon=True) for i in range(n)]

    def _run(self) -> None:
        last = -1
        while True:
            stopping = self.stop.is_set()   # one more read after the writers finished
            try:
                na, nb = self.read()
            except Exception as e:  # noqa: BLE001 - reported by the test
                with self._lock:
                    self.bad.append(f"query failed: {type(e).__name__}: {e}")
                return
            with self._lock:
                self.reads += 1
                if na:
                    self.seen_nonzero += 1
                if na != nb:
                    self.bad.append(f"half a batch visible: {na} <a> triples vs {nb} <b> triples")
                if self.monotonic and na < last:
                    self.bad.append(f"count went back from {last} to {na}")
            last = na
            if stopping or self.bad:
                return

    def __enter__(self) -> Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)


def run_writers(writers: list, timeout: float = 300) -> list[BaseException]:
    """Run each function of ``writers`` in its own thread and wait; returns their exceptions."""
    errors: list[BaseException] = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - re-raised by the test
                errors.append(e)
        return run

    ts = [threading.Thread(target=wrap(fn), daemon=True) for fn in writers]
    for t in ts:
        t.start()
    deadline = time.monotonic() + timeout
    for t in ts:
        t.join(timeout=max(1.0, deadline - time.monotonic()))
        assert not t.is_alive(), "a writer did not finish"
    return errors


batch_spec = st.tuples(st.integers(1, 200), st.sampled_from(LAYOUTS), st.sampled_from(("arrow", "ndjson")),
                       st.booleans())
plan = st.lists(st.lists(batch_spec, min_size=1, max_size=6), min_size=1, max_size=2)


def check_pair_batches(db, plan, seed: int, delete: bool, prefix: str = "", timeout: float | None = None) -> int:
    """Writers ingest ``plan`` (per writer thread, its batches as (pairs, layout, format,
    re-delivered)) into streams absorbed by ``db`` while three readers count pairs and, with
    ``delete``, a deleter removes every even batch once written; no reader may see half a
    batch, and the end count is exact. Returns the pairs left. Streams are named
    ``<prefix>w<k>``."""
    m = StreamManager(db)
    try:
        for w in range(len(plan)):
            m.register_stream(f"{prefix}w{w}", f"{EX}stream{prefix}{w}", absorb="all")
        done: list[tuple[int, int]] = []       # (writer, batch) fully ingested, for the deleter
        deleted: set[tuple[int, int]] = set()
        lock = threading.Lock()

        left = [len(plan)]   # writers still running

        def writer(w: int, batches) -> None:
            try:
                write(w, batches)
            finally:
                with lock:
                    left[0] -= 1

        def write(w: int, batches) -> None:
            for k, (pairs, layout, fmt, again) in enumerate(batches):
                rows = batch_rows(w, k, pairs, layout, 1000 * (k + 1), seed + k)
                for attempt in range(2 if again else 1):
                    bid = f"w{w}-b{k}"
                    if fmt == "arrow":
                        r = m.ingest_arrow(f"{prefix}w{w}", arrow_table(rows), batch_id=bid)
                    else:
                        r = m.ingest_ndjson(f"{prefix}w{w}", ndjson(rows), batch_id=bid)
                    assert r["duplicate"] is (attempt == 1), r
                    assert r["accepted"] == (2 * pairs if attempt == 0 else 0) and not r["errors"], r
                with lock:
                    done.append((w, k))

        def deleter() -> None:
            """Deletes every even batch once its writer acknowledged it."""
            while True:
                with lock:
                    finished = left[0] == 0
                    todo = [wk for wk in done if wk[1] % 2 == 0 and wk not in deleted]
                for w, k in todo:
                    db.update(delete_batch_update(w, k))
                    deleted.add((w, k))
                if finished and not todo:
                    return
                time.sleep(0.002)

        def read() -> tuple[int, int]:
            return counts_of(db.query(PAIR_QUERY).rows()[0])

        with Readers(read, n=3, monotonic=not delete) as readers:
            writers = [lambda w=w, b=b: writer(w, b) for w, b in enumerate(plan)] + ([deleter] if delete else [])
            errors = run_writers(writers) if timeout is None else run_writers(writers, timeout=timeout)
        assert not errors, errors
        assert not readers.bad, readers.bad[:5]
        assert readers.reads >= 3
        total = sum(p for batches in plan for p, *_ in batches)
        gone = sum(plan[w][k][0] for w, k in deleted)
        assert read() == (total - gone, total - gone)
        return total - gone
    finally:
        m.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plan, seed=st.integers(0, 2**16), delete=st.booleans())
def test_readers_never_see_half_a_batch(plan, seed, delete):
    """``plan``: per writer thread, its batches as (pairs, layout, format, re-delivered)."""
    check_pair_batches(Database(shards=2), plan, seed, delete)


def test_pairs_over_http_with_concurrent_clients(make_server):
    """The same invariant end to end: Arrow POSTs (with re-deliveries), SPARQL readers and a
    SPARQL UPDATE deleter as separate HTTP clients of the real server."""
    srv = make_server()
    writers, batches, pairs = 2, 12, 150

    def post(c: httpx.Client, w: int, k: int) -> dict:
        rows = batch_rows(w, k, pairs, LAYOUTS[(w + k) % len(LAYOUTS)], 1000 * (k + 1), k)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, arrow_table(rows).schema) as wr:
            wr.write_table(arrow_table(rows), max_chunksize=97)   # pairs split across record batches
        r = c.post(f"/streams/w{w}", content=sink.getvalue().to_pybytes(),
                   headers={"Content-Type": ARROW_STREAM_TYPE, "Batch-Id": f"{w}-{k}"})
        assert r.status_code == 202, r.text
        return r.json()

    def write(w: int) -> None:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            for k in range(batches):
                assert post(c, w, k)["accepted"] == 2 * pairs
                if k % 3 == 0:
                    assert post(c, w, k)["duplicate"] is True

    deleted = []

    def delete() -> None:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            for k in range(0, batches, 4):
                while True:   # wait until writer 0 acknowledged batch k
                    r = c.get("/streams/w0").json()
                    if r["progress"] is not None and r["progress"] >= 1000 * (k + 1):
                        break
                    time.sleep(0.01)
                r = c.post("/update", content=delete_batch_update(0, k).encode(),
                           headers={"Content-Type": "application/sparql-update"})
                assert r.status_code in (200, 204), r.text
                deleted.append(k)

    clients = threading.local()

    def read() -> tuple[int, int]:
        c = getattr(clients, "c", None)
        if c is None:
            c = clients.c = httpx.Client(base_url=srv.url, timeout=120)
        r = c.get("/sparql", params={"query": PAIR_QUERY}, headers={"Accept": "application/sparql-results+json"})
        assert r.status_code == 200, r.text
        b = r.json()["results"]["bindings"][0]
        return int(b["na"]["value"]), int(b["nb"]["value"])

    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for w in range(writers):
            assert c.put(f"/streams/w{w}", json={"iri": f"{EX}http{w}", "absorb": "all"}).status_code == 201
    with Readers(read, n=3, monotonic=False) as readers:
        errors = run_writers([lambda w=w: write(w) for w in range(writers)] + [delete])
    assert not errors, errors
    assert not readers.bad, readers.bad[:5]
    assert readers.reads >= 3
    left = writers * batches * pairs - len(deleted) * pairs
    assert read() == (left, left)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_batch_rows_are_pairs(layout):
    """The generator itself: every batch is whole pairs, whatever the layout."""
    rows = batch_rows(0, 0, 7, layout, 5, 1)
    a = sorted((s, o) for s, p, o, _ in rows if p == A)
    b = sorted((s, o) for s, p, o, _ in rows if p == B)
    assert len(rows) == 14 and a == b and len(set(a)) == 7
