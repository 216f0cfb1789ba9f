"""Small-window aggregates over the LSBench small streams: Jindou's median instant against the
C-SPARQL-style composite (woken), side by side (issue 13 item 2; helper A, wave 2k).

``cd /tmp && PYTHONPATH=<tree> python -m bench.agg_small [--minutes 1] [--rate 20]``

Queries a stream user writes per user / post / city: SUM, AVG, MIN, MAX, SAMPLE, GROUP_CONCAT
(DISTINCT, SEPARATOR), HAVING over them, an expression over aggregates, the implicit group.
Prints per query the composite's median (woken), Jindou's, their ratio, the paths that answered
Jindou's instants (maintained / generated / evaluated) and the instants whose results differ
(GROUP_CONCAT's pieces compared as a multiset: their order is undefined).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench import lsbench
from bench import streams as bs

_G = f"FROM <{lsbench.STATIC_GRAPH}>"


def _s(name: str) -> str:
    return f"<{lsbench.STREAMS[name]}>"


TEXTS = {
    # per user: the mean, extremes and spread of the positions reported in a sliding window
    "A1": f"""SELECT ?u (AVG(?lat) AS ?alat) (MIN(?lat) AS ?lo) (MAX(?long) AS ?east)
FROM STREAM {_s("gps")} [RANGE 10s STEP 1s]
WHERE {{ ?r sib:user ?u ; geo:lat ?lat ; geo:long ?long . }}
GROUP BY ?u""",
    # per post: the likers' ages (stored) summed, the youngest, HAVING over an average
    "A2": f"""SELECT ?post (SUM(?age) AS ?ages) (MIN(?age) AS ?youngest) (COUNT(*) AS ?n)
FROM STREAM {_s("postlike")} [RANGE 10s STEP 1s]
{_G}
WHERE {{ ?liker sib:like ?post ; foaf:age ?age . }}
GROUP BY ?post
HAVING (AVG(?age) < 40)""",
    # the implicit group over a window: one row, empty windows included
    "A3": f"""SELECT (AVG(?lat) AS ?m) (MAX(?lat) AS ?hi) (SUM(?long) AS ?s) (COUNT(?r) AS ?n)
FROM STREAM {_s("gps")} [RANGE 5s STEP 1s]
WHERE {{ ?r geo:lat ?lat ; geo:long ?long . }}""",
    # an expression over aggregates (doubles), DISTINCT
    "A4": f"""SELECT ?u ((MAX(?lat) - MIN(?lat)) AS ?span) (COUNT(DISTINCT ?r) AS ?n)
FROM STREAM {_s("gps")} [RANGE 15s STEP 1s]
WHERE {{ ?r sib:user ?u ; geo:lat ?lat . }}
GROUP BY ?u""",
    # per creator: the contents of their posts joined, a sample of a functional value
    "A5": f"""SELECT ?creator (GROUP_CONCAT(DISTINCT ?content; SEPARATOR=" | ") AS ?all) (SAMPLE(?creator) AS ?who)
FROM STREAM {_s("post")} [RANGE 10s STEP 1s]
WHERE {{ ?post sioc:has_creator ?creator ; sioc:content ?content . }}
GROUP BY ?creator""",
    # per city (stored): the likers' mean age, tumbling
    "A6": f"""SELECT ?city (AVG(?age) AS ?mean) (MAX(?age) AS ?oldest)
FROM STREAM {_s("postlike")} [RANGE 5s STEP 5s]
{_G}
WHERE {{ ?liker sib:like ?post ; foaf:age ?age ; foaf:based_near ?city . }}
GROUP BY ?city""",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.agg_small", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=bs.SMALL_RATE)
    ap.add_argument("--queries", default=None)
    a = ap.parse_args(argv)
    texts = {k: lsbench._PREFIXES + v for k, v in TEXTS.items()}
    ids = [q for q in texts if a.queries is None or q in a.queries.split(",")]
    wl = bs.load_lsbench(ids, a.minutes, a.rate, 1000, name="lsbench-aggs", texts=texts)
    jr = bs.run_jindou(wl, True)
    cr = bs.run_composite(wl, timing="woken")
    print("| query | composite woken µs | Jindou µs | ratio | paths (maint / gen / instants) | differing instants |")
    print("|---|---:|---:|---:|---|---:|")
    for q in ids:
        j, c = jr[q], cr[q]
        jm = statistics.median(j.latency.values()) * 1000 if j.latency else float("nan")
        cm = statistics.median(c.latency.values()) * 1000 if c.latency else float("nan")
        diff = sum(1 for t, r in j.results.items() if t in c.results and not r.error and not c.results[t].error
                   and r.digest != c.results[t].digest)
        print(f"| {q} | {cm:,.0f} | {jm:,.0f} | {cm / jm:.1f} | {j.paths} | {diff} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
