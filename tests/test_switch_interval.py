"""`--switch-interval` / JINDOU_SWITCH_INTERVAL: the serving process's GIL switch interval is
the setting (applied by `jindou serve`), and a value outside (0, 0.1] s stops the start with a
line naming the flag. No timings here: bench/result_latency.py measures what it changes."""

from __future__ import annotations

import sys

import pytest

from server import cli
from server.settings import Settings


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv("JINDOU_SWITCH_INTERVAL", raising=False)


@pytest.fixture
def restore_interval():
    old = sys.getswitchinterval()
    yield
    sys.setswitchinterval(old)


def _config(*args: str) -> Settings:
    return cli.config_from_args(cli.build_parser().parse_args(["serve", *args]))


def test_default_is_applied(restore_interval):
    c = _config()
    assert c.switch_interval == Settings.model_fields["switch_interval"].default == 0.005
    sys.setswitchinterval(0.001)
    assert cli.apply_switch_interval(c) == pytest.approx(0.001)
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_flag_and_environment_are_applied(monkeypatch, restore_interval):
    c = _config("--switch-interval", "0.002")
    cli.apply_switch_interval(c)
    assert sys.getswitchinterval() == pytest.approx(0.002)
    monkeypatch.setenv("JINDOU_SWITCH_INTERVAL", "0.003")
    c = _config()
    assert c.switch_interval == pytest.approx(0.003)
    cli.apply_switch_interval(c)
    assert sys.getswitchinterval() == pytest.approx(0.003)
    assert _config("--switch-interval", "0.0001").switch_interval == pytest.approx(0.0001)  # flag wins


@pytest.mark.parametrize("bad", ["0", "-0.001", "0.5", "abc", "nan"])
def test_bad_values_stop_the_start_naming_the_setting(bad, capsys):
    before = sys.getswitchinterval()
    with pytest.raises(SystemExit) as e:
        _config("--switch-interval", bad)
    msg = str(e.value.code) if not isinstance(e.value.code, int) else capsys.readouterr().err
    assert "switch-interval" in msg or "switch_interval" in msg, msg
    assert sys.getswitchinterval() == before


def test_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("JINDOU_SWITCH_INTERVAL", "5")
    with pytest.raises(SystemExit) as e:
        _config()
    assert "JINDOU_SWITCH_INTERVAL" in str(e.value.code)
