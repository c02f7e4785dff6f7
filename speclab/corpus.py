"""The course's corpus: the Python standard library of the running interpreter.

It is on every machine (Colab included), it is code (where speculative decoding shines) and its
docstrings give a second, prose-like workload. Files are split into train and held-out by a hash of
their path relative to the library root, so the split is the same on every machine that has the file.
"""
from __future__ import annotations

import ast
import hashlib
import random
import sysconfig
from pathlib import Path

HELDOUT_EVERY = 20  # one file in 20 is held out


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    """Every .py file of the standard library, sorted, site-packages excluded."""
    root = root or stdlib_root()
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts)


def is_heldout(path: Path, root: Path | None = None) -> bool:
    rel = path.relative_to(root or stdlib_root()).as_posix()
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % HELDOUT_EVERY == 0


def read_source(path: Path) -> str | None:
    """The file's text, or None for files that are not UTF-8 (a few test fixtures)."""
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def split_texts(root: Path | None = None, max_files: int | None = None) -> tuple[list[str], list[str]]:
    """(train texts, held-out texts), one string per file."""
    root = root or stdlib_root()
    train, heldout = [], []
    for path in stdlib_files(root)[:max_files]:
        text = read_source(path)
        if text and text.strip():
            (heldout if is_heldout(path, root) else train).append(text)
    return train, heldout


def docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of a source file: the prose workload."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return [d for n in nodes if (d := ast.get_docstring(n)) and len(d) > 200]


def heldout_prompts(kind: str = "code", n: int = 8, chars: int = 400, seed: int = 0) -> list[str]:
    """n prompts cut from held-out files: 'code' (a window of source) or 'prose' (a docstring's start).

    A code prompt starts at a line boundary, so the model continues a real file mid-way. Past one code
    prompt per held-out file (64 of them), later prompts are further windows of the same files, each
    from its own random line (a batch of 64 sequences, chapter 11, needs 64 beside the tuning set).
    """
    if kind not in ("code", "prose"):
        raise ValueError(f"kind must be 'code' or 'prose', not {kind!r}")
    _, heldout = split_texts()
    rng = random.Random(seed)
    prompts: list[str] = []
    pool = heldout[:]
    rng.shuffle(pool)
    for text in pool + (pool * 3 if kind == "code" else []):  # the first pass's prompts never change
        if len(prompts) == n:
            break
        if kind == "prose":
            docs = docstrings(text)
            if docs:
                prompts.append(rng.choice(docs)[:chars])
            continue
        lines = text.splitlines(keepends=True)
        if len(text) < 3 * chars:
            continue
        start = rng.randrange(len(lines) // 2)
        prompt = "".join(lines[start:])[:chars]
        prompts.append(prompt[: prompt.rfind("\n") + 1] or prompt)
    return prompts
