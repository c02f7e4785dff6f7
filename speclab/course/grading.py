"""Grading a folder of submitted lab notebooks, for instructors; and the labs command line.

`python -m speclab labs grade SUBMISSIONS --out scores.csv --timeout 300` grades each notebook in three steps:
(1) it runs the notebook in its own kernel, temporary directory and process group, without network and,
where the machine allows it, in a sandbox (`SANDBOX`), each cell limited by `--cell-timeout`: this run gives
only the learner's outputs for the feedback; (2) a judge process (`speclab.course.judge`, forked on Linux from
one that imported the checks' modules once), which runs no learner code, runs every public and hidden check
from `labs/source/labNN.ipynb`, calling the learner's functions in an answer worker (`speclab.course.answers`),
each case limited by `--case-timeout`; (3) it writes a CSV row per notebook and, with `--executed DIR`, a
feedback notebook.

The sandbox fences writes, not reads: grade on a machine you can throw away. labs/instructors.md says each
step in full and what the grader does and does not defend against. `python -m speclab labs build` writes the
learner versions (`speclab.course.labbuild`); the checks are in `speclab.course.checks`.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
import contextlib
import csv
from dataclasses import dataclass, field
import json
import math
import os
from pathlib import Path
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import nbformat

from speclab.course.borrowing import borrowed
from speclab.course.checks import CASE_LIMIT_ENV, CASE_TIME_LIMIT_S, Lab
from speclab.course.judge import Judges
from speclab.course.labbuild import LAB_NAME, build, checks_source, find_root, learner_notebook, stale
from speclab.packaged import cache_root

RESULT_MARK = "@@speclab-grade@@"
CELL_TIMEOUT_S = 30  # one cell of a submission: an endless loop in an ungraded demo cell is interrupted here
# The limits above (a cell, a case, the whole run) are wall-clock times for a host with a core to spare. A host
# that is busy (other submissions graded side by side, a class's worth of jobs, CI beside them) gives each process
# a share of a core, and a correct answer would run out of time: solved lab 12 once scored 13.5% that way. So
# before each submission the grader measures the host's load (`load_factor`: how much longer than its own CPU time
# a CPU-bound loop takes right now) and stretches every limit by it, up to MAX_LOAD_FACTOR.
MAX_LOAD_FACTOR = 8.0
# From this load on, the submission's kernel, answer worker and judge run torch on one thread: on a busy host its
# threads spin while they wait for each other, and a 48-token generation of lab 2's bundled pair took 40 s of CPU
# (330 s of wall time) on two threads against 0.8 s on one.
BUSY = 1.5
FORKED_JUDGES = sys.platform == "linux"  # elsewhere (no fork, or fork unsafe with torch), a fresh judge process each

_RUNNER = r"""
import sys
# jsonschema's optional IRI format check, which notebook schemas never use, builds its parsers on import
# (1.4 s of CPU a graded notebook); absent, jsonschema skips that format (python-jsonschema issue 1428)
sys.modules["rfc3987_syntax"] = None
import nbformat
from nbclient import NotebookClient
src, out, workdir, timeout, cell_timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
nb = nbformat.read(src, as_version=4)


def executed(cell, cell_index, execute_reply):
    if (execute_reply or {}).get("content", {}).get("ename") == "CellTimeout":  # nbclient's reply after interrupting
        content = execute_reply["content"]
        cell.outputs.append(nbformat.v4.new_output("error", ename=content["ename"], evalue=content["evalue"],
                                                   traceback=[content["evalue"]]))
    nbformat.write(nb, out)  # kept if the whole run is killed later


client = NotebookClient(
    nb, timeout=cell_timeout, interrupt_on_timeout=True, kernel_name="python3", allow_errors=True,
    error_on_timeout={"ename": "CellTimeout", "evalue": f"this cell ran longer than {cell_timeout} s and was "
                      "interrupted by the grader; the notebook went on with the next cell", "traceback": []},
    on_cell_executed=executed,
    resources={"metadata": {"path": workdir}})
try:
    client.execute()
finally:
    nbformat.write(nb, out)
"""
SHELL_LINES = ("%pip", "%conda", "!", "%%bash", "%%sh", "%%script", "%%capture")


def _prepare(path: Path):
    """The submission to execute: shell and %pip lines neutralised (indentation kept), outputs dropped.
    Nothing is added: the checks run elsewhere (`speclab.course.judge`), never in the learner's kernel."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell["cell_type"] != "code":
            continue
        lines = []
        for line in cell["source"].splitlines():
            body = line.lstrip()
            if body.startswith(SHELL_LINES):
                line = line[:len(line) - len(body)] + "pass  # removed by the grader: " + body[:60]
            lines.append(line)
        cell["source"] = "\n".join(lines)
        cell["outputs"], cell["execution_count"] = [], None
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


FEEDBACK_CELL = ("# The grader's feedback: every check of this lab, public and hidden, run on the functions this\n"
                 "# notebook defines. Hidden checks are only counted here; the public ones are in speclab/course/labs/.")


def feedback_notebook(executed, feedback: str, note: str = ""):
    """The notebook that goes back to the learner: their cells with the outputs of their own run, then one
    cell holding the judge's feedback text and nothing else. The checks never ran in the learner's
    kernel, so no cell output can hold a hidden case's input."""
    text = (note + "\n" if note else "") + feedback.rstrip("\n") + "\n"
    cell = nbformat.v4.new_code_cell(FEEDBACK_CELL)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    executed.cells.append(cell)
    return executed


# What a submission's kernel and answer worker run in, on Linux: a user, mount, network and PID namespace of
# their own (unshare), where the submission's folder ($1) stays writable and every other mount is made
# read-only: the interpreter, site-packages, the repository, the instructor sources, other submissions'
# folders, and /tmp and /var/tmp (the submission's TMPDIR is its own folder, wiped after it; a shared /tmp is
# where one submission would leave notes for the next). /dev/shm, which Python's and torch's shared memory
# need, is a fresh one of its own. Loopback is up when $2 is 1 (a kernel talks to its client over it), and the
# learner's code runs with no capability left, so it cannot undo any of it. The interpreter and the repository
# stay where they are, under /tmp too, so a clone there grades as well.
SANDBOX = r"""set -e
S="$1"; LO="$2"; shift 2; D="$(pwd)"
if [ "$LO" = 1 ]; then ip link set lo up; fi
mount --bind "$S" "$S"
for m in $(awk '{print $5}' /proc/self/mountinfo); do
  case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac
  if [ "$m" = "$S" ]; then continue; fi
  mount -o remount,bind,ro "$m" 2>/dev/null || mount -o remount,bind,ro,nosuid,nodev "$m" 2>/dev/null \
    || mount -o remount,bind,ro,nosuid,nodev,noexec "$m"
done
case "$S" in /dev/shm|/dev/shm/*) ;; *) if [ -d /dev/shm ]; then mount -t tmpfs -o mode=1777,size=2g tmpfs /dev/shm; fi;; esac
cd "$D"  # the working directory again, through the mounts above (inside $S: writable)
exec setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all --no-new-privs -- "$@"
"""


@dataclass(frozen=True)
class Isolation:
    """How this machine lets the grader fence a submission in: its network cut, its files sandboxed
    (SANDBOX), its processes in a PID namespace that dies with it. What is missing is said in the CSV."""
    network: bool = False
    files: bool = False
    pids: bool = False

    def prefix(self, writable: Path, loopback: bool) -> list[str]:
        """The command prefix that runs a process fenced in as far as this machine allows."""
        unshare = shutil.which("unshare")
        if not unshare or not (self.network or self.files):
            return []
        flags = "-r" + ("n" if self.network else "") + ("m" if self.files else "") + ("pf" if self.pids else "")
        cmd = [unshare, flags] + (["--kill-child"] if self.pids else [])
        if self.files:
            return cmd + ["--propagation", "private", "sh", "-c", SANDBOX, "sh", str(writable),
                          "1" if loopback and self.network else "0"]
        if loopback:
            return cmd + ["sh", "-c", f'{shutil.which("ip") or "ip"} link set lo up && exec "$@"', "sh"]
        return cmd

    def describe(self) -> tuple[str, str]:
        """The CSV's network and files columns."""
        return ("cut" if self.network else "allowed",
                "sandboxed" if self.files else "shared (this machine allows no mount namespace)")


def grading_root() -> Path:
    """Where submissions' folders are made: SPECLAB_GRADING_DIR, else the cache's grading/ folder."""

    root = Path(os.environ.get("SPECLAB_GRADING_DIR") or cache_root() / "grading")
    root.mkdir(parents=True, exist_ok=True)
    return root


def detect_isolation(network: bool = True) -> Isolation:
    """The strongest Isolation this machine runs a process under (tried once, on an empty folder), or none."""
    if sys.platform != "linux" or not shutil.which("unshare"):
        return Isolation()
    tries = [Isolation(network, True, True), Isolation(network, True, False)]
    if network:
        tries += [Isolation(True, False, True), Isolation(True, False, False)]
    with tempfile.TemporaryDirectory(prefix="probe-", dir=grading_root()) as probe:
        for isolation in tries:
            if _first_that_runs([isolation.prefix(Path(probe), loopback=True)]):
                return isolation
    return Isolation()


def _first_that_runs(wrappers: list[list[str]]) -> list[str]:
    for wrapper in wrappers:
        try:
            if subprocess.run(wrapper + ["true"], capture_output=True, timeout=10).returncode == 0:
                return wrapper
        except (OSError, subprocess.TimeoutExpired):
            continue
    return []


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


def load_factor(cpu_seconds: float = 0.2) -> float:
    """How many times longer than its CPU time a CPU-bound loop takes on this host now: 1 with a core to spare,
    about (runnable threads / cores) on a busy host, at most MAX_LOAD_FACTOR. Costs cpu_seconds of CPU."""
    wall, cpu = time.perf_counter(), time.process_time()
    x = 0
    while time.process_time() - cpu < cpu_seconds:
        for i in range(20000):
            x += i * i
    spent_cpu, spent_wall = time.process_time() - cpu, time.perf_counter() - wall
    return round(min(MAX_LOAD_FACTOR, max(1.0, spent_wall / max(spent_cpu, 1e-9))), 2)


@dataclass
class Grade:
    submission: str
    lab: str = ""
    status: str = "ok"
    seconds: float = 0.0
    questions: dict[str, tuple[float, float]] = field(default_factory=dict)  # qid -> (earned, points)
    flags: list[str] = field(default_factory=list)  # answers borrowed rather than written (speclab.course.borrowing)
    load: float = 1.0  # the host's load factor when it was graded: every time limit was stretched by it

    @property
    def score(self) -> float:
        return sum(e for e, _ in self.questions.values())


def grade_one(path: Path, lab: str, tests: str, max_points: dict[str, float], timeout: float,
              isolation: Isolation, executed_dir: Path | None = None, threads: int | None = None,
              cell_timeout: int = CELL_TIMEOUT_S, case_limit: float = CASE_TIME_LIMIT_S,
              answers: dict[str, str] | None = None, scale_to_load: bool = True, offered: str | None = None,
              judges: Judges | None = None, name: str | None = None) -> Grade:
    """Run the submission in its own kernel (for the learner's outputs), then judge the functions it defines
    (`speclab.course.judge`), then write its feedback notebook: one for every readable submission. With
    scale_to_load, every limit is stretched by the host's load factor, measured first (`load_factor`). `offered` is
    the lab's own text (its learner version): the speclab functions it names are the ones an answer may call.
    `name` (default: the file's name) is the submission's row in the CSV and its feedback notebook's path under
    executed_dir: grade_folder passes the path under the submissions folder, so that alice/lab03.ipynb and
    bob/lab03.ipynb stay two rows and two feedback notebooks."""
    name = name or path.name
    grade = Grade(name, lab, questions={q: (0.0, p) for q, p in max_points.items()})
    fixed_threads = "OMP_NUM_THREADS" in os.environ  # the instructor's own choice stands
    if scale_to_load:
        grade.load = load_factor()
        timeout, case_limit = timeout * grade.load, case_limit * grade.load
        cell_timeout = int(math.ceil(cell_timeout * grade.load))
        if grade.load > BUSY and not fixed_threads:  # torch's threads spin waiting for a core a busy host lacks
            threads = 1
    start = time.perf_counter()
    try:
        nb = _prepare(path)
    except Exception as err:  # noqa: BLE001 (an unreadable file is a row in the table, not a crash)
        grade.status = f"unreadable notebook: {type(err).__name__}: {err}"[:200]
        return grade
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    grade.flags = borrowed(cells, answers or {}, offered)
    # the submission's own folder, the one place its processes can write; wiped with everything in it
    with tempfile.TemporaryDirectory(prefix="submission-", dir=grading_root(), ignore_cleanup_errors=True) as tmp:
        work, answers = Path(tmp) / "work", Path(tmp) / "answers"
        work.mkdir()
        answers.mkdir()
        env = _learner_env(work, threads, case_limit)
        executed, note = _execute(nb, Path(tmp), env, isolation.prefix(Path(tmp), loopback=True), timeout,
                                  cell_timeout, grade)
        result = _judge(lab, tests, cells, env, isolation.prefix(Path(tmp), loopback=False), answers, timeout,
                        case_limit, judges)
        _make_removable(Path(tmp))
    grade.seconds = round(time.perf_counter() - start, 1)
    if result is None:
        grade.status = "error: the checks did not finish" if grade.status == "ok" else grade.status
        feedback = "The grader could not finish checking this notebook: ask your instructor for the details."
    else:
        for qid, info in result["questions"].items():
            grade.questions[qid] = (float(info["earned"]), float(info["points"]))
        late = [qid for qid, info in result["questions"].items() if info["timed_out"]]
        if late and grade.status == "ok":
            grade.status = f"ok (out of time: {', '.join(late)})"
        feedback = result["feedback"]
    if grade.flags:
        feedback += "\nFlagged for your instructor (borrowed, not written):\n" + "".join(f"  {f}\n" for f in grade.flags)
    if executed_dir is not None:  # written after every process of the submission was killed
        (executed_dir / name).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(feedback_notebook(executed, feedback, note), executed_dir / name)
    return grade


def _learner_env(work: Path, threads: int | None, case_limit: float = CASE_TIME_LIMIT_S) -> dict[str, str]:
    """A clean environment for the learner's kernel and answer worker: no credentials, no hub access, and the
    grader's case limit for the notebook's own check() calls."""
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
           "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", CASE_LIMIT_ENV: f"{case_limit:g}"}
    if threads:  # notebooks graded side by side share the cores instead of each taking all of them
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "VIRTUAL_ENV", "PYTHONPATH"):
        if var in os.environ:
            env[var] = os.environ[var]
    return env


def _execute(nb, tmp: Path, env: dict[str, str], isolate: list[str], timeout: float, cell_timeout: int,
             grade: Grade):
    """Run the notebook top to bottom in a kernel (each cell interrupted after cell_timeout s, the whole killed
    after timeout s). Returns the executed notebook, read into memory before any learner code runs again,
    and a note for the learner about cells that were interrupted or never ran."""
    src, out = tmp / "submission.ipynb", tmp / "executed.ipynb"
    nbformat.write(nb, src)
    cmd = isolate + [sys.executable, "-c", _RUNNER, str(src), str(out), str(tmp / "work"), str(timeout),
                     str(cell_timeout)]
    proc = subprocess.Popen(cmd, cwd=tmp / "work", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        grade.status = f"timeout after {timeout:g} s"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the runner, its kernel and anything they started
        proc.wait()
    try:
        executed = nbformat.read(out, as_version=4)
    except Exception:  # noqa: BLE001 (killed before the first cell finished, or the file was tampered with)
        executed = nbformat.read(src, as_version=4)
    return executed, _run_note(executed, grade.status, timeout, cell_timeout)


def _run_note(executed, status: str, timeout: float, cell_timeout: int) -> str:
    code = [c for c in executed.cells if c.cell_type == "code"]
    interrupted = [i for i, c in enumerate(code)
                   if any(o.get("ename") == "CellTimeout" for o in c.get("outputs", []))]
    lines = [f"Code cell {i + 1} ran longer than {cell_timeout} s and was interrupted: "
             f"`{code[i].source.strip().splitlines()[0][:60] if code[i].source.strip() else ''}`" for i in interrupted]
    if status.startswith("timeout"):
        lines.append(f"Your notebook did not finish within {timeout:g} s and was stopped; the checks below still "
                     "ran on the functions it defines.")
    return "\n".join(lines)


def _make_removable(folder: Path) -> None:
    """Give back write permission on every folder a submission made read-only, so that it can be wiped."""
    for path in [folder, *folder.rglob("*")]:
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o700)


def _judge(lab: str, tests: str, cells: list[str], env: dict[str, str], worker_isolate: list[str], workdir: Path,
           timeout: float, case_limit: float, judges: Judges | None = None) -> dict | None:
    """The judge's verdict (`speclab.course.judge`), or None if it did not finish within timeout seconds: from a
    fork of `judges` where the grader started them, else from a judge process of its own, which reads the job on
    its standard input. The verdict is the line that starts with the job's nonce."""
    nonce = RESULT_MARK + secrets.token_hex(16) + ":"
    job = {"lab": lab, "tests": tests, "cells": cells, "env": env, "isolate": worker_isolate,
           "workdir": str(workdir), "case_limit": case_limit, "nonce": nonce}
    out = None
    if judges is not None:
        with contextlib.suppress(OSError):  # the server is gone: a judge of its own, below
            out = judges.verdict(job, timeout) or ""
    if out is None:
        out = _judge_process(job, timeout)
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(nonce)), None)
    return json.loads(line[len(nonce):]) if line is not None else None


def _judge_process(job: dict, timeout: float) -> str:
    # torch's threads are set by the judge itself, from the job's environment (judge._judge_job)
    judge_env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.Popen([sys.executable, "-m", "speclab.course.judge"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=judge_env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(json.dumps(job), timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return out


def grade_folder(submissions: str | Path, out_csv: str | Path, timeout: float = 300, source: str | Path | None = None,
                 lab: str | None = None, jobs: int = 1, executed_dir: str | Path | None = None,
                 network: bool = False, cell_timeout: int = CELL_TIMEOUT_S,
                 case_limit: float = CASE_TIME_LIMIT_S, scale_to_load: bool = True) -> list[Grade]:
    """Grade every .ipynb under `submissions` (checkpoints skipped) and write the CSV. Returns the rows."""
    source_dir = Path(source) if source is not None else find_root() / "labs" / "source"
    labs = {p.stem: p for p in sorted(source_dir.glob("lab*.ipynb"))}
    if not labs:
        raise FileNotFoundError(f"no instructor sources (lab*.ipynb) in {source_dir}: pass --source")
    if lab is not None and lab not in labs:
        raise ValueError(f"--lab {lab}: no {lab}.ipynb in {source_dir}")
    tests, points, answers, offered = {}, {}, {}, {}
    for name, path in labs.items():
        nb = nbformat.read(path, as_version=4)
        tests[name] = checks_source(nb, hidden=True)
        probe = Lab(name, public_tests=False)
        probe.load_tests(tests[name], f"<{name} tests>")
        points[name] = {q.qid: q.points for q in probe.questions.values()}
        answers[name] = {q.qid: q.answer for q in probe.questions.values()}
        offered[name] = "\n".join(c.source for c in learner_notebook(nb, name).cells)  # what it lets an answer call
    submissions = Path(submissions)
    paths = sorted(p for p in submissions.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    isolation = detect_isolation(network=not network)
    keep = Path(executed_dir) if executed_dir is not None else None
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None

    def one(path: Path) -> Grade:
        name = path.relative_to(submissions).as_posix()  # learners' folders may hold files of one name
        try:
            nbformat.read(path, as_version=4)
        except Exception as err:  # noqa: BLE001 (an unreadable file is a row in the table, not a crash)
            return Grade(name, status=f"unreadable notebook: {type(err).__name__}: {err}"[:200])
        which = lab or detect_lab(path, labs)
        if which is None:
            return Grade(name, status="no lab found: the notebook has no Lab(\"labNN\") call; pass --lab")
        return grade_one(path, which, tests[which], points[which], timeout, isolation, keep, threads, cell_timeout,
                         case_limit, answers[which], scale_to_load, offered[which], judges, name)

    # one server imports what the checks need while the first notebook runs; each submission's judge is a fork of it
    present = sorted(({lab} if lab else {detect_lab(p, labs) for p in paths}) - {None})
    judges = (Judges([tests[name] for name in present], dict(os.environ, PYTHONHASHSEED="0"))
              if FORKED_JUDGES and present else None)
    try:
        if jobs > 1:
            with ThreadPoolExecutor(jobs) as pool:
                grades = list(pool.map(one, paths))
        else:
            grades = [one(p) for p in paths]
    finally:
        if judges is not None:
            judges.close()
    write_csv(grades, out_csv, isolation)
    return grades


def write_csv(grades: list[Grade], out_csv: str | Path, isolation: Isolation = Isolation(True, True, True)) -> None:
    qids = sorted({q for g in grades for q in g.questions}, key=lambda q: (len(q), q))
    with open(out_csv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["submission", "lab", "score", "max_score", "percent", *qids, "status", "seconds", "network",
                    "files", "flags", "load"])
        network, files = isolation.describe()
        for g in grades:
            maximum = sum(p for _, p in g.questions.values())
            percent = round(100 * g.score / maximum, 1) if maximum else 0.0
            cells = [f"{g.questions[q][0]:.2f}" if q in g.questions else "" for q in qids]
            w.writerow([g.submission, g.lab, f"{g.score:.2f}", f"{maximum:g}", f"{percent:g}", *cells, g.status,
                        g.seconds, network, files, "; ".join(g.flags), f"{g.load:g}"])


# ================================================================ command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speclab labs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="generate the learner notebooks and public checks from labs/source")
    b.add_argument("--root", default=None, help="repository root (default: found from here)")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 if the committed files are stale")
    g = sub.add_parser("grade", help="grade a folder of submitted lab notebooks into a CSV")
    g.add_argument("submissions", help="folder of .ipynb files (searched recursively)")
    g.add_argument("--out", default="scores.csv", help="CSV to write (default scores.csv)")
    g.add_argument("--timeout", type=float, default=300, help="seconds per notebook run, and again for its "
                   "checks (default 300)")
    g.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S, help="seconds per cell, after which the "
                   f"cell is interrupted and the notebook goes on (default {CELL_TIMEOUT_S})")
    g.add_argument("--case-timeout", type=float, default=CASE_TIME_LIMIT_S, help="seconds per check case "
                   f"(default {CASE_TIME_LIMIT_S:g})")
    g.add_argument("--source", default=None, help="folder of instructor sources (default labs/source)")
    g.add_argument("--lab", default=None, help="grade every notebook as this lab (default: read from each notebook)")
    g.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    g.add_argument("--executed", default=None, help="also save each executed notebook here, with the feedback "
                   "in its last cell (fit to hand back: it holds no hidden check)")
    g.add_argument("--allow-network", action="store_true", help="do not cut the network of submissions")
    g.add_argument("--fixed-limits", action="store_true", help="do not stretch the time limits by the host's load "
                   "(measured before each submission; the CSV's load column)")
    args = parser.parse_args(argv)
    if args.command == "build":
        if args.check:
            problems = stale(args.root)
            for p in problems:
                print(f"stale: {p}")
            print("learner versions are up to date" if not problems else
                  "run `python -m speclab labs build` and commit the result")
            return 1 if problems else 0
        for path in build(args.root):
            print(f"wrote {path}")
        return 0
    grades = grade_folder(args.submissions, args.out, args.timeout, args.source, args.lab, args.jobs,
                          args.executed, network=args.allow_network, cell_timeout=args.cell_timeout,
                          case_limit=args.case_timeout, scale_to_load=not args.fixed_limits)
    network, files = detect_isolation(network=not args.allow_network).describe()
    print(f"network of submissions: {network}; their files: {files}")
    for gr in grades:
        maximum = sum(p for _, p in gr.questions.values())
        flagged = f"; flagged: {'; '.join(gr.flags)}" if gr.flags else ""
        loaded = f", limits x{gr.load:g} for the host's load" if gr.load > 1 else ""
        print(f"{gr.submission}: {gr.lab or '?'} {gr.score:.2f}/{maximum:g} ({gr.status}, {gr.seconds} s{loaded}{flagged})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
