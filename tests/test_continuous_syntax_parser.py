"""Parser of the portable continuous-query syntaxes: durations (ISO 8601 and C-SPARQL, property
round trips), RSP-QL / CQELS / REGISTER STREAM / COMPUTED EVERY forms, errors with positions,
and the HTTP 400 of a bad registration."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import QuerySyntaxError
from engine.sparql.csparql import format_duration, parse_continuous
from engine.sparql.durations import ISO_DURATION_RE, format_iso_duration, parse_iso_duration
from engine.stream.limits import MAX_DURATION_MS
from engine.stream.windows import Window

EX = "http://ex.org/"


def window_of(dur_range: str, dur_step: str) -> Window:
    cq = parse_continuous(f"REGISTER QUERY q AS SELECT * FROM STREAM <{EX}s> [RANGE {dur_range} STEP {dur_step}] "
                          "WHERE { ?s ?p ?o }")
    return cq.windows[0]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, MAX_DURATION_MS))
def test_iso_duration_round_trip(ms):
    text = format_iso_duration(ms)
    m = ISO_DURATION_RE.fullmatch(text)
    assert m is not None, text
    assert parse_iso_duration(m) == ms
    assert window_of(text, text) == Window.time(ms, ms)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, MAX_DURATION_MS), st.booleans(), st.sampled_from([str.lower, str.upper]))
def test_csparql_duration_round_trip_with_spaces(ms, space, case):
    text = format_duration(ms)
    num = text.rstrip("smhd")
    unit = case(text[len(num):])
    spelled = f"{num} {unit}" if space else f"{num}{unit}"
    assert window_of(spelled, "1 s") == Window.time(ms, 1000)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 99), st.integers(0, 999)), min_size=4, max_size=4),
       st.sets(st.sampled_from(["D", "H", "M", "S"]), min_size=1))
def test_iso_duration_components(parts, used):
    """Any combination of day/hour/minute/second amounts (seconds with up to 3 decimals)."""
    text, total = "P", Decimal(0)
    for (whole, frac), unit, factor in zip(parts, "DHMS", (86_400_000, 3_600_000, 60_000, 1000), strict=True):
        if unit not in used:
            continue
        if unit == "H" and "T" not in text:
            text += "T"
        if unit in "MS" and "T" not in text:
            text += "T"
        amount = f"{whole}.{frac:03d}" if unit == "S" and frac else str(whole)
        text += amount + unit
        total += Decimal(amount) * factor
    if total == 0:
        with pytest.raises(QuerySyntaxError, match="positive"):
            window_of(text, "PT1S")
        return
    assert window_of(text, "PT1S").range_ms == int(total)


@pytest.mark.parametrize("text,ms", [
    ("PT10S", 10_000), ("PT1M30S", 90_000), ("PT0.5S", 500), ("P1D", 86_400_000), ("P1DT2H", 93_600_000),
    ("pt2s", 2000), ("P1W", 604_800_000), ("PT0,25S", 250), ("PT1H", 3_600_000),
])
def test_iso_examples(text, ms):
    assert window_of(text, "PT1S").range_ms == ms


def _pos(text: str, needle: str) -> tuple[int, int]:
    i = text.index(needle)
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


W = f"FROM STREAM <{EX}s>"


@pytest.mark.parametrize("text,needle,fragment", [
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE P1M STEP 1s] WHERE {{ ?s ?p ?o }}", "P1M", "no fixed length"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE P1Y STEP 1s] WHERE {{ ?s ?p ?o }}", "P1Y", "no fixed length"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE PT0.0001S STEP 1s] WHERE {{ ?s ?p ?o }}", "PT0.0001S",
     "whole number of milliseconds"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE PT STEP 1s] WHERE {{ ?s ?p ?o }}", "PT ", "needs hours"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE P STEP 1s] WHERE {{ ?s ?p ?o }}", "P ", "empty"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE PT10X STEP 1s] WHERE {{ ?s ?p ?o }}", "PT10X", "ISO 8601"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE 0.5s STEP 1s] WHERE {{ ?s ?p ?o }}", "0.5s", "integer"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE 10 STEP 1s] WHERE {{ ?s ?p ?o }}", "10 STEP", "needs a unit"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE 10s] WHERE {{ ?s ?p ?o }}", "] WHERE", "no STEP"),
    (f"REGISTER QUERY q COMPUTED EVERY 5s AS SELECT * {W} [RANGE 10s STEP 1s] WHERE {{ ?s ?p ?o }}", "EVERY",
     "COMPUTED EVERY 5s disagrees"),
    (f"REGISTER QUERY q COMPUTED 5s AS SELECT * {W} [RANGE 10s] WHERE {{ ?s ?p ?o }}", "5s AS", "'EVERY'"),
    ("REGISTER QUERY q AS SELECT * WHERE { WINDOW <w> { ?s ?p ?o } }", "<w>", "not declared"),
    (f"REGISTER QUERY q AS SELECT * FROM NAMED WINDOW <w> <{EX}s> [RANGE PT1S] WHERE {{ ?s ?p ?o }}",
     f"<{EX}s>", "ON <stream>"),
    (f"REGISTER QUERY q AS SELECT * FROM NAMED WINDOW <w> ON <{EX}s> [RANGE PT1S STEP PT1S] "
     f"FROM NAMED WINDOW <w> ON <{EX}t> [RANGE PT1S STEP PT1S] WHERE {{ WINDOW <w> {{ ?s ?p ?o }} }}",
     "<w> ON <http://ex.org/t>", "declared twice"),
    # (two RSP-QL named windows on one stream are allowed: tests/test_continuous_two_windows.py)
    (f"REGISTER QUERY q AS SELECT * FROM STREAM <{EX}s> [RANGE 1s STEP 1s] "
     f"FROM STREAM <{EX}s> [RANGE 2s STEP 1s] WHERE {{ ?s ?p ?o }}",
     f"<{EX}s> [RANGE 2s", "appears twice"),
    (f"REGISTER QUERY q AS SELECT * FROM NAMED WINDOW <w> ON <{EX}s> [FROM NOW-PT1M TO NOW-PT10S STEP PT10S] "
     "WHERE { WINDOW <w> { ?s ?p ?o } }", "-PT10S", "TO NOW"),
    (f"REGISTER QUERY q AS SELECT * {W} [RANGE 1s STEP 1s] WHERE {{ STREAM <{EX}t> [RANGE 1s SLIDE 1s] "
     "{ ?s ?p ?o } }", "[RANGE 1s SLIDE", "not both"),
    ("REGISTER QUERY q AS SELECT * WHERE { STREAM s1 [RANGE 1s SLIDE 1s] { ?s ?p ?o } }", "s1", "by IRI"),
    (f"REGISTER QUERY q AS SELECT * WHERE {{ STREAM <{EX}t> [ALL] {{ ?s ?p ?o }} }}", "ALL", "not supported"),
    (f"REGISTER QUERY q AS SELECT * FROM NAMED WINDOW <w> ON <{EX}s> [RANGE PT1S] WHERE {{ WINDOW <w> "
     "{ ?s ?p ?o } }", "] WHERE", "no STEP"),
    (f"REGISTER QUERY q AS SELECT * WHERE {{ STREAM <{EX}t> [RANGE 1s SLIDE 1s] ?s }}", "?s }", "'{'"),
    (f"REGISTER STREAM o AS SELECT * {W} [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}", "SELECT", "CONSTRUCT"),
    (f"REGISTER ISTREAM STREAM o AS CONSTRUCT {{ ?s ?p ?o }} {W} [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}",
     "ISTREAM", "no output mode"),
    (f"REGISTER RSTREAM <http://ex.org/caf%C3%A9> AS SELECT * {W} [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}",
     "<http://ex.org/caf%C3%A9>", "cannot name"),
    (f"REGISTER DSTREAM <q> AS ASK {W} [RANGE 1s STEP 1s] WHERE {{ ?s ?p ?o }}", "DSTREAM", "only be registered"),
    (f"REGISTER RSTREAM <q> AS SELECT * FROM NAMED WINDOW <w> ON <{EX}s> [ITEM 10 STEP 5] "
     "WHERE { WINDOW <w> { ?s ?p ?o } }", "5]", "counted in elements"),
])
def test_errors_with_position(text, needle, fragment):
    with pytest.raises(QuerySyntaxError) as ei:
        parse_continuous(text)
    e = ei.value
    assert fragment.lower() in e.message.lower(), e.message
    assert (e.line, e.column) == _pos(text, needle), str(e)


def test_forms():
    cq = parse_continuous(f"PREFIX : <{EX}> REGISTER ISTREAM :out7 AS SELECT ?s FROM NAMED WINDOW :w ON STREAM :s "
                          "[RANGE PT10S STEP PT2S] FROM <http://ex.org/g> WHERE { WINDOW :w { ?s ?p ?o } }")
    assert (cq.name, cq.mode, cq.syntax, cq.window_names) == ("out7", "ISTREAM", "rspql", (EX + "w",))
    assert cq.windows == (Window.time(10_000, 2000),) and cq.query.dataset.default == (EX + "g",)
    cq = parse_continuous(f"REGISTER QUERY q AS SELECT * WHERE {{ STREAM <{EX}a> [NOW] {{ ?s ?p ?o }} "
                          f"STREAM <{EX}b> [RANGE 1m SLIDE 1s] {{ ?s ?p ?x }} STREAM <{EX}c> [TRIPLES 5] {{ ?x ?p ?y }} }}")
    assert cq.syntax == "cqels"
    assert cq.windows == (Window.time(1, 1000), Window.time(60_000, 1000), Window.count(5, 1000))
    cq = parse_continuous(f"REGISTER QUERY q COMPUTED EVERY 2 s AS SELECT * FROM STREAM <{EX}a> [RANGE 10 s] "
                          f"FROM STREAM <{EX}b> [RANGE TRIPLES 3] WHERE {{ ?s ?p ?o }}")
    assert cq.windows == (Window.time(10_000, 2000), Window.count(3, 2000))
    cq = parse_continuous(f"REGISTER STREAM d.1 AS CONSTRUCT {{ ?s ?p ?o }} FROM STREAM <{EX}a> [RANGE 1s STEP 1s] "
                          "WHERE { ?s ?p ?o }")
    assert cq.derived and cq.name == "d.1" and cq.mode == "RSTREAM"
    cq = parse_continuous(f"REGISTER QUERY q AS SELECT * FROM STREAM <{EX}a> [RANGE TRIPLES 3] "
                          f"FROM STREAM <{EX}b> [RANGE 5s STEP 2s] WHERE {{ ?s ?p ?o }}")
    assert cq.windows[0] == Window.count(3, 1000)   # C-SPARQL's count default is kept
    cq = parse_continuous(f"REGISTER RSTREAM <q> AS SELECT * FROM NAMED WINDOW <w> ON <{EX}s> [ITEM 10 STEP PT2S] "
                          "WHERE { WINDOW <w> { ?s ?p ?o } }")
    assert cq.windows == (Window.count(10, 2000),)


def test_http_registration_errors_are_400_with_position(make_server):
    s = make_server()
    with httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        q = (f"PREFIX f: <http://larkc.eu/csparql/sparql/jena/ext#>\nREGISTER QUERY q AS SELECT * "
             f"FROM STREAM <{EX}s> [RANGE PT1S STEP PT1S]\nWHERE {{ ?s ?p ?o FILTER(f:unknown(?s)) }}")
        r = c.post("/queries", content=q, headers={"Content-Type": "application/sparql-query"})
        assert r.status_code == 400, r.text
        body = r.json()
        assert "unknown function" in str(body["detail"]) and body.get("line") == 3
        q = f"REGISTER QUERY q AS SELECT * FROM STREAM <{EX}s> [RANGE P2M STEP PT1S] WHERE {{ ?s ?p ?o }}"
        r = c.post("/queries", content=q, headers={"Content-Type": "application/sparql-query"})
        assert r.status_code == 400 and "no fixed length" in str(r.json()["detail"])
        ok = (f"REGISTER STREAM out AS CONSTRUCT {{ ?s ?p ?o }} FROM STREAM <{EX}s> [RANGE PT1S STEP PT1S] "
              "WHERE { ?s ?p ?o }")
        assert c.post("/queries", content=ok, headers={"Content-Type": "text/plain"}).status_code == 201
        r = c.post("/streams/out", content=b'{"s":"<a:b>","p":"<a:b>","o":"<a:b>","t":1}\n',
                   headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 409 and r.json()["error"] == "derived_stream"
        assert c.delete("/streams/out").status_code == 409
        assert c.delete("/queries/out").status_code == 204
        assert c.get("/streams/out").status_code == 404


def test_http_names_a_query_without_a_register_header(make_server):
    s = make_server()
    cqels = f"SELECT ?s WHERE {{ STREAM <{EX}s> [RANGE 2s SLIDE 1s] {{ ?s ?p ?o }} }}"
    with httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        r = c.post("/queries", content=cqels, headers={"Content-Type": "application/sparql-query"})
        assert r.status_code == 400 and "REGISTER" in str(r.json()["detail"])
        r = c.post("/queries", params={"name": "near"}, content=cqels,
                   headers={"Content-Type": "application/sparql-query"})
        assert r.status_code == 201, r.text
        assert r.json()["id"] == "near" and r.headers["location"] == "/queries/near"
        assert c.get("/queries/near").json()["streams"] == ["s"]
        r = c.post("/queries", params={"name": "bad name!"}, content=cqels,
                   headers={"Content-Type": "application/sparql-query"})
        assert r.status_code == 400 and "bad query name" in str(r.json()["detail"])


def test_http_two_output_iris_ending_alike(make_server):
    """RSP-QL names a query after its output IRI's last segment; a second IRI ending the same way
    is a 409 that says ``?name=`` can name it, and with ``?name=`` it registers (the text's own
    C-SPARQL name still cannot be contradicted)."""
    s = make_server()
    rsp = ("REGISTER RSTREAM <http://HOST/out> AS SELECT ?s FROM NAMED WINDOW <w> ON <" + EX
           + "s> [RANGE PT2S STEP PT1S] WHERE { WINDOW <w> { ?s ?p ?o } }").replace
    hdr = {"Content-Type": "application/sparql-query"}
    with httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.put("/streams/s", json={"iri": EX + "s"}).status_code == 201
        r = c.post("/queries", content=rsp("HOST", "a.example"), headers=hdr)
        assert r.status_code == 201 and r.json()["id"] == "out", r.text
        r = c.post("/queries", content=rsp("HOST", "b.example"), headers=hdr)
        assert r.status_code == 409 and "?name=" in r.json()["detail"], r.text
        r = c.post("/queries", params={"name": "out_b"}, content=rsp("HOST", "b.example"), headers=hdr)
        assert r.status_code == 201 and r.json()["id"] == "out_b", r.text
        assert {q["id"] if "id" in q else q["name"] for q in c.get("/queries").json()["queries"]} >= {"out", "out_b"}
        r = c.post("/queries", params={"name": "bad name!"}, content=rsp("HOST", "c.example"), headers=hdr)
        assert r.status_code == 400 and "bad query name" in str(r.json()["detail"])
        q = f"REGISTER QUERY q AS SELECT * FROM STREAM <{EX}s> [RANGE 2s STEP 1s] WHERE {{ ?s ?p ?o }}"
        r = c.post("/queries", params={"name": "z"}, content=q, headers=hdr)
        assert r.status_code == 400 and "give one name" in str(r.json()["detail"]), r.text


def test_cqels_windows_without_slide_are_continuous():
    """CQELS evaluates on every arrival and expiry: a CQELS-QL query with no SLIDE, COMPUTED EVERY
    or other STEP steps by 1 ms (the unit of element times); with one of them, that step."""
    from engine.sparql.csparql import CQELS_CONTINUOUS_STEP_MS  # noqa: PLC0415

    assert CQELS_CONTINUOUS_STEP_MS == 1
    cq = parse_continuous(f"REGISTER QUERY q AS SELECT * WHERE {{ STREAM <{EX}a> [RANGE 10s] {{ ?s ?p ?o }} "
                          f"STREAM <{EX}b> [NOW] {{ ?s ?p ?x }} STREAM <{EX}c> [TRIPLES 5] {{ ?x ?p ?y }} }}")
    assert cq.syntax == "cqels"
    assert cq.windows == (Window.time(10_000, 1), Window.time(1, 1), Window.count(5, 1))
    cq = parse_continuous(f"REGISTER QUERY q COMPUTED EVERY 2s AS SELECT * WHERE {{ STREAM <{EX}a> [RANGE 10s] "
                          "{ ?s ?p ?o } }")
    assert cq.windows == (Window.time(10_000, 2000),)
    cq = parse_continuous(f"REGISTER QUERY q AS SELECT * WHERE {{ STREAM <{EX}a> [RANGE 10s] {{ ?s ?p ?o }} "
                          f"STREAM <{EX}b> [RANGE 5s SLIDE 500ms] {{ ?s ?p ?x }} }}")
    assert cq.windows == (Window.time(10_000, 500), Window.time(5000, 500))
    with pytest.raises(QuerySyntaxError, match="no STEP"):  # C-SPARQL windows always have a step
        parse_continuous(f"REGISTER QUERY q AS SELECT * FROM STREAM <{EX}a> [RANGE 10s] WHERE {{ ?s ?p ?o }}")
