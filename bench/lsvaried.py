"""Small-window continuous queries of many shapes over the LSBench streams (seeded).

Why: the known small-window queries (CityBench's C1-C11, LSBench's L1-L7) are conjunctive
patterns with numeric FILTERs and COUNTs; a user of a stream engine also writes string and IRI
filters, OPTIONAL, UNION, NOT EXISTS, other aggregates, ORDER BY ... LIMIT and BIND. A fast path
tuned to the known queries would leave those on the slow one; this workload measures them side
by side with the same peers (``python -m bench streams --workload lsbench-varied``).

Each query is drawn from one of :data:`TEMPLATES` (one per shape family) with its constants
(hashtags, users, thresholds, substrings) and its window (RANGE 5/10/15 s, STEP 1 s, sometimes
tumbling) drawn from a RNG seeded by ``seed``; ``queries(n, seed)`` cycles through the templates,
so the first ``len(TEMPLATES)`` queries cover every family once. Results must be deterministic
across engines: an ORDER BY with LIMIT orders on a total key (the count, then the IRI).
"""

from __future__ import annotations

import random

from bench.lsbench import _PREFIXES, FOCUS_USER, N_CITIES, N_TAGS, NS, STATIC_GRAPH, STREAMS

__all__ = ["TEMPLATES", "queries"]

_TAG = NS + "tag/"
_USER = NS + "user/"


def _s(name: str) -> str:
    return f"<{STREAMS[name]}>"


def _win(r: random.Random, name: str, tumbling_ok: bool = True) -> str:
    rng = r.choice((5, 10, 15))
    step = rng if tumbling_ok and r.random() < 0.25 else 1
    return f"FROM STREAM {_s(name)} [RANGE {rng}s STEP {step}s]"


def _tag(r: random.Random) -> str:
    return f"<{_TAG}{r.randrange(min(N_TAGS, 8))}>"


_G = f"FROM <{STATIC_GRAPH}>"

#: shape family -> text maker (a RNG -> the query's C-SPARQL text without REGISTER)
TEMPLATES = {
    "contains": lambda r: f"""SELECT ?post ?content
{_win(r, "post")}
WHERE {{
  ?post sioc:content ?content .
  FILTER (CONTAINS(?content, "of user {r.randrange(10)}"))
}}""",
    "regex-str": lambda r: f"""SELECT ?post ?tag
{_win(r, "post")}
WHERE {{
  ?post sib:hashtag ?tag ;
        sioc:has_creator ?u .
  FILTER (REGEX(STR(?tag), "tag/[{r.randrange(3)}-{3 + r.randrange(4)}]$"))
}}""",
    "in-list": lambda r: f"""SELECT ?photo ?u ?tag
{_win(r, "photo")}
WHERE {{
  ?photo sib:hashtag ?tag ;
         sioc:has_creator ?u .
  FILTER (?tag IN ({_tag(r)}, {_tag(r)}, {_tag(r)}))
}}""",
    "union": lambda r: (lambda t: f"""SELECT ?item ?u
{_win(r, "post")}
{_win(r, "photo")}
WHERE {{
  {{ ?item sib:hashtag {t} ; sioc:has_creator ?u . ?item a sioc:Post }}
  UNION
  {{ ?item sib:hashtag {t} ; sioc:has_creator ?u . ?item a sib:Photo }}
}}""")(_tag(r)),
    "optional": lambda r: f"""SELECT ?post ?u ?liker
{_win(r, "post", False)}
{_win(r, "postlike", False)}
WHERE {{
  ?post sioc:has_creator ?u .
  OPTIONAL {{ ?liker sib:like ?post }}
}}""",
    "not-exists": lambda r: f"""SELECT ?post ?u
{_win(r, "post", False)}
{_win(r, "postlike", False)}
WHERE {{
  ?post sib:hashtag ?t ;
        sioc:has_creator ?u .
  FILTER NOT EXISTS {{ ?liker sib:like ?post }}
}}""",
    "avg-max": lambda r: f"""SELECT ?city (AVG(?lat) AS ?avg) (MAX(?long) AS ?east) (COUNT(*) AS ?n)
{_win(r, "gps")}
{_G}
WHERE {{
  ?r sib:user ?u ;
     geo:lat ?lat ;
     geo:long ?long .
  ?u foaf:based_near ?city .
}}
GROUP BY ?city""",
    "sum-having": lambda r: f"""SELECT ?post (SUM(?age) AS ?ages) (MIN(?age) AS ?youngest)
{_win(r, "postlike")}
{_G}
WHERE {{
  ?liker sib:like ?post ;
         foaf:age ?age .
}}
GROUP BY ?post
HAVING (SUM(?age) > {20 + r.randrange(40)})""",
    "order-limit": lambda r: f"""SELECT ?post (COUNT(?liker) AS ?likes)
{_win(r, "postlike")}
WHERE {{
  ?liker sib:like ?post .
}}
GROUP BY ?post
ORDER BY DESC(?likes) ?post
LIMIT {1 + r.randrange(5)}""",
    "distinct-join": lambda r: f"""SELECT DISTINCT ?u
{_win(r, "post")}
{_win(r, "postlike")}
WHERE {{
  ?liker sib:like ?post .
  ?post sioc:has_creator ?u .
}}""",
    "bind-filter": lambda r: f"""SELECT ?r ?u ?next
{_win(r, "gps")}
{_G}
WHERE {{
  ?r sib:user ?u .
  ?u foaf:age ?age .
  BIND (?age + 1 AS ?next)
  FILTER (?age > {18 + r.randrange(40)})
}}""",
    "iri-ne": lambda r: f"""SELECT ?liker ?post ?u
{_win(r, "post", False)}
{_win(r, "postlike", False)}
WHERE {{
  ?liker sib:like ?post .
  ?post sioc:has_creator ?u .
  FILTER (?liker != ?u && ?u != <{_USER}{FOCUS_USER}>)
}}""",
    "ask": lambda r: f"""ASK
{_win(r, "post")}
{_G}
WHERE {{
  ?post sib:hashtag {_tag(r)} ;
        sioc:has_creator ?u .
  ?u foaf:age ?age .
  FILTER (?age < {20 + r.randrange(20)})
}}""",
    "strings-out": lambda r: f"""SELECT ?u (UCASE(?name) AS ?shout) (STRLEN(?label) AS ?len)
{_win(r, "gps")}
{_G}
WHERE {{
  ?r sib:user ?u .
  ?u foaf:name ?name ;
     foaf:based_near ?city .
  ?city rdfs:label ?label .
  FILTER (STRSTARTS(?label, "City {r.randrange(min(N_CITIES, 10))}"))
}}""",
    "count-distinct": lambda r: f"""SELECT ?tag (COUNT(DISTINCT ?u) AS ?users)
{_win(r, "post")}
{_win(r, "photo")}
WHERE {{
  ?item sib:hashtag ?tag ;
        sioc:has_creator ?u .
}}
GROUP BY ?tag
HAVING (COUNT(DISTINCT ?u) >= {1 + r.randrange(2)})""",
    "lang-datatype": lambda r: f"""SELECT ?r ?lat
{_win(r, "gps")}
WHERE {{
  ?r geo:lat ?lat ;
     geo:long ?long .
  FILTER (DATATYPE(?lat) = xsd:double && isLiteral(?long) && ?lat >= {54 + r.randrange(3)}.5)
}}""",
}

_MORE_PREFIXES = """PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>
PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>
"""


def queries(n: int | None = None, seed: int = 0) -> dict[str, str]:
    """``n`` queries (default: one per template) as ``{"V01": text, ...}``, C-SPARQL text without
    ``REGISTER QUERY ... AS``; query ``i`` is drawn from template ``i mod len(TEMPLATES)``."""
    names = list(TEMPLATES)
    n = len(names) if n is None else n
    out = {}
    for i in range(n):
        fam = names[i % len(names)]
        r = random.Random(f"lsvaried:{seed}:{i}")
        out[f"V{i + 1:02d}"] = _PREFIXES + _MORE_PREFIXES + TEMPLATES[fam](r)
    return out


def family(qid: str) -> str:
    """The template family of query ``qid`` (``V01`` ...)."""
    names = list(TEMPLATES)
    return names[(int(qid[1:]) - 1) % len(names)]
