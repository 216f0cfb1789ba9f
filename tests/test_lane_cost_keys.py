"""The lane's cost-table keys (``server.api.common.HashedShape``): equal to the plain
shape tuples and hashed alike, so the lane, the text path and the pool learn and read
the same entries; measured on the wall clock like every fast shape."""

from __future__ import annotations

from server.api import sparql
from server.api.common import HashedShape, ServerState, cost_clock
from server.settings import Settings


def test_hashed_shape_is_the_plain_key():
    key = ("fast", (("SELECT", (("c", "<p>"), None)), ("x",), False))
    h = HashedShape(key)
    assert h == key and hash(h) == hash(key) and isinstance(h, tuple)
    table = {key: 1}
    assert table[h] == 1
    table2 = {h: 2}
    assert table2[key] == 2
    assert cost_clock(h) is cost_clock(key)


def test_lane_admission_learns_the_plain_keys_entry():
    state = ServerState(Settings(), None)
    key = ("fast", ("k", 1))
    done, got = state.try_inline_lane(lambda deadline: "answer", HashedShape(key))
    assert done and got == "answer"
    assert state.shape_cost[key][1] == 1  # one run, found by the plain key
    done, got = state.try_inline_lane(lambda deadline: "again", key)
    assert done and state.shape_cost[HashedShape(key)][1] == 2
    assert state.running == 0


def test_fast_shape_keys_are_kept_per_engine_key():
    class DB:
        def __init__(self):
            self.k = ("shape", 1)

        def shape_key(self, text, base):
            return self.k

    db = DB()
    a = sparql._cost_shape(db, "SELECT * {}", "b", False)
    b = sparql._cost_shape(db, "SELECT * {}", "b", False)
    assert a is b and a == ("fast", db.k)
    db.k = ("shape", 2)
    assert sparql._cost_shape(db, "SELECT * {}", "b", False) == ("fast", ("shape", 2))
