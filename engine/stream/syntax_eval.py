"""What the portable continuous-query syntaxes need at evaluation time.

* **Named windows** (RSP-QL ``FROM NAMED WINDOW``, CQELS ``STREAM`` blocks): the windows are
  named graphs only -- RSP-QL's under the window IRI, CQELS' under the stream IRI -- and the
  default graph is SPARQL's: the ``FROM`` graphs, else the store's default graph (as of event
  time ``t``, like ``FROM <urn:jindou:default>``), with every stored named graph when there is
  neither ``FROM`` nor ``FROM NAMED``. C-SPARQL queries keep the plain
  :class:`~engine.stream.continuous.InstantEvaluator` (windows merged into the default graph).
* **C-SPARQL's** ``f:timestamp(?s, ?p, ?o)`` (``f:`` = ``http://larkc.eu/csparql/sparql/jena/ext#``):
  the time (epoch ms, ``xsd:integer``) of the most recent element of the query's windows at the
  instant holding that triple; an error (unbound, FILTER false) when none does, and outside a
  continuous query. The evaluator puts the windows' element times on the query context
  (:class:`ElementTimes`, read from the transient stores' ``window_arrays``).

Queries evaluated here are not maintained incrementally (the manager passes
``incremental=False``): an ``f:timestamp`` value changes when a repeat of a triple arrives,
which leaves the window graph -- a set -- unchanged.
"""

from __future__ import annotations

import numpy as np

from engine.arrays import unique
from engine.exec.context import LOCAL_BASE
from engine.exec.evaluate import DEFAULT_GRAPH_IRI, DatasetView
from engine.exec.functions import register_extension
from engine.exec.result import UNBOUND
from engine.exec.values import ERR
from engine.kv.views import EmptyGraph, merged_view
from engine.sparql.csparql import CSPARQL_F
from engine.stream.continuous import InstantEvaluator
from engine.terms import Literal, to_key

__all__ = ["TIMESTAMP_FN", "ElementTimes", "WindowedEvaluator"]

TIMESTAMP_FN = CSPARQL_F + "timestamp"
_XSD_INTEGER = "http://www.w3.org/2001/XMLSchema#integer"
_ROW = np.dtype((np.void, 24))   # one (s, p, o) int64 row as a sortable key


def _row_keys(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows, dtype=np.int64).view(_ROW).ravel()


class ElementTimes:
    """The most recent element time of each distinct triple of a query's windows at one
    instant (built on first use: one sort of the windows' rows)."""

    def __init__(self, windows, t: int):
        self.windows = windows
        self.t = int(t)
        self._keys: np.ndarray | None = None
        self._tau: np.ndarray | None = None

    def _build(self) -> None:
        parts, taus = [], []
        for bw in self.windows:
            spo, tau = bw.store.window_arrays(bw.window, self.t)
            if len(spo):
                parts.append(spo)
                taus.append(tau)
        if not parts:
            self._keys, self._tau = np.zeros(0, dtype=_ROW), np.zeros(0, dtype=np.int64)
            return
        spo = np.concatenate(parts) if len(parts) > 1 else parts[0]
        tau = np.concatenate(taus) if len(taus) > 1 else taus[0]
        keys = _row_keys(spo)
        order = np.lexsort((tau, keys))        # by triple, then by time: the last of a run is the latest
        keys, tau = keys[order], np.asarray(tau, dtype=np.int64)[order]
        last = np.ones(len(keys), dtype=bool)
        last[:-1] = keys[1:] != keys[:-1]
        self._keys, self._tau = keys[last], tau[last]

    def latest(self, rows: np.ndarray) -> np.ndarray:
        """The latest time of each (s, p, o) row (int64 ids), -1 where no element holds it."""
        if self._keys is None:
            self._build()
        q = _row_keys(rows)
        out = np.full(len(q), -1, dtype=np.int64)
        if len(self._keys) == 0 or len(q) == 0:
            return out
        i = np.searchsorted(self._keys, q)
        i = np.minimum(i, len(self._keys) - 1)
        hit = self._keys[i] == q
        out[hit] = self._tau[i[hit]]
        return out


def _timestamp(ctx, args) -> Literal:
    """``f:timestamp(?s, ?p, ?o)`` for one solution (the scalar path of the function evaluator)."""
    times: ElementTimes | None = getattr(ctx, "element_times", None)
    if times is None or len(args) != 3:
        raise ERR.with_traceback(None)
    ids = np.asarray([ctx.lookup(to_key(a)) for a in args], dtype=np.int64)
    if (ids < 0).any():       # a term the store never saw is in no window
        raise ERR.with_traceback(None)
    tau = int(times.latest(ids.reshape(1, 3))[0])
    if tau < 0:
        raise ERR.with_traceback(None)
    return Literal(str(tau), _XSD_INTEGER)


def _timestamp_columns(ctx, cols) -> np.ndarray:
    """``f:timestamp`` over id columns: one lookup of all rows, one intern per distinct time."""
    n = len(cols[0]) if cols else 0
    out = np.full(n, UNBOUND, dtype=np.int64)
    times: ElementTimes | None = getattr(ctx, "element_times", None)
    if times is None or len(cols) != 3 or n == 0:
        return out
    rows = np.stack([np.asarray(c, dtype=np.int64) for c in cols], axis=1)
    tau = times.latest(rows)
    tau[(rows < 0).any(axis=1) | (rows >= LOCAL_BASE).any(axis=1)] = -1   # unbound / terms in no window
    ok = tau >= 0
    if ok.any():
        u = unique(tau[ok])
        ids = np.asarray(ctx.intern([f'"{int(x)}"^^<{_XSD_INTEGER}>' for x in u.tolist()]), dtype=np.int64)
        out[ok] = ids[np.searchsorted(u, tau[ok])]
    return out


register_extension(TIMESTAMP_FN, _timestamp, 3, vector=_timestamp_columns)


class WindowedEvaluator(InstantEvaluator):
    """An :class:`InstantEvaluator` for RSP-QL / CQELS datasets and ``f:timestamp``.

    ``window_gids[i]``: the dictionary id of the IRI naming window ``i``'s graph (None for a
    C-SPARQL query, whose dataset is the plain evaluator's)."""

    def __init__(self, db, query, mode, windows, absorb_log=None, cache=None, *,
                 window_gids: list[int] | None = None, element_times: bool = False):
        super().__init__(db, query, mode, windows, absorb_log, cache, incremental=False)
        self.window_gids = window_gids
        self.element_times = element_times
        self.all_named = window_gids is not None and not self.from_default and not self.from_named
        if self.all_named:
            # SPARQL's default dataset: the store's default graph (as of t) and every stored named graph
            self.from_default = (DEFAULT_GRAPH_IRI,)
            self.reads_stored_default = True

    def compact_dataset(self, ctx, t: int) -> None:
        """Never the one-graph small-window path: that merges every window into the default
        graph, while here windows are named graphs and ``f:timestamp`` reads element times
        from :meth:`dataset`."""
        return None

    def compact_rows(self, ctx, t: int, unbounded: bool = False) -> None:
        """Never the compact path (see :meth:`compact_dataset`), nor its tuple-at-a-time one."""
        return None

    def dataset(self, ctx, t: int, track: bool = False) -> DatasetView:
        ds = super().dataset(ctx, t, track)
        if self.element_times:
            ctx.element_times = ElementTimes(self.windows, t)
        if self.window_gids is None:
            return ds
        wins = self._window_graphs
        default = merged_view(self._stored_parts) if self._stored_parts else EmptyGraph()
        if self.all_named:
            named = dict(ctx.snapshot.named)
        else:
            named = {gid: g for gid, g in ds.named.items() if all(g is not w for w in wins)}
        for gid, g in zip(self.window_gids, wins, strict=True):
            named[gid] = g
        return DatasetView(default, named, ("continuous-named", t))
