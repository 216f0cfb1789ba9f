"""Conformance: very short windows (1-7 ms ranges and steps, CQELS [NOW]), dense and equal
timestamps, POSTs interleaved with evaluation, and unchanged runs reported as idle events --
every instant against pyoxigraph over the window's triples."""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pyoxigraph as ox
import pytest

from engine.database import Database
from engine.stream.manager import StreamManager

EX = "http://ex.org/"
PFX = f"PREFIX : <{EX}> "
WINS = [(1, 1), (3, 2), (2, 5), (7, 3), (1, 4)]
END = 100
COUNT = "SELECT ?x (COUNT(*) AS ?n) WHERE { ?x :p ?y } GROUP BY ?x"
ROWS = "SELECT ?x ?y WHERE { ?x :p ?y }"


def answer(rows, r, t, query) -> Counter:
    st = ox.Store()
    w = {(s, p, o) for s, p, o, tau in rows if t - r < tau <= t}
    st.load("".join(f"{s} {p} {o} .\n" for s, p, o in w).encode(), format=ox.RdfFormat.N_TRIPLES)
    res = st.query(PFX + query)
    return Counter(tuple(str(x[v.value]) for v in res.variables) for x in res)


def got(doc) -> Counter:
    def term(b):
        return f"<{b['value']}>" if b["type"] == "uri" else f'"{b["value"]}"^^<{b["datatype"]}>'
    return Counter(tuple(term(b[v]) for v in doc["head"]["vars"]) for b in doc["results"]["bindings"])


@pytest.mark.parametrize("seed", range(4))
def test_millisecond_windows_match_the_oracle(seed):
    rng = random.Random(seed)
    m = StreamManager(Database(shards=1), idle_after=2 if seed % 2 else 1000)
    try:
        m.register_stream("s", EX + "s")
        m.heartbeat("s", 0)
        for i, (r, st) in enumerate(WINS):
            m.register_query(PFX + f"REGISTER QUERY q{i} AS SELECT ?x (COUNT(*) AS ?n) FROM STREAM :s "
                                   f"[RANGE {r}ms STEP {st}ms] WHERE {{ ?x :p ?y }} GROUP BY ?x")
        m.register_query(PFX + "REGISTER QUERY now COMPUTED EVERY 1ms AS SELECT ?x ?y "
                               "WHERE { STREAM <http://ex.org/s> [NOW] { ?x :p ?y } }")
        rows, t = [], 0
        while t < END - 20:
            t += rng.choice((0, 0, 1, 2, 5))
            rows.append((f"<{EX}a{rng.randrange(3)}>", f"<{EX}p>", f"<{EX}b{rng.randrange(4)}>", t))
        for i in range(0, len(rows), 4):
            body = b"\n".join(orjson.dumps({"s": s, "p": p, "o": o, "t": tau}) for s, p, o, tau in rows[i:i + 4])
            assert m.ingest_ndjson("s", body)["rejected"] == 0
            if rng.random() < 0.3:
                assert m.drain(5)
        m.heartbeat("s", END + 1)
        assert m.drain(20)
        idles = 0
        for i, (r, st) in enumerate([*WINS, (1, 1)]):
            name, query = (f"q{i}", COUNT) if i < len(WINS) else ("now", ROWS)
            covered = []
            for e in m.log(name).since(None, from_t=-1):
                if e.event == "idle":
                    d = orjson.loads(e.data)
                    base = answer(rows, r, d["same_as"], query)
                    for x in range(d["from"], d["to"] + 1, st):
                        assert answer(rows, r, x, query) == base, (name, x)
                        covered.append(x)
                    idles += 1
                else:
                    assert got(orjson.loads(e.data)) == answer(rows, r, e.id, query), (name, e.id)
                    covered.append(e.id)
            assert covered == list(range(0, END + 1, st)), name
        assert idles > 0 or seed % 2 == 0
    finally:
        m.close()
