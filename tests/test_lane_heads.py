"""server.lane.read_head: the fast lane reads a request head itself only when
httptools (the full parser behind it) reads the very same request from it."""

from __future__ import annotations

import httptools
from hypothesis import given, settings
from hypothesis import strategies as st

from server.lane import _HEAD, DECLINES, read_head


class _Sink:
    def __init__(self):
        self.url = b""
        self.headers = []
        self.done = 0

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        self.headers.append((name.lower(), value))

    def on_message_complete(self):
        self.done += 1


def _httptools(data: bytes):
    sink = _Sink()
    p = httptools.HttpRequestParser(sink)
    try:
        p.feed_data(data)
    except httptools.HttpParserError:
        return None
    if not sink.done:
        return None
    return p.get_method(), sink.url, p.get_http_version(), sink.headers, p.should_keep_alive()


_methods = st.sampled_from([b"GET", b"POST", b"HEAD", b"get", b"GET "])
_paths = st.sampled_from([b"/sparql", b"/sparql/", b"/sparq", b"/update", b"/sparql//", b"/"])
_qchars = st.sampled_from(list(b"azAZ09-._~%!$&'()*+,;=:@/?#<> \"\\{}|^`\x7f\x00\xc3") + [b"%2", b"%20"])
_versions = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1", b"HTTP/1.2"])
_names = st.sampled_from([b"Host", b"Accept", b"accept", b"X-Request-Id", b"Connection", b"Content-Length",
                          b"Transfer-Encoding", b"Upgrade", b"Expect", b"Bad Name", b"X(y)", b"Authorization",
                          b"", b"Origin"])
_values = st.lists(st.sampled_from([b"a", b" ", b"\t", b"close", b"keep-alive", b"0", b"\x01", b"\xff", b",",
                                    b"application/sparql-results+json", b"\r", b"\n"]), max_size=6).map(b"".join)


@st.composite
def _requests(draw):
    q = draw(st.lists(_qchars, max_size=12)).copy()
    q = b"".join(bytes([c]) if isinstance(c, int) else c for c in q)
    line = draw(_methods) + b" " + draw(_paths) + b"?query=" + q + b" " + draw(_versions) + b"\r\n"
    headers = b"".join(draw(_names) + draw(st.sampled_from([b": ", b":", b" : ", b":\t"])) + draw(_values) + b"\r\n"
                       for _ in range(draw(st.integers(0, 4))))
    tail = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n", b""]))
    return line + headers + tail


@settings(max_examples=600, deadline=None)
@given(_requests())
def test_read_head_agrees_with_httptools(data):
    head = read_head(data)
    if head is None:
        return
    full = _httptools(data)
    assert full is not None, data
    method, url, version, headers, keep_alive = full
    assert method == b"GET"
    assert url == head.path + b"?" + head.qs
    assert version == ("1.0" if head.http10 else "1.1")
    assert headers == list(head.headers)
    assert not any(k in DECLINES for k, _ in headers)
    if not head.http10:
        assert keep_alive == (not head.close)
    assert head.end == len(data)


def test_plain_request_and_pipelining():
    one = b"GET /sparql?query=ASK%7B%7D HTTP/1.1\r\nHost: h:1\r\nAccept: a/b\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
    h = read_head(one + one)
    assert h is not None and h.end == len(one)
    assert h.fields == {"host": "h:1", "accept": "a/b", "x-a": "1, 2"}
    h2 = read_head(one + one, h.end)
    assert h2 is not None and h2.end == 2 * len(one)
    assert read_head(one[:-1]) is None  # incomplete: httptools waits for the rest
    assert read_head(b"GET /sparql?query=x HTTP/1.1\r\nContent-Length: 0\r\n\r\n") is None
    assert read_head(b"GET /sparql?query=x HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n") is None
    assert read_head(b"GET /sparql?query=x HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n").close
    assert read_head(b"GET /sparql?query=x HTTP/1.0\r\n\r\n").close


@settings(max_examples=600, deadline=None)
@given(_requests(), st.booleans())
def test_read_head_accepts_what_the_head_expression_matches(data, twice):
    """read_head's byte checks (and its cache of header blocks) accept exactly the
    heads that the expression ``_HEAD`` matches, less those with a declined header."""
    end = data.find(b"\r\n\r\n")
    m = _HEAD.fullmatch(data, 0, end + 4) if end >= 0 else None
    declined = m is not None and any(
        line.partition(b":")[0].lower() in DECLINES for line in m.group(4)[:-2].split(b"\r\n") if line)
    for _ in range(1 + twice):  # the second time from the cache of header blocks
        head = read_head(data)
        assert (head is not None) == (m is not None and not declined), data
        if head is not None:
            assert (head.path, head.qs, head.http10, head.end) == (m.group(1), m.group(2), m.group(3) == b"0",
                                                                    m.end())
