"""Conformance of result sinks: the webhook allow-list cannot be left through dot segments or
encoded separators, and an ISTREAM query's webhook gets every instant exactly once with the right
difference across a SIGKILL restart of a real server (--data-dir)."""

from __future__ import annotations

import signal

import httpx
import orjson
import pytest

from engine.stream.sinks import SinkPolicy, SinkRefused, parse_sinks
from tests.pipeline_support import Server, wait_for
from tests.support.http_listener import PostRecorder
from tests.test_results_durable import _feed

EX = "http://ex.org/"
POLICY = SinkPolicy.of("http://127.0.0.1:9000/hooks/, http://127.0.0.1:9000/only")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9000/hooks/../admin",          # httpx sends /admin
    "http://127.0.0.1:9000/hooks/./../admin",
    "http://127.0.0.1:9000/hooks/%2e%2e/admin",      # a server decodes, then removes the segment
    "http://127.0.0.1:9000/hooks/%2E./admin",
    "http://127.0.0.1:9000/hooks/..%2Fadmin",        # an encoded slash
    "http://127.0.0.1:9000/hooks/..%5cadmin",        # an encoded backslash
    "http://127.0.0.1:9000/only/..",
    "http://127.0.0.1:9000/only/.",
])
def test_webhook_url_cannot_leave_the_allowed_prefix(url):
    with pytest.raises(SinkRefused, match="segments"):
        parse_sinks([{"type": "webhook", "url": url}], POLICY)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/hooks/q", "http://127.0.0.1:9000/hooks/a.b/c..d",
                                 "http://127.0.0.1:9000/hooks/%41?x=../y", "http://127.0.0.1:9000/only/q"])
def test_webhook_urls_inside_the_prefix_are_taken(url):
    (spec,) = parse_sinks([{"type": "webhook", "url": url}], POLICY)
    assert spec.url == url


Q = (f"REGISTER ISTREAM QUERY q AS SELECT ?s ?o FROM STREAM <{EX}s> [RANGE 2s STEP 1s] "
     f"WHERE {{ ?s <{EX}p> ?o }}")


def test_istream_webhook_across_a_sigkill_restart(tmp_path):
    """Elements at k*1000+500 (object v<k>): the 2 s window at t holds k = t/1000-2 and t/1000-1,
    so ISTREAM adds exactly v<t/1000-1> at every instant -- also the first one after the restart."""
    rec = PostRecorder()
    data = tmp_path / "data"
    allow = ["--webhook-allow", rec.url + "/hooks/", "--sink-retry-max", "0.5"]
    srv = Server(tmp_path, data, args=allow)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
            assert c.post("/queries", content=Q, headers={"Content-Type": "application/sparql-query"}
                          ).status_code == 201
            r = c.put("/queries/q/sinks", json={"sinks": [{"name": "hook", "type": "webhook",
                                                           "url": rec.url + "/hooks/q"}]})
            assert r.status_code == 200, r.text
            _feed(c, 0, 3)   # instants 1000..4000
            wait_for(lambda: 4000 in [int(p["headers"]["x-jindou-instant"]) for p in rec.posts], 60, "deliveries")
    finally:
        srv.stop(signal.SIGKILL)
    srv = Server(tmp_path, data, args=allow)
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            _feed(c, 4, 6)   # instants 5000..7000, evaluated after the restart
            wait_for(lambda: 7000 in [int(p["headers"]["x-jindou-instant"]) for p in rec.posts], 60, "deliveries")
            assert c.get("/queries/q").json()["mode"] == "ISTREAM"
    finally:
        srv.stop()
        rec.close()
    got: dict[int, list] = {}
    for p in rec.posts:
        t = int(p["headers"]["x-jindou-instant"])
        assert t not in got, f"instant {t} delivered twice"
        got[t] = sorted(b["o"]["value"] for b in orjson.loads(p["body"])["results"]["bindings"])
    assert sorted(got) == list(range(1000, 8000, 1000))
    for t, objs in got.items():
        assert objs == [f"v{t // 1000 - 1}"], (t, objs)
