"""A brute-force model of a graph's expand, for checking the indexed readers against."""

from __future__ import annotations

from engine.kv.graph import OUT


def model_expand(model, pid: int, direction: int, vids) -> tuple[list[int], list[int]]:
    """(rows, neighbours) of ``GraphIndex.expand`` over a set of (s, p, o) id triples."""
    rows, nbrs = [], []
    for i, v in enumerate(vids):
        if direction == OUT:
            nb = sorted(o for s, p, o in model if p == pid and s == v)
        else:
            nb = sorted(s for s, p, o in model if p == pid and o == v)
        rows += [i] * len(nb)
        nbrs += nb
    return rows, nbrs
