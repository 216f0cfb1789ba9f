"""SPARQL 1.1 query/update parser: recursive descent over the tokenizer's
output, translating straight into ``engine.sparql.algebra`` (SPARQL 1.1 §18.2).

Public API::

    parse_query(text, base=None) -> algebra.Query
    parse_update(text, base=None) -> algebra.Update

Every syntax or scoping error raises ``QuerySyntaxError`` with the 1-based
line and column of the offending token.
"""

from __future__ import annotations

import re

from engine import terms
from engine.errors import QuerySyntaxError
from engine.iri import resolve_iri
from engine.sparql import algebra as A
from engine.sparql.tokenizer import decode_codepoints, line_col, tokenize

__all__ = ["parse_query", "parse_update", "resolve_iri"]

_RDF_FIRST = A.Const("<" + terms.RDF + "first>")
_RDF_REST = A.Const("<" + terms.RDF + "rest>")
_RDF_NIL = A.Const("<" + terms.RDF + "nil>")
_RDF_TYPE = A.Const(terms.RDF_TYPE_KEY)
_TRUE = A.Const(terms.TRUE_KEY)
_FALSE = A.Const(terms.FALSE_KEY)
_EMPTY = A.BGP(())

_NUM_DT = {"integer": terms.XSD_INTEGER, "decimal": terms.XSD_DECIMAL, "double": terms.XSD_DOUBLE}
_TERM_START = frozenset(
    ["var", "iriref", "pname", "bnode", "string", "lstring", "integer", "decimal", "double",
     "TRUE", "FALSE", "(", "[", "+", "-"]
)
_VERB_START = frozenset(["var", "iriref", "pname", "a"])
_PATH_VERB_START = frozenset(["var", "iriref", "pname", "a", "^", "!", "("])
_PATH_OPS = frozenset(["/", "|", "*", "+", "?"])

# name -> (min args, max args or None); BOUND, EXISTS, NOT and aggregates are special.
_BUILTINS: dict[str, tuple[int, int | None]] = {
    "STR": (1, 1), "LANG": (1, 1), "LANGMATCHES": (2, 2), "DATATYPE": (1, 1), "IRI": (1, 1),
    "URI": (1, 1), "BNODE": (0, 1), "RAND": (0, 0), "ABS": (1, 1), "CEIL": (1, 1), "FLOOR": (1, 1),
    "ROUND": (1, 1), "CONCAT": (0, None), "STRLEN": (1, 1), "UCASE": (1, 1), "LCASE": (1, 1),
    "ENCODE_FOR_URI": (1, 1), "CONTAINS": (2, 2), "STRSTARTS": (2, 2), "STRENDS": (2, 2),
    "STRBEFORE": (2, 2), "STRAFTER": (2, 2), "YEAR": (1, 1), "MONTH": (1, 1), "DAY": (1, 1),
    "HOURS": (1, 1), "MINUTES": (1, 1), "SECONDS": (1, 1), "TIMEZONE": (1, 1), "TZ": (1, 1),
    "NOW": (0, 0), "UUID": (0, 0), "STRUUID": (0, 0), "MD5": (1, 1), "SHA1": (1, 1),
    "SHA256": (1, 1), "SHA384": (1, 1), "SHA512": (1, 1), "COALESCE": (0, None), "IF": (3, 3),
    "STRLANG": (2, 2), "STRDT": (2, 2), "SAMETERM": (2, 2), "ISIRI": (1, 1), "ISURI": (1, 1),
    "ISBLANK": (1, 1), "ISLITERAL": (1, 1), "ISNUMERIC": (1, 1), "REGEX": (2, 3),
    "SUBSTR": (2, 3), "REPLACE": (3, 4),
}
_OP_RENAME = {"URI": "IRI", "ISURI": "ISIRI"}
_AGGREGATES = frozenset(["COUNT", "SUM", "MIN", "MAX", "AVG", "SAMPLE", "GROUP_CONCAT"])
_BUILTIN_START = frozenset(_BUILTINS) | {"BOUND", "EXISTS", "NOT"}
_RELOPS = frozenset(["=", "!=", "<", ">", "<=", ">="])
_PN_ESC_RE = re.compile(r"\\(.)")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_ABSOLUTE_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")  # an IRI with a scheme needs no resolution



# ---------------------------------------------------------------- algebra helpers


def _join(g: A.Pattern | None, x: A.Pattern) -> A.Pattern:
    if g is None or g == _EMPTY:
        return x
    if x == _EMPTY:
        return g
    return A.Join(g, x)


def _conj(exprs: list) -> A.Expr | None:
    if not exprs:
        return None
    e = exprs[0]
    for x in exprs[1:]:
        e = A.Call("&&", (e, x))
    return e


def _scope(p: A.Pattern, out: dict) -> None:
    """Add the in-scope variables of ``p`` (SPARQL 18.2.1) to ``out`` in order."""
    t = type(p)
    if t is A.BGP:
        for tp in p.triples:
            for x in (tp.s, tp.p, tp.o):
                if type(x) is A.Var:
                    out[x] = None
    elif t is A.PathPattern:
        if type(p.s) is A.Var:
            out[p.s] = None
        if type(p.o) is A.Var:
            out[p.o] = None
    elif t in (A.Join, A.LeftJoin, A.Union):
        _scope(p.left, out)
        _scope(p.right, out)
    elif t is A.Minus:
        _scope(p.left, out)
    elif t is A.Graph or t is A.Service:
        name = p.name if t is A.Graph else p.endpoint
        if type(name) is A.Var:
            out[name] = None
        _scope(p.input, out)
    elif t is A.Extend:
        _scope(p.input, out)
        out[p.var] = None
    elif t is A.Values:
        for v in p.vars:
            out[v] = None
    elif t is A.Group:
        for _, v in p.by:
            out[v] = None
        for v, _ in p.aggregates:
            out[v] = None
    elif t is A.Project:
        for v in p.vars:
            out[v] = None
    else:  # Filter OrderBy Distinct Reduced Slice
        _scope(p.input, out)


def scope_vars(p: A.Pattern) -> list[A.Var]:
    out: dict = {}
    _scope(p, out)
    return list(out)


def _visible(vs) -> tuple[A.Var, ...]:
    return tuple(v for v in vs if not v.name.startswith(("_:", ".")))


def _has_agg(e) -> bool:
    t = type(e)
    if t is A.Aggregate:
        return True
    if t is A.Call or t is A.FunctionCall:
        return any(_has_agg(a) for a in e.args)
    return False


def _expr_vars(e, out: set) -> None:
    t = type(e)
    if t is A.Var:
        out.add(e)
    elif t is A.Call or t is A.FunctionCall:
        for a in e.args:
            _expr_vars(a, out)


# ---------------------------------------------------------------- the parser


_CHECK_EVERY = 4096  # tokens between deadline checks


class _Parser:
    def __init__(self, text: str, base: str | None, check=None):
        try:
            text = decode_codepoints(text)
        except ValueError as e:
            raise QuerySyntaxError(str(e), 1, 1) from None
        if check is not None:
            check()
        self.text = text
        self.toks = tokenize(text, check)
        self.i = 0
        # deadline check (raises QueryTimeout) when self.i passes next_check
        self.check = check
        self.next_check = _CHECK_EVERY if check is not None else len(self.toks) + 1
        self.base = base
        self.prefixes: dict[str, str] = {}
        self.prefix_order: dict[str, str] = {}
        self.user_labels: set[str] = set()
        if "_:" in text:
            self.user_labels = {t[1][2:] for t in self.toks if t[0] == "bnode"}
        self.fresh_n = 0
        self.bnode_const = False  # templates/data: blank nodes are Const('_:label')
        self.bnode_forbidden = False  # DELETE DATA / DELETE WHERE / DELETE templates
        self.vars_forbidden = False  # INSERT DATA / DELETE DATA
        self.paths_ok = True
        self.block = 0  # current basic graph pattern id (blank node label scoping)
        self.block_counter = 0
        self.data_mode = False  # INSERT DATA / DELETE DATA
        self.label_block: dict[str, int] = {}
        self.op_index = 0  # update operation index (blank node labels in data/templates)
        self.label_op: dict[str, int] = {}
        self.agg_ok = False
        self.in_agg = False
        self.hidden_n = 0

    # ------------------------------------------------------------ token helpers

    def error(self, msg: str, tok=None):
        if tok is None:
            tok = self.toks[self.i]
        line, col = line_col(self.text, tok[2])
        return QuerySyntaxError(msg, line, col)

    def unexpected(self, expected: str):
        tok = self.toks[self.i]
        found = f"'{tok[1]}'" if tok[0] != "EOF" else "end of input"
        return self.error(f"expected {expected} but found {found}", tok)

    def expect(self, kind: str):
        tok = self.toks[self.i]
        if tok[0] != kind:
            raise self.unexpected(f"'{kind}'" if not kind.islower() else kind)
        self.i += 1
        return tok

    def count_literal(self) -> int:
        """The integer of LIMIT/OFFSET; absurdly long ones are a syntax error,
        not a Python conversion error."""
        tok = self.expect("integer")
        if len(tok[1]) > 18:
            raise self.error(f"number too large: {tok[1][:20]}...", tok)
        return int(tok[1])

    def tick(self) -> None:
        """Check the deadline every _CHECK_EVERY tokens (called per term and expression)."""
        if self.i >= self.next_check:
            self.next_check = self.i + _CHECK_EVERY
            self.check()

    def accept(self, kind: str) -> bool:
        if self.toks[self.i][0] == kind:
            self.i += 1
            return True
        return False

    def hidden(self, prefix: str) -> A.Var:
        self.hidden_n += 1
        return A.Var(f".{prefix}{self.hidden_n - 1}")

    def fresh_label(self) -> str:
        while True:
            n = self.fresh_n
            self.fresh_n += 1
            label = f"b{n}"
            if label not in self.user_labels:
                return label

    def fresh_bnode(self, tok=None) -> A.Var | A.Const:
        if self.bnode_forbidden:
            raise self.error("blank nodes are not allowed here", tok)
        label = "_:" + self.fresh_label()
        return A.Const(label) if self.bnode_const else A.Var(label)

    # ------------------------------------------------------------ prologue and IRIs

    def prologue(self) -> None:
        toks = self.toks
        while True:
            k = toks[self.i][0]
            if k == "BASE":
                self.i += 1
                tok = self.expect("iriref")
                self.base = resolve_iri(self.base, tok[1][1:-1])
            elif k == "PREFIX":
                self.i += 1
                tok = self.expect("pname")
                prefix, _, local = tok[1].partition(":")
                if local:
                    raise self.error(f"expected a prefix name ending in ':' but found '{tok[1]}'", tok)
                iri = self.expect("iriref")[1][1:-1]
                iri = resolve_iri(self.base, iri)
                self.prefixes[prefix] = iri
                self.prefix_order[prefix] = iri
            else:
                return

    def iri(self) -> str:
        if self.i >= self.next_check:
            self.tick()
        tok = self.toks[self.i]
        k = tok[0]
        if k == "iriref":
            self.i += 1
            if self.base is None:
                return tok[1][1:-1]
            return resolve_iri(self.base, tok[1][1:-1])
        if k == "pname":
            self.i += 1
            return self.expand(tok)
        raise self.unexpected("an IRI")

    def expand(self, tok) -> str:
        prefix, _, local = tok[1].partition(":")
        ns = self.prefixes.get(prefix)
        if ns is None:
            raise self.error(f"undefined prefix '{prefix}:'", tok)
        if "\\" in local:
            local = _PN_ESC_RE.sub(r"\1", local)
        return ns + local

    # ------------------------------------------------------------ terms

    def string(self) -> str:
        tok = self.toks[self.i]
        k = tok[0]
        if k == "string":
            raw = tok[1][1:-1]
        elif k == "lstring":
            raw = tok[1][3:-3]
        else:
            raise self.unexpected("a string")
        self.i += 1
        if "\\" not in raw:
            return raw
        try:
            value = terms.unescape_string(raw)
        except ValueError as e:
            raise self.error(str(e), tok) from None
        if _SURROGATE_RE.search(value):
            raise self.error("invalid codepoint escape (surrogate)", tok)
        return value

    def literal_after_string(self, value: str) -> A.Const:
        tok = self.toks[self.i]
        if tok[0] == "lang":
            self.i += 1
            return A.Const(terms.literal_key(value, lang=tok[1][1:]))
        if tok[0] == "^^":
            self.i += 1
            return A.Const(terms.literal_key(value, self.iri()))
        return A.Const(terms.literal_key(value))

    def signed_number(self) -> A.Const | None:
        """A '+'/'-' directly followed by a number: a signed numeric literal."""
        toks = self.toks
        sign = toks[self.i]
        num = toks[self.i + 1]
        if num[0] in _NUM_DT and num[2] == sign[2] + 1:
            self.i += 2
            return A.Const(terms.literal_key(sign[1] + num[1], _NUM_DT[num[0]]))
        return None

    def label_term(self, tok) -> A.Var | A.Const:
        if self.bnode_forbidden:
            raise self.error("blank nodes are not allowed here", tok)
        label = tok[1]
        if self.bnode_const:
            if self.data_mode:
                prev = self.label_op.setdefault(label, self.op_index)
                if prev != self.op_index:
                    raise self.error(f"blank node label {label} used in two INSERT DATA operations", tok)
            return A.Const(label)
        prev = self.label_block.setdefault(label, self.block)
        if prev != self.block:
            raise self.error(f"blank node label {label} used in two basic graph patterns", tok)
        return A.Var(label)

    def var_or_term(self) -> A.Var | A.Const:
        if self.i >= self.next_check:
            self.tick()
        toks = self.toks
        tok = toks[self.i]
        k = tok[0]
        if k == "var":
            if self.vars_forbidden:
                raise self.error("variables are not allowed in INSERT DATA / DELETE DATA", tok)
            self.i += 1
            return A.Var(tok[1][1:])
        if k == "iriref" or k == "pname":
            return A.Const("<" + self.iri() + ">")
        if k == "string" or k == "lstring":
            return self.literal_after_string(self.string())
        if k in _NUM_DT:
            self.i += 1
            return A.Const(terms.literal_key(tok[1], _NUM_DT[k]))
        if k == "bnode":
            self.i += 1
            return self.label_term(tok)
        if k == "TRUE":
            self.i += 1
            return _TRUE
        if k == "FALSE":
            self.i += 1
            return _FALSE
        if k == "+" or k == "-":
            c = self.signed_number()
            if c is not None:
                return c
        elif k == "(" and toks[self.i + 1][0] == ")":
            self.i += 2
            return _RDF_NIL
        elif k == "[" and toks[self.i + 1][0] == "]":
            self.i += 2
            return self.fresh_bnode(tok)
        raise self.unexpected("a variable or RDF term")

    def var_or_iri(self) -> A.Var | A.Const:
        tok = self.toks[self.i]
        if tok[0] == "var":
            if self.vars_forbidden:
                raise self.error("variables are not allowed in INSERT DATA / DELETE DATA", tok)
            self.i += 1
            return A.Var(tok[1][1:])
        return A.Const("<" + self.iri() + ">")

    def var(self) -> A.Var:
        tok = self.toks[self.i]
        if tok[0] != "var":
            raise self.unexpected("a variable")
        self.i += 1
        return A.Var(tok[1][1:])

    # ------------------------------------------------------------ triples

    def triples_block(self, out: list) -> None:
        """TriplesBlock / TriplesTemplate: triples separated by '.'."""
        toks = self.toks
        self.triples_same_subject(out)
        while toks[self.i][0] == ".":
            self.i += 1
            if toks[self.i][0] in _TERM_START:
                self.triples_same_subject(out)
            else:
                break

    def triples_same_subject(self, out: list) -> None:
        toks = self.toks
        k = toks[self.i][0]
        if (k == "(" and toks[self.i + 1][0] != ")") or (k == "[" and toks[self.i + 1][0] != "]"):
            s = self.triples_node(out)
            if toks[self.i][0] in (_PATH_VERB_START if self.paths_ok else _VERB_START):
                self.property_list(s, out)
        else:
            s = self.var_or_term()
            self.property_list(s, out)

    def property_list(self, s, out: list) -> None:
        toks = self.toks
        starts = _PATH_VERB_START if self.paths_ok else _VERB_START
        verb = self.verb()
        self.object_list(s, verb, out)
        while toks[self.i][0] == ";":
            self.i += 1
            if toks[self.i][0] in starts:
                verb = self.verb()
                self.object_list(s, verb, out)

    def verb(self):
        toks = self.toks
        tok = toks[self.i]
        k = tok[0]
        if k == "var":
            if self.vars_forbidden:
                raise self.error("variables are not allowed in INSERT DATA / DELETE DATA", tok)
            self.i += 1
            return A.Var(tok[1][1:])
        if not self.paths_ok or toks[self.i + 1][0] not in _PATH_OPS:
            if k == "a":
                self.i += 1
                return _RDF_TYPE
            if k == "iriref" or k == "pname":
                return A.Const("<" + self.iri() + ">")
            if not self.paths_ok:
                raise self.unexpected("a predicate")
        path = self.path()
        if type(path) is A.PathLink:
            return A.Const("<" + path.iri + ">")
        return path

    def object_list(self, s, verb, out: list) -> None:
        toks = self.toks
        while True:
            k = toks[self.i][0]
            if (k == "(" and toks[self.i + 1][0] != ")") or (k == "[" and toks[self.i + 1][0] != "]"):
                o = self.triples_node(out)
            else:
                o = self.var_or_term()
            t = type(verb)
            if t is A.Const or t is A.Var:
                out.append(A.TriplePattern(s, verb, o))
            else:
                self.expand_path(s, verb, o, out)
            if toks[self.i][0] == ",":
                self.i += 1
            else:
                return

    def triples_node(self, out: list):
        toks = self.toks
        tok = toks[self.i]
        self.i += 1
        if tok[0] == "[":
            b = self.fresh_bnode(tok)
            self.property_list(b, out)
            self.expect("]")
            return b
        # collection
        items = []
        while toks[self.i][0] != ")":
            k = toks[self.i][0]
            if (k == "(" and toks[self.i + 1][0] != ")") or (k == "[" and toks[self.i + 1][0] != "]"):
                items.append(self.triples_node(out))
            elif k in _TERM_START:
                items.append(self.var_or_term())
            else:
                raise self.unexpected("')' or an RDF term")
        self.i += 1
        nodes = [self.fresh_bnode(tok) for _ in items]
        for n, (node, item) in enumerate(zip(nodes, items, strict=True)):
            out.append(A.TriplePattern(node, _RDF_FIRST, item))
            out.append(A.TriplePattern(node, _RDF_REST, nodes[n + 1] if n + 1 < len(nodes) else _RDF_NIL))
        return nodes[0]

    def expand_path(self, s, path, o, out: list) -> None:
        t = type(path)
        if t is A.PathLink:
            out.append(A.TriplePattern(s, A.Const("<" + path.iri + ">"), o))
        elif t is A.PathInv:
            self.expand_path(o, path.path, s, out)
        elif t is A.PathSeq:
            v = A.Var("_:" + self.fresh_label())
            self.expand_path(s, path.left, v, out)
            self.expand_path(v, path.right, o, out)
        else:
            out.append(A.PathPattern(s, path, o))

    # ------------------------------------------------------------ property paths

    def path(self):
        p = self.path_seq()
        while self.toks[self.i][0] == "|":
            self.i += 1
            p = A.PathAlt(p, self.path_seq())
        return p

    def path_seq(self):
        p = self.path_elt_or_inverse()
        while self.toks[self.i][0] == "/":
            self.i += 1
            p = A.PathSeq(p, self.path_elt_or_inverse())
        return p

    def path_elt_or_inverse(self):
        if self.toks[self.i][0] == "^":
            self.i += 1
            return A.PathInv(self.path_elt())
        return self.path_elt()

    def path_elt(self):
        toks = self.toks
        tok = toks[self.i]
        k = tok[0]
        if k == "a":
            self.i += 1
            p = A.PathLink(terms.RDF_TYPE)
        elif k == "iriref" or k == "pname":
            p = A.PathLink(self.iri())
        elif k == "!":
            self.i += 1
            p = self.path_negated()
        elif k == "(":
            self.i += 1
            p = self.path()
            self.expect(")")
        else:
            raise self.unexpected("a property path")
        k = toks[self.i][0]
        if k == "*":
            self.i += 1
            return A.PathZeroOrMore(p)
        if k == "+":
            self.i += 1
            return A.PathOneOrMore(p)
        if k == "?":
            self.i += 1
            return A.PathZeroOrOne(p)
        return p

    def path_negated(self):
        fwd: list[str] = []
        inv: list[str] = []

        def one():
            if self.accept("^"):
                if self.accept("a"):
                    inv.append(terms.RDF_TYPE)
                else:
                    inv.append(self.iri())
            elif self.accept("a"):
                fwd.append(terms.RDF_TYPE)
            else:
                fwd.append(self.iri())

        if self.accept("("):
            if not self.accept(")"):
                one()
                while self.accept("|"):
                    one()
                self.expect(")")
        else:
            one()
        return A.PathNegated(tuple(fwd), tuple(inv))

    # ------------------------------------------------------------ group graph patterns

    def group_graph_pattern(self) -> A.Pattern:
        g, f = self.group_parts()
        return g if f is None else A.Filter(f, g)

    def group_parts(self) -> tuple[A.Pattern, A.Expr | None]:
        """'{' ... '}' translated: (pattern, conjoined top-level filters)."""
        toks = self.toks
        self.expect("{")
        if toks[self.i][0] == "SELECT":
            p = self.select_query(sub=True)[0]
            self.expect("}")
            return p, None
        g: A.Pattern | None = None
        filters: list = []
        pending: list = []
        triples_ok = True
        # Triples blocks separated only by FILTERs form one BGP (filters are
        # lifted out), so they share blank node labels; any other element
        # starts a new BGP.
        self.block_counter += 1
        block = self.block_counter
        while True:
            k = toks[self.i][0]
            if triples_ok and k in _TERM_START:
                self.block = block
                self.triples_block(pending)
                triples_ok = False
                continue
            triples_ok = True
            if k != "FILTER" and k != "}":
                self.block_counter += 1
                block = self.block_counter
            if k == "}":
                break
            if pending and k != "FILTER":
                g = _join(g, self.translate_block(pending))
                pending = []
            if k == "FILTER":
                self.i += 1
                filters.append(self.constraint())
            elif k == "OPTIONAL":
                self.i += 1
                inner, f = self.group_parts()
                g = A.LeftJoin(g if g is not None else _EMPTY, inner, f)
            elif k == "MINUS":
                self.i += 1
                g = A.Minus(g if g is not None else _EMPTY, self.group_graph_pattern())
            elif k == "{":
                p = self.group_graph_pattern()
                while self.accept("UNION"):
                    p = A.Union(p, self.group_graph_pattern())
                g = _join(g, p)
            elif k == "GRAPH":
                self.i += 1
                name = self.var_or_iri()
                g = _join(g, A.Graph(name, self.group_graph_pattern()))
            elif k == "SERVICE":
                self.i += 1
                silent = self.accept("SILENT")
                name = self.var_or_iri()
                start = toks[self.i][2]
                inner = self.group_graph_pattern()
                close = toks[self.i - 1]
                g = _join(g, A.Service(name, inner, silent, self.text[start:close[2] + len(close[1])], self.base,
                                       tuple(self.prefixes.items())))
            elif k == "BIND":
                self.i += 1
                self.expect("(")
                e = self.expression()
                self.expect("AS")
                vtok = toks[self.i]
                v = self.var()
                self.expect(")")
                cur = g if g is not None else _EMPTY
                if v in scope_vars(cur):
                    raise self.error(f"BIND: variable ?{v.name} is already in scope", vtok)
                g = A.Extend(cur, v, e)
            elif k == "VALUES":
                self.i += 1
                g = _join(g, self.data_block())
            else:
                raise self.unexpected("'}'")
            if toks[self.i][0] == ".":
                self.i += 1
        self.i += 1
        if pending:
            g = _join(g, self.translate_block(pending))
        if g is None:
            g = _EMPTY
        return g, _conj(filters)

    def translate_block(self, items: list) -> A.Pattern:
        for x in items:
            if type(x) is not A.TriplePattern:
                break
        else:
            return A.BGP(tuple(items))
        g: A.Pattern | None = None
        cur: list = []
        for x in items:
            if type(x) is A.TriplePattern:
                cur.append(x)
            else:
                if cur:
                    g = _join(g, A.BGP(tuple(cur)))
                    cur = []
                g = _join(g, x)
        if cur:
            g = _join(g, A.BGP(tuple(cur)))
        return g

    def data_block(self) -> A.Values:
        toks = self.toks
        if toks[self.i][0] == "var":
            vs = (self.var(),)
            self.expect("{")
            rows = []
            while not self.accept("}"):
                rows.append((self.data_value(),))
            return A.Values(vs, tuple(rows))
        self.expect("(")
        vs_l = []
        while not self.accept(")"):
            vs_l.append(self.var())
        vs = tuple(vs_l)
        self.expect("{")
        rows = []
        data_value = self.data_value
        nv = len(vs)
        while not self.accept("}"):
            tok = self.expect("(")
            i = self.i
            row = []
            # plain IRIs and strings inline (big VALUES blocks), the rest via data_value
            while True:
                t = toks[i]
                k = t[0]
                if k == ")":
                    break
                if k == "iriref" and (self.base is None or _ABSOLUTE_RE.match(t[1], 1)) or (
                        k == "string" and t[1][0] == '"' and "\\" not in t[1]
                        and toks[i + 1][0] != "lang" and toks[i + 1][0] != "^^"):
                    row.append(t[1])
                    i += 1
                else:
                    self.i = i
                    row.append(data_value())
                    i = self.i
            self.i = i + 1
            if len(row) != nv:
                raise self.error(f"VALUES row has {len(row)} values for {nv} variables", tok)
            rows.append(tuple(row))
            if self.i >= self.next_check:
                self.tick()
        return A.Values(vs, tuple(rows))

    def data_value(self) -> str | None:
        if self.i >= self.next_check:
            self.tick()
        toks = self.toks
        tok = toks[self.i]
        k = tok[0]
        # fast paths for big VALUES blocks: an absolute IRI or a plain
        # double-quoted string without escapes is already its term key
        if k == "iriref" and (self.base is None or _ABSOLUTE_RE.match(tok[1], 1)):
            self.i += 1
            return tok[1]
        if k == "string" and tok[1][0] == '"' and "\\" not in tok[1] and toks[self.i + 1][0] not in ("lang", "^^"):
            self.i += 1
            return tok[1]
        if k == "UNDEF":
            self.i += 1
            return None
        if k in ("iriref", "pname", "string", "lstring", "integer", "decimal", "double", "TRUE", "FALSE"):
            return self.var_or_term().key
        if k in ("+", "-"):
            c = self.signed_number()
            if c is not None:
                return c.key
        raise self.unexpected("a data value or UNDEF")

    # ------------------------------------------------------------ expressions

    def constraint(self):
        k = self.toks[self.i][0]
        if k == "(":
            return self.bracketted()
        if k in _BUILTIN_START or k in _AGGREGATES:
            return self.builtin_call()
        if k == "iriref" or k == "pname":
            return self.iri_or_function(require_call=True)
        raise self.unexpected("'(' or a function call")

    def bracketted(self):
        self.expect("(")
        e = self.expression()
        self.expect(")")
        return e

    def expression(self):
        e = self.and_expr()
        while self.toks[self.i][0] == "||":
            self.i += 1
            e = A.Call("||", (e, self.and_expr()))
        return e

    def and_expr(self):
        e = self.rel_expr()
        while self.toks[self.i][0] == "&&":
            self.i += 1
            e = A.Call("&&", (e, self.rel_expr()))
        return e

    def rel_expr(self):
        e = self.add_expr()
        toks = self.toks
        k = toks[self.i][0]
        if k in _RELOPS:
            self.i += 1
            return A.Call(k, (e, self.add_expr()))
        if k == "IN":
            self.i += 1
            return A.Call("IN", (e, *self.expression_list()))
        if k == "NOT" and toks[self.i + 1][0] == "IN":
            self.i += 2
            return A.Call("NOT IN", (e, *self.expression_list()))
        return e

    def expression_list(self) -> list:
        self.expect("(")
        out = []
        if self.accept(")"):
            return out
        out.append(self.expression())
        while self.accept(","):
            out.append(self.expression())
        self.expect(")")
        return out

    def add_expr(self):
        e = self.mul_expr()
        toks = self.toks
        while True:
            k = toks[self.i][0]
            if k == "+" or k == "-":
                self.i += 1
                e = A.Call(k, (e, self.mul_expr()))
            else:
                return e

    def mul_expr(self):
        e = self.unary()
        toks = self.toks
        while True:
            k = toks[self.i][0]
            if k == "*" or k == "/":
                self.i += 1
                e = A.Call(k, (e, self.unary()))
            else:
                return e

    def unary(self):
        k = self.toks[self.i][0]
        if k == "!":
            self.i += 1
            return A.Call("!", (self.primary(),))
        if k == "+" or k == "-":
            c = self.signed_number()
            if c is not None:
                return c
            self.i += 1
            return A.Call("POS" if k == "+" else "NEG", (self.primary(),))
        return self.primary()

    def primary(self):
        if self.i >= self.next_check:
            self.tick()
        toks = self.toks
        tok = toks[self.i]
        k = tok[0]
        if k == "var":
            self.i += 1
            return A.Var(tok[1][1:])
        if k == "(":
            return self.bracketted()
        if k == "iriref" or k == "pname":
            return self.iri_or_function(require_call=False)
        if k in ("string", "lstring", "integer", "decimal", "double", "TRUE", "FALSE"):
            return self.var_or_term()
        if k in _BUILTIN_START or k in _AGGREGATES:
            return self.builtin_call()
        raise self.unexpected("an expression")

    def iri_or_function(self, require_call: bool):
        iri = self.iri()
        toks = self.toks
        if toks[self.i][0] != "(":
            if require_call:
                raise self.unexpected("'('")
            return A.Const("<" + iri + ">")
        self.i += 1
        if self.accept(")"):
            return A.FunctionCall(iri, ())
        distinct = self.accept("DISTINCT")
        args = [self.expression()]
        while self.accept(","):
            args.append(self.expression())
        self.expect(")")
        return A.FunctionCall(iri, tuple(args), distinct)

    def builtin_call(self):
        toks = self.toks
        tok = toks[self.i]
        k = tok[0]
        self.i += 1
        if k in _AGGREGATES:
            return self.aggregate(tok)
        if k == "BOUND":
            self.expect("(")
            v = self.var()
            self.expect(")")
            return A.Call("BOUND", (v,))
        if k == "NOT":
            self.expect("EXISTS")
            return A.Exists(self.exists_pattern(), True)
        if k == "EXISTS":
            return A.Exists(self.exists_pattern(), False)
        lo, hi = _BUILTINS[k]
        args = self.expression_list()
        if len(args) < lo or (hi is not None and len(args) > hi):
            raise self.error(f"wrong number of arguments for {k}", tok)
        return A.Call(_OP_RENAME.get(k, k), tuple(args))

    def exists_pattern(self):
        saved = self.agg_ok
        self.agg_ok = False
        try:
            return self.group_graph_pattern()
        finally:
            self.agg_ok = saved

    def aggregate(self, tok):
        name = tok[0]
        if not self.agg_ok:
            raise self.error(f"aggregate {name} is not allowed here", tok)
        if self.in_agg:
            raise self.error("aggregates may not be nested", tok)
        self.expect("(")
        distinct = self.accept("DISTINCT")
        self.in_agg = True
        try:
            if name == "COUNT" and self.accept("*"):
                arg = None
            else:
                arg = self.expression()
            sep = None
            if name == "GROUP_CONCAT":
                sep = " "
                if self.accept(";"):
                    self.expect("SEPARATOR")
                    self.expect("=")
                    sep = self.string()
        finally:
            self.in_agg = False
        self.expect(")")
        return A.Aggregate(name, arg, distinct, sep)

    # ------------------------------------------------------------ queries

    def parse_query(self) -> A.Query:
        self.prologue()
        k = self.toks[self.i][0]
        template: tuple = ()
        describe: tuple = ()
        vars_: tuple = ()
        if k == "SELECT":
            pattern, vars_, dataset = self.select_query(sub=False)
        elif k == "ASK":
            self.i += 1
            dataset = self.dataset_clauses()
            self.accept("WHERE")
            where = self.group_graph_pattern()
            pattern = self.finish(None, where, self.solution_modifier(), self.values_clause())[0]
        elif k == "CONSTRUCT":
            self.i += 1
            if self.toks[self.i][0] == "{":
                template = self.construct_template()
                dataset = self.dataset_clauses()
                self.accept("WHERE")
                where = self.group_graph_pattern()
            else:
                dataset = self.dataset_clauses()
                self.expect("WHERE")
                self.expect("{")
                out: list = []
                self.paths_ok = False
                self.block_counter += 1
                self.block = self.block_counter
                if self.toks[self.i][0] != "}":
                    self.triples_block(out)
                self.paths_ok = True
                self.expect("}")
                where = A.BGP(tuple(out))
                template = tuple(
                    A.TriplePattern(*(A.Const(x.name) if type(x) is A.Var and x.is_blank else x
                                      for x in (t.s, t.p, t.o)))
                    for t in out
                )
            pattern = self.finish(None, where, self.solution_modifier(), self.values_clause())[0]
        elif k == "DESCRIBE":
            self.i += 1
            star = False
            targets = []
            if self.accept("*"):
                star = True
            else:
                while self.toks[self.i][0] in ("var", "iriref", "pname"):
                    targets.append(self.var_or_iri())
                if not targets:
                    raise self.unexpected("'*', a variable or an IRI")
            dataset = self.dataset_clauses()
            if self.toks[self.i][0] in ("WHERE", "{"):
                self.accept("WHERE")
                where = self.group_graph_pattern()
            else:
                where = _EMPTY
            pattern = self.finish(None, where, self.solution_modifier(), self.values_clause())[0]
            describe = _visible(scope_vars(pattern)) if star else tuple(targets)
        else:
            raise self.unexpected("SELECT, CONSTRUCT, DESCRIBE or ASK")
        if self.toks[self.i][0] != "EOF":
            raise self.unexpected("end of query")
        return A.Query(
            form=k, pattern=pattern, vars=vars_, dataset=dataset, template=template, describe=describe,
            base=self.base, prefixes=tuple(self.prefix_order.items()),
        )

    def construct_template(self) -> tuple:
        self.expect("{")
        out: list = []
        saved = self.bnode_const
        self.bnode_const = True
        self.paths_ok = False
        self.op_index = -1
        if self.toks[self.i][0] != "}":
            self.triples_block(out)
        self.bnode_const = saved
        self.paths_ok = True
        self.expect("}")
        return tuple(out)

    def dataset_clauses(self) -> A.Dataset | None:
        default: list[str] = []
        named: list[str] = []
        while self.accept("FROM"):
            if self.accept("NAMED"):
                named.append(self.iri())
            else:
                default.append(self.iri())
        if not default and not named:
            return None
        return A.Dataset(tuple(default), tuple(named))

    def select_query(self, sub: bool):
        toks = self.toks
        self.expect("SELECT")
        modifier = None
        if toks[self.i][0] in ("DISTINCT", "REDUCED"):
            modifier = toks[self.i][0]
            self.i += 1
        items: list | None = []
        star_tok = toks[self.i]
        if self.accept("*"):
            items = None
        else:
            self.agg_ok = True
            while True:
                tok = toks[self.i]
                k = tok[0]
                if k == "var":
                    self.i += 1
                    items.append((A.Var(tok[1][1:]), None, tok))
                elif k == "(":
                    self.i += 1
                    e = self.expression()
                    self.expect("AS")
                    vtok = toks[self.i]
                    v = self.var()
                    self.expect(")")
                    items.append((v, e, vtok))
                else:
                    break
            self.agg_ok = False
            if not items:
                raise self.unexpected("'*', a variable or '(' expression AS variable ')'")
        dataset = None if sub else self.dataset_clauses()
        self.accept("WHERE")
        where = self.group_graph_pattern()
        mods = self.solution_modifier()
        values = self.values_clause()
        pattern, vars_ = self.finish((modifier, items, star_tok), where, mods, values)
        return pattern, vars_, dataset

    def solution_modifier(self):
        toks = self.toks
        group_by: list = []
        having: list = []
        order: list = []
        limit = None
        offset = 0
        if toks[self.i][0] == "GROUP":
            self.i += 1
            self.expect("BY")
            while True:
                k = toks[self.i][0]
                if k == "var":
                    group_by.append((self.var(), None))
                elif k == "(":
                    self.i += 1
                    e = self.expression()
                    v = self.var() if self.accept("AS") else None
                    self.expect(")")
                    group_by.append((e, v))
                elif k in _BUILTIN_START or k in _AGGREGATES or k in ("iriref", "pname"):
                    group_by.append((self.constraint(), None))
                else:
                    break
            if not group_by:
                raise self.unexpected("a grouping condition")
        self.agg_ok = True
        if toks[self.i][0] == "HAVING":
            self.i += 1
            having.append(self.constraint())
            while toks[self.i][0] in ("(", "iriref", "pname") or toks[self.i][0] in _BUILTIN_START or (
                toks[self.i][0] in _AGGREGATES
            ):
                having.append(self.constraint())
        if toks[self.i][0] == "ORDER":
            self.i += 1
            self.expect("BY")
            while True:
                k = toks[self.i][0]
                if k == "ASC" or k == "DESC":
                    self.i += 1
                    order.append(A.OrderCondition(self.bracketted(), k == "ASC"))
                elif k == "var":
                    order.append(A.OrderCondition(self.var()))
                elif k in ("(", "iriref", "pname") or k in _BUILTIN_START or k in _AGGREGATES:
                    order.append(A.OrderCondition(self.constraint()))
                else:
                    break
            if not order:
                raise self.unexpected("an order condition")
        self.agg_ok = False
        for _ in range(2):
            k = toks[self.i][0]
            if k == "LIMIT" and limit is None:
                self.i += 1
                limit = self.count_literal()
            elif k == "OFFSET" and not offset:
                self.i += 1
                offset = self.count_literal()
        return group_by, having, order, limit, offset

    def values_clause(self) -> A.Values | None:
        if self.accept("VALUES"):
            return self.data_block()
        return None

    def finish(self, select, where: A.Pattern, mods, values):
        """Group/aggregates, HAVING, VALUES, select expressions, ORDER BY,
        projection, DISTINCT/REDUCED, slice (SPARQL 18.2.4-18.2.5)."""
        group_by, having, order, limit, offset = mods
        modifier, items, star_tok = select if select is not None else (None, None, None)
        is_select = select is not None
        has_agg = bool(group_by) or any(_has_agg(e) for e in having) or any(
            _has_agg(c.expr) for c in order
        )
        if items:
            has_agg = has_agg or any(e is not None and _has_agg(e) for _, e, _ in items)
        p = where
        if has_agg:
            if is_select and items is None:
                raise self.error("SELECT * is not allowed with GROUP BY or aggregates", star_tok)
            by = []
            allowed: set = set()
            for e, v in group_by:
                if v is None:
                    if type(e) is A.Var:
                        by.append((e, e))
                        allowed.add(e)
                        continue
                    v = self.hidden("g")
                by.append((e, v))
                allowed.add(v)
            agg_map: dict = {}

            def rw(e):
                t = type(e)
                if t is A.Aggregate:
                    v = agg_map.get(e)
                    if v is None:
                        v = agg_map[e] = self.hidden("agg")
                    return v
                if t is A.Call:
                    return A.Call(e.op, tuple(rw(a) for a in e.args))
                if t is A.FunctionCall:
                    return A.FunctionCall(e.iri, tuple(rw(a) for a in e.args), e.distinct)
                return e

            new_items = []
            for v, e, tok in items or ():
                if e is None:
                    if v not in allowed:
                        raise self.error(f"variable ?{v.name} is neither grouped nor aggregated", tok)
                    new_items.append((v, None, tok))
                    continue
                e2 = rw(e)
                used: set = set()
                _expr_vars(e2, used)
                allowed.update(agg_map.values())
                for u in used:
                    if u not in allowed:
                        raise self.error(
                            f"variable ?{u.name} in SELECT expression is neither grouped nor aggregated", tok
                        )
                allowed.add(v)
                new_items.append((v, e2, tok))
            items = new_items if items is not None else None
            having = [rw(e) for e in having]
            order = [A.OrderCondition(rw(c.expr), c.ascending) for c in order]
            p = A.Group(p, tuple(by), tuple((v, a) for a, v in agg_map.items()))
        if having:
            p = A.Filter(_conj(having), p)
        if values is not None:
            p = _join(p, values)
        if items:
            projected: list = []
            seen: set = set()
            in_scope: set | None = None
            for v, e, tok in items:
                if e is not None:
                    if in_scope is None:
                        in_scope = set(scope_vars(p))
                    if v in in_scope or v in seen:
                        raise self.error(f"variable ?{v.name} is already in scope", tok)
                    p = A.Extend(p, v, e)
                    in_scope.add(v)
                if v not in seen:
                    seen.add(v)
                    projected.append(v)
            vars_ = tuple(projected)
        elif is_select:
            vars_ = _visible(scope_vars(p))
        else:
            vars_ = ()
        if order:
            p = A.OrderBy(p, tuple(order))
        if is_select:
            p = A.Project(p, vars_)
        if modifier == "DISTINCT":
            p = A.Distinct(p)
        elif modifier == "REDUCED":
            p = A.Reduced(p)
        if limit is not None or offset:
            p = A.Slice(p, offset, limit)
        return p, vars_

    # ------------------------------------------------------------ updates

    def parse_update(self) -> A.Update:
        ops = []
        toks = self.toks
        while True:
            self.prologue()
            if toks[self.i][0] == "EOF":
                break
            self.op_index = len(ops)
            self.label_block = {}
            ops.append(self.update1())
            if not self.accept(";"):
                break
        if toks[self.i][0] != "EOF":
            raise self.unexpected("';' or end of update")
        return A.Update(tuple(ops), self.base, tuple(self.prefix_order.items()))

    def graph_ref_all(self) -> A.GraphTarget:
        k = self.toks[self.i][0]
        if k in ("DEFAULT", "NAMED", "ALL"):
            self.i += 1
            return A.GraphTarget(k)
        if k == "GRAPH":
            self.i += 1
            return A.GraphTarget("GRAPH", self.iri())
        raise self.unexpected("GRAPH, DEFAULT, NAMED or ALL")

    def graph_or_default(self) -> A.GraphTarget:
        if self.accept("DEFAULT"):
            return A.GraphTarget("DEFAULT")
        self.accept("GRAPH")
        return A.GraphTarget("GRAPH", self.iri())

    def update1(self):
        toks = self.toks
        tok = toks[self.i]
        k = tok[0]
        self.i += 1
        if k == "LOAD":
            silent = self.accept("SILENT")
            src = self.iri()
            into = None
            if self.accept("INTO"):
                self.expect("GRAPH")
                into = self.iri()
            return A.Load(src, into, silent)
        if k == "CLEAR" or k == "DROP":
            silent = self.accept("SILENT")
            target = self.graph_ref_all()
            return A.Clear(target, silent) if k == "CLEAR" else A.Drop(target, silent)
        if k == "CREATE":
            silent = self.accept("SILENT")
            self.expect("GRAPH")
            return A.Create(self.iri(), silent)
        if k in ("ADD", "MOVE", "COPY"):
            silent = self.accept("SILENT")
            src = self.graph_or_default()
            self.expect("TO")
            dst = self.graph_or_default()
            return A.Transfer(k, src, dst, silent)
        if k == "INSERT" and toks[self.i][0] == "DATA":
            self.i += 1
            return A.InsertData(self.quads(data=True, bnodes_ok=True))
        if k == "DELETE" and toks[self.i][0] == "DATA":
            self.i += 1
            return A.DeleteData(self.quads(data=True, bnodes_ok=False))
        if k == "DELETE" and toks[self.i][0] == "WHERE":
            self.i += 1
            qs = self.quads(data=False, bnodes_ok=False)
            return A.Modify(qs, (), self.quads_pattern(qs))
        with_iri = None
        if k == "WITH":
            with_iri = self.iri()
            tok = toks[self.i]
            k = tok[0]
            self.i += 1
        delete: tuple = ()
        insert: tuple = ()
        if k == "DELETE":
            delete = self.quads(data=False, bnodes_ok=False)
            if self.accept("INSERT"):
                insert = self.quads(data=False, bnodes_ok=True)
        elif k == "INSERT":
            insert = self.quads(data=False, bnodes_ok=True)
        else:
            self.i -= 1
            raise self.unexpected("an update operation")
        using: list[str] = []
        using_named: list[str] = []
        while self.accept("USING"):
            if self.accept("NAMED"):
                using_named.append(self.iri())
            else:
                using.append(self.iri())
        self.expect("WHERE")
        where = self.group_graph_pattern()
        return A.Modify(delete, insert, where, tuple(using), tuple(using_named), with_iri)

    def quads(self, data: bool, bnodes_ok: bool) -> tuple[A.Quad, ...]:
        toks = self.toks
        self.expect("{")
        self.bnode_const = True
        self.bnode_forbidden = not bnodes_ok
        self.vars_forbidden = data
        self.data_mode = data
        self.paths_ok = False
        out: list[A.Quad] = []
        triples_ok = True
        try:
            while True:
                k = toks[self.i][0]
                if triples_ok and k in _TERM_START:
                    triples: list = []
                    self.triples_block(triples)
                    out.extend(A.Quad(t.s, t.p, t.o) for t in triples)
                    triples_ok = False
                    continue
                triples_ok = True
                if k == "GRAPH":
                    self.i += 1
                    g = self.var_or_iri()
                    self.expect("{")
                    triples = []
                    if toks[self.i][0] in _TERM_START:
                        self.triples_block(triples)
                    self.expect("}")
                    out.extend(A.Quad(t.s, t.p, t.o, g) for t in triples)
                    self.accept(".")
                    continue
                if k == "}":
                    self.i += 1
                    break
                raise self.unexpected("'}'")
        finally:
            self.bnode_const = False
            self.bnode_forbidden = False
            self.vars_forbidden = False
            self.data_mode = False
            self.paths_ok = True
        return tuple(out)

    @staticmethod
    def quads_pattern(qs: tuple[A.Quad, ...]) -> A.Pattern:
        g: A.Pattern | None = None
        cur_graph = None
        cur: list = []
        for q in qs:
            if q.g != cur_graph and cur:
                bgp = A.BGP(tuple(cur))
                g = _join(g, bgp if cur_graph is None else A.Graph(cur_graph, bgp))
                cur = []
            cur_graph = q.g
            cur.append(A.TriplePattern(q.s, q.p, q.o))
        if cur:
            bgp = A.BGP(tuple(cur))
            g = _join(g, bgp if cur_graph is None else A.Graph(cur_graph, bgp))
        return g if g is not None else _EMPTY


def parse_query(text: str, base: str | None = None, check=None) -> A.Query:
    """Parse a SPARQL 1.1 query into the algebra. Raises QuerySyntaxError.
    ``check()`` is called every few thousand tokens (it raises to stop, e.g.
    QueryTimeout at the query's deadline)."""
    try:
        return _Parser(text, base, check).parse_query()
    except RecursionError:
        raise QuerySyntaxError("query is nested too deeply") from None


def parse_update(text: str, base: str | None = None, check=None) -> A.Update:
    """Parse a SPARQL 1.1 update request into the algebra (``check`` as for parse_query)."""
    try:
        return _Parser(text, base, check).parse_update()
    except RecursionError:
        raise QuerySyntaxError("update is nested too deeply") from None
