"""Connections spread over ``jindou serve --processes N`` (server/processes.py ``_Balance``).

A burst of keep-alive connections lands on whichever process accepts first; the
balance gives fresh ones away until every process holds as many busy ones as the
others (within one). The receiving process's slot may show a connection given to
it at once or only later (the hand-over travels over its control socket): both
must end even, a given connection never counted twice; idle keep-alive
connections do not count."""

from __future__ import annotations

import numpy as np
import pytest

from server.processes import _ACTIVE_S, _Balance


class Conn:
    """What the balance reads of a connection (the protocol's loop times)."""

    _opened_at = 0.0
    _answered = 0.0
    _active_at = 0.0


def _group(tmp_path, n: int, delay: bool, now: list[float]):
    path = str(tmp_path / "connections")
    np.zeros(n, dtype=np.int64).tofile(path)
    late: list[int] = []
    procs: list[_Balance] = []

    def give(target: int, fd: int) -> None:
        if delay:
            late.append(target)  # taken after the burst
        else:
            procs[target].opened(Conn(), now[0])

    procs.extend(_Balance(path, k, n, give) for k in range(n))
    return procs, late


def _accept(b: _Balance, now: float) -> Conn:
    """What a process's protocol does with a connection it accepted (``_balanced``)."""
    c = Conn()
    b.opened(c, now)
    j = b.target(now)
    if j is not None:
        b.give(j, -1)
        b.closed(c, now)
    return c


def _counts(procs) -> list[int]:
    return [int(x) for x in procs[0].arr]


@pytest.mark.parametrize("delay", [False, True])
@pytest.mark.parametrize("n, clients", [(2, 8), (2, 7), (3, 8), (4, 16)])
def test_a_burst_on_one_process_ends_even(tmp_path, delay, n, clients):
    now = [100.0]
    procs, late = _group(tmp_path, n, delay, now)
    for _ in range(clients):
        _accept(procs[0], now[0])
    for t in late:
        procs[t].opened(Conn(), now[0])
    counts = _counts(procs)
    assert sum(counts) == clients
    assert max(counts) - min(counts) <= 1, counts


def test_bursts_on_both_processes_end_even(tmp_path):
    now = [100.0]
    procs, _ = _group(tmp_path, 2, False, now)
    for k in range(8):
        _accept(procs[k % 3 == 0], now[0])
    counts = _counts(procs)
    assert sum(counts) == 8 and max(counts) - min(counts) <= 1, counts


def test_closed_connections_free_their_slot(tmp_path):
    now = [100.0]
    procs, _ = _group(tmp_path, 2, False, now)
    for b in procs:
        for c in list(b.conns):
            b.closed(c, now[0])
    for _ in range(8):
        _accept(procs[0], now[0])
    for b in procs:
        for c in list(b.conns):
            b.closed(c, now[0])
    assert _counts(procs) == [0, 0]
    for _ in range(8):
        _accept(procs[1], now[0])
    assert _counts(procs) == [4, 4]


def test_idle_connections_do_not_count(tmp_path):
    """A keep-alive connection that asked nothing for a while (a monitor's) leaves its
    process as free as one without it: the next burst still ends 4 / 4 in busy ones."""
    now = [100.0]
    procs, _ = _group(tmp_path, 2, False, now)
    idle = _accept(procs[0], now[0])
    assert idle in procs[0].conns
    now[0] += _ACTIVE_S + 0.5
    for b in procs:
        b.publish(now[0])
    assert _counts(procs) == [0, 0]
    for _ in range(8):
        _accept(procs[0], now[0])
    busy = [sum(1 for c in b.conns if c is not idle) for b in procs]
    assert busy == [4, 4], busy
    # a connection answered recently counts again
    idle._answered = now[0]
    procs[0].publish(now[0])
    assert _counts(procs)[0] == 5


def test_counts_follow_opens_closes_and_recounts(tmp_path):
    """Between recounts, opens and closes adjust the published count (O(1) per
    connection event); closing an idle connection takes nothing off it; the
    recount (every 0.5 s) drops connections gone idle and adds ones used again."""
    now = [100.0]
    procs, _ = _group(tmp_path, 1, False, now)
    b = procs[0]
    idle = _accept(b, now[0])
    now[0] += _ACTIVE_S + 0.5
    b.publish(now[0])
    assert _counts(procs) == [0]
    conns = [_accept(b, now[0]) for _ in range(3)]
    assert _counts(procs) == [3]
    b.closed(idle, now[0])
    assert _counts(procs) == [3]
    b.closed(conns[0], now[0])
    assert _counts(procs) == [2]
    now[0] += _ACTIVE_S + 0.5
    conns[1]._answered = now[0]
    b.publish(now[0])
    assert _counts(procs) == [1]
    b.closed(conns[0], now[0])  # (closed twice: counted once)
    assert _counts(procs) == [1]
