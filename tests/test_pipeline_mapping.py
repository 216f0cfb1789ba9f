"""Pipeline mappings without Spark: the CityBench mappings against bench/citybench.py on the
real CityBench rows, the spec checks, dead letters, lexical forms."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.citybench import QUERY_SENSORS, citybench_root, citybench_spec
from pipeline.expr import SpecError
from pipeline.mapping import java_doubles, load_tables, map_chunk, uuids
from pipeline.spec import parse_spec

try:
    ROOT = citybench_root()
except FileNotFoundError:
    ROOT = None
needs_citybench = pytest.mark.skipif(ROOT is None, reason="shared/citybench not available")

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _canon(triples):
    """Observation IRIs end in a random UUID (bench) or a derived one (pipeline): name each
    observation by its observed property, each value blank node by its observation's."""
    prop = {s: o for s, p, o in triples if p.endswith("#observedProperty>")}
    bn = {o: prop[s] for s, p, o in triples if o.startswith("_:")}

    def c(x):
        if x in prop:
            assert _UUID.search(x), x
            return "OBS[" + _UUID.sub("U", x) + prop[x] + "]"
        if x in bn:
            return "BN[" + bn[x] + "]"
        return x
    return sorted((c(s), p, c(o)) for s, p, o in triples)


@pytest.fixture(scope="module")
def cb_spec():
    doc = citybench_spec(root=ROOT)
    spec = parse_spec(doc)
    return spec, load_tables(spec)


@needs_citybench
@pytest.mark.parametrize("sensor", QUERY_SENSORS)
def test_citybench_mapping_matches_bench(cb_spec, sensor):
    from bench import citybench as cb

    spec, tables = cb_spec
    repo = _repo()
    sen = cb.sensor_info(repo, cb.SES + sensor)
    rp = cb.Replay(cb.parse_ms(cb.DEFAULT_START), cb.parse_ms(cb.DEFAULT_END), "csv", 1.0, None, 0)
    want = cb.stream_elements(ROOT, sen, rp)
    m = spec.mapping_for(f"file:///in/{sensor}.stream")
    assert m is not None and m.stream == sensor
    data = (ROOT / "streams" / f"{sensor}.stream").read_bytes()
    trip, dead, _filtered = map_chunk(m, data, f"file:///in/{sensor}.stream", tables)
    rows: dict[int, tuple[int, list]] = {}
    for s, p, o, t, r in zip(*(trip[c].to_pylist() for c in ("s", "p", "o", "t", "rec")), strict=True):
        rows.setdefault(r, (t, []))[1].append((s, p, o))
    got = [rows[k] for k in sorted(rows)]
    assert len(got) == len(want) > 0
    for (gt, gtr), (wt, wtr) in zip(got, want, strict=True):
        assert gt == wt
        assert _canon(gtr) == _canon(wtr)
    # bench skips weather rows with empty fields; the pipeline reports them as dead letters
    if sensor == "AarhusWeatherData0":
        assert dead.num_rows == 2
        assert all("empty value" in r for r in dead["reason"].to_pylist())
    else:
        assert dead.num_rows == 0


_REPO = {}


def _repo():
    from bench import citybench as cb

    if "r" not in _REPO:
        _REPO["r"] = cb.load_repository(ROOT)
    return _REPO["r"]


@needs_citybench
def test_citybench_iris_are_deterministic(cb_spec):
    spec, tables = cb_spec
    src = "file:///in/AarhusPollutionData201399.stream"
    data = (ROOT / "streams" / "AarhusPollutionData201399.stream").read_bytes()
    a, _, _ = map_chunk(spec.mapping_for(src), data, src, tables)
    b, _, _ = map_chunk(spec.mapping_for(src), data, src, tables)
    c, _, _ = map_chunk(spec.mapping_for(src), data, src + ".copy", tables)
    assert a["s"].equals(b["s"])
    assert len(set(a["s"].to_pylist())) == a.num_rows // 4          # one observation per row
    assert not set(a["s"].to_pylist()) & set(c["s"].to_pylist())    # another source, other IRIs


def _spec(mapping: dict, **top) -> dict:
    doc = {"name": "t", "source": {"kind": "files", "path": "in"},
           "prefixes": {"ex": "http://example.org/"}, "mappings": [mapping]}
    doc.update(top)
    return doc


SENSOR = {"stream": "s1", "stream_iri": "ex:s1", "format": "csv",
          "timestamp": "ts(time, '%Y-%m-%d %H:%M:%S')",
          "nodes": [{"subject": "ex:obs/{id}", "properties": [
              ["a", "ex:Obs"],
              ["ex:value", {"value": "float(v) * 2", "datatype": "xsd:double"}],
              ["ex:count", {"value": "n", "datatype": "xsd:long"}],
              ["ex:label", {"text": "{label}", "lang": "en"}],
              {"p": "ex:hot", "o": {"value": "1", "datatype": "xsd:boolean"}, "when": "float(v) > 20"}]}]}


def test_csv_mapping_and_dead_letters(tmp_path):
    spec = parse_spec(_spec(SENSOR), tmp_path)
    m = spec.mappings[0]
    data = (b"id,time,v,n,label\n"
            b"a1,2024-01-01 00:00:01,10.5,3,hello \"x\"\n"
            b"a2,2024-01-01 00:00:02,abc,4,bad number\n"
            b"a3,2024-01-01 00:00:03,30,5\n"                  # too few fields
            b"a4,not a time,1,1,bad time\n"
            b"a5,2024-01-01 00:00:05,25,6.5,not an int\n"
            b"a6,2024-01-01 00:00:06,21,7,ok\n")
    trip, dead, filtered = map_chunk(m, data, "file:///in/x.csv")
    got = {(r["s"], r["p"], r["o"], r["t"]) for r in trip.to_pylist()}
    t1 = 1704067201000
    assert ("<http://example.org/obs/a1>", "<http://example.org/value>",
            '"21.0"^^<http://www.w3.org/2001/XMLSchema#double>', t1) in got
    assert ("<http://example.org/obs/a1>", "<http://example.org/label>", '"hello \\"x\\""@en', t1) in got
    assert ("<http://example.org/obs/a6>", "<http://example.org/hot>",
            '"true"^^<http://www.w3.org/2001/XMLSchema#boolean>', t1 + 5000) in got
    assert not any(s == "<http://example.org/obs/a1>" and p.endswith("hot>") for s, p, _o, _t in got)
    assert {r["s"] for r in trip.to_pylist()} == {"<http://example.org/obs/a1>", "<http://example.org/obs/a6>"}
    reasons = sorted(dead["reason"].to_pylist())
    assert len(reasons) == 4 and filtered == 0
    assert any("not a number 'abc'" in r for r in reasons)
    assert any("expected 5 fields, got 4" in r for r in reasons)
    assert any("does not match" in r for r in reasons)
    assert any("not an integer" in r for r in reasons)
    raw = [json.loads(r) for r in dead["raw"].to_pylist() if r.startswith("{")]
    assert {r["id"] for r in raw} == {"a2", "a4", "a5"}


def test_filter_skip_and_max_rows(tmp_path):
    mp = dict(SENSOR, skip_rows=1, max_rows=2, filter="t >= ts('2024-01-01 00:00:03', '%Y-%m-%d %H:%M:%S')")
    m = parse_spec(_spec(mp), tmp_path).mappings[0]
    lines = [b"id,time,v,n,label"] + [f"r{i},2024-01-01 00:00:0{i},1,1,x".encode() for i in range(1, 8)]
    trip, dead, filtered = map_chunk(m, b"\n".join(lines), "f.csv")
    assert sorted({r["s"] for r in trip.to_pylist()}) == ["<http://example.org/obs/r3>", "<http://example.org/obs/r4>"]
    assert dead.num_rows == 0 and filtered == 1 + 3     # r2 before the filter time; r5..r7 over max_rows


def test_ndjson_and_bad_lines(tmp_path):
    mp = {"stream": "s2", "stream_iri": "ex:s2", "format": "ndjson", "timestamp": "ts_ms",
          "nodes": [{"subject": "ex:e/{id}", "properties": [["ex:temp", {"value": "temp", "datatype": "xsd:double"}]]}]}
    m = parse_spec(_spec(mp), tmp_path).mappings[0]
    body = b'{"id": "a", "ts_ms": 1000, "temp": 1.5}\n{"id": "b", "ts_ms": 2000, "temp": 3}\n'
    trip, dead, _ = map_chunk(m, body, "sub.x")
    assert trip["o"].to_pylist() == ['"1.5"^^<http://www.w3.org/2001/XMLSchema#double>',
                                     '"3.0"^^<http://www.w3.org/2001/XMLSchema#double>']
    assert trip["t"].to_pylist() == [1000, 2000] and dead.num_rows == 0
    trip, dead, _ = map_chunk(m, body + b'{"id": "c", "ts_ms": 3000, "temp": 2}\n{broken\n', "sub.x")
    assert trip.num_rows == 3 and dead.num_rows == 1 and "bad JSON" in dead["reason"][0].as_py()


def test_ntriples_with_timestamps(tmp_path):
    mp = {"stream": "s3", "stream_iri": "ex:s3", "format": "ntriples", "absorb": ["ex:p2"]}
    m = parse_spec(_spec(mp), tmp_path).mappings[0]
    body = (b'<http://e/a> <http://e/p1> "x y"@en 5 .\n# comment\n\n'
            b'<http://e/a> <http://example.org/p2> _:b1 6 .\n'
            b'<http://e/a> <http://e/p1> <http://e/c> .\n')         # no timestamp
    trip, dead, _ = map_chunk(m, body, "f.nt")
    assert trip.select(["s", "p", "o", "t", "timeless"]).to_pylist() == [
        {"s": "<http://e/a>", "p": "<http://e/p1>", "o": '"x y"@en', "t": 5, "timeless": False},
        {"s": "<http://e/a>", "p": "<http://example.org/p2>", "o": "_:b1", "t": 6, "timeless": True}]
    assert dead["rec"].to_pylist() == [5]          # its line number


def test_java_double_lexical_forms():
    xs = [69.0, 3.0, 29.92753623188406, 0.0014527845036319612, 4.842615012106538e-4, 1e7, 12345678.9,
          -0.0, 0.0, 1e-3, 9999999.0, 1.5e300, -2.5e-7]
    want = ["69.0", "3.0", "29.92753623188406", "0.0014527845036319612", "4.842615012106538E-4", "1.0E7",
            "1.23456789E7", "-0.0", "0.0", "0.001", "9999999.0", "1.5E300", "-2.5E-7"]
    assert java_doubles(pa.array(xs)).to_pylist() == want


def test_uuids_are_v4_shaped_and_distinct():
    u = uuids(12345, np.arange(10000, dtype=np.int64), 0).to_pylist()
    assert len(set(u)) == 10000 and all(_UUID.fullmatch(x) for x in u)
    assert uuids(12345, np.arange(5, dtype=np.int64), 1).to_pylist() != u[:5]


@pytest.mark.parametrize("bad,msg", [
    ({"nodes": None}, "'nodes'"),
    ({"timestamp": None}, "'timestamp'"),
    ({"timestamp": "import os"}, "cannot parse"),
    ({"timestamp": "__import__('os')"}, "unknown function"),
    ({"filter": "t.real > 0"}, "Attribute not allowed"),
    ({"stream": "bad name"}, "bad stream name"),
    ({"format": "xml"}, "format"),
    ({"nodes": [{"subject": "nope:x", "properties": [["a", "ex:X"]]}]}, "unknown prefix"),
    ({"nodes": [{"subject": "ex:x{uuid:3}", "properties": [["a", "ex:X"]]}]}, "names node 3"),
    ({"nodes": [{"subject": "ex:x", "properties": [["a", {"value": "1"}]]}]}, "needs a datatype"),
    ({"colour": "red"}, "unknown key"),
])
def test_spec_errors(tmp_path, bad, msg):
    mp = {k: v for k, v in dict(SENSOR, **bad).items() if v is not None}
    with pytest.raises(SpecError, match=re.escape(msg) if " " not in msg else msg):
        parse_spec(_spec(mp), tmp_path)


def test_spec_file_and_check_cli(tmp_path, capsys):
    from pipeline.cli import main

    (tmp_path / "spec.json").write_text(json.dumps(_spec(dict(SENSOR, match="*.csv"))))
    sample = tmp_path / "a.csv"
    sample.write_text("id,time,v,n,label\nz,2024-01-01 00:00:01,1,2,hi\n")
    assert main(["check", str(tmp_path / "spec.json"), "--sample", str(sample)]) == 0
    out = capsys.readouterr().out
    assert '<http://example.org/obs/z> <http://example.org/value> "2.0"^^' in out
    (tmp_path / "bad.json").write_text(json.dumps(_spec(dict(SENSOR, timestamp="1 +"))))
    assert main(["check", str(tmp_path / "bad.json")]) == 2
    assert "cannot parse" in capsys.readouterr().err


def test_unknown_column_is_a_clear_error(tmp_path):
    mp = dict(SENSOR, timestamp="ts(when_it_happened)")
    m = parse_spec(_spec(mp), tmp_path).mappings[0]
    with pytest.raises(SpecError, match="no column or variable 'when_it_happened'"):
        map_chunk(m, b"id,time,v,n,label\na,2024-01-01 00:00:01,1,1,x\n", "f.csv")


def test_citybench_spec_roundtrips_through_yaml(tmp_path):
    if ROOT is None:
        pytest.skip("shared/citybench not available")
    import yaml

    from pipeline.cli import main

    out = tmp_path / "cb.yaml"
    assert main(["citybench-spec", "--citybench", str(ROOT), "--out", str(out)]) == 0
    spec = parse_spec(yaml.safe_load(out.read_text()), tmp_path)
    assert sorted(spec.streams()) == sorted(QUERY_SENSORS)
    assert Path(spec.source.path).resolve() == (ROOT / "streams").resolve()


def test_split_parts_keeps_elements_whole_and_bounded():
    from pipeline.injector import split_parts

    t = [1] * 3 + [2] * 3 + [3] * 4
    tab = pa.table({"s": ["<a>"] * 10, "p": ["<p>"] * 10, "o": ["<o>"] * 10, "t": t})   # 33 bytes a row
    assert split_parts(tab, 10_000) == [(0, 10)]
    assert split_parts(tab, 100) == [(0, 3), (3, 6), (6, 9), (9, 10)]      # an element over the cap is cut
    assert split_parts(tab, 200) == [(0, 6), (6, 10)]
    assert split_parts(tab.slice(0, 0), 100) == []


def test_readme_check_command_runs_as_written():
    """The README's `jindou pipeline check ...` line, run from the repository root exactly as
    written (the sample it names ships with the repository)."""
    import shlex
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    lines = [ln.split("#", 1)[0].strip() for ln in (repo / "README.md").read_text().splitlines()
             if ln.startswith("jindou pipeline check ")]
    assert len(lines) == 1, lines
    argv = shlex.split(lines[0])
    r = subprocess.run([sys.executable, "-m", "server.cli", *argv[1:]], cwd=repo, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "<http://www.w3.org/ns/sosa/Observation> 1700000000000 ." in r.stdout
    assert re.search(r"# mapping 'readings': [1-9]\d* triples", r.stderr)
