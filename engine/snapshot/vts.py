"""Vector timestamps and bounded snapshot scalarization (Wukong+S section 4.3).

Vector timestamps
-----------------
A VTS maps a stream name to an integer: for snapshots, the id of the last
batch of that stream an injector has *fully* inserted (batches of a stream are
inserted in order); for triggers, the progress (ms) an injector has published
after inserting. :class:`VectorClock` is one injector's Local_VTS;
:class:`StableVTS` keeps the Local_VTS of every injector (one per node or per
injector thread; one node with several injectors here, any number in general)
and their component-wise minimum, the Stable_VTS: what every injector has
inserted. A stream no injector has reported yet has no component. Every
injector must report every batch -- also one with no triples for its shard --
or the stable VTS stalls. The stable VTS never goes back: an injector added
later starts from the current stable VTS.

SN-VTS plan (bounded snapshot scalarization)
--------------------------------------------
One-shot queries read a scalar snapshot number (SN), not a VTS.
:class:`SnapshotPlan` assigns each batch, when it is dispatched (once, before
it is split over shards/injectors), the SN of the currently *open* snapshot;
sealing the open snapshot publishes its plan entry ``SN -> VTS`` (for every
stream, the last batch that belongs to snapshots ``<= SN``) and opens the
next SN. The Stable_SN is the largest sealed SN whose VTS is covered by the
Stable_VTS (component-wise ``<=``). Hence:

* all triples of a batch carry one SN, so a one-shot query reading
  ``sn <= Stable_SN`` sees a committed batch entirely or not at all;
* a batch's SN is ``>=`` the SN of every earlier batch of its stream (SNs are
  assigned in dispatch order), so the visible part of a stream is a prefix;
* Stable_SN only grows: monotonic reads.

Bounded: at most ``max_unstable`` sealed SNs wait for insertion; while that
many wait, new batches join the open SN (staleness traded for memory), so a
key needs at most ``max_unstable + 2`` versions (stable, waiting, open) --
older versions may be merged (compaction). ``batches_per_sn`` controls the
interval of the plan: 1 = every batch its own SN (freshest reads). The open
SN is sealed as soon as there is room (on :meth:`SnapshotPlan.assign` and
:meth:`SnapshotPlan.advance`), so a batch becomes visible once every injector
has inserted it and the coordinator calls ``advance`` -- which keeps the
contract's "visible at the latest once the stream's progress passed it".

How one-shot queries use it
---------------------------
1. The dispatcher calls ``sn = plan.assign(stream, batch)`` and gives ``sn``
   to every injector with the batch; the injectors append the batch's timeless
   triples as delta segments tagged ``sn`` and then ``stable.report(injector,
   stream, batch)``.
2. The coordinator calls ``plan.advance(stable.stable())`` after reports; it
   returns the Stable_SN (monotone).
3. A one-shot query takes ``sn = plan.stable_sn`` once at its start and reads
   base + delta segments with ``segment.sn <= sn`` for the whole query.
   (With a single in-process writer that publishes a new immutable
   :class:`engine.kv.store.Snapshot` per commit, the equivalent is: commit the
   deltas of all batches of one SN in one ``Store.commit`` when that SN becomes
   stable, and let queries read ``store.snapshot()``.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["VectorClock", "StableVTS", "SnapshotPlan", "PlanEntry", "vts_min", "vts_max", "vts_le"]


def vts_le(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """``a <= b`` component-wise; a component missing from ``b`` is below every value."""
    for k, v in a.items():
        w = b.get(k)
        if w is None or v > w:
            return False
    return True


def vts_min(vectors: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Component-wise minimum; only the components present in every vector."""
    out: dict[str, int] | None = None
    for v in vectors:
        if out is None:
            out = dict(v)
            continue
        out = {k: min(x, v[k]) for k, x in out.items() if k in v}
    return out or {}


def vts_max(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Component-wise maximum (union of components)."""
    out = dict(a)
    for k, v in b.items():
        if k not in out or v > out[k]:
            out[k] = v
    return out


class VectorClock:
    """One injector's Local_VTS: per stream, a value that only grows."""

    __slots__ = ("_v",)

    def __init__(self, values: Mapping[str, int] | None = None):
        self._v: dict[str, int] = {k: int(x) for k, x in (values or {}).items()}

    def advance(self, stream: str, value: int) -> int:
        """Raise the component of ``stream`` to ``value`` (lower: no-op). Returns it."""
        value = int(value)
        cur = self._v.get(stream)
        if cur is None or value > cur:
            self._v[stream] = value
            return value
        return cur

    def get(self, stream: str) -> int | None:
        return self._v.get(stream)

    def snapshot(self) -> dict[str, int]:
        return dict(self._v)

    def __repr__(self) -> str:
        return f"VectorClock({self._v})"


class StableVTS:
    """Local_VTS of every injector and their component-wise minimum (thread-safe)."""

    def __init__(self, injectors: Iterable[str] = ()):
        self._locals: dict[str, VectorClock] = {}
        self._stable: dict[str, int] = {}
        self._lock = threading.Lock()
        for name in injectors:
            self.add_injector(name)

    @property
    def injectors(self) -> tuple[str, ...]:
        return tuple(self._locals)

    def add_injector(self, name: str) -> VectorClock:
        """A new injector starts at the current stable VTS (so the stable VTS never drops)."""
        with self._lock:
            if name in self._locals:
                return self._locals[name]
            vc = VectorClock(self._stable)
            self._locals[name] = vc
            return vc

    def local(self, name: str) -> VectorClock:
        return self._locals[name]

    def report(self, injector: str, stream: str, value: int) -> dict[str, int]:
        """Injector ``injector`` has inserted ``stream`` up to ``value``. Returns the stable VTS."""
        with self._lock:
            self._locals[injector].advance(stream, value)
            return self._recompute()

    def _recompute(self) -> dict[str, int]:
        cur = vts_min(vc.snapshot() for vc in self._locals.values())
        self._stable = vts_max(self._stable, cur)
        return dict(self._stable)

    def stable(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stable)

    def value(self, stream: str) -> int | None:
        return self._stable.get(stream)


@dataclass(frozen=True)
class PlanEntry:
    """``sn`` holds, for every stream, the batches up to ``vts[stream]`` (cumulative)."""

    sn: int
    vts: Mapping[str, int] = field(default_factory=dict)


class SnapshotPlan:
    """SN-VTS plan with bounded snapshot scalarization (thread-safe)."""

    def __init__(self, *, start_sn: int = 0, max_unstable: int = 2, batches_per_sn: int = 1):
        if max_unstable < 1 or batches_per_sn < 1:
            raise ValueError("max_unstable and batches_per_sn must be >= 1")
        self.max_unstable = int(max_unstable)
        self.batches_per_sn = int(batches_per_sn)
        self._stable_sn = int(start_sn)        # everything up to here is readable
        self._stable_vts: dict[str, int] = {}  # plan VTS of the stable SN
        self._open_sn = int(start_sn) + 1
        self._open_count = 0
        self._cum: dict[str, int] = {}         # last batch assigned per stream
        self._sealed: list[PlanEntry] = []     # sealed, not yet stable, ascending sn
        self._lock = threading.Lock()

    @property
    def stable_sn(self) -> int:
        """The snapshot a one-shot query starting now reads (never decreases)."""
        return self._stable_sn

    @property
    def stable_plan(self) -> PlanEntry:
        return PlanEntry(self._stable_sn, dict(self._stable_vts))

    @property
    def open_sn(self) -> int:
        return self._open_sn

    @property
    def unstable(self) -> tuple[PlanEntry, ...]:
        """Sealed SNs waiting for their batches to be inserted everywhere."""
        return tuple(self._sealed)

    def assign(self, stream: str, batch: int) -> int:
        """SN of ``batch`` of ``stream`` (batches of a stream in increasing order)."""
        batch = int(batch)
        with self._lock:
            prev = self._cum.get(stream)
            if prev is not None and batch <= prev:
                raise ValueError(f"stream {stream!r}: batch {batch} assigned after batch {prev}")
            self._cum[stream] = batch
            sn = self._open_sn
            self._open_count += 1
            if self._open_count >= self.batches_per_sn:
                self._seal_locked()
            return sn

    def seal(self) -> PlanEntry | None:
        """Seal the open SN now if it has batches and the bound allows."""
        with self._lock:
            return self._seal_locked()

    def _seal_locked(self) -> PlanEntry | None:
        if self._open_count == 0 or len(self._sealed) >= self.max_unstable:
            return None
        entry = PlanEntry(self._open_sn, dict(self._cum))
        self._sealed.append(entry)
        self._open_sn += 1
        self._open_count = 0
        return entry

    def advance(self, stable_vts: Mapping[str, int]) -> int:
        """Move the Stable_SN given the Stable_VTS (batch ids); returns it."""
        with self._lock:
            while True:
                moved = False
                while self._sealed and vts_le(self._sealed[0].vts, stable_vts):
                    e = self._sealed.pop(0)
                    self._stable_sn = e.sn
                    self._stable_vts = dict(e.vts)
                    moved = True
                if self._open_count and self._seal_locked() is not None:
                    moved = True
                if not moved:
                    return self._stable_sn

    def visible(self, stream: str, batch: int) -> bool:
        """Whether a one-shot query at the current Stable_SN sees ``batch`` of ``stream``."""
        v = self._stable_vts.get(stream)
        return v is not None and int(batch) <= v
