"""Tests of the C-SPARQL continuous-query parser (engine/sparql/csparql.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import QuerySyntaxError
from engine.sparql import algebra as A
from engine.sparql.csparql import (
    ContinuousQuery,
    StreamRef,
    format_duration,
    format_stream,
    format_window,
    is_continuous,
    parse_continuous,
)
from engine.sparql.parser import parse_query
from engine.stream.windows import Window

EX = "http://ex.org/"
S1 = "http://ex.org/s1"
S2 = "http://ex.org/s2"
WHERE = "WHERE { ?s ?p ?o }"


def reg(body: str, head: str = "REGISTER QUERY q AS") -> ContinuousQuery:
    return parse_continuous(f"{head} {body}")


def one_window(win: str) -> Window:
    cq = reg(f"SELECT * FROM STREAM <{S1}> {win} {WHERE}")
    assert len(cq.windows) == 1 and cq.streams == (StreamRef(S1, None),)
    return cq.windows[0]


def err(text: str) -> QuerySyntaxError:
    with pytest.raises(QuerySyntaxError) as ei:
        parse_continuous(text)
    return ei.value


# ---------------------------------------------------------------- window forms


def test_range_step():
    w = one_window("[RANGE 3s STEP 1s]")
    assert w == Window(3000, 1000, None) == Window.time(3000, 1000)


def test_range_tumbling():
    w = one_window("[RANGE 10m TUMBLING]")
    assert w == Window(600_000, 600_000, None) == Window.time(600_000)


def test_range_triples_default_step():
    w = one_window("[RANGE TRIPLES 25]")
    assert w == Window(None, 1000, 25) == Window.count(25)


def test_range_triples_with_step():
    w = one_window("[RANGE TRIPLES 5 STEP 250ms]")
    assert w == Window(None, 250, 5)


@pytest.mark.parametrize(
    "lit,ms",
    [
        ("1ms", 1), ("750ms", 750), ("3000ms", 3000),
        ("1s", 1000), ("45s", 45_000),
        ("1m", 60_000), ("7m", 420_000),
        ("1h", 3_600_000), ("2h", 7_200_000),
        ("1d", 86_400_000), ("3d", 259_200_000),
        ("5MS", 5), ("5Ms", 5), ("5S", 5000), ("5M", 300_000), ("5H", 18_000_000), ("5D", 432_000_000),
    ],
)
def test_duration_units(lit, ms):
    w = one_window(f"[RANGE {lit} STEP {lit}]")
    assert (w.range_ms, w.step_ms) == (ms, ms)
    w = one_window(f"[RANGE TRIPLES 3 STEP {lit}]")
    assert w.step_ms == ms


@pytest.mark.parametrize("spaced,plain", [("10 s", "10s"), ("500 ms", "500ms"), ("2  m", "2m"), ("1\th", "1h")])
def test_a_space_between_number_and_unit(spaced, plain):
    """C-SPARQL writes ``[RANGE 10 s STEP 2 s]``: the same window as ``10s``."""
    assert one_window(f"[RANGE {spaced} STEP {spaced}]") == one_window(f"[RANGE {plain} STEP {plain}]")
    assert one_window(f"[RANGE TRIPLES 3 STEP {spaced}]") == one_window(f"[RANGE TRIPLES 3 STEP {plain}]")


def test_a_duration_without_a_unit_is_an_error():
    assert "needs a unit" in str(err("REGISTER QUERY q AS SELECT * FROM STREAM <http://e/s> [RANGE 10 ] "
                                     "WHERE { ?s ?p ?o }"))
    assert "needs a unit" in str(err("REGISTER QUERY q AS SELECT * FROM STREAM <http://e/s> "
                                     "[RANGE 10 STEP 2s] WHERE { ?s ?p ?o }"))
    assert "bad duration unit" in str(err("REGISTER QUERY q AS SELECT * FROM STREAM <http://e/s> "
                                          "[RANGE 10 sec STEP 2s] WHERE { ?s ?p ?o }"))


def test_step_larger_than_range_is_allowed():
    w = one_window("[RANGE 1s STEP 1m]")
    assert (w.range_ms, w.step_ms) == (1000, 60_000)


def test_keywords_case_insensitive():
    cq = parse_continuous(
        "register dStream query q2 as select ?s "
        f"from Stream <{S1}> [range 3S Step 1s] from <{S2}> [Range Triples 4 sTeP 2s] "
        "from sname [rAnGe 1h tumbling] where { ?s ?p ?o }"
    )
    assert cq.mode == "DSTREAM"
    assert cq.name == "q2"
    assert [(w.range_ms, w.step_ms, w.triples) for w in cq.windows] == [
        (3000, 1000, None), (None, 2000, 4), (3_600_000, 3_600_000, None)
    ]


def test_multiline_whitespace_and_comments_in_window():
    w = one_window("[ RANGE\n 3s # comment\n STEP\t1s ]")
    assert (w.range_ms, w.step_ms) == (3000, 1000)


# ---------------------------------------------------------------- header, prologue, modes


@pytest.mark.parametrize("mode", ["RSTREAM", "ISTREAM", "DSTREAM"])
def test_modes(mode):
    cq = reg(f"SELECT * FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}", f"REGISTER {mode} QUERY q AS")
    assert cq.mode == mode


def test_default_mode_is_rstream():
    cq = reg(f"SELECT * FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}")
    assert cq.mode == "RSTREAM"
    assert isinstance(cq.query, A.Query) and cq.query.form == "SELECT"


def test_prologue_before_register():
    cq = parse_continuous(
        f"PREFIX ex: <{EX}>\nREGISTER QUERY q AS SELECT ?o FROM STREAM ex:s1 [RANGE 1s STEP 1s] "
        "WHERE { ?s ex:p ?o }"
    )
    assert cq.streams[0] == StreamRef(S1, None)
    assert cq.query.prefixes == (("ex", EX),)


def test_prologue_after_as():
    cq = parse_continuous(
        f"REGISTER QUERY q AS PREFIX ex: <{EX}> SELECT ?o FROM STREAM ex:s1 [RANGE 1s STEP 1s] "
        "WHERE { ?s ex:p ?o }"
    )
    assert cq.streams[0] == StreamRef(S1, None)


def test_prologue_before_and_after_both_apply():
    cq = parse_continuous(
        f"PREFIX ex: <{EX}> BASE <http://base.org/dir/>\n"
        "REGISTER ISTREAM QUERY q AS\n"
        "PREFIX st: <http://streams.org/>\n"
        "SELECT ?o FROM STREAM st:a [RANGE 1s STEP 1s] FROM <g1> WHERE { ?s ex:p ?o }"
    )
    assert cq.streams[0].iri == "http://streams.org/a"
    assert cq.query.dataset == A.Dataset(("http://base.org/dir/g1",), ())
    assert cq.query.base == "http://base.org/dir/"
    assert dict(cq.query.prefixes) == {"ex": EX, "st": "http://streams.org/"}
    tp = cq.query.pattern.input.triples[0]
    assert tp.p == A.Const(f"<{EX}p>")


def test_base_argument_resolves_stream_iri():
    cq = parse_continuous("REGISTER QUERY q AS SELECT * FROM STREAM <s1> [RANGE 1s STEP 1s] " + WHERE, base=EX)
    assert cq.streams[0].iri == S1


@pytest.mark.parametrize("name", ["q1", "Q_1", "my-query", "a.b.c", "2024-q", "x", "1", "-", "q-1.x_Y"])
def test_query_names(name):
    cq = reg(f"SELECT * FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}", f"REGISTER QUERY {name} AS")
    assert cq.name == name


def test_query_name_in_angle_brackets():
    cq = reg(f"SELECT * FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}", "REGISTER QUERY <q-7> AS")
    assert cq.name == "q-7"


def test_text_is_kept_verbatim():
    text = f"# hello\nREGISTER QUERY q AS SELECT * FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}\n"
    assert parse_continuous(text).text == text


# ---------------------------------------------------------------- stream references


def test_stream_by_iri_keyword():
    assert reg(f"SELECT * FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}").streams == (StreamRef(S1, None),)


def test_stream_short_name_with_stream_keyword():
    cq = reg(f"SELECT * FROM STREAM poststream [RANGE 5s STEP 1s] {WHERE}")
    assert cq.streams[0] == StreamRef(None, "poststream")


def test_stream_short_name_case_preserved_and_punctuation():
    cq = reg(f"SELECT * FROM STREAM Post-Stream.v2_x [RANGE 5s STEP 1s] FROM 9lives [RANGE 1s STEP 1s] {WHERE}")
    assert cq.streams == (StreamRef(None, "Post-Stream.v2_x"), StreamRef(None, "9lives"))


def test_wukong_form_short_name():
    cq = reg(f"SELECT * FROM poststream [RANGE 10s STEP 2s] {WHERE}")
    assert cq.streams == (StreamRef(None, "poststream"),)
    assert cq.windows == (Window(10_000, 2000, None),)
    assert cq.query.dataset is None


def test_wukong_form_iri_and_pname():
    cq = parse_continuous(
        f"PREFIX ex: <{EX}> REGISTER QUERY q AS SELECT * FROM <{S1}> [RANGE 1s STEP 1s] "
        f"FROM ex:s2 [RANGE TRIPLES 3] FROM ex:g {WHERE}"
    )
    assert cq.streams == (StreamRef(S1, None), StreamRef(S2, None))
    assert cq.query.dataset == A.Dataset((EX + "g",), ())


def test_stream_named_stream():
    cq = reg(f"SELECT * FROM STREAM [RANGE 1s STEP 1s] {WHERE}")
    assert cq.streams == (StreamRef(None, "STREAM"),)


def test_from_named_stream_is_a_stream():
    cq = reg(f"SELECT * FROM NAMED STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}")
    assert cq.streams == (StreamRef(S1, None),)
    assert cq.query.dataset is None


def test_dataset_keeps_only_stored_graphs():
    cq = reg(
        f"SELECT * FROM <{EX}g1> FROM STREAM <{S1}> [RANGE 1s STEP 1s] FROM NAMED <{EX}n1> "
        f"FROM s2 [RANGE 2s STEP 1s] FROM <urn:jindou:default> FROM NAMED <{EX}n2> {WHERE}"
    )
    assert cq.query.dataset == A.Dataset((EX + "g1", "urn:jindou:default"), (EX + "n1", EX + "n2"))
    assert cq.streams == (StreamRef(S1, None), StreamRef(None, "s2"))


def test_no_stored_graphs_means_no_dataset():
    assert reg(f"SELECT * FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}").query.dataset is None


def test_graph_stream_iri_is_a_normal_graph_node():
    cq = reg(f"SELECT ?s FROM STREAM <{S1}> [RANGE 1s STEP 1s] WHERE {{ GRAPH <{S1}> {{ ?s ?p ?o }} }}")
    g = cq.query.pattern.input
    assert isinstance(g, A.Graph) and g.name == A.Const(f"<{S1}>")


def test_inner_query_equals_plain_sparql_without_windows():
    body = (
        "SELECT ?s (COUNT(?o) AS ?n) FROM STREAM <{s}> [RANGE 1s STEP 1s] "
        "WHERE {{ ?s ?p ?o FILTER(?o > 3) }} GROUP BY ?s HAVING (COUNT(?o) > 1) ORDER BY ?s LIMIT 5"
    )
    cq = reg(body.format(s=S1))
    plain = parse_query(body.replace("FROM STREAM <{s}> [RANGE 1s STEP 1s] ", "").format())
    assert cq.query == plain


# ---------------------------------------------------------------- query forms


def test_construct_inside():
    cq = parse_continuous(
        f"PREFIX ex: <{EX}> REGISTER ISTREAM QUERY c AS CONSTRUCT {{ ?s ex:seen ?o }} "
        "FROM STREAM ex:s1 [RANGE 2s STEP 1s] WHERE { ?s ex:p ?o }"
    )
    assert cq.query.form == "CONSTRUCT"
    assert cq.query.template == (A.TriplePattern(A.Var("s"), A.Const(f"<{EX}seen>"), A.Var("o")),)
    assert cq.mode == "ISTREAM"


def test_construct_where_shortform():
    cq = reg(f"CONSTRUCT FROM STREAM <{S1}> [RANGE 2s STEP 1s] WHERE {{ ?s <{EX}p> ?o }}")
    assert cq.query.form == "CONSTRUCT" and len(cq.query.template) == 1


def test_ask_rstream():
    cq = reg(f"ASK FROM STREAM <{S1}> [RANGE 2s STEP 1s] {WHERE}", "REGISTER RSTREAM QUERY a AS")
    assert cq.query.form == "ASK" and cq.mode == "RSTREAM"


def test_aggregates_group_by():
    cq = reg(
        f"SELECT ?s (COUNT(?o) AS ?n) (AVG(?o) AS ?avg) FROM STREAM <{S1}> [RANGE 1m STEP 10s] "
        "WHERE { ?s ?p ?o } GROUP BY ?s HAVING (COUNT(?o) > 3)"
    )
    assert cq.query.vars == (A.Var("s"), A.Var("n"), A.Var("avg"))

    def find(p, t):
        if isinstance(p, t):
            return p
        return find(p.input, t) if hasattr(p, "input") else None

    grp = find(cq.query.pattern, A.Group)
    assert grp is not None and grp.by[0][0] == A.Var("s")


def test_subquery_does_not_take_windows():
    cq = reg(
        f"SELECT ?s FROM STREAM <{S1}> [RANGE 1s STEP 1s] WHERE {{ {{ SELECT ?s WHERE {{ ?s ?p ?o }} }} }}"
    )
    assert len(cq.windows) == 1


def test_two_windows_order():
    cq = reg(f"SELECT * FROM STREAM <{S2}> [RANGE 5s STEP 5s] FROM STREAM <{S1}> [RANGE 1s STEP 1s] {WHERE}")
    assert [s.iri for s in cq.streams] == [S2, S1]
    assert cq.windows == (Window.time(5000), Window.time(1000))


# ---------------------------------------------------------------- errors


def _pos(text: str, needle: str, nth: int = 1) -> tuple[int, int]:
    idx = -1
    for _ in range(nth):
        idx = text.index(needle, idx + 1)
    line = text.count("\n", 0, idx) + 1
    col = idx - (text.rfind("\n", 0, idx) + 1) + 1
    return line, col


H = "REGISTER QUERY q AS SELECT * "


@pytest.mark.parametrize(
    "text,needle,nth,fragment",
    [
        # missing / broken brackets
        (H + f"FROM STREAM <{S1}> RANGE 3s STEP 1s " + WHERE, "RANGE", 1, "window"),
        (H + f"FROM STREAM <{S1}> " + WHERE, "WHERE", 1, "window"),
        (H + f"FROM STREAM <{S1}> [RANGE 3s STEP 1s " + WHERE, "WHERE", 1, "']'"),
        (H + f"FROM STREAM <{S1}> (RANGE 3s STEP 1s) " + WHERE, "(", 1, "window"),
        (H + f"FROM STREAM <{S1}> [3s STEP 1s] " + WHERE, "3s", 1, "RANGE"),
        # bad durations and units
        (H + f"FROM STREAM <{S1}> [RANGE 3sec STEP 1s] " + WHERE, "sec", 1, "unit"),
        (H + f"FROM STREAM <{S1}> [RANGE 3w STEP 1s] " + WHERE, "w STEP", 1, "unit"),
        (H + f"FROM STREAM <{S1}> [RANGE 3 STEP 1s] " + WHERE, "3 STEP", 1, "unit"),
        (H + f"FROM STREAM <{S1}> [RANGE 3.5s STEP 1s] " + WHERE, "3.5", 1, "duration"),
        (H + f"FROM STREAM <{S1}> [RANGE 0s STEP 1s] " + WHERE, "0s", 1, "positive"),
        (H + f"FROM STREAM <{S1}> [RANGE 3s STEP 0ms] " + WHERE, "0ms", 1, "positive"),
        (H + f"FROM STREAM <{S1}> [RANGE -3s STEP 1s] " + WHERE, "-", 1, "duration"),
        (H + f"FROM STREAM <{S1}> [RANGE 3s] " + WHERE, "]", 1, "STEP or TUMBLING"),
        (H + f"FROM STREAM <{S1}> [RANGE 3s STEP 1s TUMBLING] " + WHERE, "TUMBLING", 1, "']'"),
        (H + f"FROM STREAM <{S1}> [RANGE TRIPLES 0] " + WHERE, "0]", 1, "count"),
        (H + f"FROM STREAM <{S1}> [RANGE TRIPLES 3s] " + WHERE, "s]", 1, "']'"),
        (H + f"FROM STREAM <{S1}> [RANGE TRIPLES x] " + WHERE, "x]", 1, "count"),
        (H + f"FROM STREAM <{S1}> [RANGE TRIPLES 5 TUMBLING] " + WHERE, "TUMBLING", 1, "']'"),
        # duplicate streams
        (H + f"FROM STREAM <{S1}> [RANGE 3s STEP 1s] FROM STREAM <{S1}> [RANGE 1s STEP 1s] " + WHERE,
         "<http", 2, "twice"),
        (H + "FROM STREAM a [RANGE 3s STEP 1s] FROM a [RANGE 1s STEP 1s] " + WHERE, "a [", 2, "twice"),
        (f"PREFIX ex: <{EX}> " + H + f"FROM <{S1}> [RANGE 3s STEP 1s] FROM STREAM ex:s1 [RANGE 1s STEP 1s] "
         + WHERE, "ex:s1", 1, "twice"),
        # FROM short name without a window
        (H + "FROM poststream " + WHERE, "poststream", 1, "window"),
        (H + "FROM STREAM poststream " + WHERE, "WHERE", 1, "window"),
        (H + f"FROM <{S1}> [RANGE 1s STEP 1s] FROM other WHERE {{ }}", "other", 1, "window"),
        # ASK with ISTREAM / DSTREAM
        (f"REGISTER ISTREAM QUERY q AS ASK FROM STREAM <{S1}> [RANGE 1s STEP 1s] " + WHERE, "ISTREAM", 1, "ASK"),
        (f"REGISTER DSTREAM QUERY q AS ASK FROM STREAM <{S1}> [RANGE 1s STEP 1s] " + WHERE, "DSTREAM", 1, "ASK"),
        # bad names and header
        ("REGISTER QUERY q/1 AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "q/1", 1, "name"),
        ("REGISTER QUERY q:1 AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "q:1", 1, "name"),
        ("REGISTER QUERY <a/b> AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "<a/b>", 1, "name"),
        ("REGISTER QUERY ?q AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "?q", 1, "name"),
        ("REGISTER QUERY AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "SELECT", 1, "'AS'"),
        ("REGISTER QUERY q SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "SELECT", 1, "'AS'"),
        ("REGISTER q AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "q AS", 1, "'QUERY'"),
        ("REGISTER STREAM QUERY q AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "STREAM", 1,
         "'QUERY'"),
        ("SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] " + WHERE, "SELECT", 1, "'REGISTER'"),
        ("REGISTER QUERY q AS DESCRIBE <x> FROM STREAM <s> [RANGE 1s STEP 1s]", "DESCRIBE", 1, "SELECT"),
        ("REGISTER QUERY q AS SELECT * " + WHERE, "SELECT", 1, "at least one"),
        ("REGISTER QUERY q AS SELECT * FROM <g> " + WHERE, "SELECT", 1, "at least one"),
        ("REGISTER QUERY q AS\n  SELECT * FROM NAMED <g> [RANGE 1s STEP 1s] " + WHERE, "[", 1, "FROM NAMED"),
        ("REGISTER QUERY q AS SELECT * FROM STREAM ?x [RANGE 1s STEP 1s] " + WHERE, "?x", 1, "stream"),
        ("REGISTER QUERY q AS SELECT * FROM \"s\" [RANGE 1s STEP 1s] " + WHERE, '"s"', 1, "IRI"),
        ("REGISTER QUERY q AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] WHERE { ?s ?p }", "}", 1, ""),
        ("REGISTER QUERY q AS SELECT * FROM STREAM und:s [RANGE 1s STEP 1s] " + WHERE, "und:s", 1, "prefix"),
    ],
)
def test_errors_with_position(text, needle, nth, fragment):
    e = err(text)
    assert (e.line, e.column) == _pos(text, needle, nth), str(e)
    assert fragment.lower() in e.message.lower()


def test_error_position_multiline():
    text = (
        "PREFIX ex: <http://ex.org/>\n"
        "REGISTER QUERY q AS\n"
        "SELECT ?s\n"
        "FROM STREAM ex:s1 [RANGE 3s STEP 1s]\n"
        "FROM STREAM ex:s2 [RANGE 3x STEP 1s]\n"
        "WHERE { ?s ?p ?o }"
    )
    e = err(text)
    assert (e.line, e.column) == (5, 27)


def test_unterminated_and_garbage():
    for text in ["", "REGISTER", "REGISTER QUERY", "REGISTER QUERY q", "REGISTER QUERY q AS",
                 "REGISTER QUERY q AS SELECT * FROM STREAM <s> [RANGE", "REGISTER QUERY q AS SELECT * FROM",
                 "REGISTER QUERY q AS SELECT * FROM STREAM", "\\u12"]:
        with pytest.raises(QuerySyntaxError):
            parse_continuous(text)


def test_nesting_too_deep_is_a_syntax_error():
    text = f"REGISTER QUERY q AS SELECT * FROM STREAM <s> [RANGE 1s STEP 1s] WHERE {'{' * 5000}{'}' * 5000}"
    with pytest.raises(QuerySyntaxError):
        parse_continuous(text)


# ---------------------------------------------------------------- is_continuous


@pytest.mark.parametrize(
    "text,expected",
    [
        ("REGISTER QUERY q AS SELECT", True),
        ("register rstream query q as", True),
        ("  # comment\n\n  REGISTER QUERY q AS", True),
        ("PREFIX ex: <http://ex.org/>\nREGISTER QUERY q AS", True),
        ("prefix : <http://ex.org/> base <http://b/> # c\n Register QUERY q", True),
        ("BASE<http://b/>REGISTER QUERY q", True),
        ("SELECT * WHERE { ?s ?p ?o }", False),
        ("PREFIX ex: <http://ex.org/> SELECT * WHERE { ?s ex:register ?o }", False),
        ("# REGISTER QUERY q AS\nSELECT *", False),
        ("REGISTERED", False),
        ("REGISTER:x", False),
        ("", False),
        ("INSERT DATA { <a> <b> <c> }", False),
    ],
)
def test_is_continuous(text, expected):
    assert is_continuous(text) is expected


def test_is_continuous_is_fast_on_pathological_input():
    import time

    t0 = time.perf_counter()
    for text in [" " * 100_000 + "x", "#\n" * 50_000, "PREFIX a: <x> " * 20_000 + "SELECT", "PREFIX " * 20_000]:
        assert not is_continuous(text)
    assert time.perf_counter() - t0 < 2


# ---------------------------------------------------------------- printing helpers


@pytest.mark.parametrize(
    "ms,lit",
    [(1, "1ms"), (999, "999ms"), (1000, "1s"), (1500, "1500ms"), (3000, "3s"), (60_000, "1m"),
     (90_000, "90s"), (3_600_000, "1h"), (86_400_000, "1d"), (172_800_000, "2d"), (5_400_000, "90m")],
)
def test_format_duration(ms, lit):
    assert format_duration(ms) == lit


def test_format_window_and_stream():
    assert format_window(Window(3000, 1000, None)) == "[RANGE 3s STEP 1s]"
    assert format_window(Window(None, 1000, 7)) == "[RANGE TRIPLES 7]"
    assert format_window(Window(None, 500, 7)) == "[RANGE TRIPLES 7 STEP 500ms]"
    assert format_stream(StreamRef(S1, None)) == f"STREAM <{S1}>"
    assert format_stream(StreamRef(None, "ps")) == "STREAM ps"


# ---------------------------------------------------------------- property tests

_DUR_MS = st.one_of(
    st.integers(1, 10**7),
    st.integers(1, 10**5).map(lambda n: n * 1000),
    st.integers(1, 10**4).map(lambda n: n * 60_000),
    st.integers(1, 10**3).map(lambda n: n * 86_400_000),
)
_NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9_.\-]{0,10}[A-Za-z0-9_]", fullmatch=True)
_KW_CASE = st.sampled_from([str.upper, str.lower, str.title])


@st.composite
def windows(draw):
    n = draw(st.integers(1, 4))
    out = []
    for i in range(n):
        if draw(st.booleans()):
            ref = StreamRef(f"http://streams.example/s{i}", None)
        else:
            ref = StreamRef(None, draw(_NAME) + f"_{i}")
        if draw(st.booleans()):
            rng = draw(_DUR_MS)
            step = rng if draw(st.booleans()) else draw(_DUR_MS)
            out.append((ref, Window(rng, step, None)))
        else:
            out.append((ref, Window(None, draw(st.one_of(st.just(1000), _DUR_MS)), draw(st.integers(1, 10**9)))))
    return out


def _print_duration(ms: int, draw) -> str:
    """Any exact spelling of ``ms`` (not only the shortest one)."""
    options = [f"{ms}ms"]
    for unit, f in (("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)):
        if ms % f == 0:
            options.append(f"{ms // f}{unit}")
    lit = draw(st.sampled_from(options))
    return draw(_KW_CASE)(lit)


def _print_window(w: Window, draw) -> str:
    kw = draw(_KW_CASE)
    if w.triples is not None:
        step = ""
        if w.step_ms != 1000 or draw(st.booleans()):
            step = f" {kw('STEP')} {_print_duration(w.step_ms, draw)}"
        return f"[{kw('RANGE')} {kw('TRIPLES')} {w.triples}{step}]"
    assert w.range_ms is not None
    if w.step_ms == w.range_ms and draw(st.booleans()):
        return f"[{kw('RANGE')} {_print_duration(w.range_ms, draw)} {kw('TUMBLING')}]"
    return f"[{kw('RANGE')} {_print_duration(w.range_ms, draw)} {kw('STEP')} {_print_duration(w.step_ms, draw)}]"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), ws=windows(), mode=st.sampled_from(["", "RSTREAM", "ISTREAM", "DSTREAM"]),
       name=_NAME, stored=st.lists(st.sampled_from(["g1", "g2", "g3"]), unique=True, max_size=3))
def test_property_windows_round_trip(data, ws, mode, name, stored):
    draw = data.draw
    froms = []
    for sr, w in ws:
        if sr.iri is not None:
            ref = draw(st.sampled_from([f"STREAM <{sr.iri}>", f"<{sr.iri}>"]))
        else:
            ref = draw(st.sampled_from([f"STREAM {sr.name}", sr.name]))
        sep = draw(st.sampled_from([" ", "\n", "  ", " # c\n"]))
        froms.append(f"FROM {ref}{sep}{_print_window(w, draw)}")
    for g in stored:
        pos = draw(st.integers(0, len(froms)))
        froms.insert(pos, f"FROM <{EX}{g}>")
    head = f"REGISTER {mode} QUERY {name} AS" if mode else f"REGISTER QUERY {name} AS"
    text = f"{head}\nSELECT ?s\n" + "\n".join(froms) + "\nWHERE { ?s ?p ?o }"
    cq = parse_continuous(text)
    assert list(zip(cq.streams, cq.windows, strict=True)) == ws
    assert cq.name == name and cq.mode == (mode or "RSTREAM") and cq.text == text
    expected_ds = A.Dataset(tuple(EX + g for g in stored), ()) if stored else None
    # stored graphs keep their relative order whatever the windows around them
    if expected_ds is not None:
        assert sorted(cq.query.dataset.default) == sorted(expected_ds.default)
    else:
        assert cq.query.dataset is None
    # canonical printing round-trips too
    canon = "REGISTER QUERY x AS SELECT * " + " ".join(
        f"FROM {format_stream(sr)} {format_window(w)}" for sr, w in ws
    ) + " " + WHERE
    again = parse_continuous(canon)
    assert list(zip(again.streams, again.windows, strict=True)) == ws


_VOCAB = [
    "REGISTER", "QUERY", "RSTREAM", "ISTREAM", "DSTREAM", "AS", "q1", "SELECT", "ASK", "CONSTRUCT", "*",
    "?s", "?p", "?o", "FROM", "NAMED", "STREAM", "<http://s/1>", "<g>", "ex:s", "PREFIX", "ex:",
    "<http://ex.org/>", "[", "]", "RANGE", "STEP", "TUMBLING", "TRIPLES", "3s", "10ms", "5m", "1h", "2d", "3",
    "0s", "3x", "WHERE", "{", "}", ".", "GROUP", "BY", "(", ")", "COUNT", "poststream", "-", "1.5s", "#",
    "\n", "'", "\"", "<", ">", "BASE", "a", "s-1",
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_VOCAB), max_size=30), st.sampled_from([" ", "", "\n"]))
def test_property_token_soup_only_syntax_errors(words, sep):
    text = sep.join(words)
    try:
        cq = parse_continuous(text)
    except QuerySyntaxError as e:
        assert e.line is None or (e.line >= 1 and e.column >= 1)
        return
    assert isinstance(cq, ContinuousQuery) and cq.windows


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_property_random_text_only_syntax_errors(text):
    try:
        parse_continuous(text)
    except QuerySyntaxError:
        pass
    assert isinstance(is_continuous(text), bool)


_VALID = (
    "PREFIX ex: <http://ex.org/>\nREGISTER ISTREAM QUERY q1 AS\n"
    "SELECT ?s (COUNT(?o) AS ?n) FROM STREAM ex:s [RANGE 3s STEP 1s] FROM ps [RANGE TRIPLES 10] "
    "FROM <http://ex.org/g> WHERE { ?s ex:p ?o } GROUP BY ?s"
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(_VALID)), st.integers(0, len(_VALID)), st.text(max_size=3))
def test_property_mutations_only_syntax_errors(i, j, ins):
    i, j = min(i, j), max(i, j)
    text = _VALID[:i] + ins + _VALID[j:]
    try:
        parse_continuous(text)
    except QuerySyntaxError as e:
        assert e.line is None or e.line >= 1


def test_valid_mutation_base():
    cq = parse_continuous(_VALID)
    assert cq.mode == "ISTREAM" and len(cq.windows) == 2


# ---------------------------------------------------------------- CityBench C-SPARQL queries

CITYBENCH_DIR = Path(os.environ.get("JINDOU_CITYBENCH_QUERIES", "/work/shared/citybench/csparql_query"))
_CB_FILES = sorted(CITYBENCH_DIR.glob("*.txt")) if CITYBENCH_DIR.is_dir() else []
SES = "http://www.insight-centre.org/dataset/SampleEventService#"


@pytest.mark.skipif(not _CB_FILES, reason="CityBench query files not available")
@pytest.mark.parametrize("path", _CB_FILES, ids=lambda p: p.stem)
def test_citybench_query_parses(path):
    # CityBench puts "REGISTER QUERY <file name without extension> AS " in front of each file.
    text = f"REGISTER QUERY {path.stem} AS " + path.read_text(encoding="utf-8")
    cq = parse_continuous(text)
    assert cq.name == path.stem and cq.mode == "RSTREAM"
    assert cq.windows
    assert len(cq.streams) == len(cq.windows)
    for sr, w in zip(cq.streams, cq.windows, strict=True):
        assert sr.iri is not None and sr.iri.startswith(SES)
        assert w.triples is None
    if path.stem.startswith("Q") and "win" not in path.stem:
        assert all((w.range_ms, w.step_ms) == (3000, 1000) for w in cq.windows)
    ds = cq.query.dataset
    for g in ds.default if ds else ():
        assert g.startswith("http://127.0.0.1:9000/WebGlCity/")
    if ds:
        assert ds.named == ()


@pytest.mark.skipif(not _CB_FILES, reason="CityBench query files not available")
def test_citybench_specifics():
    by = {p.stem: p for p in _CB_FILES}

    def load(stem):
        return parse_continuous(f"REGISTER QUERY {stem} AS " + by[stem].read_text(encoding="utf-8"))

    q1 = load("Q1")
    assert [sr.iri for sr in q1.streams] == [SES + "AarhusTrafficData182955", SES + "AarhusTrafficData158505"]
    assert q1.query.dataset == A.Dataset(("http://127.0.0.1:9000/WebGlCity/RDF/SensorRepository.rdf",), ())
    assert load("Q11").query.form == "ASK"
    assert load("Q10_8").windows.__len__() == 8
    q12 = load("Q12")
    assert q12.query.vars == (A.Var("obCnt"),)
    assert [(w.range_ms, w.step_ms) for w in load("traffic_parking_1").windows] == [(20_000, 10_000), (3000, 1500)]
    assert [(w.range_ms, w.step_ms) for w in load("Q1_5_win_1").windows] == [(2000, 1000)] * 3


def test_citybench_style_inline():
    """Same shapes as the CityBench files (lower-case keywords, comments in
    the projection, FROM before/after streams, aggregates), written here."""
    text = (
        "REGISTER QUERY Q_inline AS\n"
        "### a comment line\n"
        "select (count(?ob) as ?cnt) #?x ?y\n"
        "  FROM <http://127.0.0.1:9000/x/Repo.rdf>\n"
        f"  from stream <{SES}Traffic1> [range 3000ms step 1s]\n"
        f" from  stream <{SES}Traffic2> [range 3s step 1s] \n"
        "where {\n ?p a <http://ex.org/T>.\n"
        " {?ob <http://ex.org/by> ?svc. ?ob <http://ex.org/v> ?v.}\n"
        " Filter(?v >= -1)\n}\n"
        "group by ?svc\n\nhaving (count(?ob) > 3)"
    )
    cq = parse_continuous(text)
    assert [(w.range_ms, w.step_ms) for w in cq.windows] == [(3000, 1000), (3000, 1000)]
    assert cq.query.dataset == A.Dataset(("http://127.0.0.1:9000/x/Repo.rdf",), ())


@pytest.mark.parametrize(
    "win", ["[RANGE TRIPLES " + "9" * 5000 + "]", "[RANGE " + "9" * 5000 + "s STEP 1s]", "[RANGE 9223372036854775807d TUMBLING]"]
)
def test_huge_numbers_are_syntax_errors(win):
    e = err(f"REGISTER QUERY q AS SELECT * FROM STREAM <{S1}> {win} {WHERE}")
    assert e.line == 1
