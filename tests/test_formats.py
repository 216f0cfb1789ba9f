"""The format registry (engine/formats.py), walked: every format round-trips
through its parser and writer, every media type, name and extension resolves
to its format at every site (negotiation, loader, /store, /streams, /sparql's
?format=, the service description), no two formats claim one of them, and a
format added with one register() call is served everywhere."""

from __future__ import annotations

import gzip
from urllib.parse import quote

import httpx
import numpy as np
import pytest
import rdflib
from rdflib.compare import isomorphic

from engine import formats as F
from engine.database import Database
from engine.errors import LoadError
from engine.exec.result import QueryResult
from engine.exec.serialize import KeyTable, graph_from_keys, serialize
from engine.kv import loader

EX = "http://ex.org/"
XSD = "http://www.w3.org/2001/XMLSchema#"
TRIPLES = [
    (f"<{EX}a>", f"<{EX}p>", f"<{EX}b>"),
    (f"<{EX}a>", f"<{EX}p>", '"plain"'),
    (f"<{EX}a>", f"<{EX}q>", '"chat"@fr'),
    (f"<{EX}a>", f"<{EX}q>", f'"42"^^<{XSD}integer>'),
    (f"<{EX}a>", f"<{EX}q>", f'"1.5"^^<{XSD}decimal>'),
    (f"<{EX}a>", f"<{EX}q>", f'"true"^^<{XSD}boolean>'),
    (f"<{EX}a>", f"<{EX}r>", '"line\\nbreak \\"quoted\\" caf\u00e9"'),
    (f"<{EX}a>", "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>", f"<{EX}T>"),
    ("_:b1", f"<{EX}p>", f"<{EX}c>"),
    (f"<{EX}c>", f"<{EX}p>", "_:b1"),
]
TRIG_DOC = f"<{EX}g> {{ <{EX}a> <{EX}p> <{EX}b> . }}\n<{EX}a> <{EX}p> \"d\" .\n".encode()
FORM = {F.GRAPH: "CONSTRUCT", F.RESULTS: "SELECT"}


def _nt_graph(triples) -> rdflib.Graph:
    return rdflib.Graph().parse(data="".join(f"{s} {p} {o} .\n" for s, p, o in triples), format="nt")


def _select() -> QueryResult:
    keys = [f"<{EX}a>", '"x, \\"y\\""', '"chat"@fr']
    return QueryResult(form="SELECT", terms=KeyTable(keys), vars=["s", "o"],
                       columns=[np.array([0, 0, 1], dtype=np.int64), np.array([1, 2, -1], dtype=np.int64)])


def _sample(fmt: F.Format) -> bytes:
    """A document in ``fmt``: written by its own writer, TriG by hand."""
    if fmt.writer is not None:
        return serialize(graph_from_keys(TRIPLES), fmt.media_type)
    assert fmt.name == "trig", "a readable format without a writer needs a sample document here"
    return TRIG_DOC


READABLE = F.readable(F.GRAPH)
WRITABLE = F.writable(F.GRAPH) + F.writable(F.RESULTS)
BOTH = [f for f in READABLE if f.writer is not None]


# ---------------------------------------------------------------- the registry itself

def test_registry_is_consistent():
    fs = F.registered()
    assert {f.kind for f in fs} == {F.GRAPH, F.RESULTS}
    for kind in (F.GRAPH, F.RESULTS):
        of_kind = [f for f in fs if f.kind == kind]
        for field in ("media_types", "names"):
            claimed = [x for f in of_kind for x in getattr(f, field)] + (
                [f.name for f in of_kind] if field == "names" else [])
            assert len(claimed) == len(set(claimed)), (kind, field, sorted(claimed))
    exts = [e for f in fs for e in f.extensions]
    assert len(exts) == len(set(exts)) and F.GZIP_SUFFIX not in exts
    iris = [f.iri for f in fs]
    assert len(iris) == len(set(iris))
    for f in fs:
        assert f.media_types and all(mt == mt.lower() and mt.count("/") == 1 for mt in f.media_types)
        assert f.content_type.split(";")[0] == f.media_type
        assert f.parser is not None or f.writer is not None, f.name
        if f.parser is not None:  # entries name real functions
            assert callable(f.parse) and f.kind == F.GRAPH and f.rdflib is not None
        if f.writer is not None:
            assert callable(f.write)
    # the defaults: SPARQL JSON for SELECT/ASK, Turtle for graphs
    assert F.negotiate(None, "SELECT") == F.SPARQL_JSON and F.negotiate(None, "CONSTRUCT") == F.TURTLE


@pytest.mark.parametrize("bad", [
    dict(name="srj2", media_types=(F.SPARQL_JSON,)),  # media type of another results format
    dict(name="csv", media_types=("text/x-other",)),  # name taken
    dict(name="x2", media_types=("text/x-other",), names=("tsv",)),  # shorthand taken
    dict(name="x3", media_types=("text/x-other",), extensions=(".csv",)),  # extension taken
    dict(name="x4", media_types=("text/x-other",), extensions=(".gz",)),  # the compression suffix
    dict(name="x5", media_types=("Text/X-Other",)),  # not lower case
])
def test_register_refuses_a_second_claim(bad):
    before = F.registered()
    with pytest.raises(ValueError):
        F.register(F.Format(kind=F.RESULTS, content_type="text/x-other", w3c="X",
                            writer="engine.exec.serialize:write_csv", **bad))
    assert F.registered() == before


def test_one_media_type_two_kinds():
    # application/json is SPARQL JSON for results and JSON-LD for graphs; ?format=json names both
    assert F.for_media_type("application/json", F.RESULTS).name == "srj"
    assert F.for_media_type("application/json", F.GRAPH).name == "jsonld"
    assert F.format_param("json") == F.SPARQL_JSON + ", " + F.JSONLD
    assert F.format_param("xml") == F.SPARQL_XML + ", " + F.RDFXML
    assert F.format_param("trig") == F.TRIG  # TriG has a writer: ?format=trig is TriG, not Turtle


# ---------------------------------------------------------------- every format, every name

@pytest.mark.parametrize("fmt", BOTH, ids=lambda f: f.name)
def test_round_trip(fmt):
    """Writer then parser give back the same graph (blank nodes up to renaming)."""
    body = serialize(graph_from_keys(TRIPLES), fmt.media_type)
    pk = loader.parse_to_keys(body, fmt.name)
    got = list(zip(pk.s.to_pylist(), pk.p.to_pylist(), pk.o.to_pylist(), strict=True))
    assert len(got) == len(TRIPLES)
    assert isomorphic(_nt_graph(got), _nt_graph(TRIPLES))
    assert pk.g.null_count == len(pk)
    if fmt.quads:  # written into a named graph: the name survives, or the writer names no graph
        body = serialize(graph_from_keys(TRIPLES), fmt.media_type, graph=EX + "g")
        pk = loader.parse_to_keys(body, fmt.name)
        assert len(pk) == len(TRIPLES) and set(pk.g.to_pylist()) in ({f"<{EX}g>"}, {None})
        if fmt.media_type == F.NQUADS:
            assert set(pk.g.to_pylist()) == {f"<{EX}g>"}


@pytest.mark.parametrize("fmt", READABLE, ids=lambda f: f.name)
def test_parser_names(fmt):
    for mt in fmt.media_types:
        assert F.for_media_type(mt, F.GRAPH) is fmt
        assert loader.format_for_media_type(mt) == fmt.name
        assert loader.format_for_media_type(mt.upper() + "; charset=utf-8") == fmt.name
    for n in (fmt.name, *fmt.names):
        assert F.by_name(n, F.GRAPH) is fmt
        assert loader.format_for_media_type(n) == fmt.name
    for ext in fmt.extensions:
        assert F.for_extension(ext) is fmt
        for path in ("x" + ext, "/d.ttl/X" + ext.upper(), "dump" + ext + ".gz", "d.gz/a" + ext + ".GZ"):
            assert F.for_path(path) is fmt
            assert loader.guess_format(path) == fmt.name
        assert loader.normalize_format(ext[1:]) is fmt
    # every spelling parses a document the same way
    doc = _sample(fmt)
    n = len(loader.parse_to_keys(doc, fmt.name))
    assert n > 0
    for spelling in (*fmt.media_types, *fmt.names, *(e[1:] for e in fmt.extensions)):
        assert len(loader.parse_to_keys(doc, spelling)) == n


@pytest.mark.parametrize("fmt", WRITABLE, ids=lambda f: f.name)
def test_writer_names(fmt):
    form = FORM[fmt.kind]
    res = graph_from_keys(TRIPLES) if fmt.kind == F.GRAPH else _select()
    body = serialize(res, fmt.media_type)
    assert body
    offered, aliases = F.offers(form)
    assert fmt.media_type in offered
    assert F.content_type(fmt.media_type) == fmt.content_type
    for mt in fmt.media_types:
        # an alias is answered under the canonical type; a generic text type under its own name
        answer = mt if mt in F.VIEW_TYPES else fmt.media_type
        assert F.negotiate(mt, form) == answer
        assert F.negotiate(mt + ";q=0.5, image/png", form) == answer
        assert F.output_format(mt, fmt.kind) is fmt
        assert serialize(res, mt) == body
        if mt != fmt.media_type:
            assert aliases[mt] == fmt.media_type
    for n in (fmt.name, *fmt.names):
        accept = F.format_param(n)
        assert fmt.media_type in accept.split(", ")
        assert F.negotiate(accept, form) == fmt.media_type


def test_unknown_names_resolve_to_nothing():
    assert F.for_media_type("text/html") is None and F.negotiate("text/html", "SELECT") is None
    assert F.negotiate("text/html", "CONSTRUCT") is None and F.format_param("html") is None
    with pytest.raises(LoadError, match="cannot guess the RDF format of .txt"):
        loader.guess_format("notes.txt.gz")
    with pytest.raises(LoadError, match="cannot guess the RDF format of .csv"):  # a format, but no parser
        loader.guess_format("rows.csv")
    with pytest.raises(LoadError, match="without extension"):
        loader.guess_format("README")
    with pytest.raises(LoadError, match="unsupported media type"):
        loader.format_for_media_type("text/csv")
    with pytest.raises(LoadError, match="unknown RDF format"):
        loader.parse_to_keys(b"", "csv")
    with pytest.raises(ValueError, match="cannot serialize a graph as text/csv"):
        serialize(graph_from_keys(TRIPLES), F.CSV)
    with pytest.raises(ValueError, match="cannot serialize SELECT results as text/turtle"):
        serialize(_select(), F.TURTLE)


# ---------------------------------------------------------------- adding a format is one entry

def test_a_registered_format_is_served_everywhere(tmp_path):
    """One register() call: negotiation, ?format=, the loader (media type, name,
    extension) and the writer pick the new formats up; unregister takes them out."""
    tsv2 = F.Format("tsv2", F.RESULTS, ("text/x-tsv2",), "text/x-tsv2; charset=utf-8", "X_TSV2",
                    extensions=(".tsv2",), names=("tab2",), writer="engine.exec.serialize:write_tsv")
    nt2 = F.Format("nt2", F.GRAPH, ("application/x-nt2",), "application/x-nt2", "X_NT2",
                   extensions=(".nt2",), names=("ntwo",), parser="engine.kv.loader:parse_lines",
                   writer="engine.exec.serialize:write_ntriples", rdflib="nt")
    F.register(tsv2)
    F.register(nt2)
    try:
        assert F.negotiate("text/x-tsv2", "SELECT") == "text/x-tsv2"
        assert F.content_type("text/x-tsv2") == "text/x-tsv2; charset=utf-8"
        assert serialize(_select(), "text/x-tsv2") == serialize(_select(), F.TSV)
        assert F.format_param("tab2") == "text/x-tsv2"
        assert "text/x-tsv2" in F.offers("ASK")[0] and "application/x-nt2" in F.offers("GRAPH")[0]
        body = serialize(graph_from_keys(TRIPLES), "application/x-nt2")
        assert body == serialize(graph_from_keys(TRIPLES), F.NTRIPLES)
        assert loader.format_for_media_type("application/x-nt2") == "nt2"
        f = tmp_path / "data.nt2.gz"
        f.write_bytes(gzip.compress(body))
        db = Database(shards=2)
        assert db.load_file(str(f)).triples == len(TRIPLES)
        assert db.load_data(body, "application/x-nt2", graph=EX + "g").triples == len(TRIPLES)
        assert len(loader.parse_to_keys(body, "ntwo")) == len(TRIPLES)
    finally:
        F.unregister("tsv2", F.RESULTS)
        F.unregister("nt2", F.GRAPH)
    assert F.negotiate("text/x-tsv2", "SELECT") is None and F.format_param("tab2") is None
    assert F.for_path("x.nt2") is None and "application/x-nt2" not in F.offers("GRAPH")[0]
    with pytest.raises(KeyError):
        F.unregister("nt2", F.GRAPH)


# ---------------------------------------------------------------- over HTTP

@pytest.fixture(scope="module")
def srv():
    from tests.conftest import start_server

    s = start_server()
    try:
        yield s
    finally:
        s.stop()


def test_store_reads_every_media_type_and_answers_every_writable_one(srv):
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for fmt in READABLE:
            doc = _sample(fmt)
            expected = loader.parse_to_keys(doc, fmt.name).g.null_count  # the rest keeps its own graph
            for i, mt in enumerate(fmt.media_types):
                g = f"{EX}{fmt.name}/{i}"
                r = c.put("/store?graph=" + quote(g, safe=""), content=doc, headers={"Content-Type": mt})
                assert r.status_code == 201, (mt, r.text)
                n = c.get("/sparql", params={"query": f"SELECT (COUNT(*) AS ?n) {{ GRAPH <{g}> {{ ?s ?p ?o }} }}"})
                count = int(n.json()["results"]["bindings"][0]["n"]["value"])
                assert count == expected > 0, (mt, count)
        g = EX + "out"
        r = c.put("/store?graph=" + quote(g, safe=""), content=_sample(F.by_name("nt")),
                  headers={"Content-Type": F.NTRIPLES})
        assert r.status_code == 201
        for fmt in F.writable(F.GRAPH):
            for mt in fmt.media_types:
                r = c.get("/store?graph=" + quote(g, safe=""), headers={"Accept": mt})
                answered = mt if mt in F.VIEW_TYPES else fmt.media_type  # aliases: the canonical type
                assert r.status_code == 200 and r.headers["content-type"] == F.content_type(answered), mt
                back = loader.parse_to_keys(r.content, fmt.name)
                assert len(back) == len(TRIPLES), mt
        r = c.get("/store?graph=" + quote(g, safe=""), headers={"Accept": "text/csv"})
        assert r.status_code == 406 and r.json()["available"] == [f.media_type for f in F.writable(F.GRAPH)]
        r = c.put("/store?default", content=b"a,b", headers={"Content-Type": "text/csv"})
        assert r.status_code == 415
        assert r.json()["detail"] == ("text/csv is not a supported RDF format: " +
                                      ", ".join(sorted(f.media_type for f in READABLE)))


def test_sparql_format_parameter_and_service_description(srv):
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for fmt in WRITABLE:
            q = "CONSTRUCT WHERE { ?s ?p ?o }" if fmt.kind == F.GRAPH else "SELECT * WHERE { ?s ?p ?o }"
            for n in (fmt.name, *fmt.names):
                r = c.get("/sparql", params={"query": q, "format": n}, headers={"Accept": "image/png"})
                assert r.status_code == 200 and r.headers["content-type"] == fmt.content_type, (n, r.text)
        r = c.get("/sparql", headers={"Accept": F.NTRIPLES})
        sd = rdflib.Graph().parse(data=r.content, format="nt")
        sdns = rdflib.Namespace("http://www.w3.org/ns/sparql-service-description#")
        assert {str(o) for o in sd.objects(None, sdns.resultFormat)} == {f.iri for f in WRITABLE}
        assert {str(o) for o in sd.objects(None, sdns.inputFormat)} == {f.iri for f in READABLE}


def test_streams_take_the_stream_formats(srv):
    body = serialize(graph_from_keys(TRIPLES[:8]), F.NTRIPLES)
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.put("/streams/fmt", json={"iri": EX + "fmt"}).status_code == 201
        t = 1000
        stream_formats = [f for f in READABLE if f.stream]
        assert {f.name for f in stream_formats} == {"nt", "ttl"}
        for fmt in READABLE:
            doc = serialize(graph_from_keys(TRIPLES[:8]), fmt.media_type) if fmt.writer else body
            for mt in fmt.media_types:
                t += 1000
                r = c.post(f"/streams/fmt?t={t}", content=doc, headers={"Content-Type": mt})
                if fmt.stream:
                    assert r.status_code == 202 and r.json()["accepted"] == 8, (mt, r.text)
                else:
                    assert r.status_code == 415, (mt, r.text)
                    assert r.json()["detail"].endswith(" or ".join(sorted(f.media_type for f in stream_formats)))
        assert c.delete("/streams/fmt").status_code == 200
