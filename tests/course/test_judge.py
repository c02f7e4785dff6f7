"""The judge (speclab.course.judge) against the attacks of issue 34, without a kernel: learner code that
patches the checks cannot change a verdict, and a looping answer costs its own question only."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from speclab.course.grading import load_factor
from speclab.course.judge import Judges, judge
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
    """Two looping answers cost their two questions, each one case limit, and the lab goes on: one spins (CPU-bound),
    one waits forever (sleeping, no CPU burnt while its limit runs out). The limits are stretched by the host's
    load as the grader stretches them (`load_factor`, the CSV's `load` column): a fixed 5 s limit timed a correct
    answer out on a loaded 2-core host, and this test flaked."""
    load = load_factor()
    limit = 5 * load
    start = time.perf_counter()
    looping = submissions.looping("lab09", ["draft_with_stop", "best_plan"], waiting=["best_plan"])
    result = verdict("lab09", looping, case_limit=limit)
    earned = {q: v["earned"] for q, v in result["questions"].items()}
    assert earned == {"q1": 2.0, "q2": 0.0, "q3": 2.0, "q4": 0.0}, (load, earned)
    assert [q for q, v in result["questions"].items() if v["timed_out"]] == ["q2", "q4"]
    assert result["feedback"].count(f"took longer than {limit:g} s") == 2, result["feedback"]
    # two limits and two fresh workers, not a lost lab: 60 s on a quiet host, stretched by the same load
    assert time.perf_counter() - start < 60 * load


@pytest.fixture(scope="module")
def raising():
    """Solved lab 10 with an answer that raises a bare BaseException, and a fresh judge's verdict on it (shared:
    a fresh judge costs a process that imports the checks, and an answer worker)."""
    nb = submissions.replaced(submissions.solved("lab10"), "rollback", "raise BaseException('odd')")
    return nb, verdict("lab10", nb, case_limit=15 * load_factor())


def test_an_answer_that_raises_a_bare_base_exception_costs_its_question_only(raising):
    """check() never raises (labs/README.md): an answer that raises a bare BaseException or GeneratorExit fails its
    case with a message, in the notebook as in the judge, and the other questions keep their points."""
    from speclab.course.checks import Lab

    for raised in ("BaseException('odd')", "GeneratorExit"):
        ns: dict = {}
        exec(f"def rollback(length, n_drafted, n_accepted):\n    raise {raised}", ns)
        result = Lab("lab10").check("q3", ns)
        assert not result.passed and f"your code raised {raised.split('(')[0]}" in result.first_failure.message
    result = raising[1]
    earned = {q: v["earned"] for q, v in result["questions"].items()}
    assert earned == {"q1": 2.0, "q2": 1.0, "q3": 0.0, "q4": 2.0, "q5": 1.0, "q6": 2.0}, earned


# ---------------------------------------------------------------- judges forked from one server (the grader's way)
def job(lab: str, nb, tests: str | None = None, nonce: str = "N:") -> dict:
    source = nbformat.read(ROOT / "labs" / "source" / f"{lab}.ipynb", as_version=4)
    return {"lab": lab, "tests": tests if tests is not None else checks_source(source, hidden=True),
            "cells": [c.source for c in nb.cells if c.cell_type == "code"], "case_limit": 15 * load_factor(),
            "nonce": nonce}


def test_a_forked_judge_gives_the_verdict_a_fresh_one_gives_and_starts_from_the_servers_state(tmp_path, raising):
    """The grader forks each submission's judge from one server that imported the checks' modules once. A fork's
    verdict equals a fresh judge's; what one fork's checks change (here a check source that patches the
    feedback's summary, as a buggy check could) is gone in the next fork; a fork that does not answer within its
    timeout is killed without holding up the next; and a fork runs torch's parallel operations even where a
    module the server preloaded ran one (GNU OpenMP hangs in a fork of a process whose thread pool has run: the
    server keeps torch on one thread, checked here by a preloaded module that multiplies large matrices)."""
    nb, fresh = raising
    tests = job("lab10", nb)["tests"]
    (tmp_path / "parallel_at_import.py").write_text(PARALLEL)
    patch = "\nfrom speclab.course.checks import ScoreSummary\nScoreSummary.report = lambda self: 'PATCHED'\n"
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    judges = Judges([tests, "import parallel_at_import\n"], env)
    try:
        forked = judges.verdict(job("lab10", nb), timeout=120)
        assert forked is not None, "the fork did not answer: did its first parallel operation hang?"
        forked = json.loads(forked[2:])
        patched = judges.verdict(job("lab10", nb, tests + PARALLEL + patch), timeout=120)
        start = time.perf_counter()
        assert judges.verdict(job("lab10", nb, tests + "\nwhile True:\n    pass\n"), timeout=2) is None
        assert time.perf_counter() - start < 10
        again = json.loads(judges.verdict(job("lab10", nb), timeout=120)[2:])
    finally:
        judges.close()
    assert judges.proc.returncode == 0  # the server ended when the grader closed its socket
    assert forked["questions"] == again["questions"] == fresh["questions"]
    assert forked["feedback"] == again["feedback"] == fresh["feedback"] and "PATCHED" not in again["feedback"]
    assert patched is not None, "the fork that ran parallel operations did not answer"
    assert json.loads(patched[2:])["feedback"].endswith("PATCHED")  # the patch took effect in its own fork only


PARALLEL = "\nimport torch\n_x = torch.randn(2000, 2000)\n(_x @ _x).exp().sum()\n"  # big enough to run in parallel
