"""/status, /metrics, OpenAPI docs, body limits, overload and timeouts."""

from __future__ import annotations

import threading
import time

import numpy as np
import requests

from engine.exec.result import QueryResult
from engine.exec.serialize import KeyTable


def test_status(server):
    r = requests.get(server.url + "/status", headers={"Origin": "http://app.example"})
    assert r.status_code == 200
    doc = r.json()
    assert doc["status"] == "ok" and doc["service"] == "jindou"
    assert "triples" in doc["store"]
    assert doc["limits"]["max_body_bytes"] == server.config.max_body
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    # the server process's resident memory, checked against psutil's reading of the same pid
    import psutil  # noqa: PLC0415

    mem = doc["memory"]
    other = psutil.Process(doc["pid"]).memory_info().rss
    assert 0.5 * other < mem["rss_bytes"] < 2 * other
    assert mem["peak_rss_bytes"] >= mem["rss_bytes"]


def test_status_reports_every_effective_setting_with_tokens_redacted(make_server, tmp_path):
    from server.settings import Settings

    s = make_server(token="write-secret-1", read_token="read-secret-2", max_rows=1234, retain=17,
                    sse_error_timeout=2.5, data_dir=str(tmp_path))
    r = requests.get(s.url + "/status", headers={"Authorization": "Bearer read-secret-2"})
    assert r.status_code == 200
    assert "write-secret-1" not in r.text and "read-secret-2" not in r.text
    got = r.json()["settings"]
    assert set(got) == set(Settings.model_fields)
    assert got["token"] == got["read_token"] == "<set>"
    assert (got["max_rows"], got["retain"], got["sse_error_timeout"], got["data_dir"]) == (1234, 17, 2.5,
                                                                                          str(tmp_path))
    for name, value in got.items():
        if name not in ("token", "read_token"):
            expected = getattr(s.config, name)
            assert value == ([list(x) for x in expected] if name == "graph" else expected), name


def test_metrics(server):
    requests.get(server.url + "/sparql", params={"query": "ASK {}"})
    requests.get(server.url + "/sparql", params={"query": "ASK {"})
    r = requests.get(server.url + "/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    text = r.text
    assert 'jindou_http_requests_total{method="GET",route="/sparql",status="200"}' in text
    assert 'jindou_http_requests_total{method="GET",route="/sparql",status="400"}' in text
    assert "jindou_http_request_duration_seconds_bucket" in text
    assert 'jindou_queries_total{form="ASK",outcome="ok"}' in text
    assert 'jindou_queries_total{form="unknown",outcome="syntax"}' in text
    assert "jindou_store_triples" in text
    rss = [ln for ln in text.splitlines() if ln.startswith("process_resident_memory_bytes ")]
    assert len(rss) == 1 and float(rss[0].split()[1]) > 1e6


def test_docs_and_openapi(server):
    r = requests.get(server.url + "/docs")
    assert r.status_code == 200 and "swagger" in r.text.lower()
    # every asset of the page comes from this server (a CDN would leave it blank offline)
    import re  # noqa: PLC0415

    urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", r.text)
    assert urls and not [x for x in urls if "//" in x], urls
    js = requests.get(server.url + "/docs/assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and js.headers["Content-Type"].startswith("text/javascript")
    assert "SwaggerUIBundle" in js.text[:2000]
    css = requests.get(server.url + "/docs/assets/swagger-ui.css")
    assert css.status_code == 200 and css.headers["Content-Type"].startswith("text/css") and ".swagger-ui" in css.text
    assert requests.get(server.url + "/docs/assets/..%2Fcore.py").status_code == 404
    assert requests.get(server.url + "/redoc").status_code == 404
    spec = requests.get(server.url + "/openapi.json").json()
    paths = spec["paths"]
    assert {"/sparql", "/update", "/store", "/status", "/metrics"} <= set(paths)
    assert {"get", "post"} <= set(paths["/sparql"])
    assert {"get", "put", "post", "delete", "head"} <= set(paths["/store"])
    params = {p["name"] for p in paths["/sparql"]["get"]["parameters"]}
    assert {"query", "default-graph-uri", "named-graph-uri"} <= params
    assert "application/sparql-query" in paths["/sparql"]["post"]["requestBody"]["content"]


def test_body_limit(make_server):
    s = make_server(max_body=1000)
    big = b"ASK {}" + b" " * 5000
    r = requests.post(s.url + "/sparql", data=big, headers={"Content-Type": "application/sparql-query", "Origin": "http://app.example"})
    assert r.status_code == 413 and r.json()["error"] == "too_large"
    assert r.headers["Access-Control-Allow-Origin"] == "*"

    def chunks():
        for _ in range(10):
            yield b" " * 500

    # chunked transfer encoding: no Content-Length, counted while reading
    for path, ct in (("/sparql", "application/sparql-query"), ("/update", "application/sparql-update"),
                     ("/store?default", "text/turtle")):
        r = requests.post(s.url + path, data=chunks(), headers={"Content-Type": ct})
        assert r.status_code == 413, (path, r.status_code, r.text)
    r = requests.post(s.url + "/sparql", data=b"ASK {}", headers={"Content-Type": "application/sparql-query"})
    assert r.status_code == 200


class SlowDB:
    """A stand-in database whose queries take a while (to fill the query slots)."""

    def __init__(self, delay: float):
        self.delay = delay

    def query(self, text, **kw):
        time.sleep(self.delay)
        return QueryResult(form="ASK", terms=KeyTable([]), boolean=True)

    def status(self):
        return {"triples": 0}


def test_overload_503(make_server):
    s = make_server(database=SlowDB(1.0), max_concurrent=1)
    results = []

    def run():
        results.append(requests.get(s.url + "/sparql", params={"query": "ASK {}"}))

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    r = requests.get(s.url + "/sparql", params={"query": "ASK { ?s ?p ?o }"})
    t.join()
    assert results[0].status_code == 200
    assert r.status_code == 503
    assert r.headers["Retry-After"] == "1"
    assert r.json()["error"] == "overloaded"
    # the event loop stayed responsive while the slow query ran
    assert requests.get(s.url + "/status", timeout=2).status_code == 200


def test_loop_stays_responsive_during_slow_query(make_server):
    s = make_server(database=SlowDB(1.5))
    t = threading.Thread(target=lambda: requests.get(s.url + "/sparql", params={"query": "ASK {}"}))
    t.start()
    time.sleep(0.2)
    t0 = time.perf_counter()
    assert requests.get(s.url + "/status", timeout=5).status_code == 200
    assert time.perf_counter() - t0 < 0.5
    t.join()


def test_timeout_is_503(make_server):
    s = make_server(query_timeout=0.05, max_rows=100_000_000)
    rows = "".join(f"<http://ex.org/n{i}> <http://ex.org/p{i % 7}> <http://ex.org/n{(i * 31) % 2000}> .\n"
                   for i in range(2000))
    r = requests.post(s.url + "/store?default", data=rows.encode(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 204
    q = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }"
    r = requests.get(s.url + "/sparql", params={"query": q})
    assert r.status_code == 503, r.text[:300]
    assert r.json()["error"] == "timeout"
    assert "Retry-After" in r.headers
    assert requests.get(s.url + "/sparql", params={"query": "ASK {}"}).status_code == 200


def test_row_budget_is_422_and_not_retryable(make_server):
    s = make_server(max_rows=1000)
    rows = "".join(f"<http://ex.org/n{i}> <http://ex.org/p> <http://ex.org/m{i}> .\n" for i in range(200))
    requests.post(s.url + "/store?default", data=rows.encode(), headers={"Content-Type": "application/n-triples"})
    r = requests.get(s.url + "/sparql", params={"query": "SELECT * WHERE { ?a ?p ?b . ?c ?q ?d }"})
    assert r.status_code == 422 and r.json()["error"] == "row_budget"
    assert "Retry-After" not in r.headers


def test_numpy_columns_survive_threadpool(make_server):
    class ColDB(SlowDB):
        def query(self, text, **kw):
            return QueryResult(form="SELECT", terms=KeyTable(["<http://ex.org/a>"]), vars=["x"],
                               columns=[np.zeros(20, dtype=np.int64)])

    s = make_server(database=ColDB(0))
    r = requests.get(s.url + "/sparql", params={"query": "SELECT * {}"})
    assert len(r.json()["results"]["bindings"]) == 20


def test_inline_policy():
    """Cheap shapes run on the event loop; two slow runs in a row send the shape back
    to the thread pool until its decaying cost estimate is low again."""
    import asyncio

    from engine.errors import QueryTimeout
    from server.api.common import ServerState, query_shape
    from server.settings import Settings

    state = ServerState(Settings(inline_ms=10), database=None)
    main_thread = threading.get_ident()
    where = []

    def busy(delay):  # costs are taken on the thread's CPU clock: sleeping would cost nothing
        end = time.thread_time() + delay
        while time.thread_time() < end:
            pass

    def job(delay=0.0):
        def f():
            where.append(threading.get_ident() == main_thread)
            busy(delay)
            return 1
        return f

    shape = query_shape("SELECT * WHERE { <http://ex.org/a> ?p 1 }")
    assert shape == query_shape('SELECT * WHERE { <http://ex.org/a> ?p "two" }')
    # IRIs decide the cost, so they are part of the shape
    assert shape != query_shape("SELECT * WHERE { <http://ex.org/b> ?p 1 }")

    async def go():
        for _ in range(3):
            await state.run(job(), shape)
        assert where == [False, False, True]  # not probed: the pool until seen twice
        await state.run(job(0.05), shape)  # one slow run (a loaded machine?): still inline next time
        assert where[-1] is True and state.inline_ok(shape)
        await state.run(job(0.05), shape)  # two in a row: the estimate is now 50 ms
        assert not state.inline_ok(shape)
        where.clear()
        for _ in range(3):
            await state.run(job(), shape)
        assert where == [False, False, False]  # 25, 12.5 ms estimates: thread pool
        for _ in range(3):
            await state.run(job(), shape)
        assert where[-1] is True  # decayed below 10 ms: inline again
        state.data_changed()
        where.clear()
        await state.run(job(), shape)
        assert where == [False]
        await state.run(job(), None)  # no shape (updates): always the thread pool
        assert where == [False, False]
        # a selective shape (the engine's) never seen, run under a deadline: probed inline at once
        other = query_shape("SELECT * WHERE { <http://ex.org/c> ?p 1 }")
        where.clear()
        await state.run(lambda deadline: job()(), other, deadline=None, probe=True)
        assert where == [True]
        # ... and an expensive one stops at the probe's budget and reruns in the pool
        slow = query_shape("SELECT * WHERE { <http://ex.org/d> ?p 1 }")
        where.clear()

        def expensive(deadline):
            where.append(threading.get_ident() == main_thread)
            if where[-1]:
                busy(0.01)
                assert deadline is not None and time.monotonic() > deadline
                raise QueryTimeout("probe budget")
            return 2
        assert await state.run(expensive, slow, deadline=None, probe=True) == 2
        assert where == [True, False]
        where.clear()
        assert await state.run(expensive, slow, deadline=None, probe=True) == 2
        assert where == [False]  # known to be expensive now
        # a probe that waits (a lock, the network) rather than computes is expensive too:
        # it held the loop for its whole budget, whatever its CPU time was
        waits = query_shape("SELECT * WHERE { <http://ex.org/e> ?p 1 }")
        where.clear()

        def waiting(deadline):
            where.append(threading.get_ident() == main_thread)
            if where[-1]:
                time.sleep(max(0.0, deadline - time.monotonic()) + 0.001)
                raise QueryTimeout("probe budget")
            return 3
        for _ in range(4):
            assert await state.run(waiting, waits, deadline=None, probe=True) == 3
        # the probe's 5 ms are below the 10 ms threshold: inline until two 20 ms budgets in a
        # row are taught, then the pool (on CPU time alone it would stay inline for good)
        assert where == [True, False, True, False, True, False, False]

    asyncio.run(go())


def test_service_queries_never_run_inline():
    """A SERVICE call waits on another endpoint: its shape is None (never on the event loop,
    never remembered), however the keyword is spelled; other texts keep their shape."""
    from server.api.common import query_shape

    for text in ("SELECT * WHERE { SERVICE <http://ex.org/sparql> { ?s ?p ?o } }",
                 "select * where { service silent <http://ex.org/sparql> { ?s ?p ?o } }",
                 "SELECT * WHERE { ?s ?p ?o . SeRvIcE ?ep { ?s ?q ?r } }"):
        assert query_shape(text) is None
    assert query_shape("SELECT * WHERE { ?s <http://ex.org/services> ?o }") is not None


def test_front_page_is_served(server):
    import requests

    r = requests.get(server.url + "/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "/sparql" in r.text
    # same origin: no Origin header, no CORS headers needed (Vary keeps caches apart)
    assert "access-control-allow-origin" not in r.headers and "origin" in r.headers["vary"].lower()
