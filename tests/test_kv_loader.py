import gzip

import numpy as np
import pytest

from engine.errors import LoadError
from engine.io.ingest import load_data, load_file
from engine.kv import loader
from engine.kv.loader import parse_to_keys
from engine.kv.store import Store

XSD = "http://www.w3.org/2001/XMLSchema#"


def keyset(store, graph=None):
    snap = store.snapshot()
    d = store.dictionary
    gid = None if graph is None else d.lookup("<" + graph + ">")
    if graph is not None and gid < 0:
        return set()
    s, p, o = snap.graph(gid).scan_all()
    return {(d.key(a), d.key(b), d.key(c)) for a, b, c in zip(s.tolist(), p.tolist(), o.tolist(), strict=True)}


NT = """# a comment
<http://ex.org/s> <http://ex.org/p> <http://ex.org/o> .
<http://ex.org/s> <http://ex.org/p> "plain" .

<http://ex.org/s>\t<http://ex.org/p>\t"tab sep"@EN-us .
<http://ex.org/s><http://ex.org/p>"no space"^^<http://www.w3.org/2001/XMLSchema#string>.
<http://ex.org/s> <http://ex.org/p> "esc \\u00E9 \\"q\\" \\\\ \\n \\t" . # trailing comment
<http://ex.org/\\u00E9> <http://ex.org/p> "01"^^<http://www.w3.org/2001/XMLSchema#integer> .
_:b1 <http://ex.org/p> _:b2 .
<http://ex.org/s> <http://ex.org/p> "a b . c" .
"""


def test_ntriples_canonicalization(tmp_path):
    f = tmp_path / "d.nt"
    f.write_text(NT, encoding="utf-8")
    store = Store(shards=2)
    rep = load_file(store, f)
    assert rep.triples == 8 and rep.skipped == 0 and rep.graphs == [None]
    ks = keyset(store)
    objs = {o for _, _, o in ks}
    assert '"plain"' in objs
    assert '"tab sep"@en-us' in objs
    assert '"no space"' in objs
    assert '"esc é \\"q\\" \\\\ \\n \t"' in objs
    assert '"01"^^<' + XSD + "integer>" in objs
    assert '"a b . c"' in objs
    assert ("<http://ex.org/é>", "<http://ex.org/p>", '"01"^^<' + XSD + "integer>") in ks
    bn = [(s, o) for s, _, o in ks if s.startswith("_:")]
    assert len(bn) == 1 and bn[0][0] != bn[0][1] and bn[0][1].startswith("_:")


def test_bnodes_unique_per_load():
    store = Store(shards=1)
    load_data(store, "_:b0 <http://p> <http://o> .\n", "application/n-triples")
    load_data(store, "_:b0 <http://p> <http://o> .\n", "application/n-triples")
    assert len(keyset(store)) == 2
    load_data(store, "_:b0 <http://p> <http://o> .\n", "text/turtle")
    assert len(keyset(store)) == 3


@pytest.mark.parametrize("chunk", [1 << 20, 64])
def test_atomic_failure_with_line(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(loader, "_CHUNK_BYTES", chunk)
    lines = [f"<http://ex.org/s{i}> <http://ex.org/p> <http://ex.org/o> ." for i in range(20)]
    lines[13] = "<http://ex.org/s> <http://ex.org/p> ."
    f = tmp_path / "bad.nt"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = Store(shards=2)
    load_data(store, "<http://a> <http://b> <http://c> .", "application/n-triples")
    sn = store.snapshot().sn
    with pytest.raises(LoadError) as ei:
        load_file(store, f)
    assert ei.value.line == 14 and ei.value.source == "bad.nt"
    assert "bad.nt" in str(ei.value) and "14" in str(ei.value)
    assert store.snapshot().sn == sn and len(keyset(store)) == 1
    rep = load_file(store, f, lenient=True)
    assert rep.triples == 19 and rep.skipped == 1 and rep.errors[0][0] == 14
    assert len(keyset(store)) == 20


@pytest.mark.parametrize("bad,line", [
    ('<http://a> <http://b> "unterminated .', 2),
    ("<relative> <http://b> <http://c> .", 2),
    ('<http://a> <http://b> "x"@ .', 2),
    ('<http://a> <http://b> "bad \\q escape" .', 2),
    ("<http://a> <http://b> <http://c>", 2),
    ('"lit" <http://b> <http://c> .', 2),
    ("<http://a> <http://b> <http://c> <http://g> .", 2),
    # an escape that yields what an IRI cannot hold (pyoxigraph refuses these too)
    ("<http://a\\u0000> <http://b> <http://c> .", 2),
    ("<http://a> <http://b> <http://c\\u0020d> .", 2),
    ('<http://a> <http://b> "x"^^<http://d\\u003E> .', 2),
    ("<http://a> <http://b\\U0000007B> <http://c> .", 2),
])
def test_bad_ntriples(bad, line):
    store = Store(shards=1)
    with pytest.raises(LoadError) as ei:
        load_data(store, "<http://a> <http://b> <http://c> .\n" + bad + "\n", "application/n-triples")
    assert ei.value.line == line
    assert store.snapshot().sn == 0


def test_nquads_named_graphs_and_graph_arg(tmp_path):
    data = (
        "<http://s> <http://p> <http://o> .\n"
        "<http://s> <http://p> <http://o> <http://g1> .\n"
        '<http://s> <http://p> "a b" <http://g2> .\n'
        '<http://s> <http://p> "a <http://x> b" .\n'
        "<http://s> <http://p> _:x _:g .\n"
    )
    f = tmp_path / "d.nq.gz"
    f.write_bytes(gzip.compress(data.encode()))
    store = Store(shards=4)
    rep = load_file(store, f, graph="http://target")
    assert rep.triples == 5
    assert keyset(store) == set()
    assert keyset(store, "http://target") == {("<http://s>", "<http://p>", "<http://o>"),
                                              ("<http://s>", "<http://p>", '"a <http://x> b"')}
    assert keyset(store, "http://g1") == {("<http://s>", "<http://p>", "<http://o>")}
    assert keyset(store, "http://g2") == {("<http://s>", "<http://p>", '"a b"')}
    assert len(store.snapshot().named) == 4
    assert "http://g1" in rep.graphs and "http://target" in rep.graphs


def test_turtle_keeps_lexical_forms():
    ttl = """@prefix ex: <http://ex.org/> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
ex:s ex:p 01, "1"^^xsd:integer, "x"^^xsd:string, "y"@EN, 1.50, 1e0, true, [ ex:q ex:r ] .
"""
    store = Store(shards=2)
    rep = load_data(store, ttl, "text/turtle")
    assert rep.triples == 9
    objs = {o for _, _, o in keyset(store)}
    assert '"01"^^<' + XSD + "integer>" in objs
    assert '"1"^^<' + XSD + "integer>" in objs
    assert '"x"' in objs and '"y"@en' in objs
    assert '"1.50"^^<' + XSD + "decimal>" in objs
    assert '"1e0"^^<' + XSD + "double>" in objs
    assert '"true"^^<' + XSD + "boolean>" in objs
    d = store.dictionary
    assert d.numeric(np.array([d.lookup('"01"^^<' + XSD + "integer>")]))[0] == 1.0


def test_turtle_syntax_error_line(tmp_path):
    f = tmp_path / "bad.ttl"
    f.write_text('@prefix ex: <http://ex.org/> .\nex:a ex:b ex:c .\nex:a ex:b "x .\n', encoding="utf-8")
    store = Store(shards=1)
    with pytest.raises(LoadError) as ei:
        load_file(store, f)
    assert ei.value.line == 3 and ei.value.source == "bad.ttl"
    assert store.snapshot().sn == 0


def test_trig_rdfxml_jsonld(tmp_path):
    store = Store(shards=2)
    trig = "@prefix ex: <http://ex.org/> .\nex:a ex:b ex:c .\nex:g { ex:a ex:b ex:d . }\n"
    (tmp_path / "d.trig").write_text(trig, encoding="utf-8")
    load_file(store, tmp_path / "d.trig")
    assert keyset(store) == {("<http://ex.org/a>", "<http://ex.org/b>", "<http://ex.org/c>")}
    assert keyset(store, "http://ex.org/g") == {("<http://ex.org/a>", "<http://ex.org/b>", "<http://ex.org/d>")}
    xml = """<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://ex.org/">
  <rdf:Description rdf:about="http://ex.org/x"><ex:name xml:lang="EN">X</ex:name></rdf:Description>
</rdf:RDF>"""
    (tmp_path / "d.rdf").write_text(xml, encoding="utf-8")
    rep = load_file(store, tmp_path / "d.rdf", graph="http://ex.org/xml")
    assert rep.triples == 1
    assert keyset(store, "http://ex.org/xml") == {("<http://ex.org/x>", "<http://ex.org/name>", '"X"@en')}
    js = '{"@id": "http://ex.org/j", "http://ex.org/v": {"@value": "007", "@type": "http://www.w3.org/2001/XMLSchema#integer"}}'
    load_data(store, js, "application/ld+json", graph="http://ex.org/js")
    assert keyset(store, "http://ex.org/js") == {("<http://ex.org/j>", "<http://ex.org/v>", '"007"^^<' + XSD + "integer>")}
    with pytest.raises(LoadError):
        load_data(store, "<rdf:RDF", "application/rdf+xml")


def test_parse_to_keys_and_unknown_format(tmp_path):
    pk = parse_to_keys(b'<http://a> <http://b> "X"@EN .\n', "nt")
    assert pk.s.to_pylist() == ["<http://a>"] and pk.o.to_pylist() == ['"X"@en'] and pk.g.to_pylist() == [None]
    pk = parse_to_keys(b"<http://a> <http://b> <http://c> .", "ttl")
    assert len(pk) == 1
    f = tmp_path / "k.ttl"
    f.write_text("<http://a> <http://b> <http://c> .", encoding="utf-8")
    assert len(parse_to_keys(str(f), "ttl")) == 1
    with pytest.raises(LoadError):
        parse_to_keys(str(tmp_path / "missing.ttl"), "ttl")
    with pytest.raises(LoadError):
        load_file(Store(), tmp_path / "x.unknown")
    f = tmp_path / "e.nt"
    f.write_text("", encoding="utf-8")
    store = Store()
    rep = load_file(store, f, graph="http://empty")
    assert rep.triples == 0 and len(store.snapshot().named) == 1


def test_invalid_utf8_line():
    store = Store()
    data = b'<http://a> <http://b> "ok" .\n<http://a> <http://b> "\xff" .\n'
    with pytest.raises(LoadError) as ei:
        load_data(store, data, "application/n-triples")
    assert ei.value.line == 2
    rep = load_data(store, data, "application/n-triples", lenient=True)
    assert rep.triples == 1 and rep.skipped == 1


def test_progress_bar(tmp_path, capsys):
    f = tmp_path / "d.nt"
    f.write_text("<http://a> <http://b> <http://c> .\n", encoding="utf-8")
    rep = load_file(Store(), f, progress=True)
    assert rep.triples == 1


def test_lenient_does_not_intern_bad_terms():
    store = Store()
    data = '<http://a> <http://b> <http://c> .\n"bad" <http://b> <http://c> .\n\ufeff'
    rep = load_data(store, "\ufeff" + data, "application/n-triples", lenient=True)
    assert rep.triples == 1 and rep.skipped == 2
    assert store.dictionary.lookup('"bad"') == -1


def test_corrupt_gzip(tmp_path):
    f = tmp_path / "bad.nt.gz"
    f.write_bytes(gzip.compress(b"<http://a> <http://b> <http://c> .\n" * 100)[:-30])
    with pytest.raises(LoadError) as ei:
        load_file(Store(), f)
    assert ei.value.source == "bad.nt.gz"


def test_truncated_gzip_payload_is_a_load_error():
    """A body that starts like gzip but is cut off is bad input, not a crash."""
    store = Store(shards=1)
    with pytest.raises(LoadError, match="gzip"):
        load_data(store, b"\x1f\x8b\x08garbage", "application/n-triples")
    assert store.snapshot().default.n_triples == 0


@pytest.mark.parametrize("media_type,data", [
    ("text/turtle", '<http://a> <http://b> "\\uD800" .'),
    ("text/turtle", '<http://a> <http://b> "x\\uDFFFy"@en .'),
    ("application/trig", '<http://g> { <http://a> <http://b> "\\uDC00" . }'),
])
def test_surrogate_escapes_are_load_errors(media_type, data):
    from engine.database import Database
    from engine.errors import LoadError

    db = Database(shards=1)
    with pytest.raises(LoadError, match="surrogate|not a valid unicode"):
        db.graph_put(None, data, media_type)
    assert db.store.snapshot().default.n_triples == 0
