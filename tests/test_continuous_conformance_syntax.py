"""Conformance: syntax forms of the three continuous-query languages that users write and the
earlier tests did not cover (RSP-QL's ``WINDOW ?var``, long texts), with their errors."""

from __future__ import annotations

import random

import orjson
import pytest

from engine.database import Database
from engine.errors import QuerySyntaxError
from engine.sparql.csparql import parse_continuous
from engine.stream.manager import StreamManager

EX = "http://ex.org/"
PFX = f"PREFIX : <{EX}> "
TWO = ("REGISTER RSTREAM <{n}> AS SELECT {sel} FROM NAMED WINDOW :w1 ON :s [RANGE PT10S STEP PT1S] "
       "FROM NAMED WINDOW :w2 ON :u [RANGE PT1S STEP PT1S] WHERE {{ {where} }}")


def line(s, o, t) -> bytes:
    return orjson.dumps({"s": f"<{EX}{s}>", "p": f"<{EX}p>", "o": f"<{EX}{o}>", "t": t})


def rows(m: StreamManager, name: str) -> list[dict]:
    assert m.drain(10)
    (ev,) = [e for e in m.log(name).since(None, from_t=-1) if e.event == "result"]
    return sorted(tuple(sorted((k, v["value"]) for k, v in b.items()))
                   for b in orjson.loads(ev.data)["results"]["bindings"])


def test_window_variable_ranges_over_the_declared_windows_only():
    """RSP-QL's ``WINDOW ?w { P }`` (WindowGraphPattern: 'WINDOW' VarOrIri): ?w takes each named
    window's IRI, never a stored named graph (which ``GRAPH ?w`` would also give)."""
    db = Database(shards=1)
    db.update(PFX + "INSERT DATA { GRAPH :g { :a :p :stored } :a :p :default }")
    m = StreamManager(db)
    try:
        m.register_stream("s", EX + "s")
        m.register_stream("u", EX + "u")
        m.register_query(PFX + TWO.format(n="wv", sel="?w ?y", where="WINDOW ?w { :a :p ?y }"))
        m.register_query(PFX + TWO.format(n="gv", sel="?w ?y", where="GRAPH ?w { :a :p ?y }"))
        # nested in OPTIONAL, with a WINDOW <iri> inside, next to a default-graph pattern
        m.register_query(PFX + TWO.format(n="nest", sel="?w ?z", where="?x :p ?z OPTIONAL { WINDOW ?w { "
                                          "?x :p ?y WINDOW :w1 { ?x :p ?y } } }"))
        m.ingest_ndjson("s", line("a", "b", 500))
        m.ingest_ndjson("u", line("a", "c", 600))
        m.heartbeat("s", 1001)
        m.heartbeat("u", 1001)
        assert rows(m, "wv") == [(("w", EX + "w1"), ("y", EX + "b")), (("w", EX + "w2"), ("y", EX + "c"))]
        assert rows(m, "gv") == [(("w", EX + "g"), ("y", EX + "stored")), (("w", EX + "w1"), ("y", EX + "b")),
                                 (("w", EX + "w2"), ("y", EX + "c"))]
        assert rows(m, "nest") == [(("w", EX + "w1"), ("z", EX + "default"))]
    finally:
        m.close()


@pytest.mark.parametrize(("text", "fragment"), [
    ("REGISTER RSTREAM <q> AS SELECT * FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] "
     "WHERE { WINDOW ?w ?x }", "'{' after WINDOW ?var"),
    ("REGISTER RSTREAM <q> AS SELECT * WHERE { STREAM <http://ex.org/s> [RANGE 1s SLIDE 1s] { ?a ?b ?c } "
     "WINDOW ?w { ?x ?y ?z } }", "declares none"),
    ("REGISTER RSTREAM <q> AS SELECT * FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] "
     "WHERE { WINDOW ?w { ?x ?y ?z }", "'}'"),
])
def test_window_variable_errors(text, fragment):
    with pytest.raises(QuerySyntaxError, match=fragment.replace("{", r"\{").replace("?", r"\?")):
        parse_continuous(PFX + text)


@pytest.mark.parametrize("form", ["rspql", "rspql-var", "cqels", "csparql"])
def test_long_query_texts_parse(form):
    """Texts of more than the parser's deadline-check interval (4096 tokens), also after the
    WINDOW / STREAM rewriting changed their token count."""
    big = " ".join(f"?s :p{i} ?o{i} ." for i in range(1200))
    head = {"rspql": "FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] WHERE { WINDOW :w { " + big + " } }",
            "rspql-var": "FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] WHERE { WINDOW ?w { " + big + " } }",
            "cqels": "WHERE { STREAM <http://ex.org/s> [RANGE 1s SLIDE 1s] { " + big + " } }",
            "csparql": "FROM STREAM :s [RANGE 1s STEP 1s] WHERE { " + big + " }"}[form]
    cq = parse_continuous(PFX + "REGISTER RSTREAM <q> AS SELECT ?s " + head)
    assert cq.name == "q" and len(cq.windows) == 1


F = "http://larkc.eu/csparql/sparql/jena/ext#"
TS = {
    # projection, two windows (the latest time over both), FILTER, an aggregate over it, RSP-QL,
    # and a triple no window holds (unbound)
    "proj": "REGISTER QUERY proj AS SELECT ?x ?y (f:timestamp(?x, :p, ?y) AS ?t) FROM STREAM :s [RANGE 3s STEP 1s] "
            "FROM STREAM :u [RANGE 1s STEP 500ms] WHERE { ?x :p ?y }",
    "flt": "REGISTER QUERY flt AS SELECT ?x ?y FROM STREAM :s [RANGE 3s STEP 1s] "
           "WHERE { ?x :p ?y FILTER(f:timestamp(?x, :p, ?y) >= 1500) }",
    "rsp": "REGISTER RSTREAM <rsp> AS SELECT ?x ?y (f:timestamp(?x, :p, ?y) AS ?t) FROM NAMED WINDOW :w ON :s "
           "[RANGE PT3S STEP PT1S] WHERE { WINDOW :w { ?x :p ?y } }",
    "agg": "REGISTER QUERY agg AS SELECT ?x (MAX(f:timestamp(?x, :p, ?y)) AS ?t) FROM STREAM :s [RANGE 3s STEP 1s] "
           "WHERE { ?x :p ?y } GROUP BY ?x",
    "none": "REGISTER QUERY none AS SELECT ?x ?y ?t FROM STREAM :s [RANGE 3s STEP 1s] "
            "WHERE { ?x :p ?y BIND(f:timestamp(?x, :q, ?y) AS ?t) }",
}


def test_f_timestamp_against_the_element_times():
    """f:timestamp(?s, ?p, ?o): the latest time of an element of the query's windows holding the
    triple, computed here from the elements sent (repeats of a triple at several times)."""
    rng = random.Random(3)
    data = {"s": [], "u": []}
    db = Database(shards=1)
    m = StreamManager(db)
    try:
        for st in data:
            m.register_stream(st, EX + st)
            m.heartbeat(st, 0)
        for text in TS.values():
            m.register_query(PFX + f"PREFIX f: <{F}> " + text)
        for st, rows in data.items():
            t = 0
            while t < 6000:
                t += rng.choice((0, 200, 450))
                rows.append((f"a{rng.randrange(3)}", f"b{rng.randrange(2)}", t))
            m.ingest_ndjson(st, b"\n".join(line(x, y, t) for x, y, t in rows))
            m.heartbeat(st, 7001)
        assert m.drain(20)

        def latest(spans, t):
            out: dict = {}
            for st, r in spans:
                for x, y, tau in data[st]:
                    if t - r < tau <= t:
                        out[(x, y)] = max(out.get((x, y), -1), tau)
            return out

        def evs(name):
            return {e.id: orjson.loads(e.data)["results"]["bindings"]
                    for e in m.log(name).since(None, from_t=-1) if e.event == "result"}

        def short(b, k):
            return b[k]["value"][len(EX):]

        checked = 0
        for name, spans in (("proj", [("s", 3000), ("u", 1000)]), ("rsp", [("s", 3000)])):
            for t, bs in evs(name).items():
                want = latest(spans, t)
                assert {(short(b, "x"), short(b, "y")): int(b["t"]["value"]) for b in bs} == want, (name, t)
                assert all(b["t"]["datatype"].endswith("#integer") for b in bs)
                checked += bool(want)
        for t, bs in evs("flt").items():
            want = {k for k, v in latest([("s", 3000)], t).items() if v >= 1500}
            assert {(short(b, "x"), short(b, "y")) for b in bs} == want, t
        for t, bs in evs("agg").items():
            want: dict = {}
            for (x, _), v in latest([("s", 3000)], t).items():
                want[x] = max(want.get(x, -1), v)
            assert {short(b, "x"): int(b["t"]["value"]) for b in bs} == want, t
        for t, bs in evs("none").items():
            assert bs and all("t" not in b for b in bs) or not bs, t
        assert checked > 10
    finally:
        m.close()


@pytest.mark.parametrize("text", [
    "REGISTER QUERY q AS SELECT * FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?a ?b ?c }",
    "REGISTER STREAM q AS CONSTRUCT { ?a ?b ?c } FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?a ?b ?c }",
])
def test_a_name_given_twice_must_agree(text):
    """POST /queries?name=x with a text that names itself: the same name is fine, another is a
    400 (it was silently ignored)."""
    assert parse_continuous(PFX + text, name="q").name == "q"
    with pytest.raises(QuerySyntaxError, match=r"named q in its text and other"):
        parse_continuous(PFX + text, name="other")


@pytest.mark.parametrize("head", ["REGISTER RSTREAM <http://ex.org/out/q> AS", "REGISTER ISTREAM :q AS"])
def test_an_output_iri_names_a_query_only_by_default(head):
    """RSP-QL's output IRI names the query by its last segment unless the request names it
    (``<a/out>`` and ``<b/out>`` would clash otherwise); the IRI is unchanged."""
    text = PFX + head + " SELECT * FROM NAMED WINDOW :w ON :s [RANGE PT1S STEP PT1S] WHERE { WINDOW :w { ?a ?b ?c } }"
    assert parse_continuous(text).name == "q" and parse_continuous(text).iri_named
    cq = parse_continuous(text, name="other")
    assert cq.name == "other" and not cq.iri_named


@pytest.mark.parametrize(("head", "name", "iri"), [
    ("REGISTER STREAM hot AS", "hot", None),
    ("REGISTER STREAM <http://ex.org/streams/hot> AS", "hot", EX + "streams/hot"),
    ("REGISTER STREAM :hot AS", "hot", EX + "hot"),
    ("REGISTER RSTREAM <http://ex.org/out/hot> AS", "hot", EX + "out/hot"),
    ("REGISTER ISTREAM :hot AS", "hot", EX + "hot"),
    ("REGISTER RSTREAM <hot> AS", "hot", None),      # relative: a query, no stream
])
def test_output_stream_names_and_iris(head, name, iri):
    cq = parse_continuous(PFX + head + " CONSTRUCT { ?s ?p ?o } FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?s ?p ?o }")
    assert cq.name == name and cq.output_iri == iri
    assert cq.derived == (iri is not None or head.startswith("REGISTER STREAM"))
    sel = parse_continuous(PFX + head.replace("STREAM hot", "QUERY hot") + " SELECT * FROM STREAM :s "
                           "[RANGE 1s STEP 1s] WHERE { ?s ?p ?o }") if "STREAM hot" in head else None
    assert sel is None or not sel.derived
    if not head.startswith("REGISTER STREAM"):   # an RSP-QL SELECT is never a stream
        cq = parse_continuous(PFX + head + " SELECT * FROM STREAM :s [RANGE 1s STEP 1s] WHERE { ?s ?p ?o }")
        assert not cq.derived and cq.output_iri is None
