"""`python -m bench formats` at a tiny scale: every path loads the same triples, the
report has a row per format (a smoke test of the harness, no timing asserted)."""

from __future__ import annotations


def test_bench_formats_tiny():
    from bench import formats as bf

    res = bf.run(scale=1500, runs=1, rdflib_runs=1)
    assert res["triples"] > 0
    for f in ("ttl", "trig", "xml", "jsonld"):
        assert len(res["load"][f]["jindou"]) == 1 and len(res["load"][f]["jindou-rdflib"]) == 1
        assert len(res["write"][f]["jindou"]) == 1
        for k in bf.SMALL_SIZES:
            assert len(res["small"][f"{f} {k}"]["jindou"]) == 1
    text = bf.report(res)
    assert "| ttl |" in text and "| jsonld |" in text and "pyoxigraph" in text and "| xml 20 |" in text


def test_documents_read_back_equal():
    """The harness's documents hold the same graph in every format (pyoxigraph reads them)."""
    import pyoxigraph as ox

    from bench import formats as bf

    nt = b"".join(f'<http://ex.org/s{i}> <http://ex.org/p> "v{i}" .\n'.encode() for i in range(50))
    docs = bf.make_documents(nt)
    want = ox.Dataset(ox.parse(nt, ox.RdfFormat.N_TRIPLES))
    for name, oxf, _, _ in bf.FORMATS:
        assert ox.Dataset(ox.parse(docs[name], getattr(ox.RdfFormat, oxf))) == want
