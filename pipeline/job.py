"""The Spark Structured Streaming job: source -> Adaptor (parse, map, validate in the
executors) -> Dispatcher (per stream, in event-time order) -> Injector, exactly once.

* **Source**: a directory (``text`` source, ``wholetext``: one row per file, so a
  CSV header and the per-file quirks stay with their rows; ``maxFilesPerTrigger``),
  a TCP socket (one row per line) or NATS JetStream (:mod:`pipeline.jetstream`,
  one row per message; ``maxRecordsPerTrigger``).
* **Adaptor**: ``mapInArrow`` runs :func:`pipeline.mapping.map_chunk` in the Python
  workers, in parallel over partitions; its output rows are triples (with their
  stream, event time and timing/timeless mark), dead letters and filter counts.
* **Dispatcher + Injector** (``foreachBatch``, in the driver): the batch comes back
  as Arrow (``toArrow``), is split by stream and ordered by event time (a stream's
  progress only moves forward, so each stream batch goes out sorted), and each
  stream batch is sent as one Arrow table with the stable id
  ``<pipeline>:<run>:<spark batch id>:<stream>`` (``run``: :func:`run_identity`).
  The split by shard happens in the server's injector, which is where the shard
  key (the dictionary id) exists. Upload runs in a thread behind Spark, overlapping
  the mapping of the next batch (:class:`BatchWriter`, :class:`Spool`).
* **Exactly once**: Spark's checkpoint replays an unfinished micro-batch with the
  same batch id and the same input, and a batch Spark committed before its upload
  finished is in the spool; the server skips stream batches whose id it has
  applied; dead letters are written under the run and batch id (idempotent); the
  counters in ``<checkpoint>/jindou-metrics.json`` advance once per batch id.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.mapping import DEAD, load_tables, map_chunk
from pipeline.spec import Spec, parse_spec

#: What the executors send back: one row per (chunk, stream) holding an Arrow IPC stream of
#: its triples (kind "t") or dead letters ("d"), or a count of filtered records ("f").
#: Spark moves a few large binary values instead of converting every triple to and from
#: its row format, which is what bounded throughput when each triple was a Spark row.
OUT_SCHEMA = "kind string, stream string, n long, payload binary"
_OUT = pa.schema([("kind", pa.string()), ("stream", pa.string()), ("n", pa.int64()), ("payload", pa.binary())])
_LINE_BITS = 16           # rec of a line = message/row id << 16 | line index within the message


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def _out(kind: str, stream: str | None, n: int, table: pa.Table | None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"kind": [kind], "stream": [stream], "n": [n],
                                       "payload": [None if table is None else _ipc(table)]}, schema=_OUT)


def _compact(trip: pa.Table) -> pa.Table:
    """A chunk's triples in event-time order (stable: a record's triples keep their order),
    with the per-chunk constant columns dictionary-encoded: the driver then merges sorted
    runs, and the stream and source names are not repeated per triple."""
    trip = trip.take(pc.sort_indices(trip["t"]))
    return trip.set_column(0, "stream", pc.dictionary_encode(trip["stream"])).set_column(
        6, "source", pc.dictionary_encode(trip["source"]))


def _read_ipc(payloads: list[bytes], schema: pa.Schema) -> pa.Table:
    tabs = [pa.ipc.open_stream(pa.py_buffer(p)).read_all() for p in payloads if p]
    return pa.concat_tables(tabs) if tabs else schema.empty_table()


def make_mapper(spec_doc: dict, base_dir: str, tables_ipc: dict[str, bytes], line_mode: bool):
    """The function given to ``mapInArrow``. It carries the spec as a document and the
    lookup tables as Arrow IPC bytes, so executors on other hosts need neither file."""
    cache: dict = {}

    def setup():
        if "spec" not in cache:
            cache["spec"] = parse_spec(spec_doc, base_dir)
            tabs = {}
            for name, raw in tables_ipc.items():
                t = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
                key = cache["spec"].tables[name]["key"]
                tabs[name] = {"keys": t[key].combine_chunks(), "cols": {c: t[c].combine_chunks()
                                                                        for c in t.column_names}}
            cache["tables"] = tabs
        return cache["spec"], cache["tables"]

    def chunks(batch: pa.RecordBatch, base: int):
        """(source, data bytes, rec ids or None) per chunk. Rows without an id (socket lines)
        are numbered by their position in the partition, from ``base``."""
        src, data, rec = batch.column(0), batch.column(1), batch.column(2)
        if not line_mode:
            for s, d in zip(src.to_pylist(), data.to_pylist(), strict=True):
                yield s, (d or "").encode("utf-8"), None
            return
        parts = pc.split_pattern(pc.fill_null(data, ""), "\n")
        parent = pc.list_parent_indices(parts).to_numpy()
        lines = pc.utf8_rtrim(pc.list_flatten(parts), characters="\r")
        first = np.zeros(len(parts) + 1, dtype=np.int64)
        first[1:] = np.cumsum(pc.list_value_length(parts).to_numpy(zero_copy_only=False))
        intra = np.arange(len(lines), dtype=np.int64) - first[parent]
        ids = base + np.arange(len(rec), dtype=np.int64)
        if rec.null_count < len(rec):
            given = np.asarray(pc.is_valid(rec).to_numpy(zero_copy_only=False), dtype=bool)
            ids[given] = pc.fill_null(rec, 0).to_numpy(zero_copy_only=False).astype(np.int64)[given]
        recs = ids[parent]
        recs = (recs << _LINE_BITS) | intra
        nonempty = np.asarray(pc.not_equal(pc.utf8_trim_whitespace(lines), "").to_numpy(zero_copy_only=False),
                              dtype=bool)
        srcs = src.take(pa.array(parent)).filter(pa.array(nonempty))
        lines = lines.filter(pa.array(nonempty))
        recs = recs[nonempty]
        if len(lines) == 0:
            return
        enc = pc.dictionary_encode(srcs)
        codes = enc.indices.to_numpy(zero_copy_only=False)
        for k, s in enumerate(enc.dictionary.to_pylist()):
            sel = codes == k
            text = "\n".join(lines.filter(pa.array(sel)).to_pylist())
            yield s, text.encode("utf-8"), recs[sel]

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec, tables = setup()
        base = 0
        for batch in batches:
            base += batch.num_rows
            for source, data, recs in chunks(batch, base - batch.num_rows):
                m = spec.mapping_for(source)
                if m is None:
                    d = pa.table({"stream": [None], "source": [source], "rec": [-1],
                                  "reason": [f"no mapping matches source {source!r}"],
                                  "raw": [data[:2000].decode("utf-8", "replace")]}, schema=DEAD)
                    yield _out("d", None, 1, d)
                    continue
                trip, dead, filtered = map_chunk(m, data, source, tables, recs)
                if trip.num_rows:
                    yield _out("t", m.stream, trip.num_rows, _compact(trip))
                if dead.num_rows:
                    yield _out("d", m.stream, dead.num_rows, dead)
                if filtered:
                    yield _out("f", m.stream, filtered, None)

    return fn


# ------------------------------------------------------------------ driver side
RUN_ID_FILE = "jindou-run-id"


def run_identity(checkpoint: str) -> str:
    """The identity of the run that owns ``checkpoint``: a random id created with the
    checkpoint (before Spark writes anything into it) and kept inside it.

    Batch ids include it, so a restart from the same checkpoint replays a batch under the
    same id (the server skips what it applied: exactly once), while a new checkpoint, whose
    Spark batch numbers start again at 0, gets new ids instead of colliding with the ids a
    server's ledger keeps from an earlier run of the same pipeline. A checkpoint that Spark
    used before run ids existed keeps the old ids (empty identity) so its replay still matches."""
    d = Path(checkpoint)
    p = d / RUN_ID_FILE
    if p.is_file():
        rid = p.read_text().strip()
        if rid:
            return rid
    if (d / "offsets").is_dir() and any((d / "offsets").iterdir()):
        return ""
    rid = uuid.uuid4().hex[:16]
    d.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(RUN_ID_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(rid + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
    return rid


def stream_batch_id(pipeline: str, run: str, batch_id: int, stream: str) -> str:
    return f"{pipeline}:{run}:{batch_id}:{stream}" if run else f"{pipeline}:{batch_id}:{stream}"


class Counters:
    """Cumulative counters of a pipeline, advanced once per Spark batch id (after every
    stream batch of it was delivered) and kept in the checkpoint directory, so a restarted
    job neither loses nor double counts."""

    KEYS = ("batches", "triples", "timeless_triples", "dead_letters", "filtered", "rejected",
            "duplicate_batches", "stream_batches")

    def __init__(self, checkpoint: str):
        self.path = Path(checkpoint) / "jindou-metrics.json"
        self.doc = {"last_batch": -1, **{k: 0 for k in self.KEYS}}
        if self.path.is_file():
            self.doc.update(json.loads(self.path.read_text()))

    def done(self, batch_id: int) -> bool:
        return batch_id <= self.doc["last_batch"]

    def apply(self, batch_id: int, delta: dict) -> bool:
        if self.done(batch_id):
            return False
        for k, v in delta.items():
            self.doc[k] = self.doc.get(k, 0) + v
        self.doc["last_batch"] = batch_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc))
        os.replace(tmp, self.path)
        return True


class _Prepared:
    """A micro-batch ready for delivery: per stream, its triples in event-time order."""

    def __init__(self, batch_id: int, streams: dict[str, pa.Table], meta: dict):
        self.batch_id, self.streams, self.meta = batch_id, streams, meta


class Spool:
    """Micro-batches handed over by Spark but not yet delivered, under ``<checkpoint>/jindou-spool``.

    Delivery runs behind Spark (the upload of batch k overlaps the mapping of batch k+1), so
    Spark commits batch k before it is in the server. The batch is written here first: after
    a crash the restarted job delivers what is spooled (same batch ids: a part that did
    arrive is skipped by the server) before Spark goes on. Same durability as Spark's own
    local checkpoint files (a process crash, not a power loss)."""

    def __init__(self, checkpoint: str):
        self.dir = Path(checkpoint) / "jindou-spool"

    def _path(self, batch_id: int) -> Path:
        return self.dir / f"{batch_id:012d}"

    def put(self, b: _Prepared) -> None:
        final = self._path(b.batch_id)
        tmp = final.with_name(final.name + ".tmp")
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        names = sorted(b.streams)
        for k, name in enumerate(names):
            t = b.streams[name].unify_dictionaries()    # chunks of different files: one dictionary a column
            with pa.OSFile(str(tmp / f"{k}.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
                w.write_table(t)
        (tmp / "meta.json").write_text(json.dumps(dict(b.meta, streams=names)))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)

    def get(self, batch_id: int) -> _Prepared:
        d = self._path(batch_id)
        meta = json.loads((d / "meta.json").read_text())
        streams = {}
        for k, name in enumerate(meta.pop("streams")):
            with pa.memory_map(str(d / f"{k}.arrow")) as f:
                streams[name] = pa.ipc.open_file(f).read_all()
        return _Prepared(batch_id, streams, meta)

    def pending(self) -> list[int]:
        """Spooled batch ids, oldest first (half-written ones are dropped: Spark re-runs them)."""
        if not self.dir.is_dir():
            return []
        out = []
        import shutil

        for p in self.dir.iterdir():
            if p.name.endswith(".tmp"):
                shutil.rmtree(p, ignore_errors=True)
            elif p.name.isdigit():
                out.append(int(p.name))
        return sorted(out)

    def drop(self, batch_id: int) -> None:
        import shutil

        shutil.rmtree(self._path(batch_id), ignore_errors=True)


class DeliveryFailed(RuntimeError):
    """A batch could not be delivered (the server refused it, or stayed unreachable)."""


class BatchWriter:
    """The ``foreachBatch`` function: collect one micro-batch (the executors map it), order
    it per stream, and deliver it.

    With ``upload_queue`` > 0 the delivery happens in a thread, behind Spark: the batch is
    spooled (:class:`Spool`) and queued (at most ``upload_queue`` batches wait; Spark blocks
    beyond that), and ``foreachBatch`` returns so Spark maps the next batch while this one
    is uploaded. One thread delivers batches in order, so each stream still receives its
    batches in time order. With 0, delivery happens inside ``foreachBatch``."""

    def __init__(self, spec: Spec, injector, dead_sink, counters: Counters, log=None, run_id: str = "",
                 upload_queue: int = 1):
        self.spec, self.injector, self.dead, self.counters = spec, injector, dead_sink, counters
        self.run_id = run_id
        self.log = log or (lambda *_: None)
        self.last: dict = {}
        self.history: list[tuple[int, float, int]] = []     # (batch, finished wall time, triples), last 1000
        self.lock = threading.Lock()
        self.upload_queue = max(0, int(upload_queue))
        self.spool = Spool(spec.checkpoint)
        self.error: BaseException | None = None
        self._q: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._inflight = 0

    # -- collecting (Spark's thread)
    def __call__(self, df, batch_id: int) -> None:
        self._raise_if_failed()
        t0 = time.perf_counter()
        tbl = df.toArrow()
        self.log(f"batch {batch_id}: mapped and collected in {time.perf_counter() - t0:.2f} s")
        if self.counters.done(batch_id):
            # a replay of a batch that was delivered and counted before a crash, whose
            # commit Spark did not record: nothing left to do
            self.log(f"batch {batch_id}: already delivered")
            return
        kind = tbl["kind"]
        tri = tbl.filter(pc.equal(kind, "t"))
        dead = _read_ipc(tbl.filter(pc.equal(kind, "d"))["payload"].to_pylist(), DEAD)
        filt = tbl.filter(pc.equal(kind, "f"))
        by_stream: dict[str, list[bytes]] = {}
        for name, payload in zip(tri["stream"].to_pylist(), tri["payload"].to_pylist(), strict=True):
            by_stream.setdefault(name, []).append(payload)
        streams = {}
        for name in sorted(by_stream):
            # the runs of the chunks, each already in time order, in the (deterministic)
            # order Spark returned them; a stable sort by time merges them
            sub = pa.concat_tables([pa.ipc.open_stream(pa.py_buffer(p)).read_all() for p in by_stream[name]])
            t = sub["t"].to_numpy()
            if len(t) > 1 and (np.diff(t) < 0).any():
                sub = sub.take(pc.sort_indices(sub["t"]))
            streams[name] = sub
        self.dead.write(self.spec.name, batch_id, "parse", dead)
        meta = {"chunks": tbl.num_rows, "dead_letters": dead.num_rows,
                "filtered": int(pc.sum(filt["n"]).as_py() or 0), "collect_s": round(time.perf_counter() - t0, 4)}
        b = _Prepared(batch_id, streams, meta)
        if self.upload_queue == 0:
            self.deliver(b)
            return
        self.spool.put(b)
        self._enqueue(b)

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise DeliveryFailed(f"pipeline {self.spec.name}: delivery failed: {self.error}") from self.error

    def _enqueue(self, b: _Prepared) -> None:
        if self._thread is None:
            self._q = queue.Queue(self.upload_queue)
            self._thread = threading.Thread(target=self._run, name="jindou-pipeline-upload", daemon=True)
            self._thread.start()
        with self._idle:
            self._inflight += 1
        while True:
            self._raise_if_failed()
            try:
                self._q.put(b, timeout=0.5)
                return
            except queue.Full:
                continue

    def _run(self) -> None:
        while True:
            b = self._q.get()
            if b is None:
                return
            try:
                if self.error is None:
                    self.deliver(b)
            except BaseException as e:      # kept and raised in Spark's thread: the query fails
                self.error = e
                self.log(f"batch {b.batch_id}: delivery failed: {e}")
            finally:
                with self._idle:
                    self._inflight -= 1
                    self._idle.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued batch is delivered (or delivery failed). True if idle."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._inflight > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(0.5 if left is None else min(left, 0.5))
        return True

    def close(self) -> None:
        if self._thread is not None:
            try:
                self._q.put(None, timeout=1)
                self._thread.join(5)
            except queue.Full:       # an upload still retrying: the daemon thread ends with the process
                pass
            self._thread = None

    def recover(self) -> None:
        """Deliver the batches a crashed run spooled but did not deliver, oldest first."""
        for bid in self.spool.pending():
            if not self.counters.done(bid):
                self.log(f"batch {bid}: delivering the spooled batch of an earlier run")
                self.deliver(self.spool.get(bid))
            self.spool.drop(bid)

    # -- delivery (the upload thread, or Spark's thread with upload_queue=0)
    def deliver(self, b: _Prepared) -> None:
        t0 = time.perf_counter()
        batch_id, meta = b.batch_id, b.meta
        if self.counters.done(batch_id):
            self.spool.drop(batch_id)
            return
        delta = {"batches": 1, "triples": 0, "timeless_triples": 0, "dead_letters": meta["dead_letters"],
                 "filtered": meta["filtered"], "rejected": 0, "duplicate_batches": 0, "stream_batches": 0}
        per_stream = {}
        n_triples = 0
        for name in sorted(b.streams):
            sub = b.streams[name]
            n_triples += sub.num_rows
            rep = self.injector.ingest(name, sub, stream_batch_id(self.spec.name, self.run_id, batch_id, name))
            delta["stream_batches"] += 1
            # A duplicate answer means the server applied this batch before (a replay after a
            # crash between delivery and the counters, or a retry whose first answer was lost):
            # it holds these triples, and they were never counted, since the counters advance
            # only after a whole batch is delivered. The server does not repeat its first
            # report, so a duplicate part counts its rows.
            delivered = rep.get("delivered")
            if delivered is None:
                delivered = sub.num_rows if rep.get("duplicate") else int(rep.get("accepted", 0))
            per_stream[name] = {"triples": sub.num_rows, "accepted": rep.get("accepted"),
                                "duplicate": bool(rep.get("duplicate"))}
            delta["triples"] += int(delivered)
            delta["timeless_triples"] += int(pc.sum(pc.cast(sub["timeless"], pa.int64())).as_py() or 0)
            if rep.get("duplicate"):
                delta["duplicate_batches"] += 1
                continue
            errs = rep.get("errors") or []
            if rep.get("rejected"):
                delta["rejected"] += int(rep["rejected"])
            if errs:
                ok = [e for e in errs if 0 < int(e.get("line", 0)) <= sub.num_rows]
                rows = sub.take(pa.array([int(e["line"]) - 1 for e in ok], pa.int64()))
                rej = pa.table({"stream": pc.cast(rows["stream"], pa.string()),
                                "source": pc.cast(rows["source"], pa.string()), "rec": rows["rec"],
                                "reason": pa.array([f"rejected by the server: {e['error']}" for e in ok], pa.string()),
                                "raw": pc.binary_join_element_wise(rows["s"], rows["p"], rows["o"], " ")},
                               schema=DEAD)
                self.dead.write(self.spec.name, batch_id, f"rejected-{name}", rej)
        _fault_point(batch_id)
        self.counters.apply(batch_id, delta)
        self.spool.drop(batch_id)
        deliver_s = time.perf_counter() - t0
        with self.lock:
            self.last = {"batch": batch_id, "chunks": meta["chunks"], "triples": n_triples,
                         "dead_letters": meta["dead_letters"], "collect_s": meta["collect_s"],
                         "deliver_s": round(deliver_s, 4), "wall_s": round(meta["collect_s"] + deliver_s, 4),
                         "streams": per_stream, "finished": time.time()}
            self.history = [*self.history[-999:], (batch_id, self.last["finished"], n_triples)]
        self.log(f"batch {batch_id}: {n_triples} triples to {len(per_stream)} stream(s), "
                 f"{meta['dead_letters']} dead letters, collect {meta['collect_s'] * 1000:.0f} ms, "
                 f"deliver {deliver_s * 1000:.0f} ms")


def _fault_point(batch_id: int) -> None:
    """Fault injection for the exactly-once tests: ``JINDOU_PIPELINE_FAULT=kill-after-deliver:N``
    SIGKILLs this process once batch N is in the store but before the counters advance
    (and, delivering inside the micro-batch, before Spark commits it): the moment where
    only the batch ids keep a replay from being applied twice."""
    fault = os.environ.get("JINDOU_PIPELINE_FAULT", "")
    if fault.startswith("kill-after-deliver:") and int(fault.split(":", 1)[1]) == batch_id:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _tables_ipc(spec: Spec) -> dict[str, bytes]:
    from pipeline.injector import arrow_ipc

    out = {}
    for name, t in load_tables(spec).items():
        out[name] = arrow_ipc(pa.table(t["cols"]))
    return out


def spark_session(master: str, app: str, conf: dict | None = None, warm: bool = True, log=None):
    """A SparkSession for the job (``local[*]`` or ``spark://host:7077`` alike); with
    ``warm``, ready for a first micro-batch without a cold start (:func:`warm_up`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", os.environ.get("JINDOU_SPARK_DRIVER_MEMORY", "2g"))
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
         .config("spark.sql.files.openCostInBytes", str(16 << 20))
         .config("spark.python.worker.reuse", "true"))
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from pipeline.jetstream import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)
    if not master.startswith("local"):
        _ship_package(spark)
    if warm:
        took = warm_up(spark, None, log)
        if log and took is not None:
            log(f"session warmed up in {took:.2f} s")
    return spark


def _ship_package(spark) -> None:
    """Executors on other hosts import ``pipeline`` from a zip the driver sends."""
    import shutil
    import tempfile

    root = Path(__file__).resolve().parent
    out = Path(tempfile.mkdtemp(prefix="jindou-pipeline-")) / "pipeline"
    zip_path = shutil.make_archive(str(out), "zip", root_dir=root.parent, base_dir="pipeline")
    spark.sparkContext.addPyFile(zip_path)


def input_frame(spark, spec: Spec):
    """(DataFrame of source, data, rec; line_mode)."""
    from pyspark.sql import functions as F

    src = spec.source
    if src.kind == "files":
        Path(src.path).mkdir(parents=True, exist_ok=True) if "://" not in src.path else None
        r = spark.readStream.format("text").option("wholetext", "true")
        if src.max_files_per_trigger:
            r = r.option("maxFilesPerTrigger", int(src.max_files_per_trigger))
        if src.glob:
            r = r.option("pathGlobFilter", src.glob)
        df = r.load(src.path)
        return df.select(F.col("_metadata.file_path").alias("source"), F.col("value").alias("data"),
                         F.lit(None).cast("long").alias("rec")), False
    if src.kind == "socket":
        df = spark.readStream.format("socket").option("host", src.host).option("port", src.port).load()
        tag = F.concat(F.lit(f"socket:{src.host}:{src.port}:"), F.unix_millis(F.current_timestamp()).cast("string"))
        # the batch's timestamp (kept in the offset log, so a replay sees the same) makes
        # the source name unique per batch; lines are numbered within it
        return df.select(tag.alias("source"), F.col("value").alias("data"),
                         F.lit(None).cast("long").alias("rec")), True
    r = (spark.readStream.format("jetstream").option("url", src.url).option("stream", src.stream)
         .option("partitions", src.partitions).option("fetchTimeout", src.fetch_timeout)
         .option("stallTimeout", src.stall_timeout))
    if src.subjects:
        r = r.option("subjects", ",".join(src.subjects))
    if src.max_records_per_trigger:
        r = r.option("maxRecordsPerTrigger", int(src.max_records_per_trigger))
    df = r.load()
    return df.select(F.col("subject").alias("source"), F.col("data"), F.col("seq").alias("rec")), True


def progress_doc(spec: Spec, query, writer: BatchWriter, counters: Counters, master: str, state: str) -> dict:
    lp = None
    try:
        p = query.lastProgress if query is not None else None
        if p:
            lp = {k: p.get(k) for k in ("batchId", "timestamp", "numInputRows", "inputRowsPerSecond",
                                        "processedRowsPerSecond", "durationMs")}
    except Exception:       # the query may be going away; progress is informational
        lp = None
    with writer.lock:
        last = dict(writer.last)
    return {"pipeline": spec.name, "state": state, "master": master, "source": spec.source.kind,
            "streams": sorted(spec.streams()), "counters": {k: counters.doc.get(k, 0) for k in Counters.KEYS},
            "last_batch": last, "spark_progress": lp, "pid": os.getpid()}


def _passthrough(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def warm_up(spark, mapper=None, log=None) -> float | None:
    """Pay the first job's cold start (the JVM's first planning, code generation and Arrow
    collection; the Python daemon; a Python worker per task slot importing pyarrow, numpy
    and the mapping code) with a tiny job, so the first micro-batch does not: with worker
    reuse on, the streaming tasks find the workers ready. A streaming task runs two Python
    stages (the JetStream reader, then the mapper), each in its own worker, so the job
    chains two. With ``mapper`` the second stage is the job's own mapper (spec and tables
    loaded). The output is discarded. Returns its duration, None if it failed (then the
    first batch just starts cold)."""
    t0 = time.perf_counter()
    try:
        n = max(1, int(spark.sparkContext.defaultParallelism))
        df = spark.range(0, n, 1, n).selectExpr("'jindou-warm-up' AS source", "'' AS data",
                                                 "CAST(NULL AS BIGINT) AS rec")
        df = df.mapInArrow(_passthrough, df.schema)
        (df.mapInArrow(_passthrough, df.schema) if mapper is None else df.mapInArrow(mapper, OUT_SCHEMA)).toArrow()
    except Exception as e:       # an optimisation only
        if log:
            log(f"warm-up failed ({e}); the first batch starts cold")
        return None
    return time.perf_counter() - t0


class Pipeline:
    """One running job. ``start()`` warms the workers, delivers what an earlier run left
    in the spool, and starts the query; ``stop()`` waits for the batch in flight and the
    uploads (bounded; what is left stays spooled for the next run), so SIGTERM never
    loses a batch Spark has committed."""

    def __init__(self, spec: Spec, spec_doc: dict, injector, *, master: str = "local[*]", once: bool = False,
                 log=None, spark_conf: dict | None = None, spark=None, upload_queue: int = 1, warm: bool = True):
        self.spec, self.spec_doc, self.injector = spec, spec_doc, injector
        self.master, self.once = master, once
        self.log = log or (lambda *_: None)
        self.spark_conf = spark_conf
        self.warm = warm
        self.query = None
        self.spark = spark
        self._own_spark = spark is None
        self.state = "starting"
        from pipeline.deadletter import make_sink

        self.run_id = run_identity(spec.checkpoint)
        self.counters = Counters(spec.checkpoint)
        self.writer = BatchWriter(spec, injector, make_sink(spec.dead_letter, spec.source.url, self.run_id),
                                  self.counters, self.log, run_id=self.run_id, upload_queue=upload_queue)
        self.warm_up_s: float | None = None

    def start(self) -> None:
        for name, m in self.spec.streams().items():
            self.injector.ensure_stream(name, m.stream_iri, m.absorb)
        if self.spark is None:
            self.spark = spark_session(self.master, f"jindou-pipeline-{self.spec.name}", self.spark_conf,
                                       warm=self.warm, log=self.log)
        df, line_mode = input_frame(self.spark, self.spec)
        mapper = make_mapper(self.spec_doc, self.spec.base_dir, _tables_ipc(self.spec), line_mode)
        if self.warm:
            # the session's start already paid the cold start (spark_session); this loads the
            # spec and tables in the warm workers (a fraction of a second)
            self.warm_up_s = warm_up(self.spark, mapper, self.log)
            self.log(f"warm-up: {self.warm_up_s if self.warm_up_s is not None else float('nan'):.2f} s")
        self.writer.recover()
        mapped = df.mapInArrow(mapper, OUT_SCHEMA)
        w = mapped.writeStream.foreachBatch(self.writer).option("checkpointLocation", self.spec.checkpoint)
        w = w.trigger(availableNow=True) if self.once else w.trigger(processingTime=f"{self.spec.trigger_ms} milliseconds")
        self.query = w.queryName(f"jindou_{self.spec.name}".replace("-", "_").replace(".", "_")).start()
        self.state = "running"
        self.report()

    def report(self) -> dict:
        doc = progress_doc(self.spec, self.query, self.writer, self.counters, self.master, self.state)
        self.injector.report(self.spec.name, doc)
        return doc

    def wait(self, stop: threading.Event, report_every: float = 1.0) -> int:
        """Until the query ends (or ``stop`` is set). Returns a process exit status."""
        last = None
        while True:
            if stop.is_set():
                self.stop()
                return 0
            try:
                done = self.query.awaitTermination(report_every)
            except Exception as e:       # StreamingQueryException: the batch function failed
                return self._failed(e)
            if self.writer.error is not None:
                return self._failed(self.writer.error)
            bid = self.writer.last.get("batch")
            if bid != last:
                last = bid
                self.report()
            if done:
                self.writer.drain()              # what Spark handed over is delivered
                if self.writer.error is not None:
                    return self._failed(self.writer.error)
                self.state = "finished"
                self.report()
                return 0

    def _failed(self, e: BaseException) -> int:
        self.state = "failed"
        self.log(f"pipeline {self.spec.name} failed: {e}")
        if self.query is not None and self.query.isActive:
            try:
                self.query.stop()
            except Exception:        # stopping a query that is failing anyway
                pass
        self.report()
        return 1

    def stop(self, grace: float = 60.0) -> None:
        if self.query is not None and self.query.isActive:
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                try:
                    if not self.query.status.get("isTriggerActive"):
                        break
                except Exception:
                    break
                time.sleep(0.1)
            self.query.stop()
        # batches Spark handed over are spooled: a drain cut short is finished by the next run
        self.writer.drain(grace)
        self.writer.close()
        if self.state in ("starting", "running"):
            self.state = "stopped"
        self.report()
        if self.spark is not None and self._own_spark:
            self.spark.stop()
            self.spark = None
