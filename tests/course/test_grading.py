"""The lab tool: markers and learner versions (speclab.course.labbuild), check/score and the expectation helpers
(speclab.course.checks), and folder grading (speclab.course.grading)."""
from __future__ import annotations

import csv
import os
import subprocess
import json
import re
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from speclab import checks, grading
from speclab.course.checks import CheckFailed, Lab, expect_allclose, expect_close, expect_distribution, expect_equal
from speclab.course.grading import detect_lab, grade_folder
from speclab.course.labbuild import cell_kind, checks_source, learner_notebook, strip_solutions

from tests.course import submissions
from tests.course.test_labs import answers as solved_answers
from tests.course.test_labs import strings  # every string in a JSON document

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- markers and the learner version
def test_a_solution_block_becomes_a_stub_with_its_indentation():
    src = "def f(x):\n    \"\"\"Doc.\"\"\"\n    # BEGIN SOLUTION\n    y = x + 1\n    return y\n    # END SOLUTION\n"
    assert strip_solutions(src) == "def f(x):\n    \"\"\"Doc.\"\"\"\n    # YOUR CODE HERE\n    ..."
    assert strip_solutions(src, keep=True) == "def f(x):\n    \"\"\"Doc.\"\"\"\n    y = x + 1\n    return y"


def test_a_solution_line_keeps_its_name_and_loses_its_value():
    assert strip_solutions("K_CHOICE = 4  # SOLUTION") == "K_CHOICE = ...  # YOUR CODE HERE"
    assert strip_solutions("K_CHOICE = 4  # SOLUTION", keep=True) == "K_CHOICE = 4"


@pytest.mark.parametrize("src", ["# BEGIN SOLUTION\nx = 1", "x = 1\n# END SOLUTION",
                                 "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION"])
def test_unbalanced_markers_are_refused(src):
    with pytest.raises(ValueError, match="SOLUTION"):
        strip_solutions(src, where="labXX cell 3")


def source_notebook():
    return new_notebook(cells=[
        new_markdown_cell("# Lab 99"),
        new_code_cell('from speclab.course.checks import Lab\nlab = Lab("lab99")\ncheck, score = lab.check, lab.score'),
        new_code_cell("def double(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION"),
        new_code_cell('# TESTS q1\nfrom speclab.course.checks import expect_equal\nlab.question("q1", "double")\n\n'
                      '@lab.case("q1", "double(2) is 4", hint="Multiply by 2.")\ndef _(f):\n'
                      '    expect_equal(f(2), 4, "double(2)")'),
        new_code_cell('# HIDDEN TESTS q1\n@lab.case("q1", "double(-3) is -6", hidden=True)\ndef _(f):\n'
                      '    expect_equal(f(-3), -6, "double(-3)")'),
        new_code_cell("## Ignore ##\nprint('instructor only')"),
        new_code_cell('# NBVAL_CHECK_OUTPUT\ncheck("q1")'),
    ])


def test_cells_are_classified_by_their_first_line():
    kinds = [cell_kind(c) for c in source_notebook().cells]
    assert kinds == ["content", "content", "content", "public", "hidden", "ignore", "content"]


def test_the_learner_version_drops_tests_solutions_outputs_and_metadata():
    nb = source_notebook()
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="x")]
    nb.cells[2].metadata["tags"] = ["solution"]
    learner = learner_notebook(nb, "lab99")
    text = nbformat.writes(learner)
    for gone in ("BEGIN SOLUTION", "return 2 * x", "TESTS", "double(-3)", "instructor only", "NBVAL"):
        assert gone not in text
    assert [c.source for c in learner.cells][-1] == 'check("q1")'
    assert [c["id"] for c in learner.cells] == [f"lab99-{i:02d}" for i in range(4)]
    assert all(not c.get("outputs") and not c.metadata for c in learner.cells)
    assert nbformat.writes(learner_notebook(source_notebook(), "lab99")) == text  # deterministic
    nbformat.validate(learner)


def test_public_and_grading_test_sources():
    nb = source_notebook()
    assert "double(2)" in checks_source(nb, hidden=False) and "double(-3)" not in checks_source(nb, hidden=False)
    assert "double(-3)" in checks_source(nb, hidden=True)


# ---------------------------------------------------------------- check and score
def make_lab() -> Lab:
    lab = Lab("lab99", public_tests=False)
    lab.load_tests(checks_source(source_notebook(), hidden=True))
    return lab


def test_check_reports_a_pass(capsys):
    def double(x):
        return 2 * x
    result = make_lab().check("q1", {"double": double})
    assert result.passed and result.n_passed == 2
    assert capsys.readouterr().out.strip() == "✓ q1 · double: all 2 checks (1 public, 1 hidden) passed."


def test_check_reports_the_first_failure_in_words_with_a_hint(capsys):
    def double(x):
        return x + 2  # right for x = 2 only
    result = make_lab().check("q1", {"double": double})
    out = capsys.readouterr().out
    assert not result.passed and result.n_passed == 1
    assert "First failing check: double(-3) is -6" in out
    assert "What happened: double(-3) returned -1; expected -6" in out


def test_an_untouched_stub_is_reported_as_unfinished(capsys):
    def double(x):
        ...
    make_lab().check("q1", {"double": double})
    out = capsys.readouterr().out
    assert "returned None, not 4" in out and "YOUR CODE HERE" in out
    assert "Hint:" not in out  # a hint is for after a wrong answer, not before any


def test_check_never_raises(capsys):
    lab = make_lab()

    def double(x):
        return 1 / 0
    assert "your code raised ZeroDivisionError: division by zero in `double`, at the line `return 1 / 0`" in \
        lab.check("q1", {"double": double}).first_failure.message
    assert "is not defined: run the cell" in lab.check("q1", {}).first_failure.message
    assert "no such question" in lab.check("q7", {}).report()
    assert "q1 (double)" in lab.check("q7", {}).report()

    def stub(x):
        raise NotImplementedError
    assert "not attempted yet" in lab.check("q1", {"double": stub}).first_failure.message

    def leaves(x):
        raise SystemExit(3)
    assert "your code called exit(3)" in lab.check("q1", {"double": leaves}).first_failure.message

    def interrupted(x):
        raise KeyboardInterrupt
    assert "interrupted" in lab.check("q1", {"double": interrupted}).first_failure.message


def double(x):  # a learner's answer, defined at the top level of the "notebook" (this module)
    return 2 * x


def test_check_accepts_the_function_itself_and_finds_the_callers_namespace(capsys):
    lab = make_lab()
    assert lab.check(double).passed  # the question is found from the function's name
    assert lab.check("q1").passed  # the answer is found in the caller's globals, as in a notebook
    assert lab.check("double", {"double": lambda x: 2 * x}).passed


def test_a_case_that_runs_too_long_is_stopped(capsys):
    lab = Lab("lab98", public_tests=False, time_limit=0.3)
    lab.question("q1", "spin")

    @lab.case("q1", "returns")
    def _(f):
        f()

    @lab.case("q1", "returns again")
    def _(f):
        f()

    def spin():
        while True:
            pass
    start = time.perf_counter()
    result = lab.check("q1", {"spin": spin})
    assert time.perf_counter() - start < 5
    assert result.cases[0].message.startswith("took longer than 0.3 s")
    assert result.cases[1].message.startswith("not run")


def test_cases_see_their_own_seed_and_leave_the_notebooks_random_state_alone(capsys):
    import torch
    lab = Lab("lab97", public_tests=False)
    lab.question("q1", "draw")
    seen = []

    @lab.case("q1", "draws")
    def _(f):
        seen.append(f())
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    ns = {"draw": lambda: float(torch.rand(()))}
    lab.check("q1", ns)
    lab.check("q1", ns)
    assert seen[0] == seen[1]
    assert torch.equal(torch.random.get_rng_state(), before)


def test_what_the_learners_code_prints_is_captured_and_shown(capsys):
    lab = make_lab()

    def double(x):
        print("debug", x)
        return x
    lab.check("q1", {"double": double})
    out = capsys.readouterr().out
    assert "Your code printed: debug 2" in out and "\ndebug" not in out.split("Your code printed")[0]


def test_the_graders_feedback_counts_hidden_cases_and_never_describes_them(capsys):
    lab = make_lab()
    wrong = lab.run("q1", {"double": lambda x: x + 2})  # passes the public case, fails the hidden one
    assert "double(-3)" in wrong.report()  # in the instructor's source, check() says which case failed
    feedback = wrong.report(hidden_details=False)
    assert "double(-3)" not in feedback and "First failing check" not in feedback
    assert "1 of 2 checks (1 public, 1 hidden) passed" in feedback and "1 hidden check failed" in feedback
    stub = lab.run("q1", {"double": lambda x: None}).report(hidden_details=False)
    assert "First failing check: double(2) is 4" in stub and "Hint:" not in stub
    assert "double(-3)" not in stub and "1 hidden check failed" in stub


def test_score_sums_points_and_is_never_negative(capsys):
    lab = make_lab()

    def double(x):
        return x + 2
    summary = lab.score({"double": double})
    assert summary.points == pytest.approx(0.5) and summary.max_points == 1
    assert "Total: 0.50 of 1 points; 0 of 1 questions complete." in capsys.readouterr().out


def test_the_result_objects_do_not_print_twice_in_a_notebook(capsys):
    result = make_lab().check("q1", {})
    assert result._ipython_display_() is None and "q1" in repr(result) and str(result).startswith("✗ q1")


def test_a_learner_loads_the_public_checks_shipped_in_the_package(capsys):
    lab = Lab("lab04")
    result = lab.check("q1", {"expected_tokens": lambda alpha, k: 1.0})
    assert not result.passed and all(not c.hidden for c in result.cases)
    assert set(lab.questions) == {"q1", "q2", "q3", "q4", "q5"}


def test_a_missing_public_file_is_a_message_not_an_exception(capsys):
    result = Lab("lab00").check("q1", {})
    assert "the check itself failed" in result.report() and "speclab has no public checks" in result.report()


# ---------------------------------------------------------------- expectation helpers
def test_expect_helpers_write_messages_for_learners():
    import torch
    with pytest.raises(CheckFailed, match=r"f\(1\) returned \[1, 2\]; expected \[1, 3\] \(why\)"):
        expect_equal(torch.tensor([1, 2]), (1, 3), "f(1)", why="why")
    expect_equal(torch.tensor([1, 3]), [1, 3], "f")
    with pytest.raises(CheckFailed, match="expected a number"):
        expect_close("0.5", 0.5, "g()")
    expect_close(float("nan"), float("nan"), "g()")
    with pytest.raises(CheckFailed, match="at index 1 you have 0.5, expected 0.4"):
        expect_allclose([0.6, 0.5], [0.6, 0.4], "h()", atol=0.05)
    with pytest.raises(CheckFailed, match="shape"):
        expect_allclose([0.5, 0.5, 0.0], [0.6, 0.4], "h()")
    with pytest.raises(CheckFailed, match="has probability 0"):
        expect_distribution([5, 5, 1], [0.5, 0.5, 0.0], "draws")
    with pytest.raises(CheckFailed, match="chi-square"):
        expect_distribution([900, 100], [0.5, 0.5], "draws")
    expect_distribution([510, 490], [0.5, 0.5], "draws")


# ---------------------------------------------------------------- grading a folder
def test_shell_lines_are_neutralised_without_breaking_blocks(tmp_path):
    nb = new_notebook(cells=[new_code_cell('import sys\nif "google.colab" in sys.modules:\n    %pip install -q x\n!ls')])
    path = tmp_path / "s.ipynb"
    nbformat.write(nb, path)
    prepared = grading._prepare(path)
    compile(prepared.cells[0].source, "cell", "exec")  # still valid Python
    assert "%pip" not in prepared.cells[0].source.split("#")[0]
    assert len(prepared.cells) == 1  # nothing of the grader's is added: the checks run in the judge


def test_the_feedback_notebook_keeps_the_learners_cells_and_adds_only_the_feedback_text():
    learner = new_code_cell("x = 1")
    learner.outputs = [nbformat.v4.new_output("stream", name="stdout", text="mine\n")]
    nb = grading.feedback_notebook(new_notebook(cells=[learner]), "✓ q1 · double: all passed.\n", "a note")
    assert nb.cells[0].outputs[0].text == "mine\n" and nb.cells[-1].source == grading.FEEDBACK_CELL
    assert [o.text for o in nb.cells[-1].outputs] == ["a note\n✓ q1 · double: all passed.\n"]
    nbformat.validate(nb)


def test_the_lab_is_read_from_the_notebook_text_not_its_metadata(tmp_path):
    nb = new_notebook(cells=[new_code_cell('lab = Lab("lab03")')])
    (tmp_path / "anything.ipynb").write_text(nbformat.writes(nb))
    (tmp_path / "my_lab02_try.ipynb").write_text(nbformat.writes(new_notebook()))
    known = ["lab02", "lab03"]
    assert detect_lab(tmp_path / "anything.ipynb", known) == "lab03"
    assert detect_lab(tmp_path / "my_lab02_try.ipynb", known) == "lab02"


def colab_copy(nb) -> dict:
    """What a notebook looks like after Colab: no notebook or cell metadata, no cell ids, outputs kept."""
    raw = json.loads(nbformat.writes(nb))
    raw["metadata"] = {}
    raw["nbformat_minor"] = 4
    for cell in raw["cells"]:
        cell["metadata"] = {}
        cell.pop("id", None)
    return raw


def test_the_grader_scores_a_full_and_an_empty_submission_100_and_0(tmp_path, monkeypatch):
    """Each submission's judge a fresh process here, as where the grader cannot fork them (FORKED_JUDGES: off
    Linux); test_labs.py grades through forked judges."""
    monkeypatch.setattr(grading, "FORKED_JUDGES", False)
    source = nbformat.read(ROOT / "labs" / "source" / "lab04.ipynb", as_version=4)
    subs = tmp_path / "submissions"
    subs.mkdir()
    # the plain solved and learner versions of every lab are graded in test_labs.py; here, one full
    # submission as Colab saves it, the untouched learner version, and a file that is not a notebook, the
    # first two under one name in each learner's folder, as Colab's download names them
    for learner in ("alice", "bob"):
        (subs / learner).mkdir()
    (subs / "bob" / "lab04.ipynb").write_bytes((ROOT / "labs" / "lab04.ipynb").read_bytes())
    (subs / "alice" / "lab04.ipynb").write_text(json.dumps(colab_copy(learner_notebook(source, "lab04", True))))
    (subs / "unreadable.ipynb").write_text("{not json")
    out = tmp_path / "scores.csv"
    grades = grade_folder(subs, out, timeout=300, jobs=2, executed_dir=tmp_path / "executed")
    rows = {r["submission"]: r for r in csv.DictReader(out.open())}
    full, empty = rows["alice/lab04.ipynb"], rows["bob/lab04.ipynb"]
    assert full["percent"] == "100" and full["status"] == "ok"
    assert empty["percent"] == "0" and empty["status"] == "ok"
    assert rows["unreadable.ipynb"]["percent"] == "0" and "unreadable" in rows["unreadable.ipynb"]["status"]
    assert [k for k in full][:5] == ["submission", "lab", "score", "max_score", "percent"]
    assert {"q1", "q2", "q3", "q4", "q5"} <= set(full)
    assert len(grades) == 3
    # each learner's feedback in their own folder: neither overwrites the other's
    for learner, verdict in [("alice", "passed"), ("bob", "First failing check")]:
        feedback = nbformat.read(tmp_path / "executed" / learner / "lab04.ipynb", as_version=4).cells[-1].outputs
        assert verdict in "".join(o.get("text", "") for o in feedback), learner
    feedback = nbformat.read(tmp_path / "executed" / "bob" / "lab04.ipynb", as_version=4).cells[-1].outputs
    text = "".join(o.get("text", "") for o in feedback)
    assert "First failing check" in text and re.search(r"\d+ hidden checks? failed", text)
    whole = (tmp_path / "executed" / "bob" / "lab04.ipynb").read_text()
    assert grading.RESULT_MARK not in whole and "grade_namespace" not in whole and "hidden=True" not in whole


def test_a_submission_that_never_ends_is_stopped_and_scores_0(tmp_path):
    subs = tmp_path / "submissions"
    subs.mkdir()
    nb = new_notebook(cells=[new_code_cell('from speclab.course.grading import Lab\nlab = Lab("lab04")'),
                             new_code_cell("while True:\n    pass")])
    nbformat.write(nb, subs / "loop.ipynb")
    start = time.perf_counter()
    grade_folder(subs, tmp_path / "scores.csv", timeout=6, scale_to_load=False)
    assert time.perf_counter() - start < 30
    row = next(csv.DictReader((tmp_path / "scores.csv").open()))
    assert row["status"] == "timeout after 6 s" and row["percent"] == "0" and row["lab"] == "lab04"


def test_every_limit_is_stretched_by_the_hosts_load(tmp_path, monkeypatch):
    """Issue 63: solved lab 12 once scored 13.5% on a busy 2-core host, its answers out of time. The grader measures
    the host's load before each submission and stretches the notebook's, each cell's and each case's limit by it:
    here a load of 2 (as measured) turns a 1.5 s notebook limit into 3 s, and the CSV says so. The notebook waits
    forever without spinning (a spinning one is stopped the same way in the test above): 3 s of CPU fewer."""
    factor = grading.load_factor(0.05)
    assert 1.0 <= factor <= grading.MAX_LOAD_FACTOR
    monkeypatch.setattr(grading, "load_factor", lambda: 2.0)
    subs = tmp_path / "submissions"
    subs.mkdir()
    nb = new_notebook(cells=[new_code_cell('from speclab.checks import Lab\nlab = Lab("lab04")'),
                             new_code_cell("import time\nwhile True:\n    time.sleep(0.01)")])
    nbformat.write(nb, subs / "loop.ipynb")
    grade_folder(subs, tmp_path / "scores.csv", timeout=1.5, cell_timeout=100)
    row = next(csv.DictReader((tmp_path / "scores.csv").open()))
    assert row["status"] == "timeout after 3 s" and row["load"] == "2", row


def test_notebooks_handed_out_before_the_split_still_import_lab_from_grading():
    assert grading.Lab is checks.Lab


def test_the_command_line(tmp_path, capsys):
    assert grading.main(["build", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        grading.main(["grade"])


# ---------------------------------------------------------------- the attacks of issue 34, through the whole grader
# The attacks' limits, per lab: (cell, case). A cell's are shorter than the grader's default (30 s), so the loops
# the attacks bring burn less of the suite's time, and still well above any honest cell of lab 10 (its whole learner
# version runs in under 5 s under nbval). Its case limit sits below its cell limit, so a looping public check ends at
# the case limit and the learner's score() does not wait on it again. Every attack is on lab 10 (submissions.attacks
# says why): one folder, graded all at once.
ATTACK_LIMITS = {"lab10": (12, 8)}
LEAK_LOOP = "lab10_leak_demo_loop.ipynb"  # the leaking answer and the endless ungraded cell, in one submission


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """The attack submissions (tests/course/submissions.py), graded all at once, each lab's with its
    ATTACK_LIMITS."""
    tmp = tmp_path_factory.mktemp("attacks")
    attacks, rows = submissions.attacks(), {}
    for lab, (cell_s, case_s) in ATTACK_LIMITS.items():
        subs = tmp / lab
        subs.mkdir()
        for name, (nb, _) in attacks.items():
            if name.startswith(lab):
                nbformat.write(nb, subs / name)
        # all at once: two of the three spend most of their time waiting out the limits of their loops
        grade_folder(subs, tmp / f"{lab}.csv", jobs=3, executed_dir=tmp / "executed", cell_timeout=cell_s,
                     case_limit=case_s, scale_to_load=False)  # the limits the messages below name
        rows.update({r["submission"]: r for r in csv.DictReader((tmp / f"{lab}.csv").open())})
    assert sorted(rows) == sorted(attacks)  # every attack belongs to a lab with its limits
    return rows, tmp / "executed"


def feedback_of(executed: Path, name: str) -> str:
    return "".join(o.get("text", "") for o in nbformat.read(executed / name, as_version=4).cells[-1].outputs)


def test_the_monkeypatch_cheat_scores_0(attacked):
    rows, executed = attacked
    assert rows["lab10_cheat.ipynb"]["percent"] == "0", rows["lab10_cheat.ipynb"]
    assert "Total: 0.00 of 9 points" in feedback_of(executed, "lab10_cheat.ipynb")


def test_nothing_the_learners_code_writes_during_hidden_checks_reaches_the_feedback(attacked, capsys):
    """rollback writes every argument it gets to fd 1 and 2, sys.__stdout__, stderr, print, display and files.
    Every such line in the returned notebook must come from a public check the learner ran themselves."""
    rows, executed = attacked
    assert rows[LEAK_LOOP]["percent"] == "100", rows[LEAK_LOOP]
    public_calls, solution = set(), solved_answers("lab10", keep=True)["rollback"]

    def rollback(*args, **kwargs):
        public_calls.add(submissions.LEAK + repr((args, kwargs)))
        return solution(*args, **kwargs)
    Lab("lab10").check("q3", {"rollback": rollback})  # the public checks, as the learner ran them
    text = "\n".join(strings(json.loads((executed / LEAK_LOOP).read_text())))
    leaked = set(re.findall(re.escape(submissions.LEAK) + r"\(\([^()]*\), \{[^{}]*\}\)", text))  # one call's arguments
    assert leaked and leaked <= {c for c in public_calls}, sorted(leaked - public_calls)[:5]


def test_two_looping_answers_cost_their_questions_only_within_the_notebook_timeout(attacked):
    rows, executed = attacked
    row = rows["lab10_loop_two.ipynb"]
    assert [row[f"q{i}"] for i in range(1, 7)] == ["2.00", "1.00", "1.00", "2.00", "0.00", "0.00"], row
    assert row["status"] == "ok (out of time: q5, q6)" and float(row["seconds"]) < 300, row
    feedback = feedback_of(executed, "lab10_loop_two.ipynb")
    for head in ("✗ q5 · pass_ms", "✗ q6 · max_paying_k"):
        answer = feedback.split(head)[1].split("\n✓")[0].split("\n✗")[0]
        assert f"took longer than {ATTACK_LIMITS['lab10'][1]:g} s" in answer, feedback
    assert "was interrupted" in feedback  # the demo cell that calls them
    # the notebook's own checks ran under the grader's case limit too: each ended there, and score() did not
    # wait for the looping functions again
    nb = nbformat.read(executed / "lab10_loop_two.ipynb", as_version=4)
    said = {c.source: "".join(o.get("text", "") for o in c.outputs) for c in nb.cells if c.cell_type == "code"}
    for qid in ("q5", "q6"):
        assert f"took longer than {ATTACK_LIMITS['lab10'][1]:g} s" in said[f'check("{qid}")'], said[f'check("{qid}")']
    assert "Total: 6.00 of 9 points" in said["score()"], said["score()"]


def test_an_endless_ungraded_cell_is_interrupted_and_costs_nothing(attacked):
    rows, executed = attacked
    row = rows[LEAK_LOOP]
    assert row["percent"] == "100" and row["status"] == "ok", row
    nb = nbformat.read(executed / LEAK_LOOP, as_version=4)
    assert nb.cells[-3].source.startswith("while True:") and "CellTimeout" in str(nb.cells[-3].outputs)
    assert f"ran longer than {ATTACK_LIMITS['lab10'][0]} s and was interrupted" in feedback_of(executed, LEAK_LOOP)
    score_cell = nb.cells[-2]  # the learner's score() ran after the interrupted cell
    assert score_cell.source == "score()" and "Total:" in "".join(o.get("text", "") for o in score_cell.outputs)


def test_score_does_not_wait_again_for_a_function_that_ran_out_of_time(capsys):
    lab = Lab("lab96", public_tests=False, time_limit=0.3)
    lab.question("q1", "spin")

    @lab.case("q1", "returns")
    def _(f):
        f()

    def spin():
        while True:
            pass
    ns = {"spin": spin}
    lab.check("q1", ns)
    start = time.perf_counter()
    summary = lab.score(ns)
    assert time.perf_counter() - start < 0.2 and summary.points == 0
    assert "ran out of time in an earlier check" in summary.results[0].cases[0].message
    ns["spin"] = lambda: None  # the learner fixed it and ran its cell again
    assert lab.check("q1", ns).passed


# ---------------------------------------------------------------- one submission against the others (issue 63)
AFTER = "c_stub_reader_borrowed.ipynb"  # graded after the logger and the hook
# The lab and answer they go after: lab 10, whose kernel, judge and answer worker import torch alone (lab 9's processes
# import the bundled models' code, ~4 s of CPU each, three a submission); the attacks name no lab of their own.
FENCED = ("lab10", "write_kv")


@pytest.fixture(scope="module")
def fenced(tmp_path_factory):
    """Submissions that go after the grader and the learners graded after them, graded one after another in this
    order: a solved lab whose answer logs every input (hidden cases' among them) to the shared scratch folders;
    a notebook that plants an import hook in site-packages and in speclab; then the untouched stubs, graded after
    both, with a cell that prints what the scratch folders hold and an answer borrowed from the public checks
    (one submission for the three probes: each is a cell of its own, and a stub costs the suite a kernel, a
    judge and an answer worker). Their folders are made under a grading folder of the test's own."""
    from speclab.course import grading as course_grading

    if not course_grading.detect_isolation().files:
        pytest.skip("this machine allows no mount namespace (the grader's CSV says so in its 'files' column)")
    tmp = tmp_path_factory.mktemp("fenced")
    subs = tmp / "submissions"
    subs.mkdir()
    lab, name = FENCED
    notebooks = {"a_logger.ipynb": submissions.tmp_logger(lab, name),
                 "b_hook.ipynb": submissions.site_hook(lab),
                 # the stubs, a reader of the scratch folders, and the checks' recorded values as an answer
                 AFTER: submissions.borrowing(lab, name, submissions.tmp_reader(lab))}
    for name, nb in notebooks.items():
        nbformat.write(nb, subs / name)
    previous = os.environ.get("SPECLAB_GRADING_DIR")
    os.environ["SPECLAB_GRADING_DIR"] = str(tmp / "grading")
    try:
        cell_s, case_s = ATTACK_LIMITS["lab10"]
        grade_folder(subs, tmp / "scores.csv", jobs=1, executed_dir=tmp / "executed", cell_timeout=cell_s,
                     case_limit=case_s, scale_to_load=False)
    finally:
        if previous is None:
            os.environ.pop("SPECLAB_GRADING_DIR")
        else:
            os.environ["SPECLAB_GRADING_DIR"] = previous
    rows = {r["submission"]: r for r in csv.DictReader((tmp / "scores.csv").open())}
    return rows, tmp


def planted_hooks() -> list[Path]:
    import site

    import speclab
    folders = site.getsitepackages() + [site.getusersitepackages(), str(Path(speclab.__file__).parent)]
    return [p for f in folders for p in Path(f).glob(f"{submissions.HOOK}.pth")]


def test_a_planted_site_hook_changes_no_grade(fenced):
    rows, tmp = fenced
    assert rows["b_hook.ipynb"]["percent"] == "0" and rows[AFTER]["percent"] == "0", rows  # the hook: 100
    assert {r["files"] for r in rows.values()} == {"sandboxed"} and {r["network"] for r in rows.values()} == {"cut"}
    planting = "".join(o.get("text", "") for c in nbformat.read(tmp / "executed" / "b_hook.ipynb", as_version=4).cells
                       if c.cell_type == "code" for o in c.outputs)
    planted = re.findall(r"planted in (\S+)", planting)   # only where it may: the user site in its own HOME
    assert "refused:" in planting and all(f"{tmp}/grading/submission-" in p for p in planted), planting
    assert not planted_hooks()


def test_a_submission_reads_nothing_another_left_in_the_scratch_folders(fenced):
    rows, tmp = fenced
    assert rows["a_logger.ipynb"]["percent"] == "100", rows["a_logger.ipynb"]
    reading = next(c for c in nbformat.read(tmp / "executed" / AFTER, as_version=4).cells if submissions.TMP_LOG in c.source)
    assert reading.execution_count and not any(o.output_type == "error" for o in reading.outputs), reading  # it ran
    assert submissions.LEAK not in (tmp / "executed" / AFTER).read_text()
    assert not [Path(f) / submissions.TMP_LOG for f in submissions.SCRATCH if (Path(f) / submissions.TMP_LOG).exists()]


def test_a_borrowed_answer_is_flagged_in_the_csv_and_the_feedback(fenced):
    """The issue's learner took `reference_next_k` from lab 9's public checks; they hold no reference now, only the
    values recorded on their own cases (here lab 10's), which are no answer (q1 scores nothing) and are flagged
    all the same."""
    rows, tmp = fenced
    lab, name = FENCED
    flag = f"q1: `{name}` is imported from speclab.course.labs.{lab}.expected"
    assert flag in rows[AFTER]["flags"] and rows[AFTER]["q1"] == "0.00"
    assert flag in (tmp / "executed" / AFTER).read_text()
    assert not any(r["flags"] for name, r in rows.items() if name != AFTER)


def test_every_submissions_folder_is_wiped_after_it(fenced):
    _, tmp = fenced
    assert (tmp / "grading").is_dir() and not list((tmp / "grading").iterdir())


def test_the_csv_says_where_submissions_were_not_fenced_in(tmp_path):
    from speclab.course.grading import Grade, Isolation, write_csv

    write_csv([Grade("a.ipynb", "lab04", questions={"q1": (1.0, 2.0)})], tmp_path / "s.csv", Isolation())
    row = next(csv.DictReader((tmp_path / "s.csv").open()))
    assert row["network"] == "allowed" and row["files"].startswith("shared") and row["percent"] == "50"


def test_the_sandbox_leaves_only_the_submissions_folder_writable(tmp_path):
    from speclab.course.grading import Isolation, detect_isolation

    if not detect_isolation().files:
        pytest.skip("this machine allows no mount namespace")
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    script = (f"touch {mine}/ok; touch {other}/no; touch cwd-ok; "
              "echo note > /tmp/speclab-sandbox-probe || echo refused; "
              "echo secret > /dev/shm/speclab-sandbox-probe && cat /dev/shm/speclab-sandbox-probe; "
              "mount -o remount,bind,rw / 2>/dev/null && echo remounted")
    run = subprocess.run(Isolation(True, True, True).prefix(mine, loopback=True) + ["sh", "-c", script],
                         capture_output=True, text=True, timeout=60, cwd=mine)
    assert (mine / "ok").exists() and (mine / "cwd-ok").exists() and not (other / "no").exists()
    assert "refused" in run.stdout and not Path("/tmp/speclab-sandbox-probe").exists()   # /tmp: read-only
    assert "remounted" not in run.stdout and "secret" in run.stdout           # /dev/shm: its own
    assert not Path("/dev/shm/speclab-sandbox-probe").exists()               # and gone with it


# ---------------------------------------------------------------- a stated rule, checked alike in the notebook and the grader
COPYING = {  # an answer that is right but for the in-place rule: it writes into a copy of the cache
    "lab10": ("write_kv", "_solved_write_kv = write_kv\n\n\ndef write_kv(cache, new_k, new_v, start):\n"
              "    cache['keys'], cache['values'] = cache['keys'].clone(), cache['values'].clone()\n"
              "    return _solved_write_kv(cache, new_k, new_v, start)\n", "q1"),
    "lab11": ("batched_attention", "_solved_attention = batched_attention\n\n\n"
              "def batched_attention(cache, q, k, v, lengths):\n"
              "    cache['keys'], cache['values'] = cache['keys'].clone(), cache['values'].clone()\n"
              "    return _solved_attention(cache, q, k, v, lengths)\n", "q3"),
}


@pytest.mark.parametrize("lab", sorted(COPYING))
def test_the_in_place_rule_fails_the_same_case_in_the_notebook_and_in_the_grader(lab):
    """Lab 10 q1 and lab 11 q3 ask for a cache written in place. A copying answer fails the same public case first
    in the learner's notebook (the public checks, in process) and in the judge (the answer in its own worker,
    the tensors coming back through the answer wire), and loses points there."""
    from speclab.course.judge import judge

    name, code, qid = COPYING[lab]
    nb = submissions.solved(lab)
    nb.cells.insert(len(nb.cells) - 1, new_code_cell(code))
    ns = solved_answers(lab, keep=True)
    exec(compile(code, f"<{lab} copying>", "exec"), ns)
    public = Lab(lab, time_limit=None)  # the checks a learner's notebook runs: speclab/course/labs/labNN.py
    public.load_public()
    first = public.run(qid, ns).first_failure
    assert first is not None and first.name.startswith("in place"), first
    tests = checks_source(nbformat.read(submissions.ROOT / "labs" / "source" / f"{lab}.ipynb", as_version=4), hidden=True)
    result = judge(lab, tests, [c.source for c in nb.cells if c.cell_type == "code"], case_limit=120)
    question = result["questions"][qid]
    assert question["earned"] < question["points"], result["questions"]
    assert f"First failing check: {first.name}" in result["feedback"].split(f"· {name}")[1], result["feedback"]
    assert all(q["earned"] == q["points"] for other, q in result["questions"].items() if other != qid)
