"""Operations: /status (JSON) and /metrics (Prometheus text format)."""

from __future__ import annotations

import importlib.resources
import logging
import os
import platform
import re
import resource
import sys
import time
from bisect import bisect_left
from pathlib import Path

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from engine.stream import telemetry
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
    "/openapi.json": "/openapi.json", "/": "/", "/healthz": "/healthz", "/readyz": "/readyz",
}


def route_label(path: str) -> str:
    r = KNOWN_ROUTES.get(path)
    if r is not None:
        return r
    first = path.split("/", 2)[1] if path.startswith("/") else ""
    return "/" + first if first in ("streams", "queries", "static", "pipelines", "docs") else "other"


def _batchable() -> bool:
    """Whether this prometheus-client's histogram keeps one series per bucket (``_buckets``,
    +Inf last) and its sum (``_sum``), so batched counts can be added in bulk."""
    try:
        h = Histogram("jindou_layout_probe", "probe", buckets=_LAT_BUCKETS, registry=None)
        return len(h._buckets) == len(_LAT_BUCKETS) + 1 and callable(h._sum.inc) and callable(h._buckets[0].inc)
    except Exception:  # noqa: BLE001 - any other layout: no batching
        return False


_BATCHABLE = _batchable()


#: the HTTP lane folds its waiting answers (Metrics.lane_record) into the counts at this many
LANE_FOLD = 4096


class Metrics:
    """Prometheus metrics of one app (own registry, so several apps can live in one process).

    Counted as it happens: HTTP requests, queries, updates, store writes, SSE clients and
    each continuous evaluation's duration. Read when scraped (:class:`_StateCollector`):
    store size, store workers, ingestion pipelines, streams and continuous queries, from
    the counts those parts keep themselves. The process (memory, CPU, file descriptors,
    start time) and the Python runtime come from prometheus-client's own collectors."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
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
        # continuous queries: what has to be seen as it happens
        self.evaluation = Histogram("jindou_continuous_evaluation_seconds",
                                    "Time to evaluate one instant of a continuous query (window, query, "
                                    "rendering; unchanged instants are not evaluated and not counted)",
                                    buckets=_LAT_BUCKETS, registry=r)
        self.sse_subscribers = Gauge("jindou_sse_subscribers", "SSE clients reading continuous-query results now",
                                     registry=r)
        self.sse_cut_off = Counter("jindou_sse_clients_cut_off_total", "SSE clients disconnected because they fell "
                                   "more than --sse-buffer events behind", registry=r)
        self.sse_dropped = Counter("jindou_sse_events_dropped_total", "Events not delivered to SSE clients that "
                                   "were cut off (they may resume with Last-Event-ID)", registry=r)
        self._state: ServerState | None = None
        self._evaluations_of = None  # the stream registry whose evaluations this instance hears
        r.register(_StateCollector(self))
        self._req_children: dict[tuple[str, str, int], tuple] = {}
        self._query_children: dict[tuple[str, str], object] = {}
        #: batched counts (observe_request, query_done) not yet in their series (flush)
        self._pending_req: dict[tuple[str, str, int], list] = {}
        self._pending_q: dict[tuple[str, str], int] = {}
        #: the latency histogram's upper bounds (+Inf last), as prometheus-client sorts them
        self._bounds = (*_LAT_BUCKETS, float("inf"))
        #: (form, path, method) -> the seconds of the HTTP lane's answered queries not folded yet
        #: into the batched counts (lane_record, fold_lane)
        self._lane: dict[tuple[str, str, str], list] = {}

    def bind(self, state: ServerState) -> None:
        """Read ``state`` when scraped, and hear the evaluations of its stream manager."""
        self._state = state
        owner = getattr(state.streams, "_reg", None)
        if owner is not None and owner is not self._evaluations_of:
            telemetry.attach(owner, self._observe_evaluation)
            self._evaluations_of = owner

    def _observe_evaluation(self, query: str, seconds: float) -> None:
        self.evaluation.observe(seconds)

    def sse_opened(self) -> None:
        self.sse_subscribers.inc()

    def sse_closed(self) -> None:
        self.sse_subscribers.dec()

    def sse_client_cut_off(self, pending: int) -> None:
        self.sse_cut_off.inc()
        self.sse_dropped.inc(max(0, pending))

    def observe_request(self, path: str, method: str, status: int, seconds: float) -> None:
        """Count a request and its latency. Batched: kept in plain lists here (the event
        loop's thread is the only caller) and added to the prometheus series by
        :meth:`flush`, before every scrape -- a prometheus-client ``inc`` and
        ``observe`` take a lock each and cost ~1.5 µs, a few % of a selective query."""
        key = (path, method, status)
        if not _BATCHABLE:  # a prometheus-client whose histogram cannot take counts in bulk
            ch = self._children(key)
            ch[0].inc()
            ch[1].observe(seconds)
            return
        p = self._pending_req.get(key)
        if p is None:
            if len(self._pending_req) >= 1000:
                self.flush()
            p = self._pending_req[key] = [0, 0.0, [0] * len(self._bounds)]
        p[0] += 1
        p[1] += seconds
        p[2][bisect_left(self._bounds, seconds)] += 1

    def _children(self, key: tuple[str, str, int]) -> tuple:
        """(request counter, latency histogram) series of (path, method, status)."""
        ch = self._req_children.get(key)
        if ch is None:
            path, method, status = key
            route = route_label(path)
            ch = (self.requests.labels(route, method, str(status)), self.latency.labels(route, method))
            if len(self._req_children) < 10000:
                self._req_children[key] = ch
        return ch

    def query_request(self, form: str, path: str, method: str, seconds: float) -> None:
        """:meth:`query_done` (outcome ok) and :meth:`observe_request` (status 200) of
        one query answered on the HTTP lane, in one call."""
        key = (form, "ok")
        self._pending_q[key] = self._pending_q.get(key, 0) + 1
        if not _BATCHABLE:
            self.observe_request(path, method, 200, seconds)
            return
        p = self._pending_req.get((path, method, 200))
        if p is None:
            self.observe_request(path, method, 200, seconds)
            return
        p[0] += 1
        p[1] += seconds
        p[2][bisect_left(self._bounds, seconds)] += 1

    def lane_record(self, form: str, path: str, method: str) -> list:
        """The list the HTTP lane appends each answered query's seconds to, for queries of
        ``form`` answered 200 on (``path``, ``method``): one C-level append per answer
        instead of :meth:`query_request`'s call. Folded into the batched counts as
        :meth:`query_request` counts each (the same sums, in order) by :meth:`fold_lane`,
        which :meth:`flush` calls first and the lane calls once a list holds
        :data:`LANE_FOLD` answers (the loop's thread is the only writer)."""
        key = (form, path, method)
        rec = self._lane.get(key)
        if rec is None:
            rec = self._lane[key] = []
        return rec

    def fold_lane(self) -> None:
        """Count the answers waiting in the lane's lists (:meth:`lane_record`)."""
        for (form, path, method), rec in self._lane.items():
            if not rec:
                continue
            times = rec[:]
            del rec[:]  # (the same list: the lane keeps it)
            key = (form, "ok")
            self._pending_q[key] = self._pending_q.get(key, 0) + len(times)
            if not _BATCHABLE:
                for t in times:
                    self.observe_request(path, method, 200, t)
                continue
            p = self._pending_req.get((path, method, 200))
            if p is None:
                self.observe_request(path, method, 200, times[0])
                p = self._pending_req[(path, method, 200)]
                times = times[1:]
            bounds, counts, total = self._bounds, p[2], p[1]
            for t in times:
                total += t
                counts[bisect_left(bounds, t)] += 1
            p[0] += len(times)
            p[1] = total

    def query_done(self, form: str, outcome: str) -> None:
        """Count a query by form and outcome (batched as :meth:`observe_request`)."""
        key = (form, outcome)
        self._pending_q[key] = self._pending_q.get(key, 0) + 1

    def flush(self) -> None:
        """Add the batched request and query counts to their prometheus series."""
        if self._lane:
            self.fold_lane()
        pending, self._pending_req = self._pending_req, {}
        for key, (n, total, counts) in pending.items():
            ch = self._children(key)
            ch[0].inc(n)
            ch[1]._sum.inc(total)  # the histogram's own series (layout checked: _BATCHABLE)
            for b, c in zip(ch[1]._buckets, counts, strict=True):
                if c:
                    b.inc(c)
        pending_q, self._pending_q = self._pending_q, {}
        for key, n in pending_q.items():
            ch = self._query_children.get(key)
            if ch is None:
                ch = self._query_children[key] = self.queries.labels(*key)
            ch.inc(n)

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

    def refresh(self, state: ServerState) -> None:
        """Before a scrape: the gauges kept here (the families read from ``state`` are
        built by :class:`_StateCollector` during the scrape itself)."""
        self.bind(state)
        self.flush()
        self.running.set(state.running)


class _StateCollector:
    """The families read from the server's parts at scrape time, so a deleted stream,
    query or pipeline leaves no stale series and nothing has to be pushed to /metrics.
    Counts those parts keep cumulatively are exposed as counters (``_total``)."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def describe(self):
        return []  # families vary with the state: not checked for duplicates at registration

    def collect(self):
        state = self.metrics._state
        if state is None:
            return
        yield from _store_families(state)
        yield from _worker_families(state)
        yield from _process_families(state)
        yield from _pipeline_families(pipelines_of(state))
        yield from _stream_families(state)


def _store_families(state: ServerState):
    try:
        st = state.db.status() or {}
    except Exception:  # noqa: BLE001 - /metrics answers even when the engine is unwell
        return
    triples = GaugeMetricFamily("jindou_store_triples", "Triples in the store: the default graph and all "
                                "named graphs together (their sum is the store's total)", labels=["graph"])
    default, total = _num(st, "default_triples"), _num(st, "triples")
    if default is not None:
        triples.add_metric(["default"], default)
        if total is not None:
            triples.add_metric(["named"], max(0, total - default))
    elif total is not None:
        triples.add_metric(["default"], total)
    yield triples
    ng = st.get("named_graphs", st.get("graphs"))
    if isinstance(ng, (list, dict)):
        ng = len(ng)
    if isinstance(ng, (int, float)):
        yield GaugeMetricFamily("jindou_store_named_graphs", "Named graphs in the store", value=ng)


def _worker_families(state: ServerState):
    ws = workers_of(state)
    if not ws:
        return
    up = GaugeMetricFamily("jindou_worker_up", "1 while the store worker is up", labels=["worker"])
    triples = GaugeMetricFamily("jindou_worker_triples", "Triples the store worker holds", labels=["worker"])
    rss = GaugeMetricFamily("jindou_worker_resident_memory_bytes", "Resident memory of the store worker",
                            labels=["worker"])
    calls = CounterMetricFamily("jindou_worker_requests", "Calls the store worker has served", labels=["worker"])
    for w in ws:
        name = [w["address"]]
        up.add_metric(name, 1 if w["state"] == "up" else 0)
        for fam, key in ((triples, "triples"), (rss, "rss_bytes"), (calls, "requests")):
            v = _num(w, key)
            if v is not None:
                fam.add_metric(name, v)
    yield from (up, triples, rss, calls)


def _process_families(state: ServerState):
    """``--processes N``: one series per serving process (label ``process``: 0 is the
    primary). The jindou_http_* families count the primary's requests only; the
    requests of all processes are the sum of jindou_process_requests over ``process``."""
    ps = processes_of(state)
    if not ps:
        return
    up = GaugeMetricFamily("jindou_process_up", "1 while the serving process is up and at the store's version",
                           labels=["process", "role"])
    version = GaugeMetricFamily("jindou_process_store_version", "Store version the serving process answers from",
                                labels=["process"])
    rss = GaugeMetricFamily("jindou_process_resident_memory_bytes", "Resident memory of the serving process "
                            "(shared pages counted in each)", labels=["process"])
    pss = GaugeMetricFamily("jindou_process_proportional_memory_bytes", "Proportional set size of the serving "
                            "process (shared pages split among the processes mapping them; sums to the total)",
                            labels=["process"])
    reqs = CounterMetricFamily("jindou_process_requests", "HTTP requests the serving process answered (sum over "
                               "process for the server's total)", labels=["process"])
    restarts = CounterMetricFamily("jindou_process_restarts", "Times the query process was restarted",
                                   labels=["process"])
    for p in ps:
        name = str(p["process"])
        up.add_metric([name, p["role"]], 1 if p["state"] == "up" else 0)
        version.add_metric([name], p.get("version", -1))
        for fam, key in ((rss, "rss_bytes"), (pss, "pss_bytes"), (reqs, "requests"), (restarts, "restarts")):
            v = _num(p, key)
            if v is not None:
                fam.add_metric([name], v)
    yield from (up, version, rss, pss, reqs, restarts)


def _pipeline_families(pipelines: dict):
    """Spark ingestion pipelines (pipeline/): the job reports its cumulative counters and
    Spark's query progress with PUT /pipelines/{name}."""
    if not pipelines:
        return
    counts = CounterMetricFamily("jindou_pipeline_records", "Pipeline totals by kind (triples, dead_letters, "
                                 "filtered, rejected, batches, duplicate_batches, ...)", labels=["pipeline", "kind"])
    rate = GaugeMetricFamily("jindou_pipeline_rows_per_second", "Spark query progress rates of the last "
                             "micro-batch", labels=["pipeline", "rate"])
    batch = GaugeMetricFamily("jindou_pipeline_batch_seconds", "Last micro-batch: Spark trigger duration and "
                              "the delivery time into the store", labels=["pipeline", "part"])
    running = GaugeMetricFamily("jindou_pipeline_running", "1 while the pipeline reports state running",
                                labels=["pipeline"])
    for name, doc in pipelines.items():
        for k, v in (doc.get("counters") or {}).items():
            if _num({"v": v}, "v") is not None:
                counts.add_metric([name, k], v)
        sp = doc.get("spark_progress") or {}
        for k in ("inputRowsPerSecond", "processedRowsPerSecond"):
            if _num(sp, k) is not None:
                rate.add_metric([name, k], sp[k])
        trig = _num(sp.get("durationMs") or {}, "triggerExecution")
        if trig is not None:
            batch.add_metric([name, "trigger"], trig / 1000.0)
        deliver = _num(doc.get("last_batch") or {}, "deliver_s")
        if deliver is not None:
            batch.add_metric([name, "deliver"], deliver)
        running.add_metric([name], 1 if doc.get("state") == "running" else 0)
    yield from (counts, rate, batch, running)


def _stream_families(state: ServerState):
    """Streams and continuous queries, from the counts the stream manager keeps."""
    m = getattr(state, "streams", None)
    if m is None:
        return
    try:
        streams, queries = m.streams(), m.queries()
    except Exception:  # noqa: BLE001 - /metrics answers even when the stream engine is unwell
        return
    fams = {
        "accepted": CounterMetricFamily("jindou_stream_triples", "Stream triples (ndjson lines, Arrow rows, "
                                        "graph triples) accepted", labels=["stream"]),
        "rejected": CounterMetricFamily("jindou_stream_refused", "Stream lines refused (bad, late, over "
                                        "budget); the rest of their batch was kept", labels=["stream"]),
        "elements": CounterMetricFamily("jindou_stream_elements", "Stream elements (triples sharing one event "
                                        "time) published", labels=["stream"]),
        "batches": CounterMetricFamily("jindou_stream_batches", "Batches (POSTs, demo ticks) published",
                                       labels=["stream"]),
        "triples_in_window_store": GaugeMetricFamily("jindou_stream_window_triples", "Triples the stream's "
                                                     "window store holds now", labels=["stream"]),
        "bytes": GaugeMetricFamily("jindou_stream_window_bytes", "Bytes the stream's window store holds now",
                                   labels=["stream"]),
    }
    for s in streams:
        for key, fam in fams.items():
            v = _num(s, key)
            if v is not None:
                fam.add_metric([s["name"]], v)
    yield from fams.values()
    inst = CounterMetricFamily("jindou_continuous_instants", "Instants a continuous query has reported "
                               "(evaluated, or unchanged and repeated without evaluation)", labels=["query"])
    unchanged = CounterMetricFamily("jindou_continuous_instants_unchanged", "Instants reported unchanged "
                                    "without evaluation", labels=["query"])
    last = GaugeMetricFamily("jindou_continuous_last_evaluation_seconds", "Duration of the query's last "
                             "evaluated instant", labels=["query"])
    for q in queries:
        name = [q["id"]]
        if _num(q, "evaluated") is not None:
            inst.add_metric(name, q["evaluated"])
        if _num(q, "unchanged_instants") is not None:
            unchanged.add_metric(name, q["unchanged_instants"])
        if _num(q, "last_latency_ms") is not None:
            last.add_metric(name, q["last_latency_ms"] / 1000.0)
    yield from (inst, unchanged, last)
    sinks = getattr(m, "sinks", None)
    if sinks is not None:
        yield from _sink_families(sinks.statuses())


#: sink status key -> (family, help); counters get ``_total`` from prometheus-client
_SINK_COUNTERS = {
    "delivered": ("jindou_sink_deliveries", "Windows a result sink delivered (webhook POST accepted, NATS ack)"),
    "retries": ("jindou_sink_retries", "Deliveries a result sink retried (5xx, 408, 425, 429, network errors)"),
    "failed": ("jindou_sink_failures", "Windows a result sink's destination refused for good (other 4xx)"),
    "dropped": ("jindou_sink_dropped", "Windows a result sink fell too far behind to deliver (the result "
                "log had dropped them)"),
    "duplicates": ("jindou_sink_duplicates", "Deliveries the destination already had (idempotency key / "
                   "Nats-Msg-Id)"),
}


def _sink_families(statuses: list[tuple[str, dict]]):
    """Per result sink (query, sink name): its delivery counters and its backlog."""
    fams = {k: CounterMetricFamily(name, text, labels=["query", "sink"]) for k, (name, text) in _SINK_COUNTERS.items()}
    backlog = GaugeMetricFamily("jindou_sink_backlog", "Windows retained in the query's log that the sink "
                                "has not delivered yet", labels=["query", "sink"])
    for query, st in statuses:
        labels = [query, st["name"]]
        for key, fam in fams.items():
            if _num(st, key) is not None:
                fam.add_metric(labels, st[key])
        if _num(st, "backlog") is not None:
            backlog.add_metric(labels, st["backlog"])
    yield from fams.values()
    yield backlog


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
        "processes": processes_of(state),
        "pipelines": pipelines_of(state),
    }


def processes_of(state: ServerState) -> list[dict]:
    """The serving processes of ``--processes N`` (server/processes.py; empty with one)."""
    ps = getattr(getattr(state.db, "store", None), "processes_status", None)
    return ps() if ps is not None else []


def workers_of(state: ServerState) -> list[dict]:
    """The store's workers (empty when the store lives in this process)."""
    ws = getattr(getattr(state.db, "store", None), "workers_status", None)
    return ws() if ws is not None else []


# -- /docs: Swagger UI served from this server (no CDN: it works offline) ------------------------
#: Swagger UI's distribution files, shipped by the fastapi-offline package (pinned in pyproject.toml)
_DOCS_ASSETS = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8", "swagger-ui.css": "text/css; charset=utf-8",
                "favicon.png": "image/png"}
DOCS_ASSET_PREFIX = "/docs/assets/"


def docs_assets_dir() -> Path:
    return Path(str(importlib.resources.files("fastapi_offline") / "static"))


@router.get("/docs", include_in_schema=False)
async def docs(request: Request) -> Response:
    """Swagger UI for /openapi.json, every asset from this server."""
    return get_swagger_ui_html(openapi_url=request.app.openapi_url or "/openapi.json", title="Jindou API",
                               swagger_js_url=DOCS_ASSET_PREFIX + "swagger-ui-bundle.js",
                               swagger_css_url=DOCS_ASSET_PREFIX + "swagger-ui.css",
                               swagger_favicon_url="/static/favicon.svg")


@router.get(DOCS_ASSET_PREFIX + "{name}", include_in_schema=False)
async def docs_asset(name: str, request: Request) -> Response:
    ctype = _DOCS_ASSETS.get(name)
    if ctype is None:
        return Response(orjson.dumps({"error": "not_found", "detail": f"no docs asset {name!r}"}), status_code=404,
                        media_type="application/json")
    return FileResponse(docs_assets_dir() / name, media_type=ctype, headers={"Cache-Control": "max-age=86400"})


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
    # off the event loop: the scrape reads the store and the stream registry under their locks
    body = await run_in_threadpool(generate_latest, m.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


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


# -- hooks for the SSE responses (server/api/queries.py): one line each there ------------------
def sse_opened(state: ServerState) -> None:
    if state.metrics is not None:
        state.metrics.sse_opened()


def sse_closed(state: ServerState) -> None:
    if state.metrics is not None:
        state.metrics.sse_closed()


def sse_cut_off(state: ServerState, pending: int) -> None:
    """A slow SSE client was cut off with ``pending`` events it had not been sent."""
    if state.metrics is not None:
        state.metrics.sse_client_cut_off(pending)
