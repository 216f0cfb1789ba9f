"""Settings are declared once (server/settings.py, engine/settings.py): every one has a
`jindou serve` flag, a JINDOU_* variable, a row in docs/LIMITS.md and an entry in /status;
flag > environment > default; a bad value stops the start with a line naming it."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from server import cli
from server.settings import DOC, Settings, doc_with_table, env_var, flag, load

ROOT = Path(__file__).resolve().parent.parent
NAMES = list(Settings.model_fields)


@pytest.fixture(autouse=True)
def _no_jindou_env(monkeypatch):
    for k in list(os.environ):
        if k.upper().startswith("JINDOU_") and k.upper()[7:].lower() in Settings.model_fields:
            monkeypatch.delenv(k)


def _other_value(name: str) -> tuple[str, object]:
    """(environment text, expected value) of a valid non-default value of a setting."""
    f = Settings.model_fields[name]
    d = f.default
    ann = f.annotation
    if ann is bool:
        return ("false" if d else "true"), (not d)
    if typing.get_origin(ann) is typing.Literal:
        other = next(c for c in typing.get_args(ann) if c != d)
        return other, other
    if name == "graph":
        return "http://ex.org/g=x.nt", [("http://ex.org/g", "x.nt")]
    if name == "data":
        return '["a.nt", "b.nt"]', ["a.nt", "b.nt"]
    if name == "service_endpoints":
        return "http://ex.org/sparql", ["http://ex.org/sparql"]
    if name == "switch_interval":  # bounded to (0, 0.1] s
        return "0.001", 0.001
    if ann is int:
        return str(d + 1), d + 1
    if ann is float:
        return str(d + 1.5), d + 1.5
    return "x-value", "x-value"  # strings and optional strings


def test_the_committed_settings_table_is_the_generated_one():
    text = DOC.read_text()
    assert text == doc_with_table(text), "docs/LIMITS.md is stale: run `python -m server.settings --write`"


def test_every_setting_is_documented_with_flag_variable_and_default():
    text = DOC.read_text()
    for name in NAMES:
        assert f"`{flag(name)}" in text and f"`{env_var(name)}`" in text, name
        assert Settings.model_fields[name].description, name


@pytest.mark.parametrize("name", NAMES)
def test_each_environment_variable_sets_its_setting(name, monkeypatch):
    text, value = _other_value(name)
    assert getattr(load(), name) != value
    monkeypatch.setenv(env_var(name), text)
    assert getattr(load(), name) == value
    # through the command line too, and a flag given wins over the variable
    a = cli.build_parser().parse_args(["serve"])
    assert getattr(cli.config_from_args(a), name) == value


def test_flag_beats_environment_beats_default(monkeypatch):
    parse = cli.build_parser().parse_args
    assert cli.config_from_args(parse(["serve"])).query_timeout == 30.0
    monkeypatch.setenv("JINDOU_QUERY_TIMEOUT", "7")
    assert cli.config_from_args(parse(["serve"])).query_timeout == 7.0
    assert cli.config_from_args(parse(["serve", "--query-timeout", "3"])).query_timeout == 3.0
    monkeypatch.setenv("JINDOU_METRICS", "false")
    assert cli.config_from_args(parse(["serve"])).metrics is False
    assert cli.config_from_args(parse(["serve", "--metrics"])).metrics is True
    monkeypatch.setenv("JINDOU_TOKEN", "")
    assert cli.config_from_args(parse(["serve"])).token is None
    # Settings(...) in code reads no environment
    assert Settings().query_timeout == 30.0 and Settings().metrics is True


@pytest.mark.parametrize("var,value,says", [
    ("JINDOU_QUERY_TIMEOUT", "soon", "valid number"),
    ("JINDOU_SHARDS", "0", "greater than or equal to 1"),
    ("JINDOU_PORT", "70000", "less than or equal to 65535"),
    ("JINDOU_LOG_LEVEL", "loud", "'info'"),
    ("JINDOU_DEMO", "perhaps", "valid boolean"),
    ("JINDOU_GRAPH", "[broken", "JSON list"),
    ("JINDOU_GRAPH", "relative=x.nt", "absolute IRI"),
])
def test_a_bad_environment_value_is_a_clear_start_up_error(var, value, says, monkeypatch):
    monkeypatch.setenv(var, value)
    with pytest.raises(SystemExit) as e:
        cli.config_from_args(cli.build_parser().parse_args(["serve"]))
    msg = str(e.value)
    assert msg.startswith("jindou: bad setting") and var in msg and says in msg, msg


def test_a_bad_flag_value_names_the_flag():
    with pytest.raises(SystemExit) as e:
        cli.config_from_args(cli.build_parser().parse_args(["serve", "--shards", "0"]))
    assert "--shards 0" in str(e.value)


def test_jindou_serve_refuses_a_bad_variable_before_listening(tmp_path):
    env = dict(os.environ, JINDOU_QUERY_TIMEOUT="abc", JINDOU_PORT="1")  # port 1 would fail to bind
    r = subprocess.run([sys.executable, "-m", "server.cli", "serve"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "JINDOU_QUERY_TIMEOUT='abc'" in r.stderr and "cannot listen" not in r.stderr, r.stderr


def test_every_setting_has_its_flag_in_serve_help():
    sub = cli.build_parser()._subparsers._group_actions[0].choices["serve"]  # noqa: SLF001
    flags = {s for a in sub._actions for s in a.option_strings}  # noqa: SLF001
    help_text = " ".join(sub.format_help().split())
    for name in NAMES:
        assert flag(name) in flags, name
        assert env_var(name) in help_text, name
    # the flags of earlier releases keep their names
    for old in ("--data", "--graph", "--host", "--port", "--data-dir", "--token", "--read-token", "--cors-origin",
                "--shards", "--demo", "--lenient", "--allow-load", "--query-timeout", "--max-rows",
                "--query-memory", "--max-response-bytes", "--max-body", "--max-concurrent", "--inline-ms",
                "--retain", "--idle-after", "--transient-budget", "--sse-buffer", "--sse-keepalive",
                "--access-log", "--log-level", "--no-progress"):
        assert old in flags, old


def test_engine_constructor_defaults_are_the_declared_ones():
    from engine.database import Database
    from engine.settings import DEFAULTS, EngineSettings
    from engine.stream.manager import StreamManager

    seen = set()
    for fn in (Database.__init__, StreamManager.__init__):
        for name, p in inspect.signature(fn).parameters.items():
            if name in EngineSettings.model_fields:
                assert p.default == getattr(DEFAULTS, name), (fn, name)
                seen.add(name)
    assert seen == set(EngineSettings.model_fields)
    # and the server passes them on
    from server.app import _make_database

    db = _make_database(Settings(max_rows=77, query_timeout=9, query_memory=12345, allow_load=True))
    assert (db.max_rows, db.query_timeout, db.query_memory, db.allow_load) == (77, 9, 12345, True)


def test_the_defaults_of_earlier_releases_are_kept():
    d = cli.config_from_args(cli.build_parser().parse_args(["serve"]))
    assert (d.host, d.port, d.data, d.graph, d.data_dir, d.token, d.read_token, d.cors_origin) == (
        "127.0.0.1", 8000, [], [], None, None, None, "*")
    assert (d.shards, d.demo, d.lenient, d.allow_load, d.query_timeout, d.max_rows) == (4, False, False, False,
                                                                                       30.0, 5_000_000)
    assert (d.query_memory, d.max_response_bytes, d.max_body, d.max_concurrent, d.inline_ms) == (
        768 << 20, 256 << 20, 64 << 20, 32, 2.0)
    assert (d.retain, d.idle_after, d.transient_budget, d.sse_buffer, d.sse_keepalive, d.sse_error_timeout) == (
        1000, 100, 256 << 20, 1000, 15.0, 5.0)
    assert (d.batch_id_limit, d.keep_alive, d.metrics, d.access_log, d.log_level, d.no_progress) == (
        100_000, 30, True, False, "info", False)
