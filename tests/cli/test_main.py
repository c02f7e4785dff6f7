"""The map: `python -m speclab --help` lists every command without loading torch, a command's name runs its
module (speclab.cli.<command>), and each command's --help works. (That speclab/cli writes no method's name
is tests/test_architecture.py's check.)"""
import subprocess
import sys
from importlib import import_module

import pytest

import speclab.cli.theory
from speclab.cli.card import ONLY
from speclab.cli.card import build_parser as card_parser
from speclab.cli.generate import GENERATE_METHODS
from speclab.cli.main import COMMANDS, main
from speclab.methods import METHODS, REGISTRY


def imported_modules(importtime_log: str) -> set[str]:
    """The modules `python -X importtime` says it imported (lines 'import time: self | cumulative | name')."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_log.splitlines() if line.startswith("import time:")}


def test_help_lists_every_command_without_importing_torch():
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "speclab", "--help"], capture_output=True,
                         text=True, check=True)
    printed = " ".join(run.stdout.split())  # as wrapped, rejoined
    assert all(f" {command} {line} " in printed for command, (_, line) in COMMANDS.items())
    assert "usage: python -m speclab" in run.stdout and "python -m speclab COMMAND --help" in run.stdout
    imported = imported_modules(run.stderr)
    assert "speclab.cli.main" in imported  # the log is read right
    assert not {"torch", "transformers", "numpy"} & imported
    assert not [m for m in imported if m.startswith("speclab.") and m not in ("speclab.cli", "speclab.cli.main")]


def test_no_command_prints_the_map_and_fails():
    run = subprocess.run([sys.executable, "-m", "speclab"], capture_output=True, text=True)
    assert run.returncode == 2
    assert "error: name a command" in run.stderr and all(f"  {c}" in run.stderr for c in COMMANDS)


@pytest.mark.parametrize("argv", [["nope"], ["--generate"], ["Generate", "--help"]])
def test_an_unknown_command_is_refused_with_the_list(argv, capsys):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert f"unknown command {argv[0]!r}" in err and ", ".join(COMMANDS) in err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_has_its_help(command, capsys):
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m speclab")
    if command != "labs":  # labs is speclab.course.grading's own command line (prog python -m speclab.course.grading)
        assert out.startswith(f"usage: python -m speclab {command}")
        assert import_module(f"speclab.cli.{COMMANDS[command][0]}").build_parser().prog == f"python -m speclab {command}"


def test_a_command_returns_its_status_through_the_map(monkeypatch):
    seen = []
    monkeypatch.setattr(speclab.cli.theory, "main", lambda argv: seen.append(argv) or 3)
    assert main(["theory", "--c", "0.1"]) == 3 and seen == [["--c", "0.1"]]


def test_generate_offers_the_registry_methods_and_the_older_names():
    assert list(GENERATE_METHODS)[0] == "target-only"
    assert {m: GENERATE_METHODS[m] for m in METHODS} == {m: m for m in METHODS}
    assert {k: v for k, v in GENERATE_METHODS.items() if k not in METHODS} == {
        "target-only": "target-only", "none": "target-only", "model": "draft_model", "prompt-lookup": "ngram"}


def test_card_sections_are_the_registry_methods_with_bundled_weights():
    assert list(ONLY) == ["medusa", "eagle", "eagle3", "mtp", "exit", "pard"]  # the folders in speclab/pairs/stdlib
    assert all(REGISTRY[name].bundled == folder for folder, name in ONLY.items())
    with pytest.raises(SystemExit):
        card_parser().parse_args(["--only", "draft"])



def test_generate_reads_each_methods_flags_weights_and_the_method_behind_from_its_registry_entry():
    """generate's options for a method come from its entry: its flags (Method.flag_options), its weights flag
    (or the pair's draft), and for a method in front of another (Method.in_front_of) the one --then names;
    a method whose weights have no flag (pard) loads those shipped."""
    from speclab.cli.generate import build_parser, drafter_options, drafting, reading
    args = build_parser().parse_args(["x", "--method", "lookup_first", "--then", "eagle3", "--eagle-tree", "chain",
                                      "--eagle3", "HEAD"])
    assert drafting("lookup_first", args) == ["lookup_first", "eagle3"]
    assert drafting("target-only", args) == ["target-only"]
    assert drafter_options("lookup_first", args, "DRAFT") == {"drafter": "eagle3", "tree": "chain", "head": "HEAD"}
    assert drafter_options("draft_model", args, "DRAFT") == {"draft": "DRAFT"}
    assert drafter_options("pard", args, "DRAFT") == {"model": None}
    assert drafter_options("layer_skip", args, None) == {"exit_layer": 20, "adapter": False}
    assert reading("eagle_tree") == ["eagle", "eagle3"]
    with pytest.raises(SystemExit, match="--eagle-tree is a setting of --method eagle or eagle3: use it with one of "
                                         "them, not lookup_first"):
        main(["generate", "x", "--method", "lookup_first", "--then", "medusa", "--eagle-tree", "chain"])
    with pytest.raises(SystemExit, match="--exit-layer is a setting of --method layer_skip: use it with that "
                                         "method, not draft_model"):
        main(["generate", "x", "--exit-layer", "4"])
