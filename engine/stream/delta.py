"""Instants whose window changes cannot touch the query: the previous result, without evaluating.

A query's result at an instant depends on its windows only through the triples that match one
of its triple patterns (SPARQL reads a graph only by pattern matching). So when no triple that
entered or left any of its windows since the last evaluated instant matches a pattern of the
query -- checked on the constants of each pattern, vectorized over the change -- and the
stored data it reads is the same snapshot, the instant's result is the last one's (the
CQELS-style "no relevant change"). The instant is still reported as its own event: the same
result for RSTREAM, an empty difference for ISTREAM / DSTREAM, exactly as for instants whose
windows did not change at all (:meth:`~engine.stream.continuous.InstantEvaluator.repeat`).

The change is read from the transient stores by sequence ranges: the triples with seq in
``[h1, g1)`` entered, those in ``[h0, g0)`` left (``[h0, h1)`` -> ``[g0, g1)``). A triple that
entered and left in between is in both ranges and counts. Not used (:class:`DeltaGuard`'s
``patterns`` is None) for queries that read graphs other than by triple patterns with fixed
graph names: property paths, ``GRAPH ?g``, SERVICE, DESCRIBE.
"""

from __future__ import annotations

import numpy as np

from engine.sparql import algebra as A
from engine.stream.transient import WindowEvicted

__all__ = ["DeltaGuard", "hits_total", "patterns_of", "query_patterns", "relevant_predicates"]


def patterns_of(query: A.Query, refuse) -> list[A.TriplePattern] | None:
    """Every triple pattern of the query's WHERE clause (OPTIONAL, MINUS, EXISTS, GRAPH <g>
    included), or None when ``refuse`` holds for some node of it (or the form has no WHERE
    patterns to read)."""
    if query.form not in ("SELECT", "ASK", "CONSTRUCT"):
        return None
    out: list[A.TriplePattern] = []
    stack = [query.pattern]
    while stack:
        x = stack.pop()
        if refuse(x):
            return None
        if isinstance(x, A.TriplePattern):
            out.append(x)
        elif isinstance(x, (tuple, list)):
            stack.extend(x)
        elif hasattr(x, "__dataclass_fields__"):
            stack.extend(getattr(x, f) for f in x.__dataclass_fields__)
    return out


def _reads_otherwise(x) -> bool:
    """A node that reads graphs other than through its triple patterns."""
    return isinstance(x, (A.PathPattern, A.Service)) or (isinstance(x, A.Graph) and not isinstance(x.name, A.Const))


def query_patterns(query: A.Query) -> list[A.TriplePattern] | None:
    """Every triple pattern of the query's WHERE clause, or None when the query reads graphs
    otherwise (property paths, SERVICE, GRAPH ?g)."""
    return patterns_of(query, _reads_otherwise)


#: built-ins whose value is not a function of the solution (each evaluation differs)
_VOLATILE = frozenset({"NOW", "RAND", "UUID", "STRUUID", "BNODE"})
#: XSD casts are the only calls by IRI known to depend on their arguments alone
_XSD = "http://www.w3.org/2001/XMLSchema#"


def _order_dependent(x) -> bool:
    """A node whose answer may depend on the order the matches come in (which the windows'
    other triples can change: plans are chosen by window size) or on more than the matches:
    LIMIT/OFFSET, SAMPLE, GROUP_CONCAT, volatile built-ins, extension functions (C-SPARQL's
    ``f:timestamp`` reads element times)."""
    if isinstance(x, A.Slice):
        return True
    if isinstance(x, A.Aggregate):
        return x.name in ("SAMPLE", "GROUP_CONCAT")
    if isinstance(x, A.Call):
        return x.op in _VOLATILE
    if isinstance(x, A.FunctionCall):
        return not x.iri.startswith(_XSD)
    return False


def relevant_predicates(query: A.Query) -> tuple[str, ...] | None:
    """The keys of the constant predicates of every triple pattern of ``query`` -- the only
    stream triples that can change its result -- or None when every triple can (a pattern with
    a variable predicate, a graph read otherwise than by patterns: :func:`query_patterns`), or
    when its answer may change without its matches changing (:func:`_order_dependent`): then
    only instants whose windows did not change at all reuse a result."""
    pats = query_patterns(query)
    if pats is None:
        from engine.stream.tiny_closure import relevant_patterns  # noqa: PLC0415

        pats = relevant_patterns(query)   # (`:p+` `:p*` `:p?` paths: :p's triples, tiny_closure)
    if pats is None:
        return None
    stack: list = [query.pattern, query.template]
    while stack:
        x = stack.pop()
        if _order_dependent(x):
            return None
        if isinstance(x, (tuple, list)):
            stack.extend(x)
        elif hasattr(x, "__dataclass_fields__"):
            stack.extend(getattr(x, f) for f in x.__dataclass_fields__)
    keys = []
    for tp in pats:
        if not isinstance(tp.p, A.Const):
            return None
        if tp.p.key not in keys:
            keys.append(tp.p.key)
    return tuple(keys)


class DeltaGuard:
    """Remembers a query's last evaluated instant and decides whether a later instant's window
    change can affect its result. Backs off while the check keeps failing (windows where every
    change matches, like CityBench's observations), so it costs little where it cannot help."""

    MISSES = 1          # failed checks in a row before backing off (a check costs 20-70 µs on a
    #                     woken worker, and where one change matched, the next usually does too)
    BACKOFF_MAX = 256   # instants

    def __init__(self, query: A.Query):
        pats = query_patterns(query)
        self.patterns = pats
        # (dictionary, its size, per pattern (s, p, o) ids or None for a variable, key -> id,
        # the same as an (m, 3) array with -1 for a variable, patterns with an absent constant)
        self._consts: tuple | None = None
        self._memo: tuple | None = None     # (t, sn, ranges, prefix)
        # per window, (store, c, e): no triple with seq in [c, e) of that store matches a pattern
        # (checked once; a seq's triple never changes), for the resolution ``_clean_of``
        self._clean: list = []
        self._clean_of = None
        # (position, the constants there) for a position where every pattern has a constant
        # (the predicate, else the object, else the subject), or None
        self._preds: tuple | None = None
        self._misses = 0
        self._skip = 0
        self._backoff = 1
        self.hits = 0

    def _resolve(self, dictionary, again: bool = False) -> list:
        """The patterns' constants as ids (``(s, p, o)``, None for a variable); a pattern with a
        constant the dictionary does not hold matches no triple and is left out. Ids never
        change (the dictionary is append-only), so a resolution is kept while the dictionary
        object is the same; a constant absent at a resolution can only appear later with an id
        at least the dictionary's size then, so the absent ones are looked up again (``again``,
        a lookup hashes its key in Python: ~10 µs) only when a changed row carries such an id
        where an absent constant stands (:meth:`_clean_rows`), not whenever stream elements
        interned terms."""
        memo = self._consts
        if memo is not None and memo[0] is dictionary and not again:
            return memo[2]
        size = len(dictionary)   # before the lookups: a term interned after one has an id >= size
        known = memo[3] if memo is not None and memo[0] is dictionary else {}
        out = []
        n_absent = 0
        absent_cols = set()
        for tp in self.patterns:
            ids = []
            first_absent = None
            for j, term in enumerate((tp.s, tp.p, tp.o)):
                if isinstance(term, A.Const):
                    i = known.get(term.key)
                    if i is None:
                        i = int(dictionary.lookup(term.key))
                        if i >= 0:
                            known[term.key] = i
                    if i < 0 and first_absent is None:
                        first_absent = j
                    ids.append(i)
                else:
                    ids.append(None)
            if first_absent is None:
                out.append(tuple(ids))
            else:
                n_absent += 1
                absent_cols.add(first_absent)
        arr = np.array([[-1 if i is None else i for i in ids] for ids in out], dtype=np.int64).reshape(-1, 3)
        prev = self._consts
        if prev is None or prev[0] is not dictionary or not np.array_equal(prev[4], arr):
            col = next((j for j in (1, 2, 0) if all(ids[j] is not None for ids in out)), None)
            self._preds = None if col is None else (col, frozenset(ids[col] for ids in out))
        else:
            arr = prev[4]   # the same constants: the clean ranges checked against them still hold
        self._consts = (dictionary, size, out, known, arr, n_absent, tuple(sorted(absent_cols)))
        return out

    def forget(self) -> None:
        self._memo = None

    def remember(self, t: int, sn: int, ranges: list, prefix: bytes | None) -> None:
        """The evaluated instant ``t``: its store snapshot, its windows' seq ranges and the
        event's data before the window member (None: not reusable, e.g. an error)."""
        self._memo = None if prefix is None else (t, sn, ranges, prefix)

    @property
    def last(self) -> int | None:
        """The remembered instant."""
        return None if self._memo is None else self._memo[0]

    def ask(self, hopeless: bool = False) -> int:
        """What an evaluated instant does with the guard, in one call (the instant's path):
        0 nothing, 1 remember it (:meth:`remember`), 2 check it (:meth:`reusable`) and remember
        it. ``hopeless``: the change is known to match (not checked, but remembered, so the
        next check reads one step's change). The same decisions as :meth:`wants_check` then
        :meth:`checks_next` (the back-off counts down on unchecked instants)."""
        if self._memo is None or hopeless:
            return 1
        if self._skip > 0:
            self._skip -= 1
            return 1 if self._skip == 0 else 0
        return 2

    def wants_check(self) -> bool:
        if self._memo is None:
            return False
        if self._skip > 0:
            self._skip -= 1
            return False
        return True

    def checks_next(self) -> bool:
        """Whether the next instant is checked (no back-off left)."""
        return self._skip == 0

    def reusable(self, windows, sn: int, ranges: list, dictionary, stored_changed: bool = False) -> bytes | None:
        """The remembered prefix if no triple entering or leaving the windows between the
        remembered ranges and ``ranges`` matches a pattern, else None.

        On a hit the memory moves to the new ranges (the result there is the remembered one),
        so the next check reads one step's change, not everything since the last evaluation.
        What a window's check read and found clean is kept as a seq range per window
        (:attr:`_clean`): a triple leaving it was usually checked when it entered, and is not
        read again."""
        memo = self._memo
        if memo is None or memo[1] != sn or stored_changed:
            return self._miss()
        self._resolve(dictionary)
        consts = self._consts[4]
        if self._clean_of is not consts:
            self._clean_of = consts
            self._clean = [None] * len(ranges)
        clean = self._clean
        if len(clean) != len(ranges):
            clean = self._clean = [None] * len(ranges)
        for k, (bw, (h0, h1), (g0, g1)) in enumerate(zip(windows, memo[2], ranges, strict=True)):
            if (h0, h1) == (g0, g1):
                continue
            if g0 < h0 or g1 < h1:
                return self._miss()
            if not len(consts) and not self._consts[6]:   # no pattern at all (none can match)
                continue
            store = bw.store
            if g0 < g1 and g0 < store.live_start:   # freed by the GC meanwhile: the change is unknown
                return self._miss()
            cl = clean[k]
            if cl is None or cl[0] is not store or not (cl[1] <= h1 <= cl[2]):
                c = e = h1    # nothing known clean next to the entered part
            else:
                c, e = cl[1], cl[2]
            try:
                # entered: [h1, g1), of which [h1, e) is known clean
                if g1 > e:
                    if not self._clean_rows(store.read(e, g1)[0], consts):
                        clean[k] = (store, c, e)
                        return self._miss()
                    e = g1
                # left: [h0, g0), of which [h1, g0) also entered, and [c, e) is known clean
                a, b = h0, min(g0, h1)
                if a < b and a < c:
                    if not self._clean_rows(store.read(a, min(b, c))[0], consts):
                        clean[k] = (store, c, e)
                        return self._miss()
                    if b >= c:
                        c = a
            except WindowEvicted:   # freed by the GC meanwhile: the change is unknown
                return self._miss()
            clean[k] = (store, c, e)
        self._misses = 0
        self._backoff = 1
        self.hits += 1
        _HITS[0] += 1
        self._memo = (memo[0], sn, ranges, memo[3])
        return memo[3]

    def _clean_rows(self, rows: np.ndarray, consts: np.ndarray) -> bool:
        """No row matches a pattern. A few dozen rows (one step's change) are first tested on
        one position in Python (numpy's per-call overhead exceeds the work there): when every
        pattern has a constant there (the predicate, usually) and no row carries one of them,
        none matches.
        Rows carrying an id interned since the resolution where an absent constant stands
        make the absent constants looked up again; if one is there now: not clean."""
        n = len(rows)
        if not n:
            return True
        memo = self._consts
        small = n <= _SMALL
        for j in memo[6]:
            col = rows[:, j]
            if (max(col.tolist()) if small else int(col.max())) >= memo[1]:
                self._resolve(memo[0], again=True)
                if self._consts[4] is not consts:
                    return False   # a constant is in the dictionary now: the check starts afresh
                break
        preds = self._preds
        if preds is not None and small and preds[1].isdisjoint(rows[:, preds[0]].tolist()):
            return True
        return not _any_match(rows, consts)

    def _miss(self) -> None:
        self._misses += 1
        if self._misses >= self.MISSES:
            self._skip = self._backoff
            self._backoff = min(self.BACKOFF_MAX, 4 * self._backoff)
            self._misses = 0
        return None


def _any_match(rows: np.ndarray, consts) -> bool:
    """Whether some row matches some pattern's constants: one broadcast comparison of the rows
    against every pattern at once (``consts``: the ``(m, 3)`` id array of :meth:`DeltaGuard._resolve`,
    -1 for a variable), a handful of numpy calls however many patterns the query has."""
    if not len(consts):
        return False
    var = consts[None, :, :] < 0
    step = max(1, _CHUNK // len(consts))   # bounded temporaries on a large change
    for a in range(0, len(rows), step):
        eq = rows[a:a + step, None, :] == consts[None, :, :]
        eq |= var
        if eq.all(axis=2).any():
            return True
    return False


#: instants reused, all queries of the process (tests, diagnostics); a list: counting must not
#: write a class attribute (that drops the interpreter's caches of the class's attributes)
_HITS = [0]


def hits_total() -> int:
    """Instants the delta check reused, all queries of the process."""
    return _HITS[0]


_CHUNK = 1 << 16   # rows x patterns compared per step
_SMALL = 512       # rows tested on their predicates in Python first
