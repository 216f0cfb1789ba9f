"""/metrics read back with prometheus-client's own text parser: the process collectors, counters
named ``*_total``, no double-counting label, and the stream / continuous-query families moving
when a stream is fed, a query evaluated and an SSE client attached."""

from __future__ import annotations

import time

import httpx
import orjson
import requests
from prometheus_client.parser import text_string_to_metric_families

EX = "http://ex.org/"
NDJSON = {"Content-Type": "application/x-ndjson"}


def scrape(url: str) -> dict:
    """name -> family (its samples by (name, sorted labels) in ``.values``)."""
    r = requests.get(url + "/metrics", timeout=10)
    assert r.status_code == 200
    fams = {}
    for fam in text_string_to_metric_families(r.text):
        fam.values = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}
        fams[fam.name] = fam
    return fams


def value(fams: dict, family: str, sample: str | None = None, **labels) -> float | None:
    fam = fams.get(family)
    if fam is None:
        return None
    return fam.values.get((sample or family, tuple(sorted(labels.items()))))


def test_process_platform_and_naming(server):
    requests.get(server.url + "/sparql", params={"query": "ASK {}"})
    fams = scrape(server.url)
    # prometheus-client's collectors, not home-made process gauges
    assert value(fams, "process_resident_memory_bytes") > 1e6
    assert value(fams, "process_start_time_seconds") > 1e9
    assert "python_info" in fams and "python_gc_collections" in fams
    assert not [n for n in fams if n.startswith("jindou_process_")]
    # every counter's samples end in _total (the parser strips it from the family name)
    for fam in fams.values():
        if fam.type == "counter":
            assert all(s.name.endswith("_total") for s in fam.samples), fam.name
    assert value(fams, "jindou_http_requests", "jindou_http_requests_total",
                 route="/sparql", method="GET", status="200") >= 1
    # the store's triples: default + named = the total; no "all" that counts them twice
    graphs = {dict(k[1])["graph"] for k in fams["jindou_store_triples"].values}
    assert graphs <= {"default", "named"} and "default" in graphs


def test_store_triples_split_without_double_counting(clean_server):
    s = clean_server
    r = requests.post(s.url + "/update", data=f"INSERT DATA {{ <{EX}a> <{EX}p> 1 . <{EX}b> <{EX}p> 2 . "
                                              f"GRAPH <{EX}g> {{ <{EX}c> <{EX}p> 3 }} }}",
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code in (200, 204), r.text
    fams = scrape(s.url)
    assert value(fams, "jindou_store_triples", graph="default") == 2
    assert value(fams, "jindou_store_triples", graph="named") == 1
    assert sum(fams["jindou_store_triples"].values.values()) == 3


def _wait(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_stream_and_continuous_query_metrics_move(make_server):
    s = make_server()
    u = s.url
    assert requests.put(u + "/streams/m1", json={"iri": EX + "m1"}).status_code == 201
    q = (f"REGISTER QUERY mq AS SELECT ?s ?o FROM STREAM <{EX}m1> [RANGE 2s STEP 1s] "
         f"WHERE {{ ?s <{EX}p> ?o }}")
    assert requests.post(u + "/queries", data=q, headers={"Content-Type": "application/sparql-query"}
                         ).status_code == 201
    before = scrape(u)
    assert value(before, "jindou_stream_triples", "jindou_stream_triples_total", stream="m1") == 0
    assert value(before, "jindou_sse_subscribers") == 0
    evals0 = value(before, "jindou_continuous_evaluation_seconds", "jindou_continuous_evaluation_seconds_count")

    with httpx.Client(timeout=20) as client, client.stream("GET", u + "/queries/mq/results") as sse:
        assert sse.status_code == 200
        attached = scrape(u)
        assert value(attached, "jindou_sse_subscribers") == 1
        rows = [{"s": f"<{EX}a{i}>", "p": f"<{EX}p>", "o": f'"{i}"', "t": 1000 * i} for i in range(1, 6)]
        body = b"\n".join(orjson.dumps(r) for r in rows) + b'\n{"s": "bad"}\n'
        r = requests.post(u + "/streams/m1", data=body, headers=NDJSON)
        assert r.status_code == 207, r.text
        requests.post(u + "/streams/m1/progress", params={"t": 9000})

        def evaluated():
            f = scrape(u)
            n = value(f, "jindou_continuous_instants", "jindou_continuous_instants_total", query="mq")
            return f if n and n >= 5 else None

        after = _wait(evaluated)
    assert value(after, "jindou_stream_triples", "jindou_stream_triples_total", stream="m1") == 5
    assert value(after, "jindou_stream_refused", "jindou_stream_refused_total", stream="m1") == 1
    assert value(after, "jindou_stream_elements", "jindou_stream_elements_total", stream="m1") == 5
    count = value(after, "jindou_continuous_evaluation_seconds", "jindou_continuous_evaluation_seconds_count")
    assert count > (evals0 or 0)
    assert value(after, "jindou_continuous_evaluation_seconds", "jindou_continuous_evaluation_seconds_sum") > 0
    assert value(after, "jindou_continuous_last_evaluation_seconds", query="mq") > 0
    # the SSE client left: the gauge comes back down
    _wait(lambda: value(scrape(u), "jindou_sse_subscribers") == 0)
    # a deleted query and stream leave no stale series behind
    assert requests.delete(u + "/streams/m1", params={"force": "true"}).status_code == 200
    gone = scrape(u)
    assert value(gone, "jindou_stream_triples", "jindou_stream_triples_total", stream="m1") is None
    assert value(gone, "jindou_continuous_instants", "jindou_continuous_instants_total", query="mq") is None


def test_slow_sse_client_counts_dropped_events(make_server):
    """A client that does not read falls behind, is cut off, and its undelivered events count."""
    import socket

    s = make_server(sse_buffer=2, sse_error_timeout=0.2)
    u = s.url
    assert requests.put(u + "/streams/d1", json={"iri": EX + "d1"}).status_code == 201
    big = "x" * 20000
    q = (f"REGISTER QUERY dq AS SELECT ?s ?o FROM STREAM <{EX}d1> [RANGE 1s STEP 1s] "
         f"WHERE {{ ?s <{EX}p> ?o }}")
    assert requests.post(u + "/queries", data=q, headers={"Content-Type": "application/sparql-query"}
                         ).status_code == 201
    host, port = u.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(b"GET /queries/dq/results HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        _wait(lambda: value(scrape(u), "jindou_sse_subscribers") == 1)
        t = 0
        for _batch in range(40):  # large results, never read: the socket fills up
            rows = [{"s": f"<{EX}a{i}>", "p": f"<{EX}p>", "o": f'"{big}{i}"', "t": t + i} for i in range(20)]
            requests.post(u + "/streams/d1", data=b"\n".join(orjson.dumps(r) for r in rows), headers=NDJSON)
            t += 1000
            requests.post(u + "/streams/d1/progress", params={"t": t})
            f = scrape(u)
            if value(f, "jindou_sse_clients_cut_off", "jindou_sse_clients_cut_off_total"):
                break
        f = _wait(lambda: (lambda g: g if value(g, "jindou_sse_clients_cut_off",
                                                 "jindou_sse_clients_cut_off_total") else None)(scrape(u)))
        assert value(f, "jindou_sse_events_dropped", "jindou_sse_events_dropped_total") > 2
    finally:
        sock.close()
