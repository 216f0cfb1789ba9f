"""SPARQL 1.1 tokenizer: one compiled master regex, no per-character loops.

``tokenize(text)`` returns a list of ``(kind, raw, pos)`` tuples ending with an
``("EOF", "", len(text))`` sentinel (twice). ``kind`` is

* an upper-cased word for bare names (keywords and built-in function names:
  ``SELECT``, ``WHERE``, ``STR``, ``TRUE`` ...), except the lower-case ``a``
  which gets kind ``"a"`` (``A`` is not rdf:type);
* the punctuation itself for operators and delimiters (``{`` ``^^`` ``&&`` ...);
* one of the lower-case lexical kinds ``iriref`` ``pname`` ``var`` ``bnode``
  ``string`` ``lstring`` (long string) ``lang`` ``integer`` ``decimal``
  ``double``.

Signs of numbers are separate ``+``/``-`` tokens; the parser folds a sign
directly adjacent to a number into a signed literal. Line and column are
computed from ``pos`` only when an error is reported.
"""

from __future__ import annotations

import re

from engine.errors import QuerySyntaxError

_PN_CHARS_BASE = (
    "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff"
)
_PN_CHARS_U = _PN_CHARS_BASE + "_"
_PN_CHARS = _PN_CHARS_U + "\\-0-9\u00b7\u0300-\u036f\u203f-\u2040"
_VARNAME = f"[{_PN_CHARS_U}0-9][{_PN_CHARS_U}0-9\u00b7\u0300-\u036f\u203f-\u2040]*"
_PN_PREFIX = f"[{_PN_CHARS_BASE}](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?"
_PLX = r"%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%]"
_PN_LOCAL = f"(?:[{_PN_CHARS_U}:0-9]|{_PLX})(?:(?:[{_PN_CHARS}.:]|{_PLX})*(?:[{_PN_CHARS}:]|{_PLX}))?"
_EXP = r"[eE][+-]?[0-9]+"

_MASTER = re.compile(
    "|".join(
        [
            r"(?P<ws>[ \t\r\n]+|#[^\r\n]*)",
            r"(?P<iriref><[^<>\"{}|^`\\\x00-\x20]*>)",
            r"(?P<lstring>'''(?:(?:''|')?(?:[^'\\]|\\.))*'''|\"\"\"(?:(?:\"\"|\")?(?:[^\"\\]|\\.))*\"\"\")",
            r"(?P<string>'(?:[^'\\\n\r]|\\.)*'|\"(?:[^\"\\\n\r]|\\.)*\")",
            f"(?P<var>[?$]{_VARNAME})",
            f"(?P<bnode>_:[{_PN_CHARS_U}0-9](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?)",
            # a bare name (keyword, function) that no name character, "." or ":" follows
            f"(?P<name>[A-Za-z][A-Za-z0-9_]*+(?![{_PN_CHARS}.:]))",
            # a run of name characters that no colon follows directly (or that ends
            # in "."): it cannot hold a prefixed name, so it is one match, split by
            # _RUN_PARTS. Without it every token start inside a long run such as
            # "a-a-a-..." would rescan the run looking for a colon (quadratic).
            f"(?P<run>[{_PN_CHARS_BASE}][{_PN_CHARS}.]*+(?:(?<=\\.)|(?!:)))",
            f"(?P<pname>(?:{_PN_PREFIX})?:(?:{_PN_LOCAL})?)",
            r"(?P<lang>@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*)",
            f"(?P<double>[0-9]+\\.[0-9]*{_EXP}|\\.[0-9]+{_EXP}|[0-9]+{_EXP})",
            r"(?P<decimal>[0-9]*\.[0-9]+)",
            r"(?P<integer>[0-9]+)",
            r"(?P<punct>\^\^|\|\||&&|!=|<=|>=|[{}()\[\];,.=<>!+\-*/^|?])",
            r"(?P<err>.)",
        ]
    ),
    re.S,
)

#: the tokens of a "run" match: the master's rules that can match inside one, in its order
_RUN_PARTS = re.compile(
    "|".join(
        [
            f"(?P<double>[0-9]+\\.[0-9]*{_EXP}|\\.[0-9]+{_EXP}|[0-9]+{_EXP})",
            r"(?P<decimal>[0-9]*\.[0-9]+)",
            r"(?P<integer>[0-9]+)",
            r"(?P<name>[A-Za-z][A-Za-z0-9_]*)",
            r"(?P<punct>[.\-])",
            r"(?P<err>.)",
        ]
    ),
    re.S,
)

_CODEPOINT_RE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
# Strings and comments are protected from the codepoint pre-pass: inside
# strings escapes are resolved later with the string's own escapes (so that
# "\u0022" stays a quote character inside the string); IRIs get theirs
# resolved here (IRIREF itself cannot contain a backslash).
_PREPASS_RE = re.compile(
    r"(<[^<>\"{}|^`\x00-\x20]*>)"
    r"|('''(?:(?:''|')?(?:[^'\\]|\\.))*'''|\"\"\"(?:(?:\"\"|\")?(?:[^\"\\]|\\.))*\"\"\""
    r"|'(?:[^'\\\n\r]|\\.)*'|\"(?:[^\"\\\n\r]|\\.)*\"|#[^\r\n]*)"
    r"|\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})",
    re.S,
)


def _codepoint(hex_digits: str) -> str:
    cp = int(hex_digits, 16)
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise ValueError(f"invalid codepoint escape for U+{hex_digits}")
    return chr(cp)


def _codepoint_match(m: re.Match) -> str:
    return _codepoint(m.group(1) or m.group(2))


def _prepass_one(m: re.Match) -> str:
    iri = m.group(1)
    if iri is not None:
        return _CODEPOINT_RE.sub(_codepoint_match, iri) if "\\" in iri else iri
    if m.group(2) is not None:
        return m.group(2)
    return _codepoint(m.group(3) or m.group(4))


def decode_codepoints(text: str) -> str:
    """Resolve ``\\uXXXX`` / ``\\UXXXXXXXX`` escapes outside string literals
    and comments (SPARQL 19.2); escapes inside strings are resolved with the
    string's other escapes. An escape that is not a Unicode scalar value is a
    QuerySyntaxError at its position."""
    if "\\u" not in text and "\\U" not in text:
        return text
    pos = 0

    def one(m: re.Match) -> str:
        nonlocal pos
        pos = m.start()
        return _prepass_one(m)

    try:
        return _PREPASS_RE.sub(one, text)
    except ValueError as e:
        line, col = line_col(text, pos)
        raise QuerySyntaxError(str(e), line, col) from None


def line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


Token = tuple[str, str, int]


_CHECK_EVERY = 8192  # matches between calls of tokenize's ``check``


def tokenize(text: str, check=None) -> list[Token]:
    """``check()``, if given, is called every few thousand tokens; it raises to
    stop (the query's deadline)."""
    out: list[Token] = []
    append = out.append
    n = 0
    for m in _MASTER.finditer(text):
        if check is not None:
            n += 1
            if n >= _CHECK_EVERY:
                n = 0
                check()
        kind = m.lastgroup
        if kind == "ws":
            continue
        raw = m.group()
        if kind == "name":
            kind = "a" if raw == "a" else raw.upper()
        elif kind == "punct":
            kind = raw
        elif kind == "run":
            _split_run(out, text, m.start(), m.end())
            continue
        elif kind == "err":
            _unexpected(text, m)
        append((kind, raw, m.start()))
    # two sentinels: the parser may look one token past the current one
    append(("EOF", "", len(text)))
    append(("EOF", "", len(text)))
    return out


def _split_run(out: list[Token], text: str, start: int, end: int) -> None:
    for m in _RUN_PARTS.finditer(text, start, end):
        kind = m.lastgroup
        raw = m.group()
        if kind == "name":
            kind = "a" if raw == "a" else raw.upper()
        elif kind == "punct":
            kind = raw
        elif kind == "err":
            _unexpected(text, m)
        out.append((kind, raw, m.start()))


def _unexpected(text: str, m: re.Match) -> None:
    raw = m.group()
    line, col = line_col(text, m.start())
    if raw in "'\"":
        raise QuerySyntaxError("unterminated string literal", line, col)
    if raw == "<":
        raise QuerySyntaxError("bad IRI or unexpected '<'", line, col)
    raise QuerySyntaxError(f"unexpected character {raw!r}", line, col)
