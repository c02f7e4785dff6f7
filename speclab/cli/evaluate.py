"""python -m speclab evaluate: the draft's acceptance by K and temperature on held-out prompts."""
from __future__ import annotations

import argparse

from speclab.cli.main import command_parser
from speclab.cli.options import add_pair_args, load, prompts_for, require_draft
from speclab.measure.acceptance import acceptance_table, format_acceptance_table
from speclab.measure.workloads import WORKLOADS


def build_parser() -> argparse.ArgumentParser:
    e = command_parser("evaluate")
    add_pair_args(e)
    e.add_argument("--workload", choices=WORKLOADS, default="code", help="the prompts (speclab.measure.workloads; "
                   "chat-* through the tokenizer's chat template)")
    e.add_argument("--num-prompts", type=int, default=4)
    e.add_argument("--k-max", type=int, default=8)
    e.add_argument("--max-new-tokens", type=int, default=128)
    return e


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    target, draft, tok, device = load(args)
    require_draft(args, draft, "evaluate (the draft's acceptance)")
    prompts = [p.to(device) for p in prompts_for(args, tok)]
    rows = acceptance_table(target, draft, prompts, ks=range(1, args.k_max + 1), temperatures=(0.0, 1.0),
                            max_new_tokens=args.max_new_tokens)
    print(format_acceptance_table(rows))


if __name__ == "__main__":
    main()
