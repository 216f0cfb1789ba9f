"""Batched request and query counts (server/api/admin.py Metrics.observe_request /
query_done, added to their series by flush before every scrape) expose exactly what
observing each request directly with prometheus-client exposes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from server.api import admin

_requests = st.lists(st.tuples(st.sampled_from(["/sparql", "/update", "/status", "/nowhere"]),
                               st.sampled_from(["GET", "POST"]), st.sampled_from([200, 204, 400, 503]),
                               st.one_of(st.sampled_from(list(admin._LAT_BUCKETS)),
                                         st.floats(0, 100, allow_nan=False))), max_size=60)
_queries = st.lists(st.tuples(st.sampled_from(["SELECT", "ASK"]), st.sampled_from(["ok", "timeout"])), max_size=20)


def _lines(text: bytes, prefixes: tuple) -> list[str]:
    return sorted(ln for ln in text.decode().splitlines() if ln.startswith(prefixes) and "_created" not in ln)


@settings(max_examples=150, deadline=None)
@given(_requests, _queries, st.integers(0, 60))
def test_batched_counts_equal_direct_observations(reqs, queries, cut):
    assert admin._BATCHABLE
    m = admin.Metrics()
    r = CollectorRegistry()
    count = Counter("jindou_http_requests_total", "HTTP requests", ["route", "method", "status"], registry=r)
    lat = Histogram("jindou_http_request_duration_seconds", "HTTP request latency", ["route", "method"],
                    buckets=admin._LAT_BUCKETS, registry=r)
    qc = Counter("jindou_queries_total", "SPARQL queries by form and outcome", ["form", "outcome"], registry=r)
    for i, (path, method, status, s) in enumerate(reqs):
        m.observe_request(path, method, status, s)
        if i == cut:
            m.flush()  # a scrape in between
        route = admin.route_label(path)
        count.labels(route, method, str(status)).inc()
        lat.labels(route, method).observe(s)
    for form, outcome in queries:
        m.query_done(form, outcome)
        qc.labels(form, outcome).inc()
    m.flush()
    prefixes = ("jindou_http_request", "jindou_queries_total")
    got, want = _lines(generate_latest(m.registry), prefixes), _lines(generate_latest(r), prefixes)
    assert [g.rsplit(" ", 1)[0] for g in got] == [w.rsplit(" ", 1)[0] for w in want]
    for g, w in zip(got, want, strict=True):
        assert abs(float(g.rsplit(" ", 1)[1]) - float(w.rsplit(" ", 1)[1])) <= 1e-9 * max(1.0, abs(float(w.rsplit(" ", 1)[1]))), (g, w)
