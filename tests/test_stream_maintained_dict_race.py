"""Regression (issue 13's differential hunt): a maintained state built while a POST interned
one of the query's absent constants kept that constant absent.

``Maintained._build`` looked the constants up (``GenQuery._resolve``, an absent one -2) and
recorded the dictionary's size *afterwards* as the size they were looked up at
(``_State.dict_n``). When a concurrent POST interned the constant in between, the state held
"absent" with the new size: nothing later looked it up again (``_current`` and the instant
compare that size with the dictionary's), so every window triple with that constant was
missed -- a COUNT of 0 instead of 2 in the hunt, one run in a few under load. The race is made
deterministic here: the constant is interned while the state reads its stored part (between
the look-up and the size), as the POST's interning did.
"""

from __future__ import annotations

import orjson

from engine.database import Database
from engine.stream import maintained, tiny_gen
from engine.stream.manager import StreamManager

EX = "http://ex.org/"


def _run(monkeypatch, race: bool) -> tuple[list, int]:
    real, real_build = tiny_gen.GenQuery._stored, maintained.Maintained._build
    interned = []
    building = []

    def build(self, snap, graphs):
        building.append(True)
        try:
            return real_build(self, snap, graphs)
        finally:
            building.pop()

    def stored(self, snap, graphs):
        if race and building and not interned and snap.dictionary.lookup(f"<{EX}r>") < 0:
            # (another POST interns :r now: after the look-up, before the state's size)
            interned.append(int(snap.dictionary.encode([f"<{EX}r>"])[0]))
        return real(self, snap, graphs)

    monkeypatch.setattr(tiny_gen.GenQuery, "_stored", stored)
    monkeypatch.setattr(maintained.Maintained, "_build", build)
    db = Database()
    m = StreamManager(db)
    a0 = maintained.answered_total()
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        m.register_query(f"REGISTER QUERY q AS PREFIX : <{EX}> SELECT (COUNT(*) AS ?n) "
                         f"FROM STREAM <{EX}s> [RANGE 3s STEP 1s] WHERE {{ ?x :r ?y }}")

        def post(t, s, p, o):
            body = orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}{p}>", "o": f"<{EX}{o}>", "t": t})
            assert m.ingest_ndjson("s", body)["rejected"] == 0

        post(5, "a", "p", "b")   # instant 0 ready: the state is built after it (advance to 1000)
        assert m.drain(30)
        post(500, "a", "r", "b")   # (terms all interned: the dictionary does not grow)
        post(600, "b", "r", "a")
        m.heartbeat("s", 1001)
        assert m.drain(30)
        counts = [orjson.loads(e.data)["results"]["bindings"][0]["n"]["value"]
                  for e in m.log("q").since(None, from_t=-1) if e.event == "result"]
        return counts, maintained.answered_total() - a0
    finally:
        m.close()
        db.close()


def test_a_constant_interned_while_the_state_is_built_is_looked_up_again(monkeypatch):
    counts, answered = _run(monkeypatch, race=True)
    assert counts == ["0", "2"]
    assert answered >= 1


def test_the_maintained_state_answers_the_instant(monkeypatch):
    """(the path under test is taken: the instant is the maintained state's)"""
    counts, answered = _run(monkeypatch, race=False)
    assert counts == ["0", "2"]
    assert answered >= 1
