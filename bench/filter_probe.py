"""FILTER placement probe (docs/BENCHMARKS.md, "A FILTER where its variables are first bound"):
one-shot shapes over LUBM(1), median ms per query in process.

``cd /tmp && PYTHONPATH=<tree> python -m bench.filter_probe [repeats]``
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.lubm import UB, generate_lines, univ_iri
from engine.database import Database

U = univ_iri(0)
QUERIES = {
    # C8's shape: a large group x two small groups, the FILTER over the small ones' variables
    "c8shape": f"""PREFIX ub: <{UB}> SELECT ?g ?a1 ?a2 WHERE {{
  ?g a ub:ResearchGroup . ?g ub:subOrganizationOf ?dd .
  {{ ?x ub:worksFor ?w1 . ?x ub:age ?a1 . ?x ub:headOf ?w1 . ?w1 ub:subOrganizationOf {U} }}
  {{ ?y ub:teacherOf ?c . ?y ub:age ?a2 . ?y ub:headOf ?w2 . ?c a ub:GraduateCourse }}
  FILTER(?a1 > 69 || ?a2 > 69) }}""",
    # a FILTER over the required part's variable, OPTIONALs after it
    "optional": f"""PREFIX ub: <{UB}> SELECT ?s ?a ?e WHERE {{ ?s ub:takesCourse ?c . ?s ub:age ?a .
  OPTIONAL {{ ?s ub:emailAddress ?e }} OPTIONAL {{ ?s ub:advisor ?adv }} FILTER(?a > 28) }}""",
    # all-distinct values: the cost of looking for repeated tuples
    "distinct-all": f"""PREFIX ub: <{UB}> SELECT ?s ?c WHERE {{
  ?s ub:takesCourse ?c . ?s ub:name ?n . FILTER(STRLEN(?n) > 5) }}""",
}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    db = Database()
    db.load_data("".join(line for ch in generate_lines(universities=1, seed=0) for line in ch),
                 "application/n-triples")
    for name, q in QUERIES.items():
        r = db.query(q)
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = db.query(q)
            ts.append((time.perf_counter() - t0) * 1e3)
        print(f"{name} rows {len(r)} median {statistics.median(ts):.2f} min {min(ts):.2f}")


if __name__ == "__main__":
    main()
