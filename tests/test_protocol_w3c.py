"""The 34 tests of the W3C SPARQL 1.1 Protocol test suite
(sparql11/protocol/manifest.ttl), run against the real server.

The manifest is read with rdflib; every ht:Request is sent as written (method,
path, headers, body bytes in the stated character encoding) over a raw HTTP
connection. As the manifest allows, the ``/sparql/`` path is mapped to our two
endpoints: update operations (tests named ``update_*`` / ``bad_update_*``,
except their follow-up ``application/sparql-query`` checks) go to /update,
everything else to /sparql. Before each test the store is emptied and the
test's ``ut:graphData`` files are loaded as named graphs through the Graph
Store Protocol. Every test runs on one process and on a 3-worker cluster
(``cluster_server``): the protocol must not depend on the topology.
"""

from __future__ import annotations

import http.client
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from tests.support.shared import shared_dir
from tests.support.w3c_http import NS_HT, NS_MF, read_request, send

NS_UT = "http://www.w3.org/2009/sparql/tests/test-update#"
NS_HTS = "http://www.w3.org/2011/http-statusCodes#"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"

RESULT_TYPES = {"application/sparql-results+json", "application/sparql-results+xml", "text/csv",
                "text/tab-separated-values", "application/json", "application/xml"}
RDF_TYPES = {"text/turtle": "turtle", "application/n-triples": "nt", "application/rdf+xml": "xml",
             "application/ld+json": "json-ld", "application/n-quads": "nquads"}


def _protocol_dir() -> Path | None:
    try:
        d = shared_dir() / "w3c-sparql" / "sparql" / "sparql11" / "protocol"
    except BaseException:  # pytest.skip inside shared_dir at collection time
        return None
    return d if (d / "manifest.ttl").is_file() else None


def load_manifest(directory: Path) -> list[dict]:
    import rdflib
    from rdflib.collection import Collection

    g = rdflib.Graph()
    g.parse(directory / "manifest.ttl", format="turtle", publicID=(directory / "manifest.ttl").as_uri())
    mf = rdflib.Namespace(NS_MF)
    ht = rdflib.Namespace(NS_HT)
    ut = rdflib.Namespace(NS_UT)
    manifest = next(g.subjects(rdflib.RDF.type, mf.Manifest))
    entries = list(Collection(g, g.value(manifest, mf.entries)))
    tests = []
    for e in entries:
        name = str(e).rsplit("#", 1)[-1]
        graph_data = []
        for gd in g.objects(e, ut.graphData):
            f = g.value(gd, ut.graph)
            label = g.value(gd, rdflib.URIRef(RDFS_LABEL))
            graph_data.append((directory / Path(urlsplit(str(f)).path).name, str(label)))
        action = g.value(e, mf.action)
        reqs = []
        for r in Collection(g, g.value(action, ht.requests)):
            req = read_request(g, r)
            resp = req.pop("resp")
            del req["resp_headers"]
            eb = g.value(resp, mf.expectedBoolean)
            ef = g.value(resp, mf.expectedFormat)
            req.update({
                "statuses": sorted(str(s).rsplit("#", 1)[-1] for s in g.objects(resp, mf.expectedStatus)),
                "boolean": None if eb is None else eb.toPython(),
                "format": None if ef is None else str(ef),
            })
            reqs.append(req)
        tests.append({"name": name, "title": str(g.value(e, mf.name)), "graph_data": graph_data, "requests": reqs})
    return tests


_DIR = _protocol_dir()
TESTS = load_manifest(_DIR) if _DIR is not None else []


def test_manifest_has_34_tests():
    if _DIR is None:
        pytest.skip("W3C protocol suite not found")
    assert len(TESTS) == 34


def _route(test_name: str, req: dict) -> str:
    """Map the manifest's /sparql/ path to /sparql or /update."""
    ct = {k.lower(): v for k, v in req["headers"].items()}.get("content-type", "").lower()
    path = req["path"]
    qs = path.split("?", 1)[1] if "?" in path else ""
    is_update = ct.startswith("application/sparql-update") or (
        test_name.startswith(("update_", "bad_update_")) and not ct.startswith("application/sparql-query")
    )
    endpoint = "/update" if is_update else "/sparql"
    return endpoint + ("?" + qs if qs else "")


def _status_ok(status: int, classes: list[str]) -> bool:
    return any(status // 100 == int(c[len("StatusCode")]) for c in classes)


def _check_format(fmt: str, ctype: str, body: bytes, expected_boolean) -> None:
    mt = ctype.split(";")[0].strip().lower()
    if fmt == "boolean":
        if mt in ("application/sparql-results+json", "application/json"):
            value = json.loads(body)["boolean"]
        elif mt in ("application/sparql-results+xml", "application/xml"):
            root = ET.fromstring(body)
            el = root.find("{http://www.w3.org/2005/sparql-results#}boolean")
            assert el is not None, body
            value = el.text.strip() == "true"
        else:
            raise AssertionError(f"boolean result in unexpected media type {ctype}")
        if expected_boolean is not None:
            assert value is expected_boolean, body
    elif fmt == "tabular":
        assert mt in RESULT_TYPES, ctype
        if "json" in mt:
            doc = json.loads(body)
            assert "results" in doc and "head" in doc
    elif fmt == "RDF":
        assert mt in RDF_TYPES, ctype
        import rdflib

        rdflib.Graph().parse(data=body, format=RDF_TYPES[mt], publicID="http://example.org/")


def _load_graphs(server, graph_data) -> None:
    for path, label in graph_data:
        conn = http.client.HTTPConnection("127.0.0.1", int(urlsplit(server.url).port), timeout=30)
        conn.request("PUT", "/store?graph=" + quote(label, safe=""), body=path.read_bytes(),
                     headers={"Content-Type": "application/n-triples"})
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status in (201, 204), r.status


@pytest.fixture(params=["server", "cluster_server"])
def clean_server(request):
    """The session's single-process or 3-worker server, emptied."""
    s = request.getfixturevalue(request.param)
    s.reset()
    return s


@pytest.mark.parametrize("test", TESTS, ids=[t["name"] for t in TESTS])
def test_w3c_protocol(clean_server, test):
    _load_graphs(clean_server, test["graph_data"])
    port = int(urlsplit(clean_server.url).port)
    for i, req in enumerate(test["requests"]):
        path = _route(test["name"], req)
        r, data = send(port, req, path)
        where = f"{test['name']} request {i + 1}: {req['method']} {path} -> {r.status} {data[:300]!r}"
        assert _status_ok(r.status, req["statuses"]), where
        if r.status >= 400:
            assert r.getheader("Content-Type", "").startswith("application/json"), where
            assert "error" in json.loads(data), where
        if req["format"] is not None:
            _check_format(req["format"], r.getheader("Content-Type", ""), data, req["boolean"])
