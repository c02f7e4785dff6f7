"""A causal LM and its KV cache: feed tokens, get logits, roll back.

This is the only place that touches the cache. Rolling back after a rejection crops the cache to
the accepted length, so a rejected token's keys and values never reach a later step. After a tree
pass the accepted path is not a suffix of what was appended, so `keep_path` first moves the path's
rows up behind the pending token (the rows `trees.kept_positions` names), then crops; for a chain
the path is already in place and the crop alone does. The public
`DynamicCache.crop` takes a negative count of tokens to drop in transformers 5 (older tutorials
pass the absolute length, which now raises); a negative count means the same in 4.x.
A static cache written by position (gpt-fast, vLLM) would replace this class, not the decode loop.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from speclab.trees import chain_parents, tree_attention_mask, tree_position_ids


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

    @torch.inference_mode()
    def verify_pass(self, ids: torch.Tensor, parents: Sequence[int] | None = None,
                    feature_layers: Sequence[int] = (), side=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One pass over [pending token, draft nodes, side tokens] (1-D `ids`), appended after the cached
        tokens: (logits (n, V), features or None). With `parents` the nodes form a tree (speclab.trees):
        each sees the cache, the pending token and its own ancestors, at position cache + depth. Without,
        they form a chain, whose tree mask is the causal mask the model builds itself. `side` (a
        drafting.SideBranch, its tokens last in `ids`) adds rows with their own mask and positions.
        `features` (n, len(feature_layers) * H) concatenates the hidden states hidden_states[layer] of
        the requested layers (-1: the last, after the final norm: what the lm_head reads)."""
        extra = {}
        if parents is not None or side is not None:
            check_tree_attention(self.model)
            cached = self.length
            parents = parents if parents is not None else chain_parents(len(ids) - 1 - len(side))
            sees, offsets = (side.sees, side.depths) if side is not None else (None, ())
            extra = dict(attention_mask=tree_attention_mask(parents, cached, self.model.dtype, self.device, sees),
                         position_ids=tree_position_ids(parents, cached, self.device, offsets))
        out = self.model(input_ids=ids.view(1, -1), past_key_values=self.cache, use_cache=True,
                         output_hidden_states=bool(feature_layers), **extra)
        features = None
        if feature_layers:
            features = torch.cat([out.hidden_states[layer][0] for layer in feature_layers], dim=-1)
        return out.logits[0], features

    def keep_path(self, cached: int, path: Sequence[int]) -> None:
        """After a pass over [pending, nodes] appended at row `cached`: keep the prefix, the pending
        token and the accepted path. A path through the first nodes in order (every chain's) is a
        prefix of what was appended, so cropping does; otherwise the path's rows are moved up to
        follow the pending token, and the rest cropped: a few rows move, not the whole cache."""
        path = list(path)
        if path != list(range(len(path))):
            self.move_rows([cached + 1 + i for i in path], cached + 1)
        self.rollback(cached + 1 + len(path))

    @torch.inference_mode()
    def move_rows(self, sources: Sequence[int], start: int) -> None:
        """Copy cache rows `sources` (in this order) to rows start, start + 1, ... in every layer."""
        src = torch.tensor(list(sources), dtype=torch.long, device=self.device)
        dst = slice(start, start + len(sources))
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            if getattr(layer, "is_sliding", False) and layer.keys.shape[-2] != layer.get_seq_length():
                raise NotImplementedError(f"{type(self.model).__name__}: its sliding-window cache has dropped old "
                                          "positions, and a tree pass cannot be gathered from it; keep prompt and "
                                          "output within the sliding window, or draft chains")
            # index_select copies the source rows first, so overlapping sources and targets are safe
            layer.keys[..., dst, :] = layer.keys.index_select(-2, src)
            layer.values[..., dst, :] = layer.values.index_select(-2, src)

    def rollback(self, length: int) -> None:
        """Forget every cached position from `length` on."""
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)


_TREE_READY: weakref.WeakSet = weakref.WeakSet()  # models that passed the check


@torch.inference_mode()
def check_tree_attention(model: torch.nn.Module) -> None:
    """Make sure `model` honours a 4-D tree mask with position ids, once per model: a 3-token prefix
    and two siblings in one tree pass must give the second sibling the logits it gets when it alone
    follows the prefix. Attention kernels that ignore custom masks (flash attention) or models that
    cannot take them fail here with an error naming the class, instead of verifying a tree wrongly."""
    if model in _TREE_READY:
        return
    name = type(model).__name__
    device = model_device(model)
    prefix, siblings = torch.tensor([[3, 5, 7]], device=device), torch.tensor([2, 4], device=device)
    try:
        cache = DynamicCache(config=model.config)
        model(input_ids=prefix[:, :-1], past_key_values=cache, use_cache=True)
        tree = torch.cat([prefix[0, -1:], siblings]).view(1, -1)
        tree_logits = model(input_ids=tree, past_key_values=cache, use_cache=True,
                            attention_mask=tree_attention_mask([-1, -1], 2, model.dtype, device),
                            position_ids=tree_position_ids([-1, -1], 2, device)).logits[0, -1]
    except Exception as error:  # noqa: BLE001 (any failure here means: no tree attention for this model)
        raise TypeError(f"{name} cannot take a 4-D attention mask with position ids ({type(error).__name__}: "
                        f"{error}); tree drafts need it: use a chain drafter, or load the model with "
                        "attn_implementation='sdpa' or 'eager'") from error
    plain = model(input_ids=torch.cat([prefix[0], siblings[1:]]).view(1, -1)).logits[0, -1]
    scale = plain.abs().max().clamp(min=1.0)
    tolerance = 1e-3 if model.dtype == torch.float32 else 5e-2
    if not torch.allclose(tree_logits.float() / scale, plain.float() / scale, atol=tolerance):
        raise TypeError(f"{name} ignores a 4-D tree attention mask (attention implementation "
                        f"{getattr(model.config, '_attn_implementation', '?')!r}): a tree pass would be verified "
                        "wrongly; load the model with attn_implementation='sdpa' or 'eager', or use a chain drafter")
    _TREE_READY.add(model)
