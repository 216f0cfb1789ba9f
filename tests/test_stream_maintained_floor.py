"""The maintained instant's floor (wave 2l): the one-step path's checks made cheaper must
decide as before.

- :meth:`InstantEvaluator.maintained_due` reads its fixed conditions once
  (:meth:`InstantEvaluator._due_static`): at every call of a real run (a StreamManager fed by
  ``ingest_ndjson`` / ``heartbeat``, random queries and streams, jumps, commits, a state
  dropped) its answer equals the formula it replaces, evaluated on the same state.
- :meth:`Maintained.instant` counts its answers inline: the cost guard still checks every
  :attr:`Maintained.GUARD_EVERY` answers.
The events themselves are compared byte for byte with the path the one-step shortcut
replaces by ``tests/test_stream_maintained_instant.py``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.stream import maintained
from tests.test_stream_maintained_instant import _DUE, _Q, _compare, _run, _steady, periods, triple
from tests.test_stream_tiny_gen import NODES, PREDS, TERMS, queries


def _reference_due(ev, state, t, last, alone) -> bool:
    """``maintained_due`` as it was before wave 2l (every condition read at every call)."""
    mt = ev._maint
    if mt is None or not alone or last != t or ev._ok != state[0] or mt.rows_mode:
        return False
    rel = ev._rel
    return bool(rel is not None and rel[0] and rel[1] is not None and mt.state is not None and mt._skip == 0
                and not mt._probe and ev._maintained_ok())


class _DueSpy:
    """Wraps the real ``maintained_due``: each answer compared with :func:`_reference_due`."""

    def __init__(self):
        self.calls = self.due = 0
        self.bad: list = []

    def __call__(self, ev, state, t, last, alone):
        got = _DUE(ev, state, t, last, alone)
        want = _reference_due(ev, state, t, last, alone)
        self.calls += 1
        self.due += bool(got)
        if bool(got) != want:
            self.bad.append((t, last, alone, got, want))
        return got


SPIED = [0, 0]   # (calls, answered "due") over the property test's examples


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=periods, jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=4, max_size=4),
       commit=st.none() | st.tuples(st.integers(1, 6), st.lists(triple, min_size=1, max_size=2)),
       guard=st.booleans())
def test_maintained_due_decides_as_the_formula_it_replaces(q, per, jumps, commit, guard, monkeypatch):
    if guard:   # the cost guard's probes (the state kept, the instant handed over) every few answers
        monkeypatch.setattr(maintained.Maintained, "GUARD_EVERY", 2)
        monkeypatch.setattr(maintained.Maintained, "GUARD_REFRESH", 2)
    spy = _DueSpy()
    # (_run sets maintained_due itself for "fast", from its module's _DUE: the spy goes in there)
    import tests.test_stream_maintained_instant as T  # noqa: PLC0415

    monkeypatch.setattr(T, "_DUE", lambda *a: spy(*a))
    _run(q, per, jumps, commit, "fast", monkeypatch)
    assert not spy.bad, (q, spy.bad)
    SPIED[0] += spy.calls
    SPIED[1] += spy.due


def test_the_due_property_test_saw_both_answers():
    assert SPIED[0] > SPIED[1] > 0, SPIED


def test_maintained_due_with_probes_and_a_back_off(monkeypatch):
    """Deterministic: the guard probing every other answer, then a state dropped (a back-off:
    ``_skip``), each answer of ``maintained_due`` as the formula's, both answers seen."""
    import tests.test_stream_maintained_instant as T  # noqa: PLC0415

    spy = _DueSpy()
    monkeypatch.setattr(T, "_DUE", lambda *a: spy(*a))
    monkeypatch.setattr(maintained.Maintained, "GUARD_EVERY", 2)
    monkeypatch.setattr(maintained.Maintained, "GUARD_REFRESH", 2)
    _run(_Q, _steady(14), [1], None, "fast", monkeypatch)
    monkeypatch.setattr(maintained, "MAX_ROWS", 1)
    _run(_Q, _steady(14), [1], None, "fast", monkeypatch)
    assert not spy.bad, spy.bad
    assert spy.calls > spy.due > 0


def test_due_static_is_cached_only_once_known(monkeypatch):
    """Before the relevance check was made (``_rel`` None) nothing is cached; a query whose
    state writes rows (ISTREAM) is never due; an RSTREAM one caches its state."""
    seen = {}

    def spy(ev, state, t, last, alone):
        before = ev._mdue
        got = _DUE(ev, state, t, last, alone)
        seen.setdefault(ev.mode, []).append((before, ev._rel is not None, ev._mdue, got))
        return got

    import tests.test_stream_maintained_instant as T  # noqa: PLC0415

    monkeypatch.setattr(T, "_DUE", spy)
    per = _steady(10)
    _run(_Q, per, [1], None, "fast", monkeypatch)
    _run(_Q, per, [1], None, "fast", monkeypatch, "ISTREAM")
    r = seen["RSTREAM"]
    assert any(got for *_, got in r)
    for before, known, after, got in r:
        assert after is None or after is not False   # an RSTREAM maintained query: never "never"
        assert before is None or after is before      # once known, kept
        if got:
            assert known and after is not None and after is not False
    assert all(after is False and not got for _, _, after, got in seen["ISTREAM"]), seen["ISTREAM"]


def test_the_guard_checks_every_guard_every_answers(monkeypatch):
    """The inline count: the cost guard's check runs once per GUARD_EVERY answers, whichever
    path (one-step, the whole event kept, the body joined) answered."""
    monkeypatch.setattr(maintained.Maintained, "GUARD_EVERY", 3)
    checks = [0]
    guard = maintained.Maintained._guard

    def spy(self):
        checks[0] += 1
        return guard(self)

    monkeypatch.setattr(maintained.Maintained, "_guard", spy)
    a0 = maintained.answered_total()
    _, fast, answered = _run(_Q, _steady(16), [1], None, "fast", monkeypatch)
    assert fast > 6 and answered == maintained.answered_total() - a0
    assert checks[0] == answered // 3, (checks[0], answered)


def test_events_equal_with_the_guard_checking_often(monkeypatch):
    """The guard's probes (an instant handed to the ordinary path) every few answers: the
    one-step events still equal the general path's byte for byte."""
    monkeypatch.setattr(maintained.Maintained, "GUARD_EVERY", 2)
    monkeypatch.setattr(maintained.Maintained, "GUARD_REFRESH", 2)
    assert _compare(_Q, _steady(14), [1], None, monkeypatch) > 0


def _sparse(n: int) -> list:
    """Joining triples every fifth period only: in between, triples leave the window (RANGE
    3s) with no element arriving for the next instant."""
    return [[(10, [(NODES[k % len(NODES)], PREDS[1], TERMS[k % len(TERMS)]),
                   (NODES[k % len(NODES)], PREDS[2], TERMS[(k + 3) % len(TERMS)])])] if k % 5 == 0 else []
            for k in range(n)]


def test_advance_writes_a_few_rows_body_ahead(monkeypatch):
    """Rows that change only by triples leaving (no element for the next instant): the body
    is written by ``advance`` after the event (counted), and the events equal the general
    path's byte for byte and the rows without maintenance; with READY_AHEAD -1 not written
    there (the instant writes it), the same events."""
    r0 = maintained._READY_AHEAD[0]
    n = _compare(_Q, _sparse(15), [1], None, monkeypatch)
    ahead = maintained._READY_AHEAD[0] - r0
    assert n > 5 and ahead >= 2, (n, ahead)
    fast, _, _ = _run(_Q, _sparse(15), [1], None, "fast", monkeypatch)
    monkeypatch.setattr(maintained, "READY_AHEAD", -1)   # (0 still writes an empty body)
    r0 = maintained._READY_AHEAD[0]
    late, _, _ = _run(_Q, _sparse(15), [1], None, "fast", monkeypatch)
    assert maintained._READY_AHEAD[0] == r0
    assert fast == late


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=st.lists(st.lists(st.tuples(st.integers(1, 999), st.lists(triple, min_size=1, max_size=4)),
                                          max_size=1), min_size=4, max_size=12))
def test_bodies_written_ahead_on_sparse_streams(q, per, monkeypatch):
    """Random queries over streams with many empty periods (rows changed by expiry alone):
    the one-step events equal the general path's byte for byte, the rows those without
    maintenance (``_compare``)."""
    _compare(q, per, [1], None, monkeypatch)


def test_instant_ab_reads_a_trees_methods():
    """bench.instant_ab's extraction of a base tree's methods: the same source as the
    class's own (this tree as its own base), None for a method that is not there."""
    import inspect  # noqa: PLC0415
    import pathlib  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    from bench.instant_ab import SPEC, method_source  # noqa: PLC0415

    root = pathlib.Path(maintained.__file__).parent
    for mod, f, cls, name in SPEC:
        owner = getattr(__import__(mod, fromlist=[cls]), cls)
        got = method_source(str(root / f), cls, name)
        want = textwrap.dedent(inspect.getsource(owner.__dict__[name]))
        assert got.rstrip() == want.rstrip(), (cls, name)
    assert method_source(str(root / "maintained.py"), "Maintained", "no_such_method") is None
