"""The request heads the HTTP fast lane reads itself (``server.app.FastLaneProtocol``).

A selective ``GET /sparql?query=`` costs the server less than 0.1 ms; on that
scale uvicorn's httptools protocol is a large share: a Python callback per
URL piece and per header, an ASGI scope dict, a keep-alive timer created and
cancelled per request. :func:`read_head` recognizes the plain, common form of
such a request in the bytes just received, with two regular expressions and
no per-request objects beyond the header list, so the lane can answer it
straight from ``data_received``.

It is deliberately strict: only ``GET /sparql?...`` (or ``/sparql/?``) over
HTTP/1.0 or 1.1, a URL of unreserved, percent-encoded and sub-delimiter
characters (and those a browser leaves raw in a query: braces, quotes, ``<>``...), header lines ``name: value`` of a token and printable ASCII, no
body or protocol-switch headers, a head of at most :data:`MAX_HEAD` bytes.
The one form with a body is ``POST /sparql`` (or ``/sparql/``, with or
without a query string of the same characters) with a single ``Content-Length`` of 1 to :data:`MAX_BODY` bytes and
no ``Transfer-Encoding`` or ``Expect``: its :class:`Head` says where the body
starts and ends, whether or not all of it is in the buffer yet (the caller
waits for the rest or leaves the request to httptools).
Anything else (and a head split over several reads) gets ``None`` and goes to
httptools, which parses and answers it exactly as before: the lane never
accepts a request the full parser would read differently.
"""

from __future__ import annotations

import re

#: longest head read here (a longer one goes to httptools)
MAX_HEAD = 16 << 10
#: longest POST body read here (a longer one goes to httptools)
MAX_BODY = 64 << 10

_TCHAR = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]"
#: the request line and the header block, the whole head (fullmatch): what
#: read_head accepts (it checks the same with byte operations, see there)
_HEAD = re.compile(
    rb"GET (/sparql/?)\?([A-Za-z0-9\-._~%!$&'()*+,;=:@/?{}|^\[\]\\`\"<>]*) HTTP/1\.([01])\r\n"
    rb"((?:" + _TCHAR + rb"+:[ \t]*[ -~\t]*\r\n)*)\r\n"
)
#: the query string's characters (as in _HEAD), for bytes.translate's delete: unreserved,
#: percent-encoded and sub-delimiter characters, and the printable ones a browser leaves
#: unencoded in a query (WHATWG's query percent-encode set: a SPARQL text typed in the
#: address bar arrives with its braces raw), which httptools reads as they are; not ``#``
URL_BYTES = (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~%!$&'()*+,;=:@/?"
             b"{}|^[]\\`\"<>")
#: the header block (as in _HEAD)
_BLOCK = re.compile(rb"(?:" + _TCHAR + rb"+:[ \t]*[ -~\t]*\r\n)*")

#: headers that make the lane decline a request: a body, a protocol switch, proxy
#: headers (uvicorn's proxy middleware rewrites the scope for those)
DECLINES = frozenset({b"content-length", b"transfer-encoding", b"expect", b"upgrade",
                      b"x-forwarded-for", b"x-forwarded-proto", b"forwarded"})
#: ... a POST's: the same but its Content-Length
POST_DECLINES = DECLINES - {b"content-length"}


class Head:
    """One request head read by :func:`read_head`."""

    __slots__ = ("path", "qs", "http10", "headers", "fields", "close", "end", "body")

    def __init__(self, path, qs, http10, headers, fields, close, end, body=-1):
        self.path = path          # b"/sparql" or b"/sparql/"
        self.qs = qs              # the raw query string (a POST without one: None)
        self.http10 = http10      # HTTP/1.0 (the connection closes after the answer)
        self.headers = headers    # ((lower-case name, value), ...) as bytes, as uvicorn's scope has them
        self.fields = fields      # lower-case name -> value (str, repeats joined by ", "), as header_dict
        self.close = close        # the client asked to close (Connection: close) or HTTP/1.0
        self.end = end            # offset just past the request (head and body) in the buffer; a POST's
        #                           may lie past the buffer's end (the body is not all there yet)
        self.body = body          # a POST: offset of its body (data[body:end]); a GET: -1


#: header block -> (headers, fields, Connection: close, Content-Length) as read_head reads it, or
#: None (a header the lane declines): a client sends the same few header lines
#: with every request, so they are split and decoded once (the values are shared
#: between requests: read-only)
_BLOCKS: dict[bytes, tuple | None] = {}
#: ... those a GET may have (no Content-Length): read_head's one lookup for a GET
_GET_BLOCKS: dict[bytes, tuple] = {}
_BLOCKS_MAX = 256
#: longest header block kept in _BLOCKS
_BLOCK_KEEP = 2048


#: a request line's last nine bytes -> whether it is HTTP/1.0 (any other version: not the lane's)
_HTTP10 = {b" HTTP/1.1": False, b" HTTP/1.0": True}


def read_head(data: bytes, pos: int = 0) -> Head | None:
    """The head of the request starting at ``data[pos]`` when it is a plain lane
    request, complete in ``data``; None otherwise (httptools reads it)."""
    # _HEAD.fullmatch(data, pos, end + 4), in byte operations: the request line is
    # the head's first line (no URL byte is a space, CR or LF), the query string
    # all URL bytes, and a header block is checked by _BLOCK once, when first seen.
    # The request line (the URL: most of the head) is scanned once, for its CR: a
    # one-byte search is memchr, a two- or four-byte one several times slower (two
    # of those over the whole head were ~1.5 us a request). A first CR that does
    # not end the line is a request the lane declines; the head's end is then
    # searched for in the header block only.
    lim = pos + MAX_HEAD
    eol = data.find(b"\r", pos, lim)
    if not data.startswith(b"\r\n", eol):  # (none found: -1, the last byte, cannot start it)
        return None
    end = data.find(b"\r\n\r\n", eol, lim)
    if end < 0:
        return None
    # (a GET, the usual request, read in place in ``data``: no copy of its request line)
    if data.startswith(b"GET /sparql?", pos):
        path, start = b"/sparql", pos + 12
    elif data.startswith(b"GET /sparql/?", pos):
        path, start = b"/sparql/", pos + 13
    else:
        return _read_post(data, pos, eol, end)
    vend = eol - 9  # (the version's start)
    http10 = _HTTP10.get(data[vend:eol])
    if http10 is None:
        return None
    if vend < start:
        return None
    qs = data[start:vend]
    if qs.translate(None, URL_BYTES):
        return None
    block = data[eol + 2:end + 2]
    known = _GET_BLOCKS.get(block)
    if known is None:
        known = _block(block)
        if known is None or known[3] is not None:  # (declined, or a GET with a body)
            return None
    return Head(path, qs, http10, known[0], known[1], known[2] or http10, end + 4)


def _read_post(data: bytes, pos: int, eol: int, end: int) -> Head | None:
    """:func:`read_head` of a request that is no lane GET: a lane POST's head, or None."""
    line = data[pos:eol]
    if not line.startswith(b"POST /sparql"):
        return None
    path, q, _ = line[5:-9].partition(b"?")
    if path != b"/sparql" and path != b"/sparql/":
        return None
    with_qs = bool(q)
    start = 5 + len(path) + 1 if with_qs else len(line) - 9
    http10 = _HTTP10.get(line[-9:])
    if http10 is None:
        return None
    if len(line) < start + 9:
        return None
    qs = line[start:-9]
    if qs.translate(None, URL_BYTES):
        return None
    block = data[eol + 2:end + 2]
    known = _BLOCKS.get(block)
    if known is None:
        known = _block(block)
        if known is None:
            return None
    clen = known[3]
    if clen is None or clen <= 0 or clen > MAX_BODY:
        return None
    return Head(path, qs if with_qs else None, http10, known[0], known[1], known[2] or http10,
                end + 4 + clen, end + 4)


def _block(block: bytes) -> tuple | None:
    """The kept reading of a header block (:data:`_BLOCKS`; None: declined), read, checked
    and kept when new (see :func:`_read_block`); :data:`_GET_BLOCKS` keeps those of a GET."""
    if block in _BLOCKS:
        return _BLOCKS[block]
    known = _read_block(block) if _BLOCK.fullmatch(block) else None
    if len(block) <= _BLOCK_KEEP and b"x-request-id" not in block.lower():  # (a new id every request)
        if len(_BLOCKS) >= _BLOCKS_MAX:
            _BLOCKS.clear()
            _GET_BLOCKS.clear()
        _BLOCKS[block] = known
        if known is not None and known[3] is None:
            _GET_BLOCKS[block] = known
    return known


def _read_block(block: bytes) -> tuple | None:
    """(headers, fields, Connection: close, Content-Length) of a header block the
    expression checked (each line a token, a colon, printable ASCII); None when a
    header makes the lane decline the request. The length is None without the
    header, -1 when it is not one plain decimal number (repeated, signed, empty:
    httptools' business)."""
    headers = []
    fields: dict[str, str] = {}
    close = False
    clen = None
    if block:
        for line in block[:-2].split(b"\r\n"):
            name, _, raw = line.partition(b":")
            name = name.lower()
            # httptools (0.9) drops the blanks before a value and keeps those after it: so do
            # we, or an answer that quotes a header (a 406 lists the Accept header) differs
            value = raw.lstrip(b" \t")
            if name in POST_DECLINES:
                return None
            if name == b"content-length":
                clen = int(value) if clen is None and value.isdigit() and len(value) <= 9 else -1
            if name == b"connection" and any(t.strip() == b"close" for t in value.lower().split(b",")):
                close = True
            headers.append((name, value))
            k = name.decode("latin-1")
            if k in fields:
                fields[k] += ", " + value.decode("latin-1")
            else:
                fields[k] = value.decode("latin-1")
    return tuple(headers), fields, close, clen
