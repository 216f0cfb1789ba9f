"""UNION and OPTIONAL small-window queries over the LSBench small streams: Jindou vs the
C-SPARQL-style composite (wave 2k, helper U).

``cd /tmp && python -m bench.union_opt [--minutes 1] [--timing woken]``

Queries of the shapes :mod:`engine.stream.tiny_union` and :mod:`engine.stream.maint_opt` take
(UNION of groups with and without a shared required part, DISTINCT and COUNT over a union,
OPTIONAL with a FILTER inside and one over its unbound variable, two OPTIONAL groups; FILTER NOT
EXISTS and MINUS over a BGP, :mod:`engine.stream.tiny_anti`), replayed
as ``python -m bench streams --workload lsbench-small`` replays its queries.
"""

from __future__ import annotations

import argparse

from bench import streams as bs
from bench.lsbench import _PREFIXES, NS, STATIC_GRAPH, STREAMS


def _s(name: str) -> str:
    return f"<{STREAMS[name]}>"


G = f"FROM <{STATIC_GRAPH}>"
TEXTS = {
    "U1": f"""SELECT ?item ?u
FROM STREAM {_s("post")} [RANGE 10s STEP 1s]
FROM STREAM {_s("photo")} [RANGE 10s STEP 1s]
WHERE {{
  {{ ?item sib:hashtag <{NS}tag/2> ; sioc:has_creator ?u . }}
  UNION
  {{ ?item rdf:type sib:Photo ; sioc:has_creator ?u . }}
}}""",
    "U2": f"""SELECT DISTINCT ?u
FROM STREAM {_s("postlike")} [RANGE 5s STEP 1s]
FROM STREAM {_s("photolike")} [RANGE 5s STEP 1s]
{G}
WHERE {{
  <{NS}user/0> foaf:knows ?u .
  {{ ?u sib:like ?x . ?x sioc:has_creator ?c }} UNION {{ ?u sib:like ?x }}
}}""",
    "U3": f"""SELECT ?u (COUNT(*) AS ?n)
FROM STREAM {_s("post")} [RANGE 10s STEP 1s]
FROM STREAM {_s("photo")} [RANGE 10s STEP 1s]
WHERE {{
  {{ ?item rdf:type sioc:Post ; sioc:has_creator ?u . }}
  UNION
  {{ ?item rdf:type sib:Photo ; sioc:has_creator ?u . }}
}}
GROUP BY ?u
HAVING (COUNT(*) >= 2)""",
    "O1": f"""SELECT ?post ?u ?liker
FROM STREAM {_s("post")} [RANGE 10s STEP 1s]
FROM STREAM {_s("postlike")} [RANGE 10s STEP 1s]
WHERE {{
  ?post sioc:has_creator ?u .
  OPTIONAL {{ ?liker sib:like ?post }}
}}""",
    "O2": f"""SELECT ?r ?u ?age
FROM STREAM {_s("gps")} [RANGE 5s STEP 1s]
{G}
WHERE {{
  ?r sib:user ?u ; geo:lat ?lat .
  OPTIONAL {{ ?u foaf:age ?age FILTER(?age < 30) }}
  FILTER(!bound(?age) || ?lat > 55.0)
}}""",
    "O3": f"""SELECT ?post ?liker ?tag
FROM STREAM {_s("post")} [RANGE 10s STEP 1s]
FROM STREAM {_s("postlike")} [RANGE 5s STEP 1s]
WHERE {{
  ?post sioc:has_creator ?u .
  OPTIONAL {{ ?liker sib:like ?post }}
  OPTIONAL {{ ?post sib:hashtag ?tag }}
}}""",
    "N1": f"""SELECT ?post ?u
FROM STREAM {_s("post")} [RANGE 10s STEP 1s]
FROM STREAM {_s("postlike")} [RANGE 5s STEP 1s]
WHERE {{
  ?post sioc:has_creator ?u .
  FILTER NOT EXISTS {{ ?liker sib:like ?post }}
}}""",
    "N2": f"""SELECT ?r ?u
FROM STREAM {_s("gps")} [RANGE 5s STEP 1s]
{G}
WHERE {{
  ?r sib:user ?u ; geo:lat ?lat .
  MINUS {{ ?u foaf:age ?age FILTER(?age < 25) }}
}}""",
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.union_opt")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--timing", default="woken", choices=bs.COMPOSITE_TIMINGS)
    ap.add_argument("--queries", default=",".join(TEXTS))
    ap.add_argument("--peers", default="jindou,csparql-composite")
    a = ap.parse_args(argv)
    texts = {k: _PREFIXES + v for k, v in TEXTS.items()}
    ids = [q for q in a.queries.split(",") if q]
    wl = bs.load_lsbench(ids, a.minutes, bs.SMALL_RATE, 1000, 0, name="lsbench-small", texts=texts)
    runs = {}
    for p in a.peers.split(","):
        if p == "jindou":
            runs[p] = bs.run_jindou(wl, True)
        elif p == "jindou-unmaintained":
            runs[p] = bs.run_jindou(wl, True, maintained=False, label=p)
        elif p == "csparql-composite":
            runs[p] = bs.run_composite(wl, bs._log, a.timing)
    s = bs.summarize(wl, runs)
    print(bs.format_markdown(s, list(runs)))


if __name__ == "__main__":
    main()
