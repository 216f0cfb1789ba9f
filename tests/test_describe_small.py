"""DESCRIBE of constants answered tuple at a time (engine/plan/point.py
``describe_small``, its kept kinds ``kinds_kept``) and small graphs written from
kept N-Triples fragments (engine/small_answers.py ``graph_ntriples``): against the
general DESCRIBE and the general writer, on one store written to between answers
(its dictionary grows: kept kinds and fragments must stay right for new ids)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.database as database
from engine import small_answers
from engine.database import Database
from engine.exec import serialize as ser
from engine.exec.result import QueryResult
from engine.plan import point


def _term(i: int, obj: bool) -> str:
    """0-5 IRIs, 6-11 blank nodes, 12-17 literals as objects (IRIs as subjects)."""
    if i >= 12:
        return (f'"l{i}"@en' if i % 2 else f'"{i}"^^<http://www.w3.org/2001/XMLSchema#integer>') if obj \
            else f"<http://x/e{i % 6}>"
    return f"<http://x/e{i}>" if i < 6 else f"_:b{i}"


_triple = st.tuples(st.integers(0, 11), st.integers(0, 4), st.integers(0, 17))
_FORMATS = ("application/n-triples", "text/turtle", "application/rdf+xml", "application/ld+json")


def _nt(triples) -> str:
    return " ".join(f"{_term(s, False)} <http://x/p{p}> {_term(o, True)} ." for s, p, o in triples)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.tuples(st.lists(_triple, min_size=1, max_size=25), st.lists(_triple, max_size=8)),
                       min_size=1, max_size=4),
       resources=st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True))
def test_describe_of_a_growing_store_equals_the_general_describe_and_writer(monkeypatch, writes, resources):
    """After each write (new blank nodes and literals: new dictionary ids whose kinds
    are not kept yet), the tuple-at-a-time DESCRIBE gives the general DESCRIBE's
    triples in its order, and the small N-Triples body (cold, then from kept
    fragments) is the general writer's bytes; every graph format a client may
    Accept writes the same bytes for both answers."""
    db = Database()
    text = "DESCRIBE " + " ".join(f"<http://x/e{r}>" for r in resources)
    real = point.describe_small
    calls: list[bool] = []

    def spy(*a, **kw):
        res = real(*a, **kw)
        calls.append(res is not None)
        return res

    for k, (ins, dels) in enumerate(writes):
        db.update(f"INSERT DATA {{ {_nt(ins)} }}")
        if dels:
            # (DELETE DATA holds no blank nodes: their triples' IRI twins, maybe present)
            db.update(f"DELETE DATA {{ {_nt([(s % 6, p, o if o >= 12 else o % 6) for s, p, o in dels])} }}")
        calls.clear()
        monkeypatch.setattr(database, "describe_small", spy)
        fast = db.query(f"{text} # {k} fast")
        assert calls == [True]
        monkeypatch.setattr(database, "describe_small", lambda *a, **kw: None)
        slow = db.query(f"{text} # {k} slow")
        assert fast.triples.tolist() == slow.triples.tolist()
        general = ser.serialize(slow, "application/n-triples")
        frags = small_answers.TermFragments()
        assert small_answers.graph_ntriples(fast, fragments=frags) == general  # cold: rendered now
        assert small_answers.graph_ntriples(fast, fragments=frags) == general  # hot: kept fragments
        for mt in _FORMATS:
            assert ser.serialize(fast, mt) == ser.serialize(slow, mt), mt


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(-3, 40), max_size=30), again=st.lists(st.integers(0, 40), max_size=30))
def test_kept_kinds_equal_the_dictionary_s(ids, again):
    """Kinds read through the kept table equal the dictionary's, hits and misses
    mixed, in the order asked, repeated ids too; ids not in the dictionary (-1) are
    not kept, so once the dictionary holds them their kind is read."""
    from engine.kv.dictionary import Dictionary

    d = Dictionary()
    keys = [f"<http://x/{i}>" if i % 3 == 0 else f"_:b{i}" if i % 3 == 1 else f'"{i}"' for i in range(30)]
    d.encode(keys)
    assert point.kinds_kept(d, ids) == d.kinds(np.asarray(ids, dtype=np.int64)).tolist()
    d.encode([f'"more{i}"' for i in range(11)])  # ids 30-40 now exist
    assert point.kinds_kept(d, again) == d.kinds(np.asarray(again, dtype=np.int64)).tolist()
    assert point.kinds_kept(d, ids) == d.kinds(np.asarray(ids, dtype=np.int64)).tolist()


def test_graph_ntriples_leaves_computed_terms_and_big_graphs_to_the_general_writer():
    """A graph holding a term outside the store dictionary, or more than MAX_CELLS
    triples, is not written here (None: the general writer answers)."""
    db = Database()
    db.update('INSERT DATA { <http://x/a> <http://x/p> "v" }')
    res = db.query("DESCRIBE <http://x/a>")
    t = res.triples
    assert small_answers.graph_ntriples(res) == ser.serialize(res, "application/n-triples")
    from engine.exec.context import LOCAL_BASE

    computed = QueryResult(form="CONSTRUCT", terms=res.terms, triples=np.array([[t[0, 0], t[0, 1], LOCAL_BASE]]))
    assert small_answers.graph_ntriples(computed, fragments=small_answers.TermFragments()) is None
    big = QueryResult(form="CONSTRUCT", terms=res.terms, triples=np.repeat(t, small_answers.MAX_CELLS + 1, axis=0))
    assert small_answers.graph_ntriples(big) is None


if __name__ == "__main__":
    pytest.main([__file__])


def test_kept_kinds_do_not_keep_a_dropped_dictionary_alive():
    """The kept kinds hold their dictionary weakly: a store that is dropped frees it."""
    import gc
    import weakref

    from engine.kv.dictionary import Dictionary

    d = Dictionary()
    d.encode(["<http://x/a>", "_:b"])
    assert point.kinds_kept(d, [1, 0]) == [1, 0]
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is None
