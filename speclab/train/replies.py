"""The target's replies to chat conversations, batched: what the chat training rows
(speclab.train.chat_data) and the target's own passages (speclab.train.chat_requests) are made of.
On the fast path (enable_fast_path(target, max_batch=B)) speclab's own batched decoding writes them,
ragged rows and no padding; otherwise transformers' generate, with left padding."""
from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from speclab.decoding import generate
from speclab.measure.workloads import encode_chat
from speclab.runner import fast_path_of

MAX_PROMPT_TOKENS = 192


@torch.inference_mode()
def answer(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, conversations: list[list[dict]],
           max_new_tokens: int, sampled: bool, seed: int) -> list[torch.Tensor]:
    """The target's replies (ids up to its end-of-turn token or max_new_tokens), batched; each returned row
    is prompt + reply. Sampled at T = 1 or greedy; reproducible for a seed on either decoder."""
    prompts = [encode_chat(tokenizer, c)[-MAX_PROMPT_TOKENS:] for c in conversations]
    if fast_path_of(target) is not None:
        results = generate(target, prompts, max_new_tokens=max_new_tokens, temperature=1.0 if sampled else 0.0,
                           seed=seed, eos_token_id=tokenizer.eos_token_id)
        return [torch.cat([p, r.tokens.cpu()]) for p, r in zip(prompts, results)]
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = p, 1
    torch.manual_seed(seed)
    dev = next(target.parameters()).device
    out = target.generate(ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=max_new_tokens,
                          do_sample=sampled, temperature=1.0 if sampled else None, top_k=None, top_p=None,
                          pad_token_id=pad).cpu()
    rows = []
    for i, p in enumerate(prompts):
        reply = out[i, width:]
        ends = (reply == tokenizer.eos_token_id).nonzero()
        reply = reply[: int(ends[0]) + 1] if len(ends) else reply
        rows.append(torch.cat([p, reply]))
    return rows


def reply_text(tokenizer: PreTrainedTokenizerBase, conversation: list[dict], row: torch.Tensor) -> str:
    """The reply of an `answer` row as text: the row starts with the conversation's prompt, cut to its last
    MAX_PROMPT_TOKENS tokens, so a longer prompt's full length would cut into the reply."""
    prompt = len(row) - reply_length(tokenizer, conversation, row)
    return tokenizer.decode(row[prompt:], skip_special_tokens=True)


def reply_length(tokenizer: PreTrainedTokenizerBase, conversation: list[dict], row: torch.Tensor) -> int:
    """How many tokens of an `answer` row the target wrote (the row after its prompt)."""
    return len(row) - min(len(encode_chat(tokenizer, conversation)), MAX_PROMPT_TOKENS)
