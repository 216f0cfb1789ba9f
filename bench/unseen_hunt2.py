"""A third set of unseen one-shot queries (``python -m bench.unseen_sweep --set hunt2``).

Written the way endpoint users write them and in forms the first two sets lack: DESCRIBE /
CONSTRUCT of one entity, string-function FILTERs (CONTAINS / STRSTARTS / REGEX with flags /
LCASE / UCASE), equality / IN / sameTerm with constants over ``?s ?p ?o`` or a variable
predicate, deep OFFSETs, LIMIT over UNION / sub-SELECT / GRAPH, two-key DESC ordering,
COUNT(DISTINCT) of joins, HAVING, MIN/MAX per group, nested OPTIONALs, OPTIONAL with a FILTER
inside, MINUS, NOT EXISTS, property paths (``+ * / ^ |``), VALUES joins, BIND + FILTER,
expression projections, ASK, an unselective first pattern before a selective one, 5-cycles,
chordal cycles and 2-hop stars around a popular node. Constants differ from the other sets.
"""

from __future__ import annotations

from bench.queries import BenchQuery
from bench.unseen_sweep import _s

D7U4 = "http://www.Department7.University4.edu"
D2U1 = "http://www.Department2.University1.edu"
D5U3 = "http://www.Department5.University3.edu"
U3 = "http://www.University3.edu"
U5 = "http://www.University5.edu"
UB = "http://swat.cse.lehigh.edu/onto/univ-bench.owl#"

HUNT2: tuple[BenchQuery, ...] = (
    # ---- one entity: DESCRIBE / CONSTRUCT / ASK / stars / paths
    _s("UN1", f"DESCRIBE <{D7U4}/AssociateProfessor6>", "DESCRIBE one professor", "other"),
    _s("UN2", f"DESCRIBE <{D2U1}>", "DESCRIBE a department (popular object)", "other"),
    _s("UN3", f"CONSTRUCT {{ <{D5U3}/GraduateStudent21> ?p ?o }} WHERE {{ <{D5U3}/GraduateStudent21> ?p ?o }}",
       "CONSTRUCT every edge out of one student", "other"),
    _s("UN4", f"""CONSTRUCT {{ ?s ub:knows ?a }} WHERE {{ ?s ub:advisor ?a . ?a ub:worksFor <{D2U1}> }}""",
       "CONSTRUCT advisees of one department (renamed predicate)", "other"),
    _s("UN5", f"""ASK {{ <{D7U4}/GraduateStudent3> ub:takesCourse ?c . ?c ub:name ?n }}""", "ASK of a 2-hop pattern"),
    _s("UN6", f"""SELECT ?n ?e ?a WHERE {{ <{D5U3}/FullProfessor1> ub:name ?n ; ub:emailAddress ?e ; ub:age ?a ;
  ub:doctoralDegreeFrom ?u . ?u ub:name ?un }}""", "star on one professor + a hop"),
    _s("UN7", f"""SELECT ?s ?c WHERE {{ ?s ub:advisor <{D7U4}/FullProfessor1> . ?s ub:takesCourse ?c . ?c ub:name ?cn }}""",
       "2-hop star around one advisor"),
    _s("UN8", f"""SELECT ?x WHERE {{ <{D2U1}/GraduateStudent40> ub:advisor/ub:worksFor/ub:subOrganizationOf ?x }}""",
       "3-step sequence path from a constant"),
    _s("UN9", f"""SELECT ?p ?v WHERE {{ <{D5U3}/Lecturer4> ?p ?v FILTER(isLiteral(?v)) }}""",
       "literal attributes of one entity"),
    _s("UN10", f"""SELECT ?s ?p WHERE {{ ?s ?p <{D7U4}/Course11> }} ORDER BY ?p ?s""",
       "everything pointing at one course, ordered"),
    # ---- equality / IN / sameTerm with constants over ?s ?p ?o or a variable predicate
    _s("UE1", f"""SELECT ?s ?p WHERE {{ ?s ?p ?o FILTER(?o = <{D7U4}/AssistantProfessor3>) }}""",
       "?s ?p ?o FILTER(?o = <iri>)", "filter"),
    _s("UE2", """SELECT ?s ?p WHERE { ?s ?p ?o FILTER(?o = "GraduateStudent17@Department3.University5.edu") }""",
       "?s ?p ?o FILTER(?o = \"literal\")", "filter"),
    _s("UE3", f"""SELECT ?s ?o WHERE {{ ?s ?p ?o FILTER(?p IN (ub:headOf, ub:researchInterest) && ?s = <{D2U1}/FullProfessor0>) }}""",
       "IN of predicates and an equal subject", "filter"),
    _s("UE4", f"""SELECT ?s ?p WHERE {{ ?s ?p ?o FILTER(?o IN (<{U3}>, <{U5}>)) }}""",
       "?o IN (two universities) over everything", "filter"),
    _s("UE5", f"""SELECT ?p ?o WHERE {{ ?s ?p ?o FILTER(sameTerm(?s, <{D5U3}/UndergraduateStudent101>)) }}""",
       "sameTerm on the subject", "filter"),
    _s("UE6", """SELECT ?x WHERE { ?x ub:name ?n FILTER(?n = "Department11") }""",
       "name equals a literal", "filter"),
    _s("UE7", """SELECT ?x ?p WHERE { ?x ?p "Research21" }""", "every subject with one literal value", "filter"),
    _s("UE8", """SELECT ?x WHERE { ?x ub:age ?a FILTER(?a = 23) }""",
       "numeric equality (value semantics)", "filter"),
    _s("UE9", """SELECT ?x ?n WHERE { ?x ub:name ?n FILTER(?n IN ("Publication7", "Lecturer5", "Course30")) }""",
       "IN of three names", "filter"),
    # ---- string functions over a large predicate
    _s("UF11", """SELECT ?x ?e WHERE { ?x ub:emailAddress ?e FILTER(CONTAINS(?e, "Lecturer3@Department1")) }""",
       "CONTAINS over e-mails", "filter"),
    _s("UF12", """SELECT ?x WHERE { ?x ub:name ?n FILTER(REGEX(?n, "^assistantprofessor1", "i")) }""",
       "REGEX with the i flag over names", "filter"),
    _s("UF13", """SELECT ?x ?e WHERE { ?x ub:emailAddress ?e FILTER(STRSTARTS(LCASE(?e), "fullprofessor7@")) }""",
       "STRSTARTS(LCASE) over e-mails", "filter"),
    _s("UF14", """SELECT ?x ?n WHERE { ?x a ub:Course ; ub:name ?n FILTER(STRENDS(?n, "42") || STRENDS(?n, "43")) }""",
       "type + STRENDS || STRENDS", "filter"),
    _s("UF15", """SELECT ?x WHERE { ?x ub:telephone ?t ; ub:emailAddress ?e FILTER(UCASE(?e) = "LECTURER0@DEPARTMENT0.UNIVERSITY3.EDU") }""",
       "UCASE equality after a join", "filter"),
    _s("UF16", """SELECT (COUNT(*) AS ?k) WHERE { ?x ub:emailAddress ?e FILTER(REGEX(?e, "student1[0-9]+@department4", "i")) }""",
       "counted REGEX i over e-mails", "filter"),
    # ---- ORDER BY / LIMIT / OFFSET
    _s("UO11", """SELECT ?x ?a ?n WHERE { ?x ub:age ?a ; ub:name ?n } ORDER BY DESC(?a) DESC(?x) LIMIT 12""",
       "ORDER BY DESC on two keys, LIMIT", "order-limit"),
    _s("UO12", """SELECT ?s ?c WHERE { ?s ub:takesCourse ?c } ORDER BY ?c ?s LIMIT 10 OFFSET 120000""",
       "very deep OFFSET", "order-limit"),
    _s("UO13", """SELECT ?x ?e WHERE { ?x a ub:GraduateStudent ; ub:emailAddress ?e } ORDER BY ?e LIMIT 5 OFFSET 2000""",
       "type join, ordered page", "order-limit"),
    _s("UO14", """SELECT DISTINCT ?u WHERE { ?x ub:undergraduateDegreeFrom ?u } ORDER BY DESC(?u) LIMIT 4""",
       "DISTINCT ORDER BY DESC LIMIT", "order-limit"),
    _s("UO15", """SELECT ?x ?a WHERE { ?x ub:age ?a } ORDER BY (?a * -1) ?x LIMIT 6""",
       "ORDER BY arithmetic", "order-limit"),
    # ---- LIMIT without ORDER BY over UNION / sub-SELECT / GRAPH / MINUS (counted)
    _s("UL11", """SELECT (COUNT(*) AS ?k) WHERE { { SELECT ?x WHERE { { ?x a ub:Lecturer } UNION { ?x a ub:FullProfessor } } LIMIT 15 } }""",
       "LIMIT over a UNION (counted)", "limit"),
    _s("UL12", """SELECT (COUNT(*) AS ?k) WHERE { { SELECT ?x ?n WHERE { { SELECT ?x WHERE { ?x ub:takesCourse ?c } } ?x ub:name ?n } LIMIT 20 } }""",
       "LIMIT over a sub-SELECT join (counted)", "limit"),
    _s("UL13", """SELECT (COUNT(*) AS ?k) WHERE { { SELECT ?s ?o WHERE { GRAPH ?g { ?s ub:advisor ?o } } LIMIT 30 } }""",
       "LIMIT over GRAPH ?g (counted; the default graph holds everything)", "limit"),
    _s("UL14", """SELECT (COUNT(*) AS ?k) WHERE { { SELECT ?x WHERE { ?x a ub:GraduateStudent MINUS { ?x ub:teachingAssistantOf ?c } } LIMIT 25 } }""",
       "LIMIT over MINUS (counted)", "limit"),
    _s("UL15", """SELECT (COUNT(*) AS ?k) WHERE { { SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 40 OFFSET 500000 } }""",
       "deep OFFSET without ORDER BY (counted)", "limit"),
    # ---- aggregates
    _s("UG11", """SELECT (COUNT(DISTINCT ?c) AS ?n) WHERE { ?s ub:advisor ?p . ?s ub:takesCourse ?c }""",
       "COUNT DISTINCT over a join", "group-by"),
    _s("UG12", """SELECT ?d (COUNT(?s) AS ?n) WHERE { ?s ub:memberOf ?d } GROUP BY ?d HAVING (COUNT(?s) < 480) ORDER BY ?d""",
       "members per department, HAVING <", "group-by"),
    _s("UG13", """SELECT ?d (MIN(?a) AS ?lo) (MAX(?a) AS ?hi) WHERE { ?x ub:worksFor ?d ; ub:age ?a } GROUP BY ?d""",
       "MIN / MAX age per department", "group-by"),
    _s("UG14", """SELECT ?t (COUNT(DISTINCT ?x) AS ?n) WHERE { ?x a ?t ; ub:advisor ?a } GROUP BY ?t""",
       "COUNT DISTINCT per type of advisees", "group-by"),
    _s("UG15", """SELECT ?r (MIN(STR(?x)) AS ?one) (COUNT(?x) AS ?n) WHERE { ?x ub:researchInterest ?r } GROUP BY ?r HAVING (COUNT(?x) > 140)""",
       "HAVING over interests, MIN of a string", "group-by"),
    # ---- OPTIONAL / MINUS / NOT EXISTS
    _s("UP11", """SELECT ?x ?c ?t WHERE { ?x a ub:AssociateProfessor OPTIONAL { ?x ub:teacherOf ?c OPTIONAL { ?t ub:teachingAssistantOf ?c OPTIONAL { ?t ub:age ?a } } } }""",
       "three nested OPTIONALs", "optional"),
    _s("UP12", """SELECT ?x ?a WHERE { ?x a ub:Lecturer OPTIONAL { ?x ub:age ?a FILTER(?a < 30) } }""",
       "OPTIONAL with a FILTER inside", "optional"),
    _s("UP13", """SELECT ?s ?h WHERE { ?s ub:advisor ?p OPTIONAL { ?p ub:headOf ?h } } ORDER BY ?s LIMIT 50""",
       "OPTIONAL on a large side, ordered page", "optional"),
    _s("UX11", """SELECT ?x WHERE { ?x a ub:FullProfessor MINUS { ?x ub:researchInterest "Research3" } }""",
       "MINUS with a constant inside", "other"),
    _s("UX12", """SELECT ?s WHERE { ?s ub:advisor ?p FILTER NOT EXISTS { ?s ub:teachingAssistantOf ?c } }""",
       "NOT EXISTS over a large side", "other"),
    # ---- paths, VALUES, BIND, expressions
    _s("UX13", f"""SELECT ?x WHERE {{ ?x (ub:worksFor|ub:memberOf)/ub:subOrganizationOf <{U3}> }}""",
       "alternative then sequence to a university", "other"),
    _s("UX14", f"""SELECT ?x ?y WHERE {{ ?x ^ub:publicationAuthor/ub:publicationAuthor ?y FILTER(?x = <{D5U3}/AssistantProfessor2>) }}""",
       "co-authors by an inverse sequence", "other"),
    _s("UX15", """SELECT ?x ?l WHERE { VALUES (?t ?l) { (ub:Lecturer "L") (ub:FullProfessor "F") } ?x a ?t ; ub:headOf ?d }""",
       "VALUES of two columns joined", "other"),
    _s("UX16", """SELECT ?x ?b WHERE { ?x ub:age ?a BIND(?a - 20 AS ?b) FILTER(?b > 44) }""",
       "BIND arithmetic + FILTER", "other"),
    _s("UX17", """SELECT ?x (CONCAT(STR(?n), " <", STR(?e), ">") AS ?who) WHERE { ?x a ub:AssistantProfessor ; ub:name ?n ; ub:emailAddress ?e }""",
       "CONCAT / STR projection", "other"),
    _s("UX18", """SELECT ?x (?a * 12 AS ?months) WHERE { ?x a ub:Lecturer ; ub:age ?a }""",
       "arithmetic projection", "other"),
    # ---- planner order, cycles, stars
    _s("UQ1", f"""SELECT ?s ?e WHERE {{ ?s ub:emailAddress ?e . ?s ub:memberOf <{D7U4}> . ?s ub:advisor ?a }}""",
       "unselective first pattern, selective later", "type-join"),
    _s("UQ2", f"""SELECT ?x ?c WHERE {{ ?x ub:takesCourse ?c . ?x ub:name ?n . ?c ub:name "GraduateCourse17" . ?x ub:memberOf <{D2U1}> }}""",
       "large join first, two constants late", "type-join"),
    _s("UC11", """SELECT (COUNT(*) AS ?n) WHERE { ?s ub:advisor ?p . ?p ub:worksFor ?d . ?g ub:subOrganizationOf ?d . ?t ub:teachingAssistantOf ?c . ?p ub:teacherOf ?c . ?s ub:memberOf ?d }""",
       "5-cycle-ish with a chord, counted", "cycle"),
    _s("UC12", """SELECT ?s ?p ?c WHERE { ?s ub:advisor ?p . ?p ub:teacherOf ?c . ?s ub:takesCourse ?c . ?s ub:memberOf ?d . ?p ub:worksFor ?d }""",
       "chordal 4-cycle (two triangles sharing ?s ?p)", "cycle"),
    _s("UC13", """SELECT (COUNT(*) AS ?n) WHERE { ?s ub:takesCourse ?c . ?p ub:teacherOf ?c . ?p ub:worksFor ?d . ?d ub:subOrganizationOf ?u . ?s ub:undergraduateDegreeFrom ?u }""",
       "5-cycle student / course / teacher / dept / university", "cycle"),
    _s("UC14", f"""SELECT (COUNT(DISTINCT ?o) AS ?n) WHERE {{ ?s ub:memberOf <{D5U3}> . ?s ub:takesCourse ?c . ?o ub:takesCourse ?c . ?o ub:memberOf <{D5U3}> FILTER(?s != ?o) }}""",
       "2-hop star around a popular node (classmates)", "cycle"),
)
