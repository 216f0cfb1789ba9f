"""`python -m bench manyqueries` on a tiny workload: it runs every peer, cross-checks answers and
reports executions per second (no timing assertions)."""

from __future__ import annotations

from bench import manyqueries as mq


def test_tiny_run_agrees_and_reports():
    rep = mq.run([12], instants=3, rounds=1, areas=4, sensors=3, rate=200.0, unbatched_budget=24,
                 composite_budget=12, say=lambda _m: None)
    (row,) = rep["rows"]
    assert rep["mismatches"] == 0 and row["mismatches"] == 0
    assert row["complete"] and row["compared_answers"] > 0
    assert row["batched_per_s"] > 0 and row["unbatched_per_s"] > 0 and row["composite_per_s"] > 0
    md = mq.format_markdown(rep)
    assert "| 12 |" in md and "batched / unbatched" in md


def test_main_registered_in_bench_entry_point(capsys):
    from bench.__main__ import _main

    assert _main(["manyqueries", "--queries", "6", "--instants", "2", "--rounds", "1", "--areas", "3",
                  "--sensors", "2", "--rate", "100", "--unbatched-budget", "6", "--composite-budget", "6"]) == 0
    assert "executions per wall second" in capsys.readouterr().out


def test_mixed_shapes_and_one_peer():
    """--mixed: four shapes, two batched and two alone; the answers agree across peers where
    they are specified (LIMIT without ORDER BY and GROUP_CONCAT's order are not compared)."""
    rep = mq.run([16], instants=2, rounds=1, areas=4, sensors=3, rate=300.0, unbatched_budget=32,
                 composite_budget=16, say=lambda _m: None, mixed=True)
    (row,) = rep["rows"]
    assert rep["mismatches"] == 0 and row["complete"] and row["compared_answers"] > 0
    assert "mixed shapes" in mq.format_markdown(rep)
    rep = mq.run([8], instants=2, rounds=1, areas=4, sensors=3, rate=300.0, unbatched_budget=16,
                 composite_budget=8, say=lambda _m: None, peers=("unbatched",))
    (row,) = rep["rows"]
    assert row["batched_per_s"] is None and row["unbatched_per_s"] > 0 and row["composite_per_s"] is None
    assert "not run" in mq.format_markdown(rep)
