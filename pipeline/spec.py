"""The pipeline spec (YAML or JSON): where records come from, how they become RDF.

Everything is checked when the spec is loaded (unknown keys, templates, expressions,
prefixes), so a wrong spec fails before Spark starts. See docs/PIPELINES.md for the
format; the shape, in short::

    name: citybench                       # batch ids are "<name>:<spark batch>:<stream>"
    source: {kind: files, path: in/, max_files_per_trigger: 8}   # | socket | jetstream
    checkpoint: ckpt/                     # Spark checkpoint (default .jindou-pipeline/<name>)
    dead_letter: {path: dead/}            # or {subject: dead.x, url: nats://...}
    trigger_ms: 1000
    prefixes: {ses: "http://..."}
    tables: {meta: {path: meta.csv, key: REPORT_ID}}
    mappings:
      - name: traffic
        match: "AarhusTrafficData*.stream"   # file name / subject glob
        stream: Traffic1                     # Jindou stream (registered if absent)
        stream_iri: "ses:Traffic1"
        absorb: none                         # none | all | [predicate, ...]
        format: csv                          # csv | ndjson | ntriples
        csv: {delimiter: ",", header: true, columns: [..]}
        skip_rows: 0                         # data rows dropped at the start of each file
        max_rows: null                       # rows emitted per file at most (after the filter)
        timestamp: "ts(TIMESTAMP, '%Y-%m-%dT%H:%M:%S')"     # int64 ms, UTC
        filter: "t >= ts('2014-08-11T11:00:00')"
        let: {D: "lookup('meta', REPORT_ID, 'DISTANCE_IN_METERS')"}
        nodes:
          - subject: "ses:Obs-{_id}{uuid}"
            properties:
              - [a, "ssn:Observation"]
              - ["sao:hasValue", {value: "avgSpeed", datatype: "xsd:double"}]
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.expr import Expr, SpecError

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
DEFAULT_PREFIXES = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "xsd": XSD,
}
DATATYPES = {"double", "float", "long", "integer", "int", "short", "byte", "decimal", "string", "boolean",
             "dateTime"}
FORMATS = ("csv", "ndjson", "ntriples")
SOURCE_KINDS = ("files", "socket", "jetstream")
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _keys(d: dict, allowed: set[str], where: str) -> None:
    if not isinstance(d, dict):
        raise SpecError(f"{where}: expected a mapping, got {type(d).__name__}")
    extra = set(d) - allowed
    if extra:
        raise SpecError(f"{where}: unknown key(s) {sorted(extra)} (allowed: {sorted(allowed)})")


@dataclass
class Template:
    """Text with ``{name}`` placeholders: a column/let name, ``uuid`` (this node's
    deterministic UUID) or ``uuid:k`` (node k's)."""

    parts: list[tuple[str, str]]        # ("text", s) | ("col", name) | ("uuid", k)

    @classmethod
    def parse(cls, text: str, node: int, n_nodes: int, where: str) -> Template:
        parts: list[tuple[str, str]] = []
        pos = 0
        for m in _PLACEHOLDER.finditer(text):
            if m.start() > pos:
                parts.append(("text", text[pos:m.start()]))
            name = m.group(1).strip()
            if name == "uuid" or name.startswith("uuid:"):
                k = node if name == "uuid" else name[5:]
                try:
                    k = int(k)
                except ValueError:
                    raise SpecError(f"{where}: bad placeholder {{{name}}}") from None
                if not 0 <= k < n_nodes:
                    raise SpecError(f"{where}: {{{name}}} names node {k}, the mapping has {n_nodes}")
                parts.append(("uuid", k))
            elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise SpecError(f"{where}: bad placeholder {{{name}}} (a column name, uuid or uuid:k)")
            else:
                parts.append(("col", name))
            pos = m.end()
        if pos < len(text):
            parts.append(("text", text[pos:]))
        if "{" in "".join(p[1] for p in parts if p[0] == "text") or "}" in "".join(
                p[1] for p in parts if p[0] == "text"):
            raise SpecError(f"{where}: unbalanced braces in {text!r}")
        return cls(parts)

    @property
    def columns(self) -> set[str]:
        return {v for k, v in self.parts if k == "col"}


@dataclass
class Term:
    kind: str                      # iri | bnode | literal | raw
    template: Template | None = None
    expr: Expr | None = None       # literal value from an expression
    datatype: str | None = None    # full IRI
    lang: str | None = None


@dataclass
class Mapping:
    name: str
    match: str
    stream: str
    stream_iri: str
    absorb: object                       # "none" | "all" | list of predicate IRIs
    format: str
    csv_delimiter: str = ","
    csv_header: bool = True
    csv_columns: list[str] | None = None
    skip_rows: int = 0
    max_rows: int | None = None
    timestamp: Expr | None = None
    filter: Expr | None = None
    lets: list[tuple[str, Expr]] = field(default_factory=list)
    triples: list[tuple[int, Term, Term, Term, Expr | None]] = field(default_factory=list)  # node, s, p, o, when
    n_nodes: int = 0

    def matches(self, source: str) -> bool:
        return fnmatch.fnmatchcase(os.path.basename(source.rstrip("/")), self.match) or \
            fnmatch.fnmatchcase(source, self.match)

    def timeless(self, predicate_iri: str) -> bool:
        if self.absorb == "all":
            return True
        if self.absorb == "none":
            return False
        return predicate_iri in self.absorb


@dataclass
class Source:
    kind: str
    path: str | None = None
    glob: str | None = None              # files: Spark pathGlobFilter
    host: str | None = None
    port: int | None = None
    url: str | None = None
    stream: str | None = None            # JetStream stream name
    subjects: list[str] = field(default_factory=list)
    max_files_per_trigger: int | None = None
    max_records_per_trigger: int | None = None
    partitions: int = 2
    fetch_timeout: float = 2.0           # JetStream: seconds one fetch waits (a timeout is not the end)
    stall_timeout: float = 600.0         # JetStream: seconds without a pending message before failing


@dataclass
class Spec:
    name: str
    source: Source
    mappings: list[Mapping]
    checkpoint: str
    dead_letter: dict
    trigger_ms: int = 1000
    tables: dict[str, dict] = field(default_factory=dict)     # name -> {"path", "key"}
    base_dir: str = "."

    def mapping_for(self, source: str) -> Mapping | None:
        for m in self.mappings:
            if m.matches(source):
                return m
        return None

    def streams(self) -> dict[str, Mapping]:
        out: dict[str, Mapping] = {}
        for m in self.mappings:
            prev = out.get(m.stream)
            if prev is not None and (prev.stream_iri != m.stream_iri or prev.absorb != m.absorb):
                raise SpecError(f"mappings {prev.name!r} and {m.name!r} register stream {m.stream!r} differently")
            out[m.stream] = m
        return out


class _Prefixes:
    def __init__(self, prefixes: dict[str, str]):
        self.p = dict(DEFAULT_PREFIXES)
        self.p.update(prefixes or {})

    def expand(self, text: str, where: str) -> str:
        """``<iri>`` -> ``iri``; ``pfx:local`` -> namespace + local; ``a`` -> rdf:type."""
        text = text.strip()
        if text == "a":
            return RDF_TYPE
        if text.startswith("<") and text.endswith(">"):
            return text[1:-1]
        if ":" in text:
            pfx, local = text.split(":", 1)
            if pfx in self.p:
                return self.p[pfx] + local
            if local.startswith("//"):
                return text
            raise SpecError(f"{where}: unknown prefix {pfx!r} in {text!r}")
        raise SpecError(f"{where}: {text!r} is neither <iri>, prefix:name nor a")


def _term(raw, pre: _Prefixes, node: int, n_nodes: int, where: str, position: str) -> Term:
    if isinstance(raw, str):
        if raw.startswith("_:"):
            if position == "p":
                raise SpecError(f"{where}: a blank node cannot be a predicate")
            return Term("bnode", Template.parse(raw[2:], node, n_nodes, where))
        return Term("iri", Template.parse(pre.expand(raw, where), node, n_nodes, where))
    if isinstance(raw, dict):
        _keys(raw, {"value", "text", "datatype", "lang", "term"}, where)
        if position != "o" and "term" not in raw:
            raise SpecError(f"{where}: literals only as objects")
        if "term" in raw:
            return Term("raw", Template.parse(str(raw["term"]), node, n_nodes, where))
        if ("value" in raw) == ("text" in raw):
            raise SpecError(f"{where}: a literal has exactly one of 'value' (expression) or 'text' (template)")
        dtype = raw.get("datatype")
        lang = raw.get("lang")
        if dtype and lang:
            raise SpecError(f"{where}: a literal has a datatype or a language, not both")
        if dtype:
            dtype = pre.expand(str(dtype), where)
            if dtype.startswith(XSD) and dtype[len(XSD):] not in DATATYPES:
                raise SpecError(f"{where}: unsupported datatype {dtype} (xsd: {', '.join(sorted(DATATYPES))})")
        elif "value" in raw and not lang:
            raise SpecError(f"{where}: a 'value' literal needs a datatype (e.g. xsd:double)")
        if "value" in raw:
            return Term("literal", expr=Expr(str(raw["value"]), where), datatype=dtype, lang=lang)
        return Term("literal", Template.parse(str(raw["text"]), node, n_nodes, where), datatype=dtype,
                    lang=lang)
    raise SpecError(f"{where}: a term is a string (IRI template) or a mapping (literal), got {raw!r}")


def _mapping(d: dict, i: int, pre: _Prefixes) -> Mapping:
    where = f"mappings[{i}]"
    _keys(d, {"name", "match", "stream", "stream_iri", "absorb", "format", "csv", "skip_rows", "max_rows",
              "timestamp", "filter", "let", "nodes"}, where)
    for k in ("stream", "stream_iri"):
        if not d.get(k):
            raise SpecError(f"{where}: '{k}' is required")
    stream = str(d["stream"])
    if not _NAME_RE.match(stream):
        raise SpecError(f"{where}: bad stream name {stream!r} ([A-Za-z0-9_.-]+)")
    name = str(d.get("name") or stream)
    where = f"mapping {name!r}"
    fmt = d.get("format", "csv")
    if fmt not in FORMATS:
        raise SpecError(f"{where}: format must be one of {FORMATS}")
    absorb = d.get("absorb", "none")
    if isinstance(absorb, list):
        absorb = [pre.expand(str(a), where) for a in absorb]
    elif absorb not in ("none", "all"):
        raise SpecError(f"{where}: absorb is none, all or a list of predicates")
    m = Mapping(name=name, match=str(d.get("match", "*")), stream=stream,
                stream_iri=pre.expand(str(d["stream_iri"]), where), absorb=absorb, format=fmt)
    csv = d.get("csv") or {}
    _keys(csv, {"delimiter", "header", "columns"}, f"{where}.csv")
    m.csv_delimiter = str(csv.get("delimiter", ","))
    if len(m.csv_delimiter) != 1:
        raise SpecError(f"{where}: csv.delimiter must be one character")
    m.csv_header = bool(csv.get("header", True))
    m.csv_columns = [str(c) for c in csv["columns"]] if csv.get("columns") else None
    if not m.csv_header and fmt == "csv" and not m.csv_columns:
        raise SpecError(f"{where}: csv.header is false, so csv.columns must name the columns")
    m.skip_rows = int(d.get("skip_rows", 0))
    m.max_rows = None if d.get("max_rows") is None else int(d["max_rows"])
    if fmt == "ntriples":
        if d.get("nodes") or d.get("let") or d.get("timestamp"):
            raise SpecError(f"{where}: ntriples lines carry their own terms and time: no nodes/let/timestamp")
        m.filter = Expr(d["filter"], f"{where}.filter") if d.get("filter") else None
        return m
    if not d.get("timestamp"):
        raise SpecError(f"{where}: 'timestamp' (an expression giving event time in ms) is required")
    m.timestamp = Expr(str(d["timestamp"]), f"{where}.timestamp")
    m.filter = Expr(str(d["filter"]), f"{where}.filter") if d.get("filter") else None
    lets = d.get("let") or {}
    if not isinstance(lets, dict):
        raise SpecError(f"{where}: 'let' is a mapping name -> expression")
    m.lets = [(str(k), Expr(str(v), f"{where}.let.{k}")) for k, v in lets.items()]
    nodes = d.get("nodes")
    if not nodes or not isinstance(nodes, list):
        raise SpecError(f"{where}: 'nodes' (a list of subjects with properties) is required")
    m.n_nodes = len(nodes)
    for k, nd in enumerate(nodes):
        nw = f"{where}.nodes[{k}]"
        _keys(nd, {"subject", "properties"}, nw)
        if "subject" not in nd or not nd.get("properties"):
            raise SpecError(f"{nw}: 'subject' and 'properties' are required")
        s = _term(nd["subject"], pre, k, m.n_nodes, nw, "s")
        for j, prop in enumerate(nd["properties"]):
            pw = f"{nw}.properties[{j}]"
            when = None
            if isinstance(prop, dict):
                _keys(prop, {"p", "o", "when"}, pw)
                when = Expr(str(prop["when"]), f"{pw}.when") if prop.get("when") else None
                prop = [prop.get("p"), prop.get("o")]
            if not isinstance(prop, list) or len(prop) != 2:
                raise SpecError(f"{pw}: a property is [predicate, object] or {{p, o, when}}")
            p = _term(prop[0], pre, k, m.n_nodes, pw, "p")
            o = _term(prop[1], pre, k, m.n_nodes, pw, "o")
            m.triples.append((k, s, p, o, when))
    return m


def _source(d: dict, base: Path) -> Source:
    _keys(d, {"kind", "path", "glob", "host", "port", "url", "stream", "subjects", "max_files_per_trigger",
              "max_records_per_trigger", "partitions", "fetch_timeout", "stall_timeout"}, "source")
    kind = d.get("kind")
    if kind not in SOURCE_KINDS:
        raise SpecError(f"source.kind must be one of {SOURCE_KINDS}")
    src = Source(kind=kind)
    if kind == "files":
        if not d.get("path"):
            raise SpecError("source.path (the input directory) is required for files")
        src.path = str((base / str(d["path"])).resolve()) if "://" not in str(d["path"]) else str(d["path"])
        src.max_files_per_trigger = d.get("max_files_per_trigger")
        src.glob = str(d["glob"]) if d.get("glob") else None
    elif kind == "socket":
        src.host = str(d.get("host", "127.0.0.1"))
        if not d.get("port"):
            raise SpecError("source.port is required for socket")
        src.port = int(d["port"])
    else:
        if not d.get("stream"):
            raise SpecError("source.stream (the JetStream stream name) is required for jetstream")
        src.url = str(d.get("url", "nats://127.0.0.1:4222"))
        src.stream = str(d["stream"])
        subj = d.get("subjects") or []
        src.subjects = [subj] if isinstance(subj, str) else [str(s) for s in subj]
        src.max_records_per_trigger = d.get("max_records_per_trigger")
        src.partitions = int(d.get("partitions", 2))
        for k in ("fetch_timeout", "stall_timeout"):
            v = d.get(k, getattr(src, k))
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise SpecError(f"source.{k} must be a positive number of seconds")
            setattr(src, k, float(v))
    return src


def parse_spec(doc: dict, base_dir: str | os.PathLike = ".") -> Spec:
    _keys(doc, {"name", "source", "checkpoint", "dead_letter", "trigger_ms", "prefixes", "tables", "mappings"},
          "spec")
    base = Path(base_dir)
    name = str(doc.get("name") or "")
    if not _NAME_RE.match(name):
        raise SpecError("spec 'name' is required ([A-Za-z0-9_.-]+): it names checkpoints and batch ids")
    pre = _Prefixes(doc.get("prefixes") or {})
    if not doc.get("mappings"):
        raise SpecError("spec 'mappings' is required")
    maps = [_mapping(m, i, pre) for i, m in enumerate(doc["mappings"])]
    if len({m.name for m in maps}) != len(maps):
        raise SpecError("mapping names must be unique")
    tables = {}
    for tname, t in (doc.get("tables") or {}).items():
        _keys(t, {"path", "key", "delimiter"}, f"tables.{tname}")
        if not t.get("path") or not t.get("key"):
            raise SpecError(f"tables.{tname}: 'path' and 'key' are required")
        tables[str(tname)] = {"path": str((base / str(t["path"])).resolve()), "key": str(t["key"]),
                              "delimiter": str(t.get("delimiter", ","))}
    dl = doc.get("dead_letter") or {"path": f".jindou-pipeline/{name}/dead-letters"}
    _keys(dl, {"path", "subject", "url"}, "dead_letter")
    if ("path" in dl) == ("subject" in dl):
        raise SpecError("dead_letter has one of 'path' (a directory) or 'subject' (a JetStream subject)")
    if "path" in dl:
        dl = {"path": str((base / str(dl["path"])).resolve())}
    ckpt = str((base / str(doc.get("checkpoint") or f".jindou-pipeline/{name}/checkpoint")).resolve())
    spec = Spec(name=name, source=_source(doc.get("source") or {}, base), mappings=maps, checkpoint=ckpt,
                dead_letter=dl, trigger_ms=int(doc.get("trigger_ms", 1000)), tables=tables,
                base_dir=str(base.resolve()))
    spec.streams()
    return spec


def read_spec_doc(path: str | os.PathLike) -> tuple[dict, Path]:
    """The raw document of a .yaml/.yml/.json spec and the directory its relative paths start from."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".json":
        doc = json.loads(text)
    else:
        import yaml

        doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: the spec is a mapping at top level")
    return doc, p.parent.resolve()


def load_spec(path: str | os.PathLike) -> Spec:
    """Read a .yaml/.yml/.json spec; relative paths in it are relative to its directory."""
    doc, base = read_spec_doc(path)
    return parse_spec(doc, base)
