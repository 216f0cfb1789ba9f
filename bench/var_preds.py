"""`python -m bench.var_preds`: one-entity lookups with a variable predicate over
HTTP, Jindou vs ``oxigraph serve`` (the machinery of ``python -m bench http-load``,
its options too, with these families in place of ``--extended``'s; ``--lane``: in
process, ``python -m bench.lane_profile``'s way): the point
lookup out and in, a predicate between an entity and a class, two hops from an
entity, both directions in one UNION, a FILTER on the lookup, DESCRIBE."""

from __future__ import annotations

import sys

from bench import http_load
from bench.http_load import NT, Family

VAR_PRED = (
    Family("point", "all triples of one entity", "SELECT ?p ?o WHERE {{ <{c}> ?p ?o }}", "AssociateProfessor"),
    Family("point_in", "all triples into one entity", "SELECT ?s ?p WHERE {{ ?s ?p <{c}> }}", "FullProfessor"),
    Family("between", "the predicates between an entity and a class",
           "SELECT ?p WHERE {{ <{c}> ?p ub:AssociateProfessor }}", "AssociateProfessor"),
    Family("two_hop", "two hops of any predicates from an entity",
           "SELECT ?p ?o ?q ?x WHERE {{ <{c}> ?p ?o . ?o ?q ?x }}", "GraduateStudent"),
    Family("both_ways", "an entity's triples out and in, one UNION",
           "SELECT ?p ?x WHERE {{ {{ <{c}> ?p ?x }} UNION {{ ?x ?p <{c}> }} }}", "FullProfessor"),
    Family("filtered", "an entity's IRI-valued triples",
           "SELECT ?p ?o WHERE {{ <{c}> ?p ?o FILTER(isIRI(?o)) }}", "AssociateProfessor"),
    Family("describe", "DESCRIBE of one entity (N-Triples)", "DESCRIBE <{c}>", "AssociateProfessor", NT),
)


#: ``--unseen``: other shapes of the same kinds (wave 2i, helper V: written after the work on
#: the families above, to check it holds beyond them)
UNSEEN = (
    Family("mid_const", "into and out of one entity, joined on it",
           "SELECT ?s ?p ?q ?x WHERE {{ ?s ?p <{c}> . <{c}> ?q ?x }}", "FullProfessor"),
    Family("in_then_out", "the entity's neighbours in, then their triples",
           "SELECT ?s ?p ?q WHERE {{ ?s ?p <{c}> . ?s ?q ?x }}", "AssociateProfessor"),
    Family("union_mixed", "a variable and a constant predicate, one UNION",
           "SELECT ?p ?x WHERE {{ {{ <{c}> ?p ?x }} UNION {{ ?x ub:advisor <{c}> }} }}", "FullProfessor"),
    Family("filter_lit", "an entity's literal-valued triples",
           "SELECT ?p ?o WHERE {{ <{c}> ?p ?o FILTER(isLiteral(?o)) }}", "GraduateStudent"),
    Family("filter_not_type", "an entity's triples but rdf:type and blank nodes",
           "SELECT ?p ?o WHERE {{ <{c}> ?p ?o FILTER(?p != <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> "
           "&& !isBlank(?o)) }}", "GraduateStudent"),
    Family("ask_hop", "ASK of two hops to a class", "ASK {{ <{c}> ?p ?o . ?o ?q ub:Course }}", "GraduateStudent"),
)


def main(argv: list[str] | None = None) -> int:
    """``--lane``: in process instead (``python -m bench.lane_profile``'s CPU per request
    of the HTTP fast lane, its options), else over HTTP (``bench http-load``'s).
    ``--unseen``: the UNSEEN families instead of VAR_PRED."""
    argv = list(sys.argv[1:] if argv is None else argv)
    http_load.EXTENDED = VAR_PRED
    if "--unseen" in argv:
        argv.remove("--unseen")
        http_load.EXTENDED = UNSEEN
    if "--lane" in argv:
        from bench import lane_profile  # noqa: PLC0415

        argv.remove("--lane")
        return lane_profile.main(["--extended", *argv])
    return http_load.main(["--extended", *argv])


if __name__ == "__main__":
    sys.exit(main())
