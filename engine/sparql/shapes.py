"""Parsed queries reused across texts that differ only in their constants.

A query text's skeleton and slots (:mod:`engine.sparql.normalize`: IRI
references, short strings and comments) decide its tokens; two texts of one
skeleton are the same token sequence but for the slots' values. A *parse
shape* is learned once per skeleton: the text is parsed again with every
slot that may be a parameter (an absolute IRI or an escape-free string, see
``normalize.slot_key``) replaced by a distinct probe constant, and a slot
stays a parameter only when its probe shows up in the parsed algebra as a
whole term constant and nowhere else (not inside a literal with a language
tag or datatype, a PREFIX or BASE IRI, a FROM IRI, a property path's IRI,
a SERVICE text or a function name: those slots are kept fixed). A VALUES cell
holds a term key as a plain string (``A.Values.rows``), not a Const: a probe
that is a whole cell there is a parameter too (the parser reads a VALUES
IRI reference or string token as it reads one in a triple pattern).
The learned text's own parse must then equal the probe's algebra with the
probes put back, which checks the whole argument on that text.

A later text of the skeleton whose fixed slots are the learned text's and
whose parameter slots are IRIs where there were IRIs and strings where there
were strings gets the probe's algebra with its own constants (only the nodes
above a parameter are rebuilt; the rest is shared, the algebra being
immutable), without tokenizing or parsing. Why that is its parse: the parser
reads an IRI reference or a string token the same way whatever it holds
(absolute IRIs are not resolved, escape-free strings not unescaped; no parse
error depends on such a value), so the only difference a constant makes is
the term key it becomes. Numbers, prefixed names, LIMIT/OFFSET, language
tags and datatypes are in the skeleton: a text that changes them is another
shape. Planning (``engine.plan.planner.make_plan``) and the join order run on
the rebound algebra as for a parsed one, so a constant that changes the plan
(a rare class against a common one) still gets its own plan.
"""

from __future__ import annotations

import dataclasses
import re

from engine.sparql import algebra as A
from engine.sparql import normalize as norm

#: a probe constant's text in the algebra (its slot's index in group 1 or 2)
_PROBE_RE = re.compile(r"urn:x-jindou:slot:(\d+)(?!\d)|jindou-slot-(\d+)(?!\d)")
_FIELDS: dict[type, tuple[str, ...]] = {}


def _probe(i: int, raw: str) -> str:
    return f"<urn:x-jindou:slot:{i}>" if raw[0] == "<" else f'"jindou-slot-{i}"'


def _fields(tp: type) -> tuple[str, ...] | None:
    names = _FIELDS.get(tp)
    if names is None:
        if not dataclasses.is_dataclass(tp):
            return None
        names = _FIELDS[tp] = tuple(f.name for f in dataclasses.fields(tp))
    return names


class ParseShape:
    """The algebra of one skeleton's probe text and where its parameters are."""

    __slots__ = ("fixed", "kinds", "query", "probes", "build", "plan")

    def __init__(self, fixed: tuple, kinds: dict, query: A.Query, probes: dict, dirty: frozenset):
        self.fixed = fixed  # per slot: the raw text it must have, or None (a parameter)
        self.kinds = kinds  # parameter slot -> True for an IRI, False for a string
        self.query = query  # the probe text's algebra
        self.probes = probes  # probe term key -> its slot
        #: consts (slot -> Const) -> the algebra with them (only the nodes above a parameter are new)
        self.build = _compile(query, probes, dirty) or (lambda c: query)
        #: what the Database keeps to rebind the plan too (see Database._parse_shaped)
        self.plan = None

    def consts(self, slots: list[str]) -> dict | None:
        """slot -> Const for the parameters of a text with these slots (normalize's);
        None when a fixed slot differs or a parameter slot cannot stand for its constant."""
        out: dict[int, A.Const] = {}
        kinds = self.kinds
        for i, (s, f) in enumerate(zip(slots, self.fixed, strict=True)):
            if f is not None:
                if s != f:
                    return None
                continue
            if not s or (s[0] == "<") is not kinds[i]:
                return None
            k = norm.slot_key(s)
            if k is None:
                return None
            out[i] = A.Const(k)
        return out

    def bind(self, slots: list[str]) -> A.Query | None:
        """The algebra of the text with these slots; None as for :meth:`consts`."""
        c = self.consts(slots)
        return None if c is None else self.build(c)


def rebinder(obj, probes: dict):
    """consts (slot -> Const) -> ``obj`` (an algebra or planned tree built from a
    probe text's algebra) with its probe constants replaced; None when a probe
    sits anywhere but as a whole constant in rebuildable nodes (dataclasses, tuples)."""
    good: set = set()
    bad: set = set()
    dirty: set = set()
    _scan(obj, probes, good, bad, dirty)
    if bad:
        return None
    f = _compile(obj, probes, frozenset(dirty))
    return f if f is not None else (lambda c: obj)


def _compile(node, probes: dict, dirty: frozenset):
    """A function of consts (slot -> Const) that rebuilds ``node`` with them:
    nodes with no parameter below them are shared, the others rebuilt once per call."""
    tp = type(node)
    if tp is A.Const:
        i = probes.get(node.key)
        if i is None:
            return None
        return lambda c: c[i]
    if id(node) not in dirty:
        return None
    if tp is A.Values:  # (its cells are term keys: a probe cell becomes its constant's key)
        return _compile_values(node, probes)
    if tp is tuple or tp is list:
        items = list(node)
    else:
        items = [getattr(node, f) for f in _FIELDS[tp]]
    subs = tuple((k, g) for k, x in enumerate(items) if (g := _compile(x, probes, dirty)) is not None)
    if not subs:
        return None
    if len(subs) == 1:
        (k0, g0), = subs
        before, after = tuple(items[:k0]), tuple(items[k0 + 1:])
        if tp is tuple:
            return lambda c: (*before, g0(c), *after)
        if tp is list:
            return lambda c: [*before, g0(c), *after]
        return lambda c: tp(*before, g0(c), *after)

    def build(c):
        out = items.copy()
        for k, g in subs:
            out[k] = g(c)
        return tuple(out) if tp is tuple else out if tp is list else tp(*out)

    return build


def _compile_values(node: A.Values, probes: dict):
    """:func:`_compile` of a VALUES block with probe cells (see :func:`_scan`)."""
    rows = node.rows
    at = [(r, k, probes[cell]) for r, row in enumerate(rows) for k, cell in enumerate(row)
          if cell is not None and cell in probes]
    vs = node.vars

    def build(c):
        out = [list(row) for row in rows]
        for r, k, i in at:
            out[r][k] = c[i].key
        return A.Values(vs, tuple(map(tuple, out)))

    return build


def _scan_values(node: A.Values, probes: dict, good: set, bad: set, dirty: set) -> bool:
    """:func:`_scan` of a VALUES block: a cell that is a probe's key is a whole-term
    parameter (as a Const elsewhere); a probe anywhere else in it is none."""
    below = False
    for row in node.rows:
        for cell in row:
            if cell is None:
                continue
            i = probes.get(cell)
            if i is not None:
                good.add(i)
                below = True
                continue
            for m in _PROBE_RE.finditer(cell):
                bad.add(int(m.group(1) or m.group(2)))
    for v in node.vars:
        _scan(v, probes, good, bad, dirty)
    if below:
        dirty.add(id(node))
    return below


def _scan(node, probes: dict, good: set, bad: set, dirty: set) -> bool:
    """Walk the probe algebra: the slots whose probe is a whole constant
    (``good``) or shows up anywhere else (``bad``), and the nodes above a whole
    probe constant (``dirty``). True when ``node`` holds one."""
    tp = type(node)
    if tp is A.Const:
        i = probes.get(node.key)
        if i is not None:
            good.add(i)
            return True
        for m in _PROBE_RE.finditer(node.key):
            bad.add(int(m.group(1) or m.group(2)))
        return False
    if tp is str:
        for m in _PROBE_RE.finditer(node):
            bad.add(int(m.group(1) or m.group(2)))
        return False
    if tp is A.Values:
        return _scan_values(node, probes, good, bad, dirty)
    if tp is tuple or tp is list:
        items = node
    elif isinstance(node, dict):
        items = list(node.items())
    else:
        names = _fields(tp)
        if names is None:
            if not isinstance(node, (int, float, bool, type(None))):
                _scan(repr(node), probes, good, bad, dirty)  # opaque: its probes are no parameters
            return False
        items = [getattr(node, f) for f in names]
    below = False
    for x in items:
        if _scan(x, probes, good, bad, dirty):
            below = True
    if below:
        if tp is not tuple and tp is not list and _fields(tp) is None:
            # a dict with a parameter inside cannot be rebuilt: no parameter there
            return False
        dirty.add(id(node))
    return below


def learn(text: str, n: tuple[str, list[str]], query: A.Query, parse) -> ParseShape | None:
    """The parse shape of ``text`` (normalized to ``n``, parsed to ``query``;
    ``parse(text)`` parses another text the same way), or None when no slot can
    be a parameter or the check fails."""
    _skel, slots = n
    cands = {i for i, s in enumerate(slots) if norm.slot_key(s) is not None}
    if not cands:
        return None
    sp = norm.spans(text)
    if len(sp) != len(slots):
        return None
    for _ in range(3):
        parts, last = [], 0
        for i in sorted(cands):
            a, b = sp[i]
            parts += (text[last:a], _probe(i, slots[i]))
            last = b
        parts.append(text[last:])
        try:
            pq = parse("".join(parts))
        except Exception:  # noqa: BLE001 - a probe that does not parse: no shape (the text's own errors stand)
            return None
        probes = {norm.slot_key(_probe(i, slots[i])): i for i in cands}
        good: set = set()
        bad: set = set()
        dirty: set = set()
        _scan(pq, probes, good, bad, dirty)
        drop = (cands - good) | (bad & cands)
        if drop:
            cands -= drop
            if not cands:
                return None
            continue
        if cands - good:
            return None
        sh = ParseShape(tuple(None if i in cands else s for i, s in enumerate(slots)),
                        {i: slots[i][0] == "<" for i in cands}, pq, probes, frozenset(dirty))
        # the check: the learned text is the probe's algebra with its own constants
        try:
            same = sh.bind(slots) == query
        except Exception:  # noqa: BLE001 - a node that cannot be rebuilt
            same = False
        return sh if same else None
    return None
