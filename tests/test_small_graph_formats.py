"""Small CONSTRUCT / DESCRIBE answers as Turtle and JSON-LD from kept term fragments
(``engine.small_answers.graph_turtle`` / ``graph_jsonld`` / ``graph_rdfxml``): over
random graphs (IRIs, blank nodes, literals with languages, datatypes and escapes) the
Turtle and RDF/XML are the same graph as the general writer's and pyoxigraph's (compared
canonicalized), the JSON-LD the general writer's very bytes; the server's small-answer
path takes them."""

from __future__ import annotations

import pyoxigraph as ox
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import formats, small_answers
from engine.database import Database
from engine.exec import serialize as ser
from engine.small_answers import graph_jsonld, graph_rdfxml, graph_turtle

EX = "http://ex.org/"
_READ = {formats.NTRIPLES: ox.RdfFormat.N_TRIPLES, formats.TURTLE: ox.RdfFormat.TURTLE,
         formats.JSONLD: ox.RdfFormat.JSON_LD, formats.RDFXML: ox.RdfFormat.RDF_XML}


def _graph(body: bytes, mt: str) -> ox.Dataset:
    d = ox.Dataset(ox.parse(body, format=_READ[mt]))
    d.canonicalize(ox.CanonicalizationAlgorithm.UNSTABLE)
    return d


def _lit(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"'


_text = st.text(alphabet=st.sampled_from(list('ab "\\\n\r\té%:<>{}') + ["\u00e9", "\u4e2d", "\U0001f600"]),
                max_size=6)
_iri = st.sampled_from([f"<{EX}{n}>" for n in ("s0", "s1", "s2", "p", "q", "a/b", "c#d", "9x")] +
                       ["<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>", "<urn:x:y>"])
_bnode = st.sampled_from(["_:b0", "_:b1", "_:x.y"])
_object = st.one_of(
    _iri, _bnode, _text.map(_lit), st.tuples(_text, st.sampled_from(["en", "fr-CA"])).map(lambda t: _lit(t[0]) + "@" + t[1]),
    st.tuples(_text, st.sampled_from(["http://www.w3.org/2001/XMLSchema#string", f"{EX}dt"])).map(
        lambda t: _lit(t[0]) + f"^^<{t[1]}>"),
    st.integers(-5, 5).map(lambda i: f'"{i}"^^<http://www.w3.org/2001/XMLSchema#integer>'),
)
_triples = st.lists(st.tuples(st.one_of(_iri, _bnode), _iri, _object), min_size=1, max_size=25)

#: query texts over the subjects the triples use
_QUERIES = ["DESCRIBE <{s}>", "CONSTRUCT WHERE {{ <{s}> ?p ?o }}", "CONSTRUCT {{ ?s ?p ?o }} WHERE {{ ?s ?p ?o }}",
            "CONSTRUCT {{ _:n <{ex}about> ?o . _:n ?p ?o }} WHERE {{ <{s}> ?p ?o }}",
            "CONSTRUCT {{ ?o <{ex}inv> <{s}> . <{ex}absent> <{ex}k> \"new\" }} WHERE {{ <{s}> ?p ?o }}"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_triples)
def test_turtle_and_jsonld_equal_the_general_writers(triples):
    nt = "".join(f"{s} {p} {o} .\n" for s, p, o in triples)
    db = Database(shards=1)
    db.update("INSERT DATA { " + nt + " }")
    oxi = ox.Store()
    oxi.load(nt.encode(), ox.RdfFormat.N_TRIPLES)
    subjects = sorted({s[1:-1] for s, _, _ in triples if s.startswith("<")}) or [f"{EX}s0"]
    taken = 0
    for q in _QUERIES:
        for s in subjects[:2]:
            text = q.format(s=s, ex=EX)
            for _ in range(2):  # (the second: a template hit of a learned text, if any)
                res = db.query(text)
                general_ttl = ser.serialize(res, formats.TURTLE)
                ttl = graph_turtle(res)
                if ttl is not None:
                    taken += 1
                    want = _graph(general_ttl, formats.TURTLE)
                    assert _graph(ttl, formats.TURTLE) == want, text
                    assert _graph(ttl, formats.TURTLE) == _graph(ser.serialize(res, formats.NTRIPLES),
                                                                 formats.NTRIPLES)
                    if not q.startswith("DESCRIBE"):  # (pyoxigraph's DESCRIBE is another closure)
                        assert _graph(ttl, formats.TURTLE) == _graph(
                            ox.serialize(oxi.query(text), format=ox.RdfFormat.N_TRIPLES), formats.NTRIPLES), text
                js = graph_jsonld(res)
                if js is not None:
                    assert js == ser.serialize(res, formats.JSONLD), text
                xml = graph_rdfxml(res)
                if xml is not None:
                    assert _graph(xml, formats.RDFXML) == _graph(ser.serialize(res, formats.RDFXML), formats.RDFXML)
                assert (ttl is None) == (js is None)
                assert (xml is None) == (ttl is None or ttl == b"")  # (an empty graph: the general writer's document)
    assert taken  # every answer here is small: the writers answer


def _db() -> Database:
    db = Database(shards=1)
    db.update(f"INSERT DATA {{ <{EX}s0> <{EX}p> \"a\\\"b\"@en , <{EX}o> ; a <{EX}C> . "
              f"<{EX}s1> <{EX}q> _:z . _:z <{EX}p> \"1\"^^<{EX}dt> }}")
    return db


def test_the_small_writers_are_the_servers_first_choice_for_these_types():
    db = _db()
    for text in (f"DESCRIBE <{EX}s0>", "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }",
                 f"CONSTRUCT {{ _:b <{EX}about> ?o }} WHERE {{ <{EX}s0> ?p ?o }}"):
        res = db.query(text)
        for mt, w in ((formats.TURTLE, graph_turtle), (formats.JSONLD, graph_jsonld), (formats.RDFXML, graph_rdfxml)):
            assert small_answers.WRITERS[mt] is w
            body = small_answers.small_body(res, mt)
            assert body is not None and body == w(res)
            assert _graph(body, mt) == _graph(ser.serialize(res, formats.NTRIPLES), formats.NTRIPLES)


def test_turtle_groups_a_subjects_rows_and_big_answers_go_to_the_general_writer():
    db = _db()
    res = db.query(f"CONSTRUCT WHERE {{ <{EX}s0> ?p ?o }}")
    body = graph_turtle(res)
    assert body.count(b" ;\n\t") == 2 and body.count(b" .\n") == 1 and body.count(f"<{EX}s0>".encode()) == 1
    big = Database(shards=1)
    big.update("INSERT DATA { " + " ".join(f"<{EX}s> <{EX}p> \"{i}\" ." for i in range(300)) + " }")
    res = big.query(f"DESCRIBE <{EX}s>")
    assert graph_turtle(res) is None and graph_jsonld(res) is None and graph_rdfxml(res) is None
    assert small_answers.small_body(res, formats.TURTLE) is None


def test_the_size_bound_holds():
    import pytest

    from engine.errors import ResponseTooLarge

    res = _db().query(f"DESCRIBE <{EX}s0>")
    with pytest.raises(ResponseTooLarge):
        graph_turtle(res, max_bytes=10)
    with pytest.raises(ResponseTooLarge):
        graph_jsonld(res, max_bytes=10)
    with pytest.raises(ResponseTooLarge):
        graph_rdfxml(res, max_bytes=10)


def test_a_predicate_rdfxml_cannot_write_goes_to_the_general_writer():
    import pytest

    db = Database(shards=1)
    db.update(f"INSERT DATA {{ <{EX}s> <{EX}end/> <{EX}o> }}")
    res = db.query(f"DESCRIBE <{EX}s>")
    assert graph_rdfxml(res) is None and small_answers.small_body(res, formats.RDFXML) is None
    assert graph_turtle(res) is not None
    with pytest.raises(ValueError):
        ser.serialize(res, formats.RDFXML)


def _serve_data() -> str:
    return "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i % 3}> .\n<{EX}s{i}> <{EX}q> \"v{i}\\\"\"@en .\n"
                   f"<{EX}s{i}> <{EX}b> _:n{i % 2} .\n" for i in range(8))


def test_over_http_the_small_writers_answer_each_type(monkeypatch):
    from tests.test_lane_repeated_texts import _get, serving

    gen = serving(_serve_data())
    server = next(gen)
    try:
        for mt in (formats.TURTLE, formats.JSONLD, formats.RDFXML):
            made = []
            w = small_answers.WRITERS[mt]

            def spy(res, max_bytes=None, w=w, made=made):
                body = w(res, max_bytes)
                made.append(body)
                return body

            monkeypatch.setitem(small_answers.WRITERS, mt, spy)
            for i in range(6):
                for tpl in ("DESCRIBE <{c}> # {k}\n", "CONSTRUCT {{ _:x <" + EX + "about> ?o }} WHERE {{ <{c}> ?p ?o }} # {k}\n"):
                    text = tpl.format(c=f"{EX}s{i}", k=f"{mt}{i}")
                    status, ctype, body = _get(server, text, mt)
                    assert status == 200 and ctype.startswith(mt)
                    nt = _get(server, text.replace("# ", "# nt "), formats.NTRIPLES)[2]
                    assert _graph(body, mt) == _graph(nt, formats.NTRIPLES), (mt, text)
            assert sum(b is not None for b in made) >= 8, mt  # (taken: the lane's and the text path's answers)
            monkeypatch.undo()
    finally:
        gen.close()
