"""A sweep of one-shot queries the default bench set does not have (issue 14's unseen queries).

For every class of issue 14 (selective, filter, cycle, type-join, order-limit, optional,
group-by, plus "other": UNION / MINUS / VALUES / paths / CONSTRUCT / sub-SELECTs) 6-10
queries written the way users write them: other predicates, other constants, DISTINCT,
LIMIT/OFFSET, ORDER BY DESC, FILTER with regex / string functions / numeric comparisons / IN,
OPTIONAL chains, aggregates with HAVING, property paths, ASK / CONSTRUCT / DESCRIBE.

Run (from a neutral directory, see the bench README)::

    cd /tmp && PYTHONPATH=/path/to/tree python -m bench.unseen_sweep --scale 1M --max-runs 5

It reuses ``bench.runner``'s ``--alternate-http`` machinery: Jindou's server and ``oxigraph
serve`` both loaded with the same LUBM-like data, every answer compared first (rows as N-Triples
strings, graph answers as sorted N-Triples lines), then the requests alternate per query and the
per-query and per-class ratio tables are printed.
"""

from __future__ import annotations

import http.client
import sys

from bench.peers import JindouHttpPeer, OxigraphServePeer
from bench.queries import BenchQuery, _q

D0 = "http://www.Department0.University0.edu"
D3U2 = "http://www.Department3.University2.edu"
U1 = "http://www.University1.edu"
U0 = "http://www.University0.edu"
RDFS = "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"


def _s(name, body, desc, cls="selective"):
    return BenchQuery(name, cls == "selective", RDFS + _q(body), desc, cls)


UNSEEN: tuple[BenchQuery, ...] = (
    # ---- selective: point lookups, stars on one entity, chains from a constant, inverse lookups
    _s("US1", f"SELECT ?E WHERE {{ <{D3U2}/AssociateProfessor4> ub:emailAddress ?E }}", "point lookup"),
    _s("US2", f"""SELECT ?N ?A ?D ?U WHERE {{
  <{D3U2}/GraduateStudent12> ub:name ?N ; ub:age ?A ; ub:memberOf ?D ; ub:undergraduateDegreeFrom ?U }}""",
       "4-pattern star on one student"),
    _s("US3", f"""SELECT DISTINCT ?S WHERE {{ ?S ub:takesCourse <{D3U2}/Course7> }} LIMIT 20""",
       "inverse lookup, DISTINCT LIMIT"),
    _s("US4", f"""SELECT ?C ?S ?A WHERE {{
  <{D3U2}/FullProfessor3> ub:teacherOf ?C . ?S ub:takesCourse ?C . ?S ub:advisor ?A }}""",
       "3-hop chain from a professor"),
    _s("US5", f"""SELECT ?P ?N WHERE {{ ?P ub:publicationAuthor <{D0}/AssistantProfessor2> . ?P ub:name ?N }}""",
       "inverse lookup + attribute"),
    _s("US6", f"""ASK {{ <{D3U2}/Lecturer1> ub:worksFor <{D3U2}> }}""", "ASK on one triple"),
    _s("US7", f"""SELECT ?S ?N WHERE {{ <{D3U2}/AssociateProfessor1> ^ub:advisor ?S . ?S ub:name ?N }}""",
       "inverse path ^advisor + name"),
    _s("US8", f"""SELECT ?X ?T WHERE {{
  VALUES ?X {{ <{D0}/FullProfessor2> <{D3U2}/Lecturer3> <{U1}> }} ?X ub:name ?N . ?X rdf:type ?T }}""",
       "VALUES of three entities, their types"),
    _s("US9", f"""SELECT ?X ?E WHERE {{ ?X ub:headOf <{D3U2}> . ?X ub:emailAddress ?E . ?X ub:age ?A }}""",
       "head of one department with attributes"),
    _s("US10", f"""SELECT ?G WHERE {{ ?G ub:subOrganizationOf <{D3U2}> ; a ub:ResearchGroup }} ORDER BY ?G""",
       "research groups of another department, ordered"),
    # ---- FILTER over a large predicate
    _s("UF1", """SELECT ?X ?A WHERE { ?X ub:age ?A . FILTER(?A < 18 || ?A > 66) }""",
       "numeric range, two sides", "filter"),
    _s("UF2", """SELECT ?X WHERE { ?X ub:telephone ?T . ?X ub:emailAddress ?E .
  FILTER(REGEX(?E, "^Lecturer1[0-9]@Department2")) }""", "regex on e-mails after a join", "filter"),
    _s("UF3", """SELECT ?X ?N WHERE { ?X ub:name ?N . FILTER(?N IN ("Course12", "Research3", "UndergraduateStudent99")) }""",
       "IN over every name", "filter"),
    _s("UF4", """SELECT ?X ?R WHERE { ?X ub:researchInterest ?R . FILTER(STRENDS(?R, "7")) }""",
       "STRENDS over research interests", "filter"),
    _s("UF5", """SELECT ?X ?A WHERE { ?X rdf:type ub:AssociateProfessor . ?X ub:age ?A . FILTER(?A >= 50 && ?A <= 52) }""",
       "numeric window after a type join", "filter"),
    _s("UF6", """SELECT ?X ?E WHERE { ?X ub:emailAddress ?E . FILTER(CONTAINS(LCASE(?E), "university3.edu") && !STRSTARTS(?E, "Under")) }""",
       "LCASE/CONTAINS/not STRSTARTS over e-mails", "filter"),
    _s("UF7", """SELECT ?X WHERE { ?X ub:age ?A . FILTER(?A != 30 && ?A * 2 > 120) }""",
       "arithmetic in the filter", "filter"),
    _s("UF8", """SELECT ?S ?C WHERE { ?S ub:takesCourse ?C . FILTER(STRSTARTS(STR(?C), "http://www.Department5.University1.edu/")) }""",
       "IRI prefix over a large predicate", "filter"),
    _s("UF9", """SELECT (COUNT(*) AS ?N) WHERE { ?X ub:name ?N0 . FILTER(STRLEN(?N0) < 7) }""",
       "STRLEN filter counted", "filter"),
    # ---- cycles
    _s("UC1", """SELECT ?S ?P ?D WHERE { ?S ub:advisor ?P . ?P ub:worksFor ?D . ?S ub:memberOf ?D }""",
       "triangle student / advisor / department", "cycle"),
    _s("UC2", """SELECT ?S ?C ?P WHERE { ?S ub:teachingAssistantOf ?C . ?P ub:teacherOf ?C . ?S ub:advisor ?P }""",
       "triangle TA / course / advisor", "cycle"),
    _s("UC3", """SELECT ?P ?D ?U WHERE { ?P ub:worksFor ?D . ?D ub:subOrganizationOf ?U . ?P ub:undergraduateDegreeFrom ?U }""",
       "triangle professor / department / alma mater", "cycle"),
    _s("UC4", """SELECT DISTINCT ?S ?D WHERE { ?S ub:takesCourse ?C . ?P ub:teacherOf ?C . ?P ub:worksFor ?D . ?S ub:memberOf ?D . ?P a ub:AssistantProfessor }""",
       "4-cycle with a type, DISTINCT", "cycle"),
    _s("UC5", """SELECT (COUNT(*) AS ?N) WHERE { ?S ub:advisor ?P . ?P ub:teacherOf ?C . ?S ub:takesCourse ?C . ?S ub:memberOf ?D . ?P ub:worksFor ?D }""",
       "triangle + square, counted", "cycle"),
    _s("UC6", """SELECT ?S ?U WHERE { ?S ub:memberOf ?D . ?D ub:subOrganizationOf ?U . ?S ub:mastersDegreeFrom ?U }""",
       "member of a department of the masters' university", "cycle"),
    # ---- type-index joins
    _s("UT1", """SELECT ?X ?G WHERE { ?X a ub:ResearchGroup . ?X ub:subOrganizationOf ?G . ?G a ub:Department }""",
       "two types through subOrganizationOf", "type-join"),
    _s("UT2", """SELECT ?X ?C WHERE { ?X a ub:GraduateStudent . ?X ub:teachingAssistantOf ?C . ?C a ub:Course }""",
       "TAs of undergraduate courses", "type-join"),
    _s("UT3", """SELECT ?X ?E WHERE { ?X a ub:Lecturer ; ub:emailAddress ?E }""", "lecturers and e-mails", "type-join"),
    _s("UT4", """SELECT DISTINCT ?D WHERE { ?X a ub:UndergraduateStudent ; ub:memberOf ?D }""",
       "DISTINCT departments of undergraduates", "type-join"),
    _s("UT5", """SELECT ?P ?A WHERE { ?P a ub:Publication ; ub:publicationAuthor ?A . ?A a ub:Lecturer }""",
       "publications of lecturers", "type-join"),
    _s("UT6", """SELECT ?X ?T WHERE { ?X a ub:Professor . ?X a ?T . FILTER(?T != ub:Professor) }""",
       "the other types of every professor", "type-join"),
    _s("UT7", """SELECT ?X ?U WHERE { ?X a ub:AssociateProfessor ; ub:doctoralDegreeFrom ?U . ?U a ub:University }""",
       "associate professors' doctoral universities", "type-join"),
    # ---- ORDER BY + LIMIT
    _s("UO1", """SELECT ?X ?E WHERE { ?X ub:emailAddress ?E } ORDER BY DESC(?E) LIMIT 7""",
       "last 7 e-mails", "order-limit"),
    _s("UO2", """SELECT ?X ?A WHERE { ?X a ub:FullProfessor ; ub:age ?A } ORDER BY ?A ?X LIMIT 10 OFFSET 20""",
       "youngest professors, page 3", "order-limit"),
    _s("UO3", """SELECT ?C (COUNT(?S) AS ?N) WHERE { ?S ub:takesCourse ?C } GROUP BY ?C ORDER BY DESC(?N) ?C LIMIT 5""",
       "top 5 courses by enrolment", "order-limit"),
    _s("UO4", """SELECT DISTINCT ?R WHERE { ?X ub:researchInterest ?R } ORDER BY ?R LIMIT 10""",
       "first research interests", "order-limit"),
    _s("UO5", """SELECT ?X ?N WHERE { ?X a ub:Publication ; ub:name ?N } ORDER BY DESC(?X) LIMIT 3""",
       "last publications by IRI", "order-limit"),
    _s("UO6", """SELECT ?X ?A WHERE { ?X ub:age ?A . FILTER(?A > 60) } ORDER BY DESC(?A) DESC(?X) LIMIT 15""",
       "oldest after a filter", "order-limit"),
    _s("UO7", """SELECT ?X ?D WHERE { ?X ub:memberOf ?D } ORDER BY ?D ?X LIMIT 10 OFFSET 1000""",
       "members ordered by department, deep offset", "order-limit"),
    # ---- OPTIONAL
    _s("UP1", """SELECT ?X ?R WHERE { ?X a ub:AssistantProfessor OPTIONAL { ?X ub:researchInterest ?R } }""",
       "assistant professors with interests", "optional"),
    _s("UP2", """SELECT ?X ?C ?T WHERE { ?X a ub:Lecturer OPTIONAL { ?X ub:teacherOf ?C OPTIONAL { ?T ub:teachingAssistantOf ?C } } }""",
       "nested OPTIONAL chain", "optional"),
    _s("UP3", """SELECT ?X ?H WHERE { ?X a ub:FullProfessor OPTIONAL { ?X ub:headOf ?H } FILTER(!BOUND(?H)) }""",
       "OPTIONAL + !BOUND (professors who head nothing)", "optional"),
    _s("UP4", """SELECT ?S ?A ?T WHERE { ?S a ub:GraduateStudent OPTIONAL { ?S ub:advisor ?A } OPTIONAL { ?S ub:teachingAssistantOf ?T } }""",
       "two OPTIONALs on graduate students", "optional"),
    _s("UP5", """SELECT ?D ?H WHERE { ?D a ub:Department OPTIONAL { ?H ub:headOf ?D . ?H ub:age ?A FILTER(?A > 50) } }""",
       "departments with an older head", "optional"),
    _s("UP6", """SELECT ?X ?U WHERE { ?X ub:worksFor ?D OPTIONAL { ?X ub:mastersDegreeFrom ?U . ?U ub:name "University2" } }""",
       "OPTIONAL with a constant inside", "optional"),
    # ---- GROUP BY / aggregates
    _s("UG1", """SELECT ?D (COUNT(?X) AS ?N) WHERE { ?X ub:worksFor ?D } GROUP BY ?D HAVING (COUNT(?X) > 38)""",
       "staff per department, HAVING", "group-by"),
    _s("UG2", """SELECT ?A (COUNT(DISTINCT ?P) AS ?N) WHERE { ?P ub:publicationAuthor ?A } GROUP BY ?A""",
       "publications per author (COUNT DISTINCT)", "group-by"),
    _s("UG3", """SELECT ?T (COUNT(*) AS ?N) WHERE { ?X a ?T } GROUP BY ?T""", "instances per class", "group-by"),
    _s("UG4", """SELECT ?U (xsd:integer(FLOOR(AVG(?A) * 1000)) AS ?M) (MAX(?A) AS ?O) WHERE { ?X ub:undergraduateDegreeFrom ?U . ?X ub:age ?A } GROUP BY ?U""",
       "average (its decimal digits are the engine's: 1000x floored) / max age per alma mater", "group-by"),
    _s("UG5", """SELECT (COUNT(DISTINCT ?C) AS ?N) WHERE { ?S a ub:GraduateStudent ; ub:takesCourse ?C }""",
       "distinct courses of graduate students", "group-by"),
    _s("UG6", """SELECT ?S (COUNT(?C) AS ?K) WHERE { ?S ub:takesCourse ?C } GROUP BY ?S HAVING (COUNT(?C) >= 4)""",
       "students with many courses", "group-by"),
    _s("UG7", """SELECT ?R (COUNT(*) AS ?N) (MIN(?X) AS ?F) WHERE { ?X ub:researchInterest ?R } GROUP BY ?R""",
       "professors per interest with the first", "group-by"),
    _s("UG8", """SELECT (SUM(?A) AS ?S) (COUNT(*) AS ?N) WHERE { ?X a ub:UndergraduateStudent ; ub:age ?A }""",
       "sum of undergraduates' ages", "group-by"),
    # ---- other forms: UNION, MINUS, paths, CONSTRUCT, sub-SELECT, BIND
    _s("UX1", """SELECT ?X WHERE { { ?X a ub:Lecturer } UNION { ?X a ub:AssistantProfessor } }""",
       "UNION of two types", "other"),
    _s("UX2", """SELECT ?X WHERE { ?X a ub:GraduateStudent MINUS { ?X ub:advisor ?P } }""",
       "MINUS: graduate students without an advisor", "other"),
    _s("UX3", f"""SELECT ?G WHERE {{ ?G ub:subOrganizationOf+ <{U0}> }}""",
       "transitive path subOrganizationOf+ to a university", "other"),
    _s("UX4", f"""CONSTRUCT {{ ?S ub:advisedBy ?P }} WHERE {{ ?S ub:advisor ?P . ?P ub:worksFor <{D0}> }}""",
       "CONSTRUCT advisees of one department", "other"),
    _s("UX5", """SELECT ?X ?N WHERE { { SELECT ?X WHERE { ?X a ub:FullProfessor ; ub:age ?A } ORDER BY DESC(?A) ?X LIMIT 5 } ?X ub:name ?N }""",
       "sub-SELECT top 5 then a join", "other"),
    _s("UX6", """SELECT ?X ?Y WHERE { ?X ub:age ?A BIND(?A + 1 AS ?Y) FILTER(?Y = 40) }""",
       "BIND then FILTER on it", "other"),
    _s("UX7", f"""SELECT ?X ?T WHERE {{ ?X ub:memberOf <{D3U2}> . ?X a/rdfs:subClassOf* ?T }}""",
       "a/rdfs:subClassOf* from one department's members", "other"),
    _s("UX8", f"""DESCRIBE <{D3U2}/FullProfessor5>""", "DESCRIBE one professor", "other"),
    _s("UX9", """SELECT ?S ?O WHERE { ?S ub:advisor/ub:worksFor ?O } ORDER BY ?S LIMIT 1000""",
       "sequence path, ORDER BY + LIMIT", "other"),
)

#: a second sweep (``--set hunt``) of the forms users write less often but do write: NOT EXISTS /
#: EXISTS, negated property sets, zero-or-more paths, variable predicates from a constant,
#: GROUP_CONCAT, SUBSTR / CONCAT projections, ORDER BY an expression, COUNT DISTINCT of a
#: join, VALUES joined, large OFFSET, SELECT *
HUNT: tuple[BenchQuery, ...] = (
    _s("UH1", f"""SELECT ?P ?O WHERE {{ <{D3U2}/GraduateStudent7> ?P ?O }}""", "every edge out of one entity"),
    _s("UH2", f"""SELECT ?S ?P WHERE {{ ?S ?P <{D3U2}/AssistantProfessor3> }}""", "every edge into one entity"),
    _s("UH3", f"""SELECT ?S ?C ?N WHERE {{ ?S ub:advisor <{D0}/FullProfessor4> ; ub:takesCourse ?C . ?C ub:name ?N }}""",
       "a star and a hop"),
    _s("UH4", """SELECT ?X WHERE { ?X a ub:FullProfessor FILTER NOT EXISTS { ?X ub:headOf ?D } }""",
       "FILTER NOT EXISTS", "other"),
    _s("UH5", """SELECT ?S WHERE { ?S a ub:GraduateStudent FILTER EXISTS { ?S ub:teachingAssistantOf ?C } }""",
       "FILTER EXISTS", "other"),
    _s("UH6", f"""SELECT ?O WHERE {{ <{D3U2}/FullProfessor2> !(rdf:type|ub:name) ?O }}""",
       "negated property set from a constant"),
    _s("UH7", f"""SELECT ?X WHERE {{ ?X ub:subOrganizationOf* <{U1}> }}""", "zero-or-more path to a constant", "other"),
    _s("UH8", """SELECT ?D (GROUP_CONCAT(?N; separator="|") AS ?G) WHERE { ?X ub:headOf ?D ; ub:name ?N } GROUP BY ?D""",
       "GROUP_CONCAT of heads' names", "group-by"),
    _s("UH9", """SELECT ?X (SUBSTR(?E, 1, 8) AS ?P) (CONCAT(?N, "!") AS ?C) WHERE { ?X a ub:Lecturer ; ub:emailAddress ?E ; ub:name ?N }""",
       "SUBSTR / CONCAT projections", "other"),
    _s("UH10", """SELECT ?X ?N WHERE { ?X a ub:Lecturer ; ub:name ?N } ORDER BY DESC(STRLEN(?N)) ?X LIMIT 10""",
       "ORDER BY an expression", "order-limit"),
    _s("UH11", """SELECT (COUNT(DISTINCT ?D) AS ?K) WHERE { ?S ub:advisor ?P . ?P ub:worksFor ?D }""",
       "COUNT DISTINCT over a join", "group-by"),
    _s("UH12", f"""SELECT ?C ?S WHERE {{ VALUES ?C {{ <{D0}/Course1> <{D0}/Course2> <{D3U2}/GraduateCourse4> }} ?S ub:takesCourse ?C }}""",
       "VALUES of courses joined"),
    _s("UH13", """SELECT ?S ?C WHERE { ?S ub:takesCourse ?C } ORDER BY ?S ?C LIMIT 5 OFFSET 50000""",
       "large OFFSET", "order-limit"),
    _s("UH14", """SELECT ?X ?Y WHERE { ?X ub:advisor ?Y OPTIONAL { ?Y ub:headOf ?D } FILTER(!BOUND(?D)) } ORDER BY ?X LIMIT 100""",
       "OPTIONAL + !BOUND + ORDER BY + LIMIT", "optional"),
    _s("UH15", """SELECT ?U (COUNT(?X) AS ?N) WHERE { ?X ub:doctoralDegreeFrom ?U OPTIONAL { ?X ub:researchInterest ?R } } GROUP BY ?U ORDER BY DESC(?N) ?U LIMIT 3""",
       "GROUP BY over an OPTIONAL, top 3", "group-by"),
    _s("UH16", f"""ASK {{ ?S ub:advisor <{D0}/FullProfessor1> ; ub:age ?A FILTER(?A > 30) }}""", "ASK with a filter"),
    # LIMIT without ORDER BY: any LIMIT rows are right, so each is counted (the engines pick other rows)
    _s("UL1", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT * WHERE { ?s ?p ?o } LIMIT 10 } }""",
       "the first 10 triples (counted)", "limit"),
    _s("UL2", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT ?X ?Y WHERE { ?X ub:advisor ?Y OPTIONAL { ?Y ub:headOf ?D } FILTER(!BOUND(?D)) } LIMIT 100 } }""",
       "OPTIONAL + !BOUND, LIMIT 100 (counted)", "limit"),
    _s("UL3", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT ?X ?N WHERE { ?X ub:takesCourse ?C . ?C ub:name ?N } LIMIT 50 } }""",
       "a 2-hop join, LIMIT 50 (counted)", "limit"),
    _s("UL4", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT DISTINCT ?C WHERE { ?X ub:takesCourse ?C } LIMIT 10 } }""",
       "DISTINCT + LIMIT (counted)", "limit"),
    _s("UL5", """SELECT (COUNT(*) AS ?K) WHERE { { SELECT ?X ?E WHERE { ?X a ub:UndergraduateStudent OPTIONAL { ?X ub:emailAddress ?E } } LIMIT 10 OFFSET 5 } }""",
       "type + OPTIONAL, LIMIT/OFFSET (counted)", "limit"),
)

NT = "application/n-triples"


def _is_graph(text: str) -> bool:
    for line in text.upper().splitlines():
        w = line.strip().split(" ", 1)[0]
        if w in ("CONSTRUCT", "DESCRIBE"):
            return True
        if w in ("SELECT", "ASK"):
            return False
    return False


class _GraphAware:
    """CONSTRUCT / DESCRIBE asked as N-Triples (compared as sorted lines); others as JSON."""

    def request(self, text: str) -> bytes:
        """One request; once more on a new connection when the server closed the idle
        keep-alive one (uvicorn closes it after 5 s, which one query of the other server can
        take under load: the sweep broke off with a BrokenPipeError)."""
        try:
            return self._request(text)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            self.conn = None
            return self._request(text)

    def _request(self, text: str) -> bytes:
        if not _is_graph(text):
            return super().request(text)
        conn = self._connect()
        try:
            conn.request("POST", self.query_path, body=text.encode(),
                         headers={"Content-Type": "application/sparql-query", "Accept": NT})
            resp = conn.getresponse()
            data = resp.read()
        except BaseException:
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            raise
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {data[:300]!r}")
        return b"NT" + data

    @staticmethod
    def rows(data: bytes) -> int:  # noqa: D102
        if data[:2] == b"NT":
            return data.count(b"\n")
        return JindouHttpPeer.rows(data)

    def row_strings(self, text: str) -> list[str]:  # noqa: D102
        if not _is_graph(text):
            return super().row_strings(text)
        lines = self.request(text)[2:].decode().splitlines()
        return sorted(ln.strip() for ln in lines if ln.strip())


class JindouSweepPeer(_GraphAware, JindouHttpPeer):
    pass


class OxigraphSweepPeer(_GraphAware, OxigraphServePeer):
    pass


def main(argv: list[str] | None = None) -> int:
    from bench import runner  # noqa: PLC0415

    ap = runner.build_parser()
    ap.prog = "python -m bench.unseen_sweep"
    ap.add_argument("--only", help="comma list of sweep query names")
    ap.add_argument("--set", choices=("main", "hunt", "hunt2", "hunt3", "optional", "all"), default="main",
                    help="the main sweep (default), the second (HUNT), the third (HUNT2), the fourth (HUNT3), "
                         "the held-out OPTIONAL set (bench/optional_sweep.py) or all")
    opts = ap.parse_args(argv)
    from bench.optional_sweep import OPTIONAL_SET  # noqa: PLC0415
    from bench.unseen_hunt2 import HUNT2  # noqa: PLC0415
    from bench.unseen_hunt3 import HUNT3  # noqa: PLC0415
    queries = {"main": list(UNSEEN), "hunt": list(HUNT), "hunt2": list(HUNT2), "hunt3": list(HUNT3),
               "optional": list(OPTIONAL_SET),
               "all": list(UNSEEN) + list(HUNT) + list(HUNT2) + list(HUNT3) + list(OPTIONAL_SET)}[opts.set]
    return sweep(queries, opts)


def sweep(queries: list, opts) -> int:
    """``queries`` (``--only`` of them) over HTTP, Jindou's server and ``oxigraph serve``
    alternating (``runner._alternate``), both loaded with the data of ``opts``."""
    from bench import runner  # noqa: PLC0415

    if opts.only:
        want = {n.strip().upper() for n in opts.only.split(",")}
        queries = [q for q in queries if q.name in want]
    data, triples, _ = runner.prepare_data(opts)
    j, o = JindouSweepPeer(), OxigraphSweepPeer()
    o.prepare()
    try:
        j.load(data)
        o.load(data)
        return runner._alternate(j, o, "jindou-http", "oxigraph-serve", triples, queries, opts, True)
    finally:
        j.close()
        o.close()


if __name__ == "__main__":
    sys.exit(main())
