"""Operations: /status (JSON) and /metrics (Prometheus text format)."""

from __future__ import annotations

import logging
import os
import platform
import re
import resource
import sys
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

from server.api.common import (
    HTTPError,
    ServerState,
    check_read,
    check_write,
    error_response,
    internal_error,
    json_object,
)

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
    return "/" + first if first in ("streams", "queries", "static", "pipelines") else "other"


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
        self.rss = Gauge("jindou_process_resident_memory_bytes", "Resident memory of the server process",
                         registry=r)
        # the distributed store (--workers / --cluster): one series per worker address
        self.worker_up = Gauge("jindou_worker_up", "1 while the store worker is up", ["worker"], registry=r)
        self.worker_triples = Gauge("jindou_worker_triples", "Triples the store worker holds", ["worker"],
                                    registry=r)
        self.worker_rss = Gauge("jindou_worker_resident_memory_bytes", "Resident memory of the store worker",
                                ["worker"], registry=r)
        self.worker_requests = Gauge("jindou_worker_requests", "Calls the store worker has served", ["worker"],
                                     registry=r)
        # Spark ingestion pipelines (pipeline/): the job reports its cumulative counters
        # and Spark's query progress with PUT /pipelines/{name}; they are exposed as gauges.
        self.pipeline_counts = Gauge("jindou_pipeline_records", "Pipeline totals by kind (triples, "
                                     "dead_letters, filtered, rejected, batches, duplicate_batches, ...)",
                                     ["pipeline", "kind"], registry=r)
        self.pipeline_rate = Gauge("jindou_pipeline_rows_per_second", "Spark query progress rates of the "
                                   "last micro-batch", ["pipeline", "rate"], registry=r)
        self.pipeline_batch = Gauge("jindou_pipeline_batch_seconds", "Last micro-batch: Spark trigger "
                                    "duration and the delivery time into the store", ["pipeline", "part"],
                                    registry=r)
        self.pipeline_up = Gauge("jindou_pipeline_running", "1 while the pipeline reports state running",
                                 ["pipeline"], registry=r)
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
        """Count an unexpected error; it is logged (traceback and the id the
        client saw) by ``http_error_from``, here only when it was not mapped."""
        if getattr(exc, "_jindou_counted", False):  # seen by an inner handler already
            return
        try:
            exc._jindou_counted = True  # type: ignore[attr-defined]
        except AttributeError:  # pragma: no cover
            pass
        self.internal.inc()
        if getattr(exc, "_jindou_error_id", None) is None:
            internal_error(exc)

    def refresh_pipelines(self, pipelines: dict) -> None:
        for name, doc in pipelines.items():
            for k, v in (doc.get("counters") or {}).items():
                if isinstance(v, (int, float)):
                    self.pipeline_counts.labels(name, k).set(v)
            sp = doc.get("spark_progress") or {}
            for k in ("inputRowsPerSecond", "processedRowsPerSecond"):
                if isinstance(sp.get(k), (int, float)):
                    self.pipeline_rate.labels(name, k).set(sp[k])
            trig = (sp.get("durationMs") or {}).get("triggerExecution")
            if isinstance(trig, (int, float)):
                self.pipeline_batch.labels(name, "trigger").set(trig / 1000.0)
            last = doc.get("last_batch") or {}
            if isinstance(last.get("deliver_s"), (int, float)):
                self.pipeline_batch.labels(name, "deliver").set(last["deliver_s"])
            self.pipeline_up.labels(name).set(1 if doc.get("state") == "running" else 0)

    def refresh(self, state: ServerState) -> None:
        self.refresh_pipelines(pipelines_of(state))
        for w in workers_of(state):
            name = w["address"]
            self.worker_up.labels(name).set(1 if w["state"] == "up" else 0)
            for gauge, key in ((self.worker_triples, "triples"), (self.worker_rss, "rss_bytes"),
                               (self.worker_requests, "requests")):
                if isinstance(w.get(key), (int, float)):
                    gauge.labels(name).set(w[key])
        self.running.set(state.running)
        self.uptime.set(time.time() - state.started)
        rss = process_memory().get("rss_bytes")
        if rss is not None:
            self.rss.set(rss)
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


def pipelines_of(state: ServerState) -> dict:
    """Latest report of each ingestion pipeline (name -> document), kept on the state."""
    return state.__dict__.setdefault("pipelines", {})


def process_memory() -> dict:
    """Resident memory of this process now (Linux /proc) and at its peak (getrusage), in bytes."""
    out: dict = {}
    try:
        with open("/proc/self/statm") as f:
            out["rss_bytes"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024  # KiB except on macOS
    out["peak_rss_bytes"] = max(peak, out.get("rss_bytes", 0))  # the kernel updates its peak lazily
    return out


def status_doc(state: ServerState) -> dict:
    try:
        store = state.db.status()
    except Exception as e:  # status must answer even when the engine is unwell
        store = {"error": internal_error(e).detail}
    cfg = state.config
    return {
        "status": "ok",
        "service": "jindou",
        "version": VERSION,
        "uptime_s": round(time.time() - state.started, 3),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "memory": process_memory(),
        "queries_running": state.running,
        "limits": {
            "query_timeout_s": cfg.query_timeout,
            "max_rows": cfg.max_rows,
            "max_body_bytes": cfg.max_body,
            "max_concurrent_queries": cfg.max_concurrent,
        },
        # every effective setting (flag > JINDOU_* variable > default); tokens only say "<set>"
        "settings": cfg.effective(),
        "auth": {"writes": "token" if cfg.token else "open", "reads": "token" if cfg.read_token else "open"},
        "store": store,
        "workers": workers_of(state),
        "pipelines": pipelines_of(state),
    }


def workers_of(state: ServerState) -> list[dict]:
    """The store's workers (empty when the store lives in this process)."""
    ws = getattr(getattr(state.db, "store", None), "workers_status", None)
    return ws() if ws is not None else []


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz(request: Request) -> Response:
    """200 `{"status": "ok"}` whenever the server process answers HTTP (for orchestrators'
    liveness probes: it never touches the store)."""
    return Response(b'{"status":"ok"}', media_type="application/json")


@router.get("/readyz", summary="Readiness: data loaded and every store worker up")
async def readyz(request: Request) -> Response:
    """200 when the server is serving (its data is loaded: it listens only after) and every
    store worker is up; otherwise 503 naming the workers that are not (with Retry-After),
    for orchestrators' readiness probes and docker-compose health checks."""
    state: ServerState = request.app.state.jindou
    not_up = [{"address": w["address"], "state": w["state"]} for w in workers_of(state) if w["state"] != "up"]
    if not_up:
        return Response(orjson.dumps({"status": "unavailable", "workers": not_up}), status_code=503,
                        media_type="application/json", headers={"Retry-After": "2"})
    return Response(b'{"status":"ready"}', media_type="application/json")


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


_PIPELINE_NAME = re.compile(r"[A-Za-z0-9_.\-]+\Z")


def _check_pipeline_report(doc: dict) -> None:
    """400 for a report /metrics could not read later (a bad one would break /metrics for good)."""
    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if doc.get("state") is not None and not isinstance(doc["state"], str):
        raise HTTPError(400, "bad_request", '"state" must be a string')
    for key in ("counters", "spark_progress", "last_batch"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise HTTPError(400, "bad_request", f'"{key}" must be a JSON object or null')
    bad = [k for k, v in (doc.get("counters") or {}).items() if not number(v)]
    if bad:
        raise HTTPError(400, "bad_request", f'"counters" must map names to numbers; not {bad[:5]}')
    dur = (doc.get("spark_progress") or {}).get("durationMs")
    if dur is not None and not isinstance(dur, dict):
        raise HTTPError(400, "bad_request", '"spark_progress.durationMs" must be a JSON object')


@router.put("/pipelines/{name}", summary="Report an ingestion pipeline's progress")
async def pipeline_put(name: str, request: Request) -> Response:
    """Called by `jindou pipeline run` after every micro-batch: JSON with the pipeline's
    state, cumulative counters and Spark's last query progress; shown in /status and
    /metrics. A write: needs the write token when one is set."""
    state: ServerState = request.app.state.jindou
    try:
        check_write(state.config, {k.lower(): v for k, v in request.headers.items()})
        if not _PIPELINE_NAME.match(name):
            raise HTTPError(400, "bad_request", f"bad pipeline name {name!r}")
        body = await request.body()
        if len(body) > 1 << 20:
            raise HTTPError(413, "too_large", "a pipeline report is at most 1 MiB")
        doc = json_object(body, "a pipeline report")
        _check_pipeline_report(doc)
        doc["updated"] = time.time()
        pipelines_of(state)[name] = doc
        return Response(b'{"ok":true}', media_type="application/json")
    except Exception as exc:
        return error_response(state, exc)


@router.get("/pipelines", summary="Ingestion pipelines and their progress")
async def pipelines_get(request: Request) -> Response:
    state: ServerState = request.app.state.jindou
    try:
        check_read(state.config, {k.lower(): v for k, v in request.headers.items()})
        return Response(orjson.dumps(pipelines_of(state), default=str), media_type="application/json")
    except Exception as exc:
        return error_response(state, exc)
