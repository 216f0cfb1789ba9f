"""Small answers joined from cached rendered terms (engine/small_answers.py) are
byte-identical to the general writers' (engine/exec/serialize.py), for random
small results: unbound cells, blank nodes, IRIs and literals with quotes,
escapes, newlines, language tags, datatypes, repeated terms."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import small_answers
from engine.exec import serialize as ser
from engine.exec.result import QueryResult
from engine.terms import literal_key

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
TERMS = st.one_of(
    st.builds(lambda s: "<http://e/" + "".join(c for c in s if c not in '<>"{}|^`\\ \n') + ">", _text),
    st.builds(lambda s: "_:b" + "".join(c for c in s if c.isalnum() and c.isascii()), _text),
    st.builds(literal_key, _text),
    st.builds(lambda s, lang: literal_key(s, lang=lang), _text, st.sampled_from(["en", "de-CH"])),
    st.builds(lambda s, dt: literal_key(s, dt), _text,
              st.sampled_from(["http://www.w3.org/2001/XMLSchema#integer", "http://e/dt"])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TERMS, min_size=1, max_size=12, unique=True), st.data())
def test_small_answers_equal_the_writers(keys, data):
    table = ser.KeyTable(keys)
    nv = data.draw(st.integers(1, 4))
    n = data.draw(st.integers(0, 6))
    ids = st.integers(-1, len(keys) - 1)
    cols = [np.array(data.draw(st.lists(ids, min_size=n, max_size=n)), dtype=np.int64) for _ in range(nv)]
    names = [f"v{i}" for i in range(nv)]
    res = QueryResult(form="SELECT", terms=table, vars=names, columns=cols, n_rows=n)
    frags = small_answers.TermFragments()
    got = small_answers.select_json(res, None, frags)
    assert got == ser.serialize(res, "application/sparql-results+json")
    assert small_answers.select_json(res, None, frags) == got  # from the kept fragments
    trip = np.array(data.draw(st.lists(st.tuples(*[st.integers(0, len(keys) - 1)] * 3), max_size=6)),
                    dtype=np.int64).reshape(-1, 3)
    g = QueryResult(form="CONSTRUCT", terms=table, triples=trip)
    assert small_answers.graph_ntriples(g, None, frags) == ser.serialize(g, "application/n-triples")


@settings(max_examples=200, deadline=None)
@given(st.lists(TERMS, min_size=1, max_size=12, unique=True), st.data())
def test_small_select_lists_equal_numpy_columns(keys, data):
    """A SELECT answer kept as Python sequences (SmallSelect, the lane's tuple-at-a-time
    answers) renders the same JSON as its numpy QueryResult, and result() is that."""
    table = ser.KeyTable(keys)
    nv = data.draw(st.integers(1, 4))
    n = data.draw(st.integers(0, 6))
    ids = st.integers(-1, len(keys) - 1)
    cols = [tuple(data.draw(st.lists(ids, min_size=n, max_size=n))) for _ in range(nv)]
    names = tuple(f"v{i}" for i in range(nv))
    small = small_answers.SmallSelect(names, cols, table, n)
    res = small.result()
    assert len(small) == len(res) == n
    assert [c.tolist() for c in res.columns] == [list(c) for c in cols] and res.vars == list(names)
    frags = small_answers.TermFragments()
    assert small_answers.select_json(small, None, frags) == ser.serialize(res, "application/sparql-results+json")
    assert small_answers.graph_ntriples(small, None, frags) is None


def test_an_ask_answer_is_the_writers_constant():
    for b in (False, True):
        res = QueryResult(form="ASK", terms=ser.KeyTable([]), boolean=b)
        assert small_answers.select_json(res, None) == ser.serialize(res, "application/sparql-results+json")


def test_a_few_store_keys_one_by_one_are_the_term_tables():
    """graph_writers.store_keys: a few store ids one by one from the dictionary, anything else
    (many ids, unbound, computed terms) by the term table: the same keys."""
    from engine.database import Database
    from engine.exec.context import LOCAL_BASE
    from engine.exec.evaluate import QueryContext
    from engine.exec.graph_writers import store_keys

    db = Database(shards=1)
    db.load_data("".join(f'<http://e/s{i}> <http://e/p> "v\\"{i}"@en .\n' for i in range(20)).encode(),
                 "application/n-triples")
    ctx = QueryContext(db.store.snapshot())
    for ids in ([0], [3, 1, 2], list(range(9)), list(range(30))):
        assert store_keys(ctx, ids) == ctx.keys(np.array(ids, dtype=np.int64))
    local = int(ctx.intern(['"not in the store"'])[0])
    assert local >= LOCAL_BASE and store_keys(ctx, [0, local]) == ['<http://e/s0>', '"not in the store"']
    table = ser.KeyTable(["<http://e/a>", '"b"'])
    assert store_keys(table, [1, 0]) == ['"b"', "<http://e/a>"]


def test_full_fragment_tables_restart(monkeypatch):
    monkeypatch.setattr(small_answers, "MAX_TERMS", 3)
    table = ser.KeyTable([f"<http://e/{i}>" for i in range(10)])
    frags = small_answers.TermFragments()
    g = QueryResult(form="CONSTRUCT", terms=table, triples=np.array([[0, 1, 2], [3, 4, 5]], dtype=np.int64))
    want = ser.serialize(g, "application/n-triples")
    assert small_answers.graph_ntriples(g, None, frags) == want
    first = frags.tables(table)[1]
    assert small_answers.graph_ntriples(g, None, frags) == want
    assert frags.tables(table)[1] is not first and len(frags.tables(table)[1]) <= 6


def test_kept_fragments_do_not_keep_a_dropped_store_alive():
    """The fragments kept by the lane's writers hold their store dictionary weakly: a
    database that is closed and dropped is freed although its terms were the last ones
    rendered (its answers rendered through the module's shared tables)."""
    import gc
    import weakref

    from engine.database import Database

    db = Database()
    db.update('INSERT DATA { <http://x/a> <http://x/p> "v" , _:b . _:b <http://x/q> <http://x/c> }')
    sel = db.query("SELECT ?p ?o WHERE { <http://x/a> ?p ?o }")
    assert small_answers.select_json(sel) == ser.serialize(sel, "application/sparql-results+json")
    desc = db.query("DESCRIBE <http://x/a>")
    assert small_answers.graph_ntriples(desc) == ser.serialize(desc, "application/n-triples")
    ref = weakref.ref(db.store.dictionary)
    db.close()
    del db, sel, desc
    gc.collect()
    assert ref() is None
    # (the shared tables still answer for the next store: new tables for its dictionary)
    db2 = Database()
    db2.update("INSERT DATA { <http://x/z> <http://x/p> <http://x/y> }")
    res = db2.query("SELECT ?o WHERE { <http://x/z> ?p ?o }")
    assert small_answers.select_json(res) == ser.serialize(res, "application/sparql-results+json")
