"""The judge (speclab.course.judge) against the attacks of issue 34, without a kernel: learner code that
patches the checks cannot change a verdict, and a looping answer costs its own question only."""
from __future__ import annotations

import time
from pathlib import Path

import nbformat

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
    start = time.perf_counter()
    result = verdict("lab09", submissions.looping("lab09", ["draft_with_stop", "best_plan"]), case_limit=5)
    earned = {q: v["earned"] for q, v in result["questions"].items()}
    assert earned == {"q1": 2.0, "q2": 0.0, "q3": 2.0, "q4": 0.0}, earned
    assert [q for q, v in result["questions"].items() if v["timed_out"]] == ["q2", "q4"]
    assert result["feedback"].count("took longer than 5 s") == 2
    assert time.perf_counter() - start < 60  # two 5 s limits and two fresh workers, not a lost lab
