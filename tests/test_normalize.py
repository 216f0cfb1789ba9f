"""Shape templates (engine/sparql/normalize.py, Database._template_hit): a text
answered from its skeleton's template answers exactly what a full parse of it
answers, for random constants (tricky IRIs and literals, ones not in the data),
comments and whitespace; and texts with one skeleton and the same slots are
one token sequence for the tokenizer."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench import lubm
from engine.database import Database
from engine.errors import JindouError
from engine.sparql.normalize import normalize, slot_key, spans
from engine.sparql.tokenizer import tokenize

# ---------------------------------------------------------------- the tokenization claim

#: pieces of query text, the awkward ones included (quotes, comment and IRI starts,
#: escapes, long-string quotes, non-SPARQL whitespace, unterminated literals)
PIECES = ["SELECT", "*", "{", "}", "?s", "?o", "a", ".", ";", "<http://e/x>", "<http://e/a#b>", "<a b>",
          "<", ">", "<=", '"x#y"', "'x\"y'", '"a\\"b"', '"', "'", "#", "\\", "ex:a\\-b", "ex:b", "@en", "^^",
          '"""', "'''", "\\u0041", "é", "\xa0", "\x0b", "\x01", "FILTER(?s<?o)", "1", "1.5", "'it''s'",
          '"<http://e/x>"', "<http://e/'q'>", "#<http://e/x>"]
#: separators of one kind: whitespace (and comments) in many spellings
WS = [" ", "  ", "\n", "\t", "\r\n", " # c <x> \"y\n", "#'\n", " #\n ", "\n#\"\"\"\n"]


def _render(pieces, gaps, seps):
    out = []
    for i, p in enumerate(pieces):
        out.append(p)
        if i < len(gaps) and gaps[i]:
            out.append(seps[i])
    return "".join(out)


def _tokens(text):
    try:
        return [(k, raw) for k, raw, _ in tokenize(text)]
    except JindouError:
        return "error"


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_one_skeleton_and_slots_is_one_token_sequence(data):
    n = data.draw(st.integers(1, 12))
    pieces = data.draw(st.lists(st.sampled_from(PIECES), min_size=n, max_size=n))
    gaps = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    a = _render(pieces, gaps, data.draw(st.lists(st.sampled_from(WS), min_size=n, max_size=n)))
    b = _render(pieces, gaps, data.draw(st.lists(st.sampled_from(WS), min_size=n, max_size=n)))
    na, nb = normalize(a), normalize(b)
    assume(na is not None and na == nb)
    assert _tokens(a) == _tokens(b)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_swapping_one_iri_slot_swaps_one_token(data):
    n = data.draw(st.integers(1, 10))
    pieces = data.draw(st.lists(st.sampled_from(PIECES), min_size=n, max_size=n))
    k = data.draw(st.integers(0, n))
    pieces.insert(k, "<http://e/one>")
    text = " ".join(pieces)
    n = normalize(text)
    assume(n is not None and "<http://e/one>" in n[1])
    a, b = spans(text)[n[1].index("<http://e/one>")]
    other = text[:a] + "<http://e/two'#%41>" + text[b:]
    m = normalize(other)  # the same skeleton, unless the new IRI pairs with a stray quote
    assume(m is not None and m[0] == n[0])
    ta, tb = _tokens(text), _tokens(other)
    if ta == "error":
        return
    diff = [(x, y) for x, y in zip(ta, tb, strict=True) if x != y]
    assert all(x[0] == y[0] == "iriref" for x, y in diff)


def test_normalize_examples():
    sk, slots = normalize('SELECT ?x WHERE { <http://e/a> <p> "s #t" } # note <http://e/x>\n')
    assert slots == ["<http://e/a>", "<p>", '"s #t"', ""]
    assert sk.count("\x01") == 4 and "note" not in sk
    assert normalize('SELECT * { ?s ?p """x""" }') is None  # long strings
    assert normalize("SELECT * { ?s ex:a\\-b ?o }") is None  # an escape outside strings
    assert normalize("SELECT * { <http://e/\\u0041> ?p ?o }") is None
    assert slot_key("<http://e/a>") == "<http://e/a>"
    assert slot_key("<rel>") is None  # a relative IRI depends on the base
    assert slot_key('"a\\"b"') is None and slot_key("'it\"s'") == '"it\\"s"'
    assert slot_key("") is None


# ---------------------------------------------------------------- templates answer like a full parse

TRICKY_IRIS = ["http://ex.org/a#b", "http://ex.org/it's", "http://ex.org/q?x=1&y=2", "http://ex.org/%41",
               "http://ex.org/\u00e9t\u00e9", "http://ex.org/a/../b", "http://ex.org/p", "urn:x:1"]
TRICKY_LITERALS = ["plain", "a#b", "<not an iri>", "it's", 'say "hi"', "line\nbreak", "\u00e9"]

EX = "http://ex.org/"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("norm")
    path = d / "d.nt"
    lubm.generate(path, triples=3000, seed=5)
    extra = []
    for i, s in enumerate(TRICKY_IRIS):
        extra.append(f"<{s}> <{EX}p> <{EX}o{i % 3}> .")
        extra.append(f"<{s}> <{EX}name> \"n{i}\" .")
        extra.append(f"<{EX}o{i % 3}> <{EX}q> <{s}> .")
    for i, lit in enumerate(TRICKY_LITERALS):
        esc = lit.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        extra.append(f"<{EX}l{i}> <{EX}label> \"{esc}\" .")
        extra.append(f"<{EX}l{i}> <{EX}p> <{EX}o{i % 3}> .")
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(extra) + "\n")
    out = Database()
    out.load_file(str(path))
    return out


FAMILIES = [
    "SELECT ?o ?n WHERE {{ {c} <http://ex.org/p> ?o ; <http://ex.org/name> ?n }}",
    "SELECT ?s WHERE {{ ?s <http://ex.org/q> {c} }}",
    "SELECT DISTINCT ?x WHERE {{ {c} <http://ex.org/p> ?o . ?o <http://ex.org/q> ?x }} LIMIT 5",
    "ASK {{ {c} <http://ex.org/p> ?o }}",
    "SELECT ?s WHERE {{ ?s <http://ex.org/label> {c} }}",
    "SELECT ?s ?o WHERE {{ ?s <http://ex.org/label> {c} . ?s <http://ex.org/p> ?o }} OFFSET 0 LIMIT 2",
    "PREFIX ex: <http://ex.org/>\nSELECT ?o WHERE {{ {c} ex:p ?o }}",
    "SELECT ?p ?o WHERE {{ {c} ?p ?o }}",
    "SELECT ?s WHERE {{ ?s ?p {c} }} LIMIT 3",
    "DESCRIBE {c}",
    "SELECT ?s ?o WHERE {{ ?s <http://ex.org/p> ?o ; <http://ex.org/name> ?n . ?o <http://ex.org/q> {c} }} ORDER BY DESC(?n)",
    "CONSTRUCT {{ {c} <http://ex.org/seen> ?o . ?o <http://ex.org/by> {c} }} WHERE {{ {c} <http://ex.org/p> ?o }}",
]


def _const(data):
    if data.draw(st.booleans()):
        iri = data.draw(st.sampled_from(TRICKY_IRIS + [EX + "o1", EX + "nothing", EX + "p"]))
        return "<" + iri + ">"
    lit = data.draw(st.sampled_from(TRICKY_LITERALS + ["absent"]) | st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6))
    q = data.draw(st.sampled_from(['"', "'"]))
    body = lit.replace("\\", "\\\\").replace(q, "\\" + q).replace("\n", "\\n").replace("\r", "\\r")
    suffix = data.draw(st.sampled_from(["", "", "@en", "^^<http://www.w3.org/2001/XMLSchema#string>"]))
    return q + body + q + suffix


def _answer(db, text, templates: bool):
    saved = db._templates
    if not templates:
        db._templates = {}
    try:
        res = db.query(text)
    except JindouError as e:
        return ("error", type(e).__name__)
    finally:
        if not templates:
            db._templates = saved
    if res.form == "ASK":
        return res.boolean
    if res.is_graph:
        return [tuple(res.terms.keys(t)) for t in res.triples]
    return res.vars, [tuple(r.get(v) for v in res.vars) for r in res.rows()]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_template_answers_like_a_full_parse(db, data):
    fam = data.draw(st.sampled_from(FAMILIES))
    comment = data.draw(st.sampled_from(["", "# <x> \"q' \\u0041\n", "#c\n"]))
    ws = data.draw(st.sampled_from([" ", "\n  ", "\t"]))
    text = comment + fam.format(c=_const(data)).replace(" ", ws, 1) + "\n" + comment
    first = _answer(db, text, True)  # teaches the skeleton's template, or is answered from it
    db._prepared.clear()
    again = _answer(db, text, True)
    db._prepared.clear()
    want = _answer(db, text, False)
    db._prepared.clear()
    assert first == want
    assert again == want


def test_templates_are_used_and_skip_the_parse(db, monkeypatch):
    import engine.sparql.parser as parser

    fam = FAMILIES[0]
    db.query(fam.format(c="<http://ex.org/a#b>") + "# one\n")
    calls = []
    real = parser.parse_query
    monkeypatch.setattr(parser, "parse_query", lambda *a, **k: calls.append(1) or real(*a, **k))
    for i, iri in enumerate(TRICKY_IRIS):
        if iri == EX + "p":
            continue
        text = fam.format(c=f"<{iri}>") + f"# text {i}\n"
        got = db.query(text)
        assert (text, None) not in db._prepared
        assert len(got) == 1
    assert calls == []  # none of them was parsed
    # a constant equal to the shape's predicate has another fast shape: not the
    # template's: the full path (parsed, or rebound from the skeleton's parse shape)
    text = fam.format(c="<http://ex.org/p>") + "# p\n"
    db.query(text)
    assert (text, None) in db._prepared
