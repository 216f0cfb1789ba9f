"""Memory bombs under the per-query memory budget and the response bound.

* the real server (subprocess, small ``--query-memory`` and
  ``--max-response-bytes``) answers each memory-bomb query with a clean JSON
  error, keeps answering, and its peak resident memory stays far below what
  the bombs would take unbounded;
* the budget is checked before the memory is allocated (tracemalloc sees
  numpy's allocations; a subprocess's peak RSS for a whole query);
* the serializers refuse an answer over the bound before building it, in
  every format, and render a long variable name once.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tracemalloc
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from engine import formats as F
from engine.errors import MemoryBudgetExceeded, ResponseTooLarge
from engine.exec import serialize as ser
from engine.exec.bindings import Bindings, cross_pairs, join, key_join
from engine.exec.context import MemoryBudget, enter_budget, leave_budget
from tests.support.server_process import ROOT, ServerProcess

EX = "http://example.org/"
MiB = 1 << 20


def graph_nt(n_vertices: int = 1500, n_preds: int = 8, n_triples: int = 12_000, seed: int = 3) -> str:
    """A random graph dense enough that OPTIONAL chains and 2-hop patterns fan out."""
    rnd = random.Random(seed)
    seen = set()
    lines = []
    while len(seen) < n_triples:
        t = (rnd.randrange(n_vertices), rnd.randrange(n_preds), rnd.randrange(n_vertices))
        if t in seen:
            continue
        seen.add(t)
        lines.append(f"<{EX}v{t[0]}> <{EX}p{t[1]}> <{EX}v{t[2]}> .")
    for i in range(0, n_vertices, 3):
        lines.append(f'<{EX}v{i}> <{EX}name> "vertex {i}" .')
    return "\n".join(lines) + "\n"


LONG = "v" * 100_000  # a legal variable name; JSON/XML write it once per row

BOMBS = {
    "long_variable_name": f"SELECT ?{LONG} WHERE {{ ?s ?p ?{LONG} }}",
    "optional_chain": f"SELECT * WHERE {{ ?a <{EX}p0> ?b OPTIONAL {{ ?b ?q1 ?c OPTIONAL {{ ?c ?q2 ?d "
                      f"OPTIONAL {{ ?d ?q3 ?e OPTIONAL {{ ?e ?q4 ?f }} }} }} }} }}",
    "cross_product": f"SELECT * WHERE {{ ?a <{EX}p0> ?b . ?c <{EX}p1> ?d }}",
    "cross_product_groups": f"SELECT * WHERE {{ {{ ?a <{EX}p0> ?b }} {{ ?c <{EX}p1> ?d }} UNION {{ ?c <{EX}p2> ?d }} }}",
    "three_hops": "SELECT * WHERE { ?a ?p ?b . ?b ?q ?c . ?c ?r ?d }",
    "group_concat_everything": "SELECT (GROUP_CONCAT(CONCAT(STR(?a), STR(?c))) AS ?g) WHERE { ?a ?p ?b . ?b ?q ?c }",
    "concat_growth": "SELECT ?x WHERE { ?s ?p ?o BIND(CONCAT(STR(?s), STR(?o), STR(?s), STR(?o)) AS ?x1) "
                     "BIND(CONCAT(?x1, ?x1, ?x1, ?x1) AS ?x2) BIND(CONCAT(?x2, ?x2, ?x2, ?x2) AS ?x3) "
                     "BIND(CONCAT(?x3, ?x3, ?x3, ?x3) AS ?x) }",
    "construct_three_hops": f"CONSTRUCT {{ ?a <{EX}r> ?d . ?d <{EX}r> ?a }} WHERE {{ ?a ?p ?b . ?b ?q ?c . ?c ?s ?d }}",
    "distinct_order_two_hops": "SELECT DISTINCT ?a ?b ?c WHERE { ?a ?p ?b . ?b ?q ?c } ORDER BY ?c ?b",
}


def _post(url: str, query: str, accept: str = "application/sparql-results+json, text/turtle;q=0.9"):
    req = urllib.request.Request(url + "/sparql", data=query.encode(), method="POST",
                                 headers={"Content-Type": "application/sparql-query", "Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def bomb_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("mem") / "g.nt"
    data.write_text(graph_nt())
    with ServerProcess("--data", str(data), "--no-progress", "--query-memory", str(24 * MiB),
                       "--max-response-bytes", str(4 * MiB), "--max-rows", "100000000",
                       "--query-timeout", "120") as srv:
        yield srv


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("name", list(BOMBS))
def test_memory_bomb_is_refused_cleanly(bomb_server, name):
    status, body = _post(bomb_server.url, BOMBS[name])
    assert status == 422, (status, body[:300])  # deterministic: not retryable
    doc = json.loads(body)
    assert doc["error"] in ("memory_budget", "response_too_large"), doc
    assert "MiB" in doc["detail"]
    # the server keeps answering, with the same data
    status, body = _post(bomb_server.url, f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{EX}p0> ?o }}")
    assert status == 200
    assert int(json.loads(body)["results"]["bindings"][0]["n"]["value"]) > 1000
    # unbounded, these take gigabytes (the long name alone: 12k rows x 100 kB); a
    # 24 MiB budget keeps the whole server far below that
    assert _peak_rss_mib(bomb_server.proc.pid) < 700


def test_small_answers_pass_under_the_budget(bomb_server):
    status, body = _post(bomb_server.url, f"SELECT ?o WHERE {{ <{EX}v3> ?p ?o }} LIMIT 5")
    assert status == 200
    assert json.loads(body)["results"]["bindings"]
    status, body = _post(bomb_server.url, f"SELECT ?{'w' * 5000} WHERE {{ <{EX}v3> ?p ?{'w' * 5000} }}")
    assert status == 200
    rows = json.loads(body)["results"]["bindings"]
    assert rows and all(list(r) == ["w" * 5000] for r in rows)


# ---------------------------------------------------------------- charged before allocation


def _traced_peak(fn) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    err = None
    try:
        fn()
    except MemoryBudgetExceeded as e:
        err = e
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, err


def test_join_budget_is_checked_before_allocating():
    lk = np.zeros(20_000, dtype=np.int64)  # every pair matches: 400M pairs, 3.2 GB per index array
    rk = np.zeros(20_000, dtype=np.int64)
    token = enter_budget(MemoryBudget(8 * MiB))
    try:
        peak, err = _traced_peak(lambda: key_join(lk, rk))
        assert isinstance(err, MemoryBudgetExceeded)
        assert peak < 2 * MiB
        peak, err = _traced_peak(lambda: cross_pairs(30_000, 30_000))
        assert isinstance(err, MemoryBudgetExceeded)
        assert peak < 2 * MiB
        a = Bindings({"x": np.arange(3000, dtype=np.int64)})
        b = Bindings({"y": np.arange(3000, dtype=np.int64)})
        peak, err = _traced_peak(lambda: join(a, b))
        assert isinstance(err, MemoryBudgetExceeded)
        assert peak < 2 * MiB
        # a join within the budget goes through
        small = join(Bindings({"x": np.arange(50, dtype=np.int64)}), Bindings({"y": np.arange(50, dtype=np.int64)}))
        assert small.n == 2500
    finally:
        leave_budget(token)
    # no running budget: unbounded as before
    assert len(cross_pairs(300, 300)[0]) == 90_000


_PROBE = r"""
import sys
from engine.database import Database
from engine.errors import MemoryBudgetExceeded

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

db = Database(shards=2, query_memory=int(sys.argv[2]), max_rows=10**12)
db.load_data(open(sys.argv[1]).read(), "application/n-triples")
db.query("SELECT * WHERE { ?a <http://example.org/p0> ?b } LIMIT 1")
before = hwm()
try:
    r = db.query("SELECT * WHERE { ?a <http://example.org/p0> ?b . ?c <http://example.org/p1> ?d . "
                 "?e <http://example.org/p2> ?f }")
    print("rows", len(r))
except MemoryBudgetExceeded as e:
    print("refused", hwm() - before, e)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_cross_product_refused_before_it_grows(tmp_path):
    """1500^3 rows x 6 columns would be 160 GB; with a 16 MiB budget the process
    peak grows by a few MiB at most."""
    data = tmp_path / "g.nt"
    data.write_text(graph_nt())
    out = subprocess.run([sys.executable, "-c", _PROBE, str(data), str(16 * MiB)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[0] == "refused", out.stdout
    assert int(words[1]) < 64 * MiB


def test_query_memory_setting_reaches_the_database(tmp_path):
    from engine.database import Database  # noqa: PLC0415

    db = Database(shards=2, query_memory=4 * MiB, max_rows=10**12)
    db.load_data(graph_nt(400, 4, 3000), "application/n-triples")
    with pytest.raises(MemoryBudgetExceeded):
        db.query("SELECT * WHERE { ?a ?p ?b . ?c ?q ?d }")
    # 0 = unlimited; a per-call override
    assert len(db.query("SELECT * WHERE { ?a ?p ?b . ?c ?q ?d } LIMIT 3", query_memory=0)) == 3
    assert db.status()["query_memory"] == 4 * MiB
    # computed strings count: a term overlay past the budget is refused
    with pytest.raises(MemoryBudgetExceeded):
        db.query('SELECT ?x WHERE { ?s ?p ?o BIND(CONCAT(STR(?s), STR(?o), "' + "z" * 2000 + '") AS ?x) }')


def test_cli_flags():
    from server.cli import build_parser, config_from_args  # noqa: PLC0415

    a = build_parser().parse_args(["serve", "--query-memory", "1234", "--max-response-bytes", "5678"])
    cfg = config_from_args(a)
    assert (cfg.query_memory, cfg.max_response_bytes) == (1234, 5678)
    d = config_from_args(build_parser().parse_args(["serve"]))
    assert (d.query_memory, d.max_response_bytes) == (768 << 20, 256 << 20)


# ---------------------------------------------------------------- serializer bound


def _result(n: int = 2000, name: str = "x", unbound_every: int = 0):
    from engine.database import Database  # noqa: PLC0415

    db = Database(shards=1)
    db.load_data("".join(f'<{EX}s{i}> <{EX}p> "value number {i}" .\n' for i in range(n)), "application/n-triples")
    q = f"SELECT ?s ?{name} WHERE {{ ?s <{EX}p> ?o BIND(IF(STRENDS(STR(?s), \"0\"), ?nothing, ?o) AS ?{name}) }}" \
        if unbound_every else f"SELECT ?s ?{name} WHERE {{ ?s <{EX}p> ?{name} }}"
    return db.query(q)


@pytest.mark.parametrize("mt", [F.SPARQL_JSON, F.SPARQL_XML, F.CSV, F.TSV])
def test_select_serializers_refuse_over_the_bound(mt):
    res = _result()
    full = ser.serialize(res, mt)
    assert ser.serialize(res, mt, max_bytes=len(full) + 64) == full
    with pytest.raises(ResponseTooLarge):
        ser.serialize(res, mt, max_bytes=len(full) // 2)


@pytest.mark.parametrize("mt", [F.NTRIPLES, F.TURTLE, F.JSONLD, F.RDFXML])
def test_graph_serializers_refuse_over_the_bound(mt):
    from engine.database import Database  # noqa: PLC0415

    db = Database(shards=1)
    db.load_data(graph_nt(300, 3, 2000), "application/n-triples")
    res = db.query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }")
    with pytest.raises(ResponseTooLarge):
        ser.serialize(res, mt, max_bytes=20_000)
    assert ser.serialize(res, mt, max_bytes=64 * MiB)


def test_long_variable_name_rendered_once_and_bounded():
    name = "n" * 300_000
    res = _result(1000, name, unbound_every=10)
    # 1000 rows x 300 kB = 300 MB of JSON: refused from its computed size, before
    # anything of that size (or one name copy per distinct term) is built
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLarge):
            ser.serialize(res, F.SPARQL_JSON, max_bytes=16 * MiB)
        with pytest.raises(ResponseTooLarge):
            ser.serialize(res, F.SPARQL_XML, max_bytes=16 * MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MiB
    # under the bound the long-name path writes the same document as row dicts would
    few = _result(60, "m" * 1000, unbound_every=10)
    doc = json.loads(ser.serialize(few, F.SPARQL_JSON, max_bytes=64 * MiB))
    got = [{k: v["value"] for k, v in b.items()} for b in doc["results"]["bindings"]]
    want = [{k: (v[1:-1] if v[0] == "<" else v[1:v.rfind('"')]) for k, v in r.items()} for r in few.rows()]
    assert got == want
    assert any(len(r) == 1 for r in got) and any(len(r) == 2 for r in got)
    xml = ser.serialize(few, F.SPARQL_XML, max_bytes=64 * MiB).decode()
    assert xml.count('<binding name="' + "m" * 1000 + '">') == sum(len(r) == 2 for r in got)


def test_csv_long_name_costs_its_size_once():
    name = "c" * 200_000
    res = _result(2000, name)
    body = ser.serialize(res, F.CSV, max_bytes=4 * MiB)
    assert body.count(name.encode()) == 1


def test_update_where_is_under_the_budget():
    from engine.database import Database  # noqa: PLC0415

    db = Database(shards=1, query_memory=2 * MiB, max_rows=10**12)
    db.load_data("".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i % 50}> .\n" for i in range(3000)), "application/n-triples")
    with pytest.raises(MemoryBudgetExceeded):
        db.update(f"INSERT {{ ?a <{EX}q> ?c }} WHERE {{ ?a ?p ?b . ?c ?q ?d }}")
    assert len(db.query(f"SELECT * WHERE {{ ?a <{EX}q> ?c }}")) == 0  # nothing applied
    db.update(f"INSERT {{ ?a <{EX}q> ?b }} WHERE {{ ?a <{EX}p> ?b }}")
    assert len(db.query(f"SELECT * WHERE {{ ?a <{EX}q> ?c }}")) == 3000


@pytest.mark.parametrize("query", [
    "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }",
    f"CONSTRUCT {{ ?a <{EX}r> ?c . ?c a <{EX}T> }} WHERE {{ ?a <{EX}p0> ?b . ?b ?q ?c }}",
    f"DESCRIBE <{EX}v3>",
])
def test_turtle_size_is_computed_exactly(query):
    """Turtle is much shorter than N-Triples: its bound uses its own size, so a
    graph that fits is never refused."""
    from engine.database import Database  # noqa: PLC0415

    db = Database(shards=1)
    db.load_data(graph_nt(300, 3, 2000), "application/n-triples")
    db.load_data(f'<{EX}v3> a <{EX}T> ; <{EX}lbl> "é\\"x"@fr , "2"^^<http://www.w3.org/2001/XMLSchema#integer> .',
                 "text/turtle")
    res = db.query(query)
    body = ser.serialize(res, F.TURTLE)
    assert ser.serialize(res, F.TURTLE, max_bytes=len(body)) == body
    with pytest.raises(ResponseTooLarge):
        ser.serialize(res, F.TURTLE, max_bytes=len(body) - 1)
