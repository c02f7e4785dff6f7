"""Submissions as learners hand them in, built from the instructor sources: correct, untouched (stub), wrong,
crashing and looping ones for every lab, and the attacks of issue 34 (a monkeypatch cheat, a function that
writes what it is given around every capture, endless loops in graded functions and in ungraded cells).

`python -m tests.course.submissions DEST` writes the whole folder (five notebooks per lab, plus the attacks),
which one command grades: `python -m speclab labs grade DEST --out scores.csv --jobs 2 --executed feedback`.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

from speclab.course.labbuild import learner_notebook

ROOT = Path(__file__).resolve().parents[2]
LABS = [p.stem for p in sorted((ROOT / "labs" / "source").glob("lab*.ipynb"))]

# The monkeypatch cheat of issue 34, and two stronger ones: the checks' helpers and torch patched in the
# notebook, and the same patch made from inside an answer while the checks call it.
CHEAT = """import speclab.checks as _c
_c.Lab._run_case = lambda *a: (True, "", "")
_c.expect = lambda *a, **k: None
_c.CheckFailed = type("Never", (Exception,), {})
import torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True"""
CHEAT_INSIDE = """

def _cheat():
    import sys
    for m in list(sys.modules.values()):
        if getattr(m, "__name__", "").startswith("speclab"):
            if hasattr(m, "Lab"):
                m.Lab._run_case = lambda *a: (True, "", "")
            if hasattr(m, "expect"):
                m.expect = lambda *a, **k: None
"""
LEAK = "LEAK:"


def source(lab: str):
    return nbformat.read(ROOT / "labs" / "source" / f"{lab}.ipynb", as_version=4)


def solved(lab: str):
    """What a learner who got everything right hands in."""
    return learner_notebook(source(lab), lab, keep_solutions=True)


def stub(lab: str):
    """The learner version, untouched."""
    return nbformat.read(ROOT / "labs" / f"{lab}.ipynb", as_version=4)


def answer_cell(nb, name: str):
    """The code cell that defines `name`."""
    return next(c for c in nb.cells if c.cell_type == "code" and re.search(rf"^def {name}\(", c.source, re.M))


def replaced(nb, name: str, body: str):
    """`nb` with the function `name` redefined (same signature) to run `body` instead: appended to its cell,
    as a learner who rewrote it would."""
    cell = answer_cell(nb, name)
    signature = re.search(rf"^def {name}\((.*?)\):", cell.source, re.M | re.S).group(1)
    lines = "\n".join("    " + line for line in body.splitlines())
    cell.source += f"\n\n\ndef {name}({signature}):\n{lines}\n"
    return nb


def after_lab_cell(nb, code: str):
    """`nb` with a code cell inserted right after the cell that makes the `Lab`."""
    i = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "Lab(" in c.source)
    nb.cells.insert(i + 1, new_code_cell(code))
    return nb


def before_score(nb, code: str):
    """`nb` with a code cell inserted before its last cell, `score()` (an ungraded cell of the learner's)."""
    nb.cells.insert(len(nb.cells) - 1, new_code_cell(code))
    return nb


def answers(lab: str) -> list[str]:
    """The function names of the lab's questions, in order (from `lab.question` in the source)."""
    text = "\n".join(c.source for c in source(lab).cells)
    return re.findall(r'lab\.question\("q\d+", "(\w+)"', text)


def cheat(lab: str):
    """The untouched stubs, plus the monkeypatch cheat in the notebook and inside the first answer."""
    nb = after_lab_cell(stub(lab), CHEAT)
    first = answers(lab)[0]
    answer_cell(nb, first).source += CHEAT_INSIDE
    cell = answer_cell(nb, first)
    cell.source = re.sub(rf"^(def {first}\(.*?\):\n)", r"\1    _cheat()\n", cell.source, count=1, flags=re.M | re.S)
    return nb


def leaky(lab: str, name: str):
    """The solved lab whose `name` writes every argument it gets past print's capture: the raw file
    descriptors, stderr, the display system, a file in its working directory and in its home. Only the
    checks call it (the ungraded cells that call it are left out)."""
    nb = solved(lab)
    cell = answer_cell(nb, name)
    body = (f"    import os, sys\n    _seen = {LEAK!r} + repr((args, kwargs)) + '\\n'\n"
            "    os.write(1, _seen.encode()); os.write(2, _seen.encode()); sys.__stdout__.write(_seen)\n"
            "    sys.stderr.write(_seen); print(_seen)\n"
            "    try:\n        from IPython.display import display\n        display(_seen)\n"
            "    except Exception:\n        pass\n"
            "    for folder in ('.', os.path.expanduser('~')):\n"
            "        with open(os.path.join(folder, 'leak.txt'), 'a') as f:\n            f.write(_seen)\n"
            f"    return _{name}(*args, **kwargs)\n")
    cell.source = cell.source.replace(f"def {name}(", f"def _{name}(", 1) + f"\n\n\ndef {name}(*args, **kwargs):\n{body}"
    # the learner's own demo cells that call it are left out, so that every line written comes from a check
    nb.cells = [c for c in nb.cells if c is cell or c.cell_type != "code" or f"{name}(" not in c.source]
    return nb


HOOK = "zz_speclab_hook"  # the .pth file the site-hook attack plants
# The line it plants: an import hook that, once the checks are imported in any later process of this
# interpreter (the judge of every later submission), makes every case pass.
HOOK_LINE = ("import builtins as _b; _b._orig_import = _b.__import__; exec(\"def _h(n, *a, **k):\\n"
             " m = _orig_import(n, *a, **k)\\n c = _orig_import('sys').modules.get('speclab.course.checks')\\n"
             " L = getattr(c, 'Lab', None)\\n if L is not None: L._run_case = lambda *a: (True, '', '')\\n return m\", "
             "_b.__dict__); "
             "_b.__import__ = _b._h")
TMP_LOG = "speclab-answers-log.txt"  # what the /tmp logger appends its inputs to, in every shared scratch folder


def site_hook(lab: str):
    """The untouched stubs, plus a cell that plants HOOK_LINE as a .pth file in every site-packages folder of
    the interpreter (and the user's), and one in the repository's package: a hook for everyone graded after."""
    code = (f"import os, site, speclab\nline = {HOOK_LINE!r}\n"
            "folders = site.getsitepackages() + [site.getusersitepackages(), os.path.dirname(speclab.__file__)]\n"
            "for folder in folders:\n    try:\n        os.makedirs(folder, exist_ok=True)\n"
            f"        with open(os.path.join(folder, '{HOOK}.pth'), 'w') as f:\n            f.write(line + '\\n')\n"
            "        print('planted in', folder)\n    except OSError as err:\n        print('refused:', err)")
    return after_lab_cell(stub(lab), code)


SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")


def tmp_logger(lab: str, name: str):
    """The solved lab whose `name` appends every argument it gets (hidden cases' inputs among them) to a file
    in each shared scratch folder, for a later submission to read."""
    nb = solved(lab)
    cell = answer_cell(nb, name)
    body = (f"    import os\n    for folder in {SCRATCH!r}:\n        try:\n"
            f"            with open(os.path.join(folder, {TMP_LOG!r}), 'a') as f:\n"
            f"                f.write({LEAK!r} + repr((args, kwargs)) + '\\n')\n"
            "        except OSError:\n            pass\n"
            f"    return _{name}(*args, **kwargs)\n")
    cell.source = cell.source.replace(f"def {name}(", f"def _{name}(", 1) + f"\n\n\ndef {name}(*args, **kwargs):\n{body}"
    return nb


def tmp_reader(lab: str):
    """The untouched stubs, plus a cell that prints whatever an earlier submission left in the scratch folders."""
    code = (f"import os\nfor folder in {SCRATCH!r}:\n    path = os.path.join(folder, {TMP_LOG!r})\n"
            "    if os.path.exists(path):\n        print(open(path).read())")
    return after_lab_cell(stub(lab), code)


def borrowing(lab: str, name: str, nb=None):
    """`nb` (the untouched stubs by default) with `name` taken from the lab's public check module, as the issue's
    learner did (`from speclab.course.labs.lab11 import reference_settle as settle_rows`): the module holds no
    reference now, only the values recorded on its own cases (`expected`), which is what it borrows."""
    return before_score(stub(lab) if nb is None else nb, f"from speclab.course.labs.{lab} import expected as {name}")


def looping(lab: str, names: list[str], waiting: bool | list[str] = False):
    """The solved lab with an endless loop in each function of `names`: a CPU-bound `while True: pass`, or, for
    every name with `waiting` True (or in `waiting`), one that never returns and sleeps (as an answer stuck
    waiting would), burning no CPU while each limit runs out."""
    nb = solved(lab)
    for name in names:
        sleeps = waiting is True or (isinstance(waiting, list) and name in waiting)
        replaced(nb, name, "import time\nwhile True:\n    time.sleep(0.01)" if sleeps else "while True:\n    pass")
    return nb


def crashing(lab: str, name: str):
    nb = solved(lab)
    return replaced(nb, name, "raise RuntimeError('my code is broken')")


def wrong(lab: str, name: str):
    """A plausible wrong answer: the right function's result, thrown away for a constant."""
    return replaced(solved(lab), name, "return 0")


def demo_loop(lab: str, nb=None):
    """`nb` (the solved lab by default) with an endless loop in an ungraded cell of the learner's."""
    return before_score(solved(lab) if nb is None else nb, "while True:  # an ungraded experiment that never ends\n    pass")


def folder(dest: Path) -> dict[str, str]:
    """Write every lab's correct, stub, wrong (q1 returns 0), crashing (q2 raises) and looping (q1 and the last
    question loop) submissions, and the attacks; returns {file name: what it is}."""
    dest.mkdir(parents=True, exist_ok=True)
    made = {}
    for lab in LABS:
        names = answers(lab)
        kinds = {"correct": (solved(lab), "every answer right"),
                 "stub": (stub(lab), "untouched"),
                 "wrong": (wrong(lab, names[0]), f"q1 ({names[0]}) returns 0"),
                 "crash": (crashing(lab, names[1]), f"q2 ({names[1]}) raises"),
                 "loop": (looping(lab, [names[0], names[-1]]), f"q1 and q{len(names)} loop forever")}
        for kind, (nb, what) in kinds.items():
            nbformat.write(nb, dest / f"{lab}_{kind}.ipynb")
            made[f"{lab}_{kind}.ipynb"] = what
    for name, (nb, what) in attacks().items():
        nbformat.write(nb, dest / name)
        made[name] = what
    return made


def attacks() -> dict[str, tuple]:
    # On lab 10: its kernel, judge and answer worker import torch alone (a graded solved lab 10, ~10 CPU-s; lab 9's
    # import the bundled models' code and run them, ~26), and its q6 hands the answer a function of the judge's
    # (target_ms), as lab 9's checks do. The judge alone meets the lab 9 cheat and spinning answers in test_judge.py.
    return {"lab10_cheat.ipynb": (cheat("lab10"), "stubs + the monkeypatch cheat"),
            # two attacks on a solved lab that score 100 all the same, in one submission (one kernel, judge and answer
            # worker fewer): an answer that writes its inputs everywhere, and an ungraded cell that never ends
            "lab10_leak_demo_loop.ipynb": (demo_loop("lab10", leaky("lab10", "rollback")),
                                           "solved; rollback writes its inputs everywhere; a demo cell never ends"),
            # loops that sleep: the grader stops them as it stops a spinning one (the same case limit, the same
            # interrupt), without burning the suite's CPU for a minute of limits; spinning answers and cells are stopped
            # by the judge (test_judge.py), in a check (test_a_case_that_runs_too_long_is_stopped), in a demo cell
            # (lab10_leak_demo_loop's) and by the notebook's timeout (test_a_submission_that_never_ends...)
            "lab10_loop_two.ipynb": (looping("lab10", ["pass_ms", "max_paying_k"], waiting=True),
                                     "solved; q5 and q6 never return (and so does the demo cell that calls them)")}

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "submissions")
    for file, what in folder(out).items():
        print(f"{file}: {what}")
