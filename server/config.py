"""Server configuration (filled from the command line or built directly in tests)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MiB = 1 << 20


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 8000
    #: files loaded into the default graph at start-up
    data: list[str] = field(default_factory=list)
    #: (graph IRI, file) pairs loaded into named graphs at start-up
    graphs: list[tuple[str, str]] = field(default_factory=list)
    data_dir: str | None = None
    #: Bearer token that writes need (None: writes are open)
    token: str | None = None
    #: when set, reads need this Bearer token too (or the write token)
    read_token: str | None = None
    shards: int = 4
    demo: bool = False
    lenient: bool = False
    #: allow SPARQL Update LOAD <url>
    allow_load: bool = False
    query_timeout: float = 30.0
    max_rows: int = 5_000_000
    #: per-query memory budget in bytes for intermediate results and computed
    #: terms, checked before allocating (0 = unlimited)
    query_memory: int = 768 * MiB
    #: largest serialized query answer in bytes, checked before it is built (0 = unlimited)
    max_response_bytes: int = 256 * MiB
    #: request bodies larger than this are refused with 413 before being read
    max_body: int = 64 * MiB
    #: queries running at once; more are refused with 503 + Retry-After
    max_concurrent_queries: int = 32
    #: queries whose shape last ran faster than this run on the event loop
    #: (no thread-pool hop); 0 disables inline execution
    inline_threshold: float = 0.002
    cors_origin: str = "*"
    access_log: bool = False
    log_level: str = "info"
    #: expose /metrics
    metrics: bool = True
    #: result events retained per continuous query (SSE resume window)
    stream_retain: int = 1000
    #: a run of at least this many unchanged instants is one SSE "idle" event (shorter: one result each)
    stream_idle_after: int = 100
    #: bytes of stream data held in window (transient) stores
    transient_budget: int = 256 * MiB
    #: events an SSE client may lag behind before it is cut off (event: error)
    sse_buffer: int = 1000
    #: seconds between SSE keep-alive comments
    sse_keepalive: float = 15.0
    #: seconds a cut-off SSE client gets to take its `event: error` before the socket is dropped
    sse_error_timeout: float = 5.0

    @classmethod
    def from_env(cls, **overrides) -> Config:
        """Defaults, then JINDOU_* environment variables, then ``overrides``."""
        cfg = cls()
        env = os.environ
        if "JINDOU_TOKEN" in env:
            cfg.token = env["JINDOU_TOKEN"] or None
        if "JINDOU_MAX_BODY" in env:
            cfg.max_body = int(env["JINDOU_MAX_BODY"])
        if "JINDOU_QUERY_TIMEOUT" in env:
            cfg.query_timeout = float(env["JINDOU_QUERY_TIMEOUT"])
        if "JINDOU_MAX_CONCURRENT" in env:
            cfg.max_concurrent_queries = int(env["JINDOU_MAX_CONCURRENT"])
        for k, v in overrides.items():
            if not hasattr(cfg, k):
                raise TypeError(f"unknown config option {k!r}")
            setattr(cfg, k, v)
        return cfg
