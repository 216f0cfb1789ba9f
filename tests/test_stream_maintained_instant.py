"""The scheduler's one-step maintained instant (:meth:`Scheduler._step_maintained`,
:meth:`InstantEvaluator.maintained_instant`, :meth:`Maintained._event`) writes exactly the
events of the path it shortcuts.

Through a :class:`StreamManager` fed by ``ingest_ndjson`` / ``heartbeat`` (the ingestion hook,
the worker woken per instant), random queries of the generator's forms over a random stream
are run three ways: the one-step path on, off (``maintained_due`` always False: the relevance
check, the capture and :meth:`InstantEvaluator.run` as before), and maintenance off. The
first two logs must be byte-identical (every event's id, kind and data); the third equal as
rows. The fall-backs are in the streams: jumps (several instants ready at once), a commit to
the stored graph between instants, a state dropped for too many rows.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.database import Database
from engine.stream import continuous, instant_fast, maintained
from engine.stream.continuous import InstantEvaluator
from engine.stream.manager import StreamManager
from tests.test_stream_tiny_gen import EX, NODES, PREDS, STATIC, TERMS, _rows, fill, instants, queries

triple = st.tuples(st.sampled_from(NODES), st.sampled_from(PREDS), st.sampled_from(TERMS))
periods = st.lists(st.lists(st.tuples(st.integers(1, 999), st.lists(triple, min_size=1, max_size=4)),
                            max_size=3), min_size=3, max_size=10)


def _static_lines() -> list[str]:
    return [f"{NODES[i]} {PREDS[j]} {TERMS[(i * 3 + j * 5) % len(TERMS)]} .\n"
            for i in range(len(NODES)) for j in range(len(PREDS)) if (i + j) % 2 == 0]


def _run(q: str, per: list, jumps: list, commit: tuple | None, how: str, monkeypatch,
         mode: str = "RSTREAM", window: str = "[RANGE 3s STEP 1s]") -> tuple[list, int, int]:
    """``q`` over stream ``a`` fed by periods (``jumps[j]`` periods in the j-th POST, then a
    heartbeat: > 1, several instants ready at once); ``commit``: (period, triples) loaded into
    the stored graph before the POST holding that period. ``how``: "one" (the one-step path's
    common case in one function, :mod:`engine.stream.instant_fast`), "fast" (the one-step path,
    ``_step_maintained``), "slow" (maintained, one-step off), "off" (no maintenance, no generated
    code). Returns the query's events
    ``(id, kind, data)``, the instants the one-step path answered and those a state answered."""
    monkeypatch.setattr(InstantEvaluator, "MAINTAINED", how != "off")
    monkeypatch.setattr(InstantEvaluator, "GENERATED", how != "off")
    monkeypatch.setattr(instant_fast, "ENABLED", how == "one")
    if how == "slow":
        monkeypatch.setattr(InstantEvaluator, "maintained_due", lambda *a: False)
    else:
        monkeypatch.setattr(InstantEvaluator, "maintained_due", _DUE)
    db = Database()
    m = StreamManager(db)
    try:
        db.load_data("".join(_static_lines()).encode(), "application/n-triples", graph=STATIC)
        m.register_stream("a", EX + "a")
        m.heartbeat("a", 0)
        text = q.replace(" WHERE", f" FROM <{STATIC}> FROM STREAM <{EX}a> {window} WHERE", 1)
        m.register_query(f"REGISTER {'' if mode == 'RSTREAM' else mode + ' '}QUERY q AS {text}")
        f0, a0 = continuous.maintained_fast_total(), maintained.answered_total()
        k = j = 0
        while k < len(per):
            # ``jumps[j]`` periods in one POST and one heartbeat: as many instants ready at once
            n = jumps[j % len(jumps)]
            lines = [{"s": s, "p": p, "o": o, "t": 1000 * x + dt} for x in range(k, min(k + n, len(per)))
                     for dt, els in sorted(per[x], key=lambda e: e[0]) for s, p, o in els]
            if commit is not None and k <= commit[0] < k + n:
                # (before the POST, the worker idle: every instant the POST makes ready sees it)
                db.load_data("".join(f"{s} {p} {o} .\n" for s, p, o in commit[1]).encode(),
                             "application/n-triples", graph=STATIC)
            if lines:
                assert m.ingest_ndjson("a", b"\n".join(orjson.dumps(x) for x in lines))["rejected"] == 0
            k += n
            j += 1
            m.heartbeat("a", 1000 * k)
            assert m.drain(30)
        events = [(e.id, e.event, bytes(e.data)) for e in m.log("q").since(None, from_t=-1)]
        return events, continuous.maintained_fast_total() - f0, maintained.answered_total() - a0
    finally:
        m.close()
        db.close()


_DUE = InstantEvaluator.maintained_due
SEEN = [0, 0]   # (instants the one-step path answered, events compared)
ONE = [0]       # instants the one-function path (instant_fast) answered itself
ROWS = [0]      # instants a maintained state answered (any mode)


def _compare(q, per, jumps, commit, monkeypatch, mode: str = "RSTREAM", window: str = "[RANGE 3s STEP 1s]") -> int:
    k0 = instant_fast.taken_total()
    one, _, _ = _run(q, per, jumps, commit, "one", monkeypatch, mode, window)
    ONE[0] += instant_fast.taken_total() - k0
    k0 = instant_fast.taken_total()
    fast, nf, na = _run(q, per, jumps, commit, "fast", monkeypatch, mode, window)
    assert instant_fast.taken_total() == k0   # (off: the general functions only)
    assert one == fast, q   # the one-function path: byte for byte the one-step path's
    slow, ns, _ = _run(q, per, jumps, commit, "slow", monkeypatch, mode, window)
    off, _, _ = _run(q, per, jumps, commit, "off", monkeypatch, mode, window)
    ROWS[0] += na
    assert ns == 0
    assert fast == slow, q   # byte for byte: ids, kinds, data
    assert [(i, k) for i, k, _ in fast] == [(i, k) for i, k, _ in off]
    for (i, k, a), (_, _, b) in zip(fast, off, strict=True):
        if k == "result":
            assert _rows(a) == _rows(b), (q, i)
    if mode == "RSTREAM":   # (the one-step path is RSTREAM's)
        SEEN[0] += nf
        SEEN[1] += len(fast)
    return nf


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=periods, jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=4, max_size=4),
       commit=st.none() | st.tuples(st.integers(1, 6), st.lists(triple, min_size=1, max_size=2)))
def test_one_step_instants_equal_the_general_path_byte_for_byte(q, per, jumps, commit, monkeypatch):
    _compare(q, per, jumps, commit, monkeypatch)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), per=periods, jumps=st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=4, max_size=4),
       commit=st.none() | st.tuples(st.integers(1, 6), st.lists(triple, min_size=1, max_size=2)),
       mode=st.sampled_from(["ISTREAM", "DSTREAM"]))
def test_maintained_istream_dstream_equal_the_ordinary_path(q, per, jumps, commit, mode, monkeypatch):
    """I/DSTREAM queries of the maintained forms (their rows from the state, differenced as
    the executor's): the same events as the ordinary path (no generated code, no state)."""
    assume(not q.startswith("ASK"))
    before = ROWS[0]
    _compare(q, per, jumps, commit, monkeypatch, mode)
    MROWS[0] += ROWS[0] - before
    MROWS[1] += 1


MROWS = [0, 0]   # (instants answered by a state in the I/DSTREAM test, its examples)


def test_the_modes_took_the_maintained_path():
    """(How many depends on the examples and on the relevance check's reuse, which goes first:
    the deterministic count is test_maintained_istream_through_the_manager's.)"""
    assert MROWS[1] > 0 and MROWS[0] > 0, MROWS


@pytest.mark.parametrize("mode", ["ISTREAM", "DSTREAM"])
def test_maintained_istream_through_the_manager(mode, monkeypatch):
    """A steady stream (every period brings joining triples): an I/DSTREAM query's instants
    are answered from the state's rows, the same events as the ordinary path's."""
    per = _steady(10)
    on, _, answered = _run(_Q, per, [1], None, "fast", monkeypatch, mode)
    off, _, none = _run(_Q, per, [1], None, "off", monkeypatch, mode)
    assert [(i, k, _rows(a)) for i, k, a in on] == [(i, k, _rows(b)) for i, k, b in off]
    assert any(_rows(a) for _, _, a in on)
    assert none == 0 and answered >= len(per) - 3


def test_the_property_test_took_the_one_step_path():
    assert SEEN[1] > 0 and SEEN[0] > SEEN[1] // 5, SEEN
    assert ONE[0] > SEEN[1] // 10, (ONE, SEEN)   # (instant_fast: held events and bodies)


_Q = (f"SELECT ?x ?z WHERE {{ ?x {PREDS[1]} ?y . ?x {PREDS[2]} ?z }}")


def _steady(n: int) -> list:
    """A period per second, each with two joining triples (new subjects) and a triple beyond."""
    return [[(10, [(NODES[k % len(NODES)], PREDS[1], TERMS[k % len(TERMS)]),
                   (NODES[k % len(NODES)], PREDS[2], TERMS[(k + 3) % len(TERMS)])])] for k in range(n)]


def test_the_one_step_path_is_taken_and_the_whole_event_handed_over(monkeypatch):
    """A steady stream, one instant ready at a time: after the first instants every one is
    answered by the one-step path, most from the event the ingestion wrote whole."""
    written, hand = [], [0]
    event, instant = maintained.Maintained._event, maintained.Maintained.instant

    def spy_event(self, t):   # the whole events the ingestion wrote, of instants it completed
        out = event(self, t)
        written.append(out)
        return out

    def spy_instant(self, *a):   # handed over as written (the same object)
        out = instant(self, *a)
        hand[0] += any(out is w for w in written)
        return out

    monkeypatch.setattr(maintained.Maintained, "_event", spy_event)
    monkeypatch.setattr(maintained.Maintained, "instant", spy_instant)
    per = _steady(12)
    n = _compare(_Q, per, [1], None, monkeypatch)
    assert n >= len(per) - 3
    assert hand[0] >= len(per) - 4   # (the one-step and the slow run's)


def test_a_jump_a_commit_and_a_drop_fall_back(monkeypatch):
    """Several instants ready at once (not the one-step path), a commit (the kept event's
    snapshot is not the instant's: the state is rebuilt), and a state dropped for too many
    rows (the ordinary path answers, the state is rebuilt after a back-off): the events
    still equal the general path's byte for byte and the rows those without maintenance."""
    per = _steady(14)
    n_plain = _compare(_Q, per, [1], None, monkeypatch)
    n_jump = _compare(_Q, per, [1, 3, 1, 1, 2], None, monkeypatch)
    n_commit = _compare(_Q, per, [1], (5, [(NODES[0], PREDS[2], TERMS[1])]), monkeypatch)
    assert 0 < n_jump < n_plain and n_commit > 0
    monkeypatch.setattr(maintained, "MAX_ROWS", 1)
    n_drop = _compare(_Q, per, [1], None, monkeypatch)
    assert n_drop < n_plain


@pytest.mark.parametrize("form", ["ASK", "COUNT"])
def test_other_maintained_forms_take_the_one_step_path(form, monkeypatch):
    q = (f"ASK WHERE {{ ?x {PREDS[1]} ?y . ?x {PREDS[2]} ?z }}" if form == "ASK" else
         f"SELECT ?x (COUNT(?z) AS ?c) WHERE {{ ?x {PREDS[1]} ?y . ?x {PREDS[2]} ?z }} GROUP BY ?x")
    assert _compare(q, _steady(10), [1], None, monkeypatch) >= 6


# ---------------------------------------------------------------- ISTREAM / DSTREAM, generated
from collections import Counter  # noqa: E402

from bench.streams import key_ox  # noqa: E402
from engine.stream import tiny_gen  # noqa: E402
from engine.stream.transient import TransientStore  # noqa: E402
from tests.test_stream_tiny_gen import _evaluator, _oracle, _oxigraph_zero_quotient, static_db  # noqa: E402

MODES = [0, 0]   # (instants the generated code answered, I/DSTREAM instants of generated shapes)


@pytest.fixture(scope="module")
def sdb():
    d = static_db()
    yield d
    d.close()


def _value_twins(db, window) -> bool:
    """Whether two different terms of the data share a comparison key (``"0"^^xsd:integer``
    and ``"0"^^xsd:double``, ``"01"`` and ``"1"``: the keys compare numbers by value, as the
    oracle's canonical forms need). I/DSTREAM tell such terms apart (a solution with the
    one is new after the other), the keys do not: then only the other path is compared."""
    seen: dict = {}
    objs = [o for _, _, o in window]
    objs += [ln.rsplit(" .", 1)[0].split(" ", 2)[2] for ln in db.static_lines if ln.strip()]
    for o in objs:
        if not o.startswith('"'):
            continue
        k = _rows_key(o)
        if seen.setdefault(k, o) != o:
            return True
    return False


def _rows_key(lit: str) -> tuple:
    term = next(iter(ox.parse(f"<x:s> <x:p> {lit} .".encode(), ox.RdfFormat.N_TRIPLES))).object
    return key_ox(term)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), els=st.lists(st.lists(triple, max_size=6), min_size=1, max_size=8),
       rng=st.sampled_from([3000, 1000]), mode=st.sampled_from(["ISTREAM", "DSTREAM"]))
def test_istream_dstream_generated_like_the_other_path_and_pyoxigraph(sdb, q, els, rng, mode):
    """An I/DSTREAM query of the generator's forms: its rows come from the generated code, the
    difference is the ordinary one; every instant equals the path with the generator off, and
    pyoxigraph's rows at the instant less (ISTREAM) or those of the previous instant less the
    instant's (DSTREAM). (ASK is registered as RSTREAM only.)"""
    assume(not q.startswith("ASK"))
    db = sdb
    text = (f"REGISTER {mode} QUERY g AS "
            f"{q.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {rng // 1000}s STEP 1s] WHERE', 1)}")
    store = TransientStore("a", slice_triples=16)
    on = _evaluator(db, text, store, True, rng)
    off = _evaluator(db, text, store, False, rng)
    assert on.mode == mode and off._gen is None
    taus = fill(db, store, els)
    before = tiny_gen.taken_total()
    prev = Counter()
    exact = True
    for t, window in instants(taus, len(els), rng):
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _rows(a) == _rows(b), (q, mode, t)
        exact = exact and not _oxigraph_zero_quotient(db, q, window) and not _value_twins(db, window)
        cur = _oracle(db, q, window)
        if exact:
            assert _rows(a) == (cur - prev if mode == "ISTREAM" else prev - cur), (q, mode, t)
        prev = cur
        if on._gen is not None:
            MODES[1] += 1
    MODES[0] += tiny_gen.taken_total() - before


def test_the_modes_test_took_the_generated_path():
    assert MODES[1] > 0 and MODES[0] > MODES[1] // 4, MODES


# ---------------------------------------------------------------- CONSTRUCT, generated and maintained
import re  # noqa: E402

import pyoxigraph as ox  # noqa: E402

from engine.stream import gen_construct  # noqa: E402


def _triples(data: bytes) -> set:
    doc = orjson.loads(data)
    assert "error" not in doc, doc
    return {ln for ln in doc["triples"].splitlines() if ln.strip()}


def _construct_of(q: str, data) -> str | None:
    """A CONSTRUCT over the WHERE of a generated-form SELECT (no grouping, no computed
    projection), its template drawn over the WHERE's variables and constants (literal subjects
    and variable predicates included: those triples are left out)."""
    if " GROUP BY " in q or " AS " in q or q.startswith("ASK") or "COUNT" in q:
        return None
    where = q[q.index("WHERE"):]
    vs = sorted(set(re.findall(r"\?(\w+)", where)))
    if not vs:
        return None
    term = st.sampled_from(["?" + v for v in vs])
    tpl = data.draw(st.lists(st.tuples(term | st.sampled_from(NODES[:2]), term | st.sampled_from(PREDS[:2]),
                                       term | st.sampled_from(TERMS[:3])), min_size=1, max_size=3))
    return "CONSTRUCT { " + " . ".join(f"{s} {p} {o}" for s, p, o in tpl) + " } " + where


def _ox_construct(db, q: str, window: set) -> set:
    st_ = ox.Store()
    nt = "".join(db.static_lines) + "".join(f"{s} {p} {o} .\n" for s, p, o in window)
    st_.load(nt.encode(), ox.RdfFormat.N_TRIPLES)
    return {(_value(tr.subject), _value(tr.predicate), _value(tr.object)) for tr in st_.query(q)}


_NUM = {f"http://www.w3.org/2001/XMLSchema#{t}" for t in ("double", "decimal", "integer")}


def _value(term) -> tuple:
    """A term as a comparable value: numbers by value (pyoxigraph writes a double's canonical
    form, ``3.25`` for ``3.25E0``), other terms by their N-Triples text."""
    if isinstance(term, ox.Literal) and term.datatype.value in _NUM:
        return ("num", term.datatype.value, float(term.value))
    return ("term", str(term))


def _values(lines: set) -> set:
    out = set()
    for ln in lines:
        for tr in ox.parse(ln.encode(), ox.RdfFormat.N_TRIPLES):
            out.add((_value(tr.subject), _value(tr.predicate), _value(tr.object)))
    return out


CONS = [0, 0]   # (generated instants, CONSTRUCT instants of generated shapes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(q=queries(), data=st.data(), els=st.lists(st.lists(triple, max_size=6), min_size=1, max_size=8),
       rng=st.sampled_from([3000, 1000]), mode=st.sampled_from(["RSTREAM", "ISTREAM", "DSTREAM"]))
def test_construct_generated_like_the_other_path_and_pyoxigraph(sdb, q, data, els, rng, mode):
    """The template instantiated per generated row: every instant's triples equal the path
    with the generator off, and pyoxigraph's CONSTRUCT (RSTREAM; I/DSTREAM: its differences)."""
    cq = _construct_of(q, data)
    assume(cq is not None)
    db = sdb
    text = (f"REGISTER {mode} QUERY g AS "
            f"{cq.replace(' WHERE', f' FROM <{STATIC}> FROM STREAM <{EX}a> [RANGE {rng // 1000}s STEP 1s] WHERE', 1)}")
    store = TransientStore("a", slice_triples=16)
    on = _evaluator(db, text, store, True, rng)
    off = _evaluator(db, text, store, False, rng)
    assert off._gen is None
    taus = fill(db, store, els)
    before = tiny_gen.taken_total()
    prev: set = set()
    exact = True
    for t, window in instants(taus, len(els), rng):
        a, _ = on.run(t)
        b, _ = off.run(t)
        assert _triples(a) == _triples(b), (cq, mode, t)
        exact = exact and not _oxigraph_zero_quotient(db, q, window)
        cur = _ox_construct(db, cq, window)
        if exact:
            want = cur if mode == "RSTREAM" else (cur - prev if mode == "ISTREAM" else prev - cur)
            assert _values(_triples(a)) == want, (cq, mode, t)
        prev = cur
        if on._gen is not None:
            CONS[1] += 1
    CONS[0] += tiny_gen.taken_total() - before


def test_the_construct_test_took_the_generated_path():
    assert CONS[1] > 0 and CONS[0] > CONS[1] // 4, CONS


def test_a_template_with_blank_nodes_or_computed_values_is_not_generated():
    from engine.sparql.csparql import parse_continuous  # noqa: PLC0415

    cq = parse_continuous(f"REGISTER QUERY x AS CONSTRUCT {{ _:b {PREDS[0]} ?a }} FROM STREAM <{EX}a> "
                          f"[RANGE 3s STEP 1s] WHERE {{ ?a {PREDS[1]} ?b }}")
    assert gen_construct.select_of(cq.query) is None and tiny_gen.GenQuery.of(cq.query, "RSTREAM") is None
    # a template variable computed by BIND: its rows hold numbers, not term ids
    cq = parse_continuous(f"REGISTER QUERY x AS CONSTRUCT {{ ?a {PREDS[0]} ?c }} FROM STREAM <{EX}a> "
                          f"[RANGE 3s STEP 1s] WHERE {{ ?a {PREDS[1]} ?b BIND(?b + 1 AS ?c) }}")
    assert tiny_gen.GenQuery.of(cq.query, "RSTREAM") is None
    cq = parse_continuous(f"REGISTER QUERY x AS CONSTRUCT {{ ?a {PREDS[0]} ?b }} FROM STREAM <{EX}a> "
                          f"[RANGE 3s STEP 1s] WHERE {{ ?a {PREDS[1]} ?b }}")
    assert tiny_gen.GenQuery.of(cq.query, "RSTREAM") is not None


def test_maintained_construct_through_the_manager(monkeypatch):
    """A CONSTRUCT (the derived streams' form) answered from a maintained state: the same
    triples per instant as the ordinary path, most instants from the state."""
    q = f"CONSTRUCT {{ ?x {PREDS[0]} ?z . ?z {PREDS[2]} ?x }} WHERE {{ ?x {PREDS[1]} ?y . ?x {PREDS[2]} ?z }}"
    per = _steady(10)
    on, _, answered = _run(q, per, [1], None, "fast", monkeypatch)
    off, _, none = _run(q, per, [1], None, "off", monkeypatch)
    assert [(i, k) for i, k, _ in on] == [(i, k) for i, k, _ in off]
    assert [_triples(a) for _, k, a in on if k == "result"] == [_triples(b) for _, k, b in off if k == "result"]
    assert any(_triples(a) for _, _, a in on)
    assert none == 0 and answered >= len(per) - 3
