"""Locate the steering repo's shared/ folder (W3C suite, harness, CityBench).

CI clones the project with shared/ beside it; a developer may point
JINDOU_SHARED elsewhere. In CI a missing shared/ is an error, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    env = os.environ.get("JINDOU_SHARED")
    candidates = [Path(env)] if env else []
    candidates += [ROOT.parent / "shared", ROOT / "shared"]
    for c in candidates:
        if (c / "w3c-sparql").is_dir():
            return c
    if os.environ.get("CI"):
        raise RuntimeError("shared/ (W3C suite) not found beside the repository")
    pytest.skip("shared/ folder with the W3C suite not found (set JINDOU_SHARED)")
    raise AssertionError("unreachable")
