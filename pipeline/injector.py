"""Delivery of a stream batch to Jindou's injectors: over HTTP, or in process.

Both take an Arrow table with columns ``s, p, o`` (N-Triples terms) and ``t`` (int64
ms) and a stable batch id; the server skips a batch id it has already applied to
that stream (answer ``"duplicate": true``), which is what makes a re-run of a
Spark micro-batch after a crash harmless. A busy server (502/503/504, e.g. the window
store is full), an unreachable one, and an answer cut short (the server died
mid-answer: ``IncompleteRead``, ``BadStatusLine``, a reset, a timeout) are retried
with backoff — safe for the POSTs thanks to the batch ids — for at most
``retry_for`` seconds in all, then :class:`InjectionError` fails the job (non-zero
exit), never a silent loss.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pyarrow as pa

ARROW_STREAM_TYPE = "application/vnd.apache.arrow.stream"
COLUMNS = ("s", "p", "o", "t")


class InjectionError(RuntimeError):
    """The server refused a batch for a reason a retry cannot fix (4xx)."""


def arrow_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def split_parts(table: pa.Table, max_bytes: int) -> list[tuple[int, int]]:
    """Row ranges of at most ~max_bytes of term text each (the server caps request bodies),
    cut where the timestamp changes when possible, so one element (the triples sharing a
    timestamp) stays in one request and is applied atomically. Deterministic: a replayed
    batch is cut the same way."""
    import numpy as np
    import pyarrow.compute as pc

    n = table.num_rows
    if n == 0:
        return []
    size = np.zeros(n, dtype=np.int64)
    for c in ("s", "p", "o"):
        size += pc.binary_length(table[c]).to_numpy(zero_copy_only=False).astype(np.int64) + 8
    cum = np.cumsum(size)
    if cum[-1] <= max_bytes:
        return [(0, n)]
    t = table["t"].to_numpy(zero_copy_only=False)
    boundary = np.flatnonzero(np.diff(t) != 0) + 1        # first row of a new timestamp
    parts, lo, base = [], 0, 0
    while lo < n:
        hi = int(np.searchsorted(cum, base + max_bytes, side="right"))
        if hi >= n:
            parts.append((lo, n))
            break
        hi = max(hi, lo + 1)
        j = int(np.searchsorted(boundary, hi, side="right")) - 1
        if j >= 0 and boundary[j] > lo:
            hi = int(boundary[j])
        parts.append((lo, hi))
        base = int(cum[hi - 1])
        lo = hi
    return parts


class HttpInjector:
    """POST /streams/{name} with an Arrow IPC body and a Batch-Id header."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 120.0,
                 retry_for: float = 600.0, max_request_bytes: int = 24 << 20):
        self.max_request_bytes = max_request_bytes
        self.base = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry_for = retry_for

    def _request(self, method: str, path: str, body: bytes | None = None, ctype: str | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, dict]:
        h = dict(headers or {})
        if ctype:
            h["Content-Type"] = ctype
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        start = time.monotonic()
        deadline = start + self.retry_for
        delay = 0.2
        attempts = 0
        while True:
            attempts += 1
            req = urllib.request.Request(self.base + path, data=body, method=method, headers=h)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    raw = r.read()
                    status = r.status
                try:
                    return status, (json.loads(raw) if raw else {})
                except ValueError as e:     # a body that is not the whole answer
                    raise http.client.IncompleteRead(raw) from e
            except urllib.error.HTTPError as e:
                try:
                    raw = e.read()
                except (http.client.HTTPException, OSError):
                    raw = b""
                try:
                    doc = json.loads(raw) if raw else {}
                except ValueError:
                    doc = {"detail": raw[:500].decode("utf-8", "replace")}
                if e.code in (502, 503, 504) and time.monotonic() < deadline:
                    wait = float(e.headers.get("Retry-After") or delay)
                    time.sleep(min(max(wait, delay), 5.0, max(0.0, deadline - time.monotonic())))
                    delay = min(delay * 2, 5.0)
                    continue
                if e.code in (502, 503, 504):
                    raise InjectionError(f"{method} {self.base}{path}: HTTP {e.code} for {self.retry_for:g} s "
                                         f"({attempts} attempts): {doc.get('detail', doc)}") from e
                return e.code, doc
            except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
                # refused/reset connections, timeouts, and answers cut short (IncompleteRead,
                # BadStatusLine/RemoteDisconnected): the request may or may not have been
                # applied; the batch id makes sending it again safe
                if time.monotonic() >= deadline:
                    raise InjectionError(f"{method} {self.base}{path}: no complete answer in {self.retry_for:g} s "
                                         f"({attempts} attempts); last error: {type(e).__name__}: {e}") from e
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 5.0)

    def ensure_stream(self, name: str, iri: str, absorb) -> None:
        code, doc = self._request("PUT", f"/streams/{urllib.parse.quote(name)}",
                                  json.dumps({"iri": iri, "absorb": absorb}).encode(), "application/json")
        if code not in (200, 201):
            raise InjectionError(f"registering stream {name!r}: HTTP {code}: {doc.get('detail', doc)}")

    def ingest(self, name: str, table: pa.Table, batch_id: str) -> dict:
        """One POST per part (see :func:`split_parts`); part k > 0 has the id ``<batch_id>#k``.
        The parts of a replayed batch are the same, so each is recognised on its own."""
        report = {"accepted": 0, "rejected": 0, "errors": [], "duplicate": True, "progress": None, "delivered": 0}
        for k, (lo, hi) in enumerate(split_parts(table, self.max_request_bytes)):
            part = table.slice(lo, hi - lo).select(list(COLUMNS))
            pid = batch_id if k == 0 else f"{batch_id}#{k}"
            code, doc = self._request("POST", f"/streams/{urllib.parse.quote(name)}", arrow_ipc(part),
                                      ARROW_STREAM_TYPE, {"Batch-Id": pid})
            if code not in (202, 207, 422):  # 207/422: some/all rows refused, reported in the body
                raise InjectionError(f"stream {name!r} batch {pid}: HTTP {code}: {doc.get('detail', doc)}")
            report["accepted"] += int(doc.get("accepted", 0))
            report["rejected"] += int(doc.get("rejected", 0))
            report["errors"] += [dict(e, line=int(e["line"]) + lo) for e in doc.get("errors") or []]
            report["duplicate"] = report["duplicate"] and bool(doc.get("duplicate"))
            # a duplicate part is one the server applied before (its first answer did not
            # reach us, or the job crashed before counting it): the server repeats what it
            # accepted then ("original"; a server without it: all its rows count)
            if doc.get("duplicate"):
                first = doc.get("original") or {}
                report["delivered"] += int(first.get("accepted", hi - lo))
            else:
                report["delivered"] += int(doc.get("accepted", 0))
            report["progress"] = doc.get("progress")
        return report

    def report(self, pipeline: str, doc: dict) -> None:
        """Progress for /status and /metrics; best effort (a lost report is replaced by the next)."""
        try:
            self._request("PUT", f"/pipelines/{urllib.parse.quote(pipeline)}", json.dumps(doc).encode(),
                          "application/json")
        except InjectionError:
            pass


class LocalInjector:
    """The pipeline runs inside the server process: straight into the StreamManager."""

    def __init__(self, manager, state=None):
        self.m = manager
        self.state = state

    def ensure_stream(self, name: str, iri: str, absorb) -> None:
        self.m.register_stream(name, iri, absorb)

    def ingest(self, name: str, table: pa.Table, batch_id: str) -> dict:
        from engine.stream.transient import TransientStoreFull

        delay = 0.2
        while True:
            try:
                return self.m.ingest_arrow(name, table.select(list(COLUMNS)), batch_id)
            except TransientStoreFull:   # backpressure: wait for the windows to move on
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def report(self, pipeline: str, doc: dict) -> None:
        if self.state is not None:
            self.state.__dict__.setdefault("pipelines", {})[pipeline] = dict(doc, updated=time.time())
