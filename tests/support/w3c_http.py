"""One request of a W3C protocol test (SPARQL Protocol, Graph Store Protocol) sent as written:
the manifest's method, path, headers and body, nothing added but Content-Length (and Host
when the test names one)."""

from __future__ import annotations

import http.client


def send(port: int, req: dict, path: str, host: str | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    """The response (read) and its body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(req["method"], path, skip_host=host is not None, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host)
        for k, v in req["headers"].items():
            conn.putheader(k, v)
        body = req["body"]
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r, r.read()
    finally:
        conn.close()


NS_MF = "http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#"
NS_HT = "http://www.w3.org/2011/http#"
NS_CNT = "http://www.w3.org/2011/content#"


def _headers(g, node, ht, lower: bool = False) -> dict[str, str]:
    """An ``ht:headers`` list as a dict (names lower-cased if ``lower``)."""
    from rdflib.collection import Collection

    out = {}
    if node is not None:
        for h in Collection(g, node):
            name = str(g.value(h, ht.fieldName))
            out[name.lower() if lower else name] = str(g.value(h, ht.fieldValue))
    return out


def content(g, node) -> bytes | None:
    """A ``cnt:ContentAsText`` node's bytes in its declared encoding (UTF-8 if none)."""
    import rdflib

    if node is None:
        return None
    cnt = rdflib.Namespace(NS_CNT)
    enc = str(g.value(node, cnt.characterEncoding) or "UTF-8")
    return str(g.value(node, cnt.chars)).encode(enc)


def read_request(g, r) -> dict:
    """One ``ht:Request`` of a manifest: method, path, headers and body, plus its ``ht:resp``
    node (``resp``) and that response's headers (``resp_headers``, names lower-cased)."""
    import rdflib

    ht = rdflib.Namespace(NS_HT)
    resp = g.value(r, ht.resp)
    return {
        "method": str(g.value(r, ht.methodName)),
        "path": str(g.value(r, ht.absolutePath)),
        "headers": _headers(g, g.value(r, ht.headers), ht),
        "body": content(g, g.value(r, ht.body)),
        "resp": resp,
        "resp_headers": _headers(g, g.value(resp, ht.headers), ht, lower=True),
    }
