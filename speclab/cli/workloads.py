"""python -m speclab workloads: the prompt sets bench runs on (code, prose, the copying sets edit and quote,
and the chat prompts by task, chat-*), each shown by its first prompt's last lines (a chat prompt as plain
text; the bench applies the tokenizer's chat template); --build rewrites the shipped copying sets."""
from __future__ import annotations

import argparse

from speclab.cli.main import command_parser
from speclab.measure import workloads


def build_parser() -> argparse.ArgumentParser:
    w = command_parser("workloads")
    w.add_argument("--build", action="store_true", help="rebuild speclab/data/workloads.json from this Python's "
                   "standard library (held-out files only)")
    return w


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.build:
        print(f"wrote {workloads.write()}")
    for name in workloads.WORKLOADS:
        first = workloads.load_prompts(name, 1)[0]
        print(f"== {name}: first prompt ({len(first)} characters), last lines:")
        print("\n".join(first.rstrip("\n").splitlines()[-4:]) + "\n")


if __name__ == "__main__":
    main()
