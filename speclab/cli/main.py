"""python -m speclab: the map of what speclab can do.

  generate   decode a prompt with the bundled pair (or a hub / local pair) and print statistics
             (--method draft_model | ngram | lookahead | medusa | eagle | eagle3 | mtp | layer_skip |
             target-only; --k-schedule heuristic and --confidence-threshold for adaptive K)
  bench      target-only vs every drafting method (draft model with fixed and adaptive K, prompt
             lookup, lookahead, Medusa, EAGLE-1's chain, EAGLE-2's tree with an EAGLE-1 or an EAGLE-3
             head, MTP, layer skipping) vs transformers' assisted generation and prompt lookup,
             side by side, on one or more
             workloads (code, prose, and the copying sets edit and quote), and the speedup model
             checked against the costs measured in the loop
  profile    forward time vs positions, ms/token of each model, cost ratio c, bandwidth
  evaluate   acceptance table (K = 1..8, temperature 0 and 1) on held-out prompts
  card       measure the bundled pair and write its model card
  theory     tokens per round, speedup, breakeven acceptance and best K for given a, c
  workloads  the prompt sets bench runs on (code, prose, and the copying sets edit and quote);
             --build rewrites the shipped copying sets from this Python's standard library
  train      train the bundled pair (python -m speclab train pair --out DIR), new drafts for an
             existing target (train draft --target DIR --out DIR), Medusa heads for a frozen
             target (train medusa --target DIR --out DIR), an EAGLE-1 or EAGLE-3 head
             (train eagle ... | train eagle3 ...), an MTP module (train mtp ...), or layer-skip
             exit adapters (train exit ...)
  labs       build learner labs from their sources, grade a folder of submissions
             (python -m speclab labs build | python -m speclab labs grade DIR --out scores.csv)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch


def add_pair_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None, help="hub pair name (see --list-pairs) or a local target directory; "
                   "default: the bundled stdlib pair")
    p.add_argument("--draft", default=None, help="draft model directory or hub id (overrides the pair's draft)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    p.add_argument("--draft-dtype", choices=["auto", "float32", "float16", "bfloat16"], default="auto",
                   help="the draft's precision (auto: float16 on a CPU, the target's on a GPU); it changes "
                   "acceptance, never the output")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (batch-1 decode of small models is often fastest with 1)")


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


def load(args):
    from speclab.models import load_pair
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    draft_dtype = None if args.draft_dtype == "auto" else getattr(torch, args.draft_dtype)
    return load_pair(args.pair, device=args.device, draft=args.draft, draft_dtype=draft_dtype)


def prompts_for(args, tokenizer, workload: str | None = None) -> list[torch.Tensor]:
    from speclab.measure.workloads import load_prompts
    texts = [args.prompt] if getattr(args, "prompt", None) else load_prompts(workload or args.workload, args.num_prompts)
    return [tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]


def lookahead_setting(text: str) -> tuple[int, int, int]:
    """'W,N,G' -> (W, N, G), for --lookahead."""
    try:
        window, ngram, pool = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lookahead takes W,N,G (three integers, e.g. 4,4,4), got {text!r}")
    return window, ngram, pool


GENERATE_METHODS = {"target-only": "target-only", "none": "target-only", "draft_model": "draft_model",
                    "model": "draft_model", "ngram": "ngram", "prompt-lookup": "ngram", "medusa": "medusa",
                    "lookahead": "lookahead", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp",
                    "layer_skip": "layer_skip"}


def eagle_tree_setting(text: str) -> dict:
    """'dynamic', 'chain' or 'TOP_K,DEPTH,TOTAL[,STOP]' -> load_drafter's EAGLE options, for --eagle-tree."""
    if text in ("dynamic", "chain"):
        return {"tree": text}
    parts = text.split(",")
    try:
        top_k, depth, total = (int(v) for v in parts[:3])
        stop = float(parts[3]) if len(parts) == 4 else None
    except ValueError:
        parts = []
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(f"--eagle-tree takes dynamic, chain or TOP_K,DEPTH,TOTAL[,STOP] (e.g. 1,12,12 "
                                         f"or 1,20,20,0.1), got {text!r}")
    return dict(tree="dynamic", top_k=top_k, depth=depth, total_tokens=total, min_confidence=stop)


def layer_skip_setting(text: str) -> tuple[int, bool]:
    """'E' or 'E+adapter' -> (E, adapter), for --layer-skip."""
    layer, _, extra = text.partition("+")
    if not layer.isdigit() or extra not in ("", "adapter"):
        raise argparse.ArgumentTypeError(f"--layer-skip takes E or E+adapter (an exit layer, e.g. 12 or 12+adapter), "
                                         f"got {text!r}")
    return int(layer), extra == "adapter"


def int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers (e.g. 1,2,4,8), got {text!r}")


def cmd_generate(args) -> None:
    from speclab import generate, load_drafter, speculative_generate
    target, draft, tok, device = load(args)
    text = args.prompt if args.prompt is not None else open(args.prompt_file).read()
    ids = tok(text, return_tensors="pt").input_ids[0].to(device)
    common = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                  top_p=args.top_p, seed=args.seed, eos_token_id=tok.eos_token_id)
    method = GENERATE_METHODS[args.method]
    if args.eagle_tree and method not in ("eagle", "eagle3"):
        raise SystemExit(f"--eagle-tree sets EAGLE's draft tree: use it with --method eagle or eagle3, not {args.method}")
    if method == "target-only":
        result = generate(target, ids, **common)
    else:
        window, ngram, pool = args.lookahead
        options = {"draft_model": dict(draft=draft), "ngram": {}, "medusa": dict(heads=args.heads),
                   "lookahead": dict(window=window, ngram=ngram, pool=pool),
                   "eagle": dict(head=args.eagle, **args.eagle_tree), "eagle3": dict(head=args.eagle3, **args.eagle_tree),
                   "mtp": dict(module=args.mtp, num_tokens=args.mtp_tokens),
                   "layer_skip": dict(exit_layer=args.exit_layer, adapter=args.exit_adapter)}[method]
        drafter = load_drafter(method, target, **options)
        k = args.k
        if k is None:  # EAGLE-2's tree has its own depth (tree.json's, measured): a K would only cut it
            k = drafter.own_depth or 4
        result = speculative_generate(target, drafter, ids, k=k, **common, k_schedule=args.k_schedule,
                                      confidence_threshold=args.confidence_threshold)
    print(text + tok.decode(result.tokens), end="\n\n")
    print(result.stats)


def cmd_bench(args) -> None:
    from speclab.measure.workloads import WORKLOADS
    target, draft, tok, device = load(args)
    workloads = [w.strip() for w in args.workload.split(",")]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    summaries = [bench_workload(args, target, draft, tok, device, w) for w in workloads]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summaries[0] if len(summaries) == 1 else {"workloads": summaries}, f, indent=1)


def bench_workload(args, target, draft, tok, device, workload: str) -> dict:
    from speclab import theory
    from speclab.measure.bench import default_methods, format_table, model_check, run_bench
    from speclab.devices import cpu_name
    from speclab.measure.profiling import cost_ratio, forward_ms_by_positions
    prompts = [p.to(device) for p in prompts_for(args, tok, workload)]
    methods = tuple(m.strip() for m in args.methods.split(",")) if args.methods else \
        default_methods(target, args.heads, args.eagle, args.eagle3, args.mtp, args.layer_skip)
    settings = " ".join(f"{w},{n},{g}" for w, n, g in args.lookahead)
    lookup = f" (prompt lookup K={args.lookup_k})" if args.lookup_k else ""
    print(f"device {device}, {len(prompts)} {workload} prompts, K={args.k}{lookup}, {args.max_new_tokens} new tokens, "
          f"temperature {args.temperature}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"median of {args.repeats} interleaved repeats; target {target.dtype}, draft {draft.dtype}; "
          f"lookahead W,N,G {settings}")
    rows = run_bench(target, draft, prompts, args.k, args.max_new_tokens, args.temperature, args.seed, methods,
                     repeats=args.repeats, heads=args.heads, lookahead=args.lookahead, lookup_k=args.lookup_k,
                     eagle=args.eagle, lookup_choices=args.lookup_choose, eagle3=args.eagle3, mtp=args.mtp,
                     layer_skip=args.layer_skip, k_sweep=args.k_sweep, adaptive_k=args.adaptive_k,
                     confidence_thresholds=args.confidence_threshold)
    print(format_table(rows))
    # a ratio depends on the machine (how it charges a pass over several positions): say which one
    summary = {"device": str(device), "cpu": cpu_name(), "torch": torch.__version__, "workload": workload,
               "k": args.k, "lookup_k": args.lookup_k or args.k, "threads": torch.get_num_threads(),
               "lookahead": [list(s) for s in args.lookahead],
               "layer_skip": [list(s) for s in args.layer_skip], "k_sweep": args.k_sweep,
               "adaptive_k": args.adaptive_k or max(args.k_sweep or [max(args.k, 8)]),
               "confidence_threshold": args.confidence_threshold,
               "rows": [r.to_record() for r in rows]}
    by_name = {r.method: r for r in rows}
    base, spec = by_name.get("speclab target-only"), by_name.get("speclab speculative")
    if base and spec and spec.has_drafts:
        check = model_check(base.stats, spec.stats)
        c_alone = cost_ratio(target, draft)
        unit, verify = forward_ms_by_positions(target, [1, args.k + 1]).values()
        verify_alone = verify / unit
        print(check)
        print(f"measured alone (one model at a time, warm caches): c = {c_alone:.3f}, verify pass {verify_alone:.2f} "
              f"-> modelled {theory.speedup(check.alpha, args.k, c_alone, verify_alone):.2f}x")
        summary.update(model_check=dict(vars(check), modelled=check.modelled, ratio=check.ratio),
                       c_alone=c_alone, verify_cost_alone=verify_alone)
    print()
    return summary


def cmd_profile(args) -> None:
    from speclab.measure.profiling import copy_bandwidth_gbs, decode_bandwidth_gbs, forward_ms_by_positions, parameter_bytes
    target, draft, tok, device = load(args)
    print(f"device {device}; target {parameter_bytes(target) / 1e6:.1f} MB of weights, draft {parameter_bytes(draft) / 1e6:.1f} MB")
    print(f"{'positions':>9} {'target ms':>10} {'draft ms':>9}")
    positions = [1, 2, 4, 8, 16, 32, 64]
    target_ms, draft_ms = forward_ms_by_positions(target, positions), forward_ms_by_positions(draft, positions)
    results = {n: (target_ms[n], draft_ms[n]) for n in positions}
    for n, (t, d) in results.items():
        print(f"{n:9d} {t:10.2f} {d:9.2f}")
    c = results[1][1] / results[1][0]
    peak = copy_bandwidth_gbs(device)
    used = decode_bandwidth_gbs(target, results[1][0])
    print(f"cost ratio c = {c:.3f}; copy bandwidth {peak:.1f} GB/s; target decode step reads weights at "
          f"{used:.1f} GB/s ({100 * used / peak:.1f}% of it)")
    if args.json:
        import platform
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.machine()} cpu"
        record = {"device_name": name, "device": str(device), "torch": torch.__version__,
                  "threads": torch.get_num_threads(), "positions": list(results),
                  "target_ms": [t for t, _ in results.values()], "draft_ms": [d for _, d in results.values()],
                  "parameter_bytes": parameter_bytes(target), "copy_bandwidth_gbs": peak, "cost_ratio": c}
        path = Path(args.json.replace("{device}", name.replace(" ", "-")))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1))
        print(f"written to {path}")


def cmd_evaluate(args) -> None:
    from speclab.measure.card import acceptance_table, format_acceptance_table
    target, draft, tok, device = load(args)
    prompts = [p.to(device) for p in prompts_for(args, tok)]
    rows = acceptance_table(target, draft, prompts, ks=range(1, args.k_max + 1), temperatures=(0.0, 1.0),
                            max_new_tokens=args.max_new_tokens)
    print(format_acceptance_table(rows))


def cmd_card(args) -> None:
    from pathlib import Path

    from speclab.measure.card import (EAGLE3_HEADING, EAGLE_HEADING, EXIT_HEADING, MEDUSA_HEADING, MTP_HEADING,
                                  eagle3_card, eagle_card, exit_card, medusa_card, model_card, mtp_card,
                                  replace_section)
    from speclab.models import BUNDLED_DIR
    if args.threads:
        torch.set_num_threads(args.threads)
    pair_dir = Path(args.pair_dir) if args.pair_dir else BUNDLED_DIR
    out = Path(args.out) if args.out else pair_dir / "MODEL_CARD.md"
    sections = {"medusa": (pair_dir / "medusa" / "tree.json", MEDUSA_HEADING, medusa_card, "medusa"),
                "eagle": (pair_dir / "eagle" / "record.json", EAGLE_HEADING, eagle_card, "eagle"),
                "eagle3": (pair_dir / "eagle3" / "record.json", EAGLE3_HEADING, eagle3_card, "eagle3"),
                "mtp": (pair_dir / "mtp" / "record.json", MTP_HEADING, mtp_card, "mtp"),
                "exit": (pair_dir / "exit" / "record.json", EXIT_HEADING, exit_card, "exit")}
    if args.only:
        marker, _, _, trainer = sections[args.only]
        if not marker.exists():
            raise SystemExit(f"no trained {args.only} head in {marker.parent}: train it with "
                             f"python -m speclab train {trainer} --target DIR --out DIR --install")
        card = out.read_text() if out.exists() else ""
        sections = {args.only: sections[args.only]}
    else:
        card = model_card(pair_dir, args.num_prompts, args.max_new_tokens)
    for marker, heading, section, _ in sections.values():
        if marker.exists():
            card = replace_section(card, heading, section(pair_dir, args.num_prompts, args.max_new_tokens))
    out.write_text(card)
    print(card)
    print(f"written to {out}")


def cmd_theory(args) -> None:
    from speclab import theory
    print(f"c = {args.c}")
    print(f"{'K':>3} {'breakeven a':>12} " + " ".join(f"{'S(a=' + str(a) + ')':>10}" for a in args.alpha))
    for k in range(1, args.k_max + 1):
        be = theory.breakeven_alpha(k, args.c)
        print(f"{k:3d} {be:12.3f} " + " ".join(f"{theory.speedup(a, k, args.c):10.2f}" for a in args.alpha))
    for a in args.alpha:
        print(f"best K at a={a}: {theory.best_k(a, args.c, args.k_max)}")


def cmd_workloads(args) -> None:
    from speclab.measure import workloads
    if args.build:
        print(f"wrote {workloads.write()}")
    for name in workloads.WORKLOADS:
        first = workloads.load_prompts(name, 1)[0]
        print(f"== {name}: first prompt ({len(first)} characters), last lines:")
        print("\n".join(first.rstrip("\n").splitlines()[-4:]) + "\n")


def cmd_pairs(_args) -> None:
    from speclab.models import BUNDLED_DIR, HUB_PAIRS
    print(f"bundled (default): {BUNDLED_DIR}")
    for name, p in HUB_PAIRS.items():
        print(f"{name:14} target {p.target:38} draft {p.draft:38} ~{p.weights_gb:.1f} GB weights (16-bit), "
              f"fits a 16 GB T4: {'yes' if p.fits_t4 else 'no'}")


BENCH_METHODS = ("speclab target-only", "speclab speculative", "speclab adaptive-heuristic",
                 "speclab adaptive-confidence", "speclab prompt-lookup", "speclab lookahead",
                 "speclab medusa", "speclab medusa-chain", "speclab eagle", "speclab eagle-chain",
                 "speclab eagle3", "speclab mtp", "speclab mtp-chain", "speclab layer-skip",
                 "hf target-only", "hf assisted", "hf prompt-lookup")  # = bench.METHODS (without importing it, so --help stays fast)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m speclab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="decode a prompt and print the text and statistics")
    add_pair_args(g)
    add_sampling_args(g, k_default=None, k_help="draft tokens per round, or a tree's depth at most (default 4; for eagle and eagle3's "
                      "dynamic tree, its own depth)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="file holding the prompt text")
    g.add_argument("--method", "--drafter", dest="method", choices=list(GENERATE_METHODS), default="draft_model",
                   help="how to draft (vLLM's names): draft_model, ngram (prompt lookup), lookahead, medusa, eagle, "
                   "eagle3, mtp, layer_skip; or target-only (older names: model, prompt-lookup, none)")
    g.add_argument("--lookahead", type=lookahead_setting, default="4,4,4", metavar="W,N,G",
                   help="lookahead decoding's window, n-gram size and pool size per key (default 4,4,4)")
    g.add_argument("--heads", default=None, help="Medusa heads directory (default: those shipped with the bundled target)")
    g.add_argument("--eagle", default=None, help="EAGLE head directory (default: the one shipped with the bundled target)")
    g.add_argument("--eagle3", default=None, help="EAGLE-3 head directory (default: the one shipped with the bundled "
                   "target)")
    g.add_argument("--eagle-tree", type=eagle_tree_setting, default={}, metavar="dynamic|chain|TOP_K,DEPTH,TOTAL[,STOP]",
                   help="eagle and eagle3: EAGLE-2's dynamic tree with the settings measured for the head (tree.json; "
                   "the default), EAGLE-1's chain of --k tokens, or a tree of your own: children per node, depth, "
                   "nodes, and optionally the stop (min_confidence)")
    g.add_argument("--mtp", default=None, help="MTP module directory (default: the one shipped with the bundled target)")
    g.add_argument("--mtp-tokens", type=int, default=1, help="MTP drafts per round (more chains the module)")
    g.add_argument("--exit-layer", type=int, default=20, help="layer_skip: the last layer that drafts (default 20)")
    g.add_argument("--exit-adapter", action="store_true", help="layer_skip: with the exit adapter shipped for the "
                   "bundled target")
    add_adaptive_args(g)
    g.set_defaults(func=cmd_generate)

    b = sub.add_parser("bench", help="speclab vs transformers, target-only vs speculative, one process")
    add_pair_args(b)
    add_sampling_args(b)
    b.add_argument("--workload", default="code", help="comma-separated workloads, each benchmarked in turn: code "
                   "and prose (held-out windows), edit and quote (the shipped copying sets; speclab.measure.workloads)")
    b.add_argument("--lookahead", type=lookahead_setting, nargs="+", default=[(4, 4, 4)], metavar="W,N,G",
                   help="the lookahead row's window, n-gram size and pool size per key (default 4,4,4); several "
                   "settings give a row each, side by side (a sweep)")
    b.add_argument("--num-prompts", type=int, default=4, help="prompts per workload (default 4, a quick look; from 8 on, "
                   "the table's '95%% over prompts' column says how far each ratio could move; the book's record "
                   "uses 16). Code prompts skip the eight EAGLE-2's settings are tuned on")
    b.add_argument("--lookup-k", type=int, default=None, help="tokens per round for the prompt-lookup rows, "
                   "speclab's and transformers' (default: --k); copying pays at a larger K (chapter 6)")
    b.add_argument("--lookup-choose", nargs="+", default=None, choices=["latest", "first", "frequent", "longest"],
                   help="prompt lookup's rule for choosing among several matches (default: frequent); several "
                   "give a row each, side by side")
    b.add_argument("--prompt", default=None, help="benchmark this one prompt instead")
    b.add_argument("--methods", "--method", dest="methods", default=None,
                   help="comma-separated subset of: " + ", ".join(BENCH_METHODS) + " (default: all that fit the target)")
    b.add_argument("--heads", default=None, help="Medusa heads directory (default: those shipped with the bundled target)")
    b.add_argument("--eagle3", default=None, help="EAGLE-3 head directory, for the eagle3 row (default: the one "
                   "shipped with the bundled target)")
    b.add_argument("--eagle", default=None, help="EAGLE head directory, for the eagle rows (default: the one shipped "
                   "with the bundled target)")
    b.add_argument("--mtp", default=None, help="MTP module directory, for the mtp rows (default: the one shipped with "
                   "the bundled target)")
    b.add_argument("--layer-skip", type=layer_skip_setting, nargs="+", default=[(22, True)], metavar="E[+adapter]",
                   help="the layer-skip rows: exit layer, with or without the shipped exit adapter (default "
                   "22+adapter, the fastest in chapter 9's sweep); several give a row each, side by side (a sweep)")
    b.add_argument("--k-sweep", type=int_list, default=None, metavar="K,K,...",
                   help="also run the draft model at each of these fixed K, a row each (adaptive K is measured "
                   "against the best of them)")
    b.add_argument("--adaptive-k", type=int, default=None, help="upper bound on K for the adaptive rows (default: "
                   "the largest --k-sweep value, else the larger of --k and 8)")
    b.add_argument("--confidence-threshold", type=float, nargs="+", default=[0.1], help="the adaptive-confidence "
                   "row's stop (default 0.1, the fastest in chapter 9's sweep; transformers' default is 0.4); several "
                   "give a row each, side by side")
    b.add_argument("--repeats", type=int, default=3, help="time each method this many times; report the median")
    b.add_argument("--json", default=None, help="also write the results to this JSON file")
    b.set_defaults(func=cmd_bench)

    p = sub.add_parser("profile", help="forward time vs positions, c, bandwidth")
    add_pair_args(p)
    p.add_argument("--json", default=None, help="also write the measurements here; {device} is replaced by the "
                   "device's name (chapter 1 reads book/measurements/profile-{device}.json)")
    p.set_defaults(func=cmd_profile)

    e = sub.add_parser("evaluate", help="acceptance by K and temperature on held-out prompts")
    add_pair_args(e)
    e.add_argument("--workload", choices=["code", "prose"], default="code")
    e.add_argument("--num-prompts", type=int, default=4)
    e.add_argument("--k-max", type=int, default=8)
    e.add_argument("--max-new-tokens", type=int, default=128)
    e.set_defaults(func=cmd_evaluate)

    c = sub.add_parser("card", help="measure the bundled pair and write its model card")
    c.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    c.add_argument("--pair-dir", default=None, help="folder with target/, draft/, draft-plain/, training.json "
                   "(default: the bundled pair)")
    c.add_argument("--num-prompts", type=int, default=4)
    c.add_argument("--max-new-tokens", type=int, default=128)
    c.add_argument("--out", default=None, help="default: MODEL_CARD.md in the pair folder")
    c.add_argument("--only", choices=["medusa", "eagle", "eagle3", "mtp", "exit"], default=None,
                   help="re-measure only this section of the card (the Medusa heads, an EAGLE head, the MTP module or "
                   "the exit adapters shipped with the target) and keep the rest")
    c.set_defaults(func=cmd_card)

    t = sub.add_parser("theory", help="the speedup model for a given cost ratio")
    t.add_argument("--c", type=float, required=True, help="draft step cost / target step cost")
    t.add_argument("--alpha", type=float, nargs="+", default=[0.6, 0.7, 0.8, 0.9])
    t.add_argument("--k-max", type=int, default=8)
    t.set_defaults(func=cmd_theory)

    sub.add_parser("pairs", help="list the bundled and hub pairs").set_defaults(func=cmd_pairs)
    w = sub.add_parser("workloads", help="show the prompt sets; --build rewrites the shipped copying sets")
    w.add_argument("--build", action="store_true", help="rebuild speclab/data/workloads.json from this Python's "
                   "standard library (held-out files only)")
    w.set_defaults(func=cmd_workloads)
    sub.add_parser("train", help="python -m speclab train pair --out DIR | train draft --target DIR --out DIR | "
                   "train medusa|eagle|eagle3|mtp|exit --target DIR --out DIR", add_help=False)
    sub.add_parser("labs", help="python -m speclab labs build | grade DIR --out scores.csv", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        from speclab.train import main as train_main
        return train_main(argv[1:])
    if argv[:1] == ["labs"]:
        from speclab.course.grading import main as grading_main
        return grading_main(argv[1:])
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
