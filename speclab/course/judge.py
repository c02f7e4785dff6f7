"""The judge: every public and hidden check of one lab against one submission, in a process that runs no learner code.

`speclab.course.grading` starts `python -m speclab.course.judge` for each submission and writes the job to
its standard input as JSON (the lab, its test source, the submission's code cells, the learner process's
environment, a nonce); the judge answers on its standard output with one line, the nonce then JSON: the
points per question and the feedback text for the learner. The learner's functions run in an answer
worker (`speclab.course.answers`), one process per submission, started fresh after a case that had to kill
it; the checks, their helpers and references live here only.

The public cases of every question run before any hidden case, so nothing the learner's code saw in a
hidden case can come back in a public case's message; a question whose public case ran out of time is not
run again on its hidden cases.
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any

import torch

from speclab.course.answers import AnswerProcess, RemoteNamespace, WireError, WorkerDied, definitions, recv, send
from speclab.course.checks import CASE_TIME_LIMIT_S, CaseResult, CheckResult, Lab, ScoreSummary


def judge(lab_name: str, tests: str, cells: list[str], env: dict[str, str] | None = None,
          isolate: list[str] | None = None, case_limit: float = CASE_TIME_LIMIT_S,
          workdir: str | None = None) -> dict[str, Any]:
    """Run every case of the lab against the learner's definitions; the points and the feedback. The answer
    worker runs in a fresh folder inside `workdir` (the submission's own, where the grader sandboxes it)."""
    lab = Lab(lab_name, public_tests=False, time_limit=case_limit)
    lab.load_tests(tests, f"<{lab_name} grading tests>")
    with tempfile.TemporaryDirectory(prefix="speclab-answers-", dir=workdir) as workdir:
        process = AnswerProcess(definitions(cells), workdir, isolate, env)
        try:
            return verdict(lab, RemoteNamespace(process))
        finally:
            process.kill()


def verdict(lab: Lab, ns: Any) -> dict[str, Any]:
    """Every case of `lab` (its hidden tests loaded) against the answers in `ns`: the learner's feedback and
    the points. `ns` is the answer worker's namespace when grading; a plain dict runs the answers in process
    (the test suite checks every lab's feedback on its stubs that way)."""
    results = _run_all(lab, ns)
    feedback = ("\n".join(r.report(hidden_details=False) for r in results) + "\n"
                + ScoreSummary(lab.name, results).report())
    return {"lab": lab.name, "feedback": feedback, "questions": {
        r.question: {"answer": r.answer, "points": r.points, "earned": r.earned,
                     "timed_out": any(c.timed_out for c in r.cases)} for r in results}}


def _run_all(lab: Lab, ns: RemoteNamespace) -> list[CheckResult]:
    public = {qid: _run(lab, qid, ns, hidden=False) for qid in lab.questions}
    for qid, result in public.items():
        hidden = [c for c in lab.cases if c.question == qid and c.hidden]
        if not hidden or result.error:
            continue
        if any(c.timed_out for c in result.cases):
            result.cases += [CaseResult(qid, c.name, False, "not run: an earlier case took too long", c.hint, True)
                             for c in hidden]
            continue
        more = _run(lab, qid, ns, hidden=True)
        result.cases += more.cases
        result.error = result.error or more.error
    return list(public.values())


def _run(lab: Lab, qid: str, ns: RemoteNamespace, hidden: bool) -> CheckResult:
    try:
        return lab.run(qid, ns, hidden=hidden, public=not hidden)
    except Exception as err:  # noqa: BLE001 (the learner's process would not start: the question scores 0)
        question = lab.questions[qid]
        return CheckResult(lab.name, qid, question.answer, points=question.points,
                           error=f"your notebook's definitions could not be loaded to check them ({type(err).__name__})")


def _judge_job(job: dict[str, Any], threads: int | None = None) -> str:
    """The verdict on one job (the grader's JSON), as the line the grader reads: the nonce, then JSON. The judge
    runs torch on the learner's processes' share of the cores where the grader set one, else on `threads`."""
    share = (job.get("env") or {}).get("OMP_NUM_THREADS")
    if share or threads:
        torch.set_num_threads(int(share) if share else threads)
    result = judge(job["lab"], job["tests"], job["cells"], job.get("env"), job.get("isolate"),
                   job.get("case_limit", CASE_TIME_LIMIT_S), job.get("workdir"))
    return job["nonce"] + json.dumps(result)


# ================================================================ judges forked from one that imported once
# A judge's imports (torch, transformers, the speclab modules its lab's checks name) cost ~4 CPU-s, more than most
# labs' checks. So the grader starts one server that imports them once, runs no check and no learner code, and
# forks a judge from it for each submission: each fork starts from the state a fresh process would reach and ends
# with its submission. Each job's socket reaches the server as a file descriptor over a socket pair only the
# grader holds: there is no path in the file system that a learner's process could connect to.
def preload(tests: list[str]) -> None:
    """Import what the labs' check sources import at their top level (instructor code, never a learner's)."""
    for source in tests:
        for node in ast.parse(source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                with contextlib.suppress(Exception):
                    exec(compile(ast.Module([node], []), "<preload>", "exec"), {})


def serve_forks(control_fd: int) -> None:
    """The server: preload, then fork one judge per socket received, until the grader closes the control socket."""
    control = socket.socket(fileno=control_fd)
    threads = torch.get_num_threads()
    # No OpenMP thread pool may start in the server: a fork of a process whose pool has run hangs in its first
    # parallel operation (GNU OpenMP is not fork-safe). Each fork starts its own pool, on `threads` threads.
    torch.set_num_threads(1)
    preload(json.loads(recv(control)))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # finished judges are reaped by the kernel
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1, 1)
        if not message:
            return
        if os.fork() == 0:
            _forked_judge(control, fds[0], threads)
        for fd in fds:
            os.close(fd)


def _forked_judge(control: socket.socket, fd: int, threads: int) -> None:
    """One judge, in a fork of the server: its pid to the grader (to kill it by), the job in, the verdict out."""
    try:
        control.close()
        os.setsid()  # its own process group, as a judge started by the grader leads
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # it waits for its answer worker
        conn = socket.socket(fileno=fd)
        send(conn, str(os.getpid()).encode())
        send(conn, _judge_job(json.loads(recv(conn)), threads).encode())
        conn.recv(1)  # alive until the grader kills it: its pid cannot have gone to another process by then
    finally:
        os._exit(0)


class Judges:
    """The grader's side of the server: `verdict(job, timeout)` judges one job in a fresh fork; `close()`."""

    def __init__(self, tests: list[str], env: dict[str, str]):
        mine, theirs = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-m", "speclab.course.judge", "--forks", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self.control, self.lock = mine, threading.Lock()
        send(self.control, json.dumps(tests).encode())

    def verdict(self, job: dict[str, Any], timeout: float) -> str | None:
        """The judge's line (the nonce, then JSON), or None if it did not answer within timeout seconds.
        Raises OSError if the server is gone (the grader then starts a judge of its own)."""
        mine, theirs = socket.socketpair()
        try:
            with self.lock:
                socket.send_fds(self.control, [b"j"], [theirs.fileno()])
        finally:
            theirs.close()
        pid = None
        mine.settimeout(timeout)  # each read below; the verdict comes in one message at the end
        try:
            pid = int(recv(mine))
            send(mine, json.dumps(job).encode())
            return recv(mine).decode()
        except (OSError, ValueError, WireError, WorkerDied):  # timed out, or the judge died
            return None
        finally:
            if pid is not None:  # the judge and what it started in its group, then the socket it waits on
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            mine.close()

    def close(self) -> None:
        self.control.close()  # the server's recv_fds sees the end and it returns
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def main() -> int:
    if sys.argv[1:2] == ["--forks"]:
        serve_forks(int(sys.argv[2]))
        return 0
    sys.stdout.write(_judge_job(json.loads(sys.stdin.read())) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
