"""Notebook helpers: the machine line, glue outside the book, the trace table."""
import torch

from speclab.models import tiny_model
from speclab.notebook import environment_report, glue, machine, precision, round_kinds, trace_html
from speclab.stats import Round


class Tok:
    def decode(self, ids):
        return {1: "a", 2: "\n", 3: "<"}.get(ids[0], "?")


def test_machine_and_environment_name_what_a_timing_depends_on():
    line = machine("cpu", torch.float32)
    assert f"torch {torch.__version__}" in line and "device cpu" in line and "float32" in line
    report = environment_report("cpu", torch.float32)
    target, draft = tiny_model(), tiny_model().half()
    assert precision(target, draft) == "torch.float32 target, torch.float16 draft"
    assert precision(target, tiny_model()) == precision(target) == "torch.float32"
    assert report["device"] == "cpu" and report["torch threads"] == torch.get_num_threads()


def test_glue_returns_the_value_outside_the_book():
    assert glue("x", 3.5, display=False) == 3.5


def test_trace_kinds_and_html():
    rejected = Round(drafted=[1, 1, 2, 3], accepted=1, next_token=2)
    assert round_kinds(rejected) == [(1, "accepted"), (1, "rejected"), (2, "discarded"), (3, "discarded"),
                                     (2, "correction")]
    all_in = Round(drafted=[1, 2], accepted=2, next_token=3)
    assert round_kinds(all_in)[-1] == (3, "bonus")
    page = trace_html([rejected, all_in], Tok())
    assert page.count("<tr>") == 3 and "⏎" in page and "&lt;" in page and "line-through" in page
