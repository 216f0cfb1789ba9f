"""/update against the real server: bindings, dataset parameters, auth."""

from __future__ import annotations

import pytest
import requests

EX = "http://ex.org/"
UPD = {"Content-Type": "application/sparql-update"}


def ask(url: str, q: str) -> bool:
    r = requests.get(url + "/sparql", params={"query": q})
    assert r.status_code == 200, r.text
    return r.json()["boolean"]


def test_update_body_and_form(clean_server):
    u = clean_server.url
    r = requests.post(u + "/update", data=f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}".encode(), headers=UPD)
    assert r.status_code == 204 and r.content == b""
    assert ask(u, f"ASK {{ <{EX}a> <{EX}p> 1 }}")
    r = requests.post(u + "/update", data={"update": f"DELETE DATA {{ <{EX}a> <{EX}p> 1 }}"})
    assert r.status_code == 204
    assert not ask(u, f"ASK {{ <{EX}a> <{EX}p> 1 }}")


def test_update_using_graph_uri(clean_server):
    u = clean_server.url
    r = requests.post(u + "/update", data=f"INSERT DATA {{ GRAPH <{EX}g> {{ <{EX}a> <{EX}p> <{EX}b> }} }}".encode(),
                      headers=UPD)
    assert r.status_code == 204
    upd = f"INSERT {{ GRAPH <{EX}out> {{ ?s <{EX}copied> ?o }} }} WHERE {{ ?s <{EX}p> ?o }}"
    r = requests.post(u + "/update", params={"using-graph-uri": EX + "g"}, data=upd.encode(), headers=UPD)
    assert r.status_code == 204, r.text
    assert ask(u, f"ASK {{ GRAPH <{EX}out> {{ <{EX}a> <{EX}copied> <{EX}b> }} }}")
    # both the protocol parameter and WITH: error
    r = requests.post(u + "/update", params={"using-named-graph-uri": EX + "g"},
                      data=f"WITH <{EX}g> DELETE {{ ?s ?p ?o }} WHERE {{ ?s ?p ?o }}".encode(), headers=UPD)
    assert r.status_code == 400


@pytest.mark.parametrize("kwargs,status", [
    ({"data": b"CLEAR XYZ", "headers": UPD}, 400),
    ({"data": b"CLEAR ALL"}, 415),
    ({"data": b"CLEAR ALL", "headers": {"Content-Type": "text/plain"}}, 415),
    ({"data": "CLEAR ALL".encode("utf-16"), "headers": {"Content-Type": "application/sparql-update; charset=UTF-16"}}, 415),
    ({"data": "update=CLEAR%20NAMED&update=CLEAR%20DEFAULT",
      "headers": {"Content-Type": "application/x-www-form-urlencoded"}}, 400),
    ({"data": {"query": "ASK {}"}}, 400),
    ({"data": b"ASK {}", "headers": {"Content-Type": "application/sparql-query"}}, 400),
    ({"data": b"\xff\xfe", "headers": UPD}, 400),
])
def test_bad_updates(clean_server, kwargs, status):
    kwargs = {**kwargs, "headers": {**kwargs.get("headers", {}), "Origin": "http://app.example"}}  # CORS headers with Origin
    r = requests.post(clean_server.url + "/update", **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "error" in r.json()


def test_update_syntax_error_position(clean_server):
    r = requests.post(clean_server.url + "/update", data=b"INSERT DATA {\n <a> <b> }", headers=UPD)
    assert r.status_code == 400
    doc = r.json()
    assert doc["error"] == "syntax" and "line" in doc and "column" in doc


def test_update_get_not_allowed(clean_server):
    r = requests.get(clean_server.url + "/update", params={"update": "CLEAR ALL"})
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"


def test_token_auth(make_server):
    s = make_server(token="s3cret")
    u = s.url
    body = f"INSERT DATA {{ <{EX}a> <{EX}p> <{EX}b> }}".encode()
    r = requests.post(u + "/update", data=body, headers={**UPD, "Origin": "http://app.example"})
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert r.json()["error"] == "unauthorized"
    r = requests.post(u + "/update", data=body, headers={**UPD, "Authorization": "Bearer nope"})
    assert r.status_code == 403 and r.json()["error"] == "forbidden"
    r = requests.post(u + "/update", data=body, headers={**UPD, "Authorization": "Basic czNjcmV0"})
    assert r.status_code == 403
    r = requests.post(u + "/update", data=body, headers={**UPD, "Authorization": "Bearer s3cret"})
    assert r.status_code == 204
    # reads stay open
    assert ask(u, f"ASK {{ <{EX}a> <{EX}p> <{EX}b> }}")
    # store writes need the token too; store reads do not
    nt = f"<{EX}x> <{EX}y> <{EX}z> .\n".encode()
    ct = {"Content-Type": "application/n-triples"}
    assert requests.put(u + "/store?default", data=nt, headers=ct).status_code == 401
    assert requests.post(u + "/store?default", data=nt, headers={**ct, "Authorization": "Bearer x"}).status_code == 403
    assert requests.delete(u + "/store?default").status_code == 401
    assert requests.post(u + "/store?default", data=nt, headers={**ct, "Authorization": "Bearer s3cret"}).status_code == 204
    assert requests.get(u + "/store?default").status_code == 200


def test_read_token(make_server):
    s = make_server(token="w", read_token="r")
    q = {"query": "ASK {}"}
    assert requests.get(s.url + "/sparql", params=q).status_code == 401
    assert requests.get(s.url + "/sparql", params=q, headers={"Authorization": "Bearer x"}).status_code == 403
    assert requests.get(s.url + "/sparql", params=q, headers={"Authorization": "Bearer r"}).status_code == 200
    assert requests.get(s.url + "/sparql", params=q, headers={"Authorization": "Bearer w"}).status_code == 200
    assert requests.get(s.url + "/store?default").status_code == 401
    assert requests.get(s.url + "/store?default", headers={"Authorization": "Bearer r"}).status_code == 200
    # the read token does not allow writes
    r = requests.post(s.url + "/update", data=b"CLEAR ALL", headers={**UPD, "Authorization": "Bearer r"})
    assert r.status_code == 403
    # status stays open for health checks
    assert requests.get(s.url + "/status").status_code == 200
