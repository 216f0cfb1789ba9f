"""Connections spread over ``jindou serve --processes N`` (server/processes.py ``_Balance``).

A burst of keep-alive connections lands on whichever process accepts first; the
balance gives fresh ones away until every process holds as many as the others
(within one). The receiving process's slot may show a connection given to it
at once or only later (the hand-over travels over its control socket): both
must end even, a given connection never counted twice."""

from __future__ import annotations

import numpy as np
import pytest

from server.processes import _Balance


def _group(tmp_path, n: int, delay: bool):
    path = str(tmp_path / "connections")
    np.zeros(n, dtype=np.int64).tofile(path)
    late: list[int] = []
    procs: list[_Balance] = []

    def give(target: int, fd: int) -> None:
        if delay:
            late.append(target)  # taken after the burst
        else:
            procs[target].opened()

    procs.extend(_Balance(path, k, n, give) for k in range(n))
    return procs, late


def _accept(b: _Balance) -> None:
    """What a process's protocol does with a connection it accepted (``_balanced``)."""
    b.opened()
    j = b.target()
    if j is not None:
        b.give(j, -1)
        b.closed()


@pytest.mark.parametrize("delay", [False, True])
@pytest.mark.parametrize("n, clients", [(2, 8), (2, 7), (3, 8), (4, 16)])
def test_a_burst_on_one_process_ends_even(tmp_path, delay, n, clients):
    procs, late = _group(tmp_path, n, delay)
    for _ in range(clients):
        _accept(procs[0])
    for t in late:
        procs[t].opened()
    counts = [int(x) for x in procs[0].arr]
    assert sum(counts) == clients
    assert max(counts) - min(counts) <= 1, counts


def test_bursts_on_both_processes_end_even(tmp_path):
    procs, late = _group(tmp_path, 2, False)
    for k in range(8):
        _accept(procs[k % 3 == 0])
    counts = [int(x) for x in procs[0].arr]
    assert sum(counts) == 8 and max(counts) - min(counts) <= 1, counts


def test_closed_connections_free_their_slot(tmp_path):
    procs, _ = _group(tmp_path, 2, False)
    for _ in range(8):
        _accept(procs[0])
    for b in procs:
        for _ in range(4):
            b.closed()
    assert [int(x) for x in procs[0].arr] == [0, 0]
    for _ in range(8):
        _accept(procs[1])
    counts = [int(x) for x in procs[0].arr]
    assert counts == [4, 4], counts
