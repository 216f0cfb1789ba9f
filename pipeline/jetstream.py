"""NATS JetStream as a PySpark streaming data source (``format("jetstream")``).

Offsets are JetStream stream sequence numbers: ``{"seq": n}`` means every message
with sequence <= n has been handed to Spark. Spark keeps the offsets in its
checkpoint, so a restarted job asks for the range after the last committed batch
and reads it again from the (durable) stream: nothing needs acknowledging and no
durable consumer state lives in NATS. Each partition reads its sequence range
through a short-lived ephemeral pull consumer that starts at the range's first
sequence (``deliver_policy=by_start_sequence``).

Options: ``url`` (default nats://127.0.0.1:4222), ``stream`` (required),
``subjects`` (comma-separated filter, default all), ``maxRecordsPerTrigger``
(backpressure: sequence numbers per micro-batch), ``partitions`` (default 2),
``fetchTimeout`` (seconds one fetch waits, default 2; a timeout is not the end of a
range) and ``stallTimeout`` (seconds a partition may wait for a pending message
before its task fails, default 600).
Rows: ``subject`` string, ``seq`` long, ``data`` string (the UTF-8 payload).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

SCHEMA = "subject string, seq long, data string"
_ARROW = pa.schema([("subject", pa.string()), ("seq", pa.int64()), ("data", pa.string())])


def _run(coro):
    return asyncio.run(coro)


class _Planner:
    """One NATS connection for the offset calls of a running query (Spark asks for the
    latest offset at every trigger, so a connection per call would churn sockets), on an
    event loop in a daemon thread; reconnects after an error."""

    def __init__(self, url: str, stream: str):
        self.url, self.stream = url, stream
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="jetstream-offsets", daemon=True).start()
        self.nc = None

    async def _last(self) -> int:
        import nats

        if self.nc is None or not self.nc.is_connected:
            self.nc = await nats.connect(self.url, connect_timeout=10, max_reconnect_attempts=-1)
        info = await self.nc.jetstream().stream_info(self.stream)
        return int(info.state.last_seq or 0)

    def last_seq(self) -> int:
        fut = asyncio.run_coroutine_threadsafe(self._last(), self.loop)
        try:
            return fut.result(60)
        except Exception:
            fut.cancel()
            self.nc = None
            raise


class SeqRange(InputPartition):
    def __init__(self, lo: int, hi: int):      # inclusive
        super().__init__((lo, hi))
        self.lo, self.hi = lo, hi


async def _read_range(url: str, stream: str, subjects: list[str], lo: int, hi: int, fetch_timeout: float = 2.0,
                      stall_timeout: float = 600.0) -> list[pa.RecordBatch]:
    """Every message of sequences lo..hi (inclusive) that matches ``subjects``.

    A fetch that times out is not the end of the range: the server is asked whether
    messages matching the filter are still pending up to ``hi`` ("slow": fetch again)
    or not ("no more": done; the rest of the range is other subjects or deleted
    messages). Messages the server delivered that never arrived (a fetch that expired
    with them in flight; nothing is redelivered without acks) are read again through a
    new consumer from the first missing sequence. No new message for ``stall_timeout``
    seconds while some are pending is an error (the task fails), never a short read."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    from nats.js.errors import NotFoundError

    nc = await nats.connect(url, connect_timeout=10, max_reconnect_attempts=3)
    js = nc.jetstream()
    subj, seqs, data = [], [], []
    state = {"sub": None, "name": None, "received": 0}   # received: messages from this consumer

    async def close_consumer():
        sub, name = state["sub"], state["name"]
        state["sub"] = state["name"] = None
        if sub is not None:
            await sub.unsubscribe()
        if name:
            try:
                await nc.jsm().delete_consumer(stream, name)
            except NotFoundError:
                pass

    async def open_at(start: int):
        await close_consumer()
        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start,
                             ack_policy=AckPolicy.NONE, inactive_threshold=max(60.0, 4 * fetch_timeout),
                             mem_storage=True)
        if len(subjects) > 1:
            cfg.filter_subjects = subjects
        state["sub"] = await js.pull_subscribe(subjects[0] if len(subjects) == 1 else "", stream=stream,
                                               config=cfg)
        state["name"] = (await state["sub"].consumer_info()).name
        state["received"] = 0

    async def range_stored() -> bool:
        return int((await js.stream_info(stream)).state.last_seq or 0) >= hi

    got = lo - 1                       # the highest sequence handed over
    try:
        await open_at(lo)
        progress = time.monotonic()
        while got < hi:
            try:
                msgs = await state["sub"].fetch(batch=min(hi - got, 5000), timeout=fetch_timeout)
            except (TimeoutError, nats.errors.TimeoutError):
                msgs = []
            state["received"] += len(msgs)
            done = False
            for m in msgs:
                s = m.metadata.sequence.stream
                if s <= got:
                    continue             # already read (a re-opened consumer)
                if s > hi:
                    done = True
                    break
                subj.append(m.subject)
                seqs.append(s)
                data.append(m.data.decode("utf-8", "replace"))
                got = s
            if done or got >= hi:
                break
            if msgs:
                progress = time.monotonic()
                if msgs[-1].metadata.num_pending:
                    continue
            # nothing was pending when the last message left the server, or a fetch timed
            # out. Done only if the whole range is stored (first) and afterwards the
            # consumer has nothing pending and everything it delivered arrived: a
            # message's own count may predate the end of the range being stored.
            pending = "the range's end is not stored yet"
            if await range_stored():
                info = await state["sub"].consumer_info()
                sent = int(info.delivered.consumer_seq or 0) if info.delivered else 0
                if sent > state["received"]:      # delivered, but never reached us: read them again
                    await open_at(got + 1)
                elif not info.num_pending:
                    break                         # no more messages up to hi
                pending = f"{info.num_pending} pending"
            if time.monotonic() - progress > stall_timeout:
                raise RuntimeError(f"jetstream source: reading sequences {lo}..{hi} of stream {stream!r}: no "
                                   f"message for {stall_timeout:g} s after sequence {got} ({pending})")
    finally:
        try:
            await close_consumer()
        finally:
            await nc.close()
    if not seqs:
        return []
    return [pa.RecordBatch.from_arrays([pa.array(subj, pa.string()), pa.array(seqs, pa.int64()),
                                        pa.array(data, pa.string())], schema=_ARROW)]


class JetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict):
        options = {k.lower(): v for k, v in options.items()}      # Spark options are case-insensitive
        self.url = options.get("url", "nats://127.0.0.1:4222")
        self.stream = options["stream"]
        subs = options.get("subjects") or ""
        self.subjects = [s.strip() for s in subs.split(",") if s.strip()]
        self.max_rows = int(options["maxrecordspertrigger"]) if options.get("maxrecordspertrigger") else None
        self.n_partitions = max(1, int(options.get("partitions", 2)))
        self.fetch_timeout = float(options.get("fetchtimeout", 2.0))
        self.stall_timeout = float(options.get("stalltimeout", 600.0))
        self.target: int | None = None
        self._planner: _Planner | None = None
        self._cached: tuple[float, int] | None = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_planner"] = None          # the connection stays in the process that opened it
        return d

    def _last_seq(self) -> int:
        """The stream's last sequence number, polled at most every 20 ms."""
        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < 0.02:
            return self._cached[1]
        if self._planner is None:
            self._planner = _Planner(self.url, self.stream)
        last = self._planner.last_seq()
        self._cached = (now, last)
        return last

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._last_seq()

    def latestOffset(self, start: dict, limit) -> dict:
        last = self._last_seq() if self.target is None else self.target
        begin = int(start["seq"]) if start else 0
        if isinstance(limit, ReadMaxRows):
            last = min(last, begin + int(limit.max_rows))
        return {"seq": max(begin, last)}

    def reportLatestOffset(self):
        return {"seq": self._last_seq()}

    def partitions(self, start: dict, end: dict):
        lo, hi = int(start["seq"]) + 1, int(end["seq"])
        if hi < lo:
            return []
        n = min(self.n_partitions, hi - lo + 1)
        step = (hi - lo + 1 + n - 1) // n
        return [SeqRange(a, min(hi, a + step - 1)) for a in range(lo, hi + 1, step)]

    def read(self, partition: SeqRange):
        subjects = self.subjects or [">"]
        return iter(_run(_read_range(self.url, self.stream, subjects, partition.lo, partition.hi,
                                     self.fetch_timeout, self.stall_timeout)))

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: the committed offset lives in Spark's checkpoint."""

    def stop(self) -> None:
        p, self._planner = self._planner, None
        if p is not None and p.nc is not None:
            try:
                asyncio.run_coroutine_threadsafe(p.nc.close(), p.loop).result(10)
            except Exception:       # closing a broken connection: nothing left to release
                pass
            p.loop.call_soon_threadsafe(p.loop.stop)


class JetStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> JetStreamReader:
        if not self.options.get("stream"):
            raise ValueError("jetstream source: option 'stream' is required")
        return JetStreamReader(dict(self.options))
