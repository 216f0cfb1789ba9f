"""A held-out set of OPTIONAL queries (``python -m bench.unseen_sweep --set optional``).

Written for issue 14's OPTIONAL class (wave 2o, helper E) before the left-join work and not
tuned after it: left joins on a type scan, OPTIONAL on a multi-valued property, a FILTER
inside the OPTIONAL (over the optional side alone and over both sides), ``FILTER(!BOUND)``
anti-joins (one and two patterns inside), several OPTIONALs in a row, nested OPTIONALs,
OPTIONAL joined from the object side, ORDER BY / LIMIT, COUNT and DISTINCT over an
OPTIONAL, COALESCE of an always-unbound optional.
"""

from __future__ import annotations

from bench.queries import BenchQuery
from bench.unseen_sweep import _s

OPTIONAL_SET: tuple[BenchQuery, ...] = (
    _s("UO1", """SELECT ?X ?P WHERE { ?X a ub:Lecturer OPTIONAL { ?P ub:publicationAuthor ?X } }""",
       "type scan, OPTIONAL from the object side (multi-valued)", "optional"),
    _s("UO2", """SELECT ?X WHERE { ?X a ub:GraduateStudent OPTIONAL { ?X ub:teachingAssistantOf ?C } FILTER(!BOUND(?C)) }""",
       "anti-join: graduate students who are no TA", "optional"),
    _s("UO3", """SELECT ?X ?A WHERE { ?X a ub:AssociateProfessor OPTIONAL { ?X ub:age ?A FILTER(?A >= 45) } }""",
       "FILTER inside the OPTIONAL", "optional"),
    _s("UO4", """SELECT ?X ?E ?T ?R WHERE { ?X a ub:FullProfessor OPTIONAL { ?X ub:emailAddress ?E }
  OPTIONAL { ?X ub:telephone ?T } OPTIONAL { ?X ub:researchInterest ?R } }""",
       "three OPTIONALs in a row", "optional"),
    _s("UO5", """SELECT ?D ?G WHERE { ?D a ub:Department OPTIONAL { ?G ub:subOrganizationOf ?D . ?G a ub:ResearchGroup
  OPTIONAL { ?P ub:publicationAuthor ?G } } }""",
       "nested OPTIONAL, two patterns outside the inner one", "optional"),
    _s("UO6", """SELECT ?S ?A WHERE { ?S ub:memberOf ?D OPTIONAL { ?S ub:advisor ?A } } ORDER BY DESC(?S) LIMIT 20""",
       "OPTIONAL on a large side, ORDER BY DESC LIMIT", "optional"),
    _s("UO7", """SELECT (COUNT(?C) AS ?N) (COUNT(*) AS ?M) WHERE { ?X a ub:AssistantProfessor OPTIONAL { ?X ub:teacherOf ?C } }""",
       "COUNT over an OPTIONAL", "optional"),
    _s("UO8", """SELECT ?S ?C ?N WHERE { ?S a ub:GraduateStudent ; ub:advisor ?P OPTIONAL { ?P ub:teacherOf ?C . ?C ub:name ?N } }""",
       "two-pattern chain inside the OPTIONAL", "optional"),
    _s("UO9", """SELECT ?X ?A WHERE { ?X a ub:Lecturer ; ub:age ?A OPTIONAL { ?X ub:teacherOf ?C . ?C a ub:GraduateCourse }
  FILTER(!BOUND(?C)) }""",
       "anti-join with two patterns inside", "optional"),
    _s("UO10", """SELECT ?C ?S WHERE { ?C a ub:GraduateCourse OPTIONAL { ?S ub:teachingAssistantOf ?C } }""",
       "OPTIONAL joined on the object", "optional"),
    _s("UO11", """SELECT ?X ?Y ?AY WHERE { ?X a ub:AssociateProfessor ; ub:age ?AX OPTIONAL { ?Y ub:advisor ?X . ?Y ub:age ?AY
  FILTER(?AY + 25 > ?AX) } }""",
       "FILTER inside reading both sides", "optional"),
    _s("UO12", """SELECT DISTINCT ?D ?H WHERE { ?X ub:worksFor ?D OPTIONAL { ?H ub:headOf ?D } }""",
       "DISTINCT over an OPTIONAL", "optional"),
    _s("UO13", """SELECT ?X (COALESCE(?N, "none") AS ?M) WHERE { ?X a ub:ResearchGroup OPTIONAL { ?X ub:name ?N } }""",
       "COALESCE of an OPTIONAL (mostly unbound)", "optional"),
)
