"""python -m speclab evaluate: the draft's acceptance by K and temperature on held-out prompts; with
--lossless N, the chi-square check of sampling's first two tokens (speclab.measure.lossless) for the draft
model and every drafter trained for the target, each also run on the broken rule it must fail."""
from __future__ import annotations

import argparse
import json

import torch

from speclab.cli.main import command_line, command_parser
from speclab.cli.options import add_pair_args, load, prompts_for, require_draft
from speclab.methods.flags import int_list
from speclab.devices import cpu_name
from speclab.measure.acceptance import acceptance_table, format_acceptance_table
from speclab.measure.lossless import lossless_check
from speclab.methods import REGISTRY, draft_model_method, load_drafter
from speclab.measure.workloads import WORKLOADS


def build_parser() -> argparse.ArgumentParser:
    e = command_parser("evaluate")
    add_pair_args(e)
    e.add_argument("--workload", choices=WORKLOADS, default="code", help="the prompts (speclab.measure.workloads; "
                   "chat-* through the tokenizer's chat template)")
    e.add_argument("--num-prompts", type=int, default=4)
    e.add_argument("--k-max", type=int, default=8)
    e.add_argument("--max-new-tokens", type=int, default=128)
    e.add_argument("--lossless", type=int, metavar="N", help="instead of the table: N sampled decodes (T = 1) of "
                   "two tokens per prompt and method, checked by chi-square against the target, and N with the "
                   "broken rule (residual replaced by p)")
    e.add_argument("--methods", default=f"{draft_model_method().name},eagle3", help="--lossless: the drafters to check "
                   "(registry names; those without weights for this target are skipped, said aloud)")
    e.add_argument("--json", help="--lossless: also write the reports here")
    e.add_argument("--prompt-numbers", type=int_list, default=None, metavar="I,J,...",
                   help="only these of the workload's prompts (counted from 1; default: the first "
                   "--num-prompts). The check has power where the target's first token is uncertain and the "
                   "draft agrees with it only in part: a near-certain first token leaves the broken rule almost exact")
    return e


def chosen(args, tokenizer, prompts: list) -> list[tuple[int, torch.Tensor]]:
    """(number counted from 1, prompt) for --prompt-numbers, else for every prompt given."""
    if not args.prompt_numbers:
        return list(enumerate(prompts, start=1))
    have = prompts_for(args, tokenizer, num_prompts=max(args.prompt_numbers))
    if max(args.prompt_numbers) > len(have) or min(args.prompt_numbers) < 1:
        raise SystemExit(f"--prompt-numbers {args.prompt_numbers}: the {args.workload} workload has prompts "
                         f"1 to {len(have)}")
    return [(i, have[i - 1].to(prompts[0].device)) for i in args.prompt_numbers]


def check_lossless(args, target, draft, prompts) -> None:
    """--lossless: each method's check on each prompt, printed and optionally written to --json."""
    reports = []
    for name in (m.strip() for m in args.methods.split(",")):
        if name not in REGISTRY:
            raise SystemExit(f"unknown method {name!r}; choose from {sorted(REGISTRY)}")
        try:  # one drafter for every decode: start() resets it for each, as for a new request
            # the pair's draft for the draft model, and behind a method drafting in front of another
            # (lookup_first, whose default drafter is the draft model)
            with_draft = REGISTRY[name].uses_draft_model() or REGISTRY[name].in_front_of is not None
            drafter = load_drafter(name, target, draft=draft) if with_draft else load_drafter(name, target)
        except (OSError, ValueError) as err:
            print(f"{name}: skipped ({err})")
            continue
        for i, prompt in prompts:
            report = {"method": name, "prompt": i, **lossless_check(target, lambda: drafter, prompt, samples=args.lossless)}
            print(f"{name}, prompt {i}: p = {report['p_value']:.3g} (the broken rule: "
                  f"p = {report['broken_p_value']:.3g}); {report['samples']} samples each, first tokens kept "
                  f"{report['mass_of_kept_first_tokens']:.1%} of the mass, {report['seconds']:.0f} s")
            reports.append(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": args.command, "cpu": cpu_name(), "workload": args.workload, "checks": reports}, f,
                      indent=1)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.command = command_line("evaluate", argv)   # what made a record, written into it
    target, draft, tok, device = load(args)
    require_draft(args, draft, "evaluate (the draft's acceptance)")
    prompts = [p.to(device) for p in prompts_for(args, tok)]
    if args.lossless:
        check_lossless(args, target, draft, chosen(args, tok, prompts))
        return
    rows = acceptance_table(target, draft, prompts, ks=range(1, args.k_max + 1), temperatures=(0.0, 1.0),
                            max_new_tokens=args.max_new_tokens)
    print(format_acceptance_table(rows))


if __name__ == "__main__":
    main()
