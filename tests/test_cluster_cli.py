"""`jindou serve --cluster FILE` with a file it cannot use: one line saying why, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.server_process import ROOT, free_port


@pytest.mark.parametrize("name, text, why", [
    ("missing.toml", None, "No such file"),
    ("empty.yaml", "workers: []\n", "no workers listed"),
    ("broken.yaml", "workers: [\n", "not a valid cluster file"),
    ("broken.toml", "[[worker]\n", "not a valid cluster file"),
    ("noaddr.toml", "[[worker]]\nport = 3\n", "needs an address"),
    ("list.yaml", "- a\n- b\n", "a cluster file is a table"),
])
def test_an_unusable_cluster_file_is_one_line(tmp_path, name, text, why):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    p = subprocess.run([sys.executable, "-m", "server.cli", "serve", "--cluster", str(path), "--port",
                        str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("jindou: cannot start the store:") and why in last, p.stderr
