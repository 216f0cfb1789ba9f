"""Webhook destinations: one parser for URLs, one place that decides "allowed", one small client.

Every webhook URL -- the operator's ``--webhook-allow`` entries and a registration's ``url``
alike -- goes through :func:`parse_url`, which accepts one spelling of each destination and
refuses the ambiguous ones instead of guessing what some other parser would make of them:

* ``http`` / ``https`` only; no user info (``http://allowed@evil/``), no fragment, no
  backslash, nothing outside printable ASCII (write an IDN host as ``xn--``), no
  whitespace or control character;
* the host is a DNS name (lower-cased, one trailing dot dropped), a dotted-quad IPv4 address
  written canonically (four decimal numbers without leading zeros: ``2130706433``,
  ``0177.0.0.1``, ``127.1`` or ``0x7f.0.0.1`` are refused, as every name whose last label is
  numeric), or an IPv6 literal (compressed; no zone id; IPv4-mapped / -compatible forms are
  refused: write the IPv4 address);
* the port is 1..65535 (default 80 / 443, so ``:80`` on http is the same destination);
* the path and query hold only RFC 3986 characters; a percent-escape of an unreserved
  character is decoded and the others are upper-cased, so two spellings of one path compare
  equal (the request is sent with the path as written); dot segments and encoded ``/`` or ``\\`` are refused (they leave a path prefix).

:meth:`Destination.allowed_by` is the one "allowed" decision: same scheme, host and port as
an allow-list entry, and the path inside the entry's path prefix.

Connecting (:func:`post`) re-checks at every attempt, not only at registration:

* a destination whose host is an IP literal was listed by the operator as that address, and
  is connected to as is;
* a DNS name is resolved (``resolve``: ``socket.getaddrinfo`` unless a test passes its own)
  and refused if any of its addresses is loopback, link-local, unspecified (``0.0.0.0/8``,
  ``::``), multicast or reserved, also inside an IPv4-mapped, NAT64 or 6to4 IPv6 address.
  So a listed name that resolves (or is rebound) to this machine or to a cloud metadata
  address is never contacted; to deliver to this machine the operator lists the literal
  address. The connection goes to the checked address (no second lookup), with the name
  in ``Host`` and as the TLS server name (certificates are verified);
* one attempt has one deadline (``timeout_s``) over the DNS lookup, connect, TLS, sending and
  reading;
  only the status line is read (at most 16 KiB, interim 1xx answers skipped), then the
  connection is closed: a huge or endless answer costs nothing, redirects are never
  followed, no proxy from the environment is used.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

__all__ = ["Destination", "BadURL", "DeliveryError", "parse_url", "authority", "address_refusal", "resolve_host", "post",
           "MAX_URL", "MAX_ANSWER"]

MAX_URL = 2048
MAX_ANSWER = 16 * 1024     # bytes of an answer read before its status line must have come
_DEFAULT_PORT = {"http": 80, "https": 443}
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(?:\?([^#]*))?(#.*)?", re.S)
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_DEC_OCTET = re.compile(r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")
_PCHARS = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
_QCHARS = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_STATUS = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: [^\r\n]*)?\r?\n")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_THIS_NET = ipaddress.ip_network("0.0.0.0/8")


class BadURL(ValueError):
    """Why a URL is not a webhook destination (our wording, safe to show a client)."""


class DeliveryError(Exception):
    """One attempt failed before a status arrived; the text is ours (shown in the sink's status)."""


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str          # DNS name (lower case) or canonical IP text (IPv6 without brackets)
    ip: bool           # the host is an IP literal
    port: int
    path: str          # percent-escapes normalized: what "allowed" compares
    query: str | None
    raw_target: str = field(default="", compare=False)   # path?query as written: what is sent


    @property
    def authority(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return h if self.port == _DEFAULT_PORT[self.scheme] else f"{h}:{self.port}"

    @property
    def target(self) -> str:
        """The request target as written (a receiver may tell ``%41`` from ``A``; the two
        decide "allowed" alike, and the escapes that could change a path's structure --
        dot segments, slashes -- are refused in any spelling)."""
        return self.raw_target or (self.path if self.query is None else f"{self.path}?{self.query}")

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.target}"

    def allowed_by(self, entry: Destination) -> bool:
        """Same scheme, host and port as ``entry``, and the path inside its path prefix (a prefix
        that does not end with ``/`` ends at a segment: ``/a`` allows ``/a`` and ``/a/b``, not
        ``/ab``)."""
        if (self.scheme, self.host, self.port) != (entry.scheme, entry.host, entry.port):
            return False
        prefix, path = entry.path, self.path
        return path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/")


def _norm_pct(part: str) -> str:
    """Percent-escapes of unreserved characters decoded, the others upper-cased."""
    def one(m: re.Match) -> str:
        b = int(m.group(1), 16)
        return chr(b) if b in _UNRESERVED else "%" + m.group(1).upper()
    return _PCT.sub(one, part)


def _host(text: str) -> tuple[str, bool]:
    """(canonical host, is an IP literal) of the host part of an authority."""
    if text.startswith("["):
        if not text.endswith("]") or "%" in text:
            raise BadURL("an IPv6 host is written [address], without a zone id")
        try:
            a = ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise BadURL("the host is not a valid IPv6 address") from None
        if a.ipv4_mapped is not None or (int(a) >> 32 == 0 and int(a) > 1):
            raise BadURL("an IPv4-mapped or IPv4-compatible IPv6 host is refused: write the IPv4 address")
        return a.compressed, True
    h = text.lower()
    if h.endswith("."):
        h = h[:-1]
    if not h or len(h) > 253:
        raise BadURL("a webhook URL needs a host (a DNS name or an IP address)")
    labels = h.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # anything ending in a number is an IPv4 address to some parser: only the canonical form
        if len(labels) == 4 and all(_DEC_OCTET.fullmatch(x) for x in labels):
            return h, True
        raise BadURL("an IPv4 host is written as four decimal numbers 0-255 without leading zeros "
                     "(no decimal, octal, hexadecimal or shortened forms)")
    if not all(_LABEL.fullmatch(x) for x in labels):
        raise BadURL("the host is not a DNS name (letters, digits, '-' and '_' in dot-separated labels; "
                     "an international name in its xn-- form)")
    return h, False


def authority(auth: str, default_port: int) -> tuple[str, bool, int]:
    """(canonical host, is an IP literal, port) of ``host[:port]`` (no user info); also the
    NATS sinks' server addresses."""
    port = default_port
    hostpart = auth
    colon = auth.rfind(":")
    if colon > auth.rfind("]"):
        hostpart, ptext = auth[:colon], auth[colon + 1:]
        if ptext:
            if not ptext.isdigit() or len(ptext) > 5 or not 1 <= int(ptext) <= 65535:
                raise BadURL("the port is a number 1-65535")
            port = int(ptext)
    host, ip = _host(hostpart)
    return host, ip, port


def parse_url(text) -> Destination:
    """The destination of a webhook URL (:class:`BadURL` with our reason if it is not one)."""
    if not isinstance(text, str) or not text or len(text) > MAX_URL:
        raise BadURL(f"a webhook URL is a string of 1 to {MAX_URL} characters")
    if not text.isascii() or not text.isprintable() or any(c.isspace() for c in text):
        bad = next(i for i, c in enumerate(text) if not (c.isascii() and c.isprintable()) or c.isspace())
        raise BadURL(f"a webhook URL holds only printable ASCII without spaces (character {bad + 1} is not)")
    m = _URL.fullmatch(text)
    if m is None:
        raise BadURL("a webhook URL is http(s)://host[:port][/path][?query]")
    scheme, auth, path, query, frag = m.groups()
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORT:
        raise BadURL("a webhook URL is http:// or https://")
    if frag is not None:
        raise BadURL("a webhook URL has no fragment ('#')")
    if "@" in auth or "\\" in auth:
        raise BadURL("a webhook URL has no user info ('user@host') and no backslash in its host")
    host, ip, port = authority(auth, _DEFAULT_PORT[scheme])
    if not path:
        path = "/"
    raw = path if query is None else f"{path}?{query}"
    if not _PCHARS.fullmatch(path) or (query is not None and not _QCHARS.fullmatch(query)):
        raise BadURL("a webhook URL's path and query hold only URL characters (others percent-encoded)")
    path = _norm_pct(path)
    for seg in path.split("/"):
        if seg in (".", "..") or "%2F" in seg or "%5C" in seg:
            raise BadURL("a webhook URL's path has no '.' or '..' segments and no encoded '/' or '\\' "
                         "(the request would leave the allowed path prefix)")
    return Destination(scheme, host, ip, port, path, None if query is None else _norm_pct(query), raw)


# -- where a connection may go ------------------------------------------------------------------
def _embedded_v4(a: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if a.ipv4_mapped is not None:
        return a.ipv4_mapped
    if a.sixtofour is not None:
        return a.sixtofour
    if a in _NAT64 or (int(a) >> 32 == 0 and int(a) > 1):   # NAT64, IPv4-compatible
        return ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)
    return None


def address_refusal(addr: str) -> str | None:
    """Why a DNS name's address must not be connected to (None if it may): loopback,
    link-local, unspecified, multicast, reserved -- also as the IPv4 inside an IPv6 form."""
    try:
        a = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(a, ipaddress.IPv6Address):
        v4 = _embedded_v4(a)
        if v4 is not None:   # the IPv4 address inside decides (its IPv6 prefix is "reserved")
            return address_refusal(str(v4))
        if a.is_site_local:
            return "site-local"
    if a.is_loopback:
        return "loopback"
    if a.is_link_local:
        return "link-local"
    if a.is_unspecified or (a.version == 4 and a in _THIS_NET):
        return "unspecified"
    if a.is_multicast:
        return "multicast"
    if a.is_reserved:
        return "reserved"
    return None


def resolve_host(host: str, port: int) -> list[str]:
    """The addresses of a DNS name (the default resolver of :func:`post`)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        raise DeliveryError("cannot resolve the host") from None
    return [i[4][0] for i in infos]


#: DNS lookups run here, so that a resolver that does not answer costs the attempt its deadline
#: and not the sink's thread (``getaddrinfo`` has no timeout and cannot be cancelled: a stuck
#: lookup keeps one of these threads until the resolver gives up; more wait their turn)
_DNS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


def _resolve_by(resolve: Callable[[str, int], list[str]], host: str, port: int, deadline: float) -> list[str]:
    fut = _DNS.submit(resolve, host, port)
    try:
        return fut.result(timeout=_remaining(deadline))
    except FutureTimeout:
        fut.cancel()
        raise DeliveryError("timeout resolving the host") from None


def _addresses(d: Destination, resolve: Callable[[str, int], list[str]],
               refuse: Callable[[str], str | None], deadline: float) -> list[str]:
    if d.ip:
        return [d.host]
    addrs = list(dict.fromkeys(_resolve_by(resolve, d.host, d.port, deadline)))
    if not addrs:
        raise DeliveryError("the host has no address")
    for a in addrs:
        why = refuse(a)
        if why is not None:
            raise DeliveryError(f"the host resolves to a {why} address, which webhooks may not reach by name "
                                "(list the address itself in --webhook-allow to allow it)")
    return addrs


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeliveryError("timeout")
    return left


def post(d: Destination, body: bytes, headers: dict[str, str], timeout_s: float,
         resolve: Callable[[str, int], list[str]] | None = None,
         refuse: Callable[[str], str | None] | None = None,
         tls: ssl.SSLContext | None = None) -> int:
    """POST ``body`` to ``d`` once; the answer's status (:class:`DeliveryError` if none came
    within ``timeout_s``, the connection failed or the host may not be reached)."""
    deadline = time.monotonic() + timeout_s
    addrs = _addresses(d, resolve or resolve_host, refuse or address_refusal, deadline)
    sock = None
    for a in addrs:
        try:
            sock = socket.create_connection((a, d.port), timeout=_remaining(deadline))
            break
        except DeliveryError:
            raise
        except OSError:
            continue
    if sock is None:
        raise DeliveryError("cannot connect")
    try:
        if d.scheme == "https":
            sock.settimeout(_remaining(deadline))
            ctx = tls or ssl.create_default_context()
            try:
                sock = ctx.wrap_socket(sock, server_hostname=d.host)
            except ssl.SSLCertVerificationError:
                raise DeliveryError("the destination's TLS certificate is not valid for the host") from None
            except (ssl.SSLError, OSError) as e:
                raise DeliveryError("timeout" if isinstance(e, TimeoutError) else "TLS handshake failed") from None
        head = [f"POST {d.target} HTTP/1.1", f"Host: {d.authority}", "User-Agent: jindou-sink",
                "Connection: close", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        sock.settimeout(_remaining(deadline))
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body)
        return _read_status(sock, deadline)
    except TimeoutError:
        raise DeliveryError("timeout") from None
    except OSError:
        raise DeliveryError("connection failed") from None
    finally:
        sock.close()


def _read_status(sock: socket.socket, deadline: float) -> int:
    """The status of the first final answer; reads at most MAX_ANSWER bytes."""
    buf = b""
    while True:
        m = _STATUS.match(buf)
        if m is not None:
            status = int(m.group(1))
            if status >= 200:
                return status
            end = buf.find(b"\r\n\r\n")   # an interim 1xx answer: skip its header block
            if end < 0:
                end = buf.find(b"\n\n")
                if end >= 0:
                    end -= 2
            if end >= 0:
                buf = buf[end + 4:]
                continue
        elif b"\n" in buf or buf[:7] != b"HTTP/1."[:len(buf[:7])]:
            raise DeliveryError("the destination's answer is not HTTP/1.x")
        if len(buf) >= MAX_ANSWER:
            raise DeliveryError(f"no status line in the first {MAX_ANSWER} bytes of the answer")
        sock.settimeout(_remaining(deadline))
        chunk = sock.recv(min(4096, MAX_ANSWER - len(buf)))
        if not chunk:
            raise DeliveryError("the destination closed the connection without an answer")
        buf += chunk
