"""speclab.course.borrowing flags answers a submission borrowed (issue 63): the checks' references, speclab's
own implementations, the instructor sources; and leaves an answer of the learner's own alone."""
from speclab.course.borrowing import borrowed

ANSWERS = {"q1": "settle_rows", "q2": "next_k"}


def test_an_own_answer_is_not_flagged():
    cells = ["import torch\nfrom speclab import theory\nfrom speclab.checks import Lab\nlab = Lab('lab11')",
             "def settle_rows(lengths, accepted):\n    return [l + a for l, a in zip(lengths, accepted)]",
             "def next_k(k, drafted, accepted, k_max):\n    return theory.best_k(0.7, 0.1) if drafted else k",
             "%pip install nothing"]
    assert borrowed(cells, ANSWERS) == []


def test_the_issues_borrowed_reference_is_flagged():
    flags = borrowed(["from speclab.course.labs.lab11 import reference_settle as settle_rows"], ANSWERS)
    assert "q1: `settle_rows` is imported from speclab.course.labs.lab11.reference_settle" in flags
    assert any("reference_settle" in f for f in flags) and any("the lab's checks" in f for f in flags)


def test_speclabs_own_function_bound_to_an_answer_is_flagged():
    cells = ["import speclab.adaptive as adaptive", "next_k = adaptive.heuristic_next_k"]
    assert borrowed(cells, ANSWERS) == ["q2: `next_k` is speclab.adaptive.heuristic_next_k"]
    assert borrowed(["from speclab.adaptive import next_k"], ANSWERS) == [
        "q2: `next_k` is imported from speclab.adaptive.next_k"]


def test_reading_the_instructor_sources_is_flagged_by_path_or_by_parts():
    assert borrowed(["open('/repo/labs/source/lab11.ipynb').read()"], ANSWERS) == [
        "reads the instructor sources (labs/source)"]
    parts = "import speclab, pathlib\nroot = pathlib.Path(speclab.__file__).parents[1] / 'labs' / 'source'"
    assert borrowed([parts], ANSWERS) == ["reads the instructor sources (labs/source)"]


def test_the_checks_recorded_values_are_flagged_however_they_are_reached():
    """The public checks hold values recorded on their own cases, not references (speclab.checks.Expected): an
    answer built from them is flagged, whether imported, read through the notebook's Lab, or loaded by name."""
    flags = borrowed(["from speclab.course.labs.lab09 import expected as next_k"], ANSWERS)
    assert "q2: `next_k` is imported from speclab.course.labs.lab09.expected" in flags
    assert "imports speclab.course.labs.lab09, the lab's checks" in flags
    through_lab = ("from speclab.checks import Lab\nmine = Lab('lab09')\n"
                   "def next_k(*args):\n    return mine.expected('next_k', *args)")
    assert borrowed([through_lab], ANSWERS) == ["reads the lab's checks through `mine.expected`"]
    cases = "def next_k(*args):\n    return lab.cases[0].func.__globals__['expected']('next_k', *args)"
    assert set(borrowed([cases], ANSWERS)) == {"reads the lab's checks through `lab.cases`",
                                              "reaches into a function's `__globals__` (the checks' own namespace)"}
    by_name = "import importlib\nvalues = importlib.import_module('speclab.course.labs.lab09_expected').VALUES"
    assert borrowed([by_name], ANSWERS) == [
        "names the lab's checks in a string ('speclab.course.labs.lab09_expected')"]
    assert borrowed(["check, score = lab.check, lab.score\nexpected = 3\nprint(expected)"], ANSWERS) == []


def test_an_answer_that_hands_the_work_to_speclab_is_flagged_but_not_the_calls_its_lab_offers():
    """Issue 63's fresh learner test: a wrapper around speclab's own implementation scored full marks unflagged
    (`def block_verify(...): return verification.verify_block(...)`). With the lab's text (`offered`), a function
    that calls speclab code the text never names, or speclab's function of an answer's own name, is flagged; the
    calls the lab offers (lab 10's `theory.expected_tokens`) are not."""
    answers = {"q2": "block_verify", "q5": "crossover", "q6": "max_paying_k"}
    offered = ("from speclab.measure import batching\n`theory.expected_tokens(alpha, k)` gives E\n"
               "print(crossover(speedups))")
    wrapper = ("import speclab\nfrom speclab.verification import verify_block as vb\n"
               "def block_verify(p_rows, q_rows, tokens, u):\n    return vb(p_rows, q_rows, tokens, u)")
    assert borrowed([wrapper], answers, offered) == [
        "q2: `block_verify` calls speclab.verification.verify_block, speclab's own code, which the lab does not offer"]
    named = ["from speclab.measure import batching", "crossover = lambda s: batching.crossover(s)",
             "def helper(s):\n    return speclab.measure.batching.crossover(s)", "import speclab"]
    assert set(borrowed(named, answers, offered)) == {
        "a lambda calls speclab.measure.batching.crossover, speclab's own code, which the lab does not offer",
        "`helper` calls speclab.measure.batching.crossover, speclab's own code, which the lab does not offer"}
    own = ("from speclab import theory\ndef max_paying_k(alpha, draft_ms, target_ms, k_max):\n"
           "    return max([k for k in range(1, k_max + 1) if theory.expected_tokens(alpha, k) > k], default=0)")
    assert borrowed([own], answers, offered) == []
    assert borrowed([wrapper], answers) == []  # without the lab's text, calls are not judged
    # a function the text names only to forbid it is not offered, nor is anything in a module it forbids
    forbids = offered + "\nDon't call `speclab.logits_to_probs`: the check compares your function with it.\n" \
                        "Don't call `speclab.train`: the check compares yours with it."
    served = ("import speclab\nfrom speclab.train import eagle\ndef served_probs(logits, t):\n"
              "    return speclab.logits_to_probs(logits, t)\ndef loss(*a):\n    return eagle.eagle_loss(*a)")
    assert borrowed([served], {"q1": "served_probs"}, forbids) == [
        "q1: `served_probs` calls speclab.logits_to_probs, speclab's own code, which the lab does not offer",
        "`loss` calls speclab.train.eagle.eagle_loss, speclab's own code, which the lab does not offer"]
    assert borrowed([own], answers, forbids) == []  # what it offers stays offered


def test_no_solved_or_untouched_lab_is_flagged_with_its_own_text():
    import nbformat

    from speclab.course.labbuild import checks_source, learner_notebook
    from speclab.course.checks import Lab
    from tests.course.test_labs import LABS, ROOT

    for lab in LABS:
        source = nbformat.read(ROOT / "labs" / "source" / f"{lab}.ipynb", as_version=4)
        offered = "\n".join(c.source for c in learner_notebook(source, lab).cells)
        probe = Lab(lab, public_tests=False)
        probe.load_tests(checks_source(source, hidden=False), lab)
        answers = {q.qid: q.answer for q in probe.questions.values()}
        for keep in (True, False):
            cells = [c.source for c in learner_notebook(source, lab, keep).cells if c.cell_type == "code"]
            assert borrowed(cells, answers, offered) == [], (lab, keep)
