"""The distributed store across "hosts": each `jindou worker` runs in its own network namespace
(tests/support/netns.py) on its own 198.18 address, the serving process runs here and reaches them
only over the veths, as it would reach other machines. Answers are checked against pyoxigraph on
the same data; a worker killed with SIGKILL makes queries fail fast with a 503 naming it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.support import netns
from tests.support.netns import Hosts
from tests.support.server_process import ServerProcess

pytestmark = pytest.mark.skipif(netns.unavailable_reason() is not None,
                                reason=str(netns.unavailable_reason()))

ROOT = Path(__file__).resolve().parents[1]
PORT = 7701                                   # every host has its own address: one port for all
EX = "http://example.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"


def _data() -> str:
    """A small social graph: 60 people (name, age, city, 2-3 acquaintances), 6 cities (name)."""
    lines = []
    for c in range(6):
        lines.append(f'<{EX}city{c}> <{EX}name> "City {c}" .')
    for p in range(60):
        s = f"<{EX}p{p}>"
        lines.append(f'{s} <{EX}name> "Person {p}" .')
        lines.append(f'{s} <{EX}age> "{18 + p * 7 % 50}"^^<{XSD}integer> .')
        lines.append(f"{s} <{EX}livesIn> <{EX}city{p * 5 % 6}> .")
        for d in (1, 7, 13)[: 2 + p % 2]:
            lines.append(f"{s} <{EX}knows> <{EX}p{(p * 3 + d) % 60}> .")
    return "\n".join(lines) + "\n"


QUERIES = {
    "star": f"""PREFIX : <{EX}>
        SELECT ?p ?n ?a ?c WHERE {{ ?p :name ?n ; :age ?a ; :livesIn ?c . FILTER(?a > 40) }}""",
    "chain": f"""PREFIX : <{EX}>
        SELECT ?a ?b ?c WHERE {{ ?a :knows ?b . ?b :knows ?c . ?c :livesIn :city2 }}""",
    "count": f"""PREFIX : <{EX}>
        SELECT ?c (COUNT(*) AS ?n) WHERE {{ ?p :livesIn ?c . ?p :knows ?q }} GROUP BY ?c""",
    "count-all": "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
}


def _oxigraph_rows(query: str, data: str) -> list[tuple]:
    import pyoxigraph as ox

    store = ox.Store()
    store.load(data, format=ox.RdfFormat.N_TRIPLES)
    res = store.query(query)
    names = [v.value for v in res.variables]
    rows = []
    for sol in res:
        row = []
        for n in names:
            t = sol[n]
            if t is None:
                row.append(None)
            elif isinstance(t, ox.NamedNode):
                row.append(("uri", t.value))
            else:
                row.append(("literal", t.value, t.datatype.value if not t.language else None, t.language))
        rows.append(tuple(row))
    return sorted(rows, key=repr)


def _json_rows(body: dict) -> list[tuple]:
    names = body["head"]["vars"]
    rows = []
    for b in body["results"]["bindings"]:
        row = []
        for n in names:
            t = b.get(n)
            if t is None:
                row.append(None)
            elif t["type"] == "uri":
                row.append(("uri", t["value"]))
            else:
                lang = t.get("xml:lang")
                row.append(("literal", t["value"], None if lang else t.get("datatype", XSD + "string"), lang))
        rows.append(tuple(row))
    return sorted(rows, key=repr)


def _get(url: str, timeout: float = 30) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Accept": "application/sparql-results+json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _query(server: ServerProcess, q: str, timeout: float = 30) -> tuple[int, bytes]:
    return _get(f"{server.url}/sparql?" + urllib.parse.urlencode({"query": q}), timeout)


def _status(server: ServerProcess) -> dict:
    code, body = _get(server.url + "/status")
    assert code == 200, body
    return json.loads(body)


def _wait_listening(address: str, port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker on {address} exited with {proc.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"worker on {address} did not listen in {timeout}s:\n{log.read_text()}")


@contextmanager
def cluster(n: int, tmp: Path, *serve_args: str):
    """n workers on n hosts and a serving process here over them; yields (server, hosts, procs)."""
    with ExitStack() as stack:
        hosts = stack.enter_context(Hosts(n))
        procs = []
        for h in hosts:
            log = tmp / f"worker{h.index}.log"
            out = stack.enter_context(open(log, "wb"))
            p = h.popen([sys.executable, "-m", "server.cli", "worker", "--listen", f"{h.address}:{PORT}",
                         "--data-dir", str(tmp / f"worker{h.index}")],
                        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            procs.append((p, log))
        for h, (p, log) in zip(hosts, procs, strict=True):
            _wait_listening(h.address, PORT, p, log)
        spec = tmp / "cluster.toml"
        spec.write_text("".join(f'[[worker]]\naddress = "{h.address}:{PORT}"\n\n' for h in hosts))
        server = stack.enter_context(ServerProcess("--cluster", str(spec), *serve_args, startup_timeout=120))
        yield server, hosts, [p for p, _ in procs]


def _load(server: ServerProcess, data: str) -> None:
    req = urllib.request.Request(server.url + "/store?default", data=data.encode(), method="POST",
                                 headers={"Content-Type": "application/n-triples"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status in (200, 201, 204)


def _assert_removed(hosts: Hosts, procs: list[subprocess.Popen], server: ServerProcess) -> None:
    present = set(netns.namespaces()) | set(netns.links())
    assert not [n for h in hosts.hosts for n in (h.netns, h.link) if n in present]
    assert all(p.poll() is not None for p in procs)
    assert server.proc.poll() is not None


@pytest.mark.parametrize("transport", ["auto", "flight"])
def test_queries_match_oxigraph_and_status(tmp_path, transport):
    data = _data()
    with cluster(3, tmp_path, "--cluster-transport", transport) as (server, hosts, procs):
        _load(server, data)
        for name, q in QUERIES.items():
            code, body = _query(server, q)
            assert code == 200, (name, body[:500])
            got, want = _json_rows(json.loads(body)), _oxigraph_rows(q, data)
            assert want, f"{name}: the oracle answers nothing, the query tests nothing"
            assert got == want, name
        total = data.count("\n")
        deadline = time.monotonic() + 3               # worker figures may lag by one status ping
        while True:
            workers = {w["address"]: w for w in _status(server)["workers"]}
            if sum(w["triples"] or 0 for w in workers.values()) == total or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert set(workers) == {f"{h.address}:{PORT}" for h in hosts}
        for h, p in zip(hosts, procs, strict=True):
            w = workers[f"{h.address}:{PORT}"]
            assert w["state"] == "up", w
            assert w["pid"] == p.pid, w                  # the process we started in that namespace
            assert w["triples"] > 0, w                   # the data really is spread over every host
            if transport != "auto":
                assert w["transport"] == transport, w
        # each triple is held (as an OUT edge) by exactly one worker
        assert sum(w["triples"] for w in workers.values()) == total
    _assert_removed(hosts, procs, server)


def test_killed_worker_fails_queries_fast_with_its_address(tmp_path):
    data = _data()
    q = QUERIES["star"]
    want = _oxigraph_rows(q, data)
    with cluster(2, tmp_path) as (server, hosts, procs):
        _load(server, data)
        code, body = _query(server, q)
        assert code == 200 and _json_rows(json.loads(body)) == want
        victim = f"{hosts[1].address}:{PORT}"
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait(timeout=10)
        killed = time.monotonic()
        while True:
            t0 = time.monotonic()
            code, body = _query(server, q, timeout=10)
            assert time.monotonic() - t0 < 5, "a query waited on the dead worker"
            if code == 503:
                break
            # before the coordinator notices, an answer may only be the right one
            assert code == 200 and _json_rows(json.loads(body)) == want, (code, body[:500])
            assert time.monotonic() - killed < 5, "no 503 within 5 s of the kill"
            time.sleep(0.2)
        assert victim in body.decode(errors="replace"), body[:500]
        st = {w["address"]: w for w in _status(server)["workers"]}
        assert st[victim]["state"] != "up"
        assert st[f"{hosts[0].address}:{PORT}"]["state"] == "up"
        code, body = _query(server, QUERIES["count-all"], timeout=10)
        assert code == 503 and victim in body.decode(errors="replace")
    _assert_removed(hosts, procs, server)
