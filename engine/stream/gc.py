"""Garbage collection of stream data: free what no registered window can read any more.

A stream's transient store may free the triples below the smallest horizon of the windows
reading it (each window's horizon from its query's next instant,
:meth:`~engine.stream.transient.TransientStore.horizon_for`); a stream no query reads keeps
nothing. The absorb log may drop the records below every query's next instant and every
stream's progress (no present or, best effort, future query evaluates an instant below them).
Run by the scheduler after each instant, after a query is deleted, and by a transient store
that runs out of budget (its ``horizon`` callback).
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.stream import pred_times
from engine.stream.absorb import AbsorbLog
from engine.stream.registry import Registry
from engine.stream.transient import NO_READERS, combine_horizons

__all__ = ["stream_horizon", "absorb_horizon", "collect"]


def stream_horizon(reg: Registry, name: str) -> int | None:
    """GC horizon of a stream over the windows of the queries reading it."""
    return _horizons(reg, name, index=False)[0]


def _horizons(reg: Registry, name: str, index: bool = True) -> tuple[int | None, int | None]:
    """:func:`stream_horizon`, and (``index``) the horizon of the stream's element-time index
    (:mod:`engine.stream.pred_times`, read by time windows only): the windows of each query's
    last evaluated or reused instant (its state), which its next check compares with."""
    # a window's horizon never decreases with its next instant: per store and window (by value:
    # thousands of queries of one shape read equal windows) only the smallest next instant counts
    # (None, not known yet, keeps everything). The key is a tuple of ints: hashing the Window
    # dataclass per query was most of a GC pass with 10,000 queries registered.
    least: dict[tuple, list] = {}
    with reg.cv:
        for q in reg.queries.values():
            nxt = q.trigger.next_instant
            lane_t = q.lane_t   # the heavy lane evaluates this instant now (engine.stream.lanes)
            if lane_t is not None and nxt is not None and lane_t < nxt:
                nxt = lane_t
            prev = None if nxt is None else nxt - q.trigger.step
            st = q.state   # the instant the next check compares with (older after an unchanged run)
            if st is not None and prev is not None and st[0] < prev:
                prev = st[0]
            if nxt is not None and q.cq.mode != "RSTREAM":
                # I/DSTREAM: keep the last evaluated instant's windows too; after a restart it is
                # evaluated again to difference the next instant against (InstantEvaluator.prime)
                nxt = prev
            for bw in q.windows:
                if bw.stream != name:
                    continue
                if nxt is None:
                    return None, None
                w = bw.window
                k = (id(bw.store), w.range_ms, w.step_ms, w.triples)
                hit = least.get(k)
                if hit is None:
                    least[k] = [bw.store, w, nxt, prev]
                else:
                    if nxt < hit[2]:
                        hit[2] = nxt
                    if prev < hit[3]:
                        hit[3] = prev
    if not least:
        return NO_READERS, NO_READERS
    h = combine_horizons(store.horizon_for(w, nxt) for store, w, nxt, _ in least.values())
    if not index:   # (the stream's own horizon only: one horizon_for per distinct window)
        return h, None
    return h, combine_horizons(store.horizon_for(w, prev) if w.range_ms is not None else NO_READERS
                               for store, w, _, prev in least.values())


def absorb_horizon(reg: Registry) -> int | None:
    """No instant below this will be evaluated by a present or (best effort) future query,
    nor compared with: a query's unchanged-instant and relevance checks ask the log whether an
    absorbed fact became visible after its last evaluated (or reused) instant, so the records
    above that instant stay."""
    with reg.cv:
        h = None
        for q in reg.queries.values():
            nxt = q.trigger.next_instant
            if q.lane_t is not None and nxt is not None and q.lane_t < nxt:
                nxt = q.lane_t
            if nxt is not None:
                st = q.state
                if st is not None and st[0] < nxt:
                    nxt = st[0] + 1
                dl = getattr(q.evaluator, "delta_last", None)   # the delta check's remembered instant
                if dl is not None and dl < nxt:
                    nxt = dl + 1
            if nxt is None:
                ps = [reg.streams[s].published for s in q.streams if s in reg.streams]
                ps = [p for p in ps if p is not None]
                if not ps:
                    return None
                nxt = min(ps)
            h = nxt if h is None else min(h, nxt)
        for st in reg.streams.values():
            if st.published is not None:
                h = st.published if h is None else min(h, st.published)
        return None if h is None else h - 1


def collect(reg: Registry, absorb_log: AbsorbLog, stream_names: Iterable[str]) -> None:
    """GC the transient stores of ``stream_names`` and the absorb log."""
    for n in stream_names:
        with reg.cv:
            st = reg.streams.get(n)
        if st is None:
            continue
        h, ih = _horizons(reg, n)
        st.store.gc(h)
        if ih == NO_READERS:
            pred_times.forget(st.store)
        else:
            pt = pred_times.known(st.store)
            if pt is not None:
                pt.trim(ih)
    absorb_log.prune(absorb_horizon(reg))
