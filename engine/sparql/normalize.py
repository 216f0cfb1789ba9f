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
