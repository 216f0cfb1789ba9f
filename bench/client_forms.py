"""The request bytes common SPARQL clients send for one query text.

Each form below reproduces, for any query text, the head lines, header order,
percent-encoding and write boundaries that the named client was seen to send
(recorded on 2026-11-26 from the installed requests 2.34, httpx 0.28,
SPARQLWrapper 2.0, rdflib 7.6 ``SPARQLConnector``, ``http.client`` as
``bench sparql --alternate-http`` uses it, curl 7.88 and a Chromium ``fetch``).
``bench.lane_profile --clients`` measures the server's CPU per request for
each form; the lane tests check that every form is answered on the fast lane
with the ordinary path's bytes. A form is a list of byte chunks: one chunk per
``send`` of the client (a POST whose body follows its head in a second write
reaches the server as two reads).
"""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus

SRJ = "application/sparql-results+json"
HOST = "127.0.0.1:7878"
#: SPARQLWrapper's Accept for JSON results, and the result-format parameters it adds
SW_ACCEPT = "application/sparql-results+json,application/json,text/javascript,application/javascript"
SW_PARAMS = "&format=json&output=json&results=json"
CHROME_HEADERS = (
    "Connection: keep-alive\r\n"
    'sec-ch-ua-platform: "Linux"\r\n'
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36\r\n"
    "Accept: {accept}\r\n"
    'sec-ch-ua: "Google Chrome";v="131", "Chromium";v="131", "Not_A Brand";v="24"\r\n'
    "sec-ch-ua-mobile: ?0\r\n"
    "Origin: http://localhost:8080\r\n"
    "Sec-Fetch-Site: cross-site\r\n"
    "Sec-Fetch-Mode: cors\r\n"
    "Sec-Fetch-Dest: empty\r\n"
    "Referer: http://localhost:8080/\r\n"
    "Accept-Encoding: gzip, deflate, br, zstd\r\n"
    "Accept-Language: en-US,en;q=0.9\r\n"
)


#: what a browser leaves raw in a query typed in the address bar (besides letters, digits, -._~)
_ADDRESS_BAR = "/:?@!$()*,;={}|^[]`\\"


def _lower_hex(s: str) -> str:
    """curl's percent-encoding: lower-case hex digits."""
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), s)


def _curl(text: str) -> str:
    return _lower_hex(quote_plus(text, safe=""))


def _post(head: str, body: bytes, split: bool) -> list[bytes]:
    h = head.format(n=len(body)).encode()
    return [h, body] if split else [h + body]


def forms(text: str, accept: str = SRJ) -> dict[str, list[bytes]]:
    """client form name -> the chunks it sends for ``text`` (see the module docstring)."""
    qp = quote_plus(text, safe="")
    form_body = ("query=" + qp).encode()
    raw = text.encode()
    sw = quote_plus(text, safe="/")
    return {
        # bench http-load's own client
        "bench": [f"GET /sparql?query={quote(text, safe='')} HTTP/1.1\r\nHost: {HOST}\r\n"
                  f"Accept: {accept}\r\n\r\n".encode()],
        "curl-get": [f"GET /sparql?query={_curl(text)} HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: curl/7.88.1\r\n"
                     f"Accept: {accept}\r\n\r\n".encode()],
        "curl-post-form": _post(f"POST /sparql HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: curl/7.88.1\r\n"
                                f"Accept: {accept}\r\nContent-Length: {{n}}\r\n"
                                "Content-Type: application/x-www-form-urlencoded\r\n\r\n", form_body, False),
        "curl-post-query": _post(f"POST /sparql HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: curl/7.88.1\r\n"
                                 f"Content-Type: application/sparql-query\r\nAccept: {accept}\r\n"
                                 "Content-Length: {n}\r\n\r\n", raw, False),
        "requests-get": [f"GET /sparql?query={qp} HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: python-requests/2.34.2\r\n"
                         f"Accept-Encoding: gzip, deflate\r\nAccept: {accept}\r\nConnection: keep-alive\r\n\r\n"
                         .encode()],
        "requests-post-form": _post(f"POST /sparql HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: python-requests/2.34.2\r\n"
                                    f"Accept-Encoding: gzip, deflate\r\nAccept: {accept}\r\nConnection: keep-alive\r\n"
                                    "Content-Length: {n}\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n",
                                    form_body, True),
        "requests-post-query": _post(f"POST /sparql HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: python-requests/2.34.2\r\n"
                                     f"Accept-Encoding: gzip, deflate\r\nAccept: {accept}\r\nConnection: keep-alive\r\n"
                                     "Content-Type: application/sparql-query\r\nContent-Length: {n}\r\n\r\n",
                                     raw, True),
        "httpx-get": [f"GET /sparql?query={qp} HTTP/1.1\r\nHost: {HOST}\r\nAccept-Encoding: gzip, deflate\r\n"
                      f"Connection: keep-alive\r\nUser-Agent: python-httpx/0.28.1\r\nAccept: {accept}\r\n\r\n".encode()],
        # bench sparql --alternate-http (http.client: head and body in two writes)
        "http.client-post-query": _post(f"POST /sparql HTTP/1.1\r\nHost: {HOST}\r\nAccept-Encoding: identity\r\n"
                                        "Content-Length: {n}\r\nContent-Type: application/sparql-query\r\n"
                                        f"Accept: {accept}\r\n\r\n", raw, True),
        # urllib.request (rdflib's SPARQLConnector, SPARQLWrapper): a new connection per request
        "rdflib-get": [f"GET /sparql?query={qp} HTTP/1.1\r\nAccept-Encoding: identity\r\nHost: {HOST}\r\n"
                       f"User-Agent: Python-urllib/3.11\r\nAccept: {accept}\r\nConnection: close\r\n\r\n".encode()],
        "sparqlwrapper-get": [f"GET /sparql?query={sw}{SW_PARAMS} HTTP/1.1\r\nAccept-Encoding: identity\r\n"
                              f"Host: {HOST}\r\nUser-Agent: sparqlwrapper 2.0.0 (rdflib.github.io/sparqlwrapper)\r\n"
                              f"Accept: {SW_ACCEPT}\r\nConnection: close\r\n\r\n".encode()],
        "sparqlwrapper-post-form": _post("POST /sparql HTTP/1.1\r\nAccept-Encoding: identity\r\nContent-Length: {n}\r\n"
                                         f"Host: {HOST}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                                         "User-Agent: sparqlwrapper 2.0.0 (rdflib.github.io/sparqlwrapper)\r\n"
                                         f"Accept: {SW_ACCEPT}\r\nConnection: close\r\n\r\n",
                                         f"query={sw}{SW_PARAMS}".encode(), False),
        "sparqlwrapper-post-query": _post(f"POST /sparql?{SW_PARAMS[1:]} HTTP/1.1\r\nAccept-Encoding: identity\r\n"
                                          f"Content-Length: {{n}}\r\nHost: {HOST}\r\n"
                                          "Content-Type: application/sparql-query\r\n"
                                          "User-Agent: sparqlwrapper 2.0.0 (rdflib.github.io/sparqlwrapper)\r\n"
                                          f"Accept: {SW_ACCEPT}\r\nConnection: close\r\n\r\n", raw, False),
        # a query typed in a browser's address bar (WHATWG's query percent-encode set: braces,
        # brackets, |, ^, ` and \ stay raw; + & % encoded here so the text survives, which
        # a browser would not do), a web page's fetch() (encodeURIComponent), YASGUI's form POST
        "browser-address-bar": [(f"GET /sparql?query={quote(text, safe=_ADDRESS_BAR)} HTTP/1.1\r\nHost: {HOST}\r\n"
                                 + CHROME_HEADERS.replace("Sec-Fetch-Mode: cors", "Sec-Fetch-Mode: navigate")
                                 .format(accept=accept) + "\r\n").encode()],
        "browser-get": [(f"GET /sparql?query={quote(text, safe=chr(39) + '!()*')} HTTP/1.1\r\nHost: {HOST}\r\n"
                         + CHROME_HEADERS.format(accept=accept) + "\r\n").encode()],
        "yasgui-post-form": _post(f"POST /sparql HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {{n}}\r\n"
                                  + CHROME_HEADERS.format(accept=accept + ",*/*;q=0.9").replace(
                                      "Accept-Encoding", "Content-Type: application/x-www-form-urlencoded; "
                                      "charset=UTF-8\r\nAccept-Encoding") + "\r\n", form_body, False),
    }


#: forms that close the connection after the answer (a new connection per request)
CLOSING = frozenset({"rdflib-get", "sparqlwrapper-get", "sparqlwrapper-post-form", "sparqlwrapper-post-query"})
