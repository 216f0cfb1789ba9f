"""The generated instant's window indexes, kept across instants (:mod:`engine.stream.tiny_gen`).

A sliding window's instant used to rebuild, per pattern class, what its join reads of the
windows: the matching pairs the stored part lacks (a list filtered from the class's counts)
and, for a probe step, an ``s -> [o]`` / ``o -> [s]`` dict of them merged with the stored
pairs' lists -- work in the number of pairs in the window, every instant, while only the pairs
that entered or left since the last instant changed. :class:`WindowIndex` keeps both, updated
by those transitions (a pair's count going 0 -> 1 or 1 -> 0, which
:meth:`~engine.stream.tiny_gen.GenQuery._window` reports in the order they happen), so an
instant costs in the pairs that changed.

Exact by construction: a class's pairs are kept in the order of its counts' dict (insertion
order; a pair that left and came back goes last in both), a merged list is the stored
values followed by the window's in that order -- what the rebuild gave. Anything that makes
the transitions incomplete (a window matched afresh, a new store snapshot or constants, an
instant whose transitions were not applied) rebuilds from the counts. Tests compare with
:attr:`~engine.stream.tiny_gen.GenQuery.KEEP_INDEX` off.
"""

from __future__ import annotations

__all__ = ["WindowIndex", "kept_total"]

#: instants whose window indexes were updated from transitions rather than rebuilt (tests: taken)
_KEPT = [0]


def kept_total() -> int:
    return _KEPT[0]


class WindowIndex:
    """Per pattern class: the window's pairs the stored part lacks (a dict pair -> None, ordered
    as the class's counts) and its merged probe indexes, built on first use."""

    __slots__ = ("skey", "fresh", "probe", "_cls")

    def __init__(self, skey, sidx: list, M: list):
        self.skey = skey     # the stored part these were made against (GenQuery._sidx, by identity)
        self._cls = {id(d): c for c, d in enumerate(M)}
        fresh = []
        for st, d in zip(sidx, M, strict=True):
            sset = st[0]
            fresh.append({x: None for x in d if x not in sset} if sset else dict.fromkeys(d))
        self.fresh = fresh
        # per class [s -> stored + window o's, o -> stored + window s's] (None: not asked yet)
        self.probe = [[None, None] for _ in M]

    def apply(self, sidx: list, trans: list) -> None:
        """The transitions ``(counts dict, pair, entered)`` of one instant, in order."""
        cls = self._cls
        fresh = self.fresh
        probe = self.probe
        for d, k, entered in trans:
            c = cls[id(d)]
            st = sidx[c]
            if entered:
                if k in st[0]:
                    continue
                fresh[c][k] = None
                for j, ix in enumerate(probe[c]):
                    if ix is None:
                        continue
                    key, val = (k[0], k[1]) if j == 0 else (k[1], k[0])
                    lst = ix.get(key)
                    if lst is None:
                        base = st[1 + j]
                        ix[key] = (base[key] + [val]) if base and key in base else [val]
                    else:
                        lst.append(val)
            else:
                f = fresh[c]
                if k not in f:
                    continue   # (a stored pair: never in the window's part)
                del f[k]
                for j, ix in enumerate(probe[c]):
                    if ix is None:
                        continue
                    key, val = (k[0], k[1]) if j == 0 else (k[1], k[0])
                    lst = ix[key]
                    # (val is in the window's part only: the stored part lacks the pair)
                    for i in range(len(lst) - 1, -1, -1):
                        if lst[i] == val:
                            del lst[i]
                            break
                    base = st[1 + j]
                    if len(lst) == (len(base.get(key, ())) if base else 0):
                        del ix[key]
        _KEPT[0] += 1

    def index(self, c: int, j: int, st: list, build) -> dict:
        """Class ``c``'s merged probe index (``j`` 1: by subject, 2: by object) over the stored
        index ``st[j]``, made from the window's pairs on first use (``build``: tiny_gen's
        ``_index``)."""
        ix = self.probe[c][j - 1]
        if ix is None:
            w = self.fresh[c]
            base = st[j]
            ix = build(list(w), j == 2) if w else {}
            if w and base:
                for key, lst in ix.items():
                    sv = base.get(key)
                    if sv:
                        ix[key] = sv + lst
            self.probe[c][j - 1] = ix
        return ix
