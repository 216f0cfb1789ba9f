"""docs/ARCHITECTURE.md names modules by path; every one must exist, so the doc
cannot go stale when code moves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
_CODE = re.compile(r"`([^`\s]+)`")
_SOURCES = ("engine", "server", "pipeline", "bench", "tests", "static")


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    """Backticked paths ending in ``.py`` or ``/`` that name nothing under ``root``.

    A bare file name (``windows.py``) is taken in the folder of the last path named
    before it on the same line (``engine/stream/progress.py``, ``windows.py``); with no
    such path on its line it must name exactly one module of the source folders."""
    missing = []
    modules = [p.name for d in _SOURCES for p in (root / d).rglob("*.py")]
    for line in text.splitlines():
        folder: str | None = None
        for token in _CODE.findall(line):
            if not (token.endswith(".py") or token.endswith("/")):
                continue
            if "/" in token.rstrip("/"):
                found = list(root.glob(token.rstrip("/"))) if "*" in token else [root / token]
                ok = bool(found) and all(p.is_dir() if token.endswith("/") else p.is_file() for p in found)
                folder = token.rsplit("/", 1)[0] if token.endswith(".py") else token.rstrip("/")
            elif folder is not None:
                ok = (root / folder / token).exists()
            else:
                ok = modules.count(token) == 1
            if not ok:
                missing.append(token)
    return missing


def test_every_module_path_in_architecture_md_exists():
    assert missing_paths(DOC.read_text()) == []


def test_the_check_finds_stale_paths():
    text = ("| x | `engine/errors.py`, `nonexistent.py` | y |\n"
            "`engine/nowhere.py` and `server/api/*.py` and `server/none/*.py` and `engine/kv/` and `engine/zz/`\n"
            "`manager.py` alone, `__init__.py` ambiguous\n")
    assert missing_paths(text) == ["nonexistent.py", "engine/nowhere.py", "server/none/*.py", "engine/zz/",
                                   "__init__.py"]
