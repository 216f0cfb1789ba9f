"""A store worker killed under load: fail fast and whole, recover, lose no acknowledged write.

Real ``jindou serve --workers 3`` processes; a worker (its pid from GET /status)
gets SIGKILL while client threads query or write:

* every query answer is either 200 with the complete, correct result or 503
  whose JSON body names the dead worker, each within a few seconds;
* /status shows the worker down (or recovering) soon after, then the
  supervisor restarts it (``restarts`` >= 1, ``up``) and answers are complete again;
* every write acknowledged with 2xx is there after recovery, a write refused
  with 503 is all there or not at all, and (``--data-dir``) after a restart
  of the whole server on the same directory.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter

import httpx
import pytest

from engine.database import Database
from tests.support.processes import stop_processes
from tests.support.server_process import ServerProcess

EX = "http://ex.org/f/"
NT = "application/n-triples"
JSON = "application/sparql-results+json"
#: a query answer (200 or 503) must come within this many seconds
ANSWER_WITHIN = 5.0
#: a write may wait for the write lock while a worker restarts
WRITE_WITHIN = 15.0


def _until_logged(log: list, wanted, n: int, seconds: float = 20.0) -> None:
    """Wait (at most ``seconds``) until ``n`` entries of the clients' ``log`` are ``wanted``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and sum(1 for e in list(log) if wanted(e)) < n:
        time.sleep(0.05)


def dataset(n: int = 300, seed: int = 3) -> str:
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        lines.append(f'<{EX}v{i}> <{EX}val> "{i}"^^<http://www.w3.org/2001/XMLSchema#integer> .')
        for j in rnd.sample(range(n), 3):
            lines.append(f"<{EX}v{i}> <{EX}link> <{EX}v{j}> .")
    return "\n".join(lines) + "\n"


QUERIES = [
    "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
    f"SELECT ?a ?c WHERE {{ ?a <{EX}link> ?b . ?b <{EX}link> ?c . ?c <{EX}val> ?v FILTER(?v < 40) }}",
    f"SELECT ?x ?v WHERE {{ ?x <{EX}link> <{EX}v7> . ?x <{EX}val> ?v }}",
    f"SELECT ?b (COUNT(*) AS ?k) WHERE {{ <{EX}v1> <{EX}link> ?b . ?b <{EX}link> ?c }} GROUP BY ?b",
]


def bindings(doc: dict) -> Counter:
    return Counter(json.dumps(b, sort_keys=True) for b in doc["results"]["bindings"])


def expected_answers(data: str) -> list[Counter]:
    """What a single-process store answers for QUERIES over ``data``."""
    from engine.exec.serialize import serialize  # noqa: PLC0415

    db = Database(shards=3)
    db.load_data(data, NT)
    return [bindings(json.loads(serialize(db.query(q), JSON))) for q in QUERIES]


def workers(c: httpx.Client) -> list[dict]:
    r = c.get("/status")
    assert r.status_code == 200
    return r.json()["workers"]


def wait_for(c: httpx.Client, address: str, pred, timeout: float, what: str) -> tuple[dict, float]:
    """Poll /status until ``pred(worker entry)``; (entry, seconds it took)."""
    t0 = time.monotonic()
    while True:
        w = next(w for w in workers(c) if w["address"] == address)
        if pred(w):
            return w, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"worker {address} not {what} after {timeout} s: {w}")
        time.sleep(0.05)


def kill_and_recover(c: httpx.Client, victim: int) -> dict:
    """SIGKILL worker ``victim``; check it shows down/recovering soon and comes back up restarted."""
    ws = workers(c)
    assert len(ws) == 3 and all(w["state"] == "up" for w in ws), ws
    w = ws[victim]
    os.kill(w["pid"], signal.SIGKILL)
    _, took = wait_for(c, w["address"], lambda x: x["state"] in ("down", "recovering"), 5.0, "down")
    assert took < 3.0, f"the kill was noticed after {took:.1f} s"
    up, _ = wait_for(c, w["address"], lambda x: x["state"] == "up" and x["restarts"] >= 1, 30.0, "restarted")
    assert up["restarts"] >= 1
    # the supervisor's ping refreshes the pid shortly after the restart
    wait_for(c, w["address"], lambda x: x["pid"] not in (None, w["pid"]), 5.0, "answering with its new pid")
    return w


def shm_dirs(pid: int) -> list[str]:
    return glob.glob(f"/dev/shm/jindou-{pid}-*")


@pytest.mark.parametrize("transport", ["shm", "flight"])
def test_worker_killed_during_queries(transport):
    data = dataset()
    want = expected_answers(data)
    srv = ServerProcess("--workers", "3", "--cluster-transport", transport)
    with srv:
        pid = srv.proc.pid
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            r = c.post("/store?default", content=data.encode(), headers={"Content-Type": NT})
            assert r.status_code in (200, 201, 204), r.text
            for q, w in zip(QUERIES, want, strict=True):
                assert bindings(c.get("/sparql", params={"query": q}, headers={"Accept": JSON}).json()) == w
        stop = threading.Event()
        log: list[tuple[float, int, int, float, dict | None]] = []   # (start, query, status, seconds, body)
        errors: list[str] = []

        def client() -> None:
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                k = 0
                while not stop.is_set():
                    t0 = time.monotonic()
                    try:
                        r = c.get("/sparql", params={"query": QUERIES[k % len(QUERIES)]}, headers={"Accept": JSON})
                    except httpx.HTTPError as e:
                        errors.append(f"{type(e).__name__}: {e}")
                        return
                    body = r.json() if r.headers.get("content-type", "").startswith("application") else None
                    log.append((t0, k % len(QUERIES), r.status_code, time.monotonic() - t0, body))
                    k += 1

        threads = [threading.Thread(target=client, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                victim = kill_and_recover(c, 1)
            recovered_at = time.monotonic()   # then some complete answers after the recovery
            _until_logged(log, lambda e: e[0] > recovered_at and e[2] == 200, 8)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert not errors, errors
        bad = []
        n503 = 0
        for _t0, qi, status, took, body in log:
            if took > ANSWER_WITHIN:
                bad.append(f"query {qi} took {took:.1f} s ({status})")
            if status == 200:
                if bindings(body) != want[qi]:
                    bad.append(f"query {qi}: 200 with an incomplete or wrong answer ({len(body['results']['bindings'])}"
                               f" rows)")
            elif status == 503:
                n503 += 1
                if not body or body.get("worker") != victim["address"]:
                    bad.append(f"query {qi}: 503 not naming the worker: {body}")
            else:
                bad.append(f"query {qi}: status {status}: {body}")
        assert not bad, bad[:10]
        assert n503 >= 1, "no query saw the outage"
        assert sum(1 for t0, _, s, _, _ in log if t0 > recovered_at and s == 200) >= 8
    left = shm_dirs(pid)
    for d in left:   # (removed either way: the machine stays clean when this fails)
        shutil.rmtree(d, ignore_errors=True)
    assert left == [], "the server stopped with SIGTERM left its shared-memory directory behind"


def batch_triples(k: int, n: int = 30) -> list[str]:
    return [f'<{EX}b{k}_{i}> <{EX}inBatch> "{k}" .' for i in range(n)] + \
           [f"<{EX}b{k}_{i}> <{EX}next> <{EX}b{k}_{(i + 1) % n}> ." for i in range(n)]


def batch_counts(c: httpx.Client) -> dict[int, int]:
    q = f"SELECT ?b (COUNT(*) AS ?n) WHERE {{ ?s <{EX}inBatch> ?b . ?s <{EX}next> ?t }} GROUP BY ?b"
    r = c.get("/sparql", params={"query": q}, headers={"Accept": JSON})
    assert r.status_code == 200, r.text
    return {int(b["b"]["value"]): int(b["n"]["value"]) for b in r.json()["results"]["bindings"]}


def test_worker_killed_during_ingestion_and_server_restart(tmp_path):
    """Writes (Graph Store POSTs and SPARQL updates) while a worker dies; then the whole
    server restarts on the same --data-dir."""
    data_dir = str(tmp_path / "data")
    per_batch = 30
    stop = threading.Event()
    log: list[tuple[int, int, float, dict | None, float]] = []   # (batch, status, seconds, body, start)
    errors: list[str] = []

    def writer(url: str) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            k = 0
            while not stop.is_set():
                lines = batch_triples(k, per_batch)
                t0 = time.monotonic()
                try:
                    if k % 2:
                        r = c.post("/store?default", content="\n".join(lines).encode(), headers={"Content-Type": NT})
                    else:
                        r = c.post("/update", content=("INSERT DATA { " + " ".join(lines) + " }").encode(),
                                   headers={"Content-Type": "application/sparql-update"})
                except httpx.HTTPError as e:
                    errors.append(f"batch {k}: {type(e).__name__}: {e}")
                    return
                body = r.json() if r.content and r.headers.get("content-type", "").startswith("application") \
                    else None
                log.append((k, r.status_code, time.monotonic() - t0, body, t0))
                k += 1

    with ServerProcess("--workers", "3", "--data-dir", data_dir) as srv:
        t = threading.Thread(target=writer, args=(srv.url,), daemon=True)
        t.start()
        try:
            time.sleep(0.5)
            with httpx.Client(base_url=srv.url, timeout=30) as c:
                victim = kill_and_recover(c, 2)
            recovered_at = time.monotonic()
            _until_logged(log, lambda e: e[4] > recovered_at and 200 <= e[1] < 300, 5)
        finally:
            stop.set()
            t.join(timeout=60)
        assert not errors, errors
        acked = {k for k, s, _, _, _ in log if 200 <= s < 300}
        refused = {k for k, s, _, _, _ in log if s == 503}
        bad = [f"batch {k}: status {s} after {took:.1f} s: {body}" for k, s, took, body, _ in log
               if not (200 <= s < 300 or s == 503) or took > WRITE_WITHIN]
        bad += [f"batch {k}: 503 not naming the worker: {body}" for k, s, _, body, _ in log
                if s == 503 and (not body or body.get("worker") != victim["address"])]
        assert not bad, bad[:10]
        assert refused, "no write saw the outage"
        assert sum(1 for _, s, _, _, t0 in log if t0 > recovered_at and 200 <= s < 300) >= 5
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            counts = batch_counts(c)
        assert {k: counts.get(k) for k in acked} == {k: per_batch for k in acked}, "an acknowledged write is lost"
        for k in refused:   # a refused write is all there (its commit was decided) or not at all
            assert counts.get(k, 0) in (0, per_batch), (k, counts.get(k))
        before = counts
    # the whole server again, on the same directory
    with ServerProcess("--workers", "3", "--data-dir", data_dir) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert all(w["state"] == "up" for w in workers(c))
            assert batch_counts(c) == before
            lines = batch_triples(10_000, per_batch)
            r = c.post("/store?default", content="\n".join(lines).encode(), headers={"Content-Type": NT})
            assert 200 <= r.status_code < 300, r.text
            assert batch_counts(c) == {**before, 10_000: per_batch}


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_worker_dies_between_prepare_and_commit():
    """The worker dies after it prepared a write and before the commit reaches it: the write
    is decided (every worker prepared), so it is acknowledged; reads get 503 naming the worker
    until it is back, and then its share has been replayed -- the write is whole."""
    from engine.errors import WorkerUnavailable  # noqa: PLC0415

    db = Database(workers=3)
    root = db.store._own_tmp
    try:
        db.load_data(dataset(60), NT)
        victim = db.store.workers[1]
        put = victim.client.put_rows

        def put_then_die(header, table, timeout=None):
            res = put(header, table, timeout)
            os.kill(victim.proc.pid, signal.SIGKILL)   # prepared, then gone before the commit
            victim.proc.wait()
            return res

        victim.client.put_rows = put_then_die
        try:
            db.update("INSERT DATA { " + " ".join(batch_triples(1, 40)) + " }")
        finally:
            victim.client.put_rows = put
        with pytest.raises(WorkerUnavailable) as ei:
            db.query("SELECT * WHERE { ?s ?p ?o }")
        assert ei.value.address == victim.address
        deadline = time.monotonic() + 30
        while victim.state != "up" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert victim.state == "up" and victim.restarts == 1, (victim.state, victim.why)
        q = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{EX}inBatch> ?b . ?s <{EX}next> ?t }}"
        assert db.query(q).rows() == [{"n": '"40"^^<http://www.w3.org/2001/XMLSchema#integer>'}]
        # and the cluster goes on
        db.update("INSERT DATA { " + " ".join(batch_triples(2, 10)) + " }")
        assert db.query(q).rows() == [{"n": '"50"^^<http://www.w3.org/2001/XMLSchema#integer>'}]
    finally:
        db.close()
    assert root is None or not os.path.exists(root)


def test_server_killed_then_restarted_on_its_data_dir(tmp_path):
    """SIGKILL of the serving process itself: its workers notice and exit (no orphans), and a
    new server on the same --data-dir has every acknowledged write."""
    data_dir = str(tmp_path / "data")
    srv = ServerProcess("--workers", "3", "--data-dir", data_dir)
    with srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            for k in range(6):
                r = c.post("/store?default", content="\n".join(batch_triples(k)).encode(),
                           headers={"Content-Type": NT})
                assert 200 <= r.status_code < 300, r.text
            r = c.post("/update", content=f"DELETE WHERE {{ ?s <{EX}inBatch> \"3\" }}".encode(),
                       headers={"Content-Type": "application/sparql-update"})
            assert r.status_code == 204, r.text
            before = batch_counts(c)
            pids = [w["pid"] for w in workers(c)]
        srv.proc.kill()
        srv.proc.wait()
    assert before == {k: 30 for k in (0, 1, 2, 4, 5)}
    deadline = time.monotonic() + 10
    while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_pid_alive(p) for p in pids), "workers outlived their server"
    with ServerProcess("--workers", "3", "--data-dir", data_dir) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert batch_counts(c) == before
            ws = workers(c)
            assert all(w["state"] == "up" for w in ws) and {w["pid"] for w in ws}.isdisjoint(pids)


@pytest.mark.parametrize("transport", ["auto", "flight"])
def test_cluster_file_worker_restarted_by_operator(tmp_path, transport):
    """Workers listed in a --cluster file (started by someone else) are not restarted by the
    serving process: a killed one makes reads fail fast (naming it) until the operator starts
    it again on its data directory; then the serving process takes it back by itself."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from engine.errors import WorkerUnavailable  # noqa: PLC0415

    def start(k: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "server.cli", "worker", "--listen", addrs[k], "--data-dir",
                                 str(tmp_path / f"w{k}")], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    addrs = [f"unix:{tmp_path / f'w{k}.sock'}" for k in range(3)]
    cfg = tmp_path / "cluster.toml"
    cfg.write_text("".join(f'[[worker]]\naddress = "{a}"\n\n' for a in addrs))
    procs = [start(k) for k in range(3)]
    db = None
    try:
        db = Database(cluster=str(cfg), cluster_transport=transport)
        assert [w["transport"] for w in db.store.workers_status()] == ["shm" if transport == "auto" else transport] * 3
        db.load_data(dataset(80), NT)
        want = db.query(QUERIES[1]).rows()
        procs[0].kill()
        procs[0].wait()
        deadline = time.monotonic() + 5
        while db.store.workers[0].state == "up" and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        with pytest.raises(WorkerUnavailable) as ei:
            db.query(QUERIES[1])
        assert time.monotonic() - t0 < ANSWER_WITHIN and ei.value.address == addrs[0]
        with pytest.raises(WorkerUnavailable):
            db.update("INSERT DATA { " + " ".join(batch_triples(1, 5)) + " }")
        time.sleep(1.0)
        assert db.store.workers[0].restarts == 0 and db.store.workers[0].state != "up"
        procs[0] = start(0)
        deadline = time.monotonic() + 30
        while db.store.workers[0].state != "up" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db.store.workers[0].state == "up", db.store.workers[0].why
        assert sorted(map(str, db.query(QUERIES[1]).rows())) == sorted(map(str, want))
        db.update("INSERT DATA { " + " ".join(batch_triples(1, 5)) + " }")
        assert batch_counts_db(db) == {1: 5}
    finally:
        if db is not None:
            db.close()
        stop_processes(procs)


def batch_counts_db(db: Database) -> dict[int, int]:
    q = f"SELECT ?b (COUNT(*) AS ?n) WHERE {{ ?s <{EX}inBatch> ?b . ?s <{EX}next> ?t }} GROUP BY ?b"
    return {int(r["b"].split('"')[1]): int(r["n"].split('"')[1]) for r in db.query(q).rows()}


def test_readyz_follows_the_workers_healthz_does_not(tmp_path):
    """/readyz is 503 naming a dead worker until it is back; /healthz answers 200 throughout."""
    import json as _json
    import os as _os
    import signal as _signal
    import time as _time
    import urllib.error
    import urllib.request

    from tests.support.server_process import ServerProcess

    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, _json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, _json.loads(e.read())

    with ServerProcess("--workers", "2") as srv:
        assert get(srv.url + "/readyz") == (200, {"status": "ready"})
        assert get(srv.url + "/healthz") == (200, {"status": "ok"})
        _, st = get(srv.url + "/status")
        victim = st["workers"][0]
        _os.kill(victim["pid"], _signal.SIGKILL)
        deadline = _time.monotonic() + 5
        while True:
            code, doc = get(srv.url + "/readyz")
            if code == 503 or _time.monotonic() > deadline:
                break
            _time.sleep(0.05)
        assert code == 503 and doc["workers"][0]["address"] == victim["address"], doc
        assert get(srv.url + "/healthz")[0] == 200
        deadline = _time.monotonic() + 20
        while get(srv.url + "/readyz")[0] != 200:
            assert _time.monotonic() < deadline, "the worker did not come back"
            _time.sleep(0.2)
