"""Losslessness on a real vocabulary: the first two sampled tokens of speculative decoding against the
target's exact distribution, by chi-square, with the same check run once on a deliberately broken rule.

On a tiny model (tests/test_lossless.py) every pair (t1, t2) is a cell. With 49,152 tokens that is 2.4
billion cells, so the cells are fixed before sampling from the exact distribution alone: t1 is one of
the `top` most likely first tokens, each with every t2 as its own cell (its exact row: one target
forward per kept t1), or "any other t1", one cell. chi_square_pvalue pools the cells expected fewer
than five times. The cells depend on p only, never on the samples, so the test keeps its size.

    report = lossless_check(target, drafter, prompt, samples=1000)   # {"p_value": ..., "broken_p_value": ...}

Every sample decodes the same prompt from a fresh cache: inside replayed_passes() each model prefills it
once, and later samples get copies of the cache it filled and of its output (also of later passes that
repeat), the numbers the pass would compute again: sample for sample the same tokens, at a fraction of the
cost.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
import torch
from transformers import DynamicLayer

from speclab import verification
from speclab.decoding import speculative_generate
from speclab.measure.acceptance import chi_square_pvalue
from speclab.runner import ModelRunner
from speclab.sampling import logits_to_probs


@contextmanager
def replayed_passes(max_bytes: int = 1 << 28) -> Iterator[None]:
    """Inside the block, a model's pass on the eager path (speclab.runner.ModelRunner: a target's, a draft
    model's) runs once per history: what the runner did since its cache was fresh (its passes with their
    tokens, tree and feature layers, its rollbacks and moves). The same history leaves the same numbers in
    the cache, so a later pass with it gets copies of that pass's output and of the cache it left: what the
    model would compute again, with none of its cost (a tiny model's pass is mostly Python). Sampling many
    times from one prompt repeats its prefill every time, and on a small vocabulary most of what follows:
    the samples are the same, token for token. Entries are kept up to max_bytes of tensors; passes with
    side tokens (lookahead), runners made outside the block, and caches other than transformers' plain
    DynamicLayers (a sliding window) run as usual."""
    memo: dict[tuple, tuple] = {}
    kept = [0]
    run = {name: getattr(ModelRunner, name) for name in ("reset", "forward", "verify_pass", "move_rows", "rollback")}

    def reset(self) -> None:
        run["reset"](self)
        self.replay_history = (id(self.model),)

    @torch.inference_mode()
    def once(self, step: tuple, compute: Callable[[], object]):
        history = getattr(self, "replay_history", None)
        layers = self.cache.layers
        if history is None or any(type(layer) is not DynamicLayer for layer in layers):
            self.replay_history = None  # nothing after this is replayed: its history is not known
            return compute()
        self.replay_history = history = history + (step,)
        if history in memo:
            _, cached, out = memo[history]
            for layer, (keys, values) in zip(layers, cached):
                if not layer.is_initialized:
                    layer.lazy_initialization(keys, values)
                layer.keys, layer.values = keys.clone(), values.clone()  # move_rows writes into them
            return clone(out)
        out = compute()
        cached = [(layer.keys.clone(), layer.values.clone()) for layer in layers]
        size = sum(t.nbytes for pair in cached for t in pair) + sum(t.nbytes for t in tensors(out))
        if kept[0] + size <= max_bytes:  # the model is kept with its entry: its id names it while the block lasts
            memo[history] = (self.model, cached, clone(out))
            kept[0] += size
        return out

    def forward(self, ids, last_only=False):
        return once(self, ("pass", tuple(ids.tolist()), last_only), lambda: run["forward"](self, ids, last_only))

    def verify_pass(self, ids, parents=None, feature_layers=(), side=None):
        if side is not None:
            self.replay_history = None
            return run["verify_pass"](self, ids, parents, feature_layers, side)
        step = ("verify", tuple(ids.tolist()), parents if parents is None else tuple(parents), tuple(feature_layers))
        return once(self, step, lambda: run["verify_pass"](self, ids, parents, feature_layers, side))

    def move_rows(self, sources, start, row=0):
        run["move_rows"](self, sources, start, row)
        if getattr(self, "replay_history", None) is not None:
            self.replay_history += (("move", tuple(sources), start),)

    def rollback(self, length, row=0):
        run["rollback"](self, length, row)
        if getattr(self, "replay_history", None) is not None:
            self.replay_history += (("rollback", length),)

    with mock.patch.multiple(ModelRunner, reset=reset, forward=forward, verify_pass=verify_pass,
                             move_rows=move_rows, rollback=rollback):
        yield


def tensors(out) -> list[torch.Tensor]:
    """The tensors of a pass's output: a tensor, or a tuple of tensors and None."""
    if isinstance(out, tuple):
        return [t for o in out for t in tensors(o)]
    return [out] if isinstance(out, torch.Tensor) else []


def clone(out):
    """A copy of a pass's output."""
    if isinstance(out, tuple):
        return tuple(clone(o) for o in out)
    return out.clone() if isinstance(out, torch.Tensor) else out


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
    two_token_cells' layout. The passes run under replayed_passes: the prompt's prefill once."""
    row_of = {t: i for i, t in enumerate(kept.tolist())}
    counts = np.zeros(len(kept) * vocab + 1)
    with replayed_passes():  # k + 1 new tokens: the first round drafts all k (the loop drafts fewer near the budget)
        for s in range(samples):
            t1, t2 = speculative_generate(target, make_drafter(), prompt, k=k, max_new_tokens=k + 1, seed=seed + s,
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
