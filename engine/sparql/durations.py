"""Window durations of the continuous-query syntaxes, in integer milliseconds.

Two spellings are accepted wherever a window takes a duration (C-SPARQL, RSP-QL and CQELS
windows, ``COMPUTED EVERY``):

* C-SPARQL / CQELS: an integer and a unit ``ms``, ``s``, ``m``, ``h``, ``d`` (case-insensitive),
  with or without a space between them (``10s``, ``10 s``, ``1500ms``) -- read by the parser
  from its tokens;
* ISO 8601 (RSP-QL, ``xsd:duration`` without years and months): ``P[nW][nD][T[nH][nM][nS]]``,
  each ``n`` a decimal number (``PT10S``, ``PT1M30S``, ``PT0.5S``, ``P1D``, ``P1DT2H``).
  Years and months have no fixed length and are refused, as are amounts that are not a
  whole number of milliseconds (``PT0.0005S``) and an empty ``P`` / ``PT``.

:func:`parse_iso_duration` and :func:`format_iso_duration` are exact inverses on
``1 .. MAX_DURATION_MS`` (property-tested), as are the C-SPARQL formatter of
:mod:`engine.sparql.csparql` and its parser.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["CSPARQL_UNITS", "ISO_DURATION_RE", "format_iso_duration", "parse_iso_duration"]

#: C-SPARQL units (upper-cased) -> milliseconds
CSPARQL_UNITS = {"MS": 1, "S": 1000, "M": 60_000, "H": 3_600_000, "D": 86_400_000}

_NUM = r"[0-9]+(?:[.,][0-9]+)?"
#: an ISO 8601 duration at a position (case-insensitive); the groups are the amounts
ISO_DURATION_RE = re.compile(
    rf"[Pp](?:(?P<y>{_NUM})[Yy])?(?:(?P<mo>{_NUM})[Mm])?(?:(?P<w>{_NUM})[Ww])?(?:(?P<d>{_NUM})[Dd])?"
    rf"(?:(?P<tee>[Tt])(?:(?P<h>{_NUM})[Hh])?(?:(?P<mi>{_NUM})[Mm])?(?:(?P<s>{_NUM})[Ss])?)?"
)
_FACTORS = (("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("mi", 60_000), ("s", 1000))


def parse_iso_duration(m: re.Match) -> int:
    """Milliseconds of a match of :data:`ISO_DURATION_RE`; ``ValueError`` with the reason when it
    does not name a fixed, positive, whole number of milliseconds."""
    text = m.group()
    if m.group("y") or m.group("mo"):
        raise ValueError(f"duration {text}: years and months have no fixed length (use weeks, days, "
                         "hours, minutes or seconds)")
    if m.group("tee") and not (m.group("h") or m.group("mi") or m.group("s")):
        raise ValueError(f"duration {text}: a 'T' needs hours, minutes or seconds after it")
    if not any(m.group(k) for k, _ in _FACTORS):
        raise ValueError(f"duration {text} is empty: expected for example PT10S, PT1M30S or P1D")
    total = Decimal(0)
    for key, factor in _FACTORS:
        v = m.group(key)
        if v:
            try:
                total += Decimal(v.replace(",", ".")) * factor
            except InvalidOperation:   # cannot happen for the regex's digits; kept as a guard
                raise ValueError(f"bad duration {text}") from None
    if total != total.to_integral_value():
        raise ValueError(f"duration {text} is not a whole number of milliseconds")
    return int(total)


def format_iso_duration(ms: int) -> str:
    """The ISO 8601 spelling of ``ms`` (``PT10S``, ``P1DT2H``, ``PT0.5S``); inverse of the parser."""
    ms = int(ms)
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    out = "P"
    if days:
        out += f"{days}D"
    if hours or minutes or rest or not days:
        out += "T"
        if hours:
            out += f"{hours}H"
        if minutes:
            out += f"{minutes}M"
        if rest or not (hours or minutes):
            sec, milli = divmod(rest, 1000)
            out += f"{sec}.{milli:03d}".rstrip("0").rstrip(".") + "S" if milli else f"{sec}S"
    return out
