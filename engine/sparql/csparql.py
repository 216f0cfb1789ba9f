"""C-SPARQL continuous-query parser (contract: "continuous query semantics").

Public API::

    parse_continuous(text, base=None) -> ContinuousQuery
    is_continuous(text) -> bool
    format_duration(ms) -> str          # 3000 -> "3s"
    format_window(window) -> str        # "[RANGE 3s STEP 1s]"
    format_stream(stream) -> str        # "STREAM <iri>" / "STREAM name"

Grammar (on top of SPARQL 1.1; keywords and units are case-insensitive)::

    Register  ::= Prologue 'REGISTER' ('RSTREAM'|'ISTREAM'|'DSTREAM')? 'QUERY' Name 'AS'
                  Prologue (SelectQuery | ConstructQuery | AskQuery)
    Name      ::= [A-Za-z0-9_.-]+            (also accepted as <name> in angle brackets)
    FROM      ::= 'FROM' 'NAMED'? 'STREAM' StreamRef Window
                | 'FROM' (IRI | ShortName) Window      (Wukong+S form: a FROM with a window is a stream)
                | 'FROM' IRI | 'FROM' 'NAMED' IRI      (stored graphs, as in SPARQL)
    StreamRef ::= IRI | ShortName                      (ShortName: [A-Za-z0-9_.-]+)
    Window    ::= '[' 'RANGE' Dur ('STEP' Dur | 'TUMBLING') ']'
                | '[' 'RANGE' 'TRIPLES' Int ('STEP' Dur)? ']'
    Dur       ::= Int ('ms'|'s'|'m'|'h'|'d')           ("10s", or C-SPARQL's "10 s")

``FROM NAMED STREAM x [...]`` is accepted as a synonym of ``FROM STREAM x
[...]`` (windows are always named graphs). Every other syntax error, a FROM
short name without a window, a stream used twice, a zero duration or count,
DESCRIBE, a query without any stream window, and ASK with ISTREAM/DSTREAM
raise ``QuerySyntaxError`` with the line and column of the offending token.
Duplicates are detected per spelling (the same IRI twice, the same short name
twice); a short name and the IRI it is registered under can only be matched by
the caller, which knows the stream registry. A step larger than the range is
allowed (sampling windows).

The stream windows are removed from the inner query's dataset: ``query.dataset``
holds only the stored graphs of ``FROM <g>`` / ``FROM NAMED <g>`` (None when
there are none). ``urn:jindou:default`` is passed through as an ordinary IRI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.errors import QuerySyntaxError
from engine.sparql import algebra as A
from engine.sparql.parser import _Parser
from engine.sparql.tokenizer import decode_codepoints
from engine.stream.limits import MAX_DURATION_MS, MAX_TRIPLES, NAME_MAX
from engine.stream.windows import DEFAULT_COUNT_STEP_MS, Window

__all__ = [
    "ContinuousQuery",
    "StreamRef",
    "format_duration",
    "format_stream",
    "format_window",
    "is_continuous",
    "parse_continuous",
]

MODES = ("RSTREAM", "ISTREAM", "DSTREAM")
_UNITS = {"MS": 1, "S": 1000, "M": 60_000, "H": 3_600_000, "D": 86_400_000}
_MAX_MS = MAX_DURATION_MS
_MAX_TRIPLES = MAX_TRIPLES
NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_NAME_FULL_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")

# is_continuous: skip whitespace, comments and PREFIX/BASE declarations, then REGISTER.
_IS_CONT_RE = re.compile(
    r"(?:[ \t\r\n]++|#[^\r\n]*+"
    r"|(?i:PREFIX)[ \t\r\n]++[^\s:<>]*+:[ \t\r\n]*+<[^<>\s]*+>"
    r"|(?i:BASE)[ \t\r\n]*+<[^<>\s]*+>)*+"
    r"(?i:REGISTER)(?![A-Za-z0-9_:])"
)

# Query names and stream short names may contain characters that the SPARQL
# tokenizer rejects where a token starts ('_' after '.', '-' or a digit, as in
# "q._1"). Before tokenizing, such names are replaced by a run of 'N' of the
# same length (one plain name token); the parser reads the real name from the
# unmasked text at the same position. Only two places are masked: the name in
# the REGISTER header and a word between FROM [NAMED] [STREAM] and a '['.
_SEP = r"(?:[ \t\r\n]|#[^\r\n]*+)"
_MASK_HEAD_RE = re.compile(
    r"(?:[ \t\r\n]++|#[^\r\n]*+"
    r"|(?i:PREFIX)[ \t\r\n]++[^\s:<>]*+:[ \t\r\n]*+<[^<>\s]*+>"
    r"|(?i:BASE)[ \t\r\n]*+<[^<>\s]*+>)*+"
    rf"(?i:REGISTER){_SEP}++(?:(?i:[RID]STREAM){_SEP}++)?(?i:QUERY){_SEP}++"
    r"(?P<name>[A-Za-z0-9_.\-]+)(?=[\s#]|\Z)"
)
_MASK_FROM_RE = re.compile(
    # skipped: IRIs, strings, comments
    r"(?:<[^<>\"{}|^`\\\x00-\x20]*>"
    r"|'''(?:(?:''|')?(?:[^'\\]|\\.))*'''"
    r'|"""(?:(?:""|")?(?:[^"\\]|\\.))*"""'
    r"|'(?:[^'\\\n\r]|\\.)*'"
    r'|"(?:[^"\\\n\r]|\\.)*"'
    r"|#[^\r\n]*)"
    rf"|(?<![A-Za-z0-9_:?$.\-])(?i:FROM){_SEP}++(?:(?i:NAMED){_SEP}++)?(?:(?i:STREAM){_SEP}++)?"
    rf"(?P<name>[A-Za-z0-9_.\-]++){_SEP}*+\[",
    re.S,
)


def _mask_names(text: str) -> str:
    spans: list[tuple[int, int]] = []
    m = _MASK_HEAD_RE.match(text)
    if m is not None:
        spans.append(m.span("name"))
    if "[" in text:
        for m in _MASK_FROM_RE.finditer(text):
            if m.group("name") is not None:
                spans.append(m.span("name"))
    if not spans:
        return text
    out = []
    last = 0
    for a, b in spans:
        out.append(text[last:a])
        out.append("N" * (b - a))
        last = b
    out.append(text[last:])
    return "".join(out)


@dataclass(frozen=True, slots=True)
class StreamRef:
    """A stream named by its IRI or by its registered short name (exactly one is set)."""

    iri: str | None
    name: str | None


@dataclass(frozen=True, slots=True)
class ContinuousQuery:
    """A registered continuous query: name, output mode, the inner SPARQL
    query (stream windows removed from its dataset), its ``FROM STREAM``
    clauses in order of appearance -- ``streams[i]`` read through
    ``windows[i]`` (the one :class:`~engine.stream.windows.Window` type the
    trigger and the transient store also take; TUMBLING has step = range,
    ``RANGE TRIPLES n`` defaults to a 1 s step) -- and the registration text."""

    name: str
    mode: str
    query: A.Query
    streams: tuple[StreamRef, ...]
    windows: tuple[Window, ...]
    text: str


# ---------------------------------------------------------------- printing


def format_duration(ms: int) -> str:
    """The shortest exact duration literal: 3000 -> '3s', 1500 -> '1500ms'."""
    for unit, factor in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % factor == 0 and ms >= factor:
            return f"{ms // factor}{unit}"
    return f"{ms}ms"


def format_window(w: Window) -> str:
    if w.triples is not None:
        step = "" if w.step_ms == DEFAULT_COUNT_STEP_MS else f" STEP {format_duration(w.step_ms)}"
        return f"[RANGE TRIPLES {w.triples}{step}]"
    assert w.range_ms is not None
    return f"[RANGE {format_duration(w.range_ms)} STEP {format_duration(w.step_ms)}]"


def format_stream(s: StreamRef) -> str:
    return f"STREAM <{s.iri}>" if s.iri is not None else f"STREAM {s.name}"


# ---------------------------------------------------------------- parsing


class _ContinuousParser(_Parser):
    """The SPARQL parser with the REGISTER header and stream windows in FROM."""

    def __init__(self, text: str, base: str | None):
        try:
            decoded = decode_codepoints(text)
        except ValueError as e:
            raise QuerySyntaxError(str(e), 1, 1) from None
        if "\\u" in decoded or "\\U" in decoded:
            # never decode twice: leave such (invalid anyway) texts to the base parser
            masked = decoded = text
        else:
            masked = _mask_names(decoded)
        super().__init__(masked, base)
        # names are read from the unmasked text (same length, same positions)
        self.orig = decoded if len(decoded) == len(self.text) else self.text
        self.streams: list[StreamRef] = []
        self.windows: list[Window] = []
        self.seen_iris: set[str] = set()
        self.seen_names: set[str] = set()

    # ------------------------------------------------------------ helpers

    def raw_name(self, what: str, follow: str = "") -> str:
        """A bare ``[A-Za-z0-9_.-]+`` word starting at the current token,
        possibly spanning several tokens (``q-1.x``). It must be followed by
        whitespace, a comment, the end of the text or a character of ``follow``."""
        tok = self.toks[self.i]
        if tok[0] == "EOF":
            raise self.unexpected(what)
        m = NAME_RE.match(self.orig, tok[2])
        if m is None:
            raise self.unexpected(what)
        end = m.end()
        nxt = self.orig[end : end + 1]
        if nxt and not nxt.isspace() and nxt != "#" and nxt not in follow:
            bad = re.match(r"[^\s#\[]*", self.orig[tok[2] :]).group()
            raise self.error(f"bad {what.split(' [')[0]} '{bad[:80]}': expected [A-Za-z0-9_.-]+", tok)
        j = self.i
        while self.toks[j][0] != "EOF" and self.toks[j][2] < end:
            t = self.toks[j]
            if t[2] + len(t[1]) > end:
                raise self.unexpected(what)
            j += 1
        self.i = j
        return m.group()

    def is_word(self) -> bool:
        """Does a bare name (no IRI, variable, literal, punctuation) start here?"""
        tok = self.toks[self.i]
        if tok[0] in ("iriref", "pname", "var", "bnode", "string", "lstring", "lang", "EOF"):
            return False
        return NAME_RE.match(self.orig, tok[2]) is not None

    # ------------------------------------------------------------ REGISTER header

    def parse_continuous(self, original: str) -> ContinuousQuery:
        self.prologue()
        self.expect("REGISTER")
        mode = "RSTREAM"
        mode_tok = None
        if self.toks[self.i][0] in MODES:
            mode_tok = self.toks[self.i]
            mode = mode_tok[0]
            self.i += 1
        self.expect("QUERY")
        tok = self.toks[self.i]
        if tok[0] == "iriref":
            name = tok[1][1:-1]
            if not _NAME_FULL_RE.match(name):
                raise self.error(f"bad query name {tok[1][:80]}: expected [A-Za-z0-9_.-]+", tok)
            self.i += 1
        else:
            name = self.raw_name("query name")
        if len(name) > NAME_MAX:
            raise self.error(f"a query name has at most {NAME_MAX} characters, not {len(name)}", tok)
        self.expect("AS")
        self.prologue()
        form_tok = self.toks[self.i]
        form = form_tok[0]
        if form not in ("SELECT", "CONSTRUCT", "ASK"):
            raise self.unexpected("SELECT, CONSTRUCT or ASK")
        if form == "ASK" and mode != "RSTREAM":
            raise self.error(f"ASK queries can only be registered as RSTREAM, not {mode}", mode_tok)
        query = self.parse_query()
        if not self.windows:
            raise self.error("a continuous query needs at least one FROM STREAM window", form_tok)
        return ContinuousQuery(name, mode, query, tuple(self.streams), tuple(self.windows), original)

    # ------------------------------------------------------------ FROM clauses

    def dataset_clauses(self) -> A.Dataset | None:
        default: list[str] = []
        named: list[str] = []
        toks = self.toks
        while toks[self.i][0] == "FROM":
            self.i += 1
            is_named = self.accept("NAMED")
            tok = toks[self.i]
            if tok[0] == "STREAM" and toks[self.i + 1][0] != "[":
                self.i += 1
                self.stream_window(*self.stream_ref())
                continue
            if is_named:
                named.append(self.iri())
                if toks[self.i][0] == "[":
                    raise self.error("a window after FROM NAMED <g>: write FROM STREAM <iri> [...]")
                continue
            if tok[0] in ("iriref", "pname"):
                iri = self.iri()
                if toks[self.i][0] == "[":
                    self.stream_window(StreamRef(iri, None), tok)
                else:
                    default.append(iri)
                continue
            if not self.is_word():
                raise self.unexpected("an IRI, NAMED, STREAM or a stream name")
            name = self.raw_name("stream name", "[")
            if toks[self.i][0] != "[":
                raise self.error(
                    f"FROM {name}: a stream short name needs a window such as [RANGE 10s STEP 1s] "
                    "(a stored graph needs an IRI)",
                    tok,
                )
            self.stream_window(StreamRef(None, name), tok)
        if not default and not named:
            return None
        return A.Dataset(tuple(default), tuple(named))

    def stream_ref(self) -> tuple[StreamRef, tuple]:
        tok = self.toks[self.i]
        if tok[0] in ("iriref", "pname"):
            return StreamRef(self.iri(), None), tok
        if not self.is_word():
            raise self.unexpected("a stream IRI or stream name")
        return StreamRef(None, self.raw_name("stream name", "[")), tok

    def stream_window(self, ref: StreamRef, tok: tuple) -> None:
        if ref.name is not None and len(ref.name) > NAME_MAX:
            raise self.error(f"a stream name has at most {NAME_MAX} characters, not {len(ref.name)}", tok)
        if ref.iri is not None:
            if ref.iri in self.seen_iris:
                raise self.error(f"stream <{ref.iri}> appears twice in the query", tok)
            self.seen_iris.add(ref.iri)
        else:
            if ref.name in self.seen_names:
                raise self.error(f"stream {ref.name} appears twice in the query", tok)
            self.seen_names.add(ref.name)
        self.windows.append(self.window())
        self.streams.append(ref)

    def window(self) -> Window:
        if self.toks[self.i][0] != "[":
            raise self.unexpected("a window '[RANGE ...]' after the stream")
        self.i += 1
        self.expect("RANGE")
        if self.accept("TRIPLES"):
            tok = self.toks[self.i]
            if tok[0] != "integer":
                raise self.unexpected("a triple count")
            n = int(tok[1]) if len(tok[1]) <= 20 else _MAX_TRIPLES + 1
            if n <= 0 or n > _MAX_TRIPLES:
                raise self.error(f"triple count must be between 1 and {_MAX_TRIPLES}, not {tok[1][:40]}", tok)
            self.i += 1
            w = Window.count(n, self.duration() if self.accept("STEP") else DEFAULT_COUNT_STEP_MS)
        else:
            rng = self.duration()
            if self.accept("TUMBLING"):
                step = rng
            elif self.accept("STEP"):
                step = self.duration()
            else:
                raise self.unexpected("STEP or TUMBLING")
            w = Window.time(rng, step)
        self.expect("]")
        return w

    def duration(self) -> int:
        toks = self.toks
        tok = toks[self.i]
        if tok[0] != "integer":
            raise self.unexpected("a duration such as 3s, 500ms, 5m, 1h or 1d")
        unit_tok = toks[self.i + 1]
        if not unit_tok[1][:1].isalpha() or unit_tok[1].upper() in ("STEP", "TUMBLING"):  # "10s" or "10 s"
            raise self.error(f"duration {tok[1]} needs a unit after the number (ms, s, m, h or d)", tok)
        factor = _UNITS.get(unit_tok[1].upper())
        if factor is None:
            raise self.error(f"bad duration unit '{unit_tok[1]}': expected ms, s, m, h or d", unit_tok)
        ms = int(tok[1]) * factor if len(tok[1]) <= 20 else _MAX_MS + 1
        if ms <= 0 or ms > _MAX_MS:
            raise self.error(f"duration {tok[1][:40]}{unit_tok[1]} must be positive and at most {_MAX_MS} ms "
                             "(2^53-1)", tok)
        self.i += 2
        return ms


def parse_continuous(text: str, base: str | None = None) -> ContinuousQuery:
    """Parse a C-SPARQL ``REGISTER ... QUERY name AS ...`` text. Raises QuerySyntaxError."""
    try:
        return _ContinuousParser(text, base).parse_continuous(text)
    except RecursionError:
        raise QuerySyntaxError("query is nested too deeply") from None


def is_continuous(text: str) -> bool:
    """Cheap check: does ``text`` start with REGISTER (after comments and
    PREFIX/BASE declarations)? Never raises; does not validate the rest."""
    return _IS_CONT_RE.match(text) is not None
