"""The cheaper operand of ``&&`` / ``||`` runs first (engine/exec/conj_order.py, used by
``_Evaluator.bools``) for costly string tests written first (substring searches over a
built string, regexes, CONCAT): answers equal pyoxigraph's and the written order's (errors
on either side, nested, FILTER and BIND, after a join), the swap is taken, and the costly
operand then runs on the rows left only."""

from __future__ import annotations

import itertools

import pytest

from engine.exec import conj_order as T
from engine.exec import functions as F
from tests.test_engine_classes_oracle import XSD, P, _graph, _jindou_rows, _norm, _same_bag, both_stores

pyoxigraph = pytest.importorskip("pyoxigraph")

#: costly operands (substring / regex / case mapping) and cheap ones (prefix tests,
#: comparisons, type tests), some of them errors on part of the rows
COSTLY = ['CONTAINS(LCASE(?o), "an")', 'REGEX(STR(?o), "^b.*1$", "i")', '!CONTAINS(UCASE(?o), "PP")',
          'STRLEN(CONCAT(?o, "x")) > 7']
CHEAP = ['STRSTARTS(STR(?o), "b")', '?o > 55', 'isIRI(?o)', '!STRENDS(?o, "2")', '?o != "cherry1"']
EXPRS = [f"{a} {op} {b}" for a, b in itertools.product(COSTLY, CHEAP) for op in ("&&", "||")]


@pytest.fixture(scope="module", params=[6])
def stores(request):
    return both_stores(_graph(request.param, 4000))


_KNOWN = f'FILTER(!(isNumeric(?o) && ?o != ?o) && !sameTerm(?o, "abc"^^<{XSD}integer>))'


@pytest.mark.parametrize("expr", EXPRS)
def test_cheaper_first_answers_equal_pyoxigraph(stores, expr):
    db, ox = stores
    _same_bag(db, ox, f"SELECT ?s ?o WHERE {{ ?s {P[1]} ?o {_KNOWN} FILTER({expr}) }}")
    _same_bag(db, ox, f"SELECT ?s ?b WHERE {{ ?s {P[2]} ?o {_KNOWN} BIND(({expr}) AS ?b) }}")
    _same_bag(db, ox, f"SELECT ?s ?t ?o WHERE {{ ?s {P[0]} ?t . ?t {P[2]} ?o {_KNOWN} FILTER(({expr}) || ?o = 57) }}")


@pytest.mark.parametrize("expr", EXPRS)
def test_cheaper_first_equals_the_written_order(stores, expr, monkeypatch):
    db, _ = stores
    q = f"SELECT ?s ?o ?b WHERE {{ ?s {P[2]} ?o BIND(({expr}) AS ?b) FILTER(BOUND(?o)) }}"
    before = T.SWAPS
    swapped = sorted(_norm(_jindou_rows(db, q)), key=repr)
    assert T.SWAPS > before, "the cheap operand did not go first"
    monkeypatch.setattr(T, "ordered", lambda a, b: (a, b))
    written = sorted(_norm(_jindou_rows(db, q + " ")), key=repr)  # (another text: no cached plan)
    assert swapped == written


def test_the_costly_operand_runs_on_the_rows_left(stores, monkeypatch):
    db, _ = stores
    sizes = []
    real = F._Evaluator._str_test

    def spy(self, e):
        if e.op == "CONTAINS":
            sizes.append(self.n)
        return real(self, e)

    monkeypatch.setattr(F._Evaluator, "_str_test", spy)
    rows = db.query(f'SELECT ?s WHERE {{ ?s {P[1]} ?o FILTER(CONTAINS(LCASE(?o), "an") && STRSTARTS(STR(?o), "b")) }}')
    total = db.query(f"SELECT ?s WHERE {{ ?s {P[1]} ?o }}")
    assert len(total) >= F._SHORT_CIRCUIT_ROWS and len(rows) > 0
    assert sizes and max(sizes) < len(total) // 2, (sizes, len(total))
