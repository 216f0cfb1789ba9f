"""`python -m bench streams`: the LSBench-style generator and the per-window cross-check of peers.

The tiny runs are oracle tests: Jindou (incremental and from scratch) against the
pyoxigraph composite peer at every measured window. The Spark SQL peer is left out
here (tests/test_spark_peer.py covers it).
"""

from __future__ import annotations

import json

import pyoxigraph as ox
import pytest

from bench import citybench as cb
from bench import lsbench
from bench import streams as S

XSD = "http://www.w3.org/2001/XMLSchema#"
LOCAL_PEERS = ["jindou", "jindou-full", "csparql-composite"]


def test_generator_is_deterministic_for_a_seed():
    a = lsbench.generate(users=120, rate=400, seconds=8, seed=7)
    b = lsbench.generate(users=120, rate=400, seconds=8, seed=7)
    c = lsbench.generate(users=120, rate=400, seconds=8, seed=8)
    assert a.digest() == b.digest()
    assert a.static == b.static and a.streams == b.streams
    assert c.digest() != a.digest()
    # the rate is triples per second of event time over the five streams (Poisson: roughly)
    n = a.n_stream_triples()
    assert 0.7 * 400 * 8 < n < 1.3 * 400 * 8
    assert list(a.streams) == list(lsbench.STREAMS.values())
    for els in a.streams.values():
        taus = [t for t, _ in els]
        assert taus == sorted(taus) and a.start_ms <= taus[0] and taus[-1] <= a.end_ms
    # the friend graph is symmetric, and the static graph is valid N-Triples
    knows = {(s, o) for s, p, o in a.static if p == f"<{lsbench.FOAF}knows>"}
    assert knows and all((o, s) in knows for s, o in knows)
    assert len(list(ox.parse(a.static_nt(), format=ox.RdfFormat.N_TRIPLES))) == len(a.static)


def test_queries_parse_with_windows_and_static_graph():
    texts = lsbench.queries()
    assert sorted(texts) == S.LSBENCH_QUERIES
    qs = {k: cb.parse_query(k, v) for k, v in texts.items()}
    tumbling = [k for k, q in qs.items() if all(q.windows[s] == q.steps[s] for s in q.windows)]
    sliding = [k for k, q in qs.items() if any(q.windows[s] >= 5 * q.steps[s] for s in q.windows)]
    assert tumbling and sliding
    assert [k for k, q in qs.items() if len(q.windows) == 2]                       # two-stream joins
    assert [k for k, q in qs.items() if not q.static]                              # pure stream
    assert all(q.static in ([], [lsbench.STATIC_GRAPH]) for q in qs.values())
    assert "GROUP BY" in texts["L4"] and "FILTER" in texts["L3"]
    for q in qs.values():
        assert "STREAM" not in q.plain.upper().replace("/STREAM/", "")
        ox.Store().query(q.plain)   # the composite peer's text is plain SPARQL


def test_result_keys_compare_numbers_by_value():
    d = ox.NamedNode(XSD + "decimal")
    assert S.key_ox(ox.Literal("2.50", datatype=d)) == S.key_nt(f'"2.5E0"^^<{XSD}double>')
    assert S.key_json({"type": "literal", "value": "3", "datatype": XSD + "long"}) == S.key_nt(f'"3"^^<{XSD}integer>')
    assert S.key_nt('"a\\"b"@EN') == S.key_ox(ox.Literal('a"b', language="en"))
    assert S.key_nt('"x"') == S.key_json({"type": "literal", "value": "x"})
    assert S.key_nt('"3"') != S.key_nt(f'"3"^^<{XSD}integer>')
    rows = [[("uri", "a"), ("num", "1")], [("uri", "b"), ("num", "2")]]
    assert S.canon_rows(["x", "y"], rows) == S.canon_rows(["y", "x"], [r[::-1] for r in rows[::-1]])
    assert S.canon_rows(["x", "y"], rows) != S.canon_rows(["x", "y"], rows + rows[:1])


def test_disagreement_is_reported():
    wl = S.load_lsbench(["L1"], minutes=0.2, rate=200, users=60, say=lambda *_: None)
    t = wl.instants(wl.queries[0])
    same = S.canon_rows(["x"], [[("uri", "a")]])
    other = S.canon_rows(["x"], [[("uri", "b")]])
    runs = {"jindou": {"L1": S.PeerRun(latency=dict.fromkeys(t, 1.0), results=dict.fromkeys(t, same))},
            "csparql-composite": {"L1": S.PeerRun(latency=dict.fromkeys(t, 20.0),
                                                  results={**dict.fromkeys(t, same), t[0]: other})}}
    s = S.summarize(wl, runs)
    row = s["queries"][0]
    assert row["compared_windows"] == len(t) and row["disagreements"] == 1
    assert row["mismatches"][0]["diff"]["jindou vs csparql-composite"]["only_second"]
    assert row["ratios"]["csparql-composite/jindou"] == 20.0
    assert s["targets"]["csparql-composite"]["met"]
    assert "**NO** (1 of" in S.format_markdown(s, ["jindou", "csparql-composite"])
    # a window a peer failed on is reported, not compared
    runs["csparql-composite"]["L1"].results[t[0]] = S.canon_error("timeout", "too slow")
    runs["csparql-composite"]["L1"].errors = 1
    row = S.summarize(wl, runs)["queries"][0]
    assert row["disagreements"] == 0 and row["compared_windows"] == len(t) - 1
    assert row["error_samples"] == [{"t": t[0], "peer": "csparql-composite", "error": "timeout: too slow"}]


def test_lsbench_l1_to_l7_peers_agree_on_every_window(tmp_path):
    """40 s of event time at a small rate: every measured window of L1-L7 gives the same
    multiset of rows on Jindou (incremental and from scratch) and on the pyoxigraph composite."""
    out = tmp_path / "streams.json"
    code = S.main(["--workload", "lsbench", "--minutes", "0.67", "--rate", "300", "--users", "200",
                   "--peers", ",".join(LOCAL_PEERS), "--json", str(out)])
    report = json.loads(out.read_text())
    (wl,) = report["workloads"]
    assert [q["query"] for q in wl["queries"]] == S.LSBENCH_QUERIES
    for q in wl["queries"]:
        assert q["disagreements"] == 0, q
        assert q["compared_windows"] == q["instants"] > 0, q
        assert q["nonempty_windows"] > 0, q          # the check is not vacuous
        for p in LOCAL_PEERS:
            st = q["peers"][p]
            assert st["status"] == "ran" and st["errors"] == 0, (p, q)
            assert st["windows"] == q["instants"] and st["median_ms"] > 0, (p, q)
    assert code == 0


def test_citybench_workload_peers_agree():
    try:
        root = cb.shared_root()
    except FileNotFoundError:
        pytest.skip("shared/citybench not found")
    peers = [*LOCAL_PEERS, "jindou-unmaintained"]
    rep = S.run(["citybench"], queries=["C1", "C6", "C11"], minutes=0.15, peers=peers, root=root,
                say=lambda *_: None)
    (wl,) = rep["workloads"]
    assert [q["query"] for q in wl["queries"]] == ["C1", "C6", "C11"]
    for q in wl["queries"]:
        assert q["disagreements"] == 0 and q["compared_windows"] == q["instants"] > 0, q
        for p in S.JINDOU_PEERS:   # the replay's ingestion time per instant, and with the median instant
            st = q["peers"][p]
            assert st["ingest_us"] > 0 and st["total_us"] > st["ingest_us"] + st["advance_us"], (p, q)
        assert q["peers"]["jindou-unmaintained"]["advance_us"] == q["peers"]["jindou-unmaintained"]["maint_us"] == 0, q
    assert "jindou-unmaintained ingest (of it maintaining) / advance CPU µs/instant" in S.format_markdown(wl, peers)
    assert {q["query"] for q in wl["queries"] if q["nonempty_windows"]} == {"C1", "C6"}   # C11 is never true


def test_composite_woken_timing_gives_the_same_windows():
    """``--composite-timing woken`` runs each window on a worker thread after an idle gap: only
    where the time is measured changes, never a window's result (errors come back too)."""
    wl = S.load_lsbench(["L1", "L4"], minutes=0.2, rate=200, users=60, say=lambda *_: None)
    hot = S.run_composite(wl, say=lambda *_: None, timing="hot")
    woken = S.run_composite(wl, say=lambda *_: None, timing="woken", idle_ms=0.5)
    for q in ("L1", "L4"):
        assert hot[q].results == woken[q].results and hot[q].results
        assert set(woken[q].latency) == set(hot[q].latency) and woken[q].errors == 0
    with pytest.raises(ValueError):
        S.run_composite(wl, say=lambda *_: None, timing="lukewarm")
    h = S._Handoff(0.0)
    try:
        with pytest.raises(ZeroDivisionError):
            h.call(lambda: 1 / 0)
        assert h.call(lambda a, b: a + b, 2, 3) == 5
    finally:
        h.close()


def test_lsbench_varied_shapes_agree_on_every_window(tmp_path):
    """Two queries of every shape of :mod:`bench.lsvaried` (string / IRI / IN filters, UNION,
    OPTIONAL, NOT EXISTS, other aggregates, ORDER BY + LIMIT, BIND, ASK, ...): every window is
    the same multiset on Jindou (maintained and generated paths on, and off) and on the
    pyoxigraph composite, and every Jindou instant says which path answered it."""
    from bench import lsvaried  # noqa: PLC0415

    n = 2 * len(lsvaried.TEMPLATES)
    out = tmp_path / "varied.json"
    peers = ["jindou", "jindou-unmaintained", "csparql-composite"]
    code = S.main(["--workload", "lsbench-varied", "--varied", str(n), "--minutes", "0.5",
                   "--small-rate", "120", "--users", "150", "--peers", ",".join(peers), "--json", str(out)])
    report = json.loads(out.read_text())
    (wl,) = report["workloads"]
    assert len(wl["queries"]) == n
    nonempty = 0
    for q in wl["queries"]:
        assert q["disagreements"] == 0, q
        assert q["compared_windows"] == q["instants"] > 0, q
        nonempty += q["nonempty_windows"] > 0
        for p in peers:
            assert q["peers"][p]["status"] == "ran" and q["peers"][p]["errors"] == 0, (p, q)
        maintained, generated, evaluated = q["peers"]["jindou"]["paths"]
        assert evaluated >= q["instants"] and 0 <= maintained + generated <= evaluated, q
    assert nonempty >= n * 3 // 4      # the comparison is not vacuous
    assert code == 0


def test_lsbench_varied_queries_are_seeded_and_cover_every_shape():
    from bench import lsvaried  # noqa: PLC0415

    a, b, c = lsvaried.queries(seed=1), lsvaried.queries(seed=1), lsvaried.queries(seed=2)
    assert a == b and a != c
    assert [lsvaried.family(q) for q in a] == list(lsvaried.TEMPLATES)
    qs = {k: cb.parse_query(k, v) for k, v in a.items()}
    assert {q.form for q in qs.values()} == {"SELECT", "ASK"}
    assert all(q.windows and set(q.steps) == set(q.windows) for q in qs.values())


def test_lsbench_walk_random_bgps_agree_on_every_window(tmp_path):
    """Stream-WatDiv-style random-walk BGPs (:mod:`bench.lswalk`): every window is the same
    multiset on Jindou (fast paths on and off) and on the pyoxigraph composite; the size check
    keeps every drawn query's answers bounded."""
    from bench import lswalk  # noqa: PLC0415

    out = tmp_path / "walk.json"
    peers = ["jindou", "jindou-unmaintained", "csparql-composite"]
    code = S.main(["--workload", "lsbench-walk", "--varied", "12", "--seed", "3", "--minutes", "0.5",
                   "--small-rate", "60", "--users", "200", "--peers", ",".join(peers), "--json", str(out)])
    report = json.loads(out.read_text())
    (wl,) = report["workloads"]
    assert len(wl["queries"]) == 12
    for q in wl["queries"]:
        assert q["disagreements"] == 0, q
        assert q["compared_windows"] == q["instants"] > 0, q
        for p in peers:
            assert q["peers"][p]["status"] == "ran" and q["peers"][p]["errors"] == 0, (p, q)
    assert sum(q["nonempty_windows"] > 0 for q in wl["queries"]) >= 4    # not vacuous
    assert code == 0
    data = lsbench.generate(users=200, rate=60, seconds=30, seed=3)
    texts = lswalk.queries(data, 12, 3)
    assert texts == lswalk.queries(data, 12, 3) and len(set(texts.values())) == 12
    assert all(cb.parse_query(k, v).windows for k, v in texts.items())
