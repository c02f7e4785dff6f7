"""Docstrings say what and why in a few lines: none in speclab/ runs past 15 lines (measurements live in
records, the explanations in the chapters)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "speclab"
LIMIT = 15
# Modules whose owners have not trimmed them yet: each entry fails the test once it fits, so that it is
# removed here as it is trimmed (none now).
PENDING: set[str] = set()


def long_docstrings() -> dict[str, list[str]]:
    """file -> the names (module, class, function) whose docstring is longer than LIMIT lines."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and len(doc.splitlines()) > LIMIT:
                    where = str(path.relative_to(PACKAGE.parent))
                    found.setdefault(where, []).append(getattr(node, "name", "<module>"))
    return found


def test_no_docstring_runs_past_the_limit():
    over = {f: sorted(set(names)) for f, names in long_docstrings().items() if f not in PENDING}
    assert over == {}, f"docstrings over {LIMIT} lines: say what and why, and leave the rest to the chapters"


def test_pending_modules_are_still_pending():
    assert PENDING <= set(long_docstrings()), "a pending module fits now: remove it from PENDING"
