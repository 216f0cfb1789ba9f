"""Dead letters: records that could not become triples, with the reason.

Written per micro-batch under a name derived from the run identity (kept in the
checkpoint) and the batch id, so a batch that Spark re-runs after a crash rewrites
the same file (or re-publishes messages with the same ``Nats-Msg-Id``, which
JetStream deduplicates) instead of adding copies, while a run on a new checkpoint
(whose batch ids start again at 0) neither overwrites nor is deduplicated against
an earlier run's. Each dead letter is one JSON object: pipeline, run, batch,
stream, source, rec (row / sequence number / line), reason, raw.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pyarrow as pa


def _lines(pipeline: str, run: str, batch: int, dead: pa.Table) -> list[bytes]:
    return [orjson.dumps(dict(r, pipeline=pipeline, run=run, batch=batch)) for r in dead.to_pylist()]


class FileDeadLetters:
    def __init__(self, directory: str, run: str = ""):
        self.dir = Path(directory)
        self.run = run
        self.dir.mkdir(parents=True, exist_ok=True)

    def write(self, pipeline: str, batch: int, part: str, dead: pa.Table) -> str | None:
        if dead.num_rows == 0:
            return None
        run = f"{self.run}-" if self.run else ""
        path = self.dir / f"batch-{run}{batch:09d}-{part}.ndjson"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b"\n".join(_lines(pipeline, self.run, batch, dead)) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return str(path)

    def close(self) -> None:
        pass


class JetStreamDeadLetters:
    """Publish each dead letter to a JetStream subject (the stream must capture it)."""

    def __init__(self, url: str, subject: str, run: str = ""):
        self.url, self.subject, self.run = url, subject, run

    def write(self, pipeline: str, batch: int, part: str, dead: pa.Table) -> str | None:
        if dead.num_rows == 0:
            return None
        lines = _lines(pipeline, self.run, batch, dead)
        run = f"{self.run}:" if self.run else ""

        async def go():
            import nats

            nc = await nats.connect(self.url, connect_timeout=10)
            try:
                js = nc.jetstream()
                for i, line in enumerate(lines):
                    await js.publish(self.subject, line, headers={"Nats-Msg-Id": f"{pipeline}:{run}{batch}:{part}:{i}"})
            finally:
                await nc.close()

        asyncio.run(go())
        return self.subject

    def close(self) -> None:
        pass


def make_sink(dead_letter: dict, default_url: str | None = None, run: str = ""):
    if "path" in dead_letter:
        return FileDeadLetters(dead_letter["path"], run)
    return JetStreamDeadLetters(dead_letter.get("url") or default_url or "nats://127.0.0.1:4222",
                                dead_letter["subject"], run)
