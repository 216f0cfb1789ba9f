"""The storage API: what the executor may ask of a graph, and a graph of a shard.

These Protocols are the wire contract of a distributed store: every call that
could cross a process boundary is batched and columnar (numpy arrays in and
out, one call per predicate and batch, never per vertex). The one exception is
:meth:`ShardReader.local_lookup` / :meth:`GraphReader.local_lookup`, Wukong's
in-place execution of selective steps: a per-vertex function handed out only
by a shard living in this process; callers fall back to the batched calls when
it is None.

Conventions of every call:

* ids are term ids from the :class:`TermDictionary`, passed as int64 arrays
  (any integer dtype accepted, returned arrays are int64 unless noted);
  ``pid`` is a Python int; ``direction`` is :data:`OUT` (subject -> objects) or
  :data:`IN` (object -> subjects);
* "grouped by row in input order" means ``(rows, nbrs)`` with ``rows``
  nondecreasing, ``rows[k]`` the position in the input of the vertex whose
  neighbour ``nbrs[k]`` is, and the neighbours of one vertex sorted ascending;
* a predicate or vertex the graph does not hold yields empty results, never an
  error;
* readers are immutable snapshots: results never change under a caller, and
  returned arrays must not be written to.

Which shard owns which vertex is :mod:`engine.kv.partition`'s business only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["OUT", "IN", "PredicateStats", "PredColumns", "GraphReader", "ShardReader", "ShardWriter",
           "TermDictionary", "Lookup"]

OUT, IN = 0, 1

# v -> sorted neighbours of v (a read-only array of the shard's id dtype, empty if none)
Lookup = Callable[[int], np.ndarray]


class PredicateStats(NamedTuple):
    """Triples of a predicate, its distinct subjects and distinct objects."""

    triples: int
    subjects: int
    objects: int


class PredColumns(NamedTuple):
    """One predicate's adjacency inside one shard, columnar (the export/import
    and persistence unit). Two CSRs: ``*_keys`` the sorted unique owned vertices
    (int32 or int64), ``*_indptr`` (len(keys) + 1, int32 or int64),
    ``*_indices`` the concatenated sorted neighbour lists (the keys' dtype).
    OUT: owned subjects -> objects; IN: owned objects -> subjects."""

    out_keys: np.ndarray
    out_indptr: np.ndarray
    out_indices: np.ndarray
    in_keys: np.ndarray
    in_indptr: np.ndarray
    in_indices: np.ndarray


@runtime_checkable
class GraphReader(Protocol):
    """One RDF graph as the executor reads it (a :class:`engine.kv.graph.GraphIndex`
    over shards, or a view from :mod:`engine.kv.views`)."""

    @property
    def n_triples(self) -> int:
        """Number of triples: exact for an index; a merge view reports the sum over
        its graphs (an upper bound, like its :meth:`stats`)."""
        ...

    def predicates(self) -> np.ndarray:
        """Sorted unique predicate ids with at least one triple (int64)."""
        ...

    def stats(self, pid: int) -> PredicateStats:
        """Triple / distinct subject / distinct object counts of ``pid`` (zeros if
        absent); the planner's estimates, so a view may sum over overlapping parts."""
        ...

    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Neighbours of every ``vids[i]`` over ``pid`` in ``direction``: ``(rows, nbrs)``
        grouped by row in input order (duplicates in ``vids`` are answered per row)."""
        ...

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        """Bool array: is ``(s[i], pid, o[i])`` a triple, for each i (len(s) == len(o))."""
        ...

    def index(self, pid: int, direction: int) -> np.ndarray:
        """Sorted unique subjects (OUT) / objects (IN) of ``pid`` (Wukong's predicate index)."""
        ...

    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """``(s, o)`` of every triple of ``pid``, each once, in no promised order."""
        ...

    def scan_all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(s, p, o)`` of every triple, each once, in no promised order."""
        ...

    def vertices(self) -> np.ndarray:
        """Sorted unique ids occurring as subject or object."""
        ...

    def local_lookup(self, pid: int, direction: int) -> Lookup | None:
        """A function ``v -> sorted neighbours`` for one Python-int vertex at a time,
        or None when some shard is not in this process (use :meth:`expand`)."""
        ...


@runtime_checkable
class ShardReader(Protocol):
    """The per-shard calls a graph makes. A shard ``no`` of ``n_shards`` answers
    only for the vertices it owns (:func:`engine.kv.partition.owner`): the
    caller routes every vertex to its owner; an id the shard does not own reads
    as a vertex without edges."""

    @property
    def no(self) -> int:
        ...

    @property
    def n_shards(self) -> int:
        ...

    def pids(self) -> Iterator[int]:
        """Predicates with an edge in this shard (either direction), any order."""
        ...

    def degree_stats(self, pid: int) -> tuple[int, int, int]:
        """(triples whose subject is owned here, owned subjects, owned objects) of ``pid``;
        summed over the shards they give :class:`PredicateStats`."""
        ...

    def expand(self, pid: int, direction: int, vids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`GraphReader.expand` for owned ``vids`` (int64)."""
        ...

    def contains(self, pid: int, s: np.ndarray, o: np.ndarray) -> np.ndarray:
        """As :meth:`GraphReader.contains` for owned subjects ``s`` (int64)."""
        ...

    def index(self, pid: int, direction: int) -> np.ndarray:
        """Sorted unique owned subjects (OUT) / objects (IN) of ``pid`` (the shard's id dtype)."""
        ...

    def scan(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """``(s, o)`` int64 of the ``pid`` triples with an owned subject, sorted by (s, o)."""
        ...

    def vertices(self) -> np.ndarray:
        """Sorted unique owned vertices with an edge in either direction (int64)."""
        ...

    def local_lookup(self, pid: int, direction: int) -> Lookup | None:
        """In-process only: ``v -> sorted neighbours`` of one owned vertex (scalar ops,
        no numpy call on the way). A remote shard returns None."""
        ...

    def export(self) -> Iterator[tuple[int, PredColumns, object]]:
        """``(pid, columns, segment)`` for every predicate: the arrays to persist or
        ship, and the immutable segment they come from -- the same object across
        snapshots while ``pid`` is untouched, so a caller can skip it; its
        ``files`` attribute (None until then) is where persistence records the
        segment's location on disk."""
        ...

    @property
    def nbytes(self) -> int:
        ...


@runtime_checkable
class ShardWriter(Protocol):
    """Builds the next version of a shard; the old one stays valid (snapshots)."""

    def apply(self, remove: np.ndarray, add: np.ndarray) -> ShardWriter:
        """The shard after deleting ``remove`` then inserting ``add``: (n, 3) int64
        ``(s, p, o)`` rows, ids in ``[0, 2**32)``, set semantics (removing an absent
        triple or adding a present one changes nothing). The caller sends each
        shard the rows of which it owns the subject or the object (rows sorted by
        ``p`` are grouped without a sort); the shard updates the OUT adjacency of
        the owned subjects and the IN adjacency of the owned objects. Returns
        ``self`` when nothing changes; untouched predicates are shared."""
        ...


@runtime_checkable
class TermDictionary(Protocol):
    """Term <-> id mapping: ids dense from 0, append-only (a term's id never
    changes, so ids in an older snapshot stay valid). Keys are N-Triples term
    strings (``<iri>``, ``_:b``, ``"lex"@lang``, ``"lex"^^<dt>``); batched calls
    take a list of str or an Arrow string array."""

    def __len__(self) -> int:
        ...

    def lookup(self, key: str) -> int:
        """The id of one term, -1 if absent."""
        ...

    def lookup_many(self, keys) -> np.ndarray:
        """int64 ids of ``keys``, -1 for absent ones."""
        ...

    def encode(self, keys) -> np.ndarray:
        """int64 ids of ``keys``, interning the absent ones: the only mutating call
        (the caller holds the store's writer lock)."""
        ...

    def key(self, id: int) -> str:
        """The term string of one id (KeyError if out of range)."""
        ...

    def keys(self, ids: np.ndarray) -> list[str]:
        """The term strings of ``ids`` (KeyError if one is out of range)."""
        ...

    def keys_arrow(self, ids: np.ndarray):
        """The term strings of ``ids`` as an Arrow large_string array."""
        ...

    def numeric(self, ids: np.ndarray) -> np.ndarray:
        """float64 value of numeric literals, NaN for other terms and unknown ids."""
        ...

    def kinds(self, ids: np.ndarray) -> np.ndarray:
        """int8 per id: 0 IRI, 1 blank node, 2 literal, -1 unknown id."""
        ...
