"""In-process adapter for the W3C SPARQL harness (shared/tools/w3c_sparql_harness.py).

    python shared/tools/w3c_sparql_harness.py --adapter tests/w3c_adapter.py:factory --suite sparql11

``factory()`` returns an object with reset(), load(path, graph, base, mime)
and query(text, base, accept) -> (content_type, body) built with our own
serializers, so the run exercises parser, executor and serializers without
HTTP.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.database import Database  # noqa: E402


class JindouAdapter:
    def __init__(self):
        self.db = None
        self.reset()

    def reset(self):
        self.db = Database(shards=2, query_timeout=30.0)

    def load(self, path, graph, base, mime):
        self.db.load_file(str(path), graph=graph, format=mime, base=base)

    def query(self, text, base, accept):
        from engine.exec import serialize as ser

        res = self.db.query(text, base=base or None)
        if res.is_graph:
            mt = "application/n-triples"
        elif accept.startswith("text/csv"):
            mt = "text/csv"
        else:
            mt = "application/sparql-results+json"
        body = ser.serialize(res, mt)
        return mt, body


def factory():
    return JindouAdapter()
