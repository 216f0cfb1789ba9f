"""The byte bound of result logs (``--retain-bytes``): a query whose answers are megabytes keeps
fewer than ``--retain`` instants, in memory and on disk, and a client resuming before the
dropped ones gets a gap."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
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
