"""The dashboard's static files: `/`, `/static/...`, content types, caching,
that every module the page imports is served, and that nothing is fetched
from outside the server (no CDN)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
import requests

from server.app import static_dir

STATIC = Path(__file__).resolve().parents[1] / "static"

TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml", ".html": "text/html"}


def _assets_of_index(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/static/[^"]+)"', html)


def _imports_of(js: str) -> list[str]:
    return re.findall(r'^\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"', js, flags=re.M)


def test_index_is_the_dashboard(server):
    r = requests.get(server.url + "/")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/html")
    assert r.headers["Cache-Control"] == "no-cache"
    html = r.text
    assert 'id="query-text"' in html and 'role="tablist"' in html
    assert '<script type="module" src="/static/js/main.js">' in html


def test_every_asset_and_module_is_served(server):
    html = requests.get(server.url + "/").text
    todo = _assets_of_index(html)
    assert "/static/css/app.css" in todo and "/static/js/main.js" in todo
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        r = requests.get(server.url + path)
        assert r.status_code == 200, path
        ext = Path(path).suffix
        assert r.headers["Content-Type"].split(";")[0] == TYPES[ext], (path, r.headers["Content-Type"])
        assert r.headers["Cache-Control"] == "no-cache"
        assert r.headers.get("ETag"), path
        if ext == ".js":
            for spec in _imports_of(r.text):
                assert spec.startswith("./"), f"{path} imports {spec}: only relative modules of the server"
                todo.append(str(Path(path).parent / spec[2:]))
    # the module graph reaches every JS file in static/js
    on_disk = {"/static/" + p.relative_to(STATIC).as_posix() for p in (STATIC / "js").glob("*.js")}
    assert on_disk <= seen, on_disk - seen


def test_revalidation_answers_304(server):
    r = requests.get(server.url + "/static/js/main.js")
    etag = r.headers["ETag"]
    r2 = requests.get(server.url + "/static/js/main.js", headers={"If-None-Match": etag})
    assert r2.status_code == 304
    assert r2.content == b""


def test_missing_and_outside_files_are_404(server):
    assert requests.get(server.url + "/static/js/nope.js").status_code == 404
    r = requests.get(server.url + "/static/../server/app.py")
    assert r.status_code == 404
    r = requests.get(server.url + "/static/%2e%2e/pyproject.toml")
    assert r.status_code == 404


def test_no_external_resources():
    """Works offline: no file loads anything from another origin."""
    for p in STATIC.rglob("*"):
        if p.suffix not in (".html", ".css", ".js"):
            continue
        text = p.read_text(encoding="utf-8")
        assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', text), p
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", text), p
        assert not re.search(r"@import", text), p
        assert not re.search(r'from\s+"(?:https?:)?//', text), p
        assert not re.search(r'import\(\s*["\'](?:https?:)?//', text), p


def test_static_dir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("JINDOU_STATIC", str(tmp_path))
    assert static_dir() is None  # no index.html there
    (tmp_path / "index.html").write_text("<!doctype html><title>x</title>")
    assert static_dir() == tmp_path
    monkeypatch.delenv("JINDOU_STATIC")
    assert static_dir() == STATIC


@pytest.fixture
def sensor_stream(server):
    name = "dash_mon"
    r = requests.put(server.url + f"/streams/{name}", json={"iri": "http://example.org/stream/dash_mon"})
    assert r.status_code in (200, 201), r.text
    try:
        yield name
    finally:
        requests.delete(server.url + f"/streams/{name}?force=true")


def test_stream_info_has_monitoring_fields(server, sensor_stream):
    """The additive fields the Streams view shows: lag, published progress, counts, budget."""
    url = server.url + f"/streams/{sensor_stream}"
    before = requests.get(url).json()
    assert before["lag_ms"] is None and before["progress"] is None and before["published"] is None
    assert before["budget_bytes"] > 0 and isinstance(before["now_ms"], int)
    lines = [orjson.dumps({"s": f"<http://example.org/o{i}>", "p": "<http://example.org/v>",
                           "o": f'"{i}"^^<http://www.w3.org/2001/XMLSchema#integer>', "t": 1000 + i})
             for i in range(5)]
    r = requests.post(url, data=b"\n".join(lines), headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 202 and r.json()["accepted"] == 5
    info = requests.get(url).json()
    assert info["accepted"] == 5 and info["progress"] == 1004
    assert info["published"] == 1004
    # the progress is event time 1 s after the epoch: the lag is the server clock minus that
    assert info["lag_ms"] == info["now_ms"] - 1004
    assert info["elements"] >= 1 and info["batches"] >= 1
    listed = {s["name"]: s for s in requests.get(server.url + "/streams").json()["streams"]}
    assert listed[sensor_stream]["lag_ms"] is not None
