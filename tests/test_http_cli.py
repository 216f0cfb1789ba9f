"""The `jindou` CLI: argument parsing, `jindou serve` as a real process with
--data / --graph / --demo / --token, and `jindou bench` delegation."""

from __future__ import annotations

import sys
import types

import pytest
import requests

from server import cli
from server.demo import DEMO_DATA, DEMO_QUERIES
from tests.support.server_process import ServerProcess

EX = "http://ex.org/"


def test_parse_serve_args(tmp_path):
    f = tmp_path / "a.ttl"
    f.write_text("")
    a = cli.build_parser().parse_args([
        "serve", "--data", str(f), "--data", str(f), "--graph", f"http://ex.org/g?x=1={f}", "--port", "9999",
        "--token", "t", "--shards", "2", "--demo", "--lenient", "--allow-load", "--query-timeout", "2.5",
        "--max-rows", "10"])
    c = cli.config_from_args(a)
    assert c.data == [str(f), str(f)]
    assert c.graph == [("http://ex.org/g?x=1", str(f))]
    assert (c.port, c.token, c.shards, c.demo, c.lenient, c.allow_load) == (9999, "t", 2, True, True, True)
    assert (c.query_timeout, c.max_rows, c.host) == (2.5, 10, "127.0.0.1")


def test_graph_arg_errors():
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--graph", "no-equals-sign"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--graph", "relative=file.ttl"])


def test_bench_delegates(monkeypatch):
    seen = []
    mod = types.ModuleType("bench.runner")
    mod.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "bench.runner", mod)
    assert cli.main(["bench", "--peers", "oxigraph", "-n", "3"]) == 0
    assert seen == [["--peers", "oxigraph", "-n", "3"]]


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "serve" in capsys.readouterr().out


def test_serve_loads_files(tmp_path):
    d = tmp_path / "d.nt"
    d.write_text(f"<{EX}a> <{EX}p> <{EX}b> .\n<{EX}a> <{EX}p> <{EX}c> .\n")
    g = tmp_path / "g.ttl"
    g.write_text(f"@prefix ex: <{EX}> . ex:x ex:q ex:y .\n")
    with ServerProcess("--data", str(d), "--graph", f"{EX}named={g}", "--token", "tok", "--no-progress") as s:
        r = requests.get(s.url + "/sparql", params={"query": f"SELECT (COUNT(*) AS ?n) WHERE {{ <{EX}a> <{EX}p> ?o }}"})
        assert r.json()["results"]["bindings"][0]["n"]["value"] == "2"
        r = requests.get(s.url + "/sparql", params={"query": f"ASK {{ GRAPH <{EX}named> {{ <{EX}x> <{EX}q> <{EX}y> }} }}"})
        assert r.json()["boolean"] is True
        assert requests.post(s.url + "/update", data=b"CLEAR ALL",
                             headers={"Content-Type": "application/sparql-update"}).status_code == 401
        assert requests.get(s.url + "/status").json()["auth"]["writes"] == "token"


def test_serve_missing_file_fails(tmp_path):
    with pytest.raises(RuntimeError, match="no such file"):
        with ServerProcess("--data", str(tmp_path / "missing.ttl"), startup_timeout=120):
            pass


def test_serve_demo():
    assert DEMO_DATA.is_file()
    with ServerProcess("--demo", "--no-progress") as s:
        st = requests.get(s.url + "/status").json()
        assert st["store"]["triples"] >= 300
        for name, q in DEMO_QUERIES.items():
            r = requests.get(s.url + "/sparql", params={"query": q})
            assert r.status_code == 200, (name, r.text)
            assert r.json()["results"]["bindings"], name


def test_serve_bad_data_fails(tmp_path):
    bad = tmp_path / "bad.nt"
    bad.write_text("<http://ex.org/a> <http://ex.org/p> .\n")
    with pytest.raises(RuntimeError, match="cannot load"):
        with ServerProcess("--data", str(bad), "--no-progress", startup_timeout=120):
            pass


def test_serve_port_in_use_says_so_once(tmp_path):
    import socket
    import subprocess

    from tests.support.server_process import ROOT

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        d = tmp_path / "d.nt"
        d.write_text(f"<{EX}a> <{EX}p> <{EX}b> .\n")
        p = subprocess.run([sys.executable, "-c", "from server.cli import main; main()", "serve", "--host",
                            "127.0.0.1", "--port", str(port), "--data", str(d), "--no-progress"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0
    line = f"jindou: cannot listen on 127.0.0.1:{port}: address already in use"
    assert out.count(line) == 1, out
    assert "serving on" not in out and "Errno" not in out and "Traceback" not in out
    assert "loaded" not in out  # it failed before spending time on the data

