"""python -m speclab labs: build the learner labs from their sources, grade a folder of submissions
(python -m speclab labs build | python -m speclab labs grade DIR --out scores.csv).

The command is speclab.course.grading's own command line, which builds its parser inside its main()."""
from __future__ import annotations

from speclab.course import grading


def main(argv: list[str] | None = None) -> int:
    """grading's exit status: 1 where `labs build --check` finds stale learner files."""
    return grading.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
