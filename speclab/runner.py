"""A causal LM and its KV cache: feed tokens, get logits, roll back.

This is the only place that touches the cache. Rolling back after a rejection crops the cache to
the accepted length, so a rejected token's keys and values never reach a later step. The public
`DynamicCache.crop` takes a negative count of tokens to drop in transformers 5 (older tutorials
pass the absolute length, which now raises); a negative count means the same in 4.x.
A static cache written by position (gpt-fast, vLLM) would replace this class, not the decode loop.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def context_length(model: torch.nn.Module) -> int | None:
    """The longest sequence the model was built for (max_position_embeddings), if its config says."""
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)


class ModelRunner:
    def __init__(self, model: torch.nn.Module, who: str = "model"):
        if not callable(getattr(model, "forward", None)) or not hasattr(model, "config"):
            raise TypeError(f"the {who} must be a transformers causal LM (a PreTrainedModel with a config); "
                            f"got {type(model).__name__}")
        self.model, self.who = model, who
        self.device = model_device(model)
        self.cache: DynamicCache | None = None
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)

    @property
    def length(self) -> int:
        """Tokens held in the cache."""
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Logits (n, V) for the n new tokens `ids` (1-D), appended after the cached ones.
        last_only computes the last position's logits alone (the vocabulary projection is a large
        share of a small model's step)."""
        out = self.model(input_ids=ids.view(1, -1), past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1 if last_only else 0)
        return out.logits[0]

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on."""
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)
