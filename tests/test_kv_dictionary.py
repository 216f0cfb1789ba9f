import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv.dictionary import Dictionary, hash_batch, hash_key
from engine.terms import XSD

INT = "^^<" + XSD + "integer>"


def test_encode_dense_and_dedupe():
    d = Dictionary()
    ids = d.encode(["<a>", "<b>", "<a>", '"x"'])
    assert ids.tolist() == [0, 1, 0, 2]
    assert len(d) == 3
    assert d.encode(pa.array(["<b>", "<c>"])).tolist() == [1, 3]
    assert d.encode(["<c>"]).tolist() == [3]
    assert d.encode([]).tolist() == []


def test_lookup_and_keys():
    d = Dictionary()
    keys = ["<http://ex.org/a>", "_:b1", '"héllo"@en', '"01"' + INT, '"1"' + INT]
    ids = d.encode(keys)
    assert [d.lookup(k) for k in keys] == ids.tolist()
    assert d.lookup("<nope>") == -1
    assert d.lookup_many(keys + ["<nope>"]).tolist() == ids.tolist() + [-1]
    assert d.keys(ids) == keys
    assert d.keys(np.array(list(ids) * 5)) == keys * 5
    assert d.key(int(ids[2])) == '"héllo"@en'
    assert ids[3] != ids[4]  # lexical forms kept exactly


def test_kinds():
    d = Dictionary()
    ids = d.encode(["<a>", "_:b", '"c"', '"d"@en'])
    assert d.kinds(ids).tolist() == [0, 1, 2, 2]
    assert d.kinds(np.array([-1, 1 << 40])).tolist() == [-1, -1]


def test_numeric():
    d = Dictionary()
    keys = [
        '"01"' + INT,
        '"abc"' + INT,
        '"-1"^^<' + XSD + 'positiveInteger>',
        '"5"^^<' + XSD + 'positiveInteger>',
        '"300"^^<' + XSD + 'byte>',
        '"1.5"^^<' + XSD + 'decimal>',
        '"1e3"^^<' + XSD + 'double>',
        '"INF"^^<' + XSD + 'float>',
        '"+7"^^<' + XSD + 'int>',
        '"7"',
        "<http://x>",
        '"2020-01-01"^^<' + XSD + 'date>',
        '"1.5"^^<' + XSD + 'integer>',
    ]
    v = d.numeric(d.encode(keys))
    exp = [1, np.nan, np.nan, 5, np.nan, 1.5, 1000, np.inf, 7, np.nan, np.nan, np.nan, np.nan]
    np.testing.assert_array_equal(v, np.array(exp, dtype=float))
    assert np.isnan(d.numeric(np.array([-1]))[0])


def test_hash_batch_matches_single():
    keys = ["", "a", "<http://x>", "é" * 100, "z" * 5000]
    arr = pa.array(keys, pa.large_string())
    data = np.frombuffer(arr.buffers()[2], np.uint8)
    offs = np.frombuffer(arr.buffers()[1], np.int64)[: len(keys) + 1]
    assert hash_batch(data, offs).tolist() == [hash_key(k) for k in keys]


def test_bulk_grow():
    d = Dictionary()
    keys = [f"<http://ex.org/{i}>" for i in range(50_000)]
    ids = d.encode(keys)
    assert ids.tolist() == list(range(50_000))
    more = [f'"{i}"' for i in range(30_000)] + keys[:10]
    ids2 = d.encode(more)
    assert ids2[-10:].tolist() == list(range(10))
    assert d.keys(ids2[:3]) == more[:3]
    assert d.lookup_many(keys[::997]).tolist() == list(range(0, 50_000, 997))


key_st = st.one_of(
    st.text(min_size=0, max_size=12).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    st.text(alphabet="abcxyz019/:.", min_size=1, max_size=10).map(lambda s: "<" + s + ">"),
    st.text(alphabet="abc012", min_size=1, max_size=6).map(lambda s: "_:" + s),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(key_st, max_size=30), min_size=1, max_size=5))
def test_roundtrip_property(batches):
    d = Dictionary()
    model: dict[str, int] = {}
    for batch in batches:
        ids = d.encode(batch)
        for k, i in zip(batch, ids.tolist(), strict=True):
            if k in model:
                assert model[k] == i
            else:
                model[k] = i
    assert sorted(model.values()) == list(range(len(model)))
    assert len(d) == len(model)
    for k, i in model.items():
        assert d.lookup(k) == i
        assert d.key(i) == k
    ks = list(model)
    assert d.lookup_many(ks).tolist() == [model[k] for k in ks]
    assert d.keys(np.array([model[k] for k in ks], dtype=np.int64)) == ks


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.text(alphabet="abcdé<>\"_:1", min_size=1, max_size=6), min_size=1, max_size=40),
                        min_size=1, max_size=25),
       recent_max=st.sampled_from([1, 3, 8, 64]))
def test_recent_index_and_merges(batches, recent_max):
    """New keys go to the small recent index and are merged into the main one past its bound:
    every key keeps its id through encode / lookup / lookup_many whichever index holds it, the
    merged view is sorted and whole, and a dictionary rebuilt from it finds every key."""
    import engine.kv.dictionary as dm
    old = dm._RECENT_MAX
    dm._RECENT_MAX = recent_max
    try:
        d = Dictionary()
        model: dict[str, int] = {}
        for b in batches:
            ids = d.encode(b)
            for k, i in zip(b, ids.tolist(), strict=True):
                assert model.setdefault(k, i) == i
            assert [d.lookup(k) for k in model] == list(model.values())
            assert d.lookup_many(list(model)).tolist() == list(model.values())
            assert d.encode(list(model)).tolist() == list(model.values())   # nothing new
        assert len(d) == len(model)
        raw = d.raw_arrays()
        assert np.all(np.diff(raw["hashes"].astype(np.uint64)) >= 0) and len(raw["hashes"]) == len(model)
        assert sorted(raw["hash_ids"].tolist()) == list(range(len(model)))
        e = Dictionary.from_arrays(raw["blob"], raw["offsets"], raw["numeric"], raw["hashes"], raw["hash_ids"])
        assert e.lookup_many(list(model)).tolist() == list(model.values())
        if sum(map(len, batches)) > 4 * recent_max and len(model) > 2 * recent_max + 2:
            assert len(d._index[0]) > 0   # merged at least once
    finally:
        dm._RECENT_MAX = old


def test_append_copies_the_recent_index_only():
    """On a dictionary whose main index is large, appending one key leaves the main index's
    arrays as they were (no copy of the whole index per append)."""
    d = Dictionary()
    d.encode([f"<http://example.org/k{i}>" for i in range(5000)])
    main_h = d._index[0]
    d.encode(["<http://example.org/new>"])
    assert d._index[0] is main_h and len(d._index[2]) == 1
    assert d.lookup("<http://example.org/new>") == 5000 and d.lookup("<http://example.org/k7>") == 7
