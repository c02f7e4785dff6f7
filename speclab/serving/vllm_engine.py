"""vLLM beside speclab (chapter 12): the same target, prompts, method, weights and K in both engines, greedy,
batch 1; every output compared token by token, and each method's acceptance counted as vLLM counts it.
It runs in the serving environment (requirements-serving.txt; run_in_serving_env starts it there):

    .venv-serving/bin/python -m speclab.serving.vllm_engine --json book/records/12_vllm_beside_speclab.json

Each method is exported (speclab.serving.export), decoded by speclab (eager, in this process) and by vLLM
(an eager engine per method, shut down before the next). vLLM's acceptance comes from its own counters
(LLM.get_metrics(): vllm:spec_decode_*), its mean acceptance length 1 + accepted / drafts; speclab's is
counted alike over the rounds that drafted (for n-gram lookup, the rounds whose lookup matched).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from speclab.decoding import generate, speculative_generate
from speclab.devices import cpu_name
from speclab.measure.workloads import prompt_ids
from speclab.methods import REGISTRY, load_drafter, method
from speclab.models import BUNDLED_DIR, load_pair
from speclab.serving.export import SERVING_FILE, export

ROOT = Path(__file__).resolve().parents[2]
SERVING_PYTHON = "SPECLAB_SERVING_PYTHON"  # environment variable naming the serving environment's python
INSTALL = ("python3 -m venv .venv-serving && .venv-serving/bin/pip install --no-deps -r "
           "requirements-serving.txt")
# what vLLM loads of the bundled pair's methods (Method.vllm_drafts says how speclab drafts alike)
METHODS = tuple(m.name for m in REGISTRY.values() if m.vllm_drafts is not None)
COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "accepted"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


ACCEPTANCE_TOLERANCE = 0.05  # vLLM's mean acceptance length within 5% of speclab's: an export read as trained


def short_run(method: str) -> list[str]:
    """The arguments of a short run of one method in both engines (vLLM's engine started once, no vLLM run
    without speculation): two held-out prompts of 48 new tokens. Chapter 12.3 makes it live where
    SPECLAB_REQUIRE_SERVING=1 is set; tests/serving makes it, with `check_agreement`, in CI."""
    return ["--methods", method, "--num-prompts", "2", "--max-new-tokens", "48", "--no-vllm-target-only",
            "--threads", "1"]


def check_agreement(record: dict, method: str, tolerance: float = ACCEPTANCE_TOLERANCE) -> None:
    """Assert what a record must show for `method`: every engine's output equal to speclab's target-only, vLLM
    drafting, and vLLM's mean acceptance length within `tolerance` of speclab's."""
    rows = record["rows"][method]
    for engine, r in rows.items():
        assert r["same_as_target_only"], f"{engine}'s output differs from speclab's target-only"
    assert rows["vllm"]["drafts"] > 0, "vLLM proposed no draft"
    tau = {engine: r["mean_acceptance_length"] for engine, r in rows.items()}
    gap = abs(tau["vllm"] - tau["speclab"]) / tau["speclab"]
    assert gap <= tolerance, f"vLLM's acceptance is {100 * gap:.1f}% from speclab's (at most {100 * tolerance:g}%)"


def serving_python() -> Path:
    """The serving environment's python: $SPECLAB_SERVING_PYTHON, else .venv-serving in the repository."""
    path = Path(os.environ.get(SERVING_PYTHON) or ROOT / ".venv-serving" / "bin" / "python")
    if not path.is_file():
        raise FileNotFoundError(f"no serving environment at {path}: vLLM lives in its own (its pins differ from "
                                f"the course's). Install it from the repository root: {INSTALL}")
    return path


def run_in_serving_env(args: list[str], timeout: float = 900) -> dict:
    """Run this module in the serving environment with `args` (the command line's) and return its record."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"speclab_vllm_{os.getpid()}.json"
    cmd = [str(serving_python()), "-m", "speclab.serving.vllm_engine", *args, "--json", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"vLLM's run failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")
    record = json.loads(out.read_text())
    out.unlink()
    return record


def summary(outputs: list[list[int]], seconds: list[float], drafts: int, draft_tokens: int, accepted: int,
            per_position: list[int]) -> dict:
    tokens = sum(len(o) for o in outputs)
    return {"tokens_per_s": tokens / sum(seconds), "new_tokens": tokens, "prompt_seconds": seconds,
            "drafts": drafts, "draft_tokens": draft_tokens, "accepted": accepted, "per_position": per_position,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
            "acceptance_rate": accepted / draft_tokens if draft_tokens else None, "outputs": outputs}


def vllm_counters(llm) -> dict:
    found = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_position": []}
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            found[COUNTERS[metric.name]] = int(metric.value)
        elif metric.name == PER_POSITION:
            found["per_position"] = [int(v) for v in metric.values]
    return found


def vllm_decode(target_dir: str | Path, prompts: list[list[int]], speculative_config: dict | None,
                max_new_tokens: int, compiled: bool = False) -> dict:
    """vLLM's outputs, tokens/s and acceptance, greedy, float32, one prompt at a time (prefill included)."""
    try:
        from vllm import LLM, SamplingParams  # only in the serving environment
    except ImportError as err:
        raise ImportError(f"vLLM is not installed in this environment; it lives in the serving one: {INSTALL}") \
            from err
    # a 1 GiB KV cache (the default reserves most of the machine's memory) on cores 0..threads-1
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{torch.get_num_threads() - 1}")
    llm = LLM(model=str(target_dir), dtype="float32", max_model_len=1024, max_num_seqs=1, seed=0,
              enforce_eager=not compiled, speculative_config=speculative_config, disable_log_stats=False)
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
    llm.generate([{"prompt_token_ids": prompts[0]}], params, use_tqdm=False)  # warm up
    before = vllm_counters(llm)
    outputs, seconds = [], []
    for ids in prompts:
        start = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
        seconds.append(time.perf_counter() - start)
        outputs.append(list(out.outputs[0].token_ids))
    after = vllm_counters(llm)
    del llm
    gc.collect()
    per_position = [a - b for a, b in zip(after["per_position"], before["per_position"] or [0] * 64)]
    return summary(outputs, seconds, after["drafts"] - before["drafts"],
                   after["draft_tokens"] - before["draft_tokens"], after["accepted"] - before["accepted"],
                   per_position)


def speclab_decode(target: torch.nn.Module, drafter, prompts: list[list[int]], k: int, max_new_tokens: int) -> dict:
    """speclab's outputs, tokens/s and acceptance on its eager path, counted as vLLM counts them."""
    run = (lambda ids: generate(target, ids, max_new_tokens=max_new_tokens, eos_token_id=None)) if drafter is None \
        else (lambda ids: speculative_generate(target, drafter, ids, k=k, max_new_tokens=max_new_tokens,
                                               eos_token_id=None))
    run(torch.tensor(prompts[0]))  # warm up
    outputs, seconds, drafts, draft_tokens, accepted, per_position = [], [], 0, 0, 0, [0] * k
    for ids in prompts:
        start = time.perf_counter()
        out = run(torch.tensor(ids))
        seconds.append(time.perf_counter() - start)
        outputs.append(out.tokens.tolist())
        if drafter is not None:
            stats = out.stats
            drafts += stats.rounds - stats.empty_rounds  # vLLM counts a draft only where one was proposed
            draft_tokens += stats.drafted
            accepted += stats.accepted
            for i in range(k):  # rounds that kept more than i drafts accepted draft position i
                per_position[i] += sum(stats.accepted_lengths[i + 1:])
    return summary(outputs, seconds, drafts, draft_tokens, accepted, per_position if drafter is not None else [])


def exported(method_name: str, exports: Path, k: int) -> dict:
    """serving.json of `method_name` exported for vLLM into exports/<method> (exported now if missing)."""
    path = exports / method_name / SERVING_FILE
    if not path.is_file():
        export(method_name, "vllm", exports / method_name, k=k)
    return json.loads(path.read_text())


def speclab_drafter(method_name: str, record: dict, target: torch.nn.Module):
    """speclab's drafter for what vLLM loads: the exported weights, read back, drafting as vLLM does with the
    export's settings (Method.vllm_drafts: a head's chain of K, prompt lookup's n-gram sizes)."""
    m = method(method_name)
    options = dict(m.vllm_drafts(record["settings"]))
    if record["weights"] is not None:
        options[m.weights] = record["weights"]
    return load_drafter(method_name, target, **options)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m speclab.serving.vllm_engine", description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of " + ", ".join(METHODS))
    p.add_argument("--exports", type=Path, default=Path("/tmp/speclab_exports"),
                   help="where each method's vLLM export is (written there if missing)")
    p.add_argument("--num-prompts", type=int, default=4, help="held-out code prompts (the README bench's)")
    p.add_argument("--k", type=int, default=3, help="tokens drafted a round (vLLM: num_speculative_tokens)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vllm-target-only", action=argparse.BooleanOptionalAction, default=True,
                   help="also time vLLM without speculation (--no-vllm-target-only: a quicker run, outputs "
                        "still compared with speclab's target-only)")
    p.add_argument("--json", default=None, help="write the record here")
    args = p.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        p.error(f"--methods: {unknown} are not methods vLLM loads here; choose from {METHODS}")
    torch.set_num_threads(args.threads)
    target_dir = BUNDLED_DIR / "target"
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    prompts = [ids.tolist() for ids in prompt_ids(tokenizer, "code", args.num_prompts)]
    records = {name: exported(name, args.exports, args.k) for name in methods}
    # speclab first, in this process: vLLM's engines leave threads and processes behind
    target = load_pair(device="cpu", dtype=torch.float32, draft_dtype=torch.float32).target
    rows = {"target-only": {"speclab": speclab_decode(target, None, prompts, args.k, args.max_new_tokens)}}
    for name in methods:
        rows[name] = {"speclab": speclab_decode(target, speclab_drafter(name, records[name], target), prompts,
                                                args.k, args.max_new_tokens)}
    del target
    gc.collect()
    if args.vllm_target_only:
        rows["target-only"]["vllm"] = vllm_decode(target_dir, prompts, None, args.max_new_tokens)
    for name in methods:
        rows[name]["vllm"] = vllm_decode(target_dir, prompts, records[name]["settings"], args.max_new_tokens)
    reference = rows["target-only"]["speclab"]["outputs"]
    import vllm  # present: vllm_decode ran
    record = {"cpu": cpu_name(), "threads": args.threads, "torch": torch.__version__, "vllm": vllm.__version__,
              "k": args.k, "max_new_tokens": args.max_new_tokens, "prompts": len(prompts), "workload": "code",
              "ld_preload": os.environ.get("LD_PRELOAD"),
              "settings": {name: records[name]["settings"] for name in methods},
              "rows": {name: {engine: {**r, "same_as_target_only": r["outputs"] == reference}
                              for engine, r in both.items()} for name, both in rows.items()}}
    print(f"{record['cpu']}, {args.threads} threads, vLLM {record['vllm']} (eager), K = {args.k}, "
          f"{args.max_new_tokens} new tokens, {len(prompts)} code prompts, batch 1")
    for name, both in record["rows"].items():
        for engine, r in both.items():
            tau = "" if r["mean_acceptance_length"] is None else f"{r['mean_acceptance_length']:.3f}"
            print(f"{name:12} {engine:8} {r['tokens_per_s']:7.1f} tok/s   mean acceptance length {tau:>6}   "
                  f"output = target-only: {'yes' if r['same_as_target_only'] else 'NO'}")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
        print(f"written to {args.json}")
    return record


if __name__ == "__main__":  # vLLM starts its engine in a new process: the guard keeps it from rerunning this
    main()
