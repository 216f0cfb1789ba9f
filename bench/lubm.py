"""Deterministic LUBM-style data generator (univ-bench ontology), N-Triples output.

The shape follows the Lehigh University Benchmark generator (UBA 1.7): universities
made of 15-25 departments; per department 7-10 full, 10-14 associate and 8-11
assistant professors and 5-7 lecturers; 8-14 undergraduates and 3-4 graduate
students per faculty member; every faculty member teaches 1-2 undergraduate and
1-2 graduate courses; 10-20 research groups; publications per faculty member by
rank; degrees "from" one of 1000 universities (as UBA does, most of them are not
generated, so type-constrained joins prune them).  Beyond UBA, every person has a
``ub:age`` (``xsd:integer``, from a random stream of its own): the numeric literals
the FILTER benchmark queries compare.  IRIs and literals look like
UBA's: ``<http://www.Department0.University0.edu/GraduateStudent12>``,
``"GraduateStudent12@Department0.University0.edu"``.

Randomness: every department draws from its own ``numpy.random.default_rng``
seeded with ``(seed, university, department)`` and every university's department
count from ``(seed, university)``, so output is byte-for-byte deterministic and a
smaller scale is a prefix of a larger one (same seed).

Inference: the LUBM queries L1-L7 used by Wukong only mention leaf classes
(GraduateStudent, UndergraduateStudent, FullProfessor, Course, ...), which UBA
asserts directly, so they need no reasoning.  Like Wukong's evaluation (which
loads pre-materialised data), the generator additionally materialises the few
super-class memberships our extra queries use: every Full/Associate/Assistant
professor is also ``rdf:type ub:Professor`` and every graduate / undergraduate
student is also ``rdf:type ub:Student`` (pass ``materialize=False`` to get plain
UBA-style data).

Scale: either a number of universities or a target triple count; with a target the
generator stops at the last department boundary not beyond the target (but always
produces Department0.University0, so tiny test datasets are possible).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator

import numpy as np

UB = "http://swat.cse.lehigh.edu/onto/univ-bench.owl#"
RDF_TYPE_IRI = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
DEGREE_UNIVERSITIES = 1000  # UBA draws "degree from" universities from a fixed range

_T = f"<{RDF_TYPE_IRI}>"


def _p(local: str) -> str:
    return f"<{UB}{local}>"


P_NAME = _p("name")
P_EMAIL = _p("emailAddress")
P_PHONE = _p("telephone")
P_MEMBER = _p("memberOf")
P_SUBORG = _p("subOrganizationOf")
P_WORKS = _p("worksFor")
P_TAKES = _p("takesCourse")
P_TEACHER = _p("teacherOf")
P_ADVISOR = _p("advisor")
P_AUTHOR = _p("publicationAuthor")
P_UGDEG = _p("undergraduateDegreeFrom")
P_MSDEG = _p("mastersDegreeFrom")
P_DRDEG = _p("doctoralDegreeFrom")
P_HEAD = _p("headOf")
P_INTEREST = _p("researchInterest")
P_TA = _p("teachingAssistantOf")
P_AGE = _p("age")
XSD_INTEGER = "<http://www.w3.org/2001/XMLSchema#integer>"

C_UNIV = _p("University")
C_DEPT = _p("Department")
C_GROUP = _p("ResearchGroup")
C_COURSE = _p("Course")
C_GCOURSE = _p("GraduateCourse")
C_PUB = _p("Publication")
C_UG = _p("UndergraduateStudent")
C_GS = _p("GraduateStudent")
C_STUDENT = _p("Student")
C_PROF = _p("Professor")
C_LECT = _p("Lecturer")

# rank -> (class local name, min, max inclusive) per department
FACULTY = (("FullProfessor", 7, 10), ("AssociateProfessor", 10, 14),
           ("AssistantProfessor", 8, 11), ("Lecturer", 5, 7))
PUBS = {"FullProfessor": (15, 20), "AssociateProfessor": (10, 18),
        "AssistantProfessor": (5, 10), "Lecturer": (0, 5)}


def univ_iri(u: int) -> str:
    return f"<http://www.University{u}.edu>"


def dept_host(d: int, u: int) -> str:
    return f"Department{d}.University{u}.edu"


def _lit(s: str) -> str:
    return f'"{s}"'


def _randint(rng: np.random.Generator, lo: int, hi: int, size=None):
    """Uniform integers in [lo, hi] (inclusive)."""
    return rng.integers(lo, hi + 1, size=size)


def _person_lines(out: list[str], iris: list[str], locals_: list[str], host: str, cls: str,
                  extra_cls: str | None) -> None:
    """type(s), name, emailAddress, telephone for a list of people."""
    out.extend(f"{s} {_T} {cls} .\n" for s in iris)
    if extra_cls:
        out.extend(f"{s} {_T} {extra_cls} .\n" for s in iris)
    out.extend(f'{s} {P_NAME} "{n}" .\n' for s, n in zip(iris, locals_, strict=True))
    out.extend(f'{s} {P_EMAIL} "{n}@{host}" .\n' for s, n in zip(iris, locals_, strict=True))
    out.extend(f'{s} {P_PHONE} "xxx-xxx-xxxx" .\n' for s in iris)


def _edges(out: list[str], subj: list[str], pred: str, obj: list[str], si: np.ndarray, oi: np.ndarray) -> None:
    out.extend(f"{subj[a]} {pred} {obj[b]} .\n" for a, b in zip(si.tolist(), oi.tolist(), strict=True))


def _multi_choice(rng: np.random.Generator, n: int, lo: int, hi: int, pool: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of n items draw lo..hi distinct values from range(pool); returns (item, value) pairs."""
    if n == 0 or pool == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    k = _randint(rng, lo, hi, n)
    rows = np.repeat(np.arange(n), k)
    vals = rng.integers(0, pool, rows.size)
    key = np.unique(rows * pool + vals)  # dedupe, sorted by (row, value)
    return key // pool, key % pool


def department_lines(seed: int, u: int, d: int, materialize: bool = True) -> list[str]:
    rng = np.random.default_rng([seed, u, d, 1])
    host = dept_host(d, u)
    base = f"http://www.{host}"
    dept = f"<{base}>"
    out: list[str] = [f"{dept} {_T} {C_DEPT} .\n", f'{dept} {P_NAME} "Department{d}" .\n',
                      f"{dept} {P_SUBORG} {univ_iri(u)} .\n"]

    # faculty --------------------------------------------------------------------------
    fac_iri: list[str] = []
    fac_rank: list[str] = []
    for rank, lo, hi in FACULTY:
        n = int(_randint(rng, lo, hi))
        locs = [f"{rank}{i}" for i in range(n)]
        iris = [f"<{base}/{x}>" for x in locs]
        _person_lines(out, iris, locs, host, _p(rank),
                      C_PROF if (materialize and rank != "Lecturer") else None)
        out.extend(f"{s} {P_WORKS} {dept} .\n" for s in iris)
        degs = rng.integers(0, DEGREE_UNIVERSITIES, (n, 3))
        for col, pred in enumerate((P_UGDEG, P_MSDEG, P_DRDEG)):
            out.extend(f"{s} {pred} {univ_iri(int(x))} .\n"
                       for s, x in zip(iris, degs[:, col].tolist(), strict=True))
        if rank != "Lecturer":
            ri = rng.integers(0, 30, n)
            out.extend(f'{s} {P_INTEREST} "Research{x}" .\n' for s, x in zip(iris, ri.tolist(), strict=True))
        fac_iri.extend(iris)
        fac_rank.extend([rank] * n)
    n_fac = len(fac_iri)
    n_prof = sum(1 for r in fac_rank if r != "Lecturer")  # professors come first in fac_iri
    head = int(rng.integers(0, FACULTY[0][1]))  # one of the first 7 full professors
    out.append(f"{fac_iri[head]} {P_HEAD} {dept} .\n")

    # courses: each faculty member teaches 1-2 undergraduate and 1-2 graduate courses ----
    n_uc = _randint(rng, 1, 2, n_fac)
    n_gc = _randint(rng, 1, 2, n_fac)
    uc_owner = np.repeat(np.arange(n_fac), n_uc)
    gc_owner = np.repeat(np.arange(n_fac), n_gc)
    courses = [f"<{base}/Course{j}>" for j in range(uc_owner.size)]
    gcourses = [f"<{base}/GraduateCourse{j}>" for j in range(gc_owner.size)]
    out.extend(f"{c} {_T} {C_COURSE} .\n" for c in courses)
    out.extend(f'{c} {P_NAME} "Course{j}" .\n' for j, c in enumerate(courses))
    out.extend(f"{c} {_T} {C_GCOURSE} .\n" for c in gcourses)
    out.extend(f'{c} {P_NAME} "GraduateCourse{j}" .\n' for j, c in enumerate(gcourses))
    _edges(out, fac_iri, P_TEACHER, courses, uc_owner, np.arange(uc_owner.size))
    _edges(out, fac_iri, P_TEACHER, gcourses, gc_owner, np.arange(gc_owner.size))

    # research groups ---------------------------------------------------------------------
    n_rg = int(_randint(rng, 10, 20))
    for g in range(n_rg):
        rg = f"<{base}/ResearchGroup{g}>"
        out.append(f"{rg} {_T} {C_GROUP} .\n")
        out.append(f"{rg} {P_SUBORG} {dept} .\n")

    # publications by faculty --------------------------------------------------------------
    pub_iri: list[str] = []
    for i, (s, rank) in enumerate(zip(fac_iri, fac_rank, strict=True)):
        lo, hi = PUBS[rank]
        k = int(_randint(rng, lo, hi))
        loc = s[len(base) + 2:-1]
        for j in range(k):
            p = f"<{base}/{loc}/Publication{j}>"
            pub_iri.append(p)
            out.append(f"{p} {_T} {C_PUB} .\n")
            out.append(f'{p} {P_NAME} "Publication{j}" .\n')
            out.append(f"{p} {P_AUTHOR} {s} .\n")
        del i

    # undergraduate students -----------------------------------------------------------------
    n_ug = n_fac * int(_randint(rng, 8, 14))
    locs = [f"UndergraduateStudent{i}" for i in range(n_ug)]
    ugs = [f"<{base}/{x}>" for x in locs]
    _person_lines(out, ugs, locs, host, C_UG, C_STUDENT if materialize else None)
    out.extend(f"{s} {P_MEMBER} {dept} .\n" for s in ugs)
    rows, vals = _multi_choice(rng, n_ug, 2, 4, len(courses))
    _edges(out, ugs, P_TAKES, courses, rows, vals)
    adv = np.flatnonzero(rng.random(n_ug) < 0.2)
    _edges(out, ugs, P_ADVISOR, fac_iri, adv, rng.integers(0, n_prof, adv.size))

    # graduate students -------------------------------------------------------------------------
    n_gs = n_fac * int(_randint(rng, 3, 4))
    locs = [f"GraduateStudent{i}" for i in range(n_gs)]
    gss = [f"<{base}/{x}>" for x in locs]
    _person_lines(out, gss, locs, host, C_GS, C_STUDENT if materialize else None)
    out.extend(f"{s} {P_MEMBER} {dept} .\n" for s in gss)
    deg = rng.integers(0, DEGREE_UNIVERSITIES, n_gs)
    out.extend(f"{s} {P_UGDEG} {univ_iri(int(x))} .\n" for s, x in zip(gss, deg.tolist(), strict=True))
    rows, vals = _multi_choice(rng, n_gs, 1, 3, len(gcourses))
    _edges(out, gss, P_TAKES, gcourses, rows, vals)
    _edges(out, gss, P_ADVISOR, fac_iri, np.arange(n_gs), rng.integers(0, n_prof, n_gs))
    ta = np.flatnonzero(rng.random(n_gs) < 0.25)
    _edges(out, gss, P_TA, courses, ta, rng.integers(0, len(courses), ta.size))
    # graduate students co-author 0-5 publications of their department
    if pub_iri:
        rows, vals = _multi_choice(rng, n_gs, 0, 5, len(pub_iri))
        _edges(out, pub_iri, P_AUTHOR, gss, vals, rows)
    # ages (xsd:integer) from a stream of their own, so the draws above stay as they were:
    # the numeric literals the FILTER-range benchmark queries compare
    arng = np.random.default_rng([seed, u, d, 2])
    for people, lo, hi in ((fac_iri, 30, 70), (ugs, 17, 25), (gss, 21, 40)):
        ages = _randint(arng, lo, hi, len(people))
        out.extend(f'{s} {P_AGE} "{a}"^^{XSD_INTEGER} .\n' for s, a in zip(people, ages.tolist(), strict=True))
    return out


def generate_lines(universities: int | None = None, triples: int | None = None, seed: int = 0,
                   materialize: bool = True) -> Iterator[list[str]]:
    """Yield chunks of N-Triples lines, one per department (the first one of a university also
    carries the university's own triples).  With `triples`, stop before the chunk that would
    exceed the target (the first department is always produced)."""
    if universities is None and triples is None:
        raise ValueError("give universities or triples")
    produced = 0
    u = 0
    while universities is None or u < universities:
        n_dept = int(np.random.default_rng([seed, u, 0xFFFF]).integers(15, 26))
        for d in range(n_dept):
            chunk = department_lines(seed, u, d, materialize)
            if d == 0:
                chunk = [f"{univ_iri(u)} {_T} {C_UNIV} .\n", f'{univ_iri(u)} {P_NAME} "University{u}" .\n',
                         *chunk]
            if universities is None and produced > 0 and produced + len(chunk) > triples:
                return
            produced += len(chunk)
            yield chunk
        u += 1


def parse_scale(text: str | int) -> int:
    """'1M' -> 1_000_000, '100k' -> 100_000, '2500' -> 2500."""
    if isinstance(text, int):
        return text
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    elif t.endswith("k"):
        mult, t = 1_000, t[:-1]
    return int(float(t) * mult)


def generate(path: str | os.PathLike, universities: int | None = None, triples: int | None = None,
             seed: int = 0, materialize: bool = True) -> dict:
    """Write an N-Triples file; returns {"path", "triples", "universities", "departments", "seconds"}."""
    t0 = time.perf_counter()
    n = 0
    n_chunks = 0
    n_univ = 0
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="\n", buffering=1 << 22) as f:
        for chunk in generate_lines(universities, triples, seed, materialize):
            n_chunks += 1
            if chunk[0].endswith(f"{_T} {C_UNIV} .\n"):
                n_univ += 1
            f.write("".join(chunk))
            n += len(chunk)
    os.replace(tmp, path)
    return {"path": os.fspath(path), "triples": n, "universities": n_univ, "departments": n_chunks,
            "seed": seed, "materialize": materialize, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench lubm", description="Generate LUBM-style N-Triples")
    ap.add_argument("--out", required=True, help="output .nt file")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--scale", default="1M", help="target triple count (e.g. 100k, 1M); default 1M")
    g.add_argument("--universities", type=int, help="number of universities (UBA's LUBM(N))")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-materialize", action="store_true", help="do not add ub:Professor / ub:Student types")
    a = ap.parse_args(argv)
    info = generate(a.out, universities=a.universities,
                    triples=None if a.universities else parse_scale(a.scale),
                    seed=a.seed, materialize=not a.no_materialize)
    print(f"wrote {info['triples']:,} triples ({info['universities']} universities, "
          f"{info['departments']} departments) to {info['path']} in {info['seconds']:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
