"""speclab's fast path against vLLM's CPU engine on the bundled target, batch 1 (chapter 10): target-only
decoding and vLLM's "ngram" against speclab's prompt lookup (the same K and n-gram sizes) on the bench's
held-out code prompts, every output compared token by token. It runs in the serving environment
(requirements-serving.txt; the README's "Serving engines"), with Intel's OpenMP preloaded as vLLM's CPU
guide asks:

    LD_PRELOAD=$PWD/.venv-serving/lib/libiomp5.so .venv-serving/bin/python -m speclab.serving.vllm_cpu \
        --json book/records/10_vllm_cpu.json

speclab runs first, then each vLLM configuration in its own engine, shut down before the next, so the two
never share the cores; each prompt is timed alone, request to last token, prefill included."""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from speclab.decoding import generate, speculative_generate
from speclab.devices import cpu_name
from speclab.measure.workloads import prompt_ids
from speclab.methods import bench_row, current_row
from speclab.methods.ngram import NAME as NGRAM
from speclab.methods.ngram import PromptLookupDrafter
from speclab.models import BUNDLED_DIR, load_pair
from speclab.runner import disable_fast_path, enable_fast_path
from speclab.serving.settings import engine_settings
from speclab.serving.vllm_engine import vllm_decode

ENGINE_ROWS = ("vllm target-only (eager)", "vllm target-only (compiled)", "vllm ngram (compiled)")
LOOKUP_ROW = f"{bench_row(PromptLookupDrafter.name)} (compiled)"  # speclab's prompt lookup: "speclab ngram (compiled)"


def vllm_rows(model_dir: Path, prompts: list[list[int]], k: int, max_new_tokens: int, max_ngram: int,
              min_ngram: int) -> dict[str, dict]:
    """vLLM's tokens/s and outputs, batch 1, greedy, float32, for each of ENGINE_ROWS: an engine each
    (speclab.serving.vllm_engine.vllm_decode), shut down before the next."""
    ngram = engine_settings(NGRAM, "vllm", k=k, max_ngram=max_ngram, min_ngram=min_ngram).settings
    configs = {"vllm target-only (eager)": (None, False), "vllm target-only (compiled)": (None, True),
               "vllm ngram (compiled)": (ngram, True)}
    return {name: vllm_decode(model_dir, prompts, config, max_new_tokens, compiled=compiled)
            for name, (config, compiled) in configs.items()}


def speclab_rows(prompts: list[list[int]], k: int, max_new_tokens: int, max_ngram: int,
                 min_ngram: int) -> dict[str, dict]:
    """speclab's target-only (eager, and on the compiled fast path) and prompt lookup on the compiled fast
    path, the same prompts, K and n-gram sizes; each prompt timed once after a warm-up run of every width."""
    target = load_pair().target
    drafter = PromptLookupDrafter(max_ngram=max_ngram, min_ngram=min_ngram)
    runs = {"speclab target-only (eager)": lambda ids: generate(target, ids, max_new_tokens=max_new_tokens),
            "speclab target-only (compiled)": lambda ids: generate(target, ids, max_new_tokens=max_new_tokens),
            LOOKUP_ROW: lambda ids: speculative_generate(
                target, drafter, ids, k=k, max_new_tokens=max_new_tokens)}
    rows = {}
    for name, run in runs.items():
        if "compiled" in name:
            enable_fast_path(target, "compiled")
        for ids in prompts:  # warm up: every pass width these prompts need compiles here, untimed
            run(torch.tensor(ids))
        outputs, seconds = [], []
        for ids in prompts:
            start = time.perf_counter()
            out = run(torch.tensor(ids))
            seconds.append(time.perf_counter() - start)
            outputs.append(out.tokens.tolist())  # the new tokens
        rows[name] = row(outputs, seconds)
        disable_fast_path(target)
    return rows


def rows_of(record: dict) -> dict[str, dict]:
    """A record's rows by their names now: an older record's "speclab prompt lookup (compiled)" reads as
    LOOKUP_ROW (methods.current_row)."""
    return {current_row(name): r for name, r in record["rows"].items()}


def row(outputs: list[list[int]], seconds: list[float]) -> dict:
    tokens = sum(len(o) for o in outputs)
    return {"tokens_per_s": tokens / sum(seconds), "new_tokens": tokens, "prompt_seconds": seconds,
            "outputs": outputs}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m speclab.serving.vllm_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--num-prompts", type=int, default=4, help="held-out code prompts (the README bench's)")
    p.add_argument("--k", type=int, default=4, help="tokens drafted a round (vLLM: num_speculative_tokens)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--max-ngram", type=int, default=3, help="longest n-gram matched (vLLM: prompt_lookup_max)")
    p.add_argument("--min-ngram", type=int, default=1, help="shortest n-gram matched (vLLM: prompt_lookup_min)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None, help="write the record here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model_dir = BUNDLED_DIR / "target"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = [ids.tolist() for ids in prompt_ids(tokenizer, "code", args.num_prompts)]
    # speclab first: vLLM's engines leave threads and processes behind that would share its two cores
    rows = speclab_rows(prompts, args.k, args.max_new_tokens, args.max_ngram, args.min_ngram)
    rows.update(vllm_rows(model_dir, prompts, args.k, args.max_new_tokens, args.max_ngram, args.min_ngram))
    reference = rows["speclab target-only (eager)"]["outputs"]
    import vllm  # present: vllm_rows ran
    record = {"cpu": cpu_name(), "threads": args.threads, "torch": torch.__version__, "vllm": vllm.__version__,
              "k": args.k, "max_new_tokens": args.max_new_tokens, "max_ngram": args.max_ngram,
              "min_ngram": args.min_ngram, "prompts": len(prompts), "ld_preload": os.environ.get("LD_PRELOAD"),
              "rows": {name: {**r, "same_as_eager_target_only": r["outputs"] == reference}
                       for name, r in rows.items()}}
    print(f"{record['cpu']}, {args.threads} threads, vLLM {record['vllm']}, K = {args.k}, "
          f"{args.max_new_tokens} new tokens, {len(prompts)} code prompts, batch 1")
    for name, r in record["rows"].items():
        print(f"{name:34} {r['tokens_per_s']:7.1f} tok/s   output = speclab eager target-only: "
              f"{'yes' if r['same_as_eager_target_only'] else 'NO'}")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
        print(f"written to {args.json}")
    return record


if __name__ == "__main__":  # vLLM starts its engine in a new process: the guard keeps it from rerunning this
    main()
