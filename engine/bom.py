"""The UTF-8 byte order mark at the start of a text body.

Editors on Windows save UTF-8 files with a leading BOM (EF BB BF), and clients post such
files as they are: a query, an update, a ``REGISTER`` text, an ndjson or Turtle stream
element body. The mark is not part of the text, so every place that decodes a request body
as text drops one leading mark (:func:`strip_bom`); anywhere else -- inside a text, in a URL
parameter, a second mark -- it stays a character and the parser says where it is.
"""

from __future__ import annotations

__all__ = ["BOM", "strip_bom"]

BOM = b"\xef\xbb\xbf"


def strip_bom(data):
    """``data`` (bytes, bytearray or memoryview) without one leading UTF-8 BOM."""
    return data[3:] if data[:3] == BOM else data
