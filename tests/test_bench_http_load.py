"""bench/http_load.py: the raw HTTP client reads both answer framings, and a short
run side by side with `oxigraph serve` agrees on every family's row counts."""

from __future__ import annotations

import pytest

from bench import http_load, lubm
from bench.peers import oxigraph_binary


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("hl") / "d.nt"
    lubm.generate(path, universities=1)
    return str(path)


def test_short_run_side_by_side(small, capsys):
    peers = "jindou-http,oxigraph-serve" if oxigraph_binary() else "jindou-http"
    code = http_load.main(["--data", small, "--peers", peers, "--rounds", "2", "--requests", "10",
                           "--seconds", "0.5", "--clients", "2"])
    out = capsys.readouterr().out
    assert code == 0, out  # 3: a row count mismatch between the peers
    for fam in http_load.FAMILIES:
        assert f"| repeated | {fam.name} |" in out and f"| varied | {fam.name} |" in out
    assert "| jindou-http |" in out and "queries/s" in out


def test_every_family_has_answers(small):
    from engine.database import Database

    db = Database()
    db.load_file(small)
    for fam in http_load.FAMILIES:
        ents = http_load._entities(fam.kind, 60)
        rows = [len(db.query(fam.text(c))) for c in ents if "University0." in c]
        assert sum(rows) > 0, fam.name
