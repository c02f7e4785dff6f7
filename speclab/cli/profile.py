"""python -m speclab profile: each model's forward time against the positions it reads at once, the cost
ratio c, and the memory bandwidth a decode step uses of what the device has (the target alone, without c,
for a pair that has no draft yet); where a target decode step's time goes against its bandwidth floor;
with --fast, the same on the fast path, and on more than one thread the fast step and the floor at one
thread and at all (profiling.thread_scaling; chapter 10)."""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from speclab.cli.main import command_line, command_parser
from speclab.cli.options import add_pair_args, load
from speclab.devices import cpu_name
from speclab.measure.profiling import (GEMV_SIZES_MB, compiled_alone_ms, copy_bandwidth_gbs, decode_bandwidth_gbs,
                                      decode_floor_ms, forward_ms_by_positions, gemv_bandwidth_by_size,
                                      gemv_bandwidth_gbs, parameter_bytes, step_breakdown, thread_scaling)
from speclab.runner import FAST_MODES, disable_fast_path, enable_fast_path, model_device, runner_for

POSITIONS = [1, 2, 4, 8, 16, 32, 64]


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("profile")
    add_pair_args(p)
    p.add_argument("--fast", nargs="?", const="static", choices=FAST_MODES, default=None,
                   help="also measure the fast path (a static cache written by position; 'compiled' adds "
                   "torch.compile): its forward times and where its decode step's time goes; with more than "
                   "one thread, its step and the floor on one thread and on all")
    p.add_argument("--json", default=None, help="also write the measurements here; {device} is replaced by the "
                   "device's name (the book's profiles are book/records/10_profile_*.json)")
    return p


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.machine()} cpu"


def write_record(pattern: str, device: torch.device, target, results: dict, peak: float, c: float | None,
                 extra: dict) -> None:
    name = device_name(device)
    record = {"command": extra.pop("command", None), "device_name": name, "device": str(device), "cpu": cpu_name(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "positions": list(results),
              "target_ms": [t for t, _ in results.values()], "draft_ms": [d for _, d in results.values()],
              "parameter_bytes": parameter_bytes(target), "copy_bandwidth_gbs": peak, "cost_ratio": c, **extra}
    path = Path(pattern.replace("{device}", name.replace(" ", "-")))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    print(f"written to {path}")


def forward_times(target, draft) -> dict[int, tuple[float, float | None]]:
    """Positions -> (target ms, draft ms); the draft's None for a pair without a draft model."""
    target_ms = forward_ms_by_positions(target, POSITIONS)
    draft_ms = forward_ms_by_positions(draft, POSITIONS) if draft is not None else {}
    return {n: (target_ms[n], draft_ms.get(n)) for n in POSITIONS}


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.command = command_line("profile", argv)   # what made a record, written into it
    target, draft, _, device = load(args)
    draft_size = f"{parameter_bytes(draft) / 1e6:.1f} MB" if draft is not None else "none (the pair has no draft yet)"
    print(f"device {device}; target {parameter_bytes(target) / 1e6:.1f} MB of weights, draft {draft_size}")
    print(f"{'positions':>9} {'target ms':>10} {'draft ms':>9}")
    results = forward_times(target, draft)
    for n, (t, d) in results.items():
        print(f"{n:9d} {t:10.2f} " + (f"{d:9.2f}" if d is not None else f"{'-':>9}"))
    c = results[1][1] / results[1][0] if draft is not None else None
    peak = copy_bandwidth_gbs(device)
    used = decode_bandwidth_gbs(target, results[1][0])
    ratio = f"cost ratio c = {c:.3f}" if c is not None else "no cost ratio c without a draft"
    print(f"{ratio}; copy bandwidth {peak:.1f} GB/s; target decode step reads weights at "
          f"{used:.1f} GB/s ({100 * used / peak:.1f}% of it)")
    extra = steps_and_floor(args, target, draft, device)
    if args.json:
        write_record(args.json, device, target, results, peak, c, {"command": args.command, **extra})


def print_breakdown(label: str, parts: dict[str, float]) -> None:
    print(f"{label:>14} " + " ".join(f"{parts[k]:>10.2f}" for k in BREAKDOWN))


BREAKDOWN = ("total", "matrix products", "attention", "generated kernels", "other operators", "framework")


def first_step_seconds(model) -> float:
    """Seconds of the first one-token step after a prefill: on the compiled path, the compile."""
    runner, device = runner_for(model), model_device(model)
    runner.forward(torch.zeros(16, dtype=torch.long, device=device), last_only=True)
    start = time.perf_counter()
    runner.forward(torch.zeros(1, dtype=torch.long, device=device), last_only=True)
    return time.perf_counter() - start


def steps_and_floor(args, target, draft, device) -> dict:
    """Where a target decode step's time goes (eager, and on the fast path with --fast) and its floor:
    the weights read once at the bandwidth a matrix-vector product reaches here."""
    gemv = gemv_bandwidth_gbs(device)
    floor = decode_floor_ms(parameter_bytes(target), 0, gemv)
    print(f"target decode step, ms (after 128 cached tokens; torch.profiler's split):\n{'path':>14} "
          + " ".join(f"{k[:10]:>10}" for k in BREAKDOWN))
    steps = {"eager": step_breakdown(target)}
    print_breakdown("eager", steps["eager"])
    extra: dict = {"gemv_bandwidth_gbs": gemv, "floor_ms": floor, "steps": steps}
    if args.fast:
        models = [m for m in (target, draft) if m is not None]
        for model in models:
            enable_fast_path(model, args.fast)
        try:
            extra["compile_seconds"] = first_step_seconds(target)  # compiles the one-token pass when compiled
            steps["fast"] = step_breakdown(target)
            fast = forward_times(target, draft)
            threads = torch.get_num_threads()
            if threads > 1 and device.type == "cpu":  # the step and the floor on one core and on all
                extra["thread_scaling"] = thread_scaling(target, (1, threads))
        finally:
            for model in models:
                disable_fast_path(model)
        print_breakdown(f"fast ({args.fast})", steps["fast"])
        print(f"{'positions':>9} {'target ms':>10} {'draft ms':>9}  (fast path)")
        for n, (t, d) in fast.items():
            print(f"{n:9d} {t:10.2f} " + (f"{d:9.2f}" if d is not None else f"{'-':>9}"))
        extra.update(fast_mode=args.fast, fast_target_ms=[t for t, _ in fast.values()],
                     fast_draft_ms=[d for _, d in fast.values()])
        if args.fast == "compiled":  # the other half of the comparison: compiling transformers' model alone
            extra["compiled_alone_ms"] = compiled_alone_ms(target)
            print(f"compile alone (transformers' model and DynamicCache under torch.compile): "
                  f"{extra['compiled_alone_ms']:.2f} ms a token; first compiled step {extra['compile_seconds']:.0f} s")
    print(f"bandwidth floor: {parameter_bytes(target) / 1e6:.1f} MB of weights at {gemv:.1f} GB/s (a matrix-vector "
          f"product over 64 MB here) = {floor:.2f} ms a step")
    for n, at in extra.get("thread_scaling", {}).items():
        print(f"{n} thread{'s' if n > 1 else ''}: fast step {at['step_ms']:.2f} ms, floor {at['floor_ms']:.2f} ms "
              f"(at {at['gemv_gbs']:.1f} GB/s): {at['step_over_floor']:.2f}x the floor")
    by_size = gemv_bandwidth_by_size(device, GEMV_SIZES_MB)  # where the weights live decides which floor applies
    extra["gemv_gbs_by_mb"] = by_size
    print("a matrix-vector product by the matrix's size: "
          + ", ".join(f"{mb} MB {gbs:.1f} GB/s" for mb, gbs in by_size.items())
          + " (a drop: past a cache)")
    return extra


if __name__ == "__main__":
    main()
