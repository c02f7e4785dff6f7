"""Drafters: whatever proposes the tokens the target verifies.

One small interface (in the spirit of transformers' CandidateGenerator): `propose` returns a Draft
for the sequence so far; `update` tells the drafter what the target accepted, so it can roll its own
state back and adapt. The decode loop knows nothing else about a drafter, so a draft model, an
n-gram lookup in the context, and (in later chapters) Medusa heads, an EAGLE head, lookahead or MTP
heads plug into the same loop.

A Draft is a chain of tokens with, where the drafter has them, the served distributions they were
drawn from. A drafter without probabilities (prompt lookup) proposes deterministically: its q is a
one-hot on the proposed token, and the rejection rule then accepts x with probability p(x).
Tree-shaped drafts (Medusa, EAGLE-2) will add a `parents` field and a tree-attention verify step;
a chain is the tree whose node i has parent i - 1.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from speclab.runner import ModelRunner
from speclab.sampling import SamplingParams, check_finite, pad_vocab, sample


@dataclass
class Draft:
    """K proposed token ids, and the (K, V) served draft distributions they came from (None: one-hot)."""

    tokens: torch.Tensor
    probs: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def vocab_width(self) -> int:
        return 0 if self.probs is None else self.probs.shape[-1]

    def proposal_probs(self, vocab_size: int) -> torch.Tensor:
        """(K, vocab_size) q for the rejection rule: the drafter's own (zero-padded to vocab_size where
        the draft's embedding matrix is narrower), or one-hot for a drafter without probabilities."""
        if self.probs is None:
            return torch.nn.functional.one_hot(self.tokens, vocab_size).float()
        return pad_vocab(self.probs, vocab_size)


class Drafter(ABC):
    """Proposes draft tokens; told after each round how many the target accepted."""

    name = "drafter"

    def start(self, prompt: torch.Tensor) -> None:  # noqa: B027 (optional hook)
        """A new sequence begins with `prompt` (1-D ids)."""

    @abstractmethod
    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        """Up to k tokens to follow `ids` (1-D: the prompt and every token generated so far)."""

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:  # noqa: B027 (optional hook)
        """After a round: `ids` is the sequence now (it ends with the target's correction or bonus
        token, which the drafter has not seen), `num_accepted` how many drafts were kept."""


class ModelDrafter(Drafter):
    """A separate, smaller causal LM that shares the target's tokenizer: the classic draft model.

    It keeps its own KV cache. Proposing feeds what it has not seen yet (the last round's
    correction, and the last draft if everything was accepted), then k - 1 of its own samples.
    """

    name = "draft model"

    def __init__(self, model: torch.nn.Module):
        self.runner = ModelRunner(model, who="draft model")
        self.forward_calls = 0

    @property
    def model(self) -> torch.nn.Module:
        return self.runner.model

    def start(self, prompt: torch.Tensor) -> None:
        self.runner.reset()
        self.forward_calls = 0

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        tokens, probs = [], []
        new = ids[self.runner.length:]
        for _ in range(k):
            logits = self.runner.forward(new, last_only=True)[-1]
            self.forward_calls += 1
            check_finite(logits, "draft model")
            q = sampling.probs(logits)
            token = sample(q, generator)
            tokens.append(token)
            probs.append(q)
            new = token.view(1)
        return Draft(torch.stack(tokens), torch.stack(probs))

    def update(self, ids: torch.Tensor, num_accepted: int) -> None:
        # Everything but the last token of ids was either seen before this round or an accepted draft.
        self.runner.rollback(min(self.runner.length, len(ids) - 1))


class PromptLookupDrafter(Drafter):
    """Prompt lookup decoding (Saxena 2023): find the latest earlier occurrence of the sequence's last
    n tokens (n from max_ngram down to min_ngram) and propose what followed it. No model, no
    probabilities; it wins where the output copies its context (code edits, summaries, retrieval)."""

    name = "prompt lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram; got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, ids: torch.Tensor, k: int, sampling: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        seq = ids.tolist()
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            tail = seq[-n:]
            # latest start i < len - n with seq[i:i+n] == tail, so at least one token follows it
            for i in range(len(seq) - n - 1, -1, -1):
                if seq[i:i + n] == tail:
                    follow = seq[i + n:i + n + k]
                    return Draft(torch.tensor(follow, dtype=torch.long, device=ids.device))
        return Draft(ids.new_empty(0))
