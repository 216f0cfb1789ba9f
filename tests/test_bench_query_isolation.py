"""`python -m bench.query_isolation` on a tiny workload: it runs with the lane on and off, the
heavy query goes through the lane when it is on, and every answer is compared."""

from __future__ import annotations

import json

from bench import query_isolation as qi


def test_tiny_run_lane_on_and_off(tmp_path, monkeypatch):
    taken = []
    orig = qi.run_one

    def spy(wl, n, heavy, other, instants, lanes):
        out = orig(wl, n, heavy, other, instants, lanes)
        taken.append((heavy, lanes, out["complete"], out["heavy_complete"]))
        return out

    monkeypatch.setattr(qi, "run_one", spy)
    monkeypatch.setattr(qi.HeavyLaneBound, "ms", 0.0)   # (any measured cost makes the heavy ones heavy)
    out = tmp_path / "r.json"
    rc = qi.main(["--queries", "4", "--heavy", "0,1", "--heavy-stream", "same,other", "--lanes", "on,off",
                  "--instants", "3", "--areas", "3", "--sensors", "2", "--rate", "200", "--json", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["mismatches"] == 0
    assert len(rep["rows"]) == 2 + 4   # heavy 0 (on, off) + heavy 1 x (same, other) x (on, off)
    assert all(r["complete"] for r in rep["rows"])
    lane_rows = [r for r in rep["rows"] if r["heavy"] and r["lanes"]]
    assert lane_rows and all(r["lane_taken"] > 0 for r in lane_rows)
    assert all(r["lane_taken"] == 0 for r in rep["rows"] if not r["lanes"])
    assert all(c and hc for _, _, c, hc in taken)
