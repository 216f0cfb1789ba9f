"""`python -m bench.first_seen`: which way the HTTP lane answers a selective text it
has not seen before, and what that costs, per query of ``bench.unseen_sweep``'s
selective class and per client form (``bench/client_forms.py``), in process.

Every request is a new text (the query with a new comment line; ``--mode renamed``:
its variables renamed, a skeleton never seen; ``--mode repeated``: the same text again). For each (query, form): the path the lane took
(``kept``: a kept answer; ``runner``: a ready runner of its layout; ``template``: a
template hit; ``text``: the text path, parse and plan; ``pool``: not answered
inline), Python opcodes and calls per request (``sys.settrace``, stable under load)
and, with ``--time``, the median µs per request untraced, next to pyoxigraph's
``Store.query`` + JSON writer on the same text (for scale).

    cd /tmp && PYTHONPATH=<tree> python -m bench.first_seen [--only US6,US8] [--forms ...] [--time]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import re
import statistics
import sys
import time

from bench import lane_profile
from bench.client_forms import CLOSING, forms
from bench.kept_ops import _send
from bench.lane_ops import Counter

DEFAULT_FORMS = ("http.client-post-query", "curl-get", "requests-post-form")
D1U0 = "http://www.Department1.University0.edu"
D2U1 = "http://www.Department2.University1.edu"


def _extra():
    """Selective shapes beyond the sweep's ten (other constants, other predicates): the ones
    issue 14's brief names (VALUES, ASK of constants, FILTER with a constant, LIMIT, ORDER BY
    of a small answer, OPTIONAL on a point lookup)."""
    from bench.unseen_sweep import _s  # noqa: PLC0415

    return (
        _s("FS1", f"ASK {{ <{D1U0}/GraduateStudent5> ub:advisor <{D1U0}/FullProfessor1> }}", "ASK of constants"),
        _s("FS2", f"ASK {{ <{D2U1}/FullProfessor2> a ub:FullProfessor }}", "ASK of a class"),
        _s("FS3", f"""SELECT ?X ?N WHERE {{ VALUES ?X {{ <{D1U0}/FullProfessor1> <{D2U1}/Lecturer2> }}
  ?X ub:name ?N }}""", "VALUES of two entities, names"),
        _s("FS4", f"""SELECT ?N WHERE {{ VALUES (?X) {{ (<{D1U0}/AssociateProfessor3>) }} ?X ub:name ?N }}""",
           "VALUES of one row"),
        _s("FS5", f"""SELECT ?S WHERE {{ ?S ub:memberOf <{D2U1}> ; ub:age ?A FILTER(?A > 30) }}""",
           "FILTER with a constant"),
        _s("FS6", f"""SELECT ?S WHERE {{ ?S ub:advisor <{D1U0}/FullProfessor4> }} LIMIT 5""", "LIMIT"),
        _s("FS7", f"""SELECT ?C WHERE {{ <{D1U0}/FullProfessor2> ub:teacherOf ?C }} ORDER BY DESC(?C)""",
           "ORDER BY of a small answer"),
        _s("FS8", f"""SELECT ?N ?E WHERE {{ <{D2U1}/Lecturer4> ub:name ?N OPTIONAL {{ <{D2U1}/Lecturer4>
  ub:emailAddress ?E }} }}""", "OPTIONAL on a point lookup"),
        _s("FS9", f"""SELECT ?E WHERE {{ ?X ub:emailAddress ?E FILTER(?X = <{D1U0}/Lecturer2>) }}""",
           "FILTER ?x = constant"),
        _s("FS10", f"""SELECT (COUNT(?S) AS ?K) WHERE {{ ?S ub:takesCourse <{D1U0}/Course3> }}""",
           "COUNT of an inverse lookup"),
    )


class _Paths:
    """Counts which way the lane answered, by wrapping the functions each way calls."""

    def __init__(self):
        from engine.database import Database  # noqa: PLC0415
        from server.api import sparql  # noqa: PLC0415

        self.n = collections.Counter()
        self._undo = []
        for owner, name, tag in ((Database, "query_template", "template"), (Database, "query", "text"),
                                 (sparql, "_run_runner", "runner")):
            self._wrap(owner, name, tag)
        self.served0 = getattr(sparql._ANSWERS, "served", 0)
        self.sparql = sparql

    def _wrap(self, owner, name, tag):
        orig = getattr(owner, name)
        n = self.n

        def spy(*a, **k):
            n[tag] += 1
            return orig(*a, **k)

        setattr(owner, name, spy)
        self._undo.append((owner, name, orig))

    def kept(self) -> int:
        return getattr(self.sparql._ANSWERS, "served", 0) - self.served0

    def close(self):
        for owner, name, orig in self._undo:
            setattr(owner, name, orig)


def _texts(q, mode: str, n: int, salt: str) -> list[str]:
    if mode == "repeated":
        return [q.text] * n
    if mode == "renamed":  # (another skeleton every time: no template, parse shape or cost of its own)
        return [re.sub(r"\?([A-Za-z]\w*)", rf"?\1_{salt.replace('.', '_').replace('-', '_')}_{i}", q.text)
                for i in range(n)]
    return [q.text + f"\n# {salt}-{i}\n" for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.first_seen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/jindou-bench/lubm-t1000000-seed0.nt")
    ap.add_argument("--only", default=None, help="comma list of sweep query names (default: the selective class)")
    ap.add_argument("--forms", default=",".join(DEFAULT_FORMS))
    ap.add_argument("--mode", choices=("new", "repeated", "renamed"), default="new",
                    help="new: a new comment each time; renamed: new variable names (a new skeleton) each time")
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--time", action="store_true", help="also time the requests untraced, and pyoxigraph")
    args = ap.parse_args(argv)
    from bench.unseen_sweep import HUNT, UNSEEN  # noqa: PLC0415
    from engine.database import Database  # noqa: PLC0415

    pool = {q.name: q for q in UNSEEN + HUNT + _extra()}
    names = (args.only.split(",") if args.only
             else [q.name for q in UNSEEN if q.selective] + [q.name for q in _extra()])
    db = Database(query_timeout=3600)
    db.load_file(args.data)
    ox = None
    if args.time:
        import pyoxigraph  # noqa: PLC0415

        ox = pyoxigraph.Store()
        ox.bulk_load(path=args.data, format=pyoxigraph.RdfFormat.N_TRIPLES)
    # as ``jindou serve`` does after loading (server/cli.py): the loaded objects out of the
    # collector's generations, so a request's collections stay short
    gc.collect()
    gc.freeze()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    connect = lane_profile.make_connector(db, loop)
    print("| query | form | path | opcodes | calls | µs Jindou | µs pyoxigraph |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for qn in names:
        q = pool[qn]
        for form in args.forms.split(","):
            proto, tr = connect()
            warm = _texts(q, args.mode, 3, f"w{form}")
            for t in warm:
                _send(proto, tr, forms(t)[form], loop)
            if not tr.out or b" 200 " not in tr.out[0][:20]:
                print(f"| {qn} | {form} | FAILED {bytes(b''.join(tr.out))[:200]!r} |")
                continue
            reqs = [forms(t)[form] for t in _texts(q, args.mode, args.requests, f"c{form}")]
            paths = _Paths()
            c = Counter(False)
            sys.settrace(c)
            try:
                for chunks in reqs:
                    if form in CLOSING:
                        proto, tr = connect()
                    _send(proto, tr, chunks, loop)
            finally:
                sys.settrace(None)
                paths.close()
            took = dict(paths.n)
            k = paths.kept()
            if k:
                took["kept"] = k
            n = args.requests
            inline = k + took.get("runner", 0) + took.get("template", 0) + took.get("text", 0)
            path = ",".join(f"{t}:{v}" for t, v in sorted(took.items()))
            if inline < n:
                path += f",other:{n - inline}"
            us = oxus = "-"
            if args.time:
                reqs = [forms(t)[form] for t in _texts(q, args.mode, args.requests, f"t{form}")]
                ns = []
                for chunks in reqs:
                    if form in CLOSING:
                        proto, tr = connect()
                    t0 = time.perf_counter_ns()
                    _send(proto, tr, chunks, loop)
                    ns.append(time.perf_counter_ns() - t0)
                us = f"{statistics.median(ns) / 1e3:.0f}"
                ons = []
                for t in _texts(q, args.mode, args.requests, f"o{form}"):
                    t0 = time.perf_counter_ns()
                    r = ox.query(t)
                    if isinstance(r, bool):
                        pyoxigraph_out = b"true" if r else b"false"
                    else:
                        pyoxigraph_out = r.serialize(format=pyoxigraph.QueryResultsFormat.JSON)
                    ons.append(time.perf_counter_ns() - t0)
                del pyoxigraph_out
                oxus = f"{statistics.median(ons) / 1e3:.0f}"
            print(f"| {qn} | {form} | {path} | {c.ops / n:.0f} | {c.calls / n:.0f} | {us} | {oxus} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
