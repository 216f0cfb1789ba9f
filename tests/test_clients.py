"""Off-the-shelf SPARQL clients against the real server: SPARQLWrapper and
rdflib's SPARQLStore / SPARQLUpdateStore."""

from __future__ import annotations

import pytest
import rdflib
import requests
from rdflib.plugins.stores.sparqlstore import SPARQLStore, SPARQLUpdateStore
from SPARQLWrapper import CSV, JSON, N3, POST, TSV, TURTLE, XML, SPARQLWrapper

EX = "http://ex.org/"
DATA = f"""@prefix ex: <{EX}> .
ex:alice ex:name "Alice" ; ex:age 30 ; ex:knows ex:bob .
ex:bob ex:name "Bob"@en ; ex:age 25 .
ex:carol ex:name "Carol" ; ex:age 41 ; ex:knows ex:alice, ex:bob .
"""
SELECT = f"SELECT ?name ?age WHERE {{ ?p <{EX}name> ?name ; <{EX}age> ?age }} ORDER BY ?age"


@pytest.fixture
def srv(clean_server):
    r = requests.put(clean_server.url + "/store?default", data=DATA.encode(), headers={"Content-Type": "text/turtle"})
    assert r.status_code in (201, 204)
    return clean_server


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_sparqlwrapper_select_json(srv, method):
    sw = SPARQLWrapper(srv.url + "/sparql")
    sw.setQuery(SELECT)
    sw.setReturnFormat(JSON)
    if method == "POST":
        sw.setMethod(POST)
    res = sw.query().convert()
    assert res["head"]["vars"] == ["name", "age"]
    got = [(b["name"]["value"], int(b["age"]["value"])) for b in res["results"]["bindings"]]
    assert got == [("Bob", 25), ("Alice", 30), ("Carol", 41)]
    assert res["results"]["bindings"][0]["name"].get("xml:lang") == "en"


def test_sparqlwrapper_select_xml_csv_tsv(srv):
    sw = SPARQLWrapper(srv.url + "/sparql")
    sw.setQuery(SELECT)
    sw.setReturnFormat(XML)
    doc = sw.query().convert()  # xml.dom.minidom document
    assert len(doc.getElementsByTagName("result")) == 3
    sw.setReturnFormat(CSV)
    assert sw.query().convert().decode().splitlines()[1] == "Bob,25"
    sw.setReturnFormat(TSV)
    assert sw.query().convert().decode().splitlines()[0] == "?name\t?age"


def test_sparqlwrapper_ask_and_construct(srv):
    sw = SPARQLWrapper(srv.url + "/sparql")
    sw.setQuery(f"ASK {{ <{EX}carol> <{EX}knows> <{EX}bob> }}")
    sw.setReturnFormat(JSON)
    assert sw.query().convert()["boolean"] is True
    sw.setQuery(f"CONSTRUCT {{ ?a <{EX}friend> ?b }} WHERE {{ ?a <{EX}knows> ?b }}")
    sw.setReturnFormat(XML)  # RDF/XML for graphs
    g = sw.query().convert()
    assert isinstance(g, rdflib.Graph) and len(g) == 3
    for fmt in (TURTLE, N3):
        sw.setReturnFormat(fmt)
        data = sw.query().convert()
        g = rdflib.Graph().parse(data=data, format="turtle")
        assert (rdflib.URIRef(EX + "carol"), rdflib.URIRef(EX + "friend"), rdflib.URIRef(EX + "alice")) in g


def test_sparqlwrapper_update(srv):
    sw = SPARQLWrapper(srv.url + "/sparql", updateEndpoint=srv.url + "/update")
    sw.setMethod(POST)
    sw.setQuery(f'INSERT DATA {{ <{EX}dave> <{EX}name> "Dave" }}')
    sw.query()
    r = requests.get(srv.url + "/sparql", params={"query": f"ASK {{ <{EX}dave> <{EX}name> \"Dave\" }}"})
    assert r.json()["boolean"] is True


@pytest.mark.parametrize("method,fmt", [("GET", "xml"), ("POST", "xml"), ("POST_FORM", "json"), ("GET", "csv")])
def test_rdflib_sparqlstore(srv, method, fmt):
    store = SPARQLStore(srv.url + "/sparql", method=method, returnFormat=fmt)
    g = rdflib.Graph(store=store)
    rows = list(g.query(SELECT))
    assert [(str(r[0]), int(r[1].toPython()) if fmt != "csv" else int(str(r[1]))) for r in rows] == [
        ("Bob", 25), ("Alice", 30), ("Carol", 41)]
    if fmt != "csv":
        assert rows[0][0].language == "en"
        assert rows[0][1].datatype == rdflib.XSD.integer
    assert bool(g.query(f"ASK {{ <{EX}alice> <{EX}knows> <{EX}bob> }}")) or fmt == "csv"
    # triple pattern access goes through SELECT queries too
    knows = set(g.triples((None, rdflib.URIRef(EX + "knows"), None)))
    assert len(knows) == 3
    assert (rdflib.URIRef(EX + "carol"), rdflib.URIRef(EX + "knows"), rdflib.URIRef(EX + "bob")) in knows
    store.close()


def test_rdflib_sparqlstore_construct(srv):
    g = rdflib.Graph(store=SPARQLStore(srv.url + "/sparql"))
    res = g.query(f"CONSTRUCT {{ ?a <{EX}friend> ?b }} WHERE {{ ?a <{EX}knows> ?b }}")
    assert len(res.graph) == 3


def test_rdflib_sparqlupdatestore(srv):
    from rdflib.graph import DATASET_DEFAULT_GRAPH_ID

    store = SPARQLUpdateStore(srv.url + "/sparql", srv.url + "/update", method="POST")
    g = rdflib.Graph(store=store, identifier=DATASET_DEFAULT_GRAPH_ID)
    g.add((rdflib.URIRef(EX + "erin"), rdflib.URIRef(EX + "name"), rdflib.Literal("Erin")))
    assert (rdflib.URIRef(EX + "erin"), rdflib.URIRef(EX + "name"), rdflib.Literal("Erin")) in g
    g.remove((rdflib.URIRef(EX + "erin"), None, None))
    assert (rdflib.URIRef(EX + "erin"), rdflib.URIRef(EX + "name"), rdflib.Literal("Erin")) not in g
    store.close()
