"""Variant templates (``Database._learn``, ``_Template.variants``): texts of one
skeleton that differ in an IRI the skeleton's template keeps fixed (another
predicate or class written as a full IRI: another shape) get their own template
at their first sighting, so their later texts (new constants) are answered from
it without a parse; every answer equals the general path's (templates off), over
random graphs, for predicates, classes and constants absent from the data."""

from __future__ import annotations

import random

import pytest

import engine.sparql.parser as parser
from engine.database import Database
from engine.sparql import normalize as norm
from tests.test_template_lists import edges

#: {c}: the parameter (a subject/object constant); {p}, {k}: fixed IRIs (predicate, class)
SHAPES = [
    "SELECT ?o WHERE {{ <{c}> <{p}> ?o }}",
    "SELECT ?s WHERE {{ ?s <{p}> <{c}> . ?s <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{k}> }}",
    "ASK {{ <{c}> <{p}> ?o }}",
    "SELECT DISTINCT ?x WHERE {{ <{c}> <{p}> ?y . ?y <{k}> ?x }} LIMIT 4",
    "CONSTRUCT {{ <{c}> <{k}> ?o }} WHERE {{ <{c}> <{p}> ?o }}",
    "SELECT ?a ?b WHERE {{ <{c}> <{p}> ?a ; <{k}> ?b }} ORDER BY ?b",
]
PREDS = [f"http://e/p{i}" for i in range(4)] + ["http://e/absent"]
CLASSES = [f"http://e/C{i}" for i in range(3)] + [f"http://e/p{i}" for i in range(2)]


def _graph(seed: int) -> str:
    rnd = random.Random(seed)
    lines = edges(rnd)
    for n in range(40):
        lines.append(f"<http://e/n{n}> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> "
                     f"<http://e/C{rnd.randrange(3)}> .")
    return "\n".join(lines) + "\n"


def _rows(res):
    if res.form == "ASK":
        return res.boolean
    if res.is_graph:
        return [tuple(res.terms.keys(t)) for t in res.triples]
    return res.vars, [tuple(r.get(v) for v in res.vars) for r in res.rows()]


def _general(db, text, base):
    saved = db._templates
    db._templates = {}
    try:
        return _rows(db.query(text, base=base))
    finally:
        db._templates = saved


@pytest.mark.parametrize("seed", [0, 1])
def test_variants_answer_like_the_general_path_and_skip_the_parse(seed, tmp_path, monkeypatch):
    f = tmp_path / "g.nt"
    f.write_text(_graph(seed))
    db = Database()
    db.load_file(str(f))
    base = "http://h/sparql"
    calls = []
    real = parser.parse_query
    monkeypatch.setattr(parser, "parse_query", lambda *a, **k: calls.append(1) or real(*a, **k))
    rnd = random.Random(seed)
    hits = 0
    for shape in SHAPES:
        variants = [(p, k) for p in PREDS for k in (CLASSES if "{k}" in shape else CLASSES[:1])]
        rnd.shuffle(variants)
        for p, k in variants[:8]:
            for i in range(8):  # n40..: constants absent from the graph
                j = rnd.randrange(44)
                c = f"http://e/n{j}"
                text = shape.format(c=c, p=p, k=k) + f"\n# {i}\n"
                hit = db.match_template(norm.normalize(text), base)
                # (a program to rebind for this constant: else, e.g. before the shape's first
                # text with a constant in the store, the general path answers)
                ready = hit is not None and hit[0].key != ("DESCRIBE",) and db._template_program(*hit) is not None
                calls.clear()
                got = _rows(db.query(text, base=base))
                if ready:
                    hits += 1
                    assert calls == [], text  # answered from the variant's template: not parsed
                    assert (text, base) not in db._prepared
                db._prepared.clear()
                assert got == _general(db, text, base), text
                db._prepared.clear()
            # from the variant's second text on, a hit (the first text taught it), unless
            # its constants make no fast shape (a class equal to a predicate of the query)
            later = shape.format(c="http://e/n3", p=p, k=k) + "\n# later\n"
            if p != k:
                assert db.match_template(norm.normalize(later), base) is not None, later
    assert hits > 100
    # each skeleton keeps one template (the head) and its variants under it
    heads = [t for t in db._templates.values() if t is not None]
    assert len(heads) == len(SHAPES)
    assert all(len(t.variants) >= 3 for t in heads)


def test_a_variant_of_a_template_with_a_parameter_in_other_slots_is_not_one(tmp_path):
    """A text of the skeleton whose parameter sits elsewhere (here: the constant
    repeated in the predicate's slot) is no variant: the general path answers it."""
    f = tmp_path / "g.nt"
    f.write_text(_graph(3))
    db = Database()
    db.load_file(str(f))
    shape = "SELECT ?o WHERE {{ <{c}> <{p}> ?o }}"
    db.query(shape.format(c="http://e/n1", p="http://e/p0"))
    text = shape.format(c="http://e/p1", p="http://e/p1")  # a constant that is also the predicate
    assert db.match_template(norm.normalize(text), None) is None
    assert _rows(db.query(text)) == _general(db, text, None)
