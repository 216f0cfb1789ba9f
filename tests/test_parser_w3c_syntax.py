"""W3C SPARQL 1.1 syntax tests: positive tests must parse, negative tests must
raise QuerySyntaxError (and nothing else)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from engine.errors import QuerySyntaxError
from engine.sparql.parser import parse_query, parse_update

ROOT = Path("/work/shared/w3c-sparql/sparql/sparql11")
MANIFESTS = [
    "syntax-query/manifest.ttl",
    "syntax-update-1/manifest.ttl",
    "syntax-update-2/manifest.ttl",
    "aggregates/manifest.ttl",
    "construct/manifest.ttl",
    "grouping/manifest.ttl",
    "delete-insert/manifest.ttl",
    "syntax-fed/manifest.ttl",
]
MF = "http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#"
KINDS = {
    MF + "PositiveSyntaxTest11": (True, False),
    MF + "NegativeSyntaxTest11": (False, False),
    MF + "PositiveUpdateSyntaxTest11": (True, True),
    MF + "NegativeUpdateSyntaxTest11": (False, True),
}

# test name -> reason; these are marked xfail (strict).
EXPECTED_FAILURES: dict[str, str] = {}


def _collect():
    if not ROOT.exists():
        return []
    from rdflib import Graph, URIRef
    from rdflib.collection import Collection
    from rdflib.namespace import RDF

    cases = []
    for rel in MANIFESTS:
        path = ROOT / rel
        g = Graph()
        g.parse(path, format="turtle", publicID=path.as_uri())
        for manifest in g.subjects(RDF.type, URIRef(MF + "Manifest")):
            for lst in g.objects(manifest, URIRef(MF + "entries")):
                for entry in Collection(g, lst):
                    kind = g.value(entry, RDF.type)
                    if str(kind) not in KINDS:
                        continue
                    action = g.value(entry, URIRef(MF + "action"))
                    file = Path(unquote(urlparse(str(action)).path))
                    positive, update = KINDS[str(kind)]
                    cases.append((f"{rel.split('/')[0]}/{file.name}", file, positive, update))
    return cases


CASES = _collect()


def _params():
    out = []
    for name, file, positive, update in CASES:
        marks = []
        if name in EXPECTED_FAILURES:
            marks.append(pytest.mark.xfail(reason=EXPECTED_FAILURES[name], strict=True))
        out.append(pytest.param(file, positive, update, id=name, marks=marks))
    return out


@pytest.mark.skipif(not CASES, reason="W3C test suite not available")
@pytest.mark.parametrize("file,positive,update", _params())
def test_w3c_syntax(file: Path, positive: bool, update: bool):
    text = file.read_text(encoding="utf-8")
    base = file.as_uri()
    parse = parse_update if update else parse_query
    if positive:
        parse(text, base=base)
    else:
        with pytest.raises(QuerySyntaxError):
            parse(text, base=base)


def test_suite_size():
    if not ROOT.exists():
        pytest.skip("W3C test suite not available")
    assert len(CASES) > 150


# ---------------------------------------------------------------- evaluation tests' queries must parse

QT = "http://www.w3.org/2001/sw/DataAccess/tests/test-query#"
UT = "http://www.w3.org/2009/sparql/tests/test-update#"


def _collect_eval():
    if not ROOT.exists():
        return []
    from rdflib import Graph, URIRef
    from rdflib.namespace import RDF

    out = []
    for path in sorted(ROOT.glob("*/manifest.ttl")):
        g = Graph()
        g.parse(path, format="turtle", publicID=path.as_uri())
        for kind, pred, update in (
            ("QueryEvaluationTest", QT + "query", False),
            ("CSVResultFormatTest", QT + "query", False),
            ("UpdateEvaluationTest", UT + "request", True),
        ):
            for entry in g.subjects(RDF.type, URIRef(MF + kind)):
                action = g.value(entry, URIRef(MF + "action"))
                target = g.value(action, URIRef(pred)) if action is not None else None
                if target is None:
                    continue
                file = Path(unquote(urlparse(str(target)).path))
                if file.exists():
                    out.append((f"{path.parent.name}/{file.name}", file, update))
    return sorted(set(out))


EVAL_CASES = _collect_eval()


@pytest.mark.skipif(not EVAL_CASES, reason="W3C test suite not available")
@pytest.mark.parametrize("file,update", [pytest.param(f, u, id=n) for n, f, u in EVAL_CASES])
def test_w3c_evaluation_queries_parse(file: Path, update: bool):
    text = file.read_text(encoding="utf-8")
    (parse_update if update else parse_query)(text, base=file.as_uri())
