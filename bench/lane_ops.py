"""`python -m bench.lane_ops`: the Python work per request of ``bench.lane_mix``'s mix, counted:
interpreter opcodes and Python calls per request (``sys.settrace`` opcode events).

A count does not move with the machine's load: on a shared machine, where the mix's
thread CPU swings by 30 % between rounds of one tree, two trees' counts are an A/B of
their interpreter work that one run of each settles (run it with ``PYTHONPATH=<tree>``
from a neutral directory, as ``bench.lane_mix``). What it leaves out is the time inside
C functions (a regular expression's split, a format, dict operations) and how long each
opcode takes: read it next to ``bench.lane_mix``'s CPU, not instead of it.

Traced runs are ~50x slower, so the inline budgets are raised for the counted round
(every request of both trees then takes the same inline path; the warm-up is untraced
and learns the shapes and binds the runners as a server would).
"""

from __future__ import annotations

import argparse
import collections
import sys

from bench import lane_mix


class Counter:
    """A ``sys.settrace`` tracer counting calls and opcode events (per function with ``by_function``)."""

    def __init__(self, by_function: bool = False):
        self.calls = 0
        self.ops = 0
        self.per = collections.Counter() if by_function else None

    def __call__(self, frame, event, arg):
        self.calls += 1
        frame.f_trace_opcodes = True
        return self._local if self.per is None else self._local_per

    def _local(self, frame, event, arg):
        if event == "opcode":
            self.ops += 1
        return self._local

    def _local_per(self, frame, event, arg):
        if event == "opcode":
            self.ops += 1
            code = frame.f_code
            self.per[f"{code.co_qualname} ({code.co_filename.rsplit('/', 1)[-1]})"] += 1
        return self._local_per


def count(conns, reqs: list[bytes], loop, by_function: bool = False) -> tuple[Counter, int]:
    """The counter of one traced :func:`bench.lane_mix.run` of ``reqs``, and its requests not answered inline."""
    from server.api import common  # noqa: PLC0415

    budget, probe = common.INLINE_BUDGET, common.INLINE_PROBE
    common.INLINE_BUDGET = common.INLINE_PROBE = 60.0
    c = Counter(by_function)
    sys.settrace(c)
    try:
        _, slow = lane_mix.run(conns, reqs, loop)
    finally:
        sys.settrace(None)
        common.INLINE_BUDGET, common.INLINE_PROBE = budget, probe
    return c, slow


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lane_ops", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="N-Triples file (default: the cached 1M LUBM-like file)")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--functions", type=int, default=0, help="also list the N functions with the most opcodes")
    args = ap.parse_args(argv)
    loop, conns = lane_mix.warm_connections(args.data)  # (warm rounds untraced)
    n = args.requests
    c, slow = count(conns, lane_mix.requests("ops", n), loop, args.functions > 0)
    print(f"per request: {c.ops / n:.1f} opcodes, {c.calls / n:.2f} Python calls; not inline: {slow} of {n}")
    if c.per is not None:
        for name, k in c.per.most_common(args.functions):
            print(f"{k / n:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
