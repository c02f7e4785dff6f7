"""Lab checks: what a learner calls in a lab, and what the check cases of a lab are written with.

For learners: `lab = Lab("lab01")`, then `check("q1")` (or `check(my_function)`) after each question: it runs
that question's public checks (`speclab/course/labs/labNN.py`) and prints a pass or the first failing case in
words with a hint, never raising; `score()` prints the whole lab. The grade also counts hidden checks.

For lab authors: a test cell declares questions with `lab.question` and registers cases with `@lab.case`; a
case calls `expect(condition, message)` or a helper (`expect_equal`, `expect_close`, `expect_allclose`,
`expect_distribution`) with a message in the learner's terms (`show`, `unfinished`). Each case runs with its
own seed, its prints captured, under a time limit. What it compares with comes from `lab.expected(name, ...)`
(`Expected`): references stay in hidden cells, and public checks get only the values they gave on the public
cases. `speclab.course.labbuild` writes the learner versions; `speclab.course.grading` grades submissions.
"""
from __future__ import annotations

import contextlib
import dis
import io
import linecache
import math
import os
import random
import signal
import sys
import threading
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import torch

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # speclab/: library code, not the learner's
# One case of one question; an endless loop in a learner's function ends here. The slowest correct cases (lab 7's
# q4 statistics, 3000 calls each) take about 5 s through the grader's judge on a loaded 2-core AMD EPYC: 15 s
# leaves room for a slow Colab runtime. The grader runs a submission's own check() calls under its --case-timeout
# too (the learner's kernel gets it in CASE_LIMIT_ENV), so a looping answer ends at the same limit in the notebook
# as in the judge, and score() does not wait for it again.
CASE_LIMIT_ENV = "SPECLAB_CASE_LIMIT_S"
CASE_TIME_LIMIT_S = float(os.environ.get(CASE_LIMIT_ENV, 15.0))


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


def python_int(x: Any) -> bool:
    """Whether x is a Python int (numpy's too, which the grader turns into one), not a tensor, float or bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


UNFINISHED = ("it looks unfinished: write your code where it says `# YOUR CODE HERE` (in place of the `...`) "
              "and `return` the result")


def untouched(message: str) -> bool:
    """Whether a case's message says the answer is missing or still `...`: no hint is shown then, since a hint
    is a recipe for the question, for after a wrong answer, not before any."""
    marks = ("is still `...`, not", "is still `...`: replace", "not attempted yet", "is not defined: run the cell")
    return any(mark in message for mark in marks)


def is_stub(answer: Any) -> bool:
    """Whether the learner's function is still the stub: its body runs no code at all (the grader's remote
    answer says so itself, from the learner's process)."""
    flag = getattr(answer, "is_stub", None)
    if isinstance(flag, bool):
        return flag
    code = getattr(answer, "__code__", None)
    if code is None:
        return False
    return all(i.opname in ("RESUME", "NOP", "RETURN_VALUE")
               or (i.opname in ("LOAD_CONST", "RETURN_CONST") and i.argval in (None, Ellipsis))
               for i in dis.get_instructions(code))


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


def expect_value_error(thunk: Callable[[], Any], call: str, why: str = "") -> None:
    """thunk() must raise a ValueError: in the notebook, or in the grader's answer worker, whose errors
    arrive worded ("your code raised ValueError: ...", speclab.course.answers)."""
    tail = f" ({why})" if why else ""
    try:
        result = thunk()
    except ValueError:
        return
    except Exception as err:  # noqa: BLE001
        said = getattr(err, "learner_message", None) or f"raised {type(err).__name__}: {err}"
        if said.startswith("your code raised ValueError"):
            return
        raise CheckFailed(f"{call} {said.removeprefix('your code ')}; expected a ValueError{tail}") from None
    raise CheckFailed(f"{call} returned {show(result)}; expected a ValueError{tail}")


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
    c = [float(v) for v in plain(counts)]
    p = [float(v) for v in plain(probs)]
    n = sum(c)
    for i, (ci, pi) in enumerate(zip(c, p)):
        expect(not (pi == 0 and ci > 0), f"{what}: outcome {i} came up {int(ci)} times but has probability 0"
               + (f" ({why})" if why else ""))
    keep = [i for i, pi in enumerate(p) if pi > 0]
    obs = [c[i] for i in keep]
    exp = [p[i] * n / sum(p[j] for j in keep) for i in keep]
    from scipy.stats import chisquare  # here, not at the top: scipy.stats costs every kernel, judge and answer
    # worker of the grader ~2 s to import, and only a distribution check needs it
    pvalue = 1.0 if len(keep) < 2 else float(chisquare(obs, exp).pvalue)
    freq = [round(ci / n, 3) for ci in c] if n else c
    expect(pvalue >= p_min, f"{what}: frequencies {freq} over {int(n)} draws, but the correct probabilities are "
           f"{[round(pi, 3) for pi in p]} (chi-square p-value {pvalue:.1e})" + (f" ({why})" if why else ""))


# ================================================================ what a public check compares with
class Expected:
    """What a check compares an answer with, without handing the learner a ready-made answer.

    A case calls `want = expected("mask", start, n, max_len)`. In the instructor source and in the grader
    the hidden cells hand the references in (`expected.use(mask=reference_mask)`), and the call computes the
    value for any input. The public checks shipped to learners hold no reference: there the call returns
    the value the reference gave for this call of this public case (the n-th call named "mask" in the case),
    recorded by `python -m speclab labs build` into `speclab/course/labs/labNN_expected.py`, with what the
    reference wrote into its arguments. A digest of the inputs, recorded beside each value, catches a case
    whose inputs differ from the recorded ones (a torch that draws other random numbers)."""

    def __init__(self, lab: str):
        self.lab = lab
        self.refs: dict[str, Callable[..., Any]] = {}
        self.recording: dict | None = None   # labbuild: {(qid, case, name, index): (digest, value, writes)}
        self._table: dict | None = None
        self._case: tuple[str, str] | None = None
        self._calls: dict[str, int] = {}

    def use(self, **refs: Callable[..., Any]) -> None:
        """The references (instructor side): `expected(name, ...)` calls refs[name](...) from now on."""
        self.refs.update(refs)

    def start(self, qid: str, case: str) -> None:
        self._case, self._calls = (qid, case), {}

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        index = self._calls.get(name, 0)
        self._calls[name] = index + 1
        key = (*(self._case or ("", "")), name, index)
        if name in self.refs:
            if self.recording is None:
                return self.refs[name](*args, **kwargs)
            before, digest = _snapshot((args, kwargs)), _digest((args, kwargs))
            value = self.refs[name](*args, **kwargs)
            writes = _writes(before, (args, kwargs))
            self.recording[key] = (digest, _copy(value), writes)
            return value
        if self._case is None:
            raise CheckFailed(f"expected({name!r}, ...) is for the checks' own cases, while they run")
        table = self._load()
        expect(key in table, f"this public check has no expected value recorded for its call {name}#{index}: "
               "is speclab up to date? (pip install -U speclab, or rerun the Colab setup cell)")
        digest, value, writes = table[key]
        expect(_digest((args, kwargs)) == digest, "this public check's inputs differ from the ones its expected "
               f"values were recorded with (call {name}#{index}): your torch ({torch.__version__}) may draw other "
               "random numbers than the one that recorded them; the grader computes them afresh")
        _apply(writes, (args, kwargs))
        return _copy(value)

    def _load(self) -> dict:
        if self._table is None:
            path = resources.files("speclab.course.labs").joinpath(f"{self.lab}_expected.py")
            scope: dict[str, Any] = {}
            if path.is_file():
                exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), scope)
            self._table = scope.get("VALUES", {})
        return self._table


def recorded_tensor(dtype: str, shape: tuple, values: list) -> torch.Tensor:
    """A tensor written out by `literal` (the recorded expected values)."""
    return torch.tensor(values, dtype=getattr(torch, dtype)).reshape(shape)


def literal(x: Any) -> str:
    """Python source that rebuilds x (numbers, strings, None, lists, tuples, dicts, tensors as recorded_tensor);
    floats exactly (repr)."""
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        return f"T({str(t.dtype).removeprefix('torch.')!r}, {tuple(t.shape)!r}, {t.reshape(-1).tolist()!r})"
    if isinstance(x, (bool, int, float, str, type(None))):
        return repr(x)
    if isinstance(x, list):
        return "[" + ", ".join(literal(v) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + "".join(literal(v) + ", " for v in x) + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in x.items()) + "}"
    raise TypeError(f"cannot record a {type(x).__name__} as an expected value")


def _copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, list):
        return [_copy(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_copy(v) for v in x)
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    return x


def _digest(x: Any) -> Any:
    """A summary of a call's inputs that repeats on any machine: exact for integers and strings, shapes and a
    coarse sum for float tensors (so that the last bits of a float do not matter), the type of anything else."""
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        if t.is_floating_point():
            return ("tensor", str(t.dtype), tuple(t.shape), round(float(t.double().sum()), 2))
        return ("tensor", str(t.dtype), tuple(t.shape), t.reshape(-1).tolist())
    if isinstance(x, float):
        return round(x, 6)
    if isinstance(x, (bool, int, str, type(None))):
        return x
    if isinstance(x, (list, tuple)):
        return tuple(_digest(v) for v in x)
    if isinstance(x, dict):
        return tuple((_digest(k), _digest(v)) for k, v in x.items())
    return type(x).__name__


def _snapshot(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return [_snapshot(v) for v in x]
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    return None


def _changed(before: Any, after: Any) -> bool:
    if isinstance(after, torch.Tensor):
        return not (isinstance(before, torch.Tensor) and before.shape == after.shape and torch.equal(before, after))
    if isinstance(after, (list, tuple)):
        return (not isinstance(before, list) or len(before) != len(after)
                or any(_changed(b, a) for b, a in zip(before, after)))
    if isinstance(after, dict):
        return not isinstance(before, dict) or before.keys() != after.keys() or any(
            _changed(before[k], after[k]) for k in after)
    return False


def _writes(before: Any, call: tuple) -> dict:
    """What the reference wrote into its arguments: {position or keyword: the argument's new content}."""
    (args, kwargs), (b_args, b_kwargs) = call, before
    out = {i: _copy(a) for i, (b, a) in enumerate(zip(b_args, args)) if isinstance(a, (torch.Tensor, list, dict))
           and _changed(b, a)}
    out.update({k: _copy(a) for k, a in kwargs.items() if isinstance(a, (torch.Tensor, list, dict))
                and _changed(b_kwargs[k], a)})
    return out


def _apply(writes: dict, call: tuple) -> None:
    """Write the recorded content into the arguments, as the reference would have."""
    args, kwargs = call
    for where, value in writes.items():
        target = args[where] if isinstance(where, int) else kwargs[where]
        _put(target, value)


def _put(target: Any, value: Any) -> None:
    if isinstance(target, torch.Tensor):
        target.copy_(value)
    elif isinstance(target, list):
        target[:] = _copy(value)
    elif isinstance(target, dict):
        for k, v in value.items():
            if isinstance(target.get(k), torch.Tensor) and isinstance(v, torch.Tensor) and target[k].shape == v.shape:
                target[k].copy_(v)
            else:
                target[k] = _copy(v)
        for k in [k for k in target if k not in value]:
            del target[k]


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

    @property
    def timed_out(self) -> bool:
        return self.message.startswith(TIMEOUT_MESSAGE)


TIMEOUT_MESSAGE = "took longer than"


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

    def report(self, hidden_details: bool = True) -> str:
        """The pass, or the first failing case in words with its hint. With hidden_details=False (the
        grader's feedback to a learner) hidden cases are only counted: their names and messages, which
        would give their inputs away, are left out."""
        head = f"{self.question} · {self.answer}" if self.answer else self.question
        if self.error:
            return f"{head}: {self.error}"
        if self.passed:
            return f"✓ {head}: all {self._kinds()} passed."
        lines = [f"✗ {head}: {self.n_passed} of {self._kinds()} passed."]
        bad = next((c for c in self.cases if not c.passed and (hidden_details or not c.hidden)), None)
        if bad is not None:
            lines += [f"  First failing check: {bad.name}", f"  What happened: {bad.message}"]
            if bad.printed:
                lines.append("  Your code printed: " + bad.printed.strip()[:500].replace("\n", "\n    "))
            if bad.hint and not untouched(bad.message):
                lines.append(f"  Hint: {bad.hint}")
        failed_hidden = sum(c.hidden and not c.passed for c in self.cases)
        if not hidden_details and any(c.hidden and c.timed_out for c in self.cases):
            lines.append("  A hidden check ran out of time: is there an endless loop, or a loop over something much "
                         "larger than needed?")
        if not hidden_details and failed_hidden:
            lines.append(f"  {failed_hidden} hidden check{'s' * (failed_hidden != 1)} failed: they test the same "
                         "ideas on other cases, so make sure your code is right in general, not only on the "
                         "public checks.")
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
    shipped in `speclab/course/labs/lab01.py` the first time `check` or `score` runs. In the instructor source,
    the test cells register the cases themselves (public and hidden), so nothing is loaded.
    """

    def __init__(self, name: str, public_tests: bool = True, time_limit: float | None = CASE_TIME_LIMIT_S):
        self.name = name
        self.questions: dict[str, Question] = {}
        self.cases: list[Case] = []
        self.time_limit = time_limit
        self._load_public = public_tests
        self._test_files: set[str] = {__file__}
        self._slow: list[Any] = []  # answers that ran out of time: score() does not wait for them again
        self.expected = Expected(name)  # what the cases compare with (public: recorded values; grader: references)

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
        """Run the public checks shipped with speclab (speclab/course/labs/<name>.py) against this Lab."""
        path = resources.files("speclab.course.labs").joinpath(f"{self.name}.py")
        if not path.is_file():
            raise FileNotFoundError(f"speclab has no public checks for {self.name!r}: is speclab up to date? "
                                    "(pip install -U speclab, or rerun the Colab setup cell)")
        self.load_tests(path.read_text(encoding="utf-8"), str(path))

    def load_tests(self, source: str, filename: str = "<lab tests>") -> None:
        """Execute test code (test cells or a public-check file) with `lab` bound to this Lab."""
        self._test_files.add(filename)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), {"lab": self, "__name__": f"speclab.course.labs.{self.name}"})
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

    def run(self, qid: str, ns: Any, hidden: bool = True, public: bool = True) -> CheckResult:
        """Every case of question `qid` (the public ones, the hidden ones, or both) against the namespace `ns`
        (a dict, or anything with `in` and `get`: the grader's view of a learner's process)."""
        question = self.questions[qid]
        result = CheckResult(self.name, qid, question.answer, points=question.points)
        cases = [c for c in self.cases if c.question == qid and (hidden or not c.hidden) and (public or c.hidden)]
        if not cases:
            result.error = "this question has no check cases (a defect of the lab: please report it)"
            return result
        missing = question.answer not in ns
        answer = ns.get(question.answer)
        stub = is_stub(answer)  # no hints for an answer not yet attempted
        timed_out = any(answer is slow for slow in self._slow)
        skipped = ("not run: this function ran out of time in an earlier check (fix it and run its cell again)"
                   if timed_out else "not run: an earlier case took too long")
        for case in cases:
            if missing:
                message = (f"`{question.answer}` is not defined: run the cell where you wrote it "
                           "(Shift+Enter), then run this check again")
                result.cases.append(CaseResult(qid, case.name, False, message, case.hint, case.hidden))
                continue
            if timed_out:
                result.cases.append(CaseResult(qid, case.name, False, skipped, case.hint, case.hidden))
                continue
            passed, message, printed = self._run_case(case, answer)
            timed_out = message.startswith(TIMEOUT_MESSAGE)
            skipped = "not run: an earlier case took too long"
            if timed_out and isinstance(ns, dict):  # the same function object next time: run its cell again to retry
                self._slow.append(answer)
            hint = "" if stub else case.hint
            result.cases.append(CaseResult(qid, case.name, passed, message, hint, case.hidden, printed))
        return result

    def _run_case(self, case: Case, answer: Any) -> tuple[bool, str, str]:
        out = io.StringIO()
        seed = zlib.crc32(f"{self.name}/{case.question}/{case.name}".encode())
        self.expected.start(case.question, case.name)
        try:
            prepare = getattr(answer, "prepare", None)  # the grader's remote answer: its process, before the clock
            if callable(prepare):
                prepare()
        except Exception as err:  # noqa: BLE001
            return False, f"your notebook's definitions could not be loaded to check them: {err}", ""
        try:
            with _isolated_rng(seed), _time_limit(self.time_limit), contextlib.redirect_stdout(out):
                case.func(answer)
            return True, "", ""
        except CheckFailed as err:
            return False, str(err), out.getvalue()
        except _CaseTimeout:
            return False, (f"{TIMEOUT_MESSAGE} {self.time_limit:g} s: is there an endless loop, or a loop over "
                           "something much larger than needed?"), out.getvalue()
        except NotImplementedError:
            return False, f"not attempted yet ({UNFINISHED})", out.getvalue()
        except SystemExit as err:  # exit() or sys.exit() in an answer ends the case, not the notebook
            return False, f"your code called exit({err.code!r}): return a value instead", out.getvalue()
        except KeyboardInterrupt:
            return False, "interrupted (you stopped the kernel while this check ran)", out.getvalue()
        except Exception as err:  # noqa: BLE001 (whatever the learner's code raises becomes a message)
            # an error raised in the grader's learner process arrives already worded (learner_message)
            return False, getattr(err, "learner_message", None) or self._describe_error(err), out.getvalue()
        except BaseException as err:  # noqa: BLE001 (a bare BaseException, GeneratorExit: check() never raises)
            return False, self._describe_error(err), out.getvalue()

    def _describe_error(self, err: BaseException) -> str:
        frames = traceback.extract_tb(err.__traceback__)
        library = (sys.prefix, sys.base_prefix, os.path.dirname(os.__file__), PACKAGE_DIR)
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
