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


def main(argv: list[str] | None = None) -> int:
    """``--lane``: in process instead (``python -m bench.lane_profile``'s CPU per request
    of the HTTP fast lane, its options), else over HTTP (``bench http-load``'s)."""
    http_load.EXTENDED = VAR_PRED
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--lane" in argv:
        from bench import lane_profile  # noqa: PLC0415

        argv.remove("--lane")
        return lane_profile.main(["--extended", *argv])
    return http_load.main(["--extended", *argv])


if __name__ == "__main__":
    sys.exit(main())
