"""Every setting of ``jindou serve``, declared once.

A setting is a field of :class:`Settings` (the engine's part is inherited from
``engine.settings.EngineSettings``) with its type, default, help and bounds.
From that one declaration come:

* the ``jindou serve`` flag ``--<name>`` (underscores as dashes; ``server.cli``
  builds argparse from :func:`add_arguments`),
* the environment variable ``JINDOU_<NAME>`` (pydantic-settings),
* the row in docs/LIMITS.md (:func:`markdown_table`; a test compares),
* the entry in ``/status`` (:meth:`Settings.effective`, secrets redacted).

Precedence: a flag given on the command line, then the environment, then the
default. ``Settings(**values)`` (tests, embedding) reads no environment; only
:func:`load` does.

``python -m server.settings`` prints the table; ``--write`` updates docs/LIMITS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from engine.settings import EngineSettings, MiB, setting

ENV_PREFIX = "JINDOU_"
LogLevel = Literal["critical", "error", "warning", "info", "debug"]
LOG_LEVELS = get_args(LogLevel)
LogFormat = Literal["text", "json"]
LOG_FORMATS = get_args(LogFormat)


def parse_graph_arg(value: str) -> tuple[str, str]:
    """IRI=FILE; IRIs may contain '=', so the file is what follows the last '='
    unless only the first split names an existing file."""
    if "=" not in value:
        raise ValueError(f"--graph wants IRI=FILE, got {value!r}")
    iri, path = value.rsplit("=", 1)
    if not os.path.exists(path):
        first_iri, first_path = value.split("=", 1)
        if os.path.exists(first_path):
            iri, path = first_iri, first_path
    if not iri or ":" not in iri:
        raise ValueError(f"--graph: {iri!r} is not an absolute IRI")
    return iri, path


class Settings(BaseSettings, EngineSettings):
    """The server's settings (field order = order in ``--help`` and docs/LIMITS.md)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_assignment=True,
                                      case_sensitive=False)

    host: str = setting("127.0.0.1", "address to listen on", metavar="HOST")
    port: int = setting(8000, "TCP port to listen on", metavar="PORT", ge=0, le=65535)
    data: Annotated[list[str], NoDecode] = setting(
        [], "RDF file to load into the default graph (repeatable; format by extension; in the environment "
            "one file or a JSON list)", metavar="FILE")
    graph: Annotated[list[tuple[str, str]], NoDecode] = setting(
        [], "RDF file to load into the named graph IRI (repeatable; in the environment one IRI=FILE or a "
            "JSON list of them)", metavar="IRI=FILE")
    data_dir: str | None = setting(None, "persist the store (and streams) in DIR (none = in memory)",
                                   metavar="DIR")
    token: str | None = setting(None, "Bearer token required for writes (none = open)", secret=True,
                                metavar="TOKEN")
    read_token: str | None = setting(None, "Bearer token required for reads too (none = open reads)",
                                     secret=True, metavar="TOKEN")
    cors_origin: str = setting("*", "Access-Control-Allow-Origin value", metavar="ORIGIN")
    demo: bool = setting(False, "start with the built-in demo data (and a demo stream)")
    lenient: bool = setting(False, "skip bad lines of data files instead of failing")
    max_response_bytes: int = setting(256 * MiB, "largest query answer; a bigger one is refused before it "
                                                 "is built (0 = unlimited)", metavar="BYTES", ge=0)
    max_body: int = setting(64 * MiB, "largest accepted request body (413 past it)", metavar="BYTES", ge=0)
    max_concurrent: int = setting(32, "queries running at once; more get 503 with Retry-After",
                                  metavar="N", ge=1)
    answer_cache: int = setting(32 * MiB, "bytes of answers of repeated query texts kept for the store's "
                                          "current snapshot (each at most 256 KiB; dropped at any write; "
                                          "0 = keep none)", metavar="BYTES", ge=0)
    inline_ms: float = setting(2.0, "queries whose shape last ran faster than this run on the event loop, "
                                    "others in the thread pool (0 = always the thread pool)", metavar="MS",
                               ge=0)
    sse_buffer: int = setting(1000, "events an SSE client may fall behind before it is cut off",
                              metavar="N", ge=1)
    sse_keepalive: float = setting(15.0, "seconds between SSE keep-alive comments", metavar="S", gt=0)
    sse_error_timeout: float = setting(5.0, "seconds a cut-off SSE client gets to take its 'event: error' "
                                            "before the connection is dropped", metavar="S", ge=0)
    ticket_ttl: float = setting(60.0, "seconds an SSE ticket (POST /queries/{name}/tickets; for browsers "
                                      "under --read-token) stays valid", metavar="S", gt=0, le=86400)
    webhook_allow: str = setting("", "comma-separated URL prefixes continuous-query webhook sinks may POST to "
                                     "(e.g. https://host:8443/hooks/; empty = no webhooks)", metavar="URLS")
    nats_allow: str = setting("", "comma-separated NATS servers (nats://host:port) continuous-query sinks may "
                                  "publish to (empty = none)", metavar="SERVERS")
    sink_retry_max: float = setting(30.0, "longest wait between retries of a result sink delivery "
                                          "(exponential backoff from 0.5 s)", metavar="S", gt=0)
    processes: int = setting(1, "serving processes sharing the listening port and one store (mapped read-only "
                                "from shared memory); the first owns writes, streams, SSE and admin, the "
                                "others answer /sparql queries (1 = one process)", metavar="N", ge=1, le=64)
    process_sync_timeout: float = setting(5.0, "seconds an acknowledged write waits for every query process "
                                               "to switch to it; a process still behind is restarted and "
                                               "serves nothing meanwhile", metavar="S", gt=0, le=600)
    switch_interval: float = setting(
        0.005, "CPython GIL switch interval in the serving process (sys.setswitchinterval): at most how "
               "long a thread woken by another (the continuous-query worker, a pooled query) waits for "
               "the GIL while the event loop runs Python (0.005 = Python's own)", metavar="S", gt=0, le=0.1)
    keep_alive: int = setting(30, "seconds an idle HTTP keep-alive connection stays open", metavar="S",
                              ge=1)
    cpu_affinity: Literal["auto", "off"] = setting(
        "off", "with --processes N (N >= 2) and at least N CPUs to run on: auto binds each serving process's "
               "event-loop thread (and the threads it starts later: its thread pool) to a CPU of its own, the "
               "primary to the first (for a machine that serves only this: a bound process cannot move off a "
               "CPU another program keeps busy); off: the kernel places them")
    process_session: Literal["shared", "own"] = setting(
        "shared", "with --processes N (N >= 2): shared keeps the query processes in the primary's session; own "
                  "starts each in a session of its own, so where the kernel shares CPU between sessions "
                  "(sched_autogroup) each process is weighed as one program, not all N together as one")
    batch_writes: bool = setting(True, "write the fast lane's small answers to the requests of one event-loop "
                                       "pass together, after all of them are computed (--no-batch-writes: "
                                       "each as soon as it is computed)")
    poll_us: int = setting(0, "after an event-loop pass that answered fast-lane requests, poll for new input "
                              "this many microseconds (adaptive, shorter while none comes) before the loop "
                              "sleeps, to skip the sleep and wake-up between a client's requests (needs "
                              "batch writes; 0 = off)", metavar="US", ge=0, le=2000)
    allow_service: bool = setting(False, "evaluate SERVICE <iri> { } (federated query) for the endpoints in "
                                         "--service-endpoints; off: SERVICE is a 400")
    service_endpoints: Annotated[list[str], NoDecode] = setting(
        [], "SERVICE endpoint a query may call with --allow-service: an IRI, or an IRI prefix ending in '*' "
            "(repeatable; in the environment one IRI or a JSON list)", metavar="IRI")
    metrics: bool = setting(True, "expose /metrics (--no-metrics: 404)")
    access_log: bool = setting(False, "log one line per request (method, path, status, latency, request id)")
    log_level: LogLevel = setting("info", "log level: " + ", ".join(LOG_LEVELS))
    log_format: LogFormat = setting("text", "log line format: text (timestamp level logger: message key=value) "
                                            "or json (one object a line, for log shippers)")
    no_progress: bool = setting(False, "no progress bars while loading")

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        # Settings(**values) is exactly the given values and the defaults: the environment
        # is read only by load() (its subclass below), so tests never depend on it.
        return (init_settings,)

    @field_validator("token", "read_token", "data_dir", mode="before")
    @classmethod
    def _empty_is_none(cls, v):
        return None if v == "" else v

    @field_validator("data", "graph", "service_endpoints", mode="before")
    @classmethod
    def _env_list(cls, v, info):
        if isinstance(v, str):  # from the environment: one item, or a JSON list
            v = _json_list(v) if v.lstrip().startswith("[") else [v]
        if info.field_name == "graph" and isinstance(v, list):
            return [parse_graph_arg(x) if isinstance(x, str) else x for x in v]
        return v

    def effective(self) -> dict[str, Any]:
        """Every setting's value as /status reports it: secrets only say whether they are set."""
        out = {}
        for name, f in type(self).model_fields.items():
            v = getattr(self, name)
            if _meta(f).get("secret"):
                v = "<set>" if v else None
            elif isinstance(v, list):
                v = [list(x) if isinstance(x, tuple) else x for x in v]
            out[name] = v
        return out


class _FromEnvironment(Settings):
    """Settings reading ``JINDOU_*`` variables below the given values (see :func:`load`)."""

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return (init_settings, env_settings)


class SettingsFailure(ValueError):
    """A setting's value is invalid (flag or environment variable); the message names both."""


def load(given: Mapping[str, Any] | None = None) -> Settings:
    """Settings from ``given`` (the flags on the command line), then the ``JINDOU_*``
    environment variables, then the defaults. Raises :class:`SettingsFailure`."""
    given = dict(given or {})
    try:
        s = _FromEnvironment(**given)
    except ValidationError as e:
        raise SettingsFailure(_explain(e, given, os.environ)) from None
    except SettingsError as e:  # a list variable that is not JSON
        raise SettingsFailure(f"bad setting: {e} ({e.__cause__})") from None
    return Settings(**{k: getattr(s, k) for k in Settings.model_fields})


def _explain(e: ValidationError, given: Mapping[str, Any], env: Mapping[str, str]) -> str:
    lines = []
    lower = {k.lower(): v for k, v in env.items()}
    for err in e.errors():
        name = str(err["loc"][0]) if err.get("loc") else "?"
        var = env_var(name)
        if name in given:
            source = f"{flag(name)} {given[name]!r}"
        elif var.lower() in lower:
            source = f"{var}={lower[var.lower()]!r}"
        else:
            source = f"{flag(name)} / {var}"
        lines.append(f"bad setting {source}: {err['msg']}")
    return "; ".join(lines)


def _json_list(text: str) -> list:
    try:
        v = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not a JSON list: {e}") from None
    if not isinstance(v, list):
        raise ValueError("not a JSON list")
    return v


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_var(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _meta(f) -> dict:
    return f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}


# ---------------------------------------------------------------- argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per setting. Defaults are SUPPRESSed: only the flags given appear in the
    namespace, so the environment and the declared default can fill in the rest."""
    for name, f in Settings.model_fields.items():
        meta = _meta(f)
        kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS,
                              "help": f"{f.description} (default: {format_default(f.default)}; env {env_var(name)})"}
        ann = f.annotation
        if ann is bool:
            kw["action"] = argparse.BooleanOptionalAction if f.default else "store_true"
        elif name == "graph":
            kw.update(action="append", type=_graph_type)
        elif name == "data":
            kw["action"] = "append"
        elif name == "log_level":
            kw["choices"] = LOG_LEVELS
        elif name == "log_format":
            kw["choices"] = LOG_FORMATS
        elif ann in (int, float):
            kw["type"] = ann
        if meta.get("metavar") and kw.get("action") not in ("store_true", argparse.BooleanOptionalAction):
            kw["metavar"] = meta["metavar"]
        parser.add_argument(flag(name), **kw)


def _graph_type(value: str) -> tuple[str, str]:
    try:
        return parse_graph_arg(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# ---------------------------------------------------------------- documentation


def format_default(v: Any) -> str:
    if v is None or v == []:
        return "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, int) and v >= MiB and v % MiB == 0:
        return f"{v // MiB} MiB"
    if isinstance(v, int):
        return f"{v:,}" if v >= 10_000 else str(v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def markdown_table() -> str:
    rows = ["| flag | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
    for name, f in Settings.model_fields.items():
        meta = _meta(f)
        arg = f" {meta['metavar']}" if meta.get("metavar") and f.annotation is not bool else ""
        fl = f"`{flag(name)}{arg}`"
        if f.annotation is bool and f.default:
            fl = f"`{flag(name)}` / `--no-{name.replace('_', '-')}`"
        desc = f.description.replace("|", "\\|")
        rows.append(f"| {fl} | `{env_var(name)}` | {format_default(f.default)} | {desc} |")
    return "\n".join(rows) + "\n"


DOC = Path(__file__).resolve().parent.parent / "docs" / "LIMITS.md"
BEGIN = "<!-- settings table: generated by `python -m server.settings --write`; do not edit -->\n"
END = "<!-- end of settings table -->\n"


def doc_with_table(text: str) -> str:
    """``text`` (docs/LIMITS.md) with its generated settings table replaced by the current one."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"{DOC.name} has no settings table markers")
    return text[:i + len(BEGIN)] + markdown_table() + text[j:]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        DOC.write_text(doc_with_table(DOC.read_text()))
        return 0
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
