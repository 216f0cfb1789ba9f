"""docs/CONTINUOUS_QUERIES.md: its examples register, and the same query written in C-SPARQL,
RSP-QL and CQELS-QL gives the same answers at every instant."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from engine.database import Database
from engine.stream.manager import StreamManager

DOC = Path(__file__).resolve().parent.parent / "docs" / "CONTINUOUS_QUERIES.md"
EX = "http://example.org/"


def examples() -> dict[str, str]:
    text = DOC.read_text()
    return {m.group(1): m.group(2) for m in
            re.finditer(r"<!-- example: (\w+) -->\n```sparql\n(.*?)```", text, re.S)}


def answers(m: StreamManager, name: str) -> dict[int, list]:
    out = {}
    for e in m.log(name).since(None, from_t=-1):
        if e.event == "result":
            doc = orjson.loads(e.data)
            out[e.id] = sorted(tuple(sorted((k, v["value"]) for k, v in b.items()))
                               for b in doc["results"]["bindings"])
    return out


def test_the_same_query_in_each_syntax_gives_the_same_answers():
    ex = examples()
    assert set(ex) == {"csparql", "rspql", "cqels", "timestamp"}
    db = Database()
    db.update(f"PREFIX : <{EX}> INSERT DATA {{ :s1 :in :room1 . :s2 :in :room1 . :s3 :in :room2 }}")
    m = StreamManager(db)
    try:
        m.register_stream("obs", EX + "obs")
        m.heartbeat("obs", 0)
        names = []
        for k, syntax in enumerate(("csparql", "rspql", "cqels")):
            info = m.register_query(ex[syntax].replace("hot", f"hot{k}"))
            names.append(info["id"])
        assert m.register_query(ex["timestamp"])["id"] == "seen"
        rows = []
        for i in range(60):
            t = 250 + i * 400
            o = f"<{EX}o{i}>"
            rows.append({"s": o, "p": f"<{EX}by>", "o": f"<{EX}s{1 + i % 3}>", "t": t})
            rows.append({"s": o, "p": f"<{EX}value>", "o": f'"{(i * 7) % 23}"^^<http://www.w3.org/2001/XMLSchema#integer>',
                         "t": t})
        assert m.ingest_ndjson("obs", b"\n".join(orjson.dumps(r) for r in rows))["rejected"] == 0
        m.heartbeat("obs", 30_000)
        assert m.drain(60)
        got = [answers(m, n) for n in names]
        assert len(got[0]) >= 25 and any(got[0].values())
        assert got[0] == got[1] == got[2]
        # the sensors of room 1 only, each with its highest value in the window
        assert {dict(r)["sensor"] for a in got[0].values() for r in a} == {f"{EX}s1", f"{EX}s2"}
        seen = answers(m, "seen")
        last = seen[10_000]
        assert dict((dict(r)["sensor"], int(dict(r)["last"])) for r in last) == {
            f"{EX}s1": 9850, f"{EX}s2": 9050, f"{EX}s3": 9450}
    finally:
        m.close()
        db.close()
