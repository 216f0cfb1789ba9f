"""``jindou serve --processes N`` (server/processes.py): the real server with a
query process next to the primary on 127.0.0.1 and free ports.

Reads answer as with one process and are spread over both; a write is visible to
the next query on any new connection; streams, SSE and updates work through
whichever process accepts the connection (handed over to the primary); a killed
or lagging query process is restarted; stopping the server leaves no process
and no shared memory behind."""

from __future__ import annotations

import concurrent.futures as cf
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import httpx
import numpy as np
import pytest

from server.processes import classify, pid_alive
from tests.support.server_process import ROOT, ServerProcess

EX = "http://ex.org/"
JSON = "application/sparql-results+json"


def _data(path: Path, n: int = 400) -> Path:
    lines = []
    for i in range(n):
        s = f"<{EX}s{i}>"
        lines.append(f"{s} <{EX}knows> <{EX}s{(i * 7 + 3) % n}> .")
        lines.append(f"{s} <{EX}group> <{EX}g{i % 13}> .")
        lines.append(f'{s} <{EX}name> "name {i}" .')
        lines.append(f'{s} <{EX}age> "{i % 90}"^^<http://www.w3.org/2001/XMLSchema#integer> .')
    path.write_text("\n".join(lines) + "\n")
    return path


QUERIES = [
    f"SELECT ?o WHERE {{ <{EX}s5> ?p ?o }} ORDER BY ?o",
    f"SELECT ?s ?n WHERE {{ ?s <{EX}group> <{EX}g3> . ?s <{EX}name> ?n }} ORDER BY ?s",
    f"SELECT ?a ?c WHERE {{ <{EX}s9> <{EX}knows> ?a . ?a <{EX}knows> ?b . ?b <{EX}knows> ?c }} ORDER BY ?a",
    f"SELECT ?g (COUNT(?s) AS ?n) WHERE {{ ?s <{EX}group> ?g }} GROUP BY ?g ORDER BY ?g",
    f"SELECT ?s WHERE {{ ?s <{EX}age> ?a FILTER(?a > 85) }} ORDER BY ?s",
    f"ASK {{ <{EX}s1> <{EX}knows> ?x }}",
]


def _get(url: str, text: str, accept: str = JSON) -> tuple[int, bytes]:
    req = urllib.request.Request(url + "/sparql?" + urllib.parse.urlencode({"query": text}),
                                 headers={"Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _status(url: str, headers: dict | None = None) -> dict:
    with urllib.request.urlopen(urllib.request.Request(url + "/status", headers=headers or {}), timeout=30) as r:
        return json.loads(r.read())


def _reader(url: str, headers: dict | None = None) -> dict:
    return [p for p in _status(url, headers)["processes"] if p["role"] == "query"][0]


def _wait(pred, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def datafile(tmp_path_factory) -> Path:
    return _data(tmp_path_factory.mktemp("procs") / "g.nt")


@pytest.fixture(scope="module")
def one(datafile):
    with ServerProcess("--data", str(datafile), "--log-level", "warning") as s:
        yield s


@pytest.fixture
def two(datafile):
    with ServerProcess("--data", str(datafile), "--processes", "2", "--log-level", "warning",
                       "--process-sync-timeout", "2") as s:
        _wait(lambda: _reader(s.url)["state"] == "up", what="the query process")
        yield s


def test_classify_sends_only_queries_to_query_processes():
    head = b"Host: x\r\n"
    assert classify(b"GET /sparql?query=ASK%7B%7D HTTP/1.1\r\n" + head + b"\r\n") == "read"
    assert classify(b"GET /sparql?query=ASK%7B%7D HTTP/1.1\r\nHo") is None  # head not complete yet
    assert classify(b"GET /status HTTP/1.1\r\n\r\n") == "primary"
    assert classify(b"GET /queries/q/results HTTP/1.1\r\n\r\n") == "primary"
    assert classify(b"POST /update HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc") == "primary"
    q = b"POST /sparql HTTP/1.1\r\nContent-Type: application/sparql-query\r\nContent-Length: 8\r\n\r\nASK {  }"
    assert classify(q) == "read"
    u = b"POST /sparql HTTP/1.1\r\nContent-Type: application/sparql-update\r\nContent-Length: 3\r\n\r\nabc"
    assert classify(u) == "primary"
    form = b"POST /sparql HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 12\r\n\r\n"
    assert classify(form + b"update=CLEAR") == "primary"
    assert classify(form + b"query=ASK{}x") == "read"
    assert classify(form + b"query=") is None  # the form body is not all here yet
    assert classify(b"PUT /sparql HTTP/1.1\r\n\r\n") == "primary"
    assert classify(b"x" * 70000) == "primary"


def test_concurrent_reads_match_one_process_and_use_both(one, two):
    want = {q: _get(one.url, q) for q in QUERIES}
    assert all(st == 200 for st, _ in want.values())

    def run(k: int) -> list[str]:
        bad = []
        conn = http.client.HTTPConnection("127.0.0.1", two.port, timeout=30)  # keep-alive
        for i in range(30):
            q = QUERIES[(k + i) % len(QUERIES)]
            if i % 2:
                got = _get(two.url, q)  # a new connection
            else:
                conn.request("GET", "/sparql?" + urllib.parse.urlencode({"query": q}), headers={"Accept": JSON})
                r = conn.getresponse()
                got = (r.status, r.read())
            if got != want[q]:
                bad.append(q)
        conn.close()
        return bad

    with cf.ThreadPoolExecutor(8) as ex:
        bad = [b for part in ex.map(run, range(16)) for b in part]
    assert not bad
    # both processes answered some of them (the query process reports every second)
    _wait(lambda: _reader(two.url)["requests"] > 0, what="the query process to report requests")
    st = _status(two.url)
    assert st["processes"][0]["role"] == "primary" and st["processes"][0]["pid"] == st["pid"]
    assert st["store"]["triples"] == _status(one.url)["store"]["triples"]
    for p in st["processes"]:
        assert p["state"] == "up" and p["version"] == st["store"]["sn"]
        assert p["rss_bytes"] > 0 and p["pss_bytes"] > 0
    text = httpx.get(two.url + "/metrics").text
    assert 'jindou_process_up{process="1",role="query"} 1.0' in text
    assert 'jindou_process_requests_total{process="0"}' in text


def test_write_is_visible_to_the_next_query_on_every_new_connection(two):
    with httpx.Client(base_url=two.url, timeout=30) as c:
        for i in range(12):
            # new terms every time: the query process follows the dictionary too
            r = c.post("/update", content=f'INSERT DATA {{ <{EX}new{i}> <{EX}tag{i}> "v{i}" }}',
                       headers={"Content-Type": "application/sparql-update"})
            assert r.status_code == 204, r.text
            ask = f'ASK {{ <{EX}new{i}> <{EX}tag{i}> "v{i}" }}'
            with cf.ThreadPoolExecutor(6) as ex:
                got = list(ex.map(_get, [two.url] * 12, [ask] * 12))
            assert all(st == 200 and json.loads(body)["boolean"] is True for st, body in got), (i, got)
        r = c.post("/update", content=f"DELETE WHERE {{ <{EX}new0> ?p ?o }}",
                   headers={"Content-Type": "application/sparql-update"})
        assert r.status_code == 204
        got = [_get(two.url, f"ASK {{ <{EX}new0> ?p ?o }}") for _ in range(12)]
        assert all(json.loads(body)["boolean"] is False for _, body in got)


def test_one_keep_alive_connection_mixes_queries_updates_and_admin(two):
    # whichever process accepted it, the connection carries on after a hand-over
    conn = http.client.HTTPConnection("127.0.0.1", two.port, timeout=30)
    for i in range(6):
        conn.request("GET", "/sparql?" + urllib.parse.urlencode({"query": f"ASK {{ <{EX}mix{i}> ?p ?o }}"}),
                     headers={"Accept": JSON})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["boolean"] is False
        body = f"INSERT DATA {{ <{EX}mix{i}> <{EX}p> <{EX}o> }}".encode()
        conn.request("POST", "/sparql", body=body, headers={"Content-Type": "application/sparql-update"})
        r = conn.getresponse()
        assert r.status == 204, r.read()
        r.read()
        conn.request("GET", "/status")
        r = conn.getresponse()
        assert r.status == 200 and r.getheader("x-request-id") and json.loads(r.read())["status"] == "ok"
        form = urllib.parse.urlencode({"query": f"ASK {{ <{EX}mix{i}> ?p ?o }}"}).encode()
        conn.request("POST", "/sparql", body=form, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                            "Accept": JSON})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["boolean"] is True
    conn.close()


def test_streams_sse_and_updates_through_any_process(two):
    from tests.test_http_queries_sse import NDJSON, SPARQL_Q, SSE, _nd, _query, _row, _subjects

    with httpx.Client(base_url=two.url, timeout=30) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code in (200, 201)
        r = c.post("/queries", content=_query(), headers=SPARQL_Q)
        assert r.status_code == 201, r.text
    # several subscribers on new connections: each lands on one process or the other
    subs = [SSE(two.url + "/queries/q/results") for _ in range(4)]
    try:
        assert all(s.status == 200 for s in subs)
        for k in range(3):  # every element on a new connection
            r = httpx.post(two.url + "/streams/s", content=_nd([_row(k + 1, 500 + 1000 * k)]), headers=NDJSON)
            assert r.status_code == 202, r.text
        assert httpx.post(two.url + "/streams/s/progress?t=3001").json()["progress"] == 3001
        for s in subs:
            s.wait(lambda s: len(s.of("result")) >= 3)
            assert _subjects(s.of("result")[0]) == [EX + "a1"]
    finally:
        for s in subs:
            s.close()


def test_killed_query_process_is_restarted(two):
    old = _reader(two.url)["pid"]
    os.kill(old, signal.SIGKILL)
    new = _wait(lambda: (p := _reader(two.url))["state"] == "up" and p["pid"] != old and p, what="a restart")
    assert new["restarts"] >= 1 and pid_alive(new["pid"])
    # and it follows writes again
    r = httpx.post(two.url + "/update", content=f"INSERT DATA {{ <{EX}after> <{EX}p> <{EX}o> }}",
                   headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204
    got = [_get(two.url, f"ASK {{ <{EX}after> <{EX}p> <{EX}o> }}") for _ in range(12)]
    assert all(json.loads(body)["boolean"] is True for _, body in got)
    assert _reader(two.url)["version"] == _status(two.url)["store"]["sn"]


def test_lagging_query_process_is_not_served_from(two):
    old = _reader(two.url)["pid"]
    os.kill(old, signal.SIGSTOP)  # alive but frozen: it cannot switch to the next version
    try:
        t0 = time.monotonic()
        r = httpx.post(two.url + "/update", content=f"INSERT DATA {{ <{EX}lag> <{EX}p> <{EX}o> }}",
                       headers={"Content-Type": "application/sparql-update"}, timeout=30)
        assert r.status_code == 204
        assert time.monotonic() - t0 < 15
        assert not pid_alive(old) or _proc_state(old) == "Z"  # killed before the write was acknowledged
        got = [_get(two.url, f"ASK {{ <{EX}lag> <{EX}p> <{EX}o> }}") for _ in range(12)]
        assert all(json.loads(body)["boolean"] is True for _, body in got)
        _wait(lambda: (p := _reader(two.url))["state"] == "up" and p["pid"] != old, what="a restart")
    finally:
        if pid_alive(old):
            os.kill(old, signal.SIGCONT)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except OSError:
        return "?"


def test_stop_leaves_no_process_and_no_shared_memory(datafile):
    s = ServerProcess("--data", str(datafile), "--processes", "3", "--log-level", "warning").__enter__()
    try:
        _wait(lambda: all(p["state"] == "up" for p in _status(s.url)["processes"]), what="3 processes")
        pids = [p["pid"] for p in _status(s.url)["processes"]]
        assert len(set(pids)) == 3
        shm = [d for d in os.listdir("/dev/shm") if d.startswith(f"jindou-procs-{pids[0]}-")]
        assert len(shm) == 1
    finally:
        s.__exit__(None, None, None)
    assert s.proc.returncode in (0, -signal.SIGTERM)
    _wait(lambda: not any(pid_alive(p) for p in pids), timeout=15, what="every process to end")
    assert not os.path.exists(os.path.join("/dev/shm", shm[0]))


def test_processes_refuse_workers(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = subprocess.run([sys.executable, "-c", "from server.cli import main; main()", "serve", "--host",
                          "127.0.0.1", "--port", str(port), "--processes", "2", "--workers", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "--processes cannot be combined with --workers/--cluster" in out.stderr


def test_reader_store_follows_the_writer(tmp_path):
    """A query process's store (mapped read-only) answers as the writer's at every
    version: new terms (dictionary chunks appended, then compacted past 32 chunks),
    named graphs created and dropped, removals; it never interns a term itself."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from engine.database import Database
    from engine.errors import JindouError
    from engine.kv.store import Store
    from server.processes import ReaderStore

    texts = [
        "SELECT ?s ?p ?o WHERE { ?s ?p ?o } ORDER BY ?s ?p ?o",
        "SELECT ?g ?s ?o WHERE { GRAPH ?g { ?s ?p ?o } } ORDER BY ?g ?s ?o",
        f"SELECT ?s (COUNT(?o) AS ?n) WHERE {{ ?s <{EX}p> ?o }} GROUP BY ?s ORDER BY ?s",
    ]
    ops = st.lists(st.tuples(st.sampled_from(["insert", "insert_g", "delete", "drop"]),
                             st.integers(0, 60)), min_size=1, max_size=45)

    @settings(max_examples=6, deadline=None)
    @given(ops)
    @example([("insert", i) for i in range(40)] + [("insert_g", 1), ("drop", 1), ("delete", 3)])
    def run(steps):
        d = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
        writer = Database()
        writer.store = Store(shards=3, data_dir=str(d))
        reader_db = Database()
        reader_db.store = reader = ReaderStore(str(d))
        for kind, k in steps:
            if kind == "insert":
                writer.update(f'INSERT DATA {{ <{EX}n{k}> <{EX}p> "v{k}" . <{EX}n{k}> <{EX}q{k % 5}> <{EX}n{k + 1}> }}')
            elif kind == "insert_g":
                writer.update(f"INSERT DATA {{ GRAPH <{EX}g{k % 4}> {{ <{EX}n{k}> <{EX}p> <{EX}m{k}> }} }}")
            elif kind == "delete":
                writer.update(f"DELETE WHERE {{ <{EX}n{k}> ?p ?o }}")
            else:
                writer.update(f"DROP SILENT GRAPH <{EX}g{k % 4}>")
            assert reader.refresh() == writer.store.snapshot().sn
            for t in texts:
                assert reader_db.query(t).rows() == writer.query(t).rows(), t
        assert len(reader.dictionary) == len(writer.store.dictionary)
        with pytest.raises(JindouError):
            reader.dictionary.encode([f"<{EX}never-seen>"])
        with pytest.raises(JindouError):
            reader_db.update(f"INSERT DATA {{ <{EX}a> <{EX}p> <{EX}b> }}")

    run()


def test_big_bodies_tokens_and_request_ids_through_any_process(tmp_path, datafile):
    with ServerProcess("--data", str(datafile), "--processes", "2", "--log-level", "warning",
                       "--token", "w-secret", "--read-token", "r-secret", "--max-rows", "100") as s:
        _wait(lambda: _reader(s.url, {"Authorization": "Bearer r-secret"})["state"] == "up",
              what="the query process")
        q = urllib.parse.urlencode({"query": f"ASK {{ <{EX}big0> ?p ?o }}"})
        for _ in range(10):  # new connections: reads need the read token in every process
            assert httpx.get(f"{s.url}/sparql?{q}").status_code == 401
            r = httpx.get(f"{s.url}/sparql?{q}", headers={"Authorization": "Bearer r-secret",
                                                          "X-Request-Id": "req-77"})
            assert r.status_code == 200 and r.headers["x-request-id"] == "req-77"
            assert httpx.get(f"{s.url}/sparql?{q}", headers={"Authorization": "Bearer r-secret"}
                             ).headers["x-request-id"]
        # the row budget is every process's: the same refusal on every connection
        many = f"SELECT ?s ?o WHERE {{ ?s <{EX}knows> ?o }}"
        answers = {(r.status_code, r.json().get("error"))
                   for r in (httpx.get(f"{s.url}/sparql", params={"query": many},
                                       headers={"Authorization": "Bearer r-secret", "Accept": JSON})
                             for _ in range(10))}
        assert len(answers) == 1 and next(iter(answers))[0] >= 400, answers
        # a body far larger than one hand-over message, on new connections, some with Expect
        body = "".join(f'<{EX}big{i}> <{EX}p> "{"x" * 200} {i}" .\n' for i in range(3000)).encode()
        assert len(body) > 500_000
        for k in range(4):
            headers = {"Content-Type": "application/n-triples", "Authorization": "Bearer w-secret"}
            if k % 2:
                headers["Expect"] = "100-continue"
            r = httpx.put(f"{s.url}/store?graph={EX}big{k}", content=body, headers=headers, timeout=60)
            assert r.status_code in (201, 204), r.text
            assert httpx.put(f"{s.url}/store?graph={EX}nope", content=body, timeout=60,
                             headers={"Content-Type": "application/n-triples"}).status_code == 401
        last = f"ASK {{ GRAPH <{EX}big3> {{ <{EX}big2999> <{EX}p> ?o }} }}"
        for _ in range(8):
            r = httpx.get(f"{s.url}/sparql", params={"query": last},
                          headers={"Authorization": "Bearer r-secret", "Accept": JSON})
            assert r.json()["boolean"] is True


def test_with_data_dir_the_store_stays_and_the_group_goes(tmp_path, datafile):
    d = tmp_path / "data"
    with ServerProcess("--data-dir", str(d), "--data", str(datafile), "--processes", "2",
                       "--log-level", "warning") as s:
        _wait(lambda: _reader(s.url)["state"] == "up", what="the query process")
        pid = _status(s.url)["pid"]
        r = httpx.post(s.url + "/update", content=f"INSERT DATA {{ <{EX}kept> <{EX}p> <{EX}o> }}",
                       headers={"Content-Type": "application/sparql-update"})
        assert r.status_code == 204
        got = [_get(s.url, f"ASK {{ <{EX}kept> <{EX}p> <{EX}o> }}") for _ in range(10)]
        assert all(json.loads(body)["boolean"] is True for _, body in got)
        assert _status(s.url)["store"]["persistent"] is True
    assert (d / "MANIFEST.json").exists()
    assert not [x for x in os.listdir("/dev/shm") if x.startswith(f"jindou-procs-{pid}-")]
    with ServerProcess("--data-dir", str(d), "--log-level", "warning") as s:
        assert json.loads(_get(s.url, f"ASK {{ <{EX}kept> <{EX}p> <{EX}o> }}")[1])["boolean"] is True


def test_a_killed_primary_takes_its_query_processes_and_the_next_start_cleans_up(datafile):
    s = ServerProcess("--data", str(datafile), "--processes", "2", "--log-level", "warning").__enter__()
    try:
        _wait(lambda: _reader(s.url)["state"] == "up", what="the query process")
        primary, reader = s.proc.pid, _reader(s.url)["pid"]
        shm = [d for d in os.listdir("/dev/shm") if d.startswith(f"jindou-procs-{primary}-")]
        os.kill(primary, signal.SIGKILL)
        s.proc.wait(10)
        _wait(lambda: not pid_alive(reader), timeout=15, what="the query process to die with the primary")
    finally:
        s.__exit__(None, None, None)
    assert shm and os.path.exists(os.path.join("/dev/shm", shm[0]))  # nobody could clean up
    with ServerProcess("--data", str(datafile), "--processes", "2", "--log-level", "warning"):
        assert not os.path.exists(os.path.join("/dev/shm", shm[0]))  # the next start did


def test_remap_keeps_answers_and_writes_continue(tmp_path, datafile):
    """Store.remap swaps the primary's heap arrays (graph and dictionary) for the mapped
    packs: same answers, later writes (new terms, removals) and a reopen still agree."""
    from engine.database import Database
    from engine.kv.store import Store

    db = Database()
    db.store = Store(shards=3, data_dir=str(tmp_path / "d"))
    db.load_file(str(datafile), progress=False)
    before = {q: db.query(q).rows() for q in QUERIES[:5]}
    db.store.remap()
    assert isinstance(db.store.dictionary._blob, np.ndarray) and not db.store.dictionary._blob.flags.writeable
    assert {q: db.query(q).rows() for q in QUERIES[:5]} == before
    db.update(f'INSERT DATA {{ <{EX}s5> <{EX}name> "renamed" . <{EX}fresh> <{EX}group> <{EX}g3> }}')
    db.update(f"DELETE DATA {{ <{EX}s1> <{EX}knows> <{EX}s10> }}")
    after = {q: db.query(q).rows() for q in QUERIES[:5]}
    assert after[QUERIES[0]] != before[QUERIES[0]]
    again = Database()
    again.store = Store(shards=3, data_dir=str(tmp_path / "d"))
    assert {q: again.query(q).rows() for q in QUERIES[:5]} == after


def test_a_wedged_query_process_is_restarted_without_any_write(datafile):
    with ServerProcess("--data", str(datafile), "--processes", "2", "--log-level", "warning",
                       "--query-timeout", "1", "--process-sync-timeout", "1") as s:
        _wait(lambda: _reader(s.url)["state"] == "up", what="the query process")
        old = _reader(s.url)["pid"]
        os.kill(old, signal.SIGSTOP)  # its event loop stops: no reports, no answers
        try:
            _wait(lambda: (p := _reader(s.url))["state"] == "up" and p["pid"] != old, timeout=30,
                  what="a restart of the silent process")
            assert not pid_alive(old) or _proc_state(old) == "Z"
        finally:
            if pid_alive(old):
                os.kill(old, signal.SIGCONT)


def test_pipelined_behind_lane_answers_stays_on_the_connection(two):
    """A request pipelined behind a plain lane query (server/lane.py) answered by a
    query process is parsed there, as any pipelined request: a non-query gets 503 and
    the connection closes (it cannot be handed over with answers already written on
    it); on the primary it is answered."""
    import socket

    q = urllib.parse.urlencode({"query": f"ASK {{ <{EX}pipe> ?p ?o }}"})
    lane = f"GET /sparql?{q} HTTP/1.1\r\nHost: x\r\nAccept: {JSON}\r\n\r\n".encode()
    status = b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n"
    socks = [socket.create_connection(("127.0.0.1", two.port), timeout=30) for _ in range(6)]
    seen = []
    try:
        for s in socks:
            s.sendall(lane + status + lane)
            buf, got = b"", []
            while len(got) < 3:
                while b"\r\n\r\n" not in buf:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                if b"\r\n\r\n" not in buf:
                    break  # closed
                head, _, buf = buf.partition(b"\r\n\r\n")
                n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
                while len(buf) < n:
                    buf += s.recv(65536)
                got.append((int(head.split()[1]), json.loads(buf[:n])))
                buf = buf[n:]
            assert got[0] == (200, {"head": {}, "boolean": False})
            if got[1][0] == 503:  # a query process: refused, then closed
                assert got[1][1]["error"] == "unavailable" and len(got) == 2
            else:
                assert got[1][0] == 200 and got[1][1]["status"] == "ok" and got[2] == got[0]
            seen.append(got[1][0])
    finally:
        for s in socks:
            s.close()
    assert 503 in seen and 200 in seen  # connections on both processes


def test_a_repeated_text_sees_every_write_in_the_query_processes(two):
    """The lane's kept answers of repeated texts (server/api/sparql.py LaneAnswers) in
    the query processes: an update between identical requests is seen at once."""
    text = f"ASK {{ <{EX}kept> <{EX}p> ?o }} # the same text every time"
    sel = f"SELECT ?o WHERE {{ <{EX}kept> <{EX}p> ?o }} # the same text every time"
    for want in (False, True, False):
        got = [_get(two.url, text) for _ in range(8)]
        assert all(st == 200 and json.loads(body)["boolean"] is want for st, body in got), (want, got)
        rows = [json.loads(_get(two.url, sel)[1])["results"]["bindings"] for _ in range(8)]
        assert all(r == ([{"o": {"type": "uri", "value": f"{EX}v"}}] if want else []) for r in rows), rows
        op = "DELETE" if want else "INSERT"
        r = httpx.post(two.url + "/update", content=f"{op} DATA {{ <{EX}kept> <{EX}p> <{EX}v> }}",
                       headers={"Content-Type": "application/sparql-update"}, timeout=30)
        assert r.status_code == 204, r.text
