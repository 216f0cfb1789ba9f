"""CPU cost of one small stream POST: ``python -m bench.stream_post``.

A stream engine for sensors receives many small ndjson POSTs (a few to a hundred elements),
each followed by a heartbeat, as ``bench/streams.py`` replays CityBench / LSBench. This
measures the calling thread's CPU time (``time.thread_time``: the evaluation worker's time is
not counted) of ``StreamManager.ingest_ndjson`` and of ``heartbeat`` per call, for bodies of
1 / 5 / 20 / 100 / 1000 lines of sensor-like triples (an observation IRI, a typed literal
value, a timestamp literal), on a stream read by one registered continuous query (``--no-query``:
none). Median of ``--rounds`` rounds of ``--posts`` POSTs each (fewer for the large bodies).

Run it from a neutral directory with the tree to measure first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import orjson

SIZES = (1, 5, 20, 100, 1000)
BASE_MS = 1_700_000_000_000


def body(n: int, t0: int, k: int) -> bytes:
    """``n`` lines, one element per 10 ms from ``t0``; ``k`` makes the subjects of each POST new."""
    out = []
    for i in range(n):
        obs = f"<http://example.org/obs/{k}_{i}>"
        t = t0 + (i * 10) // max(1, n)
        triple = (obs, "<http://purl.oclc.org/NET/ssnx/ssn#hasValue>",
                  f'"{(k * 7 + i) % 997 / 10}"^^<http://www.w3.org/2001/XMLSchema#double>')
        if i % 3 == 1:
            triple = (obs, "<http://purl.oclc.org/NET/ssnx/ssn#observedBy>", f"<http://example.org/sensor/{i % 17}>")
        elif i % 3 == 2:
            triple = (obs, "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>", '"obs \u00e9t\u00e9"@fr')
        out.append(orjson.dumps({"s": triple[0], "p": triple[1], "o": triple[2], "t": t}))
    return b"\n".join(out) + b"\n"


QUERY = """REGISTER QUERY q AS
PREFIX ssn: <http://purl.oclc.org/NET/ssnx/ssn#>
SELECT ?obs ?v FROM STREAM <http://example.org/s> [RANGE 1s STEP 1s]
WHERE { ?obs ssn:hasValue ?v }"""


def run(sizes, posts: int, rounds: int, query: bool) -> dict[int, tuple[float, float]]:
    from engine.database import Database  # noqa: PLC0415
    from engine.stream.manager import StreamManager  # noqa: PLC0415

    res: dict[int, tuple[list[float], list[float]]] = {n: ([], []) for n in sizes}
    db = Database()
    gc.collect()
    gc.freeze()
    try:
        for n in sizes:
            m = StreamManager(db)
            try:
                m.register_stream("s", "http://example.org/s")
                m.heartbeat("s", BASE_MS)
                if query:
                    m.register_query(QUERY)
                k_posts = max(5, posts // max(1, n // 20)) if n > 20 else posts
                t = BASE_MS
                for r in range(rounds + 1):   # round 0 warms up
                    bodies = [body(n, t + 10 * j, r * k_posts + j) for j in range(k_posts)]
                    ing = hb = 0.0
                    for j, b in enumerate(bodies):
                        t0 = time.thread_time()
                        rep = m.ingest_ndjson("s", b)
                        t1 = time.thread_time()
                        m.heartbeat("s", t + 10 * j + 10)
                        t2 = time.thread_time()
                        if rep["rejected"]:
                            raise RuntimeError(rep["errors"][:3])
                        ing += t1 - t0
                        hb += t2 - t1
                    t += 10 * k_posts
                    m.drain(60)
                    if r:
                        res[n][0].append(ing * 1e6 / k_posts)
                        res[n][1].append(hb * 1e6 / k_posts)
            finally:
                m.close()
    finally:
        db.close()
    return {n: (statistics.median(a), statistics.median(b)) for n, (a, b) in res.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.stream_post", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="lines per POST (comma separated)")
    ap.add_argument("--posts", type=int, default=400, help="POSTs per round (fewer for bodies over 20 lines)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-query", action="store_true", help="no continuous query reads the stream")
    ap.add_argument("--small-lines", type=int, default=None,
                    help="set engine.stream.adaptor.SMALL_LINES (0: every body takes the general path)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.small_lines is not None:
        from engine.stream import adaptor  # noqa: PLC0415
        if not hasattr(adaptor, "SMALL_LINES"):
            raise SystemExit("this tree has no small ndjson path")
        adaptor.SMALL_LINES = a.small_lines
    sizes = [int(x) for x in a.sizes.split(",") if x]
    out = run(sizes, a.posts, a.rounds, not a.no_query)
    if a.json:
        print(orjson.dumps({str(n): {"ingest_us": v[0], "heartbeat_us": v[1]} for n, v in out.items()}).decode())
    else:
        print(f"{'lines':>6} {'ingest µs/POST':>15} {'heartbeat µs':>13} {'µs/line':>8}")
        for n, (ing, hb) in out.items():
            print(f"{n:>6} {ing:>15.1f} {hb:>13.1f} {ing / n:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
