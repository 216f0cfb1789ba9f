"""Held-out selective and LIMIT queries (wave 2o, helper G): forms and constants the unseen
sweep's sets do not have, written to check that issue 14's selective / LIMIT fixes are not
fitted to the sweep's texts.

Point lookups by other predicates, inverse lookups, stars, 2-3 hop chains from a constant,
ASK (true and false), LIMIT 1 over a join, counted sub-SELECTs with LIMIT (any LIMIT rows
are right without ORDER BY, so those are counted, as the sweep's UL queries are).

Run with the sweep's machinery (both servers, answers compared, alternating requests)::

    cd /tmp && PYTHONPATH=<tree> python -m bench.selective_heldout --scale 1M --alternate-http --max-runs 5
"""

from __future__ import annotations

import sys

from bench.queries import BenchQuery
from bench.unseen_sweep import _s

D4U5 = "http://www.Department4.University5.edu"
D6U4 = "http://www.Department6.University4.edu"
D1U3 = "http://www.Department1.University3.edu"
D8U0 = "http://www.Department8.University0.edu"
U6 = "http://www.University6.edu"

QUERIES: tuple[BenchQuery, ...] = (
    _s("GS1", f"SELECT ?T WHERE {{ <{D6U4}/Lecturer2> ub:telephone ?T }}", "point lookup, telephone"),
    _s("GS2", f"SELECT ?A WHERE {{ <{D4U5}/GraduateStudent7> ub:advisor ?A }}", "point lookup, advisor (IRI)"),
    _s("GS3", f"SELECT ?X WHERE {{ ?X ub:worksFor <{D1U3}> }}", "inverse lookup, worksFor"),
    _s("GS4", f"""SELECT ?N ?E ?T ?D WHERE {{
  <{D6U4}/Lecturer2> ub:name ?N ; ub:emailAddress ?E ; ub:telephone ?T ; ub:doctoralDegreeFrom ?D }}""",
       "4-pattern star on a lecturer"),
    _s("GS5", f"""SELECT ?C ?N WHERE {{ <{D6U4}/Lecturer2> ub:teacherOf ?C . ?C ub:name ?N }}""",
       "2-hop chain: courses taught and their names"),
    _s("GS6", f"""SELECT ?S ?E WHERE {{ <{D4U5}/AssociateProfessor6> ^ub:advisor ?S . ?S ub:emailAddress ?E . ?S ub:memberOf ?D }}""",
       "3 hops from a professor: advisees, e-mails, department"),
    _s("GS7", f"""ASK {{ <{D4U5}/GraduateStudent7> ub:takesCourse <{D4U5}/GraduateCourse54> }}""", "ASK, true"),
    _s("GS8", f"""ASK {{ <{D4U5}/GraduateStudent7> ub:advisor <{D6U4}/Lecturer2> }}""", "ASK, false"),
    _s("GS9", f"""SELECT ?P WHERE {{ ?P ub:publicationAuthor <{D6U4}/Lecturer2> }} ORDER BY ?P""",
       "inverse lookup, publications, ordered"),
    _s("GS10", f"""SELECT DISTINCT ?U WHERE {{ ?X ub:worksFor <{D8U0}> . ?X ub:doctoralDegreeFrom ?U }}""",
       "department staff's doctoral universities, DISTINCT"),
    _s("GS11", f"""SELECT ?P ?V WHERE {{ <{D1U3}/FullProfessor1> ?P ?V }}""", "every edge out of one entity"),
    _s("GS12", f"""SELECT ?S WHERE {{ ?S ub:memberOf <{D4U5}> ; ub:advisor <{D4U5}/AssociateProfessor6> }}""",
       "two constant objects on one subject"),
    # LIMIT (counted: any LIMIT rows are right without ORDER BY)
    _s("GL1", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT ?X ?C WHERE { ?X ub:teacherOf ?C . ?Y ub:takesCourse ?C } LIMIT 1 } }""",
       "LIMIT 1 over a join (counted)", "limit"),
    _s("GL2", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT ?s ?o WHERE { ?s ub:advisor ?o } LIMIT 25 } }""",
       "one predicate, LIMIT 25 (counted)", "limit"),
    _s("GL3", """SELECT (COUNT(?X) AS ?K) WHERE { { SELECT ?X WHERE { ?X a ub:GraduateStudent ; ub:age ?A } LIMIT 40 } }""",
       "type + attribute, LIMIT 40 (counted)", "limit"),
    _s("GL4", """ASK { ?X ub:headOf ?D . ?X ub:doctoralDegreeFrom ?U . ?U ub:name ?N }""", "ASK over a 3-pattern join", "limit"),
    _s("GL5", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT ?s ?p WHERE { ?s ?p <""" + U6 + """> } LIMIT 5 } }""",
       "variable predicate into a popular object, LIMIT 5 (counted)", "limit"),
    _s("GL6", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT ?X ?N WHERE { ?X ub:memberOf ?D . ?D ub:subOrganizationOf ?U . ?X ub:name ?N } LIMIT 3 } }""",
       "3-pattern chain, LIMIT 3 (counted)", "limit"),
)


def main(argv: list[str] | None = None) -> int:
    from bench import runner  # noqa: PLC0415
    from bench.unseen_sweep import sweep  # noqa: PLC0415

    ap = runner.build_parser()
    ap.prog = "python -m bench.selective_heldout"
    ap.add_argument("--only", help="comma list of query names")
    return sweep(list(QUERIES), ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
