"""The CityBench stream mappings (shared/citybench/README.md §2-§5) as a pipeline spec.

A sensor's payloads (observed property IRIs and their ``ct:`` types) are opaque
and live in ``dataset/SensorRepository.n3``, so the spec is generated from it:
``jindou pipeline citybench-spec --sensors AarhusTrafficData158505,... > spec.yaml``
(or :func:`citybench_spec`). Every stream kind is plain declarative mapping
(templates, ``let`` expressions, a ``lookup`` into trafficMetaData.csv); the
generator only fills in the sensor-specific IRIs. The quirks of the original are
kept: traffic skips its first data row (it only supplies the distance D) and
emits at most 999 rows per file, ``ct:MeasureTime`` gets no value, the
location stream has no time column (line i is stamped start + i*interval).
One deliberate difference: the weather row with empty fields goes to the dead
letters instead of ending the stream.
"""

from __future__ import annotations

import os
from pathlib import Path

SES = "http://www.insight-centre.org/dataset/SampleEventService#"
SSN = "http://purl.oclc.org/NET/ssnx/ssn#"
SAO = "http://purl.oclc.org/NET/sao/"
CT = "http://www.insight-centre.org/citytraffic#"
UP = "http://www.ict-citypulse.eu/ontologies/userprofile#"
RDFS_RESOURCE = "http://www.w3.org/2000/01/rdf-schema#Resource"
OWLS = "http://www.daml.org/services/owl-s/1.2/Service.owl#"
OWLSSC = "http://www.daml.org/services/owl-s/1.2/ServiceCategory.owl#"
LOCATION_FOI = ("http://iot.ee.surrey.ac.uk/citypulse/datasets/aarhusculturalevents/"
                "culturalEvents_aarhus#context_do63jk2t8c3bjkfb119ojgkhs7")
KINDS = ("traffic", "pollution", "weather", "location", "parking")
DEFAULT_START = "2014-08-11T11:00:00"
DEFAULT_END = "2014-08-31T11:00:00"
#: the sensors the CityBench queries Q1-Q12 read
QUERY_SENSORS = ["AarhusTrafficData158505", "AarhusTrafficData182955", "AarhusTrafficData186979",
                 "AarhusWeatherData0", "AarhusPollutionData201399", "AarhusPollutionData184892",
                 "AarhusParkingDataKALKVAERKSVEJ", "AarhusParkingDataSKOLEBAKKEN", "UserLocationService"]


def citybench_root(explicit: str | None = None, marker: str = "dataset/SensorRepository.n3") -> Path:
    """shared/citybench: --citybench, $JINDOU_SHARED, or next to the checkout; the first candidate
    (or its ``citybench`` subfolder) holding ``marker``."""
    cands = [Path(explicit)] if explicit else []
    if os.environ.get("JINDOU_SHARED"):
        cands.append(Path(os.environ["JINDOU_SHARED"]))
    here = Path(__file__).resolve().parents[1]
    cands += [here.parent / "shared", here / "shared", Path("/work/shared")]
    for c in cands:
        for d in (c, c / "citybench"):
            if (d / marker).exists():
                return d
    raise FileNotFoundError("shared/citybench not found (pass its path or set JINDOU_SHARED)")


class _Repo:
    """SPARQL over SensorRepository.n3 (pyoxigraph when installed, else rdflib)."""

    def __init__(self, root: Path):
        path = root / "dataset" / "SensorRepository.n3"
        try:
            import pyoxigraph as ox

            self._st = ox.Store()
            self._st.bulk_load(path=str(path), format=ox.RdfFormat.N3)
            self._ox = True
        except ImportError:
            import rdflib

            self._st = rdflib.Graph()
            self._st.parse(str(path), format="n3")
            self._ox = False

    def select(self, q: str) -> list[dict[str, str]]:
        if self._ox:
            res = self._st.query(q)
            names = [v.value for v in res.variables]
            return [{n: str(sol[n].value) for n in names if sol[n] is not None} for sol in res]
        return [{str(k): str(v) for k, v in row.asdict().items()} for row in self._st.query(q)]


def sensor_payloads(repo: _Repo, sensor_iri: str) -> tuple[str, list[tuple[str, str]]]:
    """(kind, [(ct type IRI, property IRI), ...] sorted as CityBench's payload list)."""
    cats = [r["n"].lower() for r in repo.select(
        f"SELECT ?n WHERE {{ <{sensor_iri}> <{OWLS}presents>/<{OWLSSC}serviceCategory>/"
        f"<{OWLSSC}serviceCategoryName> ?n }}")]
    kind = next((k for k in KINDS if any(k in c for c in cats)), None)
    if kind is None:
        raise ValueError(f"no CityBench converter for sensor <{sensor_iri}> (categories {cats})")
    pays = sorted({(r["type"], r["p"]) for r in repo.select(
        f"SELECT ?type ?p WHERE {{ <{sensor_iri}> <{SSN}observes> ?p . ?p a ?type . "
        f"?p <{SSN}isPropertyOf> ?foi }}") if r["type"] != RDFS_RESOURCE})
    return kind, pays


def _value(kind: str, ctype: str) -> dict | None:
    local = ctype.rsplit("#", 1)[-1]
    table = {
        "traffic": {"AvgSpeed": {"value": "float(avgSpeed)", "datatype": "xsd:double"},
                    "VehicleCount": {"value": "float(vehicleCount)", "datatype": "xsd:double"},
                    "EstimatedTime": {"value": "D / float(avgSpeed) if float(avgSpeed) != 0 else -1.0",
                                      "datatype": "xsd:double"},
                    "CongestionLevel": {"value": "float(vehicleCount) / D if D != 0 else -1.0",
                                        "datatype": "xsd:double"},
                    "MeasureTime": None},
        "pollution": {"API": {"value": "max(int(ozone), int(particullate_matter), int(carbon_monoxide), "
                                       "int(sulfure_dioxide), int(nitrogen_dioxide))", "datatype": "xsd:long"}},
        "weather": {"Temperature": {"value": "float(tempm)", "datatype": "xsd:double"},
                    "Humidity": {"value": "int(hum)", "datatype": "xsd:long"},
                    "WindSpeed": {"value": "float(wspdm)", "datatype": "xsd:double"}},
        "parking": {"ParkingVacancy": {"value": "int(totalspaces) - int(vehiclecount)", "datatype": "xsd:long"}},
        "location": {"Location": "_:loc{uuid:%d}"},
    }[kind]
    if local not in table:
        raise ValueError(f"CityBench {kind} sensors have no payload type {local}")
    return table[local]


def mapping_for(repo: _Repo, sensor: str, start: str, end: str, interval_ms: int) -> dict:
    iri = SES + sensor
    kind, pays = sensor_payloads(repo, iri)
    window = f"t >= ts('{start}') and t <= ts('{end}')"
    m: dict = {"name": sensor, "match": f"{sensor}.stream", "stream": sensor, "stream_iri": iri,
               "absorb": "none", "format": "csv"}
    prefix = {"traffic": "AarhusTrafficObservation-{_id}", "parking": "AarhusParkingObservation-{_id}",
              "pollution": "AarhusPollutionObservation-0", "weather": "AarhusWeatherObservation-0",
              "location": "UserLocationObservation-0"}[kind]
    if kind == "traffic":
        m.update(skip_rows=1, max_rows=999, timestamp="ts(TIMESTAMP)", filter=window,
                 let={"D": "float(lookup('traffic_meta', REPORT_ID, 'DISTANCE_IN_METERS'))"})
    elif kind == "weather":
        m.update(timestamp="ts(TIMESTAMP)", filter=window)
    elif kind == "pollution":
        m.update(timestamp="ts(timestamp, '%Y-%m-%d %H:%M:%S')", filter=window)
    elif kind == "parking":
        m.update(timestamp="ts(substr(updatetime, 0, 19), '%Y-%m-%d %H:%M:%S')", filter=window)
    else:
        m.update(csv={"delimiter": "|", "header": False, "columns": ["user", "position"]},
                 timestamp=f"ts('{start}') + row * {int(interval_ms)}", filter=f"t <= ts('{end}')",
                 let={"lat": "float(split(position, ',', 0))", "lon": "float(split(position, ',', 1))"})
    nodes = []
    for ctype, prop in pays:
        props = [["a", "ssn:Observation"], ["ssn:observedBy", f"<{iri}>"], ["ssn:observedProperty", f"<{prop}>"]]
        v = _value(kind, ctype)
        if kind == "location":
            v = v % (len(pays))      # the value node follows the observation nodes
            props.append(["ssn:featureOfInterest", f"<{LOCATION_FOI}>"])
        if v is not None:
            props.append(["sao:hasValue", v])
        nodes.append({"subject": f"ses:{prefix}{{uuid}}", "properties": props})
    if kind == "location":
        nodes.append({"subject": "_:loc{uuid}",
                      "properties": [["ct:hasLatitude", {"value": "lat", "datatype": "xsd:double"}],
                                     ["ct:hasLongitude", {"value": "lon", "datatype": "xsd:double"}]]})
    m["nodes"] = nodes
    return m


def citybench_spec(sensors: list[str] | None = None, *, input_dir: str | None = None,
                   root: str | Path | None = None, name: str = "citybench", start: str = DEFAULT_START,
                   end: str = DEFAULT_END, frequency: float = 1.0, source: dict | None = None) -> dict:
    """The spec document (a dict; dump it as YAML/JSON) for the given sensors."""
    root = citybench_root(str(root) if root else None)
    repo = _Repo(root)
    sensors = sensors or QUERY_SENSORS
    interval = int(1000 // frequency)
    return {
        "name": name,
        "source": source or {"kind": "files", "path": str(input_dir or root / "streams"),
                             "glob": "{" + ",".join(sensors) + "}.stream", "max_files_per_trigger": 4},
        "prefixes": {"ses": SES, "ssn": SSN, "sao": SAO, "ct": CT, "up": UP},
        "tables": {"traffic_meta": {"path": str(root / "dataset" / "MetaData" / "trafficMetaData.csv"),
                                    "key": "REPORT_ID"}},
        "mappings": [mapping_for(repo, s, start, end, interval) for s in sensors],
    }
