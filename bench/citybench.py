"""CityBench C-SPARQL queries on Jindou's continuous engine, checked against an oracle.

`python -m bench citybench [--queries Q1,Q5] [--minutes N] [--clock csv|paced] ...`
(or `main(argv)`). Reads the CityBench data from ``shared/citybench`` at run time
(GPL data: nothing is copied into this repository). See docs/CITYBENCH.md.

Pipeline:

1. Static graphs. Every `FROM <url>` of the selected queries whose file name is
   one of SensorRepository.rdf / AarhusCulturalEvents.rdf / AarhusLibraryEvents.rdf
   is loaded, as a named graph with exactly that IRI, from the matching
   ``dataset/*.n3`` file.
2. Streams. The CSV rows of each stream the queries read are turned into
   observation triples by the mapping in shared/citybench/README.md §2-§5 (payloads
   looked up in SensorRepository.n3), each row stamped with an event time in ms:
   ``--clock csv`` (default) the row's own CSV time, read as UTC; ``--clock
   paced`` CityBench's replay pacing at rate 1.0 (the k-th emitted row of a
   stream at start + k*floor(1000/frequency)). The user-location file has no
   time column: its i-th line is stamped start + i*interval in both modes.
3. Replay in event-time order in 1 s buckets (one ndjson POST per stream and
   bucket, then a heartbeat of every stream to the bucket's end), draining the
   engine after each bucket; every instant's result is collected.
4. Oracle: for every (or every k-th) instant, pyoxigraph runs the query without
   its FROM / FROM STREAM clauses over a default graph = the windows' triples
   (t - range < tau <= t) merged with the query's static graphs; results are
   compared as multisets of term keys (ASK: the boolean).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import datetime as dt
import json
import math
import random
import re
import statistics
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import orjson
import pyoxigraph as ox

SES = "http://www.insight-centre.org/dataset/SampleEventService#"
SSN = "http://purl.oclc.org/NET/ssnx/ssn#"
SAO = "http://purl.oclc.org/NET/sao/"
CT = "http://www.insight-centre.org/citytraffic#"
XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_RESOURCE = "http://www.w3.org/2000/01/rdf-schema#Resource"
OWLS = "http://www.daml.org/services/owl-s/1.2/Service.owl#"
OWLSSC = "http://www.daml.org/services/owl-s/1.2/ServiceCategory.owl#"
LOCATION_FOI = ("http://iot.ee.surrey.ac.uk/citypulse/datasets/aarhusculturalevents/"
                "culturalEvents_aarhus#context_do63jk2t8c3bjkfb119ojgkhs7")

DEFAULT_QUERIES = [f"Q{i}" for i in range(1, 13)]
DEFAULT_START = "2014-08-11T11:00:00"
DEFAULT_END = "2014-08-31T11:00:00"   # the sample scripts' endDate (CSV filter of the paced replay)
STATIC_FILES = {"SensorRepository.rdf": "SensorRepository.n3",
                "AarhusCulturalEvents.rdf": "AarhusCulturalEvents.n3",
                "AarhusLibraryEvents.rdf": "AarhusLibraryEvents.n3"}
BUCKET_MS = 1000
TRAFFIC_ROW_LIMIT = 999

_STREAM_RE = re.compile(r"\bfrom\s+stream\s+<([^>]+)>\s*\[\s*range\s+(\d+)\s*(ms|s|m)\s+step\s+(\d+)\s*(ms|s|m)\s*\]",
                        re.IGNORECASE)
_STATIC_RE = re.compile(r"\bfrom\s+<([^>]+)>", re.IGNORECASE)
_UNIT = {"ms": 1, "s": 1000, "m": 60_000}


# ---------------------------------------------------------------- terms
def iri(x: str) -> str:
    return f"<{x}>"


def java_double(x: float) -> str:
    """Lexical form of Java's Double.toString (shortest round-trip digits, as in JDK 19+):
    plain notation for 1e-3 <= |x| < 1e7, else `d.dddE<n>`."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    _, dig, exp = Decimal(repr(abs(x))).as_tuple()
    raw = "".join(map(str, dig))
    digits = raw.lstrip("0")
    e = len(digits) + exp - 1          # abs(x) == d1.d2d3... * 10**e
    digits = digits.rstrip("0") or "0"
    if -3 <= e < 7:
        if e >= 0:
            return f"{sign}{digits[: e + 1].ljust(e + 1, '0')}.{digits[e + 1:] or '0'}"
        return f"{sign}0.{'0' * (-e - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{e}"


def lit_double(x: float) -> str:
    return f'"{java_double(float(x))}"^^<{XSD}double>'


def lit_long(n: int) -> str:
    return f'"{int(n)}"^^<{XSD}long>'


def parse_ms(text: str) -> int:
    """CSV time (`yyyy-MM-ddTHH:mm:ss`, `yyyy-MM-dd HH:mm:ss[.SSS]`, read to the second) as UTC ms."""
    text = text.strip().replace(" ", "T")[:19]
    d = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    return int(d.timestamp()) * 1000


# ---------------------------------------------------------------- queries
@dataclass
class CityQuery:
    name: str
    text: str                       # the file's text
    windows: dict[str, int]         # stream IRI -> range ms
    steps: dict[str, int]
    static: list[str]               # FROM <url> IRIs
    plain: str = ""                 # the query without FROM clauses (oracle)
    form: str = "SELECT"

    @property
    def register_text(self) -> str:
        return f"REGISTER QUERY {self.name} AS {self.text}"


def read_query(path: Path) -> CityQuery:
    return parse_query(path.stem, path.read_text(encoding="utf-8"), path.name)


#: the PREFIX / BASE declarations before a query's form
_PROLOGUE_RE = re.compile(r"^(\s*(PREFIX\s+[^\s:]*:\s*<[^>]*>|BASE\s*<[^>]*>))*", re.IGNORECASE)


def parse_query(name: str, text: str, where: str | None = None) -> CityQuery:
    """A C-SPARQL query text (without ``REGISTER QUERY ... AS``): windows, static graphs, plain SPARQL."""
    windows, steps = {}, {}
    for m in _STREAM_RE.finditer(text):
        windows[m.group(1)] = int(m.group(2)) * _UNIT[m.group(3).lower()]
        steps[m.group(1)] = int(m.group(4)) * _UNIT[m.group(5).lower()]
    if len(re.findall(r"\bfrom\s+stream\b", text, re.IGNORECASE)) != len(windows):
        raise ValueError(f"{where or name}: a FROM STREAM window this harness cannot read")
    plain = _STREAM_RE.sub(" ", text)
    static = _STATIC_RE.findall(plain)
    plain = _STATIC_RE.sub(" ", plain)
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    body = _PROLOGUE_RE.sub("", body)
    form = "ASK" if re.match(r"\s*ask\b", body, re.IGNORECASE) else "SELECT"
    return CityQuery(name, text, windows, steps, static, plain, form)


def static_file(root: Path, url: str) -> Path | None:
    name = STATIC_FILES.get(url.rsplit("/", 1)[-1])
    return None if name is None else root / "dataset" / name


# ---------------------------------------------------------------- sensors
@dataclass
class Sensor:
    iri: str
    kind: str                                   # traffic|pollution|weather|location|parking
    payloads: list[tuple[str, str, str]]        # (type, foi, property)

    @property
    def local(self) -> str:
        return self.iri.split("#", 1)[1]


def load_repository(root: Path) -> ox.Store:
    st = ox.Store()
    st.bulk_load(path=str(root / "dataset" / "SensorRepository.n3"), format=ox.RdfFormat.N3)
    return st


def sensor_info(repo: ox.Store, sensor: str) -> Sensor:
    cats = [str(s["n"].value).lower() for s in repo.query(
        f"SELECT ?n WHERE {{ <{sensor}> <{OWLS}presents>/<{OWLSSC}serviceCategory>/<{OWLSSC}serviceCategoryName> ?n }}")]
    kind = None
    for k in ("traffic", "pollution", "weather", "location", "parking"):
        if any(k in c for c in cats):
            kind = k
            break
    if kind is None:
        raise ValueError(f"no CityBench converter for sensor <{sensor}> (categories {cats})")
    pays = []
    for s in repo.query(f"SELECT ?type ?foi ?p WHERE {{ <{sensor}> <{SSN}observes> ?p . ?p a ?type . "
                        f"?p <{SSN}isPropertyOf> ?foi }}"):
        if s["type"].value == RDFS_RESOURCE:
            continue
        pays.append((s["type"].value, str(s["foi"]), s["p"].value))
    return Sensor(sensor, kind, sorted(pays))


# ---------------------------------------------------------------- stream rows -> triples
@dataclass
class Replay:
    start_ms: int
    end_ms: int
    clock: str = "csv"              # csv | paced
    frequency: float = 1.0
    filter_end_ms: int | None = None  # endDate (CSV filter, inclusive); default end_ms
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    @property
    def interval(self) -> int:
        return int(math.floor(1000 / self.frequency))

    def fresh(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _obs(sensor: Sensor, prefix: str, rp: Replay, values: dict[str, str | None]) -> list[tuple[str, str, str]]:
    out = []
    for typ, _foi, prop in sensor.payloads:
        ob = iri(SES + prefix + rp.fresh())
        out += [(ob, iri(RDF_TYPE), iri(SSN + "Observation")),
                (ob, iri(SSN + "observedBy"), iri(sensor.iri)),
                (ob, iri(SSN + "observedProperty"), iri(prop))]
        v = values.get(typ.rsplit("#", 1)[-1])
        if v is not None:
            out.append((ob, iri(SAO + "hasValue"), v))
    return out


def _distance(root: Path, report_id: str) -> float:
    with open(root / "dataset" / "MetaData" / "trafficMetaData.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["REPORT_ID"] == report_id:
                return float(row["DISTANCE_IN_METERS"])
    raise ValueError(f"no traffic metadata for REPORT_ID {report_id}")


def stream_elements(root: Path, sensor: Sensor, rp: Replay) -> list[tuple[int, list[tuple[str, str, str]]]]:
    """(tau, triples) per emitted row, in emission order (README §3-§5)."""
    path = root / "streams" / (sensor.local + ".stream")
    out: list[tuple[int, list]] = []
    if sensor.kind == "location":
        with open(path, encoding="utf-8") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        for i, ln in enumerate(lines):
            tau = rp.start_ms + i * rp.interval
            if tau > rp.end_ms:
                break
            lat, lon = (float(x) for x in ln.split("|", 1)[1].split(","))
            node = "_:loc" + rp.fresh().replace("-", "")
            trs = _obs(sensor, "UserLocationObservation-0", rp, {"Location": node})
            ob = trs[0][0]
            trs += [(ob, iri(SSN + "featureOfInterest"), iri(LOCATION_FOI)),
                    (node, iri(CT + "hasLatitude"), lit_double(lat)),
                    (node, iri(CT + "hasLongitude"), lit_double(lon))]
            out.append((tau, trs))
        return out
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    dist = None
    if sensor.kind == "traffic":
        dist = _distance(root, rows[0]["REPORT_ID"])
        rows = rows[1:]  # the first data row only supplies D; it is never emitted
    emitted = 0
    for row in rows:
        tcol = {"traffic": "TIMESTAMP", "weather": "TIMESTAMP", "pollution": "timestamp",
                "parking": "updatetime"}[sensor.kind]
        t_csv = parse_ms(row[tcol])
        if t_csv < rp.start_ms or t_csv > (rp.filter_end_ms or rp.end_ms):
            continue
        if sensor.kind == "traffic" and emitted >= TRAFFIC_ROW_LIMIT:
            break
        tau = t_csv if rp.clock == "csv" else rp.start_ms + emitted * rp.interval
        if tau > rp.end_ms:
            break
        if sensor.kind == "traffic":
            speed, count = float(row["avgSpeed"]), float(row["vehicleCount"])
            vals = {"AvgSpeed": lit_double(speed), "VehicleCount": lit_double(count),
                    "EstimatedTime": lit_double(dist / speed if speed != 0 else -1.0),
                    "CongestionLevel": lit_double(count / dist if dist != 0 else -1.0),
                    "MeasureTime": None}
            trs = _obs(sensor, f"AarhusTrafficObservation-{row['_id']}", rp, vals)
        elif sensor.kind == "pollution":
            api = max(int(row[c]) for c in ("ozone", "particullate_matter", "carbon_monoxide",
                                             "sulfure_dioxide", "nitrogen_dioxide"))
            trs = _obs(sensor, "AarhusPollutionObservation-0", rp, {"API": lit_long(api)})
        elif sensor.kind == "weather":
            if not (row["hum"] and row["tempm"] and row["wspdm"]):
                continue  # the empty 2014-08-27T05:00:00 row: skipped (the original stops the stream)
            vals = {"Temperature": lit_double(float(row["tempm"])), "Humidity": lit_long(int(row["hum"])),
                    "WindSpeed": lit_double(float(row["wspdm"]))}
            trs = _obs(sensor, "AarhusWeatherObservation-0", rp, vals)
        else:  # parking
            vac = int(row["totalspaces"]) - int(row["vehiclecount"])
            trs = _obs(sensor, f"AarhusParkingObservation-{row['_id']}", rp, {"ParkingVacancy": lit_long(vac)})
        out.append((tau, trs))
        emitted += 1
    return out


# ---------------------------------------------------------------- oracle
def _ox_term(key: str):
    if key.startswith("<"):
        return ox.NamedNode(key[1:-1])
    if key.startswith("_:"):
        return ox.BlankNode(key[2:])
    lex, dtype = key[1:].split('"^^<')
    return ox.Literal(lex, datatype=ox.NamedNode(dtype[:-1]))


# pyoxigraph 0.5 stores xsd:long (int, short, ...) literals as xsd:integer, so the oracle cannot tell them
# apart: both sides compare integer-family literals under one key. What the oracle cannot see is checked
# separately: every xsd:long the engine returns must be a term of the window (see _long_terms_ok).
_INTEGERS = {XSD + t for t in ("integer", "long", "int", "short", "byte")}


def _lit_key(value: str, datatype: str | None, lang: str | None) -> tuple:
    if lang:
        return ("lit", value, None, lang.lower())
    datatype = datatype or XSD + "string"
    if datatype in _INTEGERS:
        return ("lit", value, XSD + "integer", None)
    if datatype in (XSD + "double", XSD + "float"):
        try:
            return ("lit", float(value), datatype, None)  # computed doubles: value, not lexical form
        except ValueError:
            pass
    return ("lit", value, datatype, None)


def key_ox(term, lit_key=_lit_key) -> tuple:
    """Comparison key of a pyoxigraph term; ``lit_key(value, datatype, lang)`` keys literals."""
    if term is None:
        return ("unbound",)
    if isinstance(term, ox.NamedNode):
        return ("uri", term.value)
    if isinstance(term, ox.BlankNode):
        return ("bnode",)
    return lit_key(term.value, term.datatype.value if term.datatype else None, term.language)


def _long_terms_ok(bindings: list[dict], window: set) -> bool:
    objs = None
    for b in bindings:
        for v in b.values():
            if v["type"] == "literal" and v.get("datatype") == XSD + "long":
                if objs is None:
                    objs = {o for _s, _p, o in window}
                if f'"{v["value"]}"^^<{XSD}long>' not in objs:
                    return False
    return True


def key_json(b: dict | None) -> tuple:
    if b is None:
        return ("unbound",)
    if b["type"] == "uri":
        return ("uri", b["value"])
    if b["type"] == "bnode":
        return ("bnode",)
    return _lit_key(b["value"], b.get("datatype"), b.get("xml:lang"))


class Oracle:
    """pyoxigraph over (static graphs of the query) + (window triples), cached by window content."""

    def __init__(self, static_nt: dict[str, bytes]):
        self.static_nt = static_nt
        self._stores: dict[tuple, ox.Store] = {}
        self._cache: dict[tuple, object] = {}

    def _store(self, graphs: tuple[str, ...]) -> ox.Store:
        st = self._stores.get(graphs)
        if st is None:
            st = ox.Store()
            for g in graphs:
                st.load(self.static_nt[g], format=ox.RdfFormat.N_TRIPLES)
            self._stores[graphs] = st
        return st

    def answer(self, q: CityQuery, window: frozenset) -> object:
        key = (q.name, window)
        if key in self._cache:
            return self._cache[key]
        st = self._store(tuple(sorted(set(q.static))))
        added = []
        for s, p, o in window:
            quad = ox.Quad(_ox_term(s), _ox_term(p), _ox_term(o), ox.DefaultGraph())
            if quad not in st:
                st.add(quad)
                added.append(quad)
        try:
            res = st.query(q.plain)
            if q.form == "ASK":
                out: object = bool(res)
            else:
                names = [v.value for v in res.variables]
                out = (names, Counter(tuple(key_ox(s[v]) for v in names) for s in res))
        finally:
            for quad in added:
                st.remove(quad)
        self._cache[key] = out
        return out


# ---------------------------------------------------------------- the run
@dataclass
class QueryReport:
    name: str
    streams: list[str]
    instants: int = 0
    nonempty: int = 0
    checked: int = 0
    agree: int = 0
    errors: int = 0
    rows: int = 0
    latencies: list[float] = field(default_factory=list)
    mismatches: list[dict] = field(default_factory=list)
    status: str = "ran"

    def summary(self) -> dict:
        lat = sorted(x for x in self.latencies if x is not None)
        p = (lambda f: round(lat[min(len(lat) - 1, int(math.ceil(f * len(lat))) - 1)], 3)) if lat else None
        return {"query": self.name, "status": self.status, "streams": self.streams, "instants": self.instants,
                "nonempty": self.nonempty, "result_rows": self.rows, "oracle_checked": self.checked,
                "oracle_agree": self.agree, "errors": self.errors,
                "latency_ms_median": round(statistics.median(lat), 3) if lat else None,
                "latency_ms_p99": p(0.99) if lat else None, "mismatches": self.mismatches[:3]}


def shared_root(explicit: str | None = None) -> Path:
    """shared/citybench with its query files (see :func:`pipeline.citybench.citybench_root`)."""
    from pipeline.citybench import citybench_root  # noqa: PLC0415

    return citybench_root(explicit, marker="csparql_query")


@dataclass
class Prepared:
    """The queries, static graphs and replayed stream rows of a run (see :func:`prepare`)."""

    queries: list[CityQuery]
    static_nt: dict[str, bytes]                               # graph IRI -> N-Triples
    sensors: dict[str, Sensor]                                # stream IRI -> sensor
    elements: dict[str, list[tuple[int, list[tuple[str, str, str]]]]]   # stream IRI -> (tau, triples)
    start_ms: int
    end_ms: int
    replay: Replay


def prepare(names: list[str], minutes: float = 2.0, start: str = DEFAULT_START, clock: str = "csv",
            frequency: float = 1.0, root: Path | None = None, seed: int = 0, log=None,
            end_date: str = DEFAULT_END) -> Prepared:
    """Steps 1-2 of the pipeline: read the queries, load their static graphs, map their streams' rows."""
    root = root or shared_root()
    say = log or (lambda *_: None)
    qs = [read_query(root / "csparql_query" / f"{n}.txt") for n in names]
    start_ms = parse_ms(start)
    end_ms = start_ms + int(minutes * 60_000)
    filter_end = min(parse_ms(end_date), end_ms) if clock == "csv" else parse_ms(end_date)
    rp = Replay(start_ms, end_ms, clock, frequency, filter_end, seed)

    t0 = time.perf_counter()
    repo = load_repository(root)
    static_nt: dict[str, bytes] = {}
    for q in qs:
        for url in q.static:
            if url not in static_nt:
                f = static_file(root, url)
                if f is None:
                    raise ValueError(f"{q.name}: no dataset file for static graph <{url}>")
                st = repo if f.name == "SensorRepository.n3" else None
                if st is None:
                    st = ox.Store()
                    st.bulk_load(path=str(f), format=ox.RdfFormat.N3)
                static_nt[url] = st.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=ox.DefaultGraph())
    sensors = {s: sensor_info(repo, s) for q in qs for s in q.windows}
    elements = {s: stream_elements(root, sen, rp) for s, sen in sensors.items()}
    say(f"prepared {len(sensors)} streams, {sum(len(e) for e in elements.values())} rows, "
        f"{len(static_nt)} static graphs in {time.perf_counter() - t0:.1f}s")
    return Prepared(qs, static_nt, sensors, elements, start_ms, end_ms, rp)


def run(queries: list[str] | None = None, minutes: float = 2.0, start: str = DEFAULT_START, clock: str = "csv",
        frequency: float = 1.0, oracle_every: int = 1, root: Path | None = None, seed: int = 0,
        log=None, end_date: str = DEFAULT_END) -> dict:
    from engine.database import Database  # noqa: PLC0415
    from engine.stream.manager import StreamManager  # noqa: PLC0415

    names = queries or DEFAULT_QUERIES
    t0 = time.perf_counter()
    pp = prepare(names, minutes, start, clock, frequency, root, seed, log, end_date)
    qs, static_nt, sensors, elements = pp.queries, pp.static_nt, pp.sensors, pp.elements
    start_ms, end_ms = pp.start_ms, pp.end_ms

    db = Database()
    for url, nt in static_nt.items():
        db.load_data(nt, "application/n-triples", graph=url)
    n_instants = int((end_ms - start_ms) // BUCKET_MS) + 1
    m = StreamManager(db, retain=n_instants + 16)
    reports = {q.name: QueryReport(q.name, [sensors[s].local for s in q.windows]) for q in qs}
    try:
        for s, sen in sensors.items():
            m.register_stream(sen.local, s)
            m.heartbeat(sen.local, start_ms)
        for q in qs:
            m.register_query(q.register_text)
        # replay: 1 s buckets of event time
        cursor = {s: 0 for s in elements}
        ingest_wall = []
        seen_eval = {q.name: 0 for q in qs}
        for b in range(start_ms, end_ms + 1, BUCKET_MS):
            w0 = time.perf_counter()
            for s, els in elements.items():
                i = cursor[s]
                lines = []
                while i < len(els) and els[i][0] < b + BUCKET_MS:
                    tau, trs = els[i]
                    lines += [orjson.dumps({"s": a, "p": p, "o": o, "t": tau}) for a, p, o in trs]
                    i += 1
                cursor[s] = i
                if lines:
                    r = m.ingest_ndjson(sensors[s].local, b"\n".join(lines))
                    if r["rejected"]:
                        raise RuntimeError(f"stream {sensors[s].local} rejected lines: {r['errors'][:3]}")
            for sen in sensors.values():
                m.heartbeat(sen.local, b + BUCKET_MS)
            if not m.drain(120):
                raise RuntimeError("engine did not drain within 120 s")
            ingest_wall.append((time.perf_counter() - w0) * 1000)
            for q in qs:
                info = m.query(q.name)
                if info["evaluated"] > seen_eval[q.name]:
                    seen_eval[q.name] = info["evaluated"]
                    reports[q.name].latencies.append(info["last_latency_ms"])
        replay_s = time.perf_counter() - t0

        # collect + oracle
        taus = {s: [e[0] for e in els] for s, els in elements.items()}
        oracle = Oracle(static_nt)
        o0 = time.perf_counter()
        for q in qs:
            rep = reports[q.name]
            events = [e for e in m.log(q.name).since(None, from_t=start_ms) if e.event == "result"]
            for k, e in enumerate(events):
                t = e.id
                doc = orjson.loads(e.data)
                rep.instants += 1
                if "error" in doc:
                    rep.errors += 1
                    rep.mismatches.append({"t": t, "error": doc.get("detail")})
                    continue
                if q.form == "ASK":
                    got: object = bool(doc.get("boolean"))
                    rep.nonempty += bool(got)
                else:
                    bindings = doc["results"]["bindings"]
                    rep.rows += len(bindings)
                    rep.nonempty += bool(bindings)
                if oracle_every <= 0 or k % oracle_every:
                    continue
                win = set()
                for s, rng_ms in q.windows.items():
                    lo = bisect.bisect_right(taus[s], t - rng_ms)
                    hi = bisect.bisect_right(taus[s], t)
                    for _tau, trs in elements[s][lo:hi]:
                        win.update(trs)
                want = oracle.answer(q, frozenset(win))
                if q.form != "ASK":
                    wnames, wbag = want
                    got = (doc["head"]["vars"], Counter(tuple(key_json(b.get(v)) for v in wnames)
                                                        for b in doc["results"]["bindings"]))
                    ok = got[0] == wnames and got[1] == wbag and _long_terms_ok(doc["results"]["bindings"], win)
                else:
                    ok = got == want
                rmax = max(q.windows.values())
                ok = ok and doc.get("window") == {"start": t - rmax, "end": t}
                rep.checked += 1
                if ok:
                    rep.agree += 1
                elif len(rep.mismatches) < 5:
                    detail = {"t": t, "window_triples": len(win)}
                    if q.form == "ASK":
                        detail.update(got=got, want=want)
                    else:
                        detail.update(got_rows=sum(got[1].values()), want_rows=sum(wbag.values()),
                                      only_got=[list(x) for x in list((got[1] - wbag).keys())[:2]],
                                      only_want=[list(x) for x in list((wbag - got[1]).keys())[:2]])
                    rep.mismatches.append(detail)
        oracle_s = time.perf_counter() - o0
    finally:
        m.close()
    bw = sorted(ingest_wall)
    return {"config": {"queries": names, "start": start, "end_date": end_date, "minutes": minutes, "clock": clock,
                       "frequency": frequency, "oracle_every": oracle_every, "instants_per_query": n_instants},
            "streams": {sen.local: len(elements[s]) for s, sen in sensors.items()},
            "replay_seconds": round(replay_s, 2), "oracle_seconds": round(oracle_s, 2),
            "bucket_wall_ms_median": round(statistics.median(bw), 3) if bw else None,
            "bucket_wall_ms_p99": round(bw[min(len(bw) - 1, int(math.ceil(0.99 * len(bw))) - 1)], 3) if bw else None,
            "queries": [reports[q.name].summary() for q in qs]}


def format_table(res: dict) -> str:
    cols = ("query", "instants", "nonempty", "result_rows", "oracle_checked", "oracle_agree", "errors",
            "latency_ms_median", "latency_ms_p99")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in res["queries"]:
        lines.append("| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench citybench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", default=",".join(DEFAULT_QUERIES),
                    help="comma-separated query file names from csparql_query/ (default Q1..Q12)")
    ap.add_argument("--minutes", type=float, default=15.0, help="minutes of event time to replay (default 15)")
    ap.add_argument("--start", default=DEFAULT_START, help="startDate, yyyy-MM-ddTHH:mm:ss (default %(default)s)")
    ap.add_argument("--end-date", default=DEFAULT_END,
                    help="endDate: rows with a later CSV time are skipped (default %(default)s)")
    ap.add_argument("--clock", choices=("csv", "paced"), default="csv",
                    help="csv: each row's CSV time; paced: CityBench rate-1.0 pacing (row k at start+k*interval)")
    ap.add_argument("--frequency", type=float, default=1.0, help="rows per second for paced/location (default 1)")
    ap.add_argument("--oracle-every", type=int, default=1, help="check every k-th instant (0: no oracle)")
    ap.add_argument("--shared", default=None, help="path of shared/ or shared/citybench")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the full report as JSON here")
    a = ap.parse_args(argv)
    res = run([q.strip() for q in a.queries.split(",") if q.strip()], a.minutes, a.start, a.clock, a.frequency,
              a.oracle_every, shared_root(a.shared), a.seed, log=lambda s: print(s, file=sys.stderr),
              end_date=a.end_date)
    print(format_table(res))
    print(f"replay {res['replay_seconds']} s, oracle {res['oracle_seconds']} s, per-bucket wall "
          f"median {res['bucket_wall_ms_median']} ms p99 {res['bucket_wall_ms_p99']} ms")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    bad = [r for r in res["queries"] if r["errors"] or r["oracle_agree"] != r["oracle_checked"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
