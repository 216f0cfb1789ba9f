"""server.lane.read_head: the fast lane reads a request head itself only when
httptools (the full parser behind it) reads the very same request from it."""

from __future__ import annotations

import httptools
from hypothesis import given, settings
from hypothesis import strategies as st

from server.lane import _HEAD, DECLINES, MAX_BODY, POST_DECLINES, read_head


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
_qchars = st.sampled_from(list(b"azAZ09-._~%!$&'()*+,;=:@/?#<> \"\\{}|^`[]\x7f\x00\xc3\t") + [b"%2", b"%20"])
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


class _BodySink(_Sink):
    def __init__(self):
        super().__init__()
        self.body = b""
        self.parser = None
        self.keep_alive = None

    def on_headers_complete(self):  # where uvicorn asks (the flags are reset once the body is read)
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body):
        self.body += body


def _httptools_post(data: bytes):
    """(method, url, version, headers, keep-alive, body) of the first request httptools
    reads completely from ``data``; None when it reads none (error or incomplete)."""
    sink = _BodySink()
    p = sink.parser = httptools.HttpRequestParser(sink)
    try:
        p.feed_data(data)
    except httptools.HttpParserError:
        return None
    if not sink.done:
        return None
    return p.get_method(), sink.url, p.get_http_version(), sink.headers, sink.keep_alive, sink.body


_post_paths = st.sampled_from([b"/sparql"] * 4 + [b"/sparql/", b"/sparql?query=x", b"/sparql?", b"/sparqlx",
                                                   b"/update", b"/sparql?format=json&output=json", b"/sparql/?a=%20+b",
                                                   b"/sparql?x=<y>", b"/sparql??", b"/sparql?a#b"])
_post_versions = st.sampled_from([b"HTTP/1.1"] * 4 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1"])
_post_names = st.sampled_from([b"Host", b"Accept", b"Content-Type", b"Content-Type", b"content-length", b"Connection",
                               b"Connection", b"Transfer-Encoding", b"Expect", b"X-Request-Id", b"Bad Name"])
_post_values = st.sampled_from([b"application/sparql-query", b"application/x-www-form-urlencoded",
                                b"close", b"keep-alive", b"chunked", b"100-continue", b"a", b"", b"\xff"])
_lengths = st.sampled_from([b"1", b"5", b"12", b"16", b"20", b"40"] * 3 + [
    b"0", b"012", b"+5", b"-1", b"5 ", b" 5", b"5, 5", b"1e1", b"99999999999", b"65536", b"65537", b""])


@st.composite
def _posts(draw):
    line = b"POST " + draw(_post_paths) + b" " + draw(_post_versions) + b"\r\n"
    lines = [draw(_post_names) + b": " + draw(_post_values) for _ in range(draw(st.integers(0, 3)))]
    for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2]))):  # none, one or two Content-Length lines
        lines.insert(draw(st.integers(0, len(lines))),
                     draw(st.sampled_from([b"Content-Length", b"content-length", b"Content-length "]))
                     + draw(st.sampled_from([b": ", b":", b":\t"])) + draw(_lengths))
    head = line + b"".join(x + b"\r\n" for x in lines) + draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
    body = draw(st.binary(max_size=24)) + draw(st.sampled_from([b"", b"GET /sparql?query=x HTTP/1.1\r\n\r\n"]))
    return head + body


@settings(max_examples=1500, deadline=None)
@given(_posts(), st.booleans())
def test_read_head_of_a_post_agrees_with_httptools(data, twice):
    """A POST head the lane reads (complete or with its body still arriving) is the
    request httptools reads: method, URL, version, headers, keep-alive and the body
    of exactly Content-Length bytes, what follows it being the next request."""
    for _ in range(1 + twice):  # the second time from the cache of header blocks
        head = read_head(data)
        if head is None:
            continue
        assert head.body >= 0
        whole = data if head.end <= len(data) else data + b"x" * (head.end - len(data))
        if head.end > len(data):  # not all there: httptools waits too (no error, no request yet)
            assert _httptools_post(data) is None
            sink = _BodySink()
            sink.parser = httptools.HttpRequestParser(sink)
            sink.parser.feed_data(data)  # raises on an error
            assert not sink.done
        full = _httptools_post(whole[:head.end])
        assert full is not None, data
        method, url, version, headers, keep_alive, body = full
        assert method == b"POST"
        assert url == (head.path if head.qs is None else head.path + b"?" + head.qs)
        assert version == ("1.0" if head.http10 else "1.1")
        assert headers == list(head.headers)
        assert not any(k in POST_DECLINES for k, _ in headers)
        assert sum(k == b"content-length" for k, _ in headers) == 1
        if not head.http10:
            assert keep_alive == (not head.close)
        assert body == whole[head.body:head.end] and 0 < len(body) <= MAX_BODY


def test_post_heads():
    body = b"ASK {}"
    one = b"POST /sparql HTTP/1.1\r\nContent-Type: application/sparql-query\r\nContent-Length: 6\r\n\r\n" + body
    h = read_head(one + one)
    assert h is not None and (h.body, h.end) == (len(one) - 6, len(one)) and h.fields["content-length"] == "6"
    assert read_head(one + one, h.end).end == 2 * len(one)
    h = read_head(one[:-2])  # the body still arriving: where it ends
    assert h is not None and h.end == len(one)
    assert read_head(one.replace(b"6\r\n", b"0\r\n")) is None  # no body
    h = read_head(one.replace(b"/sparql ", b"/sparql?x=1 "))  # a query string with it
    assert h is not None and (h.path, h.qs, h.end) == (b"/sparql", b"x=1", len(one) + 4)
    assert read_head(one).qs is None and read_head(one.replace(b"/sparql ", b"/sparql? ")).qs == b""
    assert read_head(one.replace(b"/sparql ", b"/sparql?x=#1 ")) is None
    assert read_head(one.replace(b"Content-Length: 6\r\n", b"")) is None
    assert read_head(one.replace(b"Content-Length: 6\r\n", b"Content-Length: 6\r\nContent-Length: 6\r\n")) is None
    assert read_head(one.replace(b"6\r\n", b"%d\r\n" % (MAX_BODY + 1))) is None
    assert read_head(one.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")) is None
    assert read_head(b"GET /sparql?query=x HTTP/1.1\r\nContent-Length: 1\r\n\r\nx") is None  # a GET with a body


def _read_head_two_scans(data: bytes, pos: int = 0):
    """read_head as it was before its one-byte scan for the request line's end (the
    oracle): the head's end searched for over the whole head, then the line's end;
    the header block read anew every time (no cache)."""
    from server.lane import _BLOCK, MAX_HEAD, URL_BYTES, Head, _read_block

    end = data.find(b"\r\n\r\n", pos, pos + MAX_HEAD)
    if end < 0:
        return None
    eol = data.find(b"\r\n", pos, end + 2)
    line = data[pos:eol]
    post = with_qs = False
    if line.startswith(b"GET /sparql?"):
        path, start = b"/sparql", 12
    elif line.startswith(b"GET /sparql/?"):
        path, start = b"/sparql/", 13
    elif line.startswith(b"POST /sparql"):
        path, q, _ = line[5:-9].partition(b"?")
        if path != b"/sparql" and path != b"/sparql/":
            return None
        post, with_qs = True, bool(q)
        start = 5 + len(path) + 1 if with_qs else len(line) - 9
    else:
        return None
    version = line[-9:]
    if version not in (b" HTTP/1.1", b" HTTP/1.0"):
        return None
    http10 = version == b" HTTP/1.0"
    if len(line) < start + 9:
        return None
    qs = line[start:-9]
    if qs.translate(None, URL_BYTES):
        return None
    block = data[eol + 2:end + 2]
    known = _read_block(block) if _BLOCK.fullmatch(block) else None
    if known is None:
        return None
    clen = known[3]
    if post:
        if clen is None or clen <= 0 or clen > MAX_BODY:
            return None
        return Head(path, qs if with_qs else None, http10, known[0], known[1], known[2] or http10,
                    end + 4 + clen, end + 4)
    if clen is not None:
        return None
    return Head(path, qs, http10, known[0], known[1], known[2] or http10, end + 4)

_crs = st.sampled_from([b"", b"\r", b"\n", b"\r\n", b"\r\r\n", b"\n\r", b"\r\n\r\n", b" HTTP/1.1\r"])


@settings(max_examples=1500, deadline=None)
@given(st.one_of(_requests(), _posts()), _crs, st.integers(0, 400), st.binary(max_size=6), st.booleans())
def test_read_head_one_scan_agrees_with_two_scans(data, cr, at, prefix, pipelined):
    """The head's end found from the request line's first CR is the one a search over
    the whole head finds, at any offset, with stray CR / LF bytes anywhere (a lone CR
    in the request line: declined, as its bytes were before)."""
    at = min(at, len(data))
    data = data[:at] + cr + data[at:]
    buf = prefix + data + (data if pipelined else b"")
    pos = len(prefix)
    old = _read_head_two_scans(buf, pos)
    new = read_head(buf, pos)
    if old is None:
        assert new is None, buf
        return
    assert new is not None, buf
    assert (new.path, new.qs, new.http10, new.headers, new.close, new.end, new.body) == (
        old.path, old.qs, old.http10, old.headers, old.close, old.end, old.body)


def test_lone_cr_ends_no_request_line():
    """A CR not followed by LF in the request line is declined (httptools answers), even
    right after the version, where the line before it would read as a plain request."""
    for data in (b"GET /sparql?query=x HTTP/1.1\r\r\nHost: a\r\n\r\n", b"GET /sparql?query=x HTTP/1.1\r",
                 b"GET /sparql?query=x\r HTTP/1.1\r\n\r\n", b"POST /sparql HTTP/1.1\r\rContent-Length: 1\r\n\r\nx"):
        assert read_head(data) is None and _read_head_two_scans(data) is None, data
    assert read_head(b"GET /sparql?query=x HTTP/1.1\r\n\r\n").end == 32
