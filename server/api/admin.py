"""Operations: /status (JSON) and /metrics (Prometheus text format)."""

from __future__ import annotations

import logging
import os
import platform
import time

import orjson
from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from server.api.common import ServerState

router = APIRouter(tags=["Admin"])
disable_created_metrics()  # no *_created series: they only add noise to /metrics
log = logging.getLogger("jindou.server")

VERSION = "0.1.0"

_LAT_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

#: route label of known paths (everything else is 'other', so labels stay bounded)
KNOWN_ROUTES = {
    "/sparql": "/sparql", "/sparql/": "/sparql", "/update": "/update", "/update/": "/update",
    "/store": "/store", "/status": "/status", "/metrics": "/metrics", "/docs": "/docs",
    "/openapi.json": "/openapi.json", "/": "/",
}


def route_label(path: str) -> str:
    r = KNOWN_ROUTES.get(path)
    if r is not None:
        return r
    first = path.split("/", 2)[1] if path.startswith("/") else ""
    return "/" + first if first in ("streams", "queries", "static") else "other"


class Metrics:
    """Prometheus metrics of one app (own registry, so several apps can live in one process)."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("jindou_http_requests_total", "HTTP requests", ["route", "method", "status"], registry=r)
        self.latency = Histogram("jindou_http_request_duration_seconds", "HTTP request latency",
                                 ["route", "method"], buckets=_LAT_BUCKETS, registry=r)
        self.queries = Counter("jindou_queries_total", "SPARQL queries by form and outcome", ["form", "outcome"],
                               registry=r)
        self.updates = Counter("jindou_updates_total", "SPARQL updates by outcome", ["outcome"], registry=r)
        self.store_writes = Counter("jindou_store_writes_total", "Graph Store writes", ["op"], registry=r)
        self.rejected = Counter("jindou_queries_rejected_total", "Queries refused because too many were running",
                                registry=r)
        self.internal = Counter("jindou_internal_errors_total", "Unexpected server errors", registry=r)
        self.running = Gauge("jindou_queries_running", "Queries running now", registry=r)
        self.triples = Gauge("jindou_store_triples", "Triples in the store", ["graph"], registry=r)
        self.graphs = Gauge("jindou_store_named_graphs", "Named graphs in the store", registry=r)
        self.uptime = Gauge("jindou_uptime_seconds", "Seconds since start", registry=r)
        self._req_children: dict[tuple[str, str, int], tuple] = {}
        self._query_children: dict[tuple[str, str], object] = {}

    def observe_request(self, path: str, method: str, status: int, seconds: float) -> None:
        key = (path, method, status)
        ch = self._req_children.get(key)
        if ch is None:
            route = route_label(path)
            ch = (self.requests.labels(route, method, str(status)), self.latency.labels(route, method))
            if len(self._req_children) < 10000:
                self._req_children[key] = ch
        ch[0].inc()
        ch[1].observe(seconds)

    def query_done(self, form: str, outcome: str) -> None:
        key = (form, outcome)
        ch = self._query_children.get(key)
        if ch is None:
            ch = self._query_children[key] = self.queries.labels(form, outcome)
        ch.inc()

    def update_done(self, outcome: str) -> None:
        self.updates.labels(outcome).inc()

    def store_write(self, op: str) -> None:
        self.store_writes.labels(op).inc()

    def log_internal(self, exc: BaseException) -> None:
        self.internal.inc()
        log.error("internal error: %s", exc, exc_info=exc)

    def refresh(self, state: ServerState) -> None:
        self.running.set(state.running)
        self.uptime.set(time.time() - state.started)
        try:
            st = state.db.status() or {}
        except Exception:
            return
        default = _num(st, "default_triples")
        total = _num(st, "triples")
        if default is not None:
            self.triples.labels("default").set(default)
        if total is not None:
            self.triples.labels("all").set(total)
        ng = st.get("named_graphs", st.get("graphs"))
        if isinstance(ng, (int, float)):
            self.graphs.set(ng)
        elif isinstance(ng, (list, dict)):
            self.graphs.set(len(ng))


def _num(d: dict, key: str):
    v = d.get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    return None


def status_doc(state: ServerState) -> dict:
    try:
        store = state.db.status()
    except Exception as e:  # status must answer even when the engine is unwell
        store = {"error": f"{type(e).__name__}: {e}"}
    cfg = state.config
    return {
        "status": "ok",
        "service": "jindou",
        "version": VERSION,
        "uptime_s": round(time.time() - state.started, 3),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "queries_running": state.running,
        "limits": {
            "query_timeout_s": cfg.query_timeout,
            "max_rows": cfg.max_rows,
            "max_body_bytes": cfg.max_body,
            "max_concurrent_queries": cfg.max_concurrent_queries,
        },
        "auth": {"writes": "token" if cfg.token else "open", "reads": "token" if cfg.read_token else "open"},
        "store": store,
    }


@router.get("/status", summary="Server and store status")
async def status(request: Request) -> Response:
    """JSON: version, uptime, limits, and the store's own status (triples, graphs, snapshot...)."""
    state: ServerState = request.app.state.jindou
    return Response(orjson.dumps(status_doc(state), default=str), media_type="application/json")


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    """Request counts and latencies by route and status, query counts by form and outcome,
    store size; Prometheus text exposition format."""
    state: ServerState = request.app.state.jindou
    m: Metrics | None = state.metrics
    if m is None:
        return Response(orjson.dumps({"error": "not_found", "detail": "metrics are disabled"}),
                        status_code=404, media_type="application/json")
    m.refresh(state)
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)
