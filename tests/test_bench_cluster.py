"""The cluster cost model (bench/cluster_model.py) and a tiny `python -m bench cluster` run.

The model tests check the properties the model must have whatever numbers it is fed
(monotone in hosts, RDMA never slower than TCP, adaptive never worse than a forced mode,
the in-place/fork-join crossover moving with the read cost) and one step computed by hand
from the docstring's formulas. The end-to-end run starts the real servers on a tiny LUBM
file and checks that every configuration gives the same answers.
"""

from __future__ import annotations

import json
import math

import pytest

from bench import cluster_model as cm
from bench.cluster import pattern_terms, profile_query, run_cluster

TCP = cm.Transport("TCP", read_us=120.0, call_us=150.0, post_us=20.0, byte_ns=1.0, remote_cpu_us=60.0)
TCP_BATCHED = cm.Transport("TCP-b", read_us=120.0, call_us=150.0, post_us=20.0, byte_ns=1.0, remote_cpu_us=60.0,
                           batched=True)
RDMA = cm.rdma_transport()
COMPUTE = cm.Compute(row_ns=80.0, fixed_us=300.0, dispatch_us=40.0, threads=16)


def _profiles() -> list[cm.QueryProfile]:
    """A selective star from a constant, a chain, and a non-selective index-started join."""
    star = cm.QueryProfile("star", True, (
        cm.Step("<c> p ?s", "const", 1, 1, 12, 0, 1),
        cm.Step("?s q ?a", "expand", 12, 12, 12, 1, 2, "s"),
        cm.Step("?s r ?b", "expand", 12, 12, 12, 2, 3, "s"),
    ), 1_000_000)
    chain = cm.QueryProfile("chain", True, (
        cm.Step("<c> p ?c", "const", 1, 1, 30, 0, 1),
        cm.Step("?s q ?c", "expand", 30, 30, 600, 1, 2, "c"),
        cm.Step("?s type T", "prune", 250, 600, 40, 2, 2, "s"),
    ), 1_000_000)
    big = cm.QueryProfile("big", False, (
        cm.Step("?x type T", "index", 0, 1, 200_000, 0, 1, "x"),
        cm.Step("?x p ?y", "expand", 200_000, 200_000, 800_000, 1, 2, "x"),
        cm.Step("?y type U", "prune", 50_000, 800_000, 100_000, 2, 2, "y"),
        cm.Step("?y q ?z", "expand", 50_000, 100_000, 150_000, 2, 3, "y"),
    ), 1_000_000)
    return [star, chain, big]


def test_paper_numbers_are_cited_data():
    assert cm.PAPER_TABLE3_MS["Wukong"]["L1"] == 516 and cm.PAPER_TABLE3_MS["Wukong"]["L5"] == 0.17
    assert cm.PAPER_TABLE6_MS["in-place"]["L1"] == 21859 and cm.PAPER_TABLE6_MS["fork-join"]["L7"] == 466
    assert set(cm.PAPER_TABLE3_MS["Wukong"]) == {f"L{i}" for i in range(1, 8)}
    assert cm.PAPER_HOSTS == 6 and cm.PAPER_CORES == 20
    # the RDMA transport reproduces the paper's two READ points: 1.56 us at 8 B, 2.25 us at 2 KB
    assert RDMA.read_us == pytest.approx(1.56)
    assert RDMA.read_us + (2048 - 8) * RDMA.byte_ns / 1000 == pytest.approx(2.25)
    assert RDMA.remote_cpu_us == 0


def test_one_step_by_hand():
    st = cm.Step("e", "expand", 100, 100, 300, 1, 2, "x")
    h = 4
    f = 3 / 4
    # in place: remote reads * read + remote bytes * byte_ns + rows touched * row_ns
    ip = f * 100 * TCP.read_us + f * 300 * 8 * TCP.byte_ns / 1000 + 400 * COMPUTE.row_ns / 1000
    assert cm.inplace_step_us(st, TCP, COMPUTE, h) == pytest.approx(ip)
    # fork-join from one host: call + destinations * post + dispatch + shipped history + parallel compute
    dest = min(h - 1, math.ceil(f * 100))
    fj = (TCP.call_us + dest * TCP.post_us + COMPUTE.dispatch_us + f * 100 * 1 * 8 * TCP.byte_ns / 1000
          + 400 * COMPUTE.row_ns / 1000 / (h * COMPUTE.threads))
    assert cm.forkjoin_step_us(st, TCP, COMPUTE, h, spread=False) == pytest.approx(fj)
    p = cm.QueryProfile("one", False, (st,), 1000)
    assert cm.project(p, TCP, COMPUTE, h, "in-place").latency_us == pytest.approx(COMPUTE.fixed_us + ip)
    gather = TCP.call_us + f * 300 * 2 * 8 * TCP.byte_ns / 1000
    assert cm.project(p, TCP, COMPUTE, h, "fork-join").latency_us == pytest.approx(COMPUTE.fixed_us + fj + gather)


def test_more_hosts_never_increase_work_per_host():
    for p in _profiles():
        for mode in cm.MODES:
            work = [cm.project(p, TCP, COMPUTE, h, mode).compute_us_per_host for h in range(1, 17)]
            assert all(b <= a + 1e-9 for a, b in zip(work, work[1:], strict=False)), (p.name, mode, work)
            assert work[-1] < work[0]
    # and the fork-join compute on the critical path shrinks with hosts
    big = _profiles()[2]
    fj = [cm.forkjoin_step_us(big.steps[1], RDMA, COMPUTE, h, spread=True) for h in (2, 4, 8, 16)]
    assert fj == sorted(fj, reverse=True)


def test_single_host_has_no_communication():
    for p in _profiles():
        r = cm.project(p, TCP, COMPUTE, 1, "in-place")
        rows = sum(st.rows for st in p.steps)
        assert r.latency_us == pytest.approx(COMPUTE.fixed_us + rows * COMPUTE.row_ns / 1000)
        assert r.wire_bytes == 0
        assert cm.project(p, TCP, COMPUTE, 1, "adaptive").latency_us == cm.project(p, RDMA, COMPUTE, 1,
                                                                                   "adaptive").latency_us


def test_rdma_projection_faster_than_tcp():
    for p in _profiles():
        for h in (2, 6, 8, 16):
            for mode in cm.MODES:  # per-vertex reads on both: every mode
                r, t = cm.project(p, RDMA, COMPUTE, h, mode), cm.project(p, TCP, COMPUTE, h, mode)
                assert r.latency_us < t.latency_us, (p.name, h, mode)
            for mode in ("fork-join", "adaptive"):  # against batched TCP reads: with the choice of forking
                r, t = cm.project(p, RDMA, COMPUTE, h, mode), cm.project(p, TCP_BATCHED, COMPUTE, h, mode)
                assert r.latency_us < t.latency_us, (p.name, h, mode)
            for tcp in (TCP, TCP_BATCHED):
                sel = [cm.project(q, RDMA, COMPUTE, h, "adaptive") for q in _profiles() if q.selective]
                tsel = [cm.project(q, tcp, COMPUTE, h, "adaptive") for q in _profiles() if q.selective]
                assert cm.mix_qps(sel, RDMA, COMPUTE.threads) > cm.mix_qps(tsel, tcp, COMPUTE.threads)


def test_batched_reads_cost_one_call_per_host():
    h = 8
    small, large = cm.Step("a", "expand", 10, 10, 10, 1, 2, "x"), cm.Step("b", "expand", 10_000, 10, 10, 1, 2, "x")
    # same rows, so the only difference would be the reads: batched, both reach all 7 other hosts
    assert cm.inplace_step_us(small, TCP_BATCHED, COMPUTE, h) == cm.inplace_step_us(large, TCP_BATCHED, COMPUTE, h)
    assert cm.inplace_step_us(large, TCP, COMPUTE, h) > 100 * cm.inplace_step_us(large, TCP_BATCHED, COMPUTE, h)
    one = cm.Step("c", "expand", 1, 1, 1, 1, 2, "x")
    comm = cm.inplace_step_us(one, TCP_BATCHED, COMPUTE, h) - one.rows * COMPUTE.row_ns / 1000
    assert comm == pytest.approx(TCP_BATCHED.read_us + (7 / 8) * 8 * TCP_BATCHED.byte_ns / 1000)


def test_adaptive_never_worse_than_a_forced_mode():
    for p in _profiles():
        for t in (RDMA, TCP):
            for h in (2, 3, 8):
                a = cm.project(p, t, COMPUTE, h, "adaptive")
                assert a.latency_us <= cm.project(p, t, COMPUTE, h, "in-place").latency_us + 1e-6
                assert a.latency_us <= cm.project(p, t, COMPUTE, h, "fork-join").latency_us + 1e-6
                assert len(a.choices) == len(p.steps) and set(a.choices) <= {"I", "F"}


def test_selective_stays_in_place_and_big_frontiers_fork_on_rdma():
    star, _chain, big = _profiles()
    assert cm.project(star, RDMA, COMPUTE, 8, "adaptive").choices == ("I", "I", "I")
    # an index start is distributed, the step from its vertex local; then the big frontier forks
    assert cm.project(big, RDMA, COMPUTE, 8, "adaptive").choices == ("F", "F", "F", "F")
    assert cm.project(big, RDMA, COMPUTE, 8, "in-place").choices == ("F", "F", "I", "I")


def test_steps_local_to_a_fork_cost_no_communication():
    _star, _chain, big = _profiles()
    for t in (RDMA, TCP):
        r = cm.project(big, t, COMPUTE, 8, "fork-join")
        local = big.steps[1].rows * COMPUTE.row_ns / 1000 / (8 * COMPUTE.threads)
        rest = cm.project(cm.QueryProfile("x", False, big.steps[:1], 1), t, COMPUTE, 8, "fork-join")
        two = cm.project(cm.QueryProfile("x", False, big.steps[:2], 1), t, COMPUTE, 8, "fork-join")
        # the second step adds its parallel compute and a bigger final gather, no call
        g1 = cm.gather_us(big.steps[0].rows_out, 1, t, 8)
        g2 = cm.gather_us(big.steps[1].rows_out, 2, t, 8)
        assert two.latency_us - rest.latency_us == pytest.approx(local + g2 - g1)
        assert r.choices == ("F", "F", "F", "F")


def test_crossover_moves_with_read_cost():
    xs = []
    for read_us in (1.0, 2.0, 10.0, 50.0, 200.0):
        t = cm.Transport("t", read_us=read_us, call_us=150.0, post_us=5.0, byte_ns=0.5, remote_cpu_us=0.0)
        xs.append(cm.crossover_reads(t, COMPUTE, 8))
    assert all(x is not None for x in xs)
    assert xs == sorted(xs, reverse=True) and xs[0] > xs[-1]  # dearer reads: fork earlier
    # at the crossover fork-join wins, one vertex fewer it does not
    t = cm.Transport("t", read_us=10.0, call_us=150.0, post_us=5.0, byte_ns=0.5, remote_cpu_us=0.0)
    n = cm.crossover_reads(t, COMPUTE, 8)
    at = cm.Step("", "expand", n, n, n, 2, 3)
    below = cm.Step("", "expand", n - 1, n - 1, n - 1, 2, 3)
    assert cm.forkjoin_step_us(at, t, COMPUTE, 8, False) < cm.inplace_step_us(at, t, COMPUTE, 8)
    assert cm.forkjoin_step_us(below, t, COMPUTE, 8, False) >= cm.inplace_step_us(below, t, COMPUTE, 8)


def test_scaling_keeps_selective_and_grows_nonselective():
    star, _chain, big = _profiles()
    assert star.scaled(10 * star.triples).steps == star.steps
    b10 = big.scaled(10 * big.triples)
    assert b10.steps[1].rows_out == 10 * big.steps[1].rows_out and b10.steps[0].kind == "index"
    assert b10.triples == 10 * big.triples


def test_calibration_recovers_row_cost():
    profs = {p.name: p for p in _profiles()}
    ms = {p.name: (COMPUTE.fixed_us + sum(s.rows for s in p.steps) * 80.0 / 1000) / 1000 for p in profs.values()}
    assert cm.calibrate_row_ns(profs, ms, COMPUTE.fixed_us) == pytest.approx(80.0)


def test_tables_render():
    profs = {p.name: p for p in _profiles()}
    lines = cm.projection_table(profs, [RDMA, TCP], COMPUTE, 8)
    assert any(line.startswith("| star |") for line in lines) and "queries/s" in "\n".join(lines)
    assert "\n".join(cm.transport_table([RDMA, TCP], COMPUTE)).count("| TCP |") == 1


# --------------------------------------------------------------------------- profiles on real data
def test_pattern_terms():
    assert pattern_terms('?x <http://a/b> "a b c"@en') == ("?x", "<http://a/b>", '"a b c"@en')
    with pytest.raises(ValueError):
        pattern_terms("?x <p>")


def test_profile_counts_match_the_engine(tmp_path):
    from bench import lubm
    from bench.queries import BY_NAME
    from engine.database import Database

    path = tmp_path / "d.nt"
    info = lubm.generate(path, triples=5000, seed=1)
    db = Database()
    db.load_file(str(path), format="application/n-triples")

    def count(text: str) -> int:
        res = db.query(text)
        return int(res.terms.keys(res.columns[0])[0].split('"')[1])

    for name in ("L4", "C1", "L2"):
        q = BY_NAME[name]
        plan = db.explain(q.text)
        stack, bgp = [plan["plan"]], None
        while stack:
            n = stack.pop()
            if n.get("patterns"):
                bgp = n
                break
            stack.extend(n.get("children", []))
        pre = q.text[: q.text.index("SELECT")]
        p = profile_query(name, q.selective, bgp["patterns"], bgp["order"], count, info["triples"], pre)
        assert len(p.steps) == len(bgp["patterns"])
        assert p.result_rows == len(db.query(q.text))  # the last prefix is the whole BGP
        assert [s.width_in for s in p.steps[1:]] == [s.width_out for s in p.steps[:-1]]
        assert all(s.rows_in == prev.rows_out for prev, s in zip(p.steps, p.steps[1:], strict=False))
        if name == "C1":  # starts at the constant professor: one read
            assert p.steps[0].kind == "const" and p.steps[0].reads == 1
        if name == "L2":  # ?X rdf:type ub:Course starts from the type index, binding ?X
            assert p.steps[0].kind == "index" and p.steps[0].start == "X"
            assert p.steps[1].start == "X"


# --------------------------------------------------------------------------- end to end
def test_cluster_bench_end_to_end(tmp_path):
    """Every configuration on a tiny LUBM file: same answers, per-worker data, a model table."""
    from bench.peers import availability, oxigraph_binary

    if availability().get("jindou-http"):
        pytest.skip(availability()["jindou-http"])
    out = tmp_path / "cluster.md"
    configs = "jindou-1,shm-2/adaptive,shm-3/in-place,shm-3/fork-join,shm-3/adaptive,flight-3/adaptive," \
              "flight-tcp-3/adaptive" + (",oxigraph" if oxigraph_binary() else "")
    code = run_cluster(["--quick", "--scale", "6k", "--workdir", str(tmp_path), "--configs", configs,
                        "--queries", "L1,L2,L4,L5,S1,C1,Q4", "--timeout", "60", "--threads", "4",
                        "--out", str(out), "--quiet"])
    assert code == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["mismatches"] == []
    names = [c["name"] for c in res["configs"]]
    assert all(c["status"] == "ok" for c in res["configs"]), res["configs"]
    for q, row in res["latency"].items():
        assert set(row) == set(names) and all(v["status"] == "ok" for v in row.values()), (q, row)
        assert len({v["rows"] for v in row.values()}) == 1
    for q in ("L4", "L5", "S1", "C1", "Q4"):  # full results compared for the selective ones
        assert len(set(res["digests"][q].values())) == 1 and len(res["digests"][q]) == len(names)
    total = res["data"]["triples"]
    for name in names:
        if name.startswith(("shm-", "flight")):
            ws = res["memory"][name]["workers"]
            assert res["memory"][name]["workers_in_status"]  # GET /status lists the workers
            assert len(ws) == int(name.split("/")[0][-1]) and all(w["state"] == "up" for w in ws)
            assert sum(w["triples"] for w in ws) == total  # each triple counted by one worker
            assert all(w["rss"] > 0 for w in ws)
        assert res["throughput"][name]["completed"] > 0 and res["throughput"][name]["errors"] == 0
    assert res["transport_probe"]["tcp"]["flight"]["read_us"] > 0
    assert res["transport_probe"]["unix"]["shm"]["read_us"] < res["transport_probe"]["unix"]["flight"]["read_us"]
    md = out.read_text()
    assert "Projected latency (ms) on 8 hosts" in md and "Wukong dynamic" in md
    assert "| L4 |" in md and "shm-3/adaptive" in md
