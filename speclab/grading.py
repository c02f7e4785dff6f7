"""Graded labs: instant checks for learners, learner versions and folder grading for instructors.

One source per lab, `labs/source/labNN.ipynb`, holds the solutions and every test. Markers live in the
*text* of ordinary cells (never in notebook or cell metadata, which Colab and other editors drop),
using otter-grader's words so that a later move to otter stays cheap:

    # BEGIN SOLUTION ... # END SOLUTION   the lines between become `# YOUR CODE HERE` and `...`
    x = 0.5  # SOLUTION                   the right-hand side becomes `...`
    # TESTS q1          (first line)      a cell of public checks: learners can read them
    # HIDDEN TESTS q1   (first line)      a cell of hidden checks: only the grader runs them
    ## Ignore ##        (first line)      an instructor-only cell
    # NBVAL_CHECK_OUTPUT                  kept in the source, dropped from the learner version

`python -m speclab.grading build` writes the learner version `labs/labNN.ipynb` (solutions stubbed,
test cells removed, outputs cleared, stable cell ids) and `speclab/labs/labNN.py` (the public checks,
shipped in the package so that `pip install speclab` brings them to Colab). The hidden checks are
never shipped: the grader reads them from the source notebook.

A learner calls `check("q1")` (or `check(my_function)`) after each question: it runs the checks of
that question against the names the notebook defined, prints the first failing case in words with a
hint (or a pass), never raises, and returns a `CheckResult`. `score()` prints the whole lab.

`python -m speclab.grading grade SUBMISSIONS --out scores.csv --timeout 300` runs each submitted
notebook in its own temporary directory and kernel process group, with no network where the machine
allows it, under a time limit; then it runs every public and hidden check and writes one CSV row per
notebook. It is not a security sandbox: run it on a machine (or container) you can throw away.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import linecache
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CASE_TIME_LIMIT_S = 60.0  # one case of one question; an endless loop in a learner's function ends here


# ================================================================ what a check case uses
class CheckFailed(AssertionError):
    """Raised by a case (through `expect`) with a message written for the learner."""


class _CaseTimeout(BaseException):  # BaseException: a learner's `except Exception` must not swallow it
    pass


def expect(condition: Any, message: str) -> None:
    """Fail the current case with `message` (what happened, in words) unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


def show(x: Any, digits: int = 4) -> str:
    """A short, readable form of a value for a message: floats rounded, long lists and tensors summarised."""
    x = plain(x)
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return repr(x)
        return f"{x:.{digits}g}" if abs(x) < 1e5 else f"{x:.{digits}e}"
    if isinstance(x, list):
        if x and isinstance(x[0], list):
            if len(x) * len(x[0]) > 16:
                return f"a {len(x)} x {len(x[0])} table starting {show(x[0][:4], digits)[:-1]}, ...]"
        elif len(x) > 16:
            return f"a list of {len(x)} items starting {show(x[:4], digits)[:-1]}, ...]"
        return "[" + ", ".join(show(v, digits) for v in x) + "]"
    return repr(x)


def plain(x: Any) -> Any:
    """Tensors, numpy arrays and tuples as plain Python (lists, floats, ints), for comparing and showing."""
    if hasattr(x, "detach") and hasattr(x, "tolist"):  # torch.Tensor
        x = x.detach().cpu().tolist()
    elif hasattr(x, "tolist") and type(x).__module__.startswith("numpy"):
        x = x.tolist()
    if isinstance(x, tuple):
        return [plain(v) for v in x]
    if isinstance(x, list):
        return [plain(v) for v in x]
    return x


UNFINISHED = ("it looks unfinished: write your code where it says `# YOUR CODE HERE` (in place of the `...`) "
              "and `return` the result")


def unfinished(call: str) -> str:
    """The message for a function that returned None: most likely the untouched stub."""
    return f"{call} returned None. {UNFINISHED[0].upper() + UNFINISHED[1:]}."


def _mismatch(call: str, got: Any, want: str, why: str = "") -> str:
    """'call returned X; expected Y (why)', or, for an untouched stub, a message that says so."""
    tail = f" ({why})" if why else ""
    if got is None:
        return f"{call} returned None, not {want}{tail}. {UNFINISHED[0].upper() + UNFINISHED[1:]}."
    if got is Ellipsis:
        return f"{call} is still `...`, not {want}{tail}: replace it with your answer."
    return f"{call} returned {show(got)}; expected {want}{tail}"


def expect_equal(got: Any, want: Any, call: str, why: str = "") -> None:
    """Exact equality after `plain` (so a tensor, a tuple and a list of the same numbers are equal)."""
    g, w = plain(got), plain(want)
    if isinstance(w, bool) or isinstance(g, bool):
        ok = type(g) is type(w) and g == w
    else:
        ok = g == w
    expect(ok, _mismatch(call, got, show(want), why))


def expect_close(got: Any, want: float, call: str, tol: float = 1e-6, rel: float = 1e-6, why: str = "") -> None:
    """A number within tol (absolute) or rel (relative) of `want`; nan expects nan."""
    g = plain(got)
    if isinstance(g, list) and len(g) == 1:
        g = g[0]
    tail = f" ({why})" if why else ""
    msg = _mismatch(call, got, show(want, 6), why)
    if not isinstance(g, (int, float)) or isinstance(g, bool):
        raise CheckFailed(msg if got is None or got is Ellipsis else
                          f"{call} returned {show(got)} ({type(got).__name__}); expected a number, {show(want, 6)}{tail}")
    if isinstance(want, float) and math.isnan(want):
        expect(math.isnan(g), msg)
        return
    expect(not math.isnan(g) and abs(g - want) <= max(tol, rel * abs(want)), msg)


def expect_allclose(got: Any, want: Any, call: str, atol: float = 1e-5, why: str = "") -> None:
    """A tensor (or nested list) of the same shape as `want`, element by element within atol."""
    import torch
    expect(got is not None, _mismatch(call, got, "a tensor like " + show(want), why))
    try:
        g = torch.as_tensor(plain(got), dtype=torch.float64)
    except (TypeError, ValueError):
        raise CheckFailed(f"{call} returned {type(got).__name__} {show(got)}; expected a tensor like {show(want)}")
    w = torch.as_tensor(plain(want), dtype=torch.float64)
    expect(g.shape == w.shape, f"{call} returned shape {tuple(g.shape)}; expected shape {tuple(w.shape)}"
           + (f" ({why})" if why else ""))
    bad = ~torch.isclose(g, w, atol=atol, rtol=0, equal_nan=True)
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        where = idx[0] if len(idx) == 1 else idx
        raise CheckFailed(f"{call} returned {show(g)}; expected {show(w)}: at index {where} you have "
                          f"{show(float(g[idx]))}, expected {show(float(w[idx]))}" + (f" ({why})" if why else ""))


def expect_distribution(counts: Any, probs: Any, what: str, p_min: float = 1e-4, why: str = "") -> None:
    """Observed counts must be a plausible sample of `probs` (chi-square test, p-value >= p_min; with
    the fixed seeds of a case a correct answer passes every time). Mass where probs is 0 fails at once."""
    from scipy.stats import chisquare
    c = [float(v) for v in plain(counts)]
    p = [float(v) for v in plain(probs)]
    n = sum(c)
    for i, (ci, pi) in enumerate(zip(c, p)):
        expect(not (pi == 0 and ci > 0), f"{what}: outcome {i} came up {int(ci)} times but has probability 0"
               + (f" ({why})" if why else ""))
    keep = [i for i, pi in enumerate(p) if pi > 0]
    obs = [c[i] for i in keep]
    exp = [p[i] * n / sum(p[j] for j in keep) for i in keep]
    pvalue = 1.0 if len(keep) < 2 else float(chisquare(obs, exp).pvalue)
    freq = [round(ci / n, 3) for ci in c] if n else c
    expect(pvalue >= p_min, f"{what}: frequencies {freq} over {int(n)} draws, but the correct probabilities are "
           f"{[round(pi, 3) for pi in p]} (chi-square p-value {pvalue:.1e})" + (f" ({why})" if why else ""))


# ================================================================ results
@dataclass
class CaseResult:
    question: str
    name: str
    passed: bool
    message: str = ""
    hint: str = ""
    hidden: bool = False
    printed: str = ""


@dataclass
class CheckResult:
    """What `check` found for one question. `str(result)` is the report `check` printed."""

    lab: str
    question: str
    answer: str
    cases: list[CaseResult] = field(default_factory=list)
    points: float = 1.0
    error: str = ""

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def n_passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def passed(self) -> bool:
        return not self.error and self.total > 0 and self.n_passed == self.total

    @property
    def first_failure(self) -> CaseResult | None:
        return next((c for c in self.cases if not c.passed), None)

    @property
    def earned(self) -> float:
        return self.points * self.n_passed / self.total if self.total else 0.0

    def _kinds(self) -> str:
        hidden = sum(c.hidden for c in self.cases)
        if not hidden:
            return f"{self.total} public check{'s' * (self.total != 1)}"
        return f"{self.total} checks ({self.total - hidden} public, {hidden} hidden)"

    def report(self) -> str:
        head = f"{self.question} · {self.answer}" if self.answer else self.question
        if self.error:
            return f"{head}: {self.error}"
        if self.passed:
            return f"✓ {head}: all {self._kinds()} passed."
        bad = self.first_failure
        lines = [f"✗ {head}: {self.n_passed} of {self._kinds()} passed.",
                 f"  First failing check: {bad.name}",
                 f"  What happened: {bad.message}"]
        if bad.printed:
            lines.append("  Your code printed: " + bad.printed.strip()[:500].replace("\n", "\n    "))
        if bad.hint:
            lines.append(f"  Hint: {bad.hint}")
        return "\n".join(lines)

    __str__ = report

    def __repr__(self) -> str:
        return f"CheckResult({self.question!r}, passed {self.n_passed}/{self.total})"

    def _ipython_display_(self) -> None:
        """`check` has already printed the report; showing the object again would repeat it."""


@dataclass
class ScoreSummary:
    lab: str
    results: list[CheckResult]

    @property
    def points(self) -> float:
        return sum(r.earned for r in self.results)

    @property
    def max_points(self) -> float:
        return sum(r.points for r in self.results)

    @property
    def all_passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def report(self) -> str:
        hidden = any(c.hidden for r in self.results for c in r.cases)
        lines = [f"{self.lab}: score over the {'public and hidden' if hidden else 'public'} checks"]
        width = max((len(r.answer) for r in self.results), default=0)
        for r in self.results:
            mark = "✓" if r.passed else "✗"
            lines.append(f"  {mark} {r.question:<4} {r.answer:<{width}}  {r.n_passed:>2}/{r.total:<2} checks   "
                         f"{r.earned:.2f} of {r.points:g} points")
        done = sum(r.passed for r in self.results)
        lines.append(f"  Total: {self.points:.2f} of {self.max_points:g} points; "
                     f"{done} of {len(self.results)} questions complete.")
        if not hidden:
            lines.append("  (Public checks only: the grade also counts hidden checks of the same ideas.)")
        return "\n".join(lines)

    __str__ = report

    def __repr__(self) -> str:
        return f"ScoreSummary({self.lab!r}, {self.points:.2f}/{self.max_points:g})"

    def _ipython_display_(self) -> None:
        """`score` has already printed the report."""


# ================================================================ the lab: questions, cases, check, score
@dataclass
class Question:
    qid: str
    answer: str
    points: float = 1.0
    title: str = ""


@dataclass
class Case:
    question: str
    name: str
    func: Callable[[Any], None]
    hint: str = ""
    hidden: bool = False


class Lab:
    """The questions and check cases of one lab.

    In a learner notebook, `Lab("lab01")` finds no cases in the notebook and loads the public checks
    shipped in `speclab/labs/lab01.py` the first time `check` or `score` runs. In the instructor source,
    the test cells register the cases themselves (public and hidden), so nothing is loaded.
    """

    def __init__(self, name: str, public_tests: bool = True, time_limit: float | None = CASE_TIME_LIMIT_S):
        self.name = name
        self.questions: dict[str, Question] = {}
        self.cases: list[Case] = []
        self.time_limit = time_limit
        self._load_public = public_tests
        self._test_files: set[str] = {__file__}

    # ---- registering (test cells, or the packaged public file)
    def question(self, qid: str, answer: str, points: float = 1.0, title: str = "") -> None:
        """Declare question `qid`: the learner defines the name `answer` (a function or a value)."""
        self._load_public = False
        self.questions[qid] = Question(qid, answer, points, title)

    def case(self, qid: str, name: str, hint: str = "", hidden: bool = False):
        """Decorator: `func(answer)` is one check case of question `qid`; it raises CheckFailed (via
        `expect`) with a message for the learner. Re-registering a (qid, name) replaces the old case."""
        self._load_public = False

        def register(func: Callable[[Any], None]) -> Callable[[Any], None]:
            self._test_files.add(func.__code__.co_filename)
            self.cases = [c for c in self.cases if (c.question, c.name) != (qid, name)]
            self.cases.append(Case(qid, name, func, hint, hidden))
            return func
        return register

    def load_public(self) -> None:
        """Run the public checks shipped with speclab (speclab/labs/<name>.py) against this Lab."""
        from importlib import resources
        path = resources.files("speclab.labs").joinpath(f"{self.name}.py")
        if not path.is_file():
            raise FileNotFoundError(f"speclab has no public checks for {self.name!r}: is speclab up to date? "
                                    "(pip install -U speclab, or rerun the Colab setup cell)")
        self.load_tests(path.read_text(encoding="utf-8"), str(path))

    def load_tests(self, source: str, filename: str = "<lab tests>") -> None:
        """Execute test code (test cells or a public-check file) with `lab` bound to this Lab."""
        self._test_files.add(filename)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), {"lab": self, "__name__": f"speclab.labs.{self.name}"})
        self._load_public = False

    def _ensure_loaded(self) -> None:
        if self._load_public:
            self.load_public()

    # ---- running
    def resolve(self, q: Any) -> Question | None:
        """A question from its id ("q1"), its answer's name, or the answer object itself."""
        if isinstance(q, str):
            if q in self.questions:
                return self.questions[q]
            return next((x for x in self.questions.values() if x.answer == q), None)
        name = getattr(q, "__name__", None)
        return next((x for x in self.questions.values() if x.answer == name), None)

    def run(self, qid: str, ns: dict, hidden: bool = True) -> CheckResult:
        """Every case of question `qid` against the namespace `ns`."""
        question = self.questions[qid]
        result = CheckResult(self.name, qid, question.answer, points=question.points)
        cases = [c for c in self.cases if c.question == qid and (hidden or not c.hidden)]
        if not cases:
            result.error = "this question has no check cases (a defect of the lab: please report it)"
            return result
        missing = question.answer not in ns
        answer = ns.get(question.answer)
        timed_out = False
        for case in cases:
            if missing:
                message = (f"`{question.answer}` is not defined: run the cell where you wrote it "
                           "(Shift+Enter), then run this check again")
                result.cases.append(CaseResult(qid, case.name, False, message, case.hint, case.hidden))
                continue
            if timed_out:
                result.cases.append(CaseResult(qid, case.name, False, "not run: an earlier case took too long",
                                               case.hint, case.hidden))
                continue
            passed, message, printed = self._run_case(case, answer)
            timed_out = message.startswith("took longer than")
            result.cases.append(CaseResult(qid, case.name, passed, message, case.hint, case.hidden, printed))
        return result

    def _run_case(self, case: Case, answer: Any) -> tuple[bool, str, str]:
        out = io.StringIO()
        seed = zlib.crc32(f"{self.name}/{case.question}/{case.name}".encode())
        try:
            with _isolated_rng(seed), _time_limit(self.time_limit), contextlib.redirect_stdout(out):
                case.func(answer)
            return True, "", ""
        except CheckFailed as err:
            return False, str(err), out.getvalue()
        except _CaseTimeout:
            return False, (f"took longer than {self.time_limit:g} s: is there an endless loop, or a loop over "
                           "something much larger than needed?"), out.getvalue()
        except NotImplementedError:
            return False, f"not attempted yet ({UNFINISHED})", out.getvalue()
        except Exception as err:  # noqa: BLE001 (whatever the learner's code raises becomes a message)
            return False, self._describe_error(err), out.getvalue()

    def _describe_error(self, err: Exception) -> str:
        frames = traceback.extract_tb(err.__traceback__)
        library = (sys.prefix, sys.base_prefix, os.path.dirname(os.__file__), os.path.dirname(__file__))
        mine = [f for f in frames if f.filename not in self._test_files
                and not any(f.filename.startswith(p) for p in library if p)]
        text = f"{type(err).__name__}: {err}".strip()
        if mine:
            f = mine[-1]
            line = (f.line or "").strip()
            where = f" in `{f.name}`" if f.name not in ("<module>",) else ""
            return f"your code raised {text}{where}" + (f", at the line `{line}`" if line else "")
        return f"the check could not use what your code returned: {text}"

    def check(self, q: Any, ns: dict | None = None) -> CheckResult:
        """Run the checks of one question and print what happened. Never raises."""
        ns = ns if ns is not None else sys._getframe(1).f_globals
        try:
            self._ensure_loaded()
            question = self.resolve(q)
            if question is None:
                known = ", ".join(f"{x.qid} ({x.answer})" for x in self.questions.values())
                result = CheckResult(self.name, str(getattr(q, "__name__", q)), "",
                                     error=f"no such question in {self.name}; the questions are {known}")
            else:
                result = self.run(question.qid, ns)
        except Exception as err:  # noqa: BLE001 (a check never raises)
            result = CheckResult(self.name, str(q), "", error=f"the check itself failed: {type(err).__name__}: {err}")
        print(result.report())
        return result

    def score(self, ns: dict | None = None) -> ScoreSummary:
        """Run every question's checks and print the score of the lab. Never raises."""
        ns = ns if ns is not None else sys._getframe(1).f_globals
        try:
            self._ensure_loaded()
            summary = ScoreSummary(self.name, [self.run(qid, ns) for qid in self.questions])
            print(summary.report())
        except Exception as err:  # noqa: BLE001
            summary = ScoreSummary(self.name, [])
            print(f"{self.name}: the score could not be computed: {type(err).__name__}: {err}")
        return summary


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    usable = (seconds and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def alarm(signum, frame):
        raise _CaseTimeout()
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _isolated_rng(seed: int):
    """Each case starts from its own seed (so results repeat) and leaves the notebook's RNGs as they were."""
    import random

    import numpy as np
    import torch
    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


# ================================================================ the source notebook: learner version, tests
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
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
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
    header = (f'"""Public checks of {lab}: generated by `python -m speclab.grading build` from '
              f"labs/source/{lab}.ipynb.\n\nDo not edit: change the source notebook and rebuild. Learners may read these;\n"
              'the grade also counts hidden checks of the same ideas, kept out of the package.\n"""\n'
              'if "lab" not in globals():  # imported as a module rather than run by speclab.grading.Lab\n'
              "    from speclab.grading import Lab\n"
              f"    lab = Lab({lab!r}, public_tests=False)\n\n")
    return header + checks_source(source_nb, hidden=False)


def find_root(root: str | Path | None = None) -> Path:
    """The repository root: the given one, else the first of the working directory and the directory
    above this package that holds labs/source."""
    if root is not None:
        return Path(root)
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (candidate / "labs" / "source").is_dir():
            return candidate
    raise FileNotFoundError("no labs/source folder found here or next to speclab: run this from the repository "
                            "root, or pass --root / --source")


def build(root: str | Path | None = None, out_root: str | Path | None = None) -> list[Path]:
    """Write every learner notebook (labs/labNN.ipynb) and public-check file (speclab/labs/labNN.py)
    from labs/source/labNN.ipynb under `root`, into `out_root` (default: root). Returns the written paths."""
    import nbformat
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
        tests = out_root / "speclab" / "labs" / f"{lab}.py"
        learner.parent.mkdir(parents=True, exist_ok=True)
        tests.parent.mkdir(parents=True, exist_ok=True)
        learner.write_text(nbformat.writes(learner_notebook(nb, lab)) + "\n", encoding="utf-8")
        tests.write_text(public_module(nb, lab), encoding="utf-8")
        written += [learner, tests]
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
            if not committed.exists() or committed.read_bytes() != path.read_bytes():
                problems.append(str(rel))
        expected = {p.relative_to(tmp) for p in fresh}
        for pattern in ("labs/lab*.ipynb", "speclab/labs/lab*.py"):
            for extra in root.glob(pattern):
                if extra.relative_to(root) not in expected:
                    problems.append(f"{extra.relative_to(root)} (no source in labs/source)")
    return problems


# ================================================================ grading a folder
RESULT_MARK = "@@speclab-grade@@"


def grade_namespace(lab_name: str, tests: str, nonce: str, ns: dict) -> str:
    """Run in the submission's kernel after its cells: every public and hidden case against `ns`.
    Returns a printable feedback report followed by one line `nonce + JSON`."""
    lab = Lab(lab_name, public_tests=False)
    lab.load_tests(tests, f"<{lab_name} grading tests>")
    results = [lab.run(qid, ns) for qid in lab.questions]
    payload = {"lab": lab_name, "questions": {
        r.question: {"answer": r.answer, "points": r.points, "earned": r.earned,
                     "cases": [{"name": c.name, "hidden": c.hidden, "passed": c.passed, "message": c.message}
                               for c in r.cases]} for r in results}}
    feedback = "\n".join(r.report() for r in results) + "\n" + ScoreSummary(lab_name, results).report()
    return feedback + "\n" + nonce + json.dumps(payload)


_RUNNER = r"""
import json, sys
import nbformat
from nbclient import NotebookClient
src, out, workdir, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
nb = nbformat.read(src, as_version=4)
client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": workdir}})
try:
    client.execute()
finally:
    nbformat.write(nb, out)
"""


def _prepare(path: Path, lab: str, tests: str, nonce: str):
    """The submission to execute: shell and %pip lines neutralised (indentation kept), outputs dropped,
    and one cell appended that grades the kernel's namespace."""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell["cell_type"] != "code":
            continue
        lines = []
        for line in cell["source"].splitlines():
            body = line.lstrip()
            if body.startswith(("%pip", "%conda", "!", "%%bash", "%%sh", "%%script", "%%capture")):
                line = line[:len(line) - len(body)] + "pass  # removed by the grader: " + body[:60]
            lines.append(line)
        cell["source"] = "\n".join(lines)
        cell["outputs"], cell["execution_count"] = [], None
    call = (f"import speclab.grading as _speclab_grading\n"
            f"print(_speclab_grading.grade_namespace({lab!r}, {tests!r}, {nonce!r}, globals()))")
    nb.cells.append(nbformat.v4.new_code_cell(call))
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def _network_wrapper() -> list[str]:
    """A command prefix that runs its command with no network but loopback (the kernel talks to its
    client over loopback), or [] where this machine does not allow it (then grading goes on with network)."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if not unshare or not ip or sys.platform != "linux":
        return []
    wrapper = [unshare, "-rn", "sh", "-c", f'{ip} link set lo up && exec "$@"', "sh"]
    try:
        ok = subprocess.run(wrapper + ["true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return wrapper if ok else []


def detect_lab(path: Path, known: Iterable[str]) -> str | None:
    """The lab a submission belongs to, from the `Lab("labNN")` call in its cells, else its file name."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        text = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", []) if c.get("cell_type") == "code")
    except (OSError, ValueError):
        text = ""
    found = [m for m in LAB_NAME.findall(text) if m in known]
    if found:
        return found[0]
    return next((lab for lab in sorted(known, key=len, reverse=True) if lab in path.stem.lower()), None)


@dataclass
class Grade:
    submission: str
    lab: str = ""
    status: str = "ok"
    seconds: float = 0.0
    questions: dict[str, tuple[float, float]] = field(default_factory=dict)  # qid -> (earned, points)

    @property
    def score(self) -> float:
        return sum(e for e, _ in self.questions.values())


def grade_one(path: Path, lab: str, tests: str, max_points: dict[str, float], timeout: float,
              isolate: list[str], executed_dir: Path | None = None, threads: int | None = None) -> Grade:
    import nbformat
    grade = Grade(path.name, lab, questions={q: (0.0, p) for q, p in max_points.items()})
    nonce = RESULT_MARK + secrets.token_hex(8) + ":"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="speclab-grade-") as tmp:
        run_dir, work = Path(tmp) / "run", Path(tmp) / "work"
        run_dir.mkdir()
        work.mkdir()
        try:
            nb = _prepare(path, lab, tests, nonce)
        except Exception as err:  # noqa: BLE001 (an unreadable file is a row in the table, not a crash)
            grade.status = f"unreadable notebook: {type(err).__name__}: {err}"[:200]
            return grade
        src, out = run_dir / "submission.ipynb", run_dir / "executed.ipynb"
        nbformat.write(nb, src)
        env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
               "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
               "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if threads:  # notebooks graded side by side share the cores instead of each taking all of them
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "VIRTUAL_ENV", "PYTHONPATH"):
            if var in os.environ:
                env[var] = os.environ[var]
        cmd = isolate + [sys.executable, "-c", _RUNNER, str(src), str(out), str(work), str(timeout)]
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the runner, its kernel and anything they started
            proc.communicate()
            grade.status = f"timeout after {timeout:g} s"
            log = ""
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        grade.seconds = round(time.perf_counter() - start, 1)
        payload = None
        if out.exists():
            executed = nbformat.read(out, as_version=4)
            text = "".join(o.get("text", "") for o in executed.cells[-1].get("outputs", [])
                           if o.get("output_type") == "stream")
            line = next((ln for ln in text.splitlines() if ln.startswith(nonce)), None)
            if line is not None:
                payload = json.loads(line[len(nonce):])
            if executed_dir is not None:  # for the instructor: the run with the grader's feedback at the end
                for o in executed.cells[-1].get("outputs", []):
                    if o.get("output_type") == "stream":
                        o["text"] = "".join(ln for ln in o["text"].splitlines(True) if not ln.startswith(nonce))
                executed_dir.mkdir(parents=True, exist_ok=True)
                nbformat.write(executed, executed_dir / path.name)
        if payload is None:
            if grade.status == "ok":
                last = [ln for ln in (log or "").strip().splitlines() if ln.strip()][-1:] or ["no output"]
                grade.status = f"error: the notebook did not finish grading ({last[0][:150]})"
            return grade
        for qid, info in payload["questions"].items():
            grade.questions[qid] = (float(info["earned"]), float(info["points"]))
    return grade


def grade_folder(submissions: str | Path, out_csv: str | Path, timeout: float = 300, source: str | Path | None = None,
                 lab: str | None = None, jobs: int = 1, executed_dir: str | Path | None = None,
                 network: bool = False) -> list[Grade]:
    """Grade every .ipynb under `submissions` (checkpoints skipped) and write the CSV. Returns the rows."""
    import nbformat
    source_dir = Path(source) if source is not None else find_root() / "labs" / "source"
    labs = {p.stem: p for p in sorted(source_dir.glob("lab*.ipynb"))}
    if not labs:
        raise FileNotFoundError(f"no instructor sources (lab*.ipynb) in {source_dir}: pass --source")
    if lab is not None and lab not in labs:
        raise ValueError(f"--lab {lab}: no {lab}.ipynb in {source_dir}")
    tests, points = {}, {}
    for name, path in labs.items():
        nb = nbformat.read(path, as_version=4)
        tests[name] = checks_source(nb, hidden=True)
        probe = Lab(name, public_tests=False)
        probe.load_tests(tests[name], f"<{name} tests>")
        points[name] = {q.qid: q.points for q in probe.questions.values()}
    paths = sorted(p for p in Path(submissions).rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    isolate = [] if network else _network_wrapper()
    keep = Path(executed_dir) if executed_dir is not None else None
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None

    def one(path: Path) -> Grade:
        try:
            nbformat.read(path, as_version=4)
        except Exception as err:  # noqa: BLE001 (an unreadable file is a row in the table, not a crash)
            return Grade(path.name, status=f"unreadable notebook: {type(err).__name__}: {err}"[:200])
        which = lab or detect_lab(path, labs)
        if which is None:
            return Grade(path.name, status="no lab found: the notebook has no Lab(\"labNN\") call; pass --lab")
        return grade_one(path, which, tests[which], points[which], timeout, isolate, keep, threads)

    if jobs > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(jobs) as pool:
            grades = list(pool.map(one, paths))
    else:
        grades = [one(p) for p in paths]
    write_csv(grades, out_csv, isolated=bool(isolate))
    return grades


def write_csv(grades: list[Grade], out_csv: str | Path, isolated: bool = True) -> None:
    qids = sorted({q for g in grades for q in g.questions}, key=lambda q: (len(q), q))
    with open(out_csv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["submission", "lab", "score", "max_score", "percent", *qids, "status", "seconds", "network"])
        network = "cut" if isolated else "allowed"
        for g in grades:
            maximum = sum(p for _, p in g.questions.values())
            percent = round(100 * g.score / maximum, 1) if maximum else 0.0
            cells = [f"{g.questions[q][0]:.2f}" if q in g.questions else "" for q in qids]
            w.writerow([g.submission, g.lab, f"{g.score:.2f}", f"{maximum:g}", f"{percent:g}", *cells, g.status,
                        g.seconds, network])


# ================================================================ command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speclab.grading", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="generate the learner notebooks and public checks from labs/source")
    b.add_argument("--root", default=None, help="repository root (default: found from here)")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 if the committed files are stale")
    g = sub.add_parser("grade", help="grade a folder of submitted lab notebooks into a CSV")
    g.add_argument("submissions", help="folder of .ipynb files (searched recursively)")
    g.add_argument("--out", default="scores.csv", help="CSV to write (default scores.csv)")
    g.add_argument("--timeout", type=float, default=300, help="seconds per notebook (default 300)")
    g.add_argument("--source", default=None, help="folder of instructor sources (default labs/source)")
    g.add_argument("--lab", default=None, help="grade every notebook as this lab (default: read from each notebook)")
    g.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    g.add_argument("--executed", default=None, help="also save each executed notebook (with feedback) here")
    g.add_argument("--allow-network", action="store_true", help="do not cut the network of submissions")
    args = parser.parse_args(argv)
    if args.command == "build":
        if args.check:
            problems = stale(args.root)
            for p in problems:
                print(f"stale: {p}")
            print("learner versions are up to date" if not problems else
                  "run `python -m speclab.grading build` and commit the result")
            return 1 if problems else 0
        for path in build(args.root):
            print(f"wrote {path}")
        return 0
    grades = grade_folder(args.submissions, args.out, args.timeout, args.source, args.lab, args.jobs,
                          args.executed, network=args.allow_network)
    for gr in grades:
        maximum = sum(p for _, p in gr.questions.values())
        print(f"{gr.submission}: {gr.lab or '?'} {gr.score:.2f}/{maximum:g} ({gr.status}, {gr.seconds} s)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
