"""Retries that cannot lose data: the HTTP injector against a real server behind a peer
that cuts answers short (the server applied the request, the answer never arrives
whole), and the JetStream range read when fetches time out."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time

import pyarrow as pa
import pytest

from pipeline.injector import HttpInjector, InjectionError
from tests.pipeline_support import REPO, CuttingProxy, Nats, Server, pipeline_cmd

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("retry"))
    yield s
    s.stop()


def _table(n: int, t0: int, tag: str) -> pa.Table:
    return pa.table({"s": [f"<http://ex.org/{tag}/{i}>" for i in range(n)], "p": ["<http://ex.org/p>"] * n,
                     "o": [f'"{i}"' for i in range(n)], "t": pa.array([t0 + i for i in range(n)], pa.int64())})


def _batch_ids(proxy) -> list[str]:
    return [next(v for k, v in h.items() if k.lower() == "batch-id") for m, _p, h in proxy.seen if m == "POST"]


@pytest.mark.parametrize("modes", [["body"], ["status"], ["garbage"], ["body", "status", "garbage"]])
def test_answers_cut_short_are_retried_and_counted_once(server, modes):
    stream = "retry_" + "_".join(modes)
    proxy = CuttingProxy(server.url, lambda m, p, n: modes[n - 1] if m == "POST" and n <= len(modes) else None)
    try:
        inj = HttpInjector(proxy.url, retry_for=120)
        inj.ensure_stream(stream, f"http://ex.org/{stream}", "all")
        rep = inj.ingest(stream, _table(50, 1_000, stream), f"t:run:0:{stream}")
    finally:
        proxy.stop()
    # the first attempt reached the server; its retries carry the same id and are recognised
    assert _batch_ids(proxy) == [f"t:run:0:{stream}"] * (len(modes) + 1)
    assert server.streams()[stream]["accepted"] == 50
    assert rep["duplicate"] is True and rep["delivered"] == 50     # delivered once, counted once


def test_an_answer_always_cut_short_is_a_clear_failure_within_the_bound(server):
    proxy = CuttingProxy(server.url, lambda m, p, n: "body" if m == "POST" else None)
    try:
        inj = HttpInjector(proxy.url, retry_for=3)
        inj.ensure_stream("retry_fail", "http://ex.org/retry_fail", "all")
        t = time.monotonic()
        with pytest.raises(InjectionError, match="no complete answer in 3 s .*IncompleteRead"):
            inj.ingest("retry_fail", _table(10, 1_000, "f"), "t:run:0:retry_fail")
        assert time.monotonic() - t < 3 + 60          # bounded (generous for a loaded machine)
        assert len(_batch_ids(proxy)) >= 2            # it did retry
    finally:
        proxy.stop()


def test_job_fails_with_nonzero_exit_when_the_server_never_answers_whole(server, tmp_path):
    """The whole job: a micro-batch whose delivery keeps being cut short ends the run with
    exit status 1 and a message, after --retry-for seconds."""
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.nt").write_text("".join(f"<http://ex.org/j/{i}> <http://ex.org/p> \"{i}\" {5000 + i} .\n"
                                      for i in range(10)))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "cut", "source": {"kind": "files", "path": str(inp)}, "checkpoint": str(tmp_path / "ck"),
        "dead_letter": {"path": str(tmp_path / "dead")},
        "mappings": [{"stream": "retry_job", "stream_iri": "http://ex.org/retry_job", "absorb": "all",
                      "format": "ntriples"}]}))
    proxy = CuttingProxy(server.url, lambda m, p, n: "status" if m == "POST" else None)
    try:
        r = subprocess.run(pipeline_cmd(spec, proxy.url, "--once", "--retry-for", "3"), cwd=REPO,
                           capture_output=True, text=True, timeout=500)
    finally:
        proxy.stop()
    assert r.returncode == 1, r.stderr[-3000:]
    assert "no complete answer in 3 s" in r.stderr and "RemoteDisconnected" in r.stderr
    assert "cut failed" in r.stderr


# ------------------------------------------------------------------ JetStream
async def _publish(url, msgs, create=False):
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    if create:
        await js.add_stream(name="SLOW", subjects=["slow.>", "other.>"])
    for subject, payload in msgs:
        await js.publish(subject, payload)
    last = (await js.stream_info("SLOW")).state.last_seq
    await nc.close()
    return last


def test_jetstream_range_read_outlasts_fetch_timeouts(tmp_path):
    """The planned range 1..N is published in groups with pauses longer than the fetch
    timeout: every fetch in a pause times out, and the read must still return the whole
    range (and stop at its end, which is a message of another subject)."""
    from pipeline.jetstream import _read_range

    nats = Nats(tmp_path)
    try:
        groups = [[(f"slow.{k}", f"m{k}-{i}".encode()) for i in range(40)] + [("other.x", b"skip")]
                  for k in range(4)]
        n = sum(len(g) for g in groups)
        asyncio.run(_publish(nats.url, groups[0], create=True))

        def slow_publisher():
            for g in groups[1:]:
                time.sleep(1.0)                # 5 fetch timeouts per pause
                asyncio.run(_publish(nats.url, g))

        th = threading.Thread(target=slow_publisher)
        th.start()
        try:
            out = asyncio.run(_read_range(nats.url, "SLOW", ["slow.>"], 1, n, fetch_timeout=0.2, stall_timeout=60))
        finally:
            th.join(60)
        t = pa.Table.from_batches(out)
        want = [(s, p.decode()) for g in groups for s, p in g if s.startswith("slow.")]
        assert list(zip(t["subject"].to_pylist(), t["data"].to_pylist(), strict=True)) == want
        assert t["seq"].to_pylist() == [k * 41 + i + 1 for k in range(4) for i in range(40)]

        # a range whose end never arrives is a clear error after the stall timeout, not a short read
        with pytest.raises(RuntimeError, match=r"150\.\.169 of stream 'SLOW': no message for 3 s after sequence"):
            asyncio.run(_read_range(nats.url, "SLOW", ["slow.>"], 150, n + 5, fetch_timeout=0.2, stall_timeout=3))
    finally:
        nats.stop()
