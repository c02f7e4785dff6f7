"""Grading a folder of submitted lab notebooks, for instructors; and the labs command line.

`python -m speclab labs grade SUBMISSIONS --out scores.csv --timeout 300` (or `python -m speclab.grading
grade ...`) runs each submitted notebook in its own temporary directory and kernel process group, with
no network where the machine allows it, under a time limit; then it runs every public and hidden check
(read from the instructor source, `labs/source/labNN.ipynb`) against what the notebook defined and writes
one CSV row per notebook. With `--executed DIR` it also keeps each executed notebook with the grader's
feedback in its last cell, fit to hand back to the learner: it holds no hidden check and nothing of the
grading harness, only the learner's cells with their outputs and, per question, what passed and the first
failing public check. It is not a security sandbox: run it on a machine (or container) you can throw away.

`python -m speclab labs build` writes the learner versions (see `speclab.course.labbuild`); the checks a learner
runs, and that cases are written with, are in `speclab.course.checks`.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from speclab.course.checks import Lab, ScoreSummary
from speclab.course.labbuild import LAB_NAME, build, checks_source, find_root, stale

RESULT_MARK = "@@speclab-grade@@"


def grade_namespace(lab_name: str, tests: str, nonce: str, ns: dict) -> str:
    """Run in the submission's kernel after its cells: every public and hidden case against `ns`.
    Returns the feedback for the learner (hidden cases only counted) followed by one line `nonce + JSON`."""
    lab = Lab(lab_name, public_tests=False)
    lab.load_tests(tests, f"<{lab_name} grading tests>")
    results = [lab.run(qid, ns) for qid in lab.questions]
    payload = {"lab": lab_name, "questions": {
        r.question: {"answer": r.answer, "points": r.points, "earned": r.earned} for r in results}}
    feedback = ("\n".join(r.report(hidden_details=False) for r in results) + "\n"
                + ScoreSummary(lab_name, results).report())
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
    call = (f"import speclab.course.grading as _speclab_grading\n"
            f"print(_speclab_grading.grade_namespace({lab!r}, {tests!r}, {nonce!r}, globals()))")
    nb.cells.append(nbformat.v4.new_code_cell(call))
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


FEEDBACK_CELL = ("# The grader's feedback: every check of this lab, public and hidden, run on this notebook from top\n"
                 "# to bottom. Hidden checks are only counted here; the public ones are in speclab/course/labs/.")


def feedback_notebook(executed, nonce: str):
    """The executed submission as it may go back to the learner: their cells with their outputs, then the
    feedback. The grading cell's source (which holds every check, hidden ones included, and the nonce)
    becomes a plain comment, and of its outputs only the printed feedback stays: the nonce line goes, so
    does what went to stderr (a warning raised in a hidden case quotes its line), and an error's traceback
    (which could quote a hidden check too) becomes one line."""
    cell = executed.cells[-1]
    outputs = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            text = "".join(ln for ln in o["text"].splitlines(True) if not ln.startswith(nonce))
            if text:
                outputs.append(nbformat.v4.new_output("stream", name="stdout", text=text))
        elif o.get("output_type") == "error":
            outputs.append(nbformat.v4.new_output("stream", name="stderr", text=(
                f"The grader could not finish checking this notebook ({o.get('ename', 'error')}): "
                "ask your instructor for the details.\n")))
    cell["source"], cell["outputs"], cell["metadata"] = FEEDBACK_CELL, outputs, {}
    return executed


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
            if executed_dir is not None:
                executed_dir.mkdir(parents=True, exist_ok=True)
                nbformat.write(feedback_notebook(executed, nonce), executed_dir / path.name)
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
    parser = argparse.ArgumentParser(prog="python -m speclab labs", description=__doc__.split("\n\n")[0])
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
    g.add_argument("--executed", default=None, help="also save each executed notebook here, with the feedback "
                   "in its last cell (fit to hand back: it holds no hidden check)")
    g.add_argument("--allow-network", action="store_true", help="do not cut the network of submissions")
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
                          args.executed, network=args.allow_network)
    for gr in grades:
        maximum = sum(p for _, p in gr.questions.values())
        print(f"{gr.submission}: {gr.lab or '?'} {gr.score:.2f}/{maximum:g} ({gr.status}, {gr.seconds} s)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
