"""LSBench-style social-network streams and continuous queries L1-L7 (seeded, deterministic).

After LSBench as the Wukong+S paper uses it (§6.1, Table 1): a *static* graph of
user profiles and the friend (``foaf:knows``) graph, and five timestamped streams

=============  =====================================================  ===============  ==========
stream         one element                                            triples/element  share
=============  =====================================================  ===============  ==========
post (PO)      ``?p a sioc:Post; sioc:has_creator ?u; sib:hashtag ?t;  4                10 / 133.5
               sioc:content "..."``
postlike (PO-L) ``?u sib:like ?p``                                    1                86 / 133.5
photo (PH)     ``?ph a sib:Photo; sioc:has_creator ?u; sib:hashtag ?t; 4-5              10 / 133.5
               sib:usertag ?friend`` (1-2 tagged friends)
photolike (PH-L) ``?u sib:like ?ph``                                  1                7.5 / 133.5
gps (GPS)      ``?r sib:user ?u; geo:lat ?lat; geo:long ?long``        3                20 / 133.5
=============  =====================================================  ===============  ==========

The shares are the paper's default stream rates (Table 7: 10K, 86K, 10K, 7.5K
and 20K triples/s); ``rate`` scales their sum (triples per second of event time).
Elements arrive as a Poisson process per stream (one RNG per stream, seeded from
``seed`` and the stream's name), timestamps are integer ms of event time.

* Friend graph: preferential attachment (Barabási-Albert, ``degree/2`` edges per
  new user), stored in both directions, so user 0 is a hub (the constant of the
  selective queries L2, L3).
* Creators of posts and photos are drawn proportionally to degree + 1 (hubs are
  active); hashtags follow a Zipf law over 50 tags.
* A like picks a recent post/photo (creation time <= the like's; how far back is
  exponential, mean ``LIKE_LAG_S`` seconds of items); the liker is a friend of the
  creator with probability 0.7 (post) / 0.6 (photo), else any user. Posts and
  photos made in the minute before the start exist (they can be liked) but are not
  streamed.
* GPS readings: a uniformly drawn user near the city they are ``foaf:based_near``.

Queries (:func:`queries`, C-SPARQL text without ``REGISTER QUERY ... AS``), in the
spirit of the paper's L1-L6 (Table 1 stream usage), plus L7:

* L1 pure stream, selective: posts with hashtag tag/1 (RANGE 10s STEP 1s).
* L2 stream ⋈ static, selective: posts of user 0's friends (RANGE 5s STEP 1s).
* L3 stream ⋈ static + FILTER, tumbling: GPS readings of user 0's friends north
  of 56° (RANGE 5s STEP 5s).
* L4 pure stream aggregate, non-selective: likes per post, HAVING >= 3
  (RANGE 10s STEP 1s).
* L5 two streams ⋈ static: photos liked by a friend of their creator
  (photo RANGE 10s, photo likes RANGE 5s, STEP 1s).
* L6 two streams ⋈ static + FILTER, tumbling: posts liked by a friend of their
  creator who is under 25 (RANGE 5s STEP 5s on both).
* L7 two streams ⋈ static 2-hop, aggregate: per photo creator, the likes by
  friends of their friends (RANGE 30s STEP 1s on both): a long sliding window
  over a join that fans out, where incremental maintenance pays.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from dataclasses import dataclass

__all__ = ["LSData", "generate", "queries", "STREAMS", "STATIC_GRAPH"]

NS = "http://www.ins.cwi.nl/sib/"
SIB = NS + "vocabulary/"
SIOC = "http://rdfs.org/sioc/ns#"
FOAF = "http://xmlns.com/foaf/0.1/"
GEO = "http://www.w3.org/2003/01/geo/wgs84_pos#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
XSD = "http://www.w3.org/2001/XMLSchema#"

STATIC_GRAPH = NS + "graph/social"
STREAMS = {  # short name -> stream IRI, in generation order
    "post": NS + "stream/post",
    "postlike": NS + "stream/postlike",
    "photo": NS + "stream/photo",
    "photolike": NS + "stream/photolike",
    "gps": NS + "stream/gps",
}
SHARES = {"post": 10.0, "postlike": 86.0, "photo": 10.0, "photolike": 7.5, "gps": 20.0}
ELEMENT_TRIPLES = {"post": 4.0, "postlike": 1.0, "photo": 4.5, "photolike": 1.0, "gps": 3.0}
DEFAULT_START_MS = 1_704_067_200_000       # 2024-01-01T00:00:00Z
HISTORY_S = 60                             # posts/photos made before the start (likeable, not streamed)
LIKE_LAG_S = 6.0
N_TAGS = 50
N_CITIES = 25
FOCUS_USER = 0

Triple = tuple[str, str, str]


def iri(x: str) -> str:
    return f"<{x}>"


def user(i: int) -> str:
    return iri(f"{NS}user/{i}")


def lit_int(n: int) -> str:
    return f'"{int(n)}"^^<{XSD}integer>'


def lit_double(x: float) -> str:
    return f'"{x:.5f}"^^<{XSD}double>'


def lit_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class LSData:
    users: int
    rate: float
    seconds: float
    seed: int
    start_ms: int
    end_ms: int
    static: list[Triple]                               # the triples of STATIC_GRAPH
    streams: dict[str, list[tuple[int, list[Triple]]]]  # stream IRI -> (tau, triples), tau non-decreasing

    def static_nt(self) -> bytes:
        return "".join(f"{s} {p} {o} .\n" for s, p, o in self.static).encode("utf-8")

    def n_stream_triples(self) -> int:
        return sum(len(trs) for els in self.streams.values() for _t, trs in els)

    def digest(self) -> str:
        h = hashlib.sha256()
        for s, p, o in self.static:
            h.update(f"{s} {p} {o}\n".encode())
        for name, els in self.streams.items():
            h.update(name.encode())
            for tau, trs in els:
                h.update(str(tau).encode())
                for s, p, o in trs:
                    h.update(f"{s} {p} {o}\n".encode())
        return h.hexdigest()


def _friend_graph(n: int, m: int, rng: random.Random) -> list[list[int]]:
    """Barabási-Albert: users 0..m form a clique, each later user links to m distinct earlier ones
    drawn proportionally to their degree."""
    m = max(1, min(m, n - 1)) if n > 1 else 0
    adj: list[set[int]] = [set() for _ in range(n)]
    ends: list[int] = []
    for i in range(min(n, m + 1)):
        for j in range(i):
            adj[i].add(j)
            adj[j].add(i)
            ends += [i, j]
    for i in range(m + 1, n):
        chosen: set[int] = set()
        while len(chosen) < m:
            chosen.add(ends[rng.randrange(len(ends))])
        for j in sorted(chosen):
            adj[i].add(j)
            adj[j].add(i)
            ends += [i, j]
    return [sorted(a) for a in adj]


def _arrivals(rng: random.Random, per_s: float, t0_ms: int, t1_ms: int) -> list[int]:
    """Poisson arrivals in [t0_ms, t1_ms] (integer ms)."""
    out: list[int] = []
    if per_s <= 0:
        return out
    t = float(t0_ms)
    while True:
        t += rng.expovariate(per_s) * 1000.0
        if t > t1_ms:
            return out
        out.append(int(t))


def generate(users: int = 1000, rate: float = 2000.0, seconds: float = 60.0, seed: int = 0,
             start_ms: int = DEFAULT_START_MS, degree: int = 10) -> LSData:
    """Static graph + five streams for ``seconds`` of event time from ``start_ms`` at ``rate``
    triples/s in total (deterministic for a seed)."""
    if users < 2:
        raise ValueError("need at least 2 users")
    end_ms = start_ms + int(round(seconds * 1000))

    def rng_for(what: str) -> random.Random:
        return random.Random(f"lsbench:{seed}:{what}")

    # ---------------------------------------------------------------- static graph
    r = rng_for("static")
    static: list[Triple] = []
    ty, a_person = iri(RDF_TYPE), iri(FOAF + "Person")
    cities = []
    for c in range(N_CITIES):
        lat, lon = 54.6 + 2.8 * r.random(), 8.2 + 4.3 * r.random()
        cities.append((lat, lon))
        ci = iri(f"{NS}city/{c}")
        static += [(ci, ty, iri(SIB + "City")), (ci, iri(RDFS + "label"), lit_str(f"City {c}")),
                   (ci, iri(GEO + "lat"), lit_double(lat)), (ci, iri(GEO + "long"), lit_double(lon))]
    city_w = [1.0 / (c + 1) for c in range(N_CITIES)]
    home = r.choices(range(N_CITIES), weights=city_w, k=users)
    ages = [r.randint(16, 70) for _ in range(users)]
    for i in range(users):
        u = user(i)
        static += [(u, ty, a_person), (u, iri(FOAF + "name"), lit_str(f"User {i}")),
                   (u, iri(FOAF + "age"), lit_int(ages[i])), (u, iri(FOAF + "based_near"), iri(f"{NS}city/{home[i]}"))]
    friends = _friend_graph(users, degree // 2, rng_for("friends"))
    knows = iri(FOAF + "knows")
    for i, fs in enumerate(friends):
        static += [(user(i), knows, user(j)) for j in fs]
    act_cum = []
    acc = 0.0
    for fs in friends:
        acc += len(fs) + 1.0
        act_cum.append(acc)
    tag_cum = []
    acc = 0.0
    for k in range(N_TAGS):
        acc += 1.0 / (k + 1)
        tag_cum.append(acc)

    def creator(rr: random.Random) -> int:
        return rr.choices(range(users), cum_weights=act_cum)[0]

    def tag(rr: random.Random) -> str:
        return iri(f"{NS}tag/{rr.choices(range(N_TAGS), cum_weights=tag_cum)[0]}")

    total_share = sum(SHARES.values())

    def per_s(name: str) -> float:
        return rate * SHARES[name] / total_share / ELEMENT_TRIPLES[name]

    hist_ms = start_ms - HISTORY_S * 1000
    streams: dict[str, list[tuple[int, list[Triple]]]] = {}
    creators: dict[str, tuple[list[int], list[str], list[int]]] = {}  # kind -> (taus, item iris, creator ids)

    # ---------------------------------------------------------------- posts and photos
    for kind, cls, prefix in (("post", SIOC + "Post", "post"), ("photo", SIB + "Photo", "photo")):
        rr = rng_for(kind)
        els: list[tuple[int, list[Triple]]] = []
        taus, items, owners = [], [], []
        for k, tau in enumerate(_arrivals(rr, per_s(kind), hist_ms, end_ms)):
            it = iri(f"{NS}{prefix}/{k}")
            c = creator(rr)
            trs = [(it, ty, iri(cls)), (it, iri(SIOC + "has_creator"), user(c)), (it, iri(SIB + "hashtag"), tag(rr))]
            if kind == "post":
                trs.append((it, iri(SIOC + "content"), lit_str(f"post {k} of user {c}")))
            else:
                fs = friends[c]
                for f in sorted(set(rr.sample(fs, min(len(fs), rr.choice((1, 1, 2)))))):
                    trs.append((it, iri(SIB + "usertag"), user(f)))
            taus.append(tau)
            items.append(it)
            owners.append(c)
            if tau >= start_ms:
                els.append((tau, trs))
        streams[STREAMS[kind]] = els
        creators[kind] = (taus, items, owners)

    # ---------------------------------------------------------------- likes
    like = iri(SIB + "like")
    for kind, target, p_friend in (("postlike", "post", 0.7), ("photolike", "photo", 0.6)):
        rr = rng_for(kind)
        taus, items, owners = creators[target]
        lag_items = max(1.0, per_s(target) * LIKE_LAG_S)
        els = []
        for tau in _arrivals(rr, per_s(kind), start_ms, end_ms):
            n = bisect.bisect_right(taus, tau)
            if n == 0:
                continue
            j = n - 1 - min(n - 1, int(rr.expovariate(1.0 / lag_items)))
            c = owners[j]
            if friends[c] and rr.random() < p_friend:
                liker = rr.choice(friends[c])
            else:
                liker = rr.randrange(users)
            els.append((tau, [(user(liker), like, items[j])]))
        streams[STREAMS[kind]] = els

    # ---------------------------------------------------------------- GPS
    rr = rng_for("gps")
    els = []
    for k, tau in enumerate(_arrivals(rr, per_s("gps"), start_ms, end_ms)):
        u = rr.randrange(users)
        lat, lon = cities[home[u]]
        rd = iri(f"{NS}gps/{k}")
        els.append((tau, [(rd, iri(SIB + "user"), user(u)),
                          (rd, iri(GEO + "lat"), lit_double(lat + rr.gauss(0, 0.05))),
                          (rd, iri(GEO + "long"), lit_double(lon + rr.gauss(0, 0.08)))]))
    streams[STREAMS["gps"]] = els
    streams = {STREAMS[k]: streams[STREAMS[k]] for k in STREAMS}
    return LSData(users, float(rate), float(seconds), seed, start_ms, end_ms, static, streams)


# ---------------------------------------------------------------- queries
_PREFIXES = f"""PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#>
PREFIX sioc: <{SIOC}>
PREFIX foaf: <{FOAF}>
PREFIX geo: <{GEO}>
PREFIX sib: <{SIB}>
"""


def _s(name: str) -> str:
    return f"<{STREAMS[name]}>"


def queries() -> dict[str, str]:
    """L1-L7 as C-SPARQL text (``REGISTER QUERY <name> AS `` is prepended at registration)."""
    u0, g = f"<{NS}user/{FOCUS_USER}>", f"<{STATIC_GRAPH}>"
    q = {
        # pure stream, selective, sliding
        "L1": f"""SELECT ?post ?creator
FROM STREAM {_s("post")} [RANGE 10s STEP 1s]
WHERE {{
  ?post sib:hashtag <{NS}tag/1> ;
        sioc:has_creator ?creator .
}}""",
        # stream x static, selective: the posts of a user's friends
        "L2": f"""SELECT ?friend ?post ?content
FROM STREAM {_s("post")} [RANGE 5s STEP 1s]
FROM {g}
WHERE {{
  {u0} foaf:knows ?friend .
  ?post sioc:has_creator ?friend ;
        sioc:content ?content .
}}""",
        # stream x static with a filter, tumbling
        "L3": f"""SELECT ?friend ?lat ?long
FROM STREAM {_s("gps")} [RANGE 5s STEP 5s]
FROM {g}
WHERE {{
  {u0} foaf:knows ?friend .
  ?r sib:user ?friend ;
     geo:lat ?lat ;
     geo:long ?long .
  FILTER (?lat > 56.0 && ?long < 12.0)
}}""",
        # pure stream aggregate over a sliding window: likes per post
        "L4": f"""SELECT ?post (COUNT(?liker) AS ?likes)
FROM STREAM {_s("postlike")} [RANGE 10s STEP 1s]
WHERE {{
  ?liker sib:like ?post .
}}
GROUP BY ?post
HAVING (COUNT(?liker) >= 3)""",
        # two streams x static: photos liked by a friend of their creator
        "L5": f"""SELECT ?photo ?creator ?liker
FROM STREAM {_s("photo")} [RANGE 10s STEP 1s]
FROM STREAM {_s("photolike")} [RANGE 5s STEP 1s]
FROM {g}
WHERE {{
  ?photo rdf:type sib:Photo ;
         sioc:has_creator ?creator .
  ?liker sib:like ?photo .
  ?creator foaf:knows ?liker .
}}""",
        # two streams x static with a filter, tumbling
        "L6": f"""SELECT ?post ?creator ?liker ?age
FROM STREAM {_s("post")} [RANGE 5s STEP 5s]
FROM STREAM {_s("postlike")} [RANGE 5s STEP 5s]
FROM {g}
WHERE {{
  ?post sioc:has_creator ?creator .
  ?liker sib:like ?post ;
         foaf:knows ?creator ;
         foaf:age ?age .
  FILTER (?age < 25)
}}""",
        # aggregate over a long sliding join of two streams and the static 2-hop friend graph
        # (STEP = RANGE/30; every like fans out over friends of friends): the case CQELS-style
        # maintenance is for
        "L7": f"""SELECT ?creator (COUNT(*) AS ?likes)
FROM STREAM {_s("photo")} [RANGE 30s STEP 1s]
FROM STREAM {_s("photolike")} [RANGE 30s STEP 1s]
FROM {g}
WHERE {{
  ?photo sioc:has_creator ?creator .
  ?liker sib:like ?photo .
  ?creator foaf:knows ?friend .
  ?friend foaf:knows ?liker .
}}
GROUP BY ?creator""",
    }
    return {k: _PREFIXES + v for k, v in q.items()}


def main(argv: list[str] | None = None) -> int:
    import argparse  # noqa: PLC0415
    import sys  # noqa: PLC0415

    ap = argparse.ArgumentParser(prog="python -m bench.lsbench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=2000.0, help="triples/s of event time, all streams")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    d = generate(a.users, a.rate, a.seconds, a.seed)
    print(f"static {len(d.static)} triples; streams:", file=sys.stderr)
    for s, els in d.streams.items():
        n = sum(len(t) for _tau, t in els)
        print(f"  {s}: {len(els)} elements, {n} triples ({n / max(1e-9, a.seconds):.0f}/s)", file=sys.stderr)
    print(d.digest())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

