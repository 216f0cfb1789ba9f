"""bench/stream_load.py on tiny settings: every part runs and reports consistent numbers."""

from __future__ import annotations

import json

import pyarrow as pa

from bench import stream_load


def test_sensor_batch_shape():
    tab = stream_load.sensor_batch(0, 10, 100, 200, sensors=2)
    assert tab.num_rows == 10 and tab.column_names == ["s", "p", "o", "t"]
    t = tab.column("t").to_pylist()
    assert t == sorted(t) and 100 <= t[0] and t[-1] < 200
    assert len(set(tab.column("s").to_pylist())) == 2
    plain = stream_load.plain_table(tab)
    assert all(plain.column(k).type == pa.string() for k in ("s", "p", "o"))
    lines = stream_load.ndjson_body(tab).splitlines()
    assert json.loads(lines[0])["p"] == stream_load.PREDICATES[0]


def test_inject_soak_interference_tiny(tmp_path):
    out = tmp_path / "r.json"
    code = stream_load.main(["inject", "--batch", "2000", "--batches", "2", "--http-batches", "1",
                             "--json", str(out)])
    assert code == 0
    res = json.loads(out.read_text())["inject"]
    paths = [r["path"] for r in res]
    assert any("absorbed" in p for p in paths) and any("HTTP" in p for p in paths)
    absorbed = next(r for r in res if "absorbed" in r["path"])
    assert absorbed["store_triples"] == 4000 and all(r["triples_per_s"] > 0 for r in res)

    soak = stream_load.soak(minutes=0.05, rate=2000, range_s=1, step_s=1, sample_s=0.5, log=lambda *a: None)
    assert soak["samples"] and soak["rss_max"] >= soak["rss_start"] > 0
    assert soak["window_max"] > 0

    r = stream_load.interference(3000, 2000, 0.5, "L4,L5", mode="inproc", log=lambda *a: None)
    assert [q["query"] for q in r["queries"]] == ["L4", "L5"]
    assert all(q["runs_idle"] > 0 and q["runs_busy"] > 0 for q in r["queries"])
    assert "### One-shot latency" in stream_load.render({"interference": r, "soak": soak})
