"""I/DSTREAM and CONSTRUCT forms of LSBench-small queries on Jindou: median instant and path.

``python -m bench.maintained_forms [--minutes 2] [--runs 3]``

The forms wave 2k (helper V) brought to the generated and maintained paths, over the queries
of :mod:`bench.lsbench` (their WHERE, windows and stream): ISTREAM / DSTREAM of L1, L2, L5 and
CONSTRUCT templates over L1-L3 (RSTREAM and ISTREAM; C-SPARQL's derived streams run CONSTRUCT).
Replayed as ``python -m bench streams`` does (:func:`bench.streams.run_jindou`, a woken worker);
Jindou only (the results are checked by the tests). Per query: the median instant of each run
(µs) and the instants answered by a maintained state / generated code / the other paths. Runs
on older trees for A/B (``PYTHONPATH=<engine tree>:<this tree>``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from bench import citybench as cb
from bench import lsbench
from bench import streams as bs


@dataclasses.dataclass
class _Query(cb.CityQuery):
    mode: str = "RSTREAM"

    @property
    def register_text(self) -> str:
        m = "" if self.mode == "RSTREAM" else self.mode + " "
        return f"REGISTER {m}QUERY {self.name} AS {self.text}"


def _forms() -> dict[str, tuple[str, str, str]]:
    """id -> (mode, the L query it is made from, the text's replacement of its SELECT line)."""
    w = "<urn:jindou:bench:"
    return {
        "I1": ("ISTREAM", "L1", "SELECT ?post ?creator"),
        "D1": ("DSTREAM", "L1", "SELECT ?post ?creator"),
        "I2": ("ISTREAM", "L2", "SELECT ?friend ?post ?content"),
        "I5": ("ISTREAM", "L5", "SELECT ?photo ?creator ?liker"),
        "K1": ("RSTREAM", "L1", f"CONSTRUCT {{ ?creator {w}wrote> ?post }}"),
        "K2": ("RSTREAM", "L2", f"CONSTRUCT {{ ?friend {w}posted> ?post . ?post {w}says> ?content }}"),
        "K3": ("ISTREAM", "L3", f"CONSTRUCT {{ ?friend {w}at> ?lat }}"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.maintained_forms", description=__doc__.split("\n")[0])
    ap.add_argument("--queries", default=None, help="e.g. I1,K1 (default: all)")
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    quiet = lambda *_: None  # noqa: E731
    texts = lsbench.queries()
    sel = None if a.queries is None else {q.strip().upper() for q in a.queries.split(",")}
    print("| query | mode | form | median µs per run | median | maintained / generated / other |")
    print("|---|---|---|---|---:|---|")
    for qid, (mode, base, head) in _forms().items():
        if sel is not None and qid not in sel:
            continue
        wl = bs.load_lsbench([base], a.minutes, bs.SMALL_RATE, 1000, say=quiet, name="lsbench-small")
        src = texts[base]
        first = next(ln for ln in src.splitlines() if ln.startswith("SELECT"))
        text = src.replace(first, head, 1)
        q0 = cb.parse_query(qid, text)
        # (form "ASK" for a CONSTRUCT: the harness keeps no rows of it, only its latencies)
        q = _Query(q0.name, q0.text, q0.windows, q0.steps, q0.static, q0.plain,
                   "ASK" if head.startswith("CONSTRUCT") else "SELECT", mode)
        wl = bs.Workload(wl.name, [bs.BenchQuery(base, q)], wl.static_nt, wl.streams, wl.start_ms, wl.end_ms,
                         wl.config)
        meds, paths = [], None
        for _ in range(a.runs):
            pr = bs.run_jindou(wl, True, quiet)[base]
            xs = list(pr.latency.values())
            meds.append(statistics.median(xs) * 1000.0 if xs else float("nan"))
            paths = getattr(pr, "paths", None)
        p = "-" if paths is None else f"{paths[0]} / {paths[1]} / {paths[2] - paths[0] - paths[1]}"
        print(f"| {qid} | {mode} | {'CONSTRUCT' if head.startswith('CONSTRUCT') else 'SELECT'} | "
              f"{' '.join(f'{x:.1f}' for x in meds)} | {statistics.median(meds):.1f} | {p} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
