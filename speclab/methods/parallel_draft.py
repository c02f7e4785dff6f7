"""Parallel drafting (PARD, An et al. 2025; vLLM's `draft_model` with `parallel_drafting`, TensorRT-LLM's
PARDDecodingConfig): a draft model that proposes K tokens in one forward pass.

The draft is a causal LM with one more token, the mask. After what it has not seen yet it reads K - 1
masks in the same pass: the last real token's logits give draft 1, the j-th mask's give draft j + 1, a
guess without the tokens between (one pass instead of K, at some loss of acceptance deeper in the block).
The masks leave the draft's cache after the pass. Each draft is drawn from the q_j its position computed,
which is what the rule divides by, so it stays exact.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from speclab.drafting import Draft, Drafter
from speclab.devices import draft_dtype
from speclab.models import load_model
from speclab.runner import model_device, runner_for
from speclab.sampling import SamplingParams, check_finite, pick
from speclab.methods.engines import Options, by_batch, no
from speclab.methods.draft_model import NAME as DRAFT_MODEL

NAME = "pard"  # TensorRT-LLM's decoding type; vLLM runs it as draft_model with parallel_drafting
MASK_KEY = "pard_token"  # the config field vLLM reads the mask token id from (llm_base_proposer.py)


def mask_token_id(model: torch.nn.Module) -> int:
    """The draft's mask token id, from its config (vLLM's `pard_token` key), or a ValueError."""
    token = getattr(model.config, MASK_KEY, None)
    if not isinstance(token, int):
        raise ValueError(f"a parallel draft's config names its mask token as {MASK_KEY}; this model has none: "
                         "train one with `python -m speclab train pard`, or pass a draft model to draft_model")
    return token


class ParallelDrafter(Drafter):
    """A PARD-style draft model: K drafts from one pass over the new tokens and K - 1 mask tokens."""

    name = NAME

    def __init__(self, model: torch.nn.Module, vocab_size: int):
        self.model = model
        self.mask = mask_token_id(model)
        if self.mask < vocab_size:
            raise ValueError(f"the mask token ({self.mask}) must lie outside the target's vocabulary "
                             f"({vocab_size} tokens), or a draft could propose it")
        self.vocab_size = vocab_size  # the target's: the logits beyond it (the mask token) are dropped
        self.runner = runner_for(model, who="parallel draft")
        self.forward_calls = 0

    @property
    def device(self) -> torch.device:
        return self.runner.device

    def start(self, prompt: torch.Tensor) -> None:
        self.runner = runner_for(self.model, who="parallel draft")  # a fresh one, on the fast path if switched on
        self.forward_calls = 0
        if len(prompt) > 1:
            self.runner.forward(prompt[:-1], last_only=True)

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        seen = self.runner.lengths[0]
        new = ids[seen:]
        masks = torch.full((k - 1,), self.mask, dtype=ids.dtype, device=ids.device)
        logits = self.runner.forward(torch.cat([new, masks]))[-k:, :self.vocab_size]
        self.forward_calls += 1
        self.runner.rollback(len(ids))  # the masks leave the cache; the real tokens stay
        check_finite(logits, "parallel draft")
        tokens, probs = zip(*(pick(row, sampling, generator) for row in logits))
        return Draft(torch.stack(tokens), None if sampling.greedy else torch.stack(probs))

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        # The drafts were never in the cache as real tokens: the next pass reads the accepted ones.
        self.runner.rollback(min(self.runner.lengths[0], len(ids) - 1))


def load_parallel_draft(target: torch.nn.Module | None, draft: torch.nn.Module | str | Path) -> ParallelDrafter:
    """A parallel drafter from a model or a directory, loaded on the target's device in the precision a
    draft model gets there (devices.draft_dtype: float16 on a CPU), so that it is timed like one."""
    if isinstance(draft, (str, Path)):
        config = json.loads((Path(draft) / "config.json").read_text())
        if MASK_KEY not in config:
            raise ValueError(f"{draft} is not a parallel draft (its config.json has no {MASK_KEY}); a plain draft "
                             "model loads with load_drafter('draft_model', target, draft=...)")
        device = model_device(target) if target is not None else torch.device("cpu")
        dtype = draft_dtype(device, target.dtype if target is not None else torch.float32)
        draft = load_model(draft, device, dtype)
    vocab = target.config.vocab_size if target is not None else mask_token_id(draft)
    return ParallelDrafter(draft, vocab)


# ---------------------------------------------------------------- engine settings
def engine_settings(engine: str, o: Options) -> dict:
    """A parallel draft's settings as `engine` takes them (speclab.serving.settings.engine_settings)."""
    path = o.path or "PARD_DIR"
    if engine == "speclab":
        return {"method": NAME, "model": path, "k": o.k, **by_batch(engine, o)}
    if engine == "vllm":  # a draft model run with K - 1 mask tokens; the mask id is read from its config
        return {"method": DRAFT_MODEL, "model": path, "num_speculative_tokens": o.k, "parallel_drafting": True,
                **by_batch(engine, o)}
    if engine == "tensorrt-llm":  # PARDDecodingConfig names the mask token itself: the config's pard_token
        mask = "MASK_TOKEN_ID" if o.mask_token_id is None else o.mask_token_id
        return {"decoding_type": "PARD", "max_draft_len": o.k, "speculative_model": path, "mask_token_id": mask,
                **by_batch(engine, o)}
    raise no(engine, "no parallel drafting: a draft model there drafts token by token")
