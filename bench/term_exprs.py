"""Small-window queries whose FILTERs / BINDs / projections work on terms, over LSBench's streams.

``cd /tmp && python -m bench.term_exprs [--minutes 1] [--rate 20]``

Why: the generated and maintained small-window paths decided numeric FILTERs only; a query on
strings, IRIs or with a computed string took the ordinary path (~1x the C-SPARQL-style
composite). These shapes (string tests, REGEX with a flag, IRI equality and IN over a static
join, a BIND of a string, computed projections, DISTINCT over a computed term) are measured
side by side with the composite (woken), as ``python -m bench streams`` does, with its
agreement check between the peers.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import citybench as cb
from bench import lsbench
from bench import streams as bs

_P = lsbench._PREFIXES + "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
_S = {k: f"<{v}>" for k, v in lsbench.STREAMS.items()}
_G = f"FROM <{lsbench.STATIC_GRAPH}>"
_U = lsbench.NS + "user/"
_C = lsbench.NS + "city/"

QUERIES = {
    "T1": f"""SELECT ?post ?c
FROM STREAM {_S["post"]} [RANGE 10s STEP 1s]
WHERE {{ ?post sioc:content ?c . FILTER (STRSTARTS(LCASE(?c), "post 1")) }}""",
    "T2": f"""SELECT ?post ?c
FROM STREAM {_S["post"]} [RANGE 10s STEP 1s]
WHERE {{ ?post sioc:content ?c . FILTER (REGEX(?c, "USER 1[0-9]$", "i")) }}""",
    "T3": f"""SELECT ?post ?u ?city
FROM STREAM {_S["post"]} [RANGE 10s STEP 1s]
{_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:based_near ?city .
  FILTER (?city = <{_C}1> || ?city IN (<{_C}2>, <{_C}3>)) }}""",
    "T4": f"""SELECT ?post ?key
FROM STREAM {_S["post"]} [RANGE 5s STEP 1s]
WHERE {{ ?post sib:hashtag ?tag ; sioc:has_creator ?u .
  BIND (CONCAT(STRAFTER(STR(?u), "user/"), "#", STRAFTER(STR(?tag), "tag/")) AS ?key) }}""",
    "T5": f"""SELECT ?liker ?post
FROM STREAM {_S["postlike"]} [RANGE 5s STEP 1s]
WHERE {{ ?liker sib:like ?post . FILTER (isIRI(?post) && ?liker NOT IN (<{_U}0>, <{_U}1>, <{_U}2>)
  && !sameTerm(?liker, <{_U}3>)) }}""",
    "T6": f"""SELECT ?post (STRLEN(?c) AS ?n) (SUBSTR(?c, 1, 6) AS ?head)
FROM STREAM {_S["post"]} [RANGE 10s STEP 1s]
WHERE {{ ?post sioc:content ?c . FILTER (CONTAINS(?c, "of user")) }}""",
    "T7": f"""SELECT DISTINCT (STR(?tag) AS ?t)
FROM STREAM {_S["photo"]} [RANGE 10s STEP 1s]
WHERE {{ ?photo sib:hashtag ?tag }}""",
    "T8": f"""SELECT ?r ?u ?name
FROM STREAM {_S["gps"]} [RANGE 5s STEP 1s]
{_G}
WHERE {{ ?r sib:user ?u . ?u foaf:name ?name ; foaf:based_near ?city . ?city rdfs:label ?label .
  FILTER (?label != "City 0" && STRENDS(?name, "7") = false) }}""",
}


def workload(minutes: float, rate: float, users: int, seed: int) -> bs.Workload:
    data = lsbench.generate(users=users, rate=rate, seconds=minutes * 60, seed=seed)
    qs = [bs.BenchQuery(i, cb.parse_query(i, _P + t)) for i, t in QUERIES.items()]
    short = {v: k for k, v in lsbench.STREAMS.items()}
    used = {s for bq in qs for s in bq.q.windows}
    streams = {iri: bs.StreamData(short[iri], iri, els) for iri, els in data.streams.items() if iri in used}
    return bs.Workload("lsbench-terms", qs, {lsbench.STATIC_GRAPH: data.static_nt()}, streams, data.start_ms,
                       data.end_ms, {"rate": rate, "users": users, "minutes": minutes, "seed": seed})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.term_exprs")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=bs.SMALL_RATE)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    wl = workload(a.minutes, a.rate, a.users, a.seed)
    runs = {"jindou": bs.run_jindou(wl, True), "csparql-composite": bs.run_composite(wl, bs._log, "woken")}
    s = bs.summarize(wl, runs)
    print(json.dumps(s) if a.json else bs.format_markdown(s, list(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
