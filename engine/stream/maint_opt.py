"""OPTIONAL in a maintained state (:mod:`engine.stream.maintained`): the rows of a query with
OPTIONAL groups that each join the required BGP only (:func:`engine.stream.tiny_gen._shape`).

Why: a query that reads "the observation, and its unit if one was sent" is a common stream
shape; without this it takes the generated path only (~2-6x the composite peer, not 10x).

The state keeps, per required solution ``mu`` (the BGP's solutions over the dataset ``D``, found
by the maintained delta joins restricted to the required patterns, FILTERs over the required
variables applied there), the rows it contributes now: per OPTIONAL group its matches
compatible with ``mu`` passing the group's FILTER (the left join's condition; its own variables
unbound when none passes), their product, the FILTERs over possibly unbound variables, the
projection. A delta join over one group's patterns (a triple entering or leaving ``D`` that
matches them) only marks the required solutions sharing its values of the group's shared
variables (an index per group): once the triple's change to ``D`` is complete (:meth:`settle`,
called by the state after each triple) a marked solution's rows are computed again from ``D``
and, where they differ, the old rows leave the counted rows and the new ones come -- so the
unbound row leaves when the first match arrives and comes back when the last one leaves, with
no count to go wrong. A required solution that appears has its rows computed over ``D`` with the
triple; one that leaves takes its rows with it. Everything is exact by construction: the rows
of a solution are always those of ``D`` as it is after the triple.
"""

from __future__ import annotations

from engine.stream.tiny_gen import MAX_ROWS, _slot
from engine.stream.tiny_gen import _Hand as _Drop  # (the state drops it: maintained catches it)
from engine.stream.tiny_gen import code_of as _code_of

__all__ = ["OptState", "scope_of"]


def _pvars(pats, pis) -> set:
    return {x[1] for j in pis for x in (pats[j][0], pats[j][2]) if x[0] == "v"}


def scope_of(gen, i: int) -> tuple[list, list, set]:
    """Pattern ``i``'s delta join scope in an OPTIONAL query: (the patterns joined, the FILTER
    conjuncts applied in the join, the variables bound): the required BGP with the FILTERs
    over its variables only, or pattern ``i``'s OPTIONAL group alone (its FILTER reads the
    required solution: applied when the solution's rows are computed)."""
    sh = gen.sh
    for pis, fis in required_of(sh):
        if i in pis:
            rv = _pvars(gen.pats, pis)
            cand = range(len(gen._fcode)) if fis is None else fis
            return list(pis), [fi for fi in cand if gen._fcode[fi][0] <= rv], rv
    for pis, *_ in list(sh.opts) + list(sh.antis):
        if i in pis:
            return list(pis), [], _pvars(gen.pats, pis)
    raise AssertionError(i)


def required_of(sh) -> list:
    """The required patterns of each UNION branch holding OPTIONALs (:mod:`engine.stream.tiny_union`:
    a solution is keyed by its branch too), with the branch's FILTER conjuncts; else the one
    required BGP (FILTERs: None, all)."""
    if sh.branches and sh.opts:
        return [(list(pis), list(fis)) for pis, fis, _ in sh.branches]
    return [(list(range(sh.n_required)), None)]


class OptState:
    """The per-required-solution rows of one maintained OPTIONAL query (see the module)."""

    def __init__(self, m):
        self.m = m
        gen = m.gen
        sh = gen.sh
        pats = gen.pats
        self.reqs = required_of(sh)
        self.union = bool(sh.branches)   # (a solution is (its branch, its values...))
        off = 1 if self.union else 0
        self.bvars = [sorted(_pvars(pats, pis)) for pis, _ in self.reqs]
        self.rvars = self.bvars[0]
        self.gbranch = list(getattr(sh, "opt_branch", None) or [0] * len(sh.opts)) + [0] * len(sh.antis)
        self.groups = []   # per group: (its patterns, shared variables, own variables)
        self.kinds = []    # per group: "opt", or (tiny_anti) "not" / "exists" / "minus"
        self.fcode = []    # per group: its FILTER's (vars, source, constants, prefix) or None
        for g in range(len(sh.opts)):
            self.kinds.append("opt")
            oc = gen._ocode[g]
            self.fcode.append(None if oc is None else (oc[0], oc[1], oc[2], f"O{g}_"))
        for g, (_, _, kind) in enumerate(sh.antis):
            self.kinds.append(kind)
            ac = gen._acode[g]
            self.fcode.append(None if ac is None else (ac[0], ac[1], ac[2], f"N{g}_"))
        # a nested OPTIONAL (tiny_nested) is evaluated per match of its parent: its function reads
        # the parent's variables too; its index key is its variables shared with the required
        # part (none: a triple of its patterns marks every required solution)
        self.parent = dict(getattr(sh, "opt_parent", {}))
        outers = [set(self.bvars[b]) for b in self.gbranch]
        for g, (pis, *_) in enumerate(list(sh.opts) + list(sh.antis)):
            gv = _pvars(pats, pis)
            p = self.parent.get(g)
            seen = outers[g] | (_pvars(pats, sh.opts[p][0]) if p is not None else set())
            self.groups.append((list(pis), sorted(gv & seen), sorted(gv - seen)))
        self.pos = [[off + self.bvars[self.gbranch[g]].index(v) for v in shared if v in outers[g]]
                    for g, (_, shared, _) in enumerate(self.groups)]
        self.bpos = [[(g, self.pos[g]) for g in range(len(self.groups)) if self.gbranch[g] == b]
                     for b in range(len(self.reqs))]   # per branch: its groups' index keys
        # a group's function reads the shared variables and the required ones its FILTER reads
        # (``OPTIONAL { ?s :p ?e FILTER(?e != ?o) }``: ``?o`` is bound by the required part only)
        scopes = [outers[g] | (_pvars(pats, sh.opts[self.parent[g]][0]) if g in self.parent else set())
                  for g in range(len(self.groups))]
        self.args = [shared + sorted(((fc[0] if fc is not None else set()) & sc) - set(shared))
                     for (_, shared, _), fc, sc in zip(self.groups, self.fcode, scopes, strict=True)]
        self.argpos = [None if g in self.parent else [off + self.bvars[self.gbranch[g]].index(v) for v in a]
                       for g, a in enumerate(self.args)]
        # a guarded [NOT] EXISTS (``FILTER(A || EXISTS {...})``, tiny_anti): kept when ``A`` is true
        na = len(sh.opts)
        self.guards = {na + ga: c for ga, c in getattr(gen, "_aguard", {}).items()}
        self.gargs = {g: sorted(c[0]) for g, c in self.guards.items()}
        self.gargpos = {g: [off + self.bvars[0].index(v) for v in a] for g, a in self.gargs.items()}
        self.MU: dict = {}                          # required solution -> its rows (a tuple)
        self.IDX = [{} for _ in self.groups]        # per group: shared values -> required solutions
        self.events: list = []                      # the delta joins' (group or -1, key, sign)
        self.base: tuple = ({}, [{} for _ in self.groups])
        if sh.by is not None:   # the rows are (group, COUNT(DISTINCT) values): counted as the delta joins count
            self.dj = [j for j, (_, _, d) in enumerate(sh.aggs) if d or j in sh.agg_kinds]
            self._add, self._sub = self._add_grouped, self._sub_grouped
        else:
            self._add, self._sub = _add, _sub
        m.ns["_OPT"] = self.events
        self._fns = None

    def sink(self, i: int) -> str:
        """The line a delta join of pattern ``i`` ends with: the event of its solution."""
        for b, (pis, _) in enumerate(self.reqs):
            if i in pis:
                head = f"{b}, " if self.union else ""
                return "_OPT.append((-1, (" + head + "".join(f"{_slot(v)}, " for v in self.bvars[b]) + "), sign))"
        for g, (pis, shared, _) in enumerate(self.groups):
            rv = set(self.bvars[self.gbranch[g]])
            if i in pis:
                return f"_OPT.append(({g}, (" + "".join(f"{_slot(v)}, " for v in shared if v in rv) + "), sign))"
        raise AssertionError(i)

    # -- the generated functions --------------------------------------------------
    def _compile(self) -> tuple:
        """``opt<g>(shared..., V) -> [own values]`` per group (its matches over D passing its
        FILTER) and ``rows_of(mu, lists, V) -> rows``."""
        m = self.m
        gen, sh, ns = m.gen, m.sh, m.ns
        sizes = [len(x) for x in (ns.get(f"S{c}l", ()) for c in range(len(gen.classes)))]
        src: list = []
        for g, (pis, shared, own) in enumerate(self.groups):
            steps = sorted(pis, key=lambda j: not (_pvars(gen.pats, [j]) & set(shared)))
            body, ind = m._loops([(j, "D") for j in steps], set(shared), -1, sizes, "continue")
            src += [f"def opt{g}({''.join(_slot(v) + ', ' for v in self.args[g])}V):", " w = 0", " L = []",
                    " for _once in _ONCE1:"]
            src += [" " + x for x in body]
            pad = " " * (ind + 1)
            oc = self.fcode[g]
            if oc is not None:
                for ci, v in enumerate(oc[2]):
                    ns[f"{oc[3]}K{ci}"] = v
                alt = gen._falt.get(("O", g)) if self.kinds[g] == "opt" else None
                if alt is None:
                    src.append(f"{pad}if {oc[1]} is not True: continue")
                else:   # (a value the numeric source does not decide: decided over terms)
                    src += [f"{pad}try:", f"{pad}    ok = {oc[1]} is True", f"{pad}except Undecided:",
                            f"{pad}    ok = {alt} is True", f"{pad}if not ok: continue"]
            src.append(f"{pad}L.append(({''.join(_slot(v) + ', ' for v in own)}))")
            src.append(" return L")
        for b in range(len(self.reqs)):   # (one function per UNION branch holding OPTIONALs)
            self._rows_src(b, src, gen, sh, ns)
        na = len(sh.opts)
        for g, (_, gsrc, consts) in self.guards.items():
            for ci, v in enumerate(consts):
                ns[f"NG{g - na}_K{ci}"] = v
            src += [f"def guard{g}({''.join(_slot(v) + ', ' for v in self.gargs[g])}V):", f" return {gsrc} is True"]
        ns["_NONE1"] = (None,)
        exec(_code_of("\n".join(src), "<maintained optional>"), ns)   # noqa: S102 -- our own source
        self._gfns = {g: ns[f"guard{g}"] for g in self.guards}
        return [ns[f"opt{g}"] for g in range(len(self.groups))], [ns[f"rows_of{b}"] for b in range(len(self.reqs))]

    def _rows_src(self, b: int, src: list, gen, sh, ns) -> None:
        """``rows_of<b>(mu, lists, V) -> rows``: branch ``b``'s rows of a required solution."""
        rvars = self.bvars[b]
        rv = set(rvars)
        src.append(f"def rows_of{b}(M, LS, V):")
        if self.union:
            src.append(f" _b, {''.join(_slot(v) + ', ' for v in rvars)}= M")
        elif rvars:
            src.append(f" {''.join(_slot(v) + ', ' for v in rvars)}= M")
        src.append(" out = []")
        ind = 1
        bound = set(rv)
        for g, (_, _, own) in enumerate(self.groups):
            if self.gbranch[g] != b:
                continue
            bound |= set(own)
            pad = " " * ind
            if self.kinds[g] != "opt":   # (kept or not: one empty tuple or none)
                src.append(f"{pad}for t{g} in LS[{g}]:")
                ind += 1
                continue
            p = self.parent.get(g)
            if p is None:
                src.append(f"{pad}for t{g} in LS[{g}]:")
            else:   # (nested: per match of its parent; none where the parent matched none)
                call = f"opt{g}({''.join(_slot(v) + ', ' for v in self.args[g])}V)"
                src.append(f"{pad}for t{g} in ((({call}) or _NONE1) if t{p} is not None else _NONE1):")
            src.append(f"{pad} if t{g} is None:")
            src += [f"{pad}  {_slot(v)} = -1" for v in own]
            src += [f"{pad} else:", f"{pad}  {''.join(_slot(v) + ', ' for v in own)}= t{g}"]
            ind += 1
        pad = " " * ind
        lines_of = getattr(gen, "filter_lines", None)   # (a FILTER with a term-wise fallback, if any)
        fis = self.reqs[b][1]
        for fi, (fv, fsrc, _, _) in enumerate(gen._fcode):
            if (fis is None or fi in fis) and not fv <= rv:
                src += [pad + x for x in (lines_of(fi, "continue") if lines_of else
                                          [f"if {fsrc} is not True: continue"])]
        if sh.by is not None:   # (grouping: per row its group and the values of its COUNT(DISTINCT)s
            # and value-counted aggregates -- SUM, MIN, ..., COUNT of an OPTIONAL's variable, tiny_aggs)
            key = "(" + "".join(f"{_slot(v)}, " for v in sh.by) + ")" if len(sh.by) != 1 else _slot(sh.by[0])
            src += [pad + x for x in gen.by_lines(ns)]   # (GROUP BY (expr AS ?k), tiny_aggs)
            for j in self.dj:   # (an aggregate of an expression: its argument's slot first)
                src += [pad + x for x in gen.agg_arg_lines(j, ns)]
            vals = "".join(f"{_slot(sh.aggs[j][1]) if sh.aggs[j][1] else 'None'}, " for j in self.dj)
            src.append(f"{pad}out.append(({key}, ({vals})))")
        else:
            cells = []
            cell_of = getattr(gen, "computed_lines", None)   # (a computed cell with a fallback, if any)
            for n in sh.names:
                if n not in gen._ccode:
                    x = sh.alias.get(n, n)   # (a variable the UNION branch does not bind: unbound)
                    cells.append(_slot(x) if x in bound or not self.union else "-1")
                elif cell_of is None:
                    cells.append(f"_CK(_CV({gen._ccode[n][0]}))")
                else:
                    pre, cell = cell_of(n, "_CK(_CV({}))")
                    src += [pad + x for x in pre]
                    cells.append(cell)
            src.append(f"{pad}out.append((" + "".join(f"{c}, " for c in cells) + "))")
        src.append(" return out")

    def _rows(self, mu: tuple, V) -> tuple:
        fns = self._fns
        if fns is None:
            fns = self._fns = self._compile()
        opts, rows_of = fns
        b = mu[0] if self.union else 0
        lists = []
        for g, fn in enumerate(opts):
            if g in self.parent or self.gbranch[g] != b:   # (nested: evaluated per match of its
                lists.append(None)   # parent, in rows_of; another UNION branch's group: not read)
                continue
            if g in self.guards and self._gfns[g](*[mu[k] for k in self.gargpos[g]], V):
                lists.append(_KEEP)   # (a guarded [NOT] EXISTS whose guard is true: kept)
                continue
            got = fn(*[mu[k] for k in self.argpos[g]], V)
            kind = self.kinds[g]
            if kind == "opt":
                lists.append(got or [None])
            else:
                lists.append(_KEEP if bool(got) == (kind == "exists") else _GONE)
        return tuple(rows_of[b](mu, lists, V))

    # -- the state ------------------------------------------------------------------
    def settle(self, V) -> bool:
        """The events of the triple just applied (D is as it is after it): the required
        solutions that left take their rows, those marked by a group's delta have theirs
        computed again, the new ones bring theirs. Whether the rows changed."""
        ev = self.events
        if not ev:
            return False
        todo = list(ev)
        ev.clear()
        MU, IDX, R = self.MU, self.IDX, self.m.R
        added: list = []
        removed: set = set()
        dirty: dict = {}
        for g, key, sign in todo:
            if g < 0:
                if sign > 0:
                    added.append(key)
                else:
                    removed.add(key)
            else:
                for mu in IDX[g].get(key, ()):
                    dirty[mu] = None
        changed = False
        for mu in removed:
            rows = MU.pop(mu, None)
            if rows is None:
                raise _Drop
            for g, pos in self.bpos[mu[0] if self.union else 0]:
                k = tuple(mu[p] for p in pos)
                s = IDX[g][k]
                s.discard(mu)
                if not s:
                    del IDX[g][k]
            self._sub(R, rows)
            changed = True
        for mu in dirty:
            if mu in removed:
                continue
            old = MU[mu]
            new = self._rows(mu, V)
            if new != old:
                self._sub(R, old)
                self._add(R, new)
                MU[mu] = new
                changed = True
        for mu in added:
            if mu in MU:
                raise _Drop
            rows = MU[mu] = self._rows(mu, V)
            for g, pos in self.bpos[mu[0] if self.union else 0]:
                IDX[g].setdefault(tuple(mu[p] for p in pos), set()).add(mu)
            self._add(R, rows)
            changed = True
        if len(R) > MAX_ROWS:
            raise _Drop
        return changed

    def _add_grouped(self, R: dict, rows) -> None:
        D = self.m.D
        for g, vals in rows:
            R[g] = R.get(g, 0) + 1
            for j, v in zip(self.dj, vals, strict=True):
                dj = D[j].get(g)
                if dj is None:
                    dj = D[j][g] = {}
                dj[v] = dj.get(v, 0) + 1

    def _sub_grouped(self, R: dict, rows) -> None:
        D = self.m.D
        for g, vals in rows:
            _sub(R, (g,))
            for j, v in zip(self.dj, vals, strict=True):
                dj = D[j].get(g)
                n = -1 if dj is None else dj.get(v, 0) - 1
                if n > 0:
                    dj[v] = n
                elif n == 0:
                    del dj[v]
                    if not dj:
                        del D[j][g]
                else:
                    raise _Drop

    def reset(self) -> None:
        self.MU.clear()
        for d in self.IDX:
            d.clear()
        self.events.clear()
        self._fns = None   # (the join orders follow the stored part's sizes)

    def keep_base(self) -> None:
        """The stored part's own solutions: what the windows' leaving all at once goes back to."""
        self.base = (dict(self.MU), [{k: set(v) for k, v in d.items()} for d in self.IDX])

    def restore_base(self) -> None:
        self.MU.clear()
        self.MU.update(self.base[0])
        for d, b in zip(self.IDX, self.base[1], strict=True):
            d.clear()
            d.update({k: set(v) for k, v in b.items()})
        self.events.clear()


_KEEP = [()]
_GONE: list = []


def _add(R: dict, rows) -> None:
    for r in rows:
        R[r] = R.get(r, 0) + 1


def _sub(R: dict, rows) -> None:
    for r in rows:
        n = R.get(r, 0) - 1
        if n > 0:
            R[r] = n
        elif n == 0:
            del R[r]
        else:
            raise _Drop
