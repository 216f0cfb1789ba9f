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
    "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
)

D0 = "http://www.Department0.University0.edu"
U0 = "http://www.University0.edu"


@dataclass(frozen=True)
class BenchQuery:
    name: str
    selective: bool
    text: str
    description: str
    #: the query class of issue 14 (selective, filter, cycle, type-join, order-limit, optional,
    #: group-by, other): per-class geometric means are reported over these
    cls: str = ""

    @property
    def kind(self) -> str:
        return "selective" if self.selective else "non-selective"

    @property
    def klass(self) -> str:
        return self.cls or ("selective" if self.selective else "other")


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
}"""), "triangle grad student / department / university (LUBM Q2)", "cycle"),
    BenchQuery("L2", False, _q("""
SELECT ?X WHERE {
  ?X rdf:type ub:Course .
  ?X ub:name ?Y .
}"""), "all courses and names", "type-join"),
    BenchQuery("L3", False, _q("""
SELECT ?X ?Y ?Z WHERE {
  ?X ub:undergraduateDegreeFrom ?Y .
  ?X rdf:type ub:UndergraduateStudent .
  ?X ub:memberOf ?Z .
  ?Z rdf:type ub:Department .
  ?Z ub:subOrganizationOf ?Y .
  ?Y rdf:type ub:University .
}"""), "L1 with undergraduates (empty answer)", "cycle"),
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
}"""), "triangle undergraduate / advisor / course (LUBM Q9)", "cycle"),
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
    # ---- issue 14's non-selective classes, several queries each
    BenchQuery("F1", False, _q("""
SELECT ?X ?A WHERE {
  ?X ub:age ?A .
  FILTER(?A > 38)
}"""), "numeric range over every ub:age", "filter"),
    BenchQuery("F2", False, _q("""
SELECT ?X ?A WHERE {
  ?X rdf:type ub:GraduateStudent .
  ?X ub:age ?A .
  FILTER(?A >= 30 && ?A < 32)
}"""), "numeric range after a type join", "filter"),
    BenchQuery("F3", False, _q("""
SELECT ?X ?E WHERE {
  ?X ub:emailAddress ?E .
  FILTER(STRSTARTS(?E, "Lecturer"))
}"""), "string prefix over every e-mail address", "filter"),
    BenchQuery("F4", False, _q("""
SELECT ?X ?N WHERE {
  ?X ub:name ?N .
  FILTER(?N = "GraduateStudent7" || ?N = "Course3")
}"""), "string equality over every name", "filter"),
    BenchQuery("F5", False, _q("""
SELECT ?X ?A WHERE {
  ?X ub:age ?A .
  FILTER(?A = 17.0 || ?A >= "69"^^xsd:decimal)
}"""), "numeric equality/range with other numeric datatypes", "filter"),
    BenchQuery("F6", False, _q("""
SELECT ?X WHERE {
  ?X ub:name ?N .
  FILTER(REGEX(?N, "^Publication1[0-9]$"))
}"""), "regex over every name", "filter"),
    BenchQuery("F7", False, _q("""
SELECT ?X ?N WHERE {
  ?X ub:name ?N .
  FILTER(?N >= "GraduateStudent10" && ?N < "GraduateStudent12")
}"""), "string range over every name", "filter"),
    BenchQuery("F8", False, _q("""
SELECT ?X ?C WHERE {
  ?X ub:takesCourse ?C .
  ?X ub:age ?A .
  FILTER(?A > 23)
}"""), "numeric range on a variable joined with a large predicate", "filter"),
    BenchQuery("C4", False, _q("""
SELECT ?S ?C ?P ?D WHERE {
  ?S ub:takesCourse ?C .
  ?P ub:teacherOf ?C .
  ?P ub:worksFor ?D .
  ?S ub:memberOf ?D .
}"""), "4-cycle student / course / teacher / department", "cycle"),
    BenchQuery("C5", False, _q("""
SELECT ?S ?P ?C WHERE {
  ?S ub:advisor ?P .
  ?P ub:teacherOf ?C .
  ?S ub:takesCourse ?C .
}"""), "triangle student / advisor / course (no types)", "cycle"),
    BenchQuery("C6", False, _q("""
SELECT ?S ?P ?D ?U WHERE {
  ?S ub:advisor ?P .
  ?P ub:worksFor ?D .
  ?D ub:subOrganizationOf ?U .
  ?P ub:doctoralDegreeFrom ?U .
}"""), "4-cycle student / advisor / department / university", "cycle"),
    BenchQuery("T1", False, _q("""
SELECT ?X ?D WHERE {
  ?X rdf:type ub:GraduateStudent .
  ?X ub:memberOf ?D .
  ?D rdf:type ub:Department .
}"""), "two type indexes joined through memberOf", "type-join"),
    BenchQuery("T2", False, _q("""
SELECT ?X ?C WHERE {
  ?X rdf:type ub:FullProfessor .
  ?X ub:teacherOf ?C .
  ?C rdf:type ub:GraduateCourse .
}"""), "full professors and their graduate courses", "type-join"),
    BenchQuery("O1", False, _q("""
SELECT ?X ?A WHERE {
  ?X ub:age ?A .
} ORDER BY DESC(?A) ?X LIMIT 10"""), "top 10 by a numeric literal (many ties)", "order-limit"),
    BenchQuery("O2", False, _q("""
SELECT ?X ?N WHERE {
  ?X ub:name ?N .
} ORDER BY ?N ?X LIMIT 25"""), "first 25 by a string literal", "order-limit"),
    BenchQuery("O3", False, _q("""
SELECT ?S ?C WHERE {
  ?S ub:takesCourse ?C .
} ORDER BY DESC(?C) ?S LIMIT 5 OFFSET 3"""), "ORDER BY IRIs + OFFSET/LIMIT", "order-limit"),
    BenchQuery("P1", False, _q("""
SELECT ?X ?P WHERE {
  ?X rdf:type ub:UndergraduateStudent .
  OPTIONAL { ?X ub:advisor ?P }
}"""), "undergraduates with their advisor if any", "optional"),
    BenchQuery("P2", False, _q("""
SELECT ?X ?C WHERE {
  ?X rdf:type ub:GraduateStudent .
  OPTIONAL { ?X ub:teachingAssistantOf ?C }
}"""), "graduate students with the course they assist if any", "optional"),
    BenchQuery("P3", False, _q("""
SELECT ?P ?R ?A WHERE {
  ?P ub:worksFor ?D .
  OPTIONAL { ?P ub:researchInterest ?R }
  OPTIONAL { ?P ub:age ?A . FILTER(?A > 60) }
}"""), "two OPTIONALs, one filtered", "optional"),
    BenchQuery("G1", False, _q("""
SELECT ?C (COUNT(?S) AS ?N) WHERE {
  ?S ub:takesCourse ?C .
} GROUP BY ?C"""), "students per course", "group-by"),
    BenchQuery("G2", False, _q("""
SELECT ?D (COUNT(*) AS ?N) WHERE {
  ?S ub:memberOf ?D .
  ?S rdf:type ub:UndergraduateStudent .
} GROUP BY ?D"""), "undergraduates per department", "group-by"),
    BenchQuery("G3", False, _q("""
SELECT ?A (COUNT(DISTINCT ?X) AS ?N) WHERE {
  ?X ub:age ?A .
} GROUP BY ?A"""), "people per age (COUNT DISTINCT)", "group-by"),
)

#: Expression-heavy queries of the filter, group-by and projection kinds (string
#: functions over IRIs and literals with many distinct values): not in the default
#: set (its per-class means stay comparable across waves); ``--queries functions``
#: runs them, or name them one by one (wave 2f: each took 0.4-1.6 s term by term,
#: 3-14x pyoxigraph's time, before engine/exec/strings.py).
FUNCTION_QUERIES: tuple[BenchQuery, ...] = (
    BenchQuery("FN1", False, _q("""
SELECT ?X WHERE { ?X ub:name ?N . FILTER(STRSTARTS(STR(?X), "http://www.Department3.")) }"""),
               "prefix of every named entity's IRI", "filter"),
    BenchQuery("FN2", False, _q("""
SELECT ?X WHERE { ?X ub:name ?N . FILTER(CONTAINS(STR(?X), "Course1")) }"""),
               "substring of every named entity's IRI", "filter"),
    BenchQuery("FN3", False, _q("""
SELECT ?X ?E WHERE { ?X ub:emailAddress ?E . FILTER(STRAFTER(?E, "@") = "Department0.University0.edu") }"""),
               "domain part of every e-mail address", "filter"),
    BenchQuery("FN4", False, _q("""
SELECT ?X ?E WHERE { ?X ub:emailAddress ?E . FILTER(LANGMATCHES(LANG(?E), "en")) }"""),
               "language of every e-mail address (none)", "filter"),
    BenchQuery("FN5", False, _q("""
SELECT ?X ?E WHERE { ?X ub:emailAddress ?E . FILTER(CONTAINS(?E, "Department1.")) }"""),
               "substring of every e-mail address", "filter"),
    BenchQuery("FN6", False, _q("""
SELECT ?X ?N WHERE { ?X ub:name ?N . FILTER(STRLEN(?N) > 17) }"""), "length of every name", "filter"),
    BenchQuery("FN7", False, _q("""
SELECT ?D (STRLEN(GROUP_CONCAT(?E; separator=";")) AS ?L)
WHERE { ?X ub:worksFor ?D . ?X ub:emailAddress ?E } GROUP BY ?D"""),
               "e-mail addresses per department, joined (their length: the order is the engine's)", "group-by"),
    BenchQuery("FN8", False, _q("""
SELECT ?X (STR(?X) AS ?S) WHERE { ?X rdf:type ub:GraduateStudent . }"""), "IRIs as strings", "projection"),
    BenchQuery("FN9", False, _q("""
SELECT ?X (STRBEFORE(?E, "@") AS ?U) WHERE { ?X ub:emailAddress ?E }"""), "local part of every e-mail", "projection"),
    BenchQuery("FN10", False, _q("""
SELECT ?X (IRI(CONCAT("urn:x:", STRAFTER(STR(?X), "http://"))) AS ?I) WHERE { ?X rdf:type ub:Course }"""),
               "IRIs rewritten", "projection"),
)

#: Queries of the classes written while hunting for slow mechanisms (wave 2f, helper I2):
#: per-row generated values and a type test over every object ran per value in
#: Python (isNumeric over 1M objects 1.4x pyoxigraph's time, STRUUID() per row 4.5x,
#: RAND() 2x, BNODE() 1.3x, ORDER BY RAND() 1.3x, an XSD cast over every object 3.9x).
#: Not in the default set; ``--queries hunted`` runs them (the random ones counted, so
#: that both peers' answers compare equal).
HUNTED_QUERIES: tuple[BenchQuery, ...] = (
    BenchQuery("HN1", False, _q("""
SELECT ?X ?O WHERE { ?X ?P ?O . FILTER(isNumeric(?O)) }"""), "numeric objects of every triple", "filter"),
    BenchQuery("HN2", False, _q("""
SELECT (COUNT(?U) AS ?N) WHERE { ?X ub:age ?A . BIND(STRUUID() AS ?U) }"""), "a fresh UUID per row", "projection"),
    BenchQuery("HN3", False, _q("""
SELECT (COUNT(?B) AS ?N) WHERE { ?X ub:age ?A . BIND(BNODE() AS ?B) }"""), "a fresh blank node per row", "projection"),
    BenchQuery("HN4", False, _q("""
SELECT (COUNT(?R) AS ?N) WHERE { ?X ub:age ?A . BIND(RAND() AS ?R) FILTER(?R < 2) }"""),
               "a random number per row, filtered", "filter"),
    BenchQuery("HN5", False, _q("""
SELECT (COUNT(*) AS ?N) WHERE { ?X ub:age ?A . BIND(?A * 3 + 1 AS ?W) FILTER(isLiteral(?W) && ?W > 100) }"""),
               "computed numbers typed and compared", "filter"),
    BenchQuery("HN6", False, _q("""
SELECT (COUNT(?I) AS ?N) WHERE { ?S ?P ?O . BIND(xsd:integer(?O) AS ?I) }"""),
               "every object cast to an integer (most are errors)", "projection"),
    BenchQuery("HN7", False, _q("""
SELECT (COUNT(*) AS ?N) WHERE { { SELECT ?X WHERE { ?X ub:age ?A } ORDER BY RAND() LIMIT 10 } }"""),
               "a random sample of 10 (counted: the sample differs on every run)", "order-limit"),
)

#: aggregates and computed columns hunted in wave 2g (``--queries aggregates``): group-by shapes
#: the default set does not have (HAVING, several keys, a key that is an expression, AVG of
#: decimals, SUM of mixed integers and decimals, COUNT(*) over OPTIONAL, SAMPLE, aggregates of a
#: subquery's aggregates, DISTINCT aggregates) and filters over computed values
AGGREGATE_QUERIES: tuple[BenchQuery, ...] = (
    BenchQuery("AG1", False, _q("""
SELECT (SUM(?A) AS ?S) (AVG(?A) > 40 AS ?V) (MIN(?A) AS ?LO) (MAX(?A) AS ?HI) WHERE { ?X ub:age ?A }"""),
               "SUM / AVG / MIN / MAX of every age, one group", "group-by"),
    BenchQuery("AG2", False, _q("""
SELECT ?D (COUNT(*) AS ?N) WHERE { ?X ub:memberOf ?D . ?X ub:age ?A } GROUP BY ?D HAVING (AVG(?A) > 38)"""),
               "average age per department, HAVING", "group-by"),
    BenchQuery("AG3", False, _q("""
SELECT ?D ?A (COUNT(*) AS ?N) WHERE { ?X ub:memberOf ?D . ?X ub:age ?A } GROUP BY ?D ?A"""),
               "people per department and age (two keys)", "group-by"),
    BenchQuery("AG4", False, _q("""
SELECT ?K (COUNT(*) AS ?N) (SUM(?A) AS ?S) WHERE { ?X ub:age ?A } GROUP BY (FLOOR(?A / 10) AS ?K)"""),
               "people per decade of age (key an expression)", "group-by"),
    BenchQuery("AG5", False, _q("""
SELECT ?D (xsd:integer(FLOOR(AVG(?A * 1.5))) AS ?V) (xsd:integer(SUM(IF(?A > 40, ?A, ?A * 0.5)) * 2) AS ?S)
WHERE { ?X ub:memberOf ?D . ?X ub:age ?A } GROUP BY ?D"""),
               "AVG of decimals, SUM of mixed integers and decimals, per department", "group-by"),
    BenchQuery("AG6", False, _q("""
SELECT ?D (COUNT(?P) AS ?N) (COUNT(*) AS ?M) WHERE { ?X ub:memberOf ?D OPTIONAL { ?X ub:advisor ?P } } GROUP BY ?D"""),
               "COUNT and COUNT(*) over an OPTIONAL, per department", "group-by"),
    BenchQuery("AG7", False, _q("""
SELECT ?D (isNumeric(SAMPLE(?A)) AS ?S) (MIN(?X) AS ?LO) (MAX(?X) AS ?HI)
WHERE { ?X ub:memberOf ?D . ?X ub:age ?A } GROUP BY ?D"""),
               "SAMPLE (tested: any value is right) and MIN / MAX of IRIs per department", "group-by"),
    BenchQuery("AG8", False, _q("""
SELECT (xsd:integer(FLOOR(AVG(?N) * 1000)) AS ?M) (MAX(?N) AS ?MX) WHERE {
  { SELECT ?C (COUNT(?X) AS ?N) WHERE { ?X ub:takesCourse ?C } GROUP BY ?C } }"""),
               "aggregates of a subquery's counts per course", "group-by"),
    BenchQuery("AG9", False, _q("""
SELECT ?K (COUNT(*) AS ?C) WHERE { { SELECT ?X (COUNT(?C0) AS ?K) WHERE { ?X ub:takesCourse ?C0 } GROUP BY ?X } }
GROUP BY ?K"""), "students per number of courses taken (a group-by of a group-by)", "group-by"),
    BenchQuery("AG10", False, _q("""
SELECT (COUNT(DISTINCT ?O) AS ?N) WHERE { ?S ?P ?O }"""), "distinct objects of every triple", "group-by"),
    BenchQuery("AG11", False, _q("""
SELECT ?D (STRLEN(GROUP_CONCAT(DISTINCT STR(?X))) AS ?G) WHERE { ?X ub:memberOf ?D } GROUP BY ?D"""),
               "the members' IRIs of each department, concatenated", "group-by"),
    BenchQuery("AG12", False, _q("""
SELECT (COUNT(*) AS ?N) WHERE { ?X ub:age ?A BIND(?A * 2.5 AS ?W) FILTER(?W > 100.0) }"""),
               "a computed decimal filtered", "filter"),
    BenchQuery("AG13", False, _q("""
SELECT (COUNT(*) AS ?N) (SUM(?Z) AS ?S) WHERE { ?X ub:age ?A BIND(?A * RAND() AS ?R) BIND(IF(?R < 100, 1, 0) AS ?Z) }"""),
               "a random number per row, computed and aggregated", "filter"),
    BenchQuery("AG14", False, _q("""
SELECT ?D (SUM(STRLEN(?N)) AS ?S) (xsd:integer(FLOOR(AVG(STRLEN(?N)) * 100)) AS ?V) WHERE { ?X ub:memberOf ?D . ?X ub:name ?N } GROUP BY ?D"""),
               "SUM / AVG of name lengths per department", "group-by"),
)

BY_NAME = {q.name: q for q in QUERIES + FUNCTION_QUERIES + HUNTED_QUERIES + AGGREGATE_QUERIES}

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
    """Comma-separated names (case-insensitive) or None for the default set;
    ``functions`` stands for :data:`FUNCTION_QUERIES`, ``hunted`` for :data:`HUNTED_QUERIES`,
    ``aggregates`` for :data:`AGGREGATE_QUERIES`."""
    if not names:
        return list(QUERIES)
    out = []
    for n in names.split(","):
        n = n.strip().upper()
        if n == "FUNCTIONS":
            out.extend(FUNCTION_QUERIES)
            continue
        if n == "HUNTED":
            out.extend(HUNTED_QUERIES)
            continue
        if n == "AGGREGATES":
            out.extend(AGGREGATE_QUERIES)
            continue
        if n not in BY_NAME:
            raise SystemExit(f"unknown query {n!r}; known: {', '.join(BY_NAME)}")
        out.append(BY_NAME[n])
    return out
