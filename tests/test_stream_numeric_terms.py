"""Computed numbers' terms (:class:`~engine.stream.tiny_ops.NumericTerms`) with the value filter
(:class:`~engine.stream.tiny_ops.ValueFilter`): a key whose value no term of the dictionary has
is taken as absent without a look-up. Whatever the dictionary holds and receives between
calls (equal values under other keys, -0.0 and 0.0, NaN, huge integers, the very key), every id
is the one a look-up gives: the store's id when the dictionary holds the key, else a query-local
id of that key. Small filters (a few bits: every value collides) and the default one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.exec.context import LOCAL_BASE
from engine.exec.evaluate import QueryContext
from engine.exec.result import UNBOUND
from engine.stream import tiny_ops
from engine.stream.tiny_ops import NumericTerms, ValueFilter, _num_item

XSD = "http://www.w3.org/2001/XMLSchema#"
EX = "http://ex.org/"

_VALUES = [0, 1, 2, 3, 7, -4, 10**30, 0.0, -0.0, 0.5, 2.5, 3.0, -1.25, 1e300, float("nan"), float("inf")]


def _stored_form(v) -> str:
    """A literal the store may hold with value ``v``: the computed key itself, or another
    lexical form / datatype with the same value."""
    if isinstance(v, int):
        return f'"{v}"^^<{XSD}integer>'
    return _num_item(v)[0]


def _other_form(v) -> str:
    if isinstance(v, int):
        return f'"{v}.0"^^<{XSD}decimal>'
    if v != v:
        return f'"NaN"^^<{XSD}double>'
    if v in (float("inf"), float("-inf")):
        return f'"{"INF" if v > 0 else "-INF"}"^^<{XSD}double>'
    return f'"{repr(v)}"^^<{XSD}decimal>' if abs(v) < 1e20 else f'"{v!r}"^^<{XSD}float>'


@pytest.fixture
def db():
    d = Database()
    d.load_data(f'<{EX}a> <{EX}p> "x" .\n'.encode(), "application/n-triples")
    yield d
    d.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_numeric_terms_with_value_filter_equal_lookups(db, data, monkeypatch):
    monkeypatch.setattr(ValueFilter, "bits_log", data.draw(st.sampled_from([3, 6, 23])))
    dic = db.store.dictionary
    # what the store holds from the start: values under their computed key or another form
    first = data.draw(st.lists(st.tuples(st.sampled_from(_VALUES), st.booleans()), max_size=6))
    keys = [_stored_form(v) if same else _other_form(v) for v, same in first]
    if data.draw(st.booleans()):   # more than a few terms at once: the filter's vectorized add
        keys += [f'"{k}"^^<{XSD}integer>' for k in range(100, 180)]
    if keys:
        dic.encode(list(dict.fromkeys(keys)))
    terms = NumericTerms(dic)
    for _ in range(data.draw(st.integers(1, 5))):
        ctx = QueryContext(db.store.snapshot())
        vals = data.draw(st.lists(st.one_of(st.none(), st.sampled_from(_VALUES)), min_size=1, max_size=8))
        items = [None if v is None else _num_item(v) for v in vals]
        got = terms.ids(items, ctx)
        for v, item, i in zip(vals, items, got, strict=True):
            if v is None:
                assert i == UNBOUND
                continue
            j = int(dic.lookup(item[0]))
            if j >= 0:
                assert i == j, (v, item)
            else:
                assert i >= LOCAL_BASE and ctx.keys(np.array([i]))[0] == item[0], (v, item)
        # the stream interns more terms between instants: equal values, the keys themselves
        more = data.draw(st.lists(st.tuples(st.sampled_from(_VALUES), st.booleans()), max_size=4))
        add = [_stored_form(v) if same else _other_form(v) for v, same in more]
        add.append(f"<{EX}n{data.draw(st.integers(0, 10**6))}>")
        if data.draw(st.integers(0, 3)) == 0:
            k0 = data.draw(st.integers(0, 10**6))
            add += [f'"{k}"^^<{XSD}integer>' for k in range(k0, k0 + 70)] + [_stored_form(v) for v in _VALUES]
        dic.encode(list(dict.fromkeys(add)))


def test_value_filter_decides_absent_values_without_lookup(db, monkeypatch):
    """A value no term has is absent at once (no dictionary look-up); one a term has is looked
    up (a term with the same value under another key leaves the key absent)."""
    dic = db.store.dictionary
    dic.encode([f'"3.0"^^<{XSD}decimal>', f'"7"^^<{XSD}integer>'])
    terms = NumericTerms(dic)
    looked: list[str] = []
    real = dic.lookup

    def counting(key):
        looked.append(key)
        return real(key)

    monkeypatch.setattr(dic, "lookup", counting)   # the dictionary's probes
    ctx = QueryContext(db.store.snapshot())
    got = terms.ids([_num_item(2.5), _num_item(3), _num_item(7), _num_item(-0.0)], ctx)
    assert got[0] >= LOCAL_BASE and got[1] >= LOCAL_BASE and 0 <= got[2] < LOCAL_BASE and got[3] >= LOCAL_BASE
    assert _num_item(2.5)[0] not in looked and _num_item(-0.0)[0] not in looked
    assert _num_item(3)[0] in looked and _num_item(7)[0] in looked   # values the dictionary holds
    assert tiny_ops.ValueFilter().may_hold(1.0) is False


def test_value_filter_build_stops_at_the_deadline(db):
    """Building the filter is checked against the query's deadline: a query past it gets the
    timeout and no half-built filter is kept; the next query builds it and is answered."""
    import time

    from engine.errors import QueryTimeout

    dic = db.store.dictionary
    terms = NumericTerms(dic)
    late = QueryContext(db.store.snapshot(), timeout=1e-6)
    time.sleep(0.01)
    with pytest.raises(QueryTimeout):
        terms.ids([_num_item(2.5)], late)
    assert terms._values is None
    ctx = QueryContext(db.store.snapshot())
    got = terms.ids([_num_item(2.5)], ctx)
    assert got[0] >= LOCAL_BASE and terms._values is not None
