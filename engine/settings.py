"""The engine's settings, declared once: type, default, meaning and bounds.

``engine.database.Database`` and ``engine.stream.manager.StreamManager`` take
their constructor defaults from :data:`DEFAULTS`; the server's settings
(``server/settings.py``) extend :class:`EngineSettings`, which gives each one
its ``jindou serve`` flag (``--query-timeout``), its environment variable
(``JINDOU_QUERY_TIMEOUT``) and its row in docs/LIMITS.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MiB = 1 << 20


def setting(default: Any, help: str, *, metavar: str | None = None, secret: bool = False,
            **bounds: Any) -> Any:
    """A declared setting: its default, its one-line help (shown by ``--help``, in
    docs/LIMITS.md and in /status' documentation), an optional argparse metavar, whether
    /status must hide it (``secret``), and pydantic bounds (``ge``, ``le``...)."""
    extra = {"metavar": metavar, "secret": secret}
    return Field(default, description=help, json_schema_extra=extra, **bounds)


class EngineSettings(BaseModel):
    """Settings the engine itself reads (the storage, query and stream limits)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    shards: int = setting(4, "shards the graph store is split into (by vertex id; with workers: one per "
                             "worker)", metavar="N", ge=1)
    workers: int = setting(0, "worker processes holding the store's partitions on this host (0 = the store "
                              "lives in the serving process)", metavar="N", ge=0, le=64)
    cluster: str | None = setting(None, "TOML/YAML file listing the addresses of `jindou worker` processes "
                                        "(on any host) that hold the store", metavar="FILE")
    cluster_transport: Literal["auto", "shm", "flight", "rdma"] = setting(
        "auto", "how the serving process reads workers' partitions: shm (same host, mapped read-only), "
                "flight (Arrow Flight), rdma (pyverbs), auto = shm where possible")
    cluster_exec: Literal["adaptive", "in-place", "fork-join"] = setting(
        "adaptive", "per exploration step on a cluster: fetch remote neighbour lists (in-place), ship the "
                    "step to the owning workers (fork-join), or choose by cost (adaptive)")
    query_timeout: float = setting(
        30.0, "seconds a query or update may take from admission to its last byte (0 = none)",
        metavar="S", ge=0)
    max_rows: int = setting(5_000_000, "rows of any intermediate or final result", metavar="N", ge=1)
    # with a 100k-triple store the server stays under 1.5 GiB
    query_memory: int = setting(
        768 * MiB, "per-query memory budget for intermediate results, computed strings and the answer "
                   "being built (0 = unlimited)", metavar="BYTES", ge=0)
    allow_load: bool = setting(False, "allow SPARQL Update LOAD <url> and fetching while parsing "
                                      "(JSON-LD contexts)")
    retain: int = setting(1000, "result instants kept per continuous query for SSE resume", metavar="N", ge=1)
    retain_bytes: int = setting(64 * MiB, "bytes of result events kept per continuous query for SSE resume "
                                          "(fewer than --retain instants when answers are large; the newest "
                                          "is always kept)", metavar="BYTES", ge=1)
    retain_total_bytes: int = setting(
        1024 * MiB, "bytes of result events kept for SSE resume by all continuous queries together; past it "
                    "each query keeps at most its share (this / queries, at least 64 KiB, the newest event "
                    "always)", metavar="BYTES", ge=1)
    skip_behind: int = setting(
        0, "a continuous query whose instants cost 10 ms or more and that falls N instants behind its "
           "streams skips to its newest ready instant (the skipped run is one 'skipped' error event); "
           "0 = never skip: every instant is answered, late", metavar="N", ge=0)
    maintain_cpu_ratio: float = setting(
        8.0, "continuous queries keep their answers maintained as triples arrive (answers in microseconds) "
             "unless the maintenance costs more than this many times the CPU of evaluating each instant "
             "when it fires (checked every 16 instants); lower spends less CPU for more latency; 0 = never "
             "maintain", metavar="R", ge=0)
    idle_after: int = setting(100, "report a run of at least N unchanged continuous-query instants as one SSE "
                                   "'idle' event", metavar="N", ge=1)
    transient_budget: int = setting(256 * MiB, "memory for stream window data; past it POSTs get 503 "
                                               "backpressure", metavar="BYTES", ge=1)
    batch_id_limit: int = setting(100_000, "batch ids remembered per stream (an older re-delivered batch "
                                           "is applied again)", metavar="N", ge=1)


#: the declared defaults (constructor defaults of Database and StreamManager)
DEFAULTS = EngineSettings()
