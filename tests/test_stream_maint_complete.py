"""The maintained body written only by the batch completing its instant once the instants are
completed by elements before they are asked (``maintained.COMPLETED_RUN``), the refresh
looking up only the absent constants (``Maintained.REFRESH_ABSENT``) and the next instant's
seq ranges from the stream's element times (``Maintained.PT_RANGES``, the batch in hand read
for the move past a completed instant), wave 2o (issue 13): every
instant equals the one with them off and the one without maintenance -- tumbling, hopping and
sliding windows, instants completed by heartbeats or by elements, elements on the instant's
bound, stored-graph writes between batches, the state dropped in between -- and the paths are
taken."""

from __future__ import annotations

import orjson
import pytest

from engine.database import Database
from engine.stream import maintained, pred_times
from engine.stream.continuous import InstantEvaluator
from engine.stream.manager import StreamManager
from tests.test_stream_tiny_gen import EX, STATIC, _rows

XSD = "http://www.w3.org/2001/XMLSchema#"

#: shapes over a tumbling window: a grouped SUM over a stored join, an arithmetic FILTER against
#: stored values, a plain join with a stored type, DISTINCT, ASK, ORDER BY + LIMIT
QUERIES = {
    "sum": (f"SELECT ?s (SUM(?v) AS ?t) (COUNT(?o) AS ?n) FROM <{STATIC}> FROM STREAM <{EX}a> "
            f"[RANGE {{r}} STEP {{s}}] WHERE {{{{ ?o <{EX}by> ?s . ?s <{EX}type> <{EX}Sensor> . "
            f"?o <{EX}value> ?v }}}} GROUP BY ?s HAVING (SUM(?v) > 1)"),
    "near": (f"SELECT ?o ?s ?e FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {{r}} STEP {{s}}] "
             f"WHERE {{{{ ?o <{EX}by> ?s . ?o <{EX}value> ?v . ?e <{EX}at> ?w "
             f"FILTER((?v - ?w) * (?v - ?w) < 2.5) }}}}"),
    "join": (f"SELECT ?o ?s FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {{r}} STEP {{s}}] "
             f"WHERE {{{{ ?o <{EX}by> ?s . ?s <{EX}type> <{EX}Sensor> }}}}"),
    "distinct": (f"SELECT DISTINCT ?s FROM STREAM <{EX}a> [RANGE {{r}} STEP {{s}}] "
                 f"WHERE {{{{ ?o <{EX}by> ?s . ?o <{EX}value> ?v }}}}"),
    "ask": (f"ASK FROM STREAM <{EX}a> [RANGE {{r}} STEP {{s}}] "
            f"WHERE {{{{ ?o <{EX}by> <{EX}s3> . ?o <{EX}value> ?v }}}}"),
    "order": (f"SELECT ?o ?v FROM STREAM <{EX}a> [RANGE {{r}} STEP {{s}}] "
              f"WHERE {{{{ ?o <{EX}value> ?v }}}} ORDER BY DESC(?v) ?o LIMIT 3"),
    # (a predicate only the stream brings, from second 6 on; one that never comes)
    "fresh": (f"SELECT ?o ?s ?w FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {{r}} STEP {{s}}] "
              f"WHERE {{{{ ?o <{EX}by> ?s . ?s <{EX}type> <{EX}Sensor> . ?o <{EX}late> ?w }}}}"),
    "never": (f"SELECT ?o ?s FROM STREAM <{EX}a> [RANGE {{r}} STEP {{s}}] "
              f"WHERE {{{{ ?o <{EX}by> ?s . ?o <{EX}never> ?w }}}}"),
}


def _events(monkeypatch, text: str, maintain: bool = True, cut: bool = True, lazy: bool = True,
            lead: bool = False, writes: bool = False, drop_at: int | None = None, spy: dict | None = None,
            seconds: int = 18, lead_until: int | None = None) -> list:
    """``text`` fed by 4 POSTs per second and a heartbeat per second: its result events.
    ``cut``: COMPLETED_RUN, REFRESH_ABSENT and PT_RANGES on (else off). ``lead``: the next second's first POST comes before the heartbeat
    (the instants are completed by an element, as in the benchmark's replay), one element
    sits on the instant's bound; else a heartbeat just past each instant completes it. ``writes``: a stored type added every 5 s between POSTs.
    ``drop_at``: the maintained state reset at that second (a drop, as after an error).
    ``lead_until``: ``lead`` up to that second only (then the heartbeats complete them)."""
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", maintain)
    monkeypatch.setattr(maintained.Maintained, "LAZY_BODY", lazy)
    monkeypatch.setattr(maintained.Maintained, "REFRESH_ABSENT", cut)
    monkeypatch.setattr(maintained.Maintained, "PT_RANGES", cut)
    monkeypatch.setattr(maintained, "COMPLETED_RUN", 2 if cut else 1 << 30)
    db = Database()
    m = StreamManager(db)
    c0, r0, p0, m0 = maintained._BY_COMPLETE[0], maintained._REFRESHED[0], maintained._PT_RANGES[0], \
        maintained._RUN_MISS[0]
    b0 = maintained._BATCH_ROWS[0]
    try:
        stored = [f"<{EX}s{i}> <{EX}type> <{EX}Sensor> ." for i in range(1, 5)]
        stored += [f'<{EX}e{i}> <{EX}at> "{i * 0.75}"^^<{XSD}double> .' for i in range(12)]
        db.load_data("\n".join(stored).encode() + b"\n", "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query("REGISTER QUERY q AS " + text)
        ev = m._reg.queries["q"].evaluator

        def post(k: int, j: int, bound: bool = False) -> None:
            lines = []
            for i in range(2):
                o = f"<{EX}o{k}_{j}_{i}>"
                t = k * 1000 + j * 250 + i + 2
                if bound and i == 0 and k % 2:
                    t = k * 1000   # (on the bound: the instant at k * 1000 holds it)
                val = f'"{(k * 7 + j * 3 + i) % 9}"^^<{XSD}decimal>'
                lines += [{"s": o, "p": f"<{EX}by>", "o": f"<{EX}s{1 + (3 * k + j + i) % 7}>", "t": t},
                          {"s": o, "p": f"<{EX}value>", "o": val, "t": t}]
                if k >= 6 and j == 2:
                    lines.append({"s": o, "p": f"<{EX}late>", "o": f"<{EX}w{k % 3}>", "t": t})
            assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0

        for k in range(seconds):
            ld = lead and (lead_until is None or k < lead_until)
            for j in range(1 if ld and k else 0, 4):   # (j = 0: made the second before, with lead)
                post(k, j)
                if writes and k % 5 == 2 and j == 1:
                    db.update(f"INSERT DATA {{ GRAPH <{STATIC}> {{ <{EX}s{5 + k % 3}> <{EX}type> <{EX}Sensor> }} }}")
            if ld and (lead_until is None or k + 1 < lead_until):
                post(k + 1, 0, True)   # (an element beyond the instant before its heartbeat)
            if drop_at == k and ev._maint is not None:
                with ev._maint.lock:
                    ev._maint._reset()
            # (without lead: a heartbeat past the instant completes it, before the next elements)
            m.heartbeat("a", (k + 1) * 1000 + (0 if ld and (lead_until is None or k + 1 < lead_until) else 1))
            assert m.drain(30)
        if spy is not None:
            spy["by_complete"] = maintained._BY_COMPLETE[0] - c0
            spy["refreshed"] = maintained._REFRESHED[0] - r0
            spy["run_miss"] = maintained._RUN_MISS[0] - m0
            spy["batch_rows"] = maintained._BATCH_ROWS[0] - b0
            spy["need"] = ev._maint._run_need if ev._maint is not None else None
            spy["pt_ranges"] = maintained._PT_RANGES[0] - p0
            mt = ev._maint
            if mt is not None:   # (the ranges from the element times: the store's, at any time)
                for bw in mt.windows:   # (the index the relevance check keeps, made and synced here)
                    pred_times.of(bw.store).sync(bw.store)
                p1 = maintained._PT_RANGES[0]
                st0 = mt.windows[0].store   # (at the elements' own times, a bound on each, and between)
                times = sorted(set(st0.read(st0.live_start, st0.end_seq)[1].tolist()))
                ts = sorted({x + d for x in times for d in (-1, 0, 1)} | set(range(0, (seconds + 2) * 1000, 125)))
                spy["targets"] = [(t, mt._targets(t), [bw.store.window_range(bw.window, t) for bw in mt.windows])
                                  for t in ts]
                spy["pt_targets"] = maintained._PT_RANGES[0] - p1
        ordered = "ORDER BY" in text
        return [(e.id, _canon(_rows(e.data), ordered)) for e in m.log("q").since(None, from_t=-1)
                if e.event == "result"]
    finally:
        m.close()
        db.close()


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize(("rng", "step"), [("4s", "4s"), ("2s", "3s"), ("3s", "1s")])
@pytest.mark.parametrize("lead", [False, True])
def test_the_cuts_answer_like_without_them_and_like_no_maintenance(monkeypatch, name, rng, step, lead):
    text = QUERIES[name].format(r=rng, s=step)
    spy: dict = {}
    absent = [0]
    look = maintained._absent_ids

    def counted(*a):
        absent[0] += 1
        return look(*a)
    monkeypatch.setattr(maintained, "_absent_ids", counted)
    on = _events(monkeypatch, text, lead=lead, spy=spy, seconds=24)
    n_on = absent[0]
    without = _events(monkeypatch, text, cut=False, lead=lead, seconds=24)
    assert absent[0] == n_on   # (off: the full look-up only)
    off = _events(monkeypatch, text, maintain=False, cut=False, lead=lead, seconds=24)
    assert on == without == off
    assert len(off) >= 6
    assert spy["pt_ranges"] > 0 and spy["pt_targets"] >= 8   # (the recent instants: the index is trimmed below)
    assert all(a == b for _, a, b in spy["targets"]), [x for x in spy["targets"] if x[1] != x[2]][:3]
    if name in ("fresh", "never"):
        assert spy["refreshed"] > 0 and n_on > 0   # (a constant absent at first: looked up again, alone)


@pytest.mark.parametrize("name", ["sum", "join", "near", "fresh"])
@pytest.mark.parametrize("lead", [False, True])
def test_stored_writes_between_batches_and_a_drop(monkeypatch, name, lead):
    """A stored type inserted between POSTs (a held body's snapshot is not the instant's), and
    the state reset mid-run: the same instants as with the cuts off and without maintenance."""
    text = QUERIES[name].format(r="4s", s="4s")
    on = _events(monkeypatch, text, lead=lead, writes=True, drop_at=9)
    without = _events(monkeypatch, text, cut=False, lead=lead, writes=True, drop_at=9)
    off = _events(monkeypatch, text, maintain=False, cut=False, lead=lead, writes=True, drop_at=9)
    assert on == without == off
    assert any(rows for _, rows in off)


@pytest.mark.parametrize(("rng", "step"), [("4s", "4s"), ("3s", "1s")])
def test_completed_instants_leave_the_body_to_the_completing_batch(monkeypatch, rng, step):
    """Instants completed by an element before they are asked: after COMPLETED_RUN of them the
    batches guessed to be the last leave the body to the completing one (the spy), with the
    same events as with it off, with the lazy body off and without maintenance; instants
    completed by a heartbeat keep the guess."""
    text = QUERIES["sum"].format(r=rng, s=step)
    spy: dict = {}
    on = _events(monkeypatch, text, lead=True, spy=spy, seconds=30)
    assert spy["by_complete"] > 0 and spy["batch_rows"] > 0   # (moved on from the batch in hand)
    without: dict = {}
    assert on == _events(monkeypatch, text, cut=False, lead=True, spy=without, seconds=30)
    assert without["by_complete"] == 0
    assert on == _events(monkeypatch, text, lead=True, lazy=False, seconds=30)
    assert on == _events(monkeypatch, text, maintain=False, cut=False, lead=True, seconds=30)
    spy = {}
    _events(monkeypatch, text, lead=False, spy=spy, seconds=30)
    assert spy["by_complete"] == 0   # (heartbeat-completed instants: the guess stays)


def _canon(rows, ordered: bool):
    return rows if type(rows) is bool or ordered else sorted(rows)


@pytest.mark.parametrize(("rng", "step"), [("4s", "4s"), ("3s", "1s")])
def test_a_run_that_ends_costs_one_body_at_the_instant_and_a_longer_run(monkeypatch, rng, step):
    """Instants completed by elements for a while, then by heartbeats only: the first instant
    asked before its completing batch writes the body itself (the spy), the query then needs a
    longer run; every event as with the cuts off and without maintenance."""
    text = QUERIES["sum"].format(r=rng, s=step)
    monkeypatch.setattr(maintained.Maintained, "GUARD_EVERY", 1 << 20)   # (no guard's probe on that instant)
    spy: dict = {}
    on = _events(monkeypatch, text, lead=True, lead_until=17, spy=spy, seconds=30)
    assert spy["by_complete"] > 0 and spy["run_miss"] >= 1
    assert spy["need"] >= 2 * maintained.COMPLETED_RUN
    assert on == _events(monkeypatch, text, cut=False, lead=True, lead_until=17, seconds=30)
    assert on == _events(monkeypatch, text, maintain=False, cut=False, lead=True, lead_until=17, seconds=30)
