"""The lane's fused steps of wave 2l (helper P): each is taken, and answers what the
step it stands for answers.

* ``server.api.sparql._runner_key``: a runner whose binder writes its one parameter in
  one raw slot reads the text's raw slots by two slice comparisons and a kept
  slot -> key table, not ``RawBinder.value`` + ``norm.slot_key`` per text: the same three
  outcomes (a key, not answered, the next runner) as the binder's loop, for every text.
* ``engine.small_answers._one_format``: the small SELECT writers fill one ``%`` format
  of all the rows' cells: the bytes of one format per row, the same errors.
* ``engine.database._tiny_run``: a plain projection of a tiny SELECT takes the slots'
  columns without ``project_lists``: the columns ``project_lists`` gives.
* ``_BoundJob.answer``: the runner's media type's small writer, looked up once.
"""

from __future__ import annotations

import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import small_answers as sa
from engine.exec.result import UNBOUND
from engine.sparql import normalize as norm
from server.api import sparql

# --------------------------------------------------------------------------- _runner_key

#: raw IRI slots (less the leading '%') a text may carry where the parameter is: absolute
#: IRIs, a relative one (no key: no parameter), one with a space (no IRI reference), one
#: with a quote (no IRI slot)
_PARAMS = [b"3Chttp%3A%2F%2Fex.org%2Fa%3E", b"3Chttp%3A%2F%2Fex.org%2Fb%3E", b"3chttp%3A%2F%2Fex.org%2Fa%3e",
           b"3Curn%3Ax%3E", b"3Crel%2Fx%3E", b"3Chttp%3A%2F%2Fex.org%2Fa%20b%3E", b"3Chttp%3A%2F%2Fex.org%2F%22%3E",
           b"3Chttp%3A%2F%2Fex.org%2Fo%3E", b"3C%3E", None]
#: the fixed slots' raw bytes of the layout, and other values a text may have there
_FIXED = [b"3Chttp%3A%2F%2Fex.org%2Fp%3E", None, b"3Chttp%3A%2F%2Fex.org%2Fq%3E"]
_OTHER_FIXED = [b"3Chttp%3A%2F%2Fex.org%2Fz%3E", None, b"3Chttp%3A%2F%2Fex.org%2Fp%3E"]


def _oracle(binder, tpl, raws):
    """What _run_bound's general loop decides for one runner: its key, None (not
    answered) or False (the next runner tries)."""
    s = binder.value(raws, sparql._unquote_plus, norm._RAW_IRIS, b"%")
    if s is None:
        return False
    if type(s) is tuple:
        return s
    key = norm.slot_key(s)
    return None if key is None or key in tpl.others else key


def _runner(expect, others=frozenset({"<http://ex.org/o>"})):
    tpl = types.SimpleNamespace(others=others)
    return sparql._Runner(tpl, norm.RawBinder(tuple(expect)), "http://h/sparql", None, None, None, "SELECT",
                          "application/sparql-results+json"), tpl


@st.composite
def _layouts_and_texts(draw):
    n = draw(st.integers(1, 3))
    fixed = [draw(st.sampled_from(_FIXED)) for _ in range(n)]
    at = draw(st.lists(st.integers(0, n), min_size=1, max_size=2, unique=True))
    expect = list(fixed)
    for j in sorted(at):
        expect.insert(j, norm._PARAM)
    texts = []
    for _ in range(draw(st.integers(1, 6))):
        v = draw(st.sampled_from(_PARAMS))
        raws = [v if e is norm._PARAM else e for e in expect]
        if draw(st.booleans()):  # another value in one slot (a fixed one, or one of several parameters)
            i = draw(st.integers(0, len(raws) - 1))
            raws[i] = draw(st.sampled_from(_PARAMS + _OTHER_FIXED))
        texts.append(raws)
    return expect, texts


@settings(max_examples=400, deadline=None)
@given(_layouts_and_texts())
def test_runner_key_decides_as_the_binders_loop(case):
    expect, texts = case
    r, tpl = _runner(expect)
    for raws in texts:
        got = sparql._runner_key(r, raws, sparql._URL_READ)
        assert got == _oracle(r.binder, tpl, raws), raws
        assert r.keys[tuple(raws)] == got  # (kept: _run_bound reads it in place)


def test_runner_key_is_taken_for_one_parameter_slot(monkeypatch):
    r, tpl = _runner([_FIXED[0], norm._PARAM, None])
    assert r.one == (1, [_FIXED[0]], [None])
    monkeypatch.setattr(norm.RawBinder, "value", lambda *a: pytest.fail("the binder's loop was used"))
    got = sparql._runner_key(r, [_FIXED[0], _PARAMS[0], None], sparql._URL_READ)
    assert got == "<http://ex.org/a>"
    assert r.keys == {(_FIXED[0], _PARAMS[0], None): "<http://ex.org/a>"}
    # several parameter slots: the binder's loop reads them
    r2, _ = _runner([norm._PARAM, _FIXED[0], norm._PARAM])
    assert r2.one is None
    with pytest.raises(pytest.fail.Exception):
        sparql._runner_key(r2, [_PARAMS[0], _FIXED[0], _PARAMS[0]], sparql._URL_READ)


def test_runner_key_table_is_bounded(monkeypatch):
    monkeypatch.setattr(sparql, "_RUNNER_KEYS_MAX", 4)
    r, _ = _runner([norm._PARAM])
    for i in range(10):
        raw = b"3Chttp%3A%2F%2Fex.org%2Fv" + str(i).encode() + b"%3E"
        assert sparql._runner_key(r, [raw], sparql._URL_READ) == f"<http://ex.org/v{i}>"
        assert len(r.keys) <= 4


# --------------------------------------------------------------------------- _one_format


def _per_row(cols, row, sep, get):
    """The writers' former way: one format per row (the oracle)."""
    if len(cols) == 1:
        return sep.join([row % f for f in map(get, cols[0])])
    return sep.join([row % t for t in zip(*[list(map(get, c)) for c in cols], strict=True)])


_FRAG = st.binary(max_size=12).map(lambda b: b"<" + b + b"%s%%>")  # (fragments may hold '%')


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 4), st.integers(0, 40), st.data())
def test_one_format_writes_the_per_row_bytes(k, n, data):
    ids = st.integers(0, 30)
    cols = [data.draw(st.lists(ids, min_size=n, max_size=n).map(tuple if data.draw(st.booleans()) else list))
            for _ in range(k)]
    frags = {i: data.draw(_FRAG) for i in range(31)}
    row = b"{" + b",".join(b'"v%d":%%s' % j for j in range(k)) + b"}"
    for sep in (b",", b""):
        assert sa._one_format(cols, row, sep, frags.__getitem__) == _per_row(cols, row, sep, frags.__getitem__)
    missing = dict(frags)
    if n:
        del missing[cols[-1][-1]]
        with pytest.raises(KeyError):
            sa._one_format(cols, row, b",", missing.__getitem__)
    if k > 1:  # columns of different lengths: the strict zip's ValueError
        bad = [*cols[:-1], list(cols[-1]) + [0]]
        with pytest.raises(ValueError):
            sa._one_format(bad, row, b",", frags.__getitem__)


@pytest.mark.parametrize("writer", [sa.select_json, sa.select_xml, sa.select_csv, sa.select_tsv])
def test_small_writers_fill_one_format_and_match_the_general_writer(writer, monkeypatch):
    from engine.exec import serialize as ser

    keys = [f"<http://ex.org/t{i}>" for i in range(6)] + ['"a literal with % and ""quotes"""', '"x"@en']
    table = ser.KeyTable(keys)
    cols = [(0, 1, 2, 6, 7), (3, 4, 5, 7, 6), (1, 1, 1, 1, 1)]
    calls = []
    real = sa._one_format
    monkeypatch.setattr(sa, "_one_format", lambda *a: calls.append(1) or real(*a))
    mt = {sa.select_json: "application/sparql-results+json", sa.select_xml: "application/sparql-results+xml",
          sa.select_csv: "text/csv", sa.select_tsv: "text/tab-separated-values"}[writer]
    frags = sa.TermFragments()
    for res in (sa.SmallSelect(("a", "b", "c"), cols, table, 5),
                sa.SmallSelect(("a", "b", "c"), [c[:1] for c in cols], table, 1),  # (one row: C iterators)
                sa.SmallSelect(("a",), cols[:1], table, 5),
                sa.SmallSelect(("a", "b"), [cols[0], (UNBOUND, *cols[1][1:])], table, 5)):
        calls.clear()
        want = ser.serialize(res.result(), mt)
        assert writer(res, None, frags) == want
        assert writer(res, None, frags) == want  # (from the kept fragments)
        if UNBOUND not in res.cols[-1] or writer in (sa.select_csv, sa.select_tsv):
            assert calls, "the one-format writer was not taken"


# --------------------------------------------------------------------------- over HTTP

EX = "http://example.org/"
#: {c}: the parameter; texts of several result formats and projections (a projection in
#: another order than the pattern's slots, a subset, a variable predicate)
_SHAPES = [
    ("SELECT ?n ?o WHERE {{ <{c}> <" + EX + "p> ?o . ?o <" + EX + "q> ?n }} # {k}\n",
     "application/sparql-results+json"),
    ("SELECT ?o WHERE {{ <{c}> <" + EX + "p> ?o . ?o <" + EX + "q> ?n }} # {k}\n", "text/csv"),
    ("SELECT ?p ?o WHERE {{ <{c}> ?p ?o }} # {k}\n", "application/sparql-results+xml"),
    ("SELECT ?s WHERE {{ ?s <" + EX + "r> <{c}> }} # {k}\n", "text/tab-separated-values"),
    ("ASK {{ <{c}> <" + EX + "r> ?o }} # {k}\n", "application/sparql-results+json"),
]


@pytest.fixture(scope="module")
def server():
    from tests.test_lane_repeated_texts import serving

    yield from serving("".join(f"<{EX}s{i}> <{EX}p> <{EX}o{i % 3}> .\n<{EX}s{i}> <{EX}r> <{EX}s{(i + 1) % 5}> .\n"
                               f"<{EX}o{i % 3}> <{EX}q> \"n{i} %\" .\n" for i in range(8)))


@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_runner_steps_are_taken_over_http_and_answer_as_parsed(server, monkeypatch, shape):
    """New texts of one shape (new and absent constants, a constant of the text's own, a
    relative IRI) answered by a runner through the fused steps, byte for byte the parsed
    path's answers; the runner's key table and the plain projection are used."""
    import engine.database as dbm
    from tests.test_lane_repeated_texts import _get
    from tests.test_lane_runners import _general

    text, accept = _SHAPES[shape]
    server.app.state.jindou.lane_runners.clear()  # (this shape's runners only)
    cs = [f"{EX}s{i}" for i in range(10)] + [f"{EX}p", "rel"]
    for i in range(3):  # learned, then a runner bound
        _get(server, text.format(c=f"{EX}s{i}", k=f"warm{shape}-{i}"), accept)
    projected = []
    real_project = dbm.project_lists
    monkeypatch.setattr(dbm, "project_lists", lambda *a: projected.append(1) or real_project(*a))
    got = [_get(server, text.format(c=c, k=f"{shape}-{j}"), accept) for j, c in enumerate(cs)]
    runners = [r for have in server.app.state.jindou.lane_runners.values() for r in have if r.mt]
    assert sum(len(r.keys) for r in runners) >= 8, "the runners' key tables were not read"
    assert not projected  # (the plain projections took the slots' columns)
    monkeypatch.undo()
    _general(monkeypatch)
    want = [_get(server, text.format(c=c, k=f"g{shape}-{j}"), accept) for j, c in enumerate(cs)]
    assert got == want
