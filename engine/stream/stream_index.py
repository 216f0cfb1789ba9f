"""Stream index (Wukong+S section 4.2): per stream, a time-ordered list of per-batch entries.

Each entry describes one injected batch: its batch id, the range of its
timestamps ``[tau_min, tau_max]``, the range ``[seq_start, seq_end)`` of its
triples in the stream's global arrival sequence (triple numbers, never reused)
and where the first triple lives (``slice_no``, ``offset`` in that slice of the
transient store). Since a stream only admits non-decreasing timestamps, both
``tau_min``/``tau_max`` and the sequence ranges are non-decreasing across
entries, so locating a window bound is one ``searchsorted`` over ``tau_max``
plus one inside the boundary batch -- never a scan. The index's size depends
on the number of live batches, not on the stored data.

Entries are appended on the late side and dropped from the early side (GC);
the columns are numpy arrays with amortized growth and a moving head.
"""

from __future__ import annotations

import numpy as np

__all__ = ["StreamIndex", "COLUMNS"]

COLUMNS = ("batch", "tau_min", "tau_max", "seq_start", "seq_end", "slice_no", "offset")


class StreamIndex:
    """Time-ordered per-batch entries of one stream."""

    __slots__ = ("_data", "_head", "_tail")

    def __init__(self, capacity: int = 64):
        self._data = np.empty((max(4, int(capacity)), len(COLUMNS)), dtype=np.int64)
        self._head = 0
        self._tail = 0

    def __len__(self) -> int:
        return self._tail - self._head

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    def _col(self, k: int) -> np.ndarray:
        return self._data[self._head:self._tail, k]

    @property
    def batch(self) -> np.ndarray:
        return self._col(0)

    @property
    def tau_min(self) -> np.ndarray:
        return self._col(1)

    @property
    def tau_max(self) -> np.ndarray:
        return self._col(2)

    @property
    def seq_start(self) -> np.ndarray:
        return self._col(3)

    @property
    def seq_end(self) -> np.ndarray:
        return self._col(4)

    def entry(self, i: int) -> dict:
        """Entry ``i`` (0 = oldest live) as a dict."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        row = self._data[self._head + i]
        return {c: int(v) for c, v in zip(COLUMNS, row, strict=True)}

    def last(self) -> dict | None:
        return self.entry(len(self) - 1) if len(self) else None

    def append(self, batch: int, tau_min: int, tau_max: int, seq_start: int, seq_end: int,
               slice_no: int, offset: int) -> None:
        if len(self):
            prev = self._data[self._tail - 1]
            if batch <= prev[0]:
                raise ValueError(f"batch ids must increase ({batch} after {int(prev[0])})")
            if tau_min < prev[2] or seq_start != prev[4]:
                raise ValueError("stream index entries must be appended in time and sequence order")
        if tau_max < tau_min or seq_end < seq_start:
            raise ValueError("bad stream index entry")
        if self._tail == self._data.shape[0]:
            self._grow()
        self._data[self._tail] = (batch, tau_min, tau_max, seq_start, seq_end, slice_no, offset)
        self._tail += 1

    def _grow(self) -> None:
        live = self._data[self._head:self._tail]
        cap = max(self._data.shape[0], 2 * len(live), 4)
        new = np.empty((cap, len(COLUMNS)), dtype=np.int64)
        new[:len(live)] = live
        self._data = new
        self._tail -= self._head
        self._head = 0

    def drop_before(self, seq: int) -> int:
        """Drop the entries whose triples all lie before ``seq`` (``seq_end <= seq``)."""
        k = int(np.searchsorted(self.seq_end, int(seq), side="right"))
        self._head += k
        if self._head == self._tail:
            self._head = self._tail = 0
        elif self._head > self._data.shape[0] // 2 and self._data.shape[0] > 64:
            self._grow()  # compacts (and keeps capacity)
        return k

    def first_after(self, tau: int) -> int:
        """Index of the first entry with ``tau_max > tau`` (``len(self)`` if none)."""
        return int(np.searchsorted(self.tau_max, int(tau), side="right"))

    def last_at_or_before(self, tau: int) -> int:
        """Index of the last entry with ``tau_min <= tau`` (``-1`` if none)."""
        return int(np.searchsorted(self.tau_min, int(tau), side="right")) - 1

    def batch_upto(self, tau: int) -> int | None:
        """Id of the last live batch whose timestamps are all ``<= tau`` (None if none).

        Per stream, this is the component of the VTS "as of event time ``tau``"
        (batches grouped by timestamp never straddle ``tau``).
        """
        i = int(np.searchsorted(self.tau_max, int(tau), side="right")) - 1
        return int(self.batch[i]) if i >= 0 else None

    def find_batch(self, batch: int) -> int:
        """Index of the entry of ``batch`` (``-1`` if not live)."""
        b = self.batch
        i = int(np.searchsorted(b, int(batch)))
        return i if i < len(b) and b[i] == batch else -1
