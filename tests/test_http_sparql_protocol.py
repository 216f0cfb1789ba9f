"""/sparql protocol behaviour users of Fuseki, Oxigraph and QLever expect, against
a real server on 127.0.0.1: updates accepted at /sparql (same token rules as
/update), canonical media types, text/plain, ?format= errors and TriG, and the
budget refusal's own non-retryable status."""

from __future__ import annotations

import pytest
import requests

from engine import formats as F

EX = "http://ex.org/"
COUNT = f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s <{EX}p> ?o }}"


def _count(url: str, **kw) -> int:
    r = requests.get(url + "/sparql", params={"query": COUNT}, **kw)
    assert r.status_code == 200, r.text
    return int(r.json()["results"]["bindings"][0]["n"]["value"])


def test_updates_at_sparql_body_and_form(make_server):
    s = make_server()
    u = s.url + "/sparql"
    r = requests.post(u, data=f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}".encode(),
                      headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204, r.text
    r = requests.post(u, data={"update": f"INSERT DATA {{ <{EX}b> <{EX}p> 2 }}"})
    assert r.status_code == 204, r.text
    assert _count(s.url) == 2
    # using-graph-uri works as at /update
    r = requests.post(u, data={"update": f"INSERT DATA {{ GRAPH <{EX}g> {{ <{EX}c> <{EX}p> 3 }} }}"})
    assert r.status_code == 204
    r = requests.post(u, data={"update": f"DELETE {{ ?s <{EX}p> ?o }} WHERE {{ ?s <{EX}p> ?o }}",
                               "using-graph-uri": EX + "g"})
    assert r.status_code == 204, r.text
    assert _count(s.url) == 2  # only the graph's triple matched (and the default graph has no copy of it)
    # a syntax error is the same 400 as at /update; GET never updates
    r = requests.post(u, data=b"INSERT DATA { <a> ", headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 400 and r.json()["error"] == "syntax"
    r = requests.get(u, params={"update": "CLEAR ALL"})
    assert r.status_code == 400 and "POST" in r.json()["detail"]
    assert _count(s.url) == 2


def test_updates_at_sparql_follow_the_token_rules(make_server):
    s = make_server(token="w", read_token="r")
    u = s.url + "/sparql"
    ins = f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}".encode()
    ct = {"Content-Type": "application/sparql-update"}
    assert requests.post(u, data=ins, headers=ct).status_code == 401
    r = requests.post(u, data=ins, headers={**ct, "Authorization": "Bearer r"})  # the read token cannot write
    assert r.status_code == 403
    r = requests.post(u, data={"update": ins.decode()}, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 403
    assert _count(s.url, headers={"Authorization": "Bearer r"}) == 0
    r = requests.post(u, data=ins, headers={**ct, "Authorization": "Bearer w"})
    assert r.status_code == 204
    r = requests.post(u, data={"update": f"INSERT DATA {{ <{EX}b> <{EX}p> 2 }}"}, headers={"Authorization": "Bearer w"})
    assert r.status_code == 204
    assert _count(s.url, headers={"Authorization": "Bearer r"}) == 2


def test_service_description_advertises_update_on_the_endpoint(make_server):
    s = make_server()
    r = requests.get(s.url + "/sparql", headers={"Accept": "application/n-triples"})
    assert r.status_code == 200
    assert f"<{s.url}/sparql> <http://www.w3.org/ns/sparql-service-description#supportedLanguage> " \
           "<http://www.w3.org/ns/sparql-service-description#SPARQL11Update>" in r.text


@pytest.fixture
def data_server(make_server):
    s = make_server()
    body = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n" for i in range(3))
    r = requests.post(s.url + "/store?default", data=body.encode(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 204
    return s


@pytest.mark.parametrize("accept,form,ctype", [
    # a browser: the XML it accepts, under the format's canonical type (not the alias it named)
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "SELECT", F.SPARQL_XML),
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "CONSTRUCT", F.RDFXML),
    ("application/json", "SELECT", F.SPARQL_JSON),
    ("application/json", "CONSTRUCT", F.JSONLD),
    ("text/xml", "ASK", F.SPARQL_XML),
    ("text/plain", "SELECT", "text/plain"),
    ("text/plain", "CONSTRUCT", "text/plain"),
])
def test_negotiation_answers_canonical_types(data_server, accept, form, ctype):
    q = {"SELECT": f"SELECT ?s WHERE {{ ?s <{EX}p> ?o }}", "ASK": "ASK { ?s ?p ?o }",
         "CONSTRUCT": "CONSTRUCT WHERE { ?s ?p ?o }"}[form]
    r = requests.get(data_server.url + "/sparql", params={"query": q}, headers={"Accept": accept})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].split(";")[0] == ctype
    if ctype == "text/plain" and form == "SELECT":  # CSV
        assert r.text.splitlines()[0] == "s" and len(r.text.splitlines()) == 4
    if ctype == "text/plain" and form == "CONSTRUCT":  # N-Triples
        assert sorted(r.text.splitlines()) == [f"<{EX}s{i}> <{EX}p> <{EX}o{i}> ." for i in range(3)]


def test_format_parameter_errors_and_trig(data_server):
    u = data_server.url + "/sparql"
    r = requests.get(u, params={"query": "ASK {}", "format": "yaml"})
    assert r.status_code == 400
    doc = r.json()
    assert doc["error"] == "bad_request" and "yaml" in doc["detail"]
    assert {"json", "xml", "csv", "tsv", "turtle", "nt", "nq", "jsonld"} <= set(doc["available"])
    r = requests.get(u, params={"query": "ASK {}", "output": "bogus"})
    assert r.status_code == 400
    # a media type still works as a format value
    r = requests.get(u, params={"query": "ASK {}", "format": "application/sparql-results+xml"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith(F.SPARQL_XML)
    # format=trig asks for TriG, never Turtle: TriG when the server can write it, else a 406
    r = requests.get(u, params={"query": "CONSTRUCT WHERE { ?s ?p ?o }", "format": "trig"})
    if F.output_format(F.TRIG, F.GRAPH) is not None:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(F.TRIG)
    else:
        assert r.status_code == 406 and r.json()["error"] == "not_acceptable"
        assert "trig" in r.json()["detail"]
    # TriG is a graph format: a SELECT cannot be answered in it
    r = requests.get(u, params={"query": "SELECT * WHERE { ?s ?p ?o }", "format": "trig"})
    assert r.status_code == 406


def test_budget_refusal_is_422_without_retry_after(make_server):
    s = make_server(max_rows=50)
    body = "".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i}> .\n" for i in range(30))
    requests.post(s.url + "/store?default", data=body.encode(), headers={"Content-Type": "application/n-triples"})
    r = requests.get(s.url + "/sparql", params={"query": "SELECT * WHERE { ?a ?p ?b . ?c ?q ?d }"})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "row_budget" and "Retry-After" not in r.headers
    # the same refusal at /sparql for an update whose WHERE passes the budget
    r = requests.post(s.url + "/sparql", data={"update": "INSERT { ?a ?p ?d } WHERE { ?a ?p ?b . ?c ?q ?d }"})
    assert r.status_code == 422 and "Retry-After" not in r.headers


# ---------------------------------------------------------------- the HTTP fast lane

def _raw(port: int, data: bytes, responses: int, close: bool = False) -> list[tuple[int, dict, bytes]]:
    """Send raw bytes on one connection and read ``responses`` answers (Content-Length bodies)."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(data)
    try:
        out = read_answers(sock, responses)
        if close:  # the server closes the connection after the last answer
            assert sock.recv(1) == b""
    finally:
        sock.close()
    return out


def read_answers(sock, n: int) -> list[tuple[int, dict, bytes]]:
    """Read ``n`` answers (status, lower-case headers, Content-Length body) from a socket."""
    buf, out = b"", []
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} answers")
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        size = int(headers.get("content-length", "0"))
        while len(buf) < size:
            buf += sock.recv(65536)
        out.append((int(lines[0].split()[1]), headers, buf[:size]))
        buf = buf[size:]
    return out


def _get(path_qs: str, version: str = "1.1", extra: str = "") -> bytes:
    return f"GET {path_qs} HTTP/{version}\r\nHost: 127.0.0.1\r\nAccept: application/sparql-results+json\r\n{extra}\r\n".encode()


def test_fast_lane_answers_selective_gets_in_order(data_server):
    import json
    from urllib.parse import quote

    port = int(data_server.url.rsplit(":", 1)[1])
    edge = data_server.app.middleware_stack
    lane = []
    orig = edge.answer_inline
    orig_get = edge.answer_get

    def counting(scope, qs):
        out = orig(scope, qs)
        lane.append(out is not None)
        return out

    def counting_get(scope, fields, qs):
        out = orig_get(scope, fields, qs)
        lane.append(out is not None)
        return out

    edge.answer_inline = counting
    edge.answer_get = counting_get
    try:
        reqs = ["/sparql?query=" + quote(f"SELECT ?o WHERE {{ <{EX}s{i % 3}> <{EX}p> ?o }}", safe="")
                for i in range(8)]
        # pipelined: a status request (ordinary path) first, then queries the lane may answer
        # (every other query with Origin: a browser's CORS request, which gets the CORS headers)
        data = _get("/status") + b"".join(_get(r, extra="Origin: http://app.example\r\n" if i % 2 else "")
                                          for i, r in enumerate(reqs))
        answers = _raw(port, data, 1 + len(reqs))
        assert answers[0][0] == 200 and json.loads(answers[0][2])["service"] == "jindou"
        for i, (status, headers, body) in enumerate(answers[1:]):
            assert status == 200
            assert headers["content-type"] == F.SPARQL_JSON and headers["vary"] == "Accept, Origin"
            assert headers.get("access-control-allow-origin") == ("*" if i % 2 else None)
            assert json.loads(body)["results"]["bindings"] == [{"o": {"type": "uri", "value": f"{EX}o{i % 3}"}}]
        # one at a time on a keep-alive connection: the lane answers once the shape is known
        lane.clear()
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for i in range(6):
                sock.sendall(_get(reqs[i]))
                buf = b""
                while True:
                    buf += sock.recv(65536)
                    head, sep, body = buf.partition(b"\r\n\r\n")
                    if sep and len(body) >= int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]):
                        break
                assert json.loads(body)["results"]["bindings"][0]["o"]["value"] == f"{EX}o{i % 3}"
        assert any(lane)  # (a run slowed past --inline-ms by a loaded machine sends a few to the pool)
        # errors are answered by the lane as on the ordinary path; HTTP/1.0 closes
        bad = _raw(port, _get("/sparql?query=SELEC"), 1)[0]
        assert bad[0] == 400 and json.loads(bad[2])["error"] == "syntax"
        old = _raw(port, _get(reqs[0], "1.0"), 1, close=True)[0]
        assert old[0] == 200 and old[1].get("connection") == "close"
        # the lane declines what it does not handle: a body, an explain, the service description
        assert _raw(port, _get(reqs[0] + "&explain=true"), 1)[0][0] == 200
        assert _raw(port, _get("/sparql", extra="Accept: text/turtle\r\n"), 1)[0][0] == 200
    finally:
        edge.answer_inline = orig
        edge.answer_get = orig_get


def test_query_string_decoding_is_parse_qs():
    """The one-pass query-string decoder of the hot path agrees with urllib's parse_qs."""
    from urllib.parse import parse_qs, quote

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from server.api.common import _QS_CACHE, HTTPError, parse_params, parse_params_cached

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.tuples(st.text(max_size=12), st.text(max_size=40)), max_size=4),
           st.sampled_from(["", "&", "&&"]), st.binary(max_size=12))
    def check(pairs, sep, junk):
        qs = "&".join(quote(k, safe="") + "=" + quote(v, safe="/:") for k, v in pairs)
        for raw in (qs.encode() + sep.encode(), qs.replace("%20", "+").encode(), b"a=%zz%4&b", junk):
            _QS_CACHE.clear()
            try:
                want = parse_params(raw)
            except HTTPError as e:
                try:
                    parse_params_cached(raw)
                except HTTPError as e2:
                    assert e2.status == e.status
                else:
                    raise AssertionError(f"no error for {raw!r}") from None
                continue
            assert parse_params_cached(raw) == want, raw
            if raw.isascii():
                assert want == parse_qs(raw.decode(), keep_blank_values=True)

    check()
