"""`python -m bench.new_texts`: a new query text of a known shape, in process
(``Database.query``), shapes the HTTP lane's templates do not cover: OPTIONAL,
UNION, FILTER on a string, MINUS, BIND, a constant predicate and two constant
entities, a literal constant. Per family: µs per text when the same text
repeats, when each text is new (a new constant and comment every time), and
the parse alone (``parse_query``) of those new texts for scale."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench.http_load import PREFIX, _entities

#: name -> (template with {c} and {d}: two entities of the kind; entity kind)
FAMILIES = {
    "optional": ("SELECT ?n ?e WHERE {{ <{c}> ub:name ?n OPTIONAL {{ <{c}> ub:emailAddress ?e }} }}",
                 "AssociateProfessor"),
    "union": ("SELECT ?x WHERE {{ {{ <{c}> ub:worksFor ?x }} UNION {{ <{d}> ub:worksFor ?x }} }}",
              "AssociateProfessor"),
    "filter_str": ("SELECT ?s WHERE {{ ?s ub:advisor <{c}> ; ub:name ?n FILTER(?n != \"{d}\") }}",
                   "FullProfessor"),
    "minus": ("SELECT ?c WHERE {{ <{c}> ub:takesCourse ?c MINUS {{ <{d}> ub:takesCourse ?c }} }}",
              "GraduateStudent"),
    "bind": ("SELECT ?p ?o ?who WHERE {{ <{c}> ?p ?o BIND(<{d}> AS ?who) }}", "AssociateProfessor"),
    "two_consts": ("ASK {{ <{c}> ub:advisor ?p . <{d}> ub:advisor ?p }}", "GraduateStudent"),
}


def texts(name: str, mode: str, n: int, salt: str) -> list[str]:
    tpl, kind = FAMILIES[name]
    ents = _entities(kind, 60)
    if mode == "repeated":
        return [PREFIX + tpl.format(c=ents[0], d=ents[1]) + "\n"] * n
    return [PREFIX + tpl.format(c=ents[i % 60], d=ents[(i * 7 + 3) % 60]) + f"\n# {salt}-{i}\n" for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.new_texts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/jindou-bench/lubm-t1000000-seed0.nt")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    from engine.database import Database
    from engine.sparql.parser import parse_query

    db = Database(query_timeout=3600)
    db.load_file(args.data)
    cells: dict = {}
    for r in range(args.rounds):
        for f in FAMILIES:
            for mode in ("repeated", "varied", "parse"):
                ts = texts(f, "repeated" if mode == "repeated" else "varied", args.requests + 20, f"r{r}-{mode}")
                run = (lambda t: parse_query(t)) if mode == "parse" else db.query
                for t in ts[:20]:
                    run(t)
                ns = []
                for t in ts[20:]:
                    t0 = time.perf_counter_ns()
                    run(t)
                    ns.append(time.perf_counter_ns() - t0)
                cells.setdefault((f, mode), []).append(statistics.median(ns) / 1e3)
    print("| family | repeated µs | new text µs | parse alone µs |\n| --- | ---: | ---: | ---: |")
    for f in FAMILIES:
        a, b, c = (statistics.median(cells[(f, m)]) for m in ("repeated", "varied", "parse"))
        print(f"| {f} | {a:.1f} | {b:.1f} | {c:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
