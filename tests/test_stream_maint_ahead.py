"""Tumbling windows' instants evaluated ahead on the ingestion thread (``engine.stream.maint_ahead``)
and the body written only by the batch completing its instant (``maintained.COMPLETED_RUN``),
wave 2o (issue 13): every instant equals the maintained one and the one with maintenance off --
tumbling and hopping windows, instants completed by heartbeats or by elements, elements at the
instant's bound, stored-graph writes between batches, the state dropped in between -- and the
paths are taken; the choice between the two modes follows the measured costs."""

from __future__ import annotations

import orjson
import pytest

from engine.database import Database
from engine.stream import maint_ahead, maintained
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
}


def _events(monkeypatch, text: str, maintain: bool = True, ahead: str = "choose", lazy: bool = True,
            lead: bool = False, writes: bool = False, drop_at: int | None = None, spy: dict | None = None,
            seconds: int = 18) -> list:
    """``text`` fed by 4 POSTs per second and a heartbeat per second: its result events.
    ``ahead``: "off" (maintained only), "force" (evaluated ahead whenever eligible), "choose"
    (the measured choice). ``lead``: the next second's first POST comes before the heartbeat
    (the instants are completed by an element, as in the benchmark's replay), one element
    sits on the instant's bound; else a heartbeat just past each instant completes it. ``writes``: a stored type added every 5 s between POSTs.
    ``drop_at``: the maintained state reset at that second (a drop, as after an error)."""
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", maintain)
    monkeypatch.setattr(maintained.Maintained, "EVAL_AHEAD", ahead != "off")
    monkeypatch.setattr(maintained.Maintained, "LAZY_BODY", lazy)
    if ahead == "force":
        monkeypatch.setattr(maint_ahead.Ahead, "_choose", lambda self: not self.block and self.eligible(self.m))
    db = Database()
    m = StreamManager(db)
    t0 = list(maint_ahead.TAKEN)
    c0 = maintained._BY_COMPLETE[0]
    try:
        stored = [f"<{EX}s{i}> <{EX}type> <{EX}Sensor> ." for i in range(1, 5)]
        stored += [f'<{EX}e{i}> <{EX}at> "{i * 0.75}"^^<{XSD}double> .' for i in range(12)]
        db.load_data("\n".join(stored).encode() + b"\n", "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        m.register_query("REGISTER QUERY q AS " + text)
        ev = m._reg.queries["q"].evaluator

        def post(k: int, j: int) -> None:
            lines = []
            for i in range(2):
                o = f"<{EX}o{k}_{j}_{i}>"
                t = k * 1000 + j * 250 + i + 2
                if lead and j == 0 and i == 0 and k % 2:
                    t = k * 1000   # (on the bound: the instant at k * 1000 holds it)
                val = f'"{(k * 7 + j * 3 + i) % 9}"^^<{XSD}decimal>'
                lines += [{"s": o, "p": f"<{EX}by>", "o": f"<{EX}s{1 + (3 * k + j + i) % 7}>", "t": t},
                          {"s": o, "p": f"<{EX}value>", "o": val, "t": t}]
            assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0

        for k in range(seconds):
            for j in range(1 if lead and k else 0, 4):
                post(k, j)
                if writes and k % 5 == 2 and j == 1:
                    db.update(f"INSERT DATA {{ GRAPH <{STATIC}> {{ <{EX}s{5 + k % 3}> <{EX}type> <{EX}Sensor> }} }}")
            if lead:
                post(k + 1, 0)   # (an element beyond the instant before its heartbeat)
            if drop_at == k and ev._maint is not None:
                with ev._maint.lock:
                    ev._maint._reset()
            # (without lead: a heartbeat past the instant completes it, before the next elements)
            m.heartbeat("a", (k + 1) * 1000 + (0 if lead else 1))
            assert m.drain(30)
        if spy is not None:
            spy["ahead"] = [b - a for a, b in zip(t0, maint_ahead.TAKEN, strict=True)]
            spy["by_complete"] = maintained._BY_COMPLETE[0] - c0
        ordered = "ORDER BY" in text
        return [(e.id, _canon(_rows(e.data), ordered)) for e in m.log("q").since(None, from_t=-1)
                if e.event == "result"]
    finally:
        m.close()
        db.close()


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize(("rng", "step"), [("4s", "4s"), ("2s", "3s"), ("3s", "1s")])
@pytest.mark.parametrize("lead", [False, True])
def test_ahead_and_chosen_answer_like_maintained_and_like_no_maintenance(monkeypatch, name, rng, step, lead):
    text = QUERIES[name].format(r=rng, s=step)
    spy: dict = {}
    forced = _events(monkeypatch, text, ahead="force", lead=lead, spy=spy)
    chosen = _events(monkeypatch, text, ahead="choose", lead=lead)
    kept = _events(monkeypatch, text, ahead="off", lead=lead)
    off = _events(monkeypatch, text, maintain=False, ahead="off", lead=lead)
    assert forced == chosen == kept == off
    assert len(off) >= 4
    if rng != "3s":   # (tumbling / hopping: eligible; evaluated ahead and answered from it)
        assert spy["ahead"][0] > 0 and spy["ahead"][1] > spy["ahead"][2]
    else:             # (sliding: never ahead)
        assert spy["ahead"] == [0, 0, 0, 0, 0]


@pytest.mark.parametrize("name", ["sum", "join", "near"])
@pytest.mark.parametrize("lead", [False, True])
def test_stored_writes_between_batches_and_a_drop(monkeypatch, name, lead):
    """A stored type inserted between POSTs (the held event's snapshot is not the instant's:
    not handed over), and the state reset mid-run: the same instants as without maintenance."""
    text = QUERIES[name].format(r="4s", s="4s")
    forced = _events(monkeypatch, text, ahead="force", lead=lead, writes=True, drop_at=9)
    kept = _events(monkeypatch, text, ahead="off", lead=lead, writes=True, drop_at=9)
    off = _events(monkeypatch, text, maintain=False, ahead="off", lead=lead, writes=True, drop_at=9)
    assert forced == kept == off
    assert any(rows for _, rows in off)


def test_completed_instants_leave_the_body_to_the_completing_batch(monkeypatch):
    """Instants completed by an element before their heartbeat: after COMPLETED_RUN of them the
    batches guessed to be the last leave the body to the completing one (the spy), with the
    same events as with the lazy body off and without maintenance."""
    text = QUERIES["sum"].format(r="4s", s="4s")
    spy: dict = {}
    on = _events(monkeypatch, text, ahead="off", lead=True, spy=spy, seconds=30)
    assert spy["by_complete"] > 0
    eager = _events(monkeypatch, text, ahead="off", lead=True, lazy=False, seconds=30)
    off = _events(monkeypatch, text, maintain=False, ahead="off", lead=True, seconds=30)
    assert on == eager == off
    spy = {}
    _events(monkeypatch, text, ahead="off", lead=False, spy=spy, seconds=30)
    assert spy["by_complete"] == 0   # (heartbeat-completed instants: the guess stays)


def _canon(rows, ordered: bool):
    return rows if type(rows) is bool or ordered else sorted(rows)


class _M:
    """The few attributes Ahead reads of its Maintained."""
    rows_mode = False
    step = 4000
    _rmax = 4000


def _ahead_with(maint: list, ahead: list, on: bool, since: int = 5) -> maint_ahead.Ahead:
    a = maint_ahead.Ahead(_M())
    a.samples = {False: list(maint), True: list(ahead)}
    a.on, a.cold, a.since = on, False, since
    return a


def test_the_choice_follows_the_measured_costs():
    # one counted sample each way: the cheaper one is kept, whichever it is
    assert _ahead_with([300e-6], [100e-6], on=True)._choose() is True
    assert _ahead_with([300e-6], [100e-6], on=False)._choose() is True
    assert _ahead_with([100e-6], [300e-6], on=True)._choose() is False
    assert _ahead_with([100e-6], [300e-6], on=False)._choose() is False
    # medians, not the last sample
    assert _ahead_with([100e-6, 500e-6, 110e-6], [200e-6], on=False)._choose() is False
    # a mode not measured yet is measured first (maintained first)
    assert _ahead_with([], [], on=False)._choose() is False
    assert _ahead_with([100e-6], [], on=False)._choose() is True
    # a switch's first interval passes before a choice
    assert _ahead_with([100e-6], [300e-6], on=True, since=1)._choose() is True
    # every PROBE_EVERY instants the other mode is measured again
    a = _ahead_with([300e-6], [100e-6], on=True, since=maint_ahead.PROBE_EVERY)
    assert a._choose() is False and a.samples[False] == []
    # blocked after misses, or not eligible: maintained
    a = _ahead_with([300e-6], [100e-6], on=True)
    a.block = 3
    assert a._choose() is False
    a = _ahead_with([300e-6], [100e-6], on=True)
    a.m.step = 1000
    assert a._choose() is False


def test_misses_block_the_ahead_mode(monkeypatch):
    a = _ahead_with([300e-6], [100e-6], on=True)
    a.m._lazy_hold = 0
    a.m._run = 9
    a.missed()
    assert a.block == 0 and a.m._lazy_hold == maintained.LAZY_HOLD and a.m._run == 0
    a.missed()
    assert a.block == maint_ahead.BLOCK


def test_the_natural_choice_measures_both_modes_and_switches(monkeypatch):
    """Over a long tumbling run both modes are measured (a switch into ahead mode at least),
    the instants the same as without maintenance."""
    text = QUERIES["join"].format(r="2s", s="2s")
    spy: dict = {}
    chosen = _events(monkeypatch, text, ahead="choose", lead=True, spy=spy, seconds=40)
    off = _events(monkeypatch, text, maintain=False, ahead="off", lead=True, seconds=40)
    assert chosen == off
    assert spy["ahead"][3] >= 1
