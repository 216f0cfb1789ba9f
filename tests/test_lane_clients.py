"""Common clients' requests take the HTTP fast lane and get the ordinary path's bytes.

``bench/client_forms.py`` reproduces what curl, requests, httpx, ``http.client``,
urllib (rdflib), SPARQLWrapper, a browser's ``fetch`` and YASGUI send: their
percent-encodings (``+`` or ``%20`` for a space, lower-case hex, ``/`` left as it
is), header sets, ``Connection: close``, a POST's body in a second write,
SPARQLWrapper's ``format=json&output=json&results=json`` next to the query (also
in the URL of a POSTed query). Each is answered inline, byte for byte as the
ASGI path answers it (``tests/test_lane_post.py``'s harness: the same request
with the lane declining), for new texts and repeated ones; and the variants of
the result-format parameters the lane reads itself agree with the general
parameter parser, errors included."""

from __future__ import annotations

from urllib.parse import quote, quote_plus

import pytest

from bench.client_forms import CLOSING, forms
from server.api import sparql as sparql_api
from tests.test_lane_post import QUERIES, UB, _feed, _same, server  # noqa: F401 - the fixture

D = "http://www.Department0.University0.edu"
ENTITIES = [f"{D}/FullProfessor{i}" for i in range(3)] + [f"{D}/GraduateStudent0", f"{D}/None"]


def _texts(tag: str) -> list[str]:
    return [UB + q.format(c=c) + f"# {tag}-{i}-{j}\n" for i, q in enumerate(QUERIES) for j, c in enumerate(ENTITIES)]


@pytest.mark.parametrize("client", sorted(forms("ASK {}")))
def test_every_client_form_takes_the_lane_with_the_ordinary_paths_bytes(server, client):  # noqa: F811
    inline = 0
    texts = _texts(client)
    for t in texts + texts[:6]:  # new texts (a template's later ones read from their bytes), then repeated ones
        accept = ("application/n-triples" if ("CONSTRUCT" in t or "DESCRIBE" in t) and client != "sparqlwrapper-get"
                  else "application/sparql-results+json")
        inline += _same(server, forms(t, accept)[client])
    # (a fresh server may run a shape's first text in the pool, while it learns its cost)
    assert inline >= len(texts) + 6 - len(QUERIES), (client, inline)


def test_closing_forms_close_the_connection(server):  # noqa: F811
    t = _texts("close")[0]
    for client in CLOSING:
        out, inline, closed = _feed(server, forms(t)[client], 1, True)
        assert inline and closed and b"connection: close\r\n" in out, client


def _get(qs: str) -> list[bytes]:
    return [f"GET /sparql?{qs} HTTP/1.1\r\nHost: 127.0.0.1:7878\r\nAccept: text/csv\r\n\r\n".encode()]


def _post_query(qs: str, text: str) -> list[bytes]:
    body = text.encode()
    return [f"POST /sparql?{qs} HTTP/1.1\r\nHost: 127.0.0.1:7878\r\nAccept: text/csv\r\n"
            f"Content-Type: application/sparql-query\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body]


def _post_form(body: str) -> list[bytes]:
    return [f"POST /sparql HTTP/1.1\r\nHost: 127.0.0.1:7878\r\nAccept: text/csv\r\n"
            f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()]


#: parameter strings next to ``query=``: the lane reads the result-format ones
#: itself; the others (and errors) go the ordinary way; the bytes agree either way
PARAMS = [
    ("format=json", True), ("output=json", True), ("results=json", True), ("format=xml&output=csv", True),
    ("output=tsv&results=xml", True), ("format=application%2Fsparql-results%2Bxml", True), ("format=csv", True),
    ("format=json&format=xml", True), ("format=JSON", True), ("format=text%2Fhtml", True),
    ("format=bogus", False), ("format=", False), ("explain=true", False), ("format=json&explain=true", False),
    ("default-graph-uri=http%3A%2F%2Fx%2Fg", False), ("form%61t=xml", True), ("q%75ery=x", False), ("format", False),
    ("format=json&", False), ("format=%ff", False), ("update=x", False), ("format=json&query=x", False),
    # parameters the query operation does not read (Virtuoso's / Fuseki's clients' timeout=, a cache buster)
    ("timeout=5", True), ("timeout=5000&format=csv", True), ("_=1712&output=xml", True), ("x=%ff", False),
    ("timeout=5&named-graph-uri=http%3A%2F%2Fx%2Fg", False), ("timeout=5&explain=true", False),
]


@pytest.mark.parametrize("params,lane", PARAMS)
def test_result_format_parameters_read_as_the_general_parser_reads_them(server, params, lane):  # noqa: F811
    text = UB + QUERIES[2].format(c=ENTITIES[0]) + f"# p-{params}\n"
    q = "query=" + quote_plus(text)
    for chunks in (_get(f"{q}&{params}"), _get(f"{params}&{q}"), _post_form(f"{q}&{params}"),
                   _post_query(params, text), _get(f"{q}&{params}".replace("+", "%20"))):
        inline = _same(server, chunks)
        assert inline or not lane, (params, chunks[0][:120])


def test_result_format_split():
    split = sparql_api._format_split
    assert split(b"query=a&format=json") == (b"query=a", "application/sparql-results+json, application/ld+json")
    assert split(b"output=xml&query=a&results=json")[0] == b"query=a"
    assert split(b"query=a&results=json") == (b"query=a", "")
    for qs in (b"query=a&query=b&format=json", b"query=a&format=bogus", b"query=a&explain=true", b"query=a&&format=json",
               b"format=json", b"query=a&format=json&q%75ery=b", b"query=a&x=1&explain=1"):
        assert split(qs) is None, qs
    # a parameter the query operation does not read: the plain text (the Accept header's format)
    assert split(b"query=a&timeout=5") == (b"query=a", "")
    assert split(b"timeout=5&query=a&format=csv")[0] == b"query=a"
    assert quote("a b") == "a%20b"  # (the encodings the forms above use)
