"""`python -m bench.resultlog` runs and reports both modes (tiny sizes)."""

from bench.resultlog import main, run


def test_resultlog_bench_smoke(capsys, tmp_path):
    r = run(True, queries=3, events=5, retain=4, where=str(tmp_path))
    assert r["commits"] >= 1 and r["append"] > 0 and r["visible"] > 0
    assert list(tmp_path.iterdir()) == []   # its data dir is removed
    assert main(["--queries", "2", "--events", "3", "--runs", "1", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "memory" in out and "durable" in out and "append rate" in out
