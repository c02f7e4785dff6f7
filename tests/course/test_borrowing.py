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
