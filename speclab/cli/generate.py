"""python -m speclab generate: decode a prompt with one drafting method (or none) and print the text and
its statistics. The methods are the registry's (speclab.methods), under vLLM's names."""
from __future__ import annotations

import argparse
from pathlib import Path

from speclab.cli.main import command_parser
from speclab.cli.options import (add_adaptive_args, add_pair_args, add_sampling_args, add_weights_args, load,
                                 require_draft, weights_given)
from speclab.decoding import generate, speculative_generate
from speclab.measure.workloads import encode_chat
from speclab.methods import REGISTRY, draft_model_method, load_drafter, trained_drafters
from speclab.runner import FAST_MODES

TARGET_ONLY = "target-only"


def older_names() -> dict[str, str]:
    """--method's older names -> what they run: target-only's, and each method's (Method.older_names)."""
    return {"none": TARGET_ONLY, **{old: m.name for m in REGISTRY.values() for old in m.older_names}}


def method_choices() -> dict[str, str]:
    """--method's choices -> what they run: target-only and the registry's methods, each before its older names."""
    choices = {}
    for name in (TARGET_ONLY, *REGISTRY):
        choices[name] = name
        choices.update({old: new for old, new in older_names().items() if new == name})
    return choices


GENERATE_METHODS = method_choices()  # as the registry stood when the command was imported


def in_front() -> list[str]:
    """The methods that draft in front of another (Method.in_front_of): --then names the one behind."""
    return [m.name for m in REGISTRY.values() if m.in_front_of]


def reading(flag: str) -> list[str]:
    """The methods whose options read generate's flag `flag` (argparse's dest: Method.flag_names)."""
    return [m.name for m in REGISTRY.values() if flag in m.flag_names]


def build_parser() -> argparse.ArgumentParser:
    g = command_parser("generate")
    methods, draft_model = list(REGISTRY), draft_model_method().name
    add_pair_args(g)
    add_sampling_args(g, k_default=None, k_help="draft tokens per round, or a tree's depth at most (default 4; for eagle and eagle3's "
                      "dynamic tree, its own depth)")
    g.add_argument("text", nargs="?", default=None, metavar="PROMPT",
                   help='the prompt, as typed: python -m speclab generate "def fibonacci(n):"')
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text (the same as PROMPT)")
    src.add_argument("--prompt-file", help="file holding the prompt text")
    g.add_argument("--chat", action="store_true", help="send the prompt as a user's message through the tokenizer's "
                   "chat template, the assistant's turn opened (for an instruction-tuned target such as smollm2)")
    g.add_argument("--method", "--drafter", dest="method", choices=list(method_choices()), default=draft_model,
                   help=f"how to draft (the registry's methods, vLLM's names): {', '.join(methods)}; or "
                   f"{TARGET_ONLY} (older names: {', '.join(older_names())})")
    add_weights_args(g)  # --heads, --eagle, --eagle3, --mtp: each method's weights (Method.weights_flag)
    add_method_flags(g)  # --lookahead, --eagle-tree, --mtp-tokens, --exit-layer, ...: each method's own (Method.flags)
    g.add_argument("--fast", dest="fast_path", nargs="?", const="static", choices=FAST_MODES, default=None,
                   help="run the target and draft on the fast path: a static cache written by position "
                   "('compiled' adds torch.compile; 'graphs' replays CUDA graphs, on a GPU); same tokens, chapter 10")
    g.add_argument("--then", default=draft_model, choices=trained_drafters(),
                   help=f"{' and '.join(in_front())}: the method that drafts where prompt lookup finds no match "
                   f"(default {draft_model}), with its own flags")
    add_adaptive_args(g)
    return g


def add_method_flags(g: argparse.ArgumentParser) -> None:
    """The flags the registry's methods declare (Method.flags), each once however many methods read it."""
    added = set()
    for m in REGISTRY.values():
        for flag in m.flags:
            if flag.name not in added:
                g.add_argument(flag.name, **flag.spec)
                added.add(flag.name)


def check_flags_read(args, defaults, method: str) -> None:
    """Refuse a method's flag (Method.flags) set for a run whose methods do not read it: it would change nothing."""
    flags = {flag.name: flag.dest for m in REGISTRY.values() for flag in m.flags}
    for name, dest in flags.items():
        readers = reading(dest)
        if getattr(args, dest) != getattr(defaults, dest) and not set(readers) & set(drafting(method, args)):
            raise SystemExit(f"{name} is a setting of --method {' or '.join(readers)}: use it with "
                             f"{'that method' if len(readers) == 1 else 'one of them'}, not {args.method}")


def settings_given(name: str, args) -> dict:
    """load_drafter's options other than the weights, as the flags give them (Method.flag_options)."""
    read = REGISTRY[name].flag_options
    return dict(read(args)) if read else {}


def drafter_options(name: str, args, draft) -> dict:
    """load_drafter's options for the method `name` from generate's flags: its settings, and its weights
    (Method.weights: the directory a flag names, or the pair's draft model); for a method that drafts in
    front of another (Method.in_front_of), those of the method behind it (--then)."""
    m = REGISTRY[name]
    if m.in_front_of:
        return {m.in_front_of: args.then, **drafter_options(args.then, args, draft)}
    options = dict(settings_given(name, args))
    if m.weights:
        options[m.weights] = draft if m.uses_draft_model() else weights_given(args).get(name)
    return options


def drafting(method: str, args) -> list[str]:
    """The methods that draft for --method: it, and the method behind it (--then)."""
    return [method, *([args.then] if method != TARGET_ONLY and REGISTRY[method].in_front_of else [])]


def decode(args, method: str, target, draft, ids, common: dict):
    if method == TARGET_ONLY:
        return generate(target, ids, **common)
    options = drafter_options(method, args, draft)
    if any(REGISTRY[name].uses_draft_model() for name in drafting(method, args)):
        require_draft(args, draft, f"--method {method}")
    drafter = load_drafter(method, target, **options)
    k = args.k
    if k is None:  # EAGLE-2's tree has its own depth (tree.json's, measured): a K would only cut it
        k = drafter.own_depth or 4
    return speculative_generate(target, drafter, ids, k=k, **common, k_schedule=args.k_schedule,
                                confidence_threshold=args.confidence_threshold)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    given = [name for name, value in (("PROMPT", args.text), ("--prompt", args.prompt),
                                      ("--prompt-file", args.prompt_file)) if value is not None]
    if len(given) != 1:
        parser.error("give the prompt once: as PROMPT, --prompt TEXT or --prompt-file FILE"
                     + (f" (got {' and '.join(given)})" if given else ""))
    if args.text is not None:
        args.prompt = args.text
    method = method_choices()[args.method]
    check_flags_read(args, parser.parse_args([]), method)
    target, draft, tok, device = load(args)
    text = args.prompt if args.prompt is not None else Path(args.prompt_file).read_text()
    if args.chat:  # print the prompt as the model reads it, template and all
        ids = encode_chat(tok, [{"role": "user", "content": text}]).to(device)
        text = tok.decode(ids)
    else:
        ids = tok(text, return_tensors="pt").input_ids[0].to(device)
    common = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                  top_p=args.top_p, seed=args.seed, eos_token_id=tok.eos_token_id)
    result = decode(args, method, target, draft, ids, common)
    print(text + tok.decode(result.tokens), end="\n\n")
    print(result.stats)


if __name__ == "__main__":
    main()
