"""The benchmark query set.

L1-L7 are the seven LUBM queries of the Wukong evaluation (OSDI'16, Tables 2-6),
which Wukong inherited from Trinity.RDF / TriAD / BitMat (Atre et al.). Group I
(L1, L2, L3, L7) is non-selective: results or intermediate results grow with the
data; group II (L4, L5, L6) is selective: fixed-size results anchored at a
constant.  Mapping to the 14 official LUBM queries (which need OWL reasoning;
these variants use leaf classes so they run without it):

* L1 - LUBM Q2 with GraduateStudent: triangle student-department-university.
* L2 - all courses with their names (Course only, no GraduateCourse).
* L3 - L1 with UndergraduateStudent: huge intermediate results, empty answer.
* L4 - LUBM Q4 with FullProfessor (instead of the inferred Professor).
* L5 - research groups of one department (LUBM Q11 without transitivity).
* L6 - full professors working for a department of University0.
* L7 - LUBM Q9 restricted: triangle undergraduate-advisor(FullProfessor)-course.

The S/C/Q queries are extra selective star and chain shapes anchored at
constants; Q1 and Q4 are LUBM Q1 and Q4 verbatim, Q4 relying on the
``ub:Professor`` memberships the generator materialises.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIXES = (
    "PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#>\n"
    "PREFIX ub: <http://swat.cse.lehigh.edu/onto/univ-bench.owl#>\n"
)

D0 = "http://www.Department0.University0.edu"
U0 = "http://www.University0.edu"


@dataclass(frozen=True)
class BenchQuery:
    name: str
    selective: bool
    text: str
    description: str

    @property
    def kind(self) -> str:
        return "selective" if self.selective else "non-selective"


def _q(body: str) -> str:
    return PREFIXES + body.strip() + "\n"


QUERIES: tuple[BenchQuery, ...] = (
    BenchQuery("L1", False, _q("""
SELECT ?X ?Y ?Z WHERE {
  ?Y rdf:type ub:University .
  ?X ub:undergraduateDegreeFrom ?Y .
  ?X rdf:type ub:GraduateStudent .
  ?X ub:memberOf ?Z .
  ?Z ub:subOrganizationOf ?Y .
  ?Z rdf:type ub:Department .
}"""), "triangle grad student / department / university (LUBM Q2)"),
    BenchQuery("L2", False, _q("""
SELECT ?X WHERE {
  ?X rdf:type ub:Course .
  ?X ub:name ?Y .
}"""), "all courses and names"),
    BenchQuery("L3", False, _q("""
SELECT ?X ?Y ?Z WHERE {
  ?X ub:undergraduateDegreeFrom ?Y .
  ?X rdf:type ub:UndergraduateStudent .
  ?X ub:memberOf ?Z .
  ?Z rdf:type ub:Department .
  ?Z ub:subOrganizationOf ?Y .
  ?Y rdf:type ub:University .
}"""), "L1 with undergraduates (empty answer)"),
    BenchQuery("L4", True, _q(f"""
SELECT ?X ?Y1 ?Y2 ?Y3 WHERE {{
  ?X ub:worksFor <{D0}> .
  ?X rdf:type ub:FullProfessor .
  ?X ub:name ?Y1 .
  ?X ub:emailAddress ?Y2 .
  ?X ub:telephone ?Y3 .
}}"""), "full professors of one department with attributes"),
    BenchQuery("L5", True, _q(f"""
SELECT ?X WHERE {{
  ?X ub:subOrganizationOf <{D0}> .
  ?X rdf:type ub:ResearchGroup .
}}"""), "research groups of one department"),
    BenchQuery("L6", True, _q(f"""
SELECT ?X ?Y WHERE {{
  ?Y ub:subOrganizationOf <{U0}> .
  ?Y rdf:type ub:Department .
  ?X ub:worksFor ?Y .
  ?X rdf:type ub:FullProfessor .
}}"""), "full professors of the departments of one university"),
    BenchQuery("L7", False, _q("""
SELECT ?X ?Y ?Z WHERE {
  ?Y rdf:type ub:FullProfessor .
  ?X ub:advisor ?Y .
  ?X rdf:type ub:UndergraduateStudent .
  ?X ub:takesCourse ?Z .
  ?Z rdf:type ub:Course .
  ?Y ub:teacherOf ?Z .
}"""), "triangle undergraduate / advisor / course (LUBM Q9)"),
    BenchQuery("S1", True, _q(f"""
SELECT ?N ?E ?T ?C ?R WHERE {{
  <{D0}/FullProfessor0> ub:name ?N ;
      ub:emailAddress ?E ;
      ub:telephone ?T ;
      ub:teacherOf ?C ;
      ub:researchInterest ?R .
}}"""), "star around one constant professor"),
    BenchQuery("S2", True, _q(f"""
SELECT ?S ?N ?E WHERE {{
  ?S ub:advisor <{D0}/AssociateProfessor0> .
  ?S rdf:type ub:GraduateStudent .
  ?S ub:name ?N .
  ?S ub:emailAddress ?E .
}}"""), "star of the graduate students advised by one professor"),
    BenchQuery("C1", True, _q(f"""
SELECT ?S ?C WHERE {{
  <{D0}/FullProfessor1> ub:teacherOf ?C .
  ?S ub:takesCourse ?C .
}}"""), "2-hop chain: professor -> courses -> students"),
    BenchQuery("C2", True, _q(f"""
SELECT ?S ?P ?D WHERE {{
  ?S ub:takesCourse <{D0}/GraduateCourse0> .
  ?S ub:advisor ?P .
  ?P ub:worksFor ?D .
}}"""), "3-hop chain: course <- students -> advisors -> department"),
    BenchQuery("Q1", True, _q(f"""
SELECT ?X WHERE {{
  ?X rdf:type ub:GraduateStudent .
  ?X ub:takesCourse <{D0}/GraduateCourse0> .
}}"""), "LUBM Q1"),
    BenchQuery("Q4", True, _q(f"""
SELECT ?X ?Y1 ?Y2 ?Y3 WHERE {{
  ?X rdf:type ub:Professor .
  ?X ub:worksFor <{D0}> .
  ?X ub:name ?Y1 .
  ?X ub:emailAddress ?Y2 .
  ?X ub:telephone ?Y3 .
}}"""), "LUBM Q4 (uses materialised ub:Professor)"),
)

BY_NAME = {q.name: q for q in QUERIES}

# the selective query used for the HTTP p50 comparison
HTTP_QUERY = "L4"

# a 3-pattern query for the parse-time micro-benchmark
PARSE_QUERY = _q(f"""
SELECT ?X ?N WHERE {{
  ?X rdf:type ub:GraduateStudent .
  ?X ub:takesCourse <{D0}/GraduateCourse0> .
  ?X ub:name ?N .
}}""")


def select(names: str | None) -> list[BenchQuery]:
    """Comma-separated names (case-insensitive) or None for all."""
    if not names:
        return list(QUERIES)
    out = []
    for n in names.split(","):
        n = n.strip().upper()
        if n not in BY_NAME:
            raise SystemExit(f"unknown query {n!r}; known: {', '.join(BY_NAME)}")
        out.append(BY_NAME[n])
    return out
