"""Continuous-query parser: C-SPARQL, RSP-QL and CQELS-QL onto one model (contract:
"continuous query semantics").

Public API::

    parse_continuous(text, base=None, name=None) -> ContinuousQuery
    is_continuous(text) -> bool
    format_duration(ms) -> str          # 3000 -> "3s"
    format_window(window) -> str        # "[RANGE 3s STEP 1s]"
    format_stream(stream) -> str        # "STREAM <iri>" / "STREAM name"

Grammar (on top of SPARQL 1.1; keywords and units are case-insensitive)::

    Register  ::= Prologue Header Prologue (SelectQuery | ConstructQuery | AskQuery)
    Header    ::= 'REGISTER' Mode? 'QUERY' Name Every? 'AS'        C-SPARQL
                | 'REGISTER' 'STREAM' (Name | IRI) Every? 'AS'     C-SPARQL derived stream (CONSTRUCT only; an
                                                                   absolute IRI is the stream's, named by its
                                                                   last segment)
                | 'REGISTER' Mode (IRI | Name) Every? 'AS'         RSP-QL (the name: the IRI's last segment;
                                                                   with CONSTRUCT and an absolute IRI, the
                                                                   results are the stream of that IRI)
    Mode      ::= 'RSTREAM' | 'ISTREAM' | 'DSTREAM'
    Every     ::= 'COMPUTED' 'EVERY' Dur                           the evaluation period (see below)
    Name      ::= [A-Za-z0-9_.-]+            (also accepted as <name> in angle brackets)
    FROM      ::= 'FROM' 'NAMED'? 'STREAM' StreamRef Window        C-SPARQL
                | 'FROM' (IRI | ShortName) Window                  Wukong+S: a FROM with a window is a stream
                | 'FROM' 'NAMED' 'WINDOW' IRI 'ON' 'STREAM'? StreamRef Window     RSP-QL
                | 'FROM' IRI | 'FROM' 'NAMED' IRI                  stored graphs, as in SPARQL
    in WHERE  ::= 'WINDOW' IRI GroupGraphPattern                   RSP-QL: the named window's graph
                | 'WINDOW' Var GroupGraphPattern                   RSP-QL: ranges over the named windows
                | 'STREAM' IRI Window GroupGraphPattern            CQELS: that stream's window graph
    StreamRef ::= IRI | ShortName                                  (ShortName: [A-Za-z0-9_.-]+)
    Window    ::= '[' 'RANGE' Dur (('STEP' | 'SLIDE') Dur | 'TUMBLING')? ']'
                | '[' 'RANGE' 'TRIPLES' Int ('STEP' Dur)? ']'      C-SPARQL count window
                | '[' 'TRIPLES' Int (('STEP' | 'SLIDE') Dur)? ']'  CQELS count window
                | '[' ('ITEM' | 'ELEMENTS') Int ('STEP' Dur)? ']'  RSP-QL physical window (a time STEP)
                | '[' 'NOW' ']'                                    CQELS: the elements at the instant
                | '[' 'FROM' 'NOW' '-' Dur 'TO' 'NOW' 'STEP' Dur ']'    RSP-QL (= RANGE Dur STEP Dur)
    Dur       ::= Int ('ms'|'s'|'m'|'h'|'d')                       "10s", or "10 s"
                | ISO 8601 duration                                PT10S, PT1M30S, PT0.5S, P1D
                                                                   (engine/sparql/durations.py)

Steps: a window without its own STEP (``[RANGE 10s]``, ``[NOW]``, CQELS ``[TRIPLES n]``)
takes ``COMPUTED EVERY``'s period, else the smallest STEP of the query's other windows. With
neither: a CQELS-QL query is evaluated continuously, as CQELS evaluates it on every arrival
and expiry (Le-Phuoc et al., DEBS 2015): its windows step by one millisecond
(:data:`CQELS_CONTINUOUS_STEP_MS`), the unit of element times, so there is an instant at every
time the window's content can change; runs of instants whose windows did not change cost a
comparison and are reported as one idle event (docs/CONTINUOUS_QUERIES.md). In C-SPARQL and
RSP-QL, whose windows always have a slide, a time window with neither is an error; C-SPARQL's
``[RANGE TRIPLES n]`` without STEP keeps its 1 s default unless ``COMPUTED EVERY`` is given.
With ``COMPUTED EVERY d`` the query's step (its smallest STEP) must be ``d``.

Datasets (what :class:`ContinuousQuery` ``syntax`` tells the evaluator): C-SPARQL windows
are merged into the default graph and named by their stream IRI. RSP-QL windows and CQELS
STREAM blocks are named graphs only -- RSP-QL's by the window IRI, CQELS' by the stream IRI --
and the default graph is that of SPARQL (the ``FROM`` graphs, else the store's default graph).
``WINDOW :w { P }`` and ``STREAM <s> [..] { P }`` are parsed as ``GRAPH`` over that name;
``WINDOW ?w { P }`` as ``{ VALUES ?w { <w1> ... } GRAPH ?w { P } }`` over the declared windows. One
query uses one of the two models (C-SPARQL FROM STREAM windows, or RSP-QL / CQELS windows).

Function calls by IRI are listed with their position (``calls``): the manager refuses at
registration any that is not a known function (XSD casts, C-SPARQL's ``f:timestamp``).

Two windows on one stream (a 10 s and a 60 s window over one sensor stream): RSP-QL allows
them (its requirements document: "one may issue different windows for the same stream"), each
is a named graph of its own, and the query is evaluated at the multiples of the smallest STEP
like windows on two streams, each window covering its own RANGE at each instant. CQELS-QL too
(its examples read one stream through ``[NOW]`` and ``[RANGE 3s]``): a block is the pattern over
its own window -- the first window on a stream is the graph named by the stream IRI, another
one a graph of its own (:data:`CQELS_WINDOW_GRAPH`), a repeated window the same graph. In
C-SPARQL the windows are merged into the default graph (each named by the stream IRI), so two
windows on one stream could not be told apart: an error that points at RSP-QL's named windows.

``FROM NAMED STREAM x [...]`` is accepted as a synonym of ``FROM STREAM x
[...]``. Every other syntax error, a FROM short name without a window, a stream used twice
(except by RSP-QL named windows),
a zero duration or count, DESCRIBE, a query without any stream window, ASK with
ISTREAM/DSTREAM and REGISTER STREAM without CONSTRUCT raise ``QuerySyntaxError`` with the
line and column of the offending token. Duplicates are detected per spelling (the same IRI
twice, the same short name twice); a short name and the IRI it is registered under can only
be matched by the caller, which knows the stream registry. A step larger than the range is
allowed (sampling windows).

The stream windows are removed from the inner query's dataset: ``query.dataset``
holds only the stored graphs of ``FROM <g>`` / ``FROM NAMED <g>`` (None when
there are none). ``urn:jindou:default`` is passed through as an ordinary IRI.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass

from engine.errors import QuerySyntaxError
from engine.sparql import algebra as A
from engine.sparql.durations import CSPARQL_UNITS, ISO_DURATION_RE, parse_iso_duration
from engine.sparql.parser import _Parser
from engine.sparql.tokenizer import decode_codepoints, line_col
from engine.stream.limits import IRI_MAX, MAX_DURATION_MS, MAX_TRIPLES, NAME_MAX
from engine.stream.windows import DEFAULT_COUNT_STEP_MS, Window

__all__ = [
    "CQELS_CONTINUOUS_STEP_MS",
    "CQELS_WINDOW_GRAPH",
    "CSPARQL_F",
    "ContinuousQuery",
    "StreamRef",
    "format_duration",
    "format_stream",
    "format_window",
    "is_continuous",
    "parse_continuous",
]

MODES = ("RSTREAM", "ISTREAM", "DSTREAM")
#: the step of a CQELS-QL window given neither SLIDE, COMPUTED EVERY nor another window's
#: STEP: element times are whole milliseconds, so this is every instant its content can change
CQELS_CONTINUOUS_STEP_MS = 1
#: C-SPARQL's extension function namespace (``f:timestamp``)
CSPARQL_F = "http://larkc.eu/csparql/sparql/jena/ext#"
_UNITS = CSPARQL_UNITS
_MAX_MS = MAX_DURATION_MS
_MAX_TRIPLES = MAX_TRIPLES
NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_NAME_FULL_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_ABS_IRI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20<>\"{}|^`\\]+\Z")

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
# unmasked text at the same position. Masked: the name in the REGISTER header, a
# word between FROM [NAMED] [STREAM] and a '[', and a word after ON [STREAM] (RSP-QL).
_SEP = r"(?:[ \t\r\n]|#[^\r\n]*+)"
_MASK_HEAD_RE = re.compile(
    r"(?:[ \t\r\n]++|#[^\r\n]*+"
    r"|(?i:PREFIX)[ \t\r\n]++[^\s:<>]*+:[ \t\r\n]*+<[^<>\s]*+>"
    r"|(?i:BASE)[ \t\r\n]*+<[^<>\s]*+>)*+"
    rf"(?i:REGISTER){_SEP}++(?:(?:(?i:[RID]STREAM){_SEP}++)?(?i:QUERY|STREAM){_SEP}++|(?i:[RID]STREAM){_SEP}++)"
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
    rf"|(?<![A-Za-z0-9_:?$.\-])(?:(?i:FROM){_SEP}++(?:(?i:NAMED){_SEP}++)?|(?i:ON){_SEP}++)(?:(?i:STREAM){_SEP}++)?"
    rf"(?P<name>[A-Za-z0-9_.\-]++){_SEP}*+\[",
    re.S,
)


def _mask_names(text: str) -> str:
    spans: list[tuple[int, int]] = []
    m = _MASK_HEAD_RE.match(text)
    if m is not None and m.group("name").upper() not in ("QUERY", "STREAM"):
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
    query (stream windows removed from its dataset), its stream windows in order of
    appearance -- ``streams[i]`` read through ``windows[i]`` (the one
    :class:`~engine.stream.windows.Window` type the trigger and the transient store also
    take; TUMBLING has step = range) -- and the registration text.

    ``syntax``: ``"csparql"`` (windows merged into the default graph, named by stream IRI),
    ``"rspql"`` / ``"cqels"`` (windows are named graphs only, the default graph is SPARQL's);
    ``window_names[i]``: the IRI naming window ``i``'s graph when it is not the stream's
    (RSP-QL), else None. ``derived``: ``REGISTER STREAM`` -- each instant's CONSTRUCT result
    is an element of the stream ``name`` (also RSP-QL's ``REGISTER RSTREAM|ISTREAM|DSTREAM <iri> AS
    CONSTRUCT``: the instant's triples, or their difference, are elements of the stream
    ``output_iri``, named ``name``). ``calls``: ``(iri, number of arguments, line,
    column)`` of every function called by IRI. ``iri_named``: the name is the last segment of
    an RSP-QL output IRI (the request's ``?name=`` may name the query instead)."""

    name: str
    mode: str
    query: A.Query
    streams: tuple[StreamRef, ...]
    windows: tuple[Window, ...]
    text: str
    syntax: str = "csparql"
    window_names: tuple[str | None, ...] = ()
    derived: bool = False
    calls: tuple[tuple[str, int, int, int], ...] = ()
    output_iri: str | None = None
    iri_named: bool = False

    @property
    def windows_in_default(self) -> bool:
        return self.syntax == "csparql"


@dataclass(slots=True)
class _Spec:
    """A parsed window before its step is settled (``step`` None: none of its own)."""

    range_ms: int | None
    triples: int | None
    step: int | None
    count_default: bool     # C-SPARQL [RANGE TRIPLES n] without STEP: 1 s unless COMPUTED EVERY
    tok: tuple
    end_tok: tuple = ()


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

#: the graph of a CQELS block whose stream an earlier block reads through another window
#: (k: the k-th window on that stream): a name no stream or window of the query has
CQELS_WINDOW_GRAPH = "urn:jindou:window:{k}:{iri}"


class _ContinuousParser(_Parser):
    """The SPARQL parser with a REGISTER header and stream windows (FROM clauses, RSP-QL
    named windows, CQELS STREAM blocks)."""

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
        self.specs: list[_Spec] = []
        self.syntaxes: list[str] = []
        self.window_names: list[str | None] = []
        self.named_windows: dict[str, int] = {}     # RSP-QL window IRI -> index
        self.seen_streams: dict[tuple[str, str], str] = {}   # stream (by spelling) -> its first window's syntax
        self.calls: list[tuple[str, int, int, int]] = []
        self.blocks_done = False

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
        self.skip_to(end, what)
        return m.group()

    def skip_to(self, end: int, what: str) -> None:
        """Move past the tokens that start before text position ``end`` (none may straddle it)."""
        j = self.i
        while self.toks[j][0] != "EOF" and self.toks[j][2] < end:
            t = self.toks[j]
            if t[2] + len(t[1]) > end:
                raise self.unexpected(what)
            j += 1
        self.i = j

    def is_word(self) -> bool:
        """Does a bare name (no IRI, variable, literal, punctuation) start here?"""
        tok = self.toks[self.i]
        if tok[0] in ("iriref", "pname", "var", "bnode", "string", "lstring", "lang", "EOF"):
            return False
        return NAME_RE.match(self.orig, tok[2]) is not None

    def iri_or_function(self, require_call: bool):
        tok = self.toks[self.i]
        e = super().iri_or_function(require_call)
        if isinstance(e, A.FunctionCall):
            line, col = line_col(self.text, tok[2])
            self.calls.append((e.iri, len(e.args), line, col))
        return e

    # ------------------------------------------------------------ REGISTER header

    def query_name(self) -> str:
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
        return name

    def rsp_name(self, given: str | None = None) -> str:
        """RSP-QL ``REGISTER RSTREAM <out> AS``: the query is named by the output IRI's last
        path segment or fragment (the whole IRI when it is a plain name), or by ``given`` (the
        request's ``?name=``): two output IRIs can end alike (``<a/out>``, ``<b/out>``)."""
        tok = self.toks[self.i]
        if tok[0] not in ("iriref", "pname"):
            return self.query_name()
        if given is not None:
            self.i += 1
            return given
        iri = tok[1][1:-1] if tok[0] == "iriref" else tok[1].partition(":")[2]
        last = re.split(r"[/#:]", iri.rstrip("/"))[-1] if not _NAME_FULL_RE.match(iri) else iri
        if not last or not _NAME_FULL_RE.match(last):
            raise self.error(f"cannot name the query after {tok[1][:80]}: its last segment must be "
                             "[A-Za-z0-9_.-]+ (for example REGISTER RSTREAM <http://ex.org/out1> AS)", tok)
        if len(last) > NAME_MAX:
            raise self.error(f"a query name has at most {NAME_MAX} characters, not {len(last)}", tok)
        self.i += 1
        return last

    def output_stream_iri(self) -> str | None:
        """RSP-QL ``REGISTER <mode> <iri> AS``: the absolute IRI of the output stream (after the
        prologue's BASE and prefixes), None when it is a plain name, relative or not resolvable.
        Does not move past the token."""
        tok = self.toks[self.i]
        if tok[0] not in ("iriref", "pname"):
            return None
        save = self.i
        try:
            iri = self.iri()
        except QuerySyntaxError:
            return None
        finally:
            self.i = save
        return iri if _ABS_IRI_RE.match(iri) else None

    def parse_continuous(self, original: str, given_name: str | None = None) -> ContinuousQuery:
        toks = self.toks
        self.prologue()
        mode = "RSTREAM"
        mode_tok = None
        derived = iri_named = False
        out_iri = out_tok = None
        every = every_tok = None
        if given_name is not None and (not _NAME_FULL_RE.match(given_name) or len(given_name) > NAME_MAX):
            raise QuerySyntaxError(f"bad query name {given_name[:80]!r}: expected [A-Za-z0-9_.-]+ "
                                   f"(at most {NAME_MAX} characters)", 1, 1)
        if toks[self.i][0] != "REGISTER":
            if given_name is None:
                raise self.unexpected("'REGISTER' (REGISTER QUERY <name> AS ..., REGISTER STREAM <name> AS "
                                      "CONSTRUCT ... or RSP-QL's REGISTER RSTREAM <name> AS ...)")
            name = given_name
        else:
            self.i += 1
            if toks[self.i][0] in MODES:
                mode_tok = toks[self.i]
                mode = mode_tok[0]
                self.i += 1
            k = toks[self.i][0]
            if k == "QUERY":
                self.i += 1
                name = self.query_name()
            elif k == "STREAM":
                if mode_tok is not None:
                    raise self.error("REGISTER STREAM takes no output mode: each instant's CONSTRUCT "
                                     "result is one element of the stream", mode_tok)
                if toks[self.i + 1][0] == "QUERY":
                    raise self.error("the output mode before 'QUERY' is RSTREAM, ISTREAM or DSTREAM (REGISTER "
                                     "STREAM <name> AS CONSTRUCT ... registers a derived stream)")
                self.i += 1
                derived = True
                out_tok = toks[self.i]
                out_iri = self.output_stream_iri()   # REGISTER STREAM <absolute iri>: the stream's IRI
                iri_named = out_iri is not None and given_name is None
                name = self.rsp_name(given_name) if out_iri is not None else self.query_name()
            elif mode_tok is not None:
                out_tok = toks[self.i]
                out_iri = self.output_stream_iri()
                iri_named = toks[self.i][0] in ("iriref", "pname") and given_name is None
                name = self.rsp_name(given_name)
            else:
                raise self.unexpected("'QUERY', 'STREAM', or RSTREAM/ISTREAM/DSTREAM and a name")
            if given_name is not None and given_name != name:
                raise self.error(f"the query is named {name} in its text and {given_name[:80]} by the request "
                                 "(?name=): give one name, or the same", toks[self.i - 1])
            if toks[self.i][0] == "COMPUTED":
                self.i += 1
                every_tok = toks[self.i]
                self.expect("EVERY")
                every = self.duration()
            self.expect("AS")
        self.prologue()
        form_tok = toks[self.i]
        form = form_tok[0]
        if form not in ("SELECT", "CONSTRUCT", "ASK"):
            raise self.unexpected("SELECT, CONSTRUCT or ASK")
        if form == "ASK" and mode != "RSTREAM":
            raise self.error(f"ASK queries can only be registered as RSTREAM, not {mode}", mode_tok)
        if out_iri is not None and form == "CONSTRUCT":
            # RSP-QL: REGISTER RSTREAM <iri> AS CONSTRUCT -- the results are the stream <iri>
            derived = True
            if len(out_iri) > IRI_MAX:
                raise self.error(f"the output stream IRI has at most {IRI_MAX} characters", out_tok)
        else:
            out_iri = None
        if derived and form != "CONSTRUCT":
            raise self.error("REGISTER STREAM needs a CONSTRUCT query: its triples become the stream's "
                             "elements", form_tok)
        query = self.parse_query()
        svc = next((t for t in toks[:self.i] if t[0] == "SERVICE"), None)
        if svc is not None:  # (engine/exec/service.py refuses it at every instant: say so now)
            raise self.error("SERVICE is evaluated in one-shot queries only: a continuous query cannot call "
                             "another endpoint", svc)
        if not self.specs:
            raise self.error("a continuous query needs at least one stream window (FROM STREAM <s> [...], "
                             "FROM NAMED WINDOW <w> ON <s> [...] or STREAM <s> [...] { ... })", form_tok)
        syntax = self.check_model()
        if syntax != "csparql":
            graphs: dict[str, int] = {}
            for k, (wn, ref) in enumerate(zip(self.window_names, self.streams, strict=True)):
                g = wn if wn is not None else ref.iri
                if g in graphs:   # (an RSP-QL window named like a CQELS block's stream)
                    raise self.error(f"two windows of the query are the graph <{g}>: name the RSP-QL window "
                                     "apart from the streams", self.specs[k].tok)
                graphs[g] = k
        windows = self.settle_steps(every, every_tok)
        return ContinuousQuery(name, mode, query, tuple(self.streams), windows, original, syntax,
                               tuple(self.window_names), derived, tuple(self.calls), out_iri, iri_named)

    def check_model(self) -> str:
        kinds = set(self.syntaxes)
        if "csparql" in kinds and len(kinds) > 1:
            k = next(i for i, s in enumerate(self.syntaxes) if s != "csparql")
            raise self.error("a query reads its streams either through FROM STREAM windows (C-SPARQL: merged "
                             "into the default graph) or through named windows (RSP-QL FROM NAMED WINDOW, "
                             "CQELS STREAM blocks), not both", self.specs[k].tok)
        if "rspql" in kinds:
            return "rspql"
        return "cqels" if "cqels" in kinds else "csparql"

    def settle_steps(self, every: int | None, every_tok) -> tuple[Window, ...]:
        """Give every window a step (see the module docstring) and check COMPUTED EVERY."""
        own = [s.step for s in self.specs if s.step is not None]
        fill = every if every is not None else (min(own) if own else None)
        if fill is None and self.check_model() == "cqels":
            fill = CQELS_CONTINUOUS_STEP_MS  # continuous: at every instant the windows can change
        out: list[Window] = []
        for s in self.specs:
            step = s.step
            if step is None:
                if s.count_default:
                    step = every if every is not None else DEFAULT_COUNT_STEP_MS
                elif fill is not None:
                    step = fill
                elif s.triples is not None:
                    step = DEFAULT_COUNT_STEP_MS
                else:
                    raise self.error("this window has no STEP or TUMBLING: add STEP <d> or COMPUTED EVERY <d> "
                                     "after the query name (a CQELS-QL STREAM <s> [RANGE <d>] window without "
                                     "SLIDE is evaluated at every millisecond instant)", s.end_tok)
            out.append(Window.count(s.triples, step) if s.triples is not None else Window.time(s.range_ms, step))
        if every is not None:
            q = min(w.step_ms for w in out)
            if q != every:
                raise self.error(f"COMPUTED EVERY {format_duration(every)} disagrees with the windows: the "
                                 f"smallest STEP, {format_duration(q)}, is how often the query is evaluated",
                                 every_tok)
        return tuple(out)

    # ------------------------------------------------------------ FROM clauses

    def dataset_clauses(self) -> A.Dataset | None:
        default: list[str] = []
        named: list[str] = []
        toks = self.toks
        while toks[self.i][0] == "FROM":
            self.i += 1
            is_named = self.accept("NAMED")
            tok = toks[self.i]
            if is_named and tok[0] == "WINDOW":
                self.i += 1
                self.named_window()
                continue
            if tok[0] == "STREAM" and toks[self.i + 1][0] != "[":
                self.i += 1
                self.stream_window(*self.stream_ref(), "csparql")
                continue
            if is_named:
                named.append(self.iri())
                if toks[self.i][0] == "[":
                    raise self.error("a window after FROM NAMED <g>: write FROM STREAM <iri> [...] "
                                     "(or RSP-QL's FROM NAMED WINDOW <w> ON <iri> [...])")
                continue
            if tok[0] in ("iriref", "pname"):
                iri = self.iri()
                if toks[self.i][0] == "[":
                    self.stream_window(StreamRef(iri, None), tok, "csparql")
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
            self.stream_window(StreamRef(None, name), tok, "csparql")
        if not self.blocks_done:   # the WHERE clause follows: its WINDOW / STREAM blocks become GRAPH
            self.blocks_done = True
            self.rewrite_blocks()
        if not default and not named:
            return None
        return A.Dataset(tuple(default), tuple(named))

    def named_window(self) -> None:
        """RSP-QL ``FROM NAMED WINDOW <w> ON [STREAM] <s> [...]`` (``FROM NAMED WINDOW`` read)."""
        wtok = self.toks[self.i]
        wiri = self.iri()
        if wiri in self.named_windows:
            raise self.error(f"window <{wiri}> is declared twice", wtok)
        if self.toks[self.i][0] != "ON":
            raise self.unexpected("ON <stream> after the window name")
        self.i += 1
        self.accept("STREAM")
        ref, rtok = self.stream_ref()
        self.named_windows[wiri] = len(self.specs)
        self.stream_window(ref, rtok, "rspql", wiri)

    def rewrite_blocks(self) -> None:
        """Turn RSP-QL ``WINDOW <w> {`` and CQELS ``STREAM <s> [window] {`` in the rest of the
        query into ``GRAPH <name> {`` tokens (the windows are recorded here, in order)."""
        toks = self.toks
        start = self.i
        if not any(t[0] in ("WINDOW", "STREAM") for t in toks[start:]):
            return
        out = toks[:start]
        i = start
        closes: collections.Counter = collections.Counter()   # token index -> extra '}' to add after it
        while toks[i][0] != "EOF":
            k = toks[i][0]
            if k == "WINDOW" and toks[i + 1][0] == "var":
                # WINDOW ?w { P } ranges over the query's named windows only (RSP-QL's VarOrIri):
                # { VALUES ?w { <w1> ... } GRAPH ?w { P } }
                wtok = toks[i + 1]
                if not self.named_windows:
                    raise self.error(f"WINDOW {wtok[1]} ranges over the named windows, and this query declares "
                                     "none: add FROM NAMED WINDOW <w> ON <stream> [RANGE ...] before WHERE", wtok)
                if toks[i + 2][0] != "{":
                    self.i = i + 2
                    raise self.unexpected("'{' after WINDOW ?var")
                pos = toks[i][2]
                out.append(("{", "{", pos))
                out.append(("VALUES", "VALUES", pos))
                out.append(wtok)
                out.append(("{", "{", pos))
                out.extend(("iriref", f"<{w}>", pos) for w in self.named_windows)
                out.append(("}", "}", pos))
                out.append(("GRAPH", toks[i][1], pos))
                out.append(wtok)
                closes[_matching_brace(toks, i + 2)] += 1
                i += 2
                continue
            if k == "WINDOW":
                self.i = i + 1
                wtok = toks[self.i]
                if wtok[0] not in ("iriref", "pname"):
                    raise self.unexpected("a window IRI or variable after WINDOW")
                wiri = self.iri()
                if wiri not in self.named_windows:
                    raise self.error(f"WINDOW <{wiri}> is not declared: add FROM NAMED WINDOW <{wiri}> ON "
                                     "<stream> [RANGE ...] before WHERE", wtok)
                if toks[self.i][0] != "{":
                    raise self.unexpected("'{' after WINDOW <name>")
                out.append(("GRAPH", toks[i][1], toks[i][2]))
                out.append(("iriref", f"<{wiri}>", wtok[2]))
                i = self.i
                continue
            if k == "STREAM":
                self.i = i + 1
                ref, rtok = self.stream_ref()
                if ref.iri is None:
                    raise self.error("a CQELS STREAM block names its stream by IRI: STREAM <iri> [RANGE ...] "
                                     "{ ... }", rtok)
                self.stream_window(ref, rtok, "cqels")
                gname = self.cqels_graph(ref.iri)
                if toks[self.i][0] != "{":
                    raise self.unexpected("'{' after the stream window (CQELS: STREAM <s> [RANGE 10s SLIDE "
                                          "1s] { ... })")
                out.append(("GRAPH", toks[i][1], toks[i][2]))
                out.append(("iriref", f"<{gname}>", rtok[2]))
                i = self.i
                continue
            out.append(toks[i])
            if closes[i]:
                out.extend([("}", "}", toks[i][2])] * closes[i])
            i += 1
        out.extend(toks[i:])
        self.toks = out
        self.i = start
        if self.check is None:   # the base parser's "no deadline" mark is past its last token
            self.next_check = len(out) + 1

    def cqels_graph(self, iri: str) -> str:
        """The graph of the CQELS block just declared on stream ``iri``: the stream IRI for its
        first window; a block repeating an earlier block's window on the stream reads that
        block's graph (the repeat is dropped); another window on the stream (CQELS' ``[NOW]``
        next to ``[RANGE 3s]``) gets a graph of its own, :data:`CQELS_WINDOW_GRAPH`."""
        j = len(self.specs) - 1
        new = self.specs[j]
        same = [e for e in range(j) if self.syntaxes[e] == "cqels" and self.streams[e].iri == iri]
        for e in same:
            old = self.specs[e]
            if (old.range_ms, old.triples, old.step, old.count_default) == (
                    new.range_ms, new.triples, new.step, new.count_default):
                for xs in (self.specs, self.streams, self.syntaxes, self.window_names):
                    xs.pop()
                return self.window_names[e] or iri
        if not same:
            return iri
        name = CQELS_WINDOW_GRAPH.format(k=len(same) + 1, iri=iri)
        self.window_names[j] = name
        return name

    def stream_ref(self) -> tuple[StreamRef, tuple]:
        tok = self.toks[self.i]
        if tok[0] in ("iriref", "pname"):
            return StreamRef(self.iri(), None), tok
        if not self.is_word():
            raise self.unexpected("a stream IRI or stream name")
        return StreamRef(None, self.raw_name("stream name", "[")), tok

    def stream_window(self, ref: StreamRef, tok: tuple, syntax: str, wname: str | None = None) -> None:
        if ref.name is not None and len(ref.name) > NAME_MAX:
            raise self.error(f"a stream name has at most {NAME_MAX} characters, not {len(ref.name)}", tok)
        key = ("<", ref.iri) if ref.iri is not None else ("", ref.name)
        prev = self.seen_streams.get(key)
        if prev is not None and "csparql" in (prev, syntax):
            # RSP-QL names each window and CQELS blocks get a graph per window (cqels_graph), so
            # two windows on one stream are two graphs; C-SPARQL merges its windows into the
            # default graph, each also named by its stream: there they could not be told apart
            spelled = f"<{ref.iri}>" if ref.iri is not None else ref.name
            raise self.error(f"stream {spelled} appears twice in the query: C-SPARQL merges its FROM STREAM "
                             "windows into one default graph, where two windows on one stream cannot be told "
                             "apart; two windows on one stream are RSP-QL named windows (FROM NAMED WINDOW <w1> "
                             "ON <s> [...] FROM NAMED WINDOW <w2> ON <s> [...], read by WINDOW <w1> { ... } and "
                             "WINDOW <w2> { ... })", tok)
        self.seen_streams.setdefault(key, syntax)
        self.specs.append(self.window())
        self.streams.append(ref)
        self.syntaxes.append(syntax)
        self.window_names.append(wname)

    def window(self) -> _Spec:
        toks = self.toks
        open_tok = toks[self.i]
        if open_tok[0] != "[":
            raise self.unexpected("a window '[RANGE ...]' after the stream")
        self.i += 1
        k = toks[self.i][0]
        if k == "RANGE":
            self.i += 1
            if self.accept("TRIPLES"):
                n = self.triple_count()
                step = self.duration() if self.accept("STEP") else None
                spec = _Spec(None, n, step, step is None, open_tok)
            else:
                rng = self.duration()
                if self.accept("TUMBLING"):
                    step = rng
                elif toks[self.i][0] in ("STEP", "SLIDE"):
                    self.i += 1
                    step = self.duration()
                elif toks[self.i][0] == "]":
                    step = None
                else:
                    raise self.unexpected("STEP, SLIDE, TUMBLING or ']'")
                spec = _Spec(rng, None, step, False, open_tok)
        elif k in ("TRIPLES", "ITEM", "ELEMENTS"):   # CQELS; RSP-QL physical windows
            self.i += 1
            n = self.triple_count()
            if k != "TRIPLES" and toks[self.i][0] == "STEP" and toks[self.i + 1][0] == "integer" \
                    and toks[self.i + 2][0] == "]":
                raise self.error("a STEP counted in elements does not map onto instants of time: write STEP "
                                 "<duration> (for example STEP PT1S)", toks[self.i + 1])
            step = None
            if toks[self.i][0] in ("STEP", "SLIDE"):
                self.i += 1
                step = self.duration()
            spec = _Spec(None, n, step, False, open_tok)
        elif k == "NOW":       # CQELS: the elements whose time is the instant
            self.i += 1
            spec = _Spec(1, None, None, False, open_tok)
        elif k == "FROM":      # RSP-QL [FROM NOW-d TO NOW STEP d]
            self.i += 1
            self.expect("NOW")
            self.expect("-")
            rng = self.duration()
            self.expect("TO")
            self.expect("NOW")
            if toks[self.i][0] == "-":
                off_tok = toks[self.i]
                self.i += 1
                if self.duration(allow_zero=True) != 0:
                    raise self.error("a window ending before the instant (TO NOW-d) is not supported: "
                                     "windows end at the instant (TO NOW)", off_tok)
            self.expect("STEP")
            spec = _Spec(rng, None, self.duration(), False, open_tok)
        elif k == "ALL":
            raise self.error("[ALL] (a window without bounds) is not supported: give it a RANGE", toks[self.i])
        else:
            raise self.unexpected("RANGE, TRIPLES, ITEM, NOW or FROM NOW-<d> TO NOW")
        spec.end_tok = self.expect("]")
        return spec

    def triple_count(self) -> int:
        tok = self.toks[self.i]
        if tok[0] != "integer":
            raise self.unexpected("a triple count")
        n = int(tok[1]) if len(tok[1]) <= 20 else _MAX_TRIPLES + 1
        if n <= 0 or n > _MAX_TRIPLES:
            raise self.error(f"triple count must be between 1 and {_MAX_TRIPLES}, not {tok[1][:40]}", tok)
        self.i += 1
        return n

    def duration(self, allow_zero: bool = False) -> int:
        """``10s`` / ``10 s`` (C-SPARQL, CQELS) or an ISO 8601 duration (RSP-QL), in ms."""
        toks = self.toks
        tok = toks[self.i]
        if tok[0] != "integer" and tok[0] != "EOF" and self.orig[tok[2]:tok[2] + 1] in ("P", "p"):
            m = ISO_DURATION_RE.match(self.orig, tok[2])
            nxt = self.orig[m.end():m.end() + 1]
            if nxt and (nxt.isalnum() or nxt in "_.:"):
                bad = re.match(r"[^\s\]#]*", self.orig[tok[2]:]).group()
                raise self.error(f"bad duration '{bad[:40]}': expected an ISO 8601 duration such as PT10S, "
                                 "PT1M30S or P1D (years and months have no fixed length)", tok)
            try:
                ms = parse_iso_duration(m)
            except ValueError as e:
                raise self.error(str(e), tok) from None
            self.skip_to(m.end(), "a duration")
            return self.check_ms(ms, m.group(), tok, allow_zero)
        if tok[0] != "integer":
            if tok[0] == "decimal":
                raise self.error(f"duration {tok[1]}: a number with a unit takes an integer (write 500ms, or "
                                 "PT0.5S)", tok)
            raise self.unexpected("a duration such as 3s, 500ms, 5m, 1h, 1d or PT10S")
        unit_tok = toks[self.i + 1]
        if not unit_tok[1][:1].isalpha() or unit_tok[1].upper() in ("STEP", "SLIDE", "TUMBLING", "AS", "TO"):
            raise self.error(f"duration {tok[1]} needs a unit after the number (ms, s, m, h or d)", tok)
        factor = _UNITS.get(unit_tok[1].upper())
        if factor is None:
            raise self.error(f"bad duration unit '{unit_tok[1]}': expected ms, s, m, h or d", unit_tok)
        ms = int(tok[1]) * factor if len(tok[1]) <= 20 else _MAX_MS + 1
        self.i += 2
        return self.check_ms(ms, f"{tok[1][:40]}{unit_tok[1]}", tok, allow_zero)

    def check_ms(self, ms: int, spelled: str, tok, allow_zero: bool) -> int:
        if (ms <= 0 and not (allow_zero and ms == 0)) or ms > _MAX_MS:
            raise self.error(f"duration {spelled} must be positive and at most {_MAX_MS} ms (2^53-1)", tok)
        return ms


def _matching_brace(toks: list, i: int) -> int:
    """The index of the '}' closing the '{' at ``toks[i]`` (the EOF token's when unbalanced: the
    parser then reports the missing brace)."""
    depth = 0
    j = i
    while toks[j][0] != "EOF":
        k = toks[j][0]
        if k == "{":
            depth += 1
        elif k == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return j


def parse_continuous(text: str, base: str | None = None, name: str | None = None) -> ContinuousQuery:
    """Parse a continuous query (C-SPARQL, RSP-QL or CQELS form). ``name`` names a query
    written without a REGISTER header. Raises QuerySyntaxError."""
    try:
        return _ContinuousParser(text, base).parse_continuous(text, name)
    except RecursionError:
        raise QuerySyntaxError("query is nested too deeply") from None


def is_continuous(text: str) -> bool:
    """Cheap check: does ``text`` start with REGISTER (after comments and
    PREFIX/BASE declarations)? Never raises; does not validate the rest."""
    return _IS_CONT_RE.match(text) is not None
