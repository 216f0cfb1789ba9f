"""SPARQL JSON of a large instant answer (thousands of rows: cross products of stream joins,
a stream joined with static entities it does not project), as the bytes
:func:`~engine.exec.serialize.sparql_json` writes, in the row order given.

Why a writer of its own: such an event is megabytes (CityBench C2: 8.7k rows, 8.7 MB), so
its cost is the final copy plus a fixed cost per fragment reference the one ``bytes.join``
walks (~10 ns each) and per numpy pass over the rows. Two shapes cut both:

* runs of identical rows (a join with entities the query does not project repeats each
  projected row once per entity, in nested-loop order: C8's 13.9k rows are 9 runs): the
  distinct work is done on one row per run, and a run is written as its row times its length
  (one reference, a ``memcpy`` doubling) -- no per-row work at all;
* otherwise each row's last fragment carries the ``},{`` row separator (one reference less
  per row), and adjacent columns with few distinct combinations are merged into blocks
  rendered once per combination (as before: a cross product's columns).
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from engine.exec import render
from engine.exec import serialize as _ser
from engine.exec.bindings import distinct_inverse
from engine.exec.result import UNBOUND, QueryResult
from engine.exec.serialize import sparql_json

_BIN = pa.large_binary()
_SEP = b"},{"

#: a run mode answer when rows are at least this many times their runs (each run's row is
#: written by one Python step; below this, the per-row vectorized assembly is cheaper)
RUN_FACTOR = 8

#: most distinct combinations of a merged block (each is one Python concatenation; each
#: merge saves one fragment reference per row in the final join)
MERGE_CAP = 160

#: False: :class:`~engine.stream.continuous._JsonTerms` writes large answers by the general
#: serializer, :func:`~engine.exec.serialize.sparql_json` (the tests compare both writers)
ENABLED = True

#: instants written by the run mode, by the period mode (spies for the tests: the fast paths
#: are taken)
RUNS_TAKEN = [0]
PERIODS_TAKEN = [0]


def row_runs(cols: list[np.ndarray], n: int) -> np.ndarray | None:
    """Start index of each run of identical consecutive rows, when there are at most
    ``n // RUN_FACTOR`` runs; None otherwise (stops at the first column pair showing too
    many changes: a cross product's fastest column costs one comparison)."""
    limit = n // RUN_FACTOR
    if limit < 1:
        return None
    change = None
    for c in reversed(cols):   # (nested-loop order: the inner loop's columns come last)
        ne = c[1:] != c[:-1]
        change = ne if change is None else (change | ne)
        if int(np.count_nonzero(change)) >= limit:
            return None
    starts = np.flatnonzero(change) + 1 if change is not None else np.empty(0, dtype=np.int64)
    return np.concatenate(([0], starts))


def _column_codes(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`distinct_inverse` of a column, over its runs when it has few (a cross product's
    outer columns: 9 runs in 8.7k rows): one comparison pass, the distinct values of the runs,
    their codes repeated -- instead of the counting passes over every row."""
    n = len(c)
    if n >= 64:
        ch = np.flatnonzero(c[1:] != c[:-1])
        if len(ch) * 4 < n:
            starts = np.concatenate(([0], ch + 1))
            uniq, rinv = distinct_inverse(c[starts])
            return uniq, np.repeat(rinv, np.diff(np.append(starts, n)))
    return distinct_inverse(c)


def _merged(a: np.ndarray, b: np.ndarray, na: int, nb: int, cap: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(distinct codes, index per row) of the pairs of codes ``a`` (< ``na``) and ``b``
    (< ``nb``) as ``a * nb + b``, or None when there are more than ``cap`` (decided by one
    scatter and a count, before the per-row lookup is built)."""
    span = na * nb
    if span > 64 * max(len(a), 1):
        ucode, rinv = distinct_inverse(a * nb + b)
        return (ucode, rinv) if len(ucode) <= cap else None
    code = a * nb + b
    seen = np.zeros(span, dtype=bool)
    seen[code] = True
    ucode = np.flatnonzero(seen)
    if len(ucode) > cap:
        return None
    table = np.empty(span, dtype=np.int64)
    table[ucode] = np.arange(len(ucode), dtype=np.int64)
    return ucode, table[code]


def _blocks(jt, res: QueryResult, cols: list[np.ndarray], m: int) -> list:
    """(fragments, index per row) blocks over ``m`` rows: each column's distinct ids rendered
    once (the instants' cache :meth:`_JsonTerms.render` while few, Arrow kernels when many),
    adjacent columns with few distinct combinations merged."""
    tables, invs = [], []
    for j, (v, c) in enumerate(zip(res.vars, cols, strict=True)):
        name = (b"," if j else b"") + orjson.dumps(v) + b":"
        uniq, inv = _column_codes(c)
        if len(uniq) <= render.SMALL_DISTINCT:
            tables.append([name + x for x in jt.render(uniq.tolist(), res.terms)])
        else:
            frag = render.json_fragments(render.keys_arrow(res, uniq), _ser._json_bytes)
            tables.append(pc.binary_join_element_wise(pa.scalar(name, _BIN), frag, pa.scalar(b"", _BIN)))
        invs.append(inv)
    cap = min(MERGE_CAP, max(1, m // 8))
    blocks: list = []
    cur = None
    for t, inv in zip(tables, invs, strict=True):
        if not isinstance(t, list):
            if cur is not None:
                blocks.append(cur)
                cur = None
            blocks.append((t, inv))
            continue
        if cur is not None and len(cur[0]) * len(t) < 1 << 62:
            got = _merged(cur[1], inv, len(cur[0]), len(t), cap)
            if got is not None:
                ucode, rinv = got
                hi, lo = (ucode // len(t)).tolist(), (ucode % len(t)).tolist()
                prev = cur[0]
                cur = ([prev[i] + t[k] for i, k in zip(hi, lo, strict=True)], rinv)
                continue
            blocks.append(cur)
        cur = (t, inv)
    if cur is not None:
        blocks.append(cur)
    return blocks


def _charge(res: QueryResult, blocks: list, counts: np.ndarray | None, n: int, refs: int, fixed: int,
            scale: int = 1) -> None:
    """The exact size of the event, checked against the query's memory budget (the body and
    its references, about twice the body as the one-shot serializer charges): an instant of
    millions of rows fails with the budget's error instead of building gigabytes."""
    budget = getattr(res.terms, "memory", None)
    if budget is None or not budget.limit:
        return
    size = 3 * n
    for frags, inv in blocks:
        if isinstance(frags, list):
            lens = np.fromiter(map(len, frags), dtype=np.int64, count=len(frags))
        else:
            lens = pc.binary_length(frags).to_numpy(zero_copy_only=False).astype(np.int64)
        per = lens[inv]
        size += int(per.sum() if counts is None else per @ counts)
    budget.check(2 * (fixed + scale * size) + 8 * refs, "the instant's result event")


def _objects(frags) -> np.ndarray:
    f = np.empty(len(frags), dtype=object)
    f[:] = frags if isinstance(frags, list) else frags.to_pylist()
    return f


def row_period(cols: list[np.ndarray], n: int, tries: int = 3) -> int | None:
    """The smallest period ``p <= n // RUN_FACTOR`` of the row sequence (row ``i`` equals row
    ``i - p`` for every ``i >= p``: the outer loop of a join runs over entities the query does
    not project, so the projected rows come again in the same order), or None. The candidates
    are the first rows equal to row 0 (one pass over ``n // RUN_FACTOR`` cells per column); at
    most ``tries`` of them are verified (a column pair at a time, the fastest column first)."""
    limit = n // RUN_FACTOR
    if limit < 1:
        return None
    cand = np.flatnonzero(cols[-1][1:limit + 1] == cols[-1][0]) + 1
    for c in cols[:-1]:
        if not len(cand):
            return None
        cand = cand[c[cand] == c[0]]
    for p in cand[:tries].tolist():
        if all(np.array_equal(c[p:], c[:-p]) for c in reversed(cols)):
            return p
    return None


def _row_parts(jt, res: QueryResult, cols: list[np.ndarray], n: int, scale: int, fixed: int,
               starts: np.ndarray | None | bool = False) -> tuple[list, int]:
    """The fragments of ``n`` rows, each row's last one ending in the row separator, and how
    many there are per row. Runs of identical rows are rendered once (their references
    repeated); the event's size (``scale`` times these rows') is charged first. ``starts``:
    :func:`row_runs` of ``cols`` if known (False: not yet)."""
    if starts is False:
        starts = row_runs(cols, n)
    if starts is not None:
        counts = np.diff(np.append(starts, n))
        cols = [c[starts] for c in cols]
        m = len(starts)
    else:
        counts = None
        m = n
    blocks = _blocks(jt, res, cols, m)
    k = len(blocks)
    _charge(res, blocks, counts, n, (m if counts is not None else n) * k, fixed, scale)
    # the separator rides on the last block's fragments: one reference less per row
    last, linv = blocks[-1]
    if isinstance(last, list):
        last = [f + _SEP for f in last]
    else:
        last = pc.binary_join_element_wise(last, pa.scalar(_SEP, _BIN), pa.scalar(b"", _BIN))
    blocks[-1] = (last, linv)
    # row-major fragment references: each block's column gathered by numpy (object take) and
    # laid into every k-th slot by one list slice assignment (alone: 330 against 520 µs CPU
    # for an object grid and its ``tolist`` at 8.7k rows x 4 blocks; within the event, where
    # the join's copy dominates, within noise)
    parts: list = [None] * (m * k)
    for j, (frags, inv) in enumerate(blocks):
        parts[j::k] = _objects(frags)[inv].tolist()
    if counts is None:
        return parts, k
    RUNS_TAKEN[0] += 1
    rows = parts if k == 1 else [b"".join(parts[i:i + k]) for i in range(0, m * k, k)]
    # each run: its row's reference repeated (a list's pointer copies; ``row * count`` would
    # copy the run's bytes once more before the join copies them again)
    out: list = []
    for r, c in zip(rows, counts.tolist(), strict=True):
        out += [r] * c
    return out, 1


def large_select(jt, res: QueryResult, extra: bytes) -> bytes:
    """The event of a SELECT answer of many rows (``jt``: the query's
    :class:`~engine.stream.continuous._JsonTerms`, whose term cache renders the few distinct
    ids). Holes (unbound cells) take the serializer's own vectorized writer."""
    cols = [np.asarray(c, dtype=np.int64) for c in res.columns]
    if any(bool((c == UNBOUND).any()) for c in cols):
        return sparql_json(res, extra)
    n = len(res)
    head = b'{"head":{"vars":' + orjson.dumps(list(res.vars)) + b'},"results":{"bindings":[{'
    tail = b"}]}" + extra + b"}"
    fixed = len(head) + len(tail)
    starts = row_runs(cols, n)
    p = None if starts is not None else row_period(cols, n)
    if p is None:
        parts, _ = _row_parts(jt, res, cols, n, 1, fixed, starts)
        out = [head] + parts
    else:
        # a periodic answer: one period written, its bytes referenced once per repeat
        PERIODS_TAKEN[0] += 1
        q, r = divmod(n, p)
        parts, per = _row_parts(jt, res, [c[:p] for c in cols], p, q + (r > 0), fixed)
        out = [head] + [b"".join(parts)] * (q - 1) + parts + parts[:r * per]
    out[-1] = out[-1][:-len(_SEP)] + tail
    return b"".join(out)
