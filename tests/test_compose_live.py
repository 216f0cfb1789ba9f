"""docker-compose.yml brought up for real: NATS, the Spark master and worker, two store workers,
the server and the ingestion pipeline, on a Docker engine without a bridge network or a registry
(see tests/support/compose_live.py). Readings published on NATS go through the Spark pipeline
into the server, where a continuous query joins them with static data held by the workers.

Needs a running engine (``.ci/run`` starts ``dockerd --bridge=none --iptables=false``), root for
debootstrap, and the compose ports free on 127.0.0.1. Builds take minutes the first time."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from tests.support.compose_live import engine_up, ensure_base_image, host_network_compose

pytestmark = pytest.mark.timeout(2700)   # image builds: minutes on a fresh machine

REPO = Path(__file__).resolve().parents[1]
# every port a service of docker-compose.yml listens on (the host network has no per-container ports)
PORTS = (8000, 7701, 7702, 4222, 8222, 7077, 8080, 8081)
SERVER = "http://127.0.0.1:8000"
EX = "http://example.org/iot/"
READINGS = 24
T0 = 1_700_000_000_000
ROOMS = {"s0": "kitchen", "s1": "kitchen", "s2": "hall"}


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _compose(project: str, file: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed (Debian package docker-compose; .ci/run installs it)"
    return subprocess.run([exe, "-p", project, "-f", str(file), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def _wait(pred, timeout: float, what: str, every: float = 1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            got = pred()
        except (OSError, httpx.HTTPError):
            got = None
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _ready() -> bool:
    with urllib.request.urlopen(f"{SERVER}/readyz", timeout=5) as r:
        return r.status == 200


async def _publish(readings: list[tuple[str, int, float, float]]) -> None:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        js = nc.jetstream()
        await js.add_stream(name="SENSORS", subjects=["sensors.>"])
        for sensor, t, temp, hum in readings:
            await js.publish(f"sensors.{ROOMS[sensor]}", f"{sensor},{t},{temp},{hum}".encode())
    finally:
        await nc.close()


def _room_counts(event_data: dict) -> dict[str, int]:
    rows = event_data["results"]["bindings"]
    return {r["room"]["value"]: int(r["n"]["value"]) for r in rows}


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    if not engine_up():
        pytest.skip("no Docker engine answers (.ci/run starts dockerd --bridge=none --iptables=false)")
    taken = [p for p in PORTS if _port_taken(p)]
    assert not taken, f"ports the compose services listen on are in use on 127.0.0.1: {taken}"
    ensure_base_image()
    doc = host_network_compose(yaml.safe_load((REPO / "docker-compose.yml").read_text()), REPO)
    file = tmp_path_factory.mktemp("compose") / "docker-compose.yml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    project = f"jindouci{os.getpid()}"
    try:
        r = _compose(project, file, "build", timeout=1800)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        r = _compose(project, file, "up", "-d", timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        try:
            _wait(_ready, 300, "the server's /readyz")
        except AssertionError:
            logs = _compose(project, file, "logs", "--tail", "40", timeout=120).stdout
            raise AssertionError(f"the topology did not become ready:\n{logs[-6000:]}") from None
        yield project, file
    finally:
        _compose(project, file, "down", "-v", "--remove-orphans", "-t", "20", timeout=600)


def test_records_flow_from_nats_through_spark_into_a_query(topology):
    project, file = topology
    status = orjson.loads(urllib.request.urlopen(f"{SERVER}/status", timeout=10).read())
    assert [w["state"] for w in status["workers"]] == ["up", "up"]

    # static data: which room each sensor is in, held by the two store workers
    ttl = "".join(f"<{EX}sensor/{s}> <{EX}room> \"{room}\" .\n" for s, room in ROOMS.items())
    req = urllib.request.Request(f"{SERVER}/store?default", data=ttl.encode(), method="POST",
                                 headers={"Content-Type": "application/n-triples"})
    assert urllib.request.urlopen(req, timeout=30).status in (200, 201, 204)
    status = orjson.loads(urllib.request.urlopen(f"{SERVER}/status", timeout=10).read())
    assert sum(w["triples"] for w in status["workers"]) > 0

    # the pipeline registers the stream when it starts; the query needs it
    _wait(lambda: urllib.request.urlopen(f"{SERVER}/streams/sensors", timeout=5).status == 200, 300,
          "the pipeline to register stream 'sensors'")
    query = f"""REGISTER QUERY rooms AS
        PREFIX sosa: <http://www.w3.org/ns/sosa/>
        SELECT ?room (COUNT(?o) AS ?n)
        FROM STREAM <{EX}stream/sensors> [RANGE 1h STEP 1s]
        FROM <urn:jindou:default>
        WHERE {{ ?o sosa:madeBySensor ?s . ?s <{EX}room> ?room }}
        GROUP BY ?room"""
    req = urllib.request.Request(f"{SERVER}/queries", data=query.encode(), method="POST",
                                 headers={"Content-Type": "application/sparql-query"})
    assert urllib.request.urlopen(req, timeout=30).status in (200, 201)

    sensors = sorted(ROOMS)
    readings = [(sensors[i % len(sensors)], T0 + 100 * i, 20 + i / 10, 40.0 + i) for i in range(READINGS)]
    # a last reading 5 s later moves event time past the instants that cover all the others
    readings.append((sensors[0], T0 + 100 * READINGS + 5000, 21.0, 41.0))
    asyncio.run(_publish(readings))
    expected = {}
    for sensor, *_ in readings[:-1]:
        expected[ROOMS[sensor]] = expected.get(ROOMS[sensor], 0) + 2   # temperature + humidity
    with_last = dict(expected, **{ROOMS[sensors[0]]: expected[ROOMS[sensors[0]]] + 2})

    seen: list[dict] = []

    def matched() -> bool:
        with httpx.stream("GET", f"{SERVER}/queries/rooms/results?from=0", timeout=httpx.Timeout(10, read=5)) as r:
            try:
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        data = orjson.loads(line[5:])
                        if "results" in data:
                            seen.append(_room_counts(data))
                            if seen[-1] in (expected, with_last):
                                return True
            except httpx.ReadTimeout:
                return False
        return False

    try:
        _wait(matched, 420, "a window with every reading, joined with the rooms", every=3)
    except AssertionError:
        logs = _compose(project, file, "logs", "--tail", "60", "pipeline", "jindou", timeout=120).stdout
        stream = urllib.request.urlopen(f"{SERVER}/streams/sensors", timeout=10).read().decode()
        raise AssertionError(f"windows seen: {seen[-5:]}\nstream: {stream}\nlogs:\n{logs[-6000:]}") from None
