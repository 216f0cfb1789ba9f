"""Join orders of :class:`~engine.stream.tiny.TinyCore` compiled into nested loops.

Why: on CityBench / LSBench windows a component's join moves 3-30 rows through 3-6 steps, and
the tuple-at-a-time join spent most of its time deciding (weighing every pattern left at every
step, building the slot map, dispatching on the step's kind) and materializing one list of
tuples per step -- ~5-10 us a step for a few rows. The order the planner chose is kept and
compiled once into one Python function of nested loops (a comprehension-like body per step:
hash probe, membership test, product), so an instant runs the whole join as one call with no
intermediate lists; the planner weighs the order again every :attr:`TinyCore.replan_every`
uses or at once when the compiled order exceeds the instant's work bound.

A plan is a list of steps, each describing one pattern or joined static group against the
slots bound so far (what :meth:`TinyCore._step` / :class:`_Joined.step` decide per call):

* ``("t0",)``: a pattern without variables (its match is non-empty: checked before the loops);
* ``("t1", k, j)``: a test of end ``k`` against slot ``j``;
* ``("t2", js, jo)``: a test of the pair (slot ``js``, slot ``jo``);
* ``("pr", k, j)``: a hash probe on end ``k`` by slot ``j``, binding the other end;
* ``("s1", k)`` / ``("s2",)``: a product with the pattern's values at end ``k`` / its pairs;
* ``("gp", names, cpos, nf)``: a joined static group probed by the slots ``cpos`` (its
  variables ``names``), binding ``nf`` more;
* ``("gs", nf)``: a product with a joined static group's rows.

The generated function takes the initial rows, the steps' objects and the work bound and
returns ``(rows, work)`` -- ``work`` counts the rows every expanding step produced, as the
interpreted join's budget does -- or None past the bound. Solutions are bags: each pattern's
matches are distinct pairs, so the nested loops produce the join's multiplicities.
"""

from __future__ import annotations

__all__ = ["compilable", "compile_plan", "pattern_ends", "pattern_step", "group_step"]


def pattern_ends(pat, slots: dict) -> tuple[list, list]:
    """``(bound, free)`` variable ends of a resolved pattern given the bound ``slots``:
    ``(end, slot)`` of the bound ones, ``(end, name)`` of the free ones (end 0: subject, 1:
    object; a variable repeated at both ends counts once, as the subject)."""
    s, _, o = pat
    ends = []
    if s[0] == "v":
        ends.append((0, s[1]))
    if o[0] == "v" and not (s[0] == "v" and o[1] == s[1]):
        ends.append((1, o[1]))
    return [(k, slots[v]) for k, v in ends if v in slots], [(k, v) for k, v in ends if v not in slots]


def pattern_step(pat, slots: dict) -> tuple:
    """The step of one resolved pattern ``((kind, x), p, (kind, x))`` given the bound ``slots``
    (updated with the variables it binds), deciding as :meth:`TinyCore._step` does."""
    bound, free = pattern_ends(pat, slots)
    if not free:
        if not bound:
            return ("t0",)
        if len(bound) == 1:
            return ("t1", bound[0][0], bound[0][1])
        return ("t2", bound[0][1], bound[1][1])   # (ends in order: subject, object)
    for _, v in free:
        slots[v] = len(slots)
    if not bound:
        return ("s1", free[0][0]) if len(free) == 1 else ("s2",)
    return ("pr", bound[0][0], bound[0][1])


def group_step(group_slots: dict, slots: dict) -> tuple:
    """The step of a joined static group whose variables are ``group_slots`` (name -> its
    column), as :meth:`_Joined.step` decides; ``slots`` updated."""
    bound = tuple(v for v in group_slots if v in slots)
    free = [v for v in group_slots if v not in slots]
    cpos = tuple(slots[v] for v in bound)
    for v in free:
        slots[v] = len(slots)
    if not bound:
        return ("gs", len(free))
    return ("gp", bound, cpos, len(free))


#: the most loops a compiled plan nests (the row loop included): CPython refuses a function with
#: 20 statically nested blocks ("too many statically nested blocks"), so longer orders stay
#: interpreted
MAX_LOOPS = 16
_LOOPS = frozenset(("pr", "s1", "s2", "gp", "gs"))


def compilable(steps: list[tuple]) -> bool:
    """Whether ``steps`` fit one generated function (at most :data:`MAX_LOOPS` nested loops)."""
    return 1 + sum(st[0] in _LOOPS for st in steps) <= MAX_LOOPS


#: compiled plans by (steps, width), shared by every core (a replan mostly picks the same
#: order again; queries of one shape share their plans): compiling costs ~0.3 ms
_CODE: dict[tuple, object] = {}


def compile_plan(steps: list[tuple], width: int):
    """One function ``f(cur, objs, bound) -> (rows, work) | None`` running ``steps`` over rows
    of ``width`` slots (see the module's docstring); ``objs[i]`` is step i's match or group."""
    key = (tuple(steps), width)
    run = _CODE.get(key)
    if run is None:
        if len(_CODE) >= 1024:
            _CODE.clear()
        run = _CODE[key] = _compile(steps, width)
    return run


def _compile(steps: list[tuple], width: int):
    consts: dict[int, tuple] = {}
    lines = ["def run(cur, o, B, K=K):", " w = 0", " out = []", " append = out.append"]
    n = width
    body: list[str] = []
    depth = 2
    slot = width
    for i, st in enumerate(steps):
        kind = st[0]
        pad = " " * depth
        if kind == "t0":
            continue   # (a non-empty match: checked by the caller)
        if kind == "t1":
            lines.append(f" t{i} = o[{i}].tester({st[1]})")
            body.append(f"{pad}if t{i}(a{st[2]}):")
            depth += 1
        elif kind == "t2":
            lines.append(f" t{i} = o[{i}].pair_tester()")
            body.append(f"{pad}if t{i}(a{st[1]}, a{st[2]}):")
            depth += 1
        elif kind == "pr":
            lines.append(f" g{i} = o[{i}].getter({st[1]})")
            body += [f"{pad}h{i} = g{i}(a{st[2]})", f"{pad}if h{i}:",
                     f"{pad} w += len(h{i})", f"{pad} if w > B:", f"{pad}  return None",
                     f"{pad} for a{slot}, in h{i}:"]
            slot += 1
            depth += 2
        elif kind in ("s1", "s2"):
            src = f"o[{i}].values({st[1]})" if kind == "s1" else f"o[{i}].all_pairs()"
            lines.append(f" v{i} = {src}")
            k = 1 if kind == "s1" else 2
            names = ", ".join(f"a{slot + x}" for x in range(k))
            body += [f"{pad}w += len(v{i})", f"{pad}if w > B:", f"{pad} return None",
                     f"{pad}for {names}, in v{i}:"]
            slot += k
            depth += 1
        elif kind == "gp":
            _, names, cpos, nf = st
            consts[i] = names   # (passed in, never written into the source)
            lines.append(f" x{i} = o[{i}].index(K[{i}])")
            key = "(" + "".join(f"a{j}, " for j in cpos) + ")"
            tgt = ", ".join(f"a{slot + x}" for x in range(nf)) + "," if nf else "_"
            body += [f"{pad}h{i} = x{i}.get({key})", f"{pad}if h{i}:",
                     f"{pad} w += len(h{i})", f"{pad} if w > B:", f"{pad}  return None",
                     f"{pad} for {tgt} in h{i}:"]
            slot += nf
            depth += 2
        elif kind == "gs":
            nf = st[1]
            lines.append(f" e{i} = o[{i}].rows")
            tgt = ", ".join(f"a{slot + x}" for x in range(nf)) + "," if nf else "_"
            body += [f"{pad}w += len(e{i})", f"{pad}if w > B:", f"{pad} return None",
                     f"{pad}for {tgt} in e{i}:"]
            slot += nf
            depth += 1
        else:   # pragma: no cover - the step kinds above are all there are
            raise ValueError(f"unknown plan step {kind!r}")
    head = ", ".join(f"a{j}" for j in range(n))
    lines.append(f" for {head + ',' if n else '_'} in cur:")
    lines += body
    row = "(" + "".join(f"a{j}, " for j in range(slot)) + ")"
    lines.append(" " * depth + f"append({row})")
    lines.append(" return out, w")
    # the source holds only slot numbers and step indexes (no name or value from the query)
    scope: dict = {"K": consts}
    exec(compile("\n".join(lines), "<tiny plan>", "exec"), scope)   # noqa: S102
    return scope["run"]
