"""Losslessness on a real vocabulary: the first two sampled tokens of speculative decoding against the
target's exact distribution, by chi-square, with the same check run once on a deliberately broken rule.

On a tiny model (tests/test_lossless.py) every pair (t1, t2) is a cell. With 49,152 tokens that is 2.4
billion cells, so the cells are fixed before sampling from the exact distribution alone: t1 is one of
the `top` most likely first tokens, each with every t2 as its own cell (its exact row: one target
forward per kept t1), or "any other t1", one cell. chi_square_pvalue pools the cells expected fewer
than five times. The cells depend on p only, never on the samples, so the test keeps its size.

    report = lossless_check(target, drafter, prompt, samples=1000)   # {"p_value": ..., "broken_p_value": ...}
"""
from __future__ import annotations

import time
from collections.abc import Callable
from unittest import mock

import numpy as np
import torch

from speclab import verification
from speclab.decoding import speculative_generate
from speclab.measure.acceptance import chi_square_pvalue
from speclab.sampling import logits_to_probs


@torch.inference_mode()
def two_token_cells(target: torch.nn.Module, prompt: torch.Tensor, settings: dict, top: int = 20
                    ) -> tuple[torch.Tensor, np.ndarray]:
    """(kept first tokens (top,), exact cell probabilities: top x vocab rows for (t1, t2), then one cell
    for every other t1)."""
    dev = next(target.parameters()).device
    first = logits_to_probs(target(prompt.view(1, -1).to(dev)).logits[0, -1], **settings).cpu()
    kept = torch.topk(first, top).indices
    rows = []
    for t1 in kept.tolist():
        ids = torch.cat([prompt.cpu(), torch.tensor([t1])]).view(1, -1).to(dev)
        rows.append(first[t1] * logits_to_probs(target(ids).logits[0, -1], **settings).cpu())
    joint = torch.stack(rows).double().numpy()
    other = max(0.0, 1.0 - float(first[kept].double().sum()))
    return kept, np.append(joint.ravel(), other)


def sampled_cells(target: torch.nn.Module, make_drafter: Callable[[], object], prompt: torch.Tensor,
                  kept: torch.Tensor, vocab: int, samples: int, settings: dict, k: int = 2, seed: int = 0,
                  acceptance: str = "rejection") -> np.ndarray:
    """Counts of the first two tokens of `samples` speculative decodes (a fresh drafter each), in
    two_token_cells' layout."""
    row_of = {t: i for i, t in enumerate(kept.tolist())}
    counts = np.zeros(len(kept) * vocab + 1)
    for s in range(samples):
        t1, t2 = speculative_generate(target, make_drafter(), prompt, k=k, max_new_tokens=2, seed=seed + s,
                                      acceptance=acceptance, **settings).tokens.tolist()[:2]
        counts[row_of[t1] * vocab + t2 if t1 in row_of else -1] += 1
    return counts


def residual_replaced_by_p():
    """The broken rule the check must fail: after a rejection, resample from p instead of max(p - q, 0)."""
    return mock.patch.object(verification, "residual_distribution", lambda p, q: p)


def block_residual_made_token_wise():
    """Block verification's broken variant: after the block, resample from max(0, p - q), the token-wise
    rule's residual, instead of max(0, w p - q) with the block's remaining weight w."""
    return mock.patch.object(verification, "block_residual", lambda weight, p, q: torch.clamp(p - q, min=0))


BROKEN = {"rejection": residual_replaced_by_p, "block": block_residual_made_token_wise}


def lossless_check(target: torch.nn.Module, make_drafter: Callable[[], object], prompt: torch.Tensor,
                   samples: int = 1000, temperature: float = 1.0, top: int = 20, k: int = 2, seed: int = 0,
                   broken: bool = True, acceptance: str = "rejection") -> dict:
    """The chi-square p-value of speculative sampling's first two tokens against the target's, and (with
    `broken`) the same check of the rule broken on purpose, on fresh samples: the token-wise rule
    without its residual, or (acceptance="block") block verification with the token-wise residual."""
    if acceptance not in BROKEN:
        raise ValueError(f"acceptance must be a lossless rule, one of {tuple(BROKEN)}; got {acceptance!r}")
    settings = {"temperature": temperature}
    kept, probs = two_token_cells(target, prompt, settings, top)
    vocab = (len(probs) - 1) // top
    started = time.perf_counter()
    counts = sampled_cells(target, make_drafter, prompt, kept, vocab, samples, settings, k, seed, acceptance)
    report = {"samples": samples, "temperature": temperature, "k": k, "acceptance": acceptance,
              "top_first_tokens": top,
              "mass_of_kept_first_tokens": round(float(1 - probs[-1]), 4),
              "p_value": chi_square_pvalue(counts, probs), "seconds": round(time.perf_counter() - started, 1)}
    if broken:
        with BROKEN[acceptance]():
            bad = sampled_cells(target, make_drafter, prompt, kept, vocab, samples, settings, k, seed + samples,
                                acceptance)
        report["broken_p_value"] = chi_square_pvalue(bad, probs)
    return report
