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

from engine.errors import RowBudgetExceeded
from engine.exec.algebra import (
    PathAlt,
    PathInv,
    PathLink,
    PathNegated,
    PathOneOrMore,
    PathSeq,
    PathZeroOrMore,
    PathZeroOrOne,
)
from engine.exec.bindings import key_join
from engine.exec.planner import IN, OUT

_EMPTY = np.zeros(0, dtype=np.int64)


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


def _distinct_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(a) <= 1:
        return a, b
    m = np.unique(np.stack([a, b], axis=1), axis=0)
    return m[:, 0].copy(), m[:, 1].copy()


class PathEvaluator:
    """Evaluates paths over one graph view. ``lookup(iri_key) -> id or -1``."""

    def __init__(self, graph, lookup, check=None, max_rows=None):
        self.graph = graph
        self.lookup = lookup
        self.check = check or (lambda: None)
        self.max_rows = max_rows

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
            um = np.unique(m)
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
        if starts is not None:
            m = np.isin(a, starts)
            a, b = a[m], b[m]
        return a, b

    def _closure(self, path, starts):
        """Distinct pairs (x, y) with a path of length >= 1 from x to y."""
        a, b = self.pairs(path, starts)
        a, b = _distinct_pairs(a, b)
        if len(a) == 0:
            return _EMPTY, _EMPTY
        # origins are coded densely so (origin, node) fits one int64 key
        origins, ocode = np.unique(a, return_inverse=True)
        ocode = ocode.astype(np.int64).reshape(-1)
        width = np.int64(max(int(b.max()), 0) + 1)
        big = int(width) * len(origins) >= (1 << 62)
        visited_o = [ocode]
        visited_n = [b]
        if big:  # fall back to row-wise uniqueness
            seen = np.unique(np.stack([ocode, b], axis=1), axis=0)
        else:
            seen = np.unique(ocode * width + b)
        front_o, front_n = ocode, b
        while len(front_o):
            self.check()
            nodes = np.unique(front_n)
            m, nxt = self.pairs(path, nodes)
            if len(m) == 0:
                break
            li, ri = key_join(front_n, m, self.max_rows)
            no, nn = front_o[li], nxt[ri]
            if len(no) == 0:
                break
            if not big and len(nn) and int(nn.max()) >= int(width):
                # new ids beyond the key width: recode everything with a wider key
                big = True
                seen = np.unique(np.stack([np.concatenate(visited_o), np.concatenate(visited_n)], axis=1), axis=0)
            if big:
                cand = np.unique(np.stack([no, nn], axis=1), axis=0)
                allrows = np.concatenate([seen, cand])
                u, idx, cnt = np.unique(allrows, axis=0, return_index=True, return_counts=True)
                new_mask = (cnt == 1) & (idx >= len(seen))
                new = u[new_mask]
                seen = u
                front_o, front_n = new[:, 0].copy(), new[:, 1].copy()
            else:
                keys = np.unique(no * width + nn)
                pos = np.searchsorted(seen, keys)
                pos[pos >= len(seen)] = 0
                fresh = keys[seen[pos] != keys] if len(seen) else keys
                seen = np.union1d(seen, fresh)
                front_o, front_n = fresh // width, fresh % width
            visited_o.append(front_o)
            visited_n.append(front_n)
            self._budget(sum(len(x) for x in visited_o))
        if big:
            return origins[seen[:, 0]], seen[:, 1].copy()
        return origins[seen // width], seen % width
