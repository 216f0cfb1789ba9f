"""Small-window queries with ``+`` ``*`` ``?`` paths over the LSBench small streams (issue 13
item 2, :mod:`engine.stream.tiny_closure`): shapes of the kind the shape probe's S34 / S35 /
S106 are, written independently of them, run as :mod:`bench.shape_probe` runs its shapes
(maintained / generated / instants, Jindou's median instant, the composite's woken).

    cd /tmp && PYTHONPATH=<tree> python -m bench.closure_probe [--minutes 1]
"""

from __future__ import annotations

import argparse
import sys

from bench import shape_probe as sp
from bench.shape_probe import _G, _U0, _w

#: shape -> C-SPARQL text (without REGISTER)
SHAPES = {
    "knows-opt-const": f"""SELECT ?post ?u
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:knows? {_U0} }}""",
    "knows-plus-from-const": f"""SELECT ?post ?u
{_w("post")} {_G}
WHERE {{ {_U0} foaf:knows+ ?u . ?post sioc:has_creator ?u }}""",
    "knows-seq-star-count": f"""SELECT (COUNT(*) AS ?n)
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . {_U0} foaf:knows/foaf:knows* ?u }}""",
    "city-plus-group": f"""SELECT ?city (COUNT(?post) AS ?n)
{_w("post")} {_G}
WHERE {{ ?post sioc:has_creator ?u . ?u foaf:based_near+ ?city }}
GROUP BY ?city""",
    "gps-knows-inv-opt": f"""SELECT ?r ?lat
{_w("gps")} {_G}
WHERE {{ ?r sib:user ?u ; geo:lat ?lat . {_U0} ^foaf:knows? ?u }}""",
    "like-type-star": f"""SELECT ?l ?post
{_w("postlike")} {_w("post")} {_G}
WHERE {{ ?l sib:like ?post . ?post a ?c . ?c rdfs:subClassOf* sioc:Post . ?l foaf:based_near+ ?city }}""",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.closure_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    a = ap.parse_args(argv)
    sp.SHAPES = SHAPES   # (shape_probe.run reads its module's table)
    rows = sp.run(None, a.minutes, lambda m: print(m, file=sys.stderr))
    print(sp.markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
