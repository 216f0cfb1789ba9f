"""Property paths (SPARQL 1.1 section 9 and 18.4) over the CSR graph index.

A path is evaluated to a pair list (start, end) of id arrays, optionally
restricted to given start nodes. Links, inverses, sequences, alternatives and
negated property sets keep multiset semantics (they are the BGP/UNION
rewrites of the spec); ``p*``, ``p+`` and ``p?`` return distinct pairs.
``p+`` is a breadth-first search over all start nodes at once: the frontier is
a pair list (origin, node), each round expands the distinct frontier nodes
through the CSR once and drops pairs already visited (sorted int64 keys,
searchsorted), so the Python cost is one round per path length, not per node.

Zero-length paths: ``p*`` and ``p?`` match (x, x) for every node of the graph
(subjects and objects) when both ends are free, and for a constant end even
when the graph does not hold it (the caller gives the constant an id).
"""

from __future__ import annotations

import numpy as np

from engine.arrays import unique
from engine.errors import QueryEvaluationError, RowBudgetExceeded
from engine.exec.bindings import key_join
from engine.exec.context import LOCAL_BASE
from engine.plan.order import IN, OUT
from engine.sparql.algebra import (
    PathAlt,
    PathInv,
    PathLink,
    PathNegated,
    PathOneOrMore,
    PathSeq,
    PathZeroOrMore,
    PathZeroOrOne,
)

_EMPTY = np.zeros(0, dtype=np.int64)
#: a negated property set from given start nodes expands each other predicate's adjacency when
#: the graph holds at least this many triples per predicate (an expansion costs ~10-20 µs, a
#: scan of every triple ~40 ns a triple), else it scans every triple once
NEGATED_EXPAND_TRIPLES = 512


def inverse(path):
    if isinstance(path, PathLink):
        return PathInv(path)
    if isinstance(path, PathInv):
        return path.path
    if isinstance(path, PathSeq):
        return PathSeq(inverse(path.right), inverse(path.left))
    if isinstance(path, PathAlt):
        return PathAlt(inverse(path.left), inverse(path.right))
    if isinstance(path, PathZeroOrMore):
        return PathZeroOrMore(inverse(path.path))
    if isinstance(path, PathOneOrMore):
        return PathOneOrMore(inverse(path.path))
    if isinstance(path, PathZeroOrOne):
        return PathZeroOrOne(inverse(path.path))
    if isinstance(path, PathNegated):
        return PathNegated(path.inverse, path.forward)
    raise TypeError(f"not a path: {path!r}")


def _codes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, dense code of each element)."""
    u, inv = np.unique(x, return_inverse=True)
    return u, inv.reshape(-1).astype(np.int64)


def _distinct_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (a, b) pairs, as one int64 key per pair over dense codes (a
    plain int64 sort, not a row-wise sort of a 2-column array)."""
    if len(a) <= 1:
        return a, b
    ua, ca = _codes(a)
    ub, cb = _codes(b)
    keys = unique(ca * np.int64(len(ub)) + cb)
    return ua[keys // len(ub)], ub[keys % len(ub)]


class _KeySet:
    """A growing set of int64 keys kept as sorted runs of geometrically
    decreasing size (a log-structured merge): a lookup is one binary search
    per run, and an insert merges only runs of similar size, so n inserted
    keys cost O(n log n) in all instead of a re-sort of the whole set per
    BFS level."""

    def __init__(self) -> None:
        self.runs: list[np.ndarray] = []
        self.size = 0

    def fresh(self, keys: np.ndarray) -> np.ndarray:
        """The keys (sorted, distinct) that are not in the set."""
        keep = np.ones(len(keys), dtype=bool)
        for r in self.runs:
            pos = np.searchsorted(r, keys)
            pos[pos >= len(r)] = len(r) - 1
            keep &= r[pos] != keys
        return keys[keep]

    def add(self, keys: np.ndarray) -> None:
        """Add sorted distinct keys that are not in the set yet."""
        if not len(keys):
            return
        runs = self.runs
        runs.append(keys)
        self.size += len(keys)
        while len(runs) > 1 and len(runs[-2]) <= 2 * len(runs[-1]):
            b = runs.pop()
            a = runs.pop()
            m = np.concatenate([a, b])
            m.sort(kind="stable")  # two sorted runs: a linear merge
            runs.append(m)

    def all(self) -> np.ndarray:
        if not self.runs:
            return _EMPTY
        m = np.concatenate(self.runs)
        m.sort(kind="stable")
        return m


class PathEvaluator:
    """Evaluates paths over one graph view. ``lookup(iri_key) -> id or -1``."""

    def __init__(self, graph, lookup, check=None, max_rows=None):
        self.graph = graph
        self.lookup = lookup
        self.check = check or (lambda: None)
        self.max_rows = max_rows
        self._negated_edges: dict = {}

    def _budget(self, n):
        if self.max_rows is not None and n > self.max_rows:
            raise RowBudgetExceeded(f"property path of {n} rows exceeds the row budget of {self.max_rows}")

    def pid(self, iri: str) -> int:
        return int(self.lookup("<" + iri + ">"))

    def all_nodes(self) -> np.ndarray:
        return np.asarray(self.graph.vertices(), dtype=np.int64)

    def pairs(self, path, starts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) arrays of the path, start restricted to ``starts``."""
        self.check()
        g = self.graph
        if isinstance(path, PathLink):
            pid = self.pid(path.iri)
            if pid < 0:
                return _EMPTY, _EMPTY
            if starts is None:
                s, o = g.scan(pid)
                return np.asarray(s, np.int64), np.asarray(o, np.int64)
            rows, nbrs = g.expand(pid, OUT, starts)
            return starts[rows], np.asarray(nbrs, np.int64)
        if isinstance(path, PathInv):
            inner = path.path
            if isinstance(inner, PathLink):
                pid = self.pid(inner.iri)
                if pid < 0:
                    return _EMPTY, _EMPTY
                if starts is None:
                    s, o = g.scan(pid)
                    return np.asarray(o, np.int64), np.asarray(s, np.int64)
                rows, nbrs = g.expand(pid, IN, starts)
                return starts[rows], np.asarray(nbrs, np.int64)
            return self.pairs(inverse(inner), starts)
        if isinstance(path, PathSeq):
            a, m = self.pairs(path.left, starts)
            if len(a) == 0:
                return _EMPTY, _EMPTY
            um = unique(m)
            m2, b = self.pairs(path.right, um)
            li, ri = key_join(m, m2, self.max_rows)
            return a[li], b[ri]
        if isinstance(path, PathAlt):
            a1, b1 = self.pairs(path.left, starts)
            a2, b2 = self.pairs(path.right, starts)
            return np.concatenate([a1, a2]), np.concatenate([b1, b2])
        if isinstance(path, PathNegated):
            return self._negated(path, starts)
        if isinstance(path, PathOneOrMore):
            return self._closure(path.path, starts)
        if isinstance(path, PathZeroOrMore):
            a, b = self._closure(path.path, starts)
            z = self.all_nodes() if starts is None else starts
            return _distinct_pairs(np.concatenate([a, z]), np.concatenate([b, z]))
        if isinstance(path, PathZeroOrOne):
            a, b = self.pairs(path.path, starts)
            z = self.all_nodes() if starts is None else starts
            return _distinct_pairs(np.concatenate([a, z]), np.concatenate([b, z]))
        raise TypeError(f"not a path: {path!r}")

    def _negated(self, path: PathNegated, starts):
        if starts is not None and path not in self._negated_edges:
            got = self._negated_from(path, starts)
            if got is not None:
                return got
        # the matching edges are found once per evaluator, sorted by start, so a
        # closure over a negated set does not rescan the graph at every level
        hit = self._negated_edges.get(path)
        if hit is None:
            s, p, o = (np.asarray(x, np.int64) for x in self.graph.scan_all())
            outs_a, outs_b = [], []
            fwd = [self.pid(i) for i in path.forward]
            inv = [self.pid(i) for i in path.inverse]
            if path.forward or not path.inverse:
                keep = ~np.isin(p, np.array(fwd, dtype=np.int64))
                outs_a.append(s[keep])
                outs_b.append(o[keep])
            if path.inverse:
                keep = ~np.isin(p, np.array(inv, dtype=np.int64))
                outs_a.append(o[keep])
                outs_b.append(s[keep])
            a = np.concatenate(outs_a)
            b = np.concatenate(outs_b)
            order = np.argsort(a, kind="stable")
            hit = self._negated_edges[path] = (a[order], b[order])
        a, b = hit
        if starts is None:
            return a, b
        starts = unique(starts)
        lo = np.searchsorted(a, starts, "left")
        cnt = np.searchsorted(a, starts, "right") - lo
        total = int(cnt.sum())
        if self.max_rows is not None and total > self.max_rows:
            raise RowBudgetExceeded(f"property path of {total} rows exceeds the row budget of {self.max_rows}")
        rows = np.repeat(np.arange(len(starts), dtype=np.int64), cnt)
        pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt - lo, cnt)
        return starts[rows], b[pos]

    def _negated_from(self, path: PathNegated, starts: np.ndarray):
        """The negated set's edges from ``starts`` by each other predicate's adjacency
        (the same multiset, grouped by start as the scan's answer): None when the
        graph has so many predicates that one scan of every triple costs less. Why:
        ``<x> !(rdf:type) ?o`` scanned all 1M triples (44 ms) to keep a dozen."""
        g = self.graph
        preds = getattr(g, "predicates", None)
        if preds is None or not hasattr(g, "expand"):
            return None
        preds = np.asarray(preds(), dtype=np.int64)
        if len(preds) * NEGATED_EXPAND_TRIPLES > len(g):  # (an expansion's fixed cost against the scan's per triple)
            return None
        starts = unique(starts)
        parts = []
        for names, direction, wanted in ((path.forward, OUT, path.forward or not path.inverse),
                                         (path.inverse, IN, path.inverse)):
            if not wanted:
                continue
            skip = {self.pid(i) for i in names}
            for pid in preds.tolist():
                if pid in skip:
                    continue
                self.check()
                rows, nbrs = g.expand(pid, direction, starts)
                if len(rows):
                    parts.append((np.asarray(rows, np.int64), np.asarray(nbrs, np.int64)))
        if not parts:
            return _EMPTY, _EMPTY
        rows = np.concatenate([r for r, _ in parts])
        nbrs = np.concatenate([b for _, b in parts])
        self._budget(len(rows))
        order = np.argsort(rows, kind="stable")
        return starts[rows[order]], nbrs[order]

    def _closure(self, path, starts):
        """Distinct pairs (x, y) with a path of length >= 1 from x to y.

        Breadth-first from all origins at once: a pair (origin, node) enters
        the frontier once, so every edge is expanded once per origin that
        reaches it (whatever the inner path: alternatives, inverses). Pairs
        are int64 keys (origin code * node count + node code) over dense
        codes; the visited set is a _KeySet. Each level checks the deadline
        and charges the visited pairs and the new frontier to the row budget.
        """
        a, b = self.pairs(path, starts)
        a, b = _distinct_pairs(a, b)
        if len(a) == 0:
            return _EMPTY, _EMPTY
        origins, ocode = _codes(a)
        # Node codes: a store id is its own code when (origins x 2^40) fits
        # the key; otherwise dense codes over the graph's vertices and these
        # ends (every node a further step reaches is one of them: a zero-length
        # inner path only returns its starts).
        nodes = None
        width = np.int64(LOCAL_BASE)
        if int(b.max()) >= LOCAL_BASE or len(origins) >= (1 << 62) // LOCAL_BASE:
            nodes = np.union1d(self.all_nodes(), b)
            width = np.int64(len(nodes))
        seen = _KeySet()
        fresh = unique(ocode * width + self._node_codes(nodes, b))
        seen.add(fresh)
        while len(fresh):
            front_o = fresh // width
            front_n = fresh % width if nodes is None else nodes[fresh % width]
            self.check()
            m, nxt = self.pairs(path, unique(front_n))
            if len(m) == 0:
                break
            li, ri = key_join(front_n, m, self.max_rows)
            self._budget(seen.size + len(li))
            if len(li) == 0:
                break
            self.check()
            keys = unique(front_o[li] * width + self._node_codes(nodes, nxt)[ri])
            del li, ri
            fresh = seen.fresh(keys)
            seen.add(fresh)
        keys = seen.all()
        return origins[keys // width], (keys % width if nodes is None else nodes[keys % width])

    @staticmethod
    def _node_codes(nodes, ids: np.ndarray) -> np.ndarray:
        if nodes is None:
            if len(ids) and int(ids.max()) >= LOCAL_BASE:  # graph edges only hold store ids
                raise QueryEvaluationError("property path reached a term outside the graph")
            return ids
        pos = np.minimum(np.searchsorted(nodes, ids), len(nodes) - 1)
        if not (nodes[pos] == ids).all():
            raise QueryEvaluationError("property path reached a term outside the graph")
        return pos
