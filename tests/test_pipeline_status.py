"""The server side of pipeline progress: PUT /pipelines/{name} (a write), GET /pipelines,
/status and /metrics."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from pipeline.injector import HttpInjector

REPORT = {"pipeline": "p1", "state": "running", "counters": {"triples": 1200, "dead_letters": 3, "batches": 4},
          "spark_progress": {"batchId": 3, "inputRowsPerSecond": 50.5, "processedRowsPerSecond": 80.0,
                             "durationMs": {"triggerExecution": 1500}},
          "last_batch": {"batch": 3, "deliver_s": 0.25}}


def _req(url, method="GET", body=None, token=None, ctype="application/json"):
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", ctype)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()


def test_report_shows_in_status_and_metrics(make_server):
    s = make_server(token="sekrit")
    with pytest.raises(urllib.error.HTTPError) as e:
        _req(s.url + "/pipelines/p1", "PUT", json.dumps(REPORT).encode())
    assert e.value.code == 401
    HttpInjector(s.url, token="sekrit").report("p1", REPORT)
    status = json.loads(_req(s.url + "/status")[1])
    assert status["pipelines"]["p1"]["counters"]["triples"] == 1200
    assert json.loads(_req(s.url + "/pipelines")[1])["p1"]["state"] == "running"
    metrics = _req(s.url + "/metrics")[1].decode()
    assert 'jindou_pipeline_records_total{kind="dead_letters",pipeline="p1"} 3.0' in metrics
    assert 'jindou_pipeline_rows_per_second{pipeline="p1",rate="processedRowsPerSecond"} 80.0' in metrics
    assert 'jindou_pipeline_batch_seconds{part="trigger",pipeline="p1"} 1.5' in metrics
    assert 'jindou_pipeline_running{pipeline="p1"} 1.0' in metrics


@pytest.mark.parametrize("name,body,code", [("p1", b"{not json", 400), ("p1", b"[1, 2]", 400),
                                            ("bad%20name", b"{}", 400)])
def test_bad_reports_are_refused(make_server, name, body, code):
    s = make_server()
    with pytest.raises(urllib.error.HTTPError) as e:
        _req(f"{s.url}/pipelines/{name}", "PUT", body)
    assert e.value.code == code
    assert json.loads(_req(s.url + "/status")[1])["pipelines"] == {}


def test_conflicting_stream_registration_is_a_clear_error(make_server):
    from pipeline.injector import InjectionError

    s = make_server()
    inj = HttpInjector(s.url)
    inj.ensure_stream("st", "http://ex.org/st", "none")
    inj.ensure_stream("st", "http://ex.org/st", "none")            # the same registration: fine
    with pytest.raises(InjectionError, match="HTTP 409"):
        inj.ensure_stream("st", "http://ex.org/st", "all")
    with pytest.raises(InjectionError, match="HTTP 404|HTTP 400"):
        import pyarrow as pa
        inj.ingest("nope", pa.table({"s": ["<a>"], "p": ["<b>"], "o": ["<c>"], "t": [1]}), "x:0:nope")
