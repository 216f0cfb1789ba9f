"""The documented limits of the streaming contract, checked the same way on every path.

* **Time.** Timestamps, heartbeats, progress, instants, ``?from=`` and
  ``Last-Event-ID`` are integer milliseconds in ``[TIME_MIN, TIME_MAX]`` =
  ``[0, 2^53 - 1]``: exact as JSON numbers in every client, and ``t + d`` /
  ``t - d`` for any duration ``d <= MAX_DURATION_MS`` stays inside int64, so
  no numpy arithmetic over them can overflow. Anything else (out of range,
  float, bool, a string that is not a plain integer) is a 400 that changes
  nothing.
* **Durations** (``RANGE`` / ``STEP``): ``1 .. MAX_DURATION_MS`` (= TIME_MAX) ms.
* **Count windows**: ``RANGE TRIPLES n`` with ``1 <= n <= MAX_TRIPLES``.
* **Names** of streams and continuous queries: ``[A-Za-z0-9_.-]{1,NAME_MAX}``.
* **Stream IRIs** (and absorbed predicate IRIs): at most ``IRI_MAX``
  characters; at most ``ABSORB_MAX`` absorbed predicates per stream.
"""

from __future__ import annotations

import re

import numpy as np

from engine.errors import JindouError

__all__ = ["TIME_MIN", "TIME_MAX", "MAX_DURATION_MS", "MAX_TRIPLES", "NAME_MAX", "IRI_MAX", "ABSORB_MAX", "BATCH_ID_MAX",
           "BadRequest", "BadTimestamp", "BadName", "TooManyBadLines", "MAX_BAD_LINES", "check_time", "check_int64", "parse_time", "time_out_of_range", "check_name",
           "name_error", "shorten"]

TIME_MIN = 0
TIME_MAX = 2**53 - 1
MAX_DURATION_MS = TIME_MAX
MAX_TRIPLES = 1_000_000_000
NAME_MAX = 128
IRI_MAX = 4096
ABSORB_MAX = 1024
BATCH_ID_MAX = 256
#: bad lines / rows (syntax, terms, times, late elements) one POST may report; beyond, it is refused whole
MAX_BAD_LINES = 100_000

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_INT_RE = re.compile(r"[+-]?[0-9]{1,20}\Z")
RANGE_TEXT = f"integer milliseconds in [{TIME_MIN}, {TIME_MAX}] (2^53-1)"


class BadRequest(JindouError, ValueError):
    """A value beyond the contract's limits (HTTP 400; nothing changed)."""

    kind = "bad_request"


class BadTimestamp(BadRequest):
    """A time outside the contract's range, or not an integer."""


class BadName(BadRequest):
    """A stream or query name outside ``[A-Za-z0-9_.-]{1,NAME_MAX}``."""


class TooManyBadLines(BadRequest):
    """More than :data:`MAX_BAD_LINES` bad lines / rows in one POST: refused as a whole (nothing
    stored), so the report stays small and no bad line goes unreported."""

    def __init__(self, count: int | None, first: dict | None):
        what = "more than" if count is None else f"{count} bad lines / rows, more than"
        head = "" if first is None else f"; the first: line {first['line']}: {first['error']}"
        super().__init__(f"{what} {MAX_BAD_LINES} bad lines / rows in one POST: nothing was stored{head}")


def shorten(v, limit: int = 60) -> str:
    """``repr`` of a client value, cut so an error message never echoes megabytes."""
    r = repr(v) if not isinstance(v, str) or len(v) <= limit else repr(v[:limit]) + f"... ({len(v)} characters)"
    return r if len(r) <= limit + 40 else r[:limit] + "..."


def check_time(v, what: str = "timestamp") -> int:
    """``v`` as an int in the time range, else :class:`BadTimestamp` (bools and floats are refused)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise BadTimestamp(f"{what} must be {RANGE_TEXT}, not {shorten(v)}")
    v = int(v)
    if not TIME_MIN <= v <= TIME_MAX:
        raise BadTimestamp(f"{what} {shorten(str(v))} is out of range: times are {RANGE_TEXT}")
    return v


def check_int64(v, what: str = "timestamp") -> int:
    """``v`` as an int that fits int64 (what the clock primitives can hold); the contract's
    narrower range is checked where times enter (:func:`check_time`)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise BadTimestamp(f"{what} must be {RANGE_TEXT}, not {shorten(v)}")
    v = int(v)
    if not -(2**63) <= v < 2**63:
        raise BadTimestamp(f"{what} {shorten(str(v))} is out of range: times are {RANGE_TEXT}")
    return v


def parse_time(text: str, what: str = "timestamp") -> int:
    """A time given as text (query parameter, header): a plain decimal integer in range."""
    s = text.strip()
    if not _INT_RE.match(s):
        raise BadTimestamp(f"{what} must be {RANGE_TEXT}, not {shorten(text)}")
    return check_time(int(s), what)


def time_out_of_range(t: np.ndarray) -> np.ndarray:
    """Mask of the int64 times outside the range (vectorized check of a batch)."""
    t = np.asarray(t)
    return (t < TIME_MIN) | (t > TIME_MAX)


def name_error(name, what: str = "stream") -> str | None:
    """Why ``name`` is not a valid stream / query name (None when it is)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return f"a {what} name is [A-Za-z0-9_.-]+ (at most {NAME_MAX} characters), not {shorten(name)}"
    if len(name) > NAME_MAX:
        return f"a {what} name has at most {NAME_MAX} characters, not {len(name)}"
    return None


def check_name(name, what: str = "stream") -> str:
    err = name_error(name, what)
    if err is not None:
        raise BadName(err)
    return name
