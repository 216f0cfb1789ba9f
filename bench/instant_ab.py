"""A/B of the one-step maintained instant in one process, alternated per instant.

``cd /tmp && PYTHONPATH=<branch> python -m bench.instant_ab --base /tmp/base-X --workload
lsbench-small --queries L1,L6 [--minutes 1] [--replays 2]``

Run-to-run noise on a shared machine (the composite's and Jindou's medians move by 2x between
two runs of the same tree at load 10+) hides a 10-20 % change of a 10 µs instant. Here the
base tree's versions of the functions on the one-step path (:data:`SPEC`, their source read
from ``--base`` and executed in this tree's module namespaces, so they share its globals and
counters) and this tree's are both installed behind dispatchers, and the instants of one
replay (:func:`bench.streams.run_jindou`) alternate between them: the same data, the same
load, the same process. ``Maintained.advance`` prepares the *next* instant, so it runs as
the variant of the instant after it. The variants are installed on the classes before each
instant (no dispatcher in between: a dispatcher's extra call per swapped method was paid only
by the variant that calls more of them). Reported: the median (and p25) of ``last_latency_ms``
of the instants the one-step path answered, per variant. A function the base does not have
is this tree's in both; one this tree does not have is the base's in both.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import textwrap

from bench import streams as bs

#: (module, file under engine/stream, class, method) swapped between base and branch
SPEC = [
    ("engine.stream.continuous", "continuous.py", "InstantEvaluator", "maintained_due"),
    ("engine.stream.continuous", "continuous.py", "InstantEvaluator", "maintained_instant"),
    ("engine.stream.continuous", "continuous.py", "InstantEvaluator", "_maintained_ok"),
    ("engine.stream.maintained", "maintained.py", "Maintained", "instant"),
    ("engine.stream.maintained", "maintained.py", "Maintained", "_answered"),
    ("engine.stream.maintained", "maintained.py", "Maintained", "advance"),
    ("engine.stream.scheduler", "scheduler.py", "Scheduler", "_step_maintained"),
    ("engine.stream.scheduler", "scheduler.py", "Scheduler", "_step_one"),
]
#: module-level switches the base does not have: off for the base's instants (this tree's
#: ``_step_one`` reads them; the base's never does)
SWITCHES = [("engine.stream.instant_fast", "ENABLED")]



def one_query_workload(a, qid: str):
    """Query ``qid`` alone over its workload's stream (``a.workload``: lsbench-small,
    lsbench-varied or lsbench-walk, with ``a.minutes``, ``a.seed``, ``a.varied``): what the
    per-instant tools (this one, ``bench.instant_count``, ``bench.first_instants``) replay."""
    quiet = lambda *_: None  # noqa: E731
    if a.workload == "lsbench-walk":
        from bench import lswalk  # noqa: PLC0415

        n = a.varied or max(int(qid[1:]), bs.WALK_QUERIES)
        return bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, a.seed, say=quiet, name=a.workload,
                               texts=lambda d, n=n: lswalk.queries(d, n, a.seed))
    if a.workload == "lsbench-varied":
        from bench import lsvaried  # noqa: PLC0415

        n = a.varied or max(int(qid[1:]), len(lsvaried.TEMPLATES))
        return bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, a.seed, say=quiet, name=a.workload,
                               texts=lsvaried.queries(n, a.seed))
    return bs.load_lsbench([qid], a.minutes, bs.SMALL_RATE, 1000, say=quiet, name="lsbench-small")

def method_source(path: str, cls: str, name: str) -> str | None:
    """The source of method ``name`` of class ``cls`` in file ``path`` (dedented), or None."""
    src = open(path).read()
    a = src.find(f"\nclass {cls}")
    if a < 0:
        return None
    m = re.search(rf"\n    def {name}\(", src[a:])
    if m is None:
        return None
    lines = src[a + m.start() + 1:].split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= 4 and not line.lstrip().startswith(")"):
            break
        out.append(line)
    return textwrap.dedent("\n".join(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instant_ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the base tree (a git worktree of the base commit)")
    ap.add_argument("--workload", default="lsbench-small", choices=("lsbench-small", "lsbench-varied", "lsbench-walk"))
    ap.add_argument("--queries", default="L1")
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--replays", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base-first", action="store_true",
                    help="the first instant the base's (default this tree's; alternate it between runs)")
    ap.add_argument("--varied", type=int, default=None,
                    help="queries drawn (lsbench-walk / lsbench-varied; as bench streams --varied)")
    a = ap.parse_args(argv)
    import importlib  # noqa: PLC0415

    from engine.stream import continuous as C  # noqa: PLC0415
    from engine.stream import scheduler as S  # noqa: PLC0415

    variants: dict = {"base": {}, "new": {}}
    for mod, f, cls, name in SPEC:
        m = importlib.import_module(mod)
        owner = getattr(m, cls)
        mine = owner.__dict__.get(name)
        src = method_source(f"{a.base}/engine/stream/{f}", cls, name)
        base = None
        if src is not None:
            ns = dict(vars(m))
            exec(src, ns)   # noqa: S102 -- the base tree's own source
            base = ns[name]
        if base is None and mine is None:
            continue
        variants["base"][(owner, name)] = base if base is not None else mine
        variants["new"][(owner, name)] = mine if mine is not None else base
    cur = ["new"]
    k = [0]
    lat: dict = {"base": [], "new": []}

    switches = []
    for mod, name in SWITCHES:
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        switches.append((m, name, getattr(m, name)))

    def install(v: str) -> None:
        other = "base" if v == "new" else "new"
        for key in variants["base"]:
            # (advance prepares the next instant: the other variant's)
            setattr(key[0], key[1], variants[other if key[1] == "advance" else v][key])
        for m, name, on in switches:
            setattr(m, name, on if v == "new" else False)

    step_key = (S.Scheduler, "_step_one")

    def step_one(sched, q, t, last):
        v = cur[0] = "base" if (k[0] + a.base_first) % 2 else "new"
        k[0] += 1
        install(v)
        S.Scheduler._step_one = step_one
        f0 = C._MFAST[0]
        variants[v][step_key](sched, q, t, last)
        if C._MFAST[0] != f0 and q.last_latency_ms is not None:
            lat[v].append(q.last_latency_ms * 1000.0)

    S.Scheduler._step_one = step_one
    quiet = lambda *_: None  # noqa: E731
    for qid in [q.strip().upper() for q in a.queries.split(",") if q.strip()]:
        lat["base"].clear()
        lat["new"].clear()
        wl = one_query_workload(a, qid)
        for _ in range(a.replays):
            bs.run_jindou(wl, True, say=quiet)
        b, n_ = lat["base"], lat["new"]
        if len(b) < 2 or len(n_) < 2:
            print(f"{qid}: too few one-step instants ({len(b)} / {len(n_)})", flush=True)
            continue
        print(f"{qid}: base median {statistics.median(b):.2f} µs (n={len(b)}), branch {statistics.median(n_):.2f} "
              f"(n={len(n_)}); p25 {statistics.quantiles(b, n=4)[0]:.2f} / {statistics.quantiles(n_, n=4)[0]:.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
