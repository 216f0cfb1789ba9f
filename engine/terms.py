"""RDF terms: the one string encoding ("key") every part of Jindou shares.

The dictionary stores each term as its *key*, a canonical N-Triples form:

* IRI            ``<http://ex.org/a>``            (the IRI text as given, no escaping)
* blank node     ``_:label``
* simple literal ``"text"``                       (``xsd:string`` is folded into this form, RDF 1.1)
* language       ``"text"@en-us``                 (tag lower-cased: tags compare case-insensitively)
* typed literal  ``"01"^^<http://www.w3.org/2001/XMLSchema#integer>``  (lexical form kept exactly)

Inside the quotes only ``\\``, ``"``, newline and carriage return are escaped
(``\\\\``, ``\\"``, ``\\n``, ``\\r``); every other character is kept raw. One term
therefore has exactly one key, so term equality is key equality is id equality,
and a key is also valid N-Triples output.

The small frozen classes below are the term model used at the edges (parsers,
function evaluation, serializers); the store and executor never hold them in
bulk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
XSD_STRING = XSD + "string"
XSD_BOOLEAN = XSD + "boolean"
XSD_INTEGER = XSD + "integer"
XSD_DECIMAL = XSD + "decimal"
XSD_FLOAT = XSD + "float"
XSD_DOUBLE = XSD + "double"
XSD_DATETIME = XSD + "dateTime"
XSD_DATE = XSD + "date"
RDF_TYPE = RDF + "type"
RDF_LANGSTRING = RDF + "langString"

RDF_TYPE_KEY = "<" + RDF_TYPE + ">"
TRUE_KEY = '"true"^^<' + XSD_BOOLEAN + ">"
FALSE_KEY = '"false"^^<' + XSD_BOOLEAN + ">"

_XSD_STRING_SUFFIX = "^^<" + XSD_STRING + ">"


@dataclass(frozen=True, slots=True)
class IRI:
    value: str

    def __str__(self) -> str:
        return "<" + self.value + ">"


@dataclass(frozen=True, slots=True)
class BNode:
    label: str

    def __str__(self) -> str:
        return "_:" + self.label


@dataclass(frozen=True, slots=True)
class Literal:
    """A literal. ``datatype`` is always set: xsd:string for simple literals,
    rdf:langString when ``lang`` is set."""

    lexical: str
    datatype: str = XSD_STRING
    lang: str | None = None

    def __str__(self) -> str:
        return to_key(self)


Term = IRI | BNode | Literal

_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})
_UNESCAPE_RE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.S)
_SIMPLE_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def escape_lexical(text: str) -> str:
    """Escape a lexical form for use between the quotes of a key."""
    return text.translate(_ESCAPE)


def _unescape_one(m: re.Match) -> str:
    hexd = m.group(1) or m.group(2)
    if hexd is not None:
        cp = int(hexd, 16)
        if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
            raise ValueError(f"invalid codepoint escape \\{'u' if m.group(1) else 'U'}{hexd}: "
                             "not a Unicode scalar value")
        return chr(cp)
    c = m.group(3)
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c]
    raise ValueError(f"invalid escape sequence \\{c}")


def unescape_string(text: str) -> str:
    """Resolve N-Triples/Turtle/SPARQL string escapes (``\\n``, ``\\u00E9`` ...)."""
    if "\\" not in text:
        return text
    return _UNESCAPE_RE.sub(_unescape_one, text)


def literal_key(lexical: str, datatype: str | None = None, lang: str | None = None) -> str:
    """Key of a literal given its parts (datatype None or xsd:string = simple literal)."""
    body = '"' + lexical.translate(_ESCAPE) + '"'
    if lang:
        return body + "@" + lang.lower()
    if datatype is None or datatype == XSD_STRING or datatype == RDF_LANGSTRING:
        return body
    return body + "^^<" + datatype + ">"


def iri_key(iri: str) -> str:
    return "<" + iri + ">"


def to_key(term: Term) -> str:
    if isinstance(term, IRI):
        return "<" + term.value + ">"
    if isinstance(term, Literal):
        return literal_key(term.lexical, term.datatype, term.lang)
    if isinstance(term, BNode):
        return "_:" + term.label
    raise TypeError(f"not an RDF term: {term!r}")


def _split_literal_key(key: str) -> tuple[str, str]:
    """Return (escaped lexical body, suffix) of a literal key."""
    # The closing quote is the last '"' in the key: a suffix never contains '"'.
    end = key.rfind('"')
    if end <= 0:
        raise ValueError(f"malformed literal key: {key!r}")
    return key[1:end], key[end + 1 :]


def from_key(key: str) -> Term:
    c = key[0]
    if c == "<":
        return IRI(key[1:-1])
    if c == "_":
        return BNode(key[2:])
    if c == '"':
        body, suffix = _split_literal_key(key)
        lexical = unescape_string(body)
        if not suffix:
            return Literal(lexical)
        if suffix[0] == "@":
            return Literal(lexical, RDF_LANGSTRING, suffix[1:])
        return Literal(lexical, suffix[3:-1])
    raise ValueError(f"malformed term key: {key!r}")


def key_kind(key: str) -> str:
    """'iri', 'bnode' or 'literal', read off the first character."""
    c = key[0]
    return "iri" if c == "<" else "bnode" if c == "_" else "literal"


#: what an IRI may not hold, written directly or through a \\u escape (N-Triples IRIREF, RFC 3987)
_IRI_BAD = re.compile(r'[\x00-\x20<>"{}|^`\\]')


def _escaped_iri(body: str) -> str:
    """An IRI's text with its ``\\u`` / ``\\U`` escapes resolved; an escape that yields a character
    an IRI cannot hold (a control character, a space, ``>`` ...) is refused: its key would not be
    an IRI (``<http://d>>``) and no other RDF store would take it."""
    out = unescape_string(body)
    bad = _IRI_BAD.search(out)
    if bad:
        raise ValueError(f"IRI with an escaped character an IRI cannot hold ({bad.group()!r}): <{body}>")
    return out


def canonical_key(ntriples_term: str) -> str:
    """Canonical key of one term written in N-Triples syntax (escapes resolved,
    ``^^xsd:string`` folded, language tag lower-cased). Raises ValueError."""
    t = ntriples_term
    if not t:
        raise ValueError("empty term")
    c = t[0]
    if c == "<":
        if t[-1] != ">":
            raise ValueError(f"malformed IRI: {t!r}")
        if "\\" in t:
            return "<" + _escaped_iri(t[1:-1]) + ">"
        return t
    if c == "_":
        if not t.startswith("_:") or len(t) < 3:
            raise ValueError(f"malformed blank node: {t!r}")
        return t
    if c == '"':
        body, suffix = _split_literal_key(t)
        if suffix and suffix[0] == "@":
            lang = suffix[1:]
            if not lang:
                raise ValueError(f"empty language tag: {t!r}")
            suffix = "@" + lang.lower()
        elif suffix:
            if not (suffix.startswith("^^<") and suffix.endswith(">")):
                raise ValueError(f"malformed literal: {t!r}")
            if suffix == _XSD_STRING_SUFFIX:
                suffix = ""
            elif "\\" in suffix:
                suffix = "^^<" + _escaped_iri(suffix[3:-1]) + ">"
        if "\\" in body or '"' in body:
            body = unescape_string(body).translate(_ESCAPE)
        return '"' + body + '"' + suffix
    raise ValueError(f"not an N-Triples term: {t!r}")


def literal_parts(key: str) -> tuple[str, str, str | None]:
    """(lexical, datatype, lang) of a literal key; datatype is xsd:string or
    rdf:langString for plain ones."""
    lit = from_key(key)
    assert isinstance(lit, Literal)
    return lit.lexical, lit.datatype, lit.lang
