"""`speclab.grading`, the import path and command instructors use (`from speclab.grading import Lab`,
`python -m speclab.grading grade ...`): the same module as speclab.course.grading, not a copy."""
import sys

from speclab.course import grading

if __name__ == "__main__":
    sys.exit(grading.main())
sys.modules[__name__] = grading
