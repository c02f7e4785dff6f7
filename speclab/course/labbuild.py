"""Lab sources to learner versions, for lab authors and instructors.

One source per lab, `labs/source/labNN.ipynb`, holds the solutions and every test. Markers live in the
*text* of ordinary cells (never in notebook or cell metadata, which Colab and other editors drop),
using otter-grader's words so that a later move to otter stays cheap:

    # BEGIN SOLUTION ... # END SOLUTION   the lines between become `# YOUR CODE HERE` and `...`
    x = 0.5  # SOLUTION                   the right-hand side becomes `...`
    # TESTS q1          (first line)      a cell of public checks: learners can read them
    # HIDDEN TESTS q1   (first line)      a cell of hidden checks: only the grader runs them
    ## Ignore ##        (first line)      an instructor-only cell
    # NBVAL_CHECK_OUTPUT                  kept in the source, dropped from the learner version

`build` (`python -m speclab labs build`, or `python -m speclab.grading build`) writes the learner version
`labs/labNN.ipynb` (solutions stubbed, test cells removed, outputs cleared, stable cell ids) and
`speclab/course/labs/labNN.py` (the public checks, shipped in the package so that `pip install speclab` brings
them to Colab). The hidden checks are never shipped: the grader (`speclab.course.grading`) reads them from the
source notebook. Nor are the references the checks compare with: they live in hidden cells
(`lab.expected.use(name=reference_...)`), and `build` runs the public cases on the solutions to record what
each reference returned there, into `speclab/course/labs/labNN_expected.py` (`speclab.checks.Expected`). `stale` says which generated files differ from a fresh build (CI checks it is empty).
"""
from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

import nbformat
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from speclab.course.checks import Lab, literal

TEST_HEADER = re.compile(r"^#\s*(HIDDEN\s+)?TESTS\b")
IGNORE_HEADER = re.compile(r"^##\s*Ignore\s*##")
LAB_NAME = re.compile(r"""Lab\(\s*["'](lab\d+)["']""")
STUB = "# YOUR CODE HERE"


def _first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


def cell_kind(cell: dict) -> str:
    """'public' or 'hidden' test cell, 'ignore' (instructor only), or 'content'."""
    if cell["cell_type"] != "code":
        return "content"
    first = _first_line(cell["source"])
    m = TEST_HEADER.match(first)
    if m:
        return "hidden" if m.group(1) else "public"
    if IGNORE_HEADER.match(first):
        return "ignore"
    return "content"


def strip_solutions(source: str, keep: bool = False, where: str = "") -> str:
    """Replace each solution block by a stub (or, with keep=True, only drop the markers)."""
    out: list[str] = []
    inside = False
    for line in source.splitlines():
        s = line.strip()
        indent = line[:len(line) - len(line.lstrip())]
        if s.startswith("# BEGIN SOLUTION"):
            if inside:
                raise ValueError(f"{where}: BEGIN SOLUTION inside another solution block")
            inside = True
            if not keep:
                out += [indent + STUB, indent + "..."]
            continue
        if s.startswith("# END SOLUTION"):
            if not inside:
                raise ValueError(f"{where}: END SOLUTION without BEGIN SOLUTION")
            inside = False
            continue
        if inside:
            if keep:
                out.append(line)
            continue
        m = re.match(r"^(\s*[^=#]+?)\s*=\s*(.+?)\s*#\s*SOLUTION\s*$", line)
        if m:
            out.append(f"{m.group(1)} = {m.group(2)}" if keep else f"{m.group(1)} = ...  {STUB}")
            continue
        out.append(line)
    if inside:
        raise ValueError(f"{where}: BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out)


def learner_notebook(source_nb, lab: str, keep_solutions: bool = False):
    """The learner version of an instructor notebook (nbformat node); deterministic."""
    cells = []
    for i, cell in enumerate(source_nb.cells):
        if cell_kind(cell) != "content":
            continue
        text = cell["source"]
        if cell["cell_type"] == "code":
            text = strip_solutions(text, keep_solutions, where=f"{lab} cell {i}")
            text = "\n".join(line for line in text.splitlines() if line.strip() != "# NBVAL_CHECK_OUTPUT")
            new = new_code_cell(text)
        elif cell["cell_type"] == "markdown":
            new = new_markdown_cell(text)
        else:
            new = nbformat.v4.new_raw_cell(text)
        new["id"] = f"{lab}-{len(cells):02d}"
        cells.append(new)
    nb = new_notebook(cells=cells)
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    return nb


def checks_source(source_nb, hidden: bool) -> str:
    """The code of the public test cells (hidden=False) or of all test cells in notebook order."""
    kinds = ("public", "hidden") if hidden else ("public",)
    parts = [cell["source"].rstrip() + "\n" for cell in source_nb.cells if cell_kind(cell) in kinds]
    return "\n\n".join(parts)


def public_module(source_nb, lab: str) -> str:
    header = (f'"""Public checks of {lab}: generated by `python -m speclab labs build` from '
              f"labs/source/{lab}.ipynb.\n\nDo not edit: change the source notebook and rebuild. Learners may read these;\n"
              'the grade also counts hidden checks of the same ideas, kept out of the package.\n"""\n'
              'if "lab" not in globals():  # imported as a module rather than run by speclab.checks.Lab\n'
              "    from speclab.checks import Lab\n"
              f"    lab = Lab({lab!r}, public_tests=False)\n\n")
    return header + checks_source(source_nb, hidden=False)


def solution_namespace(source_nb, lab: str) -> dict:
    """The lab's answers as the solutions define them: its answer cells (and the cell that makes `lab`) run in
    one namespace, in notebook order; no demo cell runs."""
    ns: dict = {"__name__": "__main__"}
    for i, cell in enumerate(source_nb.cells):
        if cell["cell_type"] == "code" and cell_kind(cell) == "content" and (
                "SOLUTION" in cell["source"] or "Lab(" in cell["source"]):
            exec(compile(strip_solutions(cell["source"], keep=True, where=f"{lab} cell {i}"), f"<{lab} answers>",
                         "exec"), ns)
    return ns


def expected_module(source_nb, lab: str) -> str | None:
    """The recorded expected values of the lab's public cases (None when its checks use no reference): every
    public case runs on the solutions with the references of the hidden cells, and each `lab.expected(...)`
    call's value is written out, with what the reference wrote into its arguments."""
    checker = Lab(lab, public_tests=False, time_limit=None)
    checker.load_tests(checks_source(source_nb, hidden=True), f"<{lab} tests>")
    if not checker.expected.refs:
        return None
    ns = solution_namespace(source_nb, lab)
    checker.expected.recording = recording = {}
    for case in [c for c in checker.cases if not c.hidden]:
        passed, message, _ = checker._run_case(case, ns.get(checker.questions[case.question].answer))
        if not passed:
            raise ValueError(f"{lab} {case.question} {case.name!r} fails on the solution: {message}")
    lines = [f'"""Expected values of the public checks of {lab}: recorded by `python -m speclab labs build` from',
             f"labs/source/{lab}.ipynb, by running each public case on the solutions with the instructor's references.",
             "",
             "Do not edit. One entry per call of `lab.expected(name, ...)` in a public case: (question, case, name,",
             "index) -> (a digest of the inputs, the value, what the reference wrote into its arguments).",
             '"""', "from speclab.checks import recorded_tensor as T", "", "VALUES = {"]
    lines += [f"    {literal(key)}: {literal(value)}," for key, value in recording.items()]
    return "\n".join(lines + ["}", ""])


def same_expected(a: str, b: str) -> bool:
    """Whether two recorded expected-value files hold the same entries, floats equal to 1e-6 (a float's last
    bits may differ from one machine to another)."""
    def values(text):
        scope: dict = {}
        exec(compile(text, "<expected>", "exec"), scope)
        return scope["VALUES"]

    def close(x, y) -> bool:
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                    and x.dtype == y.dtype and bool(torch.allclose(x.double(), y.double(), atol=1e-6, rtol=1e-6,
                                                                   equal_nan=True)))
        if isinstance(x, float) and isinstance(y, (int, float)):
            return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6) or (math.isnan(x) and math.isnan(y))
        if isinstance(x, (list, tuple)):
            return type(x) is type(y) and len(x) == len(y) and all(close(u, v) for u, v in zip(x, y))
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(close(x[k], y[k]) for k in x)
        return x == y

    try:
        return close(values(a), values(b))
    except Exception:  # noqa: BLE001 (a file that does not load is not the same)
        return False


def find_root(root: str | Path | None = None) -> Path:
    """The repository root: the given one, else the first of the working directory and the directory
    above this package that holds labs/source."""
    if root is not None:
        return Path(root)
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (candidate / "labs" / "source").is_dir():
            return candidate
    raise FileNotFoundError("no labs/source folder found here or next to speclab: run this from the repository "
                            "root, or pass --root / --source")


def build(root: str | Path | None = None, out_root: str | Path | None = None) -> list[Path]:
    """Write every learner notebook (labs/labNN.ipynb) and public-check file (speclab/course/labs/labNN.py)
    from labs/source/labNN.ipynb under `root`, into `out_root` (default: root). Returns the written paths."""
    root = find_root(root)
    out_root = Path(out_root) if out_root is not None else root
    sources = sorted((root / "labs" / "source").glob("lab*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no lab sources in {root / 'labs' / 'source'}")
    written = []
    for src in sources:
        lab = src.stem
        nb = nbformat.read(src, as_version=4)
        learner = out_root / "labs" / f"{lab}.ipynb"
        tests = out_root / "speclab" / "course" / "labs" / f"{lab}.py"
        learner.parent.mkdir(parents=True, exist_ok=True)
        tests.parent.mkdir(parents=True, exist_ok=True)
        learner.write_text(nbformat.writes(learner_notebook(nb, lab)) + "\n", encoding="utf-8")
        tests.write_text(public_module(nb, lab), encoding="utf-8")
        written += [learner, tests]
        values = expected_module(nb, lab)
        if values is not None:
            recorded = tests.with_name(f"{lab}_expected.py")
            recorded.write_text(values, encoding="utf-8")
            written.append(recorded)
    return written


def stale(root: str | Path | None = None) -> list[str]:
    """The generated files that differ from a fresh build (empty when everything is up to date)."""
    root = find_root(root)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = build(root, tmp)
        problems = []
        for path in fresh:
            rel = path.relative_to(tmp)
            committed = root / rel
            if not committed.exists():
                problems.append(str(rel))
            elif committed.read_bytes() != path.read_bytes() and not (
                    path.name.endswith("_expected.py") and same_expected(committed.read_text(), path.read_text())):
                problems.append(str(rel))
        expected = {p.relative_to(tmp) for p in fresh}
        for pattern in ("labs/lab*.ipynb", "speclab/course/labs/lab*.py"):
            for extra in root.glob(pattern):
                if extra.relative_to(root) not in expected:
                    problems.append(f"{extra.relative_to(root)} (no source in labs/source)")
    return problems
