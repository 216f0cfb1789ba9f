"""Dead letters: records that could not become triples, with the reason.

Written per micro-batch under a name derived from the batch id, so a batch that
Spark re-runs after a crash rewrites the same file (or re-publishes messages
with the same ``Nats-Msg-Id``, which JetStream deduplicates) instead of adding
copies. Each dead letter is one JSON object: pipeline, batch, stream, source,
rec (row / sequence number / line), reason, raw.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pyarrow as pa


def _lines(pipeline: str, batch: int, dead: pa.Table) -> list[bytes]:
    return [orjson.dumps(dict(r, pipeline=pipeline, batch=batch)) for r in dead.to_pylist()]


class FileDeadLetters:
    def __init__(self, directory: str):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def write(self, pipeline: str, batch: int, part: str, dead: pa.Table) -> str | None:
        if dead.num_rows == 0:
            return None
        path = self.dir / f"batch-{batch:09d}-{part}.ndjson"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b"\n".join(_lines(pipeline, batch, dead)) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return str(path)

    def close(self) -> None:
        pass


class JetStreamDeadLetters:
    """Publish each dead letter to a JetStream subject (the stream must capture it)."""

    def __init__(self, url: str, subject: str):
        self.url, self.subject = url, subject

    def write(self, pipeline: str, batch: int, part: str, dead: pa.Table) -> str | None:
        if dead.num_rows == 0:
            return None
        lines = _lines(pipeline, batch, dead)

        async def go():
            import nats

            nc = await nats.connect(self.url, connect_timeout=10)
            try:
                js = nc.jetstream()
                for i, line in enumerate(lines):
                    await js.publish(self.subject, line, headers={"Nats-Msg-Id": f"{pipeline}:{batch}:{part}:{i}"})
            finally:
                await nc.close()

        asyncio.run(go())
        return self.subject

    def close(self) -> None:
        pass


def make_sink(dead_letter: dict, default_url: str | None = None):
    if "path" in dead_letter:
        return FileDeadLetters(dead_letter["path"])
    return JetStreamDeadLetters(dead_letter.get("url") or default_url or "nats://127.0.0.1:4222",
                                dead_letter["subject"])
