"""Side-by-side speed comparison on one pair, one set of prompts and settings, in one process:
speclab target-only, speclab speculative (draft model and prompt lookup), and transformers'
own generate: target-only, assisted generation (assistant_model) and prompt lookup.

Every method decodes the same prompts for the same number of new tokens (EOS is ignored, so all
produce max_new_tokens); the table reports tokens/s and the ratio to speclab target-only.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from speclab.decoding import generate, speculative_generate
from speclab.devices import timer
from speclab.drafters import PromptLookupDrafter
from speclab.runner import model_device

METHODS = ("speclab target-only", "speclab speculative", "speclab prompt-lookup",
           "hf target-only", "hf assisted", "hf prompt-lookup")


@dataclass
class BenchRow:
    method: str
    new_tokens: int
    seconds: float
    acceptance_rate: float | None = None
    alpha: float | None = None
    tokens_per_round: float | None = None
    matches_target_only: bool | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds


def _hf_generate(target, prompt: torch.Tensor, max_new_tokens: int, temperature: float, seed: int, **extra):
    kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=temperature > 0,
                  pad_token_id=target.config.pad_token_id if target.config.pad_token_id is not None else 0)
    if temperature > 0:
        torch.manual_seed(seed)
        kwargs.update(temperature=temperature, top_k=None, top_p=None)
    with torch.inference_mode():
        out = target.generate(prompt.view(1, -1), attention_mask=torch.ones_like(prompt.view(1, -1)), **kwargs, **extra)
    return out[0, len(prompt):]


def run_method(method: str, target, draft, prompt: torch.Tensor, k: int, max_new_tokens: int,
               temperature: float, seed: int):
    """(new token ids, seconds, stats or None) for one prompt."""
    device = model_device(target)
    common = dict(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    with timer(device) as t:
        if method == "speclab target-only":
            result = generate(target, prompt, **common)
        elif method == "speclab speculative":
            result = speculative_generate(target, draft, prompt, k=k, **common)
        elif method == "speclab prompt-lookup":
            result = speculative_generate(target, PromptLookupDrafter(), prompt, k=k, **common)
        elif method == "hf target-only":
            result = _hf_generate(target, prompt, max_new_tokens, temperature, seed)
        elif method == "hf assisted":
            result = _hf_generate(target, prompt, max_new_tokens, temperature, seed, assistant_model=draft,
                                  num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
                                  assistant_confidence_threshold=0.0)
        elif method == "hf prompt-lookup":
            result = _hf_generate(target, prompt, max_new_tokens, temperature, seed, prompt_lookup_num_tokens=k)
        else:
            raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
    if isinstance(result, torch.Tensor):
        return result.cpu(), t["seconds"], None
    return result.tokens, t["seconds"], result.stats


def run_bench(target, draft, prompts: list[torch.Tensor], k: int = 4, max_new_tokens: int = 128,
              temperature: float = 0.0, seed: int = 0, methods: tuple[str, ...] = METHODS,
              warmup: bool = True, repeats: int = 1) -> list[BenchRow]:
    """Each method over every prompt, `repeats` times; one row per method with the totals over the
    prompts and the median time of the repeats (robust to a busy machine)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rows = []
    reference: list[list[int]] = []
    for method in methods:
        if warmup:
            run_method(method, target, draft, prompts[0], k, min(16, max_new_tokens), temperature, seed)
        row = BenchRow(method, 0, 0.0)
        accepted = drafted = rounds = rejections = 0
        outputs = []
        times = []
        for rep in range(repeats):
            seconds_total = 0.0
            for i, prompt in enumerate(prompts):
                tokens, seconds, stats = run_method(method, target, draft, prompt, k, max_new_tokens, temperature, seed + i)
                seconds_total += seconds
                if rep:
                    continue
                row.new_tokens += len(tokens)
                outputs.append(tokens.tolist())
                if stats is not None and stats.k:
                    accepted, drafted = accepted + stats.accepted, drafted + stats.drafted
                    rounds, rejections = rounds + stats.rounds, rejections + stats.rejections
            times.append(seconds_total)
        row.seconds = sorted(times)[len(times) // 2]
        if drafted:
            row.acceptance_rate = accepted / drafted
            row.alpha = accepted / (accepted + rejections) if accepted + rejections else 0.0
            row.tokens_per_round = row.new_tokens / rounds
        if method == "speclab target-only":
            reference = outputs
        elif reference and temperature == 0:
            row.matches_target_only = outputs == reference
        rows.append(row)
    return rows


def format_table(rows: list[BenchRow], baseline: str = "speclab target-only") -> str:
    base = next((r for r in rows if r.method == baseline), rows[0])
    lines = [f"{'method':24} {'tokens':>7} {'tokens/s':>9} {'vs ' + base.method:>28} {'accept':>7} {'tok/round':>9} {'same output':>11}"]
    for r in rows:
        accept = f"{r.acceptance_rate:.3f}" if r.acceptance_rate is not None else "-"
        tpr = f"{r.tokens_per_round:.2f}" if r.tokens_per_round is not None else "-"
        same = "-" if r.matches_target_only is None else ("yes" if r.matches_target_only else "no")
        lines.append(f"{r.method:24} {r.new_tokens:7d} {r.tokens_per_s:9.1f} {r.tokens_per_s / base.tokens_per_s:27.2f}x "
                     f"{accept:>7} {tpr:>9} {same:>11}")
    return "\n".join(lines)
