"""The judge (speclab.course.judge) against the attacks of issue 34, without a kernel: learner code that
patches the checks cannot change a verdict, and a looping answer costs its own question only."""
from __future__ import annotations

import time
from pathlib import Path

import nbformat

from speclab.course.grading import load_factor
from speclab.course.judge import judge
from speclab.course.labbuild import checks_source
from tests.course import submissions

ROOT = Path(__file__).resolve().parents[2]


def verdict(lab: str, nb, case_limit: float = 15.0) -> dict:
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    tests = checks_source(nbformat.read(ROOT / "labs" / "source" / f"{lab}.ipynb", as_version=4), hidden=True)
    return judge(lab, tests, cells, case_limit=case_limit)


def test_the_monkeypatch_cheat_scores_nothing():
    """The cheat of issue 34 (patching Lab._run_case, expect and torch in the notebook, and again from inside
    an answer while the checks call it) gave an untouched lab 9 100%; the judge never runs that code."""
    result = verdict("lab09", submissions.cheat("lab09"))
    assert all(q["earned"] == 0 for q in result["questions"].values()), result["questions"]
    assert "Total: 0.00 of 9 points" in result["feedback"]


def test_a_looping_answer_costs_its_question_only_and_says_so():
    """Two looping answers cost their two questions, each one case limit, and the lab goes on. The limits are
    stretched by the host's load as the grader stretches them (`load_factor`, the CSV's `load` column): a fixed
    5 s limit timed a correct answer out on a loaded 2-core host, and this test flaked."""
    load = load_factor()
    limit = 5 * load
    start = time.perf_counter()
    result = verdict("lab09", submissions.looping("lab09", ["draft_with_stop", "best_plan"]), case_limit=limit)
    earned = {q: v["earned"] for q, v in result["questions"].items()}
    assert earned == {"q1": 2.0, "q2": 0.0, "q3": 2.0, "q4": 0.0}, (load, earned)
    assert [q for q, v in result["questions"].items() if v["timed_out"]] == ["q2", "q4"]
    assert result["feedback"].count(f"took longer than {limit:g} s") == 2, result["feedback"]
    # two limits and two fresh workers, not a lost lab: 60 s on a quiet host, stretched by the same load
    assert time.perf_counter() - start < 60 * load


def test_an_answer_that_raises_a_bare_base_exception_costs_its_question_only():
    """check() never raises (labs/README.md): an answer that raises a bare BaseException or GeneratorExit fails its
    case with a message, in the notebook as in the judge, and the other questions keep their points."""
    from speclab.course.checks import Lab

    for raised in ("BaseException('odd')", "GeneratorExit"):
        ns: dict = {}
        exec(f"def rollback(length, n_drafted, n_accepted):\n    raise {raised}", ns)
        result = Lab("lab10").check("q3", ns)
        assert not result.passed and f"your code raised {raised.split('(')[0]}" in result.first_failure.message
    nb = submissions.replaced(submissions.solved("lab10"), "rollback", "raise BaseException('odd')")
    result = verdict("lab10", nb, case_limit=15 * load_factor())
    earned = {q: v["earned"] for q, v in result["questions"].items()}
    assert earned == {"q1": 2.0, "q2": 1.0, "q3": 0.0, "q4": 2.0, "q5": 1.0, "q6": 2.0}, earned
