"""python -m speclab bench: target-only vs every drafting method vs transformers' assisted generation and
prompt lookup, side by side, timed in one process on one or more workloads, and the speedup model checked
against the costs measured in the loop."""
from __future__ import annotations

import argparse
import json
import sys
import statistics
import time

import torch

from speclab import theory
from speclab.cli.main import command_line, command_parser
from speclab.cli.options import (add_pair_args, add_sampling_args, add_weights_args, load, prompts_for,
                                 require_draft, weights_given)
from speclab.devices import cpu_name, gpu_name
from speclab.measure.bench import (REFERENCE_METHODS, Bench, Decoding, Settings, bench_methods, default_methods,
                                   format_table, lesson_methods, model_check, needs_draft_model, plan_bench,
                                   prepare_fast_paths, registered_sweeps, row_label, run_plan)
from speclab.measure import batching
from speclab.measure.profiling import gemv_bandwidth_gbs, matmul_gflops, parameter_bytes
from speclab.measure.workloads import CHAT, COPYING, expand_workloads, shipped_count
from speclab.methods import current_row
from speclab.methods.flags import int_list
from speclab.runner import FAST_MODES, context_length, enable_fast_path, fast_paths


def build_parser() -> argparse.ArgumentParser:
    b = command_parser("bench")
    add_pair_args(b)
    add_sampling_args(b)
    b.add_argument("--workload", default="code", help="comma-separated workloads, each benchmarked in turn: code "
                   f"and prose (held-out windows), {' and '.join(COPYING)} (the shipped copying sets), edits (sixteen "
                   "edits of one file, a series of requests: chapter 13), the chat prompts "
                   f"by task, run through the tokenizer's chat template ({', '.join(CHAT)}; 4 each), or "
                   "chat for all seven (speclab.measure.workloads)")
    b.add_argument("--num-prompts", type=int, default=4, help="prompts per workload (default 4, a quick look; from 8 on, "
                   "the table's '95%% over prompts' column says how far each ratio could move; the book's record "
                   "uses 16). Code prompts skip the eight EAGLE-2's settings are tuned on")
    b.add_argument("--lookup-k", type=int, default=None, help="tokens per round for the prompt-lookup rows, "
                   "speclab's and transformers' (default: --k); copying pays at a larger K (chapter 6)")
    b.add_argument("--prompt", default=None, help="benchmark this one prompt instead")
    b.add_argument("--methods", "--method", dest="methods", default=None,
                   help="comma-separated subset of: " + ", ".join(bench_methods()) + " (default: the lesson, target-only against "
                   "the draft model, prompt lookup, Medusa, both EAGLE heads and transformers' two, where they fit the "
                   "target; --all for every row); "
                   "and, only when named, " + ", ".join(REFERENCE_METHODS) + " (Arctic Inference's suffix decoding: "
                   "bash .ci/install-arctic-suffix.sh .venv)")
    b.add_argument("--all", action="store_true", help="every row that fits the target, each method's variants "
                   "and transformers' own target-only too (several times the default's 1 to 3.5 minutes on 2 CPU cores: "
                   "README)")
    add_weights_args(b, used="the {name} rows")  # --heads, --eagle, --eagle3, --mtp (Method.weights_flag)
    for sweep in registered_sweeps().values():  # declared by the methods' modules (Sweep), a row per value
        b.add_argument(sweep.flag.name, dest=sweep.name, default=None, **sweep.flag.spec)
    b.add_argument("--adaptive-k", type=int, default=None, help="upper bound on K for the adaptive rows (default: "
                   "the largest --k-sweep value, else the larger of --k and 8)")
    b.add_argument("--block", action="store_true", help="also run every speclab row that drafts a chain with block "
                   "verification (Sun et al. 2025), as '<row> (block)', in the same interleaved runs: it can only "
                   "differ when sampling (--temperature above 0); chapter 13")
    b.add_argument("--fast", nargs="?", const="static", choices=FAST_MODES, default=None,
                   help="also run every speclab row on the fast path (a static cache written by position; "
                   "'compiled' adds torch.compile; 'graphs' replays CUDA graphs recorded without it, on a GPU), as "
                   "'<row> (fast)', in the same interleaved runs: chapter 10")
    b.add_argument("--stop-at-eos", action="store_true", help="stop each prompt's decoding at the tokenizer's "
                   "end-of-sequence token, included (a chat answer's end of turn), as Spec-Bench does; default: "
                   "decode --max-new-tokens tokens whatever comes, past the end of an answer too")
    b.add_argument("--repeats", type=int, default=3, help="time each method this many times; report the median run "
                   "(of an even number, the slower middle one)")
    b.add_argument("--json", default=None, help="also write the results to this JSON file")
    b.add_argument("--batch-sizes", type=int_list, default=None, metavar="B,B,...",
                   help="measure batched decoding instead (chapter 11): target-only, the draft model, prompt "
                   "lookup and EAGLE's chain at each K of --k-sweep (default 1,2,4,8) on batches of these sizes "
                   f"(the workload's first max(B, {batching.MIN_PROMPTS}) prompts in batches of B; as many other "
                   "prompts calibrate the model and the K policy), on the fast path (--fast, default static); "
                   "tokens/s, inter-token latency, the crossover measured and predicted, and the K a batch size "
                   "calls for")
    return b


def bench_batches(args) -> dict:
    """bench --batch-sizes: the batch sweep (speclab.measure.batching), its model and its K policy."""
    sizes, ks = sorted(set(args.batch_sizes)), args.k_sweep or list(batching.KS)
    if min(sizes) < 1 or min(ks) < 1:
        raise SystemExit("--batch-sizes and --k-sweep take integers >= 1")
    target, draft, tok, device = load(args)
    # the sweep's prompts, then as many others for calibration (the model's inputs and the K policy)
    per_half = max(max(sizes), batching.MIN_PROMPTS)
    pool = [p.to(device) for p in prompts_for(args, tok, args.workload, 2 * per_half)]
    if len(pool) < 2 * per_half:
        raise SystemExit(f"the {args.workload!r} workload has {len(pool)} prompts; a sweep to batch {max(sizes)} needs "
                         f"{2 * per_half} (half to time, half to calibrate): use --workload code")
    prompts, calibration = pool[:per_half], pool[per_half:]
    room = (context_length(target) or 4096) - args.max_new_tokens - max(ks) - 1  # a prompt's share of the context
    if room < 1:
        raise SystemExit(f"{args.max_new_tokens} new tokens leave no room for a prompt in the target's context of "
                         f"{context_length(target)} positions: lower --max-new-tokens")
    if max(len(p) for p in prompts + calibration) > room:  # a small target: each prompt's last tokens
        print(f"prompts longer than {room} tokens are cut to their last {room} (the target's context is "
              f"{context_length(target)} positions)")
        prompts, calibration = [p[-room:] for p in prompts], [p[-room:] for p in calibration]
    longest = max(len(p) for p in prompts + calibration) + args.max_new_tokens + max(ks) + 1
    mode = args.fast or "static"
    models = [m for m in (target, draft) if m is not None]
    for model in models:
        enable_fast_path(model, mode, max_len=longest, max_batch=max(sizes))
    drafters = batching.make_drafters(target, draft, [m for m in batching.DRAFTERS if m != batching.DRAFT_MODEL or draft is not None])
    methods = list(drafters)
    context = int(statistics.mean(len(p) for p in prompts)) + args.max_new_tokens // 2
    print(f"device {device} ({cpu_name()}), threads {torch.get_num_threads()}, torch {torch.__version__}, fast path "
          f"{mode}; {len(prompts)} {args.workload} prompts, {args.max_new_tokens} new tokens, greedy, median of "
          f"{args.repeats} interleaved repeats; batch sizes {sizes}, K {ks}")
    cal = batching.calibrate(target, draft, drafters, calibration, sizes, ks, context, args.max_new_tokens)
    bandwidth, gflops = gemv_bandwidth_gbs(device), matmul_gflops(device)
    weight_bytes = parameter_bytes(target)
    params = weight_bytes / target.dtype.itemsize
    print(f"roofline: {bandwidth:.1f} GB/s (a matrix-vector product), {gflops:.0f} GFLOP/s (a 2048^2 product); target "
          f"{weight_bytes / 1e6:.1f} MB; the ridge at {gflops * 1e9 * target.dtype.itemsize / (2 * bandwidth * 1e9):.0f} "
          "tokens a pass")
    for b in sizes:
        print(f"  batch {b:3d} pass ms by width: " + ", ".join(
            f"{w}: {ms:.1f} (roof {batching.roofline_ms(weight_bytes, params, b * w, bandwidth, gflops):.1f})"
            for w, ms in cal.target_ms[b].items()) +
            (f"; draft step {cal.draft_ms[b]:.1f}" if cal.draft_ms else ""))
    ratio = batching.one_against_a_batch_of_one(target, prompts[0], args.max_new_tokens)
    print(f"batch of one against one prompt alone (target-only): {ratio:.3f}x the time")
    # the timed prompts and the calibration prompts side by side in one rotation; the policy and the rounds
    # model read the calibration prompts' rows only
    both = batching.sweep(target, drafters, prompts, [(m, k) for m in methods for k in ks], sizes,
                          args.max_new_tokens, args.repeats, calibration=calibration)
    cal.tuned(both)
    table = batching.of_set(both, "timed")
    # the naive model: batch-1 acceptance, no tail; the model: the calibration sweep's rounds, the cost grid
    naive = {m: batching.predict(cal.alpha[m], cal.target_ms, cal.draft_ms if m == batching.DRAFT_MODEL else None, ks)
             for m in methods}
    predicted = batching.predict_from_rounds(cal.rows, cal.target_ms)
    modelled = {m: batching.k_policy(predicted[m]) for m in methods}
    policy = cal.policy
    for m in methods:
        print(f"  {m}: alpha {cal.alpha[m]:.2f} (batch 1, calibration prompts); best K by batch size, predicted: "
              + ", ".join(f"{b}: {k}" for b, k in modelled[m].items()) + "; measured on the calibration prompts (the "
              "policy): " + ", ".join(f"{b}: {k}" for b, k in policy[m].items()))
    result = batching.summary(table, predicted, policy, naive)
    for m, s in result.items():
        print(f"{m}: crossover measured {s['crossover_measured']}, predicted {s['crossover_predicted']} (batch-1 "
              f"acceptance, no tail: {s['crossover_naive']}); best K "
              + ", ".join(f"{b}: {k}" for b, k in s["best_k"].items()) + "; policy / best fixed / K=4: "
              + ", ".join(f"{b}: {s['policy_speedup'][b]:.2f}/{s['best_speedup'][b]:.2f}/{s['k4_speedup'].get(b, float('nan')):.2f}"
                          for b in s["best_k"]) + "; repeats moved rows by "
              + ", ".join(f"{b}: {100 * x:.0f}%" for b, x in s["spread"].items()))
    return dict(device=str(device), gpu=gpu_name(device), cpu=cpu_name(), threads=torch.get_num_threads(),
                torch=torch.__version__, fast=mode, workload=args.workload, max_new_tokens=args.max_new_tokens,
                repeats=args.repeats,
                batch_sizes=sizes, ks=ks, context=context, target_pass_ms=cal.target_ms, draft_step_ms=cal.draft_ms,
                alpha=cal.alpha, naive=naive, predicted=predicted, modelled_policy=modelled, policy=policy,
                calibration_rows=batching.rows_to_dicts(cal.rows), bandwidth_gbs=bandwidth, gflops=gflops,
                weight_bytes=weight_bytes, batch_of_one_ratio=ratio, rows=batching.rows_to_dicts(table),
                min_prompts=batching.MIN_PROMPTS, tie=batching.TIE, calibration_side_by_side=True,
                summary=result)


def print_settings(args, target, draft, device, workload: str, num_prompts: int) -> None:
    given = [f"{s.flag.name} {getattr(args, s.name)}" for s in registered_sweeps().values()
             if getattr(args, s.name) is not None]  # the sweeps set by their flags (the rest: their defaults)
    lookup = f" (prompt lookup K={args.lookup_k})" if args.lookup_k else ""
    limit = "at most " if args.stop_at_eos else ""
    gpu = gpu_name(device)
    print(f"device {device}{f' ({gpu})' if gpu else ''}, {num_prompts} {workload} prompts, K={args.k}{lookup}, "
          f"{limit}{args.max_new_tokens} new tokens{' (stops at EOS)' if args.stop_at_eos else ''}, "
          f"temperature {args.temperature}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"median of {args.repeats} interleaved repeats; target {target.dtype}, "
          f"draft {draft.dtype if draft is not None else 'none'}"
          + "".join(f"; {g}" for g in given))


def methods_to_run(args, target, draft, weights) -> tuple[str, ...]:
    """--methods, or every row that fits the target; without a draft model (a pair whose draft is not
    trained yet) the rows that draft with one are left out, said above each table, and asking for one by
    --methods is an error that says how to train a draft."""
    if args.methods:
        methods = tuple(current_row(m.strip()) for m in args.methods.split(","))  # an older record's labels too
        if draft is None and any(needs_draft_model(m) for m in methods):
            require_draft(args, draft, f"the rows {[m for m in methods if needs_draft_model(m)]}")
        return methods
    choose = default_methods if args.all else lesson_methods
    methods = choose(target, draft, weights, settings_of(args))
    if draft is None:
        left_out = [m for m in methods if needs_draft_model(m)]
        print(f"no draft model for this pair: left out {', '.join(left_out)}")
        methods = tuple(m for m in methods if m not in left_out)
    return methods


def stop_token(args, tokenizer) -> int | None:
    """The token --stop-at-eos stops at: the tokenizer's EOS (SmolLM2's chat template ends a turn with it)."""
    if not args.stop_at_eos:
        return None
    if tokenizer.eos_token_id is None:
        raise SystemExit("--stop-at-eos: this tokenizer has no end-of-sequence token; leave the flag out")
    return int(tokenizer.eos_token_id)


def settings_of(args) -> Settings:
    """The plan's settings from bench's flags: K, the lookup and adaptive rows' K, and the sweeps (Sweep.name
    is each one's dest)."""
    return Settings(args.k, args.lookup_k, args.adaptive_k, {s: getattr(args, s) for s in registered_sweeps()})


def bench_rows(args, target, draft, prompts, paths, tok) -> list:
    """The plan of the rows asked for (methods_to_run) under the flags' settings, timed: a BenchRow a row,
    the draft model's passes also timed alone (check_model reads them)."""
    weights = weights_given(args)
    methods = methods_to_run(args, target, draft, weights)
    plan = plan_bench(methods, target, draft, settings_of(args), weights, args.block, bool(paths))
    decoding = Decoding(args.max_new_tokens, args.temperature, args.seed, stop_token(args, tok))
    return run_plan(Bench(target, draft, prompts, plan, decoding, paths), args.repeats, time_alone=True,
                    progress=lambda line: print("  " + line, file=sys.stderr, flush=True))


def summary_of(args, device, workload: str, rows: list) -> dict:
    # a ratio depends on the machine (how it charges a pass over several positions): say which one;
    # the settings under their flags' names, each sweep's values (its default's where no flag set it)
    settings = settings_of(args)
    return dict(device=str(device), gpu=gpu_name(device), cpu=cpu_name(), torch=torch.__version__,
                workload=workload, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                repeats=args.repeats, k=args.k, lookup_k=settings.lookup, threads=torch.get_num_threads(),
                **{name: list(settings.values(s)) for name, s in registered_sweeps().items()},
                adaptive_k=settings.adaptive, fast=args.fast, stop_at_eos=args.stop_at_eos,
                rows=[r.to_record() for r in rows])


def on_path(rows: list, fast: bool) -> tuple:
    """(target-only, the draft model's own row) among `rows` on the fast path or the eager one (None: absent)."""
    pick = lambda wanted: next((r for r in rows if r.row.fast == fast and wanted(r.row)), None)  # noqa: E731
    return pick(lambda row: row.target_only), pick(lambda row: row.alone)


def check_model(args, target, draft, rows: list, fast: bool = False) -> dict:
    """The speedup model against the draft model's row's measured costs, printed; {} without that row.
    fast: the fast path's rows. The costs alone are the row's own (run_plan's time_alone: each model timed
    by itself beside the loop, prompt by prompt), so the loop against alone compares ms with ms measured in
    the same minutes, at the same contexts."""
    base, spec = on_path(rows, fast)
    if not (base and spec and spec.has_drafts):
        return {}
    if spec.alone_ms is None:
        raise ValueError("check_model reads the costs timed alone beside the loop: run_plan(..., time_alone=True)")
    check = model_check(base.stats, spec.stats)
    alone = spec.alone_ms
    unit = alone["target step"]
    c_alone, verify_alone = alone["draft step"] / unit, alone["verify pass"] / unit
    c_evicted = alone["draft step after a target pass"] / unit
    loop = {"verify pass": 1000 * spec.stats.target_s / spec.stats.rounds,
            "draft step": 1000 * spec.stats.draft_s / spec.stats.drafted}
    over = {"verify pass": loop["verify pass"] / alone["verify pass"],
            "draft step": loop["draft step"] / alone["draft step"],
            "draft step after a target pass": loop["draft step"] / alone["draft step after a target pass"]}
    print(check)
    print(f"measured alone (each model by itself, beside the loop): c = {c_alone:.3f}, verify pass {verify_alone:.2f} "
          f"-> modelled {theory.speedup(check.alpha, args.k, c_alone, verify_alone):.2f}x; a draft step right "
          f"after a target pass (the draft's weights evicted): c = {c_evicted:.3f}")
    print(f"in the loop against alone: verify pass {loop['verify pass']:.2f} ms vs {alone['verify pass']:.2f} "
          f"({over['verify pass']:.2f}x); draft step {loop['draft step']:.3f} ms vs {alone['draft step']:.3f} warm "
          f"({over['draft step']:.2f}x), {alone['draft step after a target pass']:.3f} right after a target pass "
          f"({over['draft step after a target pass']:.2f}x)")
    return dict(model_check=dict(vars(check), modelled=check.modelled, ratio=check.ratio),
                c_alone=c_alone, verify_cost_alone=verify_alone, c_after_target_pass=c_evicted,
                alone_ms=alone, loop_ms=loop, loop_over_alone=over)


def print_paths(rows: list) -> None:
    """The two paths side by side: the fast path's own ratios, and its target-only against the eager one."""
    fast = [r for r in rows if r.row.fast]
    (eager_base, _), (fast_base, _) = on_path(rows, False), on_path(rows, True)
    print("on the fast path (speedups over target-only on the fast path):")
    print(format_table(fast, baseline=fast_base.method if fast_base else ""))
    if eager_base is None or fast_base is None:
        return
    best = {label: max((r for r in rows if r.row.fast == on_fast and r.row.engine == "speclab"),
                       key=lambda r: r.tokens_per_s) for label, on_fast in (("eager", False), ("fast", True))}
    print(f"target-only: fast path {fast_base.tokens_per_s:.1f} tok/s against eager {eager_base.tokens_per_s:.1f} "
          f"({fast_base.tokens_per_s / eager_base.tokens_per_s:.2f}x); best speclab row: "
          + "; ".join(f"{label} {row_label(r.method)} {r.tokens_per_s:.1f} tok/s" for label, r in best.items()))


def prompt_count(args, workload: str) -> int:
    """--num-prompts, or all of a shipped set when it holds fewer (the copying sets ship eight, so that
    `--workload code,edit,quote --num-prompts 16` times sixteen code prompts and eight of each set); said
    aloud, and each record's rows hold one time per prompt."""
    shipped = shipped_count(workload)
    if args.prompt or shipped is None or args.num_prompts <= shipped:
        return args.num_prompts
    print(f"the {workload!r} set ships {shipped} prompts: timing all {shipped} (--num-prompts {args.num_prompts})")
    return shipped


def bench_workload(args, target, draft, tok, device, workload: str, num_prompts: int, paths) -> dict:
    prompts = [p.to(device) for p in prompts_for(args, tok, workload, num_prompts)]
    print_settings(args, target, draft, device, workload, len(prompts))
    rows = bench_rows(args, target, draft, prompts, paths, tok)
    print(format_table([r for r in rows if not r.row.fast]))
    summary = summary_of(args, device, workload, rows)
    summary.update(check_model(args, target, draft, rows))
    if paths:
        print_paths(rows)
        with fast_paths(paths):
            checked = check_model(args, target, draft, rows, fast=True)
        summary["fast_path"] = {**{f"{key}": value for key, value in checked.items()},
                                "mode": args.fast, "width_ms": paths[target].width_ms, "pad_to": paths[target].pad_to}
    print()
    return summary


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.command = command_line("bench", argv)   # what made a record, written into it
    if args.batch_sizes:
        if args.stop_at_eos:  # a batch's sequences would end at different steps: chapter 11 times fixed lengths
            raise SystemExit("--stop-at-eos times single prompts; leave it out with --batch-sizes")
        record = {"command": args.command, **bench_batches(args)}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=1)
        return
    try:
        workloads = expand_workloads(args.workload)
    except ValueError as err:
        raise SystemExit(str(err))
    counts = {w: prompt_count(args, w) for w in workloads}  # before any timing: a bad count fails at once
    target, draft, tok, device = load(args)
    paths = None
    if args.fast:  # built and warmed up once; the verify widths measured before any timing
        start = time.perf_counter()
        paths = prepare_fast_paths(target, draft, args.fast, max_width=max(args.k, args.lookup_k or 0, 8) + 1)
        print(f"fast path ({args.fast}) built in {time.perf_counter() - start:.1f} s; verify pass ms by width "
              + ", ".join(f"{w}: {ms:.1f}" for w, ms in paths[target].width_ms.items())
              + "; padded: " + (", ".join(f"{w}->{v}" for w, v in paths[target].pad_to.items() if v != w) or "none"))
    summaries = [bench_workload(args, target, draft, tok, device, w, counts[w], paths) for w in workloads]
    if args.json:
        with open(args.json, "w") as f:
            record = summaries[0] if len(summaries) == 1 else {"workloads": summaries}
            json.dump({"command": args.command, **record}, f, indent=1)


if __name__ == "__main__":
    main()
