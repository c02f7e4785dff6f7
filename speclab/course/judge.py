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

import json
import sys
import tempfile
from typing import Any

from speclab.course.answers import AnswerProcess, RemoteNamespace, definitions
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


def main() -> int:
    job = json.loads(sys.stdin.read())
    result = judge(job["lab"], job["tests"], job["cells"], job.get("env"), job.get("isolate"),
                   job.get("case_limit", CASE_TIME_LIMIT_S), job.get("workdir"))
    sys.stdout.write(job["nonce"] + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
