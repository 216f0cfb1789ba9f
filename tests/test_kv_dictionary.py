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
