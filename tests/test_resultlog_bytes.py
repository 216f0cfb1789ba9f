"""The byte bound of result logs (``--retain-bytes``): a query whose answers are megabytes keeps
fewer than ``--retain`` instants, in memory and on disk, and a client resuming before the
dropped ones gets a gap."""

from __future__ import annotations

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.stream.resultlog import ResultLog
from engine.stream.resultstore import ResultStore


def _expected(sizes: list[int], retain: int, retain_bytes: int) -> list[int]:
    """Indexes of the events the bounds keep: the longest suffix of at most ``retain`` events
    and ``retain_bytes`` bytes, never empty."""
    keep: list[int] = []
    total = 0
    for i in range(len(sizes) - 1, -1, -1):
        if len(keep) == retain or (keep and total + sizes[i] > retain_bytes):
            break
        keep.append(i)
        total += sizes[i]
    return keep[::-1]


def _data(i: int, size: int) -> bytes:
    return (b'{"i":%d,"pad":"' % i).ljust(size - 2, b"x") + b'"}'


_SIZES = st.lists(st.integers(20, 400), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(_SIZES, st.integers(1, 12), st.integers(1, 2000))
def test_memory_log_keeps_the_longest_suffix_within_both_bounds(sizes, retain, retain_bytes):
    log = ResultLog(retain=retain, step=1000, retain_bytes=retain_bytes)
    for i, n in enumerate(sizes):
        log.append((i + 1) * 1000, _data(i, n))
        keep = _expected(sizes[: i + 1], retain, retain_bytes)
        evs = log.since(None, from_t=0)
        assert [e.id for e in evs] == [(k + 1) * 1000 for k in keep]
        assert log.retained_bytes == sum(sizes[k] for k in keep) == sum(len(e.data) for e in evs)
    first_kept = _expected(sizes, retain, retain_bytes)[0]
    evs = log.since(0)   # a client that saw nothing yet
    if first_kept > 0:
        assert evs[0].event == "gap"
        assert orjson.loads(evs[0].data) == {"missed_from": 1000, "resumed_at": (first_kept + 1) * 1000}
    else:
        assert evs[0].event == "result"


@settings(max_examples=25, deadline=None)
@given(_SIZES, st.integers(1, 12), st.integers(1, 2000), st.sets(st.integers(0, 39)))
# the writer behind by a whole log dropped a pending event while an older one stayed visible (a hole)
@example(sizes=[20, 20, 20, 20, 21, 20], retain=2, retain_bytes=40, blocked={0, 1, 2, 4, 5})
def test_durable_log_bounds_memory_disk_and_restart_alike(tmp_path_factory, sizes, retain, retain_bytes, blocked):
    """Appends while the writer is blocked (``blocked``: the indexes appended under the store's
    lock) and while it runs give the same visible events as the memory log; a restart reads
    them back, and the file never holds more than the bounds plus the writer's slack."""
    store = ResultStore(str(tmp_path_factory.mktemp("results")))
    try:
        log = ResultLog(retain=retain, step=1000, store=store, name="q", retain_bytes=retain_bytes)
        i = 0
        while i < len(sizes):
            if i in blocked:
                with store._lock:
                    while i < len(sizes) and i in blocked:
                        log.append((i + 1) * 1000, _data(i, sizes[i]))
                        i += 1
            else:
                log.append((i + 1) * 1000, _data(i, sizes[i]))
                i += 1
            assert store.flush(10)
        want = [(k + 1) * 1000 for k in _expected(sizes, retain, retain_bytes)]
        assert [e.id for e in log.since(None, from_t=0)] == want
        again = ResultLog(retain=retain, step=1000, store=store, name="q", retain_bytes=retain_bytes)
        assert [e.id for e in again.since(None, from_t=0)] == want
        assert [e.data for e in again.since(None, from_t=0)] == [e.data for e in log.since(None, from_t=0)]
        with store._lock:
            rows, stored = store._db.execute("SELECT count(*), coalesce(sum(length(data)), 0) FROM events").fetchone()
        assert rows <= retain + max(1, retain // 4)
        assert stored <= retain_bytes + retain_bytes // 4 + max(sizes)
    finally:
        store.close()


def test_a_restart_with_a_smaller_byte_bound_drops_the_oldest(tmp_path):
    store = ResultStore(str(tmp_path))
    try:
        log = ResultLog(retain=100, step=1000, store=store, name="q")
        for k in range(1, 11):
            log.append(k * 1000, _data(k, 100))
        assert store.flush(10)
        again = ResultLog(retain=100, step=1000, store=store, name="q", retain_bytes=350)
        evs = again.since(1000)
        assert [e.event for e in evs] == ["gap", "result", "result", "result"]
        assert [e.id for e in evs[1:]] == [8000, 9000, 10_000]
    finally:
        store.close()


def test_the_newest_event_is_kept_even_past_the_bound():
    log = ResultLog(retain=10, step=1000, retain_bytes=10)
    log.append(1000, _data(1, 50))
    log.append(2000, _data(2, 60))
    assert [e.id for e in log.since(None, from_t=0)] == [2000]
    assert log.retained_bytes == 60


# -- the total over all logs (--retain-total-bytes)

@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.lists(st.tuples(st.integers(0, 7), st.integers(20, 300)), min_size=1, max_size=80),
       st.integers(200, 3000), st.integers(10, 400))
def test_logs_together_stay_within_the_total_plus_their_floors(logs, appends, total, floor):
    """Whatever order the queries answer in, the total counts exactly what the logs hold, each
    log keeps its newest event, and once every log answered again the sum is within the total
    plus one share per log."""
    from engine.stream.resultlog import TotalBytes
    tb = TotalBytes(total, floor)
    own = 2000
    ls = [ResultLog(retain=50, step=1000, retain_bytes=own, total=tb) for _ in range(logs)]
    t = [0] * logs
    for k, size in appends:
        k %= logs
        t[k] += 1000
        ls[k].append(t[k], _data(t[k], size))
        held = sum(lg.retained_bytes for lg in ls)
        assert held == tb.held
        # the log that appended last trimmed to its share if the sum was over; the others
        # went over at most by what they held before, which the bound below covers
        assert ls[k].since(None, from_t=0)[-1].id == t[k]
    # each log answers once more: a log that appends while the sum is over keeps its share, so
    # the sum ends within the total plus at most one share per log
    for k in range(logs):
        t[k] += 1000
        ls[k].append(t[k], _data(t[k], 20))
    assert tb.held == sum(lg.retained_bytes for lg in ls)
    assert tb.held <= total + logs * max(floor, total // logs, 20)


def test_under_the_total_each_log_keeps_its_own_bound_and_over_it_its_share():
    from engine.stream.resultlog import TotalBytes
    tb = TotalBytes(10_000, floor=100)
    a = ResultLog(retain=100, step=1000, retain_bytes=4000, total=tb)
    b = ResultLog(retain=100, step=1000, retain_bytes=4000, total=tb)
    for i in range(1, 31):
        a.append(i * 1000, _data(i, 100))
    assert a.retained_bytes == 3000   # 30 events: within its own 4,000 and the total
    for i in range(1, 41):
        b.append(i * 1000, _data(i, 200))
    assert b.retained_bytes == 4000   # its own bound; the sum 7,000 is within the total
    c = ResultLog(retain=100, step=1000, retain_bytes=1 << 20, total=tb)
    for i in range(1, 41):
        c.append(i * 1000, _data(i, 100))
    # the sum went past 10,000: c keeps at most its share (10,000 / 3)
    assert c.retained_bytes <= 10_000 // 3
    assert tb.held == a.retained_bytes + b.retained_bytes + c.retained_bytes
    a.append(31_000, _data(31, 100))   # a's next instant: cut to its share too while over
    assert a.retained_bytes <= max(10_000 // 3, 100) or tb.held <= 10_000
    evs = c.since(0)
    assert evs[0].event == "gap" and evs[-1].id == 40_000


def test_a_deleted_log_gives_its_bytes_back():
    import gc

    from engine.stream.resultlog import TotalBytes
    tb = TotalBytes(1000, floor=100)
    a = ResultLog(retain=100, step=1000, retain_bytes=1 << 20, total=tb)
    b = ResultLog(retain=100, step=1000, retain_bytes=1 << 20, total=tb)
    for i in range(1, 11):
        a.append(i * 1000, _data(i, 100))
    assert tb.held == 1000 and tb.members == 2
    del a
    gc.collect()
    assert tb.held == 0 and tb.members == 1
    for i in range(1, 11):
        b.append(i * 1000, _data(i, 100))
    assert b.retained_bytes == 1000   # alone within the total: nothing dropped


def test_durable_logs_share_the_total_and_restart_within_it(tmp_path):
    from engine.stream.resultlog import TotalBytes
    store = ResultStore(str(tmp_path))
    try:
        tb = TotalBytes(2000, floor=100)
        logs = [ResultLog(retain=100, step=1000, store=store, name=f"q{k}", retain_bytes=1 << 20, total=tb)
                for k in range(4)]
        for i in range(1, 21):
            for lg in logs:
                lg.append(i * 1000, _data(i, 100))
        store.flush()
        assert all(lg.last_id == 20_000 for lg in logs)
        assert tb.held <= 2000 + 4 * 200
        tb2 = TotalBytes(2000, floor=100)
        again = [ResultLog(retain=100, step=1000, store=store, name=f"q{k}", retain_bytes=1 << 20, total=tb2)
                 for k in range(4)]
        assert all(lg.last_id == 20_000 for lg in again)
        assert all(lg.since(None, from_t=0)[-1].id == 20_000 for lg in again)
    finally:
        store.close()
