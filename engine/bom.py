"""The UTF-8 byte order mark at the start of a text body.

Editors on Windows save UTF-8 files with a leading BOM (EF BB BF), and clients post such
files as they are: a query, an update, a ``REGISTER`` text, a form, a JSON or ndjson body, an
RDF document (graph store, stream graph elements; the loader also reads files). The mark is
not part of the text, so every place that decodes a request body as text drops one leading
mark (:func:`strip_bom`; ``server.api.common.decode_body`` for texts, ``parse_form``,
``json_object``, the lane's POST path, ``engine.stream.adaptor.parse_ndjson``,
``engine.kv.loader``); anywhere else -- inside a text, in a URL parameter, a second mark -- it
stays a character and the parser says where it is.
"""

from __future__ import annotations

__all__ = ["BOM", "strip_bom"]

BOM = b"\xef\xbb\xbf"


def strip_bom(data):
    """``data`` (bytes, bytearray or memoryview) without one leading UTF-8 BOM."""
    return data[3:] if data[:3] == BOM else data
