"""SPARQL algebra: the contract between the parser and the executor.

The parser (``engine.sparql.parser``) turns query text into these nodes,
following the translation of SPARQL 1.1 section 18.2 (group graph patterns ->
Join/LeftJoin/Filter/Union/Minus/Extend/Graph; aggregates -> Group; solution
modifiers -> OrderBy/Project/Distinct/Reduced/Slice). The executor
(``engine.exec.evaluate``) walks them. Nodes are frozen dataclasses with tuple
fields so plans can be hashed and cached.

RDF term constants are kept as term *keys* (see ``engine.terms``) with IRIs
already resolved against BASE/PREFIX, so the executor maps them to store ids
with one dictionary lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ---------------------------------------------------------------- terms in patterns


@dataclass(frozen=True, slots=True)
class Var:
    """A variable. Blank nodes in query patterns become variables whose name
    starts with ``_:`` (never projected by ``SELECT *``)."""

    name: str

    @property
    def is_blank(self) -> bool:
        return self.name.startswith("_:")


@dataclass(frozen=True, slots=True)
class Const:
    """An RDF term constant, as its canonical key (``<iri>``, ``"lex"^^<dt>`` ...)."""

    key: str


PatternTerm = Var | Const

# ---------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Call:
    """Operator or built-in call.

    ``op`` is one of
      logical:     '||' '&&' '!'
      comparison:  '=' '!=' '<' '>' '<=' '>='
      arithmetic:  '+' '-' '*' '/' 'NEG' (unary minus) 'POS' (unary plus)
      membership:  'IN' 'NOT IN'  (args[0] is the tested expression, args[1:] the list)
      built-ins:   the upper-case SPARQL keyword: 'STR' 'LANG' 'LANGMATCHES'
                   'DATATYPE' 'BOUND' 'IRI' (URI is mapped to IRI) 'BNODE' 'RAND' 'ABS' 'CEIL'
                   'FLOOR' 'ROUND' 'CONCAT' 'STRLEN' 'UCASE' 'LCASE' 'ENCODE_FOR_URI'
                   'CONTAINS' 'STRSTARTS' 'STRENDS' 'STRBEFORE' 'STRAFTER' 'YEAR'
                   'MONTH' 'DAY' 'HOURS' 'MINUTES' 'SECONDS' 'TIMEZONE' 'TZ' 'NOW'
                   'UUID' 'STRUUID' 'MD5' 'SHA1' 'SHA256' 'SHA384' 'SHA512'
                   'COALESCE' 'IF' 'STRLANG' 'STRDT' 'SAMETERM' 'ISIRI' (ISURI is
                   mapped to ISIRI) 'ISBLANK' 'ISLITERAL' 'ISNUMERIC' 'REGEX'
                   'SUBSTR' 'REPLACE'
    """

    op: str
    args: tuple[Expr, ...] = ()


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """A call by IRI: XSD casts (``xsd:integer(?x)``) and extension functions.
    ``iri`` is the full IRI without angle brackets."""

    iri: str
    args: tuple[Expr, ...] = ()
    distinct: bool = False


@dataclass(frozen=True, slots=True)
class Exists:
    """EXISTS / NOT EXISTS { pattern } (evaluated per solution, substituting
    the solution's bindings into ``pattern``)."""

    pattern: Pattern
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Aggregate:
    """An aggregate call. Only appears inside ``Group.aggregates``; in the
    expressions of Extend/Filter/OrderBy above a Group, each aggregate is
    replaced by the Var it is bound to.

    ``name``: 'COUNT' 'SUM' 'MIN' 'MAX' 'AVG' 'SAMPLE' 'GROUP_CONCAT'.
    ``arg`` is None for ``COUNT(*)``. ``separator`` is set for GROUP_CONCAT
    (default ' ')."""

    name: str
    arg: Expr | None
    distinct: bool = False
    separator: str | None = None


Expr = Var | Const | Call | FunctionCall | Exists

# ---------------------------------------------------------------- property paths


@dataclass(frozen=True, slots=True)
class PathLink:
    iri: str  # full IRI, no brackets


@dataclass(frozen=True, slots=True)
class PathInv:
    path: Path


@dataclass(frozen=True, slots=True)
class PathSeq:
    left: Path
    right: Path


@dataclass(frozen=True, slots=True)
class PathAlt:
    left: Path
    right: Path


@dataclass(frozen=True, slots=True)
class PathZeroOrMore:
    path: Path


@dataclass(frozen=True, slots=True)
class PathOneOrMore:
    path: Path


@dataclass(frozen=True, slots=True)
class PathZeroOrOne:
    path: Path


@dataclass(frozen=True, slots=True)
class PathNegated:
    """!(iri1|^iri2|...): ``forward`` and ``inverse`` hold full IRIs."""

    forward: tuple[str, ...] = ()
    inverse: tuple[str, ...] = ()


Path = PathLink | PathInv | PathSeq | PathAlt | PathZeroOrMore | PathOneOrMore | PathZeroOrOne | PathNegated

# ---------------------------------------------------------------- graph patterns


@dataclass(frozen=True, slots=True)
class TriplePattern:
    s: PatternTerm
    p: PatternTerm
    o: PatternTerm


@dataclass(frozen=True, slots=True)
class BGP:
    """Basic graph pattern (possibly empty: the unit table with one empty solution)."""

    triples: tuple[TriplePattern, ...] = ()


@dataclass(frozen=True, slots=True)
class PathPattern:
    """``s path o`` where the path is not a single IRI (simple links and
    sequences of links are put in the BGP by the parser, per 18.2.2.4)."""

    s: PatternTerm
    path: Path
    o: PatternTerm


@dataclass(frozen=True, slots=True)
class Join:
    left: Pattern
    right: Pattern


@dataclass(frozen=True, slots=True)
class LeftJoin:
    left: Pattern
    right: Pattern
    expr: Expr | None = None  # the OPTIONAL's FILTERs, conjoined


@dataclass(frozen=True, slots=True)
class Filter:
    expr: Expr
    input: Pattern


@dataclass(frozen=True, slots=True)
class Union:
    left: Pattern
    right: Pattern


@dataclass(frozen=True, slots=True)
class Minus:
    left: Pattern
    right: Pattern


@dataclass(frozen=True, slots=True)
class Graph:
    """GRAPH <g> { } / GRAPH ?g { }."""

    name: PatternTerm
    input: Pattern


@dataclass(frozen=True, slots=True)
class Extend:
    """BIND(expr AS var), also SELECT (expr AS var) and GROUP BY (expr AS var)."""

    input: Pattern
    var: Var
    expr: Expr


@dataclass(frozen=True, slots=True)
class Values:
    """Inline data. ``rows`` hold term keys, None for UNDEF."""

    vars: tuple[Var, ...]
    rows: tuple[tuple[str | None, ...], ...]


@dataclass(frozen=True, slots=True)
class Group:
    """GROUP BY. Output solutions bind the grouping variables (``by`` entries
    that are plain Vars, or the Var of ``(expr AS ?v)``) and the aggregate
    variables. ``by`` is empty for an implicit single group (aggregates with no
    GROUP BY: one group even over zero solutions). Non-variable grouping
    expressions without AS get a fresh hidden Var (name starting with ``.``)."""

    input: Pattern
    by: tuple[tuple[Expr, Var], ...]
    aggregates: tuple[tuple[Var, Aggregate], ...]


@dataclass(frozen=True, slots=True)
class OrderCondition:
    expr: Expr
    ascending: bool = True


@dataclass(frozen=True, slots=True)
class OrderBy:
    input: Pattern
    conditions: tuple[OrderCondition, ...]


@dataclass(frozen=True, slots=True)
class Project:
    input: Pattern
    vars: tuple[Var, ...]


@dataclass(frozen=True, slots=True)
class Distinct:
    input: Pattern


@dataclass(frozen=True, slots=True)
class Reduced:
    input: Pattern


@dataclass(frozen=True, slots=True)
class Slice:
    input: Pattern
    offset: int = 0
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class Service:
    """SERVICE [SILENT] <iri> { } -- evaluated by sending ``text`` (the group as
    written, with the query's ``prefixes`` and ``base``) to the endpoint
    (engine/exec/service.py), when the server allows federation."""

    endpoint: PatternTerm
    input: Pattern
    silent: bool = False
    text: str = ""  # the group graph pattern as written, braces included
    base: str | None = None
    prefixes: tuple[tuple[str, str], ...] = ()


Pattern = (
    BGP | PathPattern | Join | LeftJoin | Filter | Union | Minus | Graph | Extend | Values | Group
    | OrderBy | Project | Distinct | Reduced | Slice | Service
)

# ---------------------------------------------------------------- queries


@dataclass(frozen=True, slots=True)
class Dataset:
    """FROM / FROM NAMED (full IRIs). An empty Dataset means: the store's
    default graph and all its named graphs."""

    default: tuple[str, ...] = ()
    named: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query.

    ``form``: 'SELECT' | 'CONSTRUCT' | 'ASK' | 'DESCRIBE'.
    ``pattern``: the full algebra including solution modifiers; for SELECT the
    top node (below Distinct/Reduced/Slice) is a Project on ``vars``.
    ``vars``: projected variables (SELECT) in order; for SELECT * all
    in-scope non-blank variables in order of first appearance.
    ``template``: CONSTRUCT template (blank nodes in it are Const keys
    ``_:label``: the executor makes them fresh per solution).
    ``describe``: DESCRIBE targets (Var or Const).
    """

    form: str
    pattern: Pattern
    vars: tuple[Var, ...] = ()
    dataset: Dataset | None = None
    template: tuple[TriplePattern, ...] = ()
    describe: tuple[PatternTerm, ...] = ()
    base: str | None = None
    prefixes: tuple[tuple[str, str], ...] = ()


# ---------------------------------------------------------------- updates


@dataclass(frozen=True, slots=True)
class Quad:
    """A triple pattern with its graph: ``g`` None = default graph."""

    s: PatternTerm
    p: PatternTerm
    o: PatternTerm
    g: PatternTerm | None = None


@dataclass(frozen=True, slots=True)
class GraphTarget:
    """Target of CLEAR/DROP/CREATE/ADD/MOVE/COPY/LOAD INTO.
    ``kind``: 'DEFAULT' | 'NAMED' | 'ALL' | 'GRAPH' (then ``iri`` is set)."""

    kind: str
    iri: str | None = None


@dataclass(frozen=True, slots=True)
class InsertData:
    quads: tuple[Quad, ...]


@dataclass(frozen=True, slots=True)
class DeleteData:
    quads: tuple[Quad, ...]


@dataclass(frozen=True, slots=True)
class Modify:
    """DELETE/INSERT ... WHERE, DELETE WHERE (delete == the where quads) and
    WITH. ``using``/``using_named``: USING / USING NAMED IRIs; ``with_iri``:
    WITH graph (default graph for templates and WHERE when no USING)."""

    delete: tuple[Quad, ...]
    insert: tuple[Quad, ...]
    where: Pattern
    using: tuple[str, ...] = ()
    using_named: tuple[str, ...] = ()
    with_iri: str | None = None


@dataclass(frozen=True, slots=True)
class Load:
    source: str
    into: str | None = None
    silent: bool = False


@dataclass(frozen=True, slots=True)
class Clear:
    target: GraphTarget
    silent: bool = False


@dataclass(frozen=True, slots=True)
class Drop:
    target: GraphTarget
    silent: bool = False


@dataclass(frozen=True, slots=True)
class Create:
    iri: str
    silent: bool = False


@dataclass(frozen=True, slots=True)
class Transfer:
    """ADD / MOVE / COPY: ``op`` is 'ADD' | 'MOVE' | 'COPY'; source and target
    are GraphTarget of kind DEFAULT or GRAPH."""

    op: str
    source: GraphTarget
    target: GraphTarget
    silent: bool = False


UpdateOperation = InsertData | DeleteData | Modify | Load | Clear | Drop | Create | Transfer


@dataclass(frozen=True, slots=True)
class Update:
    operations: tuple[UpdateOperation, ...] = field(default_factory=tuple)
    base: str | None = None
    prefixes: tuple[tuple[str, str], ...] = ()
