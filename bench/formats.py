"""`python -m bench formats`: load and write time per RDF format, side by side.

One LUBM-like graph (bench/lubm.py) is written once in each format by
pyoxigraph (Turtle and TriG with prefixes). Then, in alternating runs (every
format and every path once per run, so load on the machine hits all alike),
the median of ``--runs``:

load (parse + intern + commit into an empty store):
  * ``jindou``: today's path (pyoxigraph parses, N-Quads handed to the vectorized path);
  * ``jindou-rdflib``: the previous path (rdflib parses, terms converted one by one:
    ``engine.kv.loader._parse_rdflib``, kept for remote JSON-LD contexts), then the same
    intern + commit;
  * ``pyoxigraph``: ``Store.bulk_load`` into an in-memory pyoxigraph store, and its bare
    parse (``parse`` iterated) for reference;
  * N-Triples through Jindou's vectorized path, for reference.

write (a whole graph held in memory -> bytes):
  * ``jindou``: ``engine.exec.serialize.serialize`` of the graph read from the store;
  * ``jindou-rdflib``: the previous writers (an rdflib graph built term by term, then
    rdflib's serializer), reproduced here for the comparison;
  * ``pyoxigraph``: ``Store.dump`` of the graph held in an in-memory pyoxigraph store.

Ratios are time / jindou time (> 1: Jindou is faster). See docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time

PREFIXES = {"ub": "http://swat.cse.lehigh.edu/onto/univ-bench.owl#",
            "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#"}
#: (jindou format name, pyoxigraph format, file extension, rdflib serializer name)
FORMATS = [("ttl", "TURTLE", "ttl", "turtle"), ("trig", "TRIG", "trig", "trig"),
           ("xml", "RDF_XML", "rdf", "xml"), ("jsonld", "JSON_LD", "jsonld", "json-ld")]
#: formats timed on the small graphs only (N-Triples: the whole graph's write is not this harness's)
SMALL_ONLY = [("nt", "N_TRIPLES", "nt", "nt")]
BASE = "http://bench.example/"


def _ox():
    import pyoxigraph as ox

    return ox


def make_documents(nt: bytes) -> dict[str, bytes]:
    """The graph in every format, written by pyoxigraph (TriG: in the default graph)."""
    ox = _ox()
    out = {}
    for name, oxf, _, _ in FORMATS:
        out[name] = ox.serialize(ox.parse(nt, ox.RdfFormat.N_TRIPLES), format=getattr(ox.RdfFormat, oxf),
                                 prefixes=PREFIXES)
    out["nt"] = nt
    return out


# ----------------------------------------------------------------- load paths
def load_jindou(data: bytes, fmt: str) -> int:
    from engine.io import ingest
    from engine.kv.store import Store

    st = Store()
    rep, _ = ingest.load(st, data, fmt, base=BASE, name="<bench>")
    return rep.triples


def load_jindou_rdflib(data: bytes, fmt: str) -> int:
    """The previous load path: rdflib's parser, then the same intern + commit."""
    from engine import formats
    from engine.io import ingest
    from engine.kv import loader
    from engine.kv.store import Store

    st = Store()
    f = formats.by_name(fmt)
    s, p, o, g = loader._parse_rdflib(data, f, BASE, "<bench>", ingest.bnode_prefix(st), False)
    iv = ingest.intern(st, s, p, o, g)
    ingest.apply(st, ingest.changes_for(iv.rows, iv.gids))
    return len(iv.rows)


def load_pyoxigraph(data: bytes, fmt: str) -> int:
    ox = _ox()
    st = ox.Store()
    st.bulk_load(data, getattr(ox.RdfFormat, dict((n, o) for n, o, _, _ in FORMATS)[fmt]), base_iri=BASE)
    return len(st)


def parse_pyoxigraph(data: bytes, fmt: str) -> int:
    ox = _ox()
    return sum(1 for _ in ox.parse(data, getattr(ox.RdfFormat, dict((n, o) for n, o, _, _ in FORMATS)[fmt]),
                                   base_iri=BASE))


# ----------------------------------------------------------------- write paths
def _old_rdflib_write(result, rdflib_format: str) -> bytes:
    """The writers before pyoxigraph (JSON-LD / RDF/XML through rdflib), reproduced: an rdflib
    graph built from the distinct terms, then rdflib's serializer."""
    import numpy as np
    from rdflib import BNode, Dataset, Literal, URIRef

    from engine.exec.serialize import COMMON_PREFIXES, _literal_parts
    from engine.terms import RDF_LANGSTRING, XSD_STRING

    def term(key: str):
        c = key[0]
        if c == "<":
            return URIRef(key[1:-1])
        if c == "_":
            return BNode(key[2:])
        lex, dt, lang = _literal_parts(key)
        if lang is not None:
            return Literal(lex, lang=lang)
        if dt is not None and dt not in (XSD_STRING, RDF_LANGSTRING):
            return Literal(lex, datatype=URIRef(dt))
        return Literal(lex)

    ds = Dataset()
    g = ds.default_graph if rdflib_format == "trig" else ds.graph(URIRef(BASE + "g"))
    for p, ns in COMMON_PREFIXES.items():
        g.bind(p, ns, override=True)
    t = np.asarray(result.triples, dtype=np.int64)
    uniq, inv = np.unique(t, return_inverse=True)
    terms = [term(k) for k in result.terms.keys(uniq)]
    for s, p, o in inv.reshape(-1, 3).tolist():
        g.add((terms[s], terms[p], terms[o]))
    src = ds if rdflib_format == "trig" else g
    fmt = "pretty-xml" if rdflib_format == "xml" and len(g) < 10000 else rdflib_format
    data = src.serialize(format=fmt)
    return data.encode("utf-8") if isinstance(data, str) else data


def write_jindou(result, fmt: str) -> int:
    from engine import formats
    from engine.exec import serialize as ser

    return len(ser.serialize(result, formats.by_name(fmt).media_type))


def write_pyoxigraph(store, fmt: str) -> int:
    """pyoxigraph's own write of a graph it holds: its store's default graph dumped."""
    ox = _ox()
    oxf = getattr(ox.RdfFormat, dict((n, o) for n, o, _, _ in FORMATS + SMALL_ONLY)[fmt])
    if oxf.supports_datasets:
        return len(store.dump(format=oxf, prefixes=PREFIXES))
    return len(store.dump(format=oxf, from_graph=ox.DefaultGraph(), prefixes=PREFIXES))


# ----------------------------------------------------------------- the run
def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(scale: int, runs: int, rdflib_runs: int, seed: int = 0) -> dict:
    from bench import lubm
    from engine.database import Database

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.nt")
        info = lubm.generate(path, triples=scale, seed=seed)
        with open(path, "rb") as f:
            nt = f.read()
    docs = make_documents(nt)
    ox = _ox()
    db = Database(shards=1)
    db.load_data(nt, "application/n-triples")
    result = db.graph_get(None)
    ox_store = ox.Store()
    ox_store.bulk_load(nt, ox.RdfFormat.N_TRIPLES)

    load_paths = {"jindou": load_jindou, "jindou-rdflib": load_jindou_rdflib,
                  "pyoxigraph": load_pyoxigraph, "pyoxigraph-parse": parse_pyoxigraph}
    write_paths = {
        "jindou": lambda f: write_jindou(result, f),
        "jindou-rdflib": lambda f: len(_old_rdflib_write(result, dict((n, r) for n, _, _, r in FORMATS)[f])),
        "pyoxigraph": lambda f: write_pyoxigraph(ox_store, f),
    }
    names = [n for n, _, _, _ in FORMATS]
    smalls = _small_graphs(result)
    small_names = names + [n for n, _, _, _ in SMALL_ONLY]
    small: dict = {f"{f} {k}": {"jindou": [], "pyoxigraph": []} for k in smalls for f in small_names}
    loads: dict = {f: {p: [] for p in load_paths} for f in names}
    loads["nt"] = {"jindou": [], "pyoxigraph": []}
    writes: dict = {f: {p: [] for p in write_paths} for f in names}
    # correctness: every path loads the same number of triples
    for f in names:
        counts = {p: fn(docs[f], f) for p, fn in load_paths.items()}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"triple counts differ for {f}: {counts}")
    # and what Jindou writes, pyoxigraph reads back as the graph it holds
    for f, oxf, _, _ in FORMATS:
        from engine import formats as F
        from engine.exec import serialize as ser

        body = ser.serialize(result, F.by_name(f).media_type)
        back = ox.Dataset(ox.Quad(q.subject, q.predicate, q.object) for q in ox.parse(body, getattr(ox.RdfFormat, oxf)))
        if back != ox.Dataset(ox_store):
            raise SystemExit(f"what Jindou writes as {f} does not read back as the same graph")
    for r in range(runs):
        for f in names:
            for p, fn in load_paths.items():
                if p == "jindou-rdflib" and r >= rdflib_runs:
                    continue
                loads[f][p].append(_time(lambda fn=fn, f=f: fn(docs[f], f)))
            for p, fn in write_paths.items():
                if p == "jindou-rdflib" and (r >= rdflib_runs or f == "ttl"):
                    continue  # Turtle was (and is) Jindou's own writer
                writes[f][p].append(_time(lambda fn=fn, f=f: fn(f)))
        for k, (sub, sub_store) in smalls.items():
            for f in small_names:
                small[f"{f} {k}"]["jindou"].append(_per_call(lambda f=f, sub=sub: write_jindou(sub, f)))
                small[f"{f} {k}"]["pyoxigraph"].append(_per_call(lambda f=f, st=sub_store: write_pyoxigraph(st, f)))
        loads["nt"]["jindou"].append(_time(lambda: load_jindou(nt, "nt")))
        loads["nt"]["pyoxigraph"].append(_time(lambda: load_pyoxigraph_nt(nt)))
    return {"triples": info["triples"], "scale": scale, "runs": runs, "rdflib_runs": rdflib_runs,
            "bytes": {f: len(docs[f]) for f in docs}, "load": loads, "write": writes, "small": small,
            "machine": _machine()}


#: rows of the small graphs whose write is timed too (a DESCRIBE-sized answer, a page of one)
SMALL_SIZES = (20, 200)
#: calls timed together for one small-graph measurement
SMALL_CALLS = 50


def _small_graphs(result) -> dict:
    """Rows -> (the first rows of the graph as a result, a pyoxigraph store holding them)."""
    from engine.exec import serialize as ser
    from engine.exec.result import QueryResult

    ox = _ox()
    out = {}
    for k in SMALL_SIZES:
        sub = QueryResult(form="CONSTRUCT", terms=result.terms, triples=result.triples[:k])
        st = ox.Store()
        st.bulk_load(ser.serialize(sub, "application/n-triples"), ox.RdfFormat.N_TRIPLES)
        out[k] = (sub, st)
    return out


def _per_call(fn) -> float:
    """Seconds of this process's CPU per call (both paths run in this thread, so CPU time
    leaves out the waits other processes on the machine impose; a call is tens of µs)."""
    fn()
    t0 = time.process_time()
    for _ in range(SMALL_CALLS):
        fn()
    return (time.process_time() - t0) / SMALL_CALLS


def load_pyoxigraph_nt(nt: bytes) -> int:
    ox = _ox()
    st = ox.Store()
    st.bulk_load(nt, ox.RdfFormat.N_TRIPLES)
    return len(st)


def _machine() -> dict:
    import numpy
    import pyoxigraph
    import rdflib

    return {"when": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
            "load_avg": os.getloadavg()[0], "python": platform.python_version(),
            "pyoxigraph": pyoxigraph.__version__, "rdflib": rdflib.__version__, "numpy": numpy.__version__}


def _med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _cell(xs: list[float], ref: float | None) -> str:
    m = _med(xs)
    if m is None:
        return "-"
    spread = f" ±{(max(xs) - min(xs)) / 2 / m * 100:.0f}%" if len(xs) > 1 else ""
    ratio = f" ({m / ref:.1f}x)" if ref else ""
    return f"{m:.3f}{ratio}{spread}"


def report(res: dict) -> str:
    m = res["machine"]
    lines = [f"{m['when']} · {m['cpus']} CPUs · load avg {m['load_avg']:.2f} at start · Python {m['python']} · "
             f"pyoxigraph {m['pyoxigraph']}, rdflib {m['rdflib']} · {res['triples']:,} triples · "
             f"median of {res['runs']} alternating runs (old rdflib path: {res['rdflib_runs']}); "
             "± = half the min-max spread", "",
             "Load (parse + intern + commit), seconds; (Nx) = time / Jindou's time", "",
             "| format | bytes | jindou | jindou-rdflib (before) | pyoxigraph bulk_load | pyoxigraph parse only |",
             "| --- | --- | --- | --- | --- | --- |"]
    for f, row in res["load"].items():
        ref = _med(row["jindou"])
        lines.append(f"| {f} | {res['bytes'][f]:,} | {_cell(row['jindou'], None)} | "
                     f"{_cell(row.get('jindou-rdflib', []), ref)} | {_cell(row['pyoxigraph'], ref)} | "
                     f"{_cell(row.get('pyoxigraph-parse', []), ref)} |")
    lines += ["", "Write (graph in memory -> bytes), seconds; (Nx) = time / Jindou's time", "",
              "| format | jindou | jindou-rdflib (before) | pyoxigraph Store.dump |", "| --- | --- | --- | --- |"]
    for f, row in res["write"].items():
        ref = _med(row["jindou"])
        lines.append(f"| {f} | {_cell(row['jindou'], None)} | {_cell(row.get('jindou-rdflib', []), ref)} | "
                     f"{_cell(row['pyoxigraph'], ref)} |")
    if res.get("small"):
        lines += ["", f"Write, small graphs (the first N rows of the graph), ms of CPU per graph (mean of {SMALL_CALLS} "
                  "calls, median over runs); (Nx) = time / Jindou's time", "",
                  "| format, rows | jindou | pyoxigraph Store.dump |", "| --- | --- | --- |"]
        for f, row in res["small"].items():
            ref = _med(row["jindou"])
            ms = {p: [x * 1000 for x in xs] for p, xs in row.items()}
            lines.append(f"| {f} | {_cell(ms['jindou'], None)} | {_cell(ms['pyoxigraph'], ref * 1000)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.lubm import parse_scale

    ap = argparse.ArgumentParser(prog="python -m bench formats", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="100k", help="triples of the generated graph (e.g. 100k, 300k)")
    ap.add_argument("--runs", type=int, default=5, help="alternating runs (median)")
    ap.add_argument("--rdflib-runs", type=int, default=2, help="runs of the slow old rdflib path")
    ap.add_argument("--json", help="also write the raw times to this file")
    a = ap.parse_args(argv)
    res = run(parse_scale(a.scale), max(1, a.runs), max(0, min(a.rdflib_runs, a.runs)))
    print(report(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
