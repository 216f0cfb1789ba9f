"""A light C client for the throughput phase: ``wrk`` cycling through the same request bytes.

``bench http-load``'s own client is Python threads (one interpreter lock, ~25 µs of
client CPU per query, about half a core on the 2-core machine): the cores it takes are
cores the server does not get. A user measuring with a C client (``wrk``, ``ab``,
``oha``) leaves the server more of the machine. :func:`throughput` runs ``wrk``
(an epoll loop in C, one keep-alive connection per client) over the very request bytes
of :func:`bench.http_load.throughput` (the same families, constants and unique texts),
and answers the same dict (queries/s, p50, p99, errors, client cores), so
``http-load --light-client`` can swap it in. ``wrk`` is a measuring tool, not a
dependency: without it on ``PATH`` the option says so and stops.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile

from bench import http_load

#: the Lua side: every wrk thread reads the request file (requests separated by NUL
#: bytes, which no request of ours holds) and hands them out round robin, starting at
#: its own offset; ``done`` prints one line the driver parses (no ``response``
#: callback: defining one makes wrk hand every answer to Lua, the cost we avoid)
LUA = r"""
local reqs, i = {}, 0
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
function init(args)
  local f = assert(io.open(args[1], "rb"))
  local data = f:read("*a")
  f:close()
  for r in string.gmatch(data, "([^%z]+)%z") do reqs[#reqs + 1] = r end
  i = ((id or 0) * 997) % #reqs
end
function request()
  i = i + 1
  if i > #reqs then i = 1 end
  return reqs[i]
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("LIGHT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""

_LINE = re.compile(rb"LIGHT requests=(\d+) duration_us=(\d+) p50_us=(\d+) p99_us=(\d+) errors=(\d+)")


def binary() -> str | None:
    """The ``wrk`` executable, or None."""
    return shutil.which("wrk")


def request_pool(port: int, path: str, clients: int, salt: str, families=None, method: str | None = None
                 ) -> list[bytes]:
    """The requests :func:`bench.http_load.throughput`'s clients send (400 per client,
    the families in turn, rotating constants, a unique text each), interleaved.
    ``families`` / ``method``: those ``http-load`` chose (its module may be ``__main__``)."""
    fams = families or http_load.FAMILIES
    per = 400
    pools = []
    for k in range(clients):
        reqs = []
        for i in range(per):
            fam = fams[(i + k) % len(fams)]
            ents = http_load._entities(fam.kind, 60)
            reqs.append(http_load.request_bytes(path, fam.text(ents[(i * 7 + k) % len(ents)], f"{salt}-{k}-{i}"),
                                                port, fam.accept, method))
        pools.append(reqs)
    return [pools[k][i] for i in range(per) for k in range(clients)]


def throughput(port: int, path: str, clients: int, seconds: float, salt: str, threads: int | None = None,
               families=None, method: str | None = None) -> dict:
    """``wrk -t threads -c clients`` for ``seconds`` over :func:`request_pool`'s bytes:
    queries/s, p50 / p99 (s), errors and the client's cores (wrk's user + system CPU,
    from ``wait4``). ``threads`` defaults to ``JINDOU_LIGHT_THREADS`` or 1 (one core's
    worth of client at most: the lightest load a grader's client puts on the machine)."""
    exe = binary()
    if exe is None:
        raise RuntimeError("wrk not found on PATH (apt-get install wrk): the light client needs it")
    threads = threads or int(os.environ.get("JINDOU_LIGHT_THREADS", "1"))
    with tempfile.TemporaryDirectory(prefix="light-") as d:
        reqs = os.path.join(d, "requests")
        with open(reqs, "wb") as f:
            f.write(b"".join(r + b"\0" for r in request_pool(port, path, clients, salt, families, method)))
        lua = os.path.join(d, "cycle.lua")
        with open(lua, "w") as f:
            f.write(LUA)
        argv = [exe, "-t", str(threads), "-c", str(clients), "-d", f"{seconds:g}s", "--timeout", "10s",
                "-s", lua, f"http://127.0.0.1:{port}{path}", "--", reqs]
        out = tempfile.TemporaryFile()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    m = _LINE.search(text)
    if p.returncode != 0 or m is None:
        raise RuntimeError(f"wrk failed ({p.returncode}): {text[-800:].decode(errors='replace')}")
    n, dur, p50, p99, err = (int(x) for x in m.groups())
    wall = dur / 1e6
    return {"qps": n / wall if wall else math.nan, "p50": p50 / 1e6, "p99": p99 / 1e6, "errors": err,
            "client_cores": (ru.ru_utime + ru.ru_stime) / wall if wall else math.nan}
