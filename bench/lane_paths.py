"""`python -m bench.lane_paths`: which path each timed request of the unseen sweep took in
Jindou's server, and its server-side µs (wave 2o, helper G).

Sub-millisecond HTTP ratios swing with the machine's load; the path a request takes does
not. This replays the sweep's order against one server (every query once, as the
sweep's answer comparison does, then 5 timed requests per query: the sweep's median is
the third) and reads a trace the server writes: wrappers around the lane's decision
points (``post_answer``, ``_inline_run``, ``_kept_run``, ``try_inline``,
``try_inline_lane``, ``ServerState.run``). Per query it prints the timed requests' paths,
K kept answer, T template / lane program inline, I text inline, P thread pool, and the
median server-side µs (the lane's handling plus, for a pooled request, the ASGI
handler's).

    cd /tmp && PYTHONPATH=<tree> python -m bench.lane_paths --only US1,US2,UL1 [--all-warm] [--held-out]

The server is started as ``python -m bench.lane_paths --serve-traced TRACE serve ...`` (the
same ``jindou serve`` with the wrappers installed before the app is built).
"""

from __future__ import annotations

import functools
import os
import re
import statistics
import sys
import tempfile
import time


def _serve_traced(trace: str, argv: list[str]) -> int:
    import server.api.common as C  # noqa: PLC0415
    import server.api.sparql as S  # noqa: PLC0415

    log = open(trace, "a", buffering=1)  # noqa: SIM115 - the server's lifetime

    def wrap(owner, name):
        f = getattr(owner, name)

        @functools.wraps(f)
        def g(*a, **k):
            t0 = time.perf_counter()
            r = None
            try:
                r = f(*a, **k)
                return r
            finally:
                us = (time.perf_counter() - t0) * 1e6
                done = ""
                if name.startswith("try_inline"):
                    done = f" done={bool(r[0]) if isinstance(r, tuple) else None}"
                log.write(f"{name} {us:.0f}us{done}\n")
        setattr(owner, name, g)

    for n in ("post_answer", "_inline_run", "_kept_run"):
        wrap(S, n)
    wrap(C.ServerState, "try_inline")
    wrap(C.ServerState, "try_inline_lane")
    run = C.ServerState.run

    async def pooled(self, fn, shape=None, *a, **k):
        t0 = time.perf_counter()
        try:
            return await run(self, fn, shape, *a, **k)
        finally:
            log.write(f"run {(time.perf_counter() - t0) * 1e6:.0f}us\n")
    C.ServerState.run = pooled
    handle = S.handle_sparql

    async def handled(*a, **k):
        t0 = time.perf_counter()
        try:
            return await handle(*a, **k)
        finally:
            log.write(f"ASGI {(time.perf_counter() - t0) * 1e6:.0f}us\n")
    S.handle_sparql = handled
    from server.cli import main as serve  # noqa: PLC0415 - after the wrappers (app.py imports by name)

    sys.argv = ["jindou", *argv]
    return serve()


def _paths(trace: str) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    with open(trace) as f:
        text = f.read()
    for block in re.split(r"^=== ", text, flags=re.M):
        m = re.match(r"(\S+) #\d\n", block)
        if not m:
            continue
        lines = block.splitlines()[1:]
        if any(ln.startswith("run ") for ln in lines):
            p = "P"
        elif any(ln.startswith("try_inline_lane") and "done=True" in ln for ln in lines):
            p = "T"
        elif any(ln.startswith("try_inline ") and "done=True" in ln for ln in lines):
            p = "I"
        else:
            p = "K"
        us = sum(float(re.search(r" (\d+)us", ln).group(1)) for ln in lines
                 if ln.startswith(("post_answer", "ASGI")))
        out.setdefault(m.group(1), []).append((p, us))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-traced"]:
        return _serve_traced(argv[1], argv[2:])
    import argparse  # noqa: PLC0415

    from bench.peers import _env  # noqa: PLC0415
    from bench.selective_heldout import QUERIES as HELD  # noqa: PLC0415
    from bench.unseen_hunt2 import HUNT2  # noqa: PLC0415
    from bench.unseen_hunt3 import HUNT3  # noqa: PLC0415
    from bench.unseen_sweep import HUNT, UNSEEN, JindouSweepPeer  # noqa: PLC0415

    ap = argparse.ArgumentParser(prog="python -m bench.lane_paths", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/jindou-bench/lubm-t1000000-seed0.nt")
    ap.add_argument("--only", required=True, help="comma list of query names")
    ap.add_argument("--all-warm", action="store_true", help="the warm-up over every query of the sets (the sweep's)")
    ap.add_argument("--held-out", action="store_true", help="also the held-out set (bench/selective_heldout.py)")
    opts = ap.parse_args(argv)
    queries = list(UNSEEN) + list(HUNT) + list(HUNT2) + list(HUNT3) + (list(HELD) if opts.held_out else [])
    want = {n.strip().upper() for n in opts.only.split(",")}
    chosen = [q for q in queries if q.name in want]
    fd, trace = tempfile.mkstemp(prefix="lane-paths-", suffix=".log")
    os.close(fd)

    class Traced(JindouSweepPeer):
        def load(self, path: str) -> None:
            argv = [sys.executable, "-m", "bench.lane_paths", "--serve-traced", trace, "serve", "--data", path,
                    "--port", str(self.port), "--host", "127.0.0.1", "--no-progress", "--log-level", "warning",
                    "--query-timeout", "3600"]
            self._spawn(argv, _env())
            self._wait_ready(3600)

    j = Traced()
    try:
        j.load(opts.data)
        with open(trace, "a", buffering=1) as log:
            for q in queries if opts.all_warm else chosen:
                j.row_strings(q.text)
            for q in chosen:
                for i in range(5):
                    log.write(f"=== {q.name} #{i}\n")
                    j.timed(q.text)
                log.write("=== end\n")
    finally:
        j.close()
    got = _paths(trace)
    os.remove(trace)
    counts = dict.fromkeys("KTIP", 0)
    print(f"load {open('/proc/loadavg').read().split()[:3]}\n")
    print("| query | paths | median server µs | each |\n| --- | --- | ---: | --- |")
    for name, v in got.items():
        for p, _ in v:
            counts[p] += 1
        print(f"| {name} | {''.join(p for p, _ in v)} | {statistics.median(u for _, u in v):.0f} | "
              f"{' '.join(f'{u:.0f}' for _, u in v)} |")
    print(f"\npaths of the timed requests: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
