"""`python -m bench.kept_ops`: the Python work of one repeated request (the same text sent
again, as ``bench sparql --alternate-http`` and issue 14's sweeps send it), per client form
of ``bench/client_forms.py``: interpreter opcodes and Python calls per request
(``sys.settrace``, :class:`bench.lane_ops.Counter`), and how many answers came from the
lane's kept answers (``LaneAnswers.served``).

Counts do not move with the machine's load, so one run per tree is an A/B of their
interpreter work (run with ``PYTHONPATH=<tree>`` from a neutral directory). A small
synthetic store is enough: a kept answer's path does not touch the data. ``--time``
also prints µs per request (median; ``--thrash-mb`` evicts the caches before each, as
``bench.lane_profile``'s cold mode: a request after idle).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from bench import lane_profile
from bench.client_forms import CLOSING, forms
from bench.lane_ops import Counter

EX = "http://example.org/"
#: the repeated texts: a point lookup, a two-pattern star, an ASK (each its own skeleton)
TEXTS = (
    f"SELECT ?o WHERE {{ <{EX}s7> <{EX}p> ?o }}",
    f"SELECT ?o ?n WHERE {{ <{EX}s3> <{EX}p> ?o ; <{EX}q> ?n }}",
    f"ASK {{ <{EX}s5> <{EX}q> ?n }}",
)
DEFAULT_FORMS = ("bench", "curl-get", "http.client-post-query", "requests-post-form", "requests-post-query",
                 "curl-post-form", "sparqlwrapper-get", "yasgui-post-form")


def _db():
    from engine.database import Database  # noqa: PLC0415

    db = Database(query_timeout=3600)
    nt = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n<{EX}s{i}> <{EX}q> \"n{i}\" .\n" for i in range(2000))
    db.load_data(nt, "application/n-triples")
    return db


def _send(proto, tr, chunks: list[bytes], loop) -> None:
    tr.out.clear()
    for c in chunks:
        proto.data_received(c)
    if not tr.out or (proto.cycle is not None and not proto.cycle.response_complete):
        deadline = time.monotonic() + 30
        while not (tr.out and (proto.cycle is None or proto.cycle.response_complete)) and time.monotonic() < deadline:
            loop.run_until_complete(asyncio.sleep(0.0005))
    if proto.timeout_keep_alive_task is not None:
        proto.timeout_keep_alive_task.cancel()
        proto.timeout_keep_alive_task = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.kept_ops", description=__doc__.split("\n\n")[0])
    ap.add_argument("--forms", default=",".join(DEFAULT_FORMS), help="client forms (bench/client_forms.py)")
    ap.add_argument("--requests", type=int, default=300, help="counted requests per form and text")
    ap.add_argument("--functions", type=int, default=0, help="also list the N functions with the most opcodes")
    ap.add_argument("--time", action="store_true", help="also time the requests (untraced)")
    ap.add_argument("--thrash-mb", type=int, default=0, help="with --time: evict the caches before each request")
    args = ap.parse_args(argv)
    from server.api import sparql  # noqa: PLC0415

    db = _db()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    connect = lane_profile.make_connector(db, loop)
    junk = None
    if args.thrash_mb > 0:
        import numpy as np  # noqa: PLC0415

        junk = np.ones(args.thrash_mb << 17, dtype=np.int64)
    print("| client form | opcodes / request | Python calls / request | kept answers | µs (median) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in args.forms.split(","):
        ops = calls = 0
        per: dict = __import__("collections").Counter()
        served0 = getattr(sparql._ANSWERS, "served", 0)
        ns: list[int] = []
        n = 0
        for text in TEXTS:
            chunks = forms(text + f" # {name}\n")[name]
            proto, tr = connect()
            for _ in range(5):  # learn the template, keep the answer
                _send(proto, tr, chunks, loop)
            c = Counter(args.functions > 0)
            sys.settrace(c)
            try:
                for _ in range(args.requests):
                    if name in CLOSING:
                        proto, tr = connect()
                    _send(proto, tr, chunks, loop)
            finally:
                sys.settrace(None)
            ops += c.ops
            if c.per is not None:
                per.update(c.per)
            calls += c.calls
            n += args.requests
            if args.time:
                for _ in range(args.requests):
                    if name in CLOSING:
                        proto, tr = connect()
                    if junk is not None:
                        junk.sum()
                        junk[::512] += 1
                    t0 = time.perf_counter_ns()
                    _send(proto, tr, chunks, loop)
                    ns.append(time.perf_counter_ns() - t0)
        served = getattr(sparql._ANSWERS, "served", 0) - served0
        us = f"{statistics.median(ns) / 1e3:.1f}" if ns else "-"
        print(f"| {name} | {ops / n:.0f} | {calls / n:.1f} | {served} | {us} |")
        if args.functions:
            for fn, k in per.most_common(args.functions):
                print(f"|   {fn} | {k / n:.1f} | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
