"""Query texts reduced to a *skeleton* and its *slots*, without parsing.

A skeleton is the text with every IRI reference (``<...>``) and every short
string literal replaced by a marker, comments dropped and whitespace runs
collapsed to one space; the slots are the raw IRI references and strings in
order. Two texts with the same skeleton and the same slots are the same
token sequence for the tokenizer (:mod:`engine.sparql.tokenizer`), so they
parse alike; when they differ only in the slots that carry one query
parameter (the constant of a fast-path shape, see
``engine.database._fast_shape_key``), the second one is the first with that
constant swapped, and the Database answers it from the first one's plan
without tokenizing or parsing it (``Database._template_hit``).

Why that holds, character by character: the characters that can start a
multi-character token containing ``<``, ``"``, ``'`` or ``#`` are exactly
those (an IRI reference, a string, a comment); no other token contains them
(a prefixed name's ``\\#`` escape is excluded: any backslash outside a string
makes :func:`normalize` give up). So scanning leftmost-first for IRI
references, strings and comments with the tokenizer's own expressions, in
its order of preference, finds the same tokens the tokenizer finds, and
whatever lies between them is left as it is, but for whitespace, whose
amount never matters outside strings. Texts the argument does not cover
(long strings, any ``\\u`` escape, a backslash outside a string) get None:
the caller parses them.
"""

from __future__ import annotations

import re

from engine.terms import literal_key

#: an IRI reference, a short string (the tokenizer's expressions) or a comment
_SLOTS = re.compile(
    r"(<[^<>\"{}|^`\\\x00-\x20]*>)"
    r"|('(?:[^'\\\n\r]|\\.)*'|\"(?:[^\"\\\n\r]|\\.)*\")"
    r"|#[^\r\n]*"
)
_WS = re.compile(r"[ \t\r\n]+")
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
    if len(text) > MAX_CHARS or MARK in text or '"""' in text or "'''" in text:
        return None
    if "\\u" in text or "\\U" in text:
        return None
    slots: list[str] = []
    add = slots.append

    def one(m: re.Match) -> str:
        g = m.lastindex
        if g is None:  # a comment separates tokens like whitespace
            return " "
        add(m.group(g))
        return MARK

    skel = _WS.sub(" ", _SLOTS.sub(one, text))
    if "\\" in skel:
        return None
    return skel, slots


def spans(text: str) -> list[tuple[int, int]]:
    """(start, end) in ``text`` of each slot :func:`normalize` reports, in order."""
    return [m.span() for m in _SLOTS.finditer(text) if m.lastindex is not None]


def slot_key(raw: str) -> str | None:
    """The term key a slot stands for wherever the parser reads it as an RDF
    term, when that key does not depend on the rest of the text: an absolute
    IRI (resolution leaves it as it is) or a string without escapes, as a
    simple literal (where a language tag or datatype follows, the key the
    parser makes differs, which the caller's check against the parse finds).
    None otherwise (the slot cannot be a query's parameter)."""
    c = raw[0]
    if c == "<":
        return raw if _SCHEME.match(raw, 1) else None
    if "\\" in raw:
        return None
    return literal_key(raw[1:-1])
