"""IRI reference resolution (RFC 3986 section 5.2), shared by the parser
(BASE, relative IRIs in queries) and the IRI()/URI() built-in."""

from __future__ import annotations

import re

_URI_RE = re.compile(r"^(?:([A-Za-z][A-Za-z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$", re.S)
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")


def _remove_dot_segments(path: str) -> str:
    if "." not in path:
        return path
    out: list[str] = []
    segs = path.split("/")
    absolute = path.startswith("/")
    if absolute:
        segs = segs[1:]
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if seg == ".":
            if last:
                out.append("")
        elif seg == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    res = "/".join(out)
    return "/" + res if absolute else res


def resolve_iri(base: str | None, ref: str) -> str:
    """Resolve ``ref`` against ``base`` (RFC 3986 §5.2.2, strict)."""
    if base is None or _SCHEME_RE.match(ref):
        return ref
    b = _URI_RE.match(base)
    r = _URI_RE.match(ref)
    if b is None or r is None:  # pragma: no cover - the regexes match everything
        return ref
    bs, ba, bp, bq, _ = b.groups()
    _, ra, rp, rq, rf = r.groups()
    if ra is not None:
        ta, tp, tq = ra, _remove_dot_segments(rp), rq
    elif rp == "":
        ta, tp, tq = ba, bp, (rq if rq is not None else bq)
    else:
        if rp.startswith("/"):
            tp = _remove_dot_segments(rp)
        else:
            if ba is not None and bp == "":
                merged = "/" + rp
            else:
                cut = bp.rfind("/")
                merged = bp[: cut + 1] + rp
            tp = _remove_dot_segments(merged)
        ta, tq = ba, rq
    out = (bs + ":") if bs is not None else ""
    if ta is not None:
        out += "//" + ta
    out += tp
    if tq is not None:
        out += "?" + tq
    if rf is not None:
        out += "#" + rf
    return out
