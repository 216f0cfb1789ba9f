"""Pipelines on a real local Spark session (shared by the module) against a real
`jindou serve` subprocess: NATS JetStream (real nats-server), a TCP socket, and the
CityBench streams feeding registered CityBench queries."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.parse
import urllib.request

import pytest

from pipeline.expr import SpecError
from pipeline.injector import HttpInjector
from pipeline.job import Pipeline
from pipeline.spec import parse_spec
from tests.pipeline_support import Nats, Server, http, wait_for

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def tmp_mod(tmp_path_factory):
    return tmp_path_factory.mktemp("pipeline-spark")


@pytest.fixture(scope="module")
def spark():
    from pipeline.job import spark_session

    s = spark_session("local[2]", "jindou-pipeline-tests")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def server(tmp_mod):
    from pipeline.citybench import citybench_root

    args = ["--retain", "20000"]
    try:
        sr = citybench_root() / "dataset" / "SensorRepository.n3"
        args += ["--graph", f"http://127.0.0.1:9000/WebGlCity/RDF/SensorRepository.rdf={sr}"]
    except FileNotFoundError:
        pass
    s = Server(tmp_mod, None, args)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def nats_server(tmp_mod):
    n = Nats(tmp_mod)
    yield n
    n.stop()


def _run_once(spec_doc, base, server, spark):
    spec = parse_spec(spec_doc, base)
    pipe = Pipeline(spec, spec_doc, HttpInjector(server.url), master="local[2]", once=True, spark=spark)
    pipe.start()
    rc = pipe.wait(threading.Event())
    pipe.stop()
    return rc, pipe


SENSOR_MAPPING = {
    "csv": {"header": False, "columns": ["id", "t_ms", "temp"]},
    "timestamp": "t_ms",
    "nodes": [{"subject": "ex:reading/{id}", "properties": [
        ["ex:temperature", {"value": "float(temp)", "datatype": "xsd:double"}],
        ["ex:sensor", "ex:sensor/{id}"]]}]}


async def _publish(url, stream, msgs, create=None):
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    for name, subjects in (create or {}).items():
        await js.add_stream(name=name, subjects=subjects)
    for subject, payload in msgs:
        await js.publish(subject, payload)
    info = await js.stream_info(stream)
    await nc.close()
    return info.state.last_seq


async def _read_all(url, stream):
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    info = await js.stream_info(stream)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        out.append(json.loads((await js.get_msg(stream, seq)).data))
    await nc.close()
    return out


def test_jetstream_source_resumes_from_committed_sequence(tmp_mod, server, spark, nats_server):
    msgs = [(f"ev.{'a' if i % 2 else 'b'}", f"r{i},{1_000_000 + i * 10},{20 + i % 7}".encode()) for i in range(300)]
    msgs.insert(150, ("ev.a", b"r-bad,not-a-time,1"))
    last = asyncio.run(_publish(nats_server.url, "EVENTS", msgs,
                                create={"EVENTS": ["ev.>"], "DEAD": ["dead.>"]}))
    assert last == 301
    ckpt = tmp_mod / "js-ckpt"
    doc = {"name": "js", "source": {"kind": "jetstream", "url": nats_server.url, "stream": "EVENTS",
                                    "subjects": ["ev.>"], "max_records_per_trigger": 120},
           "checkpoint": str(ckpt), "dead_letter": {"subject": "dead.js", "url": nats_server.url},
           "prefixes": {"ex": "http://ex.org/"},
           "mappings": [dict(SENSOR_MAPPING, name="a", match="ev.a", stream="js_a", stream_iri="ex:js_a"),
                        dict(SENSOR_MAPPING, name="b", match="ev.b", stream="js_b", stream_iri="ex:js_b")]}
    rc, pipe = _run_once(doc, tmp_mod, server, spark)
    assert rc == 0
    st = server.streams()
    assert st["js_a"]["accepted"] == 150 * 2 and st["js_b"]["accepted"] == 150 * 2
    c = pipe.counters.doc
    assert c["batches"] >= 3                       # 301 sequence numbers, at most 120 a batch
    assert c["triples"] == 600 and c["dead_letters"] == 1
    offsets = sorted(ckpt.glob("offsets/[0-9]*"), key=lambda p: int(p.name))
    assert json.loads(offsets[-1].read_text().strip().splitlines()[-1]) == {"seq": 301}
    dead = asyncio.run(_read_all(nats_server.url, "DEAD"))
    assert len(dead) == 1 and dead[0]["source"] == "ev.a" and dead[0]["stream"] == "js_a"
    assert "not a number 'not-a-time'" in dead[0]["reason"]
    assert dead[0]["rec"] >> 16 == 151             # the JetStream sequence number of the bad message

    # more messages; the same checkpoint reads only what comes after sequence 301
    more = [("ev.a", f"n{i},{2_000_000 + i},{i}".encode()) for i in range(40)]
    assert asyncio.run(_publish(nats_server.url, "EVENTS", more)) == 341
    rc, pipe = _run_once(doc, tmp_mod, server, spark)
    assert rc == 0
    st = server.streams()
    assert st["js_a"]["accepted"] == 150 * 2 + 80 and st["js_b"]["accepted"] == 300
    assert pipe.counters.doc["triples"] == 680 and pipe.counters.doc["duplicate_batches"] == 0
    # the progress made it to /status and /metrics
    status = http("GET", server.url + "/status")
    assert status["pipelines"]["js"]["counters"]["triples"] == 680
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert 'jindou_pipeline_records_total{kind="dead_letters",pipeline="js"} 1.0' in metrics
    assert 'jindou_pipeline_records_total{kind="triples",pipeline="js"} 680.0' in metrics


def test_socket_source(tmp_mod, server, spark):
    lines = [f"s{i},{5_000_000 + i * 100},{i % 30}" for i in range(200)] + ["s-bad,5099999,warm"]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    conns = []

    def serve():
        conn, _ = srv.accept()
        conns.append(conn)
        conn.sendall(("\n".join(lines) + "\n").encode())

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    doc = {"name": "sock", "trigger_ms": 500, "source": {"kind": "socket", "host": "127.0.0.1", "port": port},
           "checkpoint": str(tmp_mod / "sock-ckpt"), "dead_letter": {"path": str(tmp_mod / "sock-dead")},
           "prefixes": {"ex": "http://ex.org/"},
           "mappings": [dict(SENSOR_MAPPING, stream="sock", stream_iri="ex:sock")]}
    spec = parse_spec(doc, tmp_mod)
    pipe = Pipeline(spec, doc, HttpInjector(server.url), master="local[2]", spark=spark)
    try:
        pipe.start()
        wait_for(lambda: server.streams()["sock"]["accepted"] == 400, 300, "the socket lines to arrive")
        wait_for(lambda: pipe.counters.doc["dead_letters"] == 1, 60, "the dead letter to be counted")
    finally:
        pipe.stop()
        for c in conns:
            c.close()
        srv.close()
    dead = [json.loads(x) for f in (tmp_mod / "sock-dead").glob("*.ndjson") for x in f.read_text().splitlines()]
    assert len(dead) == 1 and "not a number 'warm'" in dead[0]["reason"]


def _register(server, text):
    req = urllib.request.Request(server.url + "/queries", data=text.encode(), method="POST",
                                 headers={"Content-Type": "application/sparql-query"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def _results(server, name, start_ms, end_ms, timeout=300):
    """(instants, result rows per instant) replayed from the query's retained log."""
    url = f"{server.url}/queries/{name}/results?" + urllib.parse.urlencode({"from": start_ms})
    out = {}
    with urllib.request.urlopen(url, timeout=timeout) as r:
        ident, event = None, None
        data = []
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and event:
                if event == "result":
                    doc = json.loads("\n".join(data))
                    out[ident] = len(doc["results"]["bindings"]) if "results" in doc else doc
                    if ident >= end_ms:
                        return out
                ident, event, data = None, None, []
    return out


def test_citybench_streams_feed_citybench_queries(tmp_mod, server, spark):
    from bench import citybench as cb
    from pipeline.citybench import citybench_root, citybench_spec

    try:
        root = citybench_root()
    except FileNotFoundError:
        pytest.skip("shared/citybench not available")
    start, minutes = "2014-08-11T11:00:00", 30
    start_ms = cb.parse_ms(start)
    end_ms = start_ms + minutes * 60_000
    end = cb.dt.datetime.fromtimestamp(end_ms / 1000, cb.dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    queries = ["Q1", "Q10"]
    qs = [cb.read_query(root / "csparql_query" / f"{q}.txt") for q in queries]
    sensors = sorted({s.split("#", 1)[1] for q in qs for s in q.windows})
    doc = citybench_spec(sensors, root=root, start=start, end=end, name="cb")
    doc["checkpoint"] = str(tmp_mod / "cb-ckpt")
    doc["dead_letter"] = {"path": str(tmp_mod / "cb-dead")}
    spec = parse_spec(doc, tmp_mod)
    inj = HttpInjector(server.url)
    for name, m in spec.streams().items():        # streams first, then the queries, then the data
        inj.ensure_stream(name, m.stream_iri, m.absorb)
    for q in qs:
        _register(server, q.register_text)
    rc, pipe = _run_once(doc, tmp_mod, server, spark)
    assert rc == 0 and pipe.counters.doc["dead_letters"] == 0
    for name in spec.streams():
        urllib.request.urlopen(urllib.request.Request(
            f"{server.url}/streams/{name}/progress?t={end_ms + 1}", method="POST"), timeout=30).read()
    # the same streams through the bench harness (its rows -> the engine directly, oracle-checked)
    want = {r["query"]: r for r in cb.run(queries, minutes=minutes, start=start, root=root,
                                          oracle_every=0)["queries"]}
    for q in queries:
        got = _results(server, q, start_ms, end_ms)
        got = {t: n for t, n in got.items() if start_ms <= t <= end_ms}
        assert sum(1 for n in got.values() if n) == want[q]["nonempty"] > 0, q
        assert sum(got.values()) == want[q]["result_rows"], q


def test_bad_spec_fails_before_spark(tmp_path):
    with pytest.raises(SpecError, match="source.kind"):
        parse_spec({"name": "x", "source": {"kind": "kafka"}, "mappings": [
            {"stream": "a", "stream_iri": "http://e/a", "format": "ntriples"}]}, tmp_path)
