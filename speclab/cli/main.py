"""`python -m speclab`: the command map `--help` prints (MAP) and the dispatch to speclab/cli/COMMAND.py."""

from __future__ import annotations

import argparse
from importlib import import_module
import shlex
import sys
import textwrap
from typing import NoReturn

PROG = "python -m speclab"

# command -> (its module in speclab.cli, one line of help)
COMMANDS = {
    "generate": ("generate", "decode a prompt and print the text and statistics"),
    "bench": ("bench", "the course's methods vs target-only and transformers, side by side (--all: every method)"),
    "profile": ("profile", "forward time vs positions, c, bandwidth"),
    "evaluate": ("evaluate", "acceptance by K and temperature on held-out prompts"),
    "card": ("card", "measure the bundled pair and write its model card"),
    "theory": ("theory", "the speedup model for a given cost ratio"),
    "pairs": ("pairs", "list the bundled pair, smollm2 (from the package registry) and the hub pairs"),
    "workloads": ("workloads", "show the prompt sets; --build rewrites the shipped copying sets"),
    "train": ("train", "python -m speclab train pair --out DIR | train draft --target DIR --out DIR | "
                       "train medusa|eagle|eagle3|mtp|exit|shared-draft|pard --target DIR --out DIR | "
                       "train eagle-tree --target DIR --head DIR | "
                       "train answers --target DIR --out DIR | train scale --target DIR --stream DIR"),
    "labs": ("labs", "python -m speclab labs build | grade DIR --out scores.csv"),
    "book": ("book", "python -m speclab book stats | book execute [--pages 08 09] | book screenshots --out DIR"),
    "export": ("export", "a method's weights in vLLM's or SGLang's layout, with the engine's settings; "
                         "--table: every engine's settings for every method"),
}

# What --help prints between the usage and the commands' one-line help.
MAP = """python -m speclab: the map of what speclab can do.

  generate   decode a prompt with the bundled pair (or --pair smollm2, a hub or a local pair) and
             print statistics
             (--method: any drafting method of the registry, speclab.methods, by vLLM's names, or
             target-only; --method lookup_first --then M: prompt lookup in front of method M;
             --k-schedule heuristic and --confidence-threshold for adaptive K)
  bench      target-only vs the course's main methods (draft model, prompt lookup, Medusa, EAGLE-1 and
             EAGLE-3 heads) vs transformers' assisted generation and prompt lookup, side by side,
             rows timed as they run (1 to 3.5 minutes on 2 cores, README); --all: every drafting method and
             variant (adaptive K, suffix, lookahead, EAGLE-2's trees, MTP, layer skipping, PARD,
             prompt lookup in front of a drafter, ...); on one or more workloads (code, prose, the
             copying sets edit and quote, edits (a series, chapter 13), the chat prompts by task chat-*, or chat
             for all seven), and the speedup model checked against the costs measured in the loop;
             --fast [static|compiled|graphs]: every speclab row again on the fast path
  profile    forward time vs positions, ms/token of each model, cost ratio c, bandwidth; --fast:
             where a decode step's time goes on each path, against the bandwidth floor (and the
             fast step and the floor on one thread and on all: what a second core buys each)
  evaluate   acceptance table (K = 1..8, temperature 0 and 1) on held-out prompts; --lossless N:
             the chi-square check of sampling's first two tokens, and of a broken rule
  card       measure the bundled pair and write its model card (--pair smollm2: that pair's
             card, from its training and bench records)
  theory     breakeven acceptance and speedup by K, and the best K, for given a (--alpha), c (--c)
  pairs      the pairs load_pair knows: the bundled pair, smollm2 (SmolLM2-135M-Instruct from the
             package registry, converted once), the hub pairs
  workloads  the prompt sets bench runs on (code, prose, the copying sets edit and quote, edits (a
             series, chapter 13), and the chat prompts by task: Spec-Bench's six categories and code);
             --build rewrites the shipped copying sets from this Python's standard library
  train      train the bundled pair (python -m speclab train pair --out DIR), new drafts for an
             existing target (train draft --target DIR --out DIR), Medusa heads for a frozen
             target (train medusa --target DIR --out DIR), an EAGLE-1 or EAGLE-3 head
             (train eagle ... | train eagle3 ...), an MTP module (train mtp ...), layer-skip
             exit adapters (train exit ...), or a draft reading a target's embeddings over a
             draft vocabulary (train shared-draft --target smollm2 --preset smollm2 --out DIR);
             train eagle-tree re-times a trained EAGLE head's EAGLE-2 settings on this machine;
             train answers writes a target's own chat answers at scale, train scale trains both
             drafters on growing shares of them (chapter 9.7), train pard a parallel draft
  labs       build learner labs from their sources, grade a folder of submissions
             (python -m speclab labs build | python -m speclab labs grade DIR --out scores.csv)

  book       the book's pages measured (stats: prose words, visible code, wide output, figures and
             captions), re-executed in place in the order of _toc.yml on this machine (execute), or
             photographed in headless Chromium from the built HTML (screenshots)
  export     a method's trained weights for a pair's target in the layout vLLM or SGLang loads
             (python -m speclab export eagle3 --format vllm --out DIR), with serving.json: the
             target's directory and the engine's settings; --table: how vLLM, SGLang, TensorRT-LLM,
             llama.cpp and transformers name every method's settings (speclab.serving)

In the serving environment (requirements-serving.txt, README "Serving engines"), vLLM runs beside speclab:
python -m speclab.serving.vllm_cpu (the fast path against vLLM's CPU engine, chapter 10),
python -m speclab.serving.vllm_engine (speclab's exported heads in vLLM, chapter 12) and
python -m speclab.serving.load_test (a vLLM server under Poisson load, chapter 12).

Where the code is: the decode loop, speclab/decoding.py (speculative_generate, one loop for chains, trees
and batches); the accept/reject rule, speclab/verification.py; the interface every method implements,
speclab/drafting.py; the methods, a module each in speclab/methods/, named once in the registry,
speclab/methods/__init__.py (REGISTRY; speclab.load_drafter loads any of them).

python -m speclab COMMAND --help lists a command's options. Each command is a module of speclab.cli
(speclab/cli/COMMAND.py, with main(argv), and build_parser() but for labs); this one imports none of
them, nor torch, until a command is named.
"""


def command_parser(command: str) -> argparse.ArgumentParser:
    """The parser a command's build_parser() starts from: its prog and its line of help."""
    return argparse.ArgumentParser(prog=f"{PROG} {command}", description=COMMANDS[command][1])


def usage() -> str:
    return f"usage: {PROG} [-h] {{{','.join(COMMANDS)}}} ..."


def map_text() -> str:
    """What --help prints: the usage, MAP and the commands' lines of help."""
    width = max(map(len, COMMANDS))
    lines = [textwrap.fill(text, 100, initial_indent=f"  {name:{width}}  ", subsequent_indent=" " * (width + 4),
                           break_on_hyphens=False)  # a command's name (shared-draft) stays whole
             for name, (_, text) in COMMANDS.items()]
    return "\n".join([usage(), "", MAP.rstrip(), "", "commands:", *lines, "",
                      "options:", "  -h, --help  show this help message and exit"])


def command_line(command: str, argv: list[str] | None) -> str:
    """The command as typed, for a record to say what made it: 'python -m speclab bench --fast'."""

    return shlex.join([*PROG.split(), command, *(sys.argv[1:] if argv is None else argv)])


def fail(message: str) -> NoReturn:
    """Print the message on stderr and exit 2, as argparse does on a usage error."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int | None:
    """Run `python -m speclab COMMAND ...`: COMMAND's module's main(the rest); its return value is the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        fail(f"{map_text()}\n\n{PROG}: error: name a command: {', '.join(COMMANDS)}")
    command, rest = argv[0], argv[1:]
    if command in ("-h", "--help"):
        print(map_text())
        return 0
    if command not in COMMANDS:
        fail(f"{usage()}\n{PROG}: error: unknown command {command!r}; choose from {', '.join(COMMANDS)}")
    module = import_module(f"speclab.cli.{COMMANDS[command][0]}")
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
