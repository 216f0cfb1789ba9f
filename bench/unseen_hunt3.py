"""A fourth set of unseen one-shot queries (``python -m bench.unseen_sweep --set hunt3``).

Written fresh after the first three hunts had been fixed, so they no longer predicted what an
unseen query costs. Every class of issue 14 gets about ten queries in forms and with constants
the other sets lack: 5- and 6-pattern stars on one entity, 4-hop chains from a constant,
co-author lookups, numeric windows / doubles / decimals / ``!=`` chains, ``LANG``,
``STR(?o) = "x"``, ``STRENDS(STR(?iri))``, REGEX with character classes, 2-cycles, 4- and
5-cycles through publications and degrees, type joins on both ends, ORDER BY on three keys
with OFFSET, ORDER BY over a join, COUNT DISTINCT / SUM / AVG / MIN / MAX / GROUP_CONCAT
(measured through STRLEN, which does not depend on the concatenation order) / HAVING,
UNION, MINUS, alternative and inverse paths, BIND, VALUES, sub-SELECTs, ASK, CONSTRUCT, IF.

The names start with ``V`` (the other sets use ``U``); constants use departments and
universities the other sets do not (the 1M data has Universities 0-6, University6 has
Departments 0-12).
"""

from __future__ import annotations

from bench.queries import BenchQuery
from bench.unseen_sweep import _s

D9U6 = "http://www.Department9.University6.edu"
D4U0 = "http://www.Department4.University0.edu"
D11U2 = "http://www.Department11.University2.edu"
D1U5 = "http://www.Department1.University5.edu"
D2U3 = "http://www.Department2.University3.edu"
D3U4 = "http://www.Department3.University4.edu"
D8U1 = "http://www.Department8.University1.edu"
D0U5 = "http://www.Department0.University5.edu"
D7U0 = "http://www.Department7.University0.edu"
D13U3 = "http://www.Department13.University3.edu"
D12U6 = "http://www.Department12.University6.edu"
D6U1 = "http://www.Department6.University1.edu"
D2U0 = "http://www.Department2.University0.edu"
D3U1 = "http://www.Department3.University1.edu"

HUNT3: tuple[BenchQuery, ...] = (
    # ---- selective: point lookups, stars on one entity, chains from a constant, inverse lookups
    _s("VS1", f"SELECT ?t WHERE {{ <{D9U6}/UndergraduateStudent33> ub:telephone ?t }}", "point lookup (telephone)"),
    _s("VS2", f"""SELECT ?n ?e ?d ?m ?r WHERE {{ <{D4U0}/AssociateProfessor7> ub:name ?n ; ub:emailAddress ?e ;
  ub:worksFor ?d ; ub:mastersDegreeFrom ?m ; ub:researchInterest ?r }}""", "5-pattern star on one professor"),
    _s("VS3", f"""SELECT ?p ?u WHERE {{ <{D11U2}/GraduateStudent5> ub:advisor ?p . ?p ub:doctoralDegreeFrom ?u }}""",
       "2-hop chain: the advisor's doctoral university"),
    _s("VS4", f"""SELECT ?c ?t ?e WHERE {{ <{D1U5}/UndergraduateStudent120> ub:takesCourse ?c . ?t ub:teacherOf ?c .
  ?t ub:emailAddress ?e }}""", "3-hop chain: the teachers of one student's courses"),
    _s("VS5", f"""SELECT ?x WHERE {{ ?x ub:headOf <{D6U1}> }}""", "inverse lookup: the head of a department"),
    _s("VS6", f"""SELECT DISTINCT ?a WHERE {{ ?p ub:publicationAuthor <{D2U3}/FullProfessor2> . ?p ub:publicationAuthor ?a }}""",
       "co-authors of one professor (DISTINCT)"),
    _s("VS7", f"""SELECT ?p ?d ?u ?n WHERE {{ <{D3U4}/GraduateStudent9> ub:advisor ?p . ?p ub:worksFor ?d .
  ?d ub:subOrganizationOf ?u . ?u ub:name ?n }}""", "4-hop chain from a student"),
    _s("VS8", f"""SELECT ?t ?n ?ph ?a ?u ?dr WHERE {{ <{D8U1}/FullProfessor1> a ?t ; ub:name ?n ; ub:telephone ?ph ;
  ub:age ?a ; ub:undergraduateDegreeFrom ?u ; ub:doctoralDegreeFrom ?dr }}""", "6-pattern star with a variable type"),
    _s("VS9", f"""ASK {{ <{D0U5}/Lecturer2> ub:teacherOf ?c . ?c a ub:GraduateCourse }}""", "ASK of a typed hop"),
    _s("VS10", f"""SELECT ?p ?n WHERE {{ <{D7U0}/AssistantProfessor4> ^ub:publicationAuthor ?p . ?p ub:name ?n }} ORDER BY ?n ?p""",
       "inverse path + name, ordered"),
    _s("VS11", f"""SELECT ?x ?a ?pn WHERE {{ VALUES ?x {{ <{D12U6}/GraduateStudent1> <{D13U3}/GraduateStudent30> }}
  ?x ub:age ?a ; ub:advisor ?p . ?p ub:name ?pn }}""", "VALUES of two students, a star and a hop"),
    _s("VS12", f"""SELECT ?s WHERE {{ ?s ub:teachingAssistantOf <{D2U0}/Course9> }}""", "inverse lookup: TAs of a course"),
    # ---- FILTER over a large predicate
    _s("VF1", """SELECT ?x ?a WHERE { ?x ub:age ?a FILTER(?a >= 35 && ?a < 37) }""", "half-open numeric window", "filter"),
    _s("VF2", """SELECT ?x ?e WHERE { ?x ub:emailAddress ?e FILTER(STRSTARTS(?e, "AssociateProfessor1")) }""",
       "STRSTARTS over e-mails", "filter"),
    _s("VF3", """SELECT ?x ?n WHERE { ?x ub:name ?n FILTER(REGEX(?n, "^Publication1[0-9]$")) }""",
       "anchored REGEX with a class over names", "filter"),
    _s("VF4", """SELECT (COUNT(*) AS ?k) WHERE { ?x ub:name ?n FILTER(LANG(?n) = "") }""",
       "LANG = \"\" counted", "filter"),
    _s("VF5", """SELECT ?x WHERE { ?x ub:name ?n FILTER(LANGMATCHES(LANG(?n), "en")) }""",
       "LANGMATCHES (no tagged names)", "filter"),
    _s("VF6", """SELECT ?x ?r WHERE { ?x ub:researchInterest ?r FILTER(STR(?r) = "Research12") }""",
       "STR(?o) = literal", "filter"),
    _s("VF7", """SELECT ?x ?a WHERE { ?x ub:age ?a FILTER(xsd:double(?a) / 3.0e0 > 22.5) }""",
       "double arithmetic", "filter"),
    _s("VF8", """SELECT ?x WHERE { ?x ub:age ?a FILTER(?a != 20 && ?a != 21 && ?a < 23) }""",
       "!= chain and a bound", "filter"),
    _s("VF9", """SELECT ?x WHERE { ?x ub:telephone ?t FILTER(?t != "xxx-xxx-xxxx") }""",
       "!= a literal every row has", "filter"),
    _s("VF10", """SELECT ?s ?p WHERE { ?s ub:advisor ?p FILTER(STRENDS(STR(?p), "FullProfessor0")) }""",
       "STRENDS over an IRI object", "filter"),
    _s("VF11", """SELECT ?x ?a WHERE { ?x ub:age ?a FILTER(?a > 68.5) }""", "decimal bound", "filter"),
    _s("VF12", """SELECT ?x ?e WHERE { ?x ub:emailAddress ?e FILTER(REGEX(?e, "University[56][.]edu$") && STRLEN(?e) < 38) }""",
       "REGEX suffix + STRLEN", "filter"),
    _s("VF13", """SELECT ?x ?u WHERE { ?x ub:undergraduateDegreeFrom ?u
  FILTER(?u = <http://www.University17.edu> || ?u = <http://www.University400.edu>) }""",
       "IRI equality disjunction", "filter"),
    # ---- cycles
    _s("VC1", """SELECT (COUNT(*) AS ?k) WHERE { ?s ub:memberOf ?d . ?p ub:worksFor ?d . ?p ub:teacherOf ?c . ?s ub:teachingAssistantOf ?c }""",
       "4-cycle TA / course / teacher / department, counted", "cycle"),
    _s("VC2", """SELECT ?x ?d ?u WHERE { ?x ub:headOf ?d . ?x ub:worksFor ?d . ?x ub:doctoralDegreeFrom ?u }""",
       "2-cycle head and worksFor the same department", "cycle"),
    _s("VC3", """SELECT ?pub ?s ?p WHERE { ?pub ub:publicationAuthor ?s . ?pub ub:publicationAuthor ?p . ?s ub:advisor ?p }""",
       "triangle: a student writes with the advisor", "cycle"),
    _s("VC4", """SELECT (COUNT(*) AS ?k) WHERE { ?s1 ub:advisor ?p . ?s2 ub:advisor ?p . ?s1 ub:teachingAssistantOf ?c .
  ?s2 ub:teachingAssistantOf ?c FILTER(?s1 != ?s2) }""", "4-cycle of two TAs with one advisor, counted", "cycle"),
    _s("VC5", """SELECT (COUNT(DISTINCT ?s) AS ?k) WHERE { ?s ub:takesCourse ?c . ?p ub:teacherOf ?c .
  ?p ub:doctoralDegreeFrom ?u . ?s ub:undergraduateDegreeFrom ?u }""",
       "4-cycle student / course / teacher / alma mater, COUNT DISTINCT", "cycle"),
    _s("VC6", """SELECT DISTINCT ?p WHERE { ?p ub:worksFor ?d . ?s ub:memberOf ?d . ?s ub:advisor ?p . ?s a ub:UndergraduateStudent }""",
       "triangle with a type, DISTINCT", "cycle"),
    _s("VC7", """SELECT (COUNT(*) AS ?k) WHERE { ?a ub:advisor ?p . ?pub ub:publicationAuthor ?p . ?pub ub:publicationAuthor ?g .
  ?g ub:memberOf ?d . ?a ub:memberOf ?d }""", "5-cycle through publications, counted", "cycle"),
    _s("VC8", """SELECT ?x ?n WHERE { ?x ub:worksFor ?d . ?d ub:subOrganizationOf ?u . ?x ub:mastersDegreeFrom ?u . ?x ub:name ?n }""",
       "triangle (masters from the own university) + name", "cycle"),
    _s("VC9", """SELECT (COUNT(*) AS ?k) WHERE { ?pub ub:publicationAuthor ?p . ?p ub:worksFor ?d . ?pub ub:publicationAuthor ?g .
  ?g ub:memberOf ?d . ?g a ub:GraduateStudent }""", "4-cycle publication / professor / department / student", "cycle"),
    _s("VC10", """SELECT DISTINCT ?s ?p WHERE { ?s ub:teachingAssistantOf ?c . ?s ub:takesCourse ?g . ?p ub:teacherOf ?c . ?p ub:teacherOf ?g }""",
       "4-cycle: TA of a course of a teacher whose course the TA takes", "cycle"),
    # ---- type-index joins
    _s("VT1", """SELECT ?x ?r WHERE { ?x a ub:FullProfessor ; ub:researchInterest ?r }""", "type + attribute", "type-join"),
    _s("VT2", """SELECT ?x ?p WHERE { ?x a ub:Student ; ub:advisor ?p . ?p a ub:AssociateProfessor }""",
       "types on both ends of advisor", "type-join"),
    _s("VT3", """SELECT ?s ?c WHERE { ?c a ub:GraduateCourse . ?s ub:takesCourse ?c . ?s a ub:GraduateStudent }""",
       "graduate students in graduate courses", "type-join"),
    _s("VT4", """SELECT ?g ?n WHERE { ?g a ub:ResearchGroup ; ub:subOrganizationOf ?d . ?d ub:name ?n }""",
       "research groups and their department's name", "type-join"),
    _s("VT5", """SELECT ?x ?d WHERE { ?x a ub:Professor ; ub:headOf ?d . ?d a ub:Department }""",
       "professors heading departments", "type-join"),
    _s("VT6", """SELECT ?p ?a ?age WHERE { ?p a ub:Publication ; ub:publicationAuthor ?a . ?a a ub:GraduateStudent ; ub:age ?age }""",
       "publications by graduate students with ages", "type-join"),
    _s("VT7", """SELECT ?x ?c WHERE { ?x a ub:Lecturer ; ub:teacherOf ?c . ?c a ub:GraduateCourse }""",
       "lecturers teaching graduate courses", "type-join"),
    _s("VT8", """SELECT ?x ?n WHERE { ?x a ub:AssistantProfessor ; ub:mastersDegreeFrom ?u . ?u a ub:University ; ub:name ?n }""",
       "assistant professors' masters universities that exist", "type-join"),
    _s("VT9", """SELECT ?d ?u WHERE { ?d a ub:Department ; ub:subOrganizationOf ?u . ?u a ub:University }""",
       "departments of universities", "type-join"),
    _s("VT10", """SELECT DISTINCT ?t WHERE { ?x ub:teachingAssistantOf ?c . ?x a ?t }""",
       "the types of every TA", "type-join"),
    # ---- ORDER BY + LIMIT
    _s("VO1", """SELECT ?x ?n WHERE { ?x ub:name ?n } ORDER BY ?n ?x LIMIT 10""", "first names", "order-limit"),
    _s("VO2", """SELECT ?x ?a ?n WHERE { ?x a ub:Lecturer ; ub:age ?a ; ub:name ?n } ORDER BY DESC(?a) ?n ?x LIMIT 8 OFFSET 4""",
       "oldest lecturers, page 2", "order-limit"),
    _s("VO3", """SELECT ?s ?a WHERE { ?s ub:advisor ?p . ?p ub:age ?a } ORDER BY ?a DESC(?s) LIMIT 20""",
       "ORDER BY over a join", "order-limit"),
    _s("VO4", """SELECT ?p ?a WHERE { ?p ub:publicationAuthor ?a } ORDER BY DESC(?p) ?a LIMIT 5 OFFSET 100""",
       "publications by IRI descending, offset", "order-limit"),
    _s("VO5", """SELECT DISTINCT ?d WHERE { ?x ub:memberOf ?d } ORDER BY DESC(?d) LIMIT 3 OFFSET 2""",
       "DISTINCT ORDER BY DESC OFFSET", "order-limit"),
    _s("VO6", """SELECT ?x ?e WHERE { ?x ub:emailAddress ?e FILTER(STRSTARTS(?e, "Grad")) } ORDER BY ?e LIMIT 10""",
       "filtered then ordered", "order-limit"),
    _s("VO7", """SELECT ?x WHERE { ?x a ub:GraduateCourse } ORDER BY STR(?x) LIMIT 4""",
       "ORDER BY STR(?iri)", "order-limit"),
    _s("VO8", """SELECT ?c ?n WHERE { ?x ub:teacherOf ?c . ?c ub:name ?n } ORDER BY DESC(?n) ?c LIMIT 10""",
       "courses by name descending", "order-limit"),
    _s("VO9", """SELECT ?d ?n ?u WHERE { ?d a ub:Department ; ub:name ?n ; ub:subOrganizationOf ?u } ORDER BY ?u ?n LIMIT 10 OFFSET 30""",
       "departments by university and name, offset", "order-limit"),
    _s("VO10", """SELECT ?x ?u ?a WHERE { ?x ub:undergraduateDegreeFrom ?u . ?x ub:age ?a } ORDER BY ?u DESC(?a) ?x LIMIT 10""",
       "three keys over a join", "order-limit"),
    # ---- OPTIONAL
    _s("VP1", """SELECT ?x ?c ?n WHERE { ?x a ub:GraduateStudent OPTIONAL { ?x ub:teachingAssistantOf ?c . ?c ub:name ?n } }""",
       "OPTIONAL of a 2-pattern group", "optional"),
    _s("VP2", """SELECT ?d ?g WHERE { ?d a ub:Department OPTIONAL { ?g ub:subOrganizationOf ?d . ?g a ub:ResearchGroup } }""",
       "OPTIONAL inverse with a type", "optional"),
    _s("VP3", f"""SELECT ?x ?r ?h WHERE {{ ?x ub:worksFor <{D2U0}> OPTIONAL {{ ?x ub:researchInterest ?r }} OPTIONAL {{ ?x ub:headOf ?h }} }}""",
       "two OPTIONALs on one department's staff", "optional"),
    _s("VP4", """SELECT (COUNT(*) AS ?k) WHERE { ?c a ub:Course OPTIONAL { ?t ub:teachingAssistantOf ?c } FILTER(!BOUND(?t)) }""",
       "courses without a TA, counted", "optional"),
    _s("VP5", """SELECT ?x ?p WHERE { ?x a ub:Lecturer OPTIONAL { ?p ub:publicationAuthor ?x } }""",
       "OPTIONAL inverse edge", "optional"),
    _s("VP6", """SELECT ?s ?p ?r WHERE { ?s ub:advisor ?p OPTIONAL { ?p ub:researchInterest ?r FILTER(?r = "Research5") } }""",
       "OPTIONAL with an equality FILTER inside", "optional"),
    _s("VP7", """SELECT ?x ?a ?d WHERE { ?x a ub:FullProfessor ; ub:age ?a OPTIONAL { ?x ub:headOf ?d } } ORDER BY ?a ?x LIMIT 20""",
       "OPTIONAL, ordered page", "optional"),
    _s("VP8", """SELECT (COUNT(?p) AS ?k) (COUNT(*) AS ?n) WHERE { ?x a ub:UndergraduateStudent OPTIONAL { ?x ub:advisor ?p . ?p a ub:FullProfessor } }""",
       "OPTIONAL over undergraduates, counted", "optional"),
    # ---- GROUP BY / aggregates
    _s("VG1", """SELECT ?u (COUNT(DISTINCT ?x) AS ?n) WHERE { ?x ub:doctoralDegreeFrom ?u } GROUP BY ?u HAVING (COUNT(DISTINCT ?x) > 3)""",
       "COUNT DISTINCT per university, HAVING", "group-by"),
    _s("VG2", """SELECT ?d (SUM(?a) AS ?s) WHERE { ?x ub:memberOf ?d ; ub:age ?a } GROUP BY ?d""",
       "SUM of ages per department", "group-by"),
    _s("VG3", """SELECT ?d (xsd:integer(ROUND(AVG(?a) * 10)) AS ?m) WHERE { ?x ub:worksFor ?d ; ub:age ?a } GROUP BY ?d""",
       "AVG per department (10x rounded)", "group-by"),
    _s("VG4", """SELECT ?d (STRLEN(GROUP_CONCAT(?n; separator=",")) AS ?len) WHERE { ?x ub:worksFor ?d ; ub:name ?n } GROUP BY ?d""",
       "GROUP_CONCAT of names per department (its length)", "group-by"),
    _s("VG5", """SELECT ?t (MAX(?a) AS ?hi) (MIN(?a) AS ?lo) WHERE { ?x a ?t ; ub:age ?a } GROUP BY ?t""",
       "MIN / MAX age per type", "group-by"),
    _s("VG6", """SELECT (COUNT(DISTINCT ?u) AS ?n) WHERE { ?x ub:mastersDegreeFrom ?u }""",
       "COUNT DISTINCT of one column", "group-by"),
    _s("VG7", """SELECT ?c (COUNT(?s) AS ?n) WHERE { ?s ub:takesCourse ?c . ?c a ub:GraduateCourse } GROUP BY ?c HAVING (COUNT(?s) > 9)""",
       "enrolment of graduate courses, HAVING", "group-by"),
    _s("VG8", """SELECT ?a (COUNT(*) AS ?n) WHERE { ?x ub:age ?a } GROUP BY ?a ORDER BY ?a""",
       "histogram of ages", "group-by"),
    _s("VG9", """SELECT ?p (COUNT(?s) AS ?n) WHERE { ?s ub:advisor ?p . ?s a ub:UndergraduateStudent } GROUP BY ?p
  HAVING (COUNT(?s) >= 5) ORDER BY DESC(?n) ?p LIMIT 10""", "advisors with many undergraduates, top 10", "group-by"),
    _s("VG10", """SELECT (COUNT(*) AS ?n) (SUM(?a) AS ?s) (MIN(?a) AS ?lo) WHERE { ?x a ub:GraduateStudent ; ub:age ?a FILTER(?a > 30) }""",
       "filtered COUNT / SUM / MIN", "group-by"),
    _s("VG11", """SELECT ?d (COUNT(DISTINCT ?c) AS ?k) WHERE { ?s ub:memberOf ?d ; ub:takesCourse ?c } GROUP BY ?d""",
       "distinct courses taken per department", "group-by"),
    # ---- other forms: UNION, MINUS, paths, BIND, VALUES, sub-SELECT, ASK, CONSTRUCT, IF
    _s("VX1", """SELECT ?x ?o WHERE { { ?x ub:mastersDegreeFrom ?o } UNION { ?x ub:doctoralDegreeFrom ?o } }""",
       "UNION of two predicates", "other"),
    _s("VX2", """SELECT ?c WHERE { ?c a ub:GraduateCourse MINUS { ?s ub:takesCourse ?c } }""",
       "MINUS: graduate courses nobody takes", "other"),
    _s("VX3", """SELECT (COUNT(*) AS ?k) WHERE { ?s ub:advisor/ub:headOf ?d }""", "sequence path, counted", "other"),
    _s("VX4", """SELECT ?x ?l WHERE { ?x ub:name ?n BIND(STRLEN(?n) AS ?l) FILTER(?l > 22) }""",
       "BIND STRLEN then FILTER", "other"),
    _s("VX5", """SELECT ?x ?d WHERE { VALUES ?r { "Research1" "Research2" } ?x ub:researchInterest ?r ; ub:worksFor ?d }""",
       "VALUES of literals joined", "other"),
    _s("VX6", """SELECT ?d ?k ?u WHERE { { SELECT ?d (COUNT(?x) AS ?k) WHERE { ?x ub:worksFor ?d } GROUP BY ?d } ?d ub:subOrganizationOf ?u }""",
       "grouped sub-SELECT joined", "other"),
    _s("VX7", """ASK { ?x ub:age ?a FILTER(?a > 70) }""", "ASK nobody older than 70", "other"),
    _s("VX8", """CONSTRUCT { ?d ub:hasHead ?x } WHERE { ?x ub:headOf ?d }""", "CONSTRUCT inverse of headOf", "other"),
    _s("VX9", """SELECT ?x ?u WHERE { ?x ub:subOrganizationOf/ub:subOrganizationOf ?u }""", "2-step path", "other"),
    _s("VX10", """SELECT ?x WHERE { ?x a ub:GraduateStudent FILTER NOT EXISTS { ?p ub:publicationAuthor ?x } }""",
       "NOT EXISTS on an inverse edge", "other"),
    _s("VX11", """SELECT ?x ?k WHERE { ?x a ub:Lecturer . { SELECT ?x (COUNT(?c) AS ?k) WHERE { ?x ub:teacherOf ?c } GROUP BY ?x } }""",
       "type joined with a grouped sub-SELECT", "other"),
    _s("VX12", """SELECT ?x (IF(?a > 50, "senior", "junior") AS ?g) WHERE { ?x a ub:AssociateProfessor ; ub:age ?a }""",
       "IF projection", "other"),
    _s("VX13", f"""SELECT ?x WHERE {{ ?x ub:memberOf|ub:worksFor <{D3U1}> }}""", "alternative path to a constant", "other"),
    _s("VX14", """SELECT (COUNT(*) AS ?k) WHERE { ?x (ub:takesCourse|ub:teachingAssistantOf) ?c }""",
       "alternative path, counted", "other"),
)
