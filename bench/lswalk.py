"""Stream-WatDiv-style continuous queries over the LSBench data: BGPs drawn by random walks.

Why: Stream WatDiv (seed 004) tests stream engines with conjunctive queries its generator draws
by a random walk over the data graph -- linear, star, snowflake and mixed shapes of 2 to ~8
patterns, pure stream or stream joined with static data, with some nodes fixed to constants
(the "placeholders"). Queries written by hand (CityBench's, L1-L7) are a handful of shapes; a fast
path that holds only for them fails here. ``python -m bench streams --workload lsbench-walk``.

The walk (:func:`queries`): start at a random triple of the first ``WALK_S`` seconds of a random stream; then
repeatedly pick a node of the query graph (an IRI, not a class: an ``rdf:type`` object is never
expanded, its degree is the whole class) and one of its triples, in the streams' first seconds or
in the static graph, as subject or object, that is not already a pattern, until the query has its
size (drawn uniformly from 2..``max_size``). Nodes become variables; each walk fixes 0-2 of them
to the constant it walked through (never all nodes of a pattern). Every stream a pattern's triple
came from gets a window (RANGE 5/10/15 s, STEP 1 s, a quarter of them tumbling), the static graph
a ``FROM`` when a triple of it was walked. A query answering more than :data:`MAX_ROWS` rows over
the streams' first ``WALK_S`` seconds (checked with pyoxigraph) is drawn again. The projection is every variable, or (a third of the
queries) its first ``1 + k`` variables with DISTINCT.
"""

from __future__ import annotations

import random
from collections import defaultdict

from bench.lsbench import _PREFIXES, RDF_TYPE, STATIC_GRAPH, LSData

__all__ = ["queries"]

#: seconds of each stream's start the walk reads
WALK_S = 20
#: rows over the walk's seconds above which a drawn query is drawn again (a walk through hubs
#: of the friend graph can answer millions of rows per window: a result size, not a window floor)
MAX_ROWS = 2000
_TYPE = f"<{RDF_TYPE}>"


def _graph(data: LSData) -> tuple[dict, dict]:
    """node -> [(s, p, o, source)] (both directions), and the stream triples the walk starts from."""
    adj: dict = defaultdict(list)
    starts: dict = defaultdict(list)    # stream -> its triples the walk may start from

    def add(t, src):
        s, p, o = t
        adj[s].append((s, p, o, src))
        if o.startswith("<") and p != _TYPE:
            adj[o].append((s, p, o, src))

    for t in data.static:
        add(t, None)
    for iri, els in data.streams.items():
        t_end = data.start_ms + WALK_S * 1000
        for tau, trs in els:
            if tau > t_end:
                break
            for t in trs:
                add(t, iri)
                starts[iri].append((*t, iri))
    return adj, starts


def _walk(r: random.Random, adj: dict, starts: dict, size: int) -> list:
    pats = [r.choice(starts[r.choice(sorted(starts))])]   # a stream first: likes would dominate
    seen = {pats[0][:3]}
    tries = 0
    while len(pats) < size and tries < 50:
        tries += 1
        s, p, o, _ = r.choice(pats)
        node = r.choice([s, o] if o.startswith("<") and p != _TYPE else [s])
        cand = adj.get(node)
        if not cand:
            continue
        t = r.choice(cand)
        if t[:3] in seen:
            continue
        seen.add(t[:3])
        pats.append(t)
    return pats


def _window(r: random.Random, iri: str) -> str:
    rng = r.choice((5, 10, 15))
    step = rng if r.random() < 0.25 else 1
    return f"FROM STREAM <{iri}> [RANGE {rng}s STEP {step}s]"


def _query(r: random.Random, pats: list) -> tuple[str, str]:
    """The query's C-SPARQL text, and its BGP (for the size check)."""
    nodes: dict[str, str] = {}    # walked node -> its variable (a class stays a constant)
    for s, p, o, _ in pats:
        nodes.setdefault(s, f"?v{len(nodes)}")
        if p != _TYPE:
            nodes.setdefault(o, f"?v{len(nodes)}")
    # fix 0-2 nodes to their constants, never every node of a pattern
    fixed: set[str] = set()
    for x in r.sample(list(nodes), min(len(nodes), r.choice((0, 1, 1, 2)))):
        if all(sum(1 for y in (s, o) if y in nodes and y not in fixed | {x}) > 0 for s, _p, o, _ in pats):
            fixed.add(x)

    def term(x):
        return x if x in fixed or x not in nodes else nodes[x]

    body = [f"  {term(s)} {p} {term(o)} ." for s, p, o, _ in pats]
    vars_ = list(dict.fromkeys(v for s, _p, o, _ in pats for v in (term(s), term(o)) if v.startswith("?")))
    if r.random() < 1 / 3 and len(vars_) > 1:
        head = "SELECT DISTINCT " + " ".join(vars_[:1 + r.randrange(len(vars_) - 1)])
    else:
        head = "SELECT " + " ".join(vars_)
    streams = list(dict.fromkeys(src for *_t, src in pats if src is not None))
    froms = [_window(r, s) for s in streams]
    if any(src is None for *_t, src in pats):
        froms.append(f"FROM <{STATIC_GRAPH}>")
    where = "WHERE {\n" + "\n".join(body) + "\n}"
    return _PREFIXES + head + "\n" + "\n".join(froms) + "\n" + where, where


def queries(data: LSData, n: int = 16, seed: int = 0, max_size: int = 8) -> dict[str, str]:
    """``n`` random-walk queries over ``data`` as ``{"W01": text, ...}`` (C-SPARQL text without
    ``REGISTER QUERY ... AS``), seeded by ``seed``."""
    adj, starts = _graph(data)
    sample = _sample_store(data)
    out = {}
    for i in range(n):
        r = random.Random(f"lswalk:{seed}:{i}")
        for _ in range(50):
            text, where = _query(r, _walk(r, adj, starts, r.randint(2, max_size)))
            q = f"SELECT (COUNT(*) AS ?n) WHERE {{ SELECT * {where} LIMIT {MAX_ROWS + 1} }}"
            if int(next(iter(sample.query(q)))["n"].value) <= MAX_ROWS:
                break
        out[f"W{i + 1:02d}"] = text
    return out


def _sample_store(data: LSData):
    """pyoxigraph holding the static graph and the streams' first ``WALK_S`` seconds as one
    default graph: a drawn query answering more than :data:`MAX_ROWS` rows there is drawn again."""
    import pyoxigraph as ox  # noqa: PLC0415

    nt = [f"{s} {p} {o} .\n" for s, p, o in data.static]
    t_end = data.start_ms + WALK_S * 1000
    for els in data.streams.values():
        nt += [f"{s} {p} {o} .\n" for tau, trs in els if tau <= t_end for s, p, o in trs]
    st = ox.Store()
    st.bulk_load("".join(nt).encode(), ox.RdfFormat.N_TRIPLES)
    return st
