"""The W3C SPARQL 1.1 Update evaluation tests (test_exec_update_w3c.py) on 3-worker clusters.

The shared harness of test_w3c_conformance.py skips update tests, so the
update half of the suite runs here: the very test of test_exec_update_w3c.py,
given a cluster ``Database`` (``--workers 3``: shm, Flight, shm with every
step forced to fork-join) instead of a single-process one. One cluster per
backend serves all 94
cases, emptied with DROP ALL before each, as a server's store would be.
"""

from __future__ import annotations

import pytest

from tests import test_exec_update_w3c as w3c
from tests.support.clusters import close_database, open_database


@pytest.fixture(scope="module", params=["cluster", "cluster-flight", "cluster-fork-join"])
def cluster_db(request):
    db = open_database(request.param)
    try:
        yield db
    finally:
        close_database(db)


@pytest.mark.parametrize("g,test", w3c._collect())
def test_update_evaluation_on_a_cluster(cluster_db, monkeypatch, g, test):
    cluster_db.update("DROP ALL")
    assert cluster_db.status()["triples"] == 0
    monkeypatch.setattr(w3c, "Database", lambda **kw: cluster_db)
    w3c.test_update_evaluation(g, test)
