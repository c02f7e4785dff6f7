"""A draft model that borrows its target's embeddings and drafts over a reduced vocabulary.

A real target's vocabulary dwarfs a small draft: a draft of the target's width with its own embedding
copy and a full output layer would spend most of its weights there. So this draft reads the target's
embedding matrix and scores only the draft_vocab_size tokens most frequent in its training rows (EAGLE-3's
draft vocabulary, Li et al. 2025; `d2t` in SafeAILab/EAGLE's cnets.py). Its logits still span the target's
vocabulary (the lowest finite value outside the draft vocabulary, so q is zero there), and rejection
sampling stays exact: the residual produces what q never proposes. On disk (save): config.json,
shared_draft.json (draft vocabulary size, the target's fingerprint), model.safetensors and
target_fingerprint.json (how load_drafter finds it).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from speclab.artifacts import check_fits, fingerprint, record_target

MARKER = "shared_draft.json"


class DraftVocabHead(nn.Module):
    """The draft's output layer over its draft vocabulary: one row per kept target id (`draft_ids`),
    written into a full-vocabulary row of logits whose other entries are the dtype's lowest value."""

    def __init__(self, hidden: int, draft_ids: torch.Tensor, vocab_size: int):
        super().__init__()
        if draft_ids.ndim != 1 or len(draft_ids) > vocab_size or int(draft_ids.max()) >= vocab_size:
            raise ValueError(f"draft_ids must be distinct target ids below {vocab_size}, got {len(draft_ids)} ids "
                             f"up to {int(draft_ids.max())}")
        self.weight = nn.Parameter(torch.zeros(len(draft_ids), hidden))
        self.register_buffer("draft_ids", draft_ids.long().clone())
        self.vocab_size = vocab_size

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary only (what training reads)."""
        return nn.functional.linear(hidden, self.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        small = self.draft_logits(hidden)
        full = small.new_full((*small.shape[:-1], self.vocab_size), torch.finfo(small.dtype).min)
        return full.index_copy_(-1, self.draft_ids, small)


def share_embeddings(draft: PreTrainedModel, target: PreTrainedModel) -> None:
    """The draft reads the target's embedding matrix: the same tensor when their dtypes agree, a cast copy
    (e.g. a float16 draft beside a float32 target on a CPU) otherwise. Never trained: it is the target's."""
    embed = target.get_input_embeddings()
    dtype = next(p for n, p in draft.named_parameters() if "layers" in n).dtype
    shared = embed if embed.weight.dtype == dtype else nn.Embedding.from_pretrained(embed.weight.detach().to(dtype))
    shared.weight.requires_grad_(False)
    draft.set_input_embeddings(shared)


def own_state(draft: PreTrainedModel) -> dict[str, torch.Tensor]:
    """What the draft trains and ships: everything but the embeddings it borrows."""
    return {k: v for k, v in draft.state_dict().items() if "embed_tokens" not in k}


def save(draft: PreTrainedModel, target: PreTrainedModel, directory: str | Path,
         dtype: torch.dtype = torch.float16) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    draft.config.to_json_file(directory / "config.json")
    state = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous().cpu() for k, v in own_state(draft).items()}
    save_file(state, directory / "model.safetensors")
    (directory / MARKER).write_text(json.dumps({"draft_vocab_size": len(draft.lm_head.draft_ids),
                                                "shares_target_embeddings": True,
                                                "target_fingerprint": fingerprint(target)}, indent=1))
    record_target(directory, target)
    return directory


def is_shared_draft(directory: str | Path | None) -> bool:
    return directory is not None and (Path(directory) / MARKER).exists()


def load(directory: str | Path, target: PreTrainedModel, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """A saved shared-embedding draft beside `target` (on its device; in `dtype`, default the target's),
    refused with what to do if it was trained for another target."""
    directory = Path(directory)
    meta = json.loads((directory / MARKER).read_text())
    check_fits(meta["target_fingerprint"], target, f"the draft in {directory} was",
               "load it beside the target it was trained for, or train one for this target: "
               "python -m speclab train shared-draft --target DIR --out DIR", keys=("hidden", "vocab", "model_type"))
    config = AutoConfig.from_pretrained(directory)
    draft = AutoModelForCausalLM.from_config(config)
    state = load_file(directory / "model.safetensors")
    draft.lm_head = DraftVocabHead(config.hidden_size, state["lm_head.draft_ids"], config.vocab_size)
    missing, unexpected = draft.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if "embed_tokens" not in k]:
        raise ValueError(f"{directory / 'model.safetensors'} does not match its config.json (missing "
                         f"{[k for k in missing if 'embed_tokens' not in k][:3]}, unexpected {unexpected[:3]})")
    draft = draft.to(next(target.parameters()).device, dtype or next(target.parameters()).dtype)
    share_embeddings(draft, target)
    return draft.eval()
