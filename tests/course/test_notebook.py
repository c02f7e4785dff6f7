"""Notebook helpers: the machine line, glue outside the book, the trace table."""
import json

import pytest
import torch

from speclab.models import tiny_model
from speclab.course import notebook
from speclab.course.notebook import MACHINE_WIDTH, environment_report, glue, machine, precision, round_kinds, trace_html
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


def test_machine_line_says_thread_in_the_singular_and_fits_its_box():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        line = machine("cpu", "torch.float32 target, torch.float16 draft")
        assert "1 thread," in line and "1 threads" not in line
        assert "dtype float32 target, float16 draft" in line
        assert all(len(row) <= MACHINE_WIDTH for row in line.splitlines())
        torch.set_num_threads(2)
        assert "2 threads," in machine("cpu")
        narrow = machine("cpu", torch.float32, width=30)
        assert len(narrow.splitlines()) > 1 and all(row.startswith("  ") for row in narrow.splitlines()[1:])
    finally:
        torch.set_num_threads(threads)


def test_glue_shows_nothing_under_a_cell():
    # a cell ending in glue(...) must not print the raw value (41.791044776119406) under it
    assert glue("x", 3.5, display=False) is None


def test_trace_kinds_and_html():
    rejected = Round(drafted=[1, 1, 2, 3], accepted=1, next_token=2)
    assert round_kinds(rejected) == [(1, "accepted"), (1, "rejected"), (2, "discarded"), (3, "discarded"),
                                     (2, "correction")]
    all_in = Round(drafted=[1, 2], accepted=2, next_token=3)
    assert round_kinds(all_in)[-1] == (3, "bonus")
    page = trace_html([rejected, all_in], Tok())
    assert page.count("<tr>") == 3 and "⏎" in page and "&lt;" in page and "line-through" in page


def test_output_html_colours_each_token_by_who_produced_it():
    from speclab.course.notebook import output_html
    rounds = [Round(drafted=[1, 2], accepted=2, next_token=3), Round(drafted=[], accepted=0, next_token=4),
              Round(drafted=[5, 6], accepted=1, next_token=7)]
    page = output_html(rounds, Tok(), ["lookup", "drafter"])
    kinds = [part.split('"')[0] for part in page.split('title="')[1:]]
    # round 1: two lookup drafts and the bonus; round 2 drafted nothing; round 3: one accepted draft, the correction
    assert kinds == ["lookup", "lookup", "target", "target", "drafter", "target"]
    assert output_html(rounds, Tok()).count('title="drafter"') == 3  # without sources: every draft is the drafter's


def test_draw_tree_puts_parents_above_the_middle_of_their_children():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from speclab.course.notebook import draw_tree, tree_layout
    parents = [-1, -1, 0, 0, 1]
    x, y = tree_layout(parents)
    assert y[-1] == 0 and y[0] == y[1] == -1 and y[2] == y[3] == y[4] == -2
    assert x[0] == (x[2] + x[3]) / 2 and x[1] == x[4] and sorted([x[2], x[3], x[4]]) == [0, 1, 2]
    fig, ax = plt.subplots()
    draw_tree(ax, parents, ["a", "b", "c", "d", "e"], "a tree", colors=["w", "y", "w", "y", "w"])
    assert len(ax.texts) == 6 and ax.get_title() == "a tree"
    plt.close(fig)


def test_a_record_not_beside_an_installed_package_is_fetched_once_and_kept(tmp_path, monkeypatch):
    # pip on Colab installs the package, not book/records: the chapter's record comes from the repository
    here = notebook.RECORDS / "12_load_test.json"
    monkeypatch.setattr(notebook, "RECORDS", tmp_path / "site-packages" / "book" / "records")
    monkeypatch.setenv("SPECLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    asked = []
    monkeypatch.setattr(notebook, "download", lambda url: asked.append(url) or here.read_bytes())
    first = notebook.read_record("12_load_test")
    assert first == notebook.current_rows(json.loads(here.read_text()))
    assert asked == [notebook.RAW_RECORDS + "12_load_test.json"]
    assert notebook.read_record("12_load_test.json") == first and len(asked) == 1  # kept: fetched once


def test_a_record_that_cannot_be_fetched_says_where_to_run_the_chapter(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "RECORDS", tmp_path / "none")
    monkeypatch.setenv("SPECLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)

    def offline(url):
        raise OSError("no network")
    for reply in (offline, lambda url: b"<html>rate limited</html>"):
        monkeypatch.setattr(notebook, "download", reply)
        with pytest.raises(FileNotFoundError, match="Run the chapter from a clone"):
            notebook.read_record("12_load_test")
    assert not (tmp_path / "cache" / "records" / "12_load_test.json").exists()  # nothing half-right kept
