"""Query texts reduced to a *skeleton* and its *slots*, without parsing.

A skeleton is the text with every IRI reference (``<...>``), every short
string literal and every comment replaced by a marker and whitespace runs
collapsed to one space; the slots are the raw IRI references and strings in
order (a comment's slot reads "", whatever it says). Two texts with the same skeleton and the same slots are the same
token sequence for the tokenizer (:mod:`engine.sparql.tokenizer`), so they
parse alike; when they differ only in the slots that carry one query
parameter (the constant of a fast-path shape, see
``engine.database._fast_shape_key``), the second one is the first with that
constant swapped, and the Database answers it from the first one's plan
without tokenizing or parsing it (``Database._template_hit``; which slots
carry the parameter is checked once per skeleton by parsing a probe text with
another constant there, ``Database._learn``).

Why that holds, character by character: the characters that can start a
multi-character token containing ``<``, ``"``, ``'`` or ``#`` are exactly
those (an IRI reference, a string, a comment); no other token contains them
(a prefixed name's ``\\#`` escape is excluded: any backslash outside a string
makes :func:`normalize` give up). So scanning leftmost-first for IRI
references, strings and comments with the tokenizer's own expressions, in
its order of preference, finds the same tokens the tokenizer finds, and
whatever lies between them is left as it is, but for whitespace, whose
amount never matters outside strings (a comment separates like whitespace).
Texts the argument does not cover get None and are parsed: long strings
(their quotes), a backslash outside a string (prefixed-name escapes, ``\\u``
escapes, which the tokenizer resolves before scanning, outside strings only),
the slot marker, or whitespace that ``str.split`` knows and SPARQL does not.
"""

from __future__ import annotations

import re

from engine.terms import literal_key

#: what str.split() takes for whitespace besides SPARQL's space, tab, CR and LF
_OTHER_WS = "\x0b\x0c\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: an IRI reference (1), what makes a text unfit (2: a long string's quotes, a
#: backslash, the slot marker or other whitespace, outside any slot), a short
#: string (3; the tokenizer's expressions) or a comment; the lookahead lets the
#: scan skip the other characters quickly
_SLOTS = re.compile(
    r"(?=[<'\"#\\\x01" + _OTHER_WS + "])"
    r"(?:(<[^<>\"{}|^`\\\x00-\x20]*>)"
    r"|('''|\"\"\"|[\\\x01" + _OTHER_WS + "])"
    r"|('(?:[^'\\\n\r]|\\.)*'|\"(?:[^\"\\\n\r]|\\.)*\")"
    r"|#[^\r\n]*)"
)
#: the marker of a slot in a skeleton (no query text can hold it outside a slot:
#: the tokenizer rejects it, and a text with one gets no skeleton)
MARK = "\x01"
#: absolute IRIs: ``resolve_iri`` returns them unchanged whatever the base
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: texts longer than this are parsed (normalizing them saves nothing worth the scan)
MAX_CHARS = 4096


def normalize(text: str) -> tuple[str, list[str]] | None:
    """(skeleton, slots) of ``text``, or None when it cannot be proved to
    tokenize like every text of its skeleton (see the module docstring)."""
    if len(text) > MAX_CHARS:
        return None
    parts = _SLOTS.split(text)
    if any(parts[2::4]):
        return None
    # a comment is a slot that reads "" (a separator like whitespace, whatever it says)
    slots = [a or b or "" for a, b in zip(parts[1::4], parts[3::4], strict=True)]
    return " ".join(MARK.join(parts[0::4]).split()), slots


def spans(text: str) -> list[tuple[int, int]]:
    """(start, end) in ``text`` of each slot :func:`normalize` reports (comments included), in order."""
    return [m.span() for m in _SLOTS.finditer(text)]


def slot_key(raw: str) -> str | None:
    """The term key a slot stands for wherever the parser reads it as an RDF
    term, when that key does not depend on the rest of the text: an absolute
    IRI (resolution leaves it as it is) or a string without escapes, as a
    simple literal (where a language tag or datatype follows, the key the
    parser makes differs, which the caller's check against the parse finds).
    None otherwise (the slot cannot be a query's parameter; a comment's slot is "")."""
    if not raw:
        return None
    c = raw[0]
    if c == "<":
        return raw if _SCHEME.match(raw, 1) else None
    if "\\" in raw:
        return None
    return literal_key(raw[1:-1])


# --------------------------------------------------------------------------
# The same, read from a percent-encoded query string (the HTTP lane)
# --------------------------------------------------------------------------

#: in a percent-encoded query text: an IRI reference (1: ``%3C`` ... ``%3E`` with
#: no ``<``, ``>``, ``'`` or ``+`` inside; the group leaves out the leading ``%``) or a
#: comment (``%23`` up to the first byte that is not plain ASCII text, a quote or a
#: line break); possessive runs keep the scan near the speed of a byte search, and
#: the ``%`` both start with is one literal prefix (the engine then skips to each
#: ``%`` at C speed: half the time of two alternatives that each start with it)
_RAW_SLOTS = re.compile(
    rb"%(?:(3[Cc][^%+'<>]*+(?:%(?!3[CcEe])[0-9A-Fa-f]{2}[^%+'<>]*+)*+%3[Ee])"
    rb"|23[A-Za-z0-9\-._~!$()*+,;=:@/?]*+(?:%(?!0[AaDd]|2[27])[0-7][0-9A-Fa-f][A-Za-z0-9\-._~!$()*+,;=:@/?]*+)*+)"
)
#: a slot's text that may stand where another text of the layout had an IRI slot:
#: an IRI reference (the tokenizer's) without a quote (see raw_normalize)
_IRI_SLOT = re.compile(r"<[^<>\"'{}|^`\\\x00-\x20]*>")
#: raw layout (the text's bytes between slots) -> (skeleton, the slots of the text
#: it was learned from, each raw slot's index among them, the raw slots: bytes
#: for an IRI, None for a comment), or None: that layout is not read from bytes
_RAW_LAYOUTS: dict = {}
_RAW_LAYOUTS_MAX = 1024
#: raw IRI slot (less its leading '%') -> its text, for the ones that passed _IRI_SLOT (the same constants
#: come back; strings only, so nothing here for the garbage collector to trace)
_RAW_IRIS: dict[bytes, str] = {}
_RAW_IRIS_MAX = 4096


def raw_normalize(payload: bytes, decode, rx=_RAW_SLOTS, layouts: dict = _RAW_LAYOUTS, iris: dict = _RAW_IRIS,
                  lead: bytes = b"%") -> tuple[str, list[str]] | None:
    """:func:`normalize` of ``decode(payload)`` (``payload``: a query text
    percent-encoded as in a URL; ``decode``: the server's decoder of it), read
    from the bytes, without decoding or scanning the whole text, for the texts
    whose layout was seen before; None when it cannot say (the caller decodes
    and normalizes). The first text of a layout (its bytes between IRI and
    comment slots) is decoded and normalized, and the layout is kept only when
    the raw slots are exactly normalize's IRI and comment slots there.

    Why a later text of the layout normalizes to the same skeleton: percent
    decoding is byte-local and the slots start and end at ASCII bytes, so the
    text is the layout's decoded pieces with its own slots in between; a slot
    that differs is checked to be an IRI reference without ``'`` (a comment
    slot admits no quote or line break by the byte expression), so no string,
    comment or IRI match starting before it can reach into it differently than
    in the learned text (strings cannot hold a line break, IRIs no ``<``),
    normalize's scan then matches it as an IRI slot again, and what follows is
    the same text. A comment reads "" whatever it says.

    ``rx``, ``layouts``, ``iris`` and ``lead``: the expression (an IRI slot as group 1,
    less its ``lead`` byte(s); a comment slot with no group), learned layouts and
    decoded IRI slots of another encoding (:func:`body_normalize`)."""
    if len(payload) > MAX_CHARS or b"\x00" in payload:
        return None
    parts = rx.split(payload)
    if len(parts) == 1:
        return None
    key = b"\x00".join(parts[0::2])
    known = layouts.get(key)
    if known is None:
        if key in layouts:
            return None
        return _learn_raw(key, parts, payload, decode, rx, layouts)
    skel, learned, pos, raws = known
    slots = None
    for j, r in enumerate(parts[1::2]):
        lr = raws[j]
        if r == lr:
            continue
        if r is None or lr is None:  # an IRI where the layout had a comment, or the reverse
            return None
        s = iri_slot(r, decode, iris, lead)
        if s is None:
            return None
        if slots is None:
            slots = list(learned)
        slots[pos[j]] = s
    return skel, (learned if slots is None else slots)


#: in a query text's UTF-8 bytes (an ``application/sparql-query`` body): an IRI
#: reference without a quote (1: less its leading ``<``) or a comment of ASCII up to
#: its line end (a comment with a quote in it is no slot here: see raw_normalize; with
#: another byte, the rest is layout, which the learned text's check decodes)
_BODY_SLOTS = re.compile(rb"<([^<>\"'{}|^`\\\x00-\x20]*>)|#[^\r\n'\"\x80-\xff]*")
#: raw layout -> entry (as _RAW_LAYOUTS) of query bodies
_BODY_LAYOUTS: dict = {}
#: a body's IRI slot (less its '<') -> its text
_BODY_IRIS: dict[bytes, str] = {}


def _utf8(b: bytes) -> str:
    return b.decode("utf-8")


def body_normalize(body: bytes) -> tuple[str, list[str]] | None:
    """:func:`raw_normalize` of a query text's own UTF-8 bytes (a POST body of
    ``application/sparql-query``): :func:`normalize` of ``body.decode("utf-8")``
    for a body whose layout (the bytes between IRI and comment slots) was seen
    before, without decoding or scanning the text as a string; None when it
    cannot say. The same argument holds: UTF-8 decoding is byte-local at the
    ASCII bytes the slots start and end at (no byte of a multi-byte character is
    ASCII), a changed slot must be an IRI reference without a quote, and a comment
    slot holds no quote or line break."""
    return raw_normalize(body, _utf8, _BODY_SLOTS, _BODY_LAYOUTS, _BODY_IRIS, b"<")


def _learn_raw(key: bytes, parts: list, payload: bytes, decode, rx=_RAW_SLOTS,
               layouts: dict = _RAW_LAYOUTS) -> tuple[str, list[str]] | None:
    """normalize() of the decoded payload, keeping its layout when the raw slots
    are normalize's IRI and comment slots (see :func:`raw_normalize`)."""
    entry = None
    try:
        text = decode(payload)
        pieces = [decode(p) for p in parts[0::2]]
        rslots = [decode(m.group()) for m in rx.finditer(payload)]
    except (UnicodeDecodeError, ValueError):
        text = None
    n = normalize(text) if text is not None else None
    if n is not None and len(rslots) == len(pieces) - 1:
        where = {sp: i for i, sp in enumerate(spans(text))}
        raws = parts[1::2]
        pos = []
        at = 0
        for j, s in enumerate(rslots):
            at += len(pieces[j])
            i = where.get((at, at + len(s)))
            iri = raws[j] is not None
            if (i is None or n[1][i] != (s if iri else "")
                    or not (_IRI_SLOT.fullmatch(s) if iri else ("'" not in s and '"' not in s))):
                break
            pos.append(i)
            at += len(s)
        else:
            entry = (n[0], n[1], pos, raws)
    if len(layouts) >= _RAW_LAYOUTS_MAX:
        layouts.clear()
    layouts[key] = entry
    return n


# --------------------------------------------------------------------------
# One template's parameter read straight from a raw layout's slots (the lane's runners)
# --------------------------------------------------------------------------

#: RawBinder.expect: the raw slot carries the template's parameter
_PARAM = object()


def swapped(slots, expect, param):
    """The one value of the slots ``expect`` marks ``param`` (they must all hold it) when every
    other slot equals ``expect``'s; None otherwise: a text that is a known one with only its
    parameter changed."""
    v = None
    for s, e in zip(slots, expect, strict=True):
        if e is param:
            if v is None:
                v = s
            elif s != v:
                return None
        elif s != e:
            return None
    return v


def iri_slot(raw, decode, iris: dict, lead: bytes):
    """The IRI reference a raw slot (its bytes less ``lead``) decodes to, kept in ``iris``;
    None when it does not decode to one."""
    s = iris.get(raw)
    if s is None:
        try:
            s = decode(lead + raw)  # (the group starts after the lead)
        except (UnicodeDecodeError, ValueError):
            return None
        if not _IRI_SLOT.fullmatch(s):
            return None
        if len(iris) >= _RAW_IRIS_MAX:
            iris.clear()
        iris[raw] = s
    return s


def raw_layout(payload: bytes, fixed: tuple, rx=_RAW_SLOTS, layouts: dict = _RAW_LAYOUTS) -> tuple | None:
    """(the template slot of each raw slot, the raw slots) of ``payload``'s learned layout for a
    template whose fixed slots are ``fixed`` (None: a parameter's); None when the layout is not
    learned, has another number of slots, or a parameter slot is not one of its raw slots."""
    parts = rx.split(payload)
    known = layouts.get(b"\x00".join(parts[0::2]))
    if known is None or len(known[1]) != len(fixed):
        return None
    pos = known[2]
    if {i for i, f in enumerate(fixed) if f is None} - set(pos):
        return None
    return pos, parts[1::2]


class RawBinder:
    """How the texts of one learned raw layout (:func:`raw_normalize`) write one
    single-parameter template's parameter: for each raw slot, either the parameter
    or the exact bytes it must have (the text's raw bytes there when the binder was
    made: equal bytes decode to the equal slot the template fixes). The other slots
    of the skeleton lie in the layout's bytes, equal in every text of the layout.

    :meth:`value` of a text of the layout is the parameter's slot text exactly
    when :func:`raw_normalize` would give slots that the template matches with that
    parameter (``Database.match_template``): the fixed raw slots are byte-equal, the
    parameter's raw slots equal each other and decode to an IRI reference slot (the
    same decoding and check as raw_normalize's), so the slots are the template's with
    the parameter swapped. Built only when every parameter slot is a raw slot."""

    __slots__ = ("expect",)

    def __init__(self, expect: tuple):
        self.expect = expect

    @classmethod
    def make(cls, payload: bytes, fixed: tuple, rx=_RAW_SLOTS, layouts: dict = _RAW_LAYOUTS) -> RawBinder | None:
        """The binder of ``payload``'s layout (learned: :func:`raw_normalize` read it) for a
        template whose fixed slots are ``fixed`` (None: the parameter's); None when the
        layout is not learned or a parameter slot is not one of its raw slots."""
        got = raw_layout(payload, fixed, rx, layouts)
        if got is None:
            return None
        pos, raws = got
        return cls(tuple(_PARAM if fixed[i] is None else raws[j] for j, i in enumerate(pos)))

    def value(self, raws: list, decode, iris: dict = _RAW_IRIS, lead: bytes = b"%") -> str | None:
        """The parameter's slot text (an IRI reference) in a text whose raw slots are
        ``raws`` (``rx.split(payload)[1::2]`` of the binder's layout), None when the
        text is not the template's with its parameter swapped (or cannot be read)."""
        v = swapped(raws, self.expect, _PARAM)
        if v is None:  # (not the layout with its parameter swapped, or a comment where it was)
            return None
        return iri_slot(v, decode, iris, lead)
