"""Answers a submission borrowed rather than wrote: flagged for the instructor, never scored.

speclab implements every algorithm the labs ask for, so no grader can make borrowing impossible; it can make it
visible. The public check modules hold no instructor reference implementation (those stay in the instructor
sources' hidden cells): what a public check compares with is speclab's own function, where the lab's text says
so, or a value recorded on its own case (`speclab.checks.Expected`). Read from the submission's code cells (the
judge runs no learner code), this flags
an answer bound to something imported from speclab, or a function that calls speclab's own code the lab does not
offer (`verification.verify_block` in a `block_verify`); a use of the checks' `reference_*` names, of speclab's check
modules (by import, or by name in a string: `importlib`, `resources.files`), or of the recorded values and the
checks' insides through the notebook's `Lab` (`lab.expected`, `lab.cases`, a function's `__globals__`); and a
read of the instructor sources (`labs/source`).
"""
from __future__ import annotations

import ast
import re
import threading

# The grader grades submissions in threads (grade_folder's jobs); CPython 3.11 converts a parsed tree to
# Python objects with one recursion counter an interpreter, which two threads' ast.parse calls corrupt
# ("AST constructor recursion depth mismatch", python/cpython#106905), so parsing takes turns.
PARSE_LOCK = threading.Lock()

CHECK_MODULES = ("speclab.course.labs", "speclab.course.answers", "speclab.course.judge")
# what a notebook's Lab holds beside check() and score(): the recorded values and the cases, with their globals
LAB_INSIDES = ("expected", "cases", "load_public", "load_tests", "_run_case")
REACH_IN = ("__globals__", "__closure__", "__code__")


def _imports(tree: ast.AST) -> dict[str, str]:
    """Every name the cells bind by an import: name -> 'module.attribute' (or the module)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
    return bound


def _dotted(node: ast.AST, imports: dict[str, str]) -> str | None:
    """'speclab.theory.next_k' for an expression `theory.next_k` where `theory` came from speclab."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in imports:
        return ".".join([imports[node.id], *reversed(parts)])
    return None


def _delegations(module: ast.Module, imports: dict[str, str], by_name: dict[str, str], offered: str) -> list[str]:
    """Functions (answers, their helpers, lambdas) that call speclab's own code the lab does not offer: a
    speclab function the lab's text never names or names only to forbid ("Don't call `...`"), or one named like
    an answer the lab asks for (a wrapper
    around `speclab.measure.batching.crossover` is still speclab's crossover)."""
    flags = []
    # the text names some of speclab's functions only to forbid them ("Don't call `speclab.trees.leaf_paths`")
    forbidden = re.findall(r"[Dd]on't call `(speclab[\w.]*)`", offered)
    for node in ast.walk(module):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        owner = getattr(node, "name", None)
        who = f"{by_name[owner]}: `{owner}`" if owner in by_name else f"`{owner}`" if owner else "a lambda"
        for sub in ast.walk(node):
            source = _dotted(sub.func, imports) if isinstance(sub, ast.Call) else None
            if not source or not source.startswith("speclab") or getattr(sub.func, "id", None) in by_name:
                continue  # a call of an answer imported from speclab is flagged as that import already
            last = source.rsplit(".", 1)[-1]
            banned = any(source == f or source.startswith(f + ".") or last == f.rsplit(".", 1)[-1] for f in forbidden)
            if last in by_name or banned or not re.search(rf"\b{re.escape(last)}\b", offered):
                flags.append(f"{who} calls {source}, speclab's own code, which the lab does not offer")
    return flags


def borrowed(cells: list[str], answers: dict[str, str], offered: str | None = None) -> list[str]:
    """What to flag in a submission whose code cells are `cells`; `answers` maps question id -> the name of the
    function it asks for; `offered`, the lab's own text (the learner version: what it lets an answer call, such
    as `theory.expected_tokens`), turns on the check of calls into speclab. One line a finding, in the
    instructor's words; [] for a submission of its own."""
    trees = []
    for cell in cells:
        try:
            with PARSE_LOCK:
                trees.append(ast.parse(cell))
        except SyntaxError:
            continue   # a cell that does not parse (a magic left in, a typo) binds nothing here
    module = ast.Module(body=[stmt for tree in trees for stmt in tree.body], type_ignores=[])
    imports = _imports(module)
    flags: list[str] = []
    by_name = {name: qid for qid, name in answers.items()}
    for node in ast.walk(module):   # the answer bound to speclab's own function, by import or assignment
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name
                source = f"{node.module}.{alias.name}" if isinstance(node, ast.ImportFrom) else alias.name
                if name in by_name and source.startswith("speclab"):
                    flags.append(f"{by_name[name]}: `{name}` is imported from {source}")
        elif isinstance(node, ast.Assign):
            source = _dotted(node.value, imports)
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in by_name and source and source.startswith("speclab"):
                    flags.append(f"{by_name[target.id]}: `{target.id}` is {source}")
    if offered is not None:   # an answer that hands the work to speclab's own implementation
        flags += _delegations(module, imports, by_name, offered)
    for node in ast.walk(module):   # references and the checks' modules, anywhere in the notebook
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name and name.startswith("reference_"):
            flags.append(f"uses `{name}` from the lab's checks")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            flags += [f"imports {m}, the lab's checks" for m in names if m.startswith(CHECK_MODULES)]
    labs = {"lab"} | {t.id for node in ast.walk(module) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                      and (getattr(node.value.func, "id", None) or getattr(node.value.func, "attr", None)) == "Lab"
                      for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(module):   # the recorded values and the checks' insides, through the notebook's Lab
        if isinstance(node, ast.Attribute) and node.attr in LAB_INSIDES and isinstance(node.value, ast.Name) \
                and node.value.id in labs:
            flags.append(f"reads the lab's checks through `{node.value.id}.{node.attr}`")
        elif isinstance(node, ast.Attribute) and node.attr in REACH_IN:
            flags.append(f"reaches into a function's `{node.attr}` (the checks' own namespace)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value.startswith(CHECK_MODULES) or "course/labs" in node.value):
            flags.append(f"names the lab's checks in a string ({node.value[:60]!r})")
    for stmt in module.body:   # the instructor sources, by one path or by its parts ("labs", "source")
        strings = [n.value for n in ast.walk(stmt) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if any("labs/source" in s for s in strings) or ("labs" in strings and "source" in strings):
            flags.append("reads the instructor sources (labs/source)")
    return list(dict.fromkeys(flags))
