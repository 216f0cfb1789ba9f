import os

import numpy as np

from engine.kv.persist import MANIFEST
from engine.kv.store import Changes, Store


def rows(*ts):
    return np.array(ts, dtype=np.int64).reshape(-1, 3)


def state(store):
    snap = store.snapshot()
    d = store.dictionary

    def keys(g):
        s, p, o = g.scan_all()
        return {(d.key(a), d.key(b), d.key(c)) for a, b, c in zip(s.tolist(), p.tolist(), o.tolist(), strict=True)}

    return snap.sn, keys(snap.default), {d.key(g): keys(gi) for g, gi in snap.named.items()}


def test_write_reopen_same_answers(tmp_path):
    store = Store(shards=4, data_dir=str(tmp_path))
    d = store.dictionary
    ids = d.encode(["<a>", "<p>", '"1"^^<http://www.w3.org/2001/XMLSchema#integer>', "<g>", "<e>", "_:b"])
    a, p, one, g, e, b = ids.tolist()
    store.commit(Changes(add={None: rows((a, p, one), (b, p, a)), g: rows((a, p, a))}))
    store.commit(Changes(create={e}))
    store.commit(Changes(remove={None: rows((b, p, a))}))
    before = state(store)
    re = Store(shards=1, data_dir=str(tmp_path))
    assert state(re) == before
    assert re.n_shards == 4
    assert re.dictionary.numeric(np.array([one]))[0] == 1.0
    assert re.dictionary.lookup('"1"^^<http://www.w3.org/2001/XMLSchema#integer>') == one
    # keep writing after reopen (dictionary grows beyond the persisted part)
    nid = re.dictionary.encode(["<new>"])[0]
    re.commit(Changes(add={None: rows((nid, p, nid))}))
    after = state(re)
    assert Store(data_dir=str(tmp_path)).snapshot().sn == after[0]
    assert state(Store(data_dir=str(tmp_path))) == after
    # graph expand answers agree
    snap = Store(data_dir=str(tmp_path)).snapshot()
    from engine.kv.graph import OUT

    r, nb = snap.default.expand(p, OUT, np.array([a, nid]))
    assert sorted(zip(r.tolist(), nb.tolist(), strict=True)) == [(0, one), (1, nid)]


def test_crash_before_manifest_switch_keeps_old_state(tmp_path, monkeypatch):
    store = Store(shards=2, data_dir=str(tmp_path))
    ids = store.dictionary.encode(["<a>", "<p>", "<b>"])
    a, p, b = ids.tolist()
    store.commit(Changes(add={None: rows((a, p, b))}))
    before = state(store)
    files_before = set(os.listdir(tmp_path))

    def boom(*args, **kwargs):
        raise OSError("simulated crash")

    monkeypatch.setattr(os, "replace", boom)
    c = store.dictionary.encode(["<c>"])[0]
    try:
        store.commit(Changes(add={None: rows((c, p, c))}))
    except OSError:
        pass
    monkeypatch.undo()
    assert store.snapshot().sn == before[0]  # not published
    assert set(os.listdir(tmp_path)) - files_before  # segment files were written
    re = Store(data_dir=str(tmp_path))
    assert state(re) == before
    assert set(os.listdir(tmp_path)) == files_before  # orphans collected
    assert re.dictionary.lookup("<c>") == -1


def test_unreferenced_files_deleted(tmp_path):
    store = Store(shards=1, data_dir=str(tmp_path))
    ids = store.dictionary.encode(["<a>", "<p>", "<q>"])
    a, p, q = ids.tolist()
    store.commit(Changes(add={None: rows((a, p, a))}))
    store.commit(Changes(add={None: rows((a, q, a))}))
    store.commit(Changes(remove={None: rows((a, p, a))}))
    packs = [f for f in os.listdir(tmp_path) if f.startswith("pack-")]
    assert len(packs) == 1  # only the pack holding predicate q is still referenced
    assert os.path.exists(tmp_path / MANIFEST)
    assert not os.path.exists(tmp_path / (MANIFEST + ".tmp"))


def test_many_commits_compaction(tmp_path, monkeypatch):
    from engine.kv import persist

    monkeypatch.setattr(persist, "_MAX_DICT_CHUNKS", 4)
    store = Store(shards=2, data_dir=str(tmp_path))
    p = store.dictionary.encode(["<p>"])[0]
    for i in range(11):
        a = store.dictionary.encode([f"<s{i}>"])[0]
        store.commit(Changes(add={None: rows((a, p, a))}))
        if i == 5:
            store = Store(data_dir=str(tmp_path))  # reopen in the middle
    before = state(store)
    re = Store(data_dir=str(tmp_path))
    assert state(re) == before
    assert [re.dictionary.lookup(f"<s{i}>") for i in range(11)] == list(range(1, 12))
    assert len(os.listdir(tmp_path)) <= 1 + 5 * 4 + 11


def test_loader_into_persistent_store(tmp_path):
    from engine.io.ingest import load_data

    d = str(tmp_path / "db")
    store = Store(shards=4, data_dir=d)
    load_data(store, '<http://a> <http://b> "1"^^<http://www.w3.org/2001/XMLSchema#int> .\n'
              "<http://a> <http://b> _:x <http://g> .\n", "application/n-quads")
    before = state(store)
    assert state(Store(data_dir=d)) == before
