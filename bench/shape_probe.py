"""Which small-window query shapes still take the ordinary path (issue 13 item 2).

Why: a shape neither the generated path (:mod:`engine.stream.tiny_gen`) nor the maintained path
(:mod:`engine.stream.maintained`) takes runs at ~1-3x the C-SPARQL-style composite and misses the
10x target. This probe registers ~30 shapes users of a stream engine write (OPTIONAL with
aggregates, ORDER BY on expressions, aggregates of expressions, VALUES, property paths, LIMIT
without ORDER BY, ...) over the LSBench small streams, replays them with
:mod:`bench.streams`'s own functions and prints per query the instants answered maintained /
generated / other, Jindou's median instant and the composite's (woken).

    cd /tmp && PYTHONPATH=<tree> python -m bench.shape_probe [--minutes 1] [--only S01,S02]
"""

from __future__ import annotations

import argparse
import sys

from bench import streams as bs
from bench.lsbench import _PREFIXES, FOCUS_USER, NS, STATIC_GRAPH, STREAMS

_P = (_PREFIXES + "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
      "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n")
_G = f"FROM <{STATIC_GRAPH}>"
_T1, _T2, _T3 = (f"<{NS}tag/{k}>" for k in (1, 2, 3))
_U0 = f"<{NS}user/{FOCUS_USER}>"


def _w(name: str, rng: int = 10, step: int = 1) -> str:
    return f"FROM STREAM <{STREAMS[name]}> [RANGE {rng}s STEP {step}s]"


#: shape -> C-SPARQL text (without REGISTER)
SHAPES = {
    "opt-count": f"""SELECT ?post (COUNT(?liker) AS ?n)
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ ?liker sib:like ?post }} }}
GROUP BY ?post""",
    "opt-count-creator": f"""SELECT ?u (COUNT(?liker) AS ?likes) (COUNT(*) AS ?rows)
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ ?liker sib:like ?post }} }}
GROUP BY ?u""",
    "opt-sum-static": f"""SELECT ?post (SUM(?age) AS ?ages)
{_w("post")} {_w("postlike")} {_G}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ ?liker sib:like ?post . ?liker foaf:age ?age }} }}
GROUP BY ?post""",
    "opt-having": f"""SELECT ?post (COUNT(?liker) AS ?n)
{_w("post")} {_w("postlike")}
WHERE {{ ?post sib:hashtag ?t . OPTIONAL {{ ?liker sib:like ?post }} }}
GROUP BY ?post HAVING (COUNT(?liker) = 0)""",
    "union-opt": f"""SELECT ?item ?u ?t
{_w("post")} {_w("photo")}
WHERE {{ {{ ?item sioc:has_creator ?u . OPTIONAL {{ ?item sib:hashtag ?t . FILTER (?t = {_T1}) }} }}
  UNION {{ ?item sib:usertag ?u }} }}""",
    "union-opt2": f"""SELECT ?post ?liker
{_w("post")} {_w("postlike")}
WHERE {{ {{ ?post sib:hashtag {_T1} . OPTIONAL {{ ?liker sib:like ?post }} }}
  UNION {{ ?post sib:hashtag {_T2} }} }}""",
    "order-expr": f"""SELECT ?r ?lat
{_w("gps")}
WHERE {{ ?r geo:lat ?lat }}
ORDER BY DESC(?lat * 2) ?r LIMIT 5""",
    "order-str": f"""SELECT ?post ?tag
{_w("post")}
WHERE {{ ?post sib:hashtag ?tag }}
ORDER BY STR(?tag) ?post LIMIT 5""",
    "order-offset": f"""SELECT ?post ?u
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u }}
ORDER BY ?post LIMIT 3 OFFSET 2""",
    "sum-expr": f"""SELECT ?u (SUM(?lat * ?long) AS ?s)
{_w("gps")}
WHERE {{ ?r sib:user ?u ; geo:lat ?lat ; geo:long ?long }}
GROUP BY ?u""",
    "avg-cast": f"""SELECT ?post (AVG(xsd:double(?age)) AS ?a)
{_w("postlike")} {_G}
WHERE {{ ?liker sib:like ?post . ?liker foaf:age ?age }}
GROUP BY ?post""",
    "max-expr": f"""SELECT (MAX(?lat - ?long) AS ?m) (MIN(?lat + 1) AS ?n)
{_w("gps")}
WHERE {{ ?r geo:lat ?lat ; geo:long ?long }}""",
    "count-distinct-filter": f"""SELECT ?post (COUNT(DISTINCT ?liker) AS ?n)
{_w("postlike")} {_G}
WHERE {{ ?liker sib:like ?post ; foaf:age ?age . FILTER (?age > 30) }}
GROUP BY ?post""",
    "proj-agg-expr": f"""SELECT ?post (COUNT(?liker) * 2 AS ?x) (MAX(?age) - MIN(?age) AS ?spread)
{_w("postlike")} {_G}
WHERE {{ ?liker sib:like ?post ; foaf:age ?age }}
GROUP BY ?post""",
    "proj-str-group": f"""SELECT (STR(?post) AS ?p) (COUNT(*) AS ?n)
{_w("postlike")}
WHERE {{ ?liker sib:like ?post }}
GROUP BY ?post""",
    "group-by-expr": f"""SELECT ?d (COUNT(*) AS ?n)
{_w("postlike")} {_G}
WHERE {{ ?liker sib:like ?post ; foaf:age ?age }}
GROUP BY (?age / 10 AS ?d)""",
    "values-join": f"""SELECT ?post ?tag
{_w("post")}
WHERE {{ VALUES ?tag {{ {_T1} {_T2} {_T3} }} ?post sib:hashtag ?tag }}""",
    "values-after": f"""SELECT ?post ?u
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u ; sib:hashtag ?tag }}
VALUES ?tag {{ {_T1} {_T2} }}""",
    "filter-or-opt": f"""SELECT ?post ?u ?liker
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ ?liker sib:like ?post }}
  FILTER (!BOUND(?liker) || ?liker != ?u) }}""",
    "filter-and-opt": f"""SELECT ?post ?liker
{_w("post")} {_w("postlike")} {_G}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ ?liker sib:like ?post . ?liker foaf:age ?age }}
  FILTER (BOUND(?age) && ?age > 25) }}""",
    "path-seq": f"""SELECT ?liker ?u
{_w("post")} {_w("postlike")}
WHERE {{ ?liker sib:like/sioc:has_creator ?u }}""",
    "path-seq-static": f"""SELECT ?post ?city
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator/foaf:based_near ?city }}""",
    "path-inv": f"""SELECT ?post ?liker
{_w("postlike")}
WHERE {{ ?post ^sib:like ?liker }}""",
    "path-alt": f"""SELECT ?item ?u
{_w("photo")}
WHERE {{ ?item sioc:has_creator|sib:usertag ?u }}""",
    "limit-only": f"""SELECT (COUNT(*) AS ?n)
{_w("post")}
WHERE {{ ?post sib:hashtag ?t }} LIMIT 1""",
    "distinct-limit": f"""SELECT DISTINCT ?t
{_w("post")}
WHERE {{ ?post sib:hashtag ?t FILTER (?t = {_T1}) }} LIMIT 2""",
    "bind-agg": f"""SELECT ?u (SUM(?x) AS ?s)
{_w("gps")}
WHERE {{ ?r sib:user ?u ; geo:lat ?lat . BIND (?lat * 10 AS ?x) }}
GROUP BY ?u""",
    "opt-static-friend": f"""SELECT ?post ?f
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ {_U0} foaf:knows ?u . BIND(?u AS ?f) }} }}""",
    "filter-in-or": f"""SELECT ?post
{_w("post")}
WHERE {{ ?post sib:hashtag ?t ; sioc:content ?c .
  FILTER (?t IN ({_T1}, {_T2}) || CONTAINS(?c, "user 1")) }}""",
    "baseline-L1": f"""SELECT ?post ?creator
{_w("post")}
WHERE {{ ?post sib:hashtag {_T1} ; sioc:has_creator ?creator }}""",
    "subselect-having": f"""SELECT ?post ?n
{_w("postlike")}
WHERE {{ {{ SELECT ?post (COUNT(?liker) AS ?n) WHERE {{ ?liker sib:like ?post }} GROUP BY ?post }} FILTER (?n >= 2) }}""",
    # ---- wave 2m (helper U): the four kinds issue 13 still lists, then shapes users write
    "count-expr": f"""SELECT ?u (COUNT(?lat * 2) AS ?n)
{_w("gps")}
WHERE {{ ?r sib:user ?u ; geo:lat ?lat }}
GROUP BY ?u""",
    "count-distinct-expr": f"""SELECT (COUNT(DISTINCT STR(?t)) AS ?n)
{_w("post")}
WHERE {{ ?post sib:hashtag ?t }}""",
    "path-star-class": f"""SELECT ?post ?u
{_w("post")} {_G}
WHERE {{ ?post a ?c . ?c rdfs:subClassOf* sioc:Post . ?post sioc:has_creator ?u }}""",
    "path-plus-static": f"""SELECT ?post ?f
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator {_U0} . {_U0} foaf:knows/foaf:knows? ?f }}""",
    "opt-bind": f"""SELECT ?post ?u ?a2
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ ?u foaf:age ?age . BIND (?age * 2 AS ?a2) }} }}""",
    "filter-regex": f"""SELECT ?post ?c
{_w("post")}
WHERE {{ ?post sioc:content ?c FILTER regex(?c, "user 1[0-9]$") }}""",
    "filter-strstarts": f"""SELECT ?post
{_w("post")}
WHERE {{ ?post sioc:content ?c FILTER STRSTARTS(?c, "post 1") }}""",
    "filter-lang": f"""SELECT ?post ?n
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:name ?n FILTER (!langMatches(lang(?n), "en")) }}""",
    "filter-lcase": f"""SELECT ?post
{_w("post")}
WHERE {{ ?post sioc:content ?c FILTER CONTAINS(LCASE(?c), "user 7") }}""",
    "distinct-order-limit": f"""SELECT DISTINCT ?t
{_w("post")}
WHERE {{ ?post sib:hashtag ?t }} ORDER BY ?t LIMIT 3""",
    "nested-opt": f"""SELECT ?post ?l ?age
{_w("post")} {_w("postlike")} {_G}
WHERE {{ ?post sioc:has_creator ?u . OPTIONAL {{ ?l sib:like ?post OPTIONAL {{ ?l foaf:age ?age }} }} }}""",
    "exists-static": f"""SELECT ?post ?u
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u FILTER EXISTS {{ {_U0} foaf:knows ?u }} }}""",
    "not-exists-static": f"""SELECT ?post ?u
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u FILTER NOT EXISTS {{ ?u foaf:age ?a FILTER (?a < 30) }} }}""",
    "sample-concat": f"""SELECT ?post (SAMPLE(?u) AS ?creator) (GROUP_CONCAT(STR(?t)) AS ?tags)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u ; sib:hashtag ?t }}
GROUP BY ?post""",
    "having-two": f"""SELECT ?post (COUNT(?l) AS ?n) (MAX(?age) AS ?m)
{_w("postlike")} {_G}
WHERE {{ ?l sib:like ?post ; foaf:age ?age }}
GROUP BY ?post HAVING (COUNT(?l) >= 2 && MAX(?age) > 40)""",
    "count-star": f"""SELECT (COUNT(*) AS ?n)
{_w("postlike")}
WHERE {{ ?l sib:like ?p }}""",
    "ask": f"""ASK
{_w("post")}
WHERE {{ ?post sib:hashtag {_T1} ; sioc:has_creator ?u }}""",
    "two-windows": f"""SELECT ?post ?l
{_w("post", 10)} {_w("postlike", 5)}
WHERE {{ ?post sioc:has_creator ?u . ?l sib:like ?post }}""",
    "if-proj": f"""SELECT ?r (IF(?lat > 56, "north", "south") AS ?half)
{_w("gps")}
WHERE {{ ?r geo:lat ?lat }}""",
    "coalesce-proj": f"""SELECT ?post (COALESCE(?l, ?u) AS ?who)
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ ?l sib:like ?post }} }}""",
    "minus": f"""SELECT ?post ?u
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u MINUS {{ ?post sib:hashtag {_T1} }} }}""",
    "bind-concat": f"""SELECT ?post ?label
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u BIND (CONCAT("by ", STR(?u)) AS ?label) }}""",
    "top-k": f"""SELECT ?post (COUNT(*) AS ?n)
{_w("postlike")}
WHERE {{ ?l sib:like ?post }}
GROUP BY ?post ORDER BY DESC(?n) ?post LIMIT 3""",
    "filter-range-static": f"""SELECT ?l ?p
{_w("postlike")} {_G}
WHERE {{ ?l sib:like ?p ; foaf:age ?a FILTER (?a >= 18 && ?a < 30) }}""",
    "opt-filter-inside": f"""SELECT ?post ?l
{_w("post")} {_w("postlike")} {_G}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ ?l sib:like ?post ; foaf:age ?a FILTER (?a > 30) }} }}""",
    "not-bound": f"""SELECT ?post
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ ?l sib:like ?post }} FILTER (!BOUND(?l)) }}""",
    "strlen-proj": f"""SELECT ?post (STRLEN(?c) AS ?len) (UCASE(?c) AS ?uc)
{_w("post")}
WHERE {{ ?post sioc:content ?c }}""",
    "union-three": f"""SELECT ?x ?u
{_w("post")} {_w("photo")}
WHERE {{ {{ ?x sib:hashtag {_T1} ; sioc:has_creator ?u }} UNION {{ ?x sib:hashtag {_T2} ; sioc:has_creator ?u }}
  UNION {{ ?x sib:usertag ?u }} }}""",
    "avg-static-group": f"""SELECT ?city (AVG(?a) AS ?avg) (COUNT(*) AS ?n)
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:based_near ?city ; foaf:age ?a }}
GROUP BY ?city""",
    "not-in": f"""SELECT ?post ?t
{_w("post")}
WHERE {{ ?post sib:hashtag ?t FILTER (?t NOT IN ({_T1}, {_T2})) }}""",
    "group-two-keys": f"""SELECT ?u ?t (COUNT(*) AS ?n)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u ; sib:hashtag ?t }}
GROUP BY ?u ?t""",
    "count-distinct-all": f"""SELECT (COUNT(DISTINCT ?l) AS ?likers) (COUNT(DISTINCT ?p) AS ?posts)
{_w("postlike")}
WHERE {{ ?l sib:like ?p }}""",
    "avg-having": f"""SELECT ?u (AVG(?lat) AS ?a)
{_w("gps", 30)}
WHERE {{ ?r sib:user ?u ; geo:lat ?lat }}
GROUP BY ?u HAVING (AVG(?lat) > 56)""",
    "round-proj": f"""SELECT ?r (ROUND(?lat * 10) / 10 AS ?lat1) (ABS(?long - 10) AS ?d)
{_w("gps")}
WHERE {{ ?r geo:lat ?lat ; geo:long ?long }}""",
    "str-funcs-bind": f"""SELECT ?post ?n
{_w("post")}
WHERE {{ ?post sioc:content ?c BIND (STRAFTER(?c, "user ") AS ?n) FILTER (STRLEN(?n) > 1) }}""",
    "iri-bind": f"""SELECT ?post ?page
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u BIND (IRI(CONCAT(STR(?u), "/page")) AS ?page) }}""",
    "var-compare-static": f"""SELECT ?l ?p
{_w("postlike")} {_w("post")} {_G}
WHERE {{ ?l sib:like ?p . ?p sioc:has_creator ?u . ?l foaf:age ?a1 . ?u foaf:age ?a2 FILTER (?a1 > ?a2) }}""",
    "select-star": f"""SELECT *
{_w("photo")}
WHERE {{ ?ph sib:usertag ?f ; sioc:has_creator ?u }}""",
    "union-then-opt": f"""SELECT ?x ?u ?age
{_w("post")} {_w("photo")} {_G}
WHERE {{ {{ ?x sib:hashtag {_T1} ; sioc:has_creator ?u }} UNION {{ ?x sib:usertag ?u }}
  OPTIONAL {{ ?u foaf:age ?age FILTER (?age > 60) }} }}""",
    "opt-count-distinct": f"""SELECT ?u (COUNT(DISTINCT ?l) AS ?fans)
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ ?l sib:like ?post }} }}
GROUP BY ?u""",
    "long-window": f"""SELECT ?t (COUNT(*) AS ?n)
{_w("post", 60, 5)}
WHERE {{ ?post sib:hashtag ?t }}
GROUP BY ?t ORDER BY DESC(?n) ?t LIMIT 5""",
    "min-str": f"""SELECT ?u (MIN(?c) AS ?first)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u ; sioc:content ?c }}
GROUP BY ?u""",
    "exists-window": f"""SELECT ?post
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u FILTER EXISTS {{ ?l sib:like ?post }} }}""",
    "order-only": f"""SELECT ?r ?lat
{_w("gps")}
WHERE {{ ?r geo:lat ?lat }} ORDER BY DESC(?lat)""",
    "having-no-group": f"""SELECT (COUNT(*) AS ?n)
{_w("postlike")}
WHERE {{ ?l sib:like ?p }} HAVING (COUNT(*) > 5)""",
    "group-order": f"""SELECT ?u (COUNT(*) AS ?n)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u }} GROUP BY ?u ORDER BY ?u""",
    "alias-group": f"""SELECT ?who (COUNT(*) AS ?n)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u BIND (?u AS ?who) }} GROUP BY ?who""",
    "sample-group": f"""SELECT ?p (SAMPLE(?l) AS ?someone) (COUNT(*) AS ?n)
{_w("postlike")}
WHERE {{ ?l sib:like ?p }} GROUP BY ?p""",
    "opt-avg": f"""SELECT ?post (AVG(?age) AS ?a)
{_w("post")} {_w("postlike")} {_G}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ ?l sib:like ?post . ?l foaf:age ?age }} }}
GROUP BY ?post""",
    "subselect-join": f"""SELECT ?u ?n ?age
{_w("post")} {_G}
WHERE {{ {{ SELECT ?u (COUNT(*) AS ?n) WHERE {{ ?post sioc:has_creator ?u }} GROUP BY ?u }} ?u foaf:age ?age }}""",
    "values-undef": f"""SELECT ?post ?tag
{_w("post")}
WHERE {{ ?post sib:hashtag ?tag ; sioc:has_creator ?u VALUES (?tag ?u) {{ ({_T1} UNDEF) ({_T2} {_U0}) }} }}""",
    "ask-not-exists": f"""ASK
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u FILTER NOT EXISTS {{ ?l sib:like ?post }} }}""",
    "two-exists": f"""SELECT ?post
{_w("post")} {_w("postlike")} {_G}
WHERE {{ ?post sioc:has_creator ?u FILTER EXISTS {{ ?l sib:like ?post }} FILTER EXISTS {{ {_U0} foaf:knows ?u }} }}""",
    "minus-stream": f"""SELECT ?post
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u MINUS {{ ?l sib:like ?post }} }}""",
    "limit-group": f"""SELECT ?u (COUNT(*) AS ?n)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u }} GROUP BY ?u LIMIT 100""",
    "reduced": f"""SELECT REDUCED ?u
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u }}""",
    "strdt-proj": f"""SELECT ?r (STRDT(STR(?lat), xsd:string) AS ?s) (xsd:integer(FLOOR(?lat)) AS ?deg)
{_w("gps")}
WHERE {{ ?r geo:lat ?lat }}""",
    "union-top-k": f"""SELECT ?x (COUNT(*) AS ?n)
{_w("post")} {_w("photo")}
WHERE {{ {{ ?x sib:hashtag ?t }} UNION {{ ?x sib:usertag ?t }} }}
GROUP BY ?x ORDER BY DESC(?n) ?x LIMIT 3""",
    "path-alt-order": f"""SELECT DISTINCT ?u
{_w("photo")}
WHERE {{ ?item sioc:has_creator|sib:usertag ?u }} ORDER BY ?u LIMIT 5""",
    "two-opt-binds": f"""SELECT ?post ?a2 ?city
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ ?u foaf:age ?age BIND (?age * 2 AS ?a2) }}
  OPTIONAL {{ ?u foaf:based_near ?c BIND (STR(?c) AS ?city) }} }}""",
    # ---- wave 2n (helper U): more shapes users of a stream engine write
    "minus-static": f"""SELECT ?post ?u
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u MINUS {{ ?u foaf:age ?a FILTER (?a < 25) }} }}""",
    "not-exists-window": f"""SELECT ?post ?u
{_w("post")} {_w("postlike")}
WHERE {{ ?post sioc:has_creator ?u ; sib:hashtag ?t FILTER NOT EXISTS {{ ?l sib:like ?post }} }}""",
    "substr-lcase-proj": f"""SELECT ?post (SUBSTR(?c, 1, 6) AS ?head) (LCASE(STR(?u)) AS ?lu)
{_w("post")}
WHERE {{ ?post sioc:content ?c ; sioc:has_creator ?u }}""",
    "num-funcs-proj": f"""SELECT ?r (CEIL(?lat) AS ?c) (FLOOR(?long) AS ?f) (ABS(?lat - ?long) AS ?d)
{_w("gps")}
WHERE {{ ?r geo:lat ?lat ; geo:long ?long }}""",
    "datatype-filter": f"""SELECT ?r ?lat
{_w("gps")}
WHERE {{ ?r geo:lat ?lat FILTER (DATATYPE(?lat) = xsd:double && isLiteral(?lat)) }}""",
    "isiri-filter": f"""SELECT ?post ?t
{_w("post")}
WHERE {{ ?post sib:hashtag ?t FILTER (isIRI(?t) && !isBlank(?post)) }}""",
    "lang-eq-static": f"""SELECT ?post ?n
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:name ?n FILTER (LANG(?n) = "") }}""",
    "nested-agg": f"""SELECT (MAX(?n) AS ?most) (AVG(?n) AS ?mean)
{_w("postlike")}
WHERE {{ {{ SELECT ?post (COUNT(*) AS ?n) WHERE {{ ?l sib:like ?post }} GROUP BY ?post }} }}""",
    "distinct-union": f"""SELECT DISTINCT ?u
{_w("post")} {_w("photo")}
WHERE {{ {{ ?x sioc:has_creator ?u }} UNION {{ ?x sib:usertag ?u }} }}""",
    "having-count-distinct": f"""SELECT ?u (COUNT(DISTINCT ?t) AS ?tags)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u ; sib:hashtag ?t }}
GROUP BY ?u HAVING (COUNT(DISTINCT ?t) >= 2)""",
    "bind-chain": f"""SELECT ?r ?c
{_w("gps")}
WHERE {{ ?r geo:lat ?lat BIND (?lat * 2 AS ?a) BIND (?a + 1 AS ?b) BIND (STR(?b) AS ?c) }}""",
    "values-middle": f"""SELECT ?post ?u ?t
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u . VALUES ?t {{ {_T1} {_T3} }} ?post sib:hashtag ?t }}""",
    "city-count-order": f"""SELECT ?city (COUNT(*) AS ?n)
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:based_near ?city }}
GROUP BY ?city ORDER BY DESC(?n) ?city LIMIT 5""",
    "opt-in-union-both": f"""SELECT ?x ?u ?age
{_w("post")} {_w("photo")} {_G}
WHERE {{ {{ ?x sioc:has_creator ?u OPTIONAL {{ ?u foaf:age ?age FILTER (?age > 60) }} }}
  UNION {{ ?x sib:usertag ?u }} }}""",
    "path-plus-window": f"""SELECT ?post ?f
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:based_near+ ?f }}""",
    "subselect-join-max": f"""SELECT ?u ?m ?city
{_w("gps")} {_G}
WHERE {{ {{ SELECT ?u (MAX(?lat) AS ?m) WHERE {{ ?r sib:user ?u ; geo:lat ?lat }} GROUP BY ?u }} ?u foaf:based_near ?city }}""",
    "concat-distinct-sep": f"""SELECT ?u (GROUP_CONCAT(DISTINCT STR(?t); separator=",") AS ?tags)
{_w("post")}
WHERE {{ ?post sioc:has_creator ?u ; sib:hashtag ?t }}
GROUP BY ?u""",
    "contains-proj": f"""SELECT ?post (CONTAINS(?c, "user 1") AS ?one) (STRENDS(?c, "7") AS ?seven)
{_w("post")}
WHERE {{ ?post sioc:content ?c }}""",
    "sum-if": f"""SELECT ?u (SUM(IF(?lat > 56, 1, 0)) AS ?north) (COUNT(*) AS ?n)
{_w("gps")}
WHERE {{ ?r sib:user ?u ; geo:lat ?lat }}
GROUP BY ?u""",
    "opt-no-own-flag": f"""SELECT ?post ?u ?friend
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ {_U0} foaf:knows ?u BIND (true AS ?friend) }} }}""",
    "filter-or-exists": f"""SELECT ?post
{_w("post")} {_w("postlike")}
WHERE {{ ?post sib:hashtag ?t FILTER (?t = {_T1} || EXISTS {{ ?l sib:like ?post }}) }}""",
    "nested-opt-static": f"""SELECT ?post ?u ?c ?lbl
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u OPTIONAL {{ ?u foaf:based_near ?c OPTIONAL {{ ?c rdfs:label ?lbl }} }} }}""",
    "union-opt-count": f"""SELECT ?u (COUNT(?l) AS ?likes)
{_w("post")} {_w("photo")} {_w("postlike")}
WHERE {{ {{ ?x sioc:has_creator ?u OPTIONAL {{ ?l sib:like ?x }} }} UNION {{ ?x sib:usertag ?u OPTIONAL {{ ?l sib:like ?x }} }} }}
GROUP BY ?u""",
}


def run(only: list[str] | None, minutes: float, say) -> list[dict]:
    names = [n for n in SHAPES if not only or n in only]
    ids = {f"S{k + 1:02d}": n for k, n in enumerate(SHAPES) if n in names}
    texts = {q: _P + SHAPES[n] for q, n in ids.items()}
    wl = bs.load_lsbench(list(ids), minutes, bs.SMALL_RATE, 1000, 0, say, name="shape-probe", texts=texts)
    runs = {"jindou": bs.run_jindou(wl, True, say),
            "csparql-composite": bs.run_composite(wl, say, "woken")}
    s = bs.summarize(wl, runs)
    out = []
    for r in s["queries"]:
        j = r["peers"]["jindou"]
        c = r["peers"]["csparql-composite"]
        out.append({"id": r["query"], "shape": ids[r["query"]], "paths": j.get("paths"),
                    "jindou_ms": j["median_ms"], "composite_ms": c["median_ms"],
                    "ratio": r["ratios"]["csparql-composite/jindou"], "disagree": r["disagreements"],
                    "rows": r["result_rows_median"], "errors": j["errors"]})
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| id | shape | maintained / generated / instants | jindou median ms | composite woken ms | ratio | disagree | rows |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = "/".join(str(x) for x in r["paths"]) if r["paths"] else "-"
        lines.append(f"| {r['id']} | {r['shape']} | {p} | {r['jindou_ms']} | {r['composite_ms']} | "
                     f"{r['ratio']} | {r['disagree']} | {r['rows']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.shape_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--only", default="", help="shape names, comma-separated")
    a = ap.parse_args(argv)
    rows = run([x for x in a.only.split(",") if x], a.minutes, lambda m: print(m, file=sys.stderr))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
