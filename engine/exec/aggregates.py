"""SPARQL 1.1 aggregates (section 18.5) over grouped id columns.

``aggregate(agg, arg_ids, group_index, n_groups, ctx)`` returns one id per
group (-1 = unbound, i.e. the aggregate raised an error). An argument id of -1
is an error value: ListEval keeps errors (``ListEval((unbound)) = (error)``,
18.5.1) and each set function decides what one does, as 18.5.1 defines it:

* COUNT counts the bound, non-error values (``np.bincount``); ``COUNT(*)``
  (``arg_ids`` None) counts rows. ``COUNT(DISTINCT *)``: the executor passes
  as ``arg_ids`` one code per row identifying its distinct solution (e.g. the
  inverse of ``np.unique`` over the row tuples), which is then counted as
  ``COUNT(DISTINCT code)``.
* SUM / AVG with numeric type promotion; an error or a non-numeric value
  makes the group's result an error (``op:numeric-add`` of an error); empty
  group -> ``"0"^^xsd:integer``, and AVG of a group whose values are all
  errors too (``Avg(M) = 0 where Count(M) = 0``: Count drops errors).
  Integer-only groups are summed vectorized in int64 (Python ints when an
  overflow is possible), double/float groups in float64 (in value order
  within a group: the sum does not depend on the row order), decimal groups
  exactly with ``Decimal``.
* MIN / MAX by the ORDER BY total order over all terms, in which an error
  (no value) is the lowest: MIN of a group holding an error is that error,
  MAX is the greatest non-error value (error only when all are).
* SAMPLE: the first bound value of the group (any member of the group is
  allowed; the error only when there is nothing else).
* GROUP_CONCAT: CONCAT of the values, so every value must be a string
  literal (simple or language-tagged): an error, an IRI, a blank node or a
  literal of another datatype makes the group an error; the result is a
  simple literal of the lexical forms joined by the separator (default " ";
  the W3C tests agg-groupconcat-04/06 drop a shared language tag).
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.arrays import unique
from engine.exec import rowwise as _rowwise
from engine.exec import values as V
from engine.exec.bindings import distinct_inverse, distinct_values
from engine.exec.functions import _unique_ranks
from engine.exec.numbers import DBL_SFX as _DBL_SFX
from engine.exec.numbers import INT_SFX as _INT_SFX
from engine.exec.numbers import LAZY_BASE as _LAZY_BASE
from engine.terms import XSD_DOUBLE, XSD_INTEGER, XSD_STRING, Literal, from_key, literal_key

UNBOUND = -1
#: integer AVG groups up to which each quotient is one Decimal division (~5 us) rather than
#: V.decimal_quotients' digit matrix (a fixed ~1-4 ms)
_FEW_QUOTIENTS = 64
_ZERO_KEY = '"0"^^<' + XSD_INTEGER + ">"


def aggregate(agg, arg_ids: np.ndarray | None, group_index: np.ndarray, n_groups: int, ctx) -> np.ndarray:
    name = agg.name.upper()
    gi = np.asarray(group_index, dtype=np.int64)
    if arg_ids is not None:
        arg_ids = np.asarray(arg_ids, dtype=np.int64)
    if n_groups == 0:
        return np.zeros(0, dtype=np.int64)
    if len(gi) <= _rowwise.SMALL_ROWS:  # a few rows: in Python (the column-wise set-up costs more)
        got = _small(name, agg, arg_ids, gi, n_groups, ctx)
        if got is not None:
            return got
    if name == "COUNT":
        return _count(agg, arg_ids, gi, n_groups, ctx)
    if arg_ids is None:
        raise ValueError(f"{name} needs an argument")
    if agg.distinct:
        arg_ids, gi = _distinct_pairs(arg_ids, gi)
    if name in ("SUM", "AVG"):
        return _sum_avg(name == "AVG", arg_ids, gi, n_groups, ctx)
    if name in ("MIN", "MAX"):
        return _min_max(name == "MAX", arg_ids, gi, n_groups, ctx)
    if name == "SAMPLE":
        return _sample(arg_ids, gi, n_groups)
    if name == "GROUP_CONCAT":
        sep = " " if agg.separator is None else agg.separator
        if len(gi) <= _FEW_CONCAT_ROWS:
            return _few_concat(sep, arg_ids, gi, n_groups, ctx)
        return _group_concat(sep, arg_ids, gi, n_groups, ctx)
    raise ValueError(f"unknown aggregate {agg.name}")


def _distinct_pairs(ids: np.ndarray, gi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep the first occurrence of each (group, id) pair, in row order."""
    keep = _first_pairs(ids, gi)
    return (ids, gi) if keep is None else (ids[keep], gi[keep])


def _first_pairs(ids: np.ndarray, gi: np.ndarray) -> np.ndarray | None:
    """Mask of the rows holding the first occurrence of their (group, id) pair; None: all do."""
    if len(ids) == 0:
        return None
    _, inv = distinct_inverse(ids)
    inv = inv.reshape(-1).astype(np.int64)
    # rows of ids that occur once are first occurrences whatever their group
    rep = np.flatnonzero(np.bincount(inv)[inv] > 1)
    if len(rep) == 0:
        return None
    code = gi[rep] * (int(inv.max()) + 1) + inv[rep]
    order = np.argsort(code, kind="stable")  # (stable: the first row of each code leads its run)
    sc = code[order]
    lead = np.ones(len(sc), dtype=bool)
    lead[1:] = sc[1:] != sc[:-1]
    keep = np.ones(len(ids), dtype=bool)
    keep[rep] = False
    keep[rep[order[lead]]] = True
    return keep


def _int_keys(counts: np.ndarray, ctx) -> np.ndarray:
    uniq, inv = distinct_inverse(counts)
    ids = np.asarray(ctx.intern([f'"{int(c)}"^^<{XSD_INTEGER}>' for c in uniq.tolist()]), dtype=np.int64)
    return ids[inv.reshape(-1)]


def _distinct_pair_groups(ids: np.ndarray, g: np.ndarray, n_groups: int) -> np.ndarray:
    """The group of each distinct (group, id) pair (in no particular order).

    A row whose id occurs once in the column is a distinct pair whatever its
    group; only rows of repeated ids are sorted (in the usual COUNT(DISTINCT
    ?x) over a functional property, e.g. one age per person, none are; a sort
    costs ~35 ns per row here, the count ~2 ns)."""
    _, inv = distinct_inverse(ids)
    k = int(inv.max()) + 1
    rep = np.bincount(inv, minlength=k)[inv] > 1
    if not rep.any():
        return g
    # (group, value) codes over a dense range when groups are few: a counting pass, no sort
    return np.concatenate([g[~rep], distinct_values(g[rep] * k + inv[rep]) // k])


def _count(agg, arg_ids, gi, n_groups, ctx) -> np.ndarray:
    if arg_ids is None:
        counts = np.bincount(gi, minlength=n_groups)
    else:
        ok = arg_ids >= 0
        ids, g = arg_ids[ok], gi[ok]
        if agg.distinct and len(ids) and n_groups == 1:  # one group: the number of distinct ids
            return _int_keys(np.array([len(distinct_values(ids))], dtype=np.int64), ctx)
        if agg.distinct and len(ids):
            # distinct (group, value) pairs: only their number per group matters, no
            # first occurrences (a plain sort of pair codes, no stable argsort)
            g = _distinct_pair_groups(ids, g, n_groups)
        counts = np.bincount(g, minlength=n_groups)
    return _int_keys(counts[:n_groups], ctx)


# ---------------------------------------------------------------- SUM / AVG


class _Numerics:
    """Numeric classification of unique ids: ``ranks`` (-1 = not numeric),
    ``ints`` (int64, exact for INTEGER ranks unless in ``big``), ``floats``
    (float64 approximations) and ``exact`` (Num of the ids parsed from their
    lexical form: decimals, floats, big integers). Integers below 2^53 and
    doubles are read column-wise from the dictionary's numeric side array and
    the memoised datatype codes (no key per value); only the others are parsed."""

    def __init__(self, uniq: np.ndarray, ctx):
        from engine.exec.functions import _DT_DBL, _DT_FAMILY, _DT_INT, _datatype_codes_of  # noqa: PLC0415

        m = len(uniq)
        self.ranks = np.full(m, -1, dtype=np.int64)
        self.ints = np.zeros(m, dtype=np.int64)
        self.floats = np.full(m, np.nan)
        self.exact: dict[int, V.Num] = {}
        self.big = False
        valid = uniq >= 0
        if not valid.any():
            return
        idx = np.flatnonzero(valid)
        lit = idx[np.asarray(ctx.kinds(uniq[idx])) == 2]
        if not len(lit):
            return
        nums = np.asarray(ctx.numeric(uniq[lit]), dtype=np.float64)
        codes = np.asarray(_datatype_codes_of(ctx, uniq[lit]), dtype=np.int8)
        fam = np.where(codes >= 0, codes & _DT_FAMILY, -1)
        with np.errstate(invalid="ignore"):
            fast_int = (fam == _DT_INT) & (np.abs(nums) < 2.0**53)
        fast_dbl = (fam == _DT_DBL) & ~np.isnan(nums)
        fi, fd = lit[fast_int], lit[fast_dbl]
        self.ranks[fi] = V.INTEGER
        self.ints[fi] = nums[fast_int].astype(np.int64)
        self.floats[fi] = nums[fast_int]
        self.ranks[fd] = V.DOUBLE
        self.floats[fd] = nums[fast_dbl]
        slow = np.flatnonzero((codes >= 0) & ~fast_int & ~fast_dbl)
        if not len(slow):
            return
        for j, k in zip(lit[slow].tolist(), ctx.keys(uniq[lit[slow]]), strict=True):
            n = V.numeric_of(from_key(k)) if k is not None else None
            if n is None:
                continue
            self.ranks[j] = n.rank
            self.exact[j] = n
            self.floats[j] = V.to_double(n.v)
            if n.rank == V.INTEGER:
                if abs(n.v) < 2**53:
                    self.ints[j] = n.v
                else:
                    self.big = True

    def exact_value(self, j: int):
        n = self.exact.get(j)
        if n is not None:
            return n.v
        if self.ranks[j] == V.INTEGER:
            return int(self.ints[j])
        return float(self.floats[j])


def _intern_numbers(ctx, vals: np.ndarray, code: int) -> np.ndarray:
    """Ids of integers (int64) or doubles (float64), column-wise: held as values by a
    context that can (``QueryContext.intern_numbers``), else their keys interned."""
    from engine.exec import numbers as N  # noqa: PLC0415

    fn = getattr(ctx, "intern_numbers", None)
    if fn is not None:
        return np.asarray(fn(vals, code), dtype=np.int64)
    if not len(vals):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(ctx.intern(N.canonical_keys(vals, code).to_pylist()), dtype=np.int64)


def _group_values(g: np.ndarray, vi: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (group, value index) pairs of rows, in (group, value index) order,
    with the number of rows of each."""
    code = g * m + vi
    u, inv = distinct_inverse(code)
    cnt = np.bincount(inv.reshape(-1), minlength=len(u))
    return u // m, u % m, cnt


def _decimal_totals(num: _Numerics, inv: np.ndarray, g: np.ndarray, n_groups: int, groups: np.ndarray) -> dict:
    """Exact sums (Decimal) of the rows of ``groups`` (mixed integer / decimal values):
    as int64 multiples of one power of ten when every value and the totals fit
    (one vectorized sum), else value by value over the distinct (group, value) pairs."""
    rows = np.flatnonzero(groups[g])
    ug, uv = g[rows], inv[rows]
    m = len(num.ranks)
    vals_u = np.flatnonzero(np.bincount(uv, minlength=m) > 0)  # the distinct values present
    pos = np.full(m, -1, dtype=np.int64)
    pos[vals_u] = np.arange(len(vals_u), dtype=np.int64)
    at = pos[uv]
    vals = [num.exact_value(int(j)) for j in vals_u.tolist()]
    decs = [v if isinstance(v, Decimal) else Decimal(v) for v in vals]
    exps = [d.as_tuple().exponent for d in decs]
    scale = max(0, -min(exps)) if exps and all(isinstance(e, int) for e in exps) else None
    if scale is not None and scale <= 18:
        try:
            scaled = np.array([int(d.scaleb(scale)) for d in decs], dtype=np.int64)
        except OverflowError:
            scaled = None
        if scaled is not None and len(scaled):
            biggest = int(np.abs(scaled).max())
            if biggest * max(len(rows), 1) < 2**62:
                sums = np.zeros(n_groups, dtype=np.int64)
                np.add.at(sums, ug, scaled[at])
                present = np.flatnonzero(np.bincount(ug, minlength=n_groups)[:n_groups] > 0)
                return {int(k): Decimal(int(sums[k])).scaleb(-scale) for k in present.tolist()}
    pg, pv, cnt = _group_values(ug, at, len(vals_u))
    totals: dict[int, Decimal] = {}
    for k, j, c in zip(pg.tolist(), pv.tolist(), cnt.tolist(), strict=True):
        totals[k] = totals.get(k, Decimal(0)) + decs[j] * c
    return totals


def _sum_avg(is_avg: bool, ids, gi, n_groups, ctx) -> np.ndarray:
    """SUM / AVG per group, column-wise: integer groups summed in int64, double groups
    in float64 over their distinct values in value order (the result depends on the
    group's values only, not the rows' order: a batched continuous query equals it
    alone), decimal groups exactly as scaled int64; integer sums and double results
    interned column-wise (held as values), decimal results (AVG of integers too) per group."""
    out = np.full(n_groups, UNBOUND, dtype=np.int64)
    counts = np.bincount(gi, minlength=n_groups)[:n_groups]
    # Sum({}) = 0; Avg(M) = 0 where Count(M) = 0, Count leaving errors out: a group of
    # errors only averages to 0 (and sums to an error: op:numeric-add of an error)
    empty = (np.bincount(gi[ids >= 0], minlength=n_groups)[:n_groups] if is_avg else counts) == 0
    if empty.any():
        out[empty] = int(ctx.intern([_ZERO_KEY])[0])
    if len(ids) == 0:
        return out
    uniq, inv = distinct_inverse(ids)
    inv = inv.reshape(-1)
    num = _Numerics(uniq, ctx)
    ctx.check_budget()
    row_rank = num.ranks[inv]
    # highest numeric rank per group; groups holding an error/non-numeric are bad
    grank = np.full(n_groups, -2, dtype=np.int64)  # -2: no rows
    np.maximum.at(grank, gi, row_rank)
    bad = np.zeros(n_groups, dtype=bool)
    sel = row_rank < 0
    if sel.any():
        bad = np.bincount(gi[sel], minlength=n_groups)[:n_groups] > 0
    keys: dict[int, str] = {}

    # integer-only groups: vectorized when exact
    int_groups = (grank == V.INTEGER) & ~bad
    if int_groups.any():
        rows = int_groups[gi]
        row_u = inv[rows]
        biggest = int(np.abs(num.ints).max()) if len(num.ints) else 0
        bound = biggest * max(len(row_u), 1)
        sums = None
        if not num.big and bound < 2**62:
            sums = np.zeros(n_groups, dtype=np.int64)
            np.add.at(sums, gi[rows], num.ints[row_u])
        ig = np.flatnonzero(int_groups)
        if sums is not None and not is_avg:
            out[ig] = _intern_numbers(ctx, sums[ig], 0)
        elif sums is not None and len(ig) <= _FEW_QUOTIENTS:  # AVG of a few groups: one division each
            for g in ig.tolist():
                keys[g] = _result_key(V.Num(V.INTEGER, int(sums[g])), int(counts[g]), True)
        elif sums is not None:  # AVG: the decimal quotients written column-wise
            lex = V.decimal_quotients(sums[ig], counts[ig])
            qkeys = pc.binary_join_element_wise(pa.scalar('"', pa.large_string()), lex,
                                               pa.scalar('"^^<' + V.RANK_DATATYPE[V.DECIMAL] + ">", pa.large_string()),
                                               pa.scalar("", pa.large_string()))
            fn = getattr(ctx, "intern_arrow", None)
            out[ig] = np.asarray(fn(qkeys) if fn is not None else ctx.intern(qkeys.to_pylist()), dtype=np.int64)
        else:
            if sums is not None:
                sums_list = sums.tolist()
            else:
                sums_list = [0] * n_groups
                for g, u in zip(gi[rows].tolist(), row_u.tolist(), strict=False):
                    sums_list[g] += num.exact_value(u)
            for g in np.flatnonzero(int_groups).tolist():
                keys[g] = _result_key(V.Num(V.INTEGER, sums_list[g]), int(counts[g]), is_avg)

    # floating groups: float64 sums over the distinct values, in value order
    fl_groups = (grank >= V.FLOAT) & ~bad
    if fl_groups.any():
        rows = fl_groups[gi]
        vals_u = num.floats
        vorder = np.argsort(vals_u, kind="stable")
        vrank = np.empty(len(vorder), dtype=np.int64)
        vrank[vorder] = np.arange(len(vorder), dtype=np.int64)
        pg, pv, cnt = _group_values(gi[rows], vrank[inv[rows]], len(vorder))
        with np.errstate(all="ignore"):
            sums = np.bincount(pg, weights=vals_u[vorder[pv]] * cnt, minlength=n_groups)[:n_groups]
        dg = np.flatnonzero(fl_groups & (grank == V.DOUBLE))
        if len(dg):
            with np.errstate(all="ignore"):
                res = sums[dg] / counts[dg] if is_avg else sums[dg]
            out[dg] = _intern_numbers(ctx, res, 2)
        for g in np.flatnonzero(fl_groups & (grank == V.FLOAT)).tolist():
            total = V.Num(V.FLOAT, V.to_float32(float(sums[g])))
            keys[g] = _result_key(total, int(counts[g]), is_avg)

    # decimal groups: exact
    dec_groups = (grank == V.DECIMAL) & ~bad
    if dec_groups.any():
        for g, tot in _decimal_totals(num, inv, gi, n_groups, dec_groups).items():
            keys[g] = _result_key(V.Num(V.DECIMAL, tot), int(counts[g]), is_avg)

    if keys:
        gs = list(keys)
        out[np.asarray(gs, dtype=np.int64)] = np.asarray(ctx.intern([keys[g] for g in gs]), dtype=np.int64)
    return out


def _result_key(total: V.Num, count: int, is_avg: bool) -> str | None:
    """Key of a SUM/AVG result; None (an error: unbound) when it overflows."""
    try:
        if is_avg:
            total = V.numeric_op("/", total, V.Num(V.INTEGER, count))
        lit = V.num_literal(total)
    except V.ExprError:
        return None
    return literal_key(lit.lexical, lit.datatype)


# ---------------------------------------------------------------- MIN / MAX / SAMPLE


def _min_max(is_max: bool, ids, gi, n_groups, ctx) -> np.ndarray:
    """MIN / MAX by the ORDER BY order: the distinct values ranked once, each row's
    rank reduced per group, each group's winning rank mapped back to its value (no
    sort of the rows). A group holding an error (an unbound or failed argument, which
    ListEval keeps) has no minimum or maximum: both are errors, as SUM and AVG are
    (pyoxigraph answers the same; rdflib skips errors)."""
    out = np.full(n_groups, UNBOUND, dtype=np.int64)
    ok = ids >= 0
    erred = None if ok.all() else np.bincount(gi[~ok], minlength=n_groups)[:n_groups] > 0
    ids, g = ids[ok], gi[ok]
    if len(ids) == 0:
        return out
    uniq, inv = distinct_inverse(ids)
    inv = inv.reshape(-1)
    ranks_u = _unique_ranks(uniq, ctx)
    ctx.check_budget()
    r = ranks_u[inv]
    if n_groups == 1:
        best = np.array([r.max() if is_max else r.min()], dtype=np.int64)
    elif is_max:
        best = np.full(n_groups, -1, dtype=np.int64)
        np.maximum.at(best, g, r)
    else:
        best = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(best, g, r)
    by_rank = np.empty(len(ranks_u), dtype=np.int64)  # ranks are a bijection with the distinct ids
    by_rank[ranks_u] = np.arange(len(ranks_u), dtype=np.int64)
    has = np.bincount(g, minlength=n_groups)[:n_groups] > 0
    out[has] = uniq[by_rank[best[has]]]
    if erred is not None:
        out[erred] = UNBOUND
    _numeric_winners(out, uniq, inv, g, ctx)
    return out


_CANONICAL_TYPES = {V.RANK_DATATYPE[r]: r for r in (V.INTEGER, V.DECIMAL, V.FLOAT, V.DOUBLE)}


def _numeric_winners(out: np.ndarray, uniq: np.ndarray, inv: np.ndarray, g: np.ndarray, ctx) -> None:
    """Numeric MIN/MAX results: among values equal to the winner (1 = 1.0 =
    1E0) take the one of the widest type (the type the comparison promotes
    to), and return it in canonical lexical form ("2E-1" -> "2.0E-1")."""
    has = np.flatnonzero(out >= 0)
    if len(has) == 0:
        return
    wn = np.full(len(out), np.nan)
    wn[has] = ctx.numeric(out[has])
    if np.isnan(wn).all():
        return
    nums_u = np.asarray(ctx.numeric(uniq), dtype=np.float64)
    vals = nums_u[~np.isnan(nums_u)]
    tied = None
    if len(unique(vals)) < len(vals):  # two distinct ids of one value (1 and 1.0): ties possible
        with np.errstate(invalid="ignore"):
            tied = (nums_u[inv] == wn[g]) & (uniq[inv] != out[g])
    if tied is not None and tied.any():
        ids = uniq[inv]
        cand: dict[int, set[int]] = {}
        for grp, i in zip(g[tied].tolist(), ids[tied].tolist(), strict=False):
            cand.setdefault(grp, {int(out[grp])}).add(i)
        all_ids = sorted({i for c in cand.values() for i in c})
        type_rank = {}
        for i, k in zip(all_ids, ctx.keys(np.asarray(all_ids, dtype=np.int64)), strict=False):
            type_rank[i] = _CANONICAL_TYPES.get(k[k.rfind('"') + 1:][3:-1], -1) if k else -1
        for grp, c in cand.items():
            out[grp] = max(sorted(c), key=lambda i: type_rank[i])
    win = unique(out[has][~np.isnan(wn[has])])
    if len(win) == 0:
        return
    _canonical_numbers(out, has, win, ctx)


def _canonical_numbers(out: np.ndarray, has: np.ndarray, win: np.ndarray, ctx) -> None:
    """Replace winners written in a non-canonical lexical form by the canonical one.
    Integers and doubles the context holds as values are canonical already; the
    store's integers and doubles are checked column-wise (a key scan), only the
    non-canonical ones (and other numeric types) parsed."""
    from engine.exec import numbers as N  # noqa: PLC0415

    lazy = win >= N.LAZY_BASE
    win = win[~lazy]
    if len(win) > 64 and hasattr(ctx, "keys_arrow"):
        keys = ctx.keys_arrow(win).cast(pa.large_string())
        nums = np.asarray(ctx.numeric(win), dtype=np.float64)
        is_int = pc.fill_null(pc.ends_with(keys, N.INT_SFX), False).to_numpy(zero_copy_only=False)
        is_dbl = pc.fill_null(pc.ends_with(keys, N.DBL_SFX), False).to_numpy(zero_copy_only=False)
        check = np.ones(len(win), dtype=bool)
        for mask, code in ((is_int & (np.abs(np.nan_to_num(nums)) < 2.0**53), N.INT), (is_dbl, N.DBL)):
            sel = np.flatnonzero(mask & ~np.isnan(nums))
            if len(sel):
                vals = nums[sel].astype(np.int64) if code == N.INT else nums[sel]
                same = pc.equal(N.canonical_keys(vals, code), keys.take(pa.array(sel))).to_numpy(zero_copy_only=False)
                check[sel[same]] = False
        win = win[check]
    if not len(win):
        return
    repl: dict[int, str] = {}
    for i, k in zip(win.tolist(), ctx.keys(win), strict=False):
        lit = from_key(k)
        if not isinstance(lit, Literal) or lit.datatype not in _CANONICAL_TYPES:
            continue
        n = V.numeric_of(lit)
        if n is None:
            continue
        canon = V.num_literal(n)
        ck = literal_key(canon.lexical, canon.datatype)
        if ck != k:
            repl[i] = ck
    if repl:
        src = list(repl)
        dst = np.asarray(ctx.intern([repl[i] for i in src]), dtype=np.int64)
        mapping = dict(zip(src, dst.tolist(), strict=True))
        for grp in has.tolist():
            j = mapping.get(int(out[grp]))
            if j is not None:
                out[grp] = j


def _sample(ids, gi, n_groups) -> np.ndarray:
    out = np.full(n_groups, UNBOUND, dtype=np.int64)
    ok = np.flatnonzero(ids >= 0)
    if len(ok) == 0:
        return out
    # the first bound row of each group: assign in reverse so the first wins
    rev = ok[::-1]
    out[gi[rev]] = ids[rev]
    return out


# ---------------------------------------------------------------- GROUP_CONCAT


def _group_concat(sep: str, ids, gi, n_groups, ctx) -> np.ndarray:
    """Per group, the lexical forms of its values in row order joined by ``sep`` (a
    simple literal). GroupConcat is CONCAT over the values (18.5.1), whose arguments
    are string literals: an error (unbound), an IRI, a blank node or a literal of
    another datatype makes the group's value an error (``GROUP_CONCAT(STR(?x))``
    concatenates anything STR accepts). Column-wise: the strings' texts by Arrow
    kernels over the distinct ids (engine/exec/strings.py), each group's list by
    offsets over the rows sorted by group, and one ``binary_join``."""
    from engine.exec import strings  # noqa: PLC0415

    if not len(ids):
        return np.asarray(ctx.intern([literal_key("")] * n_groups), dtype=np.int64)
    lx = strings.string_literal_values(ctx, ids)
    bad = np.zeros(n_groups, dtype=bool)
    bad[gi[lx.inv < 0]] = True  # errors and terms that are no string literals
    fine = np.flatnonzero(lx.inv >= 0)
    ids_out = _join_groups(sep, lx.lex, lx.inv[fine], gi[fine], n_groups, ctx)
    ids_out[bad] = UNBOUND
    return ids_out


#: GROUP_CONCAT over at most this many rows joins in plain Python (:func:`_few_concat`)
_FEW_CONCAT_ROWS = 1024
#: how often it did (a spy for the tests)
_FEW_CONCAT_CALLS = [0]


def _few_concat(sep: str, ids: np.ndarray, gi: np.ndarray, n_groups: int, ctx) -> np.ndarray:
    """:func:`_group_concat` over a few rows: each distinct value decoded once from its key,
    the groups' lists joined in Python, one intern call. Why: the column-wise path is
    ~20 Arrow kernels and a bulk intern whatever the size (0.7 ms for the heads' names of
    129 departments, against pyoxigraph's 0.36 ms for the whole query)."""
    _FEW_CONCAT_CALLS[0] += 1
    il = ids.tolist()
    uniq = sorted({i for i in il if i >= 0})
    lex: dict[int, str | None] = {}
    if uniq:
        for i, k in zip(uniq, ctx.keys(np.asarray(uniq, dtype=np.int64)), strict=True):
            t = from_key(k) if k is not None else None
            ok = isinstance(t, Literal) and (t.lang is not None or t.datatype == XSD_STRING)
            lex[i] = t.lexical if ok else None
    parts: list[list[str] | None] = [[] for _ in range(n_groups)]
    for k, i in zip(gi.tolist(), il, strict=True):
        got = parts[k]
        if got is None:
            continue
        v = lex.get(i) if i >= 0 else None
        if v is None:  # an error, or no string literal: the group's value is an error
            parts[k] = None
        else:
            got.append(v)
    ctx.check_budget()
    memory = getattr(ctx, "memory", None)
    if memory is not None:
        memory.check(2 * sum(len(sep) * len(p) + sum(map(len, p)) for p in parts if p), "GROUP_CONCAT")
    out = np.full(n_groups, UNBOUND, dtype=np.int64)
    done = [k for k, p in enumerate(parts) if p is not None]
    if done:
        out[done] = ctx.intern([literal_key(sep.join(parts[k])) for k in done])
    return out


def group_concat_lex(sep: str, lx, gi: np.ndarray, n_groups: int, distinct: bool, ctx) -> np.ndarray:
    """GROUP_CONCAT of a string function's values (``strings.Lex``: ``GROUP_CONCAT(STR(?x))``)
    without a term made per value: a row in error (``STR`` of a blank node, an unbound
    argument) makes its group an error, as in ``_group_concat``; DISTINCT keeps each
    group's first row of each value (lexical form and tag)."""
    from engine.exec import strings  # noqa: PLC0415

    gi = np.asarray(gi, dtype=np.int64)
    ok = np.flatnonzero(lx.inv >= 0)
    bad = None
    if len(ok) < len(lx.inv):
        bad = np.bincount(gi[lx.inv < 0], minlength=n_groups)[:n_groups] > 0
    rows, g = lx.inv[ok], gi[ok]
    if distinct and len(rows) and len(lx.lex):
        vals = lx.lex if lx.tag is None else strings.key_array(lx.lex, lx.tag)
        code = vals.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)
        keep = _first_pairs(code[rows], g)
        if keep is not None:
            rows, g = rows[keep], g[keep]
    out = _join_groups(sep, lx.lex, rows, g, n_groups, ctx)
    if bad is not None:
        out[bad] = UNBOUND
    return out


def _join_groups(sep: str, lex: pa.Array, rows: np.ndarray, g: np.ndarray, n_groups: int, ctx) -> np.ndarray:
    """Ids of the simple literals joining, per group, ``lex[rows]`` of its rows in row order."""
    from engine.exec import strings  # noqa: PLC0415

    lens = pc.binary_length(lex).to_numpy(zero_copy_only=False).astype(np.int64) if len(lex) else None
    memory = getattr(ctx, "memory", None)
    if memory is not None and lens is not None:  # the joined strings, checked before any is built
        memory.check(2 * int(lens[rows].sum() + len(sep) * len(rows)) + 8 * len(rows), "GROUP_CONCAT")
    order = np.argsort(g, kind="stable")  # row order within each group
    counts = np.bincount(g, minlength=n_groups)[:n_groups]
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    values = lex.take(pa.array(rows[order])) if len(lex) else pa.array([], pa.large_string())
    ctx.check_budget()
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), values.cast(pa.large_string()))
    joined = pc.binary_join(lists, pa.scalar(sep, pa.large_string()))
    return strings.intern_lex(ctx, joined, None)


# ---------------------------------------------------------------- a few rows


#: how often the small path answered / handed an aggregate to the column-wise one (tests)
small_stats = {"small": 0, "columns": 0}

_SMALL_TYPES = {XSD_INTEGER: V.INTEGER, XSD_DOUBLE: V.DOUBLE}


def _small(name: str, agg, ids, gi: np.ndarray, n_groups: int, ctx) -> np.ndarray | None:
    """The aggregate over a few rows in plain Python: the same results (and ids) as the
    column-wise functions above, whose numpy calls (~40-60 per aggregate) cost more than
    the work on a small window's rows. Takes COUNT, SAMPLE, and SUM / AVG / MIN / MAX when
    every value is an error, a non-number, an ``xsd:integer`` below 2^53 or a non-NaN
    ``xsd:double`` (MIN / MAX: numbers only); None hands the rest over (decimals, floats,
    derived integer types, NaN, GROUP_CONCAT, ...)."""
    g = gi.tolist()
    if name == "COUNT":
        counts = [0] * n_groups
        if ids is None:
            for k in g:
                counts[k] += 1
        elif agg.distinct:
            for k, i in set(zip(g, ids.tolist(), strict=True)):
                if i >= 0:
                    counts[k] += 1
        else:
            for k, i in zip(g, ids.tolist(), strict=True):
                if i >= 0:
                    counts[k] += 1
        small_stats["small"] += 1
        return np.asarray(ctx.intern([f'"{c}"^^<{XSD_INTEGER}>' for c in counts]), dtype=np.int64)
    if ids is None or name not in ("SUM", "AVG", "MIN", "MAX", "SAMPLE"):
        small_stats["columns"] += 1
        return None
    il = ids.tolist()
    if agg.distinct:  # the first occurrence of each (group, value) pair, in row order
        seen: set = set()
        keep = []
        for k, i in zip(g, il, strict=True):
            if (k, i) not in seen:
                seen.add((k, i))
                keep.append((k, i))
        g = [k for k, _ in keep]
        il = [i for _, i in keep]
    if name == "SAMPLE":
        out = [UNBOUND] * n_groups
        for k, i in zip(g, il, strict=True):
            if i >= 0 and out[k] < 0:
                out[k] = i
        small_stats["small"] += 1
        return np.asarray(out, dtype=np.int64)
    vals = _small_numbers({i for i in il if i >= 0}, ctx, name in ("MIN", "MAX"))
    if vals is None:
        small_stats["columns"] += 1
        return None
    small_stats["small"] += 1
    if name in ("MIN", "MAX"):
        return _small_min_max(name == "MAX", il, g, n_groups, vals, ctx)
    return _small_sum_avg(name == "AVG", il, g, n_groups, vals, ctx)


def _small_numbers(ids: set, ctx, numbers_only: bool) -> dict | None:
    """id -> (rank, value, term) of the bound values (rank -1: not a number); None when one
    is a number of a type the small path leaves to the column-wise one (or, ``numbers_only``,
    when one is not a number)."""
    terms = _rowwise.decode(ids, ctx)
    out = {}
    for i in ids:
        t = terms.get(i)
        r = _SMALL_TYPES.get(t.datatype) if isinstance(t, Literal) else None
        if r is None:
            if numbers_only or (isinstance(t, Literal) and t.datatype in V.NUMERIC_TYPES):
                return None
            out[i] = (-1, None, t)
            continue
        n = V.numeric_of(t)
        if n is None:  # an invalid lexical form: no number
            if numbers_only:
                return None
            out[i] = (-1, None, t)
            continue
        v = n.v
        if (r == V.INTEGER and abs(v) >= 2**53) or (r == V.DOUBLE and v != v):
            return None
        out[i] = (r, v, t)
    return out


def _small_sum_avg(is_avg: bool, il: list, g: list, n_groups: int, vals: dict, ctx) -> np.ndarray:
    """_sum_avg's results over a few rows: integer groups summed exactly, double groups
    (integers and doubles) in float64 over their distinct values in (value, id) order
    weighted by their rows, as the column-wise bincount adds them."""
    counts = [0] * n_groups
    bound = [0] * n_groups
    bad = [False] * n_groups
    rank = [-2] * n_groups
    members: list[dict] = [{} for _ in range(n_groups)]
    for k, i in zip(g, il, strict=True):
        counts[k] += 1
        if i < 0:
            bad[k] = True
            continue
        bound[k] += 1
        r = vals[i][0]
        if r < 0:
            bad[k] = True
            continue
        rank[k] = max(rank[k], r)
        members[k][i] = members[k].get(i, 0) + 1
    # every result key at once, one intern: integer sums and doubles in their canonical
    # forms (as QueryContext.intern_numbers writes a few values), integer averages as the
    # decimal quotients _sum_avg writes (None: an error, unbound)
    keys: list = []
    where: list = []
    for k in range(n_groups):
        if (bound[k] if is_avg else counts[k]) == 0:
            keys.append(_ZERO_KEY)
            where.append(k)
            continue
        if bad[k]:
            continue
        m = members[k]
        if rank[k] == V.INTEGER:
            total = sum(vals[i][1] * c for i, c in m.items())  # (|value| < 2^53, <= 64 rows)
            # an average: the decimal quotient as _decimal_div / format_decimal write it (what
            # the column-wise V.decimal_quotients writes too, at ~100x the cost for a few groups)
            keys.append(_result_key(V.Num(V.INTEGER, total), counts[k], True) if is_avg
                        else f'"{total}"{_INT_SFX}')
            where.append(k)
            continue
        total = 0.0
        for i in sorted(m, key=lambda i: (float(vals[i][1]), i)):
            total += float(vals[i][1]) * m[i]
        keys.append('"' + V.format_double(total / counts[k] if is_avg else total) + '"' + _DBL_SFX)
        where.append(k)
    res = np.full(n_groups, UNBOUND, dtype=np.int64)
    if keys:
        res[np.asarray(where, dtype=np.int64)] = np.asarray(ctx.intern(keys), dtype=np.int64)
    return res


def _small_min_max(is_max: bool, il: list, g: list, n_groups: int, vals: dict, ctx) -> np.ndarray:
    """_min_max's results over a few rows of numbers: a group holding an error has none;
    else the extreme value, among equal values (1 = 1.0E0) the widest type and then the
    lowest id, in canonical lexical form."""
    out = [UNBOUND] * n_groups
    erred = [False] * n_groups
    members: list[set] = [set() for _ in range(n_groups)]
    for k, i in zip(g, il, strict=True):
        if i < 0:
            erred[k] = True
        else:
            members[k].add(i)
    canon: dict[int, str] = {}
    for k in range(n_groups):
        m = members[k]
        if erred[k] or not m:
            continue
        best = (max if is_max else min)(vals[i][1] for i in m)
        win = max(sorted(i for i in m if vals[i][1] == best), key=lambda i: vals[i][0])
        out[k] = win
        if win < _LAZY_BASE and win not in canon:
            t = vals[win][2]
            lit = V.num_literal(V.Num(vals[win][0], vals[win][1]))
            if lit.lexical != t.lexical:
                canon[win] = literal_key(lit.lexical, lit.datatype)
    if canon:
        src = list(canon)
        dst = dict(zip(src, ctx.intern([canon[i] for i in src]).tolist(), strict=True))
        out = [dst.get(i, i) for i in out]
    return np.asarray(out, dtype=np.int64)
