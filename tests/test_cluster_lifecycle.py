"""A cluster that is stopped or closed leaves nothing behind.

A `jindou serve --workers 3` stopped the way service managers stop it, and an
in-process cluster ``Database`` once closed.

A served cluster's workers are processes of their own and its partitions live in
/dev/shm/jindou-<pid>-<token>: after SIGTERM (systemd, docker stop, the
tests' ServerProcess) and after Ctrl-C both must be gone, else every restart
leaks shared memory.
"""

from __future__ import annotations

import shutil
import signal

from tests.support.clusters import close_database, cluster_of, leftovers, open_database, server_workers
from tests.support.server_process import ServerProcess


def _stop_and_check(sig: int) -> None:
    with ServerProcess("--workers", "3") as server:
        workers = server_workers(server.url)
        pids, dirs = cluster_of(workers)
        assert len(pids) == 3 and len(dirs) == 1, workers
        server.proc.send_signal(sig)
        server.proc.wait(timeout=30)
    try:  # the workers watch their parent: a few seconds are plenty for them to end
        assert not leftovers(pids, dirs, wait=3), leftovers(pids, dirs, wait=0)
    finally:
        for d in dirs:  # what the server leaked must not outlive the test
            shutil.rmtree(d, ignore_errors=True)


def test_ctrl_c_closes_the_cluster():
    _stop_and_check(signal.SIGINT)


def test_sigterm_closes_the_cluster():
    _stop_and_check(signal.SIGTERM)


def test_a_closed_cluster_unmaps_its_segments():
    """Closing an in-process cluster gives its shared memory back (a bench or test run opens many)."""
    import gc  # noqa: PLC0415

    db = open_database("cluster")
    root = cluster_of(db.store.workers_status())[1].pop()
    db.load_data("".join(f"<http://e/s{i}> <http://e/p> <http://e/o{i % 97}> .\n" for i in range(20000)),
                 "application/n-triples")
    assert db.query("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }").rows() == [
        {"n": '"20000"^^<http://www.w3.org/2001/XMLSchema#integer>'}]
    close_database(db)
    del db
    gc.collect()
    with open("/proc/self/maps", encoding="utf-8") as f:
        still = [ln.split()[-2] for ln in f if root + "/" in ln]
    assert not still, still
