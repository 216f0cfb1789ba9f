"""`python -m bench.lane_mix`: the server's Python CPU per request of `bench http-load`'s
throughput mix, in process.

The throughput phase's requests (the five selective families, a new text every
request, eight keep-alive connections taking turns) fed to eight real
``FastLaneProtocol`` connections (``bench.lane_profile``'s stand-in transports:
no sockets, no event loop, no scheduler): the interpreter's part of what the
8-client throughput costs the server, per request, as the event loop's thread
spends it (``time.thread_time``). Fewer things move it than the throughput
runs' server CPU per query (no kernel, no wake-ups, no client on the same
cores), but on a shared machine it moves too (26-30 µs at load 4, 34-60 at
load 7-9 for the same code: other work between requests evicts the caches).
Read the minimum over rounds, and A/B two trees by alternating them
(``PYTHONPATH``).
What it leaves out -- the answer's ``write`` (loopback delivery and the client's
wake-up), the ``read``, ``epoll`` and the event loop's own work -- is the rest
of the server's CPU per query (``bench.throughput_probe``, ``perf``).

A request the lane does not answer inline (a first sighting of a shape, or one
sent to the pool) is completed on an event loop and counted ("not inline").
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time

from bench import lane_profile
from bench.http_load import FAMILIES, _entities, request_bytes

#: connections taking turns, as the throughput phase's client threads
CONNECTIONS = 8


def requests(salt: str, n: int) -> list[bytes]:
    """``n`` requests in the throughput phase's order (``http_load.throughput``: client k's
    i-th request is family (i + k) mod 5 with a new comment), connections taking turns."""
    ents = {f.kind: _entities(f.kind, 60) for f in FAMILIES}
    out = []
    for i in range(n):
        k, j = i % CONNECTIONS, i // CONNECTIONS
        fam = FAMILIES[(j + k) % len(FAMILIES)]
        e = ents[fam.kind]
        out.append(request_bytes("/sparql", fam.text(e[(j * 7 + k) % len(e)], f"{salt}-{k}-{j}"), 7878,
                                 fam.accept))
    return out


def run(conns: list, reqs: list[bytes], loop) -> tuple[float, int]:
    """(thread CPU µs per request, requests not answered inline) of ``reqs`` on ``conns``."""
    slow = 0
    tt = time.thread_time
    t0 = tt()
    for i, r in enumerate(reqs):
        proto, tr = conns[i % len(conns)]
        n = len(tr.out)
        proto.data_received(r)
        if len(tr.out) == n:  # the ASGI way: let the loop finish it (counted, not excluded)
            slow += 1
            while proto.cycle is not None and not proto.cycle.response_complete:
                loop.run_until_complete(asyncio.sleep(0.0005))
    t1 = tt()
    for proto, tr in conns:
        tr.out.clear()
        if proto.timeout_keep_alive_task is not None:
            proto.timeout_keep_alive_task.cancel()
            proto.timeout_keep_alive_task = None
    return (t1 - t0) / len(reqs) * 1e6, slow


def warm_connections(data: str | None) -> tuple:
    """(event loop, the mix's connections) over ``data`` (default: the cached 1M LUBM-like
    file) loaded as `jindou serve` loads it, shapes learned and runners bound by three warm
    rounds."""
    if data is None:
        from bench.runner import prepare_data  # noqa: PLC0415

        data = prepare_data(argparse.Namespace(data=None, workdir=None, universities=None, scale="1M",
                                               seed=0, quiet=True))[0]
    from engine.database import Database  # noqa: PLC0415

    db = Database(query_timeout=3600)
    db.load_file(data)
    gc.collect()
    gc.freeze()  # as `jindou serve` does after loading
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    connect = lane_profile.make_connector(db, loop)
    conns = [connect() for _ in range(CONNECTIONS)]
    for w in range(3):  # shapes learned, runners bound, fragments rendered
        run(conns, requests(f"warm{w}", 2000), loop)
    return loop, conns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lane_mix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="N-Triples file (default: the cached 1M LUBM-like file)")
    ap.add_argument("--requests", type=int, default=4000, help="requests per round (default 4000)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    loop, conns = warm_connections(args.data)
    res, slow = [], 0
    for r in range(args.rounds):
        us, s = run(conns, requests(f"r{r}-{time.time()}", args.requests), loop)
        res.append(us)
        slow += s
    print(f"µs per request (thread CPU), rounds: {' '.join(f'{x:.2f}' for x in res)}; "
          f"min {min(res):.2f}, median {statistics.median(res):.2f}; not inline: {slow} of {args.requests * args.rounds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
