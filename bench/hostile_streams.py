"""Hostile continuous-query workloads through the real server (uvicorn on 127.0.0.1):

* ``memory STEPS``: 100 continuous queries (5 shapes, windows 1-4 s, some batched) over a stream of
  always-new subject IRIs (2,000 elements a step) and one query on another stream; prints the
  server process's RSS at the end and how long the other query's instants wait.
* ``slow N 0|1``: one query on stream b (RANGE 2s STEP 100ms) and, with 1, a slow but in-budget
  query on stream a (a FILTERed cross product of N new triples per 1 s tumbling window); prints
  how long b's instants wait after its progress POST (one evaluation thread: head-of-line).

Run from a neutral directory: ``cd /tmp && PYTHONPATH=<tree> python -m bench.hostile_streams memory 40``.
(The server runs in this process, so RSS is the server's plus a small client.)
"""

from __future__ import annotations

import resource
import statistics
import sys
import time

import httpx
import orjson

from tests.conftest import start_server

EX = "http://ex.org/"
H = {"Content-Type": "application/sparql-query"}
ND = {"Content-Type": "application/x-ndjson"}


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


def nd(rows) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in rows) + b"\n"


def _wait_instant(c, name: str, ev0: int, a: float) -> float:
    while c.get(f"/queries/{name}").json()["evaluated"] <= ev0 and time.monotonic() - a < 120:
        time.sleep(0.002)
    return (time.monotonic() - a) * 1000


def memory(steps: int) -> None:
    s = start_server()
    c = httpx.Client(base_url=s.url, timeout=300)
    try:
        c.put("/streams/a", json={"iri": EX + "a"})
        c.put("/streams/b", json={"iri": EX + "b"})
        for k in range(100):
            w = [f"?s <{EX}p{k % 7}> ?o", f"?s <{EX}p{k % 7}> ?o . ?s <{EX}p{(k + 1) % 7}> ?o2",
                 f"?s ?p ?o FILTER(?p = <{EX}p{k % 7}>)", f"?s <{EX}p{k % 7}> ?o OPTIONAL {{ ?o <{EX}p{(k + 2) % 7}> ?z }}",
                 f"?s <{EX}p{k % 7}> ?o"][k % 5]
            sel = "(COUNT(*) AS ?n)" if k % 3 == 0 else "*"
            q = (f"REGISTER QUERY q{k} AS SELECT {sel} FROM STREAM <{EX}a> [RANGE {1 + k % 4}s STEP {250 * (1 + k % 4)}ms] "
                 f"WHERE {{ {w} }}")
            assert c.post("/queries", content=q, headers=H).status_code == 201
        c.post("/queries", content=f"REGISTER QUERY good AS SELECT ?s ?o FROM STREAM <{EX}b> [RANGE 2s STEP 100ms] "
                                    f"WHERE {{ ?s <{EX}r> ?o }}", headers=H)
        r0 = rss()
        waits = []
        t0 = time.monotonic()
        for k in range(1, steps):
            t = 1000 * k
            rows = [{"s": f"<{EX}s{k}_{i}>", "p": f"<{EX}p{i % 7}>", "o": f'"{i % 100}"', "t": t - 900 + i // 3}
                    for i in range(2000)]
            assert c.post("/streams/a", content=nd(rows), headers=ND).status_code == 202
            c.post(f"/streams/a/progress?t={t}")
            c.post("/streams/b", content=nd([{"s": f"<{EX}x{k}>", "p": f"<{EX}r>", "o": '"1"', "t": t}]), headers=ND)
            ev0 = c.get("/queries/good").json()["evaluated"]
            a = time.monotonic()
            c.post(f"/streams/b/progress?t={t + 150}")
            waits.append(_wait_instant(c, "good", ev0, a))
        errs = sum(c.get(f"/queries/q{k}").json().get("errors", 0) for k in range(100))
        print(f"steps {len(waits)} rss start {r0} end {rss()} MB maxrss "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB other query's wait median "
              f"{statistics.median(waits):.0f} ms, {time.monotonic() - t0:.1f} s, errors {errs}, load "
              f"{open('/proc/loadavg').read().split()[:3]}")
    finally:
        c.close()
        s.stop()


def slow(n: int, with_slow: bool) -> None:
    s = start_server()
    c = httpx.Client(base_url=s.url, timeout=120)
    try:
        c.put("/streams/a", json={"iri": EX + "a"})
        c.put("/streams/b", json={"iri": EX + "b"})
        bad = (f"REGISTER QUERY bad AS SELECT * FROM STREAM <{EX}a> [RANGE 1s STEP 1s] WHERE "
               f"{{ ?a <{EX}p> ?b . ?c <{EX}q> ?d FILTER(STR(?b) = STR(?d)) }}")
        if with_slow:
            assert c.post("/queries", content=bad, headers=H).status_code == 201
        c.post("/queries", content=f"REGISTER QUERY good AS SELECT ?s ?o FROM STREAM <{EX}b> [RANGE 2s STEP 100ms] "
                                    f"WHERE {{ ?s <{EX}r> ?o }}", headers=H)
        waits, lat = [], []
        for k in range(1, 40):
            t = 1000 * k
            rows = [{"s": f"<{EX}s{k}_{i}>", "p": f"<{EX}{'p' if i % 2 else 'q'}>", "o": f'"{i}"', "t": t - 500}
                    for i in range(n)]
            c.post("/streams/a", content=nd(rows), headers=ND)
            c.post(f"/streams/a/progress?t={t}")
            c.post("/streams/b", content=nd([{"s": f"<{EX}x{k}>", "p": f"<{EX}r>", "o": '"1"', "t": t}]), headers=ND)
            ev0 = c.get("/queries/good").json()["evaluated"]
            a = time.monotonic()
            c.post(f"/streams/b/progress?t={t + 150}")
            waits.append(_wait_instant(c, "good", ev0, a))
            if with_slow:
                lat.append(c.get("/queries/bad").json()["last_latency_ms"] or 0.0)
            time.sleep(0.05)
            if sum(waits) > 20000:
                break
        print(f"other query's wait: median {statistics.median(waits):.0f} ms, max {max(waits):.0f} ms, n {len(waits)}"
              + (f"; slow query's latency median {statistics.median(lat):.0f} ms" if with_slow else "")
              + f"; load {open('/proc/loadavg').read().split()[:3]}")
    finally:
        c.close()
        s.stop()


if __name__ == "__main__":
    if sys.argv[1] == "memory":
        memory(int(sys.argv[2]) if len(sys.argv) > 2 else 40)
    else:
        slow(int(sys.argv[2]) if len(sys.argv) > 2 else 3000, len(sys.argv) > 3 and sys.argv[3] == "1")
