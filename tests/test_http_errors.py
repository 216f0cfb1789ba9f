"""Error answers: an unexpected exception is a generic 500 whose id is in the log
with the traceback (never the exception text); bad input is a 4xx at its cause."""

from __future__ import annotations

import json
import logging

import requests

from server.api.admin import Metrics
from server.api.common import HTTPError, http_error_from


def test_unexpected_exception_is_a_generic_500_with_a_logged_id(caplog):
    try:
        {}["secret-key-text"]  # noqa: B018 - a real exception with a traceback
    except KeyError as e:
        exc = e
    with caplog.at_level(logging.ERROR, logger="jindou.server"):
        err = http_error_from(exc)
        again = http_error_from(exc)  # mapped twice (inner and outer handler): one id, one log line
        Metrics().log_internal(exc)
    assert err.status == 500 and err.kind == "internal"
    doc = json.loads(err.body())
    err_id = doc["id"]
    assert doc == {"error": "internal", "detail": f"internal error (id {err_id})", "id": err_id}
    assert json.loads(again.body())["id"] == err_id
    assert "secret-key-text" not in err.body().decode() and "KeyError" not in err.body().decode()
    records = [r for r in caplog.records if err_id in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info is not None
    assert "secret-key-text" in caplog.text and "Traceback" in caplog.text


def test_each_internal_error_gets_its_own_id():
    ids = {json.loads(http_error_from(RuntimeError("x")).body())["id"] for _ in range(20)}
    assert len(ids) == 20


def test_recursion_error_is_a_400():
    err = http_error_from(RecursionError("maximum recursion depth exceeded"))
    assert err.status == 400 and "nested too deeply" in err.detail and "Recursion" not in err.detail


def test_http_errors_pass_through():
    e = HTTPError(418, "teapot", "short and stout")
    assert http_error_from(e) is e


def test_bad_pipeline_reports_are_400_and_metrics_keep_working(clean_server):
    u = clean_server.url
    bad = [{"counters": [1]}, {"counters": {"triples": "many"}}, {"counters": {"x": True}},
           {"spark_progress": [1]}, {"spark_progress": {"durationMs": [1]}}, {"last_batch": 5}, {"state": {"a": 1}}]
    for doc in bad:
        r = requests.put(u + "/pipelines/pbad", data=json.dumps(doc).encode(),
                         headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"] == "bad_request", (doc, r.text)
        assert requests.get(u + "/metrics").status_code == 200
        assert "pbad" not in requests.get(u + "/pipelines").json()
    ok = {"state": "running", "counters": {"triples": 3}, "spark_progress": None, "last_batch": {}}
    r = requests.put(u + "/pipelines/pok", data=json.dumps(ok).encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    assert 'jindou_pipeline_records{kind="triples",pipeline="pok"} 3.0' in requests.get(u + "/metrics").text


def test_deeply_nested_bodies_are_400(clean_server):
    u = clean_server.url
    cases = [
        ("/store?default", "application/ld+json", b"[" * 100_000),
        ("/store?default", "text/turtle", b"<http://a> <http://b> " + b"[ <http://p> " * 5000 + b"]" * 5000 + b" ."),
        ("/store?default", "text/turtle", b"<http://a> <http://b> " + b"( " * 5000 + b")" * 5000 + b" ."),
        ("/sparql", "application/sparql-query", b"SELECT * {" + b"{" * 5000 + b"}" * 5000 + b"}"),
    ]
    for path, ct, body in cases:
        r = requests.post(u + path, data=body, headers={"Content-Type": ct}, timeout=60)
        assert r.status_code == 400, (path, ct, r.text[:300])
        assert "Error" not in r.text and "Traceback" not in r.text
    assert requests.get(u + "/status").status_code == 200
