"""A joint bound on the entries many per-query caches hold together.

Each continuous query keeps caches of rendered terms (:class:`~engine.stream.continuous._JsonTerms`)
bounded per query; with hundreds of queries on a stream of ever-new IRIs, those per-query bounds
add up to gigabytes that no budget sees. :class:`SharedBound` keeps the sum under ``total``
entries: when the sum is over, a cache holding more than its fair share (``total / members``,
at least ``floor``) is cleared the next time its query renders, so the memory follows the
number of queries only through ``floor`` (a few hundred KiB each), and a few queries keep the
whole ``total`` between them as before.
"""

from __future__ import annotations

import threading
import weakref

__all__ = ["SharedBound", "JSON_TERMS"]


class SharedBound:
    """Entries held by the member caches together, and each member's share of ``total``."""

    def __init__(self, total: int, floor: int):
        self.total = int(total)
        self.floor = int(floor)
        self.held = 0
        self.members = 0
        self.clears = 0   # members cleared because the sum was over (a test / status hook)
        self._lock = threading.Lock()

    def join(self, owner) -> list[int]:
        """A slot for ``owner``'s count; released (its entries no longer counted) when ``owner``
        is collected, e.g. when its query is deleted."""
        slot = [0]
        with self._lock:
            self.members += 1
        weakref.finalize(owner, self._leave, slot)
        return slot

    def _leave(self, slot: list[int]) -> None:
        with self._lock:
            self.held -= slot[0]
            self.members -= 1
            slot[0] = 0

    def share(self) -> int:
        return max(self.floor, self.total // max(1, self.members))

    def over(self, slot: list[int], n: int) -> bool:
        """Whether a member about to hold ``n`` entries (counted ``slot[0]`` now) must clear its
        cache first: the sum would pass ``total`` and ``n`` is above its share."""
        return n > self.share() and self.held - slot[0] + n > self.total

    def set(self, slot: list[int], n: int) -> None:
        """The member now holds ``n`` entries."""
        with self._lock:
            self.held += n - slot[0]
            slot[0] = n


#: the rendered-term caches of all continuous queries in the process: 2^18 entries (~50 MiB of
#: small JSON fragments) together, at least 1,024 per query's cache
JSON_TERMS = SharedBound(1 << 18, 1 << 10)
