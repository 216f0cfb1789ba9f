"""Open the store the oracle tests compare under each topology, and prove a cluster ended.

The oracle and conformance suites run unchanged on a single process and on a
3-worker cluster (issue 12: "same answers, whatever the topology"), so they
take a *backend* name instead of building ``Database(shards=2)`` themselves:

* ``single``                  -- today's in-process store;
* ``cluster``                 -- ``--workers 3`` over the default same-host transport (shm);
* ``cluster-flight``          -- ``--workers 3`` read over Arrow Flight;
* ``cluster-fork-join``       -- shm, every exploration step shipped to the owners;
* ``cluster-flight-in-place`` -- Flight, every step fetching neighbour lists here.

The adaptive choice picks fork-join only for large frontiers, which the
oracles' small graphs seldom have: the forced modes put each step kind
through the same oracle.

A cluster's workers are processes and its partitions live in
``/dev/shm/jindou-<pid>-<token>``: a test that leaves either behind leaks into
every later test, so :func:`close_database` checks both after closing.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

#: backend name -> Database keyword arguments (the settings `jindou serve` would pass)
BACKENDS: dict[str, dict] = {
    "single": {"shards": 2},
    "cluster": {"workers": 3},
    "cluster-flight": {"workers": 3, "cluster_transport": "flight"},
    "cluster-fork-join": {"workers": 3, "cluster_exec": "fork-join"},
    "cluster-flight-in-place": {"workers": 3, "cluster_transport": "flight", "cluster_exec": "in-place"},
}

#: backend name -> `jindou serve` flags for the same topology
SERVE_ARGS: dict[str, list[str]] = {
    "single": ["--shards", "2"],
    "cluster": ["--workers", "3"],
    "cluster-flight": ["--workers", "3", "--cluster-transport", "flight"],
    "cluster-fork-join": ["--workers", "3", "--cluster-exec", "fork-join"],
    "cluster-flight-in-place": ["--workers", "3", "--cluster-transport", "flight", "--cluster-exec", "in-place"],
}


def open_database(backend: str, **kw):
    from engine.database import Database  # noqa: PLC0415

    return Database(**{**BACKENDS[backend], **kw})


def cluster_of(workers: list[dict]) -> tuple[list[int], set[str]]:
    """(worker pids, directories of their unix sockets) from /status-style worker rows."""
    pids = [int(w["pid"]) for w in workers if w.get("pid") is not None]
    dirs = {os.path.dirname(w["address"][len("unix:"):]) for w in workers if w["address"].startswith("unix:")}
    return pids, dirs


def server_workers(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/status", timeout=10) as r:
        return json.loads(r.read())["workers"]


def leftovers(pids: list[int], dirs: set[str], wait: float = 10.0) -> list[str]:
    """What of a closed cluster still exists (after up to ``wait`` s): live worker pids, dirs."""
    deadline = time.monotonic() + wait
    while True:
        left = [f"worker pid {p} is alive" for p in pids if _alive(p)]
        left += [f"{d} still exists" for d in sorted(dirs) if os.path.exists(d)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


def close_database(db) -> None:
    """Close ``db``; for a cluster also assert its workers ended and its shm directory is gone."""
    ws = getattr(db.store, "workers_status", None)
    pids, dirs = cluster_of(ws()) if ws is not None else ([], set())
    db.close()
    left = leftovers(pids, dirs)
    assert not left, f"the closed cluster left: {left}"
