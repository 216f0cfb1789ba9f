"""The live part of ``jindou serve --demo``: a sensor stream, a registered
continuous query and a feeder that sends readings every 0.5 s.

* stream ``sensors`` = ``<http://jindou.example/city/stream/sensors>`` (event time);
* query ``demo``: per observed property, the number and average of the
  readings in the last 10 s (the window, ``GRAPH <stream iri>``), every 2 s,
  labelled from the stored city data (``FROM <urn:jindou:default>``);
* the feeder posts a few observations (with ``t`` = the wall clock in ms) of
  random sensors of the demo city into the stream, through the same ndjson
  ingestion path ``POST /streams/sensors`` uses.

Results appear at ``GET /queries/demo/results`` within a few seconds of start.
The feeder runs as an asyncio task between the app's lifespan start and stop;
the engine calls run in the thread pool.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from datetime import UTC, datetime

import orjson

from server.demo import DEMO_DATA, DEMO_NS

log = logging.getLogger("jindou.demo")

STREAM_NAME = "sensors"
STREAM_IRI = DEMO_NS + "stream/sensors"
QUERY_NAME = "demo"
INTERVAL = 0.5

SOSA = "http://www.w3.org/ns/sosa/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
XSD = "http://www.w3.org/2001/XMLSchema#"

DEMO_QUERY = f"""PREFIX city: <{DEMO_NS}>
PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>
PREFIX sosa: <{SOSA}>
REGISTER QUERY {QUERY_NAME} AS
SELECT ?property (COUNT(?obs) AS ?readings) (AVG(?value) AS ?average)
FROM STREAM <{STREAM_IRI}> [RANGE 10s STEP 2s]
FROM <urn:jindou:default>
WHERE {{
  GRAPH <{STREAM_IRI}> {{ ?obs sosa:observedProperty ?p ; sosa:hasSimpleResult ?value . }}
  ?p rdfs:label ?property .
}}
GROUP BY ?property
ORDER BY ?property
"""

#: sensor kind -> (observed property, low, high, integer values)
KINDS = {
    "Temperature": ("airTemperature", 2.0, 24.0, False),
    "AirQuality": ("pm25", 4.0, 60.0, False),
    "Noise": ("noiseLevel", 38.0, 85.0, False),
    "Traffic": ("vehicleCount", 0.0, 140.0, True),
}


def demo_sensors() -> list[tuple[str, str]]:
    """(sensor IRI, kind) of the sensors in the demo data."""
    text = DEMO_DATA.read_text(encoding="utf-8")
    out = [(DEMO_NS + m.group(1), m.group(2))
           for m in re.finditer(r"city:(sensor\d+) a city:(\w+)Sensor\b", text) if m.group(2) in KINDS]
    return out or [(DEMO_NS + "sensor001", "Noise")]


class DemoStream:
    """Registers the demo stream and query, then feeds the stream until stopped."""

    def __init__(self, manager, interval: float = INTERVAL, per_tick: int = 3, seed: int | None = None):
        self.manager = manager
        self.interval = interval
        self.per_tick = per_tick
        self.rng = random.Random(seed)
        self.sensors = demo_sensors()
        self.level = {iri: self.rng.random() for iri, _ in self.sensors}
        self.task: asyncio.Task | None = None
        self.last_t = 0

    def setup(self) -> None:
        """Register the stream and the query (idempotent)."""
        self.manager.register_stream(STREAM_NAME, STREAM_IRI, "none", "event")
        try:
            self.manager.query(QUERY_NAME)
        except KeyError:
            self.manager.register_query(DEMO_QUERY)

    def batch(self, t: int) -> bytes:
        """ndjson lines: ``per_tick`` observations of random sensors at time ``t``."""
        stamp = datetime.fromtimestamp(t / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        lines = []
        for iri, kind in self.rng.sample(self.sensors, min(self.per_tick, len(self.sensors))):
            prop, lo, hi, integer = KINDS[kind]
            lvl = min(1.0, max(0.0, self.level[iri] + self.rng.uniform(-0.08, 0.08)))
            self.level[iri] = lvl
            v = lo + (hi - lo) * lvl
            lit = f'"{round(v)}"^^<{XSD}integer>' if integer else f'"{v:.1f}"^^<{XSD}decimal>'
            obs = f"<{DEMO_NS}live/{iri.rsplit('/', 1)[-1]}/{t}>"
            for p, o in ((RDF_TYPE, f"<{SOSA}Observation>"), (SOSA + "madeBySensor", f"<{iri}>"),
                         (SOSA + "observedProperty", f"<{DEMO_NS}{prop}>"), (SOSA + "hasSimpleResult", lit),
                         (SOSA + "resultTime", f'"{stamp}"^^<{XSD}dateTime>')):
                lines.append(orjson.dumps({"s": obs, "p": f"<{p}>", "o": o, "t": t}))
        return b"\n".join(lines) + b"\n"

    def tick(self) -> dict:
        t = max(time.time_ns() // 1_000_000, self.last_t + 1)
        self.last_t = t
        return self.manager.ingest_ndjson(STREAM_NAME, self.batch(t))

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self.setup)
        except Exception:
            log.exception("cannot register the demo stream / query")
            return
        self.task = asyncio.get_running_loop().create_task(self._run(), name="jindou-demo-feeder")
        log.info("demo stream %r fed every %.1fs; results at /queries/%s/results", STREAM_NAME, self.interval,
                 QUERY_NAME)

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.tick)
            except asyncio.CancelledError:
                raise
            except KeyError:
                return  # the user deleted the demo stream
            except Exception:
                log.exception("demo feeder")
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except BaseException:
                pass
            self.task = None
